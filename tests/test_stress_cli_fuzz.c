/*
 * Reliability: bad input to the tool (no GPU). Random argument vectors and
 * mutated manifests through tokitai-jit: every run ends with a defined exit
 * code (0-5), a usage error with exactly one line on stderr, never a crash
 * or a hang (each run has a time limit). Manifests run as --dry-run; those
 * that parse into at most 64 jobs also compile with the stub backend.
 * TK_STRESS_SCALE=N multiplies the trial counts; TK_STRESS_SEED replays.
 */
#include "test_cli_common.h"
#include "test_stress_common.h"

#define LIMIT_S 60.0

typedef struct fuzz_figures {
    uint64_t runs, crashes, hangs, bad_exit, multi_line_usage, by_code[6];
} fuzz_figures;

static void check_run(const run_result *r, fuzz_figures *f, char *const argv[], const char *input)
{
    char why[512];
    f->runs++;
    if (cli_contract(r, why, sizeof why) != 0) {
        if (r->timed_out)
            f->hangs++;
        else if (r->sig)
            f->crashes++;
        else
            f->bad_exit++;
        char cmd[2048];
        size_t n = 0;
        for (int i = 1; argv[i] && n < sizeof cmd - 1; i++)
            n += (size_t)snprintf(cmd + n, sizeof cmd - n, "'%s' ", argv[i]);
        ck_abort_msg("tokitai-jit %s: %s\ninput:\n%.2000s\nstderr: %.2000s", cmd, why,
                     input ? input : "", r->err);
    }
    f->by_code[r->code]++;
    if (r->code == 2 && count_lines(r->err) != 1) {
        f->multi_line_usage++;
        ck_abort_msg("usage error with %d lines on stderr: %.2000s", count_lines(r->err), r->err);
    }
}

/* -------------------------------------------------------------- arguments */

static const char *const options[] = {
    "--help",     "-h",        "--version", "-V",           "--list",   "--stats",   "--verify",
    "--prune",    "--clear",   "--info",    "--precompile", "--export", "--import",  "--cache-dir",
    "--json",     "--verbose", "-v",        "--max-size",   "--shape",  "--seed",    "--policy",
    "--manifest", "--arch",    "--ops",     "-j",           "--jobs",   "--dry-run", "--",
    "-",          "--lis",     "--list=1",  "-x",           "--run",    "",          "-jj",
    "--json=yes"};

static void random_value(rng *r, char *buf, size_t size, const char *dir)
{
    static const char *const fixed[] = {"0",
                                        "1",
                                        "-1",
                                        "2",
                                        "99999999999999999999999",
                                        "4G",
                                        "500M",
                                        "1.5G",
                                        "0x10",
                                        "12abc",
                                        "sm_90",
                                        "gfx90a",
                                        "stub",
                                        "sm_",
                                        "gfx",
                                        "sm_90,gfx90a,",
                                        ",",
                                        "exact",
                                        "generic",
                                        "both",
                                        "gemm_f16_fwd",
                                        "nosuchop",
                                        "64x64x64",
                                        "0x0x0",
                                        "64,64",
                                        "-5x3",
                                        "x",
                                        "1e9",
                                        "  ",
                                        "../..",
                                        "/",
                                        "/dev/null",
                                        "/dev/zero",
                                        "fifo",
                                        "/proc/self/mem",
                                        "softmax_f16_fwd,embedding_f16_bwd",
                                        "18446744073709551616"};
    uint64_t pick = rng_below(r, 10);
    if (pick < 6) {
        snprintf(buf, size, "%s", fixed[rng_below(r, sizeof fixed / sizeof fixed[0])]);
    } else if (pick < 8) {
        snprintf(buf, size, "%s/f%llu", dir, (unsigned long long)rng_below(r, 4));
    } else {
        size_t n = 1 + (size_t)rng_below(r, size - 2 < 300 ? size - 2 : 300);
        for (size_t i = 0; i < n; i++) {
            uint8_t c = (uint8_t)(1 + rng_below(r, 255)); /* no NUL inside argv */
            buf[i] = (char)c;
        }
        buf[n] = 0;
    }
}

START_TEST(test_fuzz_arguments)
{
    char *dir = tk_test_tmpdir("fuzz-args");
    ck_assert_int_eq(chdir(dir), 0); /* relative paths land here */
    char cache[PATH_MAX];
    snprintf(cache, sizeof cache, "%s/cache", dir);
    setenv("TOKITAI_JIT_CACHE_DIR", cache, 1);
    setenv("TOKITAI_JIT_BACKEND", "stub", 1);
    rng r = {stress_seed() ^ 0xa55};
    fuzz_figures f;
    memset(&f, 0, sizeof f);
    const int trials = 1500 * stress_scale();
    double t0 = now_s();
    for (int t = 0; t < trials; t++) {
        /* A named pipe with no writer (as a manifest, a bundle...): must
         * be refused, never waited on. Remade when an export replaced it. */
        if (mkfifo("fifo", 0600) != 0 && errno != EEXIST)
            ck_abort_msg("mkfifo: %s", strerror(errno));
        char vals[8][512];
        char *argv[24];
        int n = 0, nv = 0;
        argv[n++] = (char *)tk_test_cli();
        int k = 1 + (int)rng_below(&r, 6);
        int precompile = 0, dry = 0;
        static const char *const commands[] = {"--list",   "--stats", "--verify",     "--prune",
                                               "--clear",  "--info",  "--precompile", "--export",
                                               "--import", "--help",  "--version"};
        if (rng_below(&r, 5) < 3) { /* mostly one real command, then whatever */
            const char *c = commands[rng_below(&r, sizeof commands / sizeof commands[0])];
            precompile = strcmp(c, "--precompile") == 0;
            argv[n++] = (char *)c;
            if ((strcmp(c, "--export") == 0 || strcmp(c, "--import") == 0) && nv < 8) {
                snprintf(vals[nv], sizeof vals[nv], "%s/b%llu.tkb", dir,
                         (unsigned long long)rng_below(&r, 3));
                argv[n++] = vals[nv++];
            }
            k = (int)rng_below(&r, 4);
        }
        for (int i = 0; i < k && n < 20; i++) {
            if (rng_below(&r, 4) == 0 && nv < 8) {
                random_value(&r, vals[nv], sizeof vals[nv], dir);
                argv[n++] = vals[nv++];
                continue;
            }
            const char *o = options[rng_below(&r, sizeof options / sizeof options[0])];
            /* --run would start a GPU computation: not a parsing matter. */
            if (strcmp(o, "--run") == 0)
                o = "--info";
            precompile |= strcmp(o, "--precompile") == 0;
            dry |= strcmp(o, "--dry-run") == 0;
            argv[n++] = (char *)o;
            if (rng_below(&r, 2) && nv < 8) {
                random_value(&r, vals[nv], sizeof vals[nv], dir);
                argv[n++] = vals[nv++];
            }
        }
        /* A precompile of the built-in manifest is a real workload: keep it
         * to its job list. */
        if (precompile && !dry)
            argv[n++] = "--dry-run";
        argv[n] = NULL;
        run_result rr;
        run_limit(argv, LIMIT_S, &rr);
        check_run(&rr, &f, argv, NULL);
        run_result_free(&rr);
    }
    printf("FIGURE fuzz-arguments: %llu random argument vectors: %llu crashes, %llu hangs, %llu "
           "undefined exit codes, %llu multi-line usage errors; exit 0/1/2/3/4/5: "
           "%llu/%llu/%llu/%llu/%llu/%llu, %.1f s\n",
           (unsigned long long)f.runs, (unsigned long long)f.crashes, (unsigned long long)f.hangs,
           (unsigned long long)f.bad_exit, (unsigned long long)f.multi_line_usage,
           (unsigned long long)f.by_code[0], (unsigned long long)f.by_code[1],
           (unsigned long long)f.by_code[2], (unsigned long long)f.by_code[3],
           (unsigned long long)f.by_code[4], (unsigned long long)f.by_code[5], now_s() - t0);
    fflush(stdout);
    unsetenv("TOKITAI_JIT_CACHE_DIR");
    unsetenv("TOKITAI_JIT_BACKEND");
    ck_assert_int_eq(chdir("/"), 0);
    tk_test_rmtree(dir);
    free(dir);
}
END_TEST

/* -------------------------------------------------------------- manifests */

static const char stub_base[] = "# a stub manifest\n"
                                "arch stub\n"
                                "policy exact\n"
                                "softmax_f16_fwd rows=64 cols=128,256\n"
                                "gemm_f16_fwd M=64 N=64..256:x2 K=64 policy=generic\n"
                                "embedding_f16_fwd V=100 D=64 Q=8\n"
                                "softmax_xent_f16_bwd rows=4 cols=100\n"
                                "kernel user.cu user_entry -DN=4 -O3\n";

static const char user_kernel_src[] =
    "extern \"C\" __global__ void user_entry(float *x) { x[threadIdx.x] *= N; }\n";

static const char *const tokens[] = {"arch",
                                     "policy",
                                     "kernel",
                                     "gemm_f16_fwd",
                                     "gemm_f16_grad_a",
                                     "gemm_f16_grad_b",
                                     "softmax_f16_fwd",
                                     "softmax_xent_f16_bwd",
                                     "embedding_f16_fwd",
                                     "embedding_f16_bwd",
                                     "M=",
                                     "N=",
                                     "K=",
                                     "rows=",
                                     "cols=",
                                     "V=",
                                     "D=",
                                     "Q=",
                                     "=",
                                     "..",
                                     ":x",
                                     ":+",
                                     ",",
                                     "#",
                                     "policy=",
                                     "exact",
                                     "generic",
                                     "both",
                                     "stub",
                                     "sm_90",
                                     "gfx90a",
                                     "0",
                                     "-1",
                                     "1",
                                     "2147483648",
                                     "9223372036854775807",
                                     "99999999999999999999",
                                     "1..100000:+1",
                                     "1..0",
                                     "5..5:x1",
                                     "1..2:+0",
                                     "64..16384:x2",
                                     "user.cu",
                                     "missing.cu",
                                     "/etc/passwd",
                                     "../../x",
                                     "-D",
                                     "-DX=",
                                     "-DA-B=1",
                                     "-D1X=2",
                                     "-DA.B",
                                     "kernel user.cu user_entry -DA-B=1",
                                     "kernel k.fifo user_entry",
                                     "kernel /dev/zero user_entry",
                                     "-O3",
                                     "\t",
                                     "  ",
                                     "\r",
                                     "\xff\xfe",
                                     "\xc3\x28"};

static char *mutate_manifest(const char *base, rng *r, size_t *out_len)
{
    size_t cap = strlen(base) * 4 + 4096;
    char *b = malloc(cap);
    ck_assert_ptr_nonnull(b);
    size_t n = strlen(base);
    memcpy(b, base, n);
    int rounds = rng_below(r, 10) < 7 ? 1 : 2 + (int)rng_below(r, 3);
    for (int k = 0; k < rounds; k++) {
        uint64_t kind = rng_below(r, 9);
        size_t at = n ? (size_t)rng_below(r, n + 1) : 0;
        if (kind <= 2) { /* insert a token (with a space or a newline) */
            const char *t = tokens[rng_below(r, sizeof tokens / sizeof tokens[0])];
            char ins[128];
            int m = snprintf(ins, sizeof ins, "%s%s", rng_below(r, 3) ? " " : "\n", t);
            if (n + (size_t)m < cap) {
                memmove(b + at + m, b + at, n - at);
                memcpy(b + at, ins, (size_t)m);
                n += (size_t)m;
            }
        } else if (kind == 3 && n) { /* delete a span */
            size_t len = 1 + (size_t)rng_below(r, 40);
            if (at + len > n)
                len = n - at;
            memmove(b + at, b + at + len, n - at - len);
            n -= len;
        } else if (kind == 4 && n) { /* flip bytes */
            int m = 1 + (int)rng_below(r, 4);
            for (int i = 0; i < m; i++)
                b[rng_below(r, n)] ^= (char)(1u << rng_below(r, 8));
        } else if (kind == 5 && n) { /* duplicate a span */
            size_t len = 1 + (size_t)rng_below(r, 80);
            if (at + len > n)
                len = n - at;
            if (n + len < cap) {
                memmove(b + at + len, b + at, n - at);
                n += len;
            }
        } else if (kind == 6) { /* a very long token */
            size_t len = 100 + (size_t)rng_below(r, 3000);
            if (n + len + 2 < cap) {
                memmove(b + at + len, b + at, n - at);
                memset(b + at, "a9=,.x"[rng_below(r, 6)], len);
                n += len;
            }
        } else if (kind == 7 && n) { /* a NUL or a control byte */
            b[rng_below(r, n)] = rng_below(r, 2) ? 0 : (char)rng_below(r, 32);
        } else if (n) { /* truncate */
            n = at;
        }
    }
    *out_len = n;
    return b;
}

static long jobs_in(const char *out)
{
    const char *p = strstr(out, " jobs (");
    if (!p)
        return -1;
    while (p > out && p[-1] >= '0' && p[-1] <= '9')
        p--;
    return strtol(p, NULL, 10);
}

START_TEST(test_fuzz_manifests)
{
    char *dir = tk_test_tmpdir("fuzz-mf");
    char kpath[PATH_MAX], mpath[PATH_MAX], cache[PATH_MAX], defpath[PATH_MAX];
    snprintf(kpath, sizeof kpath, "%s/user.cu", dir);
    snprintf(mpath, sizeof mpath, "%s/m.tkm", dir);
    snprintf(cache, sizeof cache, "%s/cache", dir);
    ck_assert_int_eq(tk_test_write_file(kpath, user_kernel_src, strlen(user_kernel_src)), 0);
    char fifo[PATH_MAX];
    snprintf(fifo, sizeof fifo, "%s/k.fifo", dir);
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    uint64_t check_missed = 0;
    const char *src = getenv("TK_TEST_SOURCE_DIR");
    ck_assert_ptr_nonnull(src);
    snprintf(defpath, sizeof defpath, "%s/manifests/default.tkm", src);
    size_t dlen = 0;
    char *def = tk_test_read_file(defpath, &dlen);
    ck_assert_ptr_nonnull(def);
    setenv("TOKITAI_JIT_BACKEND", "stub", 1);
    rng r = {stress_seed() ^ 0x3f};
    fuzz_figures f;
    memset(&f, 0, sizeof f);
    uint64_t parsed = 0, compiled_runs = 0;
    const int trials = 5000 * stress_scale();
    double t0 = now_s();
    for (int t = 0; t < trials; t++) {
        size_t n = 0;
        char *text = mutate_manifest(t % 4 == 3 ? def : stub_base, &r, &n);
        ck_assert_int_eq(tk_test_write_file(mpath, text, n), 0);
        char *argv[] = {(char *)tk_test_cli(),
                        "--precompile",
                        "--manifest",
                        mpath,
                        "--dry-run",
                        "--arch",
                        "stub",
                        "--cache-dir",
                        cache,
                        NULL};
        if (t % 2) /* half of them with the manifest's own arch line */
            argv[5] = NULL;
        run_result rr;
        run_limit(argv, LIMIT_S, &rr);
        check_run(&rr, &f, argv, text);
        long jobs = rr.code == 0 ? jobs_in(rr.out) : -1;
        parsed += rr.code == 0;
        run_result_free(&rr);
        if (jobs >= 0 && jobs <= 64 && t % 5 == 0) {
            char *argv2[] = {(char *)tk_test_cli(),
                             "--precompile",
                             "--manifest",
                             mpath,
                             "-j",
                             "1",
                             "--arch",
                             "stub",
                             "--cache-dir",
                             cache,
                             NULL};
            run_limit(argv2, LIMIT_S, &rr);
            check_run(&rr, &f, argv2, text);
            /* What the check passed must not fail on a define's name. */
            if (rr.code != 0 && strstr(rr.err, "define name")) {
                check_missed++;
                ck_abort_msg("the manifest check passed an invalid define:\n%s\nstderr: %s", text,
                             rr.err);
            }
            compiled_runs++;
            run_result_free(&rr);
        }
        free(text);
    }
    printf("FIGURE fuzz-manifests: %d mutated manifests through --precompile --dry-run (%llu "
           "parsed, %llu also compiled with the stub backend), %llu runs: %llu crashes, %llu "
           "hangs, %llu undefined exit codes, %llu multi-line usage errors, %llu invalid defines "
           "past the check; exit 0/1/2/3/4/5: %llu/%llu/%llu/%llu/%llu/%llu, %.1f s\n",
           trials, (unsigned long long)parsed, (unsigned long long)compiled_runs,
           (unsigned long long)f.runs, (unsigned long long)f.crashes, (unsigned long long)f.hangs,
           (unsigned long long)f.bad_exit, (unsigned long long)f.multi_line_usage,
           (unsigned long long)check_missed, (unsigned long long)f.by_code[0],
           (unsigned long long)f.by_code[1], (unsigned long long)f.by_code[2],
           (unsigned long long)f.by_code[3], (unsigned long long)f.by_code[4],
           (unsigned long long)f.by_code[5], now_s() - t0);
    fflush(stdout);
    unsetenv("TOKITAI_JIT_BACKEND");
    free(def);
    tk_test_rmtree(dir);
    free(dir);
}
END_TEST

int main(void)
{
    Suite *suite = suite_create("stress_cli_fuzz");
    TCase *tc = tcase_create("fuzz");
    tcase_set_timeout(tc, 1200);
    tcase_add_test(tc, test_fuzz_arguments);
    tcase_add_test(tc, test_fuzz_manifests);
    suite_add_tcase(suite, tc);
    return tk_test_main(suite);
}
