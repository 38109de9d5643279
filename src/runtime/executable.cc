// Executable helpers shared by every backend: IO and param validation, the typed (converting) IO.
#include "rlx/runtime/executable.h"

#include <cstring>
#include <mutex>

#include "rlx/ir/error.h"
#include "rlx/runtime/memory_limit.h"

namespace rlx {
namespace {

std::string names_of(const std::vector<IoSpec>& specs) {
  std::string s;
  for (const IoSpec& spec : specs) s += (s.empty() ? "" : ", ") + spec.name;
  return s.empty() ? "none" : s;
}

// `t` converted to `dtype` by the reference evaluator's convert op, so typed IO rounds exactly
// as a convert node would (e.g. i64 -> f32 rounds once, not through double).
Tensor convert_tensor(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  return evaluate_op(OpKind::Convert, {t}, AttrMap{{"dtype", dtype}})[0];
}

}  // namespace

const IoSpec& Executable::find_spec(const std::vector<IoSpec>& specs, const std::string& name,
                                    std::string_view what, std::string_view kind) {
  for (const IoSpec& spec : specs)
    if (spec.name == name) return spec;
  throw Error(std::string(what) + ": unknown " + std::string(kind) + " '" + name + "' (" +
              std::string(kind) + "s: " + names_of(specs) + ")");
}

struct AsyncResult::State {
  std::mutex mu;
  std::unique_ptr<Pending> pending;  // null once every output is on the host (or none was)
  std::vector<std::optional<Tensor>> outputs;
  size_t fetched = 0;
  std::string label;
  std::optional<std::string> error;  // the run's error, thrown again at every read
  bool waited = false;

  // Throws the run's error (kept), or runs `f` and keeps what it throws.
  template <class F>
  void guarded(F&& f) {
    if (error) throw Error(*error);
    try {
      f();
    } catch (const std::exception& e) {
      error = label + " failed: " + e.what();
      pending.reset();  // frees the device buffers; every later read throws `error`
      throw Error(*error);
    }
  }
};

AsyncResult::AsyncResult() : s_(std::make_unique<State>()) {}

AsyncResult::AsyncResult(std::vector<Tensor> outputs) : s_(std::make_unique<State>()) {
  for (Tensor& t : outputs) s_->outputs.emplace_back(std::move(t));
  s_->fetched = s_->outputs.size();
  s_->waited = true;
}

AsyncResult::AsyncResult(std::unique_ptr<Pending> pending, size_t count, std::string label)
    : s_(std::make_unique<State>()) {
  s_->pending = std::move(pending);
  s_->outputs.resize(count);
  s_->label = std::move(label);
  if (count == 0) s_->waited = s_->pending == nullptr;
}

AsyncResult::~AsyncResult() = default;
AsyncResult::AsyncResult(AsyncResult&&) noexcept = default;
AsyncResult& AsyncResult::operator=(AsyncResult&&) noexcept = default;

size_t AsyncResult::size() const { return s_->outputs.size(); }

const std::string& AsyncResult::label() const { return s_->label; }

const Tensor& AsyncResult::output(size_t index) {
  State& s = *s_;
  std::lock_guard<std::mutex> lock(s.mu);
  check(index < s.outputs.size(), "AsyncResult: output " + std::to_string(index) +
                                      " of a run with " + std::to_string(s.outputs.size()) +
                                      " outputs");
  if (!s.outputs[index]) {
    s.guarded([&] {
      s.outputs[index] = s.pending->fetch(index);
      s.waited = true;
      // Every output on the host: the device buffers are no longer needed.
      if (++s.fetched == s.outputs.size()) s.pending.reset();
    });
  }
  return *s.outputs[index];
}

std::vector<Tensor> AsyncResult::outputs() {
  std::vector<Tensor> out;
  out.reserve(size());
  for (size_t i = 0; i < size(); ++i) out.push_back(output(i));
  return out;
}

void AsyncResult::block_until_ready() {
  State& s = *s_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.error) throw Error(*s.error);
  if (s.waited || s.pending == nullptr) return;
  s.guarded([&] {
    s.pending->wait();
    s.waited = true;
  });
}

AsyncResult Executable::run_async(const TensorMap& inputs) { return AsyncResult(run(inputs)); }

const KernelReport& Executable::kernels() const {
  static const KernelReport empty;
  return empty;
}

ExecutionProfile Executable::profile() const { return {}; }

PlannedMemory Executable::planned_memory() const { return {}; }

size_t check_param_binding(const std::vector<IoSpec>& params, const std::string& name,
                           const Tensor& value) {
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].name != name) continue;
    const std::optional<QuantizedStorage>& q = params[i].quantized;
    if (value.type() == params[i].type || (q && value.type() == q->declared)) return i;
    throw Error("set_param '" + name + "': expected " + params[i].type.to_string() +
                (q ? " (" + std::string(quant_format_info(q->binding.format).name) +
                         " packed) or " + q->declared.to_string()
                   : std::string()) +
                ", got " + value.type().to_string());
  }
  throw Error("set_param: unknown param '" + name + "' (params: " + names_of(params) + ")");
}

void check_run_inputs(const std::vector<IoSpec>& specs, const TensorMap& inputs,
                      const std::vector<StateSpec>& state) {
  // The messages are built only on failure: this runs on every call, where a tiny graph's whole
  // run costs about a microsecond.
  for (const auto& [name, t] : inputs) {
    const IoSpec* spec = nullptr;
    for (const IoSpec& s : specs)
      if (s.name == name) spec = &s;
    if (spec == nullptr) {
      for (const StateSpec& st : state)
        if (st.name == name)
          throw Error("run: '" + name +
                      "' is state of this executable (set it with set_state), not a run input");
      throw Error("run: unknown input '" + name + "' (inputs: " + names_of(specs) + ")");
    }
    if (!(t.type() == spec->type))
      throw Error("run: input '" + name + "': expected " + spec->type.to_string() + ", got " +
                  t.type().to_string());
  }
  for (const IoSpec& s : specs)
    if (inputs.count(s.name) == 0)
      throw Error("run: missing input '" + s.name + "' (" + s.type.to_string() + ")");
}

size_t check_state_access(const std::vector<StateSpec>& state, const std::string& name,
                          std::string_view what, const Tensor* value) {
  for (size_t i = 0; i < state.size(); ++i) {
    if (state[i].name != name) continue;
    if (value != nullptr && !(value->type() == state[i].type))
      throw Error(std::string(what) + " '" + name + "': expected " + state[i].type.to_string() +
                  ", got " + value->type().to_string());
    return i;
  }
  std::string names;
  for (const StateSpec& st : state) names += (names.empty() ? "" : ", ") + st.name;
  throw Error(std::string(what) + ": unknown state '" + name +
              "' (state: " + (names.empty() ? "none" : names) + ")");
}

void check_params_set(const std::vector<IoSpec>& params,
                      const std::function<bool(size_t)>& is_set) {
  for (size_t i = 0; i < params.size(); ++i)
    if (!is_set(i))
      throw Error("run: param '" + params[i].name + "' (" + params[i].type.to_string() +
                  ") was never set");
}

void Executable::set_param_typed(const std::string& name, DType dtype, const Shape& shape,
                                 std::span<const std::byte> bytes) {
  const IoSpec& spec = find_spec(params(), name, "set_param_typed", "param");
  // A quantized param takes its packed bytes as they are or data of its declared shape.
  const TensorType& target =
      spec.quantized && shape != spec.type.shape ? spec.quantized->declared : spec.type;
  check(shape == target.shape, "set_param_typed '" + name + "': expected shape " +
                                   target.shape.to_string() + ", got " + shape.to_string());
  // The byte count is checked before the bytes are touched; copying them into a tensor of its
  // own also aligns data that sit at an arbitrary offset of a file.
  Tensor copy(dtype, shape);
  check(bytes.size() == copy.nbytes(),
        "set_param_typed '" + name + "': " + std::to_string(bytes.size()) + " bytes for " +
            copy.type().to_string() + ", which needs " + std::to_string(copy.nbytes()));
  if (!bytes.empty()) std::memcpy(copy.data(), bytes.data(), bytes.size());
  set_param(name, convert_tensor(copy, target.dtype));
}

std::vector<Tensor> Executable::run_typed(const TensorMap& inputs,
                                          std::optional<DType> output_dtype) {
  // Every input is checked before any is converted, so an error costs no conversion work.
  std::vector<DType> declared;
  for (const auto& [name, t] : inputs) {
    const IoSpec& spec = find_spec(this->inputs(), name, "run_typed", "input");
    check(t.shape() == spec.type.shape, "run_typed: input '" + name + "': expected shape " +
                                            spec.type.shape.to_string() + ", got " +
                                            t.shape().to_string());
    declared.push_back(spec.type.dtype);
  }
  TensorMap converted;
  size_t i = 0;
  for (const auto& [name, t] : inputs) converted.emplace(name, convert_tensor(t, declared[i++]));
  std::vector<Tensor> outs = run(converted);
  if (output_dtype)
    for (Tensor& o : outs) o = convert_tensor(o, *output_dtype);
  return outs;
}

}  // namespace rlx
