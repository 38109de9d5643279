// The ONNX backend node test cases (written by scripts/onnx_node_cases.py into a cache
// directory) through rlx::onnx::InferenceSession on the CPU backend: every case whose op types
// rlx's importer converts is run on each of its data sets and compared with the stored outputs
// (the case's own tolerance: rtol 1e-3, atol 1e-7 for every case of onnx 1.23.2; integers and
// bools exactly, NaN where NaN is expected). Two dtypes need a wider rtol, stated here: f16
// outputs 2e-3 and bf16 outputs 1e-2 (about 4 and 2.5 ulps of the dtype): rlx's kernels compute
// 16-bit ops in f32 and round once, while onnx's numpy reference rounds every intermediate
// (e.g. each matmul and softmax of Attention) to the 16-bit dtype. The failures are listed by name
// with their reason in tests/import/onnx_node_failures.txt; the test fails when that list is not
// current (a new failure, or a listed case that now passes) or when fewer than 95 % of the
// implemented cases pass. RLX_UPDATE_ONNX_FAILURES=1 rewrites the list.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "rlx/import/onnx.h"
#include "rlx/io/file.h"
#include "rlx/ir/error.h"

namespace rlx::onnx {
namespace {

namespace fs = std::filesystem;

const char* const kFailuresFile = RLX_TEST_DATA_DIR "/import/onnx_node_failures.txt";

fs::path cases_dir() {
  if (const char* e = std::getenv("RLX_ONNX_NODE_CASES")) return e;
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  fs::path cache = xdg && *xdg ? fs::path(xdg) : fs::path(home ? home : "/tmp") / ".cache";
  return cache / "rlx" / "onnx-node-cases" / "onnx-1.23.2";
}

// One line of a failure reason: the message's first line, without the case's directory.
std::string reason_of(std::string msg, const std::string& dir) {
  for (size_t at; (at = msg.find(dir)) != std::string::npos;) msg.replace(at, dir.size(), "<case>");
  msg = msg.substr(0, msg.find('\n'));
  if (msg.size() > 160) msg = msg.substr(0, 157) + "...";
  return msg;
}

// Empty when `got` matches `want` within the tolerance; else what differs.
std::string compare(const Tensor& got, const Tensor& want, double rtol, double atol) {
  if (got.dtype() != want.dtype())
    return "dtype " + std::string(dtype_name(got.dtype())) + ", expected " +
           std::string(dtype_name(want.dtype()));
  if (got.shape() != want.shape())
    return "shape " + got.shape().to_string() + ", expected " + want.shape().to_string();
  const bool exact = !is_float(want.dtype());
  if (want.dtype() == DType::f16) rtol = std::max(rtol, 2e-3);
  if (want.dtype() == DType::bf16) rtol = std::max(rtol, 1e-2);
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double a = got.get_f64(i), b = want.get_f64(i);
    bool ok = exact ? a == b
                    : (std::isnan(b) ? std::isnan(a)
                                     : (a == b || std::fabs(a - b) <= atol + rtol * std::fabs(b)));
    if (!ok) {
      std::ostringstream s;
      s << "element " << i << " is " << a << ", expected " << b;
      return s.str();
    }
  }
  return "";
}

struct Outcome {
  bool ops_known = false;    // every op type has a converter
  bool implemented = false;  // ... and every value's type is an rlx dtype
  std::string failure;       // empty: passed
};

Outcome run_case(const fs::path& dir) {
  Outcome out;
  const std::string d = dir.string();
  try {
    Model model = Model::load((dir / "model.onnx").string());
    out.ops_known = model.info().unsupported.empty();
    if (!out.ops_known || !model.info().unsupported_types.empty()) return out;
    out.implemented = true;
    double rtol = 1e-3, atol = 1e-7;
    if (std::ifstream tol(dir / "tolerance"); tol) tol >> rtol >> atol;
    InferenceSession session(model);
    std::vector<fs::path> sets;
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_directory()) sets.push_back(e.path());
    std::sort(sets.begin(), sets.end());
    for (const fs::path& set : sets) {
      std::map<std::string, Tensor> feeds;
      for (size_t j = 0; j < model.info().inputs.size(); ++j) {
        fs::path f = set / ("input_" + std::to_string(j) + ".pb");
        if (!fs::exists(f)) continue;  // an omitted optional input
        feeds.emplace(model.info().inputs[j].name,
                      parse_tensor_proto(read_file(f.string()), f.string()));
      }
      std::vector<Tensor> got = session.run({}, feeds);
      for (size_t j = 0; j < got.size(); ++j) {
        fs::path f = set / ("output_" + std::to_string(j) + ".pb");
        Tensor want = parse_tensor_proto(read_file(f.string()), f.string());
        std::string diff = compare(got[j], want, rtol, atol);
        if (!diff.empty()) {
          out.failure = "output " + std::to_string(j) + ": " + diff;
          return out;
        }
      }
    }
  } catch (const Error& e) {
    out.failure = reason_of(e.what(), d);
  } catch (const std::exception& e) {
    out.failure = "internal error: " + reason_of(e.what(), d);
  }
  return out;
}

std::map<std::string, std::string> read_expected() {
  std::map<std::string, std::string> m;
  std::ifstream f(kFailuresFile);
  for (std::string line; std::getline(f, line);) {
    if (line.empty() || line[0] == '#') continue;
    size_t colon = line.find(": ");
    m[line.substr(0, colon)] = colon == std::string::npos ? "" : line.substr(colon + 2);
  }
  return m;
}

TEST(OnnxNodeCases, PassRateAndFailureList) {
  fs::path dir = cases_dir();
  if (!fs::exists(dir / "complete")) {
    std::string cmd =
        std::string("python3 '") + RLX_ONNX_NODE_CASES_SCRIPT + "' --out '" + dir.string() + "'";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << "could not write the node cases: " << cmd;
  }
  std::vector<fs::path> cases;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory()) cases.push_back(e.path());
  std::sort(cases.begin(), cases.end());
  ASSERT_GT(cases.size(), 1000u) << dir;

  int64_t ops_known = 0, implemented = 0, passed = 0;
  std::map<std::string, std::string> failures;
  for (const fs::path& c : cases) {
    Outcome o = run_case(c);
    ops_known += o.ops_known;
    if (!o.implemented) continue;
    ++implemented;
    if (o.failure.empty())
      ++passed;
    else
      failures[c.filename().string()] = o.failure;
  }
  const double rate =
      implemented ? 100.0 * static_cast<double>(passed) / static_cast<double>(implemented) : 0;
  std::printf(
      "ONNX node cases (onnx 1.23.2): %zu in all, %lld with every op converted, of "
      "which %lld use only rlx dtypes (implemented): %lld pass (%.1f %% of implemented, "
      "%.1f %% of those with every op converted)\n",
      cases.size(), static_cast<long long>(ops_known), static_cast<long long>(implemented),
      static_cast<long long>(passed), rate,
      ops_known ? 100.0 * static_cast<double>(passed) / static_cast<double>(ops_known) : 0.0);

  if (const char* u = std::getenv("RLX_UPDATE_ONNX_FAILURES"); u && std::string(u) == "1") {
    std::ofstream f(kFailuresFile);
    f << "# ONNX backend node cases (onnx 1.23.2) whose ops rlx implements but which fail, with\n"
         "# the reason. Kept current by tests/import/onnx_node_test.cc "
         "(RLX_UPDATE_ONNX_FAILURES=1\n"
         "# rewrites it). "
      << cases.size() << " cases, " << ops_known << " with every op converted, " << implemented
      << " of them with only rlx dtypes (implemented), " << passed << " pass.\n";
    for (const auto& [name, why] : failures) f << name << ": " << why << "\n";
  }
  std::map<std::string, std::string> expected = read_expected();
  for (const auto& [name, why] : failures)
    EXPECT_TRUE(expected.count(name)) << "new failure: " << name << ": " << why;
  for (const auto& [name, why] : expected)
    EXPECT_TRUE(failures.count(name)) << "listed as failing but passes (or is no longer "
                                         "implemented): "
                                      << name;
  EXPECT_GE(rate, 95.0);
}

}  // namespace
}  // namespace rlx::onnx
