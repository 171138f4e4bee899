// Loom: lazy arrays, autograd, nn, optimizers and data-parallel training over MPI.
#pragma once

#include "loom/core/allocator.h"
#include "loom/core/array.h"
#include "loom/core/dtype.h"
#include "loom/core/eval.h"
#include "loom/core/threads.h"
#include "loom/ops/ops.h"
#include "loom/autograd/check.h"
#include "loom/autograd/transforms.h"
#include "loom/distributed/distributed.h"
#include "loom/io/io.h"
#include "loom/ops/random.h"
#include "loom/ops/indexing.h"
#include "loom/ops/conv.h"
