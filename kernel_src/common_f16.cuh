/*
 * Helpers shared by the row kernels (softmax_f16.cu, softmax_xent_f16.cu,
 * embedding_f16.cu): warp shuffles for both vendors, packed fp16 vectors,
 * fp16 <-> fp32 conversion and the row reductions. Included through the
 * engine's embedded-include expansion, so it is part of every cache key.
 *
 * Needs TK_VEC defined first; the reductions also need TK_G, and are left out
 * for TK_LONG kernels. TK_CLUSTER (sm_90 and later only: the host sets it on
 * those targets alone) adds the thread-block-cluster helpers: the CTA's rank,
 * the cluster barrier in its two halves and a load from another CTA's shared
 * memory (distributed shared memory).
 */
#if defined(__HIPCC_RTC__) || defined(__HIP__)
#define TK_SHFL_XOR(v, m) __shfl_xor((v), (m))
#ifdef __AMDGCN_WAVEFRONT_SIZE
#define TK_WARP __AMDGCN_WAVEFRONT_SIZE
#else
#define TK_WARP 64
#endif
#else
#define TK_SHFL_XOR(v, m) __shfl_xor_sync(0xffffffffu, (v), (m))
#define TK_WARP 32
#endif

struct alignas(TK_VEC * 2) tk_vec {
    unsigned short h[TK_VEC];
};

static __device__ __forceinline__ float tk_h2f(unsigned short h)
{
    return __half2float(__ushort_as_half(h));
}

static __device__ __forceinline__ unsigned short tk_f2h(float f)
{
    return __half_as_ushort(__float2half_rn(f));
}

static __device__ __forceinline__ float tk_neg_inf(void)
{
    return __int_as_float(0xff800000);
}

#ifdef TK_EDGE
/* Rows that need not start or end on a vector boundary (TK_EDGE: odd
 * widths, odd leading dimensions, offset pointers). A row splits into a
 * head of h < TK_VEC halves before its first vector boundary, a body of
 * whole aligned vectors, and a tail of < TK_VEC halves after the body: the
 * body is read with vector loads as an aligned row would be, the head and
 * tail (the row's edge, at most 2 * TK_VEC - 2 halves) one half at a time,
 * edge half e (0 <= e < h + tail) by the thread of lane e modulo TK_G, into
 * TK_EW registers per thread. Every array of a call must share the row's
 * h: the host checks that base pointers agree modulo 2 * TK_VEC bytes and
 * leading dimensions modulo TK_VEC. */
#define TK_EW ((2 * TK_VEC - 2 + TK_G - 1) / TK_G)
/* the head's length: halves before the first vector boundary, at most cols */
static __device__ __forceinline__ int tk_edge_head(const unsigned short *row, long long cols)
{
    const int a = (int)(((unsigned long long)row >> 1) & (TK_VEC - 1));
    int h = (TK_VEC - a) & (TK_VEC - 1);
#if defined(TK_EDGE_OPAQUE) && defined(__CUDA_ARCH__)
    /* h's range (0..TK_VEC-1) hidden from the compiler: with TK_COLS one
     * less than a multiple of TK_VEC it otherwise knows the row's whole
     * vectors, (cols - h) / TK_VEC, for every h, and the code it then made
     * spilled at 32 registers (src/ops/softmax.c, TK_SOFTMAX_EDGE_OPAQUE) */
    asm volatile("" : "+r"(h));
#endif
    return cols < h ? (int)cols : h;
}
/* the row index of edge half e, the tail starting at ts */
static __device__ __forceinline__ long long tk_edge_idx(int e, int h, long long ts)
{
    return e < h ? (long long)e : ts + (e - h);
}
#endif

#if defined(TK_G) && !defined(TK_LONG)
#if TK_G <= 32
/* Reduction inside an aligned group of TK_G lanes of one warp. Every lane of
 * the warp takes part (rows past the end included). */
static __device__ __forceinline__ float tk_max_all(float v, float *red)
{
    (void)red;
#pragma unroll
    for (int o = TK_G / 2; o > 0; o >>= 1)
        v = fmaxf(v, TK_SHFL_XOR(v, o));
    return v;
}
static __device__ __forceinline__ float tk_sum_all(float v, float *red)
{
    (void)red;
#pragma unroll
    for (int o = TK_G / 2; o > 0; o >>= 1)
        v += TK_SHFL_XOR(v, o);
    return v;
}
#else
/* Whole-block reduction: warps reduce with shuffles, then every thread
 * combines the per-warp values in the same fixed order. */
static __device__ __forceinline__ float tk_max_all(float v, float *red)
{
#pragma unroll
    for (int o = TK_WARP / 2; o > 0; o >>= 1)
        v = fmaxf(v, TK_SHFL_XOR(v, o));
    if (threadIdx.x % TK_WARP == 0)
        red[threadIdx.x / TK_WARP] = v;
    __syncthreads();
    v = red[0];
    for (int w = 1; w < TK_G / TK_WARP; ++w)
        v = fmaxf(v, red[w]);
    __syncthreads();
    return v;
}
static __device__ __forceinline__ float tk_sum_all(float v, float *red)
{
#pragma unroll
    for (int o = TK_WARP / 2; o > 0; o >>= 1)
        v += TK_SHFL_XOR(v, o);
    if (threadIdx.x % TK_WARP == 0)
        red[threadIdx.x / TK_WARP] = v;
    __syncthreads();
    v = red[0];
    for (int w = 1; w < TK_G / TK_WARP; ++w)
        v += red[w];
    __syncthreads();
    return v;
}
#endif
#endif /* TK_G && !TK_LONG */

#ifdef TK_CLUSTER
#if defined(__HIPCC_RTC__) || defined(__HIP__) || !defined(__CUDA_ARCH__) || __CUDA_ARCH__ < 900
static_assert(TK_CLUSTER == 0, "TK_CLUSTER needs an NVIDIA target of sm_90 or later");
#endif
static __device__ __forceinline__ unsigned tk_cluster_rank(void)
{
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}
/* The wait half of the cluster barrier: every thread of every CTA takes
 * part, after its arrive (tk_xchg_init's). */
static __device__ __forceinline__ void tk_cluster_wait(void)
{
    asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
}
/* The cluster's exchange of one float2 per CTA (a row's partial results):
 * each CTA stores its pair into slot [rank] of every CTA's tk_xchg
 * (distributed shared memory) and arrives on that CTA's mbarrier; each CTA
 * waits on its own mbarrier for all TK_CLUSTER pairs, then reads them from
 * its own shared memory. Once that wait is over no other CTA touches this
 * CTA's shared memory, so it writes its output and returns without a
 * cluster barrier: a CTA no longer waits at the end for the slowest of the
 * cluster to have read its partial (H200 A/B: docs/performance-softmax.md).
 */
struct tk_xchg {
    unsigned long long bar;
    float2 slot[TK_CLUSTER];
};
static __device__ __forceinline__ unsigned tk_smem_addr(const void *p)
{
    return (unsigned)__cvta_generic_to_shared(p);
}
/* Every thread, at the kernel's start: the mbarrier set up, and this CTA's
 * half of the cluster barrier that tk_xchg_put completes, so that no CTA
 * arrives on an mbarrier not yet set up. */
static __device__ __forceinline__ void tk_xchg_init(tk_xchg *x)
{
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(tk_smem_addr(&x->bar)),
                     "n"(TK_CLUSTER)
                     : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
}
/* Every thread; thread r < TK_CLUSTER sends v (its own copy of this CTA's
 * pair) to CTA r. */
static __device__ __forceinline__ void tk_xchg_put(tk_xchg *x, float2 v, unsigned rank)
{
    tk_cluster_wait(); /* the other half of tk_xchg_init's arrive */
    if (threadIdx.x < TK_CLUSTER) {
        unsigned slot, bar;
        asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n"
                     : "=r"(slot)
                     : "r"(tk_smem_addr(&x->slot[rank])), "r"((unsigned)threadIdx.x));
        asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n"
                     : "=r"(bar)
                     : "r"(tk_smem_addr(&x->bar)), "r"((unsigned)threadIdx.x));
        asm volatile("st.shared::cluster.v2.f32 [%0], {%1, %2};\n" ::"r"(slot), "f"(v.x), "f"(v.y)
                     : "memory");
        /* release: the store above is visible to the waiter's acquire */
        asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(bar)
                     : "memory");
    }
}
/* The calling thread: until every CTA's pair is in x->slot. */
static __device__ __forceinline__ void tk_xchg_wait(tk_xchg *x)
{
    unsigned done;
    do {
        asm volatile("{\n"
                     " .reg .pred p;\n"
                     " mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], 0;\n"
                     " selp.u32 %0, 1, 0, p;\n"
                     "}\n"
                     : "=r"(done)
                     : "r"(tk_smem_addr(&x->bar))
                     : "memory");
    } while (!done);
}
/* One vector from global to shared memory without a register stop
 * (cp.async takes 4, 8 or 16 bytes; 2-byte vectors are copied through a
 * register). Complete after tk_cp_async_commit + tk_cp_async_wait; each
 * thread reads back only what it copied itself, so no block barrier. */
static __device__ __forceinline__ void tk_cp_async(tk_vec *dst, const tk_vec *src)
{
#if TK_VEC == 8
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(
                     (unsigned)__cvta_generic_to_shared(dst)),
                 "l"(src)
                 : "memory");
#elif TK_VEC >= 2
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(
                     (unsigned)__cvta_generic_to_shared(dst)),
                 "l"(src), "n"(TK_VEC * 2)
                 : "memory");
#else
    *dst = *src;
#endif
}
static __device__ __forceinline__ void tk_cp_async_commit(void)
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
static __device__ __forceinline__ void tk_cp_async_wait(void)
{
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}
#endif /* TK_CLUSTER */
