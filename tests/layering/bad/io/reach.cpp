// io reaching into ops' kernels.
#include "loom/ops/kernels/k.h"
