// Fuzz target: the GGUF reader (GgufFile::from_bytes, every metadata value, every tensor's bytes
// and rlx::Tensor view) and the writer's round trip of what the reader accepted.
#include "rlx/io/gguf.h"

#include <optional>
#include <string>
#include <string_view>

#include "fuzz_targets.h"
#include "rlx/ir/error.h"

namespace rlx::fuzz {
namespace {

/// What the writer needs to write `f` again.
std::vector<GgufTensorData> tensors_of(const GgufFile& f) {
  std::vector<GgufTensorData> out;
  for (const GgufTensorInfo& t : f.tensors())
    out.push_back({t.name, t.type, t.shape, f.tensor_bytes(t.name).bytes});
  return out;
}

std::string rewrite(const GgufFile& f, const char* what) {
  try {
    return gguf_file_bytes(f.metadata(), tensors_of(f), f.alignment());
  } catch (const Error& e) {
    throw Finding(std::string("gguf: the writer refuses what the reader accepted (") + what +
                  "): " + e.what());
  }
}

}  // namespace

int gguf(const uint8_t* data, size_t size) {
  std::optional<GgufFile> file;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    file = GgufFile::from_bytes(bytes, "fuzz.gguf");
  } catch (const Error&) {
    return 0;  // rejected with a message naming the rule: the documented outcome
  }
  const GgufFile& f = *file;
  volatile size_t sink = 0;
  expect(f.version() == 2 || f.version() == 3, "gguf: version " + std::to_string(f.version()));
  expect((f.data_offset() <= size || f.tensors().empty()) && f.data_offset() % f.alignment() == 0,
         "gguf: data offset " + std::to_string(f.data_offset()) + " (alignment " +
             std::to_string(f.alignment()) + ", " + std::to_string(size) + " bytes)");
  for (const std::string& key : f.keys()) {
    expect(f.contains(key) && f.find(key) == &f.at(key), "gguf: key '" + key + "' not found");
    sink = sink + gguf_value_to_string(f.at(key), 4).size();
  }
  for (const GgufTensorInfo& t : f.tensors()) {
    expect(f.find_tensor(t.name) == &t, "gguf: tensor '" + t.name + "' not found");
    const GgmlTypeInfo& info = ggml_type_info(t.type);
    expect(t.shape.size() <= 4, "gguf: tensor '" + t.name + "' has more than 4 dims");
    const uint64_t numel = static_cast<uint64_t>(t.numel());
    expect(t.nbytes == numel / info.block_size * info.type_size,
           "gguf: tensor '" + t.name + "' has " + std::to_string(t.nbytes) + " bytes");
    GgufTensorBytes b = f.tensor_bytes(t.name);
    expect(b.size() == t.nbytes, "gguf: tensor_bytes('" + t.name + "') has the wrong size");
    unsigned char acc = 0;  // every byte of every tensor is read, under ASan
    for (std::byte x : b.bytes) acc ^= static_cast<unsigned char>(x);
    sink = sink ^ acc;
    if (ggml_type_dtype(t.type)) {
      Tensor x = f.tensor(t.name);
      expect(x.nbytes() == t.nbytes,
             "gguf: tensor('" + t.name + "') holds " + std::to_string(x.nbytes()) + " bytes");
      for (size_t i = 0; i < x.nbytes(); ++i) acc ^= static_cast<unsigned char>(x.data()[i]);
      sink = sink ^ acc;
    }
  }
  // The writer takes what the reader gave, and what it writes reads back the same: writing
  // that again gives the same bytes (compared as bytes, so NaN metadata compares too).
  const std::string once = rewrite(f, "the input");
  std::optional<GgufFile> again;
  try {
    again = GgufFile::from_bytes(once, "rewritten.gguf");
  } catch (const Error& e) {
    throw Finding(std::string("gguf: the reader rejects what the writer wrote: ") + e.what());
  }
  expect(again->keys() == f.keys(), "gguf: the rewritten file has other keys");
  expect(again->tensors().size() == f.tensors().size(), "gguf: the rewrite lost tensors");
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    const GgufTensorInfo &a = f.tensors()[i], &b = again->tensors()[i];
    expect(a.name == b.name && a.type == b.type && a.shape == b.shape && a.nbytes == b.nbytes,
           "gguf: tensor '" + a.name + "' changed in the rewrite");
    const auto x = f.tensor_bytes(a.name).bytes, y = again->tensor_bytes(b.name).bytes;
    expect(std::equal(x.begin(), x.end(), y.begin(), y.end()),
           "gguf: the bytes of tensor '" + a.name + "' changed in the rewrite");
  }
  expect(rewrite(*again, "its rewrite") == once, "gguf: writing the rewritten file again differs");
  return 0;
}

}  // namespace rlx::fuzz
