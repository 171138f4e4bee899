// Devices, streams and async_eval (core/stream.h, core/eval.h). The background work is made
// deterministic with a gate: a primitive whose kernel blocks until the test opens it, so every
// "not yet" below holds whatever the timing, and every "done" is waited for.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <stdexcept>
#include <thread>

#include "loom/core/primitive.h"
#include "../test_utils.h"

namespace loom {
namespace {

using testing::expect_array;

struct Gate {
  std::promise<void> open_;
  std::shared_future<void> opened{open_.get_future().share()};
  void open() { open_.set_value(); }
};

// Copies its input once the gate opens (or throws, when told to).
class GatePrimitive : public UnaryPrimitive {
 public:
  GatePrimitive(std::shared_ptr<Gate> g, bool fail) : gate_(std::move(g)), fail_(fail) {}
  void eval_cpu(const std::vector<array>& in, array& out) override {
    gate_->opened.wait();
    if (fail_) throw std::runtime_error("[StreamTestGate] failed on purpose");
    out.alloc();
    const array c = detail::row_major_copy(in[0]);
    const auto* src = c.data<float>();
    auto* dst = static_cast<float*>(out.raw_data());  // (data() is for evaluated arrays)
    for (size_t i = 0; i < out.size(); ++i) dst[i] = src[i];
  }
  const char* name() const override { return "StreamTestGate"; }
  bool is_differentiable() const override { return false; }

 private:
  std::shared_ptr<Gate> gate_;
  bool fail_;
};

array gated(const array& x, const std::shared_ptr<Gate>& g, bool fail = false) {
  return array(x.shape(), float32, std::make_shared<GatePrimitive>(g, fail), {x});
}

// Opens the gate from another thread after a while, so that the test's own thread is the one waiting.
struct OpenLater {
  std::thread t;
  explicit OpenLater(const std::shared_ptr<Gate>& g)
      : t([g] {
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
          g->open();
        }) {}
  ~OpenLater() { join(); }
  void join() {
    if (t.joinable()) t.join();
  }
};

TEST(Device, OnlyTheCpu) {
  EXPECT_EQ(default_device(), Device(Device::cpu));
  EXPECT_EQ(default_device(), Device::cpu);
  EXPECT_TRUE(is_available(Device(Device::cpu)));
  EXPECT_FALSE(is_available(Device(Device::gpu)));
  EXPECT_EQ(device_count(Device::cpu), 1);
  EXPECT_EQ(device_count(Device::gpu), 0);
  set_default_device(Device::cpu);
  EXPECT_THROW_MSG(set_default_device(Device::gpu), std::invalid_argument, "CPU only");
  EXPECT_THROW_MSG(new_stream(Device::gpu), std::invalid_argument, "[new_stream]");
  EXPECT_THROW_MSG(to_stream(Device::gpu), std::invalid_argument, "gpu");
}

TEST(Stream, DefaultNewAndContext) {
  const Stream s0 = default_stream(default_device());
  EXPECT_EQ(s0.index, 0);
  const Stream s1 = new_stream(Device::cpu), s2 = new_stream(Device::cpu);
  EXPECT_NE(s1, s2);
  EXPECT_NE(s1, s0);
  EXPECT_EQ(s1.device, Device(Device::cpu));
  auto all = get_streams();
  EXPECT_NE(std::find(all.begin(), all.end(), s2), all.end());

  EXPECT_EQ(to_stream({}), s0);
  EXPECT_EQ(to_stream(s1), s1);
  EXPECT_EQ(to_stream(Device(Device::cpu)), s0);
  EXPECT_EQ(to_stream(Device::cpu), s0);
  EXPECT_THROW_MSG(to_stream(Stream(1 << 20, Device::cpu)), std::invalid_argument, "no stream");
  EXPECT_THROW_MSG(set_default_stream(Stream(-1, Device::cpu)), std::invalid_argument, "no stream -1");
  EXPECT_THROW_MSG(StreamContext c{StreamOrDevice{}}, std::invalid_argument, "StreamContext");

  // Nodes belong to the default stream when their op is called; arrays made from data to the default.
  array x = ones({4});
  array a = exp(x);
  array b = x, c = x;
  {
    StreamContext ctx(s1);
    EXPECT_EQ(default_stream(Device::cpu), s1);
    b = exp(x);
    {
      StreamContext inner(s2);
      c = exp(x);
    }
    EXPECT_EQ(default_stream(Device::cpu), s1);
  }
  EXPECT_EQ(default_stream(Device::cpu), s0);
  EXPECT_EQ(a.stream(), s0);
  EXPECT_EQ(b.stream(), s1);
  EXPECT_EQ(c.stream(), s2);
  EXPECT_EQ(b.primitive().stream(), s1);
  EXPECT_EQ(x.stream(), s0);

  // The default stream is the calling thread's own: another thread starts on a new stream of its own
  // (MLX's rule), which its ops record, and setting one thread's leaves the other's alone.
  set_default_stream(s1);
  const size_t streams_before = get_streams().size();
  Stream seen = s0, seen_again = s0, recorded = s0;
  std::thread([&] {
    seen = default_stream(Device::cpu);
    seen_again = default_stream(Device::cpu);
    recorded = exp(x).stream();
  }).join();
  EXPECT_NE(seen, s0);
  EXPECT_NE(seen, s1);
  EXPECT_NE(seen, s2);
  EXPECT_EQ(seen_again, seen);
  EXPECT_EQ(recorded, seen);
  EXPECT_EQ(get_streams().size(), streams_before + 1);
  EXPECT_EQ(get_streams().back(), seen);
  EXPECT_EQ(default_stream(Device::cpu), s1);
  set_default_stream(s0);
}

// Two threads that each async_eval on their default streams run side by side: each thread's work
// waits for a signal that only the other thread's work gives, which would deadlock on one stream.
TEST(Stream, ThreadsDefaultStreamsRunConcurrently) {
  std::promise<void> a_started, b_started;
  std::shared_future<void> a_go = a_started.get_future().share(), b_go = b_started.get_future().share();
  int a_value = 0, b_value = 0;
  auto worker = [](std::promise<void>& mine, std::shared_future<void> theirs, int& value, int base) {
    const Stream s = default_stream(Device::cpu);
    scheduler::enqueue(s, [&mine, theirs] {
      mine.set_value();
      theirs.wait();
    });
    array r = sum(arange(base, base + 10));
    EXPECT_EQ(r.stream(), s);
    async_eval(r);
    value = r.item<int>();
  };
  std::thread ta(worker, std::ref(a_started), b_go, std::ref(a_value), 0);
  std::thread tb(worker, std::ref(b_started), a_go, std::ref(b_value), 10);
  ta.join();
  tb.join();
  EXPECT_EQ(a_value, 45);
  EXPECT_EQ(b_value, 145);
}

// Every op takes MLX's trailing StreamOrDevice: the nodes it records (all of them, for an op built from
// others) belong to that stream, a device means its default stream, and the caller's default stream
// is untouched afterwards. A bad stream or a GPU is refused when the op is built.
TEST(Stream, OpsTakeAStreamOrDeviceLast) {
  const Stream s0 = default_stream(Device::cpu);
  const Stream s1 = new_stream(Device::cpu);
  array x = array({1.0f, 2.0f, 3.0f, 4.0f}, {2, 2});
  EXPECT_EQ(exp(x, s1).stream(), s1);
  EXPECT_EQ(add(x, x, s1).stream(), s1);
  EXPECT_EQ(matmul(x, x, s1).stream(), s1);
  EXPECT_EQ(reshape(x, {4}, s1).stream(), s1);
  EXPECT_EQ(sum(x, s1).stream(), s1);
  EXPECT_EQ(sum(x, 0, false, s1).stream(), s1);
  EXPECT_EQ(zeros({3}, s1).stream(), s1);
  EXPECT_EQ(arange(0, 4, s1).stream(), s1);
  EXPECT_EQ(random::uniform({3}, std::nullopt, s1).stream(), s1);
  EXPECT_EQ(fast::rms_norm(x, std::nullopt, 1e-5, s1).stream(), s1);
  EXPECT_EQ(exp(x, Device::cpu).stream(), s0);
  EXPECT_EQ(exp(x, Device(Device::cpu)).stream(), s0);
  EXPECT_EQ(exp(x).stream(), s0);

  // A composite op: mean is a sum, a multiply and casts; every node is on s1.
  array m = mean(x, 0, false, s1);
  std::vector<array> stack{m};
  int nodes = 0;
  while (!stack.empty()) {
    array a = stack.back();
    stack.pop_back();
    if (!a.has_primitive()) continue;
    ++nodes;
    EXPECT_EQ(a.stream(), s1) << a.primitive().name();
    for (const array& in : a.inputs()) stack.push_back(in);
  }
  EXPECT_GE(nodes, 2);
  EXPECT_EQ(default_stream(Device::cpu), s0);
  expect_array(m, {2}, {2, 3});

  // Work placed on another stream by its argument runs there under async_eval and gives the same values.
  array y = exp(x, s1);
  array z = add(y, x, s1);
  async_eval({z});
  expect_array(z, {2, 2}, {std::exp(1.0) + 1, std::exp(2.0) + 2, std::exp(3.0) + 3, std::exp(4.0) + 4}, 1e-5);

  EXPECT_THROW_MSG(exp(x, Device::gpu), std::invalid_argument, "gpu");
  EXPECT_THROW_MSG(exp(x, Stream(1 << 20, Device::cpu)), std::invalid_argument, "no stream");
  EXPECT_EQ(default_stream(Device::cpu), s0);
}

// A ThreadLocalStream is a different stream on each thread that names it; clear_streams makes the
// calling thread forget its own ones.
TEST(Stream, ThreadLocalStreams) {
  const ThreadLocalStream tls = new_thread_local_stream(Device::cpu);
  const Stream mine = stream_from_thread_local_stream(tls);
  EXPECT_NE(mine, Stream(tls));
  EXPECT_EQ(stream_from_thread_local_stream(tls), mine);
  EXPECT_EQ(exp(ones({2}), tls).stream(), mine);
  Stream theirs = mine;
  int their_sum = 0;
  std::thread([&] {
    theirs = stream_from_thread_local_stream(tls);
    array s = sum(arange(10, tls), tls);
    EXPECT_EQ(s.stream(), theirs);
    their_sum = s.item<int>();
    clear_streams();
  }).join();
  EXPECT_NE(theirs, mine);
  EXPECT_EQ(their_sum, 45);
  EXPECT_EQ(sum(arange(10, tls)).item<int>(), 45);
  {
    StreamContext ctx(tls);
    EXPECT_EQ(default_stream(Device::cpu), mine);
  }
  synchronize(tls);
  clear_streams();
  EXPECT_NE(stream_from_thread_local_stream(tls), mine);
  EXPECT_THROW_MSG(stream_from_thread_local_stream(ThreadLocalStream(0, Device::cpu)), std::invalid_argument,
                   "not a ThreadLocalStream");
  const Stream any = new_thread_unsafe_stream(Device::cpu);
  EXPECT_EQ(exp(ones({2}), any).stream(), any);
}

// scheduler::enqueue runs a task on a stream's own thread: a task queued on s2 that waits for one
// queued later on s1 does not deadlock (MLX's "asynchronous launch").
TEST(Stream, SchedulerEnqueueRunsOnTheStreamsThread) {
  const Stream s1 = new_stream(Device::cpu), s2 = new_stream(Device::cpu);
  int x = 1;
  std::promise<void> p1, p2;
  std::shared_future<void> f1 = p1.get_future().share();
  std::future<void> f2 = p2.get_future();
  std::thread::id caller = std::this_thread::get_id(), ran_on;
  scheduler::enqueue(s2, [&] {
    f1.wait();
    x *= 5;
    ran_on = std::this_thread::get_id();
    p2.set_value();
  });
  scheduler::enqueue(s1, [&] {
    ++x;
    p1.set_value();
  });
  f2.wait();
  EXPECT_EQ(x, 10);
  EXPECT_NE(ran_on, caller);
  // In order on one stream.
  std::vector<int> order;
  for (int i = 0; i < 5; ++i) scheduler::enqueue(s1, [&order, i] { order.push_back(i); });
  synchronize(s1);
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_THROW_MSG(scheduler::enqueue(Stream(1 << 20, Device::cpu), [] {}), std::invalid_argument, "no stream");
}

TEST(AsyncEval, ReturnsAtOnceAndReadingWaits) {
  auto gate = std::make_shared<Gate>();
  array x = arange(6.0f, float32);
  array y = gated(x, gate) * 2.0f;
  async_eval(y);
  EXPECT_FALSE(y.is_evaluated());  // the gate is closed: the work cannot have finished
  // Building on the array being computed does not wait.
  array z = y + 1.0f;
  EXPECT_FALSE(y.is_evaluated());
  OpenLater opener(gate);
  EXPECT_EQ(z.to_vector<float>(), (std::vector<float>{1, 3, 5, 7, 9, 11}));  // waits for y
  opener.join();
  EXPECT_TRUE(y.is_evaluated());
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{0, 2, 4, 6, 8, 10}));
  async_eval(y);  // evaluated already: nothing to do
}

TEST(AsyncEval, ItemAndDataWait) {
  auto gate = std::make_shared<Gate>();
  array y = sum(gated(full({1000}, 0.5f), gate));
  async_eval(y);
  OpenLater opener(gate);
  EXPECT_EQ(y.item<float>(), 500.0f);
  opener.join();

  auto gate2 = std::make_shared<Gate>();
  array w = gated(full({3}, 2.0f), gate2);
  async_eval(w);
  OpenLater opener2(gate2);
  w.wait();
  EXPECT_EQ(w.data<float>()[2], 2.0f);
  opener2.join();
}

TEST(AsyncEval, StreamsRunConcurrently) {
  const Stream s1 = new_stream(Device::cpu), s2 = new_stream(Device::cpu);
  auto gate = std::make_shared<Gate>();
  array blocked = zeros({1}), free = zeros({1});
  {
    StreamContext c(s1);
    blocked = gated(ones({8}), gate) + 1.0f;
  }
  {
    StreamContext c(s2);
    free = sum(arange(100.0f, float32));
  }
  async_eval(blocked);
  async_eval(free);
  synchronize(s2);  // returns although s1's work is stuck behind the gate
  EXPECT_TRUE(free.is_evaluated());
  EXPECT_EQ(free.item<float>(), 4950.0f);
  EXPECT_FALSE(blocked.is_evaluated());
  OpenLater opener(gate);
  synchronize(s1);
  opener.join();
  EXPECT_TRUE(blocked.is_evaluated());
  EXPECT_EQ(blocked.to_vector<float>(), std::vector<float>(8, 2.0f));
}

TEST(AsyncEval, OneStreamRunsItsWorkInOrder) {
  const Stream s = new_stream(Device::cpu);
  StreamContext c(s);
  auto first = std::make_shared<Gate>(), second = std::make_shared<Gate>();
  array a = gated(full({2}, 1.0f), first), b = gated(full({2}, 2.0f), second);
  async_eval(a);
  async_eval(b);
  second->open();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(b.is_evaluated());  // queued behind a, whatever the timing
  first->open();
  synchronize(s);
  EXPECT_TRUE(a.is_evaluated());
  EXPECT_TRUE(b.is_evaluated());
  EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{2, 2}));
}

TEST(AsyncEval, AcrossStreams) {
  // x on s1 feeds y on s2, which feeds z on s1 again: three pieces, each waiting on the one before.
  const Stream s1 = new_stream(Device::cpu), s2 = new_stream(Device::cpu);
  auto gate = std::make_shared<Gate>();
  array x = zeros({1}), y = zeros({1}), z = zeros({1});
  {
    StreamContext c(s1);
    x = gated(arange(4.0f, float32), gate) + 1.0f;
  }
  {
    StreamContext c(s2);
    y = x * 10.0f;
  }
  {
    StreamContext c(s1);
    z = y - x;
  }
  async_eval(z);
  EXPECT_FALSE(z.is_evaluated());
  EXPECT_FALSE(y.is_evaluated());
  OpenLater opener(gate);
  EXPECT_EQ(z.to_vector<float>(), (std::vector<float>{9, 18, 27, 36}));
  opener.join();
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{10, 20, 30, 40}));
}

TEST(AsyncEval, ChainsOnWorkStillRunning) {
  // A second async_eval on top of the first's arrays queues behind it instead of waiting.
  auto gate = std::make_shared<Gate>();
  array a = gated(full({3}, 1.0f), gate);
  async_eval(a);
  array b = a * 3.0f;
  async_eval(b);
  EXPECT_FALSE(b.is_evaluated());
  OpenLater opener(gate);
  EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{3, 3, 3}));
  opener.join();
}

TEST(AsyncEval, ErrorsSurfaceWhereTheArraysAreRead) {
  auto gate = std::make_shared<Gate>();
  array y = gated(ones({2}), gate, /*fail=*/true) + 1.0f;
  async_eval(y);
  array z = y * 2.0f;  // built on the failing work
  async_eval(z);
  gate->open();
  EXPECT_THROW_MSG(y.to_vector<float>(), std::runtime_error, "failed on purpose");
  EXPECT_THROW_MSG(z.to_vector<float>(), std::runtime_error, "failed on purpose");
  EXPECT_THROW_MSG(eval(z + 1.0f), std::runtime_error, "failed on purpose");
  synchronize();  // the stream itself goes on
  array ok = ones({2}) * 5.0f;
  async_eval(ok);
  EXPECT_EQ(ok.to_vector<float>(), (std::vector<float>{5, 5}));
}

TEST(AsyncEval, InsideATransformIsEval) {
  auto f = [](const std::vector<array>& xs) {
    array y = exp(xs[0]);
    async_eval(y);
    return std::vector<array>{sum(y * xs[0])};
  };
  array x = array({0.5f, -1.0f});
  auto [outs, grads] = vjp(f, {x}, {array(1.0f)});
  // d/dx sum(x e^x) = (1 + x) e^x
  expect_array(grads[0], {2}, {1.5 * std::exp(0.5), 0.0}, 1e-6);
}

// A training loop that starts step n+1's graph while step n runs gives the losses of the plain loop.
TEST(AsyncEval, PipelinedTrainingMatchesSynchronous) {
  struct Mlp : nn::Module {
    nn::Linear l1{8, 16}, l2{16, 1};
    Mlp() {
      register_module("l1", l1);
      register_module("l2", l2);
    }
    array operator()(const array& x) const { return l2(nn::relu(l1(x))); }
  };
  auto train = [](bool pipelined) {
    random::seed(3);
    Mlp model;
    optim::AdamW opt(1e-2);
    array xb = random::normal({32, 8});
    array yb = sum(xb, std::vector<int>{1}, true);
    auto step = nn::value_and_grad(model, [&](const array& x, const array& y) {
      return nn::losses::mse_loss(model(x), y);
    });
    std::vector<array> losses;
    for (int i = 0; i < 20; ++i) {
      auto [loss, grads] = step(xb, yb);
      opt.update(model, grads);
      losses.push_back(loss);
      if (pipelined) {
        async_eval(loss, model.parameters(), opt.state());
      } else {
        eval(loss, model.parameters(), opt.state());
      }
    }
    std::vector<float> out;
    for (auto& l : losses) out.push_back(l.item<float>());
    EXPECT_LT(out.back(), 0.5f * out.front());
    return out;
  };
  EXPECT_EQ(train(true), train(false));
}

}  // namespace
}  // namespace loom
