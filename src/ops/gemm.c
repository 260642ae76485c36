/*
 * fp16 GEMM operators (forward, grad_a, grad_b) and their CPU references.
 *
 * Every op is mapped onto one formulation, C[m,n] = sum_k A(m,k) B(k,n), of
 * the kernel in kernel_src/gemm_f16.cu, which reads each operand either
 * K-contiguous or transposed (see that file). The specialiser picks a block
 * tile from the shape (tile table below, measured on an H100: see
 * bench/NOTES-gemm.md) and bakes it, the layout, the alignment facts and,
 * under the exact policy, the shape itself as defines.
 *
 * Policies: exact bakes M, N, K (one compile per shape, the compiler folds
 * the bounds); stable (the default) bakes the two weight dimensions, N and K
 * of the op, and passes the token count M at run time (in kernel terms: the
 * kernel's M for forward and grad_a, the reduction length for grad_b);
 * generic passes all three at run time. Under stable and generic the set of
 * kernels for given N and K is fixed: the variant (tile, wgmma or mma.sync,
 * split-K or not, 64 to 256 columns) is a function of the shape, so the
 * token counts fall into a few classes, one kernel each (tk_op_precompile
 * compiles every class). The variant choice is the same under all policies.
 *
 * Fallback (TK_BUILD_ASYNC): while a call's kernel is being built, the call
 * runs on the "universal" kernel of its layout: mma.sync with 64x64 tiles,
 * nothing baked, no split, the call's alignment variant (the scalar AMD /
 * portable kernel on those targets), which serves any shape. One per layout
 * and alignment class, compiled once (a wait, the first time ever) and
 * shared by every N and K.
 *
 * Split-K (NVIDIA, sm_80 and up): shapes with too few output tiles for the
 * chip and a long reduction run gridDim.y = splits block rows, each summing
 * its share of the K tiles into an fp32 workspace [splits][M][N] (the
 * context's operator workspace, src/ops/embedding.c); a second kernel
 * (TK_GEMM_REDUCE) sums the splits in a fixed order and converts to the
 * output type, so results are the same on every run. On sm_90 those shapes
 * take the TMA wgmma kernel with 128x128 tiles (M, N >= 128), else the mma.sync
 * tile. plan_split holds the model.
 *
 * Alignment: fp16 operands need 2-byte aligned pointers and the fp32 output
 * 4-byte ones (TK_MISALIGNED otherwise). The fast variant's 16-byte cp.async
 * loads need both inputs 16-byte aligned with leading dimensions multiple of
 * 8; anything else gets the scalar-load variant of the same kernel (slower,
 * never an error).
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops_internal.h"

/* NVIDIA tile configurations; index 0 is the large one. */
typedef struct gemm_tile {
    int bm, bn, bk, wm, wn, stages;
} gemm_tile;

/* Above 48 KiB of dynamic shared memory the engine's launch raises the
 * function's limit first (once per kernel). 4 stages on the large tile: 5%
 * over 3 on an H100 (bench/NOTES-gemm.md). */
static const gemm_tile nv_tiles[] = {
    {128, 128, 32, 2, 2, 4}, /* enough 128x128 tiles to fill the chip: 64 KiB */
    {64, 64, 32, 2, 2, 4},   /* mid sizes (~1024^2 outputs, K <= 2048): 32 KiB */
    {32, 64, 64, 1, 2, 4},   /* few output tiles, long K: 48 KiB */
    {16, 128, 32, 1, 4, 4},  /* one 16-row strip of tokens: 36 KiB */
};

/* 1: the sm_90a wgmma kernel loads through the bulk tensor copy engine (TMA,
 * warp-specialised, tensor maps built per call; TK_WGMMA=2 in the kernel),
 * 0: through cp.async (TK_WGMMA=1). On an H100 (2026-11-22, bench/ops, cuBLAS
 * in the same run) the TMA kernel ran 0.85-0.97 of cuBLAS at 4096^3 / 8192^3
 * and 0.82-0.98 at 2048^3, against 0.48-0.60 for cp.async; test_gpu_gemm
 * passed with it. Build with -DTK_GEMM_TMA=0 to fall back. */
#ifndef TK_GEMM_TMA
#define TK_GEMM_TMA 1
#endif

/* 1: the TMA kernel is launched with programmatic dependent launch (it may
 * start while the previous kernel of the stream finishes; TK_PDL in the
 * kernel waits for it before touching memory). Build with -DTK_GEMM_PDL=0,
 * or set TOKITAI_JIT_GEMM_PDL=0, to launch it plainly. */
#ifndef TK_GEMM_PDL
#define TK_GEMM_PDL 1
#endif

static int pdl_enabled(void)
{
    static int cached = -1;
    int v = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (v < 0) {
        const char *e = getenv("TOKITAI_JIT_GEMM_PDL");
        v = TK_GEMM_PDL && !(e != NULL && strcmp(e, "0") == 0);
        __atomic_store_n(&cached, v, __ATOMIC_RELAXED);
    }
    return v;
}

/* 1: split-K for few-tile shapes (plan_split); build with -DTK_GEMM_SPLITK=0
 * to turn it off. */
#ifndef TK_GEMM_SPLITK
#define TK_GEMM_SPLITK 1
#endif
#define SPLIT_MAX 16
/* 1: the unsplit TMA kernel's epilogue stores C with the bulk tensor copy
 * engine from two staging buffers (TK_EPI_TMA), overlapping the stores with
 * the next chunk and tile; build with -DTK_GEMM_EPI_TMA=0 to stage through
 * the ring (or registers) and store with st.global. */
#ifndef TK_GEMM_EPI_TMA
#define TK_GEMM_EPI_TMA 1
#endif
/* 1: the forward with N <= 8 runs on the skinny kernel (plan_skinny); build
 * with -DTK_GEMM_SKINNY=0 to keep it on the tiled kernels. */
#ifndef TK_GEMM_SKINNY
#define TK_GEMM_SKINNY 1
#endif
/* 1: the TMA kernel may compute C^T = B^T A^T on swapped tiles where that
 * fits the token count to the chip better (swap_pick_bn); build with
 * -DTK_GEMM_SWAP=0 to keep every call unswapped. */
#ifndef TK_GEMM_SWAP
#define TK_GEMM_SWAP 1
#endif
/* TMA kernel epilogue staged through shared memory (TK_EPI_SMEM in the
 * kernel); build with -DTK_GEMM_EPI_SMEM=0 for the register-pair stores. */
#ifndef TK_GEMM_EPI_SMEM
#define TK_GEMM_EPI_SMEM 1
#endif
/* K tiles per split at least: 16 of 64 (1024 of K) on the TMA kernel, 8 of BK
 * (256-512) on mma.sync. On an H100 (bench/NOTES-gemm.md) 1024^3 split in
 * two 512-long halves on the TMA kernel ran 0.48-0.62 of cuBLAS against
 * 0.63-0.81 unsplit on the mma.sync 64x64 tile; 16x4096x1024 on mma.sync ran
 * better with 256-long splits (1.02 / 1.49) than with 512 (0.77 / 1.31). */
#define SPLIT_MIN_KT_TMA 16
#define SPLIT_MIN_KT_MMA 8
/* fp32 partials kept below this (bytes): beyond it the shape has tiles enough */
#define SPLIT_WS_MAX ((int64_t)64 << 20)

/* The AMD kernel has one fixed 64x64 tile, 256 threads, static LDS. */
#define AMD_TILE 64
#define AMD_THREADS 256u
/* Multiprocessors assumed when sizing tiles (H100/H200: 132). Only steers
 * the tile choice, never correctness. */
#define NV_SMS 132

/* Token counts above this all take the same variant (128-row tiles fill the
 * chip, split-K and swapped tiles are never chosen); below it every value is
 * planned (tk__gemm_precompile). */
#define M_CLASS_LIMIT (NV_SMS * 128 + 1024)

/* One op expressed in the kernel's terms. */
typedef struct gemm_plan {
    const char *op;
    int moving;            /* which kernel dim is the op's M (tokens): 0 = M, 1 = N, 2 = K */
    int64_t M, N, K;       /* kernel's M, N, K */
    int64_t lda, ldb, ldc; /* resolved */
    int a_kmajor, b_kmajor, out_f16;
    int aligned, vec_out;
    int amd;    /* HIP backend: MFMA / portable kernel */
    int simple; /* NVIDIA target below sm_80: portable kernel */
    int sm90;   /* NVIDIA sm_90 (Hopper): the wgmma kernel may serve */
    int wgmma;  /* the sm_90a warpgroup-MMA kernel serves this call */
    int tma;    /* ... in its TMA form (tensor maps as arguments) */
    int wg_bm, wg_bn, wg_stages; /* wg_bm: 128; 64 or 256 on the TMA kernel */
    int swap;    /* tma: the kernel computes C^T = B^T A^T (plan_swap) */
    int skinny;  /* the forward with N <= 8 on its own kernel (plan_skinny) */
    int smallk;  /* K <= SMALLK_K_MAX on its own kernel (plan_smallk) */
    int persist; /* tma: 1 grid of one block per SM at most, each taking tiles in turn;
                  * 2 the same grid sharing the K steps of all tiles (stream-K) */
    int epi_tma; /* tma: the epilogue stores C with the bulk tensor copy engine */
    int cluster; /* tma: 2 clusters of two blocks on adjacent column tiles, each
                  * loading half of their shared A tile for both (TK_CLUSTER);
                  * 0 none */
    int c16;     /* C 16-byte aligned, rows a multiple of 16 bytes apart */
    int splits;  /* > 1: split-K into the workspace, then the reduce kernel */
    gemm_tile tile;
    int64_t om, on, ok; /* the op's own M, N, K (tuning records are keyed on them) */
    int64_t sms;        /* multiprocessors of the device (NV_SMS offline) */
} gemm_plan;

static int ceil_div_gt(int64_t a, int64_t b, int64_t n)
{
    /* ceil(a / b) >= n, without overflow */
    return (a + b - 1) / b >= n;
}

static const gemm_tile *pick_tile(int64_t M, int64_t N, int64_t K)
{
    const int64_t tm = (M + 127) / 128;
    /* 128x128 tiles from 3/4 of a wave: the MoE down projection (M ~ 2048,
     * N 1024, K 2816: 128 tiles) ran 0.37 of cuBLAS on the 32x64 tile. */
    if (tm >= NV_SMS || ceil_div_gt(N, 128, (NV_SMS * 3 / 4 + tm - 1) / tm))
        return &nv_tiles[0];
    if (M <= 16)
        return &nv_tiles[3];
    if (M * N >= (int64_t)768 * 1024 && K <= 2048)
        return &nv_tiles[1];
    return &nv_tiles[2];
}

/* sm_XX number of an NVIDIA target ("sm_90", "sm_90a"); 0 when unknown. */
static int sm_number(const char *target)
{
    if (target == NULL || strncmp(target, "sm_", 3) != 0)
        return 0;
    return atoi(target + 3);
}

static void plan_target(tk_context *ctx, gemm_plan *p)
{
    const char *backend = tk_context_backend_name(ctx);
    p->amd = backend != NULL && strcmp(backend, "hip") == 0;
    p->simple = 0;
    p->sm90 = 0;
    if (!p->amd) {
        int sm = sm_number(tk_context_target(ctx));
        /* mma.m16n8k16 + cp.async need sm_80; an unknown target (stub)
         * takes the tensor-core kernel. */
        p->simple = sm > 0 && sm < 80;
        p->sm90 = sm == 90;
    }
    p->tile = *pick_tile(p->M, p->N, p->K);
    p->sms = tk__ctx_sm_count(ctx);
    if (p->sms <= 0)
        p->sms = NV_SMS;
}

/* TMA kernel tile widths (columns of C per block; 128 rows) and their
 * relative throughput per tile area: the narrower the instruction, the more
 * shared-memory reads of A per MMA; 192 columns leave room for 4 stages
 * only (128: 6). Fitted to tokitai-jit --tune on an H100 (bench/NOTES-gemm.md):
 * the down projection at 4352-5504 tokens ran 3-9% faster on three rounds of
 * 128-wide tiles than on two of 192-wide ones. */
static const int tma_bns[] = {64, 128, 192, 256};
static const double tma_bn_eff[] = {0.70, 0.90, 0.88, 1.0};
#define N_TMA_BNS ((int)(sizeof tma_bns / sizeof tma_bns[0]))

/* Ring stages for a TMA tile: as many as fit (at most 8) beside the
 * barriers in 227 KiB, and beside the TMA-store staging (32 KiB) for
 * 128-row tiles: 8 for 64 columns, 6 for 128, 4 for 192 and 256; 256-row
 * tiles (no TMA store): 4 up to 192 columns. */
static int tma_stages(int bm, int bn)
{
    const int stage = (bm + bn) * 64 * 2;
    const int s = (232448 - 2048 - (bm == 128 ? 32768 : 0)) / stage;
    return s > 8 ? 8 : s;
}

/* The TMA tile width for a kernel M x N on `sms` multiprocessors: least
 * rounds x width / throughput, where rounds = the tiles each multiprocessor
 * takes in turn (wave quantisation). On an H100 cuBLAS sizes its tiles the
 * same way (the ncu profile of bench/sweep, bench/NOTES-gemm.md): grad_b of
 * the MoE experts, a 1024 x 2816 output, takes 8 x 15 tiles of 128 x 192 (one
 * round) where 128 x 256 makes 88 (67% of the chip) and 128 x 128 176
 * (two rounds); a 1024 x 1024 output takes 128 tiles of 128 x 64. Ties go to
 * the wider tile. */
/* K-major B (grad_a; B then comes in one box of BN rows) allows any width
 * in steps of 16: the widths between 128 and 256 that the chip's wave needs
 * (a 1024-wide output cut into 5 to 7 columns of tiles), with this weight
 * (provisional: between 128's and 256's). */
#define TMA_KB_EFF 0.93
/* 64-row tiles, both consumer warpgroups on the whole tile, alternate K
 * steps. Their throughput per area, fitted to tokitai-jit --tune on an H100
 * (cold operands; bench/NOTES-gemm.md, sixth session): about
 * 0.84 x (bn / (64 + bn))^0.6: 0.55 at 64 columns, 0.66 at 128 (128 x 64
 * tiles: 0.70), 0.71 at 192, 0.74 at 256. A tile's time per K step seems to
 * follow the bytes its multiprocessor loads (64 + bn rows of 128 bytes) more
 * than its area: ~100 GB/s per multiprocessor whatever the tile, as
 * estimated from those times (128 x 64, 64 x 128 and 128 x 128 tiles:
 * ~240, ~236 and ~325 ns per K step of 24, 24 and 32 KiB). */
static const double ks_eff_tab[16] = {0.320, 0.435, 0.505, 0.554, 0.590, 0.618, 0.640, 0.659,
                                       0.674, 0.686, 0.697, 0.707, 0.715, 0.722, 0.729, 0.735};
/* (the table: 0.84 x (bn / (64 + bn))^0.6 for bn = 16, 32, ..., 256; no pow
 * on the call path, which plans every call) */
static double ks_eff(int bn)
{
    return ks_eff_tab[bn / 16 - 1];
}

/* Cost of an M x N output in bm x bn tiles of throughput eff per area:
 * rounds (the tiles each multiprocessor takes in turn) x tile area / eff. */
static double wave_cost(int64_t M, int64_t N, int bm, int bn, int64_t sms, double eff)
{
    const int64_t tiles = ((M + bm - 1) / bm) * ((N + bn - 1) / bn);
    return (double)((tiles + sms - 1) / sms) * bm * bn / eff;
}

static int tma_pick_bn(int64_t M, int64_t N, int b_kmajor, int64_t sms, int *bm_out,
                       double *cost_out)
{
    int best = 256;
    double best_cost = 0;
    for (int i = N_TMA_BNS - 1; i >= 0; i--) {
        const double cost = wave_cost(M, N, 128, tma_bns[i], sms, tma_bn_eff[i]);
        if (i == N_TMA_BNS - 1 || cost < best_cost * 0.999) {
            best = tma_bns[i];
            best_cost = cost;
        }
    }
    for (int bn = 240; b_kmajor && bn > 128; bn -= 16) {
        const double cost = wave_cost(M, N, 128, bn, sms, TMA_KB_EFF);
        if (bn != 192 && cost < best_cost * 0.999) {
            best = bn;
            best_cost = cost;
        }
    }
    *bm_out = 128;
    /* 64-row tiles (the warpgroups split the K steps): more, smaller tiles
     * for outputs that leave much of the chip idle in 128-row ones; not for
     * N < 64: boxes of B mostly zero fill, loaded by twice the tiles (fwd
     * 2048 x 8 x 1024: 64 x 64 tiles 7.6 us, 128 x 64 6.2) */
    for (int bn = 256; N >= 64 && bn >= 64; bn -= b_kmajor ? 16 : 64) {
        const double cost = wave_cost(M, N, 64, bn, sms, ks_eff(bn));
        if (cost < best_cost * 0.999) {
            best = bn;
            best_cost = cost;
            *bm_out = 64;
        }
    }
    *cost_out = best_cost;
    return best;
}

/* Swapped tiles (plan_swap): the op's C^T = B^T A^T, its tokens on the
 * kernel's N, where the tile width is free in steps of 16 (B K-major), so
 * that the token count can be cut into as many tiles as fill one round;
 * 256 rows (two 64-row wgmmas per consumer warpgroup) on the other side.
 * cuBLAS fits its tiles the same way on an H100 (bench/NOTES-gemm.md): the
 * down projection at 4284 tokens, a 4284 x 1024 output, ran on 128 tiles of
 * 256 x 136, the 136 on the tokens, where 128-row tiles make two rounds.
 * Throughput per tile area by the wgmma width, from tokitai-jit --tune on an
 * H100 (the down projection at 2944 tokens: 96-wide swapped tiles 28.3 us
 * against 33.0 for 92 tiles of 128 x 256; at 4284, 144-wide ones one round
 * at 0.97 of cuBLAS): 0.76 at 64 columns to 0.94 from 128 on. */
#define SWAP_BN_MIN 64
#define SWAP_BN_MAX 192
/* 128-row swapped tiles: narrower widths, for token counts whose 256-row
 * tiles would leave most of the chip idle. Their throughput weights, from
 * tokitai-jit --tune on an H100 with cold operands (bench/NOTES-gemm.md,
 * fourth session): fwd N=1024 K=2816 at 1152 tokens 120 tiles of 128 x 80
 * in 16.3 us against 18.4 for 72 of 128 x 128; 48 wide at 768 tokens and
 * 32 wide at 512 close to the 128 x 64 tiles. Untested beyond 96. */
#define SWAP128_BN_MIN 32
#define SWAP128_BN_MAX 96
/* 64-row swapped tiles: ks_eff x this (the 128-row swapped tiles ran at
 * 0.83-0.90 of the unswapped ones' weights: the transposed epilogue) */
#define KS_SWAP_EFF 0.85
static double swap_eff(int bm, int bn)
{
    if (bm == 128)
        return bn >= 96 ? 0.72 : bn >= 80 ? 0.66 : bn >= 64 ? 0.58 : bn >= 48 ? 0.50 : 0.375;
    return bn >= 128 ? 0.94 : bn >= 112 ? 0.91 : bn >= 96 ? 0.87 : bn >= 80 ? 0.82 : 0.76;
}

/* Kernel M x N of the swapped plan (M: the op's N, N: its tokens): the
 * tile (256, 128 or 64 rows, width in steps of 16) of least rounds x area /
 * throughput, and that cost. */
static int swap_pick_bn(int64_t M, int64_t N, int64_t sms, int *bm_out, double *cost_out)
{
    int best = 0, best_bm = 256;
    double best_cost = 0;
    for (int bm = 256; bm >= 64; bm /= 2) {
        const int hi = bm == 256 ? SWAP_BN_MAX : bm == 128 ? SWAP128_BN_MAX : 256;
        const int lo = bm == 256 ? SWAP_BN_MIN : SWAP128_BN_MIN;
        for (int bn = hi; bn >= lo; bn -= 16) {
            const double eff = bm == 64 ? KS_SWAP_EFF * ks_eff(bn) : swap_eff(bm, bn);
            const double cost = wave_cost(M, N, bm, bn, sms, eff);
            if (best == 0 || cost < best_cost * 0.999) {
                best = bn;
                best_bm = bm;
                best_cost = cost;
            }
        }
    }
    *bm_out = best_bm;
    *cost_out = best_cost;
    return best;
}

/* Swaps the kernel's operands: C^T[N,M] = B^T A^T. The kernel's A is then
 * the op's B side (A'(n,k) = B(k,n): K-major when B was), its B the op's A
 * side, its M and N exchanged, and its epilogue stores element (m, n) at
 * C[n * ldc + m] (TK_SWAP). Applying it twice restores the plan. */
static void plan_swap(gemm_plan *p)
{
    int64_t t;
    int k;
    t = p->M, p->M = p->N, p->N = t;
    t = p->lda, p->lda = p->ldb, p->ldb = t;
    k = p->a_kmajor, p->a_kmajor = p->b_kmajor, p->b_kmajor = k;
    if (p->moving != 2)
        p->moving = 1 - p->moving;
    p->swap = !p->swap;
}

/* Swapped plans win when they save at least this share of the cost. */
#define SWAP_GAIN 0.92
/* ... and with 256-row swapped tiles and a reduction of 2048 or more (token
 * counts from ~2000, where split-K is never the alternative) when they save
 * this share: fwd 3283x1024x2816, predicted 0.96, ran 32.3 us on 120 tiles
 * of 256 x 112 against 34.0 on 104 of 128 x 256 (--tune, cold operands,
 * H100); in bench/sweep fwd 7112x1024x2816 71.2 -> 63.9 us, grad_a
 * 3509x2816x1024 33.9 -> 30.8. With K = 1024 (fwd 7743x2816x1024) the same
 * threshold swapped it 79.0 -> 91.6 us: the transposed epilogue weighs
 * more on a short reduction. */
#define SWAP_GAIN_256 0.97
#define SWAP_GAIN_256_MIN_K 2048

/* After plan_target and plan_alignment: the wgmma kernel (sm_90a) takes the
 * shapes that fill the chip with 128-row tiles, when its 16-byte loads are
 * allowed. TMA form: every aligned shape, tile width by tma_pick_bn.
 * Everything else stays on the mma.sync kernel. Measured on an H100:
 * bench/NOTES-gemm.md. */
static void plan_wgmma(gemm_plan *p)
{
    p->wgmma = 0;
    p->tma = 0;
    p->persist = 0;
    p->cluster = 0;
    if (!p->sm90 || !p->aligned)
        return;
    const int64_t tm = (p->M + 127) / 128;
    const int64_t fill = NV_SMS * 9 / 10;
    /* TMA coordinates are 32-bit. The TMA kernel takes every aligned shape,
     * however few rows or columns: on an H100 (tokitai-jit --tune of the MoE
     * expert shapes and of the default manifest, bench/NOTES-gemm.md) it ran
     * 1.2-2.2x faster than the small mma.sync tiles from 16 to 512 tokens,
     * and split 8 ways 1.4-2.3x faster on the router's N = 8 and the
     * attention's 64-wide shapes. */
    if (TK_GEMM_TMA && p->M < INT32_MAX && p->N < INT32_MAX && p->K < INT32_MAX) {
        const int64_t sms = p->sms > 0 ? p->sms : NV_SMS;
        double cost, swap_cost;
        p->wgmma = 1;
        p->tma = 1;
        p->wg_bn = tma_pick_bn(p->M, p->N, p->b_kmajor, sms, &p->wg_bm, &cost);
        /* tokens on the kernel's M, A K-major (the swapped B then is); the
         * token counts a precompile enumerates; the op's N a whole 64-row
         * tile at least (the router's N = 8 swapped onto 64-row tiles ran
         * 2.4x slower than on its skinny kernel: boxes of 8 real rows in
         * 64, and no skinny kernel for a swapped plan) */
        if (TK_GEMM_SWAP && p->moving == 0 && p->a_kmajor && p->M <= M_CLASS_LIMIT &&
            p->N >= 64) {
            int bm;
            const int bn = swap_pick_bn(p->N, p->M, sms, &bm, &swap_cost);
            const double gain =
                bm == 256 && p->K >= SWAP_GAIN_256_MIN_K ? SWAP_GAIN_256 : SWAP_GAIN;
            if (swap_cost < cost * gain) {
                plan_swap(p);
                p->wg_bm = bm;
                p->wg_bn = bn;
            }
        }
        p->wg_stages = tma_stages(p->wg_bm, p->wg_bn);
        return;
    }
    if (p->tile.bm != nv_tiles[0].bm || p->tile.bn != nv_tiles[0].bn)
        return;
    p->wgmma = 1;
    p->wg_bm = 128;
    /* 128x256 tiles also when they make ~0.9 of one wave (2048^3: 128 tiles on
     * 132 SMs ran 0.62 of cuBLAS against 0.56 for 256 128x128 tiles) */
    if (p->N > 128 && (tm >= fill || ceil_div_gt(p->N, 256, (fill + tm - 1) / tm))) {
        p->wg_bn = 256;
        p->wg_stages = 4;
    } else {
        p->wg_bn = 128;
        p->wg_stages = 5;
    }
}

/* A split factor s wanted for kt K tiles of an M x N output, clamped to kt
 * and to fp32 partials within SPLIT_WS_MAX, then made even (each split
 * ceil(kt / s) K tiles, none empty); 1 when that leaves fewer than 2. */
static int64_t split_clamp(int64_t s, int64_t kt, int64_t M, int64_t N)
{
    if (s > kt)
        s = kt;
    while (s > 1 && s * M * N > SPLIT_WS_MAX / 4)
        s--;
    if (s < 2)
        return 1;
    const int64_t per = (kt + s - 1) / s;
    return (kt + per - 1) / per;
}

/* After plan_wgmma: split-K when the output tiles fill well under one wave
 * of the chip and K is long. Splits = SMs / tiles (one wave at most), each
 * split at least SPLIT_MIN_KT_* K tiles (1024 of K on the TMA kernel, 256 or
 * 512 on mma.sync),
 * at most SPLIT_MAX, fp32 partials within SPLIT_WS_MAX. On sm_90 (aligned,
 * kernel M and N >= 128) the split runs on the TMA kernel with 128x128 tiles. */
static void plan_split(gemm_plan *p)
{
    int64_t bm, bn, bk, tiles, kt, s;
    int tma;
    p->splits = 1;
    if (!TK_GEMM_SPLITK || p->amd || p->simple)
        return;
    if (p->swap) {
        /* Swapped tiles never split; where the unswapped plan would (few
         * tiles, a long reduction), the split wins: fwd N=1024 K=2816 at
         * 256 tokens split 4 on 128 x 64 tiles 9.2 us against 10.0 for 128
         * swapped tiles of 64 x 32 (--tune, cold operands, H100). */
        gemm_plan q = *p;
        plan_swap(&q);
        plan_split(&q);
        if (q.splits > 1)
            *p = q;
        return;
    }
    if (p->tma) {
        /* TMA kernel: split when a sixteenth of the chip or less has
         * 128x128 tiles and K has 32 tiles of 64 or more (half the chip when
         * K has 128 or more): as many splits as fill the chip, at most 8,
         * each at least 4 K tiles. Fitted to --tune on an H100: shorter
         * reductions (K = 1024) and half-full chips ran best unsplit; grad_a
         * 1024x32000x1024 (64 tiles, K = 32000) 1.6x faster split 2. Shapes
         * of K 2048-8191 with few tiles split on 128 x 64 tiles first. */
        kt = (p->K + 63) / 64;
        /* Half the chip or less in 128 x 64 tiles and K from 2048 to 8191
         * (longer reductions take 128 x 128 tiles, below: grad_a
         * 512x50304x1024 split 2 on 128 x 64 ran 0.78 of cuBLAS):
         * those tiles split to fill one wave (two rounds of them lost
         * everywhere), at least 8 K tiles each, at most 8 ways (--tune,
         * cold operands, H100, bench/NOTES-gemm.md: fwd N=1024 K=2816 at
         * 256 tokens split 4 9.8 us against 12.1 unsplit, at 384 split 2
         * 11.2 against 12.3, at 128 split 4 8.5 against 9.5 for split 8 on
         * 128 x 128; grad_a N=2816 K=1024 at 256 split 4 9.4 against 12.0,
         * at 512 split 2 11.4 against 12.0; grad_b 2048x64x2048 and
         * 2048x2048x64 split 4 8.9-9.6 against 9.9; with K = 1024, fwd
         * N=2816 at 128 tokens, split 2 8.8 against 7.2 unsplit). */
        /* M <= 64: 64-row tiles (128-row boxes would be half zero fill;
         * grad_b 2048x2048x64: 64 x 64 tiles split 4 8.3 us, 128 x 64 9.0,
         * --tune, cold operands) */
        bm = p->M <= 64 ? 64 : 128;
        tiles = ((p->M + bm - 1) / bm) * ((p->N + 63) / 64);
        if (kt >= 32 && kt < 128 && tiles * 2 <= p->sms) {
            s = p->sms / tiles;
            if (s > 8)
                s = 8;
            s = split_clamp(s < kt / 8 ? s : kt / 8, kt, p->M, p->N);
            if (s >= 2) {
                p->splits = (int)s;
                p->wg_bn = 64;
                p->wg_bm = (int)bm, p->wg_stages = tma_stages((int)bm, 64);
            }
            return;
        }
        tiles = ((p->M + 127) / 128) * ((p->N + 127) / 128);
        if (kt < 32 || (tiles * 16 > NV_SMS && (tiles * 2 > NV_SMS || kt < 128)))
            return;
        s = NV_SMS / tiles;
        if (s > 8)
            s = 8;
        s = split_clamp(s < kt / 4 ? s : kt / 4, kt, p->M, p->N);
        if (s >= 2) {
            /* 64 columns where they hold all of N: the router's grad_b (N =
             * 8, K = 2048-16384 tokens) ran 1.20-1.26x faster split 8 on
             * 128 x 64 tiles than on 128 x 128 (--tune, cold operands; the
             * copies of a box mostly outside the tensor are slow) */
            const int w = p->N <= 64 ? 64 : 128;
            p->splits = (int)s;
            p->wg_bn = w;
            p->wg_bm = 128, p->wg_stages = tma_stages(128, w);
        }
        return;
    }
    if (p->wgmma)
        return;
    /* no tensor-map box larger than the matrix (128 rows of A and B) */
    tma = TK_GEMM_TMA && p->sm90 && p->aligned && p->M >= 128 && p->N >= 128 && p->M < INT32_MAX &&
          p->N < INT32_MAX && p->K < INT32_MAX;
    bm = tma ? 128 : p->tile.bm;
    bn = tma ? 128 : p->tile.bn;
    bk = tma ? 64 : p->tile.bk;
    tiles = ((p->M + bm - 1) / bm) * ((p->N + bn - 1) / bn);
    kt = (p->K + bk - 1) / bk;
    s = NV_SMS / tiles;
    if (s > kt / (tma ? SPLIT_MIN_KT_TMA : SPLIT_MIN_KT_MMA))
        s = kt / (tma ? SPLIT_MIN_KT_TMA : SPLIT_MIN_KT_MMA);
    if (s > SPLIT_MAX)
        s = SPLIT_MAX;
    s = split_clamp(s, kt, p->M, p->N);
    if (s < 2)
        return;
    p->splits = (int)s;
    if (tma) {
        p->wgmma = 1;
        p->tma = 1;
        p->wg_bn = 128;
        p->wg_bm = 128, p->wg_stages = tma_stages(128, 128);
    }
}

/* The router's forward (N <= 8 columns; the MoE gate's 8 experts) reads A
 * once and computes little: 128-row tiles waste 15/16 of their width, and
 * on an H100 the TMA kernel ran 16384 x 8 x 1024 in 25.7 us (1.25 TB/s)
 * against 16.3 for cuBLAS. The skinny kernel (TK_GEMM_SKINNY) streams A
 * with 16-byte loads into mma.sync. It needs an NVIDIA sm_80+ target, A
 * 16-byte aligned with lda % 8 == 0, K % 8 == 0 and K <= SKINNY_K_MAX (B
 * sits in shared memory, 16 bytes per k). */
/* Off the tiled kernels' options: the plan for a kernel of its own
 * (skinny, small-K) or for mma.sync (which sets its tile). */
static void plan_untiled(gemm_plan *p)
{
    p->wgmma = 0, p->tma = 0, p->persist = 0, p->epi_tma = 0, p->cluster = 0, p->splits = 1;
}

#define SKINNY_N_MAX 8
#define SKINNY_K_MAX 8192
#define SKINNY_M_MIN 4096
static int skinny_fits(const gemm_plan *p)
{
    return TK_GEMM_SKINNY && !p->amd && !p->simple && p->a_kmajor && !p->b_kmajor && !p->swap &&
           !p->out_f16 && p->N <= SKINNY_N_MAX && p->K % 8 == 0 && p->K <= SKINNY_K_MAX &&
           p->aligned;
}

/* After plan_grid: the skinny kernel for router-sized forwards with rows
 * enough to fill the chip (fewer ran as fast on the tiled kernels). */
static void plan_skinny(gemm_plan *p)
{
    p->skinny = 0;
    if (!skinny_fits(p) || p->M < SKINNY_M_MIN)
        return;
    p->skinny = 1;
    plan_untiled(p);
}

/* Reductions of at most SMALLK_K_MAX (kernel K: the router's grad_a with
 * its 8 experts, grad_b of a handful of tokens) write C and compute little:
 * on an H100 the TMA kernel (one K step of 64, zero-filled past K, then its
 * epilogue) wrote grad_a 8192 x 8 x 1024, a 16 MB output, in 12.9 us (1.3
 * TB/s). The small-K kernel (TK_GEMM_SMALLK) loads both operands' tiles
 * into shared memory and writes C with 8- or 16-byte row stores; any
 * layout, alignment and NVIDIA target from sm_80 (plain CUDA cores). */
#ifndef TK_GEMM_SMALLK
#define TK_GEMM_SMALLK 1
#endif
#define SMALLK_K_MAX 16
static int smallk_fits(const gemm_plan *p)
{
    return TK_GEMM_SMALLK && !p->amd && !p->simple && p->K <= SMALLK_K_MAX;
}

/* After plan_skinny: the small-K kernel, in the op's own (unswapped) terms. */
static void plan_smallk(gemm_plan *p)
{
    p->smallk = 0;
    if (p->skinny || !smallk_fits(p))
        return;
    if (p->swap)
        plan_swap(p);
    p->smallk = 1;
    plan_untiled(p);
}

/* ------------------------------------------------------------- tuning
 *
 * A configuration is what the planner decides beyond layout and alignment:
 * kernel (TMA wgmma or mma.sync), tile, grid (a block per tile, persistent,
 * stream-K), epilogue, split-K factor.
 * The heuristics above choose one; a tuning record (tokitai-jit --tune,
 * tk_op_tune) replaces that choice for a shape class: the op, its N and K
 * (fixed by the model) and a class of M (tokens): 16-row steps up to 128,
 * 128-row steps (one 128-row tile more or less) up to 8192, 1024-row steps
 * up to 32768, then octaves. A configuration is text ("tma bn=256 persist=1
 * epi=1 split=1", "mma tile=2 split=4", a line per class in the record of the
 * op's (N, K) family: record_name), checked against the call when used: one
 * that does not fit the call (unaligned operands, a TMA kernel on another
 * target) is ignored and the heuristics choose. Every configuration
 * computes the same products in fp32; only split-K changes the order of
 * the sums, within the op's tolerance. */
typedef struct gemm_cfg {
    int tma;     /* 1: the sm_90a TMA wgmma kernel, 0: mma.sync */
    int bn;      /* tma: columns, a multiple of 16 (of 64 with B N-major) */
    int bm;      /* tma: 64, 128 or 256 rows */
    int swap;    /* tma: 1 the swapped plan (plan_swap) */
    int skinny;  /* 1: the skinny kernel (plan_skinny); nothing else applies */
    int smallk;  /* 1: the small-K kernel (plan_smallk); nothing else applies */
    int tile;    /* mma.sync: index into nv_tiles */
    int persist; /* tma: 1 persistent grid, 2 stream-K */
    int epi;     /* tma, unsplit: 1 the TMA-store epilogue */
    int cluster; /* tma, a block per tile: 2 clusters of two sharing A; 0 none */
    int splits;  /* split-K factor; 1: none */
} gemm_cfg;

#define N_TILES ((int)(sizeof nv_tiles / sizeof nv_tiles[0]))

static void cfg_of_plan(const gemm_plan *p, gemm_cfg *c)
{
    memset(c, 0, sizeof *c);
    c->skinny = p->skinny;
    c->smallk = p->smallk;
    c->splits = 1;
    if (p->skinny || p->smallk)
        return;
    c->tma = p->tma;
    c->bn = p->tma ? p->wg_bn : 0;
    c->bm = p->tma ? p->wg_bm : 0;
    c->swap = p->tma ? p->swap : 0;
    c->tile = 0;
    for (int i = 0; i < N_TILES; i++)
        if (memcmp(&nv_tiles[i], &p->tile, sizeof p->tile) == 0)
            c->tile = i;
    c->persist = p->persist;
    c->epi = p->epi_tma;
    c->cluster = p->tma && p->cluster > 1 ? p->cluster : 0;
    c->splits = p->splits;
}

static void cfg_text(const gemm_cfg *c, char *buf, size_t size)
{
    if (c->skinny)
        snprintf(buf, size, "skinny");
    else if (c->smallk)
        snprintf(buf, size, "smallk");
    else if (c->tma)
        snprintf(buf, size, "tma bn=%d persist=%d epi=%d split=%d%s%s%s", c->bn, c->persist,
                 c->epi, c->splits,
                 c->bm == 256  ? " bm=256"
                 : c->bm == 64 ? " bm=64"
                               : "",
                 c->swap ? " swap=1" : "",
                 c->cluster > 1 ? " cl=2" : "");
    else
        snprintf(buf, size, "mma tile=%d split=%d", c->tile, c->splits);
}

/* 1 when text is a well-formed configuration (whether it fits a call is
 * plan_apply's question). Options may follow a TMA configuration, each at
 * most once: bm=64|128|256, swap=0|1, cl=1|2; without them 128 rows,
 * unswapped, no cluster (as records written before they existed). */
static int cfg_parse(const char *text, gemm_cfg *c)
{
    int n = 0;
    memset(c, 0, sizeof *c);
    if (sscanf(text, "tma bn=%d persist=%d epi=%d split=%d%n", &c->bn, &c->persist, &c->epi,
               &c->splits, &n) == 4 &&
        n > 0) {
        unsigned seen = 0;
        c->tma = 1;
        c->bm = 128;
        while (text[n] != '\0') {
            char key[8];
            int v, k = 0, bit;
            if (sscanf(text + n, " %7[a-z]=%d%n", key, &v, &k) != 2 || k <= 0)
                return 0;
            n += k;
            if (strcmp(key, "bm") == 0)
                bit = 1, c->bm = v;
            else if (strcmp(key, "swap") == 0)
                bit = 2, c->swap = v;
            else if (strcmp(key, "cl") == 0)
                bit = 4, c->cluster = v == 1 ? 0 : v;
            else
                return 0;
            if (seen & (unsigned)bit)
                return 0;
            seen |= (unsigned)bit;
        }
        return c->bn % 16 == 0 && c->bn >= 16 && c->bn <= 256 &&
               (c->bm == 64 || c->bm == 128 || c->bm == 256) &&
               (c->bm != 256 || c->bn <= SWAP_BN_MAX) && (c->swap == 0 || c->swap == 1) &&
               c->persist >= 0 && c->persist <= 2 && (c->cluster == 0 || c->cluster == 2) &&
               (c->epi == 0 || c->epi == 1) && c->splits >= 1 && c->splits <= SPLIT_MAX;
    }
    if (strcmp(text, "skinny") == 0) {
        c->skinny = 1;
        c->splits = 1;
        return 1;
    }
    if (strcmp(text, "smallk") == 0) {
        c->smallk = 1;
        c->splits = 1;
        return 1;
    }
    if (sscanf(text, "mma tile=%d split=%d%n", &c->tile, &c->splits, &n) == 2 && n > 0)
        return c->tile >= 0 && c->tile < N_TILES && c->splits >= 1 && c->splits <= SPLIT_MAX;
    return 0;
}

/* Imposes c on p (planned by the heuristics) when it fits the call: 1 then,
 * else 0 and p unchanged. The split factor is clamped to the reduction
 * (no empty split) and to the workspace bound. */
static int plan_apply(gemm_plan *p, const gemm_cfg *c)
{
    gemm_plan q = *p;
    int64_t bk, kt;
    if (p->amd || p->simple || c->splits < 1 || c->splits > SPLIT_MAX)
        return 0;
    if (q.swap) /* back to the op's own terms */
        plan_swap(&q);
    q.skinny = 0;
    q.smallk = 0;
    if (c->skinny || c->smallk) {
        if (c->skinny ? !skinny_fits(&q) : !smallk_fits(&q))
            return 0;
        q.skinny = c->skinny;
        q.smallk = c->smallk;
        plan_untiled(&q);
        *p = q;
        return 1;
    }
    if (c->tma) {
        if (!TK_GEMM_TMA || !p->sm90 || !p->aligned || p->M >= INT32_MAX || p->N >= INT32_MAX ||
            p->K >= INT32_MAX || c->bn % 16 != 0 || c->bn < 16 || c->bn > 256 ||
            (c->bm != 64 && c->bm != 128 && c->bm != 256) || (c->bm == 256 && c->bn > SWAP_BN_MAX))
            return 0;
        /* 64-row tiles (the consumer warpgroups take alternate K steps):
         * a block per tile, stored from the ring or registers, no clusters */
        if (c->bm == 64 && (c->epi || c->persist || c->cluster > 1))
            return 0;
        /* swapped: tokens on the kernel's M before, B K-major after */
        if (c->swap) {
            if (!TK_GEMM_SWAP || q.moving != 0 || !q.a_kmajor)
                return 0;
            plan_swap(&q);
        }
        /* N-major B comes in boxes of 64 columns */
        if (!q.b_kmajor && c->bn % 64 != 0)
            return 0;
        /* persistent blocks take whole tiles only; the TMA-store epilogue
         * writes C, not split partials, and needs C 16-byte aligned; the
         * swapped and 256-row tiles store from registers or the ring */
        if (c->splits > 1 && (c->persist || c->epi || c->swap))
            return 0;
        /* (its chunks are 128 bytes of a row; a width's remainder leaves
         * from registers) */
        if (c->epi && (!p->c16 || c->swap || c->bm != 128))
            return 0;
        if (c->persist == 2 && (c->swap || c->bm != 128))
            return 0;
        /* clusters: a block per tile, unsplit */
        if (c->cluster > 1 && (c->persist || c->splits > 1))
            return 0;
        /* stream-K needs more tiles than blocks (each block's share at least
         * one tile's K steps) */
        if (c->persist == 2 &&
            ((q.M + 127) / 128) * ((q.N + c->bn - 1) / c->bn) <= p->sms)
            return 0;
        q.wgmma = 1, q.tma = 1, q.wg_bm = c->bm, q.wg_bn = c->bn;
        q.wg_stages = tma_stages(c->bm, c->bn);
        q.persist = c->persist;
        q.epi_tma = c->epi;
        q.cluster = c->cluster;
        q.tile = nv_tiles[0];
        bk = 64;
    } else {
        if (c->tile < 0 || c->tile >= N_TILES || c->persist)
            return 0;
        plan_untiled(&q); /* (split below) */
        q.tile = nv_tiles[c->tile];
        bk = q.tile.bk;
    }
    q.splits = 1;
    if (c->splits > 1 && TK_GEMM_SPLITK) {
        kt = (p->K + bk - 1) / bk;
        q.splits = (int)split_clamp(c->splits, kt, p->M, p->N);
    }
    *p = q;
    return 1;
}

/* Upper end of M's class (see the top of this section). */
static int64_t m_class_max(int64_t m)
{
    int64_t hi = 65536;
    if (m <= 128)
        return (m + 15) / 16 * 16;
    if (m <= 8192)
        return (m + 127) / 128 * 128;
    if (m <= 32768)
        return (m + 1023) / 1024 * 1024;
    while (hi < m && hi < ((int64_t)1 << 61))
        hi *= 2;
    return hi;
}

/* Decimal text of v (negative: 0) at out; returns the end. No printf: every
 * operator call formats its defines and record name. */
static char *put_dec(char *out, int64_t v)
{
    char tmp[24];
    int n = 0;
    uint64_t u = v < 0 ? 0 : (uint64_t)v;
    do {
        tmp[n++] = (char)('0' + (int)(u % 10));
        u /= 10;
    } while (u != 0);
    while (n > 0)
        *out++ = tmp[--n];
    *out = '\0';
    return out;
}

/* Records: one per op and (N, K), the family of every token count M, named
 * "N=2816 K=1024" (op terms), holding a line per class of M in increasing
 * order, "M<=4096 tma bn=256 persist=0 epi=1 split=1". One record per
 * family means one cache lookup per family and context, at its first call
 * (when its kernel is fetched too), not one per new token count on the
 * training path. */
static void record_name(const gemm_plan *p, char buf[64])
{
    char *o = buf;
    memcpy(o, "N=", 2), o += 2;
    o = put_dec(o, p->on);
    memcpy(o, " K=", 3), o += 3;
    put_dec(o, p->ok);
}

/* The configuration text of class mc in a record's text (its length in
 * *len), or NULL when the record has no line for it. */
static const char *record_line(const char *text, int64_t mc, size_t *len)
{
    for (const char *l = text; *l != '\0';) {
        const char *end = strchr(l, '\n');
        long long m = -1;
        int n = 0;
        if (end == NULL)
            end = l + strlen(l);
        if (sscanf(l, "M<=%lld %n", &m, &n) == 1 && n > 0 && m == mc && l + n <= end) {
            *len = (size_t)(end - l - n);
            return l + n;
        }
        l = *end ? end + 1 : end;
    }
    return NULL;
}

/* Sets the line of p's class to cfg in p's family record (read, replace or
 * insert in order, write back). Two processes tuning the same family at
 * once may lose one's line (the last write wins); the class then keeps the
 * heuristics until tuned again. */
static tk_status record_store(tk_context *ctx, const gemm_plan *p, const char *cfg)
{
    char name[64];
    const int64_t mc = m_class_max(p->om);
    char *old = malloc(TK__RECORD_MAX), *out = malloc(TK__RECORD_MAX);
    size_t o = 0;
    int placed = 0;
    tk_status st = TK_OK;
    if (old == NULL || out == NULL) {
        free(old);
        free(out);
        return tk__fail(ctx, TK_OUT_OF_MEMORY, "%s: tuning record: out of memory", p->op);
    }
    record_name(p, name);
    if (tk__record_get(ctx, p->op + 3, name, old, TK__RECORD_MAX) != TK_OK)
        old[0] = '\0';
    for (const char *l = old;; l++) {
        const char *end = strchr(l, '\n');
        long long m = -1;
        if (end == NULL)
            end = l + strlen(l);
        const int ok = sscanf(l, "M<=%lld ", &m) == 1; /* else a malformed line: dropped */
        if ((!placed && (*l == '\0' || (ok && m > mc))) || (ok && m == mc)) {
            if (!placed) {
                const int w = snprintf(out + o, TK__RECORD_MAX - o, "M<=%lld %s\n", (long long)mc,
                                       cfg);
                if (w < 0 || (size_t)w >= TK__RECORD_MAX - o) {
                    st = TK_OVERFLOW;
                    break;
                }
                o += (size_t)w;
                placed = 1;
            }
        }
        if (ok && m != mc) {
            const size_t n = (size_t)(end - l);
            if (o + n + 2 > TK__RECORD_MAX) {
                st = TK_OVERFLOW;
                break;
            }
            memcpy(out + o, l, n);
            out[o + n] = '\n';
            o += n + 1;
        }
        if (*end == '\0')
            break;
        l = end;
    }
    if (st == TK_OK) {
        out[o] = '\0';
        st = tk__record_put(ctx, p->op + 3, name, out);
    } else {
        st = tk__fail(ctx, st, "%s: tuning record %s: more classes than a record holds", p->op,
                      name);
    }
    free(old);
    free(out);
    return st;
}

/* Tuning mode: $TOKITAI_JIT_TUNE = "off" (heuristics only, records
 * ignored), "auto" (records, and a class without one is tuned at its first
 * call: see tk_op_tune), else (default) records where they exist. */
enum { TUNE_RECORDS = 0, TUNE_OFF = 1, TUNE_AUTO = 2 };
static int tune_mode(void)
{
    static int cached = -1;
    int v = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (v < 0) {
        const char *e = getenv("TOKITAI_JIT_TUNE");
        v = TUNE_RECORDS;
        if (e != NULL && strcmp(e, "off") == 0)
            v = TUNE_OFF;
        else if (e != NULL && strcmp(e, "auto") == 0)
            v = TUNE_AUTO;
        __atomic_store_n(&cached, v, __ATOMIC_RELAXED);
    }
    return v;
}

/* Parsed records of this thread's recent classes: a training step calls
 * the same shapes again and again; this skips the record name, the hash and
 * the context's table under its mutex (~40 ns per call on the stub backend,
 * where a call costs ~1.1 us of host time in all). Valid while
 * tk__record_generation() is unchanged. */
#define TUNED_CACHE 64
typedef struct tuned_slot {
    const tk_context *ctx;
    const char *op;
    int64_t n, k, mc;
    unsigned gen;
    int present, fits;
    gemm_cfg cfg;
} tuned_slot;
static _Thread_local tuned_slot tuned_cache[TUNED_CACHE];

/* After the heuristics: the configuration of p's class from a tuning
 * record, when one exists and fits. 1 when a record exists (used or not). */
static _Thread_local char record_text[TK__RECORD_MAX];

static int plan_tuned(tk_context *ctx, gemm_plan *p)
{
    char name[64], value[64];
    const char *line;
    size_t len = 0;
    gemm_cfg c;
    if (p->amd || p->simple || !p->aligned || tune_mode() == TUNE_OFF)
        return 0;
    const int64_t mc = m_class_max(p->om);
    const unsigned gen = tk__record_generation();
    tuned_slot *t =
        &tuned_cache[(uint64_t)(p->on * 31 + p->ok * 17 + mc + (int64_t)(uintptr_t)p->op) %
                     TUNED_CACHE];
    if (t->gen == gen && t->ctx == ctx && t->op == p->op && t->n == p->on && t->k == p->ok &&
        t->mc == mc) {
        if (t->present && t->fits)
            (void)plan_apply(p, &t->cfg);
        return t->present;
    }
    record_name(p, name);
    line = tk__record_get(ctx, p->op + 3, name, record_text, sizeof record_text) == TK_OK
               ? record_line(record_text, mc, &len)
               : NULL;
    const int present = line != NULL;
    if (present && len < sizeof value) {
        memcpy(value, line, len);
        value[len] = '\0';
    } else {
        value[0] = '\0';
    }
    const int fits = present && cfg_parse(value, &c);
    if (fits)
        (void)plan_apply(p, &c);
    *t = (tuned_slot){.ctx = ctx, .op = p->op, .n = p->on, .k = p->ok, .mc = mc, .gen = gen,
                      .present = present, .fits = fits};
    if (fits)
        t->cfg = c;
    return present;
}

/* The heuristics' grid and epilogue, after plan_split (tokitai-jit --tune
 * of the MoE expert shapes on an H100, bench/NOTES-gemm.md): the unsplit
 * TMA kernel stores C with the TMA-store epilogue (1-5% faster than staging
 * through the ring); more than a wave of tiles runs on a persistent grid
 * (its stores overlap the next tile's main loop: 8-19% faster than a block
 * per tile at fwd 2048x2816x1024, grad_a 2048x1024x2816). Stream-K is left
 * to tuning records: it lost to the persistent grid where the heuristics
 * tried it (fwd 1920x2816x1024: 28.3 against 24.2 us). */
static void plan_grid(gemm_plan *p)
{
    p->persist = 0;
    p->epi_tma = 0;
    if (!p->tma || p->splits != 1)
        return;
    if (p->swap || p->wg_bm != 128) /* a block per tile, stored from the ring */
        return;
    p->epi_tma = TK_GEMM_EPI_TMA && p->c16;
    /* not for a single K step: the tiles are all epilogue, and a block per
     * tile ran faster (grad_a 16384 x 8 x 1024, a 16384 x 1024 output with
     * K = 8: 128 x 256 tiles in 22.1 us against 26.6 persistent) */
    p->persist = ((p->M + 127) / 128) * ((p->N + p->wg_bn - 1) / p->wg_bn) > NV_SMS && p->K > 64;
}

/* Fills p for op; pointers may be NULL (precompile: packed, aligned). */
static void plan_op(tk_op op, int64_t M, int64_t N, int64_t K, gemm_plan *p)
{
    memset(p, 0, sizeof *p);
    p->om = M, p->on = N, p->ok = K;
    switch (op) {
    case TK_OP_GEMM_F16_FWD: /* C[M,N] = A[M,K] B[K,N] */
        p->op = "tk_gemm_f16_fwd";
        p->moving = 0;
        p->M = M, p->N = N, p->K = K;
        p->a_kmajor = 1, p->b_kmajor = 0, p->out_f16 = 0;
        break;
    case TK_OP_GEMM_F16_GRAD_A: /* grad_A[M,K] = grad_C[M,N] B[K,N]^T */
        p->op = "tk_gemm_f16_grad_a";
        p->moving = 0;
        p->M = M, p->N = K, p->K = N;
        p->a_kmajor = 1, p->b_kmajor = 1, p->out_f16 = 1;
        break;
    default: /* grad_B[K,N] = A[M,K]^T grad_C[M,N] */
        p->op = "tk_gemm_f16_grad_b";
        p->moving = 2;
        p->M = K, p->N = N, p->K = M;
        p->a_kmajor = 0, p->b_kmajor = 0, p->out_f16 = 1;
        break;
    }
}

static void plan_alignment(gemm_plan *p, const void *a, const void *b, const void *c)
{
    const size_t out_elem = p->out_f16 ? 2 : 4;
    p->aligned =
        ((uintptr_t)a % 16) == 0 && ((uintptr_t)b % 16) == 0 && p->lda % 8 == 0 && p->ldb % 8 == 0;
    p->vec_out = ((uintptr_t)c % (2 * out_elem)) == 0 && p->ldc % 2 == 0;
    /* the bulk tensor store writes whole 16-byte pieces of a row: the rows
     * must end on one (else it writes up to 12 bytes past column N: seen on
     * an H100 with N = 2049, ldc = 2052) */
    p->c16 = ((uintptr_t)c % 16) == 0 && (p->ldc * (int64_t)out_elem) % 16 == 0 &&
             (p->N * (int64_t)out_elem) % 16 == 0;
}

/* A CUtensorMap: 128 bytes, 64-byte aligned. */
typedef struct gemm_tmap {
    _Alignas(64) unsigned char b[128];
} gemm_tmap;

/* Encoded tensor maps of this thread's recent calls: a training step calls
 * the same GEMMs on the same buffers again and again, and encoding costs
 * host time on every call (three maps per call). A map holds only the
 * address, shape, strides and box, so a hit is exact. */
#define TMAP_CACHE 64
typedef struct tmap_slot {
    const void *base;
    uint64_t rows, cols, row_bytes;
    unsigned box_cols, box_rows, es;
    gemm_tmap map;
} tmap_slot;
static _Thread_local tmap_slot tmap_cache[TMAP_CACHE];
static _Thread_local unsigned tmap_next;
static _Thread_local const tk_context *tmap_ctx;

static tk_status tmap_get(tk_context *ctx, gemm_tmap *out, const void *base, uint64_t rows,
                          uint64_t cols, uint64_t row_bytes, unsigned box_cols, unsigned box_rows,
                          unsigned es)
{
    if (tmap_ctx != ctx) { /* maps are per device: start over for another context */
        memset(tmap_cache, 0, sizeof tmap_cache);
        tmap_ctx = ctx;
    }
    for (unsigned i = 0; i < TMAP_CACHE; i++) {
        const tmap_slot *t = &tmap_cache[i];
        if (t->base == base && base != NULL && t->rows == rows && t->cols == cols &&
            t->row_bytes == row_bytes && t->box_cols == box_cols && t->box_rows == box_rows &&
            t->es == es) {
            *out = t->map;
            return TK_OK;
        }
    }
    tk_status st = tk__tensor_map_f16(ctx, out->b, base, rows, cols, row_bytes, box_cols, box_rows,
                                      es);
    if (st == TK_OK) {
        tmap_slot *t = &tmap_cache[tmap_next++ % TMAP_CACHE];
        t->base = base, t->rows = rows, t->cols = cols, t->row_bytes = row_bytes;
        t->box_cols = box_cols, t->box_rows = box_rows, t->es = es;
        t->map = *out;
    }
    return st;
}

/* Kernel description of a plan; defines point into `text`. */
typedef struct gemm_desc {
    tk_kernel_desc desc;
    tk_define defs[20];
    char text[20][24];
} gemm_desc;

/* Decimal text of a non-negative value without printf: this runs on every
 * operator call (the kernel lookup needs the defines), so it stays cheap. */
static void add_def(gemm_desc *d, const char *name, int64_t value)
{
    const size_t i = d->desc.n_defines++;
    put_dec(d->text[i], value);
    d->defs[i].name = name;
    d->defs[i].value = d->text[i];
}

static void build_desc(const gemm_plan *p, tk_policy policy, gemm_desc *d)
{
    memset(d, 0, sizeof *d);
    d->desc.source_name = "gemm_f16";
    d->desc.entry = "tk_gemm_f16";
    d->desc.defines = d->defs;
    add_def(d, "TK_A_KMAJOR", p->a_kmajor);
    add_def(d, "TK_B_KMAJOR", p->b_kmajor);
    add_def(d, "TK_OUT_F16", p->out_f16);
    if (p->amd) {
        /* One kernel shape on AMD; only layout and shape specialise it. */
    } else if (p->simple) {
        add_def(d, "TK_GEMM_SIMPLE", 1);
    } else if (p->skinny) {
        add_def(d, "TK_GEMM_SKINNY", 1);
    } else if (p->smallk) {
        add_def(d, "TK_GEMM_SMALLK", 1);
    } else if (p->wgmma) {
        /* wgmma needs the sm_90a target; the engine then adds no other. */
        static const char *const wg_opts[] = {"--gpu-architecture=sm_90a"};
        add_def(d, "TK_WGMMA", p->tma ? 2 : 1);
        if (p->wg_bm != 128)
            add_def(d, "TK_BM", p->wg_bm);
        add_def(d, "TK_BN", p->wg_bn);
        add_def(d, "TK_STAGES", p->wg_stages);
        if (p->swap)
            add_def(d, "TK_SWAP", 1);
        if (p->tma && p->cluster > 1)
            add_def(d, "TK_CLUSTER", p->cluster);
        add_def(d, "TK_ALIGNED", 1);
        add_def(d, "TK_VEC_OUT", p->splits > 1 ? p->N % 2 == 0 : p->vec_out);
        if (p->splits > 1)
            add_def(d, "TK_SPLITK", 1);
        if (p->tma && !TK_GEMM_EPI_SMEM)
            add_def(d, "TK_EPI_SMEM", 0);
        if (p->tma && p->epi_tma)
            add_def(d, "TK_EPI_TMA", 1);
        if (p->tma && p->persist == 2)
            add_def(d, "TK_STREAMK", 1);
        if (p->tma && pdl_enabled())
            add_def(d, "TK_PDL", 1);
        d->desc.options = wg_opts;
        d->desc.n_options = 1;
    } else {
        add_def(d, "TK_BM", p->tile.bm);
        add_def(d, "TK_BN", p->tile.bn);
        add_def(d, "TK_BK", p->tile.bk);
        add_def(d, "TK_WM", p->tile.wm);
        add_def(d, "TK_WN", p->tile.wn);
        add_def(d, "TK_STAGES", p->tile.stages);
        add_def(d, "TK_ALIGNED", p->aligned);
        add_def(d, "TK_VEC_OUT", p->splits > 1 ? p->N % 2 == 0 : p->vec_out);
        if (p->splits > 1)
            add_def(d, "TK_SPLITK", 1);
    }
    if (policy == TK_POLICY_EXACT || (policy == TK_POLICY_STABLE && p->moving != 0))
        add_def(d, "TK_M", p->M);
    if (policy == TK_POLICY_EXACT || (policy == TK_POLICY_STABLE && p->moving != 1))
        add_def(d, "TK_N", p->N);
    if (policy == TK_POLICY_EXACT || (policy == TK_POLICY_STABLE && p->moving != 2))
        add_def(d, "TK_K", p->K);
}

/* The universal plan of p's call: any shape, nothing baked (see the top). */
static void plan_universal(const gemm_plan *p, gemm_plan *u)
{
    *u = *p;
    if (u->swap)
        plan_swap(u);
    u->skinny = 0;
    u->smallk = 0;
    u->wg_bm = 128;
    u->wgmma = 0;
    u->tma = 0;
    u->persist = 0;
    u->epi_tma = 0;
    u->cluster = 0;
    u->splits = 1;
    u->tile = nv_tiles[1];
}

/* 1 when two descriptions built by build_desc name the same kernel. */
static int desc_same(const gemm_desc *a, const gemm_desc *b)
{
    if (a->desc.n_defines != b->desc.n_defines || a->desc.n_options != b->desc.n_options)
        return 0;
    for (size_t i = 0; i < a->desc.n_defines; i++)
        if (strcmp(a->defs[i].name, b->defs[i].name) != 0 ||
            strcmp(a->defs[i].value, b->defs[i].value) != 0)
            return 0;
    return 1;
}

/* The split-K reduction kernel for p's output type (shape at run time under
 * both policies: it is a plain element-wise pass). */
static void build_reduce_desc(const gemm_plan *p, gemm_desc *d)
{
    memset(d, 0, sizeof *d);
    d->desc.source_name = "gemm_f16";
    d->desc.entry = "tk_gemm_f16";
    d->desc.defines = d->defs;
    add_def(d, "TK_GEMM_REDUCE", 1);
    add_def(d, "TK_OUT_F16", p->out_f16);
}

#define REDUCE_THREADS 256u

static int64_t reduce_blocks(const gemm_plan *p)
{
    const int64_t quads = (p->M * p->N + 3) / 4;
    const int64_t b = (quads + REDUCE_THREADS - 1) / REDUCE_THREADS;
    return b < NV_SMS * 16 ? b : NV_SMS * 16;
}

static void launch_dims(const gemm_plan *p, int64_t *blocks, unsigned *threads, unsigned *smem)
{
    if (p->amd || p->simple) {
        *blocks = ((p->M + AMD_TILE - 1) / AMD_TILE) * ((p->N + AMD_TILE - 1) / AMD_TILE);
        *threads = AMD_THREADS;
        *smem = 0;
        return;
    }
    if (p->smallk) {
        /* a column tile of 256 per block, its 32-row chunks shared among
         * the column's blocks: about 2 blocks per SM in all (80-100
         * registers a thread; a multiple of the column tiles, see the
         * kernel) */
        const int64_t tn = (p->N + 255) / 256, chunks = (p->M + 31) / 32;
        int64_t g = (2 * p->sms + tn - 1) / tn;
        if (g > chunks)
            g = chunks;
        *blocks = tn * (g > 0 ? g : 1);
        *threads = 256;
        *smem = 0;
        return;
    }
    if (p->skinny) { /* 32 rows per block at a time, up to 4 blocks per SM */
        *blocks = (p->M + 31) / 32;
        if (*blocks > 4 * p->sms)
            *blocks = 4 * p->sms;
        *threads = 256;
        *smem = (unsigned)(16 * p->K + 8192);
        return;
    }
    if (p->wgmma) {
        const int64_t tn = (p->N + p->wg_bn - 1) / p->wg_bn;
        /* clusters: the column tiles in pairs (an odd count's last pair has
         * a block with nothing to store) */
        *blocks = ((p->M + p->wg_bm - 1) / p->wg_bm) *
                  (p->tma && p->cluster > 1 ? (tn + 1) / 2 * 2 : tn);
        if (p->persist && *blocks > p->sms)
            *blocks = p->sms;
        /* TMA: + a producer warpgroup, + 1 KiB for the mbarriers */
        *threads = p->tma ? 384 : 256;
        /* + 1 KiB: the kernel aligns the ring to 1024 bytes (swizzle period) */
        *smem = (unsigned)(p->wg_stages * (p->wg_bm + p->wg_bn) * 64 * 2 + (p->tma ? 2048 : 1024) +
                           (p->epi_tma ? 32768 : 0));
        return;
    }
    *blocks = ((p->M + p->tile.bm - 1) / p->tile.bm) * ((p->N + p->tile.bn - 1) / p->tile.bn);
    *threads = (unsigned)(p->tile.wm * p->tile.wn * 32);
    *smem = (unsigned)(p->tile.stages * (p->tile.bm + p->tile.bn) * p->tile.bk * 2);
}

static tk_status gemm_launch(tk_context *ctx, const gemm_plan *p, tk_kernel *kernel, int64_t blocks,
                             unsigned threads, unsigned smem, const void *d_a, const void *d_b,
                             void *d_c, int64_t ldc, void *skw, void *stream);
static tk_status gemm_exec(tk_context *ctx, const gemm_plan *p, tk_kernel *kernel,
                           tk_kernel *reduce, const void *d_a, const void *d_b, void *d_c,
                           void *stream);
static void gemm_tune_call(tk_context *ctx, gemm_plan *p, const void *d_a, const void *d_b,
                           void *d_c, void *stream);

/* Validates, plans and launches. The operand names are the op's own. */
static tk_status gemm_run(tk_context *ctx, tk_op op, int64_t M, int64_t N, int64_t K,
                          const void *d_a, int64_t lda, const char *a_name, const char *lda_name,
                          const void *d_b, int64_t ldb, const char *b_name, const char *ldb_name,
                          void *d_c, int64_t ldc, const char *c_name, const char *ldc_name,
                          void *stream)
{
    gemm_plan p, u;
    gemm_desc d, ud, rd;
    tk_kernel *kernel = NULL, *reduce = NULL;
    int64_t blocks;
    unsigned threads, smem;
    tk_status st;

    plan_op(op, M, N, K, &p);
    st = tk__op_need_device(ctx, p.op);
    if (st != TK_OK)
        return st;
    if ((st = tk__op_check_size(ctx, p.op, "M", M)) != TK_OK ||
        (st = tk__op_check_size(ctx, p.op, "N", N)) != TK_OK ||
        (st = tk__op_check_size(ctx, p.op, "K", K)) != TK_OK)
        return st;
    if ((st = tk__op_check_ptr(ctx, p.op, a_name, d_a, 2)) != TK_OK ||
        (st = tk__op_check_ptr(ctx, p.op, b_name, d_b, 2)) != TK_OK ||
        (st = tk__op_check_ptr(ctx, p.op, c_name, d_c, p.out_f16 ? 2 : 4)) != TK_OK)
        return st;

    /* Kernel operand A is [M,K] (K-major) or [K,M]; B is [N,K] or [K,N];
     * C is [M,N]. Each stored row count x ld must be addressable. */
    p.lda = lda, p.ldb = ldb, p.ldc = ldc;
    {
        const int64_t a_rows = p.a_kmajor ? p.M : p.K, a_cols = p.a_kmajor ? p.K : p.M;
        const int64_t b_rows = p.b_kmajor ? p.N : p.K, b_cols = p.b_kmajor ? p.K : p.N;
        if ((st = tk__op_check_product(ctx, p.op, a_name, a_rows, a_cols, 2)) != TK_OK ||
            (st = tk__op_check_product(ctx, p.op, b_name, b_rows, b_cols, 2)) != TK_OK ||
            (st = tk__op_check_product(ctx, p.op, c_name, p.M, p.N, p.out_f16 ? 2 : 4)) != TK_OK)
            return st;
        if ((st = tk__op_resolve_ld(ctx, p.op, lda_name, &p.lda, a_cols)) != TK_OK ||
            (st = tk__op_resolve_ld(ctx, p.op, ldb_name, &p.ldb, b_cols)) != TK_OK ||
            (st = tk__op_resolve_ld(ctx, p.op, ldc_name, &p.ldc, p.N)) != TK_OK)
            return st;
        if ((st = tk__op_check_product(ctx, p.op, lda_name, a_rows, p.lda, 2)) != TK_OK ||
            (st = tk__op_check_product(ctx, p.op, ldb_name, b_rows, p.ldb, 2)) != TK_OK ||
            (st = tk__op_check_product(ctx, p.op, ldc_name, p.M, p.ldc, p.out_f16 ? 2 : 4)) !=
                TK_OK)
            return st;
    }
    plan_target(ctx, &p);
    plan_alignment(&p, d_a, d_b, d_c);
    plan_wgmma(&p);
    plan_split(&p);
    plan_grid(&p);
    plan_skinny(&p);
    plan_smallk(&p);
    if (!plan_tuned(ctx, &p) && tune_mode() == TUNE_AUTO && p.aligned && !p.amd && !p.simple) {
        /* first use of the class under TOKITAI_JIT_TUNE=auto: tune it on the
         * caller's buffers and stream, then plan again with the record */
        gemm_tune_call(ctx, &p, d_a, d_b, d_c, stream);
    }
    launch_dims(&p, &blocks, &threads, &smem);
    if ((st = tk__op_check_grid(ctx, p.op, blocks, threads, p.splits)) != TK_OK)
        return st;
    if (p.K / 16 > INT32_MAX) /* the kernels count K tiles in 32-bit */
        return tk__fail(ctx, TK_UNSUPPORTED,
                        "%s: reduction length %lld is beyond the kernel's range", p.op,
                        (long long)p.K);

    build_desc(&p, tk_context_policy(ctx), &d);
    plan_universal(&p, &u);
    build_desc(&u, TK_POLICY_GENERIC, &ud);
    {
        int used_fallback = 0;
        st = tk__op_kernel_pick(ctx, &d.desc, desc_same(&d, &ud) ? NULL : &ud.desc, 1, &kernel,
                                &used_fallback);
        if (st != TK_OK)
            return st;
        if (!used_fallback && p.splits > 1) {
            /* Split-K needs its reduce kernel too: ready, or the universal
             * kernel serves this call while it is built. */
            build_reduce_desc(&p, &rd);
            st = tk__op_kernel_ready(ctx, &rd.desc, &reduce);
            if (st == TK_NOT_FOUND) {
                st = tk__op_kernel_fallback(ctx, &ud.desc, 1, &kernel);
                used_fallback = 1;
            }
            if (st != TK_OK)
                return st;
        }
        if (used_fallback) {
            p = u;
            launch_dims(&p, &blocks, &threads, &smem);
            if ((st = tk__op_check_grid(ctx, p.op, blocks, threads, 1)) != TK_OK)
                return st;
        }
    }
    return gemm_exec(ctx, &p, kernel, reduce, d_a, d_b, d_c, stream);
}

/* Runs p with its kernel (and the reduce kernel when split) into c. */
static tk_status gemm_exec(tk_context *ctx, const gemm_plan *p, tk_kernel *kernel,
                           tk_kernel *reduce, const void *d_a, const void *d_b, void *d_c,
                           void *stream)
{
    int64_t blocks;
    unsigned threads, smem;
    tk_status st;
    launch_dims(p, &blocks, &threads, &smem);
    if (p->splits > 1) {
        /* Both kernels first (by the caller), so a compile failure enqueues
         * nothing. */
        void *ws = NULL;
        st = tk__op_workspace_acquire(ctx, stream,
                                      (size_t)p->splits * (size_t)p->M * (size_t)p->N * 4u, &ws);
        if (st != TK_OK)
            return st;
        st = gemm_launch(ctx, p, kernel, blocks, threads, smem, d_a, d_b, ws, p->N, NULL, stream);
        if (st == TK_OK) {
            const unsigned rgrid[3] = {(unsigned)reduce_blocks(p), 1, 1};
            const unsigned rblock[3] = {REDUCE_THREADS, 1, 1};
            long long m = p->M, n = p->N, lc = p->ldc;
            int splits = p->splits;
            void *rargs[] = {&ws, &d_c, &m, &n, &lc, &splits};
            /* After a split grid of one wave, the reduce is launched as its
             * programmatic dependent: it is launched while the split kernel
             * runs and starts summing as it completes (the kernel waits in
             * griddepcontrol.wait). H100, bench/sweep: fwd 128x1024x2816
             * (split 5) 61 -> 65 TF/s, 2048x64x2048 53 -> 59. Not after
             * longer grids (earlier measurements, bench/NOTES-gemm.md). */
            if (p->tma && pdl_enabled() && blocks * p->splits <= p->sms)
                st = tk__kernel_launch_pdl(ctx, reduce, rgrid, rblock, 0, stream, rargs);
            else
                st = tk_kernel_launch(ctx, reduce, rgrid, rblock, 0, stream, rargs);
        }
        tk__op_workspace_release(ctx);
        return st;
    }
    if (p->tma && p->persist == 2) {
        /* stream-K: a flag and a partial tile (128 x BN fp32) per block */
        void *ws = NULL;
        st = tk__op_workspace_acquire(ctx, stream,
                                      (size_t)blocks * (8u + (size_t)p->wg_bm * (size_t)p->wg_bn * 4u),
                                      &ws);
        if (st != TK_OK)
            return st;
        st = gemm_launch(ctx, p, kernel, blocks, threads, smem, d_a, d_b, d_c, p->ldc, ws, stream);
        tk__op_workspace_release(ctx);
        return st;
    }
    return gemm_launch(ctx, p, kernel, blocks, threads, smem, d_a, d_b, d_c, p->ldc, NULL, stream);
}

/* Launches the GEMM kernel of p into c (leading dimension ldc: the output's,
 * or N for the split-K workspace). */
static tk_status gemm_launch(tk_context *ctx, const gemm_plan *p, tk_kernel *kernel, int64_t blocks,
                             unsigned threads, unsigned smem, const void *d_a, const void *d_b,
                             void *d_c, int64_t ldc, void *skw, void *stream)
{
    tk_status st;
    if (p->swap) { /* the kernel's A is the op's B side (plan_swap) */
        const void *t = d_a;
        d_a = d_b;
        d_b = t;
    }
    {
        const unsigned grid[3] = {(unsigned)blocks, (unsigned)p->splits, 1};
        const unsigned block[3] = {threads, 1, 1};
        long long m = p->M, n = p->N, k = p->K, la = p->lda, lb = p->ldb, lc = ldc;
        if (p->tma) {
            /* Stored operands as row-major matrices; boxes of 64 columns (128
             * bytes, the swizzle width) by the kernel's rows per copy. */
            gemm_tmap ma, mb;
            /* clusters load A in 64-row boxes, half of them per block; 64-row
             * tiles in one */
            if (p->a_kmajor)
                st = tmap_get(ctx, &ma, d_a, (uint64_t)p->M, (uint64_t)p->K, (uint64_t)p->lda * 2,
                              64, p->cluster > 1 || p->wg_bm == 64 ? 64 : 128, 2);
            else
                st = tmap_get(ctx, &ma, d_a, (uint64_t)p->K, (uint64_t)p->M,
                                        (uint64_t)p->lda * 2, 64, 64, 2);
            if (st != TK_OK)
                return st;
            if (p->b_kmajor)
                st = tmap_get(ctx, &mb, d_b, (uint64_t)p->N, (uint64_t)p->K,
                                        (uint64_t)p->ldb * 2, 64, (unsigned)p->wg_bn, 2);
            else
                st = tmap_get(ctx, &mb, d_b, (uint64_t)p->K, (uint64_t)p->N,
                                        (uint64_t)p->ldb * 2, 64, 64, 2);
            if (st != TK_OK)
                return st;
            gemm_tmap mc;
            memset(&mc, 0, sizeof mc);
            if (p->epi_tma) {
                const unsigned es = p->out_f16 ? 2u : 4u;
                st = tmap_get(ctx, &mc, d_c, (uint64_t)p->M, (uint64_t)p->N,
                                        (uint64_t)ldc * es, 128u / es, 128, es);
                if (st != TK_OK)
                    return st;
            }
            /* stream-K flag value: new for every launch (see the kernel) */
            static unsigned epoch;
            unsigned long long tag =
                (0x7F4A7C15ull << 32) | __atomic_add_fetch(&epoch, 1u, __ATOMIC_RELAXED);
            void *targs[] = {ma.b, mb.b, mc.b, (void *)&d_c, &m, &n, &k, &lc, &skw, &tag};
            if (pdl_enabled())
                return tk__kernel_launch_pdl(ctx, kernel, grid, block, smem, stream, targs);
            return tk_kernel_launch(ctx, kernel, grid, block, smem, stream, targs);
        }
        void *args[] = {(void *)&d_a, (void *)&d_b, (void *)&d_c, &m, &n, &k, &la, &lb, &lc};
        return tk_kernel_launch(ctx, kernel, grid, block, smem, stream, args);
    }
}

tk_status tk_gemm_f16_fwd(tk_context *ctx, int64_t M, int64_t N, int64_t K, const void *d_A,
                          int64_t lda, const void *d_B, int64_t ldb, float *d_C, int64_t ldc,
                          void *stream)
{
    return gemm_run(ctx, TK_OP_GEMM_F16_FWD, M, N, K, d_A, lda, "d_A", "lda", d_B, ldb, "d_B",
                    "ldb", d_C, ldc, "d_C", "ldc", stream);
}

tk_status tk_gemm_f16_grad_a(tk_context *ctx, int64_t M, int64_t N, int64_t K, const void *d_grad_C,
                             int64_t ldgc, const void *d_B, int64_t ldb, void *d_grad_A,
                             int64_t ldga, void *stream)
{
    return gemm_run(ctx, TK_OP_GEMM_F16_GRAD_A, M, N, K, d_grad_C, ldgc, "d_grad_C", "ldgc", d_B,
                    ldb, "d_B", "ldb", d_grad_A, ldga, "d_grad_A", "ldga", stream);
}

tk_status tk_gemm_f16_grad_b(tk_context *ctx, int64_t M, int64_t N, int64_t K, const void *d_A,
                             int64_t lda, const void *d_grad_C, int64_t ldgc, void *d_grad_B,
                             int64_t ldgb, void *stream)
{
    return gemm_run(ctx, TK_OP_GEMM_F16_GRAD_B, M, N, K, d_A, lda, "d_A", "lda", d_grad_C, ldgc,
                    "d_grad_C", "ldgc", d_grad_B, ldgb, "d_grad_B", "ldgb", stream);
}

/* The heuristics' plan of a packed call from an allocator (256-byte
 * aligned pointers). */
static void plan_packed_heuristic(tk_context *ctx, tk_op op, int64_t M, int64_t N, int64_t K,
                                  gemm_plan *p)
{
    plan_op(op, M, N, K, p);
    p->lda = p->a_kmajor ? p->K : p->M;
    p->ldb = p->b_kmajor ? p->K : p->N;
    p->ldc = p->N;
    plan_target(ctx, p);
    plan_alignment(p, NULL, NULL, NULL);
    plan_wgmma(p);
    plan_split(p);
    plan_grid(p);
    plan_skinny(p);
    plan_smallk(p);
}

/* ... and with the class's tuning record, as a call would plan it. */
static void plan_packed(tk_context *ctx, tk_op op, int64_t M, int64_t N, int64_t K, gemm_plan *p)
{
    plan_packed_heuristic(ctx, op, M, N, K, p);
    plan_tuned(ctx, p);
}


/* Distinct kernels of a precompile (descriptions compared in full). */
typedef struct desc_set {
    gemm_desc d[128];
    int n, overflow;
} desc_set;

static int desc_set_add(desc_set *set, const gemm_desc *d)
{
    for (int i = 0; i < set->n; i++)
        if (strcmp(set->d[i].desc.entry, d->desc.entry) == 0 && desc_same(&set->d[i], d))
            return 0;
    if (set->n == (int)(sizeof set->d / sizeof set->d[0])) {
        set->overflow = 1;
        return -1;
    }
    set->d[set->n] = *d;
    /* the copy's defines must point into the copy */
    set->d[set->n].desc.defines = set->d[set->n].defs;
    for (size_t i = 0; i < d->desc.n_defines; i++)
        set->d[set->n].defs[i].value = set->d[set->n].text[i];
    set->n++;
    return 1;
}

static void add_plan(desc_set *set, const gemm_plan *p, tk_policy policy)
{
    gemm_desc d;
    build_desc(p, policy, &d);
    desc_set_add(set, &d);
    if (p->splits > 1) {
        build_reduce_desc(p, &d);
        desc_set_add(set, &d);
    }
}

/* Under the exact policy, the kernels of exactly this shape. Under stable and
 * generic, M (the token count) is not part of any kernel, only of the variant
 * choice, so every kernel any M can use with these N and K is compiled: the
 * variant of each M up to M_CLASS_LIMIT and beyond, plus the universal
 * fallback of the layout. A warm cache then serves every token count a
 * training run produces without a compile or a wait. */
tk_status tk__gemm_precompile(tk_context *ctx, tk_op op, const int64_t *dims, unsigned *n_compiled,
                              unsigned *n_cached)
{
    const tk_policy policy = tk_context_policy(ctx);
    gemm_plan p, u;
    desc_set *set;
    tk_status st = TK_OK;

    plan_op(op, dims[0], dims[1], dims[2], &p);
    if (tk__op_check_product(ctx, p.op, "M x K", dims[0], dims[2], 4) != TK_OK ||
        tk__op_check_product(ctx, p.op, "K x N", dims[2], dims[1], 4) != TK_OK ||
        tk__op_check_product(ctx, p.op, "M x N", dims[0], dims[1], 4) != TK_OK)
        return TK_OVERFLOW;
    set = calloc(1, sizeof *set);
    if (set == NULL)
        return tk__fail(ctx, TK_OUT_OF_MEMORY, "%s: out of memory", p.op);
    if (policy == TK_POLICY_EXACT) {
        plan_packed(ctx, op, dims[0], dims[1], dims[2], &p);
        add_plan(set, &p, policy);
    } else {
        static const int64_t beyond[] = {M_CLASS_LIMIT * 2, (int64_t)1 << 20, (int64_t)1 << 24};
        for (int64_t m = 1; m <= M_CLASS_LIMIT; m++) {
            plan_packed(ctx, op, m, dims[1], dims[2], &p);
            add_plan(set, &p, policy);
        }
        for (size_t i = 0; i < sizeof beyond / sizeof beyond[0]; i++) {
            if (tk__op_check_product(ctx, p.op, "M x K", beyond[i], dims[2], 4) != TK_OK ||
                tk__op_check_product(ctx, p.op, "M x N", beyond[i], dims[1], 4) != TK_OK)
                break;
            plan_packed(ctx, op, beyond[i], dims[1], dims[2], &p);
            add_plan(set, &p, policy);
        }
        plan_packed(ctx, op, dims[0], dims[1], dims[2], &p);
        plan_universal(&p, &u);
        add_plan(set, &u, TK_POLICY_GENERIC);
    }
    for (int i = 0; st == TK_OK && i < set->n; i++)
        st = tk__op_kernel(ctx, &set->d[i].desc, NULL, n_compiled, n_cached);
    if (st == TK_OK && set->overflow)
        st = tk__fail(ctx, TK_INTERNAL, "%s: more kernel variants than the precompile tracks (%d)",
                      p.op, set->n);
    free(set);
    return st;
}

/* ------------------------------------------------------------- the tuner
 *
 * Candidates of a class: the heuristics' plan, the skinny and small-K
 * kernels where they fit, swapped 256-, 128- and 64-row tiles (for each
 * round count its narrowest width; 256 and 128 rows also in clusters of
 * two), the TMA kernel with 64- to 256-column tiles (persistent grid or
 * not, when there is more than a wave of tiles; each epilogue; in clusters
 * of two sharing A), K-major B's widths 144-240 (persistent or not, each
 * epilogue), 64-row tiles (for each round count its narrowest width), the
 * TMA kernel split 2..8 ways on 64- and 128-row tiles 64 and 128 wide when
 * its tiles fill less than the chip, the three smaller mma.sync tiles
 * unsplit and split 2 or 4 ways (on sm_90 only when the output has few
 * tiles; elsewhere always, with the large mma.sync tile too); at most
 * TUNE_MAX_CANDS. Each is compiled (in parallel), run once, then
 * timed with device events in batches of back-to-back launches (about half
 * a millisecond each, best of three, after warm-up runs); the fastest is the
 * record when it beats the heuristics' configuration by TUNE_MARGIN. */
#define TUNE_MAX_CANDS 128
#define TUNE_JOBS 8
#define TUNE_MARGIN 1.03

typedef struct tune_cand {
    gemm_plan p;
    gemm_desc d, rd;
    tk_kernel *k, *rk;
    char text[64];
    double us;
    tk_status st;
} tune_cand;

static int tune_add(tune_cand *c, int n, const gemm_plan *q)
{
    gemm_cfg cfg;
    char text[64];
    if (n >= TUNE_MAX_CANDS)
        return n;
    cfg_of_plan(q, &cfg);
    cfg_text(&cfg, text, sizeof text);
    for (int i = 0; i < n; i++)
        if (strcmp(c[i].text, text) == 0)
            return n;
    memset(&c[n], 0, sizeof c[n]);
    c[n].p = *q;
    memcpy(c[n].text, text, sizeof text);
    return n + 1;
}

/* base: the heuristics' plan (candidate 0). */
static int tune_candidates(const gemm_plan *base, tune_cand *c)
{
    static const int tma_splits[] = {2, 3, 4, 6, 8};
    static const int mma_splits[] = {1, 2, 4};
    int n = tune_add(c, 0, base);
    gemm_cfg cfg;
    gemm_plan q, o = *base;
    if (o.swap) /* the op's own terms */
        plan_swap(&o);
    const int64_t t128 = ((o.M + 127) / 128) * ((o.N + 127) / 128);
    const int tma_ok = TK_GEMM_TMA && base->sm90 && base->aligned;
    cfg = (gemm_cfg){.skinny = 1, .splits = 1};
    q = *base;
    if (plan_apply(&q, &cfg))
        n = tune_add(c, n, &q);
    cfg = (gemm_cfg){.smallk = 1, .splits = 1};
    q = *base;
    if (plan_apply(&q, &cfg))
        n = tune_add(c, n, &q);
    /* swapped 256-, 128- and 64-row tiles: for each round count, its
     * narrowest width, alone and (not 64 rows) in clusters of two */
    for (int bm = 256; tma_ok && bm >= 64; bm /= 2)
        for (int bn = bm == 256 ? SWAP_BN_MIN : 32, last = 0;
             bn <= (bm == 64 ? 256 : SWAP_BN_MAX); bn += 16) {
            const int64_t rounds =
                ((o.N + bm - 1) / bm * ((o.M + bn - 1) / bn) + base->sms - 1) / base->sms;
            if (rounds == last)
                continue;
            last = (int)rounds;
            for (int cl = 0; cl <= (bm == 64 ? 0 : 2); cl += 2) {
                cfg = (gemm_cfg){.tma = 1, .bn = bn, .bm = bm, .swap = 1, .cluster = cl,
                                 .splits = 1};
                q = *base;
                if (plan_apply(&q, &cfg))
                    n = tune_add(c, n, &q);
            }
        }
    for (int b = 0; tma_ok && b < N_TMA_BNS; b++) {
        const int bn = tma_bns[b];
        const int64_t tiles = ((o.M + 127) / 128) * ((o.N + bn - 1) / bn);
        for (int persist = 0; persist <= (tiles > base->sms ? 2 : 0); persist++)
            for (int epi = 0; epi <= 1; epi++) {
                cfg = (gemm_cfg){.tma = 1, .bn = bn, .bm = 128, .persist = persist,
                                 .epi = epi, .splits = 1};
                q = *base;
                if (plan_apply(&q, &cfg))
                    n = tune_add(c, n, &q);
            }
        /* clusters of two sharing A (a block per tile) */
        if (tiles >= 2 && tiles <= 2 * base->sms) {
            cfg = (gemm_cfg){.tma = 1, .bn = bn, .bm = 128, .epi = base->c16, .cluster = 2,
                             .splits = 1};
            q = *base;
            if (plan_apply(&q, &cfg))
                n = tune_add(c, n, &q);
        }
    }
    /* K-major B: widths between 128 and 256 in steps of 16, the narrowest
     * of each round count */
    for (int bn = 144, last = 0; tma_ok && o.b_kmajor && bn < 256; bn += 16) {
        const int64_t rounds =
            (((o.M + 127) / 128) * ((o.N + bn - 1) / bn) + base->sms - 1) / base->sms;
        if (rounds == last || bn == 192)
            continue;
        last = (int)rounds;
        /* a block per tile and, past a wave, the persistent grid; each with
         * the staged and the TMA-store epilogue */
        for (int persist = 0; persist <= (rounds > 1 ? 1 : 0); persist++)
            for (int epi = 0; epi <= 1; epi++) {
                cfg = (gemm_cfg){.tma = 1, .bn = bn, .bm = 128, .persist = persist, .epi = epi,
                                 .splits = 1};
                q = *base;
                if (plan_apply(&q, &cfg))
                    n = tune_add(c, n, &q);
            }
    }
    /* 64-row tiles: widths in steps of 16 (K-major B) or 64, the
     * narrowest of each round count */
    for (int bn = o.b_kmajor ? 32 : 64, last = 0; tma_ok && bn <= 256;
         bn += o.b_kmajor ? 16 : 64) {
        const int64_t rounds =
            (((o.M + 63) / 64) * ((o.N + bn - 1) / bn) + base->sms - 1) / base->sms;
        if (rounds == last)
            continue;
        last = (int)rounds;
        cfg = (gemm_cfg){.tma = 1, .bn = bn, .bm = 64, .splits = 1};
        q = *base;
        if (plan_apply(&q, &cfg))
            n = tune_add(c, n, &q);
    }
    for (size_t i = 0; tma_ok && t128 < base->sms && i < sizeof tma_splits / sizeof *tma_splits;
         i++) {
        for (int bm = 64; bm <= 128; bm += 64)
            for (int bn = 64; bn <= 128; bn += 64) {
                cfg = (gemm_cfg){.tma = 1, .bn = bn, .bm = bm, .splits = tma_splits[i]};
                q = *base;
                if (plan_apply(&q, &cfg) && q.splits > 1)
                    n = tune_add(c, n, &q);
            }
    }
    for (int t = tma_ok ? 1 : 0; t < N_TILES; t++) {
        if (tma_ok && t128 >= 2 * base->sms)
            break;
        for (size_t i = 0; i < sizeof mma_splits / sizeof *mma_splits; i++) {
            cfg = (gemm_cfg){.tma = 0, .tile = t, .splits = mma_splits[i]};
            q = *base;
            if (plan_apply(&q, &cfg) && (mma_splits[i] == 1 || q.splits > 1))
                n = tune_add(c, n, &q);
        }
    }
    return n;
}

typedef struct tune_jobs {
    tk_context *ctx;
    tune_cand *c;
    int n, next;
    pthread_mutex_t mu;
} tune_jobs;

static void *tune_compile_worker(void *arg)
{
    tune_jobs *j = arg;
    for (;;) {
        pthread_mutex_lock(&j->mu);
        const int i = j->next++;
        pthread_mutex_unlock(&j->mu);
        if (i >= j->n)
            return NULL;
        tune_cand *c = &j->c[i];
        c->st = tk__op_kernel(j->ctx, &c->d.desc, &c->k, NULL, NULL);
        if (c->st == TK_OK && c->p.splits > 1)
            c->st = tk__op_kernel(j->ctx, &c->rd.desc, &c->rk, NULL, NULL);
    }
}

/* Compiles (or finds) every candidate's kernels, TUNE_JOBS at a time. */
static void tune_compile(tk_context *ctx, tune_cand *c, int n)
{
    tune_jobs j = {.ctx = ctx, .c = c, .n = n, .next = 0};
    pthread_t th[TUNE_JOBS];
    int started = 0;
    const tk_policy policy = tk_context_policy(ctx);
    for (int i = 0; i < n; i++) {
        build_desc(&c[i].p, policy, &c[i].d);
        if (c[i].p.splits > 1)
            build_reduce_desc(&c[i].p, &c[i].rd);
    }
    pthread_mutex_init(&j.mu, NULL);
    for (int i = 0; i < TUNE_JOBS && i < n; i++)
        if (pthread_create(&th[i], NULL, tune_compile_worker, &j) == 0)
            started++;
    if (started == 0)
        tune_compile_worker(&j);
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    pthread_mutex_destroy(&j.mu);
}

/* Operand sets the timed launches take in turn: one (the caller's buffers,
 * TOKITAI_JIT_TUNE=auto) or, for tokitai-jit --tune, as many copies as
 * make the operands of consecutive launches exceed L2 (TUNE_COLD_BYTES), so
 * that each launch reads its operands from device memory, as the calls of a
 * training step mostly do (their weights and activations do not stay in L2
 * between uses); bench/sweep times the same way. */
#define TUNE_SETS_MAX 8
#define TUNE_COLD_BYTES (200.0 * 1024 * 1024)
#define TUNE_SETS_BYTES_MAX (2048.0 * 1024 * 1024)
typedef struct tune_ops {
    const void *a[TUNE_SETS_MAX], *b[TUNE_SETS_MAX];
    void *out[TUNE_SETS_MAX];
    int n;
} tune_ops;

typedef struct tune_run {
    tk_context *ctx;
    const tune_cand *c;
    const tune_ops *ops;
    void *stream;
    int reps;
} tune_run;

static tk_status tune_run_fn(void *user)
{
    const tune_run *r = user;
    const tune_ops *o = r->ops;
    tk_status st = TK_OK;
    for (int i = 0; st == TK_OK && i < r->reps; i++) {
        const int j = i % o->n;
        st = gemm_exec(r->ctx, &r->c->p, r->c->k, r->c->rk, o->a[j], o->b[j], o->out[j],
                       r->stream);
    }
    return st;
}

/* Microseconds per launch of candidate c: three untimed runs (the first
 * launch of a kernel pays lazy module loading and attribute setup, which
 * must not size the batches), an estimate from a batch of 10, then the
 * best of three batches of about half a millisecond (10 to 1000 launches),
 * each launch on the next operand set of ops. */
static tk_status tune_time(tk_context *ctx, const tune_cand *c, const tune_ops *ops, void *stream,
                           double *us)
{
    tune_run r = {ctx, c, ops, stream, 3};
    float ms = 0.0f;
    double best = 1e30;
    tk_status st = tk_time_on_stream(ctx, stream, tune_run_fn, &r, &ms);
    r.reps = 10;
    if (st == TK_OK)
        st = tk_time_on_stream(ctx, stream, tune_run_fn, &r, &ms);
    if (st != TK_OK)
        return st;
    r.reps = ms > 0.0f ? (int)(0.5 * r.reps / ms) : 1000;
    if (r.reps < 10)
        r.reps = 10;
    if (r.reps > 1000)
        r.reps = 1000;
    for (int t = 0; t < 3; t++) {
        if ((st = tk_time_on_stream(ctx, stream, tune_run_fn, &r, &ms)) != TK_OK)
            return st;
        if (ms / r.reps < best)
            best = ms / r.reps;
    }
    *us = best * 1000.0;
    return TK_OK;
}

/* Tunes base's class (base: the heuristics' plan, its op dims the class's
 * representative) on the given operands and stream; stores the record. */
/* 1 when got matches want (the heuristics' output) within what the
 * configurations may differ by: fp32 sums in another order, one fp16
 * rounding. NaN anywhere fails. */
static int tune_same(const gemm_plan *p, const void *got, const void *want, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float g, w;
        if (p->out_f16) {
            g = tk_f16_to_f32(((const uint16_t *)got)[i]);
            w = tk_f16_to_f32(((const uint16_t *)want)[i]);
        } else {
            g = ((const float *)got)[i];
            w = ((const float *)want)[i];
        }
        if (!(fabsf(g - w) <= 4e-3f * (fabsf(w) + 1.0f)))
            return 0;
    }
    return 1;
}

/* Runs c once into out and compares with the heuristics' output `want`
 * (host copy). 1: same. */
static int tune_check(tk_context *ctx, const tune_cand *c, const void *a, const void *b, void *out,
                      void *stream, const void *want, void *host, size_t bytes)
{
    if (gemm_exec(ctx, &c->p, c->k, c->rk, a, b, out, stream) != TK_OK ||
        tk_stream_sync(ctx, stream) != TK_OK || tk_mem_download(ctx, host, out, bytes) != TK_OK)
        return 0;
    return tune_same(&c->p, host, want, bytes / (c->p.out_f16 ? 2 : 4));
}

static tk_status tune_class(tk_context *ctx, const gemm_plan *base, const tune_ops *ops,
                            void *stream, tk_tune_report *rep)
{
    /* the winner's check and the output left behind: the first set */
    const void *a = ops->a[0], *b = ops->b[0];
    void *out = ops->out[0];
    tune_cand *c = calloc(TUNE_MAX_CANDS, sizeof *c);
    char name[64];
    int n, best = -1;
    tk_status st = TK_OK;
    tk_context_stats before = TK_STRUCT_INIT(tk_context_stats), after = before;
    if (c == NULL)
        return tk__fail(ctx, TK_OUT_OF_MEMORY, "%s: tuning: out of memory", base->op);
    n = tune_candidates(base, c);
    tk_context_get_stats(ctx, &before);
    tune_compile(ctx, c, n);
    tk_context_get_stats(ctx, &after);
    rep->compiled = (unsigned)(after.compiles - before.compiles);
    for (int i = 0; i < n; i++) {
        if (c[i].st != TK_OK) {
            /* the heuristics' own kernel must build; a candidate may not */
            if (i == 0) {
                st = c[i].st;
                break;
            }
            tk__log(ctx, TK_LOG_WARN, "%s: tuning candidate '%s' did not build: %s", base->op,
                    c[i].text, tk_status_str(c[i].st));
            continue;
        }
        c[i].st = tune_time(ctx, &c[i], ops, stream, &c[i].us);
        if (c[i].st != TK_OK) {
            if (i == 0) {
                st = c[i].st;
                break;
            }
            continue;
        }
        if (rep->candidates < sizeof rep->timed / sizeof rep->timed[0]) {
            snprintf(rep->timed[rep->candidates].config, sizeof rep->timed[0].config, "%s",
                     c[i].text);
            rep->timed[rep->candidates].us = c[i].us;
        }
        rep->candidates++;
        if (best < 0 || c[i].us < c[best].us)
            best = i;
    }
    /* A record replaces the heuristics only for a clear gain: within 3% the
     * heuristics' own configuration is kept (and recorded), so that noise
     * between near-equal candidates does not pick for the class. */
    if (best > 0 && c[0].st == TK_OK && c[best].us > c[0].us / TUNE_MARGIN)
        best = 0;
    if (st == TK_OK && best < 0)
        st = tk__fail(ctx, TK_INTERNAL, "%s: tuning: no candidate ran", base->op);
    if (st == TK_OK && best != 0) {
        /* The winner must reproduce the heuristics' output (within the
         * reordering split-K causes), else the next fastest is tried. */
        const size_t bytes = (size_t)base->M * (size_t)base->N * (base->out_f16 ? 2u : 4u);
        void *want = malloc(bytes), *host = malloc(bytes);
        int ok = want != NULL && host != NULL &&
                 gemm_exec(ctx, &c[0].p, c[0].k, c[0].rk, a, b, out, stream) == TK_OK &&
                 tk_stream_sync(ctx, stream) == TK_OK &&
                 tk_mem_download(ctx, want, out, bytes) == TK_OK;
        while (ok && best != 0 && !tune_check(ctx, &c[best], a, b, out, stream, want, host, bytes)) {
            tk__log(ctx, TK_LOG_WARN,
                    "%s: tuning candidate '%s' does not reproduce the heuristics' output: "
                    "dropped",
                    base->op, c[best].text);
            rep->rejected++;
            c[best].st = TK_INTERNAL;
            best = 0;
            for (int i = 1; i < n; i++)
                if (c[i].st == TK_OK && c[i].us < c[best].us)
                    best = i;
        }
        if (!ok)
            st = tk__fail(ctx, TK_OUT_OF_MEMORY, "%s: tuning: could not check the winner",
                          base->op);
        else if (best != 0) /* leave the winner's output in out, as a call would */
            st = gemm_exec(ctx, &c[best].p, c[best].k, c[best].rk, a, b, out, stream);
        free(want);
        free(host);
    }
    if (st == TK_OK) {
        record_name(base, name);
        snprintf(rep->record, sizeof rep->record, "%s %s M<=%lld", base->op + 3, name,
                 (long long)m_class_max(base->om));
        snprintf(rep->chosen, sizeof rep->chosen, "%s", c[best].text);
        snprintf(rep->heuristic, sizeof rep->heuristic, "%s", c[0].text);
        rep->chosen_us = c[best].us;
        rep->heuristic_us = c[0].us;
        rep->timed_m = base->om;
        /* The record; a failure to store it (read-only cache) still leaves it
         * in force for this context. */
        rep->stored = record_store(ctx, base, c[best].text) == TK_OK;
    }
    free(c);
    return st;
}

/* Pseudo-random fp16 values in [-1, 1) (xorshift), for the tuner's operands. */
static void tune_fill(uint16_t *h, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        h[i] = tk_f32_to_f16((float)((int64_t)(x >> 40) - (1 << 23)) / (float)(1 << 23));
    }
}

tk_status tk__gemm_tune(tk_context *ctx, tk_op op, const int64_t *dims, tk_tune_report *rep)
{
    gemm_plan base;
    tune_ops ops;
    uint16_t *h = NULL;
    size_t na, nb, nc, nmax;
    tk_status st;
    memset(rep, 0, sizeof *rep);
    memset(&ops, 0, sizeof ops);
    plan_op(op, m_class_max(dims[0]), dims[1], dims[2], &base);
    if ((st = tk__op_need_device(ctx, base.op)) != TK_OK)
        return st;
    if (tk__op_check_product(ctx, base.op, "M x K", base.om, base.ok, 4) != TK_OK ||
        tk__op_check_product(ctx, base.op, "K x N", base.ok, base.on, 4) != TK_OK ||
        tk__op_check_product(ctx, base.op, "M x N", base.om, base.on, 4) != TK_OK)
        return TK_OVERFLOW;
    plan_packed_heuristic(ctx, op, base.om, base.on, base.ok, &base);
    if (base.amd || base.simple)
        return tk__fail(ctx, TK_UNSUPPORTED,
                        "%s: tuning needs an NVIDIA target of sm_80 or later (target %s has one "
                        "kernel configuration)",
                        base.op, tk_context_target(ctx));
    /* the operands as the op stores them: the kernel's A and B before any
     * swap (plan_swap exchanges them with M and N) */
    gemm_plan o = base;
    if (o.swap)
        plan_swap(&o);
    na = (size_t)o.M * (size_t)o.K;
    nb = (size_t)o.K * (size_t)o.N;
    nc = (size_t)o.M * (size_t)o.N * (o.out_f16 ? 1 : 2); /* in halves */
    nmax = na > nb ? na : nb;
    /* sets enough that consecutive launches do not find theirs in L2 */
    {
        const double set = 2.0 * (double)(na + nb + nc);
        ops.n = (int)(TUNE_COLD_BYTES / set) + 1;
        if (ops.n > TUNE_SETS_MAX)
            ops.n = TUNE_SETS_MAX;
        while (ops.n > 1 && (double)ops.n * set > TUNE_SETS_BYTES_MAX)
            ops.n--;
    }
    h = malloc(nmax * 2);
    if (h == NULL) {
        st = tk__fail(ctx, TK_OUT_OF_MEMORY, "%s: tuning: out of host memory", base.op);
        goto done;
    }
    for (int i = 0; i < ops.n; i++) {
        void *a = NULL, *b = NULL, *c = NULL;
        st = tk_mem_alloc(ctx, na * 2, &a);
        ops.a[i] = a;
        if (st == TK_OK)
            st = tk_mem_alloc(ctx, nb * 2, &b);
        ops.b[i] = b;
        if (st == TK_OK)
            st = tk_mem_alloc(ctx, nc * 2, &c);
        ops.out[i] = c;
        if (st != TK_OK)
            goto done;
        tune_fill(h, na, 2 * (uint64_t)i + 1);
        if ((st = tk_mem_upload(ctx, a, h, na * 2)) != TK_OK)
            goto done;
        tune_fill(h, nb, 2 * (uint64_t)i + 2);
        if ((st = tk_mem_upload(ctx, b, h, nb * 2)) != TK_OK)
            goto done;
    }
    st = tune_class(ctx, &base, &ops, NULL, rep);
    if (st == TK_OK)
        st = tk_stream_sync(ctx, NULL);
done:
    free(h);
    for (int i = 0; i < TUNE_SETS_MAX; i++) {
        if (ops.a[i])
            tk_mem_free(ctx, (void *)ops.a[i]);
        if (ops.b[i])
            tk_mem_free(ctx, (void *)ops.b[i]);
        if (ops.out[i])
            tk_mem_free(ctx, ops.out[i]);
    }
    return st;
}

/* TOKITAI_JIT_TUNE=auto: the first call of a class without a record tunes
 * it on the caller's operands and stream (inputs are only read; the output
 * is written by every candidate and then by the call itself), then plans p
 * again from the new record. Costs the candidates' compiles (seconds, once
 * per kernel and cache) and a few milliseconds of timing, and synchronises
 * the stream. A failure leaves p to the heuristics, and records their
 * configuration for the class (in the cache when it can), so that the class
 * is not tuned again on every call. */
static void gemm_tune_call(tk_context *ctx, gemm_plan *p, const void *d_a, const void *d_b,
                           void *d_c, void *stream)
{
    tk_tune_report rep = TK_STRUCT_INIT(tk_tune_report);
    gemm_plan base = *p;
    tune_ops ops;
    memset(&rep, 0, sizeof rep);
    memset(&ops, 0, sizeof ops);
    ops.a[0] = d_a, ops.b[0] = d_b, ops.out[0] = d_c, ops.n = 1;
    if (tune_class(ctx, &base, &ops, stream, &rep) == TK_OK) {
        tk__log(ctx, TK_LOG_INFO, "tuned %s: %s (%.1f us; heuristics %s, %.1f us)", rep.record,
                rep.chosen, rep.chosen_us, rep.heuristic, rep.heuristic_us);
        plan_tuned(ctx, p);
        return;
    }
    char name[64], text[64];
    gemm_cfg c;
    record_name(p, name);
    cfg_of_plan(p, &c);
    cfg_text(&c, text, sizeof text);
    tk__log(ctx, TK_LOG_WARN,
            "%s %s M<=%lld: tuning failed (%s); the heuristics' %s is kept for the class",
            p->op + 3, name, (long long)m_class_max(p->om), tk_context_last_error(ctx), text);
    (void)record_store(ctx, p, text);
}

/* ------------------------------------------------------------ references
 *
 * Products and sums in double (exact products of fp16 values; the sum's
 * error is far below fp32's), then one rounding: the forward returns that
 * sum rounded to fp32, NOT rounded through fp16 as the origin's oracle did
 * (the operator's output is fp32, so the reference keeps fp32 precision and
 * the tolerance can be tight); the gradients round to fp32 and then to fp16
 * (round to nearest even), the precision of their fp16 outputs. The double
 * to fp32 to fp16 path can differ from a direct rounding only on exact fp16
 * ties, by one fp16 ulp. Non-finite inputs propagate as IEEE arithmetic does
 * (0 * inf = NaN). Tolerances used against the device: |got - want| <=
 * 1e-5 * sum_k |a_k b_k| + 1e-6, plus 1e-3 * |want| (one fp16 ulp) for the
 * gradients: the device accumulates in fp32 in another order.
 */

/* Sizes > 0 and every product of two of them representable in bytes. */
static tk_status ref_check(int64_t M, int64_t N, int64_t K, const void *x, const void *y,
                           const void *out)
{
    if (M <= 0 || N <= 0 || K <= 0 || x == NULL || y == NULL || out == NULL)
        return TK_INVALID_ARGUMENT;
    if (M > INT64_MAX / 8 / K || K > INT64_MAX / 8 / N || M > INT64_MAX / 8 / N ||
        (uint64_t)M * (uint64_t)K > SIZE_MAX / 8 || (uint64_t)K * (uint64_t)N > SIZE_MAX / 8 ||
        (uint64_t)M * (uint64_t)N > SIZE_MAX / 8)
        return TK_OVERFLOW;
    return TK_OK;
}

static float *to_f32(const uint16_t *h, size_t n)
{
    float *f = malloc(n * sizeof *f);
    if (f != NULL)
        for (size_t i = 0; i < n; i++)
            f[i] = tk_f16_to_f32(h[i]);
    return f;
}

/* out[m,n] = sum_k x(m,k) * y[k,n] in double, x read through the strides
 * (xs_m, xs_k), y packed [K,N]. A row of out is accumulated a k at a time so
 * the inner loop runs along contiguous n. One rounding at the end (to fp32,
 * then to fp16 for the gradient outputs). */
static tk_status ref_core(int64_t M, int64_t N, int64_t K, const float *x, int64_t xs_m,
                          int64_t xs_k, const float *y, float *out_f32, uint16_t *out_f16)
{
    double *row = malloc((size_t)N * sizeof *row);
    if (row == NULL)
        return TK_OUT_OF_MEMORY;
    for (int64_t m = 0; m < M; m++) {
        for (int64_t n = 0; n < N; n++)
            row[n] = 0.0;
        for (int64_t k = 0; k < K; k++) {
            const double a = x[m * xs_m + k * xs_k];
            const float *yk = y + k * N;
            for (int64_t n = 0; n < N; n++)
                row[n] += a * (double)yk[n];
        }
        for (int64_t n = 0; n < N; n++) {
            if (out_f32 != NULL)
                out_f32[m * N + n] = (float)row[n];
            else
                out_f16[m * N + n] = tk_f32_to_f16((float)row[n]);
        }
    }
    free(row);
    return TK_OK;
}

/* which 0: x=A[M,K], y=B[K,N] -> C[M,N] fp32;
 * which 1: x=grad_C[M,N], y=B[K,N] -> grad_A[M,K] = x . y^T;
 * which 2: x=A[M,K], y=grad_C[M,N] -> grad_B[K,N] = x^T . y. */
static tk_status ref_gemm(int which, int64_t M, int64_t N, int64_t K, const uint16_t *x,
                          const uint16_t *y, float *out_f32, uint16_t *out_f16)
{
    tk_status st;
    float *xf = NULL, *yf = NULL;
    const size_t mk = (size_t)M * (size_t)K, kn = (size_t)K * (size_t)N, mn = (size_t)M * (size_t)N;

    xf = to_f32(x, which == 1 ? mn : mk);
    if (which == 1) {
        /* y^T as a packed [N,K] array so the core reads it along rows. */
        yf = malloc(kn * sizeof *yf);
        if (yf != NULL)
            for (int64_t k = 0; k < K; k++)
                for (int64_t n = 0; n < N; n++)
                    yf[n * K + k] = tk_f16_to_f32(y[k * N + n]);
    } else {
        yf = to_f32(y, which == 0 ? kn : mn);
    }
    if (xf == NULL || yf == NULL) {
        st = TK_OUT_OF_MEMORY;
        goto fail;
    }
    if (which == 0)
        st = ref_core(M, N, K, xf, K, 1, yf, out_f32, NULL);
    else if (which == 1)
        st = ref_core(M, K, N, xf, N, 1, yf, NULL, out_f16);
    else
        st = ref_core(K, N, M, xf, 1, K, yf, NULL, out_f16);
fail:
    free(xf);
    free(yf);
    return st;
}

tk_status tk_ref_gemm_f16_fwd(int64_t M, int64_t N, int64_t K, const uint16_t *A, const uint16_t *B,
                              float *C)
{
    tk_status st = ref_check(M, N, K, A, B, C);
    return st != TK_OK ? st : ref_gemm(0, M, N, K, A, B, C, NULL);
}

tk_status tk_ref_gemm_f16_grad_a(int64_t M, int64_t N, int64_t K, const uint16_t *grad_C,
                                 const uint16_t *B, uint16_t *grad_A)
{
    tk_status st = ref_check(M, N, K, grad_C, B, grad_A);
    return st != TK_OK ? st : ref_gemm(1, M, N, K, grad_C, B, NULL, grad_A);
}

tk_status tk_ref_gemm_f16_grad_b(int64_t M, int64_t N, int64_t K, const uint16_t *A,
                                 const uint16_t *grad_C, uint16_t *grad_B)
{
    tk_status st = ref_check(M, N, K, A, grad_C, grad_B);
    return st != TK_OK ? st : ref_gemm(2, M, N, K, A, grad_C, NULL, grad_B);
}
