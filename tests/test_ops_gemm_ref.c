/* GEMM references on hand-computed cases, transposition consistency, and
 * the operators' argument checks on the stub backend (no GPU needed). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "jit/backend/backend.h"
#include "tk_test.h"
#include "tokitai/ops.h"

static uint16_t h(float f)
{
    return tk_f32_to_f16(f);
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    /* small integers and halves: exactly representable products and sums */
    return (float)((int)(rng_state % 17) - 8) * 0.5f;
}

START_TEST(test_one_by_one)
{
    uint16_t a = h(2.0f), b = h(-3.0f), out16 = 0;
    float c = 0.0f;
    tk_assert_status(tk_ref_gemm_f16_fwd(1, 1, 1, &a, &b, &c), TK_OK);
    ck_assert(c == -6.0f);
    tk_assert_status(tk_ref_gemm_f16_grad_a(1, 1, 1, &a, &b, &out16), TK_OK);
    ck_assert_uint_eq(out16, h(-6.0f));
    out16 = 0;
    tk_assert_status(tk_ref_gemm_f16_grad_b(1, 1, 1, &a, &b, &out16), TK_OK);
    ck_assert_uint_eq(out16, h(-6.0f));
}
END_TEST

START_TEST(test_2x3x4_known)
{
    /* A[2,4], B[4,3]; C computed by hand. */
    const float af[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    const float bf[12] = {1, 0, 2, 0, 1, 0, 1, 1, 1, 2, 0, -1};
    const float want[6] = {12, 5, 1, 28, 13, 9};
    uint16_t a[8], b[12];
    float c[6];
    for (int i = 0; i < 8; i++)
        a[i] = h(af[i]);
    for (int i = 0; i < 12; i++)
        b[i] = h(bf[i]);
    tk_assert_status(tk_ref_gemm_f16_fwd(2, 3, 4, a, b, c), TK_OK);
    for (int i = 0; i < 6; i++)
        ck_assert_msg(c[i] == want[i], "C[%d] = %g, want %g", i, c[i], want[i]);

    /* grad_a with grad_C = C-shaped [2,3] of ones: grad_A[m,k] = sum_n B[k,n]
     * = row sums of B = {3, 1, 3, 1} for both rows. */
    {
        uint16_t gc[6], ga[8];
        const float wa[4] = {3, 1, 3, 1};
        for (int i = 0; i < 6; i++)
            gc[i] = h(1.0f);
        tk_assert_status(tk_ref_gemm_f16_grad_a(2, 3, 4, gc, b, ga), TK_OK);
        for (int i = 0; i < 8; i++)
            ck_assert_msg(ga[i] == h(wa[i % 4]), "grad_A[%d] = %g", i, tk_f16_to_f32(ga[i]));
    }
    /* grad_b with grad_C of ones: grad_B[k,n] = sum_m A[m,k] = {6,8,10,12}. */
    {
        uint16_t gc[6], gb[12];
        const float wb[4] = {6, 8, 10, 12};
        for (int i = 0; i < 6; i++)
            gc[i] = h(1.0f);
        tk_assert_status(tk_ref_gemm_f16_grad_b(2, 3, 4, a, gc, gb), TK_OK);
        for (int i = 0; i < 12; i++)
            ck_assert_msg(gb[i] == h(wb[i / 3]), "grad_B[%d] = %g", i, tk_f16_to_f32(gb[i]));
    }
}
END_TEST

/* grad_a / grad_b equal the forward reference on explicitly transposed
 * operands, rounded to fp16. */
START_TEST(test_transposes_consistent)
{
    const int64_t M = 7, N = 5, K = 9;
    uint16_t *a = malloc(M * K * 2), *b = malloc(K * N * 2), *gc = malloc(M * N * 2);
    uint16_t *bt = malloc(K * N * 2), *at = malloc(M * K * 2);
    uint16_t *ga = malloc(M * K * 2), *gb = malloc(K * N * 2);
    float *f = malloc(M * K * 4 + K * N * 4);
    ck_assert(a && b && gc && bt && at && ga && gb && f);
    for (int64_t i = 0; i < M * K; i++)
        a[i] = h(rnd());
    for (int64_t i = 0; i < K * N; i++)
        b[i] = h(rnd());
    for (int64_t i = 0; i < M * N; i++)
        gc[i] = h(rnd() * 0.25f);
    for (int64_t k = 0; k < K; k++)
        for (int64_t n = 0; n < N; n++)
            bt[n * K + k] = b[k * N + n];
    for (int64_t m = 0; m < M; m++)
        for (int64_t k = 0; k < K; k++)
            at[k * M + m] = a[m * K + k];

    /* grad_A[M,K] = grad_C[M,N] x B^T[N,K] */
    tk_assert_status(tk_ref_gemm_f16_grad_a(M, N, K, gc, b, ga), TK_OK);
    tk_assert_status(tk_ref_gemm_f16_fwd(M, K, N, gc, bt, f), TK_OK);
    for (int64_t i = 0; i < M * K; i++)
        ck_assert_msg(ga[i] == h(f[i]), "grad_A[%lld]: %g vs %g", (long long)i,
                      tk_f16_to_f32(ga[i]), f[i]);
    /* grad_B[K,N] = A^T[K,M] x grad_C[M,N] */
    tk_assert_status(tk_ref_gemm_f16_grad_b(M, N, K, a, gc, gb), TK_OK);
    tk_assert_status(tk_ref_gemm_f16_fwd(K, N, M, at, gc, f), TK_OK);
    for (int64_t i = 0; i < K * N; i++)
        ck_assert_msg(gb[i] == h(f[i]), "grad_B[%lld]: %g vs %g", (long long)i,
                      tk_f16_to_f32(gb[i]), f[i]);
    /* and the forward against a plain triple loop */
    tk_assert_status(tk_ref_gemm_f16_fwd(M, N, K, a, b, f), TK_OK);
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double s = 0;
            for (int64_t k = 0; k < K; k++)
                s += (double)tk_f16_to_f32(a[m * K + k]) * tk_f16_to_f32(b[k * N + n]);
            ck_assert(f[m * N + n] == (float)s);
        }
    free(a), free(b), free(gc), free(bt), free(at), free(ga), free(gb), free(f);
}
END_TEST

START_TEST(test_ref_special_values)
{
    /* fp32 accumulation of fp16 inputs: 2048 * 2048 overflows fp16 but not
     * the fp32 forward output; the fp16 gradient output becomes inf; NaN
     * and 0 * inf propagate. */
    uint16_t a[2] = {h(2048.0f), h(2048.0f)}, b[2] = {h(2048.0f), h(1.0f)}, o = 0;
    float c;
    tk_assert_status(tk_ref_gemm_f16_fwd(1, 1, 2, a, b, &c), TK_OK);
    ck_assert(c == 2048.0f * 2048.0f + 2048.0f);
    tk_assert_status(tk_ref_gemm_f16_grad_a(1, 2, 1, a, b, &o), TK_OK);
    ck_assert_uint_eq(o, 0x7c00); /* +inf */
    {
        uint16_t z = h(0.0f), inf = 0x7c00;
        tk_assert_status(tk_ref_gemm_f16_fwd(1, 1, 1, &z, &inf, &c), TK_OK);
        ck_assert(c != c);
    }
}
END_TEST

START_TEST(test_ref_bad_args)
{
    uint16_t x = 0;
    float c = 0;
    tk_assert_status(tk_ref_gemm_f16_fwd(0, 1, 1, &x, &x, &c), TK_INVALID_ARGUMENT);
    tk_assert_status(tk_ref_gemm_f16_fwd(1, -1, 1, &x, &x, &c), TK_INVALID_ARGUMENT);
    tk_assert_status(tk_ref_gemm_f16_fwd(1, 1, 1, NULL, &x, &c), TK_INVALID_ARGUMENT);
    tk_assert_status(tk_ref_gemm_f16_grad_a(1, 1, 1, &x, NULL, &x), TK_INVALID_ARGUMENT);
    tk_assert_status(tk_ref_gemm_f16_grad_b(1, 1, 1, &x, &x, NULL), TK_INVALID_ARGUMENT);
    tk_assert_status(tk_ref_gemm_f16_fwd(INT64_MAX / 2, 4, 4, &x, &x, &c), TK_OVERFLOW);
    tk_assert_status(tk_ref_gemm_f16_grad_b(1, INT64_MAX / 2, 3, &x, &x, &x), TK_OVERFLOW);
    ck_assert(c == 0);
}
END_TEST

/* ------------------------------------------------- operators on the stub */

/* A stub context on a fresh cache folder (removed at exit). */
static char *cache_dirs[8];
static int n_cache_dirs;

static void remove_cache_dirs(void)
{
    for (int i = 0; i < n_cache_dirs; i++) {
        tk_test_rmtree(cache_dirs[i]);
        free(cache_dirs[i]);
    }
    n_cache_dirs = 0;
}

static tk_context *stub_ctx(tk_policy policy)
{
    tk_config *cfg = NULL;
    tk_context *ctx = NULL;
    char err[256];
    char *dir = tk_test_tmpdir("gemm");
    ck_assert(dir != NULL && n_cache_dirs < 8);
    cache_dirs[n_cache_dirs++] = dir;
    tk_assert_status(tk_config_create(&cfg), TK_OK);
    tk_assert_status(tk_config_set_backend(cfg, TK_BACKEND_STUB), TK_OK);
    tk_assert_status(tk_config_set_cache_dir(cfg, dir), TK_OK);
    tk_assert_status(tk_config_set_policy(cfg, policy), TK_OK);
    /* These cases count the compiles of each policy: every call builds the
     * kernel it prefers (test_engine_async covers the background mode). */
    tk_assert_status(tk_config_set_build_mode(cfg, TK_BUILD_SYNC), TK_OK);
    tk_assert_status(tk_context_create(cfg, &ctx, err, sizeof err), TK_OK);
    tk_config_destroy(cfg);
    return ctx;
}

static uint64_t launches(void)
{
    return tk__stub_counters_get()->launches;
}

static void assert_error_names(tk_context *ctx, const char *what)
{
    const char *msg = tk_context_last_error(ctx);
    ck_assert_msg(strstr(msg, what) != NULL, "message \"%s\" does not name %s", msg, what);
}

#define P(addr) ((void *)(uintptr_t)(addr))

START_TEST(test_op_bad_input)
{
    tk_context *ctx = stub_ctx(TK_POLICY_EXACT);
    const uint64_t before = launches();
    tk_context_stats stats = TK_STRUCT_INIT(tk_context_stats);

    tk_assert_status(tk_gemm_f16_fwd(NULL, 4, 4, 4, P(0x1000), 0, P(0x2000), 0, P(0x3000), 0, NULL),
                     TK_INVALID_ARGUMENT);
    tk_assert_status(tk_gemm_f16_fwd(ctx, 0, 4, 4, P(0x1000), 0, P(0x2000), 0, P(0x3000), 0, NULL),
                     TK_INVALID_ARGUMENT);
    assert_error_names(ctx, "M");
    tk_assert_status(
        tk_gemm_f16_grad_a(ctx, 4, -2, 4, P(0x1000), 0, P(0x2000), 0, P(0x3000), 0, NULL),
        TK_INVALID_ARGUMENT);
    assert_error_names(ctx, "N");
    tk_assert_status(
        tk_gemm_f16_grad_b(ctx, 4, 4, 0, P(0x1000), 0, P(0x2000), 0, P(0x3000), 0, NULL),
        TK_INVALID_ARGUMENT);
    assert_error_names(ctx, "K");
    tk_assert_status(tk_gemm_f16_fwd(ctx, 4, 4, 4, NULL, 0, P(0x2000), 0, P(0x3000), 0, NULL),
                     TK_INVALID_ARGUMENT);
    assert_error_names(ctx, "d_A");
    tk_assert_status(tk_gemm_f16_grad_a(ctx, 4, 4, 4, P(0x1000), 0, NULL, 0, P(0x3000), 0, NULL),
                     TK_INVALID_ARGUMENT);
    assert_error_names(ctx, "d_B");
    tk_assert_status(tk_gemm_f16_grad_b(ctx, 4, 4, 4, P(0x1000), 0, P(0x2000), 0, NULL, 0, NULL),
                     TK_INVALID_ARGUMENT);
    assert_error_names(ctx, "d_grad_B");
    /* fp16 operands need 2-byte, the fp32 output 4-byte alignment */
    tk_assert_status(tk_gemm_f16_fwd(ctx, 4, 4, 4, P(0x1001), 0, P(0x2000), 0, P(0x3000), 0, NULL),
                     TK_MISALIGNED);
    assert_error_names(ctx, "d_A");
    tk_assert_status(tk_gemm_f16_fwd(ctx, 4, 4, 4, P(0x1000), 0, P(0x2000), 0, P(0x3002), 0, NULL),
                     TK_MISALIGNED);
    assert_error_names(ctx, "d_C");
    tk_assert_status(
        tk_gemm_f16_grad_a(ctx, 4, 4, 4, P(0x1000), 0, P(0x2000), 0, P(0x3001), 0, NULL),
        TK_MISALIGNED);
    /* leading dimensions below the row length */
    tk_assert_status(
        tk_gemm_f16_fwd(ctx, 4, 8, 16, P(0x1000), 15, P(0x2000), 0, P(0x3000), 0, NULL),
        TK_INVALID_ARGUMENT);
    assert_error_names(ctx, "lda");
    tk_assert_status(tk_gemm_f16_fwd(ctx, 4, 8, 16, P(0x1000), 0, P(0x2000), 7, P(0x3000), 0, NULL),
                     TK_INVALID_ARGUMENT);
    assert_error_names(ctx, "ldb");
    tk_assert_status(
        tk_gemm_f16_grad_a(ctx, 4, 8, 16, P(0x1000), 7, P(0x2000), 0, P(0x3000), 0, NULL),
        TK_INVALID_ARGUMENT);
    assert_error_names(ctx, "ldgc");
    tk_assert_status(
        tk_gemm_f16_grad_b(ctx, 4, 8, 16, P(0x1000), 0, P(0x2000), 0, P(0x3000), 5, NULL),
        TK_INVALID_ARGUMENT);
    assert_error_names(ctx, "ldgb");
    /* sizes whose products overflow */
    tk_assert_status(
        tk_gemm_f16_fwd(ctx, INT64_MAX / 4, 8, 16, P(0x1000), 0, P(0x2000), 0, P(0x3000), 0, NULL),
        TK_OVERFLOW);
    tk_assert_status(tk_gemm_f16_grad_b(ctx, 3, (int64_t)1 << 40, (int64_t)1 << 40, P(0x1000), 0,
                                        P(0x2000), 0, P(0x3000), 0, NULL),
                     TK_OVERFLOW);
    tk_assert_status(tk_gemm_f16_fwd(ctx, (int64_t)1 << 40, 8, 16, P(0x1000), INT64_MAX / 2,
                                     P(0x2000), 0, P(0x3000), 0, NULL),
                     TK_OVERFLOW);

    ck_assert_uint_eq(launches(), before);
    tk_assert_status(tk_context_get_stats(ctx, &stats), TK_OK);
    ck_assert_uint_eq(stats.compiles, 0);
    tk_context_destroy(ctx);
    remove_cache_dirs();
}
END_TEST

START_TEST(test_op_offline_no_device)
{
    tk_config *cfg = NULL;
    tk_context *ctx = NULL;
    char err[256];
    tk_status st;
    tk_assert_status(tk_config_create(&cfg), TK_OK);
    tk_assert_status(tk_config_set_backend(cfg, TK_BACKEND_STUB), TK_OK);
    tk_assert_status(tk_config_set_target(cfg, "stub"), TK_OK);
    tk_assert_status(tk_config_set_cache_disabled(cfg, 1), TK_OK);
    tk_assert_status(tk_config_set_policy(cfg, TK_POLICY_EXACT), TK_OK);
    st = tk_context_create(cfg, &ctx, err, sizeof err);
    tk_config_destroy(cfg);
    ck_assert_msg(st == TK_OK, "offline stub context: %s", err);
    tk_assert_status(tk_gemm_f16_fwd(ctx, 4, 4, 4, P(0x1000), 0, P(0x2000), 0, P(0x3000), 0, NULL),
                     TK_NO_DEVICE);
    tk_assert_status(
        tk_gemm_f16_grad_a(ctx, 4, 4, 4, P(0x1000), 0, P(0x2000), 0, P(0x3000), 0, NULL),
        TK_NO_DEVICE);
    tk_assert_status(
        tk_gemm_f16_grad_b(ctx, 4, 4, 4, P(0x1000), 0, P(0x2000), 0, P(0x3000), 0, NULL),
        TK_NO_DEVICE);
    {
        const int64_t dims[3] = {64, 96, 40};
        unsigned nc = 9, nh = 9;
        tk_assert_status(tk_op_precompile(ctx, TK_OP_GEMM_F16_GRAD_B, dims, 3, &nc, &nh), TK_OK);
        ck_assert_uint_eq(nc + nh, 1);
    }
    tk_context_destroy(ctx);
}
END_TEST

/* Valid calls launch once; the exact policy compiles per shape, the generic
 * one per variant; misaligned operands select another variant, not an error. */
START_TEST(test_op_policies_and_variants)
{
    tk_context *exact = stub_ctx(TK_POLICY_EXACT);
    tk_context *generic = stub_ctx(TK_POLICY_GENERIC);
    tk_context_stats s = TK_STRUCT_INIT(tk_context_stats);
    uint64_t l0 = launches();

    tk_assert_status(
        tk_gemm_f16_fwd(exact, 256, 256, 64, P(0x1000), 0, P(0x2000), 0, P(0x4000), 0, NULL),
        TK_OK);
    tk_assert_status(
        tk_gemm_f16_fwd(exact, 256, 256, 64, P(0x1000), 0, P(0x2000), 0, P(0x4000), 0, NULL),
        TK_OK);
    tk_assert_status(
        tk_gemm_f16_fwd(exact, 264, 256, 64, P(0x1000), 0, P(0x2000), 0, P(0x4000), 0, NULL),
        TK_OK);
    ck_assert_uint_eq(launches(), l0 + 3);
    tk_assert_status(tk_context_get_stats(exact, &s), TK_OK);
    ck_assert_uint_eq(s.compiles, 2);

    tk_assert_status(
        tk_gemm_f16_fwd(generic, 256, 256, 64, P(0x1000), 0, P(0x2000), 0, P(0x4000), 0, NULL),
        TK_OK);
    tk_assert_status(
        tk_gemm_f16_fwd(generic, 264, 256, 64, P(0x1000), 0, P(0x2000), 0, P(0x4000), 0, NULL),
        TK_OK);
    tk_assert_status(tk_context_get_stats(generic, &s), TK_OK);
    ck_assert_uint_eq(s.compiles, 1);
    /* 2-byte aligned (not 16) operand: the scalar-load variant */
    tk_assert_status(
        tk_gemm_f16_fwd(generic, 256, 256, 64, P(0x1002), 0, P(0x2000), 0, P(0x4000), 0, NULL),
        TK_OK);
    /* odd leading dimension: scalar-load variant again (same kernel) */
    tk_assert_status(
        tk_gemm_f16_fwd(generic, 256, 256, 64, P(0x1000), 65, P(0x2000), 0, P(0x4000), 0, NULL),
        TK_OK);
    tk_assert_status(tk_context_get_stats(generic, &s), TK_OK);
    ck_assert_uint_eq(s.compiles, 2);
    /* the three layouts are three kernels */
    tk_assert_status(
        tk_gemm_f16_grad_a(generic, 256, 256, 64, P(0x1000), 0, P(0x2000), 0, P(0x4000), 0, NULL),
        TK_OK);
    tk_assert_status(
        tk_gemm_f16_grad_b(generic, 256, 256, 64, P(0x1000), 0, P(0x2000), 0, P(0x4000), 0, NULL),
        TK_OK);
    tk_assert_status(tk_context_get_stats(generic, &s), TK_OK);
    ck_assert_uint_eq(s.compiles, 4);
    ck_assert_uint_eq(launches(), l0 + 9);

    /* precompile compiles exactly the kernel the op then uses */
    {
        const int64_t dims[3] = {300, 200, 100};
        unsigned nc = 0, nh = 0;
        tk_assert_status(tk_op_precompile(exact, TK_OP_GEMM_F16_GRAD_A, dims, 3, &nc, &nh), TK_OK);
        ck_assert_uint_eq(nc, 1);
        tk_assert_status(tk_context_get_stats(exact, &s), TK_OK);
        const uint64_t before = s.compiles;
        tk_assert_status(tk_gemm_f16_grad_a(exact, 300, 200, 100, P(0x1000), 0, P(0x2000), 0,
                                            P(0x4000), 0, NULL),
                         TK_OK);
        tk_assert_status(tk_context_get_stats(exact, &s), TK_OK);
        ck_assert_uint_eq(s.compiles, before);
    }
    tk_context_destroy(exact);
    tk_context_destroy(generic);
    remove_cache_dirs();
}
END_TEST

/* Few output tiles and a long K: split-K, two kernels (the GEMM into the
 * context's workspace, then the fixed-order reduction), both of which the
 * precompile compiles, under either policy; the workspace is reused. */
START_TEST(test_op_split_k)
{
    static const tk_policy pols[] = {TK_POLICY_EXACT, TK_POLICY_GENERIC};
    static const tk_op ops[] = {TK_OP_GEMM_F16_FWD, TK_OP_GEMM_F16_GRAD_A, TK_OP_GEMM_F16_GRAD_B};
    for (int pi = 0; pi < 2; pi++) {
        tk_context *ctx = stub_ctx(pols[pi]);
        tk_context_stats s = TK_STRUCT_INIT(tk_context_stats);
        for (int i = 0; i < 3; i++) {
            /* kernel shape 16 x 1024 x 4096 in each layout */
            const int64_t dims[3] = {i == 2 ? 4096 : 16, i == 1 ? 4096 : 1024,
                                     i == 0 ? 4096 : (i == 1 ? 1024 : 16)};
            unsigned nc = 0, nh = 0;
            tk_assert_status(tk_op_precompile(ctx, ops[i], dims, 3, &nc, &nh), TK_OK);
            /* exact: this shape's two kernels; generic: every token-count class */
            if (pols[pi] == TK_POLICY_EXACT)
                ck_assert_uint_eq(nc + nh, 2);
            else
                ck_assert_uint_gt(nc + nh, 2);
            tk_assert_status(tk_context_get_stats(ctx, &s), TK_OK);
            const uint64_t before = s.compiles, l0 = launches();
            for (int rep = 0; rep < 2; rep++) {
                tk_status st;
                if (i == 0)
                    st = tk_gemm_f16_fwd(ctx, dims[0], dims[1], dims[2], P(0x1000), 0, P(0x2000), 0,
                                         P(0x4000), 0, NULL);
                else if (i == 1)
                    st = tk_gemm_f16_grad_a(ctx, dims[0], dims[1], dims[2], P(0x1000), 0, P(0x2000),
                                            0, P(0x4000), 0, NULL);
                else
                    st = tk_gemm_f16_grad_b(ctx, dims[0], dims[1], dims[2], P(0x1000), 0, P(0x2000),
                                            0, P(0x4000), 0, NULL);
                tk_assert_status(st, TK_OK);
            }
            ck_assert_uint_eq(launches(), l0 + 4);
            tk_assert_status(tk_context_get_stats(ctx, &s), TK_OK);
            ck_assert_uint_eq(s.compiles, before);
        }
        tk_context_destroy(ctx);
    }
    remove_cache_dirs();
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("ops_gemm_ref");
    TCase *tc = tcase_create("ref");
    tcase_add_test(tc, test_one_by_one);
    tcase_add_test(tc, test_2x3x4_known);
    tcase_add_test(tc, test_transposes_consistent);
    tcase_add_test(tc, test_ref_special_values);
    tcase_add_test(tc, test_ref_bad_args);
    suite_add_tcase(s, tc);
    tc = tcase_create("ops");
    tcase_add_test(tc, test_op_bad_input);
    tcase_add_test(tc, test_op_offline_no_device);
    tcase_add_test(tc, test_op_policies_and_variants);
    tcase_add_test(tc, test_op_split_k);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tk_test_main(suite());
}
