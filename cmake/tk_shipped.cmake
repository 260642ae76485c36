# The shipped tier: the operators' fallback kernels (tk_op_precompile_fallbacks),
# precompiled at build time by the built tool into
# <build>/share/tokitai-jit/cache and installed as
# <datadir>/tokitai-jit/cache, where the library finds it by default
# (tk_cache_shipped_tier, docs/cache.md). A program whose user cache is empty
# then runs its first operator calls on them instead of compiling one on the
# caller's thread (bench/dynamic: "cold" against "bare").
#
# TK_SHIP_FALLBACKS (default ON): off in the sanitizer build (the tool would
#   need the sanitizer runtime, and that build is for tests) and for each
#   target whose compiler is not found here.
# TK_SHIPPED_ARCHS (default sm_80;sm_90): the targets; sm_* need NVRTC (the
#   CUDA toolkit: CUDA_PATH, CUDA_HOME, /usr/local/cuda, or the library
#   path, as the library looks for it), gfx* need hipRTC (ROCm's
#   libamdhip64) and the full target id the devices report, which keys
#   hold (gfx90a:sramecc+:xnack-). Empty: nothing is shipped.
#
# The step reruns when the library, the tool or a kernel source changes; it
# compiles only the kernels whose keys changed and removes the entries no
# longer part of the set (--prune-others). 2-core machine, empty folder:
# about 10-12 s for sm_80 and sm_90 (156 kernels, 1.5 MB).
option(TK_SHIP_FALLBACKS "Precompile the operators' fallback kernels into a read-only cache tier installed with the library" ON)
set(TK_SHIPPED_ARCHS "sm_80;sm_90" CACHE STRING "Targets whose fallback kernels ship precompiled with the library (empty: none)")

set(TK_SHIPPED_DIR ${CMAKE_BINARY_DIR}/share/tokitai-jit/cache)
set(_tk_ship "")
if(NOT TK_SHIP_FALLBACKS)
  message(STATUS "shipped fallback kernels: off (TK_SHIP_FALLBACKS)")
elseif(TK_SANITIZE)
  message(STATUS "shipped fallback kernels: off in the sanitizer build")
elseif(CMAKE_CROSSCOMPILING)
  message(STATUS "shipped fallback kernels: off when cross-compiling (the built tool cannot run here)")
else()
  # The places the library's dlopen tries (src/jit/backend/cuda.c, hip.c).
  find_library(TK_NVRTC_LIBRARY NAMES nvrtc libnvrtc.so.13 libnvrtc.so.12
    HINTS $ENV{CUDA_PATH}/lib64 $ENV{CUDA_HOME}/lib64 PATHS /usr/local/cuda/lib64)
  find_library(TK_HIPRTC_LIBRARY NAMES amdhip64 libamdhip64.so.5 PATHS /opt/rocm/lib)
  mark_as_advanced(TK_NVRTC_LIBRARY TK_HIPRTC_LIBRARY)
  foreach(_tk_arch IN LISTS TK_SHIPPED_ARCHS)
    if(_tk_arch MATCHES "^sm_[0-9]+a?$" AND TK_NVRTC_LIBRARY)
      list(APPEND _tk_ship ${_tk_arch})
    elseif(_tk_arch MATCHES "^gfx[0-9a-f]+" AND TK_HIPRTC_LIBRARY)
      list(APPEND _tk_ship ${_tk_arch})
    elseif(_tk_arch MATCHES "^sm_")
      message(STATUS "shipped fallback kernels: ${_tk_arch} skipped, NVRTC not found (CUDA toolkit)")
    elseif(_tk_arch MATCHES "^gfx")
      message(STATUS "shipped fallback kernels: ${_tk_arch} skipped, hipRTC not found (libamdhip64)")
    else()
      message(FATAL_ERROR "TK_SHIPPED_ARCHS: unknown target '${_tk_arch}' (examples: sm_80, sm_90, gfx90a)")
    endif()
  endforeach()
  if(_tk_ship)
    string(REPLACE ";" ", " _tk_ship_text "${_tk_ship}")
    message(STATUS "shipped fallback kernels: ${_tk_ship_text}, into ${TK_SHIPPED_DIR}")
  else()
    message(STATUS "shipped fallback kernels: none (no target of TK_SHIPPED_ARCHS has its compiler here)")
  endif()
endif()

if(_tk_ship)
  string(REPLACE ";" "," _tk_ship_csv "${_tk_ship}")
  set(_tk_ship_stamp ${CMAKE_BINARY_DIR}/generated/tk_shipped_cache.stamp)
  add_custom_command(OUTPUT ${_tk_ship_stamp}
    COMMAND ${CMAKE_COMMAND} -DCLI=$<TARGET_FILE:tokitai-jit> -DDIR=${TK_SHIPPED_DIR}
      -DARCHS=${_tk_ship_csv} -DSTAMP=${_tk_ship_stamp} -P ${CMAKE_SOURCE_DIR}/cmake/tk_shipped_run.cmake
    DEPENDS tokitai-jit tokitai_jit $<TARGET_FILE:tokitai-jit> $<TARGET_FILE:tokitai_jit>
      ${TK_KERNEL_SOURCES} ${CMAKE_SOURCE_DIR}/cmake/tk_shipped_run.cmake
    COMMENT "Precompiling the fallback kernels shipped with the library (${_tk_ship_csv})"
    VERBATIM)
  add_custom_target(tk_shipped_cache ALL DEPENDS ${_tk_ship_stamp})
  # The tier without the user-cache bookkeeping (lock folder, statistics,
  # leftovers of interrupted writes). OPTIONAL: a build of single targets
  # (python/setup.py builds the library alone) installs without it.
  install(DIRECTORY ${TK_SHIPPED_DIR}/ DESTINATION ${CMAKE_INSTALL_DATADIR}/tokitai-jit/cache
    OPTIONAL PATTERN "locks" EXCLUDE PATTERN "stats" EXCLUDE PATTERN ".tmp.*" EXCLUDE)
endif()
