// The OpenBLAS backend of the GEMM seam (kernels/gemm.h): one single-threaded cblas call per share.
#include <cblas.h>

#include "loom/kernels/gemm_backends.h"

extern "C" char* openblas_get_corename(void);

namespace loom::kernels::backends {

void openblas_gemm(const Gemm& g) {
  const CBLAS_TRANSPOSE opa = g.ta ? CblasTrans : CblasNoTrans, opb = g.tb ? CblasTrans : CblasNoTrans;
  const int M = int(g.M), N = int(g.N), K = int(g.K), lda = int(g.lda), ldb = int(g.ldb), ldc = int(g.ldc);
  if (g.in == float32) {
    cblas_sgemm(CblasRowMajor, opa, opb, M, N, K, float(g.alpha), static_cast<const float*>(g.A), lda,
                static_cast<const float*>(g.B), ldb, float(g.beta), static_cast<float*>(g.C), ldc);
  } else if (g.in == float64) {
    cblas_dgemm(CblasRowMajor, opa, opb, M, N, K, g.alpha, static_cast<const double*>(g.A), lda,
                static_cast<const double*>(g.B), ldb, g.beta, static_cast<double*>(g.C), ldc);
  } else {  // complex64: std::complex<float>'s layout
    const float alpha[2] = {float(g.alpha), 0.0f}, beta[2] = {float(g.beta), 0.0f};
    cblas_cgemm(CblasRowMajor, opa, opb, M, N, K, alpha, g.A, lda, g.B, ldb, beta, g.C, ldc);
  }
}

std::string openblas_core() {
  const char* c = openblas_get_corename();
  return c ? c : "unknown";
}

}  // namespace loom::kernels::backends
