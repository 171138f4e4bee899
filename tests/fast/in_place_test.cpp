// The fused row kernels and GELU write into an input's buffer when nothing else needs it: the values
// are those of a fresh buffer, for the forward (a temporary input) and the backward (a temporary
// cotangent, and both).
#include <functional>

#include "../test_utils.h"

using namespace loom;
using loom::testing::lcg_uniform;

namespace {

void expect_same(array got, array want) {
  const std::vector<float> g = got.to_vector<float>(), w = want.to_vector<float>();
  ASSERT_EQ(g.size(), w.size());
  for (size_t i = 0; i < g.size(); ++i) ASSERT_EQ(g[i], w[i]) << "element " << i;
}

}  // namespace

TEST(FusedKernelsInPlace, MatchFreshBuffers) {
  array x = astype(lcg_uniform({6, 37}, -2, 2, 1), float32), g = astype(lcg_uniform({6, 37}, -1, 1, 2), float32);
  array w = astype(lcg_uniform({37}, 0.5, 1.5, 3), float32), b = astype(lcg_uniform({37}, -1, 1, 4), float32);
  eval(x, g, w, b);
  const std::vector<std::pair<const char*, std::function<array(const array&)>>> ops = {
      {"layer_norm", [&](const array& a) { return fast::layer_norm(a, w, b); }},
      {"layer_norm without weight and bias", [](const array& a) { return fast::layer_norm(a, std::nullopt, std::nullopt); }},
      {"rms_norm", [&](const array& a) { return fast::rms_norm(a, w); }},
      {"softmax", [](const array& a) { return softmax(a, -1); }},
      {"log_softmax", [](const array& a) { return log_softmax(a, -1); }},
      {"fast::softmax", [](const array& a) { return fast::softmax(a); }},
      {"fast::log_softmax", [](const array& a) { return fast::log_softmax(a); }},
      {"gelu", [](const array& a) { return fast::gelu(a); }},
  };
  for (const auto& [name, f] : ops) {
    SCOPED_TRACE(name);
    // The temporaries die with their statement, before anything is evaluated.
    const array fresh = f(x), dx = vjp(f, x, g).second;
    const array y = f(x * 1.0f);
    const array dx_g = vjp(f, x, g * 1.0f).second;
    const array dx_xg = vjp(f, x * 1.0f, g * 1.0f).second;
    expect_same(y, fresh);
    expect_same(dx_g, dx);
    expect_same(dx_xg, dx);
  }
}
