// Run by the distributed_mixed_ranks CTest entry as two ranks that take different paths through
// eval: rank 0 with 1 thread and LOOM_ASYNC_COLLECTIVES=0, rank 1 with 2 threads and
// LOOM_ASYNC_COLLECTIVES=1 (every collective's kind, dtype and shape is compared across the ranks
// before it runs, always). One eval holds many independent collectives of
// different kinds, sizes and dtypes with compute between them, some fed by the result of another:
// the ranks must issue them in one order, and then agree on every result, which must be the exact
// (or, for the model's gradients, the locally recomputed) value.
//   collective_order [--threads T]       prints "collective order: ok" on success, exits 1 otherwise
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "loom/loom.h"

using namespace loom;
namespace dist = loom::distributed;

namespace {

int failures = 0;

void expect_close(const char* what, const array& got, const std::vector<double>& want, double tol) {
  auto v = astype(got, float64).to_vector<double>();
  if (v.size() != want.size()) {
    std::fprintf(stderr, "%s: %zu elements, expected %zu\n", what, v.size(), want.size());
    ++failures;
    return;
  }
  for (size_t i = 0; i < v.size(); ++i) {
    if (std::fabs(v[i] - want[i]) > tol * (1 + std::fabs(want[i]))) {
      std::fprintf(stderr, "%s[%zu] = %.9g, expected %.9g\n", what, i, v[i], want[i]);
      ++failures;
      return;
    }
  }
}

struct MLP : nn::Module {
  nn::Linear l1{12, 32}, l2{32, 32}, l3{32, 24}, l4{24, 5};
  MLP() {
    register_module("l1", l1);
    register_module("l2", l2);
    register_module("l3", l3);
    register_module("l4", l4);
  }
  array operator()(const array& x) const { return l4(tanh(l3(tanh(l2(tanh(l1(x))))))); }
};

// Rank r's batch: rows [16 r, 16 r + 16) of a fixed data set.
std::pair<array, array> batch(int r) {
  array X = random::normal({64, 12}, random::key(7));
  array Y = random::normal({64, 5}, random::key(8));
  return {slice(X, {16 * r, 0}, {16 * r + 16, 12}), slice(Y, {16 * r, 0}, {16 * r + 16, 5})};
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--threads") == 0) set_num_threads(std::atoi(argv[i + 1]));
  }
  auto g = dist::init();
  const int n = g.size(), r = g.rank();
  if (n > 4) {
    std::fprintf(stderr, "collective_order: at most 4 ranks\n");
    return 1;
  }
  random::seed(42);
  MLP model;
  eval(model.parameters());
  auto loss_fn = [&](const array& x, const array& y) { return mean(square(model(x) - y)); };
  auto step = nn::value_and_grad(model, loss_fn);

  for (int rep = 0; rep < 3; ++rep) {
    // A chain: a collective whose input reads another collective's result.
    array a = full({300}, float(r + 1));
    array s1 = dist::all_sum(a);                              // n (n + 1) / 2 everywhere
    array c1 = dist::all_gather(reshape(s1 * 2.0f + float(r), {3, 100}));
    array s2 = dist::all_max(astype(sum(c1, std::vector<int>{1}), int32));
    // The model's gradients, in buckets (compute between the collectives: the backward pass).
    auto [xb, yb] = batch(r);
    auto [loss, grads] = step(xb, yb);
    nn::ParamTree avg = nn::average_gradients(grads, 2048);
    // Independent collectives of other kinds, shapes and dtypes, each behind some compute.
    std::vector<array> others;
    for (int k = 0; k < 6; ++k) {
      Dtype d = k % 3 == 0 ? float32 : k % 3 == 1 ? float64 : int64;
      array base = astype(arange(0.0, double(50 * (k + 1)), 1.0, float32) + float(r), d);
      array m = exp(astype(base, float32) * 0.0f);  // ones, computed
      array fed = base * astype(m, d);
      others.push_back(k % 2 ? dist::all_sum(fed) : dist::all_gather(reshape(fed, {k + 1, 50})));
    }
    array chained = dist::all_min(others[0] + astype(take(s1, 0), float32));  // reads a collective fed by a collective
    std::vector<array> outs = {c1, s2, chained, loss};
    for (auto& [name, gr] : avg) outs.push_back(gr);
    outs.insert(outs.end(), others.begin(), others.end());
    eval(outs);

    // Exact values.
    const double tri = n * (n + 1) / 2.0;
    std::vector<double> want_c1;
    for (int q = 0; q < n; ++q) want_c1.insert(want_c1.end(), 300, 2 * tri + q);
    expect_close("all_gather(2 all_sum + r)", c1, want_c1, 0);
    // Row sums of c1 (3 rows of 100 per rank), the same on every rank: their max is themselves.
    std::vector<double> want_rows;
    for (int q = 0; q < n; ++q) want_rows.insert(want_rows.end(), 3, 100 * (2 * tri + q));
    expect_close("all_max(row sums)", s2, want_rows, 0);
    for (int k = 0; k < 6; ++k) {
      const int len = 50 * (k + 1);
      std::vector<double> want;
      if (k % 2) {
        for (int i = 0; i < len; ++i) want.push_back(n * double(i) + tri - n);
      } else {
        for (int q = 0; q < n; ++q) {
          for (int i = 0; i < len; ++i) want.push_back(double(i) + q);
        }
      }
      expect_close(("collective " + std::to_string(k)).c_str(), others[k], want, 0);
    }
    {
      // others[0] is the same on every rank, so the min is others[0] + tri.
      std::vector<double> w;
      for (int q = 0; q < n; ++q) {
        for (int i = 0; i < 50; ++i) w.push_back(double(i) + q + tri);
      }
      expect_close("all_min(gathered + all_sum)", chained, w, 0);
    }
    // The averaged gradients: the mean of every rank's, recomputed here without communication.
    for (auto& [name, gr] : avg) {
      array want = zeros_like(gr);
      for (int q = 0; q < n; ++q) {
        auto [xq, yq] = batch(q);
        auto [lq, gq] = step(xq, yq);
        want = want + gq.at(name);
      }
      want = want / float(n);
      expect_close(("average_gradients " + name).c_str(), gr, astype(want, float64).to_vector<double>(), 1e-5);
    }
    // Every rank holds bit-identical results.
    for (const array& o : outs) {
      if (o.ndim() == 0) continue;  // the loss is rank-local
      array f = astype(o, float64);
      array spread = max(dist::all_max(f) - dist::all_min(f));
      if (spread.item<double>() != 0) {
        std::fprintf(stderr, "rank %d: the ranks disagree on a result of shape %s\n", r,
                     detail::shape_str(o.shape()).c_str());
        ++failures;
      }
    }
  }
  if (failures) {
    std::fprintf(stderr, "rank %d: %d failures\n", r, failures);
    return 1;
  }
  if (r == 0) std::printf("collective order: ok\n");
  return 0;
}
