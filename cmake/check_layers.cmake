# Checks from the sources that the includes between Loom's folders follow its layering
# (docs/architecture.md), run as a CTest:
#   cmake -DROOT=<source dir> -DINTERNAL="<header;...>" -P check_layers.cmake
# INTERNAL lists the internal headers (relative to ROOT), the same list the install step leaves out.
#
# Three rules, each reported with the file, the line and the include at fault:
#   1. A folder includes only from the folders below it (LAYER_<folder> below).
#   2. An internal header is included only where its scope allows: core's internal headers and
#      ops/utils.h (the toolkit for writing kernels and checking arguments) and ops/batching.h (for
#      writing batching rules) from any library folder;
#      the kernel toolkit's internal headers (kernels/: the elementwise, row and softmax drivers, the
#      SIMD math, the GEMM seam) and ops' other internal headers (the elementwise op structs, the
#      indexing helpers) from kernels/, ops/ and fast/, which implement kernels; every other internal
#      header from its own folder.
#   3. No public header includes an internal one (the installed package would not compile), and
#      examples/ include only public headers (they are what a user writes).
cmake_minimum_required(VERSION 3.25)

set(LAYER_core core)
set(LAYER_kernels core kernels)
set(LAYER_ops core kernels ops)
set(LAYER_io core ops io)
set(LAYER_autograd core ops autograd)
set(LAYER_fast core kernels ops autograd fast)
set(LAYER_distributed core kernels ops distributed)
set(LAYER_data core ops io distributed data)
set(LAYER_nn core kernels ops io autograd fast distributed data nn)
set(LAYER_optim core kernels ops io autograd fast distributed data nn optim)
set(FOLDERS core kernels ops io autograd fast distributed data nn optim)

set(TOOLKIT_PREFIXES "core/" "ops/utils.h" "ops/batching.h")
set(KERNEL_PREFIXES "ops/")
set(KERNEL_USERS kernels ops fast)

function(scope_allows header folder out)
  foreach(p ${TOOLKIT_PREFIXES})
    string(FIND "${header}" "${p}" at)
    if(at EQUAL 0)
      set(${out} TRUE PARENT_SCOPE)
      return()
    endif()
  endforeach()
  string(REGEX REPLACE "/.*" "" home "${header}")
  if((home STREQUAL "ops" OR home STREQUAL "kernels") AND folder IN_LIST KERNEL_USERS)
    set(${out} TRUE PARENT_SCOPE)
    return()
  endif()
  if(home STREQUAL folder)
    set(${out} TRUE PARENT_SCOPE)
  else()
    set(${out} FALSE PARENT_SCOPE)
  endif()
endfunction()

set(errors "")
set(checked 0)

# Returns the "loom/..." includes of a file as "line:path" entries.
function(loom_includes file out)
  file(STRINGS "${file}" lines)
  set(result "")
  set(n 0)
  foreach(line IN LISTS lines)
    math(EXPR n "${n} + 1")
    if(line MATCHES "^[ \t]*#[ \t]*include[ \t]*[\"<]loom/([^\">]+)[\">]")
      list(APPEND result "${n}:${CMAKE_MATCH_1}")
    endif()
  endforeach()
  set(${out} "${result}" PARENT_SCOPE)
endfunction()

foreach(folder ${FOLDERS})
  file(GLOB_RECURSE sources RELATIVE "${ROOT}" "${ROOT}/${folder}/*.h" "${ROOT}/${folder}/*.cpp")
  foreach(src ${sources})
    math(EXPR checked "${checked} + 1")
    set(src_internal FALSE)
    if(src IN_LIST INTERNAL)
      set(src_internal TRUE)
    endif()
    string(REGEX MATCH "\\.h$" is_header "${src}")
    loom_includes("${ROOT}/${src}" incs)
    foreach(entry ${incs})
      string(REGEX REPLACE ":.*" "" line "${entry}")
      string(REGEX REPLACE "^[0-9]+:" "" inc "${entry}")
      string(REGEX REPLACE "/.*" "" target "${inc}")
      if(NOT target IN_LIST LAYER_${folder})
        string(APPEND errors "${src}:${line}: ${folder}/ includes ${inc}, but ${folder}/ may include only: ${LAYER_${folder}}\n")
      endif()
      if(inc IN_LIST INTERNAL)
        scope_allows("${inc}" "${folder}" ok)
        if(NOT ok)
          string(APPEND errors "${src}:${line}: includes the internal header ${inc}, which ${folder}/ may not use\n")
        endif()
        if(is_header AND NOT src_internal)
          string(APPEND errors "${src}:${line}: the public header ${src} includes the internal header ${inc}\n")
        endif()
      endif()
    endforeach()
  endforeach()
endforeach()

# loom.h is the umbrella of the public headers; examples are user code.
file(GLOB_RECURSE user_code RELATIVE "${ROOT}" "${ROOT}/examples/*.cpp" "${ROOT}/examples/*.h")
foreach(src loom.h ${user_code})
  math(EXPR checked "${checked} + 1")
  loom_includes("${ROOT}/${src}" incs)
  foreach(entry ${incs})
    string(REGEX REPLACE ":.*" "" line "${entry}")
    string(REGEX REPLACE "^[0-9]+:" "" inc "${entry}")
    if(inc IN_LIST INTERNAL)
      string(APPEND errors "${src}:${line}: includes the internal header ${inc}; users see public headers only\n")
    endif()
  endforeach()
endforeach()

if(errors)
  message(NOTICE "${errors}")  # unformatted: one violation per line
  message(FATAL_ERROR "layering violations (above); docs/architecture.md gives the rules")
endif()
message(STATUS "layering: ${checked} files follow the layers")
