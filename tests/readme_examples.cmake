# readme_examples.cmake - the example prompts of README.md and of
# tinygml-run.cpp's header are in the recall task's format (models/README.md:
# key=value pairs, then ?key=) and the shipped model each names answers them,
# on the CPU, with the example's own sampler flags. Each example says how it
# samples: --temp 0 (greedy) or --seed S (a sampled run, reproducible), since
# the default seed is random.
#   cmake -DRUN=path/to/tinygml-run -DSRC=source-dir -P readme_examples.cmake
set(n_checked 0)
foreach(doc README.md models/tinygml-run.cpp)
  file(STRINGS ${SRC}/${doc} lines REGEX "tinygml-run -m models/[a-z-]+\\.gguf -p \"")
  set(n_doc 0)
  foreach(line IN LISTS lines)
    if(NOT line MATCHES "-m (models/[a-z-]+\\.gguf) -p \"([^\"]*)\"(.*)$")
      continue()
    endif()
    set(model ${CMAKE_MATCH_1})
    set(prompt "${CMAKE_MATCH_2}")
    set(rest "${CMAKE_MATCH_3}")
    if(NOT rest MATCHES "--temp 0( |$)" AND NOT rest MATCHES "--seed [0-9]")
      message(FATAL_ERROR "${doc}: the example \"${prompt}\" needs --temp 0 (greedy) or --seed S (a reproducible "
                          "sample): the default seed is random")
    endif()
    # the example's sampler flags, as separate arguments
    string(REGEX MATCHALL "--(temp|top-k|top-p|min-p|repeat-penalty|repeat-last-n|seed) [^ ]+" flags "${rest}")
    string(REPLACE " " ";" flags "${flags}")
    if(NOT prompt MATCHES "^([a-h][1-8]=[p-w][1-8] )+\\?([a-h][1-8])=$")
      message(FATAL_ERROR "${doc}: prompt \"${prompt}\" is not in the task's format (k1=v1 k2=v2 ... ?k=)")
    endif()
    set(key ${CMAKE_MATCH_2})
    if(NOT prompt MATCHES "(^| )${key}=([p-w][1-8]) ")
      message(FATAL_ERROR "${doc}: prompt \"${prompt}\" asks for ${key}, which it does not list")
    endif()
    set(answer ${CMAKE_MATCH_2})
    execute_process(COMMAND ${RUN} -m ${SRC}/${model} -p "${prompt}" -n 4 --device cpu ${flags}
                    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    string(STRIP "${out}" out)
    if(NOT rc EQUAL 0 OR NOT out STREQUAL "${prompt}${answer}")
      message(FATAL_ERROR "${doc}: ${model} on \"${prompt}\" printed \"${out}\" (status ${rc}), "
                          "expected the answer ${answer}\n${err}")
    endif()
    message(STATUS "${doc}: ${model}: \"${prompt}\" ${flags} -> ${answer}")
    math(EXPR n_doc "${n_doc} + 1")
  endforeach()
  if(n_doc EQUAL 0)
    message(FATAL_ERROR "${doc}: no 'tinygml-run -m models/X.gguf -p \"...\"' example found")
  endif()
  math(EXPR n_checked "${n_checked} + ${n_doc}")
endforeach()
message(STATUS "${n_checked} example prompts answered")
