// Llama-family decoders (llama, qwen2, qwen3) read from a GGUF file: the config from its
// metadata, the full-sequence forward graph (token ids -> logits) and the cached step graph
// (prefill / decode over a KV cache held as executable state) over the file's packed weights,
// and LlamaModel, which owns the mapping, the tokenizer, the compiled executables, the KV
// caches and the generation loop.
//
// Source followed: llama.cpp's llm_build_llama / llm_build_qwen2 / llm_build_qwen3
// (src/llama-model.cpp) and its GGUF key and tensor names (gguf-py's constants.py).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "rlx/ir/graph.h"
#include "rlx/ir/quant.h"
#include "rlx/ir/tensor.h"
#include "rlx/models/sampling.h"
#include "rlx/opt/precision.h"
#include "rlx/runtime/backend.h"
#include "rlx/runtime/device.h"

namespace rlx {
class GgufFile;
class BpeTokenizer;
}  // namespace rlx

namespace rlx::models {

/// The hyper-parameters of a Llama-family decoder, read from GGUF metadata keys
/// `<arch>.<name>` (arch = general.architecture).
struct LlamaConfig {
  /// general.architecture: "llama", "qwen2" or "qwen3".
  std::string architecture;
  int64_t block_count = 0;           ///< <arch>.block_count (required)
  int64_t embedding_length = 0;      ///< <arch>.embedding_length (required): hidden size H
  int64_t feed_forward_length = 0;   ///< <arch>.feed_forward_length (required)
  int64_t head_count = 0;            ///< <arch>.attention.head_count (required)
  int64_t head_count_kv = 0;         ///< <arch>.attention.head_count_kv (default head_count)
  int64_t key_length = 0;            ///< <arch>.attention.key_length (default H / head_count)
  int64_t value_length = 0;          ///< <arch>.attention.value_length (default key_length)
  int64_t rope_dimension_count = 0;  ///< <arch>.rope.dimension_count (default key_length)
  double rope_freq_base = 10000.0;   ///< <arch>.rope.freq_base (default 10000)
  /// <arch>.rope.scaling.type: "none" (default) or "linear" (positions divided by the factor,
  /// llama.cpp's freq_scale = 1 / factor). Llama 3's frequency scaling reaches GGUF as the
  /// tensor rope_freqs.weight, which the builder applies when the file has it.
  std::string rope_scaling_type = "none";
  double rope_scaling_factor = 1.0;  ///< <arch>.rope.scaling.factor (default 1)
  double rms_epsilon = 0;            ///< <arch>.attention.layer_norm_rms_epsilon (required)
  int64_t context_length = 0;        ///< <arch>.context_length (required)
  /// Rows of token_embd.weight; when the file has tokenizer.ggml.tokens, its length, which
  /// must agree.
  int64_t vocab_size = 0;
  /// RoPE pairing: "gptj" (adjacent pairs (2i, 2i+1): llama.cpp's LLAMA_ROPE_TYPE_NORM, the
  /// `llama` architecture, whose converter permutes Q/K rows to match HF) or "neox" (pairs
  /// (i, i + R/2): qwen2, qwen3).
  std::string rope_layout = "gptj";
  /// <arch>.attention.sliding_window (default 0: none; Mistral-style): a token attends to the
  /// last W positions only, itself included (key position j is seen from position p iff
  /// p - W < j <= p; llama.cpp's LLAMA_SWA_TYPE_STANDARD), in every layer, in the full
  /// forward and over the KV cache alike. The cache still holds every position up to its
  /// length (no rolling buffer): past it generate() stops ("context") and append() throws.
  int64_t sliding_window = 0;
  bool qkv_bias = false;  ///< attn_{q,k,v}.bias per layer (qwen2)
  bool qk_norm = false;   ///< attn_{q,k}_norm.weight per layer, RMSNorm over each head (qwen3)

  /// Reads the config of `file`. Integer keys may have any GGUF integer type, float keys f32
  /// or f64. Throws rlx::Error naming the file and the key for a missing required key, a key
  /// of the wrong type or a non-positive size (sliding_window: negative), an architecture other
  /// than llama/qwen2/qwen3
  /// (naming it), a rope scaling type other than none/linear, head_count not a multiple of
  /// head_count_kv, rope.dimension_count odd or above key_length, and a token list whose
  /// length differs from token_embd's rows (or a missing token_embd.weight).
  static LlamaConfig from_gguf(const GgufFile& file);
};

/// How the builder declares each weight: the ggml format (QuantFormat, F32/F16/BF16 included)
/// of every 2-D weight by GGUF tensor name, plus whether the file has a separate output head.
struct LlamaWeightLayout {
  /// token_embd.weight, output.weight (when present), blk.N.attn_{q,k,v,output}.weight,
  /// blk.N.ffn_{gate,up,down}.weight -> format.
  std::map<std::string, QuantFormat> formats;
  /// output.weight is present; otherwise the head reuses token_embd.weight (tied).
  bool separate_output = false;
  /// Graph::quant_matmul's act_quant for the block-quantized weights: "int8" (llama.cpp's
  /// int8 activations; the CPU's integer kernels) or "none" (exact activations); float-format
  /// weights always multiply exactly.
  std::string act_quant = "int8";
  /// Storage type of the KV cache and the operands attention multiplies: "f32" (exact) or
  /// "f16" (llama.cpp's default --cache-type-k/-v f16): K and V are rounded to f16 where they
  /// are written (the cache state is then f16, half the bytes), q is rounded to f16 before
  /// QK^T as ggml's mul_mat rounds it for an f16 K, and attention runs on f16 operands (the
  /// CPU kernel widens K/V tiles to f32 as it reads them and keeps the softmax in f32; its
  /// f16 output is widened back to f32). The full-sequence forward rounds the same operands,
  /// so its logits match the cached steps'. Attention then has f16 operands: compile it in
  /// f16 (LlamaModel adds the precision override attention=f16), or always-f32 computes it
  /// behind an f32 copy of each cache. Anything else: rlx::Error from the builders.
  std::string cache_type = "f32";
};

/// Builds the full-sequence forward pass for fixed [batch, seq]:
/// - input "ids": i32[batch, seq] (positions 0..seq-1 in every row; ids are clamped into the
///   vocabulary by gather, so callers check them);
/// - output "logits": f32[batch, seq, vocab_size];
/// - params named as the GGUF tensors. Each 2-D weight is u8[rows, quant_row_bytes(format,
///   cols)], the file's packed bytes as they are, read by quant_matmul (ggml's [out, in]
///   layout): resident weight memory is the file's tensor bytes, never an f32 expansion.
///   Norm scales (attn_norm, ffn_norm, output_norm, attn_{q,k}_norm) and qwen2's biases are
///   f32 vectors.
/// - the embedding gathers the packed rows of token_embd (u8[batch, seq, row bytes]) and
///   dequantizes only those: the table stays packed (and, tied, is the output head's weight).
/// Per layer (llama.cpp's llm_build_llama): h = x + attn_output(attention(rope(q), rope(k), v,
/// causal (sliding_window when config.sliding_window > 0), GQA, scale 1/sqrt(key_length))) with
/// q/k/v = attn_{q,k,v}(rms_norm(x, attn_norm))
/// (+ bias for qwen2; per-head rms_norm with attn_{q,k}_norm before RoPE for qwen3); then
/// x' = h + ffn_down(silu(ffn_gate(n)) * ffn_up(n)), n = rms_norm(h, ffn_norm). Finally
/// logits = output(rms_norm(x, output_norm)), output = token_embd when tied. RoPE angle of
/// position p and pair i: p / scaling_factor * freq_base^(-2i/R) / rope_freq_factors[i] (the
/// factors of the file's rope_freqs.weight, Llama 3 scaling; empty: all 1), tables computed in
/// f64 and stored as f32 constants [seq, R/2]. Throws rlx::Error for a non-positive batch or
/// seq, seq above context_length, a weight missing from `layout`, or rope_freq_factors of
/// another length than R/2.
Graph build_llama_decoder(const LlamaConfig& config, const LlamaWeightLayout& layout, int64_t batch,
                          int64_t seq, std::span<const double> rope_freq_factors = {});

/// Appends to `g` the choice of one token per row from `logits` f32[B, V] and returns the ids
/// i32[B]: the seam where a step graph picks its next tokens (greedy_tokens by default; a
/// sampler built from the same graph ops replaces it).
using TokenSelector = std::function<Value(Graph& g, Value logits)>;

/// Greedy decoding: argmax over the vocabulary, i32[B] (the lowest id among equal maxima, as
/// jnp.argmax).
Value greedy_tokens(Graph& g, Value logits);

/// What build_llama_step builds.
struct LlamaStepOptions {
  int64_t batch = 1;    ///< B: independent sequences, each at its own position
  int64_t seq = 1;      ///< S: new tokens per row in this step (1: a decode step)
  int64_t ctx = 0;      ///< positions the cache holds (its length); 0: config.context_length
  bool logits = false;  ///< also output "logits" f32[B, V] (the rows the selector reads)
  TokenSelector select = greedy_tokens;
  /// Rows of the KV cache; 0: batch (row b of the step is row b of the cache). Larger: the
  /// step appends to `batch` of the cache's rows, named by the input "rows" i32[B] (distinct
  /// values in [0, cache_batch)), and attention reads those rows of the cache (gathered), so a
  /// prefill for one new sequence costs one row, not cache_batch.
  int64_t cache_batch = 0;
};

/// The KV-cache state of a step graph: per layer l, input "k_cache.<l>" [B, head_count_kv,
/// ctx, key_length] bound to output "k_cache.<l>.next", and "v_cache.<l>" [B, head_count_kv,
/// ctx, value_length] to "v_cache.<l>.next" (CompileOptions::state), of the layout's
/// cache_type (f32 or f16). f32 storage: 4 * block_count * head_count_kv * (key_length +
/// value_length) bytes per position and row (SmolLM2-135M: 46,080 bytes, 180 MiB for 4096
/// positions); f16 half that.
std::vector<StateBinding> llama_cache_state(const LlamaConfig& config);

/// One step of the decoder over a KV cache, for fixed [B, S] and cache length ctx:
/// - with options.cache_batch > B, input "rows" i32[B]: the cache row of each step row (below,
///   "row b" of the cache is then rows[b]);
/// - inputs "ids" i32[B, S] (row b's new tokens; positions past its real count are padding),
///   "pos" i32[B] (tokens already in row b's cache: its new tokens sit at positions pos[b] ..
///   pos[b] + S - 1), and, when S > 1, "last" i32[B] (the index in S of row b's last real
///   token, whose logits the step returns);
/// - state (llama_cache_state, [cache_batch or B, ...]): the caches; row b's new keys and values
/// are written at
///   pos[b] by dynamic_update_slice (one per row, in place on the CPU), and attention reads
///   the whole cache under mask "causal_lengths" with lengths pos + S (query i of row b sees
///   keys 0 .. pos[b] + i; padding keys come after every real query's position); with
///   config.sliding_window W > 0, under the bool mask pos[b] + i - W < j <= pos[b] + i
///   [B, 1, S, ctx] instead (the keys of the window only; the CPU kernel then scans the whole
///   cache row rather than stopping at the row's length);
/// - RoPE of each row at its own positions: the cos / sin tables of build_llama_decoder for
///   ctx positions, gathered at pos[b] + i;
/// - outputs "next" i32[B] (options.select of the last real token's logits), then "logits"
///   f32[B, V] when options.logits, then the cache outputs.
/// The caller keeps pos[b] + S <= ctx (dynamic_update_slice would clamp the start and write
/// elsewhere); LlamaModel checks it. Throws rlx::Error for a non-positive batch or seq, seq or
/// ctx above context_length, cache_batch in (0, batch), and as build_llama_decoder.
Graph build_llama_step(const LlamaConfig& config, const LlamaWeightLayout& layout,
                       const LlamaStepOptions& options,
                       std::span<const double> rope_freq_factors = {});

/// Options of LlamaModel.
struct LlamaOptions {
  Device device = Device::cpu();
  /// Precision policy of every compile; absent: RLX_PRECISION when set, else always-f32.
  std::optional<PrecisionPolicy> precision;
  /// Sequence lengths are padded up to a multiple of this (at most context_length) with token
  /// 0 at the end, so prompts of different lengths share compiled executables; causal
  /// attention keeps the padding from reaching the real positions. 1: exact lengths. Also the
  /// prefill buckets of append().
  int64_t bucket = 16;
  /// KV-cache length in positions (append, generate); 0: min(context_length, 4096). Above
  /// context_length is an error.
  int64_t ctx = 0;
  /// Graph options of the token sampler of sampling steps (max_candidates: the K best logits
  /// the sampler draws from, so top_k and top_p reach at most that many tokens).
  SamplerOptions sampler;
  /// Tokens the penalties of generate()'s sampling count (llama.cpp's penalty_last_n, 64): the
  /// history of its SamplerState.
  int64_t sampler_history = 64;
  /// What the quantized matmuls multiply (LlamaWeightLayout::act_quant): "int8" as llama.cpp,
  /// or "none" (exact activations: slower on CPU, no activation-rounding noise); anything else
  /// throws rlx::Error at load.
  std::string act_quant = "int8";
  /// KV-cache storage and attention operand type (LlamaWeightLayout::cache_type): "f32" or
  /// "f16" (llama.cpp's default: half the cache memory and decode's KV bytes; K, V and q
  /// rounded to f16; the precision policy gains attention=f16 unless it names attention);
  /// anything else throws rlx::Error at load.
  std::string cache_type = "f32";
};

/// The tokens of one append(): each row's next token, and the logits they were chosen from.
struct LlamaStep {
  /// [B]: the token chosen after each row's last appended token (greedy_tokens, or the
  /// sampler's draw); -1 for an idle row (count 0).
  std::vector<int32_t> next;
  Tensor logits;  ///< f32[B, vocab] when asked for (want_logits), else empty
};

/// What else an append() does, beyond its tokens.
struct AppendOptions {
  /// Tokens per row, each in [0, seq]; empty: seq each. A row with 0 is idle: nothing of it
  /// enters the cache and its `next` is -1 (its padding is still computed and written past
  /// its length, where nothing reads it), so a batch can step a subset of its sequences.
  std::vector<int64_t> counts;
  /// The rows of the batch-`cache_batch` cache the step's rows append to, strictly ascending
  /// in [0, cache_batch), one per step row; empty: all rows of the batch-B cache (B = the
  /// step's batch). A strict subset runs a step executable of B rows that writes and reads
  /// only those rows (LlamaStepOptions::cache_batch), e.g. the prefill of one new sequence
  /// next to others in the middle of their generation.
  std::vector<int64_t> rows;
  int64_t cache_batch = 0;   ///< the cache `rows` index (0: the step's batch)
  bool want_logits = false;  ///< also return the logits of each row's last token
  /// Choose the tokens with the token sampler (rlx/models/sampling.h; LlamaOptions::sampler)
  /// fed from this state, whose row r belongs to cache row r (its batch is the cache's);
  /// null: greedy. The caller accepts the chosen tokens into it (SamplerState::accept).
  const SamplerState* sampler = nullptr;
};

/// How generate() runs and stops.
struct GenerateOptions {
  int64_t max_tokens = 128;  ///< most new tokens
  /// How tokens are chosen. Absent (the default): greedy, the argmax of each step's logits,
  /// which is what rlx's parity tests and benchmarks against llama.cpp compare and what the
  /// CLI did before it sampled. Present: llama.cpp's sampler chain with these settings
  /// (rlx/models/sampling.h, inside the step executables; LlamaOptions::sampler_history tokens
  /// of prompt and output counted by the penalties); a temperature <= 0 is greedy over the
  /// penalized logits, and settings for which is_greedy() holds run the greedy executables
  /// (the same tokens). The same settings, seed and prompt give the same tokens.
  std::optional<SamplingParams> sampling;
  /// Stop when the tokenizer's EOS token (tokenizer.ggml.eos_token_id) is chosen; it is not
  /// part of the result.
  bool stop_at_eos = true;
  /// Stop strings: generation ends where the text first contains one; the text is cut before
  /// it and no piece of it is streamed.
  std::vector<std::string> stop;
  /// Called with each new piece of text as soon as it is complete UTF-8 (BpeTokenizer's
  /// StreamDecoder) and cannot be the start of a stop string.
  std::function<void(std::string_view)> on_text;
  /// Keep the tokens the cache already holds from an earlier generate() when the new prompt
  /// starts with them (multi-turn chat appends only the new turn); false: prefill everything.
  bool reuse_prefix = true;
};

/// What one generate() did.
struct GenerateStats {
  int64_t prompt_tokens = 0;     ///< tokens of the prompt
  int64_t reused_tokens = 0;     ///< of them, already in the cache (GenerateOptions::reuse_prefix)
  double prefill_seconds = 0;    ///< appending the rest of the prompt (compiles excluded)
  int64_t generated_tokens = 0;  ///< new tokens (the EOS that stopped it is not counted)
  double decode_seconds = 0;     ///< the decode steps (compiles excluded)
  double compile_seconds = 0;    ///< compiling step executables this call needed first
  /// "eos", "stop" (a stop string), "length" (max_tokens) or "context" (the cache is full).
  std::string stop_reason;
};

/// The stopping rules and the text of one generated sequence, token by token: what generate()
/// runs, and what each sequence of a batch (a server's slot) runs. It stops at the EOS token
/// (stop_at_eos; the EOS is not part of the result), at the first stop string (the text is cut
/// before it and no byte of it is streamed), after max_tokens, or when the cache is full; the
/// text streams through on_text as complete UTF-8 (BpeTokenizer::StreamDecoder), holding back
/// what may begin a stop string.
class Generation {
 public:
  /// `tokenizer` (null: no text and no EOS, ids only) must outlive the object; `options`'
  /// max_tokens, stop_at_eos, stop and on_text apply (copied). max_tokens 0 is done at once
  /// ("length").
  Generation(const BpeTokenizer* tokenizer, GenerateOptions options);
  ~Generation();
  Generation(Generation&&) noexcept;
  Generation& operator=(Generation&&) noexcept;

  /// Takes the token the model chose after the sequence's last token. `cache_full`: the KV
  /// cache cannot take this token, so no further step could run. Returns true when the
  /// sequence has ended (stop_reason() says why); no push may follow.
  bool push(int32_t token, bool cache_full);
  bool done() const;
  /// "eos", "stop", "length" (max_tokens) or "context"; "" while running.
  const std::string& stop_reason() const;
  /// The new tokens so far (the EOS that ended it excluded).
  const std::vector<int32_t>& ids() const;
  /// The whole text, after streaming what was held back (an unfinished UTF-8 character as
  /// U+FFFD). Call once, when done (or to end it early).
  std::string finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// The result of generate().
struct GenerateResult {
  std::vector<int32_t> ids;  ///< the new tokens (up to the stop)
  std::string text;          ///< their text, cut before a stop string
  GenerateStats stats;
};

/// Counters of a LlamaModel.
struct LlamaStats {
  int64_t compiles = 0;        ///< executables compiled (one per (batch, padded seq))
  double compile_seconds = 0;  ///< total compile wall time
  int64_t runs = 0;            ///< executable calls
  double load_seconds = 0;     ///< LlamaModel::load: opening, validating, binding the file
};

/// A Llama-family decoder loaded from a GGUF file: the memory-mapped weights (bound to every
/// executable zero-copy), the tokenizer (byte-level or SentencePiece BPE) when the file has one,
/// the executables compiled so far (full-sequence ones per (batch, bucketed seq); cached-step
/// ones per (batch, bucketed seq, logits wanted), sharing one KV cache per batch size,
/// Executable::share_state) and those caches with each row's position. Peak memory: the weights,
/// one KV cache per batch size used, and an arena per executable. Not thread-safe.
class LlamaModel {
 public:
  /// Opens and validates `path`: the config (LlamaConfig::from_gguf), every tensor the
  /// decoder needs present with its shape (token_embd [vocab, H], attn_q [head_count *
  /// key_length, H], attn_k/attn_v [head_count_kv * key/value_length, H], attn_output [H,
  /// head_count * value_length], ffn_gate/up [FFN, H], ffn_down [H, FFN], norms [H] or
  /// [key_length], biases [rows]) and a format rlx can run (the block formats of quant.h;
  /// norms and biases F32, F16 or BF16, converted to f32), and the tokenizer
  /// (BpeTokenizer::from_gguf) when tokenizer.ggml.model is present. Throws rlx::Error naming
  /// the file and the tensor (expected and found shape or type) or key.
  static LlamaModel load(const std::string& path, const LlamaOptions& options = {});
  ~LlamaModel();
  LlamaModel(LlamaModel&&) noexcept;
  LlamaModel& operator=(LlamaModel&&) noexcept;

  const LlamaConfig& config() const;
  const std::string& path() const;
  /// The options it was loaded with.
  const LlamaOptions& options() const;
  /// Whether the file has a tokenizer (tokenizer.ggml.model present).
  bool has_tokenizer() const;
  /// The file's tokenizer. Throws rlx::Error naming the file when it has none.
  const BpeTokenizer& tokenizer() const;

  /// Logits f32[batch, seq, vocab_size] of `ids` (row-major i32[batch, seq]; every row at
  /// positions 0..seq-1). Runs one executable call at [batch, bucketed seq] and drops the
  /// padded positions. Throws rlx::Error when batch or seq is not positive, seq exceeds
  /// context_length, ids.size() != batch * seq, or an id is outside [0, vocab_size) (naming
  /// row, position and id), and when a logit is not finite.
  Tensor logits(std::span<const int32_t> ids, int64_t batch, int64_t seq);

  /// Positions of the KV caches (LlamaOptions::ctx).
  int64_t ctx() const;
  /// Appends `seq` tokens per row to the B = `batch` sequences of the batch-B KV cache (row b
  /// holds positions() of them; its new tokens are ids[b * seq, b * seq + counts[b]), the rest
  /// of its row is ignored; empty counts: seq each) and returns each row's next token (greedy)
  /// and, when want_logits, the logits of its last appended token. seq 1 runs the decode
  /// executable of batch B; longer runs the prefill executable of the bucket (LlamaOptions::
  /// bucket) above max(counts). Throws rlx::Error for ids outside the vocabulary, counts not
  /// in [1, seq], or a row whose cache cannot take its tokens ("LlamaModel: the KV cache is
  /// full: row 0 holds 4090 of 4096 positions, 16 more do not fit (LlamaOptions::ctx, --ctx)")
  /// — nothing is written then.
  LlamaStep append(std::span<const int32_t> ids, int64_t batch, int64_t seq,
                   std::span<const int64_t> counts = {}, bool want_logits = false);
  /// append() with AppendOptions: idle rows (count 0), a subset of a larger cache's rows, the
  /// sampler. `batch` is the step's rows B. The padded length of the step (the bucket above
  /// the most new tokens of a row) must fit behind every row it touches, idle ones included:
  /// a row whose held positions plus it exceed ctx is an error naming it (nothing is written)
  /// — step such a row with fewer new tokens elsewhere, or reset it. Also throws for rows not
  /// strictly ascending or outside the cache, no row with a token, a sampler of another batch
  /// than the cache's, and as append() above.
  LlamaStep append(std::span<const int32_t> ids, int64_t batch, int64_t seq,
                   const AppendOptions& options);
  /// Tokens each row of the batch-B cache holds (zeros for a batch size not used yet).
  std::vector<int64_t> positions(int64_t batch) const;
  /// Empties every row of the batch-B cache (positions 0; the stale entries are never read:
  /// attention sees only positions below each row's length, and appends overwrite them).
  void reset(int64_t batch = 1);
  /// Empties row `row` of the batch-B cache (a finished sequence's slot). Throws rlx::Error
  /// for a row outside [0, batch).
  void reset(int64_t batch, int64_t row);

  /// Generation on row 0 of the batch-1 cache: `prompt` ids are appended (after the part of
  /// them the cache already holds, GenerateOptions::reuse_prefix), then one token per decode
  /// step until EOS, a stop string, max_tokens or a full cache (Generation). Greedy, or
  /// sampled (GenerateOptions::sampling); the choice of each token happens inside the step
  /// executable (only B ids leave it per step). Without a tokenizer
  /// in the file there is no text (nor EOS): only ids. Throws rlx::Error for an empty prompt,
  /// ids outside the vocabulary, and stop strings or on_text without a tokenizer.
  GenerateResult generate(std::span<const int32_t> prompt, const GenerateOptions& options = {});
  /// generate() of tokenizer().encode(prompt, add_special = true, parse_special = true)
  /// (special tokens in the text, e.g. ChatML's <|im_start|>, are matched).
  GenerateResult generate(std::string_view prompt, const GenerateOptions& options = {});

  /// The layout the builder declares the weights with.
  const LlamaWeightLayout& layout() const;
  /// Bytes of the weights bound to the executables (the packed file bytes of every matrix,
  /// plus the f32 norms and biases).
  int64_t weight_bytes() const;
  LlamaStats stats() const;

 private:
  struct Impl;
  explicit LlamaModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace rlx::models
