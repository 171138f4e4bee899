// Placement inside eval: producers whose only reader is a concatenate write straight into its
// output (no part buffer, no copy), and nothing that someone else still reads is ever placed.
#include "../test_utils.h"
#include "loom/core/primitive.h"

using namespace loom;
using loom::testing::expect_array;

namespace {

constexpr int kN = 1 << 18;  // 1 MB of float32 per part

array leaf(float start) {
  array x = arange(double(start), double(start) + kN, 1.0, float32);
  eval(x);
  return x;
}

// Bytes allocated above the current level while `outputs` are evaluated.
size_t peak_during_eval(const std::vector<array>& outputs) {
  size_t base = get_active_memory();
  reset_peak_memory();
  eval(outputs);
  return get_peak_memory() - base;
}

std::vector<double> values(const array& a) {
  array c = astype(a, float64);
  return c.to_vector<double>();
}

}  // namespace

TEST(Placement, ProducersWriteStraightIntoTheConcatenation) {
  array x = leaf(0), y = leaf(1);
  array c = concatenate({x * 2.0f, exp(y * 0.0f) + y}, 0);
  const size_t bytes = 2 * kN * sizeof(float);
  // The output and nothing else: without placement each part had a buffer of its own as well.
  EXPECT_LE(peak_during_eval({c}), bytes + 4096);
  std::vector<double> want(2 * kN);
  for (int i = 0; i < kN; ++i) {
    want[i] = 2.0 * i;
    want[kN + i] = 1.0 + (1 + i);
  }
  expect_array(c, {2 * kN}, want);
}

TEST(Placement, ThroughReshapesOfProducers) {
  array x = leaf(0), y = leaf(5);
  array a = reshape(x, {512, kN / 512}), b = reshape(y, {kN / 512, 512});
  // Flattened matmul-free 2-D producers, as average_gradients builds its buckets.
  array c = concatenate({reshape(a * 3.0f, {-1}), reshape(transpose(b) + 0.0f, {-1})}, 0);
  EXPECT_LE(peak_during_eval({c}), 2 * kN * sizeof(float) + 4096);
  std::vector<double> want(2 * kN);
  for (int i = 0; i < kN; ++i) want[i] = 3.0 * i;
  // transpose(b) + 0 laid out row-major: element (r, s) of the (512, kN/512) transpose is b[s][r].
  const int rows = 512, cols = kN / 512;
  for (int r = 0; r < rows; ++r) {
    for (int s = 0; s < cols; ++s) want[kN + r * cols + s] = 5.0 + (s * 512 + r);
  }
  expect_array(c, {2 * kN}, want);
}

TEST(Placement, AnArraySomeoneHoldsKeepsItsOwnBuffer) {
  array x = leaf(0), y = leaf(1);
  array held = x * 2.0f;  // the user reads it after the concatenation was reused in place
  array c = concatenate({held, y * 1.0f}, 0);
  array d = c * 10.0f;  // c's only reader: its buffer is donated to d
  eval(d);
  std::vector<double> want(kN);
  for (int i = 0; i < kN; ++i) want[i] = 2.0 * i;
  expect_array(held, {kN}, want);
  EXPECT_DOUBLE_EQ(values(d)[kN + 3], 10.0 * 4);
}

TEST(Placement, APartReadTwiceOrAnEvalOutputIsNotPlaced) {
  array x = leaf(0);
  array p = x + 1.0f;
  array twice = concatenate({p, p}, 0);
  array q = x - 1.0f;
  array c = concatenate({q, x}, 0);
  eval(twice, c, q);  // q is an output of this eval too
  auto t = values(twice), v = values(c), w = values(q);
  for (int i : {0, 7, kN - 1}) {
    EXPECT_DOUBLE_EQ(t[i], i + 1.0);
    EXPECT_DOUBLE_EQ(t[kN + i], i + 1.0);
    EXPECT_DOUBLE_EQ(v[i], i - 1.0);
    EXPECT_DOUBLE_EQ(v[kN + i], i);
    EXPECT_DOUBLE_EQ(w[i], i - 1.0);
  }
  EXPECT_NE(q.raw_data(), c.raw_data());
}

TEST(Placement, NestedConcatenationsAndMixedDtypes) {
  array x = leaf(0), y = leaf(1), z = leaf(2);
  array outer = concatenate({concatenate({x * 1.0f, y * 1.0f}, 0), z * 1.0f}, 0);
  EXPECT_LE(peak_during_eval({outer}), 3 * kN * sizeof(float) + 4096);
  auto v = values(outer);
  EXPECT_DOUBLE_EQ(v[5], 5);
  EXPECT_DOUBLE_EQ(v[kN + 5], 6);
  EXPECT_DOUBLE_EQ(v[2 * kN + 5], 7);

  // A float16 part of a float32 concatenation is converted by the copy, never placed.
  array h = astype(x, float16) * array(1.0, float16);
  array m = concatenate({h, y * 1.0f}, 0);
  EXPECT_EQ(m.dtype(), float32);
  auto mv = values(m);
  EXPECT_DOUBLE_EQ(mv[100], 100);
  EXPECT_DOUBLE_EQ(mv[kN + 100], 101);
}

TEST(Placement, ConcatenationAlongAnInnerAxisCopiesAsBefore) {
  array a = reshape(arange(0.0, 6.0, 1.0, float32), {2, 3});
  array b = reshape(arange(10.0, 14.0, 1.0, float32), {2, 2});
  array c = concatenate({a * 1.0f, b * 1.0f}, 1);  // each part is strided in the output
  expect_array(c, {2, 5}, {0, 1, 2, 10, 11, 3, 4, 5, 12, 13});
}

namespace {
// A copy that ignores where eval put its output: it always allocates a buffer of its own.
class OwnBuffer : public UnaryPrimitive {
 public:
  void eval_cpu(const std::vector<array>& in, array& out) override {
    out.set_data(allocator::malloc(out.nbytes()));
    std::memcpy(out.raw_data(), in[0].raw_data(), out.nbytes());
  }
  const char* name() const override { return "OwnBuffer"; }
};
}  // namespace

// The plan check names a kernel that did not write where eval placed it; without the check the values
// are still right (the concatenation copies), which is why the check exists.
TEST(BufferPlan, ACheckCatchesAKernelThatIgnoresItsPlacement) {
  array x = leaf(0), y = leaf(1);
  auto build = [&] {
    array own(x.shape(), x.dtype(), std::make_shared<OwnBuffer>(), {x * 2.0f});
    return concatenate({own, y * 1.0f}, 0);
  };
  detail::set_check_buffer_plan(false);
  array c = build();
  eval(c);
  EXPECT_EQ(c.to_vector<float>()[3], 6.0f);
  EXPECT_EQ(c.to_vector<float>()[kN + 3], 4.0f);
  detail::set_check_buffer_plan(true);
  array d = build();
  EXPECT_THROW_MSG(eval(d), std::logic_error,
                   "[eval] buffer plan not honoured: OwnBuffer (262144) was placed in its consumer's buffer, but its "
                   "kernel wrote into a buffer of its own");
  // Kernels that honour it pass.
  array e = concatenate({x * 2.0f, y * 1.0f}, 0);
  EXPECT_NO_THROW(eval(e));
  detail::set_check_buffer_plan(false);
}

// An intermediate read twice by its last reader (a * a) is still that reader's to overwrite: every
// handle to it is one of the reader's input slots.
TEST(BufferPlan, AnInputReadTwiceByItsLastReaderIsDonated) {
  detail::set_fusion(false);
  array x = leaf(0);
  array a = exp(x * 0.0f);
  eval(a);  // evaluated, held by `a` only
  array b = a * a;
  a = array(0.0f);  // now only b's input list holds it, twice
  const size_t peak = peak_during_eval({b});
  detail::set_fusion(true);
  EXPECT_LE(peak, 4096u);  // b took a's buffer: nothing new the size of a part
  EXPECT_EQ(b.to_vector<float>()[7], 1.0f);
}

namespace {
// A doubling that names its input as a donor and then allocates a buffer of its own all the same.
class IgnoresDonor : public UnaryPrimitive {
 public:
  void eval_cpu(const std::vector<array>& in, array& out) override {
    out.set_data(allocator::malloc(out.nbytes()));
    const float* x = static_cast<const float*>(in[0].raw_data());
    float* y = static_cast<float*>(out.raw_data());
    for (size_t i = 0; i < out.size(); ++i) y[i] = 2 * x[i];
  }
  uint64_t donors(const std::vector<array>&, int) const override { return 1; }
  const char* name() const override { return "IgnoresDonor"; }
};
}  // namespace

TEST(BufferPlan, ACheckCatchesAKernelThatIgnoresADonatedBuffer) {
  array x = leaf(0);
  auto build = [&] { return array(x.shape(), x.dtype(), std::make_shared<IgnoresDonor>(), {x * 1.0f}); };
  detail::set_check_buffer_plan(false);
  array a = build();
  eval(a);
  EXPECT_EQ(a.to_vector<float>()[5], 10.0f);
  detail::set_check_buffer_plan(true);
  array b = build();
  EXPECT_THROW_MSG(eval(b), std::logic_error,
                   "[eval] buffer plan not honoured: IgnoresDonor (262144) was given the buffer of its input 0, but "
                   "its kernel wrote into a buffer of its own");
  detail::set_check_buffer_plan(false);
}

// Every kind of kernel that may take an input's buffer does, when nothing else reads the input (one
// buffer the size of the output during the eval: the input's), and leaves it alone when a caller
// still holds it (two), with the same values either way.
TEST(BufferPlan, KernelsTakeTheBufferEvalDonates) {
  const size_t bytes = kN * sizeof(float);
  array x = leaf(0);
  array w = ones({512}, float32);
  array small = reshape(arange(0.0, 512.0, 1.0, float32), {512, 1});
  array row = reshape(arange(0.0, 512.0, 1.0, float32), {1, 512});
  eval({w, small, row});
  struct Case {
    const char* name;
    std::function<array(const array&)> op;  // of a (512, 512) float32 intermediate
  };
  std::vector<Case> cases = {
      {"exp", [](const array& t) { return exp(t); }},
      {"where", [](const array& t) { return where(greater(t, array(1.0f)), t, array(0.0f)); }},
      {"layer_norm", [&](const array& t) { return fast::layer_norm(t, w, std::nullopt, 1e-5); }},
      {"softmax", [](const array& t) { return softmax(t, -1); }},
      {"gelu", [](const array& t) { return fast::gelu(t); }},
      {"slice_update", [&](const array& t) { return slice_update(t, row, {3, 0}, {4, 512}); }},
      {"put_along_axis", [&](const array& t) {
         return put_along_axis(t, zeros({1, 512}, int32), row, 0);
       }},
      {"addmm", [&](const array& t) { return addmm(t, small, row); }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    array held = reshape(x * 0.001f, {512, 512});
    eval(held);
    array want = c.op(held);
    eval(want);
    detail::set_check_buffer_plan(true);
    // Donated: the intermediate is read by the op alone.
    array t = reshape(x * 0.001f, {512, 512});
    array y = c.op(t);
    t = array(0.0f);
    EXPECT_LE(peak_during_eval({y}), bytes + 8192);
    // Not donated: the caller still holds the intermediate, which keeps its values.
    array u = reshape(x * 0.001f, {512, 512});
    eval(u);
    array z = c.op(u);
    eval(z);
    detail::set_check_buffer_plan(false);
    EXPECT_EQ(u.to_vector<float>(), held.to_vector<float>());
    EXPECT_EQ(y.to_vector<float>(), want.to_vector<float>());
    EXPECT_EQ(z.to_vector<float>(), want.to_vector<float>());
  }
}

// A kernel that reads its other inputs anywhere but where it writes never takes the buffer of an input
// it also reads as one of them: addmm(a, a, a) must not overwrite a while the product reads it, nor
// put_along_axis(a, idx, a) while it gathers the values.
TEST(BufferPlan, AnInputReadTwiceByAGemmOrAScatterIsNotOverwritten) {
  const int n = 512;
  array base = reshape(arange(0.0, double(n) * n, 1.0, float32), {n, n}) * (1.0f / (n * n));
  eval(base);
  array a = base * 1.0f;
  array got = addmm(a, a, a);
  a = array(0.0f);
  array want = add(matmul(base, base), base);
  auto gv = got.to_vector<float>(), wv = want.to_vector<float>();
  for (size_t i = 0; i < gv.size(); i += 997) EXPECT_NEAR(gv[i], wv[i], 1e-3f * std::abs(wv[i]) + 1e-5f) << i;

  array v = arange(0.0, 1000.0, 1.0, float32);
  array rev = arange(999.0, -1.0, -1.0, int32);
  array t = v * 1.0f;
  array flipped = put_along_axis(t, rev, t, 0);
  t = array(0.0f);
  auto fv = flipped.to_vector<float>();
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(fv[i], 999 - i) << i;
}
