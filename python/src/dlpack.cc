// DLPack interchange (https://dmlc.github.io/dlpack/latest/): import any CPU producer (numpy,
// jax, torch) as a zero-copy numpy array over an rlx::Tensor, and export arrays as DLPack
// capsules / objects with __dlpack__. Only the unversioned "dltensor" capsule ABI is used,
// which every producer supports.
#include <pybind11/stl.h>

#include <memory>
#include <vector>

#include "bindings.h"
#include "convert.h"
#include "rlx/ir/error.h"

namespace rlx::py_bind {

namespace {

// The DLPack 0.8 ABI (dlpack.h), declared here to avoid a header dependency.
struct DLDevice {
  int32_t device_type;  // kDLCPU = 1
  int32_t device_id;
};
struct DLDataType {
  uint8_t code;  // kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4, kDLBool 6
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements; null means compact row-major
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};

constexpr int32_t kDLCPU = 1;
constexpr const char* kCapsule = "dltensor";
constexpr const char* kUsedCapsule = "used_dltensor";

DLDataType dl_dtype(DType t) {
  auto bits = static_cast<uint8_t>(dtype_size(t) * 8);
  switch (dtype_category(t)) {
    case DTypeCategory::Float:
      return {static_cast<uint8_t>(t == DType::bf16 ? 4 : 2), bits, 1};
    case DTypeCategory::SignedInt:
      return {0, bits, 1};
    case DTypeCategory::UnsignedInt:
      return {1, bits, 1};
    case DTypeCategory::Bool:
      return {6, 8, 1};
  }
  return {0, 0, 0};
}

DType from_dl_dtype(DLDataType d) {
  check(d.lanes == 1,
        "from_dlpack: vector dtypes (lanes " + std::to_string(d.lanes) + ") are not supported");
  for (int i = 0; i < kNumDTypes; ++i) {
    auto t = static_cast<DType>(i);
    DLDataType e = dl_dtype(t);
    if (e.code == d.code && e.bits == d.bits) return t;
  }
  if (d.code == 1 && d.bits == 8) return DType::u8;
  throw Error("from_dlpack: unsupported DLPack dtype (code " + std::to_string(d.code) + ", bits " +
              std::to_string(d.bits) + "); rlx takes f32, f16, bf16, f64, i8, u8, i32, i64, bool");
}

// What a capsule exported by rlx owns: the tensor (keeping the source alive) and its dims.
struct ExportCtx {
  Tensor tensor;
  std::vector<int64_t> shape;
  DLManagedTensor managed{};
};

void export_deleter(DLManagedTensor* self) { delete static_cast<ExportCtx*>(self->manager_ctx); }

py::capsule to_capsule(const Tensor& t) {
  auto* ctx = new ExportCtx{t, t.shape().dims(), {}};
  DLTensor& d = ctx->managed.dl_tensor;
  d.data = const_cast<std::byte*>(ctx->tensor.data());  // DLPack has no const data pointer
  d.device = {kDLCPU, 0};
  d.ndim = ctx->tensor.shape().rank();
  d.dtype = dl_dtype(t.dtype());
  d.shape = ctx->shape.data();
  d.strides = nullptr;  // compact row-major
  d.byte_offset = 0;
  ctx->managed.manager_ctx = ctx;
  ctx->managed.deleter = &export_deleter;
  // A capsule nobody consumed still owns the tensor; a consumer renames it and calls deleter.
  return py::capsule(&ctx->managed, kCapsule, [](PyObject* cap) {
    if (PyCapsule_IsValid(cap, kCapsule)) {
      auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, kCapsule));
      m->deleter(m);
    }
  });
}

Tensor from_capsule(const py::capsule& cap) {
  check(PyCapsule_IsValid(cap.ptr(), kCapsule),
        "from_dlpack: expected an unconsumed 'dltensor' capsule (a capsule can be used once)");
  auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap.ptr(), kCapsule));
  const DLTensor& d = m->dl_tensor;
  check(d.device.device_type == kDLCPU, "from_dlpack: tensor is on device type " +
                                            std::to_string(d.device.device_type) +
                                            ", rlx host arrays need CPU memory (type 1)");
  DType t = from_dl_dtype(d.dtype);
  Shape shape(std::vector<int64_t>(d.shape, d.shape + d.ndim));
  if (d.strides) {
    std::vector<int64_t> want = shape.strides();
    for (int i = 0; i < d.ndim; ++i)
      check(shape[i] <= 1 || d.strides[i] == want[static_cast<size_t>(i)],
            "from_dlpack: only C-contiguous tensors are supported (shape " + shape.to_string() +
                ", strides differ from row-major); make it contiguous first");
  }
  // The producer's deleter runs when the last rlx/numpy view of the data is gone.
  std::shared_ptr<DLManagedTensor> owner(m, [](DLManagedTensor* p) {
    if (!Py_IsInitialized()) return;
    py::gil_scoped_acquire gil;
    if (p->deleter) p->deleter(p);
  });
  PyCapsule_SetName(cap.ptr(), kUsedCapsule);
  const auto* data = static_cast<const std::byte*>(d.data) + d.byte_offset;
  if (shape.numel() == 0) return Tensor(t, shape);
  return Tensor::view_of(t, shape, data, std::shared_ptr<const void>(owner, owner.get()));
}

// An exported array: the Python array API's producer side (__dlpack__, __dlpack_device__).
struct DLPackTensor {
  Tensor tensor;
};

}  // namespace

void bind_dlpack(py::module_& m) {
  py::class_<DLPackTensor>(m, "DLPackTensor",
                           "An rlx host tensor exposing __dlpack__ / __dlpack_device__.")
      .def(py::init([](const py::object& arr) {
             return DLPackTensor{to_tensor(arr, std::nullopt, "DLPackTensor")};
           }),
           py::arg("array"))
      .def(
          "__dlpack__",
          [](const DLPackTensor& t, const py::object& stream, const py::kwargs&) {
            check(stream.is_none() ||
                      (py::isinstance<py::int_>(stream) && stream.cast<int64_t>() == -1),
                  "__dlpack__: stream must be None for CPU tensors");
            return to_capsule(t.tensor);
          },
          py::arg("stream") = py::none())
      .def("__dlpack_device__", [](const DLPackTensor&) { return py::make_tuple(kDLCPU, 0); })
      .def_property_readonly(
          "shape",
          [](const DLPackTensor& t) { return py::tuple(py::cast(t.tensor.shape().dims())); })
      .def_property_readonly(
          "dtype", [](const DLPackTensor& t) { return std::string(dtype_name(t.tensor.dtype())); })
      .def("numpy", [](const DLPackTensor& t) { return to_numpy(t.tensor); });

  m.def(
      "to_dlpack",
      [](const py::object& arr) { return to_capsule(to_tensor(arr, std::nullopt, "to_dlpack")); },
      py::arg("array"), "A DLPack 'dltensor' capsule over `array` (zero copy when C-contiguous).");
  m.def(
      "from_dlpack",
      [](const py::object& obj) {
        py::object cap = obj;
        if (py::hasattr(obj, "__dlpack__")) {
          if (py::hasattr(obj, "__dlpack_device__")) {
            auto dev = obj.attr("__dlpack_device__")().cast<std::pair<int, int>>();
            check(dev.first == kDLCPU, "from_dlpack: object lives on device type " +
                                           std::to_string(dev.first) +
                                           ", rlx host arrays need CPU memory (type 1)");
          }
          cap = obj.attr("__dlpack__")();
        }
        check(py::isinstance<py::capsule>(cap),
              "from_dlpack: expected an object with __dlpack__ or a DLPack capsule, got " +
                  py::repr(obj).cast<std::string>());
        return to_numpy(from_capsule(py::reinterpret_borrow<py::capsule>(cap)));
      },
      py::arg("obj"), "A numpy array sharing the memory of any CPU DLPack producer (zero copy).");
}

}  // namespace rlx::py_bind
