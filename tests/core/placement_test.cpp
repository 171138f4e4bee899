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
                   "[eval] buffer plan not honoured: OwnBuffer (262144) was placed in the buffer of its consumer "
                   "Concatenate at element offset 0, but its kernel wrote into a buffer of its own");
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
