// How eval schedules asynchronous (communication) nodes: started as soon as their inputs are done,
// consumers deferred until nothing else can run, the order fixed by the graph's structure alone.
#include <stdexcept>
#include <string>

#include "../test_utils.h"
#include "loom/core/primitive.h"

using namespace loom;
using loom::testing::expect_array;

namespace {

std::vector<std::string> events;

// A compute node: passes its first input through and logs its name.
class Step : public UnaryPrimitive {
 public:
  explicit Step(std::string n) : n_(std::move(n)) {}
  void eval_cpu(const std::vector<array>& in, array& out) override {
    events.push_back(n_);
    out.copy_shared_buffer(in[0]);
  }
  const char* name() const override { return "Step"; }

 private:
  std::string n_;
};

// A stand-in for a collective: logs when it starts, when eval waits for it, or when it runs inline.
class FakeComm : public UnaryPrimitive {
 public:
  // `done_at_start`: runs inline in eval_async (as a collective does on a rank that chose to).
  explicit FakeComm(std::string n, bool fail = false, bool done_at_start = false)
      : n_(std::move(n)), fail_(fail), done_at_start_(done_at_start) {}
  void eval_cpu(const std::vector<array>& in, array& out) override {
    events.push_back("inline " + n_);
    out.copy_shared_buffer(in[0]);
  }
  bool is_async() const override { return true; }
  std::unique_ptr<AsyncWork> eval_async(const std::vector<array>& in, std::vector<array>& outs) override {
    events.push_back("start " + n_);
    outs[0].copy_shared_buffer(in[0]);
    if (done_at_start_) return nullptr;
    return std::make_unique<Work>(n_, fail_);
  }
  const char* name() const override { return "FakeComm"; }

 private:
  // The run's own state, owned by eval until it waits.
  struct Work : AsyncWork {
    Work(std::string n, bool fail) : n(std::move(n)), fail(fail) {}
    void wait() override {
      events.push_back("wait " + n);
      if (fail) throw std::runtime_error("[FakeComm] " + n + " failed");
    }
    std::string n;
    bool fail;
  };
  std::string n_;
  bool fail_, done_at_start_;
};

array step(const std::string& n, const std::vector<array>& ins) {
  return array(ins[0].shape(), ins[0].dtype(), std::make_shared<Step>(n), ins);
}
array comm(const std::string& n, const array& x, bool fail = false, bool done_at_start = false) {
  return array(x.shape(), x.dtype(), std::make_shared<FakeComm>(n, fail, done_at_start), {x});
}

}  // namespace

TEST(Schedule, CommunicationStartsEarlyAndItsConsumersRunLast) {
  // The shape of a backward pass: gradients of the last layer are ready first; their all_sum should
  // travel while the earlier layers' backward runs, and the update that reads it comes at the end.
  events.clear();
  array x({1.0f, 2.0f});
  array g2 = step("grad2", {x});
  array s2 = comm("sum2", g2);
  array u2 = step("update2", {s2});
  array g1 = step("grad1", {step("back1", {g2})});
  array s1 = comm("sum1", g1);
  array u1 = step("update1", {s1});
  array other = step("other", {x});
  eval({u1, u2, other});
  std::vector<std::string> want = {"grad2",  "start sum2", "back1", "grad1",       "start sum1",
                                   "other",  "wait sum1",  "update1", "wait sum2", "update2"};
  EXPECT_EQ(events, want);
  expect_array(u2, {2}, {1, 2});
}

TEST(Schedule, OrderDependsOnStructureOnly) {
  // Independent collectives start in tape order however the outputs are listed after the first.
  auto run = [](bool swap) {
    events.clear();
    array x({1.0f});
    std::vector<array> outs;
    for (int i = 0; i < 4; ++i) outs.push_back(step("use" + std::to_string(i), {comm("c" + std::to_string(i), x)}));
    eval(outs);
    return events;
  };
  auto a = run(false);
  EXPECT_EQ(a, run(false));
  std::vector<std::string> starts;
  for (auto& e : a) {
    if (e.rfind("start", 0) == 0) starts.push_back(e);
  }
  EXPECT_EQ(starts, (std::vector<std::string>{"start c0", "start c1", "start c2", "start c3"}));
  // All four are in flight before the first consumer waits.
  EXPECT_EQ(a[4], "wait c0");
}

TEST(Schedule, ALoneCollectiveRunsInlineWithNothingToOverlap) {
  events.clear();
  array y = comm("only", array({3.0f}));
  eval(y);
  EXPECT_EQ(events, (std::vector<std::string>{"inline only"}));
  EXPECT_FLOAT_EQ(y.item<float>(), 3.0f);
}

TEST(Schedule, AFailedCollectiveThrowsFromEvalAfterTheOthersFinish) {
  events.clear();
  array x({1.0f});
  array bad = step("use bad", {comm("bad", x, /*fail=*/true)});
  array good = step("use good", {comm("good", x)});
  EXPECT_THROW_MSG(eval({bad, good}), std::runtime_error, "[FakeComm] bad failed");
  // The other started collective was waited for before eval unwound.
  EXPECT_NE(std::find(events.begin(), events.end(), "wait good"), events.end());
}

TEST(Schedule, AReaderThatFeedsNothingRunsAsSoonAsAnInlineCollectiveIsDone) {
  // A collective that finished as it started (a rank running collectives inline): its reader that
  // nothing else reads runs in tape order, next to it; a reader that feeds more of the graph still
  // waits until nothing else can run, so no collective can start at another point than on a rank
  // whose collectives run on the communication thread.
  events.clear();
  array x({1.0f, 2.0f});
  array g2 = step("grad2", {x});
  array leaf = step("leaf2", {comm("sum2", g2, false, true)});
  array g1 = step("grad1", {step("back1", {g2})});
  array u1 = step("update1", {comm("sum1", g1, false, true)});
  array last = step("last", {u1});
  array other = step("other", {x});
  eval({leaf, last, other});
  std::vector<std::string> want = {"grad2", "start sum2", "leaf2",   "back1", "grad1",
                                   "start sum1", "other", "update1", "last"};
  EXPECT_EQ(events, want);
  expect_array(leaf, {2}, {1, 2});
  expect_array(last, {2}, {1, 2});
}
