/* Dynamic shapes on the GPU: every op under every policy and build mode,
 * from an empty cache, called in a loop with a new moving dimension each time
 * (GEMM M, softmax rows, embedding Q) while background builds complete and
 * swap kernels underneath; every output checked against the CPU reference.
 * Skipped without a GPU. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tk_test.h"
#include "tokitai/ops.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t rnext(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void fill(uint16_t *v, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++) {
        const double u = (double)(rnext() >> 11) * (1.0 / 9007199254740992.0);
        v[i] = tk_f32_to_f16((float)((2.0 * u - 1.0) * scale));
    }
}

#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond))                                                                               \
            ck_abort_msg(__VA_ARGS__);                                                             \
    } while (0)

static char *g_dir;

static tk_context *ctx_make(tk_policy policy, tk_build_mode mode)
{
    tk_config *cfg = NULL;
    tk_context *ctx;
    g_dir = tk_test_tmpdir("gpu-dynamic");
    ck_assert_int_eq(tk_config_create(&cfg), TK_OK);
    ck_assert_int_eq(tk_config_set_policy(cfg, policy), TK_OK);
    ck_assert_int_eq(tk_config_set_build_mode(cfg, mode), TK_OK);
    ck_assert_int_eq(tk_config_set_cache_dir(cfg, g_dir), TK_OK);
    ctx = tk_test_gpu_context_or_skip(cfg);
    tk_config_destroy(cfg);
    if (strcmp(tk_context_backend_name(ctx), "stub") == 0) {
        printf("skipped: only the stub backend is available\n");
        exit(77);
    }
    return ctx;
}

/* expect_swap: the op has a fallback under this policy (GEMM: always, the
 * universal kernel; softmax and embedding: the generic kernel, except under
 * the generic policy itself). */
static void ctx_done(tk_context *ctx, tk_policy policy, tk_build_mode mode, const char *what,
                     int expect_swap)
{
    tk_context_stats s = TK_STRUCT_INIT(tk_context_stats);
    ck_assert_int_eq(tk_context_wait_builds(ctx, 120000), TK_OK);
    ck_assert_int_eq(tk_context_get_stats(ctx, &s), TK_OK);
    printf("%s policy %d mode %d: compiles %llu (callers %llu), fallback calls %llu, builds done "
           "%llu, waits %llu (%.3f s)\n",
           what, (int)policy, (int)mode, (unsigned long long)s.compiles,
           (unsigned long long)s.sync_compiles, (unsigned long long)s.fallback_calls,
           (unsigned long long)s.builds_done, (unsigned long long)s.waits, s.wait_seconds);
    ck_assert_uint_eq(s.builds_failed, 0);
    ck_assert_uint_eq(s.builds_pending, 0);
    if (mode == TK_BUILD_SYNC) {
        ck_assert_uint_eq(s.fallback_calls, 0);
        ck_assert_uint_eq(s.builds_queued, 0);
    } else if (expect_swap) {
        /* kernels were swapped underneath the loop */
        ck_assert_uint_gt(s.fallback_calls, 0);
        ck_assert_uint_gt(s.builds_done, 0);
    }
    tk_context_destroy(ctx);
    tk_test_rmtree(g_dir);
    free(g_dir);
}

static void *dalloc(tk_context *ctx, size_t bytes)
{
    void *p = NULL;
    ck_assert_int_eq(tk_mem_alloc(ctx, bytes, &p), TK_OK);
    return p;
}

static const tk_policy policies[3] = {TK_POLICY_STABLE, TK_POLICY_EXACT, TK_POLICY_GENERIC};
static const tk_build_mode modes[2] = {TK_BUILD_ASYNC, TK_BUILD_SYNC};

/* _i: policy * 2 + mode */
START_TEST(test_gemm_swap)
{
    const tk_policy policy = policies[_i / 2];
    const tk_build_mode mode = modes[_i % 2];
    tk_context *ctx = ctx_make(policy, mode);
    const int64_t N = 192, K = 160, MMAX = 1200;
    uint16_t *a = malloc((size_t)(MMAX * (K > N ? K : N)) * 2);
    uint16_t *b = malloc((size_t)(K * N) * 2), *got16 = malloc((size_t)(MMAX * K) * 2);
    uint16_t *want16 = malloc((size_t)(MMAX * (K > N ? K : N)) * 2);
    float *got32 = malloc((size_t)(MMAX * N) * 4), *want32 = malloc((size_t)(MMAX * N) * 4);
    void *da = dalloc(ctx, (size_t)(MMAX * (K > N ? K : N)) * 2);
    void *db = dalloc(ctx, (size_t)(MMAX * N) * 2); /* K x N, or grad_b's M x N */
    void *dc = dalloc(ctx, (size_t)(MMAX * N) * 4);
    for (int it = 0; it < 30; it++) {
        const int op = it % 3;
        const int64_t M = 1 + (int64_t)(rnext() % MMAX);
        /* fwd: A[M,K] B[K,N] -> C[M,N] fp32; grad_a: gC[M,N] B[K,N] -> gA[M,K];
         * grad_b: A[M,K] gC[M,N] -> gB[K,N] */
        const int64_t na = op == 1 ? M * N : M * K, nb = op == 2 ? M * N : K * N;
        const int64_t R = op == 0 ? K : (op == 1 ? N : M);
        const double abs_tol = 1e-2 * fmax(1.0, sqrt((double)R / 64.0)), rel_tol = 1e-2;
        tk_status st;
        uint16_t *bb = op == 2 ? want16 : b; /* grad_b's second input is M x N */
        fill(a, (size_t)na, 1.0f);
        fill(bb, (size_t)nb, 1.0f);
        ck_assert_int_eq(tk_mem_upload(ctx, da, a, (size_t)na * 2), TK_OK);
        ck_assert_int_eq(tk_mem_upload(ctx, db, bb, (size_t)nb * 2), TK_OK);
        if (op == 0)
            st = tk_gemm_f16_fwd(ctx, M, N, K, da, 0, db, 0, dc, 0, NULL);
        else if (op == 1)
            st = tk_gemm_f16_grad_a(ctx, M, N, K, da, 0, db, 0, dc, 0, NULL);
        else
            st = tk_gemm_f16_grad_b(ctx, M, N, K, da, 0, db, 0, dc, 0, NULL);
        ck_assert_msg(st == TK_OK, "%s", tk_context_last_error(ctx));
        ck_assert_int_eq(tk_stream_sync(ctx, NULL), TK_OK);
        if (op == 0) {
            ck_assert_int_eq(tk_mem_download(ctx, got32, dc, (size_t)(M * N) * 4), TK_OK);
            ck_assert_int_eq(tk_ref_gemm_f16_fwd(M, N, K, a, bb, want32), TK_OK);
            for (int64_t i = 0; i < M * N; i++)
                EXPECT(fabs(got32[i] - want32[i]) <= abs_tol + rel_tol * fabs(want32[i]),
                       "fwd M=%lld [%lld]: %g vs %g", (long long)M, (long long)i, got32[i],
                       want32[i]);
        } else {
            const int64_t n_out = op == 1 ? M * K : K * N;
            uint16_t *ref = malloc((size_t)n_out * 2);
            ck_assert_int_eq(tk_mem_download(ctx, got16, dc, (size_t)n_out * 2), TK_OK);
            if (op == 1)
                ck_assert_int_eq(tk_ref_gemm_f16_grad_a(M, N, K, a, bb, ref), TK_OK);
            else
                ck_assert_int_eq(tk_ref_gemm_f16_grad_b(M, N, K, a, bb, ref), TK_OK);
            for (int64_t i = 0; i < n_out; i++) {
                const double g = tk_f16_to_f32(got16[i]), w = tk_f16_to_f32(ref[i]);
                EXPECT(fabs(g - w) <= abs_tol + rel_tol * fabs(w), "%s M=%lld [%lld]: %g vs %g",
                       op == 1 ? "grad_a" : "grad_b", (long long)M, (long long)i, g, w);
            }
            free(ref);
        }
    }
    tk_mem_free(ctx, da);
    tk_mem_free(ctx, db);
    tk_mem_free(ctx, dc);
    free(a);
    free(b);
    free(got16);
    free(want16);
    free(got32);
    free(want32);
    ctx_done(ctx, policy, mode, "gemm", 1);
}
END_TEST

START_TEST(test_softmax_swap)
{
    const tk_policy policy = policies[_i / 2];
    const tk_build_mode mode = modes[_i % 2];
    tk_context *ctx = ctx_make(policy, mode);
    const int64_t cols_set[2] = {1000, 50304}, RMAX = 96;
    const size_t cap = (size_t)(RMAX * 50304);
    uint16_t *x = malloc(cap * 2), *g = malloc(cap * 2), *got = malloc(cap * 2),
             *want = malloc(cap * 2);
    void *dx = dalloc(ctx, cap * 2), *dg = dalloc(ctx, cap * 2), *dy = dalloc(ctx, cap * 2);
    for (int it = 0; it < 24; it++) {
        const int xent = it % 2;
        const int64_t cols = cols_set[(it / 2) % 2], rows = 1 + (int64_t)(rnext() % RMAX);
        const size_t n = (size_t)(rows * cols);
        fill(x, n, xent ? 0.01f : 6.0f);
        fill(g, n, 1.0f);
        ck_assert_int_eq(tk_mem_upload(ctx, dx, x, n * 2), TK_OK);
        ck_assert_int_eq(tk_mem_upload(ctx, dg, g, n * 2), TK_OK);
        tk_status st = xent ? tk_softmax_xent_f16_bwd(ctx, rows, cols, dx, 0, dg, 0, dy, 0, NULL)
                            : tk_softmax_f16_fwd(ctx, rows, cols, dx, 0, dy, 0, NULL);
        ck_assert_msg(st == TK_OK, "%s", tk_context_last_error(ctx));
        ck_assert_int_eq(tk_stream_sync(ctx, NULL), TK_OK);
        ck_assert_int_eq(tk_mem_download(ctx, got, dy, n * 2), TK_OK);
        if (xent)
            ck_assert_int_eq(tk_ref_softmax_xent_f16_bwd(rows, cols, x, g, want), TK_OK);
        else
            ck_assert_int_eq(tk_ref_softmax_f16_fwd(rows, cols, x, want), TK_OK);
        for (size_t i = 0; i < n; i++) {
            const double gv = tk_f16_to_f32(got[i]), wv = tk_f16_to_f32(want[i]);
            EXPECT(fabs(gv - wv) <= 1e-3 + 1e-2 * fabs(wv), "%s %lldx%lld [%zu]: %g vs %g",
                   xent ? "xent" : "softmax", (long long)rows, (long long)cols, i, gv, wv);
        }
    }
    tk_mem_free(ctx, dx);
    tk_mem_free(ctx, dg);
    tk_mem_free(ctx, dy);
    free(x);
    free(g);
    free(got);
    free(want);
    ctx_done(ctx, policy, mode, "softmax", policy != TK_POLICY_GENERIC);
}
END_TEST

START_TEST(test_embedding_swap)
{
    const tk_policy policy = policies[_i / 2];
    const tk_build_mode mode = modes[_i % 2];
    tk_context *ctx = ctx_make(policy, mode);
    const int64_t V = 5000, D = 256, QMAX = 3000;
    uint16_t *w = malloc((size_t)(V * D) * 2), *go = malloc((size_t)(QMAX * D) * 2);
    uint16_t *got = malloc((size_t)(V * D) * 2), *want = malloc((size_t)(V * D) * 2);
    int32_t *idx = malloc((size_t)QMAX * 4);
    void *dw = dalloc(ctx, (size_t)(V * D) * 2), *dgo = dalloc(ctx, (size_t)(QMAX * D) * 2);
    void *dout = dalloc(ctx, (size_t)(QMAX * D) * 2), *didx = dalloc(ctx, (size_t)QMAX * 4);
    for (int it = 0; it < 20; it++) {
        const int bwd = it % 2;
        const int64_t Q = 1 + (int64_t)(rnext() % QMAX);
        for (int64_t q = 0; q < Q; q++)
            idx[q] = (int32_t)(rnext() % (uint64_t)(V + 3)) - 1; /* a few out of range */
        fill(w, (size_t)(V * D), 1.0f);
        fill(go, (size_t)(Q * D), 1.0f);
        ck_assert_int_eq(tk_mem_upload(ctx, dw, w, (size_t)(V * D) * 2), TK_OK);
        ck_assert_int_eq(tk_mem_upload(ctx, dgo, go, (size_t)(Q * D) * 2), TK_OK);
        ck_assert_int_eq(tk_mem_upload(ctx, didx, idx, (size_t)Q * 4), TK_OK);
        tk_status st;
        if (bwd) {
            st = tk_embedding_f16_bwd(ctx, V, D, dw, Q, didx, dgo, TK_EMBEDDING_DETERMINISTIC, NULL,
                                      NULL);
        } else {
            st = tk_embedding_f16_fwd(ctx, V, D, dw, Q, didx, dout, NULL, NULL);
        }
        ck_assert_msg(st == TK_OK, "%s", tk_context_last_error(ctx));
        ck_assert_int_eq(tk_stream_sync(ctx, NULL), TK_OK);
        if (bwd) {
            memcpy(want, w, (size_t)(V * D) * 2);
            ck_assert_int_eq(tk_ref_embedding_f16_bwd(V, D, want, Q, idx, go, NULL), TK_OK);
            ck_assert_int_eq(tk_mem_download(ctx, got, dw, (size_t)(V * D) * 2), TK_OK);
            for (int64_t i = 0; i < V * D; i++) {
                const double gv = tk_f16_to_f32(got[i]), wv = tk_f16_to_f32(want[i]);
                EXPECT(fabs(gv - wv) <= 1e-3 + 2e-3 * fabs(wv), "emb bwd Q=%lld [%lld]: %g vs %g",
                       (long long)Q, (long long)i, gv, wv);
            }
        } else {
            ck_assert_int_eq(tk_ref_embedding_f16_fwd(V, D, w, Q, idx, want, NULL), TK_OK);
            ck_assert_int_eq(tk_mem_download(ctx, got, dout, (size_t)(Q * D) * 2), TK_OK);
            EXPECT(memcmp(got, want, (size_t)(Q * D) * 2) == 0, "emb fwd Q=%lld differs",
                   (long long)Q);
        }
    }
    tk_mem_free(ctx, dw);
    tk_mem_free(ctx, dgo);
    tk_mem_free(ctx, dout);
    tk_mem_free(ctx, didx);
    free(w);
    free(go);
    free(got);
    free(want);
    free(idx);
    ctx_done(ctx, policy, mode, "embedding", policy != TK_POLICY_GENERIC);
}
END_TEST

/* After tk_context_wait_builds() no call of a shape already seen runs on a
 * fallback: every kernel a call's plan needs (GEMM split-K: the split kernel
 * and its reduce) is requested at the first call. Default context (stable
 * policy, asynchronous builds), every op, shapes of each GEMM kernel family
 * (split-K, swapped, persistent, skinny, small-K, unaligned), from an empty
 * cache: one call per shape, the wait, then 20 calls per shape counted. */
typedef struct seen_shape {
    int op; /* 0-2 GEMM fwd / grad_a / grad_b, 3 softmax, 4 xent, 5 emb fwd, 6 emb bwd */
    int64_t d0, d1, d2;
} seen_shape;

static const seen_shape seen_shapes[] = {
    {0, 332, 1024, 2816}, {1, 367, 2816, 1024}, {0, 128, 1024, 2816},  {1, 256, 2816, 1024},
    {2, 2048, 64, 2048},  {2, 367, 1024, 2816}, {0, 2048, 2816, 1024}, {1, 1882, 1024, 2816},
    {0, 4096, 8, 1024},   {1, 2048, 8, 1024},   {2, 16, 1024, 2816},   {0, 100, 200, 300},
    {3, 64, 1000, 0},     {3, 300, 50304, 0},   {4, 64, 1000, 0},      {4, 300, 50304, 0},
    {5, 5000, 256, 1000}, {6, 5000, 256, 3000},
};

static tk_status seen_call(tk_context *ctx, const seen_shape *s, void *x, void *y, void *z,
                           void *idx)
{
    switch (s->op) {
    case 0:
        return tk_gemm_f16_fwd(ctx, s->d0, s->d1, s->d2, x, 0, y, 0, z, 0, NULL);
    case 1:
        return tk_gemm_f16_grad_a(ctx, s->d0, s->d1, s->d2, x, 0, y, 0, z, 0, NULL);
    case 2:
        return tk_gemm_f16_grad_b(ctx, s->d0, s->d1, s->d2, x, 0, y, 0, z, 0, NULL);
    case 3:
        return tk_softmax_f16_fwd(ctx, s->d0, s->d1, x, 0, z, 0, NULL);
    case 4:
        return tk_softmax_xent_f16_bwd(ctx, s->d0, s->d1, x, 0, y, 0, z, 0, NULL);
    case 5:
        return tk_embedding_f16_fwd(ctx, s->d0, s->d1, x, s->d2, idx, z, NULL, NULL);
    default:
        return tk_embedding_f16_bwd(ctx, s->d0, s->d1, z, s->d2, idx, y, TK_EMBEDDING_DETERMINISTIC,
                                    NULL, NULL);
    }
}

START_TEST(test_no_fallback_after_wait)
{
    tk_context *ctx = ctx_make(TK_POLICY_STABLE, TK_BUILD_ASYNC);
    const size_t bytes = (size_t)64 << 20, n = sizeof seen_shapes / sizeof seen_shapes[0];
    void *x = dalloc(ctx, bytes), *y = dalloc(ctx, bytes), *z = dalloc(ctx, bytes);
    void *idx = dalloc(ctx, 3000 * 4);
    ck_assert_int_eq(tk_mem_set(ctx, x, 0, bytes), TK_OK);
    ck_assert_int_eq(tk_mem_set(ctx, y, 0, bytes), TK_OK);
    ck_assert_int_eq(tk_mem_set(ctx, idx, 0, 3000 * 4), TK_OK);
    for (size_t i = 0; i < n; i++) {
        tk_status st = seen_call(ctx, &seen_shapes[i], x, y, z, idx);
        ck_assert_msg(st == TK_OK, "shape %zu: %s", i, tk_context_last_error(ctx));
    }
    ck_assert_int_eq(tk_context_wait_builds(ctx, 300000), TK_OK);
    tk_context_stats s0 = TK_STRUCT_INIT(tk_context_stats);
    ck_assert_int_eq(tk_context_get_stats(ctx, &s0), TK_OK);
    ck_assert_uint_gt(s0.fallback_calls, 0); /* the first calls did fall back */
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        tk_context_stats a = TK_STRUCT_INIT(tk_context_stats), b = TK_STRUCT_INIT(tk_context_stats);
        ck_assert_int_eq(tk_context_get_stats(ctx, &a), TK_OK);
        for (int r = 0; r < 20; r++) {
            tk_status st = seen_call(ctx, &seen_shapes[i], x, y, z, idx);
            ck_assert_msg(st == TK_OK, "shape %zu: %s", i, tk_context_last_error(ctx));
        }
        ck_assert_int_eq(tk_context_get_stats(ctx, &b), TK_OK);
        const unsigned long long fb = (unsigned long long)(b.fallback_calls - a.fallback_calls);
        printf("after the wait: op %d %lldx%lldx%lld: %llu of 20 calls on a fallback\n",
               seen_shapes[i].op, (long long)seen_shapes[i].d0, (long long)seen_shapes[i].d1,
               (long long)seen_shapes[i].d2, fb);
        bad += fb != 0;
    }
    ck_assert_int_eq(tk_stream_sync(ctx, NULL), TK_OK);
    ck_assert_msg(bad == 0, "%d shapes fell back after wait_builds", bad);
    tk_mem_free(ctx, x);
    tk_mem_free(ctx, y);
    tk_mem_free(ctx, z);
    tk_mem_free(ctx, idx);
    tk_context_destroy(ctx);
    tk_test_rmtree(g_dir);
    free(g_dir);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("gpu_dynamic");
    TCase *tc = tcase_create("swap");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, test_gemm_swap, 0, 6);
    tcase_add_loop_test(tc, test_softmax_swap, 0, 6);
    tcase_add_loop_test(tc, test_embedding_swap, 0, 6);
    suite_add_tcase(s, tc);
    TCase *seen = tcase_create("seen");
    tcase_set_timeout(seen, 600);
    tcase_add_test(seen, test_no_fallback_after_wait);
    suite_add_tcase(s, seen);
    return s;
}

int main(void)
{
    return tk_test_gpu_main(suite());
}
