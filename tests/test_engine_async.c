/*
 * Dynamic shapes without a GPU (stub backend): the stable policy compiles per
 * token-count class, never per token count; TK_BUILD_ASYNC serves a call with
 * the universal / generic kernel while the specialised one builds in the
 * background, then swaps; one build per key across threads and processes;
 * the queue limit; destroy with builds pending; the counters; what each
 * policy bakes, per op.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "jit/backend/backend.h"
#include "tk_test.h"
#include "tokitai/ops.h"

#define P(x) ((void *)(uintptr_t)(x))

static char *g_dir;

static void setup(void)
{
    g_dir = tk_test_tmpdir("async");
    ck_assert(g_dir != NULL);
    tk__stub_counters_get()->compile_delay_ms = 0;
}

static void teardown(void)
{
    tk_test_rmtree(g_dir);
    free(g_dir);
    tk__stub_counters_get()->compile_delay_ms = 0;
}

static tk_context *ctx_make(tk_policy policy, tk_build_mode mode, unsigned workers, unsigned queue)
{
    tk_config *cfg = NULL;
    tk_context *ctx = NULL;
    char err[256];
    tk_assert_status(tk_config_create(&cfg), TK_OK);
    tk_assert_status(tk_config_set_backend(cfg, TK_BACKEND_STUB), TK_OK);
    tk_assert_status(tk_config_set_cache_dir(cfg, g_dir), TK_OK);
    tk_assert_status(tk_config_set_policy(cfg, policy), TK_OK);
    tk_assert_status(tk_config_set_build_mode(cfg, mode), TK_OK);
    tk_assert_status(tk_config_set_build_limits(cfg, workers, queue), TK_OK);
    tk_assert_status(tk_context_create(cfg, &ctx, err, sizeof err), TK_OK);
    tk_config_destroy(cfg);
    return ctx;
}

static tk_context_stats stats(tk_context *ctx)
{
    tk_context_stats s = TK_STRUCT_INIT(tk_context_stats);
    tk_assert_status(tk_context_get_stats(ctx, &s), TK_OK);
    return s;
}

/* The MoE up projection forward: M tokens x 2816 x 1024, aligned operands. */
static tk_status up_fwd(tk_context *ctx, int64_t M)
{
    return tk_gemm_f16_fwd(ctx, M, 2816, 1024, P(0x100000), 0, P(0x200000), 0, P(0x300000), 0,
                           NULL);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* First call: nothing usable exists, so the caller compiles the universal
 * kernel (one wait) and the specialised one is queued, and so are, before
 * that compile, the universal kernels of grad_a and grad_b of the same
 * shape; once it is built, the same call runs on it with no fallback and no
 * wait, and the backward's first calls find their universal kernels built
 * (a fallback call each, no wait). */
START_TEST(test_fallback_then_swap)
{
    tk_context *ctx = ctx_make(TK_POLICY_STABLE, TK_BUILD_ASYNC, 0, 0);
    tk_context_stats s = TK_STRUCT_INIT(tk_context_stats);
    tk__stub_counters_get()->compile_delay_ms = 50;

    tk_assert_status(up_fwd(ctx, 2000), TK_OK);
    s = stats(ctx);
    ck_assert_uint_eq(s.fallback_calls, 1);
    ck_assert_uint_eq(s.waits, 1);
    ck_assert_uint_eq(s.sync_compiles, 1);
    ck_assert_uint_eq(s.builds_queued, 3); /* its own kernel; grad_a's and grad_b's universal */
    ck_assert(s.wait_seconds >= 0.04);

    /* While it builds, calls keep running on the fallback, without waiting. */
    tk_assert_status(up_fwd(ctx, 2001), TK_OK);
    s = stats(ctx);
    ck_assert_uint_eq(s.waits, 1);
    ck_assert_uint_ge(s.fallback_calls, 1);

    tk_assert_status(tk_context_wait_builds(ctx, 10000), TK_OK);
    s = stats(ctx);
    ck_assert_uint_eq(s.builds_pending, 0);
    ck_assert_uint_eq(s.builds_done, 3);
    ck_assert_uint_eq(s.builds_failed, 0);
    ck_assert_uint_eq(s.compiles, 4);

    uint64_t fb = s.fallback_calls;
    tk_assert_status(up_fwd(ctx, 2002), TK_OK);
    tk_assert_status(up_fwd(ctx, 1999), TK_OK);
    s = stats(ctx);
    ck_assert_uint_eq(s.fallback_calls, fb);
    ck_assert_uint_eq(s.waits, 1);
    ck_assert_uint_eq(s.compiles, 4);

    /* The backward of that forward: both run on their universal kernel,
     * built in the background, with no compile on this thread. */
    tk_assert_status(tk_gemm_f16_grad_a(ctx, 2000, 2816, 1024, P(0x300000), 0, P(0x200000), 0,
                                        P(0x100000), 0, NULL),
                     TK_OK);
    tk_assert_status(tk_gemm_f16_grad_b(ctx, 2000, 2816, 1024, P(0x100000), 0, P(0x300000), 0,
                                        P(0x200000), 0, NULL),
                     TK_OK);
    s = stats(ctx);
    ck_assert_uint_eq(s.fallback_calls, fb + 2);
    ck_assert_uint_eq(s.waits, 1);
    ck_assert_uint_eq(s.sync_compiles, 1);
    tk_assert_status(tk_context_wait_builds(ctx, 10000), TK_OK);
    s = stats(ctx);
    fb = s.fallback_calls;

    /* A new weight shape reuses the universal kernel at once: no wait. */
    tk_assert_status(tk_gemm_f16_fwd(ctx, 2000, 1024, 2816, P(0x100000), 0, P(0x200000), 0,
                                     P(0x300000), 0, NULL),
                     TK_OK);
    s = stats(ctx);
    ck_assert_uint_eq(s.waits, 1);
    ck_assert_uint_eq(s.fallback_calls, fb + 1);
    tk_assert_status(tk_context_wait_builds(ctx, 10000), TK_OK);

    /* Softmax: no kernel yet, so the caller builds the generic one of the
     * variant (one wait; it serves every cols of its bucket) and the one with
     * cols baked is queued; another cols of the bucket then waits for
     * nothing. */
    s = stats(ctx);
    tk_assert_status(tk_softmax_f16_fwd(ctx, 77, 32000, P(0x100000), 0, P(0x400000), 0, NULL),
                     TK_OK);
    tk_context_stats s2 = stats(ctx);
    ck_assert_uint_eq(s2.waits, s.waits + 1);
    ck_assert_uint_eq(s2.builds_queued, s.builds_queued + 1);
    ck_assert_uint_eq(s2.fallback_calls, s.fallback_calls + 1);
    tk_assert_status(tk_softmax_f16_fwd(ctx, 77, 31000, P(0x100000), 0, P(0x400000), 0, NULL),
                     TK_OK);
    s = stats(ctx);
    ck_assert_uint_eq(s.waits, s2.waits);
    ck_assert_uint_eq(s.fallback_calls, s2.fallback_calls + 1);
    tk_assert_status(tk_context_wait_builds(ctx, 10000), TK_OK);
    tk_context_reset_stats(ctx);
    s = stats(ctx);
    ck_assert_uint_eq(s.waits, 0);
    ck_assert(s.wait_seconds == 0.0);
    tk_context_destroy(ctx);
}
END_TEST

/* The stable policy compiles per token-count class: 3000 random token
 * counts in sync mode compile a handful of kernels, the exact policy one per
 * value. After tk_op_precompile (stable), no count compiles anything. */
START_TEST(test_stable_classes_and_precompile)
{
    tk_context *ctx = ctx_make(TK_POLICY_STABLE, TK_BUILD_SYNC, 0, 0);
    uint64_t r = 88172645463325252ull;
    for (int i = 0; i < 3000; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        tk_assert_status(up_fwd(ctx, 1 + (int64_t)(r % 20000)), TK_OK);
    }
    tk_context_stats s = stats(ctx);
    printf("stable policy: 3000 random token counts in 1..20000 compiled %llu kernels\n",
           (unsigned long long)s.compiles);
    ck_assert_uint_le(s.compiles, 8);
    tk_context_destroy(ctx);

    /* A fresh cache, precompiled for the shape: then nothing compiles. */
    tk_test_rmtree(g_dir);
    free(g_dir);
    g_dir = tk_test_tmpdir("async");
    ctx = ctx_make(TK_POLICY_STABLE, TK_BUILD_ASYNC, 0, 0);
    const int64_t dims[3] = {2048, 2816, 1024};
    unsigned nc = 0, nh = 0;
    for (int op = TK_OP_GEMM_F16_FWD; op <= TK_OP_GEMM_F16_GRAD_B; op++)
        tk_assert_status(tk_op_precompile(ctx, (tk_op)op, dims, 3, &nc, &nh), TK_OK);
    tk_context_destroy(ctx);
    ctx = ctx_make(TK_POLICY_STABLE, TK_BUILD_ASYNC, 0, 0);
    for (int i = 0; i < 2000; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        const int64_t M = 1 + (int64_t)(r % 30000);
        tk_assert_status(up_fwd(ctx, M), TK_OK);
        tk_assert_status(tk_gemm_f16_grad_a(ctx, M, 2816, 1024, P(0x100000), 0, P(0x200000), 0,
                                            P(0x300000), 0, NULL),
                         TK_OK);
        tk_assert_status(tk_gemm_f16_grad_b(ctx, M, 2816, 1024, P(0x100000), 0, P(0x200000), 0,
                                            P(0x300000), 0, NULL),
                         TK_OK);
    }
    s = stats(ctx);
    ck_assert_uint_eq(s.compiles, 0);
    ck_assert_uint_eq(s.waits, 0);
    ck_assert_uint_eq(s.fallback_calls, 0);
    ck_assert_uint_eq(s.builds_queued, 0);
    tk_context_destroy(ctx);

    /* The exact policy: one kernel per token count. */
    ctx = ctx_make(TK_POLICY_EXACT, TK_BUILD_SYNC, 0, 0);
    for (int64_t M = 100; M < 110; M++)
        tk_assert_status(up_fwd(ctx, M), TK_OK);
    s = stats(ctx);
    ck_assert_uint_ge(s.compiles, 10);
    tk_context_destroy(ctx);
}
END_TEST

typedef struct thread_arg {
    tk_context *ctx;
    int64_t M;
    tk_status st;
} thread_arg;

static void *thread_main(void *p)
{
    thread_arg *a = p;
    for (int i = 0; i < 20 && a->st == TK_OK; i++)
        a->st = up_fwd(a->ctx, a->M + i);
    return NULL;
}

/* 16 threads at first use: the universal kernel and the specialised one are
 * compiled once each, and so are the universal kernels of grad_a and grad_b
 * queued with the first. */
START_TEST(test_threads_build_once)
{
    tk_context *ctx = ctx_make(TK_POLICY_STABLE, TK_BUILD_ASYNC, 4, 0);
    pthread_t th[16];
    thread_arg args[16];
    tk__stub_counters_get()->compile_delay_ms = 30;
    for (int i = 0; i < 16; i++) {
        args[i] = (thread_arg){ctx, 2000 + i, TK_OK};
        ck_assert_int_eq(pthread_create(&th[i], NULL, thread_main, &args[i]), 0);
    }
    for (int i = 0; i < 16; i++) {
        pthread_join(th[i], NULL);
        tk_assert_status(args[i].st, TK_OK);
    }
    tk_assert_status(tk_context_wait_builds(ctx, 10000), TK_OK);
    tk_context_stats s = stats(ctx);
    ck_assert_uint_eq(s.compiles, 4);
    ck_assert_uint_eq(s.builds_done, 3);
    ck_assert_uint_eq(s.builds_queued, 3);
    tk_context_destroy(ctx);
}
END_TEST

/* 4 processes on one cache: the four kernels (the forward's universal and
 * specialised kernels, grad_a's and grad_b's universal) are compiled once
 * in all (the cache's per-key lock; a background build finds the other
 * process's entry). Each child reports its compiles in its exit code. */
START_TEST(test_processes_build_once)
{
    pid_t pid[4];
    int total;
    tk__stub_counters_get()->compile_delay_ms = 100;
    for (int i = 0; i < 4; i++) {
        pid[i] = fork();
        ck_assert(pid[i] >= 0);
        if (pid[i] == 0) {
            tk_config *cfg = NULL;
            tk_context *ctx = NULL;
            char err[128];
            if (tk_config_create(&cfg) != TK_OK ||
                tk_config_set_backend(cfg, TK_BACKEND_STUB) != TK_OK ||
                tk_config_set_cache_dir(cfg, g_dir) != TK_OK ||
                tk_context_create(cfg, &ctx, err, sizeof err) != TK_OK)
                _exit(100);
            tk_config_destroy(cfg);
            for (int k = 0; k < 10; k++)
                if (up_fwd(ctx, 2000 + k) != TK_OK)
                    _exit(101);
            if (tk_context_wait_builds(ctx, 20000) != TK_OK)
                _exit(102);
            tk_context_stats s = TK_STRUCT_INIT(tk_context_stats);
            tk_context_get_stats(ctx, &s);
            tk_context_destroy(ctx);
            _exit((int)s.compiles);
        }
    }
    total = tk_test_wait_children(pid, 4);
    ck_assert_int_eq(total, 4);
}
END_TEST

/* A bounded queue: with one slow worker and room for 2, most requests of a
 * burst are dropped (counted), none waited for; every call succeeds. */
START_TEST(test_queue_limit)
{
    tk_context *ctx = ctx_make(TK_POLICY_EXACT, TK_BUILD_ASYNC, 1, 2);
    tk__stub_counters_get()->compile_delay_ms = 200;
    tk_assert_status(up_fwd(ctx, 1000), TK_OK); /* compiles the universal kernel */
    const double t0 = now_s();
    for (int64_t M = 1001; M < 1021; M++)
        tk_assert_status(up_fwd(ctx, M), TK_OK);
    const double elapsed = now_s() - t0;
    tk_context_stats s = stats(ctx);
    ck_assert_uint_le(s.builds_pending, 3);
    ck_assert_uint_le(s.builds_queued, 4);
    ck_assert_uint_ge(s.builds_dropped, 16);
    /* none of the 20 waited for a 200 ms compile (the first call's wait is
     * the one counted); the time bound is loose so that a loaded machine
     * (CI's two cores running other suites) does not fail it: 20 calls
     * that each waited would take 4 s */
    ck_assert_uint_eq(s.waits, 1);
    ck_assert_msg(elapsed < 3.0, "20 calls took %.3f s", elapsed);
    tk_context_destroy(ctx);
}
END_TEST

/* Destroy with builds queued: queued ones are cancelled, the running one
 * finishes; it returns within about one compile, and (under the sanitizer
 * build) leaks nothing. */
START_TEST(test_destroy_with_pending)
{
    tk_context *ctx = ctx_make(TK_POLICY_EXACT, TK_BUILD_ASYNC, 1, 64);
    tk__stub_counters_get()->compile_delay_ms = 150;
    tk_assert_status(up_fwd(ctx, 1000), TK_OK);
    for (int64_t M = 1001; M < 1041; M++)
        tk_assert_status(up_fwd(ctx, M), TK_OK);
    tk_context_stats s = stats(ctx);
    ck_assert_uint_ge(s.builds_pending, 30);
    const double t0 = now_s();
    tk_context_destroy(ctx);
    const double took = now_s() - t0;
    printf("destroy with %llu builds pending took %.3f s (one compile: 0.150 s)\n",
           (unsigned long long)s.builds_pending, took);
    /* about one compile; waiting for the 30 or more queued ones would take
     * 4.5 s or more (loose for a loaded machine) */
    ck_assert_msg(took < 2.0, "destroy took %.3f s", took);
}
END_TEST

/* tk_context_wait_builds with a timeout that passes first. */
START_TEST(test_wait_timeout)
{
    tk_context *ctx = ctx_make(TK_POLICY_STABLE, TK_BUILD_ASYNC, 1, 0);
    tk_assert_status(up_fwd(ctx, 2000), TK_OK);
    tk__stub_counters_get()->compile_delay_ms = 300;
    tk_assert_status(tk_gemm_f16_fwd(ctx, 2000, 1024, 2816, P(0x100000), 0, P(0x200000), 0,
                                     P(0x300000), 0, NULL),
                     TK_OK);
    tk_assert_status(tk_context_wait_builds(ctx, 20), TK_TIMEOUT);
    tk_assert_status(tk_context_wait_builds(ctx, -1), TK_OK);
    tk_assert_status(tk_context_wait_builds(NULL, 0), TK_INVALID_ARGUMENT);
    tk_context_destroy(ctx);
}
END_TEST

/* A specialised kernel that fails to compile in the background is logged and
 * never retried; calls keep the fallback and still succeed. */
static int g_warns;
static void count_warn(void *user, tk_log_level level, const char *msg)
{
    (void)user;
    if (level >= TK_LOG_WARN && strstr(msg, "background build") != NULL)
        __atomic_fetch_add(&g_warns, 1, __ATOMIC_RELAXED);
}

START_TEST(test_background_failure)
{
    tk_config *cfg = NULL;
    tk_context *ctx = NULL;
    char err[256];
    tk_assert_status(tk_config_create(&cfg), TK_OK);
    tk_assert_status(tk_config_set_backend(cfg, TK_BACKEND_STUB), TK_OK);
    tk_assert_status(tk_config_set_cache_dir(cfg, g_dir), TK_OK);
    tk_assert_status(tk_config_set_log(cfg, count_warn, NULL), TK_OK);
    tk_assert_status(tk_context_create(cfg, &ctx, err, sizeof err), TK_OK);
    tk_config_destroy(cfg);
    /* The stub loads only what it compiled; make the specialised kernel's
     * load fail twice (fresh compile included) so that its build fails. */
    tk_assert_status(up_fwd(ctx, 2000), TK_OK); /* universal compiled, best queued */
    tk_assert_status(tk_context_wait_builds(ctx, 10000), TK_OK);
    tk_context_stats s = stats(ctx);
    ck_assert_uint_eq(s.builds_failed, 0);
    /* a second shape: fail its loads */
    tk__stub_counters_get()->fail_next_loads = 2;
    tk_assert_status(tk_gemm_f16_fwd(ctx, 2000, 1024, 2816, P(0x100000), 0, P(0x200000), 0,
                                     P(0x300000), 0, NULL),
                     TK_OK);
    tk_assert_status(tk_context_wait_builds(ctx, 10000), TK_OK);
    s = stats(ctx);
    ck_assert_uint_eq(s.builds_failed, 1);
    ck_assert_int_ge(g_warns, 1);
    const uint64_t queued = s.builds_queued;
    for (int i = 0; i < 5; i++)
        tk_assert_status(tk_gemm_f16_fwd(ctx, 2000 + i, 1024, 2816, P(0x100000), 0, P(0x200000), 0,
                                         P(0x300000), 0, NULL),
                         TK_OK);
    s = stats(ctx);
    ck_assert_uint_eq(s.builds_queued, queued); /* not retried */
    /* the caller's last error is not the background failure's */
    ck_assert_ptr_null(strstr(tk_context_last_error(ctx), "refused"));
    tk_context_destroy(ctx);
}
END_TEST

/* What each policy bakes, per op: the defines of the kernels a precompile
 * stores (stub target), read back from the cache. */
typedef struct baked {
    char opts[64][512];
    int n;
} baked;

static int collect(void *user, const tk_cache_entry_info *info)
{
    baked *b = user;
    if (b->n < 64)
        snprintf(b->opts[b->n++], sizeof b->opts[0], "%s", info->options);
    return 0;
}

static baked *precompile_baked(tk_policy policy, tk_op op, const int64_t *dims, int n_dims)
{
    static baked b;
    tk_config *cfg = NULL;
    tk_cache *cache = NULL;
    tk_test_rmtree(g_dir);
    free(g_dir);
    g_dir = tk_test_tmpdir("async");
    tk_context *ctx = ctx_make(policy, TK_BUILD_SYNC, 0, 0);
    tk_assert_status(tk_op_precompile(ctx, op, dims, n_dims, NULL, NULL), TK_OK);
    tk_context_destroy(ctx);
    memset(&b, 0, sizeof b);
    tk_assert_status(tk_config_create(&cfg), TK_OK);
    tk_assert_status(tk_config_set_cache_dir(cfg, g_dir), TK_OK);
    tk_assert_status(tk_cache_open(cfg, &cache), TK_OK);
    tk_assert_status(tk_cache_list(cache, collect, &b), TK_OK);
    tk_cache_close(cache);
    tk_config_destroy(cfg);
    return &b;
}

/* Counts entries whose options contain each of `has` and none of `lacks`. */
static int count_with(const baked *b, const char *const *has, const char *const *lacks)
{
    int n = 0;
    for (int i = 0; i < b->n; i++) {
        int ok = 1;
        for (int j = 0; has[j]; j++)
            ok &= strstr(b->opts[i], has[j]) != NULL;
        for (int j = 0; lacks[j]; j++)
            ok &= strstr(b->opts[i], lacks[j]) == NULL;
        n += ok;
    }
    return n;
}

START_TEST(test_policy_table)
{
    const int64_t g[3] = {3000, 2816, 1024};
    const char *none[] = {NULL};
    baked *b;
    /* GEMM forward (kernel M = tokens): stable bakes N and K only. */
    b = precompile_baked(TK_POLICY_STABLE, TK_OP_GEMM_F16_FWD, g, 3);
    {
        const char *has[] = {"-DTK_N=2816", "-DTK_K=1024", NULL}, *lacks[] = {"-DTK_M=", NULL};
        ck_assert_int_ge(count_with(b, has, lacks), 1);
        const char *any_m[] = {"-DTK_M=", NULL};
        ck_assert_int_eq(count_with(b, any_m, none), 0);
    }
    /* grad_b (kernel K = tokens): stable bakes kernel M (= K) and N. */
    b = precompile_baked(TK_POLICY_STABLE, TK_OP_GEMM_F16_GRAD_B, g, 3);
    {
        const char *has[] = {"-DTK_M=1024", "-DTK_N=2816", NULL}, *lacks[] = {"-DTK_K=", NULL};
        ck_assert_int_ge(count_with(b, has, lacks), 1);
        const char *any_k[] = {"-DTK_K=", NULL};
        ck_assert_int_eq(count_with(b, any_k, none), 0);
    }
    /* grad_a (kernel N = K, kernel K = N): stable bakes both, never M. */
    b = precompile_baked(TK_POLICY_STABLE, TK_OP_GEMM_F16_GRAD_A, g, 3);
    {
        const char *has[] = {"-DTK_N=1024", "-DTK_K=2816", NULL}, *lacks[] = {"-DTK_M=", NULL};
        ck_assert_int_ge(count_with(b, has, lacks), 1);
    }
    /* exact bakes all three; generic none. */
    b = precompile_baked(TK_POLICY_EXACT, TK_OP_GEMM_F16_FWD, g, 3);
    {
        const char *has[] = {"-DTK_M=3000", "-DTK_N=2816", "-DTK_K=1024", NULL};
        ck_assert_int_eq(count_with(b, has, none), 1);
        ck_assert_int_eq(b->n, 1);
    }
    b = precompile_baked(TK_POLICY_GENERIC, TK_OP_GEMM_F16_FWD, g, 3);
    {
        const char *dims[] = {"-DTK_M=", NULL}, *dn[] = {"-DTK_N=", NULL},
                   *dk[] = {"-DTK_K=", NULL};
        ck_assert_int_eq(
            count_with(b, dims, none) + count_with(b, dn, none) + count_with(b, dk, none), 0);
    }
    /* Softmax: stable and exact bake cols (never rows); generic does not. */
    const int64_t sm[2] = {4096, 32000};
    const char *cols[] = {"-DTK_COLS=32000", NULL}, *rows[] = {"4096", NULL};
    b = precompile_baked(TK_POLICY_STABLE, TK_OP_SOFTMAX_F16_FWD, sm, 2);
    ck_assert_int_eq(count_with(b, cols, rows), b->n);
    b = precompile_baked(TK_POLICY_GENERIC, TK_OP_SOFTMAX_XENT_F16_BWD, sm, 2);
    ck_assert_int_eq(count_with(b, cols, none), 0);
    /* Embedding: stable bakes D (never Q). */
    const int64_t em[3] = {50304, 1024, 16384};
    const char *d[] = {"-DTK_D=1024", NULL}, *q[] = {"16384", NULL};
    b = precompile_baked(TK_POLICY_STABLE, TK_OP_EMBEDDING_F16_FWD, em, 3);
    ck_assert_int_eq(count_with(b, d, q), 1);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("engine_async");
    TCase *tc = tcase_create("async");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_fallback_then_swap);
    tcase_add_test(tc, test_stable_classes_and_precompile);
    tcase_add_test(tc, test_threads_build_once);
    tcase_add_test(tc, test_processes_build_once);
    tcase_add_test(tc, test_queue_limit);
    tcase_add_test(tc, test_destroy_with_pending);
    tcase_add_test(tc, test_wait_timeout);
    tcase_add_test(tc, test_background_failure);
    tcase_add_test(tc, test_policy_table);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tk_test_main(suite());
}
