/*
 * The GEMM heuristics (src/ops/gemm/plan.c) on an sm_90 target, without a
 * GPU: every plan they make for the model's shapes and for random others is
 * a configuration the tuning records accept and reproduce.
 *
 * - The configuration of each plan (tk__gemm_cfg_of_plan) is accepted by
 *   tk__gemm_plan_apply on the same call, and applying it gives back the
 *   same configuration and the same tile, ring and grid: a tuning record
 *   naming it would run the kernel the heuristics run.
 * - TMA plans: widths in steps of 16 (of 64 where B comes N-major; of 8
 *   on 128- and 256-row tiles stored from the ring, B K-major), 64, 128 or
 *   256 rows, 256-row tiles at most SWAP_BN_MAX wide, at least two ring
 *   stages that fit shared memory beside the epilogue's staging, and a
 *   launch within 227 KiB.
 * - Swapped plans: only where the tokens are on the kernel's M with A
 *   K-major before the swap, or grad_b (tokens on the reduction).
 * - Split plans: no persistent grid, no TMA-store epilogue; swapped only
 *   with the tokens on the kernel's N, at most as wide as they are; the
 *   split factor leaves no split empty. Some plans of the model's shapes
 *   split on swapped tiles (grad_a of the vocabulary just past a multiple
 *   of 128 tokens).
 * - The router's weight gradient split over the tokens (skinny kind 3):
 *   whole clusters of splits, one round of blocks unless one cluster a
 *   column of m exceeds it, a block's shared memory within a
 *   multiprocessor; kind 2 at short token shares, no kind 3 without sm_90.
 * - Cluster configurations (cl=2, cl=4) applied to heuristic plans: where
 *   they are accepted, their text, a grid of whole clusters.
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ops/gemm/gemm_internal.h"
#include "tk_test.h"
#include "tokitai/ops.h"

static tk_context *g_ctx;

/* The heuristics' plan of a packed call of op M x N x K on an H100-like
 * sm_90 target (132 multiprocessors): as tk__gemm_plan_packed_heuristic,
 * with the target's facts set after the stub context's. */
static void sm90_heuristic(tk_op op, int64_t M, int64_t N, int64_t K, gemm_plan *p)
{
    memset(p, 0, sizeof *p);
    tk__gemm_plan_op(op, M, N, K, p);
    p->lda = p->a_kmajor ? p->K : p->M;
    p->ldb = p->b_kmajor ? p->K : p->N;
    p->ldc = p->N;
    tk__gemm_plan_target(g_ctx, p);
    p->amd = 0, p->simple = 0, p->sm90 = 1, p->sms = 132;
    tk__gemm_plan_alignment(p, NULL, NULL, NULL);
    tk__gemm_plan_choose(p);
}

/* splitmix64 */
static uint64_t rnd(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static const char *op_name(tk_op op)
{
    return op == TK_OP_GEMM_F16_FWD ? "fwd" : op == TK_OP_GEMM_F16_GRAD_A ? "grad_a" : "grad_b";
}

static unsigned g_checked, g_fast, g_tma, g_swapped, g_split, g_split_swapped, g_pairs, g_half,
    g_half_epi, g_sks, g_pair256;

static void check_shape(tk_op op, int64_t M, int64_t N, int64_t K)
{
    gemm_plan p, q;
    gemm_cfg c, c2;
    char text[128], text2[128];
    sm90_heuristic(op, M, N, K, &p);
    tk__gemm_cfg_of_plan(&p, &c);
    tk__gemm_cfg_text(&c, text, sizeof text);
    /* a fresh heuristic plan of the same call takes the configuration back */
    sm90_heuristic(op, M, N, K, &q);
    ck_assert_msg(tk__gemm_plan_apply(&q, &c), "%s %" PRId64 "x%" PRId64 "x%" PRId64
                  ": the heuristics' configuration '%s' is refused",
                  op_name(op), M, N, K, text);
    tk__gemm_cfg_of_plan(&q, &c2);
    tk__gemm_cfg_text(&c2, text2, sizeof text2);
    ck_assert_msg(strcmp(text, text2) == 0,
                  "%s %" PRId64 "x%" PRId64 "x%" PRId64 ": '%s' applied reads '%s'", op_name(op),
                  M, N, K, text, text2);
    ck_assert_int_eq(q.swap, p.swap);
    ck_assert_int_eq(q.splits, p.splits);
    ck_assert_int_eq(q.cluster, p.cluster);
    ck_assert_int_eq(q.M, p.M);
    ck_assert_int_eq(q.N, p.N);
    if (p.tma && !p.skinny && !p.smallk) {
        ck_assert_int_eq(q.wg_stages, p.wg_stages);
        g_tma++;
        ck_assert_msg(p.wg_bn % 8 == 0 && p.wg_bn >= 16 && p.wg_bn <= 256, "%s: width %d", text,
                      p.wg_bn);
        if (p.wg_bn % 16 != 0) {
            /* 16 g + 8 (config.c cfg_bn_ok): stored from registers, the
             * ring or (swapped) the TMA-store epilogue, B whole in each
             * block */
            g_half++;
            if (p.epi_tma)
                g_half_epi++;
            ck_assert_msg(p.wg_bm != 64 && (!p.epi_tma || p.swap) && p.persist != 3 &&
                              p.cluster != 4 && !p.cluster_rows && p.b_kmajor,
                          "width %d: '%s'", p.wg_bn, text);
        }
        ck_assert_msg(p.b_kmajor || p.wg_bn % 64 == 0, "%s: N-major B, width %d", text,
                      p.wg_bn);
        ck_assert(p.wg_bm == 64 || p.wg_bm == 128 || p.wg_bm == 256);
        ck_assert(p.wg_bm != 256 || p.wg_bn <= SWAP_BN_MAX);
        /* the ring (A and B boxes of 64 K columns) beside the barriers and,
         * with the TMA-store epilogue, 32 KiB of staging (64 on ping-pong
         * tiles), in 227 KiB (what tk__gemm_launch_dims asks for) */
        const int stage = (p.wg_bm + p.wg_bn) * 64 * 2;
        const int room =
            232448 - 2048 - (p.epi_tma ? (p.persist == 3 ? 65536 : 32768) : 0);
        ck_assert_msg(p.wg_stages >= 2, "%s: %d stages", text, p.wg_stages);
        ck_assert_msg(p.wg_stages * stage <= room, "%s: %d stages of %d bytes", text,
                      p.wg_stages, stage);
        int64_t blocks;
        unsigned threads, smem;
        tk__gemm_launch_dims(&p, &blocks, &threads, &smem);
        ck_assert_msg(smem <= 232448, "%s: %u bytes of shared memory", text, smem);
        if (p.swap) {
            g_swapped++;
            gemm_plan o = p;
            tk__gemm_plan_swap(&o); /* the op's own orientation */
            ck_assert_msg((o.moving == 0 && o.a_kmajor) || o.moving == 2,
                          "%s %" PRId64 "x%" PRId64 "x%" PRId64 ": swapped '%s'", op_name(op),
                          M, N, K, text);
        }
        if (p.cluster > 1 && p.wg_bm == 256) {
            /* the forward's 256-row swapped tiles in pairs sharing their
             * weight tile (plan.c plan_pair256): the tokens in two columns
             * of tiles, more than a round of them, on the persistent grid
             * of whole pairs, stored from registers */
            g_pair256++;
            ck_assert_msg(p.cluster == 2 && p.swap && !p.out_f16 && p.persist == 1 && !p.epi_tma &&
                              p.splits == 1 && !p.cluster_rows &&
                              (p.N + p.wg_bn - 1) / p.wg_bn == 2 && (p.M + 255) / 256 * 2 > 132,
                          "%s %" PRId64 "x%" PRId64 "x%" PRId64 ": 256-row pairs '%s'", op_name(op),
                          M, N, K, text);
            ck_assert_msg(blocks == 132, "'%s': %" PRId64 " blocks", text, blocks);
        } else if (p.cluster > 1) {
            /* the heuristics' pairs (plan.c plan_cluster): one round of whole
             * pairs of 128-row tiles, unsplit, a block per tile; as 2 x 2
             * (plan_cluster) at most 132 / 4 - 4 of them, B K-major */
            g_pairs++;
            ck_assert_msg((p.cluster == 2 || p.cluster == 4) && p.wg_bm == 128 && p.splits == 1 &&
                              !p.persist && !p.a_kmajor,
                          "pairs plan '%s'", text);
            ck_assert_msg(blocks % p.cluster == 0 && blocks <= 132, "'%s': %" PRId64 " blocks",
                          text, blocks);
            if (p.cluster == 4)
                ck_assert_msg(blocks / 4 <= 29 && p.b_kmajor, "'%s': %" PRId64 " blocks", text,
                              blocks);
            ck_assert_int_eq(blocks, ((p.M + 127) / 128) * ((p.N + p.wg_bn - 1) / p.wg_bn));
        }
        if (p.splits > 1) {
            g_split++;
            ck_assert_msg(!p.persist && !p.epi_tma, "split plan '%s'", text);
            if (p.swap) {
                g_split_swapped++;
                /* as wide as the tokens at most, or one tile holding them
                 * all (plan.c TK_GEMM_SPLIT_SWAP_ONE: 129-255 tokens) */
                ck_assert_msg(
                    p.moving == 1 && p.wg_bm == 128 &&
                        (p.wg_bn <= p.N || (p.N > 128 && p.N < 256 && p.wg_bn < p.N + 16)),
                    "swapped split plan '%s' of %" PRId64 " tokens", text, p.N);
            }
            const int64_t kt = (p.K + 63) / 64, per = (kt + p.splits - 1) / p.splits;
            ck_assert_msg(per * (p.splits - 1) < kt, "'%s': an empty split of %" PRId64 " K tiles",
                          text, kt);
        }
    }
    if (p.skinny == 3) {
        /* the split skinny weight gradient: whole clusters of splits, a
         * grid row count the launch takes, one round of blocks a
         * multiprocessor at most unless the clusters alone exceed it */
        g_sks++;
        int64_t blocks;
        unsigned threads, smem;
        tk__gemm_launch_dims(&p, &blocks, &threads, &smem);
        ck_assert_msg(p.sm90 && p.N <= 8 && p.aligned && p.splits % SKS_CL == 0 &&
                          p.splits <= 65535 && tk__gemm_plan_planes(&p) * SKS_CL == p.splits &&
                          (blocks * p.splits <= 132 || p.splits == SKS_CL),
                      "grad_b %" PRId64 "x%" PRId64 "x%" PRId64 ": %d splits of %" PRId64 " blocks",
                      M, N, K, p.splits, blocks);
        ck_assert_msg(smem + 1024 <= 233472 && threads == 128, "%u bytes", smem);
    }
    /* the fast fallback that serves the call while its own kernel is built
     * (tk__gemm_plan_fast, M, N and K at run time): its ring and staging
     * fit too */
    gemm_plan f;
    if (tk__gemm_plan_fast(&p, &f)) {
        g_fast++;
        int64_t blocks;
        unsigned threads, smem;
        tk__gemm_launch_dims(&f, &blocks, &threads, &smem);
        ck_assert_msg(f.wg_stages >= 2 && smem <= 232448,
                      "%s %" PRId64 "x%" PRId64 "x%" PRId64
                      ": fast fallback 128 x %d, %d stages, %u bytes of shared memory",
                      op_name(op), M, N, K, f.wg_bn, f.wg_stages, smem);
    }
    g_checked++;
}

START_TEST(test_model_shapes)
{
    /* the model's (N, K) families (d_model 1024, FFN 2816, QKV 3072, 4096,
     * the vocabulary, the router), token counts 1..16384 in steps that
     * cross every tile boundary of 16 */
    static const int64_t fam[][2] = {{2816, 1024}, {1024, 2816}, {3072, 1024}, {1024, 3072},
                                     {4096, 1024}, {1024, 4096}, {50304, 1024}, {8, 1024}};
    static const tk_op ops[] = {TK_OP_GEMM_F16_FWD, TK_OP_GEMM_F16_GRAD_A, TK_OP_GEMM_F16_GRAD_B};
    g_checked = g_fast = g_tma = g_swapped = g_split = g_split_swapped = g_pairs = g_half =
        g_half_epi = g_sks = g_pair256 = 0;
    for (size_t f = 0; f < sizeof fam / sizeof fam[0]; f++)
        for (size_t o = 0; o < 3; o++)
            for (int64_t m = 8; m <= 16384; m += m < 2048 ? 8 : 56)
                check_shape(ops[o], m, fam[f][0], fam[f][1]);
    /* every kind of plan checked above was reached */
    ck_assert_uint_gt(g_tma, g_checked / 2);
    ck_assert_uint_gt(g_fast, g_checked / 2);
    ck_assert_uint_gt(g_swapped, 100);
    ck_assert_uint_gt(g_split, 100);
    ck_assert_uint_gt(g_split_swapped, 10);
    ck_assert_uint_gt(g_sks, 100);
    /* the router's weight gradient: kind 2 while a multiprocessor's share of
     * the tokens is short (2000 tokens: 8 values of m a block, 128 blocks),
     * split over the tokens past it; not on sm_80 (clusters) */
    {
        gemm_plan p;
        sm90_heuristic(TK_OP_GEMM_F16_GRAD_B, 2000, 8, 1024, &p);
        ck_assert_int_eq(p.skinny, 2);
        sm90_heuristic(TK_OP_GEMM_F16_GRAD_B, 12539, 8, 1024, &p);
        ck_assert_int_eq(p.skinny, 3);
        ck_assert_int_eq(p.splits, 28); /* 4 x 28 blocks: 7 eighths of 132 SMs, clusters of 4 */
        p.sm90 = 0;
        p.skinny = 0;
        tk__gemm_plan_skinny(&p);
        ck_assert_int_ne(p.skinny, 3);
    }
    ck_assert_uint_gt(g_pairs, 10);
    ck_assert_uint_gt(g_pair256, 10);
    /* the vocabulary's forward at 257-352 tokens: 256-row swapped tiles
     * half the tokens wide, in pairs on the persistent grid; not at 256
     * tokens (one column of tiles) nor at 353 (unswapped), nor grad_a */
    {
        gemm_plan p;
        sm90_heuristic(TK_OP_GEMM_F16_FWD, 279, 50304, 1024, &p);
        ck_assert_msg(p.swap && p.wg_bm == 256 && p.wg_bn == 144 && p.cluster == 2 &&
                          p.persist == 1 && !p.epi_tma,
                      "fwd 279x50304x1024: bm %d bn %d cluster %d", p.wg_bm, p.wg_bn, p.cluster);
        sm90_heuristic(TK_OP_GEMM_F16_FWD, 300, 50304, 2048, &p);
        ck_assert(p.wg_bm == 256 && p.wg_bn == 152 && p.cluster == 2 && p.persist == 1);
        sm90_heuristic(TK_OP_GEMM_F16_FWD, 256, 50304, 1024, &p);
        ck_assert_int_eq(p.cluster, 0);
        sm90_heuristic(TK_OP_GEMM_F16_FWD, 353, 50304, 1024, &p);
        ck_assert_int_eq(p.cluster, 0);
        sm90_heuristic(TK_OP_GEMM_F16_GRAD_A, 279, 50304, 1024, &p);
        ck_assert_int_ne(p.wg_bm, 256);
    }
    /* one round of narrow swapped tiles at K = 1024-3072: 64-row tiles twice
     * as wide while they fit one round (plan.c swap64_wide), up to 160 at K
     * = 1024 (128 x 88 kept there) and 192 from 2048; K = 4096 keeps its
     * pairs and fours */
    {
        gemm_plan p;
        sm90_heuristic(TK_OP_GEMM_F16_FWD, 1267, 1024, 3072, &p);
        ck_assert_msg(p.swap && p.wg_bm == 64 && p.wg_bn == 160, "bm %d bn %d", p.wg_bm, p.wg_bn);
        sm90_heuristic(TK_OP_GEMM_F16_GRAD_A, 1121, 2816, 1024, &p);
        ck_assert_msg(p.swap && p.wg_bm == 64 && p.wg_bn == 144, "bm %d bn %d", p.wg_bm, p.wg_bn);
        /* 128 tiles of 64 x 144 for 120 of 128 x 72 */
        sm90_heuristic(TK_OP_GEMM_F16_FWD, 1068, 1024, 3072, &p);
        ck_assert_msg(p.swap && p.wg_bm == 64 && p.wg_bn == 144, "bm %d bn %d", p.wg_bm, p.wg_bn);
        sm90_heuristic(TK_OP_GEMM_F16_FWD, 1330, 1024, 3072, &p);
        ck_assert_msg(p.swap && p.wg_bm == 64 && p.wg_bn == 176, "bm %d bn %d", p.wg_bm, p.wg_bn);
        sm90_heuristic(TK_OP_GEMM_F16_FWD, 400, 2816, 1024, &p);
        ck_assert_msg(p.swap && p.wg_bm == 64 && p.wg_bn == 144, "bm %d bn %d", p.wg_bm, p.wg_bn);
        sm90_heuristic(TK_OP_GEMM_F16_FWD, 520, 2816, 1024, &p);
        ck_assert_msg(p.swap && p.wg_bm == 128 && p.wg_bn == 88, "bm %d bn %d", p.wg_bm, p.wg_bn);
        sm90_heuristic(TK_OP_GEMM_F16_FWD, 1267, 1024, 4096, &p);
        ck_assert_int_ne(p.wg_bm, 64);
        sm90_heuristic(TK_OP_GEMM_F16_FWD, 1300, 1024, 4096, &p);
        ck_assert_int_ne(p.wg_bm, 64);
    }
    /* one round of wide swapped 128-row tiles on a reduction of 2048 or
     * more: the narrowest width past 96 that still makes one round (plan.c
     * swap_round_narrow), in steps of 8 under K = 4096, of 16 from there
     * but where the swapped A is K-major (grad_a: swap_step8); past a
     * round, or at K = 1024, the width swap_pick_bn chose */
    {
        static const struct {
            tk_op op;
            int64_t m, n, k;
            int bn;
        } want[] = {
            {TK_OP_GEMM_F16_GRAD_A, 1625, 3072, 1024, 104}, /* 128 tiles, was 104 of 128 */
            {TK_OP_GEMM_F16_FWD, 1553, 1024, 2816, 104},
            {TK_OP_GEMM_F16_GRAD_A, 1574, 4096, 1024, 104}, /* K = 4096, A K-major: 8 */
            {TK_OP_GEMM_F16_FWD, 1574, 1024, 4096, 112},    /* A M-major: steps of 16 */
            {TK_OP_GEMM_F16_GRAD_A, 1920, 4096, 1024, 120}, /* was 128 */
            {TK_OP_GEMM_F16_FWD, 1700, 1024, 3072, 112},
            {TK_OP_GEMM_F16_GRAD_A, 1870, 3072, 1024, 120},
            {TK_OP_GEMM_F16_GRAD_A, 2100, 3072, 1024, 136}, /* was 144 */
            {TK_OP_GEMM_F16_FWD, 1800, 1024, 4096, 128},    /* 112 would not fit a round */
        };
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
            gemm_plan p;
            sm90_heuristic(want[i].op, want[i].m, want[i].n, want[i].k, &p);
            ck_assert_msg(p.swap && p.wg_bm == 128 && p.wg_bn == want[i].bn,
                          "%" PRId64 "x%" PRId64 "x%" PRId64 ": %s%d x %d tiles, want 128 x %d",
                          want[i].m, want[i].n, want[i].k, p.swap ? "swapped " : "", p.wg_bm,
                          p.wg_bn, want[i].bn);
        }
    }
    ck_assert_uint_gt(g_half, 10);
    ck_assert_uint_gt(g_half_epi, 0);
    /* 112 tiles of 128 x 64 make one round over 5/6 of the 132
     * multiprocessors or more: no 64-row tiles there (plan.c
     * ks_fill_keeps), at 96 tiles (650 tokens) they stay; but on a
     * reduction of 4096 (plan.c ks_one_long_k) the 13 x 8 tiles of 64 x
     * 128 (less area than 7 x 16 of 128 x 64) take their place, as they do
     * at 1023 tokens (16 x 8 against 8 x 16), for the forward too */
    for (int64_t n = 2816; n <= 4096; n += n == 2816 ? 256 : 1024) {
        gemm_plan p;
        sm90_heuristic(TK_OP_GEMM_F16_GRAD_A, 776, n, 1024, &p);
        const int bm = n < 4096 ? 128 : 64, bn = n < 4096 ? 64 : 128;
        ck_assert_msg(p.tma && p.wg_bm == bm && p.wg_bn == bn && p.splits == 1 && !p.swap,
                      "grad_a 776x%" PRId64 "x1024: %d x %d tiles, want %d x %d", n, p.wg_bm,
                      p.wg_bn, bm, bn);
        sm90_heuristic(TK_OP_GEMM_F16_FWD, 1023, 1024, n, &p);
        ck_assert_msg(p.tma && p.wg_bm == bm && p.wg_bn == bn && p.splits == 1 && !p.swap,
                      "fwd 1023x1024x%" PRId64 ": %d x %d tiles, want %d x %d", n, p.wg_bm, p.wg_bn,
                      bm, bn);
        sm90_heuristic(TK_OP_GEMM_F16_GRAD_A, 650, n, 1024, &p);
        ck_assert_msg(p.tma && p.wg_bm == 64, "grad_a 650x%" PRId64 "x1024: %d x %d tiles", n,
                      p.wg_bm, p.wg_bn);
    }
    /* 128 tiles of 64 x 64 (456 tokens) fill one round: K = 2816-3072
     * keeps them unsplit (plan.c ks_fills_round; TK_GEMM_KS_CL 1); 80 (312
     * tokens) more than half of it: there K = 2816-3072 splits 2 on 128 x
     * 64 tiles only summed in a cluster (TK_GEMM_KS_CL), not by the reduce
     * kernel; K = 4096 and 256 tokens split as before */
    for (int64_t k = 2816; k <= 4096; k += k == 2816 ? 256 : 1024) {
        gemm_plan p;
        sm90_heuristic(TK_OP_GEMM_F16_FWD, 456, 1024, k, &p);
        const int band = k < 4096;
        ck_assert_msg(band ? p.tma && p.wg_bm == 64 && p.wg_bn == 64 && p.splits == 1
                           : p.tma && p.wg_bm == 128 && p.wg_bn == 64 && p.splits > 1,
                      "fwd 456x1024x%" PRId64 ": %d x %d tiles split %d%s", k, p.wg_bm, p.wg_bn,
                      p.splits, p.split_cl ? " in a cluster" : "");
        sm90_heuristic(TK_OP_GEMM_F16_GRAD_A, 312, k, 1024, &p);
        ck_assert_msg(
            p.tma && p.splits > 1 &&
                (!band || (p.wg_bm == 128 && p.wg_bn == 64 && p.splits == 2 && p.split_cl)),
            "grad_a 312x%" PRId64 "x1024: %d x %d tiles split %d%s", k, p.wg_bm, p.wg_bn, p.splits,
            p.split_cl ? " in a cluster" : "");
        sm90_heuristic(TK_OP_GEMM_F16_GRAD_A, 256, k, 1024, &p);
        ck_assert_msg(p.splits > 1, "grad_a 256x%" PRId64 "x1024 unsplit", k);
    }
    /* tokens just past 128 on a long reduction split on one swapped tile as
     * wide as they are (plan.c TK_GEMM_SPLIT_SWAP_ONE): the vocabulary's
     * grad_a at 140 tokens 128 x 144 split 12 (128 x 128 split 8 before),
     * at 184 tokens not (a split's fixed cost outweighs the saving): there 3
     * rows of 64 x 128 tiles split 5 (SPLIT_ROWS64_GAIN, 64-row tiles on one
     * consumer warpgroup), at 200 tokens (4 rows) 128 x 128 split 8; fwd 136
     * x 5120 x 20480 128 x 136 split 3 (128 x 256 split 3 before). 64-row
     * swapped tiles where the weights have them level with 128 x 64 tiles
     * over half the chip, from K = 1536 (TK_GEMM_SWAP64_EVEN): fwd 671 x
     * 1024 x 4096 on 112 tiles of 64 x 96 swapped (96 of 128 x 64 before);
     * not with K = 1024 (fwd 180 x 4096 x 1024 keeps 128 x 64) */
    {
        static const struct {
            tk_op op;
            int64_t M, N, K;
            int swap, bm, bn, splits;
        } want[] = {
            {TK_OP_GEMM_F16_GRAD_A, 140, 50304, 1024, 1, 128, 144, 12},
            {TK_OP_GEMM_F16_GRAD_A, 184, 50304, 1024, 0, 64, 128, 5},
            {TK_OP_GEMM_F16_GRAD_A, 200, 50304, 1024, 0, 128, 128, 8},
            {TK_OP_GEMM_F16_FWD, 136, 5120, 20480, 1, 128, 136, 3},
            {TK_OP_GEMM_F16_FWD, 671, 1024, 4096, 1, 64, 96, 1},
            {TK_OP_GEMM_F16_FWD, 180, 4096, 1024, 0, 128, 64, 1},
        };
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
            gemm_plan p;
            sm90_heuristic(want[i].op, want[i].M, want[i].N, want[i].K, &p);
            ck_assert_msg(p.tma && p.swap == want[i].swap && p.wg_bm == want[i].bm &&
                              p.wg_bn == want[i].bn && p.splits == want[i].splits,
                          "%s %" PRId64 "x%" PRId64 "x%" PRId64 ": %d x %d split %d swap %d",
                          op_name(want[i].op), want[i].M, want[i].N, want[i].K, p.wg_bm, p.wg_bn,
                          p.splits, p.swap);
        }
    }
    /* 64-row TMA tiles wider than 64 run one consumer warpgroup
     * (tk__gemm_ks_one: TK_KS_ONE), narrower ones two on alternate K steps;
     * never other tiles */
    {
        static const struct {
            tk_op op;
            int64_t M, N, K;
            int bn, one;
        } want[] = {
            {TK_OP_GEMM_F16_FWD, 671, 1024, 4096, 96, 1},
            {TK_OP_GEMM_F16_GRAD_A, 184, 50304, 1024, 128, 1},
            {TK_OP_GEMM_F16_FWD, 64, 50304, 1024, 192, 1},
            {TK_OP_GEMM_F16_FWD, 100, 2816, 1024, 64, 0},
            {TK_OP_GEMM_F16_FWD, 64, 2816, 1024, 32, 0},
        };
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
            gemm_plan p;
            sm90_heuristic(want[i].op, want[i].M, want[i].N, want[i].K, &p);
            ck_assert_msg(p.tma && p.wg_bm == 64 && p.wg_bn == want[i].bn &&
                              tk__gemm_ks_one(&p) == want[i].one,
                          "%s %" PRId64 "x%" PRId64 "x%" PRId64 ": %d x %d, one consumer %d",
                          op_name(want[i].op), want[i].M, want[i].N, want[i].K, p.wg_bm, p.wg_bn,
                          tk__gemm_ks_one(&p));
            p.wg_bm = 128;
            ck_assert(!tk__gemm_ks_one(&p));
        }
    }
    /* pairs (plan.c plan_cluster): the swapped 128 x 80 tiles of fwd 1050 x
     * 1024 x 4096, 8 x 14, as 28 clusters of 2 x 2 (plan_cluster); 8 x 16 at
     * 1201 tokens stay pairs (32 clusters of four might not all fit); not
     * with K = 3072, not with 2-4 rows of tiles */
    {
        gemm_plan p;
        sm90_heuristic(TK_OP_GEMM_F16_FWD, 1050, 1024, 4096, &p);
        ck_assert_msg(p.cluster == 4 && p.swap && p.wg_bn == 80, "fwd 1050x1024x4096: cl %d",
                      p.cluster);
        sm90_heuristic(TK_OP_GEMM_F16_FWD, 1201, 1024, 4096, &p);
        ck_assert_msg(p.cluster == 2 && p.swap && p.wg_bn == 80, "fwd 1201x1024x4096: cl %d",
                      p.cluster);
        sm90_heuristic(TK_OP_GEMM_F16_FWD, 1050, 1024, 3072, &p);
        ck_assert_int_eq(p.cluster, 0);
        sm90_heuristic(TK_OP_GEMM_F16_FWD, 2385, 512, 4096, &p);
        ck_assert_int_eq(p.cluster, 0);
    }
    /* one round of narrow swapped tiles in widths of 16 g + 8 (plan.c
     * TK_GEMM_SWAP_HALF): fwd 1060 x 1024 x 768 on 8 x 15 tiles of 128 x 72
     * (80 wide: 8 x 14 over 1120 columns; under SWAP64_WIDE_MIN_K, so no
     * 64-row tiles twice as wide); not with K = 4096 (the pairs' and
     * fours' 16-wide steps: 1386 x 1024 x 4096 on 128 x 96), not past a
     * round (fwd 85 x 50304 x 1024: 393 tiles); grad_a with K = 4096 (its
     * swapped A K-major, no pairs: swap_step8) on 128 x 88 */
    {
        static const struct {
            int64_t M, K;
            int bn;
        } half[] = {{1060, 768, 72}, {1386, 4096, 96}, {1149, 4096, 80}};
        for (size_t i = 0; i < sizeof half / sizeof half[0]; i++) {
            gemm_plan p;
            sm90_heuristic(TK_OP_GEMM_F16_FWD, half[i].M, 1024, half[i].K, &p);
            ck_assert_msg(p.tma && p.swap && p.wg_bm == 128 && p.wg_bn == half[i].bn &&
                              p.splits == 1 && !p.epi_tma,
                          "fwd %" PRId64 "x1024x%" PRId64 ": %d x %d split %d epi %d", half[i].M,
                          half[i].K, p.wg_bm, p.wg_bn, p.splits, p.epi_tma);
        }
        gemm_plan p;
        sm90_heuristic(TK_OP_GEMM_F16_FWD, 85, 50304, 1024, &p);
        ck_assert_msg(p.tma && p.wg_bn % 16 == 0, "fwd 85x50304x1024: %d x %d", p.wg_bm, p.wg_bn);
        sm90_heuristic(TK_OP_GEMM_F16_GRAD_A, 1386, 4096, 1024, &p);
        ck_assert_msg(p.tma && p.swap && p.wg_bm == 128 && p.wg_bn == 88 && p.splits == 1,
                      "grad_a 1386x4096x1024: %d x %d split %d", p.wg_bm, p.wg_bn, p.splits);
    }
    /* the forward (fp32 output) with K <= 2048 on ping-pong 128 x 192 tiles
     * stored by the TMA-store epilogue, unswapped (plan.c plan_pp_f32),
     * from 1.7 rounds of them, 0.85 full or more (the tiles over the
     * rounds' blocks), and 6 rows of tiles: 1.70 (1800 x 2816), 1.83 (1339
     * x 4096) and 1.93 rounds (2053 x 2816); 5 rows where the plan is
     * unswapped, 3 rows or more (600, 500 and 360 x 50304: cooperative 128
     * x 256 before), not where it is swapped (540 and 300 x 50304: 128 x
     * 184 and 152); not at 1.3 or 1.67 rounds (1000 and 1200 x 4096), 2.05
     * rounds 0.68 full (2200 x 2816), 4.09 rounds 0.82 full (4500 x 2816),
     * 2 rows (250 x 50304), K = 2816 (fp16 outputs: below) */
    {
        static const struct {
            tk_op op;
            int64_t M, N, K;
            int pp;
        } pp[] = {
            {TK_OP_GEMM_F16_FWD, 4500, 4096, 1024, 1}, {TK_OP_GEMM_F16_FWD, 2200, 4096, 1024, 1},
            {TK_OP_GEMM_F16_FWD, 700, 50304, 1024, 1}, {TK_OP_GEMM_F16_FWD, 16384, 2816, 1024, 1},
            {TK_OP_GEMM_F16_FWD, 1800, 2816, 1024, 1}, {TK_OP_GEMM_F16_FWD, 1339, 4096, 1024, 1},
            {TK_OP_GEMM_F16_FWD, 2053, 2816, 1024, 1}, {TK_OP_GEMM_F16_FWD, 600, 50304, 1024, 1},
            {TK_OP_GEMM_F16_FWD, 540, 50304, 1024, 0}, {TK_OP_GEMM_F16_FWD, 1000, 4096, 1024, 0},
            {TK_OP_GEMM_F16_FWD, 1200, 4096, 1024, 0}, {TK_OP_GEMM_F16_FWD, 2200, 2816, 1024, 0},
            {TK_OP_GEMM_F16_FWD, 4500, 2816, 1024, 0}, {TK_OP_GEMM_F16_FWD, 500, 50304, 1024, 1},
            {TK_OP_GEMM_F16_FWD, 360, 50304, 1024, 1}, {TK_OP_GEMM_F16_FWD, 300, 50304, 1024, 0},
            {TK_OP_GEMM_F16_FWD, 250, 50304, 1024, 0}, {TK_OP_GEMM_F16_FWD, 9000, 1024, 2816, 0},
        };
        for (size_t i = 0; i < sizeof pp / sizeof pp[0]; i++) {
            gemm_plan p;
            sm90_heuristic(pp[i].op, pp[i].M, pp[i].N, pp[i].K, &p);
            const int is_pp =
                p.tma && p.persist == 3 && p.epi_tma && !p.swap && p.wg_bm == 128 && p.wg_bn == 192;
            ck_assert_msg(is_pp == pp[i].pp && (pp[i].pp || p.persist != 3 || p.out_f16),
                          "%" PRId64 "x%" PRId64 "x%" PRId64 ": %d x %d persist %d epi %d swap %d",
                          pp[i].M, pp[i].N, pp[i].K, p.wg_bm, p.wg_bn, p.persist, p.epi_tma,
                          p.swap);
        }
    }
    /* fp16 outputs on a short reduction (grad_a with N = 1024): the
     * cooperative persistent tile runs ping-pong at its own width, stored
     * by the TMA-store epilogue (plan.c plan_grid_epi), past 4 rounds
     * (6492 x 1024 x 2816: 160 wide, 5.8 rounds) and from 1.7 rounds where
     * its tiles fill the rounds' blocks to 0.85 or more (1998: 1.94 rounds,
     * 4096: 3.88, 1300 x 1024 x 4096); tiles wider than 192 on 128 x 192
     * ping-pong tiles where those fill the rounds' blocks to 0.92 (plan.c
     * plan_pp_f32, wide16: 15705 x 1024 x 3072, 0.94; 6000 x 1024 x 4096,
     * 0.98), not below (3000 x 1024 x 2816 at 0.91, 1926 x 1024 x 4096 at
     * 0.89: 256 wide, cooperative); not swapped (2600) or in one round
     * (1400, a block per tile) */
    {
        static const struct {
            int64_t M, K;
            int bn, pp;
        } pp16[] = {
            {6492, 2816, 160, 1},  {1998, 2816, 176, 1}, {4096, 2816, 176, 1}, {1300, 4096, 176, 1},
            {15705, 3072, 192, 1}, {6000, 4096, 192, 1}, {3000, 2816, 256, 0}, {1926, 4096, 256, 0},
            {2600, 2816, 224, 0},  {1400, 2816, 256, 0},
        };
        for (size_t i = 0; i < sizeof pp16 / sizeof pp16[0]; i++) {
            gemm_plan p;
            sm90_heuristic(TK_OP_GEMM_F16_GRAD_A, pp16[i].M, 1024, pp16[i].K, &p);
            ck_assert_msg(p.tma && p.wg_bm == 128 && p.wg_bn == pp16[i].bn &&
                              (p.persist == 3) == pp16[i].pp && (!pp16[i].pp || p.epi_tma),
                          "grad_a %" PRId64 "x1024x%" PRId64 ": %d x %d persist %d epi %d swap %d",
                          pp16[i].M, pp16[i].K, p.wg_bm, p.wg_bn, p.persist, p.epi_tma, p.swap);
        }
    }
    /* the vocabulary's weight gradient on a short reduction (the tokens):
     * 128 x 192 ping-pong tiles (8 x 262, 0.99 of 16 rounds) from 3 K steps
     * on (1027 and 200 tokens), 256-wide cooperative tiles at 100 */
    {
        static const struct {
            int64_t M;
            int bn, pp;
        } gb[] = {{1027, 192, 1}, {200, 192, 1}, {100, 256, 0}};
        for (size_t i = 0; i < sizeof gb / sizeof gb[0]; i++) {
            gemm_plan p;
            sm90_heuristic(TK_OP_GEMM_F16_GRAD_B, gb[i].M, 50304, 1024, &p);
            ck_assert_msg(p.tma && !p.swap && p.wg_bm == 128 && p.wg_bn == gb[i].bn &&
                              (p.persist == 3) == gb[i].pp && p.epi_tma,
                          "grad_b %" PRId64 "x50304x1024: %d x %d persist %d epi %d swap %d",
                          gb[i].M, p.wg_bm, p.wg_bn, p.persist, p.epi_tma, p.swap);
        }
    }
    /* wide swapped tiles on the TMA-store epilogue trimmed to the fewest
     * columns in 8s that keep their column-tile count (plan.c
     * plan_swap_trim): fwd 540 x 50304 x 1024 on 3 x 184 (192 before),
     * 400 on 2 x 200 (208; 257-352 tokens take 256-row pairs, above); 576
     * tokens fill 3 x 192 and keep it */
    {
        static const struct {
            int64_t M;
            int bn;
        } trim[] = {{540, 184}, {400, 200}, {576, 192}};
        for (size_t i = 0; i < sizeof trim / sizeof trim[0]; i++) {
            gemm_plan p;
            sm90_heuristic(TK_OP_GEMM_F16_FWD, trim[i].M, 50304, 1024, &p);
            ck_assert_msg(p.tma && p.swap && p.wg_bm == 128 && p.wg_bn == trim[i].bn && p.epi_tma &&
                              p.persist == 1,
                          "fwd %" PRId64 "x50304x1024: %d x %d epi %d persist %d", trim[i].M,
                          p.wg_bm, p.wg_bn, p.epi_tma, p.persist);
        }
    }
    /* one round of swapped 256 x 160 tiles (fwd 1250 x 4096 x 1024: 16 x 8)
     * goes to 128 x 160 on the persistent TMA-store grid (plan.c
     * swap_one_round; 1339 x 4096 x 1024, 176 trimmed to 168, now takes
     * the forward's ping-pong tiles, below); not 144 wide
     * (1497 x 3072 x 1024), not with the op's B K-major (grad_a 2086 x 1024
     * x 2816), not with K = 1536 */
    {
        static const struct {
            tk_op op;
            int64_t M, N, K;
            int bm, bn;
        } one[] = {
            {TK_OP_GEMM_F16_FWD, 1250, 4096, 1024, 128, 160},
            {TK_OP_GEMM_F16_FWD, 1160, 4096, 1024, 128, 152}, /* 160 trimmed */
            {TK_OP_GEMM_F16_FWD, 1497, 3072, 1024, 256, 144},
            {TK_OP_GEMM_F16_GRAD_A, 2086, 1024, 2816, 256, 176},
            {TK_OP_GEMM_F16_FWD, 1751, 2816, 1536, 256, 160},
        };
        for (size_t i = 0; i < sizeof one / sizeof one[0]; i++) {
            gemm_plan p;
            sm90_heuristic(one[i].op, one[i].M, one[i].N, one[i].K, &p);
            ck_assert_msg(p.tma && p.swap && p.wg_bm == one[i].bm && p.wg_bn == one[i].bn &&
                              p.persist == (one[i].bm == 128) && p.epi_tma == (one[i].bm == 128),
                          "%" PRId64 "x%" PRId64 "x%" PRId64 ": %d x %d persist %d epi %d",
                          one[i].M, one[i].N, one[i].K, p.wg_bm, p.wg_bn, p.persist, p.epi_tma);
        }
    }
    /* the persistent grid from more than a wave of the plan's own
     * multiprocessors: fwd 1920 x 2048 x 4096, 120 tiles of 128 x 256, one
     * round of 132 SMs, two of 114 (an H100 PCIe) */
    {
        gemm_plan p;
        sm90_heuristic(TK_OP_GEMM_F16_FWD, 1920, 2048, 4096, &p);
        ck_assert_msg(p.tma && !p.swap && p.wg_bm == 128 && p.wg_bn == 256 && !p.persist,
                      "fwd 1920x2048x4096: %d x %d persist %d", p.wg_bm, p.wg_bn, p.persist);
        p.sms = 114;
        tk__gemm_plan_grid(&p);
        ck_assert_int_eq(p.persist, 1);
    }
    /* from 1024 tokens the narrow swapped tiles of a long reduction win over
     * 64-row tiles up to SWAP_NARROW_GAIN (grad_a 1038 x 3072 x 1024: 128 x
     * 72 swapped, then twice as wide on 64-row tiles by swap64_wide: 64 x
     * 144 swapped, not 64 x 160 unswapped); under 1024 tokens not (444 x
     * 3072 x 2816) */
    {
        gemm_plan p;
        sm90_heuristic(TK_OP_GEMM_F16_GRAD_A, 1038, 3072, 1024, &p);
        ck_assert_msg(p.swap && p.wg_bm == 64 && p.wg_bn == 144, "grad_a 1038x3072x1024: %d x %d",
                      p.wg_bm, p.wg_bn);
        sm90_heuristic(TK_OP_GEMM_F16_GRAD_A, 444, 3072, 2816, &p);
        ck_assert_msg(!p.swap && p.wg_bm == 64, "grad_a 444x3072x2816: %d x %d swap %d", p.wg_bm,
                      p.wg_bn, p.swap);
    }
}
END_TEST

START_TEST(test_random_shapes)
{
    /* other shapes: each dimension log-uniform in 1..65536, a multiple of 8
     * (aligned: the TMA kernels) three times in four */
    static const tk_op ops[] = {TK_OP_GEMM_F16_FWD, TK_OP_GEMM_F16_GRAD_A, TK_OP_GEMM_F16_GRAD_B};
    uint64_t s = 2026;
    for (int i = 0; i < 20000; i++) {
        int64_t d[3];
        for (int j = 0; j < 3; j++) {
            const double u = (double)(rnd(&s) >> 11) / 9007199254740992.0;
            int64_t v = (int64_t)(1.0 + 65535.0 * u * u * u * u);
            if (rnd(&s) % 4 != 0)
                v = (v + 7) / 8 * 8;
            d[j] = v;
        }
        check_shape(ops[rnd(&s) % 3], d[0], d[1], d[2]);
    }
}
END_TEST

/* Cluster configurations and tile widths of 16 g + 8 applied to heuristic
 * plans: what they accept, their text, and a grid of whole clusters (pairs of column tiles; with
 * cl=4 pairs of row tiles too; with clm=2 pairs of row tiles), also on a
 * persistent grid. */
START_TEST(test_cluster_configs)
{
    static const struct {
        tk_op op;
        int64_t M, N, K;
        gemm_cfg c;
        int ok;
        const char *text;
        int64_t blocks;
    } cases[] = {
        /* swapped 128 x 80: 8 x 14 tiles (C^T is 1024 x 1050) */
        {TK_OP_GEMM_F16_FWD, 1050, 1024, 4096,
         {.tma = 1, .bn = 80, .bm = 128, .swap = 1, .cluster = 4, .splits = 1}, 1,
         "tma bn=80 persist=0 epi=0 split=1 swap=1 cl=4", 112},
        {TK_OP_GEMM_F16_FWD, 1050, 1024, 4096,
         {.tma = 1, .bn = 80, .bm = 128, .swap = 1, .cluster = 2, .splits = 1}, 1,
         "tma bn=80 persist=0 epi=0 split=1 swap=1 cl=2", 112},
        /* 9 x 8 tiles of 128 x 128: the rows round up to 10 */
        {TK_OP_GEMM_F16_FWD, 1100, 1024, 2816,
         {.tma = 1, .bn = 128, .bm = 128, .cluster = 4, .splits = 1}, 1,
         "tma bn=128 persist=0 epi=0 split=1 cl=4", 80},
        /* 9 x 5 tiles of 128 x 208 (grad_a: B K-major): 10 x 6 */
        {TK_OP_GEMM_F16_GRAD_A, 1100, 2816, 1024,
         {.tma = 1, .bn = 208, .bm = 128, .cluster = 4, .splits = 1}, 1,
         "tma bn=208 persist=0 epi=0 split=1 cl=4", 60},
        /* the forward's B is N-major: half of 3 64-column boxes is refused */
        {TK_OP_GEMM_F16_FWD, 1100, 1024, 2816,
         {.tma = 1, .bn = 192, .bm = 128, .cluster = 4, .splits = 1}, 0, NULL, 0},
        /* no clusters sharing A on 64-row tiles, none on split grids,
         * stream-K or ping-pong */
        {TK_OP_GEMM_F16_FWD, 1100, 1024, 2816,
         {.tma = 1, .bn = 128, .bm = 64, .cluster = 4, .splits = 1}, 0, NULL, 0},
        {TK_OP_GEMM_F16_FWD, 1100, 1024, 2816,
         {.tma = 1, .bn = 128, .bm = 128, .cluster = 4, .splits = 2}, 0, NULL, 0},
        {TK_OP_GEMM_F16_FWD, 4100, 4096, 2816,
         {.tma = 1, .bn = 128, .bm = 128, .persist = 2, .cluster = 2, .splits = 1}, 0, NULL, 0},
        {TK_OP_GEMM_F16_FWD, 1100, 1024, 2816,
         {.tma = 1, .bn = 128, .bm = 128, .persist = 3, .cluster = 2, .splits = 1}, 0, NULL, 0},
        /* persistent grids of whole clusters: 9 x 8 tiles of 128 x 128, in
         * 2 x 2 squares 10 x 8 (80 blocks, under the chip); 33 x 32 in pairs
         * of column tiles, and grad_a's 33 x 15 of 128 x 192 in pairs of row
         * tiles (34 x 15): one block per SM */
        {TK_OP_GEMM_F16_FWD, 1100, 1024, 2816,
         {.tma = 1, .bn = 128, .bm = 128, .persist = 1, .cluster = 4, .splits = 1}, 1,
         "tma bn=128 persist=1 epi=0 split=1 cl=4", 80},
        {TK_OP_GEMM_F16_FWD, 4100, 4096, 2816,
         {.tma = 1, .bn = 128, .bm = 128, .persist = 1, .epi = 1, .cluster = 2, .splits = 1}, 1,
         "tma bn=128 persist=1 epi=1 split=1 cl=2", 132},
        {TK_OP_GEMM_F16_GRAD_A, 4100, 4096, 2816,
         {.tma = 1, .bn = 192, .bm = 128, .persist = 1, .cluster = 2, .cluster_rows = 1,
          .splits = 1},
         1, "tma bn=192 persist=1 epi=0 split=1 clm=2", 132},
        /* pairs of row tiles sharing B, 64-row tiles too: 9 x 13 tiles of
         * 64 x 80 (grad_a's B K-major), the rows round up to 10 */
        {TK_OP_GEMM_F16_GRAD_A, 520, 3072, 1024,
         {.tma = 1, .bn = 80, .bm = 64, .cluster = 2, .cluster_rows = 1, .splits = 1}, 1,
         "tma bn=80 persist=0 epi=0 split=1 bm=64 clm=2", 130},
        /* 9 x 8 of 128 x 128 (the forward's B N-major, two boxes each) */
        {TK_OP_GEMM_F16_FWD, 1100, 1024, 2816,
         {.tma = 1, .bn = 128, .bm = 128, .cluster = 2, .cluster_rows = 1, .splits = 1}, 1,
         "tma bn=128 persist=0 epi=0 split=1 clm=2", 80},
        /* refused: N-major B in one 64-column box, split, in fours */
        {TK_OP_GEMM_F16_FWD, 1100, 1024, 2816,
         {.tma = 1, .bn = 64, .bm = 128, .cluster = 2, .cluster_rows = 1, .splits = 1}, 0, NULL,
         0},
        {TK_OP_GEMM_F16_GRAD_A, 520, 3072, 1024,
         {.tma = 1, .bn = 80, .bm = 64, .cluster = 2, .cluster_rows = 1, .splits = 2}, 0, NULL, 0},
        {TK_OP_GEMM_F16_GRAD_A, 1100, 2816, 1024,
         {.tma = 1, .bn = 80, .bm = 128, .cluster = 4, .cluster_rows = 1, .splits = 1}, 0, NULL, 0},
        /* widths of 16 g + 8 (config.c cfg_bn_ok): swapped 128 x 72, 8 x 16
         * tiles (C^T is 1024 x 1149), alone, in pairs and with the swapped
         * TMA-store epilogue (also persistent: 393 x 3 tiles of 128 x 184
         * at fwd 540 x 50304 x 1024); grad_a's K-major B unswapped (9 x 15
         * of 128 x 72); refused with the unswapped TMA-store epilogue, 64
         * rows, ping-pong, clusters sharing B, the forward's N-major B, a
         * width off the steps of 8 */
        {TK_OP_GEMM_F16_FWD, 1149, 1024, 3072,
         {.tma = 1, .bn = 72, .bm = 128, .swap = 1, .splits = 1}, 1,
         "tma bn=72 persist=0 epi=0 split=1 swap=1", 128},
        {TK_OP_GEMM_F16_FWD, 1149, 1024, 3072,
         {.tma = 1, .bn = 72, .bm = 128, .swap = 1, .cluster = 2, .splits = 1}, 1,
         "tma bn=72 persist=0 epi=0 split=1 swap=1 cl=2", 128},
        {TK_OP_GEMM_F16_GRAD_A, 1100, 2816, 1024,
         {.tma = 1, .bn = 72, .bm = 128, .splits = 1}, 1, "tma bn=72 persist=0 epi=0 split=1",
         135},
        {TK_OP_GEMM_F16_FWD, 1149, 1024, 3072,
         {.tma = 1, .bn = 72, .bm = 128, .swap = 1, .epi = 1, .splits = 1}, 1,
         "tma bn=72 persist=0 epi=1 split=1 swap=1", 128},
        {TK_OP_GEMM_F16_FWD, 540, 50304, 1024,
         {.tma = 1, .bn = 184, .bm = 128, .swap = 1, .epi = 1, .persist = 1, .splits = 1}, 1,
         "tma bn=184 persist=1 epi=1 split=1 swap=1", 132},
        {TK_OP_GEMM_F16_GRAD_A, 1100, 2816, 1024,
         {.tma = 1, .bn = 72, .bm = 128, .epi = 1, .splits = 1}, 0, NULL, 0},
        {TK_OP_GEMM_F16_FWD, 1149, 1024, 3072,
         {.tma = 1, .bn = 72, .bm = 64, .swap = 1, .splits = 1}, 0, NULL, 0},
        {TK_OP_GEMM_F16_FWD, 1149, 1024, 3072,
         {.tma = 1, .bn = 72, .bm = 128, .swap = 1, .persist = 3, .splits = 1}, 0, NULL, 0},
        {TK_OP_GEMM_F16_FWD, 1149, 1024, 3072,
         {.tma = 1, .bn = 72, .bm = 128, .swap = 1, .cluster = 4, .splits = 1}, 0, NULL, 0},
        {TK_OP_GEMM_F16_FWD, 1149, 1024, 3072,
         {.tma = 1, .bn = 72, .bm = 128, .swap = 1, .cluster = 2, .cluster_rows = 1, .splits = 1},
         0, NULL, 0},
        {TK_OP_GEMM_F16_FWD, 1149, 1024, 3072, {.tma = 1, .bn = 72, .bm = 128, .splits = 1}, 0,
         NULL, 0},
        {TK_OP_GEMM_F16_FWD, 1149, 1024, 3072,
         {.tma = 1, .bn = 76, .bm = 128, .swap = 1, .splits = 1}, 0, NULL, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        gemm_plan p;
        sm90_heuristic(cases[i].op, cases[i].M, cases[i].N, cases[i].K, &p);
        const int ok = tk__gemm_plan_apply(&p, &cases[i].c);
        ck_assert_msg(ok == cases[i].ok, "case %zu: applied %d", i, ok);
        if (!ok)
            continue;
        gemm_cfg c;
        char text[128];
        tk__gemm_cfg_of_plan(&p, &c);
        tk__gemm_cfg_text(&c, text, sizeof text);
        ck_assert_str_eq(text, cases[i].text);
        int64_t blocks;
        unsigned threads, smem;
        tk__gemm_launch_dims(&p, &blocks, &threads, &smem);
        ck_assert_msg(blocks == cases[i].blocks, "case %zu: %" PRId64 " blocks", i, blocks);
        ck_assert_int_eq(blocks % (c.cluster > 1 ? c.cluster : 1), 0);
        /* a persistent grid on a chip whose SM count is not a multiple of
         * the cluster: whole clusters, one block per SM at most */
        if (p.persist == 1 && blocks == p.sms) {
            p.sms = 131;
            tk__gemm_launch_dims(&p, &blocks, &threads, &smem);
            const int64_t cl = c.cluster > 1 ? c.cluster : 1;
            ck_assert_int_eq(blocks, 131 / cl * cl);
        }
    }
}
END_TEST

/* Every plan the tuner may time (tk__gemm_tune_candidate_plans) fits the
 * device's limits as launched: 227 KiB of shared memory (ring, barriers and
 * the epilogue's staging: 64 KiB on ping-pong tiles), 2 ring stages or more,
 * 384 threads on the TMA kernel, a grid of at least one block. Over the
 * model's families at token counts that cross the tile sizes and random
 * shapes of every op. */
static void check_candidates(tk_op op, int64_t M, int64_t N, int64_t K, unsigned *n_plans,
                             unsigned *n_pp_epi)
{
    gemm_plan base, plans[128];
    sm90_heuristic(op, M, N, K, &base);
    const int n = tk__gemm_tune_candidate_plans(&base, plans, 128);
    ck_assert_int_gt(n, 0);
    for (int i = 0; i < n; i++) {
        const gemm_plan *q = &plans[i];
        gemm_cfg c;
        char text[128];
        tk__gemm_cfg_of_plan(q, &c);
        tk__gemm_cfg_text(&c, text, sizeof text);
        int64_t blocks;
        unsigned threads, smem;
        tk__gemm_launch_dims(q, &blocks, &threads, &smem);
        ck_assert_msg(smem <= 232448 && blocks >= 1 && threads <= 1024,
                      "%s %" PRId64 "x%" PRId64 "x%" PRId64 ": candidate '%s': %u bytes of "
                      "shared memory, %" PRId64 " blocks of %u threads",
                      op_name(op), M, N, K, text, smem, blocks, threads);
        if (q->tma && !q->skinny && !q->smallk) {
            ck_assert_msg(q->wg_stages >= 2 && threads == 384, "candidate '%s': %d stages",
                          text, q->wg_stages);
            *n_pp_epi += q->persist == 3 && q->epi_tma;
        }
        (*n_plans)++;
    }
}

START_TEST(test_tune_candidates)
{
    static const int64_t fam[][2] = {{2816, 1024}, {1024, 2816}, {3072, 1024}, {1024, 3072},
                                     {4096, 1024}, {1024, 4096}, {50304, 1024}, {8, 1024}};
    static const tk_op ops[] = {TK_OP_GEMM_F16_FWD, TK_OP_GEMM_F16_GRAD_A, TK_OP_GEMM_F16_GRAD_B};
    unsigned n_plans = 0, n_pp_epi = 0;
    for (size_t f = 0; f < sizeof fam / sizeof fam[0]; f++)
        for (size_t o = 0; o < 3; o++)
            for (int64_t m = 40; m <= 16384; m = m * 3 / 2 + 8)
                check_candidates(ops[o], m, fam[f][0], fam[f][1], &n_plans, &n_pp_epi);
    uint64_t s = 77;
    for (int i = 0; i < 300; i++) {
        int64_t d[3];
        for (int j = 0; j < 3; j++) {
            const double u = (double)(rnd(&s) >> 11) / 9007199254740992.0;
            d[j] = ((int64_t)(1.0 + 32767.0 * u * u * u) + 7) / 8 * 8;
        }
        check_candidates(ops[rnd(&s) % 3], d[0], d[1], d[2], &n_plans, &n_pp_epi);
    }
    /* the candidates include ping-pong tiles with the TMA-store epilogue,
     * the largest staging there is */
    ck_assert_uint_gt(n_pp_epi, 100);
    ck_assert_uint_gt(n_plans, 10000);
}
END_TEST

static void setup(void)
{
    tk_config *cfg = NULL;
    char why[256] = "";
    tk_assert_status(tk_config_create(&cfg), TK_OK);
    tk_assert_status(tk_config_set_backend(cfg, TK_BACKEND_STUB), TK_OK);
    tk_assert_status(tk_config_set_cache_disabled(cfg, 1), TK_OK);
    tk_status st = tk_context_create(cfg, &g_ctx, why, sizeof why);
    ck_assert_msg(st == TK_OK, "%s", why);
    tk_config_destroy(cfg);
}

static void teardown(void)
{
    tk_context_destroy(g_ctx);
    g_ctx = NULL;
}

static Suite *suite(void)
{
    Suite *s = suite_create("gemm_plan");
    TCase *tc = tcase_create("heuristics");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_model_shapes);
    tcase_add_test(tc, test_random_shapes);
    tcase_add_test(tc, test_cluster_configs);
    tcase_add_test(tc, test_tune_candidates);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tk_test_main(suite());
}
