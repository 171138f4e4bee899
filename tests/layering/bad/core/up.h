// A core header that reaches up into nn.
#pragma once
#include "loom/nn/module.h"
