// make_state_corpus.cpp - writes the state fuzzer's seeds (state_rig.h's
// session): the whole session, each sequence alone, an empty session and an
// empty sequence. Regenerate after a format change (the test
// SessionStateFuzzSeeds fails until then):
//   cmake --build build --target state_make_corpus && build/state_make_corpus tests/fuzz/state_corpus
#include <cstdio>
#include <string>

#include "state_rig.h"

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s OUTDIR\n", argv[0]);
        return 2;
    }
    tgt::state_rig r;
    if (!r.s || !r.fill()) {
        fprintf(stderr, "make_state_corpus: %s\n", tg_last_error());
        return 1;
    }
    const std::string dir = argv[1];
    auto save = [&](int seq, const char *name) {
        const std::string path = dir + "/" + name + ".bin";
        if (tgm::session_state_save_file(r.s, seq, path.c_str()) != TG_OK) {
            fprintf(stderr, "make_state_corpus: %s\n", tg_last_error());
            return false;
        }
        printf("%s\n", path.c_str());
        return true;
    };
    bool ok = save(-1, "session") && save(0, "seq0") && save(1, "seq1");
    ok = ok && tgm::session_clear(r.s) == TG_OK && save(-1, "session_empty") && save(0, "seq_empty");
    return ok ? 0 : 1;
}
