// fp16 GEMM, NVIDIA sm_80+: the skinny forward (N <= 8, TK_GEMM_SKINNY).
// Part of gemm_f16.cu (its defines are documented there), which includes it.

/* Skinny forward: C[M, N] (fp32) = A[M, K] B[K, N] with N <= 8 (the MoE
 * router), bound by one read of A. A is K-major with 16-byte aligned rows
 * (lda % 8 == 0) and K % 8 == 0; B row-major, any ldb. 256 threads, 8
 * warps; dynamic shared memory 16 K + 8192 bytes: B transposed and padded
 * to 8 columns (Bt[n][k], zero for n >= N), then the warps' partial sums.
 * A block takes 32 rows at a time (two m16 tiles; blocks stride over the
 * row tiles); its warps split K in 32-wide blocks (warp w: blocks w, w + 8,
 * ...). A thread (g = lane / 4, q = lane % 4) loads 16 contiguous bytes of
 * rows g and g + 8 of each tile at k = 32 kb + 8 q, whole 32-byte sectors
 * per quad, and feeds them to two mma.m16n8k16 with K permuted: the first
 * takes its halves 0-3, the second 4-7, as the fragment's k = 2q, 2q + 1,
 * 2q + 8, 2q + 9; the B fragment (Bt row g, the same 8 k from shared
 * memory) follows the same permutation, so each product pairs the same k.
 * The 8 warps' partial tiles are summed in shared memory. */
#define TK_SK_KB 4 // k-blocks of 32 in flight per warp
extern "C" __global__ void __launch_bounds__(256)
    tk_gemm_f16(const unsigned short *__restrict__ A, const unsigned short *__restrict__ B,
                float *__restrict__ C, tk_i64 M, tk_i64 N, tk_i64 K, tk_i64 lda, tk_i64 ldb,
                tk_i64 ldc)
{
    extern __shared__ __align__(16) unsigned char tk_gemm_smem[];
    tk_gemm_baked(M, N, K);
    unsigned short *bt = (unsigned short *)tk_gemm_smem; // [8][K]
    float *red = (float *)(tk_gemm_smem + 16 * K);      // [8 warps][32 lanes][8]
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, q = lane & 3;
    for (tk_i64 k = tid; k < K; k += 256)
#pragma unroll
        for (int n = 0; n < 8; ++n)
            bt[n * K + k] = n < N ? B[k * ldb + n] : (unsigned short)0;
    __syncthreads();
    const tk_i64 kblocks = (K + 31) / 32;
    for (tk_i64 r0 = (tk_i64)blockIdx.x * 32; r0 < M; r0 += (tk_i64)gridDim.x * 32) {
        float acc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
        const unsigned short *rows[4];
        bool live[4];
#pragma unroll
        for (int h = 0; h < 4; ++h) { // rows g, g + 8, g + 16, g + 24
            const tk_i64 r = r0 + g + 8 * h;
            live[h] = r < M;
            rows[h] = A + (live[h] ? r : 0) * lda;
        }
        for (tk_i64 kb0 = warp; kb0 < kblocks; kb0 += 8 * TK_SK_KB) {
            uint4 a[TK_SK_KB][4];
            uint4 b[TK_SK_KB];
#pragma unroll
            for (int u = 0; u < TK_SK_KB; ++u) {
                const tk_i64 k = (kb0 + 8 * u) * 32 + 8 * q;
                const bool kin = k < K; // K % 8 == 0: a 16-byte piece is all in or all out
#pragma unroll
                for (int h = 0; h < 4; ++h) {
                    if (kin && live[h])
                        asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                                     : "=r"(a[u][h].x), "=r"(a[u][h].y), "=r"(a[u][h].z),
                                       "=r"(a[u][h].w)
                                     : "l"(rows[h] + k));
                    else
                        a[u][h] = make_uint4(0u, 0u, 0u, 0u);
                }
                b[u] = kin ? *(const uint4 *)(bt + (tk_i64)g * K + k) : make_uint4(0u, 0u, 0u, 0u);
            }
#pragma unroll
            for (int u = 0; u < TK_SK_KB; ++u) {
#pragma unroll
                for (int t = 0; t < 2; ++t) { // m16 tile t: rows h = 2t, 2t + 1
                    const unsigned f0[4] = {a[u][2 * t].x, a[u][2 * t + 1].x, a[u][2 * t].y,
                                            a[u][2 * t + 1].y};
                    const unsigned g0[2] = {b[u].x, b[u].y};
                    tkg::mma16816(acc[t], f0, g0);
                    const unsigned f1[4] = {a[u][2 * t].z, a[u][2 * t + 1].z, a[u][2 * t].w,
                                            a[u][2 * t + 1].w};
                    const unsigned g1[2] = {b[u].z, b[u].w};
                    tkg::mma16816(acc[t], f1, g1);
                }
            }
        }
        // acc[t][2e + i]: row 16 t + g + 8 e, column 2 q + i.
        float *mine = red + (warp * 32 + lane) * 8;
#pragma unroll
        for (int t = 0; t < 2; ++t)
#pragma unroll
            for (int i = 0; i < 4; ++i)
                mine[4 * t + i] = acc[t][i];
        __syncthreads();
        {
            // thread: row rr = tid / 8, column c = tid % 8
            const int rr = tid >> 3, c = tid & 7;
            const int t = rr >> 4, e = (rr >> 3) & 1, gg = rr & 7;
            const int ln = gg * 4 + (c >> 1), slot = 4 * t + 2 * e + (c & 1);
            float v = 0.f;
#pragma unroll
            for (int w = 0; w < 8; ++w)
                v += red[(w * 32 + ln) * 8 + slot];
            const tk_i64 r = r0 + rr;
            if (r < M && c < N)
                C[r * ldc + c] = v;
        }
        __syncthreads();
    }
}
