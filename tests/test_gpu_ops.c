/* Softmax and embedding operators on the GPU against the CPU references:
 * shapes of 1, primes, non-multiples of every tile and vector size, and
 * >= 4096; outputs poisoned before each run and every element (padding
 * included) checked after; repeated and out-of-range indices; deterministic
 * bits; the checked run for all seven ops. Skipped without a GPU. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tk_test.h"
#include "tokitai/ops.h"

#define POISON16 0xffffu /* NaN */

static uint64_t rng = 0x243f6a8885a308d3ull;

static uint64_t rnext(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static uint16_t rhalf(float scale)
{
    double u = (double)(rnext() >> 11) * (1.0 / 9007199254740992.0);
    uint16_t h = tk_f32_to_f16((float)((2.0 * u - 1.0) * scale));
    return (h & 0x7fffu) ? h : 0x3800u;
}

static tk_context *gpu_ctx(tk_policy policy)
{
    tk_config *cfg = NULL;
    tk_context *ctx;
    ck_assert_int_eq(tk_config_create(&cfg), TK_OK);
    ck_assert_int_eq(tk_config_set_policy(cfg, policy), TK_OK);
    ctx = tk_test_gpu_context_or_skip(cfg);
    tk_config_destroy(cfg);
    if (strcmp(tk_context_backend_name(ctx), "stub") == 0) {
        printf("skipped: only the stub backend is available\n");
        exit(77);
    }
    return ctx;
}

static void *dalloc(tk_context *ctx, size_t bytes)
{
    void *p = NULL;
    tk_assert_status(tk_mem_alloc(ctx, bytes, &p), TK_OK);
    return p;
}

static void up(tk_context *ctx, void *d, const void *h, size_t bytes)
{
    tk_assert_status(tk_mem_upload(ctx, d, h, bytes), TK_OK);
}

static void down(tk_context *ctx, void *h, const void *d, size_t bytes)
{
    tk_assert_status(tk_stream_sync(ctx, NULL), TK_OK);
    tk_assert_status(tk_mem_download(ctx, h, d, bytes), TK_OK);
}

/* Per-element checks call Check only on failure: an assertion per element
 * costs a message to the runner each and makes large shapes crawl. */
#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond))                                                                               \
            ck_abort_msg(__VA_ARGS__);                                                             \
    } while (0)

/* |got - want| <= abs + rel |want|, NaN never passes. */
static void expect_close(const char *what, int64_t i, uint16_t got, uint16_t want, double abs_tol,
                         double rel_tol)
{
    double g = tk_f16_to_f32(got), w = tk_f16_to_f32(want);
    EXPECT(fabs(g - w) <= abs_tol + rel_tol * fabs(w),
           "%s[%lld]: got %.8g (0x%04x), want %.8g (0x%04x)", what, (long long)i, g, got, w, want);
}

/* --------------------------------------------------------------- softmax */

typedef struct sm_case {
    int64_t rows, cols, ld; /* ld 0: packed */
    int offset;             /* halves added to every pointer (breaks 16-byte alignment) */
} sm_case;

static const sm_case sm_cases[] = {
    {1, 1, 0, 0},     {7, 13, 0, 0},     {1, 4099, 0, 0},     {3, 1024, 0, 0},   {33, 4096, 0, 0},
    {5, 32000, 0, 0}, {300, 129, 0, 0},  {4100, 64, 0, 0},    {17, 2048, 0, 0},  {9, 2056, 0, 0},
    {4, 70001, 0, 0}, {2, 262144, 0, 0}, {64, 5000, 5008, 0}, {11, 777, 800, 1}, {6, 4096, 0, 3},
    {4097, 8, 0, 0},  {2, 16384, 0, 0},  {3, 33000, 0, 0},
};

static void run_softmax_case(tk_context *ctx, const sm_case *c, int xent)
{
    const int64_t rows = c->rows, cols = c->cols, ld = c->ld ? c->ld : cols;
    const size_t n = (size_t)(rows * ld + c->offset), bytes = n * 2;
    uint16_t *x = malloc(bytes), *g = malloc(bytes), *got = malloc(bytes);
    uint16_t *xp = malloc((size_t)(rows * cols) * 2), *gp = malloc((size_t)(rows * cols) * 2);
    uint16_t *want = malloc((size_t)(rows * cols) * 2);
    uint16_t *dx = dalloc(ctx, bytes), *dg = dalloc(ctx, bytes), *dy = dalloc(ctx, bytes);
    ck_assert(x && g && got && xp && gp && want);

    for (size_t i = 0; i < n; i++) {
        x[i] = rhalf(8.0f);
        g[i] = rhalf(1.0f);
    }
    if (xent) {
        /* s: a real softmax output, packed then spread to ld */
        for (int64_t r = 0; r < rows; r++)
            memcpy(xp + r * cols, x + c->offset + r * ld, (size_t)cols * 2);
        tk_assert_status(tk_ref_softmax_f16_fwd(rows, cols, xp, xp), TK_OK);
        for (int64_t r = 0; r < rows; r++)
            memcpy(x + c->offset + r * ld, xp + r * cols, (size_t)cols * 2);
    }
    for (int64_t r = 0; r < rows; r++) {
        memcpy(xp + r * cols, x + c->offset + r * ld, (size_t)cols * 2);
        memcpy(gp + r * cols, g + c->offset + r * ld, (size_t)cols * 2);
    }
    up(ctx, dx, x, bytes);
    up(ctx, dg, g, bytes);
    tk_assert_status(tk_mem_set(ctx, dy, 0xff, bytes), TK_OK);
    if (!xent) {
        tk_assert_status(
            tk_softmax_f16_fwd(ctx, rows, cols, dx + c->offset, c->ld, dy + c->offset, c->ld, NULL),
            TK_OK);
        tk_assert_status(tk_ref_softmax_f16_fwd(rows, cols, xp, want), TK_OK);
    } else {
        tk_assert_status(tk_softmax_xent_f16_bwd(ctx, rows, cols, dx + c->offset, c->ld,
                                                 dg + c->offset, c->ld, dy + c->offset, c->ld,
                                                 NULL),
                         TK_OK);
        tk_assert_status(tk_ref_softmax_xent_f16_bwd(rows, cols, xp, gp, want), TK_OK);
    }
    down(ctx, got, dy, bytes);
    for (int i = 0; i < c->offset; i++)
        ck_assert_msg(got[i] == POISON16, "%lldx%lld: element before the output written",
                      (long long)rows, (long long)cols);
    for (int64_t r = 0; r < rows; r++) {
        const uint16_t *gr = got + c->offset + r * ld;
        double sum = 0.0;
        for (int64_t k = 0; k < cols; k++) {
            expect_close(xent ? "xent" : "softmax", r * cols + k, gr[k], want[r * cols + k], 1e-3,
                         1e-2);
            sum += tk_f16_to_f32(gr[k]);
        }
        /* the padding between rows is never written */
        for (int64_t k = cols; k < ld && (r + 1 < rows || c->offset + r * ld + k < (int64_t)n); k++)
            EXPECT(gr[k] == POISON16, "%lldx%lld ld %lld: padding [%lld,%lld] written",
                   (long long)rows, (long long)cols, (long long)ld, (long long)r, (long long)k);
        if (!xent)
            EXPECT(fabs(sum - 1.0) < 1e-2, "row %lld sums to %g", (long long)r, sum);
    }
    tk_mem_free(ctx, dx);
    tk_mem_free(ctx, dg);
    tk_mem_free(ctx, dy);
    free(x);
    free(g);
    free(got);
    free(xp);
    free(gp);
    free(want);
}

START_TEST(test_softmax_fwd_shapes)
{
    tk_context *ctx = gpu_ctx(_i == 0 ? TK_POLICY_EXACT : TK_POLICY_GENERIC);
    for (size_t i = 0; i < sizeof sm_cases / sizeof sm_cases[0]; i++)
        run_softmax_case(ctx, &sm_cases[i], 0);
    tk_context_destroy(ctx);
}
END_TEST

START_TEST(test_xent_bwd_shapes)
{
    tk_context *ctx = gpu_ctx(_i == 0 ? TK_POLICY_EXACT : TK_POLICY_GENERIC);
    for (size_t i = 0; i < sizeof sm_cases / sizeof sm_cases[0]; i++)
        run_softmax_case(ctx, &sm_cases[i], 1);
    tk_context_destroy(ctx);
}
END_TEST

START_TEST(test_softmax_large)
{
    /* >= 4096 rows and columns at once */
    tk_context *ctx = gpu_ctx(TK_POLICY_EXACT);
    const sm_case c = {4096, 4096, 0, 0};
    run_softmax_case(ctx, &c, 0);
    run_softmax_case(ctx, &c, 1);
    tk_context_destroy(ctx);
}
END_TEST

/* ------------------------------------------------------------- embedding */

typedef struct emb_case {
    int64_t V, D, Q;
} emb_case;

static const emb_case emb_cases[] = {
    {1, 1, 1},      {7, 13, 11},    {1000, 13, 777},   {10, 4099, 5}, {50304, 1024, 4096},
    {3, 64, 10000}, {100, 1, 3000}, {5000, 256, 4097}, {17, 2, 2049}, {64, 24, 65536},
};

/* idx: random rows (so repeated ones), every 7th out of range on either side. */
static void make_idx(int32_t *idx, int64_t Q, int64_t V, uint64_t *n_bad)
{
    uint64_t bad = 0;
    for (int64_t q = 0; q < Q; q++) {
        uint64_t r = rnext();
        if (q % 7 == 3) {
            idx[q] = (r & 1) ? -(int32_t)(1 + r % 3) : (int32_t)(V + (int64_t)(r % 3));
            bad++;
        } else {
            idx[q] = (int32_t)(r % (uint64_t)V);
        }
    }
    *n_bad = bad;
}

static void run_embedding_fwd_case(tk_context *ctx, const emb_case *c)
{
    const size_t wn = (size_t)(c->V * c->D), on = (size_t)(c->Q * c->D);
    uint16_t *w = malloc(wn * 2), *got = malloc(on * 2), *want = malloc(on * 2);
    int32_t *idx = malloc((size_t)c->Q * 4);
    uint64_t n_bad = 0, ref_bad = 0;
    uint32_t dev_bad = 0;
    void *dw = dalloc(ctx, wn * 2), *dout = dalloc(ctx, on * 2),
         *didx = dalloc(ctx, (size_t)c->Q * 4);
    uint32_t *dbad = dalloc(ctx, 4);
    ck_assert(w && got && want && idx);
    for (size_t i = 0; i < wn; i++)
        w[i] = rhalf(1.0f);
    make_idx(idx, c->Q, c->V, &n_bad);
    up(ctx, dw, w, wn * 2);
    up(ctx, didx, idx, (size_t)c->Q * 4);
    tk_assert_status(tk_mem_set(ctx, dout, 0xff, on * 2), TK_OK);
    tk_assert_status(tk_mem_set(ctx, dbad, 0, 4), TK_OK);
    tk_assert_status(tk_embedding_f16_fwd(ctx, c->V, c->D, dw, c->Q, didx, dout, dbad, NULL),
                     TK_OK);
    down(ctx, got, dout, on * 2);
    down(ctx, &dev_bad, dbad, 4);
    tk_assert_status(tk_ref_embedding_f16_fwd(c->V, c->D, w, c->Q, idx, want, &ref_bad), TK_OK);
    ck_assert_uint_eq(ref_bad, n_bad);
    ck_assert_msg(dev_bad == n_bad, "V=%lld D=%lld Q=%lld: device counted %u bad, want %llu",
                  (long long)c->V, (long long)c->D, (long long)c->Q, dev_bad,
                  (unsigned long long)n_bad);
    for (size_t i = 0; i < on; i++)
        EXPECT(got[i] == want[i], "V=%lld D=%lld Q=%lld: out[%zu] = 0x%04x, want 0x%04x",
               (long long)c->V, (long long)c->D, (long long)c->Q, i, got[i], want[i]);
    /* without a counter too */
    tk_assert_status(tk_mem_set(ctx, dout, 0xff, on * 2), TK_OK);
    tk_assert_status(tk_embedding_f16_fwd(ctx, c->V, c->D, dw, c->Q, didx, dout, NULL, NULL),
                     TK_OK);
    down(ctx, got, dout, on * 2);
    ck_assert(memcmp(got, want, on * 2) == 0);
    tk_mem_free(ctx, dw);
    tk_mem_free(ctx, dout);
    tk_mem_free(ctx, didx);
    tk_mem_free(ctx, dbad);
    free(w);
    free(got);
    free(want);
    free(idx);
}

START_TEST(test_embedding_fwd_shapes)
{
    tk_context *ctx = gpu_ctx(_i == 0 ? TK_POLICY_EXACT : TK_POLICY_GENERIC);
    for (size_t i = 0; i < sizeof emb_cases / sizeof emb_cases[0]; i++)
        run_embedding_fwd_case(ctx, &emb_cases[i]);
    tk_context_destroy(ctx);
}
END_TEST

static void run_embedding_bwd_case(tk_context *ctx, const emb_case *c, unsigned flags)
{
    const size_t wn = (size_t)(c->V * c->D), on = (size_t)(c->Q * c->D);
    uint16_t *w0 = malloc(wn * 2), *go = malloc(on * 2), *got = malloc(wn * 2),
             *got2 = malloc(wn * 2), *want = malloc(wn * 2);
    int32_t *idx = malloc((size_t)c->Q * 4);
    uint64_t n_bad = 0, ref_bad = 0;
    uint32_t dev_bad = 0;
    void *dw = dalloc(ctx, wn * 2), *dgo = dalloc(ctx, on * 2),
         *didx = dalloc(ctx, (size_t)c->Q * 4);
    uint32_t *dbad = dalloc(ctx, 4);
    ck_assert(w0 && go && got && got2 && want && idx);
    for (size_t i = 0; i < wn; i++)
        w0[i] = rhalf(1.0f);
    for (size_t i = 0; i < on; i++)
        go[i] = rhalf(1.0f);
    make_idx(idx, c->Q, c->V, &n_bad);
    up(ctx, dgo, go, on * 2);
    up(ctx, didx, idx, (size_t)c->Q * 4);
    memcpy(want, w0, wn * 2);
    tk_assert_status(tk_ref_embedding_f16_bwd(c->V, c->D, want, c->Q, idx, go, &ref_bad), TK_OK);
    ck_assert_uint_eq(ref_bad, n_bad);

    for (int run = 0; run < 2; run++) {
        uint16_t *dst = run == 0 ? got : got2;
        up(ctx, dw, w0, wn * 2);
        tk_assert_status(tk_mem_set(ctx, dbad, 0, 4), TK_OK);
        tk_assert_status(
            tk_embedding_f16_bwd(ctx, c->V, c->D, dw, c->Q, didx, dgo, flags, dbad, NULL), TK_OK);
        down(ctx, dst, dw, wn * 2);
        down(ctx, &dev_bad, dbad, 4);
        ck_assert_msg(dev_bad == n_bad, "V=%lld D=%lld Q=%lld: device counted %u bad, want %llu",
                      (long long)c->V, (long long)c->D, (long long)c->Q, dev_bad,
                      (unsigned long long)n_bad);
    }
    for (size_t i = 0; i < wn; i++) {
        if (flags & TK_EMBEDDING_DETERMINISTIC)
            /* same fp32 order as the reference: the same bits */
            EXPECT(got[i] == want[i],
                   "V=%lld D=%lld Q=%lld: grad_weight[%zu] = 0x%04x, want 0x%04x", (long long)c->V,
                   (long long)c->D, (long long)c->Q, i, got[i], want[i]);
        else
            expect_close("grad_weight", (int64_t)i, got[i], want[i], 1e-3, 2e-3);
    }
    if (flags & TK_EMBEDDING_DETERMINISTIC)
        ck_assert_msg(memcmp(got, got2, wn * 2) == 0, "two deterministic runs differ");
    tk_mem_free(ctx, dw);
    tk_mem_free(ctx, dgo);
    tk_mem_free(ctx, didx);
    tk_mem_free(ctx, dbad);
    free(w0);
    free(go);
    free(got);
    free(got2);
    free(want);
    free(idx);
}

START_TEST(test_embedding_bwd_deterministic)
{
    tk_context *ctx = gpu_ctx(_i == 0 ? TK_POLICY_EXACT : TK_POLICY_GENERIC);
    for (size_t i = 0; i < sizeof emb_cases / sizeof emb_cases[0]; i++)
        run_embedding_bwd_case(ctx, &emb_cases[i], TK_EMBEDDING_DETERMINISTIC);
    tk_context_destroy(ctx);
}
END_TEST

START_TEST(test_embedding_bwd_default)
{
    tk_context *ctx = gpu_ctx(TK_POLICY_EXACT);
    for (size_t i = 0; i < sizeof emb_cases / sizeof emb_cases[0]; i++)
        run_embedding_bwd_case(ctx, &emb_cases[i], 0);
    tk_context_destroy(ctx);
}
END_TEST

START_TEST(test_embedding_bwd_one_hot_row)
{
    /* Every query hits one row: a single long run (sorted once, summed by
     * one block per column chunk); fp32 accumulation keeps what fp16 would
     * lose: 2048 + 8192 x 0.25 = 4096 exactly. */
    tk_context *ctx = gpu_ctx(TK_POLICY_EXACT);
    enum { Q = 8192, D = 8 };
    static int32_t idx[Q];
    static uint16_t go[Q * D];
    uint16_t w[2 * D], got[2 * D];
    void *dw = dalloc(ctx, sizeof w), *dgo = dalloc(ctx, sizeof go),
         *didx = dalloc(ctx, sizeof idx);
    for (int q = 0; q < Q; q++)
        idx[q] = 1;
    for (int i = 0; i < Q * D; i++)
        go[i] = tk_f32_to_f16(0.25f);
    for (int i = 0; i < 2 * D; i++)
        w[i] = tk_f32_to_f16(2048.0f);
    up(ctx, dw, w, sizeof w);
    up(ctx, dgo, go, sizeof go);
    up(ctx, didx, idx, sizeof idx);
    tk_assert_status(tk_embedding_f16_bwd(ctx, 2, D, dw, Q, didx, dgo, 0, NULL, NULL), TK_OK);
    down(ctx, got, dw, sizeof got);
    for (int i = 0; i < D; i++) {
        ck_assert_uint_eq(got[i], tk_f32_to_f16(2048.0f)); /* row 0 untouched */
        ck_assert_uint_eq(got[D + i], tk_f32_to_f16(4096.0f));
    }
    tk_mem_free(ctx, dw);
    tk_mem_free(ctx, dgo);
    tk_mem_free(ctx, didx);
    tk_context_destroy(ctx);
}
END_TEST

/* ----------------------------------------------------------- checked run */

START_TEST(test_check_run_all_ops)
{
    tk_context *ctx = gpu_ctx(TK_POLICY_EXACT);
    static const struct {
        tk_op op;
        int n;
        int64_t d[3];
    } runs[] = {
        {TK_OP_GEMM_F16_FWD, 3, {67, 45, 129}},
        {TK_OP_GEMM_F16_FWD, 3, {512, 512, 512}},
        {TK_OP_GEMM_F16_GRAD_A, 3, {67, 45, 129}},
        {TK_OP_GEMM_F16_GRAD_A, 3, {256, 384, 512}},
        {TK_OP_GEMM_F16_GRAD_B, 3, {67, 45, 129}},
        {TK_OP_GEMM_F16_GRAD_B, 3, {512, 256, 384}},
        {TK_OP_SOFTMAX_F16_FWD, 2, {127, 4099}},
        {TK_OP_SOFTMAX_F16_FWD, 2, {256, 32000}},
        {TK_OP_SOFTMAX_XENT_F16_BWD, 2, {127, 4099}},
        {TK_OP_SOFTMAX_XENT_F16_BWD, 2, {256, 32000}},
        {TK_OP_EMBEDDING_F16_FWD, 3, {5000, 256, 3000}},
        {TK_OP_EMBEDDING_F16_BWD, 3, {5000, 256, 3000}},
        {TK_OP_EMBEDDING_F16_BWD, 3, {50304, 1024, 4096}},
    };
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        tk_check_report r = TK_STRUCT_INIT(tk_check_report);
        char *md;
        tk_status st = tk_check_run(ctx, runs[i].op, runs[i].d, runs[i].n, 1234 + i, &r);
        ck_assert_msg(st == TK_OK, "%s: %s: %s", tk_op_name(runs[i].op), tk_status_str(st),
                      tk_context_last_error(ctx));
        md = tk_check_report_markdown(&r);
        if (md != NULL)
            printf("%s\n", md);
        ck_assert_msg(r.passed, "%s %lld,%lld,%lld: max abs %g rel %g (tolerance %g + %g)",
                      tk_op_name(runs[i].op), (long long)runs[i].d[0], (long long)runs[i].d[1],
                      (long long)runs[i].d[2], r.max_abs_error, r.max_rel_error, r.tolerance_abs,
                      r.tolerance_rel);
        ck_assert(r.kernel_ms > 0.0);
        if (runs[i].op == TK_OP_EMBEDDING_F16_FWD || runs[i].op == TK_OP_EMBEDDING_F16_BWD)
            ck_assert_uint_eq(r.bad_indices, (uint64_t)(runs[i].d[2] / 97));
        free(md);
        tk_check_report_free(&r);
    }
    tk_context_destroy(ctx);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("gpu_ops");
    TCase *tc = tcase_create("gpu");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, test_softmax_fwd_shapes, 0, 2);
    tcase_add_loop_test(tc, test_xent_bwd_shapes, 0, 2);
    tcase_add_test(tc, test_softmax_large);
    tcase_add_loop_test(tc, test_embedding_fwd_shapes, 0, 2);
    tcase_add_loop_test(tc, test_embedding_bwd_deterministic, 0, 2);
    tcase_add_test(tc, test_embedding_bwd_default);
    tcase_add_test(tc, test_embedding_bwd_one_hot_row);
    tcase_add_test(tc, test_check_run_all_ops);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tk_test_gpu_main(suite());
}
