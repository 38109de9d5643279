// Reading (memory-mapped, zero-copy, validated) and writing GGUF files, ggml's model format.
//
// Format (ggml docs/gguf.md; the reference reader and writer are gguf-py 0.19.0,
// gguf/gguf_reader.py and gguf/gguf_writer.py). Every number is little-endian:
//   "GGUF" (4 bytes), u32 version (2 or 3: the same layout), u64 tensor_count, u64 kv_count,
//   kv_count x    { string key, u32 value type, value },
//   tensor_count x { string name, u32 n_dims, u64 dims[n_dims] (innermost first),
//                    u32 ggml type, u64 offset (relative to the data section) },
//   zero padding to general.alignment (default 32), the data section: each tensor at its offset.
// A string is a u64 byte length and that many bytes (no NUL); an array is a u32 element type, a
// u64 count and the elements (arrays of arrays nest).
//
// The reader hands out metadata as typed values and tensors as raw bytes plus their ggml type;
// it does not dequantize. Block formats are the business of the backends.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "rlx/ir/tensor.h"

namespace rlx {

/// A ggml tensor type: ids and names as gguf-py 0.19.0's GGMLQuantizationType (ggml.h's enum
/// ggml_type). Ids 4, 5 (Q4_2, Q4_3), 31-33 (Q4_0_4_4, Q4_0_4_8, Q4_0_8_8) and 36-38
/// (IQ4_NL_4_4, IQ4_NL_4_8, IQ4_NL_8_8) were removed from ggml; a file using them is rejected.
enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,
  NVFP4 = 40,
  Q1_0 = 41,
};

/// The storage layout of a ggml type: `block_size` consecutive elements of a row (innermost
/// dim) are stored in `type_size` bytes. Values as gguf-py 0.19.0's GGML_QUANT_SIZES (for
/// F32: 1 element in 4 bytes; Q4_K: 256 elements in 144 bytes).
struct GgmlTypeInfo {
  GgmlType type;
  std::string_view name;  // "Q4_K", as GGMLQuantizationType spells it
  uint32_t block_size;    // elements per block
  uint32_t type_size;     // bytes per block
};

/// Every known ggml type, by increasing id. The rows of the types rlx computes (F32, F16, BF16,
/// Q4_0 ... Q8_K, IQ4_NL) are derived from quant_formats() (rlx/ir/quant.h), the one table of
/// their ids, block sizes and bytes per block; io lists only the storage-only types itself.
std::span<const GgmlTypeInfo> ggml_types();
/// The type with id `id`, or nullptr when no known type has it (including the removed ids).
const GgmlTypeInfo* find_ggml_type(uint32_t id);
/// The layout of `type`. Throws rlx::Error for a value that is not a GgmlType enumerator.
const GgmlTypeInfo& ggml_type_info(GgmlType type);
/// The type called `name` ("Q8_0"; case-sensitive), or nullopt.
std::optional<GgmlType> ggml_type_from_name(std::string_view name);
/// The rlx dtype whose elements a tensor of `type` stores as is: F32, F16, BF16, F64, I8, I32
/// and I64 map to the dtype of the same name; every other type (I16 and the block formats)
/// gives nullopt.
std::optional<DType> ggml_type_dtype(GgmlType type);
/// The ggml type storing `dtype` as is (the inverse of ggml_type_dtype), or nullopt for u8 and
/// bool, which GGUF cannot store.
std::optional<GgmlType> ggml_type_of(DType dtype);

/// The type of a GGUF metadata value, numbered as in the file (gguf-py's GGUFValueType: UINT8
/// = 0, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64,
/// FLOAT64 = 12).
enum class GgufValueType : uint32_t {
  u8 = 0,
  i8 = 1,
  u16 = 2,
  i16 = 3,
  u32 = 4,
  i32 = 5,
  f32 = 6,
  bool_ = 7,
  string = 8,
  array = 9,
  u64 = 10,
  i64 = 11,
  f64 = 12,
};
/// "u8", "i8", ..., "f32", "bool", "string", "array", ..., "f64": the names messages use.
std::string_view gguf_value_type_name(GgufValueType type);

/// A GGUF metadata array: elements of one type, held in a vector of that type (an array of
/// arrays holds GgufArray elements, each with its own element type and length). An empty
/// array keeps the element type the file states.
class GgufArray {
 public:
  /// The alternatives in GgufValueType order, so items().index() is the element type.
  using Items = std::variant<std::vector<uint8_t>, std::vector<int8_t>, std::vector<uint16_t>,
                             std::vector<int16_t>, std::vector<uint32_t>, std::vector<int32_t>,
                             std::vector<float>, std::vector<bool>, std::vector<std::string>,
                             std::vector<GgufArray>, std::vector<uint64_t>, std::vector<int64_t>,
                             std::vector<double>>;

  /// An empty array of u8.
  GgufArray() = default;
  /// An array of `items`; T is one of the element types of Items (uint8_t ... double, bool,
  /// std::string, GgufArray).
  template <class T>
  explicit GgufArray(std::vector<T> items) : items_(std::move(items)) {}
  /// An empty array whose element type is `element_type`.
  static GgufArray empty_of(GgufValueType element_type);

  GgufValueType element_type() const { return static_cast<GgufValueType>(items_.index()); }
  size_t size() const;
  bool empty() const { return size() == 0; }
  /// The elements if they are of type T, else nullptr.
  template <class T>
  const std::vector<T>* get_if() const {
    return std::get_if<std::vector<T>>(&items_);
  }
  const Items& items() const { return items_; }
  Items& items() { return items_; }
  /// Same element type and equal elements (floats compare as floats: NaN != NaN).
  bool operator==(const GgufArray&) const = default;

 private:
  Items items_;
};

/// A GGUF metadata value; the alternatives are in GgufValueType order, so gguf_type() is the
/// index. Constructs from exactly typed C++ values: GgufValue(uint32_t{32}) is a u32,
/// GgufValue(5) an i32, GgufValue(1.5f) an f32, GgufValue(std::string("x")) a string.
using GgufValue = std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool,
                               std::string, GgufArray, uint64_t, int64_t, double>;

/// The type of `value`.
inline GgufValueType gguf_type(const GgufValue& value) {
  return static_cast<GgufValueType>(value.index());
}
/// `value` as text for people: numbers as C++ prints them (f32/f64 with round-trip precision),
/// strings quoted with non-printable bytes as \xNN, arrays as [a, b, ...]. At most `max_items`
/// elements of each array are printed, followed by "... (N items)".
std::string gguf_value_to_string(const GgufValue& value, size_t max_items = 8);

/// The GgufValueType of C++ type T (uint8_t ... double, bool, std::string, GgufArray).
template <class T>
constexpr GgufValueType gguf_value_type_of() {
  constexpr size_t kIndex = [] {
    size_t i = 0, found = std::variant_size_v<GgufValue>;
    [&]<size_t... I>(std::index_sequence<I...>) {
      ((std::is_same_v<T, std::variant_alternative_t<I, GgufValue>> ? (found = I) : ++i), ...);
    }
    (std::make_index_sequence<std::variant_size_v<GgufValue>>());
    return found;
  }();
  static_assert(kIndex < std::variant_size_v<GgufValue>,
                "T is not a GGUF value type (uint8_t ... double, bool, std::string, GgufArray)");
  return static_cast<GgufValueType>(kIndex);
}

/// Ordered metadata, as in a file: (key, value) pairs.
using GgufMetadata = std::vector<std::pair<std::string, GgufValue>>;

/// One tensor of a GGUF file as its tensor info describes it.
struct GgufTensorInfo {
  std::string name;
  GgmlType type = GgmlType::F32;
  /// The logical shape, OUTERMOST first (the file's dims reversed, as gguf-py's reader and
  /// numpy see it): a Q4_K matrix of 32 rows of 4096 stores dims [4096, 32] and has shape
  /// {32, 4096}. Empty for a 0-dim tensor (one element).
  std::vector<int64_t> shape;
  /// Byte offset of the data relative to the data section (GgufFile::data_offset()).
  uint64_t offset = 0;
  /// Byte size of the data: shape's element count / block_size * type_size.
  uint64_t nbytes = 0;
  /// File byte where this tensor's info record starts (for messages).
  uint64_t info_at = 0;

  /// The element count (1 for a 0-dim tensor).
  int64_t numel() const;
};

/// Bytes of a tensor inside a GgufFile's mapping (or its copy of the bytes), without a copy.
/// `owner` keeps the mapping alive as long as this object or a copy of it lives, even after the
/// GgufFile is gone. The memory is read-only.
struct GgufTensorBytes {
  std::span<const std::byte> bytes;
  std::shared_ptr<const void> owner;

  const std::byte* data() const { return bytes.data(); }
  size_t size() const { return bytes.size(); }
};

/// An opened GGUF file: validated metadata and tensor infos plus a read-only memory mapping of
/// the whole file (from_bytes(): a copy of the bytes instead). Copies are cheap and share the
/// mapping; every method is const and safe to call from several threads at once.
///
/// open() checks the whole file before returning, so that later reads see only bytes inside
/// it. Every count, length, dim and offset is checked against the bytes that remain before
/// anything is allocated or read, so a hostile file costs at most a small multiple of its own
/// size in memory (about 8x for a file of nothing but minimal metadata entries: each parsed
/// entry is a std::string key and a GgufValue; arrays of numbers cost their size in the file).
/// Rules (each error names the file, the byte offset and what was expected):
///   - the magic "GGUF"; version 2 or 3 (version 1 and byte-swapped, i.e. big-endian, files are
///     rejected by name);
///   - tensor_count <= remaining bytes / 24 and kv_count <= remaining bytes / 13 (the smallest
///     tensor info and metadata entry);
///   - strings fit in the file; keys and tensor names are valid UTF-8 (string values are kept
///     as raw bytes, not validated: tokenizer vocabularies may hold any bytes);
///   - value types and array element types are 0..12; array counts <= remaining bytes / the
///     smallest element (1 for u8, 8 for a string, 12 for an array); arrays nest at most
///     kMaxArrayDepth deep; a bool is the byte 0 or 1;
///   - no key appears twice; unknown keys are kept;
///   - general.alignment, if present, is a u32 power of two in [1, kMaxAlignment];
///   - n_dims <= 4 (GGML_MAX_DIMS); each dim <= 2^63 - 1 and their product too; the ggml type
///     is known; the innermost dim is a multiple of the type's block size;
///   - tensor names are unique; offsets are multiples of the alignment; every tensor's data
///     lies inside the data section and no two tensors' bytes overlap (gaps and trailing
///     bytes are allowed: writers pad).
/// As with any mmap, another process truncating the file while it is mapped makes reads of the
/// lost pages fault (SIGBUS); rlx cannot guard against that.
class GgufFile {
 public:
  /// Deepest nesting of arrays accepted: an array of arrays of u8 is depth 2.
  static constexpr int kMaxArrayDepth = 8;
  /// Largest general.alignment accepted (1 MiB).
  static constexpr uint32_t kMaxAlignment = 1u << 20;

  /// Maps and validates `path`. Throws rlx::Error naming the file for a file that cannot be
  /// opened or mapped (with the errno text) or that breaks any rule listed above.
  static GgufFile open(const std::string& path);
  /// Validates `bytes`, the contents of a GGUF file held in memory, as open() validates a file,
  /// and keeps its own copy of them. `name` stands for the path in path() and in every error
  /// message. Throws rlx::Error as open() does.
  static GgufFile from_bytes(std::string_view bytes, const std::string& name = "<memory>");

  /// The path given to open().
  const std::string& path() const { return path_; }
  /// 2 or 3.
  uint32_t version() const { return version_; }
  /// general.alignment, or 32 when the file does not set it.
  uint32_t alignment() const { return alignment_; }
  /// File byte where the data section starts: the end of the tensor infos rounded up to a
  /// multiple of alignment(). Past the end of the file only for a file without tensors that
  /// ends before the padding (which the reader accepts).
  uint64_t data_offset() const { return data_offset_; }
  /// Size of the file in bytes.
  uint64_t file_size() const { return file_size_; }

  /// Metadata keys in file order.
  const std::vector<std::string>& keys() const { return keys_; }
  /// Whether the file has metadata key `key`.
  bool contains(const std::string& key) const { return index_.count(key) != 0; }
  /// The value of `key`, or nullptr when the file has no such key.
  const GgufValue* find(const std::string& key) const;
  /// The value of `key`. Throws rlx::Error "<path>: no metadata key 'k'".
  const GgufValue& at(const std::string& key) const;
  /// The value of `key` as T (uint8_t ... double, bool, std::string or GgufArray), which must
  /// be its exact type: no conversions. Throws rlx::Error "<path>: metadata key 'k' (at byte
  /// B) has type u32, expected i32", or as at() when the key is missing.
  template <class T>
  const T& get(const std::string& key) const {
    return *std::get_if<T>(&typed(key, gguf_value_type_of<T>()));
  }
  /// get<std::string>(key).
  const std::string& get_string(const std::string& key) const { return get<std::string>(key); }
  /// The elements of array `key`, which must be an array of T. Throws rlx::Error "<path>:
  /// metadata key 'k' (at byte B) is an array of string, expected an array of i32" (or "has
  /// type u32, expected an array of i32"), or as at() when the key is missing.
  template <class T>
  const std::vector<T>& get_array(const std::string& key) const {
    return *typed_array(key, gguf_value_type_of<T>()).template get_if<T>();
  }
  /// File byte where the value of `key` starts (after its type), for messages of callers.
  /// Throws as at().
  uint64_t value_offset(const std::string& key) const;
  /// Every (key, value) pair in file order: what write_gguf takes to write the same metadata.
  GgufMetadata metadata() const;

  /// Tensor infos in file order.
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  /// The info of tensor `name`, or nullptr when there is none.
  const GgufTensorInfo* find_tensor(const std::string& name) const;
  /// The info of tensor `name`. Throws rlx::Error "<path>: no tensor named 'x'".
  const GgufTensorInfo& tensor_info(const std::string& name) const;
  /// The bytes of tensor `name` (info.nbytes of them), without a copy. Throws as tensor_info().
  GgufTensorBytes tensor_bytes(const std::string& name) const;
  /// Tensor `name` as an rlx::Tensor of ggml_type_dtype(type) and the logical shape: a view of
  /// the mapping that keeps it alive (read-only memory: clone() before writing), or an owned
  /// copy when its bytes are not aligned to the element size in memory (alignment 1 or 2 allow
  /// that). Throws rlx::Error "<path>: tensor 'x' has ggml type Q4_K, which has no rlx dtype
  /// (read its bytes with tensor_bytes())" for I16 and the block formats, or as tensor_info().
  Tensor tensor(const std::string& name) const;

 private:
  GgufFile() = default;
  static GgufFile parse(const std::string& path, std::shared_ptr<const void> owner,
                        const std::byte* bytes, size_t size);
  const GgufValue& typed(const std::string& key, GgufValueType expected) const;
  const GgufArray& typed_array(const std::string& key, GgufValueType expected) const;

  std::string path_;
  std::shared_ptr<const void> mapping_;  // owns the bytes; views share it
  const std::byte* bytes_ = nullptr;
  uint64_t file_size_ = 0;
  uint32_t version_ = 0;
  uint32_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::string> keys_;
  std::vector<GgufValue> values_;        // parallel to keys_
  std::vector<uint64_t> value_offsets_;  // parallel to keys_
  std::unordered_map<std::string, size_t> index_;
  std::vector<GgufTensorInfo> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
};

/// A tensor to write: `bytes` must hold exactly the tensor's byte size for `type` and `shape`
/// (logical, outermost first, as GgufTensorInfo::shape); the writer reads them while it runs
/// and does not keep them.
struct GgufTensorData {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<int64_t> shape;
  std::span<const std::byte> bytes;

  /// `tensor`'s dtype, shape and bytes (which must outlive the write). Throws rlx::Error for a
  /// u8 or bool tensor (GGUF has no such type).
  static GgufTensorData of(std::string name, const Tensor& tensor);
};

/// The bytes of a GGUF version 3 file holding `metadata` (in the given order) and `tensors`
/// (in the given order), laid out as gguf-py 0.19.0's GGUFWriter lays them out: header,
/// metadata, tensor infos, zero padding to the alignment, then each tensor's data followed by
/// zero padding to the alignment; tensor offsets are the running padded sizes. So for content
/// that gguf-py can write (it refuses empty arrays) the bytes are identical.
///
/// The alignment is `alignment`. If `metadata` has general.alignment it must be a u32 equal to
/// `alignment`; if it has none and `alignment` is not 32, general.alignment = alignment (u32) is
/// appended as the last metadata entry, so readers find it. Throws rlx::Error (naming `path`,
/// which only names the output in messages here) for: an alignment that is not a power of two
/// in [1, GgufFile::kMaxAlignment]; a duplicate key or tensor name; a key or tensor name that is
/// not valid UTF-8; arrays nested deeper than GgufFile::kMaxArrayDepth; a shape with more than 4
/// dims, a negative dim, an element count above 2^63 - 1 or an innermost dim that is not a
/// multiple of the type's block size; bytes of the wrong size.
std::string gguf_file_bytes(const GgufMetadata& metadata,
                            const std::vector<GgufTensorData>& tensors, uint32_t alignment = 32,
                            const std::string& path = "<memory>");

/// Writes what gguf_file_bytes() returns to `path`, streaming the tensor data (the file is not
/// assembled in memory), through an AtomicFileWriter (rlx/io/atomic_file.h): a temporary file
/// in the same directory, flushed and renamed over `path`, so readers see the old file or the
/// complete new one. Every check runs before the file is created. Throws rlx::Error as
/// gguf_file_bytes() does, and for any I/O failure (naming the path and the errno text); on
/// failure `path` is unchanged and no temporary file is left behind.
void write_gguf(const std::string& path, const GgufMetadata& metadata,
                const std::vector<GgufTensorData>& tensors, uint32_t alignment = 32);

}  // namespace rlx
