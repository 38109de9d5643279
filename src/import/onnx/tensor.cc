// ONNX tensors: element types, TensorProto -> rlx::Tensor (raw_data, typed fields, external
// data files), and the test data files of ONNX's backend tests.
#include <bit>
#include <cstring>
#include <filesystem>
#include <limits>

#include "importer.h"
#include "rlx/ir/error.h"

namespace rlx::onnx {
namespace detail {

namespace {

using TP = ::onnx::TensorProto;

// Element type names as ONNX spells them in "tensor(...)".
constexpr const char* kElemNames[] = {
    "undefined",      "float",      "uint8",          "int8",       "uint16",    "int16",
    "int32",          "int64",      "string",         "bool",       "float16",   "double",
    "uint32",         "uint64",     "complex64",      "complex128", "bfloat16",  "float8e4m3fn",
    "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz", "uint4",      "int4",      "float4e2m1",
    "float8e8m0",     "uint2",      "int2",           "float6e2m3", "float6e3m2"};

// Elements a tensor declares, or an error when a dim is negative or the product overflows the
// sizes rlx can hold (2^48 elements, far beyond memory; avoids int64 overflow downstream).
int64_t checked_numel(const std::vector<int64_t>& dims, const std::string& what) {
  constexpr int64_t kMax = int64_t{1} << 48;
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) throw Error(what + ": negative dim " + std::to_string(d));
    if (d != 0 && n > kMax / d)
      throw Error(what + ": declared dims " + Shape(dims).to_string() + " are too large");
    n *= d;
  }
  return n;
}

// Tensor from a typed repeated field: each element converted as the dtype stores it.
template <class Field, class Set>
Tensor from_field(DType dt, const Shape& shape, int64_t numel, const Field& field,
                  const std::string& what, const char* field_name, Set set) {
  if (static_cast<int64_t>(field.size()) != numel)
    throw Error(what + ": " + field_name + " holds " + std::to_string(field.size()) +
                " values, dims " + shape.to_string() + " need " + std::to_string(numel));
  Tensor out(dt, shape);
  for (int64_t i = 0; i < numel; ++i) set(out, i, field.Get(static_cast<int>(i)));
  return out;
}

// 16-bit floats stored as their bits in int32_data.
Tensor half_bits(DType dt, const Shape& shape, int64_t numel,
                 const google::protobuf::RepeatedField<int32_t>& f, const std::string& what) {
  return from_field(dt, shape, numel, f, what, "int32_data", [](Tensor& t, int64_t i, int32_t v) {
    uint16_t bits = static_cast<uint16_t>(v);
    std::memcpy(t.data() + i * 2, &bits, 2);
  });
}

// Resolves an external-data location against the model directory: relative, inside it.
std::string external_path(const std::string& dir, const std::string& location,
                          const std::string& what) {
  std::filesystem::path p(location);
  if (location.empty() || p.is_absolute())
    throw Error(what + ": external data location '" + location +
                "' must be a path relative to the model's directory");
  for (const auto& part : p)
    if (part == "..")
      throw Error(what + ": external data location '" + location +
                  "' leaves the model's directory");
  if (dir.empty())
    throw Error(what + ": the tensor is stored in external data file '" + location +
                "', but the model was given as bytes without a directory to find it in");
  return (std::filesystem::path(dir) / p).string();
}

Tensor external_tensor(const TP& t, DType dt, const Shape& shape, int64_t numel,
                       const std::string& what, Model::Impl* model, const std::string& dir) {
  std::string location;
  int64_t offset = 0, length = -1;
  auto parse_int = [&](const std::string& key, const std::string& v) {
    size_t used = 0;
    int64_t x = -1;
    try {
      x = std::stoll(v, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != v.size() || x < 0)
      throw Error(what + ": external data " + key + " '" + v + "' is not a non-negative integer");
    return x;
  };
  for (const auto& kv : t.external_data()) {
    if (kv.key() == "location") location = kv.value();
    if (kv.key() == "offset") offset = parse_int("offset", kv.value());
    if (kv.key() == "length") length = parse_int("length", kv.value());
  }
  if (model == nullptr) throw Error(what + ": external data is not allowed here");
  std::string path = external_path(dir, location, what);
  size_t size = 0;
  std::shared_ptr<const FileMapping> mapping = map_file(path, size);
  const auto need = static_cast<uint64_t>(numel) * static_cast<uint64_t>(dtype_size(dt));
  if (length >= 0 && static_cast<uint64_t>(length) != need)
    throw Error(what + ": external data length " + std::to_string(length) +
                " does not match dims " + shape.to_string() + " (" + std::to_string(need) +
                " bytes)");
  if (static_cast<uint64_t>(offset) > size || size - static_cast<uint64_t>(offset) < need)
    throw Error(what + ": external data file '" + path + "' has " + std::to_string(size) +
                " bytes, the tensor needs " + std::to_string(need) + " at offset " +
                std::to_string(offset));
  if (need == 0) return Tensor(dt, shape);
  model->mappings.push_back(mapping);
  const std::byte* p = mapping->bytes() + offset;
  if (offset % dtype_size(dt) == 0) return Tensor::view_of(dt, shape, p, mapping);  // zero copy
  Tensor out(dt, shape);
  std::memcpy(out.data(), p, need);
  return out;
}

}  // namespace

std::optional<DType> dtype_of(int32_t t) {
  switch (t) {
    case TP::FLOAT:
      return DType::f32;
    case TP::UINT8:
      return DType::u8;
    case TP::INT8:
      return DType::i8;
    case TP::INT32:
      return DType::i32;
    case TP::INT64:
      return DType::i64;
    case TP::BOOL:
      return DType::bool_;
    case TP::FLOAT16:
      return DType::f16;
    case TP::DOUBLE:
      return DType::f64;
    case TP::BFLOAT16:
      return DType::bf16;
    default:
      return std::nullopt;
  }
}

std::string onnx_elem_name(int32_t t) {
  if (t >= 0 && t < static_cast<int32_t>(std::size(kElemNames))) return kElemNames[t];
  return "type " + std::to_string(t);
}

Tensor decode_tensor(const TP& t, const std::string& what, const std::shared_ptr<const void>& owner,
                     Model::Impl* model, const std::string& external_dir) {
  std::optional<DType> dt = dtype_of(t.data_type());
  if (!dt)
    throw Error(what + ": element type " + onnx_elem_name(t.data_type()) +
                " is not supported by rlx (f32, f16, bf16, f64, i8, u8, i32, i64, bool)");
  std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
  const int64_t numel = checked_numel(dims, what);
  Shape shape(dims);
  if (t.has_data_location() && t.data_location() == TP::EXTERNAL)
    return external_tensor(t, *dt, shape, numel, what, model, external_dir);
  const auto esize = static_cast<uint64_t>(dtype_size(*dt));
  if (t.has_raw_data()) {
    const std::string& raw = t.raw_data();
    if (raw.size() != static_cast<uint64_t>(numel) * esize)
      throw Error(what + ": raw_data has " + std::to_string(raw.size()) + " bytes, dims " +
                  shape.to_string() + " of " + onnx_elem_name(t.data_type()) + " need " +
                  std::to_string(static_cast<uint64_t>(numel) * esize));
    if (numel == 0) return Tensor(*dt, shape);
    const auto* p = reinterpret_cast<const std::byte*>(raw.data());
    // A view of the message's own buffer when it is aligned for the element type (always, for
    // the heap strings protobuf allocates), else a copy.
    if (owner && reinterpret_cast<uintptr_t>(p) % esize == 0)
      return Tensor::view_of(*dt, shape, p, owner);
    Tensor out(*dt, shape);
    std::memcpy(out.data(), p, raw.size());
    return out;
  }
  switch (t.data_type()) {
    case TP::FLOAT:
      return from_field(*dt, shape, numel, t.float_data(), what, "float_data",
                        [](Tensor& o, int64_t i, float v) { o.data_as<float>()[i] = v; });
    case TP::DOUBLE:
      return from_field(*dt, shape, numel, t.double_data(), what, "double_data",
                        [](Tensor& o, int64_t i, double v) { o.data_as<double>()[i] = v; });
    case TP::INT64:
      return from_field(*dt, shape, numel, t.int64_data(), what, "int64_data",
                        [](Tensor& o, int64_t i, int64_t v) { o.data_as<int64_t>()[i] = v; });
    case TP::FLOAT16:
    case TP::BFLOAT16:
      return half_bits(*dt, shape, numel, t.int32_data(), what);
    default:  // INT32, INT8, UINT8, BOOL: int32_data, wrapped into the element type
      return from_field(*dt, shape, numel, t.int32_data(), what, "int32_data",
                        [](Tensor& o, int64_t i, int32_t v) { o.set_i64(i, v); });
  }
}

Value to_rank(Graph& g, Value x, int64_t rank) {
  const Shape& s = g.shape(x);
  if (s.rank() >= rank) return x;
  std::vector<int64_t> dims(static_cast<size_t>(rank - s.rank()), 1);
  dims.insert(dims.end(), s.dims().begin(), s.dims().end());
  return g.reshape(x, dims);
}

}  // namespace detail

Tensor parse_tensor_proto(std::string_view bytes, const std::string& what) {
  auto t = std::make_shared<::onnx::TensorProto>();
  if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max()) ||
      !t->ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    throw Error(what + ": not a valid serialized TensorProto (truncated or malformed protobuf)");
  return detail::decode_tensor(*t, what, t, nullptr, "");
}

std::string onnx_type_name(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "tensor(float)";
    case DType::f16:
      return "tensor(float16)";
    case DType::bf16:
      return "tensor(bfloat16)";
    case DType::f64:
      return "tensor(double)";
    case DType::i8:
      return "tensor(int8)";
    case DType::u8:
      return "tensor(uint8)";
    case DType::i32:
      return "tensor(int32)";
    case DType::i64:
      return "tensor(int64)";
    case DType::bool_:
      return "tensor(bool)";
  }
  return "tensor(unknown)";
}

}  // namespace rlx::onnx
