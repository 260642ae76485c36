/*
 * The cache commands as a user types them: persistent statistics across
 * processes (--stats / -s, --zero-stats / -z), the size limit kept in the
 * cache's config (-M), -C, and --list for a large cache (summary, --all,
 * filters, sort, limit, the kernel column). Stub backend: no GPU, no
 * compiler needed.
 */
#include <sys/stat.h>
#include <unistd.h>

#include "test_cli_list.h"

static char *g_root;
static char g_manifest[4096];

static void setup(void)
{
    g_root = tk_test_tmpdir("cli-cache");
    snprintf(g_manifest, sizeof g_manifest, "%s.tkm", g_root);
    /* 8 softmax shapes and 2 embeddings (sort helpers included). */
    const char *text = "arch stub\n"
                       "softmax_f16_fwd rows=32 cols=64..512:+64\n";
    ck_assert_int_eq(tk_test_write_file(g_manifest, text, strlen(text)), 0);
}

static void teardown(void)
{
    tk_test_rmtree(g_root);
    unlink(g_manifest);
    free(g_root);
}

static void precompile(void)
{
    char *out, *err;
    int rc = cli_run(&out, &err, "--precompile", "--manifest", g_manifest, "--cache-dir", g_root,
                     "-j", "2", NULL);
    ck_assert_msg(rc == CLI_OK, "precompile: %d\n%s\n%s", rc, out, err);
    free(out), free(err);
}

static long stat_line(const char *out, const char *name)
{
    const char *p = strstr(out, name);
    ck_assert_msg(p != NULL, "no '%s' in:\n%s", name, out);
    return strtol(p + strlen(name), NULL, 10);
}

START_TEST(stats_persist_across_processes)
{
    precompile(); /* 8 misses, 8 compiles, in worker processes */
    precompile(); /* 8 hits */
    char *out, *err;
    ck_assert_int_eq(cli_run(&out, &err, "-s", "--cache-dir", g_root, NULL), CLI_OK);
    ck_assert_int_eq(stat_line(out, "hits:"), 8);
    ck_assert_int_eq(stat_line(out, "misses:"), 8);
    ck_assert_int_eq(stat_line(out, "compiles:"), 8);
    ck_assert_int_eq(stat_line(out, "errors:"), 0);
    ck_assert_ptr_nonnull(strstr(out, "50.0% of lookups"));
    free(out), free(err);
    /* The same through --show-stats --json. */
    ck_assert_int_eq(cli_run(&out, &err, "--show-stats", "--json", "--cache-dir", g_root, NULL),
                     CLI_OK);
    ck_assert_msg(json_valid(out), "invalid JSON: %s", out);
    ck_assert_ptr_nonnull(strstr(out, "\"hits\": 8"));
    ck_assert_ptr_nonnull(strstr(out, "\"stats_since\": null"));
    free(out), free(err);

    /* -z zeroes for everybody; the next process counts from there. */
    ck_assert_int_eq(cli_run(&out, &err, "-z", "--cache-dir", g_root, NULL), CLI_OK);
    ck_assert_ptr_nonnull(strstr(out, "zeroed"));
    free(out), free(err);
    ck_assert_int_eq(cli_run(&out, &err, "--stats", "--cache-dir", g_root, NULL), CLI_OK);
    ck_assert_int_eq(stat_line(out, "hits:"), 0);
    ck_assert_int_eq(stat_line(out, "misses:"), 0);
    ck_assert_ptr_null(strstr(out, "never zeroed"));
    free(out), free(err);
    precompile();
    ck_assert_int_eq(cli_run(&out, &err, "--zero-stats", "--cache-dir", g_root, NULL), CLI_OK);
    free(out), free(err);
    precompile();
    ck_assert_int_eq(cli_run(&out, &err, "--stats", "--cache-dir", g_root, NULL), CLI_OK);
    ck_assert_int_eq(stat_line(out, "hits:"), 8);
    ck_assert_int_eq(stat_line(out, "compiles:"), 0);
    free(out), free(err);
}
END_TEST

START_TEST(stats_from_the_library)
{
    /* Two contexts in one process, then the cache handle's view. */
    for (int round = 0; round < 2; round++) {
        tk_config *cfg = NULL;
        tk_context *ctx = NULL;
        char errbuf[256];
        tk_assert_status(tk_config_create(&cfg), TK_OK);
        tk_assert_status(tk_config_set_backend(cfg, TK_BACKEND_STUB), TK_OK);
        tk_assert_status(tk_config_set_cache_dir(cfg, g_root), TK_OK);
        tk_assert_status(tk_context_create(cfg, &ctx, errbuf, sizeof errbuf), TK_OK);
        tk_kernel_desc d = {.source = "extern \"C\" __global__ void k(int *p) { p[0] = 1; }",
                            .entry = "k"};
        tk_kernel *k = NULL;
        tk_assert_status(tk_kernel_get(ctx, &d, &k), TK_OK);
        /* A reset in the middle must not lose what came before it. */
        tk_context_reset_stats(ctx);
        tk_context_destroy(ctx);
        tk_config_destroy(cfg);
    }
    tk_config *cfg = NULL;
    tk_cache *cache = NULL;
    tk_assert_status(tk_config_create(&cfg), TK_OK);
    tk_assert_status(tk_config_set_cache_dir(cfg, g_root), TK_OK);
    tk_assert_status(tk_cache_open(cfg, &cache), TK_OK);
    tk_cache_stats s = TK_STRUCT_INIT(tk_cache_stats);
    tk_assert_status(tk_cache_get_stats(cache, &s), TK_OK);
    ck_assert_uint_eq(s.struct_size, sizeof s);
    ck_assert_uint_eq(s.hits, 1);
    ck_assert_uint_eq(s.misses, 1);
    ck_assert_uint_eq(s.compiles, 1);
    ck_assert_uint_eq(s.errors, 0);
    ck_assert_int_eq(s.stats_since, 0);
    tk_assert_status(tk_cache_zero_stats(cache), TK_OK);
    tk_assert_status(tk_cache_get_stats(cache, &s), TK_OK);
    ck_assert_uint_eq(s.hits + s.misses + s.compiles, 0);
    ck_assert_int_gt(s.stats_since, 0);
    tk_cache_close(cache);
    tk_config_destroy(cfg);
}
END_TEST

START_TEST(max_size_kept_in_the_config)
{
    char *out, *err;
    ck_assert_int_eq(cli_run(&out, &err, "-M", "300M", "--cache-dir", g_root, NULL), CLI_OK);
    ck_assert_ptr_nonnull(strstr(out, "300.0 MiB"));
    free(out), free(err);
    /* Another process sees it. */
    ck_assert_int_eq(cli_run(&out, &err, "--stats", "--json", "--cache-dir", g_root, NULL),
                     CLI_OK);
    ck_assert_ptr_nonnull(strstr(out, "\"max_bytes\": 314572800"));
    free(out), free(err);
    /* The environment comes first. */
    setenv("TOKITAI_JIT_CACHE_MAX_SIZE", "1G", 1);
    ck_assert_int_eq(cli_run(&out, &err, "--stats", "--json", "--cache-dir", g_root, NULL),
                     CLI_OK);
    ck_assert_ptr_nonnull(strstr(out, "\"max_bytes\": 1073741824"));
    unsetenv("TOKITAI_JIT_CACHE_MAX_SIZE");
    free(out), free(err);
    /* 0: back to the default. */
    ck_assert_int_eq(cli_run(&out, &err, "--max-size=0", "--cache-dir", g_root, NULL), CLI_OK);
    free(out), free(err);
    ck_assert_int_eq(cli_run(&out, &err, "--stats", "--json", "--cache-dir", g_root, NULL),
                     CLI_OK);
    ck_assert_ptr_nonnull(strstr(out, "\"max_bytes\": 5368709120"));
    free(out), free(err);
    /* A bad config file is a warning and the default, never a failure. */
    char cfgpath[4200];
    snprintf(cfgpath, sizeof cfgpath, "%s/config", g_root);
    ck_assert_int_eq(tk_test_write_file(cfgpath, "max_size = lots\n", 16), 0);
    setenv("TOKITAI_JIT_LOG", "warn", 1);
    ck_assert_int_eq(cli_run(&out, &err, "--stats", "--json", "--cache-dir", g_root, NULL),
                     CLI_OK);
    unsetenv("TOKITAI_JIT_LOG");
    ck_assert_ptr_nonnull(strstr(out, "\"max_bytes\": 5368709120"));
    free(out), free(err);
    /* Bad sizes are usage errors; --prune still takes a size. */
    ck_assert_int_eq(cli_run(&out, &err, "-M", "big", "--cache-dir", g_root, NULL), CLI_USAGE);
    free(out), free(err);
    ck_assert_int_eq(cli_run(&out, &err, "--prune", "-M", "0", "--cache-dir", g_root, NULL),
                     CLI_USAGE);
    free(out), free(err);
    ck_assert_int_eq(cli_run(&out, &err, "--prune", "-M", "1G", "--cache-dir", g_root, NULL),
                     CLI_OK);
    free(out), free(err);
}
END_TEST

START_TEST(clear_short_form)
{
    precompile();
    char *out, *err;
    ck_assert_int_eq(cli_run(&out, &err, "-C", "--cache-dir", g_root, NULL), CLI_OK);
    ck_assert_ptr_nonnull(strstr(out, "removed 8 entries"));
    free(out), free(err);
}
END_TEST

START_TEST(list_for_people)
{
    /* 48 entries: more than a screen, so a summary by default. */
    const char *text = "arch stub\n"
                       "softmax_f16_fwd rows=32 cols=64..3072:+64\n";
    ck_assert_int_eq(tk_test_write_file(g_manifest, text, strlen(text)), 0);
    precompile();
    char *out, *err;
    ck_assert_int_eq(cli_run(&out, &err, "--list", "--cache-dir", g_root, NULL), CLI_OK);
    ck_assert_msg(count_lines(out) < 10, "not a summary:\n%s", out);
    ck_assert_ptr_nonnull(strstr(out, "POLICY"));
    ck_assert_int_eq(summary_count(out, "softmax_f16_fwd", "stub", "stable"), 48);
    ck_assert_ptr_nonnull(strstr(out, "48 entries in 1 group,"));
    free(out), free(err);

    /* --all: a row each, the kernel column names the baked width. */
    ck_assert_int_eq(cli_run(&out, &err, "--list", "--all", "--cache-dir", g_root, NULL), CLI_OK);
    ck_assert_int_eq(count_lines(out), 1 + 48 + 1);
    ck_assert_ptr_nonnull(strstr(out, "softmax_f16_fwd COLS=3072"));
    free(out), free(err);

    /* Filters, sort, limit. */
    ck_assert_int_eq(cli_run(&out, &err, "--list", "--kernel", "*fwd", "--sort", "size",
                             "--limit", "5", "--cache-dir", g_root, NULL),
                     CLI_OK);
    ck_assert_int_eq(count_lines(out), 1 + 5 + 1);
    free(out), free(err);
    ck_assert_int_eq(cli_run(&out, &err, "--list", "--kernel", "nothing*", "--cache-dir", g_root,
                             NULL),
                     CLI_OK);
    ck_assert_ptr_nonnull(strstr(out, "no entries match"));
    free(out), free(err);
    ck_assert_int_eq(cli_run(&out, &err, "--list", "--arch", "stub", "--ops", "softmax_f16_fwd",
                             "--limit", "3", "--cache-dir", g_root, NULL),
                     CLI_OK);
    ck_assert_ptr_nonnull(strstr(out, "3 entries"));
    free(out), free(err);
    ck_assert_int_eq(cli_run(&out, &err, "--list", "--ops", "gemm_f16_fwd", "--cache-dir", g_root,
                             NULL),
                     CLI_OK);
    ck_assert_ptr_nonnull(strstr(out, "no entries match"));
    free(out), free(err);
    ck_assert_int_eq(cli_run(&out, &err, "--list", "--older-than", "1d", "--cache-dir", g_root,
                             NULL),
                     CLI_OK);
    ck_assert_ptr_nonnull(strstr(out, "no entries match"));
    free(out), free(err);
    /* JSON keeps every entry and field, whatever the size. */
    ck_assert_int_eq(cli_run(&out, &err, "--list", "--json", "--cache-dir", g_root, NULL), CLI_OK);
    ck_assert_msg(json_valid(out), "invalid JSON");
    ck_assert_ptr_nonnull(strstr(out, "\"count\": 48"));
    ck_assert_int_eq(count_substr(out, "\"label\": "), 48);
    ck_assert_int_eq(count_substr(out, "\"options\": "), 48);
    ck_assert_int_eq(count_substr(out, "\"op\": \"softmax_f16_fwd\""), 48);
    ck_assert_int_eq(count_substr(out, "\"policy\": \"stable\""), 48);
    free(out), free(err);
    /* Bad values are usage errors. */
    const char *bad[][2] = {{"--sort", "colour"},  {"--limit", "0"},     {"--older-than", "soon"},
                            {"--arch", "sm_x"},    {"--ops", "nope"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(cli_run(&out, &err, "--list", bad[i][0], bad[i][1], "--cache-dir", g_root,
                                 NULL),
                         CLI_USAGE);
        free(out), free(err);
    }
}
END_TEST

/* The stub backend plans GEMMs as on a pre-Hopper GPU (mma.sync tiles,
 * small-K, split-K): every entry a label of its own, the operator each
 * serves, the summary by operator and policy, --ops exact. */
START_TEST(list_labels_and_ops)
{
    const char *text = "arch stub\n"
                       "policy stable generic\n"
                       "gemm_f16_fwd    M=16 N=48 K=64\n"
                       "gemm_f16_grad_a M=16 N=48 K=64\n"
                       "gemm_f16_grad_b M=16 N=48 K=64\n"
                       "gemm_f16_fwd    M=16 N=48 K=64 policy=exact\n"
                       "softmax_f16_fwd rows=4 cols=100..3000:+100\n"
                       "embedding_f16_fwd V=100 D=64 Q=8\n"
                       "embedding_f16_bwd V=100 D=64 Q=8\n";
    ck_assert_int_eq(tk_test_write_file(g_manifest, text, strlen(text)), 0);
    precompile();
    int n = 0;
    list_row *rows = list_json_rows(g_root, &n, NULL);
    ck_assert_int_gt(n, 40); /* a summary by default */
    assert_labels_distinct(rows, n);
    /* weights' dimensions in the operator's terms (grad_b: K = 64 is the
     * kernel's M) */
    int fwd = 0, grad_b = 0, exact = 0;
    for (int i = 0; i < n; i++) {
        fwd += strncmp(rows[i].label, "gemm_f16_fwd N=48 K=64 ", 23) == 0;
        grad_b += strncmp(rows[i].label, "gemm_f16_grad_b N=48 K=64 ", 26) == 0;
        exact += strncmp(rows[i].label, "gemm_f16_fwd M=16 N=48 K=64 ", 28) == 0 &&
                 strcmp(rows[i].policy, "exact") == 0;
    }
    ck_assert_int_gt(fwd, 0);
    ck_assert_int_gt(grad_b, 0);
    ck_assert_int_gt(exact, 0);
    /* the embedding backward's sort helpers go with it, under any policy */
    ck_assert_int_eq(rows_with(rows, n, "embedding_f16_bwd", "any"), 4);
    ck_assert_int_eq(rows_with(rows, n, "embedding_f16_fwd", "generic"), 1);
    ck_assert_int_eq(rows_with(rows, n, "softmax_f16_fwd", "stable"), 30);

    int m = 0;
    list_row *sel = list_json_rows(g_root, &m, "--ops", "embedding_f16_fwd", NULL);
    ck_assert_int_eq(m, rows_with(rows, n, "embedding_f16_fwd", NULL));
    free(sel);
    sel = list_json_rows(g_root, &m, "--ops", "gemm_f16_grad_b", NULL);
    ck_assert_int_eq(m, rows_with(rows, n, "gemm_f16_grad_b", NULL) +
                            rows_with(rows, n, "gemm_f16_grad_a/b", NULL));
    for (int i = 0; i < m; i++)
        ck_assert_msg(strcmp(sel[i].op, "gemm_f16_grad_b") == 0 ||
                          strcmp(sel[i].op, "gemm_f16_grad_a/b") == 0,
                      "%s", sel[i].label);
    free(sel);

    /* the summary: a row per operator and policy, counting its entries */
    char *out, *err;
    ck_assert_int_eq(cli_run(&out, &err, "--list", "--cache-dir", g_root, NULL), CLI_OK);
    static const char *const ops[] = {"gemm_f16_fwd", "gemm_f16_grad_a", "gemm_f16_grad_b",
                                      "embedding_f16_bwd", "softmax_f16_fwd"};
    static const char *const pols[] = {"exact", "stable", "generic", "any"};
    for (size_t o = 0; o < 5; o++)
        for (size_t p = 0; p < 4; p++) {
            int want = rows_with(rows, n, ops[o], pols[p]);
            ck_assert_int_eq(summary_count(out, ops[o], "stub", pols[p]), want ? want : -1);
        }
    free(out), free(err);
    free(rows);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cli_cache");
    TCase *tc = tcase_create("cache");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, stats_persist_across_processes);
    tcase_add_test(tc, stats_from_the_library);
    tcase_add_test(tc, max_size_kept_in_the_config);
    tcase_add_test(tc, clear_short_form);
    tcase_add_test(tc, list_for_people);
    tcase_add_test(tc, list_labels_and_ops);
    suite_add_tcase(s, tc);
    return tk_test_main(s);
}
