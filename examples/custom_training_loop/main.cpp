// The training loop of Loom's design, line by line. Run it alone (./custom_training_loop) or data
// parallel (mpirun -np 2 ./custom_training_loop): the same binary.
#include <loom/loom.h>

#include <cstdio>

using namespace loom;

// A model is a struct: members are layers, and one register_* line per member names it, so
// model.parameters() is {"l1.weight", "l1.bias", "l2.weight", ...} in registration order.
// Modules hold pointers to their members, so they cannot be copied or moved (a compile error).
struct MLP : nn::Module {
  nn::Linear l1{784, 512}, l2{512, 512}, l3{512, 10};
  MLP() {
    register_module("l1", l1);
    register_module("l2", l2);
    register_module("l3", l3);
  }
  // Calling the model only records graph nodes; nothing is computed here.
  array operator()(const array& x) { return l3(nn::relu(l2(nn::relu(l1(x))))); }
};

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 200;

  // A group of size 1 unless mpirun started us; then every rank is one process of the job.
  auto world = distributed::init();
  random::seed(0);  // the same seed on every rank: every rank starts with the same weights

  MLP model;
  optim::AdamW opt(1e-3);  // lr 1e-3, weight decay 0.01, betas (0.9, 0.999), bias correction

  // The loss as a function of a batch. nn::value_and_grad wraps it into a function returning the
  // loss and the gradients with respect to model.trainable_parameters(), under the same names.
  auto loss_fn = [&](const array& x, const array& y) {
    return nn::losses::cross_entropy(model(x), y, "mean");
  };
  auto loss_and_grad = nn::value_and_grad(model, loss_fn);

  // Global batches of 128 shuffled samples; each rank reads only its 128 / size rows of each.
  data::DataLoader loader(data::fashion_mnist(), 128);

  int step = 0;
  for (int epoch = 0; step < steps; ++epoch) {
    loader.set_epoch(epoch);  // a new shuffle per epoch, the same on every rank
    for (auto& [images, labels] : loader) {
      if (step++ == steps) break;
      array x = reshape(astype(images, float32) / 255.0f, {images.shape(0), 784});

      auto [loss, grads] = loss_and_grad(x, labels);  // lazy: forward and backward graph, not run yet
      grads = nn::average_gradients(grads);           // lazy: bucketed all_sum nodes (untouched on 1 rank)
      opt.update(model, grads);                       // lazy: the parameters become AdamW update nodes
      eval(loss, model.parameters());                 // runs forward, backward, all-reduce and update

      if (world.rank() == 0 && step % 50 == 0) std::printf("step %d  loss %.4f\n", step, loss.item<float>());
    }
  }
}
