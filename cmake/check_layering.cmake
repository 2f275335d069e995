# The include rules of include/gpuml (README, "Layout"): each layer includes only layers below it. Run by ctest
# (test "layering"): cmake -DGPUML_INCLUDE_DIR=<repo>/include/gpuml -P cmake/check_layering.cmake
# Fails, naming file, line and rule, when a header includes a layer it must not.
if(NOT GPUML_INCLUDE_DIR)
  message(FATAL_ERROR "pass -DGPUML_INCLUDE_DIR=<repo>/include/gpuml")
endif()

# "files regex@forbidden include regex@why". Paths are relative to include/gpuml.
set(rules
  "^core/@^(vulkan|kernels|host|algorithms|tuning|estimators|metrics|io|shaders)/@core is the bottom layer"
  "^vulkan/@^(kernels|tuning|host|algorithms|estimators|metrics)/@the Vulkan runtime knows no kernels and no tuning"
  "^algorithms/@^(vulkan|kernels|host|tuning|shaders|estimators)/@the algorithm layer has no Vulkan and no engine"
  "^host/@^(vulkan|kernels|tuning|shaders|estimators)/@the host engine has no Vulkan"
  "^kernels/@^(host|estimators|metrics)/|^tuning/(tuner|tunable|kmeans|knn)[.]hpp@kernels use the algorithm layer, not the host engine, and sit below the tuner"
  "^tuning/(store|device_class)[.]hpp@^(kernels|host|estimators)/@the tuning store sits below the kernels"
  "^shaders/@.@shader interface headers are read by glslang too: they include only their prelude, interface.h"
)

file(GLOB_RECURSE headers RELATIVE "${GPUML_INCLUDE_DIR}" "${GPUML_INCLUDE_DIR}/*.hpp" "${GPUML_INCLUDE_DIR}/*.h")
set(violations 0)
foreach(header IN LISTS headers)
  file(STRINGS "${GPUML_INCLUDE_DIR}/${header}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"]gpuml/")
  foreach(rule IN LISTS rules)
    string(REPLACE "@" ";" parts "${rule}")
    list(GET parts 0 files)
    list(GET parts 1 forbidden)
    list(GET parts 2 why)
    if(NOT header MATCHES "${files}")
      continue()
    endif()
    foreach(line IN LISTS lines)
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*[<\"]gpuml/([^>\"]+)[>\"].*$" "\\1" target "${line}")
      if(target MATCHES "${forbidden}")
        message(SEND_ERROR "${header} includes gpuml/${target}: ${why}")
        math(EXPR violations "${violations} + 1")
      endif()
    endforeach()
  endforeach()
endforeach()
list(LENGTH headers count)
if(violations GREATER 0)
  message(FATAL_ERROR "${violations} forbidden include(s)")
endif()
message(STATUS "layering: ${count} headers, no forbidden include")
