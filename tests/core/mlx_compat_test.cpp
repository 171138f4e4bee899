// The array constructors and memory API under MLX's names and signatures (mlx/array.h, mlx/memory.h,
// mlx/allocator.h), which MLX's own tests use (scripts/mlx_compat.py).
#include <atomic>
#include <chrono>
#include <future>
#include <list>
#include <sstream>
#include <thread>

#include "../test_utils.h"

using namespace loom;
using loom::testing::expect_array;

TEST(MlxCompatArray, IteratorConstructorConvertsToTheDtype) {
  std::vector<double> v{1.5, -2.25, 3.0, 4.75};
  array a(v.begin(), {2, 2});  // the value type decides the dtype as for scalars: double -> float32 (MLX)
  EXPECT_EQ(a.dtype(), float32);
  EXPECT_EQ(a.shape(), (Shape{2, 2}));
  EXPECT_EQ(a.to_vector<double>(), v);  // these values are exact in float32
  EXPECT_EQ(array(v.begin(), {4}, float64).to_vector<double>(), v);
  std::vector<int64_t> big{int64_t(1) << 40, -3};
  EXPECT_EQ(array(big.begin(), {2}).dtype(), int64);
  array b(v.begin(), {3}, int32);  // reads only as many values as the shape holds, converted
  EXPECT_EQ(b.to_vector<int>(), (std::vector<int>{1, -2, 3}));
  std::list<int> l{1, 0, 2};  // any input iterator, not only pointers
  array c(l.begin(), {3}, bool_);
  EXPECT_EQ(c.dtype(), bool_);
  EXPECT_EQ(c.to_vector<bool>(), (std::vector<bool>{true, false, true}));
  std::vector<bool> bits{true, false};
  array d(bits.begin(), {1, 2}, float16);
  EXPECT_EQ(d.dtype(), float16);
  expect_array(d, {1, 2}, {1, 0});
  float raw[3] = {0.5f, 1.5f, 2.5f};
  array e(raw, {3});  // a plain pointer is an iterator too
  EXPECT_EQ(e.dtype(), float32);
  EXPECT_EQ(e.to_vector<float>(), (std::vector<float>{0.5f, 1.5f, 2.5f}));
  array empty(v.begin(), {0, 3});
  EXPECT_EQ(empty.size(), 0u);
  EXPECT_THROW_MSG(array(v.begin(), {2, -1}), std::invalid_argument, "[array] negative dimension in shape (2,-1)");
}

TEST(MlxCompatArray, EmptyListsAsMlx) {
  array a({});  // MLX: an empty list is an empty float32 array
  EXPECT_EQ(a.dtype(), float32);
  EXPECT_EQ(a.shape(), (Shape{0}));
  array b({}, int32);  // and array({}, dtype) one of that dtype
  EXPECT_EQ(b.dtype(), int32);
  EXPECT_EQ(b.size(), 0u);
  EXPECT_EQ(reshape(a, {0, 0, 0}).shape(), (Shape{0, 0, 0}));
  // The listed forms keep their meaning: the element type decides, a dtype converts.
  EXPECT_EQ(array({1, 2}).dtype(), int32);
  EXPECT_EQ(array({1.5f}).dtype(), float32);
  EXPECT_EQ(array({true, false}).dtype(), bool_);
  array c({1, 2}, float32);
  EXPECT_EQ(c.dtype(), float32);
  expect_array(c, {2}, {1, 2});
  EXPECT_EQ(array({1, 2, 3, 4}, {2, 2}).shape(), (Shape{2, 2}));
}

TEST(MlxCompatArray, IsAvailableAfterEval) {
  array a = array(1.0f) + array(2.0f);
  EXPECT_FALSE(a.is_available());
  eval(a);
  EXPECT_TRUE(a.is_available());
  EXPECT_TRUE(array(3).is_available());
}

TEST(MlxCompatMemory, AllocatorObjectAndBufferPointer) {
  auto buf = allocator::malloc(sizeof(float));
  ASSERT_NE(buf.raw_ptr(), nullptr);
  EXPECT_EQ(buf.raw_ptr(), buf.ptr);
  *static_cast<float*>(buf.raw_ptr()) = 0.5f;
  EXPECT_EQ(*static_cast<float*>(buf.raw_ptr()), 0.5f);
  // With nothing cached, the block is the size class: 64-byte steps below 4 KiB, quarter steps of a
  // power of two above.
  clear_cache();
  EXPECT_EQ(allocator::allocator().size(buf), 64u);
  allocator::allocator().free(buf);
  auto big = allocator::allocator().malloc(6000);
  EXPECT_EQ(allocator::allocator().size(big), 6144u);
  allocator::free(big);
  EXPECT_EQ(allocator::allocator().size(allocator::malloc(0)), 0u);
  clear_cache();
}

// A cached block somewhat larger than a request serves it (MLX's rule: less than twice the size and at
// most two 4 KiB pages more) and goes back to the cache at its own size; one far larger does not.
TEST(MlxCompatMemory, CachedBlocksServeSmallerRequests) {
  clear_cache();
  auto& alloc = allocator::allocator();
  auto large = alloc.malloc(8192);
  alloc.free(large);
  ASSERT_EQ(get_cache_memory(), 8192u);
  const size_t active = get_active_memory();
  auto small = alloc.malloc(6000);
  EXPECT_EQ(small.ptr, large.ptr);
  EXPECT_EQ(alloc.size(small), 8192u);
  EXPECT_EQ(get_cache_memory(), 0u);
  EXPECT_EQ(get_active_memory(), active + 8192);
  alloc.free(small);
  EXPECT_EQ(get_cache_memory(), 8192u);
  EXPECT_EQ(get_active_memory(), active);
  // 8192 is twice 4096 and 64 KiB is more than 8 KiB over 6000: neither serves.
  auto half = alloc.malloc(4096);
  EXPECT_EQ(alloc.size(half), 4096u);
  auto huge = alloc.malloc(65536);
  alloc.free(huge);
  auto mid = alloc.malloc(20000);
  EXPECT_EQ(alloc.size(mid), 20480u);
  alloc.free(half);
  alloc.free(mid);
  // Below 4 KiB the classes are 64 bytes apart: a cached 128-byte block serves 100 bytes, not 64.
  clear_cache();
  auto b128 = alloc.malloc(128);
  alloc.free(b128);
  auto b64 = alloc.malloc(64);
  EXPECT_EQ(alloc.size(b64), 64u);
  auto b100 = alloc.malloc(100);
  EXPECT_EQ(alloc.size(b100), 128u);
  EXPECT_EQ(b100.ptr, b128.ptr);
  alloc.free(b64);
  alloc.free(b100);
  clear_cache();
  EXPECT_EQ(get_cache_memory(), 0u);
}

// clear_cache waits for the work already queued on the streams (it frees blocks into the cache).
TEST(MlxCompatMemory, ClearCacheWaitsForTheStreams) {
  const Stream s = new_stream(Device::cpu);
  std::promise<void> started, release;
  std::shared_future<void> release_f = release.get_future().share();
  std::atomic<bool> task_done{false}, clear_done{false};
  scheduler::enqueue(s, [&] {
    started.set_value();
    release_f.wait();
    allocator::free(allocator::malloc(8192));
    task_done = true;
  });
  started.get_future().wait();
  std::thread clearer([&] {
    clear_cache();
    EXPECT_TRUE(task_done.load());
    EXPECT_EQ(get_cache_memory(), 0u);  // the task's block too
    clear_done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(clear_done.load());  // the task is still held, so clear_cache is still waiting
  release.set_value();
  clearer.join();
  EXPECT_TRUE(clear_done.load());
  // On a stream's own thread clear_cache does not wait for that stream (it would wait forever).
  std::promise<void> cleared;
  scheduler::enqueue(s, [&] {
    clear_cache();
    cleared.set_value();
  });
  EXPECT_EQ(cleared.get_future().wait_for(std::chrono::seconds(60)), std::future_status::ready);
}

TEST(MlxCompatMemory, LimitsReturnThePreviousValue) {
  // Each setter returns the value it replaces, as MLX's memory.h says.
  const size_t mem = get_memory_limit();
  EXPECT_EQ(set_memory_limit(size_t(1) << 40), mem);
  EXPECT_EQ(get_memory_limit(), size_t(1) << 40);
  EXPECT_EQ(set_memory_limit(mem), size_t(1) << 40);
  const size_t cache = set_cache_limit(size_t(1) << 30);
  EXPECT_EQ(set_cache_limit(cache), size_t(1) << 30);
  // The wired limit pins nothing on a CPU: it is only recorded.
  const size_t wired = set_wired_limit(12345);
  EXPECT_EQ(set_wired_limit(wired), 12345u);

  // A freed block goes to the cache; clear_cache empties it; reset_peak_memory restarts the peak.
  clear_cache();
  EXPECT_EQ(get_cache_memory(), 0u);
  auto b = allocator::malloc(8192);
  const size_t active = get_active_memory();
  EXPECT_GE(active, 8192u);
  EXPECT_GE(get_peak_memory(), active);
  allocator::free(b);
  EXPECT_GE(get_cache_memory(), 8192u);
  EXPECT_EQ(get_active_memory(), active - 8192);
  reset_peak_memory();
  EXPECT_LE(get_peak_memory(), active);
  clear_cache();
  EXPECT_EQ(get_cache_memory(), 0u);
}

// finfo and iinfo against numpy's np.finfo / np.iinfo (and torch.finfo for bfloat16), printed by
// /usr/bin/python3.
TEST(MlxCompatDtype, FinfoAndIinfo) {
  struct F {
    Dtype d;
    int bits;
    double max, eps, smallest_normal;
  };
  for (const F& f : {F{float16, 16, 65504.0, 0.0009765625, 6.103515625e-05},
                     F{bfloat16, 16, 3.3895313892515355e+38, 0.0078125, 1.1754943508222875e-38},
                     F{float32, 32, 3.4028234663852886e+38, 1.1920928955078125e-07, 1.1754943508222875e-38},
                     F{float64, 64, 1.7976931348623157e+308, 2.220446049250313e-16, 2.2250738585072014e-308}}) {
    finfo i(f.d);
    EXPECT_EQ(i.dtype, f.d);
    EXPECT_EQ(i.bits, f.bits);
    EXPECT_EQ(i.max, f.max) << f.d;
    EXPECT_EQ(i.min, -f.max) << f.d;
    EXPECT_EQ(i.eps, f.eps) << f.d;
    EXPECT_EQ(i.smallest_normal, f.smallest_normal) << f.d;
  }
  EXPECT_EQ(finfo(complex64).dtype, float32);
  EXPECT_EQ(finfo(complex64).max, finfo(float32).max);
  EXPECT_THROW_MSG(finfo{int32}, std::invalid_argument, "[finfo] int32");
  EXPECT_THROW_MSG(finfo{bool_}, std::invalid_argument, "[finfo] bool");

  EXPECT_EQ(iinfo(int8).min, -128);
  EXPECT_EQ(iinfo(int8).max, 127u);
  EXPECT_EQ(iinfo(int16).min, -32768);
  EXPECT_EQ(iinfo(int32).min, -2147483648LL);
  EXPECT_EQ(iinfo(int32).max, 2147483647u);
  EXPECT_EQ(iinfo(int64).min, std::numeric_limits<int64_t>::min());
  EXPECT_EQ(iinfo(int64).max, 9223372036854775807u);
  EXPECT_EQ(iinfo(uint8).max, 255u);
  EXPECT_EQ(iinfo(uint16).max, 65535u);
  EXPECT_EQ(iinfo(uint32).max, 4294967295u);
  EXPECT_EQ(iinfo(uint64).min, 0);
  EXPECT_EQ(iinfo(uint64).max, 18446744073709551615u);
  EXPECT_THROW_MSG(iinfo{float32}, std::invalid_argument, "[iinfo] float32");
  EXPECT_THROW_MSG(iinfo{bool_}, std::invalid_argument, "[iinfo] bool");
}

TEST(MlxCompatDtype, KindsCategoriesAndResultType) {
  EXPECT_EQ(kindof(bool_), Dtype::Kind::b);
  EXPECT_EQ(kindof(uint16), Dtype::Kind::u);
  EXPECT_EQ(kindof(int64), Dtype::Kind::i);
  EXPECT_EQ(kindof(float16), Dtype::Kind::f);
  EXPECT_EQ(kindof(bfloat16), Dtype::Kind::V);
  EXPECT_EQ(kindof(complex64), Dtype::Kind::c);
  EXPECT_TRUE(issubdtype(float16, floating));
  EXPECT_TRUE(issubdtype(complex64, inexact));
  EXPECT_FALSE(issubdtype(complex64, floating));
  EXPECT_TRUE(issubdtype(uint8, integer));
  EXPECT_FALSE(issubdtype(uint8, signedinteger));
  EXPECT_TRUE(issubdtype(int8, number));
  EXPECT_TRUE(issubdtype(bool_, generic));
  EXPECT_FALSE(issubdtype(bool_, number));

  array i = array({1, 2}), u = array({1}, uint8), f = array({1.0f}, float16);
  EXPECT_EQ(result_type(i, u), int32);
  EXPECT_EQ(result_type(u, f, i), float16);
  EXPECT_EQ(result_type({u, array({1}, int8)}), int16);
  EXPECT_EQ(result_type(std::vector<array>{}), bool_);
  EXPECT_EQ(normalize_axis_index(-1, 3), 2);
  EXPECT_EQ(normalize_axis_index(2, 3), 2);
  EXPECT_THROW_MSG(normalize_axis_index(3, 3, "[op] "), std::invalid_argument, "[op] axis 3 is out of range for 3");
  EXPECT_THROW_MSG(normalize_axis_index(-4, 3), std::invalid_argument, "axis -4");
}

TEST(MlxCompatArray, IteratingGivesTheSlicesAlongTheFirstAxis) {
  array m = array({1, 2, 3, 4, 5, 6}, {3, 2});
  std::vector<std::vector<int>> rows;
  for (array row : m) {
    EXPECT_EQ(row.shape(), (Shape{2}));
    rows.push_back(row.to_vector<int>());
  }
  EXPECT_EQ(rows, (std::vector<std::vector<int>>{{1, 2}, {3, 4}, {5, 6}}));
  // Of a 1-d array: 0-d elements; the iterator walks a lazy graph too.
  int total = 0;
  for (array x : arange(4) * 2) total += x.item<int>();
  EXPECT_EQ(total, 12);
  EXPECT_EQ(std::distance(m.begin(), m.end()), 3);
  array e = zeros({0, 2});
  EXPECT_TRUE(e.begin() == e.end());
  EXPECT_THROW_MSG(array(1.0f).begin(), std::invalid_argument, "[array::begin] a 0-d array");
}

// MLX's two constructors from memory the caller owns: from a raw pointer (copied, then the deleter
// is called with it: MLX's CPU behaviour) and from an allocator Buffer with any callable deleter,
// called once when the array's data is released.
TEST(MlxCompatArray, ConstructorsWithADeleter) {
  std::vector<int> user(4096, 7);
  int calls = 0;
  {
    array a(user.data(), Shape{4096}, int32, [&calls, p = user.data()](void* q) { calls += q == p; });
    EXPECT_EQ(calls, 1);  // copied at once
    user[0] = 100;        // the array does not see later writes
    EXPECT_TRUE(array_equal(a + array(1), full({4096}, 8)).item<bool>());
  }
  EXPECT_EQ(calls, 1);

  int released = 0;
  {
    allocator::Buffer buf = allocator::malloc(3 * sizeof(float));
    float* f = static_cast<float*>(buf.raw_ptr());
    f[0] = 1, f[1] = 2, f[2] = 3;
    array b(buf, Shape{3}, float32, [&released, f](allocator::Buffer x) {
      released += x.raw_ptr() == f;
      allocator::free(x);
    });
    expect_array(b * 2.0f, {3}, {2, 4, 6});
    EXPECT_EQ(released, 0);
  }
  EXPECT_EQ(released, 1);
}

TEST(MlxCompatGraph, PrintGraphAndExportToDot) {
  array x = array({1.0f, 2.0f}), y = array({3.0f, 4.0f});
  array z = exp(x + y) * x;
  std::ostringstream os;
  print_graph(os, z);
  // Named in the order printed, as MLX: the inputs x and y are A and B, the output C, then x + y D
  // and its exp E.
  EXPECT_EQ(os.str(),
            "Inputs: A [(2), float32], B [(2), float32]\n"
            "Outputs: C [(2), float32]\n"
            "Add A [(2), float32], B [(2), float32] -> D [(2), float32]\n"
            "Exp D [(2), float32] -> E [(2), float32]\n"
            "Multiply E [(2), float32], A [(2), float32] -> C [(2), float32]\n");
  NodeNamer names;
  names.set_name(x, "x");
  std::ostringstream named;
  print_graph(named, names, {z});
  EXPECT_NE(named.str().find("Inputs: x [(2), float32], B [(2), float32]"), std::string::npos) << named.str();
  // Several outputs: every node once (divmod is a floor_divide and a remainder).
  auto parts = divmod(x, y);
  std::ostringstream two;
  print_graph(two, parts);
  const std::string t = two.str();
  EXPECT_EQ(std::count(t.begin(), t.end(), '\n'), 4) << t;

  std::ostringstream dot;
  export_to_dot(dot, z);
  const std::string d = dot.str();
  EXPECT_EQ(d.rfind("digraph {\n", 0), 0u);
  EXPECT_NE(d.find("{ rank=source; \"A\"; }"), std::string::npos) << d;
  EXPECT_NE(d.find("[label =\"Exp\", shape=rectangle]"), std::string::npos) << d;
  EXPECT_NE(d.find("{ rank=sink; \"E\"; }"), std::string::npos) << d;  // named as met: x + y is C
  EXPECT_EQ(d.back(), '}');
  // A long chain is walked without recursion.
  array c = x;
  for (int i = 0; i < 100000; ++i) c = c + 1.0f;
  std::ostringstream big;
  print_graph(big, c);
  const std::string b = big.str();
  EXPECT_EQ(std::count(b.begin(), b.end(), '\n'), 200002);  // per step: the scalar's broadcast and the add
}
