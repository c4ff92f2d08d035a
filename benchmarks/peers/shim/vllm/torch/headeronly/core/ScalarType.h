/* memra bench shim: see memra_torch_stable_shim.h */
#pragma once
#include "../../../memra_torch_stable_shim.h"
