// tinygml-run - generate text with a toy model, llama.cpp style. The shipped
// models answer the recall task of models/README.md (key=value pairs, then
// ?key=; this prints the prompt, then "q2"):
//   tinygml-run -m models/hybrid-recall.gguf -p "a3=p7 b1=q2 c5=w4 d8=s1 ?b1=" -n 4
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "model.h"

namespace {

struct options {
    std::string model, prompt, device = "auto";
    int n_predict = 64, threads = 0, batch = 1;
    float temp = 0.0f, top_p = 0.95f;
    int top_k = 40;
    unsigned long long seed = 1234;
    bool quiet = false, ignore_eos = false, warmup = false, no_mmap = false;
};

void usage(FILE *f, const char *argv0) {
    const options d;
    fprintf(f,
            "usage: %s -m MODEL.gguf [-p PROMPT] [options]\n"
            "  -m FILE          model file (GGUF: llama or tghybrid)\n"
            "  -p PROMPT        prompt text (default: empty, only BOS)\n"
            "  -n N             tokens to generate (default %d)\n"
            "  --device D       cpu, cuda or auto (default %s: cuda when a GPU is present)\n"
            "  --temp T         temperature (default %g; below %g: greedy)\n"
            "  --top-k K        keep the K most likely tokens (default %d; 0: all)\n"
            "  --top-p P        then the smallest set with probability >= P (default %g)\n"
            "  --seed S         sampling seed (default %llu)\n"
            "  -t N             CPU threads (default %d: all hardware threads)\n"
            "  -b N             run N copies of the prompt as one batch, for throughput (default %d)\n"
            "  -q               print only the timing lines\n"
            "  --ignore-eos     keep generating past EOS (for timing)\n"
            "  --warmup         run the prompt and one step once untimed first (kernel load, cuBLAS init, graph capture)\n"
            "  --no-mmap        read the model file into memory instead of mapping it (the CPU then uses a copy;\n"
            "                   safe if the file may change while running: see models/README.md, SIGBUS)\n"
            "  -h, --help       this help\n"
            "example (the recall task of models/README.md: key=value pairs, then ?key=):\n"
            "  %s -m models/hybrid-recall.gguf -p \"a3=p7 b1=q2 c5=w4 d8=s1 ?b1=\" -n 4\n",
            argv0, d.n_predict, d.device.c_str(), d.temp, tgm::sampler::kMinTemp, d.top_k, d.top_p, d.seed,
            d.threads, d.batch, argv0);
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

enum class parsed { ok, help, error };

parsed parse(int argc, char **argv, options &o) {
    static const char *const flags[] = {"-q", "--ignore-eos", "--warmup", "--no-mmap"};
    static const char *const valued[] = {"-m",      "-p",     "-n", "--device", "--temp", "--top-k",
                                         "--top-p", "--seed", "-t", "-b"};
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
            (a == "-q" ? o.quiet : a == "--warmup" ? o.warmup : a == "--no-mmap" ? o.no_mmap : o.ignore_eos) = true;
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
        long long v;
        bool ok = true;
        if (a == "-m") o.model = val;
        else if (a == "-p") o.prompt = val;
        else if (a == "--device") o.device = val;
        else if (a == "-n") ok = parse_int(val, 0, 1 << 20, &v) && ((o.n_predict = (int)v), true);
        else if (a == "-t") ok = parse_int(val, 0, 256, &v) && ((o.threads = (int)v), true);
        else if (a == "-b") ok = parse_int(val, 1, 4096, &v) && ((o.batch = (int)v), true);
        else if (a == "--top-k") ok = parse_int(val, 0, 1 << 22, &v) && ((o.top_k = (int)v), true);
        else if (a == "--seed") ok = parse_int(val, 0, (1LL << 62), &v) && ((o.seed = (unsigned long long)v), true);
        else if (a == "--temp") ok = parse_float(val, 0.0f, 100.0f, &o.temp);
        else if (a == "--top-p") ok = parse_float(val, 0.0f, 1.0f, &o.top_p);
        if (!ok) {
            fprintf(stderr, "error: bad value '%s' for %s\n", val, a.c_str());
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
    return parsed::ok;
}

double now_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
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
    std::vector<int32_t> prompt = tgm::tokenize(o.prompt, true);
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
    tgm::session *s = tgm::session_new(m, o.batch, n_ctx);
    int rc = 0;
    if (!s) {
        fprintf(stderr, "error: %s\n", tg_last_error());
        tgm::model_free(m);
        tg_backend_free(be);
        return 1;
    }
    tgm::sampler smp;
    smp.temp = o.temp;
    smp.top_k = o.top_k;
    smp.top_p = o.top_p;
    smp.rng.seed(o.seed);
    std::vector<float> logits;
    double t_prompt = 0, t_gen = 0;
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
        tg_status st = tgm::session_eval(s, 0, B, toks.data(), (int)prompt.size(), false, &logits);
        t_prompt = now_ms() - t0;
        std::vector<int32_t> cur(B);
        std::vector<bool> done(B, false);
        while (st == TG_OK && n_gen < o.n_predict) {
            for (int b = 0; b < B && st == TG_OK; b++)
                if ((cur[b] = smp.sample(&logits[(size_t)b * V], V)) < 0)
                    st = tg_set_error(TG_ERR_BACKEND, "token %d of sequence %d: every logit is NaN or inf", n_gen + 1,
                                      b);
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
            t_gen += now_ms() - t0;
        }
        if (!o.quiet) printf("\n");
        if (st != TG_OK) {
            fprintf(stderr, "error: %s\n", tg_last_error());
            rc = 1;
        }
    }
    if (rc == 0) {
        const double pp = B * prompt.size() / (t_prompt / 1e3);
        const int n_steps = std::max(0, n_gen - 1);  // the first token comes from the prompt pass
        fprintf(stderr, "backend %s, batch %d, model loaded in %.2f ms (%s)\n", tg_backend_name(be), B, t_load,
                m->file ? "mmap, weights used in place" : lo.use_mmap ? "mmap, uploaded" : "read");
        fprintf(stderr, "prompt:     %5zu tokens x %d in %8.2f ms (%10.1f tokens/s)\n", prompt.size(), B, t_prompt, pp);
        if (n_steps > 0)
            fprintf(stderr, "generation: %5d tokens x %d in %8.2f ms (%10.1f tokens/s)\n", n_steps, B, t_gen,
                    B * n_steps / (t_gen / 1e3));
        fprintf(stderr, "memory: weights %.2f MiB, caches+states %.2f MiB, compute buffer %.2f MiB\n",
                m->weight_bytes / 1048576.0, s->state_bytes / 1048576.0,
                tg_backend_compute_buffer_size(be) / 1048576.0);
    }
    tgm::session_free(s);
    tgm::model_free(m);
    tg_backend_free(be);
    return rc;
}
