// The Loom side of the differential tester (tests/diff/README.md): reads cases as JSON lines on stdin,
// runs each with Loom's public API and writes one JSON line of results per case to stdout, flushed,
// so that when a case crashes the process the driver (diff.py) knows which one it was.
//
//   loom_diff [--fusion on|off|both] [--threads N] [--primitives] [--no-vmap] [--no-compile] < cases.jsonl
//
// Case:   {"id", "op", "inputs": [{"dtype", "shape", "data", "view"?}], "params"?, "vjp"?, "jvp"?}
// Result: {"id", "outputs": [{"dtype", "shape", "data"}], "vjp"?: [...], "jvp"?: [...],
//          "nofuse"?: {...the same, from a run with fusion off, when it differs...},
//          "vmap"?: "what differs when the op (and its vjp) under vmap disagrees with a loop over
//                   a batch of three perturbed copies of the inputs (see vmap_check)",
//          "compile"?: "what differs when the op (and its vjp, its jvp) compiled disagrees with
//                      itself uncompiled (see compile_check)"}
//         or {"id", "error": "..."} when Loom throws.
// Floating values are numbers or the strings "nan", "inf", "-inf", a complex64 value a [real, imag]
// pair of them; a view recipe is a list of
// {"transpose": axes}, {"slice": {"start", "stop", "strides"}}, {"broadcast": shape},
// {"reshape": shape} applied with Loom's own ops to the base array, inside the differentiated function.
#include <loom/core/primitive.h>  // detail::set_primitive_hook, for --primitives
#include <loom/loom.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>

using json = nlohmann::json;
using namespace loom;

namespace {

Dtype dtype_from(const std::string& s) {
  static const std::map<std::string, Dtype> m = {{"bool", bool_},       {"uint8", uint8},       {"int8", int8},
                                                 {"uint16", uint16},    {"uint32", uint32},     {"uint64", uint64},
                                                 {"int16", int16},      {"int32", int32},
                                                 {"int64", int64},      {"float16", float16},   {"bfloat16", bfloat16},
                                                 {"float32", float32},  {"float64", float64},   {"complex64", complex64}};
  auto it = m.find(s);
  if (it == m.end()) throw std::runtime_error("loom_diff: unknown dtype " + s);
  return it->second;
}

Shape shape_from(const json& j) {
  Shape s;
  for (const auto& d : j) s.push_back(d.get<int>());
  return s;
}
std::vector<int> ints(const json& j) { return j.get<std::vector<int>>(); }
std::pair<int, int> int2(const json& j) { return {j[0].get<int>(), j[1].get<int>()}; }
std::tuple<int, int, int> int3(const json& j) { return {j[0].get<int>(), j[1].get<int>(), j[2].get<int>()}; }

double number(const json& v) {
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s == "nan") return NAN;
    if (s == "inf") return INFINITY;
    if (s == "-inf") return -INFINITY;
    throw std::runtime_error("loom_diff: bad number " + s);
  }
  return v.get<double>();
}

array make_array(const json& j) {
  const Dtype dt = dtype_from(j.at("dtype"));
  const Shape shape = shape_from(j.at("shape"));
  const json& d = j.at("data");
  if (dt == uint64) {  // values up to 2^64 - 1 do not fit int64
    std::vector<uint64_t> v;
    for (const auto& x : d) v.push_back(x.get<uint64_t>());
    return array(v.data(), shape, dt);
  }
  if (dt == complex64) {  // each element a [real, imag] pair
    std::vector<complex64_t> v;
    for (const auto& x : d) v.emplace_back(static_cast<float>(number(x.at(0))), static_cast<float>(number(x.at(1))));
    return array(v.data(), shape, dt);
  }
  if (is_integral(dt) || dt == bool_) {
    std::vector<int64_t> v;
    for (const auto& x : d) v.push_back(x.is_boolean() ? int64_t(x.get<bool>()) : x.get<int64_t>());
    return array(v.data(), shape, dt);
  }
  std::vector<double> v;
  for (const auto& x : d) v.push_back(number(x));
  return array(v.data(), shape, dt);
}

array apply_view(array a, const json& recipe) {
  for (const auto& step : recipe) {
    if (step.contains("transpose")) a = transpose(a, ints(step["transpose"]));
    else if (step.contains("slice"))
      a = slice(a, shape_from(step["slice"]["start"]), shape_from(step["slice"]["stop"]),
                shape_from(step["slice"]["strides"]));
    else if (step.contains("broadcast")) a = broadcast_to(a, shape_from(step["broadcast"]));
    else if (step.contains("reshape")) a = reshape(a, shape_from(step["reshape"]));
    else throw std::runtime_error("loom_diff: unknown view " + step.dump());
  }
  return a;
}

json encode(array a) {
  json out;
  out["dtype"] = to_string(a.dtype());
  out["shape"] = std::vector<int>(a.shape().begin(), a.shape().end());
  json data = json::array();
  auto num = [](double x) -> json {
    if (std::isnan(x)) return "nan";
    if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
    return x;
  };
  if (a.dtype() == complex64) {
    for (complex64_t z : a.to_vector<complex64_t>()) data.push_back(json::array({num(z.real()), num(z.imag())}));
  } else if (a.dtype() == int64) {
    for (int64_t x : a.to_vector<int64_t>()) data.push_back(x);
  } else if (a.dtype() == uint64) {
    for (uint64_t x : a.to_vector<uint64_t>()) data.push_back(x);
  } else if (is_integral(a.dtype()) || a.dtype() == bool_) {
    for (double x : a.to_vector<double>()) data.push_back(static_cast<int64_t>(x));
  } else {
    for (double x : a.to_vector<double>()) data.push_back(num(x));
  }
  out["data"] = std::move(data);
  return out;
}

std::optional<int> opt_int(const json& p, const char* key) {
  if (!p.contains(key) || p[key].is_null()) return std::nullopt;
  return p[key].get<int>();
}

// ---- the ops, by name ----
using Args = std::vector<array>;
using Op = std::function<std::vector<array>(const Args&, const json&)>;

template <typename F>
Op one(F f) {
  return [f](const Args& x, const json& p) { return std::vector<array>{f(x, p)}; };
}

const std::map<std::string, Op>& ops() {
  static const std::map<std::string, Op> table = [] {
    std::map<std::string, Op> t;
#define UNARY(N) t[#N] = one([](const Args& x, const json&) { return N(x[0]); });
    UNARY(negative) UNARY(abs) UNARY(sign) UNARY(square) UNARY(sqrt) UNARY(rsqrt) UNARY(reciprocal) UNARY(exp)
    UNARY(expm1) UNARY(log) UNARY(log1p) UNARY(log2) UNARY(log10) UNARY(sin) UNARY(cos) UNARY(tan) UNARY(tanh)
    UNARY(sigmoid) UNARY(erf) UNARY(erfinv) UNARY(floor) UNARY(ceil) UNARY(round) UNARY(logical_not)
    UNARY(isnan) UNARY(isinf) UNARY(isfinite) UNARY(copy) UNARY(contiguous) UNARY(stop_gradient) UNARY(arcsin) UNARY(arccos)
    UNARY(arctan) UNARY(sinh) UNARY(cosh) UNARY(arcsinh) UNARY(arccosh) UNARY(arctanh) UNARY(bitwise_invert)
    UNARY(real) UNARY(imag) UNARY(conjugate)
#undef UNARY
#define BINARY(N) t[#N] = one([](const Args& x, const json&) { return N(x[0], x[1]); });
    BINARY(add) BINARY(subtract) BINARY(multiply) BINARY(divide) BINARY(floor_divide) BINARY(remainder)
    BINARY(power) BINARY(maximum) BINARY(minimum) BINARY(arctan2) BINARY(logaddexp) BINARY(equal) BINARY(not_equal) BINARY(less)
    BINARY(less_equal) BINARY(greater) BINARY(greater_equal) BINARY(logical_and) BINARY(logical_or)
    BINARY(bitwise_and) BINARY(bitwise_or) BINARY(bitwise_xor) BINARY(left_shift) BINARY(right_shift)
    BINARY(matmul) BINARY(outer) BINARY(inner)
#undef BINARY
    t["einsum"] = one([](const Args& x, const json& p) { return einsum(p["subscripts"].get<std::string>(), x); });
    // linalg (ops/linalg.h); ord is a number, "inf" / "-inf", or "fro" / "nuc".
    t["linalg_inv"] = one([](const Args& x, const json&) { return linalg::inv(x[0]); });
    t["linalg_tri_inv"] = one([](const Args& x, const json& p) { return linalg::tri_inv(x[0], p["upper"].get<bool>()); });
    t["linalg_det"] = one([](const Args& x, const json&) { return linalg::det(x[0]); });
    t["linalg_slogdet"] = [](const Args& x, const json&) {
      auto [s, l] = linalg::slogdet(x[0]);
      return std::vector<array>{s, l};
    };
    t["linalg_cholesky"] = one([](const Args& x, const json& p) { return linalg::cholesky(x[0], p["upper"].get<bool>()); });
    t["linalg_eigvalsh"] = one([](const Args& x, const json& p) {
      return linalg::eigvalsh(x[0], p["upper"].get<bool>() ? "U" : "L");
    });
    t["linalg_qr"] = [](const Args& x, const json&) {
      auto [q, r] = linalg::qr(x[0]);
      return std::vector<array>{q, r};
    };
    t["linalg_pinv"] = one([](const Args& x, const json&) { return linalg::pinv(x[0]); });
    t["linalg_norm"] = one([](const Args& x, const json& p) {
      const std::vector<int> axes = ints(p["axes"]);
      const bool k = p["keepdims"].get<bool>();
      const json& o = p["ord"];
      if (o.is_string() && (o == "fro" || o == "nuc")) return linalg::norm(x[0], o.get<std::string>(), axes, k);
      const double ord = o.is_string() ? (o == "inf" ? INFINITY : -INFINITY) : o.get<double>();
      return linalg::norm(x[0], ord, axes, k);
    });
    t["linalg_solve"] = one([](const Args& x, const json&) { return linalg::solve(x[0], x[1]); });
    t["linalg_solve_triangular"] = one([](const Args& x, const json& p) {
      return linalg::solve_triangular(x[0], x[1], p["upper"].get<bool>());
    });
    t["linalg_cross"] = one([](const Args& x, const json& p) { return linalg::cross(x[0], x[1], p["axis"].get<int>()); });
    t["where"] = one([](const Args& x, const json&) { return where(x[0], x[1], x[2]); });
    t["clip"] = one([](const Args& x, const json& p) {
      const bool lo = p.value("lo", true), hi = p.value("hi", true);
      return clip(x[0], lo ? std::optional<array>(x[1]) : std::nullopt,
                  hi ? std::optional<array>(x[lo ? 2 : 1]) : std::nullopt);
    });
    t["astype"] = one([](const Args& x, const json& p) { return astype(x[0], dtype_from(p["dtype"])); });
    t["hadamard_transform"] = one([](const Args& x, const json& p) {
      return p.contains("scale") ? hadamard_transform(x[0], p["scale"].get<float>()) : hadamard_transform(x[0]);
    });
    // fft (ops/fft.h): params kind (fft, ifft, rfft, irfft, and their 2 / n forms), n (lengths), axes,
    // norm; each absent one takes the op's default.
    t["fft"] = one([](const Args& x, const json& p) {
      const std::string kind = p["kind"].get<std::string>(), nm = p.value("norm", std::string("backward"));
      const fft::FFTNorm norm = nm == "ortho" ? fft::FFTNorm::Ortho : nm == "forward" ? fft::FFTNorm::Forward
                                                                                 : fft::FFTNorm::Backward;
      const bool has_n = p.contains("n"), has_axes = p.contains("axes");
      const std::vector<int> axes = has_axes ? ints(p["axes"]) : std::vector<int>{};
      const Shape n = has_n ? shape_from(p["n"]) : Shape{};
      const char last = kind.back();
      if (last != '2' && last != 'n') {  // one axis
        const int axis = has_axes ? axes[0] : -1;
        if (kind == "fft") return has_n ? fft::fft(x[0], n[0], axis, norm) : fft::fft(x[0], axis, norm);
        if (kind == "ifft") return has_n ? fft::ifft(x[0], n[0], axis, norm) : fft::ifft(x[0], axis, norm);
        if (kind == "rfft") return has_n ? fft::rfft(x[0], n[0], axis, norm) : fft::rfft(x[0], axis, norm);
        return has_n ? fft::irfft(x[0], n[0], axis, norm) : fft::irfft(x[0], axis, norm);
      }
      // Two or n axes: with lengths (without axes: as many last axes as lengths), with axes (fft2's
      // default: the last two), or over all.
      std::vector<int> ax = has_axes ? axes : std::vector<int>{-2, -1};
      if (has_n && !has_axes) {
        ax.clear();
        for (int k = -static_cast<int>(n.size()); k < 0; ++k) ax.push_back(k);
      }
      if (kind == "fftn") {
        return has_n ? fft::fftn(x[0], n, ax, norm) : has_axes ? fft::fftn(x[0], ax, norm) : fft::fftn(x[0], norm);
      }
      if (kind == "ifftn") {
        return has_n ? fft::ifftn(x[0], n, ax, norm) : has_axes ? fft::ifftn(x[0], ax, norm) : fft::ifftn(x[0], norm);
      }
      if (kind == "rfftn") {
        return has_n ? fft::rfftn(x[0], n, ax, norm) : has_axes ? fft::rfftn(x[0], ax, norm) : fft::rfftn(x[0], norm);
      }
      if (kind == "irfftn") {
        return has_n ? fft::irfftn(x[0], n, ax, norm) : has_axes ? fft::irfftn(x[0], ax, norm) : fft::irfftn(x[0], norm);
      }
      if (kind == "fft2") return has_n ? fft::fft2(x[0], n, ax, norm) : fft::fft2(x[0], ax, norm);
      if (kind == "ifft2") return has_n ? fft::ifft2(x[0], n, ax, norm) : fft::ifft2(x[0], ax, norm);
      if (kind == "rfft2") return has_n ? fft::rfft2(x[0], n, ax, norm) : fft::rfft2(x[0], ax, norm);
      if (kind == "irfft2") return has_n ? fft::irfft2(x[0], n, ax, norm) : fft::irfft2(x[0], ax, norm);
      throw std::runtime_error("loom_diff: unknown fft kind " + kind);
    });
    t["view"] = one([](const Args& x, const json& p) { return view(x[0], dtype_from(p["dtype"])); });
    t["full"] = one([](const Args& x, const json& p) { return full(shape_from(p["shape"]), x[0]); });
    t["arange"] = one([](const Args&, const json& p) {
      return arange(p["start"].get<double>(), p["stop"].get<double>(), p["step"].get<double>(),
                    dtype_from(p["dtype"]));
    });
    // Reductions: "axes" null reduces everything.
#define REDUCE(N)                                                                           \
  t[#N] = one([](const Args& x, const json& p) {                                           \
    const bool k = p.value("keepdims", false);                                             \
    return p["axes"].is_null() ? N(x[0], k) : N(x[0], ints(p["axes"]), k);                  \
  });
    REDUCE(sum) REDUCE(mean) REDUCE(prod) REDUCE(max) REDUCE(min) REDUCE(all) REDUCE(any) REDUCE(logsumexp)
    REDUCE(median) REDUCE(count_nonzero)
#undef REDUCE
    t["var"] = one([](const Args& x, const json& p) {
      const bool k = p.value("keepdims", false);
      const int ddof = p.value("ddof", 0);
      return p["axes"].is_null() ? var(x[0], k, ddof) : var(x[0], ints(p["axes"]), k, ddof);
    });
    t["std"] = one([](const Args& x, const json& p) {
      const bool k = p.value("keepdims", false);
      const int ddof = p.value("ddof", 0);
      return p["axes"].is_null() ? loom::std(x[0], k, ddof) : loom::std(x[0], ints(p["axes"]), k, ddof);
    });
    t["argmax"] = one([](const Args& x, const json& p) {
      auto ax = opt_int(p, "axis");
      return ax ? argmax(x[0], *ax, p.value("keepdims", false)) : argmax(x[0], p.value("keepdims", false));
    });
    t["argmin"] = one([](const Args& x, const json& p) {
      auto ax = opt_int(p, "axis");
      return ax ? argmin(x[0], *ax, p.value("keepdims", false)) : argmin(x[0], p.value("keepdims", false));
    });
    t["softmax"] = one([](const Args& x, const json& p) { return softmax(x[0], ints(p["axes"])); });
    t["log_softmax"] = one([](const Args& x, const json& p) { return log_softmax(x[0], ints(p["axes"])); });
    t["cumsum"] = one([](const Args& x, const json& p) {
      return cumsum(x[0], p["axis"].get<int>(), p.value("reverse", false), p.value("inclusive", true));
    });
#define SCAN(N)                                                                                   \
  t[#N] = one([](const Args& x, const json& p) {                                                  \
    return N(x[0], p["axis"].get<int>(), p.value("reverse", false), p.value("inclusive", true)); \
  });
    SCAN(cumprod) SCAN(cummax) SCAN(cummin) SCAN(logcumsumexp)
#undef SCAN
    t["searchsorted"] = one([](const Args& x, const json& p) {
      return searchsorted(x[0], x[1], p["side"].get<std::string>());
    });
    // Shapes.
    t["reshape"] = one([](const Args& x, const json& p) { return reshape(x[0], shape_from(p["shape"])); });
    t["flatten"] = one([](const Args& x, const json& p) {
      return flatten(x[0], p.value("start", 0), p.value("end", -1));
    });
    t["transpose"] = one([](const Args& x, const json& p) { return transpose(x[0], ints(p["axes"])); });
    t["swapaxes"] = one([](const Args& x, const json& p) { return swapaxes(x[0], p["a"], p["b"]); });
    t["moveaxis"] = one([](const Args& x, const json& p) { return moveaxis(x[0], p["src"], p["dst"]); });
    t["squeeze"] = one([](const Args& x, const json& p) {
      return p["axes"].is_null() ? squeeze(x[0]) : squeeze(x[0], ints(p["axes"]));
    });
    t["expand_dims"] = one([](const Args& x, const json& p) { return expand_dims(x[0], ints(p["axes"])); });
    t["broadcast_to"] = one([](const Args& x, const json& p) { return broadcast_to(x[0], shape_from(p["shape"])); });
    t["slice"] = one([](const Args& x, const json& p) {
      return slice(x[0], shape_from(p["start"]), shape_from(p["stop"]), shape_from(p["strides"]));
    });
    t["slice_update"] = one([](const Args& x, const json& p) {
      return slice_update(x[0], x[1], shape_from(p["start"]), shape_from(p["stop"]), shape_from(p["strides"]));
    });
    t["concatenate"] = one([](const Args& x, const json& p) { return concatenate(x, p["axis"].get<int>()); });
    t["stack"] = one([](const Args& x, const json& p) { return stack(x, p["axis"].get<int>()); });
    t["split"] = [](const Args& x, const json& p) {
      return p["indices"].is_number() ? split(x[0], p["indices"].get<int>(), p["axis"].get<int>())
                                      : split(x[0], ints(p["indices"]), p["axis"].get<int>());
    };
    t["pad"] = one([](const Args& x, const json& p) {
      std::vector<std::pair<int, int>> w;
      for (const auto& lh : p["width"]) w.emplace_back(lh[0].get<int>(), lh[1].get<int>());
      return pad(x[0], w, x[1]);
    });
    t["tile"] = one([](const Args& x, const json& p) { return tile(x[0], ints(p["reps"])); });
    t["repeat"] = one([](const Args& x, const json& p) {
      auto ax = opt_int(p, "axis");
      return ax ? repeat(x[0], p["repeats"].get<int>(), *ax) : repeat(x[0], p["repeats"].get<int>());
    });
    t["addmm"] = one([](const Args& x, const json& p) {
      return addmm(x[0], x[1], x[2], p.value("alpha", 1.0f), p.value("beta", 1.0f));
    });
    // Indexing and sorting.
    t["take"] = one([](const Args& x, const json& p) {
      auto ax = opt_int(p, "axis");
      return ax ? take(x[0], x[1], *ax) : take(x[0], x[1]);
    });
    t["take_along_axis"] = one([](const Args& x, const json& p) { return take_along_axis(x[0], x[1], p["axis"]); });
    t["put_along_axis"] = one([](const Args& x, const json& p) {
      return put_along_axis(x[0], x[1], x[2], p["axis"].get<int>());
    });
    t["scatter_add_axis"] = one([](const Args& x, const json& p) {
      return scatter_add_axis(x[0], x[1], x[2], p["axis"].get<int>());
    });
    t["scatter_add_take"] = one([](const Args& x, const json& p) { return scatter_add_take(x[0], x[1], x[2], p["axis"]); });
    t["gather"] = one([](const Args& x, const json& p) {
      return gather(x[0], Args(x.begin() + 1, x.end()), ints(p["axes"]), shape_from(p["slice_sizes"]));
    });
    t["scatter"] = one([](const Args& x, const json& p) {
      return scatter(x[0], Args(x.begin() + 1, x.end() - 1), x.back(), ints(p["axes"]));
    });
    t["scatter_add"] = one([](const Args& x, const json& p) {
      return scatter_add(x[0], Args(x.begin() + 1, x.end() - 1), x.back(), ints(p["axes"]));
    });
    t["scatter_prod"] = one([](const Args& x, const json& p) {
      return scatter_prod(x[0], Args(x.begin() + 1, x.end() - 1), x.back(), ints(p["axes"]));
    });
    t["scatter_max"] = one([](const Args& x, const json& p) {
      return scatter_max(x[0], Args(x.begin() + 1, x.end() - 1), x.back(), ints(p["axes"]));
    });
    t["scatter_min"] = one([](const Args& x, const json& p) {
      return scatter_min(x[0], Args(x.begin() + 1, x.end() - 1), x.back(), ints(p["axes"]));
    });
    t["masked_scatter"] = one([](const Args& x, const json&) { return masked_scatter(x[0], x[1], x[2]); });
    t["as_strided"] = one([](const Args& x, const json& p) {
      Strides st;
      for (const auto& v : p["strides"]) st.push_back(v.get<int64_t>());
      return as_strided(x[0], shape_from(p["shape"]), st, p["offset"].get<size_t>());
    });
    t["slice_update_add"] = one([](const Args& x, const json& p) {
      return slice_update_add(x[0], x[1], shape_from(p["start"]), shape_from(p["stop"]), shape_from(p["strides"]));
    });
    t["slice_update_prod"] = one([](const Args& x, const json& p) {
      return slice_update_prod(x[0], x[1], shape_from(p["start"]), shape_from(p["stop"]), shape_from(p["strides"]));
    });
    t["slice_update_max"] = one([](const Args& x, const json& p) {
      return slice_update_max(x[0], x[1], shape_from(p["start"]), shape_from(p["stop"]), shape_from(p["strides"]));
    });
    t["slice_update_min"] = one([](const Args& x, const json& p) {
      return slice_update_min(x[0], x[1], shape_from(p["start"]), shape_from(p["stop"]), shape_from(p["strides"]));
    });
    t["sort"] = one([](const Args& x, const json& p) { return sort(x[0], p["axis"].get<int>()); });
    t["argsort"] = one([](const Args& x, const json& p) { return argsort(x[0], p["axis"].get<int>()); });
    t["topk"] = one([](const Args& x, const json& p) { return topk(x[0], p["k"].get<int>(), p["axis"].get<int>()); });
    t["partition"] = one([](const Args& x, const json& p) { return partition(x[0], p["kth"].get<int>(), p["axis"].get<int>()); });
    t["argpartition"] = one([](const Args& x, const json& p) { return argpartition(x[0], p["kth"].get<int>(), p["axis"].get<int>()); });
    // Convolution and pooling (channels-last).
    t["conv_general"] = one([](const Args& x, const json& p) {
      return conv_general(x[0], x[1], ints(p["stride"]), ints(p["padding_lo"]), ints(p["padding_hi"]),
                          ints(p["kernel_dilation"]), ints(p["input_dilation"]), p.value("groups", 1),
                          p.value("flip", false));
    });
    // conv3d and the transposed convolutions (compositions of conv_general; the weight as MLX's).
    t["conv3d"] = one([](const Args& x, const json& p) {
      return conv3d(x[0], x[1], int3(p["stride"]), int3(p["padding"]), int3(p["dilation"]), p["groups"]);
    });
    t["conv_transpose1d"] = one([](const Args& x, const json& p) {
      return conv_transpose1d(x[0], x[1], p["stride"][0], p["padding"][0], p["dilation"][0], p["output_padding"][0],
                              p["groups"]);
    });
    t["conv_transpose2d"] = one([](const Args& x, const json& p) {
      return conv_transpose2d(x[0], x[1], int2(p["stride"]), int2(p["padding"]), int2(p["dilation"]),
                              int2(p["output_padding"]), p["groups"]);
    });
    t["conv_transpose3d"] = one([](const Args& x, const json& p) {
      return conv_transpose3d(x[0], x[1], int3(p["stride"]), int3(p["padding"]), int3(p["dilation"]),
                              int3(p["output_padding"]), p["groups"]);
    });
    t["max_pool"] = one([](const Args& x, const json& p) {
      return max_pool(x[0], ints(p["kernel"]), ints(p["stride"]), ints(p["padding"]));
    });
    t["avg_pool"] = one([](const Args& x, const json& p) {
      return avg_pool(x[0], ints(p["kernel"]), ints(p["stride"]), ints(p["padding"]));
    });
    // Fused ops and losses.
    t["fast_softmax"] = one([](const Args& x, const json&) { return fast::softmax(x[0]); });
    t["fast_log_softmax"] = one([](const Args& x, const json&) { return fast::log_softmax(x[0]); });
    t["gelu"] = one([](const Args& x, const json&) { return fast::gelu(x[0]); });
    t["layer_norm"] = one([](const Args& x, const json& p) {
      return fast::layer_norm(x[0], x.size() > 1 ? std::optional<array>(x[1]) : std::nullopt,
                              x.size() > 2 ? std::optional<array>(x[2]) : std::nullopt, p.value("eps", 1e-5));
    });
    t["rms_norm"] = one([](const Args& x, const json& p) {
      return fast::rms_norm(x[0], x.size() > 1 ? std::optional<array>(x[1]) : std::nullopt, p.value("eps", 1e-5));
    });
    t["sdpa"] = one([](const Args& x, const json& p) {
      return fast::scaled_dot_product_attention(x[0], x[1], x[2], p["scale"].get<double>(),
                                                x.size() > 3 ? std::optional<array>(x[3]) : std::nullopt);
    });
    t["cross_entropy"] = one([](const Args& x, const json& p) {
      return nn::losses::cross_entropy(x[0], x[1], std::nullopt, p.value("axis", -1),
                                       p.value("label_smoothing", 0.0), p.value("reduction", "none"));
    });
    // Quantization (ops/quantized.h): w is quantized inside the case, so the reference can rebuild
    // the dequantized matrix with its own (numpy) copy of MLX's affine quantization.
    t["quantized_matmul"] = one([](const Args& x, const json& p) {
      const int gs = p["group_size"].get<int>(), bits = p["bits"].get<int>();
      auto q = quantize(x[1], gs, bits);
      return quantized_matmul(x[0], q[0], q[1], q[2], p.value("transpose", true), gs, bits);
    });
    // gather_qmm: x's matrices lhs_indices[i] times w's (quantized here, as above) rhs_indices[i];
    // "lhs" / "rhs" say which of the inputs after w are the index arrays.
    t["gather_qmm"] = one([](const Args& x, const json& p) {
      const int gs = p["group_size"].get<int>(), bits = p["bits"].get<int>();
      auto q = quantize(x[1], gs, bits);
      size_t next = 2;
      std::optional<array> lhs, rhs;
      if (p.value("lhs", false)) lhs = x.at(next++);
      if (p.value("rhs", false)) rhs = x.at(next++);
      return gather_qmm(x[0], q[0], q[1], q[2], lhs, rhs, p.value("transpose", true), gs, bits, "affine",
                        p.value("sorted", false));
    });
    t["dequantize"] = one([](const Args& x, const json& p) {
      const int gs = p["group_size"].get<int>(), bits = p["bits"].get<int>();
      auto q = quantize(x[0], gs, bits);
      return dequantize(q[0], q[1], q[2], gs, bits);
    });
    t["to_fp8"] = one([](const Args& x, const json&) { return to_fp8(x[0]); });
    t["from_fp8"] = one([](const Args& x, const json& p) { return from_fp8(x[0], dtype_from(p["dtype"])); });
    return t;
  }();
  return table;
}

std::vector<array> run_op(const std::string& name, const Args& x, const json& p) {
  if (name == "chain") {
    // A program over registers (the inputs, then each step's result): [op, register...] per step.
    Args regs = x;
    for (const auto& step : p["steps"]) {
      Args args;
      for (size_t i = 1; i < step.size(); ++i) args.push_back(regs.at(step[i].get<size_t>()));
      regs.push_back(run_op(step[0].get<std::string>(), args, json::object())[0]);
    }
    return {regs.back()};
  }
  auto it = ops().find(name);
  if (it == ops().end()) throw std::runtime_error("loom_diff: unknown op " + name);
  return it->second(x, p);
}

// ---- vmap against a loop (Loom against Loom) ----

// x's entry k of a batch: floating inputs scaled (entry 2 negated) so that entries differ; integer
// and bool inputs (indices, masks) stay the same, so that they stay valid.
array vm_entry(const array& x, int k) {
  if (k == 0 || !is_inexact(x.dtype())) return x;
  const double scale = k == 1 ? 0.75 : -0.5, shift = k == 1 ? 0.125 : 0.0;
  return astype(add(multiply(x, array(scale, x.dtype())), array(shift, x.dtype())), x.dtype());
}

// Empty when `got` (from vmap) equals `want` (the loop); else what differs.
std::string vm_compare(const array& got, const array& want, const std::string& what) {
  std::ostringstream os;
  if (got.shape() != want.shape() || got.dtype() != want.dtype()) {
    os << what << ": vmap gives shape " << detail::shape_str(got.shape()) << " " << got.dtype() << ", the loop "
       << detail::shape_str(want.shape()) << " " << want.dtype();
    return os.str();
  }
  bool same;
  if (is_inexact(got.dtype())) {
    const double half = got.dtype() == float16 || got.dtype() == bfloat16 ? 1e-2 : 1e-4;
    // Batched kernels may sum in another order: a tolerance relative to the largest value. Complex
    // values part by part (so that equal infinities in a part compare equal).
    // Near the dtype's largest value, whether a sum overflows (and then meets the opposite
    // infinity, giving NaN) depends on its order, which a batched kernel may change (a GEMM blocks
    // otherwise): a non-finite value facing a non-finite one, or one within 10^4 of overflowing, is
    // no disagreement.
    const double huge = finfo(is_complex(got.dtype()) ? float32 : got.dtype()).max * 1e-4;
    auto close = [&](array g, array w) {
      auto edge = [&](const array& p, const array& q) {
        return logical_and(logical_not(isfinite(p)), logical_or(logical_not(isfinite(q)), greater(abs(q), array(huge))));
      };
      const array order = logical_or(edge(g, w), edge(w, g));
      g = where(order, zeros_like(g), g);
      w = where(order, zeros_like(w), w);
      const double big = w.size() ? max(abs(where(isfinite(w), w, zeros_like(w)))).item<double>() : 0.0;
      return allclose(g, w, half, half * 1e-1 * (big + 1.0), true).item<bool>();
    };
    if (got.dtype() == complex64) {
      // Which of several NaN-holding values a complex max or min keeps depends on the order it meets
      // them in (another layout, another order): a NaN in either part must match, the parts need not.
      const array nan_g = logical_or(isnan(real(got)), isnan(imag(got)));
      const array nan_w = logical_or(isnan(real(want)), isnan(imag(want)));
      const array z = zeros_like(real(got));
      auto part = [&](const array& p, const array& nan) { return astype(where(nan, z, p), float64); };
      same = array_equal(nan_g, nan_w).item<bool>() && close(part(real(got), nan_g), part(real(want), nan_w)) &&
             close(part(imag(got), nan_g), part(imag(want), nan_w));
    } else {
      same = close(astype(got, float64), astype(want, float64));
    }
  } else {
    same = array_equal(got, want).item<bool>();
  }
  if (!same) os << what << ": vmap and the loop differ\nvmap " << got << "\nloop " << want;
  return os.str();
}

// vmap of the case's function (and of its vjp and jvp, when the case has cotangents or tangents)
// over a batch of three entries, with each input batched along an axis picked from the case id (or
// not batched), against calling it on each entry. Empty when they agree or the check does not apply (an entry throws, or
// the op must read values: it evaluates an input, which vmap cannot allow).
std::string vmap_check(const json& c, const std::vector<array>& bases, const VectorFn& fn) {
  if (bases.empty()) return "";
  uint64_t h = std::hash<std::string>{}(c.at("id").dump());
  std::vector<int> axes;
  bool any = false;
  for (const array& b : bases) {
    h = h * 6364136223846793005ULL + 1442695040888963407ULL;
    const int pick = static_cast<int>((h >> 33) % (b.ndim() + 2)) - 1;  // -1 .. ndim
    axes.push_back(pick);
    any |= pick >= 0;
  }
  if (!any) axes[0] = 0;
  std::vector<int> cot_axes;
  std::vector<array> cots;
  if (c.contains("vjp")) {
    for (const auto& t : c["vjp"]) cots.push_back(make_array(t));
  }
  struct Fn {
    VectorFn f;
    std::vector<array> ins;
    const char* what;
  };
  std::vector<Fn> fns{{fn, bases, "value"}};
  if (!cots.empty()) {
    const size_t n = bases.size();
    VectorFn g = [fn, n](const std::vector<array>& v) {
      return vjp(fn, std::vector<array>(v.begin(), v.begin() + n), std::vector<array>(v.begin() + n, v.end())).second;
    };
    std::vector<array> ins = bases;
    ins.insert(ins.end(), cots.begin(), cots.end());
    fns.push_back({g, ins, "vjp"});
  }
  if (c.contains("jvp")) {
    const size_t n = bases.size();
    std::vector<array> ins = bases;
    for (size_t i = 0; i < n; ++i) ins.push_back(c["jvp"][i].is_null() ? zeros_like(bases[i]) : make_array(c["jvp"][i]));
    VectorFn g = [fn, n](const std::vector<array>& v) {
      return jvp(fn, std::vector<array>(v.begin(), v.begin() + n), std::vector<array>(v.begin() + n, v.end())).second;
    };
    fns.push_back({g, ins, "jvp"});
  }
  for (const Fn& f : fns) {
    std::vector<int> ax = axes;
    ax.resize(f.ins.size(), -1);  // cotangents and tangents: the same for every entry
    std::vector<std::vector<array>> per_entry;
    std::vector<array> batched;
    try {
      for (int k = 0; k < 3; ++k) {
        std::vector<array> e;
        for (size_t i = 0; i < f.ins.size(); ++i) e.push_back(ax[i] >= 0 ? vm_entry(f.ins[i], k) : f.ins[i]);
        per_entry.push_back(f.f(e));
        eval(per_entry.back());
      }
      for (size_t i = 0; i < f.ins.size(); ++i) {
        batched.push_back(ax[i] < 0 ? f.ins[i]
                                    : stack({vm_entry(f.ins[i], 0), vm_entry(f.ins[i], 1), vm_entry(f.ins[i], 2)}, ax[i]));
      }
    } catch (const std::exception&) {
      return "";  // the op rejects an entry: nothing to compare
    }
    std::vector<array> got;
    try {
      got = vmap(f.f, ax)(batched);
      eval(got);
    } catch (const std::exception& e) {
      const std::string m = e.what();
      if (m.find("[vmap] the function evaluated") != std::string::npos) return "";
      std::ostringstream os;
      os << f.what << " with in_axes [";
      for (size_t i = 0; i < ax.size(); ++i) os << (i ? ", " : "") << ax[i];
      os << "] throws: " << m;
      return os.str();
    }
    if (got.size() != per_entry[0].size()) return std::string(f.what) + ": vmap gives another number of outputs";
    for (size_t j = 0; j < got.size(); ++j) {
      std::string d = vm_compare(got[j], stack({per_entry[0][j], per_entry[1][j], per_entry[2][j]}, 0),
                                 std::string(f.what) + " output " + std::to_string(j));
      if (!d.empty()) {
        std::ostringstream os;
        os << d << "\nin_axes [";
        for (size_t i = 0; i < ax.size(); ++i) os << (i ? ", " : "") << ax[i];
        os << "]";
        return os.str();
      }
    }
  }
  return "";
}

// ---- compile against the function itself (Loom against Loom) ----

// The case's function (and its vjp and jvp) compiled, called on the inputs and then on perturbed
// copies (the second call runs the kept program), against the function itself; and the function
// exported to a file and imported back (every primitive's saved parameters): the same kernels run,
// so the values must be equal bit for bit (NaN to NaN). Empty when they agree or the check does
// not apply (the op rejects the input, or must read values: it evaluates an input while traced).
std::string compile_check(const json& c, const std::vector<array>& bases, const VectorFn& fn) {
  std::vector<std::pair<VectorFn, std::vector<array>>> fns{{fn, bases}};
  const size_t n = bases.size();
  if (c.contains("vjp")) {
    std::vector<array> ins = bases;
    for (const auto& t : c["vjp"]) ins.push_back(make_array(t));
    fns.push_back({[fn, n](const std::vector<array>& v) {
                     return vjp(fn, std::vector<array>(v.begin(), v.begin() + n), std::vector<array>(v.begin() + n, v.end()))
                         .second;
                   },
                   ins});
  }
  if (c.contains("jvp")) {
    std::vector<array> ins = bases;
    for (size_t i = 0; i < n; ++i) ins.push_back(c["jvp"][i].is_null() ? zeros_like(bases[i]) : make_array(c["jvp"][i]));
    fns.push_back({[fn, n](const std::vector<array>& v) {
                     return jvp(fn, std::vector<array>(v.begin(), v.begin() + n), std::vector<array>(v.begin() + n, v.end()))
                         .second;
                   },
                   ins});
  }
  // The value, its vjp and jvp, compiled; and the value exported to a file and imported back.
  const char* what[] = {"value", "vjp", "jvp"};
  {
    static const std::string file = "/tmp/loom_diff_" + std::to_string(::getpid()) + ".loomfn";
    std::vector<array> want;
    try {
      want = fn(bases);
      eval(want);
    } catch (const std::exception&) {
      return "";
    }
    std::vector<array> got;
    try {
      export_function(file, [&fn](const Args& a) { return fn(a); }, bases);
      got = import_function(file)(bases);
      eval(got);
    } catch (const std::exception& e) {
      const std::string m = e.what();
      if (m.find("[compile] the function evaluated") != std::string::npos) return "";
      return "value exported and imported throws: " + m;
    }
    std::remove(file.c_str());
    for (size_t j = 0; j < got.size() && j < want.size(); ++j) {
      if (got.size() != want.size() || got[j].shape() != want[j].shape() || got[j].dtype() != want[j].dtype() ||
          !array_equal(got[j], want[j], true).item<bool>()) {
        std::ostringstream os;
        os << "value output " << j << " exported and imported differs\nimported " << got[j] << "\nfunction " << want[j];
        return os.str();
      }
    }
  }
  for (size_t f = 0; f < fns.size(); ++f) {
    const char* w = what[f == 0 ? 0 : (f == 1 && c.contains("vjp") ? 1 : 2)];
    VectorFn compiled = compile(fns[f].first);
    for (int k = 0; k < 2; ++k) {
      std::vector<array> ins;
      for (const auto& x : fns[f].second) ins.push_back(vm_entry(x, k));
      std::vector<array> want;
      try {
        want = fns[f].first(ins);
        eval(want);
      } catch (const std::exception&) {
        return "";
      }
      std::vector<array> got;
      try {
        got = compiled(ins);
        eval(got);
      } catch (const std::exception& e) {
        const std::string m = e.what();
        if (m.find("[compile] the function evaluated") != std::string::npos) return "";
        return std::string(w) + " compiled (call " + std::to_string(k + 1) + ") throws: " + m;
      }
      if (got.size() != want.size()) return std::string(w) + ": compiled gives another number of outputs";
      for (size_t j = 0; j < got.size(); ++j) {
        const bool same = got[j].shape() == want[j].shape() && got[j].dtype() == want[j].dtype() &&
                          array_equal(got[j], want[j], true).item<bool>();
        if (!same) {
          std::ostringstream os;
          os << w << " output " << j << " (call " << k + 1 << "): compiled and uncompiled differ\ncompiled " << got[j]
             << "\nuncompiled " << want[j];
          return os.str();
        }
      }
    }
  }
  return "";
}

json run_case(const json& c, bool check_vmap, bool check_compile) {
  const std::string op = c.at("op");
  const json params = c.value("params", json::object());
  std::vector<array> bases;
  std::vector<json> views;
  for (const auto& in : c.value("inputs", json::array())) {
    bases.push_back(make_array(in));
    views.push_back(in.value("view", json::array()));
  }
  auto fn = [&](const std::vector<array>& b) {
    Args x;
    for (size_t i = 0; i < b.size(); ++i) x.push_back(apply_view(b[i], views[i]));
    return run_op(op, x, params);
  };
  json r;
  std::vector<array> outs, grads, tangents_out;
  if (c.contains("vjp")) {
    std::vector<array> cot;
    for (const auto& t : c["vjp"]) cot.push_back(make_array(t));
    std::tie(outs, grads) = vjp(fn, bases, cot);
  } else {
    outs = fn(bases);
  }
  if (c.contains("jvp")) {
    std::vector<array> tan;
    for (size_t i = 0; i < bases.size(); ++i)
      tan.push_back(c["jvp"][i].is_null() ? zeros_like(bases[i]) : make_array(c["jvp"][i]));
    tangents_out = jvp(fn, bases, tan).second;
  }
  std::vector<array> all = outs;
  all.insert(all.end(), grads.begin(), grads.end());
  all.insert(all.end(), tangents_out.begin(), tangents_out.end());
  eval(all);
  r["outputs"] = json::array();
  for (auto& o : outs) r["outputs"].push_back(encode(o));
  if (c.contains("vjp")) {
    r["vjp"] = json::array();
    for (auto& g : grads) r["vjp"].push_back(encode(g));
  }
  if (c.contains("jvp")) {
    r["jvp"] = json::array();
    for (auto& t : tangents_out) r["jvp"].push_back(encode(t));
  }
  if (check_vmap) {
    const std::string v = vmap_check(c, bases, fn);
    if (!v.empty()) r["vmap"] = v;
  }
  if (check_compile) {
    const std::string v = compile_check(c, bases, fn);
    if (!v.empty()) r["compile"] = v;
  }
  return r;
}

json run_guarded(const json& c, bool check_vmap, bool check_compile) {
  try {
    return run_case(c, check_vmap, check_compile);
  } catch (const std::exception& e) {
    return json{{"error", e.what()}};
  }
}

// The primitives of every node made, as tests/registry.h names them ("Reduce(sum)" for variants).
std::set<std::string>& seen() {
  static std::set<std::string> s;
  return s;
}
void record(const Primitive& p) {
  std::ostringstream os;
  p.print(os);
  std::string printed = os.str(), name = p.name();
  const size_t open = printed.find('(');
  if (open != std::string::npos && printed.compare(0, open, name) == 0) {
    const size_t close = printed.find_first_of(",)", open);
    // A variant is a word ("Reduce(sum)"), not a parameter's value ("Compiled(nodes=3)").
    if (close != std::string::npos && printed.find('=', open) > close) name = printed.substr(0, close) + ")";
  }
  seen().insert(name);
}

}  // namespace

int main(int argc, char** argv) {
  std::string fusion = "both";
  bool primitives = false, vmap_checks = true, compile_checks = true;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--fusion" && i + 1 < argc) fusion = argv[++i];
    else if (a == "--threads" && i + 1 < argc) set_num_threads(std::stoi(argv[++i]));
    else if (a == "--primitives") primitives = true;
    else if (a == "--no-vmap") vmap_checks = false;
    else if (a == "--no-compile") compile_checks = false;
    else {
      std::cerr << "usage: loom_diff [--fusion on|off|both] [--threads N] [--primitives] [--no-vmap] [--no-compile] < cases.jsonl\n";
      return 2;
    }
  }
  if (primitives) detail::set_primitive_hook(&record);
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    json c = json::parse(line);
    detail::set_fusion(fusion != "off");
    json r = run_guarded(c, vmap_checks, compile_checks);
    if (fusion == "both") {
      detail::set_fusion(false);
      json r2 = run_guarded(c, false, false);
      if (r2 != r) r["nofuse"] = std::move(r2);
    }
    r["id"] = c.at("id");
    std::cout << r.dump() << '\n' << std::flush;
  }
  if (primitives) std::cout << json{{"primitives", seen()}}.dump() << '\n' << std::flush;
  return 0;
}
