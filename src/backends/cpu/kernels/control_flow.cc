// Region kernels of the control-flow ops cond, while_loop and scan: each body is compiled once
// (at compile time, through the backend's own pipeline) into a Program, and the op's kernel
// runs it inside the step's scratch: [pointer tables | body block | carry slot].
//
// Carries are double-buffered between the op's own result buffers and one carry slot in the
// scratch: an iteration reads its carry where the previous one left it (the first reads the
// init operands in place) and its body's carry outputs are copied into the other buffer (one
// copy per carry per iteration; a passthrough carry is copied too). A scan arranges the
// parity so that its last step writes the results; a while_loop copies from the slot when it
// ends there. scan reads x_t in place (a pointer into xs) and copies y_t straight into ys[t];
// a carry that is also a y (an RNN's `return h, h`) is not copied at all before the last step:
// the next step reads it from ys[t].
#include <algorithm>
#include <cstring>

#include "../program.h"
#include "rlx/ir/error.h"

namespace rlx::cpu {
namespace {

// A compiled body and its place in the scratch.
struct Body {
  std::shared_ptr<const Program> program;
  size_t num_inputs() const { return program->inputs.size(); }
  size_t num_outputs() const { return program->schedule.outputs.size(); }
  // Runs the body over its block with input i bound to feeds[i].
  void run(std::byte* block, const std::byte* const* feeds) const {
    run_steps(*program, Bases{block, feeds, nullptr, nullptr});
  }
  // Copies output i of the body's last run to `dst` (`bytes` of it).
  void copy_output(std::byte* block, const std::byte* const* feeds, size_t i, std::byte* dst,
                   int64_t bytes) const {
    const std::byte* src =
        resolve(*program, Bases{block, feeds, nullptr, nullptr}, program->schedule.outputs[i]);
    if (bytes > 0 && src != dst) std::memcpy(dst, src, static_cast<size_t>(bytes));
  }
};

// The scratch of one control-flow step: `pointers` pointer slots at offset 0, then the block
// of the largest body at body_offset, then `slot_bytes` of carry slot at slot_offset.
struct Layout {
  int64_t body_offset = 0;
  int64_t slot_offset = 0;
  int64_t slot_bytes = 0;
  int64_t total = 0;
  // The bytes the kernel itself touches (pointer tables and carry slot): addressable under
  // ASan while the kernel runs; the body block stays poisoned except for the body's steps.
  std::vector<ArenaRange> own;
};

Layout layout_of(size_t pointers, const std::vector<const Body*>& bodies, int64_t slot_bytes) {
  Layout l;
  l.body_offset = align64(static_cast<int64_t>(pointers * sizeof(void*)));
  int64_t block = 0;
  for (const Body* b : bodies) block = std::max(block, b->program->block_bytes());
  l.slot_offset = l.body_offset + align64(block);
  l.slot_bytes = slot_bytes;
  l.total = l.slot_offset + align64(slot_bytes);
  l.own = {{0, l.body_offset}, {l.slot_offset, align64(slot_bytes)}};
  return l;
}

// Compiles `body` (region `region` of node `n`), naming both in a compile error.
Body compile_body(const Node& n, const Graph& body, const std::string& region,
                  const BodyCompiler& bodies) {
  try {
    return Body{bodies(body)};
  } catch (const Error& e) {
    throw Error("cpu backend: " + std::string(op_name(n.op)) + " (node %" + n.name +
                "): " + region + " (@" + body.name() + "): " + e.what());
  }
}

// Byte offsets of the carries inside the carry slot, and their sizes.
struct Carries {
  std::vector<int64_t> offset, bytes;
  int64_t total = 0;
};
Carries carries_of(const Node& n, size_t first_result, size_t count) {
  Carries c;
  for (size_t i = 0; i < count; ++i) {
    c.offset.push_back(c.total);
    c.bytes.push_back(byte_size(n.results[first_result + i]));
    c.total += align64(c.bytes.back());
  }
  return c;
}

// ---- cond: the branch picked by the predicate (bool: [false, true]) or the i32 index clamped
// to [0, N-1] runs on x...; its outputs are copied into the results.
RegionKernel cond_kernel(const Graph& g, const Node& n, const BodyCompiler& compile) {
  const GraphList& graphs = n.attrs.get_graphs("branches");
  auto branches = std::make_shared<std::vector<Body>>();
  for (size_t i = 0; i < graphs.size(); ++i)
    branches->push_back(
        compile_body(n, *graphs[i], "branches[" + std::to_string(i) + "]", compile));
  std::vector<const Body*> all;
  for (const Body& b : *branches) all.push_back(&b);
  const bool is_bool = g.dtype(n.operands[0]) == DType::bool_;
  std::vector<int64_t> bytes;
  for (const TensorType& t : n.results) bytes.push_back(byte_size(t));
  Layout l = layout_of(0, all, 0);
  auto kernel = [branches, is_bool, bytes, l](const KernelIO& io) {
    int64_t last = static_cast<int64_t>(branches->size()) - 1;
    int64_t i = is_bool ? (*io.input<uint8_t>(0) != 0 ? 1 : 0) : *io.input<int32_t>(0);
    i = std::clamp<int64_t>(i, 0, last);
    const Body& b = (*branches)[static_cast<size_t>(i)];
    std::byte* block = io.scratch + l.body_offset;
    const std::byte* const* feeds = io.in + 1;
    b.run(block, feeds);
    ArenaGuard outputs(block, b.program->output_arena_ranges);
    for (size_t r = 0; r < bytes.size(); ++r) b.copy_output(block, feeds, r, io.out[r], bytes[r]);
  };
  return {kernel, l.total};
}

// ---- while_loop: consts..., init... -> carry. The carry ping-pongs between the results and
// the carry slot.
RegionKernel while_kernel(const Graph&, const Node& n, const BodyCompiler& compile) {
  auto cond = std::make_shared<Body>(compile_body(n, n.attrs.get_graph("cond"), "cond", compile));
  auto body = std::make_shared<Body>(compile_body(n, n.attrs.get_graph("body"), "body", compile));
  const auto nc = static_cast<size_t>(n.attrs.get_int("num_consts"));
  const size_t nk = n.results.size();
  const int64_t max_trips = n.attrs.has("max_trip_count") ? n.attrs.get_int("max_trip_count") : -1;
  Carries c = carries_of(n, 0, nk);
  // Pointers: feeds (consts, carry) of both bodies.
  Layout l = layout_of(nc + nk, {cond.get(), body.get()}, c.total);
  auto kernel = [cond, body, nc, nk, max_trips, c, l](const KernelIO& io) {
    ArenaGuard own(io.scratch, l.own);
    auto** feeds = reinterpret_cast<const std::byte**>(io.scratch);
    std::byte* block = io.scratch + l.body_offset;
    std::byte* slot = io.scratch + l.slot_offset;
    for (size_t i = 0; i < nc + nk; ++i) feeds[i] = io.in[i];
    bool in_results = false;  // where the carry is: init (before the first trip), results, slot
    for (int64_t trip = 0; max_trips < 0 || trip < max_trips; ++trip) {
      cond->run(block, feeds);
      bool go;
      {
        ArenaGuard outputs(block, cond->program->output_arena_ranges);
        go = *resolve(*cond->program, Bases{block, feeds, nullptr, nullptr},
                      cond->program->schedule.outputs[0]) != std::byte{0};
      }
      if (!go) break;
      body->run(block, feeds);
      const bool to_results = !in_results;
      {
        ArenaGuard outputs(block, body->program->output_arena_ranges);
        for (size_t k = 0; k < nk; ++k)
          body->copy_output(block, feeds, k, to_results ? io.out[k] : slot + c.offset[k],
                            c.bytes[k]);
      }
      for (size_t k = 0; k < nk; ++k) feeds[nc + k] = to_results ? io.out[k] : slot + c.offset[k];
      in_results = to_results;
    }
    if (!in_results)  // zero trips (the init operands) or ended in the slot
      for (size_t k = 0; k < nk; ++k)
        if (c.bytes[k] > 0) std::memcpy(io.out[k], feeds[nc + k], static_cast<size_t>(c.bytes[k]));
  };
  return {kernel, l.total};
}

// ---- scan: consts..., init..., xs... -> carry..., ys.... x_t is read in place; y_t is copied
// into ys[t]; the carry ping-pongs so that the last step writes the results.
RegionKernel scan_kernel(const Graph& g, const Node& n, const BodyCompiler& compile) {
  auto body = std::make_shared<Body>(compile_body(n, n.attrs.get_graph("body"), "body", compile));
  const auto nc = static_cast<size_t>(n.attrs.get_int("num_consts"));
  const auto nk = static_cast<size_t>(n.attrs.get_int("num_carry"));
  const int64_t length = n.attrs.get_int("length");
  const bool reverse = n.attrs.get_bool("reverse");
  const size_t nx = n.operands.size() - nc - nk;
  const size_t ny = n.results.size() - nk;
  Carries c = carries_of(n, 0, nk);
  std::vector<int64_t> x_bytes, y_bytes;  // one slice of each xs / ys
  for (size_t j = 0; j < nx; ++j) {
    const TensorType& t = g.type(n.operands[nc + nk + j]);
    x_bytes.push_back(length == 0 ? 0 : byte_size(t) / length);
  }
  for (size_t j = 0; j < ny; ++j)
    y_bytes.push_back(length == 0 ? 0 : byte_size(n.results[nk + j]) / length);
  // For each carry, the y that is the same body value (same output location), or -1.
  std::vector<int64_t> carry_is_y(nk, -1);
  const std::vector<Location>& outs = body->program->schedule.outputs;
  for (size_t k = 0; k < nk; ++k)
    for (size_t j = 0; j < ny && carry_is_y[k] < 0; ++j)
      if (outs[k] == outs[nk + j] && outs[k].kind == Location::Kind::Arena)
        carry_is_y[k] = static_cast<int64_t>(j);
  Layout l = layout_of(nc + nk + nx, {body.get()}, c.total);
  auto kernel = [body, nc, nk, nx, ny, length, reverse, c, x_bytes, y_bytes, carry_is_y,
                 l](const KernelIO& io) {
    ArenaGuard own(io.scratch, l.own);
    auto** feeds = reinterpret_cast<const std::byte**>(io.scratch);
    std::byte* block = io.scratch + l.body_offset;
    std::byte* slot = io.scratch + l.slot_offset;
    for (size_t i = 0; i < nc + nk; ++i) feeds[i] = io.in[i];
    for (int64_t s = 0; s < length; ++s) {
      const int64_t t = reverse ? length - 1 - s : s;
      for (size_t j = 0; j < nx; ++j) feeds[nc + nk + j] = io.in[nc + nk + j] + t * x_bytes[j];
      body->run(block, feeds);
      const bool to_results = (length - 1 - s) % 2 == 0;
      const bool last = s == length - 1;
      {
        ArenaGuard outputs(block, body->program->output_arena_ranges);
        for (size_t j = 0; j < ny; ++j)
          body->copy_output(block, feeds, nk + j, io.out[nk + j] + t * y_bytes[j], y_bytes[j]);
        for (size_t k = 0; k < nk; ++k) {
          std::byte* dst = to_results ? io.out[k] : slot + c.offset[k];
          if (carry_is_y[k] >= 0 && !last) {
            const auto j = static_cast<size_t>(carry_is_y[k]);
            dst = io.out[nk + j] + t * y_bytes[j];  // already there: read it from ys[t]
          } else {
            body->copy_output(block, feeds, k, dst, c.bytes[k]);
          }
          feeds[nc + k] = dst;
        }
      }
    }
    if (length == 0)  // init is the result (ys are empty, so the reference kernel runs this)
      for (size_t k = 0; k < nk; ++k)
        if (c.bytes[k] > 0) std::memcpy(io.out[k], io.in[nc + k], static_cast<size_t>(c.bytes[k]));
  };
  return {kernel, l.total};
}

}  // namespace

void register_control_flow_kernels() {
  register_region(OpKind::Cond, cond_kernel);
  register_region(OpKind::WhileLoop, while_kernel);
  register_region(OpKind::Scan, scan_kernel);
}

}  // namespace rlx::cpu
