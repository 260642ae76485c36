/* tokitai-jit on temporary caches: arguments, --list, --stats, --verify,
 * --prune, --clear, --info, --run without a device, README/CI agreement. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "test_cli_common.h"

static char *g_root;

static void setup(void)
{
    g_root = tk_test_tmpdir("cli");
    unsetenv("TOKITAI_JIT_CACHE_DIR");
    setenv("TOKITAI_JIT_CACHE_PATH", "none", 1); /* not even the shipped tier */
    unsetenv("TOKITAI_JIT_CACHE_DISABLE");
    unsetenv("TOKITAI_JIT_CACHE_MAX_SIZE");
}

static void teardown(void)
{
    tk_test_rmtree(g_root);
    free(g_root);
    g_root = NULL;
}

/* Plants n entries in the cache at root through the public API: a stub
 * offline context compiling user kernels that differ by one define. The last
 * define value carries quotes and a backslash, to exercise JSON escaping. */
static void plant_entries(const char *root, int n)
{
    tk_config *cfg = NULL;
    tk_assert_status(tk_config_create(&cfg), TK_OK);
    tk_assert_status(tk_config_set_cache_dir(cfg, root), TK_OK);
    tk_assert_status(tk_config_set_backend(cfg, TK_BACKEND_STUB), TK_OK);
    tk_assert_status(tk_config_set_target(cfg, "stub"), TK_OK);
    tk_context *ctx = NULL;
    char why[512] = "";
    tk_status st = tk_context_create(cfg, &ctx, why, sizeof why);
    ck_assert_msg(st == TK_OK, "stub context: %s: %s", tk_status_str(st), why);
    for (int i = 0; i < n; i++) {
        char value[32];
        snprintf(value, sizeof value, "%d", i);
        tk_define defs[2] = {{"TK_TEST_VARIANT", value}, {"TK_TEST_MSG", "\"q\\\"uote\\\\\""}};
        char src[256];
        /* Sizes differ so that pruning has something to choose. */
        snprintf(src, sizeof src,
                 "extern \"C\" __global__ void cli_kernel_%d(float *x) { x[0] = %d.0f; }\n"
                 "/* %.*s */\n",
                 i, i, i * 8, "................................................................");
        tk_kernel_desc d = {.source = src, .entry = "cli_kernel", .defines = defs, .n_defines = 2};
        tk_origin origin = TK_ORIGIN_MEMORY;
        tk_assert_status(tk_kernel_precompile(ctx, &d, &origin), TK_OK);
        ck_assert_int_eq(origin, TK_ORIGIN_COMPILED);
    }
    tk_context_destroy(ctx);
    tk_config_destroy(cfg);
}

/* Path of one entry file of the cache at root (malloc'd). */
static int first_path(void *user, const tk_cache_entry_info *info)
{
    char **out = user;
    *out = strdup(info->path);
    return 1;
}

static char *an_entry_path(const char *root)
{
    tk_config *cfg = NULL;
    tk_assert_status(tk_config_create(&cfg), TK_OK);
    tk_assert_status(tk_config_set_cache_dir(cfg, root), TK_OK);
    tk_cache *cache = NULL;
    tk_assert_status(tk_cache_open(cfg, &cache), TK_OK);
    char *path = NULL;
    tk_assert_status(tk_cache_list(cache, first_path, &path), TK_OK);
    tk_cache_close(cache);
    tk_config_destroy(cfg);
    ck_assert_ptr_nonnull(path);
    return path;
}

/* ------------------------------------------------------------- arguments */

START_TEST(test_help_and_version)
{
    char *out, *err;
    ck_assert_int_eq(cli_run(&out, &err, "--help", NULL), CLI_OK);
    const char *must[] = {"--list",
                          "--json",
                          "--verbose",
                          "--stats",
                          "--verify",
                          "--prune",
                          "--max-size",
                          "--clear",
                          "--info",
                          "--run",
                          "--shape",
                          "--seed",
                          "--policy",
                          "--precompile",
                          "--manifest",
                          "--arch",
                          "--ops",
                          "-j",
                          "--export",
                          "--import",
                          "--cache-dir",
                          "--version",
                          "TOKITAI_JIT_CACHE_DIR",
                          "TOKITAI_JIT_CACHE_PATH",
                          "TOKITAI_JIT_CACHE_MAX_SIZE",
                          "TOKITAI_JIT_CACHE_DISABLE",
                          "TOKITAI_JIT_BACKEND",
                          "TOKITAI_JIT_LOG",
                          "Exit codes",
                          "no device"};
    for (size_t i = 0; i < sizeof must / sizeof must[0]; i++)
        ck_assert_msg(strstr(out, must[i]), "--help does not mention %s", must[i]);
    ck_assert_str_eq(err, "");
    free(out), free(err);

    ck_assert_int_eq(cli_run(&out, &err, "--version", NULL), CLI_OK);
    ck_assert_ptr_nonnull(strstr(out, TK_VERSION_STRING));
    free(out), free(err);
}
END_TEST

/* One line on stderr, naming what is wrong, exit 2, nothing on stdout. */
static void expect_usage_error(const char *must_name, const char *a1, const char *a2,
                               const char *a3, const char *a4)
{
    char *out, *err;
    int rc = cli_run(&out, &err, a1, a2, a3, a4, NULL);
    ck_assert_msg(rc == CLI_USAGE, "%s %s %s %s: exit %d, expected 2 (stderr: %s)", a1,
                  a2 ? a2 : "", a3 ? a3 : "", a4 ? a4 : "", rc, err);
    ck_assert_msg(count_lines(err) == 1, "expected one line on stderr, got: %s", err);
    ck_assert_msg(strncmp(err, "tokitai-jit: ", 13) == 0, "stderr: %s", err);
    ck_assert_msg(strstr(err, must_name), "stderr does not name '%s': %s", must_name, err);
    ck_assert_str_eq(out, "");
    free(out), free(err);
}

START_TEST(test_bad_arguments)
{
    expect_usage_error("--bogus", "--list", "--bogus", NULL, NULL);
    expect_usage_error("stray", "--list", "stray", NULL, NULL);
    expect_usage_error("no command", "--cache-dir", g_root, NULL, NULL);
    expect_usage_error("12Q", "--prune", "--max-size", "12Q", NULL);
    expect_usage_error("--max-size", "--prune", "--max-size", NULL, NULL);
    expect_usage_error("--cache-dir", "--list", "--cache-dir", NULL, NULL);
    expect_usage_error("--stats", "--list", "--stats", NULL, NULL);
    expect_usage_error("--json", "--clear", "--json", NULL, NULL);
    expect_usage_error("--max-size", "--list", "--max-size", "1G", NULL);
    expect_usage_error("fastest", "--precompile", "--policy", "fastest", NULL);
    expect_usage_error("-j", "--precompile", "-j", "0", NULL);
    expect_usage_error("-j", "--precompile", "-jx", NULL, NULL);
    expect_usage_error("sm_9x", "--precompile", "--arch", "sm_9x", NULL);
    expect_usage_error("-12", "--run", "gemm_f16_fwd", "--seed", "-12");
    expect_usage_error("--shape", "--run", "gemm_f16_fwd", NULL, NULL);
    expect_usage_error("--shape", "--run", "gemm_f16_fwd", "--shape", "64x64");
    expect_usage_error("0x64x64", "--run", "gemm_f16_fwd", "--shape", "0x64x64");
    expect_usage_error("gemm_f32", "--run", "gemm_f32", "--shape", "64x64x64");
    expect_usage_error("--list", "--list", "--list", NULL, NULL);
    expect_usage_error("nothing_op", "--export", "/tmp/x.tkb", "--ops", "nothing_op");
}
END_TEST

START_TEST(test_options_with_equals)
{
    char *out, *err;
    char opt[1024];
    snprintf(opt, sizeof opt, "--cache-dir=%s", g_root);
    ck_assert_int_eq(cli_run(&out, &err, "--stats", opt, NULL), CLI_OK);
    ck_assert_ptr_nonnull(strstr(out, g_root));
    free(out), free(err);
}
END_TEST

/* ------------------------------------------------------------------ list */

START_TEST(test_list_empty)
{
    char *out, *err;
    ck_assert_int_eq(cli_run(&out, &err, "--list", "--cache-dir", g_root, NULL), CLI_OK);
    char want[1024];
    snprintf(want, sizeof want, "cache %s is empty\n", g_root);
    ck_assert_str_eq(out, want);
    free(out), free(err);

    ck_assert_int_eq(cli_run(&out, &err, "--list", "--json", "--cache-dir", g_root, NULL), CLI_OK);
    ck_assert_msg(json_valid(out), "invalid JSON: %s", out);
    ck_assert_ptr_nonnull(strstr(out, "\"entries\": []"));
    ck_assert_ptr_nonnull(strstr(out, "\"count\": 0"));
    free(out), free(err);

    /* A cache folder that does not exist yet is an empty cache too. */
    char missing[1024];
    snprintf(missing, sizeof missing, "%s/not/yet", g_root);
    ck_assert_int_eq(cli_run(&out, &err, "--list", "--cache-dir", missing, NULL), CLI_OK);
    ck_assert_ptr_nonnull(strstr(out, "is empty"));
    free(out), free(err);
}
END_TEST

START_TEST(test_list_entries)
{
    plant_entries(g_root, 3);
    key_set *keys = cache_keys(g_root);
    ck_assert_int_eq(keys->n, 3);

    char *out, *err;
    ck_assert_int_eq(cli_run(&out, &err, "--list", "--cache-dir", g_root, NULL), CLI_OK);
    const char *headers[] = {"KEY", "KERNEL", "ARCH", "SIZE", "LAST USE"};
    for (size_t i = 0; i < sizeof headers / sizeof headers[0]; i++)
        ck_assert_msg(strstr(out, headers[i]), "no column %s in:\n%s", headers[i], out);
    for (int i = 0; i < keys->n; i++) {
        char prefix[13];
        memcpy(prefix, keys->keys[i], 12);
        prefix[12] = 0;
        ck_assert_msg(strstr(out, prefix), "key %s not listed:\n%s", prefix, out);
    }
    /* Header, one row per entry, a total line. */
    ck_assert_int_eq(count_lines(out), 1 + 3 + 1);
    ck_assert_int_eq(count_substr(out, "cli_kernel"), 3);
    ck_assert_int_eq(count_substr(out, " stub "), 3); /* the arch column */
    ck_assert_ptr_nonnull(strstr(out, "3 entries"));
    free(out), free(err);

    ck_assert_int_eq(cli_run(&out, &err, "--list", "--verbose", "--cache-dir", g_root, NULL),
                     CLI_OK);
    ck_assert_int_eq(count_substr(out, "options:"), 3);
    ck_assert_int_eq(count_substr(out, "resources: registers/VGPR"), 3);
    ck_assert_ptr_nonnull(strstr(out, "TK_TEST_VARIANT"));
    ck_assert_ptr_nonnull(strstr(out, "SGPR"));
    ck_assert_ptr_nonnull(strstr(out, "wavefront"));
    free(out), free(err);

    ck_assert_int_eq(cli_run(&out, &err, "--list", "--json", "--cache-dir", g_root, NULL), CLI_OK);
    ck_assert_msg(json_valid(out), "invalid JSON: %s", out);
    for (int i = 0; i < keys->n; i++) {
        char quoted[40];
        snprintf(quoted, sizeof quoted, "\"%s\"", keys->keys[i]);
        ck_assert_msg(strstr(out, quoted), "key %s not in JSON", keys->keys[i]);
    }
    ck_assert_ptr_nonnull(strstr(out, "\"count\": 3"));
    ck_assert_ptr_nonnull(strstr(out, "\"resources\": {"));
    /* The define's quotes and backslash are escaped. */
    ck_assert_ptr_nonnull(strstr(out, "\\\"q\\\\\\\"uote"));
    free(out), free(err);

    /* TOKITAI_JIT_CACHE_DIR chooses the cache when --cache-dir does not. */
    setenv("TOKITAI_JIT_CACHE_DIR", g_root, 1);
    ck_assert_int_eq(cli_run(&out, &err, "--list", NULL), CLI_OK);
    ck_assert_ptr_nonnull(strstr(out, "3 entries"));
    unsetenv("TOKITAI_JIT_CACHE_DIR");
    free(out), free(err);
    free(keys);
}
END_TEST

/* ------------------------------------------------- stats, verify, prune, clear */

START_TEST(test_stats)
{
    plant_entries(g_root, 2);
    char *out, *err;
    ck_assert_int_eq(cli_run(&out, &err, "--stats", "--cache-dir", g_root, NULL), CLI_OK);
    ck_assert_ptr_nonnull(strstr(out, "entries:        2\n"));
    ck_assert_ptr_nonnull(strstr(out, g_root));
    ck_assert_ptr_nonnull(strstr(out, "bad files:      0"));
    free(out), free(err);
    ck_assert_int_eq(cli_run(&out, &err, "--stats", "--json", "--cache-dir", g_root, NULL), CLI_OK);
    ck_assert_msg(json_valid(out), "invalid JSON: %s", out);
    ck_assert_ptr_nonnull(strstr(out, "\"entries\": 2"));
    free(out), free(err);
}
END_TEST

START_TEST(test_verify)
{
    plant_entries(g_root, 3);
    char *out, *err;
    ck_assert_int_eq(cli_run(&out, &err, "--verify", "--cache-dir", g_root, NULL), CLI_OK);
    ck_assert_ptr_nonnull(strstr(out, "3 entries verified"));
    ck_assert_str_eq(err, "");
    free(out), free(err);

    /* A bit flipped inside an entry's payload. */
    char *victim = an_entry_path(g_root);
    size_t size = 0;
    char *bytes = tk_test_read_file(victim, &size);
    ck_assert_ptr_nonnull(bytes);
    bytes[size - 20] ^= 0x10;
    ck_assert_int_eq(tk_test_write_file(victim, bytes, size), 0);
    free(bytes);
    /* A file that is no entry at all, where an entry would be. */
    char dir[1024], planted[1200];
    snprintf(dir, sizeof dir, "%s", victim);
    *strrchr(dir, '/') = 0;
    snprintf(planted, sizeof planted, "%s/00000000000000000000000000000a.tkc", dir);
    ck_assert_int_eq(tk_test_write_file(planted, "not an entry", 12), 0);

    ck_assert_int_eq(cli_run(&out, &err, "--verify", "--cache-dir", g_root, NULL), CLI_FAIL);
    ck_assert_msg(strstr(err, victim), "the flipped entry is not named:\n%s", err);
    ck_assert_msg(strstr(err, planted), "the planted file is not named:\n%s", err);
    ck_assert_ptr_nonnull(strstr(out, "2 bad files"));
    free(out), free(err);
    free(victim);
}
END_TEST

START_TEST(test_prune)
{
    plant_entries(g_root, 6);
    tk_config *cfg = NULL;
    tk_cache *cache = NULL;
    tk_cache_stats before = TK_STRUCT_INIT(tk_cache_stats);
    tk_cache_stats after = TK_STRUCT_INIT(tk_cache_stats);
    tk_assert_status(tk_config_create(&cfg), TK_OK);
    tk_assert_status(tk_config_set_cache_dir(cfg, g_root), TK_OK);
    tk_assert_status(tk_cache_open(cfg, &cache), TK_OK);
    tk_assert_status(tk_cache_get_stats(cache, &before), TK_OK);
    ck_assert_int_eq(before.entries, 6);

    /* Half the current size, as a plain byte count. */
    char limit[32];
    snprintf(limit, sizeof limit, "%llu", (unsigned long long)(before.bytes / 2));
    char *out, *err;
    ck_assert_int_eq(
        cli_run(&out, &err, "--prune", "--max-size", limit, "--cache-dir", g_root, NULL), CLI_OK);
    ck_assert_ptr_nonnull(strstr(out, "removed"));
    free(out), free(err);
    tk_assert_status(tk_cache_get_stats(cache, &after), TK_OK);
    ck_assert_uint_le(after.bytes, before.bytes / 2);
    ck_assert_uint_lt(after.entries, before.entries);
    ck_assert_uint_gt(after.entries, 0);

    /* With a limit above the size nothing goes. */
    ck_assert_int_eq(
        cli_run(&out, &err, "--prune", "--max-size", "1G", "--cache-dir", g_root, NULL), CLI_OK);
    ck_assert_ptr_nonnull(strstr(out, "removed 0 files"));
    free(out), free(err);
    tk_cache_stats again = TK_STRUCT_INIT(tk_cache_stats);
    tk_assert_status(tk_cache_get_stats(cache, &again), TK_OK);
    ck_assert_uint_eq(again.entries, after.entries);
    tk_cache_close(cache);
    tk_config_destroy(cfg);
}
END_TEST

START_TEST(test_clear)
{
    plant_entries(g_root, 3);
    char *out, *err;
    ck_assert_int_eq(cli_run(&out, &err, "--clear", "--cache-dir", g_root, NULL), CLI_OK);
    ck_assert_ptr_nonnull(strstr(out, "removed 3 entries"));
    free(out), free(err);
    ck_assert_int_eq(cli_run(&out, &err, "--list", "--cache-dir", g_root, NULL), CLI_OK);
    ck_assert_ptr_nonnull(strstr(out, "is empty"));
    free(out), free(err);
}
END_TEST

/* ------------------------------------------------------------ info, run */

START_TEST(test_info)
{
    char *out, *err;
    ck_assert_int_eq(cli_run(&out, &err, "--info", "--cache-dir", g_root, NULL), CLI_OK);
    ck_assert_ptr_nonnull(strstr(out, "backend cuda:"));
    ck_assert_ptr_nonnull(strstr(out, "backend hip:"));
    char want[1100];
    snprintf(want, sizeof want, "cache: %s", g_root);
    ck_assert_msg(strstr(out, want), "cache folder not shown:\n%s", out);
    free(out), free(err);
    ck_assert_int_eq(cli_run(&out, &err, "--info", "--json", "--cache-dir", g_root, NULL), CLI_OK);
    ck_assert_msg(json_valid(out), "invalid JSON: %s", out);
    ck_assert_ptr_nonnull(strstr(out, "\"name\": \"cuda\""));
    free(out), free(err);
}
END_TEST

START_TEST(test_run_without_device)
{
    /* Hide every device from the vendor runtimes, so that this holds on a
     * GPU machine too. */
    unsetenv("TOKITAI_JIT_BACKEND");
    setenv("CUDA_VISIBLE_DEVICES", "", 1);
    setenv("HIP_VISIBLE_DEVICES", "", 1);
    setenv("ROCR_VISIBLE_DEVICES", "", 1);
    char *out, *err;
    ck_assert_int_eq(cli_run(&out, &err, "--run", "gemm_f16_fwd", "--shape", "64x64x64",
                             "--cache-dir", g_root, NULL),
                     CLI_NO_DEVICE);
    ck_assert_int_eq(count_lines(err), 1);
    ck_assert_msg(strstr(err, "needs a GPU"), "stderr: %s", err);
    ck_assert_str_eq(out, "");
    free(out), free(err);
    unsetenv("CUDA_VISIBLE_DEVICES");
    unsetenv("HIP_VISIBLE_DEVICES");
    unsetenv("ROCR_VISIBLE_DEVICES");
}
END_TEST

/* The stub backend has a "device" that launches nothing: the checked run
 * happens, its report is printed, and the result is outside tolerance. */
START_TEST(test_run_out_of_tolerance)
{
    setenv("TOKITAI_JIT_BACKEND", "stub", 1);
    char *out, *err;
    ck_assert_int_eq(cli_run(&out, &err, "--run", "softmax_f16_fwd", "--shape", "4x100",
                             "--cache-dir", g_root, NULL),
                     CLI_FAIL);
    ck_assert_msg(strstr(out, "softmax_f16_fwd") && strstr(out, "FAIL"), "report: %s", out);
    ck_assert_ptr_nonnull(strstr(out, "cache_key"));
    ck_assert_int_eq(count_lines(err), 1);
    ck_assert_msg(strstr(err, "outside tolerance"), "stderr: %s", err);
    free(out), free(err);
    ck_assert_int_eq(cli_run(&out, &err, "--run", "softmax_f16_fwd", "--shape", "4,100", "--json",
                             "--seed", "7", "--cache-dir", g_root, NULL),
                     CLI_FAIL);
    ck_assert_msg(json_valid(out), "invalid JSON: %s", out);
    free(out), free(err);
    unsetenv("TOKITAI_JIT_BACKEND");
}
END_TEST

/* ---------------------------------------------------- README and CI agree */

/* The README's test command (the line after "Run the whole test suite"). */
START_TEST(test_ci_runs_readme_command)
{
    const char *srcdir = getenv("TK_TEST_SOURCE_DIR");
    ck_assert_ptr_nonnull(srcdir);
    char path[1024];
    snprintf(path, sizeof path, "%s/README.md", srcdir);
    char *readme = tk_test_read_file(path, NULL);
    ck_assert_msg(readme, "cannot read %s", path);
    snprintf(path, sizeof path, "%s/.ci/run", srcdir);
    char *ci = tk_test_read_file(path, NULL);
    ck_assert_msg(ci, "cannot read %s", path);
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_msg(st.st_mode & S_IXUSR, ".ci/run is not executable");

    /* The command is the one line of .ci/run that is not a comment, set or cd. */
    char *cmd = NULL;
    for (char *line = strtok(ci, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '#' || strncmp(line, "set ", 4) == 0 || strncmp(line, "cd ", 3) == 0 ||
            !line[0])
            continue;
        ck_assert_msg(cmd == NULL, ".ci/run runs more than one command: %s", line);
        cmd = line;
    }
    ck_assert_msg(cmd != NULL, ".ci/run runs nothing");
    ck_assert_msg(strstr(readme, cmd), "the README does not contain .ci/run's command:\n%s", cmd);
    ck_assert_ptr_nonnull(strstr(cmd, "-DTK_WERROR=ON"));
    ck_assert_ptr_nonnull(strstr(cmd, "-DTK_SANITIZE=ON"));
    ck_assert_ptr_nonnull(strstr(cmd, "ctest"));
    free(readme);
    free(ci);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("cli");
    TCase *tc = tcase_create("cli");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_help_and_version);
    tcase_add_test(tc, test_bad_arguments);
    tcase_add_test(tc, test_options_with_equals);
    tcase_add_test(tc, test_list_empty);
    tcase_add_test(tc, test_list_entries);
    tcase_add_test(tc, test_stats);
    tcase_add_test(tc, test_verify);
    tcase_add_test(tc, test_prune);
    tcase_add_test(tc, test_clear);
    tcase_add_test(tc, test_info);
    tcase_add_test(tc, test_run_without_device);
    tcase_add_test(tc, test_run_out_of_tolerance);
    tcase_add_test(tc, test_ci_runs_readme_command);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tk_test_main(suite());
}
