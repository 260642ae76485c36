/* Softmax and embedding operators on the stub backend (no GPU): every class
 * of bad input returns its named status with a message naming the argument,
 * enqueues nothing and leaves the poisoned buffers untouched; offline
 * contexts return TK_NO_DEVICE; precompile counts; checked-run plumbing and
 * report rendering. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "jit/backend/backend.h"
#include "ops/ops_internal.h"
#include "tk_test.h"
#include "tokitai/ops.h"

#define POISON 0xa5
#define BUF_BYTES 4096

static char *cache_dir;

static tk_context *make_ctx(int offline, tk_policy policy)
{
    tk_config *cfg = NULL;
    tk_context *ctx = NULL;
    char err[256];
    if (cache_dir == NULL)
        cache_dir = tk_test_tmpdir("ops_validate");
    ck_assert_ptr_nonnull(cache_dir);
    tk_assert_status(tk_config_create(&cfg), TK_OK);
    tk_assert_status(tk_config_set_backend(cfg, TK_BACKEND_STUB), TK_OK);
    tk_assert_status(tk_config_set_cache_dir(cfg, cache_dir), TK_OK);
    tk_assert_status(tk_config_set_policy(cfg, policy), TK_OK);
    if (offline)
        tk_assert_status(tk_config_set_target(cfg, "stub"), TK_OK);
    tk_assert_status(tk_context_create(cfg, &ctx, err, sizeof err), TK_OK);
    tk_config_destroy(cfg);
    return ctx;
}

static void teardown(void)
{
    if (cache_dir != NULL) {
        tk_test_rmtree(cache_dir);
        free(cache_dir);
        cache_dir = NULL;
    }
}

typedef struct bufs {
    unsigned char *a, *b, *c, *idx, *bad; /* device (stub: host memory) */
} bufs;

static void bufs_make(tk_context *ctx, bufs *B)
{
    void *p[5];
    for (int i = 0; i < 5; i++) {
        tk_assert_status(tk_mem_alloc(ctx, BUF_BYTES, &p[i]), TK_OK);
        tk_assert_status(tk_mem_set(ctx, p[i], POISON, BUF_BYTES), TK_OK);
    }
    B->a = p[0];
    B->b = p[1];
    B->c = p[2];
    B->idx = p[3];
    B->bad = p[4];
    /* valid indices in idx (the values do not matter to validation) */
    tk_assert_status(tk_mem_set(ctx, B->idx, 0, BUF_BYTES), TK_OK);
}

static void assert_untouched(tk_context *ctx, const bufs *B)
{
    unsigned char *host = malloc(BUF_BYTES);
    const unsigned char *p[4] = {B->a, B->b, B->c, B->bad};
    ck_assert_ptr_nonnull(host);
    for (int i = 0; i < 4; i++) {
        tk_assert_status(tk_mem_download(ctx, host, p[i], BUF_BYTES), TK_OK);
        for (int j = 0; j < BUF_BYTES; j++)
            ck_assert_msg(host[j] == POISON, "buffer %d byte %d written", i, j);
    }
    free(host);
}

static void bufs_free(tk_context *ctx, bufs *B)
{
    tk_mem_free(ctx, B->a);
    tk_mem_free(ctx, B->b);
    tk_mem_free(ctx, B->c);
    tk_mem_free(ctx, B->idx);
    tk_mem_free(ctx, B->bad);
}

static uint64_t launches(void)
{
    return tk__stub_counters_get()->launches;
}

/* Expects status and a message containing `what`, no launch, no write. */
#define EXPECT_BAD(call, status, what)                                                             \
    do {                                                                                           \
        uint64_t l0 = launches();                                                                  \
        tk_assert_status((call), (status));                                                        \
        ck_assert_msg(strstr(tk_context_last_error(ctx), (what)) != NULL,                          \
                      "%s: message \"%s\" does not name %s", #call, tk_context_last_error(ctx),    \
                      (what));                                                                     \
        ck_assert_uint_eq(launches(), l0);                                                         \
        assert_untouched(ctx, &B);                                                                 \
    } while (0)

START_TEST(test_softmax_fwd_bad_input)
{
    tk_context *ctx = make_ctx(0, TK_POLICY_EXACT);
    bufs B;
    bufs_make(ctx, &B);
    tk_assert_status(tk_softmax_f16_fwd(NULL, 1, 1, B.a, 0, B.c, 0, NULL), TK_INVALID_ARGUMENT);
    EXPECT_BAD(tk_softmax_f16_fwd(ctx, 0, 4, B.a, 0, B.c, 0, NULL), TK_INVALID_ARGUMENT, "rows");
    EXPECT_BAD(tk_softmax_f16_fwd(ctx, 4, 0, B.a, 0, B.c, 0, NULL), TK_INVALID_ARGUMENT,
               "cols must be > 0 (got 0)");
    EXPECT_BAD(tk_softmax_f16_fwd(ctx, -3, 4, B.a, 0, B.c, 0, NULL), TK_INVALID_ARGUMENT, "rows");
    EXPECT_BAD(tk_softmax_f16_fwd(ctx, 4, 4, NULL, 0, B.c, 0, NULL), TK_INVALID_ARGUMENT, "d_in");
    EXPECT_BAD(tk_softmax_f16_fwd(ctx, 4, 4, B.a, 0, NULL, 0, NULL), TK_INVALID_ARGUMENT, "d_out");
    EXPECT_BAD(tk_softmax_f16_fwd(ctx, 4, 4, B.a + 1, 0, B.c, 0, NULL), TK_MISALIGNED, "d_in");
    EXPECT_BAD(tk_softmax_f16_fwd(ctx, 4, 4, B.a, 0, B.c + 1, 0, NULL), TK_MISALIGNED, "d_out");
    EXPECT_BAD(tk_softmax_f16_fwd(ctx, 4, 8, B.a, 7, B.c, 0, NULL), TK_INVALID_ARGUMENT, "ld_in");
    EXPECT_BAD(tk_softmax_f16_fwd(ctx, 4, 8, B.a, 0, B.c, -1, NULL), TK_INVALID_ARGUMENT, "ld_out");
    EXPECT_BAD(tk_softmax_f16_fwd(ctx, INT64_MAX / 4, 8, B.a, 0, B.c, 0, NULL), TK_OVERFLOW,
               "ld_in");
    EXPECT_BAD(tk_softmax_f16_fwd(ctx, 2, 8, B.a, INT64_MAX / 2, B.c, 0, NULL), TK_OVERFLOW,
               "ld_in");
    EXPECT_BAD(tk_softmax_f16_fwd(ctx, 1, (int64_t)INT32_MAX + 1, B.a, 0, B.c, 0, NULL),
               TK_UNSUPPORTED, "cols");
    /* a good call enqueues exactly one kernel (the stub runs nothing) */
    {
        uint64_t l0 = launches();
        tk_assert_status(tk_softmax_f16_fwd(ctx, 7, 13, B.a, 0, B.c, 16, NULL), TK_OK);
        ck_assert_uint_eq(launches(), l0 + 1);
        /* 2-byte aligned but not 16: a narrower variant, not an error */
        tk_assert_status(tk_softmax_f16_fwd(ctx, 3, 64, B.a + 2, 0, B.c + 6, 0, NULL), TK_OK);
        ck_assert_uint_eq(launches(), l0 + 2);
    }
    bufs_free(ctx, &B);
    tk_context_destroy(ctx);
}
END_TEST

START_TEST(test_xent_bad_input)
{
    tk_context *ctx = make_ctx(0, TK_POLICY_GENERIC);
    bufs B;
    bufs_make(ctx, &B);
    EXPECT_BAD(tk_softmax_xent_f16_bwd(ctx, 0, 4, B.a, 0, B.b, 0, B.c, 0, NULL),
               TK_INVALID_ARGUMENT, "rows");
    EXPECT_BAD(tk_softmax_xent_f16_bwd(ctx, 2, -4, B.a, 0, B.b, 0, B.c, 0, NULL),
               TK_INVALID_ARGUMENT, "cols");
    EXPECT_BAD(tk_softmax_xent_f16_bwd(ctx, 2, 4, NULL, 0, B.b, 0, B.c, 0, NULL),
               TK_INVALID_ARGUMENT, "d_s");
    EXPECT_BAD(tk_softmax_xent_f16_bwd(ctx, 2, 4, B.a, 0, NULL, 0, B.c, 0, NULL),
               TK_INVALID_ARGUMENT, "d_g");
    EXPECT_BAD(tk_softmax_xent_f16_bwd(ctx, 2, 4, B.a, 0, B.b, 0, NULL, 0, NULL),
               TK_INVALID_ARGUMENT, "d_grad_in");
    EXPECT_BAD(tk_softmax_xent_f16_bwd(ctx, 2, 4, B.a, 0, B.b + 3, 0, B.c, 0, NULL), TK_MISALIGNED,
               "d_g");
    EXPECT_BAD(tk_softmax_xent_f16_bwd(ctx, 2, 4, B.a, 3, B.b, 0, B.c, 0, NULL),
               TK_INVALID_ARGUMENT, "ld_s");
    EXPECT_BAD(tk_softmax_xent_f16_bwd(ctx, 2, 4, B.a, 0, B.b, 2, B.c, 0, NULL),
               TK_INVALID_ARGUMENT, "ld_g");
    EXPECT_BAD(tk_softmax_xent_f16_bwd(ctx, 2, 4, B.a, 0, B.b, 0, B.c, 1, NULL),
               TK_INVALID_ARGUMENT, "ld_grad_in");
    EXPECT_BAD(tk_softmax_xent_f16_bwd(ctx, INT64_MAX / 3, 4, B.a, 0, B.b, 0, B.c, 0, NULL),
               TK_OVERFLOW, "ld_s");
    {
        uint64_t l0 = launches();
        tk_assert_status(tk_softmax_xent_f16_bwd(ctx, 1, 4099, B.a, 0, B.b, 0, B.c, 0, NULL),
                         TK_OK);
        ck_assert_uint_eq(launches(), l0 + 1);
    }
    bufs_free(ctx, &B);
    tk_context_destroy(ctx);
}
END_TEST

START_TEST(test_embedding_fwd_bad_input)
{
    tk_context *ctx = make_ctx(0, TK_POLICY_EXACT);
    const int32_t *idx;
    bufs B;
    bufs_make(ctx, &B);
    idx = (const int32_t *)B.idx;
    EXPECT_BAD(tk_embedding_f16_fwd(ctx, 0, 8, B.a, 4, idx, B.c, NULL, NULL), TK_INVALID_ARGUMENT,
               "V must be > 0");
    EXPECT_BAD(tk_embedding_f16_fwd(ctx, 4, 0, B.a, 4, idx, B.c, NULL, NULL), TK_INVALID_ARGUMENT,
               "D must be > 0");
    EXPECT_BAD(tk_embedding_f16_fwd(ctx, 4, 8, B.a, -1, idx, B.c, NULL, NULL), TK_INVALID_ARGUMENT,
               "Q must be > 0");
    EXPECT_BAD(tk_embedding_f16_fwd(ctx, 4, 8, NULL, 4, idx, B.c, NULL, NULL), TK_INVALID_ARGUMENT,
               "d_weight");
    EXPECT_BAD(tk_embedding_f16_fwd(ctx, 4, 8, B.a, 4, NULL, B.c, NULL, NULL), TK_INVALID_ARGUMENT,
               "d_idx");
    EXPECT_BAD(tk_embedding_f16_fwd(ctx, 4, 8, B.a, 4, idx, NULL, NULL, NULL), TK_INVALID_ARGUMENT,
               "d_out");
    EXPECT_BAD(
        tk_embedding_f16_fwd(ctx, 4, 8, B.a, 4, (const int32_t *)(B.idx + 2), B.c, NULL, NULL),
        TK_MISALIGNED, "d_idx");
    EXPECT_BAD(tk_embedding_f16_fwd(ctx, 4, 8, B.a + 1, 4, idx, B.c, NULL, NULL), TK_MISALIGNED,
               "d_weight");
    EXPECT_BAD(tk_embedding_f16_fwd(ctx, 4, 8, B.a, 4, idx, B.c, (uint32_t *)(B.bad + 1), NULL),
               TK_MISALIGNED, "d_bad_count");
    EXPECT_BAD(tk_embedding_f16_fwd(ctx, INT64_MAX / 8, 8, B.a, 4, idx, B.c, NULL, NULL),
               TK_OVERFLOW, "V x D");
    EXPECT_BAD(tk_embedding_f16_fwd(ctx, 4, INT64_MAX / 2, B.a, 4, idx, B.c, NULL, NULL),
               TK_OVERFLOW, "V x D");
    {
        uint64_t l0 = launches();
        tk_assert_status(
            tk_embedding_f16_fwd(ctx, 4, 13, B.a, 7, idx, B.c, (uint32_t *)B.bad, NULL), TK_OK);
        ck_assert_uint_eq(launches(), l0 + 1);
    }
    bufs_free(ctx, &B);
    tk_context_destroy(ctx);
}
END_TEST

START_TEST(test_embedding_bwd_bad_input)
{
    tk_context *ctx = make_ctx(0, TK_POLICY_EXACT);
    const int32_t *idx;
    bufs B;
    bufs_make(ctx, &B);
    idx = (const int32_t *)B.idx;
    EXPECT_BAD(tk_embedding_f16_bwd(ctx, 0, 8, B.c, 4, idx, B.a, 0, NULL, NULL),
               TK_INVALID_ARGUMENT, "V");
    EXPECT_BAD(tk_embedding_f16_bwd(ctx, 4, -8, B.c, 4, idx, B.a, 0, NULL, NULL),
               TK_INVALID_ARGUMENT, "D");
    EXPECT_BAD(tk_embedding_f16_bwd(ctx, 4, 8, B.c, 0, idx, B.a, 0, NULL, NULL),
               TK_INVALID_ARGUMENT, "Q");
    EXPECT_BAD(tk_embedding_f16_bwd(ctx, 4, 8, NULL, 4, idx, B.a, 0, NULL, NULL),
               TK_INVALID_ARGUMENT, "d_grad_weight");
    EXPECT_BAD(tk_embedding_f16_bwd(ctx, 4, 8, B.c, 4, NULL, B.a, 0, NULL, NULL),
               TK_INVALID_ARGUMENT, "d_idx");
    EXPECT_BAD(tk_embedding_f16_bwd(ctx, 4, 8, B.c, 4, idx, NULL, 0, NULL, NULL),
               TK_INVALID_ARGUMENT, "d_grad_out");
    EXPECT_BAD(tk_embedding_f16_bwd(ctx, 4, 8, B.c + 1, 4, idx, B.a, 0, NULL, NULL), TK_MISALIGNED,
               "d_grad_weight");
    EXPECT_BAD(tk_embedding_f16_bwd(ctx, 4, 8, B.c, 4, idx, B.a, 0x80, NULL, NULL),
               TK_INVALID_ARGUMENT, "flags");
    EXPECT_BAD(tk_embedding_f16_bwd(ctx, 4, 8, B.c, INT64_MAX / 4, idx, B.a, 0, NULL, NULL),
               TK_OVERFLOW, "Q x D");
    EXPECT_BAD(
        tk_embedding_f16_bwd(ctx, 4, 1, B.c, (int64_t)INT32_MAX + 1, idx, B.a, 0, NULL, NULL),
        TK_UNSUPPORTED, "Q");
    {
        /* Q = 5000 > 2048: keys, local sort, global and merge passes, gather */
        uint64_t l0 = launches();
        tk_assert_status(tk_embedding_f16_bwd(ctx, 4, 8, B.c, 5000, idx, B.a,
                                              TK_EMBEDDING_DETERMINISTIC, (uint32_t *)B.bad, NULL),
                         TK_OK);
        /* P = 8192, L = 2048: keys, local, k=4096 (1 global + merge),
         * k=8192 (2 global + merge), gather = 8 launches */
        ck_assert_uint_eq(launches(), l0 + 8);
        l0 = launches();
        tk_assert_status(tk_embedding_f16_bwd(ctx, 4, 8, B.c, 1, idx, B.a, 0, NULL, NULL), TK_OK);
        ck_assert_uint_eq(launches(), l0 + 3); /* keys, local, gather */
    }
    bufs_free(ctx, &B);
    tk_context_destroy(ctx);
}
END_TEST

START_TEST(test_offline_context_no_device)
{
    tk_context *ctx = make_ctx(1, TK_POLICY_EXACT);
    int dummy[64];
    void *p = dummy;
    uint64_t l0 = launches();
    tk_check_report rep = TK_STRUCT_INIT(tk_check_report);
    const int64_t dims2[2] = {4, 4};
    tk_assert_status(tk_softmax_f16_fwd(ctx, 4, 4, p, 0, p, 0, NULL), TK_NO_DEVICE);
    ck_assert_ptr_nonnull(strstr(tk_context_last_error(ctx), "tk_softmax_f16_fwd"));
    tk_assert_status(tk_softmax_xent_f16_bwd(ctx, 4, 4, p, 0, p, 0, p, 0, NULL), TK_NO_DEVICE);
    tk_assert_status(tk_embedding_f16_fwd(ctx, 4, 4, p, 4, p, p, NULL, NULL), TK_NO_DEVICE);
    tk_assert_status(tk_embedding_f16_bwd(ctx, 4, 4, p, 4, p, p, 0, NULL, NULL), TK_NO_DEVICE);
    tk_assert_status(tk_check_run(ctx, TK_OP_SOFTMAX_F16_FWD, dims2, 2, 1, &rep), TK_NO_DEVICE);
    ck_assert_uint_eq(launches(), l0);
    tk_context_destroy(ctx);
}
END_TEST

START_TEST(test_precompile_counts)
{
    tk_context *ctx = make_ctx(1, TK_POLICY_EXACT);
    const int64_t sm[2] = {16384, 4096}, emb[3] = {50304, 1024, 16384};
    unsigned c = 0, k = 0;
    tk_assert_status(tk_op_precompile(ctx, TK_OP_SOFTMAX_F16_FWD, sm, 2, &c, &k), TK_OK);
    ck_assert_uint_eq(c, 1);
    ck_assert_uint_eq(k, 0);
    c = k = 0;
    tk_assert_status(tk_op_precompile(ctx, TK_OP_SOFTMAX_F16_FWD, sm, 2, &c, &k), TK_OK);
    ck_assert_uint_eq(c, 0);
    ck_assert_uint_eq(k, 1);
    c = k = 0;
    tk_assert_status(tk_op_precompile(ctx, TK_OP_SOFTMAX_XENT_F16_BWD, sm, 2, &c, &k), TK_OK);
    ck_assert_uint_eq(c + k, 1);
    c = k = 0;
    tk_assert_status(tk_op_precompile(ctx, TK_OP_EMBEDDING_F16_FWD, emb, 3, &c, &k), TK_OK);
    ck_assert_uint_eq(c + k, 1);
    c = k = 0;
    /* gather + 4 sort kernels */
    tk_assert_status(tk_op_precompile(ctx, TK_OP_EMBEDDING_F16_BWD, emb, 3, &c, &k), TK_OK);
    ck_assert_uint_eq(c + k, 5);
    tk_assert_status(tk_op_precompile(ctx, TK_OP_EMBEDDING_F16_BWD, emb, 2, &c, &k),
                     TK_INVALID_ARGUMENT);
    {
        const int64_t bad[2] = {4, 0};
        tk_assert_status(tk_op_precompile(ctx, TK_OP_SOFTMAX_F16_FWD, bad, 2, NULL, NULL),
                         TK_INVALID_ARGUMENT);
    }
    tk_context_destroy(ctx);
}
END_TEST

START_TEST(test_generic_policy_shares_kernels)
{
    /* Generic: row lengths of one bucket use one kernel; exact compiles per
     * length. */
    tk_context *gen = make_ctx(1, TK_POLICY_GENERIC);
    unsigned c = 0, k = 0;
    const int64_t a[2] = {64, 1000}, b[2] = {64, 1016};
    tk_assert_status(tk_op_precompile(gen, TK_OP_SOFTMAX_F16_FWD, a, 2, &c, &k), TK_OK);
    c = k = 0;
    tk_assert_status(tk_op_precompile(gen, TK_OP_SOFTMAX_F16_FWD, b, 2, &c, &k), TK_OK);
    ck_assert_uint_eq(c, 0);
    ck_assert_uint_eq(k, 1);
    tk_context_destroy(gen);
    {
        tk_context *ex = make_ctx(1, TK_POLICY_EXACT);
        tk_assert_status(tk_op_precompile(ex, TK_OP_SOFTMAX_F16_FWD, a, 2, NULL, NULL), TK_OK);
        c = k = 0;
        tk_assert_status(tk_op_precompile(ex, TK_OP_SOFTMAX_F16_FWD, b, 2, &c, &k), TK_OK);
        ck_assert_uint_eq(c, 1);
        tk_context_destroy(ex);
    }
}
END_TEST

START_TEST(test_vec_width)
{
    char buf[64] __attribute__((aligned(16)));
    const void *p16[2] = {buf, buf + 16};
    const void *p8[2] = {buf, buf + 8};
    const void *p2[1] = {buf + 2};
    ck_assert_uint_eq(tk__op_vec_width(4096, p16, 2), 8);
    ck_assert_uint_eq(tk__op_vec_width(4096, p8, 2), 4);
    ck_assert_uint_eq(tk__op_vec_width(4100, p16, 2), 4);
    ck_assert_uint_eq(tk__op_vec_width(4099, p16, 2), 1);
    ck_assert_uint_eq(tk__op_vec_width(4096, p2, 1), 1);
    ck_assert_uint_eq(tk__op_vec_width(6, NULL, 0), 2);
}
END_TEST

START_TEST(test_check_run_on_stub_fails_poisoned)
{
    /* The stub runs no kernel, so the poisoned outputs stay NaN: the checked
     * run must happen (TK_OK) and report a failure, for each op. */
    tk_context *ctx = make_ctx(0, TK_POLICY_EXACT);
    const int64_t sm[2] = {7, 13}, emb[3] = {50, 9, 200};
    tk_op ops[4] = {TK_OP_SOFTMAX_F16_FWD, TK_OP_SOFTMAX_XENT_F16_BWD, TK_OP_EMBEDDING_F16_FWD,
                    TK_OP_EMBEDDING_F16_BWD};
    for (int i = 0; i < 4; i++) {
        tk_check_report r = TK_STRUCT_INIT(tk_check_report);
        int is_emb = i >= 2;
        char *md, *js;
        tk_assert_status(tk_check_run(ctx, ops[i], is_emb ? emb : sm, is_emb ? 3 : 2, 42, &r),
                         TK_OK);
        ck_assert_int_eq((int)r.op, (int)ops[i]);
        ck_assert_uint_eq(r.seed, 42);
        ck_assert_ptr_nonnull(r.compiler);
        ck_assert_str_eq(r.device, "stub");
        ck_assert_str_eq(r.policy, "exact");
        ck_assert_ptr_nonnull(strstr(r.source_fingerprint, is_emb ? "embedding" : "softmax"));
        ck_assert_int_eq((int)strlen(r.cache_key), 32);
        if (ops[i] == TK_OP_EMBEDDING_F16_BWD) {
            /* in place: the stub leaves grad_weight as uploaded, which differs
             * from the reference on touched rows; the device counter stays 0
             * while the reference saw out-of-range indices */
            ck_assert_int_eq(r.passed, 0);
        } else {
            ck_assert_int_eq(r.passed, 0);
        }
        md = tk_check_report_markdown(&r);
        js = tk_check_report_json(&r);
        ck_assert_ptr_nonnull(md);
        ck_assert_ptr_nonnull(js);
        ck_assert_ptr_nonnull(strstr(md, "FAIL"));
        ck_assert_ptr_nonnull(strstr(js, "\"passed\":false"));
        free(md);
        free(js);
        tk_check_report_free(&r);
    }
    tk_context_destroy(ctx);
}
END_TEST

START_TEST(test_check_run_bad_args)
{
    tk_context *ctx = make_ctx(0, TK_POLICY_EXACT);
    tk_check_report r = TK_STRUCT_INIT(tk_check_report);
    const int64_t d2[2] = {4, 4}, d0[2] = {4, 0};
    uint16_t host[16] = {0};
    tk_assert_status(tk_check_run(ctx, TK_OP_SOFTMAX_F16_FWD, d2, 3, 1, &r), TK_INVALID_ARGUMENT);
    tk_assert_status(tk_check_run(ctx, TK_OP_SOFTMAX_F16_FWD, d0, 2, 1, &r), TK_INVALID_ARGUMENT);
    tk_assert_status(tk_check_run(ctx, TK_OP_COUNT, d2, 2, 1, &r), TK_INVALID_ARGUMENT);
    tk_assert_status(tk_check_run(ctx, TK_OP_SOFTMAX_F16_FWD, d2, 2, 1, NULL), TK_INVALID_ARGUMENT);
    tk_assert_status(
        tk_check_run_host(ctx, TK_OP_SOFTMAX_XENT_F16_BWD, d2, 2, host, NULL, NULL, host, &r),
        TK_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(tk_context_last_error(ctx), "in1"));
    tk_context_destroy(ctx);
}
END_TEST

START_TEST(test_report_rendering)
{
    tk_check_report r = TK_STRUCT_INIT(tk_check_report);
    char *js, *md;
    r.op = TK_OP_EMBEDDING_F16_FWD;
    r.n_dims = 3;
    r.dims[0] = 10;
    r.dims[1] = 4;
    r.dims[2] = 3;
    r.passed = 1;
    r.bad_indices = 2;
    r.max_abs_error = 1.0 / 0.0; /* not JSON: null */
    r.origin = TK_ORIGIN_COMPILED;
    r.compile_ms = 12.5;
    r.source_fingerprint = strdup("emb\"ed\\ding\n\x01");
    r.compiler = strdup("nvrtc 13.0");
    r.cache_key = strdup("00112233445566778899aabbccddeeff");
    r.device = strdup("cuda");
    r.arch = strdup("sm_90");
    r.policy = strdup("exact");
    js = tk_check_report_json(&r);
    md = tk_check_report_markdown(&r);
    ck_assert_ptr_nonnull(js);
    ck_assert_ptr_nonnull(md);
    ck_assert_ptr_nonnull(strstr(js, "\"source_fingerprint\":\"emb\\\"ed\\\\ding\\n\\u0001\""));
    ck_assert_ptr_nonnull(strstr(js, "\"max_abs_error\":null"));
    ck_assert_ptr_nonnull(strstr(js, "\"dims\":[10,4,3]"));
    ck_assert_ptr_nonnull(strstr(js, "\"origin\":\"compiled\""));
    ck_assert_ptr_nonnull(strstr(js, "\"bad_indices\":2"));
    ck_assert_ptr_nonnull(strstr(md, "PASS"));
    ck_assert_ptr_nonnull(strstr(md, "V=10, D=4, Q=3"));
    ck_assert_ptr_nonnull(strstr(md, "| bad_indices | 2 |"));
    ck_assert_ptr_nonnull(strstr(md, "compile_ms"));
    free(js);
    free(md);
    tk_check_report_free(&r);
    ck_assert_ptr_null(r.compiler);
    tk_check_report_free(&r); /* twice is harmless */
    tk_check_report_free(NULL);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("ops_validate");
    TCase *tc = tcase_create("validate");
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_add_test(tc, test_softmax_fwd_bad_input);
    tcase_add_test(tc, test_xent_bad_input);
    tcase_add_test(tc, test_embedding_fwd_bad_input);
    tcase_add_test(tc, test_embedding_bwd_bad_input);
    tcase_add_test(tc, test_offline_context_no_device);
    tcase_add_test(tc, test_precompile_counts);
    tcase_add_test(tc, test_generic_policy_shares_kernels);
    tcase_add_test(tc, test_vec_width);
    tcase_add_test(tc, test_check_run_on_stub_fails_poisoned);
    tcase_add_test(tc, test_check_run_bad_args);
    tcase_add_test(tc, test_report_rendering);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tk_test_main(suite());
}
