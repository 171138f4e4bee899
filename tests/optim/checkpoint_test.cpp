// Checkpoints: round trips, resume equivalence, errors, and atomic replacement of the old file.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <regex>

#include "../io/io_test_helpers.h"
#include "loom/core/eval.h"
#include "loom/optim/checkpoint.h"
#include "loom/io/io.h"
#include "loom/nn/linear.h"
#include "loom/nn/module.h"
#include "loom/ops/ops.h"
#include "loom/ops/random.h"
#include "loom/optim/optimizers.h"

using namespace loom;
using loom::iotest::read_bytes;

namespace {

struct MLP : nn::Module {
  nn::Linear l1{3, 8}, l2{8, 8}, l3{8, 2};
  array calls = zeros({1});  // a buffer travels with the parameters
  MLP() {
    register_module("l1", l1);
    register_module("l2", l2);
    register_module("l3", l3);
    register_buffer("calls", calls);
  }
  array operator()(const array& x) const {
    auto relu = [](const array& a) { return maximum(a, array(0.0f)); };
    return l3(relu(l2(relu(l1(x)))));
  }
};

optim::AdamW make_optimizer() {
  return optim::AdamW(optim::join_schedules({optim::linear_schedule(0, 1e-2, 5), optim::cosine_decay(1e-2, 40)}, {5}),
                      {0.9, 0.99}, 1e-8, 0.05);
}

// One training step on a fresh random batch (drawn from the global random state).
void train_step(MLP& model, optim::Optimizer& opt) {
  array x = random::normal({16, 3});
  array y = concatenate({sin(sum(x, 1, true)), x.shape(0) > 0 ? mean(square(x), 1, true) : x}, 1);
  auto loss_fn = [&](const array& a, const array& b) { return mean(square(model(a) - b)); };
  auto [loss, grads] = nn::value_and_grad(model, loss_fn)(x, y);
  opt.update(model, grads);
  model.update({{"calls", model.parameters()["calls"] + 1.0f}});
  eval(loss, model.parameters());
}

template <typename T>
std::vector<T> bits(const array& a_in) {
  array a = a_in;
  return a.to_vector<T>();
}

void expect_same_bits(const nn::ParamTree& a, const nn::ParamTree& b) {
  ASSERT_EQ(a.names(), b.names());
  for (const auto& [name, x] : a) {
    const array& y = b.at(name);
    ASSERT_EQ(x.dtype(), y.dtype()) << name;
    if (x.dtype() == int64) {
      EXPECT_EQ(bits<int64_t>(x), bits<int64_t>(y)) << name;
    } else {
      auto u = bits<float>(x), v = bits<float>(y);
      ASSERT_EQ(u.size(), v.size());
      EXPECT_EQ(std::memcmp(u.data(), v.data(), u.size() * sizeof(float)), 0) << name;
    }
  }
}

class Checkpoint : public loom::iotest::TempDirTest {};

}  // namespace

TEST_F(Checkpoint, ResumedRunIsBitIdenticalToTheUninterruptedOne) {
  constexpr int kSteps = 30, kSaveAt = 12;
  const std::string ckpt = path("run.safetensors");
  random::seed(42);
  MLP model;
  auto opt = make_optimizer();
  for (int i = 0; i < kSteps; ++i) {
    if (i == kSaveAt) optim::save_checkpoint(ckpt, model, opt, {{"epoch", "3"}, {"note", "mid-run"}});
    train_step(model, opt);
  }
  const auto key_uninterrupted = bits<uint32_t>(random::get_state());

  // A fresh process state: other seeds, other initial weights, a new optimizer that has not run.
  random::seed(999);
  MLP resumed;
  auto opt2 = make_optimizer();
  (void)random::normal({5}).to_vector<float>();
  const optim::Metadata meta = optim::load_checkpoint(ckpt, resumed, opt2);
  EXPECT_EQ(meta, (optim::Metadata{{"epoch", "3"}, {"note", "mid-run"}}));
  EXPECT_EQ(opt2.step(), kSaveAt);
  EXPECT_EQ(resumed.parameters()["calls"].item<float>(), float(kSaveAt));
  for (int i = kSaveAt; i < kSteps; ++i) train_step(resumed, opt2);

  expect_same_bits(model.parameters(), resumed.parameters());
  expect_same_bits(opt.state(), opt2.state());
  EXPECT_EQ(bits<uint32_t>(random::get_state()), key_uninterrupted);
}

TEST_F(Checkpoint, FileLayoutAndRoundTrip) {
  const std::string ckpt = path("c.safetensors");
  random::seed(5);
  MLP model;
  optim::SGD opt(0.1, 0.9);
  train_step(model, opt);
  train_step(model, opt);
  const array key = random::get_state();
  optim::save_checkpoint(ckpt, model, opt, {{"epoch", "7"}});

  auto [tensors, meta] = load_safetensors(ckpt);
  EXPECT_EQ(meta.at("loom.format"), "checkpoint/1");
  EXPECT_EQ(meta.at("loom.optimizer"), "SGD");
  EXPECT_EQ(meta.at("loom.step"), "2");
  EXPECT_EQ(meta.at("epoch"), "7");
  EXPECT_EQ(tensors.size(), 7u + 1 + 6 + 1);  // 7 model entries, step, 6 momentum buffers, random state
  EXPECT_EQ(tensors.at("optimizer.step").dtype(), int64);
  EXPECT_EQ(tensors.at("optimizer.step").item<int64_t>(), 2);
  EXPECT_EQ(tensors.at("optimizer.l2.weight.v").shape(), (Shape{8, 8}));
  EXPECT_EQ(tensors.at("model.calls").item<float>(), 2.0f);
  EXPECT_EQ(bits<uint32_t>(tensors.at("random.state")), bits<uint32_t>(key));

  random::seed(123);
  MLP other;
  optim::SGD opt2(0.1, 0.9);
  optim::load_checkpoint(ckpt, other, opt2);
  expect_same_bits(model.parameters(), other.parameters());
  expect_same_bits(opt.state(), opt2.state());
  EXPECT_EQ(bits<uint32_t>(random::get_state()), bits<uint32_t>(key));
}

// Checkpoints written before random keys became uint32 hold "random.state" as int32 (2): the same
// bit patterns load as the uint32 key.
TEST_F(Checkpoint, OldInt32RandomStateLoads) {
  const std::string ckpt = path("old.safetensors");
  random::seed(5);
  MLP model;
  optim::SGD opt(0.1, 0.9);
  train_step(model, opt);
  optim::save_checkpoint(ckpt, model, opt, {{"epoch", "1"}});
  auto [tensors, meta] = load_safetensors(ckpt);
  EXPECT_EQ(tensors.at("random.state").dtype(), uint32);
  const int32_t old_words[2] = {static_cast<int32_t>(0x89abcdefu), 0x01234567};  // a word >= 2^31
  tensors.insert_or_assign("random.state", array(old_words, Shape{2}, int32));
  std::unordered_map<std::string, std::string> keep;  // the checksums are the writer's own
  for (const auto& [k, v] : meta) {
    if (k.rfind("loom.crc32.", 0) != 0) keep.emplace(k, v);
  }
  save_safetensors(ckpt, tensors, keep);

  random::seed(123);
  MLP other;
  optim::SGD opt2(0.1, 0.9);
  EXPECT_EQ(optim::load_checkpoint(ckpt, other, opt2), (optim::Metadata{{"epoch", "1"}}));
  array state = random::get_state();
  EXPECT_EQ(state.dtype(), uint32);
  EXPECT_EQ(bits<uint32_t>(state), (std::vector<uint32_t>{0x89abcdefu, 0x01234567u}));
  // Other dtypes are still refused.
  tensors.insert_or_assign("random.state", array({1.f, 2.f}));
  save_safetensors(ckpt, tensors, keep);
  EXPECT_THROW_MSG(optim::load_checkpoint(ckpt, other, opt2), std::invalid_argument,
                   "has a \"random.state\" of shape (2) and dtype float32 (a random key is uint32 of shape (2))");
}

TEST_F(Checkpoint, MismatchesAreRefusedAndChangeNothing) {
  const std::string ckpt = path("c.safetensors");
  random::seed(1);
  MLP model;
  optim::AdamW opt;
  train_step(model, opt);
  EXPECT_THROW_MSG(optim::save_checkpoint(ckpt, model, opt, {{"loom.step", "1"}}), std::invalid_argument,
                   "[save_checkpoint] metadata key 'loom.step' uses the reserved prefix 'loom.'");
  optim::save_checkpoint(ckpt, model, opt);

  random::seed(2);
  MLP target;
  struct Smaller : nn::Module {
    nn::Linear l1{3, 8}, l2{8, 4};
    Smaller() {
      register_module("l1", l1);
      register_module("l2", l2);
    }
  } smaller;
  const auto before = target.parameters();
  const auto key_before = bits<uint32_t>(random::get_state());
  optim::SGD sgd(0.1);
  EXPECT_THROW_MSG(optim::load_checkpoint(ckpt, target, sgd), std::invalid_argument,
                   "holds the state of optimizer AdamW, not SGD");

  optim::AdamW opt2;
  EXPECT_THROW_MSG(optim::load_checkpoint(ckpt, smaller, opt2), std::invalid_argument,
                   "does not match the model; not in the model: calls, l3.bias, l3.weight; different shapes: "
                   "l2.weight (file (8,8), model (4,8)), l2.bias (file (8), model (4))");
  EXPECT_EQ(opt2.step(), 0);

  // An optimizer that already holds other state refuses the checkpoint's, before the model changes.
  optim::AdamW busy;
  nn::ParamTree p{{"w", zeros({2})}};
  busy.apply_gradients({{"w", ones({2})}}, p);
  EXPECT_THROW_MSG(optim::load_checkpoint(ckpt, target, busy), std::invalid_argument, "[AdamW::set_state]");
  expect_same_bits(target.parameters(), before);
  EXPECT_EQ(bits<uint32_t>(random::get_state()), key_before);

  const std::string plain = path("plain.safetensors");
  save_safetensors(plain, {{"w", ones({2})}});
  EXPECT_THROW_MSG(optim::load_checkpoint(plain, target, opt2), std::runtime_error,
                   "is not a Loom checkpoint (no \"loom.format\" metadata)");
  EXPECT_THROW_MSG(optim::load_checkpoint(path("missing.safetensors"), target, opt2), std::runtime_error, "cannot open");
  expect_same_bits(target.parameters(), before);
}

TEST_F(Checkpoint, FailedWritesLeaveThePreviousCheckpointIntact) {
  const std::string ckpt = path("c.safetensors");
  random::seed(3);
  MLP model;
  optim::AdamW opt;
  train_step(model, opt);
  optim::save_checkpoint(ckpt, model, opt, {{"epoch", "1"}});
  const std::string good = read_bytes(ckpt);
  train_step(model, opt);  // the next save would write different bytes

  // 1. The temporary cannot be created (a directory is in the way).
  std::filesystem::create_directory(ckpt + ".tmp");
  EXPECT_THROW_MSG(optim::save_checkpoint(ckpt, model, opt, {{"epoch", "2"}}), std::runtime_error, "cannot create");
  EXPECT_EQ(read_bytes(ckpt), good);
  std::filesystem::remove(ckpt + ".tmp");

  // 2. The disk fills up half-way (the file-size limit makes write() fail with EFBIG).
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  rlimit small = old;
  small.rlim_cur = good.size() / 2;
  auto old_handler = signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  bool threw = false;
  try {
    optim::save_checkpoint(ckpt, model, opt, {{"epoch", "2"}});
  } catch (const std::runtime_error& e) {
    threw = true;
    EXPECT_NE(std::string(e.what()).find("failed"), std::string::npos) << e.what();
  }
  setrlimit(RLIMIT_FSIZE, &old);
  signal(SIGXFSZ, old_handler);
  EXPECT_TRUE(threw);
  EXPECT_EQ(read_bytes(ckpt), good);
  EXPECT_EQ(listing(), (std::vector<std::string>{"c.safetensors"}));  // the temporary is removed

  // 3. The process dies in the middle of the write (killed by SIGXFSZ, as by any signal).
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    rlimit no_core{0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    rlimit tiny = old;
    tiny.rlim_cur = good.size() / 3;
    setrlimit(RLIMIT_FSIZE, &tiny);
    signal(SIGXFSZ, SIG_DFL);
    try {
      optim::save_checkpoint(ckpt, model, opt, {{"epoch", "2"}});
    } catch (...) {
    }
    _exit(0);  // not reached: the write past the limit kills the process
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(status)) << "status " << status;
  EXPECT_EQ(read_bytes(ckpt), good);  // the old checkpoint is whole; a partial .tmp may be left over
  random::seed(4);
  MLP fresh;
  optim::AdamW opt2;
  EXPECT_EQ(optim::load_checkpoint(ckpt, fresh, opt2).at("epoch"), "1");
  EXPECT_EQ(opt2.step(), 1);

  // A later save replaces the leftover temporary and then the checkpoint.
  optim::save_checkpoint(ckpt, model, opt, {{"epoch", "2"}});
  EXPECT_EQ(listing(), (std::vector<std::string>{"c.safetensors"}));
  EXPECT_EQ(optim::load_checkpoint(ckpt, fresh, opt2).at("epoch"), "2");
  EXPECT_EQ(opt2.step(), 2);
}

TEST_F(Checkpoint, DamagedDataIsRefusedNamingTheTensorAndChangesNothing) {
  const std::string ckpt = path("c.safetensors");
  random::seed(6);
  MLP model;
  optim::AdamW opt;
  train_step(model, opt);
  optim::save_checkpoint(ckpt, model, opt, {{"epoch", "1"}});
  const std::string good = read_bytes(ckpt);

  // Flip one bit inside l2.weight's data, found through its data_offsets in the header.
  uint64_t hlen = 0;
  for (int b = 7; b >= 0; --b) hlen = (hlen << 8) | static_cast<unsigned char>(good[b]);
  std::smatch m;
  const std::string header = good.substr(8, hlen);
  ASSERT_TRUE(std::regex_search(header, m, std::regex("\"model\\.l2\\.weight\":\\{[^}]*\"data_offsets\":\\[([0-9]+),")));
  const size_t at = 8 + hlen + std::stoul(m[1].str()) + 4 * 13 + 2;  // the 14th value's third byte
  std::string bad = good;
  bad[at] = static_cast<char>(bad[at] ^ 0x10);
  loom::iotest::write_bytes(ckpt, bad);

  random::seed(7);
  MLP target;
  optim::AdamW opt2;
  const auto before = target.parameters();
  const auto key_before = bits<uint32_t>(random::get_state());
  EXPECT_THROW_MSG(optim::load_checkpoint(ckpt, target, opt2), std::runtime_error,
                   "[load_safetensors] '" + ckpt + "': tensor 'model.l2.weight': checksum mismatch, the file is damaged");
  expect_same_bits(target.parameters(), before);
  EXPECT_EQ(bits<uint32_t>(random::get_state()), key_before);
  EXPECT_EQ(opt2.step(), 0);
}

TEST_F(Checkpoint, CheckpointsWithoutChecksumsStillLoad) {
  // As written before checkpoints carried checksums, or rewritten by a tool that drops them.
  const std::string ckpt = path("c.safetensors");
  random::seed(8);
  MLP model;
  optim::AdamW opt;
  train_step(model, opt);
  train_step(model, opt);
  optim::save_checkpoint(ckpt, model, opt, {{"epoch", "2"}});
  const std::string with = read_bytes(ckpt);
  ASSERT_NE(with.find("\"loom.crc32.model.l1.weight\":\""), std::string::npos);
  ASSERT_NE(with.find("\"loom.crc32.optimizer.step\":\""), std::string::npos);
  const std::string plain = loom::iotest::strip_checksums(with);
  ASSERT_EQ(plain.find("loom.crc32"), std::string::npos);
  loom::iotest::write_bytes(ckpt, plain);

  random::seed(9);
  MLP resumed;
  optim::AdamW opt2;
  EXPECT_EQ(optim::load_checkpoint(ckpt, resumed, opt2), (optim::Metadata{{"epoch", "2"}}));
  EXPECT_EQ(opt2.step(), 2);
  expect_same_bits(model.parameters(), resumed.parameters());
  expect_same_bits(opt.state(), opt2.state());
}

TEST_F(Checkpoint, OptimizerStateTheOptimizerRefusesNamesTheFile) {
  // Found by fuzz_checkpoint: set_state's error named neither load_checkpoint nor the file.
  const std::string ckpt = path("c.safetensors");
  random::seed(10);
  MLP model;
  optim::AdamW opt;
  train_step(model, opt);
  optim::save_checkpoint(ckpt, model, opt);
  auto [tensors, meta] = load_safetensors(ckpt);
  tensors.emplace("optimizer.l1.bias.o", zeros({8}));
  const std::string bad = path("bad.safetensors");
  save_safetensors(bad, tensors, meta);

  MLP target;
  optim::AdamW opt2;
  const auto before = target.parameters();
  EXPECT_THROW_MSG(optim::load_checkpoint(bad, target, opt2), std::invalid_argument,
                   "[load_checkpoint] '" + bad +
                       "' holds optimizer state that AdamW refuses: [AdamW::check_state] state that does not fit the "
                       "parameters: l1.bias.o (no AdamW slot)");
  // And what set_state itself refuses.
  tensors.erase("optimizer.l1.bias.o");
  tensors.at("optimizer.step") = array(1.0f);
  save_safetensors(bad, tensors, meta);
  EXPECT_THROW_MSG(optim::load_checkpoint(bad, target, opt2), std::invalid_argument,
                   "[load_checkpoint] '" + bad +
                       "' holds optimizer state that AdamW refuses: [AdamW::set_state] 'step' must be an integer scalar");
  expect_same_bits(target.parameters(), before);
  EXPECT_EQ(opt2.step(), 0);
}

TEST_F(Checkpoint, OptimizerSlotsMustMatchTheModelsParameters) {
  // A slot of the wrong shape, or of no parameter, loaded quietly into a fresh optimizer, and the
  // next update failed far from the file (or kept the stray slot forever).
  const std::string ckpt = path("c.safetensors");
  random::seed(11);
  MLP model;
  optim::AdamW opt;
  train_step(model, opt);
  optim::save_checkpoint(ckpt, model, opt);
  auto [tensors, meta] = load_safetensors(ckpt);
  auto wrong = tensors;
  wrong.at("optimizer.l2.weight.m") = zeros({8, 7});
  wrong.emplace("optimizer.head.weight.v", zeros({2}));
  const std::string bad = path("bad.safetensors");
  save_safetensors(bad, wrong, meta);

  MLP target;
  optim::AdamW opt2;
  const auto before = target.parameters();
  EXPECT_THROW_MSG(optim::load_checkpoint(bad, target, opt2), std::invalid_argument,
                   "[load_checkpoint] '" + bad +
                       "' holds optimizer state that AdamW refuses: [AdamW::check_state] state that does not fit the "
                       "parameters: l2.weight.m (shape (8,7), parameter l2.weight of shape (8,8) needs (8,8)), "
                       "head.weight.v (no parameter head.weight)");
  expect_same_bits(target.parameters(), before);
  EXPECT_EQ(opt2.step(), 0);
  // The good file trains on.
  optim::load_checkpoint(ckpt, target, opt2);
  train_step(target, opt2);
  EXPECT_EQ(opt2.step(), 2);
}
