// Internal to rlx_serve: the OpenAI wire format of POST /v1/chat/completions and
// POST /v1/completions: request validation into a ChatRequest, and the response objects.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "rlx/serve/chat_scheduler.h"

namespace rlx::serve {

/// What a validated chat/completions or completions request asks for.
struct GenerationCall {
  bool chat = true;            ///< /v1/chat/completions (messages), else /v1/completions (prompt)
  std::string model;           ///< the id it named
  bool stream = false;         ///< answer as server-sent events
  bool include_usage = false;  ///< stream_options.include_usage: a last chunk with the usage
  ChatRequest request;         ///< the prompt ids and GenerateOptions
};

/// Validates `body` (a JSON object naming a model `scheduler` serves) against OpenAI's
/// CreateChatCompletionRequest (`chat`) or CreateCompletionRequest and builds the request:
/// the prompt (messages rendered by the file's ChatML template and encoded with control tokens
/// matched, as `rlx generate --chat`; a completion prompt encoded as `rlx generate -p`), the
/// sampler settings (llama-server's defaults for what the request leaves out: temperature 0.8,
/// top_k 40, top_p 0.95, min_p 0.05; temperature 0 is greedy), max_tokens, stop strings and the
/// seed. Throws ApiError (400) naming the field for a wrong type, a value out of range, an
/// unknown field, what rlx does not do (n > 1, logprobs, logit_bias, tools, echo, best_of,
/// suffix, a response_format other than text) and a prompt longer than a slot's context
/// (code context_length_exceeded).
GenerationCall parse_generation(const nlohmann::json& body, bool chat,
                                const ChatScheduler& scheduler);

/// OpenAI's finish_reason of a Generation stop reason: "stop" (EOS, a stop string) or
/// "length" (max_tokens, a full context).
std::string finish_reason(const std::string& stop_reason);

/// The non-streamed answer: a chat.completion or text_completion object with its usage.
nlohmann::json completion_object(const GenerationCall& call, const std::string& id, int64_t created,
                                 const std::string& text, const std::string& finish,
                                 int64_t prompt_tokens, int64_t completion_tokens);

/// One streamed chunk (chat.completion.chunk or text_completion): `text` as the delta (with
/// the assistant role on the first chat chunk, `role`), and finish_reason when `finish` is
/// not empty.
nlohmann::json completion_chunk(const GenerationCall& call, const std::string& id, int64_t created,
                                const std::string& text, bool role, const std::string& finish);

/// The usage object {"prompt_tokens", "completion_tokens", "total_tokens"}.
nlohmann::json usage_object(int64_t prompt_tokens, int64_t completion_tokens);

}  // namespace rlx::serve
