/* tokitai-jit --precompile, --export and --import, without a GPU: the stub
 * backend for the logic, hipRTC (gfx90a) and NVRTC (sm_90) for real code
 * objects where they are installed. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cache/cache.h"
#include "test_cli_common.h"

static char *g_dir;   /* scratch folder: manifests, bundles */
static char *g_root;  /* a cache */
static char *g_root2; /* another cache */

static void setup(void)
{
    g_dir = tk_test_tmpdir("clipre");
    g_root = tk_test_tmpdir("clipre-cache");
    g_root2 = tk_test_tmpdir("clipre-cache2");
    unsetenv("TOKITAI_JIT_CACHE_DIR");
    setenv("TOKITAI_JIT_CACHE_PATH", "none", 1); /* not even the shipped tier */
    unsetenv("TOKITAI_JIT_CACHE_DISABLE");
    unsetenv("TOKITAI_JIT_BACKEND");
}

static void teardown(void)
{
    tk_test_rmtree(g_dir);
    tk_test_rmtree(g_root);
    tk_test_rmtree(g_root2);
    free(g_dir), free(g_root), free(g_root2);
}

/* Writes text to <g_dir>/<name>; returns the path (static buffer per call site). */
static const char *write_manifest(const char *name, const char *text, char *path, size_t size)
{
    snprintf(path, size, "%s/%s", g_dir, name);
    ck_assert_int_eq(tk_test_write_file(path, text, strlen(text)), 0);
    return path;
}

static int n_entries(const char *root)
{
    key_set *k = cache_keys(root);
    int n = k->n;
    free(k);
    return n;
}

/* -------------------------------------------------------- manifest errors */

/* The manifest is rejected with exit 2, stderr names "<file>:<line>:" and
 * field, and the cache stays empty: nothing compiled before the check. */
static void expect_rejected(const char *text, int line, const char *field)
{
    char path[1024], where[1100];
    write_manifest("bad.tkm", text, path, sizeof path);
    char *out, *err;
    int rc = cli_run(&out, &err, "--precompile", "--manifest", path, "--cache-dir", g_root, NULL);
    ck_assert_msg(rc == CLI_USAGE, "exit %d for manifest:\n%s\nstderr: %s", rc, text, err);
    if (line)
        snprintf(where, sizeof where, "%s:%d:", path, line);
    else
        snprintf(where, sizeof where, "%s:", path);
    ck_assert_msg(strstr(err, where), "line %d not named: %s", line, err);
    ck_assert_msg(strstr(err, field), "field '%s' not named: %s", field, err);
    ck_assert_int_eq(count_lines(err), 1);
    free(out), free(err);
    ck_assert_int_eq(n_entries(g_root), 0);
}

START_TEST(test_manifest_errors)
{
    expect_rejected("arch stub\ngemm_f16_fwd M=8 N=8 K=8\ngemm_f32_fwd M=8 N=8 K=8\n", 3,
                    "gemm_f32_fwd");
    expect_rejected("arch stub\n\n# comment\ngemm_f16_fwd M=8 N=abc K=8\n", 4, "N=abc");
    expect_rejected("arch stub\ngemm_f16_fwd M=8 N=8\n", 2, "missing dimension K");
    expect_rejected("arch stub\ngemm_f16_fwd M=0 N=8 K=8\n", 2, "M=0");
    expect_rejected("arch stub\ngemm_f16_fwd M=64..8:x2 N=8 K=8\n", 2, "M=64..8:x2");
    expect_rejected("arch stub\ngemm_f16_fwd M=8..64 N=8 K=8\n", 2, "needs a step");
    expect_rejected("arch stub\ngemm_f16_fwd M=8..64:x1 N=8 K=8\n", 2, "bad step");
    expect_rejected("arch stub\nsoftmax_f16_fwd rows=8 cols=8 Q=4\n", 2, "Q=4");
    expect_rejected("arch stub\nsoftmax_f16_fwd rows=8 rows=9 cols=8\n", 2, "given twice");
    expect_rejected("softmax_f16_fwd rows=8 cols=8\narch stub sm_9z\n", 2, "sm_9z");
    expect_rejected("arch stub\npolicy fastest\nsoftmax_f16_fwd rows=8 cols=8\n", 2, "fastest");
    expect_rejected("arch stub\nkernel missing.cu entry\n", 2, "missing.cu");
    expect_rejected("# nothing\narch stub\n", 0, "nothing to compile");
    expect_rejected("arch stub\nsoftmax_f16_fwd rows=8 cols=8 policy=fast\n", 2, "fast");
}
END_TEST

/* A target with a valid name that the installed compiler does not know:
 * rejected (exit 4) naming it and its line, before anything compiles. */
START_TEST(test_manifest_unknown_target)
{
    if (!target_available("gfx90a", TK_BACKEND_HIP))
        return;
    char path[1024];
    write_manifest("gfx1101.tkm", "softmax_f16_fwd rows=8 cols=100\narch gfx90a\narch gfx1101\n",
                   path, sizeof path);
    char *out, *err;
    ck_assert_int_eq(
        cli_run(&out, &err, "--precompile", "--manifest", path, "--cache-dir", g_root, NULL),
        CLI_UNAVAILABLE);
    ck_assert_msg(strstr(err, "gfx1101"), "stderr: %s", err);
    ck_assert_msg(strstr(err, ":3)"), "line not named: %s", err);
    free(out), free(err);
    ck_assert_int_eq(n_entries(g_root), 0);
}
END_TEST

/* ------------------------------------------------------ stub precompile */

static const char stub_manifest[] = "# small manifest for the stub backend\n"
                                    "arch stub\n"
                                    "policy exact\n"
                                    "gemm_f16_fwd    M=16,32 N=48 K=64\n"
                                    "gemm_f16_grad_a M=16 N=48 K=64\n"
                                    "softmax_f16_fwd rows=4 cols=100,1000\n"
                                    "embedding_f16_fwd V=100 D=64 Q=8\n"
                                    "embedding_f16_bwd V=100 D=64 Q=8\n"
                                    "kernel user.cu user_entry -DTILE=4 -DNAME=x\n";

static const char user_kernel[] =
    "extern \"C\" __global__ void user_entry(float *x) { x[threadIdx.x] = TILE; }\n";

START_TEST(test_stub_precompile)
{
    char path[1024], kpath[1024];
    write_manifest("user.cu", user_kernel, kpath, sizeof kpath);
    write_manifest("stub.tkm", stub_manifest, path, sizeof path);
    char *out, *err;
    int rc = cli_run(&out, &err, "--precompile", "--manifest", path, "-j", "2", "--cache-dir",
                     g_root, NULL);
    ck_assert_msg(rc == CLI_OK, "exit %d\nstdout: %s\nstderr: %s", rc, out, err);
    /* One plain line per job when stdout is not a terminal. */
    ck_assert_int_eq(count_substr(out, "/8] stub "), 8);
    long compiled = kernels_compiled(out);
    ck_assert_msg(compiled >= 8, "summary: %s", out);
    ck_assert_int_eq(kernels_cached(out), 0);
    ck_assert_int_eq(n_entries(g_root), compiled);
    key_set *first = cache_keys(g_root);
    free(out), free(err);

    /* Every operator and the user kernel have entries. */
    ck_assert_int_eq(cli_run(&out, &err, "--list", "--cache-dir", g_root, NULL), CLI_OK);
    ck_assert_ptr_nonnull(strstr(out, "user_entry"));
    free(out), free(err);

    /* A second run compiles nothing and says so. */
    rc = cli_run(&out, &err, "--precompile", "--manifest", path, "-j", "2", "--cache-dir", g_root,
                 NULL);
    ck_assert_msg(rc == CLI_OK, "exit %d\nstdout: %s\nstderr: %s", rc, out, err);
    ck_assert_msg(strstr(out, "nothing to compile"), "second run: %s", out);
    ck_assert_int_eq(count_substr(out, ": already cached"), 8);
    key_set *second = cache_keys(g_root);
    ck_assert_int_eq(second->n, first->n);
    for (int i = 0; i < first->n; i++)
        ck_assert_str_eq(second->keys[i], first->keys[i]);
    free(out), free(err);

    /* --ops narrows the manifest; --dry-run compiles nothing. */
    ck_assert_int_eq(cli_run(&out, &err, "--precompile", "--manifest", path, "--ops",
                             "gemm_f16_fwd,user_entry", "--dry-run", "--cache-dir", g_root2, NULL),
                     CLI_OK);
    ck_assert_ptr_nonnull(strstr(out, "3 jobs"));
    ck_assert_int_eq(n_entries(g_root2), 0);
    free(out), free(err);
    free(first), free(second);
}
END_TEST

START_TEST(test_stub_failure_reports_log)
{
    char path[1024], kpath[1024];
    write_manifest("broken.cu", "#error this kernel is broken on purpose\n", kpath, sizeof kpath);
    write_manifest("broken.tkm",
                   "arch stub\nsoftmax_f16_fwd rows=4 cols=100\nkernel broken.cu broken_entry\n",
                   path, sizeof path);
    char *out, *err;
    ck_assert_int_eq(
        cli_run(&out, &err, "--precompile", "--manifest", path, "--cache-dir", g_root, NULL),
        CLI_FAIL);
    ck_assert_ptr_nonnull(strstr(out, "1 job failed"));
    ck_assert_msg(strstr(err, "broken on purpose"), "the compiler log is missing: %s", err);
    ck_assert_msg(strstr(err, "line 3"), "the manifest line is missing: %s", err);
    free(out), free(err);
    ck_assert_int_ge(n_entries(g_root), 1); /* the good job still went in */
}
END_TEST

/* A precompile that could store nothing has failed, whatever the compiler
 * said. */
START_TEST(test_nothing_stored_fails)
{
    char path[1024], kpath[1024];
    write_manifest("user.cu", user_kernel, kpath, sizeof kpath);
    write_manifest("stub.tkm", stub_manifest, path, sizeof path);
    setenv("TOKITAI_JIT_CACHE_DISABLE", "1", 1);
    char *out, *err;
    int rc = cli_run(&out, &err, "--precompile", "--manifest", path, "--cache-dir", g_root, NULL);
    unsetenv("TOKITAI_JIT_CACHE_DISABLE");
    ck_assert_msg(rc == CLI_NOT_KEPT, "exit %d: %s", rc, err);
    ck_assert_msg(strstr(err, "compiled but 0 stored"), "stderr: %s", err);
    ck_assert_int_eq(count_lines(err), 1);
    free(out), free(err);
    ck_assert_int_eq(n_entries(g_root), 0);
}
END_TEST

/* A precompile that finds a corrupt entry, recompiles and replaces
 * it has succeeded (the cache did not grow, but the compile was stored). */
START_TEST(test_repair_is_success)
{
    char path[1024], kpath[1024];
    write_manifest("user.cu", user_kernel, kpath, sizeof kpath);
    write_manifest("stub.tkm", stub_manifest, path, sizeof path);
    char *out, *err;
    ck_assert_int_eq(
        cli_run(&out, &err, "--precompile", "--manifest", path, "--cache-dir", g_root, NULL),
        CLI_OK);
    free(out), free(err);
    key_set *k = cache_keys(g_root);
    ck_assert_int_gt(k->n, 1);
    int n = k->n;
    /* 4 bytes overwritten in the middle of one entry (the payload). */
    char epath[PATH_MAX];
    snprintf(epath, sizeof epath, "%s/%d/%.2s/%s.tkc", g_root, TK__CACHE_FORMAT, k->keys[0],
             k->keys[0] + 2);
    free(k);
    size_t size = 0;
    char *bytes = tk_test_read_file(epath, &size);
    ck_assert_ptr_nonnull(bytes);
    ck_assert_uint_gt(size, 400);
    memcpy(bytes + size - 100, "XXXX", 4);
    ck_assert_int_eq(tk_test_write_file(epath, bytes, size), 0);
    free(bytes);
    ck_assert_int_eq(cli_run(&out, &err, "--verify", "--cache-dir", g_root, NULL), CLI_FAIL);
    free(out), free(err);

    setenv("TOKITAI_JIT_LOG", "warn", 1); /* the repair's warning must stay on its own line */
    int rc = cli_run(&out, &err, "--precompile", "--manifest", path, "--cache-dir", g_root, NULL);
    unsetenv("TOKITAI_JIT_LOG");
    ck_assert_msg(rc == CLI_OK, "exit %d\nstdout: %s\nstderr: %s", rc, out, err);
    ck_assert_int_eq(kernels_compiled(out), 1);
    ck_assert_msg(!strstr(err, "stored in the cache"), "stderr: %s", err);
    /* Every message on stderr is a whole line of its own. */
    ck_assert_int_eq(count_substr(err, "tokitai-jit: "), count_lines(err));
    ck_assert_msg(err[0] == 0 || err[strlen(err) - 1] == '\n', "stderr: %s", err);
    free(out), free(err);
    ck_assert_int_eq(n_entries(g_root), n);
    ck_assert_int_eq(cli_run(&out, &err, "--verify", "--cache-dir", g_root, NULL), CLI_OK);
    free(out), free(err);
}
END_TEST

/* --------------------------------------------------------- export, import */

static void precompile_stub(const char *root)
{
    char path[1024], kpath[1024];
    write_manifest("user.cu", user_kernel, kpath, sizeof kpath);
    write_manifest("stub.tkm", stub_manifest, path, sizeof path);
    char *out, *err;
    int rc = cli_run(&out, &err, "--precompile", "--manifest", path, "--cache-dir", root, NULL);
    ck_assert_msg(rc == CLI_OK, "exit %d\nstdout: %s\nstderr: %s", rc, out, err);
    free(out), free(err);
}

static void assert_same_entries(const char *a, const char *b)
{
    key_set *x = cache_keys(a), *y = cache_keys(b);
    ck_assert_int_eq(x->n, y->n);
    for (int i = 0; i < x->n; i++) {
        ck_assert_str_eq(x->keys[i], y->keys[i]);
        ck_assert_str_eq(x->desc[i], y->desc[i]);
    }
    free(x), free(y);
}

START_TEST(test_export_import)
{
    precompile_stub(g_root);
    int n = n_entries(g_root);
    ck_assert_int_gt(n, 0);
    char bundle[1024], count[64];
    snprintf(bundle, sizeof bundle, "%s/warm.tkb", g_dir);
    char *out, *err;
    ck_assert_int_eq(cli_run(&out, &err, "--export", bundle, "--cache-dir", g_root, NULL), CLI_OK);
    snprintf(count, sizeof count, "exported %d entries", n);
    ck_assert_msg(strstr(out, count), "%s", out);
    free(out), free(err);

    ck_assert_int_eq(cli_run(&out, &err, "--import", bundle, "--cache-dir", g_root2, NULL), CLI_OK);
    snprintf(count, sizeof count, "imported %d entries", n);
    ck_assert_msg(strstr(out, count), "%s", out);
    free(out), free(err);
    assert_same_entries(g_root, g_root2);
    ck_assert_int_eq(cli_run(&out, &err, "--verify", "--cache-dir", g_root2, NULL), CLI_OK);
    free(out), free(err);

    /* Selection: no entry is for sm_90; every entry is for stub. */
    ck_assert_int_eq(
        cli_run(&out, &err, "--export", bundle, "--arch", "sm_90", "--cache-dir", g_root, NULL),
        CLI_OK);
    ck_assert_ptr_nonnull(strstr(out, "exported 0 entries"));
    free(out), free(err);
    ck_assert_int_eq(
        cli_run(&out, &err, "--export", bundle, "--arch", "stub", "--cache-dir", g_root, NULL),
        CLI_OK);
    snprintf(count, sizeof count, "exported %d entries", n);
    ck_assert_msg(strstr(out, count), "%s", out);
    free(out), free(err);

    /* --ops selects the entries each operator uses: softmax_f16_fwd's two
     * shapes; of the three GEMM entries (one source for the three
     * operators), the forward's two and grad_a's one, none of grad_b. */
    ck_assert_int_eq(cli_run(&out, &err, "--export", bundle, "--ops", "softmax_f16_fwd",
                             "--cache-dir", g_root, NULL),
                     CLI_OK);
    ck_assert_msg(strstr(out, "exported 2 entries"), "%s", out);
    free(out), free(err);
    static const char *const gemms[][2] = {{"gemm_f16_fwd", "exported 2 entries"},
                                           {"gemm_f16_grad_a", "exported 1 entry"},
                                           {"gemm_f16_grad_b", "exported 0 entries"},
                                           {"gemm_f16_fwd,gemm_f16_grad_a", "exported 3 entries"}};
    for (size_t i = 0; i < sizeof gemms / sizeof gemms[0]; i++) {
        ck_assert_int_eq(cli_run(&out, &err, "--export", bundle, "--ops", gemms[i][0], "--arch",
                                 "stub", "--cache-dir", g_root, NULL),
                         CLI_OK);
        ck_assert_msg(strstr(out, gemms[i][1]), "--ops %s: %s", gemms[i][0], out);
        free(out), free(err);
    }
}
END_TEST

static uint64_t le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

START_TEST(test_corrupt_bundle)
{
    precompile_stub(g_root);
    int n = n_entries(g_root);
    ck_assert_int_ge(n, 3);
    char bundle[1024];
    snprintf(bundle, sizeof bundle, "%s/warm.tkb", g_dir);
    char *out, *err;
    ck_assert_int_eq(cli_run(&out, &err, "--export", bundle, "--cache-dir", g_root, NULL), CLI_OK);
    free(out), free(err);

    /* Bundle: 24-byte header, then (u64 length, entry) records. Flip a byte
     * in the middle of the second entry. */
    size_t size = 0;
    unsigned char *b = (unsigned char *)tk_test_read_file(bundle, &size);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_gt(size, 24 + 8);
    uint64_t len1 = le64(b + 24);
    size_t second = 24 + 8 + (size_t)len1;
    ck_assert_uint_lt(second + 8, size);
    uint64_t len2 = le64(b + second);
    b[second + 8 + len2 / 2] ^= 0x5a;
    ck_assert_int_eq(tk_test_write_file(bundle, b, size), 0);
    free(b);

    ck_assert_int_eq(cli_run(&out, &err, "--import", bundle, "--cache-dir", g_root2, NULL),
                     CLI_FAIL);
    ck_assert_int_eq(count_substr(err, "rejected: "), 1);
    char want[64];
    snprintf(want, sizeof want, "imported %d entries", n - 1);
    ck_assert_msg(strstr(out, want), "stdout: %s", out);
    ck_assert_ptr_nonnull(strstr(out, "1 rejected"));
    free(out), free(err);
    ck_assert_int_eq(n_entries(g_root2), n - 1);

    /* Not a bundle at all. */
    snprintf(bundle, sizeof bundle, "%s/junk.tkb", g_dir);
    ck_assert_int_eq(tk_test_write_file(bundle, "junk junk junk junk junk junk", 29), 0);
    ck_assert_int_eq(cli_run(&out, &err, "--import", bundle, "--cache-dir", g_root2, NULL),
                     CLI_FAIL);
    ck_assert_int_eq(count_lines(err), 1);
    ck_assert_ptr_nonnull(strstr(err, "junk.tkb"));
    free(out), free(err);
}
END_TEST

/* "imported N" counts the entries in the cache afterwards: those a small size
 * limit evicted at once are not among them. */
START_TEST(test_import_counts_what_stays)
{
    precompile_stub(g_root);
    int n = n_entries(g_root);
    ck_assert_int_ge(n, 4);
    char bundle[1024], want[64];
    snprintf(bundle, sizeof bundle, "%s/warm.tkb", g_dir);
    char *out, *err;
    ck_assert_int_eq(cli_run(&out, &err, "--export", bundle, "--cache-dir", g_root, NULL), CLI_OK);
    free(out), free(err);
    setenv("TOKITAI_JIT_CACHE_MAX_SIZE", "40K", 1);
    int rc = cli_run(&out, &err, "--import", bundle, "--cache-dir", g_root2, NULL);
    unsetenv("TOKITAI_JIT_CACHE_MAX_SIZE");
    ck_assert_msg(rc == CLI_OK, "exit %d: %s", rc, err);
    int kept = n_entries(g_root2);
    ck_assert_int_lt(kept, n);
    snprintf(want, sizeof want, "imported %d entr", kept);
    ck_assert_msg(strstr(out, want), "kept %d, stdout: %s", kept, out);
    free(out), free(err);
}
END_TEST

/* ------------------------------------------------- real compilers, no GPU */

static const char real_manifest[] = "arch gfx90a sm_90\n"
                                    "gemm_f16_fwd M=64 N=64 K=64\n"
                                    "softmax_f16_fwd rows=4 cols=100\n"
                                    "embedding_f16_fwd V=100 D=64 Q=8\n";

START_TEST(test_real_targets)
{
    int hip = target_available("gfx90a", TK_BACKEND_HIP);
    int cuda = target_available("sm_90", TK_BACKEND_CUDA);
    if (!hip && !cuda)
        return;
    const char *arch = hip && cuda ? "gfx90a,sm_90" : hip ? "gfx90a" : "sm_90";
    char path[1024];
    write_manifest("real.tkm", real_manifest, path, sizeof path);
    char *out, *err;
    int rc = cli_run(&out, &err, "--precompile", "--manifest", path, "--arch", arch, "-j", "2",
                     "--cache-dir", g_root, NULL);
    ck_assert_msg(rc == CLI_OK, "exit %d\nstdout: %s\nstderr: %s", rc, out, err);
    long compiled = kernels_compiled(out);
    ck_assert_msg(compiled >= 3 * (hip + cuda), "summary: %s", out);
    free(out), free(err);

    /* The listing shows every entry, for each target, for each operator. */
    ck_assert_int_eq(cli_run(&out, &err, "--list", "--json", "--cache-dir", g_root, NULL), CLI_OK);
    ck_assert_msg(json_valid(out), "invalid JSON: %s", out);
    ck_assert_int_eq(count_substr(out, "\"key\": "), compiled);
    ck_assert_int_eq(n_entries(g_root), compiled);
    if (hip) {
        ck_assert_ptr_nonnull(strstr(out, "\"arch\": \"gfx90a"));
        ck_assert_ptr_nonnull(strstr(out, "\"backend\": \"hip\""));
    }
    if (cuda) {
        ck_assert_ptr_nonnull(strstr(out, "\"arch\": \"sm_90\""));
        ck_assert_ptr_nonnull(strstr(out, "\"backend\": \"cuda\""));
    }
    free(out), free(err);
    key_set *first = cache_keys(g_root);
    int sources[3] = {0, 0, 0};
    for (int i = 0; i < first->n; i++) {
        sources[0] += strstr(first->desc[i], "gemm") != NULL;
        sources[1] += strstr(first->desc[i], "softmax") != NULL;
        sources[2] += strstr(first->desc[i], "embedding") != NULL;
    }
    ck_assert_msg(sources[0] >= hip + cuda && sources[1] >= hip + cuda && sources[2] >= hip + cuda,
                  "kernels per family: gemm %d softmax %d embedding %d", sources[0], sources[1],
                  sources[2]);

    /* Again: zero compiles, same entries. */
    rc = cli_run(&out, &err, "--precompile", "--manifest", path, "--arch", arch, "--cache-dir",
                 g_root, NULL);
    ck_assert_msg(rc == CLI_OK, "exit %d\nstdout: %s\nstderr: %s", rc, out, err);
    ck_assert_msg(strstr(out, "nothing to compile"), "second run: %s", out);
    free(out), free(err);
    key_set *second = cache_keys(g_root);
    ck_assert_int_eq(first->n, second->n);
    for (int i = 0; i < first->n; i++)
        ck_assert_str_eq(first->keys[i], second->keys[i]);
    free(first), free(second);

    /* Export, import into an empty cache: identical entries. */
    char bundle[1024];
    snprintf(bundle, sizeof bundle, "%s/real.tkb", g_dir);
    ck_assert_int_eq(cli_run(&out, &err, "--export", bundle, "--cache-dir", g_root, NULL), CLI_OK);
    free(out), free(err);
    ck_assert_int_eq(cli_run(&out, &err, "--import", bundle, "--cache-dir", g_root2, NULL), CLI_OK);
    free(out), free(err);
    assert_same_entries(g_root, g_root2);
    if (!hip || !cuda)
        printf("skipped part: only %s was available\n", arch);
}
END_TEST

/* "policy=" on a line overrides the manifest's policy for that line; the
 * same shape under both policies is two jobs. */
START_TEST(test_line_policy)
{
    char path[1024];
    write_manifest("pol.tkm",
                   "arch stub\npolicy exact\nsoftmax_f16_fwd rows=4 cols=100 policy=generic\n"
                   "softmax_f16_fwd rows=4 cols=100\n",
                   path, sizeof path);
    char *out, *err;
    int rc = cli_run(&out, &err, "--precompile", "--dry-run", "--manifest", path, "--cache-dir",
                     g_root, NULL);
    ck_assert_msg(rc == CLI_OK, "exit %d: %s", rc, err);
    ck_assert_ptr_nonnull(strstr(out, "stub softmax_f16_fwd rows=4 cols=100 [generic]"));
    ck_assert_ptr_nonnull(strstr(out, "stub softmax_f16_fwd rows=4 cols=100 [exact]"));
    ck_assert_ptr_nonnull(strstr(out, "2 jobs"));
    free(out), free(err);
    /* --policy overrides both: one job. */
    rc = cli_run(&out, &err, "--precompile", "--dry-run", "--policy", "exact", "--manifest", path,
                 "--cache-dir", g_root, NULL);
    ck_assert_msg(rc == CLI_OK, "exit %d: %s", rc, err);
    ck_assert_ptr_nonnull(strstr(out, "1 jobs"));
    free(out), free(err);
}
END_TEST

/* With a device and no --arch, the device is the target (the stub backend's
 * device stands in for a GPU). */
START_TEST(test_device_target)
{
    setenv("TOKITAI_JIT_BACKEND", "stub", 1);
    char *out, *err;
    int rc = cli_run(&out, &err, "--precompile", "--ops", "softmax_f16_fwd", "--cache-dir", g_root,
                     NULL);
    unsetenv("TOKITAI_JIT_BACKEND");
    ck_assert_msg(rc == CLI_OK, "exit %d: %s", rc, err);
    ck_assert_ptr_nonnull(strstr(out, "targeting the device present: stub (stub)"));
    ck_assert_ptr_nonnull(strstr(out, "for stub into"));
    long compiled = kernels_compiled(out);
    ck_assert_int_gt(compiled, 0);
    ck_assert_int_eq(n_entries(g_root), compiled);
    free(out), free(err);
}
END_TEST

/* The built-in manifest parses and expands for a target. */
START_TEST(test_default_manifest)
{
    char *out, *err;
    int rc = cli_run(&out, &err, "--precompile", "--dry-run", "--arch", "stub", "--cache-dir",
                     g_root, NULL);
    ck_assert_msg(rc == CLI_OK, "exit %d: %s", rc, err);
    long jobs = count_before(out, " jobs (");
    ck_assert_msg(jobs >= 100 && jobs <= 400, "default manifest: %ld jobs", jobs);
    ck_assert_int_eq(count_lines(out), jobs + 1);
    const char *must[] = {"gemm_f16_fwd",
                          "gemm_f16_grad_a",
                          "gemm_f16_grad_b",
                          "softmax_f16_fwd",
                          "softmax_xent_f16_bwd",
                          "embedding_f16_fwd",
                          "embedding_f16_bwd",
                          "N=32000",
                          "N=50304",
                          "M=512 ",
                          "M=16384 ",
                          "V=50304"};
    for (size_t i = 0; i < sizeof must / sizeof must[0]; i++)
        ck_assert_msg(strstr(out, must[i]), "default manifest lacks %s", must[i]);
    free(out), free(err);
    ck_assert_int_eq(n_entries(g_root), 0);
}
END_TEST

/* ------------------------------------------------ hostile inputs, counts */

/* Invalid -D names fail the check: exit 2, nothing compiled. */
START_TEST(test_invalid_define_names)
{
    char kpath[1024];
    write_manifest("user.cu", user_kernel, kpath, sizeof kpath);
    static const char *const bad[] = {"-DA-B=1", "-D1X=2", "-DA.B", "-DA(x=1", "-D(x)=1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char text[512];
        snprintf(text, sizeof text,
                 "arch stub\nsoftmax_f16_fwd rows=4 cols=100\nkernel user.cu user_entry "
                 "-DTILE=4 %s\n",
                 bad[i]);
        expect_rejected(text, 3, bad[i]);
    }
    /* Good names still pass. */
    char path[1024];
    write_manifest("good.tkm", "arch stub\nkernel user.cu user_entry -DTILE=4 -D_X9=1 -DFLAG\n",
                   path, sizeof path);
    char *out, *err;
    int rc = cli_run(&out, &err, "--precompile", "--manifest", path, "--cache-dir", g_root, NULL);
    ck_assert_msg(rc == CLI_OK, "exit %d\n%s\n%s", rc, out, err);
    free(out), free(err);
}
END_TEST

static double tk__now_test(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* tokitai-jit under a time and memory limit: a special file must neither
 * hang it nor grow it without bound. */
static int cli_bounded(char **err, const char *a1, const char *a2, const char *a3, const char *a4,
                       const char *a5)
{
    char *argv[16] = {
        "/usr/bin/prlimit",   "--as=4294967296", "/usr/bin/timeout", "-s", "KILL", "20",
        (char *)tk_test_cli()};
    int n = 7;
    const char *args[] = {a1, a2, a3, a4, a5};
    for (int i = 0; i < 5 && args[i]; i++)
        argv[n++] = (char *)args[i];
    argv[n] = NULL;
    char *o = NULL;
    int rc = tk_test_run(argv, &o, err);
    free(o);
    return rc;
}

START_TEST(test_special_files_refused)
{
#if defined(__SANITIZE_ADDRESS__)
    /* The address-space limit this case runs under leaves ASan no room for
     * its shadow memory; the normal build runs it. */
    fprintf(stderr, "skipped under AddressSanitizer: needs an address-space limit\n");
    return;
#endif
    if (access("/usr/bin/prlimit", X_OK) != 0 || access("/usr/bin/timeout", X_OK) != 0)
        return;
    char fifo[1024], mpath[1024], kfifo[1024];
    snprintf(fifo, sizeof fifo, "%s/fifo", g_dir);
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    char *err;
    double t0 = tk__now_test();
    /* A named pipe with no writer, as --manifest, --import and a kernel file. */
    int rc = cli_bounded(&err, "--precompile", "--manifest", fifo, "--cache-dir", g_root);
    ck_assert_msg(rc == CLI_USAGE && strstr(err, "not a regular file"), "exit %d: %s", rc, err);
    ck_assert_int_eq(count_lines(err), 1);
    free(err);
    rc = cli_bounded(&err, "--import", fifo, "--cache-dir", g_root, NULL);
    ck_assert_msg(rc == CLI_FAIL && strstr(err, "not a regular file"), "exit %d: %s", rc, err);
    free(err);
    snprintf(kfifo, sizeof kfifo, "%s/k.cu", g_dir);
    ck_assert_int_eq(mkfifo(kfifo, 0600), 0);
    write_manifest("fifo.tkm", "arch stub\nkernel k.cu user_entry -DTILE=1\n", mpath, sizeof mpath);
    rc = cli_bounded(&err, "--precompile", "--manifest", mpath, "--cache-dir", g_root);
    ck_assert_msg(rc == CLI_USAGE && strstr(err, "not a regular file"), "exit %d: %s", rc, err);
    free(err);
    /* An endless device. */
    rc = cli_bounded(&err, "--precompile", "--manifest", "/dev/zero", "--cache-dir", g_root);
    ck_assert_msg(rc == CLI_USAGE && strstr(err, "not a regular file"), "exit %d: %s", rc, err);
    free(err);
    rc = cli_bounded(&err, "--import", "/dev/zero", "--cache-dir", g_root, NULL);
    ck_assert_msg(rc == CLI_FAIL && strstr(err, "not a regular file"), "exit %d: %s", rc, err);
    free(err);
    /* --push --bundle (no server needed: the bundle is refused first). */
    const char *const bundles[] = {fifo, "/dev/zero"};
    for (int i = 0; i < 2; i++) {
        rc = cli_bounded(&err, "--push", "--bundle", bundles[i], "--remote", "redis://127.0.0.1:1");
        ck_assert_msg(rc == CLI_FAIL && strstr(err, "not a regular file"),
                      "--push --bundle %s: "
                      "exit %d: %s",
                      bundles[i], rc, err);
        free(err);
    }
    printf("special files (FIFO and /dev/zero as --manifest, --import, --push --bundle, a FIFO as "
           "a kernel file): 7 cases refused in %.2f s in all\n",
           tk__now_test() - t0);
    ck_assert_int_eq(n_entries(g_root), 0);
}
END_TEST

/* Stores are counted exactly: an entry another run wrote within the same
 * second does not stand in for one this run could not store. */
START_TEST(test_store_count_is_exact)
{
    char kpath[1024], m1[1024], m2[1024];
    write_manifest("user.cu", user_kernel, kpath, sizeof kpath);
    /* Two kernels in different shard folders (learnt in a scratch cache). */
    char k1[33] = "", k2[33] = "";
    int t1 = 1, t2 = 0;
    char text[256];
    snprintf(text, sizeof text, "arch stub\nkernel user.cu user_entry -DTILE=%d\n", t1);
    write_manifest("m1.tkm", text, m1, sizeof m1);
    ck_assert_int_eq(
        cli_run(NULL, NULL, "--precompile", "--manifest", m1, "--cache-dir", g_root2, NULL),
        CLI_OK);
    key_set *ks = cache_keys(g_root2);
    ck_assert_int_eq(ks->n, 1);
    memcpy(k1, ks->keys[0], 33);
    free(ks);
    for (int t = 2; t < 40 && !t2; t++) {
        snprintf(text, sizeof text, "arch stub\nkernel user.cu user_entry -DTILE=%d\n", t);
        write_manifest("m2.tkm", text, m2, sizeof m2);
        ck_assert_int_eq(cli_run(NULL, NULL, "--clear", "--cache-dir", g_root2, NULL), CLI_OK);
        ck_assert_int_eq(
            cli_run(NULL, NULL, "--precompile", "--manifest", m2, "--cache-dir", g_root2, NULL),
            CLI_OK);
        ks = cache_keys(g_root2);
        ck_assert_int_eq(ks->n, 1);
        if (memcmp(ks->keys[0], k1, 2) != 0) {
            memcpy(k2, ks->keys[0], 33);
            t2 = t;
        }
        free(ks);
    }
    ck_assert_int_ne(t2, 0);
    /* Start early in a second, so both runs fall within it. */
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    struct timespec pause = {0, 1000000000L - now.tv_nsec + 20000000L};
    if (pause.tv_nsec >= 1000000000L)
        pause.tv_nsec -= 1000000000L;
    nanosleep(&pause, NULL);
    ck_assert_int_eq(
        cli_run(NULL, NULL, "--precompile", "--manifest", m1, "--cache-dir", g_root, NULL), CLI_OK);
    /* kernel 2's shard folder writable by the group: stores there refused. */
    char shard[1024];
    snprintf(shard, sizeof shard, "%s/%d/%.2s", g_root, TK__CACHE_FORMAT, k2);
    ck_assert_int_eq(mkdir(shard, 0700), 0);
    ck_assert_int_eq(chmod(shard, 0770), 0);
    char *out, *err;
    int rc = cli_run(&out, &err, "--precompile", "--manifest", m2, "--cache-dir", g_root, NULL);
    clock_gettime(CLOCK_REALTIME, &now);
    printf("store count: 2nd run ended %.3f s into the second, exit %d\n", now.tv_nsec / 1e9, rc);
    ck_assert_int_eq(kernels_compiled(out), 1);
    ck_assert_msg(rc == CLI_NOT_KEPT, "exit %d\n%s\n%s", rc, out, err);
    ck_assert_msg(strstr(err, "compiled but 0 stored"), "%s", err);
    free(out), free(err);
}
END_TEST

/* ------------------------------------------------- counts and progress */

/* 8 jobs that share kernels: the rows of a softmax are not baked (three
 * jobs per width, one kernel), the embedding backward's four sort kernels
 * serve both widths. */
static const char shared_manifest[] = "arch stub\n"
                                      "softmax_f16_fwd rows=4,8,16 cols=100,200\n"
                                      "embedding_f16_bwd V=100 D=64,128 Q=8\n";

START_TEST(test_counts_jobs_and_kernels)
{
    char path[1024];
    write_manifest("shared.tkm", shared_manifest, path, sizeof path);
    char *out, *err;
    int rc = cli_run(&out, &err, "--precompile", "--manifest", path, "-j", "2", "--cache-dir",
                     g_root, NULL);
    ck_assert_msg(rc == CLI_OK, "exit %d\nstdout: %s\nstderr: %s", rc, out, err);
    /* 2 softmax kernels, 2 gathers, 4 sorts: compiled once each */
    ck_assert_msg(strstr(out, "precompiled 8 jobs for stub"), "%s", out);
    ck_assert_int_eq(kernels_compiled(out), 8);
    ck_assert_int_eq(kernels_cached(out), 0);
    ck_assert_msg(strstr(out, "0 jobs failed"), "%s", out);
    ck_assert_int_eq(n_entries(g_root), 8);
    free(out), free(err);

    /* Warm: nothing compiled, the same 8 kernels found. */
    rc = cli_run(&out, &err, "--precompile", "--manifest", path, "-j", "2", "--cache-dir", g_root,
                 NULL);
    ck_assert_msg(rc == CLI_OK, "exit %d\nstdout: %s\nstderr: %s", rc, out, err);
    ck_assert_msg(strstr(out, "nothing to compile: 8 jobs for stub, 8 kernels, all already cached"),
                  "%s", out);
    ck_assert_int_eq(kernels_cached(out), 8);
    free(out), free(err);

    /* One more width: one kernel compiled, the 8 others cached. */
    char more[256];
    snprintf(more, sizeof more, "%ssoftmax_f16_fwd rows=4 cols=300\n", shared_manifest);
    write_manifest("shared.tkm", more, path, sizeof path);
    rc = cli_run(&out, &err, "--precompile", "--manifest", path, "-j", "2", "--cache-dir", g_root,
                 NULL);
    ck_assert_msg(rc == CLI_OK, "exit %d\nstdout: %s\nstderr: %s", rc, out, err);
    ck_assert_msg(strstr(out, "9 jobs for stub into"), "%s", out);
    ck_assert_msg(strstr(out, ": 1 kernel compiled, 8 already cached, 0 jobs failed"), "%s", out);
    free(out), free(err);

    /* A failing job is counted as a job. */
    write_manifest("bad.cu", "extern \"C\" __global__ void k() {}\n#error no\n", more, sizeof more);
    snprintf(more, sizeof more, "%skernel bad.cu k\n", shared_manifest);
    write_manifest("shared.tkm", more, path, sizeof path);
    rc = cli_run(&out, &err, "--precompile", "--manifest", path, "-j", "2", "--cache-dir", g_root,
                 NULL);
    ck_assert_int_eq(rc, CLI_FAIL);
    ck_assert_msg(strstr(out, ": 0 kernels compiled, 8 already cached, 1 job failed"), "%s", out);
    free(out), free(err);
}
END_TEST

/* Runs the tool with stdout on a terminal 200 columns wide; returns what
 * it wrote there (malloc'd) and sets *rc to its exit status. */
static char *run_on_terminal(char *const argv[], int *rc)
{
    int master = posix_openpt(O_RDWR | O_NOCTTY);
    ck_assert_int_ge(master, 0);
    ck_assert_int_eq(grantpt(master), 0);
    ck_assert_int_eq(unlockpt(master), 0);
    struct winsize ws = {.ws_row = 50, .ws_col = 200};
    const char *name = ptsname(master);
    ck_assert_ptr_nonnull(name);
    char slave_name[256];
    snprintf(slave_name, sizeof slave_name, "%s", name);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        setsid();
        int slave = open(slave_name, O_RDWR);
        int null = open("/dev/null", O_WRONLY);
        if (slave < 0 || null < 0 || ioctl(slave, TIOCSWINSZ, &ws) != 0)
            _exit(100);
        dup2(slave, STDOUT_FILENO);
        dup2(null, STDERR_FILENO);
        close(master);
        execv(argv[0], argv);
        _exit(101);
    }
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    ck_assert_ptr_nonnull(buf);
    for (;;) {
        if (len + 1 == cap) {
            buf = realloc(buf, cap *= 2);
            ck_assert_ptr_nonnull(buf);
        }
        ssize_t r = read(master, buf + len, cap - len - 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) /* EIO once the terminal's last writer has gone */
            break;
        len += (size_t)r;
    }
    buf[len] = 0;
    close(master);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    *rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return buf;
}

/* The progress line after `at`, up to the next redraw or line end. */
static void frame_after(const char *out, const char *at, char *buf, size_t size)
{
    const char *p = strstr(out, at);
    ck_assert_msg(p != NULL, "no '%s' in: %s", at, out);
    p += strlen(at);
    size_t n = strcspn(p, "\r\n");
    snprintf(buf, size, "%.*s", (int)n, p);
}

START_TEST(test_progress_on_a_terminal)
{
    char path[1024];
    write_manifest("shared.tkm", shared_manifest, path, sizeof path);
    char *argv[] = {(char *)tk_test_cli(), "--precompile", "--manifest", path, "-j", "1",
                    "--cache-dir",         g_root,         NULL};
    int rc = -1;
    char *out = run_on_terminal(argv, &rc);
    ck_assert_msg(rc == CLI_OK, "exit %d: %s", rc, out);
    /* One line redrawn in place, no line per job. */
    ck_assert_int_eq(count_substr(out, "] 1/8 jobs"), 1);
    ck_assert_int_eq(count_substr(out, "/8 jobs"), 8);
    ck_assert_int_eq(count_substr(out, "\r\033[K["), 8);
    ck_assert_msg(!strstr(out, "[1/8]"), "%s", out);
    /* Elapsed time and an estimate while jobs are left; the distinct
     * kernels so far. */
    char frame[512];
    frame_after(out, "] 4/8 jobs  ", frame, sizeof frame);
    ck_assert_msg(strspn(frame, "0123456789hms") > 0 && strstr(frame, " ~") &&
                      strstr(frame, " left  ") && strstr(frame, " new, ") &&
                      strstr(frame, " cached kernels  stub "),
                  "frame: %s", frame);
    frame_after(out, "] 8/8 jobs  ", frame, sizeof frame);
    ck_assert_msg(strspn(frame, "0123456789hms") > 0 && !strstr(frame, " left") &&
                      strstr(frame, "  8 new, 0 cached kernels  stub "),
                  "frame: %s", frame);
    ck_assert_msg(strstr(out, "8 kernels compiled, 0 already cached, 0 jobs failed"), "%s", out);
    free(out);
}
END_TEST

/* --fallbacks: every operator's fallback kernels (the stub: 69), once per
 * target whatever the policies; --ops narrows them; a second run compiles
 * nothing; --prune-others removes the entries the run did not use; the
 * manifest line `fallbacks` does what the option does. */
START_TEST(test_fallbacks)
{
    char *out, *err;
    expect_rejected("arch stub\nfallbacks gemm_f16_fwd policy=exact\n", 2, "policy=exact");
    expect_rejected("arch stub\nfallbacks gemm\n", 2, "gemm");
    int rc = cli_run(&out, &err, "--precompile", "--fallbacks", "--arch", "stub", "-j", "2",
                     "--cache-dir", g_root, NULL);
    ck_assert_msg(rc == CLI_OK, "exit %d: %s%s", rc, out, err);
    ck_assert_msg(strstr(out, "precompiling 7 jobs (7 operators' fallbacks x 1 targets)"), "%s",
                  out);
    ck_assert_msg(strstr(out, "stub gemm_f16_fwd fallbacks: compiled 5, found 0"), "%s", out);
    ck_assert_msg(strstr(out, "stub embedding_f16_fwd fallbacks: compiled 36, found 0"), "%s", out);
    ck_assert_msg(strstr(out, "stub softmax_f16_fwd fallbacks: no kernels"), "%s", out);
    ck_assert_int_eq(kernels_compiled(out), 69);
    ck_assert_int_eq(n_entries(g_root), 69);
    free(out), free(err);
    /* again, under two policies: the same 7 jobs, nothing to compile */
    rc = cli_run(&out, &err, "--precompile", "--fallbacks", "--arch", "stub", "--policy", "exact",
                 "--cache-dir", g_root, NULL);
    ck_assert_int_eq(rc, CLI_OK);
    ck_assert_int_eq(kernels_compiled(out), 0);
    ck_assert_int_eq(kernels_cached(out), 69);
    free(out), free(err);
    char path[1024];
    write_manifest("fb.tkm", "arch stub\npolicy stable exact\nfallbacks gemm_f16_grad_b\n", path,
                   sizeof path);
    rc = cli_run(&out, &err, "--precompile", "--dry-run", "--manifest", path, "--cache-dir", g_root,
                 NULL);
    ck_assert_int_eq(rc, CLI_OK);
    ck_assert_msg(strstr(out, "stub gemm_f16_grad_b fallbacks") &&
                      strstr(out, "1 jobs (1 operators' fallbacks, 1 targets)"),
                  "%s", out);
    free(out), free(err);

    /* --ops: those operators' only */
    rc = cli_run(&out, &err, "--precompile", "--fallbacks", "--ops",
                 "gemm_f16_fwd,embedding_f16_bwd", "--arch", "stub", "--cache-dir", g_root2, NULL);
    ck_assert_int_eq(rc, CLI_OK);
    ck_assert_int_eq(kernels_compiled(out), 25);
    free(out), free(err);

    /* --prune-others: a softmax kernel of an earlier run goes, the
     * fallbacks stay; without it nothing is removed */
    write_manifest("sm.tkm", "arch stub\nsoftmax_f16_fwd rows=4 cols=100\n", path, sizeof path);
    ck_assert_int_eq(
        cli_run(NULL, NULL, "--precompile", "--manifest", path, "--cache-dir", g_root, NULL),
        CLI_OK);
    ck_assert_int_eq(n_entries(g_root), 70);
    rc = cli_run(&out, &err, "--precompile", "--fallbacks", "--arch", "stub", "--cache-dir", g_root,
                 NULL);
    ck_assert_int_eq(rc, CLI_OK);
    ck_assert_ptr_null(strstr(out, "removed"));
    ck_assert_int_eq(n_entries(g_root), 70);
    free(out), free(err);
    rc = cli_run(&out, &err, "--precompile", "--fallbacks", "--arch", "stub", "--prune-others",
                 "--cache-dir", g_root, NULL);
    ck_assert_int_eq(rc, CLI_OK);
    ck_assert_msg(strstr(out, "removed 1 entry the run neither compiled nor found from"), "%s",
                  out);
    ck_assert_int_eq(n_entries(g_root), 69);
    free(out), free(err);

    /* usage errors */
    rc = cli_run(&out, &err, "--precompile", "--fallbacks", "--manifest", path, "--cache-dir",
                 g_root, NULL);
    ck_assert_int_eq(rc, CLI_USAGE);
    ck_assert_msg(strstr(err, "--fallbacks and --manifest cannot be combined"), "%s", err);
    free(out), free(err);
    rc = cli_run(&out, &err, "--list", "--fallbacks", "--cache-dir", g_root, NULL);
    ck_assert_int_eq(rc, CLI_USAGE);
    free(out), free(err);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("cli_precompile");
    TCase *tc = tcase_create("precompile");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_manifest_errors);
    tcase_add_test(tc, test_manifest_unknown_target);
    tcase_add_test(tc, test_stub_precompile);
    tcase_add_test(tc, test_stub_failure_reports_log);
    tcase_add_test(tc, test_nothing_stored_fails);
    tcase_add_test(tc, test_repair_is_success);
    tcase_add_test(tc, test_import_counts_what_stays);
    tcase_add_test(tc, test_export_import);
    tcase_add_test(tc, test_corrupt_bundle);
    tcase_add_test(tc, test_real_targets);
    tcase_add_test(tc, test_line_policy);
    tcase_add_test(tc, test_device_target);
    tcase_add_test(tc, test_default_manifest);
    tcase_add_test(tc, test_invalid_define_names);
    tcase_add_test(tc, test_special_files_refused);
    tcase_add_test(tc, test_store_count_is_exact);
    tcase_add_test(tc, test_counts_jobs_and_kernels);
    tcase_add_test(tc, test_progress_on_a_terminal);
    tcase_add_test(tc, test_fallbacks);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tk_test_main(suite());
}
