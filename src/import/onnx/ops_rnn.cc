// ONNX RNN, GRU and LSTM, unrolled over the (concrete) sequence length: per direction, the
// input projection of every step is one matmul, then each step applies the cell's gate
// equations (ONNX's operator spec, gates in its order: GRU z r h, LSTM i o f c) to the previous
// state. Outputs Y [seq, dirs, batch, hidden] (layout 0) or [batch, seq, dirs, hidden]
// (layout 1), Y_h and (LSTM) Y_c [dirs, batch, hidden].
#include <cmath>

#include "importer.h"

namespace rlx::onnx::detail {

namespace {

enum class Cell { Rnn, Gru, Lstm };

int64_t gates(Cell cell) { return cell == Cell::Rnn ? 1 : cell == Cell::Gru ? 3 : 4; }

// An activation by its ONNX name, with its alpha/beta where it takes them.
using Act = std::function<Value(Graph&, Value)>;
Act activation(NodeContext& c, const std::string& name, double alpha, double beta) {
  auto k = [](Graph& g, Value x, double v) { return g.scalar(v, g.dtype(x)); };
  if (name == "Sigmoid") return [](Graph& g, Value x) { return g.logistic(x); };
  if (name == "Tanh") return [](Graph& g, Value x) { return g.tanh(x); };
  if (name == "Relu") return [](Graph& g, Value x) { return g.relu(x); };
  if (name == "Softsign")
    return [k](Graph& g, Value x) { return g.div(x, g.add(k(g, x, 1), g.abs(x))); };
  if (name == "Softplus") return [](Graph& g, Value x) { return g.softplus(x); };
  if (name == "LeakyRelu") return [alpha](Graph& g, Value x) { return g.leaky_relu(x, alpha); };
  if (name == "HardSigmoid")
    return [k, alpha, beta](Graph& g, Value x) {
      return g.min(g.max(g.add(g.mul(x, k(g, x, alpha)), k(g, x, beta)), k(g, x, 0)), k(g, x, 1));
    };
  if (name == "Affine")
    return [k, alpha, beta](Graph& g, Value x) {
      return g.add(g.mul(x, k(g, x, alpha)), k(g, x, beta));
    };
  if (name == "ScaledTanh")
    return [k, alpha, beta](Graph& g, Value x) {
      return g.mul(k(g, x, alpha), g.tanh(g.mul(x, k(g, x, beta))));
    };
  c.fail("activation '" + name + "' is not supported");
}

// Gate `i` (columns [i*h, (i+1)*h)) of the last axis.
Value gate(Graph& g, Value x, int64_t i, int64_t h) {
  const Shape& s = g.shape(x);
  std::vector<int64_t> lo(static_cast<size_t>(s.rank()), 0), hi = s.dims();
  lo.back() = i * h;
  hi.back() = (i + 1) * h;
  return g.slice(x, lo, hi);
}

// Direction `d` of a [dirs, ...] tensor, without the leading dim.
Value dir_of(Graph& g, Value x, int64_t d) {
  const Shape& s = g.shape(x);
  std::vector<int64_t> lo(static_cast<size_t>(s.rank()), 0), hi = s.dims();
  lo[0] = d;
  hi[0] = d + 1;
  std::vector<int64_t> rest(s.dims().begin() + 1, s.dims().end());
  return g.reshape(g.slice(x, lo, hi), rest);
}

void convert_rnn(NodeContext& c, Cell cell) {
  Graph& g = c.g;
  Value x = c.input(0), w = c.input(1), r = c.input(2);
  const bool batch_first = c.attr_int("layout", 0) != 0;
  if (batch_first) x = g.transpose(x, {1, 0, 2});  // -> [seq, batch, input]
  const Shape xs = g.shape(x);
  const int64_t seq = xs[0], batch = xs[1], h = c.attr_int("hidden_size", g.shape(r).dims().back());
  const std::string direction = c.attr_string("direction", "forward");
  const int64_t dirs = direction == "bidirectional" ? 2 : 1;
  c.require(direction == "forward" || direction == "reverse" || direction == "bidirectional",
            "direction must be forward, reverse or bidirectional");
  if (c.has_input(4)) {
    std::vector<int64_t> lens = c.static_ints(4, "sequence_lens");
    for (int64_t l : lens)
      c.require(l == seq, "sequence_lens shorter than the sequence are not supported");
  }
  const double clip = c.attr_float("clip", 0.0);
  const int64_t ng = gates(cell);
  // Activations: f, g (GRU, LSTM), h (LSTM), per direction.
  const std::vector<std::string> defaults =
      cell == Cell::Rnn   ? std::vector<std::string>{"Tanh"}
      : cell == Cell::Gru ? std::vector<std::string>{"Sigmoid", "Tanh"}
                          : std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"};
  std::vector<std::string> names;
  if (const auto* a = c.attr("activations"))
    for (const auto& s : a->strings()) names.push_back(s);
  const auto per_dir = defaults.size();
  if (names.empty())
    for (int64_t d = 0; d < dirs; ++d) names.insert(names.end(), defaults.begin(), defaults.end());
  c.require(names.size() == per_dir * static_cast<size_t>(dirs), "wrong number of activations");
  std::vector<double> alphas = c.attr_floats("activation_alpha"),
                      betas = c.attr_floats("activation_beta");
  auto act = [&](size_t i) {
    const std::string& n = names[i];
    const double a = i < alphas.size() ? alphas[i]
                                       : (n == "LeakyRelu"     ? 0.01
                                          : n == "HardSigmoid" ? 0.2
                                                               : 1.0);
    const double b = i < betas.size() ? betas[i]
                                      : (n == "HardSigmoid"  ? 0.5
                                         : n == "ScaledTanh" ? 1.0
                                                             : 0.0);
    return activation(c, n, a, b);
  };
  std::vector<Value> ys, hs, cs;
  for (int64_t d = 0; d < dirs; ++d) {
    const bool reverse = direction == "reverse" || d == 1;
    Act f = act(static_cast<size_t>(d) * per_dir);
    Act gg = per_dir > 1 ? act(static_cast<size_t>(d) * per_dir + 1) : f;
    Act hh = per_dir > 2 ? act(static_cast<size_t>(d) * per_dir + 2) : f;
    Value wd = dir_of(g, w, d), rd = dir_of(g, r, d);  // [ng*h, in], [ng*h, h]
    Value xw = g.matmul(x, g.transpose(wd, {1, 0}));   // [seq, batch, ng*h]
    std::optional<Value> wb, rb;
    if (c.has_input(3)) {
      Value bd = dir_of(g, c.input(3), d);  // [2*ng*h]
      wb = g.slice(bd, {0}, {ng * h});
      rb = g.slice(bd, {ng * h}, {2 * ng * h});
      if (cell != Cell::Gru)
        xw = g.add(xw, g.add(*wb, *rb));
      else
        xw = g.add(xw, *wb);
    }
    Value zero = g.broadcast_in_dim(g.scalar(0, g.dtype(x)), {batch, h}, {});
    Value ht = c.has_input(5) ? dir_of(g, c.input(5), d) : zero;
    Value ct = cell == Cell::Lstm && c.has_input(6) ? dir_of(g, c.input(6), d) : zero;
    std::optional<Value> peep;
    if (cell == Cell::Lstm && c.has_input(7)) peep = dir_of(g, c.input(7), d);  // [3h]: i o f
    Value rt = g.transpose(rd, {1, 0});                                         // [h, ng*h]
    std::vector<Value> steps(static_cast<size_t>(seq));
    auto clipped = [&](Value v) {
      return clip > 0 ? g.clamp(g.scalar(-clip, g.dtype(v)), v, g.scalar(clip, g.dtype(v))) : v;
    };
    for (int64_t i = 0; i < seq; ++i) {
      const int64_t t = reverse ? seq - 1 - i : i;
      Value xt = g.reshape(g.slice(xw, {t, 0, 0}, {t + 1, batch, ng * h}), {batch, ng * h});
      if (cell == Cell::Rnn) {
        ht = f(g, clipped(g.add(xt, g.matmul(ht, rt))));
      } else if (cell == Cell::Gru) {
        Value hr = g.matmul(ht, rt);  // [batch, 3h]
        if (rb) hr = g.add(hr, *rb);
        Value z = f(g, clipped(g.add(gate(g, xt, 0, h), gate(g, hr, 0, h))));
        Value rr = f(g, clipped(g.add(gate(g, xt, 1, h), gate(g, hr, 1, h))));
        Value cand;
        if (c.attr_int("linear_before_reset", 0) != 0) {
          cand = g.add(gate(g, xt, 2, h), g.mul(rr, gate(g, hr, 2, h)));
        } else {
          Value rh = g.matmul(g.mul(rr, ht), gate(g, rt, 2, h));
          if (rb) rh = g.add(rh, gate(g, *rb, 2, h));
          cand = g.add(gate(g, xt, 2, h), rh);
        }
        Value hn = gg(g, clipped(cand));
        ht = g.add(g.mul(g.sub(g.scalar(1, g.dtype(z)), z), hn), g.mul(z, ht));
      } else {
        Value pre = g.add(xt, g.matmul(ht, rt));  // gates i o f c
        Value pi = gate(g, pre, 0, h), po = gate(g, pre, 1, h), pf = gate(g, pre, 2, h);
        if (peep) {
          pi = g.add(pi, g.mul(gate(g, *peep, 0, h), ct));
          pf = g.add(pf, g.mul(gate(g, *peep, 2, h), ct));
        }
        Value ig = f(g, clipped(pi));
        Value fg = c.attr_int("input_forget", 0) != 0 ? g.sub(g.scalar(1, g.dtype(ig)), ig)
                                                      : f(g, clipped(pf));
        Value cand = gg(g, clipped(gate(g, pre, 3, h)));
        ct = g.add(g.mul(fg, ct), g.mul(ig, cand));
        if (peep) po = g.add(po, g.mul(gate(g, *peep, 1, h), ct));
        ht = g.mul(f(g, clipped(po)), hh(g, ct));
      }
      steps[static_cast<size_t>(t)] = g.reshape(ht, {1, 1, batch, h});
    }
    ys.push_back(g.concatenate(steps, 0));  // [seq, 1, batch, h]
    hs.push_back(g.reshape(ht, {1, batch, h}));
    cs.push_back(g.reshape(ct, {1, batch, h}));
  }
  Value y = ys.size() == 1 ? ys[0] : g.concatenate(ys, 1);
  Value yh = hs.size() == 1 ? hs[0] : g.concatenate(hs, 0);
  Value yc = cs.size() == 1 ? cs[0] : g.concatenate(cs, 0);
  if (batch_first) {
    y = g.transpose(y, {2, 0, 1, 3});
    yh = g.transpose(yh, {1, 0, 2});
    yc = g.transpose(yc, {1, 0, 2});
  }
  c.set_output(0, y);
  c.set_output(1, yh);
  if (cell == Cell::Lstm) c.set_output(2, yc);
}

}  // namespace

void add_rnn_converters(ConverterTable& t) {
  t[{"", "RNN"}] = [](NodeContext& c) { convert_rnn(c, Cell::Rnn); };
  t[{"", "GRU"}] = [](NodeContext& c) { convert_rnn(c, Cell::Gru); };
  t[{"", "LSTM"}] = [](NodeContext& c) { convert_rnn(c, Cell::Lstm); };
}

}  // namespace rlx::onnx::detail
