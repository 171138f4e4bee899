// Which library runs the matrix products of each dtype (public): the GEMM seam's backends.
#pragma once

#include <string>

#include "loom/core/dtype.h"

namespace loom {

/// OpenBLAS (float32, float64, complex64; half inputs converted to float32 around its sgemm) or
/// oneDNN (bfloat16 and float16 on the CPU's bf16 / fp16 / AMX instructions; float32 when forced).
enum class GemmBackend { openblas, dnnl };
const char* to_string(GemmBackend b);

/// The backend that runs products of `dtype` in this process. Chosen once, at the first product, by
/// the CPU it runs on: bfloat16 and float16 go to oneDNN where oneDNN has kernels for them on this
/// CPU (AVX512-BF16, AMX, AVX512-FP16), everything else to OpenBLAS. LOOM_GEMM=openblas keeps every
/// dtype on OpenBLAS; LOOM_GEMM=dnnl sends float32 (and half, whatever the CPU) to oneDNN too, so
/// that oneDNN's path is exercised on any x86-64 CPU. Another value of LOOM_GEMM is refused.
GemmBackend gemm_backend(Dtype dtype);

/// One line per floating dtype: its backend and what that backend runs it on, e.g.
/// "bfloat16: dnnl (brg:avx512_core_amx_bf16)" or "bfloat16: openblas (float32 Zen kernels after a
/// conversion; oneDNN has no bfloat16 kernel for this CPU)". print_config() prints it.
std::string gemm_config();

}  // namespace loom
