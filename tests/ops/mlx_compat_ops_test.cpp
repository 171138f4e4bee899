// Ops added under MLX's names because MLX's own tests use them (scripts/mlx_compat.py): contiguous,
// unflatten, divmod, arange(start, stop, dtype), linspace(..., endpoint, dtype), full_like of a scalar;
// MLX's overloads with a trailing StreamOrDevice and what its C++ API does without an axis (sort,
// softmax, flatten); round to decimals, pad's modes and cumsum's dtype.
// Expected values are numpy's (printed by /usr/bin/python3 with numpy; the calls are in comments).
#include "../test_utils.h"

using namespace loom;
using loom::testing::expect_array;

TEST(MlxCompatOps, ContiguousMakesRowMajorAndCopiesOnlyWhenNeeded) {
  // A broadcast is not contiguous: the result is a row-major copy with the broadcast values.
  array b = contiguous(broadcast_to(array({1, 2, 3}), {2, 2, 3}));
  eval(b);
  EXPECT_TRUE(b.flags().row_contiguous);
  EXPECT_EQ(b.strides(), (Strides{6, 3, 1}));
  EXPECT_EQ(b.to_vector<int>(), (std::vector<int>{1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3}));

  // A transpose is column-contiguous: kept as it is when allowed, copied to row-major otherwise.
  array x = array({1, 2, 3, 4, 5, 6}, {2, 3});
  eval(x);
  array t = transpose(x);
  array col = contiguous(t, true);
  array row = contiguous(t);
  eval(col, row);
  EXPECT_TRUE(col.flags().col_contiguous);
  EXPECT_EQ(col.strides(), (Strides{1, 3}));
  EXPECT_EQ(col.raw_data(), x.raw_data()) << "a column-major input must not be copied when allowed";
  EXPECT_TRUE(row.flags().row_contiguous);
  EXPECT_EQ(row.strides(), (Strides{2, 1}));
  EXPECT_NE(row.raw_data(), x.raw_data());
  EXPECT_EQ(row.to_vector<int>(), (std::vector<int>{1, 4, 2, 5, 3, 6}));

  // Already row-contiguous: the same buffer, no copy.
  array same = contiguous(x);
  eval(same);
  EXPECT_EQ(same.raw_data(), x.raw_data());

  // A small row-contiguous slice of a big buffer is copied (MLX's rule), so the big buffer can go.
  array big = zeros({1 << 16});
  eval(big);
  array head = contiguous(slice(big, {0}, {4}));
  eval(head);
  EXPECT_NE(head.raw_data(), big.raw_data());
  EXPECT_EQ(head.to_vector<float>(), (std::vector<float>{0, 0, 0, 0}));
}

TEST(MlxCompatOps, ContiguousGradientIsTheIdentity) {
  // d/dx sum(w * contiguous(x^T)) = w^T.
  array x = array({1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f}, {2, 3});
  array w = array({1.0f, 10.0f, 100.0f, 1000.0f, 1e4f, 1e5f}, {3, 2});
  auto g = grad([&](const array& p) { return sum(w * contiguous(transpose(p))); })(x);
  expect_array(g, {2, 3}, {1, 100, 1e4, 10, 1000, 1e5});
  auto [out, tan] = jvp([](const std::vector<array>& p) { return std::vector<array>{contiguous(transpose(p[0]))}; },
                        {x}, {full({2, 3}, 2.0f)});
  expect_array(tan[0], {3, 2}, {2, 2, 2, 2, 2, 2});
}

TEST(MlxCompatOps, Unflatten) {
  array x = arange(24);
  EXPECT_EQ(unflatten(x, 0, {2, 3, 4}).shape(), (Shape{2, 3, 4}));
  array y = reshape(x, {4, 6});
  array u = unflatten(y, -1, {3, -1});
  EXPECT_EQ(u.shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(u.to_vector<int>(), x.to_vector<int>());
  EXPECT_EQ(flatten(unflatten(y, 1, {2, 3}), 1, 2).shape(), y.shape());
  EXPECT_THROW_MSG(unflatten(y, 1, {4, 2}), std::invalid_argument, "[unflatten] cannot unflatten axis 1 of length 6");
  EXPECT_THROW_MSG(unflatten(y, 1, {-1, -1}), std::invalid_argument, "only one dimension can be -1");
  EXPECT_THROW_MSG(unflatten(y, 1, {}), std::invalid_argument, "[unflatten] the shape to unflatten to is empty");
  EXPECT_THROW_MSG(unflatten(y, 2, {6}), std::out_of_range, "[unflatten] axis 2");
  EXPECT_THROW_MSG(unflatten(y, 1, {-1, 4}), std::invalid_argument, "[unflatten] cannot unflatten axis 1");
}

TEST(MlxCompatOps, DivmodIsFloorDivideAndRemainder) {
  // np.divmod(np.array([7,-7,7,-7], np.int32), np.array([2,2,-2,-2], np.int32))
  auto qr = divmod(array({7, -7, 7, -7}), array({2, 2, -2, -2}));
  ASSERT_EQ(qr.size(), 2u);
  EXPECT_EQ(qr[0].dtype(), int32);
  EXPECT_EQ(qr[0].to_vector<int>(), (std::vector<int>{3, -4, -4, 3}));
  EXPECT_EQ(qr[1].to_vector<int>(), (std::vector<int>{1, 1, -1, -1}));
  // np.divmod(np.array([5.5,-5.5,0.75], np.float32), np.array([2,2,-0.5], np.float32))
  qr = divmod(array({5.5f, -5.5f, 0.75f}), array({2.0f, 2.0f, -0.5f}));
  expect_array(qr[0], {3}, {2, -3, -2});
  expect_array(qr[1], {3}, {1.5, 0.5, -0.25});
  EXPECT_THROW(divmod(zeros({2}), zeros({3})), std::invalid_argument);
}

TEST(MlxCompatOps, ArangeAndLinspaceOverloads) {
  // np.arange(2, 6, dtype=np.float32)
  array a = arange(2, 6, float32);
  EXPECT_EQ(a.dtype(), float32);
  expect_array(a, {4}, {2, 3, 4, 5});
  EXPECT_EQ(arange(0.5, 3.0, float64).to_vector<double>(), (std::vector<double>{0.5, 1.5, 2.5}));
  EXPECT_THROW_MSG(arange(0, 3, bool_), std::invalid_argument, "[arange]");
  // np.linspace(0, 1, 5, endpoint=False) and np.linspace(-1, 2, 4, endpoint=False, dtype=np.float32)
  expect_array(linspace(0, 1, 5, false, float64), {5}, {0.0, 0.2, 0.4, 0.6000000000000001, 0.8}, 1e-15);
  expect_array(linspace(-1, 2, 4, false), {4}, {-1.0, -0.25, 0.5, 1.25});
  expect_array(linspace(-1, 2, 4, true), {4}, {-1, 0, 1, 2});
  expect_array(linspace(3, 9, 1, false), {1}, {3});
  EXPECT_EQ(linspace(0, 1, 0, false).size(), 0u);
  EXPECT_THROW_MSG(linspace(0, 1, -1, false), std::invalid_argument, "[linspace]");
}

TEST(MlxCompatOps, FullLikeOfAScalar) {
  array x = zeros({2, 2}, int32);
  array f = full_like(x, 2.5f, float32);
  EXPECT_EQ(f.dtype(), float32);
  expect_array(f, {2, 2}, {2.5, 2.5, 2.5, 2.5});
  array g = full_like(x, 7.9);  // in x's dtype, as MLX: the value is converted
  EXPECT_EQ(g.dtype(), int32);
  EXPECT_EQ(g.to_vector<int>(), (std::vector<int>{7, 7, 7, 7}));
}

// MLX's ops.h has a form taking `s` right after the required arguments wherever later arguments have
// defaults; each must compile and mean what the form without `s` means.
TEST(MlxCompatOps, OverloadsThatTakeTheStreamAfterTheRequiredArguments) {
  const StreamOrDevice s = Device::cpu;
  array x = array({1.0f, -2.0f, 3.0f, 4.0f, 5.0f, -6.0f}, {2, 3});
  expect_array(zeros({2}, s), {2}, {0, 0});
  expect_array(ones({2}, s), {2}, {1, 1});
  expect_array(eye(2, 3, s), {2, 3}, {1, 0, 0, 0, 1, 0});
  expect_array(eye(2, 3, 1, s), {2, 3}, {0, 1, 0, 0, 0, 1});
  expect_array(eye(2, s), {2, 2}, {1, 0, 0, 1});
  expect_array(identity(2, s), {2, 2}, {1, 0, 0, 1});
  expect_array(arange(0.0, 2.0, s), {2}, {0, 1});
  expect_array(arange(0.0, 1.0, 0.5, s), {2}, {0, 0.5});
  expect_array(arange(1, 3, s), {2}, {1, 2});
  EXPECT_EQ(zeros_like(x, int32, s).dtype(), int32);
  EXPECT_EQ(ones_like(x, float16).dtype(), float16);
  expect_array(full({2}, 2.5, s), {2}, {2.5, 2.5});
  EXPECT_EQ(full({2}, 2.5, s).dtype(), float32);  // a C++ double makes float32, as MLX
  expect_array(sum(x, s), {}, {5});
  expect_array(mean(x, s), {}, {5.0 / 6});
  expect_array(prod(x, s), {}, {720});
  expect_array(max(x, s), {}, {5});
  expect_array(min(x, s), {}, {-6});
  expect_array(all(x, s), {}, {1});
  expect_array(any(x, s), {}, {1});
  expect_array(argmax(x, s), {}, {4});
  expect_array(argmin(x, s), {}, {5});
  // np.var, np.std and np.median of [1, -2, 3, 4, 5, -6] (float32)
  expect_array(var(x, s), {}, {14.472222328186035}, 1e-6);
  expect_array(loom::std(x, s), {}, {3.8042373657226562}, 1e-6);
  expect_array(median(x, s), {}, {2});
  expect_array(logsumexp(x, s), {}, {5.420326756010547}, 1e-6);  // np.log(np.exp(x).sum())
  expect_array(flatten(x, s), {6}, {1, -2, 3, 4, 5, -6});
  EXPECT_EQ(split(x, 2, s).size(), 2u);
  EXPECT_EQ(split(x, std::vector<int>{1}, s)[1].shape(), (Shape{1, 3}));
  EXPECT_EQ(concatenate({x, x}, s).shape(), (Shape{4, 3}));
  EXPECT_EQ(stack({x, x}, s).shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(unstack(x, s).size(), 2u);
  expect_array(cumsum(x, 1, false, true, s), {2, 3}, {1, -1, 2, 4, 9, 3});
  expect_array(cumsum(x, false, true, s), {6}, {1, -1, 2, 6, 11, 5});
  expect_array(round(array({2.5f}), s), {1}, {2});
  expect_array(clip(x, array(0.0f)), {2, 3}, {1, 0, 3, 4, 5, 0});
  EXPECT_THROW_MSG(clip(x), std::invalid_argument, "[clip]");  // as MLX: at least one bound
}

// Without an axis MLX's C++ sort, argsort, topk, partition and argpartition work on the flattened
// array, and softmax over every axis (Python's mx.sort takes the last axis by default).
TEST(MlxCompatOps, WithoutAnAxisSortAndSoftmaxTakeTheWholeArray) {
  array x = array({3.0f, 1.0f, 2.0f, 0.0f}, {2, 2});
  expect_array(sort(x), {4}, {0, 1, 2, 3});
  expect_array(argsort(x), {4}, {3, 1, 2, 0});
  expect_array(topk(x, 2), {2}, {2, 3});
  expect_array(partition(x, 1), {4}, {0, 1, 2, 3});  // partitioned about the second smallest
  EXPECT_EQ(take(flatten(x), argpartition(x, 1)).to_vector<float>()[1], 1.0f);
  expect_array(sort(x, -1), {2, 2}, {1, 3, 0, 2});
  // np.exp(x) / np.exp(x).sum() of [[1, 2], [3, 4]]
  array y = array({1.0f, 2.0f, 3.0f, 4.0f}, {2, 2});
  expect_array(softmax(y), {2, 2}, {0.03205860328008499, 0.08714431874203257, 0.23688281808991013, 0.6439142598879722});
  expect_array(softmax(y, true), {2, 2}, {0.03205860328008499, 0.08714431874203257, 0.23688281808991013, 0.6439142598879722});
  expect_array(softmax(y, -1), {2, 2}, {0.2689414213699951, 0.7310585786300049, 0.2689414213699951, 0.7310585786300049});
}

// MLX clamps flatten's axes to the array's; only a range empty after clamping (or wholly outside) throws.
TEST(MlxCompatOps, FlattenClampsItsAxes) {
  array x = zeros({2, 3, 4});
  EXPECT_EQ(flatten(x, -10, 10).shape(), (Shape{24}));
  EXPECT_EQ(flatten(x, 1, 10).shape(), (Shape{2, 12}));
  EXPECT_EQ(flatten(x, -7, 1).shape(), (Shape{6, 4}));
  EXPECT_EQ(flatten(x, 2, 2).shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(flatten(zeros({}), 0, 0).shape(), (Shape{1}));
  EXPECT_THROW_MSG(flatten(x, 2, 1), std::invalid_argument, "[flatten] start_axis 2 is after end_axis 1");
  EXPECT_THROW_MSG(flatten(x, 3, 5), std::invalid_argument, "[flatten] start_axis 3 is out of range");
  EXPECT_THROW_MSG(flatten(x, 0, -5), std::invalid_argument, "[flatten] end_axis -5 is out of range");
}

TEST(MlxCompatOps, RoundToDecimals) {
  // np.round(np.array([1.2345, -2.5551, 125.0, 0.125], np.float32), 2): halves go to even (12.5 -> 12)
  expect_array(round(array({1.2345f, -2.5551f, 125.0f, 0.125f}), 2), {4},
               {1.2300000190734863, -2.559999942779541, 125.0, 0.11999999731779099}, 1e-7);
  // np.round([1234, -1250, 1349], -2): integers stay integers
  array r = round(array({1234, -1250, 1349}), -2);
  EXPECT_EQ(r.dtype(), int32);
  EXPECT_EQ(r.to_vector<int>(), (std::vector<int>{1200, -1200, 1300}));
  array h = round(array({1.25f, 2.75f}, float16), 1);
  EXPECT_EQ(h.dtype(), float16);
  expect_array(h, {2}, {1.2, 2.8}, 1e-3);
  // The gradient of a rounding is zero away from its jumps.
  auto g = grad([](const array& v) { return sum(round(v, 1)); })(array({0.123f, 0.456f}));
  expect_array(g, {2}, {0, 0});
  // complex64: each part (np.round(1.26 - 2.35j, 1) = 1.3 - 2.4j; 2.35 is 2.3500000954 in float32)
  array z = round(array(std::complex<float>(1.26f, -2.35f)), 1);
  EXPECT_EQ(z.dtype(), complex64);
  auto zv = z.item<complex64_t>();
  EXPECT_NEAR(zv.real(), 1.3, 1e-6);
  EXPECT_NEAR(zv.imag(), -2.4, 1e-6);
}

TEST(MlxCompatOps, PadModes) {
  array a = array({1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f}, {2, 3});
  const std::vector<std::pair<int, int>> w{{1, 2}, {2, 4}};
  // np.pad(a, ((1, 2), (2, 4)), mode=m)
  expect_array(pad(a, w, array(0), "edge"), {5, 9},
               {1, 1, 1, 2, 3, 3, 3, 3, 3, 1, 1, 1, 2, 3, 3, 3, 3, 3, 4, 4, 4, 5, 6, 6, 6, 6, 6,
                4, 4, 4, 5, 6, 6, 6, 6, 6, 4, 4, 4, 5, 6, 6, 6, 6, 6});
  expect_array(pad(a, w, array(0), "reflect"), {5, 9},
               {6, 5, 4, 5, 6, 5, 4, 5, 6, 3, 2, 1, 2, 3, 2, 1, 2, 3, 6, 5, 4, 5, 6, 5, 4, 5, 6,
                3, 2, 1, 2, 3, 2, 1, 2, 3, 6, 5, 4, 5, 6, 5, 4, 5, 6});
  expect_array(pad(a, w, array(0), "symmetric"), {5, 9},
               {2, 1, 1, 2, 3, 3, 2, 1, 1, 2, 1, 1, 2, 3, 3, 2, 1, 1, 5, 4, 4, 5, 6, 6, 5, 4, 4,
                5, 4, 4, 5, 6, 6, 5, 4, 4, 2, 1, 1, 2, 3, 3, 2, 1, 1});
  // np.pad([7.], (2, 3), mode="reflect"): a single value repeats
  expect_array(pad(array({7.0f}), std::pair<int, int>{2, 3}, array(0), "reflect"), {6}, {7, 7, 7, 7, 7, 7});
  expect_array(pad(a, {1, 1}), {4, 5}, {0, 0, 0, 0, 0, 0, 1, 2, 3, 0, 0, 4, 5, 6, 0, 0, 0, 0, 0, 0});
  expect_array(pad(a, std::vector<int>{1}, {1}, {0}, array(0), "edge"), {2, 4}, {1, 1, 2, 3, 4, 4, 5, 6});
  // Each source element's gradient counts the places it was copied to: "edge" padding of [1, 2, 3] by
  // 2 on each side holds the first and the last value three times each.
  auto g = grad([](const array& v) { return sum(pad(v, 2, array(0), "edge") * 1.0f); })(array({1.0f, 2.0f, 3.0f}));
  expect_array(g, {3}, {3, 1, 3});
  EXPECT_THROW_MSG(pad(a, 1, array(0), "wrap"), std::invalid_argument, "[pad] mode must be");
  EXPECT_THROW_MSG(pad(zeros({0, 2}), 1, array(0), "edge"), std::invalid_argument, "cannot pad axis 0, which is empty");
  expect_array(pad(zeros({0, 2}), std::vector<int>{1}, {1}, {1}, array(0), "edge"), {0, 4}, {});
}

TEST(MlxCompatOps, CumsumAndCumprodTakeADtype) {
  array b = array({true, true, false, true});
  array c = cumsum(b, 0, false, true, float32);
  EXPECT_EQ(c.dtype(), float32);
  expect_array(c, {4}, {1, 2, 2, 3});
  array i = array({100, 100, 100}, int8);
  array p = cumprod(i, false, true, int32);  // no wrap in int32
  EXPECT_EQ(p.dtype(), int32);
  EXPECT_EQ(p.to_vector<int>(), (std::vector<int>{100, 10000, 1000000}));
  EXPECT_EQ(cumsum(array({1.5f, 2.5f}), 0, false, true, int32).to_vector<int>(), (std::vector<int>{1, 3}));
}
