// shipped_session.h - a shipped model (models/) on a one-thread CPU backend
// and a session on it, for the hardening and state-file tests.
#pragma once
#include <string>

#include "model.h"
#include "tinygml.h"

// A shipped model on a one-thread CPU backend and a session of n_seq x n_ctx
// on it, freed when the test ends (also when an assertion ends it early).
struct shipped_session {
    tg_backend *be = tg_backend_cpu(1);
    tgm::model *m = nullptr;
    tgm::session *s = nullptr;
    shipped_session(const char *file, int n_seq, int n_ctx) {
        if (be) m = tgm::model_load((std::string(TG_SOURCE_DIR) + "/models/" + file).c_str(), be);
        if (m) s = tgm::session_new(m, n_seq, n_ctx);
    }
    ~shipped_session() {
        if (s) tgm::session_free(s);
        if (m) tgm::model_free(m);
        if (be) tg_backend_free(be);
    }
};
