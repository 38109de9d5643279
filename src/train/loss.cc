// Loss builders and the host label check (include/rlx/train/loss.h).
#include "rlx/train/loss.h"

#include "rlx/ir/error.h"

namespace rlx::train {

Value softmax_cross_entropy_loss(Graph& g, Value logits, Value labels) {
  const TensorType& lt = g.type(logits);
  const TensorType& yt = g.type(labels);
  const std::string types = " (logits " + lt.to_string() + ", labels " + yt.to_string() + ")";
  check(is_float(lt.dtype) && lt.shape.rank() == 2,
        "softmax_cross_entropy_loss: logits must be a float [N, C] tensor" + types);
  check(is_integer(yt.dtype) && yt.shape.rank() == 1,
        "softmax_cross_entropy_loss: labels must be an integer [N] tensor" + types);
  check(lt.shape[0] == yt.shape[0],
        "softmax_cross_entropy_loss: logits and labels disagree on the batch size" + types);
  return g.reduce_mean(g.softmax_cross_entropy(logits, labels), {0});
}

Value mse_loss(Graph& g, Value pred, Value target) {
  const TensorType& pt = g.type(pred);
  const TensorType& tt = g.type(target);
  check(pt == tt, "mse_loss: pred " + pt.to_string() + " and target " + tt.to_string() +
                      " must have the same type");
  check(is_float(pt.dtype), "mse_loss: pred " + pt.to_string() + " is not a float tensor");
  Value d = g.sub(pred, target);
  std::vector<int64_t> axes;
  for (int i = 0; i < pt.shape.rank(); ++i) axes.push_back(i);
  return g.reduce_mean(g.mul(d, d), axes);
}

void check_class_labels(const Tensor& labels, int64_t num_classes, const std::string& where) {
  check(is_integer(labels.dtype()),
        where + ": labels must be integers, got " + labels.type().to_string());
  for (int64_t i = 0; i < labels.numel(); ++i) {
    const int64_t y = labels.get_i64(i);
    check(y >= 0 && y < num_classes, where + ": label " + std::to_string(y) + " at index " +
                                         std::to_string(i) + " is outside [0, " +
                                         std::to_string(num_classes) + ")");
  }
}

}  // namespace rlx::train
