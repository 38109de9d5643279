// ONNX elementwise ops: unary math and activations (one table row each), binary arithmetic,
// comparison and logic (numpy broadcasting, as rlx's binary ops), variadic Max/Min/Sum/Mean,
// Clip, Where, Cast, Mod, Pow, IsNaN/IsInf, Identity and inference-mode Dropout.
#include <cmath>
#include <numbers>

#include "importer.h"

namespace rlx::onnx::detail {

namespace {

Value k(Graph& g, Value like, double v) { return g.scalar(v, g.dtype(like)); }

using Unary = Value (*)(NodeContext&, Value);
using Binary = Value (*)(Graph&, Value, Value);

// Inverse trigonometric and hyperbolic functions rlx has no op for, composed from atan, log,
// exp and sqrt (exact at the special points ONNX's tests use: +-1, 0, +-inf).
Value asin(Graph& g, Value x) {  // atan(x / sqrt(1 - x^2))
  return g.atan(g.div(x, g.sqrt(g.sub(k(g, x, 1), g.mul(x, x)))));
}
Value acos(Graph& g, Value x) {  // 2 atan(sqrt((1 - x) / (1 + x)))
  return g.mul(k(g, x, 2), g.atan(g.sqrt(g.div(g.sub(k(g, x, 1), x), g.add(k(g, x, 1), x)))));
}
Value sinh(Graph& g, Value x) {  // (e^x - e^-x) / 2 = (expm1(x) - expm1(-x)) / 2
  return g.mul(k(g, x, 0.5), g.sub(g.expm1(x), g.expm1(g.neg(x))));
}
Value cosh(Graph& g, Value x) { return g.mul(k(g, x, 0.5), g.add(g.exp(x), g.exp(g.neg(x)))); }
Value asinh(Graph& g, Value x) {  // sign(x) log(|x| + sqrt(x^2 + 1))
  Value a = g.abs(x);
  return g.mul(g.sign(x), g.log(g.add(a, g.sqrt(g.add(g.mul(a, a), k(g, x, 1))))));
}
Value acosh(Graph& g, Value x) {  // log(x + sqrt(x^2 - 1))
  return g.log(g.add(x, g.sqrt(g.sub(g.mul(x, x), k(g, x, 1)))));
}
Value atanh(Graph& g, Value x) {  // log((1 + x) / (1 - x)) / 2
  return g.mul(k(g, x, 0.5), g.log(g.div(g.add(k(g, x, 1), x), g.sub(k(g, x, 1), x))));
}

// x > 0 ? x : alpha * (e^x - 1)
Value elu(Graph& g, Value x, double alpha) {
  return g.select(g.gt(x, k(g, x, 0)), x, g.mul(k(g, x, alpha), g.expm1(x)));
}

// min(1, max(0, alpha x + beta))
Value hard_sigmoid(Graph& g, Value x, double alpha, double beta) {
  Value y = g.add(g.mul(x, k(g, x, alpha)), k(g, x, beta));
  return g.clamp(k(g, x, 0), y, k(g, x, 1));
}

// One row per unary op: the ONNX name and its rlx form (attributes read from the context).
const std::pair<const char*, Unary> kUnary[] = {
    {"Abs", [](NodeContext& c, Value x) { return c.g.abs(x); }},
    {"Neg", [](NodeContext& c, Value x) { return c.g.neg(x); }},
    {"Sign", [](NodeContext& c, Value x) { return c.g.sign(x); }},
    {"Exp", [](NodeContext& c, Value x) { return c.g.exp(x); }},
    {"Log", [](NodeContext& c, Value x) { return c.g.log(x); }},
    {"Sqrt", [](NodeContext& c, Value x) { return c.g.sqrt(x); }},
    {"Reciprocal", [](NodeContext& c, Value x) { return c.g.div(k(c.g, x, 1), x); }},
    {"Sin", [](NodeContext& c, Value x) { return c.g.sin(x); }},
    {"Cos", [](NodeContext& c, Value x) { return c.g.cos(x); }},
    {"Tan", [](NodeContext& c, Value x) { return c.g.tan(x); }},
    {"Atan", [](NodeContext& c, Value x) { return c.g.atan(x); }},
    {"Asin", [](NodeContext& c, Value x) { return asin(c.g, x); }},
    {"Acos", [](NodeContext& c, Value x) { return acos(c.g, x); }},
    {"Sinh", [](NodeContext& c, Value x) { return sinh(c.g, x); }},
    {"Cosh", [](NodeContext& c, Value x) { return cosh(c.g, x); }},
    {"Tanh", [](NodeContext& c, Value x) { return c.g.tanh(x); }},
    {"Asinh", [](NodeContext& c, Value x) { return asinh(c.g, x); }},
    {"Acosh", [](NodeContext& c, Value x) { return acosh(c.g, x); }},
    {"Atanh", [](NodeContext& c, Value x) { return atanh(c.g, x); }},
    {"Erf", [](NodeContext& c, Value x) { return c.g.erf(x); }},
    {"Floor", [](NodeContext& c, Value x) { return c.g.floor(x); }},
    {"Ceil", [](NodeContext& c, Value x) { return c.g.ceil(x); }},
    {"Round", [](NodeContext& c, Value x) { return c.g.round(x); }},
    {"Not", [](NodeContext& c, Value x) { return c.g.logical_not(x); }},
    {"BitwiseNot", [](NodeContext& c, Value x) { return c.g.logical_not(x); }},
    {"Sigmoid", [](NodeContext& c, Value x) { return c.g.logistic(x); }},
    {"Relu", [](NodeContext& c, Value x) { return c.g.relu(x); }},
    {"Softplus", [](NodeContext& c, Value x) { return c.g.softplus(x); }},
    {"Softsign", [](NodeContext& c, Value x) {  // x / (1 + |x|)
       return c.g.div(x, c.g.add(k(c.g, x, 1), c.g.abs(x)));
     }},
    {"Mish", [](NodeContext& c, Value x) { return c.g.mul(x, c.g.tanh(c.g.softplus(x))); }},
    {"LeakyRelu", [](NodeContext& c, Value x) {
       return c.g.leaky_relu(x, c.attr_float("alpha", 0.01));
     }},
    {"Elu", [](NodeContext& c, Value x) { return elu(c.g, x, c.attr_float("alpha", 1.0)); }},
    {"Selu", [](NodeContext& c, Value x) {
       double alpha = c.attr_float("alpha", 1.67326319217681884765625);
       double gamma = c.attr_float("gamma", 1.05070102214813232421875);
       return c.g.mul(k(c.g, x, gamma), elu(c.g, x, alpha));
     }},
    {"Celu", [](NodeContext& c, Value x) {  // max(0, x) + min(0, alpha (e^(x/alpha) - 1))
       Graph& g = c.g;
       double alpha = c.attr_float("alpha", 1.0);
       Value neg = g.mul(k(g, x, alpha), g.expm1(g.div(x, k(g, x, alpha))));
       return g.add(g.max(x, k(g, x, 0)), g.min(neg, k(g, x, 0)));
     }},
    {"ThresholdedRelu", [](NodeContext& c, Value x) {
       return c.g.select(c.g.gt(x, k(c.g, x, c.attr_float("alpha", 1.0))), x, k(c.g, x, 0));
     }},
    {"HardSigmoid", [](NodeContext& c, Value x) {
       return hard_sigmoid(c.g, x, c.attr_float("alpha", 0.2), c.attr_float("beta", 0.5));
     }},
    {"HardSwish", [](NodeContext& c, Value x) {
       return c.g.mul(x, hard_sigmoid(c.g, x, 1.0 / 6, 0.5));
     }},
    {"Swish", [](NodeContext& c, Value x) {
       return c.g.mul(x, c.g.logistic(c.g.mul(x, k(c.g, x, c.attr_float("alpha", 1.0)))));
     }},
    {"Gelu", [](NodeContext& c, Value x) {
       std::string approx = c.attr_string("approximate", "none");
       c.require(approx == "none" || approx == "tanh",
                 "attribute 'approximate' must be 'none' or 'tanh', got '" + approx + "'");
       return approx == "tanh" ? c.g.gelu_tanh(x) : c.g.gelu(x);
     }},
    {"Shrink", [](NodeContext& c, Value x) {
       Graph& g = c.g;
       double bias = c.attr_float("bias", 0.0), lambd = c.attr_float("lambd", 0.5);
       Value lo = g.lt(x, k(g, x, -lambd)), hi = g.gt(x, k(g, x, lambd));
       return g.select(lo, g.add(x, k(g, x, bias)),
                       g.select(hi, g.sub(x, k(g, x, bias)), k(g, x, 0)));
     }},
    {"IsNaN", [](NodeContext& c, Value x) { return c.g.ne(x, x); }},
    {"IsInf", [](NodeContext& c, Value x) {
       Graph& g = c.g;
       Value pos = g.eq(x, k(g, x, INFINITY)), neg = g.eq(x, k(g, x, -INFINITY));
       bool want_pos = c.attr_int("detect_positive", 1) != 0;
       bool want_neg = c.attr_int("detect_negative", 1) != 0;
       if (want_pos && want_neg) return g.logical_or(pos, neg);
       if (want_pos) return pos;
       if (want_neg) return neg;
       return g.ne(x, x) /* never true for non-NaN */;
     }},
    {"Identity", [](NodeContext&, Value x) { return x; }},
};

// One row per binary op with numpy broadcasting.
const std::pair<const char*, Binary> kBinary[] = {
    {"Add", [](Graph& g, Value a, Value b) { return g.add(a, b); }},
    {"Sub", [](Graph& g, Value a, Value b) { return g.sub(a, b); }},
    {"Mul", [](Graph& g, Value a, Value b) { return g.mul(a, b); }},
    {"Div", [](Graph& g, Value a, Value b) { return g.div(a, b); }},
    {"And", [](Graph& g, Value a, Value b) { return g.logical_and(a, b); }},
    {"Or", [](Graph& g, Value a, Value b) { return g.logical_or(a, b); }},
    {"Xor", [](Graph& g, Value a, Value b) { return g.logical_xor(a, b); }},
    {"BitwiseAnd", [](Graph& g, Value a, Value b) { return g.logical_and(a, b); }},
    {"BitwiseOr", [](Graph& g, Value a, Value b) { return g.logical_or(a, b); }},
    {"BitwiseXor", [](Graph& g, Value a, Value b) { return g.logical_xor(a, b); }},
    {"Equal", [](Graph& g, Value a, Value b) { return g.eq(a, b); }},
    {"Less", [](Graph& g, Value a, Value b) { return g.lt(a, b); }},
    {"LessOrEqual", [](Graph& g, Value a, Value b) { return g.le(a, b); }},
    {"Greater", [](Graph& g, Value a, Value b) { return g.gt(a, b); }},
    {"GreaterOrEqual", [](Graph& g, Value a, Value b) { return g.ge(a, b); }},
    {"PRelu",
     [](Graph& g, Value x, Value slope) {  // x < 0 ? slope x : x
       return g.select(g.lt(x, k(g, x, 0)), g.mul(x, slope), x);
     }},
};

// Variadic ops folded left to right (numpy broadcasting at each step).
const std::pair<const char*, Binary> kVariadic[] = {
    {"Max", [](Graph& g, Value a, Value b) { return g.max(a, b); }},
    {"Min", [](Graph& g, Value a, Value b) { return g.min(a, b); }},
    {"Sum", [](Graph& g, Value a, Value b) { return g.add(a, b); }},
    {"Mean", [](Graph& g, Value a, Value b) { return g.add(a, b); }},
};

// Cast's target: ONNX TensorProto.DataType -> rlx dtype, or a failure naming the type.
DType target_dtype(NodeContext& c, int64_t to) {
  std::optional<DType> dt = dtype_of(static_cast<int32_t>(to));
  if (!dt)
    c.fail("cast to " + onnx_elem_name(static_cast<int32_t>(to)) +
           ", which rlx does not support (f32, f16, bf16, f64, i8, u8, i32, i64, bool)");
  return *dt;
}

void convert_pow(NodeContext& c) {
  Graph& g = c.g;
  Value x = c.input(0), y = c.input(1);
  DType xt = g.dtype(x), yt = g.dtype(y);
  if (xt == yt) return c.set_output(0, g.pow(x, y));
  // Pow(T, T1): the result has the base's type. A float exponent of an integer base is
  // computed in the exponent's float type and cast back, as onnx's reference does.
  if (is_float(xt)) return c.set_output(0, g.pow(x, g.convert(y, xt)));
  if (is_float(yt)) return c.set_output(0, g.convert(g.pow(g.convert(x, yt), y), xt));
  c.set_output(0, g.pow(x, g.convert(y, xt)));
}

void convert_mod(NodeContext& c) {
  Graph& g = c.g;
  Value x = c.input(0), y = c.input(1);
  Value r = g.rem(x, y);  // sign of x (C fmod)
  if (c.attr_int("fmod", 0) != 0) return c.set_output(0, r);
  // Python's % (numpy.mod): the sign of the divisor. r + y where r != 0 and sign(r) != sign(y).
  Value zero = k(g, r, 0);
  Value fix = g.logical_and(g.ne(r, zero), g.ne(g.lt(r, zero), g.lt(y, k(g, y, 0))));
  c.set_output(0, g.select(fix, g.add(r, y), r));
}

void convert_clip(NodeContext& c) {
  Graph& g = c.g;
  Value x = c.input(0);
  std::optional<Value> lo, hi;
  if (c.opset < 11) {
    if (c.has_attr("min")) lo = k(g, x, c.attr_float("min", 0));
    if (c.has_attr("max")) hi = k(g, x, c.attr_float("max", 0));
  } else {
    lo = c.optional_input(1);
    hi = c.optional_input(2);
  }
  if (lo && hi) return c.set_output(0, g.clamp(*lo, x, *hi));  // one step of a region
  if (lo) x = g.max(x, *lo);
  if (hi) x = g.min(x, *hi);
  c.set_output(0, x);
}

void convert_dropout(NodeContext& c) {
  // Inference: the identity. training_mode (opset 12+), when given, must be false.
  if (c.opset >= 12 && c.has_input(2)) {
    std::optional<Tensor> t = c.static_input(2);
    c.require(t.has_value() && t->numel() == 1 && t->get_i64(0) == 0,
              "training_mode must be a constant false (rlx imports inference graphs)");
  }
  Value x = c.input(0);
  c.set_output(0, x);
  if (c.wants_output(1))
    c.set_output(1, c.g.broadcast_in_dim(c.g.scalar(1, DType::bool_), c.g.shape(x).dims(), {}));
}

}  // namespace

void add_elementwise_converters(ConverterTable& t) {
  for (const auto& [name, fn] : kUnary)
    t[{"", name}] = [f = fn](NodeContext& c) { c.set_output(0, f(c, c.input(0))); };
  for (const auto& [name, fn] : kBinary)
    t[{"", name}] = [f = fn](NodeContext& c) { c.set_output(0, f(c.g, c.input(0), c.input(1))); };
  for (const auto& [name, fn] : kVariadic) {
    bool mean = std::string_view(name) == "Mean";
    t[{"", name}] = [f = fn, mean](NodeContext& c) {
      std::vector<Value> xs = c.inputs();
      c.require(!xs.empty(), "needs at least one input");
      Value acc = xs[0];
      for (size_t i = 1; i < xs.size(); ++i) acc = f(c.g, acc, xs[i]);
      if (mean) acc = c.g.div(acc, k(c.g, acc, static_cast<double>(xs.size())));
      c.set_output(0, acc);
    };
  }
  // A conv's output times / plus / minus a per-channel value known at import time, when
  // nothing else reads the conv's output: folded into the conv's weights and bias (ORT's
  // ConvMulFusion / ConvAddFusion; PaddleOCR's learnable affine blocks after each conv).
  for (const char* name : {"Mul", "Add", "Sub"}) {
    const std::string op = name;
    t[{"", op}] = [op, f = t.at({"", op})](NodeContext& c) {
      for (int i = 0; i < 2 && c.num_inputs() == 2; ++i) {
        if (op == "Sub" && i == 1) break;  // t - conv would negate the weights: not worth it
        std::optional<Tensor> k = c.static_input(1 - i);
        if (!k || c.uses(i) != 1 || !is_float(k->dtype())) continue;
        std::optional<Tensor> scale, shift;
        if (op == "Mul") {
          scale = k;
        } else if (op == "Add") {
          shift = k;
        } else {
          Tensor neg(k->dtype(), k->shape());
          for (int64_t j = 0; j < k->numel(); ++j) neg.set_f64(j, -k->get_f64(j));
          shift = neg;
        }
        if (std::optional<Value> y = fold_affine_into_conv(c, c.input(i), scale, shift))
          return c.set_output(0, *y);
      }
      f(c);
    };
  }
  t[{"", "Pow"}] = convert_pow;
  t[{"", "Mod"}] = convert_mod;
  t[{"", "Clip"}] = convert_clip;
  t[{"", "Dropout"}] = convert_dropout;
  t[{"", "Where"}] = [](NodeContext& c) {
    c.set_output(0, c.g.select(c.input(0), c.input(1), c.input(2)));
  };
  t[{"", "Cast"}] = [](NodeContext& c) {
    c.set_output(0, c.g.convert(c.input(0), target_dtype(c, c.attr_int("to", 1))));
  };
  t[{"", "CastLike"}] = [](NodeContext& c) {
    c.set_output(0, c.g.convert(c.input(0), c.g.dtype(c.input(1))));
  };
}

}  // namespace rlx::onnx::detail
