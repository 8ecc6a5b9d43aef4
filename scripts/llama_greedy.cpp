// llama_greedy.cpp - greedy completions of many prompts with llama.cpp's
// library, for scripts/llama_interop.sh (not part of the tinygml build).
//
//   llama_greedy MODEL.gguf PROMPTS.txt N [THREADS]
//
// PROMPTS.txt holds one prompt per line (anything after a tab is ignored, so
// tests/fixtures/recall_heldout.txt works as is). For each prompt the model
// is fed BOS + the prompt (llama.cpp's own tokenizer, from the file's
// vocabulary), then up to N tokens are taken by argmax of the logits, stopping
// at an end-of-generation token. Output: prompt<TAB>completion<TAB>prompt
// token count, one line per prompt, in order. The same argmax greedy as
// tinygml-run --temp 0, so the two outputs compare line by line.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "llama.h"

static void quiet_log(enum ggml_log_level level, const char *text, void *) {
    if (level == GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s MODEL.gguf PROMPTS.txt N [THREADS]\n", argv[0]);
        return 2;
    }
    const int n_predict = atoi(argv[3]);
    const int n_threads = argc > 4 ? atoi(argv[4]) : 2;
    llama_log_set(quiet_log, nullptr);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    // llama.cpp's repacked CPU buffers off (llama-bench's --repack 0): on the
    // 2-vCPU Xeon here its repacked quantized kernels die of SIGILL or SIGSEGV
    // on prompts (bench/cpu_quant_rounds.sh sees the same); the plain kernels
    // give the reference answers
    mp.use_extra_bufts = false;
    llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) {
        fprintf(stderr, "llama_greedy: llama.cpp cannot load %s\n", argv[1]);
        return 1;
    }
    const llama_vocab *vocab = llama_model_get_vocab(model);
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 0;  // the model's context_length
    cp.n_batch = 512;
    cp.type_k = cp.type_v = GGML_TYPE_F32;  // as scripts/llama_interop.sh runs tinygml (both CLIs default to F16)
    cp.n_threads = cp.n_threads_batch = n_threads;
    cp.no_perf = true;
    llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        fprintf(stderr, "llama_greedy: cannot create a context\n");
        return 1;
    }
    const int n_vocab = llama_vocab_n_tokens(vocab);
    std::ifstream in(argv[2]);
    std::string line;
    int rc = 0;
    while (std::getline(in, line)) {
        const std::string prompt = line.substr(0, line.find('\t'));
        std::vector<llama_token> toks(prompt.size() + 8);
        const int n = llama_tokenize(vocab, prompt.c_str(), (int)prompt.size(), toks.data(), (int)toks.size(), true,
                                     false);
        if (n < 0) {
            fprintf(stderr, "llama_greedy: cannot tokenize '%s'\n", prompt.c_str());
            rc = 1;
            break;
        }
        toks.resize(n);
        llama_memory_clear(llama_get_memory(ctx), true);
        std::string out;
        llama_batch batch = llama_batch_get_one(toks.data(), (int)toks.size());
        llama_token next = 0;
        for (int i = 0; i < n_predict; i++) {
            if (llama_decode(ctx, batch) != 0) {
                fprintf(stderr, "llama_greedy: decode failed\n");
                rc = 1;
                break;
            }
            const float *logits = llama_get_logits_ith(ctx, -1);
            next = 0;
            for (int v = 1; v < n_vocab; v++)
                if (logits[v] > logits[next]) next = v;
            if (llama_vocab_is_eog(vocab, next)) break;
            char piece[64];
            const int len = llama_token_to_piece(vocab, next, piece, sizeof piece, 0, false);
            if (len > 0) out.append(piece, len);
            batch = llama_batch_get_one(&next, 1);
        }
        if (rc) break;
        printf("%s\t%s\t%d\n", prompt.c_str(), out.c_str(), n);
    }
    llama_free(ctx);
    llama_model_free(model);
    return rc;
}
