// The README's "Running a graph from C++" example: build a small graph, print its text form,
// compile it for the CPU, bind the weight and run it. Built against an installed rlx
// (find_package(rlx), see CMakeLists.txt beside it); scripts/check_install.sh runs it in CI.
#include <iostream>

#include "rlx/runtime/session.h"

int main() {
  using namespace rlx;
  Graph g("mlp");
  Value x = g.input("x", DType::f32, Shape{4, 8});
  Value w = g.param("w", DType::f32, Shape{8, 16});
  g.set_outputs({g.softmax(g.gelu(g.matmul(x, w)), -1)});  // types inferred: f32[4,16]
  std::cout << g.to_string() << "\n";                      // the text form, docs/ir.md

  Session session(Device::cpu());  // compile cache, CPU backend
  std::shared_ptr<Executable> exe = session.compile(g);
  exe->set_param("w", Tensor::full(DType::f32, Shape{8, 16}, 0.01));
  Tensor y = exe->run({{"x", Tensor::full(DType::f32, Shape{4, 8}, 0.5)}})[0];
  std::cout << y.to_string() << "\n" << exe->kernel_report();
}
