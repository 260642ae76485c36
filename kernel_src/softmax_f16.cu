/*
 * Row softmax, fp16 in and out, fp32 arithmetic (tk_softmax_f16_fwd).
 *
 * Register kernel (default): a group of TK_G threads owns one row and keeps
 * it in registers as packed halves (TK_ITERS vectors of TK_VEC halves per
 * thread), so the row is read once and written once: max, sum of exp and the
 * normalised output are all computed from registers. TK_G <= 32: several rows
 * per block, reduced with shuffles inside the group; TK_G > 32: one row per
 * block of TK_G threads, reduced through shared memory.
 * TK_CLUSTER (sm_90 and later): rows too long for one block's registers;
 * a cluster of TK_CLUSTER blocks of TK_G threads owns one row, each block a
 * contiguous slice (TK_ITERS vectors per thread: the first TK_ITERS -
 * TK_SITERS in registers, the other TK_SITERS in shared memory, copied there
 * with cp.async), so the row is still read once and written once. Each
 * thread reduces its vectors to a (max, sum of exp) pair, each block its
 * threads', the blocks' pairs are exchanged through distributed shared
 * memory (tk_xchg: each block stores its pair into every block's shared
 * memory and arrives on its mbarrier) and every block combines them in rank
 * order (the same result in every block of the cluster, and from run to
 * run); a block returns once its stores are issued.
 * TK_STORE_E: the second pass writes e = exp(x - thread max) over x (fp16;
 * e <= 1, so a relative error of 2^-11 and one more rounding than the
 * reference), and the output is e scaled per thread (in fp16 pairs, the
 * scale rounded to fp16 first): one exp per element instead of two. TK_MINB:
 * blocks per SM the registers must allow (default 1024 / TK_G).
 * TK_LONG: rows too long for the others (or no clusters on the target); one
 * block of TK_G threads per row, an online (max, sum) pass and an output pass
 * (two reads, one write).
 *
 * Defines: TK_VEC (1, 2, 4, 8: halves per load, the host checks alignment),
 * TK_G, TK_ITERS, TK_BLOCK (threads per block), optional TK_COLS (exact
 * policy: row length baked in; otherwise the cols argument), TK_EDGE (rows
 * may start anywhere and cols need not be a multiple of TK_VEC: the whole
 * vectors of a row as above, the halves before and after them one at a
 * time, common_f16.cuh; on the cluster path rank 0 holds those), TK_CLUSTER
 * (+ TK_SITERS, TK_STORE_E, TK_MINB) or TK_LONG for
 * those kernels.
 */
#ifndef TK_VEC
#define TK_VEC 1
#endif
#ifndef TK_G
#define TK_G 32
#endif
#ifndef TK_ITERS
#define TK_ITERS 1
#endif
#ifndef TK_BLOCK
#define TK_BLOCK 128
#endif

#include "common_f16.cuh"
#include "pdl.cuh"

/* (m, s) pairs: s is a sum of exp(x - m). Combining handles an empty side
 * (m = -inf, s = 0) without forming inf - inf. */
static __device__ __forceinline__ void tk_ms_combine(float &m, float &s, float m2, float s2)
{
    if (m2 == tk_neg_inf())
        return;
    if (m == tk_neg_inf()) {
        m = m2;
        s = s2;
        return;
    }
    const float nm = fmaxf(m, m2);
    s = s * __expf(m - nm) + s2 * __expf(m2 - nm);
    m = nm;
}

#if !defined(TK_LONG) && !defined(TK_CLUSTER)

/* TK_MINB: blocks per SM the registers must allow (default: no bound) */
#ifdef TK_MINB
#define TK_ROW_MINB , TK_MINB
#else
#define TK_ROW_MINB
#endif
extern "C" __global__ void __launch_bounds__(TK_BLOCK TK_ROW_MINB)
    tk_softmax_f16_fwd(const unsigned short *__restrict__ in, long long ld_in,
                       unsigned short *__restrict__ out, long long ld_out, long long rows,
                       long long cols_arg)
{
    tk_pdl_enter();
#ifdef TK_COLS
    const long long cols = TK_COLS;
    (void)cols_arg;
#else
    const long long cols = cols_arg;
#endif
    __shared__ float red[32];
#if TK_G <= 32
    const int lane = (int)(threadIdx.x % TK_G);
    const long long row = (long long)blockIdx.x * (TK_BLOCK / TK_G) + threadIdx.x / TK_G;
#else
    const int lane = (int)threadIdx.x;
    const long long row = (long long)blockIdx.x;
#endif
    const bool row_ok = row < rows;
    const unsigned short *rin = in + (row_ok ? row : 0) * ld_in;
#ifdef TK_EDGE
    const int h = tk_edge_head(rin, cols);
#else
    const int h = 0;
#endif
    const int nvec = (int)((cols - h) / TK_VEC);
    const tk_vec *src = reinterpret_cast<const tk_vec *>(rin + h);
    tk_vec v[TK_ITERS];

    float mx = tk_neg_inf();
#pragma unroll
    for (int i = 0; i < TK_ITERS; ++i) {
        const int c = i * TK_G + lane;
        if (row_ok && c < nvec) {
            v[i] = src[c];
#pragma unroll
            for (int k = 0; k < TK_VEC; ++k)
                mx = fmaxf(mx, tk_h2f(v[i].h[k]));
        }
    }
#ifdef TK_EDGE
    const long long ts = h + (long long)nvec * TK_VEC; /* the tail's start */
    const int ne = h + (int)(cols - ts);
    float ex[TK_EW];
#pragma unroll
    for (int q = 0; q < TK_EW; ++q) {
        const int e = q * TK_G + lane;
        ex[q] = row_ok && e < ne ? tk_h2f(rin[tk_edge_idx(e, h, ts)]) : tk_neg_inf();
        mx = fmaxf(mx, ex[q]);
    }
#endif
    mx = tk_max_all(mx, red);

    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < TK_ITERS; ++i) {
        const int c = i * TK_G + lane;
        if (row_ok && c < nvec) {
#pragma unroll
            for (int k = 0; k < TK_VEC; ++k)
                sum += __expf(tk_h2f(v[i].h[k]) - mx);
        }
    }
#ifdef TK_EDGE
#pragma unroll
    for (int q = 0; q < TK_EW; ++q)
        if (row_ok && q * TK_G + lane < ne)
            sum += __expf(ex[q] - mx);
#endif
    sum = tk_sum_all(sum, red);
    const float inv = 1.0f / sum;

    unsigned short *rout = out + (row_ok ? row : 0) * ld_out;
    tk_vec *dst = reinterpret_cast<tk_vec *>(rout + h);
#pragma unroll
    for (int i = 0; i < TK_ITERS; ++i) {
        const int c = i * TK_G + lane;
        if (row_ok && c < nvec) {
            tk_vec o;
#pragma unroll
            for (int k = 0; k < TK_VEC; ++k)
                o.h[k] = tk_f2h(__expf(tk_h2f(v[i].h[k]) - mx) * inv);
            dst[c] = o;
        }
    }
#ifdef TK_EDGE
#pragma unroll
    for (int q = 0; q < TK_EW; ++q) {
        const int e = q * TK_G + lane;
        if (row_ok && e < ne)
            rout[tk_edge_idx(e, h, ts)] = tk_f2h(__expf(ex[q] - mx) * inv);
    }
#endif
}

#elif defined(TK_LONG)

extern "C" __global__ void __launch_bounds__(TK_G)
    tk_softmax_f16_fwd_long(const unsigned short *__restrict__ in, long long ld_in,
                            unsigned short *__restrict__ out, long long ld_out, long long rows,
                            long long cols_arg)
{
    tk_pdl_enter();
#ifdef TK_COLS
    const long long cols = TK_COLS;
    (void)cols_arg;
#else
    const long long cols = cols_arg;
#endif
    __shared__ float red_m[32];
    __shared__ float red_s[32];
    const long long row = (long long)blockIdx.x;
    (void)rows;
    const unsigned short *rin = in + row * ld_in;
    unsigned short *rout = out + row * ld_out;
#ifdef TK_EDGE
    const int h = tk_edge_head(rin, cols);
#else
    const int h = 0;
#endif
    const long long nvec = (cols - h) / TK_VEC;
    const tk_vec *src = reinterpret_cast<const tk_vec *>(rin + h);
    tk_vec *dst = reinterpret_cast<tk_vec *>(rout + h);

    float m = tk_neg_inf(), s = 0.0f;
#ifdef TK_EDGE
    /* TK_G >= 2 * TK_VEC - 2: one edge half per thread at most */
    const long long ts = h + nvec * TK_VEC;
    const int ne = h + (int)(cols - ts);
    const int e = (int)threadIdx.x;
    const float ex = e < ne ? tk_h2f(rin[tk_edge_idx(e, h, ts)]) : tk_neg_inf();
    if (e < ne) {
        m = ex;
        s = 1.0f;
    }
#endif
    for (long long c = threadIdx.x; c < nvec; c += TK_G) {
        const tk_vec x = src[c];
#pragma unroll
        for (int k = 0; k < TK_VEC; ++k) {
            const float f = tk_h2f(x.h[k]);
            if (f > m) {
                s = (m == tk_neg_inf() ? 0.0f : s * __expf(m - f)) + 1.0f;
                m = f;
            } else {
                s += __expf(f - m);
            }
        }
    }
#pragma unroll
    for (int o = TK_WARP / 2; o > 0; o >>= 1) {
        const float m2 = TK_SHFL_XOR(m, o);
        const float s2 = TK_SHFL_XOR(s, o);
        tk_ms_combine(m, s, m2, s2);
    }
    if (threadIdx.x % TK_WARP == 0) {
        red_m[threadIdx.x / TK_WARP] = m;
        red_s[threadIdx.x / TK_WARP] = s;
    }
    __syncthreads();
    m = red_m[0];
    s = red_s[0];
    for (int w = 1; w < TK_G / TK_WARP; ++w)
        tk_ms_combine(m, s, red_m[w], red_s[w]);
    const float inv = 1.0f / s;

    for (long long c = threadIdx.x; c < nvec; c += TK_G) {
        const tk_vec x = src[c];
        tk_vec o;
#pragma unroll
        for (int k = 0; k < TK_VEC; ++k)
            o.h[k] = tk_f2h(__expf(tk_h2f(x.h[k]) - m) * inv);
        dst[c] = o;
    }
#ifdef TK_EDGE
    if (e < ne)
        rout[tk_edge_idx(e, h, ts)] = tk_f2h(__expf(ex - m) * inv);
#endif
}

#else /* TK_CLUSTER */

#ifndef TK_SITERS
#define TK_SITERS 0
#endif
/* vectors per thread held in registers; the other TK_SITERS in shared memory */
#define TK_RITERS (TK_ITERS - TK_SITERS)
/* Blocks per SM the registers must allow (64 per thread): two blocks of
 * 512 threads keep one block's loads in flight while the other reduces. */
#ifndef TK_MINB
#if TK_G >= 1024
#define TK_MINB 1
#else
#define TK_MINB (1024 / TK_G)
#endif
#endif

/* 2^x, flushing denormal results to zero (softmax outputs that small are
 * below fp16's range anyway): one MUFU.EX2, no range fix-ups. */
static __device__ __forceinline__ float tk_exp2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
#ifdef TK_STORE_E
/* TK_STORE_E (TK_VEC >= 2): the max and the output's scaling take two
 * halves per instruction. The max is exact; the output rounds the scale to
 * fp16 before the product (at most one rounding more than scaling in fp32:
 * within one fp16 step of it). Fewer instructions between the slice's
 * loads and its stores (H200 A/B: docs/performance-softmax.md). */
static __device__ __forceinline__ unsigned tk_pair(const tk_vec &x, int k)
{
    return reinterpret_cast<const unsigned *>(x.h)[k];
}
static __device__ __forceinline__ void tk_set_pair(tk_vec &x, int k, unsigned p)
{
    reinterpret_cast<unsigned *>(x.h)[k] = p;
}
static __device__ __forceinline__ unsigned tk_h2max(unsigned a, unsigned b)
{
    unsigned d;
    asm("max.f16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
static __device__ __forceinline__ unsigned tk_h2mul(unsigned a, unsigned b)
{
    unsigned d;
    asm("mul.rn.f16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
/* (lo, hi) rounded to fp16 into one pair */
static __device__ __forceinline__ unsigned tk_f2h2(float lo, float hi)
{
    unsigned d;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(d) : "f"(hi), "f"(lo));
    return d;
}
#endif
/* The compiler must assume x changed: values derived from it are computed
 * again rather than kept in registers. */
static __device__ __forceinline__ void tk_launder(tk_vec &x)
{
#pragma unroll
    for (int k = 0; k < TK_VEC; ++k)
        asm volatile("" : "+h"(x.h[k]));
}

extern "C" __global__ void __cluster_dims__(TK_CLUSTER, 1, 1) __launch_bounds__(TK_G, TK_MINB)
    tk_softmax_f16_fwd_cluster(const unsigned short *__restrict__ in, long long ld_in,
                               unsigned short *__restrict__ out, long long ld_out, long long rows,
                               long long cols_arg)
{
    tk_pdl_enter();
#ifdef TK_COLS
    const long long cols = TK_COLS;
    (void)cols_arg;
#else
    const long long cols = cols_arg;
#endif
    __shared__ float2 red[32];
    __shared__ tk_xchg xc;   /* the cluster's (max, sum) pairs */
    __shared__ float2 whole; /* the row's (max, 1 / sum) */
    /* TK_SITERS: vectors TK_RITERS.. of each thread, at [(i - TK_RITERS) *
     * TK_G + lane] (consecutive threads, consecutive vectors) */
    extern __shared__ __align__(16) unsigned char tk_dyn_smem[];
    tk_vec *xs = reinterpret_cast<tk_vec *>(tk_dyn_smem);
    const long long row = (long long)(blockIdx.x / TK_CLUSTER);
    const unsigned short *rin = in + row * ld_in;
#ifdef TK_EDGE
    const int h = tk_edge_head(rin, cols);
#else
    const int h = 0;
#endif
    const int nvec = (int)((cols - h) / TK_VEC);
    /* Slices of ceil(nvec / TK_CLUSTER) vectors; the host sizes TK_G *
     * TK_ITERS to hold one. */
    const int per = (nvec + TK_CLUSTER - 1) / TK_CLUSTER;
    const unsigned rank = tk_cluster_rank();
    const int lo = (int)rank * per;
    int n = min(nvec, lo + per) - lo; /* may be <= 0 for the last ranks */
#ifdef TK_EDGE_OPAQUE
    /* held in a register (an opaque copy), as the pointers below are: with
     * the head's length hidden the compiler otherwise derived it again from
     * the row's address before every vector's test, at 32 registers (H200:
     * 0.89 -> 0.92-0.93 of copy at 217087-223207 columns, 16 blocks x 256 x 7,
     * docs/performance-softmax.md) */
    asm volatile("" : "+r"(n));
#endif
    const int lane = (int)threadIdx.x;
    tk_vec v[TK_RITERS > 0 ? TK_RITERS : 1];
    (void)rows;
    tk_xchg_init(&xc);

    {
        /* this thread's first vector; the pointer held in registers (an
         * opaque copy), not recomputed from the row for every load, which
         * the compiler did at 32 registers where the row's head is not known
         * (TK_EDGE: 5-9% slower, H200, docs/performance-softmax.md) */
        const tk_vec *src = reinterpret_cast<const tk_vec *>(rin + h) + lo + lane;
        asm volatile("" : "+l"(src));
#pragma unroll
        for (int i = 0; i < TK_ITERS; ++i) {
            const int c = i * TK_G + lane;
            if (c < n) {
                if (i < TK_RITERS)
                    v[i < TK_RITERS ? i : 0] = src[i * TK_G];
                else
                    tk_cp_async(&xs[(i - TK_RITERS) * TK_G + lane], src + i * TK_G);
            }
        }
    }
#ifdef TK_EDGE
    /* the row's edge: rank 0's, TK_G >= 2 * TK_VEC - 2 (one half per
     * thread at most); loaded once the slice's loads are issued, in flight
     * with them (before them, the values held across the loads cost
     * registers) */
    const long long ts = h + (long long)nvec * TK_VEC;
    const bool own_e = rank == 0 && lane < h + (int)(cols - ts);
    const unsigned short ex_h = own_e ? rin[tk_edge_idx(lane, h, ts)] : 0xfc00u; /* -inf */
#endif
    if (TK_SITERS > 0) {
        tk_cp_async_commit();
        tk_cp_async_wait();
    }
#ifdef TK_EDGE
    float ex = tk_h2f(ex_h);
#endif
#define TK_X(i)                                                                                    \
    ((i) < TK_RITERS ? tk_vec(v[(i) < TK_RITERS ? (i) : 0])                                        \
                     : tk_vec(xs[((i) < TK_RITERS ? 0 : (i)-TK_RITERS) * TK_G + lane]))

#ifdef TK_STORE_E
    /* this thread's max; then e = exp(x - max) into the slice in place
     * (fp16, e <= 1) and its sum in fp32: the output pass scales e and
     * needs no exp of its own */
    unsigned mp = 0xfc00fc00u; /* (-inf, -inf) */
#pragma unroll
    for (int i = 0; i < TK_ITERS; ++i) {
        const int c = i * TK_G + lane;
        if (c < n) {
            const tk_vec x = TK_X(i);
#pragma unroll
            for (int k = 0; k < TK_VEC / 2; ++k)
                mp = tk_h2max(mp, tk_pair(x, k));
        }
    }
    float m = fmaxf(tk_h2f((unsigned short)(mp & 0xffffu)), tk_h2f((unsigned short)(mp >> 16)));
    float s = 0.0f;
#ifdef TK_EDGE
    m = fmaxf(m, ex);
#endif
    /* re-read the halves rather than keep the first pass's floats */
#pragma unroll
    for (int i = 0; i < TK_RITERS; ++i)
        tk_launder(v[i]);
    asm volatile("" ::: "memory");
    const float ml = m * 1.4426950408889634f;
#pragma unroll
    for (int i = 0; i < TK_ITERS; ++i) {
        const int c = i * TK_G + lane;
        if (c < n) {
            const tk_vec x = TK_X(i);
            tk_vec e;
#pragma unroll
            for (int k = 0; k < TK_VEC / 2; ++k) {
                const float t0 = tk_exp2(fmaf(tk_h2f(x.h[2 * k]), 1.4426950408889634f, -ml));
                const float t1 = tk_exp2(fmaf(tk_h2f(x.h[2 * k + 1]), 1.4426950408889634f, -ml));
                s += t0 + t1;
                tk_set_pair(e, k, tk_f2h2(t0, t1));
            }
            if (i < TK_RITERS)
                v[i < TK_RITERS ? i : 0] = e;
            else
                xs[(i < TK_RITERS ? 0 : i - TK_RITERS) * TK_G + lane] = e;
        }
    }
#ifdef TK_EDGE
    /* m >= ex, finite, where the thread owns an edge half */
    ex = own_e ? tk_exp2(fmaf(ex, 1.4426950408889634f, -ml)) : 0.0f;
    s += ex;
#endif
    const float m_own = m;
#else
    /* this thread's (max, sum of exp), online: one conversion per
     * element, no float kept across vectors; then the block's */
    float m = tk_neg_inf(), s = 0.0f;
#pragma unroll
    for (int i = 0; i < TK_ITERS; ++i) {
        const int c = i * TK_G + lane;
        if (c < n) {
            const tk_vec x = TK_X(i);
            float f[TK_VEC];
            float mv = m;
#pragma unroll
            for (int k = 0; k < TK_VEC; ++k) {
                f[k] = tk_h2f(x.h[k]);
                mv = fmaxf(mv, f[k]);
            }
            /* exp(-inf) = 0 rescales the empty start */
            s *= __expf(m - mv);
#pragma unroll
            for (int k = 0; k < TK_VEC; ++k)
                s += __expf(f[k] - mv);
            m = mv;
        }
    }
#ifdef TK_EDGE
    if (own_e) {
        const float mv = fmaxf(m, ex);
        s = s * __expf(m - mv) + __expf(ex - mv);
        m = mv;
    }
#endif
#endif
#pragma unroll
    for (int o = TK_WARP / 2; o > 0; o >>= 1) {
        const float m2 = TK_SHFL_XOR(m, o);
        const float s2 = TK_SHFL_XOR(s, o);
        tk_ms_combine(m, s, m2, s2);
    }
    if (lane % TK_WARP == 0)
        red[lane / TK_WARP] = make_float2(m, s);
    __syncthreads();
    {
        /* the block's pair, in each thread that sends it */
        float bm = red[0].x, bs = red[0].y;
        if (threadIdx.x < TK_CLUSTER)
            for (int w = 1; w < TK_G / TK_WARP; ++w)
                tk_ms_combine(bm, bs, red[w].x, red[w].y);
        tk_xchg_put(&xc, make_float2(bm, bs), rank);
    }
    if (threadIdx.x == 0) {
        /* combined in rank order: the same in every block */
        tk_xchg_wait(&xc);
        float rm = tk_neg_inf(), rs = 0.0f;
#pragma unroll
        for (unsigned r = 0; r < TK_CLUSTER; ++r)
            tk_ms_combine(rm, rs, xc.slot[r].x, xc.slot[r].y);
        whole = make_float2(rm, 1.0f / rs);
    }
    __syncthreads();
    const float gm = whole.x, inv = whole.y;

    unsigned short *rout = out + row * ld_out;
    /* this thread's first vector, held as src is */
    tk_vec *dst = reinterpret_cast<tk_vec *>(rout + h) + lo + lane;
    asm volatile("" : "+l"(dst));
#ifdef TK_STORE_E
    /* exp(x - gm) / sum = e * exp(m_own - gm) / sum */
    const float sc =
        m_own == tk_neg_inf() ? 0.0f : tk_exp2((m_own - gm) * 1.4426950408889634f) * inv;
    const unsigned sc2 = tk_f2h2(sc, sc);
#pragma unroll
    for (int i = 0; i < TK_ITERS; ++i) {
        const int c = i * TK_G + lane;
        if (c < n) {
            const tk_vec e = TK_X(i);
            tk_vec o;
#pragma unroll
            for (int k = 0; k < TK_VEC / 2; ++k)
                tk_set_pair(o, k, tk_h2mul(tk_pair(e, k), sc2));
            dst[i * TK_G] = o;
        }
    }
#ifdef TK_EDGE
    if (own_e)
        rout[tk_edge_idx(lane, h, ts)] = tk_f2h(ex * sc);
#endif
#else
#pragma unroll
    for (int i = 0; i < TK_ITERS; ++i) {
        const int c = i * TK_G + lane;
        if (c < n) {
            const tk_vec x = TK_X(i);
            tk_vec o;
#pragma unroll
            for (int k = 0; k < TK_VEC; ++k)
                o.h[k] = tk_f2h(__expf(tk_h2f(x.h[k]) - gm) * inv);
            dst[i * TK_G] = o;
        }
    }
#ifdef TK_EDGE
    if (own_e)
        rout[tk_edge_idx(lane, h, ts)] = tk_f2h(__expf(ex - gm) * inv);
#endif
#endif
#undef TK_X
}

#endif /* TK_CLUSTER */
