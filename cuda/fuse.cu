// fuse.cu - the backend's node fusions (see fuse.cuh): a decode step of a
// llama runs about 18 kernels per layer unfused; each launch costs ~2 us of
// device time at these sizes, more than most of the kernels' own work.
#include <algorithm>
#include <unordered_map>

#include "attention.cuh"
#include "fuse.cuh"
#include "mmv.cuh"
#include "ops.h"

namespace {

// Bytes [lo, hi) the elements of a tensor of type, ne, nb at data may touch
// (rows of quantized types in whole blocks: nb[0] is then a block's bytes).
template <typename NE, typename NB>
void span_of(const void *data, tg_type type, const NE *ne, const NB *nb, uintptr_t *lo, uintptr_t *hi) {
    uintptr_t n = tg_type_block_size(type) > 1 ? (uintptr_t)tg_row_size(type, ne[0])
                                               : tg_type_size(type) + (uintptr_t)(ne[0] - 1) * (uintptr_t)nb[0];
    for (int d = 1; d < TG_MAX_DIMS; d++) n += (uintptr_t)(ne[d] - 1) * (uintptr_t)nb[d];
    *lo = (uintptr_t)data;
    *hi = *lo + n;
}
void span(const tg_tensor *t, uintptr_t *lo, uintptr_t *hi) { span_of(t->data, t->type, t->ne, t->nb, lo, hi); }
bool overlap(const tg_tensor *a, const tg_tensor *b) {
    uintptr_t a0, a1, b0, b1;
    span(a, &a0, &a1), span(b, &b0, &b1);
    return a0 < b1 && b0 < a1;
}
// Same bytes, same element order: a fused kernel that reads an element and
// writes the result of that element in one thread may alias them.
bool same_layout(const tg_tensor *a, const tg_tensor *b) {
    if (a->data != b->data || a->type != b->type) return false;
    for (int d = 0; d < TG_MAX_DIMS; d++)
        if (a->ne[d] != b->ne[d] || (a->ne[d] > 1 && a->nb[d] != b->nb[d])) return false;
    return true;
}
// w written by a fused kernel where r is read: disjoint, or element-wise in place
bool may_write(const tg_tensor *w, const tg_tensor *r) { return !overlap(w, r) || same_layout(w, r); }

struct matcher {
    tg_backend *be;
    const std::vector<tg_tensor *> &nodes;
    std::vector<char> done;                           // consumed by an earlier fusion
    std::unordered_map<const tg_tensor *, int> reads;  // readers of each storage root
    int counts[TG_CUDA_FUSION_KINDS] = {};             // fusions taken, by kind (fuse.cuh)

    matcher(tg_backend *b, const std::vector<tg_tensor *> &n) : be(b), nodes(n), done(n.size(), 0) {
        for (const tg_tensor *t : nodes) {
            for (const tg_tensor *s : t->src)
                if (s) reads[tg_view_root(const_cast<tg_tensor *>(s))]++;
            // the largest b a quantized GEMV of the graph quantizes (attention_link)
            if (tg_cuda(be)->sig.qlink != 1 && t->op == TG_OP_MUL_MAT && tg_type_is_quantized(t->src[0]->type) && t->ne[1] <= 8) {
                size_t q_bytes = 0;
                const long long ncols = t->src[1]->ne[1] * t->src[1]->ne[2] * t->src[1]->ne[3];
                qregion = std::max(qregion, tg_cuda_align256(tg_cuda_mmvq_scratch(t->src[0]->ne[0], ncols, &q_bytes)));
            }
        }
    }
    // the next node after i that is not a view (-1: none)
    int next(int i) const {
        for (int j = i + 1; j < (int)nodes.size(); j++)
            if (nodes[j]->op != TG_OP_VIEW) return done[j] ? -1 : j;
        return -1;
    }
    // t's only reader is the node that reads it directly (no views of it)
    bool sole(const tg_tensor *t) const {
        auto it = reads.find(t);
        return it != reads.end() && it->second == 1;
    }

    // rms_norm(x) * w, the norm read by nothing else: folded into the GEMV
    // after it where fold() allows, else one norm kernel
    bool norm_mul(int i, tg_status *st) {
        const tg_tensor *nrm = nodes[i];
        const int j = next(i);
        if (j < 0 || nodes[j]->op != TG_OP_MUL || !sole(nrm)) return false;
        const tg_tensor *mul = nodes[j];
        const tg_tensor *w = mul->src[0] == nrm ? mul->src[1] : mul->src[1] == nrm ? mul->src[0] : nullptr;
        if (!w || w == nrm) return false;
        if (mul->src[1] == nrm && !tg_same_shape(w, nrm)) return false;  // the norm broadcast: not this kernel
        if (nrm->type != TG_TYPE_F32 || mul->type != TG_TYPE_F32 || !tg_same_shape(nrm, mul)) return false;
        const tg_tensor *x = nrm->src[0];
        if (!may_write(nrm, x) || !may_write(mul, x) || !may_write(mul, nrm) || overlap(nrm, w) || overlap(mul, w))
            return false;
        done[j] = 1;
        counts[0]++;
        if (fold(i, j, x, w, st)) return true;
        *st = tg_cuda_rms_norm_mul(be, nrm, mul, w);
        return true;
    }

    // A GEMV launch the fusions below plan: its products (and epilogues),
    // the nodes it takes after the first, the tensors it writes and reads.
    struct gemv_plan {
        tg_cuda_mmv p;
        int more[TG_CUDA_MMV_MAX_JOBS + 2] = {}, nmore = 0;
        const tg_tensor *out[TG_CUDA_MMV_MAX_JOBS + 3] = {}, *in[TG_CUDA_MMV_MAX_JOBS + 1] = {};
        int nout = 0, nin = 0;
        int kind = -1;  // counts[] index; -1: a plain product (only with a folded norm)
        bool rope = false;  // rope(q) + rope_kv_update folded in (kind 6)
        const char *call = "mul_mat";
    };
    tg_status launch(const gemv_plan &g) {
        for (int q = 0; q < g.nmore; q++) done[g.more[q]] = 1;
        if (g.kind >= 0) counts[g.kind]++;
        if (g.rope) {
            counts[6]++;
            tg_cuda(be)->sig_last[TG_CUDA_SIG_ROPE] = tg_cuda(be)->sig_last[TG_CUDA_SIG_KV] = "gemv-epilogue";
        }
        return tg_cuda_mmv_launch(be, g.p, g.call);
    }
    // the largest b a quantized GEMV of the graph quantizes (attention_link)
    size_t qregion = 0;
    static bool quant_gemv(tg_backend *be, const tg_cuda_mmv &p) {
        return tg_type_is_quantized(p.job[0].a.type) && tg_cuda(be)->sig.mmq_kernel != 1;
    }

    // rms_norm(x) * w (nodes i, j) folded into the GEMV launch that reads its
    // result next (mmv.cuh tg_cuda_mmv_norm): every block reads x and w (one
    // row of K: the kernels do not broadcast it) while the launch writes its
    // outputs, and its blocks write the norm's y and z (z may have readers
    // after the launch), which nothing the launch reads may overlap. y or z
    // overlapping an output of the launch had its storage given to that
    // output by the planner: the planner gives away storage only once no
    // later node reads it and it is not a graph output, so it is dead after
    // the launch's products (which no longer read it: they read x and w) and
    // is not written (the rope folded in writes q over z where the sizes
    // match, as in a llama's q/k/v).
    bool fold(int i, int j, const tg_tensor *x, const tg_tensor *w, tg_status *st) {
        if (tg_cuda(be)->sig.norm_fold == 1) return false;
        const tg_tensor *nrm = nodes[i], *mul = nodes[j];
        const int k = next(j);
        if (k < 0 || nodes[k]->op != TG_OP_MUL_MAT || nodes[k]->src[1] != mul) return false;
        if (x->type != TG_TYPE_F32 || w->type != TG_TYPE_F32 || !tg_is_contiguous(x) || !tg_is_contiguous(w) ||
            !tg_is_contiguous(nrm) || !tg_is_contiguous(mul) || w->ne[0] != x->ne[0] || tg_nrows(w) != 1)
            return false;
        gemv_plan g;
        // (the folded launch reads x and w, not b)
        if (!plan_swiglu(k, &g) && !plan_shared_b(k, &g, false) && !plan_mm_add(k, &g) && !plan_one(k, &g))
            return false;
        // x's rows are b's columns: one batch of them (the GEMV merged batches into columns)
        if (tg_nrows(x) != g.p.job[0].d.ne[1]) return false;
        if (overlap(nrm, x) || overlap(mul, x) || (overlap(nrm, mul) && !same_layout(nrm, mul))) return false;
        bool y_dead = false, z_dead = false;
        for (int q = 0; q < g.nout; q++) {
            if (overlap(g.out[q], x) || overlap(g.out[q], w)) return false;
            y_dead = y_dead || overlap(g.out[q], nrm);
            z_dead = z_dead || overlap(g.out[q], mul);
        }
        for (int q = 0; q < g.nin; q++)
            if (overlap(g.in[q], nrm) || overlap(g.in[q], mul)) return false;
        g.p.norm.x = (const float *)x->data, g.p.norm.w = (const float *)w->data;
        g.p.norm.y = y_dead ? nullptr : (float *)nrm->data;
        g.p.norm.z = z_dead ? nullptr : (float *)mul->data;
        // y written in place as z (same layout) is overwritten by z: only z then
        if (g.p.norm.y && g.p.norm.z && nrm->data == mul->data) g.p.norm.y = nullptr;
        g.p.norm.eps = tg_get_params<float>(nrm);
        if (!tg_cuda_mmv_can_fold(g.p)) return false;
        *st = launch(g);
        done[k] = 1;
        counts[5]++;
        return true;
    }

    // gate = mm(wg, x), up = mm(wu, x), swiglu(gate, up) (gate and up in either order)
    bool plan_swiglu(int i, gemv_plan *g) {
        *g = gemv_plan();
        const int j = next(i), k = j < 0 ? -1 : next(j);
        if (k < 0 || nodes[j]->op != TG_OP_MUL_MAT || nodes[k]->op != TG_OP_SWIGLU) return false;
        const tg_tensor *sw = nodes[k], *m0 = nodes[i], *m1 = nodes[j];
        if (sw->src[0] == m1 && sw->src[1] == m0) std::swap(m0, m1);
        if (sw->src[0] != m0 || sw->src[1] != m1 || m0->src[1] != m1->src[1]) return false;
        if (!sole(m0) || !sole(m1) || !tg_same_shape(m0, m1) || sw->type != TG_TYPE_F32) return false;
        tg_cuda_mmv &p = g->p;
        p.njob = 2, p.swiglu = true;
        tg_cuda_desc b1;
        if (!tg_cuda_mmv_job_of(be, m0, &p.job[0], &p.b) || !tg_cuda_mmv_job_of(be, m1, &p.job[1], &b1)) return false;
        if (!tg_cuda_mmv_like(p.job[0], m0, sw, &p.h) || !tg_cuda_mmv_compatible(p)) return false;
        const tg_tensor *b = m0->src[1];
        if (overlap(sw, b) || overlap(m0, b) || overlap(m1, b) || overlap(m0, m1) || !may_write(sw, m0) ||
            !may_write(sw, m1))
            return false;
        g->more[0] = j, g->more[1] = k, g->nmore = 2;
        g->out[0] = m0, g->out[1] = m1, g->out[2] = sw, g->nout = 3;
        g->in[0] = m0->src[0], g->in[1] = m1->src[0], g->nin = 2;
        g->kind = 2, g->call = "swiglu";
        return true;
    }

    // up to 3 products of one b back to back (q, k, v): one launch (b_read:
    // the launch reads b, false where a norm folded in replaces it)
    bool plan_shared_b(int i, gemv_plan *g, bool b_read = true) {
        *g = gemv_plan();
        tg_cuda_mmv &p = g->p;
        if (!tg_cuda_mmv_job_of(be, nodes[i], &p.job[0], &p.b)) return false;
        p.njob = 1;
        const tg_tensor *b = nodes[i]->src[1];
        if (overlap(nodes[i], b)) return false;
        int idx[TG_CUDA_MMV_MAX_JOBS] = {i};
        for (int j = next(i); j >= 0 && p.njob < TG_CUDA_MMV_MAX_JOBS; j = next(j)) {
            const tg_tensor *mm = nodes[j];
            tg_cuda_desc bj;
            if (mm->op != TG_OP_MUL_MAT || mm->src[1] != b || !tg_cuda_mmv_job_of(be, mm, &p.job[p.njob], &bj)) break;
            // written before the nodes in between run (views only): it must not
            // alias b or an earlier result
            bool ok = !overlap(mm, b);
            for (int q = 0; ok && q < p.njob; q++) ok = !overlap(mm, nodes[idx[q]]);
            p.njob++;
            if (!ok || !tg_cuda_mmv_compatible(p)) {
                p.njob--;
                break;
            }
            idx[p.njob - 1] = j;
        }
        if (p.njob < 2) return false;
        for (int q = 0; q < p.njob; q++) {
            if (q > 0) g->more[g->nmore++] = idx[q];
            g->out[g->nout++] = nodes[idx[q]], g->in[g->nin++] = nodes[idx[q]]->src[0];
        }
        g->kind = 3;
        if (p.njob == 3) plan_rope(g, idx[2], b_read ? b : nullptr);
        return true;
    }

    // h is product mm (its GEMV job) seen as heads {D, H, T, B}: the same
    // bytes, each column of D H floats split into H heads, column t + T b of
    // the product at (t, b), one batch
    static bool as_heads(const tg_tensor *h, const tg_tensor *mm, const tg_cuda_mmv_job &job) {
        const long long D = h->ne[0], H = h->ne[1], T = h->ne[2], B = h->ne[3];
        const tg_cuda_desc &d = job.d;
        if (h->type != TG_TYPE_F32 || h->data != mm->data || d.nb[0] != 4 || d.ne[2] * d.ne[3] != 1) return false;
        if (D * H != d.ne[0] || T * B != d.ne[1] || h->nb[0] != 4 || (H > 1 && (long long)h->nb[1] != D * 4)) return false;
        return (T == 1 || (long long)h->nb[2] == d.nb[1]) && (B == 1 || (long long)h->nb[3] == d.nb[1] * T);
    }
    static bool elem_aligned(const tg_tensor *t) {
        const size_t es = tg_type_size(t->type);
        bool ok = (uintptr_t)t->data % es == 0;
        for (int d = 0; d < TG_MAX_DIMS; d++) ok = ok && (t->ne[d] == 1 || t->nb[d] % es == 0);
        return ok;
    }

    // rope(q) and rope_kv_update(k_new, v_new) right after a q/k/v launch
    // (either order), their inputs its three products seen as heads: folded
    // into its epilogue (mmv.cuh tg_cuda_mmv_rope; the rope pair kernel's
    // conditions, interleaved pairs of an even D, and the update's own
    // position check or the graph's pre-check). The rope's result and the
    // caches, written by the launch, may overlap nothing it reads (weights,
    // b, positions) and none of its other outputs. b nullptr: not read (a
    // norm folded in; fold() then decides whether the norm's result is
    // written).
    void plan_rope(gemv_plan *g, int last, const tg_tensor *b) {
        tg_cuda_impl *impl = tg_cuda(be);
        tg_cuda_mmv &p = g->p;
        if (impl->sig.rope_fold == 1) return;
        const int i = next(last), k = i < 0 ? -1 : next(i);
        if (k < 0) return;
        const tg_tensor *rq = nodes[i], *kv = nodes[k];
        if (rq->op == TG_OP_ROPE_KV_UPDATE) std::swap(rq, kv);
        if (rq->op != TG_OP_ROPE || kv->op != TG_OP_ROPE_KV_UPDATE || kv->src[5] || rq->type != TG_TYPE_F32) return;
        const tg_rope_params a = tg_get_params<tg_rope_params>(rq), ak = tg_get_params<tg_rope_params>(kv);
        if (a.mode != TG_ROPE_INTERLEAVED || ak.mode != a.mode || ak.n_rot != a.n_rot || ak.base != a.base) return;
        const tg_tensor *pos = rq->src[1], *hq = rq->src[0], *hk = kv->src[2], *kc = kv->src[0], *vc = kv->src[1];
        if (pos != kv->src[4] || hq->ne[0] != hk->ne[0] || hq->ne[0] % 2 != 0 || hq->ne[2] != hk->ne[2] ||
            hq->ne[3] != hk->ne[3])
            return;
        // auto: not where the attention reading the caches takes the cluster
        // kernel, which gains more from starting under the rope pair kernel
        // (its prefetch before the wait) than the fold saves (the 125M llama:
        // step span 313 against 325 us with the fold; bench/NOTES.md session 28)
        if (impl->sig.rope_fold == 0)
            for (int j = k + 1; j < (int)nodes.size(); j++)
                if (nodes[j]->op == TG_OP_ATTENTION && nodes[j]->src[1] == kv) {
                    if (tg_cuda_attention_takes_cluster(be, nodes[j])) return;
                    break;
                }
        const tg_tensor *mq = g->out[0], *mk = g->out[1], *mv = g->out[2];
        if (!as_heads(hq, mq, p.job[0]) || !as_heads(hk, mk, p.job[1]) || !as_heads(kv->src[3], mv, p.job[2])) return;
        if (!elem_aligned(rq) || !elem_aligned(kc) || !elem_aligned(vc) || !elem_aligned(pos)) return;
        const tg_tensor *reads[5] = {b, pos, g->in[0], g->in[1], g->in[2]};
        for (const tg_tensor *r : reads)
            if (r && (overlap(rq, r) || overlap(kc, r) || overlap(vc, r))) return;
        for (const tg_tensor *o : {mq, mk, mv})
            if (overlap(kc, o) || overlap(vc, o) || overlap(pos, o) || overlap(rq, o)) return;
        if (overlap(rq, kc) || overlap(rq, vc) || overlap(kc, vc)) return;
        tg_cuda_mmv_rope &r = p.rope;
        r.D = (int)hq->ne[0], r.n_rot = a.n_rot, r.T = (int)hq->ne[2], r.B = (int)hq->ne[3];
        r.L = kc->ne[2], r.base = (double)a.base;
        r.check = !tg_cuda_kv_prechecked(be, kv);
        // (knob kv_validate 2 or 3: the separate validation kernel, or none,
        // where the update checks itself: the pair kernel then)
        if (r.check && impl->sig.kv_validate >= 2) {
            r = tg_cuda_mmv_rope();
            return;
        }
        r.qr = tg_cuda_desc_of(rq), r.kc = tg_cuda_desc_of(kc), r.vc = tg_cuda_desc_of(vc), r.pos = tg_cuda_desc_of(pos);
        r.pos_pre = tg_cuda_graph_const(impl, r.pos);
        r.err = impl->d_err;
        if (!tg_cuda_mmv_can_rope(p)) {
            r = tg_cuda_mmv_rope();
            return;
        }
        g->more[g->nmore++] = i, g->more[g->nmore++] = k;
        g->out[g->nout++] = rq, g->out[g->nout++] = kc, g->out[g->nout++] = vc;
        g->in[g->nin++] = pos;
        g->rope = true;
    }

    // mm then add(mm, r) or add(r, mm), the product read by nothing else
    bool plan_mm_add(int i, gemv_plan *g) {
        *g = gemv_plan();
        const tg_tensor *mm = nodes[i];
        const int j = next(i);
        if (j < 0 || nodes[j]->op != TG_OP_ADD || !sole(mm)) return false;
        const tg_tensor *add = nodes[j];
        const tg_tensor *r = add->src[0] == mm ? add->src[1] : add->src[1] == mm ? add->src[0] : nullptr;
        if (!r || r == mm || !tg_same_shape(r, mm) || add->type != TG_TYPE_F32) return false;
        if (r->type != TG_TYPE_F32 && r->type != TG_TYPE_F16 && r->type != TG_TYPE_BF16) return false;
        tg_cuda_mmv &p = g->p;
        p.njob = 1;
        if (!tg_cuda_mmv_job_of(be, mm, &p.job[0], &p.b)) return false;
        if (!tg_cuda_mmv_like(p.job[0], mm, r, &p.job[0].r) || !tg_cuda_mmv_like(p.job[0], mm, add, &p.job[0].s))
            return false;
        const tg_tensor *b = mm->src[1];
        if (overlap(add, b) || overlap(mm, b) || overlap(mm, r) || !may_write(add, r) || !may_write(add, mm))
            return false;
        g->more[0] = j, g->nmore = 1;
        g->out[0] = mm, g->out[1] = add, g->nout = 2;
        g->in[0] = mm->src[0], g->in[1] = r, g->nin = 2;
        g->kind = 1, g->call = "add";
        return true;
    }

    // one GEMV product on its own (taken only with a norm folded into it)
    bool plan_one(int i, gemv_plan *g) {
        *g = gemv_plan();
        const tg_tensor *mm = nodes[i];
        tg_cuda_mmv &p = g->p;
        p.njob = 1;
        if (!tg_cuda_mmv_job_of(be, mm, &p.job[0], &p.b) || overlap(mm, mm->src[1])) return false;
        g->out[0] = mm, g->nout = 1;
        g->in[0] = mm->src[0], g->nin = 1;
        return true;
    }

    // rope(q) next to rope_kv_update (either order): one launch. The update
    // writes only its caches, the rope only its output: neither may overlap
    // what the other reads or writes.
    bool rope_pair(int i, tg_status *st) {
        const int j = next(i);
        if (j < 0) return false;
        const tg_tensor *a = nodes[i], *b = nodes[j];
        if (a->op == TG_OP_ROPE_KV_UPDATE) std::swap(a, b);
        if (a->op != TG_OP_ROPE || b->op != TG_OP_ROPE_KV_UPDATE) return false;
        if (a->type != TG_TYPE_F32 || a->src[0]->type != TG_TYPE_F32) return false;
        for (int s = 0; s < 5; s++)
            if (overlap(a, b->src[s])) return false;
        for (int s = 0; s < 2; s++)
            if (overlap(b->src[s], a->src[0]) || overlap(b->src[s], a->src[1])) return false;
        if (!tg_cuda_rope_pair(be, a, b, st)) return false;
        done[j] = 1;
        counts[4]++;
        return true;
    }

    // attention, then a quantized GEMV launch (the o product + residual)
    // reading its output as b: where the attention takes the split and
    // combine kernels (tg_cuda_attention_split says so through
    // impl->attn_qlink), the combine kernel, one block per query head,
    // quantizes its output for the product (at the scratch's start; the split
    // kernel's partial sums past the largest quantized b of the graph), and the
    // product's launch has no quantize kernel before it
    int qin_node = -1;  // the product whose launch takes qin_attn
    const void *qin_b = nullptr;
    tg_cuda_mmv_qin qin_attn;
    bool attention_link(int i, tg_status *st) {
        tg_cuda_impl *impl = tg_cuda(be);
        const int k = next(i);
        gemv_plan g;
        if (impl->sig.qlink == 1 || k < 0 || nodes[k]->op != TG_OP_MUL_MAT || !plan_mm_add(k, &g) ||
            !quant_gemv(be, g.p))
            return false;
        const tg_tensor *att = nodes[i];
        const tg_cuda_desc &b = g.p.b;
        const long long K = att->ne[0] * att->ne[1], N = att->ne[2] * att->ne[3];
        if (att->type != TG_TYPE_F32 || !tg_is_contiguous(att) || att->ne[0] % 32 != 0 || b.data != att->data ||
            b.type != TG_TYPE_F32 || b.nb[0] != 4 || b.ne[0] != K || b.ne[1] != N || (N > 1 && b.nb[1] != 4 * K) ||
            b.ne[2] * b.ne[3] != 1 || g.p.job[0].a.ne[0] != K)
            return false;
        impl->attn_qlink = tg_cuda_impl::attn_qlink_t();
        impl->attn_qlink.want = true;
        impl->attn_qlink.part_off = qregion;
        *st = tg_op_get(TG_OP_ATTENTION).cuda(be, nodes[i]);
        if (*st == TG_OK && impl->attn_qlink.q) {
            qin_node = k, qin_b = att->data;
            qin_attn = tg_cuda_mmv_qin();
            qin_attn.q = impl->attn_qlink.q, qin_attn.d = impl->attn_qlink.d;
        }
        impl->attn_qlink = tg_cuda_impl::attn_qlink_t();
        return true;
    }

    bool try_fuse(int i, tg_status *st) {
        switch (nodes[i]->op) {
            case TG_OP_ATTENTION: return attention_link(i, st);
            case TG_OP_ROPE:
            case TG_OP_ROPE_KV_UPDATE: return rope_pair(i, st);
            case TG_OP_RMS_NORM: return norm_mul(i, st);
            case TG_OP_MUL_MAT: {
                gemv_plan g;
                if (!plan_swiglu(i, &g) && !plan_shared_b(i, &g) && !plan_mm_add(i, &g)) return false;
                if (i == qin_node && g.p.b.data == qin_b && !g.p.norm.x && quant_gemv(be, g.p)) {
                    g.p.qin = qin_attn;  // the attention's combine kernel quantized b
                    counts[7]++;
                }
                qin_node = -1;
                *st = launch(g);
                return true;
            }
            default: return false;
        }
    }
};

// What a node writes: its own bytes, and the sources written in place (cpy's
// destination, the caches of rope_kv_update, a delta_rule state). Views write
// nothing (an op into a view is a node of its own).
template <typename F> void for_each_written(const tg_tensor *t, F add) {
    if (t->op == TG_OP_VIEW) return;
    add(t);
    if (t->op == TG_OP_CPY) add(t->src[1]);
    if (t->op == TG_OP_ROPE_KV_UPDATE) add(t->src[0]), add(t->src[1]);
    if (t->op == TG_OP_DELTA_RULE) add(t->src[5]);
}

void note_written(tg_cuda_impl *impl, const std::vector<tg_tensor *> &nodes) {
    impl->graph_written.clear();
    for (const tg_tensor *t : nodes)
        for_each_written(t, [&](const tg_tensor *w) {
            if (!w || !w->data) return;
            uintptr_t lo, hi;
            span(w, &lo, &hi);
            impl->graph_written.push_back({lo, hi});
        });
}

// Before node t runs (or the fusion that took it): a kept rounding of b
// (tc_b) is dropped when t writes b's bytes. Fused nodes are contiguous in
// node order, so checking each at its own index is checking before any later
// product reads the rounding.
void drop_written_b(tg_cuda_impl *impl, const tg_tensor *t) {
    if (!impl->tc_b) return;
    for_each_written(t, [&](const tg_tensor *w) {
        if (impl->tc_b && w && w->data && overlap(w, impl->tc_b)) impl->tc_b = nullptr;
    });
}

tg_status enqueue_nodes(tg_backend *be, const std::vector<tg_tensor *> &nodes) {
    tg_cuda_impl *impl = tg_cuda(be);
    for (int &c : impl->fusions) c = 0;
    if (!impl->fuse) {
        for (tg_tensor *t : nodes)
            if (t->op != TG_OP_VIEW) {
                drop_written_b(impl, t);
                tg_status s = tg_op_get(t->op).cuda(be, t);
                if (s != TG_OK) return s;
            }
        return TG_OK;
    }
    matcher m(be, nodes);
    for (int i = 0; i < (int)nodes.size(); i++) {
        if (nodes[i]->op == TG_OP_VIEW) continue;
        drop_written_b(impl, nodes[i]);
        if (m.done[i]) continue;
        tg_status s = TG_OK;
        if (!m.try_fuse(i, &s)) s = tg_op_get(nodes[i]->op).cuda(be, nodes[i]);
        if (s != TG_OK) return s;
    }
    for (int k = 0; k < TG_CUDA_FUSION_KINDS; k++) impl->fusions[k] = m.counts[k];
    return TG_OK;
}

}  // namespace

bool tg_cuda_overlap(const tg_tensor *a, const tg_tensor *b) { return overlap(a, b); }

bool tg_cuda_graph_const(const tg_cuda_impl *impl, const tg_cuda_desc &d) {
    if (impl->graph_written.empty() || !d.data) return false;
    uintptr_t lo, hi;
    span_of(d.data, d.type, d.ne, d.nb, &lo, &hi);
    for (const auto &w : impl->graph_written)
        if (lo < w.second && w.first < hi) return false;
    return true;
}

// Every element of t has bytes of its own (no view that maps two indices onto
// the same bytes), and t's rows (dims 2 and 3: positions, sequences) start on
// 128-byte lines, so no cache line holds bytes of two positions or sequences.
bool rows_apart(const tg_tensor *t) {
    int d[TG_MAX_DIMS], n = 0;
    for (int i = 0; i < TG_MAX_DIMS; i++)
        if (t->ne[i] > 1) d[n++] = i;
    std::sort(d, d + n, [&](int a, int b) { return t->nb[a] < t->nb[b]; });
    size_t extent = tg_type_size(t->type);  // bytes spanned by the dims below
    for (int i = 0; i < n; i++) {
        if (t->nb[d[i]] < extent) return false;
        extent = t->nb[d[i]] * (size_t)t->ne[d[i]];
    }
    if ((uintptr_t)t->data % 128 != 0) return false;
    for (int i = 2; i < TG_MAX_DIMS; i++)
        if (t->ne[i] > 1 && t->nb[i] % 128 != 0) return false;
    return true;
}

bool tg_cuda_attention_rows_pre(const tg_cuda_impl *impl, const tg_tensor *dst) {
    if (!impl->graph_nodes || dst->op != TG_OP_ATTENTION) return false;
    const tg_tensor *k = dst->src[1], *v = dst->src[2], *pos = dst->src[3];
    // (validation off, knob kv_validate 3, lets a bad position write another
    // sequence's row; decode only: each block scans the T positions of its
    // sequence for the least)
    if (impl->sig.kv_validate == 3 || dst->src[0]->ne[2] > 16) return false;
    if (!k->data || !v->data || !rows_apart(k) || !rows_apart(v) || !tg_cuda_graph_const(impl, tg_cuda_desc_of(pos)))
        return false;
    for (const tg_tensor *n : *impl->graph_nodes) {
        bool ok = true;
        for_each_written(n, [&](const tg_tensor *w) {
            if (!ok || !w || !w->data || (!overlap(w, k) && !overlap(w, v))) return;
            ok = n->op == TG_OP_ROPE_KV_UPDATE && same_layout(n->src[0], k) && same_layout(n->src[1], v) &&
                 same_layout(n->src[4], pos);
        });
        if (!ok) return false;
    }
    return true;
}

tg_status tg_cuda_enqueue_nodes(tg_backend *be, const std::vector<tg_tensor *> &nodes) {
    tg_cuda_impl *impl = tg_cuda(be);
    note_written(impl, nodes);
    impl->graph_nodes = &nodes;
    impl->tc_b = nullptr;
    impl->tc_reuse = true;
    const tg_status s = enqueue_nodes(be, nodes);
    impl->tc_reuse = false;
    impl->tc_b = nullptr;
    impl->graph_written.clear();
    impl->graph_nodes = nullptr;
    return s;
}

void tg_cuda_fusions_last(tg_backend *be, int counts[TG_CUDA_FUSION_KINDS]) {
    for (int k = 0; k < TG_CUDA_FUSION_KINDS; k++) counts[k] = tg_cuda(be)->fusions[k];
}
