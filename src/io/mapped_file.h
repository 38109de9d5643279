// Helpers the file readers of rlx_io share (private to rlx_io): a read-only memory mapping of a
// whole file, and UTF-8 validation of names read from a file.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace rlx::io_detail {

/// The bytes of one file, mapped read-only (PROT_READ, MAP_PRIVATE) for as long as this object
/// lives; readers hand out views that share ownership of it.
class Mapping {
 public:
  Mapping(void* addr, size_t size) : addr_(addr), size_(size) {}
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping();
  const std::byte* bytes() const { return static_cast<const std::byte*>(addr_); }
  size_t size() const { return size_; }

 private:
  void* addr_;
  size_t size_;
};

/// Maps the regular file `path` and sets `size` to its length in bytes. An empty file maps
/// nothing (mmap of 0 bytes fails): the result is nullptr with `size` 0, and the caller reports
/// the short file in its own terms. Throws rlx::Error "P: cannot open: <errno text>" (also
/// "cannot stat", "cannot map N bytes"), "'P' is a directory, expected a file" or "P: not a
/// regular file".
std::shared_ptr<const Mapping> map_file(const std::string& path, size_t& size);

/// Index of the first byte of `s` that does not begin a well-formed UTF-8 sequence (RFC 3629:
/// no overlong forms, no surrogates, at most U+10FFFF), or npos if `s` is valid.
size_t invalid_utf8_at(std::string_view s);

}  // namespace rlx::io_detail
