# The Rust crate (bindings/rust) as CTest tests, against the library of this
# build: rust_cpu (layout and stub suites, label cpu) and rust_gpu (the seven
# operators on a device, label gpu, Skipped without one). Both report
# Skipped when cargo is missing (Debian: apt-get install cargo). Cargo's
# output goes under <build>/rust-target.
if(TK_BUILD_TESTS)
  set(_tk_rust_sh ${CMAKE_SOURCE_DIR}/bindings/rust/ctest-cargo.sh)
  set(_tk_rust_san "")
  if(TK_SANITIZE)
    set(_tk_rust_san sanitize)
  endif()
  foreach(_tk_mode cpu gpu)
    add_test(NAME rust_${_tk_mode}
      COMMAND sh ${_tk_rust_sh} ${_tk_mode} $<TARGET_FILE_DIR:tokitai_jit> ${CMAKE_BINARY_DIR}/rust-target ${_tk_rust_san})
    set_tests_properties(rust_${_tk_mode} PROPERTIES LABELS ${_tk_mode} SKIP_RETURN_CODE 77 TIMEOUT 1200
      RESOURCE_LOCK rust_target ENVIRONMENT "TOKITAI_JIT_CACHE_PATH=none")
  endforeach()
endif()
