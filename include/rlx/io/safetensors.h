// Reading (memory-mapped, zero-copy) and writing safetensors files.
//
// Format (https://github.com/huggingface/safetensors, as implemented by safetensors 0.8.0): an
// 8-byte little-endian u64 N, then N bytes of UTF-8 JSON (the header), then the data buffer.
// The header is an object mapping each tensor name to
//   {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}
// with byte offsets relative to the start of the data buffer, plus an optional
// "__metadata__": {string: string}. Data is little-endian and row-major (C order).
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "rlx/ir/tensor.h"

namespace rlx {

/// An opened safetensors file: the validated header plus a read-only memory mapping of the
/// whole file (from_bytes(): a copy of the bytes instead). Copies are cheap and share the mapping;
/// every method is const and safe to call from several threads at once.
///
/// open() checks the whole file before returning, so that any later get() reads only bytes
/// inside the file. Like the reference implementation it requires:
///   - the file is at least 8 bytes and 8 + N fits in it, with N <= 100,000,000;
///   - the header is valid UTF-8 and one JSON object (whitespace around it is allowed, which
///     is how writers pad it; a NUL byte is not), with no key appearing twice in any object
///     and at most 64 levels of nesting;
///   - "__metadata__", if present, is an object whose values are all strings;
///   - every other entry is an object with exactly the fields "dtype" (a safetensors dtype
///     name), "shape" (non-negative integers whose product, and its size in bytes, fit in
///     63 bits) and "data_offsets" ([begin, end], integers, begin <= end);
///   - end - begin equals the tensor's byte size;
///   - sorted by offsets, the tensors are contiguous and cover the data buffer exactly, from 0
///     to its end: no overlap, no gap, no trailing bytes.
/// rlx is stricter than safetensors 0.8.0 in two ways: it rejects unknown fields in a tensor
/// entry (the reference ignores them) and duplicate keys (the reference keeps the last one).
/// It is more lenient in one: like rlx::Shape, a shape with a 0 dim is empty wherever the 0
/// is, so [2^40, 2^40, 0] is accepted (the reference rejects it as an overflow).
///
/// The mapping lives as long as the SafetensorsFile or any tensor returned by get(),
/// whichever is longer. As with any mmap, another process truncating the file while it is
/// mapped makes reads of the lost pages fault (SIGBUS); rlx cannot guard against that.
class SafetensorsFile {
 public:
  /// Maps and validates `path`. Throws rlx::Error naming the file and, where it applies, the
  /// tensor, the byte offset and what was expected, for a file that cannot be opened or
  /// mapped (with the errno text) or that breaks any rule listed above.
  static SafetensorsFile open(const std::string& path);
  /// Validates `bytes`, the contents of a safetensors file held in memory (e.g. downloaded or
  /// embedded), as open() validates a file, and keeps its own copy of them. `name` stands for
  /// the path in path() and in every error message. Throws rlx::Error as open() does.
  static SafetensorsFile from_bytes(std::string_view bytes, const std::string& name = "<memory>");

  /// The path given to open().
  const std::string& path() const { return path_; }
  /// Tensor names in the order of their data in the file (by data_offsets; tensors of size 0
  /// at the same offset keep their header order). For a file made by write_safetensors this
  /// is the order given to it. "__metadata__" is not a tensor and is not listed.
  std::vector<std::string> names() const;
  /// Whether the file has a tensor called `name`.
  bool contains(const std::string& name) const;
  /// The dtype name as stored in the file ("F32", "BF16", "I16", "F8_E4M3", ...), known for
  /// every tensor, including those whose dtype rlx does not support. Throws rlx::Error if
  /// there is no such tensor.
  const std::string& stored_dtype(const std::string& name) const;
  /// The rlx dtype and shape of tensor `name`. safetensors F32, F16, BF16, F64, I8, U8, I32,
  /// I64 and BOOL map to the rlx dtype of the same name; for any other dtype (I16, U16, U32,
  /// U64, C64, F8_*, F6_*, F4) this throws rlx::Error "<path>: tensor 'x' has dtype I16,
  /// which rlx does not support". Also throws if there is no such tensor.
  TensorType type(const std::string& name) const;
  /// Tensor `name`, without a copy: a view of the mapped file that keeps the mapping alive.
  /// The view is read-only memory: writing through it is the caller's error (clone() first).
  /// If its data is not aligned to its element size in the file (safetensors does not require
  /// begin to be a multiple of the element size), it is copied into an owned, aligned tensor
  /// instead, so data_as<T>() is always safe. A BOOL tensor's bytes are checked to be 0 or 1
  /// (rlx's bool representation), else rlx::Error names the element. Also throws like type().
  Tensor get(const std::string& name) const;
  /// The "__metadata__" strings (empty if the header has none).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  struct Entry {
    std::string name;
    std::string stored_dtype;  // safetensors dtype name
    bool supported = false;    // `dtype` is meaningful only when true
    DType dtype = DType::f32;
    Shape shape;
    size_t begin = 0;  // byte offsets into the data buffer
    size_t end = 0;
  };

  SafetensorsFile() = default;
  /// The validation of open() and from_bytes() over `size` bytes that `owner` keeps alive.
  static SafetensorsFile parse(const std::string& path, std::shared_ptr<const void> owner,
                               const std::byte* bytes, size_t size);
  const Entry& entry(const std::string& name) const;

  std::string path_;
  std::shared_ptr<const void> mapping_;  // owns the mmap; tensors from get() share it
  const std::byte* data_ = nullptr;      // start of the data buffer inside the mapping
  std::vector<Entry> entries_;           // in names() order
  std::unordered_map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

/// Writes `tensors` (in the given order, laid out back to back) and `metadata` to `path` as a
/// safetensors file that safetensors 0.8.0 reads (and, for tensors given in its own order, the
/// same bytes it writes). The header is compact JSON (entries in the given order, after
/// "__metadata__", which is written only when `metadata` is not empty) padded with spaces so
/// the data buffer starts at a multiple of 8 bytes. Tensors are not reordered or padded
/// between each other (the format allows no gaps), so a tensor that follows one whose byte
/// size is not a multiple of its own element size is misaligned in the file, and get() copies
/// it; put the widest dtypes first to avoid that.
///
/// The file is written through an AtomicFileWriter (rlx/io/atomic_file.h): a temporary file in
/// the same directory, flushed to disk and renamed over `path`, so readers see either the old file
/// or the complete new one. Throws rlx::Error on a duplicate tensor name, the name "__metadata__",
/// a name or metadata string that is not valid UTF-8, or any I/O failure (naming the path and the
/// errno text); on failure `path` is unchanged and no temporary file is left behind.
void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace rlx
