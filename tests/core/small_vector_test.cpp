// SmallVector: Shape and Strides. The reference for every operation is std::vector.
#include <numeric>

#include "../test_utils.h"

using namespace loom;

namespace {
using SV = SmallVector<int, 4>;
std::vector<int> v(const SV& s) { return std::vector<int>(s); }
}  // namespace

TEST(SmallVector, StaysInlineUpToNThenGrowsOnTheHeap) {
  SV s;
  const int* inline_data = s.data();
  for (int i = 0; i < 4; ++i) s.push_back(i);
  EXPECT_EQ(s.data(), inline_data);
  EXPECT_EQ(s.capacity(), 4u);
  s.push_back(4);
  EXPECT_NE(s.data(), inline_data);
  EXPECT_EQ(v(s), (std::vector<int>{0, 1, 2, 3, 4}));
  s.push_back(s[0]);  // an element of the vector itself, while it grows
  for (int i = 6; i < 100; ++i) s.push_back(i);
  ASSERT_EQ(s.size(), 100u);
  EXPECT_EQ(s[5], 0);
  EXPECT_EQ(s.back(), 99);
  EXPECT_THROW(s.reserve(size_t(1) << 33), std::length_error);  // sizes are 32-bit
  EXPECT_EQ(s.size(), 100u);
}

TEST(SmallVector, CopyAndMoveKeepValuesAndLeaveTheSourceValid) {
  for (int n : {3, 9}) {  // inline and heap
    SV a;
    for (int i = 0; i < n; ++i) a.push_back(i * i);
    SV b = a;
    EXPECT_EQ(b, a);
    b[0] = 42;
    EXPECT_EQ(a[0], 0);  // a deep copy
    SV c = std::move(b);
    EXPECT_EQ(c[0], 42);
    EXPECT_EQ(c.size(), size_t(n));
    EXPECT_TRUE(b.empty());  // NOLINT: moved-from is empty and usable
    b.push_back(7);
    EXPECT_EQ(v(b), std::vector<int>{7});
    c = a;
    EXPECT_EQ(c, a);
    c = std::move(a);
    EXPECT_EQ(c.size(), size_t(n));
    c = c;  // NOLINT: self-assignment keeps the contents
    EXPECT_EQ(c.size(), size_t(n));
  }
}

TEST(SmallVector, InsertEraseResizeAssignMatchStdVector) {
  std::vector<int> ref = {1, 2, 3};
  SV s = {1, 2, 3};
  s.insert(s.begin() + 1, 9);
  ref.insert(ref.begin() + 1, 9);
  s.insert(s.end(), 2, 5);
  ref.insert(ref.end(), 2, 5);
  s.insert(s.begin(), {7, 8});
  ref.insert(ref.begin(), {7, 8});
  EXPECT_EQ(v(s), ref);
  s.insert(s.begin() + 2, s.begin(), s.begin() + 3);  // a range from the vector itself
  const std::vector<int> head(ref.begin(), ref.begin() + 3);
  ref.insert(ref.begin() + 2, head.begin(), head.end());
  EXPECT_EQ(v(s), ref);
  s.erase(s.begin() + 1);
  ref.erase(ref.begin() + 1);
  s.erase(s.begin(), s.begin() + 3);
  ref.erase(ref.begin(), ref.begin() + 3);
  EXPECT_EQ(v(s), ref);
  s.resize(12, -1);
  ref.resize(12, -1);
  EXPECT_EQ(v(s), ref);
  s.resize(2);
  ref.resize(2);
  EXPECT_EQ(v(s), ref);
  s.assign(s.begin() + 1, s.end());  // assign from itself
  ref = std::vector<int>(ref.begin() + 1, ref.end());
  EXPECT_EQ(v(s), ref);
  s.assign(3, 4);
  EXPECT_EQ(v(s), (std::vector<int>{4, 4, 4}));
  std::vector<long> longs = {5, 6};
  s.assign(longs.begin(), longs.end());  // another element type
  EXPECT_EQ(v(s), (std::vector<int>{5, 6}));
  s.pop_back();
  EXPECT_EQ(v(s), std::vector<int>{5});
  s.clear();
  EXPECT_TRUE(s.empty());
  EXPECT_THROW(s.at(0), std::out_of_range);
}

TEST(SmallVector, ConvertsToAndFromStdVectorAndCompares) {
  std::vector<int> big(10);
  std::iota(big.begin(), big.end(), 0);
  SV s = big;
  EXPECT_EQ(s, big);
  EXPECT_EQ(big, s);
  EXPECT_EQ(std::vector<int>(s), big);
  // Code written for std::vector shapes keeps compiling.
  std::vector<int> shape = array(1.0f).shape();
  EXPECT_TRUE(shape.empty());
  std::vector<int> dims = reshape(arange(6.0f), {2, 3}).shape();
  EXPECT_EQ(dims, (std::vector<int>{2, 3}));
  EXPECT_TRUE((SV{1, 2} < SV{1, 3}));
  EXPECT_TRUE((SV{1, 2} < SV{1, 2, 0}));
  EXPECT_NE((SV{1, 2}), (SV{1, 2, 0}));
  std::vector<int> rev(s.rbegin(), s.rend());
  EXPECT_EQ(rev.front(), 9);
  EXPECT_EQ(std::accumulate(s.begin(), s.end(), 0), 45);
  SV a = {1}, b = {2, 3, 4, 5, 6};
  a.swap(b);
  EXPECT_EQ(v(a), (std::vector<int>{2, 3, 4, 5, 6}));
  EXPECT_EQ(v(b), std::vector<int>{1});
}

TEST(SmallVector, ArraysOfManyDimensionsKeepTheirShapeAndStrides) {
  // Beyond Shape's inline capacity (6): the heap path under real arrays.
  Shape shape = {2, 1, 3, 1, 2, 1, 2, 1};
  array a = reshape(arange(24.0f), shape);
  EXPECT_EQ(a.shape(), shape);
  array t = transpose(a);
  eval(t);
  EXPECT_EQ(t.shape(), (Shape{1, 2, 1, 2, 1, 3, 1, 2}));
  EXPECT_EQ(t.strides()[7], 12);
  EXPECT_EQ(sum(t).item<float>(), 276.0f);
}
