// The integer dtypes beside int32/int64/uint8: int8, int16, uint16, uint32, uint64. Their promotion
// (MLX's table), wrapping arithmetic, division, reductions, conversions, bitwise ops, printing and
// file formats. Expected values were computed with numpy 1.24 (same integer semantics as MLX's CPU
// backend for these ops), e.g. `np.uint16(65535) * np.uint16(65535)` is 1.
#include <sstream>

#include "../test_utils.h"

namespace loom {
namespace {

using testing::expect_array;
using E = std::invalid_argument;

TEST(IntegerDtypes, SizesNamesAndKinds) {
  EXPECT_EQ(int8.size, 1);
  EXPECT_EQ(int16.size, 2);
  EXPECT_EQ(uint16.size, 2);
  EXPECT_EQ(uint32.size, 4);
  EXPECT_EQ(uint64.size, 8);
  EXPECT_EQ(to_string(int8), "int8");
  EXPECT_EQ(to_string(uint64), "uint64");
  for (Dtype d : {uint8, uint16, uint32, uint64, int8, int16, int32, int64}) {
    EXPECT_TRUE(is_integral(d)) << d;
    EXPECT_FALSE(is_floating_point(d)) << d;
    EXPECT_TRUE(issubdtype(d, Dtype::Category::integer)) << d;
    EXPECT_TRUE(issubdtype(d, Dtype::Category::number)) << d;
    EXPECT_FALSE(issubdtype(d, Dtype::Category::inexact)) << d;
  }
  EXPECT_TRUE(issubdtype(uint16, Dtype::Category::unsignedinteger));
  EXPECT_FALSE(issubdtype(uint16, Dtype::Category::signedinteger));
  EXPECT_TRUE(issubdtype(int16, Dtype::Category::signedinteger));
  EXPECT_TRUE(issubdtype(bfloat16, Dtype::Category::floating));
  EXPECT_FALSE(issubdtype(bool_, Dtype::Category::number));  // numpy: bool is only generic
  EXPECT_TRUE(issubdtype(Dtype::Category::floating, Dtype::Category::inexact));
  EXPECT_FALSE(issubdtype(Dtype::Category::integer, Dtype::Category::signedinteger));
  EXPECT_TRUE(issubdtype(int8, int8));
  EXPECT_FALSE(issubdtype(int8, int16));
  EXPECT_EQ(dtype_of<int8_t>, int8);
  EXPECT_EQ(dtype_of<uint16_t>, uint16);
  EXPECT_EQ(dtype_of<uint32_t>, uint32);
  EXPECT_EQ(dtype_of<unsigned long long>, uint64);
  EXPECT_EQ(std::size(all_dtypes), 13u);
}

// MLX's (JAX's) promotion table, the cases where it differs from "the larger one wins".
TEST(IntegerDtypes, PromotionFollowsMlx) {
  EXPECT_EQ(promote_types(uint8, int8), int16);
  EXPECT_EQ(promote_types(uint16, int8), int32);
  EXPECT_EQ(promote_types(uint32, int32), int64);
  EXPECT_EQ(promote_types(uint32, int8), int64);
  EXPECT_EQ(promote_types(uint64, int8), float32);
  EXPECT_EQ(promote_types(int64, uint64), float32);
  EXPECT_EQ(promote_types(uint64, uint8), uint64);
  EXPECT_EQ(promote_types(int16, float16), float16);
  EXPECT_EQ(promote_types(uint64, bfloat16), bfloat16);
  EXPECT_EQ(promote_types(float16, bfloat16), float32);
  EXPECT_EQ(promote_types(bool_, int8), int8);
  EXPECT_EQ(promote_types(bool_, uint16), uint16);
  for (Dtype a : all_dtypes) {
    EXPECT_EQ(promote_types(a, a), a);
    for (Dtype b : all_dtypes) EXPECT_EQ(promote_types(a, b), promote_types(b, a)) << a << " " << b;
  }
  // And the ops use it: uint8 + int8 is int16, with the int16 sum.
  array s = add(array({200}, uint8), array({-100}, int8));
  EXPECT_EQ(s.dtype(), int16);
  EXPECT_EQ(s.item<int>(), 100);
}

TEST(IntegerDtypes, ArithmeticWrapsAsNumpy) {
  array u = array({65535, 2}, uint16);
  array sq = multiply(u, u);  // 65535^2 overflows int, which uint16 promotes to in C++
  EXPECT_EQ(sq.dtype(), uint16);
  expect_array(sq, {2}, {1, 4});
  expect_array(square(u), {2}, {1, 4});
  expect_array(add(array({127, -128}, int8), array({1, -1}, int8)), {2}, {-128, 127});
  expect_array(subtract(array({0}, uint32), array({1}, uint32)), {1}, {4294967295.0});
  expect_array(negative(array({1, 0}, uint32)), {2}, {4294967295.0, 0});
  expect_array(abs(array({-128, -5}, int8)), {2}, {-128, 5});  // |INT8_MIN| wraps, as numpy
  expect_array(power(array({3, -2}, int8), array({5, 7}, int8)), {2}, {-13, -128});  // 243 wraps to -13
  expect_array(power(array({65535}, uint16), array({3}, uint16)), {1}, {65535});
  expect_array(floor_divide(array({-7, 7, -8}, int8), array({2, 2, 2}, int8)), {3}, {-4, 3, -4});
  expect_array(remainder(array({-7, 7, -8}, int8), array({3, 3, 3}, int8)), {3}, {2, 1, 1});
  expect_array(floor_divide(array({-128}, int8), array({-1}, int8)), {1}, {-128});
  expect_array(floor_divide(array({7}, uint16), array({0}, uint16)), {1}, {0});
  array q = divide(array({7}, int16), array({2}, int16));
  EXPECT_EQ(q.dtype(), float32);
  expect_array(q, {1}, {3.5});
  expect_array(maximum(array({-1, 5}, int16), array({3, -7}, int16)), {2}, {3, 5});
  // uint64 beyond int64's range compares and orders as unsigned.
  const uint64_t big = (uint64_t(1) << 63) + 5;
  array b({big, uint64_t(7)}, uint64);
  expect_array(greater(b, array({uint64_t(1)}, uint64)), {2}, {1, 1});
  EXPECT_EQ(max(b).item<uint64_t>(), big);
  EXPECT_EQ(min(b).item<uint64_t>(), 7u);
  EXPECT_EQ(argmax(b).item<int>(), 0);
}

TEST(IntegerDtypes, ReductionsUseMlxDtypes) {
  array x({1, -2, 3, 100, 100, 100}, {2, 3}, int8);
  array s = sum(x, 1);
  EXPECT_EQ(s.dtype(), int32);
  expect_array(s, {2}, {2, 300});
  array p = prod(x, 1);
  EXPECT_EQ(p.dtype(), int32);
  expect_array(p, {2}, {-6, 1000000});
  EXPECT_EQ(sum(array({60000, 60000}, uint16)).dtype(), uint32);
  EXPECT_EQ(sum(array({60000, 60000}, uint16)).item<int64_t>(), 120000);
  EXPECT_EQ(sum(array({200, 100}, uint8)).dtype(), uint32);
  EXPECT_EQ(sum(array({200, 100}, uint8)).item<int>(), 300);
  EXPECT_EQ(sum(array({1, 2}, uint64)).dtype(), uint64);
  EXPECT_EQ(sum(array({1, 2}, int16)).dtype(), int32);
  EXPECT_EQ(sum(array({true, true}, bool_)).dtype(), int32);
  EXPECT_EQ(prod(array({3, 5}, uint32)).dtype(), uint32);
  array m = mean(array({1, 2, 4}, int16));
  EXPECT_EQ(m.dtype(), float32);
  EXPECT_FLOAT_EQ(m.item<float>(), 7.0f / 3.0f);
  EXPECT_EQ(max(array({-3, -9}, int8)).item<int>(), -3);
  EXPECT_EQ(min(array({40000, 3}, uint16)).item<int>(), 3);
  EXPECT_TRUE(any(array({0, 0, 9}, uint64)).item<bool>());
  EXPECT_FALSE(all(array({0, 1}, int8)).item<bool>());
  // Larger than one block, so the parallel/chunked paths run: 70000 * 3 in uint16 sums to uint32.
  EXPECT_EQ(sum(full({70000}, 3, uint16)).item<int64_t>(), 210000);
}

TEST(IntegerDtypes, ConversionsWrapOrSaturateAsDefined) {
  expect_array(astype(array({250, 10}, uint8), int8), {2}, {-6, 10});  // integer to integer: modular
  expect_array(astype(array({-1}, int8), uint16), {1}, {65535});
  expect_array(astype(array({3e9}, float64), uint32), {1}, {3e9});
  // Float to integer truncates toward zero and saturates (C++ leaves out-of-range undefined).
  expect_array(astype(array({-3.7, 300.0, -300.0}, float32), int8), {3}, {-3, 127, -128});
  expect_array(astype(array({-5.0, 1e30}, float32), uint16), {2}, {0, 65535});
  EXPECT_EQ(astype(array({1e30}, float64), uint64).item<uint64_t>(), ~uint64_t(0));
  EXPECT_EQ(astype(array({uint64_t(1) << 40}, uint64), float32).item<float>(), 1099511627776.0f);
  expect_array(astype(array({-2, 0, 5}, int16), bool_), {3}, {1, 0, 1});
  expect_array(astype(array({-2.5}, bfloat16), int16), {1}, {-2});
}

TEST(IntegerDtypes, ScalarsMustFitTheArraysDtype) {
  array a({1, 2}, int8);
  expect_array(a + 100, {2}, {101, 102});
  EXPECT_EQ((a + 100).dtype(), int8);
  EXPECT_THROW_MSG(a + 200, E, "[operator] the scalar 200 is out of range for int8 [-128, 127]");
  EXPECT_THROW_MSG(array({1}, uint16) + 70000, E, "out of range for uint16 [0, 65535]");
  EXPECT_THROW_MSG(array({1}, uint32) - (-1), E, "out of range for uint32");
  EXPECT_EQ((array({1}, uint64) * 4000000000u).item<uint64_t>(), 4000000000u);
  EXPECT_EQ((array({1}, int16) * 2.5).dtype(), float32);
}

TEST(IntegerDtypes, BitwiseOps) {
  array a({-6, 5}, int8), b({13, 3}, int8);
  expect_array(bitwise_and(a, b), {2}, {8, 1});
  expect_array(bitwise_or(a, b), {2}, {-1, 7});
  expect_array(bitwise_xor(a, b), {2}, {-9, 6});
  expect_array(bitwise_invert(array({5}, int8)), {1}, {-6});
  expect_array(bitwise_invert(array({5}, uint8)), {1}, {250});
  EXPECT_EQ(bitwise_invert(array({uint64_t(0)}, uint64)).item<uint64_t>(), ~uint64_t(0));
  // Operators, with scalars taking the array's dtype.
  expect_array(a & b, {2}, {8, 1});
  expect_array(a | 16, {2}, {-6, 21});
  expect_array(3 ^ b, {2}, {14, 0});
  expect_array(~a, {2}, {5, -6});
  array i32({0x0f0f, 0x00ff}, int32);
  EXPECT_EQ((i32 & 0xff).dtype(), int32);
  expect_array(i32 & 0xff, {2}, {0x0f, 0xff});
  // bool: and/or/xor stay bool, invert is logical_not.
  array t({true, false}, bool_), f({true, true}, bool_);
  EXPECT_EQ(bitwise_xor(t, f).dtype(), bool_);
  expect_array(bitwise_xor(t, f), {2}, {0, 1});
  expect_array(~t, {2}, {0, 1});
  // Mixed dtypes promote as arithmetic does.
  EXPECT_EQ(bitwise_or(array({1}, uint8), array({1}, int8)).dtype(), int16);
  // Floats are an error naming the op and the dtype.
  EXPECT_THROW_MSG(bitwise_and(array({1.0f}), array({1}, int32)), E, "[bitwise_and] needs integer or bool arrays, got float32");
  EXPECT_THROW_MSG(left_shift(array({1.0}, float64), array({1}, int32)), E, "[left_shift] needs integer or bool arrays, got float64");
  EXPECT_THROW_MSG(bitwise_invert(array({1.0f}, float16)), E, "[bitwise_invert] needs integer or bool arrays, got float16");
}

TEST(IntegerDtypes, ShiftsGiveNumpysAnswersForEveryCount) {
  expect_array(left_shift(array({1, 1, 1, -3}, int8), array({7, 8, -1, 2}, int8)), {4}, {-128, 0, 0, -12});
  expect_array(right_shift(array({-128, -1, 100, -1}, int8), array({1, 100, 9, -2}, int8)), {4}, {-64, -1, 0, -1});
  expect_array(right_shift(array({40000}, uint16), array({3}, uint16)), {1}, {5000});
  EXPECT_EQ(left_shift(array({uint64_t(1)}, uint64), array({uint64_t(63)}, uint64)).item<uint64_t>(),
            uint64_t(1) << 63);
  EXPECT_EQ(left_shift(array({uint64_t(1)}, uint64), array({uint64_t(64)}, uint64)).item<uint64_t>(), 0u);
  array s = left_shift(array({true}, bool_), array({true}, bool_));  // MLX: bools shift as uint8
  EXPECT_EQ(s.dtype(), uint8);
  EXPECT_EQ(s.item<int>(), 2);
  expect_array(array({1, 2}, int32) << 4, {2}, {16, 32});
  expect_array(array({-16}, int64) >> 2, {1}, {-4});
}

// A chain long enough to fuse gives the same answer as op by op.
TEST(IntegerDtypes, FusedChainsMatchUnfused) {
  for (Dtype d : {int8, int16, uint16, uint32, uint64}) {
    array x = astype(arange(0, 1000, 1), d);
    auto chain = [&] { return bitwise_xor(multiply(add(x, x), x), right_shift(x, astype(array({1}), d))); };
    array fused = chain();
    eval(fused);
    std::vector<int64_t> want;
    const int bits = d.size * 8;
    // i wrapped to the dtype's width, as a signed value for the signed dtypes.
    auto wrap = [&](uint64_t v) {
      if (bits < 64) v &= (uint64_t(1) << bits) - 1;
      if (is_signed_integer(d) && bits < 64 && (v >> (bits - 1))) return static_cast<int64_t>(v) - (int64_t(1) << bits);
      return static_cast<int64_t>(v);
    };
    for (int i = 0; i < 1000; ++i) {
      const int64_t xi = wrap(uint64_t(i));
      // (x + x) * x ^ (x >> 1) in the dtype's arithmetic: products wrap, the shift is arithmetic.
      const uint64_t prod = uint64_t(2 * xi) * uint64_t(xi);
      const uint64_t shifted = is_signed_integer(d) ? uint64_t(xi >> 1) : uint64_t(xi) >> 1;
      want.push_back(wrap(prod ^ shifted));
    }
    auto got = astype(fused, int64).to_vector<int64_t>();
    EXPECT_EQ(got, want) << d;
  }
}

TEST(IntegerDtypes, ShapeIndexingAndSortWork) {
  array x({5, -3, 7, 0}, int8);
  expect_array(sort(x), {4}, {-3, 0, 5, 7});
  expect_array(argsort(x), {4}, {1, 3, 0, 2});
  const uint64_t big = ~uint64_t(0);
  array u({big, uint64_t(7), uint64_t(0), (uint64_t(1) << 63) + 5}, uint64);
  auto sorted = sort(u).to_vector<uint64_t>();
  EXPECT_EQ(sorted, (std::vector<uint64_t>{0, 7, (uint64_t(1) << 63) + 5, big}));
  expect_array(take(array({10, 20, 30}, uint16), array({2, 0}, int8)), {2}, {30, 10});
  expect_array(concatenate({array({1}, int16), array({2}, int16)}), {2}, {1, 2});
  expect_array(where(array({true, false}), array({1, 2}, uint32), array({3, 4}, uint32)), {2}, {1, 4});
  expect_array(transpose(reshape(astype(arange(0, 6, 1), int16), {2, 3})), {3, 2}, {0, 3, 1, 4, 2, 5});
  expect_array(cumsum(array({100, 100}, int16)), {2}, {100, 200});
}

// These dtypes run one strided loop per op (kernels/elementwise.h: generic_loops_v), which then
// serves every layout the driver plans: contiguous, a scalar operand on either side, broadcast rows
// and columns, transposed and sliced views, and the fused path. Each must give what the same
// arithmetic in int64, wrapped to the dtype, gives; the reductions and the sort likewise along each
// axis of a transposed input.
TEST(IntegerDtypes, EveryLayoutOfTheGenericLoops) {
  for (Dtype d : {int8, int16, uint16, uint32, uint64}) {
    const int bits = d.size * 8;
    auto wrap = [&](int64_t v) {
      uint64_t u = static_cast<uint64_t>(v);
      if (bits < 64) u &= (uint64_t(1) << bits) - 1;
      if (is_signed_integer(d) && bits < 64 && (u >> (bits - 1))) return static_cast<int64_t>(u) - (int64_t(1) << bits);
      return static_cast<int64_t>(u);
    };
    // 6 x 7 values that wrap in the narrow dtypes' products.
    std::vector<int64_t> av(42), bv(42);
    for (int i = 0; i < 42; ++i) av[i] = wrap(37 * i + 5), bv[i] = wrap(101 * i % 89 + 3);
    const array a64 = reshape(array(av.data(), {42}, int64), {6, 7});
    const array b64 = reshape(array(bv.data(), {42}, int64), {6, 7});
    const array a = astype(a64, d), b = astype(b64, d);
    auto same = [&](array got, array want64, const char* what) {
      ASSERT_EQ(got.dtype(), d) << what;
      std::vector<int64_t> w = want64.to_vector<int64_t>();
      for (auto& v : w) v = wrap(v);
      EXPECT_EQ(astype(got, int64).to_vector<int64_t>(), w) << d << " " << what;
    };
    // The int64 products wrap as uint64 would, and the low bits are the dtype's.
    same(multiply(a, b), multiply(a64, b64), "contiguous");
    same(add(a, b), add(a64, b64), "contiguous add");
    same(subtract(array(7, d), b), subtract(array(int64_t(7)), b64), "scalar first");
    same(multiply(a, array(3, d)), multiply(a64, array(int64_t(3))), "scalar second");
    same(add(transpose(a), transpose(b)), add(transpose(a64), transpose(b64)), "transposed");
    same(multiply(transpose(a), transpose(transpose(transpose(b)))), multiply(transpose(a64), transpose(b64)), "views");
    same(add(slice(a, {0, 1}, {6, 7}, {2, 3}), slice(b, {1, 0}, {6, 5}, {2, 4})),
         add(slice(a64, {0, 1}, {6, 7}, {2, 3}), slice(b64, {1, 0}, {6, 5}, {2, 4})), "strided slices");
    same(add(slice(a, {0, 0}, {1, 7}), b), add(slice(a64, {0, 0}, {1, 7}), b64), "broadcast row");
    same(multiply(b, slice(a, {0, 2}, {6, 3})), multiply(b64, slice(a64, {0, 2}, {6, 3})), "broadcast column");
    same(negative(transpose(a)), negative(transpose(a64)), "unary transposed");
    same(square(slice(a, {0, 0}, {6, 7}, {1, 2})), square(slice(a64, {0, 0}, {6, 7}, {1, 2})), "unary strided");
    same(add(multiply(a, b), a), add(multiply(a64, b64), a64), "fused");
    // Comparisons: bool results of the same loops.
    const std::vector<int64_t> aw = astype(a, int64).to_vector<int64_t>(), bw = astype(b, int64).to_vector<int64_t>();
    std::vector<bool> lt;
    for (int i = 0; i < 42; ++i) lt.push_back(aw[i] < bw[i]);
    EXPECT_EQ(less(a, b).to_vector<bool>(), lt) << d;
    // Reductions along each axis of a transposed input, and of all of it (values small: no wrap).
    const array s = astype(reshape(astype(arange(0, 42, 1), int64), {6, 7}), d), s64 = astype(s, int64);
    for (int ax : {0, 1}) {
      EXPECT_EQ(astype(sum(transpose(s), ax), int64).to_vector<int64_t>(),
                sum(transpose(s64), ax).to_vector<int64_t>()) << d << " sum axis " << ax;
      EXPECT_EQ(astype(max(transpose(s), ax), int64).to_vector<int64_t>(),
                max(transpose(s64), ax).to_vector<int64_t>()) << d << " max axis " << ax;
      EXPECT_EQ(astype(sort(transpose(a), ax), int64).to_vector<int64_t>(),
                sort(transpose(astype(a, int64)), ax).to_vector<int64_t>()) << d << " sort axis " << ax;
      EXPECT_EQ(argsort(transpose(a), ax).to_vector<int32_t>(), argsort(transpose(astype(a, int64)), ax).to_vector<int32_t>())
          << d << " argsort axis " << ax;
    }
    EXPECT_EQ(astype(sum(s), int64).item<int64_t>(), 861) << d;
  }
}

// Every dtype pair's conversion is one loop whatever the layout: a transposed or sliced source
// converts to what its contiguous copy converts to.
TEST(IntegerDtypes, ConversionsAreTheSameInEveryLayout) {
  const array base = reshape(astype(arange(-20, 22, 1), int64), {6, 7});
  for (Dtype from : all_dtypes) {
    const array x = astype(base, from);
    for (Dtype to : all_dtypes) {
      array t = astype(transpose(x), to), c = astype(contiguous(transpose(x)), to);
      EXPECT_TRUE(array_equal(t, c).item<bool>()) << from << " -> " << to;
      const array s = astype(slice(x, {1, 0}, {6, 7}, {2, 3}), to);
      EXPECT_TRUE(array_equal(s, astype(contiguous(slice(x, {1, 0}, {6, 7}, {2, 3})), to)).item<bool>())
          << from << " -> " << to;
    }
  }
}

TEST(IntegerDtypes, PrintsNumbers) {
  std::ostringstream os;
  os << array({-5, 65}, int8) << " " << array({65535}, uint16) << " " << array({~uint64_t(0)}, uint64);
  EXPECT_EQ(os.str(),
            "array([-5, 65], shape=(2), dtype=int8) array([65535], shape=(1), dtype=uint16) "
            "array([18446744073709551615], shape=(1), dtype=uint64)");
}

TEST(IntegerDtypes, RandomBitsAndRandint) {
  array k = random::key(3);
  EXPECT_EQ(random::bits({4}, 1, k).dtype(), uint8);
  EXPECT_EQ(random::bits({4}, 2, k).dtype(), uint16);
  EXPECT_EQ(random::bits({4}, k).dtype(), uint32);
  EXPECT_EQ(random::bits({4}, 8, k).dtype(), uint64);
  // The same stream read at different widths: a uint32 element is two uint16 elements.
  auto b2 = random::bits({4}, 2, k).to_vector<uint16_t>();
  auto b4 = random::bits({2}, 4, k).to_vector<uint32_t>();
  EXPECT_EQ(b4[0], uint32_t(b2[0]) | (uint32_t(b2[1]) << 16));
  EXPECT_EQ(b4[1], uint32_t(b2[2]) | (uint32_t(b2[3]) << 16));
  for (Dtype d : {int8, int16, uint16, uint32, uint64}) {
    array r = random::randint(-3 * is_signed_integer(d), 50, {2000}, d, k);
    EXPECT_EQ(r.dtype(), d);
    auto v = astype(r, int64).to_vector<int64_t>();
    EXPECT_EQ(*std::min_element(v.begin(), v.end()), -3 * is_signed_integer(d)) << d;
    EXPECT_EQ(*std::max_element(v.begin(), v.end()), 49) << d;
  }
  EXPECT_THROW_MSG(random::randint(0, 300, {2}, int8, k), E, "[randint] high 300 is beyond the range of int8");
  EXPECT_THROW_MSG(random::randint(-1, 3, {2}, uint16, k), E, "[randint] low -1 is below the range of uint16");
}

}  // namespace
}  // namespace loom
