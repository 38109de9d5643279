// Native CPU kernels of the gemm family: dot_general, matmul and fused_matmul_bias_act. f32 and
// bf16 (f32 accumulation) run on oneDNN's matmul primitive with the bias and activation fused
// as post-ops (relu on an f32 result follows it, relu_after_matmul); f16, and bf16 on CPUs where
// oneDNN has no bf16 matmul (AVX2), run through f32 copies; f64 and integer dtypes run a blocked
// loop.
#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "../kernel.h"
#include "dnnl_util.h"
#include "rlx/ir/scalar_ops.h"
#include "small_gemm.h"
#include "vec_math.h"

namespace rlx::cpu {

void register_conv_kernels();

namespace {

using dnnl::memory;

// ---- the problem: a batched matrix product over strided views

// One operand as a strided view in the result's index space: an axis per result batch dim
// (stride 0 where the operand broadcasts), then its row axes and column axes (lhs: M then K,
// rhs: K then N), outermost first. dot_general's free and contracting dims may give several
// axes per group until merged.
struct Operand {
  std::vector<Axis> batch, rows, cols;
};

// For every batch index b: C[b, m, n] = act(sum_k A[b, m, k] * B[b, k, n] + bias[b, m, n]),
// with C contiguous [batch..., M, N] (the layout of every op's result here).
struct Problem {
  std::vector<int64_t> batch;
  int64_t m = 1, k = 1, n = 1;
  Operand a, b;
  bool has_bias = false;
  std::vector<Axis> bias;  // axes batch..., M, N (stride 0 where the bias broadcasts)
  std::string act = "none";
  DType in = DType::f32, out = DType::f32;
};

// A problem whose operands are single strided matrices per batch index.
struct Mat {
  std::vector<Axis> batch;
  Axis row, col;
};
struct Layout {
  std::vector<int64_t> batch;
  int64_t m = 1, k = 1, n = 1;
  Mat a, b, bias, c;
};

// Row-major strides of `sizes` (elements).
std::vector<int64_t> dense_strides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> s(sizes.size());
  int64_t run = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    s[i] = run;
    run *= sizes[i];
  }
  return s;
}

// One axis for a group of axes, or nullopt when they do not tile one strided line.
std::optional<Axis> merge_group(const std::vector<Axis>& axes) {
  std::vector<Axis> c = compact_axes(axes);
  if (c.size() > 1) return std::nullopt;
  return c.empty() ? Axis{1, 1} : c[0];
}

// The view `op` takes once packed: a contiguous copy of its non-broadcast batch axes, rows and
// columns, in that order (broadcast axes stay stride 0 and are not replicated).
Mat packed_view(const Operand& op, int64_t rows, int64_t cols) {
  Mat m;
  m.col = {cols, 1};
  m.row = {rows, cols};
  int64_t run = rows * cols;
  m.batch.resize(op.batch.size());
  for (size_t i = op.batch.size(); i-- > 0;) {
    m.batch[i] = {op.batch[i].size, op.batch[i].stride == 0 ? 0 : run};
    if (op.batch[i].stride != 0) run *= op.batch[i].size;
  }
  return m;
}

// The source axes that pack `op` into packed_view order, compacted for gather.
std::vector<Axis> pack_source(const Operand& op) {
  std::vector<Axis> axes;
  for (const Axis& a : op.batch)
    if (a.stride != 0) axes.push_back(a);
  axes.insert(axes.end(), op.rows.begin(), op.rows.end());
  axes.insert(axes.end(), op.cols.begin(), op.cols.end());
  axes = compact_axes(axes);
  if (axes.empty()) axes.push_back({1, 1});
  return axes;
}

// Elements a packed copy of `op` holds.
int64_t packed_numel(const Operand& op, int64_t rows, int64_t cols) {
  int64_t n = rows * cols;
  for (const Axis& a : op.batch)
    if (a.stride != 0) n *= a.size;
  return n;
}

// Merges each operand's row and column groups (packing `pack_a` / `pack_b`), then shrinks the
// batch: size-1 axes are dropped, neighbours that every view can merge are merged, and trailing
// batch axes along which B broadcasts fold into M (x[B, S, H] @ w[H, N] becomes one GEMM of
// B*S rows). nullopt when an unpacked operand's groups do not merge.
std::optional<Layout> make_layout(const Problem& p, bool pack_a, bool pack_b) {
  Layout l;
  l.m = p.m;
  l.k = p.k;
  l.n = p.n;
  Mat pa = packed_view(p.a, p.m, p.k), pb = packed_view(p.b, p.k, p.n);
  auto view = [](const Operand& op, const Mat& packed, bool pack, int64_t rows, int64_t cols,
                 Mat* out) {
    if (pack) {
      out->row = packed.row;
      out->col = packed.col;
      return true;
    }
    std::optional<Axis> r = merge_group(op.rows), c = merge_group(op.cols);
    if (!r || !c) return false;
    out->row = {rows, r->stride};
    out->col = {cols, c->stride};
    return true;
  };
  if (!view(p.a, pa, pack_a, p.m, p.k, &l.a) || !view(p.b, pb, pack_b, p.k, p.n, &l.b))
    return std::nullopt;
  size_t nb = p.batch.size();
  std::vector<int64_t> c_dims = p.batch;
  c_dims.push_back(p.m);
  c_dims.push_back(p.n);
  std::vector<int64_t> cs = dense_strides(c_dims);
  l.c.row = {p.m, cs[nb]};
  l.c.col = {p.n, 1};
  if (p.has_bias) {
    l.bias.row = p.bias[nb];
    l.bias.col = p.bias[nb + 1];
  }

  // Size-1 batch axes are dropped; an axis merges into the previous one when all four views
  // allow it.
  Mat* views[4] = {&l.a, &l.b, &l.bias, &l.c};
  for (size_t i = 0; i < nb; ++i) {
    if (p.batch[i] == 1) continue;
    Axis axes[4] = {pack_a ? pa.batch[i] : p.a.batch[i], pack_b ? pb.batch[i] : p.b.batch[i],
                    p.has_bias ? p.bias[i] : Axis{p.batch[i], 0}, Axis{p.batch[i], cs[i]}};
    bool merged = !l.batch.empty();
    Axis m[4];
    for (int v = 0; v < 4 && merged; ++v)
      merged = merge_axes(views[v]->batch.back(), axes[v], &m[v]);
    for (int v = 0; v < 4; ++v) {
      if (merged)
        views[v]->batch.back() = m[v];
      else
        views[v]->batch.push_back(axes[v]);
    }
    if (merged)
      l.batch.back() *= p.batch[i];
    else
      l.batch.push_back(p.batch[i]);
  }
  // The innermost batch axis folds into M while B broadcasts along it and A, bias and C merge.
  Mat* rowed[3] = {&l.a, &l.bias, &l.c};
  while (!l.batch.empty() && l.b.batch.back().stride == 0) {
    Axis m[3];
    bool ok = true;
    for (int v = 0; v < 3 && ok; ++v) ok = merge_axes(rowed[v]->batch.back(), rowed[v]->row, &m[v]);
    if (!ok) break;
    for (int v = 0; v < 3; ++v) {
      rowed[v]->row = m[v];
      rowed[v]->batch.pop_back();
    }
    l.m *= l.batch.back();
    l.b.batch.pop_back();
    l.batch.pop_back();
  }
  return l;
}

// Element offsets of batch index `bi` (row-major over l.batch) in A, B, the bias and C.
struct BatchOffsets {
  int64_t a = 0, b = 0, bias = 0, c = 0;
};
BatchOffsets batch_offsets(const Layout& l, int64_t bi) {
  BatchOffsets o;
  for (size_t d = l.batch.size(), rest = static_cast<size_t>(bi); d-- > 0;) {
    int64_t idx = static_cast<int64_t>(rest) % l.batch[d];
    rest /= static_cast<size_t>(l.batch[d]);
    o.a += idx * l.a.batch[d].stride;
    o.b += idx * l.b.batch[d].stride;
    o.bias += idx * l.bias.batch[d].stride;
    o.c += idx * l.c.batch[d].stride;
  }
  return o;
}

// ---- the oneDNN path (f32, bf16, f16 through f32)

// A oneDNN memory descriptor of the view `axes` (outermost first): broadcast axes get dim 1,
// and a size-1 dim gets the stride a row-major layout would give it (its inner neighbour's
// stride times size), so oneDNN recognises plain and transposed layouts. `unit` prepends one
// more size-1 dim.
memory::desc axes_md(std::vector<Axis> axes, memory::data_type dt, bool unit) {
  if (unit || axes.empty()) axes.insert(axes.begin(), Axis{1, 0});
  memory::dims dims(axes.size()), strides(axes.size());
  for (size_t i = axes.size(); i-- > 0;) {
    dims[i] = axes[i].stride == 0 ? 1 : axes[i].size;
    strides[i] = dims[i] > 1            ? axes[i].stride
                 : i + 1 == axes.size() ? 1
                                        : strides[i + 1] * dims[i + 1];
  }
  return memory::desc(dims, dt, strides);
}

// The descriptor of matrix view `v` as dims [batch..., rows, cols] (see axes_md).
memory::desc mat_md(const Mat& v, memory::data_type dt, bool unit) {
  std::vector<Axis> axes = v.batch;
  axes.push_back(v.row);
  axes.push_back(v.col);
  return axes_md(axes, dt, unit);
}

// The split epilogue's in-place bias add as a binary primitive (with `attr`) over C viewed with
// the fewest dims: neighbouring dims merge while the bias broadcasts along both or neither.
// jit binary broadcasts along dim 1 but not dim 0 (a per-batch bias [B, 1, 1] is reference
// code as [B, M, N] yet jit as [1, B, M*N]), so a unit dim is also tried in front; the first
// non-reference form wins. Throws dnnl::error when oneDNN rejects both.
struct SplitAdd {
  dnnl::binary::primitive_desc pd;
  memory::desc c, bias;
};
SplitAdd split_add(const Problem& p, memory::data_type c_dt, memory::data_type bias_dt,
                   const dnnl::primitive_attr& attr) {
  std::vector<int64_t> dims = p.batch;
  dims.push_back(p.m);
  dims.push_back(p.n);
  std::vector<int64_t> cs = dense_strides(dims);
  std::vector<Axis> c, b;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == 1) continue;
    Axis ca{dims[i], cs[i]}, ba = p.bias[i], cm, bm;
    if (!c.empty() && merge_axes(c.back(), ca, &cm) && merge_axes(b.back(), ba, &bm)) {
      c.back() = cm;
      b.back() = bm;
    } else {
      c.push_back(ca);
      b.push_back(ba);
    }
  }
  std::optional<SplitAdd> first;
  for (bool unit : {false, true}) {
    memory::desc cm = axes_md(c, c_dt, unit), bm = axes_md(b, bias_dt, unit);
    dnnl::binary::primitive_desc pd(dnnl::binary::desc(dnnl::algorithm::binary_add, cm, bm, cm),
                                    attr, dnnl_engine());
    if (!is_reference_impl(pd)) return {pd, cm, bm};
    if (!first) first = SplitAdd{pd, cm, bm};
  }
  return *first;
}

// The oneDNN memory objects of one primitive's arguments, made once (without data) and
// rebound to each call's buffers with set_data_handle, and the argument array
// dnnl_primitive_execute takes: a call creates no memory object and no argument map.
struct BoundArgs {
  std::array<memory, 5> mem;
  std::array<dnnl_exec_arg_t, 5> args{};
  int n = 0;

  void add(int arg, const memory::desc& md) {
    mem[static_cast<size_t>(n)] = memory(md, dnnl_engine(), DNNL_MEMORY_NONE);
    args[static_cast<size_t>(n)] = {arg, mem[static_cast<size_t>(n)].get()};
    ++n;
  }
  // Points argument i (in add order) at `ptr` (an operand is only read; oneDNN's handle is
  // non-const for every argument).
  void bind(int i, const void* ptr) const {
    mem[static_cast<size_t>(i)].set_data_handle(const_cast<void*>(ptr));
  }
  void execute(const dnnl::primitive& prim, dnnl::stream& s) const {
    dnnl::error::wrap_c_api(dnnl_primitive_execute(prim.get(), s.get(), n, args.data()),
                            "could not execute a primitive");
  }
};

// The argument sets of one kernel's primitives (a matmul, a split bias add), one per
// concurrent caller: clones of an executable share its kernels and run them on several threads
// at once, and a memory object must not be rebound by two calls at a time. A call takes a free
// set and returns it afterwards (lock free); it makes a new set only when every pooled one is
// in use, and drops its set when the pool is full, so steady-state runs of up to kSlots
// concurrent callers allocate nothing here.
template <class Set>
class SetPool {
 public:
  static constexpr size_t kSlots = 8;
  explicit SetPool(std::function<Set*()> make) : make_(std::move(make)) {
    slots_[0].store(make_(), std::memory_order_relaxed);
  }
  SetPool(const SetPool&) = delete;
  SetPool& operator=(const SetPool&) = delete;
  ~SetPool() {
    for (std::atomic<Set*>& slot : slots_) delete slot.load(std::memory_order_relaxed);
  }
  Set* take() {
    for (std::atomic<Set*>& slot : slots_)
      if (Set* set = slot.exchange(nullptr, std::memory_order_acquire)) return set;
    return make_();
  }
  void give(Set* set) {
    for (std::atomic<Set*>& slot : slots_) {
      Set* empty = nullptr;
      if (slot.compare_exchange_strong(empty, set, std::memory_order_release,
                                       std::memory_order_relaxed))
        return;
    }
    delete set;
  }

 private:
  std::function<Set*()> make_;
  std::array<std::atomic<Set*>, kSlots> slots_{};
};

// How the bias reaches oneDNN: the matmul's bias input (a per-column bias), a binary_add
// post-op (the broadcasts oneDNN's jit post-ops handle), the same with a unit dim prepended to
// a 2-D problem (jit post-ops broadcast along dim 1 of a 3-D dst, e.g. a per-row bias, but not
// along dim 0 of a 2-D one), or a separate in-place binary primitive after the matmul (one
// more pass over the result) when no fused form avoids oneDNN's reference implementation.
enum class BiasMode { None, Arg, PostOp, PostOp3D, Split };

// A matmul's arguments in BoundArgs order: src, weights, dst, the bias if `mode` passes one to
// the matmul, the scratchpad if any (DnnlGemm binds them in this order).
std::vector<std::pair<int, memory::desc>> matmul_arg_descs(const memory::desc& a,
                                                           const memory::desc& b,
                                                           const memory::desc& c,
                                                           const memory::desc& bias, BiasMode mode,
                                                           const memory::desc& pad) {
  std::vector<std::pair<int, memory::desc>> list = {
      {DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}};
  if (mode == BiasMode::Arg) list.emplace_back(DNNL_ARG_BIAS, bias);
  if (mode == BiasMode::PostOp || mode == BiasMode::PostOp3D)
    list.emplace_back(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, bias);
  if (pad.get_size() > 0) list.emplace_back(DNNL_ARG_SCRATCHPAD, pad);
  return list;
}

// The matmul's attributes: a user scratchpad, the bias as a binary post-op in the PostOp
// modes, and the activation unless the split add applies it.
dnnl::primitive_attr matmul_attr(BiasMode mode, const memory::desc& bias, const std::string& act) {
  dnnl::post_ops po;
  if (mode == BiasMode::PostOp || mode == BiasMode::PostOp3D)
    po.append_binary(dnnl::algorithm::binary_add, bias);
  if (mode != BiasMode::Split) append_activation(po, act);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  attr.set_post_ops(po);
  return attr;
}

// Sets the calling thread's OpenMP thread count (the ICV oneDNN reads) to 1 while it lives,
// restoring it after: oneDNN's brgemm matmul fixes its thread count when a primitive is
// created, and a chunk primitive must run on the thread that executes it, never open a team.
class SingleThreadedCreation {
 public:
  SingleThreadedCreation() : saved_(omp_get_max_threads()) { omp_set_num_threads(1); }
  ~SingleThreadedCreation() { omp_set_num_threads(saved_); }
  SingleThreadedCreation(const SingleThreadedCreation&) = delete;
  SingleThreadedCreation& operator=(const SingleThreadedCreation&) = delete;

 private:
  int saved_;
};

// A 2-D matmul split into a grid of chunks that rlx's pool runs (parallel_chunks), each chunk
// one single-threaded oneDNN matmul on a block of rows of A and a block of columns of B, C and
// the bias (strided views of the whole operands: nothing is copied). Instead of oneDNN opening
// its own OpenMP team per GEMM, the GEMM is one region of rlx's pool, and threads claim chunks
// one at a time, so a late thread delays the GEMM by at most one chunk. The grid depends on the
// shape only, so results are bitwise the same for every thread count > 1. Against the unsplit
// product on one thread: bitwise equal for row blocks (a chunk keeps every column, and brgemm
// sums k in the same blocks), not always for column blocks (also those of a wide 2-D grid):
// oneDNN picks the K blocking of a chunk from its width, and the partial sums of K blocks are
// added (a K = 1536, N = 192 chunk sums in other blocks than N = 384), so there the results
// differ by rounding only.
struct GemmGrid {
  int64_t m = 0, n = 0, mb = 0, nb = 0, row_blocks = 0, col_blocks = 0;
  // Element strides that place a chunk: A's rows, B's columns, C's rows, the bias's rows and
  // columns; bytes of an A / B / bias element (the compute type) and of a C element.
  int64_t a_row = 0, b_col = 0, c_row = 0, bias_row = 0, bias_col = 0;
  size_t in_size = 0, c_size = 0;
  // The chunk primitives by shape: index 2 * (last row block, when M has a tail) + (last
  // column block, when N has a tail); unused shapes stay empty.
  struct Tile {
    std::optional<dnnl::matmul> prim;
    memory::desc a, b, c, bias, pad;
  };
  std::array<Tile, 4> tiles;

  // The tile of chunk (i, j) (row block i, column block j).
  int tile(int64_t i, int64_t j) const {
    return (i + 1 == row_blocks && m % mb != 0 ? 2 : 0) + (j + 1 == col_blocks && n % nb != 0);
  }
};

// Grid chunks: at least this many multiply-adds in the whole problem (below it one thread's GEMM
// takes ~50 us and a region's wake-up is a large share of it); from 2 * kGridRowBlock rows, row
// blocks of at most kGridRowBlock rows that keep every column (MiniLM batch 32's products with N =
// 384: M = 4096 in 8 blocks); below, column blocks of at most kGridColBlock columns (MiniLM batch
// 1: N = 384 in 2 blocks, 1536 in 8). Chosen by single-threaded CPU time of the chunks against the
// unsplit matmul, AMD EPYC (Zen 4) with AVX-512: 128 x 384 x 384 with bias and gelu, 2 blocks of
// 192 columns 1.00x, 3 of 128 1.04x, 6 of 64 1.10x; 128 x 384 x 1536, 8 blocks of 192 0.94x; 4096 x
// 384 x 1536, 8 row blocks 1.01x, 64 blocks of 512 x 192 1.07x.
//
// Wide problems (row blocks and at least kGridWideMinCols columns) split both ways, into blocks of
// at most kGridWideRowBlock rows and of half the columns (at most kGridWideCols): a row block that
// keeps every column runs oneDNN's brgemm, which packs all of B per chunk, while a column block (B
// strided) runs its jit sgemm. Chunks of 1024 x K x 4096 at 1 thread (CPU time, median of 3, same
// CPU, load ~6): 512 rows, every column (brgemm) 89 GFLOP/s, blocks of 512 x 2048 101, of 1024 x
// 2048 106 (K = 2048: 97, 99, 107).
//
// At 2 threads (oneDNN chunks on 2 OpenMP threads, process CPU time / 2 so that other processes'
// load counts less; medians of 5-7 interleaved rounds, load 4-5; dnnl_sgemm on the whole problem in
// brackets): n = 1024 row blocks of 512 199 GFLOP/s, 1024 x 512 203 (209); n = 2048 512 x 2048 195,
// 1024 x 1024 209, 2048 x 1024 211 (213); n = 4096 1024 x 2048 207, 4096 x 1024 212, 2048 x 2048
// 215 (209); 4096 x 384 x 1152 (MiniLM batch 32's QKV) 512 x 1152 199, 1024 x 576 215 (216); 4096 x
// 384 x 1536 512 x 1536 192, 1024 x 768 208 (220); 4096 x 384 x 768 512 x 768 198, 1024 x 384 208
// (212), but 2048 x 1024 x 768 196 either way, and 4096 x 1536 x 384 213 / 210 (208) for 512 x 384
// / 1024 x 192: from 1024 columns. Every one of those keeps the chunk count of the row blocks (2,
// 4, 8), so a late thread delays the GEMM by as much as before. rlx_bench_cpu's sgemm table
// (wall time, 2 threads, load 2.7-3.1, 3 interleaved rounds), rlx / dnnl_sgemm with row blocks
// then with this grid: n = 1024 0.90, 0.96, 0.88 then 0.96, 1.01, 1.03; n = 2048 0.90, 0.91, 0.85
// then 0.99, 1.04, 0.97.
//
// The number of chunks is made even where a block can be narrowed (it was 3 for 512 x 512 x 512,
// which kept one of 2 threads idle for a third of the GEMM).
constexpr int64_t kGridMinWork = int64_t{1} << 21;
constexpr int64_t kGridRowBlock = 512;
constexpr int64_t kGridColBlock = 192;
constexpr int64_t kGridWideRowBlock = 1024;
constexpr int64_t kGridWideCols = 2048;
constexpr int64_t kGridWideMinCols = 1024;

// Blocks of at most `block` (rounded up to a multiple of `align`) that cover `size`, their count
// made even when it is odd and above 1 and a narrower block gives an even count; returns the
// block size (the last block takes the rest).
int64_t even_blocks(int64_t size, int64_t block, int64_t align) {
  auto round_up = [align](int64_t v) { return (v + align - 1) / align * align; };
  int64_t count = (size + block - 1) / block;
  int64_t b = round_up((size + count - 1) / count);
  for (int64_t c = count; c > 1 && c <= count + 2 && ((size + b - 1) / b) % 2 != 0; ++c)
    if (int64_t nb = round_up((size + c) / (c + 1)); ((size + nb - 1) / nb) % 2 == 0) b = nb;
  return b;
}

// Why relu on an f32 result runs as vec_apply after the matmul rather than as post-ops: oneDNN's
// relu maps NaN to 0, so the post-ops that match the reference are a chain of three
// (append_activation: elu, leaky relu, linear), and the elu evaluates an exponential per
// element. oneDNN's jit eltwise runs that chain at ~1.0 ns per element against 0.12 for its
// plain relu and for vec_apply's exact relu (24576 f32 in L2, 1 thread; gelu_erf 0.68, gelu_tanh
// 0.74, swish 0.72 there, vec_apply's kGelu 1.15, kGeluTanh 1.40, kSilu 0.85). AMD EPYC (Zen 4),
// single-threaded grid chunks, CPU time against the same chunk without an activation (bias
// fused), medians of 5-9 interleaved rounds, load 3.5-5.3 on 2 CPUs, for 128 x 384 x 192 of a
// 1536-column B / 1024 x 384 x 768: relu post-ops 1.14-1.16x / 1.15-1.16x, vec_apply on the
// chunk's block right after its matmul 0.95-0.97x / 1.04-1.08x. Whole GEMMs through Session, 2
// threads, wall, relu / none (3 interleaved rounds, load ~5.3): 128 x 384 x 1536 1.22-1.31 with
// the chain, 0.97-1.08 this way; 4096 x 384 x 1536 1.13-1.22 and 0.96-1.11. gelu, gelu_tanh and
// silu stay post-ops: after the chunk they cost more (gelu 1.05-1.08x as a post-op vs 1.08-1.10x
// after, 1.09x vs 1.18x; gelu_tanh 1.03-1.04x vs 1.10-1.13x, 1.08-1.10x vs 1.19-1.20x; silu
// 1.02x vs 1.02-1.05x, 1.08-1.09x vs 1.11-1.15x): oneDNN's jit is faster than vec_apply's
// few-ulp functions, and a 1024 x 768 block (3 MiB) does not stay in L2. (vec_apply is the more
// accurate one: <= 6 ulp, where oneDNN's gelu_erf / gelu_tanh / swish flush tails towards 0 at
// up to 2^24 ulp, though within ~1.5e-7 * max(1, |x|) absolute, dnnl_util.h.)
constexpr int64_t kReluAfterChunk = int64_t{1} << 18;

// relu in place on n contiguous f32 at c, in parallel chunks of kReluAfterChunk elements (the
// unsplit matmul's result, which oneDNN may have computed on several threads).
void relu_after_matmul(std::byte* c, int64_t n) {
  auto* f = reinterpret_cast<float*>(c);
  parallel_chunks(0, n, kReluAfterChunk, [f](int64_t i0, int64_t i1) {
    vec_apply(VecFn::kRelu, f + i0, f + i0, i1 - i0);
  });
}

// A problem compiled to oneDNN primitives, plus the copies around them: operands packed
// (strided views oneDNN would run through its reference implementation) or converted (f16, and
// bf16 where oneDNN has no bf16 matmul, to f32), such a bias converted to f32, and an f32 result
// rounded to f16/bf16.
// Accuracy: f32 sums in oneDNN's blocked order of f32 products (exact for bf16 / f16
// operands), so an element errs by at most ~K * 2^-24 * sum_k |a_k b_k| (in practice ~sqrt(K)
// times less); bias and activation are applied in f32 and the result is rounded once.
struct DnnlGemm {
  int64_t k = 0;
  BiasMode mode = BiasMode::None;
  bool pack_a = false, pack_b = false;
  std::vector<Axis> a_src, b_src;
  size_t a_bytes = 0, b_bytes = 0;
  GatherFn gather_in = nullptr;
  ConvertFn bias_in = nullptr;
  int64_t bias_numel = 0;
  ConvertFn dst_out = nullptr;
  int64_t c_numel = 0;
  size_t c_bytes = 0;
  memory::desc a_md, b_md, c_md, bias_md, matmul_pad;
  memory::desc split_c_md, split_bias_md, split_pad;
  std::optional<dnnl::matmul> matmul;
  std::optional<dnnl::binary> split;  // dst += bias, then the activation
  bool matmul_reference = false, split_reference = false;
  // The primitives' bound arguments (see SetPool), made by bind_args once the plan is chosen.
  // The layout the primitives were built for, and the activation they apply (plan_grid builds
  // the chunk primitives from them).
  Layout layout;
  std::string act;
  // relu on an f32 result: applied by rlx after the matmul (and the split add) instead of as
  // post-ops, to each grid chunk's block while it is in cache (see relu_after_matmul).
  bool relu_after = false;
  // The chunked form of the matmul (plan_grid), run instead of `matmul` while num_threads() > 1.
  std::shared_ptr<const GemmGrid> grid;
  struct Args {
    BoundArgs matmul, split;
    std::array<BoundArgs, 4> tiles;  // GemmGrid::tiles' arguments
  };
  std::shared_ptr<SetPool<Args>> args;

  // Creates `args`: the argument memory objects of the chosen plan.
  void bind_args() {
    using Descs = std::vector<std::pair<int, memory::desc>>;
    std::array<Descs, 4> tile_args;
    if (grid)
      for (size_t t = 0; t < tile_args.size(); ++t) {
        const GemmGrid::Tile& tile = grid->tiles[t];
        if (tile.prim)
          tile_args[t] = matmul_arg_descs(tile.a, tile.b, tile.c, tile.bias, mode, tile.pad);
      }
    auto make = [mm_args = matmul_arg_list(), split_args = split_arg_list(), tile_args] {
      auto* set = new Args;
      for (const auto& [arg, md] : mm_args) set->matmul.add(arg, md);
      for (const auto& [arg, md] : split_args) set->split.add(arg, md);
      for (size_t t = 0; t < tile_args.size(); ++t)
        for (const auto& [arg, md] : tile_args[t]) set->tiles[t].add(arg, md);
      return set;
    };
    args = std::make_shared<SetPool<Args>>(make);
  }

  // Plans `grid` for a 2-D matmul (after batch dims fold into M) with K > 0, the bias fused
  // (or none) and enough work to split: blocks of rows when M is large (of rows and columns
  // when N is wide too), else of columns (kGridRowBlock, kGridColBlock, kGridWideRowBlock,
  // kGridWideCols; even_blocks), and a single-threaded matmul primitive per chunk shape.
  // Leaves `grid` empty otherwise, or when oneDNN would run a chunk shape in its reference
  // implementation. The grid does not depend on the thread count; it runs while
  // num_threads() > 1 (one thread runs the unsplit `matmul`).
  void plan_grid(DType compute, DType dst) {
    const Layout& l = layout;
    if (!matmul || !l.batch.empty() || l.k == 0) return;
    if (mode != BiasMode::None && mode != BiasMode::Arg && mode != BiasMode::PostOp) return;
    if (l.m * l.n * l.k < kGridMinWork) return;
    auto g = std::make_shared<GemmGrid>();
    g->m = l.m;
    g->n = l.n;
    bool rows = l.m >= 2 * kGridRowBlock, wide = rows && l.n >= kGridWideMinCols;
    // Column blocks in multiples of 16 (a vector of f32), the last one takes the rest; rows
    // split only in row mode, columns in column mode and when wide (at least 2 column blocks).
    g->mb = !rows ? l.m : even_blocks(l.m, wide ? kGridWideRowBlock : kGridRowBlock, 1);
    g->nb = wide   ? even_blocks(l.n, std::min(kGridWideCols, (l.n + 1) / 2), 16)
            : rows ? l.n
                   : even_blocks(l.n, kGridColBlock, 16);
    g->row_blocks = (l.m + g->mb - 1) / g->mb;
    g->col_blocks = (l.n + g->nb - 1) / g->nb;
    if (g->row_blocks * g->col_blocks < 2) return;
    g->a_row = l.a.row.stride;
    g->b_col = l.b.col.stride;
    g->c_row = l.c.row.stride;
    g->bias_row = l.bias.row.stride;
    g->bias_col = l.bias.col.stride;
    g->in_size = dtype_size(compute);
    g->c_size = dtype_size(dst);
    try {
      SingleThreadedCreation single;
      for (int64_t i : {int64_t{0}, g->row_blocks - 1})
        for (int64_t j : {int64_t{0}, g->col_blocks - 1}) {
          GemmGrid::Tile& tile = g->tiles[static_cast<size_t>(g->tile(i, j))];
          if (tile.prim) continue;
          int64_t rows = std::min(g->mb, l.m - i * g->mb), cols = std::min(g->nb, l.n - j * g->nb);
          auto block = [&](const Mat& v, int64_t r, int64_t c) {
            Mat b;
            b.row = {r, v.row.stride};
            b.col = {c, v.col.stride};
            return b;
          };
          tile.a = mat_md(block(l.a, rows, l.k), dnnl_type(compute), false);
          tile.b = mat_md(block(l.b, l.k, cols), dnnl_type(compute), false);
          tile.c = mat_md(block(l.c, rows, cols), dnnl_type(dst), false);
          if (mode != BiasMode::None)
            tile.bias = mat_md(block(l.bias, rows, cols), dnnl_type(compute), false);
          dnnl::matmul::primitive_desc pd(
              dnnl::matmul::desc(tile.a, tile.b, mode == BiasMode::Arg ? tile.bias : memory::desc(),
                                 tile.c),
              matmul_attr(mode, tile.bias, act), dnnl_engine());
          if (is_reference_impl(pd)) return;
          tile.pad = pd.scratchpad_desc();
          tile.prim = dnnl::matmul(pd);
        }
    } catch (const dnnl::error&) {
      return;
    }
    grid = std::move(g);
  }

  // Runs the grid: threads claim chunks one at a time, each taking its own argument set and
  // its thread's scratchpad.
  void run_grid(const std::byte* a, const std::byte* b, const std::byte* bias, std::byte* c) const {
    const GemmGrid& g = *grid;
    parallel_chunks(0, g.row_blocks * g.col_blocks, 1, [&](int64_t t0, int64_t t1) {
      dnnl::stream& s = dnnl_stream();
      Args* set = args->take();
      for (int64_t t = t0; t < t1; ++t) {
        int64_t i = t / g.col_blocks, j = t % g.col_blocks, r0 = i * g.mb, c0 = j * g.nb;
        const GemmGrid::Tile& tile = g.tiles[static_cast<size_t>(g.tile(i, j))];
        BoundArgs& m = set->tiles[static_cast<size_t>(g.tile(i, j))];
        m.bind(0, a + static_cast<size_t>(r0 * g.a_row) * g.in_size);
        m.bind(1, b + static_cast<size_t>(c0 * g.b_col) * g.in_size);
        m.bind(2, c + static_cast<size_t>(r0 * g.c_row + c0) * g.c_size);
        int k = 3;
        if (bias)
          m.bind(k++, bias + static_cast<size_t>(r0 * g.bias_row + c0 * g.bias_col) * g.in_size);
        if (tile.pad.get_size() > 0) m.bind(k, scratch(kScratchPad, tile.pad.get_size()));
        m.execute(*tile.prim, s);
        if (relu_after) {
          s.wait();
          auto* block = reinterpret_cast<float*>(c) + r0 * g.c_row + c0;
          int64_t rows = std::min(g.mb, g.m - r0), cols = std::min(g.nb, g.n - c0);
          for (int64_t r = 0; r < rows; ++r)
            vec_apply(VecFn::kRelu, block + r * g.c_row, block + r * g.c_row, cols);
        }
      }
      s.wait();
      args->give(set);
    });
  }
  // The matmul's arguments (see matmul_args).
  std::vector<std::pair<int, memory::desc>> matmul_arg_list() const {
    if (!matmul) return {};
    return matmul_arg_descs(a_md, b_md, c_md, bias_md, mode, matmul_pad);
  }
  // The split add's arguments: C, the bias, C again (in place), the scratchpad if any.
  std::vector<std::pair<int, memory::desc>> split_arg_list() const {
    std::vector<std::pair<int, memory::desc>> list;
    if (!split) return list;
    list = {
        {DNNL_ARG_SRC_0, split_c_md}, {DNNL_ARG_SRC_1, split_bias_md}, {DNNL_ARG_DST, split_c_md}};
    if (split_pad.get_size() > 0) list.emplace_back(DNNL_ARG_SCRATCHPAD, split_pad);
    return list;
  }

  void operator()(const KernelIO& io) const {
    const std::byte* a = io.in[0];
    const std::byte* b = io.in[1];
    const std::byte* bias = mode == BiasMode::None ? nullptr : io.in[2];
    std::byte* c = dst_out ? scratch(kScratchDst, c_bytes) : io.out[0];
    if (pack_a) {
      std::byte* buf = scratch(kScratchSrc, a_bytes);
      gather_in(a, a_src, buf);
      a = buf;
    }
    if (pack_b) {
      std::byte* buf = scratch(kScratchWeights, b_bytes);
      gather_in(b, b_src, buf);
      b = buf;
    }
    if (bias && bias_in) {
      std::byte* buf = scratch(kScratchBias, static_cast<size_t>(bias_numel) * sizeof(float));
      bias_in(bias, buf, bias_numel);
      bias = buf;
    }
    if (grid && num_threads() > 1) {
      run_grid(a, b, bias, c);
      if (dst_out) dst_out(c, io.out[0], c_numel);
      return;
    }
    dnnl::stream& s = dnnl_stream();
    Args* set = args->take();
    if (matmul) {
      BoundArgs& m = set->matmul;
      m.bind(0, a);
      m.bind(1, b);
      m.bind(2, c);
      int i = 3;
      if (mode != BiasMode::None && mode != BiasMode::Split) m.bind(i++, bias);
      if (matmul_pad.get_size() > 0) m.bind(i, scratch(kScratchPad, matmul_pad.get_size()));
      m.execute(*matmul, s);
    } else {
      std::memset(c, 0, c_bytes);  // K = 0: empty sums (0 bits are +0 in f32 and bf16)
    }
    if (split) {
      BoundArgs& add = set->split;
      add.bind(0, c);
      add.bind(1, bias);
      add.bind(2, c);
      if (split_pad.get_size() > 0) add.bind(3, scratch(kScratchPad, split_pad.get_size()));
      add.execute(*split, s);
    }
    args->give(set);
    s.wait();
    if (relu_after) relu_after_matmul(c, c_numel);
    if (dst_out) dst_out(c, io.out[0], c_numel);
  }
};

// Whether oneDNN has a non-reference bf16 matmul on this CPU (AVX-512 cores, natively with
// AVX512-BF16 / AMX); on AVX2-only CPUs it has none, and bf16 then goes through f32 copies.
bool dnnl_has_bf16_matmul() {
  static const bool has = [] {
    try {
      memory::desc md({8, 8}, memory::data_type::bf16, memory::format_tag::ab);
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(md, md, md), dnnl_engine());
      return !is_reference_impl(pd);
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return has;
}

// The type oneDNN computes in for operands of type `in`: bf16 natively where oneDNN has a bf16
// matmul (f32 accumulation), everything else in f32 (oneDNN 2.7 has no f16 matmul on CPUs).
DType compute_type(DType in) {
  return in == DType::bf16 && dnnl_has_bf16_matmul() ? DType::bf16 : DType::f32;
}

// The type oneDNN writes: the result type when oneDNN can (f32, or bf16 from bf16 operands),
// else f32 that the kernel then rounds.
DType dst_type(DType in, DType out) {
  return out == DType::f32 || out == compute_type(in) ? out : DType::f32;
}

// Builds `p` with the bias passed as `mode`, packing operands as asked; nullopt when the layout
// needs a pack not asked for or oneDNN rejects the descriptors.
std::optional<DnnlGemm> build_dnnl(const Problem& p, bool pack_a, bool pack_b, BiasMode mode) {
  std::optional<Layout> l = make_layout(p, pack_a, pack_b);
  if (!l) return std::nullopt;
  bool unit = mode == BiasMode::PostOp3D;
  if (unit && !l->batch.empty()) return std::nullopt;
  if (mode == BiasMode::Arg) {
    for (const Axis& a : l->bias.batch)
      if (a.stride != 0) return std::nullopt;
    if (l->bias.row.stride != 0) return std::nullopt;
  }
  DType compute = compute_type(p.in), dst = dst_type(p.in, p.out);
  DnnlGemm g;
  g.k = p.k;
  g.mode = mode;
  g.layout = *l;
  g.relu_after = p.act == "relu" && dst == DType::f32;
  g.act = g.relu_after ? "none" : p.act;
  try {
    g.a_md = mat_md(l->a, dnnl_type(compute), unit);
    g.b_md = mat_md(l->b, dnnl_type(compute), unit);
    g.c_md = mat_md(l->c, dnnl_type(dst), unit);
    if (p.has_bias) g.bias_md = mat_md(l->bias, dnnl_type(compute), unit);
    const dnnl::engine& eng = dnnl_engine();
    if (p.k > 0) {
      dnnl::primitive_attr attr = matmul_attr(mode, g.bias_md, g.act);
      dnnl::matmul::primitive_desc pd(
          dnnl::matmul::desc(g.a_md, g.b_md, mode == BiasMode::Arg ? g.bias_md : memory::desc(),
                             g.c_md),
          attr, eng);
      g.matmul_reference = is_reference_impl(pd);
      g.matmul_pad = pd.scratchpad_desc();
      g.matmul = dnnl::matmul(pd);
    }
    if (mode == BiasMode::Split) {
      dnnl::post_ops po;
      append_activation(po, g.act);
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      attr.set_post_ops(po);
      SplitAdd add = split_add(p, dnnl_type(dst), dnnl_type(compute), attr);
      g.split_reference = is_reference_impl(add.pd);
      g.split_c_md = add.c;
      g.split_bias_md = add.bias;
      g.split_pad = add.pd.scratchpad_desc();
      g.split = dnnl::binary(add.pd);
    }
  } catch (const dnnl::error&) {
    return std::nullopt;
  }
  g.c_numel = p.m * p.n;
  for (int64_t d : p.batch) g.c_numel *= d;
  g.c_bytes = static_cast<size_t>(g.c_numel) * dtype_size(dst);
  size_t csize = dtype_size(compute);
  // K = 0 reads neither operand, so nothing is packed.
  g.pack_a = pack_a && p.k > 0;
  g.pack_b = pack_b && p.k > 0;
  g.a_src = pack_source(p.a);
  g.b_src = pack_source(p.b);
  g.a_bytes = static_cast<size_t>(packed_numel(p.a, p.m, p.k)) * csize;
  g.b_bytes = static_cast<size_t>(packed_numel(p.b, p.k, p.n)) * csize;
  switch (p.in) {
    case DType::bf16:
      if (compute == DType::bf16) {
        g.gather_in = gather_bytes<bf16, bf16>;
      } else {
        g.gather_in = gather_bytes<bf16, float>;
        g.bias_in = convert_bytes<bf16, float>;
      }
      break;
    case DType::f16:
      g.gather_in = gather_bytes<f16, float>;
      g.bias_in = convert_bytes<f16, float>;
      break;
    default:
      g.gather_in = gather_bytes<float, float>;
      break;
  }
  if (dst != p.out)
    g.dst_out = p.out == DType::f16 ? convert_bytes<float, f16> : convert_bytes<float, bf16>;
  return g;
}

// The oneDNN build of `p`, trying fused bias forms before the split one and views before
// packed copies: the first without oneDNN reference code, else the first whose matmul is not
// reference code (a reference bias add costs one pass), else the first at all (still
// correct); nullopt when oneDNN rejects every form.
std::optional<DnnlGemm> plan_dnnl(const Problem& p, int64_t bias_numel) {
  std::vector<BiasMode> modes;
  if (!p.has_bias)
    modes = {BiasMode::None};
  else if (p.k == 0)
    modes = {BiasMode::Split};
  else
    modes = {BiasMode::Arg, BiasMode::PostOp, BiasMode::PostOp3D, BiasMode::Split};
  bool convert = compute_type(p.in) != p.in;  // f16 (and bf16 without a bf16 matmul) -> f32
  std::optional<DnnlGemm> fast_matmul, any;
  for (int packs = 0; packs < (convert ? 1 : 4); ++packs) {
    bool pack_a = convert || (packs & 1), pack_b = convert || (packs & 2);
    for (BiasMode mode : modes) {
      std::optional<DnnlGemm> g = build_dnnl(p, pack_a, pack_b, mode);
      if (!g) continue;
      g->bias_numel = bias_numel;
      if (!g->matmul_reference && !g->split_reference) return g;
      if (!g->matmul_reference && !fast_matmul) fast_matmul = g;
      if (!any) any = std::move(g);
    }
  }
  return fast_matmul ? fast_matmul : any;
}

// ---- the small path (f32 problems below kSmallGemmMaxWork)

// A small f32 problem on small_sgemm (no oneDNN call: its fixed per-call cost dominates
// there, small_gemm.h): one GEMM per batch index over the unpacked views, then the bias (any
// broadcast) added and the activation applied in place, row by row, in f32 as oneDNN's
// post-ops do (vec_apply's relu is exact; gelu, gelu_tanh and silu are within a few ulp,
// vec_math.h). Needs B's rows contiguous. Single-threaded; allocates nothing.
struct SmallGemm {
  Layout l;
  bool has_bias = false;
  std::optional<VecFn> act;

  void operator()(const KernelIO& io) const {
    const float* a = io.input<float>(0);
    const float* b = io.input<float>(1);
    const float* bias = has_bias ? io.input<float>(2) : nullptr;
    float* c = io.output<float>(0);
    int64_t batches = 1;
    for (int64_t d : l.batch) batches *= d;
    for (int64_t bi = 0; bi < batches; ++bi) {
      auto [ao, bo, biaso, co] = batch_offsets(l, bi);
      small_sgemm(l.m, l.n, l.k, a + ao, l.a.row.stride, l.a.col.stride, b + bo, l.b.row.stride,
                  c + co, l.c.row.stride);
      if (!bias) continue;
      for (int64_t i = 0; i < l.m; ++i) {
        float* row = c + co + i * l.c.row.stride;
        const float* brow = bias + biaso + i * l.bias.row.stride;
        if (l.bias.col.stride == 1)
          vec_binary(VecBinary::kAdd, row, brow, row, l.n);
        else
          for (int64_t j = 0; j < l.n; ++j) row[j] += brow[j * l.bias.col.stride];
        if (act) vec_apply(*act, row, row, l.n);
      }
    }
  }
};

// The small path's kernel of `p`, or nullopt when `p` is not f32, is too large
// (kSmallGemmMaxWork), has K = 0 or fewer than 4 rows (after batch dims fold into M), needs a
// packed operand or the CPU lacks AVX2 / FMA.
std::optional<SmallGemm> small_gemm(const Problem& p) {
  if (p.in != DType::f32 || p.out != DType::f32 || p.k == 0 || !small_sgemm_supported())
    return std::nullopt;
  int64_t work = p.m * p.n * p.k;
  for (int64_t d : p.batch) work *= d;
  if (work > kSmallGemmMaxWork) return std::nullopt;
  std::optional<Layout> l = make_layout(p, false, false);
  // Fewer than 4 rows leave the micro-kernel's FMA chains too few to hide their latency, and
  // oneDNN is faster there (1x256 @ 256x256: 5.3 us vs 3.8 us).
  if (!l || l->b.col.stride != 1 || l->m < 4) return std::nullopt;
  SmallGemm g;
  g.l = std::move(*l);
  g.has_bias = p.has_bias;
  if (p.act == "relu") g.act = VecFn::kRelu;
  if (p.act == "gelu") g.act = VecFn::kGelu;
  if (p.act == "gelu_tanh") g.act = VecFn::kGeluTanh;
  if (p.act == "silu") g.act = VecFn::kSilu;
  return g;
}

// ---- the loop path (f64 and integer operands, f64 results)

// The activations in double, with the reference evaluator's scalar functions (relu keeps a NaN
// operand's payload and maps -0 to -0 here, where scalar::relu gives the default NaN and +0).
enum class Act { None, Relu, Gelu, GeluTanh, Silu };
Act parse_act(const std::string& act) {
  if (act == "relu") return Act::Relu;
  if (act == "gelu") return Act::Gelu;
  if (act == "gelu_tanh") return Act::GeluTanh;
  if (act == "silu") return Act::Silu;
  return Act::None;
}
double activate(Act act, double v) {
  switch (act) {
    case Act::Relu:
      return std::isnan(v) ? v : std::max(v, 0.0);
    case Act::Gelu:
      return scalar::gelu(v);
    case Act::GeluTanh:
      return scalar::gelu_tanh(v);
    case Act::Silu:
      return scalar::silu(v);
    case Act::None:
      break;
  }
  return v;
}

// Operand elements widened to the accumulator: double for float results (products of f32 or
// narrower are exact; of f64, rounded as in the reference), uint64 for integer results, where
// products and sums wrap modulo 2^64 exactly as the reference's.
template <class Acc, class T>
Acc widen(T x) {
  if constexpr (std::is_same_v<Acc, double>) {
    if constexpr (std::is_same_v<T, f16> || std::is_same_v<T, bf16>)
      return static_cast<double>(to_f32(x));
    else
      return static_cast<double>(x);
  } else {
    return static_cast<uint64_t>(static_cast<int64_t>(x));
  }
}

// Rounds a row of accumulators into the result type: once from double (as the reference), or
// by truncating the wrapped uint64 sum to the integer width.
template <class Acc, class Out>
void store_row(const Acc* acc, std::byte* out, int64_t n) {
  Out* o = reinterpret_cast<Out*>(out);
  for (int64_t j = 0; j < n; ++j) {
    if constexpr (std::is_same_v<Out, f16>)
      o[j] = f16_from_double(acc[j]);
    else if constexpr (std::is_same_v<Out, bf16>)
      o[j] = bf16_from_double(acc[j]);
    else if constexpr (std::is_same_v<Acc, uint64_t>)
      o[j] = static_cast<Out>(static_cast<int64_t>(acc[j]));
    else
      o[j] = static_cast<Out>(acc[j]);
  }
}

template <class Acc>
using StoreFn = void (*)(const Acc*, std::byte*, int64_t);

template <class Acc>
StoreFn<Acc> store_fn(DType out) {
  if constexpr (std::is_same_v<Acc, double>) {
    switch (out) {
      case DType::f16:
        return store_row<double, f16>;
      case DType::bf16:
        return store_row<double, bf16>;
      case DType::f64:
        return store_row<double, double>;
      default:
        return store_row<double, float>;
    }
  } else {
    switch (out) {
      case DType::i8:
        return store_row<uint64_t, int8_t>;
      case DType::u8:
        return store_row<uint64_t, uint8_t>;
      case DType::i32:
        return store_row<uint64_t, int32_t>;
      default:
        return store_row<uint64_t, int64_t>;
    }
  }
}

// The batched product as row-times-matrix loops: each result row is built in chunks of
// kChunk columns, accumulating K rank-1 updates so the inner loop streams a row of B
// (vectorized for full chunks of contiguous f32 / f64 rows); rows run in parallel. Operands
// whose row or column groups do not merge are packed first. Each sum runs over k in the
// reference's order (dot_general may reorder several contracting dims), so f64 results are
// bit-identical to the reference's for matmul and integer results always are.
template <class In, class Acc>
struct LoopGemm {
  static constexpr int64_t kChunk = 256;
  Layout l;
  bool pack_a = false, pack_b = false;
  std::vector<Axis> a_src, b_src;
  bool has_bias = false;
  Act act = Act::None;
  StoreFn<Acc> store = nullptr;
  size_t out_size = 0;

  void operator()(const KernelIO& io) const {
    const In* a = io.input<In>(0);
    const In* b = io.input<In>(1);
    if (pack_a) {
      In* buf = reinterpret_cast<In*>(scratch(kScratchSrc, packed_bytes(a_src)));
      gather(a, a_src, buf);
      a = buf;
    }
    if (pack_b) {
      In* buf = reinterpret_cast<In*>(scratch(kScratchWeights, packed_bytes(b_src)));
      gather(b, b_src, buf);
      b = buf;
    }
    const In* bias = has_bias ? io.input<In>(2) : nullptr;
    std::byte* c = io.out[0];
    int64_t batches = 1;
    for (int64_t d : l.batch) batches *= d;
    int64_t rows = batches * l.m;
    int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(1, l.n * l.k));
    auto body = [&](int64_t r0, int64_t r1) {
      Acc acc[kChunk];
      for (int64_t r = r0; r < r1; ++r) {
        int64_t bi = r / l.m, i = r % l.m;
        BatchOffsets o = batch_offsets(l, bi);
        int64_t ao = o.a + i * l.a.row.stride, bo = o.b, biaso = o.bias + i * l.bias.row.stride;
        for (int64_t j0 = 0; j0 < l.n; j0 += kChunk) {
          int64_t nj = std::min(kChunk, l.n - j0);
          std::fill(acc, acc + nj, Acc{0});
          for (int64_t p = 0; p < l.k; ++p) {
            Acc av = widen<Acc>(a[ao + p * l.a.col.stride]);
            const In* brow = b + bo + p * l.b.row.stride + j0 * l.b.col.stride;
            if (l.b.col.stride == 1 && nj == kChunk) {
              // A fixed trip count, which -O2 vectorizes (for f32 / f64 operands; an
              // open-ended loop it does not vectorize at all).
              for (int64_t j = 0; j < kChunk; ++j) acc[j] += av * widen<Acc>(brow[j]);
            } else if (l.b.col.stride == 1) {
              for (int64_t j = 0; j < nj; ++j) acc[j] += av * widen<Acc>(brow[j]);
            } else {
              for (int64_t j = 0; j < nj; ++j) acc[j] += av * widen<Acc>(brow[j * l.b.col.stride]);
            }
          }
          if constexpr (std::is_same_v<Acc, double>) {
            if (bias) {
              const In* brow = bias + biaso + j0 * l.bias.col.stride;
              for (int64_t j = 0; j < nj; ++j)
                acc[j] = activate(act, acc[j] + widen<Acc>(brow[j * l.bias.col.stride]));
            }
          }
          store(acc, c + static_cast<size_t>(r * l.n + j0) * out_size, nj);
        }
      }
    };
    // By reference: a std::function holding the lambda itself would allocate per call.
    parallel_for(0, rows, grain, std::ref(body));
  }

  static size_t packed_bytes(const std::vector<Axis>& src) {
    size_t n = sizeof(In);
    for (const Axis& a : src) n *= static_cast<size_t>(a.size);
    return n;
  }
};

template <class In, class Acc>
Kernel loop_kernel(const Problem& p) {
  for (int packs = 0; packs < 4; ++packs) {
    bool pack_a = packs & 1, pack_b = packs & 2;
    std::optional<Layout> l = make_layout(p, pack_a, pack_b);
    if (!l) continue;
    LoopGemm<In, Acc> g;
    g.l = *l;
    g.pack_a = pack_a;
    g.pack_b = pack_b;
    g.a_src = pack_source(p.a);
    g.b_src = pack_source(p.b);
    g.has_bias = p.has_bias;
    g.act = parse_act(p.act);
    g.store = store_fn<Acc>(p.out);
    g.out_size = dtype_size(p.out);
    return g;
  }
  return {};  // unreachable: packing both operands always gives a layout
}

// Loop accumulating in double (float results) or uint64 (integer results).
template <class In>
Kernel loop_kernel_for(const Problem& p) {
  if constexpr (std::is_floating_point_v<In> || std::is_same_v<In, f16> ||
                std::is_same_v<In, bf16>) {
    return loop_kernel<In, double>(p);
  } else {
    return is_float(p.out) ? loop_kernel<In, double>(p) : loop_kernel<In, uint64_t>(p);
  }
}

// The kernel of problem `p` (a node whose result has `numel` elements): the small path for
// small f32 problems, oneDNN for other f32, bf16 and f16 operands with a result of one of
// those types; the loop for f64 and integer operands
// and any f64 result (oneDNN would accumulate those in f32 at best).
Kernel gemm_kernel(const Problem& p, int64_t numel, int64_t bias_numel) {
  if (numel == 0) return [](const KernelIO&) {};  // never called: the result is empty
  if (p.in == DType::f32 || p.in == DType::bf16 || p.in == DType::f16) {
    if (p.out != DType::f64) {
      if (std::optional<SmallGemm> small = small_gemm(p)) return Kernel(std::move(*small));
      std::optional<DnnlGemm> g = plan_dnnl(p, bias_numel);
      if (!g) return {};
      g->plan_grid(compute_type(p.in), dst_type(p.in, p.out));
      g->bind_args();
      return Kernel(std::move(*g));
    }
  }
  switch (p.in) {
    case DType::f32:
      return loop_kernel_for<float>(p);
    case DType::f16:
      return loop_kernel_for<f16>(p);
    case DType::bf16:
      return loop_kernel_for<bf16>(p);
    case DType::f64:
      return loop_kernel_for<double>(p);
    case DType::i8:
      return loop_kernel_for<int8_t>(p);
    case DType::u8:
      return loop_kernel_for<uint8_t>(p);
    case DType::i32:
      return loop_kernel_for<int32_t>(p);
    case DType::i64:
      return loop_kernel_for<int64_t>(p);
    default:
      return {};
  }
}

// ---- the ops

Kernel dot_general_kernel(const Graph& g, const Node& node) {
  const TensorType& lt = g.type(node.operands[0]);
  const std::vector<int64_t>& ls = lt.shape.dims();
  const std::vector<int64_t>& rs = g.type(node.operands[1]).shape.dims();
  std::vector<int64_t> lst = dense_strides(ls), rst = dense_strides(rs);
  const std::vector<int64_t>& lb = node.attrs.get_ints("lhs_batch");
  const std::vector<int64_t>& rb = node.attrs.get_ints("rhs_batch");
  const std::vector<int64_t>& lc = node.attrs.get_ints("lhs_contract");
  const std::vector<int64_t>& rc = node.attrs.get_ints("rhs_contract");
  auto at = [](const std::vector<int64_t>& v, int64_t d) { return v[static_cast<size_t>(d)]; };
  Problem p;
  p.in = lt.dtype;
  p.out = node.results[0].dtype;
  for (size_t j = 0; j < lb.size(); ++j) {
    p.batch.push_back(at(ls, lb[j]));
    p.a.batch.push_back({at(ls, lb[j]), at(lst, lb[j])});
    p.b.batch.push_back({at(rs, rb[j]), at(rst, rb[j])});
  }
  auto free_dims = [](size_t rank, const std::vector<int64_t>& b, const std::vector<int64_t>& c) {
    std::vector<bool> bound(rank, false);
    for (int64_t d : b) bound[static_cast<size_t>(d)] = true;
    for (int64_t d : c) bound[static_cast<size_t>(d)] = true;
    std::vector<int64_t> f;
    for (size_t i = 0; i < rank; ++i)
      if (!bound[i]) f.push_back(static_cast<int64_t>(i));
    return f;
  };
  for (int64_t d : free_dims(ls.size(), lb, lc)) {
    p.a.rows.push_back({at(ls, d), at(lst, d)});
    p.m *= at(ls, d);
  }
  for (int64_t d : free_dims(rs.size(), rb, rc)) {
    p.b.cols.push_back({at(rs, d), at(rst, d)});
    p.n *= at(rs, d);
  }
  // Contracting pairs in the order of decreasing lhs stride, so a permuted but dense lhs
  // merges into one K axis (the rhs, if it then does not merge, is packed in that order).
  std::vector<size_t> order(lc.size());
  for (size_t j = 0; j < order.size(); ++j) order[j] = j;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t x, size_t y) { return at(lst, lc[x]) > at(lst, lc[y]); });
  for (size_t j : order) {
    p.a.cols.push_back({at(ls, lc[j]), at(lst, lc[j])});
    p.b.rows.push_back({at(rs, rc[j]), at(rst, rc[j])});
    p.k *= at(ls, lc[j]);
  }
  return gemm_kernel(p, node.results[0].shape.numel(), 0);
}

// numpy matmul of x and w as a Problem: 1-D operands promoted ([K] -> [1, K] on the left,
// [K] -> [K, 1] on the right; the result has the same row-major layout with those unit dims
// squeezed), batch dims right-aligned and broadcast with stride 0.
Problem matmul_problem(const Shape& x, const Shape& w) {
  std::vector<int64_t> xs = x.dims(), ws = w.dims();
  if (xs.size() == 1) xs.insert(xs.begin(), 1);
  if (ws.size() == 1) ws.push_back(1);
  std::vector<int64_t> xst = dense_strides(xs), wst = dense_strides(ws);
  size_t rx = xs.size(), ry = ws.size(), nb = std::max(rx, ry) - 2;
  Problem p;
  p.m = xs[rx - 2];
  p.k = xs[rx - 1];
  p.n = ws[ry - 1];
  for (size_t i = 0; i < nb; ++i) {
    // Batch dim i of the result, aligned to the right of each operand's batch dims.
    bool in_x = i + (rx - 2) >= nb, in_w = i + (ry - 2) >= nb;
    size_t xi = i + (rx - 2) - nb, wi = i + (ry - 2) - nb;
    int64_t xd = in_x ? xs[xi] : 1, wd = in_w ? ws[wi] : 1;
    int64_t size = xd == 1 ? wd : xd;
    p.batch.push_back(size);
    p.a.batch.push_back({size, xd == 1 ? 0 : xst[xi]});
    p.b.batch.push_back({size, wd == 1 ? 0 : wst[wi]});
  }
  p.a.rows = {{p.m, xst[rx - 2]}};
  p.a.cols = {{p.k, 1}};
  p.b.rows = {{p.k, wst[ry - 2]}};
  p.b.cols = {{p.n, 1}};
  return p;
}

Kernel matmul_kernel(const Graph& g, const Node& node) {
  const TensorType& xt = g.type(node.operands[0]);
  Problem p = matmul_problem(xt.shape, g.type(node.operands[1]).shape);
  p.in = xt.dtype;
  p.out = node.results[0].dtype;
  return gemm_kernel(p, node.results[0].shape.numel(), 0);
}

Kernel matmul_bias_act_kernel(const Graph& g, const Node& node) {
  const TensorType& xt = g.type(node.operands[0]);
  const TensorType& wt = g.type(node.operands[1]);
  const TensorType& bt = g.type(node.operands[2]);
  Problem p = matmul_problem(xt.shape, wt.shape);
  p.in = xt.dtype;
  p.out = node.results[0].dtype;
  p.has_bias = true;
  p.act = node.attrs.get_string("activation");
  // The bias broadcasts to the (squeezed) result [batch..., M?, N?]; map its dims to the
  // problem's axes [batch..., M, N], stride 0 where it broadcasts or the dim was squeezed.
  const std::vector<int64_t>& rs = node.results[0].shape.dims();
  std::vector<int64_t> bs(rs.size() - static_cast<size_t>(bt.shape.rank()), 1);
  bs.insert(bs.end(), bt.shape.dims().begin(), bt.shape.dims().end());
  std::vector<int64_t> bst = dense_strides(bs);
  auto axis = [&](size_t pos, int64_t size) { return Axis{size, bs[pos] == 1 ? 0 : bst[pos]}; };
  size_t nb = p.batch.size(), pos = nb;
  for (size_t i = 0; i < nb; ++i) p.bias.push_back(axis(i, p.batch[i]));
  p.bias.push_back(xt.shape.rank() > 1 ? axis(pos++, p.m) : Axis{p.m, 0});
  p.bias.push_back(wt.shape.rank() > 1 ? axis(pos++, p.n) : Axis{p.n, 0});
  return gemm_kernel(p, node.results[0].shape.numel(), bt.shape.numel());
}

}  // namespace

void register_gemm_kernels() {
  register_native(OpKind::DotGeneral, dot_general_kernel);
  register_native(OpKind::MatMul, matmul_kernel);
  register_native(OpKind::FusedMatMulBiasAct, matmul_bias_act_kernel);
  register_conv_kernels();
}

}  // namespace rlx::cpu
