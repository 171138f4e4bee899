// Devices and streams, as MLX names them. Loom has one device, the CPU. A stream is an ordered queue
// of work: every node of the graph belongs to the stream that was the default when its op was called
// (see StreamContext), and `async_eval` hands each stream's part of a graph to that stream's own
// thread, so work on different streams runs concurrently and the caller goes on at once.
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <tuple>
#include <variant>
#include <vector>

namespace loom {

struct Device {
  enum class DeviceType { cpu, gpu };
  static constexpr DeviceType cpu = DeviceType::cpu;
  static constexpr DeviceType gpu = DeviceType::gpu;

  Device(DeviceType type, int index = 0) : type(type), index(index) {}

  DeviceType type;
  int index;

  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  bool operator<(const Device& o) const { return std::tie(type, index) < std::tie(o.type, o.index); }
};
inline bool operator==(const Device& d, Device::DeviceType t) { return d.type == t; }

/// The device ops run on when they name none: the CPU (Loom has no other).
const Device& default_device();
/// Only the CPU is accepted: anything else throws std::invalid_argument.
void set_default_device(const Device& d);
/// True for the CPU; false for a GPU.
bool is_available(const Device& d);
/// 1 for the CPU, 0 for GPUs.
int device_count(Device::DeviceType type);

/// MLX's GPU and Metal back ends: never available in Loom, so that MLX programs written as
/// `if (gpu::is_available()) ... else ...` compile and take the CPU branch.
namespace gpu {
inline bool is_available() { return false; }
}  // namespace gpu
namespace metal {
inline bool is_available() { return false; }
}  // namespace metal

struct Stream {
  int index;
  Device device;
  explicit Stream(int index, Device device) : index(index), device(device) {}
  bool operator==(const Stream& o) const { return index == o.index && device == o.device; }
  bool operator!=(const Stream& o) const { return !(*this == o); }
  bool operator<(const Stream& o) const { return std::tie(device, index) < std::tie(o.device, o.index); }
};

/// The calling thread's default stream for `d`: until set_default_stream changes it, stream 0 on the
/// process's main thread and, as in MLX, a stream of its own on any other thread,
/// made the first time the thread records an op or asks.
Stream default_stream(Device d);
/// Makes `s` the calling thread's default stream: ops called on this thread from now on belong to it.
void set_default_stream(Stream s);
/// A new stream on `d` (the CPU), with a thread of its own started the first time work is queued.
Stream new_stream(Device d);
/// Every stream made so far.
std::vector<Stream> get_streams();

/// MLX's stream that is a different stream on each thread: a thread that names it (as an op's
/// argument, to set_default_stream or synchronize) uses its own stream, made the first time.
struct ThreadLocalStream : Stream {
  using Stream::Stream;
};
ThreadLocalStream new_thread_local_stream(Device d);
/// The calling thread's own stream of `s`.
Stream stream_from_thread_local_stream(ThreadLocalStream s);
/// MLX's stream for use from any thread: every Loom stream can be, so this is new_stream.
Stream new_thread_unsafe_stream(Device d);
/// Waits for the calling thread's work queued so far on its own streams of every ThreadLocalStream,
/// then forgets them: the thread's next use of a ThreadLocalStream makes a new stream.
void clear_streams();
/// Waits until everything queued on the calling thread's default stream has run.
void synchronize();
/// Waits until everything queued on `s` so far has run. Rethrows nothing: errors surface where the
/// arrays that failed are read (or evaluated again).
void synchronize(Stream s);
/// Waits for the calling thread's own stream of `s`.
void synchronize(ThreadLocalStream s);

namespace scheduler {
/// Runs `task` on stream `s`'s thread after everything queued there before it (MLX's
/// scheduler::enqueue); returns at once. An exception the task throws is dropped.
void enqueue(const Stream& s, std::function<void()> task);
}  // namespace scheduler

/// The trailing argument of MLX's ops: nothing (the default stream), a stream, or a device (its
/// default stream).
using StreamOrDevice = std::variant<std::monostate, Stream, Device, Device::DeviceType>;
/// The stream `s` means. Throws std::invalid_argument for a GPU or an unknown stream.
Stream to_stream(StreamOrDevice s);

/// Makes `s` the default stream of the calling thread until the end of the scope.
class StreamContext {
 public:
  explicit StreamContext(StreamOrDevice s);
  ~StreamContext();
  StreamContext(const StreamContext&) = delete;
  StreamContext& operator=(const StreamContext&) = delete;

 private:
  Stream previous_;
};

/// What every op does with its trailing `StreamOrDevice s`: a StreamContext for the op's scope, so
/// that every node the op records (a composite op records several) belongs to `s`. The default `{}`
/// costs one test: the nodes go to the calling thread's default stream, as before.
class OnStream {
 public:
  explicit OnStream(const StreamOrDevice& s) {
    if (s.index() != 0) ctx_.emplace(s);
  }

 private:
  std::optional<StreamContext> ctx_;
};

namespace detail {
/// The index of the calling thread's default stream (what a new node records): no checks, no locks
/// once the thread has one.
int current_stream_index();
/// Waits until the work queued so far on every stream has run (but the calling thread's own, when
/// it is a stream's thread).
void synchronize_all_streams();

/// A stream's unit of queued work, as arrays being evaluated in the background see it: readers wait
/// on it; it holds the error of a run that failed.
class Event {
 public:
  Event();
  ~Event();
  /// Blocks until the work is done; rethrows its error.
  void wait() const;
  bool done() const;
  void signal(std::exception_ptr error = nullptr);

 private:
  struct State;
  std::unique_ptr<State> s_;
};
/// The event of the work the calling thread is running for a stream (null elsewhere): a stream's own
/// thread never waits on the arrays it is computing.
const Event* current_event();

/// Queues `task` on stream `s`'s thread; tasks of one stream run one at a time, in order. `event` is
/// signalled when the task ends (with its exception when it throws). Returns at once.
void enqueue(int stream, std::shared_ptr<Event> event, std::function<void()> task);
}  // namespace detail

}  // namespace loom
