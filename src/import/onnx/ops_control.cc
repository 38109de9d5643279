// Control flow folded at import time: If whose condition is known once the input shapes (and
// the inputs bound by value) are: the node is replaced by its taken branch, inlined. rlx's IR
// has no control-flow ops; a data-dependent If is an error naming the node.
#include "importer.h"

namespace rlx::onnx::detail {

namespace {

void convert_if(NodeContext& c) {
  // The condition must fold: exporters emit If on input shapes or on small integer inputs
  // (silero-vad's sampling rate), which the session binds by value (InputValuesRequired).
  Tensor cond = c.required_static(
      0, "cond",
      "rlx folds If to its taken branch (the importer does not map If to the cond op yet), so "
      "the condition must not depend on a graph input's data");
  c.require(cond.numel() == 1,
            "the condition must hold one element, got shape " + cond.shape().to_string());
  const bool taken = cond.get_f64(0) != 0;
  std::vector<Value> outs = c.inline_subgraph(taken ? "then_branch" : "else_branch");
  c.require(static_cast<int>(outs.size()) == c.num_outputs(),
            std::string(taken ? "then_branch" : "else_branch") + " has " +
                std::to_string(outs.size()) + " output(s), the node " +
                std::to_string(c.num_outputs()));
  for (int i = 0; i < c.num_outputs(); ++i) c.set_output(i, outs[static_cast<size_t>(i)]);
}

}  // namespace

void add_control_converters(ConverterTable& t) { t[{"", "If"}] = convert_if; }

}  // namespace rlx::onnx::detail
