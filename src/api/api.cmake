# src/api: the OpenAI and Anthropic adapters, the pipeline, the error table.
list(APPEND RP_SOURCES
  src/api/error.c
  src/api/request.c
  src/api/openai.c
  src/api/anthropic.c
  src/api/stopper.c
  src/api/pipeline.c
  src/api/standin/standin.c
)

# Stand-ins (src/api/standin/standin.h) for the layers whose implementation is not in this
# tree yet: a layer counts as present when one of its .c files defines the function named.
set(RP_STANDINS "")
foreach(pair "engine:src/engine:rp_engine_submit" "model:src/model:rp_model_load"
             "tokenizer:src/text:rp_tokenizer_load" "template:src/chat:rp_template_render")
  string(REPLACE ":" ";" parts "${pair}")
  list(GET parts 0 name)
  list(GET parts 1 dir)
  list(GET parts 2 fn)
  file(GLOB_RECURSE layer_sources CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/${dir}/*.c)
  set(found OFF)
  foreach(src IN LISTS layer_sources)
    file(STRINGS ${src} hits REGEX "^[a-z_]+[ *]+${fn}\\(")
    if(hits)
      set(found ON)
    endif()
  endforeach()
  if(NOT found)
    list(APPEND RP_SOURCES src/api/standin/standin_${name}.c)
    list(APPEND RP_STANDINS ${name})
  endif()
endforeach()
string(REPLACE ";" "," RP_STANDINS_STR "${RP_STANDINS}")
set_source_files_properties(src/api/standin/standin.c PROPERTIES
  COMPILE_DEFINITIONS "RP_STANDINS=\"${RP_STANDINS_STR}\"")
if(RP_STANDINS)
  message(STATUS "rapid: stand-ins for layers not in this tree yet: ${RP_STANDINS_STR}")
endif()
