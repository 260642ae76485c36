/*
 * Reliability: 32 processes precompiling overlapping manifests into one
 * cache at once (stub backend, no GPU). Each kernel is compiled exactly once
 * across all of them (the sum of their "compiled" counts equals the entries
 * in the cache), nothing is duplicated, and no temporary or lock file is left
 * behind. TK__CACHE_TEST_WRITE_DELAY_MS widens each store so races would
 * show. TK_STRESS_SCALE=N repeats the round N times.
 */
#include "test_cli_common.h"
#include "test_stress_common.h"

#define N_PROCS 32
#define SHAPES_PER_PROC 24
#define LIMIT_S 300.0

static void one_round(int round, const char *dir, long *sum_compiled, int *n_entries,
                      int *n_distinct_shapes)
{
    char root[PATH_MAX];
    snprintf(root, sizeof root, "%s/cache%d", dir, round);
    /* Process i asks for shapes i .. i+23 (of 32 + 23): every shape is wanted
     * by up to 24 processes. */
    char manifests[N_PROCS][PATH_MAX];
    for (int i = 0; i < N_PROCS; i++) {
        char text[8192];
        int n = snprintf(text, sizeof text, "arch stub\n");
        for (int k = 0; k < SHAPES_PER_PROC; k++)
            n += snprintf(text + n, sizeof text - (size_t)n, "softmax_f16_fwd rows=%d cols=%d\n",
                          16 + round, 64 * (1 + ((i + k) % (N_PROCS + SHAPES_PER_PROC - 1))));
        snprintf(manifests[i], sizeof manifests[i], "%s/m%d-%d.tkm", dir, round, i);
        ck_assert_int_eq(tk_test_write_file(manifests[i], text, strlen(text)), 0);
    }
    *n_distinct_shapes = N_PROCS + SHAPES_PER_PROC - 1;
    setenv("TOKITAI_JIT_BACKEND", "stub", 1);
    setenv("TK__CACHE_TEST_WRITE_DELAY_MS", "20", 1);
    pid_t pids[N_PROCS];
    int out_fds[N_PROCS];
    for (int i = 0; i < N_PROCS; i++) {
        char path[] = "/tmp/tk-conc-out-XXXXXX";
        out_fds[i] = mkstemp(path);
        ck_assert_int_ge(out_fds[i], 0);
        unlink(path);
        char *argv[] = {(char *)tk_test_cli(), "--precompile", "--manifest",
                        manifests[i],          "-j",           "2",
                        "--cache-dir",         root,           NULL};
        pids[i] = spawn_argv(argv, out_fds[i], out_fds[i]);
    }
    unsetenv("TK__CACHE_TEST_WRITE_DELAY_MS");
    unsetenv("TOKITAI_JIT_BACKEND");
    *sum_compiled = 0;
    for (int i = 0; i < N_PROCS; i++) {
        int timed_out = 0;
        int status = wait_limit(pids[i], LIMIT_S, &timed_out);
        char *out = slurp_fd(out_fds[i]);
        close(out_fds[i]);
        ck_assert_msg(!timed_out, "process %d hung", i);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "process %d: status %d\n%s", i,
                      status, out);
        long c = kernels_compiled(out);
        ck_assert_msg(c >= 0, "process %d: no summary\n%s", i, out);
        *sum_compiled += c;
        free(out);
    }
    blob_set s = {0};
    int n_temps = 0;
    int others = read_cache_files(root, &s, &n_temps);
    *n_entries = (int)s.n;
    for (size_t i = 0; i < s.n; i++) {
        tk__entry_view v;
        const char *why;
        ck_assert_int_eq(tk__entry_parse(s.v[i].bytes, s.v[i].len, 1, &v, &why), TK_OK);
    }
    blob_set_free(&s);
    ck_assert_msg(others == 0, "%d temporary or stray files left", others);
    char locks[PATH_MAX + 32];
    snprintf(locks, sizeof locks, "%s/%d/%s", root, TK__CACHE_FORMAT, TK__LOCK_DIR);
    DIR *d = opendir(locks);
    int n_locks = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL)
        n_locks += e->d_name[0] != '.';
    if (d)
        closedir(d);
    ck_assert_msg(n_locks == 0, "%d lock files left", n_locks);
    run_result r;
    cli_limit(LIMIT_S, &r, "--verify", "--cache-dir", root, NULL);
    ck_assert_msg(r.code == 0, "--verify: %s", r.err);
    run_result_free(&r);
    tk_test_rmtree(root);
}

START_TEST(test_32_processes_one_cache)
{
    char *dir = tk_test_tmpdir("conc");
    int rounds = stress_scale();
    long total_compiled = 0;
    int total_entries = 0, total_wanted = 0;
    double t0 = now_s();
    for (int round = 0; round < rounds; round++) {
        long compiled;
        int entries, shapes;
        one_round(round, dir, &compiled, &entries, &shapes);
        ck_assert_int_eq(entries, shapes);
        ck_assert_msg(compiled == entries, "round %d: %ld compiles for %d kernels", round, compiled,
                      entries);
        total_compiled += compiled;
        total_entries += entries;
        total_wanted += N_PROCS * SHAPES_PER_PROC;
    }
    printf("FIGURE concurrency: %d rounds of %d processes (-j 2 each) precompiling overlapping "
           "manifests into one cache: %d kernel requests, %d distinct kernels, %ld compiles "
           "(duplicates: %ld), 0 temporary and 0 lock files left, --verify clean, %.1f s\n",
           rounds, N_PROCS, total_wanted, total_entries, total_compiled,
           total_compiled - total_entries, now_s() - t0);
    fflush(stdout);
    tk_test_rmtree(dir);
    free(dir);
}
END_TEST

int main(void)
{
    Suite *suite = suite_create("stress_concurrency");
    TCase *tc = tcase_create("concurrency");
    tcase_set_timeout(tc, 1200);
    tcase_add_test(tc, test_32_processes_one_cache);
    suite_add_tcase(suite, tc);
    return tk_test_main(suite);
}
