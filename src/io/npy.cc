// NumPy .npy reading and writing (numpy.lib.format: magic, version, little-endian header
// length, a Python-literal dict header padded to 64 bytes, then the C-order data).
#include "rlx/io/npy.h"

#include <cstring>

#include "rlx/io/atomic_file.h"
#include "rlx/io/file.h"
#include "rlx/ir/error.h"

namespace rlx {

namespace {

constexpr std::string_view kMagic = "\x93NUMPY";

struct NpyType {
  const char* descr;  // without the byte-order character
  DType dtype;
};
constexpr NpyType kTypes[] = {{"f4", DType::f32}, {"f2", DType::f16},  {"f8", DType::f64},
                              {"i1", DType::i8},  {"u1", DType::u8},   {"i4", DType::i32},
                              {"i8", DType::i64}, {"b1", DType::bool_}};

// The value text of `key` in the header dict ("'descr': '<f4', ..." -> "'<f4'").
std::string_view field(std::string_view header, std::string_view key, const std::string& what) {
  std::string quoted = "'" + std::string(key) + "'";
  size_t at = header.find(quoted);
  if (at == std::string_view::npos)
    throw Error(what + ": .npy header has no '" + std::string(key) + "'");
  at = header.find(':', at + quoted.size());
  if (at == std::string_view::npos) throw Error(what + ": malformed .npy header");
  std::string_view rest = header.substr(at + 1);
  while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  size_t end = rest.front() == '(' ? rest.find(')') + 1 : rest.find_first_of(",}");
  if (end == 0 || end == std::string_view::npos) throw Error(what + ": malformed .npy header");
  return rest.substr(0, end);
}

}  // namespace

Tensor parse_npy(std::string_view bytes, const std::string& what) {
  if (bytes.size() < 10 || bytes.substr(0, 6) != kMagic)
    throw Error(what + ": not an .npy file (bad magic)");
  const auto major = static_cast<uint8_t>(bytes[6]);
  size_t header_len = 0, offset = 0;
  if (major == 1) {
    header_len =
        static_cast<uint8_t>(bytes[8]) | (static_cast<size_t>(static_cast<uint8_t>(bytes[9])) << 8);
    offset = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) throw Error(what + ": truncated .npy header");
    for (int i = 0; i < 4; ++i)
      header_len |= static_cast<size_t>(static_cast<uint8_t>(bytes[8 + i])) << (8 * i);
    offset = 12;
  } else {
    throw Error(what + ": unsupported .npy format version " + std::to_string(major));
  }
  if (bytes.size() - offset < header_len) throw Error(what + ": truncated .npy header");
  std::string_view header = bytes.substr(offset, header_len);
  std::string_view descr = field(header, "descr", what);
  if (field(header, "fortran_order", what) != "False")
    throw Error(what + ": Fortran-order arrays are not supported (save with np.ascontiguousarray)");
  if (descr.size() < 4 || descr.front() != '\'' || descr.back() != '\'')
    throw Error(what + ": malformed .npy descr " + std::string(descr));
  const char order = descr[1];
  std::string_view code = descr.substr(2, descr.size() - 3);
  std::optional<DType> dt;
  for (const NpyType& t : kTypes)
    if (code == t.descr) dt = t.dtype;
  if (!dt || order == '>' || (order != '<' && order != '|' && order != '='))
    throw Error(what + ": .npy dtype " + std::string(descr) +
                " is not supported (f4, f2, f8, i1, u1, i4, i8, b1, little-endian)");
  std::string_view shape_text = field(header, "shape", what);
  std::vector<int64_t> dims;
  for (size_t i = 1; i + 1 < shape_text.size();) {
    while (i + 1 < shape_text.size() && (shape_text[i] == ' ' || shape_text[i] == ',')) ++i;
    if (i + 1 >= shape_text.size()) break;
    int64_t v = 0;
    size_t start = i;
    while (i + 1 < shape_text.size() && shape_text[i] >= '0' && shape_text[i] <= '9') {
      if (v > (int64_t{1} << 48)) throw Error(what + ": .npy shape is too large");
      v = v * 10 + (shape_text[i++] - '0');
    }
    if (i == start) throw Error(what + ": malformed .npy shape " + std::string(shape_text));
    dims.push_back(v);
  }
  Tensor t(*dt, Shape(dims));
  std::string_view data = bytes.substr(offset + header_len);
  if (data.size() != t.nbytes())
    throw Error(what + ": .npy data holds " + std::to_string(data.size()) + " bytes, shape " +
                t.shape().to_string() + " needs " + std::to_string(t.nbytes()));
  if (!data.empty()) std::memcpy(t.data(), data.data(), data.size());
  return t;
}

Tensor read_npy(const std::string& path) { return parse_npy(read_file(path), path); }

std::string npy_bytes(const Tensor& t) {
  const char* code = nullptr;
  for (const NpyType& n : kTypes)
    if (n.dtype == t.dtype()) code = n.descr;
  if (!code) throw Error("cannot write " + std::string(dtype_name(t.dtype())) + " as .npy");
  std::string shape;  // a Python tuple: (), (n,), (a, b)
  for (int64_t d : t.shape().dims()) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
  shape = "(" + shape + (t.shape().rank() == 1 ? ",)" : ")");
  const char* order = dtype_size(t.dtype()) == 1 ? "|" : "<";
  std::string header = "{'descr': '" + std::string(order) + code +
                       "', 'fortran_order': False, 'shape': " + shape + ", }";
  const bool v2 = header.size() + 11 > 65535;
  const size_t prefix = v2 ? 12 : 10;
  header.append(64 - (prefix + header.size() + 1) % 64, ' ');
  header += '\n';
  std::string out(kMagic);
  out += static_cast<char>(v2 ? 2 : 1);
  out += '\0';
  const size_t n = header.size();
  for (size_t i = 0; i < (v2 ? 4u : 2u); ++i) out += static_cast<char>((n >> (8 * i)) & 0xff);
  out += header;
  out.append(reinterpret_cast<const char*>(t.data()), t.nbytes());
  return out;
}

void write_npy(const std::string& path, const Tensor& t) {
  std::string bytes = npy_bytes(t);
  AtomicFileWriter w(path);
  w.write(bytes);
  w.commit();
}

}  // namespace rlx
