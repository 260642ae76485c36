/*
 * bench/softmax: softmax forward and softmax + cross-entropy backward at
 * column counts 64 .. 262144 (odd vocabularies included: 50257, 100003,
 * 151936 = GPT-2's, a prime, Qwen's), rows filling the GPU (256 MiB per
 * fp16 tensor), against the device-to-device copy bandwidth measured in the
 * same run: cuMemcpyDtoDAsync of the op's own byte count (read + write: a
 * copy of half the op's traffic), looked up in libcuda with dlopen.
 *
 * Bytes counted as the fewest an op must move: forward 2 * rows * cols * 2
 * (x read, y written), backward 3 * rows * cols * 2 (s, g read; grad
 * written). Each figure is the median over samples of device time: a
 * sample is a batch of back-to-back launches enqueued behind a sleep kernel
 * and timed with device events (bench_util.h), so the host's cost is not in
 * it; the host's enqueue time per call is its own column (median over the
 * same samples). One sample of rows (8 random ones and the last) is checked
 * against the CPU reference with the tolerance of tests/test_gpu_ops.c.
 *
 *   softmax [--policy exact|stable|generic] [--sweep | --sweep-fwd | --sweep-bwd] [--cols N[,N...]]
 *           [--odd N] [--seed S] [--offset H] [--ld-pad P] [--rows R] [--cluster-min C]
 *           [--clusters C,C...]
 *           [--only TEXT] [--smem-min B] [--define NAME[=VALUE]]
 *
 * --odd N adds N odd column counts drawn log-uniformly from 1024..262144
 * with the seed S (default 1); --offset H moves every pointer H halves
 * past the allocation's start (H odd: no row starts on a 16-byte boundary);
 * --ld-pad P sets every array's leading dimension to cols + P halves
 * (rows P halves apart beyond their length; default packed).
 * --rows R takes R rows at every width (default: as many as fill 256 MiB;
 * R is clamped to that), to see how a kernel shape fares at other token
 * counts than the one that fills the buffer.
 *
 * --sweep also launches the embedded kernels directly with other block,
 * ITERS and cluster shapes than the library picks (the tuning behind
 * src/ops/softmax.c), each checked on its first and last row: C blocks
 * per row, g threads per row, b threads per block, it vectors per thread,
 * smem_g / sN: g / N vectors per thread in shared memory, E: TK_STORE_E;
 * act.: clusters of that shape the GPU holds at once
 * (cuOccupancyMaxActiveClusters). The forward's sweep tries clusters of
 * 16 blocks too (non-portable; the engine allows them at load).
 * --sweep-fwd / --sweep-bwd: the forward's or the backward's sweep alone.
 * --cluster-min C skips the sweep's clusters of fewer than C blocks;
 * --clusters C,C... tries those cluster sizes instead (2..16, any of them:
 * __cluster_dims__ takes sizes that are not powers of two).
 * --only TEXT keeps the sweep's variants whose name (the table's variant
 * column) holds TEXT (TEXT|TEXT...: any of them); --smem-min B gives each
 * at least B bytes of dynamic shared memory (fewer blocks resident per
 * SM); --define NAME[=VALUE] (up to 4 times) adds a define to every variant (a kernel
 * experiment's switch).
 *
 * Prints markdown tables ("x copy" to 3 decimals, so that a row just under
 * 0.90 does not read 0.90), then per direction the worst row of 1024
 * columns or more and how many such rows read under 0.90 of copy; exit 0
 * when every check passed, 1 otherwise, 77 without a device. PyTorch's
 * figures for the same shapes: bench/torch_softmax.py.
 */
#include <dlfcn.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "jit/jit_internal.h"
#include "ops/ops_internal.h"
#include "tokitai/ops.h"
#include "tokitai/tokitai.h"

/* halves per tensor: 256 MiB, far beyond a 50 MB L2 */
#define ELEMS ((int64_t)1 << 27)
#define WARM 3
#define ITERS 25
#define BATCH 10
#define MAX_COLS 48

static const int64_t default_cols[] = {64,     1024,   4096,   32000,  50257, 50304,
                                       100003, 128256, 151936, 256000, 262144};

static bench_timing g_tm; /* zero: no kernel yet, a 2 ms first sleep */

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next_u64(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* ------------------------------------------------------------- timing */

typedef struct timed {
    tk_status (*fn)(void *user);
    void *user;
    int batch;
} timed;

static tk_status timed_call(void *user)
{
    timed *t = user;
    for (int i = 0; i < t->batch; i++) {
        tk_status st = t->fn(t->user);
        if (st != TK_OK)
            return st;
    }
    return TK_OK;
}

/* Median per-launch device milliseconds; 0 when a launch fails (message
 * printed). host_us (may be NULL): the median host enqueue time per call,
 * microseconds. */
static float median_ms(tk_status (*fn)(void *), void *user, double *host_us)
{
    timed t = {fn, user, 1};
    float v[ITERS], h[ITERS];
    for (int i = 0; i < WARM; i++)
        if (timed_call(&t) != TK_OK)
            return 0;
    CHECK(tk_stream_sync(g_ctx, NULL));
    t.batch = BATCH;
    for (int i = 0; i < ITERS; i++) {
        double dev = 0, host = 0;
        if (bench_sample(&g_tm, timed_call, &t, &dev, &host) != TK_OK)
            return 0;
        v[i] = (float)(dev / BATCH);
        h[i] = (float)(host * 1e3 / BATCH);
    }
    qsort(v, ITERS, sizeof v[0], bench_cmp_float);
    qsort(h, ITERS, sizeof h[0], bench_cmp_float);
    if (host_us != NULL)
        *host_us = h[ITERS / 2];
    return v[ITERS / 2];
}

/* --------------------------------------------------------------- copy */

typedef int (*cu_memcpy_dtod_async)(unsigned long long dst, unsigned long long src, size_t bytes,
                                    void *stream);
static cu_memcpy_dtod_async memcpy_dtod;

/* cuOccupancyMaxActiveClusters: how many clusters of a shape the GPU holds
 * at once (the sweep's "act." column). */
typedef struct cu_launch_config {
    unsigned grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes;
    void *stream;
    void *attrs;
    unsigned n_attrs;
} cu_launch_config;
typedef int (*cu_max_active_clusters)(int *n, void *fn, const cu_launch_config *config);
static cu_max_active_clusters max_active_clusters;

typedef struct copy_case {
    void *src, *dst;
    size_t bytes;
} copy_case;

static tk_status run_copy(void *user)
{
    copy_case *c = user;
    return memcpy_dtod((unsigned long long)(uintptr_t)c->dst, (unsigned long long)(uintptr_t)c->src,
                       c->bytes, NULL) == 0
               ? TK_OK
               : TK_LAUNCH_FAILED;
}

/* GB/s (read + write) of a copy moving `traffic` bytes in all. */
static double copy_gbs(void *src, void *dst, double traffic)
{
    copy_case c = {src, dst, (size_t)(traffic / 2)};
    const float ms = median_ms(run_copy, &c, NULL);
    return ms > 0 ? traffic / ms / 1e6 : 0;
}

/* --------------------------------------------------------------- cases */

typedef struct sm_case {
    int bwd;
    int64_t rows, cols;
    void *x, *g, *out;  /* bwd: x = s */
    const tk_kernel *k; /* sweep: a kernel launched directly */
    unsigned grid, block, smem;
    int64_t ld; /* every array's leading dimension (0: cols, packed) */
} sm_case;

static int64_t ld_of(const sm_case *s)
{
    return s->ld > 0 ? s->ld : s->cols;
}

static tk_status run_lib(void *user)
{
    sm_case *s = user;
    const int64_t ld = s->ld; /* 0: packed */
    if (s->bwd)
        return tk_softmax_xent_f16_bwd(g_ctx, s->rows, s->cols, s->x, ld, s->g, ld, s->out, ld,
                                       NULL);
    return tk_softmax_f16_fwd(g_ctx, s->rows, s->cols, s->x, ld, s->out, ld, NULL);
}

static tk_status run_direct(void *user)
{
    sm_case *s = user;
    int64_t ld = ld_of(s);
    const unsigned grid[3] = {s->grid, 1, 1}, block[3] = {s->block, 1, 1};
    void *fargs[] = {&s->x, &ld, &s->out, &ld, &s->rows, &s->cols};
    void *bargs[] = {&s->x, &ld, &s->g, &ld, &s->out, &ld, &s->rows, &s->cols};
    return tk_kernel_launch(g_ctx, s->k, grid, block, s->smem, NULL, s->bwd ? bargs : fargs);
}

/* Rows r of the output against the CPU reference; returns the number of
 * elements out of tolerance. x_host: the forward's input (all rows); the
 * backward's s and g rows are read back from the device. */
static long check_rows(const sm_case *s, const uint16_t *x_host, const int64_t *which, int n)
{
    const size_t rb = (size_t)s->cols * 2;
    uint16_t *got = malloc(rb), *want = malloc(rb), *sr = malloc(rb), *gr = malloc(rb);
    long bad = 0;
    CHECK(tk_stream_sync(g_ctx, NULL));
    for (int t = 0; t < n; t++) {
        const int64_t r = which[t];
        const size_t off = (size_t)(r * ld_of(s)) * 2;
        CHECK(tk_mem_download(g_ctx, got, (char *)s->out + off, rb));
        if (s->bwd) {
            CHECK(tk_mem_download(g_ctx, sr, (char *)s->x + off, rb));
            CHECK(tk_mem_download(g_ctx, gr, (char *)s->g + off, rb));
            tk_ref_softmax_xent_f16_bwd(1, s->cols, sr, gr, want);
        } else {
            tk_ref_softmax_f16_fwd(1, s->cols, x_host + r * ld_of(s), want);
        }
        for (int64_t c = 0; c < s->cols; c++) {
            const double w = tk_f16_to_f32(want[c]), v = tk_f16_to_f32(got[c]);
            if (!(fabs(v - w) <= 1e-3 + 1e-2 * fabs(w)))
                bad++;
        }
    }
    free(got), free(want), free(sr), free(gr);
    return bad;
}

/* Poisons the output, runs once, checks rows. */
static int run_and_check(sm_case *s, tk_status (*fn)(void *), const uint16_t *x_host, int sample)
{
    int64_t which[9];
    int n = 0;
    CHECK(tk_mem_set(g_ctx, s->out, 0xFF, (size_t)((s->rows - 1) * ld_of(s) + s->cols) * 2));
    if (fn(s) != TK_OK)
        return 0;
    if (sample)
        for (; n < 8; n++)
            which[n] = (int64_t)(next_u64() % (uint64_t)s->rows);
    else
        which[n++] = 0;
    which[n++] = s->rows - 1;
    return check_rows(s, x_host, which, n) == 0;
}

/* ---------------------------------------------------------------- sweep */

typedef struct variant {
    unsigned g, block, iters, cluster;
    int smem_g, is_long;
    unsigned siters; /* forward: vectors per thread staged in shared memory */
    int store_e;     /* forward: exp(x - thread max) kept in place of x (TK_STORE_E) */
    unsigned minb;   /* forward: TK_MINB (0: the kernel's default) */
} variant;

static int has_clusters(void)
{
    const char *t = tk_context_target(g_ctx);
    return strcmp(tk_context_backend_name(g_ctx), "cuda") == 0 && strncmp(t, "sm_", 3) == 0 &&
           atoi(t + 3) >= 90;
}

/* The sweep's variants load 16-byte vectors (as the library does for
 * packed rows of buffers that share their alignment); TK_EDGE where rows do
 * not all start on a 16-byte boundary or end on one. */
static int sweep_edge(const sm_case *s)
{
    return s->cols % 8 != 0 || ld_of(s) % 8 != 0 || (uintptr_t)s->x % 16 != 0;
}

/* --only, --smem-min (below) */
static const char *sweep_only;
/* whether name holds one of the |-separated texts of `any` */
static int name_matches(const char *name, const char *any)
{
    for (const char *p = any;;) {
        const char *bar = strchr(p, '|');
        const size_t n = bar ? (size_t)(bar - p) : strlen(p);
        for (const char *q = name; strlen(q) >= n; q++)
            if (strncmp(q, p, n) == 0)
                return 1;
        if (bar == NULL)
            return 0;
        p = bar + 1;
    }
}
/* --define NAME[=VALUE]: one more define for every sweep variant */
#define MAX_DEFINES 4
static const char *sweep_define[MAX_DEFINES];
static int n_sweep_defines;
static char sweep_define_name[MAX_DEFINES][64];
static unsigned sweep_smem_min;

/* One variant launched directly; prints a row. Returns GB/s (0: failed). */
static double sweep_one(sm_case *s, const variant *v, const uint16_t *x_host, double copy)
{
    char d_vec[8], d_g[12], d_block[12], d_iters[12], d_cluster[12], d_cols[24], d_siters[12];
    char d_minb[12];
    char what[96];
    tk_define defs[12 + MAX_DEFINES];
    size_t nd = 0;
    tk_kernel_desc d;
    tk_kernel *k = NULL;
    tk_kernel_info info = TK_STRUCT_INIT(tk_kernel_info);
    const unsigned vec = 8;
    const int edge = sweep_edge(s);
    if (v->is_long)
        snprintf(what, sizeof what, "long g%u", v->g);
    else
        snprintf(what, sizeof what, "C%u g%u b%u it%u%s%s", v->cluster, v->g, v->block, v->iters,
                 v->smem_g ? " smem_g" : "", "");
    if (v->siters)
        snprintf(what + strlen(what), sizeof what - strlen(what), " s%u", v->siters);
    if (v->store_e)
        snprintf(what + strlen(what), sizeof what - strlen(what), " E");
    if (v->minb)
        snprintf(what + strlen(what), sizeof what - strlen(what), " m%u", v->minb);
    /* --only TEXT: the variants whose name holds TEXT */
    if (sweep_only != NULL && !name_matches(what, sweep_only))
        return 0;
    snprintf(d_vec, sizeof d_vec, "%u", vec);
    snprintf(d_g, sizeof d_g, "%u", v->g);
    snprintf(d_block, sizeof d_block, "%u", v->block);
    snprintf(d_iters, sizeof d_iters, "%u", v->iters);
    snprintf(d_cluster, sizeof d_cluster, "%u", v->cluster);
    snprintf(d_cols, sizeof d_cols, "%lld", (long long)s->cols);
    snprintf(d_siters, sizeof d_siters, "%u", v->siters);
    defs[nd++] = (tk_define){"TK_VEC", d_vec};
    defs[nd++] = (tk_define){"TK_G", d_g};
    defs[nd++] = (tk_define){"TK_BLOCK", d_block};
    defs[nd++] = (tk_define){"TK_COLS", d_cols};
    if (edge)
        defs[nd++] = (tk_define){"TK_EDGE", NULL};
    if (v->is_long)
        defs[nd++] = (tk_define){"TK_LONG", NULL};
    else
        defs[nd++] = (tk_define){"TK_ITERS", d_iters};
    if (v->cluster > 1)
        defs[nd++] = (tk_define){"TK_CLUSTER", d_cluster};
    if (v->smem_g)
        defs[nd++] = (tk_define){"TK_SMEM_G", NULL};
    if (v->siters)
        defs[nd++] = (tk_define){"TK_SITERS", d_siters};
    if (v->store_e)
        defs[nd++] = (tk_define){"TK_STORE_E", NULL};
    snprintf(d_minb, sizeof d_minb, "%u", v->minb);
    if (v->minb)
        defs[nd++] = (tk_define){"TK_MINB", d_minb};
    for (int i = 0; i < n_sweep_defines; i++) {
        const char *eq = strchr(sweep_define[i], '=');
        snprintf(sweep_define_name[i], sizeof sweep_define_name[i], "%.*s",
                 (int)(eq ? eq - sweep_define[i] : (ptrdiff_t)strlen(sweep_define[i])),
                 sweep_define[i]);
        defs[nd++] = (tk_define){sweep_define_name[i], eq ? eq + 1 : NULL};
    }
    memset(&d, 0, sizeof d);
    d.source_name = s->bwd ? "softmax_xent_f16" : "softmax_f16";
    d.entry = s->bwd ? (v->is_long       ? "tk_softmax_xent_f16_bwd_long"
                        : v->cluster > 1 ? "tk_softmax_xent_f16_bwd_cluster"
                                         : "tk_softmax_xent_f16_bwd")
                     : (v->is_long       ? "tk_softmax_f16_fwd_long"
                        : v->cluster > 1 ? "tk_softmax_f16_fwd_cluster"
                                         : "tk_softmax_f16_fwd");
    d.defines = defs;
    d.n_defines = nd;
    if (tk_kernel_get(g_ctx, &d, &k) != TK_OK) {
        printf("| %-4s | %7lld | C%u g%u it%u | compile failed: %s |\n", s->bwd ? "bwd" : "fwd",
               (long long)s->cols, v->cluster, v->g, v->iters, tk_context_last_error(g_ctx));
        return 0;
    }
    tk_kernel_get_info(k, &info);
    /* a kernel that spills registers says so in its name */
    if (info.resources.spill_count > 0 || info.resources.local_bytes > 0)
        snprintf(what + strlen(what), sizeof what - strlen(what), " spills %d",
                 (int)info.resources.local_bytes);
    s->k = k;
    s->block = v->block;
    if (v->smem_g)
        s->smem = v->g * v->iters * vec * 2u;
    else
        s->smem = v->g * v->siters * vec * 2u;
    /* as src/ops/softmax.c does: static + dynamic above 48 KiB needs the
     * limit lifted, which the engine does for requests above 48 KiB */
    if (s->smem > 47 * 1024 && s->smem <= 48 * 1024)
        s->smem = 48 * 1024 + 16;
    /* --smem-min B: at least B bytes of dynamic shared memory (fewer
     * blocks resident per SM) */
    if (s->smem < sweep_smem_min)
        s->smem = sweep_smem_min;
    /* one row per cluster first: correct for every variant, and it raises
     * the kernel's shared-memory limit before the occupancy query */
    s->grid = (unsigned)(v->is_long   ? s->rows
                         : v->g <= 32 ? (s->rows + (v->block / v->g) - 1) / (v->block / v->g)
                                      : s->rows * v->cluster);
    int ok = run_and_check(s, run_direct, x_host, 0);
    int active = 0;
    if (v->cluster > 1 && max_active_clusters != NULL) {
        cu_launch_config cfg = {s->grid, 1, 1, v->g, 1, 1, s->smem, NULL, NULL, 0};
        if (max_active_clusters(&active, k->fn, &cfg) != 0)
            active = -1;
    }
    const float ms = ok ? median_ms(run_direct, s, NULL) : 0;
    const double traffic = (s->bwd ? 3.0 : 2.0) * (double)(s->rows * s->cols) * 2;
    const double gbs = ms > 0 ? traffic / ms / 1e6 : 0;
    printf("| %-4s | %7lld | %-28s | %4d | %6u | %4d | %8.1f | %5.2f | %-5s |\n",
           s->bwd ? "bwd" : "fwd", (long long)s->cols, what, info.resources.registers, s->smem,
           active, gbs, gbs / copy, ok ? "pass" : "FAIL");
    fflush(stdout);
    return gbs;
}

/* --cluster-min: the sweep's cluster variants start at this many blocks */
static unsigned sweep_cluster_min = 2;
/* --clusters C,C...: the cluster sizes the sweep tries (0: 2, 4, 8 and,
 * forward, 16) */
#define MAX_CLUSTER_SIZES 16
static unsigned sweep_clusters[MAX_CLUSTER_SIZES];
static int n_sweep_clusters;

static void sweep(sm_case *s, const uint16_t *x_host, double copy)
{
    const unsigned vec = 8;
    const unsigned itmax = 32u / (vec >= 2 ? vec / 2u : 1u);
    const int64_t nvec = s->cols / vec; /* whole vectors; TK_EDGE: the rest one per thread */
    const int clusters = has_clusters();
    variant v;
    if (nvec <= 256) {
        /* groups of g <= 32 threads per row, several rows per block */
        for (unsigned g = 1; g <= 32 && g <= nvec; g *= 2) {
            const unsigned iters = (unsigned)((nvec + g - 1) / g);
            if (iters > itmax)
                continue;
            for (unsigned b = 128; b <= 512; b *= 2) {
                v = (variant){g, b, iters, 1, 0, 0, 0, 0, 0};
                sweep_one(s, &v, x_host, copy);
            }
        }
        return;
    }
    if (nvec <= 512 * itmax) {
        /* one block per row */
        for (unsigned g = 64; g <= 1024 && g <= nvec; g *= 2) {
            const unsigned iters = (unsigned)((nvec + g - 1) / g);
            if (iters <= itmax && !(g == 1024 && iters * (vec >= 2 ? vec / 2u : 1u) > 16)) {
                v = (variant){g, g, iters, 1, 0, 0, 0, 0, 0};
                sweep_one(s, &v, x_host, copy);
            }
        }
    }
    /* a cluster of c blocks per row (2, 4, 8; the forward also 16, a
     * non-portable size, which sm_90 allows), or the sizes --clusters names */
    for (int ci = 0; clusters; ci++) {
        const unsigned c = n_sweep_clusters ? sweep_clusters[ci] : 2u << ci;
        if (n_sweep_clusters ? ci >= n_sweep_clusters : c > (s->bwd ? 8u : 16u))
            break;
        if (c < sweep_cluster_min)
            continue;
        const int64_t per = (nvec + c - 1) / c;
        /* forward, VEC 8: half as many blocks of 512 threads as hold the
         * slice in registers, each with up to 2 * itmax vectors, itmax / 2
         * or itmax of them in registers, the rest in shared memory (fewer,
         * larger clusters: more of them fit a GPC) */
        if (!s->bwd && vec == 8 && nvec >= 2048 && per > 512 * itmax && per <= 1024 * itmax) {
            const unsigned iters = (unsigned)((per + 511) / 512);
            for (unsigned in_regs = itmax / 2; in_regs <= itmax; in_regs += itmax / 2) {
                v = (variant){512, 512, iters, c, 0, 0, iters - in_regs, 1, 0};
                sweep_one(s, &v, x_host, copy);
            }
            /* 2 or 3 of them in registers at 40 (TK_MINB 3): 3 blocks per
             * SM where their shared slices fit */
            for (unsigned in_regs = 2; in_regs <= 3; in_regs++)
                if ((size_t)3 * 512 * (iters - in_regs) * vec * 2 <= 220 * 1024) {
                    v = (variant){512, 512, iters, c, 0, 0, iters - in_regs, 1, 3};
                    sweep_one(s, &v, x_host, copy);
                }
        }
        if (nvec < 2048 || per > 512 * itmax)
            continue;
        for (unsigned g = 64; g <= 1024 && g <= per; g *= 2) {
            const unsigned iters = (unsigned)((per + g - 1) / g);
            const unsigned regs = iters * (vec >= 2 ? vec / 2u : 1u); /* per input */
            if (iters > itmax || (per > g * 4 && iters < 4 && g > 128))
                continue;
            if (s->bwd) {
                for (int sg = 0; sg <= 1; sg++) {
                    /* 1024 threads: 64 registers each, 16 of them for data */
                    if (g == 1024 && (!sg ? 2 * regs : regs) > 16)
                        continue;
                    if (sg && (size_t)g * iters * vec * 2 > 200 * 1024)
                        continue;
                    v = (variant){g, g, iters, c, sg, 0, 0, 0, 0};
                    sweep_one(s, &v, x_host, copy);
                }
                continue;
            }
            if (g == 1024 || g < 128)
                continue;
            for (int se = 0; se <= 1; se++) {
                v = (variant){g, g, iters, c, 0, 0, 0, se, 0};
                sweep_one(s, &v, x_host, copy);
                if (iters >= 2) {
                    v.siters = iters / 2;
                    sweep_one(s, &v, x_host, copy);
                    v.siters = iters;
                    sweep_one(s, &v, x_host, copy);
                    if (se && g == 512 && iters == itmax) {
                        v.minb = 3; /* 40 registers: 3 blocks per SM */
                        sweep_one(s, &v, x_host, copy);
                    }
                    if (se && g == 512 && iters >= 4) {
                        /* 32 registers and 2 or 3 vectors in them, the
                         * rest in shared memory: 4 blocks per SM */
                        v.minb = 4;
                        for (v.siters = iters - 3; v.siters <= iters - 2; v.siters++)
                            sweep_one(s, &v, x_host, copy);
                        v.minb = 0;
                    }
                    if (se && g == 256 && iters >= 3 && iters <= 8) {
                        /* the same with 256 threads: 8 blocks per SM */
                        v.minb = 8;
                        v.siters = iters - 2;
                        sweep_one(s, &v, x_host, copy);
                        v.minb = 0;
                    }
                }
            }
        }
        /* forward, VEC 8: 256 threads with up to 2 * itmax vectors, 4 of
         * them in registers */
        if (!s->bwd && vec == 8 && per > 256 * itmax && per <= 512 * itmax) {
            const unsigned iters = (unsigned)((per + 255) / 256);
            for (unsigned sit = iters - itmax / 2; sit <= iters; sit += itmax / 2) {
                v = (variant){256, 256, iters, c, 0, 0, sit, 1, 0};
                sweep_one(s, &v, x_host, copy);
            }
        }
    }
    v = (variant){1024, 1024, 1, 1, 0, 1, 0, 0, 0};
    sweep_one(s, &v, x_host, copy);
}

/* ---------------------------------------------------------------- main */

typedef struct result {
    int bwd;
    int64_t rows, cols;
    double gbs, copy, us, host_us;
    int ok;
    char kernel[48];
    int regs;
} result;

int main(int argc, char **argv)
{
    tk_policy policy = TK_POLICY_STABLE;
    int do_sweep = 0, all_ok = 1;
    int64_t cols_list[MAX_COLS];
    int n_cols = (int)(sizeof default_cols / sizeof default_cols[0]);
    int n_odd = 0, offset = 0;
    int64_t rows_opt = 0, ld_pad = 0;
    uint64_t seed = 1;
    memcpy(cols_list, default_cols, sizeof default_cols);

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--sweep") == 0) {
            do_sweep = 3;
        } else if (strcmp(argv[i], "--sweep-fwd") == 0) {
            do_sweep = 1;
        } else if (strcmp(argv[i], "--sweep-bwd") == 0) {
            do_sweep = 2;
        } else if (strcmp(argv[i], "--policy") == 0 && i + 1 < argc) {
            const char *v = argv[++i];
            policy = strcmp(v, "generic") == 0 ? TK_POLICY_GENERIC
                     : strcmp(v, "exact") == 0 ? TK_POLICY_EXACT
                                               : TK_POLICY_STABLE;
        } else if (strcmp(argv[i], "--cols") == 0 && i + 1 < argc) {
            char *p = argv[++i];
            n_cols = 0;
            while (*p && n_cols < MAX_COLS - 16) {
                cols_list[n_cols] = strtoll(p, &p, 10);
                if (cols_list[n_cols] < 1 || cols_list[n_cols] > ELEMS) {
                    fprintf(stderr, "--cols: each in 1..%lld\n", (long long)ELEMS);
                    return 2;
                }
                n_cols++;
                if (*p == ',')
                    p++;
            }
        } else if (strcmp(argv[i], "--odd") == 0 && i + 1 < argc) {
            n_odd = atoi(argv[++i]);
            if (n_odd < 0 || n_odd > 16) {
                fprintf(stderr, "--odd: 0..16\n");
                return 2;
            }
        } else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
            seed = strtoull(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--cluster-min") == 0 && i + 1 < argc) {
            sweep_cluster_min = (unsigned)atoi(argv[++i]);
        } else if (strcmp(argv[i], "--clusters") == 0 && i + 1 < argc) {
            for (const char *p = argv[++i]; *p != '\0';) {
                char *end;
                const unsigned long c = strtoul(p, &end, 10);
                if (end == p || c < 2 || c > 16 || n_sweep_clusters == MAX_CLUSTER_SIZES ||
                    (*end != ',' && *end != '\0')) {
                    fprintf(stderr, "--clusters: up to %d sizes of 2..16, comma-separated\n",
                            MAX_CLUSTER_SIZES);
                    return 2;
                }
                sweep_clusters[n_sweep_clusters++] = (unsigned)c;
                p = *end == ',' ? end + 1 : end;
            }
        } else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
            sweep_only = argv[++i];
        } else if (strcmp(argv[i], "--define") == 0 && i + 1 < argc) {
            if (n_sweep_defines == MAX_DEFINES) {
                fprintf(stderr, "--define: at most %d\n", MAX_DEFINES);
                return 2;
            }
            sweep_define[n_sweep_defines++] = argv[++i];
        } else if (strcmp(argv[i], "--smem-min") == 0 && i + 1 < argc) {
            sweep_smem_min = (unsigned)atoi(argv[++i]);
        } else if (strcmp(argv[i], "--ld-pad") == 0 && i + 1 < argc) {
            ld_pad = strtoll(argv[++i], NULL, 10);
            if (ld_pad < 0 || ld_pad > 65536) {
                fprintf(stderr, "--ld-pad: 0..65536 halves\n");
                return 2;
            }
        } else if (strcmp(argv[i], "--rows") == 0 && i + 1 < argc) {
            rows_opt = strtoll(argv[++i], NULL, 10);
            if (rows_opt < 1) {
                fprintf(stderr, "--rows: 1 or more\n");
                return 2;
            }
        } else if (strcmp(argv[i], "--offset") == 0 && i + 1 < argc) {
            offset = atoi(argv[++i]);
            if (offset < 0 || offset > 64) {
                fprintf(stderr, "--offset: 0..64 halves\n");
                return 2;
            }
        } else {
            fprintf(stderr,
                    "usage: %s [--policy exact|stable|generic] [--sweep | --sweep-fwd | "
                    "--sweep-bwd] [--cols N,...] [--odd N] [--seed S] [--offset H] [--ld-pad P] "
                    "[--rows R] [--cluster-min C] [--clusters C,C...]\n"
                    "       [--only TEXT] [--smem-min B] [--define NAME[=VALUE]]\n",
                    argv[0]);
            return 2;
        }
    }
    {
        /* odd widths, log-uniform in 1024..262144 (splitmix64 of the seed) */
        uint64_t z = seed;
        for (int i = 0; i < n_odd; i++) {
            uint64_t r = (z += 0x9E3779B97F4A7C15ull);
            r = (r ^ (r >> 30)) * 0xBF58476D1CE4E5B9ull;
            r = (r ^ (r >> 27)) * 0x94D049BB133111EBull;
            r ^= r >> 31;
            const double u = (double)(r >> 11) / 9007199254740992.0;
            cols_list[n_cols++] = ((int64_t)(1024.0 * pow(256.0, u))) | 1;
        }
    }
    /* Sync builds: every figure is the policy's own kernel (bench_open_gpu) */
    const int open_rc = bench_open_gpu(policy);
    if (open_rc != 0)
        return open_rc;
    {
        void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        if (lib == NULL || strcmp(tk_context_backend_name(g_ctx), "cuda") != 0) {
            printf("skipped: cuMemcpyDtoDAsync needs the CUDA driver (%s)\n",
                   lib ? "not a CUDA context" : dlerror());
            return 77;
        }
        *(void **)&memcpy_dtod = dlsym(lib, "cuMemcpyDtoDAsync_v2");
        *(void **)&max_active_clusters = dlsym(lib, "cuOccupancyMaxActiveClusters");
        if (memcpy_dtod == NULL) {
            printf("skipped: libcuda has no cuMemcpyDtoDAsync_v2\n");
            return 77;
        }
    }
    printf("device %s (%s), compiler %s, policy %s, %lld halves per tensor, pointers offset by "
           "%d halves, leading dimension cols + %lld\n",
           tk_context_target(g_ctx), tk_context_backend_name(g_ctx), tk_context_compiler(g_ctx),
           tk__op_policy_name(policy), (long long)ELEMS, offset, (long long)ld_pad);
    printf("device time: batches of %d calls behind a sleep kernel (host cost excluded), median "
           "of %d; host: enqueue time per call, median\n\n",
           BATCH, ITERS);

    /* One set of inputs serves every shape: rows * cols <= ELEMS. */
    const size_t bytes = (size_t)(ELEMS + 64) * 2;
    uint16_t *x_host = malloc(bytes), *g_host = malloc(bytes);
    for (int64_t i = 0; i < ELEMS + 64; i++) {
        x_host[i] = tk_f32_to_f16(8.0f * (float)((int)(next_u64() % 4096) - 2048) / 2048.0f);
        g_host[i] = tk_f32_to_f16((float)((int)(next_u64() % 4096) - 2048) / 2048.0f);
    }
    void *dx = dalloc(bytes), *dg = dalloc(bytes), *ds = dalloc(bytes), *dout = dalloc(bytes);
    void *csrc = dalloc(bytes * 3 / 2), *cdst = dalloc(bytes * 3 / 2);
    CHECK(tk_mem_upload(g_ctx, dx, x_host, bytes));
    CHECK(tk_mem_upload(g_ctx, dg, g_host, bytes));
    CHECK(tk_mem_set(g_ctx, csrc, 0x3C, bytes * 3 / 2));

    result res[2 * MAX_COLS];
    int n_res = 0;
    if (do_sweep) {
        printf("sweep (kernels launched directly; C: blocks per row, g: threads per row, b: "
               "threads per block, it: ITERS)\n\n");
        printf(
            "| op   |    cols | variant                      | regs |   smem | act. |     GB/s | "
            "x copy | check |\n");
        printf("|------|---------|------------------------------|------|--------|------|----------|"
               "-------|-------|\n");
    }
    for (int ci = 0; ci < n_cols; ci++) {
        const int64_t cols = cols_list[ci];
        const int64_t ld = cols + ld_pad;
        const int64_t rows = rows_opt > 0 && rows_opt < ELEMS / ld ? rows_opt : ELEMS / ld;
        for (int bwd = 0; bwd <= 1; bwd++) {
            sm_case s;
            memset(&s, 0, sizeof s);
            s.bwd = bwd, s.rows = rows, s.cols = cols, s.ld = ld_pad > 0 ? ld : 0;
            s.x = (uint16_t *)dx + offset, s.g = (uint16_t *)dg + offset;
            s.out = (uint16_t *)dout + offset;
            if (bwd) {
                /* s: the forward's output */
                sm_case f = {0, rows, cols, s.x, NULL, (uint16_t *)ds + offset, NULL, 0, 0, 0, s.ld};
                CHECK(run_lib(&f));
                s.x = f.out;
            }
            const double traffic = (bwd ? 3.0 : 2.0) * (double)(rows * cols) * 2;
            const double copy = copy_gbs(csrc, cdst, traffic);
            if (do_sweep & (1 << bwd))
                sweep(&s, x_host + offset, copy);
            result *r = &res[n_res++];
            memset(r, 0, sizeof *r);
            r->bwd = bwd, r->rows = rows, r->cols = cols, r->copy = copy;
            tk__op_trace_begin();
            r->ok = run_and_check(&s, run_lib, x_host + offset, 1);
            {
                const tk__op_trace *tr = tk__op_trace_get();
                tk_kernel_info info = TK_STRUCT_INIT(tk_kernel_info);
                if (tr->first != NULL && tk_kernel_get_info(tr->first, &info) == TK_OK) {
                    snprintf(r->kernel, sizeof r->kernel, "%s", info.entry);
                    r->regs = info.resources.registers;
                }
            }
            const float ms = median_ms(run_lib, &s, &r->host_us);
            r->gbs = ms > 0 ? traffic / ms / 1e6 : 0;
            r->us = ms * 1e3;
            all_ok &= r->ok && ms > 0;
            if (do_sweep) {
                printf("| %-4s | %7lld | %-28s |      |        |      | %8.1f | %5.2f | %-5s |\n",
                       bwd ? "bwd" : "fwd", (long long)cols, "(library's choice)", r->gbs,
                       r->gbs / copy, r->ok ? "pass" : "FAIL");
                fflush(stdout);
            }
        }
    }

    printf("\n| op | rows x cols | device us | GB/s | copy GB/s | x copy | host us/call | kernel "
           "| regs | check |\n");
    printf("|----|-------------|-----------|------|-----------|--------|--------------|--------|---"
           "---|-------|\n");
    const result *worst[2] = {NULL, NULL};
    int under[2] = {0, 0}, counted[2] = {0, 0};
    for (int i = 0; i < n_res; i++) {
        const result *r = &res[i];
        char shape[48];
        snprintf(shape, sizeof shape, "%lldx%lld", (long long)r->rows, (long long)r->cols);
        printf("| %s | %s | %.1f | %.1f | %.1f | %.3f | %.2f | %s | %d | %s |\n",
               r->bwd ? "softmax_xent_f16_bwd" : "softmax_f16_fwd", shape, r->us, r->gbs, r->copy,
               r->copy > 0 ? r->gbs / r->copy : 0.0, r->host_us, r->kernel, r->regs,
               r->ok ? "pass" : "FAIL");
        if (r->cols < 1024 || r->copy <= 0)
            continue;
        counted[r->bwd]++;
        under[r->bwd] += r->gbs / r->copy < 0.90;
        if (worst[r->bwd] == NULL || r->gbs / r->copy < worst[r->bwd]->gbs / worst[r->bwd]->copy)
            worst[r->bwd] = r;
    }
    for (int b = 0; b < 2; b++)
        if (worst[b] != NULL)
            printf("\nworst %s (cols >= 1024): %lldx%lld, %.3f x copy; under 0.90: %d of %d",
                   b ? "backward" : "forward", (long long)worst[b]->rows, (long long)worst[b]->cols,
                   worst[b]->gbs / worst[b]->copy, under[b], counted[b]);
    printf("\nsamples whose enqueue outlasted the sleep before them: %d of %d (after %d taken "
           "again)\n",
           g_tm.overran, g_tm.samples, g_tm.retaken);
    printf("\n%s\n", all_ok ? "all checks passed" : "SOME CHECKS FAILED");
    tk_mem_free(g_ctx, dx);
    tk_mem_free(g_ctx, dg);
    tk_mem_free(g_ctx, ds);
    tk_mem_free(g_ctx, dout);
    tk_mem_free(g_ctx, csrc);
    tk_mem_free(g_ctx, cdst);
    free(x_host), free(g_host);
    tk_context_destroy(g_ctx);
    return all_ok ? 0 : 1;
}
