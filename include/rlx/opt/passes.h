// Factories for the graph passes of rlx_opt. Each pass is described at its factory: what it
// rewrites and when it does nothing. All preserve reference-evaluator semantics.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "rlx/opt/pass.h"

namespace rlx {

/// "dce": removes nodes whose results reach no graph output. Inputs and params stay (they are
/// the graph's signature) even when unused. A cond's unused results and a scan's unused ys
/// leave the node and its bodies; so do the dead carries of a while_loop or scan: a carry is
/// live when its result is used or (to a fixed point) a live carry's update, a ys or a while's
/// cond depends on it, so a carry feeding only itself is dropped.
std::unique_ptr<Pass> create_dce_pass();

/// "cse": merges nodes with the same op, operands and attributes (constants compared by value
/// bits), keeping the first; commutative ops match with operands swapped.
std::unique_ptr<Pass> create_cse_pass();

/// "fold-constants": evaluates (reference evaluator) every node other than input/param/constant
/// (iota and seeded rng_key included; not dequantize, nor an rng_key without a seed, whose key
/// is the compile seed's) whose operands are all constants and whose results have at most
/// `max_elements` elements in total, replacing it by a constant. Larger results are left alone
/// so huge constants are never materialised. Throws rlx::Error for max_elements < 0.
std::unique_ptr<Pass> create_fold_constants_pass(int64_t max_elements = int64_t{1} << 16);

/// "simplify": algebraic identities — x+0, x-0, x*1, x/1 (when the result type equals x's),
/// x*0 -> 0 for integers only (floats keep NaN/inf/-0 semantics), transpose of transpose,
/// reshape of reshape, identity transpose/reshape/convert, convert-of-convert when the middle
/// type holds every value of the source, broadcast of a scalar constant -> a splat constant,
/// and a cond whose index is a constant -> the taken branch inlined (a bool predicate takes
/// branches[int(pred)], an i32 index is clamped to [0, N-1] as lax.switch).
std::unique_ptr<Pass> create_simplify_pass();

/// "hoist-loop-invariants": moves work out of while_loop and scan bodies (nested ones
/// included, innermost first, so a value climbs one level per enclosing loop), values unchanged:
/// - loop-invariant code motion (XLA's WhileLoopInvariantCodeMotion): a body (or while cond) node
///   whose operands are all invariant — body inputs bound to captured consts, constants, other
///   invariant nodes — is computed once before the loop on the outer values and passed in as a
///   new captured const. Only the frontier moves (invariant nodes used by a node that stays or
///   returned by the body); leaves (constant, iota) stay, and so does a size-inflating node (its
///   result has more bytes than its operands together: broadcast, pad, outer products; XLA's
///   hoist_size_inflating_ops=false), whose invariant operands move instead.
/// - step-independent hoisting (scan only): a value that depends on the step's xs slices and
///   invariants but on no carry (x_t @ U, x_t @ U + b) is computed for all steps at once before
///   the loop (xs [T,B,K] @ U -> [T,B,N], one GEMM instead of T) and read by the body as a new
///   xs, whatever `reverse` (step t reads slice t either way). The batched ops are elementwise
///   ops (invariants broadcast against the new leading axis), reshape, transpose,
///   broadcast_in_dim, dot_general with one step-dependent operand (its dims shifted; the step
///   axis transposed to the front when the result puts it elsewhere) and matmul (step operand
///   and invariant of rank >= 2, the invariant of no higher rank; step x @ matrix W becomes a
///   dot_general contracting x's last dim). A subgraph moves only when it
///   holds a dot_general or matmul: it trades a [T, ...] buffer for T GEMMs in one.
/// Never moved: collectives, custom_call (pure_callback included: user code stays where it
/// was written), rng_key without a seed (its key depends on where it runs), control-flow ops,
/// multi-result nodes (their operands may move). A loop that runs zero times still evaluates
/// the hoisted values (pure; as XLA).
std::unique_ptr<Pass> create_hoist_loop_invariants_pass();

/// "legalize-broadcast": makes every implicit numpy broadcast explicit with broadcast_in_dim,
/// so elementwise operands have the result's shape (StableHLO/XLA require it).
std::unique_ptr<Pass> create_legalize_broadcast_pass();

/// "fuse-quant-matmul": matmul(x, transpose(dequantize(p))) and dot_general(x, dequantize(p))
/// or dot_general(x, transpose(dequantize(p))) contracting x's last dim with the dequantized
/// weight's row axis (f32 x, no batch dims) become quant_matmul(x, p), which reads the packed
/// weight directly (the form rlx/opt/quantize_params.h produces).
std::unique_ptr<Pass> create_fuse_quant_matmul_pass();

/// "fuse-matmul-bias-act": matmul -> add(bias) -> optional relu/gelu/gelu_tanh/silu becomes one
/// fused_matmul_bias_act, when the intermediate values have no other use.
std::unique_ptr<Pass> create_fuse_matmul_bias_act_pass();

/// "fuse-residual-norm": add -> layer_norm / rms_norm becomes fused_residual_layer_norm /
/// fused_residual_rms_norm (whose second result replaces other uses of the add).
std::unique_ptr<Pass> create_fuse_residual_norm_pass();

/// "fuse-attention": matmul/dot_general(q, k^T) -> scale -> (mask) -> softmax -> matmul(v),
/// as exporters and hand-written models produce it, becomes one attention node. The one
/// intended change of results: a query row whose keys are ALL masked gives 0 (attention's
/// pinned semantics) where the unfused softmax gave NaN; every other row is unchanged.
std::unique_ptr<Pass> create_fuse_attention_pass();

/// "fuse-packed-attention": reshape(transpose(attention(q, k, v[, mask]), [0,2,1,3]),
/// [B,S,Hq*D]) whose q, k, v [B,heads,S,D] are the column blocks q | k | v of one packed
/// projection qkv [B,S,(Hq+2Hkv)*D] split into heads (build_bert_encoder's fused_qkv reshape to
/// [B,S,3,H,D] + transpose [2,0,3,1,4] + leading-axis slices; or three column slices each
/// reshaped and transposed; or packed_qkv_attention's own decomposition) becomes one
/// packed_qkv_attention(qkv[, mask]) with attention's mask attributes. Fires only when every
/// intermediate has no other use. Results are unchanged (the same attention, in place).
std::unique_ptr<Pass> create_fuse_packed_attention_pass();

/// "mark-elementwise-regions": maximal chains of elementwise ops (two or more) become one
/// elementwise_region node each.
std::unique_ptr<Pass> create_mark_elementwise_regions_pass();

/// "bind-rng-seed": gives every rng_key node without a `seed` attribute the seed `seed` (the
/// compile seed, CompileOptions::seed), so its key is a function of the compile options; nodes
/// with a seed keep theirs. The standard pipeline runs it first when the graph has such a node.
std::unique_ptr<Pass> create_bind_rng_seed_pass(uint64_t seed);

/// "decompose" (or `name`): replaces every composite op for which `keep(op)` is false by its
/// decomposition (rlx::decompose). With keep = "not fused" it is the inverse of the fusions.
std::unique_ptr<Pass> create_decompose_pass(std::function<bool(OpKind)> keep = {},
                                            std::string name = "decompose");

}  // namespace rlx
