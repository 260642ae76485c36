/*
 * Internal to the GEMM operators (src/ops/gemm/): the plan of a call, its
 * configuration, kernel description, and the functions the files share.
 */
#ifndef TK_OPS_GEMM_INTERNAL_H
#define TK_OPS_GEMM_INTERNAL_H

#include "ops/ops_internal.h"

/* NVIDIA tile configurations; index 0 is the large one. */
typedef struct gemm_tile {
    int bm, bn, bk, wm, wn, stages;
} gemm_tile;

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
/* 1: swapped TMA tiles (128 and 256 rows) store C with the bulk tensor
 * copy engine too, transposed through two staging buffers per consumer
 * warpgroup, and take a persistent grid where they make more than a wave
 * (tk__gemm_plan_grid); build with -DTK_GEMM_SWAP_EPI=0 for a block per
 * tile stored through the ring, as before. */
#ifndef TK_GEMM_SWAP_EPI
#define TK_GEMM_SWAP_EPI 1
#endif
/* 1: a weight gradient (tokens on the reduction) takes the swapped
 * orientation, C^T = B^T A^T, where its tiles fill the chip better
 * (tk__gemm_plan_wgmma); build with -DTK_GEMM_SWAP_FIT=0 to keep it
 * unswapped. */
#ifndef TK_GEMM_SWAP_FIT
#define TK_GEMM_SWAP_FIT 1
#endif
/* 1: N <= 8 runs on the skinny kernels, the forward and the weight gradient
 * (plan_skinny); build with -DTK_GEMM_SKINNY=0 to keep it on the tiled
 * kernels. */
#ifndef TK_GEMM_SKINNY
#define TK_GEMM_SKINNY 1
#endif
/* 1: the TMA kernel may compute C^T = B^T A^T on swapped tiles where that
 * fits the token count to the chip better (swap_pick_bn); build with
 * -DTK_GEMM_SWAP=0 to keep every call unswapped. */
#ifndef TK_GEMM_SWAP
#define TK_GEMM_SWAP 1
#endif
/* Split-K on swapped TMA tiles (plan.c split_try_swap); 0: split plans
 * stay unswapped and records naming both are refused. */
#ifndef TK_GEMM_SPLIT_SWAP
#define TK_GEMM_SPLIT_SWAP 1
#endif
/* Ping-pong consumers (persist 3) in the heuristics: 0 never (the default:
 * on an H100 the ping-pong tiles, at most 128 wide, lost to the cooperative
 * 128 x 256 ones: bench/gemm-measurements.md), 1 where plan.c's cost model
 * prefers them, 2 wherever they fit (for measuring them). Tuning records may
 * name them whatever this is. */
#ifndef TK_GEMM_PINGPONG
#define TK_GEMM_PINGPONG 0
#endif
/* 1: operands whose rows are not 16-byte aligned are staged into the
 * workspace, rows padded, for the aligned kernels (plan.c
 * tk__gemm_plan_stage); build with -DTK_GEMM_STAGE=0 to run them on the
 * scalar-load kernels. */
#ifndef TK_GEMM_STAGE
#define TK_GEMM_STAGE 1
#endif
/* Widest ping-pong tile: a warpgroup holds 128 x BN fp32 accumulators (BN
 * a thread, of the 232 registers a consumer thread gets; no spills at 192
 * with nvcc 13.0 for sm_90a). Tuning records and the tuner's candidates go
 * up to it; the heuristics take ping-pong on short reductions only
 * (plan.c, TK_GEMM_PP_ROUNDS). */
#define PP_BN_MAX 192
/* TMA kernel epilogue staged through shared memory (TK_EPI_SMEM in the
 * kernel); build with -DTK_GEMM_EPI_SMEM=0 for the register-pair stores. */
#ifndef TK_GEMM_EPI_SMEM
#define TK_GEMM_EPI_SMEM 1
#endif
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
    int amd;                     /* HIP backend: MFMA / portable kernel */
    int simple;                  /* NVIDIA target below sm_80: portable kernel */
    int sm90;                    /* NVIDIA sm_90 (Hopper): the wgmma kernel may serve */
    int wgmma;                   /* the sm_90a warpgroup-MMA kernel serves this call */
    int tma;                     /* ... in its TMA form (tensor maps as arguments) */
    int wg_bm, wg_bn, wg_stages; /* wg_bm: 128; 64 or 256 on the TMA kernel */
    int swap;                    /* tma: the kernel computes C^T = B^T A^T (plan_swap) */
    int skinny;  /* N <= 8 on a skinny kernel: 1 the forward, 2 the weight gradient, 3 the
                  * weight gradient split over the tokens (plan_skinny) */
    int smallk;  /* K <= SMALLK_K_MAX on its own kernel (plan_smallk) */
    int persist; /* tma: 1 grid of one block per SM at most, each taking tiles in turn;
                  * 2 the same grid sharing the K steps of all tiles (stream-K);
                  * 3 the same grid, its consumer warpgroups on alternate tiles
                  * (ping-pong: 128 rows, at most 128 columns, unsplit,
                  * stored from registers; TK_PINGPONG) */
    int epi_tma; /* tma: the epilogue stores C with the bulk tensor copy engine */
    int cluster; /* tma: 2 clusters of two blocks on adjacent column tiles, each
                  * loading half of their shared A tile for both (TK_CLUSTER);
                  * 4 clusters of 2 x 2 tiles, B shared down each column the
                  * same way; 0 none. Unsplit; a block per tile or a
                  * persistent grid of whole clusters (persist 1) */
    int cluster_rows; /* tma, cluster 2: the pairs are two row tiles of one
                       * column sharing B instead (TK_CLUSTER_ROWS; 64-row
                       * tiles too) */
    int c16;     /* C 16-byte aligned, rows a multiple of 16 bytes apart */
    int group16; /* tma: the tile order walks N in groups of 16 tile rows, not 8
                  * (TK_GROUP_M; plan_grid) */
    int splits;  /* > 1: split-K into the workspace, then the reduce kernel */
    int split_cl; /* tma, splits 2-8: the splits of a tile run as one cluster and
                   * sum through distributed shared memory instead (TK_SPLITK
                   * 2: no workspace, no reduce kernel; tk__gemm_plan_reduces) */
    gemm_tile tile;
    int64_t om, on, ok; /* the op's own M, N, K (tuning records are keyed on them) */
    /* Staged operands (tk__gemm_plan_stage): the kernel's A (B) is first
     * copied into the workspace with lda (ldb) = its row length rounded up
     * to 8 halves; src_lda (src_ldb) is the caller's leading dimension. */
    int stage_a, stage_b;
    int64_t src_lda, src_ldb;
    int64_t sms; /* multiprocessors of the device (NV_SMS offline) */
} gemm_plan;

typedef struct gemm_cfg {
    int tma;     /* 1: the sm_90a TMA wgmma kernel, 0: mma.sync */
    int bn;      /* tma: columns, a multiple of 16 (of 64 with B N-major) */
    int bm;      /* tma: 64, 128 or 256 rows */
    int swap;    /* tma: 1 the swapped plan (plan_swap) */
    int skinny;  /* 1: a skinny kernel, the kind that fits (plan_skinny); nothing else applies */
    int smallk;  /* 1: the small-K kernel (plan_smallk); nothing else applies */
    int tile;    /* mma.sync: index into tk__gemm_nv_tiles */
    int persist; /* tma: 1 persistent grid, 2 stream-K, 3 ping-pong */
    int epi;     /* tma, unsplit: 1 the TMA-store epilogue */
    int cluster; /* tma, unsplit, persist 0 or 1: 2 clusters of two sharing A,
                  * 4 of 2 x 2 sharing A and B; 0 none */
    int cluster_rows; /* cluster 2: pairs of row tiles sharing B ("clm=2") */
    int splits;  /* split-K factor; 1: none */
    int split_cl; /* tma, splits 2-8: summed in a cluster ("ksc=1"; gemm_plan) */
} gemm_cfg;

#define N_TILES 4
/* TMA kernel tile widths (plan.c) */
#define N_TMA_BNS 4

/* What serves a call while its own kernel is built (tk__gemm_plan_fallback,
 * gemm.c): the universal kernel; the fast fallback f; or f serves the call
 * itself, its own kernel never used. */
enum { TK__GEMM_FB_UNIVERSAL = 0, TK__GEMM_FB_FAST = 1, TK__GEMM_FB_FAST_ONLY = 2 };
/* Tuning modes (tk__gemm_tune_mode) */
enum { TUNE_RECORDS = 0, TUNE_OFF = 1, TUNE_AUTO = 2 };

/* Widths of the 256-row swapped tiles (plan.c, swap_pick_bn: where they
 * come from) */
#define SWAP_BN_MIN 64
#define SWAP_BN_MAX 192

typedef struct gemm_desc {
    tk_kernel_desc desc;
    tk_define defs[20];
    char text[20][24];
} gemm_desc;

/* plan.c */
extern const gemm_tile tk__gemm_nv_tiles[N_TILES];
void tk__gemm_plan_target(tk_context *ctx, gemm_plan *p);
extern const int tk__gemm_tma_bns[N_TMA_BNS];
int tk__gemm_tma_stages(int bm, int bn, int room);
int tk__gemm_ring_room(const gemm_plan *p);
int tk__gemm_ks_one(const gemm_plan *p);
int tk__gemm_epi_bytes(const gemm_plan *p);
void tk__gemm_plan_swap(gemm_plan *p);
void tk__gemm_plan_wgmma(gemm_plan *p);
int64_t tk__gemm_split_clamp(int64_t s, int64_t kt, int64_t M, int64_t N);
void tk__gemm_plan_split(gemm_plan *p);
void tk__gemm_plan_untiled(gemm_plan *p);
int tk__gemm_skinny_fits(const gemm_plan *p);
int tk__gemm_skinny_wgrad_fits(const gemm_plan *p);
int tk__gemm_skinny_split_fits(const gemm_plan *p);
int tk__gemm_plan_skinny_as(gemm_plan *p);
void tk__gemm_plan_skinny(gemm_plan *p);
int tk__gemm_smallk_fits(const gemm_plan *p);
void tk__gemm_plan_smallk(gemm_plan *p);
void tk__gemm_plan_grid(gemm_plan *p);
void tk__gemm_plan_op(tk_op op, int64_t M, int64_t N, int64_t K, gemm_plan *p);
void tk__gemm_plan_alignment(gemm_plan *p, const void *a, const void *b, const void *c);
void tk__gemm_plan_universal(const gemm_plan *p, gemm_plan *u);
int tk__gemm_plan_fast(const gemm_plan *p, gemm_plan *f);
int tk__gemm_plan_stage(gemm_plan *p, const void *a, const void *b);
void tk__gemm_plan_unstage(gemm_plan *p);
/* The pointer plan_alignment is given for a staged operand (the
 * workspace is 256-byte aligned). */
#define TK__GEMM_STAGED_PTR ((const void *)(uintptr_t)256)
void tk__gemm_plan_packed_heuristic(tk_context *ctx, tk_op op, int64_t M, int64_t N, int64_t K,
                                    gemm_plan *p);
void tk__gemm_plan_choose(gemm_plan *p);
/* 1 when p writes fp32 partials to the workspace and needs the reduce
 * kernel (split, not in a cluster) */
static inline int tk__gemm_plan_reduces(const gemm_plan *p)
{
    return p->splits > 1 && !p->split_cl;
}
/* The split skinny weight gradient's clusters (TK_SKS_CL): its splits add
 * their sums a cluster at a time, one workspace plane a cluster. */
#ifndef SKS_CL
#define SKS_CL 4
#endif
/* ... and the slots of each warp's ring (TK_SKS_STAGES) */
#ifndef SKS_STAGES
#define SKS_STAGES 3
#endif
/* The fp32 planes a reducing plan writes into the workspace. */
static inline int64_t tk__gemm_plan_planes(const gemm_plan *p)
{
    return p->skinny == 3 ? p->splits / SKS_CL : p->splits;
}
/* 1 when a TMA plan's split may run as one cluster (TK_SPLITK 2): 2-8
 * splits of a block per tile (no persistent grid, stream-K, ping-pong,
 * TMA-store epilogue or operand-sharing cluster), each block's slice of
 * the tile at least one 8-column unit of a consumer thread's accumulators
 * (kcl_store), the tile's fp32 partial within the ring. */
int tk__gemm_split_cl_fits(const gemm_plan *p);

/* config.c */
void tk__gemm_cfg_of_plan(const gemm_plan *p, gemm_cfg *c);
void tk__gemm_cfg_text(const gemm_cfg *c, char *buf, size_t size);
int tk__gemm_plan_apply(gemm_plan *p, const gemm_cfg *c);
int64_t tk__gemm_m_class_max(int64_t m);
int64_t tk__gemm_m_class_mid(int64_t mc);
void tk__gemm_record_name(const gemm_plan *p, char buf[64]);
tk_status tk__gemm_record_store(tk_context *ctx, const gemm_plan *p, const char *cfg);
int tk__gemm_tune_mode(void);
int tk__gemm_plan_tuned(tk_context *ctx, gemm_plan *p);
void tk__gemm_plan_packed(tk_context *ctx, tk_op op, int64_t M, int64_t N, int64_t K, gemm_plan *p);

/* gemm.c: TK__GEMM_FB_*, and the fast fallback in f unless universal. */
int tk__gemm_plan_fallback(const gemm_plan *p, gemm_plan *f);

/* launch.c */
void tk__gemm_build_desc(const gemm_plan *p, tk_policy policy, gemm_desc *d);
int tk__gemm_desc_same(const gemm_desc *a, const gemm_desc *b);
void tk__gemm_build_reduce_desc(const gemm_plan *p, gemm_desc *d);
void tk__gemm_build_pad_desc(gemm_desc *d);
void tk__gemm_launch_dims(const gemm_plan *p, int64_t *blocks, unsigned *threads, unsigned *smem);
tk_status tk__gemm_exec(tk_context *ctx, const gemm_plan *p, tk_kernel *kernel, tk_kernel *reduce,
                        const void *d_a, const void *d_b, void *d_c, void *stream);
/* tk__gemm_exec of a plan with staged operands: pad (the staging copy's
 * kernel) copies them into the workspace first; d_a, d_b are the caller's.
 * TK__GEMM_STAGE_NO_ROOM, nothing enqueued, when the device has no room for
 * the staged copies (the call then runs on the operands as they are). */
#define TK__GEMM_STAGE_NO_ROOM ((tk_status)-1000)
tk_status tk__gemm_exec_staged(tk_context *ctx, const gemm_plan *p, tk_kernel *kernel,
                               tk_kernel *reduce, tk_kernel *pad, const void *d_a, const void *d_b,
                               void *d_c, void *stream);

/* tune.c */
int tk__gemm_tune_candidate_plans(const gemm_plan *base, gemm_plan *out, int max);
void tk__gemm_tune_call(tk_context *ctx, gemm_plan *p, const void *d_a, const void *d_b, void *d_c,
                        void *stream);
/* The kernels of plan p (its own; the reduce kernel too where it splits
 * into the workspace), compiled or found, descriptions in d and rd; from
 * any thread. */
tk_status tk__gemm_plan_kernels(tk_context *ctx, const gemm_plan *p, gemm_desc *d, gemm_desc *rd,
                                tk_kernel **k, tk_kernel **rk);
/* fn(ctx, user, i) for i in 0 .. n - 1 on a thread per online processor
 * (2 to 16), returning when all are done (the tuner's compiles). */
void tk__gemm_parallel(tk_context *ctx, int n, void (*fn)(tk_context *, void *, int), void *user);

#endif
