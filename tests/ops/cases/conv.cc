// Op cases of the convolution family: conv (1-D / 2-D, strides, padding, dilation, groups),
// max_pool and avg_pool.
#include "common.h"

namespace rlx::testing {
namespace {

using namespace cases;

AttrMap conv(Ints strides, Ints lo, Ints hi, Ints dilation = {}, int64_t groups = 1) {
  return {{"strides", strides},
          {"pad_low", lo},
          {"pad_high", hi},
          {"dilation", dilation},
          {"groups", groups}};
}
AttrMap pool(Ints window, Ints strides = {}, Ints lo = {}, Ints hi = {}) {
  return {{"window", window}, {"strides", strides}, {"pad_low", lo}, {"pad_high", hi}};
}
AttrMap avg(Ints window, Ints strides, Ints lo, Ints hi, bool count_include_pad) {
  AttrMap a = pool(std::move(window), std::move(strides), std::move(lo), std::move(hi));
  a.set("count_include_pad", count_include_pad);
  return a;
}

}  // namespace

void add_conv_cases(CaseList& cs) {
  const Values v = range(-1, 1);
  cs.add(OpKind::Conv, "2d_stride_pad_dilation")
      .sample({T({2, 2, 6, 5}), T({3, 2, 3, 2})}, conv({2, 1}, {1, 0}, {2, 1}, {1, 2}));
  cs.add(OpKind::Conv, "groups")
      .sample({T({1, 4, 5, 5}), T({6, 2, 2, 2})}, conv({1, 2}, {1, 1}, {0, 1}, {}, 2));
  cs.add(OpKind::Conv, "1d_uneven").sample({T({2, 3, 9}), T({4, 3, 3})}, conv({3}, {1}, {0}));
  cs.add(OpKind::Conv, "configs")
      .sample({T({1, 2, 5, 5}), T({3, 2, 3, 3})}, conv({1, 1}, {0, 0}, {0, 0}, {1, 1}))
      .sample({T({2, 4, 6, 5}), T({4, 2, 3, 2})}, conv({2, 1}, {1, 0}, {1, 2}, {1, 1}, 2))
      .sample({T({1, 1, 7, 7}), T({2, 1, 3, 3})}, conv({1, 2}, {2, 0}, {0, 1}, {2, 2}))
      .sample({T({2, 3, 9}), T({4, 3, 3})}, conv({2}, {1}, {1}, {1}));
  cs.add(OpKind::Conv, "sized")
      .sample({T({2, 3, 33}, v), T({4, 3, 5}, v)}, conv({2}, {1}, {2}, {2}))
      .sample({T({2, 4, 9, 11}, v), T({6, 2, 3, 3}, v)}, conv({1, 2}, {1, 1}, {0, 1}, {}, 2))
      .sample({T({1, 16, 17, 17}, v), T({16, 1, 3, 3}, v)}, conv({}, {1, 1}, {1, 1}, {}, 16))
      .only(kSizedSuites, kSizedWhy);

  cs.add(OpKind::MaxPool, "basic").sample({T({1, 2, 5, 5})}, pool({2, 3}, {2, 1}, {1, 0}, {0, 1}));
  cs.add(OpKind::MaxPool, "configs")
      .sample({T({1, 2, 5, 5}, specials())}, pool({2, 2}, {2, 2}, {0, 0}, {1, 1}))
      .sample({T({2, 1, 6, 4})}, pool({3, 2}, {1, 2}, {1, 0}, {1, 1}))
      .sample({T({2, 3, 7})}, pool({3}, {2}, {1}, {1}))
      .only(kNoPjrt, kSpecialsWhy);
  cs.add(OpKind::AvgPool, "exclude_pad")
      .sample({T({1, 2, 5, 4})}, avg({3, 2}, {2, 2}, {1, 1}, {1, 0}, false));
  OpCase& ac = cs.add(OpKind::AvgPool, "configs");
  for (bool cip : {true, false})
    ac.sample({T({1, 2, 5, 5})}, avg({2, 2}, {2, 2}, {0, 0}, {1, 1}, cip))
        .sample({T({2, 1, 6, 4})}, avg({3, 2}, {1, 2}, {1, 0}, {1, 1}, cip))
        .sample({T({2, 3, 7})}, avg({3}, {2}, {1}, {1}, cip));
  OpCase& pool_sized = cs.add(OpKind::MaxPool, "sized");
  pool_sized.sample({T({2, 3, 9, 11})}, pool({3, 2}, {2, 1}, {1, 0}, {1, 1}))
      .sample({T({2, 5, 33})}, pool({4}, {3}))
      .only(kSizedSuites, kSizedWhy);
  cs.add(OpKind::AvgPool, "sized")
      .sample({T({2, 3, 9, 11})}, avg({3, 2}, {2, 1}, {1, 0}, {1, 1}, true))
      .sample({T({2, 3, 9, 11})}, avg({3, 3}, {1, 2}, {1, 1}, {1, 1}, false))
      .only(kSizedSuites, kSizedWhy);

  // NaN and inf in the activations reach only the outputs whose windows contain them (weights
  // are finite: whether a padded zero times an infinite weight is NaN is not pinned).
  const Values nf = range(-1, 1).with(Specials::NonFinite);
  cs.add(OpKind::Conv, "nonfinite")
      .sample({T({2, 3, 33}, nf), T({4, 3, 5}, v)}, conv({2}, {1}, {2}))
      .sample({T({1, 4, 9, 11}, nf), T({6, 2, 3, 3}, v)}, conv({}, {1, 1}, {1, 1}, {}, 2))
      // Rows of 37: the specials (every 41st element) land at another column in each row.
      .sample({T({4, 3, 37}, nf), T({4, 3, 2}, v)}, conv({}, {}, {}))
      .sample({T({2, 2, 37, 9}, nf), T({3, 2, 3, 2}, v)}, conv({}, {}, {}))
      .only(kSizedSuites, "non-finite activations against the CPU kernels' summation order");
  cs.add(OpKind::MaxPool, "nonfinite")
      .sample({T({2, 3, 9, 11}, nf)}, pool({3, 2}, {2, 1}, {1, 0}, {1, 1}))
      .only(kSizedSuites, "non-finite activations against the CPU kernels' windows");
  cs.add(OpKind::AvgPool, "nonfinite")
      .sample({T({2, 3, 9, 11}, nf)}, avg({3, 2}, {2, 1}, {1, 0}, {1, 1}, true))
      .only(kSizedSuites, "non-finite activations against the CPU kernels' windows");
  // matmul joins the non-finite sweep here: it shares the contraction kernels.
  cs.add(OpKind::MatMul, "nonfinite")
      .sample({T({9, 33}, nf), T({33, 17}, v)})
      .only(kSizedSuites, "non-finite activations against the CPU kernels' summation order");
}

}  // namespace rlx::testing
