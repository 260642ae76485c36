#include "tk_test.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

char *tk_test_tmpdir(const char *tag)
{
    const char *base = getenv("TMPDIR");
    if (!base || !*base)
        base = "/tmp";
    size_t n = strlen(base) + strlen(tag) + 32;
    char *path = malloc(n);
    ck_assert_ptr_nonnull(path);
    snprintf(path, n, "%s/tk-%s-XXXXXX", base, tag);
    ck_assert_msg(mkdtemp(path) != NULL, "mkdtemp %s: %s", path, strerror(errno));
    return path;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    if (flag == FTW_DP || flag == FTW_D)
        chmod(path, 0700), rmdir(path);
    else
        unlink(path);
    return 0;
}

void tk_test_rmtree(const char *path)
{
    if (path)
        nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

int tk_test_write_file(const char *path, const void *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = fwrite(data, 1, size, f);
    return (fclose(f) == 0 && w == size) ? 0 : -1;
}

char *tk_test_read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap + 1);
    for (;;) {
        if (len == cap) {
            cap *= 2;
            buf = realloc(buf, cap + 1);
        }
        size_t r = fread(buf + len, 1, cap - len, f);
        if (r == 0)
            break;
        len += r;
    }
    fclose(f);
    buf[len] = 0;
    if (size)
        *size = len;
    return buf;
}

static void append(char **buf, size_t *len, const char *data, size_t n)
{
    *buf = realloc(*buf, *len + n + 1);
    memcpy(*buf + *len, data, n);
    *len += n;
    (*buf)[*len] = 0;
}

int tk_test_run(char *const argv[], char **out, char **err)
{
    int po[2], pe[2];
    if (pipe(po) || pipe(pe))
        return -1;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        dup2(po[1], 1);
        dup2(pe[1], 2);
        close(po[0]), close(pe[0]), close(po[1]), close(pe[1]);
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0)
            dup2(devnull, 0);
        execv(argv[0], argv);
        _exit(127);
    }
    close(po[1]);
    close(pe[1]);
    char *ob = calloc(1, 1), *eb = calloc(1, 1);
    size_t ol = 0, el = 0;
    struct pollfd fds[2] = {{po[0], POLLIN, 0}, {pe[0], POLLIN, 0}};
    int open_fds = 2;
    while (open_fds > 0) {
        if (poll(fds, 2, -1) < 0 && errno != EINTR)
            break;
        for (int i = 0; i < 2; i++) {
            if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP)))
                continue;
            char chunk[4096];
            ssize_t r = read(fds[i].fd, chunk, sizeof chunk);
            if (r <= 0) {
                close(fds[i].fd);
                fds[i].fd = -1;
                open_fds--;
            } else if (i == 0) {
                append(&ob, &ol, chunk, (size_t)r);
            } else {
                append(&eb, &el, chunk, (size_t)r);
            }
        }
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (out)
        *out = ob;
    else
        free(ob);
    if (err)
        *err = eb;
    else
        free(eb);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

const char *tk_test_cli(void)
{
    const char *cli = getenv("TK_TEST_CLI");
    ck_assert_msg(cli && *cli, "TK_TEST_CLI is not set (run through ctest)");
    return cli;
}

int tk_test_main(Suite *suite)
{
    SRunner *sr = srunner_create(suite);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

tk_context *tk_test_gpu_context_or_skip(const tk_config *cfg)
{
    tk_context *ctx = NULL;
    char why[1024] = "";
    tk_status st = tk_context_create(cfg, &ctx, why, sizeof why);
    if (st != TK_OK) {
        printf("skipped: no GPU device usable here (%s: %s)\n", tk_status_str(st), why);
        fflush(stdout);
        exit(77);
    }
    return ctx;
}

int tk_test_gpu_main(Suite *suite)
{
    tk_context *probe = tk_test_gpu_context_or_skip(NULL);
    if (strcmp(tk_context_backend_name(probe), "stub") == 0) {
        printf("skipped: only the stub backend is available\n");
        return 77;
    }
    tk_context_destroy(probe);
    SRunner *sr = srunner_create(suite);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}

int tk_test_wait_children(const pid_t *pids, int n)
{
    int total = 0;
    for (int i = 0; i < n; i++) {
        int status = 0;
        ck_assert_int_eq(waitpid(pids[i], &status, 0), pids[i]);
        ck_assert_msg(WIFEXITED(status), "child %d: status %d", i, status);
        ck_assert_int_lt(WEXITSTATUS(status), 100);
        total += WEXITSTATUS(status);
    }
    return total;
}
