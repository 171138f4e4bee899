// einsum and einsum_path: numpy's values (numpy 1.24, np.einsum on the inputs es_input makes), MLX's
// contraction paths (its tests/einsum_tests.cpp cases), the subscripts' error paths, derivatives
// through the lowering by finite differences, vmap against a loop, and compile.
#include "../test_utils.h"

using namespace loom;
using loom::testing::expect_array;

namespace {

// numpy: ((np.arange(n) * 0.37 * k) % 2.0 - 1.0).reshape(shape)
array es_input(const Shape& shape, int k) {
  int n = 1;
  for (int d : shape) n *= d;
  const array x = multiply(multiply(arange(0, n, 1, float64), array(0.37, float64)), array(double(k), float64));
  return reshape(subtract(remainder(x, array(2.0, float64)), array(1.0, float64)), shape);
}

std::vector<array> es_inputs(const std::vector<Shape>& shapes) {
  std::vector<array> out;
  for (size_t i = 0; i < shapes.size(); ++i) out.push_back(es_input(shapes[i], static_cast<int>(i) + 1));
  return out;
}

}  // namespace

TEST(Einsum, ValuesMatchNumpy) {
  struct Case {
    const char* sub;
    std::vector<Shape> shapes;
    Shape out;
    std::vector<double> want;
  };
  const std::vector<Case> cases = {
      {"ij,jk->ik", {{2, 3}, {3, 4}}, {2, 4}, {0.786, -0.0926, -0.2312, 0.8902, 0.6528, 0.0184, 0.124, -0.7304}},
      {"ij,jk", {{2, 3}, {3, 4}}, {2, 4}, {0.786, -0.0926, -0.2312, 0.8902, 0.6528, 0.0184, 0.124, -0.7304}},
      {"ii", {{3, 3}}, {}, {-0.56}},
      {"ii->i", {{3, 3}}, {3}, {-1.0, 0.48, -0.04}},
      {"ij->ji", {{2, 3}}, {3, 2}, {-1.0, 0.11, -0.63, 0.48, -0.26, 0.85}},
      {"bij,bjk->bik", {{2, 2, 3}, {2, 3, 2}}, {2, 2, 2}, {0.708, 0.5694, 0.0864, 0.192, 0.0436, 0.0334, 0.0872, 0.6212}},
      {"i,j->ij", {{2}, {3}}, {2, 3}, {1.0, 0.26, -0.48, 0.63, 0.1638, -0.3024}},
      {"bn,anm,bm->ba",
       {{2, 3}, {4, 3, 2}, {2, 2}},
       {2, 4},
       {-0.645366, 0.151958, -0.367918, 0.072206, -0.004032, -0.850152, -0.386472, 0.581808}},
      {"...ij,...jk->...ik",
       {{2, 1, 2, 3}, {3, 3, 2}},
       {2, 3, 2, 2},
       {0.708, 0.5694, 0.0864, 0.192, -0.1236, 0.2578, 0.72, -0.8744, 0.3048, -0.5738, 0.3936, -0.2408,
        0.5848, 0.4946, 0.0432, -1.2828, 0.0436, 0.0334, 0.0872, 0.6212, 0.3224, -0.5078, -1.2688, 0.6652}},
      {"iij->j", {{2, 2, 3}}, {3}, {-0.67, 0.07, -1.19}},
      {"ijk,jil->kl", {{3, 2, 4}, {2, 3, 2}}, {4, 2}, {0.32, 0.868, 0.474, -1.0352, 0.868, -0.1784, -0.018, 0.8784}},
      {"ea,fb,abcd,gc,hd->efgh",
       {{2, 2}, {2, 2}, {2, 2, 2, 2}, {2, 2}, {2, 2}},
       {2, 2, 2, 2},
       {-1.5006135, 0.139865452, -0.463056516, 0.30418386, 0.451962468, 0.19617966, -0.03313674, -0.2939331,
        -0.054160364, 0.19764406, -0.2638349, 0.0353833, -0.14348238, -0.0706377, -0.0639237, -0.0305967}},
      {"i,i", {{3}, {1}}, {}, {1.89}},  // a size-1 operand broadcasts
      {"ij,j->i", {{2, 3}, {3}}, {2}, {1.039, 0.1732}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.sub);
    expect_array(einsum(c.sub, es_inputs(c.shapes)), c.out, c.want, 1e-8);
  }
  // MLX's own cases.
  EXPECT_TRUE(allclose(einsum("jki", {full({2, 3, 4}, 3.0f)}), full({4, 2, 3}, 3.0f)).item<bool>());
  EXPECT_TRUE(allclose(einsum("ij,jk->ik", {full({2, 2}, 2.0f), full({2, 2}, 3.0f)}), full({2, 2}, 12.0f)).item<bool>());
  EXPECT_TRUE(allclose(einsum("i,j->ij", {full({2}, 15.0f), full({4}, 20.0f)}), full({2, 4}, 300.0f)).item<bool>());
  // Spaces are ignored; float32 stays float32.
  EXPECT_EQ(einsum(" ij , jk -> ik ", {ones({2, 2}), ones({2, 2})}).dtype(), float32);
}

TEST(Einsum, PathsMatchMlxAndNumpy) {
  using Path = std::vector<std::vector<int>>;
  EXPECT_EQ(einsum_path("ij,jk,kl", {ones({2, 2}), ones({2, 4}), ones({4, 2})}).first, (Path{{1, 2}, {0, 1}}));
  EXPECT_EQ(einsum_path("jki", {ones({2, 3, 4})}).first, (Path{{0}}));
  EXPECT_EQ(einsum_path("i,i", {ones({2}), ones({1})}).first, (Path{{0, 1}}));
  EXPECT_EQ(einsum_path("ij,jk", {ones({2, 2}), ones({2, 2})}).first, (Path{{0, 1}}));
  EXPECT_EQ(einsum_path("ijk,jil->kl", {ones({3, 4, 5}), ones({4, 3, 2})}).first, (Path{{0, 1}}));
  EXPECT_EQ(einsum_path("ijk,ilm,njm,nlk,abc->",
                        {ones({2, 6, 8}), ones({2, 4, 5}), ones({3, 6, 5}), ones({3, 4, 8}), ones({9, 4, 7})})
                .first,
            (Path{{0, 3}, {1, 3}, {0, 2}, {0, 1}}));
  EXPECT_EQ(einsum_path("ea,fb,abcd,gc,hd->efgh",
                        {ones({10, 10}), ones({10, 10}), ones({10, 10, 10, 10}), ones({10, 10}), ones({10, 10})})
                .first,
            (Path{{0, 2}, {0, 3}, {0, 2}, {0, 1}}));
  // The report names the costs and each contraction.
  const std::string report = einsum_path("ij,jk,kl", {ones({2, 2}), ones({2, 4}), ones({4, 2})}).second;
  EXPECT_NE(report.find("Naive FLOP count"), std::string::npos) << report;
  EXPECT_NE(report.find("jk,kl->"), std::string::npos) << report;
  // Every path computes the same as one naive contraction: a chain of matmuls.
  const array a = es_input({3, 4}, 1), b = es_input({4, 5}, 2), c = es_input({5, 2}, 3);
  EXPECT_TRUE(allclose(einsum("ij,jk,kl->il", {a, b, c}), matmul(matmul(a, b), c), 1e-12, 1e-12).item<bool>());
}

TEST(Einsum, BadSubscriptsNameEinsum) {
  auto throws = [](const std::string& sub, const std::vector<array>& ops, const std::string& needle) {
    try {
      einsum(sub, ops);
      ADD_FAILURE() << sub << ": expected an error";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("[einsum]"), std::string::npos) << e.what();
    }
  };
  // MLX's error cases.
  throws("i,j", {array({1.0f})}, "name 2 operands but 1 were given");
  throws("ijk", {full({2, 2}, 2.0f)}, "has 3 subscripts for operand 0 of shape (2,2)");
  throws("", {}, "needs at least one operand");
  throws("ij", {array({1, 2})}, "has 2 subscripts");
  throws("", {array({1, 2})}, "name 0 operands");
  throws("i,ij", {array({1, 2}), array({2, 3})}, "has 2 subscripts for operand 1");
  throws("i,i", {array({1, 2}), array({2, 3, 4})}, "subscript 'i' is 2 long elsewhere but 3");
  throws("i->ii", {array({1, 2})}, "the output repeats subscript 'i'");
  throws("12", {zeros({4, 4})}, "subscripts must be letters");
  throws("ii->i", {zeros({3, 2})}, "the repeated subscript 'i' of operand 0");
  // Loom's further checks.
  throws("ij->k", {zeros({2, 2})}, "the output's subscript 'k' is in no input");
  throws("...i...", {zeros({2, 2})}, "more than one ellipsis");
  throws("...ijk", {zeros({2, 2})}, "has too few axes");
  EXPECT_THROW(einsum_path("i,j", {ones({2})}), std::invalid_argument);
}

TEST(Einsum, GradientsThroughTheLowering) {
  // Contractions (batched matmul), outer products, diagonals and a three-operand path.
  const std::vector<std::pair<const char*, std::vector<Shape>>> cases = {
      {"bij,bjk->bik", {{2, 2, 3}, {2, 3, 2}}},
      {"i,j->ij", {{2}, {3}}},
      {"ii->i", {{3, 3}}},
      {"bn,anm,bm->ba", {{2, 3}, {4, 3, 2}, {2, 2}}},
      {"...ij,...jk->...ik", {{2, 1, 2, 3}, {3, 3, 2}}},
      {"ij,jk,kl->il", {{2, 3}, {3, 2}, {2, 2}}},
  };
  for (const auto& [sub, shapes] : cases) {
    SCOPED_TRACE(sub);
    const std::string s = sub;
    auto r = check_grads([s](const std::vector<array>& p) { return std::vector<array>{einsum(s, p)}; }, es_inputs(shapes));
    EXPECT_TRUE(r.ok) << r.report;
  }
}

TEST(Einsum, UnderVmapAndCompile) {
  auto f = [](const std::vector<array>& p) { return std::vector<array>{einsum("ij,jk,k->i", p)}; };
  const std::vector<array> in = {es_input({4, 3, 5}, 1), es_input({5, 2}, 2), es_input({2}, 3)};
  loom::testing::expect_vmap_matches_loop(f, in, {0, -1, -1}, {}, 1e-12, 1e-12);
  VectorFn cf = compile(f);
  const std::vector<array> x = {es_input({3, 5}, 4), es_input({5, 2}, 2), es_input({2}, 3)};
  EXPECT_TRUE(array_equal(cf(x)[0], f(x)[0]).item<bool>());
}
