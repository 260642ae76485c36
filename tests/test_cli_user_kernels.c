/* Manifest `kernel` lines as people write them (stub backend, no GPU):
 * template name expressions (quoted when they hold blanks), includes next
 * to the kernel file and through -I folders relative to the manifest, each
 * tracked by the cache (an edited header recompiles), --list showing the
 * name expression, compiler errors naming the kernel file and line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_cli_common.h"

static char *g_dir;  /* manifest tree */
static char *g_root; /* cache */

static void setup(void)
{
    g_dir = tk_test_tmpdir("cliuk");
    g_root = tk_test_tmpdir("cliuk-cache");
    unsetenv("TOKITAI_JIT_CACHE_DIR");
    setenv("TOKITAI_JIT_CACHE_PATH", "none", 1); /* not even the shipped tier */
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
    /* the compiler names FILE as the manifest does; the failure line, the
     * file as found from here */
    ck_assert_msg(strstr(out, "\nsrc/bad.cu(2): error") != NULL, "%s", out);
    char want[2200];
    snprintf(want, sizeof want, "kernel k (%s/src/bad.cu) (manifest line 2)", g_dir);
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

/* Writes text to <g_dir>/<tree>/<rel>, making the folders. */
static void put_in(const char *tree, const char *rel, const char *text)
{
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", tree, rel);
    for (char *p = path + strlen(tree) + 1; (p = strchr(p, '/')) != NULL; p++) {
        *p = 0;
        mkdir(path, 0700);
        *p = '/';
    }
    ck_assert_int_eq(tk_test_write_file(path, text, strlen(text)), 0);
}

static void make_tree(const char *tree)
{
    mkdir(tree, 0700);
    put_in(tree, "m/small.tkm", "arch stub\nkernel src/k.cu k -Iinc -DX=1\n");
    put_in(tree, "m/src/k.cu",
           "#include \"local.h\"\n#include <params.h>\n"
           "extern \"C\" __global__ void k(int *p) { p[0] = X + LOCAL + PARAMS; }\n");
    put_in(tree, "m/src/local.h", "#define LOCAL 1\n");
    put_in(tree, "m/inc/params.h", "#define PARAMS 2\n");
}

/* Runs --precompile from folder `from`; returns the kernels the summary
 * says it compiled. */
static long precompile_from(const char *from, const char *manifest, const char *cache)
{
    ck_assert_int_eq(chdir(from), 0);
    char *out, *err;
    int rc = cli_run(&out, &err, "--precompile", "--manifest", manifest, "--cache-dir", cache, "-j",
                     "1", NULL);
    ck_assert_msg(rc == CLI_OK, "from %s, --manifest %s: exit %d\n%s\n%s", from, manifest, rc, out,
                  err);
    long n = kernels_compiled(out);
    ck_assert_msg(n >= 0, "%s", out);
    if (n == 0) /* a hit: the one kernel found in the cache */
        ck_assert_msg(kernels_cached(out) == 1, "%s", out);
    free(out), free(err);
    return n;
}

/* A user kernel's key depends on its file and -I folders relative to the
 * manifest, and on their content, not on where the tree is or where the
 * tool runs: built in one place, it hits from everywhere else. */
START_TEST(test_keys_independent_of_location)
{
    char a[2048], b[2048], c[2048], abs_m[2200], cache_rel[2200];
    snprintf(a, sizeof a, "%s/a", g_dir);
    snprintf(b, sizeof b, "%s/b", g_dir);
    snprintf(c, sizeof c, "%s/copy", g_dir);
    make_tree(a);
    /* built from the tree's root, with the cache named relative to there
     * (g_dir/cache, a link to g_root): the workers compile in m/ */
    char link[2200];
    snprintf(link, sizeof link, "%s/cache", g_dir);
    ck_assert_int_eq(symlink(g_root, link), 0);
    snprintf(cache_rel, sizeof cache_rel, "../cache");
    ck_assert_int_eq(precompile_from(a, "m/small.tkm", cache_rel), 1);
    /* A program asking for the same kernel the same way (docs/manifests.md)
     * from the manifest's folder finds it. */
    char mdir[2200];
    snprintf(mdir, sizeof mdir, "%s/m", a);
    ck_assert_int_eq(chdir(mdir), 0);
    size_t len = 0;
    char *text = tk_test_read_file("src/k.cu", &len);
    ck_assert_ptr_nonnull(text);
    static const char *const opts[] = {"-Isrc", "-Iinc"};
    const tk_define def = {"X", "1"};
    tk_kernel_desc d = {.source = text,
                        .entry = "k",
                        .defines = &def,
                        .n_defines = 1,
                        .options = opts,
                        .n_options = 2,
                        .source_label = "src/k.cu"};
    tk_config *cfg = NULL;
    tk_context *ctx = NULL;
    tk_assert_status(tk_config_create(&cfg), TK_OK);
    tk_assert_status(tk_config_set_backend(cfg, TK_BACKEND_STUB), TK_OK);
    tk_assert_status(tk_config_set_target(cfg, "stub"), TK_OK);
    tk_assert_status(tk_config_set_cache_dir(cfg, g_root), TK_OK);
    tk_assert_status(tk_context_create(cfg, &ctx, NULL, 0), TK_OK);
    tk_origin origin = TK_ORIGIN_COMPILED;
    tk_assert_status(tk_kernel_precompile(ctx, &d, &origin), TK_OK);
    ck_assert_int_eq(origin, TK_ORIGIN_DISK);
    tk_context_destroy(ctx);
    tk_config_destroy(cfg);
    free(text);
    /* the manifest's own folder, relative and absolute manifest paths */
    ck_assert_int_eq(precompile_from(a, "./m/small.tkm", g_root), 0);
    snprintf(abs_m, sizeof abs_m, "%s/m", a);
    ck_assert_int_eq(precompile_from(abs_m, "small.tkm", g_root), 0);
    snprintf(abs_m, sizeof abs_m, "%s/m/small.tkm", a);
    ck_assert_int_eq(precompile_from("/", abs_m, g_root), 0);
    /* the tree moved, then run from above it and from inside */
    ck_assert_int_eq(rename(a, b), 0);
    ck_assert_int_eq(precompile_from(g_dir, "b/m/small.tkm", g_root), 0);
    snprintf(abs_m, sizeof abs_m, "%s/m/src", b);
    ck_assert_int_eq(precompile_from(abs_m, "../small.tkm", g_root), 0);
    /* a copy elsewhere (new files, same content: another machine) */
    make_tree(c);
    snprintf(abs_m, sizeof abs_m, "%s/m/small.tkm", c);
    ck_assert_int_eq(precompile_from("/", abs_m, g_root), 0);
    /* one entry for all of them, and its headers still tracked */
    key_set *ks = cache_keys(g_root);
    ck_assert_int_eq(ks->n, 1);
    free(ks);
    put_in(c, "m/inc/params.h", "#define PARAMS 3\n");
    ck_assert_int_eq(precompile_from(g_dir, "copy/m/small.tkm", g_root), 1);
    /* the entry records v2 now: v1's tree compiles again */
    ck_assert_int_eq(precompile_from(g_dir, "b/m/small.tkm", g_root), 1);
    unlink(link);
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
    tcase_add_test(tc, test_keys_independent_of_location);
    suite_add_tcase(s, tc);
    return tk_test_main(s);
}
