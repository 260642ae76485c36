/*
 * GEMM planning: which kernel, tile, grid, epilogue and split serve a call.
 *
 * Every number the heuristics use is here, each beside the measurement it
 * was fitted to (tokitai-jit --tune or bench/sweep on an H100, cold
 * operands, cuBLAS in the same run; the runs are in bench/gemm-measurements.md).
 * The fitted ones, in the order of the planning steps:
 *
 *   tk__gemm_nv_tiles   mma.sync tiles and their stages        pick_tile
 *   tma_bns, tma_bn_eff TMA tile widths, throughput per area   tma_pick_bn
 *   TMA_KB_EFF          K-major B widths 144..240              tma_pick_bn
 *   ks_eff_tab          64-row tiles by width                  ks_eff
 *   SWAP_BN_MIN/MAX     256-row swapped tiles' widths          (gemm_internal.h)
 *   SWAP128_BN_MIN/MAX, SWAP128_WIDE_MIN  128-row swapped widths  swap_pick_bn
 *   swap_eff, KS_SWAP_EFF  swapped tiles' throughput           swap_pick_bn
 *   SWAP_GAIN, SWAP_GAIN_256(_MIN_K)  when a swapped plan wins plan_wgmma
 *   SWAP_GAIN_64, SWAP64_EVEN_MIN_K  64-row swapped tiles
 *                       against 128 x 64 ones                  swap64_even
 *   SWAP64_WIDE_MIN_K, SWAP64_WIDE_(LONG_)BN_MAX, _LONG_K  64-row
 *                       swapped tiles twice as wide as 128-row ones
 *                                                              swap64_wide
 *   SWAP_256_SHORT_K, SWAP_ONE_ROUND_BN_MIN/K_MAX  wide swapped tiles
 *                       over 256-row ones                      swap_one_round
 *   SWAP_NARROW_GAIN, SWAP_NARROW_MIN_TOKENS  narrow swapped tiles
 *                       on a long reduction                    plan_wgmma
 *   SPLIT_MIN_KT_*, SPLIT_WS_MAX, the split thresholds         plan_split
 *     (and the 256-wide split of long reductions)
 *   SPLIT_SWAP_*, SWAP_ONE_SPLITS, SWAP_ONE_SPLIT_STEPS  splits on
 *                       swapped tiles                          split_try_swap
 *   KS_NOSPLIT_K_MAX    no split where 64-row tiles fill       ks_fills_round
 *     (but TK_GEMM_KS_CL: split 2 summed in a cluster)          plan_split
 *   the persistent grid's threshold (more than a wave)         plan_grid
 *   PP_K_MAX, TK_GEMM_PP_ROUNDS  ping-pong on short reductions plan_grid_epi
 *   PP_F32_BN, PP_F32_FILL_*, PP_F32_TM_MIN, PP_F32_ROUNDS10  the forward's fp32
 *                       output ping-pong on short reductions   plan_pp_f32
 *   PAIRS_K_MIN, PAIRS_BN_MAX, PAIRS_TM_MIN, TK_GEMM_QUADS
 *                       clusters of two and of 2 x 2           plan_cluster
 *   GROUP16_N_MIN       the tile order's groups of 16 rows     plan_grid
 *   (no number) 256-row swapped pairs in two columns            plan_pair256
 *   (no number) swapped widths trimmed to steps of 8            plan_swap_trim
 *   SKINNY_*, SKINNY_WGRAD_*, SMALLK_K_MAX  the router's and small-K kernels
 *                                                              plan_skinny, plan_smallk
 *
 * The chip-independent ones (NV_SMS, M_CLASS_LIMIT, SPLIT_MAX, the build
 * switches TK_GEMM_*) are in gemm_internal.h.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/gemm/gemm_internal.h"

/* K tiles per split at least: 16 of 64 (1024 of K) on the TMA kernel, 8 of BK
 * (256-512) on mma.sync. On an H100 (bench/gemm-measurements.md) 1024^3 split in
 * two 512-long halves on the TMA kernel ran 0.48-0.62 of cuBLAS against
 * 0.63-0.81 unsplit on the mma.sync 64x64 tile; 16x4096x1024 on mma.sync ran
 * better with 256-long splits (1.02 / 1.49) than with 512 (0.77 / 1.31). */
#define SPLIT_MIN_KT_TMA 16
#define SPLIT_MIN_KT_MMA 8
/* fp32 partials kept below this (bytes): beyond it the shape has tiles enough */
#define SPLIT_WS_MAX ((int64_t)64 << 20)

/* Above 48 KiB of dynamic shared memory the engine's launch raises the
 * function's limit first (once per kernel). 4 stages on the large tile: 5%
 * over 3 on an H100 (bench/gemm-measurements.md). */
const gemm_tile tk__gemm_nv_tiles[N_TILES] = {
    {128, 128, 32, 2, 2, 4}, /* enough 128x128 tiles to fill the chip: 64 KiB */
    {64, 64, 32, 2, 2, 4},   /* mid sizes (~1024^2 outputs, K <= 2048): 32 KiB */
    {32, 64, 64, 1, 2, 4},   /* few output tiles, long K: 48 KiB */
    {16, 128, 32, 1, 4, 4},  /* one 16-row strip of tokens: 36 KiB */
};

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
        return &tk__gemm_nv_tiles[0];
    if (M <= 16)
        return &tk__gemm_nv_tiles[3];
    if (M * N >= (int64_t)768 * 1024 && K <= 2048)
        return &tk__gemm_nv_tiles[1];
    return &tk__gemm_nv_tiles[2];
}

/* sm_XX number of an NVIDIA target ("sm_90", "sm_90a"); 0 when unknown. */
static int sm_number(const char *target)
{
    if (target == NULL || strncmp(target, "sm_", 3) != 0)
        return 0;
    return atoi(target + 3);
}

void tk__gemm_plan_target(tk_context *ctx, gemm_plan *p)
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
 * only (128: 6). Fitted to tokitai-jit --tune on an H100 (bench/gemm-measurements.md):
 * the down projection at 4352-5504 tokens ran 3-9% faster on three rounds of
 * 128-wide tiles than on two of 192-wide ones. */
const int tk__gemm_tma_bns[N_TMA_BNS] = {64, 128, 192, 256};
static const double tma_bn_eff[] = {0.70, 0.90, 0.88, 1.0};

/* Ring stages for a TMA tile: as many as fit (at most the caps below)
 * beside the barriers in 227 KiB, and beside the TMA-store staging (32 KiB,
 * 64 for ping-pong tiles) where the plan keeps its room (room, in bytes:
 * tk__gemm_ring_room): 128-row tiles
 * 8 for 64 columns, 7 for 80, 6 for 96 and 128, 4 for 192 and 256; 256-row
 * tiles 4 up to 192 columns, 3 with the (swapped) TMA-store epilogue. The
 * heuristics choose the epilogue last (tk__gemm_plan_grid), which sets the
 * stages for it.
 * At most TK_GEMM_STAGES_MAX stages (8), 64-row tiles TK_GEMM_STAGES_KS
 * (8), or TK_GEMM_STAGES_KS_NARROW (12) where they are at most 64 wide: a
 * K step of such a tile is short (16 KiB or less), and the two warpgroups
 * take alternate ones. Measured on an H100 over bench/stagesmax-check.tkm
 * (the 64-row and narrow swapped tiles whose ring could grow; two runs
 * each way, one call per pair, bench/gemm-measurements.md): a cap of 12
 * made every 64 x 64 and 64 x 32 tile (70-250 tokens) 3-6% faster, but
 * 64 x 80-112 tiles at 540-780 tokens 1-8% slower (grad_a 776x3072x1024
 * 0.85 -> 0.81 of cuBLAS) and left them even at 130-300 tokens; a cap of 6
 * on 64-row tiles ran 12-25% slower everywhere. */
#ifndef TK_GEMM_STAGES_MAX
#define TK_GEMM_STAGES_MAX 8
#endif
#ifndef TK_GEMM_STAGES_KS
#define TK_GEMM_STAGES_KS TK_GEMM_STAGES_MAX
#endif
#ifndef TK_GEMM_STAGES_KS_NARROW
#define TK_GEMM_STAGES_KS_NARROW 12
#endif
/* Whether a 64-row TMA tile has one consumer warpgroup take every K step
 * (TK_KS_ONE) rather than the two alternate ones: tiles wider than 64 and
 * at most TK_GEMM_KS_ONE_MAX_BN columns (0: never). Measured on an H200
 * (bench/sweep, both forms in one call, two runs each, three calls,
 * docs/performance-gemm.md): 64 x 80-256 tiles 1-10% less time at every
 * shape measured but one (fwd 518 x 1024 x 4096 on 64 x 80 14.0 -> 13.2
 * us, 0.86 -> 0.92 of cuBLAS; fwd 704 x 3072 x 1024 on 64 x 256 11.9 ->
 * 10.7; split plans too), fwd 64 x 50304 x 1024 on 64 x 192 1.2% less in
 * one call and 0.6% more in another; tiles at most 64 wide 2-10% more at
 * 8 of 9 shapes (fwd 64 x 2816 x 1024 on 64 x 32 5.0 -> 5.5), so they
 * keep the two. */
#ifndef TK_GEMM_KS_ONE_MAX_BN
#define TK_GEMM_KS_ONE_MAX_BN 256
#endif
int tk__gemm_ks_one(const gemm_plan *p)
{
    return p->tma && p->wg_bm == 64 && p->wg_bn > 64 && p->wg_bn <= TK_GEMM_KS_ONE_MAX_BN;
}

/* The TMA-store epilogue's staging after the ring: two 16 KiB buffers, a
 * pair per consumer warpgroup on ping-pong tiles (the kernel's layout,
 * gemm_body_tma). */
#define EPI_STAGING 32768
int tk__gemm_tma_stages(int bm, int bn, int room)
{
    const int stage = (bm + bn) * 64 * 2;
    const int cap = bm != 64   ? TK_GEMM_STAGES_MAX
                    : bn <= 64 ? TK_GEMM_STAGES_KS_NARROW
                               : TK_GEMM_STAGES_KS;
    const int s = (232448 - 2048 - room) / stage;
    return s > cap ? cap : s;
}

/* Whether a TMA plan's ring leaves the TMA-store staging's 32 KiB: where
 * it takes that epilogue, and for 128-row tiles, except narrow ones (at
 * most 128 columns) whose block walks a long reduction (at least
 * STAGES_LONG_KT K steps of 64) with A not a K-major operand of a swapped
 * tile: those take the room for one more ring stage or two (8 at 128 x 80,
 * as cuBLAS runs that tile; 7 at 128 x 128). A narrow tile's K step is
 * short, so its ring holds less time of copies in flight. H100, bench/sweep,
 * both ways in one call (bench/longk-check.tkm, two runs, scripts/ab-check.sh;
 * bench/gemm-measurements.md): fwd x 1024 x 4096 at 1028-1423 tokens on 128
 * x 80 and 128 x 96 swapped tiles 3.5-6% faster (0.855-0.897 of cuBLAS ->
 * 0.904-0.937), split-K grad_a of the vocabulary on 128 x 128 tiles up to
 * 473 tokens 0.5-2% faster; but 128 x 208 split tiles (1477 and 1655
 * tokens) 2% slower, and earlier (bench/stagesfit-check.tkm) shorter
 * reductions lost or gained by turns (fwd x 1024 x 3072, 48 steps, 2%
 * slower; x 1024 x 2816, 44 steps, 1-2% faster) and swapped grad_a (both
 * operands K-major) x 2816-4096 x 1024 3-8% slower.
 * TK_GEMM_STAGES_LONG_KT=0: every 128-row tile keeps the room. */
#ifndef TK_GEMM_STAGES_LONG_KT
#define TK_GEMM_STAGES_LONG_KT 64
#endif
int tk__gemm_ring_room(const gemm_plan *p)
{
    const int64_t kt = (p->K + 63) / 64;
    const int64_t per = p->splits > 1 ? (kt + p->splits - 1) / p->splits : kt;
    if (p->epi_tma)
        return tk__gemm_epi_bytes(p);
    if (p->wg_bm != 128)
        return 0;
    return TK_GEMM_STAGES_LONG_KT > 0 && p->wg_bn <= 128 && per >= TK_GEMM_STAGES_LONG_KT &&
                   !(p->swap && p->a_kmajor)
               ? 0
               : EPI_STAGING;
}

/* The TMA-store epilogue's staging in shared memory (EPI_STAGING). */
int tk__gemm_epi_bytes(const gemm_plan *p)
{
    return p->epi_tma ? (p->persist == 3 ? 2 : 1) * EPI_STAGING : 0;
}

/* The TMA tile width for a kernel M x N on `sms` multiprocessors: least
 * rounds x width / throughput, where rounds = the tiles each multiprocessor
 * takes in turn (wave quantisation). On an H100 cuBLAS sizes its tiles the
 * same way (the ncu profile of bench/sweep, bench/gemm-measurements.md): grad_b of
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
 * (cold operands; bench/gemm-measurements.md): about
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

/* The plan's multiprocessor count (NV_SMS where the target left it unset). */
static int64_t plan_sms(const gemm_plan *p)
{
    return p->sms > 0 ? p->sms : NV_SMS;
}

/* Cost of an M x N output in bm x bn tiles of throughput eff per area:
 * rounds (the tiles each multiprocessor takes in turn) x tile area / eff. */
static double wave_cost(int64_t M, int64_t N, int bm, int bn, int64_t sms, double eff)
{
    const int64_t tiles = ((M + bm - 1) / bm) * ((N + bn - 1) / bn);
    return (double)((tiles + sms - 1) / sms) * bm * bn / eff;
}

/* 64-row tiles stay out where the 128 x bn tiles chosen so far make one
 * round over at least 5/6 (KS_FILL_MIN_NUM / _DEN) of the
 * multiprocessors, from M = 128 on (a 128-row box then holds whole rows),
 * with N a whole number of their columns (no last column tile mostly
 * empty or overlapping its neighbour); TK_GEMM_KS_FILL 0: 64-row tiles
 * wherever they cost less. Measured on an H100 (bench/sweep of
 * bench/ksfill-check.tkm, both ways in one call, two runs;
 * bench/gemm-measurements.md, 2026-11-27): where the 128-row tiles filled
 * 112-132 of the 132 multiprocessors, 29 of 32 shapes ran 0.8-10% faster
 * on them (grad_a 776 x 3072 x 1024 on 112 tiles of 128 x 64 against 130
 * of 64 x 112: 13.64 -> 13.12 us; grad_a 260-300 x 1024 x 2816 10%), one
 * even, two slower (grad_a 147 x 512 x 4096 3.2%, grad_b 3144 x 7936 x 160
 * 11.6%: 160 rows in two overlapping 128-row tiles); at 108 tiles (82%)
 * they ranged from 6.5% faster to 23% slower (grad_a 1036 x 5120 x 768),
 * and without the column condition random shapes lost up to 30% (grad_a
 * 7184 x 6568 x 72: a second 64-wide column tile holding 8 columns). The
 * area weights had favoured the 64-row tiles by 7% at 776 tokens. Plans
 * it changes: 320 of 392,000 model shapes (grad_a x {2816, 3072, 4096} x
 * 1024 at 769-832 tokens, x 1024 x 2816 at 257-320, x 1024 x 4096 at
 * 129-192), 140 of 60,000 random shapes of common transformer sizes
 * and 2 of 60,000 with every dimension log-uniform. */
#ifndef TK_GEMM_KS_FILL
#define TK_GEMM_KS_FILL 1
#endif
#define KS_FILL_MIN_NUM 5
#define KS_FILL_MIN_DEN 6
/* Whether `tiles` make one round over num / den of the sms multiprocessors
 * or more (a tile each at most): the fill test of the rules here and below
 * (ks_fill_keeps, ks_fills_round, plan_cluster). */
static int one_round_over(int64_t tiles, int64_t sms, int num, int den)
{
    return tiles <= sms && tiles * den >= sms * num;
}
static int ks_fill_keeps(int64_t M, int64_t N, int bn, int64_t sms)
{
    const int64_t tiles = ((M + 127) / 128) * ((N + bn - 1) / bn);
    return TK_GEMM_KS_FILL && M >= 128 && N % bn == 0 &&
           one_round_over(tiles, sms, KS_FILL_MIN_NUM, KS_FILL_MIN_DEN);
}

/* The unswapped 128 x 64 tiles of a long reduction (K >= KS_ONE_LONG_K_MIN,
 * more than one 128-row tile) give way to the one-warpgroup 64-row tiles
 * (tk__gemm_ks_one: wider than 64) of least wave cost, where that cost at
 * KS_ONE_LONG_K_GAIN is below theirs and the 64-row tiles cover no more
 * area (no more MMA work, no more loads of A and B). Runs after the
 * swapped and unswapped plans have been weighed on the 128-row tiles'
 * cost (tk__gemm_plan_wgmma), so those choices stay as they were.
 *
 * ks_eff was fitted on an H100 before one warpgroup took every K step of
 * the wide 64-row tiles, and ks_fill_keeps held the 128 x 64 tiles where
 * they fill the chip. On an H200 (2026-11-29; every tuner candidate timed
 * at the call's own M against cuBLAS, bench/candidates, then bench/sweep of
 * bench/kslong-check.tkm, both ways in one call, two runs each,
 * docs/performance-gemm.md) the 64 x 128 tiles ran 5-13% faster than the
 * 128 x 64 ones at kernel K = 4096 (fwd 993-1023 x 1024 x 4096 0.86-0.93
 * -> 0.96-1.04 of cuBLAS; grad_a 1023 x 4096 x 1024 0.88-0.90 -> 0.93-0.95),
 * 1.5-3% at 770-900 tokens, and 19% at grad_b 7789 x 1536 x 624 (tokens
 * on the reduction); all 68 shapes it changes there took less time in both
 * runs (geomean 0.944x). Left out by the area test, after a first form:
 * 64 x 112 tiles on 130 blocks where 128 x 64 made 112 (grad_a 770-812 x
 * 4096 x 1024: 0.5-1.7% more time), and a single 128-row tile (grad_a 115
 * x 6848 x 8204: 13.6% more, B read twice).
 * TK_GEMM_KS_LONG_K=0 leaves the rule out. */
#ifndef TK_GEMM_KS_LONG_K
#define TK_GEMM_KS_LONG_K 1
#endif
#define KS_ONE_LONG_K_MIN 4096
#define KS_ONE_LONG_K_GAIN 1.08
static void ks_one_long_k(gemm_plan *p, int64_t sms)
{
    if (!TK_GEMM_KS_LONG_K || p->K < KS_ONE_LONG_K_MIN || p->swap || p->wg_bm != 128 ||
        p->wg_bn != 64 || p->N < 64 || p->M <= 128)
        return;
    const int64_t area128 = (p->M + 127) / 128 * 128 * ((p->N + 63) / 64 * 64);
    double best = wave_cost(p->M, p->N, 128, 64, sms, tma_bn_eff[0]);
    for (int bn = TK_GEMM_KS_ONE_MAX_BN; bn > 64; bn -= p->b_kmajor ? 16 : 64) {
        const double c = wave_cost(p->M, p->N, 64, bn, sms, ks_eff(bn) * KS_ONE_LONG_K_GAIN);
        const int64_t area = (p->M + 63) / 64 * 64 * ((p->N + bn - 1) / bn * bn);
        if (area <= area128 && c < best * 0.999) {
            best = c;
            p->wg_bm = 64;
            p->wg_bn = bn;
        }
    }
}

static int tma_pick_bn(int64_t M, int64_t N, int b_kmajor, int64_t sms, int *bm_out,
                       double *cost_out)
{
    int best = 256;
    double best_cost = 0;
    for (int i = N_TMA_BNS - 1; i >= 0; i--) {
        const double cost = wave_cost(M, N, 128, tk__gemm_tma_bns[i], sms, tma_bn_eff[i]);
        if (i == N_TMA_BNS - 1 || cost < best_cost * 0.999) {
            best = tk__gemm_tma_bns[i];
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
     * 2048 x 8 x 1024: 64 x 64 tiles 7.6 us, 128 x 64 6.2); not where the
     * 128-row tiles make one round over 5/6 of the chip or more
     * (ks_fill_keeps: those keep the 128-row tiles, at the cost the 64-row
     * ones would have had, so that the comparisons that follow, swapped
     * tiles and split-K, decide as they did) */
    const int keep = ks_fill_keeps(M, N, best, sms);
    const int best128 = best;
    for (int bn = 256; N >= 64 && bn >= 64; bn -= b_kmajor ? 16 : 64) {
        const double cost = wave_cost(M, N, 64, bn, sms, ks_eff(bn));
        if (cost < best_cost * 0.999) {
            best = bn;
            best_cost = cost;
            *bm_out = 64;
        }
    }
    if (keep && *bm_out == 64) {
        best = best128;
        *bm_out = 128;
    }
    *cost_out = best_cost;
    return best;
}

/* Swapped tiles (tk__gemm_plan_swap): the op's C^T = B^T A^T, its tokens on the
 * kernel's N, where the tile width is free in steps of 16 (B K-major), so
 * that the token count can be cut into as many tiles as fill one round;
 * 256 rows (two 64-row wgmmas per consumer warpgroup) on the other side.
 * cuBLAS fits its tiles the same way on an H100 (bench/gemm-measurements.md): the
 * down projection at 4284 tokens, a 4284 x 1024 output, ran on 128 tiles of
 * 256 x 136, the 136 on the tokens, where 128-row tiles make two rounds.
 * Throughput per tile area by the wgmma width, from tokitai-jit --tune on an
 * H100 (the down projection at 2944 tokens: 96-wide swapped tiles 28.3 us
 * against 33.0 for 92 tiles of 128 x 256; at 4284, 144-wide ones one round
 * at 0.97 of cuBLAS): 0.76 at 64 columns to 0.94 from 128 on. */
/* 128-row swapped tiles: narrower widths, for token counts whose 256-row
 * tiles would leave most of the chip idle. Their throughput weights, from
 * tokitai-jit --tune on an H100 with cold operands (bench/gemm-measurements.md): fwd N=1024 K=2816
 * at 1152 tokens 120 tiles of 128 x 80 in 16.3 us against 18.4 for 72 of 128 x 128; 48 wide at 768
 * tokens and 32 wide at 512 close to the 128 x 64 tiles. Untested beyond 96. */
#define SWAP128_BN_MIN 32
#define SWAP128_BN_MAX 96
/* Wide 128-row swapped tiles, 112 to 256 columns, weighed apart
 * (swap_pick_bn's `wide`; TK_GEMM_SWAP128_WIDE 0 leaves them out): on an
 * H100 (tokitai-jit --tune, throughput per area against the unswapped
 * 128 x 256 tile of the same class, bench/gemm-measurements.md) 128 x 144
 * swapped ran 0.82 at fwd N=1024 K=2816 (2304 tokens: 22.5 us against 24.9
 * for the 256 x 80 swapped tiles the heuristics took), 128 x 160 0.88 at
 * K=4096 (2560 tokens: 33.4 against 35.4), 128 x 144 0.92 at grad_a
 * N=50304 (2176 tokens). */
#ifndef TK_GEMM_SWAP128_WIDE
#define TK_GEMM_SWAP128_WIDE 1
#endif
#define SWAP128_WIDE_MIN 112
/* 64-row swapped tiles: ks_eff x this (the 128-row swapped tiles ran at
 * 0.83-0.90 of the unswapped ones' weights: the transposed epilogue) */
#define KS_SWAP_EFF 0.85
static double swap_eff(int bm, int bn)
{
    if (bn % 16 != 0) /* 16 g + 8 (swap_pick_bn's `half`): between its neighbours */
        return (swap_eff(bm, bn - 8) + swap_eff(bm, bn + 8)) / 2;
    if (bm == 128)
        return bn >= 128   ? 0.85
               : bn >= 112 ? 0.78
               : bn >= 96  ? 0.72
               : bn >= 80  ? 0.66
               : bn >= 64  ? 0.58
               : bn >= 48  ? 0.50
                           : 0.375;
    return bn >= 128 ? 0.94 : bn >= 112 ? 0.91 : bn >= 96 ? 0.87 : bn >= 80 ? 0.82 : 0.76;
}

/* Swapped 128-row tiles this wide or wider store with the TMA-store
 * epilogue (TK_GEMM_SWAP_EPI), on a persistent grid past a wave. H100,
 * bench/sweep of bench/swapepi-check.tkm, the two epilogues in one call:
 * fwd 156-170 x 50304 x 1024 (128 x 160-176, five rounds) 0.97 -> 1.03 of
 * cuBLAS, fwd 6533-6549 x 1024 x 2816-3072 (128 x 208) 0.95 -> 0.97, one
 * round of 128 x 160 +1-3%; but 128 x 80 in one round 3-7% slower (four
 * chunks of 16-64 rows, two barriers each, for a short tile), and 256-row
 * tiles, which keep 3 ring stages beside the buffers instead of 4, 4-11%
 * slower (fwd 4305-13367 x 1024 x 2816-4096, fwd 295-543 x 50304 x 1024), so
 * those keep a block per tile stored through the ring. */
#define SWAP_EPI_BN_MIN 128
/* Wide 128-row swapped tiles that make more than a round, where they store
 * with the TMA-store epilogue on a persistent grid (plan_grid: `epi`),
 * weigh this much (TK_GEMM_SWAP_WIDE_EPI 0: swap_eff's, as before): the
 * unswapped K-major tiles' TMA_KB_EFF less the transposed stores. H100,
 * bench/sweep of bench/swapwide-check.tkm (the shapes among 2,000 random
 * ones whose plan it is) against the code before the swapped TMA-store
 * epilogue, in one call, two runs: geomean 0.930 -> 0.968 of cuBLAS, 10 ->
 * 3 shapes under 0.90, none slower beyond 1.3% (fwd 389-412 x 50304 x 1024
 * 0.83 -> 0.91, fwd 1580-1599 x 4096 x 1024 0.86 -> 1.00, fwd 130-203 x
 * 50304 x 1024 0.92-0.97 -> 1.01-1.04); seed 11: fwd 0.989 -> 0.999, grad_a
 * 0.992 -> 1.002. */
#ifndef TK_GEMM_SWAP_WIDE_EPI
#define TK_GEMM_SWAP_WIDE_EPI 1
#endif
#define SWAP_EPI_EFF 0.90
/* ... and against 256-row swapped tiles that make more than a round with
 * K < SWAP_GAIN_256_MIN_K they are taken up to this share of those tiles'
 * cost (TK_GEMM_SWAP_SHORT_K 0: when cheaper). H100, bench/sweep of
 * bench/swapshortk-check.tkm, both ways in one call (two runs each): the 18
 * shapes this rule changes 5.8% faster (fwd 300-333 x 50304 x 1024 0.83-0.86
 * -> 0.90-0.93 of cuBLAS, fwd 3097x4096x1024 0.85 -> 0.95, at worst +1.6%
 * time); where the 256-row tiles made one round (36 shapes, no epilogue of
 * theirs to hide) the wide tiles were 0.9% slower, so those keep them.
 * Seeds 2026 / 7 (108 shapes each): fwd 1.001 -> 1.011 / 1.040 -> 1.054. */
#ifndef TK_GEMM_SWAP_SHORT_K
#define TK_GEMM_SWAP_SHORT_K 1
#endif
#define SWAP_256_SHORT_K 1.08
/* ... and where the 256-row tiles make one round, on a reduction of more
 * than one K step and at most SWAP_ONE_ROUND_K_MAX, with the wide tiles
 * SWAP_ONE_ROUND_BN_MIN wide or wider and the swapped kernel's A (the op's
 * B) stored M-major (TK_GEMM_SWAP_ONE_ROUND 0: past a round only). A
 * 256-row tile of one round stores its whole tile after its main loop,
 * exposed; the wide tiles' persistent grid stores the first tile while
 * the second loads, a larger share of the time the shorter the reduction.
 * H100, bench/sweep, both ways in one call, two runs each:
 *  - bench/oneround-check.tkm (37 model shapes the rule changes without
 *    its conditions on width, layout and K): fwd x 4096 x 1024 at
 *    1156-1174 tokens (160 wide) 2.4% less time, 1302-1408 (176) 2.8-3.2%
 *    (1323: 23.44 -> 22.71 us, 0.883 -> 0.910 of cuBLAS); fwd x {2816,
 *    3072} x 1024 176 wide 0.9-1.6% less, 160 wide within 0.7% either way,
 *    144 wide up to 4.5% more (1497 x 3072 x 1024); grad_a x 1024 x {2816,
 *    3072} (the op's B K-major) 0-4.8% more at every width;
 *  - bench/oneround-common-check.tkm (32 shapes of common sizes and 2
 *    random ones it changes without the condition on K): K = 256-768
 *    1.1-7.8% less time (fwd 9963 x 512 x 256 13.87 -> 12.79 us), K =
 *    1024 -4% .. +4% (fwd 192 x 32000 x 1024 38.37 -> 36.87 us, 477 x
 *    11008 x 1024 23.81 -> 24.77), K = 1536 0-4.1% more, K = 24 (no
 *    persistent grid: a single K step) 4.4% more.
 * Seeds 123 / 2718 / 11, final code against the stop before: fwd 1323 /
 * 1339 / 1365 x 4096 x 1024 0.872 / 0.890 / 0.896 -> 0.906 / 0.918 /
 * 0.935 of cuBLAS. */
#ifndef TK_GEMM_SWAP_ONE_ROUND
#define TK_GEMM_SWAP_ONE_ROUND 1
#endif
#define SWAP_ONE_ROUND_BN_MIN 160
#define SWAP_ONE_ROUND_K_MAX 1024
static int swap_one_round(const gemm_plan *p, int wbn)
{
    return TK_GEMM_SWAP_ONE_ROUND && !p->b_kmajor && wbn >= SWAP_ONE_ROUND_BN_MIN && p->K > 64 &&
           p->K <= SWAP_ONE_ROUND_K_MAX;
}
/* ... and against unswapped plans at this share of their cost
 * (TK_GEMM_SWAP_WIDE_GAIN 0: SWAP_GAIN, as other swapped plans). H100,
 * bench/sweep of bench/swapgain-check.tkm (the 71 of 2,000 random shapes it
 * changes), both ways in one call, two runs: 0.940 -> 0.969 of cuBLAS, 43
 * shapes more than 2% faster, 17 more than 2% slower (grad_a 14380 /
 * 10929 x 50304 x 1024 0.78-0.92 -> 0.99-1.00; fwd 2876-3059 x 3072 x 1024
 * 1.00-1.06 -> 0.93-0.99); seeds 11 and 31 unchanged (1.008 / 1.061-1.063
 * over all 108 shapes). */
#ifndef TK_GEMM_SWAP_WIDE_GAIN
#define TK_GEMM_SWAP_WIDE_GAIN 1
#endif
#define SWAP_WIDE_EPI_GAIN (TK_GEMM_SWAP_WIDE_GAIN ? 0.999 : SWAP_GAIN)
/* Whether the swapped 128 x bn tiles of a kernel M x N store with the
 * TMA-store epilogue on a persistent grid (plan_grid), epi: C allows it. */
static int swap_persist_epi(int64_t M, int64_t N, int bn, int64_t sms, int epi)
{
    return TK_GEMM_SWAP_WIDE_EPI && epi && bn >= SWAP_EPI_BN_MIN &&
           ((M + 127) / 128) * ((N + bn - 1) / bn) > sms;
}
/* Wide swapped tiles with the TMA-store epilogue on a reduction of
 * SWAP_LONG_K or more (TK_GEMM_SWAP_LONG_K): their transposed stores, once
 * per tile, are a small share of its time, so they weigh as the
 * unswapped K-major tiles (TMA_KB_EFF) and are taken over unswapped plans
 * when cheaper. H100, bench/sweep, both ways in one call:
 *  - from K = 16384: bench/swaplongk-check.tkm (the 15 of 2,000 random
 *    shapes it changes, all grad_a x 50304 x 1024 at 2090-7268 tokens, and
 *    2153, 2175), two runs: 0.920 / 0.918 -> 0.971 / 0.970 of cuBLAS, 4-5
 *    -> 0 under 0.90 (2143: 0.85 -> 0.94 on 120 swapped tiles of 128 x
 *    144); seed 7 grad_a 1.009 -> 1.020;
 *  - from K = 2048 (TK_GEMM_SWAP_LONG_K_MIN; before: 16384):
 *    bench/swapmidk-check.tkm (77 of 3,000 random shapes it changes, K =
 *    2816-4096), 0.941 -> 0.962 and 0.943 -> 0.972 in two calls, their
 *    time 0.975x (grad_a 14601x3072x1024 143.0 -> 124.5 us on 528 swapped
 *    tiles of 128 x 224 instead of 920 of 128 x 128; fwd 14711x1024x2816
 *    0.83 -> 0.97); the 35 shapes that go from 128 x 128 tiles to the same
 *    tiles swapped 0.5% faster (-2.3% .. +1.2%); seeds 2026 / 7 / 31: the
 *    4 / 6 / 4 shapes it changes 0.972x / 0.947x / 0.962x the time, none
 *    slower (grad_a 2175x4096x1024 0.88 -> 0.93, 2119x3072x1024 0.89 ->
 *    0.96). */
#ifndef TK_GEMM_SWAP_LONG_K
#define TK_GEMM_SWAP_LONG_K 1
#endif
#ifndef TK_GEMM_SWAP_LONG_K_MIN
#define TK_GEMM_SWAP_LONG_K_MIN 2048
#endif
#define SWAP_LONG_K TK_GEMM_SWAP_LONG_K_MIN
static int swap_long_k(int64_t K, int bn, int epi)
{
    return TK_GEMM_SWAP_LONG_K && epi && K >= SWAP_LONG_K && bn >= SWAP_EPI_BN_MIN;
}
/* ... and the narrow 128-row swapped tiles (32-96 wide) on such a reduction
 * (with C as swap_long_k wants it: fp16, where the wide tiles could take the
 * TMA-store epilogue; the narrow ones store through the ring) are taken over
 * unswapped plans at SWAP_WIDE_EPI_GAIN, not SWAP_GAIN
 * (TK_GEMM_SWAP_NARROW_LONG_K 0: as before). `tokitai-jit --tune -v` of fwd
 * N=1024 K=4096 and grad_a N=2816 / 4096 K=1024 at 1408-1536 tokens (H100)
 * picked 128 x 96 swapped tiles, 6-8% faster than the heuristics' 64 x 192
 * or 128 x 128 swapped ones. bench/sweep of bench/swapnarrow-check.tkm (60
 * of the 102 of 12,000 random shapes it changes, 1154-1534 tokens, K =
 * 2816-4096), both ways in one call, two runs: 0.893 / 0.886 -> 0.946 /
 * 0.957 of cuBLAS, 40-42 -> 9-15 under 0.90, every shape faster (time
 * 0.936x / 0.938x); seeds 31 / 11: fwd 1282x1024x4096 0.83 -> 0.88, the
 * rest unchanged. */
/* ... and from SWAP_NARROW_MIN_TOKENS tokens on, wherever they cost less
 * than SWAP_NARROW_GAIN of the unswapped plan (TK_GEMM_SWAP_NARROW_GAIN 0:
 * at SWAP_WIDE_EPI_GAIN there too): there the weights put the 64-row
 * tiles the unswapped plans take (64 x 160, 64 x 176) 4-6% ahead of the
 * swapped 128 x 80 and 128 x 96 tiles, which ran 2-5% faster. H100,
 * bench/sweep of bench/narrowgain-check.tkm (45 shapes the thresholds 1.04
 * and 1.06 change at any token count), the three ways in one call, two
 * runs each:
 *  - grad_a x {2816, 3072} x 1024 at 1025-1152 and 1281-1408 tokens 2-5.3%
 *    less time (1030 x 3072 x 1024: 16.11 -> 15.76 us, 0.881 -> 0.890 of
 *    cuBLAS; 1359 x 3072 x 1024 0.892 -> 0.926), x 4096 x 1024 -0.7% ..
 *    +1.0%; grad_a 1629 x 6144 x 768 6.9% less, 1714 x 2280 x 584 7.5%
 *    less (0.736 -> 0.778), 1328 x 3072 x 1024 3.8% less, fwd 1584 x 512
 *    x 2816 11.7% less;
 *  - under 1024 tokens 4-18% more time on 11 of the 14 shapes (grad_a
 *    444 x 3072 x 2816 17.02 -> 19.28 us, fwd 240 x 3072 x 2560 +17.8%),
 *    hence the bound: those keep SWAP_WIDE_EPI_GAIN.
 * Seed 2718, final code: grad_a 1038x3072x1024 0.859-0.866 -> 0.908. */
#ifndef TK_GEMM_SWAP_NARROW_GAIN
#define TK_GEMM_SWAP_NARROW_GAIN 1
#endif
#define SWAP_NARROW_GAIN 1.06
#define SWAP_NARROW_MIN_TOKENS 1024
#ifndef TK_GEMM_SWAP_NARROW_LONG_K
#define TK_GEMM_SWAP_NARROW_LONG_K 1
#endif
/* The narrow 128-row swapped tiles also in widths of 16 g + 8 (40 to 88;
 * the kernel's mma_h, stored from the ring: tma_wgmma.cuh), weighed
 * between their neighbours, on reductions under PAIRS_K_MIN (from there the
 * 16-wide steps' pairs and fours of plan_cluster ran faster than single
 * blocks 8 columns narrower would by the measure below).
 * TK_GEMM_SWAP_HALF 0: steps of 16 only. A narrower tile that still makes
 * one round costs its block less: on an H100 (cfgrun, tuning records naming
 * each width, 2026-11-27) fwd 1020 x 1024 x 3072 took 15.43 us on 128 tiles
 * of 128 x 64 swapped against 16.64 on 104 of 128 x 80 (0.93, the ratio of
 * the rows each block loads per K step: 192 / 208), 760 x 1024 x 3072
 * 13.51 on 128 x 48 against 14.30 on 128 x 64; so fwd 1149 x 1024 x 3072
 * runs on 16 tiles of 72 (128 blocks) where 80 wide made 15 (1200 columns
 * for 1149). Only where those tiles make one round: past it, a block's
 * bytes per K step no longer set the time alone, and the unswapped
 * persistent grids they displaced ran faster (fwd 87 x 50304 x 512: 393
 * tiles of 128 x 88, 27.5 -> 29.7 us against 128 x 128 persistent).
 * H100, bench/sweep of bench/half-check.tkm (47 shapes), both ways in one
 * call: without the bound 0.971 / 0.973 -> 1.003 / 1.015 of cuBLAS (two
 * runs), its 5 shapes past a round 0.7-9.1% slower; with it (another
 * call) 0.986 -> 1.024, 5 -> 1 shapes under 0.90, time 0.962x (fwd 1149 x
 * 1024 x 3072 16.47 -> 16.03 us, 1290 x 1024 x 2816 17.13 -> 16.14, grad_a
 * 2239 x 1024 x 512 8.31 -> 7.05), those 5 unchanged; slower: grad_a 566
 * x 3072 x 2048 4.4% (64 x 160 tiles before), grad_a 1359 / 1400 x 3072 x
 * 1024 within 0.6%. */
#ifndef TK_GEMM_SWAP_HALF
#define TK_GEMM_SWAP_HALF 1
#endif
#define SWAP_HALF_K_MAX 4096 /* PAIRS_K_MIN */
/* ... and from SWAP_HALF_K_MAX on too where the swapped plan's A (the op's
 * B) is K-major: plan_cluster takes no pairs or fours there (their shared
 * A needs M-major boxes), so nothing on the 16-wide steps outruns the
 * narrower single blocks. grad_a x 4096 x 1024 at 1300-1402 tokens (a
 * reduction of 4096): 128 tiles of 128 x 88 swapped against 120 of 128 x
 * 96, 20.63 / 20.97 / 20.98 -> 20.16 / 20.60 / 20.63 us (H200, bench/sweep
 * with a tuning record naming each width, one call). A/B, both builds in
 * one call, two runs (bench/kmajor8-check.tkm: the 30 of 6,000 random
 * model shapes it changes, all grad_a, and 5 more): all 35 took 0.7-3.1%
 * less time, geomean 0.981x (1385 x 4096 x 1024: 0.875 -> 0.89-0.90 of
 * cuBLAS). TK_GEMM_SWAP_HALF_KMAJOR 0: steps of 16 from SWAP_HALF_K_MAX
 * whatever A's order. */
#ifndef TK_GEMM_SWAP_HALF_KMAJOR
#define TK_GEMM_SWAP_HALF_KMAJOR 1
#endif
/* 1 where the narrow (and swap_round_narrow's wide) 128-row swapped tiles
 * step by 8 columns: a reduction of K, the swapped plan's A K-major or not. */
static int swap_step8(int64_t K, int a_kmajor)
{
    return TK_GEMM_SWAP_HALF && (K < SWAP_HALF_K_MAX || (TK_GEMM_SWAP_HALF_KMAJOR && a_kmajor));
}
/* Kernel M x N of the swapped plan (M: the op's N, N: its tokens), K: the
 * tile (256, 128 or 64 rows, width in steps of 16, of 8 for the narrow
 * 128-row ones where TK_GEMM_SWAP_HALF allows) of least rounds x area /
 * throughput, and that cost; `wide`: among the wide 128-row tiles only,
 * weighed for the TMA-store epilogue where `epi` (C allows it). */
static int swap_pick_bn(int64_t M, int64_t N, int64_t K, int a_kmajor, int64_t sms, int wide,
                        int epi, int *bm_out, double *cost_out)
{
    int best = 0, best_bm = 256;
    double best_cost = 0;
    const int half = swap_step8(K, a_kmajor);
    for (int bm = wide ? 128 : 256; bm >= (wide ? 128 : 64); bm /= 2) {
        const int hi = wide ? 256 : bm == 256 ? SWAP_BN_MAX : bm == 128 ? SWAP128_BN_MAX : 256;
        const int lo = wide ? SWAP128_WIDE_MIN : bm == 256 ? SWAP_BN_MIN : SWAP128_BN_MIN;
        const int step = bm == 128 && !wide && half ? 8 : 16;
        for (int bn = hi; bn >= lo; bn -= step) {
            if (bn % 16 != 0 && ((M + bm - 1) / bm) * ((N + bn - 1) / bn) > sms)
                continue; /* 16 g + 8: one round only (TK_GEMM_SWAP_HALF) */
            const double eff = bm == 64 ? KS_SWAP_EFF * ks_eff(bn)
                               : wide && swap_long_k(K, bn, epi) ? TMA_KB_EFF
                               : wide && swap_persist_epi(M, N, bn, sms, epi) ? SWAP_EPI_EFF
                                                                            : swap_eff(bm, bn);
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
void tk__gemm_plan_swap(gemm_plan *p)
{
    int64_t t;
    int k;
    t = p->M, p->M = p->N, p->N = t;
    t = p->lda, p->lda = p->ldb, p->ldb = t;
    k = p->a_kmajor, p->a_kmajor = p->b_kmajor, p->b_kmajor = k;
    k = p->stage_a, p->stage_a = p->stage_b, p->stage_b = k;
    t = p->src_lda, p->src_lda = p->src_ldb, p->src_ldb = t;
    if (p->moving != 2)
        p->moving = 1 - p->moving;
    p->swap = !p->swap;
}

/* Ping-pong tiles (persist 3, TK_PINGPONG): each consumer warpgroup on a
 * 128 x BN tile of its own, one storing while the other computes, so that
 * the epilogue leaves the tensor cores busy. Their throughput per tile area
 * against the cooperative 128 x 256 tile's (1.0), by width: the weights
 * first guessed, before measuring. Off by default (TK_GEMM_PINGPONG 0): on
 * an H100 (bench/sweep seed 2026, same call) the heuristics with these
 * weights took geomean 1.026 -> 1.012 and ping-pong wherever it fits 0.924;
 * fwd 821x50304x1024 535 -> 416 TFLOP/s on 128 x 128 ping-pong tiles, grad_a
 * 13959x1024x2816 655 -> 627. A 128-wide tile loads a third more bytes per
 * FLOP than a 256-wide one, and a warpgroup's registers hold at most
 * PP_BN_MAX columns of 128 rows. */
static double pp_eff(int bn, int swap)
{
    const double e = bn >= 128   ? 1.0
                     : bn >= 112 ? 0.97
                     : bn >= 96  ? 0.94
                     : bn >= 80  ? 0.89
                     : bn >= 64  ? 0.82
                     : bn >= 48  ? 0.72
                                 : 0.58;
    return swap ? e * 0.95 : e; /* swapped: transposed register stores */
}

/* The ping-pong width for a kernel M x N (rounds x area / throughput, ties
 * to the wider), its cost in *cost; widths in steps of 16 with K-major B,
 * of 64 with N-major B (its boxes). */
static int pp_pick_bn(int64_t M, int64_t N, int b_kmajor, int swap, int64_t sms, double *cost)
{
    int best = 0;
    for (int bn = PP_BN_MAX; bn >= 32; bn -= b_kmajor ? 16 : 64) {
        const double c = wave_cost(M, N, 128, bn, sms, pp_eff(bn, swap));
        if (best == 0 || c < *cost * 0.999) {
            best = bn;
            *cost = c;
        }
    }
    return best;
}

/* Ping-pong plans win when they save at least this share of the cost
 * (TK_GEMM_PINGPONG 2: whenever they fit, for measuring them). */
#define PP_GAIN 0.97
/* Ping-pong on short reductions (plan_grid_epi): an unsplit persistent
 * unswapped tile of 128 x BN (BN <= PP_BN_MAX) with an fp16 output, a
 * reduction of at most PP_K_MAX and more than TK_GEMM_PP_ROUNDS rounds of
 * the chip (0: never) runs ping-pong at the same width, stored by the
 * TMA-store epilogue (TK_GEMM_PP_EPI 1; 0: from registers). The
 * cooperative tile's epilogue, the tensor cores idle meanwhile, is 9-16%
 * of such a call (grad_a M x 1024 x 2816, counters); the ping-pong tile
 * stores one tile while the other warpgroup computes the next. H100,
 * bench/pp-short-k-check.tkm (the 19 shapes a rule of one round reaches:
 * grad_a with N = 1024 and outputs 2816-4096 wide; bench/gemm-measurements.md,
 * 2026-11-27, "The epilogue's share"):
 * - this form, more than 4 rounds, both ways (one machine, two calls,
 *   three sweeps):
 *   every shape it reaches 2-5% faster (grad_a 6492x1024x2816 61.8 ->
 *   59.0 us, 0.893 -> 0.934 of cuBLAS; 12557 113.3 -> 110.2; 5500 x 1024
 *   x 4096 75.1 -> 71.6), the other 15 unchanged; seed 123: 1 -> 0 shapes
 *   under 0.90;
 * - stored from registers, more than one round: in one call 4-8% faster
 *   from 5 rounds on, in another (another machine) 1-10% slower on 17 of
 *   the 19, its times at 12557 spread over 105.6-116.0 us in one sample
 *   set; cfgrun on that machine had it 5-9% faster from 5 rounds on and
 *   slower at 2-4 rounds (so not taken there, nor that epilogue);
 * - with the TMA-store epilogue also from 1.7 rounds where the tiles fill
 *   the rounds' blocks to 0.85 or more (PP_F32_ROUNDS10, PP_F32_FILL_*:
 *   the forward's bounds; TK_GEMM_PP16_FILL 0: past 4 rounds only):
 *   bench/pp16-fill-check.tkm (grad_a at N = 1024 and outputs 2816, 3072,
 *   4096 wide: 15 shapes it takes, 11 it leaves), both ways in one call,
 *   two runs: time 0.989x, the 15 0.4-3.2% faster (grad_a 4096 x 1024 x
 *   2816 38.88 -> 37.84 us, 0.887 -> 0.912 of cuBLAS; 3600 x 1024 x 2816
 *   0.902 -> 0.930), the 11 within 0.4%; the changed plans: 388 of 56,000
 *   model shapes, all grad_a with N = 1024 at 1030-4222 tokens. */
#define PP_K_MAX 2048
#ifndef TK_GEMM_PP_ROUNDS
#define TK_GEMM_PP_ROUNDS 4
#endif
#ifndef TK_GEMM_PP_EPI
#define TK_GEMM_PP_EPI 1
#endif
#ifndef TK_GEMM_PP16_FILL
#define TK_GEMM_PP16_FILL 1
#endif

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
/* ... and 64-row swapped tiles against an unswapped plan of 128 x 64 tiles
 * that fill over half the chip (so that no split follows) on a reduction of
 * SWAP64_EVEN_MIN_K or more, when they cost less (TK_GEMM_SWAP64_EVEN 0:
 * at SWAP_GAIN). The weights had them level with the 128 x 64 tiles at fwd
 * 645-768 x 1024 x 4096 (112 tiles of 64 x 96 swapped against 96 of 128 x
 * 64), where the 0.92 kept them out. H200, bench/sweep of
 * bench/swap64-check.tkm, both ways in one call, two runs: with K = 1536
 * to 6144 every shape 3.3-21% less time (fwd 671 x 1024 x 4096 15.90 ->
 * 14.94 us, 0.80 -> 0.85 of cuBLAS; fwd 700 x 1024 x 2816 0.85 -> 0.88;
 * fwd 90 x 6144 x 1536 11.50 -> 9.13); with K = 512 and 1024 (fwd 245-288
 * x 2816 x 1024, 165-192 x 4096 x 1024, 350 x 2048 x 512) 1.2-3.2% more,
 * hence the bound. Plans it changes, offline: 792 of 200,000 random model
 * shapes (fwd x 1024 x {2816, 3072, 4096} at 641-768 tokens). */
#ifndef TK_GEMM_SWAP64_EVEN
#define TK_GEMM_SWAP64_EVEN 1
#endif
#define SWAP_GAIN_64 1.0
#define SWAP64_EVEN_MIN_K 1536
static int swap64_even(const gemm_plan *p, int64_t sms)
{
    const int64_t tiles = ((p->M + 127) / 128) * ((p->N + 63) / 64);
    return TK_GEMM_SWAP64_EVEN && p->wg_bm == 128 && p->wg_bn == 64 && tiles * 2 > sms &&
           p->K >= SWAP64_EVEN_MIN_K;
}
#define SWAP_GAIN_256_MIN_K 2048
/* One round of narrow swapped 128-row tiles on a reduction from
 * SWAP64_WIDE_MIN_K to under SWAP_HALF_K_MAX (= PAIRS_K_MIN: no pairs or
 * fours follow): 64-row tiles twice as wide instead, at most
 * SWAP64_WIDE_BN_MAX (SWAP64_WIDE_LONG_BN_MAX from SWAP64_WIDE_LONG_K),
 * while they still fit one round (fwd 1068 x 1024 x 3072: 128 of 64 x 144
 * for 120 of 128 x 72). Each block loads 64 + 2w rows per K step for 64 x
 * 2w outputs where the 128-row tile loads 128 + w for 128 x w, and its
 * wgmmas are twice as wide; cuBLAS runs 64 x 152 tiles in pairs there
 * (nvjet, ncu). H200, bench/sweep of bench/swap64wide-check.tkm, both ways
 * in one call, two runs (docs/performance-gemm.md): 64 x 144 and 64 x 160
 * 1.8-6.4% less time (fwd 1150 x 1024 x 3072 15.63 -> 14.72 us, 0.87 ->
 * 0.92 of cuBLAS; fwd 1121 x 1024 x 2816 0.90 -> 0.95; grad_a 1121 x 3072
 * x 1024 -2.7%); 64 x 176 and 64 x 192 0.4-5% more (grad_a 1350 x 2816 x
 * 1024 14.70 -> 15.45). That was with two consumer warpgroups on alternate
 * K steps and only where the 64-row tiles made no more tiles. With one
 * consumer (tk__gemm_ks_one), bench/swap64round-check.tkm, both ways in
 * one call, two runs, two calls: where the wider tiles make more tiles but
 * one round, 3.3-10.2% less time (fwd 1068 x 1024 x 3072 15.58 -> 14.29
 * us, 0.85 -> 0.93 of cuBLAS; grad_a 1068 x 3072 x 1024 0.87 -> 0.93); at
 * K = 1024 (fwd 270-480 x {2816, 4096} x 1024) 64 x 144 and 64 x 160
 * 1.9-2.9% less, 64 x 176 1.4-3.5% more; 64 x 176 and 64 x 192 at K =
 * 2816 and 3072: fwd 1.6-4.3% less (1327 x 1024 x 3072 0.91 -> 0.95),
 * grad_a -1.3% to +1.1%; at K = 4096, where pairs or fours of 128-row
 * tiles follow, fwd up to 12% more (1300 x 1024 x 4096 19.7 -> 21.8 us),
 * hence SWAP_HALF_K_MAX. TK_GEMM_SWAP64_WIDE 0: never. */
#ifndef TK_GEMM_SWAP64_WIDE
#define TK_GEMM_SWAP64_WIDE 1
#endif
#define SWAP64_WIDE_MIN_K 1024
#define SWAP64_WIDE_BN_MAX 160
#define SWAP64_WIDE_LONG_K 2048
#define SWAP64_WIDE_LONG_BN_MAX 192
static void swap64_wide(gemm_plan *p, int64_t sms)
{
    if (!TK_GEMM_SWAP64_WIDE || !p->swap || p->wg_bm != 128 || p->wg_bn > SWAP128_BN_MAX ||
        p->K < SWAP64_WIDE_MIN_K || p->K >= SWAP_HALF_K_MAX)
        return;
    const int64_t tn = (p->N + p->wg_bn - 1) / p->wg_bn, tiles = ((p->M + 127) / 128) * tn;
    const int64_t w = ((p->N + (tn + 1) / 2 - 1) / ((tn + 1) / 2) + 15) / 16 * 16;
    const int64_t w_max = p->K >= SWAP64_WIDE_LONG_K ? SWAP64_WIDE_LONG_BN_MAX : SWAP64_WIDE_BN_MAX;
    if (tiles > sms || w > w_max || ((p->M + 63) / 64) * ((p->N + w - 1) / w) > sms)
        return;
    p->wg_bm = 64;
    p->wg_bn = (int)w;
}

/* One round of wide 128-row swapped tiles (from SWAP128_WIDE_MIN columns)
 * on a reduction of SWAP_LONG_K or more: the narrowest width past
 * SWAP128_BN_MAX that still makes one round, in steps of 8 where
 * swap_step8 says so, else 16 (as swap_pick_bn's narrow tiles). With every block one
 * tile, a block's time follows the rows it loads per K step (128 + width),
 * which the area weights (swap_eff, TMA_KB_EFF) leave out: at 1537-1664
 * tokens a 1024-wide output took 104 tiles of 128 x 128 (79% of an H200's
 * multiprocessors) where 128 of 128 x 104 fit. tokitai-jit --tune, H200
 * (grad_a N = 3072 / 4096, K = 1024, 1600-1664 tokens): 128 x 104 swapped
 * 17.8 / 23.1 us, 128 x 112 18.0 / 23.5, the heuristics' 128 x 128 19.1 /
 * 24.8. TK_GEMM_SWAP_ROUND_NARROW 0: the width swap_pick_bn chose. */
#ifndef TK_GEMM_SWAP_ROUND_NARROW
#define TK_GEMM_SWAP_ROUND_NARROW 1
#endif
static void swap_round_narrow(gemm_plan *p, int64_t sms)
{
    if (!TK_GEMM_SWAP_ROUND_NARROW || !p->swap || p->wg_bm != 128 || p->wg_bn < SWAP128_WIDE_MIN ||
        p->K < SWAP_LONG_K)
        return;
    const int64_t tm = (p->M + 127) / 128;
    const int step = swap_step8(p->K, p->a_kmajor) ? 8 : 16;
    if (tm * ((p->N + p->wg_bn - 1) / p->wg_bn) > sms)
        return;
    for (int w = SWAP128_BN_MAX + step; w < p->wg_bn; w += step)
        if (tm * ((p->N + w - 1) / w) <= sms) {
            p->wg_bn = w;
            return;
        }
}

/* After tk__gemm_plan_target and tk__gemm_plan_alignment: the wgmma kernel (sm_90a) takes the
 * shapes that fill the chip with 128-row tiles, when its 16-byte loads are
 * allowed. TMA form: every aligned shape, tile width by tma_pick_bn.
 * Everything else stays on the mma.sync kernel. Measured on an H100:
 * bench/gemm-measurements.md. */
void tk__gemm_plan_wgmma(gemm_plan *p)
{
    p->wgmma = 0;
    p->tma = 0;
    p->persist = 0;
    p->cluster = 0;
    p->cluster_rows = 0;
    if (!p->sm90 || !p->aligned)
        return;
    const int64_t tm = (p->M + 127) / 128;
    const int64_t fill = NV_SMS * 9 / 10;
    /* TMA coordinates are 32-bit. The TMA kernel takes every aligned shape,
     * however few rows or columns: on an H100 (tokitai-jit --tune of the MoE
     * expert shapes and of the default manifest, bench/gemm-measurements.md) it ran
     * 1.2-2.2x faster than the small mma.sync tiles from 16 to 512 tokens,
     * and split 8 ways 1.4-2.3x faster on the router's N = 8 and the
     * attention's 64-wide shapes. */
    if (TK_GEMM_TMA && p->M < INT32_MAX && p->N < INT32_MAX && p->K < INT32_MAX) {
        const int64_t sms = plan_sms(p);
        double cost, swap_cost;
        p->wgmma = 1;
        p->tma = 1;
        p->wg_bn = tma_pick_bn(p->M, p->N, p->b_kmajor, sms, &p->wg_bm, &cost);
        /* tokens on the kernel's M, A K-major (the swapped B then is); the
         * token counts a precompile enumerates; the op's N a whole 64-row
         * tile at least (the router's N = 8 swapped onto 64-row tiles ran
         * 2.4x slower than on its skinny kernel: boxes of 8 real rows in
         * 64, and no skinny kernel for a swapped plan) */
        if (TK_GEMM_SWAP && p->moving == 0 && p->a_kmajor && p->M <= M_CLASS_LIMIT && p->N >= 64) {
            int bm, wbm;
            double wide_cost = 0;
            /* the wide tiles' TMA-store epilogue (plan_grid) */
            const int epi = TK_GEMM_SWAP_EPI && TK_GEMM_EPI_TMA && p->c16;
            int bn = swap_pick_bn(p->N, p->M, p->K, p->b_kmajor, sms, 0, 0, &bm, &swap_cost);
            const double gain =
                TK_GEMM_SWAP_NARROW_LONG_K && bm == 128 && swap_long_k(p->K, SWAP_EPI_BN_MIN, epi)
                    ? (TK_GEMM_SWAP_NARROW_GAIN && p->M >= SWAP_NARROW_MIN_TOKENS
                           ? SWAP_NARROW_GAIN
                           : SWAP_WIDE_EPI_GAIN)
                : bm == 256 && p->K >= SWAP_GAIN_256_MIN_K ? SWAP_GAIN_256
                : bm == 64 && swap64_even(p, sms)          ? SWAP_GAIN_64
                                                           : SWAP_GAIN;
            const int swapped = swap_cost < cost * gain;
            /* the wide 128-row tiles against the plan so far: at a swapped
             * plan's cost (both store transposed), at SWAP_GAIN of an
             * unswapped one's */
            const int wbn = TK_GEMM_SWAP128_WIDE ? swap_pick_bn(p->N, p->M, p->K, p->b_kmajor, sms,
                                                                1, epi, &wbm, &wide_cost)
                                                 : 0;
            /* a swapped plan of 256-row tiles stores each tile after its
             * main loop (a block per tile); past a round (or in one:
             * swap_one_round) and on a short reduction that weighs more
             * than the wide tiles' persistent grid */
            const double vs_swapped =
                TK_GEMM_SWAP_SHORT_K && bm == 256 && p->K < SWAP_GAIN_256_MIN_K && wbn > 0 &&
                        (((p->N + 255) / 256) * ((p->M + bn - 1) / bn) > sms ||
                         swap_one_round(p, wbn)) &&
                        swap_persist_epi(p->N, p->M, wbn, sms, epi)
                    ? SWAP_256_SHORT_K
                    : 0.999;
            /* ... and against an unswapped plan, wide tiles on their
             * persistent TMA-store grid at SWAP_WIDE_EPI_GAIN */
            const double vs_unswapped = wbn > 0 && (swap_persist_epi(p->N, p->M, wbn, sms, epi) ||
                                                    swap_long_k(p->K, wbn, epi))
                                            ? SWAP_WIDE_EPI_GAIN
                                            : SWAP_GAIN;
            if (wbn > 0 && wide_cost < (swapped ? swap_cost * vs_swapped : cost * vs_unswapped)) {
                bm = wbm, bn = wbn, swap_cost = wide_cost;
            } else if (!swapped) {
                bn = 0;
            }
            if (bn > 0) {
                tk__gemm_plan_swap(p);
                p->wg_bm = bm;
                p->wg_bn = bn;
                cost = swap_cost;
                swap64_wide(p, sms);
                swap_round_narrow(p, sms);
            }
        }
        /* A weight gradient (tokens on the reduction, both orientations
         * alike for precompiles) whose output fills the chip better in
         * tiles of the other orientation takes it, at SWAP_GAIN (the
         * swapped tiles store transposed): grad_b x 1024 x 3072, a 3072 x
         * 1024 output, in 128 tiles of 128 x 192 swapped, against 96 of
         * 128 x 256 (144 of 128 x 192 unswapped: two rounds). H100,
         * bench/sweep of bench/swapfit-check.tkm (the 78 of 600 random
         * grad_b shapes it changes, all of that family, 66-15678 tokens),
         * both ways in one call, two runs: 0.955 / 0.954 -> 1.134 / 1.122
         * of cuBLAS, 37 -> 0 shapes under 0.90, the slowest 1.017; seeds
         * 7 / 11 grad_b 1.129 / 1.063 -> 1.166 / 1.077. */
        if (TK_GEMM_SWAP && TK_GEMM_SWAP_FIT && p->moving == 2 && !p->swap && p->N >= 64 &&
            p->M >= 64) {
            int fbm;
            double fit_cost;
            const int fbn = tma_pick_bn(p->N, p->M, p->a_kmajor, sms, &fbm, &fit_cost);
            if (fit_cost < cost * SWAP_GAIN) {
                tk__gemm_plan_swap(p);
                p->wg_bm = fbm;
                p->wg_bn = fbn;
                cost = fit_cost;
            }
        }
        ks_one_long_k(p, sms);
        /* ping-pong tiles in the plan's orientation (plan_grid keeps
         * persist 3 for an unsplit plan) */
        if (TK_GEMM_PINGPONG && p->wg_bm != 64) {
            double pp_cost = 0;
            const int bn = pp_pick_bn(p->M, p->N, p->b_kmajor, p->swap, sms, &pp_cost);
            if (TK_GEMM_PINGPONG == 2 || pp_cost < cost * PP_GAIN) {
                p->wg_bm = 128;
                p->wg_bn = bn;
                p->persist = 3;
            }
        }
        return; /* (the ring's stages: tk__gemm_plan_grid) */
    }
    if (p->tile.bm != tk__gemm_nv_tiles[0].bm || p->tile.bn != tk__gemm_nv_tiles[0].bn)
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
int64_t tk__gemm_split_clamp(int64_t s, int64_t kt, int64_t M, int64_t N)
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

/* Long reductions split on tiles of the width that fills the wave best
 * (plan_split; TK_GEMM_SPLIT_WIDTH 0: 256 always), where it saves this share
 * of the cost (the K-major widths' weight is provisional). H100, bench/sweep
 * seed 2026 in two calls: grad_a 1584x50304x1024 on 130 blocks of 128 x 208
 * split 2 (13 x 5 tiles) 0.94 of cuBLAS, against 0.85 on 104 of 128 x 256. */
#ifndef TK_GEMM_SPLIT_WIDTH
#define TK_GEMM_SPLIT_WIDTH 1
#endif
#define SPLIT_WIDTH_GAIN 0.97

/* Split-K on swapped tiles (the op's C^T = B^T A^T, split; the tokens on
 * the kernel's N, where K-major B lets the width follow them in steps of
 * 16): a 128-row tile of the unswapped plan is partly idle where the
 * tokens are just past a multiple of 128, and its split grid may leave
 * multiprocessors idle. After an unswapped split of cost `now` (per block:
 * 128 x width / throughput / splits), the swapped split of least such cost
 * is taken where it saves `gain` of it: SPLIT_SWAP_GAIN after a split on
 * the long-reduction widths (predicted and measured gains agreed, 6-16%),
 * SPLIT_SWAP_GAIN_128 after one on 128 x 128 tiles (measured gains were
 * 0.7-0.9 of the predicted ones there). Not below 256 tokens: such a call
 * is bound by streaming the other operand (about as many FLOP per byte as
 * it has tokens, under the machine's ~300), and there the swapped splits
 * ran 1.5-5% slower whatever their fill. Each split at least
 * SPLIT_SWAP_MIN_KT K steps (fwd 300 x 1024 x 8192 split 8 on 128 x 160,
 * 16 steps each, ran 11% slower than unswapped split 5). Widths up to 256,
 * none wider than the tokens; the narrow widths' weights lie between 64's
 * and 128's.
 * H100, bench/sweep, both ways in one call (bench/splitswap-check.tkm, two
 * runs, scripts/ab-check.sh; bench/gemm-measurements.md): grad_a of the
 * vocabulary at 257-1789 tokens 2-13% less time where taken (414 tokens
 * 0.86 -> 0.94 of cuBLAS, 774 0.84 -> 0.95, 1032 0.86 -> 0.98); fwd 700 x
 * 1024 x 16384 0.88 -> 0.97. TK_GEMM_SPLIT_SWAP (gemm_internal.h) 0: never. */
#define SPLIT_SWAP_GAIN 0.97
#define SPLIT_SWAP_GAIN_128 0.87
#define SPLIT_SWAP_MIN_TOKENS 256
/* TK_GEMM_SPLIT_SWAP_ONE: below SPLIT_SWAP_MIN_TOKENS, tokens just past 128
 * (whose 128-row tiles compute 256 rows) split on one swapped tile as wide
 * as they are, SWAP_ONE_SPLITS ways at most (one wave), where such a block
 * costs less than the unswapped split's (split_block_cost, each split's K
 * steps plus SWAP_ONE_SPLIT_STEPS: fitted to the break-even between K =
 * 32000, where 176 tokens on 128 x 176 split 12 ran 2.9% slower than 128 x
 * 128 split 8, and K = 50304, where they ran 3% faster). H200, bench/sweep,
 * both ways in one call, two runs (bench/swapone-check.tkm,
 * docs/performance-gemm.md): every shape it takes 0.4-36% less time, none
 * slower; grad_a x 50304 x 1024 at 129-176 tokens 3.3-10.7% (140: 43.7 ->
 * 39.5 us, 0.84 -> 0.93 of cuBLAS); where 128 x 256 tiles split alike
 * (fwd 136 x 5120 x 20480 82.7 -> 62.3 us, fwd 140 x 4096 x 32000 97.0 ->
 * 75.8, grad_a 150 x 16384 x 4096 54.3 -> 45.4); grad_a 140 x 151936 x
 * 1024 121.7 -> 99.7. In a first call (the first form, without the
 * fixed cost) a cap of 16 ran 1.7-3.2% slower than 12 at 129-176 tokens
 * of the vocabulary's grad_a and up to 7% slower than no rule at K = 32000
 * (grad_a 200 x 32000 x 1024). Plans it changes, offline: 502 of 200,000
 * random model shapes (the vocabulary's grad_a at 129-176 tokens; 129-144
 * since 64-row split tiles take 145-192, SPLIT_ROWS64_GAIN). 0: never. */
#ifndef TK_GEMM_SPLIT_SWAP_ONE
#define TK_GEMM_SPLIT_SWAP_ONE 1
#endif
#define SWAP_ONE_SPLITS 12
#define SWAP_ONE_SPLIT_STEPS 28
#define SPLIT_SWAP_MIN_KT 32
/* Throughput weight of a split tile w wide: the TMA widths' (64, 128, 192,
 * 256), K-major B's between them, and between 64's and 128's below 128. */
static double split_eff(int w)
{
    if (w < 128)
        return tma_bn_eff[0] + (tma_bn_eff[1] - tma_bn_eff[0]) * (w - 64) / 64.0;
    return w == 128   ? tma_bn_eff[1]
           : w == 192 ? tma_bn_eff[2]
           : w == 256 ? tma_bn_eff[3]
                      : TMA_KB_EFF;
}
/* A split block's time in the units of split_eff, one wave of them: a bm x
 * w tile over ceil(kt / s) K tiles, 64-row tiles at SPLIT_ROWS64_EFF of
 * 128-row ones (one consumer warpgroup on 64 rows, tk__gemm_ks_one, or two
 * on alternate K steps; 64 x 128 split 5 against 128 x 128 split 8 at 183
 * tokens of the vocabulary's grad_a, H200: 0.85 a row per K step) */
#define SPLIT_ROWS64_EFF 0.90
static double split_tile_eff(int bm, int w)
{
    return split_eff(w) * (bm == 64 ? SPLIT_ROWS64_EFF : 1.0);
}
static double split_block_cost(int bm, int w, int64_t kt, int64_t s)
{
    return (double)bm * w * (double)((kt + s - 1) / s) / split_tile_eff(bm, w);
}

/* TK_GEMM_SPLIT_SWAP_ONE: q (p swapped) split on one tile as wide as its
 * tokens, where that block costs less than p's; 1 when taken. */
static int split_swap_one(gemm_plan *q, const gemm_plan *p, int64_t kt)
{
    if (!TK_GEMM_SPLIT_SWAP_ONE || p->M <= 128 || p->splits < 2)
        return 0;
    const int64_t t = (q->M + 127) / 128;
    const int w = (int)((q->N + 15) / 16 * 16);
    int64_t s = NV_SMS / t < SWAP_ONE_SPLITS ? NV_SMS / t : SWAP_ONE_SPLITS;
    if (s > kt / SPLIT_SWAP_MIN_KT)
        s = kt / SPLIT_SWAP_MIN_KT;
    s = tk__gemm_split_clamp(s, kt, q->M, q->N);
    /* each split's K steps plus the fitted fixed cost, on both sides */
    if (s < 2 ||
        !(split_block_cost(128, w, kt + SWAP_ONE_SPLIT_STEPS * s, s) <
          split_block_cost(p->wg_bm, p->wg_bn, kt + SWAP_ONE_SPLIT_STEPS * p->splits, p->splits)))
        return 0;
    q->splits = (int)s;
    q->wg_bm = 128;
    q->wg_bn = w;
    return 1;
}

static void split_try_swap(gemm_plan *p, double now, double gain)
{
    gemm_plan q = *p;
    int best_w = 0;
    int64_t best_s = 0;
    double best_cost = now * gain;
    if (!TK_GEMM_SPLIT_SWAP || !TK_GEMM_SWAP || p->swap || p->moving != 0 || !p->a_kmajor ||
        p->M > M_CLASS_LIMIT || p->N < 128)
        return;
    tk__gemm_plan_swap(&q); /* tokens on the kernel's N, B K-major */
    const int64_t kt = (q.K + 63) / 64;
    if (p->M < SPLIT_SWAP_MIN_TOKENS) {
        if (split_swap_one(&q, p, kt))
            *p = q;
        return;
    }
    for (int w = 64; w <= 256 && w <= q.N; w += 16) {
        const int64_t t = ((q.M + 127) / 128) * ((q.N + w - 1) / w);
        int64_t s = NV_SMS / t < 8 ? NV_SMS / t : 8;
        if (s > kt / SPLIT_SWAP_MIN_KT)
            s = kt / SPLIT_SWAP_MIN_KT;
        s = tk__gemm_split_clamp(s, kt, q.M, q.N);
        if (s < 2)
            continue;
        const double cost = 128.0 * w / split_eff(w) / (double)s;
        if (cost < best_cost)
            best_w = w, best_s = s, best_cost = cost;
    }
    if (best_s < 2)
        return;
    q.splits = (int)best_s;
    q.wg_bm = 128;
    q.wg_bn = best_w;
    *p = q;
}

/* No split of a reduction of 2048-4095 (the 128 x 64 tiles' split below)
 * where the plan's 64-row tiles, unswapped, already make one round over
 * half of the multiprocessors or more and N is a whole number of them:
 * the split would add fp32 partials and a second kernel to a grid that
 * fills most of the chip already. H100, 2026-11-27
 * (bench/gemm-measurements.md; both ways in one call, two runs each):
 * - 5/6 of the chip or more (TK_GEMM_KS_NOSPLIT, bench/ksnosplit-check.tkm):
 *   fwd x 1024 x {2816, 3072} and grad_a x {2816, 3072} x 1024 at 385-512
 *   tokens on 128 tiles of 64 x 64 7-14% less time than split 2 on 128 x
 *   64 (grad_a 456 x 3072 x 1024 11.5 -> 10.4 us, 0.88 -> 0.98 of cuBLAS),
 *   20 random shapes of common sizes and the one of every dimension
 *   log-uniform 9-24% less;
 * - half to 5/6 (TK_GEMM_KS_NOSPLIT_HALF, bench/ksnosplit-half-check.tkm):
 *   the same families at 257-384 tokens (80-96 tiles) 3-10% less, 18
 *   random shapes of common sizes 5-20% less.
 * Left out after a first form: K of 4096 or more (x 1024 x 4096 at 385-512
 * tokens 0-2% slower; K = 5120-6573 up to 6% slower), a last column tile
 * partly empty (random shapes with N of 79-1892 off a multiple of 64:
 * 19-39% slower) and swapped 64-row tiles (64 x 32 at 193-256 tokens:
 * split 4 ran 8% faster on fwd 256 x 1024 x 2816 in an earlier --tune).
 * Plans it changes: 1,024 of 392,000 model shapes, 406 of 60,000 random
 * shapes of common transformer sizes, 1 of 60,000 with every dimension
 * log-uniform. TK_GEMM_KS_NOSPLIT 0: split as before;
 * TK_GEMM_KS_NOSPLIT_HALF 0: only from 5/6 of the chip. */
#ifndef TK_GEMM_KS_NOSPLIT
#define TK_GEMM_KS_NOSPLIT 1
#endif
#ifndef TK_GEMM_KS_NOSPLIT_HALF
#define TK_GEMM_KS_NOSPLIT_HALF 1
#endif
#define KS_NOSPLIT_K_MAX 4096
/* TK_GEMM_KS_WIDE: the split of a reduction of 2048-8191 below (128 x 64
 * tiles) takes 128-wide tiles instead where split_block_cost says a block
 * of them costs under KS_WIDE_GAIN of a 64-wide one: where the 64-wide
 * tiles' split is held to 2 by the wave (fwd 384 x 1024 x 4096: 96 blocks
 * split 2, against 120 split 5 on 128 x 128).
 * TK_GEMM_SPLIT_ROWS64: the long reductions' split on 128 x 128 tiles
 * takes 64-row tiles where a block of them costs under SPLIT_ROWS64_GAIN
 * (65-128 tokens: 16 tiles split 8 instead of 8).
 * H200, bench/sweep, the three builds in one call (0; the gain 0.75; 1.10,
 * docs/performance-gemm.md), cuBLAS time over ours: fwd x 1024 x 4096 at
 * 260-384 tokens 0.89-0.93 -> 0.95-1.00, grad_a x 4096 x 1024 at 300 and
 * 384 0.93 / 0.87 -> 0.99 / 0.92, grad_a x 50304 x 1024 at 65-128 tokens
 * 0.84-0.92 -> 0.94-0.97; at 1.10 the switches lost up to 11% at 150-200
 * tokens (fwd 200 x 1024 x 4096 9.7 -> 10.6 us) and gained nothing at
 * 150-192 tokens of the vocabulary. 0: as before.
 * SPLIT_ROWS64_GAIN 0.90 (was 0.75) since 64-row tiles wider than 64 run
 * one consumer warpgroup (tk__gemm_ks_one): it now also takes 3 rows of 8
 * tiles of 64 x 128 split 5 ways where 2 rows of 128 x 128 split 8 (one
 * round either way), and like cases. H200, both gains in one call, two runs
 * (docs/performance-gemm.md): grad_a x 50304 x 1024 at 171-192 tokens
 * 2.3-6.3% less time (183: 44.4 -> 41.7 us, 0.89 -> 0.94 of cuBLAS),
 * grad_a 140 x 32000 x 1024 4.4%, fwd 141-162 x 1024 x 20480 5-7%, grad_a
 * 95-125 x 50304 x 1536 2-5%, fwd 246 x 768 x 20480 5%; 145-150 tokens of
 * the vocabulary 1.4-1.7% more (where it replaces the one swapped tile),
 * fwd 100 x 1536 x 128256 2.0% more, 160 tokens and grad_a 238 x 128256 x
 * 768 even. Plans it changes, offline: 59 of 20,000 random model shapes (the
 * vocabulary's grad_a at 145-192 tokens), 48 of 20,000 of other sizes. */
#ifndef TK_GEMM_KS_WIDE
#define TK_GEMM_KS_WIDE 1
#endif
#ifndef TK_GEMM_SPLIT_ROWS64
#define TK_GEMM_SPLIT_ROWS64 1
#endif
#define KS_WIDE_GAIN 0.75
#ifndef SPLIT_ROWS64_GAIN
#define SPLIT_ROWS64_GAIN 0.90
#endif
/* TK_GEMM_SPLIT_CL, SPLIT_CL_KT_MAX: tk__gemm_split_cl_fits, below */
#ifndef TK_GEMM_SPLIT_CL
#define TK_GEMM_SPLIT_CL 1
#endif
#define SPLIT_CL_KT_MAX 64
/* TK_GEMM_KS_CL: where that rule keeps the 64-row tiles unsplit, the
 * 128 x 64 tiles' split of 2 (all the wave allows them there) is taken
 * after all when it is summed in a cluster (tk__gemm_split_cl_fits: no
 * fp32 workspace, no second kernel; the rule above was measured against the
 * reduce kernel). 1 (the default since 2026-11-29): in the half-to-5/6
 * band; 2: in both bands; 0: never.
 * H200, 2026-11-28, the three builds in one call, bench/sweep of fwd x 1024
 * x {2816, 3072} and grad_a x {2816, 3072} x 1024 at 200-512 tokens, two
 * runs each (docs/performance-gemm.md): 257-384 tokens (48 tiles of 128 x
 * 64, 96 blocks) 2.9-8.5% less time at all 28 shapes in both runs (grad_a
 * 280 x 3072 x 1024 10.55 -> 9.78 us, 0.88 -> 0.95 of cuBLAS); 400-460
 * tokens (64 tiles, 128 blocks) 0.1-4.9% less at all 12; 490-512 tokens
 * from 1.0% more to 1.6% less; 200 tokens (in neither band) within 1.1%.
 * Plans it changes (offline, 0 against 2): 2,006 of 100,000 random model
 * shapes, all of them those four families at 257-512 tokens.
 * The 5/6 band (385-512 tokens, 110-128 tiles of 64 x 64 against 64 tiles
 * of 128 x 64 split 2) measured again after the TMA kernel's K step lost
 * its per-wgmma descriptor arithmetic (stop 68): H200, 2026-11-29, 1 and 2
 * in one call, two runs each, bench/sweep of the same four families at 19
 * token counts of 385-512: the cluster split took 0.2-9.1% more time at
 * all 72 shapes (geomean 1.048x; fwd 505 x 1024 x 2816 0.96-0.98 -> 0.89-
 * 0.90 of cuBLAS, grad_a 510 x 2816 x 1024 0.94-0.96 -> 0.88-0.90), so 1. */
#ifndef TK_GEMM_KS_CL
#define TK_GEMM_KS_CL 1
#endif
/* 0: no such round; 1: the 64-row tiles make one round over half the chip
 * (under 5/6); 2: over 5/6 or more */
static int ks_fills_round(const gemm_plan *p)
{
    /* (no tile width outside the TMA plans) */
    if (!TK_GEMM_KS_NOSPLIT || !p->tma || p->wg_bm != 64 || p->wg_bn <= 0 || p->swap)
        return 0;
    const int64_t sms = plan_sms(p);
    const int64_t tiles = ((p->M + 63) / 64) * ((p->N + p->wg_bn - 1) / p->wg_bn);
    if (p->N % p->wg_bn != 0 || p->K >= KS_NOSPLIT_K_MAX)
        return 0;
    if (one_round_over(tiles, sms, KS_FILL_MIN_NUM, KS_FILL_MIN_DEN))
        return 2;
    return TK_GEMM_KS_NOSPLIT_HALF && one_round_over(tiles, sms, 1, 2);
}

/* The split factor for `tiles` output tiles over K tiles kt on sms
 * multiprocessors: one wave at most, at most 8 ways, each split at least
 * min_kt K tiles (then tk__gemm_split_clamp); below 2: no split. */
static int64_t ks_split(int64_t sms, int64_t tiles, int64_t kt, int64_t min_kt, int64_t M,
                        int64_t N)
{
    int64_t s = sms / tiles;
    if (s > 8)
        s = 8;
    return tk__gemm_split_clamp(s < kt / min_kt ? s : kt / min_kt, kt, M, N);
}

/* After tk__gemm_plan_wgmma: split-K when the output tiles fill well under one wave
 * of the chip and K is long. Splits = SMs / tiles (one wave at most), each
 * split at least SPLIT_MIN_KT_* K tiles (1024 of K on the TMA kernel, 256 or
 * 512 on mma.sync),
 * at most SPLIT_MAX, fp32 partials within SPLIT_WS_MAX. On sm_90 (aligned,
 * kernel M and N >= 128) the split runs on the TMA kernel with 128x128 tiles. */
static void plan_split(gemm_plan *p, int ks_full)
{
    int64_t bm, bn, bk, tiles, kt, s;
    int tma;
    p->splits = 1;
    if (!TK_GEMM_SPLITK || p->amd || p->simple)
        return;
    if (p->swap) {
        /* A swapped plan does not split as it is; where the unswapped plan
         * would (few tiles, a long reduction), that split wins (itself
         * maybe swapped again: split_try_swap): fwd N=1024 K=2816 at
         * 256 tokens split 4 on 128 x 64 tiles 9.2 us against 10.0 for 128
         * swapped tiles of 64 x 32 (--tune, cold operands, H100). */
        gemm_plan q = *p;
        tk__gemm_plan_swap(&q);
        plan_split(&q, ks_full);
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
         * cold operands, H100, bench/gemm-measurements.md: fwd N=1024 K=2816 at
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
        /* An output of at most an eighth of the chip in those tiles (the
         * router's grad_b: 1024 x 8, eight tiles) splits from 24 K tiles
         * (1536 of K) on: three splits of 8 K tiles or more. --tune of
         * grad_b N=8 K=1024, class M <= 1920 (kt 30), on an H100: unsplit
         * 8.8 us, split 3 8.1, split 4 7.9 (64-row tiles unsplit 7.7: not
         * taken, they lost at N = 8 in the forward, below); bench/sweep had
         * grad_b 1653x8x1024 and 1817x8x1024 unsplit at 0.77 and 0.74 of
         * cuBLAS. A 16-step reduction (K = 1024) stays unsplit (fwd N=2816
         * at 128 tokens: split 2 8.8 us against 7.2). */
        const int64_t kt_min = tiles * 8 <= p->sms ? 24 : 32;
        if (kt >= kt_min && kt < 128 && tiles * 2 <= p->sms) {
            s = ks_split(p->sms, tiles, kt, 8, p->M, p->N);
            if (ks_full) {
                /* TK_GEMM_KS_CL: the split of 2, in a cluster */
                if (ks_full <= TK_GEMM_KS_CL && TK_GEMM_SPLIT_CL == 1 && s == 2 &&
                    (p->K + 127) / 128 <= SPLIT_CL_KT_MAX) {
                    p->splits = 2;
                    p->wg_bn = 64;
                    p->wg_bm = (int)bm;
                }
                return;
            }
            int w = 64;
#if TK_GEMM_KS_WIDE
            /* 128-wide tiles where their split fills the chip enough
             * better to pay for the partials it adds (KS_WIDE_GAIN) */
            if (s >= 2 && p->N > 64) {
                const int64_t t2 = ((p->M + bm - 1) / bm) * ((p->N + 127) / 128);
                const int64_t s2 = ks_split(p->sms, t2, kt, 8, p->M, p->N);
                if (s2 >= 2 && split_block_cost(bm, 128, kt, s2) <
                                   split_block_cost(bm, 64, kt, s) * KS_WIDE_GAIN)
                    w = 128, s = s2;
            }
#endif
            if (s >= 2) {
                p->splits = (int)s;
                p->wg_bn = w;
                p->wg_bm = (int)bm;
            }
            return;
        }
        tiles = ((p->M + 127) / 128) * ((p->N + 127) / 128);
        /* A long reduction (128 K tiles or more) whose output is an eighth
         * to a half of the chip in 128 x 256 tiles splits on those tiles,
         * as many ways as whole waves allow (at most 8), so that the splits
         * of a tile walk K side by side and share the operands' rows in L2.
         * H100, bench/sweep, cuBLAS time over ours, before (132 64 x 176
         * tiles, or 128 x 128 tiles split 2) / after: grad_a with K = 50304
         * at 652-801 tokens 0.73-0.83 / 0.87-0.89, 1024 0.95 / 1.01, 1362
         * 0.69 / 1.01, 1100-2000 0.90-1.01 after; grad_a 1024x1024x32000
         * 0.95 / 0.99; fwd 700x1024x16384 0.83 / 0.89. Stream-K on 128 x
         * 256 tiles over every multiprocessor took 0.98 at 1362 tokens, but
         * 0.45-0.9x the time elsewhere: its blocks walk K at different
         * offsets (bench/gemm-measurements.md). */
        const int64_t tiles256 = ((p->M + 127) / 128) * ((p->N + 255) / 256);
        if (kt >= 128 && tiles256 * 8 >= NV_SMS && tiles256 * 2 <= NV_SMS) {
            /* The width (TK_GEMM_SPLIT_WIDTH: 128, 192 or 256, with K-major B
             * 144-240 too) and the split count whose one wave costs least
             * per block: 128 x bn / throughput / splits. */
            int best_bn = 256;
            int64_t best_s = 0;
            double best_cost = 0;
            for (int w = 256; w >= 128; w -= 16) {
                /* N-major B: whole 64-column boxes */
                if (w != 256 && (!TK_GEMM_SPLIT_WIDTH || (w % 64 != 0 && !p->b_kmajor)))
                    continue;
                const int64_t t = ((p->M + 127) / 128) * ((p->N + w - 1) / w);
                const int64_t sw =
                    tk__gemm_split_clamp(NV_SMS / t < 8 ? NV_SMS / t : 8, kt, p->M, p->N);
                if (sw < 2)
                    continue;
                const double cost = 128.0 * w / split_eff(w) / (double)sw;
                if (best_s == 0 || cost < best_cost * SPLIT_WIDTH_GAIN)
                    best_bn = w, best_s = sw, best_cost = cost;
            }
            if (best_s >= 2) {
                p->splits = (int)best_s;
                p->wg_bn = best_bn;
                p->wg_bm = 128;
                split_try_swap(p, best_cost, SPLIT_SWAP_GAIN);
            }
            return;
        }
        if (kt < 32 || (tiles * 16 > NV_SMS && (tiles * 2 > NV_SMS || kt < 128)))
            return;
        s = ks_split(NV_SMS, tiles, kt, 4, p->M, p->N);
        if (s >= 2) {
            /* 64 columns where they hold all of N: the router's grad_b (N =
             * 8, K = 2048-16384 tokens) ran 1.20-1.26x faster split 8 on
             * 128 x 64 tiles than on 128 x 128 (--tune, cold operands; the
             * copies of a box mostly outside the tensor are slow) */
            const int w = p->N <= 64 ? 64 : 128;
            int rows = 128;
#if TK_GEMM_SPLIT_ROWS64
            /* 64-row tiles where the tokens leave 128-row ones partly
             * empty or too few to fill the chip (SPLIT_ROWS64_GAIN) */
            if (w == 128 && p->M > 64) {
                const int64_t t64 = ((p->M + 63) / 64) * ((p->N + 127) / 128);
                const int64_t s64 = ks_split(NV_SMS, t64, kt, 4, p->M, p->N);
                if (s64 >= 2 && split_block_cost(64, w, kt, s64) <
                                    split_block_cost(128, w, kt, s) * SPLIT_ROWS64_GAIN)
                    rows = 64, s = s64;
            }
#endif
            p->splits = (int)s;
            p->wg_bn = w;
            p->wg_bm = rows;
            split_try_swap(p, (double)rows * w / split_tile_eff(rows, w) / (double)s,
                           SPLIT_SWAP_GAIN_128);
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
    s = tk__gemm_split_clamp(s, kt, p->M, p->N);
    if (s < 2)
        return;
    p->splits = (int)s;
    if (tma) {
        p->wgmma = 1;
        p->tma = 1;
        p->wg_bn = 128;
        p->wg_bm = 128;
    }
}

/* Split-K summed in a cluster (TK_SPLITK 2, tma_wgmma.cuh kcl_store): the
 * splits of a tile run as one cluster and add their partials through
 * distributed shared memory, each block storing a slice of the tile, where
 * the reduce kernel reads fp32 partials back from a workspace after a
 * second launch. The heuristics take it for splits of 2 (TK_GEMM_SPLIT_CL
 * 1; 0: never, 2: every split that fits). H200, tokitai-jit --tune -v and
 * bench/sweep with every split in a cluster (docs/performance-gemm.md,
 * "Split-K summed in a cluster"):
 * - 2 splits: 0.88-1.09x the reduce kernel's time, 38 of 47 pairs faster
 *   (fwd 384 x 1024 x 2816 on 64 x 128 tiles 11.3 -> 10.0 us); in
 *   bench/sweep fwd x 1024 x 4096 and grad_a x 4096 x 1024 at 400-512
 *   tokens 3.3-7.7% less time (grad_a 410 x 4096 x 1024 0.88 -> 0.95 of
 *   cuBLAS);
 * - 3 to 6 splits: 0.93-2.0x, 17 of 143 faster. Clusters beyond those
 *   resident (one block per SM: 66 of 2, 39 of 3, 30 of 4, 22 of 5, 17 of
 *   6, 15 of 7 or 8 on the H200, cudaOccupancyMaxActiveClusters) run a
 *   second round, and with all resident each block still reads (S - 1) / S
 *   of the tile from the others.
 * A split of 2 makes one round of tiles at most (plan_split), 66 pairs.
 * Long reductions keep the reduce kernel (its share of the call is small):
 * at K = 50304 (393 K steps a split) 2 splits in a cluster were 0-1% apart
 * on 128-row tiles and up to 9% slower on 64-row and narrow swapped ones. */
int tk__gemm_split_cl_fits(const gemm_plan *p)
{
    const int bm = p->wg_bm, bn = p->wg_bn;
    const int ew = bm == 64 ? bn / 2 : bn; /* a consumer warpgroup's columns */
    const int units = (bm == 64 ? 1 : bm / 128) * (ew / 8);
    return p->tma && p->splits >= 2 && p->splits <= 8 && p->persist == 0 && !p->epi_tma &&
           p->cluster <= 1 && ew % 8 == 0 && units >= p->splits &&
           (int64_t)bm * bn * 4 <= (int64_t)p->wg_stages * (bm + bn) * 128;
}

void tk__gemm_plan_split(gemm_plan *p)
{
    plan_split(p, ks_fills_round(p));
}

/* The router's forward (N <= 8 columns; the MoE gate's 8 experts) reads A
 * once and computes little: 128-row tiles waste 15/16 of their width, and
 * on an H100 the TMA kernel ran 16384 x 8 x 1024 in 25.7 us (1.25 TB/s)
 * against 16.3 for cuBLAS. The skinny kernel (TK_GEMM_SKINNY) streams A
 * with 16-byte loads into mma.sync. It needs an NVIDIA sm_80+ target, A
 * 16-byte aligned with lda % 8 == 0, K % 8 == 0 and K <= SKINNY_K_MAX (B
 * sits in shared memory, 16 bytes per k). A block takes 32 rows with the
 * whole reduction: one round of loads where the TMA kernel fills a
 * pipeline, which wins at a short reduction (below), and at longer ones
 * from SKINNY_M_MIN rows; in between the TMA kernel's split grid is faster.
 * H100, bench/sweep with programmatic dependent launch on both, cuBLAS
 * time over ours, skinny / TMA on one machine, two or three runs each:
 * K = 1024 at 70-1000 rows 1.11-1.25 / 0.89-1.05, 1500-2000 0.81-0.86 /
 * 0.87-0.96, 3000 0.95-0.96 / 0.91-0.93, 4000 0.98 / 0.87-0.88; K = 2816
 * at 300 rows 0.88-0.89 / 1.11-1.14; K = 4096 at 3000 rows 0.65 / 0.97-0.98
 * (bench/gemm-measurements.md). Since 2026-11-28 the skinny kernel has all
 * of a thread's loads in flight before its mmas (H200, K = 1024: 70-16384
 * rows 0.96-1.43 of cuBLAS, 0.85-1.25 before; docs/performance-gemm.md).
 * With it the skinny kernel takes K <= 1024 at every row count
 * (TK_GEMM_SKINNY_MID; 0: the TMA kernel for 1025-3071 rows as before):
 * H200, both ways in one call, 1100-3000 x 8 x 1024 0.89-1.01 of cuBLAS on
 * the TMA kernel, 1.28-1.54 on skinny (--tune at 1152, 2176 and 3072 rows:
 * 3.9 / 4.7 / 5.0 us against the best TMA plan's 5.5 / 5.9 / 6.8). Longer
 * reductions keep the H100's band (SKINNY_M_MIN); this rule has not been
 * measured on an H100. */
/* Off the tiled kernels' options: the plan for a kernel of its own
 * (skinny, small-K) or for mma.sync (which sets its tile). */
void tk__gemm_plan_untiled(gemm_plan *p)
{
    p->wgmma = 0, p->tma = 0, p->persist = 0, p->epi_tma = 0, p->cluster = 0, p->splits = 1;
    p->cluster_rows = 0, p->split_cl = 0;
}

#define SKINNY_N_MAX 8
#define SKINNY_K_MAX 8192
#define SKINNY_M_MIN 3072
#define SKINNY_SMALL_M_MAX 1024 /* ... and up to this many rows */
#define SKINNY_SMALL_K_MAX 1024 /* of a reduction this short */
#ifndef TK_GEMM_SKINNY_MID
#define TK_GEMM_SKINNY_MID 1 /* see above */
#endif
int tk__gemm_skinny_fits(const gemm_plan *p)
{
    return TK_GEMM_SKINNY && !p->amd && !p->simple && p->a_kmajor && !p->b_kmajor && !p->swap &&
           !p->out_f16 && p->N <= SKINNY_N_MAX && p->K % 8 == 0 && p->K <= SKINNY_K_MAX &&
           p->aligned;
}

/* The router's weight gradient (grad_b with N <= 8: kernel M = d_model, K =
 * the tokens, A M-major, B N-major) is one read of the activations too. On
 * the TMA kernel its output is a handful of 128 x 64 tiles whose boxes of B
 * hold 8 real columns in 64, split-K and a reduce kernel after it:
 * bench/sweep on an H100 had grad_b 1196-1817 x 8 x 1024 at 0.74-0.86 of
 * cuBLAS. The skinny weight-gradient kernel (TK_GEMM_SKINNY 2) gives each
 * block 8 values of m and all the tokens, 16-byte loads into fp32 FMAs: one
 * kernel, no split, a block per multiprocessor at d_model = 1024. Below
 * SKINNY_WGRAD_M_MIN values of m it would leave most of the chip idle. Its
 * rate is about a third of a token row per clock per multiprocessor (each
 * block reads 16 of every 32 bytes of A's sectors and all of B): the
 * heuristics take it while a multiprocessor's share is at most
 * SKINNY_WGRAD_ROWS_MAX rows (H100, bench/sweep, cuBLAS time over ours:
 * d_model 1024 at 64-2047 tokens 0.99-1.21, 4096 tokens 0.93, 9000 0.80,
 * 16384 0.75; d_model 512 at 2000 tokens 1.31, 9000 0.84; d_model 4096 at
 * 2000 0.58); beyond it the split kind 3 on sm_90 (below), the TMA
 * kernel elsewhere.
 * Two earlier forms with the tokens split lost to the TMA path
 * (bench/gemm-measurements.md): 64 values of m per block with a split-K
 * reduce kernel after it (0.61-0.77 of cuBLAS), and the splits summed by
 * the last block of each chunk (0.40-0.65: the fence, counter and second
 * read of the partials add up at a few thousand tokens). Needs A and B
 * 16-byte aligned with lda, ldb % 8 == 0 (TK_ALIGNED). */
#define SKINNY_WGRAD_M_MIN 512
#ifndef SKINNY_WGRAD_ROWS_MAX
#define SKINNY_WGRAD_ROWS_MAX 3072
#endif
int tk__gemm_skinny_wgrad_fits(const gemm_plan *p)
{
    return TK_GEMM_SKINNY && !p->amd && !p->simple && !p->a_kmajor && !p->b_kmajor && !p->swap &&
           p->N <= SKINNY_N_MAX && p->aligned && p->M >= SKINNY_WGRAD_M_MIN && p->K < INT32_MAX;
}

/* Past SKINNY_WGRAD_ROWS_MAX rows a multiprocessor, on sm_90: the weight
 * gradient split over the tokens on the tensor cores (TK_GEMM_SKINNY 3). A
 * block of 4 warps takes 256 values of m and one split of the tokens, a
 * block per multiprocessor; the splits come in clusters of SKS_CL that add
 * their sums through distributed shared memory, so the reduce kernel sums
 * S / SKS_CL planes. The grid is one round of SKS_BLOCKS_PER_8 eighths of
 * the multiprocessors: a cluster's blocks share a GPC, and not every GPC
 * holds a whole number of clusters. H200, bench/sweep, cuBLAS time over
 * ours, two runs (bench/gemm-measurements.md): d_model 1024 at 3600-16384
 * tokens 0.957-1.122 (the TMA path it replaces 0.878-1.094, under 0.90 at
 * 10000-14097 tokens), d_model 512 at 16000 0.95 (0.85), d_model 4096 at
 * 2000-9000 0.86-1.06 (0.68-0.89). On every multiprocessor, clusters of 2
 * read 0.75-0.96 and clusters of 4 0.85-0.93 at d_model 1024 past 5000
 * tokens and at 512 (clusters of 2: 0.98 at d_model 4096 and 9000 tokens,
 * against 0.94). */
#ifndef TK_GEMM_SKINNY_SPLIT
#define TK_GEMM_SKINNY_SPLIT 1
#endif
#ifndef SKS_BLOCKS_PER_8
#define SKS_BLOCKS_PER_8 7
#endif
int tk__gemm_skinny_split_fits(const gemm_plan *p)
{
    return TK_GEMM_SKINNY_SPLIT && p->sm90 && tk__gemm_skinny_wgrad_fits(p);
}

/* The grid rows (splits) of kind 3: a multiple of SKS_CL. */
static int sks_splits(const gemm_plan *p)
{
    const int64_t mb = (p->M + 255) / 256, s = plan_sms(p) * SKS_BLOCKS_PER_8 / 8 / mb;
    return (int)(s < SKS_CL ? SKS_CL : s / SKS_CL * SKS_CL);
}

/* The weight gradient's skinny kind: 2 while a multiprocessor's share of
 * the token rows is at most SKINNY_WGRAD_ROWS_MAX (or kind 3 does not fit),
 * else 3; 0 when kind 3 would be needed and does not fit. */
static int skinny_wgrad_kind(const gemm_plan *p)
{
    const int64_t sms = plan_sms(p);
    if (((p->M + 7) / 8 + sms - 1) / sms * p->K <= SKINNY_WGRAD_ROWS_MAX)
        return 2;
    return tk__gemm_skinny_split_fits(p) ? 3 : 0;
}

/* p on a skinny kernel whatever its row count: kind 1 (the forward), 2 or 3
 * (the weight gradient: kind 3 where its rule takes it, skinny_wgrad_kind),
 * the kind returned; 0 when none fits (p unchanged). */
int tk__gemm_plan_skinny_as(gemm_plan *p)
{
    int kind = tk__gemm_skinny_fits(p) ? 1 : tk__gemm_skinny_wgrad_fits(p) ? 2 : 0;
    if (kind == 2 && skinny_wgrad_kind(p) == 3)
        kind = 3;
    if (kind != 0) {
        tk__gemm_plan_untiled(p);
        p->skinny = kind;
        if (kind == 3)
            p->splits = sks_splits(p);
    }
    return kind;
}

/* After tk__gemm_plan_grid: the skinny kernel for router-sized forwards with
 * few rows and a short reduction or with rows enough to fill the chip (see
 * above), and for the router's weight gradient while a multiprocessor's
 * share of the token rows is small. */
void tk__gemm_plan_skinny(gemm_plan *p)
{
    p->skinny = 0;
    if (tk__gemm_skinny_fits(p)) {
        if (p->M < SKINNY_M_MIN &&
            (TK_GEMM_SKINNY_MID ? p->K > SKINNY_SMALL_K_MAX
                                : (p->M > SKINNY_SMALL_M_MAX || p->K > SKINNY_SMALL_K_MAX)))
            return;
    } else if (!tk__gemm_skinny_wgrad_fits(p) || skinny_wgrad_kind(p) == 0) {
        return;
    }
    tk__gemm_plan_skinny_as(p);
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
int tk__gemm_smallk_fits(const gemm_plan *p)
{
    return TK_GEMM_SMALLK && !p->amd && !p->simple && p->K <= SMALLK_K_MAX;
}

/* After tk__gemm_plan_skinny: the small-K kernel, in the op's own (unswapped) terms. */
void tk__gemm_plan_smallk(gemm_plan *p)
{
    p->smallk = 0;
    if (p->skinny || !tk__gemm_smallk_fits(p))
        return;
    if (p->swap)
        tk__gemm_plan_swap(p);
    p->smallk = 1;
    tk__gemm_plan_untiled(p);
}

/* The tile order walks N in groups of tile rows (tk_gemm_tile_of): B's
 * panels are read once per group. Where B is too large to stay in L2
 * between groups (the vocabulary's N = 50304: 103 MB at K = 1024), groups
 * of 16 rows instead of 8 halve its reads from DRAM. H100, bench/sweep,
 * cuBLAS time over ours, groups of 16 / 8 in one call: fwd 1077 / 1338 /
 * 7243 x 50304 x 1024 0.92 / 0.97 / 0.96-0.97 against 0.83 / 0.92 / 0.94;
 * shapes with N = 1024-4096 moved by -2% to +1% (bench/group-check.tkm),
 * so they keep 8. Decided on the kernel's N only where N is not the token
 * count (a baked dimension: no new kernel per token count). */
#define GROUP16_N_MIN 16384

/* fp32 outputs (the forward's) on a short reduction: its cooperative tile
 * stores 4 bytes an element after each main loop, the tensor cores idle
 * meanwhile. Where 128 x PP_F32_BN tiles (unswapped) make PP_F32_ROUNDS10
 * / 10 rounds or more, filling the rounds' blocks (tiles over rounds x
 * SMs) to PP_F32_FILL_NUM / _DEN or more (under two rounds the fill alone
 * asks for 1.7), in PP_F32_TM_MIN rows of tiles or more (PP_F32_TM_MIN_COOP
 * where the plan is unswapped), K at most PP_K_MAX and
 * C as the TMA-store epilogue needs it, the call runs ping-pong tiles of
 * that width, stored by the TMA-store epilogue while the other warpgroup
 * computes (TK_GEMM_PP_F32 0: as before). H100:
 *  - cfgrun (tuning records naming each form, one call): fwd 9986 x 50304 x
 *    1024 1884.7 -> 1698.3 us against the cooperative 128 x 256 tiles,
 *    12849 x 2816 x 1024 130.1 -> 119.6; 128-wide ping-pong tiles 0.7-18%
 *    slower than 192 wide, the same tiles stored from registers 17-31%
 *    slower, and at K = 4096 (16271 x 1024 x 4096) 11% slower than the
 *    cooperative tiles;
 *  - bench/sweep of bench/ppf32-check.tkm, both ways in one call, two runs
 *    (the rule's first form: past one round): 3-13% less time from 2.5
 *    rounds on where the last round was full (fwd 16384 x 50304 x 1024
 *    2839 -> 2458 us, 3000 x 3072 x 1024 36.0 -> 31.3, 4500 x 4096 x 1024
 *    70.8 -> 61.9, 4500 x 3072 x 1024 at 4.4 rounds 51.3 -> 48.2), but
 *    1-18% more under 2.5 rounds (1000 x 4096 x 1024 17.4 -> 20.6), 4-10%
 *    more where the last round was 0.68-0.82 full (2200 x 2816 x 1024 at
 *    2.05 rounds, 4500 x 2816 x 1024 at 4.09), and 3-11% more at 300-500
 *    tokens of the vocabulary (3-4 rows of tiles, against the swapped wide
 *    tiles holding the tokens; 700 tokens, 6 rows, 1.5% less);
 *  - the rule from 2.5 rounds, bench/ppf32-edge-check.tkm (18 shapes on
 *    both sides of its bounds), both ways in one call, two runs: time
 *    0.956x, the shapes it takes 2-12.5% faster (3000 x 3072 x 1024 36.28
 *    -> 31.73 us, 0.985 -> 1.126 of cuBLAS), those it leaves within 0.4%;
 *  - from 1.7 rounds (PP_F32_ROUNDS10 25 -> 17: the shapes of 1.7-1.94
 *    rounds whose rounds' blocks are 0.85 full or more, against swapped or
 *    128-wide cooperative tiles on the persistent grid),
 *    bench/ppf32-round2-check.tkm (19 shapes it takes at N = 2816, 3072,
 *    4096 and K = 1024, 3 it leaves), both ways in one call, two runs:
 *    time 0.953x; 1950-2048 x 3072 x 1024 12.5% faster (2000: 25.46 ->
 *    22.28 us, 0.982 -> 1.122 of cuBLAS), 2053 x 2816 x 1024 0.914 ->
 *    0.965, 1420-1530 x 4096 x 1024 8-9%; 1290 and 1330 x 4096 x 1024 and
 *    1800 x 2816 x 1024 0.9-1.4% slower, the three left alone within
 *    0.2%;
 *  - 5 rows of tiles where the plan is unswapped (PP_F32_TM_MIN_COOP; the
 *    vocabulary's forward at 577-640 tokens, cooperative 128 x 256
 *    before), bench/ppf32-5rows-check.tkm, both ways in one call: the six
 *    it takes 3.2-4.5% faster (577: 116.9 -> 111.6 us, 0.889 -> 0.931 of
 *    cuBLAS), the three it leaves within 0.2% (at 540 tokens, swapped 128
 *    x 184, cfgrun had these tiles level or 3% slower);
 *  - 3 rows of tiles where the plan is unswapped (PP_F32_TM_MIN_COOP 5 ->
 *    3; H200, bench/ppf32-3rows-check.tkm, both ways in one call, two
 *    runs): the 11 shapes it takes 0.7-7.0% faster (fwd 360 x 50304 x
 *    1024 73.7 -> 68.5 us, 0.95 -> 1.02 of cuBLAS; 450: 89.4 -> 85.7,
 *    0.90 -> 0.94; fwd 500 x 128256 x 1024 5.1%; grad_a 480 x 1024 x
 *    50304, an fp16 output, 3.5%), the six it leaves within 0.5%; plans
 *    it changes, offline: 299 of 200,000 random model shapes (the
 *    vocabulary's forward at 353-512 tokens, where it is unswapped).
 *    Forced through tuning records at 260-384 tokens (same machine): these
 *    tiles 66.3-68.6 us at every count, against 58.4-65.2 for the swapped
 *    tiles the plan takes at 260-330, so not there.
 * fp16 outputs take the same tiles where their plan is wider than
 * ping-pong tiles hold (208-256 columns, unswapped: grad_a with N = 1024,
 * the vocabulary's grad_b up to 2048 tokens), the reduction is more than
 * PP16_WIDE_K_MIN and the 192-wide tiles fill the rounds' blocks to
 * PP16_WIDE_FILL_NUM / _DEN (0.92; narrower plans keep their width,
 * plan_grid_epi). TK_GEMM_PP16_WIDE 0 / 1, both ways in one call each, two
 * runs: bench/pp16-wide-check.tkm (29 shapes the form reaches at 0.85):
 * 0.97 or fuller 3-10% faster (grad_b 1027 x 50304 x 1024 171.9 -> 154.9
 * us, 0.906 -> 1.005 of cuBLAS; grad_a 15705 x 1024 x 3072 146.1 -> 133.0),
 * at 0.87-0.91 of the blocks (two or three rounds, where the 256-wide
 * tiles fill theirs) 1.6-3.7% slower, grad_b at 100 tokens (2 K steps)
 * 1.4% slower: hence 0.92 and 3 K steps; then bench/pp16-wide2-check.tkm
 * (other token counts, the final rule): the 16 it takes 1.9-9.3% faster
 * (grad_a 11000 x 1024 x 2816 97.4 -> 88.3 us), the 9 it leaves within
 * 0.3%, time 0.971x. */
#ifndef TK_GEMM_PP_F32
#define TK_GEMM_PP_F32 1
#endif
#define PP_F32_BN 192
#define PP_F32_FILL_NUM 17
#define PP_F32_FILL_DEN 20
#define PP_F32_TM_MIN 6
#ifndef PP_F32_TM_MIN_COOP
#define PP_F32_TM_MIN_COOP 3
#endif
#ifndef PP_F32_ROUNDS10
#define PP_F32_ROUNDS10 17
#endif
#ifndef TK_GEMM_PP16_WIDE
#define TK_GEMM_PP16_WIDE 1
#endif
#define PP16_WIDE_FILL_NUM 23
#define PP16_WIDE_FILL_DEN 25
#define PP16_WIDE_K_MIN 128
/* Whether `tiles` tiles make PP_F32_ROUNDS10 / 10 rounds of sms blocks or
 * more and fill the rounds' blocks to num / den: the ping-pong rules'
 * shared bound (plan_pp_f32, plan_grid_epi). */
static int pp_rounds_full(int64_t tiles, int64_t sms, int64_t num, int64_t den)
{
    const int64_t blocks = (tiles + sms - 1) / sms * sms;
    return tiles * 10 >= PP_F32_ROUNDS10 * sms && tiles * den >= num * blocks;
}

static int plan_pp_f32(gemm_plan *p)
{
    /* fp16 outputs (TK_GEMM_PP16_WIDE): unswapped tiles wider than
     * ping-pong holds (208-256; narrower ones keep their width,
     * plan_grid_epi), over 3 K steps or more, where the 192-wide tiles fill
     * the rounds' blocks to PP16_WIDE_FILL_NUM / _DEN */
    const int wide16 = TK_GEMM_PP16_WIDE && p->out_f16 && !p->swap && p->wg_bm == 128 &&
                       p->wg_bn > PP_BN_MAX && p->K > PP16_WIDE_K_MIN;
    if (!TK_GEMM_PP_F32 || !TK_GEMM_EPI_TMA || !p->tma || (p->out_f16 && !wide16) || !p->c16 ||
        p->splits != 1 || p->K > PP_K_MAX || p->K <= 64 || p->cluster || p->cluster_rows)
        return 0;
    /* (an fp32 output is the forward's: the tokens on M when unswapped) */
    const int64_t M = p->swap ? p->N : p->M, N = p->swap ? p->M : p->N;
    const int64_t sms = plan_sms(p), tm = (M + 127) / 128;
    const int64_t tiles = tm * ((N + PP_F32_BN - 1) / PP_F32_BN);
    if (N < PP_F32_BN || tm < (p->swap ? PP_F32_TM_MIN : PP_F32_TM_MIN_COOP) ||
        !pp_rounds_full(tiles, sms, wide16 ? PP16_WIDE_FILL_NUM : PP_F32_FILL_NUM,
                        wide16 ? PP16_WIDE_FILL_DEN : PP_F32_FILL_DEN))
        return 0;
    if (p->swap)
        tk__gemm_plan_swap(p);
    p->wg_bm = 128;
    p->wg_bn = PP_F32_BN;
    p->persist = 3;
    p->epi_tma = 1;
    return 1;
}

/* The heuristics' grid and epilogue, after tk__gemm_plan_split (tokitai-jit --tune
 * of the MoE expert shapes on an H100, bench/gemm-measurements.md): the unsplit
 * TMA kernel stores C with the TMA-store epilogue (1-5% faster than staging
 * through the ring); more than a wave of tiles runs on a persistent grid
 * (its stores overlap the next tile's main loop: 8-19% faster than a block
 * per tile at fwd 2048x2816x1024, grad_a 2048x1024x2816). Stream-K is left
 * to tuning records: it lost to the persistent grid where the heuristics
 * tried it (fwd 1920x2816x1024: 28.3 against 24.2 us). */
static void plan_grid_epi(gemm_plan *p)
{
    const int pp = p->tma && p->persist == 3 && p->splits == 1 && p->wg_bm == 128;
    p->persist = 0;
    p->epi_tma = 0;
    const int pp32 = plan_pp_f32(p); /* (may unswap p) */
    p->group16 = p->tma && p->moving != 1 && p->N >= GROUP16_N_MIN;
    if (pp32)
        return;
    if (!p->tma || p->splits != 1)
        return;
    if (pp) { /* plan_wgmma's ping-pong tiles: a persistent grid, stored from registers */
        p->persist = 3;
        return;
    }
    if (p->wg_bm != 128 || (p->swap && (!TK_GEMM_SWAP_EPI || p->wg_bn < SWAP_EPI_BN_MIN)))
        return; /* a block per tile, stored from the ring */
    p->epi_tma = TK_GEMM_EPI_TMA && p->c16;
    if (p->swap && !p->epi_tma) /* no other epilogue of a persistent swapped tile is fast */
        return;
    /* not for a single K step: the tiles are all epilogue, and a block per
     * tile ran faster (grad_a 16384 x 8 x 1024, a 16384 x 1024 output with
     * K = 8: 128 x 256 tiles in 22.1 us against 26.6 persistent); more
     * than a wave of the plan's own multiprocessors, as swap_persist_epi
     * predicts and the launch sizes the grid */
    const int64_t tiles = ((p->M + 127) / 128) * ((p->N + p->wg_bn - 1) / p->wg_bn);
    p->persist = tiles > plan_sms(p) && p->K > 64;
    /* On a short reduction the cooperative tile's epilogue is a large share
     * of its time, the tensor cores idle meanwhile: past TK_GEMM_PP_ROUNDS
     * rounds, or from 1.7 rounds that fill their blocks to 0.85, the same
     * tile runs ping-pong (PP_K_MAX; widths of 16 g + 8 have no ping-pong
     * form). */
    const int64_t sms = plan_sms(p);
    if (TK_GEMM_PP_ROUNDS > 0 && p->persist && !p->swap && p->out_f16 && p->wg_bn <= PP_BN_MAX &&
        p->wg_bn % 16 == 0 && p->K <= PP_K_MAX &&
        (tiles > TK_GEMM_PP_ROUNDS * sms ||
         (TK_GEMM_PP16_FILL && pp_rounds_full(tiles, sms, PP_F32_FILL_NUM, PP_F32_FILL_DEN)))) {
        p->persist = 3;
        p->epi_tma = TK_GEMM_PP_EPI ? p->epi_tma : 0;
    }
}
/* Clusters of two blocks sharing their A tile by TMA multicast (`cl=2`,
 * column tiles in pairs) for one round of narrow 128-row tiles (at most
 * PAIRS_BN_MAX columns) over a long reduction (PAIRS_K_MIN or more): A
 * stored M-major (the pair loads it in the 64 x 64 boxes a block alone
 * uses), at least PAIRS_TM_MIN rows of tiles, a whole number of pairs and
 * 5/6 of the chip or more. Such blocks read the most operand bytes per
 * FLOP, and the pair halves A's share. H100, 2026-11-27
 * (bench/gemm-measurements.md; bench/pairs-check.tkm both ways in one
 * call, two runs): fwd x 1024 x 4096 at 1041-1536 tokens (swapped 128 x 80
 * and 128 x 96 tiles) 3.7-5.5% less time (1050: 20.2 -> 19.2 us, 0.86 ->
 * 0.92 of cuBLAS), 18 random shapes of common sizes 3-22% less; with 2 and
 * 4 rows of tiles (fwd 4770 x 256 x 6144, 2385 x 512 x 4096: each A tile
 * read by 30-60 blocks at once) 4-5% more. Earlier in the day: with K =
 * 2816-3072 pairs lost up to 7%, on 128-wide tiles 2-3%, with K-major A
 * (two 64-row boxes where a block alone loads one of 128 rows) 2-13%.
 * TK_GEMM_PAIRS 0: never. */
#ifndef TK_GEMM_PAIRS
#define TK_GEMM_PAIRS 1
#endif
#define PAIRS_K_MIN 4096
_Static_assert(SWAP_HALF_K_MAX == PAIRS_K_MIN, "widths of 16 g + 8 where no pairs are taken");
#define PAIRS_BN_MAX 96
#define PAIRS_TM_MIN 6
/* The pairs become clusters of 2 x 2 blocks (`cl=4`, B shared down each
 * column too) where the rows of tiles pair up, B is K-major (N-major B
 * would need whole 128-column halves) and every cluster is resident at once.
 * Clusters of four need four SMs of one GPC. A Hopper (GH100) has at most 8
 * GPCs, each with a whole number of TPCs (two SMs each), so a GPC leaves at
 * most one TPC out of its fours, and sms / 4 - 4 clusters of four always
 * fit (29 on 132 SMs). H100 SXM, 2026-11-27 (bench/pairs-check.tkm both
 * ways in one call, two runs, bench/gemm-measurements.md): 28 clusters
 * (fwd x 1024 x 4096 at 1041-1120 and 1281-1344 tokens, 112 blocks) took
 * 1.6-6% less time than the pairs (1050: 19.10 -> 18.52 us), 30 clusters
 * (120 blocks) 3.8-7% less on that machine, but 32-33 clusters (128-132
 * blocks) 1.5-1.8x more: they did not all fit, and a second round ran.
 * TK_GEMM_QUADS 0: never. */
#ifndef TK_GEMM_QUADS
#define TK_GEMM_QUADS 1
#endif
/* The heuristics' cluster size: 2 (the pairs above), 4 (the fours above)
 * or 0. */
static int plan_cluster(const gemm_plan *p)
{
    if (!TK_GEMM_PAIRS || !p->tma || p->a_kmajor || p->wg_bm != 128 || p->wg_bn <= 0 ||
        p->wg_bn > PAIRS_BN_MAX || p->splits != 1 || p->persist != 0 || p->epi_tma ||
        p->K < PAIRS_K_MIN)
        return 0;
    const int64_t sms = plan_sms(p);
    const int64_t tm = (p->M + 127) / 128, tn = (p->N + p->wg_bn - 1) / p->wg_bn, tiles = tm * tn;
    if (tm < PAIRS_TM_MIN || tn % 2 != 0 ||
        !one_round_over(tiles, sms, KS_FILL_MIN_NUM, KS_FILL_MIN_DEN))
        return 0;
    return TK_GEMM_QUADS && p->b_kmajor && p->wg_bn % 16 == 0 && tm % 2 == 0 &&
                   tiles / 4 <= sms / 4 - 4
               ? 4
               : 2;
}

/* Swapped tiles trimmed to the fewest columns, in steps of 8, that keep
 * their column-tile count (and so the grid, its rounds and every choice
 * made on the 16-wide steps): the tokens on the tile's width, each tile up
 * to 8 fewer empty columns (fwd 540 x 50304 x 1024: 3 x 184 = 552 columns
 * where 3 x 192 made 576). Widths of 16 g + 8 need B K-major (the swapped
 * plan's B is the op's tokens side, K-major in fwd and grad_a), 128- or
 * 256-row tiles, no ping-pong and no cluster here (the pairs and fours
 * were measured on 16-wide steps); the TMA-store epilogue stores such a
 * tile's last 8 C rows from its staging with the threads (tma_wgmma.cuh,
 * store_acc_tma_t). TK_GEMM_SWAP_TRIM 0: the widths as picked; 1: the
 * wide tiles on the TMA-store epilogue only; 2: every such swapped tile. */
#ifndef TK_GEMM_SWAP_TRIM
#define TK_GEMM_SWAP_TRIM 2
#endif
static void plan_swap_trim(gemm_plan *p)
{
    if (!TK_GEMM_SWAP_TRIM || !p->tma || !p->swap || p->persist == 3 || p->cluster != 0 ||
        p->cluster_rows || !p->b_kmajor || (p->wg_bm != 128 && p->wg_bm != 256) ||
        (TK_GEMM_SWAP_TRIM == 1 &&
         (!p->epi_tma || p->wg_bm != 128 || p->splits != 1 || p->wg_bn <= SWAP_EPI_BN_MIN)))
        return;
    const int64_t tn = (p->N + p->wg_bn - 1) / p->wg_bn;
    const int64_t w = ((p->N + tn - 1) / tn + 7) / 8 * 8;
    /* (the epilogue chosen for the width stays: at least 24 columns, and
     * the TMA-store one's wide tiles past SWAP_EPI_BN_MIN) */
    if (w >= 24 && w < p->wg_bn && (!p->epi_tma || p->wg_bm != 128 || w > SWAP_EPI_BN_MIN))
        p->wg_bn = (int)w;
}

/* Swapped tiles in two columns (the tokens in two halves), fp32 C (the
 * forward), more than a round of them: wide 128-row tiles on the
 * persistent TMA-store grid (reductions up to 1024), or 256-row tiles a
 * block each (longer ones). 256-row tiles as wide as half the tokens
 * instead, the two of each row of tiles in a cluster sharing their A
 * (weight) tile, on the persistent grid, stored from registers (cuBLAS's form there: nvjet 256 x
 * 144 and 256 x 152 in clusters of 1 x 2 on 132 blocks at fwd 279 and 301 x 50304 x 1024, ncu).
 * Each block loads 256 + w rows per K step for 256 x w outputs where the
 * 128-row tiles load 128 + w for 128 x w, and the pair halves the weight
 * rows' share. H200, bench/sweep of bench/pair256-check.tkm, both ways in
 * one call, two runs (docs/performance-gemm.md): fwd 257-330 x 50304 x 1024
 * 2.1-8.2% less time (279: 59.35 -> 55.58 us, 0.86 -> 0.92 of cuBLAS),
 * 260 / 300 x 32000 x 1024 5.2% / 2.5%, 280 x 128256 x 1024 4.9%, 300 x
 * 50304 x 2048 (256-row tiles a block each before) 4.8%, 270 x 32000 x 4096
 * 4.2%, 260 x 151936 x 2048 7.8%; none slower. With the TMA-store
 * epilogue (forced through a tuning record) 7% slower than the plan
 * before at 279 tokens. TK_GEMM_PAIR256 0: never. */
#ifndef TK_GEMM_PAIR256
#define TK_GEMM_PAIR256 1
#endif
static void plan_pair256(gemm_plan *p)
{
    if (!TK_GEMM_PAIR256 || !p->tma || !p->swap || p->out_f16 || p->splits != 1 || p->cluster ||
        p->a_kmajor || !p->b_kmajor ||
        !((p->wg_bm == 128 && p->persist == 1 && p->epi_tma) ||
          (p->wg_bm == 256 && p->persist == 0)))
        return;
    const int64_t w = ((p->N + 1) / 2 + 7) / 8 * 8;
    if ((p->N + p->wg_bn - 1) / p->wg_bn != 2 || w > SWAP_BN_MAX ||
        ((p->M + 255) / 256) * 2 <= plan_sms(p))
        return;
    p->wg_bm = 256;
    p->wg_bn = (int)w;
    p->epi_tma = 0;
    p->persist = 1;
    p->cluster = 2;
}

void tk__gemm_plan_grid(gemm_plan *p)
{
    plan_grid_epi(p);
    plan_pair256(p);
    const int cluster = plan_cluster(p);
    if (cluster > 0)
        p->cluster = cluster;
    plan_swap_trim(p);
    /* the ring's stages for the epilogue chosen */
    if (p->tma)
        p->wg_stages = tk__gemm_tma_stages(p->wg_bm, p->wg_bn, tk__gemm_ring_room(p));
    /* TK_GEMM_SPLIT_CL: TMA splits of 2 of a reduction up to SPLIT_CL_KT_MAX
     * K steps each summed in a cluster where they fit */
    p->split_cl =
        p->tma && (TK_GEMM_SPLIT_CL == 2   ? p->splits > 1
                   : TK_GEMM_SPLIT_CL == 1 ? p->splits == 2 && (p->K + 127) / 128 <= SPLIT_CL_KT_MAX
                                           : 0);
    if (p->split_cl && !tk__gemm_split_cl_fits(p))
        p->split_cl = 0;
}

/* Fills p for op; pointers may be NULL (precompile: packed, aligned). */
void tk__gemm_plan_op(tk_op op, int64_t M, int64_t N, int64_t K, gemm_plan *p)
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

/* Operands whose rows do not start on 16-byte boundaries (a pointer off 16
 * bytes, or a leading dimension that is not a multiple of 8: d_model 700,
 * GPT-2's vocabulary of 50257) keep the fast kernels off (16-byte copies,
 * tensor maps): the scalar-load mma.sync kernel ran grad_b 9000x1024x700
 * at 0.09 of cuBLAS on an H100. On NVIDIA sm_80 and up, a call of at least
 * STAGE_MIN_FLOP copies each such operand into the workspace first, rows
 * padded to a multiple of 8 halves (one read and one write of it: about 9
 * us for a 9000 x 700 operand at 3 TB/s), and runs the aligned kernels on
 * the copy. Before tk__gemm_plan_alignment (pass TK__GEMM_STAGED_PTR for a
 * staged operand); 1 when an operand is staged. */
#define STAGE_MIN_FLOP ((int64_t)1 << 28)
int tk__gemm_plan_stage(gemm_plan *p, const void *a, const void *b)
{
    p->stage_a = p->stage_b = 0;
    p->src_lda = p->lda, p->src_ldb = p->ldb;
    if (!TK_GEMM_STAGE || p->amd || p->simple || p->M <= 0 || p->N <= 0 || p->K <= 0 ||
        2.0 * (double)p->M * (double)p->N * (double)p->K < (double)STAGE_MIN_FLOP)
        return 0;
    const int64_t a_cols = p->a_kmajor ? p->K : p->M, b_cols = p->b_kmajor ? p->K : p->N;
    p->stage_a = ((uintptr_t)a % 16) != 0 || p->lda % 8 != 0;
    p->stage_b = ((uintptr_t)b % 16) != 0 || p->ldb % 8 != 0;
    if (p->stage_a)
        p->lda = (a_cols + 7) / 8 * 8;
    if (p->stage_b)
        p->ldb = (b_cols + 7) / 8 * 8;
    return p->stage_a || p->stage_b;
}

/* Back to the caller's operands (the staging copy's kernel is not ready). */
void tk__gemm_plan_unstage(gemm_plan *p)
{
    p->lda = p->src_lda, p->ldb = p->src_ldb;
    p->stage_a = p->stage_b = 0;
}

void tk__gemm_plan_alignment(gemm_plan *p, const void *a, const void *b, const void *c)
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

/* The universal plan of p's call: any shape, nothing baked (see the top). */
void tk__gemm_plan_universal(const gemm_plan *p, gemm_plan *u)
{
    *u = *p;
    if (u->swap)
        tk__gemm_plan_swap(u);
    u->skinny = 0;
    u->smallk = 0;
    u->wg_bm = 128;
    u->wgmma = 0;
    u->tma = 0;
    u->persist = 0;
    u->epi_tma = 0;
    u->cluster = 0;
    u->cluster_rows = 0;
    u->group16 = 0;
    u->splits = 1;
    u->split_cl = 0;
    u->tile = tk__gemm_nv_tiles[1];
}

/* The fast fallback of p's call: on sm_90 with aligned operands, the TMA
 * kernel with nothing baked (M, N, K at run time), 128-row tiles 128 or 256
 * wide (whichever the wave cost prefers), a persistent grid (a block per
 * tile when the tiles fill less than the chip), the TMA-store epilogue where
 * C allows it, no split, swap or cluster. At most two kernels per layout and
 * output alignment, shared by every shape; they serve the calls whose own
 * kernel is being built. 0 where it does not apply (the universal kernel
 * then serves). */
int tk__gemm_plan_fast(const gemm_plan *p, gemm_plan *f)
{
    if (!TK_GEMM_TMA || p->amd || p->simple || !p->sm90 || !p->aligned)
        return 0;
    tk__gemm_plan_universal(p, f);
    if (f->M >= INT32_MAX || f->N >= INT32_MAX || f->K >= INT32_MAX)
        return 0;
    const int64_t sms = plan_sms(f);
    f->wgmma = 1;
    f->tma = 1;
    f->wg_bm = 128;
    f->wg_bn = wave_cost(f->M, f->N, 128, 256, sms, tma_bn_eff[3]) <
                       wave_cost(f->M, f->N, 128, 128, sms, tma_bn_eff[1]) * 0.999
                   ? 256
                   : 128;
    f->persist = 1;
    f->epi_tma = TK_GEMM_EPI_TMA && f->c16;
    /* K at run time (tk__gemm_ring_room's rule reads K): the staging's room
     * kept whichever epilogue the output allows, so that one kernel serves
     * every K */
    f->wg_stages = tk__gemm_tma_stages(128, f->wg_bn, EPI_STAGING);
    return 1;
}

/* The heuristics' plan of a packed call from an allocator (256-byte
 * aligned pointers). */
void tk__gemm_plan_packed_heuristic(tk_context *ctx, tk_op op, int64_t M, int64_t N, int64_t K,
                                    gemm_plan *p)
{
    tk__gemm_plan_op(op, M, N, K, p);
    p->lda = p->a_kmajor ? p->K : p->M;
    p->ldb = p->b_kmajor ? p->K : p->N;
    p->ldc = p->N;
    tk__gemm_plan_target(ctx, p);
    tk__gemm_plan_alignment(p, NULL, NULL, NULL);
    tk__gemm_plan_choose(p);
}

/* The heuristics' choices (kernel, tile, split, grid) for a call whose
 * target facts (tk__gemm_plan_target) and alignment
 * (tk__gemm_plan_alignment) are set: a call's plan, a precompile's, a
 * tuner's base. */
void tk__gemm_plan_choose(gemm_plan *p)
{
    tk__gemm_plan_wgmma(p);
    tk__gemm_plan_split(p);
    tk__gemm_plan_grid(p);
    tk__gemm_plan_skinny(p);
    tk__gemm_plan_smallk(p);
}
