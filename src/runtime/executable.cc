// Executable helpers shared by every backend: IO validation and the typed (converting) IO.
#include "rlx/runtime/executable.h"

#include <set>

#include "rlx/ir/error.h"

namespace rlx {
namespace {

std::string names_of(const std::vector<IoSpec>& specs) {
  std::string s;
  for (const IoSpec& spec : specs) s += (s.empty() ? "" : ", ") + spec.name;
  return s.empty() ? "none" : s;
}

// `t` converted to `dtype` element by element with the convert op's semantics (the same
// conversions Tensor::set_f64 / set_i64 apply).
Tensor convert_tensor(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  Tensor out(dtype, t.shape());
  bool exact_int = !is_float(t.dtype());
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (exact_int)
      out.set_i64(i, t.get_i64(i));
    else
      out.set_f64(i, t.get_f64(i));
  }
  return out;
}

}  // namespace

const IoSpec& Executable::find_spec(const std::vector<IoSpec>& specs, const std::string& name,
                                    std::string_view what, std::string_view kind) {
  for (const IoSpec& spec : specs)
    if (spec.name == name) return spec;
  throw Error(std::string(what) + ": unknown " + std::string(kind) + " '" + name + "' (" +
              std::string(kind) + "s: " + names_of(specs) + ")");
}

void check_run_inputs(const std::vector<IoSpec>& specs, const TensorMap& inputs) {
  for (const auto& [name, t] : inputs) {
    const IoSpec* spec = nullptr;
    for (const IoSpec& s : specs)
      if (s.name == name) spec = &s;
    check(spec != nullptr,
          "run: unknown input '" + name + "' (inputs: " + names_of(specs) + ")");
    check(t.type() == spec->type, "run: input '" + name + "': expected " +
                                      spec->type.to_string() + ", got " + t.type().to_string());
  }
  for (const IoSpec& s : specs)
    check(inputs.count(s.name) != 0,
          "run: missing input '" + s.name + "' (" + s.type.to_string() + ")");
}

void Executable::set_param_typed(const std::string& name, DType dtype, const Shape& shape,
                                 std::span<const std::byte> bytes) {
  const IoSpec& spec = find_spec(params(), name, "set_param_typed", "param");
  check(shape == spec.type.shape, "set_param_typed '" + name + "': expected shape " +
                                      spec.type.shape.to_string() + ", got " + shape.to_string());
  Tensor view = Tensor::borrow(dtype, shape, bytes.data());
  check(bytes.size() == view.nbytes(),
        "set_param_typed '" + name + "': " + std::to_string(bytes.size()) + " bytes for " +
            view.type().to_string() + ", which needs " + std::to_string(view.nbytes()));
  Tensor owned = dtype == spec.type.dtype ? view.clone() : convert_tensor(view, spec.type.dtype);
  set_param(name, owned);
}

std::vector<Tensor> Executable::run_typed(const TensorMap& inputs,
                                          std::optional<DType> output_dtype) {
  TensorMap converted;
  for (const auto& [name, t] : inputs) {
    const IoSpec& spec = find_spec(this->inputs(), name, "run_typed", "input");
    check(t.shape() == spec.type.shape, "run_typed: input '" + name + "': expected shape " +
                                            spec.type.shape.to_string() + ", got " +
                                            t.shape().to_string());
    converted.emplace(name, convert_tensor(t, spec.type.dtype));
  }
  std::vector<Tensor> outs = run(converted);
  if (output_dtype)
    for (Tensor& o : outs) o = convert_tensor(o, *output_dtype);
  return outs;
}

}  // namespace rlx
