// The committed ggml-format reference data (tests/ir/quant_ref.json, written by
// tests/ir/gen_quant_ref.py from gguf-py's numpy dequantizers and quantizers) and the helpers
// that decode it, shared by the format, op and CPU-kernel tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace rlx::testing {

/// The bytes of a lowercase hex string ("0aff" -> {0x0a, 0xff}).
inline std::vector<uint8_t> from_hex(const std::string& s) {
  std::vector<uint8_t> out(s.size() / 2);
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<uint8_t>(std::stoi(s.substr(2 * i, 2), nullptr, 16));
  return out;
}

/// The little-endian f32 values of a hex string (how the generator stores exact floats).
inline std::vector<float> floats_from_hex(const std::string& s) {
  std::vector<uint8_t> b = from_hex(s);
  std::vector<float> f(b.size() / 4);
  std::memcpy(f.data(), b.data(), f.size() * 4);
  return f;
}

/// The IEEE bits of `v`, to compare floats bit for bit (NaN payloads and -0 included).
inline uint32_t bits_of(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}

/// tests/ir/quant_ref.json, parsed once.
inline const nlohmann::json& quant_ref() {
  static const nlohmann::json j = [] {
    std::ifstream in(std::string(RLX_TEST_DATA_DIR) + "/ir/quant_ref.json");
    EXPECT_TRUE(in.good()) << "missing tests/ir/quant_ref.json";
    return nlohmann::json::parse(in);
  }();
  return j;
}

}  // namespace rlx::testing
