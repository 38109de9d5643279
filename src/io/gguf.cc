// GGUF: validating mmap reader and atomic writer (format and rules in rlx/io/gguf.h).
#include "rlx/io/gguf.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cstring>
#include <iomanip>
#include <limits>
#include <numeric>
#include <sstream>
#include <unordered_set>

#include "mapped_file.h"
#include "rlx/io/atomic_file.h"
#include "rlx/ir/error.h"
#include "rlx/ir/quant.h"

namespace rlx {
namespace {

// The format is little-endian; numbers are read and written in host order.
static_assert(std::endian::native == std::endian::little, "rlx io assumes a little-endian host");

constexpr uint32_t kDefaultAlignment = 32;
constexpr uint32_t kMaxDims = 4;  // GGML_MAX_DIMS
constexpr uint64_t kMaxInt64 = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
constexpr std::string_view kAlignmentKey = "general.alignment";
// The smallest encodings: a tensor info with no dims (name length, n_dims, type, offset) and a
// metadata entry holding one byte (key length, value type, u8).
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;
constexpr size_t kNumValueTypes = std::variant_size_v<GgufValue>;
// Most entries reserved ahead from a count in the file (metadata entries, tensor infos).
constexpr uint64_t kMaxReserve = 4096;

// The ggml types rlx cannot compute (no dequantizer in rlx/ir/quant.h), as gguf-py 0.19.0's
// GGML_QUANT_SIZES lists them. The types rlx computes come from quant_formats(), the one table
// of their ids, block sizes and bytes per block.
constexpr GgmlTypeInfo kStorageOnlyGgmlTypes[] = {
    {GgmlType::Q8_1, "Q8_1", 32, 4 + 4 + 32},
    {GgmlType::IQ2_XXS, "IQ2_XXS", 256, 2 + 256 / 4},
    {GgmlType::IQ2_XS, "IQ2_XS", 256, 2 + 256 / 4 + 256 / 32},
    {GgmlType::IQ3_XXS, "IQ3_XXS", 256, 2 + 256 / 4 + 256 / 8},
    {GgmlType::IQ1_S, "IQ1_S", 256, 2 + 256 / 8 + 256 / 16},
    {GgmlType::IQ3_S, "IQ3_S", 256, 2 + 256 / 4 + 256 / 8 + 256 / 32 + 4},
    {GgmlType::IQ2_S, "IQ2_S", 256, 2 + 256 / 4 + 256 / 16},
    {GgmlType::IQ4_XS, "IQ4_XS", 256, 2 + 2 + 256 / 2 + 256 / 64},
    {GgmlType::I8, "I8", 1, 1},
    {GgmlType::I16, "I16", 1, 2},
    {GgmlType::I32, "I32", 1, 4},
    {GgmlType::I64, "I64", 1, 8},
    {GgmlType::F64, "F64", 1, 8},
    {GgmlType::IQ1_M, "IQ1_M", 256, 256 / 8 + 256 / 16 + 256 / 32},
    {GgmlType::TQ1_0, "TQ1_0", 256, 2 + 4 * 13},
    {GgmlType::TQ2_0, "TQ2_0", 256, 2 + 64},
    {GgmlType::MXFP4, "MXFP4", 32, 1 + 16},
    {GgmlType::NVFP4, "NVFP4", 64, 4 + 32},
    {GgmlType::Q1_0, "Q1_0", 128, 2 + 16},
};

// Every known ggml type by increasing id: quant_formats()' rows (named as gguf-py spells them,
// ggml's names upper-cased: "q4_K" -> "Q4_K") merged with kStorageOnlyGgmlTypes.
struct GgmlTypeTable {
  std::vector<std::string> names;  // storage of the upper-cased names, one per format
  std::vector<GgmlTypeInfo> rows;

  GgmlTypeTable() {
    std::span<const QuantFormatInfo> formats = quant_formats();
    names.reserve(formats.size());  // no reallocation: rows hold views of these strings
    for (const QuantFormatInfo& f : formats) {
      std::string& name = names.emplace_back(f.name);
      for (char& c : name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      rows.push_back({static_cast<GgmlType>(f.ggml_type), name, static_cast<uint32_t>(f.block_size),
                      static_cast<uint32_t>(f.bytes_per_block)});
    }
    rows.insert(rows.end(), std::begin(kStorageOnlyGgmlTypes), std::end(kStorageOnlyGgmlTypes));
    std::sort(rows.begin(), rows.end(),
              [](const GgmlTypeInfo& a, const GgmlTypeInfo& b) { return a.type < b.type; });
  }
};

const std::vector<GgmlTypeInfo>& ggml_type_rows() {
  static const GgmlTypeTable table;
  return table.rows;
}

// Ids ggml once used and removed (ggml.h keeps them as comments), named in the rejection.
constexpr std::pair<uint32_t, std::string_view> kRemovedGgmlTypes[] = {
    {4, "Q4_2"},      {5, "Q4_3"},        {31, "Q4_0_4_4"},   {32, "Q4_0_4_8"},
    {33, "Q4_0_8_8"}, {36, "IQ4_NL_4_4"}, {37, "IQ4_NL_4_8"}, {38, "IQ4_NL_8_8"},
};

constexpr std::string_view kValueTypeNames[kNumValueTypes] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"};

// Fixed sizes of the scalar value types (0 for string and array), by type id.
constexpr uint64_t kScalarSize[kNumValueTypes] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

/// Bytes the smallest element of `type` takes in the file.
uint64_t min_encoded_size(GgufValueType type) {
  switch (type) {
    case GgufValueType::string:
      return 8;  // the length
    case GgufValueType::array:
      return 4 + 8;  // element type and count
    default:
      return kScalarSize[static_cast<size_t>(type)];
  }
}

bool is_power_of_two(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

uint64_t align_up(uint64_t v, uint64_t alignment) {
  return (v + alignment - 1) / alignment * alignment;
}

/// `s` for a message: quoted, bytes outside printable ASCII as \xNN, cut after 80 bytes (names
/// come from the file and may be huge or binary).
std::string shown(std::string_view s) {
  std::string out = "'";
  static constexpr char kHex[] = "0123456789abcdef";
  for (size_t i = 0; i < s.size() && i < 80; ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  if (s.size() > 80) out += "...";
  return out + "'";
}

std::string removed_type_note(uint32_t id) {
  for (const auto& [rid, name] : kRemovedGgmlTypes)
    if (rid == id) return " (" + std::string(name) + ", removed from ggml)";
  return "";
}

/// Element count of `dims` (any order); `what` starts the message. Throws when a dim or the
/// product exceeds 2^63 - 1. A 0 dim makes the product 0 wherever it is.
uint64_t checked_numel(std::span<const uint64_t> dims, const std::string& what) {
  for (uint64_t d : dims)
    if (d == 0) return 0;
  uint64_t n = 1;
  for (uint64_t d : dims)
    if (__builtin_mul_overflow(n, d, &n) || n > kMaxInt64)
      throw Error(what + "the element count overflows 2^63 - 1");
  return n;
}

std::string dims_text(std::span<const uint64_t> dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

/// Reads the file front to back; every read checks the bytes that remain first.
class Reader {
 public:
  Reader(const std::string& path, const std::byte* bytes, uint64_t size)
      : path_(path), bytes_(bytes), size_(size) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }

  [[noreturn]] void fail(uint64_t at, const std::string& what) const {
    throw Error(path_ + ": at byte " + std::to_string(at) + ": " + what);
  }

  /// Fails unless `n` more bytes are there; `what` names what they hold.
  void need(uint64_t n, const std::string& what) const {
    if (n > remaining())
      fail(pos_, what + " needs " + std::to_string(n) + " bytes, but the file ends at byte " +
                     std::to_string(size_) + " (" + std::to_string(remaining()) + " bytes left)");
  }

  template <class T>
  T read(const char* what) {
    if (sizeof(T) > remaining()) need(sizeof(T), what);
    T v;
    std::memcpy(&v, bytes_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  /// A GGUF string (u64 length, then the bytes) into `out`; false, with nothing read, when the
  /// file ends first. For loops that name the string only when it fails.
  bool try_string(std::string_view& out) {
    if (remaining() < 8) return false;
    uint64_t n;
    std::memcpy(&n, bytes_ + pos_, 8);
    if (n > remaining() - 8) return false;
    out = std::string_view(reinterpret_cast<const char*>(bytes_ + pos_ + 8), n);
    pos_ += 8 + n;
    return true;
  }

  /// A GGUF string; `what` names it in messages.
  std::string_view string(const std::string& what) {
    std::string_view s;
    if (try_string(s)) return s;
    if (remaining() < 8) need(8, "the length of " + what);
    uint64_t n;
    std::memcpy(&n, bytes_ + pos_, 8);
    fail(pos_, "the length of " + what + " is " + std::to_string(n) + ", more than the " +
                   std::to_string(remaining() - 8) + " bytes left in the file after it");
  }

  /// A string that names something (a key, a tensor): valid UTF-8.
  std::string name(const std::string& what) {
    const uint64_t at = pos_;
    std::string_view s = string(what);
    size_t bad = io_detail::invalid_utf8_at(s);
    if (bad != std::string_view::npos)
      fail(at + 8 + bad, what + " " + shown(s) + " is not valid UTF-8 (expected UTF-8 text)");
    return std::string(s);
  }

  /// A u32 value type, 0..12.
  GgufValueType value_type(const std::string& what) {
    const uint64_t at = pos_;
    auto t = read<uint32_t>(what.c_str());
    if (t >= kNumValueTypes)
      fail(at, what + " is " + std::to_string(t) + ", not a GGUF value type (expected 0..12)");
    return static_cast<GgufValueType>(t);
  }

  /// A value of type `type`; `what` names it, `depth` counts the arrays it is inside.
  GgufValue value(GgufValueType type, const std::string& what, int depth) {
    switch (type) {
      case GgufValueType::u8:
        return read<uint8_t>(what.c_str());
      case GgufValueType::i8:
        return read<int8_t>(what.c_str());
      case GgufValueType::u16:
        return read<uint16_t>(what.c_str());
      case GgufValueType::i16:
        return read<int16_t>(what.c_str());
      case GgufValueType::u32:
        return read<uint32_t>(what.c_str());
      case GgufValueType::i32:
        return read<int32_t>(what.c_str());
      case GgufValueType::f32:
        return read<float>(what.c_str());
      case GgufValueType::bool_:
        return boolean(what);
      case GgufValueType::string:
        return std::string(string(what));
      case GgufValueType::array:
        return array(what, depth + 1);
      case GgufValueType::u64:
        return read<uint64_t>(what.c_str());
      case GgufValueType::i64:
        return read<int64_t>(what.c_str());
      case GgufValueType::f64:
        return read<double>(what.c_str());
    }
    fail(pos_, "internal: value type out of range");
  }

 private:
  bool boolean(const std::string& what) {
    const uint64_t at = pos_;
    auto b = read<uint8_t>(what.c_str());
    if (b > 1)
      fail(at, what + " is a bool stored as the byte " + std::to_string(b) + ", expected 0 or 1");
    return b == 1;
  }

  template <class T>
  void scalars(std::vector<T>& out, uint64_t n) {
    out.resize(n);  // n * sizeof(T) <= remaining(): checked by the caller
    if constexpr (std::is_same_v<T, bool>) {
      for (uint64_t i = 0; i < n; ++i) {
        auto b = static_cast<uint8_t>(bytes_[pos_]);
        if (b > 1)
          fail(pos_, "element " + std::to_string(i) + " of a bool array is the byte " +
                         std::to_string(b) + ", expected 0 or 1");
        out[i] = b == 1;
        ++pos_;
      }
    } else {
      // memcpy needs valid pointers even for 0 bytes, and an empty vector's data() may be null.
      if (n != 0) std::memcpy(out.data(), bytes_ + pos_, n * sizeof(T));
      pos_ += n * sizeof(T);
    }
  }

  GgufArray array(const std::string& what, int depth) {
    const uint64_t at = pos_;
    if (depth > GgufFile::kMaxArrayDepth)
      fail(at, what + ": arrays nest deeper than " + std::to_string(GgufFile::kMaxArrayDepth) +
                   " levels (the most rlx reads)");
    GgufValueType et = value_type("the element type of " + what);
    const uint64_t count_at = pos_;
    auto n = read<uint64_t>(("the element count of " + what).c_str());
    const uint64_t min = min_encoded_size(et);
    if (n > remaining() / min)
      fail(count_at, "the element count of " + what + " is " + std::to_string(n) + ", but the " +
                         std::to_string(remaining()) + " bytes left in the file hold at most " +
                         std::to_string(remaining() / min) + " elements of type " +
                         std::string(gguf_value_type_name(et)) + " (" + std::to_string(min) +
                         " bytes or more each)");
    GgufArray out = GgufArray::empty_of(et);
    std::visit(
        [&](auto& items) {
          using T = typename std::decay_t<decltype(items)>::value_type;
          if constexpr (std::is_same_v<T, std::string>) {
            items.reserve(n);
            std::string_view str;
            for (uint64_t i = 0; i < n; ++i) {
              if (!try_string(str)) string("element " + std::to_string(i) + " of " + what);
              items.emplace_back(str);
            }
          } else if constexpr (std::is_same_v<T, GgufArray>) {
            items.reserve(n);
            for (uint64_t i = 0; i < n; ++i)
              items.push_back(array("element " + std::to_string(i) + " of " + what, depth + 1));
          } else {
            scalars(items, n);
          }
        },
        out.items());
    return out;
  }

  const std::string& path_;
  const std::byte* bytes_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

}  // namespace

std::span<const GgmlTypeInfo> ggml_types() { return ggml_type_rows(); }

const GgmlTypeInfo* find_ggml_type(uint32_t id) {
  for (const GgmlTypeInfo& t : ggml_type_rows())
    if (static_cast<uint32_t>(t.type) == id) return &t;
  return nullptr;
}

const GgmlTypeInfo& ggml_type_info(GgmlType type) {
  const GgmlTypeInfo* t = find_ggml_type(static_cast<uint32_t>(type));
  if (t == nullptr)
    throw Error("ggml type id " + std::to_string(static_cast<uint32_t>(type)) +
                " is not a known ggml type" + removed_type_note(static_cast<uint32_t>(type)));
  return *t;
}

std::optional<GgmlType> ggml_type_from_name(std::string_view name) {
  for (const GgmlTypeInfo& t : ggml_type_rows())
    if (t.name == name) return t.type;
  return std::nullopt;
}

std::optional<DType> ggml_type_dtype(GgmlType type) {
  switch (type) {
    case GgmlType::F32:
      return DType::f32;
    case GgmlType::F16:
      return DType::f16;
    case GgmlType::BF16:
      return DType::bf16;
    case GgmlType::F64:
      return DType::f64;
    case GgmlType::I8:
      return DType::i8;
    case GgmlType::I32:
      return DType::i32;
    case GgmlType::I64:
      return DType::i64;
    default:
      return std::nullopt;
  }
}

std::optional<GgmlType> ggml_type_of(DType dtype) {
  for (const GgmlTypeInfo& t : ggml_type_rows())
    if (ggml_type_dtype(t.type) == dtype) return t.type;
  return std::nullopt;
}

std::string_view gguf_value_type_name(GgufValueType type) {
  auto i = static_cast<size_t>(type);
  return i < kNumValueTypes ? kValueTypeNames[i] : std::string_view("(invalid value type)");
}

GgufArray GgufArray::empty_of(GgufValueType element_type) {
  GgufArray a;
  switch (element_type) {
    case GgufValueType::u8:
      a.items_.emplace<0>();
      break;
    case GgufValueType::i8:
      a.items_.emplace<1>();
      break;
    case GgufValueType::u16:
      a.items_.emplace<2>();
      break;
    case GgufValueType::i16:
      a.items_.emplace<3>();
      break;
    case GgufValueType::u32:
      a.items_.emplace<4>();
      break;
    case GgufValueType::i32:
      a.items_.emplace<5>();
      break;
    case GgufValueType::f32:
      a.items_.emplace<6>();
      break;
    case GgufValueType::bool_:
      a.items_.emplace<7>();
      break;
    case GgufValueType::string:
      a.items_.emplace<8>();
      break;
    case GgufValueType::array:
      a.items_.emplace<9>();
      break;
    case GgufValueType::u64:
      a.items_.emplace<10>();
      break;
    case GgufValueType::i64:
      a.items_.emplace<11>();
      break;
    case GgufValueType::f64:
      a.items_.emplace<12>();
      break;
    default:
      throw Error("GgufArray::empty_of: " + std::to_string(static_cast<uint32_t>(element_type)) +
                  " is not a GGUF value type (expected 0..12)");
  }
  return a;
}

size_t GgufArray::size() const {
  return std::visit([](const auto& items) { return items.size(); }, items_);
}

namespace {

void print_string(std::ostringstream& os, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  os << '"';
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      os << '\\' << ch;
    } else if (c >= 0x20 && c < 0x7f) {
      os << ch;
    } else {
      os << "\\x" << kHex[c >> 4] << kHex[c & 15];
    }
  }
  os << '"';
}

template <class T>
void print_scalar(std::ostringstream& os, const T& v) {
  if constexpr (std::is_same_v<T, bool>) {
    os << (v ? "true" : "false");
  } else if constexpr (std::is_same_v<T, std::string>) {
    print_string(os, v);
  } else if constexpr (std::is_floating_point_v<T>) {
    os << std::setprecision(std::numeric_limits<T>::max_digits10) << v;
  } else {
    os << +v;  // u8/i8 as numbers
  }
}

void print_array(std::ostringstream& os, const GgufArray& a, size_t max_items) {
  os << '[';
  std::visit(
      [&](const auto& items) {
        for (size_t i = 0; i < items.size() && i < max_items; ++i) {
          if (i) os << ", ";
          using T = typename std::decay_t<decltype(items)>::value_type;
          if constexpr (std::is_same_v<T, GgufArray>) {
            print_array(os, items[i], max_items);
          } else if constexpr (std::is_same_v<T, bool>) {
            os << (items[i] ? "true" : "false");
          } else {
            print_scalar(os, items[i]);
          }
        }
        if (items.size() > max_items) os << ", ... (" << items.size() << " items)";
      },
      a.items());
  os << ']';
}

}  // namespace

std::string gguf_value_to_string(const GgufValue& value, size_t max_items) {
  std::ostringstream os;
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, GgufArray>) {
          print_array(os, v, max_items);
        } else {
          print_scalar(os, v);
        }
      },
      value);
  return os.str();
}

int64_t GgufTensorInfo::numel() const {
  // A 0 dim anywhere makes the tensor empty, and the other dims' product need not fit then.
  for (int64_t d : shape)
    if (d == 0) return 0;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // validated to fit when the file was read
  return n;
}

GgufFile GgufFile::open(const std::string& path) {
  size_t size = 0;
  std::shared_ptr<const io_detail::Mapping> mapping = io_detail::map_file(path, size);
  const std::byte* bytes = mapping ? mapping->bytes() : nullptr;
  return parse(path, std::move(mapping), bytes, size);
}

GgufFile GgufFile::from_bytes(std::string_view bytes, const std::string& name) {
  auto copy = std::make_shared<const std::string>(bytes);
  const auto* data = reinterpret_cast<const std::byte*>(copy->data());
  return parse(name, std::move(copy), data, bytes.size());
}

GgufFile GgufFile::parse(const std::string& path, std::shared_ptr<const void> owner,
                         const std::byte* bytes, size_t size) {
  GgufFile f;
  f.path_ = path;
  f.mapping_ = std::move(owner);
  f.bytes_ = bytes;
  f.file_size_ = size;
  Reader r(path, bytes, size);

  // Header.
  if (size < 4 || std::memcmp(bytes, "GGUF", 4) != 0)
    r.fail(0, "expected the magic \"GGUF\" (47 47 55 46), found " +
                  shown(std::string_view(reinterpret_cast<const char*>(bytes),
                                         std::min<size_t>(size, 4))) +
                  (size < 4 ? " and the end of the file" : ""));
  r.read<uint32_t>("the magic");
  const auto version = r.read<uint32_t>("the version (u32)");
  if (version != 2 && version != 3) {
    if ((version & 0xFFFF) == 0) {
      r.fail(4, "the version reads " + std::to_string(version) +
                    ": a big-endian GGUF file (version " +
                    std::to_string(__builtin_bswap32(version)) +
                    " byte-swapped), expected a little-endian one (rlx reads little-endian "
                    "GGUF only)");
    }
    if (version == 1)
      r.fail(4,
             "GGUF version 1 is not supported (it used 32-bit counts and lengths); expected "
             "version 2 or 3");
    r.fail(4, "unsupported GGUF version " + std::to_string(version) + ", expected 2 or 3");
  }
  f.version_ = version;
  const auto tensor_count = r.read<uint64_t>("tensor_count (u64)");
  const auto kv_count = r.read<uint64_t>("kv_count (u64)");
  if (tensor_count > r.remaining() / kMinTensorInfoBytes)
    r.fail(8, "tensor_count is " + std::to_string(tensor_count) + ", but the " +
                  std::to_string(r.remaining()) + " bytes after the header hold at most " +
                  std::to_string(r.remaining() / kMinTensorInfoBytes) + " tensor infos (" +
                  std::to_string(kMinTensorInfoBytes) + " bytes or more each)");
  if (kv_count > r.remaining() / kMinKvBytes)
    r.fail(16, "kv_count is " + std::to_string(kv_count) + ", but the " +
                   std::to_string(r.remaining()) + " bytes after the header hold at most " +
                   std::to_string(r.remaining() / kMinKvBytes) + " metadata entries (" +
                   std::to_string(kMinKvBytes) + " bytes or more each)");

  // Metadata. Reservations are capped: the counts are bounded by the file's size, but a hostile
  // file's counts may still be far above what it holds; past the cap the vectors grow only as
  // entries are actually read.
  const size_t kv_reserve = static_cast<size_t>(std::min<uint64_t>(kv_count, kMaxReserve));
  f.keys_.reserve(kv_reserve);
  f.values_.reserve(kv_reserve);
  f.value_offsets_.reserve(kv_reserve);
  f.index_.reserve(kv_reserve);
  std::vector<uint64_t> entry_at;  // file byte where each metadata entry starts
  entry_at.reserve(kv_reserve);
  for (uint64_t i = 0; i < kv_count; ++i) {
    const uint64_t at = r.pos();
    std::string key = r.name("the key of metadata entry " + std::to_string(i));
    const std::string what = "metadata key " + shown(key);
    if (auto it = f.index_.find(key); it != f.index_.end())
      r.fail(at, what + " appears twice (first at byte " + std::to_string(entry_at[it->second]) +
                     "); expected each key once");
    GgufValueType type = r.value_type("the value type of " + what);
    const uint64_t value_at = r.pos();
    GgufValue value = r.value(type, "the value of " + what, 0);
    f.index_.emplace(key, f.keys_.size());
    f.keys_.push_back(std::move(key));
    f.values_.push_back(std::move(value));
    f.value_offsets_.push_back(value_at);
    entry_at.push_back(at);
  }
  if (auto it = f.index_.find(std::string(kAlignmentKey)); it != f.index_.end()) {
    const GgufValue& v = f.values_[it->second];
    const uint64_t at = f.value_offsets_[it->second];
    if (gguf_type(v) != GgufValueType::u32)
      r.fail(at, "general.alignment has type " + std::string(gguf_value_type_name(gguf_type(v))) +
                     ", expected u32");
    const uint32_t a = std::get<uint32_t>(v);
    if (!is_power_of_two(a) || a > kMaxAlignment)
      r.fail(at, "general.alignment is " + std::to_string(a) + ", expected a power of two in [1, " +
                     std::to_string(kMaxAlignment) + "]");
    f.alignment_ = a;
  }

  // Tensor infos.
  const size_t tensor_reserve = static_cast<size_t>(std::min<uint64_t>(tensor_count, kMaxReserve));
  f.tensors_.reserve(tensor_reserve);
  f.tensor_index_.reserve(tensor_reserve);
  std::vector<uint64_t> offset_at;  // file byte of each tensor's offset field
  offset_at.reserve(tensor_reserve);
  for (uint64_t i = 0; i < tensor_count; ++i) {
    GgufTensorInfo t;
    t.info_at = r.pos();
    t.name = r.name("the name of tensor " + std::to_string(i));
    const std::string what = "tensor " + shown(t.name);
    if (f.tensor_index_.count(t.name) != 0)
      r.fail(t.info_at, what + " appears twice (first at byte " +
                            std::to_string(f.tensors_[f.tensor_index_.at(t.name)].info_at) +
                            "); expected unique tensor names");
    const uint64_t dims_at = r.pos();
    const auto n_dims = r.read<uint32_t>(("n_dims of " + what).c_str());
    if (n_dims > kMaxDims)
      r.fail(dims_at, "n_dims of " + what + " is " + std::to_string(n_dims) +
                          ", expected at most 4 (GGML_MAX_DIMS)");
    uint64_t dims[kMaxDims] = {};
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t at = r.pos();
      dims[d] = r.read<uint64_t>(("dims of " + what).c_str());
      if (dims[d] > kMaxInt64)
        r.fail(at, "dim " + std::to_string(d) + " of " + what + " is " + std::to_string(dims[d]) +
                       ", expected at most 2^63 - 1");
    }
    std::span<const uint64_t> file_dims(dims, n_dims);
    const uint64_t type_at = r.pos();
    const auto type_id = r.read<uint32_t>(("the ggml type of " + what).c_str());
    const GgmlTypeInfo* info = find_ggml_type(type_id);
    if (info == nullptr)
      r.fail(type_at, "the ggml type of " + what + " is " + std::to_string(type_id) +
                          removed_type_note(type_id) +
                          ", expected a known ggml type id (0..41, as gguf-py's "
                          "GGMLQuantizationType)");
    t.type = info->type;
    offset_at.push_back(r.pos());
    t.offset = r.read<uint64_t>(("the data offset of " + what).c_str());

    const uint64_t numel =
        checked_numel(file_dims, path + ": at byte " + std::to_string(dims_at) + ": " + what +
                                     " has dims " + dims_text(file_dims) + " (innermost first): ");
    const uint64_t inner = n_dims == 0 ? 1 : dims[0];
    if (inner % info->block_size != 0)
      r.fail(dims_at, what + " has dims " + dims_text(file_dims) +
                          " (innermost first): the innermost dim " + std::to_string(inner) +
                          " is not a multiple of " + std::string(info->name) + "'s block size " +
                          std::to_string(info->block_size));
    if (__builtin_mul_overflow(numel / info->block_size, uint64_t{info->type_size}, &t.nbytes))
      r.fail(dims_at, what + " has dims " + dims_text(file_dims) + ": its byte size as " +
                          std::string(info->name) + " overflows 64 bits");
    t.shape.assign(n_dims, 0);
    for (uint32_t d = 0; d < n_dims; ++d) t.shape[n_dims - 1 - d] = static_cast<int64_t>(dims[d]);
    f.tensor_index_.emplace(t.name, f.tensors_.size());
    f.tensors_.push_back(std::move(t));
  }

  // Data section: after the tensor infos, padded to the alignment.
  const uint64_t infos_end = r.pos();
  f.data_offset_ = align_up(infos_end, f.alignment_);
  if (f.data_offset_ > size) {
    if (tensor_count != 0)
      r.fail(infos_end, "the tensor infos end here, so the data section starts at byte " +
                            std::to_string(f.data_offset_) + " (padded to the alignment " +
                            std::to_string(f.alignment_) + "), past the end of the file (" +
                            std::to_string(size) + " bytes); expected the tensor data there");
    // No tensors: the file may end without the padding; the data section is then empty.
  }
  const uint64_t data_size = f.data_offset_ < size ? size - f.data_offset_ : 0;
  for (size_t i = 0; i < f.tensors_.size(); ++i) {
    const GgufTensorInfo& t = f.tensors_[i];
    const std::string what = "tensor " + shown(t.name);
    if (t.offset % f.alignment_ != 0)
      r.fail(offset_at[i], "the data offset of " + what + " is " + std::to_string(t.offset) +
                               ", expected a multiple of the alignment " +
                               std::to_string(f.alignment_));
    if (t.offset > data_size || t.nbytes > data_size - t.offset)
      r.fail(offset_at[i], what + " (" + std::string(ggml_type_info(t.type).name) + ", " +
                               std::to_string(t.nbytes) + " bytes at data offset " +
                               std::to_string(t.offset) +
                               ") runs past the end of the file: the data section has " +
                               std::to_string(data_size) + " bytes (from byte " +
                               std::to_string(f.data_offset_) + ")");
  }
  // No two tensors share a byte: sorted by offset, each starts at or after the previous end.
  std::vector<size_t> order(f.tensors_.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return f.tensors_[a].offset < f.tensors_[b].offset; });
  const GgufTensorInfo* prev = nullptr;
  for (size_t i : order) {
    const GgufTensorInfo& t = f.tensors_[i];
    if (t.nbytes == 0) continue;
    if (prev != nullptr && t.offset < prev->offset + prev->nbytes)
      r.fail(offset_at[i],
             "the data of tensor " + shown(t.name) + " (bytes [" + std::to_string(t.offset) + ", " +
                 std::to_string(t.offset + t.nbytes) + ") of the data section) overlaps tensor " +
                 shown(prev->name) + " (bytes [" + std::to_string(prev->offset) + ", " +
                 std::to_string(prev->offset + prev->nbytes) + ")); expected disjoint tensors");
    prev = &t;
  }
  return f;
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = index_.find(key);
  return it == index_.end() ? nullptr : &values_[it->second];
}

const GgufValue& GgufFile::at(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) throw Error(path_ + ": no metadata key " + shown(key));
  return *v;
}

uint64_t GgufFile::value_offset(const std::string& key) const {
  at(key);
  return value_offsets_[index_.at(key)];
}

const GgufValue& GgufFile::typed(const std::string& key, GgufValueType expected) const {
  const GgufValue& v = at(key);
  if (gguf_type(v) != expected)
    throw Error(path_ + ": metadata key " + shown(key) + " (at byte " +
                std::to_string(value_offset(key)) + ") has type " +
                std::string(gguf_value_type_name(gguf_type(v))) + ", expected " +
                std::string(gguf_value_type_name(expected)));
  return v;
}

const GgufArray& GgufFile::typed_array(const std::string& key, GgufValueType expected) const {
  const GgufValue& v = at(key);
  const std::string where = path_ + ": metadata key " + shown(key) + " (at byte " +
                            std::to_string(value_offset(key)) + ")";
  const std::string want = "expected an array of " + std::string(gguf_value_type_name(expected));
  const auto* a = std::get_if<GgufArray>(&v);
  if (a == nullptr)
    throw Error(where + " has type " + std::string(gguf_value_type_name(gguf_type(v))) + ", " +
                want);
  if (a->element_type() != expected)
    throw Error(where + " is an array of " + std::string(gguf_value_type_name(a->element_type())) +
                ", " + want);
  return *a;
}

GgufMetadata GgufFile::metadata() const {
  GgufMetadata out;
  out.reserve(keys_.size());
  for (size_t i = 0; i < keys_.size(); ++i) out.emplace_back(keys_[i], values_[i]);
  return out;
}

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensorInfo& GgufFile::tensor_info(const std::string& name) const {
  const GgufTensorInfo* t = find_tensor(name);
  if (t == nullptr) throw Error(path_ + ": no tensor named " + shown(name));
  return *t;
}

GgufTensorBytes GgufFile::tensor_bytes(const std::string& name) const {
  const GgufTensorInfo& t = tensor_info(name);
  return {std::span<const std::byte>(bytes_ + data_offset_ + t.offset, t.nbytes), mapping_};
}

Tensor GgufFile::tensor(const std::string& name) const {
  const GgufTensorInfo& t = tensor_info(name);
  std::optional<DType> dtype = ggml_type_dtype(t.type);
  if (!dtype)
    throw Error(path_ + ": tensor " + shown(name) + " has ggml type " +
                std::string(ggml_type_info(t.type).name) +
                ", which has no rlx dtype (read its bytes with tensor_bytes())");
  const std::byte* p = bytes_ + data_offset_ + t.offset;
  Shape shape(t.shape);
  if (reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(dtype_size(*dtype)) != 0) {
    Tensor copy(*dtype, shape);
    if (t.nbytes != 0) std::memcpy(copy.data(), p, t.nbytes);
    return copy;
  }
  return Tensor::view_of(*dtype, shape, p, mapping_);
}

GgufTensorData GgufTensorData::of(std::string name, const Tensor& tensor) {
  std::optional<GgmlType> type = ggml_type_of(tensor.dtype());
  if (!type)
    throw Error("GGUF: tensor " + shown(name) + " has dtype " +
                std::string(dtype_name(tensor.dtype())) +
                ", which GGUF cannot store (expected f32, f16, bf16, f64, i8, i32 or i64)");
  return {std::move(name), *type, tensor.shape().dims(),
          std::span<const std::byte>(tensor.data(), tensor.nbytes())};
}

namespace {

/// Appends GGUF encodings to a buffer.
class Encoder {
 public:
  explicit Encoder(std::string& out) : out_(out) {}
  template <class T>
  void put(T v) {
    out_.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void string(std::string_view s) {
    put<uint64_t>(s.size());
    out_.append(s);
  }
  void value(const GgufValue& v) {
    std::visit(
        [&](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, std::string>) {
            string(x);
          } else if constexpr (std::is_same_v<T, GgufArray>) {
            array(x);
          } else if constexpr (std::is_same_v<T, bool>) {
            put<uint8_t>(x ? 1 : 0);
          } else {
            put<T>(x);
          }
        },
        v);
  }
  void array(const GgufArray& a) {
    put<uint32_t>(static_cast<uint32_t>(a.element_type()));
    put<uint64_t>(a.size());
    std::visit(
        [&](const auto& items) {
          using T = typename std::decay_t<decltype(items)>::value_type;
          for (const auto& x : items) {
            if constexpr (std::is_same_v<T, std::string>) {
              string(x);
            } else if constexpr (std::is_same_v<T, GgufArray>) {
              array(x);
            } else if constexpr (std::is_same_v<T, bool>) {
              put<uint8_t>(x ? 1 : 0);
            } else {
              put<T>(x);
            }
          }
        },
        a.items());
  }

 private:
  std::string& out_;
};

int array_depth(const GgufArray& a) {
  int deepest = 0;
  if (const auto* inner = a.get_if<GgufArray>())
    for (const GgufArray& x : *inner) deepest = std::max(deepest, array_depth(x));
  return deepest + 1;
}

void check_name(const std::string& path, const std::string& s, const std::string& what) {
  size_t bad = io_detail::invalid_utf8_at(s);
  if (bad != std::string_view::npos)
    throw Error(path + ": " + what + " " + shown(s) + " is not valid UTF-8 (at byte " +
                std::to_string(bad) + " of it)");
}

/// Validates everything and returns the header (up to and including the padding before the
/// data section); `offsets` gets each tensor's data offset.
std::string gguf_header(const GgufMetadata& metadata, const std::vector<GgufTensorData>& tensors,
                        uint32_t alignment, const std::string& path,
                        std::vector<uint64_t>& offsets) {
  if (!is_power_of_two(alignment) || alignment > GgufFile::kMaxAlignment)
    throw Error(path + ": GGUF alignment " + std::to_string(alignment) +
                " is not a power of two in [1, " + std::to_string(GgufFile::kMaxAlignment) + "]");
  std::unordered_set<std::string_view> keys;
  bool has_alignment = false;
  for (const auto& [key, value] : metadata) {
    check_name(path, key, "metadata key");
    if (!keys.insert(key).second)
      throw Error(path + ": metadata key " + shown(key) + " is given twice");
    if (const auto* a = std::get_if<GgufArray>(&value))
      if (array_depth(*a) > GgufFile::kMaxArrayDepth)
        throw Error(path + ": metadata key " + shown(key) + ": arrays nest deeper than " +
                    std::to_string(GgufFile::kMaxArrayDepth) + " levels (the most rlx reads)");
    if (key == kAlignmentKey) {
      has_alignment = true;
      const auto* a = std::get_if<uint32_t>(&value);
      if (a == nullptr || *a != alignment)
        throw Error(path + ": metadata general.alignment is " +
                    (a ? std::to_string(*a)
                       : "of type " + std::string(gguf_value_type_name(gguf_type(value)))) +
                    ", expected the u32 " + std::to_string(alignment) +
                    " (the alignment the file is written with)");
    }
  }
  std::unordered_set<std::string_view> names;
  offsets.clear();
  uint64_t offset = 0;
  for (const GgufTensorData& t : tensors) {
    const std::string what = "tensor " + shown(t.name);
    check_name(path, t.name, "tensor name");
    if (!names.insert(t.name).second) throw Error(path + ": " + what + " is given twice");
    const GgmlTypeInfo* info = find_ggml_type(static_cast<uint32_t>(t.type));
    if (info == nullptr)
      throw Error(path + ": " + what + ": ggml type id " +
                  std::to_string(static_cast<uint32_t>(t.type)) + " is not a known ggml type");
    if (t.shape.size() > kMaxDims)
      throw Error(path + ": " + what + " has " + std::to_string(t.shape.size()) +
                  " dims, expected at most 4 (GGML_MAX_DIMS)");
    std::vector<uint64_t> dims;
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) {
      if (*it < 0) throw Error(path + ": " + what + " has a negative dim " + std::to_string(*it));
      dims.push_back(static_cast<uint64_t>(*it));
    }
    const uint64_t numel = checked_numel(dims, path + ": " + what + ": ");
    const uint64_t inner = dims.empty() ? 1 : dims[0];
    if (inner % info->block_size != 0)
      throw Error(path + ": " + what + ": the innermost dim " + std::to_string(inner) +
                  " is not a multiple of " + std::string(info->name) + "'s block size " +
                  std::to_string(info->block_size));
    uint64_t nbytes = 0;
    if (__builtin_mul_overflow(numel / info->block_size, uint64_t{info->type_size}, &nbytes) ||
        nbytes != t.bytes.size())
      throw Error(path + ": " + what + " (" + std::string(info->name) + ", " +
                  std::to_string(numel) + " elements) takes " + std::to_string(nbytes) +
                  " bytes, but " + std::to_string(t.bytes.size()) + " are given");
    offsets.push_back(offset);
    offset += align_up(nbytes, alignment);
  }

  std::string out;
  Encoder e(out);
  out.append("GGUF");
  e.put<uint32_t>(3);
  e.put<uint64_t>(tensors.size());
  const bool add_alignment = !has_alignment && alignment != kDefaultAlignment;
  e.put<uint64_t>(metadata.size() + (add_alignment ? 1 : 0));
  for (const auto& [key, value] : metadata) {
    e.string(key);
    e.put<uint32_t>(static_cast<uint32_t>(gguf_type(value)));
    e.value(value);
  }
  if (add_alignment) {
    e.string(kAlignmentKey);
    e.put<uint32_t>(static_cast<uint32_t>(GgufValueType::u32));
    e.put<uint32_t>(alignment);
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    const GgufTensorData& t = tensors[i];
    e.string(t.name);
    e.put<uint32_t>(static_cast<uint32_t>(t.shape.size()));
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it)
      e.put<uint64_t>(static_cast<uint64_t>(*it));
    e.put<uint32_t>(static_cast<uint32_t>(t.type));
    e.put<uint64_t>(offsets[i]);
  }
  out.append(align_up(out.size(), alignment) - out.size(), '\0');
  return out;
}

}  // namespace

std::string gguf_file_bytes(const GgufMetadata& metadata,
                            const std::vector<GgufTensorData>& tensors, uint32_t alignment,
                            const std::string& path) {
  std::vector<uint64_t> offsets;
  std::string out = gguf_header(metadata, tensors, alignment, path, offsets);
  for (const GgufTensorData& t : tensors) {
    out.append(reinterpret_cast<const char*>(t.bytes.data()), t.bytes.size());
    out.append(align_up(t.bytes.size(), alignment) - t.bytes.size(), '\0');
  }
  return out;
}

void write_gguf(const std::string& path, const GgufMetadata& metadata,
                const std::vector<GgufTensorData>& tensors, uint32_t alignment) {
  std::vector<uint64_t> offsets;
  const std::string header = gguf_header(metadata, tensors, alignment, path, offsets);
  const std::string zeros(alignment, '\0');
  AtomicFileWriter out(path);
  out.write(header);
  for (const GgufTensorData& t : tensors) {
    out.write(t.bytes.data(), t.bytes.size());
    out.write(zeros.data(), align_up(t.bytes.size(), alignment) - t.bytes.size());
  }
  out.commit();
}

}  // namespace rlx
