# The tool's man page and bash completion.
#
# The man page is generated from `tokitai-jit --help` and `--version` by
# Debian's help2man, so it never disagrees with the tool: the `man` target
# (part of the default build) writes build/tokitai-jit.1 from the built tool,
# and `cmake --install` puts it in share/man/man1. Without help2man the page
# is skipped with a message; the build does not need it.
find_program(TK_HELP2MAN help2man)
if(TK_HELP2MAN)
  set(TK_MAN_PAGE ${CMAKE_BINARY_DIR}/tokitai-jit.1)
  add_custom_command(OUTPUT ${TK_MAN_PAGE}
    COMMAND ${TK_HELP2MAN} --no-info --section=1
      "--name=compile GPU kernels ahead of time and manage the tokitai-jit kernel cache"
      --include=${CMAKE_CURRENT_LIST_DIR}/tokitai-jit.h2m
      --output=${TK_MAN_PAGE} $<TARGET_FILE:tokitai-jit>
    DEPENDS tokitai-jit ${CMAKE_CURRENT_LIST_DIR}/tokitai-jit.h2m
    COMMENT "Generating the man page tokitai-jit.1 with help2man"
    VERBATIM)
  add_custom_target(man ALL DEPENDS ${TK_MAN_PAGE})
  install(FILES ${TK_MAN_PAGE} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
  set(TK_HAVE_MAN 1)
else()
  set(TK_HAVE_MAN 0)
  message(STATUS "help2man not found: the man page (tokitai-jit.1) is skipped; install help2man to build it")
endif()

# Bash completion, found by bash-completion under the command's name.
install(FILES ${CMAKE_CURRENT_LIST_DIR}/../completions/tokitai-jit.bash
  DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions
  RENAME tokitai-jit)

# Both installed, the man page naming every option, the completion offering
# every option the tool's parser knows (tests/tool_docs_check.sh).
if(TK_BUILD_TESTS)
  add_test(NAME tool_docs_check
    COMMAND sh ${CMAKE_SOURCE_DIR}/tests/tool_docs_check.sh ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR} ${TK_HAVE_MAN})
  set_tests_properties(tool_docs_check PROPERTIES LABELS "cpu")
endif()
