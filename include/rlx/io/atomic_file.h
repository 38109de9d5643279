// Atomic file replacement: every file rlx writes goes through AtomicFileWriter, so a failed or
// interrupted write never leaves a half-written file in place of the old one.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace rlx {

/// Writes a new version of one file: the bytes go to a temporary file
/// "<path>.tmp.<pid>.<n>" in the same directory (so the final rename stays on one file
/// system and is atomic), and commit() flushes it to disk (fsync), closes it and renames it
/// over `path`. Until commit() returns, `path` is untouched: readers see the old file (or
/// none) and never a partial one.
///
/// Every system call is checked. On any failure (cannot create the temporary, a write fails,
/// e.g. ENOSPC or EFBIG, fsync / close / rename fail) the temporary file is removed, the old
/// file stays as it was, and rlx::Error is thrown naming `path`, the failed step and the
/// errno text ("out.bin: cannot write 'out.bin.tmp.12.0': File too large"). A writer
/// destroyed without commit() (an exception in the caller) removes its temporary too.
///
/// The new file gets the permissions of the file it replaces, or 0666 minus the umask for a
/// new one. If `path` is a symbolic link, the link itself is replaced by the new file. Not
/// thread-safe: one writer per thread; several writers of one path race only at the rename,
/// where the last one wins.
class AtomicFileWriter {
 public:
  /// Creates the temporary file next to `path`. Throws rlx::Error when it cannot ("w.bin:
  /// cannot create temporary file 'w.bin.tmp.12.0': No such file or directory").
  explicit AtomicFileWriter(std::string path);
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  /// Removes the temporary file unless commit() succeeded.
  ~AtomicFileWriter();

  /// Appends `size` bytes, retrying short writes and EINTR. Throws rlx::Error (and removes the
  /// temporary file) when a write fails; later calls then throw as well.
  void write(const void* data, size_t size);
  /// Appends the bytes of `bytes`.
  void write(std::string_view bytes) { write(bytes.data(), bytes.size()); }
  /// Flushes the temporary file to disk, closes it and renames it to path(); the directory is
  /// then synced so the rename itself survives a crash (best effort: the new file is already
  /// in place when that sync runs, so its failure is not reported). Throws rlx::Error, with the
  /// old file intact and the temporary removed, when any step before the rename fails.
  void commit();

  /// The file being replaced.
  const std::string& path() const { return path_; }
  /// The temporary file the bytes go to until commit().
  const std::string& temp_path() const { return temp_; }

 private:
  /// Closes and removes the temporary file, then throws "<path>: <what>: <strerror(err)>".
  [[noreturn]] void fail(const std::string& what, int err);

  std::string path_;
  std::string temp_;
  int fd_ = -1;
  bool done_ = false;  // committed, or failed and cleaned up
};

/// Replaces the file `path` with `bytes` through an AtomicFileWriter: all of them or, on
/// failure (rlx::Error naming the path and the errno text), no change at all.
void write_file_atomically(const std::string& path, std::string_view bytes);

}  // namespace rlx
