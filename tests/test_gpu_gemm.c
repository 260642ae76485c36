/* The three GEMM operators on the GPU against fp64 dot products: shapes from
 * 1x1x1 through primes, non-multiples of every tile, skinny token counts and
 * >= 4096 (sampled), both policies, padded leading dimensions (the padding
 * must stay untouched) and outputs poisoned before every run. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jit/engine.h"
#include "ops/gemm/gemm_internal.h"
#include "tk_test.h"
#include "tokitai/ops.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint64_t next_u64(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* fp16 bit patterns of uniform values in [-1, 1) */
static uint16_t *random_f16(size_t n)
{
    uint16_t *v = malloc(n * sizeof *v);
    ck_assert_msg(v != NULL, "out of host memory for %zu elements", n);
    for (size_t i = 0; i < n; i++)
        v[i] = tk_f32_to_f16((float)((int)(next_u64() % 4096) - 2048) / 2048.0f);
    return v;
}

typedef struct shape {
    int64_t M, N, K;
    int pad_in;  /* 1: input ld = cols + 5 (odd: the scalar-load variant);
                  * 2: ld = cols rounded up to a multiple of 8, + 8 (16-byte
                  * aligned rows with padding: the cp.async / wgmma kernels) */
    int pad_out; /* output ld = cols + 3 */
    int sampled; /* check 400 random outputs instead of all */
} shape;

static const shape shapes[] = {
    {1, 1, 1, 0, 1, 0},
    {17, 31, 13, 0, 1, 0},
    {127, 509, 257, 0, 0, 0},
    {129, 65, 33, 1, 1, 0},
    {257, 129, 100, 0, 1, 0},
    {200, 300, 40, 1, 1, 0},
    {16, 4096, 1024, 0, 0, 0},
    {1000, 1000, 1000, 0, 1, 0},
    /* Split-K (few output tiles, long K: src/ops/gemm/plan.c plan_split): on sm_90 the
     * TMA kernel with 128x128 tiles in each layout's turn (kernel shape
     * 130 x 300 x 2049: edges in M, N and K, 4 splits), then the mma.sync
     * scalar-load variant (kernel 40 x 1000 x 3001, unaligned). */
    {130, 300, 2049, 2, 1, 0},
    {130, 2049, 300, 2, 1, 0},
    {2049, 300, 130, 2, 1, 0},
    {40, 1000, 3001, 1, 1, 0},
    /* grad_a: a long reduction's split on 64-row tiles (kernel 100 x 512 x
     * 9000, 8 tiles of 64 x 128 split 8); fwd: a reduction of 4096 split 5
     * on 128 x 128 tiles rather than 2 on 128 x 64 (346 x 1024 x 4096) */
    {100, 9000, 512, 0, 1, 1},
    {346, 1024, 4096, 0, 0, 1},
    /* Enough 128-row tiles for the sm_90a wgmma kernel (on Hopper) in each
     * op's turn (kernel M = N = 1500, K = 72: edges in M, N and K), checked
     * in full (128x128 wgmma tiles); then 4097x4099x4103 (128x256 tiles,
     * every edge). */
    {1500, 1500, 72, 2, 1, 0},
    {1500, 72, 1500, 2, 0, 0},
    {72, 1500, 1500, 2, 1, 0},
    {512, 1024, 8192, 0, 0, 1},
    {4097, 4099, 4103, 2, 1, 1},
    {4096, 4096, 4096, 0, 0, 1},
    /* the forward's swapped 256-row tiles in pairs sharing the weight tile
     * on the persistent grid (plan.c plan_pair256: 263 tokens in two
     * columns of 136, 157 rows of tiles, the last partial, K = 1000 with a
     * partial K step); 64-row swapped tiles twice as wide (swap64_wide: fwd
     * 1267 x 1024 x 3072 on 64 x 160, grad_a 1121 x 2816 x 1024 on 64 x
     * 144); one round of swapped 128-row tiles narrowed to fit it
     * (swap_round_narrow: fwd 1625 x 1024 x 3072 on 128 x 104, grad_a
     * 2100 x 3072 x 1024 on 128 x 136 with the TMA-store epilogue); the
     * same tiles in steps of 8 on a reduction of 4096 with the swapped A
     * K-major (swap_step8: grad_a 1380 x 4096 x 1024 on 128 x 88, 1920 x
     * 4096 x 1024 on 128 x 120) */
    {263, 40000, 1000, 0, 0, 1},
    {1267, 1024, 3072, 0, 0, 1},
    {1121, 2816, 1024, 0, 0, 1},
    {1625, 1024, 3072, 0, 0, 1},
    {2100, 3072, 1024, 0, 0, 1},
    {1380, 4096, 1024, 0, 0, 1},
    {1920, 4096, 1024, 0, 0, 1},
};

/* Operand access in the op's own terms: fwd C = A B; grad_a gA = gC B^T;
 * grad_b gB = A^T gC. x / y are the op's two inputs with their lds. */
typedef struct problem {
    tk_op op;
    int64_t M, N, K;
    int64_t rows, cols;  /* output */
    int64_t xr, xc, xld; /* input 0 [xr, xc] */
    int64_t yr, yc, yld; /* input 1 */
    int64_t ld_out;
    const uint16_t *x, *y;
    const float *xf, *yf; /* fp32 copies for full checks (NULL: convert per use) */
} problem;

static double xv(const problem *p, int64_t i)
{
    return p->xf != NULL ? p->xf[i] : tk_f16_to_f32(p->x[i]);
}

static double yv(const problem *p, int64_t i)
{
    return p->yf != NULL ? p->yf[i] : tk_f16_to_f32(p->y[i]);
}

static float *to_f32(const uint16_t *h, size_t n)
{
    float *f = malloc(n * sizeof *f);
    ck_assert(f != NULL);
    for (size_t i = 0; i < n; i++)
        f[i] = tk_f16_to_f32(h[i]);
    return f;
}

static void want_at(const problem *p, int64_t r, int64_t c, double *want, double *absdot)
{
    double s = 0, a = 0;
    int64_t len = p->op == TK_OP_GEMM_F16_FWD ? p->K : p->op == TK_OP_GEMM_F16_GRAD_A ? p->N : p->M;
    for (int64_t i = 0; i < len; i++) {
        double u, v;
        switch (p->op) {
        case TK_OP_GEMM_F16_FWD: /* A[r,i] B[i,c] */
            u = xv(p, r * p->xld + i);
            v = yv(p, i * p->yld + c);
            break;
        case TK_OP_GEMM_F16_GRAD_A: /* gC[r,i] B[c,i] */
            u = xv(p, r * p->xld + i);
            v = yv(p, c * p->yld + i);
            break;
        default: /* A[i,r] gC[i,c] */
            u = xv(p, i * p->xld + r);
            v = yv(p, i * p->yld + c);
            break;
        }
        s += u * v;
        a += fabs(u * v);
    }
    *want = s;
    *absdot = a;
}

static void run_case(tk_context *ctx, tk_op op, const shape *s)
{
    problem p;
    const int out16 = op != TK_OP_GEMM_F16_FWD;
    const size_t oe = out16 ? 2 : 4;
    void *dx = NULL, *dy = NULL, *dout = NULL;
    unsigned char *out;
    uint16_t *x, *y;
    tk_status st;

    memset(&p, 0, sizeof p);
    p.op = op, p.M = s->M, p.N = s->N, p.K = s->K;
    switch (op) {
    case TK_OP_GEMM_F16_FWD:
        p.rows = s->M, p.cols = s->N, p.xr = s->M, p.xc = s->K, p.yr = s->K, p.yc = s->N;
        break;
    case TK_OP_GEMM_F16_GRAD_A:
        p.rows = s->M, p.cols = s->K, p.xr = s->M, p.xc = s->N, p.yr = s->K, p.yc = s->N;
        break;
    default:
        p.rows = s->K, p.cols = s->N, p.xr = s->M, p.xc = s->K, p.yr = s->M, p.yc = s->N;
        break;
    }
    p.xld = p.xc + (s->pad_in == 1 ? 5 : s->pad_in == 2 ? (8 - p.xc % 8) % 8 + 8 : 0);
    p.yld = p.yc + (s->pad_in == 1 ? 5 : s->pad_in == 2 ? (8 - p.yc % 8) % 8 + 8 : 0);
    p.ld_out = p.cols + (s->pad_out ? 3 : 0);
    x = random_f16((size_t)(p.xr * p.xld));
    y = random_f16((size_t)(p.yr * p.yld));
    p.x = x, p.y = y;
    if (!s->sampled) {
        p.xf = to_f32(x, (size_t)(p.xr * p.xld));
        p.yf = to_f32(y, (size_t)(p.yr * p.yld));
    }
    const size_t out_bytes = (size_t)(p.rows * p.ld_out) * oe;
    out = malloc(out_bytes);
    ck_assert(out != NULL);

    tk_assert_status(tk_mem_alloc(ctx, (size_t)(p.xr * p.xld) * 2, &dx), TK_OK);
    tk_assert_status(tk_mem_alloc(ctx, (size_t)(p.yr * p.yld) * 2, &dy), TK_OK);
    tk_assert_status(tk_mem_alloc(ctx, out_bytes, &dout), TK_OK);
    tk_assert_status(tk_mem_upload(ctx, dx, x, (size_t)(p.xr * p.xld) * 2), TK_OK);
    tk_assert_status(tk_mem_upload(ctx, dy, y, (size_t)(p.yr * p.yld) * 2), TK_OK);
    tk_assert_status(tk_mem_set(ctx, dout, 0xFF, out_bytes), TK_OK);

    /* Packed operands are passed as ld 0 to exercise the default. */
    const int64_t lx = s->pad_in ? p.xld : 0, ly = s->pad_in ? p.yld : 0;
    const int64_t lo = s->pad_out ? p.ld_out : 0;
    if (op == TK_OP_GEMM_F16_FWD)
        st = tk_gemm_f16_fwd(ctx, s->M, s->N, s->K, dx, lx, dy, ly, dout, lo, NULL);
    else if (op == TK_OP_GEMM_F16_GRAD_A)
        st = tk_gemm_f16_grad_a(ctx, s->M, s->N, s->K, dx, lx, dy, ly, dout, lo, NULL);
    else
        st = tk_gemm_f16_grad_b(ctx, s->M, s->N, s->K, dx, lx, dy, ly, dout, lo, NULL);
    ck_assert_msg(st == TK_OK, "%s %lldx%lldx%lld: %s: %s", tk_op_name(op), (long long)s->M,
                  (long long)s->N, (long long)s->K, tk_status_str(st), tk_context_last_error(ctx));
    tk_assert_status(tk_stream_sync(ctx, NULL), TK_OK);
    tk_assert_status(tk_mem_download(ctx, out, dout, out_bytes), TK_OK);

    /* Every output written (not NaN: the poison is 0xFF.. = NaN), padding
     * untouched, values within tolerance. */
    int64_t bad = 0, unwritten = 0, pad_touched = 0;
    double worst = 0;
    for (int64_t r = 0; r < p.rows; r++) {
        for (int64_t c = 0; c < p.ld_out; c++) {
            const size_t i = (size_t)(r * p.ld_out + c);
            if (c >= p.cols) {
                for (size_t b = 0; b < oe; b++)
                    pad_touched += out[i * oe + b] != 0xFF;
                continue;
            }
            double g;
            if (out16) {
                uint16_t hv;
                memcpy(&hv, out + i * 2, 2);
                g = tk_f16_to_f32(hv);
            } else {
                float fv;
                memcpy(&fv, out + i * 4, 4);
                g = fv;
            }
            if (g != g)
                unwritten++;
        }
    }
    const int64_t n_check = s->sampled ? 400 : p.rows * p.cols;
    for (int64_t t = 0; t < n_check; t++) {
        int64_t r, c;
        if (s->sampled) {
            r = (int64_t)(next_u64() % (uint64_t)p.rows);
            c = (int64_t)(next_u64() % (uint64_t)p.cols);
        } else {
            r = t / p.cols;
            c = t % p.cols;
        }
        const size_t i = (size_t)(r * p.ld_out + c);
        double g, want, absdot;
        if (out16) {
            uint16_t hv;
            memcpy(&hv, out + i * 2, 2);
            g = tk_f16_to_f32(hv);
        } else {
            float fv;
            memcpy(&fv, out + i * 4, 4);
            g = fv;
        }
        want_at(&p, r, c, &want, &absdot);
        /* fp32 accumulation: 1e-5 of sum |a*b|; fp16 output: one ulp more */
        const double tol = 1e-5 * absdot + 1e-6 + (out16 ? 1e-3 * fabs(want) : 0.0);
        const double err = fabs(g - want);
        if (!(err <= tol)) {
            if (bad < 5)
                fprintf(stderr, "%s %lldx%lldx%lld: out[%lld,%lld] = %.7g, want %.7g (tol %.3g)\n",
                        tk_op_name(op), (long long)s->M, (long long)s->N, (long long)s->K,
                        (long long)r, (long long)c, g, want, tol);
            bad++;
        }
        if (err > worst)
            worst = err;
    }
    ck_assert_msg(unwritten == 0 && pad_touched == 0 && bad == 0,
                  "%s %lldx%lldx%lld (policy %d): %lld unwritten, %lld padding bytes touched, "
                  "%lld of %lld outside tolerance (worst error %.3g)",
                  tk_op_name(op), (long long)s->M, (long long)s->N, (long long)s->K,
                  (int)tk_context_policy(ctx), (long long)unwritten, (long long)pad_touched,
                  (long long)bad, (long long)n_check, worst);

    tk_mem_free(ctx, dx);
    tk_mem_free(ctx, dy);
    tk_mem_free(ctx, dout);
    free(x);
    free(y);
    free((void *)p.xf);
    free((void *)p.yf);
    free(out);
}

/* A context of the policy; build mode async (the default: a call may run on
 * the universal fallback while its kernel builds) or sync (every call on the
 * kernel its plan names). */
static tk_context *gpu_ctx_mode(tk_policy policy, tk_build_mode mode)
{
    tk_config *cfg = NULL;
    tk_context *ctx;
    tk_assert_status(tk_config_create(&cfg), TK_OK);
    tk_assert_status(tk_config_set_policy(cfg, policy), TK_OK);
    tk_assert_status(tk_config_set_build_mode(cfg, mode), TK_OK);
    ctx = tk_test_gpu_context_or_skip(cfg);
    tk_config_destroy(cfg);
    if (strcmp(tk_context_backend_name(ctx), "stub") == 0) {
        printf("skipped: only the stub backend is available\n");
        exit(77);
    }
    return ctx;
}

static tk_context *gpu_ctx(tk_policy policy)
{
    return gpu_ctx_mode(policy, TK_BUILD_ASYNC);
}

/* Every call ran the kernel its plan named. */
static void assert_no_fallback(const tk_context *ctx)
{
    tk_context_stats st = TK_STRUCT_INIT(tk_context_stats);
    tk_assert_status(tk_context_get_stats(ctx, &st), TK_OK);
    ck_assert_uint_eq(st.fallback_calls, 0);
}

/* Shapes [from, to) of the table. */
static void run_all(tk_policy policy, int from, int to)
{
    tk_context *ctx = gpu_ctx(policy);
    const int n = (int)(sizeof shapes / sizeof shapes[0]);
    for (int i = from; i < n && i < to; i++) {
        run_case(ctx, TK_OP_GEMM_F16_FWD, &shapes[i]);
        run_case(ctx, TK_OP_GEMM_F16_GRAD_A, &shapes[i]);
        run_case(ctx, TK_OP_GEMM_F16_GRAD_B, &shapes[i]);
    }
    tk_context_destroy(ctx);
}

/* The exact policy compiles a kernel per shape and op: two halves, so that
 * CK_RUN_CASE can run them side by side (each compiles its own). */
START_TEST(test_exact_policy_small)
{
    run_all(TK_POLICY_EXACT, 0, 8);
}
END_TEST

START_TEST(test_exact_policy_large)
{
    run_all(TK_POLICY_EXACT, 8, 100);
}
END_TEST

START_TEST(test_generic_policy)
{
    run_all(TK_POLICY_GENERIC, 0, 17); /* all but 4096^3 */
}
END_TEST

/* A operand of more than 2^31 elements: offsets must be 64-bit. */
START_TEST(test_large_offsets)
{
    tk_context *ctx = gpu_ctx(TK_POLICY_GENERIC);
    const shape s = {131075, 24, 16400, 0, 0, 1};
    run_case(ctx, TK_OP_GEMM_F16_FWD, &s);
    tk_context_destroy(ctx);
}
END_TEST

/* Every GEMM configuration a tuning record can name, forced through a record
 * of the shape's class (stable policy), against fp64 on a shape with edges in
 * M, N and K and more than a wave of tiles in every layout (kernel shapes
 * 2100 x 2600, 2100 x 2200, 2200 x 2600 with K = 2200, 2600, 2100), sampled,
 * and with 136 tokens checked in full, with an odd output stride (scalar
 * stores at the ends of rows), in sync build mode (no call on a fallback): the persistent grid,
 * stream-K (tiles shared across block boundaries), the TMA-store (also on widths that are not whole
 * 64-column chunks: the rest from registers) and staged epilogues, split-K on both kernels (the
 * reduce kernel after a one-wave split grid launched as its programmatic dependent), tile widths of
 * the TMA kernel from 64 to 256 columns (K-major B: 176 and 208 too), split-K on swapped tiles
 * (partials stored transposed; 64-, 128- and 256-row tiles), 64-row tiles (the consumer
 * warpgroups on alternate K steps, summed through shared memory; widths
 * whose halves are odd multiples of 8, split, swapped), 256-row
 * tiles, the swapped tiles (C^T = B^T A^T, stored transposed: fwd and
 * grad_a; grad_b too where the width is whole 64-column boxes, its B then
 * N-major, else it keeps the heuristics' plan;
 * also on a persistent grid, each tile but a block's last stored from
 * registers, and with the transposed TMA-store epilogue, 128 and 256 rows,
 * persistent or not),
 * clusters of two blocks sharing A by multicast (K-major and M-major A,
 * odd column-tile counts whose last cluster has a block with no tile),
 * clusters of 2 x 2 sharing A and B (K-major B in boxes of half the width,
 * N-major B in half of its 64-column boxes; odd row and column tile
 * counts), clusters of two row tiles sharing B (64-, 128- and 256-row
 * tiles, swapped or not, odd row-tile counts), clusters of each kind on a
 * persistent grid (several tiles per block), and
 * ping-pong tiles (persist=3: the consumer warpgroups on alternate tiles,
 * unswapped and swapped, K-major widths that are not whole 64-column boxes,
 * the forward's fp32 output on 128 x 192 with the TMA-store epilogue),
 * K-major widths of 16 g + 8 (24 to 248: swapped, unswapped, 256-row,
 * split, persistent, stream-K, in pairs, swapped with the TMA-store
 * epilogue, whose last 8 C rows of a tile the threads store, checked in
 * full where they straddle C's last row; fwd's N-major
 * B unswapped keeps the heuristics' plan), and split-K summed in a cluster
 * (ksc=1: 2 to 7 blocks of a tile adding their partials through
 * distributed shared memory, each storing a slice; 64-, 128- and 256-row
 * tiles, swapped, fp32 and fp16 outputs, slices of unequal unit counts;
 * the plan asserted to be the record's). */
START_TEST(test_every_configuration)
{
    static const char *const configs[] = {
        "tma bn=128 persist=2 epi=1 split=1",
        "tma bn=256 persist=2 epi=0 split=1",
        "tma bn=256 persist=2 epi=1 split=1",
        "tma bn=128 persist=1 epi=0 split=1",
        "tma bn=256 persist=1 epi=1 split=1",
        "tma bn=128 persist=0 epi=1 split=1",
        "tma bn=256 persist=0 epi=0 split=1",
        "tma bn=128 persist=0 epi=0 split=3",
        "tma bn=64 persist=0 epi=0 split=4",
        "tma bn=64 persist=0 epi=1 split=1",
        "tma bn=64 persist=1 epi=0 split=1",
        "tma bn=64 persist=2 epi=1 split=1",
        "tma bn=192 persist=0 epi=1 split=1",
        "tma bn=192 persist=1 epi=1 split=1",
        "tma bn=192 persist=1 epi=0 split=1",
        "tma bn=192 persist=2 epi=0 split=1",
        "tma bn=80 persist=0 epi=0 split=1",
        "tma bn=208 persist=0 epi=0 split=1",
        "tma bn=176 persist=1 epi=0 split=1",
        "tma bn=176 persist=1 epi=1 split=1",
        "tma bn=208 persist=0 epi=1 split=1",
        "tma bn=80 persist=1 epi=1 split=1",
        "tma bn=128 persist=0 epi=0 split=2",
        "tma bn=96 persist=0 epi=0 split=1 bm=64",
        "tma bn=64 persist=0 epi=0 split=1 bm=64",
        "tma bn=208 persist=0 epi=0 split=1 bm=64",
        "tma bn=256 persist=0 epi=0 split=2 bm=64",
        "tma bn=128 persist=0 epi=0 split=3 bm=64",
        "tma bn=80 persist=0 epi=0 split=1 bm=64 swap=1",
        "tma bn=32 persist=0 epi=0 split=1 bm=64 swap=1",
        "tma bn=176 persist=0 epi=0 split=1 bm=64 swap=1",
        "tma bn=128 persist=0 epi=0 split=1 bm=256 swap=0",
        "tma bn=192 persist=1 epi=0 split=1 bm=256 swap=0",
        "tma bn=144 persist=0 epi=0 split=1 bm=256 swap=1",
        "tma bn=176 persist=0 epi=0 split=1 bm=256 swap=1",
        "tma bn=64 persist=1 epi=0 split=1 bm=256 swap=1",
        "tma bn=112 persist=0 epi=0 split=1 bm=256 swap=1",
        "tma bn=80 persist=0 epi=0 split=1 swap=1",
        "tma bn=32 persist=0 epi=0 split=1 swap=1",
        "tma bn=208 persist=1 epi=0 split=1 swap=1",
        "tma bn=128 persist=1 epi=0 split=1 swap=1",
        "tma bn=208 persist=1 epi=1 split=1 swap=1",
        "tma bn=80 persist=0 epi=1 split=1 swap=1",
        "tma bn=144 persist=1 epi=1 split=1 bm=256 swap=1",
        "tma bn=112 persist=0 epi=1 split=1 bm=256 swap=1",
        "tma bn=192 persist=0 epi=1 split=1 swap=1",
        "tma bn=192 persist=1 epi=1 split=1 swap=1",
        "tma bn=208 persist=0 epi=0 split=2 swap=1",
        "tma bn=64 persist=0 epi=0 split=4 swap=1",
        "tma bn=144 persist=0 epi=0 split=3 swap=1",
        "tma bn=80 persist=0 epi=0 split=2 bm=256 swap=1",
        "tma bn=96 persist=0 epi=0 split=2 bm=64 swap=1",
        "tma bn=64 persist=0 epi=1 split=1 cl=2",
        "tma bn=128 persist=0 epi=0 split=1 cl=2",
        "tma bn=192 persist=0 epi=1 split=1 cl=2",
        "tma bn=128 persist=0 epi=0 split=1 bm=256 cl=2",
        "tma bn=48 persist=0 epi=0 split=1 swap=1 cl=2",
        "tma bn=96 persist=0 epi=0 split=1 bm=256 swap=1 cl=2",
        "tma bn=128 persist=0 epi=0 split=1 cl=4",
        "tma bn=256 persist=0 epi=1 split=1 cl=4",
        "tma bn=192 persist=0 epi=1 split=1 cl=4",
        "tma bn=128 persist=0 epi=0 split=1 bm=256 cl=4",
        "tma bn=80 persist=0 epi=0 split=1 swap=1 cl=4",
        "tma bn=48 persist=0 epi=0 split=1 swap=1 cl=4",
        "tma bn=96 persist=0 epi=0 split=1 bm=256 swap=1 cl=4",
        "tma bn=80 persist=0 epi=0 split=1 bm=64 clm=2",
        "tma bn=128 persist=0 epi=0 split=1 bm=64 clm=2",
        "tma bn=112 persist=0 epi=0 split=1 bm=64 swap=1 clm=2",
        "tma bn=128 persist=0 epi=1 split=1 clm=2",
        "tma bn=256 persist=0 epi=0 split=1 clm=2",
        "tma bn=128 persist=0 epi=0 split=1 bm=256 clm=2",
        "tma bn=48 persist=0 epi=0 split=1 swap=1 clm=2",
        "tma bn=96 persist=0 epi=1 split=1 swap=1 clm=2",
        "tma bn=128 persist=1 epi=1 split=1 cl=2",
        "tma bn=208 persist=1 epi=1 split=1 swap=1 cl=2",
        "tma bn=128 persist=1 epi=0 split=1 bm=256 cl=2",
        "tma bn=128 persist=1 epi=0 split=1 clm=2",
        "tma bn=192 persist=1 epi=1 split=1 swap=1 clm=2",
        "tma bn=128 persist=1 epi=0 split=1 cl=4",
        "tma bn=72 persist=0 epi=0 split=1 swap=1",
        "tma bn=40 persist=0 epi=0 split=1 swap=1",
        "tma bn=88 persist=1 epi=0 split=1 swap=1",
        "tma bn=24 persist=0 epi=0 split=2 swap=1",
        "tma bn=136 persist=0 epi=0 split=1 bm=256 swap=1",
        "tma bn=248 persist=0 epi=0 split=1",
        "tma bn=120 persist=2 epi=0 split=1",
        "tma bn=56 persist=0 epi=0 split=3",
        "tma bn=72 persist=0 epi=0 split=1 swap=1 cl=2",
        "tma bn=184 persist=1 epi=1 split=1 swap=1",
        "tma bn=136 persist=0 epi=1 split=1 swap=1",
        "tma bn=72 persist=1 epi=1 split=1 swap=1",
        "tma bn=152 persist=0 epi=1 split=1 bm=256 swap=1",
        "tma bn=128 persist=3 epi=0 split=1",
        "tma bn=64 persist=3 epi=0 split=1",
        "tma bn=80 persist=3 epi=0 split=1",
        "tma bn=112 persist=3 epi=0 split=1 swap=1",
        "tma bn=48 persist=3 epi=0 split=1 swap=1",
        "tma bn=176 persist=3 epi=0 split=1",
        "tma bn=192 persist=3 epi=0 split=1 swap=1",
        "tma bn=176 persist=3 epi=1 split=1",
        "tma bn=128 persist=3 epi=1 split=1",
        "tma bn=192 persist=3 epi=1 split=1",
        "mma tile=1 split=2",
        "tma bn=128 persist=0 epi=0 split=3 ksc=1",
        "tma bn=64 persist=0 epi=0 split=4 ksc=1",
        "tma bn=128 persist=0 epi=0 split=2 bm=64 ksc=1",
        "tma bn=256 persist=0 epi=0 split=7 ksc=1",
        "tma bn=144 persist=0 epi=0 split=3 swap=1 ksc=1",
        "tma bn=80 persist=0 epi=0 split=2 bm=256 swap=1 ksc=1",
        "tma bn=80 persist=0 epi=0 split=5 ksc=1",
    };
    const shape big = {2100, 2600, 2200, 2, 0, 1};
    const shape small = {136, 2600, 2200, 2, 1, 0};
    /* $TK_TEST_CONFIGS (a substring, e.g. "cl=2"): only those configurations;
     * $TK_TEST_SHARD "i/n": only every n-th from the i-th (0-based), so that
     * n processes share the list */
    const char *only = getenv("TK_TEST_CONFIGS"), *shard = getenv("TK_TEST_SHARD");
    unsigned shard_i = 0, shard_n = 1;
    if (shard != NULL)
        ck_assert_msg(sscanf(shard, "%u/%u", &shard_i, &shard_n) == 2 && shard_i < shard_n,
                      "TK_TEST_SHARD '%s': expected i/n with i < n", shard);
    for (size_t i = 0; i < sizeof configs / sizeof configs[0]; i++) {
        if ((only != NULL && strstr(configs[i], only) == NULL) || i % shard_n != shard_i)
            continue;
        /* a fresh context: records are remembered per context */
        tk_context *ctx = gpu_ctx_mode(TK_POLICY_STABLE, TK_BUILD_SYNC);
        char line[256];
        fprintf(stderr, "configuration %s\n", configs[i]);
        /* swapped TMA-store tiles 16 g + 8 wide also run 2 bn - 5 tokens
         * (below), so that the second tile's last 8 C rows (the threads'
         * copy) straddle C's last row */
        int bn = 0;
        const int edge_m = sscanf(configs[i], "tma bn=%d", &bn) == 1 && bn % 16 == 8 &&
                                   strstr(configs[i], "swap=1") != NULL &&
                                   strstr(configs[i], "epi=1") != NULL
                               ? 2 * bn - 5
                               : 0;
        /* the shapes' classes; the same kernels (M is not baked) */
        const long long edge_class = edge_m > 0 ? (long long)tk__gemm_m_class_max(edge_m) : 256;
        if (edge_class != 256 && edge_class != 2176)
            snprintf(line, sizeof line, "M<=256 %s\nM<=%lld %s\nM<=2176 %s\n", configs[i],
                     edge_class, configs[i], configs[i]);
        else
            snprintf(line, sizeof line, "M<=256 %s\nM<=2176 %s\n", configs[i], configs[i]);
        for (int op = TK_OP_GEMM_F16_FWD; op <= TK_OP_GEMM_F16_GRAD_B; op++)
            tk__record_put(ctx, tk_op_name((tk_op)op), "N=2600 K=2200", line);
        for (int op = TK_OP_GEMM_F16_FWD; op <= TK_OP_GEMM_F16_GRAD_B; op++) {
            run_case(ctx, (tk_op)op, &big);
            run_case(ctx, (tk_op)op, &small);
        }
        /* the straddling tokens, checked in full, the plan asserted to be
         * the record's */
        if (edge_m > 0) {
            const shape edge = {edge_m, 2600, 2200, 0, 0, 0};
            for (int op = TK_OP_GEMM_F16_FWD; op <= TK_OP_GEMM_F16_GRAD_A; op++) {
                gemm_plan pl;
                tk__gemm_plan_packed(ctx, (tk_op)op, edge.M, edge.N, edge.K, &pl);
                ck_assert_msg(pl.tma && pl.swap && pl.epi_tma && pl.wg_bn == bn,
                              "%s: %s %lldx%lldx%lld planned tma %d swap %d epi %d bn %d",
                              configs[i], tk_op_name((tk_op)op), (long long)edge.M,
                              (long long)edge.N, (long long)edge.K, pl.tma, pl.swap, pl.epi_tma,
                              pl.wg_bn);
                run_case(ctx, (tk_op)op, &edge);
            }
        }
        /* split-K in a cluster: planned so for the ops it fits (at least
         * one), with the record's factor */
        if (strstr(configs[i], "ksc=1") != NULL) {
            int split = 0, in_cluster = 0;
            ck_assert(sscanf(strstr(configs[i], "split="), "split=%d", &split) == 1);
            for (int op = TK_OP_GEMM_F16_FWD; op <= TK_OP_GEMM_F16_GRAD_B; op++) {
                gemm_plan pl;
                tk__gemm_plan_packed(ctx, (tk_op)op, big.M, big.N, big.K, &pl);
                if (pl.split_cl) {
                    ck_assert_int_eq(pl.splits, split);
                    in_cluster++;
                }
            }
            ck_assert_msg(in_cluster > 0, "%s: no op planned it", configs[i]);
        }
        assert_no_fallback(ctx);
        tk_context_destroy(ctx);
    }
}
END_TEST

/* The forward with N <= 8 on the skinny kernel (K <= 1024 at every row
 * count, longer reductions from 3072 rows on), checked in full against
 * fp64: row counts off the kernel's 32-row step, K off its 256-wide sweep
 * of the 8 warps, padded and packed operands, N from 1 to 8, and 1025-3071
 * rows (the TMA kernel's before the skinny kernel took them).
 * The weight gradient with N <= 8 (the skinny grad_b kernel, aligned
 * operands, d >= 512): token counts from 64 (part of one load round)
 * through rounds of 1024 rows with a short last one (1817, 5000) to 16384,
 * K = d off a multiple of 8 (the last block's values loaded one by one),
 * N = 5 and 3 with padded rows (B loaded one value at a time), padded
 * output. Past 3072 tokens a multiprocessor (d = 1024) on sm_90, the split
 * kind (TK_GEMM_SKINNY 3): 256 values of m a block, so d = 520 and 1000
 * leave lanes and blocks past M; splits of token counts off the 16-token
 * step (3100, 12539), long ones (40000), d = 4096 16 blocks a split. */
START_TEST(test_skinny)
{
    static const shape shapes_sk[] = {
        {4097, 8, 1024, 2, 1, 0}, {5000, 5, 1000, 2, 0, 0}, {4096, 1, 2056, 0, 0, 0},
        {70, 8, 1024, 0, 0, 0},   {1000, 6, 1000, 2, 1, 0}, {3100, 8, 1024, 0, 0, 0},
        {6001, 7, 24, 2, 1, 0},   {4099, 8, 8, 0, 1, 0},    {2001, 8, 1024, 2, 1, 0},
        {1025, 4, 1000, 0, 0, 0},
    };
    static const shape shapes_wg[] = {
        {1817, 8, 1024, 0, 0, 0}, {64, 8, 1024, 0, 0, 0},    {300, 8, 1000, 0, 1, 0},
        {5000, 5, 1024, 2, 0, 0}, {4099, 8, 1004, 2, 1, 0},  {16384, 8, 1024, 0, 0, 1},
        {777, 3, 520, 2, 1, 0},   {3100, 8, 520, 2, 1, 0},   {40000, 8, 1000, 2, 1, 1},
        {3500, 8, 4096, 0, 0, 1}, {12539, 8, 1024, 0, 0, 0},
    };
    tk_context *ctx = gpu_ctx_mode(TK_POLICY_STABLE, TK_BUILD_SYNC);
    for (size_t i = 0; i < sizeof shapes_sk / sizeof shapes_sk[0]; i++)
        run_case(ctx, TK_OP_GEMM_F16_FWD, &shapes_sk[i]);
    for (size_t i = 0; i < sizeof shapes_wg / sizeof shapes_wg[0]; i++)
        run_case(ctx, TK_OP_GEMM_F16_GRAD_B, &shapes_wg[i]);
    assert_no_fallback(ctx);
    tk_context_destroy(ctx);
}
END_TEST

/* Reductions of 16 or fewer (the small-K kernel: the router's grad_a with
 * its 8 experts, grad_b of a few tokens, a forward with K <= 16), checked in
 * full against fp64 (one sampled), in sync build mode: every layout,
 * packed, aligned-padded and unaligned (ld + 5) operands, odd output
 * strides (scalar stores at the ends of rows), edges of the 32 x 256 tile
 * in M and N, K = 1 to 16. */
START_TEST(test_smallk)
{
    static const struct {
        tk_op op;
        shape s;
    } cases[] = {
        {TK_OP_GEMM_F16_FWD, {3000, 1000, 8, 0, 0, 0}},
        {TK_OP_GEMM_F16_FWD, {37, 300, 1, 1, 1, 0}},
        {TK_OP_GEMM_F16_FWD, {1000, 257, 16, 2, 0, 0}},
        {TK_OP_GEMM_F16_FWD, {9000, 1024, 13, 0, 1, 1}},
        {TK_OP_GEMM_F16_GRAD_A, {8192, 8, 1024, 0, 0, 0}},
        {TK_OP_GEMM_F16_GRAD_A, {1000, 5, 333, 1, 1, 0}},
        {TK_OP_GEMM_F16_GRAD_A, {65, 16, 2050, 2, 1, 0}},
        {TK_OP_GEMM_F16_GRAD_B, {16, 2816, 1024, 0, 0, 0}},
        {TK_OP_GEMM_F16_GRAD_B, {3, 100, 77, 1, 1, 0}},
        {TK_OP_GEMM_F16_GRAD_B, {11, 1030, 129, 2, 0, 0}},
    };
    tk_context *ctx = gpu_ctx_mode(TK_POLICY_STABLE, TK_BUILD_SYNC);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_case(ctx, cases[i].op, &cases[i].s);
    assert_no_fallback(ctx);
    tk_context_destroy(ctx);
}
END_TEST

/* Reuse of a compiled kernel and the checked run through the public API. */
START_TEST(test_checked_run)
{
    tk_context *ctx = gpu_ctx(TK_POLICY_EXACT);
    const int64_t dims[3] = {96, 80, 72};
    for (int op = TK_OP_GEMM_F16_FWD; op <= TK_OP_GEMM_F16_GRAD_B; op++) {
        tk_check_report rep = TK_STRUCT_INIT(tk_check_report);
        tk_status st = tk_check_run(ctx, (tk_op)op, dims, 3, 7, &rep);
        ck_assert_msg(st == TK_OK, "%s: %s", tk_status_str(st), tk_context_last_error(ctx));
        ck_assert_msg(rep.passed, "%s: max abs %g rel %g", tk_op_name((tk_op)op), rep.max_abs_error,
                      rep.max_rel_error);
        tk_check_report_free(&rep);
    }
    tk_context_destroy(ctx);
}
END_TEST

/* Operands whose rows are not 16-byte aligned, in calls large enough to be
 * staged into the workspace with padded rows (src/ops/gemm/plan.c
 * tk__gemm_plan_stage): d_model 700 packed (rows of 1400 bytes), odd
 * leading dimensions, GPT-2's vocabulary of 50257; each op, in sync build
 * mode (the staging kernel and the aligned kernels compiled for the call),
 * then the same calls in async mode on a fresh context (the first ones may
 * run unstaged while the staging kernel builds). Sampled against fp64; the
 * workspace must have held a staged operand. */
START_TEST(test_staged)
{
    static const shape st[] = {
        {2000, 1024, 700, 0, 0, 1},
        {1500, 2003, 1024, 1, 1, 1},
        {700, 50257, 1024, 0, 0, 1},
    };
    for (int mode = 0; mode < 2; mode++) {
        tk_context *ctx =
            gpu_ctx_mode(TK_POLICY_STABLE, mode == 0 ? TK_BUILD_SYNC : TK_BUILD_ASYNC);
        for (size_t i = 0; i < sizeof st / sizeof st[0]; i++) {
            run_case(ctx, TK_OP_GEMM_F16_FWD, &st[i]);
            run_case(ctx, TK_OP_GEMM_F16_GRAD_A, &st[i]);
            run_case(ctx, TK_OP_GEMM_F16_GRAD_B, &st[i]);
        }
        tk_context_stats s = TK_STRUCT_INIT(tk_context_stats);
        tk_assert_status(tk_context_get_stats(ctx, &s), TK_OK);
        /* at least A of the first shape, 2000 rows padded to 704 halves */
        ck_assert_uint_ge(s.workspace_peak, (uint64_t)2000 * 704 * 2);
        tk_context_destroy(ctx);
    }
}
END_TEST

static Suite *suite(void)
{
    /* One case per part (CK_RUN_CASE=exact_small ... runs one). */
    const struct {
        const char *name;
        const TTest *test;
    } parts[] = {
        {"exact_small", test_exact_policy_small},
        {"exact_large", test_exact_policy_large},
        {"generic", test_generic_policy},
        {"offsets", test_large_offsets},
        {"checked", test_checked_run},
        {"configurations", test_every_configuration},
        {"skinny", test_skinny},
        {"smallk", test_smallk},
        {"staged", test_staged},
    };
    Suite *s = suite_create("gpu_gemm");
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        TCase *tc = tcase_create(parts[i].name);
        tcase_set_timeout(tc, 900);
        tcase_add_test(tc, parts[i].test);
        suite_add_tcase(s, tc);
    }
    return s;
}

int main(void)
{
    return tk_test_gpu_main(suite());
}
