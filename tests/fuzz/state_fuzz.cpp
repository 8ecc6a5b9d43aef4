// state_fuzz.cpp - libFuzzer target for the session state loader
// (models/state.cpp) on state_rig.h's session.
//
// Each input is loaded as it is, and again with its checksum resealed (so
// that mutations reach the checks behind the checksum), as a whole-session
// state and as a sequence state. A refused input must leave the session
// exactly as it was and say "[session_state_load] ..."; an accepted one must
// save again to a state that loads and saves to the same bytes, and the
// session must still evaluate. Any violation traps.
// Build and run: scripts/fuzz.sh (with the GGUF target), or cmake -DTG_FUZZ=ON.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "state_rig.h"

#define FUZZ_CHECK(x)                                                                                    \
    do {                                                                                                 \
        if (!(x)) {                                                                                      \
            fprintf(stderr, "state_fuzz: check failed at line %d: %s (last error: %s)\n", __LINE__, #x, \
                    tg_last_error());                                                                    \
            __builtin_trap();                                                                            \
        }                                                                                                \
    } while (0)

namespace {

tgt::state_rig *g_rig = nullptr;
std::vector<uint8_t> g_base;  // the session's state before each input

std::vector<uint8_t> snapshot(tgm::session *s) {
    std::vector<uint8_t> b;
    FUZZ_CHECK(tgm::session_state_save(s, -1, &b) == TG_OK);
    return b;
}

void try_load(const std::vector<uint8_t> &in, int dst) {
    tgm::session *s = g_rig->s;
    const std::vector<uint8_t> before = snapshot(s);
    const std::vector<int> past = s->n_past;
    if (tgm::session_state_load(s, dst, in.data(), in.size()) != TG_OK) {
        FUZZ_CHECK(strncmp(tg_last_error(), "[session_state_load]", 20) == 0);
        FUZZ_CHECK(snapshot(s) == before);
        FUZZ_CHECK(s->n_past == past);
        return;
    }
    std::vector<uint8_t> again, twice;
    FUZZ_CHECK(tgm::session_state_save(s, dst, &again) == TG_OK);
    FUZZ_CHECK(tgm::session_state_load(s, dst, again.data(), again.size()) == TG_OK);
    FUZZ_CHECK(tgm::session_state_save(s, dst, &twice) == TG_OK);
    FUZZ_CHECK(again == twice);
    const int q = dst < 0 ? 0 : dst;
    if (s->n_past[q] < s->n_ctx) {
        std::vector<float> l;
        const int32_t t = 65;
        FUZZ_CHECK(tgm::session_eval(s, q, 1, &t, 1, false, &l) == TG_OK);
    }
    // back to the base state for the next load
    FUZZ_CHECK(tgm::session_state_load(s, -1, g_base.data(), g_base.size()) == TG_OK);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
    g_rig = new tgt::state_rig();
    FUZZ_CHECK(g_rig->s && g_rig->fill());
    g_base = snapshot(g_rig->s);
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    std::vector<uint8_t> in(data, data + size);
    try_load(in, -1);
    try_load(in, 1);
    if (size >= 8) {
        const uint64_t sum = tgm::state_checksum(in.data(), in.size());
        memcpy(in.data() + size - 8, &sum, 8);
        try_load(in, -1);
        try_load(in, 1);
    }
    return 0;
}
