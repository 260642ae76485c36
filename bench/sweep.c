/*
 * bench/sweep: the GEMM sweep that represents the origin model, against
 * cuBLAS, correctness checked in the same run.
 *
 * Shapes:
 *   manifest     every gemm_* line of the precompile manifest (default
 *                manifests/default.tkm of the source tree; --manifest FILE),
 *                each line expanded into its M x N x K combinations;
 *   expert-up    --count (default 40) token counts M drawn uniformly from
 *   expert-down  1..8192 with a seeded generator (--seed), each through the
 *                up projection (M x 2816 x 1024) and the down projection
 *                (M x 1024 x 2816) of the model's experts (d 1024, FFN 2816,
 *                8 experts, top-2);
 * each through gemm_f16_fwd, gemm_f16_grad_a and gemm_f16_grad_b (--only
 * keeps one). The reference is cublasGemmEx with the same input and output
 * types and layouts (bench/cublas_ref.h).
 *
 * Before anything is timed, every kernel the sweep uses is made ready:
 * tk_op_precompile of each distinct shape (in parallel threads, --jobs), then
 * the context builds synchronously (TK_BUILD_SYNC), so that an untimed first
 * call of each shape would compile anything the precompile missed; a compile
 * during a timed batch marks the row. The count and time of the compiles are
 * printed.
 *
 * Timing: per shape, samples of device-event pairs around batches of
 * back-to-back calls (batch sized to >= ~2 ms of device time, at most 800
 * calls), each batch enqueued behind a sleep kernel that outlasts its
 * enqueue (bench_util.h), so the figures are device time with the host's
 * cost left out; the library and cuBLAS interleaved sample by sample (the
 * order alternating), the median per side. Inputs rotate among copies when
 * one set would sit in L2. Ratio = cuBLAS time / tokitai time (> 1: tokitai
 * faster). Host cost per call is its own pair of columns (tk host, cuB
 * host: the enqueue time of the same batches per call, median, us). The
 * "host" column names the side(s) whose host cost per call reached 0.85 of
 * its device time per call: in a loop that enqueues without a lead the
 * device would wait for the host there (cuBLAS's host cost moved between
 * ~9 and ~13 us per call from one process to the next on the H100
 * machine). The summary gives the geomean over all rows and over the rows
 * where neither side was host-bound, and how many samples' enqueue
 * outlasted the sleep before them (such a sample is taken again, up to 3
 * times; 0 expected after that).
 *
 * Correctness: the whole tokitai output against the whole cuBLAS output of
 * the same inputs (outputs preset to NaN, so an unwritten element fails),
 * |tk - cublas| <= atol + rtol |cublas| with the op's tolerance of
 * src/ops/check.c (rtol 1e-2, atol 1e-2 * max(1, sqrt(len / 64)) for a
 * reduction of length len). Where they differ, the first 32 differing
 * elements are computed exactly (fp64, host): when tokitai is within the
 * tolerance of each and cuBLAS is not of one, the row reads "cuB!" (CSV
 * "ref-wrong") and does not count as a failure.
 *
 *   random       with --random N, instead of the two sets above: N shapes
 *                per op, each an (N, K) family of the model (model_nk) drawn
 *                uniformly and M drawn log-uniformly from 64..16384 (--seed);
 *
 *   sweep [--manifest FILE] [--seed S] [--count N] [--random N]
 *         [--policy stable|exact|generic] [--only fwd|grad_a|grad_b] [--quick]
 *         [--csv FILE] [--jobs N] [--stub] [--check-only] [--warm]
 *
 * Prints a markdown table per op, then per op: n, geometric mean ratio, worst
 * ratio and its shape, shapes under the target (0.90); then the operator workspace the
 * calls used (tk_context_stats: bytes held, peak, device allocations) and
 * whether a compile or a workspace allocation fell inside a timed batch.
 * Exit 0 when every check passed, 1 when one failed, 2 for bad arguments, 77
 * without a GPU or without cuBLAS (as every bench program). --check-only
 * runs each shape's check alone, one call of each side and nothing timed:
 * for a profiler (ncu), which then sees one kernel launch per side and shape.
 * --warm keeps one copy of each shape's inputs (both sides), so that they
 * stay in L2 between calls where they fit: the figures without the cold
 * operand reads.
 * --stub runs on
 * the stub backend (host memory, no kernels run, host times): it tests the
 * program, not the speed, and leaves out shapes over 256 MiB of buffers.
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "cublas_ref.h"
#include "tokitai/ops.h"
#include "tokitai/tokitai.h"

#ifndef TK_SOURCE_DIR
#define TK_SOURCE_DIR "."
#endif

#define D_MODEL 1024
#define D_FF 2816
#define M_EXPERT_MAX 8192
#define N_OPS 3
#define TARGET_GEOMEAN 1.00
#define TARGET_WORST 0.90
/* A side is host-bound when enqueueing a call takes this share of its
 * device time per call or more. */
#define HOST_BOUND 0.85

static uint64_t rng_state;
static uint64_t next_u64(void)
{
    /* splitmix64: any seed, 0 included, gives a full-period stream */
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* ------------------------------------------------------------- shapes */

enum { SRC_MANIFEST = 0, SRC_UP = 1, SRC_DOWN = 2, SRC_RANDOM = 3 };
static const char *const src_name[] = {"manifest", "expert-up", "expert-down", "random"};

/* --random: the (N, K) families of the model's GEMMs (d 1024, FFN 2816, the
 * attention and MLP widths 3072 and 4096, the vocabularies, the router's 8
 * experts), each in both orders where the model has both; M log-uniform. */
static const int64_t model_nk[][2] = {{2816, 1024}, {1024, 2816}, {3072, 1024}, {1024, 3072},
                                      {4096, 1024}, {1024, 4096}, {50304, 1024}, {8, 1024}};
#define RANDOM_M_MIN 64
#define RANDOM_M_MAX 16384

typedef struct shape {
    tk_op op;
    int64_t M, N, K;
    int src;
    /* results */
    double tk_ms, cb_ms;                   /* medians per call */
    double tk_min, tk_max, cb_min, cb_max; /* spread of the samples */
    int batch;                             /* calls per sample */
    double tk_host, cb_host;               /* host enqueue ms per call (median of the samples) */
    int host_bound;                        /* 1: tokitai's samples, 2: cuBLAS's, 3: both */
    int checked;                           /* 1: compared; 0: not (stub) */
    uint64_t bad;                          /* elements outside the tolerance */
    int ref_wrong; /* 1: at the mismatches, cuBLAS is off the exact value, tokitai is not */
    double max_err;                        /* max |tk - cb| / (atol + rtol |cb|) */
    int compiled_in_timing;
    int alloc_in_timing; /* an operator workspace allocation inside the timed batches */
} shape;

typedef struct shape_list {
    shape *v;
    size_t n, cap;
} shape_list;

static void add_shape(shape_list *l, tk_op op, int64_t M, int64_t N, int64_t K, int src)
{
    if (src == SRC_MANIFEST)
        for (size_t i = 0; i < l->n; i++)
            if (l->v[i].op == op && l->v[i].M == M && l->v[i].N == N && l->v[i].K == K &&
                l->v[i].src == src)
                return; /* a manifest repeats a shape: measured once */
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 256;
        l->v = realloc(l->v, l->cap * sizeof *l->v);
        if (l->v == NULL) {
            fprintf(stderr, "out of memory\n");
            exit(1);
        }
    }
    memset(&l->v[l->n], 0, sizeof l->v[l->n]);
    l->v[l->n].op = op, l->v[l->n].M = M, l->v[l->n].N = N, l->v[l->n].K = K;
    l->v[l->n].src = src;
    l->n++;
}

/* One "NAME=VALUES" field of a manifest line: a comma list of integers and
 * ranges A..B:xF / A..B:+S (docs/manifests.md). Returns the
 * number of values written to out (at most cap), -1 on a syntax error. */
static int parse_values(const char *text, int64_t *out, int cap)
{
    int n = 0;
    const char *p = text;
    while (*p) {
        char *end;
        long long a = strtoll(p, &end, 10);
        if (end == p || a <= 0)
            return -1;
        p = end;
        if (p[0] == '.' && p[1] == '.') {
            long long b = strtoll(p + 2, &end, 10), step;
            char kind;
            if (end == p + 2 || b < a || end[0] != ':' || (end[1] != 'x' && end[1] != '+'))
                return -1;
            kind = end[1];
            p = end + 2;
            step = strtoll(p, &end, 10);
            if (end == p || (kind == 'x' && step < 2) || (kind == '+' && step < 1))
                return -1;
            p = end;
            for (long long v = a; v <= b; v = kind == 'x' ? v * step : v + step) {
                if (n == cap)
                    return -1;
                out[n++] = v;
            }
        } else {
            if (n == cap)
                return -1;
            out[n++] = a;
        }
        if (*p == ',')
            p++;
        else if (*p != '\0')
            return -1;
    }
    return n;
}

/* The gemm_f16_* lines of a manifest (other lines are not this sweep's).
 * Returns 0, or -1 with a message naming the line. */
static int load_manifest(const char *path, shape_list *l, unsigned op_mask)
{
    FILE *f = fopen(path, "r");
    char line[4096];
    int lineno = 0;
    if (f == NULL) {
        fprintf(stderr, "cannot open manifest %s\n", path);
        return -1;
    }
    while (fgets(line, sizeof line, f) != NULL) {
        char *save = NULL, *tok, *hash = strchr(line, '#');
        int64_t vals[3][64];
        int nv[3] = {0, 0, 0};
        tk_op op;
        lineno++;
        if (hash != NULL)
            *hash = '\0';
        tok = strtok_r(line, " \t\r\n", &save);
        if (tok == NULL || strncmp(tok, "gemm_f16_", 9) != 0)
            continue;
        if (tk_op_from_name(tok, &op) != TK_OK) {
            fprintf(stderr, "%s:%d: unknown op %s\n", path, lineno, tok);
            fclose(f);
            return -1;
        }
        while ((tok = strtok_r(NULL, " \t\r\n", &save)) != NULL) {
            const int d = tok[0] == 'M' ? 0 : tok[0] == 'N' ? 1 : tok[0] == 'K' ? 2 : -1;
            if (strncmp(tok, "policy=", 7) == 0)
                continue;
            if (d < 0 || tok[1] != '=' || (nv[d] = parse_values(tok + 2, vals[d], 64)) <= 0) {
                fprintf(stderr, "%s:%d: bad field %s\n", path, lineno, tok);
                fclose(f);
                return -1;
            }
        }
        if (nv[0] == 0 || nv[1] == 0 || nv[2] == 0) {
            fprintf(stderr, "%s:%d: %s needs M, N and K\n", path, lineno, tk_op_name(op));
            fclose(f);
            return -1;
        }
        if (!(op_mask & (1u << op)))
            continue;
        for (int a = 0; a < nv[0]; a++)
            for (int b = 0; b < nv[1]; b++)
                for (int c = 0; c < nv[2]; c++)
                    add_shape(l, op, vals[0][a], vals[1][b], vals[2][c], SRC_MANIFEST);
    }
    fclose(f);
    return 0;
}

/* ----------------------------------------------------- input generation */

/* Uniform k / 1024, k in [-1024, 1024], written as binary16 bits (exact, so
 * no conversion intrinsic is needed): the distribution of src/ops/check.c's
 * random runs, whose tolerances the check uses. */
static const char fill_src[] =
    "extern \"C\" __global__ void tk_sweep_fill(unsigned short *p, unsigned long long n,\n"
    "                                           unsigned long long seed) {\n"
    "    const unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;\n"
    "    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;\n"
    "         i < n; i += step) {\n"
    "        unsigned long long z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;\n"
    "        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;\n"
    "        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;\n"
    "        z ^= z >> 31;\n"
    "        int k = (int)(z % 2049ull) - 1024;\n"
    "        unsigned short h = 0;\n"
    "        if (k != 0) {\n"
    "            unsigned a = (unsigned)(k < 0 ? -k : k), e = 31u - __clz(a);\n"
    "            /* |v| = a / 1024 = 1.f x 2^(e - 10): fp16 exponent e - 10 + 15 */\n"
    "            h = (unsigned short)(((k < 0) << 15) | ((e + 5u) << 10) |\n"
    "                                 ((a << (10u - e)) & 0x3FFu));\n"
    "        }\n"
    "        p[i] = h;\n"
    "    }\n"
    "}\n";

static tk_kernel *g_fill;

static void fill_dev(void *d, size_t n_half, uint64_t seed)
{
    const unsigned grid[3] = {132 * 8, 1, 1}, block[3] = {256, 1, 1};
    unsigned long long n = n_half, s = seed;
    void *args[] = {&d, &n, &s};
    CHECK(tk_kernel_launch(g_ctx, g_fill, grid, block, 0, NULL, args));
}

/* ------------------------------------------------------------- running */

typedef struct gemm_bufs {
    const shape *s;
    int R;
    void *x[8], *y[8], *out[8];
    int rot;
} gemm_bufs;

static int g_stub;
static bench_timing g_tm; /* zero: no kernel yet, a 2 ms first sleep */

static tk_status run_tk(const shape *s, const void *x, const void *y, void *out)
{
    switch (s->op) {
    case TK_OP_GEMM_F16_FWD:
        return tk_gemm_f16_fwd(g_ctx, s->M, s->N, s->K, x, 0, y, 0, out, 0, NULL);
    case TK_OP_GEMM_F16_GRAD_A:
        return tk_gemm_f16_grad_a(g_ctx, s->M, s->N, s->K, x, 0, y, 0, out, 0, NULL);
    default:
        return tk_gemm_f16_grad_b(g_ctx, s->M, s->N, s->K, x, 0, y, 0, out, 0, NULL);
    }
}

static tk_status run_cb(const shape *s, const void *x, const void *y, void *out)
{
    if (g_stub) /* no cuBLAS on the stub: the library is its own reference */
        return run_tk(s, x, y, out);
    return cublas_ref_gemm(s->op, s->M, s->N, s->K, x, y, out) == 0 ? TK_OK : TK_LAUNCH_FAILED;
}

typedef struct batch_arg {
    gemm_bufs *b;
    int cublas, n;
    double host_ms; /* the last batch's enqueue time on the host */
} batch_arg;

static tk_status run_batch(void *user)
{
    batch_arg *a = user;
    gemm_bufs *b = a->b;
    const double t0 = bench_wall_s();
    for (int i = 0; i < a->n; i++) {
        const int r = b->rot++ % b->R;
        tk_status st = a->cublas ? run_cb(b->s, b->x[r], b->y[r], b->out[r])
                                 : run_tk(b->s, b->x[r], b->y[r], b->out[r]);
        if (st != TK_OK)
            return st;
    }
    a->host_ms = (bench_wall_s() - t0) * 1e3;
    return TK_OK;
}

/* One timed sample of a side: device ms of its batch (behind the sleep
 * kernel; the stub backend runs no kernels, so no sleep there), and
 * a->host_ms its enqueue time. */
static float sample_side(void *a)
{
    double dev = 0, host = 0;
    float ms = 0;
    if (g_stub) {
        CHECK(tk_time_on_stream(g_ctx, NULL, run_batch, a, &ms));
        return ms;
    }
    CHECK(bench_sample(&g_tm, run_batch, a, &dev, &host));
    return (float)dev;
}

static int cmp_i64(const void *a, const void *b)
{
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

typedef struct run_opts {
    int quick;
    int check_only; /* no timing: one call of each side (for a profiler) */
    int samples;
    double batch_ms; /* device time per sample, at least */
    int warm;        /* one copy of the inputs: they stay in L2 between calls */
} run_opts;

static uint64_t compiles_now(void)
{
    tk_context_stats st = TK_STRUCT_INIT(tk_context_stats);
    CHECK(tk_context_get_stats(g_ctx, &st));
    return st.compiles + st.waits;
}

static uint64_t ws_allocs_now(void)
{
    tk_context_stats st = TK_STRUCT_INIT(tk_context_stats);
    CHECK(tk_context_get_stats(g_ctx, &st));
    return st.workspace_allocs;
}

/* Median ms per call of each side, interleaved sample by sample. */
static void time_shape(gemm_bufs *b, const run_opts *o, shape *s)
{
    batch_arg tk = {b, 0, 1, 0}, cb = {b, 1, 1, 0};
    double *vt, *vc, *ht, *hc;
    float ms = 0, ms_t = 0, ms_c = 0;
    int batch;
    const int n = o->samples;
    uint64_t c0, a0;

    /* untimed: the first call of each side (cuBLAS's heuristics, and a compile
     * the precompile missed), then one call each to size the batch */
    CHECK(run_batch(&tk));
    CHECK(run_batch(&cb));
    CHECK(tk_stream_sync(g_ctx, NULL));
    c0 = compiles_now();
    a0 = ws_allocs_now();
    tk.n = cb.n = 5;
    ms_t = sample_side(&tk);
    ms_c = sample_side(&cb);
    ms = (ms_t > ms_c ? ms_t : ms_c) / 5;
    batch = g_stub ? 1 : (int)ceil(o->batch_ms / (ms > 1e-4f ? ms : 1e-4f));
    if (batch < 1)
        batch = 1;
    /* under the driver's launch queue: a full queue would make the host
     * wait for the device, and its enqueue time include that wait */
    if (batch > 800)
        batch = 800;
    tk.n = cb.n = batch;
    CHECK(run_batch(&tk)); /* warm the clocks at the batch's length */
    CHECK(run_batch(&cb));
    vt = malloc((size_t)n * sizeof *vt);
    vc = malloc((size_t)n * sizeof *vc);
    ht = malloc((size_t)n * sizeof *ht);
    hc = malloc((size_t)n * sizeof *hc);
    for (int i = 0; i < n; i++) {
        batch_arg *first = (i & 1) ? &cb : &tk, *second = (i & 1) ? &tk : &cb;
        const float a = sample_side(first), c = sample_side(second);
        ((i & 1) ? vc : vt)[i] = (double)a / batch;
        ((i & 1) ? vt : vc)[i] = (double)c / batch;
        ht[i] = tk.host_ms / batch;
        hc[i] = cb.host_ms / batch;
    }
    qsort(vt, (size_t)n, sizeof *vt, bench_cmp_double);
    qsort(vc, (size_t)n, sizeof *vc, bench_cmp_double);
    qsort(ht, (size_t)n, sizeof *ht, bench_cmp_double);
    qsort(hc, (size_t)n, sizeof *hc, bench_cmp_double);
    s->tk_ms = vt[n / 2];
    s->cb_ms = vc[n / 2];
    s->tk_min = vt[0], s->tk_max = vt[n - 1];
    s->cb_min = vc[0], s->cb_max = vc[n - 1];
    s->batch = batch;
    s->tk_host = ht[n / 2];
    s->cb_host = hc[n / 2];
    /* The device waited for the host: the time is the enqueue rate (a
     * property of the host and of the library's cost per call, which moves
     * from process to process), not the kernel's. */
    s->host_bound = (s->tk_host >= HOST_BOUND * s->tk_ms) | (s->cb_host >= HOST_BOUND * s->cb_ms)
                                                                << 1;
    s->compiled_in_timing = compiles_now() != c0;
    s->alloc_in_timing = ws_allocs_now() != a0;
    free(vt);
    free(vc);
    free(ht);
    free(hc);
}

static double shape_bytes(const shape *s, int64_t *xe, int64_t *ye, int64_t *oe, size_t *ob);

/* Element [r, c] of the op's output in fp64 from host copies of the inputs
 * x, y (fwd A[M,K] B[K,N]; grad_a gC[M,N] B[K,N], gA = gC B^T; grad_b
 * A[M,K] gC[M,N], gB = A^T gC). */
static double exact_at(const shape *s, const uint16_t *x, const uint16_t *y, int64_t r, int64_t c)
{
    const int64_t M = s->M, N = s->N, K = s->K;
    double v = 0;
    if (s->op == TK_OP_GEMM_F16_FWD)
        for (int64_t k = 0; k < K; k++)
            v += (double)tk_f16_to_f32(x[r * K + k]) * tk_f16_to_f32(y[k * N + c]);
    else if (s->op == TK_OP_GEMM_F16_GRAD_A)
        for (int64_t n = 0; n < N; n++)
            v += (double)tk_f16_to_f32(x[r * N + n]) * tk_f16_to_f32(y[c * N + n]);
    else
        for (int64_t m = 0; m < M; m++)
            v += (double)tk_f16_to_f32(x[m * K + r]) * tk_f16_to_f32(y[m * N + c]);
    return v;
}

/* After a failed check: the exact value of each of the first mismatches
 * (n of them, [rows][cols] indices `at`, tokitai's values tk, cuBLAS's cb)
 * from rotation 0's inputs. Returns 1 when tokitai is within the tolerance
 * of every exact value and cuBLAS is not of at least one (cuBLAS is the
 * side that is wrong there), and prints each. */
static int ref_is_wrong(const shape *s, const gemm_bufs *b, int64_t cols, const size_t *at,
                        const double *tk, const double *cb, int n, double atol, double rtol)
{
    int64_t xe, ye, oe;
    size_t ob;
    shape_bytes(s, &xe, &ye, &oe, &ob);
    uint16_t *x = malloc((size_t)xe * 2), *y = malloc((size_t)ye * 2);
    int tk_ok = 1, cb_ok = 1;
    if (x == NULL || y == NULL || tk_mem_download(g_ctx, x, b->x[0], (size_t)xe * 2) != TK_OK ||
        tk_mem_download(g_ctx, y, b->y[0], (size_t)ye * 2) != TK_OK) {
        free(x);
        free(y);
        return 0;
    }
    for (int i = 0; i < n; i++) {
        const int64_t r = (int64_t)(at[i] / (size_t)cols), c = (int64_t)(at[i] % (size_t)cols);
        const double e = exact_at(s, x, y, r, c), tol = atol + rtol * fabs(e);
        tk_ok &= fabs(tk[i] - e) <= tol;
        cb_ok &= fabs(cb[i] - e) <= tol;
        if (i < 3)
            printf("  mismatch %s %lldx%lldx%lld at [%lld,%lld]: tokitai %.6g cuBLAS %.6g exact "
                   "%.6g\n",
                   tk_op_name(s->op), (long long)s->M, (long long)s->N, (long long)s->K,
                   (long long)r, (long long)c, tk[i], cb[i], e);
    }
    free(x);
    free(y);
    return tk_ok && !cb_ok;
}

/* The whole tokitai output against the whole cuBLAS output (rotation 0).
 * Where they differ, the first MISMATCH_EXACT differing elements are
 * computed exactly on the host: a shape whose mismatches all have
 * tokitai within the tolerance of the exact value and cuBLAS off it at
 * one at least is reported "cuB!" (cuBLAS wrong), not a failure. Seen with
 * cuBLAS 13.0 on grad_b with N = 8 and K % 64 of 1 or 2 (5761 x 8 x 1024:
 * cuBLAS -3.855, exact -4.033, tokitai -4.031). */
#define MISMATCH_EXACT 32
static void check_one_shape(shape *s, gemm_bufs *b, void *ref)
{
    const int out16 = s->op != TK_OP_GEMM_F16_FWD;
    const int64_t rows = s->op == TK_OP_GEMM_F16_GRAD_B ? s->K : s->M;
    const int64_t cols = s->op == TK_OP_GEMM_F16_GRAD_A ? s->K : s->N;
    const double len = (double)(s->op == TK_OP_GEMM_F16_FWD      ? s->K
                                : s->op == TK_OP_GEMM_F16_GRAD_A ? s->N
                                                                 : s->M);
    const double atol = 1e-2 * (len > 64.0 ? sqrt(len / 64.0) : 1.0), rtol = 1e-2;
    const size_t ne = (size_t)rows * (size_t)cols, ob = ne * (out16 ? 2 : 4);
    unsigned char *got = malloc(ob), *want = malloc(ob);
    if (got == NULL || want == NULL) {
        fprintf(stderr, "out of host memory (%zu bytes) for the check\n", 2 * ob);
        exit(1);
    }
    CHECK(tk_mem_set(g_ctx, b->out[0], 0xFF, ob));
    CHECK(tk_mem_set(g_ctx, ref, 0xFF, ob));
    if (g_stub) { /* nothing runs: zeros on both sides test the path only */
        CHECK(tk_mem_set(g_ctx, b->out[0], 0, ob));
        CHECK(tk_mem_set(g_ctx, ref, 0, ob));
    }
    CHECK(run_tk(s, b->x[0], b->y[0], b->out[0]));
    CHECK(run_cb(s, b->x[0], b->y[0], ref));
    CHECK(tk_stream_sync(g_ctx, NULL));
    CHECK(tk_mem_download(g_ctx, got, b->out[0], ob));
    CHECK(tk_mem_download(g_ctx, want, ref, ob));
    s->bad = 0;
    s->max_err = 0;
    s->ref_wrong = 0;
    size_t at[MISMATCH_EXACT];
    double tkv[MISMATCH_EXACT], cbv[MISMATCH_EXACT];
    for (size_t i = 0; i < ne; i++) {
        double g, w;
        if (out16) {
            uint16_t hg, hw;
            memcpy(&hg, got + i * 2, 2);
            memcpy(&hw, want + i * 2, 2);
            g = tk_f16_to_f32(hg);
            w = tk_f16_to_f32(hw);
        } else {
            float fg, fw;
            memcpy(&fg, got + i * 4, 4);
            memcpy(&fw, want + i * 4, 4);
            g = fg;
            w = fw;
        }
        const double e = fabs(g - w) / (atol + rtol * fabs(w));
        if (!(e <= 1.0)) {
            if (s->bad < MISMATCH_EXACT)
                at[s->bad] = i, tkv[s->bad] = g, cbv[s->bad] = w;
            s->bad++;
        }
        if (!(e <= s->max_err))
            s->max_err = e; /* NaN sticks */
    }
    if (s->bad > 0)
        s->ref_wrong =
            ref_is_wrong(s, b, cols, at, tkv, cbv,
                         s->bad < MISMATCH_EXACT ? (int)s->bad : MISMATCH_EXACT, atol, rtol);
    s->checked = !g_stub;
    free(got);
    free(want);
}

static double shape_bytes(const shape *s, int64_t *xe, int64_t *ye, int64_t *oe, size_t *ob)
{
    const tk_op op = s->op;
    const int64_t M = s->M, N = s->N, K = s->K;
    /* op inputs: fwd A[M,K] B[K,N]; grad_a gC[M,N] B[K,N]; grad_b A[M,K] gC[M,N] */
    *xe = op == TK_OP_GEMM_F16_GRAD_A ? M * N : M * K;
    *ye = op == TK_OP_GEMM_F16_GRAD_B ? M * N : K * N;
    *oe = op == TK_OP_GEMM_F16_FWD ? M * N : op == TK_OP_GEMM_F16_GRAD_A ? M * K : K * N;
    *ob = (size_t)*oe * (op == TK_OP_GEMM_F16_FWD ? 4 : 2);
    return (double)(*xe + *ye) * 2 + (double)*ob;
}

static void bench_shape(shape *s, const run_opts *o)
{
    gemm_bufs b;
    int64_t xe, ye, oe;
    size_t ob;
    const double set_bytes = shape_bytes(s, &xe, &ye, &oe, &ob);
    void *ref;

    memset(&b, 0, sizeof b);
    b.s = s;
    /* copies so that rotating among them exceeds a 50 MB L2 about 5 times,
     * within 4 GB */
    b.R = (int)ceil(256e6 / set_bytes);
    if (b.R < 1 || g_stub || o->check_only || o->warm)
        b.R = 1;
    if (b.R > 8)
        b.R = 8;
    while (b.R > 1 && b.R * set_bytes > 4e9)
        b.R--;
    for (int r = 0; r < b.R; r++) {
        b.x[r] = dalloc((size_t)xe * 2);
        b.y[r] = dalloc((size_t)ye * 2);
        b.out[r] = dalloc(ob);
        if (g_stub) {
            CHECK(tk_mem_set(g_ctx, b.x[r], 0, (size_t)xe * 2));
            CHECK(tk_mem_set(g_ctx, b.y[r], 0, (size_t)ye * 2));
        }
        fill_dev(b.x[r], (size_t)xe, 2 * (uint64_t)r + 1);
        fill_dev(b.y[r], (size_t)ye, 2 * (uint64_t)r + 2);
    }
    ref = dalloc(ob);
    if (!o->check_only)
        time_shape(&b, o, s);
    check_one_shape(s, &b, ref);
    for (int r = 0; r < b.R; r++) {
        tk_mem_free(g_ctx, b.x[r]);
        tk_mem_free(g_ctx, b.y[r]);
        tk_mem_free(g_ctx, b.out[r]);
    }
    tk_mem_free(g_ctx, ref);
}

/* ----------------------------------------------------------- precompile */

typedef struct pc_job {
    tk_op op;
    int64_t dims[3];
} pc_job;

typedef struct pc_pool {
    pc_job *jobs;
    size_t n;
    size_t next;               /* atomic */
    unsigned compiled, cached; /* atomic */
    unsigned failed;           /* atomic */
} pc_pool;

static void *pc_worker(void *user)
{
    pc_pool *p = user;
    for (;;) {
        const size_t i = __atomic_fetch_add(&p->next, 1, __ATOMIC_RELAXED);
        unsigned c = 0, h = 0;
        if (i >= p->n)
            return NULL;
        tk_status st = tk_op_precompile(g_ctx, p->jobs[i].op, p->jobs[i].dims, 3, &c, &h);
        if (st != TK_OK) {
            fprintf(stderr, "precompile %s %lldx%lldx%lld: %s (%s)\n", tk_op_name(p->jobs[i].op),
                    (long long)p->jobs[i].dims[0], (long long)p->jobs[i].dims[1],
                    (long long)p->jobs[i].dims[2], tk_status_str(st), tk_context_last_error(g_ctx));
            __atomic_fetch_add(&p->failed, 1, __ATOMIC_RELAXED);
        }
        __atomic_fetch_add(&p->compiled, c, __ATOMIC_RELAXED);
        __atomic_fetch_add(&p->cached, h, __ATOMIC_RELAXED);
    }
}

/* Every kernel the sweep's shapes use. Under STABLE and GENERIC the M of a
 * shape does not change what is compiled (tokitai/ops.h): one job per
 * (op, N, K), which also keeps threads from asking for the same kernels at
 * once. Under EXACT one job per shape. */
static int precompile_all(const shape_list *l, tk_policy policy, int jobs)
{
    pc_pool p;
    pthread_t th[64];
    int nt;
    tk_context_stats s0 = TK_STRUCT_INIT(tk_context_stats);
    tk_context_stats s1 = TK_STRUCT_INIT(tk_context_stats);
    const double t0 = bench_wall_s();

    memset(&p, 0, sizeof p);
    p.jobs = calloc(l->n + 1, sizeof *p.jobs);
    for (size_t i = 0; i < l->n; i++) {
        const shape *s = &l->v[i];
        const int64_t M = policy == TK_POLICY_EXACT ? s->M : 0;
        size_t j;
        for (j = 0; j < p.n; j++)
            if (p.jobs[j].op == s->op && p.jobs[j].dims[1] == s->N && p.jobs[j].dims[2] == s->K &&
                (M == 0 || p.jobs[j].dims[0] == M))
                break;
        if (j == p.n)
            p.jobs[p.n++] = (pc_job){s->op, {s->M, s->N, s->K}};
    }
    CHECK(tk_context_get_stats(g_ctx, &s0));
    nt = jobs < 1 ? 1 : jobs > 64 ? 64 : jobs;
    if ((size_t)nt > p.n)
        nt = (int)p.n;
    for (int t = 0; t < nt; t++)
        if (pthread_create(&th[t], NULL, pc_worker, &p) != 0) {
            nt = t;
            break;
        }
    if (nt == 0)
        pc_worker(&p);
    for (int t = 0; t < nt; t++)
        pthread_join(th[t], NULL);
    CHECK(tk_context_get_stats(g_ctx, &s1));
    printf("precompile: %zu jobs on %d threads, %u kernels compiled, %u found cached "
           "(%llu compiler runs, %.1f s of compiler time), %.1f s wall\n",
           p.n, nt ? nt : 1, p.compiled, p.cached, (unsigned long long)(s1.compiles - s0.compiles),
           s1.compile_seconds - s0.compile_seconds, bench_wall_s() - t0);
    free(p.jobs);
    return p.failed == 0;
}

/* --------------------------------------------------------------- report */

static const char *op_short(tk_op op)
{
    return op == TK_OP_GEMM_F16_FWD ? "fwd" : op == TK_OP_GEMM_F16_GRAD_A ? "grad_a" : "grad_b";
}

static double tflops(const shape *s, double ms)
{
    return 2.0 * (double)s->M * (double)s->N * (double)s->K / ms / 1e9;
}

static void print_row(const shape *s)
{
    char dims[64];
    snprintf(dims, sizeof dims, "%lldx%lldx%lld", (long long)s->M, (long long)s->N,
             (long long)s->K);
    static const char *const hb[] = {"-", "tk", "cuB", "both"};
    printf("| %-18s | %-11s | %8.1f | %8.1f | %6.3f | %7.2f | %7.2f | %-4s | %-5s |%s%s\n", dims,
           src_name[s->src], tflops(s, s->tk_ms), tflops(s, s->cb_ms), s->cb_ms / s->tk_ms,
           s->tk_host * 1e3, s->cb_host * 1e3, hb[s->host_bound],
           !s->checked    ? "stub"
           : s->ref_wrong ? "cuB!"
           : s->bad       ? "FAIL"
                          : "pass",
           s->compiled_in_timing ? " compiled during timing" : "",
           s->alloc_in_timing ? " workspace allocated during timing" : "");
    fflush(stdout);
}

static void csv_row(FILE *f, const shape *s)
{
    fprintf(f,
            "%s,%lld,%lld,%lld,%s,%.6f,%.6f,%.2f,%.2f,%.4f,%s,%llu,%.4g,%.6f,%.6f,%.6f,%.6f,%d,%."
            "6f,%.6f,%d\n",
            tk_op_name(s->op), (long long)s->M, (long long)s->N, (long long)s->K, src_name[s->src],
            s->tk_ms, s->cb_ms, tflops(s, s->tk_ms), tflops(s, s->cb_ms), s->cb_ms / s->tk_ms,
            !s->checked    ? "stub"
            : s->ref_wrong ? "ref-wrong"
            : s->bad       ? "FAIL"
                           : "pass",
            (unsigned long long)s->bad, s->max_err, s->tk_min, s->tk_max, s->cb_min, s->cb_max,
            s->batch, s->tk_host, s->cb_host, s->host_bound);
}

typedef struct summary {
    int n, below, fails, ref_wrong, in_timing, alloc_timing;
    double log_sum;
    const shape *worst;
    int n_dev; /* rows where neither side was host-bound */
    double log_dev;
} summary;

static void summarize(summary *sm, const shape *s)
{
    const double r = s->cb_ms / s->tk_ms;
    sm->n++;
    sm->log_sum += log(r);
    sm->below += r < TARGET_WORST;
    sm->fails += s->checked && s->bad != 0 && !s->ref_wrong;
    sm->ref_wrong += s->checked && s->ref_wrong;
    sm->in_timing += s->compiled_in_timing;
    sm->alloc_timing += s->alloc_in_timing;
    if (!s->host_bound) {
        sm->n_dev++;
        sm->log_dev += log(r);
    }
    if (sm->worst == NULL || r < sm->worst->cb_ms / sm->worst->tk_ms)
        sm->worst = s;
}

static void print_summary(const char *name, const summary *sm)
{
    char worst[64];
    if (sm->n == 0)
        return;
    snprintf(worst, sizeof worst, "%s %lldx%lldx%lld", op_short(sm->worst->op),
             (long long)sm->worst->M, (long long)sm->worst->N, (long long)sm->worst->K);
    printf("| %-7s | %3d | %7.3f | %6.3f | %-28s | %6d | %6d | %4d | %7.3f |\n", name, sm->n,
           exp(sm->log_sum / sm->n), sm->worst->cb_ms / sm->worst->tk_ms, worst, sm->below,
           sm->fails, sm->n - sm->n_dev, sm->n_dev ? exp(sm->log_dev / sm->n_dev) : NAN);
}

/* ----------------------------------------------------------------- main */

/* The stub run's own cache folder (mkdtemp), gone with the run. */
static void remove_stub_cache(const char *dir)
{
    char cmd[64];
    if (!g_stub)
        return;
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

static void print_usage(const char *argv0)
{
    printf("usage: %s [--manifest FILE] [--seed S] [--count N] [--random N]\n"
           "       [--policy stable|exact|generic] [--only fwd|grad_a|grad_b] [--quick]\n"
           "       [--csv FILE] [--jobs N] [--stub] [--check-only] [--warm]\n"
           "\n"
           "The GEMM sweep of the origin model against cuBLAS: every gemm shape of the\n"
           "manifest (default %s/manifests/default.tkm) and N (default 40) expert\n"
           "token counts M drawn from 1..%d for the up (M x %d x %d) and down\n"
           "(M x %d x %d) projections, through fwd, grad_a and grad_b, checked\n"
           "against cuBLAS's output. Per op: geometric mean and worst of cuBLAS time /\n"
           "tokitai time. Exit 0: every check passed; 1: a check failed; 77: no GPU or\n"
           "no cuBLAS. --check-only: one checked call per side and shape, nothing\n"
           "timed (to run under a profiler). --random N: instead, N shapes per op of\n"
           "the model's (N, K) families with M log-uniform in %d..%d (seeded).\n"
           "--warm: one copy of each shape's inputs, so that they stay in L2 between\n"
           "calls (default: copies rotated so that each call starts from a cold L2).\n",
           argv0, TK_SOURCE_DIR, M_EXPERT_MAX, D_FF, D_MODEL, D_MODEL, D_FF, RANDOM_M_MIN,
           RANDOM_M_MAX);
}

int main(int argc, char **argv)
{
    const char *manifest = TK_SOURCE_DIR "/manifests/default.tkm", *csv_path = NULL;
    uint64_t seed = 20240611;
    int count = 40, n_random = 0, quick = 0, check_only = 0, warm = 0,
        jobs = (int)sysconf(_SC_NPROCESSORS_ONLN);
    unsigned op_mask = 7;
    tk_policy policy = TK_POLICY_STABLE;
    tk_config *cfg = NULL;
    char why[512] = "", stub_cache[] = "/tmp/tk-sweep-stub-XXXXXX";
    shape_list l = {0};
    FILE *csv = NULL;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            print_usage(argv[0]);
            return 0;
        } else if (strcmp(a, "--quick") == 0)
            quick = 1;
        else if (strcmp(a, "--check-only") == 0)
            check_only = 1;
        else if (strcmp(a, "--warm") == 0)
            warm = 1;
        else if (strcmp(a, "--stub") == 0)
            g_stub = 1;
        else if (v == NULL)
            goto bad;
        else if (strcmp(a, "--manifest") == 0)
            manifest = v, i++;
        else if (strcmp(a, "--csv") == 0)
            csv_path = v, i++;
        else if (strcmp(a, "--seed") == 0)
            seed = strtoull(v, NULL, 0), i++;
        else if (strcmp(a, "--count") == 0)
            count = atoi(v), i++;
        else if (strcmp(a, "--random") == 0)
            n_random = atoi(v), i++;
        else if (strcmp(a, "--jobs") == 0)
            jobs = atoi(v), i++;
        else if (strcmp(a, "--policy") == 0) {
            i++;
            if (strcmp(v, "stable") == 0)
                policy = TK_POLICY_STABLE;
            else if (strcmp(v, "exact") == 0)
                policy = TK_POLICY_EXACT;
            else if (strcmp(v, "generic") == 0)
                policy = TK_POLICY_GENERIC;
            else
                goto bad;
        } else if (strcmp(a, "--only") == 0) {
            tk_op op;
            char name[32];
            i++;
            snprintf(name, sizeof name, "gemm_f16_%s", v);
            if (tk_op_from_name(name, &op) != TK_OK || op > TK_OP_GEMM_F16_GRAD_B)
                goto bad;
            op_mask = 1u << op;
        } else
            goto bad;
    }
    if (count < 0 || count > 100000 || n_random < 0 || n_random > 100000)
        goto bad;

    /* the shapes, before any device work: a bad manifest costs nothing */
    if (n_random > 0) {
        rng_state = seed;
        for (int op = 0; op < N_OPS; op++)
            for (int i = 0; i < n_random; i++) {
                const int64_t *nk = model_nk[next_u64() % (sizeof model_nk / sizeof model_nk[0])];
                double u = (double)(next_u64() >> 11) / 9007199254740992.0; /* [0, 1) */
                int64_t m = (int64_t)floor(RANDOM_M_MIN * pow((double)RANDOM_M_MAX / RANDOM_M_MIN, u));
                if (op_mask & (1u << op))
                    add_shape(&l, (tk_op)op, m, nk[0], nk[1], SRC_RANDOM);
            }
    } else if (load_manifest(manifest, &l, op_mask) != 0) {
        return 2;
    } else {
        int64_t *ms = malloc((size_t)(count + 1) * sizeof *ms);
        rng_state = seed;
        for (int i = 0; i < count; i++)
            ms[i] = 1 + (int64_t)(next_u64() % M_EXPERT_MAX);
        qsort(ms, (size_t)count, sizeof *ms, cmp_i64); /* the tables read by M */
        for (int op = 0; op < N_OPS; op++) {
            if (!(op_mask & (1u << op)))
                continue;
            for (int i = 0; i < count; i++)
                add_shape(&l, (tk_op)op, ms[i], D_FF, D_MODEL, SRC_UP);
            for (int i = 0; i < count; i++)
                add_shape(&l, (tk_op)op, ms[i], D_MODEL, D_FF, SRC_DOWN);
        }
        free(ms);
    }

    if (tk_config_create(&cfg) != TK_OK || tk_config_set_policy(cfg, policy) != TK_OK ||
        tk_config_set_build_mode(cfg, TK_BUILD_SYNC) != TK_OK ||
        tk_config_set_backend(cfg, g_stub ? TK_BACKEND_STUB : TK_BACKEND_AUTO) != TK_OK ||
        /* the stub's objects have no place in the user's cache */
        (g_stub &&
         (mkdtemp(stub_cache) == NULL || tk_config_set_cache_dir(cfg, stub_cache) != TK_OK)))
        return 1;
    if (tk_context_create(cfg, &g_ctx, why, sizeof why) != TK_OK ||
        (!g_stub && strcmp(tk_context_backend_name(g_ctx), "stub") == 0)) {
        printf("skipped: no GPU device (%s)\n", why);
        return 77;
    }
    tk_config_destroy(cfg);
    if (!g_stub && !cublas_ref_open()) {
        printf("skipped: cuBLAS not loadable (libcublas.so.13 / .12): no reference\n");
        tk_context_destroy(g_ctx);
        return 77;
    }
    if (csv_path != NULL && (csv = fopen(csv_path, "w")) == NULL) {
        fprintf(stderr, "cannot write %s\n", csv_path);
        return 2;
    }
    if (csv != NULL)
        fprintf(csv, "op,M,N,K,source,tk_ms,cublas_ms,tk_tflops,cublas_tflops,ratio,check,bad,"
                     "max_err,tk_min_ms,tk_max_ms,cublas_min_ms,cublas_max_ms,batch,tk_host_ms,"
                     "cublas_host_ms,host_bound\n");

    {
        tk_kernel_desc d;
        memset(&d, 0, sizeof d);
        d.source = fill_src;
        d.entry = "tk_sweep_fill";
        CHECK(tk_kernel_get(g_ctx, &d, &g_fill));
    }

    const char *pol = policy == TK_POLICY_EXACT     ? "exact"
                      : policy == TK_POLICY_GENERIC ? "generic"
                                                    : "stable";
    printf("# bench/sweep: device %s (%s), compiler %s, policy %s%s\n", tk_context_target(g_ctx),
           tk_context_backend_name(g_ctx), tk_context_compiler(g_ctx), pol,
           g_stub ? ", STUB (no kernels run; times are host times, the reference is the library)"
                  : "");
    if (n_random > 0)
        printf("# random model shapes: %d per op, M log-uniform in %d..%d, seed %llu; %s timing\n",
               n_random, RANDOM_M_MIN, RANDOM_M_MAX, (unsigned long long)seed,
               quick ? "quick" : "full");
    else
        printf("# manifest %s; expert shapes: %d token counts M in 1..%d, seed %llu; %s timing\n",
               manifest, count, M_EXPERT_MAX, (unsigned long long)seed, quick ? "quick" : "full");
    printf("# ratio = cuBLAS time / tokitai time; target: geomean >= %.2f per op, no shape < "
           "%.2f\n\n",
           TARGET_GEOMEAN, TARGET_WORST);
    fflush(stdout);

    if (!precompile_all(&l, policy, jobs)) {
        printf("precompile failed\n");
        return 1;
    }
    if (!g_stub) /* the sleep kernel's compile, before the count starts */
        CHECK(bench_sleep(&g_tm, 0.01));
    const uint64_t compiles_after_pc = compiles_now();

    run_opts o = {quick, check_only, quick ? 5 : 11, quick ? 1.0 : 2.0, warm};
    summary sm[N_OPS + 1];
    int skipped = 0;
    const double t_start = bench_wall_s();
    memset(sm, 0, sizeof sm);
    for (int op = 0; op < N_OPS; op++) {
        if (!(op_mask & (1u << op)))
            continue;
        printf("\n## %s\n\n", tk_op_name((tk_op)op));
        printf("| %-18s | %-11s | %8s | %8s | %6s | %7s | %7s | %-4s | %-5s |\n", "M x N x K",
               "source", "tk TF/s", "cuB TF/s", "ratio", "tk host", "cuB host", "host", "check");
        printf(
            "|--------------------|-------------|---------:|---------:|-------:|--------:|-------"
            "--:|------|-------|\n");
        for (size_t i = 0; i < l.n; i++) {
            shape *s = &l.v[i];
            int64_t xe, ye, oe;
            size_t ob;
            if (s->op != (tk_op)op)
                continue;
            if (g_stub && shape_bytes(s, &xe, &ye, &oe, &ob) + (double)ob > 256.0 * (1 << 20)) {
                skipped++;
                continue;
            }
            bench_shape(s, &o);
            if (check_only) {
                printf("| %5lld x %4lld x %4lld | %-11s | checked: %s |\n", (long long)s->M,
                       (long long)s->N, (long long)s->K, src_name[s->src],
                       s->ref_wrong ? "ok (cuBLAS off the exact value)"
                       : s->bad     ? "FAILED"
                                    : "ok");
                sm[N_OPS].fails += s->bad != 0 && !s->ref_wrong;
                continue;
            }
            print_row(s);
            if (csv != NULL)
                csv_row(csv, s);
            summarize(&sm[op], s);
            summarize(&sm[N_OPS], s);
        }
    }
    if (csv != NULL)
        fclose(csv);

    if (check_only) {
        printf("\n%s (check only, nothing timed)\n",
               sm[N_OPS].fails ? "SOME CHECKS FAILED" : "all checks passed");
        tk_context_destroy(g_ctx);
        free(l.v);
        remove_stub_cache(stub_cache);
        return sm[N_OPS].fails ? 1 : 0;
    }
    tk_context_stats st = TK_STRUCT_INIT(tk_context_stats);
    CHECK(tk_context_get_stats(g_ctx, &st));
    printf("\n## summary (%.0f s of measuring)\n\n", bench_wall_s() - t_start);
    printf("| op      |   n | geomean |  worst | worst shape                  | < %.2f | failed | "
           "host | geomean device-bound |\n",
           TARGET_WORST);
    printf("|---------|----:|--------:|-------:|------------------------------|-------:|-------:|--"
           "---:|--------:|\n");
    for (int op = 0; op < N_OPS; op++)
        print_summary(op_short((tk_op)op), &sm[op]);
    print_summary("all", &sm[N_OPS]);
    int target_met = 1;
    for (int op = 0; op < N_OPS; op++)
        if (sm[op].n && (exp(sm[op].log_sum / sm[op].n) < TARGET_GEOMEAN || sm[op].below))
            target_met = 0;
    printf("\ntarget (geomean >= %.2f per op, no shape < %.2f): %s\n", TARGET_GEOMEAN, TARGET_WORST,
           g_stub       ? "n/a (stub)"
           : target_met ? "met"
                        : "NOT met");
    printf("kernels compiled after the precompile: %llu; rows timed with a compile inside: %d\n",
           (unsigned long long)(compiles_now() - compiles_after_pc), sm[N_OPS].in_timing);
    printf("operator workspace: %llu bytes held, peak %llu, %llu device allocations over the run; "
           "rows timed with an allocation inside: %d\n",
           (unsigned long long)st.workspace_bytes, (unsigned long long)st.workspace_peak,
           (unsigned long long)st.workspace_allocs, sm[N_OPS].alloc_timing);
    printf("samples whose enqueue outlasted the sleep before them: %d of %d (after %d taken "
           "again)\n",
           g_tm.overran, g_tm.samples, g_tm.retaken);
    if (skipped)
        printf("%d shapes left out: over 256 MiB of buffers on the stub\n", skipped);
    if (sm[N_OPS].ref_wrong)
        printf("shapes where cuBLAS's output was off the exact value and tokitai's was not "
               "(\"cuB!\", not failures): %d\n",
               sm[N_OPS].ref_wrong);
    printf("%s\n", sm[N_OPS].fails ? "SOME CHECKS FAILED" : "all checks passed");
    tk_context_destroy(g_ctx);
    free(l.v);
    remove_stub_cache(stub_cache);
    return sm[N_OPS].fails ? 1 : 0;

bad:
    fprintf(stderr, "bad arguments (see %s --help)\n", argv[0]);
    return 2;
}
