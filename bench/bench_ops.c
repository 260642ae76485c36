/*
 * bench/ops (bench_ops.c): every operator at its benchmark shape sets (square GEMMs 1024-8192, the
 * model's skinny and expert shapes, softmax widths, the embedding), in one run
 * against its reference ceiling:
 *   GEMMs      against cuBLAS (dlopen'd; cublasGemmEx, fp16 in, fp32 compute,
 *              the same NN / NT / TN layouts mapped onto column-major),
 *   softmax,
 *   embedding  against the device-to-device copy bandwidth of a 16-byte copy
 *              kernel compiled through the library (bytes read + written).
 * Each figure is the median over many samples timed with device events
 * (tk_time_on_stream), each sample a short batch of back-to-back runs (so
 * that host enqueue cost overlaps device work, as in a training loop), after
 * a warm-up, over rotating input buffers when one set would fit in L2. Correctness is checked in
 * the same run: GEMMs on 300 random outputs against fp64 dot products, softmax on sampled rows
 * against the CPU reference, embedding forward on sampled rows (exact), embedding backward in full
 * against the CPU reference.
 *
 *   ops [--gemm-only | --mem-only] [--quick] [--skinny] [--policy exact|stable|generic]
 *   (--skinny: only the GEMM shapes that fill few tiles: 1024^3 and M <= 512)
 *
 * Prints one table; exit 0 when every check passed, 1 otherwise, 77 without
 * a device. PyTorch's figures for the memory-bound ops: bench/torch_ref.py.
 */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "cublas_ref.h"
#include "tokitai/ops.h"
#include "tokitai/tokitai.h"

/* ------------------------------------------------------------ utilities */

static uint64_t rng = 0x853c49e6748fea9bull;
static uint64_t next_u64(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void fill_f16(uint16_t *v, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++)
        v[i] = tk_f32_to_f16(scale * (float)((int)(next_u64() % 4096) - 2048) / 2048.0f);
}

/* Median over `iters` samples of the per-run time, each sample one event
 * pair around `batch` back-to-back runs (after `warm` untimed ones). Batching
 * keeps the device busy while the host enqueues the next run, as in a
 * training loop: with one run per event pair, the host's enqueue cost (the
 * op's validation and kernel lookup, or cuBLAS's heuristics) would be timed
 * as device idle time. */
typedef struct timed {
    tk_status (*fn)(void *user, int rot);
    void *user;
    int rot; /* rotation counter, advanced per run */
    int batch;
} timed;

static tk_status timed_call(void *user)
{
    timed *t = user;
    for (int i = 0; i < t->batch; i++) {
        tk_status st = t->fn(t->user, t->rot++);
        if (st != TK_OK)
            return st;
    }
    return TK_OK;
}

static float median_ms(tk_status (*fn)(void *, int), void *user, int warm, int iters, int batch)
{
    timed t = {fn, user, 0, 1};
    float *v = malloc((size_t)iters * sizeof *v), ms = 0, med;
    for (int i = 0; i < warm; i++)
        CHECK(timed_call(&t));
    CHECK(tk_stream_sync(g_ctx, NULL));
    t.batch = batch;
    for (int i = 0; i < iters; i++) {
        CHECK(tk_time_on_stream(g_ctx, NULL, timed_call, &t, &ms));
        v[i] = ms / (float)batch;
    }
    qsort(v, (size_t)iters, sizeof *v, bench_cmp_float);
    med = v[iters / 2];
    free(v);
    return med;
}

/* Runs per event pair: enough for about 0.2 ms of device work, 1..20. */
static int batch_for(double est_ms)
{
    int b = (int)ceil(0.2 / (est_ms > 1e-4 ? est_ms : 1e-4));
    return b < 1 ? 1 : b > 20 ? 20 : b;
}

/* Samples: about 0.3 s of device time in all, 10..100 of them. */
static int iters_for(double est_ms)
{
    const double per_sample = est_ms * batch_for(est_ms);
    int n = (int)(300.0 / (per_sample > 1e-3 ? per_sample : 1e-3));
    return n < 10 ? 10 : n > 100 ? 100 : n;
}

/* Copies of a working set of `bytes` needed so that rotating among them
 * exceeds 4x a 50-60 MB L2. */
static int rotations(double bytes, double max_total)
{
    int r = (int)ceil(256e6 / bytes);
    if (r < 1)
        r = 1;
    if (r > 8)
        r = 8;
    while (r > 1 && r * bytes > max_total)
        r--;
    return r;
}

static void row(const char *op, const char *shape, double ms, double rate, const char *unit,
                double ref, const char *ref_what, int ok)
{
    printf("| %-18s | %-20s | %9.4f | %8.1f %-6s | %8.1f %-11s | %5.2f | %-5s |\n", op, shape, ms,
           rate, unit, ref, ref_what, ref > 0 ? rate / ref : 0.0, ok ? "pass" : "FAIL");
    fflush(stdout);
}

/* ---------------------------------------------------------------- GEMM */

typedef struct gemm_case {
    tk_op op;
    int64_t M, N, K;
    int R;
    void **x, **y, **out; /* per rotation */
    int64_t x_elems, y_elems, out_elems;
} gemm_case;

static tk_status run_ours(void *user, int rot)
{
    gemm_case *g = user;
    const int r = rot % g->R;
    switch (g->op) {
    case TK_OP_GEMM_F16_FWD:
        return tk_gemm_f16_fwd(g_ctx, g->M, g->N, g->K, g->x[r], 0, g->y[r], 0, g->out[r], 0, NULL);
    case TK_OP_GEMM_F16_GRAD_A:
        return tk_gemm_f16_grad_a(g_ctx, g->M, g->N, g->K, g->x[r], 0, g->y[r], 0, g->out[r], 0,
                                  NULL);
    default:
        return tk_gemm_f16_grad_b(g_ctx, g->M, g->N, g->K, g->x[r], 0, g->y[r], 0, g->out[r], 0,
                                  NULL);
    }
}

static tk_status run_cublas(void *user, int rot)
{
    gemm_case *g = user;
    const int r = rot % g->R;
    return cublas_ref_gemm(g->op, g->M, g->N, g->K, g->x[r], g->y[r], g->out[r]) == 0
               ? TK_OK
               : TK_LAUNCH_FAILED;
}

/* 300 sampled outputs of rotation 0 against fp64 dot products. */
static int gemm_check(gemm_case *g, const uint16_t *x, const uint16_t *y)
{
    const int out16 = g->op != TK_OP_GEMM_F16_FWD;
    const int64_t rows = g->op == TK_OP_GEMM_F16_GRAD_B ? g->K : g->M;
    const int64_t cols = g->op == TK_OP_GEMM_F16_GRAD_A ? g->K : g->N;
    const int64_t len = g->op == TK_OP_GEMM_F16_FWD      ? g->K
                        : g->op == TK_OP_GEMM_F16_GRAD_A ? g->N
                                                         : g->M;
    const size_t ob = (size_t)g->out_elems * (out16 ? 2 : 4);
    unsigned char *out = malloc(ob);
    int bad = 0;
    CHECK(tk_mem_set(g_ctx, g->out[0], 0xFF, ob));
    CHECK(run_ours(g, 0));
    CHECK(tk_stream_sync(g_ctx, NULL));
    CHECK(tk_mem_download(g_ctx, out, g->out[0], ob));
    for (int t = 0; t < 300; t++) {
        const int64_t r = (int64_t)(next_u64() % (uint64_t)rows);
        const int64_t c = (int64_t)(next_u64() % (uint64_t)cols);
        double s = 0, a = 0, got;
        for (int64_t i = 0; i < len; i++) {
            double u, v;
            if (g->op == TK_OP_GEMM_F16_FWD) {
                u = tk_f16_to_f32(x[r * g->K + i]);
                v = tk_f16_to_f32(y[i * g->N + c]);
            } else if (g->op == TK_OP_GEMM_F16_GRAD_A) {
                u = tk_f16_to_f32(x[r * g->N + i]);
                v = tk_f16_to_f32(y[c * g->N + i]);
            } else {
                u = tk_f16_to_f32(x[i * g->K + r]);
                v = tk_f16_to_f32(y[i * g->N + c]);
            }
            s += u * v;
            a += fabs(u * v);
        }
        if (out16) {
            uint16_t h;
            memcpy(&h, out + (size_t)(r * cols + c) * 2, 2);
            got = tk_f16_to_f32(h);
        } else {
            float f;
            memcpy(&f, out + (size_t)(r * cols + c) * 4, 4);
            got = f;
        }
        if (!(fabs(got - s) <= 1e-5 * a + 1e-6 + (out16 ? 1e-3 * fabs(s) : 0.0)))
            bad++;
    }
    free(out);
    return bad == 0;
}

static int bench_gemm(tk_op op, int64_t M, int64_t N, int64_t K)
{
    gemm_case g;
    const int out16 = op != TK_OP_GEMM_F16_FWD;
    char shape[64];
    uint16_t *x, *y;
    int ok;

    memset(&g, 0, sizeof g);
    g.op = op, g.M = M, g.N = N, g.K = K;
    /* op inputs: fwd A[M,K] B[K,N]; grad_a gC[M,N] B[K,N]; grad_b A[M,K] gC[M,N] */
    g.x_elems = op == TK_OP_GEMM_F16_GRAD_A ? M * N : M * K;
    g.y_elems = op == TK_OP_GEMM_F16_GRAD_B ? M * N : K * N;
    g.out_elems = op == TK_OP_GEMM_F16_FWD ? M * N : op == TK_OP_GEMM_F16_GRAD_A ? M * K : K * N;
    const double set_bytes =
        (double)(g.x_elems + g.y_elems) * 2 + (double)g.out_elems * (out16 ? 2 : 4);
    g.R = rotations(set_bytes, 8e9);
    g.x = calloc((size_t)g.R, sizeof *g.x);
    g.y = calloc((size_t)g.R, sizeof *g.y);
    g.out = calloc((size_t)g.R, sizeof *g.out);
    x = malloc((size_t)g.x_elems * 2);
    y = malloc((size_t)g.y_elems * 2);
    fill_f16(x, (size_t)g.x_elems, 1.0f);
    fill_f16(y, (size_t)g.y_elems, 1.0f);
    for (int r = 0; r < g.R; r++) {
        g.x[r] = dalloc((size_t)g.x_elems * 2);
        g.y[r] = dalloc((size_t)g.y_elems * 2);
        g.out[r] = dalloc((size_t)g.out_elems * (out16 ? 2 : 4));
        CHECK(tk_mem_upload(g_ctx, g.x[r], x, (size_t)g.x_elems * 2));
        CHECK(tk_mem_upload(g_ctx, g.y[r], y, (size_t)g.y_elems * 2));
    }
    const double flops = 2.0 * (double)M * (double)N * (double)K;
    const double est = flops / 300e9; /* ms at ~300 TFLOP/s */
    const int iters = iters_for(est), batch = batch_for(est);
    double ref_tf = 0;
    if (cub.handle != NULL) {
        const float ms = median_ms(run_cublas, &g, 3, iters, batch);
        ref_tf = flops / ms / 1e9;
    }
    const float ms = median_ms(run_ours, &g, 3, iters, batch);
    ok = gemm_check(&g, x, y);
    snprintf(shape, sizeof shape, "%lldx%lldx%lld", (long long)M, (long long)N, (long long)K);
    row(tk_op_name(op), shape, ms, flops / ms / 1e9, "TF/s", ref_tf, "cuBLAS TF/s", ok);
    for (int r = 0; r < g.R; r++) {
        tk_mem_free(g_ctx, g.x[r]);
        tk_mem_free(g_ctx, g.y[r]);
        tk_mem_free(g_ctx, g.out[r]);
    }
    free(g.x), free(g.y), free(g.out), free(x), free(y);
    return ok;
}

/* -------------------------------------------------------- copy ceiling */

/* Four independent 16-byte loads in flight per thread before the stores. */
static const char copy_src[] =
    "extern \"C\" __global__ void tk_bench_copy(const uint4 *__restrict__ s, uint4 *__restrict__ "
    "d,\n"
    "                                           unsigned long long n) {\n"
    "    const unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;\n"
    "    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;\n"
    "    for (; i + 3 * step < n; i += 4 * step) {\n"
    "        const uint4 a = s[i], b = s[i + step], c = s[i + 2 * step], e = s[i + 3 * step];\n"
    "        d[i] = a; d[i + step] = b; d[i + 2 * step] = c; d[i + 3 * step] = e;\n"
    "    }\n"
    "    for (; i < n; i += step) d[i] = s[i];\n"
    "}\n";

typedef struct copy_case {
    tk_kernel *k;
    void *src, *dst;
    unsigned long long n;
    unsigned blocks;
} copy_case;

static tk_status run_copy(void *user, int rot)
{
    copy_case *c = user;
    const unsigned grid[3] = {c->blocks, 1, 1}, block[3] = {256, 1, 1};
    void *args[] = {&c->src, &c->dst, &c->n};
    (void)rot;
    return tk_kernel_launch(g_ctx, c->k, grid, block, 0, NULL, args);
}

static double copy_bandwidth(void)
{
    copy_case c;
    tk_kernel_desc d;
    const size_t bytes = (size_t)1 << 30;
    memset(&d, 0, sizeof d);
    d.source = copy_src;
    d.entry = "tk_bench_copy";
    CHECK(tk_kernel_get(g_ctx, &d, &c.k));
    c.src = dalloc(bytes);
    c.dst = dalloc(bytes);
    CHECK(tk_mem_set(g_ctx, c.src, 0x3C, bytes));
    c.n = bytes / 16;
    c.blocks = 132 * 16;
    const float ms = median_ms(run_copy, &c, 3, 30, 1);
    /* the copy really happened: head and tail of the destination */
    unsigned char probe[8192];
    int ok = 1;
    CHECK(tk_mem_download(g_ctx, probe, c.dst, 4096));
    CHECK(tk_mem_download(g_ctx, probe + 4096, (unsigned char *)c.dst + bytes - 4096, 4096));
    for (size_t i = 0; i < sizeof probe; i++)
        ok &= probe[i] == 0x3C;
    tk_mem_free(g_ctx, c.src);
    tk_mem_free(g_ctx, c.dst);
    const double gbs = 2.0 * (double)bytes / ms / 1e6;
    row("d2d copy", "1 GiB", ms, gbs, "GB/s", 0, "-", ok);
    return gbs;
}

/* ------------------------------------------------------------- softmax */

typedef struct sm_case {
    int64_t rows, cols;
    int R;
    void **in, **out, **g; /* bwd: in = s, g = upstream gradient */
} sm_case;

static tk_status run_sm_fwd(void *user, int rot)
{
    sm_case *s = user;
    const int r = rot % s->R;
    return tk_softmax_f16_fwd(g_ctx, s->rows, s->cols, s->in[r], 0, s->out[r], 0, NULL);
}

static tk_status run_sm_bwd(void *user, int rot)
{
    sm_case *s = user;
    const int r = rot % s->R;
    return tk_softmax_xent_f16_bwd(g_ctx, s->rows, s->cols, s->in[r], 0, s->g[r], 0, s->out[r], 0,
                                   NULL);
}

/* Sampled rows against the CPU reference. */
static int sm_check(sm_case *s, int bwd, const uint16_t *in, const uint16_t *g)
{
    const size_t n = (size_t)(s->rows * s->cols);
    uint16_t *out = malloc(n * 2), *want = malloc((size_t)s->cols * 2);
    uint16_t *s_host = NULL;
    int bad = 0;
    CHECK(tk_mem_set(g_ctx, s->out[0], 0xFF, n * 2));
    CHECK(bwd ? run_sm_bwd(s, 0) : run_sm_fwd(s, 0));
    CHECK(tk_stream_sync(g_ctx, NULL));
    CHECK(tk_mem_download(g_ctx, out, s->out[0], n * 2));
    if (bwd) {
        s_host = malloc(n * 2);
        CHECK(tk_mem_download(g_ctx, s_host, s->in[0], n * 2));
    }
    for (int t = 0; t < 32; t++) {
        const int64_t r = (int64_t)(next_u64() % (uint64_t)s->rows);
        const size_t off = (size_t)(r * s->cols);
        double maxabs = 0;
        if (bwd)
            tk_ref_softmax_xent_f16_bwd(1, s->cols, s_host + off, g + off, want);
        else
            tk_ref_softmax_f16_fwd(1, s->cols, in + off, want);
        for (int64_t c = 0; c < s->cols; c++)
            maxabs = fmax(maxabs, fabs(tk_f16_to_f32(want[c])));
        for (int64_t c = 0; c < s->cols; c++) {
            const double w = tk_f16_to_f32(want[c]), v = tk_f16_to_f32(out[off + (size_t)c]);
            const double tol = bwd ? 1e-3 * maxabs + 1e-2 * fabs(w) : 1e-6 + 2e-3 * fabs(w);
            if (!(fabs(v - w) <= tol))
                bad++;
        }
    }
    free(out), free(want), free(s_host);
    return bad == 0;
}

static int bench_softmax(int64_t rows, int64_t cols, double copy_gbs)
{
    sm_case s;
    char shape[64];
    const size_t n = (size_t)(rows * cols);
    uint16_t *in = malloc(n * 2), *g = malloc(n * 2);
    int ok1, ok2;

    memset(&s, 0, sizeof s);
    s.rows = rows, s.cols = cols;
    s.R = rotations(3.0 * (double)n * 2, 6e9);
    s.in = calloc((size_t)s.R, sizeof *s.in);
    s.out = calloc((size_t)s.R, sizeof *s.out);
    s.g = calloc((size_t)s.R, sizeof *s.g);
    fill_f16(in, n, 8.0f);
    fill_f16(g, n, 1.0f);
    for (int r = 0; r < s.R; r++) {
        s.in[r] = dalloc(n * 2);
        s.out[r] = dalloc(n * 2);
        s.g[r] = dalloc(n * 2);
        CHECK(tk_mem_upload(g_ctx, s.in[r], in, n * 2));
        CHECK(tk_mem_upload(g_ctx, s.g[r], g, n * 2));
    }
    snprintf(shape, sizeof shape, "%lldx%lld", (long long)rows, (long long)cols);
    const double fwd_bytes = 2.0 * (double)n * 2, bwd_bytes = 3.0 * (double)n * 2;
    const int iters = iters_for(fwd_bytes / 3e9), batch = batch_for(fwd_bytes / 3e9);
    float ms = median_ms(run_sm_fwd, &s, 3, iters, batch);
    ok1 = sm_check(&s, 0, in, NULL);
    row("softmax_f16_fwd", shape, ms, fwd_bytes / ms / 1e6, "GB/s", copy_gbs, "copy GB/s", ok1);
    /* backward on s = the forward's output (rotation r's) */
    for (int r = 0; r < s.R; r++) {
        CHECK(tk_softmax_f16_fwd(g_ctx, rows, cols, s.in[r], 0, s.out[r], 0, NULL));
        void *t = s.in[r];
        s.in[r] = s.out[r];
        s.out[r] = t;
    }
    ms = median_ms(run_sm_bwd, &s, 3, iters, batch);
    ok2 = sm_check(&s, 1, NULL, g);
    row("softmax_xent_bwd", shape, ms, bwd_bytes / ms / 1e6, "GB/s", copy_gbs, "copy GB/s", ok2);
    for (int r = 0; r < s.R; r++) {
        tk_mem_free(g_ctx, s.in[r]);
        tk_mem_free(g_ctx, s.out[r]);
        tk_mem_free(g_ctx, s.g[r]);
    }
    free(s.in), free(s.out), free(s.g), free(in), free(g);
    return ok1 && ok2;
}

/* ----------------------------------------------------------- embedding */

/* Index sets, outputs and upstream gradients rotate (R of each, different
 * random indices); the table and grad_weight are one each. */
typedef struct emb_case {
    int64_t V, D, Q;
    int R;
    void *weight, *grad_w;
    void *out[8], *grad_out[8];
    int32_t *idx[8];
    unsigned flags;
} emb_case;

static tk_status run_emb_fwd(void *user, int rot)
{
    emb_case *e = user;
    const int r = rot % e->R;
    return tk_embedding_f16_fwd(g_ctx, e->V, e->D, e->weight, e->Q, e->idx[r], e->out[r], NULL,
                                NULL);
}

static tk_status run_emb_bwd(void *user, int rot)
{
    emb_case *e = user;
    const int r = rot % e->R;
    return tk_embedding_f16_bwd(g_ctx, e->V, e->D, e->grad_w, e->Q, e->idx[r], e->grad_out[r],
                                e->flags, NULL, NULL);
}

static int bench_embedding(int64_t V, int64_t D, int64_t Q, double copy_gbs)
{
    emb_case e;
    char shape[64];
    const size_t wn = (size_t)(V * D), qn = (size_t)(Q * D);
    uint16_t *w = malloc(wn * 2), *go = malloc(qn * 2), *out = malloc(qn * 2);
    uint16_t *gw0 = malloc(wn * 2), *gw = malloc(wn * 2), *want = malloc(wn * 2);
    int32_t *idx = malloc((size_t)Q * 4);
    int ok_f = 1, ok_b = 1, ok_d = 1;

    memset(&e, 0, sizeof e);
    e.V = V, e.D = D, e.Q = Q;
    e.R = rotations(2.0 * (double)qn * 2, 4e9);
    fill_f16(w, wn, 1.0f);
    fill_f16(go, qn, 1.0f);
    fill_f16(gw0, wn, 0.01f);
    e.weight = dalloc(wn * 2);
    e.grad_w = dalloc(wn * 2);
    CHECK(tk_mem_upload(g_ctx, e.weight, w, wn * 2));
    CHECK(tk_mem_upload(g_ctx, e.grad_w, gw0, wn * 2));
    /* set 0's indices stay in idx for the checks */
    for (int r = e.R - 1; r >= 0; r--) {
        for (int64_t q = 0; q < Q; q++)
            idx[q] = (int32_t)(next_u64() % (uint64_t)V);
        e.out[r] = dalloc(qn * 2);
        e.grad_out[r] = dalloc(qn * 2);
        e.idx[r] = dalloc((size_t)Q * 4);
        CHECK(tk_mem_upload(g_ctx, e.grad_out[r], go, qn * 2));
        CHECK(tk_mem_upload(g_ctx, e.idx[r], idx, (size_t)Q * 4));
    }
    snprintf(shape, sizeof shape, "%lldx%lld q%lld", (long long)V, (long long)D, (long long)Q);

    /* forward: rows read + rows written + indices */
    const double fb = 2.0 * (double)qn * 2 + (double)Q * 4;
    float ms = median_ms(run_emb_fwd, &e, 3, iters_for(fb / 3e9), batch_for(fb / 3e9));
    CHECK(tk_mem_set(g_ctx, e.out[0], 0xFF, qn * 2));
    CHECK(run_emb_fwd(&e, 0));
    CHECK(tk_stream_sync(g_ctx, NULL));
    CHECK(tk_mem_download(g_ctx, out, e.out[0], qn * 2));
    for (int64_t q = 0; q < Q; q++)
        if (memcmp(out + q * D, w + (int64_t)idx[q] * D, (size_t)D * 2) != 0)
            ok_f = 0;
    row("embedding_fwd", shape, ms, fb / ms / 1e6, "GB/s", copy_gbs, "copy GB/s", ok_f);

    /* backward: grad_out read + read-modify-write of the touched rows (<= Q)
     * + indices: a lower bound on the bytes any implementation moves. */
    const double bb = 3.0 * (double)qn * 2 + (double)Q * 4;
    for (int det = 0; det < 2; det++) {
        e.flags = det ? TK_EMBEDDING_DETERMINISTIC : 0;
        ms = median_ms(run_emb_bwd, &e, 3, iters_for(bb / 3e9), batch_for(bb / 3e9));
        CHECK(tk_mem_upload(g_ctx, e.grad_w, gw0, wn * 2));
        CHECK(run_emb_bwd(&e, 0));
        CHECK(tk_stream_sync(g_ctx, NULL));
        CHECK(tk_mem_download(g_ctx, gw, e.grad_w, wn * 2));
        memcpy(want, gw0, wn * 2);
        tk_ref_embedding_f16_bwd(V, D, want, Q, idx, go, NULL);
        int ok = 1;
        for (size_t i = 0; i < wn; i++) {
            const double a = tk_f16_to_f32(gw[i]), b = tk_f16_to_f32(want[i]);
            if (!(fabs(a - b) <= 1e-3 * fabs(b) + 1e-4))
                ok = 0;
        }
        if (det)
            ok_d = ok;
        else
            ok_b = ok;
        row(det ? "embedding_bwd det" : "embedding_bwd", shape, ms, bb / ms / 1e6, "GB/s", copy_gbs,
            "copy GB/s", ok);
    }
    tk_mem_free(g_ctx, e.weight);
    tk_mem_free(g_ctx, e.grad_w);
    for (int r = 0; r < e.R; r++) {
        tk_mem_free(g_ctx, e.out[r]);
        tk_mem_free(g_ctx, e.grad_out[r]);
        tk_mem_free(g_ctx, e.idx[r]);
    }
    free(w), free(go), free(out), free(gw0), free(gw), free(want), free(idx);
    return ok_f && ok_b && ok_d;
}

/* ---------------------------------------------------------------- main */

int main(int argc, char **argv)
{
    int gemm = 1, mem = 1, quick = 0, skinny = 0, all_ok = 1;
    tk_policy policy = TK_POLICY_EXACT;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--gemm-only") == 0)
            mem = 0;
        else if (strcmp(argv[i], "--mem-only") == 0)
            gemm = 0;
        else if (strcmp(argv[i], "--quick") == 0)
            quick = 1;
        else if (strcmp(argv[i], "--skinny") == 0)
            skinny = 1;
        else if (strcmp(argv[i], "--policy") == 0 && i + 1 < argc) {
            const char *v = argv[++i];
            policy = strcmp(v, "generic") == 0  ? TK_POLICY_GENERIC
                     : strcmp(v, "stable") == 0 ? TK_POLICY_STABLE
                                                : TK_POLICY_EXACT;
        } else {
            fprintf(stderr,
                    "usage: %s [--gemm-only | --mem-only] [--quick] [--skinny] [--policy "
                    "exact|stable|generic]\n",
                    argv[0]);
            return 2;
        }
    }
    /* Sync builds: every figure is the specialised kernel's (bench_open_gpu) */
    const int open_rc = bench_open_gpu(policy);
    if (open_rc != 0)
        return open_rc;
    printf("device %s (%s), compiler %s, policy %s\n\n", tk_context_target(g_ctx),
           tk_context_backend_name(g_ctx), tk_context_compiler(g_ctx),
           policy == TK_POLICY_EXACT    ? "exact"
           : policy == TK_POLICY_STABLE ? "stable"
                                        : "generic");
    printf("| %-18s | %-20s | %9s | %-15s | %-20s | %5s | %-5s |\n", "op", "shape", "ms", "rate",
           "reference", "ratio", "check");
    printf("|--------------------|----------------------|-----------|-----------------|------------"
           "----------|-------|-------|\n");

    if (gemm) {
        static const int64_t shapes[][3] = {
            {1024, 1024, 1024}, {2048, 2048, 2048}, {4096, 4096, 4096}, {8192, 8192, 8192},
            {16, 4096, 1024},   {128, 4096, 4096},  {512, 1024, 8192},  {512, 8192, 2048},
        };
        const int n = quick ? 3 : (int)(sizeof shapes / sizeof shapes[0]);
        if (!cublas_ref_open())
            printf("(cuBLAS not loadable: no reference column for the GEMMs)\n");
        for (int s = 0; s < n; s++) {
            if (skinny && s >= 1 && s <= 3)
                continue;
            for (int op = TK_OP_GEMM_F16_FWD; op <= TK_OP_GEMM_F16_GRAD_B; op++)
                all_ok &= bench_gemm((tk_op)op, shapes[s][0], shapes[s][1], shapes[s][2]);
        }
    }
    if (mem) {
        const double copy = copy_bandwidth();
        all_ok &= bench_softmax(4096, 32000, copy);
        if (!quick) {
            all_ok &= bench_softmax(16384, 4096, copy);
            all_ok &= bench_softmax(65536, 1024, copy);
        }
        all_ok &= bench_embedding(50304, 1024, 16384, copy);
    }
    printf("\n%s\n", all_ok ? "all checks passed" : "SOME CHECKS FAILED");
    tk_context_destroy(g_ctx);
    return all_ok ? 0 : 1;
}
