// ops.h - declarations of every op's kernels, named by level:
//   tg_cpu_<op>   (ggml_ops/<family>.cpp)  CPU reference kernel, rows split over threads
//   tg_check_<op> (ggml_ops/<family>.cpp)  host-side input check before any write
//   tg_cuda_<op>  (cuda/<family>.cu)       CUDA backend entry (launches on the backend's stream)
#pragma once
#include "internal.h"

#define TG_DECL_OP(op)                                          \
    void tg_cpu_##op(const tg_tensor *dst, int ith, int nth);   \
    tg_status tg_cuda_##op(tg_backend *be, const tg_tensor *dst);

TG_DECL_OP(noop)
TG_DECL_OP(cont)
TG_DECL_OP(cpy)
TG_DECL_OP(get_rows)
TG_DECL_OP(add)
TG_DECL_OP(mul)
TG_DECL_OP(scale)
TG_DECL_OP(rms_norm)
TG_DECL_OP(l2_norm)
TG_DECL_OP(silu)
TG_DECL_OP(sigmoid)
TG_DECL_OP(softplus)
TG_DECL_OP(swiglu)
TG_DECL_OP(mul_mat)
TG_DECL_OP(softmax)
TG_DECL_OP(attention)
TG_DECL_OP(rope)
TG_DECL_OP(rope_kv_update)
TG_DECL_OP(delta_rule)

#undef TG_DECL_OP

// delta_rule's chunked form on the CPU (ggml_ops/delta_rule_chunked.cpp; algo CHUNKED).
void tg_cpu_delta_rule_chunked(const tg_tensor *dst, int ith, int nth);

tg_status tg_check_get_rows(const tg_tensor *dst);
tg_status tg_check_rope_kv_update(const tg_tensor *dst);
// their device-side forms (cuda/copy.cu, cuda/rope.cu): fill the error record
tg_status tg_cuda_check_get_rows(tg_backend *be, const tg_tensor *dst);
tg_status tg_cuda_check_rope_kv_update(tg_backend *be, const tg_tensor *dst);

// Whether a and b may share bytes: same storage root and overlapping byte
// ranges (conservative for interleaved strided views). ggml_ops/rope.cpp.
bool tg_storage_overlaps(const tg_tensor *a, const tg_tensor *b);

// The int a C caller stored in an enum field of a params struct, read without
// loading the field as the C++ enum type (an out-of-range value, legal in C,
// would be undefined behaviour in C++ and is caught by UBSan).
template <typename E> inline int tg_enum_value(const E &field) {
    static_assert(sizeof(E) == sizeof(int), "C enums are int-sized on supported ABIs");
    int v;
    memcpy(&v, &field, sizeof v);
    return v;
}
