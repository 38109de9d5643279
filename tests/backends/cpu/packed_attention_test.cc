// CPU kernel of packed_qkv_attention (attention reading q, k, v in place from the packed QKV
// projection [B,S,(Hq+2Hkv)D], writing [B,S,Hq D]) against the reference evaluator run on the
// op's decomposition, and bitwise against the plain attention kernel fed the same q, k, v split
// on the host: f32 and bf16, batch 1-2, heads 1-4 with GQA, D 24 / 32 / 64, S 1 / 7 / 33 / 40 /
// 128, masks none / bool [B,1,1,S] (padding keys) / causal, 1-3 threads.
#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "common/thread_count_guard.h"
#include "rlx/ir/evaluator.h"
#include "rlx/opt/passes.h"
#include "rlx/runtime/session.h"
#include "rlx/runtime/threading.h"

namespace rlx {
namespace {

using testing::all_close;
using testing::random_tensor;

struct Packed {
  int64_t b, hq, hkv, s, d;
  std::string to_string() const {
    std::ostringstream o;
    o << "B" << b << " Hq" << hq << " Hkv" << hkv << " S" << s << " D" << d;
    return o.str();
  }
  int64_t width() const { return (hq + 2 * hkv) * d; }
};

// Heads [h0, h0 + n) of qkv [B,S,W] as a contiguous [B,n,S,D] tensor.
Tensor split(const Tensor& qkv, const Packed& c, int64_t h0, int64_t n) {
  Tensor t(qkv.dtype(), Shape{c.b, n, c.s, c.d});
  const auto esize = static_cast<size_t>(dtype_size(qkv.dtype()));
  for (int64_t b = 0; b < c.b; ++b)
    for (int64_t h = 0; h < n; ++h)
      for (int64_t i = 0; i < c.s; ++i)
        std::memcpy(reinterpret_cast<char*>(t.data()) + ((b * n + h) * c.s + i) * c.d * esize,
                    reinterpret_cast<const char*>(qkv.data()) +
                        ((b * c.s + i) * c.width() + (h0 + h) * c.d) * esize,
                    static_cast<size_t>(c.d) * esize);
  return t;
}

// [B,Hq,S,D] -> [B,S,Hq D] (bytes moved, values untouched).
Tensor token_major(const Tensor& a, const Packed& c) {
  Tensor t(a.dtype(), Shape{c.b, c.s, c.hq * c.d});
  const auto esize = static_cast<size_t>(dtype_size(a.dtype()));
  for (int64_t b = 0; b < c.b; ++b)
    for (int64_t h = 0; h < c.hq; ++h)
      for (int64_t i = 0; i < c.s; ++i)
        std::memcpy(
            reinterpret_cast<char*>(t.data()) + ((b * c.s + i) * c.hq + h) * c.d * esize,
            reinterpret_cast<const char*>(a.data()) + ((b * c.hq + h) * c.s + i) * c.d * esize,
            static_cast<size_t>(c.d) * esize);
  return t;
}

void expect_packed_matches(const Packed& c, DType dt, const std::string& mask, uint64_t seed) {
  SCOPED_TRACE(c.to_string() + " " + std::string(dtype_name(dt)) + " mask " + mask);
  Graph::AttentionOptions o;
  o.mask = mask;
  TensorMap feeds{{"qkv", random_tensor(dt, Shape{c.b, c.s, c.width()}, seed)}};
  std::optional<Value> m;
  Graph g("packed");
  Value qkv = g.input("qkv", dt, Shape{c.b, c.s, c.width()});
  if (mask == "bool") {
    // Batch row 1 has its last 3 keys padded (the trailing keys the direct path skips).
    Tensor keys(DType::bool_, Shape{c.b, 1, 1, c.s});
    for (int64_t i = 0; i < keys.numel(); ++i)
      keys.set_i64(i, i / c.s == 0 || i % c.s < std::max<int64_t>(c.s - 3, 1));
    m = g.input("mask", DType::bool_, keys.shape());
    feeds["mask"] = keys;
  }
  g.set_outputs({g.packed_qkv_attention(qkv, c.hq, c.hkv, o, m)});
  auto exe = Session().compile(g);
  EXPECT_EQ(exe->kernels().count(OpKind::PackedQkvAttention), (KernelCounts{1, 0}))
      << exe->kernel_report();
  EXPECT_EQ(exe->kernels().count(OpKind::Transpose), (KernelCounts{0, 0}));
  Tensor got = exe->run(feeds)[0];

  // The evaluator on the decomposition (reshape, slices, transposes, attention kept whole).
  Graph decomposed = g;
  EXPECT_TRUE(create_decompose_pass([](OpKind op) {
                return op != OpKind::PackedQkvAttention;
              })->run(decomposed));
  const double rtol = dt == DType::f32 ? 1e-4 : 1.6e-2, atol = dt == DType::f32 ? 2e-5 : 2e-4;
  EXPECT_TRUE(all_close(got, evaluate(decomposed, feeds)[0], rtol, atol));

  // The plain attention kernel on the same q, k, v: the same arithmetic, so the same bits.
  Graph a("plain");
  Value q = a.input("q", dt, Shape{c.b, c.hq, c.s, c.d});
  Value k = a.input("k", dt, Shape{c.b, c.hkv, c.s, c.d});
  Value v = a.input("v", dt, Shape{c.b, c.hkv, c.s, c.d});
  std::optional<Value> am;
  TensorMap plain{{"q", split(feeds["qkv"], c, 0, c.hq)},
                  {"k", split(feeds["qkv"], c, c.hq, c.hkv)},
                  {"v", split(feeds["qkv"], c, c.hq + c.hkv, c.hkv)}};
  if (m) {
    am = a.input("mask", DType::bool_, feeds["mask"].shape());
    plain["mask"] = feeds["mask"];
  }
  a.set_outputs({a.attention(q, k, v, o, am)});
  Tensor want = token_major(Session().compile(a)->run(plain)[0], c);
  EXPECT_EQ(std::memcmp(got.data(), want.data(), static_cast<size_t>(got.nbytes())), 0)
      << "differs from attention on the split q, k, v";

  testing::ThreadCountGuard guard;
  for (int n : {1, 3}) {
    set_num_threads(n);
    Tensor again = exe->run(feeds)[0];
    EXPECT_EQ(std::memcmp(again.data(), got.data(), static_cast<size_t>(got.nbytes())), 0)
        << n << " threads";
  }
}

TEST(CpuPackedQkvAttention, MatchesDecompositionAndPlainAttentionBitwise) {
  const std::vector<Packed> configs = {
      {1, 1, 1, 1, 32}, {2, 2, 2, 7, 64},   {1, 4, 2, 33, 32}, {2, 4, 4, 33, 64},
      {2, 2, 1, 7, 32}, {1, 4, 2, 128, 32}, {1, 2, 1, 40, 24},  // K's 16 x 16 transposed blocks
                                                                // with row and column tails,
                                                                // strided
  };
  uint64_t seed = 1;
  for (DType dt : {DType::f32, DType::bf16})
    for (const Packed& c : configs)
      for (const char* mask : {"none", "bool", "causal"})
        expect_packed_matches(c, dt, mask, seed++);
}

}  // namespace
}  // namespace rlx
