// op_table.cpp - every per-op fact in one table, indexed by tg_op.
// "Supported" on a backend means its entry here is non-NULL; a test checks
// that every op has both a CPU and (when built) a CUDA implementation. The
// last column is the CPU fast path (src/cpu_fast/): its plan() says per node
// whether the layout is one it handles, else the reference kernel runs.
#include "internal.h"
#include "ops.h"
#include "cpu_fast/cpu_fast.h"

#ifdef TG_HAVE_CUDA
#define CUDA_FN(f) f
#else
#define CUDA_FN(f) nullptr
#endif

static const tg_op_info k_ops[TG_OP_COUNT] = {
    // op                    name              n_src inplace check  check_src     cpu                      cuda [cuda_check] cpu fast path
    {TG_OP_NONE,           "none",           0, false, nullptr, -1,             nullptr,                 nullptr, nullptr, nullptr},
    {TG_OP_VIEW,           "view",           1, false, nullptr, -1,             tg_cpu_noop,             CUDA_FN(tg_cuda_noop), nullptr, nullptr},
    {TG_OP_CONT,           "cont",           1, false, nullptr, -1,             tg_cpu_cont,             CUDA_FN(tg_cuda_cont), nullptr, &tg_fast_cont},
    {TG_OP_CPY,            "cpy",            2, false, nullptr, -1,             tg_cpu_cpy,              CUDA_FN(tg_cuda_cpy), nullptr, &tg_fast_cpy},
    {TG_OP_GET_ROWS,       "get_rows",       2, false, tg_check_get_rows, 1,   tg_cpu_get_rows,         CUDA_FN(tg_cuda_get_rows), CUDA_FN(tg_cuda_check_get_rows), &tg_fast_get_rows},
    {TG_OP_ADD,            "add",            2, true,  nullptr, -1,             tg_cpu_add,              CUDA_FN(tg_cuda_add), nullptr, &tg_fast_add},
    {TG_OP_MUL,            "mul",            2, true,  nullptr, -1,             tg_cpu_mul,              CUDA_FN(tg_cuda_mul), nullptr, &tg_fast_mul},
    {TG_OP_SCALE,          "scale",          1, true,  nullptr, -1,             tg_cpu_scale,            CUDA_FN(tg_cuda_scale), nullptr, &tg_fast_scale},
    {TG_OP_RMS_NORM,       "rms_norm",       1, false, nullptr, -1,             tg_cpu_rms_norm,         CUDA_FN(tg_cuda_rms_norm), nullptr, &tg_fast_rms_norm},
    {TG_OP_L2_NORM,        "l2_norm",        1, false, nullptr, -1,             tg_cpu_l2_norm,          CUDA_FN(tg_cuda_l2_norm), nullptr, &tg_fast_l2_norm},
    {TG_OP_SILU,           "silu",           1, true,  nullptr, -1,             tg_cpu_silu,             CUDA_FN(tg_cuda_silu), nullptr, &tg_fast_silu},
    {TG_OP_SIGMOID,        "sigmoid",        1, true,  nullptr, -1,             tg_cpu_sigmoid,          CUDA_FN(tg_cuda_sigmoid), nullptr, &tg_fast_sigmoid},
    {TG_OP_SOFTPLUS,       "softplus",       1, true,  nullptr, -1,             tg_cpu_softplus,         CUDA_FN(tg_cuda_softplus), nullptr, &tg_fast_softplus},
    {TG_OP_SWIGLU,         "swiglu",         2, true,  nullptr, -1,             tg_cpu_swiglu,           CUDA_FN(tg_cuda_swiglu), nullptr, &tg_fast_swiglu},
    {TG_OP_MUL_MAT,        "mul_mat",        2, false, nullptr, -1,             tg_cpu_mul_mat,          CUDA_FN(tg_cuda_mul_mat), nullptr, &tg_fast_mul_mat},
    {TG_OP_SOFTMAX,        "softmax",        1, false, nullptr, -1,             tg_cpu_softmax,          CUDA_FN(tg_cuda_softmax), nullptr, &tg_fast_softmax},
    {TG_OP_ATTENTION,      "attention",      4, false, nullptr, -1,             tg_cpu_attention,        CUDA_FN(tg_cuda_attention), nullptr, &tg_fast_attention},
    {TG_OP_ROPE,           "rope",           2, false, nullptr, -1,             tg_cpu_rope,             CUDA_FN(tg_cuda_rope), nullptr, &tg_fast_rope},
    {TG_OP_ROPE_KV_UPDATE, "rope_kv_update", 5, false, tg_check_rope_kv_update, 4, tg_cpu_rope_kv_update, CUDA_FN(tg_cuda_rope_kv_update), CUDA_FN(tg_cuda_check_rope_kv_update), &tg_fast_rope_kv_update},
    {TG_OP_DELTA_RULE,     "delta_rule",     5, false, nullptr, -1,             tg_cpu_delta_rule,       CUDA_FN(tg_cuda_delta_rule), nullptr, &tg_fast_delta_rule},
};
static_assert(TG_OP_COUNT == 20, "op added: update the table above, ops.h and the CUDA backend");

const tg_op_info &tg_op_get(tg_op op) {
    TG_ASSERT(op >= 0 && op < TG_OP_COUNT);
    TG_ASSERT(k_ops[op].op == op);
    return k_ops[op];
}
