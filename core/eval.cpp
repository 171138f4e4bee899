#include "loom/core/eval.h"

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <map>
#include <queue>
#include <sstream>
#include <stdexcept>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "loom/core/allocator.h"
#include "loom/core/copy.h"
#include "loom/core/fusion.h"
#include "loom/core/primitive.h"
#include "loom/core/profile.h"
#include "loom/core/program.h"

namespace loom {

namespace {

// (has_primitive first: it waits for an array an async_eval is computing, which is then evaluated.)
bool needs_eval(const array& a) { return a.has_primitive() && !a.is_evaluated(); }

bool visited_event(const std::vector<std::shared_ptr<detail::Event>>& seen, const std::shared_ptr<detail::Event>& e) {
  for (const auto& x : seen) {
    if (x == e) return true;
  }
  return false;
}

// Post-order depth-first walk with an explicit stack, visiting inputs in their listed order. One
// entry per node (a multi-output primitive runs once).
// `index` maps each node to its tape position.
using Index = std::unordered_map<const detail::Node*, int>;
// With `pending`, arrays an earlier async_eval is still computing are not waited for: they are leaves,
// and their events are collected (once each) for the new work to wait on.
std::vector<array> build_tape(const std::vector<array>& outputs, Index& index,
                              std::vector<std::shared_ptr<detail::Event>>* pending = nullptr) {
  std::vector<array> tape;
  auto leaf = [&](const array& a) {
    if (!pending || !a.event() || a.event()->done()) return false;
    if (visited_event(*pending, a.event())) return true;
    pending->push_back(a.event());
    return true;
  };
  Index& visited = index;
  struct Frame {
    array a;
    size_t next;
  };
  std::vector<Frame> stack;
  for (const auto& out : outputs) {
    if (leaf(out) || !needs_eval(out) || !visited.try_emplace(out.node_id(), -1).second) continue;
    stack.push_back({out, 0});
    while (!stack.empty()) {
      Frame& f = stack.back();
      const auto& ins = f.a.inputs();
      if (f.next < ins.size()) {
        const array& in = ins[f.next++];
        if (!leaf(in) && needs_eval(in) && visited.try_emplace(in.node_id(), -1).second) stack.push_back({in, 0});
      } else {
        visited[f.a.node_id()] = static_cast<int>(tape.size());
        tape.push_back(std::move(f.a));
        stack.pop_back();
      }
    }
  }
  return tape;
}

// A kept graph's run (core/program.h). Its tape keeps every node and its graph: nothing is detached,
// tape entries are read, not taken, and each node's buffer goes (or passes to a reader) once the last
// of its readers has run, as it would when eval dropped its last handle.
struct ProgramRun {
  const Index* index = nullptr;                       // the program's tape positions
  const std::vector<std::vector<int>>* reads = nullptr;  // by position: the nodes it reads, once each
  std::vector<int>* remaining = nullptr;             // by position: readers yet to run
  const std::vector<char>* keep = nullptr;           // by position: an output, whose buffer stays
  const std::vector<array>* tape = nullptr;
  std::vector<std::vector<array>>* outs = nullptr;   // by position: every output of the node
  const std::vector<std::vector<uint8_t>>* kept_in = nullptr;  // by position: kept() of each input
  // Entry i (a node, or a fusion group's root) has run: the nodes it was the last to read let go.
  void done(int i) const {
    for (int j : (*reads)[i]) {
      if (--(*remaining)[j] != 0 || (*keep)[j]) continue;
      for (auto& o : (*outs)[j]) o.reset_data();
    }
  }
  // The program holds each output of its nodes once (outs) and each tape entry once more (tape),
  // where eval would hold none by then.
  long kept(const array& x) const {
    auto it = index->find(x.node_id());
    if (it == index->end()) return 0;
    return (*tape)[it->second].id() == x.id() ? 2 : 1;
  }
};
// The run in progress on this thread: set by Program::run, cleared by every eval (a kernel may call
// eval on arrays of its own, which are no program's).
thread_local const ProgramRun* program_run = nullptr;
struct SetProgramRun {
  const ProgramRun* saved;
  explicit SetProgramRun(const ProgramRun* r) : saved(program_run) { program_run = r; }
  ~SetProgramRun() { program_run = saved; }
  SetProgramRun(const SetProgramRun&) = delete;
  SetProgramRun& operator=(const SetProgramRun&) = delete;
};
// A tape entry to run: a program's stays in its tape; eval's is taken (its consumers' inputs are then
// the last holders of the node, which the buffer plan counts on).
array take_entry(std::vector<array>& tape, int i) { return program_run ? tape[i] : std::move(tape[i]); }
long program_kept(const array& x) { return program_run->kept(x); }
void entry_done(int i) {
  if (program_run) program_run->done(i);
}

// Marks a node's outputs evaluated and, outside transforms and programs, drops their graph.
void finish(std::vector<array>& outs) {
  for (auto& o : outs) {
    o.set_evaluated();
    if (!program_run && !o.is_tracer()) o.detach();
  }
}

bool check_plan = [] {
  const char* v = std::getenv("LOOM_CHECK_BUFFER_PLAN");
  return v && std::string(v) == "1";
}();

// Buffer plan, donation: each output not yet placed takes the buffer of the first input its primitive
// names (Primitive::donors) that fits it and that nothing reads after this node. A node about to run
// no longer sits in the tape (run takes the tape's handle), so an input read k times by it is held
// exactly k times when it is read by nothing else.
// `kept_in`: in a program's run, ProgramRun::kept of each input.
void donate(const array& node, std::vector<array>& outs, const uint8_t* kept_in = nullptr) {
  const std::vector<array>& inputs = node.inputs();
  for (size_t o = 0; o < outs.size(); ++o) {
    if (outs[o].is_placed()) continue;
    uint64_t mask = node.primitive().donors(inputs, static_cast<int>(o));
    for (size_t k = 0; mask != 0; ++k, mask >>= 1) {
      if (!(mask & 1)) continue;
      // One handle is this slot's (the common case, decided without a scan); more may all be this
      // node's slots (x * x).
      long refs = 1;
      const long kept = kept_in ? kept_in[k] : 0;
      if (!inputs[k].held_only_by(1 + kept)) {
        refs = 0;
        for (const auto& other : inputs) refs += other.id() == inputs[k].id();
      }
      if (outs[o].take_buffer(inputs[k], refs + kept)) break;
    }
  }
}

// With the plan check on, every output that eval gave a buffer (placed in its consumer's, or donated by
// an input) must be written there: a kernel that allocates its own instead still gives right values
// (a consumer copies), but every step pays a copy and an allocation that nothing else would reveal.
struct PlanCheck {
  std::vector<const void*> planned;  // per output: the buffer eval gave it, or null
  explicit PlanCheck(const std::vector<array>& outs) {
    if (!check_plan) return;
    for (const auto& o : outs) planned.push_back(o.is_placed() ? o.raw_data() : nullptr);
  }
  void verify(const array& node, const std::vector<array>& outs) const {
    for (size_t o = 0; o < planned.size(); ++o) {
      if (!planned[o] || outs[o].raw_data() == planned[o]) continue;
      std::string how = "placed in its consumer's buffer";
      for (size_t k = 0; k < node.inputs().size(); ++k) {
        if (node.inputs()[k].raw_data() == planned[o]) how = "given the buffer of its input " + std::to_string(k);
      }
      const std::string which = outs.size() > 1 ? " output " + std::to_string(o) : "";
      throw std::logic_error(std::string("[eval] buffer plan not honoured: ") + node.primitive().name() + which +
                             " " + detail::shape_str(outs[o].shape()) + " was " + how +
                             ", but its kernel wrote into a buffer of its own");
    }
  }
};

// Runs f, a node's kernel; an allocation that fails in it is rethrown as out_of_memory naming the
// node's primitive and its results' shapes, dtypes and sizes (a bare std::bad_alloc says none).
template <typename F>
void naming_failed_allocations(const array& node, const std::vector<array>& outs, F f) {
  auto fail = [&](const char* what) {
    std::string results;
    for (const auto& o : outs) {
      results += (results.empty() ? "" : ", ") + to_string(o.dtype()) + " " + detail::shape_str(o.shape()) + " (" +
                 std::to_string(o.nbytes()) + " bytes)";
    }
    throw out_of_memory(std::string("[eval] ") + node.primitive().name() + " could not allocate memory for " +
                        results + ": " + what);
  };
  try {
    f();
  } catch (const out_of_memory& e) {
    fail(e.what());
  } catch (const std::bad_alloc& e) {
    fail(e.what());
  }
}

// A node whose results are all empty computes nothing: they get empty buffers and its kernel does not
// run, so no kernel has to handle empty operands, whose layouts can be odd (a 0-element broadcast of a
// scalar still holds its one element). Collectives still run: their peers expect them.
bool skip_empty(const array& a, const std::vector<array>& outs) {
  for (const auto& o : outs) {
    if (o.size() != 0) return false;
  }
  return !a.primitive().is_async();
}
// (Fusion groups never hold empty nodes: they fuse from kFuseFrom elements.)
void give_empty_buffers(std::vector<array>& outs) {
  for (auto& o : outs) o.alloc();  // keeps a buffer eval placed it in
  finish(outs);
}

// The profiler's view of one node or fused group (core/profile.h): while recording is off, one
// relaxed atomic load and nothing else.
class Probe {
 public:
  explicit Probe(const char* category) : on_(profile::detail::recording()), category_(category) {}
  ~Probe() {
    if (on_) profile::detail::set_running_node(nullptr);
  }
  Probe(const Probe&) = delete;
  Probe& operator=(const Probe&) = delete;
  bool on() const { return on_; }
  // Names the node (so that the thread pool's workers name their part of it) and starts its clock.
  void start(std::string kind, std::string printed = {}) {
    live_ = std::make_unique<Live>();
    live_->kind = std::move(kind);
    live_->printed = std::move(printed);
    profile::detail::set_running_node(&live_->kind);
    live_->before = detail::alloc_counters(true);
    live_->begin = profile::detail::now_ns();
  }
  static uint64_t stored_bytes(const array& a) { return a.data_size() * a.itemsize(); }
  // Bytes of arrays read, each buffer once however many times it is an input (x * x reads x once).
  struct Reads {
    std::vector<const void*> seen;
    uint64_t bytes = 0;
    void add(const array& a) {
      const void* p = a.raw_data();
      if (std::find(seen.begin(), seen.end(), p) != seen.end()) return;
      seen.push_back(p);
      bytes += stored_bytes(a);
    }
  };
  // The kind of node, as the summary groups them: the primitive's name, with the variant its print()
  // puts first in parentheses when that is a word ("Reduce(sum)", "Convolution(forward)"), not a
  // parameter's value ("AdamUpdate(lr=0.001, step=3)" is an AdamUpdate). The whole print goes
  // into the trace.
  static std::string name_of(const Primitive& p, std::string* printed = nullptr) {
    thread_local std::ostringstream os;
    os.str("");
    p.print(os);
    std::string s = os.str();
    const size_t open = s.find('('), close = s.find_first_of(",)", open);
    std::string kind = s;
    if (open != std::string::npos) {
      kind = s.substr(0, open);
      if (close != std::string::npos && s.find('=', open) > close) kind = s.substr(0, close) + ")";
    }
    if (printed && kind != s) *printed = std::move(s);
    return kind;
  }
  void record(uint64_t read, uint64_t written, double flops, const array& out) {
    profile::detail::Span s;
    s.end_ns = profile::detail::now_ns();
    s.begin_ns = live_->begin;
    s.name = live_->kind;  // with the backend a kernel noted (profile::detail::note_backend)
    s.category = category_;
    s.bytes_read = read;
    s.bytes_written = written;
    s.flops = flops;
    const detail::AllocCounters after = detail::alloc_counters(false);
    s.allocations = after.allocations - live_->before.allocations;
    s.allocated_bytes = after.allocated_bytes - live_->before.allocated_bytes;
    s.peak_bytes = after.window_peak;
    s.active_bytes = after.active;
    thread_local std::ostringstream os;
    os.str("");
    os << "\"out\":\"" << out.dtype() << " (";
    for (size_t d = 0; d < out.ndim(); ++d) os << (d ? "," : "") << out.shape()[d];
    os << ")\"";
    s.args = os.str();
    s.detail = live_->printed;
    profile::detail::record(std::move(s));
  }

 private:
  // What a recording node needs, apart so that a probe that is off constructs nothing but a flag.
  struct Live {
    detail::AllocCounters before;
    int64_t begin = 0;
    std::string kind, printed;
  };
  bool on_;
  const char* category_;
  std::unique_ptr<Live> live_;
};

// Runs node `a` (taking the tape's handle: its consumers' inputs are then the last holders); in a
// program's run, entry i of its tape.
void run(array a, int i = -1) {
  std::vector<array> own;
  if (i < 0) own = a.outputs();
  std::vector<array>& outs = i >= 0 ? (*program_run->outs)[i] : own;
  if (skip_empty(a, outs)) return give_empty_buffers(outs);
  donate(a, outs, i >= 0 ? (*program_run->kept_in)[i].data() : nullptr);
  const PlanCheck check(outs);
  Probe probe("op");
  if (probe.on()) {
    std::string printed;
    std::string kind = Probe::name_of(a.primitive(), &printed);
    probe.start(std::move(kind), std::move(printed));
  }
  naming_failed_allocations(a, outs, [&] { a.primitive().eval_cpu(a.inputs(), outs); });
  if (probe.on()) {
    Probe::Reads read;
    uint64_t written = 0;
    // A view (a transpose, a reshape that could keep the buffer) moves no bytes; a kernel that
    // wrote into a donated input's buffer did.
    bool view = false;
    if (a.primitive().makes_view()) {
      for (const auto& in : a.inputs()) view = view || in.data_shared_ptr() == outs[0].data_shared_ptr();
    }
    if (!view) {
      for (const auto& in : a.inputs()) read.add(in);
      for (const auto& o : outs) written += Probe::stored_bytes(o);
    }
    probe.record(read.bytes, written, a.primitive().flops(a.inputs(), outs), outs[0]);
  }
  check.verify(a, outs);
  finish(outs);
}

// Placement: producers that write straight into a run of their consumer's output (a bucket of
// gradients built by concatenate, say) instead of into a buffer of their own that the consumer would
// copy. By tape position: the consumer whose buffer holds the node, and the node's element offset
// there; empty when nothing is placed.
struct Placement {
  int consumer = -1;
  int64_t offset = 0;
};
using Placements = std::vector<Placement>;

// A node qualifies when it has one output and the tape and its consumer's input list are its only
// holders (no user handle, no eval output, no second consumer). Through a node that forwards its
// input's buffer (reshape), the producer behind it is placed instead when it qualifies too.
Placements plan_placement(const std::vector<array>& tape, const Index& index) {
  Placements placed;
  std::vector<int64_t> offsets;
  auto qualifies = [&](const array& x, const array& consumer) -> int {
    // Held by the tape and by one input slot of its consumer, and by nothing else.
    if (x.is_evaluated() || x.dtype() != consumer.dtype() || !x.held_only_by(2) || x.is_tracer()) return -1;
    auto it = index.find(x.node_id());
    if (it == index.end() || x.node_id()->outputs.size() != 1) return -1;
    return it->second;
  };
  for (int c = 0; c < static_cast<int>(tape.size()); ++c) {
    const array& out = tape[c];
    if (!out.primitive().input_offsets(out.inputs(), out, offsets)) continue;
    for (size_t k = 0; k < offsets.size(); ++k) {
      int p = qualifies(out.inputs()[k], out);
      if (p < 0) continue;
      while (tape[p].primitive().forwards_buffer()) {
        int q = qualifies(tape[p].inputs()[0], tape[p]);
        if (q < 0) break;
        p = q;
      }
      // A view (or a node that forwards a buffer it cannot pass on) stays a view: it never writes where
      // it is placed, and placing it would only move the consumer's copy into it.
      if (tape[p].primitive().makes_view()) continue;
      if (placed.empty()) placed.resize(tape.size());
      placed[p] = {c, offsets[k]};
    }
  }
  return placed;
}

// Gives tape entry i its run of its consumer's buffer, allocating (or placing) the consumer first.
void place(std::vector<array>& tape, const Placements& placed, int i) {
  array& dst = tape[placed[i].consumer];
  if (!dst.is_placed()) {
    if (placed[placed[i].consumer].consumer >= 0) {
      place(tape, placed, placed[i].consumer);
    } else {
      dst.alloc();
    }
  }
  array& a = tape[i];
  a.copy_shared_buffer(dst, a.strides(), array::layout_flags(a.shape(), a.strides()), a.size(), placed[i].offset);
}

// Runs tape entry i: as part of its fusion group (internal members run with their root), or alone.
void compute(std::vector<array>& tape, const detail::FusionPlan& plan, const Placements& placed, int i,
             const Index& index) {
  if (!placed.empty() && placed[i].consumer >= 0) place(tape, placed, i);
  if (!plan.internal.empty() && plan.internal[i]) return;
  if (!plan.internal.empty() && !plan.groups[i].empty()) {
    const array root = tape[plan.groups[i].back()];
    Probe probe("fused");
    if (!probe.on()) {
      naming_failed_allocations(root, {root}, [&] { detail::run_fused(tape, plan, i, index, program_run ? &program_kept : nullptr); });
      return;
    }
    // One entry for the group: its members' names in tape order, the inputs it reads from outside,
    // the result it writes; the members release their tape entries as it runs, so read them first.
    std::string name = "Fused(";
    Probe::Reads read;
    double flops = 0;
    const std::vector<int>& members = plan.groups[i];
    for (size_t m = 0; m < members.size(); ++m) {
      const array& x = tape[members[m]];
      name += (m ? "," : "") + Probe::name_of(x.primitive());
      flops += std::max(0.0, x.primitive().flops(x.inputs(), {x}));
      for (const auto& in : x.inputs()) {
        auto it = index.find(in.node_id());
        const bool inside = it != index.end() && std::find(members.begin(), members.end(), it->second) != members.end();
        if (!inside) read.add(in);
      }
    }
    name += ")";
    probe.start(std::move(name));
    naming_failed_allocations(root, {root}, [&] { detail::run_fused(tape, plan, i, index, program_run ? &program_kept : nullptr); });
    probe.record(read.bytes, Probe::stored_bytes(root), flops, root);
  } else if (!tape[i].is_evaluated()) {
    run(take_entry(tape, i), program_run ? i : -1);
  }
}

// A graph with communication runs as a list schedule over the tape. An async node (a collective)
// starts as soon as its inputs are done (of several ready at once, the first by start_key, then by
// tape position); a node that reads an async result waits until nothing else can run; everything
// else keeps tape order. Every choice depends on the graph only, never on timing, so all ranks start
// their collectives in the same order.
void eval_scheduled(std::vector<array>& tape, const Index& index) {
  const int n = static_cast<int>(tape.size());

  std::vector<int> missing(n, 0);  // inputs (with multiplicity) not yet produced
  std::vector<std::vector<int>> consumers(n);
  std::vector<char> async(n, 0), reads_async(n, 0);
  std::vector<int> unfinished(n, 0);  // async inputs (with multiplicity) whose results are not in yet
  for (int i = 0; i < n; ++i) {
    async[i] = tape[i].primitive().is_async();
    for (const auto& in : tape[i].inputs()) {
      auto it = index.find(in.node_id());
      if (in.is_evaluated() || it == index.end()) continue;
      consumers[it->second].push_back(i);
      ++missing[i];
      reads_async[i] |= async[it->second];  // inputs come earlier in the tape
      unfinished[i] += async[it->second];
    }
  }

  // Readers of communication results stay out of fusion (they wait first); the rest fuses as usual.
  const detail::FusionPlan plan = detail::plan_fusion(tape, index, reads_async);
  const Placements placed = plan_placement(tape, index);

  using MinHeap = std::priority_queue<int, std::vector<int>, std::greater<int>>;
  MinHeap compute_q, deferred_q;
  using Keyed = std::pair<uint64_t, int>;  // (start_key, tape position)
  std::priority_queue<Keyed, std::vector<Keyed>, std::greater<Keyed>> start_q;
  // A reader of async results waits until nothing else can run, unless its results are all in (the
  // collective ran inline, as a process may choose to) and nothing in the graph reads it: running it
  // then releases nothing, so it cannot change when anything else runs or starts, and it runs in tape
  // order, right after its collective while the result is still in cache (all_sum(g) * s, say).
  auto push = [&](int i) {
    if (async[i]) return start_q.push({tape[i].primitive().start_key(), i});
    if (reads_async[i] && (unfinished[i] > 0 || !consumers[i].empty())) return deferred_q.push(i);
    compute_q.push(i);
  };
  for (int i = 0; i < n; ++i) {
    if (missing[i] == 0) push(i);
  }
  auto release = [&](int i) {
    for (int c : consumers[i]) {
      if (--missing[c] == 0) push(c);
    }
  };

  struct Pending {
    array node;
    std::vector<array> outs;
    std::unique_ptr<AsyncWork> work;  // null when the work finished as it started
  };
  std::map<int, Pending> pending;  // started async nodes by tape position
  auto wait = [&](int i) {
    auto it = pending.find(i);
    if (it == pending.end()) return;
    if (auto work = std::move(it->second.work)) work->wait();
    finish(it->second.outs);
    pending.erase(it);
    entry_done(i);
  };

  try {
    while (!start_q.empty() || !compute_q.empty() || !deferred_q.empty()) {
      if (!start_q.empty()) {
        int i = start_q.top().second;
        start_q.pop();
        if (pending.empty() && start_q.empty() && compute_q.empty() && deferred_q.empty()) {
          run(take_entry(tape, i), program_run ? i : -1);  // nothing to overlap with: the blocking form is fastest
          entry_done(i);
          for (int c : consumers[i]) --unfinished[c];
        } else {
          Pending p{take_entry(tape, i), {}, nullptr};
          p.outs = p.node.outputs();
          donate(p.node, p.outs);
          const PlanCheck check(p.outs);
          p.work = p.node.primitive().eval_async(p.node.inputs(), p.outs);
          check.verify(p.node, p.outs);  // the buffers are chosen when the work starts
          if (p.work) {
            pending.emplace(i, std::move(p));
          } else {  // done as it started
            finish(p.outs);
            entry_done(i);
            for (int c : consumers[i]) --unfinished[c];
          }
        }
        release(i);
        continue;
      }
      // Collectives done in the background release their inputs now, not when a reader waits (which
      // is when nothing else can run): a reduce-scatter's whole gradient goes once it is sent.
      for (auto it = pending.begin(); it != pending.end();) {
        if (it->second.work && it->second.work->ready()) {
          it->second.work->wait();
          finish(it->second.outs);
          entry_done(it->first);
          it = pending.erase(it);
        } else {
          ++it;
        }
      }
      MinHeap& q = compute_q.empty() ? deferred_q : compute_q;
      int i = q.top();
      q.pop();
      if (reads_async[i]) {
        for (const auto& in : tape[i].inputs()) {
          auto it = index.find(in.node_id());
          if (it != index.end()) wait(it->second);
        }
      }
      compute(tape, plan, placed, i, index);
      entry_done(i);
      release(i);
    }
    while (!pending.empty()) wait(pending.begin()->first);
  } catch (...) {
    // Nothing may unwind while communication still uses the buffers.
    for (auto& [i, p] : pending) {
      try {
        if (p.work) p.work->wait();
      } catch (...) {
      }
    }
    throw;
  }
}

}  // namespace

namespace {
// Runs a tape (every entry's unevaluated inputs come earlier in it, or are evaluated).
void run_tape(std::vector<array>& tape, const Index& index) {
  if (tape.size() == 1) return run(std::move(tape[0]));  // nothing to order, fuse or overlap
  bool elementwise = false;
  for (const auto& a : tape) {
    if (a.primitive().is_async()) return eval_scheduled(tape, index);
    elementwise |= a.primitive().is_elementwise() && a.size() >= detail::kFuseFrom;
  }
  detail::FusionPlan plan;  // empty: every node runs alone
  if (elementwise) plan = detail::plan_fusion(tape, index, {});
  const Placements placed = plan_placement(tape, index);
  for (int i = 0; i < static_cast<int>(tape.size()); ++i) compute(tape, plan, placed, i, index);
}
}  // namespace

namespace {
void eval_graph(std::vector<array>& outputs) {
  const SetProgramRun none(nullptr);  // a kernel's own eval, inside a program's run, is not the program's
  // One node over evaluated inputs (a step of an eager-style loop): nothing to order, fuse or
  // overlap, and no index to build (its allocations were a third of such an op's cost).
  if (outputs.size() == 1 && needs_eval(outputs[0])) {
    bool ready = true;
    for (const auto& in : outputs[0].inputs()) ready = ready && !needs_eval(in);
    if (ready) return run(std::move(outputs[0]));
  }
  Index index;
  std::vector<array> tape = build_tape(outputs, index);
  if (!tape.empty()) run_tape(tape, index);
}
}  // namespace

void eval(std::vector<array> outputs) {
  if (!profile::detail::recording()) return eval_graph(outputs);
  // The profiler's span of the whole call, enclosing its nodes on this thread.
  profile::detail::Span span;
  span.name = "eval";
  span.category = "eval";
  span.begin_ns = profile::detail::now_ns();
  struct Record {
    profile::detail::Span& span;
    ~Record() {
      span.end_ns = profile::detail::now_ns();
      profile::detail::record(std::move(span));
    }
  } record{span};
  eval_graph(outputs);
}

// The tape is cut where the stream changes into segments, each run by its stream's thread as one task
// (fused, placed and scheduled as eval would) after the tasks it reads from. Tasks of one stream run
// in order; a segment reads only from earlier ones, so tasks never wait on each other in a circle.
void async_eval(std::vector<array> outputs) {
  // Transforms keep their tracers' graphs by a count that lives on the calling thread; and eval runs
  // inside a stream's own work as it always did.
  if (detail::tracing_depth() > 0 || detail::current_event()) return eval(std::move(outputs));
  std::vector<std::shared_ptr<detail::Event>> earlier;  // of earlier async_evals this graph reads
  Index index;
  std::vector<array> tape = build_tape(outputs, index, &earlier);
  outputs.clear();
  if (tape.empty()) return;

  struct Segment {
    int stream = 0;
    std::vector<array> tape;
    Index index;
    std::shared_ptr<detail::Event> event = std::make_shared<detail::Event>();
    std::vector<std::shared_ptr<detail::Event>> after;  // events this segment waits on first
  };
  std::vector<Segment> segments;
  std::vector<int> segment_of(tape.size());
  // Everything is read here, before any array is marked (a marked array's graph belongs to its stream).
  std::vector<std::vector<array>> outs(tape.size());
  for (size_t i = 0; i < tape.size(); ++i) {
    const int stream = tape[i].primitive().stream().index;
    if (segments.empty() || segments.back().stream != stream) {
      segments.emplace_back();
      segments.back().stream = stream;
    }
    Segment& seg = segments.back();
    segment_of[i] = static_cast<int>(segments.size()) - 1;
    for (const auto& in : tape[i].inputs()) {
      if (in.event() && !in.event()->done()) {  // computed by an earlier async_eval
        if (!visited_event(seg.after, in.event())) seg.after.push_back(in.event());
        continue;
      }
      auto it = index.find(in.is_evaluated() ? nullptr : in.node_id());
      if (it == index.end() || it->second < 0) continue;
      const Segment& from = segments[segment_of[it->second]];
      if (&from != &seg && !visited_event(seg.after, from.event)) seg.after.push_back(from.event);
    }
    seg.index.emplace(tape[i].node_id(), static_cast<int>(seg.tape.size()));
    outs[i] = tape[i].outputs();
    seg.tape.push_back(tape[i]);
  }
  for (size_t i = 0; i < tape.size(); ++i) {
    for (auto& o : outs[i]) o.set_event(segments[segment_of[i]].event);
  }
  // Only the segments hold the graph's nodes from here on (the buffer plan counts handles).
  outs.clear();
  tape.clear();
  index.clear();
  for (auto& seg : segments) {
    auto work = std::make_shared<Segment>(std::move(seg));
    detail::enqueue(work->stream, work->event, [work] {
      for (const auto& e : work->after) e->wait();  // rethrows a failure it depends on
      std::vector<array> tape = std::move(work->tape);
      run_tape(tape, work->index);
    });
  }
}

// ---- Program (core/program.h) ----

struct detail::Program::Plan {
  Index index;
  bool scheduled = false;  // holds communication: runs as eval_scheduled, which plans per run
  detail::FusionPlan fusion;
  Placements placed;
  std::vector<std::vector<int>> reads;  // by position: the nodes an entry (or its fusion group) reads
  std::vector<int> readers, remaining;  // by position: how many entries read it; per run, yet to run
  std::vector<char> keep;               // by position: an output of the program
  std::vector<std::vector<uint8_t>> kept_in;  // by position: ProgramRun::kept of each input
  std::vector<std::vector<Shape>> planned;    // by position: the outputs' shapes the plans were made for
  std::vector<Shape> planned_inputs;          // the placeholders' shapes then
  bool reshaped = false;                      // the nodes hold other shapes (a shapeless run's)
  // The positions a planned run visits: all but the internal members of fusion groups, which their
  // root computes without giving them data (a chain of 1,000 adds is one entry, not 1,000).
  std::vector<int> units;
};

detail::Program::Program(std::vector<array> inputs, std::vector<array> outputs)
    : inputs_(std::move(inputs)), outputs_(std::move(outputs)), plan_(std::make_unique<Plan>()) {
  Plan& p = *plan_;
  // The placeholders are leaves of the tape: evaluated for as long as it is built.
  for (auto& x : inputs_) x.set_evaluated();
  tape_ = build_tape(outputs_, p.index);
  for (auto& x : inputs_) x.reset_data();
  const int n = static_cast<int>(tape_.size());
  // The leaves that are not placeholders are constants: held here too, so that no kernel is ever
  // given one's buffer to write in (the buffer plan gives only what nothing else holds).
  std::unordered_set<std::uintptr_t> held;
  for (const auto& x : inputs_) held.insert(x.id());
  for (const auto& a : tape_) {
    for (const auto& in : a.inputs()) {
      if (!p.index.count(in.node_id()) && held.insert(in.id()).second) constants_.push_back(in);
    }
  }
  for (const auto& o : outputs_) {
    if (!p.index.count(o.node_id()) && held.insert(o.id()).second) constants_.push_back(o);
  }
  // Every output of a multi-output node, held while the plans are made (as a reader's slot would).
  std::vector<std::vector<array>> siblings(n);
  for (int j = 0; j < n; ++j) {
    tape_[j].set_tracer(false);  // a transform that traced the function is done with its graph
    if (tape_[j].node_id()->outputs.size() > 1) siblings[j] = tape_[j].siblings();
    for (auto& s : siblings[j]) s.set_tracer(false);
  }
  // The plans eval would make, made once. The handles to the nodes are those eval's tape would hold:
  // one per node (the tape's), its readers' input slots, and the outputs list for the outputs.
  bool elementwise = false;
  for (const auto& a : tape_) {
    p.scheduled |= a.primitive().is_async();
    elementwise |= a.primitive().is_elementwise();
  }
  if (!p.scheduled) {
    // Planned once, fusion pays at any size: every elementwise chain runs as one group.
    if (elementwise) p.fusion = detail::plan_fusion(tape_, p.index, {}, 1);
    p.placed = plan_placement(tape_, p.index);
  }
  // Who reads what: an internal member of a fusion group reads as its group's root, which runs it.
  std::vector<int> unit(n);
  for (int j = 0; j < n; ++j) unit[j] = j;
  if (!p.fusion.internal.empty()) {
    for (int r = 0; r < n; ++r) {
      for (int m : p.fusion.groups[r]) unit[m] = r;
    }
  }
  p.reads.resize(n);
  p.readers.assign(n, 0);
  p.keep.assign(n, 0);
  for (const auto& o : outputs_) {
    auto it = p.index.find(o.node_id());
    if (it != p.index.end()) p.keep[it->second] = 1;
  }
  for (int i = 0; i < n; ++i) {
    for (const auto& in : tape_[i].inputs()) {
      auto it = p.index.find(in.node_id());
      if (it == p.index.end() || unit[it->second] == unit[i]) continue;  // a leaf, or inside the group
      std::vector<int>& r = p.reads[unit[i]];
      if (std::find(r.begin(), r.end(), it->second) == r.end()) {
        r.push_back(it->second);
        ++p.readers[it->second];
      }
    }
  }
  // The outputs' lists a run hands the kernels (ProgramRun::kept counts these handles).
  outs_.resize(n);
  for (int j = 0; j < n; ++j) {
    outs_[j] = siblings[j];
    outs_[j].insert(outs_[j].begin() + tape_[j].position(), tape_[j]);
  }
  for (int j = 0; j < n; ++j) {
    p.planned.emplace_back();
    for (const auto& o : outs_[j]) p.planned.back().push_back(o.shape());
  }
  for (const auto& x : inputs_) p.planned_inputs.push_back(x.shape());
  for (int j = 0; j < n; ++j) {
    const bool internal = !p.fusion.internal.empty() && p.fusion.internal[j];
    if (!internal || (!p.placed.empty() && p.placed[j].consumer >= 0)) p.units.push_back(j);
  }
  p.kept_in.resize(n);
  for (int j = 0; j < n; ++j) {
    for (const auto& in : tape_[j].inputs()) {
      auto it = p.index.find(in.node_id());
      p.kept_in[j].push_back(it == p.index.end() ? 0 : tape_[it->second].id() == in.id() ? 2 : 1);
    }
  }
}

detail::Program::~Program() = default;

std::vector<array> detail::Program::node_outputs(size_t j) const { return outs_.at(j); }

void detail::Program::run(const std::vector<array>& inputs, std::vector<array>& outputs,
                          const std::vector<std::vector<Shape>>* shapes) {
  std::lock_guard<std::mutex> lock(mu_);
  Plan& p = *plan_;
  const int n = static_cast<int>(tape_.size());
  // Everything goes back to "not evaluated, no data" however the run ends.
  // A planned run gives data to its units only.
  struct Reset {
    Program& prog;
    const std::vector<int>* units;
    ~Reset() {
      for (auto& x : prog.inputs_) x.reset_data();
      auto clear = [&](size_t j) {
        for (auto& o : prog.outs_[j]) o.reset_data();
      };
      if (units) {
        for (int j : *units) clear(j);
      } else {
        for (size_t j = 0; j < prog.outs_.size(); ++j) clear(j);
      }
    }
  } reset{*this, shapes || p.scheduled ? nullptr : &p.units};
  // Other shapes (a shapeless call's) for this run, or the planned ones back after such a run.
  if (shapes || p.reshaped) {
    const std::vector<std::vector<Shape>>& sh = shapes ? *shapes : p.planned;
    for (int j = 0; j < n; ++j) {
      for (size_t k = 0; k < outs_[j].size(); ++k) outs_[j][k].reset_data(&sh[j][k]);
    }
    for (size_t i = 0; i < inputs_.size(); ++i) inputs_[i].reset_data(shapes ? &inputs[i].shape() : &p.planned_inputs[i]);
    p.reshaped = shapes != nullptr;
  }
  for (size_t i = 0; i < inputs_.size(); ++i) {
    inputs_[i].copy_shared_buffer(inputs[i]);
    inputs_[i].set_evaluated();
  }
  p.remaining = p.readers;
  const ProgramRun state{&p.index, &p.reads, &p.remaining, &p.keep, &tape_, &outs_, &p.kept_in};
  {
    const SetProgramRun in_program(&state);
    if (p.scheduled) {
      eval_scheduled(tape_, p.index);
    } else {
      // Fusion groups and placements were planned for the traced shapes: other shapes run node by node.
      static const detail::FusionPlan unfused;
      static const Placements unplaced;
      if (shapes) {
        for (int i = 0; i < n; ++i) {
          compute(tape_, unfused, unplaced, i, p.index);
          entry_done(i);
        }
      } else {
        for (int i : p.units) {
          compute(tape_, p.fusion, p.placed, i, p.index);
          entry_done(i);
        }
      }
    }
  }
  for (size_t k = 0; k < outputs.size(); ++k) {
    outputs[k].copy_shared_buffer(outputs_[k]);
    outputs[k].set_evaluated();
  }
}

void detail::set_check_buffer_plan(bool on) { check_plan = on; }

array detail::row_major_copy(const array& a) { return kernels::row_contiguous(a); }

}  // namespace loom
