// test_state_files.cpp - session state files and sequence clears against bad
// paths and failing backends (hardening follow-ups, sessions 28 and 31): state
// files that are not regular or too large are refused before they are read; a
// failed save never destroys what was at its path; a backend that fails a
// write leaves the cleared sequences empty and each call names itself. CPU.
#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>  // mkfifo
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "shipped_session.h"
#include "test_util.h"

namespace {

// Sequence 0 of s has evaluated n tokens (BOS then 'a', 'b', ...).
void eval_prefix(tgm::session *s, int n) {
    ASSERT_NE(s, nullptr) << tg_last_error();
    std::vector<int32_t> toks = {256};
    for (int i = 1; i < n; i++) toks.push_back('a' + i - 1);
    std::vector<float> logits;
    ASSERT_EQ(tgm::session_eval(s, 0, 1, toks.data(), n, false, &logits), TG_OK) << tg_last_error();
}

// State files are read whole before they are checked: /dev/zero (or a FIFO,
// or a model given as tinygml-run's --prompt-cache) was read without end,
// until the allocation failed and std::bad_alloc aborted the process. Now only
// a regular file of at most the session's largest state is read; the session
// is unchanged by the refusal.

TEST(HardeningMore, StateFilesThatAreNotRegularOrTooLargeAreRefused) {
    shipped_session ss("hybrid-recall.gguf", 2, 8);
    ASSERT_NO_FATAL_FAILURE(eval_prefix(ss.s, 3));
    tgm::session *s = ss.s;
    const std::string good = ::testing::TempDir() + "tinygml_hardening_state.bin";
    ASSERT_EQ(tgm::session_state_save_file(s, -1, good.c_str()), TG_OK) << tg_last_error();

    std::vector<uint8_t> bytes;
    EXPECT_EQ(tgm::session_state_read_file(s, "/dev/zero", &bytes), TG_ERR_IO);
    EXPECT_NE(std::string(tg_last_error()).find("not a regular file"), std::string::npos) << tg_last_error();
    EXPECT_EQ(tgm::session_state_load_file(s, -1, "/dev/zero"), TG_ERR_IO);
    EXPECT_EQ(std::string(tg_last_error()).rfind("[session_state_load_file] ", 0), 0u) << tg_last_error();
    EXPECT_EQ(tgm::session_state_load_file(s, 1, ::testing::TempDir().c_str()), TG_ERR_IO);  // a directory
    // a FIFO: refused before it is opened (an open would wait for a writer)
    const std::string fifo = ::testing::TempDir() + "tinygml_hardening_state.fifo";
    std::remove(fifo.c_str());
    ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
    tgt::watchdog dog(60);  // a regression blocks in the open: fail fast
    EXPECT_EQ(tgm::session_state_load_file(s, -1, fifo.c_str()), TG_ERR_IO);
    EXPECT_NE(std::string(tg_last_error()).find("not a regular file"), std::string::npos) << tg_last_error();
    std::remove(fifo.c_str());

    // a regular file far larger than any state of this small session (8
    // positions, 2 sequences: a few KiB): refused before it is read
    std::vector<uint8_t> full;
    ASSERT_EQ(tgm::session_state_save(s, -1, &full), TG_OK);
    ASSERT_LT(full.size() * 8, (size_t)4 << 20);
    const std::string big = ::testing::TempDir() + "tinygml_hardening_big_state.bin";
    {
        FILE *f = fopen(big.c_str(), "wb");
        ASSERT_NE(f, nullptr);
        std::vector<uint8_t> zeros((size_t)4 << 20, 0);
        ASSERT_EQ(fwrite(zeros.data(), 1, zeros.size(), f), zeros.size());
        fclose(f);
    }
    EXPECT_EQ(tgm::session_state_load_file(s, -1, big.c_str()), TG_ERR_FORMAT);
    EXPECT_NE(std::string(tg_last_error()).find("more than any state of this session"), std::string::npos)
        << tg_last_error();
    EXPECT_EQ(s->n_past[0], 3);
    EXPECT_EQ(s->n_past[1], 0);

    // a real state file still loads
    ASSERT_EQ(tgm::session_clear(s), TG_OK);
    EXPECT_EQ(tgm::session_state_read_file(s, good.c_str(), &bytes), TG_OK) << tg_last_error();
    EXPECT_EQ(bytes, full);
    EXPECT_EQ(tgm::session_state_load_file(s, -1, good.c_str()), TG_OK) << tg_last_error();
    EXPECT_EQ(s->n_past[0], 3);
    std::remove(good.c_str());
    std::remove(big.c_str());
}

// Session 31's bad-input sweep: a failed session_state_save_file removed its
// path whatever it was (a device node, when running as root), and a failed
// write over an existing state destroyed it. Now the state goes to a new file
// renamed over the target: a FIFO, a device or a directory is refused and left
// as it was; a write that fails (here: past RLIMIT_FSIZE) leaves the old file's
// bytes and no temporary file; a symbolic link stays a link to the new state.
std::vector<uint8_t> file_bytes(const std::string &path) {
    std::vector<uint8_t> b;
    FILE *f = fopen(path.c_str(), "rb");
    if (!f) return b;
    uint8_t chunk[4096];
    for (size_t n; (n = fread(chunk, 1, sizeof chunk, f)) > 0;) b.insert(b.end(), chunk, chunk + n);
    fclose(f);
    return b;
}

TEST(HardeningMore, StateSaveNeverDestroysWhatWasThere) {
    shipped_session ss("hybrid-recall.gguf", 2, 8);
    ASSERT_NO_FATAL_FAILURE(eval_prefix(ss.s, 3));
    tgm::session *s = ss.s;
    const std::string dir = ::testing::TempDir();

    // not regular files: refused, still there
    const std::string fifo = dir + "tinygml_save.fifo";
    std::remove(fifo.c_str());
    ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
    tgt::watchdog dog(60);  // a regression blocks in the open: fail fast
    EXPECT_EQ(tgm::session_state_save_file(s, -1, fifo.c_str()), TG_ERR_IO);
    EXPECT_EQ(std::string(tg_last_error()).rfind("[session_state_save_file] ", 0), 0u) << tg_last_error();
    EXPECT_NE(std::string(tg_last_error()).find("not a regular file"), std::string::npos) << tg_last_error();
    struct stat sb;
    EXPECT_TRUE(stat(fifo.c_str(), &sb) == 0 && S_ISFIFO(sb.st_mode)) << "the FIFO is gone";
    std::remove(fifo.c_str());
    EXPECT_EQ(tgm::session_state_save_file(s, -1, "/dev/null"), TG_ERR_IO);
    EXPECT_TRUE(stat("/dev/null", &sb) == 0 && S_ISCHR(sb.st_mode));
    EXPECT_EQ(tgm::session_state_save_file(s, -1, dir.c_str()), TG_ERR_IO);  // a directory
    // bad arguments name this call, not session_state_save (session 32's sweep)
    const std::string unused = dir + "tinygml_save_unused.bin";
    EXPECT_EQ(tgm::session_state_save_file(s, 2, unused.c_str()), TG_ERR_ARG);
    EXPECT_EQ(std::string(tg_last_error()).rfind("[session_state_save_file] [session_state_save] sequence 2 outside", 0),
              0u) << tg_last_error();
    EXPECT_EQ(tgm::session_state_save_file(nullptr, 0, unused.c_str()), TG_ERR_ARG);
    EXPECT_EQ(std::string(tg_last_error()).rfind("[session_state_save_file] ", 0), 0u) << tg_last_error();
    EXPECT_NE(access(unused.c_str(), F_OK), 0);

    // an existing state, then a save that cannot be written: the old bytes stay
    const std::string path = dir + "tinygml_save_state.bin";
    std::remove(path.c_str());
    ASSERT_EQ(tgm::session_state_save_file(s, 0, path.c_str()), TG_OK) << tg_last_error();
    const std::vector<uint8_t> before = file_bytes(path);
    ASSERT_GT(before.size(), 64u);
    std::vector<uint8_t> whole;
    ASSERT_EQ(tgm::session_state_save(s, -1, &whole), TG_OK);
    ASSERT_GT(whole.size(), 4096u + 64u);
    {
        struct rlimit old_lim;
        ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old_lim), 0);
        void (*old_sig)(int) = signal(SIGXFSZ, SIG_IGN);  // EFBIG instead of the signal
        struct rlimit lim = old_lim;
        lim.rlim_cur = 4096;
        ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &lim), 0);
        const tg_status st = tgm::session_state_save_file(s, -1, path.c_str());
        setrlimit(RLIMIT_FSIZE, &old_lim);
        signal(SIGXFSZ, old_sig);
        EXPECT_EQ(st, TG_ERR_IO);
        EXPECT_EQ(std::string(tg_last_error()).rfind("[session_state_save_file] cannot write", 0), 0u) << tg_last_error();
    }
    EXPECT_EQ(file_bytes(path), before) << "a failed save changed the file that was there";
    if (DIR *d = opendir(dir.c_str())) {  // no temporary file left beside it
        for (struct dirent *e; (e = readdir(d)) != nullptr;)
            EXPECT_NE(std::string(e->d_name).rfind("tinygml_save_state.bin.tmp-", 0), 0u) << e->d_name << " left behind";
        closedir(d);
    }
    // a symbolic link: the state goes to its target, the link stays
    const std::string link = dir + "tinygml_save_state.lnk";
    std::remove(link.c_str());
    ASSERT_EQ(symlink(path.c_str(), link.c_str()), 0);
    EXPECT_EQ(tgm::session_state_save_file(s, -1, link.c_str()), TG_OK) << tg_last_error();
    EXPECT_TRUE(lstat(link.c_str(), &sb) == 0 && S_ISLNK(sb.st_mode)) << "the link was replaced";
    EXPECT_EQ(file_bytes(path), whole);
    std::remove(link.c_str());
    std::remove(path.c_str());
}

// Session 31's sweep: with the backend gone (as after a lost device) every
// tensor write fails. session_reset / session_clear / session_seq_keep
// reported that under "[tensor_set]", and session_seq_rm said "the sequence
// is now empty" while its length stayed. Each now names its call, and the
// sequences it clears have length 0 whatever the write did.
TEST(HardeningMore, SequenceClearsAfterABackendFailureNameTheirCall) {
    struct step {
        const char *call;
        std::function<tg_status(tgm::session *)> run;
    };
    const std::vector<step> steps = {
        {"[session_reset] ", [](tgm::session *s) { return tgm::session_reset(s, 0); }},
        {"[session_clear] ", [](tgm::session *s) { return tgm::session_clear(s); }},
        {"[session_seq_keep] ", [](tgm::session *s) { return tgm::session_seq_keep(s, 1); }},
        {"[session_seq_rm] ", [](tgm::session *s) { return tgm::session_seq_rm(s, 0, 1, -1); }},
    };
    for (const step &st : steps) {
        SCOPED_TRACE(st.call);
        shipped_session ss("hybrid-recall.gguf", 2, 32);
        ASSERT_NO_FATAL_FAILURE(eval_prefix(ss.s, 4));
        tgm::session *s = ss.s;
        ASSERT_EQ(tgm::session_seq_cp(s, 0, 1), TG_OK) << tg_last_error();
        tg_backend_free(ss.be);  // every tensor write fails from here
        ss.be = nullptr;
        EXPECT_NE(st.run(s), TG_OK);
        EXPECT_EQ(std::string(tg_last_error()).rfind(st.call, 0), 0u) << tg_last_error();
        // the sequences the call clears are empty (seq_keep: all but 1; seq_rm: 0, its replay failed)
        const bool keeps1 = std::string(st.call) == "[session_seq_keep] " || std::string(st.call) == "[session_reset] " ||
                            std::string(st.call) == "[session_seq_rm] ";
        EXPECT_EQ(s->n_past[0], 0);
        EXPECT_EQ(s->tokens[0].size(), 0u);
        EXPECT_EQ(s->n_past[1], keeps1 ? 4 : 0);
    }
}

}  // namespace
