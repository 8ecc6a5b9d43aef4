// test_api.cpp - API misuse (RELIABILITY.md 11, 12): every bad call returns an
// error whose message names the call, never aborts, and changes nothing.
#include <cstring>

#include "test_util.h"

namespace {


TEST(Api, InitRejectsZeroSize) {
    tg_init_params ip = {0, nullptr, false};
    EXPECT_EQ(tg_init(ip), nullptr);
    EXPECT_ERR_NAMES("init");
}

TEST(Api, NewTensorRejectsBadArguments) {
    tgt::env e(1 << 16);
    const int64_t ok[2] = {4, 4}, zero[2] = {4, 0}, neg[2] = {-1, 4};
    EXPECT_EQ(tg_new_tensor(nullptr, TG_TYPE_F32, 2, ok), nullptr);
    EXPECT_ERR_NAMES("new_tensor");
    EXPECT_EQ(tg_new_tensor(e.ctx, (tg_type)99, 2, ok), nullptr);
    EXPECT_ERR_NAMES("new_tensor");
    EXPECT_EQ(tg_new_tensor(e.ctx, TG_TYPE_F32, 5, ok), nullptr);
    EXPECT_EQ(tg_new_tensor(e.ctx, TG_TYPE_F32, 0, ok), nullptr);
    EXPECT_EQ(tg_new_tensor(e.ctx, TG_TYPE_F32, 2, zero), nullptr);
    EXPECT_EQ(tg_new_tensor(e.ctx, TG_TYPE_F32, 2, neg), nullptr);
    EXPECT_EQ(tg_new_tensor(e.ctx, TG_TYPE_F32, 2, nullptr), nullptr);
    EXPECT_EQ(tg_new_tensor_4d(e.ctx, TG_TYPE_F32, INT64_MAX, 2, 1, 1), nullptr);
    EXPECT_ERR_NAMES("new_tensor");
    EXPECT_EQ(tg_used_mem(e.ctx), 0u) << "failed calls must not consume the arena";
}

TEST(Api, ArenaExhaustedIsAnErrorAndChangesNothing) {
    tg_init_params ip = {4096, nullptr, false};  // with data
    tg_context *ctx = tg_init(ip);
    ASSERT_NE(ctx, nullptr);
    ASSERT_NE(tg_new_tensor_1d(ctx, TG_TYPE_F32, 100), nullptr);
    size_t used = tg_used_mem(ctx);
    EXPECT_EQ(tg_new_tensor_1d(ctx, TG_TYPE_F32, 100000), nullptr);
    EXPECT_ERR_NAMES("new_tensor");
    EXPECT_NE(strstr(tg_last_error(), "arena exhausted"), nullptr);
    EXPECT_EQ(tg_used_mem(ctx), used);
    // metadata-only contexts run out too
    tg_init_params ip2 = {tg_tensor_overhead() * 3, nullptr, true};
    tg_context *small = tg_init(ip2);
    int made = 0;
    while (tg_new_tensor_1d(small, TG_TYPE_F32, 8) && made < 100) made++;
    EXPECT_GE(made, 1);
    EXPECT_LE(made, 3);
    EXPECT_EQ(tg_graph_new(small) == nullptr, true);
    EXPECT_ERR_NAMES("graph_new");
    tg_free(small);
    tg_free(ctx);
}

TEST(Api, HostContextTensorsHaveData) {
    tg_init_params ip = {1 << 16, nullptr, false};
    tg_context *ctx = tg_init(ip);
    tg_tensor *t = tg_new_tensor_2d(ctx, TG_TYPE_F16, 3, 5);
    ASSERT_NE(tg_tensor_data(t), nullptr);
    EXPECT_EQ(tg_nbytes(t), 30u);
    EXPECT_TRUE(tg_is_contiguous(t));
    EXPECT_EQ(tg_n_dims(t), 2);
    const uint16_t v[15] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    EXPECT_EQ(tg_tensor_set(t, v, 0, 30), TG_OK);
    uint16_t back[15];
    EXPECT_EQ(tg_tensor_get(t, back, 0, 30), TG_OK);
    EXPECT_EQ(0, memcmp(v, back, 30));
    tg_free(ctx);
}

TEST(Api, SetGetBoundsChecked) {
    tgt::env e;
    tg_tensor *t = tg_new_tensor_1d(e.ctx, TG_TYPE_F32, 16);
    ASSERT_NE(e.alloc(), nullptr);
    float buf[32] = {0};
    EXPECT_EQ(tg_tensor_set(t, buf, 0, 64), TG_OK);
    EXPECT_EQ(tg_tensor_set(t, buf, 4, 64), TG_ERR_ARG);
    EXPECT_ERR_NAMES("tensor_set");
    EXPECT_EQ(tg_tensor_set(t, buf, SIZE_MAX - 2, 8), TG_ERR_ARG);  // offset + size overflows
    EXPECT_EQ(tg_tensor_get(t, buf, 60, 8), TG_ERR_ARG);
    EXPECT_ERR_NAMES("tensor_get");
    EXPECT_EQ(tg_tensor_get(t, buf, 8, SIZE_MAX), TG_ERR_ARG);
    EXPECT_EQ(tg_tensor_get(nullptr, buf, 0, 4), TG_ERR_ARG);
    EXPECT_EQ(tg_tensor_set(t, nullptr, 0, 4), TG_ERR_ARG);
    tg_tensor *tr = tg_transpose(e.ctx, tg_reshape_2d(e.ctx, t, 4, 4));
    EXPECT_EQ(tg_tensor_get(tr, buf, 0, 4), TG_ERR_ARG);  // not contiguous
    EXPECT_NE(strstr(tg_last_error(), "contiguous"), nullptr);
}

TEST(Api, UseAfterBufferFreeIsAnError) {
    tgt::env e;
    tg_tensor *t = tg_new_tensor_1d(e.ctx, TG_TYPE_F32, 16);
    tg_buffer *buf = tg_backend_alloc(e.cpu, e.ctx);
    ASSERT_NE(buf, nullptr);
    tg_buffer_free(buf);
    float v[16] = {0};
    EXPECT_EQ(tg_tensor_set(t, v, 0, 64), TG_ERR_ARG);
    EXPECT_ERR_NAMES("tensor_set");
    EXPECT_NE(strstr(tg_last_error(), "freed"), nullptr);
    tg_graph *g = tg_graph_new(e.ctx);
    ASSERT_EQ(tg_graph_expand(g, tg_silu(e.ctx, t)), TG_OK);
    EXPECT_EQ(tg_graph_compute(e.cpu, g), TG_ERR_ARG);
    EXPECT_ERR_NAMES("graph_compute");
    // a new buffer gives the tensor storage again
    ASSERT_NE(e.alloc(), nullptr);
    EXPECT_EQ(tg_tensor_set(t, v, 0, 64), TG_OK);
}

TEST(Api, ComputeNeedsAllocatedInputs) {
    tgt::env e;
    tg_tensor *x = tg_set_name(tg_new_tensor_1d(e.ctx, TG_TYPE_F32, 8), "x");
    tg_graph *g = tg_graph_new(e.ctx);
    ASSERT_EQ(tg_graph_expand(g, tg_silu(e.ctx, x)), TG_OK);
    EXPECT_EQ(tg_graph_compute(e.cpu, g), TG_ERR_ARG);
    EXPECT_ERR_NAMES("graph_compute");
    EXPECT_NE(strstr(tg_last_error(), "'x'"), nullptr);
    EXPECT_EQ(tg_graph_compute(nullptr, g), TG_ERR_ARG);
    EXPECT_EQ(tg_graph_compute(e.cpu, nullptr), TG_ERR_ARG);
    EXPECT_EQ(tg_graph_expand(nullptr, x), TG_ERR_ARG);
    EXPECT_EQ(tg_graph_expand(g, nullptr), TG_ERR_ARG);
    EXPECT_ERR_NAMES("graph_expand");
}

TEST(Api, NamesAndLookup) {
    tgt::env e;
    tg_tensor *t = tg_new_tensor_1d(e.ctx, TG_TYPE_F32, 8);
    EXPECT_EQ(tg_set_name(t, "blk.0.attn_q.weight"), t);
    EXPECT_EQ(tg_get_tensor(e.ctx, "blk.0.attn_q.weight"), t);
    EXPECT_EQ(tg_get_tensor(e.ctx, "nope"), nullptr);
    std::string long_name(TG_MAX_NAME, 'x');
    EXPECT_EQ(tg_set_name(t, long_name.c_str()), nullptr);
    EXPECT_ERR_NAMES("set_name");
    EXPECT_STREQ(tg_get_name(t), "blk.0.attn_q.weight");
}

TEST(Api, ViewsAreBoundsChecked) {
    tgt::env e;
    tg_tensor *t = tg_new_tensor_2d(e.ctx, TG_TYPE_F32, 8, 4);
    EXPECT_NE(tg_view_2d(e.ctx, t, 8, 4, 32, 0), nullptr);
    EXPECT_EQ(tg_view_2d(e.ctx, t, 8, 4, 32, 4), nullptr);  // one element past the end
    EXPECT_ERR_NAMES("view_2d");
    EXPECT_EQ(tg_view_1d(e.ctx, t, 33, 0), nullptr);
    EXPECT_EQ(tg_view_1d(e.ctx, t, 1, SIZE_MAX), nullptr);
    EXPECT_EQ(tg_view_4d(e.ctx, t, 2, 2, 2, 2, SIZE_MAX / 2, 4, 4, 0), nullptr);
    EXPECT_EQ(tg_reshape_2d(e.ctx, t, 5, 5), nullptr);
    EXPECT_ERR_NAMES("reshape");
    EXPECT_EQ(tg_reshape_2d(e.ctx, tg_transpose(e.ctx, t), 32, 1), nullptr);  // not contiguous
    EXPECT_EQ(tg_permute(e.ctx, t, 0, 0, 1, 2), nullptr);
    EXPECT_ERR_NAMES("permute");
    EXPECT_EQ(tg_permute(e.ctx, t, 0, 1, 2, 4), nullptr);
    EXPECT_EQ(tg_transpose(e.ctx, nullptr), nullptr);
    tg_tensor *p = tg_permute(e.ctx, t, 2, 0, 1, 3);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(tg_ne(p, 2), 8);
    EXPECT_EQ(tg_ne(p, 0), 4);
    EXPECT_EQ(tg_nb(p, 2), 4u);
}

TEST(Api, OpConstructorsRejectNullAndMismatch) {
    tgt::env e;
    tg_tensor *a = tg_new_tensor_2d(e.ctx, TG_TYPE_F32, 8, 4);
    tg_tensor *b = tg_new_tensor_2d(e.ctx, TG_TYPE_F32, 3, 4);
    tg_tensor *i = tg_new_tensor_1d(e.ctx, TG_TYPE_I32, 4);
    EXPECT_EQ(tg_add(e.ctx, a, b), nullptr);
    EXPECT_ERR_NAMES("add");
    EXPECT_EQ(tg_add(e.ctx, a, nullptr), nullptr);
    EXPECT_ERR_NAMES("add");
    EXPECT_EQ(tg_mul_mat(e.ctx, a, b), nullptr);
    EXPECT_ERR_NAMES("mul_mat");
    EXPECT_EQ(tg_silu(e.ctx, i), nullptr);
    EXPECT_ERR_NAMES("silu");
    EXPECT_EQ(tg_get_rows(e.ctx, a, a), nullptr);
    EXPECT_ERR_NAMES("get_rows");
    EXPECT_EQ(tg_rms_norm(nullptr, a, 1e-5f), nullptr);
    EXPECT_ERR_NAMES("rms_norm");
}

TEST(Api, BackendsByName) {
    tg_backend *cpu = tg_backend_cpu(1);
    ASSERT_NE(cpu, nullptr);
    EXPECT_STREQ(tg_backend_name(cpu), "cpu");
    tg_backend_free(cpu);
    tg_backend_free(nullptr);
    tg_buffer_free(nullptr);
    tg_free(nullptr);
    if (!tg_cuda_available()) {
        EXPECT_EQ(tg_backend_cuda(0), nullptr);
        EXPECT_ERR_NAMES("backend_cuda");
    }
    EXPECT_EQ(tg_backend_cuda(-1), nullptr);
    EXPECT_ERR_NAMES("backend_cuda");
}

TEST(Api, StatusAndTypeNames) {
    EXPECT_STREQ(tg_type_name(TG_TYPE_BF16), "bf16");
    EXPECT_EQ(tg_type_name((tg_type)77), nullptr);
    EXPECT_EQ(tg_type_size(TG_TYPE_F16), 2u);
    EXPECT_EQ(tg_type_size((tg_type)-1), 0u);
    EXPECT_STREQ(tg_status_name(TG_ERR_OOM), "out of memory");
}

}  // namespace
