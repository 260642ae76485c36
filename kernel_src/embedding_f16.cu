/*
 * Embedding, fp16.
 *
 * Forward (tk_embedding_f16_fwd): out[q,:] = weight[idx[q],:] as vectorised
 * row copies: TK_TR threads per row, TK_BLOCK / TK_TR rows per block, TK_VEC
 * halves per load/store. Rows with an index outside [0,V) are written as
 * zeros, never read, and counted into *bad when bad is not NULL.
 *
 * Backward gather (TK_BWD, tk_embedding_f16_bwd_gather): keys are the
 * (row << 32 | q) pairs of the valid queries sorted ascending (embedding_sort),
 * padded with ~0. The first block of each run of equal rows sums, per column,
 * the current grad_weight value and then grad_out[q] for q ascending, in fp32,
 * and rounds once: the same order whatever the schedule, so the bits are the
 * same on every run. grid.y splits the row into chunks of TK_BLOCK vectors.
 *
 * Defines: TK_VEC, TK_BLOCK, TK_TR (forward), optional TK_D (exact policy).
 */
#ifndef TK_VEC
#define TK_VEC 1
#endif
#ifndef TK_BLOCK
#define TK_BLOCK 256
#endif
#ifndef TK_TR
#define TK_TR 32
#endif

#include "common_f16.cuh"

#ifndef TK_BWD

extern "C" __global__ void __launch_bounds__(TK_BLOCK)
    tk_embedding_f16_fwd(const unsigned short *__restrict__ weight, long long V, long long D_arg,
                         const int *__restrict__ idx, long long Q, unsigned short *__restrict__ out,
                         unsigned int *bad)
{
#ifdef TK_D
    const long long D = TK_D;
    (void)D_arg;
#else
    const long long D = D_arg;
#endif
    const long long nvec = D / TK_VEC;
    const int lane = (int)(threadIdx.x % TK_TR);
    const long long q = (long long)blockIdx.x * (TK_BLOCK / TK_TR) + threadIdx.x / TK_TR;
    if (q >= Q)
        return;
    const long long r = idx[q];
    tk_vec *dst = reinterpret_cast<tk_vec *>(out + q * D);
    if (r < 0 || r >= V) {
        tk_vec z;
#pragma unroll
        for (int k = 0; k < TK_VEC; ++k)
            z.h[k] = 0;
        for (long long c = lane; c < nvec; c += TK_TR)
            dst[c] = z;
        if (bad != 0 && lane == 0)
            atomicAdd(bad, 1u);
        return;
    }
    const tk_vec *src = reinterpret_cast<const tk_vec *>(weight + r * D);
    for (long long c = lane; c < nvec; c += TK_TR)
        dst[c] = src[c];
}

#else /* TK_BWD */

#define TK_UNROLL 8

extern "C" __global__ void __launch_bounds__(TK_BLOCK)
    tk_embedding_f16_bwd_gather(const unsigned long long *__restrict__ keys, long long Q,
                                long long D_arg, const unsigned short *__restrict__ grad_out,
                                unsigned short *__restrict__ grad_weight)
{
#ifdef TK_D
    const long long D = TK_D;
    (void)D_arg;
#else
    const long long D = D_arg;
#endif
    const long long i = (long long)blockIdx.x;
    const unsigned long long key = keys[i];
    if (key == ~0ull)
        return;
    const unsigned int row = (unsigned int)(key >> 32);
    if (i > 0 && (unsigned int)(keys[i - 1] >> 32) == row)
        return; /* not the first of its run: the head block does the row */
    const long long c = (long long)blockIdx.y * TK_BLOCK + threadIdx.x;
    if (c >= D / TK_VEC)
        return;

    tk_vec *wp = reinterpret_cast<tk_vec *>(grad_weight + (long long)row * D) + c;
    const tk_vec w = *wp;
    float acc[TK_VEC];
#pragma unroll
    for (int k = 0; k < TK_VEC; ++k)
        acc[k] = tk_h2f(w.h[k]);

    /* Keys are sorted, so rows never decrease: once a key leaves the run,
     * every later one does too. TK_UNROLL loads in flight per step (a
     * frequent row is summed serially), added in ascending q. */
    long long j = i;
    for (;;) {
        unsigned long long kk[TK_UNROLL];
        bool in[TK_UNROLL];
        tk_vec g[TK_UNROLL];
#pragma unroll
        for (int u = 0; u < TK_UNROLL; ++u) {
            kk[u] = (j + u < Q) ? keys[j + u] : ~0ull;
            in[u] = kk[u] != ~0ull && (unsigned int)(kk[u] >> 32) == row;
        }
#pragma unroll
        for (int u = 0; u < TK_UNROLL; ++u)
            if (in[u])
                g[u] = reinterpret_cast<const tk_vec *>(grad_out +
                                                        (long long)(unsigned int)kk[u] * D)[c];
#pragma unroll
        for (int u = 0; u < TK_UNROLL; ++u)
            if (in[u]) {
#pragma unroll
                for (int k = 0; k < TK_VEC; ++k)
                    acc[k] += tk_h2f(g[u].h[k]);
            }
        if (!in[TK_UNROLL - 1])
            break;
        j += TK_UNROLL;
    }

    tk_vec o;
#pragma unroll
    for (int k = 0; k < TK_VEC; ++k)
        o.h[k] = tk_f2h(acc[k]);
    *wp = o;
}

#endif /* TK_BWD */
