/* Helpers shared by the Check suites. */
#ifndef TK_TEST_H
#define TK_TEST_H

#include <check.h>
#include <stddef.h>
#include <sys/types.h>

#include "tokitai/tokitai.h"

/* Creates a fresh empty folder under $TMPDIR (or /tmp); returns a malloc'd path. */
char *tk_test_tmpdir(const char *tag);
/* Removes a folder tree (best effort). */
void tk_test_rmtree(const char *path);
/* Writes / reads a whole file; read returns malloc'd bytes (NUL-terminated) and size. */
int tk_test_write_file(const char *path, const void *data, size_t size);
char *tk_test_read_file(const char *path, size_t *size);
/* Runs argv (no shell), captures stdout and stderr (malloc'd, may be NULL
 * pointers to skip), returns the exit status or -1. */
int tk_test_run(char *const argv[], char **out, char **err);
/* Waits for n children; each must exit normally with a status below 100
 * (>= 100: the child's own setup failed). Returns the sum of their exit
 * statuses (children report counts that way). */
int tk_test_wait_children(const pid_t *pids, int n);
/* Path of the tokitai-jit executable under test ($TK_TEST_CLI). */
const char *tk_test_cli(void);
/* Runs a suite with CK_NORMAL output; returns the process exit code. */
int tk_test_main(Suite *suite);

/* For GPU suites: creates a context on the real device, or prints
 * "skipped: <why>" and exits 77 (CTest shows the test as Skipped). */
tk_context *tk_test_gpu_context_or_skip(const tk_config *cfg);
/* main() of a GPU suite: skips (exit 77, "skipped: why") without a device or
 * with only the stub backend, else runs the suite without forking (CUDA
 * does not survive fork() once initialised); the process exit code. */
int tk_test_gpu_main(Suite *suite);

#define tk_assert_status(expr, expected)                                                           \
    do {                                                                                           \
        tk_status tk__got = (expr);                                                                \
        ck_assert_msg(tk__got == (expected), "%s: got %s (%d), expected %s (%d)", #expr,           \
                      tk_status_str(tk__got), (int)tk__got, tk_status_str(expected),               \
                      (int)(expected));                                                            \
    } while (0)

#endif
