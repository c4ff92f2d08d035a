/* memra bench shim: see memra_sgl_shim.h */
#pragma once
#include "../../../memra_sgl_shim.h"
