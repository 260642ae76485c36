/*
 * GEMM configurations, their text form, and the tuning records that hold them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/env_vars.h"
#include "ops/gemm/gemm_internal.h"

/* ------------------------------------------------------------- tuning
 *
 * A configuration is what the planner decides beyond layout and alignment:
 * kernel (TMA wgmma or mma.sync), tile, grid (a block per tile, persistent,
 * stream-K, ping-pong: persist=0..3), epilogue, split-K factor.
 * The heuristics above choose one; a tuning record (tokitai-jit --tune,
 * tk_op_tune) replaces that choice for a shape class: the op, its N and K
 * (fixed by the model) and a class of M (tokens): 16-row steps up to 128,
 * 128-row steps (one 128-row tile more or less) up to 8192, 1024-row steps
 * up to 32768, then octaves. A configuration is text ("tma bn=256 persist=1
 * epi=1 split=1", "mma tile=2 split=4", a line per class in the record of the
 * op's (N, K) family: tk__gemm_record_name), checked against the call when used: one
 * that does not fit the call (unaligned operands, a TMA kernel on another
 * target) is ignored and the heuristics choose. Every configuration
 * computes the same products in fp32; only split-K changes the order of
 * the sums, within the op's tolerance. */

void tk__gemm_cfg_of_plan(const gemm_plan *p, gemm_cfg *c)
{
    memset(c, 0, sizeof *c);
    c->skinny = p->skinny != 0; /* "skinny": whichever kind fits the call */
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
        if (memcmp(&tk__gemm_nv_tiles[i], &p->tile, sizeof p->tile) == 0)
            c->tile = i;
    c->persist = p->persist;
    c->epi = p->epi_tma;
    c->cluster = p->tma && p->cluster > 1 ? p->cluster : 0;
    c->cluster_rows = c->cluster == 2 && p->cluster_rows;
    c->splits = p->splits;
    c->split_cl = p->tma && p->splits > 1 && p->split_cl;
}

void tk__gemm_cfg_text(const gemm_cfg *c, char *buf, size_t size)
{
    if (c->skinny)
        snprintf(buf, size, "skinny");
    else if (c->smallk)
        snprintf(buf, size, "smallk");
    else if (c->tma)
        snprintf(buf, size, "tma bn=%d persist=%d epi=%d split=%d%s%s%s%s", c->bn, c->persist,
                 c->epi, c->splits,
                 c->bm == 256  ? " bm=256"
                 : c->bm == 64 ? " bm=64"
                               : "",
                 c->swap ? " swap=1" : "",
                 c->cluster == 4   ? " cl=4"
                 : c->cluster_rows ? " clm=2"
                 : c->cluster > 1  ? " cl=2"
                                   : "",
                 c->split_cl ? " ksc=1" : "");
    else
        snprintf(buf, size, "mma tile=%d split=%d", c->tile, c->splits);
}

/* A TMA configuration's tile width: a multiple of 16 from 16 to 256, or of
 * 8 (16 g + 8, 24 to 248) for the forms whose kernel walks the columns in
 * 8s (tma_wgmma.cuh, gemm_body_tma): 128- or 256-row tiles stored from
 * registers, the ring or (swapped) the TMA-store epilogue, no ping-pong, no
 * cluster sharing B. Such widths let
 * a token count on a swapped tile's width fill one round with less empty
 * room (fwd 1149 x 1024 x 3072: 16 tiles of 72 in 128 blocks where 80-wide
 * tiles take 120 blocks over 1200 columns). The tile's B must be K-major
 * (N-major B comes in boxes of 64 columns; tk__gemm_plan_apply). */
static int cfg_bn_ok(const gemm_cfg *c)
{
    if (c->bn % 8 != 0 || c->bn < 16 || c->bn > 256)
        return 0;
    return c->bn % 16 == 0 || (c->bm != 64 && (!c->epi || c->swap) && c->persist != 3 &&
                               c->cluster != 4 && !c->cluster_rows);
}

/* 1 when text is a well-formed configuration (whether it fits a call is
 * tk__gemm_plan_apply's question). Options may follow a TMA configuration, each at
 * most once: bm=64|128|256, swap=0|1, cl=1|2|4 or clm=2 (pairs of row
 * tiles sharing B), ksc=0|1 (the split summed in a cluster); without them
 * 128 rows, unswapped, no cluster, the split summed by the reduce kernel
 * (as records written before they existed). */
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
            else if (strcmp(key, "clm") == 0)
                bit = 4, c->cluster = v, c->cluster_rows = 1;
            else if (strcmp(key, "ksc") == 0)
                bit = 8, c->split_cl = v;
            else
                return 0;
            if (seen & (unsigned)bit)
                return 0;
            seen |= (unsigned)bit;
        }
        return cfg_bn_ok(c) && (c->bm == 64 || c->bm == 128 || c->bm == 256) &&
               (c->bm != 256 || c->bn <= SWAP_BN_MAX) && (c->swap == 0 || c->swap == 1) &&
               c->persist >= 0 && c->persist <= 3 &&
               (c->cluster == 0 || c->cluster == 2 || c->cluster == 4) &&
               (!c->cluster_rows || c->cluster == 2) && (c->epi == 0 || c->epi == 1) &&
               c->splits >= 1 && c->splits <= SPLIT_MAX && (c->split_cl == 0 || c->split_cl == 1);
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
int tk__gemm_plan_apply(gemm_plan *p, const gemm_cfg *c)
{
    gemm_plan q = *p;
    int64_t bk, kt;
    if (p->amd || p->simple || c->splits < 1 || c->splits > SPLIT_MAX)
        return 0;
    if (q.swap) /* back to the op's own terms */
        tk__gemm_plan_swap(&q);
    q.skinny = 0;
    q.smallk = 0;
    if (c->skinny) {
        if (!tk__gemm_plan_skinny_as(&q))
            return 0;
        *p = q;
        return 1;
    }
    if (c->smallk) {
        if (!tk__gemm_smallk_fits(&q))
            return 0;
        q.smallk = 1;
        tk__gemm_plan_untiled(&q);
        *p = q;
        return 1;
    }
    if (c->tma) {
        if (!TK_GEMM_TMA || !p->sm90 || !p->aligned || p->M >= INT32_MAX || p->N >= INT32_MAX ||
            p->K >= INT32_MAX || !cfg_bn_ok(c) || (c->bm != 64 && c->bm != 128 && c->bm != 256) ||
            (c->bm == 256 && c->bn > SWAP_BN_MAX))
            return 0;
        /* 64-row tiles (one consumer warpgroup on every K step, or two on
         * alternate ones: tk__gemm_ks_one):
         * a block per tile, stored from the ring or registers; clusters
         * only of row tiles sharing B */
        if (c->bm == 64 && (c->epi || c->persist || (c->cluster > 1 && !c->cluster_rows)))
            return 0;
        /* swapped: tokens on the kernel's M before, B K-major after; or
         * tokens on the reduction (grad_b: a swap for the tiles' fit) */
        if (c->swap) {
            if (!TK_GEMM_SWAP || (q.moving == 0 ? !q.a_kmajor : q.moving != 2 || !TK_GEMM_SWAP_FIT))
                return 0;
            tk__gemm_plan_swap(&q);
        }
        /* N-major B comes in boxes of 64 columns (shared B: half of them
         * per block) */
        if (!q.b_kmajor && c->bn % (c->cluster == 4 || c->cluster_rows ? 128 : 64) != 0)
            return 0;
        /* persistent blocks take whole tiles only; the TMA-store epilogue
         * writes C, not split partials, and needs C 16-byte aligned; the
         * swapped and 256-row tiles store from registers or the ring
         * (swapped split partials transposed, as C) */
        if (c->splits > 1 && (c->persist || c->epi || (c->swap && !TK_GEMM_SPLIT_SWAP)))
            return 0;
        /* (its chunks are 128 bytes of a row; a width's remainder leaves
         * from registers; swapped tiles, 128 or 256 rows, store boxes of 16
         * of C's rows) */
        if (c->epi && (!p->c16 || (c->swap ? c->bm == 64 || !TK_GEMM_SWAP_EPI : c->bm != 128)))
            return 0;
        if (c->persist == 2 && (c->swap || c->bm != 128))
            return 0;
        /* ping-pong: a warpgroup per 128-row tile, its accumulators in
         * registers, stored from them or (unswapped) by the TMA-store
         * epilogue */
        if (c->persist == 3 && (c->bm != 128 || c->bn > PP_BN_MAX || (c->epi && c->swap) ||
                                c->splits > 1 || c->cluster > 1))
            return 0;
        /* clusters: unsplit, a block per tile or a persistent grid (not
         * stream-K or ping-pong); pairs of row tiles in twos */
        if (c->cluster > 1 && (c->persist > 1 || c->splits > 1))
            return 0;
        if (c->cluster_rows && c->cluster != 2)
            return 0;
        /* stream-K needs more tiles than blocks (each block's share at least
         * one tile's K steps) */
        if (c->persist == 2 && ((q.M + 127) / 128) * ((q.N + c->bn - 1) / c->bn) <= p->sms)
            return 0;
        q.wgmma = 1, q.tma = 1, q.wg_bm = c->bm, q.wg_bn = c->bn;
        q.persist = c->persist;
        q.epi_tma = c->epi;
        q.cluster = c->cluster;
        q.cluster_rows = c->cluster_rows;
        q.tile = tk__gemm_nv_tiles[0];
        bk = 64;
    } else {
        if (c->tile < 0 || c->tile >= N_TILES || c->persist)
            return 0;
        tk__gemm_plan_untiled(&q); /* (split below) */
        q.tile = tk__gemm_nv_tiles[c->tile];
        bk = q.tile.bk;
    }
    q.splits = 1;
    if (c->splits > 1 && TK_GEMM_SPLITK) {
        kt = (p->K + bk - 1) / bk;
        /* summed in a cluster: no workspace to bound */
        q.splits = (int)tk__gemm_split_clamp(c->splits, kt, c->split_cl ? 1 : p->M,
                                             c->split_cl ? 1 : p->N);
    }
    q.split_cl = 0;
    if (q.tma) /* the ring's stages once the epilogue and the split are known */
        q.wg_stages = tk__gemm_tma_stages(q.wg_bm, q.wg_bn, tk__gemm_ring_room(&q));
    if (c->split_cl) {
        /* in a cluster, as asked, or not at all (the clamp may leave
         * another factor; a split of 1 has nothing to sum) */
        q.split_cl = 1;
        if (!q.tma || q.splits != c->splits || !tk__gemm_split_cl_fits(&q))
            return 0;
    }
    *p = q;
    return 1;
}

/* Upper end of M's class (see the top of this section). */
int64_t tk__gemm_m_class_max(int64_t m)
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

/* The middle of the class whose largest M is mc (the tuner's second
 * timing point): half way from the class's smallest M. */
int64_t tk__gemm_m_class_mid(int64_t mc)
{
    int64_t lo = mc <= 128 ? mc - 15 : mc <= 8192 ? mc - 127 : mc <= 32768 ? mc - 1023 : mc / 2 + 1;
    if (lo < 1)
        lo = 1;
    return lo + (mc - lo) / 2;
}

/* Records: one per op and (N, K), the family of every token count M, named
 * "N=2816 K=1024" (op terms), holding a line per class of M in increasing
 * order, "M<=4096 tma bn=256 persist=0 epi=1 split=1". One record per
 * family means one cache lookup per family and context, at its first call
 * (when its kernel is fetched too), not one per new token count on the
 * training path. */
void tk__gemm_record_name(const gemm_plan *p, char buf[64])
{
    char *o = buf;
    memcpy(o, "N=", 2), o += 2;
    o = tk__op_put_dec(o, p->on);
    memcpy(o, " K=", 3), o += 3;
    tk__op_put_dec(o, p->ok);
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
tk_status tk__gemm_record_store(tk_context *ctx, const gemm_plan *p, const char *cfg)
{
    char name[64];
    const int64_t mc = tk__gemm_m_class_max(p->om);
    char *old = malloc(TK__RECORD_MAX), *out = malloc(TK__RECORD_MAX);
    size_t o = 0;
    int placed = 0;
    tk_status st = TK_OK;
    if (old == NULL || out == NULL) {
        free(old);
        free(out);
        return tk__fail(ctx, TK_OUT_OF_MEMORY, "%s: tuning record: out of memory", p->op);
    }
    tk__gemm_record_name(p, name);
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
                const int w =
                    snprintf(out + o, TK__RECORD_MAX - o, "M<=%lld %s\n", (long long)mc, cfg);
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
 * call: see tk_op_tune), else (default) records where they exist. Its words
 * are in the order of TUNE_RECORDS, TUNE_OFF, TUNE_AUTO. */
int tk__gemm_tune_mode(void)
{
    static int cached = -1;
    return tk__env_word_once(TK__ENV_TUNE, TUNE_RECORDS, &cached);
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

int tk__gemm_plan_tuned(tk_context *ctx, gemm_plan *p)
{
    char name[64], value[64];
    const char *line;
    size_t len = 0;
    gemm_cfg c;
    if (p->amd || p->simple || !p->aligned || tk__gemm_tune_mode() == TUNE_OFF)
        return 0;
    const int64_t mc = tk__gemm_m_class_max(p->om);
    const unsigned gen = tk__record_generation();
    tuned_slot *t =
        &tuned_cache[(uint64_t)(p->on * 31 + p->ok * 17 + mc + (int64_t)(uintptr_t)p->op) %
                     TUNED_CACHE];
    if (t->gen == gen && t->ctx == ctx && t->op == p->op && t->n == p->on && t->k == p->ok &&
        t->mc == mc) {
        if (t->present && t->fits)
            (void)tk__gemm_plan_apply(p, &t->cfg);
        return t->present;
    }
    tk__gemm_record_name(p, name);
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
        (void)tk__gemm_plan_apply(p, &c);
    *t = (tuned_slot){.ctx = ctx,
                      .op = p->op,
                      .n = p->on,
                      .k = p->ok,
                      .mc = mc,
                      .gen = gen,
                      .present = present,
                      .fits = fits};
    if (fits)
        t->cfg = c;
    return present;
}

/* The heuristics' plan of a packed call, then the class's tuning record, as a
 * call would plan it (precompile and tune). Here, not in plan.c, so that
 * planning never reads the records: config.c uses plan.c, not the reverse. */
void tk__gemm_plan_packed(tk_context *ctx, tk_op op, int64_t M, int64_t N, int64_t K, gemm_plan *p)
{
    tk__gemm_plan_packed_heuristic(ctx, op, M, N, K, p);
    tk__gemm_plan_tuned(ctx, p);
}
