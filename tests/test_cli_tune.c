/* Tuning records on the stub backend (no GPU; the stub "runs" nothing, so
 * its timings are meaningless and only the plumbing is tested): tk_op_tune
 * stores a record in the cache; calls of the class follow a record (seen in
 * the number of launches: a split-K record adds the reduce kernel); a
 * malformed or unfitting record is ignored; the record travels through
 * --export / --import and shows in --list; `tokitai-jit --tune` on a
 * manifest; errors for what has nothing to tune. The GPU side (timings,
 * winners, their outputs) is scripts/tune-check.sh's. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "jit/backend/backend.h"
#include "jit/engine.h"
#include "test_cli_common.h"
#include "tk_test.h"
#include "tokitai/ops.h"

static char *dir;

static void setup(void)
{
    dir = tk_test_tmpdir("tune");
    ck_assert_ptr_nonnull(dir);
    setenv("TOKITAI_JIT_BACKEND", "stub", 1);
}

static void teardown(void)
{
    tk_test_rmtree(dir);
    free(dir);
    dir = NULL;
}

static char *sub(const char *name)
{
    char *p = malloc(strlen(dir) + strlen(name) + 2);
    ck_assert_ptr_nonnull(p);
    strcpy(p, dir);
    strcat(p, "/");
    strcat(p, name);
    return p;
}

static tk_context *make_ctx(const char *cache, int offline, int read_only)
{
    tk_config *cfg = NULL;
    tk_context *ctx = NULL;
    char err[256];
    tk_assert_status(tk_config_create(&cfg), TK_OK);
    tk_assert_status(tk_config_set_backend(cfg, TK_BACKEND_STUB), TK_OK);
    tk_assert_status(tk_config_set_cache_dir(cfg, cache), TK_OK);
    tk_assert_status(tk_config_set_build_mode(cfg, TK_BUILD_SYNC), TK_OK);
    if (read_only)
        tk_assert_status(tk_config_set_cache_read_only(cfg, 1), TK_OK);
    if (offline)
        tk_assert_status(tk_config_set_target(cfg, "stub"), TK_OK);
    tk_assert_status(tk_context_create(cfg, &ctx, err, sizeof err), TK_OK);
    tk_config_destroy(cfg);
    return ctx;
}

typedef struct rec_seen {
    int n;
    char kernel[128], options[1024];
} rec_seen;

static int find_record(void *user, const tk_cache_entry_info *info)
{
    rec_seen *r = user;
    if (info->source != NULL && strcmp(info->source, "tune:gemm_f16_fwd") == 0) {
        r->n++;
        snprintf(r->kernel, sizeof r->kernel, "%s", info->kernel);
        snprintf(r->options, sizeof r->options, "%s", info->options);
    }
    return 0;
}

static rec_seen records_in(const char *cache)
{
    tk_config *cfg = NULL;
    tk_cache *c = NULL;
    rec_seen r;
    memset(&r, 0, sizeof r);
    tk_assert_status(tk_config_create(&cfg), TK_OK);
    tk_assert_status(tk_config_set_cache_dir(cfg, cache), TK_OK);
    tk_assert_status(tk_cache_open(cfg, &c), TK_OK);
    tk_assert_status(tk_cache_list(c, find_record, &r), TK_OK);
    tk_cache_close(c);
    tk_config_destroy(cfg);
    return r;
}

/* Launches of one fwd call of M x 2816 x 1024. */
static uint64_t fwd_launches(tk_context *ctx, int64_t M)
{
    void *a = NULL, *b = NULL, *c = NULL;
    tk_assert_status(tk_mem_alloc(ctx, (size_t)M * 1024 * 2, &a), TK_OK);
    tk_assert_status(tk_mem_alloc(ctx, (size_t)1024 * 2816 * 2, &b), TK_OK);
    tk_assert_status(tk_mem_alloc(ctx, (size_t)M * 2816 * 4, &c), TK_OK);
    const uint64_t l0 = tk__stub_counters_get()->launches;
    tk_assert_status(tk_gemm_f16_fwd(ctx, M, 2816, 1024, a, 0, b, 0, c, 0, NULL), TK_OK);
    const uint64_t n = tk__stub_counters_get()->launches - l0;
    tk_mem_free(ctx, a);
    tk_mem_free(ctx, b);
    tk_mem_free(ctx, c);
    return n;
}

START_TEST(test_tune_stores_record)
{
    char *cache = sub("c");
    tk_context *ctx = make_ctx(cache, 0, 0);
    tk_tune_report r = TK_STRUCT_INIT(tk_tune_report);
    const int64_t dims[3] = {100, 2816, 1024};
    tk_assert_status(tk_op_tune(ctx, TK_OP_GEMM_F16_FWD, dims, 3, &r), TK_OK);
    ck_assert_str_eq(r.record, "gemm_f16_fwd N=2816 K=1024 M<=112");
    ck_assert_int_eq(r.timed_m, 112);
    ck_assert_uint_ge(r.candidates, 2);
    ck_assert_int_eq(r.stored, 1);
    /* a configuration, or "heuristics" where none gains 3% over them */
    ck_assert_msg(strncmp(r.chosen, "mma ", 4) == 0 || strncmp(r.chosen, "tma ", 4) == 0 ||
                      strcmp(r.chosen, "heuristics") == 0,
                  "chosen '%s'", r.chosen);
    /* the second timing point: the class's middle (97..112) */
    ck_assert_int_eq(r.mid_m, 104);
    ck_assert_msg(r.heuristic_mid_us > 0.0, "heuristics at M=104: %g us", r.heuristic_mid_us);
    ck_assert_msg(r.heuristic[0] != '\0', "no heuristic configuration");
    tk_context_destroy(ctx);

    /* one record per (op, N, K), a line per class */
    rec_seen s = records_in(cache);
    char line[128];
    ck_assert_int_eq(s.n, 1);
    ck_assert_str_eq(s.kernel, "N=2816 K=1024");
    snprintf(line, sizeof line, "M<=112 %s\n", r.chosen);
    ck_assert_str_eq(s.options, line);
    /* tuning the same class again replaces its line; another class adds
     * one, in order of M */
    ctx = make_ctx(cache, 0, 0);
    const int64_t dims2[3] = {97, 2816, 1024}, dims3[3] = {20, 2816, 1024};
    tk_assert_status(tk_op_tune(ctx, TK_OP_GEMM_F16_FWD, dims2, 3, &r), TK_OK);
    tk_assert_status(tk_op_tune(ctx, TK_OP_GEMM_F16_FWD, dims3, 3, &r), TK_OK);
    ck_assert_str_eq(r.record, "gemm_f16_fwd N=2816 K=1024 M<=32");
    tk_context_destroy(ctx);
    s = records_in(cache);
    ck_assert_int_eq(s.n, 1);
    ck_assert_msg(strncmp(s.options, "M<=32 ", 6) == 0 && strstr(s.options, "\nM<=112 ") != NULL &&
                      strstr(strstr(s.options, "\nM<=112 ") + 1, "\n") ==
                          s.options + strlen(s.options) - 1,
                  "record text:\n%s", s.options);
    free(cache);
}
END_TEST

START_TEST(test_calls_follow_record)
{
    char *cache = sub("c");
    tk_context *ctx = make_ctx(cache, 0, 0);
    /* the heuristics: one kernel, no split, for this class on the stub */
    ck_assert_uint_eq(fwd_launches(ctx, 100), 1);
    tk_context_destroy(ctx);

    ctx = make_ctx(cache, 0, 0);
    tk_assert_status(
        tk__record_put(ctx, "gemm_f16_fwd", "N=2816 K=1024", "M<=112 mma tile=1 split=4\n"), TK_OK);
    tk_context_destroy(ctx);
    /* a new context finds it in the cache: split-K, so GEMM + reduce */
    ctx = make_ctx(cache, 0, 0);
    ck_assert_uint_eq(fwd_launches(ctx, 100), 2);
    ck_assert_uint_eq(fwd_launches(ctx, 97), 2);  /* same class */
    ck_assert_uint_eq(fwd_launches(ctx, 113), 1); /* next class: heuristics */
    tk_context_destroy(ctx);

    /* malformed, and unfitting (a TMA kernel on a target without one):
     * ignored, the heuristics choose */
    ctx = make_ctx(cache, 0, 0);
    tk_assert_status(tk__record_put(ctx, "gemm_f16_fwd", "N=2816 K=1024", "M<=112 tile=9 fast\n"),
                     TK_OK);
    ck_assert_uint_eq(fwd_launches(ctx, 100), 1);
    tk_assert_status(tk__record_put(ctx, "gemm_f16_fwd", "N=2816 K=1024",
                                    "M<=112 tma bn=128 persist=0 epi=0 split=4\n"),
                     TK_OK);
    ck_assert_uint_eq(fwd_launches(ctx, 100), 1);
    /* "heuristics" (the tuner's record where no configuration gains): the
     * heuristics choose */
    tk_assert_status(tk__record_put(ctx, "gemm_f16_fwd", "N=2816 K=1024", "M<=112 heuristics\n"),
                     TK_OK);
    ck_assert_uint_eq(fwd_launches(ctx, 100), 1);
    tk_context_destroy(ctx);
    free(cache);
}
END_TEST

/* TOKITAI_JIT_TUNE=auto: the first call of a class without a record tunes
 * it (the candidates run on the call's buffers), stores the record, and the
 * next call of the class only runs. (Check runs each test in its own
 * process: the mode is read once per process.) */
START_TEST(test_auto_tune_first_call)
{
    char *cache = sub("c");
    setenv("TOKITAI_JIT_TUNE", "auto", 1);
    tk_context *ctx = make_ctx(cache, 0, 0);
    const uint64_t first = fwd_launches(ctx, 100);
    ck_assert_msg(first > 10, "the first call ran %llu kernels: no tuning", (unsigned long long)first);
    const uint64_t second = fwd_launches(ctx, 100);
    ck_assert_msg(second >= 1 && second <= 2, "second call: %llu launches", (unsigned long long)second);
    tk_context_destroy(ctx);
    unsetenv("TOKITAI_JIT_TUNE");
    rec_seen r = records_in(cache);
    ck_assert_int_eq(r.n, 1);
    ck_assert_str_eq(r.kernel, "N=2816 K=1024");
    ck_assert_msg(strncmp(r.options, "M<=112 ", 7) == 0, "%s", r.options);
    free(cache);
}
END_TEST

START_TEST(test_tune_errors)
{
    char *cache = sub("c");
    tk_context *ctx = make_ctx(cache, 0, 0);
    tk_tune_report r = TK_STRUCT_INIT(tk_tune_report);
    const int64_t g[3] = {64, 64, 64}, sm[2] = {4, 100}, bad[3] = {0, 64, 64};
    tk_assert_status(tk_op_tune(NULL, TK_OP_GEMM_F16_FWD, g, 3, &r), TK_INVALID_ARGUMENT);
    tk_assert_status(tk_op_tune(ctx, TK_OP_GEMM_F16_FWD, g, 3, NULL), TK_INVALID_ARGUMENT);
    tk_assert_status(tk_op_tune(ctx, TK_OP_GEMM_F16_FWD, g, 2, &r), TK_INVALID_ARGUMENT);
    tk_assert_status(tk_op_tune(ctx, TK_OP_GEMM_F16_FWD, bad, 3, &r), TK_INVALID_ARGUMENT);
    tk_assert_status(tk_op_tune(ctx, (tk_op)99, g, 3, &r), TK_INVALID_ARGUMENT);
    tk_assert_status(tk_op_tune(ctx, TK_OP_SOFTMAX_F16_FWD, sm, 2, &r), TK_UNSUPPORTED);
    ck_assert_msg(strstr(tk_context_last_error(ctx), "nothing to tune") != NULL, "%s",
                  tk_context_last_error(ctx));
    tk_context_destroy(ctx);
    /* an offline target has no device to time on */
    ctx = make_ctx(cache, 1, 0);
    tk_assert_status(tk_op_tune(ctx, TK_OP_GEMM_F16_FWD, g, 3, &r), TK_NO_DEVICE);
    tk_context_destroy(ctx);
    /* a read-only cache: tuned and in force for the context, not stored */
    ctx = make_ctx(cache, 0, 1);
    tk_assert_status(tk_op_tune(ctx, TK_OP_GEMM_F16_GRAD_B, g, 3, &r), TK_OK);
    ck_assert_int_eq(r.stored, 0);
    tk_context_destroy(ctx);
    free(cache);
}
END_TEST

START_TEST(test_cli_tune_list_export)
{
    char *cache = sub("c"), *cache2 = sub("c2"), *bundle = sub("b.tkb"), *mf = sub("m.tkm");
    char *out = NULL, *err = NULL;
    FILE *f = fopen(mf, "w");
    ck_assert_ptr_nonnull(f);
    fputs("gemm_f16_fwd M=100,3000 N=2816 K=1024\nsoftmax_f16_fwd rows=4 cols=100\n", f);
    fclose(f);
    int rc = cli_run(&out, &err, "--tune", "--manifest", mf, "--classes", "manifest",
                     "--cache-dir", cache, NULL);
    ck_assert_msg(rc == CLI_OK, "rc %d: %s%s", rc, out, err);
    ck_assert_msg(strstr(out, "gemm_f16_fwd N=2816 K=1024 M<=112") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "gemm_f16_fwd N=2816 K=1024 M<=3072") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "tuned 2 class(es), 2 record(s) stored") != NULL, "%s", out);
    free(out), free(err);

    rc = cli_run(&out, &err, "--list", "--cache-dir", cache, NULL);
    ck_assert_int_eq(rc, CLI_OK);
    ck_assert_msg(count_substr(out, "tuning gemm_f16_fwd N=2816 K=1024: 2 classes") == 1, "%s", out);
    free(out), free(err);

    /* records go with their op in a bundle */
    rc = cli_run(&out, &err, "--export", bundle, "--ops", "gemm_f16_fwd", "--cache-dir", cache,
                 NULL);
    ck_assert_msg(rc == CLI_OK, "%s%s", out, err);
    free(out), free(err);
    rc = cli_run(&out, &err, "--import", bundle, "--cache-dir", cache2, NULL);
    ck_assert_msg(rc == CLI_OK, "%s%s", out, err);
    free(out), free(err);
    ck_assert_int_eq(records_in(cache2).n, 1);
    rc = cli_run(&out, &err, "--verify", "--cache-dir", cache2, NULL);
    ck_assert_msg(rc == CLI_OK, "%s%s", out, err);
    free(out), free(err);
    free(cache), free(cache2), free(bundle), free(mf);
}
END_TEST

START_TEST(test_cli_tune_usage)
{
    char *mf = sub("m.tkm"), *cache = sub("c");
    char *out = NULL, *err = NULL;
    FILE *f = fopen(mf, "w");
    ck_assert_ptr_nonnull(f);
    fputs("softmax_f16_fwd rows=4 cols=100\n", f);
    fclose(f);
    int rc = cli_run(&out, &err, "--tune", "--manifest", mf, "--cache-dir", cache, NULL);
    ck_assert_int_eq(rc, CLI_USAGE);
    ck_assert_msg(strstr(err, "nothing to tune") != NULL, "%s", err);
    free(out), free(err);
    rc = cli_run(&out, &err, "--tune", "--classes", "some", NULL);
    ck_assert_int_eq(rc, CLI_USAGE);
    ck_assert_msg(strstr(err, "--classes") != NULL, "%s", err);
    free(out), free(err);
    rc = cli_run(&out, &err, "--list", "--classes", "all", NULL);
    ck_assert_int_eq(rc, CLI_USAGE);
    free(out), free(err);
    rc = cli_run(&out, &err, "--help", NULL);
    ck_assert_int_eq(rc, CLI_OK);
    ck_assert_msg(strstr(out, "--tune") != NULL && strstr(out, "TOKITAI_JIT_TUNE") != NULL, "%s",
                  out);
    free(out), free(err);
    free(mf), free(cache);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tune");
    TCase *tc = tcase_create("records");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_tune_stores_record);
    tcase_add_test(tc, test_calls_follow_record);
    tcase_add_test(tc, test_tune_errors);
    tcase_add_test(tc, test_auto_tune_first_call);
    tcase_add_test(tc, test_cli_tune_list_export);
    tcase_add_test(tc, test_cli_tune_usage);
    suite_add_tcase(s, tc);
    return tk_test_main(s);
}
