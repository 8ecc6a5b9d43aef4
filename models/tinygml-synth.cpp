// tinygml-synth - write a random-weight llama GGUF (llama.cpp's keys and
// tensor names) for end-to-end benchmarks:
//   tinygml-synth --preset 1.1b -o /tmp/llama-1.1b.gguf
//   tinygml-synth --preset 0.26m --n-layer 2 --type f16 --seed 3 -o tiny.gguf
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "synth.h"

namespace {

void usage(FILE *f, const char *argv0) {
    fprintf(f,
            "usage: %s -o OUT.gguf [--preset 0.26m|125m|1.1b] [overrides]\n"
            "  --preset NAME   0.26m (default): n_embd 96, 3 layers, 6/2 heads, ff 160, vocab 259, f32, ctx 256\n"
            "                  125m: n_embd 768, 12 layers, 12/4 heads, ff 2048, vocab 32000, f16, ctx 4096\n"
            "                  1.1b: n_embd 2048, 16 layers, 32/8 heads, ff 8192, vocab 32000, f16, ctx 4096\n"
            "  --n-embd N  --n-layer N  --n-head N  --n-head-kv N  --n-ff N  --n-vocab N  --ctx N\n"
            "  --type f16|bf16|f32   matrix type (norms are always f32)\n"
            "  --seed S        default 1; the file's bytes depend only on the config and the seed\n",
            argv0);
}

bool parse_int(const char *s, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || end == s || v < lo || v > hi) return false;
    *out = v;
    return true;
}

}  // namespace

int main(int argc, char **argv) {
    tgm::synth_config c;
    std::string out, preset = "0.26m";
    // the preset first, so overrides apply on top of it whatever their order
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--preset")) preset = argv[i + 1];
    if (!tgm::synth_preset(preset, &c)) {
        fprintf(stderr, "error: unknown preset '%s' (0.26m, 125m, 1.1b)\n", preset.c_str());
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        if (a == "-h" || a == "--help") {
            usage(stdout, argv[0]);
            return 0;
        }
        if (a.empty() || a[0] != '-') {
            fprintf(stderr, "error: unexpected argument '%s'\n", a.c_str());
            usage(stderr, argv[0]);
            return 2;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "error: %s needs a value\n", a.c_str());
            return 2;
        }
        const char *val = argv[++i];
        long long v = 0;
        bool ok = true;
        int *dst = a == "--n-embd"      ? &c.n_embd
                   : a == "--n-layer"   ? &c.n_layer
                   : a == "--n-head"    ? &c.n_head
                   : a == "--n-head-kv" ? &c.n_head_kv
                   : a == "--n-ff"      ? &c.n_ff
                   : a == "--n-vocab"   ? &c.n_vocab
                   : a == "--ctx"       ? &c.n_ctx
                                        : nullptr;
        if (dst) {
            ok = parse_int(val, 1, 1 << 22, &v);
            if (ok) *dst = (int)v;
        } else if (a == "-o") {
            out = val;
        } else if (a == "--preset") {
            // applied above
        } else if (a == "--seed") {
            ok = parse_int(val, 0, (1LL << 62), &v);
            if (ok) c.seed = (uint64_t)v;
        } else if (a == "--type") {
            std::string t = val;
            ok = t == "f16" || t == "bf16" || t == "f32";
            if (ok) c.wtype = t == "f16" ? TG_TYPE_F16 : t == "bf16" ? TG_TYPE_BF16 : TG_TYPE_F32;
        } else {
            fprintf(stderr, "error: unknown option %s\n", a.c_str());
            usage(stderr, argv[0]);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "error: bad value '%s' for %s\n", val, a.c_str());
            return 2;
        }
    }
    if (out.empty()) {
        fprintf(stderr, "error: -o OUT.gguf is required\n");
        usage(stderr, argv[0]);
        return 2;
    }
    if (tgm::synth_check(c) != TG_OK) {
        fprintf(stderr, "error: %s\n", tg_last_error());
        return 2;
    }
    auto t0 = std::chrono::steady_clock::now();
    if (tgm::synth_write(c, out.c_str()) != TG_OK) {
        fprintf(stderr, "error: %s\n", tg_last_error());
        return 1;
    }
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const char *tn = c.wtype == TG_TYPE_F32 ? "f32" : c.wtype == TG_TYPE_F16 ? "f16" : "bf16";
    fprintf(stderr,
            "%s: llama %s, n_embd %d, %d layers, %d/%d heads, ff %d, vocab %d, ctx %d, %s, seed %llu: "
            "%.2fM params in %.2f s\n",
            out.c_str(), c.name.c_str(), c.n_embd, c.n_layer, c.n_head, c.n_head_kv, c.n_ff, c.n_vocab, c.n_ctx, tn,
            (unsigned long long)c.seed, tgm::synth_n_params(c) / 1e6, s);
    return 0;
}
