// The persistent compile cache of the PJRT backend: serialized XLA executables on disk, keyed
// by everything that determines the compiled code (docs/pjrt.md, "Compile cache").
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "pjrt_client.h"

namespace rlx::pjrt {

/// Version of the entry layout and of the key text below; an entry of another version is
/// rejected (recompiled and replaced). Bump it when either changes.
inline constexpr uint32_t kCacheFormatVersion = 2;
/// The first 8 bytes of every entry.
inline constexpr std::string_view kCacheMagic{"RLXPJRT\0", 8};
/// Bytes before the key: magic, u32 format version, u32 zero, u64 key size, u64 payload size,
/// u64 FNV-1a 64 of the payload (all little-endian).
inline constexpr size_t kCacheHeaderSize = 40;

/// What identifies the compiler behind `client`: the plugin file (canonical path, size,
/// modification time), its PJRT API version, platform name and version, the number of
/// addressable devices, and the XLA_FLAGS / LIBTPU_INIT_ARGS environment variables (they change
/// XLA's compilation). One "name value" line each.
std::string compiler_identity(const Client& client);

/// The full key text: a versioned first line, compiler_identity(client), the sharding form
/// (`sharding_form`: "none" for a program without shardings, "gspmd", "shardy"), the compile
/// options bytes (hex) and the module text (StableHLO, which carries any shardings as
/// attributes). Two compiles with equal keys produce interchangeable executables.
std::string compile_cache_key(const Client& client, const std::string& module,
                              const std::string& options,
                              const std::string& sharding_form = "none");

/// 64-bit FNV-1a of `bytes` (file names and the payload checksum).
uint64_t fnv1a64(std::string_view bytes);

/// The entry file of `key` in `dir`: "<16 hex digits of fnv1a64(key)>.xla".
std::filesystem::path compile_cache_entry_path(const std::filesystem::path& dir,
                                               std::string_view key);

/// An entry: the header, the key, the payload.
std::string encode_cache_entry(std::string_view key, std::string_view payload);

/// The payload of `entry` (a view into it) when the entry is intact and made for `key`; else
/// nullopt with the reason in `why` ("truncated: 12 bytes", "bad magic", "format version 7, rlx
/// reads 1", "made for another key", "payload checksum mismatch", ...).
std::optional<std::string_view> decode_cache_entry(std::string_view entry, std::string_view key,
                                                   std::string* why);

/// Keeps the entries ("*.xla") of `dir` at most `max_bytes` in total: removes the least recently
/// used first (oldest modification time; load_or_compile touches an entry on a hit), never
/// `keep` (the entry just written). Also removes temporaries ("*.tmp.*") older than an hour,
/// left by a writer that died. Entries that vanish meanwhile (another process evicting) are
/// skipped. A reader that already opened a removed entry still reads it whole (POSIX unlink
/// semantics), so no lock is needed. Returns the number of entries removed; I/O errors are
/// skipped, not thrown.
int64_t evict_compile_cache(const std::filesystem::path& dir, int64_t max_bytes,
                            const std::filesystem::path& keep = {});

/// The executable of `module` compiled with `options` on `client`: loaded from the cache
/// directory (compile_cache_dir() in pjrt.h) when it holds an intact entry for this key, else
/// compiled and stored there (written to a temporary file and renamed, so readers never see a
/// partial entry; then evict_compile_cache to compile_cache_max_bytes()). A hit touches the entry
/// (its modification time, the LRU order). A corrupt, truncated or mismatched entry, or one the
/// plugin fails to load,
/// is reported on stderr ("rlx: warning: pjrt compile cache: ..."), recompiled and replaced;
/// cache I/O failures only warn. Compile errors propagate as from LoadedProgram. Updates the
/// counters of compile_cache_stats(). `sharding_form` goes into the key (compile_cache_key).
std::unique_ptr<LoadedProgram> load_or_compile(
    std::shared_ptr<const Client> client, const std::string& module,
    const std::string& options = minimal_compile_options(),
    const std::string& sharding_form = "none");

}  // namespace rlx::pjrt
