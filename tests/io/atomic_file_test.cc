// AtomicFileWriter and the writers built on it: a file is replaced whole or not at all. Write
// failures are real ones: a forked child lowers its file-size limit (RLIMIT_FSIZE, SIGXFSZ
// ignored) so write() fails with EFBIG part way through, as on a full disk.
#include "rlx/io/atomic_file.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "common/scoped_env.h"
#include "common/test_util.h"
#include "rlx/io/safetensors.h"
#include "rlx/ir/error.h"

namespace rlx {
namespace {

namespace fs = std::filesystem;
using testing::error_of;

using testing::TempDir;
std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_plain(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

/// Runs `fn` in a forked child whose files may not grow beyond `limit` bytes, with SIGXFSZ
/// ignored so an oversized write() fails with EFBIG instead of killing the child. Returns the
/// message of the rlx::Error `fn` threw; fails the test when it threw nothing or crashed.
std::string error_under_file_size_limit(rlim_t limit, const std::function<void()>& fn) {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  pid_t pid = fork();
  if (pid == 0) {
    ::close(fds[0]);
    signal(SIGXFSZ, SIG_IGN);
    rlimit rl{limit, limit};
    int code = setrlimit(RLIMIT_FSIZE, &rl) == 0 ? 1 : 3;
    std::string msg = "setrlimit failed";
    if (code == 1) {
      try {
        fn();
        msg = "no error";
      } catch (const Error& e) {
        msg = e.what();
        code = 0;
      } catch (...) {
        msg = "an exception that is not rlx::Error";
        code = 2;
      }
    }
    ssize_t w = ::write(fds[1], msg.data(), msg.size());
    ::close(fds[1]);
    _exit(w == static_cast<ssize_t>(msg.size()) ? code : 4);
  }
  ::close(fds[1]);
  std::string msg;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;)
    msg.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "child status " << status << ": " << msg;
  return msg;
}

#define EXPECT_CONTAINS(haystack, needle)                                       \
  do {                                                                          \
    const std::string& rlx_h_ = (haystack);                                     \
    EXPECT_NE(rlx_h_.find(needle), std::string::npos) << "message: " << rlx_h_; \
  } while (0)

TEST(AtomicFile, CreatesAndReplacesLeavingNoTemporary) {
  TempDir dir;
  std::string path = dir.file("out.txt");
  write_file_atomically(path, "first");
  EXPECT_EQ(read_bytes(path), "first");
  write_file_atomically(path, "second, longer");
  EXPECT_EQ(read_bytes(path), "second, longer");
  write_file_atomically(path, "");
  EXPECT_EQ(read_bytes(path), "");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"out.txt"});
}

TEST(AtomicFile, KeepsThePermissionsOfTheReplacedFile) {
  TempDir dir;
  std::string path = dir.file("mode.txt");
  write_plain(path, "old");
  ASSERT_EQ(chmod(path.c_str(), 0640), 0);
  write_file_atomically(path, "new");
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  EXPECT_EQ(read_bytes(path), "new");
}

TEST(AtomicFile, NothingReplacedUntilCommitAndTemporaryRemovedWithoutIt) {
  TempDir dir;
  std::string path = dir.file("w.bin");
  write_plain(path, "old contents");
  {
    AtomicFileWriter out(path);
    out.write("new contents");
    EXPECT_EQ(read_bytes(path), "old contents");  // readers still see the old file
    EXPECT_EQ(fs::path(out.temp_path()).parent_path(), fs::path(path).parent_path());
    EXPECT_EQ(dir.entries().size(), 2u);
  }  // destroyed without commit, as when the caller throws
  EXPECT_EQ(read_bytes(path), "old contents");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"w.bin"});
}

TEST(AtomicFile, MissingDirectoryNamesThePathAndErrno) {
  TempDir dir;
  std::string path = dir.file("no/such/dir/w.bin");
  std::string msg = error_of([&] { write_file_atomically(path, "x"); });
  EXPECT_CONTAINS(msg, path + ": cannot create temporary file '" + path + ".tmp.");
  EXPECT_CONTAINS(msg, "No such file or directory");
}

TEST(AtomicFile, UsingAFailedWriterIsAnError) {
  TempDir dir;
  std::string path = dir.file("w.bin");
  AtomicFileWriter out(path);
  out.write("abc");
  out.commit();
  EXPECT_CONTAINS(error_of([&] { out.write("more"); }), path + ": write after the file was");
  EXPECT_CONTAINS(error_of([&] { out.commit(); }), path + ": commit after the file was");
  EXPECT_EQ(read_bytes(path), "abc");
}

TEST(AtomicFile, WriteFailureKeepsTheOldFileAndRemovesTheTemporary) {
  TempDir dir;
  std::string path = dir.file("big.bin");
  const std::string old(10000, 'o');  // larger than the limit below: only new writes fail
  write_plain(path, old);
  const std::string big(1 << 20, 'n');
  std::string msg = error_under_file_size_limit(4096, [&] { write_file_atomically(path, big); });
  EXPECT_CONTAINS(msg, path + ": cannot write '" + path + ".tmp.");
  EXPECT_CONTAINS(msg, "File too large");
  EXPECT_EQ(read_bytes(path), old);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"big.bin"});
}

TEST(AtomicFile, SafetensorsWriteFailureKeepsTheOldFile) {
  TempDir dir;
  std::string path = dir.file("w.safetensors");
  write_safetensors(path, {{"a", Tensor::full(DType::f32, Shape{4}, 1.0)}});
  const std::string old = read_bytes(path);
  Tensor big = Tensor::full(DType::f32, Shape{1 << 18}, 2.0);  // 1 MiB
  std::string msg = error_under_file_size_limit(64 * 1024, [&] {
    write_safetensors(path, {{"a", big}});
  });
  EXPECT_CONTAINS(msg, path + ": cannot write '" + path + ".tmp.");
  EXPECT_CONTAINS(msg, "File too large");
  EXPECT_EQ(read_bytes(path), old);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"w.safetensors"});
  // The old file still opens and holds its tensor.
  EXPECT_EQ(SafetensorsFile::open(path).get("a").get_f64(3), 1.0);
}

TEST(AtomicFile, FailureBeforeTheFirstByteLeavesNoNewFile) {
  TempDir dir;
  std::string path = dir.file("new.bin");
  // Limit 0: even the first write fails; no file appears under the final name.
  std::string msg = error_under_file_size_limit(0, [&] { write_file_atomically(path, "x"); });
  EXPECT_CONTAINS(msg, "File too large");
  EXPECT_TRUE(dir.entries().empty());
}

}  // namespace
}  // namespace rlx
