// fp16 GEMM, NVIDIA sm_80+: the skinny kernels (N <= 8, TK_GEMM_SKINNY):
// 1 the forward (A K-major), 2 the weight gradient (A M-major), 3 the weight
// gradient split over the tokens (sm_90: clusters, mma.sync).
// Part of gemm_f16.cu (its defines are documented there), which includes it.

#if TK_GEMM_SKINNY == 1

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
 * The 8 warps' partial tiles are summed in shared memory. A thread's
 * TK_SK_KB x 4 loads of A all go out before its first mma (at most 128
 * registers, 118 with NVRTC 13: 2 blocks per SM; the host launches at
 * most that many): the first tile's before B is staged, the next tile's
 * before this one's partial sums are reduced and stored, so a block's
 * loads overlap its other work. */
#define TK_SK_KB 4 // k-blocks of 32 in flight per warp
/* Rows g, g + 8, g + 16, g + 24 of the 32-row tile at r0 (live: < M). */
static __device__ __forceinline__ void tk_sk_rows(const unsigned short *A, tk_i64 lda, tk_i64 M,
                                                  tk_i64 r0, int g, const unsigned short *rows[4],
                                                  bool live[4])
{
#pragma unroll
    for (int h = 0; h < 4; ++h) {
        const tk_i64 r = r0 + g + 8 * h;
        live[h] = r < M;
        rows[h] = A + (live[h] ? r : 0) * lda;
    }
}
/* A thread's TK_SK_KB x 4 pieces of 16 bytes of A for k-blocks kb0, kb0 + 8,
 * ... (zero past K and M). */
static __device__ __forceinline__ void tk_sk_load(uint4 (&a)[TK_SK_KB][4],
                                                  const unsigned short *const rows[4],
                                                  const bool live[4], tk_i64 kb0, int q, tk_i64 K)
{
#pragma unroll
    for (int u = 0; u < TK_SK_KB; ++u) {
        const tk_i64 k = (kb0 + 8 * u) * 32 + 8 * q;
        const bool kin = k < K; // K % 8 == 0: a 16-byte piece is all in or all out
#pragma unroll
        for (int h = 0; h < 4; ++h) {
            if (kin && live[h])
                asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                             : "=r"(a[u][h].x), "=r"(a[u][h].y), "=r"(a[u][h].z), "=r"(a[u][h].w)
                             : "l"(rows[h] + k));
            else
                a[u][h] = make_uint4(0u, 0u, 0u, 0u);
        }
    }
}
extern "C" __global__ void __launch_bounds__(256, 2)
    tk_gemm_f16(const unsigned short *__restrict__ A, const unsigned short *__restrict__ B,
                float *__restrict__ C, tk_i64 M, tk_i64 N, tk_i64 K, tk_i64 lda, tk_i64 ldb,
                tk_i64 ldc)
{
    extern __shared__ __align__(16) unsigned char tk_gemm_smem[];
    tk_gemm_baked(M, N, K);
    tk_pdl_enter();
    unsigned short *bt = (unsigned short *)tk_gemm_smem; // [8][K]
    float *red = (float *)(tk_gemm_smem + 16 * K);      // [8 warps][32 lanes][8]
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, q = lane & 3;
    const tk_i64 kblocks = (K + 31) / 32;
    tk_i64 r0 = (tk_i64)blockIdx.x * 32;
    const unsigned short *rows[4];
    bool live[4];
    uint4 a[TK_SK_KB][4];
    tk_sk_rows(A, lda, M, r0, g, rows, live);
    /* The first tile's first loads of A go out before B is staged (they
     * do not need it), so their latency overlaps B's; have: a holds the
     * loads of this warp's first k-blocks of the tile at r0. */
    bool have = r0 < M && warp < kblocks;
    if (have)
        tk_sk_load(a, rows, live, warp, q, K);
    for (tk_i64 k = tid; k < K; k += 256)
#pragma unroll
        for (int n = 0; n < 8; ++n)
            bt[n * K + k] = n < N ? B[k * ldb + n] : (unsigned short)0;
    __syncthreads();
    for (; r0 < M; r0 += (tk_i64)gridDim.x * 32) {
        float acc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
        tk_sk_rows(A, lda, M, r0, g, rows, live);
        for (tk_i64 kb0 = warp; kb0 < kblocks; kb0 += 8 * TK_SK_KB) {
            uint4 b[TK_SK_KB];
            if (!have)
                tk_sk_load(a, rows, live, kb0, q, K);
            have = false;
#pragma unroll
            for (int u = 0; u < TK_SK_KB; ++u) {
                const tk_i64 k = (kb0 + 8 * u) * 32 + 8 * q;
                const bool kin = k < K;
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
        /* the next tile's first loads, before this one's sums */
        if (r0 + (tk_i64)gridDim.x * 32 < M && warp < kblocks) {
            const unsigned short *nrows[4];
            bool nlive[4];
            tk_sk_rows(A, lda, M, r0 + (tk_i64)gridDim.x * 32, g, nrows, nlive);
            tk_sk_load(a, nrows, nlive, warp, q, K);
            have = true;
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
#endif /* TK_GEMM_SKINNY == 1 */

#if TK_GEMM_SKINNY == 2
/* Skinny weight gradient: C[M, N] = sum_k A(m, k) B(k, n) with N <= 8 (the
 * router's grad_b: M = d_model, K = the tokens), A M-major (A(m, k) at
 * A[k * lda + m]: the activations' rows), B N-major (B(k, n) at
 * B[k * ldb + n]: the router's gradient rows). Bound by one read of A, and
 * at a few thousand tokens by latency: one kernel, no split, no second
 * pass. Block b owns 8 values of m (m0 = 8 b: 16 bytes of each row of A)
 * and all the tokens; its 256 threads take rows tid, tid + 256, ...: per
 * row 16 bytes of A and 16 of B (zero-filled past M, N and K), 64 fp32
 * FMAs into the thread's 8 x 8 sums. Each thread streams its own rows
 * through a private ring of TK_SKW_STAGES slots in shared memory with
 * cp.async (TK_SKW_STAGES - 1 rows in flight while one is summed, no
 * registers held by the loads and no barrier: a thread reads only what it
 * copied). Neighbouring blocks read the other halves of the same 32-byte
 * sectors, so DRAM is read about once. The sums: within a warp by a
 * butterfly that halves each lane's values at every step (xor 16, 8, 4, 2,
 * 1: 62 shuffles, each lane left with 2 of the 64), then across the 8 warps
 * in shared memory, in a fixed order: results are the same on every run.
 * Needs TK_ALIGNED: A and B 16-byte aligned with lda, ldb % 8 == 0.
 * Dynamic shared memory: TK_SKW_STAGES x 256 x 32 bytes. */
#define TK_SKW_STAGES 12
static_assert(TK_ALIGNED, "the skinny weight gradient loads 16-byte pieces (TK_ALIGNED=1)");

// One butterfly step: lanes whose bit `bit` is 0 keep the first H values
// (adding the partner's), the others the second H, which move down.
template <int H>
__device__ __forceinline__ void skw_halve(float *v, int lane, int bit)
{
    const bool up = (lane >> bit) & 1;
#pragma unroll
    for (int i = 0; i < H; ++i) {
        const float send = up ? v[i] : v[i + H];
        const float keep = up ? v[i + H] : v[i];
        v[i] = keep + __shfl_xor_sync(0xffffffffu, send, 1 << bit);
    }
}

extern "C" __global__ void __launch_bounds__(256, 1)
    tk_gemm_f16(const unsigned short *__restrict__ A, const unsigned short *__restrict__ B,
                void *__restrict__ C, tk_i64 M, tk_i64 N, tk_i64 K, tk_i64 lda, tk_i64 ldb,
                tk_i64 ldc)
{
    extern __shared__ __align__(16) unsigned char tk_gemm_smem[];
    __shared__ float red[8][64]; // [warp][8 e + n]
    tk_gemm_baked(M, N, K);
    tk_pdl_enter();
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const tk_i64 m0 = (tk_i64)blockIdx.x * 8;
    const int abytes = m0 + 8 <= M ? 16 : (int)(M - m0) * 2, bbytes = N < 8 ? (int)N * 2 : 16;
    // slot s of this thread: A at sa + s * 4096, B at sa + (STAGES + s) * 4096
    const unsigned sa = tkg::smem_u32(tk_gemm_smem) + (unsigned)tid * 16u;
    constexpr unsigned BOFF = TK_SKW_STAGES * 4096u;
    // this thread's rows (the host keeps K under 2^31)
    const int rows = K > tid ? (int)((K - tid + 255) / 256) : 0;
    // Row j (token tid + 256 j) into slot s (j % STAGES); past K: zeros.
    auto issue = [&](int j, int s) {
        const tk_i64 k = tid + 256 * (tk_i64)j;
        const bool in = j < rows;
        const unsigned slot = sa + (unsigned)s * 4096u;
        tkg::cp_async16(slot, A + (in ? k : 0) * lda + m0, in ? abytes : 0);
        tkg::cp_async16(slot + BOFF, B + (in ? k : 0) * ldb, in ? bbytes : 0);
        tkg::cp_async_commit();
    };
    float v[64]; // v[8 e + n]: C(m0 + e, n)
#pragma unroll
    for (int i = 0; i < 64; ++i)
        v[i] = 0.f;
#pragma unroll
    for (int j = 0; j < TK_SKW_STAGES - 1; ++j)
        issue(j, j);
    // s: row j's slot; t: the slot of row j + STAGES - 1 (the one before s)
    for (int j = 0, s = 0, t = TK_SKW_STAGES - 1; j < rows; ++j) {
        issue(j + TK_SKW_STAGES - 1, t);
        tkg::cp_async_wait<TK_SKW_STAGES - 1>(); // row j is in
        const unsigned slot = sa + (unsigned)s * 4096u;
        t = s;
        s = s + 1 == TK_SKW_STAGES ? 0 : s + 1;
        unsigned aw[4], bw[4];
        asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(aw[0]), "=r"(aw[1]), "=r"(aw[2]), "=r"(aw[3])
                     : "r"(slot)
                     : "memory");
        asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(bw[0]), "=r"(bw[1]), "=r"(bw[2]), "=r"(bw[3])
                     : "r"(slot + BOFF)
                     : "memory");
        float bf[8];
#pragma unroll
        for (int n = 0; n < 8; ++n)
            bf[n] = tkg::h2f((unsigned short)(bw[n >> 1] >> (16 * (n & 1))));
#pragma unroll
        for (int e = 0; e < 8; ++e) {
            const float av = tkg::h2f((unsigned short)(aw[e >> 1] >> (16 * (e & 1))));
#pragma unroll
            for (int n = 0; n < 8; ++n)
                v[8 * e + n] = fmaf(av, bf[n], v[8 * e + n]);
        }
    }
    tkg::cp_async_wait<0>(); // the zero-filled copies past the rows, before the block ends
    // lane's values after the butterfly: v[0], v[1] = index base, base + 1
    skw_halve<32>(v, lane, 4);
    skw_halve<16>(v, lane, 3);
    skw_halve<8>(v, lane, 2);
    skw_halve<4>(v, lane, 1);
    skw_halve<2>(v, lane, 0);
    const int base = ((lane >> 4) & 1) * 32 + ((lane >> 3) & 1) * 16 + ((lane >> 2) & 1) * 8 +
                     ((lane >> 1) & 1) * 4 + (lane & 1) * 2;
    red[warp][base] = v[0];
    red[warp][base + 1] = v[1];
    __syncthreads();
    if (tid < 64) {
        float s = 0.f;
#pragma unroll
        for (int w = 0; w < 8; ++w)
            s += red[w][tid];
        const tk_i64 m = m0 + (tid >> 3);
        const int n = tid & 7;
        if (m < M && n < N) {
#if TK_OUT_F16
            ((unsigned short *)C)[m * ldc + n] = tkg::to_h(s);
#else
            ((float *)C)[m * ldc + n] = s;
#endif
        }
    }
}
#endif /* TK_GEMM_SKINNY == 2 */

#if TK_GEMM_SKINNY == 3
/* Skinny weight gradient split over the tokens (sm_90): the same product as
 * kind 2, C[M, N] = sum_k A(m, k) B(k, n) with N <= 8, A M-major (A(m, k) at
 * A[k * lda + m]) and B N-major, for token counts where kind 2's one block
 * per 8 values of m leaves each multiprocessor too many rows, on the tensor
 * cores. Block (x, y) owns the 256 values of m from 256 x and split y of
 * the tokens (K y / S to K (y + 1) / S, S = gridDim.y) in steps of 16
 * tokens; warp w takes steps w, w + 4, ... through its own ring of
 * TK_SKS_STAGES slots: per step the 16 token rows of its 256 values of m
 * (512 contiguous bytes a row, a cp.async of 16 bytes a lane; rows 528
 * bytes apart in the slot so that ldmatrix reads them without bank
 * conflicts) and B's 16 rows (16 bytes each, zero past N). Per step, 16
 * mma.m16n8k16 with m on the MMA's rows, the tokens on its reduction and n
 * on its 8 columns; A's fragments by ldmatrix.trans from the [token][m]
 * slot, B's likewise (x2) from [token][n]. Tokens past the split and
 * values past M are zero-filled. Then the 4 warps' sums are added in
 * shared memory, and the TK_SKS_CL blocks of a cluster (consecutive splits
 * of the same m) add theirs through distributed shared memory: cluster c
 * writes fp32 plane c of the split-K workspace (C + c M ldc, ldc = N),
 * which the reduce kernel sums. Every sum in a fixed order: the same bits
 * on every run. Needs TK_ALIGNED (A and B 16-byte aligned, lda, ldb % 8 ==
 * 0). Dynamic shared memory: TK_SKS_SMEM bytes (the rings during the loop,
 * the warps' sums after it). */
#ifndef TK_SKS_STAGES
#define TK_SKS_STAGES 3
#endif
#ifndef TK_SKS_CL
#define TK_SKS_CL 4
#endif
#define TK_SKS_ROW 528                      // bytes between a slot's token rows
#define TK_SKS_SLOT (16 * TK_SKS_ROW + 256) // 16 rows of A, then 16 of B
#define TK_SKS_SMEM (4 * TK_SKS_STAGES * TK_SKS_SLOT)
#define TK_SKS_RED (4 * 64 * 33 * 4) // [warp][64 sums][32 lanes + 1]: no bank conflict
static_assert(TK_ALIGNED, "the split skinny weight gradient loads 16-byte pieces (TK_ALIGNED=1)");
static_assert(TK_SKS_RED + 2048 * 4 <= TK_SKS_SMEM, "the sums in the rings' space");

extern "C" __global__ void __cluster_dims__(1, TK_SKS_CL, 1) __launch_bounds__(128, 1)
    tk_gemm_f16(const unsigned short *__restrict__ A, const unsigned short *__restrict__ B,
                float *__restrict__ C, tk_i64 M, tk_i64 N, tk_i64 K, tk_i64 lda, tk_i64 ldb,
                tk_i64 ldc)
{
    extern __shared__ __align__(16) unsigned char tk_gemm_smem[];
    tk_gemm_baked(M, N, K);
    tk_pdl_enter();
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const tk_i64 mb = (tk_i64)blockIdx.x * 256, m0 = mb + 8 * lane;
    const int abytes = m0 + 8 <= M ? 16 : m0 < M ? (int)(M - m0) * 2 : 0;
    const int bbytes = N < 8 ? (int)N * 2 : 16;
    const tk_i64 kb = K * blockIdx.y / gridDim.y, ke = K * (blockIdx.y + 1) / gridDim.y;
    const int steps = (int)((ke - kb + 15) / 16);
    const int mine = steps > warp ? (steps - warp + 3) / 4 : 0; // steps warp + 4 j
    const unsigned ring =
        tkg::smem_u32(tk_gemm_smem) + (unsigned)(warp * TK_SKS_STAGES * TK_SKS_SLOT);
    const unsigned short *a0 = A + (abytes ? m0 : 0);
    // Step j of this warp (the split's step warp + 4 j) into slot s.
    auto issue = [&](int j, int s) {
        const unsigned slot = ring + (unsigned)(s * TK_SKS_SLOT);
        const tk_i64 t0 = kb + 16 * (tk_i64)(warp + 4 * j);
#pragma unroll
        for (int r = 0; r < 16; ++r) {
            const bool in = j < mine && t0 + r < ke;
            tkg::cp_async16(slot + (unsigned)(r * TK_SKS_ROW + 16 * lane),
                            a0 + (in ? t0 + r : 0) * lda, in ? abytes : 0);
        }
        if (lane < 16) {
            const bool in = j < mine && t0 + lane < ke;
            tkg::cp_async16(slot + (unsigned)(16 * TK_SKS_ROW + 16 * lane),
                            B + (in ? t0 + lane : 0) * ldb, in ? bbytes : 0);
        }
        tkg::cp_async_commit();
    };
    float acc[16][4];
#pragma unroll
    for (int i = 0; i < 16; ++i)
#pragma unroll
        for (int c = 0; c < 4; ++c)
            acc[i][c] = 0.f;
#pragma unroll
    for (int j = 0; j < TK_SKS_STAGES - 1; ++j)
        issue(j, j);
    // ldmatrix rows: A's matrices (k 0-7 | 8-15) x (m +0 | +8), B's k 0-7 | 8-15
    const unsigned a_off =
        (unsigned)(((lane & 7) + 8 * (lane >> 4)) * TK_SKS_ROW + 16 * ((lane >> 3) & 1));
    const unsigned b_off = (unsigned)(16 * TK_SKS_ROW + 16 * (lane & 15));
    for (int j = 0, s = 0; j < mine; ++j) {
        issue(j + TK_SKS_STAGES - 1, s == 0 ? TK_SKS_STAGES - 1 : s - 1);
        tkg::cp_async_wait<TK_SKS_STAGES - 1>(); // step j is in (this lane's copies)
        __syncwarp();                            // ... and every lane's
        const unsigned slot = ring + (unsigned)(s * TK_SKS_SLOT);
        unsigned b[2];
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                     : "=r"(b[0]), "=r"(b[1])
                     : "r"(slot + b_off));
#pragma unroll
        for (int i = 0; i < 16; ++i) {
            unsigned a[4];
            tkg::ldsm_x4_t(slot + a_off + 32u * i, a[0], a[1], a[2], a[3]);
            tkg::mma16816(acc[i], a, b);
        }
        __syncwarp(); // every lane done with slot s before it is refilled
        s = s + 1 == TK_SKS_STAGES ? 0 : s + 1;
    }
    tkg::cp_async_wait<0>(); // the zero-filled copies past the steps
    __syncthreads();         // every warp done with its ring: the sums' space
    // acc[i][c]: m = mb + 16 i + g + 8 (c / 2), n = 2 q + c % 2 (g = lane / 4, q = lane % 4)
    float *red = (float *)tk_gemm_smem;
#pragma unroll
    for (int i = 0; i < 16; ++i)
#pragma unroll
        for (int c = 0; c < 4; ++c)
            red[(warp * 64 + 4 * i + c) * 33 + lane] = acc[i][c];
    __syncthreads();
    // Thread tid sums the block's outputs p = tid + 128 u (m = mb + p / 8,
    // n = p % 8) over the 4 warps, into fin[p].
    float *fin = (float *)(tk_gemm_smem + TK_SKS_RED);
#pragma unroll
    for (int u = 0; u < 16; ++u) {
        const int p = tid + 128 * u, ml = p >> 3, n = p & 7, r = ml & 15;
        const int slot = 4 * (ml >> 4) + 2 * (r >> 3) + (n & 1), ln = 4 * (r & 7) + (n >> 1);
        float sum = 0.f;
#pragma unroll
        for (int w = 0; w < 4; ++w)
            sum += red[(w * 64 + slot) * 33 + ln];
        fin[p] = sum;
    }
    // The cluster's blocks: block rank r sums its share of the 2048 outputs
    // over every block (in rank order) and stores it in plane blockIdx.y / CL.
    asm volatile("barrier.cluster.arrive.release.aligned;\n"
                 "barrier.cluster.wait.acquire.aligned;\n" ::
                     : "memory");
    unsigned rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
    constexpr int SHARE = 2048 / TK_SKS_CL;
    float *plane = C + (tk_i64)(blockIdx.y / TK_SKS_CL) * M * ldc;
    const unsigned fin_u = tkg::smem_u32(fin);
    for (int p = (int)rank * SHARE + tid; p < ((int)rank + 1) * SHARE; p += 128) {
        float w[TK_SKS_CL];
#pragma unroll
        for (int q = 0; q < TK_SKS_CL; ++q)
            asm volatile("{\n.reg .b32 ra;\n"
                         "mapa.shared::cluster.u32 ra, %1, %2;\n"
                         "ld.shared::cluster.f32 %0, [ra];\n}\n"
                         : "=f"(w[q])
                         : "r"(fin_u + (unsigned)p * 4u), "r"(q)
                         : "memory");
        float sum = w[0];
#pragma unroll
        for (int q = 1; q < TK_SKS_CL; ++q)
            sum += w[q];
        const tk_i64 m = mb + (p >> 3);
        const int n = p & 7;
        if (m < M && n < N)
            plane[m * ldc + n] = sum;
    }
    // no block leaves while a partner may still read its sums
    asm volatile("barrier.cluster.arrive.release.aligned;\n"
                 "barrier.cluster.wait.acquire.aligned;\n" ::
                     : "memory");
}
#endif /* TK_GEMM_SKINNY == 3 */
