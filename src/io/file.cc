// read_file: a whole regular file through POSIX open/fstat/read, every failure naming the file;
// and the helpers the readers share (mapped_file.h): mmap of a whole file, UTF-8 validation.
#include "rlx/io/file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "mapped_file.h"
#include "rlx/ir/error.h"

namespace rlx {

std::string read_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error("cannot open '" + path + "': " + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (fstat(fd, &st) != 0) throw Error("cannot read '" + path + "': " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) throw Error("'" + path + "' is a directory, expected a file");
  if (!S_ISREG(st.st_mode)) throw Error("'" + path + "' is not a regular file");
  std::string out;
  out.reserve(static_cast<size_t>(st.st_size));
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error("cannot read '" + path + "': " + std::strerror(errno));
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

FileMapping::~FileMapping() { munmap(addr_, size_); }

std::shared_ptr<const FileMapping> map_file(const std::string& path, size_t& size) {
  auto errno_text = [](int err) { return std::string(std::strerror(err)); };
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(path + ": cannot open: " + errno_text(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    throw Error(path + ": cannot stat: " + errno_text(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    if (S_ISDIR(st.st_mode)) throw Error("'" + path + "' is a directory, expected a file");
    throw Error(path + ": not a regular file");
  }
  size = static_cast<size_t>(st.st_size);
  if (size == 0) {  // mmap of 0 bytes fails; the caller reports the short file
    ::close(fd);
    return nullptr;
  }
  void* addr = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  int err = errno;
  ::close(fd);  // the mapping keeps the file open
  if (addr == MAP_FAILED)
    throw Error(path + ": cannot map " + std::to_string(size) + " bytes: " + errno_text(err));
  return std::make_shared<const FileMapping>(addr, size);
}

namespace io_detail {

size_t invalid_utf8_at(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;  // range of the second byte
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;  // overlong
      if (c == 0xED) hi = 0x9F;  // surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;  // overlong
      if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
    } else {
      return i;
    }
    if (s.size() - i < len) return i;
    auto b1 = static_cast<unsigned char>(s[i + 1]);
    if (b1 < lo || b1 > hi) return i;
    for (size_t k = 2; k < len; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return i;
    i += len;
  }
  return std::string_view::npos;
}

}  // namespace io_detail

}  // namespace rlx
