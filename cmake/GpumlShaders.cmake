# Build-time shader pipeline: GLSL -> SPIR-V (glslangValidator) -> optimised (spirv-opt) -> validated
# (spirv-val) -> a header with the words as a constexpr array, <shader>_<type>.hpp. Each shader is built only for
# the scalar types its driver uses: SHADERS entries are `name:types`, types a comma-separated subset of f32,f64.
# INTERFACE_DIR holds the shaders' interface headers (<name>.h, shared with C++), found by the GLSL includes.
find_program(GPUML_SPIRV_OPT spirv-opt REQUIRED)
find_program(GPUML_SPIRV_VAL spirv-val REQUIRED)
set(GPUML_SPIRV_ENV vulkan1.1)
set(_gpuml_embed_script ${CMAKE_CURRENT_LIST_DIR}/EmbedSpirv.cmake)

function(gpuml_compile_shaders)
  cmake_parse_arguments(ARG "" "OUTPUT_DIR;TARGET;SOURCE_DIR;INTERFACE_DIR" "SHADERS" ${ARGN})
  set(headers)
  set(work ${CMAKE_CURRENT_BINARY_DIR}/spirv)
  file(MAKE_DIRECTORY ${ARG_OUTPUT_DIR} ${work})
  file(GLOB common_includes ${ARG_SOURCE_DIR}/*.glsl ${ARG_INTERFACE_DIR}/*.h)
  foreach(entry IN LISTS ARG_SHADERS)
    if(NOT entry MATCHES "^([a-z0-9_]+):([a-z0-9,]+)$")
      message(FATAL_ERROR "gpuml_compile_shaders: '${entry}' is not name:types (e.g. knn_half:f32)")
    endif()
    set(shader ${CMAKE_MATCH_1})
    string(REPLACE "," ";" types "${CMAKE_MATCH_2}")
    foreach(type IN LISTS types)
      if(type STREQUAL "f32")
        set(defs -DGPUML_F32=1)
      elseif(type STREQUAL "f64")
        set(defs -DGPUML_F64=1)
      else()
        message(FATAL_ERROR "gpuml_compile_shaders: ${shader}: unknown scalar type '${type}' (f32 or f64)")
      endif()
      set(name ${shader}_${type})
      set(raw ${work}/${name}.raw.spv)
      set(opt ${work}/${name}.spv)
      set(header ${ARG_OUTPUT_DIR}/${name}.hpp)
      add_custom_command(
        OUTPUT ${header}
        COMMAND Vulkan::glslangValidator --quiet -V --target-env ${GPUML_SPIRV_ENV} ${defs}
                -I${ARG_SOURCE_DIR} -I${ARG_INTERFACE_DIR} -o ${raw} ${ARG_SOURCE_DIR}/${shader}.comp
        COMMAND ${GPUML_SPIRV_OPT} -O --target-env=${GPUML_SPIRV_ENV} ${raw} -o ${opt}
        COMMAND ${GPUML_SPIRV_VAL} --target-env ${GPUML_SPIRV_ENV} ${opt}
        COMMAND ${CMAKE_COMMAND} -DINPUT=${opt} -DOUTPUT=${header} -DSYMBOL=${name} -P ${_gpuml_embed_script}
        DEPENDS ${ARG_SOURCE_DIR}/${shader}.comp ${common_includes} ${_gpuml_embed_script}
        COMMENT "SPIR-V ${name}"
        VERBATIM)
      list(APPEND headers ${header})
    endforeach()
  endforeach()
  add_custom_target(${ARG_TARGET} DEPENDS ${headers})
endfunction()
