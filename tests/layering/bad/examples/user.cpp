#include <loom/ops/kernels/k.h>
