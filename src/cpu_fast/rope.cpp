// rope.cpp - fast rope and rope_kv_update. Work items are tokens (t, b)
// claimed from the node's counter; a token's cos/sin are computed once (the
// reference computes them per head) with the reference's formula, so rows
// rotate bit-identically to the reference: theta_i = p * base^(-2i/n_rot) in
// double rounded to F32, or rows of the cos/sin tables. Head rows need
// contiguous ne0 (F32 inputs; caches F32/F16/BF16), else the reference runs.
// Cache stores convert with the vector kernels (round to nearest even, NaN as
// the reference writes it).
#include "cpu_fast.h"

namespace {

// The angles of the last position a thread computed (a decode step rotates
// q and k of every layer at the same position: one pow/cos/sin set per step
// instead of two per layer). Per thread, keyed by every input of the
// formula, so a hit returns exactly what the computation would.
struct angle_cache {
    int64_t p = -1;
    double base = 0.0;
    int n_rot = 0;
    float c[256], s[256];
};
thread_local angle_cache t_angles;

// cos/sin of every pair at position p (tables when given)
void angles(int64_t p, const tg_rope_params &rp, const tg_tensor *cos_tab, const tg_tensor *sin_tab, float *c,
            float *s) {
    const int half = rp.n_rot / 2;
    if (cos_tab) {
        for (int i = 0; i < half; i++) {
            c[i] = tg_get_f32(cos_tab, i, p, 0, 0);
            s[i] = tg_get_f32(sin_tab, i, p, 0, 0);
        }
        return;
    }
    angle_cache &ac = t_angles;
    const bool cacheable = half <= 256;
    if (cacheable && ac.p == p && ac.base == (double)rp.base && ac.n_rot == rp.n_rot) {
        memcpy(c, ac.c, (size_t)half * 4);
        memcpy(s, ac.s, (size_t)half * 4);
        return;
    }
    for (int i = 0; i < half; i++) {
        const double theta = (double)p * std::pow((double)rp.base, -2.0 * i / rp.n_rot);
        c[i] = (float)std::cos(theta);
        s[i] = (float)std::sin(theta);
    }
    if (cacheable) {
        memcpy(ac.c, c, (size_t)half * 4);
        memcpy(ac.s, s, (size_t)half * 4);
        ac.p = p, ac.base = (double)rp.base, ac.n_rot = rp.n_rot;
    }
}

// the reference's rotation of one head row (dims past n_rot copied)
void rotate(const float *x, float *out, int64_t D, const tg_rope_params &rp, const float *c, const float *s) {
    const int half = rp.n_rot / 2;
    for (int64_t d = rp.n_rot; d < D; d++) out[d] = x[d];
    if (rp.mode == TG_ROPE_NEOX) {
        for (int i = 0; i < half; i++) {
            const float xe = x[i], xo = x[i + half];
            out[i] = xe * c[i] - xo * s[i];
            out[i + half] = xe * s[i] + xo * c[i];
        }
    } else {
        for (int i = 0; i < half; i++) {
            const float xe = x[2 * i], xo = x[2 * i + 1];
            out[2 * i] = xe * c[i] - xo * s[i];
            out[2 * i + 1] = xe * s[i] + xo * c[i];
        }
    }
}

// per thread: cos, sin (n_rot/2 each) and one head row (D)
size_t thread_floats(int64_t D, int n_rot) { return tg_align64((size_t)(n_rot + D) * 4) / 4; }

int64_t plan_rope(const tg_tensor *dst, int nth) {
    const tg_tensor *a = dst->src[0];
    if (a->type != TG_TYPE_F32 || !tg_rows_contig(a) || !tg_rows_contig(dst)) return -1;
    // in place on a (same rows), or apart: a row is read whole before it is written
    const tg_rope_params rp = tg_get_params<tg_rope_params>(dst);
    return (int64_t)(nth * thread_floats(a->ne[0], rp.n_rot) * 4);
}

void run_rope(const tg_tensor *dst, const tg_cpu_ctx &c) {
    const tg_tensor *a = dst->src[0], *pos = dst->src[1];
    const tg_rope_params rp = tg_get_params<tg_rope_params>(dst);
    const int64_t D = a->ne[0], H = a->ne[1], T = a->ne[2], B = a->ne[3];
    float *cs = (float *)c.work + (size_t)c.ith * thread_floats(D, rp.n_rot), *sn = cs + rp.n_rot / 2,
          *x = sn + rp.n_rot / 2;
    for (int64_t item = c.claim(); item < T * B; item = c.claim()) {
        const int64_t t = item % T, b = item / T;
        angles(tg_get_i32(pos, t, b, 0, 0), rp, nullptr, nullptr, cs, sn);
        for (int64_t h = 0; h < H; h++) {
            memcpy(x, tg_ptr(a, 0, h, t, b), (size_t)D * 4);
            rotate(x, (float *)tg_ptr(dst, 0, h, t, b), D, rp, cs, sn);
        }
    }
}

int64_t plan_kv(const tg_tensor *dst, int nth) {
    const tg_tensor *kc = dst, *vc = dst->src[1], *kn = dst->src[2], *vn = dst->src[3];
    if (!tg_fast_type(kc->type) || !tg_fast_type(vc->type) || !tg_rows_contig(kc) || !tg_rows_contig(vc)) return -1;
    if (!tg_rows_contig(kn) || !tg_rows_contig(vn)) return -1;
    const tg_rope_params rp = tg_get_params<tg_rope_params>(dst);
    return (int64_t)(nth * thread_floats(kn->ne[0] * 2, rp.n_rot) * 4);
}

// Rows p of K and V for every (token, sequence): positions were checked (in
// range, distinct per sequence) before the graph ran.
void run_kv(const tg_tensor *dst, const tg_cpu_ctx &c) {
    const tg_simd &simd = tg_simd_get();
    const tg_tensor *kc = dst, *vc = dst->src[1], *kn = dst->src[2], *vn = dst->src[3], *pos = dst->src[4];
    const tg_tensor *cos_tab = dst->src[5], *sin_tab = dst->src[6];
    const tg_rope_params rp = tg_get_params<tg_rope_params>(dst);
    const int64_t D = kn->ne[0], H = kn->ne[1], T = kn->ne[2], B = kn->ne[3];
    float *cs = (float *)c.work + (size_t)c.ith * thread_floats(2 * D, rp.n_rot), *sn = cs + rp.n_rot / 2,
          *y = sn + rp.n_rot / 2;
    auto kstore = simd.from_f32[tg_simd_type_index(kc->type)], vstore = simd.from_f32[tg_simd_type_index(vc->type)];
    for (int64_t item = c.claim(); item < T * B; item = c.claim()) {
        const int64_t t = item % T, b = item / T, p = tg_get_i32(pos, t, b, 0, 0);
        angles(p, rp, cos_tab, sin_tab, cs, sn);
        for (int64_t h = 0; h < H; h++) {
            rotate((const float *)tg_ptr(kn, 0, h, t, b), y, D, rp, cs, sn);
            kstore(y, tg_ptr(kc, 0, h, p, b), D);
            vstore((const float *)tg_ptr(vn, 0, h, t, b), tg_ptr(vc, 0, h, p, b), D);
        }
    }
}

// the T new rows, not the L-row cache the result views
double work_kv(const tg_tensor *dst) { return (double)tg_nelements(dst->src[2]) * 4; }

}  // namespace

const tg_cpu_fast tg_fast_rope = {plan_rope, run_rope, nullptr};
const tg_cpu_fast tg_fast_rope_kv_update = {plan_kv, run_kv, work_kv};
