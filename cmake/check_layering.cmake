# The include rules of include/gpuml (README, "Layout"): each layer includes only layers below it. Run by ctest
# (test "layering"): cmake -DGPUML_INCLUDE_DIR=<repo>/include/gpuml -P cmake/check_layering.cmake
# Fails, naming file, line and rule, when a header includes a layer it must not.
if(NOT GPUML_INCLUDE_DIR)
  message(FATAL_ERROR "pass -DGPUML_INCLUDE_DIR=<repo>/include/gpuml")
endif()

# "files regex@forbidden include regex@why". Paths are relative to include/gpuml. From the bottom: core; the Vulkan
# runtime; the tile policies with their plans and the tuning store (policy/); the algorithms (no Vulkan) and the
# host engine; the Vulkan kernels; the tuner (tuning/), which benchmarks kernels; estimators and metrics; MPI on top.
set(rules
  "^core/@^(vulkan|policy|kernels|host|algorithms|tuning|estimators|metrics|io|shaders|mpi)/@core is the bottom layer"
  "^vulkan/@^(policy|kernels|tuning|host|algorithms|estimators|metrics|io|mpi)/@the Vulkan runtime knows no tile policies, kernels or tuning"
  "^policy/@^(kernels|tuning|host|algorithms|estimators|metrics|io|mpi)/@tile policies, their plans and the tuning store sit below the kernels"
  "^algorithms/@^(vulkan|policy|kernels|host|tuning|shaders|estimators|metrics|mpi)/@the algorithm layer has no Vulkan and no engine"
  "^host/@^(vulkan|policy|kernels|tuning|shaders|estimators|metrics|mpi)/@the host engine has no Vulkan"
  "^kernels/@^(host|tuning|estimators|metrics|mpi)/@kernels use the algorithm layer, not the host engine, and sit below the tuner"
  "^tuning/@^(host|estimators|metrics|mpi)/@the tuner benchmarks kernels and sits below the estimators"
  "^(estimators|metrics)/@^(tuning|mpi)/@estimators and metrics take tiles from the policy layer, not the tuner"
  "^io/@^(vulkan|policy|kernels|host|algorithms|tuning|estimators|metrics|mpi)/@file formats need only core"
  "^shaders/@.@shader interface headers are read by glslang too: they include only their prelude, interface.h"
)

# Sets out_var to why `header` may not include gpuml/`target` (empty: it may).
function(forbidden_because header target out_var)
  set(reason "")
  foreach(rule IN LISTS rules)
    string(REPLACE "@" ";" parts "${rule}")
    list(GET parts 0 files)
    list(GET parts 1 forbidden)
    list(GET parts 2 why)
    if(header MATCHES "${files}" AND target MATCHES "${forbidden}")
      set(reason "${why}")
      break()
    endif()
  endforeach()
  set(${out_var} "${reason}" PARENT_SCOPE)
endfunction()

# The rules themselves, first: an upward include must fail, a downward one pass. So this check cannot pass by
# matching nothing.
foreach(pair "kernels/kmeans.hpp@tuning/tuner.hpp" "policy/kmeans.hpp@kernels/kmeans.hpp" "vulkan/device.hpp@policy/store.hpp"
             "algorithms/kmeans.hpp@vulkan/device.hpp" "estimators/kmeans_fit.hpp@tuning/kmeans.hpp" "shaders/knn_select.h@core/error.hpp")
  string(REPLACE "@" ";" pair "${pair}")
  list(GET pair 0 from)
  list(GET pair 1 to)
  forbidden_because("${from}" "${to}" why)
  if(why STREQUAL "")
    message(FATAL_ERROR "the include rules let ${from} include gpuml/${to}, an upward include")
  endif()
endforeach()
foreach(pair "kernels/kmeans.hpp@policy/kmeans.hpp" "tuning/kmeans.hpp@kernels/kmeans.hpp" "policy/tile.hpp@policy/store.hpp"
             "estimators/kmeans_fit.hpp@kernels/kmeans.hpp" "mpi/kmeans.hpp@estimators/kmeans_fit.hpp")
  string(REPLACE "@" ";" pair "${pair}")
  list(GET pair 0 from)
  list(GET pair 1 to)
  forbidden_because("${from}" "${to}" why)
  if(NOT why STREQUAL "")
    message(FATAL_ERROR "the include rules refuse ${from} including gpuml/${to}, a downward include")
  endif()
endforeach()

file(GLOB_RECURSE headers RELATIVE "${GPUML_INCLUDE_DIR}" "${GPUML_INCLUDE_DIR}/*.hpp" "${GPUML_INCLUDE_DIR}/*.h")
set(violations 0)
foreach(header IN LISTS headers)
  file(STRINGS "${GPUML_INCLUDE_DIR}/${header}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"]gpuml/")
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*[<\"]gpuml/([^>\"]+)[>\"].*$" "\\1" target "${line}")
    forbidden_because("${header}" "${target}" why)
    if(NOT why STREQUAL "")
      message(SEND_ERROR "${header} includes gpuml/${target}: ${why}")
      math(EXPR violations "${violations} + 1")
    endif()
  endforeach()
endforeach()
list(LENGTH headers count)
if(violations GREATER 0)
  message(FATAL_ERROR "${violations} forbidden include(s)")
endif()
message(STATUS "layering: ${count} headers, no forbidden include")
