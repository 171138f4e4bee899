// Shape ops and views: values, which results share the input's buffer, numpy slicing rules,
// slice_update, concatenate/stack/split, pad, tile, repeat and every bad input.
#include <cstdint>
#include <limits>

#include "../test_utils.h"

using namespace loom;
using loom::testing::expect_array;

namespace {

std::vector<double> iota(int n, double start = 0) {
  std::vector<double> v(n);
  for (int i = 0; i < n; ++i) v[i] = start + i;
  return v;
}

array iota_array(Shape shape, Dtype d = float32) {
  size_t n = 1;
  for (int s : shape) n *= s;
  return reshape(arange(0.0, double(n), 1.0, d), shape);
}

// The byte address of a view relative to its base's first element, in elements.
int64_t elem_offset(array view, array base) {
  view.eval();
  base.eval();
  return (static_cast<char*>(view.raw_data()) - static_cast<char*>(base.raw_data())) /
         static_cast<int64_t>(base.itemsize());
}

}  // namespace

TEST(Reshape, ValuesAndInference) {
  array x = iota_array({2, 3, 4});
  expect_array(reshape(x, {6, 4}), {6, 4}, iota(24));
  expect_array(reshape(x, {-1, 4}), {6, 4}, iota(24));
  expect_array(reshape(x, {4, -1}), {4, 6}, iota(24));
  expect_array(reshape(x, {-1}), {24}, iota(24));
  expect_array(reshape(x, {2, -1, 2}), {2, 6, 2}, iota(24));
  // 0-d and size-1 shapes
  expect_array(reshape(array(7.0f), {1, 1}), {1, 1}, {7});
  expect_array(reshape(array({7.0f}), {}), {}, {7});
  expect_array(reshape(array({7.0f}), {-1}), {1}, {7});
  // empty
  expect_array(reshape(zeros({0, 3}), {3, 0}), {3, 0}, {});
  expect_array(reshape(zeros({0, 3}), {-1, 3}), {0, 3}, {});
  expect_array(reshape(zeros({2, 0}), {0}), {0}, {});
}

TEST(Reshape, ViewWhenContiguousCopyOtherwise) {
  array x = iota_array({4, 3});
  array r = reshape(x, {2, 6});
  EXPECT_EQ(elem_offset(r, x), 0);
  EXPECT_EQ(r.raw_data(), x.raw_data());
  // a contiguous row slice reshapes as a view at its offset
  array rows = slice(x, {1, 0}, {3, 3});
  array rr = reshape(rows, {6});
  EXPECT_EQ(elem_offset(rr, x), 3);
  expect_array(rr, {6}, {3, 4, 5, 6, 7, 8});
  // a transposed array needs a copy in row-major order
  array t = transpose(iota_array({2, 3}));  // [[0,3],[1,4],[2,5]]
  array f = reshape(t, {6});
  expect_array(f, {6}, {0, 3, 1, 4, 2, 5});
  EXPECT_NE(f.raw_data(), t.raw_data());
  // a column slice (gaps) needs a copy as well
  array c = slice(x, {0, 1}, {4, 3});
  expect_array(reshape(c, {8}), {8}, {1, 2, 4, 5, 7, 8, 10, 11});
  // a negative-stride view
  expect_array(reshape(slice(iota_array({6}), {-1}, {-7}, {-1}), {2, 3}), {2, 3}, {5, 4, 3, 2, 1, 0});
  // a broadcast view
  expect_array(reshape(broadcast_to(array({1.0f, 2.0f}), {2, 2}), {4}), {4}, {1, 2, 1, 2});
  // squeeze/expand_dims/flatten of contiguous arrays are views
  array e = expand_dims(x, 1);
  EXPECT_EQ(elem_offset(e, x), 0);
  EXPECT_EQ(elem_offset(squeeze(e), x), 0);
  EXPECT_EQ(elem_offset(flatten(x), x), 0);
  // reshaping to the same shape is the same array
  EXPECT_EQ(reshape(x, {4, 3}).id(), x.id());
}

TEST(Reshape, Errors) {
  array x = zeros({2, 3});
  EXPECT_THROW_MSG(reshape(x, {4, 2}), std::invalid_argument, "[reshape]");
  EXPECT_THROW_MSG(reshape(x, {4, 2}), std::invalid_argument, "(2,3)");
  EXPECT_THROW_MSG(reshape(x, {-1, -1}), std::invalid_argument, "more than one -1");
  EXPECT_THROW_MSG(reshape(x, {-1, 4}), std::invalid_argument, "[reshape] cannot infer");
  EXPECT_THROW_MSG(reshape(x, {-2, -3}), std::invalid_argument, "negative dimension");
  EXPECT_THROW_MSG(reshape(zeros({0, 3}), {-1, 0}), std::invalid_argument, "[reshape]");
  EXPECT_THROW_MSG(reshape(x, {}), std::invalid_argument, "[reshape]");
}

TEST(Flatten, Axes) {
  array x = iota_array({2, 3, 4});
  expect_array(flatten(x), {24}, iota(24));
  expect_array(flatten(x, 1), {2, 12}, iota(24));
  expect_array(flatten(x, 0, 1), {6, 4}, iota(24));
  expect_array(flatten(x, -2, -1), {2, 12}, iota(24));
  expect_array(flatten(x, 1, 1), {2, 3, 4}, iota(24));
  expect_array(flatten(array(3.0f)), {1}, {3});
  expect_array(flatten(transpose(iota_array({2, 2}))), {4}, {0, 2, 1, 3});
  EXPECT_THROW_MSG(flatten(x, 2, 1), std::invalid_argument, "[flatten]");
  // As MLX, axes past either end are clamped to the array's (mlx_compat_ops_test has the errors).
  expect_array(flatten(x, 0, 3), {24}, iota(24));
  expect_array(flatten(x, -4), {24}, iota(24));
}

TEST(Transpose, PermutationsAreViews) {
  array x = iota_array({2, 3, 4});
  array t = transpose(x);
  EXPECT_EQ(t.shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(elem_offset(t, x), 0);
  EXPECT_EQ(t.strides(), (Strides{1, 4, 12}));
  std::vector<double> want;
  for (int k = 0; k < 4; ++k)
    for (int j = 0; j < 3; ++j)
      for (int i = 0; i < 2; ++i) want.push_back(12 * i + 4 * j + k);
  expect_array(t, {4, 3, 2}, want);
  array p = transpose(x, {1, -1, 0});  // (3,4,2)
  want.clear();
  for (int j = 0; j < 3; ++j)
    for (int k = 0; k < 4; ++k)
      for (int i = 0; i < 2; ++i) want.push_back(12 * i + 4 * j + k);
  expect_array(p, {3, 4, 2}, want);
  EXPECT_EQ(elem_offset(p, x), 0);
  // transposing twice restores the order; identity permutations return the input
  expect_array(transpose(transpose(x, {2, 0, 1}), {1, 2, 0}), {2, 3, 4}, iota(24));
  EXPECT_EQ(transpose(x, {0, 1, 2}).id(), x.id());
  expect_array(transpose(array({1.0f, 2.0f})), {2}, {1, 2});
  expect_array(transpose(array(1.0f)), {}, {1});
  // transposing a slice is a view of the same buffer
  array s = slice(x, {1, 0, 1}, {2, 3, 4});
  EXPECT_EQ(elem_offset(transpose(s), x), 13);
  EXPECT_THROW_MSG(transpose(x, {0, 1}), std::invalid_argument, "[transpose]");
  EXPECT_THROW_MSG(transpose(x, {0, 1, 1}), std::invalid_argument, "[transpose] axis 1 is repeated");
  EXPECT_THROW_MSG(transpose(x, {0, 2, -1}), std::invalid_argument, "repeated");
  EXPECT_THROW_MSG(transpose(x, {0, 1, 3}), std::out_of_range, "[transpose]");
}

TEST(Transpose, SwapaxesAndMoveaxis) {
  array x = iota_array({2, 3, 4});
  array s = swapaxes(x, 0, 2);
  EXPECT_EQ(s.shape(), (Shape{4, 3, 2}));
  expect_array(s, {4, 3, 2}, transpose(x).to_vector<double>());
  EXPECT_EQ(swapaxes(x, -1, -2).shape(), (Shape{2, 4, 3}));
  expect_array(swapaxes(iota_array({2, 3}), 0, 1), {3, 2}, {0, 3, 1, 4, 2, 5});
  EXPECT_EQ(swapaxes(x, 1, 1).id(), x.id());
  EXPECT_EQ(elem_offset(swapaxes(x, 0, 1), x), 0);
  array m = moveaxis(x, 0, -1);
  EXPECT_EQ(m.shape(), (Shape{3, 4, 2}));
  expect_array(m, {3, 4, 2}, transpose(x, {1, 2, 0}).to_vector<double>());
  array m2 = moveaxis(x, -1, 0);
  EXPECT_EQ(m2.shape(), (Shape{4, 2, 3}));
  std::vector<double> want;
  for (int k = 0; k < 4; ++k)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j) want.push_back(12 * i + 4 * j + k);
  expect_array(m2, {4, 2, 3}, want);
  EXPECT_EQ(moveaxis(x, 1, 2).shape(), (Shape{2, 4, 3}));
  EXPECT_THROW_MSG(swapaxes(x, 0, 3), std::out_of_range, "[swapaxes]");
  EXPECT_THROW_MSG(moveaxis(x, -4, 0), std::out_of_range, "[moveaxis]");
  EXPECT_THROW_MSG(moveaxis(x, 0, 3), std::out_of_range, "[moveaxis]");
}

TEST(Squeeze, AndExpandDims) {
  array x = reshape(iota_array({6}), {1, 3, 1, 2});
  EXPECT_EQ(squeeze(x).shape(), (Shape{3, 2}));
  EXPECT_EQ(squeeze(x, 0).shape(), (Shape{3, 1, 2}));
  EXPECT_EQ(squeeze(x, -2).shape(), (Shape{1, 3, 2}));
  EXPECT_EQ(squeeze(x, {0, -2}).shape(), (Shape{3, 2}));
  expect_array(squeeze(x), {3, 2}, iota(6));
  EXPECT_EQ(squeeze(array(1.0f)).shape(), Shape{});
  EXPECT_EQ(squeeze(zeros({1, 0, 1})).shape(), (Shape{0}));
  EXPECT_THROW_MSG(squeeze(x, 1), std::invalid_argument, "[squeeze] axis 1");
  EXPECT_THROW_MSG(squeeze(x, 1), std::invalid_argument, "(1,3,1,2)");
  EXPECT_THROW_MSG(squeeze(x, {0, 0}), std::invalid_argument, "[squeeze]");
  EXPECT_THROW_MSG(squeeze(x, 4), std::out_of_range, "[squeeze]");

  array y = iota_array({2, 3});
  EXPECT_EQ(expand_dims(y, 0).shape(), (Shape{1, 2, 3}));
  EXPECT_EQ(expand_dims(y, 2).shape(), (Shape{2, 3, 1}));
  EXPECT_EQ(expand_dims(y, -1).shape(), (Shape{2, 3, 1}));
  EXPECT_EQ(expand_dims(y, -3).shape(), (Shape{1, 2, 3}));
  EXPECT_EQ(expand_dims(y, {0, 3}).shape(), (Shape{1, 2, 3, 1}));
  EXPECT_EQ(expand_dims(y, {0, -1}).shape(), (Shape{1, 2, 3, 1}));
  EXPECT_EQ(expand_dims(y, {1, 2}).shape(), (Shape{2, 1, 1, 3}));
  EXPECT_EQ(expand_dims(array(1.0f), 0).shape(), (Shape{1}));
  expect_array(expand_dims(transpose(y), 1), {3, 1, 2}, {0, 3, 1, 4, 2, 5});
  EXPECT_THROW_MSG(expand_dims(y, 3), std::out_of_range, "[expand_dims]");
  EXPECT_THROW_MSG(expand_dims(y, -4), std::out_of_range, "[expand_dims]");
  EXPECT_THROW_MSG(expand_dims(y, {1, 1}), std::invalid_argument, "[expand_dims]");
  EXPECT_THROW_MSG(expand_dims(y, {0, -4}), std::invalid_argument, "[expand_dims]");
}

TEST(Broadcast, ToShapes) {
  array r = array({1.0f, 2.0f, 3.0f});
  array b = broadcast_to(r, {2, 3});
  expect_array(b, {2, 3}, {1, 2, 3, 1, 2, 3});
  EXPECT_EQ(elem_offset(b, r), 0);
  EXPECT_EQ(b.strides()[0], 0);
  array c = broadcast_to(array({1, 2, 3}, {3, 1}), {2, 3, 4});
  std::vector<double> want;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) want.push_back(j + 1);
  expect_array(c, {2, 3, 4}, want);
  expect_array(broadcast_to(array(5), {2, 2}), {2, 2}, {5, 5, 5, 5});
  expect_array(broadcast_to(array({1.0f, 2.0f}, {1, 2}), {0, 2}), {0, 2}, {});
  EXPECT_EQ(broadcast_to(r, {3}).id(), r.id());
  // broadcasting a transposed view keeps its strides
  array t = transpose(iota_array({2, 3}));  // (3,2)
  array bt = broadcast_to(t, {2, 3, 2});
  EXPECT_EQ(elem_offset(bt, t), 0);
  expect_array(bt, {2, 3, 2}, {0, 3, 1, 4, 2, 5, 0, 3, 1, 4, 2, 5});
  EXPECT_THROW_MSG(broadcast_to(r, {4}), std::invalid_argument, "[broadcast_to]");
  EXPECT_THROW_MSG(broadcast_to(r, {4}), std::invalid_argument, "(3)");
  EXPECT_THROW_MSG(broadcast_to(zeros({2, 3}), {3}), std::invalid_argument, "[broadcast_to]");
  EXPECT_THROW_MSG(broadcast_to(zeros({2, 1}), {2, 0, 1}), std::invalid_argument, "[broadcast_to]");

  EXPECT_EQ(broadcast_shapes({2, 1, 3}, {4, 1}), (Shape{2, 4, 3}));
  EXPECT_EQ(broadcast_shapes({}, {2}), (Shape{2}));
  EXPECT_EQ(broadcast_shapes({0}, {1}), (Shape{0}));
  EXPECT_THROW_MSG(broadcast_shapes({2}, {3}), std::invalid_argument, "[broadcast_shapes]");
  auto arrs = broadcast_arrays({array({1, 2}), array({3}, {1, 1}), array(4.0f)});
  ASSERT_EQ(arrs.size(), 3u);
  for (auto& a : arrs) EXPECT_EQ(a.shape(), (Shape{1, 2}));
  expect_array(arrs[1], {1, 2}, {3, 3});
  EXPECT_EQ(arrs[2].dtype(), float32);
  EXPECT_THROW_MSG(broadcast_arrays({zeros({2}), zeros({3})}), std::invalid_argument, "broadcast");
}

TEST(Slice, NumpyRules) {
  array x = iota_array({10});
  auto s = [&](int a, int b, int st) { return slice(x, {a}, {b}, {st}); };
  expect_array(s(2, 7, 1), {5}, {2, 3, 4, 5, 6});
  expect_array(s(0, 10, 3), {4}, {0, 3, 6, 9});
  expect_array(s(1, 10, 3), {3}, {1, 4, 7});
  expect_array(s(-3, 10, 1), {3}, {7, 8, 9});
  expect_array(s(-3, -1, 1), {2}, {7, 8});
  // clamped bounds
  expect_array(s(5, 100, 1), {5}, {5, 6, 7, 8, 9});
  expect_array(s(-100, 3, 1), {3}, {0, 1, 2});
  expect_array(s(-100, 100, 4), {3}, {0, 4, 8});
  expect_array(s(20, 30, 1), {0}, {});
  // negative steps
  expect_array(s(-1, -11, -1), {10}, {9, 8, 7, 6, 5, 4, 3, 2, 1, 0});
  expect_array(s(9, -100, -1), {10}, {9, 8, 7, 6, 5, 4, 3, 2, 1, 0});
  expect_array(s(8, 2, -2), {3}, {8, 6, 4});
  expect_array(s(100, -100, -3), {4}, {9, 6, 3, 0});
  expect_array(s(-2, 0, -3), {3}, {8, 5, 2});
  expect_array(s(3, -100, -1), {4}, {3, 2, 1, 0});
  // empty
  expect_array(s(5, 2, 1), {0}, {});
  expect_array(s(2, 5, -1), {0}, {});
  expect_array(s(5, 5, 1), {0}, {});
  // the full slice is the input itself
  EXPECT_EQ(slice(x, {0}, {10}).id(), x.id());
  // extreme bounds clamp without overflow
  constexpr int kMin = std::numeric_limits<int>::min(), kMax = std::numeric_limits<int>::max();
  EXPECT_EQ(slice(x, {kMin}, {kMax}).id(), x.id());
  expect_array(s(kMax, kMin, -1), {10}, {9, 8, 7, 6, 5, 4, 3, 2, 1, 0});
  expect_array(s(kMin, kMax, kMax), {1}, {0});
  expect_array(s(kMax, kMin, kMin), {1}, {9});
}

TEST(Slice, ViewsAndMultipleAxes) {
  array m = iota_array({4, 5});
  array a = slice(m, {1, 2}, {3, 5});
  expect_array(a, {2, 3}, {7, 8, 9, 12, 13, 14});
  EXPECT_EQ(elem_offset(a, m), 7);
  array b = slice(m, {3, 4}, {-100, -100}, {-2, -3});
  expect_array(b, {2, 2}, {19, 16, 9, 6});
  EXPECT_EQ(elem_offset(b, m), 19);
  EXPECT_EQ(b.strides(), (Strides{-10, -3}));
  // slices of slices and of transposes are views of the original buffer
  array c = slice(a, {1, 1}, {2, 3});
  expect_array(c, {1, 2}, {13, 14});
  EXPECT_EQ(elem_offset(c, m), 13);
  array t = slice(transpose(m), {1, 0}, {3, 4}, {1, 2});  // columns 1..2, rows 0 and 2
  expect_array(t, {2, 2}, {1, 11, 2, 12});
  EXPECT_EQ(elem_offset(t, m), 1);
  array e = slice(m, {2, 0}, {2, 5});
  EXPECT_EQ(e.shape(), (Shape{0, 5}));
  expect_array(e, {0, 5}, {});
  // 0-d and 3-D
  EXPECT_EQ(slice(array(1.0f), {}, {}).shape(), Shape{});
  array x3 = iota_array({2, 3, 4});
  expect_array(slice(x3, {-1, 0, -1}, {-3, 3, -5}, {-1, 2, -2}), {2, 2, 2}, {15, 13, 23, 21, 3, 1, 11, 9});
  // other dtypes
  expect_array(slice(array({1, 2, 3, 4}), {3}, {-5}, {-2}), {2}, {4, 2});
  EXPECT_EQ(slice(array({1, 2, 3, 4}, uint8), {1}, {3}).dtype(), uint8);
}

TEST(Slice, Errors) {
  array m = zeros({4, 5});
  EXPECT_THROW_MSG(slice(m, {0}, {1}), std::invalid_argument, "[slice]");
  EXPECT_THROW_MSG(slice(m, {0, 0}, {1, 1}, {1}), std::invalid_argument, "(4,5)");
  EXPECT_THROW_MSG(slice(m, {0, 0}, {1, 1}, {1, 0}), std::invalid_argument, "[slice] slice step of axis 1 is zero");
  EXPECT_THROW_MSG(slice_update(m, array(1.0f), {0}, {1}), std::invalid_argument, "[slice_update]");
  EXPECT_THROW_MSG(slice_update(m, array(1.0f), {0, 0}, {1, 1}, {0, 1}), std::invalid_argument, "[slice_update]");
  EXPECT_THROW_MSG(slice_update(m, zeros({3}), {0, 0}, {2, 2}), std::invalid_argument,
                   "[slice_update] update of shape (3) does not broadcast to the slice shape (2,2)");
  EXPECT_THROW_MSG(slice_update(m, zeros({2, 2, 1}), {0, 0}, {2, 2}), std::invalid_argument, "[slice_update]");
}

TEST(SliceUpdate, Values) {
  array z = zeros({5});
  expect_array(slice_update(z, array({7.0f, 8.0f}), {1}, {3}), {5}, {0, 7, 8, 0, 0});
  expect_array(z, {5}, {0, 0, 0, 0, 0});  // the source is not modified
  // strided and negative-stride targets
  expect_array(slice_update(zeros({6}), array({1.0f, 2.0f, 3.0f}), {0}, {6}, {2}), {6}, {1, 0, 2, 0, 3, 0});
  expect_array(slice_update(zeros({5}), array({1.0f, 2.0f}), {4}, {0}, {-2}), {5}, {0, 0, 2, 0, 1});
  expect_array(slice_update(zeros({5}), array({1.0f, 2.0f, 3.0f, 4.0f, 5.0f}), {-1}, {-100}, {-1}), {5},
               {5, 4, 3, 2, 1});
  // broadcast updates: a scalar and a row
  expect_array(slice_update(zeros({3, 4}), array(5.0f), {1, 0}, {3, 4}, {1, 2}), {3, 4},
               {0, 0, 0, 0, 5, 0, 5, 0, 5, 0, 5, 0});
  expect_array(slice_update(zeros({3, 4}), array({1.0f, 2.0f}, {1, 2}), {0, 1}, {3, 3}), {3, 4},
               {0, 1, 2, 0, 0, 1, 2, 0, 0, 1, 2, 0});
  expect_array(slice_update(zeros({2, 3}), array({9.0f}), {0, 2}, {2, 3}), {2, 3}, {0, 0, 9, 0, 0, 9});
  // the update converts to the source dtype
  array i = slice_update(zeros({3}, int32), array({2.7f, -1.5f}), {0}, {2});
  EXPECT_EQ(i.dtype(), int32);
  EXPECT_EQ(i.to_vector<int>(), (std::vector<int>{2, -1, 0}));
  array h = slice_update(ones({2}, float16), array(1e-4, float64), {1}, {2});
  EXPECT_EQ(h.dtype(), float16);
  expect_array(h, {2}, {1, 1.0001659393310547e-4}, 1e-9);
  // a non-contiguous source and a non-contiguous update
  array t = transpose(iota_array({2, 3}));  // [[0,3],[1,4],[2,5]]
  array u = slice(array({10.0f, 20.0f, 30.0f, 40.0f}), {3}, {-100}, {-2});  // [40, 20]
  expect_array(slice_update(t, u, {1, 0}, {2, 2}), {3, 2}, {0, 3, 40, 20, 2, 5});
  expect_array(t, {3, 2}, {0, 3, 1, 4, 2, 5});
  // an empty target leaves the source as it is
  expect_array(slice_update(iota_array({3}), zeros({0}), {2}, {2}), {3}, {0, 1, 2});
  expect_array(slice_update(iota_array({3}), array(9.0f), {5}, {7}), {3}, {0, 1, 2});
}

TEST(SliceUpdate, ChainsAndAliasing) {
  // The update reads the source's own buffer (reversed); the result must use the old values.
  array y = [] {
    array x = iota_array({5});
    return slice_update(x, slice(x, {4}, {-100}, {-1}), {0}, {5});
  }();
  expect_array(y, {5}, {4, 3, 2, 1, 0});
  // A chain of updates on a temporary source (which may be updated in place).
  array c = slice_update(slice_update(slice_update(zeros({4}), array(1.0f), {0}, {1}), array(2.0f), {1}, {2}),
                         array(3.0f), {3}, {4});
  expect_array(c, {4}, {1, 2, 0, 3});
  // An intermediate that the caller keeps is not overwritten by a later update.
  array first = slice_update(zeros({3}), array(1.0f), {0}, {1});
  array second = slice_update(first, array(2.0f), {1}, {2});
  eval(second, first);
  expect_array(first, {3}, {1, 0, 0});
  expect_array(second, {3}, {1, 2, 0});
  // Updating one part of a split leaves the other parts (views of one buffer) alone.
  auto [upd, rest] = [] {
    auto parts = split(iota_array({4}), 2);
    return std::make_pair(slice_update(parts[0], array(9.0f), {0}, {2}), parts[1]);
  }();
  eval(upd, rest);
  expect_array(upd, {2}, {9, 9});
  expect_array(rest, {2}, {2, 3});
  // Two updates of one source, evaluated together.
  array src = iota_array({3});
  array u1 = slice_update(src, array(9.0f), {0}, {1});
  array u2 = slice_update(src, array(8.0f), {2}, {3});
  eval(u1, u2);
  expect_array(u1, {3}, {9, 1, 2});
  expect_array(u2, {3}, {0, 1, 8});
  expect_array(src, {3}, {0, 1, 2});
}

TEST(Concatenate, ValuesAndPromotion) {
  array a = iota_array({2, 2});
  array b = iota_array({1, 2}) + 10.0f;
  expect_array(concatenate({a, b}), {3, 2}, {0, 1, 2, 3, 10, 11});
  expect_array(concatenate({a, transpose(a)}, 1), {2, 4}, {0, 1, 0, 2, 2, 3, 1, 3});
  expect_array(concatenate({a, a, a}, -1), {2, 6}, {0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3});
  // strided pieces
  array r = slice(iota_array({6}), {-1}, {-100}, {-2});  // [5,3,1]
  expect_array(concatenate({r, array({7.0f}), broadcast_to(array(9.0f), {2})}), {6}, {5, 3, 1, 7, 9, 9});
  // empty pieces
  expect_array(concatenate({zeros({0, 2}), a, zeros({0, 2})}), {2, 2}, {0, 1, 2, 3});
  expect_array(concatenate({zeros({2, 0}), a}, 1), {2, 2}, {0, 1, 2, 3});
  // dtypes promote
  array c = concatenate({array({1, 2}), array({0.5f})});
  EXPECT_EQ(c.dtype(), float32);
  expect_array(c, {3}, {1, 2, 0.5});
  EXPECT_EQ(concatenate({array({true}), array({3}, uint8)}).dtype(), uint8);
  expect_array(concatenate({array({true}), array({3}, uint8)}), {2}, {1, 3});
  EXPECT_EQ(concatenate({array({1.0f}, float16), array({2.0f}, bfloat16)}).dtype(), float32);
  EXPECT_EQ(concatenate({array({1}), array(std::vector<int64_t>{int64_t(1) << 40}, {1})}).dtype(), int64);
  EXPECT_EQ(concatenate({array({1.0}, float64), array({1.0f})}).dtype(), float64);
  // a single array comes back as it is
  EXPECT_EQ(concatenate({a}).id(), a.id());
}

TEST(Concatenate, AdjacentViewsOfOneBufferAreTheResultAsTheyStand) {
  array x = iota_array({2, 12});
  x.eval();
  auto cols = split(x, 3, 1);  // (2, 4) views, each where concatenate would put it
  array c = concatenate(cols, 1);
  expect_array(c, {2, 12}, iota(24));
  EXPECT_EQ(c.raw_data(), x.raw_data());  // no copy
  auto rows = split(x, 2, 0);
  array r = concatenate(rows, 0);
  expect_array(r, {2, 12}, iota(24));
  EXPECT_EQ(r.raw_data(), x.raw_data());
  // Not where the result would hold them: copied, with the right values.
  array swapped = concatenate({cols[1], cols[0], cols[2]}, 1);
  expect_array(swapped, {2, 12}, {4, 5, 6, 7, 0, 1, 2, 3, 8, 9, 10, 11,
                                  16, 17, 18, 19, 12, 13, 14, 15, 20, 21, 22, 23});
  EXPECT_NE(swapped.raw_data(), x.raw_data());
  array gap = concatenate({cols[0], cols[2]}, 1);  // adjacent starts would need cols[1] between
  expect_array(gap, {2, 8}, {0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 20, 21, 22, 23});
  array y = iota_array({2, 4}) + 100.0f;
  expect_array(concatenate({cols[0], y, cols[2]}, 1), {2, 12},
               {0, 1, 2, 3, 100, 101, 102, 103, 8, 9, 10, 11, 12, 13, 14, 15, 104, 105, 106, 107, 20, 21, 22, 23});
  // Where the next part starts but read with other strides (a broadcast): copied.
  array v = iota_array({8});
  v.eval();
  expect_array(concatenate({slice(v, {0}, {4}), broadcast_to(slice(v, {4}, {5}), {4})}), {8}, {0, 1, 2, 3, 4, 4, 4, 4});
  // The same buffer read with other strides (every second column) is copied too.
  array every2 = slice(x, {0, 0}, {2, 12}, {1, 2});
  expect_array(concatenate({every2, every2}, 1), {2, 12},
               {0, 2, 4, 6, 8, 10, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 12, 14, 16, 18, 20, 22});
}

TEST(Concatenate, Errors) {
  EXPECT_THROW_MSG(concatenate({}), std::invalid_argument, "[concatenate]");
  EXPECT_THROW_MSG(concatenate({array(1.0f), array(2.0f)}), std::invalid_argument, "[concatenate]");
  EXPECT_THROW_MSG(concatenate({zeros({2, 3}), zeros({2, 4})}), std::invalid_argument, "[concatenate] array 1");
  EXPECT_THROW_MSG(concatenate({zeros({2, 3}), zeros({2, 4})}), std::invalid_argument, "(2,4)");
  EXPECT_THROW_MSG(concatenate({zeros({2, 3}), zeros({6})}), std::invalid_argument, "[concatenate]");
  EXPECT_THROW_MSG(concatenate({zeros({2, 3}), zeros({2, 3})}, 2), std::out_of_range, "[concatenate]");
}

TEST(Stack, Axes) {
  array a({1.0f, 2.0f}), b({3.0f, 4.0f});
  expect_array(stack({a, b}), {2, 2}, {1, 2, 3, 4});
  expect_array(stack({a, b}, 1), {2, 2}, {1, 3, 2, 4});
  expect_array(stack({a, b}, -1), {2, 2}, {1, 3, 2, 4});
  expect_array(stack({a}), {1, 2}, {1, 2});
  expect_array(stack({array(1.0f), array(2.0f), array(3.0f)}), {3}, {1, 2, 3});
  array m = iota_array({2, 3});
  expect_array(stack({m, transpose(transpose(m)) + 10.0f}, 1), {2, 2, 3}, {0, 1, 2, 10, 11, 12, 3, 4, 5, 13, 14, 15});
  EXPECT_EQ(stack({array({1}), array({2.0f})}).dtype(), float32);
  EXPECT_EQ(stack({zeros({0}), zeros({0})}).shape(), (Shape{2, 0}));
  EXPECT_THROW_MSG(stack({}), std::invalid_argument, "[stack]");
  EXPECT_THROW_MSG(stack({zeros({2}), zeros({3})}), std::invalid_argument, "[stack] array 1 has shape (3)");
  EXPECT_THROW_MSG(stack({a, b}, 2), std::out_of_range, "[stack]");
  EXPECT_THROW_MSG(stack({a, b}, -3), std::out_of_range, "[stack]");
}

TEST(Split, EqualParts) {
  array x = iota_array({6});
  auto parts = split(x, 3);
  ASSERT_EQ(parts.size(), 3u);
  expect_array(parts[0], {2}, {0, 1});
  expect_array(parts[1], {2}, {2, 3});
  expect_array(parts[2], {2}, {4, 5});
  EXPECT_EQ(elem_offset(parts[2], x), 4);  // views
  array m = iota_array({2, 4});
  auto cols = split(m, 2, 1);
  expect_array(cols[0], {2, 2}, {0, 1, 4, 5});
  expect_array(cols[1], {2, 2}, {2, 3, 6, 7});
  auto cols2 = split(m, 2, -1);
  expect_array(cols2[1], {2, 2}, {2, 3, 6, 7});
  EXPECT_EQ(split(x, 1).size(), 1u);
  auto e = split(zeros({0, 2}), 2, 1);
  EXPECT_EQ(e[0].shape(), (Shape{0, 1}));
  auto t = split(transpose(m), 2);  // (4,2) into two (2,2)
  expect_array(t[1], {2, 2}, {2, 6, 3, 7});
  EXPECT_THROW_MSG(split(x, 4), std::invalid_argument, "[split] cannot split axis 0 of size 6 into 4 equal parts");
  EXPECT_THROW_MSG(split(x, 0), std::invalid_argument, "[split]");
  EXPECT_THROW_MSG(split(x, -2), std::invalid_argument, "[split]");
  EXPECT_THROW_MSG(split(x, 2, 1), std::out_of_range, "[split]");
}

TEST(Split, AtIndices) {
  array x = iota_array({8});
  auto p = split(x, std::vector<int>{2, 5});
  ASSERT_EQ(p.size(), 3u);
  expect_array(p[0], {2}, {0, 1});
  expect_array(p[1], {3}, {2, 3, 4});
  expect_array(p[2], {3}, {5, 6, 7});
  auto q = split(x, std::vector<int>{-2});
  expect_array(q[0], {6}, iota(6));
  expect_array(q[1], {2}, {6, 7});
  auto r = split(x, std::vector<int>{10});
  expect_array(r[0], {8}, iota(8));
  expect_array(r[1], {0}, {});
  auto w = split(x, std::vector<int>{});
  ASSERT_EQ(w.size(), 1u);
  expect_array(w[0], {8}, iota(8));
  auto z = split(x, std::vector<int>{0, 0});
  ASSERT_EQ(z.size(), 3u);
  EXPECT_EQ(z[0].shape(), (Shape{0}));
  EXPECT_EQ(z[1].shape(), (Shape{0}));
  expect_array(z[2], {8}, iota(8));
  // numpy: indices need not increase; each part is x[indices[i-1]:indices[i]]
  auto n = split(x, std::vector<int>{3, 1});
  ASSERT_EQ(n.size(), 3u);
  expect_array(n[0], {3}, {0, 1, 2});
  expect_array(n[1], {0}, {});
  expect_array(n[2], {7}, iota(7, 1));
  array m = iota_array({2, 3});
  auto c = split(m, std::vector<int>{1}, 1);
  expect_array(c[0], {2, 1}, {0, 3});
  expect_array(c[1], {2, 2}, {1, 2, 4, 5});
  EXPECT_THROW_MSG(split(m, std::vector<int>{1}, 2), std::out_of_range, "[split]");
}

TEST(Split, FlatBucketIntoShapedViews) {
  array x = iota_array({10});
  auto p = split_flat(x, {{2, 3}, {}, {0, 5}, {3}});
  ASSERT_EQ(p.size(), 4u);
  expect_array(p[0], {2, 3}, {0, 1, 2, 3, 4, 5});
  expect_array(p[1], {}, {6});
  EXPECT_EQ(p[2].shape(), (Shape{0, 5}));
  expect_array(p[3], {3}, {7, 8, 9});
  EXPECT_EQ(elem_offset(p[3], x), 7);  // views of the bucket
  EXPECT_TRUE(p[0].flags().row_contiguous);
  // A strided bucket: the parts are views with scaled strides.
  array s = slice(iota_array({12}), {0}, {12}, {2});  // 0, 2, ..., 22
  auto q = split_flat(s, {{2, 2}, {2}});
  expect_array(q[0], {2, 2}, {0, 2, 4, 6});
  expect_array(q[1], {2}, {8, 10});
  EXPECT_EQ(q[0].strides(), (Strides{4, 2}));
  EXPECT_TRUE(split_flat(zeros({0}), {}).empty());
  EXPECT_THROW_MSG(split_flat(x, {{2, 3}, {3}}), std::invalid_argument,
                   "[split_flat] expected a 1-D array of 9 elements for 2 parts ((2,3), (3)); got shape (10)");
  EXPECT_THROW_MSG(split_flat(reshape(x, {2, 5}), {{10}}), std::invalid_argument,
                   "[split_flat] expected a 1-D array of 10 elements for 1 parts ((10)); got shape (2,5)");
}

TEST(Pad, EveryForm) {
  array v({1.0f, 2.0f, 3.0f});
  expect_array(pad(v, {0}, {2}, {1}, array(9.0f)), {6}, {9, 9, 1, 2, 3, 9});
  expect_array(pad(v, std::vector<int>{-1}, {0}, {2}), {5}, {1, 2, 3, 0, 0});
  array m = iota_array({2, 2}) + 1.0f;  // [[1,2],[3,4]]
  expect_array(pad(m, {1}, {1}, {0}, array(-1.0f)), {2, 3}, {-1, 1, 2, -1, 3, 4});
  expect_array(pad(m, std::vector<int>{0, 1}, {1, 0}, {0, 2}), {3, 4}, {0, 0, 0, 0, 1, 2, 0, 0, 3, 4, 0, 0});
  // (before, after) pairs per axis, one pair for every axis, and one width everywhere
  expect_array(pad(m, {{1, 0}, {0, 2}}), {3, 4}, {0, 0, 0, 0, 1, 2, 0, 0, 3, 4, 0, 0});
  expect_array(pad(m, {{1, 1}}, array(7.0f)), {4, 4}, {7, 7, 7, 7, 7, 1, 2, 7, 7, 3, 4, 7, 7, 7, 7, 7});
  expect_array(pad(m, 1), {4, 4}, {0, 0, 0, 0, 0, 1, 2, 0, 0, 3, 4, 0, 0, 0, 0, 0});
  expect_array(pad(m, 0), {2, 2}, {1, 2, 3, 4});
  expect_array(pad(m, std::vector<std::pair<int, int>>{{0, 0}, {0, 1}}, array(5)), {2, 3}, {1, 2, 5, 3, 4, 5});
  // the value converts to the array's dtype
  array i = pad(array({1, 2}), 1, array(2.7f));
  EXPECT_EQ(i.dtype(), int32);
  EXPECT_EQ(i.to_vector<int>(), (std::vector<int>{2, 1, 2, 2}));
  array h = pad(array({1.0f}, float16), 1, array(0.1, float64));
  EXPECT_EQ(h.dtype(), float16);
  expect_array(h, {3}, {0.0999755859375, 1, 0.0999755859375}, 1e-12);
  expect_array(pad(array({true}), 1, array(true)), {3}, {1, 1, 1});
  // the value may be any one-element array
  expect_array(pad(v, 1, array({4.0f}, {1, 1})), {5}, {4, 1, 2, 3, 4});
  // non-contiguous input and empty input
  expect_array(pad(transpose(m), {{0, 1}, {1, 0}}), {3, 3}, {0, 1, 3, 0, 2, 4, 0, 0, 0});
  expect_array(pad(slice(v, {2}, {-100}, {-1}), 1), {5}, {0, 3, 2, 1, 0});
  expect_array(pad(zeros({0, 2}), {{1, 1}, {0, 0}}, array(3.0f)), {2, 2}, {3, 3, 3, 3});
  expect_array(pad(array(5.0f), std::vector<std::pair<int, int>>{}), {}, {5});
}

TEST(Pad, Errors) {
  array m = zeros({2, 2});
  EXPECT_THROW_MSG(pad(m, -1), std::invalid_argument, "[pad] negative padding");
  EXPECT_THROW_MSG(pad(m, {{0, 0}, {1, -2}}), std::invalid_argument, "[pad] negative padding");
  EXPECT_THROW_MSG(pad(m, std::vector<int>{0}, {1, 2}, {1}), std::invalid_argument, "[pad]");
  EXPECT_THROW_MSG(pad(m, {{1, 1}, {1, 1}, {1, 1}}), std::invalid_argument, "[pad] 3 (before, after) pairs");
  EXPECT_THROW_MSG(pad(m, 1, zeros({2})), std::invalid_argument, "[pad] the pad value must be a scalar");
  EXPECT_THROW_MSG(pad(m, std::vector<int>{2}, {1}, {1}), std::out_of_range, "[pad]");
  EXPECT_THROW_MSG(pad(m, std::vector<int>{0, -2}, {1, 1}, {1, 1}), std::invalid_argument, "[pad]");
}

TEST(Tile, Reps) {
  array v({1.0f, 2.0f});
  expect_array(tile(v, {3}), {6}, {1, 2, 1, 2, 1, 2});
  array m = iota_array({2, 2});
  expect_array(tile(m, {2, 1}), {4, 2}, {0, 1, 2, 3, 0, 1, 2, 3});
  expect_array(tile(m, {2}), {2, 4}, {0, 1, 0, 1, 2, 3, 2, 3});
  expect_array(tile(m, {2, 1, 1}), {2, 2, 2}, {0, 1, 2, 3, 0, 1, 2, 3});
  expect_array(tile(v, {2, 2}), {2, 4}, {1, 2, 1, 2, 1, 2, 1, 2});
  expect_array(tile(transpose(m), {1, 2}), {2, 4}, {0, 2, 0, 2, 1, 3, 1, 3});
  expect_array(tile(array(3), {2}), {2}, {3, 3});
  EXPECT_EQ(tile(v, {0}).shape(), (Shape{0}));
  EXPECT_EQ(tile(v, {}).shape(), (Shape{2}));
  EXPECT_EQ(tile(array({1, 2}, uint8), {2}).dtype(), uint8);
  EXPECT_THROW_MSG(tile(v, {-1}), std::invalid_argument, "[tile]");
}

TEST(Repeat, Axes) {
  array v({1.0f, 2.0f, 3.0f});
  expect_array(repeat(v, 2), {6}, {1, 1, 2, 2, 3, 3});
  array m = iota_array({2, 2});
  expect_array(repeat(m, 2, 0), {4, 2}, {0, 1, 0, 1, 2, 3, 2, 3});
  expect_array(repeat(m, 2, 1), {2, 4}, {0, 0, 1, 1, 2, 2, 3, 3});
  expect_array(repeat(m, 3, -1), {2, 6}, {0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3});
  expect_array(repeat(m, 2), {8}, {0, 0, 1, 1, 2, 2, 3, 3});  // flattened
  expect_array(repeat(transpose(m), 2, 1), {2, 4}, {0, 0, 2, 2, 1, 1, 3, 3});
  expect_array(repeat(array(4.0f), 3), {3}, {4, 4, 4});
  EXPECT_EQ(repeat(m, 0, 1).shape(), (Shape{2, 0}));
  EXPECT_EQ(repeat(m, 1, 0).shape(), (Shape{2, 2}));
  EXPECT_THROW_MSG(repeat(v, -1), std::invalid_argument, "[repeat]");
  EXPECT_THROW_MSG(repeat(m, 2, 2), std::out_of_range, "[repeat]");
}

TEST(Shape, TransposingCopyGoesTileByTileWithRaggedEdges) {
  // (3, 37, 50) -> (3, 50, 37): the source is contiguous along the middle axis, so the copy is tiled.
  array x = reshape(arange(0.0, 3.0 * 37 * 50, 1.0, float32), {3, 37, 50});
  for (Dtype d : {float32, int64}) {
    array y = reshape(transpose(astype(x, d), {0, 2, 1}), {3 * 50 * 37});
    auto v = y.to_vector<double>();
    bool ok = true;
    for (int b = 0; b < 3; ++b)
      for (int i = 0; i < 50; ++i)
        for (int j = 0; j < 37; ++j) ok &= v[(b * 50 + i) * 37 + j] == (b * 37 + j) * 50 + i;
    EXPECT_TRUE(ok) << d;
  }
  // A big square transpose (several tiles, parallel) into a copy.
  array m = reshape(arange(0.0, 300.0 * 200, 1.0, float32), {300, 200});
  auto t = reshape(transpose(m), {-1}).to_vector<float>();
  bool ok = true;
  for (int i = 0; i < 200; ++i)
    for (int j = 0; j < 300; ++j) ok &= t[i * 300 + j] == float(j * 200 + i);
  EXPECT_TRUE(ok);
}

TEST(Reshape, StridedInputsBecomeViewsWhenTheirAxesAllowIt) {
  array m = reshape(arange(0.0, 24.0, 1.0, float32), {4, 6});
  eval(m);
  // Columns 2..5 of each row: rows stay 6 apart, so splitting the last axis is a view.
  array cols = slice(m, {0, 2}, {4, 6});
  array split_rows = reshape(cols, {4, 2, 2});
  eval(split_rows);
  EXPECT_EQ(split_rows.data_shared_ptr(), m.data_shared_ptr());
  expect_array(split_rows, {4, 2, 2}, {2, 3, 4, 5, 8, 9, 10, 11, 14, 15, 16, 17, 20, 21, 22, 23});
  // Size-1 axes come and go freely.
  array one = reshape(slice(m, {1, 0}, {2, 6}, {1, 2}), {1, 3, 1});
  eval(one);
  EXPECT_EQ(one.data_shared_ptr(), m.data_shared_ptr());
  expect_array(one, {1, 3, 1}, {6, 8, 10});
  // Merging the axes of a transpose needs a copy.
  array merged = reshape(transpose(m), {24});
  eval(merged);
  EXPECT_NE(merged.data_shared_ptr(), m.data_shared_ptr());
  std::vector<double> want;
  for (int c = 0; c < 6; ++c) {
    for (int r = 0; r < 4; ++r) want.push_back(r * 6 + c);
  }
  expect_array(merged, {24}, want);
  // Merging two axes that are contiguous among themselves is a view even when a third is not.
  array t3 = transpose(reshape(m, {2, 2, 6}), {2, 0, 1});  // (6, 2, 2), strides (1, 12, 6)
  array tm = reshape(t3, {6, 4});
  eval(tm);
  EXPECT_EQ(tm.data_shared_ptr(), m.data_shared_ptr());
  EXPECT_EQ(tm.to_vector<float>()[1 * 4 + 3], 1.0f + 18.0f);
}

