// Serving a model with no model code: runs a forward pass that another program exported
// (examples/mnist --export FILE) on the Fashion-MNIST test set and prints its accuracy.
//
//   ./mnist --epochs 1 --export mlp.loomfn
//   ./serve mlp.loomfn [--data-dir DIR] [--limit N] [--batch-size B]
#include <loom/loom.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>

using namespace loom;

int main(int argc, char** argv) {
  std::string file, data_dir = "/usr/share/datasets/fashion-mnist";
  int64_t limit = 0;
  int batch = 1000;
  CLI::App app{"Runs an exported Fashion-MNIST forward pass on the test set"};
  app.add_option("file", file, "a file export_function wrote (examples/mnist --export)")->required();
  app.add_option("--data-dir", data_dir, "directory with the (gzipped) IDX files")->capture_default_str();
  app.add_option("--limit", limit, "score only the first N test images (0: all)");
  app.add_option("--batch-size", batch, "images per call")->check(CLI::PositiveNumber)->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  const ImportedFunction forward = import_function(file);
  std::printf("serving %s (%s)\n", file.c_str(), forward.metadata().c_str());
  data::IdxDataset test = data::fashion_mnist(data_dir, "test");
  const int64_t n = limit > 0 ? std::min(limit, test.size()) : test.size();
  array correct = zeros({});
  for (int64_t b = 0; b < n; b += batch) {
    std::vector<int64_t> idx;
    for (int64_t i = b; i < std::min(n, b + batch); ++i) idx.push_back(i);
    auto [x, y] = test.get(idx);
    array logits = forward({x})[0];
    correct = correct + sum(astype(equal(argmax(logits, -1), y), float32));
    eval(correct);
  }
  std::printf("serve: test accuracy %.2f%% over %lld images\n", 100 * correct.item<double>() / n,
              static_cast<long long>(n));
  return 0;
}
