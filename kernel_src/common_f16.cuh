/*
 * Helpers shared by the row kernels (softmax_f16.cu, softmax_xent_f16.cu,
 * embedding_f16.cu): warp shuffles for both vendors, packed fp16 vectors,
 * fp16 <-> fp32 conversion and the row reductions. Included through the
 * engine's embedded-include expansion, so it is part of every cache key.
 *
 * Needs TK_VEC defined first; the reductions also need TK_G, and are left out
 * for TK_LONG kernels.
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
