/*
 * GEMM kernel descriptions (the defines a plan bakes), launch dimensions,
 * tensor maps, and the launches.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/env_vars.h"
#include "ops/gemm/gemm_internal.h"

/* $TOKITAI_JIT_GEMM_PDL, read once per process: it is asked at every call. */
static int pdl_enabled(void)
{
    static int cached = -1;
    return TK_GEMM_PDL && tk__env_word_once(TK__ENV_GEMM_PDL, 1, &cached) == 1;
}

/* Whether p's kernel is launched with programmatic dependent launch (and
 * built with TK_PDL): the TMA kernel, and on sm_90 the skinny and small-K
 * kernels, the router's, which are short enough for the launch to weigh
 * (H100, bench/sweep: see bench/gemm-measurements.md). */
static int plan_pdl(const gemm_plan *p)
{
    return (p->tma || (p->sm90 && (p->skinny || p->smallk))) && pdl_enabled();
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
    tk_status st =
        tk__tensor_map_f16(ctx, out->b, base, rows, cols, row_bytes, box_cols, box_rows, es);
    if (st == TK_OK) {
        tmap_slot *t = &tmap_cache[tmap_next++ % TMAP_CACHE];
        t->base = base, t->rows = rows, t->cols = cols, t->row_bytes = row_bytes;
        t->box_cols = box_cols, t->box_rows = box_rows, t->es = es;
        t->map = *out;
    }
    return st;
}

/* Kernel description of a plan; defines point into `text`. */

/* Decimal text of a non-negative value without printf: this runs on every
 * operator call (the kernel lookup needs the defines), so it stays cheap. */
static void add_def(gemm_desc *d, const char *name, int64_t value)
{
    const size_t i = d->desc.n_defines++;
    tk__op_put_dec(d->text[i], value);
    d->defs[i].name = name;
    d->defs[i].value = d->text[i];
}

void tk__gemm_build_desc(const gemm_plan *p, tk_policy policy, gemm_desc *d)
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
        add_def(d, "TK_GEMM_SKINNY", p->skinny);
        if (p->skinny >= 2)
            add_def(d, "TK_ALIGNED", p->aligned);
        if (p->skinny == 3) {
            add_def(d, "TK_SKS_CL", SKS_CL);
            add_def(d, "TK_SKS_STAGES", SKS_STAGES);
        }
        if (plan_pdl(p))
            add_def(d, "TK_PDL", 1);
    } else if (p->smallk) {
        add_def(d, "TK_GEMM_SMALLK", 1);
        if (plan_pdl(p))
            add_def(d, "TK_PDL", 1);
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
        if (tk__gemm_ks_one(p))
            add_def(d, "TK_KS_ONE", 1);
        if (p->tma && p->cluster > 1)
            add_def(d, "TK_CLUSTER", p->cluster);
        if (p->tma && p->cluster == 2 && p->cluster_rows)
            add_def(d, "TK_CLUSTER_ROWS", 1);
        add_def(d, "TK_ALIGNED", 1);
        add_def(d, "TK_VEC_OUT",
                tk__gemm_plan_reduces(p) ? (p->swap ? p->M : p->N) % 2 == 0 : p->vec_out);
        if (p->splits > 1)
            add_def(d, "TK_SPLITK", p->split_cl ? 2 : 1);
        if (p->splits > 1 && p->split_cl)
            add_def(d, "TK_KSPLITS", p->splits);
        if (p->tma && !TK_GEMM_EPI_SMEM)
            add_def(d, "TK_EPI_SMEM", 0);
        if (p->tma && p->epi_tma)
            add_def(d, "TK_EPI_TMA", 1);
        if (p->tma && p->persist == 2)
            add_def(d, "TK_STREAMK", 1);
        if (p->tma && p->persist == 3)
            add_def(d, "TK_PINGPONG", 1);
        if (plan_pdl(p))
            add_def(d, "TK_PDL", 1);
        if (p->tma && p->group16)
            add_def(d, "TK_GROUP_M", 16);
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

/* 1 when two descriptions built by tk__gemm_build_desc name the same kernel. */
int tk__gemm_desc_same(const gemm_desc *a, const gemm_desc *b)
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
void tk__gemm_build_reduce_desc(const gemm_plan *p, gemm_desc *d)
{
    memset(d, 0, sizeof *d);
    d->desc.source_name = "gemm_f16";
    d->desc.entry = "tk_gemm_f16";
    d->desc.defines = d->defs;
    add_def(d, "TK_GEMM_REDUCE", 1);
    add_def(d, "TK_OUT_F16", p->out_f16);
}

/* The staging copy's kernel (kernel_src/gemm/pad.cuh): nothing baked. */
void tk__gemm_build_pad_desc(gemm_desc *d)
{
    memset(d, 0, sizeof *d);
    d->desc.source_name = "gemm_f16";
    d->desc.entry = "tk_gemm_pad";
    d->desc.defines = d->defs;
    add_def(d, "TK_GEMM_PAD", 1);
}

#define REDUCE_THREADS 256u

static int64_t reduce_blocks(const gemm_plan *p)
{
    const int64_t quads = (p->M * p->N + 3) / 4;
    const int64_t b = (quads + REDUCE_THREADS - 1) / REDUCE_THREADS;
    return b < NV_SMS * 16 ? b : NV_SMS * 16;
}

void tk__gemm_launch_dims(const gemm_plan *p, int64_t *blocks, unsigned *threads, unsigned *smem)
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
    if (p->skinny == 3) {             /* 256 values of m per block, a split of the tokens in each */
        *blocks = (p->M + 255) / 256; /* grid row; 4 warps, each with a ring of SKS_STAGES */
        *threads = 128;               /* slots of 16 token rows of A (528 bytes */
        *smem = 4u * SKS_STAGES * (16u * 528u + 256u); /* apart) and 16 of B */
        return;
    }
    if (p->skinny == 2) {         /* 8 values of m per block, all the tokens; the */
        *blocks = (p->M + 7) / 8; /* threads' rings: TK_SKW_STAGES (12) x 256 x 32 B */
        *threads = 256;
        *smem = 12u * 256u * 32u;
        return;
    }
    if (p->skinny) { /* 32 rows per block at a time, 2 blocks per SM at most */
        *blocks = (p->M + 31) / 32;
        if (*blocks > 2 * p->sms)
            *blocks = 2 * p->sms;
        *threads = 256;
        *smem = (unsigned)(16 * p->K + 8192);
        return;
    }
    if (p->wgmma) {
        const int64_t tn = (p->N + p->wg_bn - 1) / p->wg_bn;
        const int64_t tm = (p->M + p->wg_bm - 1) / p->wg_bm;
        /* clusters: the column tiles in pairs (cluster_rows: the row tiles
         * instead), with 4 the row tiles too (an odd count's last pair has a
         * block with nothing to store) */
        const int cl = p->tma ? p->cluster : 0, rows = cl == 2 && p->cluster_rows;
        *blocks =
            (cl == 4 || rows ? (tm + 1) / 2 * 2 : tm) * (cl > 1 && !rows ? (tn + 1) / 2 * 2 : tn);
        /* persistent: a block per SM at most (clusters: whole ones; their
         * blocks take partner tiles in step, the tile count and the grid
         * both multiples of the cluster) */
        if (p->persist && *blocks > p->sms)
            *blocks = cl > 1 ? p->sms / cl * cl : p->sms;
        /* TMA: + a producer warpgroup, + 1 KiB for the mbarriers */
        *threads = p->tma ? 384 : 256;
        /* + 1 KiB: the kernel aligns the ring to 1024 bytes (swizzle period) */
        *smem = (unsigned)(p->wg_stages * (p->wg_bm + p->wg_bn) * 64 * 2 + (p->tma ? 2048 : 1024) +
                           tk__gemm_epi_bytes(p));
        return;
    }
    *blocks = ((p->M + p->tile.bm - 1) / p->tile.bm) * ((p->N + p->tile.bn - 1) / p->tile.bn);
    *threads = (unsigned)(p->tile.wm * p->tile.wn * 32);
    *smem = (unsigned)(p->tile.stages * (p->tile.bm + p->tile.bn) * p->tile.bk * 2);
}

static tk_status gemm_launch(tk_context *ctx, const gemm_plan *p, tk_kernel *kernel, int64_t blocks,
                             unsigned threads, unsigned smem, const void *d_a, const void *d_b,
                             void *d_c, int64_t ldc, void *skw, void *stream);

/* Runs p with its kernel (and the reduce kernel when split) into c. */
tk_status tk__gemm_exec(tk_context *ctx, const gemm_plan *p, tk_kernel *kernel, tk_kernel *reduce,
                        const void *d_a, const void *d_b, void *d_c, void *stream)
{
    return tk__gemm_exec_staged(ctx, p, kernel, reduce, NULL, d_a, d_b, d_c, stream);
}

#define PAD_THREADS 256u

/* Copies the kernel operand of rows x cols halves at src (leading dimension
 * lds) into dst with leading dimension ldd (a multiple of 8). */
static tk_status pad_launch(tk_context *ctx, const gemm_plan *p, tk_kernel *pad, const void *src,
                            int64_t lds, void *dst, int64_t ldd, int64_t rows, int64_t cols,
                            void *stream)
{
    const int64_t items = rows * (ldd / 8);
    int64_t b = (items + PAD_THREADS - 1) / PAD_THREADS;
    if (b > p->sms * 16)
        b = p->sms * 16;
    const unsigned grid[3] = {(unsigned)(b > 0 ? b : 1), 1, 1};
    const unsigned block[3] = {PAD_THREADS, 1, 1};
    long long ls = lds, ld = ldd, r = rows, c = cols;
    void *args[] = {(void *)&src, &ls, &dst, &ld, &r, &c};
    return tk_kernel_launch(ctx, pad, grid, block, 0, stream, args);
}

static size_t round256(size_t n)
{
    return (n + 255u) & ~(size_t)255u;
}

tk_status tk__gemm_exec_staged(tk_context *ctx, const gemm_plan *p, tk_kernel *kernel,
                               tk_kernel *reduce, tk_kernel *pad, const void *d_a, const void *d_b,
                               void *d_c, void *stream)
{
    int64_t blocks;
    unsigned threads, smem;
    tk_status st;
    tk__gemm_launch_dims(p, &blocks, &threads, &smem);
    /* Workspace, one piece for the call (its lock is not re-entrant): the
     * staged operands, then the split partials or stream-K's fix-up area. */
    const int sa = pad != NULL && p->stage_a, sb = pad != NULL && p->stage_b;
    const int64_t a_rows = p->a_kmajor ? p->M : p->K, a_cols = p->a_kmajor ? p->K : p->M;
    const int64_t b_rows = p->b_kmajor ? p->N : p->K, b_cols = p->b_kmajor ? p->K : p->N;
    const size_t a_bytes = sa ? round256((size_t)a_rows * (size_t)p->lda * 2u) : 0;
    const size_t b_bytes = sb ? round256((size_t)b_rows * (size_t)p->ldb * 2u) : 0;
    size_t work = 0;
    if (tk__gemm_plan_reduces(p))
        work = (size_t)tk__gemm_plan_planes(p) * (size_t)p->M * (size_t)p->N * 4u;
    else if (p->tma && p->persist == 2) /* a flag and a partial tile (128 x BN fp32) per block */
        work = (size_t)blocks * (8u + (size_t)p->wg_bm * (size_t)p->wg_bn * 4u);
    if (a_bytes + b_bytes + work == 0)
        return gemm_launch(ctx, p, kernel, blocks, threads, smem, d_a, d_b, d_c, p->ldc, NULL,
                           stream);
    char *ws = NULL;
    st = tk__op_workspace_acquire(ctx, stream, a_bytes + b_bytes + work, (void **)&ws);
    if (st != TK_OK)
        return st == TK_OUT_OF_MEMORY && (sa || sb) ? TK__GEMM_STAGE_NO_ROOM : st;
    /* the kernel's A is the caller's B side when swapped (gemm_launch swaps back) */
    const void *ka = p->swap ? d_b : d_a, *kb = p->swap ? d_a : d_b;
    if (sa) {
        st = pad_launch(ctx, p, pad, ka, p->src_lda, ws, p->lda, a_rows, a_cols, stream);
        ka = ws;
    }
    if (st == TK_OK && sb) {
        st = pad_launch(ctx, p, pad, kb, p->src_ldb, ws + a_bytes, p->ldb, b_rows, b_cols, stream);
        kb = ws + a_bytes;
    }
    d_a = p->swap ? kb : ka;
    d_b = p->swap ? ka : kb;
    void *wk = ws + a_bytes + b_bytes;
    if (st != TK_OK) {
        /* nothing more enqueued */
    } else if (tk__gemm_plan_reduces(p)) {
        /* Both kernels first (by the caller), so a compile failure enqueues
         * nothing. */
        /* Partials in the op's terms, planes of its M x N (swapped tiles
         * store them transposed, as they store C: rows of the kernel's M) */
        st = gemm_launch(ctx, p, kernel, blocks, threads, smem, d_a, d_b, wk, p->swap ? p->M : p->N,
                         NULL, stream);
        if (st == TK_OK) {
            const unsigned rgrid[3] = {(unsigned)reduce_blocks(p), 1, 1};
            const unsigned rblock[3] = {REDUCE_THREADS, 1, 1};
            long long m = p->swap ? p->N : p->M, n = p->swap ? p->M : p->N, lc = p->ldc;
            int splits = (int)tk__gemm_plan_planes(p);
            void *rargs[] = {&wk, &d_c, &m, &n, &lc, &splits};
            /* After a split grid of one wave, the reduce is launched as its
             * programmatic dependent: it is launched while the split kernel
             * runs and starts summing as it completes (the kernel waits in
             * griddepcontrol.wait). H100, bench/sweep: fwd 128x1024x2816
             * (split 5) 61 -> 65 TF/s, 2048x64x2048 53 -> 59. Not after
             * longer grids (earlier measurements, bench/gemm-measurements.md).
             * The split skinny kernel (kind 3) is one round of blocks. */
            if (((p->tma && blocks * p->splits <= p->sms) || p->skinny == 3) && pdl_enabled())
                st = tk__kernel_launch_pdl(ctx, reduce, rgrid, rblock, 0, stream, rargs);
            else
                st = tk_kernel_launch(ctx, reduce, rgrid, rblock, 0, stream, rargs);
        }
    } else if (p->tma && p->persist == 2) {
        st = gemm_launch(ctx, p, kernel, blocks, threads, smem, d_a, d_b, d_c, p->ldc,
                         work ? wk : NULL, stream);
    } else {
        st =
            gemm_launch(ctx, p, kernel, blocks, threads, smem, d_a, d_b, d_c, p->ldc, NULL, stream);
    }
    tk__op_workspace_release(ctx);
    return st;
}

/* Launches the GEMM kernel of p into c (leading dimension ldc: the output's,
 * or N for the split-K workspace). */
static tk_status gemm_launch(tk_context *ctx, const gemm_plan *p, tk_kernel *kernel, int64_t blocks,
                             unsigned threads, unsigned smem, const void *d_a, const void *d_b,
                             void *d_c, int64_t ldc, void *skw, void *stream)
{
    tk_status st;
    if (p->swap) { /* the kernel's A is the op's B side (tk__gemm_plan_swap) */
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
            /* clusters sharing A load it in 64-row boxes, half of them per
             * block; 64-row tiles in one */
            const int share_a = p->cluster > 1 && !p->cluster_rows;
            const int share_b = p->cluster == 4 || (p->cluster == 2 && p->cluster_rows);
            if (p->a_kmajor)
                st = tmap_get(ctx, &ma, d_a, (uint64_t)p->M, (uint64_t)p->K, (uint64_t)p->lda * 2,
                              64, share_a || p->wg_bm == 64 ? 64 : 128, 2);
            else
                st = tmap_get(ctx, &ma, d_a, (uint64_t)p->K, (uint64_t)p->M, (uint64_t)p->lda * 2,
                              64, 64, 2);
            if (st != TK_OK)
                return st;
            /* clusters sharing B load half of its rows per block */
            if (p->b_kmajor)
                st = tmap_get(ctx, &mb, d_b, (uint64_t)p->N, (uint64_t)p->K, (uint64_t)p->ldb * 2,
                              64, (unsigned)(share_b ? p->wg_bn / 2 : p->wg_bn), 2);
            else
                st = tmap_get(ctx, &mb, d_b, (uint64_t)p->K, (uint64_t)p->N, (uint64_t)p->ldb * 2,
                              64, 64, 2);
            if (st != TK_OK)
                return st;
            gemm_tmap mc;
            memset(&mc, 0, sizeof mc);
            if (p->epi_tma) {
                const unsigned es = p->out_f16 ? 2u : 4u;
                /* swapped: C's rows are the kernel's columns, stored in
                 * boxes of 16 of them */
                st = p->swap ? tmap_get(ctx, &mc, d_c, (uint64_t)p->N, (uint64_t)p->M,
                                        (uint64_t)ldc * es, 128u / es, 16, es)
                             : tmap_get(ctx, &mc, d_c, (uint64_t)p->M, (uint64_t)p->N,
                                        (uint64_t)ldc * es, 128u / es, 128, es);
                if (st != TK_OK)
                    return st;
            }
            /* stream-K flag value: new for every launch; its high word a NaN
             * as a float (see the kernel) */
            static unsigned epoch;
            unsigned long long tag =
                (0x7FCA7C15ull << 32) | __atomic_add_fetch(&epoch, 1u, __ATOMIC_RELAXED);
            void *targs[] = {ma.b, mb.b, mc.b, (void *)&d_c, &m, &n, &k, &lc, &skw, &tag};
            if (plan_pdl(p))
                return tk__kernel_launch_pdl(ctx, kernel, grid, block, smem, stream, targs);
            return tk_kernel_launch(ctx, kernel, grid, block, smem, stream, targs);
        }
        void *args[] = {(void *)&d_a, (void *)&d_b, (void *)&d_c, &m, &n, &k, &la, &lb, &lc};
        if (plan_pdl(p))
            return tk__kernel_launch_pdl(ctx, kernel, grid, block, smem, stream, args);
        return tk_kernel_launch(ctx, kernel, grid, block, smem, stream, args);
    }
}
