# The Python package (python/tokitai_jit): pure Python over the shared
# library, installed next to it, and its pytest suites as CTest tests.
#
# TK_PYTHON_INSTALL_DIR: where `cmake --install` puts the package, relative
# to the prefix (or absolute). Default: lib/python3/dist-packages for the
# /usr prefix (Debian's path for distribution packages), else
# lib/python3.X/dist-packages (Debian's python3 searches
# /usr/local/lib/python3.X/dist-packages); for any other prefix, add that
# folder to PYTHONPATH. The installed package finds the installed library
# through _install_paths.py, written here with the library's path relative
# to the package.
#
# TK_PYTHON_EXECUTABLE: the interpreter that runs the tests. Default: the
# first of `python3` on PATH and /usr/bin/python3 that imports pytest and
# torch, else the first that imports pytest.

set(TK_PYTHON_EXECUTABLE "" CACHE FILEPATH "Python 3 interpreter for the Python tests (needs pytest)")
# Debian Python packages unpacked under a CMAKE_PREFIX_PATH entry (such as
# python3-pytest in <prefix>/lib/python3/dist-packages) are used when no
# interpreter finds pytest on its own.
set(_tk_extra_path "")
foreach(p IN LISTS CMAKE_PREFIX_PATH)
  if(IS_DIRECTORY "${p}/lib/python3/dist-packages")
    string(APPEND _tk_extra_path ":${p}/lib/python3/dist-packages")
  endif()
endforeach()
if(TK_PYTHON_EXECUTABLE)
  set(_tk_cands "${TK_PYTHON_EXECUTABLE}")
else()
  find_program(TK__PYTHON3_ON_PATH NAMES python3)
  mark_as_advanced(TK__PYTHON3_ON_PATH)
  set(_tk_cands "${TK__PYTHON3_ON_PATH}" /usr/bin/python3)
endif()
# The first interpreter with PyTorch too (the GPU tests need it), else the
# first with pytest; each as it is, then with the prefixes' dist-packages.
set(_tk_py "")
set(_tk_pypath "${CMAKE_SOURCE_DIR}/python")
foreach(mods IN ITEMS "pytest, torch" "pytest")
  foreach(extra IN ITEMS "" "${_tk_extra_path}")
    foreach(cand IN LISTS _tk_cands)
      if(NOT _tk_py AND cand AND EXISTS "${cand}")
        execute_process(COMMAND ${CMAKE_COMMAND} -E env "PYTHONPATH=${CMAKE_SOURCE_DIR}/python${extra}"
          "${cand}" -c "import ${mods}" RESULT_VARIABLE _rc OUTPUT_QUIET ERROR_QUIET)
        if(_rc EQUAL 0)
          set(_tk_py "${cand}")
          set(_tk_pypath "${CMAKE_SOURCE_DIR}/python${extra}")
        endif()
      endif()
    endforeach()
  endforeach()
endforeach()
message(STATUS "Python tests: ${_tk_py} with PYTHONPATH=${_tk_pypath}")

set(TK_PYTHON_INSTALL_DIR "" CACHE STRING "Install folder of the tokitai_jit Python package (relative to the prefix)")
set(_tk_pydir "${TK_PYTHON_INSTALL_DIR}")
if(NOT _tk_pydir)
  if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
    set(_tk_pydir lib/python3/dist-packages)
  else()
    set(_tk_pyver "")
    if(_tk_py)
      execute_process(COMMAND "${_tk_py}" -c "import sys; print('%d.%d' % sys.version_info[:2])"
        OUTPUT_VARIABLE _tk_pyver OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    endif()
    if(_tk_pyver)
      set(_tk_pydir lib/python${_tk_pyver}/dist-packages)
    else()
      set(_tk_pydir lib/python3/dist-packages)
    endif()
  endif()
endif()

# The library's path relative to the installed package (both relative to
# the prefix, so any `cmake --install --prefix DIR` keeps them together).
set(_tk_soname libtokitai_jit.so.${TK_ABI_VERSION})
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(_tk_pylib "${CMAKE_INSTALL_LIBDIR}/${_tk_soname}")
elseif(IS_ABSOLUTE "${_tk_pydir}")
  set(_tk_pylib "${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/${_tk_soname}")
else()
  file(RELATIVE_PATH _tk_pylib "/${_tk_pydir}/tokitai_jit" "/${CMAKE_INSTALL_LIBDIR}/${_tk_soname}")
endif()
file(WRITE ${CMAKE_BINARY_DIR}/python/_install_paths.py
  "# Written by cmake --install: the library relative to this package.\nLIBRARY = \"${_tk_pylib}\"\n")
install(DIRECTORY python/tokitai_jit DESTINATION ${_tk_pydir}
  FILES_MATCHING PATTERN "*.py" PATTERN "py.typed" PATTERN "__pycache__" EXCLUDE
  PATTERN "_install_paths.py" EXCLUDE)
install(FILES ${CMAKE_BINARY_DIR}/python/_install_paths.py DESTINATION ${_tk_pydir}/tokitai_jit)

# Tests: python_cpu (stub backend, no GPU) and python_gpu (PyTorch + a
# device; exits 77, shown as Skipped, when every GPU test skipped). In the
# sanitizer build the library needs the ASan runtime loaded first: the tests
# run with LD_PRELOAD of the compiler's libasan.so (leak checks off: the
# interpreter itself never frees everything), so a wrong struct layout or
# argument from the package shows up as an ASan/UBSan report.
set(_tk_asan_env "")
if(TK_SANITIZE)
  execute_process(COMMAND ${CMAKE_C_COMPILER} -print-file-name=libasan.so
    OUTPUT_VARIABLE _tk_libasan OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(_tk_libasan AND IS_ABSOLUTE "${_tk_libasan}" AND EXISTS "${_tk_libasan}")
    set(_tk_asan_env "LD_PRELOAD=${_tk_libasan}" "ASAN_OPTIONS=detect_leaks=0" "TK_TEST_SANITIZED=1")
  endif()
endif()
if(TK_BUILD_TESTS AND (NOT TK_SANITIZE OR _tk_asan_env))
  set(_tk_pyenv
    "TOKITAI_JIT_LIBRARY=$<TARGET_FILE:tokitai_jit>"
    "TK_TEST_BUILD_DIR=${CMAKE_BINARY_DIR}"
    "TK_TEST_CLI=$<TARGET_FILE:tokitai-jit>"
    "PYTHONDONTWRITEBYTECODE=1"
    "PYTHONPATH=${_tk_pypath}"
    "TOKITAI_JIT_CACHE_PATH=none"
    ${_tk_asan_env})
  if(_tk_py)
    set(_tk_pytest "${_tk_py}" -m pytest -p no:cacheprovider -rs -q ${CMAKE_SOURCE_DIR}/python/tests)
    add_test(NAME python_cpu COMMAND ${_tk_pytest} -m "not gpu")
    add_test(NAME python_gpu COMMAND ${_tk_pytest} -m gpu)
    set_tests_properties(python_cpu PROPERTIES LABELS "cpu" ENVIRONMENT "${_tk_pyenv}")
    set_tests_properties(python_gpu PROPERTIES LABELS "gpu" SKIP_RETURN_CODE 77
      ENVIRONMENT "${_tk_pyenv};TK_PYTEST_SKIPPED_RC=77")
    # `pip install --no-build-isolation ./python` in a fresh venv
    # (--system-site-packages, for setuptools and PyTorch), bundling this
    # build's library; the installed package must load it with no
    # environment variable and run the stub backend (Debian: python3-venv,
    # python3-setuptools, python3-wheel).
    # Not in the sanitizer build: a venv's interpreter cannot load a library
    # that needs the ASan runtime first.
    if(NOT TK_SANITIZE)
      add_test(NAME python_pip_venv COMMAND "${_tk_py}" ${CMAKE_SOURCE_DIR}/python/tests/pip_venv_check.py
        ${CMAKE_BINARY_DIR}/pip-venv $<TARGET_FILE_DIR:tokitai_jit>)
      set_tests_properties(python_pip_venv PROPERTIES LABELS "cpu" TIMEOUT 600)
      # The same as a user types it, with no build handed over: setup.py
      # builds the library with CMake from the tree beside python/.
      add_test(NAME python_pip_venv_build COMMAND "${_tk_py}" ${CMAKE_SOURCE_DIR}/python/tests/pip_venv_check.py
        ${CMAKE_BINARY_DIR}/pip-venv-build)
      set_tests_properties(python_pip_venv_build PROPERTIES LABELS "cpu" TIMEOUT 900)
    endif()
  else()
    message(WARNING "no python3 with pytest (Debian: python3-pytest): the test python_cpu will fail")
    add_test(NAME python_cpu COMMAND ${CMAKE_COMMAND} -E echo
      "no python3 that imports pytest: install python3-pytest or set TK_PYTHON_EXECUTABLE")
    set_tests_properties(python_cpu PROPERTIES LABELS "cpu" WILL_FAIL ON)
  endif()
endif()
