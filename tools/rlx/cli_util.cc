// Argument checks, input reading and subcommand suggestions of the rlx tool.
#include "cli_util.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <iterator>

#include "rlx/io/file.h"
#include "rlx/ir/error.h"

namespace rlx::tools {

int run_reporting_errors(const std::function<int()>& command, std::ostream& err) {
  try {
    return command();
  } catch (const Error& e) {
    err << "rlx: error: " << e.what() << "\n";
  } catch (const std::bad_alloc&) {
    err << "rlx: error: out of memory\n";
  } catch (const std::exception& e) {
    err << "rlx: error: internal error (" << e.what() << ")\n";
  } catch (...) {
    err << "rlx: error: internal error (an unknown exception)\n";
  }
  return 1;
}

CLI::Validator at_least(int64_t min) {
  return CLI::Validator(
      [min](std::string& text) -> std::string {
        int64_t v = 0;
        if (!CLI::detail::lexical_cast(text, v)) return "expected an integer, got '" + text + "'";
        if (v < min) return "must be >= " + std::to_string(min) + ", got " + text;
        return "";
      },
      ">=" + std::to_string(min));
}

CLI::Validator positive_real() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(text, v)) return "expected a number, got '" + text + "'";
        if (!(v > 0)) return "must be > 0, got " + text;
        return "";
      },
      ">0");
}

std::string read_input(const std::string& path) {
  if (path != "-") return read_file(path);
  std::string text{std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>()};
  check(!std::cin.bad(), "cannot read <stdin>");
  return text;
}

std::string input_name(const std::string& path) { return path == "-" ? "<stdin>" : path; }

std::string closest_match(const std::string& word, const std::vector<std::string>& candidates) {
  auto distance = [](const std::string& a, const std::string& b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      size_t diag = row[0];
      row[0] = i;
      for (size_t j = 1; j <= b.size(); ++j) {
        size_t next = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
        diag = row[j];
        row[j] = next;
      }
    }
    return row[b.size()];
  };
  std::string best;
  size_t best_distance = 3;  // farther than 2 edits is no suggestion
  for (const std::string& c : candidates) {
    size_t d = !word.empty() && c.rfind(word, 0) == 0 ? 1 : distance(word, c);
    if (d < best_distance) best = c, best_distance = d;
  }
  return best;
}

void use_default_gomp_wait_policy(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) return;
  if (setenv("GOMP_SPINCOUNT", "300", 0) != 0) return;
  // Set before the exec, so the new image does not come back here; on failure the process
  // goes on with libgomp's defaults, already loaded.
  execv("/proc/self/exe", argv);
}

std::string gomp_wait_policy() {
  for (const char* name : {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT"})
    if (const char* v = std::getenv(name)) return std::string(name) + "=" + v;
  return "libgomp default (spin 300000, then block)";
}

}  // namespace rlx::tools
