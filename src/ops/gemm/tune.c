/*
 * The GEMM tuner: candidates of a class, compiled in parallel, timed on
 * the device, the fastest stored as the class's tuning record.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ops/gemm/gemm_internal.h"

/* ------------------------------------------------------------- the tuner
 *
 * Candidates of a class: the heuristics' plan (alone and in clusters of two
 * sharing A or B), the skinny and small-K kernels where they fit, swapped
 * 256-, 128- and 64-row tiles (for each round count its narrowest width; 256
 * and 128 rows also in clusters of two, on a persistent grid, and with the
 * TMA-store epilogue), the TMA kernel with 64- to 256-column tiles
 * (persistent grid or not, when there is more than a wave of tiles; each
 * epilogue; in clusters of two sharing A), K-major B's widths 144-240
 * (persistent or not, each epilogue), ping-pong tiles up to PP_BN_MAX
 * wide (unswapped with either epilogue, and swapped; for each round count
 * its narrowest width), 64-row
 * tiles (for each round count its narrowest width), the TMA kernel split
 * 2..8 ways (12 and 16 where that makes one wave) on 64- and 128-row tiles
 * 64, 128, 192 and 256 wide when its
 * tiles fill less than the chip (and on swapped 128-row tiles of those
 * widths, in one wave), each split also summed in a cluster where that
 * fits (ksc=1, tk__gemm_split_cl_fits), the three smaller mma.sync tiles unsplit and split 2
 * or 4 ways (on sm_90 only when the output has few tiles; elsewhere always,
 * with the large mma.sync tile too); at most TUNE_MAX_CANDS. Each is
 * compiled (in parallel), run once, then timed with device events in batches
 * of back-to-back launches (about half a millisecond each, best of three,
 * after warm-up runs), at the class's largest M and (tokitai-jit --tune,
 * tk_op_tune) at its middle, imposed on the heuristics' plan of that M;
 * the candidate of least geometric-mean time relative to the heuristics at
 * each point is the record when that beats them by TUNE_MARGIN, else the
 * record is TUNE_HEURISTICS. */
#define TUNE_MAX_CANDS 256
/* compile threads: one per online processor, at least 2, at most 16 */
#define TUNE_JOBS_MIN 2
#define TUNE_JOBS_MAX 16
#define TUNE_MARGIN 1.03
/* The record of a class whose heuristics no candidate beats by TUNE_MARGIN:
 * no configuration (tk__gemm_plan_tuned finds it present but fitting no
 * call), so each M keeps the heuristics' own plan. */
#define TUNE_HEURISTICS "heuristics"

typedef struct tune_cand {
    gemm_plan p;
    gemm_desc d, rd;
    tk_kernel *k, *rk;
    char text[64];
    double us;
    tk_status st;
    int slot; /* its index in the report's timed[] + 1; 0: not there */
} tune_cand;

static int tune_add(tune_cand *c, int n, const gemm_plan *q)
{
    gemm_cfg cfg;
    char text[64];
    if (n >= TUNE_MAX_CANDS)
        return n;
    tk__gemm_cfg_of_plan(q, &cfg);
    tk__gemm_cfg_text(&cfg, text, sizeof text);
    for (int i = 0; i < n; i++)
        if (strcmp(c[i].text, text) == 0)
            return n;
    memset(&c[n], 0, sizeof c[n]);
    c[n].p = *q;
    memcpy(c[n].text, text, sizeof text);
    return n + 1;
}

/* The split configuration cfg summed in a cluster, where it fits. */
static int tune_add_cl(tune_cand *c, int n, const gemm_plan *base, const gemm_cfg *cfg)
{
    gemm_cfg k = *cfg;
    gemm_plan q = *base;
    k.split_cl = 1;
    return tk__gemm_plan_apply(&q, &k) ? tune_add(c, n, &q) : n;
}

/* Rounds of rows x cols in bm x bn tiles over sms multiprocessors (a tile
 * each per round): the candidate loops keep the narrowest width of each. */
static int64_t tile_rounds(int64_t rows, int64_t cols, int bm, int bn, int64_t sms)
{
    return (((rows + bm - 1) / bm) * ((cols + bn - 1) / bn) + sms - 1) / sms;
}

/* base: the heuristics' plan (candidate 0). */
static int tune_candidates(const gemm_plan *base, tune_cand *c)
{
    /* more than 8 ways only where the split grid is one wave at most (a
     * reduction streamed by few output tiles) */
    static const int tma_splits[] = {2, 3, 4, 5, 6, 8, 12, 16};
    static const int mma_splits[] = {1, 2, 4};
    int n = tune_add(c, 0, base);
    gemm_cfg cfg;
    gemm_plan q, o = *base;
    if (o.swap) /* the op's own terms */
        tk__gemm_plan_swap(&o);
    const int64_t t128 = ((o.M + 127) / 128) * ((o.N + 127) / 128);
    const int tma_ok = TK_GEMM_TMA && base->sm90 && base->aligned;
    /* the heuristics' own TMA plan in clusters of two sharing A (column
     * tiles in pairs) and sharing B (row tiles in pairs), on its own grid:
     * a block per tile or persistent */
    for (int rows = 0; tma_ok && base->tma && base->splits == 1 && base->persist <= 1 && rows <= 1;
         rows++) {
        tk__gemm_cfg_of_plan(base, &cfg);
        cfg.cluster = 2, cfg.cluster_rows = rows;
        q = *base;
        if (tk__gemm_plan_apply(&q, &cfg))
            n = tune_add(c, n, &q);
    }
    cfg = (gemm_cfg){.skinny = 1, .splits = 1};
    q = *base;
    if (tk__gemm_plan_apply(&q, &cfg))
        n = tune_add(c, n, &q);
    cfg = (gemm_cfg){.smallk = 1, .splits = 1};
    q = *base;
    if (tk__gemm_plan_apply(&q, &cfg))
        n = tune_add(c, n, &q);
    /* swapped 256-, 128- and 64-row tiles: for each round count, its
     * narrowest width, alone and (not 64 rows) in clusters of two; 256- and
     * 128-row tiles also on a persistent grid where they make more than a
     * round */
    for (int bm = 256; tma_ok && bm >= 64; bm /= 2)
        for (int bn = bm == 256 ? SWAP_BN_MIN : 32, last = 0; bn <= (bm == 256 ? SWAP_BN_MAX : 256);
             bn += 16) {
            const int64_t rounds = tile_rounds(o.N, o.M, bm, bn, base->sms);
            if (rounds == last)
                continue;
            last = (int)rounds;
            for (int cl = 0; cl <= (bm == 64 ? 0 : 2); cl += 2) {
                cfg =
                    (gemm_cfg){.tma = 1, .bn = bn, .bm = bm, .swap = 1, .cluster = cl, .splits = 1};
                q = *base;
                if (tk__gemm_plan_apply(&q, &cfg))
                    n = tune_add(c, n, &q);
            }
            /* the transposed TMA-store epilogue, a block per tile and on a
             * persistent grid (the heuristics' form of swapped tiles) */
            for (int persist = 0; bm != 64 && persist <= (rounds > 1); persist++) {
                cfg = (gemm_cfg){
                    .tma = 1, .bn = bn, .bm = bm, .swap = 1, .persist = persist, .epi = 1, .splits = 1};
                q = *base;
                if (tk__gemm_plan_apply(&q, &cfg))
                    n = tune_add(c, n, &q);
            }
            if (bm != 64 && rounds > 1) {
                cfg =
                    (gemm_cfg){.tma = 1, .bn = bn, .bm = bm, .swap = 1, .persist = 1, .splits = 1};
                q = *base;
                if (tk__gemm_plan_apply(&q, &cfg))
                    n = tune_add(c, n, &q);
            }
        }
    /* swapped 128-row tiles of 16 g + 8 columns (config.c cfg_bn_ok: stored
     * through the ring, no cluster sharing B): for each round count, its
     * narrowest such width */
    for (int bn = 24, last = 0; tma_ok && bn < 256; bn += 16) {
        const int64_t rounds = tile_rounds(o.N, o.M, 128, bn, base->sms);
        if (rounds == last)
            continue;
        last = (int)rounds;
        cfg = (gemm_cfg){.tma = 1, .bn = bn, .bm = 128, .swap = 1, .splits = 1};
        q = *base;
        if (tk__gemm_plan_apply(&q, &cfg))
            n = tune_add(c, n, &q);
    }
    /* ping-pong tiles (persist 3), unswapped and swapped: 128 rows, for
     * each round count its narrowest width up to PP_BN_MAX (N-major B:
     * whole 64-column boxes) */
    for (int sw = 0; tma_ok && sw <= 1; sw++)
        for (int bn = 32, last = 0; bn <= PP_BN_MAX; bn += 16) {
            const int64_t km = sw ? o.N : o.M, kn = sw ? o.M : o.N;
            const int64_t rounds = tile_rounds(km, kn, 128, bn, base->sms);
            if (rounds == last)
                continue;
            cfg = (gemm_cfg){.tma = 1, .bn = bn, .bm = 128, .swap = sw, .persist = 3, .splits = 1};
            q = *base;
            if (tk__gemm_plan_apply(&q, &cfg)) {
                n = tune_add(c, n, &q);
                last = (int)rounds;
                /* unswapped: also with the TMA-store epilogue */
                cfg.epi = 1;
                q = *base;
                if (!sw && tk__gemm_plan_apply(&q, &cfg))
                    n = tune_add(c, n, &q);
            }
        }
    for (int b = 0; tma_ok && b < N_TMA_BNS; b++) {
        const int bn = tk__gemm_tma_bns[b];
        const int64_t tiles = ((o.M + 127) / 128) * ((o.N + bn - 1) / bn);
        for (int persist = 0; persist <= (tiles > base->sms ? 2 : 0); persist++)
            for (int epi = 0; epi <= 1; epi++) {
                cfg = (gemm_cfg){
                    .tma = 1, .bn = bn, .bm = 128, .persist = persist, .epi = epi, .splits = 1};
                q = *base;
                if (tk__gemm_plan_apply(&q, &cfg))
                    n = tune_add(c, n, &q);
            }
        /* clusters of two sharing A (a block per tile) */
        if (tiles >= 2 && tiles <= 2 * base->sms) {
            cfg = (gemm_cfg){
                .tma = 1, .bn = bn, .bm = 128, .epi = base->c16, .cluster = 2, .splits = 1};
            q = *base;
            if (tk__gemm_plan_apply(&q, &cfg))
                n = tune_add(c, n, &q);
        }
    }
    /* K-major B: widths between 128 and 256 in steps of 16, the narrowest
     * of each round count */
    for (int bn = 144, last = 0; tma_ok && o.b_kmajor && bn < 256; bn += 16) {
        const int64_t rounds = tile_rounds(o.M, o.N, 128, bn, base->sms);
        if (rounds == last || bn == 192)
            continue;
        last = (int)rounds;
        /* a block per tile and, past a wave, the persistent grid; each with
         * the staged and the TMA-store epilogue */
        for (int persist = 0; persist <= (rounds > 1 ? 1 : 0); persist++)
            for (int epi = 0; epi <= 1; epi++) {
                cfg = (gemm_cfg){
                    .tma = 1, .bn = bn, .bm = 128, .persist = persist, .epi = epi, .splits = 1};
                q = *base;
                if (tk__gemm_plan_apply(&q, &cfg))
                    n = tune_add(c, n, &q);
            }
    }
    /* 64-row tiles: widths in steps of 16 (K-major B) or 64, the
     * narrowest of each round count */
    for (int bn = o.b_kmajor ? 32 : 64, last = 0; tma_ok && bn <= 256; bn += o.b_kmajor ? 16 : 64) {
        const int64_t rounds = tile_rounds(o.M, o.N, 64, bn, base->sms);
        if (rounds == last)
            continue;
        last = (int)rounds;
        cfg = (gemm_cfg){.tma = 1, .bn = bn, .bm = 64, .splits = 1};
        q = *base;
        if (tk__gemm_plan_apply(&q, &cfg))
            n = tune_add(c, n, &q);
    }
    for (size_t i = 0; tma_ok && t128 < base->sms && i < sizeof tma_splits / sizeof *tma_splits;
         i++) {
        for (int bm = 64; bm <= 128; bm += 64)
            for (int j = 0; j < N_TMA_BNS; j++) {
                const int bn = tk__gemm_tma_bns[j];
                cfg = (gemm_cfg){.tma = 1, .bn = bn, .bm = bm, .splits = tma_splits[i]};
                q = *base;
                if (tk__gemm_plan_apply(&q, &cfg) && q.splits > 1 &&
                    (q.splits <= 8 ||
                     ((q.M + bm - 1) / bm) * ((q.N + bn - 1) / bn) * q.splits <= base->sms)) {
                    n = tune_add(c, n, &q);
                    n = tune_add_cl(c, n, base, &cfg);
                }
            }
        /* split on swapped 128-row tiles (the tokens on their width), one
         * wave at most */
        for (int j = 0; j < N_TMA_BNS; j++) {
            const int bn = tk__gemm_tma_bns[j];
            cfg = (gemm_cfg){.tma = 1, .bn = bn, .bm = 128, .swap = 1, .splits = tma_splits[i]};
            q = *base;
            if (tk__gemm_plan_apply(&q, &cfg) && q.splits > 1 && q.wg_bn <= q.N &&
                ((q.M + 127) / 128) * ((q.N + bn - 1) / bn) * q.splits <= base->sms) {
                n = tune_add(c, n, &q);
                n = tune_add_cl(c, n, base, &cfg);
            }
        }
    }
    for (int t = tma_ok ? 1 : 0; t < N_TILES; t++) {
        if (tma_ok && t128 >= 2 * base->sms)
            break;
        for (size_t i = 0; i < sizeof mma_splits / sizeof *mma_splits; i++) {
            cfg = (gemm_cfg){.tma = 0, .tile = t, .splits = mma_splits[i]};
            q = *base;
            if (tk__gemm_plan_apply(&q, &cfg) && (mma_splits[i] == 1 || q.splits > 1))
                n = tune_add(c, n, &q);
        }
    }
    return n;
}

/* The tuner's candidate plans for base, at most max of them, the count
 * returned (-1: no memory): what test_gemm_plan holds to the device's
 * limits (shared memory, stages) without a device. */
int tk__gemm_tune_candidate_plans(const gemm_plan *base, gemm_plan *out, int max)
{
    tune_cand *c = calloc(TUNE_MAX_CANDS, sizeof *c);
    if (c == NULL)
        return -1;
    const int n = tune_candidates(base, c);
    const int m = n < max ? n : max;
    for (int i = 0; i < m; i++)
        out[i] = c[i].p;
    free(c);
    return m;
}

/* The kernels of plan p (its own, and the reduce kernel where it splits
 * into the workspace, else *rk untouched): compiled or found; from any
 * thread. */
tk_status tk__gemm_plan_kernels(tk_context *ctx, const gemm_plan *p, gemm_desc *d, gemm_desc *rd,
                                tk_kernel **k, tk_kernel **rk)
{
    tk__gemm_build_desc(p, tk_context_policy(ctx), d);
    tk_status st = tk__op_kernel(ctx, &d->desc, k, NULL, NULL);
    if (st == TK_OK && tk__gemm_plan_reduces(p)) {
        tk__gemm_build_reduce_desc(p, rd);
        st = tk__op_kernel(ctx, &rd->desc, rk, NULL, NULL);
    }
    return st;
}

typedef struct tune_jobs {
    tk_context *ctx;
    void (*fn)(tk_context *, void *, int);
    void *user;
    int n, next;
    pthread_mutex_t mu;
} tune_jobs;

static void *tune_jobs_worker(void *arg)
{
    tune_jobs *j = arg;
    for (;;) {
        pthread_mutex_lock(&j->mu);
        const int i = j->next++;
        pthread_mutex_unlock(&j->mu);
        if (i >= j->n)
            return NULL;
        j->fn(j->ctx, j->user, i);
    }
}

static int tune_jobs_count(void)
{
    const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    return cpus < TUNE_JOBS_MIN ? TUNE_JOBS_MIN : cpus > TUNE_JOBS_MAX ? TUNE_JOBS_MAX : (int)cpus;
}

void tk__gemm_parallel(tk_context *ctx, int n, void (*fn)(tk_context *, void *, int), void *user)
{
    tune_jobs j = {.ctx = ctx, .fn = fn, .user = user, .n = n, .next = 0};
    pthread_t th[TUNE_JOBS_MAX];
    const int jobs = tune_jobs_count();
    int started = 0;
    pthread_mutex_init(&j.mu, NULL);
    for (int i = 0; i < jobs && i < n; i++)
        if (pthread_create(&th[i], NULL, tune_jobs_worker, &j) == 0)
            started++;
    if (started == 0)
        tune_jobs_worker(&j);
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    pthread_mutex_destroy(&j.mu);
}

/* Kernels of c, compiled or found. */
static tk_status tune_kernels(tk_context *ctx, tune_cand *c)
{
    return tk__gemm_plan_kernels(ctx, &c->p, &c->d, &c->rd, &c->k, &c->rk);
}

static void tune_compile_one(tk_context *ctx, void *user, int i)
{
    tune_cand *c = user;
    c[i].st = tune_kernels(ctx, &c[i]);
}

/* Compiles (or finds) every candidate's kernels, tune_jobs_count() at a
 * time. */
static void tune_compile(tk_context *ctx, tune_cand *c, int n)
{
    tk__gemm_parallel(ctx, n, tune_compile_one, c);
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
        st = tk__gemm_exec(r->ctx, &r->c->p, r->c->k, r->c->rk, o->a[j], o->b[j], o->out[j],
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
    if (tk__gemm_exec(ctx, &c->p, c->k, c->rk, a, b, out, stream) != TK_OK ||
        tk_stream_sync(ctx, stream) != TK_OK || tk_mem_download(ctx, host, out, bytes) != TK_OK)
        return 0;
    return tune_same(&c->p, host, want, bytes / (c->p.out_f16 ? 2 : 4));
}

/* The second timing point (mid: the heuristics' plan of the class's middle
 * M, on the same operands, which are sized for the class's largest): the
 * heuristics' own time there, then each timed candidate's configuration
 * imposed on mid (us2 < 0 where it does not fit), and each candidate's
 * score made the geometric mean of its two ratios to the heuristics. */
static tk_status tune_mid(tk_context *ctx, const gemm_plan *mid, tune_cand *c, int n,
                          const tune_ops *ops, void *stream, double *us2, double *score,
                          double *heur_us2)
{
    tune_cand *m = calloc(1, sizeof *m);
    tk_status st;
    if (m == NULL)
        return tk__fail(ctx, TK_OUT_OF_MEMORY, "%s: tuning: out of memory", mid->op);
    m->p = *mid;
    st = tune_kernels(ctx, m);
    if (st == TK_OK)
        st = tune_time(ctx, m, ops, stream, heur_us2);
    for (int i = 0; st == TK_OK && i < n; i++) {
        gemm_cfg cfg;
        us2[i] = -1.0;
        if (c[i].st != TK_OK)
            continue;
        tk__gemm_cfg_of_plan(&c[i].p, &cfg);
        memset(m, 0, sizeof *m);
        m->p = *mid;
        if (!tk__gemm_plan_apply(&m->p, &cfg) || tune_kernels(ctx, m) != TK_OK ||
            tune_time(ctx, m, ops, stream, &us2[i]) != TK_OK) {
            us2[i] = -1.0;
            score[i] = HUGE_VAL; /* not a configuration for the whole class */
            continue;
        }
        score[i] = sqrt(score[i] * (us2[i] / *heur_us2));
    }
    free(m);
    return st;
}

static tk_status tune_class(tk_context *ctx, const gemm_plan *base, const tune_ops *ops,
                            void *stream, tk_tune_report *rep, const gemm_plan *mid)
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
            c[i].slot = (int)rep->candidates + 1;
        }
        rep->candidates++;
    }
    /* Scores: time over the heuristics' at the class's largest M, and with a
     * second point (mid) the geometric mean of that and the same ratio at
     * mid. */
    double *score = calloc((size_t)n + 1, sizeof *score), *us2 = calloc((size_t)n + 1, sizeof *us2);
    double heur_us2 = 0.0;
    if (score == NULL || us2 == NULL)
        st = tk__fail(ctx, TK_OUT_OF_MEMORY, "%s: tuning: out of memory", base->op);
    for (int i = 0; st == TK_OK && i < n; i++)
        score[i] = c[i].st == TK_OK ? c[i].us / c[0].us : HUGE_VAL;
    if (st == TK_OK && mid != NULL)
        st = tune_mid(ctx, mid, c, n, ops, stream, us2, score, &heur_us2);
    for (int i = 0; st == TK_OK && i < n; i++)
        if (score[i] < HUGE_VAL && (best < 0 || score[i] < score[best]))
            best = i;
    /* A record replaces the heuristics only for a clear gain: otherwise it
     * says "heuristics" (TUNE_HEURISTICS), so that noise between near-equal
     * candidates does not pick for the class and every M of the class keeps
     * its own plan (the heuristics' configuration at the largest M is not
     * theirs at every M: the vocabulary's forward at 260-302 tokens ran
     * 0.75-0.82 of cuBLAS under the largest M's winner, 0.86-0.89 on its own
     * plan, H200). */
    int keep = st == TK_OK && best >= 0 && !(score[best] < 1.0 / TUNE_MARGIN);
    if (st == TK_OK && best < 0)
        st = tk__fail(ctx, TK_INTERNAL, "%s: tuning: no candidate ran", base->op);
    if (keep)
        best = 0;
    if (st == TK_OK && best != 0) {
        /* The winner must reproduce the heuristics' output (within the
         * reordering split-K causes), else the next best score is tried. */
        const size_t bytes = (size_t)base->M * (size_t)base->N * (base->out_f16 ? 2u : 4u);
        void *want = malloc(bytes), *host = malloc(bytes);
        int ok = want != NULL && host != NULL &&
                 tk__gemm_exec(ctx, &c[0].p, c[0].k, c[0].rk, a, b, out, stream) == TK_OK &&
                 tk_stream_sync(ctx, stream) == TK_OK &&
                 tk_mem_download(ctx, want, out, bytes) == TK_OK;
        while (ok && best != 0 &&
               !tune_check(ctx, &c[best], a, b, out, stream, want, host, bytes)) {
            tk__log(ctx, TK_LOG_WARN,
                    "%s: tuning candidate '%s' does not reproduce the heuristics' output: "
                    "dropped",
                    base->op, c[best].text);
            rep->rejected++;
            c[best].st = TK_INTERNAL;
            score[best] = HUGE_VAL;
            /* the next best score, or the heuristics */
            best = 0;
            for (int i = 1; i < n; i++)
                if (score[i] < score[best])
                    best = i;
            if (!(score[best] < 1.0 / TUNE_MARGIN))
                keep = 1, best = 0;
        }
        if (!ok)
            st =
                tk__fail(ctx, TK_OUT_OF_MEMORY, "%s: tuning: could not check the winner", base->op);
        else if (best != 0) /* leave the winner's output in out, as a call would */
            st = tk__gemm_exec(ctx, &c[best].p, c[best].k, c[best].rk, a, b, out, stream);
        free(want);
        free(host);
    }
    if (st == TK_OK) {
        const char *text = keep ? TUNE_HEURISTICS : c[best].text;
        tk__gemm_record_name(base, name);
        snprintf(rep->record, sizeof rep->record, "%s %s M<=%lld", base->op + 3, name,
                 (long long)tk__gemm_m_class_max(base->om));
        snprintf(rep->chosen, sizeof rep->chosen, "%s", text);
        snprintf(rep->heuristic, sizeof rep->heuristic, "%s", c[0].text);
        rep->chosen_us = c[best].us;
        rep->heuristic_us = c[0].us;
        rep->timed_m = base->om;
        if (mid != NULL) {
            rep->mid_m = mid->om;
            rep->heuristic_mid_us = heur_us2;
            rep->chosen_mid_us = keep ? heur_us2 : us2[best];
            for (int i = 0; i < n; i++)
                if (c[i].slot > 0)
                    rep->timed_mid_us[c[i].slot - 1] = us2[i];
        }
        /* The record; a failure to store it (read-only cache) still leaves it
         * in force for this context. */
        rep->stored = tk__gemm_record_store(ctx, base, text) == TK_OK;
    }
    free(score);
    free(us2);
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
    tk__gemm_plan_op(op, tk__gemm_m_class_max(dims[0]), dims[1], dims[2], &base);
    if ((st = tk__op_need_device(ctx, base.op)) != TK_OK)
        return st;
    if (tk__op_check_product(ctx, base.op, "M x K", base.om, base.ok, 4) != TK_OK ||
        tk__op_check_product(ctx, base.op, "K x N", base.ok, base.on, 4) != TK_OK ||
        tk__op_check_product(ctx, base.op, "M x N", base.om, base.on, 4) != TK_OK)
        return TK_OVERFLOW;
    tk__gemm_plan_packed_heuristic(ctx, op, base.om, base.on, base.ok, &base);
    if (base.amd || base.simple)
        return tk__fail(ctx, TK_UNSUPPORTED,
                        "%s: tuning needs an NVIDIA target of sm_80 or later (target %s has one "
                        "kernel configuration)",
                        base.op, tk_context_target(ctx));
    /* the operands as the op stores them: the kernel's A and B before any
     * swap (tk__gemm_plan_swap exchanges them with M and N) */
    gemm_plan o = base;
    if (o.swap)
        tk__gemm_plan_swap(&o);
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
    /* the second timing point: the class's middle M (tk_tune_report.mid_m) */
    const int64_t mid_m = tk__gemm_m_class_mid(base.om);
    gemm_plan mid;
    if (mid_m < base.om)
        tk__gemm_plan_packed_heuristic(ctx, op, mid_m, base.on, base.ok, &mid);
    st = tune_class(ctx, &base, &ops, NULL, rep, mid_m < base.om ? &mid : NULL);
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
void tk__gemm_tune_call(tk_context *ctx, gemm_plan *p, const void *d_a, const void *d_b, void *d_c,
                        void *stream)
{
    tk_tune_report rep = TK_STRUCT_INIT(tk_tune_report);
    gemm_plan base = *p;
    tune_ops ops;
    memset(&rep, 0, sizeof rep);
    memset(&ops, 0, sizeof ops);
    ops.a[0] = d_a, ops.b[0] = d_b, ops.out[0] = d_c, ops.n = 1;
    if (tune_class(ctx, &base, &ops, stream, &rep, NULL) == TK_OK) {
        tk__log(ctx, TK_LOG_INFO, "tuned %s: %s (%.1f us; heuristics %s, %.1f us)", rep.record,
                rep.chosen, rep.chosen_us, rep.heuristic, rep.heuristic_us);
        tk__gemm_plan_tuned(ctx, p);
        return;
    }
    char name[64], text[64];
    gemm_cfg c;
    tk__gemm_record_name(p, name);
    tk__gemm_cfg_of_plan(p, &c);
    tk__gemm_cfg_text(&c, text, sizeof text);
    tk__log(ctx, TK_LOG_WARN,
            "%s %s M<=%lld: tuning failed (%s); the heuristics' %s is kept for the class",
            p->op + 3, name, (long long)tk__gemm_m_class_max(p->om), tk_context_last_error(ctx),
            text);
    (void)tk__gemm_record_store(ctx, p, text);
}
