// The one list of Loom's primitives, for the tests: every primitive (and every variant a primitive's
// print() names, as "Reduce(sum)") with the tests that check its vjp and jvp against finite
// differences, or the reason it has none.
//
// Every test binary checks each node it makes against this list (test_utils.h installs the hook,
// detail::set_primitive_hook): a primitive that is not here fails the test that made it, and a
// primitive that says it is not differentiable must be listed without checks. registry_test.cpp
// checks the other direction: each listed check exists, calls a finite-difference checker and
// mentions the op.
#pragma once

#include <gtest/gtest.h>

#include <set>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "loom/core/primitive.h"
#include "loom/loom.h"

namespace loom::testing {

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

inline const char* kPrim = "tests/autograd/primitives_grad_test.cpp";
inline const char* kCover = "tests/autograd/coverage_grad_test.cpp";
inline const char* kCustom = "tests/autograd/custom_test.cpp";
inline const char* kConv = "tests/conv/grad_test.cpp";
inline const char* kIndex = "tests/indexing/grad_test.cpp";
inline const char* kRandom = "tests/random/random_grad_test.cpp";
inline const char* kLosses = "tests/nn/losses_test.cpp";
inline const char* kAttention = "tests/fast/attention_test.cpp";
inline const char* kGelu = "tests/fast/gelu_test.cpp";
inline const char* kLayerNorm = "tests/fast/layer_norm_test.cpp";
inline const char* kRMSNorm = "tests/fast/rms_norm_test.cpp";
inline const char* kFastSoftmax = "tests/fast/softmax_test.cpp";
inline const char* kAdam = "tests/fast/adam_update_test.cpp";
inline const char* kSoftmax = "tests/ops/softmax_test.cpp";
inline const char* kScan = "tests/ops/scan_test.cpp";
inline const char* kQuant = "tests/ops/quantized_test.cpp";

inline Entry checked(const char* name, std::vector<Ref> refs) { return {name, std::move(refs), nullptr}; }
inline Entry none(const char* name, const char* why) { return {name, {}, why}; }

inline std::vector<Entry> registry() {
  const char* predicate = "boolean result: no gradient flows through it";
  const char* indices = "integer indices: no gradient flows through it";
  const char* bits = "integer bit operation: no gradient flows through it";
  const char* sample = "random sample: a constant to autograd (RandomGrad.SamplesAreConstantsToAutograd)";
  std::vector<Entry> r = {
      // ---- elementwise unary (ops/elementwise.cpp) ----
      checked("Negative", {{kPrim, "GradCheck.Unary", "negative"}, {kCover, "CoverageGrad.UnaryOnViews", "negative"}}),
      checked("Abs", {{kPrim, "GradCheck.Unary", "abs"}, {kCover, "CoverageGrad.UnaryOnViews", "abs"}}),
      checked("Sign", {{kPrim, "GradCheck.Unary", "sign"}}),
      checked("ComplexAbs", {{"tests/ops/complex_test.cpp", "Complex.GradsMatchFiniteDifferences", "abs("}}),
      checked("Real", {{"tests/ops/complex_test.cpp", "Complex.GradsMatchFiniteDifferences", "real("}}),
      checked("Imag", {{"tests/ops/complex_test.cpp", "Complex.GradsMatchFiniteDifferences", "imag("}}),
      checked("Conjugate", {{"tests/ops/complex_test.cpp", "Complex.GradsMatchFiniteDifferences", "conjugate("}}),
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
      checked("ArcSin", {{kPrim, "GradCheck.Unary", "arcsin"}, {kCover, "CoverageGrad.UnaryOnViews", "arcsin"}}),
      checked("ArcCos", {{kPrim, "GradCheck.Unary", "arccos"}, {kCover, "CoverageGrad.UnaryOnViews", "arccos"}}),
      checked("ArcTan", {{kPrim, "GradCheck.Unary", "arctan"}, {kCover, "CoverageGrad.UnaryOnViews", "arctan"}}),
      checked("Sinh", {{kPrim, "GradCheck.Unary", "sinh"}, {kCover, "CoverageGrad.UnaryOnViews", "sinh"}}),
      checked("Cosh", {{kPrim, "GradCheck.Unary", "cosh"}, {kCover, "CoverageGrad.UnaryOnViews", "cosh"}}),
      checked("ArcSinh", {{kPrim, "GradCheck.Unary", "arcsinh"}, {kCover, "CoverageGrad.UnaryOnViews", "arcsinh"}}),
      checked("ArcTanh", {{kPrim, "GradCheck.Unary", "arctanh"}, {kCover, "CoverageGrad.UnaryOnViews", "arctanh"}}),
      checked("ArcCosh", {{kPrim, "GradCheck.Unary", "arccosh"}}),
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
      checked("LogAddExp", {{kPrim, "GradCheck.BinaryWithBroadcasting", "logaddexp"}, {kCover, "CoverageGrad.BinaryBroadcastAndViews", "logaddexp"}}),
      none("Equal", predicate),
      none("NotEqual", predicate),
      none("Less", predicate),
      none("LessEqual", predicate),
      none("Greater", predicate),
      none("GreaterEqual", predicate),
      none("LogicalAnd", predicate),
      none("LogicalOr", predicate),
      none("BitwiseAnd", bits), none("BitwiseOr", bits), none("BitwiseXor", bits), none("LeftShift", bits),
      none("RightShift", bits), none("BitwiseInvert", bits),
      checked("Select", {{kPrim, "GradCheck.WhereAndClip", "where"}, {kCover, "CoverageGrad.WhereBroadcastsAllThree", "where"}}),
      // ---- creation (ops/creation.cpp) ----
      checked("Full", {{kCover, "CoverageGrad.CreationAndCopies", "full"}}),
      none("Arange", "no array inputs: a constant"),
      checked("AsType", {{kCover, "CoverageGrad.CreationAndCopies", "astype"}}),
      checked("CastOfValue", {{"tests/ops/autocast_test.cpp", "Autocast.CastsAnEvaluatedArrayOncePerValue", "Autocast"}}),
      checked("Copy", {{kCover, "CoverageGrad.CreationAndCopies", "copy"}}),
      checked("Contiguous", {{kCover, "CoverageGrad.CreationAndCopies", "contiguous"}}),
      none("StopGradient",
           "zero derivative by definition, so finite differences disagree on purpose (Grad.StopGradientBlocks)"),
      // ---- reductions and scans (ops/reduce.cpp) ----
      checked("Reduce(sum)", {{kPrim, "GradCheck.Reductions", "sum"}, {kCover, "CoverageGrad.ReductionsOnViews", "sum"}}),
      checked("Reduce(prod)", {{kPrim, "GradCheck.Reductions", "prod"}, {kCover, "CoverageGrad.ReductionsOnViews", "prod"}}),
      checked("Reduce(max)", {{kPrim, "GradCheck.Reductions", "max"}, {kCover, "CoverageGrad.ReductionsOnViews", "max"}}),
      checked("Reduce(min)", {{kPrim, "GradCheck.Reductions", "min"}, {kCover, "CoverageGrad.ReductionsOnViews", "min"}}),
      none("Reduce(all)", predicate),
      none("Reduce(any)", predicate),
      checked("CumSum", {{kPrim, "GradCheck.Reductions", "cumsum"}, {kCover, "CoverageGrad.ReductionsOnViews", "cumsum"}}),
      checked("CumProd", {{kCover, "CoverageGrad.SecondOrderOfProdGoesThroughCumProd", "prod"}, {kScan, "ScanGrad.CumProd", "cumprod"}}),
      checked("CumMax", {{kScan, "ScanGrad.CumMaxCumMin", "cummax"}}),
      checked("CumMin", {{kScan, "ScanGrad.CumMaxCumMin", "cummin"}}),
      checked("LogCumSumExp", {{kScan, "ScanGrad.LogCumSumExp", "logcumsumexp"}}),
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
      checked("Convolution(forward)", {{kConv, "ConvGrad.Conv2dInputAndWeight", "conv2d"}, {kConv, "ConvGrad.Conv1dAndGeneral", "conv_general"}}),
      checked("Convolution(input_grad)", {{kConv, "ConvGrad.SecondOrder", "grad"}}),
      checked("Convolution(weight_grad)", {{kConv, "ConvGrad.SecondOrder", "grad"}}),
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
      checked("ScatterAddTake", {{kIndex, "IndexingGrad.ScatterAddTake", "scatter_add_take"}}),
      checked("Gather", {{kIndex, "IndexingGrad.Gather", "gather"}}),
      checked("Scatter", {{kIndex, "IndexingGrad.Scatter", "scatter"}, {kIndex, "IndexingGrad.DynamicSliceUpdate", "slice_update"}}),
      checked("ScatterAdd", {{kIndex, "IndexingGrad.ScatterAdd", "scatter_add"}, {kIndex, "IndexingGrad.Gather", "gather"}}),
      none("ScatterProd", "MLX has no derivative for scatter_prod; its vjp and jvp throw std::runtime_error "
                          "(IndexingGrad.ScatterProdHasNoGradientAsInMlx)"),
      checked("ScatterMax", {{kIndex, "IndexingGrad.ScatterMaxMin", "scatter_max"}}),
      checked("ScatterMin", {{kIndex, "IndexingGrad.ScatterMaxMin", "scatter_min"}}),
      checked("MaskedScatter", {{kIndex, "IndexingGrad.MaskedScatter", "masked_scatter"}}),
      checked("AsStrided", {{kIndex, "IndexingGrad.AsStrided", "as_strided"}}),
      checked("SliceUpdateAdd", {{kIndex, "IndexingGrad.SliceUpdateReduce", "slice_update_add"}}),
      checked("SliceUpdateProd", {{kIndex, "IndexingGrad.SliceUpdateReduce", "slice_update_prod"}}),
      checked("SliceUpdateMax", {{kIndex, "IndexingGrad.SliceUpdateReduce", "slice_update_max"}}),
      checked("SliceUpdateMin", {{kIndex, "IndexingGrad.SliceUpdateReduce", "slice_update_min"}}),
      checked("Sort", {{kIndex, "IndexingGrad.SortTopKPartition", "sort"}}),
      checked("TopK", {{kIndex, "IndexingGrad.SortTopKPartition", "topk"}}),
      none("ArgSort", indices),
      none("ArgTopK", indices),
      none("ArgPartition", indices),
      none("SearchSorted", indices),
      // ---- random (ops/random.cpp) ----
      none("RandomBits", sample),
      none("RandomUniform", sample),
      none("RandomNormal", sample),
      none("RandomTruncatedNormal", sample),
      none("RandomInt", sample),
      none("RandomBernoulli", sample),
      none("RandomGumbel", sample),
      none("RandomLaplace", sample),
      none("RandomCategorical", sample),
      none("RandomPermutation", sample),
      checked("PermuteAxis", {{kRandom, "RandomGrad.PermutationOfArrayMatchesFiniteDifferences", "permutation"}}),
      checked("PermuteAxisInverse", {{kCover, "CoverageGrad.PermutationSecondOrderGoesThroughTheInverse", "permutation"}}),
      // ---- transforms (autograd/custom.cpp, autograd/vmap.cpp) ----
      checked("CustomTransforms", {{kCustom, "CustomFunction.VjpAndJvpRulesMatchFiniteDifferences", "softplus_fn"},
                                   {kCustom, "CustomFunction.MultipleOutputsAndSecondOrder", "custom_function"},
                                   {kCustom, "Checkpoint.SameValuesAndGradients", "checkpoint"}}),
      none("VmapInput", "vmap's placeholder for a batched input: never evaluated, never differentiated"),
      none("CompileInput", "compile's placeholder for an input: never evaluated, never differentiated"),
      none("Compiled", "compile's node: built only outside transforms (a compiled function called while one "
                       "traces calls the function itself), so never differentiated"),
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
      checked("sum_scatter", {{kCover, "DistributedGrad.CollectivesUnderMpirun", "distributed_worker"},
                              {kCover, "distributed_worker()", "dist::sum_scatter"}}),
      checked("all_to_all", {{kCover, "DistributedGrad.CollectivesUnderMpirun", "distributed_worker"},
                             {kCover, "distributed_worker()", "dist::all_to_all"}}),
      checked("broadcast", {{kCover, "DistributedGrad.CollectivesUnderMpirun", "distributed_worker"},
                            {kCover, "distributed_worker()", "dist::broadcast"}}),
      none("barrier", "synchronization only: it carries no data"),
      none("send", "communication side effect; the result is the input, passed on without a gradient"),
      none("recv", "data from another process: a constant to autograd"),
      none("send_recv", "a send and a recv at once: the received data is a constant to autograd"),
      none("agree", "a check that every rank passed the same description: it carries no data"),
      // ---- hadamard_transform and view (ops/hadamard.cpp, ops/view.cpp) ----
      checked("Hadamard", {{"tests/ops/hadamard_test.cpp", "Hadamard.GradientsMatchFiniteDifferences", "hadamard_transform"}}),
      none("View", "reinterprets bits as another dtype: no derivative (vjp and jvp throw, as MLX's View has none)"),
      // ---- fft (ops/fft.cpp): one primitive, four kinds ----
      checked("FFT(fft)", {{"tests/ops/fft_test.cpp", "FFT.GradientsMatchFiniteDifferences", "fft::fft("}}),
      checked("FFT(ifft)", {{"tests/ops/fft_test.cpp", "FFT.GradientsMatchFiniteDifferences", "fft::ifft("}}),
      checked("FFT(rfft)", {{"tests/ops/fft_test.cpp", "FFT.GradientsMatchFiniteDifferences", "fft::rfft("}}),
      checked("FFT(irfft)", {{"tests/ops/fft_test.cpp", "FFT.GradientsMatchFiniteDifferences", "fft::irfft("}}),
      // ---- quantization (ops/quantized.cpp) ----
      none("Quantize", "rounded integer codes and the ranges they came from: constants to autograd (as the codes are)"),
      checked("Dequantize", {{kQuant, "Dequantize.GradientsMatchFiniteDifferences", "dequantize"}}),
      checked("QuantizedMatmul", {{kQuant, "QuantizedMatmul.GradientsMatchFiniteDifferences", "quantized_matmul"}}),
      checked("GatherQMM", {{kQuant, "GatherQmm.GradientsMatchFiniteDifferences", "gather_qmm"}}),
      // ---- linalg (ops/lapack.cpp) ----
      checked("SVD(uv)", {{"tests/ops/linalg_lapack_test.cpp", "LinalgGrad.QrAndSvd", "linalg::svd"}}),
      checked("SVD(values)", {{"tests/ops/linalg_lapack_test.cpp", "LinalgGrad.QrAndSvd", "linalg::svd"}}),
      checked("QRF", {{"tests/ops/linalg_lapack_test.cpp", "LinalgGrad.QrAndSvd", "linalg::qr"}}),
      checked("Inverse(general)", {{"tests/ops/linalg_lapack_test.cpp", "LinalgGrad.InvSolveAndTriangles", "linalg::inv"}}),
      checked("Inverse(lower)", {{"tests/ops/linalg_lapack_test.cpp", "LinalgGrad.InvSolveAndTriangles", "linalg::tri_inv"}}),
      checked("Inverse(upper)", {{"tests/ops/linalg_lapack_test.cpp", "LinalgGrad.InvSolveAndTriangles", "linalg::tri_inv"}}),
      checked("Solve", {{"tests/ops/linalg_lapack_test.cpp", "LinalgGrad.InvSolveAndTriangles", "linalg::solve"}}),
      checked("SolveTriangular(lower)", {{"tests/ops/linalg_lapack_test.cpp", "LinalgGrad.InvSolveAndTriangles", "linalg::solve_triangular"}}),
      checked("SolveTriangular(upper)", {{"tests/ops/linalg_lapack_test.cpp", "LinalgGrad.InvSolveAndTriangles", "linalg::solve_triangular"}}),
      checked("Slogdet(slogdet)", {{"tests/ops/linalg_lapack_test.cpp", "LinalgGrad.InvSolveAndTriangles", "linalg::slogdet"}}),
      checked("Slogdet(det)", {{"tests/ops/linalg_lapack_test.cpp", "LinalgGrad.InvSolveAndTriangles", "linalg::det"}}),
      checked("Cholesky(lower)", {{"tests/ops/linalg_lapack_test.cpp", "LinalgGrad.CholeskyAndEighReadOneTriangle", "linalg::cholesky"}}),
      checked("Cholesky(upper)", {{"tests/ops/linalg_lapack_test.cpp", "LinalgGrad.CholeskyAndEighReadOneTriangle", "linalg::cholesky"}}),
      checked("Eigh(L)", {{"tests/ops/linalg_lapack_test.cpp", "LinalgGrad.CholeskyAndEighReadOneTriangle", "linalg::eigh"}, {"tests/ops/linalg_lapack_test.cpp", "LinalgGrad.CholeskyAndEighReadOneTriangle", "linalg::eigvalsh"}}),
      checked("Eigh(U)", {{"tests/ops/linalg_lapack_test.cpp", "LinalgGrad.CholeskyAndEighReadOneTriangle", "linalg::eigh"}, {"tests/ops/linalg_lapack_test.cpp", "LinalgGrad.CholeskyAndEighReadOneTriangle", "linalg::eigvalsh"}}),
      none("LUF", "no derivative, as MLX's LUF (a vjp or jvp through lu or lu_factor throws)"),
      none("Eig(values)", "no derivative, as MLX's Eig (a vjp or jvp through eig or eigvals throws: LinalgGrad.QrAndSvd)"),
      none("Eig(vectors)", "no derivative, as MLX's Eig (a vjp or jvp through eig or eigvals throws)"),
      none("ToFP8", "uint8 codes out: no gradient (MLX's ConvertFP8 has no vjp/jvp either)"),
      none("FromFP8", "uint8 codes in: no gradient (MLX's ConvertFP8 has no vjp/jvp either)"),
      // ---- the tests' own primitives ----
      none("NoDerivative", "a test's primitive (tests/autograd/transforms_test.cpp) whose rules throw"),
      none("OwnBuffer", "a test's primitive (tests/core/placement_test.cpp) for the buffer plan"),
      none("IgnoresDonor", "a test's primitive (tests/core/placement_test.cpp) for the buffer plan check"),
      none("Step", "a test's primitive (tests/core/schedule_test.cpp) for the schedule"),
      none("FakeComm", "a test's primitive (tests/core/schedule_test.cpp) for the schedule"),
      none("StreamTestGate", "a test's primitive (tests/core/stream_test.cpp) that blocks until the test opens it"),
  };
  return r;
}


/// The hook every test binary installs: each node's primitive must be listed, by name() or, for a
/// primitive with variants (an entry "Name(variant)"), by what print() writes.
inline void check_registered(const Primitive& p) {
  struct Index {
    std::unordered_map<std::string, bool> differentiable;  // listed name -> has gradient checks
    std::set<std::string> with_variants;                   // names listed as "Name(...)"
  };
  static Index* index = [] {
    auto* ix = new Index;
    for (const Entry& e : registry()) {
      ix->differentiable[e.name] = e.no_gradient == nullptr;
      std::string n = e.name;
      if (auto paren = n.find('('); paren != std::string::npos) ix->with_variants.insert(n.substr(0, paren));
    }
    return ix;
  }();
  std::string name = p.name();
  if (index->with_variants.count(name)) {
    // The variant is the first word print() puts in parentheses: "Convolution(forward, groups=1)"
    // is listed as "Convolution(forward)".
    std::ostringstream os;
    p.print(os);
    const std::string printed = os.str();
    const size_t open = printed.find('('), close = printed.find_first_of(",)", open);
    if (open != std::string::npos && close != std::string::npos) name = printed.substr(0, close) + ")";
  }
  auto it = index->differentiable.find(name);
  std::string problem;
  if (it == index->differentiable.end()) {
    problem = "primitive " + name + " is not in tests/registry.h: add the tests that check its vjp and jvp " +
              "with finite differences, or the reason it has none";
  } else if (!p.is_differentiable() && it->second) {
    problem = "primitive " + name + " says is_differentiable() == false, but tests/registry.h lists gradient checks";
  }
  if (!problem.empty()) ADD_FAILURE() << problem;  // fails the test that made the node
}

}  // namespace loom::testing
