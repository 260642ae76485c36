/* Manifest `kernel` lines as people write them (stub backend, no GPU):
 * template name expressions (quoted when they hold blanks), includes next
 * to the kernel file and through -I folders relative to the manifest, each
 * tracked by the cache (an edited header recompiles), --list showing the
 * name expression, compiler errors naming the kernel file and line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "test_cli_common.h"

static char *g_dir;  /* manifest tree */
static char *g_root; /* cache */

static void setup(void)
{
    g_dir = tk_test_tmpdir("cliuk");
    g_root = tk_test_tmpdir("cliuk-cache");
    unsetenv("TOKITAI_JIT_CACHE_DIR");
    unsetenv("TOKITAI_JIT_CACHE_PATH");
    unsetenv("TOKITAI_JIT_CACHE_DISABLE");
    unsetenv("TOKITAI_JIT_BACKEND");
}

static void teardown(void)
{
    tk_test_rmtree(g_dir);
    tk_test_rmtree(g_root);
    free(g_dir), free(g_root);
}

static void put(const char *rel, const char *text)
{
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", g_dir, rel);
    char *slash = strrchr(path, '/');
    *slash = 0;
    mkdir(path, 0700);
    *slash = '/';
    ck_assert_int_eq(tk_test_write_file(path, text, strlen(text)), 0);
}

static const char k_manifest[] = "arch stub\n"
                                 "# a template instance with blanks is quoted\n"
                                 "kernel src/tpl.cu \"fill<4, float>\" -Iinc  # comment\n"
                                 "kernel src/tpl.cu ns::gemm<128,true> -I inc -DX=1\n";

static const char k_tpl[] =
    "#include \"local.h\"\n"
    "#include <params.h>\n"
    "template <int N, typename T> __global__ void fill(T *x) { x[0] = N; }\n"
    "namespace ns {\n"
    "template <int B, bool F> __global__ void gemm(float *x) { x[0] = B; }\n"
    "}\n";

static char *run_precompile(int expect)
{
    char path[2048];
    snprintf(path, sizeof path, "%s/m.tkm", g_dir);
    char *out, *err;
    int rc = cli_run(&out, &err, "--precompile", "--manifest", path, "--cache-dir", g_root, "-j",
                     "1", NULL);
    ck_assert_msg(rc == expect, "exit %d\nstdout: %s\nstderr: %s", rc, out, err);
    char *both = malloc(strlen(out) + strlen(err) + 2);
    sprintf(both, "%s\n%s", out, err);
    free(out), free(err);
    return both;
}

static long compiled_in(const char *out)
{
    return kernels_compiled(out);
}

START_TEST(test_templates_and_tracked_headers)
{
    put("m.tkm", k_manifest);
    put("src/tpl.cu", k_tpl);
    put("src/local.h", "/* local v1 */\n");
    put("inc/params.h", "/* params v1 */\n");
    char *out = run_precompile(CLI_OK);
    ck_assert_msg(compiled_in(out) == 2, "%s", out);
    free(out);

    char *lst, *err;
    ck_assert_int_eq(cli_run(&lst, &err, "--list", "--cache-dir", g_root, NULL), CLI_OK);
    ck_assert_msg(strstr(lst, "fill<4, float>") != NULL, "%s", lst);
    ck_assert_msg(strstr(lst, "ns::gemm<128,true>") != NULL, "%s", lst);
    free(lst), free(err);

    out = run_precompile(CLI_OK);
    ck_assert_msg(compiled_in(out) == 0, "%s", out);
    free(out);

    put("inc/params.h", "/* params v2 */\n"); /* -I folder relative to the manifest */
    out = run_precompile(CLI_OK);
    ck_assert_msg(compiled_in(out) == 2, "%s", out);
    free(out);
    put("src/local.h", "/* local v2 */\n"); /* next to the kernel file */
    out = run_precompile(CLI_OK);
    ck_assert_msg(compiled_in(out) == 2, "%s", out);
    free(out);
    out = run_precompile(CLI_OK);
    ck_assert_msg(compiled_in(out) == 0, "%s", out);
    free(out);
}
END_TEST

START_TEST(test_errors_name_kernel_file)
{
    put("m.tkm", "arch stub\nkernel src/bad.cu k\n");
    put("src/bad.cu", "extern \"C\" __global__ void k() {}\n#error broken here\n");
    char *out = run_precompile(CLI_FAIL);
    char want[2200];
    snprintf(want, sizeof want, "%s/src/bad.cu(2): error", g_dir);
    ck_assert_msg(strstr(out, want) != NULL, "want %s in:\n%s", want, out);
    free(out);
}
END_TEST

static void expect_rejected(const char *manifest, const char *field)
{
    put("m.tkm", manifest);
    char *out = run_precompile(CLI_USAGE);
    ck_assert_msg(strstr(out, field) != NULL, "want '%s' in:\n%s", field, out);
    free(out);
}

START_TEST(test_manifest_kernel_line_errors)
{
    put("src/tpl.cu", k_tpl);
    put("src/local.h", "\n");
    expect_rejected("arch stub\nkernel src/tpl.cu \"fill<4, float> -Iinc\n", "no closing quote");
    expect_rejected("arch stub\nkernel src/tpl.cu fill<4,\"x\">\n", "quote inside a field");
    expect_rejected("arch stub\nkernel src/tpl.cu fill{4}\n", "fill{4}");
    expect_rejected("arch stub\nkernel src/tpl.cu \"fill<4, float>\" -Inowhere\n", "nowhere");
    expect_rejected("arch stub\nkernel src/tpl.cu fill<4 -I inc\n", "fill<4");
}
END_TEST

/* A kernel line names a C++ function (not extern "C") as written; --list
 * shows that name; a name the file lacks fails with what it holds. */
START_TEST(test_cpp_kernel_named_as_written)
{
    put("m.tkm", "arch stub\nkernel src/ln.cu layernorm_forward\n");
    put("src/ln.cu", "__global__ void layernorm_forward(float *out, const float *in, int n) {}\n");
    char *out = run_precompile(CLI_OK);
    ck_assert_msg(compiled_in(out) == 1, "%s", out);
    free(out);
    char *lst, *err;
    ck_assert_int_eq(cli_run(&lst, &err, "--list", "--cache-dir", g_root, NULL), CLI_OK);
    ck_assert_msg(strstr(lst, "layernorm_forward") != NULL, "%s", lst);
    ck_assert_msg(strstr(lst, "_Z17layernorm_forward") == NULL, "%s", lst);
    free(lst), free(err);

    put("m.tkm", "arch stub\nkernel src/ln.cu layernorm_fwd\n");
    out = run_precompile(CLI_FAIL);
    ck_assert_msg(strstr(out, "did you mean layernorm_forward(float*, const float*, int)?") != NULL,
                  "%s", out);
    free(out);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cli_user_kernels");
    TCase *tc = tcase_create("stub");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_templates_and_tracked_headers);
    tcase_add_test(tc, test_errors_name_kernel_file);
    tcase_add_test(tc, test_manifest_kernel_line_errors);
    tcase_add_test(tc, test_cpp_kernel_named_as_written);
    suite_add_tcase(s, tc);
    return tk_test_main(s);
}
