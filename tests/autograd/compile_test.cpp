// compile: a compiled function computes what the function computes (bit for bit: the same kernels
// run), each call is one Compiled node over the call's inputs, traces are kept per signature, random
// draws and constants follow the documented rules, simplification merges what it may and nothing
// else, and the program's buffers are planned as eval's (donated, freed after their last reader).
#include <atomic>
#include <cmath>

#include "../test_utils.h"

using namespace loom;
using loom::testing::lcg_uniform;

namespace {

array cp_f32(const Shape& shape, unsigned seed, double lo = -1.0, double hi = 1.0) {
  return astype(lcg_uniform(shape, lo, hi, seed), float32);
}

bool cp_equal(const array& a, const array& b) { return array_equal(a, b).item<bool>(); }

// A restorer for the global compile mode, so a failing test leaves the others their default.
struct CpMode {
  explicit CpMode(CompileMode m) { set_compile_mode(m); }
  ~CpMode() { set_compile_mode(CompileMode::enabled); }
};

// A small MLP loss with its gradients: matmuls, broadcasts, fused elementwise chains, reductions.
std::vector<array> cp_mlp_grads(const std::vector<array>& in) {
  auto loss = [](const std::vector<array>& p) {
    const array& x = p[0];
    array h = maximum(add(matmul(x, p[1]), p[2]), array(0.0f));
    array y = add(matmul(h, p[3]), p[4]);
    return std::vector<array>{mean(square(subtract(y, p[5])))};
  };
  auto [values, grads] = value_and_grad(loss, std::vector<int>{1, 2, 3, 4})(in);
  std::vector<array> out = {values[0]};
  out.insert(out.end(), grads.begin(), grads.end());
  return out;
}

std::vector<array> cp_mlp_inputs(int batch, unsigned seed) {
  return {cp_f32({batch, 16}, seed), cp_f32({16, 32}, seed + 1, -0.3, 0.3), cp_f32({32}, seed + 2, -0.1, 0.1),
          cp_f32({32, 8}, seed + 3, -0.3, 0.3), cp_f32({8}, seed + 4, -0.1, 0.1), cp_f32({batch, 8}, seed + 5)};
}

}  // namespace

TEST(Compile, SameValuesAndOneNodePerCall) {
  int traces = 0;
  auto fun = [&traces](const std::vector<array>& in) {
    ++traces;
    return std::vector<array>{add(multiply(exp(in[0]), in[1]), sin(in[1]))};
  };
  VectorFn cf = compile(fun);
  const array x = cp_f32({4, 3}, 1), y = cp_f32({4, 3}, 2);
  const array expected = fun({x, y})[0];
  traces = 0;
  for (int call = 0; call < 3; ++call) {
    array out = cf({x, y})[0];
    ASSERT_TRUE(out.has_primitive());
    EXPECT_STREQ(out.primitive().name(), "Compiled");
    ASSERT_EQ(out.inputs().size(), 2u);
    EXPECT_EQ(out.inputs()[0].id(), x.id());
    EXPECT_EQ(out.inputs()[1].id(), y.id());
    EXPECT_TRUE(cp_equal(out, expected));
  }
  EXPECT_EQ(traces, 1);
  // Another shape or dtype is another signature: traced once more each.
  EXPECT_TRUE(cp_equal(cf({cp_f32({2}, 3), cp_f32({2}, 4)})[0], fun({cp_f32({2}, 3), cp_f32({2}, 4)})[0]));
  EXPECT_EQ(traces, 3);  // (and once more for the expected value)
  const array xd = astype(x, float64), yd = astype(y, float64);
  EXPECT_TRUE(cp_equal(cf({xd, yd})[0], fun({xd, yd})[0]));
  cf({x, y});
  EXPECT_EQ(traces, 5);
}

TEST(Compile, MlpGradientsMatchBitForBitAcrossCalls) {
  VectorFn cf = compile(cp_mlp_grads);
  for (unsigned seed : {10u, 20u, 30u}) {
    const std::vector<array> in = cp_mlp_inputs(64, seed);
    const std::vector<array> expected = cp_mlp_grads(in);
    const std::vector<array> got = cf(in);
    ASSERT_EQ(got.size(), expected.size());
    eval(got);
    for (size_t k = 0; k < got.size(); ++k) {
      EXPECT_EQ(got[k].shape(), expected[k].shape());
      EXPECT_TRUE(cp_equal(got[k], expected[k])) << "output " << k << " seed " << seed;
    }
  }
}

TEST(Compile, BufferPlanIsHonouredAndIntermediatesAreFreed) {
  detail::set_check_buffer_plan(true);
  // A chain of elementwise ops too small to fuse, and matmuls: each result may take its input's
  // buffer, and nothing of the chain outlives its reader.
  auto fun = [](const std::vector<array>& in) {
    array x = in[0];
    for (int i = 0; i < 8; ++i) x = matmul(tanh(add(x, array(0.5f))), in[1]);
    return std::vector<array>{x};
  };
  VectorFn cf = compile(fun);
  const array x = cp_f32({256, 256}, 5), w = cp_f32({256, 256}, 6, -0.05, 0.05);
  eval(x, w);
  const array expected = fun({x, w})[0];
  eval(expected);
  array warm = cf({x, w})[0];
  eval(warm);
  const size_t bytes = 256 * 256 * 4;
  reset_peak_memory();
  const size_t before = get_active_memory();
  array out = cf({x, w})[0];
  eval(out);
  EXPECT_TRUE(cp_equal(out, expected));
  // The output, and at most a few buffers in flight: not the chain's sixteen intermediates.
  EXPECT_LE(get_peak_memory() - before, 4 * bytes);
  EXPECT_LE(get_active_memory() - before, bytes);
  detail::set_check_buffer_plan(false);
}

TEST(Compile, SeveralCallsInOneGraphAndNestedCompiledFunctions) {
  auto inner = [](const std::vector<array>& in) { return std::vector<array>{exp(negative(abs(in[0])))}; };
  VectorFn ci = compile(inner);
  // The same program twice in one graph (one call reads the other's output).
  const array x = cp_f32({300}, 7);
  array twice = ci(ci({x}))[0];
  EXPECT_TRUE(cp_equal(twice, inner(inner({x}))[0]));
  // A compiled function calling a compiled function: the inner one is part of the outer's program.
  VectorFn co = compile([ci](const std::vector<array>& in) {
    array a = add(in[0], in[1]);
    return std::vector<array>{multiply(a, ci({a})[0]), ci({in[1]})[0]};
  });
  const array y = cp_f32({300}, 8);
  const std::vector<array> got = co({x, y});
  EXPECT_EQ(got[0].inputs().size(), 2u);  // one node, over the call's inputs
  EXPECT_TRUE(cp_equal(got[0], multiply(add(x, y), inner({add(x, y)})[0])));
  EXPECT_TRUE(cp_equal(got[1], inner({y})[0]));
}

TEST(Compile, OutputsThatAreInputsConstantsOrInternal) {
  auto fun = [](const std::vector<array>& in) {
    array a = abs(in[0]);
    return std::vector<array>{in[0], a, square(a), array(2.5f), a};
  };
  const array x = array({3.0f, -2.0f});
  const std::vector<array> got = compile(fun)({x});
  ASSERT_EQ(got.size(), 5u);
  EXPECT_TRUE(cp_equal(got[0], x));
  EXPECT_TRUE(cp_equal(got[1], array({3.0f, 2.0f})));
  EXPECT_TRUE(cp_equal(got[2], array({9.0f, 4.0f})));
  EXPECT_EQ(got[3].item<float>(), 2.5f);
  EXPECT_TRUE(cp_equal(got[4], got[1]));
  // The outputs' data outlive the program's next run.
  const std::vector<array> again = compile(fun)({array({1.0f, 1.0f})});
  eval(again);
  EXPECT_TRUE(cp_equal(got[2], array({9.0f, 4.0f})));
  // Multi-output primitives, and their outputs in order.
  auto dm = [](const std::vector<array>& in) { return divmod(in[0], in[1]); };
  const std::vector<array> q = compile(dm)({array({7, -7, 9}), array({2, 2, 4})});
  EXPECT_TRUE(cp_equal(q[0], array({3, -4, 2})));
  EXPECT_TRUE(cp_equal(q[1], array({1, 1, 1})));
}

TEST(Compile, RandomDrawsAreInputsAndMatchTheUncompiledFunction) {
  auto fun = [](const std::vector<array>& in) {
    return std::vector<array>{add(in[0], random::normal({4})), random::uniform({3})};
  };
  VectorFn cf = compile(fun);
  const array x = zeros({4});
  random::seed(42);
  const std::vector<array> first = fun({x}), second = fun({x});
  eval(first, second);
  const array state = random::get_state();
  random::seed(42);
  const std::vector<array> c1 = cf({x}), c2 = cf({x});
  for (size_t k = 0; k < 2; ++k) {
    EXPECT_TRUE(cp_equal(c1[k], first[k])) << k;
    EXPECT_TRUE(cp_equal(c2[k], second[k])) << k;
  }
  EXPECT_FALSE(cp_equal(c1[1], c2[1]));  // each call draws anew
  EXPECT_TRUE(cp_equal(random::get_state(), state));
  // An explicit key is an ordinary input.
  auto keyed = [](const std::vector<array>& in) {
    return std::vector<array>{add(random::bits({8, 8}, 4, in[0]), random::bits({8, 8}, 4, in[0]))};
  };
  EXPECT_TRUE(cp_equal(compile(keyed)({random::key(3)})[0], keyed({random::key(3)})[0]));
}

TEST(Compile, CapturedArraysAreConstantsOfTheTrace) {
  array w = array({1.0f, 2.0f});
  array scale = multiply(w, array(3.0f));  // unevaluated: computed once, when traced
  auto fun = [&w, &scale](const std::vector<array>& in) { return std::vector<array>{add(multiply(in[0], w), scale)}; };
  VectorFn cf = compile(fun);
  EXPECT_TRUE(cp_equal(cf({array({1.0f, 1.0f})})[0], array({4.0f, 8.0f})));
  w = array({10.0f, 20.0f});  // as MLX: the trace keeps the values it saw
  EXPECT_TRUE(cp_equal(cf({array({1.0f, 1.0f})})[0], array({4.0f, 8.0f})));
  EXPECT_TRUE(cp_equal(compile(fun)({array({1.0f, 1.0f})})[0], array({13.0f, 26.0f})));
}

TEST(Compile, SimplifyMergesEqualSubexpressionsAndScalarsOnly) {
  const CpMode no_fuse(CompileMode::no_fuse);  // the simplified graph, node by node
  const array a = array({1.0f, 2.0f});
  array b = compile([](const std::vector<array>& in) { return std::vector<array>{add(exp(in[0]), exp(in[0]))}; })({a})[0];
  EXPECT_EQ(b.inputs()[0].id(), b.inputs()[1].id());
  EXPECT_TRUE(allclose(b, multiply(array(2.0f), exp(a))).item<bool>());
  array c = compile([](const std::vector<array>& in) { return std::vector<array>{add(cos(in[0]), sin(in[0]))}; })({a})[0];
  EXPECT_NE(c.inputs()[0].id(), c.inputs()[1].id());
  // Equal scalar constants become one; different ones stay apart.
  const std::vector<array> s = compile([](const std::vector<array>& in) {
    return std::vector<array>{maximum(in[0], array(0.0f)), minimum(in[0], array(0.0f)), maximum(in[0], array(1.0f))};
  })({a});
  EXPECT_EQ(s[0].inputs()[1].id(), s[1].inputs()[1].id());
  EXPECT_NE(s[0].inputs()[1].id(), s[2].inputs()[1].id());
  // No-ops (copy, stop_gradient) are dropped.
  array e = compile([](const std::vector<array>& in) {
    return std::vector<array>{copy(stop_gradient(exp(stop_gradient(in[0]))))};
  })({a})[0];
  EXPECT_EQ(e.inputs()[0].id(), a.id());
  EXPECT_TRUE(cp_equal(e, exp(a)));
  {
    const CpMode none(CompileMode::no_simplify);
    array d = compile([](const std::vector<array>& in) { return std::vector<array>{add(exp(in[0]), exp(in[0]))}; })({a})[0];
    EXPECT_TRUE(cp_equal(d, b));
  }
}

TEST(Compile, TransformsOfCompiledFunctionsAndCompiledTransforms) {
  auto f = [](const std::vector<array>& in) { return std::vector<array>{sum(multiply(sin(in[0]), in[1]))}; };
  VectorFn cf = compile(f);
  const array x = cp_f32({5}, 11), y = cp_f32({5}, 12);
  // grad of a compiled function: the transform traces the function itself.
  const auto [v1, g1] = value_and_grad(cf, std::vector<int>{0, 1})({x, y});
  const auto [v2, g2] = value_and_grad(f, std::vector<int>{0, 1})({x, y});
  EXPECT_TRUE(cp_equal(v1[0], v2[0]));
  EXPECT_TRUE(cp_equal(g1[0], g2[0]));
  EXPECT_TRUE(cp_equal(g1[1], g2[1]));
  // compile of grad.
  VectorFn cg = compile([f](const std::vector<array>& in) { return value_and_grad(f, 0)(in).second; });
  EXPECT_TRUE(cp_equal(cg({x, y})[0], g2[0]));
  // vmap of a compiled function, against a loop.
  const array xs = cp_f32({3, 5}, 13);
  const array batched = vmap(cf, {0, -1})({xs, y})[0];
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(allclose(take(batched, array(i)), f({take(xs, array(i), 0), y})[0], 1e-6, 1e-6).item<bool>()) << i;
  }
}

TEST(Compile, ModesAndErrors) {
  EXPECT_THROW(compile(nullptr), std::invalid_argument);
  disable_compile();
  EXPECT_NO_THROW(compile(nullptr));
  auto f = [](const std::vector<array>& in) { return std::vector<array>{abs(in[0])}; };
  array out = compile(f)({array(-1.0f)})[0];
  enable_compile();
  EXPECT_FALSE(std::string(out.primitive().name()) == "Compiled");
  EXPECT_EQ(out.item<float>(), 1.0f);

  // A function that evaluates what depends on its inputs is named.
  VectorFn bad = compile([](const std::vector<array>& in) {
    eval(exp(in[0]));
    return std::vector<array>{in[0]};
  });
  try {
    bad({array(1.0f)});
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("[compile]"), std::string::npos) << e.what();
  }
  // A trace that throws leaves nothing behind: the next call traces again.
  bool fail = true;
  VectorFn flaky = compile([&fail](const std::vector<array>&) {
    if (fail) throw std::runtime_error("trace failure");
    return std::vector<array>{add(array(1.0f), array(2.0f))};
  });
  EXPECT_THROW(flaky({}), std::runtime_error);
  EXPECT_THROW(flaky({}), std::runtime_error);
  fail = false;
  EXPECT_EQ(flaky({})[0].item<float>(), 3.0f);
}

TEST(Compile, AsyncEvalAndViewsAsInputs) {
  auto f = [](const std::vector<array>& in) { return std::vector<array>{add(multiply(in[0], in[1]), in[0])}; };
  VectorFn cf = compile(f);
  const array m = cp_f32({40, 30}, 21);
  const array t = transpose(m);                                  // a strided view
  const array b = broadcast_to(cp_f32({30, 1}, 22), {30, 40});  // a broadcast
  array out = cf({t, b})[0];
  async_eval(out);
  EXPECT_TRUE(cp_equal(out, f({t, b})[0]));
  // The compiled call's inputs may themselves be unevaluated.
  array lazy = cf({exp(t), b})[0];
  EXPECT_TRUE(cp_equal(lazy, f({exp(t), b})[0]));
}

TEST(Compile, FusedGroupsFollowTheirInputsLayoutFromCallToCall) {
  // A program keeps how each fused group reads its leaves; a call whose inputs are laid out
  // otherwise (strided, broadcast, one value, donated or not) must be read as such, and a call laid
  // out as an earlier one must find the earlier plan still right. Sizes span one block and several.
  auto f = [](const std::vector<array>& in) {
    array z = in[0];
    for (int i = 0; i < 5; ++i) z = add(multiply(z, in[1]), array(0.5f));
    return std::vector<array>{subtract(z, in[0])};
  };
  VectorFn cf = compile(f);
  for (int n : {40, 300}) {
    const array m = cp_f32({n, n}, 60 + n), mt = transpose(cp_f32({n, n}, 61 + n));
    const array row = broadcast_to(cp_f32({1, n}, 62 + n), {n, n}), one = full({n, n}, 0.75f);
    const std::vector<std::pair<array, array>> calls = {{m, m},   {mt, row}, {m, one},  {row, mt},
                                                        {m, m},   {one, one}, {mt, mt}, {m, row}};
    for (size_t c = 0; c < calls.size(); ++c) {
      const auto& [x, y] = calls[c];
      EXPECT_TRUE(cp_equal(cf({x, y})[0], f({x, y})[0])) << n << " call " << c;
      // An input only the call holds may give its buffer to the result.
      EXPECT_TRUE(cp_equal(cf({x + 0.0f, y})[0], f({x, y})[0])) << n << " call " << c << ", donated";
    }
  }
}

TEST(Compile, ConstantsKeepTheirValuesAcrossCalls) {
  // Constants read once, by kernels that may write their result in an input's buffer (an
  // elementwise add, a scatter-add into zeros): the buffer plan must never hand them out.
  auto fun = [](const std::vector<array>& in) {
    const array c = astype(arange(4000), float32);
    array zero = zeros({4});
    return std::vector<array>{add(c, in[0]), scatter_add(zero, in[1], expand_dims(in[2], -1), 0)};
  };
  VectorFn cf = compile(fun);
  for (int call = 0; call < 3; ++call) {
    const array x = full({4000}, static_cast<float>(call + 1)), idx = array({1, 1, 3}), v = array({1.0f, 2.0f, 4.0f});
    const std::vector<array> got = cf({x, idx, v}), want = fun({x, idx, v});
    EXPECT_TRUE(cp_equal(got[0], want[0])) << call;
    EXPECT_TRUE(cp_equal(got[1], array({0.0f, 3.0f, 0.0f, 4.0f}))) << call;
  }
}

TEST(Compile, ShapelessRunsOneTraceOnOtherShapes) {
  int traces = 0;
  const array w1 = cp_f32({6, 16}, 31), b1 = cp_f32({16}, 32), w2 = cp_f32({16, 3}, 33);
  // An MLP's forward: matmuls, a broadcast bias, relu against a scalar, softmax, a mean that drops
  // its axis, a reshape with -1 and a long elementwise chain (fused at the traced size).
  auto fun = [&](const std::vector<array>& in) {
    ++traces;
    array h = maximum(add(matmul(in[0], w1), b1), array(0.0f));
    array p = softmax(matmul(h, w2), -1);
    array z = in[0];
    for (int i = 0; i < 6; ++i) z = tanh(add(multiply(z, array(1.5f)), array(0.25f)));
    return std::vector<array>{p, mean(p, 1), reshape(z, {-1}), sum(z)};
  };
  VectorFn cf = compile(fun, /* shapeless */ true);
  for (int rows : {400, 7, 1, 400, 64}) {
    const array x = cp_f32({rows, 6}, 40 + rows);
    const std::vector<array> got = cf({x});
    const int before = traces;
    const std::vector<array> want = fun({x});
    traces = before;
    ASSERT_EQ(got.size(), want.size());
    for (size_t k = 0; k < got.size(); ++k) {
      EXPECT_EQ(got[k].shape(), want[k].shape()) << rows << " output " << k;
      EXPECT_TRUE(allclose(got[k], want[k], 1e-6, 1e-6).item<bool>()) << rows << " output " << k;
    }
  }
  EXPECT_EQ(traces, 1);
  // Another number of dimensions, or another dtype, is another trace.
  cf({cp_f32({2, 3, 6}, 50)});
  cf({astype(cp_f32({5, 6}, 51), float64)});
  EXPECT_EQ(traces, 3);
}

// Every output of a shapeless compiled function against the function itself, over several shapes of
// its inputs (made by `make` for each size), traced once.
void cp_expect_shapeless(const std::function<std::vector<array>(const std::vector<array>&)>& fun,
                         const std::function<std::vector<array>(int)>& make, std::initializer_list<int> sizes,
                         double tol = 1e-6) {
  int traces = 0;
  VectorFn cf = compile([&](const std::vector<array>& in) {
    ++traces;
    return fun(in);
  }, /* shapeless */ true);
  for (int n : sizes) {
    const std::vector<array> in = make(n);
    const std::vector<array> got = cf(in), want = fun(in);
    ASSERT_EQ(got.size(), want.size());
    for (size_t k = 0; k < got.size(); ++k) {
      EXPECT_EQ(got[k].shape(), want[k].shape()) << "size " << n << ", output " << k;
      EXPECT_EQ(got[k].dtype(), want[k].dtype()) << "size " << n << ", output " << k;
      EXPECT_TRUE(allclose(got[k], want[k], tol, tol).item<bool>()) << "size " << n << ", output " << k;
    }
  }
  EXPECT_EQ(traces, 1);
}

TEST(Compile, ShapelessConvolutionPoolingAndCrossEntropyFollowTheBatch) {
  // A small CNN's per-example losses and their vjp against a cotangent given as an input (so no
  // broadcast of a traced size enters: as MLX, a shapeless trace keeps the shapes its vjps were
  // built for): convolution's three roles, both poolings and their backward roles, the fused
  // cross-entropy and its backward, over batches of 6, 2, 9 and 6.
  const array w1 = cp_f32({4, 3, 3, 2}, 80), w2 = cp_f32({5, 2, 2, 4}, 81), wl = cp_f32({5, 3}, 82);
  auto losses = [](const std::vector<array>& p) {
    array h = maximum(conv2d(p[0], p[1], {1, 1}, {1, 1}), array(0.0f));  // (N, 8, 8, 4)
    h = max_pool2d(h, {2, 2});                                         // (N, 4, 4, 4)
    h = conv2d(h, p[2], {2, 2});                                       // (N, 2, 2, 5)
    h = avg_pool2d(h, {2, 2});                                         // (N, 1, 1, 5)
    array logits = matmul(reshape(h, {-1, 5}), p[3]);
    return std::vector<array>{nn::losses::cross_entropy(logits, p[4])};
  };
  auto fun = [&](const std::vector<array>& in) {
    auto [v, g] = vjp([&](const std::vector<array>& p) { return losses({p[0], p[1], p[2], p[3], in[1]}); },
                      {in[0], w1, w2, wl}, {in[2]});
    std::vector<array> out = {v[0]};
    out.insert(out.end(), g.begin(), g.end());
    return out;
  };
  auto make = [](int n) {
    return std::vector<array>{cp_f32({n, 8, 8, 2}, 83 + n), astype(cp_f32({n}, 84 + n, 0.0, 2.99), int32),
                              cp_f32({n}, 85 + n)};
  };
  cp_expect_shapeless(fun, make, {6, 2, 9, 6}, 1e-5);
}

TEST(Compile, ShapelessIndexingSortingAndQuantizedMatmulFollowTheirInputs) {
  // An embedding lookup with its vjp (take, and the scatter-add of take's vjp), sorting and top-k,
  // take_along_axis, searchsorted and gather, over 3 to 11 rows.
  const array table = cp_f32({10, 4}, 90), edges = array({-0.5f, 0.0f, 0.5f});
  auto fun = [&](const std::vector<array>& in) {
    auto embed = [&](const std::vector<array>& p) { return std::vector<array>{take(p[0], in[0], 0)}; };
    auto [v, g] = vjp(embed, {table}, {in[2]});
    const array x = in[1];
    return std::vector<array>{v[0],
                              g[0],
                              sort(x, 1),
                              argsort(x, 0),
                              topk(x, 2, 1),
                              take_along_axis(x, argsort(x, 1), 1),
                              searchsorted(edges, x),
                              gather(x, {in[0] % 3}, {0}, {1, 4})};
  };
  auto make = [](int n) {
    return std::vector<array>{astype(cp_f32({n}, 91 + n, 0.0, 9.99), int32), cp_f32({n, 4}, 92 + n),
                              cp_f32({n, 4}, 93 + n)};
  };
  cp_expect_shapeless(fun, make, {5, 3, 11, 5});
  // quantized_matmul: x's rows follow the call.
  const auto q = quantize(cp_f32({16, 64}, 93), 32, 4);
  auto qmm = [&](const std::vector<array>& in) {
    return std::vector<array>{quantized_matmul(in[0], q[0], q[1], q[2], true, 32, 4)};
  };
  cp_expect_shapeless(qmm, [](int n) { return std::vector<array>{cp_f32({n, 64}, 94 + n)}; }, {3, 1, 8});
}

TEST(Compile, ShapelessNewRulesNameWhatCannotFollow) {
  // top-k of more entries than the call's axis holds; a convolution's gradient whose traced spatial
  // size the call's input no longer fits.
  VectorFn top = compile([](const std::vector<array>& in) { return std::vector<array>{topk(in[0], 3, 0)}; }, true);
  top({cp_f32({5}, 95)});
  try {
    top({cp_f32({2}, 96)});
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("TopK"), std::string::npos) << e.what();
  }
  const array w = cp_f32({3, 3, 2}, 97);
  VectorFn dx = compile([w](const std::vector<array>& in) {
    auto f = [&](const std::vector<array>& p) { return std::vector<array>{conv1d(p[0], w, 2)}; };
    return vjp(f, {in[0]}, {in[1]}).second;
  }, true);
  dx({cp_f32({2, 9, 2}, 98), cp_f32({2, 4, 3}, 98)});
  EXPECT_NO_THROW(dx({cp_f32({4, 9, 2}, 99), cp_f32({4, 4, 3}, 99)}));  // another batch
  try {
    dx({cp_f32({2, 13, 2}, 100), cp_f32({2, 6, 3}, 100)});
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("Convolution"), std::string::npos) << e.what();
  }
}

TEST(Compile, ShapelessNamesWhatCannotTakeOtherShapes) {
  // A reshape to a fixed shape, as MLX: traced on 4 elements, called on 5.
  VectorFn fixed = compile([](const std::vector<array>& in) { return std::vector<array>{reshape(in[0], {2, 2})}; }, true);
  EXPECT_TRUE(cp_equal(fixed({array({1, 2, 3, 4})})[0], array({1, 2, 3, 4}, {2, 2})));
  try {
    fixed({array({1, 2, 3, 4, 5})});
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("Reshape"), std::string::npos) << e.what();
  }
  // A constant of the traced length against an input of another.
  const array c = array({1.0f, 2.0f});
  VectorFn add_c = compile([c](const std::vector<array>& in) { return std::vector<array>{add(in[0], c)}; }, true);
  EXPECT_TRUE(cp_equal(add_c({array({1.0f, 1.0f})})[0], array({2.0f, 3.0f})));
  EXPECT_THROW(add_c({array({1.0f, 1.0f, 1.0f})}), std::invalid_argument);
  // A fused layer_norm follows its rows, not a last axis its weight does not fit.
  const array w = cp_f32({4}, 70, 0.5, 1.5);
  auto norm = [w](const std::vector<array>& in) {
    return std::vector<array>{fast::layer_norm(in[0], w, std::nullopt, 1e-5f)};
  };
  VectorFn ln = compile(norm, true);
  ln({cp_f32({3, 4}, 71)});
  EXPECT_TRUE(allclose(ln({cp_f32({9, 4}, 72)})[0], norm({cp_f32({9, 4}, 72)})[0], 1e-6, 1e-6).item<bool>());
  EXPECT_THROW(ln({cp_f32({3, 5}, 73)}), std::invalid_argument);
  // A broadcast scalar follows the input (MLX's shapeless test).
  VectorFn add_s = compile([](const std::vector<array>& in) { return std::vector<array>{add(in[0], array({2}))}; }, true);
  EXPECT_TRUE(cp_equal(add_s({array({1, 2})})[0], array({3, 4})));
  EXPECT_TRUE(cp_equal(add_s({array({1, 2, 3, 4})})[0], array({3, 4, 5, 6})));
}
