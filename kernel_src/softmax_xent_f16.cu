/*
 * Softmax + cross-entropy backward, fp16, fp32 arithmetic
 * (tk_softmax_xent_f16_bwd): grad_in = s * (g - sum_j g_j * s_j) per row.
 *
 * Register kernel (default): a group of TK_G threads owns one row and keeps
 * s and g in registers as packed halves, so each input is read once and the
 * output written once. TK_G <= 32: several rows per block, shuffle
 * reductions; TK_G > 32: one row per block, shared-memory reduction.
 * TK_CLUSTER (sm_90 and later): rows too long for one block; a cluster of
 * TK_CLUSTER blocks owns one row, each block a contiguous slice of s and g
 * (TK_ITERS vectors of each per thread), so the inputs are still read once.
 * The blocks' partial dots are exchanged through distributed shared memory
 * and summed in rank order by every block (same value everywhere, and from
 * run to run). With TK_SMEM_G the slice of g waits in shared memory (copied
 * there with cp.async) instead of registers: half the registers, so two
 * blocks fit on an SM where the row needs many.
 * TK_LONG: rows too long for the others (or no clusters on the target); one
 * block per row, a dot pass and an output pass (inputs read twice).
 *
 * Defines: TK_VEC, TK_G, TK_ITERS, TK_BLOCK, optional TK_COLS, TK_EDGE,
 * TK_CLUSTER (+ TK_SMEM_G) or TK_LONG, as in softmax_f16.cu.
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

#if !defined(TK_LONG) && !defined(TK_CLUSTER)

extern "C" __global__ void __launch_bounds__(TK_BLOCK)
    tk_softmax_xent_f16_bwd(const unsigned short *__restrict__ s_in, long long ld_s,
                            const unsigned short *__restrict__ g_in, long long ld_g,
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
    const long long r = row_ok ? row : 0;
    const unsigned short *rs = s_in + r * ld_s, *rg = g_in + r * ld_g;
#ifdef TK_EDGE
    const int h = tk_edge_head(rs, cols);
#else
    const int h = 0;
#endif
    const int nvec = (int)((cols - h) / TK_VEC);
    const tk_vec *sp = reinterpret_cast<const tk_vec *>(rs + h);
    const tk_vec *gp = reinterpret_cast<const tk_vec *>(rg + h);
    tk_vec sv[TK_ITERS], gv[TK_ITERS];

    float dot = 0.0f;
#pragma unroll
    for (int i = 0; i < TK_ITERS; ++i) {
        const int c = i * TK_G + lane;
        if (row_ok && c < nvec) {
            sv[i] = sp[c];
            gv[i] = gp[c];
        }
    }
#pragma unroll
    for (int i = 0; i < TK_ITERS; ++i) {
        const int c = i * TK_G + lane;
        if (row_ok && c < nvec) {
#pragma unroll
            for (int k = 0; k < TK_VEC; ++k)
                dot += tk_h2f(sv[i].h[k]) * tk_h2f(gv[i].h[k]);
        }
    }
#ifdef TK_EDGE
    const long long ts = h + (long long)nvec * TK_VEC; /* the tail's start */
    const int ne = h + (int)(cols - ts);
    float es[TK_EW], eg[TK_EW];
#pragma unroll
    for (int q = 0; q < TK_EW; ++q) {
        const int e = q * TK_G + lane;
        const bool own = row_ok && e < ne;
        es[q] = own ? tk_h2f(rs[tk_edge_idx(e, h, ts)]) : 0.0f;
        eg[q] = own ? tk_h2f(rg[tk_edge_idx(e, h, ts)]) : 0.0f;
        dot += es[q] * eg[q];
    }
#endif
    dot = tk_sum_all(dot, red);

    unsigned short *rout = out + r * ld_out;
    tk_vec *dst = reinterpret_cast<tk_vec *>(rout + h);
#pragma unroll
    for (int i = 0; i < TK_ITERS; ++i) {
        const int c = i * TK_G + lane;
        if (row_ok && c < nvec) {
            tk_vec o;
#pragma unroll
            for (int k = 0; k < TK_VEC; ++k)
                o.h[k] = tk_f2h(tk_h2f(sv[i].h[k]) * (tk_h2f(gv[i].h[k]) - dot));
            dst[c] = o;
        }
    }
#ifdef TK_EDGE
#pragma unroll
    for (int q = 0; q < TK_EW; ++q) {
        const int e = q * TK_G + lane;
        if (row_ok && e < ne)
            rout[tk_edge_idx(e, h, ts)] = tk_f2h(es[q] * (eg[q] - dot));
    }
#endif
}

#elif defined(TK_LONG)

extern "C" __global__ void __launch_bounds__(TK_G)
    tk_softmax_xent_f16_bwd_long(const unsigned short *__restrict__ s_in, long long ld_s,
                                 const unsigned short *__restrict__ g_in, long long ld_g,
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
    const long long row = (long long)blockIdx.x;
    (void)rows;
    const unsigned short *rs = s_in + row * ld_s, *rg = g_in + row * ld_g;
    unsigned short *rout = out + row * ld_out;
#ifdef TK_EDGE
    const int h = tk_edge_head(rs, cols);
#else
    const int h = 0;
#endif
    const long long nvec = (cols - h) / TK_VEC;
    const tk_vec *sp = reinterpret_cast<const tk_vec *>(rs + h);
    const tk_vec *gp = reinterpret_cast<const tk_vec *>(rg + h);
    tk_vec *dst = reinterpret_cast<tk_vec *>(rout + h);

    float dot = 0.0f;
#ifdef TK_EDGE
    /* TK_G >= 2 * TK_VEC - 2: one edge half per thread at most */
    const long long ts = h + nvec * TK_VEC;
    const int e = (int)threadIdx.x;
    const bool own_e = e < h + (int)(cols - ts);
    const float es = own_e ? tk_h2f(rs[tk_edge_idx(e, h, ts)]) : 0.0f;
    const float eg = own_e ? tk_h2f(rg[tk_edge_idx(e, h, ts)]) : 0.0f;
    dot = es * eg;
#endif
    for (long long c = threadIdx.x; c < nvec; c += TK_G) {
        const tk_vec a = sp[c], b = gp[c];
#pragma unroll
        for (int k = 0; k < TK_VEC; ++k)
            dot += tk_h2f(a.h[k]) * tk_h2f(b.h[k]);
    }
#pragma unroll
    for (int o = TK_WARP / 2; o > 0; o >>= 1)
        dot += TK_SHFL_XOR(dot, o);
    if (threadIdx.x % TK_WARP == 0)
        red[threadIdx.x / TK_WARP] = dot;
    __syncthreads();
    dot = red[0];
    for (int w = 1; w < TK_G / TK_WARP; ++w)
        dot += red[w];

    for (long long c = threadIdx.x; c < nvec; c += TK_G) {
        const tk_vec a = sp[c], b = gp[c];
        tk_vec o;
#pragma unroll
        for (int k = 0; k < TK_VEC; ++k)
            o.h[k] = tk_f2h(tk_h2f(a.h[k]) * (tk_h2f(b.h[k]) - dot));
        dst[c] = o;
    }
#ifdef TK_EDGE
    if (own_e)
        rout[tk_edge_idx(e, h, ts)] = tk_f2h(es * (eg - dot));
#endif
}

#else /* TK_CLUSTER */

extern "C" __global__ void __cluster_dims__(TK_CLUSTER, 1, 1) __launch_bounds__(TK_G)
    tk_softmax_xent_f16_bwd_cluster(const unsigned short *__restrict__ s_in, long long ld_s,
                                    const unsigned short *__restrict__ g_in, long long ld_g,
                                    unsigned short *__restrict__ out, long long ld_out,
                                    long long rows, long long cols_arg)
{
    tk_pdl_enter();
#ifdef TK_COLS
    const long long cols = TK_COLS;
    (void)cols_arg;
#else
    const long long cols = cols_arg;
#endif
    __shared__ float red[32];
    __shared__ tk_xchg xc;  /* the cluster's dots (.x) */
    __shared__ float whole; /* the row's dot */
    (void)rows;
    const long long row = (long long)(blockIdx.x / TK_CLUSTER);
    const unsigned short *rs = s_in + row * ld_s, *rg = g_in + row * ld_g;
#ifdef TK_EDGE
    const int h = tk_edge_head(rs, cols);
#else
    const int h = 0;
#endif
    const int nvec = (int)((cols - h) / TK_VEC);
    const int per = (nvec + TK_CLUSTER - 1) / TK_CLUSTER;
    const unsigned rank = tk_cluster_rank();
    tk_xchg_init(&xc);
    const int lo = (int)rank * per;
    const int n = min(nvec, lo + per) - lo; /* may be <= 0 for the last ranks */
    const int lane = (int)threadIdx.x;
    const tk_vec *sp = reinterpret_cast<const tk_vec *>(rs + h) + lo;
    const tk_vec *gp = reinterpret_cast<const tk_vec *>(rg + h) + lo;
    tk_vec sv[TK_ITERS];
#ifdef TK_SMEM_G
    /* gv[i * TK_G + lane]: consecutive threads, consecutive vectors */
    extern __shared__ __align__(16) unsigned char tk_dyn_smem[];
    tk_vec *gv = reinterpret_cast<tk_vec *>(tk_dyn_smem);
#define TK_GV(i) gv[(i)*TK_G + lane]
#else
    tk_vec gv[TK_ITERS];
#define TK_GV(i) gv[i]
#endif

#ifdef TK_EDGE
    /* the row's edge: rank 0's, TK_G >= 2 * TK_VEC - 2 (one half per
     * thread at most); loaded before the slice so both are in flight */
    const long long ts = h + (long long)nvec * TK_VEC;
    const bool own_e = rank == 0 && lane < h + (int)(cols - ts);
    const unsigned short es_h = own_e ? rs[tk_edge_idx(lane, h, ts)] : 0;
    const unsigned short eg_h = own_e ? rg[tk_edge_idx(lane, h, ts)] : 0;
#endif
#pragma unroll
    for (int i = 0; i < TK_ITERS; ++i) {
        const int c = i * TK_G + lane;
        if (c < n) {
#ifdef TK_SMEM_G
            tk_cp_async(&TK_GV(i), gp + c);
#else
            TK_GV(i) = gp[c];
#endif
            sv[i] = sp[c];
        }
    }
#ifdef TK_SMEM_G
    tk_cp_async_commit();
    tk_cp_async_wait();
#endif
    float dot = 0.0f;
#ifdef TK_EDGE
    const float es = tk_h2f(es_h), eg = tk_h2f(eg_h);
    dot = es * eg;
#endif
#pragma unroll
    for (int i = 0; i < TK_ITERS; ++i) {
        const int c = i * TK_G + lane;
        if (c < n) {
            const tk_vec gi = TK_GV(i);
#pragma unroll
            for (int k = 0; k < TK_VEC; ++k)
                dot += tk_h2f(sv[i].h[k]) * tk_h2f(gi.h[k]);
        }
    }
#pragma unroll
    for (int o = TK_WARP / 2; o > 0; o >>= 1)
        dot += TK_SHFL_XOR(dot, o);
    if (lane % TK_WARP == 0)
        red[lane / TK_WARP] = dot;
    __syncthreads();
    {
        /* the block's dot, in each thread that sends it */
        float d = red[0];
        if (threadIdx.x < TK_CLUSTER)
            for (int w = 1; w < TK_G / TK_WARP; ++w)
                d += red[w];
        tk_xchg_put(&xc, make_float2(d, 0.0f), rank);
    }
    if (threadIdx.x == 0) {
        /* summed in rank order: the same in every block */
        tk_xchg_wait(&xc);
        float d = 0.0f;
#pragma unroll
        for (unsigned r = 0; r < TK_CLUSTER; ++r)
            d += xc.slot[r].x;
        whole = d;
    }
    __syncthreads();
    dot = whole;

    unsigned short *rout = out + row * ld_out;
    tk_vec *dst = reinterpret_cast<tk_vec *>(rout + h) + lo;
#pragma unroll
    for (int i = 0; i < TK_ITERS; ++i) {
        const int c = i * TK_G + lane;
        if (c < n) {
            const tk_vec gi = TK_GV(i);
            tk_vec o;
#pragma unroll
            for (int k = 0; k < TK_VEC; ++k)
                o.h[k] = tk_f2h(tk_h2f(sv[i].h[k]) * (tk_h2f(gi.h[k]) - dot));
            dst[c] = o;
        }
    }
#ifdef TK_EDGE
    if (own_e)
        rout[tk_edge_idx(lane, h, ts)] = tk_f2h(es * (eg - dot));
#endif
#undef TK_GV
}

#endif /* TK_CLUSTER */
