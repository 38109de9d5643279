// safetensors reader and writer: round trips, files written by the reference Python package
// (tests/io/gen_safetensors_fixtures.py), the real MiniLM checkpoint when RLX_MODEL_DIR is set,
// one hand-made malformed file per validation rule, and a seeded mutation fuzz loop.
#include "rlx/io/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/scoped_env.h"
#include "common/test_util.h"
#include "golden/golden_data.h"
#include "rlx/ir/error.h"

namespace rlx {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using testing::json;

using testing::TempDir;
std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[static_cast<size_t>(i)] = static_cast<char>(v >> (8 * i));
  return s;
}

/// A safetensors file: the 8-byte length of `header`, `header` as is, then `data`.
std::string st_file(const std::string& header, const std::string& data = "") {
  return le64(header.size()) + header + data;
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string f32_bytes(std::initializer_list<float> values) {
  std::string s;
  for (float v : values) s.append(reinterpret_cast<const char*>(&v), sizeof v);
  return s;
}

/// Writes `bytes` to a file and opens it; returns the rlx::Error message ("" if it opened).
/// Every message must name the file, so that is checked here once for all the tests below.
std::string open_error(const std::string& bytes) {
  TempDir dir;
  std::string path = dir.file("bad.safetensors");
  write_bytes(path, bytes);
  std::string msg = error_of([&] { SafetensorsFile::open(path); });
  if (!msg.empty()) {
    EXPECT_NE(msg.find(path + ": "), std::string::npos) << msg;
  }
  return msg;
}

#define EXPECT_CONTAINS(haystack, needle)                                       \
  do {                                                                          \
    const std::string rlx_h_ = (haystack);                                      \
    EXPECT_NE(rlx_h_.find(needle), std::string::npos) << "message: " << rlx_h_; \
  } while (0)

/// Same dtype, shape and values; floats compare as values with the sign of zero, and NaN
/// matches NaN whatever its payload (the expected tensors come from JSON).
void expect_same_values(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.type(), want.type()) << what;
  for (int64_t i = 0; i < got.numel(); ++i) {
    if (is_float(got.dtype())) {
      double g = got.get_f64(i), w = want.get_f64(i);
      if (std::isnan(w)) {
        EXPECT_TRUE(std::isnan(g)) << what << "[" << i << "] = " << g;
      } else {
        EXPECT_EQ(g, w) << what << "[" << i << "]";
        EXPECT_EQ(std::signbit(g), std::signbit(w)) << what << "[" << i << "]";
      }
    } else {
      EXPECT_EQ(got.get_i64(i), want.get_i64(i)) << what << "[" << i << "]";
    }
  }
}

constexpr DType kAllDTypes[] = {DType::f64,  DType::i64, DType::f32, DType::i32,  DType::f16,
                                DType::bf16, DType::i8,  DType::u8,  DType::bool_};

// ---- round trips

TEST(SafetensorsRoundTrip, EveryDtypeScalarsEmptyAndMetadata) {
  TempDir dir;
  std::string path = dir.file("all.safetensors");
  std::vector<std::pair<std::string, Tensor>> tensors;
  uint64_t seed = 1;
  for (DType t : kAllDTypes) {
    std::string n(dtype_name(t));
    tensors.emplace_back(n, testing::random_tensor(t, Shape{2, 3}, seed++, -100, 100));
    tensors.emplace_back("scalar_" + n, testing::random_tensor(t, Shape{}, seed++, -100, 100));
    tensors.emplace_back("empty_" + n, Tensor(t, Shape{0, 4}));
  }
  tensors.emplace_back("empty_middle_zero", Tensor(DType::f32, Shape{3, 0, 2}));
  std::map<std::string, std::string> meta{{"format", "rlx"}, {"note", "ü → β"}, {"empty", ""}};
  write_safetensors(path, tensors, meta);

  SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.path(), path);
  EXPECT_EQ(f.metadata(), meta);
  std::vector<std::string> names;
  for (const auto& [n, t] : tensors) names.push_back(n);
  EXPECT_EQ(f.names(), names);  // the order given to the writer
  for (const auto& [n, t] : tensors) {
    EXPECT_TRUE(f.contains(n));
    EXPECT_EQ(f.type(n), t.type()) << n;
    EXPECT_TRUE(f.get(n).bitwise_equal(t)) << n << ": " << f.get(n).to_string();
  }
  EXPECT_EQ(f.stored_dtype("bf16"), "BF16");
  EXPECT_EQ(f.stored_dtype("bool"), "BOOL");
  EXPECT_FALSE(f.contains("nope"));
  EXPECT_CONTAINS(error_of([&] { f.get("nope"); }), path + ": no tensor named 'nope'");

  // Header padded with spaces to a multiple of 8, so the data starts 8-aligned.
  std::string bytes = read_bytes(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(bytes.substr(8, 16), R"({"__metadata__":)");
  std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.find_last_not_of(' '), header.rfind('}'));
}

TEST(SafetensorsRoundTrip, GetIsZeroCopyAndOutlivesTheFileObject) {
  TempDir dir;
  std::string path = dir.file("w.safetensors");
  Tensor w = Tensor::from_doubles(DType::f32, Shape{2, 2}, std::vector<double>{1, -2, 3.5, 4});
  write_safetensors(path, {{"w", w}});
  Tensor got;
  {
    SafetensorsFile f = SafetensorsFile::open(path);
    got = f.get("w");
    // Two gets share the mapped bytes rather than copying them.
    EXPECT_EQ(f.get("w").data(), got.data());
    SafetensorsFile copy = f;
    EXPECT_EQ(copy.get("w").data(), got.data());
  }
  fs::remove(path);  // the mapping keeps the data even with the file gone
  EXPECT_TRUE(got.bitwise_equal(w)) << got.to_string();
  EXPECT_EQ(got.data_as<float>()[2], 3.5f);
}

TEST(SafetensorsRoundTrip, NoTensorsMatchesTheReferenceBytes) {
  // safetensors' own test_empty: {} padded to 8 bytes.
  TempDir dir;
  std::string path = dir.file("empty.safetensors");
  write_safetensors(path, {});
  EXPECT_EQ(read_bytes(path), le64(8) + "{}      ");
  SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_TRUE(f.names().empty());
  EXPECT_TRUE(f.metadata().empty());
}

TEST(SafetensorsRoundTrip, OverwritesAnExistingFileAndLeavesNoTemporary) {
  TempDir dir;
  std::string path = dir.file("m.safetensors");
  write_safetensors(path, {{"a", Tensor::full(DType::i32, Shape{2}, 7)}});
  write_safetensors(path, {{"b", Tensor::full(DType::i8, Shape{3}, -1)}});
  SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.names(), std::vector<std::string>{"b"});
  EXPECT_EQ(f.get("b").get_i64(2), -1);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"m.safetensors"});
}

// ---- alignment: offsets need not be multiples of the element size

TEST(SafetensorsAlignment, MisalignedTensorIsCopiedAligned) {
  // u8[1] then f32[2] at data offset 1; the header is padded so the data starts 8-aligned.
  std::string header = R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                       R"("w":{"dtype":"F32","shape":[2],"data_offsets":[1,9]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  TempDir dir;
  std::string path = dir.file("mis.safetensors");
  write_bytes(path, st_file(header, "\x07" + f32_bytes({1.5f, -2.0f})));
  SafetensorsFile f = SafetensorsFile::open(path);
  Tensor w = f.get("w");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(w.data()) % alignof(float), 0u);
  EXPECT_EQ(w.data_as<float>()[0], 1.5f);
  EXPECT_EQ(w.data_as<float>()[1], -2.0f);
  EXPECT_NE(f.get("w").data(), w.data());  // a copy each time, not a view
  EXPECT_EQ(f.get("a").get_i64(0), 7);
}

TEST(SafetensorsAlignment, WriterKeepsGivenOrderEvenWhenItMisaligns) {
  TempDir dir;
  std::string path = dir.file("order.safetensors");
  Tensor a = Tensor::from_ints(DType::u8, Shape{3}, std::vector<int64_t>{1, 2, 3});
  Tensor d = Tensor::from_doubles(DType::f64, Shape{2}, std::vector<double>{0.1, -7});
  write_safetensors(path, {{"a", a}, {"d", d}});
  SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.names(), (std::vector<std::string>{"a", "d"}));
  Tensor got = f.get("d");  // at data offset 3: copied
  EXPECT_EQ(reinterpret_cast<uintptr_t>(got.data()) % alignof(double), 0u);
  EXPECT_TRUE(got.bitwise_equal(d));
}

// ---- files written by the reference implementation (safetensors 0.8.0, numpy)

json expected_fixtures() {
  std::ifstream in(std::string(RLX_TEST_DATA_DIR) + "/io/data/expected.json");
  EXPECT_TRUE(in.good()) << "missing tests/io/data/expected.json";
  return json::parse(in);
}

std::string fixture(const std::string& name) {
  return std::string(RLX_TEST_DATA_DIR) + "/io/data/" + name;
}

void check_against_expected(const SafetensorsFile& f, const json& want) {
  EXPECT_EQ(f.names(), want.at("names").get<std::vector<std::string>>());
  EXPECT_EQ(f.metadata(), (want.at("metadata").get<std::map<std::string, std::string>>()));
  for (const auto& [name, t] : want.at("tensors").items()) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(f.contains(name));
    EXPECT_EQ(f.stored_dtype(name), t.at("stored_dtype").get<std::string>());
    if (t.at("dtype").is_null()) {
      std::string msg = f.path() + ": tensor '" + name + "' has dtype " +
                        t.at("stored_dtype").get<std::string>() + ", which rlx does not support";
      EXPECT_EQ(error_of([&] { f.type(name); }), msg);
      EXPECT_EQ(error_of([&] { f.get(name); }), msg);
    } else {
      expect_same_values(f.get(name), testing::json_tensor(t), name);
    }
  }
}

TEST(SafetensorsReference, ReadsNumpyFileOfEveryDtype) {
  json want = expected_fixtures().at("numpy_dtypes.safetensors");
  SafetensorsFile f = SafetensorsFile::open(fixture("numpy_dtypes.safetensors"));
  check_against_expected(f, want);
  EXPECT_EQ(f.type("scalar_f32"), (TensorType{DType::f32, Shape{}}));
  EXPECT_EQ(f.get("scalar_f32").get_f64(0), 3.25);
  EXPECT_EQ(f.type("empty_f32"), (TensorType{DType::f32, Shape{3, 0}}));
  EXPECT_EQ(f.get("bf16").get_f64(2), 1.0);
  EXPECT_EQ(f.get("i64").get_i64(4), INT64_MAX);
  EXPECT_EQ(f.stored_dtype("unsupported_f8"), "F8_E4M3");
}

TEST(SafetensorsReference, WriterReproducesTheReferenceBytes) {
  // Read back what safetensors wrote and write it again in the same order: same bytes.
  json want = expected_fixtures().at("reference_layout.safetensors");
  std::string ref_path = fixture("reference_layout.safetensors");
  SafetensorsFile f = SafetensorsFile::open(ref_path);
  check_against_expected(f, want);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const std::string& n : f.names()) tensors.emplace_back(n, f.get(n));
  TempDir dir;
  std::string path = dir.file("again.safetensors");
  write_safetensors(path, tensors, f.metadata());
  EXPECT_EQ(read_bytes(path), read_bytes(ref_path));
}

// ---- the real model, when RLX_MODEL_DIR names the directory holding its model.safetensors

TEST(SafetensorsReference, MiniLmCheckpoint) {
  const char* dir = std::getenv("RLX_MODEL_DIR");
  if (dir == nullptr || *dir == '\0') GTEST_SKIP() << "RLX_MODEL_DIR is not set";
  std::string path = std::string(dir) + "/model.safetensors";
  if (!fs::exists(path)) GTEST_SKIP() << path << " does not exist";

  SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  std::vector<std::string> names = f.names();
  EXPECT_EQ(names.size(), 104u);  // 6 layers x 16 + embeddings (6) + pooler (2)
  EXPECT_EQ(names.front(), "embeddings.position_ids");
  size_t total = 0;
  for (const std::string& n : names) {
    Tensor t = f.get(n);
    total += t.nbytes();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % dtype_size(t.dtype()), 0u) << n;
  }
  uint64_t header = 0;
  std::ifstream in(path, std::ios::binary);
  for (int i = 0; i < 8; ++i) header |= static_cast<uint64_t>(in.get()) << (8 * i);
  EXPECT_EQ(total + 8 + header, fs::file_size(path));

  EXPECT_EQ(f.type("embeddings.word_embeddings.weight"),
            (TensorType{DType::f32, Shape{30522, 384}}));
  EXPECT_EQ(f.type("encoder.layer.5.output.dense.weight"),
            (TensorType{DType::f32, Shape{384, 1536}}));
  Tensor w = f.get("embeddings.word_embeddings.weight");
  // Values read with safetensors.numpy.load_file.
  EXPECT_EQ(w.data_as<float>()[0], -0x1.478p-6f);
  EXPECT_EQ(w.data_as<float>()[1], -0x1.bep-9f);
  EXPECT_EQ(w.data_as<float>()[w.numel() - 1], 0x1.2b80f2p-8f);
  double sum = 0;
  for (int64_t i = 0; i < w.numel(); ++i) sum += w.data_as<float>()[i];
  EXPECT_NEAR(sum, 138.05072214923618, 1e-6);
  Tensor pos = f.get("embeddings.position_ids");
  ASSERT_EQ(pos.type(), (TensorType{DType::i64, Shape{1, 512}}));
  for (int64_t i = 0; i < 512; ++i) ASSERT_EQ(pos.data_as<int64_t>()[i], i);
}

// ---- opening: every validation rule, one malformed file each

const std::string kOk = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";

TEST(SafetensorsValidation, WellFormedBaselineOpens) {
  EXPECT_EQ(open_error(st_file(kOk, f32_bytes({1, 2}))), "");
  // Whitespace around the JSON is how writers pad the header.
  EXPECT_EQ(open_error(st_file("  \n" + kOk + "    ", f32_bytes({1, 2}))), "");
}

TEST(SafetensorsValidation, MissingOrUnreadableFile) {
  TempDir dir;
  std::string path = dir.file("nope.safetensors");
  EXPECT_EQ(error_of([&] { SafetensorsFile::open(path); }),
            path + ": cannot open: No such file or directory");
  std::string d = dir.file("");
  EXPECT_EQ(error_of([&] { SafetensorsFile::open(d); }),
            "'" + d + "' is a directory, expected a file");
}

TEST(SafetensorsValidation, FileShorterThan8Bytes) {
  EXPECT_CONTAINS(open_error(""), "file has 0 bytes, fewer than the 8-byte header length");
  EXPECT_CONTAINS(open_error(std::string("\x02\0\0\0\0", 5)), "file has 5 bytes");
}

TEST(SafetensorsValidation, HeaderLengthAboveTheCap) {
  EXPECT_CONTAINS(open_error(le64(100'000'001) + "{}"),
                  "header length 100000001 (file bytes 0..7) exceeds the limit of 100000000");
  EXPECT_CONTAINS(open_error(le64(UINT64_MAX)), "header length 18446744073709551615");
}

TEST(SafetensorsValidation, HeaderLengthPastTheEndOfTheFile) {
  EXPECT_CONTAINS(open_error(le64(100) + "{}        "),
                  "header length 100 (file bytes 0..7) runs past the end of the file: the "
                  "header would end at byte 108 but the file has 18 bytes");
}

TEST(SafetensorsValidation, HeaderNotUtf8) {
  EXPECT_CONTAINS(open_error(st_file("{\"a\xff\":1}")),
                  "header is not valid UTF-8 at file byte 11");
  // An overlong encoding and a surrogate are invalid too, not just stray bytes.
  EXPECT_CONTAINS(open_error(st_file("{\"\xc0\xaf\":1}")), "not valid UTF-8 at file byte 10");
  EXPECT_CONTAINS(open_error(st_file("{\"\xed\xa0\x80\":1}")), "not valid UTF-8 at file byte 10");
}

TEST(SafetensorsValidation, HeaderNotJson) {
  EXPECT_CONTAINS(open_error(st_file(R"({"a":})")), "header is not valid JSON at file byte 13: ");
  EXPECT_CONTAINS(open_error(st_file(kOk + std::string(1, '\0'), f32_bytes({1, 2}))),
                  "header is not valid JSON at file byte " + std::to_string(8 + kOk.size()) +
                      ": NUL byte");  // a NUL pad is not whitespace
  EXPECT_CONTAINS(open_error(st_file("")), "header is not valid JSON at file byte 8");
  EXPECT_CONTAINS(open_error(st_file(R"({"a":1e999})")), "header is not valid JSON");
}

TEST(SafetensorsValidation, HeaderNotAnObject) {
  EXPECT_CONTAINS(open_error(st_file("[1, 2]")),
                  "header is an array, expected an object mapping tensor names to entries");
  EXPECT_CONTAINS(open_error(st_file("\"x\"")), "header is a string, expected an object");
}

TEST(SafetensorsValidation, HeaderNestedTooDeep) {
  EXPECT_CONTAINS(open_error(st_file(std::string(1000, '[') + std::string(1000, ']'))),
                  "header nests deeper than 64 levels");
}

TEST(SafetensorsValidation, EntryNotAnObject) {
  EXPECT_CONTAINS(open_error(st_file(R"({"a":[1]})")),
                  "tensor 'a': entry is an array, expected an object with dtype, shape and "
                  "data_offsets");
}

TEST(SafetensorsValidation, MissingField) {
  EXPECT_CONTAINS(open_error(st_file(R"({"a":{"dtype":"F32","shape":[2]}})")),
                  "tensor 'a': missing field 'data_offsets'");
  EXPECT_CONTAINS(open_error(st_file(R"({"a":{"shape":[0],"data_offsets":[0,0]}})")),
                  "tensor 'a': missing field 'dtype'");
}

TEST(SafetensorsValidation, UnknownField) {
  EXPECT_CONTAINS(
      open_error(st_file(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0],"offsets":1}})")),
      "tensor 'a': unknown field 'offsets' (expected only dtype, shape, data_offsets)");
}

TEST(SafetensorsValidation, DtypeNotAString) {
  EXPECT_CONTAINS(open_error(st_file(R"({"a":{"dtype":32,"shape":[0],"data_offsets":[0,0]}})")),
                  "tensor 'a': dtype is a number, expected a string");
}

TEST(SafetensorsValidation, UnknownDtype) {
  EXPECT_CONTAINS(open_error(st_file(R"({"a":{"dtype":"F128","shape":[0],"data_offsets":[0,0]}})")),
                  "tensor 'a': unknown dtype 'F128' (safetensors dtypes: BOOL, U8, I8,");
  EXPECT_CONTAINS(open_error(st_file(R"({"a":{"dtype":"f32","shape":[0],"data_offsets":[0,0]}})")),
                  "unknown dtype 'f32'");  // names are case-sensitive
}

TEST(SafetensorsValidation, ValidDtypeRlxDoesNotSupport) {
  TempDir dir;
  std::string path = dir.file("i16.safetensors");
  write_bytes(path, st_file(R"({"q":{"dtype":"I16","shape":[2],"data_offsets":[0,4]},)"
                            R"("p":{"dtype":"F4","shape":[4],"data_offsets":[4,6]},)"
                            R"("ok":{"dtype":"U8","shape":[2],"data_offsets":[6,8]}})",
                            std::string("\1\0\2\0\x12\x34\5\6", 8)));
  SafetensorsFile f = SafetensorsFile::open(path);  // opens: only those tensors are refused
  EXPECT_EQ(f.names(), (std::vector<std::string>{"q", "p", "ok"}));
  EXPECT_EQ(f.stored_dtype("q"), "I16");
  EXPECT_EQ(error_of([&] { f.get("q"); }),
            path + ": tensor 'q' has dtype I16, which rlx does not support");
  EXPECT_EQ(error_of([&] { f.type("p"); }),
            path + ": tensor 'p' has dtype F4, which rlx does not support");
  EXPECT_EQ(f.get("ok").get_i64(1), 6);
  // Packed F4 sizes count bits: 3 elements are 12 bits, which no byte range can hold.
  EXPECT_CONTAINS(open_error(st_file(R"({"p":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})",
                                     std::string(2, '\0'))),
                  "tensor 'p': F4[3] is 12 bits, not a whole number of bytes");
}

TEST(SafetensorsValidation, ShapeNotAnArray) {
  EXPECT_CONTAINS(open_error(st_file(R"({"a":{"dtype":"F32","shape":"2","data_offsets":[0,8]}})",
                                     f32_bytes({1, 2}))),
                  "tensor 'a': shape is a string, expected an array of non-negative integers");
}

TEST(SafetensorsValidation, NegativeDim) {
  EXPECT_CONTAINS(
      open_error(st_file(R"({"a":{"dtype":"F32","shape":[2,-3],"data_offsets":[0,8]}})")),
      "tensor 'a': shape[1] is -3, expected a non-negative integer");
}

TEST(SafetensorsValidation, NonIntegerDim) {
  EXPECT_CONTAINS(
      open_error(st_file(R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,8]}})")),
      "tensor 'a': shape[0] is 1.5, not an integer; expected a non-negative integer");
  EXPECT_CONTAINS(
      open_error(st_file(R"({"a":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})")),
      "shape[0] is 2.0, not an integer");
  EXPECT_CONTAINS(
      open_error(st_file(R"({"a":{"dtype":"F32","shape":["2"],"data_offsets":[0,8]}})")),
      "shape[0] is a string; expected a non-negative integer");
  EXPECT_CONTAINS(
      open_error(
          st_file(R"({"a":{"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,8]}})")),
      "shape[0] is 18446744073709551615, larger than 2^63 - 1");
}

TEST(SafetensorsValidation, ShapeProductOverflow) {
  EXPECT_CONTAINS(
      open_error(
          st_file(R"({"a":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,8]}})")),
      "tensor 'a': shape [4294967296,4294967296] has more than 2^63 - 1 elements");
  // Elements fit, bytes do not.
  EXPECT_CONTAINS(
      open_error(
          st_file(R"({"a":{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,8]}})")),
      "tensor 'a': F64[2305843009213693952] is too large: its byte size overflows");
  // As rlx::Shape: a 0 dim makes the tensor empty wherever it is, so nothing overflows.
  EXPECT_EQ(open_error(st_file(
                R"({"a":{"dtype":"F64","shape":[4294967296,4294967296,0],"data_offsets":[0,0]}})")),
            "");
}

// A header can declare terabytes in a few bytes; open() compares the declared size with the
// file before anything is read or allocated, and get() only views the mapping.
TEST(SafetensorsValidation, TerabyteShapeInATinyFile) {
  EXPECT_CONTAINS(
      open_error(st_file(R"({"a":{"dtype":"F32","shape":[1048576,1048576],"data_offsets":[0,16]}})",
                         std::string(16, '\0'))),
      "tensor 'a': data_offsets [0, 16] span 16 bytes, but F32[1048576,1048576] takes "
      "4398046511104 bytes");
  EXPECT_CONTAINS(
      open_error(st_file(
          R"({"a":{"dtype":"F32","shape":[1048576,1048576],"data_offsets":[0,4398046511104]}})",
          std::string(16, '\0'))),
      "tensor 'a': data_offsets [0, 4398046511104] (file bytes");
  EXPECT_CONTAINS(
      open_error(st_file(
          R"({"a":{"dtype":"F32","shape":[1048576,1048576],"data_offsets":[0,4398046511104]}})",
          std::string(16, '\0'))),
      "end past the data buffer, which has 16 bytes");
}

TEST(SafetensorsValidation, ByteSizeDiffersFromOffsets) {
  EXPECT_CONTAINS(open_error(st_file(R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})",
                                     std::string(20, '\0'))),
                  "tensor 'a': data_offsets [0, 20] span 20 bytes, but F32[2,3] takes 24 bytes");
}

TEST(SafetensorsValidation, OffsetsMalformed) {
  EXPECT_CONTAINS(open_error(st_file(R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[0]}})")),
                  "tensor 'a': data_offsets is [0], expected [begin, end]");
  EXPECT_CONTAINS(
      open_error(st_file(R"({"a":{"dtype":"U8","shape":[0],"data_offsets":{"b":0,"e":0}}})")),
      "data_offsets is {\"b\":0,\"e\":0}, expected [begin, end]");
  EXPECT_CONTAINS(open_error(st_file(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[-1,0]}})")),
                  "tensor 'a': data_offsets[0] is -1, expected a non-negative integer");
  EXPECT_CONTAINS(
      open_error(st_file(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1.0]}})", "x")),
      "tensor 'a': data_offsets[1] is 1.0, not an integer");
}

TEST(SafetensorsValidation, BeginAfterEnd) {
  EXPECT_CONTAINS(open_error(st_file(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[8,4]}})",
                                     std::string(8, 'x'))),
                  "tensor 'a': data_offsets [8, 4] have begin > end");
}

TEST(SafetensorsValidation, OffsetsOutOfBounds) {
  std::string header = R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
  size_t start = 8 + header.size();
  EXPECT_CONTAINS(open_error(st_file(header, f32_bytes({1, 2}))),
                  "tensor 'a': data_offsets [0, 16] (file bytes " + std::to_string(start) + ".." +
                      std::to_string(start + 16) +
                      ") end past the data buffer, which has 8 bytes (file bytes " +
                      std::to_string(start) + ".." + std::to_string(start + 8) + ")");
  // Offsets near 2^64 must not wrap around in the bounds arithmetic.
  EXPECT_CONTAINS(
      open_error(st_file(
          R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[9223372036854775806,9223372036854775807]}})",
          "x")),
      "end past the data buffer, which has 1 bytes");
}

TEST(SafetensorsValidation, TensorsOverlap) {
  EXPECT_CONTAINS(open_error(st_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                     R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                     f32_bytes({1, 2, 3}))),
                  "tensor 'b' (data_offsets [4, 12]) overlaps tensor 'a' (data_offsets [0, 8])");
  // Two tensors on the same bytes.
  EXPECT_CONTAINS(open_error(st_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                     R"("b":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})",
                                     f32_bytes({1}))),
                  "overlaps tensor");
}

TEST(SafetensorsValidation, GapBetweenTensors) {
  std::string header = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                       R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})";
  size_t start = 8 + header.size();
  EXPECT_CONTAINS(open_error(st_file(header, f32_bytes({1, 2, 3}))),
                  "bytes [4, 8) of the data buffer (file bytes " + std::to_string(start + 4) +
                      ".." + std::to_string(start + 8) +
                      ") belong to no tensor (tensor 'b' starts at 8); tensors must be "
                      "contiguous from offset 0");
  EXPECT_CONTAINS(open_error(st_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                                     f32_bytes({1, 2}))),
                  "bytes [0, 4) of the data buffer");
}

TEST(SafetensorsValidation, TrailingBytesAfterTheLastTensor) {
  EXPECT_CONTAINS(open_error(st_file(kOk, f32_bytes({1, 2}) + "zz")),
                  "bytes [8, 10) at the end of the data buffer");
  EXPECT_CONTAINS(open_error(st_file("{}", "z")), "bytes [0, 1) at the end of the data buffer");
}

TEST(SafetensorsValidation, DuplicateKeys) {
  EXPECT_CONTAINS(open_error(st_file(R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},)"
                                     R"("a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}})")),
                  "header has the key 'a' twice");
  EXPECT_CONTAINS(
      open_error(st_file(R"({"a":{"dtype":"U8","dtype":"I8","shape":[0],"data_offsets":[0,0]}})")),
      "header entry 'a' has the key 'dtype' twice");
  EXPECT_CONTAINS(open_error(st_file(R"({"__metadata__":{"k":"1","k":"2"}})")),
                  "header entry '__metadata__' has the key 'k' twice");
}

TEST(SafetensorsValidation, MetadataNotStringToString) {
  EXPECT_CONTAINS(open_error(st_file(R"({"__metadata__":"x"})")),
                  "__metadata__ is a string, expected an object of string values");
  EXPECT_CONTAINS(open_error(st_file(R"({"__metadata__":{"k":1}})")),
                  "__metadata__ value of key 'k' is a number, expected a string");
  EXPECT_CONTAINS(open_error(st_file(R"({"__metadata__":{"k":["v"]}})")),
                  "__metadata__ value of key 'k' is an array, expected a string");
}

TEST(SafetensorsValidation, BoolBytesMustBe0Or1) {
  TempDir dir;
  std::string path = dir.file("b.safetensors");
  write_bytes(path, st_file(R"({"m":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})",
                            std::string("\1\2\0", 3)));
  SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(error_of([&] { f.get("m"); }),
            path + ": tensor 'm' (BOOL) has the byte 2 at element 1; expected 0 or 1");
}

// ---- writer errors

TEST(SafetensorsWriter, DuplicateAndReservedNames) {
  TempDir dir;
  std::string path = dir.file("w.safetensors");
  Tensor t(DType::f32, Shape{1});
  EXPECT_EQ(error_of([&] {
              write_safetensors(path, {{"a", t}, {"b", t}, {"a", t}});
            }),
            path + ": duplicate tensor name 'a'");
  EXPECT_CONTAINS(error_of([&] {
                    write_safetensors(path, {{"__metadata__", t}});
                  }),
                  "a tensor cannot be called '__metadata__'");
  EXPECT_CONTAINS(error_of([&] {
                    write_safetensors(path, {{"bad\xff", t}});
                  }),
                  "is not valid UTF-8");
  EXPECT_CONTAINS(error_of([&] {
                    write_safetensors(path, {}, {{"k", "\xc3"}});
                  }),
                  "metadata value of key 'k' is not valid UTF-8");
  EXPECT_TRUE(dir.entries().empty());  // nothing written, no temporary left
}

TEST(SafetensorsWriter, IoFailuresNameThePathAndErrno) {
  TempDir dir;
  std::string missing = dir.file("no/such/dir/w.safetensors");
  std::string msg = error_of([&] { write_safetensors(missing, {}); });
  EXPECT_CONTAINS(msg, missing + ": cannot create temporary file");
  EXPECT_CONTAINS(msg, "No such file or directory");

  // The target is a directory: the rename fails, and the temporary file is removed.
  std::string target = dir.file("adir");
  fs::create_directories(fs::path(target) / "child");
  msg = error_of([&] { write_safetensors(target, {{"a", Tensor(DType::u8, Shape{2})}}); });
  EXPECT_CONTAINS(msg, target + ": cannot rename '" + target + ".tmp.");
  EXPECT_CONTAINS(msg, "Is a directory");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"adir"});
}

// ---- fuzz: mutated files either open (and every tensor reads) or throw rlx::Error

TEST(SafetensorsFuzz, MutatedFilesNeverCrash) {
  TempDir dir;
  std::string base_path = dir.file("base.safetensors");
  write_safetensors(
      base_path,
      {{"w", testing::random_tensor(DType::f32, Shape{3, 2}, 7)},
       {"h", testing::random_tensor(DType::bf16, Shape{3}, 8)},
       {"ids", Tensor::from_ints(DType::i64, Shape{}, std::vector<int64_t>{42})},
       {"m", Tensor::from_ints(DType::bool_, Shape{4}, std::vector<int64_t>{1, 0, 0, 1})},
       {"e", Tensor(DType::u8, Shape{0, 3})}},
      {{"format", "rlx"}});
  const std::string base = read_bytes(base_path);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<unsigned char>(base[i]);
  const size_t header_end = 8 + header_len;

  std::mt19937_64 rng(20260115);
  auto below = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  const std::string json_chars = "{}[]\":, 0123456789-.eE\\u";
  int opened = 0, rejected = 0;
  for (int iter = 0; iter < 2000; ++iter) {
    std::string b = base;
    int mutations = 1 + static_cast<int>(below(3));
    for (int m = 0; m < mutations && !b.empty(); ++m) {
      // Most mutations hit the header, where the validation is; data bytes are opaque.
      size_t hpos = below(std::min(b.size(), header_end));
      switch (below(6)) {
        case 0:
          b[hpos] = static_cast<char>(b[hpos] ^ (1 << below(8)));
          break;
        case 1:
          b[below(b.size())] = static_cast<char>(rng());
          break;
        case 2:
          b.resize(below(b.size()));
          break;
        case 3:
          b[hpos] = json_chars[below(json_chars.size())];
          break;
        case 4: {
          std::string len = le64(header_len + below(33) - 16);
          b.replace(0, std::min<size_t>(8, b.size()), len.substr(0, std::min<size_t>(8, b.size())));
          break;
        }
        default:
          if (rng() % 2)
            b.insert(hpos, 1, json_chars[below(json_chars.size())]);
          else
            b.erase(hpos, 1);
          break;
      }
    }
    // A new file each time: truncating and rewriting one file makes ext4 flush it to disk
    // (auto_da_alloc), 100x slower.
    std::string path = dir.file("mutant" + std::to_string(iter) + ".safetensors");
    write_bytes(path, b);
    try {
      SafetensorsFile f = SafetensorsFile::open(path);
      ++opened;
      for (const std::string& n : f.names()) {
        try {
          Tensor t = f.get(n);
          uint64_t sum = 0;  // touch every byte, so a bad view would fault here
          for (size_t i = 0; i < t.nbytes(); ++i) sum += static_cast<uint64_t>(t.data()[i]);
          EXPECT_LE(sum, 255 * t.nbytes());
        } catch (const Error&) {
          // an unsupported dtype or a bool byte other than 0/1: fine
        }
      }
    } catch (const Error& e) {
      ++rejected;
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "mutation " << iter << " threw a non-rlx exception: " << e.what();
    }
    fs::remove(path);
  }
  std::cout << "fuzz: " << opened << " opened, " << rejected << " rejected\n";
  EXPECT_GT(opened, 20);
  EXPECT_GT(rejected, 1000);
}

}  // namespace
}  // namespace rlx
