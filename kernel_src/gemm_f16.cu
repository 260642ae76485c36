// fp16 GEMM with fp32 accumulation: the three layouts of the origin's GEMM
// kernels (forward, grad_a, grad_b) behind one entry point, tk_gemm_f16.
//
// The host (src/ops/gemm.c) maps every op onto one formulation,
//     C[m,n] = sum_k A(m,k) * B(k,n),   m < M, n < N, k < K,
// with each operand stored in one of two ways:
//     A: TK_A_KMAJOR=1  A(m,k) = A[m*lda + k]   (row-major [M,K])
//        TK_A_KMAJOR=0  A(m,k) = A[k*lda + m]   (stored transposed, [K,M])
//     B: TK_B_KMAJOR=1  B(k,n) = B[n*ldb + k]   (stored transposed, [N,K])
//        TK_B_KMAJOR=0  B(k,n) = B[k*ldb + n]   (row-major [K,N])
//   forward  (NN): A=A, B=B, C fp32                    A_KMAJOR=1 B_KMAJOR=0
//   grad_a   (NT): A=grad_C, B=B (read as B^T), fp16   A_KMAJOR=1 B_KMAJOR=1
//   grad_b   (TN): A=A (read as A^T), B=grad_C, fp16   A_KMAJOR=0 B_KMAJOR=0
//
// Defines (baked by the specialiser):
//   TK_A_KMAJOR, TK_B_KMAJOR, TK_OUT_F16   layout and output type (0/1)
//   TK_BM, TK_BN, TK_BK                    block tile
//   TK_WM, TK_WN                           warps along M and N (NVIDIA)
//   TK_STAGES                              cp.async pipeline depth (NVIDIA)
//   TK_ALIGNED                             1: operands 16-byte aligned with
//                                          ld % 8 == 0 (cp.async path);
//                                          0: scalar loads, any alignment
//   TK_VEC_OUT                             1: C pointer and ldc allow paired stores
//   TK_M, TK_N, TK_K (each optional)       dimensions baked in (exact policy:
//                                          all three; stable: the two that are
//                                          not the token count); the baked
//                                          ones' run-time arguments are ignored
//   TK_SPLITK (optional, NVIDIA)           split-K: block row blockIdx.y of
//                                          gridDim.y sums its share of the K
//                                          tiles and writes fp32 partials to
//                                          C + blockIdx.y * M * ldc (a
//                                          workspace); TK_OUT_F16 is ignored
//   TK_SWAP (optional, TMA kernel)         the host swapped the operands to
//                                          compute C^T = B^T A^T (the token
//                                          count on the kernel's N, where the
//                                          tile width is free in steps of 16):
//                                          kernel element (m, n) is stored at
//                                          C[n*ldc + m]
//   TK_BM (TMA kernel)                     64, 128 or 256 rows (256: two
//                                          64-row wgmmas per consumer
//                                          warpgroup; 64: the warpgroups take
//                                          alternate K steps of the whole
//                                          tile, summed at the end; a block
//                                          per tile)
//   TK_CLUSTER (optional, TMA kernel)      2: blocks run in clusters of two
//                                          (__cluster_dims__) on the two tiles
//                                          of one tile row side by side; each
//                                          loads half of the A tile it shares
//                                          with its partner and multicasts it
//                                          to both (one grid block per tile)
//   TK_PDL (optional, TMA kernel)          launched with programmatic dependent
//                                          launch: waits for the previous kernel
//                                          (griddepcontrol.wait) first
//   TK_GEMM_SKINNY (NVIDIA, sm_80+)        instead of the tiled kernels: the
//                                          forward with N <= 8 (the router),
//                                          one pass over A (tk_gemm_skinny)
//   TK_GEMM_SMALLK (NVIDIA)                instead of the tiled kernels: a
//                                          reduction of K <= 16 (the router's
//                                          grad_a, grad_b of a few tokens),
//                                          bound by the write of C
//   TK_GEMM_REDUCE                         instead of the GEMM: the split-K
//                                          reduction kernel (end of the file)
//
// Every size is handled: loads are predicated with zero fill, stores guarded.
// Offsets are 64-bit.

#ifndef TK_A_KMAJOR
#define TK_A_KMAJOR 1
#endif
#ifndef TK_B_KMAJOR
#define TK_B_KMAJOR 0
#endif
#ifndef TK_OUT_F16
#define TK_OUT_F16 0
#endif
#ifndef TK_ALIGNED
#define TK_ALIGNED 0
#endif
#ifndef TK_VEC_OUT
#define TK_VEC_OUT 0
#endif
#ifndef TK_GROUP_M
#define TK_GROUP_M 8
#endif

typedef long long tk_i64;

#ifndef TK_SPLITK
#define TK_SPLITK 0
#endif
// TMA kernel epilogue: 1 stages each warpgroup's tile in the (then free)
// shared-memory ring and writes rows with 16-byte stores; 0 stores the
// accumulator pairs straight from registers (4 or 8 bytes per thread).
#ifndef TK_EPI_TMA
#define TK_EPI_TMA 0
#endif
#ifndef TK_STREAMK
#define TK_STREAMK 0
#endif
#ifndef TK_EPI_SMEM
#define TK_EPI_SMEM 1
#endif
#ifndef TK_SWAP
#define TK_SWAP 0
#endif
#ifndef TK_CLUSTER
#define TK_CLUSTER 1
#endif
#if (defined(TK_GEMM_REDUCE) || defined(TK_GEMM_SKINNY) || defined(TK_GEMM_SMALLK)) &&             \
    !defined(TK_GEMM_NO_ENTRY)
#define TK_GEMM_NO_ENTRY 1
#endif

// Split-K share of block row blockIdx.y: K tiles [*kt0, *kt0 + *kt) of the
// kt_all. gridDim.y == 1 gives the whole range.
__device__ __forceinline__ void tk_gemm_k_range(int kt_all, int *kt0, int *kt)
{
    const int per = (kt_all + (int)gridDim.y - 1) / (int)gridDim.y;
    const int first = (int)blockIdx.y * per;
    const int n = kt_all - first;
    *kt0 = first;
    *kt = n < per ? (n < 0 ? 0 : n) : per;
}

// The dimensions the specialiser baked in (TK_M, TK_N, TK_K) replace the
// run-time arguments: every entry point starts with this.
__device__ __forceinline__ void tk_gemm_baked(tk_i64 &M, tk_i64 &N, tk_i64 &K)
{
#ifdef TK_M
    M = TK_M;
#endif
#ifdef TK_N
    N = TK_N;
#endif
#ifdef TK_K
    K = TK_K;
#endif
    (void)M, (void)N, (void)K;
}

#if defined(__HIP__) || defined(__HIPCC_RTC__) || defined(__HIP_DEVICE_COMPILE__)
#define TK_GEMM_AMD 1
#else
#define TK_GEMM_AMD 0
#endif

// Block-to-tile mapping: groups of TK_GROUP_M tile rows walk N together so
// that the A and B panels they share stay in L2.
__device__ __forceinline__ void tk_gemm_tile_of(tk_i64 pid, tk_i64 tiles_m, tk_i64 tiles_n,
                                                tk_i64 *tm, tk_i64 *tn)
{
    const tk_i64 width = (tk_i64)TK_GROUP_M * tiles_n;
    const tk_i64 group = pid / width;
    const tk_i64 first_m = group * TK_GROUP_M;
    tk_i64 gsz = tiles_m - first_m;
    if (gsz > TK_GROUP_M)
        gsz = TK_GROUP_M;
    const tk_i64 in_group = pid - group * width;
    *tm = first_m + in_group % gsz;
    *tn = in_group / gsz;
}

#if !TK_GEMM_AMD && !defined(TK_GEMM_SIMPLE)
/* ======================================================================
 * NVIDIA: mma.sync m16n8k16 (fp16 in, fp32 accumulate), ldmatrix,
 * cp.async multi-stage pipeline, XOR-swizzled shared memory.
 * ==================================================================== */

#ifndef TK_BM
#define TK_BM 128
#endif
#ifndef TK_BN
#define TK_BN 128
#endif
#ifndef TK_BK
#define TK_BK 32
#endif
#ifndef TK_WM
#define TK_WM 2
#endif
#ifndef TK_WN
#define TK_WN 4
#endif
#ifndef TK_STAGES
#define TK_STAGES 3
#endif

namespace tkg
{

__device__ __forceinline__ unsigned smem_u32(const void *p)
{
    return (unsigned)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void cp_async16(unsigned dst, const void *src, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit()
{
    asm volatile("cp.async.commit_group;\n" ::);
}
template <int N> __device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldsm_x4(unsigned addr, unsigned &r0, unsigned &r1, unsigned &r2,
                                        unsigned &r3)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(unsigned addr, unsigned &r0, unsigned &r1, unsigned &r2,
                                          unsigned &r3)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}

__device__ __forceinline__ void mma16816(float *c, const unsigned *a, const unsigned *b)
{
    // Not volatile: a pure register operation, so the compiler may interleave
    // it with the next fragments' ldmatrix.
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Byte offset of 16-byte chunk `chunk` of row `row` in a tile whose rows hold
// W chunks. The XOR keeps the 8 rows an ldmatrix reads (same logical chunk)
// in 8 different bank groups, and cp.async writes conflict-free as well.
template <int W> __device__ __forceinline__ unsigned swz(int row, int chunk)
{
    int x;
    if (W >= 8)
        x = row & 7;
    else if (W == 4)
        x = (row >> 1) & 3;
    else if (W == 2)
        x = (row >> 2) & 1;
    else
        x = 0;
    return (unsigned)((row * W + (chunk ^ x)) * 16);
}

__device__ __forceinline__ unsigned short ld_h(const unsigned short *p)
{
    return __ldg(p);
}

// Copies a ROWS x (8*W) tile of 16-bit elements, row r at src + (r0+r)*ld +
// c0, into swizzled shared memory. Elements outside [0,rlim) x [0,clim) are
// zero.
template <int ROWS, int W, int NT, bool ALIGNED>
__device__ __forceinline__ void load_tile(unsigned sdst, const unsigned short *src, tk_i64 ld,
                                          tk_i64 r0, tk_i64 c0, tk_i64 rlim, tk_i64 clim, int tid)
{
    constexpr int CHUNKS = ROWS * W;
#pragma unroll
    for (int i = 0; i < (CHUNKS + NT - 1) / NT; ++i) {
        const int c = tid + i * NT;
        if (CHUNKS % NT != 0 && c >= CHUNKS)
            break;
        const int row = c / W;
        const int ch = c % W;
        const tk_i64 gr = r0 + row;
        const tk_i64 gc = c0 + (tk_i64)ch * 8;
        const unsigned dst = sdst + swz<W>(row, ch);
        if (ALIGNED) {
            tk_i64 rem = clim - gc;
            int bytes = (gr < rlim && rem > 0) ? (rem >= 8 ? 16 : (int)rem * 2) : 0;
            const unsigned short *g = bytes ? src + gr * ld + gc : src;
            cp_async16(dst, g, bytes);
        } else {
            unsigned short v[8];
#pragma unroll
            for (int e = 0; e < 8; ++e)
                v[e] = 0;
            if (gr < rlim) {
                const unsigned short *g = src + gr * ld + gc;
#pragma unroll
                for (int e = 0; e < 8; ++e)
                    if (gc + e < clim)
                        v[e] = ld_h(g + e);
            }
            const unsigned w0 = v[0] | ((unsigned)v[1] << 16), w1 = v[2] | ((unsigned)v[3] << 16);
            const unsigned w2 = v[4] | ((unsigned)v[5] << 16), w3 = v[6] | ((unsigned)v[7] << 16);
            asm volatile("st.shared.v4.u32 [%0], {%1,%2,%3,%4};\n" ::"r"(dst), "r"(w0), "r"(w1),
                         "r"(w2), "r"(w3));
        }
    }
}

__device__ __forceinline__ unsigned pack_h2(float lo, float hi)
{
    unsigned r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
__device__ __forceinline__ unsigned short to_h(float f)
{
    unsigned short r;
    asm("cvt.rn.f16.f32 %0, %1;\n" : "=h"(r) : "f"(f));
    return r;
}
__device__ __forceinline__ float h2f(unsigned short h)
{
    float r;
    asm("cvt.f32.f16 %0, %1;\n" : "=f"(r) : "h"(h));
    return r;
}

template <int BM, int BN, int BK, int WM, int WN, int STAGES, bool AK, bool BKM, bool OUT16,
          bool ALIGNED, bool VEC>
__device__ __forceinline__ void
gemm_body(const unsigned short *__restrict__ A, const unsigned short *__restrict__ B, void *C,
          tk_i64 M, tk_i64 N, tk_i64 K, tk_i64 lda, tk_i64 ldb, tk_i64 ldc, unsigned char *smem)
{
    constexpr int NT = WM * WN * 32;
    constexpr int WTM = BM / WM, WTN = BN / WN;
    constexpr int MI = WTM / 16, NI = WTN / 8;
    static_assert(WTM % 16 == 0 && WTN % 16 == 0 && BK % 16 == 0, "tile shape");
    // A tile: [BM][BK] when K-major, [BK][BM] otherwise; B tile: [BN][BK]
    // when K-major, [BK][BN] otherwise. W = 16-byte chunks per stored row.
    constexpr int AW = AK ? BK / 8 : BM / 8;
    constexpr int BW = BKM ? BK / 8 : BN / 8;
    constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2;
    constexpr int STAGE_BYTES = A_BYTES + B_BYTES;

    const int tid = threadIdx.x;
    const int lane = tid & 31, warp = tid >> 5;
    const int wm = warp / WN, wn = warp % WN;

    const tk_i64 tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    tk_i64 tm, tn;
    tk_gemm_tile_of((tk_i64)blockIdx.x, tiles_m, tiles_n, &tm, &tn);
    if (tm >= tiles_m)
        return;
    const tk_i64 m0 = tm * BM, n0 = tn * BN;

    const unsigned sbase = smem_u32(smem);
    int kt0, KT;
    tk_gemm_k_range((int)((K + BK - 1) / BK), &kt0, &KT);

    float acc[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                acc[i][j][e] = 0.f;

    auto load_stage = [&](int slot, int kt) {
        const tk_i64 k0 = (tk_i64)(kt0 + kt) * BK;
        const unsigned sa = sbase + slot * STAGE_BYTES;
        const unsigned sb = sa + A_BYTES;
        if (AK)
            load_tile<BM, AW, NT, ALIGNED>(sa, A, lda, m0, k0, M, K, tid);
        else
            load_tile<BK, AW, NT, ALIGNED>(sa, A, lda, k0, m0, K, M, tid);
        if (BKM)
            load_tile<BN, BW, NT, ALIGNED>(sb, B, ldb, n0, k0, N, K, tid);
        else
            load_tile<BK, BW, NT, ALIGNED>(sb, B, ldb, k0, n0, K, N, tid);
    };

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < KT)
            load_stage(s, s);
        cp_async_commit();
    }

    for (int kt = 0; kt < KT; ++kt) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        {
            const int nk = kt + STAGES - 1;
            if (nk < KT)
                load_stage(nk % STAGES, nk);
            cp_async_commit();
        }
        const unsigned sa = sbase + (kt % STAGES) * STAGE_BYTES;
        const unsigned sb = sa + A_BYTES;
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
            unsigned af[MI][4];
            unsigned bf[NI][2];
#pragma unroll
            for (int i = 0; i < MI; ++i) {
                const int mrow = wm * WTM + i * 16;
                if (AK) {
                    const int r = mrow + (lane & 15);
                    const int ch = kk * 2 + (lane >> 4);
                    ldsm_x4(sa + swz<AW>(r, ch), af[i][0], af[i][1], af[i][2], af[i][3]);
                } else {
                    const int r = kk * 16 + (lane & 7) + ((lane >> 4) << 3);
                    const int ch = (mrow >> 3) + ((lane >> 3) & 1);
                    ldsm_x4_t(sa + swz<AW>(r, ch), af[i][0], af[i][1], af[i][2], af[i][3]);
                }
            }
#pragma unroll
            for (int j = 0; j < NI; j += 2) {
                const int ncol = wn * WTN + j * 8;
                if (BKM) {
                    const int r = ncol + (lane & 7) + ((lane >> 4) << 3);
                    const int ch = kk * 2 + ((lane >> 3) & 1);
                    ldsm_x4(sb + swz<BW>(r, ch), bf[j][0], bf[j][1], bf[j + 1][0], bf[j + 1][1]);
                } else {
                    const int r = kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
                    const int ch = (ncol >> 3) + (lane >> 4);
                    ldsm_x4_t(sb + swz<BW>(r, ch), bf[j][0], bf[j][1], bf[j + 1][0], bf[j + 1][1]);
                }
            }
#pragma unroll
            for (int i = 0; i < MI; ++i)
#pragma unroll
                for (int j = 0; j < NI; ++j)
                    mma16816(acc[i][j], af[i], bf[j]);
        }
    }
    cp_async_wait<0>();

    // Epilogue: each lane owns pairs of adjacent columns in rows r and r+8.
#pragma unroll
    for (int i = 0; i < MI; ++i) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const tk_i64 r = m0 + wm * WTM + i * 16 + (lane >> 2) + h * 8;
            if (r >= M)
                continue;
#pragma unroll
            for (int j = 0; j < NI; ++j) {
                const tk_i64 c = n0 + wn * WTN + j * 8 + (lane & 3) * 2;
                const float v0 = acc[i][j][2 * h], v1 = acc[i][j][2 * h + 1];
                if (OUT16) {
                    unsigned short *out = (unsigned short *)C + r * ldc + c;
                    if (VEC && c + 1 < N) {
                        *(unsigned *)out = pack_h2(v0, v1);
                    } else {
                        if (c < N)
                            out[0] = to_h(v0);
                        if (c + 1 < N)
                            out[1] = to_h(v1);
                    }
                } else {
                    float *out = (float *)C + r * ldc + c;
                    if (VEC && c + 1 < N) {
                        *(float2 *)out = make_float2(v0, v1);
                    } else {
                        if (c < N)
                            out[0] = v0;
                        if (c + 1 < N)
                            out[1] = v1;
                    }
                }
            }
        }
    }
}

} // namespace tkg

#if defined(TK_GEMM_SKINNY) && defined(TK_GEMM_NO_ENTRY)
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
#endif /* TK_GEMM_SKINNY */

#if defined(TK_GEMM_SMALLK) && defined(TK_GEMM_NO_ENTRY)
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
    const int tid = threadIdx.x;
    const tk_i64 tiles_n = (N + TK_SMK_BN - 1) / TK_SMK_BN;
    const tk_i64 n0 = (tk_i64)blockIdx.x % tiles_n * TK_SMK_BN;
    const tk_i64 g0 = (tk_i64)blockIdx.x / tiles_n, gs = (tk_i64)gridDim.x / tiles_n;
    const tk_i64 chunks = (M + TK_SMK_BM - 1) / TK_SMK_BM;
    // k up to K rounded up to 4 (zero past K, M and N); consecutive threads
    // take consecutive addresses of the stored layout.
    const int kp = ((int)K + 3) & ~3;
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
    // Phases of TK_SMK_PH chunks (this block's chunks base, base + gs, ...):
    // their A elements are all loaded before any is waited for.
    for (tk_i64 base = g0; base < chunks; base += TK_SMK_PH * gs) {
        float an[TK_SMK_PH][AE];
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
#endif /* TK_GEMM_SMALLK */

/* ======================================================================
 * NVIDIA sm_90a (Hopper): warpgroup MMA (wgmma.mma_async m64nNk16, fp32
 * accumulators in registers), both operands read from shared memory through
 * matrix descriptors in the 128-byte swizzle layout, the transpose bits
 * serving the M-/N-major operands (so NN, NT and TN need no copies).
 * Two consumer warpgroups (256 threads), each owning 64 rows of a
 * 128 x TK_BN tile; all threads also load: cp.async with zero fill at the
 * edges into a TK_STAGES-deep ring of K tiles of 64.
 *
 * Shared-memory layout of one stage (base 1024-byte aligned, the period of
 * the 128-byte swizzle): the operand tile is a set of 64-element-wide
 * column blocks, each ROWS rows of 128 bytes, 16-byte chunk c of row r at
 * r*128 + ((c ^ (r & 7)) * 16). A K-major tile (rows = M or N, 64 k per
 * row) is one block; an M-/N-major tile (rows = 64 k) has BM/64 or BN/64
 * blocks. Descriptors: K-major SBO = 1024 (8-row groups), LBO unused; MN-
 * major LBO = ROWS*128 (next 64-wide block), SBO = 1024 (next 8 k rows).
 *
 * Pipeline per K tile kt: wait for this thread's copies of tile kt, fence
 * the generic-proxy writes for the async proxy, barrier (which also tells
 * every thread that both warpgroups finished the wgmma of tile kt-2, see
 * wait_group<1> below), issue the copies of tile kt+STAGES-2 into the slot
 * of tile kt-2, issue the 4 wgmma of tile kt, commit, wait until at most
 * one wgmma group (this one) is pending.
 * ==================================================================== */
// A CUtensorMap (128 bytes, 64-byte aligned), opaque here.
struct __align__(64) tk_tmap
{
    unsigned long long w[16];
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
namespace tkw
{

__device__ __forceinline__ unsigned long long desc(unsigned addr, unsigned lbo, unsigned sbo)
{
    return (unsigned long long)((addr & 0x3FFFF) >> 4) |
           ((unsigned long long)((lbo & 0x3FFFF) >> 4) << 16) |
           ((unsigned long long)((sbo & 0x3FFFF) >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ void fence()
{
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void commit()
{
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keeps the compiler from moving accumulator reads or writes across the
// asynchronous MMA's fence and wait.
template <int R> __device__ __forceinline__ void fence_regs(float *d)
{
#pragma unroll
    for (int i = 0; i < R; ++i)
        asm volatile("" : "+f"(d[i])::"memory");
}

// wgmma.mma_async m64nNk16 (fp32 += fp16 x fp16, both operands from shared
// memory), N any multiple of 16 up to 256: N/2 accumulators per thread, as
// N/16 groups of 8 registers (TK_WG_Lg: the operand numbers of the first g
// groups, TK_WG_Cg: their constraints), then the two descriptors and the
// operands' transposition flags.
#define TK_WG_G0 "%0,%1,%2,%3,%4,%5,%6,%7"
#define TK_WG_G1 "%8,%9,%10,%11,%12,%13,%14,%15"
#define TK_WG_G2 "%16,%17,%18,%19,%20,%21,%22,%23"
#define TK_WG_G3 "%24,%25,%26,%27,%28,%29,%30,%31"
#define TK_WG_G4 "%32,%33,%34,%35,%36,%37,%38,%39"
#define TK_WG_G5 "%40,%41,%42,%43,%44,%45,%46,%47"
#define TK_WG_G6 "%48,%49,%50,%51,%52,%53,%54,%55"
#define TK_WG_G7 "%56,%57,%58,%59,%60,%61,%62,%63"
#define TK_WG_G8 "%64,%65,%66,%67,%68,%69,%70,%71"
#define TK_WG_G9 "%72,%73,%74,%75,%76,%77,%78,%79"
#define TK_WG_G10 "%80,%81,%82,%83,%84,%85,%86,%87"
#define TK_WG_G11 "%88,%89,%90,%91,%92,%93,%94,%95"
#define TK_WG_G12 "%96,%97,%98,%99,%100,%101,%102,%103"
#define TK_WG_G13 "%104,%105,%106,%107,%108,%109,%110,%111"
#define TK_WG_G14 "%112,%113,%114,%115,%116,%117,%118,%119"
#define TK_WG_G15 "%120,%121,%122,%123,%124,%125,%126,%127"
#define TK_WG_F8(b)                                                                                \
    "+f"(d[(b) + 0]), "+f"(d[(b) + 1]), "+f"(d[(b) + 2]), "+f"(d[(b) + 3]), "+f"(d[(b) + 4]),      \
        "+f"(d[(b) + 5]), "+f"(d[(b) + 6]), "+f"(d[(b) + 7])
#define TK_WG_L1 TK_WG_G0
#define TK_WG_C1 TK_WG_F8(0)
#define TK_WG_L2 TK_WG_L1 "," TK_WG_G1
#define TK_WG_C2 TK_WG_C1, TK_WG_F8(8)
#define TK_WG_L3 TK_WG_L2 "," TK_WG_G2
#define TK_WG_C3 TK_WG_C2, TK_WG_F8(16)
#define TK_WG_L4 TK_WG_L3 "," TK_WG_G3
#define TK_WG_C4 TK_WG_C3, TK_WG_F8(24)
#define TK_WG_L5 TK_WG_L4 "," TK_WG_G4
#define TK_WG_C5 TK_WG_C4, TK_WG_F8(32)
#define TK_WG_L6 TK_WG_L5 "," TK_WG_G5
#define TK_WG_C6 TK_WG_C5, TK_WG_F8(40)
#define TK_WG_L7 TK_WG_L6 "," TK_WG_G6
#define TK_WG_C7 TK_WG_C6, TK_WG_F8(48)
#define TK_WG_L8 TK_WG_L7 "," TK_WG_G7
#define TK_WG_C8 TK_WG_C7, TK_WG_F8(56)
#define TK_WG_L9 TK_WG_L8 "," TK_WG_G8
#define TK_WG_C9 TK_WG_C8, TK_WG_F8(64)
#define TK_WG_L10 TK_WG_L9 "," TK_WG_G9
#define TK_WG_C10 TK_WG_C9, TK_WG_F8(72)
#define TK_WG_L11 TK_WG_L10 "," TK_WG_G10
#define TK_WG_C11 TK_WG_C10, TK_WG_F8(80)
#define TK_WG_L12 TK_WG_L11 "," TK_WG_G11
#define TK_WG_C12 TK_WG_C11, TK_WG_F8(88)
#define TK_WG_L13 TK_WG_L12 "," TK_WG_G12
#define TK_WG_C13 TK_WG_C12, TK_WG_F8(96)
#define TK_WG_L14 TK_WG_L13 "," TK_WG_G13
#define TK_WG_C14 TK_WG_C13, TK_WG_F8(104)
#define TK_WG_L15 TK_WG_L14 "," TK_WG_G14
#define TK_WG_C15 TK_WG_C14, TK_WG_F8(112)
#define TK_WG_L16 TK_WG_L15 "," TK_WG_G15
#define TK_WG_C16 TK_WG_C15, TK_WG_F8(120)
#define TK_WG_MMA(n, regs, da_op, db_op, ta_op, tb_op, ...)                                        \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                                       \
                 "wgmma.mma_async.sync.aligned.m64n" #n "k16.f32.f16.f16 {" regs "}, %" #da_op    \
                 ", %" #db_op ", p, 1, 1, %" #ta_op ", %" #tb_op ";\n}\n"                         \
                 : __VA_ARGS__                                                                     \
                 : "l"(da), "l"(db), "n"(TA), "n"(TB))

template <int BN, int TA, int TB>
__device__ __forceinline__ void mma(float *d, unsigned long long da, unsigned long long db)
{
    static_assert(BN % 16 == 0 && BN >= 16 && BN <= 256, "wgmma tile width");
    if constexpr (BN == 256)
        TK_WG_MMA(256, TK_WG_L16, 128, 129, 130, 131, TK_WG_C16);
    else if constexpr (BN == 240)
        TK_WG_MMA(240, TK_WG_L15, 120, 121, 122, 123, TK_WG_C15);
    else if constexpr (BN == 224)
        TK_WG_MMA(224, TK_WG_L14, 112, 113, 114, 115, TK_WG_C14);
    else if constexpr (BN == 208)
        TK_WG_MMA(208, TK_WG_L13, 104, 105, 106, 107, TK_WG_C13);
    else if constexpr (BN == 192)
        TK_WG_MMA(192, TK_WG_L12, 96, 97, 98, 99, TK_WG_C12);
    else if constexpr (BN == 176)
        TK_WG_MMA(176, TK_WG_L11, 88, 89, 90, 91, TK_WG_C11);
    else if constexpr (BN == 160)
        TK_WG_MMA(160, TK_WG_L10, 80, 81, 82, 83, TK_WG_C10);
    else if constexpr (BN == 144)
        TK_WG_MMA(144, TK_WG_L9, 72, 73, 74, 75, TK_WG_C9);
    else if constexpr (BN == 128)
        TK_WG_MMA(128, TK_WG_L8, 64, 65, 66, 67, TK_WG_C8);
    else if constexpr (BN == 112)
        TK_WG_MMA(112, TK_WG_L7, 56, 57, 58, 59, TK_WG_C7);
    else if constexpr (BN == 96)
        TK_WG_MMA(96, TK_WG_L6, 48, 49, 50, 51, TK_WG_C6);
    else if constexpr (BN == 80)
        TK_WG_MMA(80, TK_WG_L5, 40, 41, 42, 43, TK_WG_C5);
    else if constexpr (BN == 64)
        TK_WG_MMA(64, TK_WG_L4, 32, 33, 34, 35, TK_WG_C4);
    else if constexpr (BN == 48)
        TK_WG_MMA(48, TK_WG_L3, 24, 25, 26, 27, TK_WG_C3);
    else if constexpr (BN == 32)
        TK_WG_MMA(32, TK_WG_L2, 16, 17, 18, 19, TK_WG_C2);
    else if constexpr (BN == 16)
        TK_WG_MMA(16, TK_WG_L1, 8, 9, 10, 11, TK_WG_C1);
}

// Copies a ROWS x COLS tile (COLS contiguous elements per row in global
// memory, COLS % 64 == 0) into the swizzled block layout described above.
// Elements outside [0,rlim) x [0,clim) are zero.
template <int ROWS, int COLS, int NT>
__device__ __forceinline__ void load_tile(unsigned sdst, const unsigned short *src, tk_i64 ld,
                                          tk_i64 r0, tk_i64 c0, tk_i64 rlim, tk_i64 clim, int tid)
{
    constexpr int W = COLS / 8;
    constexpr int CHUNKS = ROWS * W;
    static_assert(CHUNKS % NT == 0, "tile chunks per thread");
#pragma unroll
    for (int i = 0; i < CHUNKS / NT; ++i) {
        const int c = tid + i * NT;
        const int row = c / W;
        const int ch = c % W;
        const tk_i64 gr = r0 + row;
        const tk_i64 gc = c0 + (tk_i64)ch * 8;
        const unsigned dst =
            sdst + (unsigned)((ch >> 3) * ROWS * 128 + row * 128 + (((ch & 7) ^ (row & 7)) << 4));
        const tk_i64 rem = clim - gc;
        const int bytes = (gr < rlim && rem > 0) ? (rem >= 8 ? 16 : (int)rem * 2) : 0;
        const unsigned short *g = bytes ? src + gr * ld + gc : src;
        tkg::cp_async16(dst, g, bytes);
    }
}


// Register epilogue shared by the wgmma kernels. Accumulator layout (per warp
// of a warpgroup, 16 rows): register 4j+2h+e holds row rbase + 8h, column
// n0 + 8j + 2*(lane%4) + e. SWAP: the kernel computes C^T (its rows are C's
// columns): element (r, c) goes to C[c * ldc + r].
template <int BN, bool OUT16, bool VEC, bool SWAP = false>
__device__ __forceinline__ void store_acc_regs(const float *acc, void *C, tk_i64 ldc, tk_i64 M,
                                               tk_i64 N, tk_i64 rbase, tk_i64 n0, int lane)
{
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const tk_i64 r = rbase + h * 8;
        if (r >= M)
            continue;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
            const tk_i64 c = n0 + j * 8 + (lane & 3) * 2;
            const float v0 = acc[4 * j + 2 * h], v1 = acc[4 * j + 2 * h + 1];
            if (SWAP) {
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    if (c + e >= N)
                        break;
                    if (OUT16)
                        ((unsigned short *)C)[(c + e) * ldc + r] = tkg::to_h(e ? v1 : v0);
                    else
                        ((float *)C)[(c + e) * ldc + r] = e ? v1 : v0;
                }
            } else if (OUT16) {
                unsigned short *out = (unsigned short *)C + r * ldc + c;
                if (VEC && c + 1 < N) {
                    *(unsigned *)out = tkg::pack_h2(v0, v1);
                } else {
                    if (c < N)
                        out[0] = tkg::to_h(v0);
                    if (c + 1 < N)
                        out[1] = tkg::to_h(v1);
                }
            } else {
                float *out = (float *)C + r * ldc + c;
                if (VEC && c + 1 < N) {
                    *(float2 *)out = make_float2(v0, v1);
                } else {
                    if (c < N)
                        out[0] = v0;
                    if (c + 1 < N)
                        out[1] = v1;
                }
            }
        }
    }
}

template <int BM, int BN, int BK, int STAGES, bool AK, bool BKM, bool OUT16, bool VEC>
__device__ __forceinline__ void
gemm_body(const unsigned short *__restrict__ A, const unsigned short *__restrict__ B, void *C,
          tk_i64 M, tk_i64 N, tk_i64 K, tk_i64 lda, tk_i64 ldb, tk_i64 ldc, unsigned char *smem)
{
    constexpr int NT = 256;
    static_assert(BM == 128 && BK == 64 && (BN == 128 || BN == 256) && STAGES >= 3, "wgmma tile");
    constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2;
    constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
    constexpr int NACC = BN / 2;

    const int tid = threadIdx.x;
    const int wg = tid >> 7;
    const int lane = tid & 31, warp_in_wg = (tid >> 5) & 3;

    const tk_i64 tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    tk_i64 tm, tn;
    tk_gemm_tile_of((tk_i64)blockIdx.x, tiles_m, tiles_n, &tm, &tn);
    if (tm >= tiles_m)
        return;
    const tk_i64 m0 = tm * BM, n0 = tn * BN;

    // 1024-byte alignment for the swizzle pattern (the host adds the slack).
    const unsigned sbase = (tkg::smem_u32(smem) + 1023u) & ~1023u;
    int kt0, KT;
    tk_gemm_k_range((int)((K + BK - 1) / BK), &kt0, &KT);

    float acc[NACC];
#pragma unroll
    for (int i = 0; i < NACC; ++i)
        acc[i] = 0.f;

    auto load_stage = [&](int slot, int kt) {
        const tk_i64 k0 = (tk_i64)(kt0 + kt) * BK;
        const unsigned sa = sbase + slot * STAGE_BYTES;
        const unsigned sb = sa + A_BYTES;
        if (AK)
            load_tile<BM, BK, NT>(sa, A, lda, m0, k0, M, K, tid);
        else
            load_tile<BK, BM, NT>(sa, A, lda, k0, m0, K, M, tid);
        if (BKM)
            load_tile<BN, BK, NT>(sb, B, ldb, n0, k0, N, K, tid);
        else
            load_tile<BK, BN, NT>(sb, B, ldb, k0, n0, K, N, tid);
    };

#pragma unroll
    for (int s = 0; s < STAGES - 2; ++s) {
        if (s < KT)
            load_stage(s, s);
        tkg::cp_async_commit();
    }

    for (int kt = 0; kt < KT; ++kt) {
        tkg::cp_async_wait<STAGES - 3>();
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads();
        {
            const int nk = kt + STAGES - 2;
            if (nk < KT)
                load_stage(nk % STAGES, nk);
            tkg::cp_async_commit();
        }
        const unsigned sa = sbase + (kt % STAGES) * STAGE_BYTES;
        const unsigned sb = sa + A_BYTES;
        fence_regs<NACC>(acc);
        fence();
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
            unsigned long long da, db;
            if (AK) // rows of 128 bytes, this warpgroup's 64 rows, k at 32 bytes a step
                da = desc(sa + wg * 64 * 128 + kk * 32, 16, 1024);
            else // 64 k rows per column block of 64 m; block wg; 16 k rows a step
                da = desc(sa + wg * BK * 128 + kk * 16 * 128, BK * 128, 1024);
            if (BKM)
                db = desc(sb + kk * 32, 16, 1024);
            else
                db = desc(sb + kk * 16 * 128, BK * 128, 1024);
            mma<BN, AK ? 0 : 1, BKM ? 0 : 1>(acc, da, db);
        }
        commit();
        wait<1>();
        fence_regs<NACC>(acc);
    }
    wait<0>();
    fence_regs<NACC>(acc);
    tkg::cp_async_wait<0>();

    store_acc_regs<BN, OUT16, VEC>(acc, C, ldc, M, N, m0 + wg * 64 + warp_in_wg * 16 + (lane >> 2),
                                   n0, lane);
}

/* ---- TMA variant (TK_WGMMA=2): the same MMA and smem layout, loads by the
 * bulk tensor copy engine (cp.async.bulk.tensor.2d, 128-byte swizzle, zero
 * fill outside the tensor done by the hardware) into a ring of stages
 * guarded by full / empty mbarriers; warp-specialised: warpgroup 0 (its
 * registers cut with setmaxnreg) has one thread issue the copies, warpgroups
 * 1-2 (registers raised) run the wgmma and the epilogue. Tensor maps (built
 * on the host with cuTensorMapEncodeTiled) describe the stored operands:
 * K-major A [M,K] box 64 x 128, M-major A [K,M] box 64 x 64 (two per stage),
 * K-major B [N,K] box 64 x BN, N-major B [K,N] box 64 x 64 (BN/64 per stage).
 * Coordinates are 32-bit: the host keeps M, N, K below 2^31. */
__device__ __forceinline__ void bar_init(unsigned bar, unsigned count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void bar_expect(unsigned bar, unsigned bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void bar_arrive(unsigned bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void bar_wait(unsigned bar, unsigned parity)
{
    asm volatile("{\n.reg .pred p;\nTK_WAIT_%=:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 "@!p bra TK_WAIT_%=;\n}\n" ::"r"(bar),
                 "r"(parity)
                 : "memory");
}
// Arrival on the barrier at the same shared offset in cluster block `cta`
// (this block's own included): the address mapped with mapa, then a remote
// arrive, CTA-scope release as for a local one (what a consumer orders
// before it is its wgmma reads of the stage, already complete).
__device__ __forceinline__ void bar_arrive_cta(unsigned bar, unsigned cta)
{
    asm volatile("{\n.reg .b32 ra;\n"
                 "mapa.shared::cluster.u32 ra, %0, %1;\n"
                 "mbarrier.arrive.shared::cluster.b64 _, [ra];\n}\n" ::"r"(bar),
                 "r"(cta)
                 : "memory");
}
__device__ __forceinline__ unsigned cluster_rank()
{
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}
// Every thread of both blocks of the cluster: the barriers' initialisation
// (fence.mbarrier_init) is visible to the partner after it, and no block
// leaves while its partner may still signal its barriers.
__device__ __forceinline__ void cluster_sync()
{
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}
// Tile (tm, tn) of block-work index t. TK_CLUSTER 2: t's pair (t / 2) walks
// the tile rows and pairs of columns like tk_gemm_tile_of, the two blocks of
// a cluster (ranks t % 2) on columns 2 p and 2 p + 1 of one tile row. With
// an odd column count the last pair's second tile does not exist: that
// block still loads its half of A for its partner and runs the main loop on
// a copy of the partner's tile, and stores nothing (*phantom).
__device__ __forceinline__ void tma_tile_of(tk_i64 t, tk_i64 tiles_m, tk_i64 tiles_n, tk_i64 *tm,
                                            tk_i64 *tn, bool *phantom)
{
    *phantom = false;
    if (TK_CLUSTER == 1) {
        tk_gemm_tile_of(t, tiles_m, tiles_n, tm, tn);
        return;
    }
    tk_i64 pn;
    tk_gemm_tile_of(t >> 1, tiles_m, (tiles_n + 1) >> 1, tm, &pn);
    *tn = 2 * pn + (t & 1);
    if (*tn >= tiles_n) {
        *phantom = true;
        *tn = tiles_n - 1;
    }
}
// First row (column) of tile t of size B along a dimension of `dim`: a last
// tile that would reach past the edge is moved back to end at it instead
// (its start rounded up to a multiple of 8, which keeps the epilogue's
// 16-byte stores aligned and leaves at most 7 rows outside), overlapping the
// tile before it, when the dimension holds a whole tile. The overlap is computed by both tiles from the same operands in the
// same order and stored by both with the same bits. Why: the bulk tensor
// copies of a box mostly outside the tensor are slow. On an H100, fwd M x
// 1024 x 2816 on 128 x 64 tiles took 12.4 us at M = 640 and 768, but 21.5
// us at 641 and 19.8 at 656, where the last tile row's boxes held 1 and 16
// rows of A (bench/NOTES-gemm.md).
__device__ __forceinline__ int tile_origin(tk_i64 t, int B, tk_i64 dim)
{
    tk_i64 o = t * B;
    if (o + B > dim && dim >= B)
        o = (dim - B + 7) & ~(tk_i64)7; // <= t * B: that is a multiple of 8 above dim - B
    return (int)o;
}
// Blocks (work items) of the TMA kernel's grid: a tile each, pairs of
// column tiles with TK_CLUSTER 2.
__device__ __forceinline__ tk_i64 tma_grid_tiles(tk_i64 tiles_m, tk_i64 tiles_n)
{
    return TK_CLUSTER == 1 ? tiles_m * tiles_n : tiles_m * ((tiles_n + 1) >> 1) * 2;
}
// mask 0: into this block's shared memory; else multicast: written at the
// same shared offset of every cluster block in mask, each block's barrier at
// offset `bar` counting its bytes.
__device__ __forceinline__ void tma_load2d(unsigned dst, const tk_tmap *map, int c0, int c1,
                                           unsigned bar, unsigned short mask = 0)
{
    if (mask == 0)
        asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                     " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
                     "l"((unsigned long long)map), "r"(c0), "r"(c1), "r"(bar)
                     : "memory");
    else
        asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                     ".multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(dst),
                     "l"((unsigned long long)map), "r"(c0), "r"(c1), "r"(bar), "h"(mask)
                     : "memory");
}

// fp16 register epilogue with full 32-byte sectors: the accumulator layout
// gives a lane 2 columns of each 8-column block; lanes trade pairs inside
// their quad so that each lane stores 4 consecutive halves (8 bytes), 4 lanes
// a whole 32-byte sector of a row, half as many stores as pair stores.
// Needs C 8-byte aligned and ldc % 4 == 0 (checked by the caller).
template <int BN>
__device__ __forceinline__ void store_acc_h4(const float *acc, unsigned short *C, tk_i64 ldc,
                                             tk_i64 M, tk_i64 N, tk_i64 rbase, tk_i64 n0,
                                             int lane)
{
    const int q = lane & 3;
    const int src0 = (lane & ~3) | ((q & 1) << 1);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const tk_i64 r = rbase + h * 8;
#pragma unroll
        for (int j = 0; j < BN / 8; j += 2) {
            const unsigned pj = tkg::pack_h2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
            const unsigned pk = tkg::pack_h2(acc[4 * (j + 1) + 2 * h], acc[4 * (j + 1) + 2 * h + 1]);
            const unsigned a0 = __shfl_sync(0xffffffffu, pj, src0);
            const unsigned a1 = __shfl_sync(0xffffffffu, pj, src0 + 1);
            const unsigned b0 = __shfl_sync(0xffffffffu, pk, src0);
            const unsigned b1 = __shfl_sync(0xffffffffu, pk, src0 + 1);
            if (r >= M)
                continue;
            const unsigned lo = q < 2 ? a0 : b0, hi = q < 2 ? a1 : b1;
            const tk_i64 c = n0 + (j + (q >> 1)) * 8 + (q & 1) * 4;
            unsigned short *out = C + r * ldc + c;
            if (c + 3 < N) {
                *(uint2 *)out = make_uint2(lo, hi);
            } else {
                const unsigned xs[2] = {lo, hi};
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    if (c + e < N)
                        out[e] = (unsigned short)(xs[e / 2] >> (16 * (e % 2)));
            }
        }
    }
}

// Bulk tensor store of a staged shared-memory box to global memory (elements
// outside the tensor are not written), and its completion groups.
__device__ __forceinline__ void tma_store2d(const tk_tmap *map, unsigned src, int c0, int c1)
{
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"(
                     (unsigned long long)map),
                 "r"(c0), "r"(c1), "r"(src)
                 : "memory");
}
__device__ __forceinline__ void bulk_commit()
{
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void bulk_wait_read()
{
    asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void bulk_wait_all()
{
    asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}

// TMA-store epilogue (TK_EPI_TMA): the tile leaves in chunks of 128 rows x
// 128 bytes (32 fp32 or 64 fp16 columns), each written by the consumers into
// one of two 16 KiB staging buffers after the ring (128-byte swizzle: the
// 8 rows of a warp's store hit 8 different 16-byte columns, no bank
// conflicts), then stored by one thread with the bulk tensor copy engine
// while the next chunk, the next tile's main loop, go on. A buffer is
// rewritten only after the store that read it two chunks ago has read it.
// `chunk` counts chunks across the block's tiles (buffer parity). A width
// that is not a whole number of chunks (grad_a's K-major widths: 176 =
// 2 x 64 + 48 fp16 columns) stores its last BN % CW columns from registers
// (C 16-byte aligned, rows a multiple of 16 bytes apart: the host's c16).
template <int BN, bool OUT16, int NACC>
__device__ __forceinline__ void store_acc_tma(const float (&acc)[NACC], const tk_tmap *mC,
                                              unsigned stg, int &chunk, int m0, int n0, int cw,
                                              int warp_in_wg, int lane, int tid, void *C,
                                              tk_i64 ldc, tk_i64 M, tk_i64 N)
{
    constexpr int ES = OUT16 ? 2 : 4;
    constexpr int CW = 128 / ES; // columns per chunk
    constexpr int NCH = BN / CW, TAIL = BN % CW;
    static_assert(TAIL % 16 == 0, "TMA-store epilogue: a tail of whole 16-column blocks");
    const bool issuer = tid == 128;
    const int rl = cw * 64 + warp_in_wg * 16 + (lane >> 2);
#pragma unroll
    for (int ch = 0; ch < NCH; ++ch, ++chunk) {
        const unsigned buf = stg + (unsigned)(chunk & 1) * 16384u;
        if (issuer)
            bulk_wait_read<1>();
        asm volatile("bar.sync 1, 256;\n" ::: "memory");
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r = rl + 8 * h;
#pragma unroll
            for (int jj = 0; jj < CW / 8; ++jj) {
                const int j = ch * (CW / 8) + jj;
                const int cb = (jj * 8 + (lane & 3) * 2) * ES; // byte in the chunk's row
                const unsigned off =
                    buf + (unsigned)(r * 128 + ((((cb >> 4) ^ (r & 7)) << 4) | (cb & 15)));
                const float v0 = acc[4 * j + 2 * h], v1 = acc[4 * j + 2 * h + 1];
                if (OUT16)
                    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(off), "r"(tkg::pack_h2(v0, v1))
                                 : "memory");
                else
                    asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(off), "f"(v0), "f"(v1)
                                 : "memory");
            }
        }
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        asm volatile("bar.sync 1, 256;\n" ::: "memory");
        if (issuer) {
            tma_store2d(mC, buf, n0 + ch * CW, m0);
            bulk_commit();
        }
    }
    if constexpr (TAIL > 0) {
        const tk_i64 r = m0 + rl;
        if constexpr (OUT16)
            store_acc_h4<TAIL>(acc + NCH * CW / 2, (unsigned short *)C, ldc, M, N, r,
                               n0 + NCH * CW, lane);
        else
            store_acc_regs<TAIL, false, true>(acc + NCH * CW / 2, C, ldc, M, N, r, n0 + NCH * CW,
                                              lane);
    }
}

// The work of one block of the TMA kernel, as segments (tile, first K step,
// end K step). Whole tiles blockIdx.x, + gridDim.x, ... (one when the grid
// has a block per tile, several on a persistent grid); or, stream-K
// (TK_STREAMK), the block's share [b * total / G, (b + 1) * total / G) of the
// total = tiles x KT K steps in tile-major order: a tile cut by a block
// boundary is begun (K step 0 on) by block b, its "owner", and ended by
// block b + 1, which starts with it. The host makes every share at least KT
// steps long, so a tile spans two blocks at most.
struct tk_work {
    tk_i64 tiles, next, end;
    int KT;
    __device__ __forceinline__ void init(tk_i64 tiles_, int KT_)
    {
        tiles = tiles_;
        KT = KT_;
        if (TK_STREAMK) {
            const tk_i64 total = tiles * KT, g = gridDim.x, b = blockIdx.x;
            next = b * total / g;
            end = (b + 1) * total / g;
        } else {
            next = blockIdx.x;
            end = tiles;
        }
    }
    // The next segment; false when the block's work is done.
    __device__ __forceinline__ bool take(tk_i64 &t, int &k0, int &k1, bool &more)
    {
        if (next >= end)
            return false;
        if (TK_STREAMK) {
            t = next / KT;
            k0 = (int)(next - t * KT);
            const tk_i64 left = end - next;
            k1 = left < (tk_i64)(KT - k0) ? k0 + (int)left : KT;
            next += k1 - k0;
        } else {
            t = next;
            k0 = 0;
            k1 = KT;
            next += gridDim.x;
        }
        more = next < end;
        return true;
    }
};

// Stream-K fix-up area (TK_STREAMK): a flag per block (u64), then a partial
// tile per block (256 x NACC floats, thread-major so each warp's stores and
// loads are contiguous). Block b + 1 writes its partial of the tile it
// shares with block b into slot b + 1 and sets flag b + 1 to `tag` (release);
// block b waits for it (acquire), adds it and stores the tile. The tag
// changes with every launch, so flags need no reset; its high word makes a
// NaN as a float, which no partial sum of finite inputs leaves behind.
__device__ __forceinline__ void sk_signal(unsigned long long *flag, unsigned long long tag)
{
    asm volatile("st.release.gpu.global.u64 [%0], %1;\n" ::"l"(flag), "l"(tag) : "memory");
}
__device__ __forceinline__ void sk_wait(const unsigned long long *flag, unsigned long long tag)
{
    unsigned long long v;
    do {
        asm volatile("ld.acquire.gpu.global.u64 %0, [%1];\n" : "=l"(v) : "l"(flag) : "memory");
    } while (v != tag);
}

// Consumer warpgroups 1-2 of gemm_body_tma: wgmma on each full stage, then
// the epilogue, for each segment of the block's work (tk_work). A function
// of its own so that the producer / consumer split is one if / else
// (setmaxnreg applies per branch). Stage s of the ring holds K step `it`
// (counted across the block's segments) when it % STAGES == s, in phase
// (it / STAGES) & 1. Each consumer warpgroup owns BM / 2 rows of the tile:
// MI = BM / 128 blocks of 64 rows, an m64nBNk16 wgmma each per K step of 16
// (the B operand shared), MI x BN / 2 accumulators per thread. 64-row tiles
// (KS, BM = 64) split the K steps instead: warpgroup c takes the steps kt
// with kt - k0 = c mod 2, the whole 64 x BN tile each (one m64nBNk16 wgmma
// per K step of 16: every stage's A and B read from shared memory once,
// where splitting the columns read A twice), and the two partial tiles are
// summed through the free ring at the end, each warpgroup keeping half of
// the columns for the epilogue.
template <int BM, int BN, int STAGES, bool AK, bool BKM, bool OUT16, bool VEC, bool SWAP>
__device__ __forceinline__ void consume_tma(unsigned sbase, unsigned bars, int KT, tk_i64 M,
                                            tk_i64 N, tk_i64 tiles_m, tk_i64 tiles_n, tk_i64 ldc,
                                            void *C, const tk_tmap *mC, void *skw,
                                            unsigned long long tag)
{
    constexpr bool KS = BM == 64;
    constexpr int BK = 64, MI = KS ? 1 : BM / 128;
    constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2, STAGE_BYTES = A_BYTES + B_BYTES;
    constexpr int NACC1 = BN / 2, NACC = MI * NACC1;
    // The epilogue's share of a warpgroup: RW rows by EW columns.
    constexpr int RW = KS ? 64 : BM / 2, EW = KS ? BN / 2 : BN;
    static_assert(BM == 64 || BM == 128 || BM == 256, "TMA tile height");
    static_assert(!KS || (!TK_EPI_TMA && !TK_STREAMK && TK_CLUSTER == 1),
                  "64-row tiles: a block per tile, register or staged epilogue");
    static_assert(!KS || BN % 16 == 0, "64-row tiles: each warpgroup stores half of the columns");
    static_assert(BM == 128 || (!TK_EPI_TMA && !TK_STREAMK), "256-row tiles: register or staged epilogue");
    static_assert(!SWAP || (!TK_EPI_TMA && !TK_STREAMK && !TK_SPLITK), "swapped tiles: plain grid");
    static_assert(TK_CLUSTER == 1 || (TK_CLUSTER == 2 && !TK_STREAMK && !TK_SPLITK),
                  "clusters of two, a block per tile");
    const int tid = threadIdx.x;
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    const int cw = (tid >> 7) - 1;
    const int lane = tid & 31, warp_in_wg = (tid >> 5) & 3;
    tk_work work;
    work.init(tma_grid_tiles(tiles_m, tiles_n), KT);
    int it = 0, chunk = 0;
    tk_i64 t;
    int k0, k1;
    bool more;
    while (work.take(t, k0, k1, more)) {
        tk_i64 tm, tn;
        bool phantom;
        tma_tile_of(t, tiles_m, tiles_n, &tm, &tn, &phantom);
        const int m0 = tile_origin(tm, BM, M), n0 = tile_origin(tn, BN, N);
        float acc[NACC];
#pragma unroll
        for (int i = 0; i < NACC; ++i)
            acc[i] = 0.f;
        // KS: this warpgroup's steps are k0 + cw, k0 + cw + 2, ...; step kt
        // is the block's step number it + kt - k0 (the producer's order).
        const int kstep = KS ? 2 : 1, kfirst = k0 + (KS ? cw : 0);
        int mine = -1; // the block's step number of this warpgroup's last step
        for (int kt = kfirst; kt < k1; kt += kstep) {
            const int i = it + (kt - k0);
            const int s = i % STAGES;
            bar_wait(bars + 8 * s, (i / STAGES) & 1);
            const unsigned sa = sbase + s * STAGE_BYTES, sb = sa + A_BYTES;
            fence_regs<NACC>(acc);
            fence();
#pragma unroll
            for (int kk = 0; kk < BK / 16; ++kk) {
                unsigned long long db;
                if (BKM)
                    db = desc(sb + kk * 32, 16, 1024);
                else
                    db = desc(sb + kk * 16 * 128, BK * 128, 1024);
#pragma unroll
                for (int mi = 0; mi < MI; ++mi) {
                    const int mb = KS ? 0 : cw * MI + mi; // 64-row block of the tile
                    unsigned long long da;
                    if (AK)
                        da = desc(sa + mb * 64 * 128 + kk * 32, 16, 1024);
                    else
                        da = desc(sa + mb * BK * 128 + kk * 16 * 128, BK * 128, 1024);
                    mma<BN, AK ? 0 : 1, BKM ? 0 : 1>(acc + mi * NACC1, da, db);
                }
            }
            commit();
            wait<1>(); // this warpgroup's previous step is done: its stage is free
            fence_regs<NACC>(acc);
            if (mine >= 0 && (tid & 127) == 0) {
                // Cluster: both blocks' copies write this stage, both wait.
                const unsigned empty = bars + 8 * (STAGES + mine % STAGES);
                if (TK_CLUSTER == 1)
                    bar_arrive(empty);
                else
                    for (unsigned r = 0; r < (unsigned)TK_CLUSTER; ++r)
                        bar_arrive_cta(empty, r);
            }
            mine = i;
        }
        it += k1 - k0;
        wait<0>();
        fence_regs<NACC>(acc);
        // More work follows: free the last stage for the producer (already
        // loading it); the last segment's stage is never waited for.
        if (more && mine >= 0 && (tid & 127) == 0)
            bar_arrive(bars + 8 * (STAGES + mine % STAGES));
        if constexpr (KS) {
            // The host gives 64-row tiles a block per tile (no `more`): both
            // warpgroups are past their last wgmma, the producer past its
            // last copy, and the ring is free. Warpgroup 0 keeps columns
            // [0, BN / 2), 1 the rest: each leaves the other half in the ring
            // (thread-major, conflict-free) and adds the half it receives;
            // its half ends in acc[0, NACC / 2).
            constexpr int H = NACC / 2;
            if (more)
                __trap();
            const int ct = tid & 127;
            const unsigned give = sbase + (unsigned)(cw * H * 128 * 4);
            const unsigned take = sbase + (unsigned)((1 - cw) * H * 128 * 4);
            asm volatile("bar.sync 1, 256;\n" ::: "memory");
#pragma unroll
            for (int e = 0; e < H; ++e) {
                const float v = cw == 0 ? acc[H + e] : acc[e];
                asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(give + (unsigned)((e * 128 + ct) * 4)),
                             "f"(v)
                             : "memory");
            }
            asm volatile("bar.sync 1, 256;\n" ::: "memory");
#pragma unroll
            for (int e = 0; e < H; ++e) {
                float v;
                asm volatile("ld.shared.f32 %0, [%1];\n"
                             : "=f"(v)
                             : "r"(take + (unsigned)((e * 128 + ct) * 4))
                             : "memory");
                acc[e] = (cw == 0 ? acc[e] : acc[H + e]) + v;
            }
        }
        if (TK_STREAMK) {
            unsigned long long *flags = (unsigned long long *)skw;
            float *part = (float *)((char *)skw + 8 * (tk_i64)gridDim.x);
            const int ct = tid - 128;
            if (k0 > 0) {
                // The end of a tile block b - 1 owns: hand the partial over.
                float *slot = part + (tk_i64)blockIdx.x * 256 * NACC;
#pragma unroll
                for (int i = 0; i < NACC; ++i)
                    asm volatile("st.global.cg.f32 [%0], %1;\n" ::"l"(slot + i * 256 + ct),
                                 "f"(acc[i])
                                 : "memory");
                __threadfence();
                asm volatile("bar.sync 1, 256;\n" ::: "memory");
                if (tid == 128)
                    sk_signal(flags + blockIdx.x, tag);
                continue;
            }
            if (k1 < KT) {
                // Owner of a tile block b + 1 ends: add its partial.
                if (tid == 128)
                    sk_wait(flags + blockIdx.x + 1, tag);
                asm volatile("bar.sync 1, 256;\n" ::: "memory");
                const float *slot = part + ((tk_i64)blockIdx.x + 1) * 256 * NACC;
#pragma unroll
                for (int i = 0; i < NACC; ++i) {
                    float v;
                    asm volatile("ld.global.cg.f32 %0, [%1];\n"
                                 : "=f"(v)
                                 : "l"(slot + i * 256 + ct)
                                 : "memory");
                    acc[i] += v;
                }
            }
        }
        if (phantom)
            continue; // a cluster's missing tile (tma_tile_of): nothing to store
        // This warpgroup's share: RW rows from row0 by EW columns from col0;
        // its first accumulator's row in 64-row block mi: rbase + 64 mi.
        const tk_i64 row0 = m0 + (KS ? 0 : cw * (BM / 2)), col0 = n0 + (KS ? cw * EW : 0);
        const tk_i64 rbase = row0 + warp_in_wg * 16 + (lane >> 2);
        if constexpr (TK_EPI_TMA && BM == 128) {
            store_acc_tma<BN, OUT16>(acc, mC, sbase + STAGES * STAGE_BYTES, chunk, m0, n0, cw,
                                     warp_in_wg, lane, tid, C, ldc, M, N);
            continue;
        }
        constexpr int ES = OUT16 ? 2 : 4;
        // Staging rows (see below): padded so that the stores of a warp hit
        // distinct banks.
        constexpr int STRIDE = SWAP ? RW * ES + 16 : EW * ES + (OUT16 ? 16 : 32);
        constexpr int ROWS = SWAP ? EW : RW;
        constexpr bool STAGE = TK_EPI_SMEM && 2 * ROWS * STRIDE <= STAGES * STAGE_BYTES;
        if (more || !STAGE) {
            // The ring is the producer's (or too small): store from registers.
#pragma unroll
            for (int mi = 0; mi < MI; ++mi) {
                if (!SWAP && OUT16 && VEC && EW % 16 == 0 && ((unsigned long long)C % 8 == 0) &&
                    (ldc % 4 == 0))
                    store_acc_h4<EW>(acc + mi * NACC1, (unsigned short *)C, ldc, M, N,
                                     rbase + 64 * mi, col0, lane);
                else
                    store_acc_regs<EW, OUT16, VEC, SWAP>(acc + mi * NACC1, C, ldc, M, N,
                                                         rbase + 64 * mi, col0, lane);
            }
            continue;
        }
        // The block's last segment: both consumer warpgroups are past their
        // last wgmma (and the producer past its last copy) before either
        // overwrites the ring with its share of the tile, which then leaves
        // as whole 16-byte vectors of C's rows, a warp per 512 bytes.
        // Short-K shapes (grad_b with K = the op's M) are bound by this write:
        // the register layout gives each warp 8 rows x 16-32 bytes per store.
        // Unswapped: the warpgroup's RW rows of EW columns, row padding so
        // that the pair stores of 8 rows hit distinct banks (16 bytes shift
        // 4 banks a row for 4-byte pairs, 32 bytes 8 banks for 8-byte).
        // SWAP: transposed, EW rows (C's rows) of RW columns; a warp's store
        // is 8 consecutive columns of 4 rows 2 apart, which the 16-byte
        // padding puts on distinct banks.
        asm volatile("bar.sync 1, 256;\n" ::: "memory");
        const unsigned st = sbase + cw * ROWS * STRIDE;
        const int rl = warp_in_wg * 16 + (lane >> 2);
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
#pragma unroll
                for (int j = 0; j < EW / 8; ++j) {
                    const int r = rl + 64 * mi + 8 * h, c = j * 8 + (lane & 3) * 2;
                    const float v0 = acc[mi * NACC1 + 4 * j + 2 * h];
                    const float v1 = acc[mi * NACC1 + 4 * j + 2 * h + 1];
                    if (SWAP) {
                        const unsigned off = st + (unsigned)(c * STRIDE + r * ES);
                        if (OUT16) {
                            asm volatile("st.shared.b16 [%0], %1;\n" ::"r"(off),
                                         "h"(tkg::to_h(v0))
                                         : "memory");
                            asm volatile("st.shared.b16 [%0], %1;\n" ::"r"(off + STRIDE),
                                         "h"(tkg::to_h(v1))
                                         : "memory");
                        } else {
                            asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(off), "f"(v0)
                                         : "memory");
                            asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(off + STRIDE), "f"(v1)
                                         : "memory");
                        }
                    } else {
                        const unsigned off = st + (unsigned)(r * STRIDE + c * ES);
                        if (OUT16)
                            asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(off),
                                         "r"(tkg::pack_h2(v0, v1))
                                         : "memory");
                        else
                            asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(off),
                                         "f"(v0), "f"(v1)
                                         : "memory");
                    }
                }
            }
        }
        asm volatile("bar.sync %0, 128;\n" ::"r"(2 + cw) : "memory");
        // Row ROW of the staging holds C row cr0 + ROW from column cc0 on.
        constexpr int COLS = SWAP ? RW : EW; // elements per staging row
        constexpr int CH = COLS * ES / 16, PER = 16 / ES;
        const tk_i64 cr0 = SWAP ? col0 : row0;
        const tk_i64 cc0 = SWAP ? row0 : col0;
        const tk_i64 rlim = SWAP ? N : M, clim = SWAP ? M : N;
        const bool v16 = (SWAP || VEC) && ((unsigned long long)C % 16 == 0) && ((ldc * ES) % 16 == 0);
        for (int i = tid & 127; i < ROWS * CH; i += 128) {
            const int row = i / CH, ch = i % CH;
            const tk_i64 r = cr0 + row, c = cc0 + ch * PER;
            if (r >= rlim)
                break; // rows grow with i
            unsigned x0, x1, x2, x3;
            asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                         : "=r"(x0), "=r"(x1), "=r"(x2), "=r"(x3)
                         : "r"(st + (unsigned)(row * STRIDE + ch * 16))
                         : "memory");
            char *out = (char *)C + (r * ldc + c) * ES;
            if (v16 && c + PER <= clim) {
                *(uint4 *)out = make_uint4(x0, x1, x2, x3);
            } else {
                const unsigned xs[4] = {x0, x1, x2, x3};
#pragma unroll
                for (int e = 0; e < PER; ++e) {
                    if (c + e >= clim)
                        break;
                    if (OUT16)
                        ((unsigned short *)out)[e] = (unsigned short)(xs[e / 2] >> (16 * (e % 2)));
                    else
                        ((unsigned *)out)[e] = xs[e];
                }
            }
        }
    }
    if (TK_EPI_TMA && tid == 128)
        bulk_wait_all(); // the staging buffers live until the stores have read them
}

// Producer and consumers of gemm_body_tma once the barriers are set up.
template <int BM, int BN, int STAGES, bool AK, bool BKM, bool OUT16, bool VEC, bool SWAP>
__device__ __forceinline__ void gemm_loop_tma(const tk_tmap *mA, const tk_tmap *mB,
                                              const tk_tmap *mC, void *C, tk_i64 M, tk_i64 N,
                                              tk_i64 ldc, void *skw, unsigned long long tag,
                                              unsigned sbase, unsigned bars, int kt0, int KT)
{
    constexpr int BK = 64;
    constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2, STAGE_BYTES = A_BYTES + B_BYTES;
    const int tid = threadIdx.x;
    const int wg = tid >> 7;
    const tk_i64 tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
        if (tid == 0) {
            tk_work work;
            work.init(tma_grid_tiles(tiles_m, tiles_n), KT);
            const unsigned rank = TK_CLUSTER > 1 ? cluster_rank() : 0u;
            int it = 0;
            tk_i64 t;
            int k0, k1;
            bool more;
            while (work.take(t, k0, k1, more)) {
                tk_i64 tm, tn;
                bool phantom;
                tma_tile_of(t, tiles_m, tiles_n, &tm, &tn, &phantom);
                const int m0 = tile_origin(tm, BM, M), n0 = tile_origin(tn, BN, N);
                for (int kt = k0; kt < k1; ++kt, ++it) {
                    const int s = it % STAGES;
                    if (it >= STAGES) // the consumers released step it - STAGES
                        bar_wait(bars + 8 * (STAGES + s), ((it / STAGES) - 1) & 1);
                    const unsigned full = bars + 8 * s;
                    bar_expect(full, STAGE_BYTES); // whole boxes count, zero-filled parts too
                    const unsigned sa = sbase + s * STAGE_BYTES, sb = sa + A_BYTES;
                    const int kc = (kt0 + kt) * BK;
                    if (TK_CLUSTER > 1) {
                        // A in 64-row boxes of 8 KiB (K-major: 64 x 64 boxes,
                        // the host's map), this block's half of them sent
                        // to both blocks; the barrier counts all of them.
                        constexpr int PER = BM / 64 / TK_CLUSTER;
                        constexpr unsigned short ALL = (1u << TK_CLUSTER) - 1;
                        for (int b = (int)rank * PER; b < ((int)rank + 1) * PER; ++b) {
                            const int r = m0 + 64 * b;
                            tma_load2d(sa + b * 8192, mA, AK ? kc : r, AK ? r : kc, full, ALL);
                        }
                    } else if (AK)
                        // boxes of 128 rows (64: the host's map for 64-row tiles)
                        for (int b = 0; b < (BM + 127) / 128; ++b)
                            tma_load2d(sa + b * 128 * 128, mA, kc, m0 + 128 * b, full);
                    else
                        for (int b = 0; b < BM / 64; ++b)
                            tma_load2d(sa + b * BK * 128, mA, m0 + 64 * b, kc, full);
                    if (BKM)
                        tma_load2d(sb, mB, kc, n0, full);
                    else
                        for (int b = 0; b < BN / 64; ++b)
                            tma_load2d(sb + b * BK * 128, mB, n0 + 64 * b, kc, full);
                }
            }
        }
    } else {
        consume_tma<BM, BN, STAGES, AK, BKM, OUT16, VEC, SWAP>(sbase, bars, KT, M, N, tiles_m,
                                                               tiles_n, ldc, C, mC, skw, tag);
    }
}

// Dynamic shared memory: STAGES * (BM + BN) * 64 * 2 + 2048 bytes (1 KiB of
// alignment slack, then the barriers), + 32 KiB of staging with TK_EPI_TMA.
// 384 threads. BN a multiple of 64 when B is N-major (its boxes are 64
// columns wide), of 16 when K-major.
template <int BM, int BN, int STAGES, bool AK, bool BKM, bool OUT16, bool VEC, bool SWAP>
__device__ __forceinline__ void gemm_body_tma(const tk_tmap *mA, const tk_tmap *mB,
                                              const tk_tmap *mC, void *C, tk_i64 M, tk_i64 N,
                                              tk_i64 K, tk_i64 ldc, void *skw,
                                              unsigned long long tag, unsigned char *smem)
{
    constexpr int BK = 64;
    constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2, STAGE_BYTES = A_BYTES + B_BYTES;
    static_assert(BKM ? BN % 16 == 0 : BN % 64 == 0, "TMA tile width");
    const int tid = threadIdx.x;
    const tk_i64 tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    const unsigned sbase = (tkg::smem_u32(smem) + 1023u) & ~1023u;
    // full[s] at bars + 8 s (one arrival: the producer's expect_tx), empty[s]
    // at bars + 8 (STAGES + s) (one arrival per consumer warpgroup of every
    // block of the cluster: all of them read what the stage's copies wrote;
    // 64-row tiles: one, the warpgroup whose K step it held).
    const unsigned bars = sbase + STAGES * STAGE_BYTES + (TK_EPI_TMA ? 32768u : 0u);
    int kt0, KT;
    tk_gemm_k_range((int)((K + BK - 1) / BK), &kt0, &KT);
    if (tid == 0) {
        // The tensor maps (kernel parameters) into the descriptor cache
        // before the first copy needs them.
        asm volatile("prefetch.tensormap [%0];\n" ::"l"((unsigned long long)mA) : "memory");
        asm volatile("prefetch.tensormap [%0];\n" ::"l"((unsigned long long)mB) : "memory");
        if (TK_EPI_TMA)
            asm volatile("prefetch.tensormap [%0];\n" ::"l"((unsigned long long)mC) : "memory");
        for (int s = 0; s < STAGES; ++s) {
            bar_init(bars + 8 * s, 1);
            bar_init(bars + 8 * (STAGES + s), (BM == 64 ? 1 : 2) * TK_CLUSTER);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    if constexpr (TK_CLUSTER > 1) {
        // The host sizes the grid to the pairs (tma_grid_tiles): no block
        // leaves early, and each leaves only with its partner (below).
        cluster_sync();
    } else {
        __syncthreads();
        if (!TK_STREAMK && (tk_i64)blockIdx.x >= tiles_m * tiles_n)
            return;
    }
#if defined(TK_PDL) && TK_PDL
    // Launched with programmatic dependent launch: this block may start while
    // the stream's previous kernel finishes (its set-up above touches only
    // shared memory and the parameters). Wait for that kernel (and its
    // memory) before touching global memory, and let the next kernel be
    // launched as soon as every block of this one is running.
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
    gemm_loop_tma<BM, BN, STAGES, AK, BKM, OUT16, VEC, SWAP>(mA, mB, mC, C, M, N, ldc, skw, tag,
                                                             sbase, bars, kt0, KT);
    if constexpr (TK_CLUSTER > 1)
        cluster_sync();
}

} // namespace tkw
#endif /* __CUDA_ARCH_FEAT_SM90_ALL */

#ifndef TK_GEMM_NO_ENTRY
#if defined(TK_WGMMA) && TK_WGMMA == 2
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
static_assert(sizeof(char) == 0, "TK_WGMMA needs the sm_90a target (--gpu-architecture=sm_90a)");
#endif
// Dynamic shared memory: TK_STAGES * (TK_BM + TK_BN) * 64 * 2 + 2048 bytes,
// + 32768 with TK_EPI_TMA (the staging buffers). mC: tensor map of C (boxes
// of 128 bytes x 128 rows) with TK_EPI_TMA, unused otherwise.
// TK_STREAMK: skw is the fix-up area (a flag and a partial tile per block)
// and tag this launch's flag value; unused otherwise.
static_assert(!(TK_EPI_TMA && TK_SPLITK), "the TMA-store epilogue writes C, not split partials");
static_assert(!(TK_STREAMK && TK_SPLITK), "stream-K and split-K do not combine");
#if TK_CLUSTER > 1
#define TK_GEMM_CLUSTER_DIMS __cluster_dims__(TK_CLUSTER, 1, 1)
#else
#define TK_GEMM_CLUSTER_DIMS
#endif
extern "C" __global__ void TK_GEMM_CLUSTER_DIMS __launch_bounds__(384, 1)
    tk_gemm_f16(const __grid_constant__ tk_tmap mA, const __grid_constant__ tk_tmap mB,
                const __grid_constant__ tk_tmap mC, void *C, tk_i64 M, tk_i64 N, tk_i64 K,
                tk_i64 ldc, void *skw, unsigned long long tag)
{
    extern __shared__ __align__(1024) unsigned char tk_gemm_smem[];
    tk_gemm_baked(M, N, K);
    if (TK_SPLITK)
        C = (float *)C + (tk_i64)blockIdx.y * M * ldc;
    tkw::gemm_body_tma<TK_BM, TK_BN, TK_STAGES, TK_A_KMAJOR != 0, TK_B_KMAJOR != 0,
                       TK_OUT_F16 != 0 && !TK_SPLITK, TK_VEC_OUT != 0, TK_SWAP != 0>(
        &mA, &mB, &mC, C, M, N, K, ldc, skw, tag, tk_gemm_smem);
}
#elif defined(TK_WGMMA)
// A compile error, not a kernel that silently does nothing, on a wrong target.
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
static_assert(sizeof(char) == 0, "TK_WGMMA needs the sm_90a target (--gpu-architecture=sm_90a)");
#endif
static_assert(TK_ALIGNED, "TK_WGMMA needs TK_ALIGNED=1 (16-byte cp.async loads)");
static_assert(!TK_SPLITK, "split-K runs on the TMA and mma.sync kernels only");
// Dynamic shared memory: TK_STAGES * (128 + TK_BN) * 64 * 2 + 1024 bytes.
extern "C" __global__ void __launch_bounds__(256, 1)
    tk_gemm_f16(const void *A, const void *B, void *C, tk_i64 M, tk_i64 N, tk_i64 K, tk_i64 lda,
                tk_i64 ldb, tk_i64 ldc)
{
    extern __shared__ __align__(1024) unsigned char tk_gemm_smem[];
    tk_gemm_baked(M, N, K);
    tkw::gemm_body<128, TK_BN, 64, TK_STAGES, TK_A_KMAJOR != 0, TK_B_KMAJOR != 0, TK_OUT_F16 != 0,
                   TK_VEC_OUT != 0>((const unsigned short *)A, (const unsigned short *)B, C, M, N,
                                    K, lda, ldb, ldc, tk_gemm_smem);
}
#else
extern "C" __global__ void __launch_bounds__(TK_WM *TK_WN * 32)
    tk_gemm_f16(const void *A, const void *B, void *C, tk_i64 M, tk_i64 N, tk_i64 K, tk_i64 lda,
                tk_i64 ldb, tk_i64 ldc)
{
    extern __shared__ __align__(128) unsigned char tk_gemm_smem[];
    tk_gemm_baked(M, N, K);
    if (TK_SPLITK)
        C = (float *)C + (tk_i64)blockIdx.y * M * ldc;
    tkg::gemm_body<TK_BM, TK_BN, TK_BK, TK_WM, TK_WN, TK_STAGES, TK_A_KMAJOR != 0, TK_B_KMAJOR != 0,
                   TK_OUT_F16 != 0 && !TK_SPLITK, TK_ALIGNED != 0, TK_VEC_OUT != 0>(
        (const unsigned short *)A, (const unsigned short *)B, C, M, N, K, lda, ldb, ldc,
        tk_gemm_smem);
}
#endif /* TK_WGMMA */
#endif /* TK_GEMM_NO_ENTRY */

#else /* TK_GEMM_AMD || TK_GEMM_SIMPLE */
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

#endif /* TK_GEMM_AMD || TK_GEMM_SIMPLE */

#ifdef TK_GEMM_REDUCE
/* ======================================================================
 * Split-K reduction (NVIDIA): C[r,c] = sum over s = 0..splits-1, in that
 * order, of W[s][r][c] (fp32 workspace, M rows of N), converted to the output
 * type (TK_OUT_F16) and stored with ldc. The fixed order gives the same bits
 * on every run. Four consecutive elements per thread, grid-stride; where N
 * is a multiple of 4 they lie in one row, every split's four are loaded
 * before the sum (up to TK_REDUCE_UNROLL loads in flight) and C takes one
 * 16-byte (fp32) or 8-byte (fp16) store when its alignment allows.
 * On sm_90 the host may launch it with programmatic dependent launch after
 * the split kernel: griddepcontrol.wait then holds it until the partials are
 * written (and is a no-op otherwise). It does not let the next kernel start
 * early (griddepcontrol.launch_dependents): with that, the next GEMM's split
 * grid of one wave ran 1.4x slower (H100, grad_a 1024x50304x1024: 688 ->
 * 505 TF/s; cause not known). */
#ifndef TK_REDUCE_UNROLL
#define TK_REDUCE_UNROLL 8
#endif
template <typename I>
__device__ __forceinline__ void tk_reduce_quads(const float *__restrict__ W, void *C, I M, I N,
                                                I ldc, int splits)
{
    const I total = M * N;
    const I step = (I)gridDim.x * blockDim.x * 4;
    const bool vec = (N & 3) == 0;
#if TK_OUT_F16
    const bool vst = vec && ((unsigned long long)C % 8 == 0) && (ldc & 3) == 0;
#else
    const bool vst = vec && ((unsigned long long)C % 16 == 0) && (ldc & 3) == 0;
#endif
    for (I i = ((I)blockIdx.x * blockDim.x + threadIdx.x) * 4; i < total; i += step) {
        float v[4] = {0.f, 0.f, 0.f, 0.f};
        if (vec) {
            // i % 4 == 0 and N % 4 == 0: the four share row i / N.
            for (int s0 = 0; s0 < splits; s0 += TK_REDUCE_UNROLL) {
                float4 w[TK_REDUCE_UNROLL];
#pragma unroll
                for (int u = 0; u < TK_REDUCE_UNROLL; ++u)
                    if (s0 + u < splits)
                        asm("ld.global.cs.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                            : "=f"(w[u].x), "=f"(w[u].y), "=f"(w[u].z), "=f"(w[u].w)
                            : "l"(W + (I)(s0 + u) * total + i));
#pragma unroll
                for (int u = 0; u < TK_REDUCE_UNROLL; ++u)
                    if (s0 + u < splits) {
                        v[0] += w[u].x;
                        v[1] += w[u].y;
                        v[2] += w[u].z;
                        v[3] += w[u].w;
                    }
            }
            const I r = i / N, c = i - r * N;
            if (vst) {
#if TK_OUT_F16
                unsigned short h[4];
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    asm("cvt.rn.f16.f32 %0, %1;\n" : "=h"(h[e]) : "f"(v[e]));
                *(uint2 *)((unsigned short *)C + r * ldc + c) =
                    make_uint2((unsigned)h[0] | ((unsigned)h[1] << 16),
                               (unsigned)h[2] | ((unsigned)h[3] << 16));
#else
                *(float4 *)((float *)C + r * ldc + c) = make_float4(v[0], v[1], v[2], v[3]);
#endif
                continue;
            }
        } else {
            const int n = total - i < 4 ? (int)(total - i) : 4;
            for (int s = 0; s < splits; ++s)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    if (e < n)
                        v[e] += W[(I)s * total + i + e];
        }
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            if (i + e >= total)
                break;
            const I r = (i + e) / N, c = (i + e) - r * N;
#if TK_OUT_F16
            unsigned short h;
            asm("cvt.rn.f16.f32 %0, %1;\n" : "=h"(h) : "f"(v[e]));
            ((unsigned short *)C)[r * ldc + c] = h;
#else
            ((float *)C)[r * ldc + c] = v[e];
#endif
        }
    }
}

extern "C" __global__ void __launch_bounds__(256)
    tk_gemm_f16(const float *__restrict__ W, void *C, tk_i64 M, tk_i64 N, tk_i64 ldc, int splits)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    // 32-bit index arithmetic where every index fits (the divisions are the
    // kernel's main cost after the loads)
    if ((tk_i64)splits * M * N + (tk_i64)gridDim.x * blockDim.x * 4 < 0x7fffffffLL &&
        (M - 1) * ldc + N < 0x7fffffffLL)
        tk_reduce_quads<int>(W, C, (int)M, (int)N, (int)ldc, splits);
    else
        tk_reduce_quads<tk_i64>(W, C, M, N, ldc, splits);
}
#endif /* TK_GEMM_REDUCE */
