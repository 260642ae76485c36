// fp16 GEMM, NVIDIA sm_80+: short reductions (K <= 16, TK_GEMM_SMALLK).
// Part of gemm_f16.cu (its defines are documented there), which includes it.

/* Short reductions: C[M, N] = A B with K <= TK_SMK_KMAX, any layout of A
 * (TK_A_KMAJOR) and B (TK_B_KMAJOR), any alignment and leading dimensions,
 * fp16 or fp32 C (TK_OUT_F16). There are at most 16 products per element:
 * writing C is the cost (16384 x 1024 fp16 from K = 8, the router's grad_a,
 * is 32 MB out for 0.3 MB in), which the tiled tensor-core kernels pay with
 * a pipeline built for long reductions. A block of 256 threads owns a
 * column tile of 256 (blockIdx.x % tiles_n) and walks row chunks of 32
 * (blockIdx.x / tiles_n, then every gridDim.x / tiles_n-th; the host makes
 * gridDim.x a multiple of tiles_n): B's K x 256 tile is loaded once into
 * fp32 shared memory, then the chunks' 32 x K of A in phases of
 * TK_SMK_PH chunks, every load of a phase issued before the first is waited
 * for (one memory latency per phase, not per chunk: each chunk's work is
 * short), zero beyond M, N and K.
 * A thread computes rows rg, rg + 4, ... rg + 28 (rg = tid / 64) of four
 * adjacent columns (4 (tid % 64)), k in increasing order in fp32, and stores
 * each row's four with one 8-byte (fp16) or 16-byte (fp32) store where C's
 * alignment allows: a warp writes 128 consecutive elements of a row. */
#define TK_SMK_BM 32
#define TK_SMK_BN 256
#define TK_SMK_KMAX 16
#define TK_SMK_PH 8
extern "C" __global__ void __launch_bounds__(256)
    tk_gemm_f16(const unsigned short *__restrict__ A, const unsigned short *__restrict__ B,
                void *__restrict__ C, tk_i64 M, tk_i64 N, tk_i64 K, tk_i64 lda, tk_i64 ldb,
                tk_i64 ldc)
{
    // B's rows padded by 4 floats: the transposing fill of a K-major B
    // (consecutive threads: consecutive k) hits banks 4 k + c, at most 2-way.
    constexpr int BS = TK_SMK_BN + 4;
    constexpr int AE = TK_SMK_BM * TK_SMK_KMAX / 256; // A elements per thread, at most
    __shared__ __align__(16) float as[TK_SMK_PH][TK_SMK_BM][TK_SMK_KMAX];
    __shared__ __align__(16) float bs[TK_SMK_KMAX * BS];
    tk_gemm_baked(M, N, K);
    tk_pdl_enter();
    const int tid = threadIdx.x;
    const tk_i64 tiles_n = (N + TK_SMK_BN - 1) / TK_SMK_BN;
    const tk_i64 n0 = (tk_i64)blockIdx.x % tiles_n * TK_SMK_BN;
    const tk_i64 g0 = (tk_i64)blockIdx.x / tiles_n, gs = (tk_i64)gridDim.x / tiles_n;
    const tk_i64 chunks = (M + TK_SMK_BM - 1) / TK_SMK_BM;
    // k up to K rounded up to 4 (zero past K, M and N); consecutive threads
    // take consecutive addresses of the stored layout.
    const int kp = ((int)K + 3) & ~3;
    // A phase's elements into registers: TK_SMK_PH chunks (this block's
    // chunks base, base + gs, ...), all loads issued before any is used.
    float an[TK_SMK_PH][AE];
    auto load_phase = [&](tk_i64 base) {
#pragma unroll
        for (int ph = 0; ph < TK_SMK_PH; ++ph) {
#pragma unroll
            for (int e = 0; e < AE; ++e) {
                const int i = tid + 256 * e;
                const int r = TK_A_KMAJOR ? i / kp : i % TK_SMK_BM;
                const int k = TK_A_KMAJOR ? i % kp : i / TK_SMK_BM;
                const tk_i64 m = (base + ph * gs) * TK_SMK_BM + r;
                an[ph][e] = 0.f;
                if (i < TK_SMK_BM * kp && m < M && k < K)
                    an[ph][e] = tkg::h2f(A[TK_A_KMAJOR ? m * lda + k : (tk_i64)k * lda + m]);
            }
        }
    };
    // the first phase's loads in flight while B's tile is filled
    load_phase(g0);
    for (int i = tid; i < kp * TK_SMK_BN; i += 256) {
        const int k = TK_B_KMAJOR ? i % kp : i / TK_SMK_BN;
        const int c = TK_B_KMAJOR ? i / kp : i % TK_SMK_BN;
        const tk_i64 n = n0 + c;
        float v = 0.f;
        if (n < N && k < K)
            v = tkg::h2f(B[TK_B_KMAJOR ? n * ldb + k : (tk_i64)k * ldb + n]);
        bs[k * BS + c] = v;
    }
    const int cq = tid & 63, rg = tid >> 6;
    const tk_i64 c0 = n0 + 4 * cq;
#if TK_OUT_F16
    const bool vec = ((unsigned long long)C % 8 == 0) && (ldc % 4 == 0) && c0 + 4 <= N;
#else
    const bool vec = ((unsigned long long)C % 16 == 0) && (ldc % 4 == 0) && c0 + 4 <= N;
#endif
    // Phases of TK_SMK_PH chunks: their A elements are all loaded before
    // any is waited for.
    for (tk_i64 base = g0; base < chunks; base += TK_SMK_PH * gs) {
        if (base != g0)
            load_phase(base);
        __syncthreads(); // the previous phase's reads of as are done
#pragma unroll
        for (int ph = 0; ph < TK_SMK_PH; ++ph) {
#pragma unroll
            for (int e = 0; e < AE; ++e) {
                const int i = tid + 256 * e;
                if (i < TK_SMK_BM * kp)
                    as[ph][TK_A_KMAJOR ? i / kp : i % TK_SMK_BM]
                      [TK_A_KMAJOR ? i % kp : i / TK_SMK_BM] = an[ph][e];
            }
        }
        __syncthreads();
        for (int ph = 0; ph < TK_SMK_PH; ++ph) {
            const tk_i64 chunk = base + ph * gs;
            if (chunk >= chunks)
                break;
            constexpr int R = TK_SMK_BM / 4;
            float acc[R][4];
#pragma unroll
            for (int i = 0; i < R; ++i)
                acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
#pragma unroll
            for (int k4 = 0; k4 < TK_SMK_KMAX / 4; ++k4) {
                if (4 * k4 >= K)
                    break;
                float4 b[4];
#pragma unroll
                for (int j = 0; j < 4; ++j)
                    b[j] = *(const float4 *)&bs[(4 * k4 + j) * BS + 4 * cq];
#pragma unroll
                for (int i = 0; i < R; ++i) {
                    const float4 a = *(const float4 *)&as[ph][rg + 4 * i][4 * k4];
                    const float av[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
                    for (int j = 0; j < 4; ++j) {
                        acc[i][0] = fmaf(av[j], b[j].x, acc[i][0]);
                        acc[i][1] = fmaf(av[j], b[j].y, acc[i][1]);
                        acc[i][2] = fmaf(av[j], b[j].z, acc[i][2]);
                        acc[i][3] = fmaf(av[j], b[j].w, acc[i][3]);
                    }
                }
            }
            if (c0 >= N)
                continue;
#pragma unroll
            for (int i = 0; i < R; ++i) {
                const tk_i64 r = chunk * TK_SMK_BM + rg + 4 * i;
                if (r >= M)
                    break;
#if TK_OUT_F16
                unsigned short *out = (unsigned short *)C + r * ldc + c0;
                const unsigned short h0 = tkg::to_h(acc[i][0]), h1 = tkg::to_h(acc[i][1]);
                const unsigned short h2 = tkg::to_h(acc[i][2]), h3 = tkg::to_h(acc[i][3]);
                if (vec) {
                    *(uint2 *)out = make_uint2((unsigned)h0 | ((unsigned)h1 << 16),
                                               (unsigned)h2 | ((unsigned)h3 << 16));
                } else {
                    out[0] = h0; // c0 < N
                    if (c0 + 1 < N)
                        out[1] = h1;
                    if (c0 + 2 < N)
                        out[2] = h2;
                    if (c0 + 3 < N)
                        out[3] = h3;
                }
#else
                float *out = (float *)C + r * ldc + c0;
                if (vec) {
                    *(float4 *)out = make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
                } else {
#pragma unroll
                    for (int e = 0; e < 4; ++e)
                        if (c0 + e < N)
                            out[e] = acc[i][e];
                }
#endif
            }
        }
    }
}
