// BpeTokenizer on SmolLM2's GGUF vocabulary: ids equal to Hugging Face tokenizers
// (tests/golden/bpe_ref.json, gen_bpe_ref.py), byte-exact round trips, streaming decode, and
// errors on malformed tokenizer metadata (tiny GGUF files written here).
#include "rlx/models/bpe_tokenizer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "common/tiny_llama.h"
#include "rlx/io/gguf.h"
#include "rlx/models/tokenizer.h"

namespace rlx {
namespace {

using json = nlohmann::json;
using rlx::testing::error_of;
using rlx::testing::set_key;
using rlx::testing::text_from_hex;

const BpeTokenizer& smollm2() {
  static const BpeTokenizer t = BpeTokenizer::from_gguf_file(default_llm_gguf_path());
  return t;
}

TEST(BpeTokenizer, SmolLm2Metadata) {
  const BpeTokenizer& t = smollm2();
  EXPECT_EQ(t.vocab_size(), 49152);
  EXPECT_EQ(t.pre_tokenizer(), BpePreTokenizer::kSmolLm);
  EXPECT_EQ(t.bos_id(), 1);
  EXPECT_EQ(t.eos_id(), 2);
  EXPECT_FALSE(t.add_bos());
  EXPECT_EQ(t.token_bytes(2), "<|im_end|>");
  EXPECT_EQ(t.token_type(2), BpeTokenizer::kControl);
  EXPECT_EQ(t.token_id("<|im_start|>"), 1);
}

TEST(BpeTokenizer, IdsEqualHuggingFaceTokenizers) {
  std::ifstream in(std::string(RLX_TEST_DATA_DIR) + "/golden/bpe_ref.json");
  json ref = json::parse(in);
  ASSERT_GT(ref.at("cases").size(), 50u);
  const BpeTokenizer& t = smollm2();
  for (const json& c : ref.at("cases")) {
    std::string text = text_from_hex(c.at("text_hex").get<std::string>());
    SCOPED_TRACE("text: " + text);
    auto special = c.at("special").get<std::vector<int32_t>>();
    auto plain = c.at("plain").get<std::vector<int32_t>>();
    EXPECT_EQ(t.encode(text, true, true), special);
    EXPECT_EQ(t.encode(text, true, false), plain);
    EXPECT_EQ(t.decode(special), text);
    EXPECT_EQ(t.decode(plain), text);
  }
}

// SmolLM2's vocabulary with another tokenizer.ggml.pre against HF on the same vocabulary with
// that model's pre-tokenizer (the "gpt2", "llama3" and "qwen2" ids of bpe_ref.json).
TEST(BpeTokenizer, OtherPreTokenizersIdsEqualHuggingFace) {
  const GgufMetadata smollm = GgufFile::open(default_llm_gguf_path()).metadata();
  std::ifstream in(std::string(RLX_TEST_DATA_DIR) + "/golden/bpe_ref.json");
  json ref = json::parse(in);
  struct Case {
    const char *pre, *column;
    BpePreTokenizer kind;
  };
  for (Case pc : {Case{"gpt2", "gpt2", BpePreTokenizer::kGpt2},
                  Case{"llama-bpe", "llama3", BpePreTokenizer::kLlama3},
                  Case{"qwen2", "qwen2", BpePreTokenizer::kQwen2}}) {
    SCOPED_TRACE(pc.pre);
    GgufMetadata md = smollm;
    for (auto& [key, value] : md)
      if (key == "tokenizer.ggml.pre") value = std::string(pc.pre);
    BpeTokenizer t = BpeTokenizer::from_gguf(GgufFile::from_bytes(gguf_file_bytes(md, {})));
    EXPECT_EQ(t.pre_tokenizer(), pc.kind);
    for (const json& c : ref.at("cases")) {
      std::string text = text_from_hex(c.at("text_hex").get<std::string>());
      SCOPED_TRACE("text: " + text);
      EXPECT_EQ(t.encode(text, true, false), c.at(pc.column).get<std::vector<int32_t>>());
    }
  }
}

TEST(BpeTokenizer, Llama3SplitsDigitsByThree) {
  GgufMetadata md = GgufFile::open(default_llm_gguf_path()).metadata();
  for (auto& [key, value] : md)
    if (key == "tokenizer.ggml.pre") value = std::string("llama3");
  BpeTokenizer t = BpeTokenizer::from_gguf(GgufFile::from_bytes(gguf_file_bytes(md, {})));
  std::vector<std::string_view> want = {"123", "456", "7", " x", "'S", "\n\n", " ", " y", "!\n"};
  EXPECT_EQ(t.pre_tokenize("1234567 x'S\n\n  y!\n"), want);
}

TEST(BpeTokenizer, PreTokenizerSplitsDigitsAndSpaces) {
  std::vector<std::string_view> want = {"a", " ", "1", "2", " bc", "  ", " d", "'s", "\n", "x"};
  EXPECT_EQ(smollm2().pre_tokenize("a 12 bc   d's\nx"), want);
}

TEST(BpeTokenizer, InvalidUtf8RoundTripsBytes) {
  std::string text = "ok \xe2\x82 \x80\x80 end \xc3";
  auto ids = smollm2().encode(text);
  EXPECT_EQ(smollm2().decode(ids), text);
  // 0xFF never occurs in UTF-8 and SmolLM2's vocabulary has no token for it.
  EXPECT_NE(error_of([] {
              smollm2().encode("a\xff");
            }).find("byte 255 has no single-byte token in tokenizer.ggml.tokens"),
            std::string::npos);
}

TEST(BpeTokenizer, StreamEmitsWholeCharacters) {
  const BpeTokenizer& t = smollm2();
  std::string text = "日本 😀 \xe2\x82 x";  // a truncated € in the middle
  std::vector<int32_t> ids;
  for (unsigned char b : text) ids.push_back(t.encode(std::string(1, static_cast<char>(b)))[0]);
  BpeTokenizer::StreamDecoder stream(t);
  std::string all;
  for (int32_t id : ids) {
    std::string piece = stream.push(id);
    EXPECT_FALSE(find_invalid_utf8(piece).has_value());
    all += piece;
  }
  EXPECT_EQ(stream.push(ids[0]), "");  // the first byte of 日 is held back
  all += stream.finish();
  EXPECT_EQ(all, replace_invalid_utf8(text) + "\xEF\xBF\xBD");
  EXPECT_EQ(stream.finish(), "");
}

// A tiny GGUF with tokenizer metadata; `edit` changes it before writing.
BpeTokenizer tiny(void (*edit)(GgufMetadata&)) {
  std::vector<std::string> tokens = rlx::testing::gpt2_byte_tokens();
  tokens.push_back("ab");
  tokens.push_back("<ctl>");
  std::vector<int32_t> types(tokens.size(), 1);
  types.back() = 3;
  GgufMetadata md = {
      {"tokenizer.ggml.model", std::string("gpt2")},
      {"tokenizer.ggml.pre", std::string("gpt2")},
      {"tokenizer.ggml.tokens", GgufArray(tokens)},
      {"tokenizer.ggml.token_type", GgufArray(types)},
      {"tokenizer.ggml.merges", GgufArray(std::vector<std::string>{"a b"})},
      {"tokenizer.ggml.eos_token_id", uint32_t{257}},
  };
  edit(md);
  return BpeTokenizer::from_gguf(GgufFile::from_bytes(gguf_file_bytes(md, {}), "tiny.gguf"));
}

TEST(BpeTokenizer, TinyVocabulary) {
  BpeTokenizer t = tiny([](GgufMetadata&) {});
  EXPECT_EQ(t.encode("abc"), (std::vector<int32_t>{256, 'c'}));
  EXPECT_EQ(t.encode("x<ctl>", true, true), (std::vector<int32_t>{'x', 257}));
  EXPECT_EQ(t.encode("x<ctl>", true, false).size(), 6u);
}

TEST(BpeTokenizer, MalformedMetadataErrors) {
  EXPECT_NE(
      error_of([] {
        tiny([](GgufMetadata& md) { set_key(md, "tokenizer.ggml.model", std::string("bert")); });
      }).find("tokenizer.ggml.model: tokenizer model 'bert' is not supported"),
      std::string::npos);
  EXPECT_NE(
      error_of([] {
        tiny([](GgufMetadata& md) { set_key(md, "tokenizer.ggml.pre", std::string("qwen9")); });
      }).find("tokenizer.ggml.pre: pre-tokenizer 'qwen9'"),
      std::string::npos);
  EXPECT_NE(
      error_of([] {
        tiny([](GgufMetadata& md) {
          set_key(md, "tokenizer.ggml.merges", GgufArray(std::vector<std::string>{"a b", "a zz"}));
        });
      }).find("tokenizer.ggml.merges: index 1 ('a zz'): 'zz' is not a token"),
      std::string::npos);
  EXPECT_NE(error_of([] {
              tiny([](GgufMetadata& md) {
                set_key(md, "tokenizer.ggml.merges", GgufArray(std::vector<std::string>{"ab"}));
              });
            }).find("tokenizer.ggml.merges: index 0 ('ab'): no space"),
            std::string::npos);
  EXPECT_NE(
      error_of([] {
        tiny([](GgufMetadata& md) { set_key(md, "tokenizer.ggml.eos_token_id", uint32_t{9999}); });
      }).find("tokenizer.ggml.eos_token_id: token id 9999 is out of range"),
      std::string::npos);
  EXPECT_NE(
      error_of([] {
        tiny([](GgufMetadata& md) { set_key(md, "tokenizer.ggml.eos_token_id", int32_t{2}); });
      }).find("tokenizer.ggml.eos_token_id"),
      std::string::npos);
  EXPECT_NE(error_of([] {
              tiny([](GgufMetadata& md) {
                set_key(md, "tokenizer.ggml.token_type", GgufArray(std::vector<int32_t>{1, 1}));
              });
            }).find("tokenizer.ggml.token_type: 2 types for 258 tokens"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              tiny([](GgufMetadata& md) {
                std::vector<int32_t> types(258, 1);
                types[7] = 9;
                set_key(md, "tokenizer.ggml.token_type", GgufArray(types));
              });
            }).find("tokenizer.ggml.token_type: index 7: unknown token type 9"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              tiny([](GgufMetadata& md) {
                set_key(md, "tokenizer.ggml.tokens", GgufArray(std::vector<int32_t>{1}));
              });
            }).find("tokenizer.ggml.tokens"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              smollm2().decode(std::vector<int32_t>{49152});
            }).find("token id 49152 is out of range"),
            std::string::npos);
}

}  // namespace
}  // namespace rlx
