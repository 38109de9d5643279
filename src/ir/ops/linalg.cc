// Linalg ops (dot_general, matmul): schemas and shape/dtype inference.
#include <string>
#include <vector>

#include "registry.h"

namespace rlx::detail {
namespace {

// Checks that every dim of `batch` and `contract` indexes `shape` and that no dim is used twice
// (a dim is either batch, contracting or free). `side` is "lhs" or "rhs".
void check_dims(const InferContext& ctx, const char* side, const Shape& shape,
                const std::vector<int64_t>& batch, const std::vector<int64_t>& contract) {
  std::vector<bool> used(static_cast<size_t>(shape.rank()), false);
  auto visit = [&](const std::vector<int64_t>& dims, const char* kind) {
    for (int64_t d : dims) {
      if (d < 0 || d >= shape.rank())
        ctx.fail(std::string(side) + "_" + kind + " " + ints_to_string(dims) + ": dim " +
                 std::to_string(d) + " is out of range for " + side + " shape " +
                 shape.to_string() + " (expected 0 <= dim < " + std::to_string(shape.rank()) + ")");
      if (used[static_cast<size_t>(d)])
        ctx.fail(std::string(side) + " dim " + std::to_string(d) + " appears more than once in " +
                 side + "_batch " + ints_to_string(batch) + " / " + side + "_contract " +
                 ints_to_string(contract));
      used[static_cast<size_t>(d)] = true;
    }
  };
  visit(batch, "batch");
  visit(contract, "contract");
}

// Checks that paired dims of lhs and rhs have equal sizes; `kind` is "batch" or "contract".
void check_pairs(const InferContext& ctx, const char* kind, const std::vector<int64_t>& l,
                 const std::vector<int64_t>& r) {
  const Shape& ls = ctx.operands[0].shape;
  const Shape& rs = ctx.operands[1].shape;
  for (size_t i = 0; i < l.size(); ++i) {
    int64_t a = ls[static_cast<int>(l[i])], b = rs[static_cast<int>(r[i])];
    if (a != b)
      ctx.fail(std::string(kind) + " dims differ in size: lhs dim " + std::to_string(l[i]) +
               " of " + ls.to_string() + " has size " + std::to_string(a) + ", rhs dim " +
               std::to_string(r[i]) + " of " + rs.to_string() + " has size " + std::to_string(b));
  }
}

// lax.dot_general: result [batch..., lhs free..., rhs free...].
std::vector<TensorType> infer_dot_general(const InferContext& ctx) {
  const auto& lb = ctx.attrs.get_ints("lhs_batch");
  const auto& rb = ctx.attrs.get_ints("rhs_batch");
  const auto& lc = ctx.attrs.get_ints("lhs_contract");
  const auto& rc = ctx.attrs.get_ints("rhs_contract");
  DType t = common_dtype(ctx);
  ctx.require_op_dtype(t, "operand dtype");
  if (lb.size() != rb.size())
    ctx.fail("lhs_batch " + ints_to_string(lb) + " and rhs_batch " + ints_to_string(rb) +
             " must have the same length");
  if (lc.size() != rc.size())
    ctx.fail("lhs_contract " + ints_to_string(lc) + " and rhs_contract " + ints_to_string(rc) +
             " must have the same length");
  const Shape& ls = ctx.operands[0].shape;
  const Shape& rs = ctx.operands[1].shape;
  check_dims(ctx, "lhs", ls, lb, lc);
  check_dims(ctx, "rhs", rs, rb, rc);
  check_pairs(ctx, "batch", lb, rb);
  check_pairs(ctx, "contracting", lc, rc);

  DType out = t;
  if (ctx.attrs.has("preferred")) {
    DType p = ctx.attrs.get_dtype("preferred");
    // Float operands accumulate in a float type; integer operands may widen to an integer or
    // become float. A float -> integer result would silently truncate, so it is rejected.
    bool ok = is_float(p) || (is_integer(p) && is_integer(t));
    if (!ok)
      ctx.fail("preferred dtype " + std::string(dtype_name(p)) + " is not allowed for " +
               std::string(dtype_name(t)) +
               " operands (expected a float dtype, or an integer dtype for integer operands)");
    out = p;
  }

  Shape result;
  for (int64_t d : lb) result.dims().push_back(ls[static_cast<int>(d)]);
  auto append_free = [&](const Shape& s, const std::vector<int64_t>& b,
                         const std::vector<int64_t>& c) {
    // A flag per dim keeps this linear in the rank (check_dims validated every entry).
    std::vector<bool> bound(static_cast<size_t>(s.rank()), false);
    for (int64_t d : b) bound[static_cast<size_t>(d)] = true;
    for (int64_t d : c) bound[static_cast<size_t>(d)] = true;
    for (int i = 0; i < s.rank(); ++i)
      if (!bound[static_cast<size_t>(i)]) result.dims().push_back(s[i]);
  };
  append_free(ls, lb, lc);
  append_free(rs, rb, rc);
  return {{out, result}};
}

// numpy.matmul: 1-D operands are promoted ([k] -> [1,k] on the left, [k,1] on the right) and
// the added dim removed from the result; leading (batch) dims broadcast.
std::vector<TensorType> infer_matmul(const InferContext& ctx) {
  DType t = common_dtype(ctx);
  ctx.require_op_dtype(t, "operand dtype");
  return {{t, matmul_shape(ctx, ctx.operands[0].shape, ctx.operands[1].shape)}};
}

}  // namespace

void register_linalg_ops() {
  define_op(OpKind::DotGeneral,
            {req("lhs_batch", AttrType::Ints), req("rhs_batch", AttrType::Ints),
             req("lhs_contract", AttrType::Ints), req("rhs_contract", AttrType::Ints),
             opt("preferred", AttrType::DType)},
            infer_dot_general);
  define_op(OpKind::MatMul, {}, infer_matmul);
}

}  // namespace rlx::detail
