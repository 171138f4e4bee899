#include <cstring>

#include "loom/core/eval.h"
#include "loom/ops/kernels/elementwise.h"

namespace loom::kernels {

void copy_strided(const array& src, void* dst, Dtype dst_dtype, const Strides& dst_strides) {
  if (src.size() == 0) return;
  Shape shape = src.shape();
  std::array<Strides, 2> st{src.strides(), dst_strides};
  collapse(shape, st);
  LOOM_DISPATCH_ALL(src.dtype(), In, {
    const In* x = ptr<In>(src);
    LOOM_DISPATCH_ALL(dst_dtype, Out, {
      Out* y = static_cast<Out*>(dst);
      for_each_row<2>(shape, st, [&](const std::array<int64_t, 2>& o, int n, const std::array<int64_t, 2>& s) {
        const In* xp = x + o[0];
        Out* yp = y + o[1];
        if constexpr (std::is_same_v<In, Out>) {
          if (s[0] == 1 && s[1] == 1) {
            std::memcpy(static_cast<void*>(yp), static_cast<const void*>(xp), sizeof(In) * n);
            return;
          }
        }
        for (int i = 0; i < n; ++i) yp[i * s[1]] = cast_value<Out>(xp[i * s[0]]);
      });
    });
  });
}

array row_contiguous(const array& src) {
  if (src.flags().row_contiguous) return src;
  array out(allocator::malloc(src.nbytes()), src.shape(), src.dtype());
  copy_strided(src, out.raw_data(), out.dtype(), out.strides());
  return out;
}

}  // namespace loom::kernels
