/*
 * The fallback kernels (tk_op_precompile_fallbacks) and the read-only tier
 * the library ships them in (tk_cache_shipped_tier), without a GPU.
 *
 * - The set: on the stub backend, every op's count and a second run that
 *   compiles nothing; with NVRTC (skipped, with a line saying so, where it
 *   is missing), the GEMM forward's set for sm_90 (4 universal kernels, 6
 *   TMA fast fallbacks, 3 at each tile width, the staging copy of
 *   unaligned operands) and for sm_80 (the 4 and the staging copy).
 * - Finding the tier: tk__cache_shipped_from on folder layouts; then the
 *   real thing, from a copy of this program placed in a tree with the tier
 *   beside it (bin/ and share/ of an install, or share/ beside the program
 *   as in a build tree), run as a child: a stub context whose user cache is
 *   empty gets every fallback from the tier with no compile, and a GEMM
 *   call is served by it without a compile on the caller's thread;
 *   TOKITAI_JIT_CACHE_PATH=none and tk_config_set_cache_lower(cfg, "") take
 *   the tier away; a corrupt entry of the tier is a miss (one compile), not
 *   an error, and the tier is left as it was.
 *
 * CTest runs the suites with TOKITAI_JIT_CACHE_PATH=none (tests/CMakeLists.txt);
 * the children here get the variable as each case says.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/cache.h"
#include "jit/backend/backend.h"
#include "tk_test.h"
#include "tokitai/ops.h"

/* The kernels tk_op_precompile_fallbacks compiles on the stub backend
 * (an NVIDIA-like target below sm_90: the universal kernels only; the
 * forward's also the staging copy of unaligned operands). */
static const unsigned stub_counts[TK_OP_COUNT] = {
    [TK_OP_GEMM_F16_FWD] = 5,         [TK_OP_GEMM_F16_GRAD_A] = 4,
    [TK_OP_GEMM_F16_GRAD_B] = 4,      [TK_OP_SOFTMAX_F16_FWD] = 0,
    [TK_OP_SOFTMAX_XENT_F16_BWD] = 0, [TK_OP_EMBEDDING_F16_FWD] = 36,
    [TK_OP_EMBEDDING_F16_BWD] = 20,
};
#define STUB_TOTAL 69u

static char *g_dir;

static void setup(void)
{
    g_dir = tk_test_tmpdir("shipped");
    setenv("TOKITAI_JIT_CACHE_PATH", "none", 1);
    unsetenv("TOKITAI_JIT_CACHE_DIR");
    unsetenv("TOKITAI_JIT_CACHE_DISABLE");
    unsetenv("TOKITAI_JIT_BACKEND");
    unsetenv("TOKITAI_JIT_POLICY");
    unsetenv("TOKITAI_JIT_BUILD");
}

static void teardown(void)
{
    tk_test_rmtree(g_dir);
    free(g_dir);
    g_dir = NULL;
}

/* A context on kind (target NULL: the stub's device) with its user cache
 * at cache; NULL when the target is not available (why printed). */
static tk_context *context_at(tk_backend_kind kind, const char *target, const char *cache)
{
    tk_config *cfg = NULL;
    tk_context *ctx = NULL;
    char why[512] = "";
    tk_assert_status(tk_config_create(&cfg), TK_OK);
    tk_assert_status(tk_config_set_backend(cfg, kind), TK_OK);
    if (target)
        tk_assert_status(tk_config_set_target(cfg, target), TK_OK);
    tk_assert_status(tk_config_set_cache_dir(cfg, cache), TK_OK);
    tk_status st = tk_context_create(cfg, &ctx, why, sizeof why);
    tk_config_destroy(cfg);
    if (st != TK_OK) {
        ck_assert_msg(kind != TK_BACKEND_STUB, "stub context: %s", why);
        printf("skipped: target %s unavailable here (%s: %s)\n", target, tk_status_str(st), why);
        fflush(stdout);
        return NULL;
    }
    return ctx;
}

static char *path_in(const char *dir, const char *leaf)
{
    size_t n = strlen(dir) + strlen(leaf) + 2;
    char *p = malloc(n);
    ck_assert_ptr_nonnull(p);
    snprintf(p, n, "%s/%s", dir, leaf);
    return p;
}

/* ------------------------------------------------------------- the set */

START_TEST(stub_fallback_set)
{
    char *cache = path_in(g_dir, "cache");
    tk_context *ctx = context_at(TK_BACKEND_STUB, NULL, cache);
    tk__stub_counters *sc = tk__stub_counters_get();
    unsigned total = 0;
    for (int op = 0; op < TK_OP_COUNT; op++) {
        unsigned compiled = 99, cached = 99;
        const uint64_t before = sc->compiles;
        tk_assert_status(tk_op_precompile_fallbacks(ctx, (tk_op)op, &compiled, &cached), TK_OK);
        ck_assert_msg(compiled == stub_counts[op] && cached == 0, "%s: compiled %u, cached %u",
                      tk_op_name((tk_op)op), compiled, cached);
        ck_assert_uint_eq(sc->compiles - before, stub_counts[op]);
        total += compiled;
    }
    ck_assert_uint_eq(total, STUB_TOTAL);
    tk_context_destroy(ctx);

    /* a new process's view: everything from the disk, nothing compiled */
    ctx = context_at(TK_BACKEND_STUB, NULL, cache);
    unsigned compiled = 99, cached = 0;
    const uint64_t before = sc->compiles;
    tk_assert_status(tk_op_precompile_fallbacks(ctx, TK_OP_COUNT, &compiled, &cached), TK_OK);
    ck_assert_uint_eq(compiled, 0);
    ck_assert_uint_eq(cached, STUB_TOTAL);
    ck_assert_uint_eq(sc->compiles, before);
    tk_assert_status(tk_op_precompile_fallbacks(ctx, TK_OP_COUNT, NULL, NULL), TK_OK);

    tk_assert_status(tk_op_precompile_fallbacks(ctx, (tk_op)99, NULL, NULL), TK_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(tk_context_last_error(ctx), "unknown op 99"));
    tk_assert_status(tk_op_precompile_fallbacks(NULL, TK_OP_COUNT, NULL, NULL),
                     TK_INVALID_ARGUMENT);
    tk_context_destroy(ctx);
    free(cache);
}
END_TEST

typedef struct kinds {
    int entries, universal, tma128, tma256, pad, baked, other_arch;
    const char *arch;
} kinds;

static int count_kind(void *user, const tk_cache_entry_info *e)
{
    kinds *k = user;
    k->entries++;
    k->other_arch += strcmp(e->arch, k->arch) != 0;
    /* nothing baked: no dimension among the defines */
    k->baked += strstr(e->options, "-DTK_M=") || strstr(e->options, "-DTK_N=") ||
                strstr(e->options, "-DTK_K=");
    k->pad += strstr(e->options, "-DTK_GEMM_PAD=1") != NULL;
    if (strstr(e->options, "-DTK_WGMMA=2")) {
        k->tma128 += strstr(e->options, "-DTK_BN=128 ") != NULL;
        k->tma256 += strstr(e->options, "-DTK_BN=256 ") != NULL;
    } else if (strstr(e->options, "-DTK_BM=64 ") && strstr(e->options, "-DTK_BN=64 ")) {
        k->universal++;
    }
    return 0;
}

/* Lists the cache at dir (as its user cache) to fn. */
static void list_cache(const char *dir, tk_cache_visit_fn fn, void *user)
{
    tk_config *cfg = NULL;
    tk_cache *c = NULL;
    tk_assert_status(tk_config_create(&cfg), TK_OK);
    tk_assert_status(tk_config_set_cache_dir(cfg, dir), TK_OK);
    tk_assert_status(tk_cache_open(cfg, &c), TK_OK);
    tk_assert_status(tk_cache_list(c, fn, user), TK_OK);
    tk_cache_close(c);
    tk_config_destroy(cfg);
}

static kinds kinds_in(const char *cache, const char *arch)
{
    kinds k = {0, 0, 0, 0, 0, 0, 0, arch};
    list_cache(cache, count_kind, &k);
    return k;
}

/* Real code objects: the GEMM forward's fallbacks for sm_90, then sm_80. */
START_TEST(nvrtc_gemm_fallback_set)
{
    char *cache = path_in(g_dir, "sm90");
    tk_context *ctx = context_at(TK_BACKEND_CUDA, "sm_90", cache);
    if (!ctx) {
        free(cache);
        return;
    }
    unsigned compiled = 0, cached = 0;
    tk_assert_status(tk_op_precompile_fallbacks(ctx, TK_OP_GEMM_F16_FWD, &compiled, &cached),
                     TK_OK);
    ck_assert_msg(compiled == 11 && cached == 0, "sm_90: compiled %u, cached %u", compiled, cached);
    tk_context_destroy(ctx);
    kinds k = kinds_in(cache, "sm_90");
    ck_assert_msg(k.entries == 11 && k.universal == 4 && k.tma128 == 3 && k.tma256 == 3 &&
                      k.pad == 1 && k.baked == 0 && k.other_arch == 0,
                  "sm_90: %d entries: %d universal, %d TMA 128 wide, %d TMA 256 wide, %d staging "
                  "copy, %d with a dimension baked, %d of another arch",
                  k.entries, k.universal, k.tma128, k.tma256, k.pad, k.baked, k.other_arch);
    ctx = context_at(TK_BACKEND_CUDA, "sm_90", cache);
    tk_assert_status(tk_op_precompile_fallbacks(ctx, TK_OP_GEMM_F16_FWD, &compiled, &cached),
                     TK_OK);
    ck_assert_msg(compiled == 0 && cached == 11, "sm_90 again: compiled %u, cached %u", compiled,
                  cached);
    tk_context_destroy(ctx);

    /* sm_80: no TMA kernel, so the universal kernels and the staging copy */
    char *cache80 = path_in(g_dir, "sm80");
    ctx = context_at(TK_BACKEND_CUDA, "sm_80", cache80);
    tk_assert_status(tk_op_precompile_fallbacks(ctx, TK_OP_GEMM_F16_FWD, &compiled, &cached),
                     TK_OK);
    ck_assert_msg(compiled == 5 && cached == 0, "sm_80: compiled %u, cached %u", compiled, cached);
    tk_context_destroy(ctx);
    k = kinds_in(cache80, "sm_80");
    ck_assert_msg(k.entries == 5 && k.universal == 4 && k.pad == 1 && k.tma128 + k.tma256 == 0 &&
                      k.other_arch == 0,
                  "sm_80: %d entries, %d universal, %d staging copy, %d TMA", k.entries,
                  k.universal, k.pad, k.tma128 + k.tma256);
    free(cache);
    free(cache80);
}
END_TEST

/* ------------------------------------------------------ finding the tier */

static void make_dirs(const char *path)
{
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        ck_assert_msg(mkdir(tmp, 0700) == 0 || errno == EEXIST, "%s: %s", tmp, strerror(errno));
        *p = '/';
    }
    ck_assert_msg(mkdir(tmp, 0700) == 0 || errno == EEXIST, "%s: %s", tmp, strerror(errno));
}

static char *real_of(const char *path)
{
    char *r = realpath(path, NULL);
    ck_assert_msg(r != NULL, "%s: %s", path, strerror(errno));
    return r;
}

START_TEST(shipped_from_layouts)
{
    char buf[2 * PATH_MAX], want[2 * PATH_MAX + 2];
    char *lib = path_in(g_dir, "inst/lib/libtokitai_jit.so.1");
    char *inst = path_in(g_dir, "inst/share/tokitai-jit/cache");
    char *build = path_in(g_dir, "build/share/tokitai-jit/cache");
    char *blib = path_in(g_dir, "build/libtokitai_jit.so.1");
    char *both = path_in(g_dir, "inst/lib/share/tokitai-jit/cache");

    /* the library's folders exist (they hold it); nothing else yet */
    char *libdir = path_in(g_dir, "inst/lib");
    char *blibdir = path_in(g_dir, "build");
    char *flibdir = path_in(g_dir, "file/lib");
    make_dirs(libdir), make_dirs(blibdir), make_dirs(flibdir);
    free(libdir), free(blibdir), free(flibdir);
    tk_assert_status(tk__cache_shipped_from(lib, buf, sizeof buf), TK_OK);
    ck_assert_str_eq(buf, "");
    /* installed: <lib>/../share */
    make_dirs(inst);
    char *ri = real_of(inst);
    tk_assert_status(tk__cache_shipped_from(lib, buf, sizeof buf), TK_OK);
    ck_assert_str_eq(buf, ri);
    /* build tree: share/ beside the library */
    make_dirs(build);
    char *rb = real_of(build);
    tk_assert_status(tk__cache_shipped_from(blib, buf, sizeof buf), TK_OK);
    ck_assert_str_eq(buf, rb);
    /* both: beside first, then the parent's */
    make_dirs(both);
    char *r2 = real_of(both);
    snprintf(want, sizeof want, "%s:%s", r2, ri);
    tk_assert_status(tk__cache_shipped_from(lib, buf, sizeof buf), TK_OK);
    ck_assert_str_eq(buf, want);
    tk_assert_status(tk__cache_shipped_from(lib, buf, strlen(r2) + 4), TK_OVERFLOW);
    /* a file where the folder would be is not a tier */
    char *flib = path_in(g_dir, "file/lib/x.so");
    char *fshare = path_in(g_dir, "file/share/tokitai-jit");
    make_dirs(fshare);
    char *fcache = path_in(fshare, "cache");
    ck_assert_int_eq(tk_test_write_file(fcache, "x", 1), 0);
    tk_assert_status(tk__cache_shipped_from(flib, buf, sizeof buf), TK_OK);
    ck_assert_str_eq(buf, "");
    /* a bare name has no folder to look in */
    tk_assert_status(tk__cache_shipped_from("libtokitai_jit.so.1", buf, sizeof buf), TK_OK);
    ck_assert_str_eq(buf, "");
    tk_assert_status(tk__cache_shipped_from(NULL, buf, sizeof buf), TK_INVALID_ARGUMENT);
    free(lib), free(inst), free(build), free(blib), free(both), free(ri), free(rb), free(r2);
    free(flib), free(fshare), free(fcache);
}
END_TEST

/* The child: "--shipped-child MODE USER_DIR". MODE: "default" (the
 * environment's setting, else the shipped tier), "api-empty" / "api-none"
 * (tk_config_set_cache_lower "" / "none"), "api-shipped". Prints what it
 * saw, one "name=value" a line; exit 0 unless a call failed. */
static int child_main(const char *mode, const char *user)
{
    const char *lower = strcmp(mode, "api-empty") == 0     ? ""
                        : strcmp(mode, "api-none") == 0    ? "none"
                        : strcmp(mode, "api-shipped") == 0 ? "shipped"
                                                           : NULL;
    char u1[PATH_MAX], u2[PATH_MAX], why[512] = "";
    snprintf(u1, sizeof u1, "%s/precompile", user);
    snprintf(u2, sizeof u2, "%s/call", user);
    tk__stub_counters *sc = tk__stub_counters_get();
    printf("shipped=%s\n", tk_cache_shipped_tier());
    for (int part = 0; part < 2; part++) {
        tk_config *cfg = NULL;
        tk_context *ctx = NULL;
        tk_cache *cache = NULL;
        if (tk_config_create(&cfg) != TK_OK || tk_config_set_backend(cfg, TK_BACKEND_STUB) ||
            tk_config_set_cache_dir(cfg, part == 0 ? u1 : u2) ||
            (lower && tk_config_set_cache_lower(cfg, lower)) ||
            tk_context_create(cfg, &ctx, why, sizeof why) != TK_OK ||
            tk_cache_open(cfg, &cache) != TK_OK) {
            printf("error=%s\n", why);
            return 1;
        }
        tk_config_destroy(cfg);
        const uint64_t c0 = sc->compiles;
        if (part == 0) {
            /* every fallback: from the tier, or compiled */
            unsigned compiled = 0, cached = 0;
            tk_status st = tk_op_precompile_fallbacks(ctx, TK_OP_COUNT, &compiled, &cached);
            printf("lower=%s\nprecompile=%s\ncompiled=%u\ncached=%u\nstub_compiles=%llu\n",
                   tk_cache_lower_tiers(cache), tk_status_str(st), compiled, cached,
                   (unsigned long long)(sc->compiles - c0));
        } else {
            /* a first call: its kernel is built in the background while the
             * universal kernel serves it, read from the tier or compiled on
             * this thread */
            tk_status st = tk_gemm_f16_fwd(ctx, 2000, 2816, 1024, (void *)0x100000, 0,
                                           (void *)0x200000, 0, (void *)0x300000, 0, NULL);
            tk_context_stats s = TK_STRUCT_INIT(tk_context_stats);
            tk_context_wait_builds(ctx, -1);
            tk_context_get_stats(ctx, &s);
            printf("call=%s\nfallback_calls=%llu\nsync_compiles=%llu\n", tk_status_str(st),
                   (unsigned long long)s.fallback_calls, (unsigned long long)s.sync_compiles);
        }
        tk_cache_close(cache);
        tk_context_destroy(ctx);
    }
    return 0;
}

/* A tree holding a copy of this program and the shipped tier beside it
 * (install: bin/ and share/; build: the program and share/ in one folder),
 * the tier filled with the stub's fallbacks. Returns the program's path. */
static char *make_tree(const char *name, int install, char **tier)
{
    char *root = path_in(g_dir, name);
    char *bin = install ? path_in(root, "bin") : strdup(root);
    *tier = path_in(root, "share/tokitai-jit/cache");
    make_dirs(bin);
    make_dirs(*tier);
    tk_context *ctx = context_at(TK_BACKEND_STUB, NULL, *tier);
    unsigned compiled = 0;
    tk_assert_status(tk_op_precompile_fallbacks(ctx, TK_OP_COUNT, &compiled, NULL), TK_OK);
    ck_assert_uint_eq(compiled, STUB_TOTAL);
    tk_context_destroy(ctx);
    size_t n = 0;
    char *self = tk_test_read_file("/proc/self/exe", &n);
    ck_assert_ptr_nonnull(self);
    char *exe = path_in(bin, "test_shipped");
    ck_assert_int_eq(tk_test_write_file(exe, self, n), 0);
    ck_assert_int_eq(chmod(exe, 0700), 0);
    free(self), free(root), free(bin);
    return exe;
}

typedef struct seen {
    char shipped[PATH_MAX], lower[2 * PATH_MAX], precompile[64], call[64];
    long compiled, cached, stub_compiles, fallback_calls, sync_compiles;
} seen;

/* Runs the copy at exe as the child with TOKITAI_JIT_CACHE_PATH as env
 * (NULL: unset) and the mode; parses its report. */
static seen run_child(const char *exe, const char *env, const char *mode)
{
    static int serial;
    char user[PATH_MAX], tag[32];
    snprintf(tag, sizeof tag, "user%d", serial++);
    char *u = path_in(g_dir, tag);
    snprintf(user, sizeof user, "%s", u);
    free(u);
    if (env)
        setenv("TOKITAI_JIT_CACHE_PATH", env, 1);
    else
        unsetenv("TOKITAI_JIT_CACHE_PATH");
    char *argv[] = {(char *)exe, "--shipped-child", (char *)mode, user, NULL};
    char *out = NULL, *err = NULL;
    int rc = tk_test_run(argv, &out, &err);
    setenv("TOKITAI_JIT_CACHE_PATH", "none", 1);
    ck_assert_msg(rc == 0, "child (%s, %s) exit %d:\n%s%s", env ? env : "unset", mode, rc,
                  out ? out : "", err ? err : "");
    seen s;
    memset(&s, 0, sizeof s);
    s.compiled = s.cached = s.stub_compiles = s.fallback_calls = s.sync_compiles = -1;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        char *eq = strchr(line, '=');
        if (!eq)
            continue;
        *eq++ = 0;
        if (strcmp(line, "shipped") == 0)
            snprintf(s.shipped, sizeof s.shipped, "%s", eq);
        else if (strcmp(line, "lower") == 0)
            snprintf(s.lower, sizeof s.lower, "%s", eq);
        else if (strcmp(line, "precompile") == 0)
            snprintf(s.precompile, sizeof s.precompile, "%s", eq);
        else if (strcmp(line, "call") == 0)
            snprintf(s.call, sizeof s.call, "%s", eq);
        else if (strcmp(line, "compiled") == 0)
            s.compiled = atol(eq);
        else if (strcmp(line, "cached") == 0)
            s.cached = atol(eq);
        else if (strcmp(line, "stub_compiles") == 0)
            s.stub_compiles = atol(eq);
        else if (strcmp(line, "fallback_calls") == 0)
            s.fallback_calls = atol(eq);
        else if (strcmp(line, "sync_compiles") == 0)
            s.sync_compiles = atol(eq);
    }
    free(out), free(err);
    ck_assert_str_eq(s.precompile, tk_status_str(TK_OK));
    ck_assert_str_eq(s.call, tk_status_str(TK_OK));
    return s;
}

/* The tier found, used: zero compiles for every fallback and for a call. */
static void expect_from_tier(const seen *s, const char *tier, const char *what)
{
    ck_assert_msg(strcmp(s->shipped, tier) == 0, "%s: shipped '%s', expected '%s'", what,
                  s->shipped, tier);
    ck_assert_msg(strcmp(s->lower, tier) == 0, "%s: lower tiers '%s'", what, s->lower);
    ck_assert_msg(s->compiled == 0 && s->cached == (long)STUB_TOTAL && s->stub_compiles == 0,
                  "%s: compiled %ld, cached %ld, stub compiles %ld", what, s->compiled, s->cached,
                  s->stub_compiles);
    ck_assert_msg(s->fallback_calls == 1 && s->sync_compiles == 0,
                  "%s: fallback calls %ld, compiles on the caller's thread %ld", what,
                  s->fallback_calls, s->sync_compiles);
}

/* No tier: everything compiled, the call's universal kernel on its thread. */
static void expect_no_tier(const seen *s, const char *what)
{
    ck_assert_msg(s->lower[0] == 0, "%s: lower tiers '%s'", what, s->lower);
    ck_assert_msg(s->compiled == (long)STUB_TOTAL && s->cached == 0, "%s: compiled %ld, cached %ld",
                  what, s->compiled, s->cached);
    ck_assert_msg(s->fallback_calls == 1 && s->sync_compiles == 1,
                  "%s: fallback calls %ld, compiles on the caller's thread %ld", what,
                  s->fallback_calls, s->sync_compiles);
}

START_TEST(found_by_default)
{
    char *tier = NULL;
    char *exe = make_tree("inst", 1, &tier);
    char *rt = real_of(tier);
    seen s = run_child(exe, NULL, "default");
    expect_from_tier(&s, rt, "install tree, unset");
    s = run_child(exe, "", "default"); /* empty is unset */
    expect_from_tier(&s, rt, "install tree, empty");
    s = run_child(exe, "relative/path", "default"); /* refused: the default */
    expect_from_tier(&s, rt, "install tree, refused value");
    free(exe), free(tier), free(rt);

    exe = make_tree("build", 0, &tier);
    rt = real_of(tier);
    s = run_child(exe, NULL, "default");
    expect_from_tier(&s, rt, "build tree, unset");
    free(exe), free(tier), free(rt);
}
END_TEST

START_TEST(no_tier_when_told)
{
    char *tier = NULL;
    char *exe = make_tree("inst", 1, &tier);
    char *rt = real_of(tier);
    seen s = run_child(exe, "none", "default");
    ck_assert_str_eq(s.shipped, rt); /* found, not used */
    expect_no_tier(&s, "TOKITAI_JIT_CACHE_PATH=none");
    s = run_child(exe, NULL, "api-empty");
    expect_no_tier(&s, "tk_config_set_cache_lower \"\"");
    s = run_child(exe, NULL, "api-none");
    expect_no_tier(&s, "tk_config_set_cache_lower \"none\"");
    /* the program's setting comes before the environment's */
    s = run_child(exe, "none", "api-shipped");
    expect_from_tier(&s, rt, "tk_config_set_cache_lower \"shipped\", TOKITAI_JIT_CACHE_PATH=none");
    /* another tier first, then the shipped one by name */
    char *other = path_in(g_dir, "other");
    make_dirs(other);
    char *ro = real_of(other);
    char env[3 * PATH_MAX], want[3 * PATH_MAX];
    snprintf(env, sizeof env, "%s:shipped", ro);
    snprintf(want, sizeof want, "%s:%s", ro, rt);
    s = run_child(exe, env, "default");
    ck_assert_str_eq(s.lower, want);
    ck_assert_int_eq(s.compiled, 0);
    /* an explicit list without the word replaces the default */
    s = run_child(exe, ro, "default");
    ck_assert_str_eq(s.lower, ro);
    ck_assert_int_eq(s.compiled, (long)STUB_TOTAL);
    free(exe), free(tier), free(rt), free(other), free(ro);
}
END_TEST

typedef struct first_entry {
    char path[PATH_MAX];
} first_entry;

/* The GEMM forward's universal kernel for aligned operands: the one the
 * child's call needs. */
static int find_fwd_universal(void *user, const tk_cache_entry_info *e)
{
    first_entry *f = user;
    if (strstr(e->options, "-DTK_A_KMAJOR=1 ") && strstr(e->options, "-DTK_B_KMAJOR=0 ") &&
        strstr(e->options, "-DTK_OUT_F16=0 ") && strstr(e->options, "-DTK_ALIGNED=1 ") &&
        strstr(e->options, "-DTK_VEC_OUT=1")) {
        snprintf(f->path, sizeof f->path, "%s", e->path);
        return 1;
    }
    return 0;
}

START_TEST(corrupt_entry_is_a_miss)
{
    char *tier = NULL;
    char *exe = make_tree("inst", 1, &tier);
    char *rt = real_of(tier);
    first_entry f = {""};
    list_cache(tier, find_fwd_universal, &f);
    ck_assert_msg(f.path[0], "no universal forward kernel in %s", tier);

    /* bytes flipped in the middle: the checksum fails */
    size_t n = 0;
    char *bytes = tk_test_read_file(f.path, &n);
    ck_assert_ptr_nonnull(bytes);
    ck_assert_uint_gt(n, 64);
    for (size_t i = n / 2; i < n / 2 + 16; i++)
        bytes[i] ^= 0x5a;
    ck_assert_int_eq(tk_test_write_file(f.path, bytes, n), 0);
    seen s = run_child(exe, NULL, "default");
    ck_assert_str_eq(s.lower, rt);
    ck_assert_msg(s.compiled == 1 && s.cached == (long)STUB_TOTAL - 1,
                  "flipped: compiled %ld, cached %ld", s.compiled, s.cached);
    ck_assert_msg(s.sync_compiles == 1, "flipped: %ld compiles on the caller's thread",
                  s.sync_compiles);
    /* a read-only tier is never repaired or removed */
    size_t n2 = 0;
    char *after = tk_test_read_file(f.path, &n2);
    ck_assert_ptr_nonnull(after);
    ck_assert(n2 == n && memcmp(after, bytes, n) == 0);
    free(after);

    /* cut short */
    ck_assert_int_eq(truncate(f.path, (off_t)(n / 3)), 0);
    s = run_child(exe, NULL, "default");
    ck_assert_msg(s.compiled == 1 && s.cached == (long)STUB_TOTAL - 1,
                  "truncated: compiled %ld, cached %ld", s.compiled, s.cached);
    free(bytes), free(exe), free(tier), free(rt);
}
END_TEST

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--shipped-child") == 0)
        return child_main(argv[2], argv[3]);
    Suite *s = suite_create("shipped");
    TCase *tc = tcase_create("shipped");
    tcase_set_timeout(tc, 300);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, stub_fallback_set);
    tcase_add_test(tc, nvrtc_gemm_fallback_set);
    tcase_add_test(tc, shipped_from_layouts);
    tcase_add_test(tc, found_by_default);
    tcase_add_test(tc, no_tier_when_told);
    tcase_add_test(tc, corrupt_entry_is_a_miss);
    suite_add_tcase(s, tc);
    return tk_test_main(s);
}
