// model_util.h - random toy models (toy_model.h) written as GGUF files, for model tests.
#pragma once
#include <cmath>
#include <cstdio>

#include <gtest/gtest.h>
#include <random>
#include <string>
#include <vector>

#include "model.h"
#include "tinygml.h"
#include "toy_model.h"

namespace tgt {

// Write to a temp file; returns its path ("" on failure).
inline std::string write_temp_model(tg_gguf_writer *w, const std::string &tag) {
    std::string path = ::testing::TempDir() + "tinygml_" + tag + ".gguf";
    tg_status s = tg_gguf_write(w, path.c_str());
    tg_gguf_writer_free(w);
    return s == TG_OK ? path : "";
}

}  // namespace tgt
