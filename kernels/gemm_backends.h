// The seam's backends (internal to kernels/): each runs one share of a product on the calling thread,
// single-threaded; kernels/gemm.cpp splits products and picks the backend.
#pragma once

#include <sstream>
#include <string>

#include "loom/kernels/gemm.h"

namespace loom::kernels {

// An error message from its parts (ops/utils.h's msg, which this layer does not see).
template <typename... Parts>
std::string kmsg(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}

}  // namespace loom::kernels

namespace loom::kernels::backends {

// OpenBLAS (kernels/gemm_openblas.cpp): in == out, in float32, float64 or complex64.
void openblas_gemm(const Gemm& g);
// The name of the kernels OpenBLAS picked for this CPU ("Haswell", "SkylakeX", "Zen").
std::string openblas_core();

// oneDNN (kernels/gemm_dnnl.cpp): in float32 with out float32, or in bfloat16 / float16 with out
// the same or float32, where dnnl_supports says so. Primitives are made single-threaded and kept
// per shape, layout, dtypes and scalars. False, having done nothing, where oneDNN declines this
// layout of a supported pair (remembered: it is not asked again).
bool dnnl_gemm(const Gemm& g);
// Whether oneDNN makes a primitive for this pair on this CPU (probed once per pair).
bool dnnl_supports(Dtype in, Dtype out);
// The implementation oneDNN picks for a 256^3 product of the pair ("brg:avx512_core_amx_bf16").
std::string dnnl_impl(Dtype in, Dtype out);
detail::DnnlCacheStats dnnl_stats();

}  // namespace loom::kernels::backends
