# fuzz.cmake - opt-in libFuzzer targets for the GGUF reader (RELIABILITY 10)
# and the session state loader (models/state.cpp, state_fuzz).
# Include from the top-level CMakeLists.txt: include(cmake/fuzz.cmake). Then
#   cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER=clang++ -DTG_FUZZ=ON -DTG_CUDA=OFF
#   cmake --build build-fuzz --target gguf_fuzz
#   build-fuzz/gguf_fuzz -max_total_time=60 -max_len=4096 build-fuzz/corpus tests/fuzz/corpus
# (scripts/fuzz.sh builds with clang++ directly and runs it with the bounds
# CI uses.) With testing enabled, ctest replays the seed corpus once
# (test gguf_fuzz_corpus). Needs clang and libFuzzer's runtime (Debian:
# clang-14, libclang-rt-14-dev).
option(TG_FUZZ "Build the fuzz targets gguf_fuzz and state_fuzz (clang: libFuzzer + ASan + UBSan)" OFF)

if(TG_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "TG_FUZZ=ON needs clang (libFuzzer): configure with -DCMAKE_CXX_COMPILER=clang++")
  endif()
  set(TG_FUZZ_ROOT ${CMAKE_CURRENT_LIST_DIR}/..)
  set(TG_FUZZ_FLAGS -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
  set(TG_GGUF_SOURCES ${TG_FUZZ_ROOT}/src/gguf_read.cpp ${TG_FUZZ_ROOT}/src/gguf_get.cpp
                      ${TG_FUZZ_ROOT}/src/gguf_write.cpp ${TG_FUZZ_ROOT}/src/error.cpp)

  add_executable(gguf_fuzz ${TG_FUZZ_ROOT}/tests/fuzz/gguf_fuzz.cpp ${TG_GGUF_SOURCES})
  target_include_directories(gguf_fuzz PRIVATE ${TG_FUZZ_ROOT}/src)
  target_compile_features(gguf_fuzz PRIVATE cxx_std_17)
  target_compile_options(gguf_fuzz PRIVATE ${TG_FUZZ_FLAGS} -g -O1)
  target_link_options(gguf_fuzz PRIVATE ${TG_FUZZ_FLAGS})

  # Regenerates the seed corpus: gguf_make_corpus tests/fuzz/corpus
  add_executable(gguf_make_corpus ${TG_FUZZ_ROOT}/tests/fuzz/make_corpus.cpp ${TG_GGUF_SOURCES})
  target_include_directories(gguf_make_corpus PRIVATE ${TG_FUZZ_ROOT}/src)
  target_compile_features(gguf_make_corpus PRIVATE cxx_std_17)

  # Replay every seed once (file arguments: libFuzzer runs them and writes nothing).
  file(GLOB TG_FUZZ_SEEDS ${TG_FUZZ_ROOT}/tests/fuzz/corpus/*.gguf)
  if(TG_FUZZ_SEEDS)
    add_test(NAME gguf_fuzz_corpus COMMAND gguf_fuzz ${TG_FUZZ_SEEDS})
  endif()

  # The session state loader (tests/fuzz/state_fuzz.cpp) on the whole CPU
  # engine and models/, instrumented (the SIMD files keep their ISA flags).
  file(GLOB TG_FUZZ_ENGINE ${TG_FUZZ_ROOT}/src/*.cpp ${TG_FUZZ_ROOT}/src/cpu_fast/*.cpp ${TG_FUZZ_ROOT}/ggml_ops/*.cpp)
  add_executable(state_fuzz ${TG_FUZZ_ROOT}/tests/fuzz/state_fuzz.cpp ${TG_FUZZ_ENGINE} ${TG_FUZZ_ROOT}/models/model.cpp
                            ${TG_FUZZ_ROOT}/models/session.cpp ${TG_FUZZ_ROOT}/models/state.cpp)
  target_include_directories(state_fuzz PRIVATE ${TG_FUZZ_ROOT}/src ${TG_FUZZ_ROOT}/models)
  target_compile_features(state_fuzz PRIVATE cxx_std_17)
  target_compile_options(state_fuzz PRIVATE ${TG_FUZZ_FLAGS} -g -O1)
  target_link_options(state_fuzz PRIVATE ${TG_FUZZ_FLAGS})
  target_link_libraries(state_fuzz PRIVATE Threads::Threads)
  file(GLOB TG_STATE_SEEDS ${TG_FUZZ_ROOT}/tests/fuzz/state_corpus/*.bin)
  if(TG_STATE_SEEDS)
    add_test(NAME state_fuzz_corpus COMMAND state_fuzz ${TG_STATE_SEEDS})
  endif()
endif()
