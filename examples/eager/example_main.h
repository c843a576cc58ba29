#pragma once
// What the three example programs share: plugins, arguments, printing.
//   eager_<net> [REFERENCE_DIR] [--dot FILE] [--trace DIR]
// REFERENCE_DIR holds inputs/*.npy (default: the repo's tests/reference/<net>).
// --dot writes the tape as Graphviz; --trace writes the tape as a program
// and its inputs, and prints the `nabla exec` line that reruns it.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "nabla/cpu/cpu.h"
#include "nabla/eager.h"
#include "nabla/error.h"
#include "nabla/plugin.h"

namespace nabla::eager_examples {

struct Printed {
  std::string name;
  eager::Tensor grad_of;
};

// `run(dir, tape)` builds the network, calls Backward and returns the loss
// and the tensors whose gradients to print.
inline int ExampleMain(int argc, char** argv, const std::string& default_dir,
                       const std::function<std::pair<eager::Tensor, std::vector<Printed>>(const std::string&)>& run) {
  try {
    std::string dir = default_dir, dot, trace;
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      if ((a == "--dot" || a == "--trace") && i + 1 < argc) {
        (a == "--dot" ? dot : trace) = argv[++i];
      } else if (!a.empty() && a[0] != '-') {
        dir = a;
      } else {
        std::cerr << "usage: " << argv[0] << " [REFERENCE_DIR] [--dot FILE] [--trace DIR]\n";
        return 2;
      }
    }
    cpu::InitCpuBackend();
    PluginManager::Instance().LoadDefaults();
    eager::Tape tape;
    auto [loss, printed] = run(dir);
    tape.Stop();
    std::printf("loss %.7g (%zu calls recorded)\n", loss.ToVector<float>()[0], tape.Size());
    for (const auto& p : printed) {
      std::vector<float> g = p.grad_of.Grad().ToVector<float>();
      double norm = 0;
      for (float v : g) norm += static_cast<double>(v) * v;
      std::printf("  |d loss / d %s| = %.7g  %s\n", p.name.c_str(), std::sqrt(norm),
                  ShapeToString(p.grad_of.GetShape()).c_str());
    }
    if (!dot.empty()) std::ofstream(dot) << tape.ToDot();
    if (!trace.empty())
      std::printf("rerun: nabla exec %s --backward %s\n", tape.Save(trace).c_str(), tape.VarName(loss).c_str());
    return 0;
  } catch (const Error& e) {
    std::cerr << argv[0] << ": error: " << e.what() << "\n";
    return e.IsBadInput() ? 2 : 1;
  }
}

}  // namespace nabla::eager_examples
