// Fuzz target: the JSON files of a model directory (config.json, tokenizer.json,
// tokenizer_config.json, modules.json, 1_Pooling/config.json), one per input.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_targets.h"
#include "rlx/ir/error.h"
#include "rlx/models/bert.h"
#include "rlx/models/tokenizer.h"

namespace rlx::fuzz {
namespace {

// A valid tokenizer.json with a tiny vocab, for inputs that fuzz the tokenizer_config.json
// beside it.
constexpr std::string_view kTinyTokenizerJson = R"({
  "added_tokens": [{"id": 0, "content": "[PAD]"}, {"id": 1, "content": "[UNK]"},
                   {"id": 2, "content": "[CLS]"}, {"id": 3, "content": "[SEP]"}],
  "normalizer": {"type": "BertNormalizer"},
  "pre_tokenizer": {"type": "BertPreTokenizer"},
  "post_processor": {"type": "BertProcessing", "cls": ["[CLS]", 2], "sep": ["[SEP]", 3]},
  "model": {"type": "WordPiece", "unk_token": "[UNK]",
            "vocab": {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "a": 4, "##b": 5}}
})";

// A loaded tokenizer must encode text (with an added token, accents, CJK and punctuation) to
// ids it can name.
void check_loaded(const WordPieceTokenizer& tok) {
  expect(tok.max_length() >= 2,
         "model_config: tokenizer max_length " + std::to_string(tok.max_length()) + " is below 2");
  for (int32_t id : {tok.cls_id(), tok.sep_id(), tok.pad_id(), tok.unk_id()}) {
    expect(id >= 0 && id < tok.vocab_size(),
           "model_config: special id " + std::to_string(id) + " outside the vocab");
    (void)tok.id_to_token(id);  // rlx::Error here would be a finding too
  }
  for (std::string_view text : {"", "Hello, world! [CLS] a ab abb", "Ünïcödé 中文字 ...",
                                "averyveryveryveryveryverylongword"}) {
    std::vector<int32_t> ids = tok.encode(text);
    expect(ids.size() >= 2, "model_config: encode returned fewer than 2 ids");
    for (int32_t id : ids) (void)tok.id_to_token(id);
    Encoding e = tok.encode_full(text, tok.max_length());
    expect(static_cast<int64_t>(e.ids.size()) <= tok.max_length(),
           "model_config: encode_full longer than max_length");
  }
}

}  // namespace

// Loads `text` as the file `kind`; rlx::Error from loading is the documented outcome for bad
// input. What loads is checked outside the try, so an rlx::Error from a check is a finding.
int model_config(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t newline = input.find('\n');
  if (newline == std::string_view::npos) return 0;
  const std::string_view kind = input.substr(0, newline);
  const std::string_view text = input.substr(newline + 1);
  if (kind == "config.json") {
    std::optional<models::BertConfig> loaded;
    try {
      loaded = models::BertConfig::from_json(text, "config.json");
    } catch (const Error&) {
      return 0;
    }
    const models::BertConfig& c = *loaded;
    expect(c.vocab_size > 0 && c.hidden_size > 0 && c.num_hidden_layers > 0 &&
               c.num_attention_heads > 0 && c.intermediate_size > 0 &&
               c.max_position_embeddings > 0 && c.type_vocab_size > 0,
           "model_config: config.json loaded with a size that is not positive");
    expect(c.hidden_size % c.num_attention_heads == 0,
           "model_config: hidden_size not divisible by num_attention_heads");
    expect(c.layer_norm_eps > 0, "model_config: layer_norm_eps is not positive");
    expect(c.hidden_act == "gelu" || c.hidden_act == "gelu_new" ||
               c.hidden_act == "gelu_pytorch_tanh" || c.hidden_act == "relu",
           "model_config: unsupported hidden_act '" + c.hidden_act + "' was accepted");
  } else if (kind == "tokenizer.json" || kind == "tokenizer_config.json") {
    std::optional<WordPieceTokenizer> tok;
    try {
      tok = kind == "tokenizer.json"
                ? WordPieceTokenizer::from_tokenizer_json_text(text, "tokenizer.json")
                : WordPieceTokenizer::from_tokenizer_json_text(kTinyTokenizerJson, "tokenizer.json",
                                                               text);
    } catch (const Error&) {
      return 0;
    }
    check_loaded(*tok);
  } else if (kind == "modules.json") {
    try {
      models::parse_modules_json(text, "modules.json");
    } catch (const Error&) {
      return 0;
    }
  } else if (kind == "1_Pooling/config.json") {
    std::string mode;
    try {
      mode = models::parse_pooling_config(text, "1_Pooling/config.json");
    } catch (const Error&) {
      return 0;
    }
    expect(mode == "mean" || mode == "cls", "model_config: pooling mode '" + mode + "'");
  }
  return 0;
}

}  // namespace rlx::fuzz
