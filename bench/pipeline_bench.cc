// Compile-pipeline benchmark: wall time of the standard pipeline and the memory plan (arena
// peak vs the naive sum of buffers) for a BERT-style 6-layer encoder (hidden 384, 12 heads,
// FFN 1536, seq 128) at batch 1 and 32, for a backend that claims every op (fusions on) and
// one that claims only primitives (everything decomposed).
#include <chrono>
#include <cstdio>

#include "rlx/models/encoder_block.h"
#include "rlx/opt/pipeline.h"

namespace {

using namespace rlx;

void run(int64_t batch, const char* label, const PipelineOptions& o) {
  Graph g = models::build_encoder_block(models::EncoderBlockConfig::minilm(batch, 6));
  double best = 1e30;
  PipelineResult r;
  for (int rep = 0; rep < 5; ++rep) {  // best of 5: the pipeline is deterministic
    auto t0 = std::chrono::steady_clock::now();
    r = run_standard_pipeline(g, o);
    auto t1 = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::printf("%-6lld %-22s %6zu %6zu %10.2f %12.2f %12.2f %8.1fx\n", static_cast<long long>(batch),
              label, g.nodes().size(), r.graph.nodes().size(), best,
              static_cast<double>(r.plan.arena_bytes) / (1 << 20),
              static_cast<double>(r.plan.naive_bytes) / (1 << 20),
              static_cast<double>(r.plan.naive_bytes) / static_cast<double>(r.plan.arena_bytes));
}

}  // namespace

int main() {
  PipelineOptions all;  // empty supported set: every op claimed
  all.backend = "all-ops";
  PipelineOptions prims;
  prims.backend = "primitives";
  for (int i = 0; i < kNumOps; ++i)
    if (!op_info(static_cast<OpKind>(i)).has(kComposite))
      prims.supported.insert(static_cast<OpKind>(i));
  PipelineOptions bf16 = all;
  bf16.precision = parse_precision_policy("auto-mixed-bf16");
  std::printf("BERT-style encoder, 6 layers, hidden 384, 12 heads, FFN 1536, seq 128 (f32)\n");
  std::printf("%-6s %-22s %6s %6s %10s %12s %12s %9s\n", "batch", "backend", "nodes", "after",
              "pipe ms", "arena MiB", "naive MiB", "naive/ar");
  for (int64_t b : {1, 32}) {
    run(b, "all ops (fused)", all);
    run(b, "all ops + amp bf16", bf16);
    run(b, "primitives only", prims);
  }
  return 0;
}
