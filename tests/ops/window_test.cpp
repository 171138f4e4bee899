// hanning, hamming, blackman and bartlett against numpy (np.hanning(M).astype(np.float32) etc.,
// computed once with /usr/bin/python3): M < 1, M = 1, even and odd M, symmetry, dtype.
#include "../test_utils.h"

using namespace loom;
using loom::testing::expect_array;

TEST(Window, SmallSizes) {
  for (auto f : {&hanning, &hamming, &blackman, &bartlett}) {
    for (int M : {0, -1, -5}) {
      array w = f(M, {});
      EXPECT_EQ(w.dtype(), float32);
      expect_array(w, {0}, {});
    }
    EXPECT_EQ(f(1, {}).dtype(), float32);
    expect_array(f(1, {}), {1}, {1});
  }
  // M = 2: both ends.
  expect_array(hanning(2), {2}, {0, 0});
  expect_array(hamming(2), {2}, {0.07999999821186066, 0.07999999821186066}, 0);
  expect_array(blackman(2), {2}, {-1.3877787807814457e-17, -1.3877787807814457e-17}, 1e-24);
  expect_array(bartlett(2), {2}, {0, 0});
}

TEST(Window, MatchNumpy) {
  // Tolerance 0: each value is numpy's float64 window rounded once to float32.
  expect_array(hanning(5), {5}, {0.0, 0.5, 1.0, 0.5, 0.0}, 0);
  expect_array(hamming(5), {5}, {0.07999999821186066, 0.5400000214576721, 1.0, 0.5400000214576721, 0.07999999821186066}, 0);
  expect_array(blackman(5), {5}, {-1.3877787807814457e-17, 0.3400000035762787, 1.0, 0.3400000035762787, -1.3877787807814457e-17}, 0);
  expect_array(bartlett(5), {5}, {0.0, 0.5, 1.0, 0.5, 0.0}, 0);
  expect_array(hanning(8), {8},
               {0.0, 0.18825510144233704, 0.6112604737281799, 0.9504844546318054, 0.9504844546318054,
                0.6112604737281799, 0.18825510144233704, 0.0}, 1e-7);
  expect_array(hamming(8), {8},
               {0.07999999821186066, 0.2531946897506714, 0.6423596143722534, 0.9544456601142883, 0.9544456601142883,
                0.6423596143722534, 0.2531946897506714, 0.07999999821186066}, 1e-7);
  expect_array(blackman(8), {8},
               {-1.3877787807814457e-17, 0.09045342355966568, 0.4591829478740692, 0.9203636050224304,
                0.9203636050224304, 0.4591829478740692, 0.09045342355966568, -1.3877787807814457e-17}, 1e-7);
  expect_array(bartlett(8), {8},
               {0.0, 0.2857142984867096, 0.5714285969734192, 0.8571428656578064, 0.8571428656578064,
                0.5714285969734192, 0.2857142984867096, 0.0}, 1e-7);
}

TEST(Window, LongWindowsAreSymmetricAndPeakAtOne) {
  for (auto f : {&hanning, &hamming, &blackman, &bartlett}) {
    for (int M : {101, 1000}) {
      auto w = f(M, {}).to_vector<float>();
      ASSERT_EQ(w.size(), size_t(M));
      for (int i = 0; i < M; ++i) EXPECT_NEAR(w[i], w[M - 1 - i], 1e-6) << M << " " << i;
      if (M % 2) EXPECT_NEAR(w[M / 2], 1.0f, 1e-7);
      for (int i = 1; i <= M / 2; ++i) EXPECT_GE(w[i], w[i - 1] - 1e-7);  // rises to the middle
    }
  }
}
