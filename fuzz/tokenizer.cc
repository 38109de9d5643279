// Fuzz target: arbitrary bytes as input to the BERT WordPiece tokenizer (encode, encode_full,
// encode_batch, normalize, pre_tokenize) in three normalizer configurations.
#include "rlx/models/tokenizer.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_targets.h"
#include "rlx/ir/error.h"

#ifndef RLX_FUZZ_DATA_DIR
#error "define RLX_FUZZ_DATA_DIR to the source tree's fuzz/data"
#endif

namespace rlx::fuzz {
namespace {

// fuzz/data/tokenizer.json (3,456 tokens of all-MiniLM-L6-v2's uncased BERT vocab: the
// specials, every single character, the 2,000 most frequent words and the short ## pieces)
// as written, cased without accent stripping or CJK spacing, and with a word limit of 8
// characters (so the [UNK]-for-long-words path runs).
const std::vector<WordPieceTokenizer>& tokenizers() {
  static const std::vector<WordPieceTokenizer> all = [] {
    const std::string path = std::string(RLX_FUZZ_DATA_DIR) + "/tokenizer.json";
    std::ifstream in(path, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    nlohmann::json base = nlohmann::json::parse(text.str());
    nlohmann::json cased = base;
    cased["normalizer"]["lowercase"] = false;
    cased["normalizer"]["strip_accents"] = false;
    cased["normalizer"]["handle_chinese_chars"] = false;
    cased["normalizer"]["clean_text"] = false;
    nlohmann::json short_words = base;
    short_words["model"]["max_input_chars_per_word"] = 8;
    short_words["normalizer"]["strip_accents"] = false;
    std::vector<WordPieceTokenizer> v;
    v.push_back(WordPieceTokenizer::from_tokenizer_json_text(base.dump(), path));
    v.push_back(WordPieceTokenizer::from_tokenizer_json_text(cased.dump(), path + " (cased)"));
    v.push_back(
        WordPieceTokenizer::from_tokenizer_json_text(short_words.dump(), path + " (short words)"));
    return v;
  }();
  return all;
}

template <class F>
bool throws_error(F&& f) {
  try {
    f();
  } catch (const Error&) {
    return true;
  }
  return false;
}

std::string ids_text(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size() && i < 64; ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s + (ids.size() > 64 ? ",...]" : "]");
}

void check_tokenizer(const WordPieceTokenizer& tok, std::string_view text, size_t variant) {
  const std::string where = "tokenizer (configuration " + std::to_string(variant) + "): ";
  std::vector<int32_t> ids;
  try {
    ids = tok.encode(text, false);
  } catch (const Error&) {
    // Invalid UTF-8 (the only documented error): every entry point must reject it.
    expect(throws_error([&] { tok.encode(text, true); }), where + "encode(true) accepts it");
    expect(throws_error([&] { tok.encode_full(text, 16); }), where + "encode_full accepts it");
    expect(throws_error([&] { tok.tokenize(text); }), where + "tokenize accepts it");
    expect(throws_error([&] { tok.normalize(text); }), where + "normalize accepts it");
    expect(throws_error([&] { tok.pre_tokenize(text); }), where + "pre_tokenize accepts it");
    return;
  }
  for (int32_t id : ids)
    expect(id >= 0 && id < tok.vocab_size(), where + "id " + std::to_string(id) + " out of range");
  std::vector<int32_t> with = tok.encode(text, true);
  expect(with.size() == ids.size() + 2 && with.front() == tok.cls_id() &&
             with.back() == tok.sep_id() && std::equal(ids.begin(), ids.end(), with.begin() + 1),
         where + "encode(true) " + ids_text(with) + " is not [CLS] " + ids_text(ids) + " [SEP]");
  std::vector<std::string> tokens = tok.tokenize(text);
  expect(tokens.size() == ids.size(), where + "tokenize and encode disagree on the count");

  // Truncation to a length that depends on the input, so short and long limits both run.
  const int64_t max_length = 2 + static_cast<int64_t>(text.size() % 13);
  Encoding full = tok.encode_full(text, max_length);
  const size_t kept = std::min(ids.size(), static_cast<size_t>(max_length) - 2);
  expect(full.ids.size() == kept + 2 && full.ids.front() == tok.cls_id() &&
             full.ids.back() == tok.sep_id() &&
             std::equal(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(kept),
                        full.ids.begin() + 1),
         where + "encode_full(" + std::to_string(max_length) + ") " + ids_text(full.ids) +
             " is not [CLS] + a prefix of " + ids_text(ids) + " + [SEP]");
  expect(full.attention_mask == std::vector<int32_t>(full.ids.size(), 1) &&
             full.token_type_ids == std::vector<int32_t>(full.ids.size(), 0),
         where + "encode_full mask or type ids are not all 1 / 0");

  // The lines of the text as a batch: each row must be that line's encode_full, then padding.
  std::vector<std::string> lines;
  for (size_t b = 0; b <= text.size();) {
    size_t e = std::min(text.find('\n', b), text.size());
    lines.emplace_back(text.substr(b, e - b));
    b = e + 1;
  }
  const int64_t multiple = 1 + static_cast<int64_t>(text.size() % 5);
  BatchEncoding batch = tok.encode_batch(lines, max_length, multiple);
  expect(batch.batch == static_cast<int64_t>(lines.size()) && batch.seq <= max_length &&
             batch.ids.size() == static_cast<size_t>(batch.batch * batch.seq),
         where + "encode_batch has the wrong shape");
  for (size_t r = 0; r < lines.size(); ++r) {
    Encoding row = tok.encode_full(lines[r], max_length);
    const auto seq = static_cast<size_t>(batch.seq);
    expect(batch.lengths[r] == static_cast<int64_t>(row.ids.size()) && row.ids.size() <= seq,
           where + "encode_batch row " + std::to_string(r) + " has the wrong length");
    for (size_t c = 0; c < seq; ++c) {
      const bool real = c < row.ids.size();
      expect(batch.ids[r * seq + c] == (real ? row.ids[c] : tok.pad_id()) &&
                 batch.attention_mask[r * seq + c] == (real ? 1 : 0),
             where + "encode_batch row " + std::to_string(r) + " differs from encode_full at " +
                 std::to_string(c));
    }
  }

  // The normalized text is valid UTF-8 (pre_tokenize throws otherwise) and splits into
  // non-empty words.
  std::string normalized = tok.normalize(text);
  for (const std::string& word : tok.pre_tokenize(normalized))
    expect(!word.empty(), where + "pre_tokenize returned an empty word");
  for (const std::string& word : tok.pre_tokenize(text))
    expect(!word.empty(), where + "pre_tokenize returned an empty word");
}

}  // namespace

int tokenizer(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::vector<WordPieceTokenizer>& all = tokenizers();
  for (size_t i = 0; i < all.size(); ++i) check_tokenizer(all[i], text, i);
  return 0;
}

}  // namespace rlx::fuzz
