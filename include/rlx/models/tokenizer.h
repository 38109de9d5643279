// BERT WordPiece tokenizer with the exact behaviour of Hugging Face `tokenizers`.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace rlx {

class GgufFile;

/// The byte offset of the first ill-formed UTF-8 sequence in `text` (Unicode table 3-7: no
/// overlong forms, surrogates, values past U+10FFFF or truncated sequences), or nullopt when
/// `text` is valid UTF-8: what the tokenizer accepts.
std::optional<size_t> find_invalid_utf8(std::string_view text);

/// `text` with every ill-formed UTF-8 sequence replaced by U+FFFD, one per maximal subpart
/// (Unicode's recommended practice, as Python's bytes.decode(errors="replace") and the WHATWG
/// decoder do); valid UTF-8 comes back unchanged.
std::string replace_invalid_utf8(std::string_view text);

/// One text encoded for a model: [CLS] tokens [SEP], truncated; all three vectors have the
/// same length. attention_mask is 1 on every token; token_type_ids are 0 (single sequence).
struct Encoding {
  std::vector<int32_t> ids, attention_mask, token_type_ids;
};

/// A batch of texts encoded for a model: row-major [batch, seq] arrays, each row [CLS] tokens
/// [SEP] truncated to the requested max_length, then padded on the right with pad_id() (mask 0,
/// type id 0). lengths[i] is the number of real tokens (mask 1) of row i.
struct BatchEncoding {
  int64_t batch = 0, seq = 0;
  std::vector<int32_t> ids, attention_mask, token_type_ids;
  std::vector<int64_t> lengths;
};

/// The BERT tokenizer pipeline of Hugging Face `tokenizers` (tokenizer.json with a WordPiece
/// model), reproduced id for id (tests/golden/tokenizer_ref.json):
///
/// 1. added tokens (e.g. [CLS], [MASK]) are matched in the raw text, case-sensitively, leftmost
///    then longest first, and become their ids directly;
/// 2. the rest goes through BertNormalizer: clean_text (drop NUL, U+FFFD and control/format/
///    private-use characters, map whitespace to ' '), spaces around CJK ideographs, strip
///    accents (NFD, then drop non-spacing marks), lowercase;
/// 3. BertPreTokenizer: split on whitespace and isolate each punctuation character;
/// 4. WordPiece: greedy longest-match-first with the "##" continuation prefix; a word with more
///    than max_input_chars_per_word characters, or with a piece not in the vocab, is [UNK].
///
/// HF classifies characters with Unicode 8.0 tables and decomposes with Unicode 9.0 ones; rlx
/// asks utf8proc and corrects the code points where the two differ (tables in tokenizer.cc,
/// generated from HF and checked against it for every code point).
///
/// Input text must be valid UTF-8, as HF's Rust API requires (&str): encode() and tokenize()
/// throw rlx::Error naming the byte offset of the first invalid sequence rather than guess.
///
/// Thread safety: all const methods may be called concurrently.
class WordPieceTokenizer {
 public:
  /// Loads a Hugging Face tokenizer.json whose model is WordPiece, normalizer BertNormalizer and
  /// pre_tokenizer BertPreTokenizer; the post_processor (TemplateProcessing [CLS] $A [SEP] or
  /// BertProcessing) gives cls_id()/sep_id(). max_length() comes from model_max_length in a
  /// tokenizer_config.json beside `path`, else truncation.max_length, else 512.
  /// Throws rlx::Error naming `path` when the file is missing or not JSON, when a component is
  /// another type or an unsupported option is set, when an integer field is not a JSON integer
  /// in its range (ids in int32, truncation.max_length >= 2), or when the unk token is not in
  /// the vocab.
  static WordPieceTokenizer from_tokenizer_json(const std::string& path);

  /// Parses the text of a tokenizer.json, checked as from_tokenizer_json() checks a file;
  /// `source` (e.g. its path) starts every error message. `tokenizer_config`, if given, is the
  /// text of the tokenizer_config.json beside it (for model_max_length).
  static WordPieceTokenizer from_tokenizer_json_text(
      std::string_view text, const std::string& source,
      std::optional<std::string_view> tokenizer_config = std::nullopt);

  /// Loads a BERT vocab.txt (one token per line, id = line number, trailing whitespace
  /// trimmed), as transformers' BertTokenizerFast does: BertNormalizer with `lowercase` (accents
  /// stripped iff lowercase), [CLS] $A [SEP], and whichever of [PAD] [UNK] [CLS] [SEP] [MASK]
  /// the vocab has as added tokens. max_length() as for from_tokenizer_json.
  /// Throws rlx::Error naming `path` when it is missing or lacks [UNK], [CLS] or [SEP].
  static WordPieceTokenizer from_vocab_txt(const std::string& path, bool lowercase = true);

  /// The WordPiece vocabulary of a BERT GGUF file as llama.cpp's convert_hf_to_gguf.py writes
  /// it ("phantom space" form): tokenizer.ggml.model "bert", tokenizer.ggml.tokens (strings)
  /// and tokenizer.ggml.token_type (i32, gguf-py's TokenType) where a CONTROL (3) token is
  /// stored as is, a word-initial token with the prefix U+2581 and a continuation without the
  /// "##" it has in the Hugging Face vocab; CONTROL and USER_DEFINED (4) tokens become added
  /// tokens. [CLS] is tokenizer.ggml.bos_token_id, [SEP] tokenizer.ggml.seperator_token_id
  /// (gguf-py's spelling), [UNK] tokenizer.ggml.unknown_token_id, padding
  /// tokenizer.ggml.padding_token_id (0 when absent), all u32; max_length() is
  /// <general.architecture>.context_length. Normalisation is BertNormalizer with lowercasing
  /// and accent stripping, as llama.cpp's WPM tokenizer does (rlx quantize refuses cased
  /// vocabularies). Throws rlx::Error naming the file and the key for another tokenizer model,
  /// missing or mistyped keys, arrays of different lengths or an id outside the vocabulary.
  static WordPieceTokenizer from_gguf(const GgufFile& file);

  /// Token ids of `text`, mirroring HF `Tokenizer.encode(text, add_special_tokens).ids` with no
  /// truncation and no padding: [CLS] ... [SEP] when add_special_tokens.
  /// Throws rlx::Error on invalid UTF-8 (naming the byte offset).
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;

  /// `text` encoded for a model: [CLS] ... [SEP] with the content cut at the end so that at most
  /// max_length ids remain (HF truncation "longest_first", stride 0), and its mask and type ids.
  /// Throws rlx::Error when max_length < 2 (no room for [CLS] and [SEP]) or on invalid UTF-8.
  Encoding encode_full(std::string_view text, int64_t max_length) const;

  /// Token strings of `text` without [CLS]/[SEP], mirroring HF
  /// `encode(text, add_special_tokens=False).tokens` (added tokens written in the text stay).
  /// Throws rlx::Error on invalid UTF-8.
  std::vector<std::string> tokenize(std::string_view text) const;

  /// encode_full() of every text, right-padded with pad_id() to the longest row rounded up to a
  /// multiple of pad_to_multiple_of (HF padding "longest"), then capped at max_length (which HF
  /// does not do) so that seq never exceeds what the model accepts.
  /// Throws rlx::Error when max_length < 2, pad_to_multiple_of < 1 or a text is invalid UTF-8
  /// (naming its index).
  BatchEncoding encode_batch(const std::vector<std::string>& texts, int64_t max_length,
                             int64_t pad_to_multiple_of = 1) const;

  /// The normalized form of `text` (HF `tokenizer.normalizer.normalize_str`).
  /// Throws rlx::Error on invalid UTF-8.
  std::string normalize(std::string_view text) const;

  /// The words BertPreTokenizer splits `text` into (HF `pre_tokenizer.pre_tokenize_str`, without
  /// offsets); no normalization is applied. Throws rlx::Error on invalid UTF-8.
  std::vector<std::string> pre_tokenize(std::string_view text) const;

  /// The token string of `id`. Throws rlx::Error when no token has that id.
  std::string id_to_token(int32_t id) const;

  /// Number of ids (largest id + 1): the rows of the model's word embedding table.
  int64_t vocab_size() const { return static_cast<int64_t>(id_to_token_.size()); }
  /// Id used to pad (tokenizer.json padding.pad_id, else [PAD]'s id, else 0).
  int32_t pad_id() const { return pad_id_; }
  /// Id of the [CLS] token the post-processor puts first.
  int32_t cls_id() const { return cls_id_; }
  /// Id of the [SEP] token the post-processor puts last.
  int32_t sep_id() const { return sep_id_; }
  /// Id of the unknown-word token.
  int32_t unk_id() const { return unk_id_; }
  /// The longest input (in tokens, specials included) the model accepts.
  int64_t max_length() const { return max_length_; }

 private:
  struct Scratch;  // buffers one call reuses across its segments and words (tokenizer.cc)

  struct AddedToken {
    std::string content;
    int32_t id;
  };
  // A slot of the vocab's open-addressing hash table; id < 0 marks an empty slot.
  struct VocabSlot {
    uint32_t tag, offset, length;  // tag: high half of the key's hash; key in vocab_keys_
    int32_t id;
  };

  WordPieceTokenizer() = default;
  void finish_loading(const std::string& path,
                      const std::unordered_map<std::string, int32_t>& vocab, int64_t max_length);
  int32_t find_token(std::string_view token) const;
  void encode_into(std::string_view text, std::vector<int32_t>& out, Scratch& scratch) const;
  void encode_truncated(std::string_view text, int64_t max_length, std::vector<int32_t>& out,
                        Scratch& scratch) const;
  void encode_segment(std::string_view text, size_t offset, std::vector<int32_t>& out,
                      Scratch& scratch) const;
  void normalize_into(std::string_view text, size_t offset, Scratch& scratch) const;
  void word_piece(Scratch& scratch, size_t begin, size_t end, std::vector<int32_t>& out) const;

  // The WordPiece model's vocab as a flat hash table: the hot loop looks up string_views into
  // one buffer, with no allocation, modulo or pointer chasing.
  std::string vocab_keys_;
  std::vector<VocabSlot> vocab_slots_;                   // power-of-two size, at most half full
  std::vector<std::optional<std::string>> id_to_token_;  // vocab and added tokens by id
  std::vector<AddedToken> added_;  // longest first, so the first match at a position wins
  std::array<bool, 256> added_first_byte_{};  // bytes an added token can start with
  std::string unk_token_ = "[UNK]", prefix_ = "##";
  int64_t max_input_chars_per_word_ = 100;
  size_t max_token_bytes_ = 0;  // longest vocab entry: bounds the longest-match search
  bool clean_text_ = true, handle_chinese_chars_ = true, strip_accents_ = true, lowercase_ = true;
  int32_t unk_id_ = 0, cls_id_ = 0, sep_id_ = 0, pad_id_ = 0;
  int64_t max_length_ = 512;
};

}  // namespace rlx
