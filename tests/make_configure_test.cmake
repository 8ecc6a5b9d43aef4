# make_configure_test.cmake - issue 8 item 10: a failed configure must not
# leave `make run`/`make test` failing with "ninja: error: loading
# 'build.ninja'". The Makefile configures a build folder that has no build
# files (even when a CMakeCache.txt is there) and removes the cache of a
# configure that failed.
#   cmake -DMAKE=make -DSRC=<source dir> -DWORK=<scratch dir> -P make_configure_test.cmake
if(NOT MAKE)
  message("make_configure_test: SKIP: no make program found")
  return()
endif()
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
set(ok_flags "CMAKE_FLAGS=-DTG_CUDA=OFF -DTG_BUILD_TESTS=OFF -DTG_BUILD_BENCH=OFF")

# 1. a configure that fails leaves no cache behind
execute_process(COMMAND ${MAKE} -C ${SRC} configure BUILD=${WORK}/a
                        "CMAKE_FLAGS=-DCMAKE_TOOLCHAIN_FILE=${WORK}/no-such-toolchain.cmake"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "make configure with a missing toolchain file succeeded:\n${out}\n${err}")
endif()
if(EXISTS ${WORK}/a/CMakeCache.txt)
  message(FATAL_ERROR "a failed configure left ${WORK}/a/CMakeCache.txt:\n${out}\n${err}")
endif()
if(NOT out MATCHES "configuring ${WORK}/a/ failed")
  message(FATAL_ERROR "no failure message from make:\n${out}\n${err}")
endif()

# 2. a folder with a cache but no build files (what an older Makefile or a
#    cmake run by hand leaves after a failed configure) is configured again
file(MAKE_DIRECTORY ${WORK}/b)
file(WRITE ${WORK}/b/CMakeCache.txt "# left by a configure that failed\n")
execute_process(COMMAND ${MAKE} -C ${SRC} configure BUILD=${WORK}/b ${ok_flags}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT (EXISTS ${WORK}/b/build.ninja OR EXISTS ${WORK}/b/Makefile))
  message(FATAL_ERROR "make configure did not configure a folder holding only a cache (${rc}):\n${out}\n${err}")
endif()

# 3. and a configured folder is left alone (no second configure)
execute_process(COMMAND ${MAKE} -C ${SRC} configure BUILD=${WORK}/b ${ok_flags}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR out MATCHES "== configuring")
  message(FATAL_ERROR "make configure ran cmake again on a configured folder:\n${out}\n${err}")
endif()
# 4. without GoogleTest the configure still succeeds (make run works) and the
#    suite is one failing test that says what to install
execute_process(COMMAND ${MAKE} -C ${SRC} configure BUILD=${WORK}/c
                        "CMAKE_FLAGS=-DTG_CUDA=OFF -DTG_BUILD_BENCH=OFF -DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON -DTG_GTEST_SRC=${WORK}/no-gtest"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT err MATCHES "GoogleTest not found")
  message(FATAL_ERROR "configure without GoogleTest (${rc}):\n${out}\n${err}")
endif()
execute_process(COMMAND ${CMAKE_CTEST_COMMAND} -N WORKING_DIRECTORY ${WORK}/c OUTPUT_VARIABLE out)
if(NOT out MATCHES "googletest_missing")
  message(FATAL_ERROR "no googletest_missing test without GoogleTest:\n${out}")
endif()
message(STATUS "make_configure_test: ok")
file(REMOVE_RECURSE ${WORK})
