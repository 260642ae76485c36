/* CPU references of softmax / embedding on hand-computed cases, and the
 * fp16 conversions on their edge cases (no GPU needed). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tk_test.h"
#include "tokitai/ops.h"

/* Loops over many values assert only on failure: each Check assertion costs
 * a message to the runner. */
#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond))                                                                               \
            ck_abort_msg(__VA_ARGS__);                                                             \
    } while (0)

static uint16_t h(float f)
{
    return tk_f32_to_f16(f);
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* ------------------------------------------------------------------ fp16 */

START_TEST(test_f16_exact_values)
{
    ck_assert_uint_eq(h(0.0f), 0x0000);
    ck_assert_uint_eq(h(-0.0f), 0x8000);
    ck_assert_uint_eq(h(1.0f), 0x3c00);
    ck_assert_uint_eq(h(-2.0f), 0xc000);
    ck_assert_uint_eq(h(0.5f), 0x3800);
    ck_assert_uint_eq(h(65504.0f), 0x7bff);
    ck_assert(tk_f16_to_f32(0x3c00) == 1.0f);
    ck_assert(tk_f16_to_f32(0x7bff) == 65504.0f);
    ck_assert(tk_f16_to_f32(0xc000) == -2.0f);
    /* -0 keeps its sign both ways */
    ck_assert(tk_f16_to_f32(0x8000) == 0.0f && signbit(tk_f16_to_f32(0x8000)));
    ck_assert(!signbit(tk_f16_to_f32(0x0000)));
}
END_TEST

START_TEST(test_f16_subnormals)
{
    /* half -> float */
    ck_assert(tk_f16_to_f32(0x0001) == ldexpf(1.0f, -24));
    ck_assert(tk_f16_to_f32(0x8001) == -ldexpf(1.0f, -24));
    ck_assert(tk_f16_to_f32(0x03ff) == ldexpf(1023.0f, -24));
    ck_assert(tk_f16_to_f32(0x0200) == ldexpf(1.0f, -15));
    ck_assert(tk_f16_to_f32(0x0400) == ldexpf(1.0f, -14)); /* smallest normal */
    /* float -> half */
    ck_assert_uint_eq(h(ldexpf(1.0f, -24)), 0x0001);
    ck_assert_uint_eq(h(-ldexpf(1.0f, -24)), 0x8001);
    ck_assert_uint_eq(h(ldexpf(1023.0f, -24)), 0x03ff);
    ck_assert_uint_eq(h(ldexpf(1.0f, -14)), 0x0400);
    /* 2^-25 is a tie between 0 and the smallest subnormal: to even (0) */
    ck_assert_uint_eq(h(ldexpf(1.0f, -25)), 0x0000);
    ck_assert_uint_eq(h(-ldexpf(1.0f, -25)), 0x8000);
    /* just above the tie rounds up */
    ck_assert_uint_eq(h(nextafterf(ldexpf(1.0f, -25), 1.0f)), 0x0001);
    /* 1.5 * 2^-24 ties to 2 (even), 2.5 * 2^-24 ties to 2 (even) */
    ck_assert_uint_eq(h(ldexpf(3.0f, -25)), 0x0002);
    ck_assert_uint_eq(h(ldexpf(5.0f, -25)), 0x0002);
    ck_assert_uint_eq(h(ldexpf(7.0f, -25)), 0x0004);
    /* far below: zero with sign */
    ck_assert_uint_eq(h(1e-30f), 0x0000);
    ck_assert_uint_eq(h(-1e-30f), 0x8000);
    /* float subnormals */
    ck_assert_uint_eq(h(bits_f32(0x00000001u)), 0x0000);
    /* largest subnormal + half ulp ties to even: 0x3ff is odd -> 0x400 */
    ck_assert_uint_eq(h(ldexpf(2047.0f, -25)), 0x0400);
}
END_TEST

START_TEST(test_f16_rounding_ties)
{
    /* 1 + 2^-11 is halfway between 1 and 1 + 2^-10: to even (1) */
    ck_assert_uint_eq(h(1.0f + ldexpf(1.0f, -11)), 0x3c00);
    /* 1 + 3 * 2^-11 is halfway between 0x3c01 and 0x3c02: to even */
    ck_assert_uint_eq(h(1.0f + ldexpf(3.0f, -11)), 0x3c02);
    /* above / below the tie */
    ck_assert_uint_eq(h(nextafterf(1.0f + ldexpf(1.0f, -11), 2.0f)), 0x3c01);
    ck_assert_uint_eq(h(nextafterf(1.0f + ldexpf(3.0f, -11), 0.0f)), 0x3c01);
    /* carry into the exponent: 2 - 2^-12 rounds to 2 */
    ck_assert_uint_eq(h(2.0f - ldexpf(1.0f, -12)), 0x4000);
}
END_TEST

START_TEST(test_f16_inf_nan_overflow)
{
    ck_assert_uint_eq(h(INFINITY), 0x7c00);
    ck_assert_uint_eq(h(-INFINITY), 0xfc00);
    ck_assert(isinf(tk_f16_to_f32(0x7c00)) && tk_f16_to_f32(0x7c00) > 0);
    ck_assert(isinf(tk_f16_to_f32(0xfc00)) && tk_f16_to_f32(0xfc00) < 0);
    /* overflow: 65519.996 rounds to 65504, 65520 (tie) to infinity */
    ck_assert_uint_eq(h(65519.0f), 0x7bff);
    ck_assert_uint_eq(h(nextafterf(65520.0f, 0.0f)), 0x7bff);
    ck_assert_uint_eq(h(65520.0f), 0x7c00);
    ck_assert_uint_eq(h(1e6f), 0x7c00);
    ck_assert_uint_eq(h(-1e6f), 0xfc00);
    ck_assert_uint_eq(h(3.0e38f), 0x7c00);
    /* NaN stays NaN both ways, sign kept */
    {
        uint16_t n = h(NAN);
        ck_assert((n & 0x7c00u) == 0x7c00u && (n & 0x3ffu) != 0);
        n = h(-NAN);
        ck_assert((n & 0xfc00u) == 0xfc00u && (n & 0x3ffu) != 0);
        /* a NaN whose payload is only in the low float bits stays NaN */
        n = h(bits_f32(0x7f800001u));
        ck_assert((n & 0x7c00u) == 0x7c00u && (n & 0x3ffu) != 0);
        ck_assert(isnan(tk_f16_to_f32(0x7e00)));
        ck_assert(isnan(tk_f16_to_f32(0x7c01)));
        ck_assert(isnan(tk_f16_to_f32(0xffff)));
    }
}
END_TEST

START_TEST(test_f16_round_trip_all)
{
    /* Every half converts to float and back unchanged (NaNs stay NaN), and
     * the float value equals the definition of binary16. */
    for (uint32_t u = 0; u < 0x10000u; u++) {
        uint16_t x = (uint16_t)u;
        float f = tk_f16_to_f32(x);
        unsigned e = (x >> 10) & 0x1f, m = x & 0x3ff;
        double want;
        if (e == 0x1f) {
            EXPECT(m ? isnan(f) : isinf(f), "0x%04x is not %s", u, m ? "NaN" : "inf");
            if (m)
                continue;
        }
        want = e == 0      ? ldexp((double)m, -24)
               : e == 0x1f ? INFINITY
                           : ldexp(1024.0 + m, (int)e - 25);
        if (x & 0x8000)
            want = -want;
        EXPECT((double)f == want, "0x%04x -> %a, want %a", u, (double)f, want);
        EXPECT(h(f) == x, "0x%04x round trip gave 0x%04x", u, h(f));
    }
}
END_TEST

START_TEST(test_f16_against_compiler)
{
#ifdef __FLT16_MAX__
    /* GCC's _Float16 conversion rounds to nearest even: compare on many
     * floats spread over every exponent, around ties included. */
    uint64_t s = 88172645463325252ull;
    for (int i = 0; i < 2000000; i++) {
        uint32_t u;
        float f;
        _Float16 g;
        uint16_t want;
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        u = (uint32_t)s;
        if ((i & 3) == 0) /* bias toward the binary16 range, near ties */
            u = (u & 0x80000000u) | (0x33000000u + (u % (0x47800000u - 0x33000000u))) |
                ((i & 4) ? 0x0fffu : 0x1000u);
        f = bits_f32(u);
        if (isnan(f))
            continue;
        g = (_Float16)f;
        memcpy(&want, &g, 2);
        EXPECT(h(f) == want, "%a (0x%08x): got 0x%04x, compiler 0x%04x", (double)f, f32_bits(f),
               h(f), want);
    }
#else
    ck_assert(1); /* no _Float16: covered by the exhaustive tests above */
#endif
}
END_TEST

/* --------------------------------------------------------------- softmax */

START_TEST(test_softmax_known)
{
    uint16_t in[4] = {h(0), h(0), h(0), h(0)}, out[4];
    tk_assert_status(tk_ref_softmax_f16_fwd(1, 4, in, out), TK_OK);
    for (int i = 0; i < 4; i++)
        ck_assert_uint_eq(out[i], h(0.25f));

    /* Two rows: stability (exp(60000) would overflow without the max) and a
     * row where one element dominates. */
    {
        uint16_t x[4] = {h(60000.0f), h(60000.0f), h(0.0f), h(-20.0f)}, y[4];
        tk_assert_status(tk_ref_softmax_f16_fwd(2, 2, x, y), TK_OK);
        ck_assert_uint_eq(y[0], h(0.5f));
        ck_assert_uint_eq(y[1], h(0.5f));
        ck_assert_uint_eq(y[2], h(1.0f));
        ck_assert_uint_eq(y[3], 0); /* e^-20 ~ 2e-9 is below half a subnormal */
    }
    /* [0, ln 3] in fp16 -> close to [0.25, 0.75] */
    {
        uint16_t x[2] = {h(0.0f), h(logf(3.0f))}, y[2];
        tk_assert_status(tk_ref_softmax_f16_fwd(1, 2, x, y), TK_OK);
        ck_assert(fabsf(tk_f16_to_f32(y[0]) - 0.25f) < 1e-3f);
        ck_assert(fabsf(tk_f16_to_f32(y[1]) - 0.75f) < 1e-3f);
    }
    /* one column: always 1 */
    {
        uint16_t x = h(-7.5f), y = 0;
        tk_assert_status(tk_ref_softmax_f16_fwd(1, 1, &x, &y), TK_OK);
        ck_assert_uint_eq(y, h(1.0f));
    }
}
END_TEST

START_TEST(test_xent_known)
{
    uint16_t s[2] = {h(0.5f), h(0.5f)}, g[2] = {h(1.0f), h(0.0f)}, out[2];
    tk_assert_status(tk_ref_softmax_xent_f16_bwd(1, 2, s, g, out), TK_OK);
    ck_assert_uint_eq(out[0], h(0.25f));
    ck_assert_uint_eq(out[1], h(-0.25f));
    {
        uint16_t s4[4], g4[4], o4[4];
        const float want[4] = {-0.375f, -0.125f, 0.125f, 0.375f};
        for (int i = 0; i < 4; i++) {
            s4[i] = h(0.25f);
            g4[i] = h((float)(i + 1));
        }
        tk_assert_status(tk_ref_softmax_xent_f16_bwd(1, 4, s4, g4, o4), TK_OK);
        for (int i = 0; i < 4; i++)
            ck_assert_uint_eq(o4[i], h(want[i]));
    }
}
END_TEST

/* ------------------------------------------------------------- embedding */

START_TEST(test_embedding_fwd_known)
{
    const float w[6] = {1, 2, 3, 4, 5, 6};
    const int32_t idx[6] = {2, 0, -1, 3, 1, 2};
    const float want[12] = {5, 6, 1, 2, 0, 0, 0, 0, 3, 4, 5, 6};
    uint16_t wh[6], out[12];
    uint64_t bad = 99;
    for (int i = 0; i < 6; i++)
        wh[i] = h(w[i]);
    memset(out, 0xab, sizeof out);
    tk_assert_status(tk_ref_embedding_f16_fwd(3, 2, wh, 6, idx, out, &bad), TK_OK);
    ck_assert_uint_eq(bad, 2);
    for (int i = 0; i < 12; i++)
        ck_assert_uint_eq(out[i], h(want[i]));
    /* zeros are +0 bits, not -0 */
    ck_assert_uint_eq(out[4], 0);
    /* n_bad may be NULL */
    tk_assert_status(tk_ref_embedding_f16_fwd(3, 2, wh, 6, idx, out, NULL), TK_OK);
}
END_TEST

START_TEST(test_embedding_bwd_known)
{
    const float gw0[6] = {1, 1, 0, 0, 0.5f, 0.5f};
    const int32_t idx[5] = {0, 2, 0, 5, -3};
    const float go[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    const float want[6] = {7, 9, 0, 0, 3.5f, 4.5f};
    uint16_t gw[6], goh[10];
    uint64_t bad = 0;
    for (int i = 0; i < 6; i++)
        gw[i] = h(gw0[i]);
    for (int i = 0; i < 10; i++)
        goh[i] = h(go[i]);
    /* an untouched row keeps its exact bits, even -0 */
    gw[2] = 0x8000;
    tk_assert_status(tk_ref_embedding_f16_bwd(3, 2, gw, 5, idx, goh, &bad), TK_OK);
    ck_assert_uint_eq(bad, 2);
    for (int i = 0; i < 6; i++)
        if (i != 2)
            ck_assert_msg(gw[i] == h(want[i]), "gw[%d] = %g", i, tk_f16_to_f32(gw[i]));
    ck_assert_uint_eq(gw[2], 0x8000);
}
END_TEST

START_TEST(test_embedding_bwd_rounds_once)
{
    /* 4096 contributions of 0.25 onto 2048: in fp16 each add would round
     * back to 2048 (ulp 2); summed in fp32 and rounded once it is 3072. */
    enum { Q = 4096 };
    static int32_t idx[Q];
    static uint16_t go[Q];
    uint16_t gw = h(2048.0f);
    for (int q = 0; q < Q; q++) {
        idx[q] = 0;
        go[q] = h(0.25f);
    }
    tk_assert_status(tk_ref_embedding_f16_bwd(1, 1, &gw, Q, idx, go, NULL), TK_OK);
    ck_assert_uint_eq(gw, h(3072.0f));
}
END_TEST

START_TEST(test_reference_bad_args)
{
    uint16_t a[4] = {0}, b[4] = {0};
    int32_t idx[2] = {0, 0};
    tk_assert_status(tk_ref_softmax_f16_fwd(0, 4, a, b), TK_INVALID_ARGUMENT);
    tk_assert_status(tk_ref_softmax_f16_fwd(1, -1, a, b), TK_INVALID_ARGUMENT);
    tk_assert_status(tk_ref_softmax_f16_fwd(1, 4, NULL, b), TK_INVALID_ARGUMENT);
    tk_assert_status(tk_ref_softmax_f16_fwd(INT64_MAX / 2, 4, a, b), TK_OVERFLOW);
    tk_assert_status(tk_ref_softmax_xent_f16_bwd(1, 4, a, NULL, b), TK_INVALID_ARGUMENT);
    tk_assert_status(tk_ref_softmax_xent_f16_bwd(INT64_MAX, INT64_MAX, a, a, b), TK_OVERFLOW);
    tk_assert_status(tk_ref_embedding_f16_fwd(1, 2, a, 0, idx, b, NULL), TK_INVALID_ARGUMENT);
    tk_assert_status(tk_ref_embedding_f16_fwd(1, 2, a, 2, NULL, b, NULL), TK_INVALID_ARGUMENT);
    tk_assert_status(tk_ref_embedding_f16_fwd(INT64_MAX / 2, 2, a, 2, idx, b, NULL), TK_OVERFLOW);
    tk_assert_status(tk_ref_embedding_f16_bwd(1, 2, a, 2, idx, NULL, NULL), TK_INVALID_ARGUMENT);
    tk_assert_status(tk_ref_embedding_f16_bwd(1, 0, a, 2, idx, b, NULL), TK_INVALID_ARGUMENT);
    /* nothing was written by the failing calls */
    for (int i = 0; i < 4; i++)
        ck_assert_uint_eq(b[i], 0);
}
END_TEST

START_TEST(test_op_identities)
{
    for (int i = 0; i < TK_OP_COUNT; i++) {
        tk_op op;
        int n = 0;
        const char *name = tk_op_name((tk_op)i);
        ck_assert_ptr_nonnull(name);
        tk_assert_status(tk_op_from_name(name, &op), TK_OK);
        ck_assert_int_eq((int)op, i);
        ck_assert_ptr_nonnull(tk_op_dims((tk_op)i, &n));
        ck_assert_int_eq(n, i <= 2 || i >= 5 ? 3 : 2);
    }
    ck_assert_str_eq(tk_op_dims(TK_OP_SOFTMAX_F16_FWD, NULL), "rows,cols");
    ck_assert_str_eq(tk_op_dims(TK_OP_EMBEDDING_F16_BWD, NULL), "V,D,Q");
    ck_assert_ptr_null(tk_op_name(TK_OP_COUNT));
    ck_assert_ptr_null(tk_op_dims(TK_OP_COUNT, NULL));
    {
        tk_op op = TK_OP_GEMM_F16_FWD;
        tk_assert_status(tk_op_from_name("softmax", &op), TK_NOT_FOUND);
        ck_assert_int_eq((int)op, TK_OP_GEMM_F16_FWD);
    }
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("ops_ref");
    TCase *tc = tcase_create("fp16");
    tcase_add_test(tc, test_f16_exact_values);
    tcase_add_test(tc, test_f16_subnormals);
    tcase_add_test(tc, test_f16_rounding_ties);
    tcase_add_test(tc, test_f16_inf_nan_overflow);
    tcase_add_test(tc, test_f16_round_trip_all);
    tcase_add_test(tc, test_f16_against_compiler);
    suite_add_tcase(s, tc);
    tc = tcase_create("references");
    tcase_add_test(tc, test_softmax_known);
    tcase_add_test(tc, test_xent_known);
    tcase_add_test(tc, test_embedding_fwd_known);
    tcase_add_test(tc, test_embedding_bwd_known);
    tcase_add_test(tc, test_embedding_bwd_rounds_once);
    tcase_add_test(tc, test_reference_bad_args);
    tcase_add_test(tc, test_op_identities);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tk_test_main(suite());
}
