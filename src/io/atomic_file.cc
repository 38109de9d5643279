// AtomicFileWriter: temporary file, checked writes, fsync, rename (rlx/io/atomic_file.h).
#include "rlx/io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <utility>

#include "rlx/ir/error.h"

namespace rlx {
namespace {

std::string errno_text(int err) { return std::strerror(err); }

/// The directory that holds `path` ("." for a bare file name), for syncing the rename.
std::string directory_of(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(std::string path) : path_(std::move(path)) {
  // A unique name in the same directory; O_EXCL never reuses a file another writer (or an
  // earlier crash) left. Mode 0666 lets the umask set the permissions of a new file.
  static std::atomic<uint64_t> counter{0};
  do {
    temp_ = path_ + ".tmp." + std::to_string(getpid()) + "." + std::to_string(counter++);
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  } while (fd_ < 0 && errno == EEXIST);
  if (fd_ < 0) {
    done_ = true;
    throw Error(path_ + ": cannot create temporary file '" + temp_ + "': " + errno_text(errno));
  }
  // The replacement keeps the permissions of the file it replaces.
  struct stat st {};
  if (::stat(path_.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
      ::fchmod(fd_, st.st_mode & 07777) != 0)
    fail("cannot set the permissions of '" + temp_ + "'", errno);
}

AtomicFileWriter::~AtomicFileWriter() {
  if (done_) return;
  ::close(fd_);
  ::unlink(temp_.c_str());
}

void AtomicFileWriter::fail(const std::string& what, int err) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  ::unlink(temp_.c_str());
  done_ = true;
  throw Error(path_ + ": " + what + ": " + errno_text(err));
}

void AtomicFileWriter::write(const void* data, size_t size) {
  check(!done_, path_ + ": write after the file was committed or a write failed");
  const auto* bytes = static_cast<const std::byte*>(data);
  while (size > 0) {
    // One call writes at most 1 GiB: Linux caps a write at ~2 GiB anyway.
    ssize_t w = ::write(fd_, bytes, std::min<size_t>(size, size_t{1} << 30));
    if (w < 0) {
      if (errno == EINTR) continue;
      fail("cannot write '" + temp_ + "'", errno);
    }
    if (w == 0) fail("cannot write '" + temp_ + "'", EIO);  // no progress: never loop forever
    bytes += w;
    size -= static_cast<size_t>(w);
  }
}

void AtomicFileWriter::commit() {
  check(!done_, path_ + ": commit after the file was committed or a write failed");
  if (::fsync(fd_) != 0) fail("cannot flush '" + temp_ + "' to disk", errno);
  // close() reports deferred write errors (NFS, quotas): checked like every write.
  int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) fail("cannot close '" + temp_ + "'", errno);
  if (std::rename(temp_.c_str(), path_.c_str()) != 0)
    fail("cannot rename '" + temp_ + "' to '" + path_ + "'", errno);
  done_ = true;
  int dir = ::open(directory_of(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
}

void write_file_atomically(const std::string& path, std::string_view bytes) {
  AtomicFileWriter out(path);
  out.write(bytes);
  out.commit();
}

}  // namespace rlx
