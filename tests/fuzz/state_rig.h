// state_rig.h - the session the state fuzzer loads into, and its seed states:
// a small random hybrid (one delta-rule layer, one attention layer) on the
// CPU, 2 sequences of context 12. The same model (same identity) in the
// fuzzer, the seed writer and the test that replays the seeds
// (test_sessions.cpp, SessionStateFuzzSeeds).
#pragma once
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "../toy_model.h"
#include "model.h"

namespace tgt {

struct state_rig {
    tg_backend *be = nullptr;
    tgm::model *m = nullptr;
    tgm::session *s = nullptr;

    // NULL members (+ tg_last_error()) when something failed.
    state_rig() {
        toy_config c;
        c.hybrid = true;
        c.n_layer = 2, c.interval = 2, c.n_embd = 16, c.n_head = 2, c.n_head_kv = 1, c.n_ctx = 16;
        c.dk = 4, c.dv = 4, c.hk = 1, c.hv = 2, c.n_ff = 24;
        const char *dir = getenv("TMPDIR");
        const std::string path = std::string(dir && *dir ? dir : "/tmp") + "/tinygml_state_rig_" +
                                 std::to_string((long)getpid()) + ".gguf";
        tg_gguf_writer *w = toy_model_writer(c, 77);
        const tg_status st = tg_gguf_write(w, path.c_str());
        tg_gguf_writer_free(w);
        be = tg_backend_cpu(1);
        if (st == TG_OK && be) m = tgm::model_load(path.c_str(), be);
        std::remove(path.c_str());
        if (m) s = tgm::session_new(m, 2, 12);
    }
    ~state_rig() {
        tgm::session_free(s);
        tgm::model_free(m);
        tg_backend_free(be);
    }
    // The seeds' history: sequence 0 holds 5 tokens, sequence 1 holds 3.
    bool fill() {
        const int32_t a[5] = {256, 104, 56, 61, 118}, b[3] = {256, 97, 52};
        std::vector<float> l;
        return tgm::session_clear(s) == TG_OK && tgm::session_eval(s, 0, 1, a, 5, false, &l) == TG_OK &&
               tgm::session_eval(s, 1, 1, b, 3, false, &l) == TG_OK;
    }
};

}  // namespace tgt
