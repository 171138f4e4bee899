// A profiler that names the graph's operations: what eval ran, for how long, on which thread, with
// the bytes each node read and wrote, its floating-point operations where known, and the memory it
// allocated. Recording costs one relaxed atomic load per node while it is off.
//
//   profile::start();
//   for (...) eval(step());              // what is evaluated while recording is recorded
//   profile::stop();
//   std::cout << profile::table();       // per kind of operation, as torch.profiler's key_averages()
//   profile::write_trace("trace.json");  // Chrome trace: open in Perfetto or chrome://tracing
//
// Any program: LOOM_PROFILE=trace.json ./program records from start to exit, then writes the trace
// and prints the table to stderr. Under mpirun every rank records; write_trace (and the exit with
// LOOM_PROFILE) gathers the ranks' records into rank 0's file, one process per rank, their clocks
// aligned to rank 0's, so write_trace is then a collective: every rank calls it.
//
// What is recorded:
//   - every node eval runs, named as its primitive prints ("Matmul", "Reduce(sum)"), with the bytes
//     of its inputs (as stored: a broadcast reads its data once) and outputs, its FLOPs
//     (Primitive::flops), and the allocations it made, their bytes and the highest memory in use
//     while it ran;
//   - each fused group of elementwise nodes as one entry, "Fused(Exp,Multiply,Add)", its members in
//     tape order, reading the group's outside inputs and writing its result;
//   - each collective where its data moves (the communication thread, or eval's thread when it runs
//     inline) with its bytes and achieved bandwidth;
//   - each eval call, enclosing the nodes it ran on its thread; memory in use after every node;
//   - each thread-pool worker's part of a node, on the worker's own track (not in the summary).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace loom::profile {

/// Starts recording, discarding what an earlier recording kept.
void start();
/// Stops recording; what it recorded stays for key_averages(), table() and write_trace().
void stop();
bool is_recording();

/// One kind of operation: every node (or fused group, or collective) of the same name.
struct OpStats {
  std::string name;      // "Matmul", "Reduce(sum)", "Fused(Exp,Add)", "AllSum"
  std::string category;  // "op", "fused" or "comm"
  int64_t calls = 0;
  double total_ms = 0;        // summed wall time
  double share = 0;           // of the time inside eval (comm: of the recording's wall time)
  uint64_t bytes_read = 0, bytes_written = 0;
  double flops = -1;          // -1 when the primitive does not say
  uint64_t allocations = 0, allocated_bytes = 0;
  uint64_t peak_bytes = 0;    // highest memory in use while one of them ran
};

/// Every kind recorded (this process's), the longest total first; ops and fused groups, then
/// collectives.
std::vector<OpStats> key_averages();

/// The summary: the `rows` kinds of largest total time, with calls, time, share, average, bytes,
/// GFLOP/s (or GB/s for collectives), allocations; then the totals and the peak memory.
std::string table(int rows = 30);

/// Writes the recording as a Chrome trace (JSON: Perfetto and chrome://tracing open it). One track
/// per thread; under several ranks, one process per rank, gathered into rank 0's file (a collective:
/// every rank calls it; only rank 0 writes).
void write_trace(const std::string& path);

namespace detail {

extern std::atomic<bool> recording_flag;
/// The per-node check while off: one relaxed atomic load, inlined.
inline bool recording() { return recording_flag.load(std::memory_order_relaxed); }

/// Monotonic nanoseconds (steady_clock), the clock of every record.
int64_t now_ns();

/// Names the calling thread's track in the trace ("communication", "stream 1"); call it before the
/// thread records anything (a thread's log is made at its first record).
void name_thread(const std::string& name);

/// The kind of node the calling thread is running while recording (null outside one): the thread
/// pool names its workers' part of the node after it. Eval sets it around each node it records.
const std::string* running_node();
void set_running_node(std::string* kind);
/// A kernel names the library that runs it ("dnnl bf16") before it hands work to the pool: the
/// node being recorded on this thread, and the workers' parts of it, are then named "Matmul [dnnl
/// bf16]", apart from nodes of the same kind that ran elsewhere. Only the first note of a node
/// counts. Outside a recorded node, nothing happens.
void note_backend(const char* backend);

/// A finished span on the calling thread.
struct Span {
  std::string name;
  const char* category = "op";  // "op", "fused", "comm", "eval", "worker" (a pool thread's part of a node)
  int64_t begin_ns = 0, end_ns = 0;
  uint64_t bytes_read = 0, bytes_written = 0;
  double flops = -1;
  uint64_t allocations = 0, allocated_bytes = 0, peak_bytes = 0, active_bytes = 0;
  std::string args;    // extra JSON members for the trace: "\"out\":\"float32 (2,3)\"" (may be empty)
  std::string detail;  // shown as the trace's "primitive" (any text): what print() says beyond the name
};
void record(Span&& span);

/// Set by distributed/ when several ranks run: `align(start_ns)` returns this rank, the offset (ns)
/// that maps this process's clock onto rank 0's, and rank 0's `start_ns` (on its clock); `gather`
/// returns every rank's text on rank 0 (in rank order) and nothing elsewhere. Both are collectives.
struct Ranks {
  int rank = 0;
  int64_t offset_ns = 0, base_ns = 0;
};
struct DistributedHooks {
  Ranks (*align)(int64_t start_ns) = nullptr;
  std::vector<std::string> (*gather)(const std::string& mine) = nullptr;
};
void set_distributed_hooks(DistributedHooks hooks);

/// With LOOM_PROFILE set: stops, writes the trace and prints the table, once. The backend calls it
/// before it shuts communication down (the gather needs it); otherwise it runs at exit.
void finish_at_exit();

}  // namespace detail
}  // namespace loom::profile
