// Which instruction set the loaded copy of the library was compiled for.
#pragma once

namespace loom {

/// The instruction set the loaded copy of Loom was compiled for. A default build on x86-64 ships
/// three copies, and the dynamic loader (glibc 2.33 or later) loads the best one the CPU runs:
/// "x86-64-v4" (AVX-512), "x86-64-v3" (AVX2 and FMA) or "x86-64" (the baseline, also what older
/// loaders and static links get). "native" for a build with LOOM_NATIVE=ON (the build machine's
/// CPU only); the target architecture's name elsewhere ("aarch64", ...).
const char* kernel_isa();

}  // namespace loom
