// The persistent compile cache of the PJRT backend (compile_cache.h): key, entry format, atomic
// writes, validation on read and the process-wide counters.
#include "compile_cache.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "rlx/backends/pjrt/pjrt.h"
#include "rlx/ir/error.h"
#include "rlx/runtime/memory_limit.h"

namespace rlx::pjrt {
namespace {

namespace fs = std::filesystem;

struct Counters {
  std::atomic<int64_t> hits{0}, misses{0}, stores{0}, rejected{0}, errors{0}, evicted{0};
};

// Temporaries older than this are a dead writer's: eviction and clear remove them.
constexpr auto kStaleTemporary = std::chrono::hours(1);

bool is_entry(const fs::path& p) { return p.extension() == ".xla"; }
bool is_temporary(const fs::path& p) {
  return p.filename().string().find(".xla.tmp.") != std::string::npos;
}
bool is_stale(const fs::path& p) {
  std::error_code ec;
  const fs::file_time_type t = fs::last_write_time(p, ec);
  return !ec && fs::file_time_type::clock::now() - t > kStaleTemporary;
}
Counters& counters() {
  static Counters c;
  return c;
}

void warn(const std::string& text) {
  std::fprintf(stderr, "rlx: warning: pjrt compile cache: %s\n", text.c_str());
}

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint64_t get_le(std::string_view bytes, size_t at, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i)
    v |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[at + i])) << (8 * i);
  return v;
}

std::string hex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) {
    out.push_back(kDigits[(static_cast<unsigned char>(c) >> 4) & 0xf]);
    out.push_back(kDigits[static_cast<unsigned char>(c) & 0xf]);
  }
  return out;
}

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

// The whole file, or nullopt when it does not exist. Throws rlx::Error on a read error.
std::optional<std::string> read_entry(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::error_code ec;
    if (!fs::exists(path, ec)) return std::nullopt;
    throw Error("cannot open '" + path.string() + "'");
  }
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) throw Error("cannot read '" + path.string() + "'");
  return std::move(buf).str();
}

// Writes `bytes` to a temporary file next to `path` and renames it over `path`: a reader sees
// the old entry, none or the new one, never a partial one (a torn write after a crash fails the
// size and checksum checks of decode_cache_entry). Throws rlx::Error; removes the temporary.
void write_entry_atomically(const fs::path& path, std::string_view bytes) {
  static std::atomic<uint64_t> serial{0};
  fs::create_directories(path.parent_path());
  fs::path temp = path;
  temp += ".tmp." + std::to_string(::getpid()) + "." + std::to_string(serial++);
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out) {
      std::error_code ec;
      fs::remove(temp, ec);
      throw Error("cannot write '" + temp.string() + "'");
    }
  }
  std::error_code ec;
  fs::rename(temp, path, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(temp, ignored);
    throw Error("cannot rename '" + temp.string() + "' to '" + path.string() +
                "': " + ec.message());
  }
}

}  // namespace

CompileCacheStats compile_cache_stats() {
  const Counters& c = counters();
  return {c.hits.load(),     c.misses.load(), c.stores.load(),
          c.rejected.load(), c.errors.load(), c.evicted.load()};
}

int64_t compile_cache_max_bytes() {
  const char* v = std::getenv("RLX_CACHE_MAX_BYTES");
  if (v == nullptr || *v == '\0') return int64_t{1} << 30;
  return parse_memory_size(v, "RLX_CACHE_MAX_BYTES");
}

int64_t evict_compile_cache(const fs::path& dir, int64_t max_bytes, const fs::path& keep) {
  struct Entry {
    fs::file_time_type used;
    int64_t bytes;
    fs::path path;
  };
  std::vector<Entry> entries;
  int64_t total = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path& p = it->path();
    std::error_code e;
    if (is_temporary(p)) {
      if (is_stale(p)) fs::remove(p, e);
      continue;
    }
    if (!is_entry(p)) continue;
    const uintmax_t size = fs::file_size(p, e);
    const fs::file_time_type used = fs::last_write_time(p, e);
    if (e) continue;  // removed meanwhile
    total += static_cast<int64_t>(size);
    if (p != keep) entries.push_back({used, static_cast<int64_t>(size), p});
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.used != b.used ? a.used < b.used : a.path < b.path;
  });
  int64_t removed = 0;
  for (const Entry& e : entries) {
    if (total <= max_bytes) break;
    std::error_code rm;
    if (fs::remove(e.path, rm)) ++removed;
    if (!rm) total -= e.bytes;  // gone either way (or another process removed it)
  }
  counters().evicted += removed;
  return removed;
}

CompileCacheInfo compile_cache_info() {
  CompileCacheInfo info;
  info.dir = compile_cache_dir();
  info.max_bytes = compile_cache_max_bytes();
  info.stats = compile_cache_stats();
  if (!info.dir) return info;
  std::error_code ec;
  if (!fs::exists(*info.dir, ec)) return info;
  for (fs::directory_iterator it(*info.dir, ec), end; it != end; it.increment(ec)) {
    if (ec) break;
    if (!is_entry(it->path())) continue;
    std::error_code e;
    const uintmax_t size = fs::file_size(it->path(), e);
    if (e) continue;  // removed meanwhile
    ++info.entries;
    info.bytes += static_cast<int64_t>(size);
  }
  if (ec) throw Error("pjrt compile cache: cannot read '" + *info.dir + "': " + ec.message());
  return info;
}

int64_t clear_compile_cache() {
  std::optional<std::string> dir = compile_cache_dir();
  std::error_code ec;
  if (!dir || !fs::exists(*dir, ec)) return 0;
  std::vector<fs::path> doomed;
  for (fs::directory_iterator it(*dir, ec), end; it != end; it.increment(ec)) {
    if (ec) break;
    const fs::path& p = it->path();
    if (is_entry(p) || (is_temporary(p) && is_stale(p))) doomed.push_back(p);
  }
  if (ec) throw Error("pjrt compile cache: cannot read '" + *dir + "': " + ec.message());
  int64_t removed = 0;
  for (const fs::path& p : doomed) {
    std::error_code rm;
    const bool gone = fs::remove(p, rm);
    if (rm) throw Error("pjrt compile cache: cannot remove '" + p.string() + "': " + rm.message());
    if (gone && is_entry(p)) ++removed;
  }
  return removed;
}

std::optional<std::string> compile_cache_dir() {
  if (const char* dir = std::getenv("RLX_CACHE_DIR"); dir != nullptr) {
    std::string d(dir);
    if (d.empty() || d == "off") return std::nullopt;
    return (fs::path(d) / "pjrt").string();
  }
  const char* home = std::getenv("HOME");
  if (home == nullptr || *home == '\0') return std::nullopt;
  return (fs::path(home) / ".cache" / "rlx" / "pjrt").string();
}

uint64_t fnv1a64(std::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : bytes) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string compiler_identity(const Client& client) {
  const Plugin& plugin = client.plugin();
  std::error_code ec;
  const uintmax_t size = fs::file_size(plugin.path, ec);
  const auto mtime = fs::last_write_time(plugin.path, ec).time_since_epoch();
  std::ostringstream s;
  s << "plugin " << plugin.path << "\n"
    << "plugin_size " << (ec ? 0 : size) << "\n"
    << "plugin_mtime_ns " << std::chrono::duration_cast<std::chrono::nanoseconds>(mtime).count()
    << "\n"
    << "pjrt_api " << plugin.api->pjrt_api_version.major_version << "."
    << plugin.api->pjrt_api_version.minor_version << "\n"
    << "platform " << client.platform() << "\n"
    << "platform_version " << client.platform_version() << "\n"
    << "devices " << client.devices().size() << "\n"
    << "XLA_FLAGS " << env_or_empty("XLA_FLAGS") << "\n"
    << "LIBTPU_INIT_ARGS " << env_or_empty("LIBTPU_INIT_ARGS") << "\n";
  return s.str();
}

std::string compile_cache_key(const Client& client, const std::string& module,
                              const std::string& options, const std::string& sharding_form) {
  return "rlx pjrt compile cache key v" + std::to_string(kCacheFormatVersion) + "\n" +
         compiler_identity(client) + "sharding_form " + sharding_form + "\ncompile_options " +
         hex(options) + "\nmodule " + std::to_string(module.size()) + "\n" + module;
}

fs::path compile_cache_entry_path(const fs::path& dir, std::string_view key) {
  char name[32];
  std::snprintf(name, sizeof(name), "%016llx.xla", static_cast<unsigned long long>(fnv1a64(key)));
  return dir / name;
}

std::string encode_cache_entry(std::string_view key, std::string_view payload) {
  std::string out;
  out.reserve(kCacheHeaderSize + key.size() + payload.size());
  out.append(kCacheMagic);
  put_u32(out, kCacheFormatVersion);
  put_u32(out, 0);
  put_u64(out, key.size());
  put_u64(out, payload.size());
  put_u64(out, fnv1a64(payload));
  out.append(key);
  out.append(payload);
  return out;
}

std::optional<std::string_view> decode_cache_entry(std::string_view entry, std::string_view key,
                                                   std::string* why) {
  auto reject = [&](std::string reason) -> std::optional<std::string_view> {
    *why = std::move(reason);
    return std::nullopt;
  };
  if (entry.size() < kCacheHeaderSize)
    return reject("truncated: " + std::to_string(entry.size()) + " bytes, shorter than the header");
  if (entry.substr(0, kCacheMagic.size()) != kCacheMagic) return reject("bad magic");
  const uint64_t version = get_le(entry, 8, 4);
  if (version != kCacheFormatVersion)
    return reject("format version " + std::to_string(version) + ", rlx reads " +
                  std::to_string(kCacheFormatVersion));
  const uint64_t key_size = get_le(entry, 16, 8);
  const uint64_t payload_size = get_le(entry, 24, 8);
  const uint64_t checksum = get_le(entry, 32, 8);
  const uint64_t body = entry.size() - kCacheHeaderSize;
  if (key_size > body || payload_size != body - key_size)
    return reject("size mismatch: header says " + std::to_string(key_size) + " + " +
                  std::to_string(payload_size) + " bytes, file has " + std::to_string(body));
  if (entry.substr(kCacheHeaderSize, key_size) != key)
    return reject("made for another key (other compiler, plugin version or options)");
  std::string_view payload = entry.substr(kCacheHeaderSize + key_size);
  if (fnv1a64(payload) != checksum) return reject("payload checksum mismatch");
  return payload;
}

std::unique_ptr<LoadedProgram> load_or_compile(std::shared_ptr<const Client> client,
                                               const std::string& module,
                                               const std::string& options,
                                               const std::string& sharding_form) {
  std::optional<std::string> dir = compile_cache_dir();
  if (!dir) return std::make_unique<LoadedProgram>(client, module, options);
  const int64_t max_bytes = compile_cache_max_bytes();  // a malformed value fails the compile
  Counters& c = counters();
  const std::string key = compile_cache_key(*client, module, options, sharding_form);
  const fs::path path = compile_cache_entry_path(*dir, key);
  std::optional<std::string> entry;
  try {
    entry = read_entry(path);
  } catch (const Error& e) {
    ++c.errors;
    warn(std::string(e.what()) + "; compiling");
  }
  if (entry) {
    std::string why;
    if (std::optional<std::string_view> payload = decode_cache_entry(*entry, key, &why)) {
      try {
        std::unique_ptr<LoadedProgram> loaded = LoadedProgram::deserialize(client, *payload);
        ++c.hits;
        std::error_code ec;  // the LRU order of eviction; a failed touch only ages the entry
        fs::last_write_time(path, fs::file_time_type::clock::now(), ec);
        return loaded;
      } catch (const Error& e) {
        why = e.what();
      }
    }
    ++c.rejected;
    warn("entry '" + path.string() + "' is unusable (" + why + "); recompiling and replacing it");
  }
  ++c.misses;
  auto program = std::make_unique<LoadedProgram>(client, module, options);
  try {
    write_entry_atomically(path, encode_cache_entry(key, program->serialize()));
    ++c.stores;
    evict_compile_cache(*dir, max_bytes, path);
  } catch (const std::exception& e) {
    ++c.errors;
    warn(std::string("cannot store '") + path.string() + "': " + e.what());
  }
  return program;
}

}  // namespace rlx::pjrt
