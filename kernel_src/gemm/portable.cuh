// fp16 GEMM: AMD (MFMA on gfx90a, a portable tiled kernel elsewhere) and
// NVIDIA targets below sm_80 (TK_GEMM_SIMPLE).
// Part of gemm_f16.cu (its defines are documented there), which includes it.

/* ======================================================================
 * AMD, and NVIDIA targets below sm_80 (TK_GEMM_SIMPLE). gfx90a (MI200): MFMA v_mfma_f32_32x32x8f16,
 * one 32x32 output tile per wavefront, 2x2 wavefronts per 64x64 block. Other targets: a portable
 * shared-memory tiled kernel, fp32 accumulation. Both stage tiles through
 * LDS with scalar, bounds-checked loads (any alignment, any size).
 * Launch: 256 threads, grid = ceil(M/64) * ceil(N/64) blocks, no dynamic LDS.
 * ==================================================================== */

#define TK_AMD_BM 64
#define TK_AMD_BN 64
#define TK_AMD_BK 32

#if TK_GEMM_AMD
__device__ __forceinline__ float tk_h2f(unsigned short u)
{
    return (float)__builtin_bit_cast(_Float16, u);
}
__device__ __forceinline__ unsigned short tk_f2h(float f)
{
    return __builtin_bit_cast(unsigned short, (_Float16)f);
}
#else
__device__ __forceinline__ float tk_h2f(unsigned short u)
{
    return __half2float(__ushort_as_half(u));
}
__device__ __forceinline__ unsigned short tk_f2h(float f)
{
    return __half_as_ushort(__float2half_rn(f));
}
#endif

__device__ __forceinline__ unsigned short tk_load_a(const unsigned short *A, tk_i64 lda, tk_i64 m,
                                                    tk_i64 k, tk_i64 M, tk_i64 K)
{
    if (m >= M || k >= K)
        return 0;
#if TK_A_KMAJOR
    return A[m * lda + k];
#else
    return A[k * lda + m];
#endif
}
__device__ __forceinline__ unsigned short tk_load_b(const unsigned short *B, tk_i64 ldb, tk_i64 k,
                                                    tk_i64 n, tk_i64 K, tk_i64 N)
{
    if (n >= N || k >= K)
        return 0;
#if TK_B_KMAJOR
    return B[n * ldb + k];
#else
    return B[k * ldb + n];
#endif
}

__device__ __forceinline__ void tk_store(void *C, tk_i64 ldc, tk_i64 r, tk_i64 c, tk_i64 M,
                                         tk_i64 N, float v)
{
    if (r >= M || c >= N)
        return;
#if TK_OUT_F16
    ((unsigned short *)C)[r * ldc + c] = tk_f2h(v);
#else
    ((float *)C)[r * ldc + c] = v;
#endif
}

extern "C" __global__ void __launch_bounds__(256)
    tk_gemm_f16(const void *Av, const void *Bv, void *C, tk_i64 M, tk_i64 N, tk_i64 K, tk_i64 lda,
                tk_i64 ldb, tk_i64 ldc)
{
    tk_gemm_baked(M, N, K);
    const unsigned short *A = (const unsigned short *)Av;
    const unsigned short *B = (const unsigned short *)Bv;
    // +4 halves of padding per row breaks the power-of-two LDS strides.
    __shared__ unsigned short As[TK_AMD_BM][TK_AMD_BK + 4];
    __shared__ unsigned short Bs[TK_AMD_BK][TK_AMD_BN + 4];

    const int tid = threadIdx.x;
    const tk_i64 tiles_m = (M + TK_AMD_BM - 1) / TK_AMD_BM;
    const tk_i64 tiles_n = (N + TK_AMD_BN - 1) / TK_AMD_BN;
    tk_i64 tm, tn;
    tk_gemm_tile_of((tk_i64)blockIdx.x, tiles_m, tiles_n, &tm, &tn);
    if (tm >= tiles_m)
        return;
    const tk_i64 m0 = tm * TK_AMD_BM, n0 = tn * TK_AMD_BN;

#if TK_GEMM_AMD && defined(__gfx90a__)
    typedef _Float16 half4_t __attribute__((ext_vector_type(4)));
    typedef float float16_t __attribute__((ext_vector_type(16)));
    const int lane = tid & 63, wave = tid >> 6;
    const int wr = (wave >> 1) * 32, wc = (wave & 1) * 32;
    float16_t acc;
    for (int e = 0; e < 16; ++e)
        acc[e] = 0.f;
    for (tk_i64 k0 = 0; k0 < K; k0 += TK_AMD_BK) {
        for (int e = tid; e < TK_AMD_BM * TK_AMD_BK; e += 256) {
            const int r = e / TK_AMD_BK, c = e % TK_AMD_BK;
            As[r][c] = tk_load_a(A, lda, m0 + r, k0 + c, M, K);
        }
        for (int e = tid; e < TK_AMD_BK * TK_AMD_BN; e += 256) {
            const int r = e / TK_AMD_BN, c = e % TK_AMD_BN;
            Bs[r][c] = tk_load_b(B, ldb, k0 + r, n0 + c, K, N);
        }
        __syncthreads();
        for (int kk = 0; kk < TK_AMD_BK; kk += 8) {
            // 32x32x8: lane holds A[row = lane%32][k = 4*(lane/32) + 0..3] and
            // B[k = 4*(lane/32) + 0..3][col = lane%32].
            half4_t a, b;
            const int kb = kk + 4 * (lane >> 5);
            for (int e = 0; e < 4; ++e) {
                a[e] = __builtin_bit_cast(_Float16, As[wr + (lane & 31)][kb + e]);
                b[e] = __builtin_bit_cast(_Float16, Bs[kb + e][wc + (lane & 31)]);
            }
            acc = __builtin_amdgcn_mfma_f32_32x32x8f16(a, b, acc, 0, 0, 0);
        }
        __syncthreads();
    }
    // D layout: element e of lane l is row 8*(e/4) + 4*(l/32) + e%4, col l%32.
    for (int e = 0; e < 16; ++e) {
        const tk_i64 r = m0 + wr + 8 * (e >> 2) + 4 * (lane >> 5) + (e & 3);
        const tk_i64 c = n0 + wc + (lane & 31);
        tk_store(C, ldc, r, c, M, N, acc[e]);
    }
#else
    // Portable: 16x16 threads, each a 4x4 block of outputs.
    const int tx = tid & 15, ty = tid >> 4;
    float acc[4][4];
    for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j)
            acc[i][j] = 0.f;
    for (tk_i64 k0 = 0; k0 < K; k0 += TK_AMD_BK) {
        for (int e = tid; e < TK_AMD_BM * TK_AMD_BK; e += 256) {
            const int r = e / TK_AMD_BK, c = e % TK_AMD_BK;
            As[r][c] = tk_load_a(A, lda, m0 + r, k0 + c, M, K);
        }
        for (int e = tid; e < TK_AMD_BK * TK_AMD_BN; e += 256) {
            const int r = e / TK_AMD_BN, c = e % TK_AMD_BN;
            Bs[r][c] = tk_load_b(B, ldb, k0 + r, n0 + c, K, N);
        }
        __syncthreads();
        for (int kk = 0; kk < TK_AMD_BK; ++kk) {
            float a[4], b[4];
            for (int i = 0; i < 4; ++i)
                a[i] = tk_h2f(As[ty + 16 * i][kk]);
            for (int j = 0; j < 4; ++j)
                b[j] = tk_h2f(Bs[kk][tx + 16 * j]);
            for (int i = 0; i < 4; ++i)
                for (int j = 0; j < 4; ++j)
                    acc[i][j] += a[i] * b[j];
        }
        __syncthreads();
    }
    for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j)
            tk_store(C, ldc, m0 + ty + 16 * i, n0 + tx + 16 * j, M, N, acc[i][j]);
#endif
}
