# Build step of cmake/tk_shipped.cmake: the fallback kernels for ARCHS into
# the cache at DIR, then STAMP. Run as cmake -DCLI=... -DDIR=... -DARCHS=...
# -DSTAMP=... -P tk_shipped_run.cmake.
#
# The caller's TOKITAI_JIT_* variables are dropped: the kernels must have the
# keys a default runtime looks up (TOKITAI_JIT_GEMM_PDL=0 would bake other
# defines), nothing may come from another read-only tier or a remote, and the
# cache must not be disabled or capped.
foreach(v BACKEND POLICY BUILD LOG TUNE GEMM_PDL GEMM_FALLBACK CACHE_DIR CACHE_MAX_SIZE
    CACHE_DISABLE REMOTE REMOTE_KEY REMOTE_CONNECT_TIMEOUT_MS REMOTE_IO_TIMEOUT_MS
    REMOTE_LEASE_MS REMOTE_WAIT_MS)
  unset(ENV{TOKITAI_JIT_${v}})
endforeach()
set(ENV{TOKITAI_JIT_CACHE_PATH} none)
string(TIMESTAMP _t0 "%s")
execute_process(
  COMMAND ${CLI} --cache-dir ${DIR} --precompile --fallbacks --arch ${ARCHS} --prune-others
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message("${out}${err}")
  message(FATAL_ERROR "precompiling the shipped fallback kernels failed (exit ${rc}); "
    "configure with -DTK_SHIP_FALLBACKS=OFF to build without them, or set "
    "-DTK_SHIPPED_ARCHS to the targets this machine's compilers know")
endif()
# The run's summary lines: what was compiled, and what was removed.
string(REGEX MATCHALL "(precompiled|nothing to compile|removed)[^\n]*" _lines "${out}")
foreach(l IN LISTS _lines)
  message(STATUS "shipped tier: ${l}")
endforeach()
file(TOUCH ${STAMP})
