// quantize.h - rewrite a GGUF file with its matrices quantized (the engine of
// tinygml-quantize, also used by the tests).
#pragma once
#include <cstdint>
#include <cstdio>

#include "tinygml.h"

namespace tgm {

struct quantize_stats {
    int n_quantized = 0, n_kept = 0;       // tensors converted / copied as they were
    int n_kept_block = 0;                  // of the kept: 2-D+ float tensors whose ne[0] is not a block multiple
    uint64_t bytes_in = 0, bytes_out = 0;  // tensor data
};

// Which tensors are quantized: 2-D or more, of a float type, not a norm (name
// containing "norm"), ne[0] a multiple of t's block size. Everything else is
// kept as it is (type and bytes).
bool quantize_wanted(const char *name, tg_type type, int n_dims, const int64_t *ne, tg_type t);

// Read in_path, write out_path: every key/value copied (general.file_type and
// general.quantization_version set as llama.cpp does), tensors in file order,
// the wanted ones quantized with tg_quantize row by row while the file is
// written (tg_gguf_add_tensor_fill: a few MiB of memory beyond the input).
// progress != NULL: a line per tensor and per 10% of a big tensor on it.
// Errors: TG_ERR_ARG (t not quantized), IO / FORMAT from the reader and the
// writer, with "[quantize] ..." messages; out_path is not left behind.
tg_status quantize_file(const char *in_path, const char *out_path, tg_type t, FILE *progress,
                        quantize_stats *stats);

// "q8_0" / "Q4_K" ... -> the type; false if none of the three.
bool quantize_type_from_name(const char *name, tg_type *t);

}  // namespace tgm
