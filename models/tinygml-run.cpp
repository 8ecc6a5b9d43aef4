// tinygml-run - generate text with a toy model, llama.cpp style. The shipped
// models answer the recall task of models/README.md (key=value pairs, then
// ?key=; this prints the prompt, then "q2"; --temp 0 is greedy, the default
// samples as llama.cpp does):
//   tinygml-run -m models/hybrid-recall.gguf -p "a3=p7 b1=q2 c5=w4 d8=s1 ?b1=" -n 4 --temp 0
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <random>
#include <string>

#include <sys/stat.h>
#include <unistd.h>

#include "model.h"

namespace {

struct options {
    std::string model, prompt, device = "auto";
    int n_predict = 64, threads = 0, batch = 1;
    // the sampler chain: llama.cpp's flags and defaults (tgm::sampler)
    float temp = 0.8f, top_p = 0.95f, min_p = 0.05f, repeat_penalty = 1.0f;
    int top_k = 40, repeat_last_n = 64;
    long long seed = -1;  // -1: a random seed, printed
    bool quiet = false, ignore_eos = false, warmup = false, interactive = false, no_mmap = false;
    // -ctk, -ctv, -cts: F16 K and V caches by default, as llama.cpp's CLI (prefill
    // attention on tensor cores, half the cache bytes per decode step); F32 states
    tg_type type_k = TG_TYPE_F16, type_v = TG_TYPE_F16, type_state = TG_TYPE_F32;
    std::string prompt_cache;                                                     // --prompt-cache
};

// "f32", "f16" or "bf16" (the cache and state types).
bool parse_cache_type(const char *s, tg_type *out) {
    for (tg_type t : {TG_TYPE_F32, TG_TYPE_F16, TG_TYPE_BF16})
        if (strcmp(s, tg_type_name(t)) == 0) return (*out = t), true;
    return false;
}

void usage(FILE *f, const char *argv0) {
    const options d;
    fprintf(f,
            "usage: %s -m MODEL.gguf [-p PROMPT] [options]\n"
            "  -m FILE          model file (GGUF: llama or tghybrid)\n"
            "  -p PROMPT        prompt text (default: empty, only BOS)\n"
            "  -n N             tokens to generate (default %d)\n"
            "  --device D       cpu, cuda or auto (default %s: cuda when a GPU is present)\n"
            "  -t N             CPU threads (default %d: all hardware threads)\n"
            "  -b N             run N copies of the prompt as one batch, for throughput (default %d)\n"
            "  -q               print only the timing lines\n"
            "  --ignore-eos     keep generating past EOS (for timing)\n"
            "  --warmup         run the prompt and one step once untimed first (kernel load, cuBLAS init, graph capture)\n"
            "  --no-mmap        read the model file into memory instead of mapping it (the CPU then uses a copy,\n"
            "                   in huge pages where the OS gives them: faster CPU decode, docs/ops.md; safe if\n"
            "                   the file may change while running: see models/README.md, SIGBUS)\n"
            "  -i, --interactive  read lines from stdin; each continues the conversation (a reply stops at\n"
            "                   EOS, after -n tokens or after a newline; EOF ends)\n"
            "  -ctk, --cache-type-k T      K cache type: f32, f16 or bf16 (default f16)\n"
            "  -ctv, --cache-type-v T      V cache type (default f16)\n"
            "  -cts, --cache-type-state T  recurrent (delta-rule) state type (default f32)\n"
            "  --prompt-cache FILE  reuse the session state in FILE when the prompt starts with its tokens\n"
            "                   (only the rest is evaluated); save it there after the prompt\n"
            "  -h, --help       this help\n"
            "sampling (llama.cpp's chain and order: penalty, top-k, top-p, min-p, temperature, draw):\n"
            "  --temp T         temperature (default %g; 0, or below %g: greedy)\n"
            "  --top-k K        keep the K most likely tokens (default %d; 0: all)\n"
            "  --top-p P        then the smallest set with probability >= P (default %g; 1: off)\n"
            "  --min-p P        then the tokens with probability >= P * the largest (default %g; 0: off)\n"
            "  --repeat-penalty R  divide positive, multiply negative logits of recent tokens by R\n"
            "                   (default %g: off)\n"
            "  --repeat-last-n N   recent: the last N tokens of prompt and output (default %d; 0: off, -1: all)\n"
            "  --seed S         sampling seed (default -1: random, printed so the run can be repeated)\n"
            "example (the recall task of models/README.md: key=value pairs, then ?key=):\n"
            "  %s -m models/hybrid-recall.gguf -p \"a3=p7 b1=q2 c5=w4 d8=s1 ?b1=\" -n 4 --temp 0\n",
            argv0, d.n_predict, d.device.c_str(), d.threads, d.batch, d.temp, tgm::sampler::kMinTemp, d.top_k,
            d.top_p, d.min_p, d.repeat_penalty, d.repeat_last_n, argv0);
}

// Parse a number strictly: the whole string, in range.
bool parse_int(const char *s, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || end == s || v < lo || v > hi) return false;
    *out = v;
    return true;
}
bool parse_float(const char *s, float lo, float hi, float *out) {
    char *end;
    float v = strtof(s, &end);
    if (*end || end == s || !(v >= lo && v <= hi)) return false;
    *out = v;
    return true;
}
bool parse_int(const char *s, long long lo, long long hi, int *out) {
    long long v;
    return parse_int(s, lo, hi, &v) && ((*out = (int)v), true);
}

// What each numeric flag takes, for the error message (parse checks it).
const char *flag_range(const std::string &a) {
    static const char *const table[][2] = {
        {"-n", "an integer in [0, 1048576]"},
        {"-t", "an integer in [0, 256]"},
        {"-b", "an integer in [1, 4096]"},
        {"--temp", "a number in [0, 100]"},
        {"--top-k", "an integer in [0, 4194304]"},
        {"--top-p", "a number in [0, 1]"},
        {"--min-p", "a number in [0, 1]"},
        {"--repeat-penalty", "a number in (0, 100]"},
        {"--repeat-last-n", "-1 (all) or an integer in [0, 1048576]"},
        {"--seed", "-1 (random) or an integer in [0, 2^63)"},
        {"-ctk", "f32, f16 or bf16"}, {"--cache-type-k", "f32, f16 or bf16"},
        {"-ctv", "f32, f16 or bf16"}, {"--cache-type-v", "f32, f16 or bf16"},
        {"-cts", "f32, f16 or bf16"}, {"--cache-type-state", "f32, f16 or bf16"},
    };
    for (const auto &r : table)
        if (a == r[0]) return r[1];
    return "?";
}

// The sampler's flags, llama.cpp's names and ranges (flag_range).
bool parse_sampler_flag(const std::string &a, const char *val, options &o) {
    if (a == "--temp") return parse_float(val, 0.0f, 100.0f, &o.temp);
    if (a == "--top-k") return parse_int(val, 0, 1 << 22, &o.top_k);
    if (a == "--top-p") return parse_float(val, 0.0f, 1.0f, &o.top_p);
    if (a == "--min-p") return parse_float(val, 0.0f, 1.0f, &o.min_p);
    if (a == "--repeat-penalty") return parse_float(val, 0.0f, 100.0f, &o.repeat_penalty) && o.repeat_penalty > 0.0f;
    if (a == "--repeat-last-n") return parse_int(val, -1, 1 << 20, &o.repeat_last_n);
    return a == "--seed" && parse_int(val, -1, INT64_MAX, &o.seed);
}

// The sampler of the options; a seed of -1 becomes a random one (returned in *seed).
tgm::sampler make_sampler(const options &o, unsigned long long *seed) {
    tgm::sampler smp;
    smp.temp = o.temp;
    smp.top_k = o.top_k;
    smp.top_p = o.top_p;
    smp.min_p = o.min_p;
    smp.repeat_penalty = o.repeat_penalty;
    smp.repeat_last_n = o.repeat_last_n;
    if (o.seed >= 0) {
        *seed = (unsigned long long)o.seed;
    } else {
        // 64 bits of the OS's entropy and the clock, kept below 2^63 so --seed takes it back
        std::random_device rd;
        const unsigned long long t = (unsigned long long)std::chrono::steady_clock::now().time_since_epoch().count();
        *seed = (((unsigned long long)rd() << 32) ^ rd() ^ t) & (unsigned long long)INT64_MAX;
    }
    smp.rng.seed(*seed);
    return smp;
}

enum class parsed { ok, help, error };

parsed parse(int argc, char **argv, options &o) {
    static const char *const flags[] = {"-q", "--ignore-eos", "--warmup", "-i", "--interactive", "--no-mmap"};
    static const char *const valued[] = {"-m", "-p", "-n", "--device", "-t", "-b",
                                         // the sampler's (parse_sampler_flag)
                                         "--temp", "--top-k", "--top-p", "--min-p", "--repeat-penalty",
                                         "--repeat-last-n", "--seed",
                                         // the session's
                                         "-ctk", "--cache-type-k", "-ctv", "--cache-type-v", "-cts",
                                         "--cache-type-state", "--prompt-cache"};
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        if (a == "-h" || a == "--help") return parsed::help;
        if (a.size() < 2 || a[0] != '-') {
            fprintf(stderr, "error: unexpected argument '%s' (the prompt goes after -p: -p \"%s\")\n", a.c_str(),
                    a.c_str());
            return parsed::error;
        }
        if (std::find_if(std::begin(flags), std::end(flags), [&](const char *f) { return a == f; }) !=
            std::end(flags)) {
            (a == "-q"           ? o.quiet
             : a == "--warmup"     ? o.warmup
             : a == "--ignore-eos" ? o.ignore_eos
             : a == "--no-mmap"    ? o.no_mmap
                                   : o.interactive) = true;
            continue;
        }
        if (std::find_if(std::begin(valued), std::end(valued), [&](const char *f) { return a == f; }) ==
            std::end(valued)) {
            fprintf(stderr, "error: unknown option %s\n", a.c_str());
            return parsed::error;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "error: %s needs a value\n", a.c_str());
            return parsed::error;
        }
        const char *val = argv[++i];
        bool ok = true;
        if (a == "-m") o.model = val;
        else if (a == "-p") o.prompt = val;
        else if (a == "--device") o.device = val;
        else if (a == "-n") ok = parse_int(val, 0, 1 << 20, &o.n_predict);
        else if (a == "-t") ok = parse_int(val, 0, 256, &o.threads);
        else if (a == "-b") ok = parse_int(val, 1, 4096, &o.batch);
        else if (a == "-ctk" || a == "--cache-type-k") ok = parse_cache_type(val, &o.type_k);
        else if (a == "-ctv" || a == "--cache-type-v") ok = parse_cache_type(val, &o.type_v);
        else if (a == "-cts" || a == "--cache-type-state") ok = parse_cache_type(val, &o.type_state);
        else if (a == "--prompt-cache") o.prompt_cache = val;
        else ok = parse_sampler_flag(a, val, o);
        if (!ok) {
            fprintf(stderr, "error: bad value '%s' for %s (%s)\n", val, a.c_str(), flag_range(a));
            return parsed::error;
        }
    }
    if (o.model.empty()) {
        fprintf(stderr, "error: -m MODEL.gguf is required\n");
        return parsed::error;
    }
    if (o.device != "cpu" && o.device != "cuda" && o.device != "auto") {
        fprintf(stderr, "error: --device must be cpu, cuda or auto\n");
        return parsed::error;
    }
    if (o.interactive && (o.batch != 1 || o.warmup || !o.prompt_cache.empty())) {
        fprintf(stderr, "error: -i runs one conversation: %s\n",
                o.batch != 1  ? "-b must be 1"
                : o.warmup    ? "--warmup is for timing runs, not with -i"
                              : "--prompt-cache is for single runs, not with -i");
        return parsed::error;
    }
    return parsed::ok;
}

// --prompt-cache: load FILE's sequence state when its tokens and the prompt
// share a prefix, into every sequence, cut to that prefix and to at most
// P - 1 tokens (the last prompt token is always evaluated: its logits give
// the first new token). Returns the tokens reused (0: none, or no usable file).
int load_prompt_cache(tgm::session *s, const std::string &path, const std::vector<int32_t> &prompt) {
    if (access(path.c_str(), F_OK) != 0) return 0;  // no cache yet: it is written after the prompt
    // a regular file of at most a state's size only (not /dev/zero or a FIFO, read without end)
    std::vector<uint8_t> bytes;
    tg_status st = tgm::session_state_read_file(s, path.c_str(), &bytes);
    std::vector<int32_t> cached;
    if (st == TG_OK) st = tgm::session_state_tokens(s, bytes.data(), bytes.size(), &cached);
    if (st != TG_OK) {
        fprintf(stderr, "warning: prompt cache '%s' not used: %s\n", path.c_str(), tg_last_error());
        return 0;
    }
    size_t common = 0;
    while (common < cached.size() && common + 1 < prompt.size() && cached[common] == prompt[common]) common++;
    if (common == 0) return 0;
    st = tgm::session_state_load(s, 0, bytes.data(), bytes.size());
    if (st == TG_OK && common < cached.size()) st = tgm::session_seq_rm(s, 0, (int)common, -1);
    for (int b = 1; b < s->n_seq && st == TG_OK; b++) st = tgm::session_seq_cp(s, 0, b);
    if (st != TG_OK) {
        fprintf(stderr, "warning: prompt cache '%s' not used: %s\n", path.c_str(), tg_last_error());
        tgm::session_clear(s);
        return 0;
    }
    fprintf(stderr, "prompt cache: reused %zu of %zu prompt tokens from '%s'\n", common, prompt.size(), path.c_str());
    return (int)common;
}

// The prompt cache may be (over)written: no file yet, or a tinygml state
// (a path given by mistake, e.g. the model or a source file, is left alone).
// Never opened when it is not a regular file (opening a FIFO would wait for a writer).
bool cache_writable(const std::string &path) {
    struct stat sb;
    if (stat(path.c_str(), &sb) == 0 && !S_ISREG(sb.st_mode)) return false;
    FILE *f = fopen(path.c_str(), "rb");
    if (!f) return true;
    char magic[8] = {};
    const bool state = fread(magic, 1, 8, f) == 8 && memcmp(magic, "TGMSTATE", 8) == 0;
    fclose(f);
    return state;
}

// Evaluate prompt[reused, P) on every sequence. With a prompt cache, all but
// the last token go first and the state of sequence 0 is saved then.
tg_status eval_prompt(tgm::session *s, const std::vector<int32_t> &prompt, int reused, const std::string &cache,
                      std::vector<float> *logits) {
    const int P = (int)prompt.size(), B = s->n_seq;
    auto run = [&](int from, int to) {
        std::vector<int32_t> toks;
        for (int b = 0; b < B; b++) toks.insert(toks.end(), prompt.begin() + from, prompt.begin() + to);
        return tgm::session_eval(s, 0, B, toks.data(), to - from, false, logits);
    };
    if (cache.empty()) return run(reused, P);
    tg_status st = reused < P - 1 ? run(reused, P - 1) : TG_OK;
    if (st == TG_OK && reused < P - 1) {
        if (!cache_writable(cache))
            fprintf(stderr, "warning: '%s' is not a tinygml state: not overwritten\n", cache.c_str());
        else if (tgm::session_state_save_file(s, 0, cache.c_str()) == TG_OK)
            fprintf(stderr, "prompt cache: saved %d tokens to '%s'\n", P - 1, cache.c_str());
        else
            fprintf(stderr, "warning: %s\n", tg_last_error());
    }
    return st == TG_OK ? run(P - 1, P) : st;
}

double now_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// What a run measured: prompt steps (n_prompt tokens per sequence) and
// one-token generation steps, on stderr.
struct timing {
    long long n_prompt = 0;
    int n_steps = 0;
    double t_prompt = 0, t_gen = 0;
    double t_load = 0;          // model_load
    const char *load_how = "";  // mmap (in place / uploaded) or read
};

void print_timing(tg_backend *be, const tgm::model *m, const tgm::session *s, int B, const timing &t) {
    fprintf(stderr, "backend %s, batch %d, model loaded in %.2f ms (%s)\n", tg_backend_name(be), B, t.t_load,
            t.load_how);
    if (t.n_prompt > 0)
        fprintf(stderr, "prompt:     %5lld tokens x %d in %8.2f ms (%10.1f tokens/s)\n", t.n_prompt, B, t.t_prompt,
                B * t.n_prompt / (t.t_prompt / 1e3));
    if (t.n_steps > 0)
        fprintf(stderr, "generation: %5d tokens x %d in %8.2f ms (%10.1f tokens/s)\n", t.n_steps, B, t.t_gen,
                B * t.n_steps / (t.t_gen / 1e3));
    fprintf(stderr, "memory: weights %.2f MiB, caches+states %.2f MiB, compute buffer %.2f MiB\n",
            m->weight_bytes / 1048576.0, s->state_bytes / 1048576.0, tg_backend_compute_buffer_size(be) / 1048576.0);
}

// One line of stdin without its newline, at most limit bytes kept: false at
// EOF with nothing read; *too_long when the line is longer (the rest is left
// unread: a line with no end, as /dev/zero, is never held whole).
bool read_line(std::string *line, size_t limit, bool *too_long) {
    line->clear();
    *too_long = false;
    bool any = false;
    for (int c; (c = std::cin.get()) != EOF;) {
        any = true;
        if (c == '\n') return true;
        if (line->size() >= limit) return (*too_long = true);
        line->push_back((char)c);
    }
    return any;
}

// -i: the conversation is BOS, then each input line (its text without the
// newline; the -p prompt, when given, is the first line), each followed by
// the reply generated for it. A reply ends at EOS (not kept), after -n tokens
// or after a newline token (both kept: the token is fed with the next line).
// So the reply to line k is what a plain run of the conversation up to line k
// as -p prints (up to its first newline). Empty lines are skipped. A line is
// refused, ending the session with status 1, when the conversation with it
// and -n would not fit the context (the rule of a plain run); EOF ends it
// with status 0.
int run_interactive(const options &o, tg_backend *be, const tgm::model *m, tgm::sampler &smp, const timing &load) {
    const int n_ctx = m->hp.n_ctx, V = m->hp.n_vocab;
    tgm::session_params sp;
    sp.n_ctx = n_ctx, sp.type_k = o.type_k, sp.type_v = o.type_v, sp.type_state = o.type_state;
    tgm::session *s = tgm::session_new(m, sp);
    if (!s) {
        fprintf(stderr, "error: %s\n", tg_last_error());
        return 1;
    }
    std::vector<int32_t> conv = {m->hp.bos};  // every token of the conversation; s->n_past[0] of them are fed
    std::vector<float> logits;
    timing t = load;
    const bool tty = isatty(STDIN_FILENO);
    std::string line;
    bool use_prompt = !o.prompt.empty();
    int rc = 0;
    for (int n_line = 1;; n_line++) {
        if (use_prompt) {
            line = o.prompt;
            use_prompt = false;
        } else {
            if (tty) fprintf(stderr, "> ");
            bool too_long = false;
            if (!read_line(&line, (size_t)n_ctx + 1, &too_long)) break;  // EOF: the normal end
            if (too_long) {  // a byte is a token: it could never fit (and /dev/zero has no newline at all)
                fprintf(stderr, "error: line %d is longer than the model's context of %d tokens; ending the session\n",
                        n_line, n_ctx);
                rc = 1;
                break;
            }
            if (!line.empty() && line.back() == '\r') line.pop_back();
        }
        if (line.empty()) {
            n_line--;
            continue;
        }
        const std::vector<int32_t> toks = tgm::tokenize(line, false);
        const long long need = (long long)(conv.size() + toks.size()) + std::max(o.n_predict - 1, 0);
        if (need > n_ctx) {
            fprintf(stderr,
                    "error: line %d: the conversation (%zu tokens with BOS), this line (%zu tokens) and -n %d need "
                    "%lld positions, but the model's context is %d; ending the session\n",
                    n_line, conv.size(), toks.size(), o.n_predict, need, n_ctx);
            rc = 1;
            break;
        }
        conv.insert(conv.end(), toks.begin(), toks.end());
        // what is not fed yet (BOS or the last reply's last token, then the line) in one step
        const int fed = s->n_past[0], T = (int)conv.size() - fed;
        double t0 = now_ms();
        tg_status st = tgm::session_eval(s, 0, 1, conv.data() + fed, T, false, &logits);
        t.t_prompt += now_ms() - t0;
        t.n_prompt += T;
        bool newline = false;
        for (int n = 0; st == TG_OK && n < o.n_predict;) {
            const int32_t tok = smp.sample(logits.data(), V, conv.data(), conv.size());
            if (tok < 0) {
                st = tg_set_error(TG_ERR_BACKEND, "line %d, token %d: every logit is NaN or inf", n_line, n + 1);
                break;
            }
            n++;
            if (tok == m->hp.eos && !o.ignore_eos) break;
            conv.push_back(tok);
            const std::string text = tgm::detokenize(tok);
            printf("%s", text.c_str());
            fflush(stdout);
            if ((newline = text == "\n") || n == o.n_predict) break;  // kept, fed with the next line
            t0 = now_ms();
            st = tgm::session_eval(s, 0, 1, &tok, 1, false, &logits);
            t.t_gen += now_ms() - t0;
            t.n_steps++;
        }
        if (!newline) printf("\n");
        fflush(stdout);
        if (st != TG_OK) {
            fprintf(stderr, "error: %s\n", tg_last_error());
            rc = 1;
            break;
        }
    }
    print_timing(be, m, s, 1, t);
    tgm::session_free(s);
    return rc;
}

}  // namespace

int main(int argc, char **argv) {
    options o;
    switch (parse(argc, argv, o)) {
        case parsed::help:
            usage(stdout, argv[0]);
            return 0;
        case parsed::error:
            fprintf(stderr, "run '%s --help' for the options\n", argv[0]);
            return 2;
        case parsed::ok:
            break;
    }
    tg_backend *be = nullptr;
    if (o.device == "cuda" || (o.device == "auto" && tg_cuda_available())) be = tg_backend_cuda(0);
    else be = tg_backend_cpu(o.threads);
    if (!be) {
        fprintf(stderr, "error: %s\n", tg_last_error());
        return 1;
    }
    tgm::load_options lo;
    lo.use_mmap = !o.no_mmap;
    const double t_load0 = now_ms();
    tgm::model *m = tgm::model_load(o.model.c_str(), be, lo);
    const double t_load = now_ms() - t_load0;
    if (!m) {
        fprintf(stderr, "error: %s\n", tg_last_error());
        tg_backend_free(be);
        return 1;
    }
    timing load;
    load.t_load = t_load;
    load.load_how = m->file ? "mmap, weights used in place" : lo.use_mmap ? "mmap, uploaded" : "read";
    unsigned long long seed = 0;
    tgm::sampler smp = make_sampler(o, &seed);
    // the seed repeats a sampled run; greedy needs none (top-k, top-p and min-p keep the largest logit)
    if (!o.quiet && smp.greedy())
        fprintf(stderr, "sampler: greedy (temp %g), repeat-penalty %g (last %d)\n", o.temp, o.repeat_penalty,
                o.repeat_last_n);
    else if (!o.quiet)
        fprintf(stderr, "sampler: seed %llu, temp %g, top-k %d, top-p %g, min-p %g, repeat-penalty %g (last %d)\n",
                seed, o.temp, o.top_k, o.top_p, o.min_p, o.repeat_penalty, o.repeat_last_n);
    if (o.interactive) {
        const int rc = run_interactive(o, be, m, smp, load);
        tgm::model_free(m);
        tg_backend_free(be);
        return rc;
    }
    // BOS is the model's (tokenizer.ggml.bos_token_id), as -i's conversation starts
    std::vector<int32_t> prompt = tgm::tokenize(o.prompt, false);
    prompt.insert(prompt.begin(), m->hp.bos);
    // The prompt fills positions [0, P); the n-th generated token is sampled
    // from the logits of position P + n - 2 and never fed back.
    const long long need = (long long)prompt.size() + std::max(o.n_predict - 1, 0);
    if (need > m->hp.n_ctx) {
        fprintf(stderr,
                "error: the prompt (%zu tokens with BOS) and -n %d need %lld positions, but the model's context "
                "is %d\n",
                prompt.size(), o.n_predict, need, m->hp.n_ctx);
        tgm::model_free(m);
        tg_backend_free(be);
        return 1;
    }
    const int n_ctx = (int)need;
    tgm::session_params sp;
    sp.n_seq = o.batch, sp.n_ctx = n_ctx, sp.type_k = o.type_k, sp.type_v = o.type_v, sp.type_state = o.type_state;
    tgm::session *s = tgm::session_new(m, sp);
    int rc = 0;
    if (!s) {
        fprintf(stderr, "error: %s\n", tg_last_error());
        tgm::model_free(m);
        tg_backend_free(be);
        return 1;
    }
    std::vector<float> logits;
    timing tm = load;
    int n_gen = 0;
    const int V = m->hp.n_vocab, B = o.batch;
    if (rc == 0) {
        std::vector<int32_t> toks;
        for (int b = 0; b < B; b++) toks.insert(toks.end(), prompt.begin(), prompt.end());
        // the compute buffer is sized once, for the prompt pass (the largest step)
        if (tgm::session_reserve(s, (int)prompt.size()) != TG_OK)
            fprintf(stderr, "warning: %s\n", tg_last_error());
        if (o.warmup) {
            // the same shapes, untimed, on this session (its graphs are kept and,
            // on CUDA, captured on their second run), then every sequence reset
            std::vector<int32_t> one(B, m->hp.bos);
            tg_status ws = tgm::session_eval(s, 0, B, toks.data(), (int)prompt.size(), false, &logits);
            for (int i = 0; i < 2 && ws == TG_OK && s->n_past[0] < n_ctx; i++)
                ws = tgm::session_eval(s, 0, B, one.data(), 1, false, &logits);
            if (ws != TG_OK) fprintf(stderr, "warning: warm-up failed: %s\n", tg_last_error());
            for (int b = 0; b < B; b++)
                if (tgm::session_reset(s, b) != TG_OK) fprintf(stderr, "warning: reset failed: %s\n", tg_last_error());
        }
        if (!o.quiet) printf("%s", o.prompt.c_str());
        double t0 = now_ms();
        const int reused = o.prompt_cache.empty() ? 0 : load_prompt_cache(s, o.prompt_cache, prompt);
        tg_status st = eval_prompt(s, prompt, reused, o.prompt_cache, &logits);
        tm.t_prompt = now_ms() - t0;
        tm.n_prompt = (long long)prompt.size() - reused;  // less the tokens the prompt cache held
        std::vector<int32_t> cur(B);
        std::vector<bool> done(B, false);
        // each sequence's tokens so far, for the repetition penalty
        std::vector<std::vector<int32_t>> hist(B, prompt);
        while (st == TG_OK && n_gen < o.n_predict) {
            for (int b = 0; b < B && st == TG_OK; b++) {
                if ((cur[b] = smp.sample(&logits[(size_t)b * V], V, hist[b].data(), hist[b].size())) < 0)
                    st = tg_set_error(TG_ERR_BACKEND, "token %d of sequence %d: every logit is NaN or inf", n_gen + 1,
                                      b);
                hist[b].push_back(cur[b]);
            }
            if (st != TG_OK) break;
            n_gen++;
            if (cur[0] == m->hp.eos && !o.ignore_eos) done[0] = true;
            if (!o.quiet && !done[0]) {
                printf("%s", tgm::detokenize(cur[0]).c_str());
                fflush(stdout);
            }
            if (B == 1 && done[0]) break;
            if (n_gen == o.n_predict) break;
            t0 = now_ms();
            st = tgm::session_eval(s, 0, B, cur.data(), 1, false, &logits);
            tm.t_gen += now_ms() - t0;
        }
        if (!o.quiet) printf("\n");
        if (st != TG_OK) {
            fprintf(stderr, "error: %s\n", tg_last_error());
            rc = 1;
        }
    }
    tm.n_steps = std::max(0, n_gen - 1);  // the first token comes from the prompt pass
    if (rc == 0) print_timing(be, m, s, B, tm);
    tgm::session_free(s);
    tgm::model_free(m);
    tg_backend_free(be);
    return rc;
}
