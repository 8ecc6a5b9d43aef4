# test_summary_test.cmake - issue 8 item 14: scripts/test_summary.sh (run by
# `make test` after ctest) counts the tests ctest skipped and the GPU tests
# among them. A scratch ctest project with one passing test, two tests that
# skip as the GPU tests do (gtest's output for GTEST_SKIP() << "no CUDA
# device") and one that skips for another reason, run by the real ctest.
#   cmake -DSRC=<source dir> -DWORK=<scratch dir> -P test_summary_test.cmake
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
# (the outputs come from files: ctest's log also records each command line)
set(skip "[  SKIPPED ] 1 test, listed below:")
file(WRITE ${WORK}/pass.txt "[  PASSED  ] 1 test.\n")
file(WRITE ${WORK}/gpu.txt "x.cpp:1: Skipped\nno CUDA device\n${skip}\n")
file(WRITE ${WORK}/other.txt "x.cpp:2: Skipped\nTG_TEST_SMALL\n${skip}\n")
file(WRITE ${WORK}/CTestTestfile.cmake "
add_test(pass ${CMAKE_COMMAND} -E cat ${WORK}/pass.txt)
add_test(gpu1 ${CMAKE_COMMAND} -E cat ${WORK}/gpu.txt)
add_test(gpu2 ${CMAKE_COMMAND} -E cat ${WORK}/gpu.txt)
add_test(other ${CMAKE_COMMAND} -E cat ${WORK}/other.txt)
set_tests_properties(pass gpu1 gpu2 other PROPERTIES SKIP_REGULAR_EXPRESSION \"\\\\[  SKIPPED \\\\]\")
")
execute_process(COMMAND ${CMAKE_CTEST_COMMAND} WORKING_DIRECTORY ${WORK} RESULT_VARIABLE rc OUTPUT_VARIABLE out)
if(NOT out MATCHES "gpu1 [.]+[*]*Skipped" OR NOT out MATCHES "pass [.]+ *Passed")
  message(FATAL_ERROR "the scratch ctest run did not skip as expected:\n${out}")
endif()
execute_process(COMMAND ${SRC}/scripts/test_summary.sh ${WORK} RESULT_VARIABLE rc OUTPUT_VARIABLE sum)
if(NOT sum STREQUAL "make test: 3 tests skipped, 2 of them GPU tests (no CUDA device here: they run on a machine with an NVIDIA GPU)\n")
  message(FATAL_ERROR "test_summary.sh printed: '${sum}'")
endif()
message(STATUS "test_summary_test: ${sum}")
file(REMOVE_RECURSE ${WORK})
