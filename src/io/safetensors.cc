// safetensors: validating mmap reader and atomic writer (format in rlx/io/safetensors.h).
#include "rlx/io/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string_view>

#include "mapped_file.h"
#include "rlx/io/atomic_file.h"
#include "rlx/ir/error.h"

namespace rlx {
namespace {

// The format is little-endian; rlx tensors hold host-order elements and are written as is.
static_assert(std::endian::native == std::endian::little, "rlx io assumes a little-endian host");

using Json = nlohmann::json;
using io_detail::invalid_utf8_at;
using io_detail::Mapping;

// The reference implementation's cap on N (MAX_HEADER_SIZE in safetensors/src/tensor.rs).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
// A valid header nests 3 deep (object, entry, shape); the cap only bounds the parser's memory
// on hostile input such as 50 MB of '['.
constexpr int kMaxJsonDepth = 64;
constexpr uint64_t kMaxInt64 = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
constexpr std::string_view kMetadataKey = "__metadata__";

// Every dtype safetensors 0.8.0 accepts, with its size in bits (F4/F6 are packed) and the rlx
// dtype it maps to, if any.
struct DTypeInfo {
  std::string_view name;
  uint64_t bits;
  std::optional<DType> rlx;
};
constexpr DTypeInfo kDTypes[] = {
    {"BOOL", 8, DType::bool_},
    {"U8", 8, DType::u8},
    {"I8", 8, DType::i8},
    {"F16", 16, DType::f16},
    {"BF16", 16, DType::bf16},
    {"I32", 32, DType::i32},
    {"F32", 32, DType::f32},
    {"F64", 64, DType::f64},
    {"I64", 64, DType::i64},
    {"F4", 4, std::nullopt},
    {"F6_E2M3", 6, std::nullopt},
    {"F6_E3M2", 6, std::nullopt},
    {"F8_E5M2", 8, std::nullopt},
    {"F8_E4M3", 8, std::nullopt},
    {"F8_E8M0", 8, std::nullopt},
    {"F8_E4M3FNUZ", 8, std::nullopt},
    {"F8_E5M2FNUZ", 8, std::nullopt},
    {"I16", 16, std::nullopt},
    {"U16", 16, std::nullopt},
    {"U32", 32, std::nullopt},
    {"C64", 64, std::nullopt},
    {"U64", 64, std::nullopt},
};

const DTypeInfo* find_dtype(std::string_view name) {
  for (const DTypeInfo& d : kDTypes)
    if (d.name == name) return &d;
  return nullptr;
}

std::string_view stored_name(DType t) {
  for (const DTypeInfo& d : kDTypes)
    if (d.rlx == t) return d.name;
  throw Error("safetensors: no safetensors name for dtype " + std::string(dtype_name(t)));
}

std::string all_dtype_names() {
  std::string s;
  for (const DTypeInfo& d : kDTypes) s += (s.empty() ? "" : ", ") + std::string(d.name);
  return s;
}

/// "a string", "an array", ... for messages about a JSON value of the wrong kind.
std::string kind_of(const Json& v) {
  switch (v.type()) {
    case Json::value_t::object:
      return "an object";
    case Json::value_t::array:
      return "an array";
    case Json::value_t::string:
      return "a string";
    case Json::value_t::boolean:
      return "a boolean";
    case Json::value_t::null:
      return "null";
    default:
      return "a number";
  }
}

/// A JSON value for a message, cut short: values come from the file and may be huge.
std::string excerpt(const Json& v) {
  std::string s = v.dump();
  return s.size() <= 40 ? s : s.substr(0, 37) + "...";
}

/// A non-negative JSON integer that fits in int64 (dims and offsets both must); `what` names
/// the value in the message, which `prefix` starts.
uint64_t nonneg_int(const Json& v, const std::string& prefix, const std::string& what) {
  if (v.is_number_unsigned()) {
    auto u = v.get<uint64_t>();
    if (u > kMaxInt64)
      throw Error(prefix + what + " is " + std::to_string(u) + ", larger than 2^63 - 1");
    return u;
  }
  if (v.is_number_integer()) {  // only negative values (and -0) are parsed as signed
    auto i = v.get<int64_t>();
    if (i < 0)
      throw Error(prefix + what + " is " + std::to_string(i) + ", expected a non-negative integer");
    return 0;
  }
  throw Error(prefix + what + " is " +
              (v.is_number_float() ? excerpt(v) + ", not an integer" : kind_of(v)) +
              "; expected a non-negative integer");
}

/// Parses the header text with nlohmann, rejecting a key that appears twice in one object
/// (nlohmann would keep the last silently) and nesting beyond kMaxJsonDepth. `top_keys` gets
/// the keys of the top-level object in header order (nlohmann's object sorts them).
Json parse_header(const std::string& path, std::string_view text,
                  std::vector<std::string>& top_keys) {
  struct Object {
    std::set<std::string> keys;
    std::string last_key;
  };
  std::vector<Object> open_objects;
  auto callback = [&](int depth, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
      case Json::parse_event_t::array_start:
        if (depth >= kMaxJsonDepth)
          throw Error(path + ": header nests deeper than " + std::to_string(kMaxJsonDepth) +
                      " levels");
        if (event == Json::parse_event_t::object_start) open_objects.emplace_back();
        break;
      case Json::parse_event_t::object_end:
        open_objects.pop_back();
        break;
      case Json::parse_event_t::key: {
        // A key event always belongs to the innermost open object.
        Object& obj = open_objects.back();
        auto key = parsed.get<std::string>();
        if (depth == 1) top_keys.push_back(key);
        if (!obj.keys.insert(key).second) {
          if (open_objects.size() == 1)
            throw Error(path + ": header has the key '" + key + "' twice");
          throw Error(path + ": header entry '" + open_objects[open_objects.size() - 2].last_key +
                      "' has the key '" + key + "' twice");
        }
        obj.last_key = std::move(key);
        break;
      }
      default:
        break;
    }
    return true;
  };
  // nlohmann stops at a NUL byte as if the input ended there, which would accept anything
  // after it; raw NUL is never valid JSON (inside a string it must be escaped).
  size_t nul = text.find('\0');
  check(nul == std::string_view::npos,
        path + ": header is not valid JSON at file byte " + std::to_string(8 + nul) + ": NUL byte");
  try {
    return Json::parse(text.begin(), text.end(), callback);
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte is the 1-based position of the last character read; report a file offset.
    std::string msg = e.what();
    size_t colon = msg.find(": ");
    msg = colon == std::string::npos ? msg : msg.substr(colon + 2);
    if (msg.size() > 200) msg = msg.substr(0, 197) + "...";
    throw Error(path + ": header is not valid JSON at file byte " +
                std::to_string(8 + std::max<size_t>(e.byte, 1) - 1) + ": " + msg);
  } catch (const nlohmann::json::exception& e) {  // e.g. a number too large for a double
    throw Error(path + ": header is not valid JSON: " + e.what());
  }
}

uint64_t read_u64_le(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint64_t>(p[i]);
  return v;
}

}  // namespace

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  size_t file_size = 0;
  std::shared_ptr<const Mapping> mapping = io_detail::map_file(path, file_size);
  const std::byte* bytes = mapping ? mapping->bytes() : nullptr;
  return parse(path, std::move(mapping), bytes, file_size);
}

SafetensorsFile SafetensorsFile::from_bytes(std::string_view bytes, const std::string& name) {
  auto copy = std::make_shared<const std::string>(bytes);
  const auto* data = reinterpret_cast<const std::byte*>(copy->data());
  return parse(name, std::move(copy), data, bytes.size());
}

SafetensorsFile SafetensorsFile::parse(const std::string& path, std::shared_ptr<const void> owner,
                                       const std::byte* bytes, size_t file_size) {
  SafetensorsFile f;
  f.path_ = path;
  f.mapping_ = std::move(owner);
  if (file_size < 8)
    throw Error(path + ": file has " + std::to_string(file_size) +
                " bytes, fewer than the 8-byte header length that starts a safetensors file");

  uint64_t n = read_u64_le(bytes);
  check(n <= kMaxHeaderBytes, path + ": header length " + std::to_string(n) +
                                  " (file bytes 0..7) exceeds the limit of " +
                                  std::to_string(kMaxHeaderBytes) + " bytes");
  check(n <= file_size - 8, path + ": header length " + std::to_string(n) +
                                " (file bytes 0..7) runs past the end of the file: the header "
                                "would end at byte " +
                                std::to_string(8 + n) + " but the file has " +
                                std::to_string(file_size) + " bytes");
  std::string_view text(reinterpret_cast<const char*>(bytes + 8), n);
  size_t bad = invalid_utf8_at(text);
  check(bad == std::string_view::npos,
        path + ": header is not valid UTF-8 at file byte " + std::to_string(8 + bad));
  std::vector<std::string> header_order;
  Json header = parse_header(path, text, header_order);
  check(header.is_object(), path + ": header is " + kind_of(header) +
                                ", expected an object mapping tensor names to entries");

  const size_t data_start = 8 + n;
  const size_t data_size = file_size - data_start;
  f.data_ = bytes + data_start;
  auto file_range = [&](uint64_t b, uint64_t e) {
    return " (file bytes " + std::to_string(data_start + b) + ".." +
           std::to_string(data_start + e) + ")";
  };

  for (const std::string& name : header_order) {
    const Json& value = header.at(name);
    if (name == kMetadataKey) {
      check(value.is_object(),
            path + ": __metadata__ is " + kind_of(value) + ", expected an object of string values");
      for (const auto& [k, v] : value.items()) {
        if (!v.is_string())
          throw Error(path + ": __metadata__ value of key '" + k + "' is " + kind_of(v) +
                      ", expected a string");
        f.metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    const std::string where = path + ": tensor '" + name + "': ";
    check(value.is_object(), where + "entry is " + kind_of(value) +
                                 ", expected an object with dtype, shape and data_offsets");
    for (const auto& [k, v] : value.items())
      if (k != "dtype" && k != "shape" && k != "data_offsets")
        throw Error(where + "unknown field '" + k + "' (expected only dtype, shape, data_offsets)");
    for (const char* k : {"dtype", "shape", "data_offsets"})
      if (!value.contains(k)) throw Error(where + "missing field '" + k + "'");

    const Json& jdtype = value["dtype"];
    if (!jdtype.is_string())
      throw Error(where + "dtype is " + kind_of(jdtype) + ", expected a string");
    const auto& dtype_str = jdtype.get_ref<const std::string&>();
    const DTypeInfo* info = find_dtype(dtype_str);
    if (info == nullptr)
      throw Error(where + "unknown dtype '" + dtype_str +
                  "' (safetensors dtypes: " + all_dtype_names() + ")");

    const Json& jshape = value["shape"];
    if (!jshape.is_array())
      throw Error(where + "shape is " + kind_of(jshape) +
                  ", expected an array of non-negative integers");
    std::vector<int64_t> dims;
    for (size_t i = 0; i < jshape.size(); ++i)
      dims.push_back(
          static_cast<int64_t>(nonneg_int(jshape[i], where, "shape[" + std::to_string(i) + "]")));
    Shape shape(std::move(dims));
    // As rlx::Shape: a 0 dim anywhere makes the tensor empty, so only nonzero products can
    // overflow. Elements and bytes must fit in int64 (rlx sizes are signed).
    uint64_t numel = 1;
    for (int64_t d : shape.dims()) {
      if (d == 0) {
        numel = 0;
        break;
      }
    }
    if (numel != 0) {
      for (int64_t d : shape.dims())
        if (__builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel) || numel > kMaxInt64)
          throw Error(where + "shape " + shape.to_string() + " has more than 2^63 - 1 elements");
    }
    uint64_t bits = 0;
    if (__builtin_mul_overflow(numel, info->bits, &bits))
      throw Error(where + dtype_str + shape.to_string() +
                  " is too large: its byte size overflows 64-bit arithmetic");
    if (bits % 8 != 0)
      throw Error(where + dtype_str + shape.to_string() + " is " + std::to_string(bits) +
                  " bits, not a whole number of bytes");
    const uint64_t nbytes = bits / 8;

    const Json& joff = value["data_offsets"];
    if (!joff.is_array() || joff.size() != 2)
      throw Error(where + "data_offsets is " + excerpt(joff) + ", expected [begin, end]");
    uint64_t begin = nonneg_int(joff[0], where, "data_offsets[0]");
    uint64_t end = nonneg_int(joff[1], where, "data_offsets[1]");
    const std::string offsets =
        "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + "]";
    if (begin > end) throw Error(where + offsets + " have begin > end");
    if (end - begin != nbytes)
      throw Error(where + offsets + " span " + std::to_string(end - begin) + " bytes, but " +
                  dtype_str + shape.to_string() + " takes " + std::to_string(nbytes) + " bytes");
    if (end > data_size)
      throw Error(where + offsets + file_range(begin, end) +
                  " end past the data buffer, which has " + std::to_string(data_size) + " bytes" +
                  file_range(0, data_size));

    Entry e;
    e.name = name;
    e.stored_dtype = dtype_str;
    e.supported = info->rlx.has_value();
    e.dtype = info->rlx.value_or(DType::u8);
    e.shape = std::move(shape);
    e.begin = begin;
    e.end = end;
    f.entries_.push_back(std::move(e));
  }

  // Contiguity, as the reference checks it: sorted by offsets, each tensor starts where the
  // previous one ended, the first at 0, and the last ends at the end of the file.
  std::stable_sort(f.entries_.begin(), f.entries_.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  size_t expected = 0;
  const Entry* prev = nullptr;
  for (const Entry& e : f.entries_) {
    if (e.begin > expected)
      throw Error(path + ": bytes [" + std::to_string(expected) + ", " + std::to_string(e.begin) +
                  ") of the data buffer" + file_range(expected, e.begin) +
                  " belong to no tensor (tensor '" + e.name + "' starts at " +
                  std::to_string(e.begin) + "); tensors must be contiguous from offset 0");
    if (e.begin < expected)
      throw Error(path + ": tensor '" + e.name + "' (data_offsets [" + std::to_string(e.begin) +
                  ", " + std::to_string(e.end) + "]) overlaps tensor '" + prev->name +
                  "' (data_offsets [" + std::to_string(prev->begin) + ", " +
                  std::to_string(prev->end) + "])");
    expected = e.end;
    prev = &e;
  }
  check(expected == data_size, path + ": bytes [" + std::to_string(expected) + ", " +
                                   std::to_string(data_size) + ") at the end of the data buffer" +
                                   file_range(expected, data_size) + " belong to no tensor");

  for (size_t i = 0; i < f.entries_.size(); ++i) f.index_.emplace(f.entries_[i].name, i);
  return f;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const Entry& e : entries_) out.push_back(e.name);
  return out;
}

bool SafetensorsFile::contains(const std::string& name) const { return index_.count(name) != 0; }

const SafetensorsFile::Entry& SafetensorsFile::entry(const std::string& name) const {
  auto it = index_.find(name);
  check(it != index_.end(), path_ + ": no tensor named '" + name + "'");
  return entries_[it->second];
}

const std::string& SafetensorsFile::stored_dtype(const std::string& name) const {
  return entry(name).stored_dtype;
}

TensorType SafetensorsFile::type(const std::string& name) const {
  const Entry& e = entry(name);
  check(e.supported, path_ + ": tensor '" + name + "' has dtype " + e.stored_dtype +
                         ", which rlx does not support");
  return {e.dtype, e.shape};
}

Tensor SafetensorsFile::get(const std::string& name) const {
  TensorType t = type(name);
  const Entry& e = entry(name);
  const std::byte* p = data_ + e.begin;
  const size_t nbytes = e.end - e.begin;
  if (t.dtype == DType::bool_) {
    for (size_t i = 0; i < nbytes; ++i)
      if (static_cast<unsigned char>(p[i]) > 1)
        throw Error(path_ + ": tensor '" + name + "' (BOOL) has the byte " +
                    std::to_string(static_cast<unsigned>(p[i])) + " at element " +
                    std::to_string(i) + "; expected 0 or 1");
  }
  if (reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(dtype_size(t.dtype)) != 0) {
    Tensor copy(t.dtype, t.shape);
    std::memcpy(copy.data(), p, nbytes);
    return copy;
  }
  return Tensor::view_of(t.dtype, t.shape, p, mapping_);
}

namespace {

void check_utf8(const std::string& path, const std::string& s, const std::string& what) {
  check(invalid_utf8_at(s) == std::string_view::npos, path + ": " + what + " is not valid UTF-8");
}

}  // namespace

void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  // The header is assembled entry by entry: one nlohmann object would cost a lookup per
  // insertion, and its std::map would sort the tensors by name.
  std::string text = "{";
  if (!metadata.empty()) {
    for (const auto& [k, v] : metadata) {
      check_utf8(path, k, "metadata key '" + k + "'");
      check_utf8(path, v, "metadata value of key '" + k + "'");
    }
    text += "\"__metadata__\":" + Json(metadata).dump();
  }
  std::set<std::string_view> seen;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    check(name != kMetadataKey,
          path + ": a tensor cannot be called '__metadata__' (the header's metadata key)");
    check_utf8(path, name, "tensor name '" + name + "'");
    check(seen.insert(name).second, path + ": duplicate tensor name '" + name + "'");
    // Field order as the reference writes it, so the bytes match.
    nlohmann::ordered_json entry = {{"dtype", stored_name(t.dtype())},
                                    {"shape", t.shape().dims()},
                                    {"data_offsets", Json::array({offset, offset + t.nbytes()})}};
    text += (text.size() > 1 ? "," : "") + Json(name).dump() + ":" + entry.dump();
    offset += t.nbytes();
  }
  text += "}";
  text.append((8 - text.size() % 8) % 8, ' ');  // data then starts at 8 + N, a multiple of 8

  std::byte length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<std::byte>(text.size() >> (8 * i));

  // Everything is checked before the file is created, so a bad name writes nothing; the
  // writer leaves the old file intact on any I/O failure.
  AtomicFileWriter out(path);
  out.write(length, 8);
  out.write(text);
  for (const auto& [name, t] : tensors) out.write(t.data(), t.nbytes());
  out.commit();
}

}  // namespace rlx
