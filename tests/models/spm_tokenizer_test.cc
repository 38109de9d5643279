// BpeTokenizer's SentencePiece mode (tokenizer.ggml.model "llama") on a tiny SentencePiece BPE
// vocabulary trained by tests/golden/gen_spm_ref.py: ids equal to the `sentencepiece` package's
// (spm_ref.json), the space prefix, byte fallback and streaming decode, and metadata errors.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "common/tiny_llama.h"
#include "rlx/io/gguf.h"
#include "rlx/models/bpe_tokenizer.h"
#include "rlx/models/llama.h"
#include "rlx/models/tokenizer.h"

namespace rlx {
namespace {

using json = nlohmann::json;
using rlx::testing::error_of;
using rlx::testing::set_key;
using rlx::testing::text_from_hex;

const json& ref() {
  static const json r = [] {
    std::ifstream in(std::string(RLX_TEST_DATA_DIR) + "/golden/spm_ref.json");
    return json::parse(in);
  }();
  return r;
}

// What SentencePiece decodes `text` to: a literal U+2581 is its space marker, so it comes back
// as ' ' (sentencepiece and llama.cpp alike); every other byte comes back as it was.
std::string spaces_unescaped(std::string text) {
  for (size_t k; (k = text.find("\xE2\x96\x81")) != std::string::npos;) text.replace(k, 3, " ");
  return text;
}

// The reference vocabulary as GGUF metadata (no add_bos_token / add_space_prefix keys: the
// SentencePiece defaults apply).
GgufMetadata spm_metadata() {
  const json& r = ref();
  return {
      {"tokenizer.ggml.model", std::string("llama")},
      {"tokenizer.ggml.tokens", GgufArray(r.at("tokens").get<std::vector<std::string>>())},
      {"tokenizer.ggml.scores", GgufArray(r.at("scores").get<std::vector<float>>())},
      {"tokenizer.ggml.token_type", GgufArray(r.at("token_type").get<std::vector<int32_t>>())},
      {"tokenizer.ggml.bos_token_id", r.at("bos_token_id").get<uint32_t>()},
      {"tokenizer.ggml.eos_token_id", r.at("eos_token_id").get<uint32_t>()},
      {"tokenizer.ggml.unknown_token_id", r.at("unknown_token_id").get<uint32_t>()},
  };
}

BpeTokenizer load(const GgufMetadata& md) {
  return BpeTokenizer::from_gguf(GgufFile::from_bytes(gguf_file_bytes(md, {}), "spm.gguf"));
}

const BpeTokenizer& spm() {
  static const BpeTokenizer t = load(spm_metadata());
  return t;
}

TEST(SpmTokenizer, Metadata) {
  const BpeTokenizer& t = spm();
  EXPECT_EQ(t.model(), TokenizerModel::kLlama);
  EXPECT_EQ(t.vocab_size(), 420);
  EXPECT_TRUE(t.add_space_prefix());
  EXPECT_TRUE(t.add_bos());  // llama.cpp's default for SentencePiece
  EXPECT_FALSE(t.add_eos());
  EXPECT_EQ(t.bos_id(), 1);
  EXPECT_EQ(t.eos_id(), 2);
  EXPECT_EQ(t.unknown_id(), 0);
  EXPECT_EQ(t.token_type(1), BpeTokenizer::kControl);
  EXPECT_EQ(t.token_type(3 + 0x41), BpeTokenizer::kByte);
  EXPECT_EQ(t.token_bytes(3 + 0x41), "A");  // <0x41>
  EXPECT_EQ(t.token_bytes(1), "<s>");
  int32_t the = t.token_id("\xE2\x96\x81the");  // "▁the"
  ASSERT_GE(the, 0);
  EXPECT_EQ(t.token_bytes(the), " the");
  EXPECT_EQ(t.score(the), ref().at("scores")[static_cast<size_t>(the)].get<float>());
  EXPECT_LT(t.score(the), 0.0f);
}

TEST(SpmTokenizer, IdsEqualSentencePiece) {
  const BpeTokenizer& t = spm();
  ASSERT_GE(ref().at("cases").size(), 30u);
  for (const json& c : ref().at("cases")) {
    std::string text = text_from_hex(c.at("text_hex").get<std::string>());
    SCOPED_TRACE("text: " + text);
    auto plain = c.at("plain").get<std::vector<int32_t>>();
    auto special = c.at("special").get<std::vector<int32_t>>();
    EXPECT_EQ(t.encode(text, false, false), plain);
    EXPECT_EQ(t.encode(text, false, true), special);
    std::vector<int32_t> with_bos = {t.bos_id()};
    with_bos.insert(with_bos.end(), plain.begin(), plain.end());
    EXPECT_EQ(t.encode(text, true, false), with_bos);
    // Byte-exact: the tokens' bytes are the text behind the space prefix.
    EXPECT_EQ(t.decode(plain), spaces_unescaped(text.empty() ? "" : " " + text));
  }
}

// The cases exercise byte fallback (characters the training text lacks) and merges of spaces.
TEST(SpmTokenizer, CorpusCoversByteFallbackAndSpaceRuns) {
  const BpeTokenizer& t = spm();
  size_t byte_tokens = 0, space_tokens = 0;
  for (const json& c : ref().at("cases"))
    for (int32_t id : c.at("plain").get<std::vector<int32_t>>()) {
      byte_tokens += t.token_type(id) == BpeTokenizer::kByte;
      space_tokens += t.token_bytes(id) == "  ";
    }
  EXPECT_GT(byte_tokens, 100u);
  EXPECT_GT(space_tokens, 10u);
}

// Without the prefix, a text with a leading space encodes as the reference did with it.
TEST(SpmTokenizer, NoSpacePrefix) {
  GgufMetadata md = spm_metadata();
  set_key(md, "tokenizer.ggml.add_space_prefix", false);
  set_key(md, "tokenizer.ggml.add_bos_token", false);
  BpeTokenizer t = load(md);
  EXPECT_FALSE(t.add_space_prefix());
  for (const json& c : ref().at("cases")) {
    std::string text = text_from_hex(c.at("text_hex").get<std::string>());
    if (text.empty()) continue;
    SCOPED_TRACE("text: " + text);
    auto plain = c.at("plain").get<std::vector<int32_t>>();
    EXPECT_EQ(t.encode(" " + text), plain);
    EXPECT_EQ(t.decode(t.encode(text)), spaces_unescaped(text));
  }
}

TEST(SpmTokenizer, StreamEmitsWholeCharacters) {
  const BpeTokenizer& t = spm();
  std::string text = "日本 😀 x";  // byte fallback for every CJK and emoji byte
  std::vector<int32_t> ids = t.encode(text, false);
  ASSERT_EQ(t.token_type(ids[1]), BpeTokenizer::kByte);  // after "▁"
  BpeTokenizer::StreamDecoder stream(t);
  std::string all;
  EXPECT_EQ(stream.push(ids[0]), " ");
  EXPECT_EQ(stream.push(ids[1]), "");  // the first of 日's three bytes is held back
  EXPECT_EQ(stream.push(ids[2]), "");
  EXPECT_EQ(stream.push(ids[3]), "日");
  all = " 日";
  for (size_t i = 4; i < ids.size(); ++i) {
    std::string piece = stream.push(ids[i]);
    EXPECT_FALSE(find_invalid_utf8(piece).has_value());
    all += piece;
  }
  all += stream.finish();
  EXPECT_EQ(all, " " + text);
}

// A tiny random Llama file with the SentencePiece vocabulary: the model loads it as its
// tokenizer, a text prompt gets BOS and the space prefix, and generate() streams exactly the
// text of the tokens it returns (byte tokens included).
TEST(SpmTokenizer, LlamaModelGeneratesWithIt) {
  rlx::testing::TinyFile f = rlx::testing::tiny_file(420, 64);
  for (auto& kv : spm_metadata()) f.metadata.push_back(kv);
  models::LlamaModel m = models::LlamaModel::load(rlx::testing::write(f, "spm_llama.gguf"));
  ASSERT_EQ(m.tokenizer().model(), TokenizerModel::kLlama);
  models::GenerateOptions o;
  o.max_tokens = 24;
  o.stop_at_eos = false;
  std::string streamed;
  o.on_text = [&](std::string_view piece) { streamed += piece; };
  models::GenerateResult r = m.generate("Hello world", o);
  EXPECT_EQ(r.stats.prompt_tokens, 5);  // <s> ▁H ell o ▁world
  EXPECT_EQ(m.tokenizer().encode("Hello world"),
            (std::vector<int32_t>{1, 336, 306, 282, 297}));  // spm_ref.json's ids with BOS
  ASSERT_EQ(r.ids.size(), 24u);
  EXPECT_EQ(r.text, replace_invalid_utf8(m.tokenizer().decode(r.ids)));
  EXPECT_EQ(streamed, r.text);
}

TEST(SpmTokenizer, MalformedMetadataErrors) {
  EXPECT_NE(error_of([] {
              GgufMetadata md = spm_metadata();
              set_key(md, "tokenizer.ggml.scores", GgufArray(std::vector<float>{0.0f, 1.0f}));
              load(md);
            }).find("spm.gguf: tokenizer.ggml.scores: 2 scores for 420 tokens"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              GgufMetadata md = spm_metadata();
              auto tokens = ref().at("tokens").get<std::vector<std::string>>();
              tokens[3 + 0x41] = "<0xZ1>";
              set_key(md, "tokenizer.ggml.tokens", GgufArray(tokens));
              load(md);
            }).find("tokenizer.ggml.tokens: index 68: byte token '<0xZ1>' is not <0xNN>"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              GgufMetadata md = spm_metadata();
              set_key(md, "tokenizer.ggml.scores", GgufArray(std::vector<int32_t>(420, 0)));
              load(md);
            }).find("tokenizer.ggml.scores"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              GgufMetadata md = spm_metadata();
              set_key(md, "tokenizer.ggml.model", std::string("bert"));
              load(md);
            }).find("tokenizer model 'bert' is not supported"),
            std::string::npos);
  // A vocabulary without byte tokens cannot encode a character it lacks.
  EXPECT_NE(error_of([] {
              GgufMetadata md = spm_metadata();
              std::vector<int32_t> types(420, 1);
              set_key(md, "tokenizer.ggml.token_type", GgufArray(types));
              load(md).encode("\xE6\x97\xA5");
            }).find("spm.gguf: byte 230 has no byte token (<0xNN>) or single-byte token"),
            std::string::npos);
}

}  // namespace
}  // namespace rlx
