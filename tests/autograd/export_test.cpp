// export_function / import_function: a function read back computes what it computed (bit for bit),
// with its signatures, keyword inputs, shapeless traces, random draws and metadata; and a file that is
// not one, is truncated, damaged or of another format version is a clear error, never a crash.
// (tests/ops/export_roundtrip_test.cpp checks each primitive's saved parameters; examples/serve runs
// an exported model in another process.)
#include <cstdio>
#include <fstream>
#include <iterator>

#include "../test_utils.h"

using namespace loom;
using loom::testing::expect_export_roundtrip;
using loom::testing::lcg_uniform;

namespace {

array ex_f32(const Shape& shape, unsigned seed, double lo = -1.0, double hi = 1.0) {
  return astype(lcg_uniform(shape, lo, hi, seed), float32);
}

std::string ex_path(const std::string& name) { return ::testing::TempDir() + "loom_export_" + name + ".loomfn"; }

std::string ex_read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void ex_write(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A small MLP's forward with its weights as constants of the trace.
struct ExMlp {
  array w1 = ex_f32({6, 16}, 1, -0.5, 0.5), b1 = ex_f32({16}, 2), w2 = ex_f32({16, 3}, 3, -0.5, 0.5);
  std::vector<array> operator()(const Args& in) const {
    array h = maximum(add(matmul(in[0], w1), b1), array(0.0f));
    array logits = matmul(h, w2);
    return {softmax(logits, -1), argmax(logits, -1)};
  }
};

}  // namespace

TEST(Export, ImportedFunctionMatchesBitForBit) {
  const ExMlp mlp;
  const std::string path = ex_path("mlp");
  export_function(path, [&mlp](const Args& a) { return mlp(a); }, {ex_f32({5, 6}, 10)}, false, "mlp v1");
  const ImportedFunction f = import_function(path);
  EXPECT_EQ(f.metadata(), "mlp v1");
  const array x = ex_f32({5, 6}, 11);
  const std::vector<array> got = f({x}), want = mlp({x});
  ASSERT_EQ(got.size(), 2u);
  EXPECT_STREQ(got[0].primitive().name(), "Compiled");
  for (size_t k = 0; k < 2; ++k) {
    EXPECT_EQ(got[k].dtype(), want[k].dtype());
    EXPECT_TRUE(array_equal(got[k], want[k]).item<bool>()) << k;
  }
  // Another shape was not traced: the error lists what was.
  try {
    f({ex_f32({4, 6}, 12)});
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("float32(5,6)"), std::string::npos) << e.what();
  }
  std::remove(path.c_str());
}

TEST(Export, SeveralTracesKeywordsAndShapeless) {
  const std::string path = ex_path("traces");
  auto fun = [](const Args& a, const Kwargs& k) {
    return std::vector<array>{add(multiply(a[0], k.at("scale")), exp(a[0]))};
  };
  {
    FunctionExporter ex = exporter(path, fun);
    ex({ex_f32({3}, 20)}, {{"scale", array(2.0f)}});
    ex({ex_f32({2, 2}, 21)}, {{"scale", array(3.0f)}});
    ex.close();
    EXPECT_THROW(ex({ex_f32({3}, 22)}, {{"scale", array(1.0f)}}), std::invalid_argument);
  }
  const ImportedFunction f = import_function(path);
  for (const Shape& shape : {Shape{3}, Shape{2, 2}}) {
    const array x = ex_f32(shape, 23);
    const Kwargs k{{"scale", array(0.5f)}};
    EXPECT_TRUE(array_equal(f({x}, k)[0], fun({x}, k)[0]).item<bool>());
  }
  EXPECT_THROW(f({ex_f32({3}, 24)}), std::invalid_argument);  // the keyword input is missing

  // A shapeless trace runs on other shapes of the same number of axes.
  const ExMlp mlp;
  const std::string shapeless = ex_path("shapeless");
  export_function(shapeless, [&mlp](const Args& a) { return mlp(a); }, {ex_f32({4, 6}, 25)}, true);
  const ImportedFunction g = import_function(shapeless);
  for (int rows : {1, 9, 300}) {
    const array x = ex_f32({rows, 6}, 26 + rows);
    const std::vector<array> got = g({x}), want = mlp({x});
    EXPECT_EQ(got[1].shape(), (Shape{rows}));
    EXPECT_TRUE(allclose(got[0], want[0], 1e-6, 1e-7).item<bool>()) << rows;
    EXPECT_TRUE(array_equal(got[1], want[1]).item<bool>()) << rows;
  }
  std::remove(path.c_str());
  std::remove(shapeless.c_str());
}

TEST(Export, RandomDrawsUseTheImportingProcesssKeys) {
  const std::string path = ex_path("random");
  auto fun = [](const Args& a) { return std::vector<array>{add(a[0], random::normal({4}))}; };
  export_function(path, fun, {zeros({4})});
  const ImportedFunction f = import_function(path);
  random::seed(5);
  const array want1 = fun({zeros({4})})[0], want2 = fun({zeros({4})})[0];
  eval(want1, want2);
  random::seed(5);
  const array got1 = f({zeros({4})})[0], got2 = f({zeros({4})})[0];
  EXPECT_TRUE(array_equal(got1, want1).item<bool>());
  EXPECT_TRUE(array_equal(got2, want2).item<bool>());
  std::remove(path.c_str());
}

TEST(Export, ImportedFunctionsUnderTransforms) {
  const std::string path = ex_path("grad");
  auto fun = [](const Args& a) { return std::vector<array>{sum(multiply(sin(a[0]), a[0]))}; };
  export_function(path, fun, {ex_f32({7}, 30)});
  const ImportedFunction f = import_function(path);
  const array x = ex_f32({7}, 31);
  // grad through the imported graph (rebuilt as nodes while the transform traces).
  const array g = grad([&f](const std::vector<array>& v) { return f({v[0]})[0]; })({x})[0];
  const array want = grad([&fun](const std::vector<array>& v) { return fun({v[0]})[0]; })({x})[0];
  EXPECT_TRUE(allclose(g, want, 1e-6, 1e-7).item<bool>());
  std::remove(path.c_str());
}

TEST(Export, BadFilesAreClearErrors) {
  const std::string path = ex_path("bad");
  const ExMlp mlp;
  export_function(path, [&mlp](const Args& a) { return mlp(a); }, {ex_f32({2, 6}, 40)});
  const std::string good = ex_read(path);
  ASSERT_GT(good.size(), 100u);
  auto error_of = [&](const std::string& bytes) -> std::string {
    ex_write(path, bytes);
    try {
      import_function(path);
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    return "";
  };
  // Every truncation, at a spread of lengths.
  for (size_t n = 0; n < good.size(); n += 1 + n / 8) {
    const std::string e = error_of(good.substr(0, n));
    EXPECT_NE(e.find("[import_function]"), std::string::npos) << "length " << n << ": " << e;
  }
  // A flipped byte in the body: the checksum catches it.
  std::string flipped = good;
  flipped[good.size() / 2] ^= 0x5a;
  EXPECT_NE(error_of(flipped).find("checksum"), std::string::npos);
  // Another format version (the int32 after the 8-byte magic): named, with the writer's Loom.
  std::string other = good;
  other[8] = 99;
  const std::string e = error_of(other);
  EXPECT_NE(e.find("format version 99"), std::string::npos) << e;
  EXPECT_NE(error_of("not a loom function file").find("not a file export_function wrote"), std::string::npos);
  std::remove(path.c_str());
  EXPECT_THROW(import_function(path), std::runtime_error);  // no such file
}

TEST(Export, UnexportablePrimitivesAreNamed) {
  const std::string path = ex_path("custom");
  auto f = custom_function([](const std::vector<array>& x) { return std::vector<array>{exp(x[0])}; },
                           [](const std::vector<array>&, const std::vector<array>& c, const std::vector<array>& o) {
                             return std::vector<array>{multiply(c[0], o[0])};
                           });
  try {
    export_function(path, [&f](const Args& a) { return f(a); }, {ex_f32({3}, 50)});
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("cannot be exported"), std::string::npos) << e.what();
  }
  std::ifstream in(path);
  EXPECT_FALSE(in.good());  // nothing written
}

TEST(Export, CorePrimitivesRoundTrip) {
  const array x = ex_f32({3, 4}, 60), y = ex_f32({3, 4}, 61);
  const std::vector<array> nodes = {
      exp(x), add(x, y), where(greater(x, y), x, y), astype(x, float16), copy(x), stop_gradient(x),
      reshape(x, {4, 3}), broadcast_to(ex_f32({1, 4}, 62), {3, 4}), transpose(x), slice(x, {0, 1}, {3, 4}, {2, 1}),
      slice_update(x, ex_f32({1, 4}, 63), {1, 0}, {2, 4}), concatenate({x, y}, 1), pad(x, {{1, 0}, {0, 2}}),
      sum(x, 1, true), max(x, 0, true), cumsum(x, 1, true, false), argmax(x, 1, true), matmul(x, transpose(y)),
      softmax(x, -1), full({2, 2}, array(1.5f)), arange(0.0, 5.0, 0.5), abs(array({complex64_t(3, 4)}))};
  for (const array& n : nodes) {
    SCOPED_TRACE(n.primitive().name());
    expect_export_roundtrip(n);
  }
  const std::vector<array> parts = split(x, 2, 1);
  expect_export_roundtrip(parts[0]);
}
