// Reading or mapping a whole file with errors that name it: missing, a directory, unreadable.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace rlx {

/// The bytes of the regular file at `path` (an empty file gives ""). Throws rlx::Error
/// "cannot open 'P': <reason>" when it does not exist or cannot be opened, "'P' is a
/// directory, expected a file" for a directory, "'P' is not a regular file" for a socket,
/// device, ..., and "cannot read 'P': <reason>" when reading fails.
std::string read_file(const std::string& path);

/// The bytes of one file, mapped read-only (PROT_READ, MAP_PRIVATE) for as long as this object
/// lives; readers hand out views (Tensor::view_of) that share ownership of it.
class FileMapping {
 public:
  FileMapping(void* addr, size_t size) : addr_(addr), size_(size) {}
  FileMapping(const FileMapping&) = delete;
  FileMapping& operator=(const FileMapping&) = delete;
  ~FileMapping();
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
std::shared_ptr<const FileMapping> map_file(const std::string& path, size_t& size);

}  // namespace rlx
