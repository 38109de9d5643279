// Nn ops on the reference evaluator: values against numpy/jax, the pinned edge semantics of
// docs/ir.md (softmax of -inf rows, attention masking and alignment) and inference errors.
// Expected numbers were computed in float64 with numpy 2 / jax 0.4.38 (jax_enable_x64) using
// the expressions quoted at each test, then rounded to the tested dtype.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "../common/test_util.h"
#include "rlx/ir/error.h"
#include "rlx/ir/evaluator.h"
#include "rlx/ir/graph.h"

namespace rlx {
namespace {

using testing::error_of;

using ::rlx::testing::all_close;

constexpr double kInf = std::numeric_limits<double>::infinity();

Tensor make(DType t, Shape s, std::vector<double> v) {
  return Tensor::from_doubles(t, std::move(s), v);
}

Tensor eval1(OpKind op, std::vector<Tensor> operands, AttrMap attrs = {}) {
  return evaluate_op(op, operands, attrs)[0];
}

AttrMap mask_attrs(const std::string& kind, int64_t window = 0) {
  return {{"mask", kind}, {"window", window}};
}

// ---- softmax / log_softmax

// jax.nn.softmax(x, axis) / jax.nn.log_softmax(x) of x = [[1,2,3],[-1,0,4]].
TEST(Softmax, ValuesAlongLastAndFirstAxis) {
  Tensor x = make(DType::f32, {2, 3}, {1, 2, 3, -1, 0, 4});
  EXPECT_TRUE(all_close(eval1(OpKind::Softmax, {x}),
                        make(DType::f32, {2, 3},
                             {0.09003057317038046, 0.24472847105479764, 0.6652409557748218,
                              0.006573263185309083, 0.0178679818703045, 0.9755587549443865}),
                        1e-6, 0));
  EXPECT_TRUE(all_close(eval1(OpKind::Softmax, {x}, {{"axis", int64_t{0}}}),
                        make(DType::f32, {2, 3},
                             {0.8807970779778823, 0.8807970779778823, 0.2689414213699951,
                              0.11920292202211755, 0.11920292202211755, 0.7310585786300049}),
                        1e-6, 0));
  EXPECT_TRUE(all_close(eval1(OpKind::LogSoftmax, {x}),
                        make(DType::f32, {2, 3},
                             {-2.4076059644443806, -1.4076059644443804, -0.4076059644443804,
                              -5.024744890138822, -4.024744890138822, -0.02474489013882259}),
                        1e-6, 0));
}

// Same x in f16 / bf16: the exact value rounded once to the dtype.
TEST(Softmax, HalfPrecisionRoundsOnce) {
  Tensor xh = make(DType::f16, {2, 3}, {1, 2, 3, -1, 0, 4});
  EXPECT_TRUE(all_close(eval1(OpKind::Softmax, {xh}),
                        make(DType::f16, {2, 3},
                             {0.09002685546875, 0.2447509765625, 0.6650390625, 0.006572723388671875,
                              0.0178680419921875, 0.9755859375}),
                        0, 0));
  Tensor xb = make(DType::bf16, {2, 3}, {1, 2, 3, -1, 0, 4});
  EXPECT_TRUE(
      all_close(eval1(OpKind::LogSoftmax, {xb}),
                make(DType::bf16, {2, 3},
                     {-2.40625, -1.40625, -0.408203125, -5.03125, -4.03125, -0.0247802734375}),
                0, 0));
}

// jax.nn.softmax([[-inf,-inf],[0,-inf]]) = [[nan,nan],[1,0]]; log_softmax [[nan,nan],[0,-inf]].
TEST(Softmax, AllNegInfRowIsNaN) {
  Tensor x = make(DType::f32, {2, 2}, {-kInf, -kInf, 0, -kInf});
  Tensor s = eval1(OpKind::Softmax, {x});
  EXPECT_TRUE(std::isnan(s.get_f64(0)));
  EXPECT_TRUE(std::isnan(s.get_f64(1)));
  EXPECT_EQ(s.get_f64(2), 1.0);
  EXPECT_EQ(s.get_f64(3), 0.0);
  Tensor l = eval1(OpKind::LogSoftmax, {x});
  EXPECT_TRUE(std::isnan(l.get_f64(0)));
  EXPECT_TRUE(std::isnan(l.get_f64(1)));
  EXPECT_EQ(l.get_f64(2), 0.0);
  EXPECT_EQ(l.get_f64(3), -kInf);
}

// softmax([1000, 1001]) = [1/(1+e), e/(1+e)]; e^1000 alone overflows even double. In f16,
// [1024, 1025, 1026] gives softmax([0, 1, 2]) although e^1024 is far beyond f16's range.
TEST(Softmax, LargeInputsDoNotOverflow) {
  Tensor s = eval1(OpKind::Softmax, {make(DType::f32, {2}, {1000, 1001})});
  EXPECT_TRUE(
      all_close(s, make(DType::f32, {2}, {0.2689414213699951, 0.7310585786300049}), 1e-6, 0));
  Tensor h = eval1(OpKind::Softmax, {make(DType::f16, {3}, {1024, 1025, 1026})});
  EXPECT_TRUE(
      all_close(h, make(DType::f16, {3}, {0.0900305732, 0.2447284711, 0.6652409558}), 1e-3, 0));
  Tensor l = eval1(OpKind::LogSoftmax, {make(DType::f32, {2}, {1000, 1001})});
  EXPECT_TRUE(
      all_close(l, make(DType::f32, {2}, {-1.3132616875182228, -0.31326168751822286}), 1e-6, 0));
}

TEST(Softmax, RejectsIntegersAndBadAxis) {
  Graph g;
  Value xi = g.input("xi", DType::i32, {3});
  EXPECT_NE(error_of([&] {
              g.softmax(xi);
            }).find("x must be a float type (f32, f16, bf16, f64), got i32"),
            std::string::npos);
  Value x = g.input("x", DType::f32, {2, 3});
  EXPECT_NE(error_of([&] { g.log_softmax(x, 2); }).find("axis 2 is out of range for rank 2"),
            std::string::npos);
}

// ---- layer_norm / rms_norm

// numpy: m = x.mean(-1); c = x - m; c / sqrt((c*c).mean(-1) + 1e-5) * s + b with
// x = [[1,2,3,4],[2,-1,0.5,7]], s = [1,0.5,-1,2], b = [0,0.1,0.2,-0.3].
TEST(LayerNorm, ValuesLastAxis) {
  Tensor x = make(DType::f32, {2, 4}, {1, 2, 3, 4, 2, -1, 0.5, 7});
  Tensor s = make(DType::f32, {4}, {1, 0.5, -1, 2});
  Tensor b = make(DType::f32, {4}, {0, 0.1, 0.2, -0.3});
  EXPECT_TRUE(all_close(
      eval1(OpKind::LayerNorm, {x, s, b}),
      make(DType::f32, {2, 4},
           {-1.3416354199689269, -0.12360590332815449, -0.24721180665630899, 2.383270839937854,
            -0.04155855877771467, -0.4194819847214335, 0.7402612641102908, 2.941567584661745}),
      1e-6, 1e-7));
  Tensor xh = make(DType::f16, {2, 4}, {1, 2, 3, 4, 2, -1, 0.5, 7});
  Tensor sh = make(DType::f16, {4}, {1, 0.5, -1, 2});
  Tensor bh = make(DType::f16, {4}, {0, 0.1, 0.2, -0.3});
  // The f16 expectation uses the f16-rounded b (0.1 and 0.2 are inexact), as the op sees it.
  Tensor want = make(DType::f16, {2, 4},
                     {-1.341796875, -0.12359619140625, -0.2471923828125, 2.3828125,
                      -0.04156494140625, -0.41943359375, 0.740234375, 2.94140625});
  EXPECT_TRUE(all_close(eval1(OpKind::LayerNorm, {xh, sh, bh}), want, 2e-3, 1e-4));
}

// Normalising over the last two dims of x = arange(12).reshape(2,2,3) ** 1.5 (axis = 1).
TEST(LayerNorm, ValuesOverTrailingDims) {
  std::vector<double> xv;
  for (int i = 0; i < 12; ++i) xv.push_back(std::pow(i, 1.5));
  Tensor x = make(DType::f32, {2, 2, 3}, xv);
  Tensor s = make(DType::f32, {2, 3}, {1, 2, 3, 0.5, -1, 1});
  Tensor b = make(DType::f32, {2, 3}, {0, 0, 1, 1, 0, 0});
  EXPECT_TRUE(all_close(
      eval1(OpKind::LayerNorm, {x, s, b}, {{"axis", int64_t{1}}, {"eps", 1e-5}}),
      make(DType::f32, {2, 2, 3},
           {-1.197790303133173, -1.8859715052459638, -0.43128260288416387, 1.0631064896585152,
            -0.8406461009483552, 1.6510111764521564, -1.4035429274784559, -1.7811859139344384,
            -0.01868724967002633, 1.1235392434659892, -0.867286231640008, 1.5193335824303618}),
      1e-6, 1e-6));
}

// x = 1e8 + [-0.5,-0.25,0.25,0.5] in f64, eps = 0: var = 0.15625 exactly with two passes, so
// y = c / sqrt(0.15625). A one-pass E[x^2] - E[x]^2 would lose every digit (E[x^2] ~ 1e16).
TEST(LayerNorm, TwoPassIsAccurateForLargeMean) {
  Tensor x = make(DType::f64, {4}, {1e8 - 0.5, 1e8 - 0.25, 1e8 + 0.25, 1e8 + 0.5});
  Tensor one = make(DType::f64, {4}, {1, 1, 1, 1});
  Tensor zero = make(DType::f64, {4}, {0, 0, 0, 0});
  Tensor y = eval1(OpKind::LayerNorm, {x, one, zero}, {{"eps", 0.0}});
  EXPECT_TRUE(all_close(
      y,
      make(DType::f64, {4},
           {-1.2649110640673518, -0.6324555320336759, 0.6324555320336759, 1.2649110640673518}),
      1e-12, 0));
  // The same in f32 around 1e4 (ulp 2^-10): values exact, result to f32 precision.
  Tensor xf = make(DType::f32, {4}, {1e4 - 0.5, 1e4 - 0.25, 1e4 + 0.25, 1e4 + 0.5});
  Tensor yf = eval1(OpKind::LayerNorm,
                    {xf, make(DType::f32, {4}, {1, 1, 1, 1}), make(DType::f32, {4}, {0, 0, 0, 0})},
                    {{"eps", 0.0}});
  EXPECT_TRUE(all_close(
      yf,
      make(DType::f32, {4},
           {-1.2649110640673518, -0.6324555320336759, 0.6324555320336759, 1.2649110640673518}),
      1e-6, 0));
}

// numpy: x / sqrt((x*x).mean(-1) + 1e-6) * s, same x and s as ValuesLastAxis.
TEST(RmsNorm, Values) {
  Tensor x = make(DType::f32, {2, 4}, {1, 2, 3, 4, 2, -1, 0.5, 7});
  Tensor s = make(DType::f32, {4}, {1, 0.5, -1, 2});
  EXPECT_TRUE(all_close(
      eval1(OpKind::RmsNorm, {x, s}),
      make(DType::f32, {2, 4},
           {0.3651483473268884, 0.3651483473268884, -1.0954450419806652, 2.921186778615107,
            0.5430753666204933, -0.13576884165512332, -0.13576884165512332, 3.8015275663434527}),
      1e-6, 1e-7));
}

TEST(LayerNorm, ScaleAndBiasMustMatchTrailingShape) {
  Graph g;
  Value x = g.input("x", DType::f32, {2, 4});
  Value s3 = g.input("s3", DType::f32, {3});
  Value s4 = g.input("s4", DType::f32, {4});
  Value s24 = g.input("s24", DType::f32, {2, 4});
  Value h4 = g.input("h4", DType::f16, {4});
  EXPECT_NE(error_of([&] {
              g.layer_norm(x, s3, s4);
            }).find("scale must have shape x.shape[axis:] = [4], got [3]"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              g.layer_norm(x, s4, s24);
            }).find("bias must have shape x.shape[axis:] = [4], got [2,4]"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              g.layer_norm(x, s4, s4, 0);
            }).find("scale must have shape x.shape[axis:] = [2,4], got [4]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { g.rms_norm(x, h4); }).find("scale must have x's dtype f32, got f16"),
            std::string::npos);
  EXPECT_NE(error_of([&] { g.rms_norm(x, s4, -1, -1.0); }).find("eps must be finite and >= 0"),
            std::string::npos);
  EXPECT_EQ(g.type(g.layer_norm(x, s24, s24, 0)).to_string(), "f32[2,4]");
}

// ---- attention
// Reference (numpy, float64), for q [B,Hq,Sq,D], k [B,Hkv,Sk,D], v [B,Hkv,Sk,Dv]:
//   k, v = repeat(k, G, 1), repeat(v, G, 1); s = einsum(q, k) * scale (+ bias)
//   pos = arange(Sq)[:, None] + Sk - Sq; vis = mask kind (causal: j <= pos, sliding: pos - w < j
//   <= pos, bool: mask, bias: s != -inf); s = where(vis, s, -inf)
//   p = where(vis, exp(s - s.max(-1)), 0); den = p.sum(-1); out = (p / where(den > 0, den, 1)) @ v
// It matches jax.nn.dot_product_attention for none, causal (Sq = Sk) and GQA, and for
// sliding_window(2) with is_causal=True, local_window_size=(1, 0) (checked with D = Dv).

struct Qkv {
  Tensor q, k, v;
};

// q [1,1,3,2], k [1,1,4,2], v [1,1,4,3].
Qkv small_qkv(DType t = DType::f32) {
  return {make(t, {1, 1, 3, 2}, {0.5, -1.0, 1.5, 0.25, -0.5, 2.0}),
          make(t, {1, 1, 4, 2}, {1.0, 0.0, 0.0, 1.0, -1.0, 1.0, 0.5, 0.5}),
          make(t, {1, 1, 4, 3}, {1, 2, 3, -1, 0, 1, 2, 2, -2, 0.5, -0.5, 4})};
}

TEST(Attention, NoMaskDefaultAndExplicitScale) {
  Qkv a = small_qkv();
  EXPECT_TRUE(all_close(eval1(OpKind::Attention, {a.q, a.k, a.v}),
                        make(DType::f32, {1, 1, 3, 3},
                             {0.6585735838391197, 1.0065542286438534, 2.3940422467179427,
                              0.543117436966883, 0.8934507533663656, 2.591259760387816,
                              0.7398715061877295, 0.9917121036835497, 0.10525378484283854}),
                        1e-6, 1e-7));
  EXPECT_TRUE(all_close(eval1(OpKind::Attention, {a.q, a.k, a.v}, {{"scale", 0.5}}),
                        make(DType::f32, {1, 1, 3, 3},
                             {0.6358118861298752, 0.9464217052800272, 2.1704008821584093,
                              0.5303078724464976, 0.8492507974493085, 2.3637756034852666,
                              0.6832996508042767, 0.925184314980024, 0.46123804696946946}),
                        1e-6, 1e-7));
}

TEST(Attention, HalfPrecision) {
  Qkv a = small_qkv(DType::f16);  // all inputs are exact in f16
  EXPECT_TRUE(all_close(eval1(OpKind::Attention, {a.q, a.k, a.v}),
                        make(DType::f16, {1, 1, 3, 3},
                             {0.6585735838391197, 1.0065542286438534, 2.3940422467179427,
                              0.543117436966883, 0.8934507533663656, 2.591259760387816,
                              0.7398715061877295, 0.9917121036835497, 0.10525378484283854}),
                        1e-3, 0));
}

// Sq = 3 < Sk = 4: query i sits at position i + 1, so only query 0 loses a key (key 3); the
// last query sees every key and equals the unmasked result.
TEST(Attention, CausalAlignsLastQueryWithLastKey) {
  Qkv a = small_qkv();
  Tensor out = eval1(OpKind::Attention, {a.q, a.k, a.v}, mask_attrs("causal"));
  EXPECT_TRUE(all_close(out,
                        make(DType::f32, {1, 1, 3, 3},
                             {0.4856333695463859, 1.485633369546386, 2.4856333695463855,
                              0.5609267402706057, 1.4690041454792426, 2.0093911715224273,
                              0.7398715061877295, 0.9917121036835497, 0.10525378484283854}),
                        1e-6, 1e-7));
  // Decode: a single query sees the whole cache.
  Tensor q1 = make(DType::f32, {1, 1, 1, 2}, {-0.5, 2.0});
  EXPECT_TRUE(all_close(
      eval1(OpKind::Attention, {q1, a.k, a.v}, mask_attrs("causal")),
      make(DType::f32, {1, 1, 1, 3}, {0.7398715061877295, 0.9917121036835497, 0.10525378484283854}),
      1e-6, 1e-7));
}

// Sq = 3 > Sk = 2: query 0 sits at position -1 and sees no key: its row is exactly 0.
TEST(Attention, CausalQueryBeforeFirstKeyIsZero) {
  Qkv a = small_qkv();
  Tensor k2 = make(DType::f32, {1, 1, 2, 2}, {1.0, 0.0, 0.0, 1.0});
  Tensor v2 = make(DType::f32, {1, 1, 2, 3}, {1, 2, 3, -1, 0, 1});
  Tensor out = eval1(OpKind::Attention, {a.q, k2, v2}, mask_attrs("causal"));
  for (int64_t e = 0; e < 3; ++e) EXPECT_EQ(out.get_f64(e), 0.0) << e;
  // Query 1 (position 0) sees only key 0: its output is v[0].
  for (int64_t e = 0; e < 3; ++e) EXPECT_FLOAT_EQ(out.get_f64(3 + e), v2.get_f64(e)) << e;
}

TEST(Attention, SlidingWindowOfTwo) {
  Qkv a = small_qkv();
  Tensor q4 = make(DType::f32, {1, 1, 4, 2}, {0.5, -1.0, 1.5, 0.25, -0.5, 2.0, 1.0, 1.0});
  // Sq = Sk = 4: query i sees keys i-1 and i.
  EXPECT_TRUE(
      all_close(eval1(OpKind::Attention, {q4, a.k, a.v}, mask_attrs("sliding_window", 2)),
                make(DType::f32, {1, 1, 4, 3},
                     {1.0, 2.0, 3.0, 0.4152526519490291, 1.4152526519490292, 2.4152526519490296,
                      0.7624370025188294, 1.1749580016792196, -0.7624370025188294,
                      0.9953576760100147, 0.3255961266833578, 2.0185692959599413}),
                1e-6, 1e-7));
  // Sq = 3 < Sk = 4: query i at position i + 1 sees keys i and i + 1.
  EXPECT_TRUE(all_close(eval1(OpKind::Attention, {a.q, a.k, a.v}, mask_attrs("sliding_window", 2)),
                        make(DType::f32, {1, 1, 3, 3},
                             {0.4856333695463859, 1.485633369546386, 2.4856333695463855,
                              -0.22845005431957888, 0.5143666304536141, 0.22845005431957888,
                              1.6626763231812298, 1.4377938719687162, -0.6507052927249188}),
                        1e-6, 1e-7));
}

// Row 1 of the bool mask is all false: it outputs exactly 0.
TEST(Attention, BoolMaskAndFullyMaskedRow) {
  Qkv a = small_qkv();
  Tensor m = make(DType::bool_, {1, 1, 3, 4}, {1, 0, 1, 0, 0, 0, 0, 0, 1, 1, 1, 1});
  Tensor out = eval1(OpKind::Attention, {a.q, a.k, a.v, m}, mask_attrs("bool"));
  EXPECT_TRUE(all_close(out,
                        make(DType::f32, {1, 1, 3, 3},
                             {1.1955703174930432, 2.0, 2.022148412534784, 0, 0, 0,
                              0.7398715061877295, 0.9917121036835497, 0.10525378484283854}),
                        1e-6, 1e-7));
  for (int64_t e = 3; e < 6; ++e) EXPECT_EQ(out.get_f64(e), 0.0);
}

// Masks of shape [Sk], [1,1,1,Sk] and [Sq,Sk] broadcast over batch, heads and queries and give
// the same result as the explicit [B,Hq,Sq,Sk] mask.
TEST(Attention, BoolMaskBroadcasts) {
  Tensor q = testing::random_tensor(DType::f32, {2, 2, 3, 4}, 1);
  Tensor k = testing::random_tensor(DType::f32, {2, 2, 5, 4}, 2);
  Tensor v = testing::random_tensor(DType::f32, {2, 2, 5, 3}, 3);
  std::vector<double> keys = {1, 0, 1, 1, 0};
  std::vector<double> full;
  for (int r = 0; r < 2 * 2 * 3; ++r) full.insert(full.end(), keys.begin(), keys.end());
  Tensor want = eval1(OpKind::Attention, {q, k, v, make(DType::bool_, {2, 2, 3, 5}, full)},
                      mask_attrs("bool"));
  for (Shape s : {Shape{5}, Shape{1, 1, 1, 5}, Shape{3, 5}}) {
    std::vector<double> vals;
    for (int64_t r = 0; r < s.numel() / 5; ++r) vals.insert(vals.end(), keys.begin(), keys.end());
    Tensor got =
        eval1(OpKind::Attention, {q, k, v, make(DType::bool_, s, vals)}, mask_attrs("bool"));
    EXPECT_TRUE(all_close(got, want, 0, 0)) << s.to_string();
  }
  // A [1,1,Sq,Sk] mask differing per query row.
  Qkv a = small_qkv();
  Tensor m = make(DType::bool_, {1, 1, 3, 4}, {1, 0, 1, 0, 0, 0, 0, 0, 1, 1, 1, 1});
  Tensor q2 = make(DType::f32, {1, 2, 3, 2},
                   {0.5, -1.0, 1.5, 0.25, -0.5, 2.0, 0.5, -1.0, 1.5, 0.25, -0.5, 2.0});
  Tensor two = eval1(OpKind::Attention, {q2, a.k, a.v, m}, mask_attrs("bool"));
  Tensor one = eval1(OpKind::Attention, {a.q, a.k, a.v, m}, mask_attrs("bool"));
  for (int64_t i = 0; i < 9; ++i) {
    EXPECT_EQ(two.get_f64(i), one.get_f64(i));
    EXPECT_EQ(two.get_f64(9 + i), one.get_f64(i));
  }
}

// Bias row 1 is all -inf (fully masked, outputs 0); -inf entries elsewhere mask a key.
TEST(Attention, BiasMask) {
  Qkv a = small_qkv();
  Tensor bias =
      make(DType::f32, {1, 1, 3, 4}, {0.5, -kInf, 0, 1, -kInf, -kInf, -kInf, -kInf, 0, 0, -1, 2});
  Tensor out = eval1(OpKind::Attention, {a.q, a.k, a.v, bias}, mask_attrs("bias"));
  EXPECT_TRUE(all_close(out,
                        make(DType::f32, {1, 1, 3, 3},
                             {0.8405706538060783, 0.8546785984932913, 3.109953890065583, 0, 0, 0,
                              0.3675566830070209, -0.028909751159388375, 2.6700337224348423}),
                        1e-6, 1e-7));
  for (int64_t e = 3; e < 6; ++e) EXPECT_EQ(out.get_f64(e), 0.0);
}

// Key 0 has k = [inf, 0]: its score is +inf for query 0 and NaN (inf * 0) for query 1. Masked
// out, it must have no effect: the result equals attention over keys 1..2 alone.
TEST(Attention, MaskedInfAndNaNScoresHaveNoEffect) {
  Tensor q = make(DType::f32, {1, 1, 2, 2}, {1, 0, 0, 1});
  Tensor k = make(DType::f32, {1, 1, 3, 2}, {kInf, 0, 1, 0, 0, 1});
  Tensor v = make(DType::f32, {1, 1, 3, 2}, {5, 6, 1, 2, 3, 4});
  Tensor m = make(DType::bool_, {3}, {0, 1, 1});
  Tensor got = eval1(OpKind::Attention, {q, k, v, m}, mask_attrs("bool"));
  Tensor want = eval1(OpKind::Attention, {q, make(DType::f32, {1, 1, 2, 2}, {1, 0, 0, 1}),
                                          make(DType::f32, {1, 1, 2, 2}, {1, 2, 3, 4})});
  EXPECT_TRUE(all_close(got, want, 0, 0));
  // Closed form for query 0: scores [1, 0] / sqrt(2) -> weights [e^a, 1] / (e^a + 1).
  double w = 1 / (1 + std::exp(-1 / std::sqrt(2.0)));
  EXPECT_NEAR(got.get_f64(0), w * 1 + (1 - w) * 3, 1e-6);
  // Causal masking of a +inf score: key 2 of query 0 (Sq = Sk = 3) is masked.
  Tensor q3 = make(DType::f32, {1, 1, 3, 2}, {1, 0, 0, 1, 1, 1});
  Tensor k3 = make(DType::f32, {1, 1, 3, 2}, {1, 0, 0, 1, kInf, 0});
  Tensor out = eval1(OpKind::Attention, {q3, k3, v}, mask_attrs("causal"));
  EXPECT_EQ(out.get_f64(0), 5.0);  // query 0 sees only key 0
  EXPECT_EQ(out.get_f64(1), 6.0);
}

// GQA, Hq = 4, Hkv = 2: query head h uses kv head h / 2, the same as repeating each kv head
// twice (jnp.repeat(k, 2, axis=1)); numbers also from jax.nn.dot_product_attention.
TEST(Attention, GroupedQueryEqualsRepeatedKvHeads) {
  Tensor q = make(DType::f32, {1, 4, 2, 3},
                  {0.55, -0.92, -1.84, -1.93, 1.25, 1.65, 0.43, 0.92,  0.17,  1.74, 1.26, -1.99,
                   1.43, -1.87, 0.92,  -1.3,  1.45, 0.17, -0.8, -0.31, -1.89, -1.5, 0.68, 0.59});
  std::vector<double> kv = {0.46, -0.47, 1.99,  1.92,  0.74, 0.6,  0.75,  -0.44, -1.46,
                            0.89, 0.1,   -0.76, -0.06, 1.56, 1.74, -0.57, 0.29,  -0.71};
  std::vector<double> vv = {0.38,  -0.65, -0.43, 1.56,  -1.09, 0.49, -1.66, 1.33,  1.15,
                            -1.04, 1.51,  -1.77, -0.66, -1.4,  -0.2, 1.19,  -1.08, -1.79};
  Tensor k = make(DType::f32, {1, 2, 3, 3}, kv);
  Tensor v = make(DType::f32, {1, 2, 3, 3}, vv);
  Tensor out = eval1(OpKind::Attention, {q, k, v});
  EXPECT_TRUE(all_close(
      out,
      make(DType::f32, {1, 4, 2, 3},
           {-1.3646192950044072, 1.0984596629499563,   1.0646340348632777,  0.45922638735135285,
            -0.6502959901784716, -0.29218403306214413, 0.6743994056299769,  -0.5317800117425433,
            0.39237214634300993, -0.3100462889985893,  0.31185359317035793, 0.863979818332842,
            -0.6079791599761899, 0.4611604725935392,   -1.4251936758400678, -0.20094980499744547,
            -1.0981407911573344, -0.7363183112666976,  0.36396639652522506, -0.18764100531557454,
            -1.7398727374829766, -0.1860082317359384,  -1.1105700027357759, -0.7395909392392702}),
      1e-6, 1e-6));
  auto repeat = [](const std::vector<double>& x) {
    std::vector<double> r;
    for (size_t h = 0; h < 2; ++h)
      for (int rep = 0; rep < 2; ++rep) r.insert(r.end(), x.begin() + h * 9, x.begin() + h * 9 + 9);
    return r;
  };
  Tensor full = eval1(OpKind::Attention, {q, make(DType::f32, {1, 4, 3, 3}, repeat(kv)),
                                          make(DType::f32, {1, 4, 3, 3}, repeat(vv))});
  EXPECT_TRUE(all_close(out, full, 0, 0));
}

TEST(Attention, Errors) {
  Graph g;
  Value q = g.input("q", DType::f32, {1, 3, 2, 4});
  Value k = g.input("k", DType::f32, {1, 2, 5, 4});
  Value v = g.input("v", DType::f32, {1, 2, 5, 6});
  Value q4 = g.input("q4", DType::f32, {1, 4, 2, 4});
  Value bad = g.input("bad", DType::bool_, {3, 5});
  Value good = g.input("good", DType::bool_, {2, 5});
  Value fbias = g.input("fbias", DType::f16, {2, 5});
  auto opts = [](std::string mask, int64_t window = 0) {
    Graph::AttentionOptions o;
    o.mask = std::move(mask);
    o.window = window;
    return o;
  };
  EXPECT_NE(error_of([&] {
              g.attention(q, k, v, opts("none"));
            }).find("query heads Hq = 3 must be a multiple of kv heads Hkv = 2"),
            std::string::npos);
  EXPECT_NE(error_of([&] { g.attention(q4, k, v, opts("bool"), bad); })
                .find("mask shape [3,5] does not broadcast to the scores shape [B,Hq,Sq,Sk] = "
                      "[1,4,2,5]"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              g.attention(q4, k, v, opts("bool"));
            }).find("mask \"bool\" needs a 4th operand (the mask tensor), got 3 operands"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              g.attention(q4, k, v, opts("causal"), good);
            }).find("mask \"causal\" takes no mask operand"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              g.attention(q4, k, v, opts("bias"), fbias);
            }).find("bias tensor of mask \"bias\" must have q's dtype f32, got f16"),
            std::string::npos);
  EXPECT_NE(
      error_of([&] { g.attention(q4, k, v, opts("bool"), fbias); }).find("must be bool, got f16"),
      std::string::npos);
  EXPECT_NE(error_of([&] {
              g.attention(q4, k, v, opts("sliding_window"));
            }).find("needs window >= 1, got 0"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              g.attention(q4, k, v, opts("causal", 3));
            }).find("window is only meaningful with mask \"sliding_window\""),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              g.attention(q4, k, v, opts("local"));
            }).find("expected one of none, causal, sliding_window, causal_lengths, bool, bias"),
            std::string::npos);
  Value k3 = g.input("k3", DType::f32, {1, 2, 5, 3});
  EXPECT_NE(error_of([&] { g.attention(q4, k3, v, opts("none")); }).find("same head dim D"),
            std::string::npos);
  Value v4 = g.input("v4", DType::f32, {1, 2, 4, 6});
  EXPECT_NE(error_of([&] { g.attention(q4, k, v4, opts("none")); }).find("same heads and length"),
            std::string::npos);
  EXPECT_EQ(g.type(g.attention(q4, k, v, opts("bool"), good)).to_string(), "f32[1,4,2,6]");
}

// ---- rope
// numpy: a, b = x[..., ia], x[..., ib]; out[ia] = a cos - b sin, out[ib] = b cos + a sin with
// neox ia = [0, h), ib = ia + h and gptj ia = 2t, ib = 2t + 1 (h = R/2); angles [[0, 0],
// [1, 0.1]]. neox also equals the Hugging Face rotate_half form x*cat(cos,cos) +
// rotate_half(x)*cat(sin,sin).

Tensor rope_cos() {
  return make(DType::f32, {2, 2}, {1.0, 1.0, 0.5403023058681398, 0.9950041652780258});
}
Tensor rope_sin() {
  return make(DType::f32, {2, 2}, {0.0, 0.0, 0.8414709848078965, 0.09983341664682815});
}

TEST(Rope, NeoxAndGptjLayouts) {
  Tensor x = make(DType::f32, {1, 2, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
  EXPECT_TRUE(all_close(eval1(OpKind::Rope, {x, rope_cos(), rope_sin()}),
                        make(DType::f32, {1, 2, 4},
                             {1, 2, 3, 4, -3.1887853643145765, 5.17135765849353, 7.9894710651164615,
                              8.559033822105176}),
                        1e-6, 1e-7));
  EXPECT_TRUE(
      all_close(eval1(OpKind::Rope, {x, rope_cos(), rope_sin()}, {{"layout", std::string("gptj")}}),
                make(DType::f32, {1, 2, 4},
                     {1, 2, 3, 4, -2.3473143795066798, 7.449168759248321, 6.166361823771556,
                      8.658867238752004}),
                1e-6, 1e-7));
}

// x [2, 6] with R = 4: dims 4 and 5 pass through unchanged.
TEST(Rope, PartialRotary) {
  std::vector<double> xv;
  for (int i = 1; i <= 12; ++i) xv.push_back(i / 4.0);
  Tensor x = make(DType::f32, {2, 6}, xv);
  EXPECT_TRUE(
      all_close(eval1(OpKind::Rope, {x, rope_cos(), rope_sin()}),
                make(DType::f32, {2, 6},
                     {0.25, 0.5, 0.75, 1.0, 1.25, 1.5, -0.9477806805485226, 1.7404247889389812,
                      2.6882544116171334, 2.687177246488721, 2.75, 3.0}),
                1e-6, 1e-7));
  Tensor bf =
      eval1(OpKind::Rope,
            {make(DType::bf16, {2, 6}, xv),
             make(DType::bf16, {2, 2}, {1.0, 1.0, 0.5403023058681398, 0.9950041652780258}),
             make(DType::bf16, {2, 2}, {0.0, 0.0, 0.8414709848078965, 0.09983341664682815})},
            {{"layout", std::string("gptj")}});
  // numpy with every input and the result rounded to bf16 (ml_dtypes): the tables become
  // cos [1, 1, 0.5390625, 0.99609375], sin [0, 0, 0.83984375, 0.099609375].
  EXPECT_TRUE(all_close(
      bf,
      make(DType::bf16, {2, 6},
           {0.25, 0.5, 0.75, 1.0, 1.25, 1.5, -0.734375, 2.546875, 1.9921875, 2.71875, 2.75, 3.0}),
      0, 0));
}

// Tables of shape [B, S, R/2] (per-batch positions) broadcast against x.shape[:-1] + [R/2].
TEST(Rope, TablesBroadcastAgainstLeadingDims) {
  Tensor x = testing::random_tensor(DType::f32, {2, 3, 2, 4}, 7);  // [B, H, S, D]
  Tensor c = testing::random_tensor(DType::f32, {2, 1, 2, 2}, 8);
  Tensor s = testing::random_tensor(DType::f32, {2, 1, 2, 2}, 9);
  Tensor out = eval1(OpKind::Rope, {x, c, s});
  // Element [b=1, h=2, s=1, d=0] pairs with d=2, table entry [1, 0, 1, 0].
  int64_t base = ((1 * 3 + 2) * 2 + 1) * 4, t = (1 * 2 + 1) * 2;
  double a = x.get_f64(base), b = x.get_f64(base + 2);
  EXPECT_NEAR(out.get_f64(base), a * c.get_f64(t) - b * s.get_f64(t), 1e-6);
  EXPECT_NEAR(out.get_f64(base + 2), b * c.get_f64(t) + a * s.get_f64(t), 1e-6);
}

TEST(Rope, Errors) {
  Graph g;
  Value x = g.input("x", DType::f32, {2, 4});
  Value c3 = g.input("c3", DType::f32, {2, 3});
  Value c2 = g.input("c2", DType::f32, {2, 2});
  Value c32 = g.input("c32", DType::f32, {3, 2});
  Value h2 = g.input("h2", DType::f16, {2, 2});
  Value c0 = g.input("c0", DType::f32, {2, 0});
  EXPECT_NE(error_of([&] {
              g.rope(x, c3, c3);
            }).find("rotary dims R = 2 * cos.shape[-1] = 6 exceed the head dim D = 4"),
            std::string::npos);
  EXPECT_NE(error_of([&] { g.rope(x, c0, c0); }).find("must be > 0"), std::string::npos);
  EXPECT_NE(error_of([&] {
              g.rope(x, c2, c32);
            }).find("sin shape [3,2] does not broadcast to x.shape[:-1] + [R/2] = [2,2]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { g.rope(x, h2, h2); }).find("cos must have x's dtype f32, got f16"),
            std::string::npos);
  EXPECT_NE(error_of([&] { g.rope(x, c2, c2, "llama"); }).find("expected one of neox, gptj"),
            std::string::npos);
}

// ---- softmax_cross_entropy
// jax: -take_along_axis(jax.nn.log_softmax(logits), clip(labels, 0, 2)[:, None], -1)[:, 0].

TEST(SoftmaxCrossEntropy, ValuesAndLabelClamping) {
  Tensor logits =
      make(DType::f32, {4, 3}, {1.0, 2.0, 3.0, -1.0, 0.5, 0.0, 2.0, 2.0, -3.0, 0.1, 0.2, 0.3});
  // Labels 7 and -4 clamp to 2 and 0, as gather does.
  Tensor labels = Tensor::from_ints(DType::i32, {4}, std::vector<int64_t>{2, 0, 7, -4});
  Tensor want =
      make(DType::f32, {4},
           {0.4076059644443804, 2.1041306053367284, 5.696510491782079, 1.201942848229244});
  EXPECT_TRUE(all_close(eval1(OpKind::SoftmaxCrossEntropy, {logits, labels}), want, 1e-6, 0));
  Tensor u8 = Tensor::from_ints(DType::u8, {4}, std::vector<int64_t>{2, 0, 200, 0});
  EXPECT_TRUE(all_close(eval1(OpKind::SoftmaxCrossEntropy, {logits, u8}), want, 1e-6, 0));
  // Equals -log_softmax(logits)[label] of the evaluator's own log_softmax.
  Tensor ls = eval1(OpKind::LogSoftmax, {logits});
  EXPECT_FLOAT_EQ(eval1(OpKind::SoftmaxCrossEntropy, {logits, labels}).get_f64(1), -ls.get_f64(3));
}

TEST(SoftmaxCrossEntropy, Errors) {
  Graph g;
  Value logits = g.input("logits", DType::f32, {4, 3});
  Value l3 = g.input("l3", DType::i32, {3});
  Value lf = g.input("lf", DType::f32, {4});
  EXPECT_NE(error_of([&] {
              g.softmax_cross_entropy(logits, l3);
            }).find("labels must have shape logits.shape[:-1] = [4], got [3]"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              g.softmax_cross_entropy(logits, lf);
            }).find("labels must be an integer dtype, got f32"),
            std::string::npos);
}

// Empty dims: nothing to compute, but the types are right and nothing throws.
TEST(NnOps, EmptyShapes) {
  EXPECT_EQ(eval1(OpKind::Softmax, {Tensor(DType::f32, {0, 3})}).shape(), (Shape{0, 3}));
  EXPECT_EQ(eval1(OpKind::LayerNorm,
                  {Tensor(DType::f32, {2, 0}), Tensor(DType::f32, {0}), Tensor(DType::f32, {0})})
                .shape(),
            (Shape{2, 0}));
  // Sk = 0: every query row is fully masked and outputs 0.
  Tensor out = eval1(OpKind::Attention,
                     {Tensor::full(DType::f32, {1, 1, 2, 2}, 1.0), Tensor(DType::f32, {1, 1, 0, 2}),
                      Tensor(DType::f32, {1, 1, 0, 3})});
  EXPECT_EQ(out.shape(), (Shape{1, 1, 2, 3}));
  for (int64_t i = 0; i < out.numel(); ++i) EXPECT_EQ(out.get_f64(i), 0.0);
}

}  // namespace
}  // namespace rlx
