// MLX source compatibility. A program written for MLX's C++ API includes this header in place of
// "mlx/mlx.h" and compiles unchanged: `mlx::core` (usually spelled `namespace mx = mlx::core;`)
// names Loom's namespace. docs/coming-from-mlx.md lists where Loom deliberately behaves otherwise.
#pragma once

#include "loom/loom.h"

namespace mlx {
namespace core = ::loom;
}  // namespace mlx
