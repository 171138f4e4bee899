// Integer arithmetic at the limits wraps around as numpy's does (values from numpy 1.24 with int32 /
// int64 arrays); before, it was signed overflow, undefined behaviour that UBSan stops on.
#include <cstdint>
#include <limits>

#include "../test_utils.h"

using namespace loom;

namespace {
constexpr int32_t kMax = std::numeric_limits<int32_t>::max(), kMin = std::numeric_limits<int32_t>::min();
constexpr int64_t kMax64 = std::numeric_limits<int64_t>::max(), kMin64 = std::numeric_limits<int64_t>::min();
}  // namespace

TEST(IntegerWrap, ElementwiseOpsWrapAtTheLimits) {
  array big({kMax, kMin, 65536, -3});
  array one({1, 1, 1, 1});
  // np.array([2**31-1, -2**31, 65536, -3], np.int32) + 1, - 1, * 65536, -x, abs(x), x**2
  EXPECT_EQ(add(big, one).to_vector<int32_t>(), (std::vector<int32_t>{kMin, kMin + 1, 65537, -2}));
  EXPECT_EQ(subtract(big, one).to_vector<int32_t>(), (std::vector<int32_t>{kMax - 1, kMax, 65535, -4}));
  EXPECT_EQ(multiply(big, array(65536)).to_vector<int32_t>(), (std::vector<int32_t>{-65536, 0, 0, -196608}));
  EXPECT_EQ(negative(big).to_vector<int32_t>(), (std::vector<int32_t>{-kMax, kMin, -65536, 3}));
  EXPECT_EQ(abs(big).to_vector<int32_t>(), (std::vector<int32_t>{kMax, kMin, 65536, 3}));
  EXPECT_EQ(square(big).to_vector<int32_t>(), (std::vector<int32_t>{1, 0, 0, 9}));
  // The fused path computes the same (a chain of elementwise ops over a large array).
  array many = full({1 << 16}, array(kMax));
  array chained = add(multiply(many, array(2)), array(3));  // (2^31-1)*2 + 3 wraps to 1
  EXPECT_EQ(chained.to_vector<int32_t>()[12345], 1);

  array big64 = array(std::vector<int64_t>{kMax64, kMin64}.data(), {2}, int64);
  EXPECT_EQ(add(big64, array(int64_t(1), int64)).to_vector<int64_t>(), (std::vector<int64_t>{kMin64, kMin64 + 1}));
  EXPECT_EQ(negative(big64).to_vector<int64_t>(), (std::vector<int64_t>{-kMax64, kMin64}));
}

TEST(IntegerWrap, SumsProductsAndCumulativeSumsWrap) {
  // np.sum(np.array([2**31-1, 1, 5], np.int32), dtype=np.int32) == -2147483643
  array x({kMax, 1, 5});
  EXPECT_EQ(sum(x).item<int32_t>(), kMin + 5);
  EXPECT_EQ(prod(array({65536, 65536, 3})).item<int32_t>(), 0);
  EXPECT_EQ(cumsum(x, 0).to_vector<int32_t>(), (std::vector<int32_t>{kMax, kMin, kMin + 5}));
  // Large enough for the vectorized and threaded reduction paths.
  array ones_big = full({1 << 20}, array(4096));  // 2^20 * 2^12 = 2^32: wraps to 0
  EXPECT_EQ(sum(ones_big).item<int32_t>(), 0);
}
