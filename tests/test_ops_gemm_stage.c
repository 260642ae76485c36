/*
 * GEMM operands whose rows are not 16-byte aligned (a leading dimension
 * that is not a multiple of 8 halves, or a pointer off 16 bytes), without a
 * GPU: the staging decision of the plan (src/ops/gemm/plan.c
 * tk__gemm_plan_stage) and what a call on the stub backend does with it.
 *
 * - Large enough calls (2^28 FLOP) stage each misaligned operand, and only
 *   those, with rows padded to a multiple of 8; the plan is then aligned.
 * - Small calls, the AMD and sm_70 kernels, and aligned operands: nothing
 *   staged.
 * - Swapping the plan's operands carries the staging with them.
 * - On the stub backend a staged call compiles the staging kernel and
 *   takes workspace for the padded copy; an unstaged call takes none; the
 *   output is written either way.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "jit/backend/backend.h"
#include "ops/gemm/gemm_internal.h"
#include "tk_test.h"
#include "tokitai/ops.h"

/* The plan of op M x N x K with the caller's leading dimensions lda / ldb
 * (0: packed) on an sm_90-like target, staged with pointers a and b. */
static gemm_plan staged_plan(tk_op op, int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb,
                             const void *a, const void *b)
{
    gemm_plan p;
    tk__gemm_plan_op(op, M, N, K, &p);
    p.lda = lda ? lda : p.a_kmajor ? p.K : p.M;
    p.ldb = ldb ? ldb : p.b_kmajor ? p.K : p.N;
    p.ldc = p.N;
    p.sm90 = 1;
    p.sms = 132;
    tk__gemm_plan_stage(&p, a, b);
    tk__gemm_plan_alignment(&p, p.stage_a ? TK__GEMM_STAGED_PTR : a,
                            p.stage_b ? TK__GEMM_STAGED_PTR : b, (const void *)(uintptr_t)4096);
    return p;
}

#define AL ((const void *)(uintptr_t)0x10000)
#define OFF ((const void *)(uintptr_t)0x10002)

START_TEST(test_decision)
{
    /* d_model 700: the forward's A rows (K = 700) are 1400 bytes */
    gemm_plan p = staged_plan(TK_OP_GEMM_F16_FWD, 9000, 1024, 700, 0, 0, AL, AL);
    ck_assert_int_eq(p.stage_a, 1);
    ck_assert_int_eq(p.stage_b, 0);
    ck_assert_int_eq(p.lda, 704);
    ck_assert_int_eq(p.src_lda, 700);
    ck_assert_int_eq(p.ldb, 1024);
    ck_assert_int_eq(p.aligned, 1);
    /* GPT-2's vocabulary as N: B [K, 50257] and grad_b's grad_C rows */
    p = staged_plan(TK_OP_GEMM_F16_FWD, 2000, 50257, 1024, 0, 0, AL, AL);
    ck_assert(!p.stage_a && p.stage_b && p.ldb == 50264 && p.src_ldb == 50257 && p.aligned);
    p = staged_plan(TK_OP_GEMM_F16_GRAD_B, 2000, 50257, 1024, 0, 0, AL, AL);
    ck_assert(!p.stage_a && p.stage_b && p.aligned);
    /* a pointer off 16 bytes with an aligned leading dimension */
    p = staged_plan(TK_OP_GEMM_F16_GRAD_A, 4096, 4096, 4096, 0, 0, AL, OFF);
    ck_assert(!p.stage_a && p.stage_b && p.ldb == 4096 && p.aligned);
    /* both, with leading dimensions longer than the rows */
    p = staged_plan(TK_OP_GEMM_F16_FWD, 3000, 3000, 3000, 3005, 3011, AL, AL);
    ck_assert(p.stage_a && p.stage_b && p.lda == 3000 && p.ldb == 3000);
    ck_assert(p.src_lda == 3005 && p.src_ldb == 3011 && p.aligned);
    /* aligned operands, small calls: nothing */
    p = staged_plan(TK_OP_GEMM_F16_FWD, 4096, 4096, 4096, 0, 0, AL, AL);
    ck_assert(!p.stage_a && !p.stage_b && p.aligned);
    p = staged_plan(TK_OP_GEMM_F16_FWD, 64, 64, 700, 0, 0, AL, AL);
    ck_assert(!p.stage_a && !p.stage_b && !p.aligned && p.lda == 700);
    /* AMD and sm_70 kernels read any alignment the same way */
    gemm_plan q;
    tk__gemm_plan_op(TK_OP_GEMM_F16_FWD, 9000, 1024, 700, &q);
    q.lda = 700, q.ldb = 1024, q.ldc = 1024, q.amd = 1;
    ck_assert_int_eq(tk__gemm_plan_stage(&q, AL, AL), 0);
    q.amd = 0, q.simple = 1;
    ck_assert_int_eq(tk__gemm_plan_stage(&q, AL, AL), 0);
    ck_assert_int_eq(q.lda, 700);
    /* undone */
    p = staged_plan(TK_OP_GEMM_F16_FWD, 9000, 1024, 700, 0, 0, AL, AL);
    tk__gemm_plan_unstage(&p);
    ck_assert(!p.stage_a && p.lda == 700);
}
END_TEST

START_TEST(test_swap_carries_staging)
{
    gemm_plan p = staged_plan(TK_OP_GEMM_F16_FWD, 2000, 50257, 1024, 0, 0, AL, AL);
    tk__gemm_plan_swap(&p);
    ck_assert(p.stage_a && !p.stage_b && p.lda == 50264 && p.src_lda == 50257 && p.ldb == 1024);
    tk__gemm_plan_swap(&p);
    ck_assert(!p.stage_a && p.stage_b && p.ldb == 50264 && p.src_ldb == 50257 && p.lda == 1024);
}
END_TEST

static tk_context *stub_ctx(void)
{
    tk_config *cfg = NULL;
    tk_context *ctx = NULL;
    char why[256] = "";
    tk_assert_status(tk_config_create(&cfg), TK_OK);
    tk_assert_status(tk_config_set_backend(cfg, TK_BACKEND_STUB), TK_OK);
    tk_assert_status(tk_config_set_cache_disabled(cfg, 1), TK_OK);
    tk_assert_status(tk_config_set_build_mode(cfg, TK_BUILD_SYNC), TK_OK);
    tk_status st = tk_context_create(cfg, &ctx, why, sizeof why);
    ck_assert_msg(st == TK_OK, "%s", why);
    tk_config_destroy(cfg);
    return ctx;
}

static uint64_t workspace_peak(const tk_context *ctx)
{
    tk_context_stats s = TK_STRUCT_INIT(tk_context_stats);
    tk_assert_status(tk_context_get_stats(ctx, &s), TK_OK);
    return s.workspace_peak;
}

START_TEST(test_stub_calls)
{
    tk_context *ctx = stub_ctx();
    tk__stub_counters *sc = tk__stub_counters_get();
    const int64_t M = 9000, N = 1024, K = 700;
    void *a = NULL, *b = NULL, *c = NULL;
    /* room for K = 704 too */
    tk_assert_status(tk_mem_alloc(ctx, (size_t)M * 704 * 2, &a), TK_OK);
    tk_assert_status(tk_mem_alloc(ctx, (size_t)704 * N * 2, &b), TK_OK);
    tk_assert_status(tk_mem_alloc(ctx, (size_t)M * N * 4, &c), TK_OK);
    /* a call below the bound runs on the operands as they are */
    tk_assert_status(tk_gemm_f16_fwd(ctx, 64, 64, K, a, 0, b, 0, c, 0, NULL), TK_OK);
    ck_assert_uint_lt(workspace_peak(ctx), (uint64_t)64 * 704 * 2);
    /* the large shape with K = 704 (rows of A 16-byte aligned): no staging */
    const uint64_t l0 = sc->launches;
    tk_assert_status(tk_gemm_f16_fwd(ctx, M, N, 704, a, 0, b, 0, c, 0, NULL), TK_OK);
    const uint64_t plain = sc->launches - l0;
    ck_assert_uint_ge(plain, 1);
    ck_assert_uint_lt(workspace_peak(ctx), (uint64_t)M * 704 * 2);
    /* K = 700: the copy of A (9000 rows of 704 halves), then the same GEMM */
    const uint64_t l1 = sc->launches;
    tk_assert_status(tk_gemm_f16_fwd(ctx, M, N, K, a, 0, b, 0, c, 0, NULL), TK_OK);
    ck_assert_uint_eq(sc->launches - l1, plain + 1);
    ck_assert_uint_ge(workspace_peak(ctx), (uint64_t)M * 704 * 2);
    tk_assert_status(tk_mem_free(ctx, a), TK_OK);
    tk_assert_status(tk_mem_free(ctx, b), TK_OK);
    tk_assert_status(tk_mem_free(ctx, c), TK_OK);
    tk_context_destroy(ctx);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("ops_gemm_stage");
    TCase *tc = tcase_create("stage");
    tcase_add_test(tc, test_decision);
    tcase_add_test(tc, test_swap_carries_staging);
    tcase_add_test(tc, test_stub_calls);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tk_test_main(suite());
}
