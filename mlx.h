// MLX source compatibility. A program written for MLX's C++ API includes this header in place of
// "mlx/mlx.h" and compiles unchanged: `mlx::core` (usually spelled `namespace mx = mlx::core;`)
// names Loom's namespace. docs/coming-from-mlx.md lists where Loom deliberately behaves otherwise.
#pragma once

#include "loom/loom.h"
#include "loom/core/primitive.h"  // MLX programs include mlx/primitives.h for Primitive

// Standard headers MLX's mlx.h brings in (through its scheduler): programs written for MLX use
// std::thread, std::mutex and std::promise without including them.
#include <future>
#include <mutex>
#include <thread>

namespace mlx {
namespace core = ::loom;
}  // namespace mlx
