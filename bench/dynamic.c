/*
 * bench/dynamic: the origin model's MoE training step with random routing,
 * under each specialisation policy and build mode, from a cold and a warm
 * cache, with the same GEMM calls through cuBLAS in the same run.
 *
 * The step: T tokens (default 8192), L layers (default 4), 8 experts, top-2
 * routing drawn at random per layer and per step (seeded), so each expert
 * sees about T/4 tokens and a new count M on every call. Per expert: the up
 * projection (1024 -> 2816) and the down projection (2816 -> 1024), forward,
 * grad_a and grad_b: 6 GEMMs, 48 per layer, 192 per step by default.
 *
 * Each configuration runs in its own process (a fresh context and, except
 * for "warm", an empty cache folder and an empty CUDA_CACHE_PATH, so that
 * NVRTC's own cache of compiled programs starts empty too):
 *
 *   cold       what a default install sees on first use: an empty user cache
 *              over the read-only tier shipped with the library (the GEMM
 *              fallbacks precompiled by the build, found beside the library:
 *              here <build>/share/tokitai-jit/cache, from this program's
 *              place; docs/cache.md), so no call waits for a compile;
 *   bare       nothing at all: an empty user cache and no read-only tier
 *              (tk_config_set_cache_lower ""), the first call of each layout
 *              compiles its universal kernel on the caller's thread;
 *   fallbacks  no read-only tier either, the GEMM's fast fallbacks built
 *              first (below);
 *   warm       the folder given with --warm-cache, filled beforehand by
 *              `tokitai-jit --precompile` of the default manifest.
 *
 * Each configuration's header names the read-only tiers it searched; a
 * table at the end puts the stable/async configurations side by side (step
 * 1, the first 20 steps against the loaded step, compiles on the caller's
 * thread, fallback calls). Per step it prints the wall time of the step (enqueue to
 * stream sync), the compiles on the caller's thread, the calls served by a
 * fallback kernel and the time callers waited for compiles. Then it waits for
 * the background builds, re-runs the last half of the steps (same routing)
 * with every specialised kernel loaded ("loaded"), runs the same steps
 * through cuBLAS, and times each GEMM call of the last step against cuBLAS
 * (events; median of 7 samples of 10 back-to-back runs). One output per step is checked against
 * cuBLAS's.
 *
 * "fallbacks" (stable/async/fallbacks): an empty cache with no read-only tier
 * in which the GEMM's fast fallbacks were built first (on other N and K; not
 * timed). The summary gives
 * the step from which no call fell back and when (no_fallback_from_step,
 * no_fallback_after_s, counted from the first step's start, settling
 * included), and the first 20 steps' mean against the loaded step
 * (first20_ms, first20_over_loaded).
 *
 *   dynamic [--steps N] [--tokens T] [--layers L] [--seed S]
 *           [--warm-cache DIR] [--only POLICY/MODE/CACHE[,...]] [--quiet] [--stub]
 *
 * --stub runs the program on the stub backend (no GPU, no cuBLAS: the
 * reference column is the library itself, the times are host times): it
 * tests the program and the counters, not the speed.
 * Exit 0 when every check passed, 1 otherwise, 77 without a GPU.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "cublas_ref.h"
#include "tokitai/ops.h"
#include "tokitai/tokitai.h"

#define D_MODEL 1024
#define D_FF 2816
#define EXPERTS 8
#define MAX_LAYERS 16
#define MAX_STEPS 200

static uint64_t rng_state;
static uint64_t next_u64(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

typedef struct bench_cfg {
    int steps, tokens, layers;
    uint64_t seed;
    const char *warm_cache;
    int quiet;
    int stub; /* --stub: the stub backend, no cuBLAS (tests the program itself) */
} bench_cfg;

/* Tokens per expert of every layer of one step: top-2 of 8, at random. */
static void route(const bench_cfg *c, int step, int64_t m[MAX_LAYERS][EXPERTS])
{
    rng_state = c->seed * 0x9E3779B97F4A7C15ull + (uint64_t)step * 0xD1B54A32D192ED03ull + 1;
    for (int l = 0; l < c->layers; l++) {
        for (int e = 0; e < EXPERTS; e++)
            m[l][e] = 0;
        for (int t = 0; t < c->tokens; t++) {
            int e1 = (int)(next_u64() % EXPERTS);
            int e2 = (int)(next_u64() % (EXPERTS - 1));
            if (e2 >= e1)
                e2++;
            m[l][e1]++;
            m[l][e2]++;
        }
    }
}

/* Device buffers: token-major activations for 2T rows (the experts' slices
 * laid end to end), one weight pair per expert and layer, gradients. */
typedef struct bufs {
    void *x, *h16, *dy, *dh, *dx, *dwu, *dwd;
    float *h32, *y32;
    void *wu[MAX_LAYERS][EXPERTS], *wd[MAX_LAYERS][EXPERTS];
    float *ref32; /* cuBLAS's output of the checked call */
} bufs;

static void fill(void *d, size_t n_half)
{
    uint16_t *h = malloc(n_half * 2);
    for (size_t i = 0; i < n_half; i++)
        h[i] = tk_f32_to_f16((float)((int)(next_u64() % 2048) - 1024) / 4096.0f);
    CHECK(tk_mem_upload(g_ctx, d, h, n_half * 2));
    free(h);
}

static void bufs_make(const bench_cfg *c, bufs *b)
{
    const size_t rows = (size_t)c->tokens * 2;
    rng_state = 12345;
    b->x = dalloc(rows * D_MODEL * 2);
    b->h16 = dalloc(rows * D_FF * 2);
    b->dy = dalloc(rows * D_MODEL * 2);
    b->dh = dalloc(rows * D_FF * 2);
    b->dx = dalloc(rows * D_MODEL * 2);
    b->h32 = dalloc(rows * D_FF * 4);
    b->y32 = dalloc(rows * D_MODEL * 4);
    b->dwu = dalloc((size_t)D_MODEL * D_FF * 2);
    b->dwd = dalloc((size_t)D_MODEL * D_FF * 2);
    b->ref32 = dalloc((size_t)c->tokens * D_FF * 4);
    fill(b->x, rows * D_MODEL);
    fill(b->h16, rows * D_FF);
    fill(b->dy, rows * D_MODEL);
    fill(b->dh, rows * D_FF);
    for (int l = 0; l < c->layers; l++)
        for (int e = 0; e < EXPERTS; e++) {
            b->wu[l][e] = dalloc((size_t)D_MODEL * D_FF * 2);
            b->wd[l][e] = dalloc((size_t)D_MODEL * D_FF * 2);
            fill(b->wu[l][e], (size_t)D_MODEL * D_FF);
            fill(b->wd[l][e], (size_t)D_MODEL * D_FF);
        }
}

/* One GEMM call of the step, in the library's terms. */
typedef struct call {
    tk_op op;
    int64_t M, N, K;
    const void *x, *y;
    void *out;
} call;

#define MAX_CALLS (MAX_LAYERS * EXPERTS * 6)

static int step_calls(const bench_cfg *c, const bufs *b, int64_t m[MAX_LAYERS][EXPERTS], call *out)
{
    int n = 0;
    for (int l = 0; l < c->layers; l++) {
        size_t row = 0;
        for (int e = 0; e < EXPERTS; e++) {
            const int64_t M = m[l][e];
            if (M == 0)
                continue;
            const char *x = (const char *)b->x + row * D_MODEL * 2;
            const char *h16 = (const char *)b->h16 + row * D_FF * 2;
            const char *dy = (const char *)b->dy + row * D_MODEL * 2;
            char *dh = (char *)b->dh + row * D_FF * 2;
            char *dx = (char *)b->dx + row * D_MODEL * 2;
            float *h32 = b->h32 + row * D_FF, *y32 = b->y32 + row * D_MODEL;
            /* forward: h = x Wu; y = h Wd */
            out[n++] = (call){TK_OP_GEMM_F16_FWD, M, D_FF, D_MODEL, x, b->wu[l][e], h32};
            out[n++] = (call){TK_OP_GEMM_F16_FWD, M, D_MODEL, D_FF, h16, b->wd[l][e], y32};
            /* backward of the down projection: dh = dy Wd^T, dWd = h^T dy */
            out[n++] = (call){TK_OP_GEMM_F16_GRAD_A, M, D_MODEL, D_FF, dy, b->wd[l][e], dh};
            out[n++] = (call){TK_OP_GEMM_F16_GRAD_B, M, D_MODEL, D_FF, h16, dy, b->dwd};
            /* backward of the up projection: dx = dh Wu^T, dWu = x^T dh */
            out[n++] = (call){TK_OP_GEMM_F16_GRAD_A, M, D_FF, D_MODEL, dh, b->wu[l][e], dx};
            out[n++] = (call){TK_OP_GEMM_F16_GRAD_B, M, D_FF, D_MODEL, x, dh, b->dwu};
            row += (size_t)M;
        }
    }
    return n;
}

static tk_status run_ours(const call *k)
{
    switch (k->op) {
    case TK_OP_GEMM_F16_FWD:
        return tk_gemm_f16_fwd(g_ctx, k->M, k->N, k->K, k->x, 0, k->y, 0, k->out, 0, NULL);
    case TK_OP_GEMM_F16_GRAD_A:
        return tk_gemm_f16_grad_a(g_ctx, k->M, k->N, k->K, k->x, 0, k->y, 0, k->out, 0, NULL);
    default:
        return tk_gemm_f16_grad_b(g_ctx, k->M, k->N, k->K, k->x, 0, k->y, 0, k->out, 0, NULL);
    }
}

static int g_stub;

static tk_status run_cublas(const call *k)
{
    if (g_stub)
        return run_ours(k);
    return cublas_ref_gemm(k->op, k->M, k->N, k->K, k->x, k->y, k->out) == 0 ? TK_OK
                                                                             : TK_LAUNCH_FAILED;
}

/* Host time of the last run_step's enqueue loop (without the final sync). */
static double g_enqueue_ms;

static double run_step(const call *calls, int n, int cublas)
{
    const double t0 = bench_now_ms();
    for (int i = 0; i < n; i++)
        CHECK(cublas ? run_cublas(&calls[i]) : run_ours(&calls[i]));
    g_enqueue_ms = bench_now_ms() - t0;
    CHECK(tk_stream_sync(g_ctx, NULL));
    return bench_now_ms() - t0;
}

/* The last layer's first call (its first expert's up projection forward:
 * nothing later in the step writes those rows) against cuBLAS: max
 * |ours - ref| / (1 + |ref|) over the whole output. */
static double check_call(const call *calls, int n, const bufs *b)
{
    int i = n - 1;
    while (i > 0 && !(calls[i].op == TK_OP_GEMM_F16_FWD && calls[i].N == D_FF &&
                      calls[i].out == (void *)b->h32))
        i--;
    call ref = calls[i];
    const size_t ne = (size_t)ref.M * (size_t)ref.N;
    float *ours = malloc(ne * 4), *theirs = malloc(ne * 4);
    double worst = 0;
    if (g_stub) {
        free(ours);
        free(theirs);
        return 0;
    }
    ref.out = b->ref32;
    CHECK(run_cublas(&ref));
    CHECK(tk_stream_sync(g_ctx, NULL));
    CHECK(tk_mem_download(g_ctx, ours, calls[i].out, ne * 4));
    CHECK(tk_mem_download(g_ctx, theirs, b->ref32, ne * 4));
    for (size_t j = 0; j < ne; j++) {
        const double e = fabs((double)ours[j] - (double)theirs[j]) / (1.0 + fabs(theirs[j]));
        if (!(e <= worst))
            worst = e;
    }
    free(ours);
    free(theirs);
    return worst;
}

typedef struct one_call {
    const call *k;
    int cublas;
} one_call;

enum { CALL_BATCH = 10, CALL_SAMPLES = 7 };

static tk_status timed_batch(void *user)
{
    const one_call *o = user;
    for (int i = 0; i < CALL_BATCH; i++) {
        tk_status st = o->cublas ? run_cublas(o->k) : run_ours(o->k);
        if (st != TK_OK)
            return st;
    }
    return TK_OK;
}

/* One call's device time: the median over CALL_SAMPLES event pairs, each
 * around CALL_BATCH back-to-back runs of the call (one run alone is ~20 us,
 * near the events' resolution), after one untimed batch. */
static double call_ms(const call *k, int cublas)
{
    one_call o = {k, cublas};
    float v[CALL_SAMPLES];
    CHECK(timed_batch(&o));
    for (int i = 0; i < CALL_SAMPLES; i++)
        CHECK(tk_time_on_stream(g_ctx, NULL, timed_batch, &o, &v[i]));
    for (int i = 0; i < CALL_SAMPLES; i++)
        for (int j = i + 1; j < CALL_SAMPLES; j++)
            if (v[j] < v[i]) {
                float t = v[i];
                v[i] = v[j];
                v[j] = t;
            }
    return v[CALL_SAMPLES / 2] / CALL_BATCH;
}

static const char *policy_text(tk_policy p)
{
    return p == TK_POLICY_EXACT ? "exact" : p == TK_POLICY_GENERIC ? "generic" : "stable";
}

/* "cold": an empty user cache over the shipped tier (the library's
 * default); "warm": --warm-cache (the default precompile); "fallbacks": an
 * empty cache and no read-only tier, into which the GEMM's fast fallbacks
 * (one per layout and tile width, src/ops/gemm/plan.c tk__gemm_plan_fast)
 * were built first by calls of other N and K than the model's: the model's
 * own kernels are all cold; "bare": an empty cache and no read-only tier. */
enum { CACHE_COLD = 0, CACHE_WARM = 1, CACHE_FALLBACKS = 2, CACHE_BARE = 3 };
static const char *cache_text(int warm)
{
    return warm == CACHE_WARM        ? "warm"
           : warm == CACHE_FALLBACKS ? "fallbacks"
           : warm == CACHE_BARE      ? "bare"
                                     : "cold";
}

/* The child's write end of a pipe to the parent, for its cold-start line. */
static int g_report_fd = -1;

/* Builds the fast fallbacks of the three layouts, both tile widths: a call
 * of each op on a kernel output of 16384 x 2048 (256-wide tiles) and of
 * 256 x 128 (128-wide), then the wait for the background builds. */
static void prime_fallbacks(void)
{
    static const int64_t shapes[6][4] = {
        {0, 16384, 2048, 64}, {0, 256, 128, 64},    {1, 16384, 64, 2048},
        {1, 256, 64, 128},    {2, 64, 2048, 16384}, {2, 64, 128, 256},
    };
    const size_t bytes = (size_t)16384 * 2048 * 4;
    void *x = dalloc(bytes), *y = dalloc(bytes), *z = dalloc(bytes);
    CHECK(tk_mem_set(g_ctx, x, 0, bytes));
    CHECK(tk_mem_set(g_ctx, y, 0, bytes));
    const double t0 = bench_now_ms();
    for (int i = 0; i < 6; i++) {
        const int64_t M = shapes[i][1], N = shapes[i][2], K = shapes[i][3];
        if (shapes[i][0] == 0)
            CHECK(tk_gemm_f16_fwd(g_ctx, M, N, K, x, 0, y, 0, z, 0, NULL));
        else if (shapes[i][0] == 1)
            CHECK(tk_gemm_f16_grad_a(g_ctx, M, N, K, x, 0, y, 0, z, 0, NULL));
        else
            CHECK(tk_gemm_f16_grad_b(g_ctx, M, N, K, x, 0, y, 0, z, 0, NULL));
    }
    CHECK(tk_context_wait_builds(g_ctx, -1));
    CHECK(tk_stream_sync(g_ctx, NULL));
    printf("fallbacks built in %.1f s (not part of the steps)\n", (bench_now_ms() - t0) / 1e3);
    CHECK(tk_mem_free(g_ctx, x));
    CHECK(tk_mem_free(g_ctx, y));
    CHECK(tk_mem_free(g_ctx, z));
}

/* One configuration, in a child process. Prints its step table and one
 * summary line starting with "SUMMARY". Returns the exit code. */
static int run_config(const bench_cfg *c, tk_policy policy, tk_build_mode mode, int warm, int steps)
{
    tk_config *cfg = NULL;
    char why[512] = "", dir[] = "/tmp/tk-dynamic-XXXXXX";
    const char *cache = warm == CACHE_WARM ? c->warm_cache : mkdtemp(dir);
    static int64_t m[MAX_LAYERS][EXPERTS];
    static call calls[MAX_CALLS];
    static double step_ms[MAX_STEPS];
    bufs b;
    int ok = 1;
    double wait_total = 0, wait_after2 = 0, worst_err = 0;
    uint64_t compiles_total = 0, fallback_total = 0, waits_after2 = 0;
    tk_context_stats s0 = TK_STRUCT_INIT(tk_context_stats);
    tk_context_stats s1 = TK_STRUCT_INIT(tk_context_stats);

    if (warm != CACHE_WARM && cache != NULL) {
        /* A fresh node: NVRTC 12.9+ keeps its own cache of compiled programs in
         * the driver's compute cache (~/.nv/ComputeCache), which would make a
         * kernel any earlier run compiled come back in ~30 ms. */
        char nv[64];
        snprintf(nv, sizeof nv, "%s/nv", cache);
        setenv("CUDA_CACHE_PATH", nv, 1);
    }
    if (cache == NULL || tk_config_create(&cfg) != TK_OK ||
        tk_config_set_cache_dir(cfg, cache) != TK_OK ||
        tk_config_set_policy(cfg, policy) != TK_OK ||
        tk_config_set_build_mode(cfg, mode) != TK_OK ||
        tk_config_set_backend(cfg, c->stub ? TK_BACKEND_STUB : TK_BACKEND_CUDA) != TK_OK)
        return 1;
    /* bare and fallbacks: not even the tier shipped with the library */
    if ((warm == CACHE_BARE || warm == CACHE_FALLBACKS) &&
        tk_config_set_cache_lower(cfg, "") != TK_OK)
        return 1;
    char tiers[1024] = "none";
    {
        tk_cache *tc = NULL;
        if (tk_cache_open(cfg, &tc) == TK_OK && *tk_cache_lower_tiers(tc))
            snprintf(tiers, sizeof tiers, "%s", tk_cache_lower_tiers(tc));
        tk_cache_close(tc);
    }
    g_stub = c->stub;
    if (tk_context_create(cfg, &g_ctx, why, sizeof why) != TK_OK) {
        printf("skipped: no GPU device (%s)\n", why);
        return 77;
    }
    tk_config_destroy(cfg);
    if (!c->stub && !cublas_ref_open()) {
        printf("cuBLAS not loadable: no reference\n");
        return 1;
    }
    bufs_make(c, &b);
    CHECK(tk_stream_sync(g_ctx, NULL));
    if (warm == CACHE_FALLBACKS)
        prime_fallbacks();

    const char *mode_text = mode == TK_BUILD_ASYNC ? "async" : "sync";
    if (!c->quiet) {
        printf("\n### %s / %s / %s cache\n\nread-only tiers: %s\n\n", policy_text(policy),
               mode_text, cache_text(warm), tiers);
        printf("| step | ms | caller compiles | fallback calls | wait ms | builds pending |\n");
        printf("| ---: | ---: | ---: | ---: | ---: | ---: |\n");
    }
    /* the last step (1-based, settling included) with a call on a fallback,
     * and when it ended (ms from the first step's start) */
    int last_fb_step = 0;
    double last_fb_ms = 0, first20 = 0;
    const double t_start = bench_now_ms();
    for (int s = 0; s < steps; s++) {
        route(c, s, m);
        const int n = step_calls(c, &b, m, calls);
        CHECK(tk_context_get_stats(g_ctx, &s0));
        step_ms[s] = run_step(calls, n, 0);
        CHECK(tk_context_get_stats(g_ctx, &s1));
        const double wait = (s1.wait_seconds - s0.wait_seconds) * 1e3;
        const uint64_t comp = s1.sync_compiles - s0.sync_compiles;
        const uint64_t fb = s1.fallback_calls - s0.fallback_calls;
        wait_total += wait;
        compiles_total += comp;
        fallback_total += fb;
        if (fb > 0) {
            last_fb_step = s + 1;
            last_fb_ms = bench_now_ms() - t_start;
        }
        if (s < 20)
            first20 += step_ms[s];
        if (s >= 2) {
            wait_after2 += wait;
            waits_after2 += s1.waits - s0.waits;
        }
        const double err = check_call(calls, n, &b);
        if (!(err <= 2e-2))
            ok = 0;
        if (!(err <= worst_err))
            worst_err = err;
        if (!c->quiet)
            printf("| %d | %.2f | %llu | %llu | %.1f | %llu |\n", s + 1, step_ms[s],
                   (unsigned long long)comp, (unsigned long long)fb, wait,
                   (unsigned long long)s1.builds_pending);
        fflush(stdout);
    }

    /* Settling: keep stepping (new routing every step) until no background
     * build is pending, for at most a minute. Then 10 steady steps, the same
     * 10 steps again with every kernel the policy prefers loaded (after
     * waiting for any build they started), and through cuBLAS (twice: the
     * first pass pays cuBLAS's per-shape heuristics, the second is used). */
    int s_next = steps;
    double settle_ms = 0;
    {
        const double t0 = bench_now_ms();
        for (;;) {
            CHECK(tk_context_get_stats(g_ctx, &s1));
            if (s1.builds_pending == 0 || bench_now_ms() - t0 > 60e3 || s_next >= MAX_STEPS * 50)
                break;
            tk_context_stats a = TK_STRUCT_INIT(tk_context_stats);
            CHECK(tk_context_get_stats(g_ctx, &a));
            route(c, s_next++, m);
            run_step(calls, step_calls(c, &b, m, calls), 0);
            CHECK(tk_context_get_stats(g_ctx, &s1));
            if (s1.fallback_calls > a.fallback_calls) {
                last_fb_step = s_next;
                last_fb_ms = bench_now_ms() - t_start;
            }
        }
        settle_ms = bench_now_ms() - t0;
    }
    const int settled_at = s_next;
    enum { STEADY = 10 };
    double steady = 0, loaded = 0, cub_ms = 0, cub_cold = 0, enq_ours = 0, enq_cub = 0;
    double steady_again = 0; /* the same steps once more: order effects (clocks) */
    int n_enq = 0;
    uint64_t steady_fallback = 0, steady_waits = 0;
    CHECK(tk_context_get_stats(g_ctx, &s0));
    for (int s = s_next; s < s_next + STEADY; s++) {
        route(c, s, m);
        steady += run_step(calls, step_calls(c, &b, m, calls), 0);
    }
    CHECK(tk_context_get_stats(g_ctx, &s1));
    steady_fallback = s1.fallback_calls - s0.fallback_calls;
    steady_waits = s1.waits - s0.waits;
    const double t_wait0 = bench_now_ms();
    CHECK(tk_context_wait_builds(g_ctx, -1));
    const double drain_ms = bench_now_ms() - t_wait0;
    for (int s = s_next; s < s_next + STEADY; s++) {
        route(c, s, m);
        const int n = step_calls(c, &b, m, calls);
        loaded += run_step(calls, n, 0);
        enq_ours += g_enqueue_ms;
        steady_again += run_step(calls, n, 0);
        cub_cold += run_step(calls, n, 1);
        cub_ms += run_step(calls, n, 1);
        enq_cub += g_enqueue_ms;
        n_enq += n;
    }
    /* per call, last steady step, loaded; geomean per projection too */
    route(c, s_next + STEADY - 1, m);
    const int n = step_calls(c, &b, m, calls);
    double log_sum = 0, worst_ratio = 1e9, ours_sum = 0, cub_sum = 0;
    double g_log[6] = {0};
    int g_n[6] = {0};
    const call *worst = NULL;
    for (int i = 0; i < n; i++) {
        const double a = call_ms(&calls[i], 0), r = call_ms(&calls[i], 1);
        ours_sum += a;
        cub_sum += r;
        log_sum += log(r / a);
        g_log[i % 6] += log(r / a);
        g_n[i % 6]++;
        if (r / a < worst_ratio) {
            worst_ratio = r / a;
            worst = &calls[i];
        }
    }
    {
        static const char *const names[6] = {"up fwd",      "down fwd",  "down grad_a",
                                             "down grad_b", "up grad_a", "up grad_b"};
        printf("GROUPS %s %s %s", policy_text(policy), mode == TK_BUILD_ASYNC ? "async" : "sync",
               cache_text(warm));
        for (int g = 0; g < 6; g++)
            printf(" | %s %.3f", names[g], g_n[g] ? exp(g_log[g] / g_n[g]) : 0.0);
        printf("\n");
    }
    CHECK(tk_context_get_stats(g_ctx, &s1));
    const int half = STEADY;
    printf("SUMMARY %s %s %s steps=%d wait_s=%.3f wait_after2_s=%.3f waits_after2=%llu "
           "caller_compiles=%llu fallback=%llu builds_done=%llu builds_failed=%llu "
           "builds_dropped=%llu settled_at_step=%d settle_ms=%.0f steady_fallback=%llu "
           "steady_waits=%llu drain_ms=%.0f step1_ms=%.1f steady_ms=%.3f loaded_ms=%.3f "
           "steady_over_loaded=%.3f loaded_again_ms=%.3f cublas_first_pass_ms=%.3f "
           "cublas_step_ms=%.3f "
           "loaded_over_cublas=%.3f host_us_per_call=%.2f cublas_host_us_per_call=%.2f "
           "gemm_geomean_vs_cublas=%.3f gemm_sum_vs_cublas=%.3f worst_call=%s:%lldx%lldx%lld:%.3f "
           "max_err=%.2e no_fallback_from_step=%d no_fallback_after_s=%.3f first20_ms=%.3f "
           "first20_over_loaded=%.3f check=%s\n",
           policy_text(policy), mode_text, cache_text(warm), steps, wait_total / 1e3,
           wait_after2 / 1e3, (unsigned long long)waits_after2, (unsigned long long)compiles_total,
           (unsigned long long)fallback_total, (unsigned long long)s1.builds_done,
           (unsigned long long)s1.builds_failed, (unsigned long long)s1.builds_dropped, settled_at,
           settle_ms, (unsigned long long)steady_fallback, (unsigned long long)steady_waits,
           drain_ms, step_ms[0], steady / half, loaded / half, steady / loaded, steady_again / half,
           cub_cold / half, cub_ms / half, loaded / cub_ms, enq_ours * 1e3 / n_enq,
           enq_cub * 1e3 / n_enq, exp(log_sum / n), cub_sum / ours_sum,
           worst ? tk_op_name(worst->op) : "-", worst ? (long long)worst->M : 0,
           worst ? (long long)worst->N : 0, worst ? (long long)worst->K : 0, worst_ratio, worst_err,
           last_fb_step + 1, last_fb_ms / 1e3, first20 / (steps < 20 ? steps : 20),
           first20 / (steps < 20 ? steps : 20) / (loaded / half), ok ? "pass" : "FAIL");
    fflush(stdout);
    if (g_report_fd >= 0) {
        char line[512];
        int len = snprintf(line, sizeof line, "%s %s %s|%s|%.1f|%.3f|%.3f|%.3f|%llu|%llu|%d\n",
                           policy_text(policy), mode_text, cache_text(warm), tiers, step_ms[0],
                           first20 / (steps < 20 ? steps : 20), loaded / half,
                           first20 / (steps < 20 ? steps : 20) / (loaded / half),
                           (unsigned long long)compiles_total, (unsigned long long)fallback_total,
                           last_fb_step + 1);
        if (len > 0 && write(g_report_fd, line, (size_t)len) != len)
            fprintf(stderr, "could not report to the parent\n");
    }
    tk_context_destroy(g_ctx);
    if (warm != CACHE_WARM) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", dir);
    }
    return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
    bench_cfg c = {20, 8192, 4, 1, NULL, 0, 0};
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc)
            c.steps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--tokens") == 0 && i + 1 < argc)
            c.tokens = atoi(argv[++i]);
        else if (strcmp(argv[i], "--layers") == 0 && i + 1 < argc)
            c.layers = atoi(argv[++i]);
        else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc)
            c.seed = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--warm-cache") == 0 && i + 1 < argc)
            c.warm_cache = argv[++i];
        else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc)
            only = argv[++i];
        else if (strcmp(argv[i], "--quiet") == 0)
            c.quiet = 1;
        else if (strcmp(argv[i], "--stub") == 0)
            c.stub = 1;
        else {
            fprintf(stderr,
                    "usage: %s [--steps N] [--tokens T] [--layers L] [--seed S] "
                    "[--warm-cache DIR] [--only POLICY/MODE/CACHE[,...]] [--quiet] [--stub]\n",
                    argv[0]);
            return 2;
        }
    }
    if (c.steps < 2 || c.steps > MAX_STEPS || c.tokens < 1 || c.layers < 1 ||
        c.layers > MAX_LAYERS) {
        fprintf(stderr, "steps 2..%d, tokens >= 1, layers 1..%d\n", MAX_STEPS, MAX_LAYERS);
        return 2;
    }
    /* policy, mode, warm, steps (0: --steps). The exact policy in sync mode
     * compiles every new token count on the caller's thread (seconds per
     * step): it runs 3 steps to show it without taking the machine's time. */
    static const struct {
        tk_policy policy;
        tk_build_mode mode;
        int warm, steps;
    } runs[] = {
        {TK_POLICY_STABLE, TK_BUILD_ASYNC, 0, 0}, {TK_POLICY_STABLE, TK_BUILD_ASYNC, 3, 0},
        {TK_POLICY_STABLE, TK_BUILD_SYNC, 0, 0},  {TK_POLICY_GENERIC, TK_BUILD_ASYNC, 0, 0},
        {TK_POLICY_GENERIC, TK_BUILD_SYNC, 0, 0}, {TK_POLICY_EXACT, TK_BUILD_ASYNC, 0, 0},
        {TK_POLICY_EXACT, TK_BUILD_SYNC, 0, 3},   {TK_POLICY_STABLE, TK_BUILD_ASYNC, 1, 0},
        {TK_POLICY_STABLE, TK_BUILD_SYNC, 1, 0},  {TK_POLICY_STABLE, TK_BUILD_ASYNC, 2, 0},
    };
    int rc_all = 0;
    /* the children's cold-start lines, for the table at the end */
    char coldstart[sizeof runs / sizeof runs[0]][512];
    size_t n_cold = 0;
    printf("# bench/dynamic: %d tokens, %d layers, %d experts top-2, d=%d, ffn=%d, seed %llu\n",
           c.tokens, c.layers, EXPERTS, D_MODEL, D_FF, (unsigned long long)c.seed);
    fflush(stdout);
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        char name[64];
        if (runs[i].warm == CACHE_WARM && c.warm_cache == NULL)
            continue;
        snprintf(name, sizeof name, "%s/%s/%s", policy_text(runs[i].policy),
                 runs[i].mode == TK_BUILD_ASYNC ? "async" : "sync", cache_text(runs[i].warm));
        if (only != NULL && strstr(only, name) == NULL)
            continue;
        /* A child per configuration: a fresh process, as a training job. The
         * parent never touches the GPU (CUDA does not survive fork). */
        fflush(stdout);
        int fds[2] = {-1, -1};
        if (pipe(fds) != 0)
            fds[0] = fds[1] = -1;
        pid_t pid = fork();
        if (pid == 0) {
            if (fds[0] >= 0)
                close(fds[0]);
            g_report_fd = fds[1];
            _exit(run_config(&c, runs[i].policy, runs[i].mode, runs[i].warm,
                             runs[i].steps ? runs[i].steps : c.steps));
        }
        if (fds[1] >= 0)
            close(fds[1]);
        int status = 0;
        const int waited = pid > 0 && waitpid(pid, &status, 0) == pid;
        if (fds[0] >= 0) {
            /* one short line, written before the child exits: in the pipe */
            ssize_t got = read(fds[0], coldstart[n_cold], sizeof coldstart[0] - 1);
            if (got > 0 && runs[i].policy == TK_POLICY_STABLE && runs[i].mode == TK_BUILD_ASYNC) {
                coldstart[n_cold][got] = 0;
                n_cold++;
            }
            close(fds[0]);
        }
        if (!waited || !WIFEXITED(status)) {
            printf("%s: the run crashed\n", name);
            rc_all = 1;
            continue;
        }
        if (WEXITSTATUS(status) == 77)
            return 77;
        if (WEXITSTATUS(status) != 0)
            rc_all = 1;
    }
    if (n_cold > 0) {
        /* Issue 27's measure: the first 20 steps against the loaded step. */
        printf("\n## stable / async, side by side: the first steps from each cache\n\n");
        printf("| cache | read-only tiers | step 1 ms | first 20 ms | loaded ms | first 20 / "
               "loaded | caller compiles | fallback calls | no fallback from step |\n");
        printf("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
        for (size_t i = 0; i < n_cold; i++) {
            char *f[9] = {NULL};
            char *save = NULL, *p = coldstart[i];
            for (int k = 0; k < 9 && (f[k] = strtok_r(p, "|\n", &save)) != NULL; k++)
                p = NULL;
            if (f[8] == NULL)
                continue;
            const char *cache = strrchr(f[0], ' ');
            printf("| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", cache ? cache + 1 : f[0],
                   f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8]);
        }
    }
    printf("\n%s\n", rc_all == 0 ? "all checks passed" : "SOME CHECKS FAILED");
    return rc_all;
}
