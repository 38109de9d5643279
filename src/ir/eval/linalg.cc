// Reference kernels for linalg ops: dot_general and matmul (naive loops over the result).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "eval.h"

namespace rlx::detail {
namespace {

// Sum of products for one result element: in double when the result is a float type (rounded
// once on store), in uint64 otherwise so integer overflow wraps without UB.
class DotAccumulator {
 public:
  explicit DotAccumulator(DType result) : float_(is_float(result)) {}
  void add(const Tensor& a, int64_t ia, const Tensor& b, int64_t ib) {
    if (float_) {
      f_ += a.get_f64(ia) * b.get_f64(ib);
    } else {
      i_ += static_cast<uint64_t>(a.get_i64(ia)) * static_cast<uint64_t>(b.get_i64(ib));
    }
  }
  void store(Tensor& out, int64_t i) const {
    if (float_)
      out.set_f64(i, f_);
    else
      out.set_i64(i, static_cast<int64_t>(i_));
  }

 private:
  bool float_;
  double f_ = 0;
  uint64_t i_ = 0;
};

std::vector<Tensor> eval_dot_general(const EvalContext& ctx) {
  const Tensor& lhs = ctx.operands[0];
  const Tensor& rhs = ctx.operands[1];
  const auto& lb = ctx.attrs().get_ints("lhs_batch");
  const auto& rb = ctx.attrs().get_ints("rhs_batch");
  const auto& lc = ctx.attrs().get_ints("lhs_contract");
  const auto& rc = ctx.attrs().get_ints("rhs_contract");
  const Shape& ls = lhs.shape();
  const Shape& rs = rhs.shape();

  auto free_dims = [](const Shape& s, const std::vector<int64_t>& b,
                      const std::vector<int64_t>& c) {
    std::vector<bool> bound(static_cast<size_t>(s.rank()), false);
    for (int64_t d : b) bound[static_cast<size_t>(d)] = true;
    for (int64_t d : c) bound[static_cast<size_t>(d)] = true;
    std::vector<int64_t> out;
    for (int i = 0; i < s.rank(); ++i)
      if (!bound[static_cast<size_t>(i)]) out.push_back(i);
    return out;
  };
  std::vector<int64_t> lf = free_dims(ls, lb, lc);
  std::vector<int64_t> rf = free_dims(rs, rb, rc);
  Shape contract;
  for (int64_t d : lc) contract.dims().push_back(ls[static_cast<int>(d)]);
  int64_t num_contract = contract.numel();

  const TensorType& t = ctx.result_type();
  Tensor out(t.dtype, t.shape);
  std::vector<int64_t> li(static_cast<size_t>(ls.rank())), ri(static_cast<size_t>(rs.rank()));
  for (int64_t o = 0; o < out.numel(); ++o) {
    // Result index layout: [batch..., lhs free..., rhs free...].
    std::vector<int64_t> oi = unravel(o, t.shape);
    size_t p = 0;
    for (size_t j = 0; j < lb.size(); ++j, ++p) {
      li[static_cast<size_t>(lb[j])] = oi[p];
      ri[static_cast<size_t>(rb[j])] = oi[p];
    }
    for (int64_t d : lf) li[static_cast<size_t>(d)] = oi[p++];
    for (int64_t d : rf) ri[static_cast<size_t>(d)] = oi[p++];
    DotAccumulator acc(t.dtype);
    for (int64_t c = 0; c < num_contract; ++c) {
      std::vector<int64_t> ci = unravel(c, contract);
      for (size_t j = 0; j < lc.size(); ++j) {
        li[static_cast<size_t>(lc[j])] = ci[j];
        ri[static_cast<size_t>(rc[j])] = ci[j];
      }
      acc.add(lhs, ravel(li, ls), rhs, ravel(ri, rs));
    }
    acc.store(out, o);
  }
  return {out};
}

// numpy.matmul computed directly: 1-D operands are viewed as [1,k] / [k,1]; the result is
// indexed as batch + [n, m], which has the same row-major layout as the squeezed result.
std::vector<Tensor> eval_matmul(const EvalContext& ctx) {
  const Tensor& x = ctx.operands[0];
  const Tensor& y = ctx.operands[1];
  Shape xs = x.shape(), ys = y.shape();
  if (xs.rank() == 1) xs = Shape{1, xs[0]};
  if (ys.rank() == 1) ys = Shape{ys[0], 1};
  int rx = xs.rank(), ry = ys.rank();
  int64_t n = xs[rx - 2], k = xs[rx - 1], m = ys[ry - 1];
  int nb = std::max(rx, ry) - 2;
  Shape full;
  for (int i = 0; i < nb; ++i) {
    // Batch dim i of the result, aligned to the right of each operand's batch dims.
    int xi = i - (nb - (rx - 2)), yi = i - (nb - (ry - 2));
    int64_t xd = xi >= 0 ? xs[xi] : 1, yd = yi >= 0 ? ys[yi] : 1;
    full.dims().push_back(xd == 1 ? yd : xd);
  }
  full.dims().push_back(n);
  full.dims().push_back(m);

  const TensorType& t = ctx.result_type();
  Tensor out(t.dtype, t.shape);
  std::vector<int64_t> xi(static_cast<size_t>(rx)), yi(static_cast<size_t>(ry));
  for (int64_t o = 0; o < out.numel(); ++o) {
    std::vector<int64_t> oi = unravel(o, full);
    for (int d = 0; d < rx - 2; ++d) {
      int od = d + nb - (rx - 2);
      xi[static_cast<size_t>(d)] = xs[d] == 1 ? 0 : oi[static_cast<size_t>(od)];
    }
    for (int d = 0; d < ry - 2; ++d) {
      int od = d + nb - (ry - 2);
      yi[static_cast<size_t>(d)] = ys[d] == 1 ? 0 : oi[static_cast<size_t>(od)];
    }
    xi[static_cast<size_t>(rx - 2)] = oi[static_cast<size_t>(nb)];
    yi[static_cast<size_t>(ry - 1)] = oi[static_cast<size_t>(nb + 1)];
    DotAccumulator acc(t.dtype);
    for (int64_t c = 0; c < k; ++c) {
      xi[static_cast<size_t>(rx - 1)] = c;
      yi[static_cast<size_t>(ry - 2)] = c;
      acc.add(x, ravel(xi, xs), y, ravel(yi, ys));
    }
    acc.store(out, o);
  }
  return {out};
}

}  // namespace

void register_eval_linalg() {
  set_eval(OpKind::DotGeneral, eval_dot_general);
  set_eval(OpKind::MatMul, eval_matmul);
}

}  // namespace rlx::detail
