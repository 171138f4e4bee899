#include "loom/nn/dropout.h"

#include <stdexcept>

#include "loom/ops/ops.h"
#include "loom/ops/random.h"
#include "loom/ops/utils.h"

namespace loom::nn {

using loom::detail::msg;
using loom::detail::shape_str;

namespace {

double checked_p(const char* layer, double p) {
  if (!(p >= 0 && p < 1)) {
    throw std::invalid_argument(msg("[nn::", layer, "] the drop probability p must be in [0, 1), got ", p));
  }
  return p;
}

// x where a bernoulli(1 - p) mask of `mask_shape` (broadcast to x) is true, scaled by 1 / (1 - p); 0 elsewhere.
array drop(const array& x, double p, const Shape& mask_shape) {
  array keep = random::bernoulli(1.0 - p, mask_shape);
  return where(keep, x * (1.0 / (1.0 - p)), array(0, x.dtype()));
}

void check_channel_input(const char* layer, const array& x, size_t spatial, const char* layouts) {
  if (x.ndim() != spatial + 1 && x.ndim() != spatial + 2) {
    throw std::invalid_argument(msg("[nn::", layer, "] expected input ", layouts, ", got shape ",
                                    shape_str(x.shape())));
  }
}

// Channel dropout: the mask is 1 over the `spatial` axes before the last one.
array drop_channels(const array& x, double p, size_t spatial) {
  Shape mask_shape = x.shape();
  for (size_t i = 0; i < spatial; ++i) mask_shape[mask_shape.size() - 2 - i] = 1;
  return drop(x, p, mask_shape);
}

}  // namespace

Dropout::Dropout(double p) : p(checked_p("Dropout", p)) {}

array Dropout::operator()(const array& x) const {
  if (!training() || p == 0) return x;
  return drop(x, p, x.shape());
}

Dropout2d::Dropout2d(double p) : p(checked_p("Dropout2d", p)) {}

array Dropout2d::operator()(const array& x) const {
  check_channel_input("Dropout2d", x, 2, "(N, H, W, C) or (H, W, C)");
  if (!training() || p == 0) return x;
  return drop_channels(x, p, 2);
}

Dropout3d::Dropout3d(double p) : p(checked_p("Dropout3d", p)) {}

array Dropout3d::operator()(const array& x) const {
  check_channel_input("Dropout3d", x, 3, "(N, D, H, W, C) or (D, H, W, C)");
  if (!training() || p == 0) return x;
  return drop_channels(x, p, 3);
}

}  // namespace loom::nn
