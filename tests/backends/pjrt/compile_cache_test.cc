// The persistent compile cache (compile_cache.h): the directory from RLX_CACHE_DIR, the entry
// format and its checks, the key, a second compile and a second process loading the entry, a
// corrupted, truncated or mismatched entry detected, recompiled and replaced, and cached results
// bit-equal to uncached ones.
#include "compile_cache.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include "common/scoped_env.h"
#include "pjrt_test_util.h"
#include "rlx/ir/error.h"
#include "rlx/models/encoder_block.h"

namespace rlx::pjrt {
namespace {

namespace fs = std::filesystem;
using rlx::testing::ScopedEnv;
using rlx::testing::TempDir;

// The rest of this suite compiles without the cache (no writes to ~/.cache/rlx from tests)
// unless RLX_CACHE_DIR is set on purpose: run the suite with RLX_CACHE_DIR=<dir> twice to run
// every test on cached executables.
const bool kCacheOffByDefault = [] {
  ::setenv("RLX_CACHE_DIR", "", /*overwrite=*/0);
  return true;
}();

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
}

// The one entry in `dir` (the cache's pjrt/ folder).
fs::path only_entry(const fs::path& dir) {
  std::vector<fs::path> found;
  for (const auto& e : fs::directory_iterator(dir)) found.push_back(e.path());
  EXPECT_EQ(found.size(), 1u);
  return found.empty() ? fs::path() : found.front();
}

CompileCacheStats operator-(const CompileCacheStats& a, const CompileCacheStats& b) {
  return {a.hits - b.hits,         a.misses - b.misses, a.stores - b.stores,
          a.rejected - b.rejected, a.errors - b.errors, a.evicted - b.evicted};
}
std::string to_string(const CompileCacheStats& s) {
  return "hits=" + std::to_string(s.hits) + " misses=" + std::to_string(s.misses) +
         " stores=" + std::to_string(s.stores) + " rejected=" + std::to_string(s.rejected) +
         " errors=" + std::to_string(s.errors);
}

// A small encoder layer (batch 2, seq 16, hidden 64), its feeds, and its run on pjrt:0.
struct Layer {
  Graph g = models::build_encoder_block(models::EncoderBlockConfig{});
  TensorMap feeds = models::encoder_block_feeds(g, 3);

  std::vector<Tensor> compile_and_run() const {
    std::unique_ptr<Executable> exe =
        testing::test_backend()->compile(g, testing::f32_options(), Device::parse("pjrt:0"));
    TensorMap inputs;
    for (int32_t id : g.params()) exe->set_param(g.node(id).name, feeds.at(g.node(id).name));
    for (int32_t id : g.inputs()) inputs.emplace(g.node(id).name, feeds.at(g.node(id).name));
    return exe->run(inputs);
  }
};

::testing::AssertionResult bit_equal(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "output counts differ";
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].type() != b[i].type() || a[i].nbytes() != b[i].nbytes() ||
        std::memcmp(a[i].data(), b[i].data(), a[i].nbytes()) != 0)
      return ::testing::AssertionFailure() << "output " << i << " differs";
  }
  return ::testing::AssertionSuccess();
}

// The results of an uncached compile.
std::vector<Tensor> uncached_results(const Layer& layer) {
  ScopedEnv env;
  env.set("RLX_CACHE_DIR", "");
  return layer.compile_and_run();
}

TEST(PjrtCompileCache, DirectoryFromTheEnvironment) {
  ScopedEnv env;
  env.set("RLX_CACHE_DIR", "/some/where");
  EXPECT_EQ(compile_cache_dir(), std::optional<std::string>("/some/where/pjrt"));
  env.set("RLX_CACHE_DIR", "");
  EXPECT_EQ(compile_cache_dir(), std::nullopt);
  env.set("RLX_CACHE_DIR", "off");
  EXPECT_EQ(compile_cache_dir(), std::nullopt);
  env.set("RLX_CACHE_DIR", std::nullopt);
  env.set("HOME", "/home/u");
  EXPECT_EQ(compile_cache_dir(), std::optional<std::string>("/home/u/.cache/rlx/pjrt"));
  env.set("HOME", std::nullopt);
  EXPECT_EQ(compile_cache_dir(), std::nullopt);
}

TEST(PjrtCompileCache, EntryFormatChecksEveryPart) {
  const std::string key = "the key", payload = "some executable bytes";
  const std::string entry = encode_cache_entry(key, payload);
  ASSERT_EQ(entry.size(), kCacheHeaderSize + key.size() + payload.size());
  std::string why;
  EXPECT_EQ(decode_cache_entry(entry, key, &why), std::optional<std::string_view>(payload));

  auto rejects = [&](const std::string& bad, std::string_view k, const std::string& reason) {
    std::string w;
    EXPECT_EQ(decode_cache_entry(bad, k, &w), std::nullopt) << reason;
    EXPECT_NE(w.find(reason), std::string::npos) << w;
  };
  rejects(entry.substr(0, 10), key, "truncated");
  rejects(entry.substr(0, entry.size() - 1), key, "size mismatch");
  rejects(entry + "x", key, "size mismatch");
  std::string magic = entry;
  magic[0] = 'X';
  rejects(magic, key, "bad magic");
  std::string version = entry;
  version[8] = static_cast<char>(kCacheFormatVersion + 1);
  rejects(version, key, "format version " + std::to_string(kCacheFormatVersion + 1));
  rejects(entry, "another key", "another key");
  std::string flipped = entry;
  flipped[entry.size() - 3] ^= 0x10;
  rejects(flipped, key, "checksum");
  std::string huge = entry;
  huge[23] = '\x7f';  // key size near 2^63
  rejects(huge, key, "size mismatch");
}

// The key names the compiler (plugin file, API version, platform), the options and the module;
// XLA_FLAGS changes it (and so the file).
TEST(PjrtCompileCache, KeyNamesCompilerOptionsAndModule) {
  RLX_REQUIRE_PJRT_PLUGIN();
  auto client = std::make_shared<Client>(Plugin::load(testing::test_plugin()));
  const std::string key = compile_cache_key(*client, "module @m {}", minimal_compile_options());
  const auto& v = client->plugin().api->pjrt_api_version;
  for (const std::string& part :
       {std::string("plugin ") + client->plugin().path, std::string("\nplugin_size "),
        std::string("\nplugin_mtime_ns "),
        "\npjrt_api " + std::to_string(v.major_version) + "." + std::to_string(v.minor_version),
        std::string("\nplatform cpu\n"), std::string("\nplatform_version "),
        std::string("\ncompile_options 1a0420012801\n"), std::string("\nmodule 12\nmodule @m {}")})
    EXPECT_NE(key.find(part), std::string::npos) << part << "\nin:\n" << key;
  ScopedEnv env;
  env.set("XLA_FLAGS", "--xla_cpu_enable_fast_math=false");
  const std::string flagged = compile_cache_key(*client, "module @m {}", minimal_compile_options());
  EXPECT_NE(flagged, key);
  EXPECT_NE(compile_cache_entry_path("d", flagged), compile_cache_entry_path("d", key));
}

// In one process: the first compile stores, the second loads; both give the uncached results
// bit for bit. With the cache off nothing is read or written.
TEST(PjrtCompileCache, SecondCompileLoadsTheEntry) {
  RLX_REQUIRE_PJRT_PLUGIN();
  Layer layer;
  const std::vector<Tensor> want = uncached_results(layer);
  TempDir dir;
  ScopedEnv env;
  env.set("RLX_CACHE_DIR", dir.path().string());
  CompileCacheStats before = compile_cache_stats();
  EXPECT_TRUE(bit_equal(layer.compile_and_run(), want));
  CompileCacheStats first = compile_cache_stats() - before;
  EXPECT_EQ(to_string(first), "hits=0 misses=1 stores=1 rejected=0 errors=0");
  const fs::path entry = only_entry(dir.path() / "pjrt");
  EXPECT_EQ(entry.extension(), ".xla");
  EXPECT_TRUE(bit_equal(layer.compile_and_run(), want));
  CompileCacheStats second = compile_cache_stats() - before;
  EXPECT_EQ(to_string(second), "hits=1 misses=1 stores=1 rejected=0 errors=0");

  env.set("RLX_CACHE_DIR", "");
  fs::remove(entry);
  before = compile_cache_stats();
  EXPECT_TRUE(bit_equal(layer.compile_and_run(), want));
  EXPECT_EQ(to_string(compile_cache_stats() - before),
            "hits=0 misses=0 stores=0 rejected=0 errors=0");
  EXPECT_TRUE(fs::is_empty(dir.path() / "pjrt"));
}

// Run by SecondProcessHitsTheCache in a child process (skipped otherwise): compiles the layer
// with the cache of RLX_CACHE_DIR, prints the counters, and checks the results against an
// uncached compile bit for bit.
TEST(PjrtCompileCacheChild, CompileAndRun) {
  const char* child = std::getenv("RLX_PJRT_CACHE_TEST_CHILD");
  if (child == nullptr) GTEST_SKIP() << "run by PjrtCompileCache.SecondProcessHitsTheCache";
  RLX_REQUIRE_PJRT_PLUGIN();
  Layer layer;
  CompileCacheStats before = compile_cache_stats();
  std::vector<Tensor> got = layer.compile_and_run();
  std::cout << "child: " << to_string(compile_cache_stats() - before) << "\n";
  EXPECT_TRUE(bit_equal(got, uncached_results(layer)));
}

TEST(PjrtCompileCache, SecondProcessHitsTheCache) {
  RLX_REQUIRE_PJRT_PLUGIN();
  TempDir dir;
  // This binary (also when a rebuild replaced the file while it runs).
  const std::string self = "/proc/" + std::to_string(::getpid()) + "/exe";
  auto run_child = [&](const std::string& log) {
    const std::string cmd = "env -u GTEST_TOTAL_SHARDS -u GTEST_SHARD_INDEX RLX_CACHE_DIR='" +
                            dir.path().string() + "' RLX_PJRT_CACHE_TEST_CHILD=1 '" + self +
                            "' --gtest_filter=PjrtCompileCacheChild.CompileAndRun > '" + log +
                            "' 2>&1";
    int rc = std::system(cmd.c_str());
    std::string out = read_bytes(log);
    EXPECT_EQ(rc, 0) << out;
    return out;
  };
  std::string first = run_child(dir.file("first.log"));
  EXPECT_NE(first.find("child: hits=0 misses=1 stores=1 rejected=0 errors=0"), std::string::npos)
      << first;
  std::string second = run_child(dir.file("second.log"));
  EXPECT_NE(second.find("child: hits=1 misses=0 stores=0 rejected=0 errors=0"), std::string::npos)
      << second;
  EXPECT_NE(second.find("[  PASSED  ] 1 test"), std::string::npos) << second;
}

// Each damage to the entry is detected: a warning names the entry and the reason, the layer is
// recompiled (same results) and the entry replaced by an intact one that the next compile loads.
TEST(PjrtCompileCache, CorruptOrMismatchedEntryIsRecompiledAndReplaced) {
  RLX_REQUIRE_PJRT_PLUGIN();
  Layer layer;
  const std::vector<Tensor> want = uncached_results(layer);
  TempDir dir;
  ScopedEnv env;
  env.set("RLX_CACHE_DIR", dir.path().string());
  EXPECT_TRUE(bit_equal(layer.compile_and_run(), want));
  const fs::path entry = only_entry(dir.path() / "pjrt");
  const std::string good = read_bytes(entry);
  const uint64_t key_size = [&] {
    uint64_t n = 0;
    for (int i = 0; i < 8; ++i) n |= uint64_t(static_cast<unsigned char>(good[16 + i])) << (8 * i);
    return n;
  }();
  const std::string key = good.substr(kCacheHeaderSize, key_size);
  const std::string payload = good.substr(kCacheHeaderSize + key_size);

  struct Damage {
    std::string name, bytes, reason;
  };
  std::vector<Damage> damages;
  damages.push_back({"empty", "", "truncated"});
  damages.push_back({"truncated", good.substr(0, good.size() / 2), "size mismatch"});
  std::string flipped = good;
  flipped[kCacheHeaderSize + key_size + payload.size() / 2] ^= 0x01;
  damages.push_back({"flipped payload byte", flipped, "checksum"});
  std::string version = good;
  version[8] = static_cast<char>(kCacheFormatVersion + 1);
  damages.push_back({"format version", version, "format version"});
  // An entry of another plugin version at this file name (as a hash collision would put it).
  std::string other_key = key;
  size_t at = other_key.find("\npjrt_api ");
  ASSERT_NE(at, std::string::npos);
  other_key.insert(at + 10, "9");
  damages.push_back({"plugin version", encode_cache_entry(other_key, payload), "another key"});
  // Bytes the plugin cannot load although the entry is intact.
  damages.push_back(
      {"garbage payload", encode_cache_entry(key, "not an executable"), "DeserializeAndLoad"});

  for (const Damage& d : damages) {
    SCOPED_TRACE(d.name);
    write_bytes(entry, d.bytes);
    CompileCacheStats before = compile_cache_stats();
    ::testing::internal::CaptureStderr();
    std::vector<Tensor> got = layer.compile_and_run();
    std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_TRUE(bit_equal(got, want));
    EXPECT_EQ(to_string(compile_cache_stats() - before),
              "hits=0 misses=1 stores=1 rejected=1 errors=0");
    EXPECT_NE(
        err.find("rlx: warning: pjrt compile cache: entry '" + entry.string() + "' is unusable ("),
        std::string::npos)
        << err;
    EXPECT_NE(err.find(d.reason), std::string::npos) << err;
    std::string why;
    EXPECT_TRUE(decode_cache_entry(read_bytes(entry), key, &why)) << why;
    before = compile_cache_stats();
    EXPECT_TRUE(bit_equal(layer.compile_and_run(), want));
    EXPECT_EQ((compile_cache_stats() - before).hits, 1);
  }
  // Only the entry is left (no temporary files).
  EXPECT_EQ(only_entry(dir.path() / "pjrt"), entry);
}

// A cache directory that cannot be created only warns: the compile goes on.
TEST(PjrtCompileCache, UnwritableDirectoryOnlyWarns) {
  RLX_REQUIRE_PJRT_PLUGIN();
  TempDir dir;
  const fs::path blocker = dir.write("file");  // a file where the directory should be
  ScopedEnv env;
  env.set("RLX_CACHE_DIR", blocker.string());
  Layer layer;
  CompileCacheStats before = compile_cache_stats();
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(layer.compile_and_run().size(), 1u);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(to_string(compile_cache_stats() - before),
            "hits=0 misses=1 stores=0 rejected=0 errors=1");
  EXPECT_NE(err.find("rlx: warning: pjrt compile cache: cannot store"), std::string::npos) << err;
}

// ---- eviction, info / clear, concurrency

// Files of `dir`, sorted by name.
std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// Least recently used first, down to the cap, never the kept entry; stale temporaries go, fresh
// ones (a write in progress) and other files stay.
TEST(PjrtCompileCacheEviction, LeastRecentlyUsedFirstDownToTheCap) {
  TempDir dir;
  const auto now = fs::file_time_type::clock::now();
  auto entry = [&](const std::string& name, size_t bytes, std::chrono::minutes age) {
    fs::path p = dir.write(name, std::string(bytes, 'x'));
    fs::last_write_time(p, now - age);
    return p;
  };
  const fs::path a = entry("a.xla", 100, std::chrono::minutes(50));  // oldest, but kept
  entry("b.xla", 200, std::chrono::minutes(40));
  entry("c.xla", 300, std::chrono::minutes(30));
  entry("d.xla", 50, std::chrono::minutes(20));
  entry("e.xla", 10, std::chrono::minutes(10));
  entry("old.xla.tmp.1.0", 999, std::chrono::minutes(120));  // a dead writer's
  entry("fresh.xla.tmp.2.0", 999, std::chrono::minutes(1));  // a write in progress
  entry("notes.txt", 5000, std::chrono::minutes(500));       // not the cache's
  const CompileCacheStats before = compile_cache_stats();
  // 660 bytes of entries: b (200) and c (300) go, oldest first, leaving 160 <= 400.
  EXPECT_EQ(evict_compile_cache(dir.path(), 400, a), 2);
  EXPECT_EQ(names_in(dir.path()), (std::vector<std::string>{"a.xla", "d.xla", "e.xla",
                                                            "fresh.xla.tmp.2.0", "notes.txt"}));
  EXPECT_EQ((compile_cache_stats() - before).evicted, 2);
  EXPECT_EQ(evict_compile_cache(dir.path(), 160, a), 0);  // at the cap: nothing
  // Cap 0: everything but the kept entry, even when it alone is over the cap.
  EXPECT_EQ(evict_compile_cache(dir.path(), 0, a), 2);
  EXPECT_EQ(names_in(dir.path()),
            (std::vector<std::string>{"a.xla", "fresh.xla.tmp.2.0", "notes.txt"}));
  EXPECT_EQ(evict_compile_cache(dir.path() / "missing", 0), 0);
}

// A process that opened an entry reads it whole although another process evicts it meanwhile
// (POSIX unlink): load_or_compile reads the whole file once opened, so eviction needs no lock.
TEST(PjrtCompileCacheEviction, AReaderOfAnEvictedEntryReadsItWhole) {
  TempDir dir;
  std::string bytes(1 << 20, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 131 % 251);
  const fs::path p = dir.write("e.xla", bytes);
  std::ifstream reader(p, std::ios::binary);
  ASSERT_TRUE(reader);
  EXPECT_EQ(evict_compile_cache(dir.path(), 0), 1);
  EXPECT_FALSE(fs::exists(p));
  std::string got{std::istreambuf_iterator<char>(reader), std::istreambuf_iterator<char>()};
  EXPECT_EQ(got, bytes);
}

// Through compiles: a hit touches its entry (LRU order), a store evicts down to
// RLX_CACHE_MAX_BYTES keeping the entry just written, a malformed cap fails the compile.
TEST(PjrtCompileCacheEviction, HitsTouchAndStoresEvict) {
  RLX_REQUIRE_PJRT_PLUGIN();
  TempDir dir;
  ScopedEnv env;
  env.set("RLX_CACHE_DIR", dir.path().string());
  env.set("RLX_CACHE_MAX_BYTES", std::nullopt);
  Layer a;
  Layer b;
  b.g = models::build_encoder_block(models::EncoderBlockConfig{.heads = 2});
  b.feeds = models::encoder_block_feeds(b.g, 3);
  a.compile_and_run();
  const fs::path pa = only_entry(dir.path() / "pjrt");
  const auto hour_ago = fs::file_time_type::clock::now() - std::chrono::hours(1);
  fs::last_write_time(pa, hour_ago);
  CompileCacheStats before = compile_cache_stats();
  a.compile_and_run();  // a hit
  EXPECT_EQ((compile_cache_stats() - before).hits, 1);
  EXPECT_GT(fs::last_write_time(pa), hour_ago + std::chrono::minutes(59));
  // A cap of one byte: storing b's entry evicts a's and keeps b's, though it is larger.
  env.set("RLX_CACHE_MAX_BYTES", "1");
  before = compile_cache_stats();
  b.compile_and_run();
  EXPECT_EQ(to_string(compile_cache_stats() - before),
            "hits=0 misses=1 stores=1 rejected=0 errors=0");
  EXPECT_EQ((compile_cache_stats() - before).evicted, 1);
  const fs::path pb = only_entry(dir.path() / "pjrt");
  EXPECT_NE(pb, pa);
  env.set("RLX_CACHE_MAX_BYTES", "lots");
  std::string err;
  try {
    a.compile_and_run();
  } catch (const Error& e) {
    err = e.what();
  }
  EXPECT_EQ(err.rfind("RLX_CACHE_MAX_BYTES: expected a positive byte count", 0), 0u) << err;
}

TEST(PjrtCompileCacheInfo, InfoAndClear) {
  TempDir dir;
  ScopedEnv env;
  env.set("RLX_CACHE_DIR", dir.path().string());
  env.set("RLX_CACHE_MAX_BYTES", std::nullopt);
  CompileCacheInfo info = compile_cache_info();  // the directory does not exist yet
  EXPECT_EQ(info.dir, std::optional<std::string>((dir.path() / "pjrt").string()));
  EXPECT_EQ(info.entries, 0);
  EXPECT_EQ(info.bytes, 0);
  EXPECT_EQ(info.max_bytes, int64_t{1} << 30);
  EXPECT_EQ(clear_compile_cache(), 0);
  env.set("RLX_CACHE_MAX_BYTES", "512M");
  EXPECT_EQ(compile_cache_info().max_bytes, int64_t{512} << 20);

  const fs::path pjrt = dir.path() / "pjrt";
  dir.write("pjrt/1.xla", std::string(100, 'x'));
  dir.write("pjrt/2.xla", std::string(23, 'x'));
  dir.write("pjrt/3.xla.tmp.9.9", std::string(1000, 'x'));  // a write in progress: not counted
  const fs::path stale = dir.write("pjrt/4.xla.tmp.9.8", "x");
  fs::last_write_time(stale, fs::file_time_type::clock::now() - std::chrono::hours(2));
  info = compile_cache_info();
  EXPECT_EQ(info.entries, 2);
  EXPECT_EQ(info.bytes, 123);
  const CompileCacheStats now = compile_cache_stats();
  EXPECT_EQ(to_string(info.stats), to_string(now));
  EXPECT_EQ(clear_compile_cache(), 2);
  EXPECT_EQ(names_in(pjrt), (std::vector<std::string>{"3.xla.tmp.9.9"}));
  EXPECT_EQ(compile_cache_info().entries, 0);

  env.set("RLX_CACHE_DIR", "off");
  info = compile_cache_info();
  EXPECT_EQ(info.dir, std::nullopt);
  EXPECT_EQ(info.entries, 0);
  EXPECT_EQ(clear_compile_cache(), 0);
  EXPECT_EQ(names_in(pjrt).size(), 1u);
}

// Threads of one process compiling the same graph at once: every result is right, nothing is
// rejected or fails, one intact entry is left (no temporaries) and the next compile hits it.
TEST(PjrtCompileCacheRace, ThreadsCompilingTheSameGraph) {
  RLX_REQUIRE_PJRT_PLUGIN();
  Layer layer;
  const std::vector<Tensor> want = uncached_results(layer);
  TempDir dir;
  ScopedEnv env;
  env.set("RLX_CACHE_DIR", dir.path().string());
  const CompileCacheStats before = compile_cache_stats();
  constexpr int kThreads = 4;
  std::vector<std::vector<Tensor>> got(kThreads);
  std::vector<std::string> errors(kThreads);
  {
    std::vector<std::thread> threads;
    for (int i = 0; i < kThreads; ++i)
      threads.emplace_back([&, i] {
        try {
          got[static_cast<size_t>(i)] = layer.compile_and_run();
        } catch (const std::exception& e) {
          errors[static_cast<size_t>(i)] = e.what();
        }
      });
    for (std::thread& t : threads) t.join();
  }
  for (int i = 0; i < kThreads; ++i) {
    EXPECT_EQ(errors[static_cast<size_t>(i)], "");
    EXPECT_TRUE(bit_equal(got[static_cast<size_t>(i)], want)) << "thread " << i;
  }
  const CompileCacheStats d = compile_cache_stats() - before;
  EXPECT_EQ(d.hits + d.misses, kThreads);
  EXPECT_EQ(d.stores, d.misses);
  EXPECT_EQ(d.rejected + d.errors, 0);
  only_entry(dir.path() / "pjrt");
  const CompileCacheStats again = compile_cache_stats();
  EXPECT_TRUE(bit_equal(layer.compile_and_run(), want));
  EXPECT_EQ(to_string(compile_cache_stats() - again),
            "hits=1 misses=0 stores=0 rejected=0 errors=0");
}

// Two processes compiling the same graph at once (each writes its own temporary and renames
// it over the entry): both pass with results bit-equal to an uncached compile, no warning, one
// intact entry, and a third process hits it.
TEST(PjrtCompileCacheRace, TwoProcessesCompilingTheSameGraph) {
  RLX_REQUIRE_PJRT_PLUGIN();
  TempDir dir;
  const std::string self = "/proc/" + std::to_string(::getpid()) + "/exe";
  auto child = [&](const std::string& name) {
    return "env -u GTEST_TOTAL_SHARDS -u GTEST_SHARD_INDEX RLX_CACHE_DIR='" + dir.path().string() +
           "' RLX_PJRT_CACHE_TEST_CHILD=1 '" + self +
           "' --gtest_filter=PjrtCompileCacheChild.CompileAndRun > '" + dir.file(name + ".log") +
           "' 2>&1; echo $? > '" + dir.file(name + ".rc") + "'";
  };
  const std::string both = "(" + child("a") + ") & (" + child("b") + ") & wait";
  ASSERT_EQ(std::system(both.c_str()), 0);
  for (const char* name : {"a", "b"}) {
    const std::string log = read_bytes(dir.file(std::string(name) + ".log"));
    EXPECT_EQ(read_bytes(dir.file(std::string(name) + ".rc")), "0\n") << log;
    EXPECT_NE(log.find("[  PASSED  ] 1 test"), std::string::npos) << log;
    EXPECT_NE(log.find("rejected=0 errors=0"), std::string::npos) << log;
    EXPECT_EQ(log.find("rlx: warning"), std::string::npos) << log;
  }
  only_entry(dir.path() / "pjrt");
  ASSERT_EQ(std::system((child("c")).c_str()), 0);
  const std::string third = read_bytes(dir.file("c.log"));
  EXPECT_NE(third.find("child: hits=1 misses=0 stores=0 rejected=0 errors=0"), std::string::npos)
      << third;
}

}  // namespace
}  // namespace rlx::pjrt
