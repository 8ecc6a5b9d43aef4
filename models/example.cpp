// example.cpp - build a small graph, compute it on the CPU, print the result
// and the planner's memory figures.
#include <cstdio>

#include "tinygml.h"

int main(void) {
    tg_init_params ip = {1 << 20, NULL, true};
    tg_context *ctx = tg_init(ip);
    tg_backend *cpu = tg_backend_cpu(2);
    if (!ctx || !cpu) {
        fprintf(stderr, "%s\n", tg_last_error());
        return 1;
    }
    // y = silu(W x + b) * 2, W {4, 3}: 3 outputs from 4 inputs
    tg_tensor *W = tg_set_name(tg_new_tensor_2d(ctx, TG_TYPE_F32, 4, 3), "W");
    tg_tensor *x = tg_set_name(tg_new_tensor_1d(ctx, TG_TYPE_F32, 4), "x");
    tg_tensor *b = tg_set_name(tg_new_tensor_1d(ctx, TG_TYPE_F32, 3), "b");
    tg_buffer *buf = tg_backend_alloc(cpu, ctx);
    const float w[12] = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 1};
    const float xv[4] = {0.5f, -1.0f, 2.0f, 3.0f}, bv[3] = {0.0f, 1.0f, -4.0f};
    tg_tensor_set(W, w, 0, sizeof(w));
    tg_tensor_set(x, xv, 0, sizeof(xv));
    tg_tensor_set(b, bv, 0, sizeof(bv));

    tg_tensor *y = tg_scale(ctx, tg_silu(ctx, tg_add(ctx, tg_mul_mat(ctx, W, x), b)), 2.0f);
    tg_graph *g = tg_graph_new(ctx);
    if (tg_graph_expand(g, y) != TG_OK || tg_graph_compute(cpu, g) != TG_OK) {
        fprintf(stderr, "error: %s\n", tg_last_error());
        return 1;
    }
    float out[3];
    tg_tensor_get(y, out, 0, sizeof(out));
    printf("y = silu(W x + b) * 2 = [%.6f, %.6f, %.6f]\n", out[0], out[1], out[2]);

    tg_graph_stats st;
    tg_graph_plan(g, &st);
    printf("graph: %d nodes; planner: %zu bytes planned, %zu naive, %zu lower bound, %d of %d in place\n",
           tg_graph_n_nodes(g), st.planned_bytes, st.naive_bytes, st.lower_bound, st.n_inplace, st.n_intermediates);
    tg_buffer_free(buf);
    tg_backend_free(cpu);
    tg_free(ctx);
    return 0;
}
