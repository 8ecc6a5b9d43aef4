// tinygml-quantize - rewrite a GGUF model with its matrices quantized:
//   tinygml-quantize llama-f16.gguf llama-q4_0.gguf q4_0
// TYPE: q8_0, q4_0 or q4_k. Norms, 1-D tensors and matrices whose ne[0] is not
// a multiple of the type's block size (32; 256 for q4_k) stay as they are;
// every key/value is copied. Big files show progress on stderr; the output is
// written while it is quantized, a row at a time.
#include <chrono>
#include <cstdio>
#include <cstring>

#include "quantize.h"

namespace {

void usage(FILE *f, const char *argv0) {
    fprintf(f,
            "usage: %s IN.gguf OUT.gguf TYPE\n"
            "  TYPE   q8_0 | q4_0 | q4_k\n"
            "  Matrices (2-D+, not norms, ne[0] a multiple of 32, or 256 for q4_k) are quantized;\n"
            "  everything else, and all metadata, is copied.\n",
            argv0);
}

}  // namespace

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout, argv[0]);
            return 0;
        }
    if (argc != 4) {
        usage(stderr, argv[0]);
        return 2;
    }
    tg_type t;
    if (!tgm::quantize_type_from_name(argv[3], &t)) {
        fprintf(stderr, "error: unknown type '%s' (q8_0, q4_0, q4_k)\n", argv[3]);
        return 2;
    }
    if (!strcmp(argv[1], argv[2])) {
        fprintf(stderr, "error: the output would overwrite the input '%s'\n", argv[1]);
        return 2;
    }
    const auto t0 = std::chrono::steady_clock::now();
    tgm::quantize_stats s;
    if (tgm::quantize_file(argv[1], argv[2], t, stderr, &s) != TG_OK) {
        fprintf(stderr, "error: %s\n", tg_last_error());
        return 1;
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    fprintf(stderr, "%s: %d tensors quantized to %s, %d kept (%d of them matrices whose ne[0] is not a multiple of %lld); "
                    "tensor data %.1f MB -> %.1f MB in %.1f s\n",
            argv[2], s.n_quantized, tg_type_name(t), s.n_kept, s.n_kept_block, (long long)tg_type_block_size(t),
            s.bytes_in / 1e6, s.bytes_out / 1e6, secs);
    return 0;
}
