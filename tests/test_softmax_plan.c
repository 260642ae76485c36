/*
 * Softmax variant choice, offline (no GPU): tk_op_precompile on an sm_90
 * context compiles the cluster kernels for rows beyond one block's
 * registers (the backward: the fewest 256-thread blocks per row, 2 / 4 /
 * 8, then 8 larger ones, g in shared memory where the rules of
 * src/ops/softmax.c say; the forward: the fewest 512-thread blocks, 2 to
 * 8 but never 7, holding at most 8 vectors a thread (7 in 3 blocks), 4
 * per SM, most of the slice in shared memory; rows needing TK_EDGE past 6
 * such blocks, or past 4 when only their base pointers are off a vector
 * boundary: 8 blocks of 256 threads) and the two-pass kernel beyond; on sm_80 (no
 * clusters) and on AMD (hipRTC, gfx90a) the two-pass kernel serves every
 * long row, and the sources still compile. One kernel per shape; the
 * generic policy shares one kernel across a bucket of column counts.
 * Skipped (exit 77) where NVRTC is not installed; the AMD part where hipRTC
 * is not.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops_internal.h"
#include "tk_test.h"
#include "tokitai/ops.h"

static char *g_dir;

static void setup(void)
{
    g_dir = tk_test_tmpdir("softmax_plan");
}

static void teardown(void)
{
    tk_test_rmtree(g_dir);
    free(g_dir);
}

static tk_context *offline(tk_backend_kind backend, const char *target, tk_policy policy)
{
    tk_config *cfg = NULL;
    tk_context *ctx = NULL;
    char err[1024];
    tk_assert_status(tk_config_create(&cfg), TK_OK);
    tk_assert_status(tk_config_set_backend(cfg, backend), TK_OK);
    tk_assert_status(tk_config_set_cache_dir(cfg, g_dir), TK_OK);
    tk_assert_status(tk_config_set_target(cfg, target), TK_OK);
    tk_assert_status(tk_config_set_policy(cfg, policy), TK_OK);
    tk_status st = tk_context_create(cfg, &ctx, err, sizeof err);
    tk_config_destroy(cfg);
    if (st != TK_OK && backend == TK_BACKEND_HIP) {
        printf("skipped: hipRTC unavailable: %s\n", err);
        return NULL;
    }
    ck_assert_msg(st == TK_OK, "offline %s context: %s: %s", target, tk_status_str(st), err);
    return ctx;
}

/* What the cache holds for one column count (stable policy bakes it). */
typedef struct probe {
    char cols_def[40];
    const char *source; /* "softmax_f16" / "softmax_xent_f16" */
    int n;
    char entry[64];
    char options[1024];
} probe;

static int visit(void *user, const tk_cache_entry_info *info)
{
    probe *p = user;
    const char *hit = strstr(info->options, p->cols_def);
    if (hit == NULL || (hit[strlen(p->cols_def)] != ' ' && hit[strlen(p->cols_def)] != '\0') ||
        strcmp(info->source, p->source) != 0)
        return 0;
    p->n++;
    snprintf(p->entry, sizeof p->entry, "%s", info->kernel);
    snprintf(p->options, sizeof p->options, "%s", info->options);
    return 0;
}

static probe find(tk_op op, int64_t cols)
{
    tk_config *cfg = NULL;
    tk_cache *cache = NULL;
    probe p;
    memset(&p, 0, sizeof p);
    snprintf(p.cols_def, sizeof p.cols_def, "-DTK_COLS=%lld", (long long)cols);
    p.source = op == TK_OP_SOFTMAX_F16_FWD ? "softmax_f16" : "softmax_xent_f16";
    tk_assert_status(tk_config_create(&cfg), TK_OK);
    tk_assert_status(tk_config_set_cache_dir(cfg, g_dir), TK_OK);
    tk_assert_status(tk_cache_open(cfg, &cache), TK_OK);
    tk_assert_status(tk_cache_list(cache, visit, &p), TK_OK);
    tk_cache_close(cache);
    tk_config_destroy(cfg);
    return p;
}

static void precompile_one(tk_context *ctx, tk_op op, int64_t rows, int64_t cols)
{
    const int64_t dims[2] = {rows, cols};
    unsigned compiled = 0, cached = 0;
    tk_status st = tk_op_precompile(ctx, op, dims, 2, &compiled, &cached);
    ck_assert_msg(st == TK_OK, "%s %lld: %s: %s", tk_op_name(op), (long long)cols,
                  tk_status_str(st), tk_context_last_error(ctx));
    ck_assert_uint_eq(compiled + cached, 1);
}

/* kind 'r': one block (or group) per row; 'c': a cluster of `cluster`
 * blocks, the backward's g in shared memory when smem_g (512-thread blocks
 * with ITERS x registers per vector >= 20); 'l': two-pass. */
typedef struct expect {
    int64_t cols;
    char kind;
    int cluster, smem_g;
    int fwd_cluster; /* the forward's blocks per row where they differ (0: cluster); the
                      * forward's are 512 threads, 4 per SM (TK_MINB 4) */
    char fwd_kind;   /* with clusters, the forward's kind where it differs (0: kind; 'e':
                      * blocks of 256 threads, TK_SOFTMAX_EDGE256 and _EDGE_BIG) */
} expect;

static const expect sm90[] = {
    {64, 'r', 0, 0, 0, 0},
    {4096, 'r', 0, 0, 0, 0},
    {16392, 'r', 0, 0, 0, 0}, /* 512 threads x 5 vectors */
    {25949, 'r', 0, 0, 0, 0}, /* x 7 */
    {32000, 'r', 0, 0, 0, 0}, /* x 8 */
    {32768, 'r', 0, 0, 0, 0},
    {32776, 'c', 4, 0, 2, 0},
    {50304, 'c', 4, 0, 2, 0},
    {65536, 'c', 4, 0, 2, 0},
    {65544, 'c', 8, 0, 3, 0},
    {86016, 'c', 8, 0, 3, 0}, /* 3 blocks of 7 vectors a thread */
    {86024, 'c', 8, 0, 4, 0}, /* 3 would hold 8: 4 */
    {122880, 'c', 8, 0, 4, 0},
    {122888, 'c', 8, 0, 2, 0}, /* 4 blocks of over 7.5 vectors: 2 of 16 */
    {128256, 'c', 8, 0, 2, 0},
    {131072, 'c', 8, 0, 2, 0},
    {131080, 'c', 8, 1, 5, 0},
    {163840, 'c', 8, 1, 5, 0},
    {163848, 'c', 8, 1, 6, 0},
    {180000, 'c', 8, 1, 6, 0},
    {196608, 'c', 8, 1, 6, 0},
    /* past 6 blocks of 8 vectors: 5 of up to 11, 3 per SM (TK_MINB 3); 6
     * of 11 from 245761 columns; 8 of 8 in between */
    {196616, 'c', 8, 1, 5, 0},
    {225280, 'c', 8, 1, 5, 0},
    {225288, 'c', 8, 1, 0, 0},
    {245760, 'c', 8, 1, 0, 0},
    {245768, 'c', 8, 1, 6, 0},
    {256000, 'c', 8, 1, 6, 0},
    {262144, 'c', 8, 1, 6, 0},
    {262152, 'l', 0, 0, 0, 0},
    {300000, 'l', 0, 0, 0, 0},
    /* widths that are not multiples of 8: VEC 8 with TK_EDGE, laid out by
     * their cols / 8 whole vectors (the other halves one per thread) */
    {1023, 'r', 0, 0, 0, 0},
    /* the forward at TK_EDGE with 8 vectors a thread in one block: a
     * cluster of 2 (TK_SOFTMAX_EDGE8_C2); at 7 the row kernel */
    {28673, 'r', 0, 0, 0, 0},
    {30001, 'r', 0, 0, 2, 'c'},
    {32767, 'r', 0, 0, 2, 'c'},
    {32769, 'r', 0, 0, 2, 'c'},
    {50257, 'c', 4, 0, 2, 0},
    {57343, 'c', 4, 0, 2, 0}, /* the backward's 256 threads x 7 vectors */
    {57977, 'c', 4, 0, 2, 0}, /* x 8, with TK_EDGE: 512 threads x 4 */
    {131071, 'c', 8, 0, 4, 0},
    {70393, 'c', 8, 0, 3, 0},
    {100003, 'c', 8, 0, 4, 0},
    {131073, 'c', 8, 0, 4, 0},
    {151936, 'c', 8, 1, 5, 0},
    {200003, 'c', 8, 1, 0, 'e'}, /* TK_EDGE past 6 blocks of 8: 256-thread blocks */
    {225287, 'c', 8, 1, 0, 'e'},
    {225289, 'c', 8, 1, 0, 'e'},
    {262143, 'c', 8, 1, 0, 'e'},
    {262151, 'c', 8, 1, 0, 'e'},
    {262153, 'l', 0, 0, 0, 0},
};

static void check_expect(tk_op op, const expect *e, int clusters)
{
    probe p = find(op, e->cols);
    const char k0 = op == TK_OP_SOFTMAX_F16_FWD && e->fwd_kind && clusters ? e->fwd_kind : e->kind;
    const char kind = k0 == 'c' && !clusters ? 'l' : k0;
    char want[32];
    ck_assert_msg(p.n == 1, "%s %lld: %d cache entries", tk_op_name(op), (long long)e->cols, p.n);
    const size_t n = strlen(p.entry);
    /* packed rows of aligned buffers: 16-byte vectors at every width, the
     * partial ones at the row ends where rows do not start on a boundary */
    const char *vec = strstr(p.options, "-DTK_VEC=8");
    ck_assert_msg(vec != NULL && (vec[10] == ' ' || vec[10] == '\0'), "%s %lld: %s", tk_op_name(op),
                  (long long)e->cols, p.options);
    ck_assert_msg((strstr(p.options, "-DTK_EDGE") != NULL) == (e->cols % 8 != 0), "%s %lld: %s",
                  tk_op_name(op), (long long)e->cols, p.options);
    if (kind == 'e') {
        /* whole vectors over 8 blocks of 256 threads, all of a thread's
         * slice in shared memory up to 10 vectors, 4 in registers beyond;
         * beyond 10 (every row here), on a target of clusters up to 16 (a
         * precompile for sm_90: no device tells how many multiprocessors),
         * the fewest blocks of 256 threads holding at most 8 (14 or 15:
         * 16), 2 of them in registers, 8 blocks per SM */
        const int64_t nvec = e->cols / 8;
        int64_t blocks = 8, iters = ((nvec + 7) / 8 + 255) / 256, siters;
        const int big = iters > 10;
        if (big) {
            blocks = (nvec + 2047) / 2048;
            blocks = blocks == 14 || blocks == 15 ? 16 : blocks;
            iters = ((nvec + blocks - 1) / blocks + 255) / 256;
            siters = iters - 2;
        } else {
            siters = iters;
        }
        ck_assert_msg(n > 8 && strcmp(p.entry + n - 8, "_cluster") == 0, "%s %lld: %s",
                      tk_op_name(op), (long long)e->cols, p.entry);
        snprintf(want, sizeof want, "-DTK_CLUSTER=%lld ", (long long)blocks);
        ck_assert_msg(strstr(p.options, want) != NULL && strstr(p.options, "-DTK_G=256 ") != NULL &&
                          (strstr(p.options, "-DTK_MINB=8") != NULL) == big &&
                          (strstr(p.options, "-DTK_MINB") != NULL) == big &&
                          strstr(p.options, "-DTK_STORE_E") != NULL,
                      "%s %lld: want %s in %s", tk_op_name(op), (long long)e->cols, want,
                      p.options);
        snprintf(want, sizeof want, "-DTK_ITERS=%lld ", (long long)iters);
        ck_assert_msg(strstr(p.options, want) != NULL, "%s %lld: want %s in %s", tk_op_name(op),
                      (long long)e->cols, want, p.options);
        snprintf(want, sizeof want, "-DTK_SITERS=%lld ", (long long)siters);
        ck_assert_msg(strstr(p.options, want) != NULL, "%s %lld: want %s in %s", tk_op_name(op),
                      (long long)e->cols, want, p.options);
    } else if (kind == 'l') {
        ck_assert_msg(n > 5 && strcmp(p.entry + n - 5, "_long") == 0, "%s %lld: %s", tk_op_name(op),
                      (long long)e->cols, p.entry);
        ck_assert_ptr_nonnull(strstr(p.options, "-DTK_LONG"));
    } else if (kind == 'r') {
        ck_assert_msg(strstr(p.entry, "_long") == NULL && strstr(p.entry, "_cluster") == NULL,
                      "%s %lld: %s", tk_op_name(op), (long long)e->cols, p.entry);
        ck_assert_ptr_null(strstr(p.options, "-DTK_CLUSTER"));
        /* the forward's blocks of 512 threads with at most 7 vectors a
         * thread: 3 per SM (sm_90 and later) */
        const char *it = strstr(p.options, "-DTK_ITERS=");
        const int minb3 = clusters && op == TK_OP_SOFTMAX_F16_FWD &&
                          strstr(p.options, "-DTK_G=512 ") != NULL && it != NULL &&
                          atoi(it + 11) <= 7;
        ck_assert_msg((strstr(p.options, "-DTK_MINB=3") != NULL) == minb3, "%s %lld: %s",
                      tk_op_name(op), (long long)e->cols, p.options);
    } else {
        ck_assert_msg(n > 8 && strcmp(p.entry + n - 8, "_cluster") == 0, "%s %lld: %s",
                      tk_op_name(op), (long long)e->cols, p.entry);
        snprintf(want, sizeof want, "-DTK_CLUSTER=%d ",
                 op == TK_OP_SOFTMAX_F16_FWD && e->fwd_cluster ? e->fwd_cluster : e->cluster);
        ck_assert_msg(strstr(p.options, want) != NULL, "%s %lld: want %s in %s", tk_op_name(op),
                      (long long)e->cols, want, p.options);
        /* only the backward has a g to keep in shared memory; the forward
         * keeps its slice there and exp(x - max) in place of x */
        const int smem_g = op == TK_OP_SOFTMAX_XENT_F16_BWD && e->smem_g;
        const int fwd_smem = op == TK_OP_SOFTMAX_F16_FWD;
        ck_assert_msg((strstr(p.options, "-DTK_SMEM_G") != NULL) == smem_g, "%s %lld: %s",
                      tk_op_name(op), (long long)e->cols, p.options);
        /* the backward's blocks of 256 threads (rows of 1025-2048 vectors
         * a block); with TK_EDGE, 512 where the 256 would hold 8 vectors
         * each (TK_SOFTMAX_BWD512) */
        const int64_t per = e->cluster > 0 ? (e->cols / 8 + e->cluster - 1) / e->cluster
                                           : 0; /* 0: rows only the forward runs on a cluster */
        if (op == TK_OP_SOFTMAX_XENT_F16_BWD && per > 1024 && per <= 2048) {
            const int64_t g = (per + 255) / 256 == 8 && e->cols % 8 != 0 ? 512 : 256;
            snprintf(want, sizeof want, "-DTK_ITERS=%lld ", (long long)((per + g - 1) / g));
            ck_assert_msg(strstr(p.options, want) != NULL &&
                              strstr(p.options, g == 512 ? "-DTK_G=512 " : "-DTK_G=256 ") != NULL,
                          "%s %lld: want %s, %lld threads in %s", tk_op_name(op),
                          (long long)e->cols, want, (long long)g, p.options);
        }
        /* past 6 blocks of 8 vectors a thread (24576 vectors a row), in 5
         * or 6 blocks: up to 11 vectors a thread, 3 of them in registers, 3
         * blocks per SM */
        const int wide = e->cols / 8 > 6 * 512 * 8 && e->fwd_cluster != 0;
        /* packed rows past 4 blocks of 7.5 vectors: 2 blocks of 16, 4 in
         * registers, the compiler's registers (TK_SOFTMAX_FWD2_16) */
        const int fwd2_16 = e->cols / 8 > 2 * 512 * 15 && e->fwd_cluster == 2;
        if (fwd_smem)
            ck_assert_msg(
                strstr(p.options, "-DTK_G=512 ") != NULL &&
                    (fwd2_16 ? strstr(p.options, "-DTK_MINB") == NULL
                             : strstr(p.options, wide ? "-DTK_MINB=3" : "-DTK_MINB=4") != NULL),
                "%s %lld: %s", tk_op_name(op), (long long)e->cols, p.options);
        ck_assert_msg((strstr(p.options, "-DTK_SITERS=") != NULL) == fwd_smem &&
                          (strstr(p.options, "-DTK_STORE_E") != NULL) == fwd_smem,
                      "%s %lld: %s", tk_op_name(op), (long long)e->cols, p.options);
        /* the forward's vectors a thread: a block's slice over 512
         * threads, at most 8 (7 in 3 blocks, 11 past 6 blocks of 8), all
         * but 2 (3 past 6 blocks of 8) in shared memory */
        if (fwd_smem) {
            const int blocks = e->fwd_cluster ? e->fwd_cluster : e->cluster;
            const int64_t iters = ((e->cols / 8 + blocks - 1) / blocks + 511) / 512;
            snprintf(want, sizeof want, "-DTK_ITERS=%lld ", (long long)iters);
            ck_assert_msg(iters <= (fwd2_16       ? 16
                                    : wide        ? 11
                                    : blocks == 3 ? 7
                                                  : 8) &&
                              strstr(p.options, want) != NULL,
                          "%s %lld: want %s in %s", tk_op_name(op), (long long)e->cols, want,
                          p.options);
            snprintf(want, sizeof want, "-DTK_SITERS=%lld ",
                     (long long)(iters - (fwd2_16 ? 4
                                          : wide  ? 3
                                                  : 2)));
            ck_assert_msg(strstr(p.options, want) != NULL, "%s %lld: want %s in %s",
                          tk_op_name(op), (long long)e->cols, want, p.options);
        }
    }
}

static void run_target(tk_backend_kind backend, const char *target, int clusters)
{
    tk_context *ctx = offline(backend, target, TK_POLICY_STABLE);
    if (ctx == NULL)
        return;
    for (int op = TK_OP_SOFTMAX_F16_FWD; op <= TK_OP_SOFTMAX_XENT_F16_BWD; op++)
        for (size_t i = 0; i < sizeof sm90 / sizeof sm90[0]; i++) {
            /* rows never change the variant */
            precompile_one(ctx, (tk_op)op, 3, sm90[i].cols);
            precompile_one(ctx, (tk_op)op, 100000, sm90[i].cols);
            check_expect((tk_op)op, &sm90[i], clusters);
        }
    tk_context_destroy(ctx);
}

START_TEST(test_sm90_clusters)
{
    run_target(TK_BACKEND_CUDA, "sm_90", 1);
}
END_TEST

START_TEST(test_sm80_two_pass)
{
    run_target(TK_BACKEND_CUDA, "sm_80", 0);
}
END_TEST

START_TEST(test_gfx90a_two_pass)
{
    run_target(TK_BACKEND_HIP, "gfx90a", 0);
}
END_TEST

/* Generic: 50304 and 65536 columns (2 blocks of ITERS 7 and 8, rounded up
 * to 8) share one kernel; 65544 (4 blocks) has its own. */
START_TEST(test_generic_bucket)
{
    tk_context *ctx = offline(TK_BACKEND_CUDA, "sm_90", TK_POLICY_GENERIC);
    const int64_t a[2] = {7, 50304}, b[2] = {9, 65536}, c[2] = {9, 65544};
    for (int op = TK_OP_SOFTMAX_F16_FWD; op <= TK_OP_SOFTMAX_XENT_F16_BWD; op++) {
        unsigned compiled = 0, cached = 0;
        tk_assert_status(tk_op_precompile(ctx, (tk_op)op, a, 2, &compiled, &cached), TK_OK);
        ck_assert_uint_eq(compiled, 1);
        compiled = cached = 0;
        tk_assert_status(tk_op_precompile(ctx, (tk_op)op, b, 2, &compiled, &cached), TK_OK);
        ck_assert_uint_eq(compiled, 0);
        ck_assert_uint_eq(cached, 1);
        compiled = cached = 0;
        tk_assert_status(tk_op_precompile(ctx, (tk_op)op, c, 2, &compiled, &cached), TK_OK);
        ck_assert_uint_eq(compiled, 1);
    }
    tk_context_destroy(ctx);
}
END_TEST

/* The forward's plan by why rows need TK_EDGE (tk__softmax_plan_text, no
 * compiler): base pointers off a vector boundary, width and leading
 * dimensions multiples of 8 (every row with the same partial vectors) take
 * 8 blocks of 256 threads past 4 blocks of 8 vectors a thread; a width or
 * leading dimension not a multiple of 8 only past 6 such blocks
 * (TK_SOFTMAX_EDGE256); aligned rows never. The backward's plan does not
 * depend on it. */
static void plan_text(tk_op op, tk_policy policy, int64_t cols, int64_t ld, unsigned off,
                      int clusters, char *buf, size_t size)
{
    const int64_t lds[3] = {ld, ld, ld};
    const unsigned offs[3] = {off, off, off};
    tk__softmax_plan_text(op, policy, 64, cols, lds, offs, op == TK_OP_SOFTMAX_F16_FWD ? 2 : 3,
                          clusters, buf, size);
}

static int has_def(const char *text, const char *def)
{
    const char *hit = text;
    const size_t n = strlen(def);
    while ((hit = strstr(hit, def)) != NULL) {
        if ((hit == text || hit[-1] == ' ') && (hit[n] == ' ' || hit[n] == '\0'))
            return 1;
        hit += n;
    }
    return 0;
}

static void expect_edge256(int64_t cols, int64_t ld, unsigned off, int want, const char *iters,
                           const char *siters)
{
    char text[512];
    plan_text(TK_OP_SOFTMAX_F16_FWD, TK_POLICY_STABLE, cols, ld, off, 1, text, sizeof text);
    ck_assert_msg(has_def(text, "TK_VEC=8") &&
                      has_def(text, "TK_EDGE") == (off % 8 != 0 || ld % 8 != 0 || cols % 8 != 0),
                  "%lld ld %lld +%u: %s", (long long)cols, (long long)ld, off, text);
    const int e256 = has_def(text, "TK_G=256") && has_def(text, "TK_CLUSTER=8");
    ck_assert_msg(e256 == want, "%lld ld %lld +%u: want %s: %s", (long long)cols, (long long)ld,
                  off, want ? "8 blocks of 256" : "the 512-thread forms", text);
    if (want)
        ck_assert_msg(has_def(text, iters) && has_def(text, siters) && !strstr(text, "TK_MINB"),
                      "%lld ld %lld +%u: want %s %s: %s", (long long)cols, (long long)ld, off,
                      iters, siters, text);
    else
        ck_assert_msg(has_def(text, "TK_G=512") || !has_def(text, "TK_CLUSTER=8"),
                      "%lld ld %lld +%u: %s", (long long)cols, (long long)ld, off, text);
}

START_TEST(test_edge_kinds)
{
    char a[512], b[512];
    /* shifted rows: past 16384 vectors (131072 columns) */
    expect_edge256(131072, 131072, 3, 0, NULL, NULL);
    expect_edge256(131080, 131080, 1, 1, "TK_ITERS=9", "TK_SITERS=9");
    expect_edge256(140000, 140000, 3, 1, "TK_ITERS=9", "TK_SITERS=9");
    expect_edge256(151936, 151936, 5, 1, "TK_ITERS=10", "TK_SITERS=10");
    expect_edge256(170000, 170000, 4, 1, "TK_ITERS=11", "TK_SITERS=7");
    expect_edge256(225280, 225280, 3, 1, "TK_ITERS=14", "TK_SITERS=10");
    expect_edge256(262144, 262144, 3, 1, "TK_ITERS=16", "TK_SITERS=12");
    expect_edge256(140000, 140008, 3, 1, "TK_ITERS=9", "TK_SITERS=9"); /* padded by 8 */
    /* varied rows (odd width or leading dimension): past 24576 vectors */
    expect_edge256(140000, 140003, 0, 0, NULL, NULL);
    expect_edge256(160000, 160003, 0, 0, NULL, NULL);
    expect_edge256(140001, 140001, 0, 0, NULL, NULL);
    expect_edge256(196609, 196609, 0, 0, NULL, NULL);
    expect_edge256(196615, 196615, 3, 0, NULL, NULL);
    expect_edge256(196617, 196617, 0, 1, "TK_ITERS=13", "TK_SITERS=9");
    expect_edge256(200000, 200003, 3, 1, "TK_ITERS=13", "TK_SITERS=9");
    expect_edge256(262143, 262143, 0, 1, "TK_ITERS=16", "TK_SITERS=12");
    /* aligned rows: the 512-thread forms */
    expect_edge256(140000, 140000, 0, 0, NULL, NULL);
    expect_edge256(140000, 140000, 8, 0, NULL, NULL);
    expect_edge256(262144, 262144, 0, 0, NULL, NULL);
    /* no clusters (sm_80): the two-pass kernel */
    plan_text(TK_OP_SOFTMAX_F16_FWD, TK_POLICY_STABLE, 140000, 140000, 3, 0, a, sizeof a);
    ck_assert_msg(has_def(a, "TK_LONG"), "%s", a);
    /* generic: ITERS rounded up to 16, 4 of them in registers (all 16 in
     * shared memory spilled) */
    plan_text(TK_OP_SOFTMAX_F16_FWD, TK_POLICY_GENERIC, 140000, 140000, 3, 1, a, sizeof a);
    ck_assert_msg(has_def(a, "TK_G=256") && has_def(a, "TK_ITERS=16") &&
                      has_def(a, "TK_SITERS=12") && !strstr(a, "TK_COLS"),
                  "%s", a);
    /* the backward: shifted and varied rows alike */
    for (int64_t cols = 131080; cols <= 262144; cols += 8192) {
        plan_text(TK_OP_SOFTMAX_XENT_F16_BWD, TK_POLICY_STABLE, cols, cols, 3, 1, a, sizeof a);
        plan_text(TK_OP_SOFTMAX_XENT_F16_BWD, TK_POLICY_STABLE, cols, cols + 8, 3, 1, b, sizeof b);
        ck_assert_str_eq(a, b);
        plan_text(TK_OP_SOFTMAX_XENT_F16_BWD, TK_POLICY_STABLE, cols, cols + 3, 0, 1, b, sizeof b);
        ck_assert_str_eq(a, b);
    }
}
END_TEST

/* clusters of up to 16 blocks (2: an sm_90 GPU of 132 multiprocessors or
 * more, or a precompile): where 8 blocks of 256 threads would hold more
 * than 10 vectors a thread at TK_EDGE, the fewest blocks of 256 threads
 * holding at most 8 (14 or 15: 16), 2 of them in registers, TK_MINB 8
 * (TK_SOFTMAX_EDGE_BIG) */
static void expect_big(int64_t cols, int64_t ld, unsigned off, const char *cluster,
                       const char *iters, const char *siters)
{
    char text[512];
    plan_text(TK_OP_SOFTMAX_F16_FWD, TK_POLICY_STABLE, cols, ld, off, 2, text, sizeof text);
    if (cluster == NULL) {
        ck_assert_msg(!has_def(text, "TK_MINB=8"), "%lld ld %lld +%u: %s", (long long)cols,
                      (long long)ld, off, text);
        return;
    }
    ck_assert_msg(has_def(text, "TK_G=256") && has_def(text, cluster) && has_def(text, iters) &&
                      has_def(text, siters) && has_def(text, "TK_MINB=8") &&
                      has_def(text, "TK_EDGE"),
                  "%lld ld %lld +%u: want %s %s %s: %s", (long long)cols, (long long)ld, off,
                  cluster, iters, siters, text);
}

START_TEST(test_edge_big)
{
    char a[512], b[512];
    /* shifted rows: 8 blocks up to 10 vectors a thread (163840 columns) */
    expect_big(140000, 140000, 3, NULL, NULL, NULL);
    expect_big(163840, 163840, 3, NULL, NULL, NULL);
    expect_big(163848, 163848, 3, "TK_CLUSTER=11", "TK_ITERS=8", "TK_SITERS=6");
    expect_big(170000, 170000, 3, "TK_CLUSTER=11", "TK_ITERS=8", "TK_SITERS=6");
    expect_big(196608, 196608, 1, "TK_CLUSTER=12", "TK_ITERS=8", "TK_SITERS=6");
    expect_big(200000, 200000, 1, "TK_CLUSTER=13", "TK_ITERS=8", "TK_SITERS=6");
    expect_big(225280, 225280, 3, "TK_CLUSTER=16", "TK_ITERS=7", "TK_SITERS=5"); /* 14: 16 */
    expect_big(262144, 262144, 3, "TK_CLUSTER=16", "TK_ITERS=8", "TK_SITERS=6");
    /* shifted rows from past one 512-thread block to where the 8 blocks
     * start (32776-131072 columns): 3-8 blocks of up to 8 vectors
     * (TK_SOFTMAX_SHIFTED256); 5 blocks of 8: 6 of 7 */
    expect_big(32768, 32768, 1, NULL, NULL, NULL);
    expect_big(32776, 32776, 1, "TK_CLUSTER=3", "TK_ITERS=6", "TK_SITERS=4");
    expect_big(65536, 65536, 3, "TK_CLUSTER=4", "TK_ITERS=8", "TK_SITERS=6");
    expect_big(70000, 70000, 1, "TK_CLUSTER=5", "TK_ITERS=7", "TK_SITERS=5");
    expect_big(80000, 80000, 1, "TK_CLUSTER=6", "TK_ITERS=7", "TK_SITERS=5");
    expect_big(131072, 131072, 4, "TK_CLUSTER=8", "TK_ITERS=8", "TK_SITERS=6");
    expect_big(50257, 50257, 0, NULL, NULL, NULL);
    expect_big(65536, 65536, 0, NULL, NULL, NULL);
    /* varied rows: from where the 8 blocks start (196616 columns) */
    expect_big(170001, 170001, 0, NULL, NULL, NULL);
    expect_big(196609, 196609, 0, NULL, NULL, NULL);
    expect_big(200003, 200003, 0, "TK_CLUSTER=13", "TK_ITERS=8", "TK_SITERS=6");
    expect_big(240001, 240011, 1, "TK_CLUSTER=16", "TK_ITERS=8", "TK_SITERS=6"); /* 15: 16 */
    /* aligned rows keep the 512-thread forms */
    expect_big(170000, 170000, 0, NULL, NULL, NULL);
    expect_big(262144, 262144, 8, NULL, NULL, NULL);
    /* portable clusters only (1): the 8 blocks; the 512-thread forms */
    plan_text(TK_OP_SOFTMAX_F16_FWD, TK_POLICY_STABLE, 170000, 170000, 3, 1, a, sizeof a);
    ck_assert_msg(has_def(a, "TK_CLUSTER=8") && has_def(a, "TK_ITERS=11"), "%s", a);
    plan_text(TK_OP_SOFTMAX_F16_FWD, TK_POLICY_STABLE, 65536, 65536, 3, 1, a, sizeof a);
    ck_assert_msg(has_def(a, "TK_CLUSTER=2") && has_def(a, "TK_G=512"), "%s", a);
    /* generic: ITERS rounded up to 8, 2 in registers, the same blocks */
    plan_text(TK_OP_SOFTMAX_F16_FWD, TK_POLICY_GENERIC, 170000, 170000, 3, 2, a, sizeof a);
    ck_assert_msg(has_def(a, "TK_CLUSTER=11") && has_def(a, "TK_ITERS=8") &&
                      has_def(a, "TK_SITERS=6") && has_def(a, "TK_MINB=8") && !strstr(a, "TK_COLS"),
                  "%s", a);
    /* the backward is left as it was */
    plan_text(TK_OP_SOFTMAX_XENT_F16_BWD, TK_POLICY_STABLE, 170000, 170000, 3, 1, a, sizeof a);
    plan_text(TK_OP_SOFTMAX_XENT_F16_BWD, TK_POLICY_STABLE, 170000, 170000, 3, 2, b, sizeof b);
    ck_assert_str_eq(a, b);
}
END_TEST

/* the forward at VEC 8 with TK_EDGE, cols baked and one less than a
 * multiple of 8, on the cluster targets: TK_EDGE_OPAQUE (the head's length
 * hidden from the compiler, TK_SOFTMAX_EDGE_OPAQUE); nowhere else */
START_TEST(test_edge_opaque)
{
    static const int64_t widths[] = {1031, 30007, 100007, 131071, 196607, 223207, 262143};
    char a[512];
    for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++) {
        const int64_t c = widths[i];
        plan_text(TK_OP_SOFTMAX_F16_FWD, TK_POLICY_STABLE, c, c, 0, 2, a, sizeof a);
        ck_assert_msg(has_def(a, "TK_EDGE_OPAQUE") && has_def(a, "TK_VEC=8"), "%lld: %s",
                      (long long)c, a);
        /* rows 1 half off too, exact policy, portable clusters */
        plan_text(TK_OP_SOFTMAX_F16_FWD, TK_POLICY_EXACT, c, c, 1, 1, a, sizeof a);
        ck_assert_msg(has_def(a, "TK_EDGE_OPAQUE"), "%lld +1: %s", (long long)c, a);
        /* 2 less, the generic policy (cols at run time), no clusters, the
         * backward: none */
        plan_text(TK_OP_SOFTMAX_F16_FWD, TK_POLICY_STABLE, c - 2, c - 2, 0, 2, a, sizeof a);
        ck_assert_msg(!has_def(a, "TK_EDGE_OPAQUE"), "%lld: %s", (long long)c - 2, a);
        plan_text(TK_OP_SOFTMAX_F16_FWD, TK_POLICY_GENERIC, c, c, 0, 2, a, sizeof a);
        ck_assert_msg(!has_def(a, "TK_EDGE_OPAQUE"), "generic %lld: %s", (long long)c, a);
        plan_text(TK_OP_SOFTMAX_F16_FWD, TK_POLICY_STABLE, c, c, 0, 0, a, sizeof a);
        ck_assert_msg(!has_def(a, "TK_EDGE_OPAQUE"), "no clusters %lld: %s", (long long)c, a);
        plan_text(TK_OP_SOFTMAX_XENT_F16_BWD, TK_POLICY_STABLE, c, c, 0, 2, a, sizeof a);
        ck_assert_msg(!has_def(a, "TK_EDGE_OPAQUE"), "bwd %lld: %s", (long long)c, a);
    }
    /* a multiple of 8 less 1 but rows at VEC 4 (pointers 8 bytes apart
     * modulo 16): not at VEC 8, none */
    {
        const int64_t lds[2] = {131071, 131071};
        const unsigned offs[2] = {0, 4};
        tk__softmax_plan_text(TK_OP_SOFTMAX_F16_FWD, TK_POLICY_STABLE, 64, 131071, lds, offs, 2, 2,
                              a, sizeof a);
        ck_assert_msg(has_def(a, "TK_VEC=4") && !has_def(a, "TK_EDGE_OPAQUE"), "%s", a);
    }
}
END_TEST

int main(void)
{
    tk_config *cfg = NULL;
    tk_context *ctx = NULL;
    char err[512];
    /* Skip when NVRTC cannot be loaded. */
    if (tk_config_create(&cfg) != TK_OK || tk_config_set_backend(cfg, TK_BACKEND_CUDA) != TK_OK ||
        tk_config_set_target(cfg, "sm_90") != TK_OK)
        return 1;
    tk_status st = tk_context_create(cfg, &ctx, err, sizeof err);
    tk_config_destroy(cfg);
    Suite *s = suite_create("softmax_plan");
    TCase *tk = tcase_create("edge");
    tcase_add_test(tk, test_edge_kinds);
    tcase_add_test(tk, test_edge_big);
    tcase_add_test(tk, test_edge_opaque);
    suite_add_tcase(s, tk);
    if (st != TK_OK) {
        /* the cases that compile kernels need NVRTC */
        printf("skipped: NVRTC unavailable (the compiled plans): %s\n", err);
        return tk_test_main(s);
    }
    tk_context_destroy(ctx);

    TCase *tc = tcase_create("plan");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_sm90_clusters);
    tcase_add_test(tc, test_sm80_two_pass);
    tcase_add_test(tc, test_gfx90a_two_pass);
    tcase_add_test(tc, test_generic_bucket);
    suite_add_tcase(s, tc);
    return tk_test_main(s);
}
