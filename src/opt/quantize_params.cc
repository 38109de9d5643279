// Block-quantized param storage (rlx/opt/quantize_params.h): packed types, the param rewrite
// and set_param's packing.
#include "rlx/opt/quantize_params.h"

#include <cmath>
#include <optional>
#include <vector>

#include "rlx/ir/error.h"
#include "rlx/opt/rewrite.h"

namespace rlx {
namespace {

// The binding's axis in [0, rank), or an error naming the param, its type and the axis.
int64_t resolved_axis(const TensorType& declared, const QuantizedParamBinding& b,
                      const std::string& name) {
  int64_t rank = declared.shape.rank();
  int64_t axis = b.axis < 0 ? b.axis + rank : b.axis;
  check(axis >= 0 && axis < rank, "quantized param '" + name + "' (" + declared.to_string() +
                                      "): axis " + std::to_string(b.axis) +
                                      " is out of range for rank " + std::to_string(rank));
  return axis;
}

// Sizes of the dims before the axis, the axis and the dims after it (the packed row of outer
// index o and inner index i holds elements (o, 0..axis_size-1, i)).
struct AxisSplit {
  int64_t outer = 1, size = 1, inner = 1;
};
AxisSplit split_at(const Shape& s, int64_t axis) {
  AxisSplit r;
  for (int64_t d = 0; d < s.rank(); ++d)
    (d < axis ? r.outer : d == axis ? r.size : r.inner) *= s[d];
  return r;
}

}  // namespace

TensorType quantized_param_type(const TensorType& declared, const QuantizedParamBinding& binding,
                                const std::string& name) {
  const QuantFormatInfo& info = quant_format_info(binding.format);
  std::string what = "quantized param '" + name + "' (" + declared.to_string() + " as " +
                     std::string(info.name) + ")";
  check(is_float(declared.dtype), what + ": only float params can be stored quantized");
  check(declared.shape.rank() > 0, what + ": a scalar has no axis to quantize along");
  int64_t axis = resolved_axis(declared, binding, name);
  int64_t k = declared.shape[axis];
  check(k % info.block_size == 0, what + ": axis " + std::to_string(axis) + " has " +
                                      std::to_string(k) + " elements, not a multiple of the " +
                                      "block size " + std::to_string(info.block_size));
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < declared.shape.rank(); ++d)
    if (d != axis) dims.push_back(declared.shape[d]);
  dims.push_back(quant_row_bytes(binding.format, k));
  return {DType::u8, Shape(std::move(dims))};
}

Graph quantize_params(const Graph& g,
                      const std::map<std::string, QuantizedParamBinding>& bindings) {
  std::map<std::string, const QuantizedParamBinding*> pending;
  for (const auto& [name, b] : bindings) pending[name] = &b;
  Graph dst = rewrite(g, {}, nullptr, [&](Graph& out, const Node& n) -> std::optional<Value> {
    auto bound = n.op == OpKind::Param ? pending.find(n.name) : pending.end();
    if (bound == pending.end()) return std::nullopt;
    const QuantizedParamBinding& b = *bound->second;
    const TensorType& declared = n.results[0];
    TensorType packed = quantized_param_type(declared, b, n.name);
    int64_t rank = declared.shape.rank();
    int64_t axis = resolved_axis(declared, b, n.name);
    Value v = out.add_leaf(OpKind::Param, n.name, packed);
    v = out.dequantize(v, b.format, declared.shape[axis]);
    if (axis != rank - 1) {
      // Dequantized dims: the others in order, then the axis; put the axis back in place.
      std::vector<int64_t> perm;
      for (int64_t d = 0; d < rank; ++d)
        perm.push_back(d < axis ? d : d == axis ? rank - 1 : d - 1);
      v = out.transpose(v, std::move(perm));
    }
    if (declared.dtype != DType::f32) v = out.convert(v, declared.dtype);
    pending.erase(bound);
    return v;
  });
  if (!pending.empty()) {
    std::string params;
    for (int32_t id : g.params()) params += (params.empty() ? "" : ", ") + g.node(id).name;
    throw Error("quantized_params: graph '" + g.name() + "' has no param '" +
                pending.begin()->first + "' (params: " + (params.empty() ? "none" : params) + ")");
  }
  return dst;
}

Tensor pack_quantized_param(const Tensor& value, const QuantizedParamBinding& binding,
                            const std::string& name) {
  TensorType packed = quantized_param_type(value.type(), binding, name);
  const QuantFormatInfo& info = quant_format_info(binding.format);
  check(info.has_quantizer, "quantized param '" + name + "': rlx has no " + std::string(info.name) +
                                " quantizer; bind packed u8 data (" + packed.to_string() +
                                ") instead");
  AxisSplit s = split_at(value.shape(), resolved_axis(value.type(), binding, name));
  Tensor out(DType::u8, packed.shape);
  const int64_t row_bytes = packed.shape[packed.shape.rank() - 1];
  const float* f32 = value.dtype() == DType::f32 ? value.data_as<float>() : nullptr;
  std::vector<float> row(static_cast<size_t>(s.size));
  for (int64_t o = 0; o < s.outer; ++o) {
    for (int64_t i = 0; i < s.inner; ++i) {
      for (int64_t k = 0; k < s.size; ++k) {
        int64_t flat = (o * s.size + k) * s.inner + i;
        float x = f32 ? f32[flat] : static_cast<float>(value.get_f64(flat));
        check(std::isfinite(x) || info.block_size == 1,
              "quantized param '" + name + "': element " + std::to_string(flat) + " is " +
                  std::to_string(x) + "; " + std::string(info.name) +
                  " blocks store only finite values");
        row[static_cast<size_t>(k)] = x;
      }
      quantize_row(binding.format, row.data(),
                   out.data_as<uint8_t>() + (o * s.inner + i) * row_bytes, s.size);
    }
  }
  return out;
}

}  // namespace rlx
