#include "loom/core/profile.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace loom::profile {

std::atomic<bool> detail::recording_flag{false};

namespace {

std::atomic<bool>& on = detail::recording_flag;

// Each thread appends to a log of its own; the registry keeps every log (a thread may end before
// the trace is written). A log's mutex is only ever contended while a recording is read.
struct ThreadLog {
  std::mutex mu;
  int tid = 0;
  std::string name;
  std::vector<detail::Span> spans;
};

struct Registry {
  std::mutex mu;
  std::vector<std::shared_ptr<ThreadLog>> logs;
  int64_t start_ns = 0, stop_ns = 0;
  std::thread::id main_thread = std::this_thread::get_id();  // the thread that loaded the library
  detail::DistributedHooks hooks;
  bool finished = false;
  int rank = 0;  // this process's, once write_trace asked the ranks
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: threads may record during exit
  return *r;
}

thread_local std::string thread_label;  // name_thread's, for the log made at the first record
thread_local std::string* node_running = nullptr;

// Spans that enclose others or repeat a node's time elsewhere: in the trace, not in the summary.
bool structural(const char* category) {
  return std::string(category) == "eval" || std::string(category) == "worker";
}

ThreadLog& my_log() {
  thread_local std::shared_ptr<ThreadLog> log;
  if (!log) {
    log = std::make_shared<ThreadLog>();
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    log->tid = static_cast<int>(r.logs.size());
    log->name = !thread_label.empty() ? thread_label
                : std::this_thread::get_id() == r.main_thread ? "main"
                                                               : "thread " + std::to_string(log->tid);
    r.logs.push_back(log);
  }
  return *log;
}

// Every recorded span, copied out of the logs, with its thread's id.
struct Recorded {
  std::vector<std::pair<int, detail::Span>> spans;
  std::vector<std::pair<int, std::string>> threads;
};
Recorded snapshot() {
  Registry& r = registry();
  std::vector<std::shared_ptr<ThreadLog>> logs;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    logs = r.logs;
  }
  Recorded out;
  for (auto& l : logs) {
    std::lock_guard<std::mutex> lock(l->mu);
    if (l->spans.empty()) continue;
    out.threads.emplace_back(l->tid, l->name);
    for (const auto& s : l->spans) out.spans.emplace_back(l->tid, s);
  }
  return out;
}

int64_t recording_end() {
  Registry& r = registry();
  return on.load() ? detail::now_ns() : r.stop_ns;
}

void json_string(std::ostream& os, const std::string& s) {
  os << '"';
  for (char c : s) {
    if (c == '"' || c == '\\') {
      os << '\\' << c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      os << "\\u" << std::hex << std::setw(4) << std::setfill('0') << int(c) << std::dec << std::setfill(' ');
    } else {
      os << c;
    }
  }
  os << '"';
}

// This process's part of the trace: events separated by commas, no brackets (ranks are joined).
std::string trace_events(int pid, int64_t offset_ns, int64_t base_ns) {
  const Recorded rec = snapshot();
  std::ostringstream os;
  os << std::fixed << std::setprecision(3);
  auto us = [&](int64_t t) { return double(t + offset_ns - base_ns) / 1000.0; };
  os << "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" << pid << ",\"args\":{\"name\":\"rank " << pid << "\"}}";
  os << ",\n{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":" << pid << ",\"args\":{\"sort_index\":" << pid
     << "}}";
  for (const auto& [tid, name] : rec.threads) {
    os << ",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" << pid << ",\"tid\":" << tid << ",\"args\":{\"name\":";
    json_string(os, name);
    os << "}}";
  }
  std::vector<std::pair<int64_t, uint64_t>> memory;  // (time, bytes in use) after each node
  for (const auto& [tid, s] : rec.spans) {
    const double dur = double(s.end_ns - s.begin_ns) / 1000.0;
    os << ",\n{\"ph\":\"X\",\"name\":";
    json_string(os, s.name);
    os << ",\"cat\":\"" << s.category << "\",\"pid\":" << pid << ",\"tid\":" << tid << ",\"ts\":" << us(s.begin_ns)
       << ",\"dur\":" << dur << ",\"args\":{";
    bool first = true;
    auto arg = [&](const char* k) -> std::ostream& {
      os << (first ? "" : ",") << '"' << k << "\":";
      first = false;
      return os;
    };
    if (!structural(s.category)) {
      arg("bytes_read") << s.bytes_read;
      arg("bytes_written") << s.bytes_written;
      if (s.flops >= 0) arg("flops") << std::setprecision(0) << s.flops << std::setprecision(3);
      if (std::string(s.category) == "comm" && dur > 0) arg("GB/s") << double(s.bytes_read) / (dur * 1e3);
      if (std::string(s.category) != "comm") {
        arg("allocations") << s.allocations;
        arg("allocated_bytes") << s.allocated_bytes;
        arg("peak_bytes") << s.peak_bytes;
        memory.emplace_back(s.end_ns, s.active_bytes);
      }
    }
    if (!s.detail.empty()) json_string(arg("primitive"), s.detail);
    if (!s.args.empty()) os << (first ? "" : ",") << s.args;
    os << "}}";
  }
  std::sort(memory.begin(), memory.end());
  for (const auto& [t, bytes] : memory) {
    os << ",\n{\"ph\":\"C\",\"name\":\"memory in use (MB)\",\"pid\":" << pid << ",\"ts\":" << us(t)
       << ",\"args\":{\"MB\":" << double(bytes) / (1 << 20) << "}}";
  }
  return os.str();
}

std::string human_bytes(double b) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(1);
  if (b >= 1e9) {
    os << b / 1e9 << " GB";
  } else if (b >= 1e6) {
    os << b / 1e6 << " MB";
  } else if (b >= 1e3) {
    os << b / 1e3 << " kB";
  } else {
    os << std::setprecision(0) << b << " B";
  }
  return os.str();
}

}  // namespace

namespace detail {


int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void name_thread(const std::string& name) { thread_label = name; }

const std::string* running_node() { return node_running; }
void set_running_node(std::string* kind) { node_running = kind; }

void note_backend(const char* backend) {
  // Once per node: a node whose kernel makes several products (a batched matmul) names them once.
  if (node_running && node_running->find(" [") == std::string::npos) *node_running += std::string(" [") + backend + "]";
}

void record(Span&& span) {
  ThreadLog& l = my_log();
  std::lock_guard<std::mutex> lock(l.mu);
  l.spans.push_back(std::move(span));
}

void set_distributed_hooks(DistributedHooks hooks) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.hooks = hooks;
}

void finish_at_exit() {
  const char* path = std::getenv("LOOM_PROFILE");
  Registry& r = registry();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    if (!path || !*path || r.finished) return;
    r.finished = true;
  }
  try {
    stop();
    write_trace(path);
    if (r.rank == 0) std::fprintf(stderr, "[profile] trace written to %s\n%s", path, table().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[profile] LOOM_PROFILE=%s: %s\n", path, e.what());
  }
}

}  // namespace detail

void start() {
  Registry& r = registry();
  std::vector<std::shared_ptr<ThreadLog>> logs;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    logs = r.logs;
    r.start_ns = detail::now_ns();
    r.stop_ns = 0;
  }
  for (auto& l : logs) {
    std::lock_guard<std::mutex> lock(l->mu);
    l->spans.clear();
  }
  on.store(true);
}

void stop() {
  if (!on.exchange(false)) return;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.stop_ns = detail::now_ns();
}

bool is_recording() { return on.load(); }

namespace {
std::vector<OpStats> averages(const Recorded& rec) {
  double eval_ns = 0;
  std::map<std::pair<std::string, std::string>, OpStats> by;
  for (const auto& [tid, s] : rec.spans) {
    const double ns = double(s.end_ns - s.begin_ns);
    if (std::string(s.category) == "eval") eval_ns += ns;
    if (structural(s.category)) continue;
    OpStats& o = by[{s.category, s.name}];
    o.name = s.name;
    o.category = s.category;
    o.calls += 1;
    o.total_ms += ns / 1e6;
    o.bytes_read += s.bytes_read;
    o.bytes_written += s.bytes_written;
    if (s.flops >= 0) o.flops = std::max(o.flops, 0.0) + s.flops;
    o.allocations += s.allocations;
    o.allocated_bytes += s.allocated_bytes;
    o.peak_bytes = std::max(o.peak_bytes, s.peak_bytes);
  }
  const Registry& r = registry();
  const double wall_ms = double(recording_end() - r.start_ns) / 1e6;
  std::vector<OpStats> out;
  for (auto& [k, o] : by) {
    const bool comm = o.category == "comm";
    const double whole = comm ? wall_ms : eval_ns / 1e6;
    o.share = whole > 0 ? o.total_ms / whole : 0;
    out.push_back(std::move(o));
  }
  std::stable_sort(out.begin(), out.end(), [](const OpStats& a, const OpStats& b) {
    const bool ca = a.category == "comm", cb = b.category == "comm";
    return ca != cb ? cb : a.total_ms > b.total_ms;
  });
  return out;
}

}  // namespace

std::vector<OpStats> key_averages() { return averages(snapshot()); }

std::string table(int rows) {
  const Recorded rec = snapshot();  // one copy of the recording for the rows and the totals
  const std::vector<OpStats> stats = averages(rec);
  double eval_ms = 0;
  int64_t evals = 0;
  uint64_t peak = 0;
  for (const auto& [tid, s] : rec.spans) {
    if (std::string(s.category) == "eval") eval_ms += double(s.end_ns - s.begin_ns) / 1e6, ++evals;
    peak = std::max(peak, s.peak_bytes);
  }
  std::ostringstream os;
  os << std::fixed;
  const int w = 34;
  auto cut = [&](const std::string& n) { return n.size() <= size_t(w) ? n : n.substr(0, w - 3) + "..."; };
  os << std::left << std::setw(w) << "Name" << std::right << std::setw(8) << "Calls" << std::setw(11) << "Total ms"
     << std::setw(8) << "Share" << std::setw(11) << "Avg us" << std::setw(11) << "Read" << std::setw(11) << "Written"
     << std::setw(11) << "GFLOP/s" << std::setw(8) << "Allocs" << '\n';
  os << std::string(w + 79, '-') << '\n';
  auto row = [&](const OpStats& o) {
    const bool comm = o.category == "comm";
    os << std::left << std::setw(w) << cut(o.name) << std::right << std::setw(8) << o.calls << std::setw(11)
       << std::setprecision(3) << o.total_ms << std::setw(7) << std::setprecision(1) << 100 * o.share << '%'
       << std::setw(11) << std::setprecision(1) << 1e3 * o.total_ms / double(std::max<int64_t>(o.calls, 1))
       << std::setw(11) << human_bytes(double(o.bytes_read)) << std::setw(11)
       << human_bytes(double(o.bytes_written));
    const double s = o.total_ms / 1e3;
    if (comm) {  // achieved bandwidth of the data sent
      os << std::setw(8) << std::setprecision(2) << (s > 0 ? double(o.bytes_read) / s / 1e9 : 0.0) << " GB/s";
    } else if (o.flops >= 0 && s > 0) {
      os << std::setw(11) << std::setprecision(2) << o.flops / s / 1e9;
    } else {
      os << std::setw(11) << "-";
    }
    os << std::setw(8) << (comm ? std::string("-") : std::to_string(o.allocations)) << '\n';
  };
  int shown = 0;
  OpStats rest;
  rest.name = "(other)";
  for (const auto& o : stats) {
    if (o.category == "comm") continue;
    if (shown < rows) {
      row(o);
      ++shown;
    } else {
      rest.calls += o.calls, rest.total_ms += o.total_ms, rest.share += o.share;
      rest.bytes_read += o.bytes_read, rest.bytes_written += o.bytes_written, rest.allocations += o.allocations;
      rest.flops = -1;
    }
  }
  if (rest.calls) row(rest);
  bool comm_header = false;
  for (const auto& o : stats) {
    if (o.category != "comm") continue;
    if (!comm_header) {
      os << "collectives (share of the recording's wall time; GB/s of the data each rank sends):\n";
      comm_header = true;
    }
    row(o);
  }
  const Registry& r = registry();
  os << std::string(w + 79, '-') << '\n'
     << std::setprecision(3) << "inside eval: " << eval_ms << " ms in " << evals << " evals; recorded "
     << double(recording_end() - r.start_ns) / 1e6 << " ms; peak memory in use " << human_bytes(double(peak))
     << '\n';
  return os.str();
}

void write_trace(const std::string& path) {
  Registry& r = registry();
  detail::DistributedHooks hooks;
  int64_t start = 0;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    hooks = r.hooks;
    start = r.start_ns;
  }
  std::vector<std::string> parts;
  if (hooks.align && hooks.gather) {
    // Every rank's times on rank 0's clock, from rank 0's start.
    const detail::Ranks ranks = hooks.align(start);
    {
      std::lock_guard<std::mutex> lock(r.mu);
      r.rank = ranks.rank;
    }
    parts = hooks.gather(trace_events(ranks.rank, ranks.offset_ns, ranks.base_ns));
    if (ranks.rank != 0) return;
  } else {
    parts.push_back(trace_events(0, 0, start));
  }
  std::ofstream f(path);
  if (!f) throw std::runtime_error("[profile::write_trace] cannot write " + path);
  f << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  for (size_t i = 0; i < parts.size(); ++i) f << (i ? ",\n" : "") << parts[i];
  f << "\n]}\n";
  if (!f) throw std::runtime_error("[profile::write_trace] writing " + path + " failed");
}

namespace {
// LOOM_PROFILE=path: record from the library's load to the program's exit.
const bool kFromEnvironment = [] {
  const char* path = std::getenv("LOOM_PROFILE");
  if (!path || !*path) return false;
  start();
  std::atexit(detail::finish_at_exit);
  return true;
}();
}  // namespace

}  // namespace loom::profile
