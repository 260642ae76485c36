/*
 * Shared by the benchmark programs: the one context a program measures with,
 * a CHECK that names the failing call and the library's message and exits,
 * and device allocation through the library.
 */
#ifndef TK_BENCH_UTIL_H
#define TK_BENCH_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_stats.h"
#include "tokitai/tokitai.h"

static tk_context *g_ctx;

#define CHECK(expr)                                                                                \
    do {                                                                                           \
        tk_status st_ = (expr);                                                                    \
        if (st_ != TK_OK) {                                                                        \
            fprintf(stderr, "%s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #expr, tk_status_str(st_), \
                    tk_context_last_error(g_ctx));                                                 \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* g_ctx on the GPU present, policy `policy`, sync builds (every figure is
 * the policy's own kernel, never a fallback that serves while it builds).
 * 0: ready; 1: the configuration was refused; 77: no GPU device (said on
 * standard output as "skipped", the benchmarks' exit code for it). */
static inline int bench_open_gpu(tk_policy policy)
{
    tk_config *cfg = NULL;
    char why[512] = "";
    if (tk_config_create(&cfg) != TK_OK || tk_config_set_policy(cfg, policy) != TK_OK ||
        tk_config_set_build_mode(cfg, TK_BUILD_SYNC) != TK_OK) {
        tk_config_destroy(cfg);
        return 1;
    }
    const tk_status st = tk_context_create(cfg, &g_ctx, why, sizeof why);
    tk_config_destroy(cfg);
    if (st != TK_OK || strcmp(tk_context_backend_name(g_ctx), "stub") == 0) {
        printf("skipped: no GPU device (%s)\n", why);
        tk_context_destroy(g_ctx);
        g_ctx = NULL;
        return 77;
    }
    return 0;
}

static void *dalloc(size_t bytes)
{
    void *p = NULL;
    CHECK(tk_mem_alloc(g_ctx, bytes, &p));
    return p;
}

/* ------------------------------------------------- device time, host cost
 *
 * Device time with the host's cost left out: a kernel that sleeps on the
 * device is enqueued first, then the start event, the timed calls and the
 * stop event, so the calls queue up while the device sleeps and run back to
 * back however long the host took to enqueue them; the events measure the
 * device alone. The host's enqueue time of the same calls is measured
 * around them (wall clock), its own figure. The sleep lasts 1.5 x the
 * previous sample's enqueue time + 0.5 ms (capped at 100 ms), so it
 * outlasts the enqueue; a sample whose enqueue took longer than the sleep
 * before it is taken again (bench_sample), and bench_timing.overran counts
 * those that still did. Keep a sample's calls
 * under ~1000 launches: beyond the driver's queue the host waits for the
 * device, and the host figure includes that wait. */

#include <time.h>

typedef struct bench_timing {
    double sleep_ms; /* the next sleep */
    int overran;     /* samples whose enqueue outlasted the sleep (after the retakes) */
    int retaken;     /* samples taken again for that (bench_sample) */
    int samples;
    tk_kernel *sleep_k; /* the sleep kernel (the first call compiles it) */
} bench_timing;


/* Enqueues the sleep kernel (one thread) for ms on the NULL stream. */
static inline tk_status bench_sleep(bench_timing *t, double ms)
{
    /* CUDA: the global nanosecond timer, polled between __nanosleep naps.
     * HIP (gfx9): s_memrealtime, a 100 MHz counter. */
    static const char src[] =
        "extern \"C\" __global__ void tk_bench_sleep(unsigned long long ns)\n"
        "{\n"
        "#if defined(__HIPCC_RTC__) || defined(__HIP__)\n"
        "    const unsigned long long t0 = __builtin_amdgcn_s_memrealtime();\n"
        "    while ((__builtin_amdgcn_s_memrealtime() - t0) * 10ull < ns)\n"
        "        __builtin_amdgcn_s_sleep(127);\n"
        "#else\n"
        "    unsigned long long t0, t;\n"
        "    asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(t0));\n"
        "    do {\n"
        "        __nanosleep(20000);\n"
        "        asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(t));\n"
        "    } while (t - t0 < ns);\n"
        "#endif\n"
        "}\n";
    if (t->sleep_k == NULL) {
        tk_kernel_desc d = {0};
        tk_status st;
        d.source = src;
        d.entry = "tk_bench_sleep";
        d.source_label = "bench_sleep.cu";
        if ((st = tk_kernel_get(g_ctx, &d, &t->sleep_k)) != TK_OK)
            return st;
    }
    {
        unsigned long long ns = (unsigned long long)(ms * 1e6);
        void *args[] = {&ns};
        const unsigned one[3] = {1, 1, 1};
        return tk_kernel_launch(g_ctx, t->sleep_k, one, one, 0, NULL, args);
    }
}

typedef struct bench_wrap {
    tk_timed_fn run;
    void *user;
    double host_ms;
} bench_wrap;

static inline tk_status bench_wrapped(void *user)
{
    bench_wrap *w = user;
    const double t0 = bench_now_ms();
    tk_status st = w->run(w->user);
    w->host_ms = bench_now_ms() - t0;
    return st;
}

/* One sample: the sleep, then run(user) between two events. *dev_ms: the
 * device time of what run enqueued; *host_ms: how long run took on the
 * host. A sample whose enqueue outlasted the sleep before it is not device
 * time alone (the device waited for the host between the events), so it is
 * taken again behind a sleep twice that enqueue's length, up to
 * BENCH_RETAKES times (bench_timing.retaken counts them); overran counts
 * the samples still returned that way. */
#define BENCH_RETAKES 3
static inline tk_status bench_sample(bench_timing *t, tk_timed_fn run, void *user, double *dev_ms,
                                     double *host_ms)
{
    bench_wrap w = {run, user, 0.0};
    float ms = 0.0f;
    for (int attempt = 0;; attempt++) {
        const double sleep = t->sleep_ms > 0.0 ? t->sleep_ms : 2.0;
        tk_status st = bench_sleep(t, sleep);
        if (st == TK_OK)
            st = tk_time_on_stream(g_ctx, NULL, bench_wrapped, &w, &ms);
        if (st != TK_OK)
            return st;
        const int over = w.host_ms >= sleep;
        t->sleep_ms = (over ? 2.0 : 1.5) * w.host_ms + 0.5;
        if (t->sleep_ms > 100.0)
            t->sleep_ms = 100.0;
        if (!over || attempt == BENCH_RETAKES) {
            t->overran += over;
            break;
        }
        t->retaken++;
    }
    t->samples++;
    *dev_ms = ms;
    *host_ms = w.host_ms;
    return TK_OK;
}

#endif
