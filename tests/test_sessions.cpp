// test_sessions.cpp - sessions an app can build on (issue 12): ragged batches
// equal sequence-by-sequence evaluation, a few hundred random sequence
// operations checked against a plain model of what each sequence holds,
// state save/load (round trips, every corruption refused with the session
// unchanged), F16/BF16 caches and states on the held-out recall prompts.
// Every body runs on the CPU and, when a device exists, on CUDA (names end in
// Cuda; they skip themselves without one).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <tuple>

#include "fuzz/state_rig.h"
#include "model_util.h"
#include "test_util.h"

namespace {

const std::string k_root = TG_SOURCE_DIR;


tg_backend *backend_for(bool cuda) { return cuda ? tg_backend_cuda(0) : tg_backend_cpu(2); }

// All logits of a token history run from scratch in a fresh one-sequence
// session, in chunks of the given sizes (default: one pass): the plain model
// of what a session's sequence must produce.
std::vector<float> reference_logits(const tgm::model *m, const std::vector<int32_t> &toks, int n_ctx,
                                    std::vector<int> chunks = {}) {
    std::vector<float> out, l;
    tgm::session *s = tgm::session_new(m, 1, n_ctx);
    EXPECT_NE(s, nullptr) << tg_last_error();
    if (!s) return out;
    if (chunks.empty()) chunks.push_back((int)toks.size());
    size_t at = 0;
    for (int c : chunks) {
        EXPECT_EQ(tgm::session_eval(s, 0, 1, toks.data() + at, c, true, &l), TG_OK) << tg_last_error();
        out.insert(out.end(), l.begin(), l.end());
        at += (size_t)c;
    }
    tgm::session_free(s);
    return out;
}

// Random tokens of the recall task's alphabet (the shipped models' inputs).
int32_t recall_token(std::mt19937 &rng) {
    static const char al[] = "abcdefgh12345678pqrstuvw= ?";
    return (int32_t)(unsigned char)al[rng() % (sizeof al - 1)];
}

// What a session holds that a state must preserve: its whole-session state
// bytes (tokens, KV rows up to each length, recurrent states) and lengths.
std::vector<uint8_t> fingerprint(tgm::session *s) {
    std::vector<uint8_t> b;
    EXPECT_EQ(tgm::session_state_save(s, -1, &b), TG_OK) << tg_last_error();
    for (int n : s->n_past) b.insert(b.end(), (uint8_t *)&n, (uint8_t *)&n + 4);
    return b;
}

// (model file, cuda?)
class SessionShipped : public ::testing::TestWithParam<std::tuple<const char *, bool>> {
   protected:
    void SetUp() override {
        cuda = std::get<1>(GetParam());
        if (cuda && !tg_cuda_available()) GTEST_SKIP() << "no CUDA device";
        be = backend_for(cuda);
        ASSERT_NE(be, nullptr) << tg_last_error();
        m = tgm::model_load((k_root + "/models/" + std::get<0>(GetParam()) + ".gguf").c_str(), be);
        ASSERT_NE(m, nullptr) << tg_last_error();
        V = m->hp.n_vocab;
    }
    void TearDown() override {
        tgm::model_free(m);
        tg_backend_free(be);
    }
    bool cuda = false;
    tg_backend *be = nullptr;
    tgm::model *m = nullptr;
    int V = 0;
};

std::string shipped_name(const ::testing::TestParamInfo<std::tuple<const char *, bool>> &i) {
    std::string n = std::get<0>(i.param);
    return n.substr(0, n.find('-')) + (std::get<1>(i.param) ? "Cuda" : "Cpu");
}

// Ragged batches (sequences of different lengths, some absent, tokens of
// different sequences interleaved, logits wanted here and there) in one
// graph each: every wanted row equals the sequence run alone, in the same
// chunks, within 1e-5.
TEST_P(SessionShipped, RaggedBatchEqualsSequenceBySequence) {
    const int n_seq = 4, n_ctx = 64;
    tgm::session *s = tgm::session_new(m, n_seq, n_ctx);
    ASSERT_NE(s, nullptr) << tg_last_error();
    std::mt19937 rng(7);
    std::uniform_int_distribution<int> tok(0, 255);
    std::vector<std::vector<int32_t>> hist(n_seq);
    std::vector<std::vector<int>> chunks(n_seq);  // each step's token count per sequence
    // per step, tokens per sequence (0: absent); the first is a ragged prompt
    const std::vector<std::vector<int>> steps = {{5, 11, 1, 8}, {1, 1, 1, 1}, {0, 3, 0, 1}, {2, 0, 7, 0},
                                                 {1, 1, 0, 1},  {9, 2, 4, 3}, {0, 0, 1, 0}};
    for (size_t si = 0; si < steps.size(); si++) {
        SCOPED_TRACE("step " + std::to_string(si));
        tgm::batch b;
        std::vector<int> left = steps[si];
        std::vector<int> next(n_seq);
        for (int q = 0; q < n_seq; q++) next[q] = s->n_past[q];
        // round-robin over the sequences: their tokens interleave in the batch
        for (bool any = true; any;) {
            any = false;
            for (int q = 0; q < n_seq; q++)
                if (left[q] > 0) {
                    const int32_t t = recall_token(rng);
                    hist[q].push_back(t);
                    b.add(t, next[q]++, q, left[q] == 1 || tok(rng) % 3 == 0);
                    left[q]--, any = true;
                }
        }
        for (int q = 0; q < n_seq; q++)
            if (steps[si][q]) chunks[q].push_back(steps[si][q]);
        std::vector<float> out(7, NAN);
        ASSERT_EQ(tgm::session_decode(s, b, &out), TG_OK) << tg_last_error();
        int row = 0;
        for (int i = 0; i < b.size(); i++)
            if (b.logits[i]) {
                const int q = b.seq[i];
                const std::vector<float> ref = reference_logits(m, hist[q], n_ctx, chunks[q]);
                ASSERT_EQ(ref.size(), hist[q].size() * V);
                EXPECT_LT(tgt::rel_error(&out[(size_t)row * V], &ref[(size_t)b.pos[i] * V], V), 1e-5)
                    << "token " << i << " of sequence " << q << " at " << b.pos[i];
                row++;
            }
        EXPECT_EQ(out.size(), (size_t)row * V);
        for (int q = 0; q < n_seq; q++) EXPECT_EQ(s->tokens[q], hist[q]);
    }
    EXPECT_LE(s->graphs.size(), (size_t)tgm::session_max_graphs);
    tgm::session_free(s);
}

// A batch larger than n_ubatch runs in rounds: the same logits as one graph.
TEST_P(SessionShipped, BatchRoundsEqualOneGraph) {
    tgm::session_params p;
    p.n_seq = 2, p.n_ctx = 48, p.n_ubatch = 5;
    tgm::session *small = tgm::session_new(m, p);
    p.n_ubatch = 0;
    tgm::session *big = tgm::session_new(m, p);
    ASSERT_TRUE(small && big) << tg_last_error();
    EXPECT_EQ(big->n_ubatch, 48);
    std::mt19937 rng(8);
    tgm::batch b;
    for (int i = 0; i < 17; i++) b.add(rng() % 256, i, 0, true);
    for (int i = 0; i < 6; i++) b.add(rng() % 256, i, 1, i % 2 == 0);
    // poisoned and already of the result's size (nothing is zero-filled
    // first): every wanted row must be written. The small session's rounds
    // each want rows of both sequences, slots apart (the staging copy); the
    // big session's one graph wants all 20 in a row (the direct read)
    std::vector<float> a((size_t)(17 + 3) * V, NAN), c((size_t)(17 + 3) * V, NAN);
    ASSERT_EQ(tgm::session_decode(small, b, &a), TG_OK) << tg_last_error();
    ASSERT_EQ(tgm::session_decode(big, b, &c), TG_OK) << tg_last_error();
    ASSERT_EQ(a.size(), (size_t)(17 + 3) * V);
    for (size_t i = 0; i < a.size(); i++) ASSERT_TRUE(std::isfinite(a[i]) && std::isfinite(c[i])) << "logit " << i;
    EXPECT_LT(tgt::rel_error(a.data(), c.data(), a.size()), 1e-5);
    EXPECT_EQ(small->n_past, big->n_past);
    tgm::session_free(small);
    tgm::session_free(big);
}

// A bad batch changes nothing and says what is wrong.
TEST_P(SessionShipped, BadBatchIsRefusedAndChangesNothing) {
    tgm::session *s = tgm::session_new(m, 2, 16);
    ASSERT_NE(s, nullptr);
    std::vector<float> l;
    tgm::batch ok;
    ok.add(256, 0, 0, true);
    ok.add(65, 0, 1, true);
    ASSERT_EQ(tgm::session_decode(s, ok, &l), TG_OK) << tg_last_error();
    const std::vector<uint8_t> before = fingerprint(s);
    struct bad {
        tgm::batch b;
        const char *fragment;
    };
    std::vector<bad> cases(6);
    cases[0].b.add(66, 2, 0, true), cases[0].fragment = "continues at 1";  // a gap
    cases[1].b.add(66, 1, 0, true), cases[1].b.add(67, 1, 0, true), cases[1].fragment = "continues at 2";
    cases[2].b.add(66, 1, 2, true), cases[2].fragment = "sequence 2 outside";
    cases[3].b.add(258, 1, 0, true), cases[3].fragment = "token id 258";
    for (int i = 0; i < 16; i++) cases[4].b.add(66, 1 + i, 1, false);
    cases[4].fragment = "exceed the context of 16";
    cases[5].fragment = "empty";
    for (auto &c : cases) {
        EXPECT_EQ(tgm::session_decode(s, c.b, &l), TG_ERR_ARG) << c.fragment;
        EXPECT_NE(strstr(tg_last_error(), "[session_decode]"), nullptr) << tg_last_error();
        EXPECT_NE(strstr(tg_last_error(), c.fragment), nullptr) << tg_last_error();
        EXPECT_EQ(fingerprint(s), before) << c.fragment;
    }
    tgm::session_free(s);
}

// A few hundred random operations (evaluate, remove, copy, keep, clear,
// save, load) against a plain model: each sequence's token history. Every
// wanted logit row must equal the history run from scratch in one pass, and
// every sequence must hold exactly its history. The tolerance is 1e-4, not
// 1e-5: the engine's own results depend on how a history was split into
// steps (a prompt at once against token by token differs by up to ~1.3e-5 on
// these inputs, the CPU's products summing in another order); a wrong row,
// a lost or stale state shows as O(1).
TEST_P(SessionShipped, RandomSeqOpsMatchPlainModel) {
    const int n_seq = 3, n_ctx = 40, n_ops = 300;
    tgm::session_params sp;
    sp.n_seq = n_seq, sp.n_ctx = n_ctx, sp.checkpoints = true;
    tgm::session *s = tgm::session_new(m, sp);
    ASSERT_NE(s, nullptr) << tg_last_error();
    std::mt19937 rng(20261201);
    auto rnd = [&](int n) { return (int)(rng() % (unsigned)n); };
    std::vector<std::vector<int32_t>> hist(n_seq);
    struct saved {
        int seq;  // -1: the session
        std::vector<uint8_t> bytes;
        std::vector<std::vector<int32_t>> hist;
    };
    std::vector<saved> saves;
    int checked_rows = 0, counts[8] = {};
    for (int op = 0; op < n_ops; op++) {
        SCOPED_TRACE("op " + std::to_string(op));
        const int kind = rnd(21);
        if (kind < 9) {  // evaluate a ragged batch
            counts[0]++;
            tgm::batch b;
            std::vector<int> next(n_seq);
            for (int q = 0; q < n_seq; q++) next[q] = s->n_past[q];
            const int n_tok = 1 + rnd(8);
            for (int i = 0; i < n_tok; i++) {
                const int q = rnd(n_seq);
                if (next[q] >= n_ctx) continue;
                b.add(recall_token(rng), next[q]++, q, rnd(3) == 0);
            }
            if (b.size() == 0) continue;
            std::vector<float> out;
            ASSERT_EQ(tgm::session_decode(s, b, &out), TG_OK) << tg_last_error();
            for (int i = 0; i < b.size(); i++) hist[b.seq[i]].push_back(b.token[i]);
            int row = 0;
            for (int i = 0; i < b.size(); i++)
                if (b.logits[i]) {
                    const std::vector<float> ref = reference_logits(m, hist[b.seq[i]], n_ctx);
                    ASSERT_LT(tgt::rel_error(&out[(size_t)row++ * V], &ref[(size_t)b.pos[i] * V], V), 1e-4)
                        << "sequence " << b.seq[i] << " position " << b.pos[i];
                    checked_rows++;
                }
        } else if (kind < 12) {  // remove a tail, or a range inside (the rest moves down)
            counts[1]++;
            const int q = rnd(n_seq), len = (int)hist[q].size();
            const int p0 = rnd(len + 1);
            if (len > 2 && rnd(4) == 0) {
                const int a = rnd(len - 1), e = a + 1 + rnd(len - 1 - a);  // [a, e), e < len
                ASSERT_EQ(tgm::session_seq_rm(s, q, a, e), TG_OK) << tg_last_error();
                hist[q].erase(hist[q].begin() + a, hist[q].begin() + e);
            } else {
                ASSERT_EQ(tgm::session_seq_rm(s, q, p0, rnd(2) ? -1 : len + rnd(3)), TG_OK) << tg_last_error();
                hist[q].resize((size_t)p0);
            }
        } else if (kind < 14) {  // copy
            counts[2]++;
            const int a = rnd(n_seq), b = rnd(n_seq);
            ASSERT_EQ(tgm::session_seq_cp(s, a, b), TG_OK) << tg_last_error();
            hist[b] = hist[a];
        } else if (kind < 15) {  // keep one, or clear all
            counts[3]++;
            const int q = rnd(n_seq + 1);
            if (q == n_seq) {
                ASSERT_EQ(tgm::session_clear(s), TG_OK);
                for (auto &h : hist) h.clear();
            } else {
                ASSERT_EQ(tgm::session_seq_keep(s, q), TG_OK);
                for (int i = 0; i < n_seq; i++)
                    if (i != q) hist[i].clear();
            }
        } else if (kind < 17) {  // save the session or one sequence
            counts[4]++;
            saved sv;
            sv.seq = rnd(n_seq + 1) - 1;
            ASSERT_EQ(tgm::session_state_save(s, sv.seq, &sv.bytes), TG_OK) << tg_last_error();
            sv.hist = hist;
            saves.push_back(std::move(sv));
        } else if (kind == 20) {  // checkpoint a sequence's recurrent state
            counts[6]++;
            ASSERT_EQ(tgm::session_seq_checkpoint(s, rnd(n_seq)), TG_OK) << tg_last_error();
        } else if (!saves.empty()) {  // load a saved state
            counts[5]++;
            const saved &sv = saves[(size_t)rnd((int)saves.size())];
            if (sv.seq < 0) {
                ASSERT_EQ(tgm::session_state_load(s, -1, sv.bytes.data(), sv.bytes.size()), TG_OK) << tg_last_error();
                hist = sv.hist;
            } else {
                const int dst = rnd(n_seq);
                ASSERT_EQ(tgm::session_state_load(s, dst, sv.bytes.data(), sv.bytes.size()), TG_OK)
                    << tg_last_error();
                hist[dst] = sv.hist[sv.seq];
            }
        }
        for (int q = 0; q < n_seq; q++) {
            ASSERT_EQ(s->tokens[q], hist[q]) << "sequence " << q;
            ASSERT_EQ(s->n_past[q], (int)hist[q].size());
        }
    }
    // the end: one more token on every sequence, against the plain model
    tgm::batch b;
    for (int q = 0; q < n_seq; q++)
        if ((int)hist[q].size() < n_ctx) b.add(42, (int)hist[q].size(), q, true), hist[q].push_back(42);
    std::vector<float> out;
    ASSERT_EQ(tgm::session_decode(s, b, &out), TG_OK) << tg_last_error();
    for (int i = 0; i < b.size(); i++) {
        const std::vector<float> ref = reference_logits(m, hist[b.seq[i]], n_ctx);
        EXPECT_LT(tgt::rel_error(&out[(size_t)i * V], &ref[(size_t)b.pos[i] * V], V), 1e-4) << "sequence " << b.seq[i];
    }
    printf("random ops: %d evals (%d rows checked), %d removals (%lld tokens replayed), %d copies, %d keep/clear, "
           "%d saves, %d loads, %d checkpoints\n",
           counts[0], checked_rows, counts[1], s->n_replayed, counts[2], counts[3], counts[4], counts[5], counts[6]);
    EXPECT_GT(checked_rows, 50);
    EXPECT_GT(counts[5], 5);
    tgm::session_free(s);
}

// Roll a sequence back to its checkpoint: nothing is re-evaluated and the
// next step is bit-identical to the step first taken there; a rollback past
// the checkpoint re-evaluates only the tokens after it. Llama models never
// re-evaluate (a removal only shortens the sequence).
TEST_P(SessionShipped, SeqRollbackUsesTheCheckpoint) {
    tgm::session_params sp;
    sp.n_seq = 2, sp.n_ctx = 48, sp.checkpoints = true;
    tgm::session *s = tgm::session_new(m, sp);
    ASSERT_NE(s, nullptr) << tg_last_error();
    const bool recurrent = m->hp.kind == tgm::arch::hybrid;
    std::vector<int32_t> prompt = tgm::tokenize("h8=v3 a8=q8 a4=r3 c2=t2 ?h8=", true);
    const int P = (int)prompt.size();
    std::vector<float> l, first, again;
    ASSERT_EQ(tgm::session_eval(s, 0, 1, prompt.data(), P, false, &l), TG_OK);
    ASSERT_EQ(tgm::session_seq_checkpoint(s, 0), TG_OK) << tg_last_error();
    const int32_t cont[4] = {118, 51, 257, 32};
    ASSERT_EQ(tgm::session_eval(s, 0, 1, cont, 1, false, &first), TG_OK);
    ASSERT_EQ(tgm::session_eval(s, 0, 1, cont + 1, 3, false, &l), TG_OK);
    ASSERT_EQ(tgm::session_seq_rm(s, 0, P, -1), TG_OK) << tg_last_error();
    EXPECT_EQ(s->n_replayed, 0);
    EXPECT_EQ(s->n_past[0], P);
    ASSERT_EQ(tgm::session_eval(s, 0, 1, cont, 1, false, &again), TG_OK);
    EXPECT_EQ(memcmp(first.data(), again.data(), first.size() * 4), 0) << "the step after the rollback";
    // past the checkpoint: only the tokens after it run again
    ASSERT_EQ(tgm::session_eval(s, 0, 1, cont + 1, 3, false, &l), TG_OK);
    ASSERT_EQ(tgm::session_seq_rm(s, 0, P + 2, -1), TG_OK) << tg_last_error();
    EXPECT_EQ(s->n_replayed, recurrent ? 2 : 0);
    // a copy carries the checkpoint; before it, the copy replays from zero
    ASSERT_EQ(tgm::session_seq_cp(s, 0, 1), TG_OK);
    ASSERT_EQ(tgm::session_seq_rm(s, 1, P, -1), TG_OK);
    EXPECT_EQ(s->n_replayed, recurrent ? 2 : 0);
    ASSERT_EQ(tgm::session_seq_rm(s, 1, P - 3, -1), TG_OK);
    EXPECT_EQ(s->n_replayed, recurrent ? 2 + P - 3 : 0);
    std::vector<int32_t> hist(prompt.begin(), prompt.end() - 3);
    hist.push_back(cont[0]);
    ASSERT_EQ(tgm::session_eval(s, 1, 1, cont, 1, false, &l), TG_OK);
    const std::vector<float> ref = reference_logits(m, hist, 48);
    EXPECT_LT(tgt::rel_error(l.data(), &ref[(hist.size() - 1) * V], V), 1e-4);
    tgm::session *plain = tgm::session_new(m, 1, 16);
    EXPECT_EQ(tgm::session_seq_checkpoint(plain, 0), recurrent ? TG_ERR_ARG : TG_OK);
    tgm::session_free(plain);
    tgm::session_free(s);
}

// Save, then continue; load the saved state into a fresh session (and into
// another sequence slot), then continue the same way: identical logits.
TEST_P(SessionShipped, StateSaveContinueEqualsLoadContinue) {
    tgm::session *a = tgm::session_new(m, 2, 48);
    tgm::session *b = tgm::session_new(m, 2, 48);
    ASSERT_TRUE(a && b) << tg_last_error();
    std::vector<int32_t> prompt = tgm::tokenize("h8=v3 a8=q8 a4=r3 c2=t2 ?h8=", true);
    std::vector<int32_t> other = tgm::tokenize("b1=p2 ?b1=", true);
    std::vector<float> la, lb;
    ASSERT_EQ(tgm::session_eval(a, 0, 1, prompt.data(), (int)prompt.size(), false, &la), TG_OK);
    ASSERT_EQ(tgm::session_eval(a, 1, 1, other.data(), (int)other.size(), false, &la), TG_OK);
    std::vector<uint8_t> whole, seq0;
    ASSERT_EQ(tgm::session_state_save(a, -1, &whole), TG_OK) << tg_last_error();
    ASSERT_EQ(tgm::session_state_save(a, 0, &seq0), TG_OK) << tg_last_error();
    const std::string path = ::testing::TempDir() + "tinygml_state_" + shipped_name({GetParam(), 0}) + ".bin";
    ASSERT_EQ(tgm::session_state_save_file(a, -1, path.c_str()), TG_OK) << tg_last_error();
    auto continue_with = [&](tgm::session *s, int seq, std::vector<float> *all) {
        all->clear();
        std::vector<float> l;
        for (int32_t t : {118, 51, 257, 32}) {
            ASSERT_EQ(tgm::session_eval(s, seq, 1, &t, 1, false, &l), TG_OK) << tg_last_error();
            all->insert(all->end(), l.begin(), l.end());
        }
    };
    std::vector<float> ref, got;
    continue_with(a, 0, &ref);
    ASSERT_EQ(tgm::session_state_load_file(b, -1, path.c_str()), TG_OK) << tg_last_error();
    EXPECT_EQ(b->n_past, std::vector<int>({(int)prompt.size(), (int)other.size()}));
    continue_with(b, 0, &got);
    ASSERT_EQ(ref.size(), got.size());
    EXPECT_EQ(memcmp(ref.data(), got.data(), ref.size() * 4), 0) << "whole-session state";
    // the sequence state, loaded into the other slot of a used session
    ASSERT_EQ(tgm::session_state_load(b, 1, seq0.data(), seq0.size()), TG_OK) << tg_last_error();
    continue_with(b, 1, &got);
    EXPECT_EQ(memcmp(ref.data(), got.data(), ref.size() * 4), 0) << "sequence state in slot 1";
    // and the state as saved, on the session that made it (after it moved on)
    ASSERT_EQ(tgm::session_state_load(a, -1, whole.data(), whole.size()), TG_OK) << tg_last_error();
    continue_with(a, 0, &got);
    EXPECT_EQ(memcmp(ref.data(), got.data(), ref.size() * 4), 0) << "reloaded into its own session";
    EXPECT_EQ(tgm::session_state_load_file(b, -1, (path + ".missing").c_str()), TG_ERR_IO);
    std::remove(path.c_str());
    tgm::session_free(a);
    tgm::session_free(b);
}

// F16 and BF16 K, V and states: the held-out recall prompts, all in one
// session of ragged batches (prompts of 29..53 tokens, then greedy decoding
// of every sequence at once), answer as well as with F32 caches.
TEST_P(SessionShipped, CacheTypesKeepHeldOutAccuracy) {
    std::vector<std::pair<std::string, std::string>> items;
    std::ifstream f(k_root + "/tests/fixtures/recall_heldout.txt");
    for (std::string line; std::getline(f, line);) {
        const size_t tab = line.find('\t');
        if (tab != std::string::npos) items.push_back({line.substr(0, tab), line.substr(tab + 1)});
    }
    ASSERT_GE(items.size(), 100u);
    const int B = (int)items.size(), max_new = 6;
    auto accuracy = [&](tg_type tk, tg_type tv, tg_type ts) {
        tgm::session_params p;
        p.n_seq = B, p.n_ctx = 64, p.type_k = tk, p.type_v = tv, p.type_state = ts;
        tgm::session *s = tgm::session_new(m, p);
        EXPECT_NE(s, nullptr) << tg_last_error();
        if (!s) return -1;
        tgm::batch b;
        for (int i = 0; i < B; i++) {
            const std::vector<int32_t> t = tgm::tokenize(items[i].first, true);
            for (size_t j = 0; j < t.size(); j++) b.add(t[j], (int)j, i, j + 1 == t.size());
        }
        std::vector<float> logits;
        EXPECT_EQ(tgm::session_decode(s, b, &logits), TG_OK) << tg_last_error();
        std::vector<std::string> out(B);
        std::vector<bool> done(B, false);
        for (int step = 0; step < max_new && logits.size() == (size_t)B * V; step++) {
            b.clear();
            for (int i = 0; i < B; i++) {
                const float *l = &logits[(size_t)i * V];
                const int32_t t = (int32_t)(std::max_element(l, l + V) - l);
                if (t == m->hp.eos) done[i] = true;
                if (!done[i]) out[i] += tgm::detokenize(t);
                b.add(t, s->n_past[i], i, true);
            }
            if (step + 1 < max_new) EXPECT_EQ(tgm::session_decode(s, b, &logits), TG_OK) << tg_last_error();
        }
        int correct = 0;
        for (int i = 0; i < B; i++) correct += out[i] == items[i].second;
        tgm::session_free(s);
        return correct;
    };
    const int f32 = accuracy(TG_TYPE_F32, TG_TYPE_F32, TG_TYPE_F32);
    const int f16 = accuracy(TG_TYPE_F16, TG_TYPE_F16, TG_TYPE_F16);
    const int bf16 = accuracy(TG_TYPE_BF16, TG_TYPE_BF16, TG_TYPE_BF16);
    const int mixed = accuracy(TG_TYPE_F16, TG_TYPE_BF16, TG_TYPE_F32);
    printf("%s held-out exact match of %d: f32 %d, f16 %d, bf16 %d, k f16 / v bf16 / state f32 %d\n",
           std::get<0>(GetParam()), B, f32, f16, bf16, mixed);
    EXPECT_GE(f32, (int)(0.99 * B));
    EXPECT_EQ(f16, f32);
    EXPECT_EQ(bf16, f32);
    EXPECT_EQ(mixed, f32);
}

INSTANTIATE_TEST_SUITE_P(Session, SessionShipped,
                         ::testing::Combine(::testing::Values("llama-recall", "hybrid-recall"), ::testing::Bool()),
                         shipped_name);

// ---------------------------------------------------------------------------
// Corrupted states, on a small random hybrid (states of a few KB, so every
// byte can be cut and flipped)

class SessionStateBad : public ::testing::TestWithParam<bool> {
   protected:
    void SetUp() override {
        cuda = GetParam();
        if (cuda && !tg_cuda_available()) GTEST_SKIP() << "no CUDA device";
        cfg.hybrid = true;
        cfg.n_layer = 2, cfg.interval = 2, cfg.n_embd = 16, cfg.n_head = 2, cfg.n_head_kv = 1, cfg.dk = 4, cfg.dv = 4;
        cfg.hk = 1, cfg.hv = 2;
        path = tgt::write_temp_model(tgt::toy_model_writer(cfg, 5), std::string("state_bad") + (cuda ? "_cuda" : ""));
        ASSERT_FALSE(path.empty());
        be = backend_for(cuda);
        ASSERT_NE(be, nullptr) << tg_last_error();
        m = tgm::model_load(path.c_str(), be);
        ASSERT_NE(m, nullptr) << tg_last_error();
    }
    void TearDown() override {
        tgm::model_free(m);
        tg_backend_free(be);
        if (!path.empty()) std::remove(path.c_str());
    }
    tgt::toy_config cfg;
    bool cuda = false;
    std::string path;
    tg_backend *be = nullptr;
    tgm::model *m = nullptr;
};

void reseal(std::vector<uint8_t> &b) {
    const uint64_t sum = tgm::state_checksum(b.data(), b.size());
    memcpy(b.data() + b.size() - 8, &sum, 8);
}

TEST_P(SessionStateBad, EveryCorruptionIsRefusedAndChangesNothing) {
    tgm::session *s = tgm::session_new(m, 2, 12);
    ASSERT_NE(s, nullptr);
    std::vector<float> l;
    const int32_t a[5] = {256, 1, 2, 3, 4}, b[3] = {256, 9, 8};
    ASSERT_EQ(tgm::session_eval(s, 0, 1, a, 5, false, &l), TG_OK);
    ASSERT_EQ(tgm::session_eval(s, 1, 1, b, 3, false, &l), TG_OK);
    std::vector<uint8_t> whole, seq;
    ASSERT_EQ(tgm::session_state_save(s, -1, &whole), TG_OK);
    ASSERT_EQ(tgm::session_state_save(s, 1, &seq), TG_OK);
    // the target: another history, so that a wrong load would show
    ASSERT_EQ(tgm::session_seq_rm(s, 0, 2, -1), TG_OK);
    ASSERT_EQ(tgm::session_eval(s, 0, 1, b + 1, 2, false, &l), TG_OK);
    const std::vector<uint8_t> before = fingerprint(s);
    int refused = 0;
    auto refuse = [&](const std::vector<uint8_t> &bytes, int dst, const char *fragment, const std::string &what) {
        const tg_status st = tgm::session_state_load(s, dst, bytes.data(), bytes.size());
        EXPECT_EQ(st, TG_ERR_FORMAT) << what;
        EXPECT_EQ(std::string(tg_last_error()).rfind("[session_state_load]", 0), 0u) << what << ": " << tg_last_error();
        if (fragment) EXPECT_NE(strstr(tg_last_error(), fragment), nullptr) << what << ": " << tg_last_error();
        refused += st == TG_ERR_FORMAT;
    };
    for (int which = 0; which < 2; which++) {
        const std::vector<uint8_t> &good = which ? seq : whole;
        const int dst = which ? 0 : -1;
        // truncation at every length: each section boundary and everything between
        for (size_t n = 0; n < good.size(); n++)
            refuse(std::vector<uint8_t>(good.begin(), good.begin() + (long)n), dst, nullptr, "cut at " + std::to_string(n));
        // one flipped bit at every byte
        for (size_t i = 0; i < good.size(); i++) {
            std::vector<uint8_t> c = good;
            c[i] ^= (uint8_t)(1u << (i % 8));
            refuse(c, dst, nullptr, "bit flipped in byte " + std::to_string(i));
        }
        // one extra byte
        std::vector<uint8_t> c = good;
        c.insert(c.end() - 8, 0);
        reseal(c);
        refuse(c, dst, "after the last record", "a byte too many");
        // another version, resealed
        c = good;
        c[8] = 2;
        reseal(c);
        refuse(c, dst, "version 2", "version");
    }
    EXPECT_EQ(fingerprint(s), before);
    // the other kind of state where one is expected
    refuse(seq, -1, "sequence state was given", "sequence state as a session");
    refuse(whole, 1, "session state was given", "session state into a sequence");
    // a token id outside the vocabulary, resealed
    std::vector<uint8_t> c = seq;
    const int32_t bad = 300;
    memcpy(c.data() + 48 + 8, &bad, 4);
    reseal(c);
    refuse(c, 0, "id 300", "token id");
    // too long for a smaller session
    tgm::session *small = tgm::session_new(m, 2, 4);
    ASSERT_NE(small, nullptr);
    EXPECT_EQ(tgm::session_state_load(small, 0, seq.data(), seq.size()), TG_OK) << tg_last_error();  // 3 tokens fit
    EXPECT_EQ(tgm::session_state_load(small, -1, whole.data(), whole.size()), TG_ERR_FORMAT);
    EXPECT_NE(strstr(tg_last_error(), "more than this session's context 4"), nullptr) << tg_last_error();
    EXPECT_EQ(small->n_past, std::vector<int>({3, 0}));
    tgm::session_free(small);
    // a session of other cache types
    for (tg_type t : {TG_TYPE_F16, TG_TYPE_BF16}) {
        tgm::session_params p;
        p.n_seq = 2, p.n_ctx = 12, p.type_state = t;
        tgm::session *other = tgm::session_new(m, p);
        ASSERT_NE(other, nullptr) << tg_last_error();
        EXPECT_EQ(tgm::session_state_load(other, -1, whole.data(), whole.size()), TG_ERR_FORMAT);
        EXPECT_NE(strstr(tg_last_error(), "cache types"), nullptr) << tg_last_error();
        EXPECT_EQ(other->n_past, std::vector<int>({0, 0}));
        tgm::session_free(other);
    }
    // another model: same shapes, other weights
    const std::string p2 = tgt::write_temp_model(tgt::toy_model_writer(cfg, 6), "state_bad_other");
    tgm::model *m2 = tgm::model_load(p2.c_str(), be);
    ASSERT_NE(m2, nullptr) << tg_last_error();
    EXPECT_NE(m2->identity, m->identity);
    tgm::session *s2 = tgm::session_new(m2, 2, 12);
    EXPECT_EQ(tgm::session_state_load(s2, -1, whole.data(), whole.size()), TG_ERR_FORMAT);
    EXPECT_NE(strstr(tg_last_error(), "another model"), nullptr) << tg_last_error();
    tgm::session_free(s2);
    tgm::model_free(m2);
    std::remove(p2.c_str());
    EXPECT_EQ(fingerprint(s), before);
    EXPECT_GT(refused, 4 * (int)seq.size());
    // and the good states still load
    EXPECT_EQ(tgm::session_state_load(s, -1, whole.data(), whole.size()), TG_OK) << tg_last_error();
    EXPECT_EQ(s->n_past, std::vector<int>({5, 3}));
    tgm::session_free(s);
}

// Sequence operations' own errors and edge cases.
TEST_P(SessionStateBad, SeqOpsCheckTheirArguments) {
    tgm::session *s = tgm::session_new(m, 2, 12);
    ASSERT_NE(s, nullptr);
    std::vector<float> l;
    const int32_t a[6] = {256, 1, 2, 3, 4, 5};
    ASSERT_EQ(tgm::session_eval(s, 0, 2, a, 3, false, &l), TG_OK);
    EXPECT_EQ(tgm::session_seq_rm(s, 2, 0, -1), TG_ERR_ARG);
    EXPECT_EQ(tgm::session_seq_rm(s, -2, 0, -1), TG_ERR_ARG);
    EXPECT_EQ(tgm::session_seq_cp(s, 0, 5), TG_ERR_ARG);
    EXPECT_EQ(tgm::session_seq_keep(s, -1), TG_ERR_ARG);
    EXPECT_EQ(tgm::session_seq_keep(nullptr, 0), TG_ERR_ARG);
    EXPECT_EQ(tgm::session_clear(nullptr), TG_ERR_ARG);
    EXPECT_EQ(tgm::session_state_save(s, 2, nullptr), TG_ERR_ARG);
    EXPECT_EQ(tgm::session_seq_rm(s, 0, 1, 1), TG_OK);  // empty range
    EXPECT_EQ(tgm::session_seq_rm(s, 0, 5, -1), TG_OK);  // past the end
    EXPECT_EQ(s->n_past, std::vector<int>({3, 3}));
    // [1, 2) of both: the third token moves to position 1 (tokens {256, 2} and {3, 5})
    EXPECT_EQ(tgm::session_seq_rm(s, -1, 1, 2), TG_OK) << tg_last_error();
    EXPECT_EQ(s->n_past, std::vector<int>({2, 2}));
    EXPECT_EQ(s->tokens[0], std::vector<int32_t>({256, 2}));
    EXPECT_EQ(s->tokens[1], std::vector<int32_t>({3, 5}));
    EXPECT_EQ(tgm::session_seq_rm(s, -1, 1, 3), TG_OK);  // [1, end) of every sequence
    EXPECT_EQ(s->n_past, std::vector<int>({1, 1}));
    EXPECT_EQ(tgm::session_seq_rm(s, -1, 0, -1), TG_OK);
    EXPECT_EQ(s->n_past, std::vector<int>({0, 0}));
    tgm::session_params p;
    p.type_k = TG_TYPE_I32;
    EXPECT_EQ(tgm::session_new(m, p), nullptr);
    EXPECT_NE(strstr(tg_last_error(), "f32, f16 or bf16"), nullptr) << tg_last_error();
    p.type_k = TG_TYPE_F32, p.n_ctx = 8, p.n_ubatch = 9;
    EXPECT_EQ(tgm::session_new(m, p), nullptr);
    tgm::session_free(s);
}

INSTANTIATE_TEST_SUITE_P(Session, SessionStateBad, ::testing::Bool(),
                         [](const auto &i) { return std::string(i.param ? "Cuda" : "Cpu"); });

// The state fuzzer's committed seeds still load into its session (the same
// model, the same format): a format change that forgets to regenerate them
// (tests/fuzz/make_state_corpus.cpp) fails here.
TEST(SessionStateFuzzSeeds, SeedsLoadIntoTheFuzzersSession) {
    tgt::state_rig r;
    ASSERT_TRUE(r.s && r.fill()) << tg_last_error();
    const std::vector<std::vector<int32_t>> filled = r.s->tokens;
    int n = 0;
    for (const char *name : {"session", "seq0", "seq1", "session_empty", "seq_empty"}) {
        const std::string path = k_root + "/tests/fuzz/state_corpus/" + name + ".bin";
        const int dst = std::string(name).rfind("seq", 0) == 0 ? 1 : -1;  // seq*: sequence states
        EXPECT_EQ(tgm::session_state_load_file(r.s, dst, path.c_str()), TG_OK) << tg_last_error();
        n++;
    }
    EXPECT_EQ(n, 5);
    // the whole-session seed holds the rig's history (its cache bytes depend
    // on the build's float rounding, so they are not compared)
    ASSERT_EQ(tgm::session_state_load_file(r.s, -1, (k_root + "/tests/fuzz/state_corpus/session.bin").c_str()), TG_OK);
    EXPECT_EQ(r.s->tokens, filled);
    EXPECT_EQ(r.s->n_past, std::vector<int>({5, 3}));
}

}  // namespace
