// Losses as graph builders (mean over the batch, a rank-0 value ready for autodiff::grad) and
// the host-side label check that the clamping softmax_cross_entropy op cannot do itself.
#pragma once

#include <string>

#include "rlx/ir/graph.h"

namespace rlx::train {

/// Mean softmax cross-entropy with integer labels (optax.softmax_cross_entropy_with_integer_
/// labels, then mean; PyTorch F.cross_entropy with reduction="mean"): logits [N, C] float,
/// labels [N] integer -> f32/f64 scalar mean_n (logsumexp(logits_n) - logits_n[label_n]).
/// Built on the fused `softmax_cross_entropy` op. That op clamps labels into [0, C-1] like
/// gather, so out-of-range labels are caught on the host by check_class_labels (Trainer does
/// it for every labels input of the loss graph). Throws rlx::Error
/// ("softmax_cross_entropy_loss: ...") for logits that are not float rank 2, labels that are
/// not integer rank 1, or batch sizes that differ (both shapes named).
Value softmax_cross_entropy_loss(Graph& g, Value logits, Value labels);

/// Mean squared error mean((pred - target)^2) over all elements (optax.l2_loss * 2, PyTorch
/// F.mse_loss reduction="mean"). pred and target must be float with equal dtype and shape
/// (no broadcasting: a silent [N,1] vs [N] broadcast is a classic bug); else rlx::Error
/// ("mse_loss: pred f32[4,1] and target f32[4] must have the same type").
Value mse_loss(Graph& g, Value pred, Value target);

/// Throws rlx::Error unless every element of the integer tensor `labels` is in
/// [0, num_classes): "<where>: label 12 at index 3 is outside [0, 10)". Also throws for a
/// non-integer dtype.
void check_class_labels(const Tensor& labels, int64_t num_classes, const std::string& where);

}  // namespace rlx::train
