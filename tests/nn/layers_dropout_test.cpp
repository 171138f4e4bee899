#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "loom/loom.h"
#include "loom/nn/dropout.h"
#include "../test_utils.h"

using namespace loom;
using loom::testing::expect_array;

TEST(Dropout, EvalModeAndZeroProbabilityAreIdentity) {
  nn::Dropout d(0.3);
  EXPECT_TRUE(d.parameters().empty());
  array x = ones({4, 5});
  d.eval();
  EXPECT_EQ(d(x).id(), x.id());
  d.train();
  nn::Dropout none(0.0);
  EXPECT_EQ(none(x).id(), x.id());
}

TEST(Dropout, TrainModeZeroesAboutPAndScalesTheRest) {
  random::seed(21);
  const double p = 0.25;
  nn::Dropout d(p);
  const int n = 200000;
  auto y = d(full({n}, 2.0f)).to_vector<float>();
  int zeros_count = 0;
  for (float v : y) {
    if (v == 0) {
      ++zeros_count;
    } else {
      ASSERT_FLOAT_EQ(v, 2.0f / 0.75f);
    }
  }
  // Binomial(n, 0.25): standard deviation ~0.001 of n; allow 5 of them.
  EXPECT_NEAR(static_cast<double>(zeros_count) / n, p, 0.005);
  // The same seed gives the same mask.
  random::seed(21);
  EXPECT_EQ(d(full({n}, 2.0f)).to_vector<float>(), y);
  // Masks differ from call to call.
  EXPECT_NE(d(full({n}, 2.0f)).to_vector<float>(), y);
  // float16 stays float16.
  EXPECT_EQ(d(ones({8}, float16)).dtype(), float16);
}

TEST(Dropout, GradientIsTheScaledMask) {
  random::seed(3);
  nn::Dropout d(0.5);
  array x = full({1000}, 3.0f);
  auto [out, g] = vjp([&](const array& a) { return d(a); }, x, ones({1000}));
  auto ys = out.to_vector<float>();
  auto gs = g.to_vector<float>();
  int kept = 0;
  for (size_t i = 0; i < ys.size(); ++i) {
    // y = 2 x where kept (gradient 2), 0 where dropped (gradient 0).
    ASSERT_FLOAT_EQ(gs[i], ys[i] / 3.0f) << i;
    kept += ys[i] != 0;
  }
  EXPECT_GT(kept, 400);
  EXPECT_LT(kept, 600);
}

TEST(Dropout, ChannelDropoutZeroesWholeChannels) {
  random::seed(5);
  nn::Dropout2d d(0.5);
  array y = d(ones({8, 3, 4, 16}));
  auto v = y.to_vector<float>();
  int dropped = 0;
  for (int n = 0; n < 8; ++n) {
    for (int c = 0; c < 16; ++c) {
      float first = v[((n * 3 + 0) * 4 + 0) * 16 + c];
      EXPECT_TRUE(first == 0.0f || first == 2.0f);
      dropped += first == 0.0f;
      for (int h = 0; h < 3; ++h) {
        for (int w = 0; w < 4; ++w) ASSERT_EQ(v[((n * 3 + h) * 4 + w) * 16 + c], first);
      }
    }
  }
  EXPECT_GT(dropped, 30);  // of 128 channels, about 64
  EXPECT_LT(dropped, 98);
  // Unbatched input; a 3-d version.
  EXPECT_EQ(d(ones({3, 4, 16})).shape(), (Shape{3, 4, 16}));
  nn::Dropout3d d3(0.5);
  auto v3 = d3(ones({2, 2, 3, 3, 4})).to_vector<float>();
  for (int n = 0; n < 2; ++n) {
    for (int c = 0; c < 4; ++c) {
      float first = v3[n * 72 + c];
      for (int s = 0; s < 18; ++s) ASSERT_EQ(v3[(n * 18 + s) * 4 + c], first);
    }
  }
  d.eval();
  array x = ones({2, 3, 4, 5});
  EXPECT_EQ(d(x).id(), x.id());
}

TEST(Dropout, Errors) {
  EXPECT_THROW_MSG(nn::Dropout(1.0), std::invalid_argument, "[nn::Dropout] the drop probability p must be in [0, 1), got 1");
  EXPECT_THROW_MSG(nn::Dropout(-0.1), std::invalid_argument, "got -0.1");
  EXPECT_THROW_MSG(nn::Dropout2d(1.5), std::invalid_argument, "[nn::Dropout2d]");
  EXPECT_THROW_MSG(nn::Dropout2d(0.5)(ones({4, 5})), std::invalid_argument,
                   "[nn::Dropout2d] expected input (N, H, W, C) or (H, W, C), got shape (4,5)");
  EXPECT_THROW_MSG(nn::Dropout3d(0.5)(ones({4, 5, 6})), std::invalid_argument, "[nn::Dropout3d] expected input");
}
