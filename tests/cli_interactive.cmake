# cli_interactive.cmake - tinygml-run -i keeps the session between lines.
# One conversation is piped into one greedy run of MODEL: a held-out recall
# prompt, then follow-up queries on its keys (an empty line and a CRLF line
# among them), until a line no longer fits the context. Checked:
#  - the reply to each line equals what a plain run (-p) of the conversation
#    so far prints after its prompt;
#  - the line that would pass the context is refused with a message, status 1,
#    and a plain run of the same conversation is refused with the same count;
#  - the first lines alone, then EOF: status 0, the same replies.
# N is -n: 4 lets each reply end at EOS; 2 cuts it after the value, so its
# last token is fed with the next line.
#   cmake -DRUN=tinygml-run -DMODEL=file.gguf -DHELDOUT=recall_heldout.txt -DWORK=dir [-DN=4] -P cli_interactive.cmake
if(NOT DEFINED N)
  set(N 4)
endif()
file(STRINGS ${HELDOUT} first LIMIT_COUNT 1)
string(REGEX MATCH "^([^\t]*)\t(.*)$" _ "${first}")
set(prompt "${CMAKE_MATCH_1}")
set(answer "${CMAKE_MATCH_2}")
string(REGEX MATCHALL "[a-h][1-8]=[p-w][1-8]" pairs "${prompt}")
# the lines as sent (CR kept) and as the model sees them
set(lines "${prompt}")
set(sent "${prompt}\n")
set(i 0)
foreach(round RANGE 1 6)
  foreach(pair IN LISTS pairs)
    string(SUBSTRING "${pair}" 0 2 key)
    list(APPEND lines " ?${key}=")
    math(EXPR i "${i} + 1")
    if(i EQUAL 2)
      string(APPEND sent "\n")  # an empty line: skipped
    endif()
    if(i EQUAL 3)
      string(APPEND sent " ?${key}=\r\n")  # CRLF: the CR is dropped
    else()
      string(APPEND sent " ?${key}=\n")
    endif()
  endforeach()
endforeach()
file(MAKE_DIRECTORY ${WORK})
get_filename_component(name ${MODEL} NAME_WE)
set(input ${WORK}/${name}-n${N}-lines.txt)
file(WRITE ${input} "${sent}")

set(common -m ${MODEL} -n ${N} --temp 0 --device cpu)
execute_process(COMMAND ${RUN} ${common} -i INPUT_FILE ${input}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 1 OR NOT err MATCHES "error: line ([0-9]+): the conversation [(]([0-9]+) tokens with BOS[)], this line [(]([0-9]+) tokens[)] and -n ${N} need ([0-9]+) positions, but the model's context is ([0-9]+); ending the session")
  message(FATAL_ERROR "cli_interactive: ${name}: expected a refused line and status 1, got status ${rc}\n"
                      "--- stdout:\n${out}\n--- stderr:\n${err}")
endif()
set(bad_line ${CMAKE_MATCH_1})
set(need ${CMAKE_MATCH_4})
set(n_ctx ${CMAKE_MATCH_5})
string(REGEX REPLACE "\n$" "" out "${out}")
string(REPLACE "\n" ";" replies "${out}")
list(LENGTH replies n_replies)
math(EXPR n_answered "${bad_line} - 1")
if(NOT n_replies EQUAL n_answered OR n_answered LESS 3)
  message(FATAL_ERROR "cli_interactive: ${name}: ${n_replies} replies before line ${bad_line}:\n${out}\n${err}")
endif()

# every reply against a plain run of the conversation up to its line
set(conv "")
set(n_right 0)
foreach(k RANGE 1 ${n_answered})
  math(EXPR j "${k} - 1")
  list(GET lines ${j} line)
  list(GET replies ${j} reply)
  string(APPEND conv "${line}")
  execute_process(COMMAND ${RUN} ${common} -p "${conv}" RESULT_VARIABLE prc OUTPUT_VARIABLE pout ERROR_VARIABLE perr)
  string(REGEX REPLACE "\n$" "" pout "${pout}")
  if(NOT prc EQUAL 0 OR NOT pout STREQUAL "${conv}${reply}")
    message(FATAL_ERROR "cli_interactive: ${name}: line ${k}: -i replied \"${reply}\", a plain run of \"${conv}\" "
                        "printed \"${pout}\" (status ${prc})\n${perr}")
  endif()
  # is it the value of the key asked for? (the task's answer; informational past line 1)
  string(REGEX MATCH "\\?([a-h][1-8])=$" _ "${line}")
  string(REGEX MATCH "${CMAKE_MATCH_1}=([p-w][1-8])" _ "${prompt}")
  if(reply STREQUAL "${CMAKE_MATCH_1}")
    math(EXPR n_right "${n_right} + 1")
  endif()
  if(k EQUAL 1 AND NOT reply STREQUAL "${answer}")
    message(FATAL_ERROR "cli_interactive: ${name}: \"${prompt}\" answered \"${reply}\", expected ${answer}")
  endif()
  string(APPEND conv "${reply}")
endforeach()

# the refused line: a plain run of the conversation with it needs as many positions
list(GET lines ${n_answered} line)
execute_process(COMMAND ${RUN} ${common} -p "${conv}${line}" RESULT_VARIABLE prc OUTPUT_VARIABLE pout ERROR_VARIABLE perr)
if(NOT prc EQUAL 1 OR NOT perr MATCHES "and -n ${N} need ${need} positions, but the model's context is ${n_ctx}")
  message(FATAL_ERROR "cli_interactive: ${name}: the plain run of the refused conversation: status ${prc}, "
                      "expected 1 and 'need ${need} positions'\n${perr}")
endif()

# the first three lines, then EOF: status 0 and the same replies
string(REGEX MATCH "^[^\n]*\n[^\n]*\n[^\n]*\n[^\n]*\n" head "${sent}")  # 3 lines and the empty one
file(WRITE ${input} "${head}")
execute_process(COMMAND ${RUN} ${common} -i INPUT_FILE ${input} RESULT_VARIABLE rc OUTPUT_VARIABLE hout ERROR_VARIABLE herr)
list(SUBLIST replies 0 3 want)
string(REPLACE ";" "\n" want "${want}")
if(NOT rc EQUAL 0 OR NOT hout STREQUAL "${want}\n")
  message(FATAL_ERROR "cli_interactive: ${name}: 3 lines then EOF: status ${rc}, printed\n${hout}\nexpected\n${want}\n${herr}")
endif()
file(REMOVE ${input})
message(STATUS "cli_interactive: ${name}, -n ${N}: ${n_answered} replies equal the plain runs (${n_right} are the key's value), "
               "line ${bad_line} refused at ${need} > ${n_ctx} positions")
