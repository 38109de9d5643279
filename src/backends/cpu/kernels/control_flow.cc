// Region kernels of the control-flow ops cond, while_loop and scan: each body is compiled once
// (at compile time, through the backend's own pipeline) into a Program, and the op's kernel
// runs it inside the step's scratch: [pointer tables | body block | carry slot].
//
// A body writes its results in place: the op's kernel gives each body output its destination
// (Bases::outputs) and the step computing it writes there; only outputs no step computes into
// a buffer of their own (a passthrough input, a constant, a view) are copied after the run.
// cond's destinations are its results. Carries are double-buffered between the op's result
// buffers and one carry slot in the scratch: an iteration reads its carry where the previous
// one left it (the first reads the init operands in place) and writes the other buffer; a scan
// picks the parity so that its last step writes the results, while_loop copies from the slot
// when it ends there. scan reads x_t in place (a pointer into xs) and its body writes y_t into
// ys[t]; a carry that is also a y (an RNN's `return h, h`) is written once, into ys[t], and
// the next step reads it there (into the results at the last step).
#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "../program.h"
#include "rlx/ir/error.h"

namespace rlx::cpu {
namespace {

// A compiled body and where its steps' profile slots start among its op's (KernelIO::profile).
struct Body {
  std::shared_ptr<const Program> program;
  size_t profile_offset = 0;
  // The body's slots under the op's `profile` (nullptr when the run is not profiled).
  StepTime* times(StepTime* profile) const {
    return profile != nullptr ? profile + profile_offset : nullptr;
  }
  // Runs the body over its block with input i bound to feeds[i], each output o computed into
  // or copied to want[o] (`bytes[o]` bytes); profiled into `profile` when it is not null.
  void run_into(std::byte* block, const std::byte* const* feeds, std::byte* const* want,
                const std::vector<int64_t>& bytes, StepTime* profile) const {
    Bases b{block, feeds, nullptr, nullptr, want};
    run_steps(*program, b, times(profile));
    ArenaGuard outputs(block, program->output_arena_ranges);
    for (size_t o = 0; o < bytes.size(); ++o) {
      const std::byte* src = output_address(*program, b, o);
      if (bytes[o] > 0 && src != want[o]) std::memcpy(want[o], src, static_cast<size_t>(bytes[o]));
    }
  }
  // Runs a predicate body (one bool[] output) and returns its value.
  bool run_predicate(std::byte* block, const std::byte* const* feeds, StepTime* profile) const {
    Bases b{block, feeds, nullptr, nullptr, nullptr};
    run_steps(*program, b, times(profile));
    ArenaGuard outputs(block, program->output_arena_ranges);
    return *output_address(*program, b, 0) != std::byte{0};
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

// Lays the profile slots of `bodies` (region name, body) out one after another, in this order,
// and lists them for the enclosing program (RegionKernel::bodies).
std::vector<RegionBody> region_bodies(const std::vector<std::pair<std::string, Body*>>& bodies) {
  std::vector<RegionBody> out;
  size_t at = 0;
  for (const auto& [region, body] : bodies) {
    body->profile_offset = at;
    at += body->program->profile_slots;
    out.push_back({region, body->program});
  }
  return out;
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

// Byte sizes of n's results and the offsets of its first `carries` in the carry slot.
struct Carries {
  std::vector<int64_t> offset, bytes;
  int64_t total = 0;
};
Carries carries_of(const Node& n, size_t carries) {
  Carries c;
  for (size_t i = 0; i < n.results.size(); ++i) {
    c.bytes.push_back(byte_size(n.results[i]));
    if (i >= carries) continue;
    c.offset.push_back(c.total);
    c.total += align64(c.bytes.back());
  }
  return c;
}

// ---- cond: the branch picked by the predicate (bool: [false, true]) or the i32 index clamped
// to [0, N-1] runs on x... and writes the results.
RegionKernel cond_kernel(const Graph& g, const Node& n, const BodyCompiler& compile) {
  const GraphList& graphs = n.attrs.get_graphs("branches");
  auto branches = std::make_shared<std::vector<Body>>();
  for (size_t i = 0; i < graphs.size(); ++i)
    branches->push_back(
        compile_body(n, *graphs[i], "branches[" + std::to_string(i) + "]", compile));
  std::vector<const Body*> all;
  std::vector<std::pair<std::string, Body*>> named;
  for (size_t i = 0; i < branches->size(); ++i) {
    all.push_back(&(*branches)[i]);
    named.emplace_back("branches[" + std::to_string(i) + "]", &(*branches)[i]);
  }
  const bool is_bool = g.dtype(n.operands[0]) == DType::bool_;
  Carries c = carries_of(n, 0);
  Layout l = layout_of(0, all, 0);
  auto kernel = [branches, is_bool, c, l](const KernelIO& io) {
    int64_t last = static_cast<int64_t>(branches->size()) - 1;
    int64_t i = is_bool ? (*io.input<uint8_t>(0) != 0 ? 1 : 0) : *io.input<int32_t>(0);
    i = std::clamp<int64_t>(i, 0, last);
    (*branches)[static_cast<size_t>(i)].run_into(io.scratch + l.body_offset, io.in + 1, io.out,
                                                 c.bytes, io.profile);
  };
  return {kernel, l.total, region_bodies(named)};
}

// ---- while_loop: consts..., init... -> carry. The carry ping-pongs between the results and
// the carry slot. Scratch pointers: the bodies' feeds (consts, carry), then the destinations.
RegionKernel while_kernel(const Graph&, const Node& n, const BodyCompiler& compile) {
  auto cond = std::make_shared<Body>(compile_body(n, n.attrs.get_graph("cond"), "cond", compile));
  auto body = std::make_shared<Body>(compile_body(n, n.attrs.get_graph("body"), "body", compile));
  const auto nc = static_cast<size_t>(n.attrs.get_int("num_consts"));
  const size_t nk = n.results.size();
  const int64_t max_trips = n.attrs.has("max_trip_count") ? n.attrs.get_int("max_trip_count") : -1;
  Carries c = carries_of(n, nk);
  Layout l = layout_of(nc + 2 * nk, {cond.get(), body.get()}, c.total);
  auto kernel = [cond, body, nc, nk, max_trips, c, l](const KernelIO& io) {
    ArenaGuard own(io.scratch, l.own);
    auto** feeds = reinterpret_cast<const std::byte**>(io.scratch);
    auto** want = reinterpret_cast<std::byte**>(io.scratch) + nc + nk;
    std::byte* block = io.scratch + l.body_offset;
    std::byte* slot = io.scratch + l.slot_offset;
    for (size_t i = 0; i < nc + nk; ++i) feeds[i] = io.in[i];
    bool in_results = false;  // where the carry is: init (before the first trip), results, slot
    for (int64_t trip = 0; max_trips < 0 || trip < max_trips; ++trip) {
      if (!cond->run_predicate(block, feeds, io.profile)) break;
      for (size_t k = 0; k < nk; ++k) want[k] = in_results ? slot + c.offset[k] : io.out[k];
      body->run_into(block, feeds, want, c.bytes, io.profile);
      for (size_t k = 0; k < nk; ++k) feeds[nc + k] = want[k];
      in_results = !in_results;
    }
    if (!in_results)  // zero trips (the init operands) or ended in the slot
      for (size_t k = 0; k < nk; ++k)
        if (c.bytes[k] > 0) std::memcpy(io.out[k], feeds[nc + k], static_cast<size_t>(c.bytes[k]));
  };
  return {kernel, l.total, region_bodies({{"cond", cond.get()}, {"body", body.get()}})};
}

// ---- scan: consts..., init..., xs... -> carry..., ys.... Scratch pointers: the body's feeds
// (consts, carry, x_t), then the destinations (carry, y_t).
RegionKernel scan_kernel(const Graph& g, const Node& n, const BodyCompiler& compile) {
  auto body = std::make_shared<Body>(compile_body(n, n.attrs.get_graph("body"), "body", compile));
  const auto nc = static_cast<size_t>(n.attrs.get_int("num_consts"));
  const auto nk = static_cast<size_t>(n.attrs.get_int("num_carry"));
  const int64_t length = n.attrs.get_int("length");
  const bool reverse = n.attrs.get_bool("reverse");
  const size_t nx = n.operands.size() - nc - nk;
  const size_t ny = n.results.size() - nk;
  Carries c = carries_of(n, nk);
  std::vector<int64_t> x_bytes, y_bytes;  // one slice of each xs / ys
  for (size_t j = 0; j < nx; ++j) {
    const TensorType& t = g.type(n.operands[nc + nk + j]);
    x_bytes.push_back(length == 0 ? 0 : byte_size(t) / length);
  }
  for (size_t j = 0; j < ny; ++j)
    y_bytes.push_back(length == 0 ? 0 : c.bytes[nk + j] / std::max<int64_t>(length, 1));
  // The body's output sizes: the carries, then one slice of each ys.
  std::vector<int64_t> out_bytes(c.bytes.begin(), c.bytes.begin() + static_cast<ptrdiff_t>(nk));
  out_bytes.insert(out_bytes.end(), y_bytes.begin(), y_bytes.end());
  // For each carry, a y that is the same body value, or -1.
  std::vector<int64_t> carry_is_y(nk, -1);
  const std::vector<size_t>& canonical = body->program->canonical_output;
  for (size_t k = 0; k < nk; ++k)
    for (size_t j = 0; j < ny && carry_is_y[k] < 0; ++j)
      if (canonical[nk + j] == canonical[k]) carry_is_y[k] = static_cast<int64_t>(j);
  Layout l = layout_of(nc + nk + nx + nk + ny, {body.get()}, c.total);
  auto kernel = [body, nc, nk, nx, ny, length, reverse, c, x_bytes, y_bytes, out_bytes, carry_is_y,
                 l](const KernelIO& io) {
    ArenaGuard own(io.scratch, l.own);
    auto** feeds = reinterpret_cast<const std::byte**>(io.scratch);
    auto** want = reinterpret_cast<std::byte**>(io.scratch) + nc + nk + nx;
    std::byte* block = io.scratch + l.body_offset;
    std::byte* slot = io.scratch + l.slot_offset;
    for (size_t i = 0; i < nc + nk; ++i) feeds[i] = io.in[i];
    for (int64_t s = 0; s < length; ++s) {
      const int64_t t = reverse ? length - 1 - s : s;
      const bool last = s == length - 1;
      for (size_t j = 0; j < nx; ++j) feeds[nc + nk + j] = io.in[nc + nk + j] + t * x_bytes[j];
      for (size_t j = 0; j < ny; ++j) want[nk + j] = io.out[nk + j] + t * y_bytes[j];
      for (size_t k = 0; k < nk; ++k)
        want[k] = carry_is_y[k] >= 0 && !last ? want[nk + static_cast<size_t>(carry_is_y[k])]
                  : (length - 1 - s) % 2 == 0 ? io.out[k]
                                              : slot + c.offset[k];
      body->run_into(block, feeds, want, out_bytes, io.profile);
      for (size_t k = 0; k < nk; ++k) feeds[nc + k] = want[k];
    }
    if (length == 0)  // init is the result (ys are empty, so the reference kernel runs this)
      for (size_t k = 0; k < nk; ++k)
        if (c.bytes[k] > 0) std::memcpy(io.out[k], io.in[nc + k], static_cast<size_t>(c.bytes[k]));
  };
  return {kernel, l.total, region_bodies({{"body", body.get()}})};
}

}  // namespace

void register_control_flow_kernels() {
  register_region(OpKind::Cond, cond_kernel);
  register_region(OpKind::WhileLoop, while_kernel);
  register_region(OpKind::Scan, scan_kernel);
}

}  // namespace rlx::cpu
