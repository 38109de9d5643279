// Block-quantized storage of float params (CompileOptions::quantized_params): the binding type,
// the packed layout, the graph rewrite every backend's pipeline runs first, and the packing
// set_param does when it is given the declared float data.
//
// A param p: T[d0, ..., dn] bound to {format, axis} is stored as ggml stores a weight: the
// blocks run along `axis` (the contracting axis of the matmul that reads it, so the fused
// quant_matmul kernel can consume it), i.e. the packed tensor is u8[dims without axis...,
// quant_row_bytes(format, d_axis)]: the axis is moved last and every last-axis row is one
// ggml row (rlx/ir/quant.h). In the graph p becomes that u8 param followed by
// `dequantize` (-> f32 with the axis last), a `transpose` back to p's layout when the axis was
// not last, and a `convert` to T when T is not f32; the fuse-quant-matmul pass then turns a
// matmul / dot_general that contracts the dequantized axis into `quant_matmul`, so on the CPU
// the weight is read packed by the fused kernel. This mirrors how llama.cpp keeps GGUF weights
// packed end to end; the format and axis are the binding's only data.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "rlx/ir/graph.h"
#include "rlx/ir/quant.h"
#include "rlx/ir/tensor.h"

namespace rlx {

/// How one float param is stored block-quantized.
struct QuantizedParamBinding {
  QuantFormat format = QuantFormat::kQ8_0;
  /// The axis the blocks run along: the axis the consuming matmul contracts (0 for a [in, out]
  /// weight used as x . W, -1 for ggml's [out, in] layout used as x . W^T). Negative counts
  /// from the end.
  int64_t axis = -1;
  bool operator==(const QuantizedParamBinding&) const = default;
};

/// The packed type of a param of `declared` type stored as `binding`: u8[dims of `declared`
/// without the axis, in order..., quant_row_bytes(format, declared dim(axis))]. Throws
/// rlx::Error starting "quantized param 'NAME'" (`name`) when the dtype is not a float, the
/// rank is 0, the axis is out of range, or the axis' size is not a multiple of the format's
/// block size (naming the shape, the axis and the block size).
TensorType quantized_param_type(const TensorType& declared, const QuantizedParamBinding& binding,
                                const std::string& name);

/// The graph `g` with every param named in `bindings` stored packed: the param keeps its name
/// and position among g.params() but becomes u8 (quantized_param_type), followed by
/// dequantize [-> transpose] [-> convert] nodes that give its users the declared type back.
/// `g` is unchanged; an empty map returns a copy. Throws rlx::Error for a binding naming no
/// param of `g` ("quantized_params: graph 'g' has no param 'w' (params: a, b)") and for the
/// errors of quantized_param_type.
Graph quantize_params(const Graph& g, const std::map<std::string, QuantizedParamBinding>& bindings);

/// `value` (of the param's declared float type) packed as `binding` stores it: the axis moved
/// last, each row quantized with quantize_row (llama.cpp's reference quantizers: round to
/// nearest, rlx/ir/quant.h). Returns a new u8 tensor of quantized_param_type(value.type(),
/// binding, name); `value` is unchanged. Throws rlx::Error as quantized_param_type does, for
/// a non-finite element (naming its flat index: the block formats cannot store it), and for a
/// format without a quantizer (IQ4_NL: supply packed data instead).
Tensor pack_quantized_param(const Tensor& value, const QuantizedParamBinding& binding,
                            const std::string& name);

}  // namespace rlx
