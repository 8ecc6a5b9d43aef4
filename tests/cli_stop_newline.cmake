# cli_stop_newline.cmake - tinygml-run -i ends a reply after a newline the
# model writes, keeps it, and reads the next line. A random-weight llama
# (tinygml-synth) sampled hot writes arbitrary bytes; for the first sampler
# seed whose plain run of "hi" writes a newline among its first 40 tokens,
# the reply of -i to "hi" must be that continuation up to and including the
# newline (and no extra newline after it), then a second reply, not the plain
# run's next bytes, must follow; status 0. Bytes are compared in hex (the output may hold any byte).
#   cmake -DRUN=tinygml-run -DSYNTH=tinygml-synth -DWORK=dir -P cli_stop_newline.cmake
file(MAKE_DIRECTORY ${WORK})
set(model ${WORK}/stop-newline.gguf)
execute_process(COMMAND ${SYNTH} --preset 0.26m --n-layer 2 --seed 3 -o ${model} RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cli_stop_newline: tinygml-synth failed (${rc})")
endif()
set(flags -m ${model} -n 100 --ignore-eos --temp 1.5 --top-k 0 --top-p 1 --min-p 0 --device cpu)
file(WRITE ${WORK}/stop-newline.in "hi\nyo\n")
set(found "")
foreach(seed RANGE 1 200)
  execute_process(COMMAND ${RUN} ${flags} --seed ${seed} -p hi OUTPUT_FILE ${WORK}/plain.out ERROR_VARIABLE err
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "cli_stop_newline: plain run, seed ${seed}: status ${rc}\n${err}")
  endif()
  file(READ ${WORK}/plain.out plain HEX)
  # after "hi" (6869): the bytes up to and including the first newline (0a)
  string(LENGTH "${plain}" len)
  set(reply "")
  set(byte "")
  set(i 4)
  while(i LESS len AND NOT byte STREQUAL "0a")
    string(SUBSTRING "${plain}" ${i} 2 byte)
    string(APPEND reply "${byte}")
    math(EXPR i "${i} + 2")
  endwhile()
  string(LENGTH "${reply}" rlen)
  # a newline among the first 40 tokens, and the plain run wrote more after it
  if(byte STREQUAL "0a" AND rlen LESS 82 AND i LESS len)
    set(found ${seed})  # (the loop variable does not outlive the loop)
    break()
  endif()
endforeach()
if(NOT found)
  message(FATAL_ERROR "cli_stop_newline: no seed in 1..200 writes a newline early; the check cannot run")
endif()
execute_process(COMMAND ${RUN} ${flags} --seed ${found} -i INPUT_FILE ${WORK}/stop-newline.in
                OUTPUT_FILE ${WORK}/interactive.out ERROR_VARIABLE err RESULT_VARIABLE rc)
file(READ ${WORK}/interactive.out got HEX)
string(LENGTH "${got}" glen)
if(glen LESS rlen)
  message(FATAL_ERROR "cli_stop_newline: seed ${found}: -i printed ${got} (status ${rc}), shorter than the reply ${reply}\n${err}")
endif()
string(SUBSTRING "${got}" 0 ${rlen} head)
string(SUBSTRING "${got}" ${rlen} -1 tail)
# without the stop, -i would go on with the plain run's next bytes; with it the
# next bytes are the reply to "yo"
math(EXPR at "4 + ${rlen}")
string(SUBSTRING "${plain}" ${at} 8 plain_next)
string(SUBSTRING "${tail}" 0 8 got_next)
if(NOT rc EQUAL 0 OR NOT head STREQUAL "${reply}" OR NOT tail MATCHES "^([0-9a-f][0-9a-f])+$" OR NOT tail MATCHES "0a$"
   OR got_next STREQUAL plain_next)
  message(FATAL_ERROR "cli_stop_newline: seed ${found}: -i printed ${got} (status ${rc}); the first reply should be "
                      "${reply}, then a second reply\n${err}")
endif()
file(REMOVE ${model} ${WORK}/plain.out ${WORK}/interactive.out ${WORK}/stop-newline.in)
message(STATUS "cli_stop_newline: seed ${found}: the reply stopped after its newline (${rlen} hex digits), then the next line")
