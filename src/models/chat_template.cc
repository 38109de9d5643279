// ChatML chat templates recognised from their Jinja text (rlx/models/chat_template.h).
#include "rlx/models/chat_template.h"

#include <regex>

#include "rlx/io/gguf.h"
#include "rlx/ir/error.h"

namespace rlx::models {
namespace {

// `text` without whitespace outside Jinja string literals ('...'), so that templates differing
// only in layout compare equal.
std::string squeeze(const std::string& text) {
  std::string out;
  bool quoted = false;
  for (char ch : text) {
    if (ch == '\'') quoted = !quoted;
    if (!quoted && (ch == ' ' || ch == '\n' || ch == '\t' || ch == '\r')) continue;
    out += ch;
  }
  return out;
}

// Removes the first match of `pattern` from `text`; returns its first group (or "" when the
// pattern has none), or nullopt when nothing matches.
std::optional<std::string> take(std::string& text, const std::regex& pattern) {
  std::smatch m;
  if (!std::regex_search(text, m, pattern)) return std::nullopt;
  std::string group = m.size() > 1 ? m[1].str() : std::string();
  text = m.prefix().str() + m.suffix().str();
  return group;
}

}  // namespace

ChatTemplate ChatTemplate::from_text(const std::string& jinja, const std::string& where) {
  std::string rest = squeeze(jinja);
  auto fail = [&](const std::string& why) {
    throw Error(where + ": tokenizer.chat_template is not a ChatML template rlx can render (" +
                why + "); rlx renders only ChatML (<|im_start|>role\\ncontent<|im_end|>\\n)");
  };
  static const std::regex message(
      R"(\{\{'<\|im_start\|>'\+message\['role'\]\+'\n'\+message\['content'\]\+'<\|im_end\|>(?:'\+'\n'|\n')\}\})");
  static const std::regex system(
      R"(\{%ifloop\.firstandmessages\[0\]\['role'\]!='system'%\}\{\{'<\|im_start\|>system\n([^']*)<\|im_end\|>\n'\}\}\{%endif%\})");
  static const std::regex generation(
      R"(\{%ifadd_generation_prompt%\}\{\{'<\|im_start\|>assistant\n'\}\}\{%endif%\})");
  ChatTemplate t;
  if (!take(rest, message)) fail("no ChatML message line");
  t.default_system_ = take(rest, system);
  t.generation_prompt_ = take(rest, generation).has_value();
  if (rest != "{%formessageinmessages%}{%endfor%}")
    fail("it does more than ChatML: '" + rest.substr(0, 120) + "' is left");
  return t;
}

ChatTemplate ChatTemplate::from_gguf(const GgufFile& file) {
  check(file.contains("tokenizer.chat_template"),
        file.path() + ": missing metadata key 'tokenizer.chat_template' (no chat template)");
  return from_text(file.get_string("tokenizer.chat_template"), file.path());
}

std::string ChatTemplate::render(std::span<const ChatMessage> messages,
                                 bool add_generation_prompt) const {
  std::string out;
  if (default_system_ && !messages.empty() && messages[0].role != "system")
    out += "<|im_start|>system\n" + *default_system_ + "<|im_end|>\n";
  for (const ChatMessage& m : messages)
    out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  if (add_generation_prompt && generation_prompt_) out += "<|im_start|>assistant\n";
  return out;
}

}  // namespace rlx::models
