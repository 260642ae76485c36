/*
 * Reliability: kill -9 at random moments of --precompile, --import and
 * --prune (stub backend, no GPU). After each kill: no entry file is partial
 * (every *.tkc parses whole under its own key), the next --prune removes the
 * leftovers (temporary and lock files), and a rerun completes and verifies
 * clean. TK__CACHE_TEST_WRITE_DELAY_MS widens each store's window so that
 * kills land mid-write. TK_STRESS_SCALE=N multiplies the trials.
 */
#include <sys/prctl.h>

#include "test_cli_common.h"
#include "test_stress_common.h"

#define LIMIT_S 120.0

static const char manifest_text[] = "arch stub\n"
                                    "softmax_f16_fwd rows=64 cols=64..2048:+64\n";

typedef struct kill_figures {
    int trials, killed_running, partial, with_leftovers, leftovers_removed, reruns_clean;
} kill_figures;

/* Entries whole and under their own key; counts temporaries and lock files. */
static int check_files(const char *root, int *n_entries, int *n_temps, int *n_locks)
{
    blob_set s = {0};
    int others = read_cache_files(root, &s, n_temps);
    int partial = 0;
    for (size_t i = 0; i < s.n; i++) {
        tk__entry_view v;
        const char *why;
        char fp[33] = "";
        if (tk__entry_parse(s.v[i].bytes, s.v[i].len, 1, &v, &why) == TK_OK)
            tk__fp_hex(v.fp_hi, v.fp_lo, fp);
        if (strcmp(fp, s.v[i].hex) != 0)
            partial++;
    }
    *n_entries = (int)s.n;
    blob_set_free(&s);
    char locks[PATH_MAX];
    snprintf(locks, sizeof locks, "%s/%d/%s", root, TK__CACHE_FORMAT, TK__LOCK_DIR);
    *n_locks = 0;
    DIR *d = opendir(locks);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL)
        *n_locks += e->d_name[0] != '.';
    if (d)
        closedir(d);
    ck_assert_int_eq(others - *n_temps, 0); /* nothing else in the shard folders */
    return partial;
}

/* Starts argv, kills its whole process group after delay_ms (if still
 * running); 1 when it was killed while running. */
static int run_and_kill(char *const argv[], unsigned delay_ms)
{
    /* Orphaned workers of a killed precompile become our children, so that
     * a trial can wait for them to be gone (their locks released). Set here:
     * Check runs each test in a forked process, and forks do not inherit it. */
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    int null_fd = open("/dev/null", O_WRONLY);
    pid_t pid = spawn_argv(argv, null_fd, null_fd);
    close(null_fd);
    double t_end = now_s() + delay_ms / 1000.0;
    int status = 0;
    for (;;) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid)
            return 0; /* finished first */
        if (now_s() >= t_end)
            break;
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
    kill(-pid, SIGKILL);
    kill(pid, SIGKILL);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    /* The workers of the killed parent are in its process group too: wait
     * until the whole group is gone (its locks released), as a later run
     * would find it. */
    int killed = WIFSIGNALED(status);
    /* This process is their subreaper (main): they are reaped here. */
    while (waitpid(-pid, &status, 0) > 0 || errno == EINTR) {
    }
    return killed;
}

static void after_kill(const char *root, kill_figures *f, const char *what, char *const rerun[],
                       int want_entries)
{
    int n_entries, n_temps, n_locks;
    int partial = check_files(root, &n_entries, &n_temps, &n_locks);
    f->partial += partial;
    ck_assert_msg(partial == 0, "%s: %d partial entries after kill -9", what, partial);
    if (n_temps + n_locks > 0)
        f->with_leftovers++;
    /* The next prune removes what the killed process left. */
    run_result r;
    cli_limit(LIMIT_S, &r, "--prune", "--cache-dir", root, NULL);
    ck_assert_msg(r.code == 0, "%s: --prune after kill: %s", what, r.err);
    run_result_free(&r);
    int t2, l2;
    ck_assert_int_eq(check_files(root, &n_entries, &t2, &l2), 0);
    ck_assert_msg(t2 == 0 && l2 == 0, "%s: %d temporary and %d lock files left after a prune", what,
                  t2, l2);
    if (n_temps + n_locks > 0)
        f->leftovers_removed++;
    /* A rerun completes and verifies clean. */
    run_limit(rerun, LIMIT_S, &r);
    char why[512];
    ck_assert_msg(cli_contract(&r, why, sizeof why) == 0 && r.code == 0, "%s rerun: %s %s", what,
                  why, r.err);
    run_result_free(&r);
    cli_limit(LIMIT_S, &r, "--verify", "--cache-dir", root, NULL);
    ck_assert_msg(r.code == 0, "%s: --verify after rerun: %s", what, r.err);
    run_result_free(&r);
    ck_assert_int_eq(check_files(root, &n_entries, &t2, &l2), 0);
    if (want_entries >= 0)
        ck_assert_int_eq(n_entries, want_entries);
    ck_assert_int_eq(t2 + l2, 0);
    f->reruns_clean++;
}

static void report(const char *what, const kill_figures *f)
{
    printf("FIGURE kill-9 %s: %d trials, %d killed while running, %d partial entries, %d left "
           "leftovers (all removed by the next --prune: %d), %d reruns verified clean\n",
           what, f->trials, f->killed_running, f->partial, f->with_leftovers, f->leftovers_removed,
           f->reruns_clean);
    fflush(stdout);
}

static char *write_manifest(const char *dir)
{
    static char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/m.tkm", dir);
    ck_assert_int_eq(tk_test_write_file(path, manifest_text, strlen(manifest_text)), 0);
    return path;
}

START_TEST(test_kill_precompile)
{
    char *dir = tk_test_tmpdir("kill-pre");
    const char *manifest = write_manifest(dir);
    int trials = 20 * stress_scale();
    rng r = {stress_seed() ^ 1};
    kill_figures f = {0};
    setenv("TOKITAI_JIT_BACKEND", "stub", 1);
    for (int t = 0; t < trials; t++) {
        char root[PATH_MAX];
        snprintf(root, sizeof root, "%s/c%d", dir, t);
        char *argv[] = {(char *)tk_test_cli(), "--precompile", "--manifest",
                        (char *)manifest,      "-j",           "2",
                        "--cache-dir",         root,           NULL};
        char delay[16];
        snprintf(delay, sizeof delay, "%u", 2 + (unsigned)rng_below(&r, 6));
        setenv("TK__CACHE_TEST_WRITE_DELAY_MS", delay, 1);
        /* A full run takes about 32 x delay / 2 ms plus start-up. */
        f.killed_running += run_and_kill(argv, 5 + (unsigned)rng_below(&r, 120));
        unsetenv("TK__CACHE_TEST_WRITE_DELAY_MS");
        f.trials++;
        after_kill(root, &f, "--precompile", argv, 32);
        tk_test_rmtree(root);
    }
    unsetenv("TOKITAI_JIT_BACKEND");
    report("--precompile", &f);
    ck_assert_int_ge(f.killed_running, trials / 2);
    tk_test_rmtree(dir);
    free(dir);
}
END_TEST

START_TEST(test_kill_import)
{
    char *dir = tk_test_tmpdir("kill-imp");
    const char *manifest = write_manifest(dir);
    char src[PATH_MAX], bundle[PATH_MAX];
    snprintf(src, sizeof src, "%s/src", dir);
    snprintf(bundle, sizeof bundle, "%s/all.tkb", dir);
    setenv("TOKITAI_JIT_BACKEND", "stub", 1);
    run_result rr;
    cli_limit(LIMIT_S, &rr, "--precompile", "--manifest", manifest, "--cache-dir", src, NULL);
    ck_assert_msg(rr.code == 0, "%s", rr.err);
    run_result_free(&rr);
    unsetenv("TOKITAI_JIT_BACKEND");
    cli_limit(LIMIT_S, &rr, "--export", bundle, "--cache-dir", src, NULL);
    ck_assert_msg(rr.code == 0, "%s", rr.err);
    run_result_free(&rr);
    int trials = 20 * stress_scale();
    rng r = {stress_seed() ^ 2};
    kill_figures f = {0};
    for (int t = 0; t < trials; t++) {
        char root[PATH_MAX];
        snprintf(root, sizeof root, "%s/c%d", dir, t);
        char *argv[] = {(char *)tk_test_cli(), "--import", bundle, "--cache-dir", root, NULL};
        char delay[16];
        snprintf(delay, sizeof delay, "%u", 1 + (unsigned)rng_below(&r, 4));
        setenv("TK__CACHE_TEST_WRITE_DELAY_MS", delay, 1);
        f.killed_running += run_and_kill(argv, 2 + (unsigned)rng_below(&r, 100));
        unsetenv("TK__CACHE_TEST_WRITE_DELAY_MS");
        f.trials++;
        after_kill(root, &f, "--import", argv, 32);
        tk_test_rmtree(root);
    }
    report("--import", &f);
    ck_assert_int_ge(f.killed_running, trials / 2);
    tk_test_rmtree(dir);
    free(dir);
}
END_TEST

/* A cache of many small entries over its limit, so that a prune has work
 * (evictions, leftovers of killed writers) to be killed in. */
static void fill_for_prune(const char *root, int n, rng *r)
{
    tk__cache_opts o;
    memset(&o, 0, sizeof o);
    o.root = root;
    o.lower = "";
    o.max_size = (uint64_t)1 << 40;
    tk_cache *cache = NULL;
    tk_assert_status(tk__cache_open(&o, &cache), TK_OK);
    uint8_t payload[512];
    for (int i = 0; i < n; i++) {
        tk__key key;
        tk__key_init(&key);
        tk__key_add_u64(&key, "prune-entry", (uint64_t)i);
        tk__key_add_u64(&key, "seed", rng_next(r));
        tk_assert_status(tk__key_finish(&key), TK_OK);
        for (size_t j = 0; j < sizeof payload; j++)
            payload[j] = (uint8_t)rng_next(r);
        tk__entry_meta meta;
        memset(&meta, 0, sizeof meta);
        meta.kernel = "k";
        meta.backend = "stub";
        meta.arch = "stub";
        tk_assert_status(tk__cache_put(cache, &key, &meta, payload, sizeof payload), TK_OK);
        if (i % 50 == 0) { /* a killed writer's leftover */
            char tmp[PATH_MAX * 2];
            snprintf(tmp, sizeof tmp, "%s/%d/%.2s/.tmp.%s.dead%02d", root, TK__CACHE_FORMAT,
                     key.hex, key.hex + 2, i % 100);
            ck_assert_int_eq(tk_test_write_file(tmp, payload, 100), 0);
        }
        tk__key_free(&key);
    }
    tk_cache_close(cache);
}

START_TEST(test_kill_prune)
{
    char *dir = tk_test_tmpdir("kill-prune");
    int trials = 20 * stress_scale();
    rng r = {stress_seed() ^ 3};
    kill_figures f = {0};
    const int n = 500;
    for (int t = 0; t < trials; t++) {
        char root[PATH_MAX];
        snprintf(root, sizeof root, "%s/c%d", dir, t);
        fill_for_prune(root, n, &r);
        char *argv[] = {(char *)tk_test_cli(), "--prune", "--max-size", "100K",
                        "--cache-dir",         root,      NULL};
        f.killed_running += run_and_kill(argv, (unsigned)rng_below(&r, 25));
        f.trials++;
        after_kill(root, &f, "--prune", argv, -1);
        tk_test_rmtree(root);
    }
    report("--prune", &f);
    ck_assert_int_ge(f.killed_running, 1);
    tk_test_rmtree(dir);
    free(dir);
}
END_TEST

int main(void)
{
    Suite *suite = suite_create("stress_kill");
    TCase *tc = tcase_create("kill");
    tcase_set_timeout(tc, 1200);
    tcase_add_test(tc, test_kill_precompile);
    tcase_add_test(tc, test_kill_import);
    tcase_add_test(tc, test_kill_prune);
    suite_add_tcase(suite, tc);
    return tk_test_main(suite);
}
