// view: the bytes of an array as another dtype, against numpy's ndarray.view values; the layouts
// that are viewed in place and those copied first (as MLX's View); MLX's errors; no gradient.
#include "../test_utils.h"
#include "loom/core/primitive.h"

namespace loom {
namespace {

using testing::expect_array;
using testing::lcg_uniform;

// Expected values: numpy 1.x, e.g. np.array([1.0, -2.0, 0.5, 3.25], np.float32).view(np.uint32).
TEST(View, MatchesNumpy) {
  array f = array({1.0f, -2.0f, 0.5f, 3.25f});
  array u = view(f, uint32);
  EXPECT_EQ(u.dtype(), uint32);
  expect_array(u, {4}, {1065353216, 3221225472, 1056964608, 1078984704}, 0);

  // Smaller dtype: the last axis grows by the size ratio. np.arange(-3, 3, dtype=np.int32)
  // .reshape(2, 3).view(np.uint8)
  expect_array(view(reshape(arange(-3, 3), {2, 3}), uint8), {2, 12},
               {253, 255, 255, 255, 254, 255, 255, 255, 255, 255, 255, 255, 0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0}, 0);
  // Larger dtype: np.arange(250, 258).astype(np.uint8).reshape(2, 4).view(np.int16)
  expect_array(view(reshape(astype(arange(250, 258), uint8), {2, 4}), int16), {2, 2}, {-1030, -516, -2, 256}, 0);
  // np.array([1.5, -0.25, 65504], np.float16).view(np.int16)
  expect_array(view(array({1.5, -0.25, 65504.0}, {3}, float16), int16), {3}, {15872, -19456, 31743}, 0);
  // bfloat16 has no numpy dtype: its bits are the top half of float32's (exact for these values).
  expect_array(view(array({1.5f, -2.0f, 3.0f}, {3}, bfloat16), uint16), {3}, {16320, 49152, 16448}, 0);
  // np.array([0.1, -7.0]).view(np.int64) and .view(np.int32)
  array d = array({0.1, -7.0}, {2}, float64);
  EXPECT_EQ(view(d, int64).to_vector<int64_t>(), (std::vector<int64_t>{4591870180066957722, -4603804719079489536}));
  expect_array(view(d, int32), {4}, {-1717986918, 1069128089, 0, -1071906816}, 0);
  // And back: a round trip gives the same bits.
  EXPECT_EQ(view(view(d, uint8), float64).to_vector<double>(), (std::vector<double>{0.1, -7.0}));
  // 0-d, same size: np.array(1.0, np.float32).view(np.int32)
  expect_array(view(array(1.0f), int32), {}, {1065353216}, 0);
  // bool <-> uint8
  expect_array(view(array({true, false, true}), uint8), {3}, {1, 0, 1}, 0);
  array b = view(array({0, 2, 255}, {3}, uint8), bool_);
  EXPECT_EQ(b.dtype(), bool_);
  expect_array(b, {3}, {0, 1, 1}, 0);  // numpy: [False, True, True]
  expect_array(astype(b, int32), {3}, {0, 1, 1}, 0);  // stored as 0 / 1, so kernels read 1 (view.h)
}

TEST(View, SameDtypeIsTheInput) {
  array a = arange(4);
  EXPECT_EQ(view(a, int32).id(), a.id());
}

// x = np.arange(8, dtype=np.int32).reshape(2, 4) * 1000 + 7
array x_2x4() { return reshape(arange(8), {2, 4}) * 1000 + 7; }

TEST(View, StridedInputs) {
  // Last axis contiguous, smaller dtype: a view in place. x[:, 1:3].view(np.uint16)
  array s = slice(x_2x4(), {0, 1}, {2, 3});
  eval(s);
  array v = view(s, uint16);
  expect_array(v, {2, 4}, {1007, 0, 2007, 0, 5007, 0, 6007, 0}, 0);
  EXPECT_EQ(v.data_shared_ptr(), s.data_shared_ptr());
  EXPECT_EQ(v.raw_data(), s.raw_data());
  // Transposed: copied in row-major order first (numpy refuses; MLX copies).
  // np.ascontiguousarray(x.T).view(np.int16)
  expect_array(view(transpose(x_2x4()), int16), {4, 4},
               {7, 0, 4007, 0, 1007, 0, 5007, 0, 2007, 0, 6007, 0, 3007, 0, 7007, 0}, 0);
  // Larger dtype from a transposed input: a copy too.
  array t = transpose(reshape(astype(arange(8), uint8), {4, 2}));  // [[0, 2, 4, 6], [1, 3, 5, 7]]
  expect_array(view(t, uint16), {2, 2}, {2 * 256 + 0, 6 * 256 + 4, 3 * 256 + 1, 7 * 256 + 5}, 0);
  // Same size from a transposed input: in place, strides kept.
  array tf = transpose(reshape(array({1.0f, 2.0f, 3.0f, 4.0f}), {2, 2}));
  expect_array(view(tf, int32), {2, 2}, {1065353216, 1077936128, 1073741824, 1082130432}, 0);
  // A broadcast row.
  expect_array(view(broadcast_to(array({1.0f}), {3, 1}), int32), {3, 1}, {1065353216, 1065353216, 1065353216}, 0);
}

// MLX's test_view: broadcast and transposed inputs viewed as another dtype and back give the input
// again (bool is left out: Loom's bool views hold 0 / 1, see view.h).
TEST(View, StridedRoundTrips) {
  array base = astype(lcg_uniform({2, 4}, -100, 100, 9), int32);
  for (array a : {broadcast_to(base, {4, 2, 4}), transpose(astype(lcg_uniform({4, 4}, -100, 100, 10), int32))}) {
    for (Dtype t : {int16, float32, int64, uint8}) {
      SCOPED_TRACE(to_string(t));
      array back = view(view(a, t), int32);
      EXPECT_EQ(back.shape(), a.shape());
      EXPECT_EQ(back.to_vector<int32_t>(), array(a).to_vector<int32_t>());
    }
  }
}

TEST(View, Errors) {
  EXPECT_THROW_MSG(view(array(1.0f), uint8), std::invalid_argument, "[view]");
  EXPECT_THROW_MSG(view(array(1.0f), float64), std::invalid_argument, "0-d");
  EXPECT_THROW_MSG(view(zeros({2, 3}, uint8), int32), std::invalid_argument, "shape (2,3) of uint8 as int32");
  EXPECT_THROW_MSG(view(zeros({5}, int16), float32), std::invalid_argument, "10 bytes");
  EXPECT_NO_THROW(view(zeros({2, 4}, uint8), int32));
  EXPECT_NO_THROW(view(zeros({0, 4}, uint8), int32));
}

TEST(View, HasNoGradient) {
  // float16 bits read as bfloat16: floating on both sides, so autograd does reach the View.
  auto f = [](const std::vector<array>& p) {
    return std::vector<array>{astype(view(astype(p[0], float16), bfloat16), float32)};
  };
  EXPECT_THROW_MSG(vjp(f, {array({1.0f, 2.0f})}, {array({1.0f, 1.0f})}), std::invalid_argument, "View");
  EXPECT_THROW_MSG(jvp(f, {array({1.0f, 2.0f})}, {array({1.0f, 1.0f})}), std::invalid_argument, "View");
}

}  // namespace
}  // namespace loom
