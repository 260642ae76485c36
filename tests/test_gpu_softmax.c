/* Softmax forward and softmax + cross-entropy backward on long rows, on the
 * GPU against the CPU references: column counts on each side of every
 * variant boundary (one block's registers, clusters of 2 / 4 / 8 blocks on
 * sm_90 and later, the two-pass kernel beyond), widths that are not
 * multiples of 8 and rows that do not start on a 16-byte boundary (odd
 * widths, odd leading dimensions, offset pointers: 16-byte vectors with
 * partial ones at the row ends) in each variant, an output offset from
 * the inputs (narrower vectors), padded rows, few and many rows; exact,
 * stable and generic policies with synchronous builds, and the stable
 * policy with background builds (the generic fallback first, then the
 * specialised kernel). Outputs are poisoned before each run and every
 * element (padding included) is checked; two runs give the same bits; the
 * kernel a call ran is the variant expected on the device's target.
 * Skipped without a GPU. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops_internal.h"
#include "tk_test.h"
#include "tokitai/ops.h"

#define POISON16 0xffffu /* NaN */

static uint64_t rng = 0x13198a2e03707344ull;

static uint64_t rnext(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static uint16_t rhalf(float scale)
{
    double u = (double)(rnext() >> 11) * (1.0 / 9007199254740992.0);
    uint16_t h = tk_f32_to_f16((float)((2.0 * u - 1.0) * scale));
    return (h & 0x7fffu) ? h : 0x3800u;
}

#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond))                                                                               \
            ck_abort_msg(__VA_ARGS__);                                                             \
    } while (0)

typedef struct ctx_kind {
    tk_policy policy;
    tk_build_mode mode;
    const char *name;
} ctx_kind;

static const ctx_kind kinds[] = {
    {TK_POLICY_EXACT, TK_BUILD_SYNC, "exact"},
    {TK_POLICY_STABLE, TK_BUILD_SYNC, "stable"},
    {TK_POLICY_GENERIC, TK_BUILD_SYNC, "generic"},
    {TK_POLICY_STABLE, TK_BUILD_ASYNC, "stable async"},
};

static tk_context *gpu_ctx(const ctx_kind *k)
{
    tk_config *cfg = NULL;
    tk_context *ctx;
    ck_assert_int_eq(tk_config_create(&cfg), TK_OK);
    ck_assert_int_eq(tk_config_set_policy(cfg, k->policy), TK_OK);
    ck_assert_int_eq(tk_config_set_build_mode(cfg, k->mode), TK_OK);
    ctx = tk_test_gpu_context_or_skip(cfg);
    tk_config_destroy(cfg);
    if (strcmp(tk_context_backend_name(ctx), "stub") == 0) {
        printf("skipped: only the stub backend is available\n");
        exit(77);
    }
    return ctx;
}

/* Clusters: NVIDIA sm_90 and later. */
static int has_clusters(tk_context *ctx)
{
    const char *t = tk_context_target(ctx);
    return strcmp(tk_context_backend_name(ctx), "cuda") == 0 && strncmp(t, "sm_", 3) == 0 &&
           atoi(t + 3) >= 90;
}

static void *dalloc(tk_context *ctx, size_t bytes)
{
    void *p = NULL;
    tk_assert_status(tk_mem_alloc(ctx, bytes, &p), TK_OK);
    return p;
}

static void down(tk_context *ctx, void *h, const void *d, size_t bytes)
{
    tk_assert_status(tk_stream_sync(ctx, NULL), TK_OK);
    tk_assert_status(tk_mem_download(ctx, h, d, bytes), TK_OK);
}

/* kind: the variant on a target with clusters: 'r' one block (or group) per
 * row in registers, 'c' a cluster per row, 'l' the two-pass kernel. Without
 * clusters every 'c' is an 'l'; fwd_kind, where set, is the forward's on a
 * target with clusters. */
typedef struct sm_case {
    int64_t rows, cols, ld; /* ld 0: packed */
    int offset;             /* halves added to every pointer */
    char kind;
    int out_off; /* halves added to the output pointer alone (narrows the vector) */
    char fwd_kind; /* with clusters, the forward's variant where it differs (0: kind) */
} sm_case;

static const sm_case cases[] = {
    /* around one block's registers: 32768 at VEC 8, 16384 at VEC 1; then
     * clusters of 256-thread blocks (2048 vectors each at VEC 8, 8192 at
     * VEC 1), past 8 of those 8 larger blocks */
    {2, 32768, 0, 0, 'r', 0, 0},
    {3, 32776, 0, 0, 'c', 0, 0},   /* VEC 8, 4 blocks */
    {3, 32767, 0, 0, 'r', 0, 'c'}, /* odd: 4095 whole vectors, one block (forward: 2) */
    {5, 32769, 0, 0, 'r', 0, 'c'},
    {3, 32775, 0, 0, 'r', 0, 'c'}, /* 4096 whole vectors + 7 halves */
    {3, 32777, 0, 0, 'c', 0, 0},   /* 4097 + 1: 4 blocks */
    {2, 16384, 0, 1, 'r', 0, 0},   /* offset */
    /* cluster sizes */
    {2, 50304, 0, 0, 'c', 0, 0},
    {257, 50304, 0, 0, 'c', 0, 0}, /* many rows */
    {2, 65536, 0, 0, 'c', 0, 0},   /* 4 blocks, full */
    {2, 65544, 0, 0, 'c', 0, 0},   /* 8 blocks */
    {3, 128256, 0, 0, 'c', 0, 0},
    {40, 128256, 0, 0, 'c', 0, 0},
    {2, 131072, 0, 0, 'c', 0, 0}, /* 8 blocks of 256 threads, full (forward: 2 of 16) */
    {3, 124000, 0, 0, 'c', 0, 0},
    {2, 131080, 0, 0, 'c', 0, 0}, /* 8 larger blocks */
    {3, 180000, 0, 0, 'c', 0, 0}, /* 48 KiB of shared memory per block (both ops) */
    /* the forward's blocks per row that are not powers of two: 3 (at most
     * 7 vectors a thread), 5, 6; past 6 of 8 vectors, 5 of up to 11
     * (TK_SOFTMAX_WIDE), 8 of 8, packed rows 6 of 11 from 245761 */
    {3, 86016, 0, 0, 'c', 0, 0},
    {2, 86023, 0, 1, 'c', 0, 0},
    {3, 163847, 0, 0, 'c', 0, 0},
    {2, 196609, 0, 3, 'c', 0, 0},
    {3, 210000, 0, 0, 'c', 0, 0},
    {2, 225280, 0, 0, 'c', 0, 0}, /* 5 blocks of 11 vectors, full */
    {3, 225287, 0, 0, 'c', 0, 0}, /* the same, 7 halves one per thread */
    {2, 225288, 0, 0, 'c', 0, 0}, /* 8 blocks */
    {2, 245768, 0, 0, 'c', 0, 0}, /* 6 blocks of 11 */
    {2, 256000, 0, 0, 'c', 0, 0},
    {33, 256000, 0, 0, 'c', 0, 0},
    {1, 262144, 0, 0, 'c', 0, 0}, /* 6 blocks of 11 */
    /* beyond the clusters */
    {2, 262152, 0, 0, 'l', 0, 0},
    {2, 300000, 0, 0, 'l', 0, 0},
    /* odd widths (rows start anywhere in a 16-byte vector), each variant */
    {9, 3, 0, 0, 'r', 0, 0},
    {7, 1023, 0, 0, 'r', 0, 0},
    {5, 20001, 0, 0, 'r', 0, 0}, /* one block of 512 per row */
    /* the forward at 8 vectors a thread with TK_EDGE: a cluster of 2
     * (TK_SOFTMAX_EDGE8_C2), odd widths and offset rows */
    {4, 30001, 0, 0, 'r', 0, 'c'},
    {3, 32000, 0, 3, 'r', 0, 'c'},
    {3, 28673, 0, 0, 'r', 0, 0}, /* 7 vectors: the row kernel */
    /* widths one less than a multiple of 8: the head's length hidden from
     * the compiler (TK_SOFTMAX_EDGE_OPAQUE), a cluster of 2, 6 blocks of
     * 512, 16 of 256 */
    {4, 30007, 0, 0, 'r', 0, 'c'},
    {2, 196607, 0, 1, 'c', 0, 0},
    {2, 262143, 0, 0, 'c', 0, 0},
    {9, 50257, 0, 0, 'c', 0, 0},
    /* the backward where 256 threads would hold 8 vectors each: 512 of 4
     * (TK_SOFTMAX_BWD512; 4 and 8 blocks, with TK_EDGE) */
    {3, 57977, 0, 1, 'c', 0, 0},
    {2, 131071, 0, 0, 'c', 0, 0},
    {3, 100003, 0, 0, 'c', 0, 0},
    {2, 131073, 0, 0, 'c', 0, 0},
    {3, 151937, 0, 0, 'c', 0, 0},
    /* the forward at TK_EDGE past 4 blocks of 8 vectors: 8 blocks of 256
     * threads (TK_SOFTMAX_EDGE256), all of the slice in shared memory up
     * to 10 vectors a thread, 4 in registers beyond */
    {2, 131081, 0, 0, 'c', 0, 0},
    {3, 140000, 0, 3, 'c', 0, 0},
    {2, 240001, 240011, 1, 'c', 0, 0},
    /* ... past 10 vectors a thread there, on GPUs of 132 multiprocessors
     * or more: 9-16 blocks of 256 threads, 8 vectors a thread at most
     * (TK_SOFTMAX_EDGE_BIG: 11, 16 of 7, 13) */
    {3, 170000, 0, 3, 'c', 0, 0},
    {2, 225280, 0, 1, 'c', 0, 0},
    {2, 200003, 0, 0, 'c', 0, 0},
    {8, 262143, 0, 0, 'c', 0, 0},
    {3, 262151, 0, 0, 'c', 0, 0}, /* 32768 whole vectors, + 7 */
    {2, 262153, 0, 0, 'l', 0, 0},
    /* aligned widths, unaligned rows: offset pointers, odd leading
     * dimensions */
    {6, 4096, 0, 3, 'r', 0, 0},
    {5, 4096, 4099, 0, 'r', 0, 0},
    {3, 50304, 50305, 0, 'c', 0, 0},
    {2, 50304, 0, 4, 'c', 0, 0},
    {2, 50304, 0, 2, 'c', 0, 0},
    /* the forward's shifted rows at 32776-131072 columns: 3-8 blocks of
     * 256 threads (TK_SOFTMAX_SHIFTED256) */
    {3, 32776, 0, 1, 'c', 0, 0},
    {2, 100000, 0, 3, 'c', 0, 0},
    {2, 151936, 0, 5, 'c', 0, 0},
    {4, 50304, 50320, 0, 'c', 0, 0}, /* padded, aligned */
    {3, 70000, 70008, 1, 'c', 0, 0},
    {2, 300001, 300011, 3, 'l', 0, 0},
    /* the output offset from the inputs: no common vector boundary, 2-byte
     * or 4-byte vectors */
    {3, 50257, 0, 0, 'c', 1, 0},
    {4, 4096, 0, 0, 'r', 2, 0},
    {2, 300000, 0, 1, 'l', 1, 0},
};

static void expect_kind(tk_context *ctx, const sm_case *c, int xent)
{
    const tk__op_trace *tr = tk__op_trace_get();
    tk_kernel_info info = TK_STRUCT_INIT(tk_kernel_info);
    const char k0 = !xent && c->fwd_kind && has_clusters(ctx) ? c->fwd_kind : c->kind;
    const char want = k0 == 'c' && !has_clusters(ctx) ? 'l' : k0;
    const char *suffix = want == 'c' ? "_cluster" : want == 'l' ? "_long" : NULL;
    ck_assert_ptr_nonnull(tr->first);
    tk_assert_status(tk_kernel_get_info(tr->first, &info), TK_OK);
    const size_t n = strlen(info.entry);
    const int is_cluster = n > 8 && strcmp(info.entry + n - 8, "_cluster") == 0;
    const int is_long = n > 5 && strcmp(info.entry + n - 5, "_long") == 0;
    if (suffix == NULL)
        ck_assert_msg(!is_cluster && !is_long, "%s %lldx%lld: ran %s, want the register kernel",
                      xent ? "xent" : "softmax", (long long)c->rows, (long long)c->cols,
                      info.entry);
    else
        ck_assert_msg(strcmp(info.entry + n - strlen(suffix), suffix) == 0,
                      "%s %lldx%lld: ran %s, want *%s", xent ? "xent" : "softmax",
                      (long long)c->rows, (long long)c->cols, info.entry, suffix);
}

static void run_case(tk_context *ctx, const sm_case *c, int xent, int async)
{
    const int64_t rows = c->rows, cols = c->cols, ld = c->ld ? c->ld : cols;
    const int oo = c->offset + c->out_off; /* the output's offset */
    const size_t n = (size_t)(rows * ld + oo), bytes = n * 2;
    const size_t packed = (size_t)(rows * cols);
    uint16_t *x = malloc(bytes), *g = malloc(bytes), *got = malloc(bytes), *got2 = malloc(bytes);
    uint16_t *xp = malloc(packed * 2), *gp = malloc(packed * 2), *want = malloc(packed * 2);
    uint16_t *dx = dalloc(ctx, bytes), *dg = dalloc(ctx, bytes), *dy = dalloc(ctx, bytes);
    ck_assert(x && g && got && got2 && xp && gp && want);

    for (size_t i = 0; i < n; i++) {
        x[i] = rhalf(8.0f);
        g[i] = rhalf(1.0f);
    }
    if (xent) {
        /* s: a real softmax output, packed then spread to ld */
        for (int64_t r = 0; r < rows; r++)
            memcpy(xp + r * cols, x + c->offset + r * ld, (size_t)cols * 2);
        tk_assert_status(tk_ref_softmax_f16_fwd(rows, cols, xp, xp), TK_OK);
        for (int64_t r = 0; r < rows; r++)
            memcpy(x + c->offset + r * ld, xp + r * cols, (size_t)cols * 2);
    }
    for (int64_t r = 0; r < rows; r++) {
        memcpy(xp + r * cols, x + c->offset + r * ld, (size_t)cols * 2);
        memcpy(gp + r * cols, g + c->offset + r * ld, (size_t)cols * 2);
    }
    if (xent)
        tk_assert_status(tk_ref_softmax_xent_f16_bwd(rows, cols, xp, gp, want), TK_OK);
    else
        tk_assert_status(tk_ref_softmax_f16_fwd(rows, cols, xp, want), TK_OK);
    tk_assert_status(tk_mem_upload(ctx, dx, x, bytes), TK_OK);
    tk_assert_status(tk_mem_upload(ctx, dg, g, bytes), TK_OK);

    /* async: the first run may be the generic fallback, the second (after
     * the background build) the specialised kernel; sync: both the same
     * kernel, so the same bits. */
    for (int run = 0; run < 2; run++) {
        uint16_t *dst = run == 0 ? got : got2;
        if (async && run == 1)
            tk_assert_status(tk_context_wait_builds(ctx, -1), TK_OK);
        tk_assert_status(tk_mem_set(ctx, dy, 0xff, bytes), TK_OK);
        tk__op_trace_begin();
        if (!xent)
            tk_assert_status(
                tk_softmax_f16_fwd(ctx, rows, cols, dx + c->offset, c->ld, dy + oo, c->ld, NULL),
                TK_OK);
        else
            tk_assert_status(tk_softmax_xent_f16_bwd(ctx, rows, cols, dx + c->offset, c->ld,
                                                     dg + c->offset, c->ld, dy + oo, c->ld, NULL),
                             TK_OK);
        expect_kind(ctx, c, xent);
        down(ctx, dst, dy, bytes);
        for (int i = 0; i < oo; i++)
            ck_assert_msg(dst[i] == POISON16, "%lldx%lld: element before the output written",
                          (long long)rows, (long long)cols);
        for (int64_t r = 0; r < rows; r++) {
            const uint16_t *gr = dst + oo + r * ld;
            double sum = 0.0;
            for (int64_t k = 0; k < cols; k++) {
                const double gv = tk_f16_to_f32(gr[k]), wv = tk_f16_to_f32(want[r * cols + k]);
                EXPECT(fabs(gv - wv) <= 1e-3 + 1e-2 * fabs(wv),
                       "%s %lldx%lld run %d: [%lld,%lld] got %.8g (0x%04x), want %.8g (0x%04x)",
                       xent ? "xent" : "softmax", (long long)rows, (long long)cols, run,
                       (long long)r, (long long)k, gv, gr[k], wv, want[r * cols + k]);
                sum += gv;
            }
            for (int64_t k = cols; k < ld && (r + 1 < rows || oo + r * ld + k < (int64_t)n); k++)
                EXPECT(gr[k] == POISON16, "%lldx%lld ld %lld: padding [%lld,%lld] written",
                       (long long)rows, (long long)cols, (long long)ld, (long long)r, (long long)k);
            if (!xent)
                EXPECT(fabs(sum - 1.0) < 1e-2, "%lldx%lld: row %lld sums to %g", (long long)rows,
                       (long long)cols, (long long)r, sum);
        }
    }
    if (!async)
        ck_assert_msg(memcmp(got, got2, bytes) == 0, "%s %lldx%lld: two runs differ",
                      xent ? "xent" : "softmax", (long long)rows, (long long)cols);
    tk_mem_free(ctx, dx);
    tk_mem_free(ctx, dg);
    tk_mem_free(ctx, dy);
    free(x);
    free(g);
    free(got);
    free(got2);
    free(xp);
    free(gp);
    free(want);
}

START_TEST(test_softmax_fwd_long_rows)
{
    tk_context *ctx = gpu_ctx(&kinds[_i]);
    printf("softmax fwd, %s, target %s\n", kinds[_i].name, tk_context_target(ctx));
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_case(ctx, &cases[i], 0, kinds[_i].mode == TK_BUILD_ASYNC);
    tk_context_destroy(ctx);
}
END_TEST

START_TEST(test_xent_bwd_long_rows)
{
    tk_context *ctx = gpu_ctx(&kinds[_i]);
    printf("xent bwd, %s, target %s\n", kinds[_i].name, tk_context_target(ctx));
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_case(ctx, &cases[i], 1, kinds[_i].mode == TK_BUILD_ASYNC);
    tk_context_destroy(ctx);
}
END_TEST

/* The checked run (tk_check_run) on the cluster path and beyond it. */
START_TEST(test_check_run_long_rows)
{
    tk_context *ctx = gpu_ctx(&kinds[1]);
    static const int64_t shapes[][2] = {{64, 50304}, {16, 128256}, {8, 256000}, {4, 300000}};
    for (int op = 0; op < 2; op++) {
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            const tk_op which = op ? TK_OP_SOFTMAX_XENT_F16_BWD : TK_OP_SOFTMAX_F16_FWD;
            tk_check_report r = TK_STRUCT_INIT(tk_check_report);
            tk_status st = tk_check_run(ctx, which, shapes[i], 2, 99 + i, &r);
            ck_assert_msg(st == TK_OK, "%s: %s: %s", tk_op_name(which), tk_status_str(st),
                          tk_context_last_error(ctx));
            ck_assert_msg(r.passed, "%s %lldx%lld: max abs %g rel %g", tk_op_name(which),
                          (long long)shapes[i][0], (long long)shapes[i][1], r.max_abs_error,
                          r.max_rel_error);
            tk_check_report_free(&r);
        }
    }
    tk_context_destroy(ctx);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("gpu_softmax");
    TCase *tc = tcase_create("gpu");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, test_softmax_fwd_long_rows, 0, 4);
    tcase_add_loop_test(tc, test_xent_bwd_long_rows, 0, 4);
    tcase_add_test(tc, test_check_run_long_rows);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tk_test_gpu_main(suite());
}
