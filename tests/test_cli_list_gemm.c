/*
 * --list on a cache of real sm_90 GEMM kernels (NVRTC, offline: no GPU):
 * every entry's label says which specialisation it is (operator, baked
 * dimensions in the operator's terms, wgmma tile, swap, split-K, the
 * split-K reduce), the summary has a row per operator, target and policy,
 * --ops names one operator exactly, a positive --older-than, and the sort
 * orders. Skipped (exit 77, with the reason) where NVRTC cannot compile
 * for sm_90.
 */
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>

#include "test_cli_list.h"

static char *g_dir;  /* manifest */
static char *g_root; /* cache, filled once for the suite */

/* Asymmetric N and K, so that a label with the kernel's dimensions instead
 * of the operator's would show; the last line's shape is split. */
static const char manifest[] = "arch sm_90\n"
                               "gemm_f16_fwd    M=2048 N=1024 K=2048\n"
                               "gemm_f16_grad_a M=2048 N=1024 K=2048\n"
                               "gemm_f16_grad_b M=2048 N=1024 K=2048\n"
                               "gemm_f16_fwd    M=2048 N=1024 K=2048 policy=exact\n"
                               "gemm_f16_grad_b M=512 N=1024 K=1024\n";

static void fill_cache(void)
{
    g_dir = tk_test_tmpdir("cli-list-gemm");
    g_root = tk_test_tmpdir("cli-list-gemm-cache");
    char path[4096];
    snprintf(path, sizeof path, "%s/g.tkm", g_dir);
    ck_assert_int_eq(tk_test_write_file(path, manifest, strlen(manifest)), 0);
    char *out, *err;
    int rc = cli_run(&out, &err, "--precompile", "--manifest", path, "--cache-dir", g_root, "-j",
                     "2", NULL);
    ck_assert_msg(rc == CLI_OK, "precompile: %d\n%s\n%s", rc, out, err);
    free(out), free(err);
}

static void drop_cache(void)
{
    tk_test_rmtree(g_dir);
    tk_test_rmtree(g_root);
    free(g_dir), free(g_root);
}

static int any_label_has(const list_row *rows, int n, const char *what)
{
    for (int i = 0; i < n; i++)
        if (strstr(rows[i].label, what))
            return 1;
    return 0;
}

START_TEST(labels_name_the_specialisation)
{
    int n = 0;
    list_row *rows = list_json_rows(g_root, &n, NULL);
    ck_assert_int_gt(n, 40);
    assert_labels_distinct(rows, n);
    for (int i = 0; i < n; i++) {
        ck_assert_str_eq(rows[i].kernel, "tk_gemm_f16");
        ck_assert_str_eq(rows[i].arch, "sm_90");
        /* the label starts with the operator */
        ck_assert_msg(strncmp(rows[i].label, rows[i].op, strlen(rows[i].op)) == 0, "%s: %s",
                      rows[i].op, rows[i].label);
    }
    /* Baked dimensions in each operator's own terms: the weight's N and K. */
    ck_assert(any_label_has(rows, n, "gemm_f16_fwd N=1024 K=2048 wgmma"));
    ck_assert(any_label_has(rows, n, "gemm_f16_grad_a N=1024 K=2048 wgmma"));
    ck_assert(any_label_has(rows, n, "gemm_f16_grad_b N=1024 K=2048"));
    ck_assert(any_label_has(rows, n, "gemm_f16_fwd M=2048 N=1024 K=2048 "));
    /* The variants: wgmma tiles (the 128-row default included), swapped
     * operands, split-K with its reduce, the generic fallbacks. */
    ck_assert(any_label_has(rows, n, " tile 128x"));
    ck_assert(any_label_has(rows, n, " swap"));
    ck_assert(any_label_has(rows, n, " split-K"));
    ck_assert(any_label_has(rows, n, "gemm_f16_fwd split-K reduce"));
    ck_assert(any_label_has(rows, n, "gemm_f16_grad_a/b split-K reduce"));
    ck_assert_int_gt(rows_with(rows, n, "gemm_f16_fwd", "generic"), 0);
    free(rows);
}
END_TEST

START_TEST(summary_per_op_arch_policy)
{
    int n = 0;
    list_row *rows = list_json_rows(g_root, &n, NULL);
    char *out, *err;
    ck_assert_int_eq(cli_run(&out, &err, "--list", "--cache-dir", g_root, NULL), CLI_OK);
    ck_assert_msg(count_lines(out) < 20, "not a summary:\n%s", out);
    ck_assert_msg(strstr(out, "OP") && strstr(out, "POLICY"), "%s", out);
    /* Each row counts the entries of its operator, target and policy. */
    static const char *const ops[] = {"gemm_f16_fwd", "gemm_f16_grad_a", "gemm_f16_grad_b",
                                      "gemm_f16_grad_a/b"};
    static const char *const policies[] = {"exact", "stable", "generic", "any"};
    long total = 0;
    int groups = 0;
    for (size_t o = 0; o < 4; o++)
        for (size_t p = 0; p < 4; p++) {
            int want = rows_with(rows, n, ops[o], policies[p]);
            long got = summary_count(out, ops[o], "sm_90", policies[p]);
            ck_assert_msg(got == (want ? want : -1), "%s %s: %ld rows, %d entries\n%s", ops[o],
                          policies[p], got, want, out);
            total += want;
            groups += want > 0;
        }
    ck_assert_int_eq(total, n);
    ck_assert_int_gt(summary_count(out, "gemm_f16_fwd", "sm_90", "exact"), 0);
    char line[128];
    snprintf(line, sizeof line, "%d entries in %d groups", n, groups);
    ck_assert_msg(strstr(out, line), "no '%s' in\n%s", line, out);
    free(out), free(err);
    free(rows);
}
END_TEST

START_TEST(ops_names_one_operator)
{
    int n = 0, na = 0, nf = 0;
    list_row *all = list_json_rows(g_root, &n, NULL);
    list_row *a = list_json_rows(g_root, &na, "--ops", "gemm_f16_grad_a", NULL);
    /* grad_a's kernels and the reduce it shares with grad_b; nothing else */
    ck_assert_int_eq(na, rows_with(all, n, "gemm_f16_grad_a", NULL) +
                             rows_with(all, n, "gemm_f16_grad_a/b", NULL));
    ck_assert_int_gt(rows_with(a, na, "gemm_f16_grad_a", NULL), 0);
    for (int i = 0; i < na; i++)
        ck_assert_msg(strncmp(a[i].op, "gemm_f16_grad_a", 15) == 0, "%s", a[i].label);
    list_row *f = list_json_rows(g_root, &nf, "--ops", "gemm_f16_fwd", NULL);
    ck_assert_int_eq(nf, rows_with(all, n, "gemm_f16_fwd", NULL));
    /* --export --ops takes the same entries */
    char bundle[4200], *out, *err;
    snprintf(bundle, sizeof bundle, "%s/a.tkb", g_dir);
    ck_assert_int_eq(cli_run(&out, &err, "--export", bundle, "--ops", "gemm_f16_grad_a",
                             "--cache-dir", g_root, NULL),
                     CLI_OK);
    ck_assert_int_eq(count_before(out, " entries from"), na);
    free(out), free(err);
    free(all), free(a), free(f);
}
END_TEST

START_TEST(sort_orders)
{
    int n = 0;
    /* default: target, then label */
    list_row *r = list_json_rows(g_root, &n, NULL);
    for (int i = 1; i < n; i++) {
        int c = strcmp(r[i - 1].arch, r[i].arch);
        ck_assert_msg(c < 0 || (c == 0 && strcmp(r[i - 1].label, r[i].label) < 0),
                      "'%s' before '%s'", r[i - 1].label, r[i].label);
    }
    free(r);
    r = list_json_rows(g_root, &n, "--sort", "size", NULL);
    for (int i = 1; i < n; i++)
        ck_assert_uint_ge(r[i - 1].file_size, r[i].file_size);
    unsigned long long biggest = r[0].file_size;
    free(r);
    r = list_json_rows(g_root, &n, "--sort", "size", "--limit", "3", NULL);
    ck_assert_int_eq(n, 3);
    ck_assert_uint_eq(r[0].file_size, biggest);
    free(r);
}
END_TEST

/* Runs last: it ages entries. */
START_TEST(older_than_finds_old_entries)
{
    int n = 0, k = 0;
    list_row *r = list_json_rows(g_root, &n, NULL);
    /* A use of three days ago on every third entry. */
    struct timespec old[2];
    old[0].tv_sec = old[1].tv_sec = time(NULL) - 3 * 86400;
    old[0].tv_nsec = old[1].tv_nsec = 0;
    for (int i = 0; i < n; i += 3, k++)
        ck_assert_int_eq(utimensat(AT_FDCWD, r[i].path, old, 0), 0);
    int m = 0;
    list_row *o = list_json_rows(g_root, &m, "--older-than", "2d", NULL);
    ck_assert_int_eq(m, k);
    for (int i = 0; i < m; i++) {
        int found = 0;
        for (int j = 0; j < n; j += 3)
            found |= strcmp(o[i].key, r[j].key) == 0;
        ck_assert_msg(found, "%s was used just now", o[i].label);
    }
    free(o);
    o = list_json_rows(g_root, &m, "--older-than", "4d", NULL);
    ck_assert_int_eq(m, 0);
    free(o);
    /* newest use first: the aged ones last */
    o = list_json_rows(g_root, &m, "--sort", "used", NULL);
    ck_assert_int_eq(m, n);
    for (int i = n - k; i < n; i++) {
        int aged = 0;
        for (int j = 0; j < n; j += 3)
            aged |= strcmp(o[i].key, r[j].key) == 0;
        ck_assert_msg(aged, "%s sorted among the old ones", o[i].label);
    }
    free(o);
    free(r);
}
END_TEST

/* target_available without Check's assertions (they need a running test). */
static int sm90_available(void)
{
    tk_config *cfg = NULL;
    tk_context *ctx = NULL;
    char why[512] = "";
    tk_status st = tk_config_create(&cfg);
    if (st == TK_OK)
        st = tk_config_set_backend(cfg, TK_BACKEND_CUDA);
    if (st == TK_OK)
        st = tk_config_set_target(cfg, "sm_90");
    if (st == TK_OK)
        st = tk_config_set_cache_disabled(cfg, 1);
    if (st == TK_OK)
        st = tk_context_create(cfg, &ctx, why, sizeof why);
    tk_context_destroy(ctx);
    tk_config_destroy(cfg);
    if (st != TK_OK)
        printf("skipped: NVRTC cannot compile for sm_90 here (%s: %s)\n", tk_status_str(st), why);
    return st == TK_OK;
}

int main(void)
{
    if (!sm90_available())
        return 77;
    Suite *s = suite_create("cli_list_gemm");
    TCase *tc = tcase_create("list");
    tcase_add_unchecked_fixture(tc, fill_cache, drop_cache);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, labels_name_the_specialisation);
    tcase_add_test(tc, summary_per_op_arch_policy);
    tcase_add_test(tc, ops_names_one_operator);
    tcase_add_test(tc, sort_orders);
    tcase_add_test(tc, older_than_finds_old_entries);
    suite_add_tcase(s, tc);
    return tk_test_main(s);
}
