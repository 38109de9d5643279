// Helpers the rlx tool's commands share: argument checks with plain messages, reading an input
// file or stdin, and the "did you mean" suggestion for a mistyped subcommand.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

namespace rlx::tools {

/// Runs `command` and returns its exit status; an exception it throws becomes one line
/// "rlx: error: <message>" on `err` and status 1 instead of reaching std::terminate (SIGABRT):
/// rlx::Error as it is, std::bad_alloc as "out of memory", any other std::exception as
/// "internal error (<what>)" and anything else as "internal error (an unknown exception)".
int run_reporting_errors(const std::function<int()>& command, std::ostream& err);

/// A CLI11 check that an integer option is >= `min`: "--batch-size: must be >= 1, got 0"
/// (CLI11's own range checks print the range's bounds, e.g. a 309-digit double maximum).
CLI::Validator at_least(int64_t min);

/// A CLI11 check that a real option is > 0: "--lr: must be > 0, got -1".
CLI::Validator positive_real();

/// The contents of the file at `path`, or all of stdin when `path` is "-". Throws rlx::Error
/// as read_file (rlx/io/file.h): "'X' is a directory, expected a file", "cannot open 'X': ...".
std::string read_input(const std::string& path);

/// How error messages name `path`: "<stdin>" for "-", else the path itself.
std::string input_name(const std::string& path);

/// The candidate closest to `word` (Levenshtein distance at most 2, or a candidate that starts
/// with `word`), or "" when none is close.
std::string closest_match(const std::string& word, const std::vector<std::string>& candidates);

/// The libgomp wait policy the tool's threads get (docs/runtime.md "Threads"): when neither
/// OMP_WAIT_POLICY nor GOMP_SPINCOUNT is set, sets GOMP_SPINCOUNT=300 (spin a few microseconds
/// at a barrier, then block) and re-executes the tool (/proc/self/exe, same argv), because
/// libgomp reads them once, in its constructor, before main runs and before any hook of the
/// executable could set them (a .preinit_array's setenv is dropped by glibc). Returns only when
/// no re-execution is needed or it failed (then the tool runs with libgomp's defaults). This is
/// what `import rlx` does for Python; libgomp's own default (spin 300000 iterations) made every
/// fork/join wait for the scheduler on a machine where another process holds a core.
void use_default_gomp_wait_policy(char** argv);

/// How the tool's idle threads wait, as `rlx devices` prints it: "OMP_WAIT_POLICY=passive",
/// "GOMP_SPINCOUNT=300", or "libgomp default (spin 300000, then block)" when neither is set.
std::string gomp_wait_policy();

}  // namespace rlx::tools
