#pragma once
#include "loom/io/detail.h"
