// synth.h - random-weight llama models written as GGUF (tinygml-synth), with
// llama.cpp's keys and tensor names, for end-to-end benchmarks of the engine
// and its peers on the same file. See models/README.md ("Synthetic models").
#pragma once
#include <stdint.h>

#include <string>

#include "tinygml.h"

namespace tgm {

struct synth_config {
    std::string name = "0.26m";  // general.name is "tinygml-synth-" + name
    int n_embd = 96, n_layer = 3, n_head = 6, n_head_kv = 2, n_ff = 160, n_vocab = 259, n_ctx = 256;
    tg_type wtype = TG_TYPE_F32;  // matrices (token_embd, attention, ffn, output); norms are always F32
    uint64_t seed = 1;
};

// Fill *c with a preset: "0.26m", "125m" or "1.1b". false if the name is unknown.
bool synth_preset(const std::string &name, synth_config *c);
// TG_OK, or TG_ERR_ARG + tg_last_error() "[synth] ..." for an impossible config.
tg_status synth_check(const synth_config &c);
// Parameters and file bytes of the tensors (for reports).
int64_t synth_n_params(const synth_config &c);
// Write the model to path. Tensor data is generated while it is written
// (a few MiB of memory whatever the size); the bytes depend only on the
// config and the seed. Errors as tg_gguf_write's (or synth_check's).
tg_status synth_write(const synth_config &c, const char *path);

}  // namespace tgm
