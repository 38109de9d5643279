// Fuzz target: the safetensors reader (SafetensorsFile::from_bytes, names, type, get).
#include "rlx/io/safetensors.h"

#include <optional>
#include <string>
#include <string_view>

#include "fuzz_targets.h"
#include "rlx/ir/error.h"

namespace rlx::fuzz {

int safetensors(const uint8_t* data, size_t size) {
  std::optional<SafetensorsFile> file;
  try {
    file = SafetensorsFile::from_bytes(std::string_view(reinterpret_cast<const char*>(data), size),
                                       "fuzz.safetensors");
  } catch (const Error&) {
    return 0;  // rejected with a message naming the rule: the documented outcome
  }
  expect(!file->contains("__metadata__"), "safetensors: __metadata__ is listed as a tensor");
  volatile unsigned char sink = 0;  // every byte of every tensor is read, under ASan
  for (const std::string& name : file->names()) {
    expect(file->contains(name), "safetensors: names() lists '" + name + "', contains() denies it");
    const std::string& stored = file->stored_dtype(name);
    expect(!stored.empty(), "safetensors: tensor '" + name + "' has an empty stored dtype");
    TensorType type;
    Tensor t;
    try {
      type = file->type(name);
      t = file->get(name);
    } catch (const Error&) {
      continue;  // an unsupported dtype or a BOOL byte other than 0/1: documented errors
    }
    expect(t.type() == type, "safetensors: get('" + name + "') gives " + t.type().to_string() +
                                 ", type() says " + type.to_string());
    expect(t.nbytes() == static_cast<size_t>(type.shape.numel()) *
                             static_cast<size_t>(dtype_size(type.dtype)),
           "safetensors: tensor '" + name + "' holds " + std::to_string(t.nbytes()) + " bytes");
    unsigned char acc = 0;
    for (size_t i = 0; i < t.nbytes(); ++i) acc ^= static_cast<unsigned char>(t.data()[i]);
    sink = sink ^ acc;
  }
  for (const auto& [key, value] : file->metadata())
    sink = sink ^ static_cast<unsigned char>(key.size() + value.size());
  return 0;
}

}  // namespace rlx::fuzz
