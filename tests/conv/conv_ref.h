// A naive direct-loop convolution in double for the conv tests: every (n, output position, c_out, tap,
// c_in) tuple is visited explicitly, so forward, input-gradient and weight-gradient references are
// the same seven nested loops with a different accumulation.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "loom/core/array.h"

namespace convref {

struct Case2d {
  int N = 1, H = 1, W = 1, Cin = 1, Cout = 1, KH = 1, KW = 1;
  int sh = 1, sw = 1;    // stride
  int plh = 0, plw = 0;  // padding low
  int phh = 0, phw = 0;  // padding high
  int dh = 1, dw = 1;    // kernel dilation
  int ih = 1, iw = 1;    // input dilation
  int groups = 1;
  int OH() const { return ((H - 1) * ih + 1 + plh + phh - ((KH - 1) * dh + 1)) / sh + 1; }
  int OW() const { return ((W - 1) * iw + 1 + plw + phw - ((KW - 1) * dw + 1)) / sw + 1; }
  loom::Shape xshape() const { return {N, H, W, Cin}; }
  loom::Shape wshape() const { return {Cout, KH, KW, Cin / groups}; }
  loom::Shape yshape() const { return {N, OH(), OW(), Cout}; }
};

// Calls f(x_index, w_index, y_index) for every product term of the convolution (row-major indices).
template <typename F>
void visit(const Case2d& c, F f) {
  const int OH = c.OH(), OW = c.OW(), Cg = c.Cin / c.groups, Cog = c.Cout / c.groups;
  for (int n = 0; n < c.N; ++n)
    for (int oh = 0; oh < OH; ++oh)
      for (int ow = 0; ow < OW; ++ow)
        for (int co = 0; co < c.Cout; ++co)
          for (int kh = 0; kh < c.KH; ++kh)
            for (int kw = 0; kw < c.KW; ++kw)
              for (int cig = 0; cig < Cg; ++cig) {
                int vh = oh * c.sh + kh * c.dh - c.plh, vw = ow * c.sw + kw * c.dw - c.plw;
                if (vh < 0 || vw < 0 || vh % c.ih != 0 || vw % c.iw != 0) continue;
                int h = vh / c.ih, w = vw / c.iw;
                if (h >= c.H || w >= c.W) continue;
                int ci = (co / Cog) * Cg + cig;
                int64_t xi = ((int64_t(n) * c.H + h) * c.W + w) * c.Cin + ci;
                int64_t wi = ((int64_t(co) * c.KH + kh) * c.KW + kw) * Cg + cig;
                int64_t yi = ((int64_t(n) * OH + oh) * OW + ow) * c.Cout + co;
                f(xi, wi, yi);
              }
}

inline std::vector<double> forward(const Case2d& c, const std::vector<double>& x, const std::vector<double>& w) {
  std::vector<double> y(size_t(c.N) * c.OH() * c.OW() * c.Cout, 0.0);
  visit(c, [&](int64_t xi, int64_t wi, int64_t yi) { y[yi] += x[xi] * w[wi]; });
  return y;
}

inline std::vector<double> input_grad(const Case2d& c, const std::vector<double>& dy, const std::vector<double>& w) {
  std::vector<double> dx(size_t(c.N) * c.H * c.W * c.Cin, 0.0);
  visit(c, [&](int64_t xi, int64_t wi, int64_t yi) { dx[xi] += dy[yi] * w[wi]; });
  return dx;
}

inline std::vector<double> weight_grad(const Case2d& c, const std::vector<double>& x, const std::vector<double>& dy) {
  std::vector<double> dw(size_t(c.Cout) * c.KH * c.KW * (c.Cin / c.groups), 0.0);
  visit(c, [&](int64_t xi, int64_t wi, int64_t yi) { dw[wi] += dy[yi] * x[xi]; });
  return dw;
}

// Deterministic values in [-1, 1).
inline std::vector<double> random_values(size_t n, uint64_t seed) {
  std::vector<double> v(n);
  uint64_t s = seed * 6364136223846793005ULL + 1442695040888963407ULL;
  for (auto& e : v) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    e = double(s >> 11) / double(uint64_t(1) << 53) * 2.0 - 1.0;
  }
  return v;
}

}  // namespace convref
