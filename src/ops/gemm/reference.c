/*
 * CPU references of the fp16 GEMM operators.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/gemm/gemm_internal.h"

/* ------------------------------------------------------------ references
 *
 * Products and sums in double (exact products of fp16 values; the sum's
 * error is far below fp32's), then one rounding: the forward returns that
 * sum rounded to fp32, NOT rounded through fp16 as the origin's oracle did
 * (the operator's output is fp32, so the reference keeps fp32 precision and
 * the tolerance can be tight); the gradients round to fp32 and then to fp16
 * (round to nearest even), the precision of their fp16 outputs. The double
 * to fp32 to fp16 path can differ from a direct rounding only on exact fp16
 * ties, by one fp16 ulp. Non-finite inputs propagate as IEEE arithmetic does
 * (0 * inf = NaN). Tolerances used against the device: |got - want| <=
 * 1e-5 * sum_k |a_k b_k| + 1e-6, plus 1e-3 * |want| (one fp16 ulp) for the
 * gradients: the device accumulates in fp32 in another order.
 */

/* Sizes > 0 and every product of two of them representable in bytes. */
static tk_status ref_check(int64_t M, int64_t N, int64_t K, const void *x, const void *y,
                           const void *out)
{
    if (M <= 0 || N <= 0 || K <= 0 || x == NULL || y == NULL || out == NULL)
        return TK_INVALID_ARGUMENT;
    if (M > INT64_MAX / 8 / K || K > INT64_MAX / 8 / N || M > INT64_MAX / 8 / N ||
        (uint64_t)M * (uint64_t)K > SIZE_MAX / 8 || (uint64_t)K * (uint64_t)N > SIZE_MAX / 8 ||
        (uint64_t)M * (uint64_t)N > SIZE_MAX / 8)
        return TK_OVERFLOW;
    return TK_OK;
}

static float *to_f32(const uint16_t *h, size_t n)
{
    float *f = malloc(n * sizeof *f);
    if (f != NULL)
        for (size_t i = 0; i < n; i++)
            f[i] = tk_f16_to_f32(h[i]);
    return f;
}

/* out[m,n] = sum_k x(m,k) * y[k,n] in double, x read through the strides
 * (xs_m, xs_k), y packed [K,N]. A row of out is accumulated a k at a time so
 * the inner loop runs along contiguous n. One rounding at the end (to fp32,
 * then to fp16 for the gradient outputs). */
static tk_status ref_core(int64_t M, int64_t N, int64_t K, const float *x, int64_t xs_m,
                          int64_t xs_k, const float *y, float *out_f32, uint16_t *out_f16)
{
    double *row = malloc((size_t)N * sizeof *row);
    if (row == NULL)
        return TK_OUT_OF_MEMORY;
    for (int64_t m = 0; m < M; m++) {
        for (int64_t n = 0; n < N; n++)
            row[n] = 0.0;
        for (int64_t k = 0; k < K; k++) {
            const double a = x[m * xs_m + k * xs_k];
            const float *yk = y + k * N;
            for (int64_t n = 0; n < N; n++)
                row[n] += a * (double)yk[n];
        }
        for (int64_t n = 0; n < N; n++) {
            if (out_f32 != NULL)
                out_f32[m * N + n] = (float)row[n];
            else
                out_f16[m * N + n] = tk_f32_to_f16((float)row[n]);
        }
    }
    free(row);
    return TK_OK;
}

/* which 0: x=A[M,K], y=B[K,N] -> C[M,N] fp32;
 * which 1: x=grad_C[M,N], y=B[K,N] -> grad_A[M,K] = x . y^T;
 * which 2: x=A[M,K], y=grad_C[M,N] -> grad_B[K,N] = x^T . y. */
static tk_status ref_gemm(int which, int64_t M, int64_t N, int64_t K, const uint16_t *x,
                          const uint16_t *y, float *out_f32, uint16_t *out_f16)
{
    tk_status st;
    float *xf = NULL, *yf = NULL;
    const size_t mk = (size_t)M * (size_t)K, kn = (size_t)K * (size_t)N, mn = (size_t)M * (size_t)N;

    xf = to_f32(x, which == 1 ? mn : mk);
    if (which == 1) {
        /* y^T as a packed [N,K] array so the core reads it along rows. */
        yf = malloc(kn * sizeof *yf);
        if (yf != NULL)
            for (int64_t k = 0; k < K; k++)
                for (int64_t n = 0; n < N; n++)
                    yf[n * K + k] = tk_f16_to_f32(y[k * N + n]);
    } else {
        yf = to_f32(y, which == 0 ? kn : mn);
    }
    if (xf == NULL || yf == NULL) {
        st = TK_OUT_OF_MEMORY;
        goto fail;
    }
    if (which == 0)
        st = ref_core(M, N, K, xf, K, 1, yf, out_f32, NULL);
    else if (which == 1)
        st = ref_core(M, K, N, xf, N, 1, yf, NULL, out_f16);
    else
        st = ref_core(K, N, M, xf, 1, K, yf, NULL, out_f16);
fail:
    free(xf);
    free(yf);
    return st;
}

tk_status tk_ref_gemm_f16_fwd(int64_t M, int64_t N, int64_t K, const uint16_t *A, const uint16_t *B,
                              float *C)
{
    tk_status st = ref_check(M, N, K, A, B, C);
    return st != TK_OK ? st : ref_gemm(0, M, N, K, A, B, C, NULL);
}

tk_status tk_ref_gemm_f16_grad_a(int64_t M, int64_t N, int64_t K, const uint16_t *grad_C,
                                 const uint16_t *B, uint16_t *grad_A)
{
    tk_status st = ref_check(M, N, K, grad_C, B, grad_A);
    return st != TK_OK ? st : ref_gemm(1, M, N, K, grad_C, B, NULL, grad_A);
}

tk_status tk_ref_gemm_f16_grad_b(int64_t M, int64_t N, int64_t K, const uint16_t *A,
                                 const uint16_t *grad_C, uint16_t *grad_B)
{
    tk_status st = ref_check(M, N, K, A, grad_C, grad_B);
    return st != TK_OK ? st : ref_gemm(2, M, N, K, A, grad_C, NULL, grad_B);
}
