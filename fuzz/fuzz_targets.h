// The fuzz targets: one function per parser of untrusted input, shared by the libFuzzer
// executables (libfuzzer_main.cc) and the gcc replay test (tests/fuzz/replay_test.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace rlx::fuzz {

/// A fuzz finding that is not a crash or sanitizer report: an exception other than rlx::Error,
/// an rlx::Error from a call that must succeed, or a broken invariant (e.g. a text round trip
/// that prints differently). Thrown by the targets; libfuzzer_main.cc turns it into an abort.
class Finding : public std::logic_error {
 public:
  explicit Finding(const std::string& what) : std::logic_error(what) {}
};

/// Throws Finding(what) when `condition` is false.
inline void expect(bool condition, const std::string& what) {
  if (!condition) throw Finding(what);
}

/// Text IR (Graph::parse). rlx::Error from the parse is fine; a parsed graph must verify, its
/// printed form must parse, and that graph must print identically.
int text_ir(const uint8_t* data, size_t size);

/// A safetensors file in memory (SafetensorsFile::from_bytes). rlx::Error from opening is fine;
/// an opened file must list each tensor as contained, and get() of each (rlx::Error allowed
/// for unsupported dtypes and bad BOOL bytes) must give the declared type with readable bytes.
int safetensors(const uint8_t* data, size_t size);

/// Arbitrary bytes as tokenizer input, through three configurations of the BERT WordPiece
/// tokenizer of fuzz/data/tokenizer.json. Invalid UTF-8 must be an rlx::Error from every
/// entry point; valid text must encode with ids in the vocab, and encode, encode_full and
/// encode_batch must agree.
int tokenizer(const uint8_t* data, size_t size);

/// The JSON files of a model directory: the first line names the file ("config.json",
/// "tokenizer.json", "tokenizer_config.json", "modules.json" or "1_Pooling/config.json"), the
/// rest is its text. rlx::Error from loading is fine; what loads must satisfy the documented
/// checks (positive sizes, a tokenizer that encodes, a pooling mode of "mean" or "cls").
int model_config(const uint8_t* data, size_t size);

/// A GGUF file in memory (GgufFile::from_bytes). rlx::Error from opening is fine; an opened file
/// must find each of its keys and tensors, give each tensor the byte size of its type and shape,
/// let every byte and every rlx::Tensor view be read, and round-trip through the writer:
/// gguf_file_bytes of what was read opens with the same keys and tensors, and writes the same
/// bytes again.
int gguf(const uint8_t* data, size_t size);

/// ONNX model bytes (onnx::Model::from_bytes, then import_graph for the declared input shapes,
/// symbolic dims 2). rlx::Error from either is fine; an imported graph must verify, keep every
/// output, and come with the data of each of its params.
int onnx_model(const uint8_t* data, size_t size);

/// A target by name, as the replay test and fuzz/corpus/<name>/ see it.
struct Target {
  const char* name;
  int (*run)(const uint8_t* data, size_t size);
};

/// Every target, in the order scripts/fuzz.sh runs them.
inline constexpr Target kTargets[] = {
    {"text_ir", text_ir},     {"safetensors", safetensors},
    {"tokenizer", tokenizer}, {"model_config", model_config},
    {"gguf", gguf},           {"onnx_model", onnx_model},
};

}  // namespace rlx::fuzz
