// op_table.cpp - every per-op fact in one table, indexed by tg_op.
// "Supported" on a backend means its entry here is non-NULL; a test checks
// that every op has both a CPU and (when built) a CUDA implementation.
#include "internal.h"
#include "ops.h"

#ifdef TG_HAVE_CUDA
#define CUDA_FN(f) f
#else
#define CUDA_FN(f) nullptr
#endif

static const tg_op_info k_ops[TG_OP_COUNT] = {
    // op                    name              n_src inplace check  check_src     cpu                      cuda  [cuda_check]
    {TG_OP_NONE,           "none",           0, false, nullptr, -1,             nullptr,                 nullptr},
    {TG_OP_VIEW,           "view",           1, false, nullptr, -1,             tg_cpu_noop,             CUDA_FN(tg_cuda_noop)},
    {TG_OP_CONT,           "cont",           1, false, nullptr, -1,             tg_cpu_cont,             CUDA_FN(tg_cuda_cont)},
    {TG_OP_CPY,            "cpy",            2, false, nullptr, -1,             tg_cpu_cpy,              CUDA_FN(tg_cuda_cpy)},
    {TG_OP_GET_ROWS,       "get_rows",       2, false, tg_check_get_rows, 1,   tg_cpu_get_rows,         CUDA_FN(tg_cuda_get_rows), CUDA_FN(tg_cuda_check_get_rows)},
    {TG_OP_ADD,            "add",            2, true,  nullptr, -1,             tg_cpu_add,              CUDA_FN(tg_cuda_add)},
    {TG_OP_MUL,            "mul",            2, true,  nullptr, -1,             tg_cpu_mul,              CUDA_FN(tg_cuda_mul)},
    {TG_OP_SCALE,          "scale",          1, true,  nullptr, -1,             tg_cpu_scale,            CUDA_FN(tg_cuda_scale)},
    {TG_OP_RMS_NORM,       "rms_norm",       1, false, nullptr, -1,             tg_cpu_rms_norm,         CUDA_FN(tg_cuda_rms_norm)},
    {TG_OP_L2_NORM,        "l2_norm",        1, false, nullptr, -1,             tg_cpu_l2_norm,          CUDA_FN(tg_cuda_l2_norm)},
    {TG_OP_SILU,           "silu",           1, true,  nullptr, -1,             tg_cpu_silu,             CUDA_FN(tg_cuda_silu)},
    {TG_OP_SIGMOID,        "sigmoid",        1, true,  nullptr, -1,             tg_cpu_sigmoid,          CUDA_FN(tg_cuda_sigmoid)},
    {TG_OP_SOFTPLUS,       "softplus",       1, true,  nullptr, -1,             tg_cpu_softplus,         CUDA_FN(tg_cuda_softplus)},
    {TG_OP_SWIGLU,         "swiglu",         2, true,  nullptr, -1,             tg_cpu_swiglu,           CUDA_FN(tg_cuda_swiglu)},
    {TG_OP_MUL_MAT,        "mul_mat",        2, false, nullptr, -1,             tg_cpu_mul_mat,          CUDA_FN(tg_cuda_mul_mat)},
    {TG_OP_SOFTMAX,        "softmax",        1, false, nullptr, -1,             tg_cpu_softmax,          CUDA_FN(tg_cuda_softmax)},
    {TG_OP_ATTENTION,      "attention",      4, false, nullptr, -1,             tg_cpu_attention,        CUDA_FN(tg_cuda_attention)},
    {TG_OP_ROPE,           "rope",           2, false, nullptr, -1,             tg_cpu_rope,             CUDA_FN(tg_cuda_rope)},
    {TG_OP_ROPE_KV_UPDATE, "rope_kv_update", 5, false, tg_check_rope_kv_update, 4, tg_cpu_rope_kv_update, CUDA_FN(tg_cuda_rope_kv_update),
                                                                                  CUDA_FN(tg_cuda_check_rope_kv_update)},
    {TG_OP_DELTA_RULE,     "delta_rule",     5, false, nullptr, -1,             tg_cpu_delta_rule,       CUDA_FN(tg_cuda_delta_rule)},
};
static_assert(TG_OP_COUNT == 20, "op added: update the table above, ops.h and the CUDA backend");

const tg_op_info &tg_op_get(tg_op op) {
    TG_ASSERT(op >= 0 && op < TG_OP_COUNT);
    TG_ASSERT(k_ops[op].op == op);
    return k_ops[op];
}
