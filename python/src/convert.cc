// Conversions shared by the binding families: dtypes, numpy arrays <-> rlx::Tensor, attributes.
#include "convert.h"

#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <vector>

#include "rlx/ir/error.h"
#include "rlx/ir/graph.h"

namespace rlx::py_bind {

namespace {

// numpy's names of the rlx dtypes, in DType order (f32, f16, bf16, f64, i8, u8, i32, i64, bool).
constexpr const char* kNumpyNames[kNumDTypes] = {
    "float32", "float16", "bfloat16", "float64", "int8", "uint8", "int32", "int64", "bool"};

std::string py_repr(const py::handle& obj) { return py::repr(obj).cast<std::string>(); }

// The ml_dtypes bfloat16 numpy dtype, imported once.
py::dtype bf16_dtype() {
  // Leaked on purpose: a static py::object would be released after the interpreter is gone.
  static PyObject* cached = nullptr;
  if (cached == nullptr) {
    try {
      cached =
          py::dtype::from_args(py::module_::import("ml_dtypes").attr("bfloat16")).release().ptr();
    } catch (py::error_already_set&) {
      throw Error("bf16 arrays need the ml_dtypes package (pip install ml_dtypes)");
    }
  }
  return py::reinterpret_borrow<py::dtype>(cached);
}

// The rlx dtype of a numpy dtype from its kind and size (no string work: this runs per input
// on every run() call); nullopt for dtypes rlx lacks and for non-native byte order.
std::optional<DType> from_numpy_dtype(const py::dtype& d) {
  if (py::detail::array_descriptor_proxy(d.ptr())->byteorder == '>') return std::nullopt;
  switch (d.kind()) {
    case 'b':
      return DType::bool_;
    case 'i':
      switch (d.itemsize()) {
        case 1:
          return DType::i8;
        case 4:
          return DType::i32;
        case 8:
          return DType::i64;
        default:
          return std::nullopt;
      }
    case 'u':
      return d.itemsize() == 1 ? std::optional<DType>(DType::u8) : std::nullopt;
    case 'f':
      switch (d.itemsize()) {
        case 2:
          return DType::f16;
        case 4:
          return DType::f32;
        case 8:
          return DType::f64;
        default:
          return std::nullopt;
      }
    default:
      break;
  }
  // ml_dtypes.bfloat16 is a user dtype; compare with it only when ml_dtypes is loaded.
  if (d.itemsize() == 2 && PyDict_GetItemString(PySys_GetObject("modules"), "ml_dtypes") &&
      d.is(bf16_dtype()))
    return DType::bf16;
  return std::nullopt;
}

std::optional<DType> from_numpy_name(const std::string& name) {
  for (int i = 0; i < kNumDTypes; ++i)
    if (name == kNumpyNames[i]) return static_cast<DType>(i);
  return std::nullopt;
}

// Drops a Python reference from whatever thread releases the last owner of a tensor view.
// Takes over one reference (not copyable, so it is released exactly once).
struct PyRefOwner {
  explicit PyRefOwner(PyObject* o) : obj(o) {}
  PyRefOwner(const PyRefOwner&) = delete;
  PyRefOwner& operator=(const PyRefOwner&) = delete;
  PyObject* obj;
  ~PyRefOwner() {
    if (!Py_IsInitialized()) return;  // interpreter gone at exit: nothing left to release
    py::gil_scoped_acquire gil;
    Py_DECREF(obj);
  }
};

std::vector<int64_t> int_list(const py::handle& value, const std::string& what) {
  if (py::isinstance<py::str>(value) || !py::isinstance<py::sequence>(value))
    throw Error(what + ": expected a list of ints, got " + py_repr(value));
  std::vector<int64_t> out;
  for (auto item : value) {
    if (!py::isinstance<py::int_>(item) &&
        !py::isinstance(item, py::module_::import("numpy").attr("integer")))
      throw Error(what + ": expected a list of ints, got " + py_repr(value));
    out.push_back(item.cast<int64_t>());
  }
  return out;
}

}  // namespace

DType to_dtype(const py::handle& obj) {
  if (py::isinstance<py::str>(obj)) {
    auto name = obj.cast<std::string>();
    if (auto t = parse_dtype(name)) return *t;
    if (auto t = from_numpy_name(name)) return *t;
  }
  if (!obj.is_none()) {
    try {
      if (auto t = from_numpy_dtype(py::dtype::from_args(py::reinterpret_borrow<py::object>(obj))))
        return *t;
    } catch (py::error_already_set&) {
      // not dtype-like: reported below
    }
  }
  throw Error("unknown dtype " + py_repr(obj) +
              " (expected one of f32, f16, bf16, f64, i8, u8, i32, i64, bool or the numpy dtype)");
}

py::dtype numpy_dtype(DType t) {
  if (t == DType::bf16) return bf16_dtype();
  // Built once: parsing a dtype name per result costs more than a tiny graph's run.
  // Leaked on purpose, like bf16_dtype's.
  static PyObject** cached = [] {
    auto** v = new PyObject*[kNumDTypes];
    for (int i = 0; i < kNumDTypes; ++i)
      v[i] = static_cast<DType>(i) == DType::bf16 ? nullptr
                                                  : py::dtype(kNumpyNames[i]).release().ptr();
    return v;
  }();
  return py::reinterpret_borrow<py::dtype>(cached[static_cast<int>(t)]);
}

py::array to_numpy(const Tensor& t) {
  std::vector<py::ssize_t> shape(t.shape().dims().begin(), t.shape().dims().end());
  std::vector<py::ssize_t> strides;
  for (int64_t s : t.shape().strides()) strides.push_back(s * dtype_size(t.dtype()));
  if (t.numel() == 0) return py::array(numpy_dtype(t.dtype()), shape, strides);
  auto* keep = new Tensor(t);  // shares storage; freed with the array
  py::capsule base(keep, [](void* p) { delete static_cast<Tensor*>(p); });
  return py::array(numpy_dtype(t.dtype()), shape, strides, keep->data(), base);
}

Tensor to_tensor(const py::handle& obj, std::optional<DType> want, const std::string& what,
                 bool* borrowed, bool keep_alive) {
  py::array arr;
  if (py::isinstance<py::array>(obj)) {
    arr = py::reinterpret_borrow<py::array>(obj);
  } else {
    py::module_ np = py::module_::import("numpy");
    arr = want ? np.attr("asarray")(obj, numpy_dtype(*want)) : np.attr("asarray")(obj);
  }
  std::optional<DType> dt = from_numpy_dtype(arr.dtype());
  if (!dt)
    throw Error(what + ": unsupported numpy dtype " + py::str(arr.dtype()).cast<std::string>() +
                " (rlx takes f32, f16, bf16, f64, i8, u8, i32, i64, bool in native byte order)");
  if (want && *dt != *want)
    throw Error(what + ": expected dtype " + std::string(dtype_name(*want)) + ", got " +
                std::string(dtype_name(*dt)));
  std::vector<int64_t> dims(arr.shape(), arr.shape() + arr.ndim());
  Shape shape(dims);
  int flags = py::detail::array_proxy(arr.ptr())->flags;
  bool contiguous = (flags & py::detail::npy_api::NPY_ARRAY_C_CONTIGUOUS_) != 0;
  bool aligned = (flags & py::detail::npy_api::NPY_ARRAY_ALIGNED_) != 0;
  if (contiguous && aligned && arr.size() > 0) {
    if (borrowed) *borrowed = true;
    if (!keep_alive && arr.ptr() == obj.ptr())  // the caller's object outlives the tensor
      return Tensor::borrow(*dt, shape, static_cast<const std::byte*>(arr.data()));
    auto owner = std::make_shared<PyRefOwner>(arr.inc_ref().ptr());
    return Tensor::view_of(*dt, shape, static_cast<const std::byte*>(arr.data()),
                           std::shared_ptr<const void>(owner, owner.get()));
  }
  if (borrowed) *borrowed = false;
  Tensor t(*dt, shape);
  if (t.numel() > 0) {
    py::array c = py::module_::import("numpy").attr("ascontiguousarray")(arr);
    std::memcpy(t.data(), c.data(), t.nbytes());
  }
  return t;
}

Attr to_attr(const OpInfo& op, const std::string& name, const py::handle& value) {
  std::string what = "op '" + std::string(op.name) + "': attribute '" + name + "'";
  const AttrSpec* spec = op.find_attr(name);
  if (spec) {
    switch (spec->type) {
      case AttrType::Int:
        if (py::isinstance<py::bool_>(value) || !py::isinstance<py::int_>(value))
          throw Error(what + ": expected an int, got " + py_repr(value));
        return value.cast<int64_t>();
      case AttrType::Float:
        if (!py::isinstance<py::int_>(value) && !py::isinstance<py::float_>(value))
          throw Error(what + ": expected a float, got " + py_repr(value));
        return value.cast<double>();
      case AttrType::Bool:
        if (!py::isinstance<py::bool_>(value))
          throw Error(what + ": expected a bool, got " + py_repr(value));
        return value.cast<bool>();
      case AttrType::String:
        if (!py::isinstance<py::str>(value))
          throw Error(what + ": expected a string, got " + py_repr(value));
        return value.cast<std::string>();
      case AttrType::Ints:
        return int_list(value, what);
      case AttrType::DType:
        return to_dtype(value);
      case AttrType::Tensor:
        return to_tensor(value, std::nullopt, what).clone();
      case AttrType::Graph:
        return std::make_shared<const Graph>(value.cast<const Graph&>());
      case AttrType::Graphs: {
        GraphList gs;
        for (const py::handle& item : value.cast<py::sequence>())
          gs.push_back(std::make_shared<const Graph>(item.cast<const Graph&>()));
        return gs;
      }
    }
  }
  // Unknown attribute: keep its Python type so validate_attrs names it ("unknown attribute").
  if (py::isinstance<py::bool_>(value)) return value.cast<bool>();
  if (py::isinstance<py::int_>(value)) return value.cast<int64_t>();
  if (py::isinstance<py::float_>(value)) return value.cast<double>();
  if (py::isinstance<py::str>(value)) return value.cast<std::string>();
  return int_list(value, what);
}

PrecisionPolicy to_precision(const std::string& text) {
  if (text == "f32" || text == "f16" || text == "bf16")
    return parse_precision_policy("always-" + text);
  return parse_precision_policy(text);
}

py::object from_attr(const Attr& a) {
  return std::visit(
      [](const auto& v) -> py::object {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, DType>) {
          return py::str(std::string(dtype_name(v)));
        } else if constexpr (std::is_same_v<T, Tensor>) {
          return to_numpy(v);
        } else if constexpr (std::is_same_v<T, std::shared_ptr<const Graph>>) {
          return py::cast(Graph(*v));
        } else if constexpr (std::is_same_v<T, GraphList>) {
          py::list out;
          for (const GraphRef& g : v) out.append(py::cast(Graph(*g)));
          return out;
        } else {
          return py::cast(v);
        }
      },
      a);
}

}  // namespace rlx::py_bind
