#include "loom/core/stream.h"
#include "loom/core/profile.h"

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>

namespace loom {

namespace {

Device& cpu_device() {
  static Device d(Device::cpu, 0);
  return d;
}

void check_cpu(const Device& d, const char* op) {
  if (d.type != Device::cpu || d.index != 0) {
    throw std::invalid_argument(std::string("[") + op + "] Loom runs on the CPU only; there is no " +
                                (d.type == Device::gpu ? "gpu" : "cpu") + " device " + std::to_string(d.index));
  }
}

std::atomic<int> stream_count{1};  // stream 0 always exists
// Each thread has its own default stream, as in MLX: stream 0 for the process's main thread, a new
// stream made at first use for any other, and its own stream for a stream's thread. So two threads
// that each async_eval their work do not queue behind one another.
thread_local int default_index = -1;  // -1: not chosen yet
thread_local const detail::Event* running_event = nullptr;
thread_local int running_stream = -1;  // on a stream's thread, that stream

int thread_default_index() {
  if (default_index < 0) {
    const bool main_thread = static_cast<pid_t>(syscall(SYS_gettid)) == getpid();  // Linux: tid == pid
    default_index = main_thread ? 0 : stream_count.fetch_add(1);
  }
  return default_index;
}

// One thread per stream that has been given work; it runs the stream's tasks in order.
struct Worker {
  std::mutex mu;
  std::condition_variable cv;
  struct Task {
    std::shared_ptr<detail::Event> event;
    std::function<void()> fn;
  };
  std::deque<Task> queue;
  bool stop = false;
  std::thread thread;

  explicit Worker(int stream) : thread([this, stream] { loop(stream); }) {}
  void loop(int stream) {
    default_index = running_stream = stream;
    profile::detail::name_thread("stream " + std::to_string(stream));
    for (;;) {
      Task t;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return stop || !queue.empty(); });
        if (queue.empty()) return;  // stopping, and nothing left
        t = std::move(queue.front());
        queue.pop_front();
      }
      running_event = t.event.get();
      std::exception_ptr error;
      try {
        t.fn();
      } catch (...) {
        error = std::current_exception();
      }
      t.fn = nullptr;  // drop what the task held (its graph) before anyone is told it is done
      running_event = nullptr;
      t.event->signal(error);
    }
  }
};

struct Workers {
  std::mutex mu;
  std::unordered_map<int, std::unique_ptr<Worker>> by_stream;
  // Joined at exit, after their queues drain: a task may still be running when main returns.
  ~Workers() {
    for (auto& [i, w] : by_stream) {
      {
        std::lock_guard<std::mutex> lock(w->mu);
        w->stop = true;
      }
      w->cv.notify_one();
      if (w->thread.joinable()) w->thread.join();
    }
  }
};

Workers& workers() {
  static Workers instance;
  static bool once = [] {
    // A forked child has none of the parent's threads: it forgets them (leaked, never joined) and
    // starts workers of its own when it queues work.
    pthread_atfork(nullptr, nullptr, [] {
      new (&instance.mu) std::mutex;
      for (auto& [i, w] : instance.by_stream) (void)w.release();
      instance.by_stream.clear();
    });
    return true;
  }();
  (void)once;
  return instance;
}

Worker* find_worker(int stream, bool create) {
  Workers& ws = workers();
  std::lock_guard<std::mutex> lock(ws.mu);
  auto it = ws.by_stream.find(stream);
  if (it != ws.by_stream.end()) return it->second.get();
  if (!create) return nullptr;
  return (ws.by_stream[stream] = std::make_unique<Worker>(stream)).get();
}

}  // namespace

namespace {
// The indices of the ThreadLocalStreams, and each thread's own stream for those it used.
std::mutex thread_local_mu;
std::unordered_set<int> thread_local_indices;
thread_local std::unordered_map<int, Stream> own_streams;

bool is_thread_local(int index) {
  std::lock_guard<std::mutex> lock(thread_local_mu);
  return thread_local_indices.count(index) > 0;
}
}  // namespace

const Device& default_device() { return cpu_device(); }
void set_default_device(const Device& d) { check_cpu(d, "set_default_device"); }
bool is_available(const Device& d) { return d.type == Device::cpu && d.index == 0; }
int device_count(Device::DeviceType type) { return type == Device::cpu ? 1 : 0; }

Stream default_stream(Device d) {
  check_cpu(d, "default_stream");
  return Stream(thread_default_index(), d);
}


Stream new_stream(Device d) {
  check_cpu(d, "new_stream");
  return Stream(stream_count.fetch_add(1), d);
}

std::vector<Stream> get_streams() {
  std::vector<Stream> out;
  for (int i = 0, n = stream_count.load(); i < n; ++i) out.emplace_back(i, cpu_device());
  return out;
}

void synchronize() { synchronize(default_stream(default_device())); }

void synchronize(Stream s) {
  check_cpu(s.device, "synchronize");
  if (is_thread_local(s.index)) s = stream_from_thread_local_stream(ThreadLocalStream(s.index, s.device));
  if (!find_worker(s.index, false)) return;  // nothing was ever queued there
  auto done = std::make_shared<detail::Event>();
  detail::enqueue(s.index, done, [] {});
  done->wait();
}


ThreadLocalStream new_thread_local_stream(Device d) {
  check_cpu(d, "new_thread_local_stream");
  ThreadLocalStream s(stream_count.fetch_add(1), d);
  std::lock_guard<std::mutex> lock(thread_local_mu);
  thread_local_indices.insert(s.index);
  return s;
}

Stream stream_from_thread_local_stream(ThreadLocalStream s) {
  if (!is_thread_local(s.index)) {
    throw std::invalid_argument("[stream_from_thread_local_stream] stream " + std::to_string(s.index) +
                                " is not a ThreadLocalStream");
  }
  auto it = own_streams.find(s.index);
  if (it == own_streams.end()) it = own_streams.emplace(s.index, new_stream(s.device)).first;
  return it->second;
}

Stream new_thread_unsafe_stream(Device d) { return new_stream(d); }

void synchronize(ThreadLocalStream s) { synchronize(stream_from_thread_local_stream(s)); }

void clear_streams() {
  for (auto& [index, s] : own_streams) synchronize(s);
  own_streams.clear();
}

namespace scheduler {
void enqueue(const Stream& s, std::function<void()> task) {
  detail::enqueue(to_stream(s).index, std::make_shared<detail::Event>(), std::move(task));
}
}  // namespace scheduler

Stream to_stream(StreamOrDevice s) {
  if (auto* st = std::get_if<Stream>(&s)) {
    check_cpu(st->device, "to_stream");
    if (st->index < 0 || st->index >= stream_count.load()) {
      throw std::invalid_argument("[to_stream] no stream " + std::to_string(st->index));
    }
    if (is_thread_local(st->index)) return stream_from_thread_local_stream(ThreadLocalStream(st->index, st->device));
    return *st;
  }
  if (auto* d = std::get_if<Device>(&s)) return default_stream(*d);
  if (auto* t = std::get_if<Device::DeviceType>(&s)) return default_stream(Device(*t));
  return default_stream(default_device());
}

void set_default_stream(Stream s) {
  check_cpu(s.device, "set_default_stream");
  if (s.index < 0 || s.index >= stream_count.load()) {
    throw std::invalid_argument("[set_default_stream] no stream " + std::to_string(s.index) + " (" +
                                std::to_string(stream_count.load()) + " streams exist)");
  }
  default_index = to_stream(s).index;  // a ThreadLocalStream: this thread's own
}

StreamContext::StreamContext(StreamOrDevice s) : previous_(default_stream(default_device())) {
  if (std::holds_alternative<std::monostate>(s)) {
    throw std::invalid_argument("[StreamContext] name a stream or a device");
  }
  set_default_stream(to_stream(s));
}

StreamContext::~StreamContext() { default_index = previous_.index; }

namespace detail {

int current_stream_index() { return thread_default_index(); }

void synchronize_all_streams() {
  std::vector<int> streams;
  {
    Workers& ws = workers();
    std::lock_guard<std::mutex> lock(ws.mu);
    for (auto& [i, w] : ws.by_stream) {
      if (i != running_stream) streams.push_back(i);  // a stream's own thread cannot wait for itself
    }
  }
  for (int i : streams) synchronize(Stream(i, cpu_device()));
}

struct Event::State {
  mutable std::mutex mu;
  mutable std::condition_variable cv;
  std::atomic<bool> done{false};
  std::exception_ptr error;
};

Event::Event() : s_(std::make_unique<State>()) {}
Event::~Event() = default;

bool Event::done() const { return s_->done.load(std::memory_order_acquire); }

void Event::wait() const {
  if (!done()) {
    std::unique_lock<std::mutex> lock(s_->mu);
    s_->cv.wait(lock, [&] { return s_->done.load(std::memory_order_relaxed); });
  }
  if (s_->error) std::rethrow_exception(s_->error);
}

void Event::signal(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(s_->mu);
    s_->error = error;
    s_->done.store(true, std::memory_order_release);
  }
  s_->cv.notify_all();
}

const Event* current_event() { return running_event; }

void enqueue(int stream, std::shared_ptr<Event> event, std::function<void()> task) {
  Worker* w = find_worker(stream, true);
  {
    std::lock_guard<std::mutex> lock(w->mu);
    w->queue.push_back({std::move(event), std::move(task)});
  }
  w->cv.notify_one();
}

}  // namespace detail

}  // namespace loom
