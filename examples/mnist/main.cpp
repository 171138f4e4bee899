// Fashion-MNIST classification, one process or data parallel under mpirun: the main job.
//
//   ./mnist                          one process
//   mpirun -np 2 ./mnist --threads 1 two processes, each reading only its half of every batch
//
// Every rank builds the same model from the same seed, reads its shard of each global batch,
// computes gradients on it, averages them with nn::average_gradients (bucketed all_sum nodes in
// the graph) and applies the same AdamW update, so all ranks hold the same parameters throughout.
// Rank 0 shows progress and writes the metrics (JSON lines), a plot (PNG via gnuplot) and a
// checkpoint per epoch that --resume continues from.
#include <loom/loom.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <iostream>
#include <thread>
#include <unistd.h>

using namespace loom;
namespace fs = std::filesystem;

namespace {

// 784-512-512-10 with ReLU: the mlp_step model of docs/benchmarks.md.
struct MLP : nn::Module {
  nn::Child<nn::Linear> l1{this, "l1", 784, 512};  // registered as "l1" by its declaration
  nn::Child<nn::Linear> l2{this, "l2", 512, 512};
  nn::Child<nn::Linear> l3{this, "l3", 512, 10};
  array operator()(const array& images) {
    array x = reshape(images, {images.shape(0), 784});
    return l3(nn::relu(l2(nn::relu(l1(x)))));
  }
};

// Two 3x3 convolutions with 2x2 max pooling, then two linear layers.
struct CNN : nn::Module {
  nn::Child<nn::Conv2d> conv1{this, "conv1", 1, 32, 3, 1, 1};
  nn::Child<nn::Conv2d> conv2{this, "conv2", 32, 64, 3, 1, 1};
  nn::MaxPool2d pool{2};  // no parameters
  nn::Child<nn::Linear> fc1{this, "fc1", 7 * 7 * 64, 128};
  nn::Child<nn::Linear> fc2{this, "fc2", 128, 10};
  array operator()(const array& images) {
    array x = reshape(images, {images.shape(0), 28, 28, 1});
    x = pool(nn::relu(conv1(x)));                  // 14 x 14 x 32
    x = pool(nn::relu(conv2(x)));                  // 7 x 7 x 64
    x = reshape(x, {x.shape(0), 7 * 7 * 64});
    return fc2(nn::relu(fc1(x)));
  }
};

struct Options {
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  std::string model = "mlp";
  int epochs = 3;
  int batch_size = 128;
  double lr = 1e-3;
  double weight_decay = 0.01;
  int threads = 0;
  uint64_t seed = 0;
  std::string out_dir = "runs/mnist";
  std::string checkpoint_dir, metrics, plot, resume;
  int64_t steps = 0;       // 0: whole epochs
  bool join = false;       // ranks may run different numbers of steps (nn::Join)
  int64_t test_limit = 0;  // 0: the whole test set
  int prefetch = 2;        // batches read ahead on a background thread
  std::string export_file;  // the trained model's forward, for examples/serve (export_function)
};

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string clock_str(double seconds) {
  int s = static_cast<int>(seconds + 0.5);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%d:%02d", s / 60, s % 60);
  return buf;
}

// Pixels 0..255 as float32 standardized with the training set's mean and deviation (0.2860 and
// 0.3530 of the [0, 1] range); lazy, so it joins the step's graph.
array standardize(const array& images) {
  return (astype(images, float32) * (1.0f / 255.0f) - 0.2860f) * (1.0f / 0.3530f);
}

// Test loss and accuracy over the test set (or its first `limit` samples). Each rank scores a
// contiguous slice and the sums meet in one all_sum.
template <typename Model>
std::pair<double, double> evaluate(Model& model, const data::IdxDataset& test, int64_t limit,
                                   const distributed::Group& world) {
  const int64_t n = limit > 0 ? std::min(limit, test.size()) : test.size();
  const int64_t begin = n * world.rank() / world.size(), end = n * (world.rank() + 1) / world.size();
  model.eval();
  array loss_sum = zeros({}), correct = zeros({});
  for (int64_t b = begin; b < end; b += 1000) {
    std::vector<int64_t> idx;
    for (int64_t i = b; i < std::min(end, b + 1000); ++i) idx.push_back(i);
    auto [x, y] = test.get(idx);
    array logits = model(standardize(x));
    loss_sum = loss_sum + nn::losses::cross_entropy(logits, y, "sum");
    correct = correct + sum(astype(equal(argmax(logits, -1), y), float32));
    eval(loss_sum, correct);
  }
  model.train();
  array totals = distributed::all_sum(stack({loss_sum, correct}), world);
  auto t = totals.to_vector<double>();
  return {t[0] / n, t[1] / n};
}

// One PNG with the loss and accuracy per epoch, drawn by gnuplot from the metrics file.
void plot(const std::string& metrics, const std::string& png) {
  std::error_code ec;  // the plot may go to a folder of its own (--plot)
  fs::create_directories(fs::path(png).parent_path(), ec);
  std::ifstream in(metrics);
  std::string tsv = png + ".tsv";
  std::ofstream out(tsv);
  std::string line;
  auto field = [&](const std::string& key) {
    auto p = line.find("\"" + key + "\":");
    return p == std::string::npos ? std::string("nan") : line.substr(p + key.size() + 3, line.find_first_of(",}", p) - p - key.size() - 3);
  };
  int rows = 0;
  while (std::getline(in, line)) {
    out << field("epoch") << "\t" << field("train_loss") << "\t" << field("test_loss") << "\t" << field("test_acc")
        << "\n";
    ++rows;
  }
  out.close();
  if (rows == 0) return;
  // gnuplot writes the image to stdout when it cannot open the file: never to the terminal.
  FILE* gp = popen("gnuplot >/dev/null 2>&1", "w");
  if (!gp) return;
  std::fprintf(gp,
               "set terminal pngcairo size 1000,420 noenhanced\nset output '%s'\nset multiplot layout 1,2\n"
               "set xlabel 'epoch'\nset xtics 1\nset grid\nset key top right\nset title 'loss'\n"
               "plot '%s' using 1:2 with linespoints title 'train', '' using 1:3 with linespoints title 'test'\n"
               "set title 'test accuracy'\nset key bottom right\nset yrange [*:*]\n"
               "plot '%s' using 1:($4*100) with linespoints title 'accuracy (%%)'\nunset multiplot\n",
               png.c_str(), tsv.c_str(), tsv.c_str());
  if (pclose(gp) != 0) std::fprintf(stderr, "note: gnuplot could not draw %s\n", png.c_str());
}

// The newest checkpoint ("epoch-N.safetensors" with the largest N) in `dir`, or "".
std::string latest_checkpoint(const std::string& dir) {
  std::string best;
  int best_epoch = -1;
  if (!fs::is_directory(dir)) return best;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::string name = e.path().filename().string();
    int epoch = -1;
    if (std::sscanf(name.c_str(), "epoch-%d.safetensors", &epoch) == 1 && epoch > best_epoch &&
        name == "epoch-" + std::to_string(epoch) + ".safetensors") {
      best_epoch = epoch;
      best = e.path().string();
    }
  }
  return best;
}

// Keeps the metrics rows of epochs 1..last_epoch only: the checkpoint being resumed covers those.
// Rows of later epochs come from a run that went on past it (one stopped after writing an epoch's
// row but before its checkpoint was in place, or a resume from an older checkpoint); those epochs
// run again now and write their rows again, so each epoch's row appears once.
void keep_metrics_until(const std::string& metrics, int last_epoch) {
  std::ifstream in(metrics);
  if (!in) return;
  std::string kept, line;
  while (std::getline(in, line)) {
    int epoch = 0;
    if (std::sscanf(line.c_str(), "{\"epoch\":%d,", &epoch) == 1 && epoch <= last_epoch) kept += line + "\n";
  }
  in.close();
  const std::string tmp = metrics + ".tmp";
  std::ofstream(tmp, std::ios::trunc) << kept;
  fs::rename(tmp, metrics);  // a crash now leaves the old file or the new one, whole
}

template <typename Model>
int train(Model& model, const Options& opt, const distributed::Group& world) {
  const bool lead = world.rank() == 0;
  data::DataLoader loader(data::fashion_mnist(opt.data_dir, "train"), opt.batch_size,
                        data::LoaderOptions{/*shuffle=*/true, opt.seed, data::Remainder::drop, opt.prefetch}, world);
  data::IdxDataset test = data::fashion_mnist(opt.data_dir, "test");

  optim::AdamW optimizer(opt.lr, {0.9, 0.999}, 1e-8, opt.weight_decay);
  auto loss_fn = [&](const array& x, const array& y) {
    return nn::losses::cross_entropy(model(x), y, "mean");
  };
  auto loss_and_grad = nn::value_and_grad(model, loss_fn);

  int first_epoch = 1;
  std::string resume = opt.resume == "latest" ? latest_checkpoint(opt.checkpoint_dir) : opt.resume;
  if (!opt.resume.empty()) {
    if (resume.empty()) throw std::runtime_error("--resume latest: no checkpoint in " + opt.checkpoint_dir);
    auto meta = optim::load_checkpoint(resume, model, optimizer);
    first_epoch = std::stoi(meta.at("epoch")) + 1;
    if (lead) std::printf("resumed from %s (epoch %d done, step %lld)\n", resume.c_str(), first_epoch - 1,
                          static_cast<long long>(optimizer.step()));
  }
  if (lead) {
    fs::create_directories(opt.checkpoint_dir);
    fs::create_directories(fs::path(opt.metrics).parent_path());
    if (first_epoch == 1) {
      std::ofstream(opt.metrics, std::ios::trunc);
    } else {
      keep_metrics_until(opt.metrics, first_epoch - 1);
    }
  }

  const int64_t steps = opt.steps > 0 ? std::min(opt.steps, loader.num_batches()) : loader.num_batches();
  const bool tty = isatty(fileno(stderr));
  for (int epoch = first_epoch; epoch <= opt.epochs; ++epoch) {
    loader.set_epoch(epoch);
    const double t0 = now_s();
    double loss_sum = 0;
    int64_t step = 0;
    std::optional<nn::Join> join;  // with --join: a rank out of steps shadows the others' averages
    if (opt.join) join.emplace();
    for (auto& [images, labels] : loader) {
      if (step == steps) break;
      auto [loss, grads] = loss_and_grad(standardize(images), labels);
      grads = join ? join->average_gradients(grads) : nn::average_gradients(grads);  // lazy: bucketed all_sums
      optimizer.update(model, grads);        // lazy: new parameter nodes
      eval(loss, model.parameters());        // forward, backward, all-reduce and update
      loss_sum += loss.template item<float>();
      ++step;
      if (lead && (step == steps || (tty && step % 10 == 0) || (!tty && step % std::max<int64_t>(1, steps / 4) == 0))) {
        double elapsed = now_s() - t0;
        double rate = step * double(opt.batch_size) / elapsed;
        std::fprintf(stderr, "%sepoch %d/%d  step %lld/%lld  loss %.4f  %.0f samples/s  %s left%s", tty ? "\r" : "",
                     epoch, opt.epochs, static_cast<long long>(step), static_cast<long long>(steps),
                     loss_sum / step, rate, clock_str(elapsed / step * (steps - step)).c_str(), tty ? "   " : "\n");
      }
    }
    if (join) {
      join->finish(model.trainable_parameters(), [&](const nn::ParamTree& averaged) {
        optimizer.update(model, averaged);
        eval(model.parameters());
      });
    }
    const double seconds = now_s() - t0;
    if (lead && tty) std::fprintf(stderr, "\n");
    // Train loss over every rank's shard, then the test set.
    const double train_loss = distributed::all_sum(array(loss_sum / step), world).item<double>() / world.size();
    auto [test_loss, test_acc] = evaluate(model, test, opt.test_limit, world);
    if (lead) {
      const double samples_per_s = steps * double(opt.batch_size) / seconds;
      std::printf("epoch %d: train loss %.4f, test loss %.4f, test accuracy %.2f%%, %.1f s (%.0f samples/s)\n", epoch,
                  train_loss, test_loss, 100 * test_acc, seconds, samples_per_s);
      std::ofstream(opt.metrics, std::ios::app)
          << "{\"epoch\":" << epoch << ",\"steps\":" << steps << ",\"train_loss\":" << train_loss
          << ",\"test_loss\":" << test_loss << ",\"test_acc\":" << test_acc << ",\"seconds\":" << seconds
          << ",\"samples_per_s\":" << samples_per_s << ",\"ranks\":" << world.size() << ",\"threads\":"
          << get_num_threads() << ",\"model\":\"" << opt.model << "\",\"batch_size\":" << opt.batch_size << "}\n";
      std::string ckpt = opt.checkpoint_dir + "/epoch-" + std::to_string(epoch) + ".safetensors";
      optim::save_checkpoint(ckpt, model, optimizer, {{"epoch", std::to_string(epoch)}, {"model", opt.model}});
      plot(opt.metrics, opt.plot);
      std::fflush(stdout);
    }
  }
  if (lead) {
    std::printf("metrics: %s\nplot: %s\ncheckpoints: %s\n", opt.metrics.c_str(), opt.plot.c_str(),
                opt.checkpoint_dir.c_str());
  }
  if (lead && !opt.export_file.empty()) {
    // The forward pass, from raw uint8 images to logits, traced once for any batch size (shapeless):
    // the file holds the graph and the trained weights, and examples/serve runs it without this code.
    model.eval();
    auto [x, y] = test.get({0, 1});
    export_function(opt.export_file, [&model](const Args& a) { return std::vector<array>{model(standardize(a[0]))}; },
                    {x}, /*shapeless=*/opt.model == "mlp", "Fashion-MNIST " + opt.model + ": uint8 images -> logits");
    model.train();
    std::printf("exported: %s\n", opt.export_file.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  CLI::App app{"Train a classifier on Fashion-MNIST with Loom, alone or under mpirun -np N."};
  app.add_option("--data-dir", opt.data_dir, "directory with the (gzipped) IDX files")->capture_default_str();
  app.add_option("--model", opt.model, "mlp (784-512-512-10) or cnn")
      ->check(CLI::IsMember({"mlp", "cnn"}))
      ->capture_default_str();
  app.add_option("--epochs", opt.epochs, "epochs to train")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--batch-size", opt.batch_size, "global batch size (split evenly across ranks)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--lr", opt.lr, "AdamW learning rate")->capture_default_str();
  app.add_option("--weight-decay", opt.weight_decay, "AdamW weight decay")->capture_default_str();
  app.add_option("--threads", opt.threads, "threads per rank (default: cores / local ranks)");
  app.add_option("--seed", opt.seed, "seed for the initial weights and the shuffling")->capture_default_str();
  app.add_option("--out-dir", opt.out_dir, "where metrics, plot and checkpoints go by default")->capture_default_str();
  app.add_option("--checkpoint-dir", opt.checkpoint_dir, "checkpoint directory (default: OUT_DIR/checkpoints)");
  app.add_option("--metrics", opt.metrics, "metrics file, JSON lines (default: OUT_DIR/metrics.jsonl)");
  app.add_option("--plot", opt.plot, "loss and accuracy plot, PNG (default: OUT_DIR/metrics.png)");
  app.add_option("--resume", opt.resume, "checkpoint to continue from, or 'latest' in the checkpoint directory");
  app.add_option("--steps", opt.steps, "stop each epoch after this many steps (0: whole epochs)");
  app.add_flag("--join", opt.join,
               "let ranks run different numbers of steps (e.g. different --steps): a rank out of steps "
               "averages zero gradients with the others until all are (nn::Join)");
  app.add_option("--prefetch", opt.prefetch, "batches read ahead on a background thread (0: none)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--test-limit", opt.test_limit, "score only the first N test images (0: all)");
  app.add_option("--export", opt.export_file, "after training, write the model's forward here (see examples/serve)");
  CLI11_PARSE(app, argc, argv);
  if (opt.checkpoint_dir.empty()) opt.checkpoint_dir = opt.out_dir + "/checkpoints";
  if (opt.metrics.empty()) opt.metrics = opt.out_dir + "/metrics.jsonl";
  if (opt.plot.empty()) opt.plot = opt.out_dir + "/metrics.png";

  auto world = distributed::init();
  if (opt.threads <= 0) {
    const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    int per_node = local ? std::max(1, std::atoi(local)) : world.size();
    opt.threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / per_node);
  }
  set_num_threads(opt.threads);
  random::seed(opt.seed);
  if (world.rank() == 0) {
    std::printf("Fashion-MNIST %s: %d rank(s) x %d thread(s), global batch %d, %d epoch(s), AdamW lr %g\n",
                opt.model.c_str(), world.size(), opt.threads, opt.batch_size, opt.epochs, opt.lr);
  }
  if (opt.model == "cnn") {
    CNN model;
    return train(model, opt, world);
  }
  MLP model;
  return train(model, opt, world);
}
