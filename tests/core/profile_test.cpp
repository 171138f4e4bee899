// The profiler (core/profile.h): what it records for nodes and fused groups (bytes, FLOPs,
// allocations), its summary, and a Chrome trace that parses, whose spans nest inside their evals and
// add up to the summary.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../test_utils.h"

using namespace loom;
using nlohmann::json;

namespace {

const profile::OpStats* find_kind(const std::vector<profile::OpStats>& s, const std::string& name) {
  for (const auto& o : s) {
    if (o.name == name) return &o;
  }
  return nullptr;
}

// (It points into the vector: a temporary would be gone by the time the pointer is read.)
const profile::OpStats* find_kind(std::vector<profile::OpStats>&& s, const std::string& name) = delete;

// A float32 product's kind: the node's name with the GEMM backend that ran it (kernels/backend.h).
std::string matmul_kind() { return std::string("Matmul [") + to_string(gemm_backend(float32)) + " f32]"; }

json read_json(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << path;
  return json::parse(f);
}

// A stopped recording, whatever the test did, so that no other test records.
struct Recording {
  Recording() { profile::start(); }
  ~Recording() { profile::stop(); }
};

}  // namespace

TEST(Profile, NodesCarryBytesFlopsAndAllocations) {
  array a = ones({64, 32}), b = full({32, 16}, 2.0f);
  eval(a, b);
  {
    Recording rec;
    eval(matmul(a, b));
  }
  const auto stats = profile::key_averages();
  const profile::OpStats* mm = find_kind(stats, matmul_kind());
  ASSERT_NE(mm, nullptr);
  EXPECT_EQ(mm->category, "op");
  EXPECT_EQ(mm->calls, 1);
  EXPECT_EQ(mm->flops, 2.0 * 64 * 32 * 16);
  EXPECT_EQ(mm->bytes_read, (64u * 32 + 32 * 16) * 4);
  EXPECT_EQ(mm->bytes_written, 64u * 16 * 4);
  EXPECT_EQ(mm->allocations, 1u);
  EXPECT_GE(mm->allocated_bytes, 64u * 16 * 4);
  EXPECT_GE(mm->peak_bytes, 64u * 16 * 4);
  EXPECT_GT(mm->total_ms, 0);
  EXPECT_GT(mm->share, 0);
  EXPECT_LE(mm->share, 1.0);
  // A reduction counts one operation per input element.
  {
    Recording rec;
    eval(sum(a, 1));
  }
  const auto reduced = profile::key_averages();  // (find_kind points into it)
  const profile::OpStats* r = find_kind(reduced, "Reduce(sum)");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->flops, 64.0 * 32);
  EXPECT_EQ(r->bytes_written, 64u * 4);
}

TEST(Profile, AFusedGroupIsOneEntryNamingItsMembers) {
  array x = full({4096}, 0.5f);
  eval(x);
  {
    Recording rec;
    array y = exp(x * x) + x;  // (the temporaries of one full expression would still hold the members)
    eval(y);
  }
  const auto stats = profile::key_averages();
  ASSERT_EQ(stats.size(), 1u) << profile::table();
  EXPECT_EQ(stats[0].category, "fused");
  EXPECT_EQ(stats[0].name, "Fused(Multiply,Exp,Add)");
  EXPECT_EQ(stats[0].calls, 1);
  EXPECT_EQ(stats[0].bytes_read, 4096u * 4);  // x, once, though three members read it
  EXPECT_EQ(stats[0].bytes_written, 4096u * 4);
  EXPECT_EQ(stats[0].flops, 3.0 * 4096);  // one operation per element per member
  // Its share of the time inside eval is a fraction, nothing tighter: eval's own work around a
  // 4096-element kernel is comparable to it, and a preempted CI machine makes it larger still.
  EXPECT_GT(stats[0].share, 0.0);
  EXPECT_LE(stats[0].share, 1.0);
}

TEST(Profile, RecordsOnlyBetweenStartAndStop) {
  array x = ones({16});
  eval(x);
  {
    Recording rec;
    EXPECT_TRUE(profile::is_recording());
    eval(x + 1.0f);
  }
  EXPECT_FALSE(profile::is_recording());
  eval(x * 3.0f);  // not recorded
  auto stats = profile::key_averages();
  EXPECT_NE(find_kind(stats, "Add"), nullptr);
  EXPECT_EQ(find_kind(stats, "Multiply"), nullptr);
  // A new start forgets the previous recording.
  {
    Recording rec;
    eval(x * 3.0f);
  }
  stats = profile::key_averages();
  EXPECT_EQ(find_kind(stats, "Add"), nullptr);
  EXPECT_NE(find_kind(stats, "Multiply"), nullptr);
  EXPECT_NE(profile::table().find("Multiply"), std::string::npos);
}

TEST(Profile, TraceParsesAndItsSpansNestAndAddUp) {
  // Three steps of a small training-like graph: matmuls, a fused activation, reductions, a backward.
  array w = full({32, 32}, 0.01f), x = ones({8, 32});
  eval(w, x);
  auto loss = [&](const array& p) { return sum(square(tanh(matmul(x, p)))); };
  {
    Recording rec;
    for (int i = 0; i < 3; ++i) {
      auto [l, g] = value_and_grad(loss)(w);
      eval(l, g);
    }
  }
  const std::string path = ::testing::TempDir() + "loom_profile_trace.json";
  profile::write_trace(path);
  const json trace = read_json(path);
  ASSERT_TRUE(trace.contains("traceEvents"));
  const json& ev = trace["traceEvents"];
  std::vector<json> evals, spans;
  int memory_points = 0, thread_names = 0;
  for (const json& e : ev) {
    const std::string ph = e["ph"];
    if (ph == "M" && e["name"] == "thread_name") ++thread_names;
    if (ph == "C") ++memory_points;
    if (ph != "X") continue;
    EXPECT_GE(e["dur"].get<double>(), 0.0);
    EXPECT_GE(e["ts"].get<double>(), 0.0);
    if (e["cat"] == "worker") continue;  // a pool thread's part of a node (the next test)
    (e["cat"] == "eval" ? evals : spans).push_back(e);
  }
  EXPECT_GE(thread_names, 1);
  EXPECT_EQ(evals.size(), 3u);
  ASSERT_FALSE(spans.empty());
  EXPECT_EQ(memory_points, static_cast<int>(spans.size()));
  // Each node's span lies inside one eval's span on its thread, and an eval's nodes take no more
  // than the eval (times are printed to 1 ns).
  std::vector<double> inside(evals.size(), 0.0);
  for (const json& s : spans) {
    const double t0 = s["ts"], t1 = t0 + s["dur"].get<double>();
    int found = -1;
    for (size_t k = 0; k < evals.size(); ++k) {
      const double e0 = evals[k]["ts"], e1 = e0 + evals[k]["dur"].get<double>();
      if (evals[k]["tid"] == s["tid"] && t0 >= e0 - 1e-3 && t1 <= e1 + 1e-3) found = static_cast<int>(k);
    }
    ASSERT_GE(found, 0) << s.dump();
    inside[found] += s["dur"].get<double>();
  }
  for (size_t k = 0; k < evals.size(); ++k) EXPECT_LE(inside[k], evals[k]["dur"].get<double>() + 1e-2);
  // The trace's durations add up to the summary's totals, kind by kind.
  std::map<std::string, double> by_name;
  std::map<std::string, int> calls;
  for (const json& s : spans) by_name[s["name"]] += s["dur"].get<double>() / 1e3, calls[s["name"]] += 1;
  const auto stats = profile::key_averages();
  ASSERT_EQ(stats.size(), by_name.size());
  double share = 0;
  for (const auto& o : stats) {
    EXPECT_NEAR(o.total_ms, by_name[o.name], 1e-5 * o.calls + 1e-9) << o.name;
    EXPECT_EQ(o.calls, calls[o.name]) << o.name;
    share += o.share;
  }
  EXPECT_LE(share, 1.0 + 1e-9);
  EXPECT_GT(share, 0.0);
  std::remove(path.c_str());
}

TEST(Profile, BadPaths) {
  { Recording rec; }
  EXPECT_THROW_MSG(profile::write_trace("/nonexistent-dir/trace.json"), std::runtime_error,
                   "[profile::write_trace] cannot write /nonexistent-dir/trace.json");
}

TEST(Profile, PoolWorkersHaveTracksNamedAfterTheirNode) {
  // A 512 x 512 matmul on 2 threads splits over the pool: a worker's part is a span of its own
  // track, named after the node, inside the node's span on the thread that ran eval. (A worker may
  // not wake in time for one product, nor for twenty while another test holds the other core:
  // rounds of twenty, until one has joined.)
  const int threads = get_num_threads();
  set_num_threads(2);
  array a = full({512, 512}, 0.5f), b = full({512, 512}, 0.25f);
  eval(a, b);
  const std::string path = ::testing::TempDir() + "loom_profile_workers.json";
  std::map<int, std::string> thread_names;
  std::vector<json> nodes, parts;
  int rounds = 0;
  for (; rounds < 100 && parts.empty(); ++rounds) {
    {
      Recording rec;
      for (int i = 0; i < 20; ++i) eval(matmul(a, b));
    }
    profile::write_trace(path);
    const json trace = read_json(path);
    thread_names.clear(), nodes.clear();
    for (const json& e : trace["traceEvents"]) {
      if (e["ph"] == "M" && e["name"] == "thread_name") thread_names[e["tid"]] = e["args"]["name"];
      if (e["ph"] != "X") continue;
      if (e["cat"] == "op") nodes.push_back(e);
      if (e["cat"] == "worker") parts.push_back(e);
    }
  }
  set_num_threads(threads);
  ASSERT_FALSE(parts.empty()) << "no worker joined any of " << 20 * rounds << " products";
  for (const json& p : parts) {
    EXPECT_EQ(p["name"], matmul_kind());
    EXPECT_EQ(thread_names[p["tid"]].rfind("pool worker ", 0), 0u) << thread_names[p["tid"]];
    const double t0 = p["ts"], t1 = t0 + p["dur"].get<double>();
    bool inside = false;
    for (const json& n : nodes) {
      const double n0 = n["ts"], n1 = n0 + n["dur"].get<double>();
      inside = inside || (n["name"] == matmul_kind() && n["tid"] != p["tid"] && t0 >= n0 - 1e-3 && t1 <= n1 + 1e-3);
    }
    EXPECT_TRUE(inside) << p.dump();
  }
  // The summary counts the node once: workers' parts are inside its time already.
  const auto kinds = profile::key_averages();  // (find_kind points into it)
  const profile::OpStats* mm = find_kind(kinds, matmul_kind());
  ASSERT_NE(mm, nullptr);
  EXPECT_EQ(mm->calls, 20);
  std::remove(path.c_str());
}
