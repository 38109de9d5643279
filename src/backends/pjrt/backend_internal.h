// What the single-device backend (pjrt_backend.cc) and the SPMD backend (spmd_backend.cc)
// share: the backend's facts, its pipeline and its kernel report.
#pragma once

#include <string>

#include "rlx/opt/pipeline.h"
#include "rlx/runtime/backend_core.h"

namespace rlx::pjrt {

/// Name, device kind, native ops and the default precision (AutoMixedBf16) of the backend.
BackendFacts pjrt_facts();
/// The standard pipeline for the pjrt backend: legalize to native_ops(), DCE, fold, CSE, AMP.
PipelineResult run_pjrt_pipeline(const Graph& graph, const CompileOptions& options);
/// Every computing node of `g` as part of the one XLA executable compiled from `stablehlo`.
KernelReport kernel_report_of(const Graph& g, const std::string& stablehlo);

}  // namespace rlx::pjrt
