// libFuzzer harness of training checkpoints (optim::load_checkpoint): the input as a checkpoint
// file for a small model and AdamW. A checkpoint that loads must be usable: one training step
// runs on it, and saving and loading it again works.
#include "fuzz_common.h"

using namespace loom;

namespace {

void train_step(fuzz::Model& model, optim::AdamW& opt) {
  array x = array({0.5f, -1.0f, 2.0f, 1.0f, 0.0f, -0.5f}, {2, 3});
  array y = array({1, 0}, {2}, int32);
  auto loss_and_grad = nn::value_and_grad(model, [&](const array& a, const array& b) {
    return nn::losses::cross_entropy(model(a), b, "mean");
  });
  auto [loss, grads] = loss_and_grad(x, y);
  opt.update(model, grads);
  eval(loss, model.parameters());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_file("input.safetensors", data, size);
  fuzz::Model model;
  optim::AdamW opt(1e-3);
  optim::Metadata meta;
  try {
    meta = optim::load_checkpoint(path, model, opt);
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    if (what.rfind("[load_safetensors] ", 0) == 0) {
      fuzz::expect_clear(e, "[load_safetensors] '" + path + "': ");
    } else {
      fuzz::expect_clear(e, "[load_checkpoint] '" + path + "'");
    }
    return 0;
  } catch (const std::invalid_argument& e) {
    fuzz::expect_clear(e, "[load_checkpoint] '" + path + "'");
    return 0;
  }
  train_step(model, opt);
  const std::string again = (fuzz::scratch() / "again.safetensors").string();
  optim::save_checkpoint(again, model, opt, meta);
  fuzz::Model model2;
  optim::AdamW opt2(1e-3);
  if (optim::load_checkpoint(again, model2, opt2) != meta) fuzz::finding("the metadata does not survive a save");
  return 0;
}
