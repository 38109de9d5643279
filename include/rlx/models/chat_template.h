// Chat templates of GGUF files (tokenizer.chat_template): the ChatML family rendered by rlx
// itself, recognised from the Jinja text; any other template is an error, never a wrong prompt.
#pragma once

#include <optional>
#include <span>
#include <string>

namespace rlx {
class GgufFile;
}  // namespace rlx

namespace rlx::models {

/// One turn of a conversation: role ("system", "user", "assistant", ...) and text.
struct ChatMessage {
  std::string role;
  std::string content;
};

/// A ChatML template (OpenAI's Chat Markup Language, as SmolLM2 and Qwen use it): each message
/// renders as "<|im_start|>{role}\n{content}<|im_end|>\n", the generation prompt as
/// "<|im_start|>assistant\n", and, where the template injects one, a default system message
/// first when the conversation does not start with a system message (SmolLM2: "You are a
/// helpful AI assistant named SmolLM, trained by Hugging Face").
class ChatTemplate {
 public:
  /// Recognises `jinja` (a tokenizer.chat_template text) as ChatML: it must consist of exactly
  /// a loop over the messages rendering the ChatML line above, optionally the default system
  /// message `{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n
  /// ...<|im_end|>\n' }}{% endif %}` inside the loop, and optionally `{% if
  /// add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}` after it (whitespace
  /// between tags is ignored). Throws rlx::Error "<where>: tokenizer.chat_template is not a
  /// ChatML template rlx can render (...)" for anything else.
  static ChatTemplate from_text(const std::string& jinja, const std::string& where);
  /// The template of `file` (key tokenizer.chat_template). Throws rlx::Error naming the file
  /// and the key when it is missing, or as from_text.
  static ChatTemplate from_gguf(const GgufFile& file);

  /// The prompt text of `messages`, followed by the generation prompt when
  /// add_generation_prompt (and the template has one). Control tokens appear as text: encode
  /// the result with parse_special.
  std::string render(std::span<const ChatMessage> messages,
                     bool add_generation_prompt = true) const;

  /// The system message injected when the conversation has none (absent: none).
  const std::optional<std::string>& default_system() const { return default_system_; }

 private:
  std::optional<std::string> default_system_;
  bool generation_prompt_ = false;
};

}  // namespace rlx::models
