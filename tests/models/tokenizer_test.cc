// WordPieceTokenizer: parity with Hugging Face tokenizers (tests/golden/tokenizer_ref.json),
// WordPiece and added-token semantics, batching, invalid UTF-8 and loading errors.
#include "rlx/models/tokenizer.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/scoped_env.h"
#include "common/test_util.h"

namespace rlx {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;
using rlx::testing::error_of;

const json& reference() {
  static const json ref = [] {
    std::ifstream in(std::string(RLX_TEST_DATA_DIR) + "/golden/tokenizer_ref.json");
    return json::parse(in);
  }();
  return ref;
}

// FNV-1a 64, folded over successive byte strings as gen_tokenizer_ref.py does.
uint64_t fnv1a64(std::string_view bytes, uint64_t h = 0xCBF29CE484222325ull) {
  for (unsigned char b : bytes) h = (h ^ b) * 0x100000001B3ull;
  return h;
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string utf8(uint32_t cp) {
  if (cp < 0x80) return {static_cast<char>(cp)};
  if (cp < 0x800) return {static_cast<char>(0xC0 | cp >> 6), static_cast<char>(0x80 | (cp & 0x3F))};
  if (cp < 0x10000) {
    return {static_cast<char>(0xE0 | cp >> 12), static_cast<char>(0x80 | (cp >> 6 & 0x3F)),
            static_cast<char>(0x80 | (cp & 0x3F))};
  }
  return {static_cast<char>(0xF0 | cp >> 18), static_cast<char>(0x80 | (cp >> 12 & 0x3F)),
          static_cast<char>(0x80 | (cp >> 6 & 0x3F)), static_cast<char>(0x80 | (cp & 0x3F))};
}

std::string write_file(const std::string& name, const std::string& text) {
  fs::path dir = rlx::testing::process_temp_dir().path() / "rlx_tokenizer_test";
  fs::create_directories(dir);
  std::string path = (dir / name).string();
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// A minimal BERT tokenizer.json: `vocab` gets ids 0.. in order, [PAD] [UNK] [CLS] [SEP] are
// added tokens, and `normalizer` is the BertNormalizer object.
json tiny_tokenizer_json(const std::vector<std::string>& vocab, const json& normalizer) {
  json v = json::object();
  for (size_t i = 0; i < vocab.size(); ++i) v[vocab[i]] = i;
  json added = json::array();
  for (const char* special : {"[PAD]", "[UNK]", "[CLS]", "[SEP]"}) {
    if (v.contains(special)) {
      added.push_back({{"id", v[special]},
                       {"content", special},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", false},
                       {"special", true}});
    }
  }
  return {{"version", "1.0"},
          {"added_tokens", added},
          {"normalizer", normalizer},
          {"pre_tokenizer", {{"type", "BertPreTokenizer"}}},
          {"post_processor",
           {{"type", "BertProcessing"},
            {"sep", {"[SEP]", v.value("[SEP]", 0)}},
            {"cls", {"[CLS]", v.value("[CLS]", 0)}}}},
          {"model",
           {{"type", "WordPiece"},
            {"unk_token", "[UNK]"},
            {"continuing_subword_prefix", "##"},
            {"max_input_chars_per_word", 100},
            {"vocab", v}}}};
}

const json kBertNormalizer = {{"type", "BertNormalizer"},
                              {"clean_text", true},
                              {"handle_chinese_chars", true},
                              {"strip_accents", nullptr},
                              {"lowercase", true}};

WordPieceTokenizer tiny(const std::vector<std::string>& vocab, const std::string& name = "tiny") {
  return WordPieceTokenizer::from_tokenizer_json(
      write_file(name + ".json", tiny_tokenizer_json(vocab, kBertNormalizer).dump()));
}

const std::vector<std::string> kTinyVocab = {"[PAD]",  "[UNK]", "[CLS]", "[SEP]", "un",  "##aff",
                                             "##able", "aff",   "able",  "a",     "##a", "hello",
                                             ",",      "world", "!",     "##ж",   "ж",   "caf",
                                             "##e",    "cafe",  "##ble", "[",     "]"};

int32_t tiny_id(const std::string& token) {
  auto it = std::find(kTinyVocab.begin(), kTinyVocab.end(), token);
  EXPECT_NE(it, kTinyVocab.end()) << token;
  return static_cast<int32_t>(it - kTinyVocab.begin());
}

// The model directory (tokenizer.json, vocab.txt, tokenizer_config.json) or "" when unset.
std::string model_dir() {
  const char* dir = std::getenv("RLX_MODEL_DIR");
  return dir ? dir : "";
}

#define REQUIRE_MODEL()                                             \
  if (model_dir().empty())                                          \
  GTEST_SKIP() << "RLX_MODEL_DIR is not set (the all-MiniLM-L6-v2 " \
                  "model folder with tokenizer.json)"

// ---- Parity with Hugging Face tokenizers ----------------------------------------------------

// Every corpus string of tokenizer_ref.json: ids with specials, truncated to 128 and 512,
// tokens and normalized text, exactly as HF computes them, from both tokenizer.json and vocab.txt.
TEST(TokenizerParity, CorpusMatchesHuggingFace) {
  REQUIRE_MODEL();
  const json& ref = reference();
  std::string path = model_dir() + "/tokenizer.json";
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(hex64(fnv1a64(bytes)), ref["tokenizer_json_fnv1a64"].get<std::string>())
      << path << " is not the tokenizer.json tokenizer_ref.json was generated from ("
      << ref["model_package"] << ")";

  for (const auto& tok : {WordPieceTokenizer::from_tokenizer_json(path),
                          WordPieceTokenizer::from_vocab_txt(model_dir() + "/vocab.txt")}) {
    size_t exact = 0, n = ref["cases"].size();
    for (const json& c : ref["cases"]) {
      using Ids = std::vector<int32_t>;
      std::string name = c["name"], text = c["text"];
      Ids ids = tok.encode(text), want = c["ids"];
      Encoding e128 = tok.encode_full(text, 128), e512 = tok.encode_full(text, 512);
      Ids want128 = c["ids_128"], want512 = c["ids_512"];
      std::vector<std::string> tokens = tok.tokenize(text), want_tokens = c["tokens"];
      EXPECT_EQ(ids, want) << name;
      EXPECT_EQ(e128.ids, want128) << name;
      EXPECT_EQ(e512.ids, want512) << name;
      EXPECT_EQ(tokens, want_tokens) << name;
      EXPECT_EQ(tok.normalize(text), c["normalized"].get<std::string>()) << name;
      EXPECT_EQ(e128.attention_mask, Ids(e128.ids.size(), 1)) << name;
      EXPECT_EQ(e128.token_type_ids, Ids(e128.ids.size(), 0)) << name;
      exact += ids == want && e128.ids == want128 && e512.ids == want512 && tokens == want_tokens &&
               tok.normalize(text) == c["normalized"];
    }
    std::printf("HF parity: %zu/%zu corpus strings exact\n", exact, n);
    EXPECT_EQ(exact, n);
    EXPECT_GE(n, 80u);
  }
}

// Every Unicode scalar value c: normalize + pre-tokenize "a" c "b", pre-tokenize it raw, and
// normalize c between two marks of classes 216 and 226 (does NFD reorder c, and how), hashed per
// block exactly as gen_tokenizer_ref.py hashed HF's output. Needs no model: the normalizer
// config comes from the reference file and the vocab plays no part.
TEST(TokenizerParity, EveryCodePointMatchesHuggingFace) {
  const json& ref = reference();
  WordPieceTokenizer tok = WordPieceTokenizer::from_tokenizer_json(
      write_file("codepoints.json",
                 tiny_tokenizer_json({"[UNK]", "[CLS]", "[SEP]"}, ref["normalizer"]).dump()));
  const uint32_t block = ref["codepoints"]["block"];
  const json& hashes = ref["codepoints"]["fnv1a64"];
  ASSERT_EQ(hashes.size(), 0x110000u / block);
  auto join = [](const std::vector<std::string>& pieces) {
    std::string s;
    for (size_t i = 0; i < pieces.size(); ++i) s += (i ? "\n" : "") + pieces[i];
    return s;
  };
  std::string bad;
  for (uint32_t b = 0; b < hashes.size(); ++b) {
    uint64_t h = 0xCBF29CE484222325ull;
    for (uint32_t cp = b * block; cp < (b + 1) * block; ++cp) {
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      std::string c = utf8(cp);
      std::string sig = join(tok.pre_tokenize(tok.normalize("a" + c + "b"))) + "\n\n" +
                        join(tok.pre_tokenize("a" + c + "b")) + "\n\n" +
                        tok.normalize("a\U0001D16D" + c + "\U0001D165b") + "\n\n\n";
      h = fnv1a64(sig, h);
    }
    if (hex64(h) != hashes[b].get<std::string>()) {
      char range[32];
      std::snprintf(range, sizeof range, " U+%04X..U+%04X", b * block, (b + 1) * block - 1);
      bad += range;
    }
  }
  EXPECT_EQ(bad, "") << "code point blocks where rlx and HF tokenizers " << ref["tokenizers"]
                     << " differ; compare locally with gen_tokenizer_ref.py --overrides";
}

TEST(TokenizerParity, ModelSpecialIdsAndLimits) {
  REQUIRE_MODEL();
  auto tok = WordPieceTokenizer::from_tokenizer_json(model_dir() + "/tokenizer.json");
  EXPECT_EQ(tok.vocab_size(), 30522);
  EXPECT_EQ(tok.pad_id(), 0);
  EXPECT_EQ(tok.unk_id(), 100);
  EXPECT_EQ(tok.cls_id(), 101);
  EXPECT_EQ(tok.sep_id(), 102);
  EXPECT_EQ(tok.max_length(), 512);  // tokenizer_config.json's model_max_length
  EXPECT_EQ(tok.id_to_token(103), "[MASK]");
  EXPECT_EQ(tok.id_to_token(7592), "hello");
  EXPECT_NE(error_of([&] { tok.id_to_token(30522); }).find("no token has id 30522"),
            std::string::npos);
  EXPECT_NE(error_of([&] { tok.id_to_token(-1); }), "");
}

// The BertNormalizer options (expected strings from HF's BertNormalizer with the same options).
TEST(Normalizer, OptionsMatchHuggingFace) {
  auto with = [](const std::string& name, json options) {
    options["type"] = "BertNormalizer";
    return WordPieceTokenizer::from_tokenizer_json(
        write_file(name + ".json", tiny_tokenizer_json(kTinyVocab, options).dump()));
  };
  const std::string text = "\u0130stanbul Caf\u00e9\t\u4e2d\u6587\x07\u200b";
  // Lowercase without stripping: U+0130 takes its full mapping, i + combining dot above.
  EXPECT_EQ(with("keep_accents", {{"strip_accents", false}}).normalize(text),
            "i\u0307stanbul caf\u00e9  \u4e2d  \u6587 ");
  // strip_accents null follows lowercase.
  EXPECT_EQ(with("cased", {{"lowercase", false}}).normalize(text),
            "\u0130stanbul Caf\u00e9  \u4e2d  \u6587 ");
  EXPECT_EQ(with("strip_only", {{"lowercase", false}, {"strip_accents", true}}).normalize(text),
            "Istanbul Cafe  \u4e2d  \u6587 ");
  EXPECT_EQ(with("raw", {{"clean_text", false},
                         {"handle_chinese_chars", false},
                         {"strip_accents", false},
                         {"lowercase", false}})
                .normalize(text),
            text);
}

// ---- WordPiece and added tokens ----------------------------------------------------------------

TEST(WordPiece, GreedyLongestMatchFirst) {
  auto tok = tiny(kTinyVocab);
  // "unaffable": "un" then the longest "##" piece at each step, not "##a" + ...
  EXPECT_EQ(tok.tokenize("unaffable"), (std::vector<std::string>{"un", "##aff", "##able"}));
  EXPECT_EQ(tok.tokenize("Hello, WORLD!"), (std::vector<std::string>{"hello", ",", "world", "!"}));
  EXPECT_EQ(tok.tokenize("café CAFÉ"), (std::vector<std::string>{"cafe", "cafe"}));
  EXPECT_EQ(tok.tokenize("aaa"), (std::vector<std::string>{"a", "##a", "##a"}));
  // One unmatched position makes the whole word [UNK], not just that piece.
  EXPECT_EQ(tok.tokenize("unafx hello"), (std::vector<std::string>{"[UNK]", "hello"}));
  EXPECT_EQ(tok.encode("hello"),
            (std::vector<int32_t>{tiny_id("[CLS]"), tiny_id("hello"), tiny_id("[SEP]")}));
  EXPECT_EQ(tok.encode("hello", false), (std::vector<int32_t>{tiny_id("hello")}));
  EXPECT_EQ(tok.encode(""), (std::vector<int32_t>{tiny_id("[CLS]"), tiny_id("[SEP]")}));
}

TEST(WordPiece, WordsOverHundredCharactersAreUnknown) {
  auto tok = tiny(kTinyVocab);
  EXPECT_EQ(tok.tokenize(std::string(100, 'a')).size(), 100u);
  EXPECT_EQ(tok.tokenize(std::string(101, 'a')), (std::vector<std::string>{"[UNK]"}));
  // The limit counts characters, not bytes: 100 two-byte letters still tokenize.
  std::string zhe;
  for (int i = 0; i < 100; ++i) zhe += "ж";
  EXPECT_EQ(tok.tokenize(zhe).size(), 100u);
  EXPECT_EQ(tok.tokenize(zhe + "ж"), (std::vector<std::string>{"[UNK]"}));
}

TEST(WordPiece, AddedTokensMatchRawTextCaseSensitively) {
  auto tok = tiny(kTinyVocab);
  EXPECT_EQ(tok.tokenize("[CLS]hello[SEP]"), (std::vector<std::string>{"[CLS]", "hello", "[SEP]"}));
  // Lowercased forms are not the added tokens: they go through normalization as text.
  EXPECT_EQ(tok.tokenize("[cls]"), (std::vector<std::string>{"[", "[UNK]", "]"}));
  EXPECT_EQ(tok.tokenize("[[SEP]]"), (std::vector<std::string>{"[", "[SEP]", "]"}));
}

TEST(WordPiece, LongestAddedTokenWinsAtTheLeftmostPosition) {
  json j = tiny_tokenizer_json(kTinyVocab, kBertNormalizer);
  const int32_t n = static_cast<int32_t>(kTinyVocab.size());  // ids HF gives new tokens
  j["added_tokens"].push_back({{"id", n}, {"content", "<x>"}});
  j["added_tokens"].push_back({{"id", n + 1}, {"content", "<x><y>"}});
  j["added_tokens"].push_back({{"id", n + 2}, {"content", "y><z"}});
  // An added token that is in the vocab keeps the vocab's id, whatever the entry says.
  j["added_tokens"].push_back({{"id", 7}, {"content", "hello"}});
  auto tok = WordPieceTokenizer::from_tokenizer_json(write_file("added.json", j.dump()));
  EXPECT_EQ(tok.vocab_size(), n + 3);
  // "<x><y>" at 0 beats both "<x>" at 0 and "y><z" at 4; the rest, "<z>", is plain text.
  EXPECT_EQ(tok.encode("<x><y><z>", false), (std::vector<int32_t>{n + 1, 1, 1, 1}));
  EXPECT_EQ(tok.encode("HELLOhello", false),
            (std::vector<int32_t>{tiny_id("hello"), tiny_id("hello")}));
  EXPECT_EQ(tok.tokenize("a<x>a"), (std::vector<std::string>{"a", "<x>", "a"}));
}

// ---- Batches ----------------------------------------------------------------------------------

TEST(EncodeBatch, PadsToLongestWithMaskAndLengths) {
  auto tok = tiny(kTinyVocab);
  BatchEncoding b = tok.encode_batch({"hello", "hello, world!", ""}, 16);
  const int32_t C = tiny_id("[CLS]"), S = tiny_id("[SEP]"), P = tok.pad_id();
  const int32_t H = tiny_id("hello"), W = tiny_id("world");
  EXPECT_EQ(b.batch, 3);
  EXPECT_EQ(b.seq, 6);
  EXPECT_EQ(b.lengths, (std::vector<int64_t>{3, 6, 2}));
  EXPECT_EQ(b.ids, (std::vector<int32_t>{C, H, S, P, P, P,                        //
                                         C, H, tiny_id(","), W, tiny_id("!"), S,  //
                                         C, S, P, P, P, P}));
  EXPECT_EQ(b.attention_mask, (std::vector<int32_t>{1, 1, 1, 0, 0, 0,  //
                                                    1, 1, 1, 1, 1, 1,  //
                                                    1, 1, 0, 0, 0, 0}));
  EXPECT_EQ(b.token_type_ids, std::vector<int32_t>(18, 0));
  EXPECT_EQ(P, tiny_id("[PAD]"));
}

TEST(EncodeBatch, PadToMultipleIsCappedAtMaxLength) {
  auto tok = tiny(kTinyVocab);
  EXPECT_EQ(tok.encode_batch({"hello"}, 16, 8).seq, 8);  // 3 rounded up to 8
  EXPECT_EQ(tok.encode_batch({"a a a a a a a a a"}, 16, 8).seq, 16);
  EXPECT_EQ(tok.encode_batch({"a a a a a a a a a"}, 10, 8).seq, 10);  // 16 capped at 10
  BatchEncoding empty = tok.encode_batch({}, 16, 8);
  EXPECT_EQ(empty.batch, 0);
  EXPECT_EQ(empty.seq, 0);
  EXPECT_TRUE(empty.ids.empty());
}

TEST(EncodeBatch, TruncationKeepsClsAndSep) {
  auto tok = tiny(kTinyVocab);
  const int32_t C = tiny_id("[CLS]"), S = tiny_id("[SEP]"), A = tiny_id("a");
  BatchEncoding b = tok.encode_batch({"a a a a a a", "a"}, 4);
  EXPECT_EQ(b.seq, 4);
  EXPECT_EQ(b.lengths, (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(b.ids, (std::vector<int32_t>{C, A, A, S, C, A, S, tok.pad_id()}));
  EXPECT_EQ(tok.encode_full("a a a", 2).ids, (std::vector<int32_t>{C, S}));
  Encoding e = tok.encode_full("a a a", 100);
  EXPECT_EQ(e.ids, tok.encode("a a a"));
  EXPECT_EQ(e.attention_mask, std::vector<int32_t>(5, 1));
}

TEST(EncodeBatch, RejectsBadSizes) {
  auto tok = tiny(kTinyVocab);
  EXPECT_NE(error_of([&] { tok.encode_batch({"a"}, 1); }).find("max_length 1"), std::string::npos);
  EXPECT_NE(error_of([&] { tok.encode_full("a", 0); }).find("max_length 0"), std::string::npos);
  EXPECT_NE(error_of([&] { tok.encode_batch({"a"}, 8, 0); }).find("pad_to_multiple_of 0"),
            std::string::npos);
}

// ---- Invalid UTF-8: rejected with the byte offset ------------------------------------------

TEST(InvalidUtf8, ThrowsWithByteOffset) {
  auto tok = tiny(kTinyVocab);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"ab\x80", "byte offset 2 (byte 0x80)"},            // stray continuation byte
      {"\xFFhello", "byte offset 0 (byte 0xFF)"},         // never valid
      {"a\xC0\x80", "byte offset 1 (byte 0xC0)"},         // overlong NUL
      {"a\xE0\x80\xAF", "byte offset 1 (byte 0xE0)"},     // overlong '/'
      {"ab\xED\xA0\x80", "byte offset 2 (byte 0xED)"},    // UTF-16 surrogate
      {"\xF4\x90\x80\x80", "byte offset 0 (byte 0xF4)"},  // past U+10FFFF
      {"hello \xE2\x82", "byte offset 6 (byte 0xE2)"},    // truncated at the end
      {"caf\xE9", "byte offset 3 (byte 0xE9)"},           // Latin-1, not UTF-8
  };
  for (const auto& [text, where] : cases) {
    // Lambdas capture the binding through an init-capture (clang 14 cannot capture a binding).
    EXPECT_NE(error_of([&, &t = text] { tok.encode(t); }).find(where), std::string::npos) << where;
    EXPECT_NE(error_of([&, &t = text] { tok.tokenize(t); }).find(where), std::string::npos)
        << where;
  }
  // Offsets count from the start of the text, also after an added token.
  EXPECT_NE(error_of([&] { tok.encode("[CLS]ab\xFF"); }).find("byte offset 7"), std::string::npos);
  EXPECT_NE(error_of([&] {
              tok.encode_batch({"ok", "\xFF"}, 8);
            }).find("text 1: "),
            std::string::npos);
  // The extremes of valid UTF-8 are accepted.
  EXPECT_EQ(tok.tokenize("\xF4\x8F\xBF\xBF \xEF\xBF\xBF \x7F"),
            (std::vector<std::string>{"[UNK]", "[UNK]"}));
}

// ---- Loading ------------------------------------------------------------------------------------

TEST(TokenizerLoading, ErrorsNameTheFileAndTheProblem) {
  auto load_error = [](const std::string& name, const std::string& text) {
    std::string path = write_file(name, text);
    std::string e = error_of([&] { WordPieceTokenizer::from_tokenizer_json(path); });
    EXPECT_NE(e.find(path), std::string::npos) << e;
    return e;
  };
  std::string missing = (fs::path(::testing::TempDir()) / "no_such_tokenizer.json").string();
  EXPECT_NE(error_of([&] {
              WordPieceTokenizer::from_tokenizer_json(missing);
            }).find("cannot open '" + missing + "': No such file or directory"),
            std::string::npos);
  EXPECT_NE(load_error("not_json.json", "{\"model\": ").find("malformed JSON at byte"),
            std::string::npos);

  json bpe = tiny_tokenizer_json(kTinyVocab, kBertNormalizer);
  bpe["model"]["type"] = "BPE";
  EXPECT_NE(load_error("bpe.json", bpe.dump()).find("model type 'BPE' is not supported"),
            std::string::npos);

  json nfc = tiny_tokenizer_json(kTinyVocab, {{"type", "NFC"}});
  EXPECT_NE(load_error("nfc.json", nfc.dump()).find("normalizer 'NFC' is not supported"),
            std::string::npos);

  json no_unk = tiny_tokenizer_json({"[CLS]", "[SEP]", "a"}, kBertNormalizer);
  EXPECT_NE(load_error("no_unk.json", no_unk.dump()).find("unk token '[UNK]' is not in the vocab"),
            std::string::npos);

  json lstrip = tiny_tokenizer_json(kTinyVocab, kBertNormalizer);
  lstrip["added_tokens"][0]["lstrip"] = true;
  EXPECT_NE(load_error("lstrip.json", lstrip.dump()).find("sets lstrip"), std::string::npos);

  json bad_id = tiny_tokenizer_json(kTinyVocab, kBertNormalizer);
  bad_id["model"]["vocab"]["a"] = "nine";
  EXPECT_NE(load_error("bad_id.json", bad_id.dump())
                .find("bad_id.json: vocab id of 'a' must be an integer in ["),
            std::string::npos);
  // A float id (was a float-to-int conversion with undefined behaviour) and a pad id that
  // does not fit in int32 (was wrapped silently): fuzz/regressions/model_config/.
  bad_id["model"]["vocab"]["a"] = 1.5e93;
  EXPECT_NE(load_error("float_id.json", bad_id.dump()).find("vocab id of 'a' must be an integer"),
            std::string::npos);
  json bad_pad = tiny_tokenizer_json(kTinyVocab, kBertNormalizer);
  bad_pad["padding"] = {{"pad_id", int64_t{1} << 32}};
  EXPECT_NE(load_error("bad_pad.json", bad_pad.dump())
                .find("padding.pad_id must be an integer in [-2147483648, 2147483647], found "
                      "4294967296"),
            std::string::npos);
  // max_length() would be 1, which encode_full rejects: the load fails instead.
  json short_trunc = tiny_tokenizer_json(kTinyVocab, kBertNormalizer);
  short_trunc["truncation"] = {{"max_length", 1}};
  EXPECT_NE(load_error("trunc.json", short_trunc.dump())
                .find("truncation.max_length must be an integer in [2, "),
            std::string::npos);
}

TEST(TokenizerLoading, VocabTxt) {
  std::string path = write_file("vocab.txt", "[PAD]\n[UNK]\r\n[CLS]\n[SEP]\nhello \nworld\n##s");
  auto tok = WordPieceTokenizer::from_vocab_txt(path);
  EXPECT_EQ(tok.vocab_size(), 7);
  EXPECT_EQ(tok.max_length(), 512);
  EXPECT_EQ(tok.encode("Hello worlds"), (std::vector<int32_t>{2, 4, 5, 6, 3}));
  EXPECT_EQ(tok.id_to_token(1), "[UNK]");  // trailing "\r" trimmed
  auto cased = WordPieceTokenizer::from_vocab_txt(path, false);
  EXPECT_EQ(cased.tokenize("Hello hello"), (std::vector<std::string>{"[UNK]", "hello"}));

  std::string no_unk = write_file("no_unk_vocab.txt", "[CLS]\n[SEP]\nhello\n");
  EXPECT_NE(error_of([&] {
              WordPieceTokenizer::from_vocab_txt(no_unk);
            }).find(no_unk + ": unk token '[UNK]' is not in the vocab"),
            std::string::npos);
}

TEST(TokenizerLoading, MaxLengthFromTokenizerConfig) {
  fs::path dir = rlx::testing::process_temp_dir().path() / "rlx_tokenizer_config_test";
  fs::create_directories(dir);
  json j = tiny_tokenizer_json(kTinyVocab, kBertNormalizer);
  j["truncation"] = {{"max_length", 128}};
  std::ofstream(dir / "tokenizer.json") << j.dump();
  std::string path = (dir / "tokenizer.json").string();
  fs::remove(dir / "tokenizer_config.json");
  EXPECT_EQ(WordPieceTokenizer::from_tokenizer_json(path).max_length(), 128);
  std::ofstream(dir / "tokenizer_config.json") << R"({"model_max_length": 256})";
  EXPECT_EQ(WordPieceTokenizer::from_tokenizer_json(path).max_length(), 256);
  // transformers' "no limit" sentinel falls back to the truncation setting.
  std::ofstream(dir / "tokenizer_config.json") << R"({"model_max_length": 1e30})";
  EXPECT_EQ(WordPieceTokenizer::from_tokenizer_json(path).max_length(), 128);
}

}  // namespace
}  // namespace rlx
