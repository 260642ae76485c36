// fp16 GEMM with fp32 accumulation: the three layouts of the origin's GEMM
// kernels (forward, grad_a, grad_b) behind one entry point, tk_gemm_f16.
//
// The host (src/ops/gemm/) maps every op onto one formulation,
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
//                                          C + blockIdx.y * M * N (a
//                                          workspace, ldc = N; swapped TMA
//                                          tiles: transposed, ldc = M);
//                                          TK_OUT_F16 is ignored;
//                                          2 (TMA kernel): the TK_KSPLITS
//                                          blocks of a tile's K shares run as
//                                          one cluster (__cluster_dims__(1,
//                                          TK_KSPLITS, 1)) and sum their
//                                          partials through distributed shared
//                                          memory, each storing a slice of C
//                                          (no workspace, no reduce kernel;
//                                          tma_wgmma.cuh, kcl_store)
//   TK_KSPLITS (with TK_SPLITK 2)          the split factor, 2 to 8
//   TK_SWAP (optional, TMA kernel)         the host swapped the operands to
//                                          compute C^T = B^T A^T (the token
//                                          count on the kernel's N, where the
//                                          tile width is free in steps of 8):
//                                          kernel element (m, n) is stored at
//                                          C[n*ldc + m]
//   TK_BM (TMA kernel)                     64, 128 or 256 rows (256: two
//                                          64-row wgmmas per consumer
//                                          warpgroup; 64: the warpgroups take
//                                          alternate K steps of the whole
//                                          tile, summed at the end; a block
//                                          per tile)
//   TK_KS_ONE (optional, TK_BM 64)         1: one consumer warpgroup takes
//                                          every K step of the 64-row tile,
//                                          the other only stores half of it
//   TK_CLUSTER (optional, TMA kernel)      2: blocks run in clusters of two
//                                          (__cluster_dims__) on the two tiles
//                                          of one tile row side by side; each
//                                          loads half of the A tile it shares
//                                          with its partner and multicasts it
//                                          to both (one grid block per tile);
//                                          4: clusters of 2 x 2 tiles, A shared
//                                          along each tile row and B along each
//                                          tile column the same way
//   TK_CLUSTER_ROWS (optional, with 2)     1: the pairs are two row tiles of
//                                          one tile column, sharing B the
//                                          same way (64-row tiles too)
//   TK_PINGPONG (optional, TMA kernel)     1: the consumer warpgroups take
//                                          alternate tiles of 128 rows of a
//                                          persistent grid, one storing while
//                                          the other computes (tma_wgmma.cuh,
//                                          consume_pp)
//   TK_PDL (optional, TMA kernel; skinny   launched with programmatic dependent
//   and small-K kernels on sm_90)          launch: waits for the previous kernel
//                                          (griddepcontrol.wait) first
//   TK_GEMM_SKINNY (NVIDIA, sm_80+)        instead of the tiled kernels, N <= 8
//                                          (the router), one pass over A: 1 the
//                                          forward (A K-major), 2 the weight
//                                          gradient (A M-major, a block per 8
//                                          values of m), 3 the weight gradient
//                                          split over the tokens (sm_90; fp32
//                                          planes for the reduce kernel)
//   TK_SKS_CL (with TK_GEMM_SKINNY 3)      splits a cluster adds through
//                                          distributed shared memory (4)
//   TK_GEMM_SMALLK (NVIDIA)                instead of the tiled kernels: a
//                                          reduction of K <= 16 (the router's
//                                          grad_a, grad_b of a few tokens),
//                                          bound by the write of C
//   TK_GEMM_REDUCE                         instead of the GEMM: the split-K
//                                          reduction kernel (gemm/reduce.cuh)
//   TK_GEMM_PAD                            instead of the GEMM: the staging
//                                          copy of an operand whose rows are
//                                          not 16-byte aligned (gemm/pad.cuh)
//
// Every size is handled: loads are predicated with zero fill, stores guarded.
// Offsets are 64-bit.
//
// This file holds the defines and the entry points of the tiled kernels; each
// kernel family is in kernel_src/gemm/ (included below; the build embeds them
// and the engine inlines them, so the cache key covers their text):
//   common.cuh         helpers of every family (split-K range, baked sizes)
//   nv_common.cuh      NVIDIA helpers (cp.async, ldmatrix, mma.sync, swizzle)
//   mma_sync.cuh       the mma.sync kernel (sm_80+)
//   skinny.cuh         N <= 8: the forward and the weight gradient (TK_GEMM_SKINNY)
//   smallk.cuh         reductions of K <= 16 (TK_GEMM_SMALLK)
//   wgmma.cuh          sm_90a warpgroup-MMA helpers of both wgmma kernels
//   cpasync_wgmma.cuh  the wgmma kernel fed by cp.async (TK_WGMMA=1)
//   tma_wgmma.cuh      the TMA wgmma kernel and its forms (TK_WGMMA=2)
//   portable.cuh       AMD (MFMA, portable) and NVIDIA below sm_80
//   reduce.cuh         the split-K reduction (TK_GEMM_REDUCE)
//   pad.cuh            the staging copy of unaligned operands (TK_GEMM_PAD)

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
#ifndef TK_KSPLITS
#define TK_KSPLITS 1
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
#ifndef TK_CLUSTER_ROWS
#define TK_CLUSTER_ROWS 0
#endif
#ifndef TK_PINGPONG
#define TK_PINGPONG 0
#endif
#ifndef TK_KS_ONE
#define TK_KS_ONE 0
#endif
#if (defined(TK_GEMM_REDUCE) || defined(TK_GEMM_SKINNY) || defined(TK_GEMM_SMALLK) ||              \
     defined(TK_GEMM_PAD)) &&                                                                     \
    !defined(TK_GEMM_NO_ENTRY)
#define TK_GEMM_NO_ENTRY 1
#endif

#include "gemm/common.cuh"
#include "pdl.cuh"

#if defined(__HIP__) || defined(__HIPCC_RTC__) || defined(__HIP_DEVICE_COMPILE__)
#define TK_GEMM_AMD 1
#else
#define TK_GEMM_AMD 0
#endif

#if !TK_GEMM_AMD && !defined(TK_GEMM_SIMPLE)

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

#include "gemm/nv_common.cuh"
#include "gemm/mma_sync.cuh"

#if defined(TK_GEMM_SKINNY) && defined(TK_GEMM_NO_ENTRY)
#include "gemm/skinny.cuh"
#endif /* TK_GEMM_SKINNY */

#if defined(TK_GEMM_SMALLK) && defined(TK_GEMM_NO_ENTRY)
#include "gemm/smallk.cuh"
#endif /* TK_GEMM_SMALLK */

#include "gemm/wgmma.cuh"
#include "gemm/cpasync_wgmma.cuh"
#include "gemm/tma_wgmma.cuh"

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
static_assert(TK_SPLITK != 2 ||
                  (TK_KSPLITS >= 2 && TK_KSPLITS <= 8 && TK_CLUSTER == 1 && !TK_PINGPONG),
              "split-K in a cluster: 2 to 8 blocks of one tile, no other cluster, no ping-pong");
#if TK_CLUSTER > 1
#define TK_GEMM_CLUSTER_DIMS __cluster_dims__(TK_CLUSTER, 1, 1)
#elif TK_SPLITK == 2
#define TK_GEMM_CLUSTER_DIMS __cluster_dims__(1, TK_KSPLITS, 1)
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
    if (TK_SPLITK == 1) // planes of M x N (swapped: stored transposed, ldc = M)
        C = (float *)C + (tk_i64)blockIdx.y * M * N;
    tkw::gemm_body_tma<TK_BM, TK_BN, TK_STAGES, TK_A_KMAJOR != 0, TK_B_KMAJOR != 0,
                       TK_OUT_F16 != 0 && TK_SPLITK != 1, TK_VEC_OUT != 0, TK_SWAP != 0>(
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
    static_assert(TK_SPLITK != 2, "split-K in a cluster runs on the TMA kernel only");
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
#include "gemm/portable.cuh"

#endif /* TK_GEMM_AMD || TK_GEMM_SIMPLE */

#ifdef TK_GEMM_REDUCE
#include "gemm/reduce.cuh"
}
#endif /* TK_GEMM_REDUCE */

#ifdef TK_GEMM_PAD
#include "gemm/pad.cuh"
#endif /* TK_GEMM_PAD */
