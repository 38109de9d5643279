// Op cases of the shape / data-movement family: reshape, transpose, broadcast_in_dim, expand,
// slice, concatenate, pad, gather, take_along_axis, scatter_add, reverse, squeeze, expand_dims,
// dynamic_slice, dynamic_update_slice.
#include "common.h"

namespace rlx::testing {
namespace {

using namespace cases;

void add_layout_ops(CaseList& cs) {
  cs.add(OpKind::Reshape, "basic").sample({T({2, 6})}, {{"shape", Ints{3, -1}}});
  cs.add(OpKind::Reshape, "specials").sample({T({2, 3, 4}, specials())}, {{"shape", Ints{4, -1}}});

  cs.add(OpKind::Transpose, "basic").sample({T({2, 3, 4})}, {{"permutation", Ints{2, 0, 1}}});
  OpCase& tr = cs.add(OpKind::Transpose, "sized");
  for (Ints p : std::vector<Ints>{{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}})
    tr.sample({T({3, 5, 7})}, {{"permutation", p}});
  for (Ints p : std::vector<Ints>{{0, 2, 1, 3}, {3, 2, 1, 0}, {1, 0, 3, 2}})
    tr.sample({T({2, 3, 4, 5})}, {{"permutation", p}});
  tr.sample({T({67, 129})}, {{"permutation", Ints{1, 0}}})
      .sample({T({0, 3})}, {{"permutation", Ints{1, 0}}})
      .only(kSizedSuites, kSizedWhy);

  auto bid = [](Ints shape, Ints dims) {
    return AttrMap{{"shape", shape}, {"broadcast_dimensions", dims}};
  };
  cs.add(OpKind::BroadcastInDim, "basic").sample({T({3, 1})}, bid({2, 3, 4}, {1, 2}));
  cs.add(OpKind::BroadcastInDim, "new_dims")
      .sample({T({2, 3, 4}, specials())}, bid({2, 5, 3, 4}, {0, 2, 3}));
  cs.add(OpKind::BroadcastInDim, "sized")
      .sample({T({3, 1})}, bid({2, 3, 33}, {1, 2}))
      .sample({T({})}, bid({17}, {}))
      .sample({T({5})}, bid({4, 5}, {1}))
      .sample({T({4, 1, 5})}, bid({4, 7, 5}, {0, 1, 2}))
      .sample({T({129})}, bid({0, 129}, {1}))
      .only(kSizedSuites, kSizedWhy);

  cs.add(OpKind::Expand, "basic").sample({T({3, 1})}, {{"shape", Ints{2, 3, 4}}});
  cs.add(OpKind::Expand, "numpy_rules")
      .sample({T({2, 3, 4}, specials())}, {{"shape", Ints{3, 1, 1, 4}}});
  cs.add(OpKind::Expand, "sized")
      .sample({T({3, 1})}, {{"shape", Ints{2, 3, 33}}})
      .sample({T({1})}, {{"shape", Ints{1031}}})
      .only(kSizedSuites, kSizedWhy);

  auto slice = [](Ints start, Ints limit, Ints strides = {}) {
    return AttrMap{{"start", start}, {"limit", limit}, {"strides", strides}};
  };
  cs.add(OpKind::Slice, "strided").sample({T({5, 7})}, slice({1, 0}, {5, 6}, {2, 3}));
  cs.add(OpKind::Slice, "configs")
      .sample({T({2, 3, 4}, specials())}, slice({0, 1, 0}, {2, 3, 4}, {1, 1, 2}))
      .sample({T({3, 3})}, slice({1, 0}, {1, 3}));
  cs.add(OpKind::Slice, "sized")
      .sample({T({7, 33, 5})}, slice({1, 2, 0}, {6, 31, 5}, {2, 3, 1}))
      .sample({T({7, 33, 5})}, slice({2, 0, 0}, {3, 33, 5}))
      .sample({T({7, 33, 5})}, slice({0, 0, 1}, {7, 33, 4}))
      .sample({T({7, 33, 5})}, slice({3, 3, 3}, {3, 3, 3}))
      .sample({T({1031})}, slice({3}, {1000}, {7}))
      .only(kSizedSuites, kSizedWhy);

  cs.add(OpKind::Reverse, "basic").sample({T({2, 3, 4})}, {{"axes", Ints{0, 2}}});
  cs.add(OpKind::Reverse, "negative_axis")
      .sample({T({2, 3, 4}, specials())}, {{"axes", Ints{0, -1}}});
  cs.add(OpKind::Reverse, "sized")
      .sample({T({7, 33, 5})}, {{"axes", Ints{0}}})
      .sample({T({7, 33, 5})}, {{"axes", Ints{1, 2}}})
      .sample({T({7, 33, 5})}, {{"axes", Ints{}}})
      .sample({T({1031})}, {{"axes", Ints{0}}})
      .only(kSizedSuites, kSizedWhy);

  cs.add(OpKind::Squeeze, "basic").sample({T({2, 1, 3})}, {{"axes", Ints{1}}});
  cs.add(OpKind::Squeeze, "negative_axis")
      .sample({T({2, 1, 3, 1}, specials())}, {{"axes", Ints{1, -1}}});
  cs.add(OpKind::ExpandDims, "basic").sample({T({2, 3})}, {{"axes", Ints{0, 3}}});
  cs.add(OpKind::ExpandDims, "negative_axis")
      .sample({T({2, 3, 4}, specials())}, {{"axes", Ints{0, -1}}});
}

void add_concatenate_pad(CaseList& cs) {
  auto cat = [](int64_t d) { return AttrMap{{"dimension", d}}; };
  // The same operand twice, and operands of different extents.
  cs.add(OpKind::Concatenate, "basic")
      .sample({T({2, 3}), T({2, 1}), T({2, 2})}, [](Graph& g, auto& in, DType) {
        return std::vector<Value>{g.concatenate({in[0], in[1], in[2], in[0]}, 1)};
      });
  cs.add(OpKind::Concatenate, "negative_axis")
      .sample({T({2, 3, 4}, specials()), T({2, 1, 4}, specials())},
              [](Graph& g, auto& in, DType) {
                return std::vector<Value>{g.concatenate({in[0], in[1], in[0]}, -2)};
              })
      .sample({T({0, 3}), T({2, 3})}, cat(0));
  OpCase& sized = cs.add(OpKind::Concatenate, "sized");
  for (int64_t axis = 0; axis < 3; ++axis) {
    std::vector<Operand> parts;
    for (int64_t n : {2, 5, 0, 1}) {
      Ints d{7, 33, 5};
      d[static_cast<size_t>(axis)] = n;
      parts.push_back(T(Shape(d)));
    }
    sized.sample(parts, cat(axis));
  }
  sized.only(kSizedSuites, kSizedWhy);

  auto pad = [](Ints lo, Ints hi, Ints in = {}) {
    return AttrMap{{"low", lo}, {"high", hi}, {"interior", in}};
  };
  cs.add(OpKind::Pad, "negative_interior").sample({T({3, 4}), T({})}, pad({1, -1}, {2, 0}, {1, 2}));
  cs.add(OpKind::Pad, "edges").sample({T({3, 4}), T({})}, pad({1, -1}, {2, 0}, {0, 1}));
  cs.add(OpKind::Pad, "sized")
      .sample({T({7, 33}), T({})}, pad({1, -2}, {-1, 3}, {0, 2}))
      .sample({T({1031}), T({})}, pad({5}, {0}))
      .sample({T({0, 3}), T({})}, pad({2, 1}, {1, 0}))
      .only(kSizedSuites, kSizedWhy);
}

// Index operands hold out-of-range values on purpose: gather / take_along_axis clamp them,
// scatter_add drops them.
void add_indexing(CaseList& cs) {
  auto axis = [](int64_t a) { return AttrMap{{"axis", a}}; };
  cs.add(OpKind::Gather, "dups_clamped")
      .sample({T({4, 3}), fixed(DType::i32, {2, 3}, {0, 3, 3, -2, 9, 1})}, axis(0));
  cs.add(OpKind::Gather, "axis1")
      .sample({T({2, 4, 3}), fixed(DType::i32, {5}, {1, 1, 0, 3, 2})}, axis(1));
  OpCase& ga = cs.add(OpKind::Gather, "axes");
  for (int64_t a : {0, 1, -1})
    ga.sample({T({4, 3, 5}), typed(DType::i32, {2, 3}, ints(-2, 5))}, axis(a));
  ga.sample({T({4, 3, 5}), typed(DType::i64, {}, ints(-2, 6))}, axis(2))
      .sample({T({5, 3}), typed(DType::u8, {4}, ints(0, 7))}, axis(0))
      .sample({T({5, 3}), typed(DType::i8, {2, 2}, ints(-3, 7))}, axis(0));
  cs.add(OpKind::Gather, "sized")
      .sample({T({7, 33}), typed(DType::i32, {4, 3}, ints(-20, 20))}, axis(0))
      .sample({T({7, 33}), typed(DType::i64, {9}, ints(-20, 40))}, axis(1))
      .sample({T({1031, 3}), typed(DType::i32, {50}, ints(-20, 1040))}, axis(0))
      .sample({T({7, 33}), typed(DType::i32, {0})}, axis(0))
      .only(kSizedSuites, kSizedWhy);

  cs.add(OpKind::TakeAlongAxis, "basic")
      .sample({T({3, 4}), fixed(DType::i32, {3, 2}, {0, 0, 3, 1, 2, 7})}, axis(1));
  cs.add(OpKind::TakeAlongAxis, "broadcast")
      .sample({T({3, 1}), fixed(DType::i32, {1, 4}, {0, 0, -1, 0})}, axis(0));
  cs.add(OpKind::TakeAlongAxis, "index_dtypes")
      .sample({T({3, 4, 5}), typed(DType::i32, {3, 4, 6}, ints(-5, 5))}, axis(-1))
      .sample({T({3, 4, 5}), typed(DType::i64, {1, 7, 5}, ints(-5, 5))}, axis(1))
      .sample({T({3, 1, 5}), typed(DType::u8, {3, 2, 2}, ints(0, 10))}, axis(2))
      .sample({T({4, 3}), typed(DType::i8, {2, 3}, ints(-5, 5))}, axis(0));
  cs.add(OpKind::TakeAlongAxis, "sized")
      .sample({T({7, 33}), typed(DType::i32, {7, 5}, ints(-20, 40))}, axis(1))
      .sample({T({7, 33}), typed(DType::i64, {1, 33}, ints(-20, 20))}, axis(0))
      .sample({T({7, 33}), typed(DType::i32, {7, 1}, ints(-20, 40))}, axis(1))
      .only(kSizedSuites, kSizedWhy);

  // Duplicate indices accumulate; integral float updates keep f16 / bf16 sums exact in any
  // order.
  const Values upd = integral(-4, 4);
  cs.add(OpKind::ScatterAdd, "dups_dropped")
      .sample({T({4, 3}), fixed(DType::i32, {5}, {1, 1, 7, -1, 3}), T({5, 3})}, axis(0));
  cs.add(OpKind::ScatterAdd, "index_dtypes")
      .sample({T({4, 3}, upd), typed(DType::i32, {2, 5}, ints(-5, 5)), T({2, 5, 3}, upd)}, axis(0))
      .sample({T({4, 3}, upd), typed(DType::i64, {7}, ints(-5, 5)), T({4, 7}, upd)}, axis(-1))
      .sample({T({2, 3, 4}, upd), typed(DType::u8, {6}, ints(0, 10)), T({2, 6, 4}, upd)}, axis(1))
      .sample({T({3, 4}, upd), typed(DType::i8, {2, 2}, ints(-5, 5)), T({3, 2, 2}, upd)}, axis(1))
      .sample({T({4}, upd), typed(DType::i32, {}, ints(-5, 5)), T({}, upd)}, axis(0));
  cs.add(OpKind::ScatterAdd, "sized")
      .sample({T({7, 33}), typed(DType::i32, {5}, ints(-20, 20)), T({5, 33})}, axis(0))
      .sample({T({7, 33}), typed(DType::i64, {40}, ints(-20, 40)), T({7, 40})}, axis(1))
      .only(kSizedSuites, kSizedWhy);
}

// dynamic_slice / dynamic_update_slice: each start is a scalar operand; out-of-range and
// negative starts are clamped to [0, dim - size] so the block fits.
void add_dynamic_slicing(CaseList& cs) {
  // x (and the update) followed by fixed rank-0 starts of dtype t.
  auto with_starts = [](std::vector<Operand> ops, DType t, std::vector<double> starts) {
    for (double v : starts) ops.push_back(fixed(t, {}, {v}));
    return ops;
  };
  auto sizes = [](Ints s) { return AttrMap{{"slice_sizes", s}}; };
  cs.add(OpKind::DynamicSlice, "basic")
      .sample(with_starts({T({5, 7})}, DType::i32, {1, 2}), sizes({3, 4}))
      .sample(with_starts({T({2, 3, 4})}, DType::i64, {1, 0, 2}), sizes({1, 3, 2}));
  cs.add(OpKind::DynamicSlice, "specials")
      .sample(with_starts({T({2, 3, 4}, specials())}, DType::i64, {1, 0, 2}), sizes({1, 3, 2}));
  cs.add(OpKind::DynamicSlice, "clamped")
      .sample(with_starts({T({5, 7})}, DType::i32, {-2, 100}), sizes({3, 4}))
      .sample(with_starts({T({5, 7})}, DType::i64, {4, -1}), sizes({2, 7}))
      .sample(with_starts({T({5, 7})}, DType::u8, {200, 3}), sizes({5, 2}))
      .sample(with_starts({T({5, 7})}, DType::i8, {-128, 127}), sizes({1, 1}))
      .sample({T({4, 6}), typed(DType::i32, {}, ints(-6, 9)), typed(DType::i32, {}, ints(-6, 9))},
              sizes({2, 3}));
  cs.add(OpKind::DynamicSlice, "zero_size")
      .sample(with_starts({T({5, 7})}, DType::i32, {2, 9}), sizes({0, 4}))
      .sample(with_starts({T({0, 3})}, DType::i32, {1, 1}), sizes({0, 2}))
      .sample({T({})}, sizes({}));
  cs.add(OpKind::DynamicSlice, "sized")
      .sample(with_starts({T({7, 33, 5})}, DType::i32, {2, 5, 1}), sizes({3, 20, 4}))
      .sample(with_starts({T({7, 33, 5})}, DType::i64, {3, -4, 0}), sizes({1, 33, 5}))
      .sample(with_starts({T({1031})}, DType::i32, {1000}), sizes({517}))
      .only(kSizedSuites, kSizedWhy);

  cs.add(OpKind::DynamicUpdateSlice, "basic")
      .sample(with_starts({T({5, 7}), T({2, 3})}, DType::i32, {1, 2}))
      .sample(with_starts({T({2, 3, 4}), T({1, 3, 2})}, DType::i64, {1, 0, 2}));
  cs.add(OpKind::DynamicUpdateSlice, "specials")
      .sample(
          with_starts({T({2, 3, 4}, specials()), T({1, 3, 2}, specials())}, DType::i64, {1, 0, 2}));
  cs.add(OpKind::DynamicUpdateSlice, "clamped")
      .sample(with_starts({T({5, 7}), T({3, 4})}, DType::i32, {-2, 100}))
      .sample(with_starts({T({5, 7}), T({2, 7})}, DType::i64, {4, -1}))
      .sample(with_starts({T({5, 7}), T({5, 2})}, DType::u8, {200, 3}))
      .sample(with_starts({T({5, 7}), T({1, 1})}, DType::i8, {-128, 127}))
      .sample(with_starts({T({5, 7}), T({5, 7})}, DType::i32, {3, 3}))
      .sample({T({4, 6}), T({2, 3}), typed(DType::i32, {}, ints(-6, 9)),
               typed(DType::i32, {}, ints(-6, 9))});
  cs.add(OpKind::DynamicUpdateSlice, "zero_size")
      .sample(with_starts({T({5, 7}), T({0, 3})}, DType::i32, {2, 9}))
      .sample(with_starts({T({5, 7}), T({2, 0})}, DType::i32, {2, 9}))
      .sample({T({}), T({})});
  // A KV-cache write: one row into a cache that a computed value holds, so the memory plan
  // writes the update in place (the CPU kernel's no-copy path).
  cs.add(OpKind::DynamicUpdateSlice, "in_place")
      .sample({T({6, 8}), T({1, 8}), typed(DType::i32, {}, ints(-2, 7))},
              [](Graph& g, auto& in, DType) {
                Value cache = g.reverse(in[0], {0});
                Value zero = g.scalar(0, DType::i32);
                return std::vector<Value>{g.dynamic_update_slice(cache, in[1], {in[2], zero})};
              });
  cs.add(OpKind::DynamicUpdateSlice, "sized")
      .sample(with_starts({T({7, 33, 5}), T({3, 20, 4})}, DType::i32, {2, 5, 1}))
      .sample(with_starts({T({7, 33, 5}), T({1, 33, 5})}, DType::i64, {3, -4, 0}))
      .sample(with_starts({T({1031}), T({517})}, DType::i32, {1000}))
      .only(kSizedSuites, kSizedWhy);
}

}  // namespace

void add_shape_cases(CaseList& cs) {
  add_layout_ops(cs);
  add_concatenate_pad(cs);
  add_indexing(cs);
  add_dynamic_slicing(cs);
}

}  // namespace rlx::testing
