// GGUF reader and writer: files written and read back by gguf-py (tests/io/gen_gguf_fixtures.py)
// with every value and tensor checked against its JSON, rlx's writer reproducing them byte for
// byte, one hand-made malformed file per validation rule (each message must name the file, the
// byte offset and what was expected), the accessors' type errors, and every truncation of a
// valid file.
#include "rlx/io/gguf.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "common/scoped_env.h"
#include "common/test_util.h"
#include "rlx/ir/error.h"

namespace rlx {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using testing::error_of;
using testing::TempDir;

#define EXPECT_CONTAINS(haystack, needle)                                       \
  do {                                                                          \
    const std::string& rlx_h_ = (haystack);                                     \
    EXPECT_NE(rlx_h_.find(needle), std::string::npos) << "message: " << rlx_h_; \
  } while (0)

const std::string kData = std::string(RLX_TEST_DATA_DIR) + "/io/data/";

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

std::span<const std::byte> as_bytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

// ---- building GGUF bytes by hand

/// Appends little-endian GGUF encodings; pos() is the next byte's offset (for the expected
/// offsets in messages).
struct Gguf {
  std::string b;
  size_t pos() const { return b.size(); }
  Gguf& u8(uint8_t v) { return raw(&v, 1); }
  Gguf& u32(uint32_t v) { return raw(&v, 4); }
  Gguf& u64(uint64_t v) { return raw(&v, 8); }
  Gguf& f32(float v) { return raw(&v, 4); }
  Gguf& str(const std::string& s) {
    u64(s.size());
    b += s;
    return *this;
  }
  Gguf& raw(const void* p, size_t n) {
    b.append(static_cast<const char*>(p), n);
    return *this;
  }
  /// "GGUF", version, tensor_count, kv_count.
  Gguf& header(uint64_t tensors, uint64_t kvs, uint32_t version = 3) {
    b += "GGUF";
    return u32(version).u64(tensors).u64(kvs);
  }
  /// A u32 metadata entry.
  Gguf& kv_u32(const std::string& key, uint32_t v) { return str(key).u32(4).u32(v); }
  /// A tensor info; dims innermost first, as the file stores them.
  Gguf& tensor(const std::string& name, const std::vector<uint64_t>& dims, uint32_t type,
               uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(dims.size()));
    for (uint64_t d : dims) u64(d);
    return u32(type).u64(offset);
  }
  Gguf& pad(size_t alignment = 32) {
    b.append((alignment - b.size() % alignment) % alignment, '\0');
    return *this;
  }
  Gguf& zeros(size_t n) {
    b.append(n, '\0');
    return *this;
  }
};

/// Writes `bytes` to a file and opens it; returns the rlx::Error message ("" if it opened).
/// Every message must name the file and, when `at` is given, the byte offset "at byte N".
std::string open_error(const std::string& bytes, std::optional<size_t> at = std::nullopt) {
  TempDir dir;
  std::string path = dir.file("bad.gguf");
  write_bytes(path, bytes);
  std::string msg = error_of([&] { GgufFile::open(path); });
  EXPECT_FALSE(msg.empty()) << "the file opened";
  EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << msg;
  if (at) EXPECT_CONTAINS(msg, path + ": at byte " + std::to_string(*at) + ": ");
  // from_bytes validates the same way, naming the given name.
  std::string mem = error_of([&] { GgufFile::from_bytes(bytes, "mem.gguf"); });
  EXPECT_EQ(mem, msg.empty() ? "" : "mem.gguf" + msg.substr(path.size())) << "from_bytes";
  return msg;
}

// ---- the gguf-py fixtures against their JSON

double json_number(const json& v) {
  if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    if (s == "nan") return std::nan("");
    if (s == "inf") return INFINITY;
    if (s == "-inf") return -INFINITY;
    ADD_FAILURE() << "unexpected float string " << s;
  }
  return v.get<double>();
}

template <class T>
void expect_float_eq(T got, const json& want, const std::string& what) {
  const double w = json_number(want);
  if (std::isnan(w)) {
    EXPECT_TRUE(std::isnan(got)) << what;
  } else {
    EXPECT_EQ(static_cast<double>(got), w) << what;
    EXPECT_EQ(std::signbit(got), std::signbit(w)) << what;
  }
}

/// One array element or scalar of C++ type T against its JSON.
template <class T>
void expect_scalar(const T& got, const json& want, const std::string& what) {
  if constexpr (std::is_floating_point_v<T>) {
    expect_float_eq(got, want, what);
  } else if constexpr (std::is_same_v<T, bool>) {
    EXPECT_EQ(got, want.get<bool>()) << what;
  } else if constexpr (std::is_same_v<T, std::string>) {
    EXPECT_EQ(got, want.get<std::string>()) << what;
  } else if constexpr (std::is_unsigned_v<T>) {
    EXPECT_EQ(static_cast<uint64_t>(got), want.get<uint64_t>()) << what;
  } else {
    EXPECT_EQ(static_cast<int64_t>(got), want.get<int64_t>()) << what;
  }
}

void expect_array(const GgufArray& got, const json& want, const std::string& what) {
  ASSERT_EQ(gguf_value_type_name(got.element_type()), want.at("element_type").get<std::string>())
      << what;
  const json& items = want.at("items");
  ASSERT_EQ(got.size(), items.size()) << what;
  std::visit(
      [&](const auto& v) {
        using T = typename std::decay_t<decltype(v)>::value_type;
        for (size_t i = 0; i < v.size(); ++i) {
          const std::string w = what + "[" + std::to_string(i) + "]";
          if constexpr (std::is_same_v<T, GgufArray>) {
            expect_array(v[i], items[i], w);
          } else {
            expect_scalar<T>(v[i], items[i], w);
          }
        }
      },
      got.items());
}

void expect_value(const GgufValue& got, const std::string& type, const json& want,
                  const std::string& what) {
  ASSERT_EQ(gguf_value_type_name(gguf_type(got)), type) << what;
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, GgufArray>) {
          expect_array(v, want, what);
        } else {
          expect_scalar<T>(v, want, what);
        }
      },
      got);
}

std::string hex(std::span<const std::byte> bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  for (std::byte b : bytes) {
    s += kHex[static_cast<unsigned>(b) >> 4];
    s += kHex[static_cast<unsigned>(b) & 15];
  }
  return s;
}

json expected_json() {
  std::ifstream in(kData + "gguf_expected.json");
  return json::parse(in);
}

TEST(GgufFixtures, EveryValueShapeTypeAndByteAsGgufPyReadsThem) {
  const json all = expected_json();
  ASSERT_EQ(all.size(), 4u);
  for (const auto& [file, want] : all.items()) {
    SCOPED_TRACE(file);
    const GgufFile f = GgufFile::open(kData + file);
    EXPECT_EQ(f.version(), want.at("version").get<uint32_t>());
    EXPECT_EQ(f.alignment(), want.at("alignment").get<uint32_t>());
    EXPECT_EQ(f.data_offset(), want.at("data_offset").get<uint64_t>());

    const json& kv = want.at("kv");
    ASSERT_EQ(f.keys().size(), kv.size());
    for (size_t i = 0; i < kv.size(); ++i) {
      const std::string key = kv[i].at("key");
      EXPECT_EQ(f.keys()[i], key);
      ASSERT_NE(f.find(key), nullptr) << key;
      expect_value(f.at(key), kv[i].at("type"), kv[i].at("value"), key);
    }

    const json& tensors = want.at("tensors");
    ASSERT_EQ(f.tensors().size(), tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
      const json& w = tensors[i];
      const std::string name = w.at("name");
      SCOPED_TRACE(name);
      const GgufTensorInfo& t = f.tensors()[i];
      EXPECT_EQ(t.name, name);
      EXPECT_EQ(&f.tensor_info(name), &t);
      EXPECT_EQ(ggml_type_info(t.type).name, w.at("type").get<std::string>());
      EXPECT_EQ(t.shape, w.at("shape").get<std::vector<int64_t>>());
      EXPECT_EQ(t.offset, w.at("offset").get<uint64_t>());
      EXPECT_EQ(t.nbytes, w.at("nbytes").get<uint64_t>());
      GgufTensorBytes bytes = f.tensor_bytes(name);
      EXPECT_EQ(bytes.size(), t.nbytes);
      EXPECT_EQ(hex(bytes.bytes), w.at("hex").get<std::string>());
      if (w.at("values").is_null()) {
        EXPECT_FALSE(ggml_type_dtype(t.type).has_value());
        EXPECT_CONTAINS(error_of([&] { f.tensor(name); }), "tensor '" + name + "' has ggml type " +
                                                               w.at("type").get<std::string>() +
                                                               ", which has no rlx dtype");
        continue;
      }
      Tensor x = f.tensor(name);
      EXPECT_EQ(x.dtype(), *ggml_type_dtype(t.type));
      EXPECT_EQ(x.shape().dims(), t.shape);
      const json& values = w.at("values");
      ASSERT_EQ(static_cast<size_t>(x.numel()), values.size());
      for (int64_t k = 0; k < x.numel(); ++k) {
        if (is_float(x.dtype())) {
          expect_float_eq(x.get_f64(k), values[static_cast<size_t>(k)], "element");
        } else {
          EXPECT_EQ(x.get_i64(k), values[static_cast<size_t>(k)].get<int64_t>()) << k;
        }
      }
    }
  }
}

/// What rlx read from `f`, as the writer takes it.
std::vector<GgufTensorData> tensors_of(const GgufFile& f) {
  std::vector<GgufTensorData> out;
  for (const GgufTensorInfo& t : f.tensors())
    out.push_back({t.name, t.type, t.shape, f.tensor_bytes(t.name).bytes});
  return out;
}

TEST(GgufFixtures, RlxWriterReproducesGgufPyFilesByteForByte) {
  // gguf-py's GGUFReader reads what rlx writes because it is the same bytes GGUFWriter wrote
  // (the v2 file differs only in the version field: rlx writes version 3).
  const json all = expected_json();
  TempDir dir;
  for (const auto& [file, want] : all.items()) {
    SCOPED_TRACE(file);
    const GgufFile f = GgufFile::open(kData + file);
    const std::string out = dir.file(file);
    write_gguf(out, f.metadata(), tensors_of(f), f.alignment());
    std::string expected = read_bytes(kData + file);
    if (want.at("rewrite") == "version3") {
      ASSERT_EQ(expected.substr(4, 4), std::string("\x02\0\0\0", 4));
      expected[4] = '\x03';
    } else {
      ASSERT_EQ(want.at("rewrite"), "identical");
    }
    const std::string got = read_bytes(out);
    EXPECT_EQ(got.size(), expected.size());
    EXPECT_TRUE(got == expected);
    EXPECT_TRUE(gguf_file_bytes(f.metadata(), tensors_of(f), f.alignment()) == expected);
  }
  EXPECT_EQ(dir.entries().size(), all.size());  // no temporary left behind
}

TEST(GgufFixtures, TypedAccessorsAndTheirErrors) {
  const std::string path = kData + "gguf_all_types.gguf";
  const GgufFile f = GgufFile::open(path);
  EXPECT_EQ(f.get<uint8_t>("test.u8"), 200);
  EXPECT_EQ(f.get<int64_t>("test.i64"), INT64_MIN);
  EXPECT_EQ(f.get<uint64_t>("test.u64"), UINT64_MAX);
  EXPECT_EQ(f.get<float>("test.f32"), 0.1f);
  EXPECT_TRUE(f.get<bool>("test.bool_true"));
  EXPECT_EQ(f.get_string("general.architecture"), "rlxtest");
  EXPECT_EQ(f.get_array<int32_t>("test.arr_i32"), (std::vector<int32_t>{INT32_MIN, 5, INT32_MAX}));
  EXPECT_EQ(f.get_array<std::string>("test.arr_string")[2], "\xc3\xbc\xc3\x9f");
  const std::vector<GgufArray>& nested = f.get_array<GgufArray>("test.nested_i32");
  ASSERT_EQ(nested.size(), 2u);
  EXPECT_EQ(*nested[1].get_if<int32_t>(), std::vector<int32_t>{3});
  EXPECT_FALSE(f.contains("nope"));
  EXPECT_EQ(f.find("nope"), nullptr);

  const std::string at = " (at byte " + std::to_string(f.value_offset("test.u32")) + ")";
  EXPECT_EQ(error_of([&] { f.get<int32_t>("test.u32"); }),
            path + ": metadata key 'test.u32'" + at + " has type u32, expected i32");
  EXPECT_EQ(error_of([&] { f.get_string("test.u32"); }),
            path + ": metadata key 'test.u32'" + at + " has type u32, expected string");
  EXPECT_EQ(error_of([&] { f.get_array<int32_t>("test.u32"); }),
            path + ": metadata key 'test.u32'" + at + " has type u32, expected an array of i32");
  const std::string sat = " (at byte " + std::to_string(f.value_offset("test.arr_string")) + ")";
  EXPECT_EQ(error_of([&] { f.get_array<int32_t>("test.arr_string"); }),
            path + ": metadata key 'test.arr_string'" + sat +
                " is an array of string, expected an array of i32");
  EXPECT_EQ(error_of([&] { f.get<uint32_t>("nope"); }), path + ": no metadata key 'nope'");
  EXPECT_EQ(error_of([&] { f.tensor_bytes("nope"); }), path + ": no tensor named 'nope'");
  EXPECT_EQ(f.find_tensor("nope"), nullptr);
  EXPECT_EQ(error_of([&] { f.tensor("w.q4_k"); }),
            path +
                ": tensor 'w.q4_k' has ggml type Q4_K, which has no rlx dtype (read its bytes "
                "with tensor_bytes())");

  // The value offset is where the value's bytes start: the u32 4000000000 is there.
  const std::string bytes = read_bytes(path);
  uint32_t v = 0;
  std::memcpy(&v, bytes.data() + f.value_offset("test.u32"), 4);
  EXPECT_EQ(v, 4'000'000'000u);

  EXPECT_EQ(gguf_value_to_string(f.at("test.nested_str")), R"([["x", "yz"], ["w"]])");
  EXPECT_EQ(gguf_value_to_string(f.at("test.arr_u8")), "[0, 1, 255]");
  EXPECT_EQ(gguf_value_to_string(f.at("test.arr_i32"), 2), "[-2147483648, 5, ... (3 items)]");
}

TEST(GgufFixtures, TensorsAreZeroCopyViewsThatOutliveTheFile) {
  TempDir dir;
  const std::string path = dir.file("copy.gguf");
  fs::copy_file(kData + "gguf_all_types.gguf", path);
  Tensor w;
  GgufTensorBytes q;
  std::vector<float> want;
  {
    const GgufFile f = GgufFile::open(path);
    w = f.tensor("w.f32");
    q = f.tensor_bytes("w.q4_k");
    EXPECT_EQ(f.tensor("w.f32").data(), w.data());  // the mapping, not a copy
    EXPECT_EQ(q.data(), f.tensor_bytes("w.q4_k").data());
    EXPECT_EQ(reinterpret_cast<const std::byte*>(w.data()) - q.data(),
              static_cast<ptrdiff_t>(f.tensor_info("w.f32").offset) -
                  static_cast<ptrdiff_t>(f.tensor_info("w.q4_k").offset));
    for (int64_t i = 0; i < w.numel(); ++i) want.push_back(w.data_as<float>()[i]);
  }
  fs::remove(path);  // the mapping keeps the bytes
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(w.data_as<float>()[i], want[i]);
  EXPECT_EQ(q.size(), 288u);
}

// ---- the writer

TEST(GgufWriter, RoundTripOfEveryValueTypeAndAppendedAlignment) {
  GgufMetadata meta = {
      {"a.u8", GgufValue(uint8_t{1})},
      {"a.i8", GgufValue(int8_t{-1})},
      {"a.u16", GgufValue(uint16_t{2})},
      {"a.i16", GgufValue(int16_t{-2})},
      {"a.u32", GgufValue(uint32_t{3})},
      {"a.i32", GgufValue(-3)},
      {"a.f32", GgufValue(0.25f)},
      {"a.bool", GgufValue(true)},
      {"a.string", GgufValue(std::string("s\0t", 3))},
      {"a.u64", GgufValue(uint64_t{4})},
      {"a.i64", GgufValue(int64_t{-4})},
      {"a.f64", GgufValue(-0.5)},
      {"a.empty", GgufValue(GgufArray::empty_of(GgufValueType::f64))},
      {"a.bools", GgufValue(GgufArray(std::vector<bool>{true, false}))},
      {"a.nested", GgufValue(GgufArray(std::vector<GgufArray>{
                       GgufArray(std::vector<std::string>{"x"}),
                       GgufArray(std::vector<GgufArray>{GgufArray(std::vector<int64_t>{9})})}))},
  };
  const std::string f32 = std::string(4 * 6, '\x11');
  const std::string q8 = std::string(34 * 2, '\x22');
  std::vector<GgufTensorData> tensors = {
      {"t.f32", GgmlType::F32, {2, 3}, as_bytes(f32)},
      {"t.q8", GgmlType::Q8_0, {2, 32}, as_bytes(q8)},
      {"t.scalar", GgmlType::F32, {}, as_bytes(f32).first(4)},
      {"t.empty", GgmlType::Q4_K, {0, 256}, {}},
  };
  TempDir dir;
  const std::string path = dir.file("rt.gguf");
  write_gguf(path, meta, tensors, 16);
  const GgufFile f = GgufFile::open(path);
  EXPECT_EQ(f.alignment(), 16u);
  ASSERT_EQ(f.keys().size(), meta.size() + 1);
  for (size_t i = 0; i < meta.size(); ++i) {
    EXPECT_EQ(f.keys()[i], meta[i].first);
    EXPECT_TRUE(f.at(meta[i].first) == meta[i].second) << meta[i].first;
  }
  EXPECT_EQ(f.keys().back(), "general.alignment");  // appended: the alignment is not 32
  EXPECT_EQ(f.get<uint32_t>("general.alignment"), 16u);
  EXPECT_EQ(f.data_offset() % 16, 0u);
  ASSERT_EQ(f.tensors().size(), 4u);
  EXPECT_EQ(f.tensor_info("t.q8").shape, (std::vector<int64_t>{2, 32}));
  EXPECT_EQ(f.tensor_info("t.q8").offset, 32u);  // 24 bytes of f32 padded to 16
  EXPECT_EQ(f.tensor_info("t.scalar").shape, std::vector<int64_t>{});
  EXPECT_EQ(f.tensor("t.scalar").numel(), 1);
  EXPECT_EQ(f.tensor_info("t.empty").nbytes, 0u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(f.tensor_bytes("t.q8").data()), 68), q8);

  // A Tensor given as is; metadata general.alignment must agree with the alignment.
  Tensor x = Tensor::from_doubles(DType::bf16, Shape{2, 2}, std::vector<double>{1, -2, 3, 0.5});
  write_gguf(path, {{"general.alignment", GgufValue(uint32_t{8})}}, {GgufTensorData::of("x", x)},
             8);
  const GgufFile g = GgufFile::open(path);
  EXPECT_EQ(g.keys().size(), 1u);
  EXPECT_EQ(g.tensor_info("x").type, GgmlType::BF16);
  EXPECT_TRUE(g.tensor("x").bitwise_equal(x));
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"rt.gguf"});
}

TEST(GgufWriter, RejectsBadInputBeforeTouchingTheFile) {
  TempDir dir;
  const std::string path = dir.file("keep.gguf");
  write_bytes(path, "old");
  const std::string f32 = std::string(16, '\0');
  auto err = [&](const GgufMetadata& meta, const std::vector<GgufTensorData>& tensors,
                 uint32_t alignment = 32) {
    std::string msg = error_of([&] { write_gguf(path, meta, tensors, alignment); });
    EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << msg;
    EXPECT_EQ(read_bytes(path), "old");  // untouched
    EXPECT_EQ(dir.entries(), std::vector<std::string>{"keep.gguf"});
    return msg;
  };
  EXPECT_CONTAINS(err({}, {}, 3), "GGUF alignment 3 is not a power of two in [1, 1048576]");
  EXPECT_CONTAINS(err({}, {}, 1u << 21), "GGUF alignment 2097152 is not a power of two");
  EXPECT_CONTAINS(err({{"k", GgufValue(1)}, {"k", GgufValue(2)}}, {}),
                  "metadata key 'k' is given twice");
  EXPECT_CONTAINS(err({{"bad\xff", GgufValue(1)}}, {}),
                  "metadata key 'bad\\xff' is not valid UTF-8 (at byte 3 of it)");
  EXPECT_CONTAINS(err({{"general.alignment", GgufValue(uint32_t{64})}}, {}),
                  "metadata general.alignment is 64, expected the u32 32");
  EXPECT_CONTAINS(err({{"general.alignment", GgufValue(32)}}, {}),
                  "metadata general.alignment is of type i32, expected the u32 32");
  GgufArray deep(std::vector<uint8_t>{1});
  for (int i = 0; i < GgufFile::kMaxArrayDepth; ++i) deep = GgufArray(std::vector<GgufArray>{deep});
  EXPECT_CONTAINS(err({{"deep", GgufValue(deep)}}, {}),
                  "metadata key 'deep': arrays nest deeper than 8 levels");
  EXPECT_CONTAINS(
      err({}, {{"t", GgmlType::F32, {4}, as_bytes(f32)}, {"t", GgmlType::F32, {4}, as_bytes(f32)}}),
      "tensor 't' is given twice");
  EXPECT_CONTAINS(err({}, {{"t\xc0", GgmlType::F32, {4}, as_bytes(f32)}}),
                  "tensor name 't\\xc0' is not valid UTF-8");
  EXPECT_CONTAINS(err({}, {{"t", GgmlType::F32, {1, 1, 1, 1, 4}, as_bytes(f32)}}),
                  "tensor 't' has 5 dims, expected at most 4 (GGML_MAX_DIMS)");
  EXPECT_CONTAINS(err({}, {{"t", GgmlType::F32, {-1, 4}, as_bytes(f32)}}),
                  "tensor 't' has a negative dim -1");
  EXPECT_CONTAINS(err({}, {{"t", GgmlType::F32, {int64_t{1} << 62, 4}, as_bytes(f32)}}),
                  "tensor 't': the element count overflows 2^63 - 1");
  EXPECT_CONTAINS(err({}, {{"t", GgmlType::Q8_0, {1, 16}, as_bytes(f32)}}),
                  "tensor 't': the innermost dim 16 is not a multiple of Q8_0's block size 32");
  EXPECT_CONTAINS(err({}, {{"t", GgmlType::F32, {5}, as_bytes(f32)}}),
                  "tensor 't' (F32, 5 elements) takes 20 bytes, but 16 are given");
  EXPECT_CONTAINS(err({}, {{"t", static_cast<GgmlType>(4), {4}, as_bytes(f32)}}),
                  "tensor 't': ggml type id 4 is not a known ggml type");
  EXPECT_CONTAINS(error_of([] { GgufTensorData::of("u", Tensor(DType::u8, Shape{2})); }),
                  "tensor 'u' has dtype u8, which GGUF cannot store");
}

TEST(GgufWriter, IoFailuresNameThePath) {
  TempDir dir;
  const std::string missing_dir = dir.file("no/such/dir/w.gguf");
  EXPECT_CONTAINS(error_of([&] { write_gguf(missing_dir, {}, {}); }),
                  missing_dir + ": cannot create temporary file");
  EXPECT_CONTAINS(error_of([&] { GgufFile::open(dir.file("absent.gguf")); }),
                  dir.file("absent.gguf") + ": cannot open: No such file or directory");
  EXPECT_EQ(error_of([&] { GgufFile::open(dir.path().string()); }),
            "'" + dir.path().string() + "' is a directory, expected a file");
}

TEST(GgufWriter, TypeTableMatchesGgufPy) {
  // Spot checks against gguf-py 0.19.0's GGML_QUANT_SIZES (constants.py) and the ids of
  // GGMLQuantizationType; every id appears once, in increasing order.
  EXPECT_EQ(ggml_types().size(), 34u);
  uint32_t prev = 0;
  for (size_t i = 0; i < ggml_types().size(); ++i) {
    const GgmlTypeInfo& t = ggml_types()[i];
    if (i) {
      EXPECT_GT(static_cast<uint32_t>(t.type), prev);
    }
    prev = static_cast<uint32_t>(t.type);
    EXPECT_EQ(find_ggml_type(prev), &t);
    EXPECT_EQ(ggml_type_from_name(t.name), t.type);
  }
  auto sizes = [](GgmlType t) {
    return std::pair{ggml_type_info(t).block_size, ggml_type_info(t).type_size};
  };
  EXPECT_EQ(sizes(GgmlType::Q4_0), std::pair(32u, 18u));
  EXPECT_EQ(sizes(GgmlType::Q8_0), std::pair(32u, 34u));
  EXPECT_EQ(sizes(GgmlType::Q2_K), std::pair(256u, 84u));
  EXPECT_EQ(sizes(GgmlType::Q3_K), std::pair(256u, 110u));
  EXPECT_EQ(sizes(GgmlType::Q4_K), std::pair(256u, 144u));
  EXPECT_EQ(sizes(GgmlType::Q5_K), std::pair(256u, 176u));
  EXPECT_EQ(sizes(GgmlType::Q6_K), std::pair(256u, 210u));
  EXPECT_EQ(sizes(GgmlType::Q8_K), std::pair(256u, 292u));
  EXPECT_EQ(sizes(GgmlType::IQ1_M), std::pair(256u, 56u));
  EXPECT_EQ(sizes(GgmlType::TQ1_0), std::pair(256u, 54u));
  EXPECT_EQ(sizes(GgmlType::MXFP4), std::pair(32u, 17u));
  EXPECT_EQ(sizes(GgmlType::NVFP4), std::pair(64u, 36u));
  EXPECT_EQ(sizes(GgmlType::Q1_0), std::pair(128u, 18u));
  EXPECT_EQ(sizes(GgmlType::BF16), std::pair(1u, 2u));
  EXPECT_EQ(static_cast<uint32_t>(GgmlType::BF16), 30u);
  EXPECT_EQ(static_cast<uint32_t>(GgmlType::Q1_0), 41u);
  for (uint32_t removed : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u, 42u})
    EXPECT_EQ(find_ggml_type(removed), nullptr) << removed;
  EXPECT_EQ(ggml_type_of(DType::f16), GgmlType::F16);
  EXPECT_EQ(ggml_type_of(DType::u8), std::nullopt);
  EXPECT_EQ(ggml_type_dtype(GgmlType::I16), std::nullopt);
  EXPECT_CONTAINS(error_of([] { ggml_type_info(static_cast<GgmlType>(31)); }),
                  "ggml type id 31 is not a known ggml type (Q4_0_4_4, removed from ggml)");
}

// ---- malformed files: one per rule

TEST(GgufMalformed, HeaderMagicVersionAndCounts) {
  EXPECT_CONTAINS(open_error("", 0),
                  "expected the magic \"GGUF\" (47 47 55 46), found '' and "
                  "the end of the file");
  EXPECT_CONTAINS(open_error("GGU", 0), "found 'GGU' and the end of the file");
  EXPECT_CONTAINS(open_error(std::string("GGML\x03\0\0\0", 8), 0),
                  "expected the magic \"GGUF\" (47 47 55 46), "
                  "found 'GGML'");
  EXPECT_CONTAINS(open_error(std::string("GGUF\x03\0", 6), 4),
                  "the version (u32) needs 4 bytes, but the file ends at byte 6 (2 bytes left)");
  EXPECT_CONTAINS(open_error(Gguf().header(0, 0, 1).b, 4),
                  "GGUF version 1 is not supported (it used 32-bit counts and lengths); expected "
                  "version 2 or 3");
  EXPECT_CONTAINS(open_error(Gguf().header(0, 0, 0x03000000).b, 4),
                  "the version reads 50331648: a big-endian GGUF file (version 3 byte-swapped), "
                  "expected a little-endian one");
  EXPECT_CONTAINS(open_error(Gguf().header(0, 0, 4).b, 4),
                  "unsupported GGUF version 4, expected 2 or 3");
  EXPECT_CONTAINS(open_error(Gguf().header(0, 0).b.substr(0, 20), 16),
                  "kv_count (u64) needs 8 bytes, but the file ends at byte 20");
  EXPECT_CONTAINS(open_error(Gguf().header(1'000'000'000'000, 0).zeros(48).b, 8),
                  "tensor_count is 1000000000000, but the 48 bytes after the header hold at most 2 "
                  "tensor infos (24 bytes or more each)");
  EXPECT_CONTAINS(open_error(Gguf().header(0, UINT64_MAX).zeros(26).b, 16),
                  "kv_count is 18446744073709551615, but the 26 bytes after the header hold at "
                  "most 2 metadata entries (13 bytes or more each)");
}

TEST(GgufMalformed, MetadataStringsTypesAndValues) {
  // Key length beyond the file.
  EXPECT_CONTAINS(open_error(Gguf().header(0, 1).u64(1000).zeros(5).b, 24),
                  "the length of the key of metadata entry 0 is 1000, more than the 5 bytes left "
                  "in the file after it");
  EXPECT_CONTAINS(open_error(Gguf().header(0, 1).str("ab\xe2\x82").u32(0).u8(0).b, 34),
                  "the key of metadata entry 0 'ab\\xe2\\x82' is not valid UTF-8 (expected UTF-8 "
                  "text)");
  EXPECT_CONTAINS(open_error(Gguf().header(0, 1).str("k").u32(13).u8(0).b, 33),
                  "the value type of metadata key 'k' is 13, not a GGUF value type (expected "
                  "0..12)");
  EXPECT_CONTAINS(open_error(Gguf().header(0, 1).str("k").u32(10).zeros(3).b, 37),
                  "the value of metadata key 'k' needs 8 bytes, but the file ends at byte 40");
  EXPECT_CONTAINS(open_error(Gguf().header(0, 1).str("k").u32(8).u64(100).zeros(4).b, 37),
                  "the length of the value of metadata key 'k' is 100, more than the 4 bytes left");
  EXPECT_CONTAINS(open_error(Gguf().header(0, 1).str("k").u32(7).u8(2).b, 37),
                  "the value of metadata key 'k' is a bool stored as the byte 2, expected 0 or 1");
  EXPECT_CONTAINS(open_error(Gguf().header(0, 2).kv_u32("k", 1).kv_u32("k", 2).b, 41),
                  "metadata key 'k' appears twice (first at byte 24); expected each key once");
}

TEST(GgufMalformed, Arrays) {
  auto arr = [] { return Gguf().header(0, 1).str("a").u32(9); };  // the value starts at 37
  EXPECT_CONTAINS(open_error(arr().u32(14).u64(0).b, 37),
                  "the element type of the value of metadata key 'a' is 14, not a GGUF value type "
                  "(expected 0..12)");
  EXPECT_CONTAINS(open_error(arr().u32(5).u64(3).zeros(11).b, 41),
                  "the element count of the value of metadata key 'a' is 3, but the 11 bytes left "
                  "in the file hold at most 2 elements of type i32 (4 bytes or more each)");
  EXPECT_CONTAINS(open_error(arr().u32(8).u64(UINT64_MAX / 2).zeros(64).b, 41),
                  "hold at most 8 elements of type string (8 bytes or more each)");
  EXPECT_CONTAINS(open_error(arr().u32(9).u64(1'000'000).zeros(24).b, 41),
                  "hold at most 2 elements of type array (12 bytes or more each)");
  EXPECT_CONTAINS(open_error(arr().u32(8).u64(2).str("x").u64(50).b, 58),
                  "the length of element 1 of the value of metadata key 'a' is 50, more than the 0 "
                  "bytes left");
  EXPECT_CONTAINS(open_error(arr().u32(7).u64(3).u8(1).u8(0).u8(7).b, 51),
                  "element 2 of a bool array is the byte 7, expected 0 or 1");
  // Nine levels: an array of arrays ... of u8; the ninth array header starts at 37 + 8 * 12.
  Gguf deep = arr();
  for (int i = 0; i < 8; ++i) deep.u32(9).u64(1);
  deep.u32(0).u64(0);
  EXPECT_CONTAINS(open_error(deep.b, 37 + 8 * 12),
                  "element 0 of element 0 of element 0 of element 0 of element 0 of element 0 of "
                  "element 0 of element 0 of the value of metadata key 'a': arrays nest deeper "
                  "than 8 levels (the most rlx reads)");
  // Eight levels are fine.
  Gguf ok = arr();
  for (int i = 0; i < 7; ++i) ok.u32(9).u64(1);
  ok.u32(0).u64(1).u8(5);
  GgufFile f = GgufFile::from_bytes(ok.b);
  EXPECT_EQ(gguf_value_to_string(f.at("a")), "[[[[[[[[5]]]]]]]]");
}

TEST(GgufMalformed, Alignment) {
  auto with = [](Gguf g) { return g.tensor("t", {4}, 0, 0).pad().zeros(16).b; };
  EXPECT_CONTAINS(open_error(with(Gguf().header(1, 1).str("general.alignment").u32(5).u32(8)), 53),
                  "general.alignment has type i32, expected u32");
  for (uint32_t bad : {0u, 3u, 48u, 1u << 21}) {
    EXPECT_CONTAINS(open_error(with(Gguf().header(1, 1).kv_u32("general.alignment", bad)), 53),
                    "general.alignment is " + std::to_string(bad) +
                        ", expected a power of two in [1, 1048576]");
  }
  // Alignment 1 is valid; an f32 tensor at an odd address is then copied aligned.
  Gguf g;
  // The data section starts at byte 123 (no padding), so "w" at offset 2 is at the odd byte 125.
  g.header(2, 1).kv_u32("general.alignment", 1).tensor("b", {1}, 24, 0).tensor("w", {2}, 0, 2);
  g.u8(7).u8(0).f32(1.5f).f32(-2.0f);
  const GgufFile f = GgufFile::from_bytes(g.b);
  EXPECT_EQ(f.alignment(), 1u);
  Tensor w = f.tensor("w");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(w.data()) % alignof(float), 0u);
  EXPECT_EQ(w.data_as<float>()[1], -2.0f);
  EXPECT_EQ(f.tensor("b").get_i64(0), 7);
}

TEST(GgufMalformed, TensorInfos) {
  // The first tensor info starts at byte 24 (no metadata); n_dims at 24 + 8 + name length.
  auto one = [](const std::string& name, const std::vector<uint64_t>& dims, uint32_t type,
                uint64_t offset = 0, size_t data = 64) {
    return Gguf().header(1, 0).tensor(name, dims, type, offset).pad().zeros(data).b;
  };
  EXPECT_CONTAINS(open_error(Gguf().header(1, 0).u64(99).zeros(16).b, 24),
                  "the length of the name of tensor 0 is 99, more than the 16 bytes left");
  EXPECT_CONTAINS(open_error(one("t\xff", {4}, 0), 33),
                  "the name of tensor 0 't\\xff' is not valid UTF-8");
  EXPECT_CONTAINS(open_error(one("t", {1, 1, 1, 1, 4}, 0), 33),
                  "n_dims of tensor 't' is 5, expected at most 4 (GGML_MAX_DIMS)");
  EXPECT_CONTAINS(open_error(one("t", {4, uint64_t{1} << 63}, 0), 45),
                  "dim 1 of tensor 't' is 9223372036854775808, expected at most 2^63 - 1");
  EXPECT_CONTAINS(open_error(one("t", {uint64_t{1} << 32, uint64_t{1} << 32}, 0), 33),
                  "tensor 't' has dims [4294967296, 4294967296] (innermost first): the element "
                  "count overflows 2^63 - 1");
  EXPECT_CONTAINS(open_error(one("t", {uint64_t{1} << 62}, 28), 33),
                  "tensor 't' has dims [4611686018427387904]: its byte size as F64 overflows 64 "
                  "bits");
  EXPECT_CONTAINS(open_error(one("t", {4}, 4), 45),
                  "the ggml type of tensor 't' is 4 (Q4_2, removed from ggml), expected a known "
                  "ggml type id");
  EXPECT_CONTAINS(open_error(one("t", {4}, 99), 45), "the ggml type of tensor 't' is 99, expected");
  EXPECT_CONTAINS(open_error(one("t", {33, 2}, 8), 33),
                  "tensor 't' has dims [33, 2] (innermost first): the innermost dim 33 is not a "
                  "multiple of Q8_0's block size 32");
  EXPECT_CONTAINS(open_error(one("t", {}, 12), 33),
                  "the innermost dim 1 is not a multiple of Q4_K's block size 256");
  EXPECT_CONTAINS(open_error(Gguf().header(1, 0).tensor("t", {4, 1}, 0, 0).b.substr(0, 55), 53),
                  "the ggml type of tensor 't' needs 4 bytes, but the file ends at byte 55");
  // Two tensors of one name; the second info starts at 24 + 8 + 1 + 4 + 8 + 4 + 8 = 57.
  EXPECT_CONTAINS(
      open_error(
          Gguf().header(2, 0).tensor("t", {4}, 0, 0).tensor("t", {4}, 0, 32).pad().zeros(64).b, 57),
      "tensor 't' appears twice (first at byte 24); expected unique tensor names");
}

TEST(GgufMalformed, TensorData) {
  // One f32[4] tensor; its offset field is at byte 49, the data section starts at 64.
  auto one = [](uint64_t offset, size_t data, uint64_t dim = 4) {
    return Gguf().header(1, 0).tensor("t", {dim}, 0, offset).pad().zeros(data).b;
  };
  EXPECT_CONTAINS(open_error(one(8, 64), 49),
                  "the data offset of tensor 't' is 8, expected a multiple of the alignment 32");
  EXPECT_CONTAINS(open_error(one(32, 40), 49),
                  "tensor 't' (F32, 16 bytes at data offset 32) runs past the end of the file: the "
                  "data section has 40 bytes (from byte 64)");
  EXPECT_CONTAINS(open_error(one(uint64_t{1} << 63, 40), 49), "runs past the end of the file");
  EXPECT_CONTAINS(open_error(one(0, 8), 49), "(F32, 16 bytes at data offset 0) runs past");
  // The infos end at 57, so data would start at 64: past a file of 60 bytes.
  EXPECT_CONTAINS(open_error(Gguf().header(1, 0).tensor("t", {4}, 0, 0).zeros(3).b, 57),
                  "the tensor infos end here, so the data section starts at byte 64 (padded to "
                  "the alignment 32), past the end of the file (60 bytes); expected the tensor "
                  "data there");
  // Overlap: b (64 bytes at 0) and a (16 bytes at 32); a's offset field is at 49 + 33 = 82.
  Gguf g;
  g.header(2, 0).tensor("b", {16}, 0, 0).tensor("a", {4}, 0, 32).pad().zeros(64);
  EXPECT_CONTAINS(open_error(g.b, 82),
                  "the data of tensor 'a' (bytes [32, 48) of the data section) overlaps tensor 'b' "
                  "(bytes [0, 64)); expected disjoint tensors");
  // Not an error: gaps, trailing bytes, tensors out of order, empty tensors sharing an offset,
  // and a file with no tensors that ends without padding.
  Gguf ok;
  ok.header(4, 0)
      .tensor("late", {4}, 0, 96)
      .tensor("early", {4}, 0, 0)
      .tensor("e1", {0}, 0, 32)
      .tensor("e2", {0, 3}, 0, 32)
      .pad()
      .zeros(200);
  const GgufFile f = GgufFile::from_bytes(ok.b);
  EXPECT_EQ(f.tensors()[0].name, "late");
  EXPECT_EQ(f.tensor("e2").shape().dims(), (std::vector<int64_t>{3, 0}));
  EXPECT_EQ(GgufFile::from_bytes(Gguf().header(0, 1).kv_u32("k", 1).b).data_offset(), 64u);
  // A 0 dim empties a tensor whatever the other dims are (their product need not fit).
  const GgufFile z = GgufFile::from_bytes(
      Gguf().header(1, 0).tensor("z", {uint64_t{1} << 40, 0, uint64_t{1} << 40}, 0, 0).pad().b);
  EXPECT_EQ(z.tensor_info("z").numel(), 0);
  EXPECT_EQ(z.tensor_info("z").nbytes, 0u);
  EXPECT_EQ(z.tensor("z").numel(), 0);
}

TEST(GgufMalformed, EveryTruncationOfAValidFileIsAnError) {
  // Each prefix of a fixture either fails with an rlx::Error or (once all tensor data is there)
  // opens; nothing crashes. Under ASan (scripts/sanitize.sh) any read past the prefix is caught.
  const std::string bytes = read_bytes(kData + "gguf_all_types.gguf");
  const GgufFile full = GgufFile::from_bytes(bytes);
  uint64_t data_end = 0;
  for (const GgufTensorInfo& t : full.tensors())
    data_end = std::max(data_end, full.data_offset() + t.offset + t.nbytes);
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::string msg = error_of([&] { GgufFile::from_bytes(std::string_view(bytes).substr(0, n)); });
    if (n < data_end) {
      EXPECT_EQ(msg.rfind("<memory>: at byte ", 0), 0u) << n << ": " << msg;
    } else {
      EXPECT_EQ(msg, "") << n;
    }
  }
}

}  // namespace
}  // namespace rlx
