// Which ggml format a weight matrix gets when a format is asked for: llama.cpp's fallback for
// rows that do not fill its blocks, and the format of a GGUF tensor (private to rlx_models: the
// embedder, the Llama loader and rlx quantize share them).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "rlx/io/gguf.h"
#include "rlx/ir/error.h"
#include "rlx/ir/quant.h"

namespace rlx::models {

/// llama.cpp's replacement for a K-quant whose 256-element blocks do not divide a row
/// (llama_tensor_get_type in llama-quant.cpp): Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0; nullopt
/// for every other format (llama.cpp takes IQ4_NL for Q2_K and Q3_K, which rlx cannot quantize).
inline std::optional<QuantFormat> quant_fallback(QuantFormat requested) {
  switch (requested) {
    case QuantFormat::kQ4_K:
      return QuantFormat::kQ5_0;
    case QuantFormat::kQ5_K:
      return QuantFormat::kQ5_1;
    case QuantFormat::kQ6_K:
      return QuantFormat::kQ8_0;
    default:
      return std::nullopt;
  }
}

/// The format a matrix with rows of `row` elements is stored in when `requested` is asked for:
/// `requested` when `row` is a whole number of its blocks, else quant_fallback(requested) when
/// that fits. Throws rlx::Error "<what>: rows of 384 elements are not a multiple of the q2_K
/// block size 256" otherwise; `what` names the tensor (file, name, shape).
inline QuantFormat fitting_quant_format(QuantFormat requested, int64_t row,
                                        const std::string& what) {
  auto fits = [&](QuantFormat f) { return row % quant_format_info(f).block_size == 0; };
  if (fits(requested)) return requested;
  std::optional<QuantFormat> fallback = quant_fallback(requested);
  check(fallback && fits(*fallback),
        what + ": rows of " + std::to_string(row) + " elements are not a multiple of the " +
            std::string(quant_format_info(requested).name) + " block size " +
            std::to_string(quant_format_info(requested).block_size));
  return *fallback;
}

/// The rlx format of a GGUF tensor of ggml type `type` (F32, F16, BF16 and the block formats of
/// rlx/ir/quant.h). Throws rlx::Error "<what> has ggml type IQ2_XXS, which rlx cannot dequantize
/// (...)" for any other type; `what` names the file and the tensor.
inline QuantFormat gguf_tensor_format(GgmlType type, const std::string& what) {
  try {
    return quant_format_from_ggml_type(static_cast<int>(type));
  } catch (const Error&) {
    throw Error(what + " has ggml type " + std::string(ggml_type_info(type).name) +
                ", which rlx cannot dequantize (expected F32, F16, BF16, Q4_0 ... Q8_K, IQ4_NL)");
  }
}

}  // namespace rlx::models
