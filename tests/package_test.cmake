# package_test.cmake - install the build into a temp prefix, then configure,
# build and run a C-only consumer (project(app LANGUAGES C)) against
# find_package(tinygml): the static target's link interface must carry
# everything it needs (the C++ runtime, threads, libm). Also checks that
# tinygml-run is installed and runs. Issue 8 item 13.
#   cmake -DBUILD=<build dir> -DWORK=<scratch dir> -DCC=<C compiler> [-DGEN=<generator>]
#         [-DSAN=<sanitizers>] -P package_test.cmake
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK}/app)
set(prefix ${WORK}/prefix)

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "package_test: ${what} failed (${rc}):\n${out}\n${err}")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()

if(NOT CC)
  message("package_test: SKIP: no C compiler was given")
  return()  # a SKIP_REGULAR_EXPRESSION matches the line above
endif()
run("cmake --install" ${CMAKE_COMMAND} --install ${BUILD} --prefix ${prefix})
foreach(f include/tinygml.h bin/tinygml-run)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "package_test: ${f} is not installed")
  endif()
endforeach()
run("the installed tinygml-run --help" ${prefix}/bin/tinygml-run --help)

file(WRITE ${WORK}/app/CMakeLists.txt [=[
cmake_minimum_required(VERSION 3.20)
project(app LANGUAGES C)
find_package(tinygml REQUIRED)
add_executable(app main.c)
target_link_libraries(app PRIVATE tinygml::tinygml)
]=])
# y = silu(W x) with W {4, 3} F16 and x {4}, on the CPU, against a float64 oracle
file(WRITE ${WORK}/app/main.c [=[
#include <math.h>
#include <stdio.h>
#include "tinygml.h"

int main(void) {
    tg_init_params ip = {1 << 20, NULL, true};
    tg_context *ctx = tg_init(ip);
    tg_backend *be = tg_backend_cpu(1);
    if (!ctx || !be) return 1;
    tg_tensor *W = tg_new_tensor_2d(ctx, TG_TYPE_F16, 4, 3);
    tg_tensor *x = tg_new_tensor_1d(ctx, TG_TYPE_F32, 4);
    tg_buffer *buf = tg_backend_alloc(be, ctx);
    unsigned short w[12];
    float wf[12];
    for (int i = 0; i < 12; i++) {
        wf[i] = 0.25f * (float)((i * 7) % 11) - 1.0f;
        w[i] = tg_fp32_to_fp16(wf[i]);
    }
    const float xv[4] = {0.5f, -1.25f, 2.0f, 0.75f};
    tg_tensor_set(W, w, 0, sizeof w);
    tg_tensor_set(x, xv, 0, sizeof xv);
    tg_tensor *y = tg_silu(ctx, tg_mul_mat(ctx, W, x));
    tg_graph *g = tg_graph_new(ctx);
    if (tg_graph_expand(g, y) != TG_OK || tg_graph_compute(be, g) != TG_OK) {
        fprintf(stderr, "%s\n", tg_last_error());
        return 1;
    }
    float out[3] = {NAN, NAN, NAN};
    tg_tensor_get(y, out, 0, sizeof out);
    int bad = 0;
    for (int r = 0; r < 3; r++) {
        double d = 0;
        for (int k = 0; k < 4; k++) d += (double)wf[r * 4 + k] * xv[k];
        double want = d / (1.0 + exp(-d));
        if (!(fabs(out[r] - want) <= 1e-5 * (1.0 + fabs(want)))) bad = 1;
        printf("y[%d] = %f (want %f)\n", r, out[r], want);
    }
    tg_buffer_free(buf);
    tg_backend_free(be);
    tg_free(ctx);
    printf(bad ? "app: WRONG\n" : "app: ok\n");
    return bad;
}
]=])
set(flags "")
if(SAN)  # the library was built with sanitizers: so is the consumer
  set(flags "-DCMAKE_C_FLAGS=-fsanitize=${SAN}" "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=${SAN}")
endif()
set(gen "")
if(GEN)
  set(gen -G ${GEN})
endif()
run("configuring the C consumer" ${CMAKE_COMMAND} -S ${WORK}/app -B ${WORK}/app/build ${gen}
    -DCMAKE_C_COMPILER=${CC} -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release ${flags})
run("building the C consumer" ${CMAKE_COMMAND} --build ${WORK}/app/build)
run("running the C consumer" ${WORK}/app/build/app)
if(NOT out MATCHES "app: ok")
  message(FATAL_ERROR "package_test: the consumer printed:\n${out}")
endif()
message(STATUS "package_test: installed, and a C-only consumer built and ran:\n${out}")
file(REMOVE_RECURSE ${WORK})
