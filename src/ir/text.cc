// Text form of graphs (docs/ir.md): the canonical printer and a located recursive-descent parser.
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rlx/ir/custom_op.h"
#include "rlx/ir/error.h"
#include "rlx/ir/graph.h"
#include "rlx/ir/text_util.h"

namespace rlx {
namespace {

// ============================================================================ printer

std::string quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out + '"';
}

// Bitwise, so -0.0 next to 0.0 or two NaNs with different payloads stay dense.
bool all_elements_equal(const Tensor& t) {
  auto width = static_cast<size_t>(dtype_size(t.dtype()));
  const std::byte* p = t.data();
  for (int64_t i = 1; i < t.numel(); ++i)
    if (std::memcmp(p, p + static_cast<size_t>(i) * width, width) != 0) return false;
  return true;
}

void print_tensor(const Tensor& t, std::string& out) {
  bool splat = t.numel() > 1 && all_elements_equal(t);
  out += splat ? "splat<" : "dense<";
  out += t.type().to_string();
  out += ": ";
  int64_t shown = splat ? 1 : t.numel();
  for (int64_t i = 0; i < shown; ++i) out += (i ? ", " : "") + format_element(t, i);
  out += '>';
}

std::string value_ref(const Graph& g, Value v) {
  const Node& n = g.node(v);
  std::string s = "%" + n.name;
  if (n.results.size() != 1) s += "#" + std::to_string(v.index);
  return s;
}

void print_graph(const Graph& g, int indent, std::string& out);

// `indent` is the indentation of the statement holding the attribute (for nested graphs).
void print_attr(const Attr& a, int indent, std::string& out) {
  switch (attr_type(a)) {
    case AttrType::Int:
      out += std::to_string(std::get<int64_t>(a));
      return;
    case AttrType::Float:
      out += format_float(std::get<double>(a), DType::f64);
      return;
    case AttrType::Bool:
      out += std::get<bool>(a) ? "true" : "false";
      return;
    case AttrType::String:
      out += quote(std::get<std::string>(a));
      return;
    case AttrType::Ints: {
      const auto& v = std::get<std::vector<int64_t>>(a);
      out += '[';
      // No spaces, like the dims of a type: shape=[2,3] next to f32[2,3].
      for (size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + std::to_string(v[i]);
      out += ']';
      return;
    }
    case AttrType::DType:
      out += dtype_name(std::get<DType>(a));
      return;
    case AttrType::Tensor:
      print_tensor(std::get<Tensor>(a), out);
      return;
    case AttrType::Graph:
      print_graph(*std::get<std::shared_ptr<const Graph>>(a), indent, out);
      return;
    case AttrType::Graphs: {
      const GraphList& gs = std::get<GraphList>(a);
      out += '[';
      for (size_t i = 0; i < gs.size(); ++i) {
        if (i) out += ", ";
        print_graph(*gs[i], indent, out);
      }
      out += ']';
      return;
    }
  }
}

void print_node(const Graph& g, const Node& n, int indent, std::string& out) {
  out += '%' + n.name;
  if (n.results.size() != 1) out += ':' + std::to_string(n.results.size());
  out += " = ";
  // A custom_call prints as its custom op's name (the schema's mnemonic), without `name`.
  const OpInfo& schema = schema_of(n.op, n.attrs);
  const bool custom = &schema != &op_info(n.op);
  out += schema.name;
  for (size_t i = 0; i < n.operands.size(); ++i)
    out += (i ? ", " : " ") + value_ref(g, n.operands[i]);
  bool first = true;
  for (const AttrSpec& spec : schema.attrs) {
    if (!n.attrs.has(spec.name)) continue;  // an absent optional attribute
    if (custom && spec.name == "name") continue;
    out += first ? " {" : ", ";
    first = false;
    out += spec.name + "=";
    print_attr(n.attrs.get(spec.name), indent, out);
  }
  if (!first) out += '}';
  out += " :";
  for (size_t i = 0; i < n.results.size(); ++i) out += (i ? ", " : " ") + n.results[i].to_string();
}

// Prints "graph @name {", the statements at indent + 2 and "}" at `indent` (no final newline).
void print_graph(const Graph& g, int indent, std::string& out) {
  std::string pad(static_cast<size_t>(indent) + 2, ' ');
  out += "graph @" + g.name() + " {\n";
  for (const Node& n : g.nodes()) {
    out += pad;
    print_node(g, n, indent + 2, out);
    out += '\n';
  }
  out += pad + "return";
  for (size_t i = 0; i < g.outputs().size(); ++i)
    out += (i ? ", " : " ") + value_ref(g, g.outputs()[i]);
  out += '\n' + std::string(static_cast<size_t>(indent), ' ') + '}';
}

// ============================================================================ lexer

enum class Tok : uint8_t {
  End,
  Ident,   // op names, dtypes, keywords, attribute names: [A-Za-z_][A-Za-z0-9_]*, and dotted
           // custom op names: such words joined by '.' ("my.softplus")
  Value,   // %NAME (str holds NAME)
  Global,  // @NAME (str holds NAME)
  Int,
  Float,   // includes inf, -inf, nan
  String,  // str holds the unescaped contents
  Punct,   // one of = : , { } [ ] < > #
};

struct Token {
  Tok kind = Tok::End;
  std::string_view text;  // the source slice
  std::string str;
  int line = 1;
  int col = 1;
};

[[noreturn]] void fail_at(int line, int col, const std::string& what) {
  throw Error("line " + std::to_string(line) + ":" + std::to_string(col) + ": " + what);
}
[[noreturn]] void fail_at(const Token& t, const std::string& what) { fail_at(t.line, t.col, what); }

std::string describe(const Token& t) {
  if (t.kind == Tok::End) return "end of input";
  if (t.kind == Tok::String) return "string " + std::string(t.text);
  return "'" + std::string(t.text) + "'";
}

[[noreturn]] void fail_expected(const Token& t, const std::string& expected) {
  fail_at(t, "expected " + expected + ", found " + describe(t));
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_ident_char(char c) { return is_ident_start(c) || is_digit(c); }
// NAME := [A-Za-z0-9_./-]+ (the same set Graph accepts for node names).
bool is_name_char(char c) { return is_ident_char(c) || c == '.' || c == '/' || c == '-'; }

// Tokens are lexed on demand, so a lexical error surfaces only when the parser reaches it.
class Lexer {
 public:
  explicit Lexer(std::string_view src) : src_(src) {}

  const Token& peek() {
    if (!current_) current_ = lex();
    return *current_;
  }
  Token take() {
    Token t = peek();
    current_.reset();
    return t;
  }

 private:
  char at(size_t p) const { return p < src_.size() ? src_[p] : '\0'; }

  void advance(size_t n) {
    for (size_t i = 0; i < n && pos_ < src_.size(); ++i, ++pos_) {
      if (src_[pos_] == '\n') {
        ++line_;
        col_ = 1;
      } else {
        ++col_;
      }
    }
  }

  void skip_space_and_comments() {
    while (pos_ < src_.size()) {
      char c = src_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        advance(1);
      } else if (c == '/' && at(pos_ + 1) == '/') {
        while (pos_ < src_.size() && src_[pos_] != '\n') advance(1);
      } else {
        return;
      }
    }
  }

  Token make(Tok kind, size_t len, int line, int col) {
    Token t{kind, src_.substr(pos_, len), {}, line, col};
    advance(len);
    return t;
  }

  Token lex() {
    skip_space_and_comments();
    int line = line_, col = col_;
    if (pos_ >= src_.size()) return Token{Tok::End, {}, {}, line, col};
    char c = src_[pos_];
    if (c == '%' || c == '@') {
      size_t n = 1;
      while (is_name_char(at(pos_ + n))) ++n;
      if (n == 1)
        fail_at(line, col,
                std::string("expected a name after '") + c + "', found " +
                    (pos_ + 1 < src_.size() ? "'" + std::string(1, at(pos_ + 1)) + "'"
                                            : std::string("end of input")));
      Token t = make(c == '%' ? Tok::Value : Tok::Global, n, line, col);
      t.str = std::string(t.text.substr(1));
      return t;
    }
    if (is_ident_start(c)) {
      size_t n = 1;
      while (is_ident_char(at(pos_ + n)) ||
             (at(pos_ + n) == '.' && is_ident_start(at(pos_ + n + 1))))
        ++n;
      std::string_view word = src_.substr(pos_, n);
      return make(word == "inf" || word == "nan" ? Tok::Float : Tok::Ident, n, line, col);
    }
    if (is_digit(c) || c == '-') return lex_number(line, col);
    if (c == '"') return lex_string(line, col);
    if (std::strchr("=:,{}[]<>#", c) != nullptr) return make(Tok::Punct, 1, line, col);
    fail_at(line, col, "unexpected character '" + std::string(1, c) + "'");
  }

  // INT := -?[0-9]+; FLOAT adds a fraction and/or an exponent, or is -inf. The value is read
  // later with std::from_chars, which also rejects forms this loose scan lets through.
  Token lex_number(int line, int col) {
    size_t p = pos_;
    if (at(p) == '-') {
      ++p;
      if ((src_.substr(p, 3) == "inf" || src_.substr(p, 3) == "nan") && !is_ident_char(at(p + 3)))
        return make(Tok::Float, 4, line, col);
      if (!is_digit(at(p))) fail_at(line, col, "unexpected character '-'");
    }
    bool is_float = false;
    while (is_digit(at(p))) ++p;
    if (at(p) == '.') {
      is_float = true;
      ++p;
      while (is_digit(at(p))) ++p;
    }
    if (at(p) == 'e' || at(p) == 'E') {
      size_t q = p + 1;
      if (at(q) == '+' || at(q) == '-') ++q;
      if (is_digit(at(q))) {
        is_float = true;
        p = q;
        while (is_digit(at(p))) ++p;
      }
    }
    return make(is_float ? Tok::Float : Tok::Int, p - pos_, line, col);
  }

  // STRING := '"' ... '"' with escapes \" \\ \n, on one line.
  Token lex_string(int line, int col) {
    std::string value;
    size_t p = pos_ + 1;
    while (true) {
      if (p >= src_.size() || src_[p] == '\n') fail_at(line, col, "unterminated string");
      char c = src_[p];
      if (c == '"') break;
      if (c == '\\') {
        char e = at(p + 1);
        if (e == '"' || e == '\\') {
          value += e;
        } else if (e == 'n') {
          value += '\n';
        } else {
          // The column of the backslash: the string is on one line.
          fail_at(line, col + static_cast<int>(p - pos_),
                  "unknown escape '\\" + std::string(1, e) + "' in string (use \\\" \\\\ \\n)");
        }
        p += 2;
        continue;
      }
      value += c;
      ++p;
    }
    Token t = make(Tok::String, p + 1 - pos_, line, col);
    t.str = std::move(value);
    return t;
  }

  std::string_view src_;
  size_t pos_ = 0;
  int line_ = 1;
  int col_ = 1;
  std::optional<Token> current_;
};

// ============================================================================ parser

const char* article(std::string_view noun) {
  return std::strchr("aeiou", noun.empty() ? 'x' : noun[0]) != nullptr ? "an " : "a ";
}

std::string types_to_string(const std::vector<TensorType>& ts) {
  std::string s;
  for (size_t i = 0; i < ts.size(); ++i) s += (i ? ", " : "") + ts[i].to_string();
  return s;
}

// Builds the graph through the public Graph API, so a parsed graph obeys every check a built
// one does; each failure is rethrown with the line:column of the text that caused it.
class TextParser {
 public:
  explicit TextParser(std::string_view text) : lex_(text) {}

  // graph := 'graph' '@' NAME '{' stmt* 'return' [value (',' value)*] '}'
  Graph parse_graph() {
    // Nesting recurses on the native stack; bound it so hostile input cannot overflow it.
    // Real bodies nest once (elementwise_region bodies may not hold regions).
    if (++depth_ > kMaxNesting)
      fail_at(lex_.peek(), "graphs nested more than " + std::to_string(kMaxNesting) + " deep");
    expect_keyword("graph");
    Token name = lex_.take();
    if (name.kind != Tok::Global) fail_expected(name, "'@' and a graph name");
    expect_punct('{');
    Graph g(name.str);
    while (!is_keyword(lex_.peek(), "return")) {
      if (lex_.peek().kind != Tok::Value) fail_expected(lex_.peek(), "a statement or 'return'");
      parse_stmt(g);
    }
    lex_.take();
    std::vector<Value> outs;
    if (lex_.peek().kind == Tok::Value) {
      outs.push_back(parse_value(g));
      while (accept_punct(',')) outs.push_back(parse_value(g));
    }
    expect_punct('}');
    g.set_outputs(std::move(outs));
    --depth_;
    return g;
  }

  void expect_end() {
    if (lex_.peek().kind != Tok::End) fail_expected(lex_.peek(), "end of input");
  }

 private:
  static bool is_keyword(const Token& t, std::string_view word) {
    return t.kind == Tok::Ident && t.text == word;
  }
  static bool is_punct(const Token& t, char c) {
    return t.kind == Tok::Punct && t.text.size() == 1 && t.text[0] == c;
  }

  void expect_keyword(std::string_view word) {
    if (!is_keyword(lex_.peek(), word)) fail_expected(lex_.peek(), "'" + std::string(word) + "'");
    lex_.take();
  }
  void expect_punct(char c) {
    if (!is_punct(lex_.peek(), c)) fail_expected(lex_.peek(), "'" + std::string(1, c) + "'");
    lex_.take();
  }
  bool accept_punct(char c) {
    if (!is_punct(lex_.peek(), c)) return false;
    lex_.take();
    return true;
  }

  static int64_t int_value(const Token& t) {
    int64_t v = 0;
    auto [end, ec] = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
    if (ec == std::errc::result_out_of_range)
      fail_at(t, "integer " + std::string(t.text) + " does not fit in int64");
    if (ec != std::errc() || end != t.text.data() + t.text.size())
      fail_at(t, "invalid integer '" + std::string(t.text) + "'");
    return v;
  }

  Token expect_int(const std::string& what) {
    Token t = lex_.take();
    if (t.kind != Tok::Int) fail_expected(t, what);
    return t;
  }

  // A float literal read as F (double or float) with correct rounding; nan/inf are words.
  template <class F>
  static F float_value(const Token& t, DType as) {
    if (t.text == "nan") return std::numeric_limits<F>::quiet_NaN();
    if (t.text == "inf") return std::numeric_limits<F>::infinity();
    if (t.text == "-inf") return -std::numeric_limits<F>::infinity();
    if (t.text == "-nan") return -std::numeric_limits<F>::quiet_NaN();
    F v = 0;
    auto [end, ec] = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
    if (ec == std::errc::result_out_of_range)
      fail_at(t, "float " + std::string(t.text) + " is out of range for " +
                     std::string(dtype_name(as)));
    if (ec != std::errc() || end != t.text.data() + t.text.size())
      fail_at(t, "invalid number '" + std::string(t.text) + "'");
    return v;
  }

  // value := '%' NAME ['#' INT]
  Value parse_value(const Graph& g) {
    Token t = lex_.take();
    if (t.kind != Tok::Value) fail_expected(t, "a value");
    int32_t id = g.find(t.str);
    if (id < 0) fail_at(t, "use of undefined value %" + t.str);
    int64_t index = 0;
    if (accept_punct('#')) {
      index = int_value(expect_int("a result index"));
      size_t n = g.node(id).results.size();
      if (index < 0 || static_cast<uint64_t>(index) >= n)
        fail_at(t, "%" + t.str + " has " + std::to_string(n) + (n == 1 ? " result" : " results") +
                       ", #" + std::to_string(index) + " is out of range");
    }
    return Value{id, static_cast<int32_t>(index)};
  }

  // type := DTYPE '[' [INT (',' INT)*] ']'
  TensorType parse_type() {
    Token t = lex_.take();
    if (t.kind != Tok::Ident) fail_expected(t, "a type");
    std::optional<DType> dtype = parse_dtype(t.text);
    if (!dtype) fail_at(t, "unknown dtype '" + std::string(t.text) + "'");
    expect_punct('[');
    Shape shape;
    if (!is_punct(lex_.peek(), ']')) {
      do {
        Token d = expect_int("a dimension");
        int64_t v = int_value(d);
        if (v < 0) fail_at(d, "negative dimension " + std::to_string(v));
        shape.dims().push_back(v);
      } while (accept_punct(','));
    }
    expect_punct(']');
    try {
      shape.numel();
    } catch (const Error& e) {
      fail_at(t, e.what());
    }
    return {*dtype, std::move(shape)};
  }

  // Writes one element token into t[i], checking it is a literal of t's dtype.
  static void set_element(Tensor& t, int64_t i, const Token& e) {
    DType d = t.dtype();
    if (is_bool(d)) {
      if (!is_keyword(e, "true") && !is_keyword(e, "false")) fail_expected(e, "true or false");
      t.set_i64(i, e.text == "true");
      return;
    }
    if (is_integer(d)) {
      if (e.kind != Tok::Int) fail_expected(e, "an integer element");
      int64_t v = int_value(e);
      if (wrap_to_int(v, d) != v)
        fail_at(e, std::string(e.text) + " is out of range for " + std::string(dtype_name(d)));
      t.set_i64(i, v);
      return;
    }
    if (e.kind != Tok::Float && e.kind != Tok::Int) fail_expected(e, "a float element");
    // f32 is read directly as float: reading a double first could round twice.
    double v =
        d == DType::f32 ? static_cast<double>(float_value<float>(e, d)) : float_value<double>(e, d);
    t.set_f64(i, v);
    if (std::isinf(t.get_f64(i)) && !std::isinf(v))
      fail_at(e, std::string(e.text) + " is out of range for " + std::string(dtype_name(d)));
  }

  // 2^24 elements (64 MiB of f32, 128 MiB of f64): at 2^28 a 90-byte text took 2 GB and 20 s
  // (the tensor, then its printed round trip) under the fuzzer's sanitizers.
  static constexpr int64_t kMaxSplatElements = int64_t{1} << 24;

  // 'dense' '<' type ':' [elem (',' elem)*] '>'  |  'splat' '<' type ':' elem '>'
  Tensor parse_tensor() {
    Token kw = lex_.take();
    bool splat = kw.text == "splat";
    expect_punct('<');
    TensorType type = parse_type();
    expect_punct(':');
    // Elements are collected before allocating, so a wrong count fails before a huge shape
    // allocates.
    std::vector<Token> elems;
    if (splat || !is_punct(lex_.peek(), '>')) {
      elems.push_back(lex_.take());
      while (!splat && accept_punct(',')) elems.push_back(lex_.take());
    }
    expect_punct('>');
    int64_t numel = type.shape.numel();
    if (!splat && static_cast<int64_t>(elems.size()) != numel)
      fail_at(kw, "dense<" + type.to_string() + "> needs " + std::to_string(numel) +
                      " elements, found " + std::to_string(elems.size()));
    // A few bytes of text must not allocate gigabytes: text constants are for literals, and
    // weights belong in params (set per executable), so a splat is capped at 2^24 elements.
    if (splat && numel > kMaxSplatElements)
      fail_at(kw, "splat<" + type.to_string() + "> has " + std::to_string(numel) +
                      " elements; text constants are limited to " +
                      std::to_string(kMaxSplatElements) + " (use a param for large tensors)");
    Tensor t;
    try {
      t = Tensor(type.dtype, type.shape);
    } catch (const Error& e) {
      fail_at(kw, e.what());  // a splat too large to allocate
    }
    if (splat) {
      Tensor one(type.dtype, Shape{});
      set_element(one, 0, elems[0]);  // validates the literal even when the tensor is empty
      auto width = static_cast<size_t>(dtype_size(type.dtype));
      for (int64_t i = 0; i < numel; ++i)
        std::memcpy(t.data() + static_cast<size_t>(i) * width, one.data(), width);
    } else {
      for (int64_t i = 0; i < numel; ++i) set_element(t, i, elems[static_cast<size_t>(i)]);
    }
    return t;
  }

  Attr parse_attr(AttrType want) {
    const Token& t = lex_.peek();
    switch (t.kind) {
      case Tok::Int:
        return int_value(lex_.take());
      case Tok::Float:
        return float_value<double>(lex_.take(), DType::f64);
      case Tok::String:
        return lex_.take().str;
      case Tok::Punct: {
        if (!is_punct(t, '[')) break;
        lex_.take();
        if (want == AttrType::Graphs) {  // '[' [graph (',' graph)*] ']'
          GraphList gs;
          if (!is_punct(lex_.peek(), ']')) {
            do gs.push_back(std::make_shared<const Graph>(parse_graph()));
            while (accept_punct(','));
          }
          expect_punct(']');
          return gs;
        }
        std::vector<int64_t> v;
        if (!is_punct(lex_.peek(), ']')) {
          do v.push_back(int_value(expect_int("an integer")));
          while (accept_punct(','));
        }
        expect_punct(']');
        return v;
      }
      case Tok::Ident: {
        if (t.text == "true" || t.text == "false") return lex_.take().text == "true";
        if (t.text == "dense" || t.text == "splat") return parse_tensor();
        if (t.text == "graph") return std::make_shared<const Graph>(parse_graph());
        if (std::optional<DType> d = parse_dtype(t.text)) {
          lex_.take();
          return *d;
        }
        if (want == AttrType::DType) fail_at(t, "unknown dtype '" + std::string(t.text) + "'");
        break;
      }
      default:
        break;
    }
    fail_expected(t, "an attribute value");
  }

  // attrs := '{' NAME '=' attr (',' NAME '=' attr)* '}'
  AttrMap parse_attrs(const OpInfo& info) {
    expect_punct('{');
    AttrMap attrs;
    do {
      Token name = lex_.take();
      if (name.kind != Tok::Ident) fail_expected(name, "an attribute name");
      std::string key(name.text);
      const AttrSpec* spec = info.find_attr(key);
      if (!spec) {
        std::string known;
        for (const AttrSpec& a : info.attrs) known += (known.empty() ? "" : ", ") + a.name;
        fail_at(name, "unknown attribute '" + key + "' for op '" + std::string(info.name) +
                          "' (known: " + (known.empty() ? "none" : known) + ")");
      }
      if (attrs.has(key)) fail_at(name, "duplicate attribute '" + key + "'");
      expect_punct('=');
      Token start = lex_.peek();
      Attr value = parse_attr(spec->type);
      if (attr_type(value) != spec->type) {
        std::string_view want = attr_type_name(spec->type), got = attr_type_name(attr_type(value));
        fail_at(start, "attribute '" + key + "' of op '" + std::string(info.name) + "' must be " +
                           article(want) + std::string(want) + ", found " + article(got) +
                           std::string(got));
      }
      attrs.set(key, std::move(value));
    } while (accept_punct(','));
    expect_punct('}');
    return attrs;
  }

  // stmt := '%' NAME [':' INT] '=' OP [value (',' value)*] [attrs] ':' type (',' type)*
  void parse_stmt(Graph& g) {
    Token res = lex_.take();
    const std::string& name = res.str;
    int64_t count = 1;
    if (accept_punct(':')) {
      Token c = expect_int("a result count");
      count = int_value(c);
      if (count < 0) fail_at(c, "negative result count " + std::to_string(count));
    }
    if (g.find(name) >= 0) fail_at(res, "redefinition of %" + name);
    expect_punct('=');
    Token op_tok = lex_.take();
    if (op_tok.kind != Tok::Ident) fail_expected(op_tok, "an op name");
    std::optional<OpKind> op = op_from_name(op_tok.text);
    // Not a built-in: a registered custom op's name stands for custom_call {name=...}.
    const OpInfo* custom = op ? nullptr : custom_op_info(op_tok.text);
    if (custom) op = OpKind::CustomCall;
    if (!op) fail_at(op_tok, "unknown op '" + std::string(op_tok.text) + "'");
    const OpInfo& info = custom ? *custom : op_info(*op);

    std::vector<Value> operands;
    if (lex_.peek().kind == Tok::Value) {
      operands.push_back(parse_value(g));
      while (accept_punct(',')) operands.push_back(parse_value(g));
    }
    bool has_attrs = is_punct(lex_.peek(), '{');
    AttrMap attrs = has_attrs ? parse_attrs(info) : AttrMap{};
    if (custom) {
      if (attrs.has("name"))
        fail_at(op_tok, "custom op '" + std::string(info.name) +
                            "' takes its name from the op; remove the 'name' attribute");
      attrs.set("name", std::string(info.name));
    }
    expect_punct(':');
    Token types_at = lex_.peek();
    std::vector<TensorType> types;
    if (count > 0) {
      types.push_back(parse_type());
      while (accept_punct(',')) types.push_back(parse_type());
    }
    if (static_cast<int64_t>(types.size()) != count)
      fail_at(types_at, "expected " + std::to_string(count) + " result type" +
                            (count == 1 ? "" : "s") + " for %" + name + ", found " +
                            std::to_string(types.size()));

    if (*op == OpKind::Input || *op == OpKind::Param) {
      if (!operands.empty() || has_attrs)
        fail_at(op_tok, "'" + std::string(info.name) + "' takes no operands or attributes");
      if (count != 1)
        fail_at(res, "'" + std::string(info.name) + "' has 1 result, but %" + name + " declares " +
                         std::to_string(count));
      try {
        g.add_leaf(*op, name, types[0]);
      } catch (const Error& e) {
        fail_at(op_tok, e.what());
      }
      return;
    }
    try {
      g.emit(*op, std::move(operands), std::move(attrs), name);
    } catch (const Error& e) {
      fail_at(op_tok, e.what());
    }
    const std::vector<TensorType>& inferred = g.nodes().back().results;
    if (static_cast<int64_t>(inferred.size()) != count)
      fail_at(res, "'" + std::string(info.name) + "' has " + std::to_string(inferred.size()) +
                       (inferred.size() == 1 ? " result" : " results") + ", but %" + name +
                       " declares " + std::to_string(count));
    if (inferred != types)
      fail_at(types_at, "declared type " + types_to_string(types) + " of %" + name +
                            " does not match the inferred type " + types_to_string(inferred));
  }

  static constexpr int kMaxNesting = 64;
  Lexer lex_;
  int depth_ = 0;
};

}  // namespace

std::string Graph::to_string() const {
  std::string out;
  print_graph(*this, 0, out);
  return out + '\n';
}

Graph Graph::parse(std::string_view text) {
  TextParser parser(text);
  Graph g = parser.parse_graph();
  parser.expect_end();
  return g;
}

}  // namespace rlx
