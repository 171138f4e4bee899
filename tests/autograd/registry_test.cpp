// Every primitive has a gradient check, or a stated reason why it needs none.
//
// The test reads the library's sources (ops/, fast/, distributed/, autograd/, core/, optim/, nn/) and finds every class
// deriving from Primitive or UnaryPrimitive (or from such a class), with the names it reports:
//   - the string literals of its name(), or of a helper function name() calls (`dist_name(dist_)`);
//   - for the elementwise templates whose name() is `Op::name`, every `name = "..."` of an op
//     struct, including those stamped out by a macro (`LOOM_COMPARISON(EqualOp, "Equal", ...)`);
//   - variants listed by print(), from a braced list of literals or a helper function
//     (`Reduce(sum)`, `Pooling(max_scatter)`, `Convolution(weight_grad)`).
// Each found name must have an entry in kRegistry below: either the tests that compare its vjp and
// jvp with finite differences (each reference is verified to exist, to call a checker and to
// mention the op), or a reason why it has no derivative to check. A new primitive, a new variant or
// a new elementwise op fails this test until it is registered; a stale entry fails it too.
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "../test_utils.h"

namespace fs = std::filesystem;

namespace {

// ---------------------------------------------------------------------------------------------
// The registry.

struct Ref {
  const char* file;   // relative to the source root
  const char* test;   // "Suite.Name", or "function()" for a helper a test calls
  const char* token;  // a string the test body must contain (the op's function, as called)
};

struct Entry {
  const char* name;
  std::vector<Ref> checks;  // finite-difference checks of both vjp and jvp
  const char* no_gradient;  // or: why there is nothing to check (nullptr when checked)
};

const char* kPrim = "tests/autograd/primitives_grad_test.cpp";
const char* kCover = "tests/autograd/coverage_grad_test.cpp";
const char* kCustom = "tests/autograd/custom_test.cpp";
const char* kConv = "tests/conv/grad_test.cpp";
const char* kIndex = "tests/indexing/grad_test.cpp";
const char* kRandom = "tests/random/random_grad_test.cpp";
const char* kLosses = "tests/nn/losses_test.cpp";
const char* kAttention = "tests/fast/attention_test.cpp";
const char* kGelu = "tests/fast/gelu_test.cpp";
const char* kLayerNorm = "tests/fast/layer_norm_test.cpp";
const char* kRMSNorm = "tests/fast/rms_norm_test.cpp";
const char* kFastSoftmax = "tests/fast/softmax_test.cpp";
const char* kAdam = "tests/fast/adam_update_test.cpp";
const char* kSoftmax = "tests/ops/softmax_test.cpp";

Entry checked(const char* name, std::vector<Ref> refs) { return {name, std::move(refs), nullptr}; }
Entry none(const char* name, const char* why) { return {name, {}, why}; }

std::vector<Entry> registry() {
  const char* predicate = "boolean result: no gradient flows through it";
  const char* indices = "integer indices: no gradient flows through it";
  const char* sample = "random sample: a constant to autograd (RandomGrad.SamplesAreConstantsToAutograd)";
  std::vector<Entry> r = {
      // ---- elementwise unary (ops/elementwise.cpp) ----
      checked("Negative", {{kPrim, "GradCheck.Unary", "negative"}, {kCover, "CoverageGrad.UnaryOnViews", "negative"}}),
      checked("Abs", {{kPrim, "GradCheck.Unary", "abs"}, {kCover, "CoverageGrad.UnaryOnViews", "abs"}}),
      checked("Sign", {{kPrim, "GradCheck.Unary", "sign"}}),
      checked("Square", {{kPrim, "GradCheck.Unary", "square"}, {kCover, "CoverageGrad.UnaryOnViews", "square"}}),
      checked("Sqrt", {{kPrim, "GradCheck.Unary", "sqrt"}, {kCover, "CoverageGrad.UnaryOnViews", "sqrt"}}),
      checked("Rsqrt", {{kPrim, "GradCheck.Unary", "rsqrt"}, {kCover, "CoverageGrad.UnaryOnViews", "rsqrt"}}),
      checked("Reciprocal", {{kPrim, "GradCheck.Unary", "reciprocal"}, {kCover, "CoverageGrad.UnaryOnViews", "reciprocal"}}),
      checked("Exp", {{kPrim, "GradCheck.Unary", "exp"}, {kCover, "CoverageGrad.UnaryOnViews", "exp"}}),
      checked("Expm1", {{kPrim, "GradCheck.Unary", "expm1"}, {kCover, "CoverageGrad.UnaryOnViews", "expm1"}}),
      checked("Log", {{kPrim, "GradCheck.Unary", "log"}, {kCover, "CoverageGrad.UnaryOnViews", "log"}}),
      checked("Log1p", {{kPrim, "GradCheck.Unary", "log1p"}, {kCover, "CoverageGrad.UnaryOnViews", "log1p"}}),
      checked("Log2", {{kPrim, "GradCheck.Unary", "log2"}, {kCover, "CoverageGrad.UnaryOnViews", "log2"}}),
      checked("Log10", {{kPrim, "GradCheck.Unary", "log10"}, {kCover, "CoverageGrad.UnaryOnViews", "log10"}}),
      checked("Sin", {{kPrim, "GradCheck.Unary", "sin"}, {kCover, "CoverageGrad.UnaryOnViews", "sin"}}),
      checked("Cos", {{kPrim, "GradCheck.Unary", "cos"}, {kCover, "CoverageGrad.UnaryOnViews", "cos"}}),
      checked("Tan", {{kPrim, "GradCheck.Unary", "tan"}, {kCover, "CoverageGrad.UnaryOnViews", "tan"}}),
      checked("Tanh", {{kPrim, "GradCheck.Unary", "tanh"}, {kCover, "CoverageGrad.UnaryOnViews", "tanh"}}),
      checked("Sigmoid", {{kPrim, "GradCheck.Unary", "sigmoid"}, {kCover, "CoverageGrad.UnaryOnViews", "sigmoid"}}),
      checked("Erf", {{kPrim, "GradCheck.Unary", "erf"}, {kCover, "CoverageGrad.UnaryOnViews", "erf"}}),
      checked("Erfinv", {{kPrim, "GradCheck.Unary", "erfinv"}, {kCover, "CoverageGrad.UnaryOnViews", "erfinv"}}),
      checked("Floor", {{kPrim, "GradCheck.Unary", "floor"}}),
      checked("Ceil", {{kPrim, "GradCheck.Unary", "ceil"}}),
      checked("Round", {{kPrim, "GradCheck.Unary", "round"}}),
      none("LogicalNot", predicate),
      none("IsNan", predicate),
      none("IsInf", predicate),
      none("IsFinite", predicate),
      // ---- elementwise binary ----
      checked("Add", {{kPrim, "GradCheck.BinaryWithBroadcasting", "add"}, {kCover, "CoverageGrad.BinaryBroadcastAndViews", "add"}}),
      checked("Subtract", {{kPrim, "GradCheck.BinaryWithBroadcasting", "subtract"}, {kCover, "CoverageGrad.BinaryBroadcastAndViews", "subtract"}}),
      checked("Multiply", {{kPrim, "GradCheck.BinaryWithBroadcasting", "multiply"}, {kCover, "CoverageGrad.BinaryBroadcastAndViews", "multiply"}}),
      checked("Divide", {{kPrim, "GradCheck.BinaryWithBroadcasting", "divide"}, {kCover, "CoverageGrad.BinaryBroadcastAndViews", "divide"}}),
      checked("FloorDivide", {{kCover, "CoverageGrad.PiecewiseConstantBinary", "floor_divide"}}),
      checked("Remainder", {{kPrim, "GradCheck.BinaryWithBroadcasting", "remainder"}, {kCover, "CoverageGrad.PiecewiseConstantBinary", "remainder"}}),
      checked("Power", {{kPrim, "GradCheck.BinaryWithBroadcasting", "power"}, {kCover, "CoverageGrad.BinaryBroadcastAndViews", "power"}}),
      checked("Maximum", {{kPrim, "GradCheck.BinaryWithBroadcasting", "maximum"}, {kCover, "CoverageGrad.BinaryBroadcastAndViews", "maximum"}}),
      checked("Minimum", {{kPrim, "GradCheck.BinaryWithBroadcasting", "minimum"}, {kCover, "CoverageGrad.BinaryBroadcastAndViews", "minimum"}}),
      checked("ArcTan2", {{kPrim, "GradCheck.BinaryWithBroadcasting", "arctan2"}, {kCover, "CoverageGrad.BinaryBroadcastAndViews", "arctan2"}}),
      none("Equal", predicate),
      none("NotEqual", predicate),
      none("Less", predicate),
      none("LessEqual", predicate),
      none("Greater", predicate),
      none("GreaterEqual", predicate),
      none("LogicalAnd", predicate),
      none("LogicalOr", predicate),
      checked("Select", {{kPrim, "GradCheck.WhereAndClip", "where"}, {kCover, "CoverageGrad.WhereBroadcastsAllThree", "where"}}),
      // ---- creation (ops/creation.cpp) ----
      checked("Full", {{kCover, "CoverageGrad.CreationAndCopies", "full"}}),
      none("Arange", "no array inputs: a constant"),
      checked("AsType", {{kCover, "CoverageGrad.CreationAndCopies", "astype"}}),
      checked("Copy", {{kCover, "CoverageGrad.CreationAndCopies", "copy"}}),
      none("StopGradient",
           "zero derivative by definition, so finite differences disagree on purpose (Grad.StopGradientBlocks)"),
      // ---- reductions and scans (ops/reduce.cpp) ----
      checked("Reduce", {{kPrim, "GradCheck.Reductions", "sum"}}),
      checked("Reduce(sum)", {{kPrim, "GradCheck.Reductions", "sum"}, {kCover, "CoverageGrad.ReductionsOnViews", "sum"}}),
      checked("Reduce(prod)", {{kPrim, "GradCheck.Reductions", "prod"}, {kCover, "CoverageGrad.ReductionsOnViews", "prod"}}),
      checked("Reduce(max)", {{kPrim, "GradCheck.Reductions", "max"}, {kCover, "CoverageGrad.ReductionsOnViews", "max"}}),
      checked("Reduce(min)", {{kPrim, "GradCheck.Reductions", "min"}, {kCover, "CoverageGrad.ReductionsOnViews", "min"}}),
      none("Reduce(all)", predicate),
      none("Reduce(any)", predicate),
      checked("CumSum", {{kPrim, "GradCheck.Reductions", "cumsum"}, {kCover, "CoverageGrad.ReductionsOnViews", "cumsum"}}),
      checked("CumProd", {{kCover, "CoverageGrad.SecondOrderOfProdGoesThroughCumProd", "prod"}}),
      none("ArgMax", indices),
      none("ArgMin", indices),
      // ---- shapes (ops/shape.cpp) ----
      checked("Reshape", {{kPrim, "GradCheck.ShapesAndViews", "reshape"}}),
      checked("Broadcast", {{kPrim, "GradCheck.ShapesAndViews", "broadcast_to"}}),
      checked("Transpose", {{kPrim, "GradCheck.ShapesAndViews", "transpose"}}),
      checked("Slice", {{kPrim, "GradCheck.ShapesAndViews", "slice"}}),
      checked("SliceUpdate", {{kPrim, "GradCheck.ShapesAndViews", "slice_update"}, {kCover, "CoverageGrad.SliceUpdateBroadcastAndViews", "slice_update"}}),
      checked("Concatenate", {{kPrim, "GradCheck.ShapesAndViews", "concatenate"}}),
      checked("Split", {{kPrim, "GradCheck.ShapesAndViews", "split"}}),
      checked("Pad", {{kPrim, "GradCheck.ShapesAndViews", "pad"}}),
      // ---- linear algebra, convolution, pooling ----
      checked("Matmul", {{kPrim, "GradCheck.Matmul", "matmul"}}),
      checked("Convolution", {{kConv, "ConvGrad.Conv2dInputAndWeight", "conv2d"}}),
      checked("Convolution(forward)", {{kConv, "ConvGrad.Conv2dInputAndWeight", "conv2d"}, {kConv, "ConvGrad.Conv1dAndGeneral", "conv_general"}}),
      checked("Convolution(input_grad)", {{kConv, "ConvGrad.SecondOrder", "grad"}}),
      checked("Convolution(weight_grad)", {{kConv, "ConvGrad.SecondOrder", "grad"}}),
      checked("Pooling", {{kConv, "ConvGrad.Pooling", "pool"}}),
      checked("Pooling(max)", {{kConv, "ConvGrad.Pooling", "max_pool2d"}}),
      checked("Pooling(avg)", {{kConv, "ConvGrad.Pooling", "avg_pool2d"}}),
      checked("Pooling(max_scatter)", {{kConv, "ConvGrad.PoolingSecondOrder", "max_pool2d"}}),
      checked("Pooling(max_gather)", {{kCover, "CoverageGrad.MaxPoolForwardTangentNode", "max_pool2d"}}),
      checked("Pooling(avg_scatter)", {{kConv, "ConvGrad.PoolingSecondOrder", "avg_pool2d"}}),
      // ---- indexing and sorting (ops/indexing.cpp, ops/sort.cpp) ----
      checked("Take", {{kIndex, "IndexingGrad.Take", "take"}}),
      checked("TakeAlongAxis", {{kIndex, "IndexingGrad.TakeAlongAxis", "take_along_axis"}}),
      checked("PutAlongAxis", {{kIndex, "IndexingGrad.PutAlongAxis", "put_along_axis"}}),
      checked("ScatterAddAxis", {{kIndex, "IndexingGrad.ScatterAddAxis", "scatter_add_axis"}}),
      checked("ScatterAdd", {{kIndex, "IndexingGrad.ScatterAdd", "scatter_add"}}),
      checked("Sort", {{kIndex, "IndexingGrad.SortTopKPartition", "sort"}}),
      checked("TopK", {{kIndex, "IndexingGrad.SortTopKPartition", "topk"}}),
      none("ArgSort", indices),
      none("ArgTopK", indices),
      none("ArgPartition", indices),
      // ---- random (ops/random.cpp) ----
      none("RandomBits", sample),
      none("RandomUniform", sample),
      none("RandomNormal", sample),
      none("RandomTruncatedNormal", sample),
      none("RandomInt", sample),
      none("RandomBernoulli", sample),
      none("RandomGumbel", sample),
      none("RandomPermutation", sample),
      checked("PermuteAxis", {{kRandom, "RandomGrad.PermutationOfArrayMatchesFiniteDifferences", "permutation"}}),
      checked("PermuteAxisInverse", {{kCover, "CoverageGrad.PermutationSecondOrderGoesThroughTheInverse", "permutation"}}),
      // ---- transforms (autograd/custom.cpp) ----
      checked("CustomTransforms", {{kCustom, "CustomFunction.VjpAndJvpRulesMatchFiniteDifferences", "softplus_fn"},
                                   {kCustom, "CustomFunction.MultipleOutputsAndSecondOrder", "custom_function"},
                                   {kCustom, "Checkpoint.SameValuesAndGradients", "checkpoint"}}),
      checked("Depends", {{kCustom, "Depends.ValuesPassThroughAndGradientsSkipTheDependencies", "depends"}}),
      // ---- softmax (ops/softmax.cpp) ----
      checked("Softmax", {{kSoftmax, "SoftmaxFused.GradientsMatchFiniteDifferences", "softmax"}}),
      checked("LogSoftmax", {{kSoftmax, "SoftmaxFused.GradientsMatchFiniteDifferences", "log_softmax"}}),
      // ---- fused ops (fast/): derivatives from the reference composition ----
      checked("SoftmaxCrossEntropy", {{kLosses, "CrossEntropy.Gradients", "cross_entropy"}}),
      checked("SoftmaxCrossEntropyBackward", {{kLosses, "CrossEntropy.HigherOrderGradients", "cross_entropy"}}),
      checked("ScaledDotProductAttention", {{kAttention, "ScaledDotProductAttention.GradientsMatchFiniteDifferences", "scaled_dot_product_attention"}}),
      checked("ScaledDotProductAttentionBackward", {{kAttention, "ScaledDotProductAttention.BackwardGradientsMatchFiniteDifferences", "vjp"}}),
      checked("Gelu", {{kGelu, "GeluErf.GradientsMatchFiniteDifferences", "fast::gelu"}}),
      checked("GeluBackward", {{kGelu, "GeluErf.GradientsMatchFiniteDifferences", "vjp"}}),
      checked("LayerNorm", {{kLayerNorm, "LayerNormFused.GradientsMatchFiniteDifferences", "layer_norm"}}),
      checked("LayerNormBackward", {{kLayerNorm, "LayerNormFused.GradientsMatchFiniteDifferences", "vjp"}}),
      checked("RMSNorm", {{kRMSNorm, "RMSNormFused.GradientsMatchFiniteDifferences", "rms_norm"}}),
      checked("RMSNormBackward", {{kRMSNorm, "RMSNormFused.GradientsMatchFiniteDifferences", "vjp"}}),
      checked("FastSoftmax", {{kFastSoftmax, "FastSoftmax.GradientsMatchFiniteDifferences", "fast_fn"}}),
      checked("FastLogSoftmax", {{kFastSoftmax, "FastSoftmax.GradientsMatchFiniteDifferences", "fast_fn"}}),
      checked("SoftmaxBackward", {{kFastSoftmax, "FastSoftmax.GradientsMatchFiniteDifferences", "vjp"}}),
      checked("LogSoftmaxBackward", {{kFastSoftmax, "FastSoftmax.GradientsMatchFiniteDifferences", "vjp"}}),
      checked("AdamUpdate", {{kAdam, "AdamUpdate.GradientsMatchFiniteDifferences", "adam_update"}}),
      // ---- distributed (distributed/mpi.cpp) ----
      // With one process the collectives return their input and record no node, so their rules can
      // only run under mpirun: DistributedGrad.* launches this binary under `mpirun -np 2` and
      // compares each rule with finite differences of the loss summed over ranks.
      checked("all_sum", {{kCover, "DistributedGrad.CollectivesUnderMpirun", "distributed_worker"},
                          {kCover, "distributed_worker()", "dist::all_sum"}}),
      checked("all_mean", {{kCover, "DistributedGrad.CollectivesUnderMpirun", "distributed_worker"},
                           {kCover, "distributed_worker()", "dist::all_mean"}}),
      checked("all_max", {{kCover, "DistributedGrad.CollectivesUnderMpirun", "distributed_worker"},
                          {kCover, "distributed_worker()", "dist::all_max"}}),
      checked("all_min", {{kCover, "DistributedGrad.CollectivesUnderMpirun", "distributed_worker"},
                          {kCover, "distributed_worker()", "dist::all_min"}}),
      checked("all_gather", {{kCover, "DistributedGrad.CollectivesUnderMpirun", "distributed_worker"},
                          {kCover, "distributed_worker()", "dist::all_gather"}}),
      none("send", "communication side effect; the result is the input, passed on without a gradient"),
      none("recv", "data from another process: a constant to autograd"),
  };
  return r;
}

// ---------------------------------------------------------------------------------------------
// Reading the sources.

fs::path source_root() { return fs::weakly_canonical(fs::path(LOOM_TEST_DATA_DIR) / ".." / ".."); }

std::string read(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Blanks out comments (keeps string literals and line structure).
std::string strip_comments(const std::string& s) {
  std::string out = s;
  size_t i = 0;
  while (i < out.size()) {
    if (out[i] == '"' || out[i] == '\'') {
      char q = out[i++];
      while (i < out.size() && out[i] != q) i += out[i] == '\\' ? 2 : 1;
      ++i;
    } else if (out.compare(i, 2, "//") == 0) {
      while (i < out.size() && out[i] != '\n') out[i++] = ' ';
    } else if (out.compare(i, 2, "/*") == 0) {
      size_t e = out.find("*/", i + 2);
      e = e == std::string::npos ? out.size() : e + 2;
      for (; i < e; ++i) {
        if (out[i] != '\n') out[i] = ' ';
      }
    } else {
      ++i;
    }
  }
  return out;
}

// The text between the brace at or after `from` and its match (exclusive); npos-safe.
std::string braced(const std::string& s, size_t from, size_t* end = nullptr) {
  size_t open = s.find('{', from);
  if (open == std::string::npos) return "";
  int depth = 0;
  for (size_t i = open; i < s.size(); ++i) {
    if (s[i] == '"') {
      for (++i; i < s.size() && s[i] != '"'; i += s[i] == '\\' ? 2 : 1) {
      }
      continue;
    }
    if (s[i] == '{') ++depth;
    if (s[i] == '}' && --depth == 0) {
      if (end) *end = i;
      return s.substr(open + 1, i - open - 1);
    }
  }
  return s.substr(open + 1);
}

std::vector<std::string> literals(const std::string& s) {
  std::vector<std::string> out;
  static const std::regex lit("\"([^\"\\\\]*)\"");
  for (std::sregex_iterator it(s.begin(), s.end(), lit), e; it != e; ++it) out.push_back((*it)[1]);
  return out;
}

// The body of a member function `fn` inside a class body ("" when absent).
std::string member_body(const std::string& cls, const std::string& fn) {
  std::regex re("\\b" + fn + "\\s*\\([^)]*\\)\\s*const\\s*(override|final)?\\s*(override|final)?\\s*\\{");
  std::smatch m;
  if (!std::regex_search(cls, m, re)) return "";
  return braced(cls, m.position(0) + m.length(0) - 1);
}

// Names a helper function returns: its `case ...: return "x";` literals when it switches, else all
// of its literals. Looked up among the free functions of the same file.
std::vector<std::string> helper_literals(const std::string& file, const std::string& fn) {
  std::regex def("const\\s+char\\s*\\*\\s*" + fn + "\\s*\\([^)]*\\)\\s*\\{");
  std::smatch m;
  if (!std::regex_search(file, m, def)) return {};
  std::string body = braced(file, m.position(0) + m.length(0) - 1);
  if (body.find("case ") == std::string::npos) return literals(body);
  std::vector<std::string> out;
  std::istringstream lines(body);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("case ") == std::string::npos) continue;
    for (auto& l : literals(line)) out.push_back(l);
  }
  return out;
}

// Free function names called in a snippet (identifiers followed by '(' that a file defines as
// `const char* name(`).
std::vector<std::string> called_helpers(const std::string& snippet, const std::string& file) {
  std::vector<std::string> out;
  static const std::regex call("\\b([A-Za-z_]\\w*)\\s*\\(");
  for (std::sregex_iterator it(snippet.begin(), snippet.end(), call), e; it != e; ++it) {
    std::string f = (*it)[1];
    if (std::regex_search(file, std::regex("const\\s+char\\s*\\*\\s*" + f + "\\s*\\("))) out.push_back(f);
  }
  return out;
}

struct Found {
  std::string name;
  std::string where;                 // file and class
  bool declared_not_differentiable;  // `is_differentiable() const override { return false; }`
};

// Names of the elementwise op structs: `name = "X"` literals and macro-made ones.
std::vector<std::string> op_struct_names(const std::string& file) {
  std::vector<std::string> out;
  static const std::regex direct("\\bname\\s*=\\s*\"(\\w+)\"");
  for (std::sregex_iterator it(file.begin(), file.end(), direct), e; it != e; ++it) out.push_back((*it)[1]);
  // #define M(A, B, C) ... name = B ...  then every M(..., "X", ...) contributes X.
  static const std::regex def("#define\\s+(\\w+)\\(([^)]*)\\)");
  for (std::sregex_iterator it(file.begin(), file.end(), def), e; it != e; ++it) {
    std::string macro = (*it)[1];
    std::vector<std::string> params;
    std::stringstream ps((*it)[2].str());
    for (std::string p; std::getline(ps, p, ',');) {
      p.erase(0, p.find_first_not_of(" \t"));
      p.erase(p.find_last_not_of(" \t") + 1);
      params.push_back(p);
    }
    // The macro's body runs to the first line not ending in a backslash.
    size_t b = it->position(0) + it->length(0), e2 = b;
    while (e2 < file.size()) {
      size_t nl = file.find('\n', e2);
      if (nl == std::string::npos) nl = file.size();
      bool cont = nl > 0 && file.find_last_not_of(" \t\r", nl - 1) != std::string::npos &&
                  file[file.find_last_not_of(" \t\r", nl - 1)] == '\\';
      e2 = nl + 1;
      if (!cont) break;
    }
    std::string body = file.substr(b, e2 - b);
    std::smatch nm;
    if (!std::regex_search(body, nm, std::regex("\\bname\\s*=\\s*(\\w+)"))) continue;
    auto pos = std::find(params.begin(), params.end(), nm[1].str());
    if (pos == params.end()) continue;
    size_t k = pos - params.begin();
    std::regex use("\\b" + macro + "\\(([^\\n]*)\\)");
    for (std::sregex_iterator u(file.begin() + e2, file.end(), use), ue; u != ue; ++u) {
      auto lits = literals((*u)[1]);
      // The k-th argument: count the commas before the literal in the argument list.
      std::string args = (*u)[1];
      size_t depth = 0, idx = 0, start = 0;
      for (size_t c = 0; c <= args.size(); ++c) {
        if (c == args.size() || (args[c] == ',' && depth == 0)) {
          if (idx == k) {
            auto l = literals(args.substr(start, c - start));
            if (!l.empty()) out.push_back(l[0]);
          }
          ++idx;
          start = c + 1;
        } else if (args[c] == '(') {
          ++depth;
        } else if (args[c] == ')') {
          --depth;
        }
      }
    }
  }
  return out;
}

std::vector<Found> scan_primitives(const fs::path& root) {
  std::map<std::string, std::string> files;  // relative path -> comment-free text
  for (const char* dir : {"core", "ops", "fast", "distributed", "autograd", "optim", "nn"}) {
    for (auto& e : fs::recursive_directory_iterator(root / dir)) {
      auto ext = e.path().extension();
      if (ext == ".cpp" || ext == ".h") files[fs::relative(e.path(), root).string()] = strip_comments(read(e.path()));
    }
  }
  // Primitive classes, to a fixed point (a class deriving from a primitive class is one too).
  std::set<std::string> bases = {"Primitive", "UnaryPrimitive"};
  std::vector<Found> found;
  std::set<std::string> seen_classes;
  bool grew = true;
  while (grew) {
    grew = false;
    for (auto& [path, text] : files) {
      static const std::regex cls("\\b(class|struct)\\s+(\\w+)\\s*(final\\s*)?:\\s*public\\s+(loom::)?(\\w+)");
      for (std::sregex_iterator it(text.begin(), text.end(), cls), e; it != e; ++it) {
        std::string name = (*it)[2], base = (*it)[5];
        if (!bases.count(base) || seen_classes.count(path + ":" + name)) continue;
        seen_classes.insert(path + ":" + name);
        bases.insert(name);
        grew = true;
        if (name == "UnaryPrimitive") continue;  // the base itself
        std::string body = braced(text, it->position(0));
        // An abstract base (a pure virtual member) is never a node itself; its subclasses are.
        if (std::regex_search(body, std::regex("\\)\\s*(const\\s*)?(override\\s*)?=\\s*0\\s*;"))) continue;
        std::string where = path + ": class " + name;
        bool nodiff = std::regex_search(member_body(body, "is_differentiable"), std::regex("^\\s*return\\s+false\\s*;\\s*$"));
        std::string nb = member_body(body, "name");
        std::vector<std::string> names = literals(nb);
        for (auto& h : called_helpers(nb, text)) {
          for (auto& l : helper_literals(text, h)) names.push_back(l);
        }
        if (nb.find("Op::name") != std::string::npos) {
          // Elementwise template: the op structs live in the files that include this header.
          for (auto& [p2, t2] : files) {
            for (auto& n : op_struct_names(t2)) found.push_back({n, p2 + ": op struct for " + name, false});
          }
        }
        if (names.empty() && nb.find("Op::name") == std::string::npos) {
          found.push_back({"<no name() literal in " + name + ">", where, nodiff});
        }
        // Variants from print(): a braced list of literals, or helper functions it calls.
        std::string pb = member_body(body, "print");
        std::vector<std::string> variants;
        std::smatch list;
        if (std::regex_search(pb, list, std::regex("\\{([^{}]*)\\}"))) variants = literals(list[1]);
        for (auto& h : called_helpers(pb, text)) {
          for (auto& l : helper_literals(text, h)) variants.push_back(l);
        }
        for (auto& n : names) {
          found.push_back({n, where, nodiff});
          for (auto& v : variants) found.push_back({n + "(" + v + ")", where, nodiff});
        }
      }
    }
  }
  return found;
}

// The body of TEST(Suite, Name) (or of a function, for "name()") in a test file, or "" when absent.
std::string test_body(const std::string& file, const std::string& dotted) {
  if (dotted.size() > 2 && dotted.compare(dotted.size() - 2, 2, "()") == 0) {
    std::regex fn("\\b" + dotted.substr(0, dotted.size() - 2) + "\\s*\\([^;{)]*\\)\\s*\\{");
    std::smatch m;
    if (!std::regex_search(file, m, fn)) return "";
    return braced(file, m.position(0) + m.length(0) - 1);
  }
  auto dot = dotted.find('.');
  std::string suite = dotted.substr(0, dot), name = dotted.substr(dot + 1);
  std::regex re("TEST(_F)?\\(\\s*" + suite + "\\s*,\\s*" + name + "\\s*\\)");
  std::smatch m;
  if (!std::regex_search(file, m, re)) return "";
  return braced(file, m.position(0) + m.length(0));
}

}  // namespace

TEST(PrimitiveRegistry, ScannerFindsKnownPrimitives) {
  // The scan itself must work: a few names reached through each route.
  std::set<std::string> names;
  for (auto& f : scan_primitives(source_root())) names.insert(f.name);
  for (const char* n : {"Matmul",        // name() literal
                        "Sin", "Add",    // op structs of the elementwise templates
                        "GreaterEqual",  // op struct made by a macro
                        "RandomNormal",  // helper function with a switch
                        "all_max",       // helper function with ternaries
                        "PutAlongAxis",  // ternary in name()
                        "Reduce(prod)",  // print() helper variant
                        "Pooling(max_gather)", "CustomTransforms"}) {
    EXPECT_TRUE(names.count(n)) << n << " was not found by the source scan of " << source_root();
  }
  EXPECT_GT(names.size(), 90u);
}

TEST(PrimitiveRegistry, EveryPrimitiveHasAGradientCheckOrAReason) {
  fs::path root = source_root();
  auto found = scan_primitives(root);
  std::map<std::string, Entry> table;
  for (auto& e : registry()) {
    EXPECT_TRUE(table.emplace(e.name, e).second) << "duplicate registry entry " << e.name;
  }
  std::set<std::string> found_names;
  for (auto& f : found) {
    found_names.insert(f.name);
    auto it = table.find(f.name);
    if (it == table.end()) {
      ADD_FAILURE() << "primitive " << f.name << " (" << f.where
                    << ") has no entry in the gradient-check registry (tests/autograd/registry_test.cpp): "
                       "add finite-difference checks of its vjp and jvp, or say why it has no gradient";
      continue;
    }
    if (f.declared_not_differentiable) {
      EXPECT_NE(it->second.no_gradient, nullptr)
          << f.name << " says is_differentiable() == false but the registry lists gradient checks for it";
    }
  }
  for (auto& [name, e] : table) {
    EXPECT_TRUE(found_names.count(name)) << "registry entry " << name << " matches no primitive in the sources";
    if (e.no_gradient) {
      EXPECT_TRUE(e.checks.empty()) << name;
      EXPECT_GT(std::string(e.no_gradient).size(), 10u) << name << " needs a reason";
      continue;
    }
    EXPECT_FALSE(e.checks.empty()) << name;
    for (const Ref& r : e.checks) {
      fs::path p = root / r.file;
      ASSERT_TRUE(fs::exists(p)) << name << ": " << r.file << " does not exist";
      std::string body = test_body(strip_comments(read(p)), r.test);
      EXPECT_FALSE(body.empty()) << name << ": " << r.file << " has no TEST " << r.test;
      // check_grads, a test's check(...) / expect_grads(...) wrapper around it, or a hand-written
      // central difference.
      bool calls_checker = body.find("check_grads") != std::string::npos || body.find("check(") != std::string::npos ||
                           body.find("expect_grads(") != std::string::npos ||
                           body.find("(2 * eps)") != std::string::npos || body.find("distributed_worker()") != std::string::npos;
      EXPECT_TRUE(calls_checker) << name << ": " << r.test << " does not call a finite-difference checker";
      EXPECT_NE(body.find(r.token), std::string::npos) << name << ": " << r.test << " does not mention " << r.token;
    }
  }
}
