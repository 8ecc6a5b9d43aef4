// simd_generic.cpp - the portable table: GCC/Clang vector extensions, no
// instruction-set flags, compiles for any target.
#define TG_SIMD_GENERIC 1
#define TG_SIMD_NAME "generic"
#define TG_SIMD_FN tg_simd_generic
#include "simd_impl.h"
