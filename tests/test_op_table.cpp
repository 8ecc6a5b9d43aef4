// test_op_table.cpp - the per-op table (src/op_table.cpp) says what the
// constructors record: every op's n_src leading sources are set, an op with a
// host check names the source it reads and has the device form of the check
// when CUDA is built, and every op has a CPU kernel.
#include <set>

#include "internal.h"
#include "test_util.h"

namespace {

TEST(OpTable, SourcesAndChecksMatchTheConstructors) {
    tgt::env e;
    tg_context *c = e.ctx;
    tg_tensor *a = tg_new_tensor_4d(c, TG_TYPE_F32, 8, 4, 3, 2);  // {D, H, T, B}
    tg_tensor *a2 = tg_new_tensor_4d(c, TG_TYPE_F32, 8, 4, 3, 2);
    tg_tensor *w = tg_new_tensor_2d(c, TG_TYPE_F16, 8, 5);
    tg_tensor *ids = tg_new_tensor_3d(c, TG_TYPE_I32, 2, 1, 1);
    tg_tensor *pos = tg_new_tensor_2d(c, TG_TYPE_I32, 3, 2);
    tg_tensor *kc = tg_new_tensor_4d(c, TG_TYPE_F32, 8, 2, 16, 2), *vc = tg_new_tensor_4d(c, TG_TYPE_F32, 8, 2, 16, 2);
    tg_tensor *kn = tg_new_tensor_4d(c, TG_TYPE_F32, 8, 2, 3, 2), *vn = tg_new_tensor_4d(c, TG_TYPE_F32, 8, 2, 3, 2);
    tg_tensor *g = tg_new_tensor_3d(c, TG_TYPE_F32, 4, 3, 2), *beta = tg_new_tensor_3d(c, TG_TYPE_F32, 4, 3, 2);
    tg_tensor *st = tg_new_tensor_4d(c, TG_TYPE_F32, 8, 8, 4, 2);
    const tg_rope_params rp = tg_rope_default_params(8);
    const tg_delta_params dp = {TG_DELTA_GATED_DELTA, TG_GATE_LOG, 0.5f, true};
    const std::vector<tg_tensor *> nodes = {
        tg_view_1d(c, a, 4, 0),
        tg_cont(c, tg_transpose(c, a)),
        tg_cpy(c, a, a2),
        tg_get_rows(c, w, ids),
        tg_add(c, a, a2),
        tg_mul(c, a, a2),
        tg_scale(c, a, 2.0f),
        tg_rms_norm(c, a, 1e-5f),
        tg_l2_norm(c, a, 1e-6f),
        tg_silu(c, a),
        tg_sigmoid(c, a),
        tg_softplus(c, a),
        tg_swiglu(c, a, a2),
        tg_mul_mat(c, w, tg_reshape_2d(c, a, 8, 24)),
        tg_softmax(c, a, 1.0f),
        tg_attention(c, a, kc, vc, pos, 0.3f),
        tg_rope(c, a, pos, &rp),
        tg_rope_kv_update(c, kc, vc, kn, vn, pos, nullptr, nullptr, &rp),
        tg_delta_rule(c, a, a2, tg_new_tensor_4d(c, TG_TYPE_F32, 8, 4, 3, 2), g, beta, st, &dp),
    };
    std::set<int> seen;
    for (const tg_tensor *t : nodes) {
        ASSERT_NE(t, nullptr) << tg_last_error();
        const tg_op_info &op = tg_op_get(t->op);
        seen.insert(t->op);
        for (int i = 0; i < op.n_src; i++) EXPECT_NE(t->src[i], nullptr) << op.name << ": source " << i << " missing";
        EXPECT_NE(op.cpu, nullptr) << op.name;
        if (op.cpu_check) {
            ASSERT_GE(op.check_src, 0) << op.name;
            EXPECT_LT(op.check_src, op.n_src) << op.name << ": the checked source is a required one";
        } else {
            EXPECT_EQ(op.check_src, -1) << op.name;
        }
#ifdef TG_HAVE_CUDA
        EXPECT_NE(op.cuda, nullptr) << op.name;
        EXPECT_EQ(op.cuda_check != nullptr, op.cpu_check != nullptr) << op.name << ": host and device checks differ";
#else
        EXPECT_EQ(op.cuda_check, nullptr) << op.name;
#endif
    }
    EXPECT_EQ((int)seen.size(), TG_OP_COUNT - 1) << "an op is not covered here";
}

}  // namespace
