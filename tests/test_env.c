/*
 * Environment variables (src/common/env_vars.h): for every variable the library
 * reads, a good value changes what the library does and a refused one does
 * exactly what unset does (the default), or is an error where the table says
 * so; each refused value is one warning on a new context's log and a line of
 * `tokitai-jit --info`. The tool's own readers take the same values. The
 * variables read outside the library (the Python package, the bindings'
 * build scripts) are known, never reported, and their readers are run where
 * that is cheap. The table, docs/environment.md and every getenv in src/
 * are held to each other.
 *
 * Each observation runs in a new process: the GEMM operators read their
 * variables once per process, and the environment is the process's.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache/remote.h"
#include "common/env_vars.h"
#include "jit/backend/backend.h"
#include "jit/engine.h"
#include "ops/gemm/gemm_internal.h"
#include "tk_test.h"
#include "tokitai/ops.h"

extern char **environ;

static char *g_dir; /* this test's folder: '@' in the values below */

/* ------------------------------------------------------------ helpers */

static void unset_all(void)
{
    for (;;) {
        char name[256] = "";
        for (char **e = environ; e && *e; e++)
            if (strncmp(*e, "TOKITAI_JIT_", 12) == 0) {
                snprintf(name, sizeof name, "%.*s", (int)strcspn(*e, "="), *e);
                break;
            }
        if (!name[0])
            return;
        unsetenv(name);
    }
}

/* value with each '@' replaced by g_dir; "LONG" is 5000 bytes. */
static char *expand(const char *value)
{
    if (!value)
        return NULL;
    if (strcmp(value, "LONG") == 0) {
        char *s = malloc(5001);
        memset(s, 'k', 5000);
        s[5000] = 0;
        return s;
    }
    size_t n = strlen(value) + 1;
    for (const char *p = value; *p; p++)
        n += *p == '@' ? strlen(g_dir) : 0;
    char *s = malloc(n), *o = s;
    for (const char *p = value; *p; p++) {
        if (*p == '@')
            o += sprintf(o, "%s", g_dir);
        else
            *o++ = *p;
    }
    *o = 0;
    return s;
}

/* A fresh folder under g_dir. */
static char *fresh_dir(void)
{
    char *t = malloc(strlen(g_dir) + 16);
    sprintf(t, "%s/c.XXXXXX", g_dir);
    return mkdtemp(t) ? t : NULL;
}

/* Observations run in a child; out gets what the library did, or "FAIL: ...". */
typedef void (*observe_fn)(const char *name, const char *value, char *out, size_t size);

#define CHILD_OK(expr)                                                                             \
    do {                                                                                           \
        if (!(expr)) {                                                                             \
            snprintf(out, size, "FAIL: %s (line %d)", #expr, __LINE__);                            \
            return;                                                                                \
        }                                                                                          \
    } while (0)

static void set_value(const char *name, const char *value)
{
    if (value)
        setenv(name, value, 1);
    else
        unsetenv(name);
}

/* What fn observes with name set to value (NULL: unset), in a new process
 * whose other TOKITAI_JIT_* variables are unset. */
static char *observe(observe_fn fn, const char *name, const char *value)
{
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(fds[0]);
        unset_all();
        char out[2048] = "";
        fn(name, value, out, sizeof out);
        ssize_t w = write(fds[1], out, strlen(out));
        _exit(w == (ssize_t)strlen(out) ? 0 : 1);
    }
    close(fds[1]);
    char buf[2048];
    size_t n = 0;
    ssize_t r;
    while ((r = read(fds[0], buf + n, sizeof buf - 1 - n)) > 0)
        n += (size_t)r;
    buf[n] = 0;
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s=%s: the observer died", name,
                  value ? value : "(unset)");
    ck_assert_msg(strncmp(buf, "FAIL", 4) != 0, "%s=%s: %s", name, value ? value : "(unset)", buf);
    /* g_dir back to '@', so that expectations can name it */
    char *o = malloc(n + 1), *q = o;
    const size_t dl = strlen(g_dir);
    for (const char *p = buf; *p;) {
        if (strncmp(p, g_dir, dl) == 0) {
            *q++ = '@';
            p += dl;
        } else {
            *q++ = *p++;
        }
    }
    *q = 0;
    return o;
}

static tk_context *stub_ctx(const char *cache, int sync, tk_log_fn log, void *user, char *err,
                            size_t err_size)
{
    tk_config *cfg = NULL;
    tk_context *ctx = NULL;
    if (tk_config_create(&cfg) != TK_OK)
        return NULL;
    tk_config_set_backend(cfg, TK_BACKEND_STUB);
    if (cache)
        tk_config_set_cache_dir(cfg, cache);
    if (sync)
        tk_config_set_build_mode(cfg, TK_BUILD_SYNC);
    if (log)
        tk_config_set_log(cfg, log, user);
    tk_status st = tk_context_create(cfg, &ctx, err, err_size);
    tk_config_destroy(cfg);
    return st == TK_OK ? ctx : NULL;
}

static tk_cache *open_cache(const char *root)
{
    tk_config *cfg = NULL;
    tk_cache *c = NULL;
    if (tk_config_create(&cfg) != TK_OK)
        return NULL;
    if (root)
        tk_config_set_cache_dir(cfg, root);
    tk_status st = tk_cache_open(cfg, &c);
    tk_config_destroy(cfg);
    return st == TK_OK ? c : NULL;
}

/* Kernels compiled by precompiling one softmax on a stub context (-1: failed). */
static int softmax_compiles(const char *cache)
{
    char err[256];
    tk_context *ctx = stub_ctx(cache, 1, NULL, NULL, err, sizeof err);
    if (!ctx)
        return -1;
    const int64_t dims[2] = {4, 100};
    unsigned compiled = 0, cached = 0;
    tk_status st = tk_op_precompile(ctx, TK_OP_SOFTMAX_F16_FWD, dims, 2, &compiled, &cached);
    tk_context_destroy(ctx);
    return st == TK_OK ? (int)compiled : -1;
}

/* The line of a remote description that starts with key (after spaces). */
static void remote_line(const char *root, const char *key, char *out, size_t size)
{
    tk_cache *c = open_cache(root);
    CHILD_OK(c != NULL);
    char desc[2048] = "";
    tk_cache_remote_describe(c, desc, sizeof desc);
    tk_cache_close(c);
    for (char *line = strtok(desc, "\n"); line; line = strtok(NULL, "\n")) {
        while (*line == ' ')
            line++;
        if (strncmp(line, key, strlen(key)) == 0) {
            snprintf(out, size, "%s", line);
            return;
        }
    }
    snprintf(out, size, "no '%s' line", key);
}

/* A GEMM plan of a 4096^3 forward on sm_90 with aligned operands: the
 * TMA kernel and the fast fallback apply. */
static void sm90_plan(gemm_plan *p)
{
    memset(p, 0, sizeof *p);
    tk__gemm_plan_op(TK_OP_GEMM_F16_FWD, 4096, 4096, 4096, p);
    p->lda = p->a_kmajor ? p->K : p->M;
    p->ldb = p->b_kmajor ? p->K : p->N;
    p->ldc = p->N;
    p->sm90 = 1;
    p->sms = 132;
    tk__gemm_plan_alignment(p, NULL, NULL, NULL);
}

/* ------------------------------------------------------- observations */

static void obs_backend(const char *name, const char *value, char *out, size_t size)
{
    char err[512] = "", xdg[4200];
    tk_context *ctx = NULL;
    snprintf(xdg, sizeof xdg, "%s/xdg", g_dir); /* the default cache, not the home's */
    setenv("XDG_CACHE_HOME", xdg, 1);
    set_value(name, value);
    tk_status st = tk_context_create(NULL, &ctx, err, sizeof err);
    if (st == TK_OK) {
        snprintf(out, size, "backend %s", tk_context_backend_name(ctx));
        tk_context_destroy(ctx);
    } else if (strstr(err, name)) {
        snprintf(out, size, "error: %s: %s", tk_status_str(st), err);
    } else {
        snprintf(out, size, "no backend (%s)", tk_status_str(st));
    }
}

static void obs_policy(const char *name, const char *value, char *out, size_t size)
{
    static const char *const names[] = {"exact", "generic", "stable"};
    char err[256];
    set_value(name, value);
    tk_context *ctx = stub_ctx(g_dir, 0, NULL, NULL, err, sizeof err);
    CHILD_OK(ctx != NULL);
    snprintf(out, size, "policy %s", names[tk_context_policy(ctx)]);
    tk_context_destroy(ctx);
}

/* Asynchronous builds serve the first call on the universal kernel. */
static void obs_build(const char *name, const char *value, char *out, size_t size)
{
    char err[256];
    char *cache = fresh_dir();
    set_value(name, value);
    tk_context *ctx = stub_ctx(cache, 0, NULL, NULL, err, sizeof err);
    CHILD_OK(ctx != NULL);
    CHILD_OK(tk_gemm_f16_fwd(ctx, 2000, 2816, 1024, (void *)0x100000, 0, (void *)0x200000, 0,
                             (void *)0x300000, 0, NULL) == TK_OK);
    tk_context_stats s = TK_STRUCT_INIT(tk_context_stats);
    CHILD_OK(tk_context_get_stats(ctx, &s) == TK_OK);
    snprintf(out, size, "fallback calls %llu", (unsigned long long)s.fallback_calls);
    tk_context_destroy(ctx);
}

/* What the context writes to standard error without a log callback. */
static void obs_log(const char *name, const char *value, char *out, size_t size)
{
    char path[4200], err[256];
    snprintf(path, sizeof path, "%s/stderr.XXXXXX", g_dir);
    int fd = mkstemp(path);
    CHILD_OK(fd >= 0);
    set_value(name, value);
    dup2(fd, 2);
    tk_context *ctx = stub_ctx(g_dir, 0, NULL, NULL, err, sizeof err);
    CHILD_OK(ctx != NULL);
    tk_context_destroy(ctx);
    size_t n = 0;
    char *text = tk_test_read_file(path, &n);
    CHILD_OK(text != NULL);
    /* the first line's "tokitai-jit: level" */
    const char *colon = strchr(text, ':');
    colon = colon ? strchr(colon + 1, ':') : NULL;
    snprintf(out, size, "stderr: '%.*s'", colon ? (int)(colon - text) : 0, text);
    free(text);
}

/* Launches of a forward whose class has a split-K tuning record: 2 when
 * the record is followed (GEMM + reduce), 1 on the heuristics. */
static void obs_tune(const char *name, const char *value, char *out, size_t size)
{
    char err[256];
    char *cache = fresh_dir();
    tk_context *ctx = stub_ctx(cache, 1, NULL, NULL, err, sizeof err);
    CHILD_OK(ctx != NULL);
    CHILD_OK(tk__record_put(ctx, "gemm_f16_fwd", "N=2816 K=1024", "M<=112 mma tile=1 split=4\n") ==
             TK_OK);
    tk_context_destroy(ctx);
    set_value(name, value);
    ctx = stub_ctx(cache, 1, NULL, NULL, err, sizeof err);
    CHILD_OK(ctx != NULL);
    void *a = NULL, *b = NULL, *c = NULL;
    CHILD_OK(tk_mem_alloc(ctx, (size_t)100 * 1024 * 2, &a) == TK_OK);
    CHILD_OK(tk_mem_alloc(ctx, (size_t)1024 * 2816 * 2, &b) == TK_OK);
    CHILD_OK(tk_mem_alloc(ctx, (size_t)100 * 2816 * 4, &c) == TK_OK);
    const uint64_t l0 = tk__stub_counters_get()->launches;
    CHILD_OK(tk_gemm_f16_fwd(ctx, 100, 2816, 1024, a, 0, b, 0, c, 0, NULL) == TK_OK);
    snprintf(out, size, "launches %llu",
             (unsigned long long)(tk__stub_counters_get()->launches - l0));
    tk_mem_free(ctx, a), tk_mem_free(ctx, b), tk_mem_free(ctx, c);
    tk_context_destroy(ctx);
}

/* Whether the TMA kernel (the sm_90 fast fallback) is built with TK_PDL. */
static void obs_pdl(const char *name, const char *value, char *out, size_t size)
{
    gemm_plan p, f;
    gemm_desc d;
    sm90_plan(&p);
    set_value(name, value);
    CHILD_OK(tk__gemm_plan_fast(&p, &f) && f.tma);
    tk__gemm_build_desc(&f, TK_POLICY_GENERIC, &d);
    int pdl = 0;
    for (size_t i = 0; i < d.desc.n_defines; i++)
        pdl |= strcmp(d.desc.defines[i].name, "TK_PDL") == 0;
    snprintf(out, size, "%s", pdl ? "TK_PDL baked" : "no TK_PDL");
}

/* What serves an sm_90 call while its own kernel is built. */
static void obs_fallback(const char *name, const char *value, char *out, size_t size)
{
    static const char *const what[] = {"universal kernel", "fast fallback",
                                       "fast fallback, own kernel unused"};
    gemm_plan p, f;
    sm90_plan(&p);
    set_value(name, value);
    snprintf(out, size, "%s", what[tk__gemm_plan_fallback(&p, &f)]);
}

static void obs_cache_dir(const char *name, const char *value, char *out, size_t size)
{
    char xdg[4200];
    snprintf(xdg, sizeof xdg, "%s/xdg", g_dir);
    setenv("XDG_CACHE_HOME", xdg, 1);
    set_value(name, value);
    tk_cache *c = open_cache(NULL);
    CHILD_OK(c != NULL);
    snprintf(out, size, "root %s", tk_cache_root(c));
    tk_cache_close(c);
}

/* @/lower holds the softmax's kernel (filled by the test). */
static void obs_cache_path(const char *name, const char *value, char *out, size_t size)
{
    set_value(name, value);
    snprintf(out, size, "compiled %d", softmax_compiles(fresh_dir()));
}

/* The cache's own limit is 1G (tokitai-jit -M). */
static void obs_max_size(const char *name, const char *value, char *out, size_t size)
{
    char *root = fresh_dir();
    tk_cache *c = open_cache(root);
    CHILD_OK(c != NULL);
    CHILD_OK(tk_cache_set_max_size(c, 1ull << 30) == TK_OK);
    tk_cache_close(c);
    set_value(name, value);
    c = open_cache(root);
    CHILD_OK(c != NULL);
    tk_cache_stats s = TK_STRUCT_INIT(tk_cache_stats);
    CHILD_OK(tk_cache_get_stats(c, &s) == TK_OK);
    snprintf(out, size, "limit %llu", (unsigned long long)s.max_bytes);
    tk_cache_close(c);
}

/* A second context on the same cache compiles again only without a cache. */
static void obs_disable(const char *name, const char *value, char *out, size_t size)
{
    char *cache = fresh_dir();
    set_value(name, value);
    int first = softmax_compiles(cache);
    CHILD_OK(first == 1);
    snprintf(out, size, "compiled again %d", softmax_compiles(cache));
}

static void obs_remote(const char *name, const char *value, char *out, size_t size)
{
    set_value(name, value);
    remote_line(fresh_dir(), "remote:", out, size);
}

static void obs_remote_key(const char *name, const char *value, char *out, size_t size)
{
    char err[512] = "";
    char *cache = fresh_dir();
    setenv("TOKITAI_JIT_REMOTE", "redis://127.0.0.1:1/0", 1);
    set_value(name, value);
    tk_context *ctx = stub_ctx(cache, 0, NULL, NULL, err, sizeof err);
    if (!ctx) {
        snprintf(out, size, "error: %s", err);
        return;
    }
    tk_context_destroy(ctx);
    remote_line(cache, "signing:", out, size);
}

static void obs_remote_ms(const char *name, const char *value, char *out, size_t size)
{
    setenv("TOKITAI_JIT_REMOTE", "redis://127.0.0.1:1/0", 1);
    set_value(name, value);
    remote_line(fresh_dir(), "timeouts:", out, size);
}

/* -------------------------------------------------------- the cases */

typedef struct var_case {
    tk__env_id id;
    observe_fn observe;
    const char *good, *good_seen; /* '@' stands for the test's folder */
    const char *bad;
    int remote; /* needs a build with the remote tier */
} var_case;

#define TIMEOUTS(c, i, l, w)                                                                       \
    "timeouts: connect " #c " ms, I/O " #i " ms; lease " #l " ms, wait " #w " ms"

static const var_case cases[] = {
    {TK__ENV_BACKEND, obs_backend, "stub", "backend stub", "cuad", 0},
    {TK__ENV_POLICY, obs_policy, "exact", "policy exact", "fast", 0},
    {TK__ENV_POLICY, obs_policy, "generic", "policy generic", "Generic", 0},
    {TK__ENV_BUILD, obs_build, "sync", "fallback calls 0", "later", 0},
    {TK__ENV_LOG, obs_log, "info", "stderr: 'tokitai-jit: info'", "loud", 0},
    {TK__ENV_TUNE, obs_tune, "off", "launches 1", "sometimes", 0},
    {TK__ENV_GEMM_PDL, obs_pdl, "0", "no TK_PDL", "false", 0},
    {TK__ENV_GEMM_FALLBACK, obs_fallback, "universal", "universal kernel", "quick", 0},
    {TK__ENV_GEMM_FALLBACK, obs_fallback, "fast", "fast fallback, own kernel unused", "FAST", 0},
    {TK__ENV_CACHE_DIR, obs_cache_dir, "@/mine", "root @/mine", "relative/cache", 0},
    {TK__ENV_CACHE_DIR, obs_cache_dir, "@/mine", "root @/mine", "~/cache", 0},
    {TK__ENV_CACHE_PATH, obs_cache_path, "@/lower", "compiled 0", "@/lower:relative", 0},
    {TK__ENV_CACHE_MAX_SIZE, obs_max_size, "2G", "limit 2147483648", "abc", 0},
    {TK__ENV_CACHE_DISABLE, obs_disable, "1", "compiled again 1", "maybe", 0},
    {TK__ENV_CACHE_DISABLE, obs_disable, "yes", "compiled again 1", "ture", 0},
    {TK__ENV_REMOTE, obs_remote, "redis://127.0.0.1:1/0", "remote: redis://127.0.0.1:1/0",
     "http://127.0.0.1:1", 1},
    {TK__ENV_REMOTE_KEY, obs_remote_key, "s3cret", "signing: HMAC-SHA256 with a shared key", "LONG",
     1},
    {TK__ENV_REMOTE_CONNECT_TIMEOUT_MS, obs_remote_ms, "500", TIMEOUTS(500, 50, 60000, 20000), "5s",
     1},
    {TK__ENV_REMOTE_IO_TIMEOUT_MS, obs_remote_ms, "700", TIMEOUTS(50, 700, 60000, 20000), "-1", 1},
    {TK__ENV_REMOTE_LEASE_MS, obs_remote_ms, "1000", TIMEOUTS(50, 50, 1000, 20000), "0", 1},
    {TK__ENV_REMOTE_WAIT_MS, obs_remote_ms, "3000", TIMEOUTS(50, 50, 60000, 3000), "forever", 1},
};
#define N_CASES (sizeof cases / sizeof cases[0])

static void setup(void)
{
    unset_all();
    g_dir = tk_test_tmpdir("env");
    ck_assert_ptr_nonnull(g_dir);
}

static void teardown(void)
{
    tk_test_rmtree(g_dir);
    free(g_dir);
    g_dir = NULL;
    unset_all();
}

/* Every variable the library reads has a case. */
START_TEST(every_variable_has_a_case)
{
    const tk__env_var *t = tk__env_table();
    for (int i = 0; i < TK__ENV_COUNT; i++) {
        int n = 0;
        for (size_t c = 0; c < N_CASES; c++)
            n += cases[c].id == (tk__env_id)i;
        ck_assert_msg(n > 0 || t[i].when == TK__ENV_AT_OUTSIDE, "%s has no case", t[i].name);
        ck_assert_msg(n == 0 || t[i].when != TK__ENV_AT_OUTSIDE, "%s is not the library's",
                      t[i].name);
    }
}
END_TEST

/* Unset is the default; a good value changes what the library does; a bad
 * one does what unset does, or is an error where the table says so. */
START_TEST(each_reader_takes_good_and_bad)
{
    char *lower = expand("@/lower");
    ck_assert_int_eq(softmax_compiles(lower), 1);
    int ran = 0;
    for (size_t i = 0; i < N_CASES; i++) {
        const var_case *c = &cases[i];
        const tk__env_var *e = &tk__env_table()[c->id];
        if (c->remote && !tk__remote_built())
            continue;
        char *good = expand(c->good), *bad = expand(c->bad);
        char *unset = observe(c->observe, e->name, NULL);
        char *seen_good = observe(c->observe, e->name, good);
        char *seen_bad = observe(c->observe, e->name, bad);
        ck_assert_msg(strcmp(seen_good, c->good_seen) == 0, "%s=%s: '%s', expected '%s'", e->name,
                      c->good, seen_good, c->good_seen);
        ck_assert_msg(strcmp(seen_good, unset) != 0, "%s=%s: the same as unset ('%s')", e->name,
                      c->good, unset);
        if (e->on_bad == TK__ENV_ERROR) {
            ck_assert_msg(strncmp(seen_bad, "error: ", 7) == 0 && strstr(seen_bad, e->name),
                          "%s=%.20s: '%s', expected an error naming it", e->name, c->bad, seen_bad);
            ck_assert_msg(strncmp(unset, "error: ", 7) != 0, "%s unset: %s", e->name, unset);
        } else {
            ck_assert_msg(strcmp(seen_bad, unset) == 0, "%s=%s: '%s', unset: '%s'", e->name, c->bad,
                          seen_bad, unset);
        }
        /* empty is unset */
        char *empty = observe(c->observe, e->name, "");
        ck_assert_msg(strcmp(empty, unset) == 0, "%s empty: '%s', unset: '%s'", e->name, empty,
                      unset);
        free(good), free(bad), free(unset), free(seen_good), free(seen_bad), free(empty);
        ran++;
    }
    printf("env: %d variable cases, each unset, good, bad and empty\n", ran);
    free(lower);
}
END_TEST

/* ---------------------------------------------------- the report */

typedef struct seen {
    int n;
    char name[128];
    char why[256];
    int fatal;
} seen;

static void on_problem(void *user, const char *name, const char *value, const char *why, int fatal)
{
    seen *s = user;
    (void)value;
    s->n++;
    snprintf(s->name, sizeof s->name, "%s", name);
    snprintf(s->why, sizeof s->why, "%s", why);
    s->fatal = fatal;
}

START_TEST(check_reports_each_bad_value)
{
    seen s = {0};
    ck_assert_uint_eq(tk_env_check(on_problem, &s), 0);
    for (size_t i = 0; i < N_CASES; i++) {
        const tk__env_var *e = &tk__env_table()[cases[i].id];
        char *good = expand(cases[i].good), *bad = expand(cases[i].bad);
        setenv(e->name, good, 1);
        memset(&s, 0, sizeof s);
        ck_assert_msg(tk_env_check(on_problem, &s) == 0, "%s=%s refused: %s", e->name, good, s.why);
        setenv(e->name, bad, 1);
        memset(&s, 0, sizeof s);
        ck_assert_msg(tk_env_check(on_problem, &s) == 1, "%s=%.20s not reported", e->name, bad);
        ck_assert_str_eq(s.name, e->name);
        ck_assert_int_eq(s.fatal, e->on_bad == TK__ENV_ERROR);
        ck_assert_int_gt((int)strlen(s.why), 8);
        setenv(e->name, "", 1);
        ck_assert_uint_eq(tk_env_check(NULL, NULL), 0);
        unsetenv(e->name);
        free(good), free(bad);
    }
    /* read outside the library: known, never reported, whatever the value */
    const tk__env_var *t = tk__env_table();
    for (int i = 0; i < TK__ENV_COUNT; i++) {
        if (t[i].when != TK__ENV_AT_OUTSIDE)
            continue;
        setenv(t[i].name, "0", 1);
        ck_assert_msg(tk_env_check(NULL, NULL) == 0, "%s reported", t[i].name);
        unsetenv(t[i].name);
    }
    setenv("TOKITAI_JIT_CACHE_DIRS", "/tmp/x", 1);
    memset(&s, 0, sizeof s);
    ck_assert_uint_eq(tk_env_check(on_problem, &s), 1);
    ck_assert_str_eq(s.name, "TOKITAI_JIT_CACHE_DIRS");
    ck_assert_ptr_nonnull(strstr(s.why, "misspelt"));
    unsetenv("TOKITAI_JIT_CACHE_DIRS");
}
END_TEST

typedef struct log_rec {
    const char *name;
    int warnings, others;
    char text[4096];
} log_rec;

static void on_log(void *user, tk_log_level level, const char *msg)
{
    log_rec *l = user;
    if (level < TK_LOG_WARN)
        return;
    if (strstr(msg, l->name)) {
        l->warnings++;
        strncat(l->text, msg, sizeof l->text - strlen(l->text) - 2);
        strcat(l->text, "\n");
    } else {
        l->others++;
    }
}

/* A bad value: one warning on a new context's log, naming the variable and
 * the default used; or, where the table says error, no context. */
START_TEST(bad_values_warn_on_the_context_log)
{
    for (size_t i = 0; i < N_CASES; i++) {
        const tk__env_var *e = &tk__env_table()[cases[i].id];
        if (cases[i].remote && !tk__remote_built())
            continue;
        char *bad = expand(cases[i].bad);
        if (cases[i].id == TK__ENV_REMOTE_KEY)
            setenv("TOKITAI_JIT_REMOTE", "redis://127.0.0.1:1/0", 1); /* else the key is unread */
        setenv(e->name, bad, 1);
        tk_config *cfg = NULL;
        tk_context *ctx = NULL;
        char err[512] = "";
        log_rec l = {e->name, 0, 0, ""};
        tk_assert_status(tk_config_create(&cfg), TK_OK);
        tk_assert_status(tk_config_set_cache_dir(cfg, g_dir), TK_OK);
        tk_assert_status(tk_config_set_log(cfg, on_log, &l), TK_OK);
        if (cases[i].id != TK__ENV_BACKEND)
            tk_assert_status(tk_config_set_backend(cfg, TK_BACKEND_STUB), TK_OK);
        tk_status st = tk_context_create(cfg, &ctx, err, sizeof err);
        if (e->on_bad == TK__ENV_ERROR) {
            ck_assert_msg(st != TK_OK, "%s=%.20s accepted", e->name, bad);
            ck_assert_ptr_nonnull(strstr(err, e->name));
        } else {
            ck_assert_msg(st == TK_OK, "%s=%s: %s", e->name, bad, err);
            ck_assert_msg(l.warnings == 1 && l.others == 0, "%s=%s: %d warnings, %d others:\n%s",
                          e->name, bad, l.warnings, l.others, l.text);
            char want[512];
            ck_assert_ptr_nonnull(strstr(l.text, "ignored: "));
            snprintf(want, sizeof want, "using the default (%s)", e->fallback);
            ck_assert_msg(strstr(l.text, want) != NULL, "%s", l.text);
            tk_context_destroy(ctx);
        }
        tk_config_destroy(cfg);
        unset_all();
        free(bad);
    }
}
END_TEST

/* TOKITAI_JIT_CACHE_PATH's words: "none" alone, "shipped" among paths. */
START_TEST(cache_path_words)
{
    static const struct {
        const char *value;
        int accepted;
    } t[] = {{"none", 1},         {"shipped", 1},    {"/a:shipped", 1}, {"shipped:/a:/b", 1},
             {"none:/a", 0},      {"/a:none", 0},    {"Shipped", 0},    {"shipped:relative", 0},
             {"/a::shipped:", 1}, {"nonexistent", 0}};
    const tk__env_var *e = &tk__env_table()[TK__ENV_CACHE_PATH];
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        char buf[256];
        const char *why = tk__env_refuse(e, t[i].value, buf, sizeof buf);
        ck_assert_msg((why == NULL) == t[i].accepted, "%s: %s", t[i].value, why ? why : "accepted");
        setenv(e->name, t[i].value, 1);
        ck_assert_uint_eq(tk_env_check(NULL, NULL), t[i].accepted ? 0u : 1u);
    }
    unsetenv(e->name);
}
END_TEST

/* A cache handle's log gets the cache's variables, not the context's. */
START_TEST(cache_handle_logs_the_cache_variables)
{
    setenv("TOKITAI_JIT_CACHE_MAX_SIZE", "abc", 1);
    setenv("TOKITAI_JIT_POLICY", "fast", 1);
    tk_config *cfg = NULL;
    tk_cache *c = NULL;
    log_rec l = {"TOKITAI_JIT_", 0, 0, ""};
    tk_assert_status(tk_config_create(&cfg), TK_OK);
    tk_assert_status(tk_config_set_cache_dir(cfg, g_dir), TK_OK);
    tk_assert_status(tk_config_set_log(cfg, on_log, &l), TK_OK);
    tk_assert_status(tk_cache_open(cfg, &c), TK_OK);
    ck_assert_msg(l.warnings == 1 && strstr(l.text, "TOKITAI_JIT_CACHE_MAX_SIZE=abc ignored") &&
                      strstr(l.text, "-M"),
                  "%s", l.text);
    /* the default: 5G with no limit of the cache's own */
    tk_cache_stats s = TK_STRUCT_INIT(tk_cache_stats);
    tk_assert_status(tk_cache_get_stats(c, &s), TK_OK);
    ck_assert_uint_eq(s.max_bytes, 5ull << 30);
    tk_cache_close(c);
    /* a refused key where a remote would read it: no handle (unsigned
     * values would be trusted otherwise) */
    if (tk__remote_built()) {
        char *k = expand("LONG");
        setenv("TOKITAI_JIT_REMOTE", "redis://127.0.0.1:1/0", 1);
        setenv("TOKITAI_JIT_REMOTE_KEY", k, 1);
        memset(&l, 0, sizeof l);
        l.name = "TOKITAI_JIT_REMOTE_KEY";
        tk_assert_status(tk_cache_open(cfg, &c), TK_INVALID_ARGUMENT);
        ck_assert_int_eq(l.warnings, 1);
        /* the program's own key: the environment's is not read */
        tk_assert_status(tk_config_set_remote_key(cfg, "k", 1), TK_OK);
        tk_assert_status(tk_cache_open(cfg, &c), TK_OK);
        tk_cache_close(c);
        free(k);
    }
    tk_config_destroy(cfg);
}
END_TEST

/* ---------------------------------------------------------- the tool */

static char *cli(int *rc, char **err, ...)
{
    char *argv[16] = {(char *)tk_test_cli()};
    int n = 1;
    va_list ap;
    va_start(ap, err);
    for (char *a; n < 15 && (a = va_arg(ap, char *)) != NULL;)
        argv[n++] = a;
    va_end(ap);
    argv[n] = NULL;
    char *out = NULL;
    *rc = tk_test_run(argv, &out, err);
    return out;
}

START_TEST(info_names_the_problems)
{
    int rc;
    char *err = NULL;
    setenv("TOKITAI_JIT_POLICY", "fast", 1);
    setenv("TOKITAI_JIT_BACKEND", "cuad", 1);
    char *out = cli(&rc, &err, "--info", NULL);
    ck_assert_int_eq(rc, 0);
    ck_assert_msg(strstr(out, "TOKITAI_JIT_POLICY=fast: expected one of: stable exact generic "
                              "(ignored: the default is used: stable, or the program's policy)"),
                  "%s", out);
    ck_assert_msg(strstr(out, "TOKITAI_JIT_BACKEND=cuad: expected one of: auto cuda hip stub (an "
                              "error"),
                  "%s", out);
    free(out), free(err);
    out = cli(&rc, &err, "--info", "--json", NULL);
    ck_assert_int_eq(rc, 0);
    ck_assert_msg(strstr(out, "\"environment_problems\": [{\"name\": \"TOKITAI_JIT_BACKEND\""),
                  "%s", out);
    ck_assert_msg(strstr(out, "\"default\": \"stable, or the program's policy\", \"fatal\": false"),
                  "%s", out);
    free(out), free(err);
    unset_all();
    out = cli(&rc, &err, "--info", NULL);
    ck_assert_int_eq(rc, 0);
    ck_assert_ptr_nonnull(strstr(out, "every TOKITAI_JIT_* variable set has a valid value"));
    ck_assert_ptr_null(strstr(out, "backend stub"));
    free(out), free(err);
    /* the tool's own readers: the stub's row, the read-only tiers */
    char *lower = expand("@/lower");
    setenv("TOKITAI_JIT_BACKEND", "stub", 1);
    setenv("TOKITAI_JIT_CACHE_PATH", lower, 1);
    out = cli(&rc, &err, "--info", NULL);
    ck_assert_int_eq(rc, 0);
    ck_assert_ptr_nonnull(strstr(out, "backend stub: usable"));
    char want[4200];
    snprintf(want, sizeof want, "read-only caches: %s (TOKITAI_JIT_CACHE_PATH)\n", lower);
    ck_assert_msg(strstr(out, want), "%s", out);
    free(out), free(err);
    /* refused: the default, the tier shipped with the library (the tool's,
     * whatever this build ships: "none" when it found none) */
    setenv("TOKITAI_JIT_CACHE_PATH", "relative", 1);
    out = cli(&rc, &err, "--info", NULL);
    ck_assert_msg(strstr(out, " (the default: the shipped tier)\n"), "%s", out);
    ck_assert_ptr_nonnull(strstr(out, "TOKITAI_JIT_CACHE_PATH=relative: 'relative': expected an "
                                      "absolute path"));
    free(out), free(err);
    setenv("TOKITAI_JIT_CACHE_PATH", "none", 1);
    out = cli(&rc, &err, "--info", NULL);
    ck_assert_msg(strstr(out, "read-only caches: none (TOKITAI_JIT_CACHE_PATH)\n") &&
                      strstr(out, "every TOKITAI_JIT_* variable set has a valid value"),
                  "%s", out);
    free(out), free(err);
    free(lower);
}
END_TEST

/* -M's note and the remote commands' timeouts take what the library takes. */
START_TEST(tool_readers)
{
    int rc;
    char *err = NULL;
    char *root = expand("@/m");
    setenv("TOKITAI_JIT_CACHE_MAX_SIZE", "2G", 1);
    char *out = cli(&rc, &err, "-M", "1G", "--cache-dir", root, NULL);
    ck_assert_int_eq(rc, 0);
    ck_assert_msg(strstr(out, "TOKITAI_JIT_CACHE_MAX_SIZE is set and comes first"), "%s", out);
    free(out), free(err);
    setenv("TOKITAI_JIT_CACHE_MAX_SIZE", "abc", 1);
    out = cli(&rc, &err, "-M", "1G", "--cache-dir", root, NULL);
    ck_assert_int_eq(rc, 0);
    ck_assert_msg(!strstr(out, "comes first"), "%s", out);
    free(out), free(err);
    unset_all();
    if (tk__remote_built()) {
        /* nothing listens on port 1: the error says the timeouts used */
        static const struct {
            const char *connect, *want;
        } t[] = {{NULL, "timeouts 2000/10000 ms"},
                 {"500", "timeouts 500/50 ms"},
                 {"5s", "timeouts 2000/10000 ms"}};
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
            set_value("TOKITAI_JIT_REMOTE_CONNECT_TIMEOUT_MS", t[i].connect);
            out = cli(&rc, &err, "--stats", "--remote", "redis://127.0.0.1:1/0", "--cache-dir",
                      root, NULL);
            ck_assert_int_ne(rc, 0);
            ck_assert_msg(strstr(err, t[i].want), "CONNECT_TIMEOUT_MS=%s: %s", t[i].connect, err);
            free(out), free(err);
        }
    }
    free(root);
}
END_TEST

/* -------------------------------------------- read outside the library */

/* Runs argv in dir; the exit status (-1: not run), output in *out. */
static int run_in(const char *dir, char *const argv[], char **out)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/run.out", g_dir);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd < 0 || chdir(dir) != 0)
            _exit(126);
        dup2(fd, 1), dup2(fd, 2);
        execv(argv[0], argv);
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    size_t n = 0;
    *out = tk_test_read_file(path, &n);
    if (!*out)
        *out = strdup("");
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int has_file_ending(const char *dir, const char *suffix)
{
    DIR *d = opendir(dir);
    int found = 0;
    for (struct dirent *e; d && (e = readdir(d)) != NULL;)
        found |= strlen(e->d_name) > strlen(suffix) &&
                 strcmp(e->d_name + strlen(e->d_name) - strlen(suffix), suffix) == 0;
    if (d)
        closedir(d);
    return found;
}

/* The Python package's variables, through their readers. The Rust build
 * script's need a cargo build and CMAKE_ARGS a CMake build of the library:
 * not run here (the source check below holds their reader to the table). */
START_TEST(python_readers)
{
    char *out = NULL;
    char *probe[] = {"/usr/bin/env", "python3", "-c", "import setuptools", NULL};
    if (run_in(g_dir, probe, &out) != 0) {
        printf("python3 with setuptools not found: the Python readers not run\n");
        free(out);
        return;
    }
    free(out);
    const char *src = getenv("TK_TEST_SOURCE_DIR"), *bin = getenv("TK_TEST_BINARY_DIR");
    ck_assert_ptr_nonnull(src);
    ck_assert_ptr_nonnull(bin);
    char pkg[4200], libdir[4200], lib[4300], setup[4200], bl[4200], bt[4200], so[4300];
    snprintf(pkg, sizeof pkg, "%s/python", src);
    snprintf(setup, sizeof setup, "%s/python/setup.py", src);
    snprintf(libdir, sizeof libdir, "%s/..", bin);
    snprintf(lib, sizeof lib, "%s/libtokitai_jit.so.1", libdir);
    setenv("PYTHONPATH", pkg, 1);

    /* TOKITAI_JIT_LIBRARY: that file, or an error naming it (not in a
     * sanitizer build: python3 cannot load a library that needs the ASan
     * runtime first) */
    char *load[] = {"/usr/bin/env", "python3", "-c",
                    "from tokitai_jit import _capi; _capi.lib(); print(_capi.library_path())",
                    NULL};
#ifndef __SANITIZE_ADDRESS__
    setenv("TOKITAI_JIT_LIBRARY", lib, 1);
    ck_assert_msg(run_in(g_dir, load, &out) == 0 && strstr(out, lib), "%s", out);
    free(out);
#endif
    setenv("TOKITAI_JIT_LIBRARY", "/nonexistent/libtokitai_jit.so.1", 1);
    ck_assert_int_ne(run_in(g_dir, load, &out), 0);
    ck_assert_msg(
        strstr(out, "TOKITAI_JIT_LIBRARY: /nonexistent/libtokitai_jit.so.1 (no such file)"), "%s",
        out);
    free(out);
    unsetenv("TOKITAI_JIT_LIBRARY");

    /* TOKITAI_JIT_LIBRARY_DIR: its library bundled, or the build stops naming it */
    snprintf(bl, sizeof bl, "%s/bl", g_dir);
    char *build_py[] = {"/usr/bin/env", "python3",     setup, "-q",
                        "build_py",     "--build-lib", bl,    NULL};
    setenv("TOKITAI_JIT_LIBRARY_DIR", libdir, 1);
    ck_assert_msg(run_in(pkg, build_py, &out) == 0, "%s", out);
    free(out);
    snprintf(so, sizeof so, "%s/tokitai_jit/libtokitai_jit.so.1", bl);
    struct stat st;
    ck_assert_int_eq(stat(so, &st), 0);
    setenv("TOKITAI_JIT_LIBRARY_DIR", g_dir, 1);
    ck_assert_int_ne(run_in(pkg, build_py, &out), 0);
    ck_assert_msg(strstr(out, "TOKITAI_JIT_LIBRARY_DIR=") && strstr(out, "holds no"), "%s", out);
    free(out);
    unsetenv("TOKITAI_JIT_LIBRARY_DIR");

    /* TOKITAI_JIT_CMAKE_ARGS: split as a shell would; unbalanced quotes stop
     * the build before CMake runs */
    setenv("TOKITAI_JIT_CMAKE_ARGS", "-DX='unclosed", 1);
    ck_assert_int_ne(run_in(pkg, build_py, &out), 0);
    ck_assert_msg(strstr(out, "No closing quotation"), "%s", out);
    free(out);
    unsetenv("TOKITAI_JIT_CMAKE_ARGS");

    /* TOKITAI_JIT_NO_EXTENSION: set (to anything), the C extension is not built */
    snprintf(bl, sizeof bl, "%s/be", g_dir);
    snprintf(bt, sizeof bt, "%s/bt", g_dir);
    char *build_ext[] = {"/usr/bin/env", "python3", setup,          "-q", "build_ext",
                         "--build-lib",  bl,        "--build-temp", bt,   NULL};
    snprintf(so, sizeof so, "%s/tokitai_jit", bl);
    run_in(pkg, build_ext, &out);
    free(out);
    const int built = has_file_ending(so, ".so");
    tk_test_rmtree(bl);
    tk_test_rmtree(bt);
    setenv("TOKITAI_JIT_NO_EXTENSION", "1", 1);
    ck_assert_int_eq(run_in(pkg, build_ext, &out), 0);
    free(out);
    ck_assert_int_eq(has_file_ending(so, ".so"), 0);
    if (!built)
        printf("the C extension does not build here: TOKITAI_JIT_NO_EXTENSION's effect not seen\n");
    unsetenv("TOKITAI_JIT_NO_EXTENSION");
    unsetenv("PYTHONPATH");
}
END_TEST

/* ------------------------------------------------- the table and src/ */

static char *read_source(const char *rel)
{
    const char *src = getenv("TK_TEST_SOURCE_DIR");
    ck_assert_ptr_nonnull(src);
    char path[4200];
    int len = snprintf(path, sizeof path, "%s/%s", src, rel);
    ck_assert(len > 0 && (size_t)len < sizeof path);
    size_t n = 0;
    return tk_test_read_file(path, &n);
}

typedef void (*file_fn)(const char *rel, const char *text, void *user);

/* Calls fn for every file under rel whose name ends with one of exts. */
static void walk_sources(const char *rel, const char *const *exts, file_fn fn, void *user)
{
    const char *src = getenv("TK_TEST_SOURCE_DIR");
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", src, rel);
    DIR *d = opendir(path);
    ck_assert_msg(d != NULL, "%s", path);
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.' || strcmp(e->d_name, "target") == 0 ||
            strcmp(e->d_name, "__pycache__") == 0)
            continue;
        char child[4200];
        snprintf(child, sizeof child, "%s/%s", rel, e->d_name);
        char full[4300];
        snprintf(full, sizeof full, "%s/%s", src, child);
        struct stat st;
        if (stat(full, &st) != 0)
            continue;
        if (S_ISDIR(st.st_mode)) {
            walk_sources(child, exts, fn, user);
            continue;
        }
        for (const char *const *x = exts; *x; x++) {
            size_t nl = strlen(e->d_name), xl = strlen(*x);
            if (nl > xl && strcmp(e->d_name + nl - xl, *x) == 0) {
                char *text = read_source(child);
                ck_assert_ptr_nonnull(text);
                fn(child, text, user);
                free(text);
                break;
            }
        }
    }
    closedir(d);
}

/* Every getenv in src/ outside the table names a string that is not a
 * TOKITAI_JIT_* variable. */
static void no_getenv_around(const char *rel, const char *text, void *user)
{
    int *n = user;
    if (strcmp(rel, "src/common/env_vars.h") == 0)
        return;
    for (const char *p = text; (p = strstr(p, "getenv(")) != NULL; p += 7) {
        const char *arg = p + 7;
        int line = 1;
        for (const char *q = text; q < p; q++)
            line += *q == '\n';
        (*n)++;
        if (*arg == '"') {
            ck_assert_msg(strncmp(arg + 1, "TOKITAI_JIT_", 12) != 0,
                          "%s:%d reads a TOKITAI_JIT_* variable bypassing src/common/env_vars.h", rel,
                          line);
        } else {
            /* the vendor-library overrides of the backends (TK__*_LIB) */
            ck_assert_msg(strncmp(arg, "env_override)", 13) == 0,
                          "%s:%d: getenv of a name not written here: read it through "
                          "src/common/env_vars.h if it is a TOKITAI_JIT_* variable",
                          rel, line);
        }
    }
}

/* Every TOKITAI_JIT_* name written in the file is in the table. */
static void names_known(const char *rel, const char *text, void *user)
{
    (void)user;
    for (const char *p = text; (p = strstr(p, "TOKITAI_JIT_")) != NULL; p += 12) {
        size_t n = 12;
        while (p[n] == '_' || (p[n] >= 'A' && p[n] <= 'Z') || (p[n] >= '0' && p[n] <= '9'))
            n++;
        while (n > 12 && p[n - 1] == '_')
            n--;
        if (n == 12)
            continue; /* the prefix itself */
        ck_assert_msg(tk__env_find(p, n) != NULL, "%s names %.*s, which is not in src/common/env_vars.h",
                      rel, (int)n, p);
    }
}

START_TEST(sources_read_through_the_table)
{
    static const char *const c_exts[] = {".c", ".h", NULL};
    static const char *const all_exts[] = {".c", ".h", ".py", ".rs", NULL};
    int n = 0;
    walk_sources("src", c_exts, no_getenv_around, &n);
    ck_assert_int_gt(n, 3);
    walk_sources("src", c_exts, names_known, NULL);
    walk_sources("bindings", all_exts, names_known, NULL);
    walk_sources("python", all_exts, names_known, NULL);

    /* each file the table names as a reader reads the variable */
    const tk__env_var *t = tk__env_table();
    static const char *const ids[] = {
#define ID_NAME(id, p, w, b, a, d, r) "TK__ENV_" #id,
        TK__ENV_VARS(ID_NAME)
#undef ID_NAME
    };
    for (int i = 0; i < TK__ENV_COUNT; i++) {
        char reader[512];
        int files = 0;
        snprintf(reader, sizeof reader, "%s", t[i].reader);
        for (char *tok = strtok(reader, " (),;"); tok; tok = strtok(NULL, " (),;")) {
            size_t l = strlen(tok);
            if (!strchr(tok, '/') || l < 3 ||
                (strcmp(tok + l - 2, ".c") && strcmp(tok + l - 3, ".py") &&
                 strcmp(tok + l - 3, ".rs")))
                continue;
            char *text = read_source(tok);
            ck_assert_msg(text != NULL, "%s: reader %s not found", t[i].name, tok);
            const char *want = t[i].when == TK__ENV_AT_OUTSIDE ? t[i].name : ids[i];
            ck_assert_msg(strstr(text, want), "%s: %s does not read %s", t[i].name, tok, want);
            free(text);
            files++;
        }
        ck_assert_msg(files > 0, "%s: the table names no reader file", t[i].name);
    }
}
END_TEST

/* docs/environment.md has one row per variable of the table, saying what
 * a bad value does as the table does. */
START_TEST(docs_match_the_table)
{
    char *doc = read_source("docs/environment.md");
    ck_assert_ptr_nonnull(doc);
    ck_assert_ptr_null(strstr(doc, "Not yet done"));
    int rows = 0;
    for (char *line = strtok(doc, "\n"); line; line = strtok(NULL, "\n")) {
        if (strncmp(line, "| `TOKITAI_JIT_", 15) != 0)
            continue;
        char *name = line + 3;
        size_t n = strcspn(name, "`");
        const tk__env_var *e = tk__env_find(name, n);
        ck_assert_msg(e != NULL, "docs/environment.md: %.*s is not in the table", (int)n, name);
        /* the fourth column: what a bad value does */
        char *col = line;
        for (int k = 0; k < 3 && col; k++)
            col = strchr(col + 1, '|');
        ck_assert_ptr_nonnull(col);
        col++;
        while (*col == ' ')
            col++;
        const char *want = e->on_bad == TK__ENV_ERROR  ? "error"
                           : e->on_bad == TK__ENV_WARN ? "warning"
                                                       : "its reader's";
        ck_assert_msg(strncmp(col, want, strlen(want)) == 0,
                      "docs/environment.md: %s: bad value '%.30s', the table says %s", e->name, col,
                      want);
        rows++;
    }
    ck_assert_int_eq(rows, TK__ENV_COUNT);
    free(doc);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("env");
    TCase *tc = tcase_create("env");
    tcase_set_timeout(tc, 300);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, every_variable_has_a_case);
    tcase_add_test(tc, each_reader_takes_good_and_bad);
    tcase_add_test(tc, check_reports_each_bad_value);
    tcase_add_test(tc, bad_values_warn_on_the_context_log);
    tcase_add_test(tc, cache_path_words);
    tcase_add_test(tc, cache_handle_logs_the_cache_variables);
    tcase_add_test(tc, info_names_the_problems);
    tcase_add_test(tc, tool_readers);
    tcase_add_test(tc, python_readers);
    tcase_add_test(tc, sources_read_through_the_table);
    tcase_add_test(tc, docs_match_the_table);
    suite_add_tcase(s, tc);
    return tk_test_main(s);
}
