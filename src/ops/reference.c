/*
 * CPU references of the softmax and embedding operators (the GEMM ones live
 * in gemm.c). They mirror the origin system's oracles: inputs converted to
 * fp32, arithmetic in double (softmax, dot products) or in the exact fp32
 * order the device uses (embedding backward), one rounding to fp16 at the end.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops_internal.h"

/* Sizes > 0 and a * b * elem representable; no context to write to here. */
static tk_status ref_dims(int64_t a, int64_t b, int64_t elem)
{
    if (a <= 0 || b <= 0)
        return TK_INVALID_ARGUMENT;
    if (a > INT64_MAX / b || a * b > INT64_MAX / elem || (uint64_t)(a * b * elem) > SIZE_MAX)
        return TK_OVERFLOW;
    return TK_OK;
}

tk_status tk_ref_softmax_f16_fwd(int64_t rows, int64_t cols, const uint16_t *in, uint16_t *out)
{
    tk_status st = ref_dims(rows, cols, 2);
    if (st != TK_OK)
        return st;
    if (in == NULL || out == NULL)
        return TK_INVALID_ARGUMENT;
    for (int64_t r = 0; r < rows; r++) {
        const uint16_t *x = in + r * cols;
        uint16_t *y = out + r * cols;
        double mx = -INFINITY, sum = 0.0;
        for (int64_t c = 0; c < cols; c++) {
            double v = tk_f16_to_f32(x[c]);
            if (v > mx || isnan(v))
                mx = v;
        }
        for (int64_t c = 0; c < cols; c++)
            sum += exp((double)tk_f16_to_f32(x[c]) - mx);
        for (int64_t c = 0; c < cols; c++)
            y[c] = tk_f32_to_f16((float)(exp((double)tk_f16_to_f32(x[c]) - mx) / sum));
    }
    return TK_OK;
}

tk_status tk_ref_softmax_xent_f16_bwd(int64_t rows, int64_t cols, const uint16_t *s,
                                      const uint16_t *g, uint16_t *grad_in)
{
    tk_status st = ref_dims(rows, cols, 2);
    if (st != TK_OK)
        return st;
    if (s == NULL || g == NULL || grad_in == NULL)
        return TK_INVALID_ARGUMENT;
    for (int64_t r = 0; r < rows; r++) {
        const uint16_t *sr = s + r * cols, *gr = g + r * cols;
        double dot = 0.0;
        for (int64_t c = 0; c < cols; c++)
            dot += (double)tk_f16_to_f32(gr[c]) * (double)tk_f16_to_f32(sr[c]);
        for (int64_t c = 0; c < cols; c++) {
            double v = (double)tk_f16_to_f32(sr[c]) * ((double)tk_f16_to_f32(gr[c]) - dot);
            grad_in[r * cols + c] = tk_f32_to_f16((float)v);
        }
    }
    return TK_OK;
}

tk_status tk_ref_embedding_f16_fwd(int64_t V, int64_t D, const uint16_t *weight, int64_t Q,
                                   const int32_t *idx, uint16_t *out, uint64_t *n_bad)
{
    uint64_t bad = 0;
    tk_status st = ref_dims(V, D, 2);
    if (st == TK_OK)
        st = ref_dims(Q, D, 2);
    if (st != TK_OK)
        return st;
    if (weight == NULL || idx == NULL || out == NULL)
        return TK_INVALID_ARGUMENT;
    for (int64_t q = 0; q < Q; q++) {
        int64_t r = idx[q];
        if (r < 0 || r >= V) {
            memset(out + q * D, 0, (size_t)D * 2);
            bad++;
        } else {
            memcpy(out + q * D, weight + r * D, (size_t)D * 2);
        }
    }
    if (n_bad != NULL)
        *n_bad = bad;
    return TK_OK;
}

tk_status tk_ref_embedding_f16_bwd(int64_t V, int64_t D, uint16_t *grad_weight, int64_t Q,
                                   const int32_t *idx, const uint16_t *grad_out, uint64_t *n_bad)
{
    /* fp32 accumulators for the touched rows only: slot[row] numbers them in
     * order of first use. Each row starts from its current fp16 value and adds
     * its contributions in ascending q, in fp32, then rounds once: exactly the
     * device's deterministic order. */
    uint64_t bad = 0;
    int64_t *slot = NULL, n_slots = 0;
    float *acc = NULL;
    int64_t *slot_row = NULL;
    tk_status st = ref_dims(V, D, 4);
    if (st == TK_OK)
        st = ref_dims(Q, D, 4);
    if (st != TK_OK)
        return st;
    if (grad_weight == NULL || idx == NULL || grad_out == NULL)
        return TK_INVALID_ARGUMENT;
    if ((uint64_t)V > SIZE_MAX / sizeof *slot)
        return TK_OVERFLOW;

    slot = malloc((size_t)V * sizeof *slot);
    acc = malloc((size_t)Q * (size_t)D * sizeof *acc);
    slot_row = malloc((size_t)Q * sizeof *slot_row);
    if (slot == NULL || acc == NULL || slot_row == NULL) {
        st = TK_OUT_OF_MEMORY;
        goto done;
    }
    for (int64_t v = 0; v < V; v++)
        slot[v] = -1;
    for (int64_t q = 0; q < Q; q++) {
        int64_t r = idx[q];
        float *a;
        if (r < 0 || r >= V) {
            bad++;
            continue;
        }
        if (slot[r] < 0) {
            slot[r] = n_slots;
            slot_row[n_slots] = r;
            a = acc + n_slots * D;
            for (int64_t d = 0; d < D; d++)
                a[d] = tk_f16_to_f32(grad_weight[r * D + d]);
            n_slots++;
        }
        a = acc + slot[r] * D;
        for (int64_t d = 0; d < D; d++)
            a[d] += tk_f16_to_f32(grad_out[q * D + d]);
    }
    for (int64_t s = 0; s < n_slots; s++)
        for (int64_t d = 0; d < D; d++)
            grad_weight[slot_row[s] * D + d] = tk_f32_to_f16(acc[s * D + d]);
    if (n_bad != NULL)
        *n_bad = bad;
done:
    free(slot);
    free(acc);
    free(slot_row);
    return st;
}
