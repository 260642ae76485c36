/*
 * bench/candidates: every configuration the tuner would try for a GEMM
 * call, timed at the call's own M (the tuner times a class's largest and
 * middle M), against cuBLAS in the same run. For finding where the
 * heuristics' plan is not the fastest the kernels offer, and by how much.
 *
 *   candidates [--top N] OP M N K [OP M N K]...     OP: fwd, grad_a, grad_b
 *
 * Per shape: the heuristics' plan (stable policy, tuning records not
 * consulted) and the tuner's candidates of it (tk__gemm_tune_candidate_plans),
 * compiled on one thread per processor (2 to 16, tk__gemm_parallel), then each timed as
 * device time: behind a sleep kernel, batches of 20 calls, the median of 7
 * batches, the operands rotated over 8 sets so that each call reads them
 * from device memory (bench_util.h). cuBLAS is timed first and last, same
 * types and layouts (cublas_ref.h). Prints the N fastest (default 14) with
 * their time, cuBLAS's time over theirs, their grid and ring stages.
 * Outputs are not checked here: a configuration taken from this goes
 * through test_gpu_gemm and bench/sweep, which check them. Exit 77 without
 * a GPU or cuBLAS.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "cublas_ref.h"
#include "ops/gemm/gemm_internal.h"

#define SETS 8
#define MAX_CANDS 256
#define BATCH 20
#define SAMPLES 7

typedef struct cand {
    gemm_plan p;
    gemm_desc d, rd;
    tk_kernel *k, *rk;
    tk_status st;
    char text[80];
    double us;
} cand;

/* Compiles (or finds) candidate i's kernels (tk__gemm_parallel). */
static void build_one(tk_context *ctx, void *user, int i)
{
    cand *c = user;
    c[i].st = tk__gemm_plan_kernels(ctx, &c[i].p, &c[i].d, &c[i].rd, &c[i].k, &c[i].rk);
}

typedef struct run {
    const cand *c; /* NULL: cuBLAS */
    tk_op op;
    int64_t M, N, K;
    void *a[SETS], *b[SETS], *out[SETS];
    int next;
} run;

static tk_status run_batch(void *user)
{
    run *r = user;
    tk_status st = TK_OK;
    for (int i = 0; i < BATCH && st == TK_OK; i++) {
        const int j = r->next++ % SETS;
        if (r->c != NULL)
            st = tk__gemm_exec(g_ctx, &r->c->p, r->c->k, r->c->rk, r->a[j], r->b[j], r->out[j],
                               NULL);
        else if (cublas_ref_gemm(r->op, r->M, r->N, r->K, r->a[j], r->b[j], r->out[j]) != 0)
            st = TK_INTERNAL;
    }
    return st;
}

/* Device microseconds per call: one batch to warm up, then the median of
 * SAMPLES batches. */
static double time_us(bench_timing *bt, run *r)
{
    double v[SAMPLES], dev, host;
    CHECK(bench_sample(bt, run_batch, r, &dev, &host));
    for (int s = 0; s < SAMPLES; s++) {
        CHECK(bench_sample(bt, run_batch, r, &dev, &host));
        v[s] = dev * 1000.0 / BATCH;
    }
    return bench_median(v, SAMPLES);
}

static int by_time(const void *x, const void *y)
{
    const cand *a = x, *b = y;
    return (a->us > b->us) - (a->us < b->us);
}

static int parse_op(const char *s, tk_op *op)
{
    if (strcmp(s, "fwd") == 0)
        *op = TK_OP_GEMM_F16_FWD;
    else if (strcmp(s, "grad_a") == 0)
        *op = TK_OP_GEMM_F16_GRAD_A;
    else if (strcmp(s, "grad_b") == 0)
        *op = TK_OP_GEMM_F16_GRAD_B;
    else
        return 0;
    return 1;
}

/* Fills n halves with values in about [-1, 1] (no zeros, no specials). */
static void fill(uint16_t *h, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        h[i] = (uint16_t)(0x3000u + (unsigned)(x >> 54) + ((x >> 20 & 1u) << 15));
    }
}

static void one_shape(bench_timing *bt, cand *c, tk_op op, const char *name, int64_t M, int64_t N,
                      int64_t K, int top)
{
    gemm_plan base, *plans = calloc(MAX_CANDS, sizeof *plans);
    run r;
    memset(&base, 0, sizeof base);
    memset(&r, 0, sizeof r);
    tk__gemm_plan_packed_heuristic(g_ctx, op, M, N, K, &base);
    const int n = plans != NULL ? tk__gemm_tune_candidate_plans(&base, plans, MAX_CANDS) : -1;
    if (n <= 0) {
        fprintf(stderr, "%s %lldx%lldx%lld: no candidates\n", name, (long long)M, (long long)N,
                (long long)K);
        free(plans);
        return;
    }
    for (int i = 0; i < n; i++) {
        gemm_cfg cfg;
        memset(&c[i], 0, sizeof c[i]);
        c[i].p = plans[i];
        tk__gemm_cfg_of_plan(&plans[i], &cfg);
        tk__gemm_cfg_text(&cfg, c[i].text, sizeof c[i].text);
    }
    free(plans);
    tk__gemm_parallel(g_ctx, n, build_one, c);

    /* every operand as large as the largest of A, B and C (in halves; C
     * may be fp32) */
    size_t big = (size_t)(M * N > M * K ? M * N : M * K);
    if ((size_t)(N * K) > big)
        big = (size_t)(N * K);
    uint16_t *h = malloc(big * 2);
    if (h == NULL) {
        fprintf(stderr, "out of host memory\n");
        exit(1);
    }
    r.op = op, r.M = M, r.N = N, r.K = K;
    for (int s = 0; s < SETS; s++) {
        r.a[s] = dalloc(big * 2);
        r.b[s] = dalloc(big * 2);
        r.out[s] = dalloc(big * 4);
        fill(h, big, 2u * (unsigned)s + 1u);
        CHECK(tk_mem_upload(g_ctx, r.a[s], h, big * 2));
        fill(h, big, 2u * (unsigned)s + 2u);
        CHECK(tk_mem_upload(g_ctx, r.b[s], h, big * 2));
    }
    free(h);
    r.c = NULL;
    const double cub0 = time_us(bt, &r);
    for (int i = 0; i < n; i++) {
        c[i].us = 1e30;
        if (c[i].st != TK_OK)
            continue;
        r.c = &c[i];
        c[i].us = time_us(bt, &r);
    }
    r.c = NULL;
    const double cub1 = time_us(bt, &r);
    printf("== %s %lldx%lldx%lld: cuBLAS %.2f / %.2f us (first / last); heuristics [%s] %.2f us, "
           "%.3f of cuBLAS; %d candidates\n",
           name, (long long)M, (long long)N, (long long)K, cub0, cub1, c[0].text, c[0].us,
           cub0 / c[0].us, n);
    qsort(c, (size_t)n, sizeof *c, by_time);
    for (int i = 0; i < n && i < top; i++) {
        int64_t blocks;
        unsigned threads, smem;
        if (c[i].st != TK_OK) {
            printf("  %-52s did not build: %s\n", c[i].text, tk_status_str(c[i].st));
            continue;
        }
        tk__gemm_launch_dims(&c[i].p, &blocks, &threads, &smem);
        printf("  %8.2f us  %.3f  %-52s blocks %lld, stages %d\n", c[i].us, cub0 / c[i].us,
               c[i].text, (long long)blocks, c[i].p.wg_stages);
    }
    for (int s = 0; s < SETS; s++) {
        tk_mem_free(g_ctx, r.a[s]);
        tk_mem_free(g_ctx, r.b[s]);
        tk_mem_free(g_ctx, r.out[s]);
    }
    fflush(stdout);
}

int main(int argc, char **argv)
{
    int top = 14, first = 1;
    if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        printf("usage: %s [--top N] OP M N K [OP M N K]...   (OP: fwd, grad_a, grad_b)\n\n"
               "Every configuration the GEMM tuner would try for each call, timed at\n"
               "its own M (device time, cold operands), against cuBLAS; the N fastest\n"
               "(default 14). Exit 77 without a GPU or cuBLAS.\n",
               argv[0]);
        return 0;
    }
    if (argc > 2 && strcmp(argv[1], "--top") == 0)
        top = atoi(argv[2]), first = 3;
    if (top < 1 || argc - first < 4 || (argc - first) % 4 != 0) {
        fprintf(stderr, "bad arguments (see %s --help)\n", argv[0]);
        return 2;
    }
    for (int a = first; a < argc; a += 4) {
        tk_op op;
        if (!parse_op(argv[a], &op) || atoll(argv[a + 1]) < 1 || atoll(argv[a + 2]) < 1 ||
            atoll(argv[a + 3]) < 1) {
            fprintf(stderr, "bad shape '%s %s %s %s' (see %s --help)\n", argv[a], argv[a + 1],
                    argv[a + 2], argv[a + 3], argv[0]);
            return 2;
        }
    }
    const int open_rc = bench_open_gpu(TK_POLICY_STABLE);
    if (open_rc != 0)
        return open_rc;
    if (!cublas_ref_open()) {
        printf("skipped: cuBLAS not loadable (libcublas.so.13 / .12): no reference\n");
        tk_context_destroy(g_ctx);
        return 77;
    }
    bench_timing bt;
    memset(&bt, 0, sizeof bt);
    cand *c = calloc(MAX_CANDS, sizeof *c);
    if (c == NULL)
        return 1;
    for (int a = first; a < argc; a += 4) {
        tk_op op = TK_OP_GEMM_F16_FWD;
        (void)parse_op(argv[a], &op); /* checked above */
        one_shape(&bt, c, op, argv[a], atoll(argv[a + 1]), atoll(argv[a + 2]), atoll(argv[a + 3]),
                  top);
    }
    free(c);
    tk_context_destroy(g_ctx);
    return 0;
}
