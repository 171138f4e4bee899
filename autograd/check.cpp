#include "loom/autograd/check.h"

#include <cmath>
#include <random>
#include <sstream>

#include "loom/core/eval.h"
#include "loom/ops/ops.h"

namespace loom {

namespace {

std::vector<double> host(const array& a) { return const_cast<array&>(a).to_vector<double>(); }

array from_host(const std::vector<double>& v, const Shape& shape) { return array(v, shape, float64); }

std::vector<double> random_values(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<double> d(-1.0, 1.0);
  std::vector<double> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

}  // namespace

GradCheck check_grads(const VectorFn& fun, const std::vector<array>& primals_in, const std::vector<int>& argnums_in,
                      double eps, double rtol, double atol) {
  GradCheck result;
  std::ostringstream report;
  std::vector<array> primals;
  for (const auto& p : primals_in) primals.push_back(is_floating_point(p.dtype()) ? astype(p, float64) : p);
  eval(primals);
  std::vector<int> argnums = argnums_in;
  if (argnums.empty()) {
    for (size_t i = 0; i < primals.size(); ++i) {
      if (is_floating_point(primals[i].dtype())) argnums.push_back(static_cast<int>(i));
    }
  }
  std::mt19937 rng(1234);
  auto outputs = fun(primals);
  eval(outputs);
  std::vector<array> cots;
  std::vector<std::vector<double>> cot_host;
  for (const auto& o : outputs) {
    auto u = random_values(o.size(), rng);
    if (!is_floating_point(o.dtype())) std::fill(u.begin(), u.end(), 0.0);
    cot_host.push_back(u);
    cots.push_back(astype(from_host(u, o.shape()), o.dtype()));
  }
  auto eval_outputs = [&](const std::vector<array>& ps) {
    auto outs = fun(ps);
    eval(outs);
    std::vector<std::vector<double>> h;
    for (auto& o : outs) h.push_back(host(o));
    return h;
  };
  auto close = [&](double got, double want) { return std::abs(got - want) <= atol + rtol * std::abs(want); };

  // Reverse mode: <u, J e_k> for every element k of every checked primal.
  auto [vouts, vgrads] = detail::vjp_impl(fun, primals, [&](const std::vector<array>&) { return cots; }, argnums);
  eval(vgrads);
  for (size_t a = 0; a < argnums.size(); ++a) {
    int i = argnums[a];
    auto base = host(primals[i]);
    auto g = host(vgrads[a]);
    if (vgrads[a].shape() != primals[i].shape()) {
      result.ok = false;
      report << "vjp of input " << i << " has shape " << detail::shape_str(vgrads[a].shape()) << ", expected "
             << detail::shape_str(primals[i].shape()) << "\n";
      continue;
    }
    for (size_t k = 0; k < base.size(); ++k) {
      std::vector<array> plus = primals, minus = primals;
      auto b = base;
      b[k] += eps;
      plus[i] = from_host(b, primals[i].shape());
      b[k] = base[k] - eps;
      minus[i] = from_host(b, primals[i].shape());
      auto fp = eval_outputs(plus), fm = eval_outputs(minus);
      double num = 0;
      for (size_t o = 0; o < fp.size(); ++o) {
        for (size_t e = 0; e < fp[o].size(); ++e) num += cot_host[o][e] * (fp[o][e] - fm[o][e]) / (2 * eps);
      }
      if (!close(g[k], num)) {
        result.ok = false;
        report << "vjp: input " << i << " element " << k << ": analytic " << g[k] << " vs numeric " << num << "\n";
      }
    }
  }

  // Forward mode: J t against (f(x + eps t) - f(x - eps t)) / 2 eps.
  std::vector<array> tangents;
  std::vector<array> plus = primals, minus = primals;
  for (size_t i = 0; i < primals.size(); ++i) {
    bool checked = std::find(argnums.begin(), argnums.end(), static_cast<int>(i)) != argnums.end();
    auto t = random_values(primals[i].size(), rng);
    if (!checked || !is_floating_point(primals[i].dtype())) std::fill(t.begin(), t.end(), 0.0);
    tangents.push_back(astype(from_host(t, primals[i].shape()), primals[i].dtype()));
    if (checked) {
      auto base = host(primals[i]);
      auto bp = base, bm = base;
      for (size_t k = 0; k < base.size(); ++k) {
        bp[k] += eps * t[k];
        bm[k] -= eps * t[k];
      }
      plus[i] = from_host(bp, primals[i].shape());
      minus[i] = from_host(bm, primals[i].shape());
    }
  }
  auto [jouts, jtans] = jvp(fun, primals, tangents);
  eval(jtans);
  auto fp = eval_outputs(plus), fm = eval_outputs(minus);
  for (size_t o = 0; o < jtans.size(); ++o) {
    if (!is_floating_point(outputs[o].dtype())) continue;
    auto t = host(jtans[o]);
    if (t.size() != fp[o].size()) {
      result.ok = false;
      report << "jvp: output " << o << " has " << t.size() << " elements, expected " << fp[o].size() << "\n";
      continue;
    }
    for (size_t e = 0; e < t.size(); ++e) {
      double num = (fp[o][e] - fm[o][e]) / (2 * eps);
      if (!close(t[e], num)) {
        result.ok = false;
        report << "jvp: output " << o << " element " << e << ": analytic " << t[e] << " vs numeric " << num << "\n";
      }
    }
  }
  result.report = report.str();
  return result;
}

}  // namespace loom
