/* The operators' device workspace on the stub backend (no GPU): repeated
 * calls of one shape allocate nothing after the first, smaller shapes reuse
 * the buffer, a bigger need grows it once to a power of two, each stream has
 * its own, and tk_context_stats reports bytes, peak and allocations. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tk_test.h"
#include "tokitai/ops.h"

#define MIB ((uint64_t)1 << 20)

static char *cache_dir;

static tk_context *make_ctx(void)
{
    tk_config *cfg = NULL;
    tk_context *ctx = NULL;
    char err[256];
    if (cache_dir == NULL)
        cache_dir = tk_test_tmpdir("ops_workspace");
    ck_assert_ptr_nonnull(cache_dir);
    tk_assert_status(tk_config_create(&cfg), TK_OK);
    tk_assert_status(tk_config_set_backend(cfg, TK_BACKEND_STUB), TK_OK);
    tk_assert_status(tk_config_set_cache_dir(cfg, cache_dir), TK_OK);
    tk_assert_status(tk_config_set_build_mode(cfg, TK_BUILD_SYNC), TK_OK);
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

static tk_context_stats stats(tk_context *ctx)
{
    tk_context_stats s = TK_STRUCT_INIT(tk_context_stats);
    memset(&s, 0xff, sizeof s);
    tk_assert_status(tk_context_get_stats(ctx, &s), TK_OK);
    return s;
}

/* Embedding backward buffers for up to q_max lookups (its workspace: 8 bytes
 * per lookup, rounded up to a power of two). */
typedef struct emb {
    int64_t V, D;
    void *gw, *go, *idx;
} emb;

static void emb_make(tk_context *ctx, emb *e, int64_t q_max)
{
    e->V = 64;
    e->D = 8;
    tk_assert_status(tk_mem_alloc(ctx, (size_t)(e->V * e->D * 2), &e->gw), TK_OK);
    tk_assert_status(tk_mem_alloc(ctx, (size_t)(q_max * e->D * 2), &e->go), TK_OK);
    tk_assert_status(tk_mem_alloc(ctx, (size_t)q_max * 4, &e->idx), TK_OK);
    tk_assert_status(tk_mem_set(ctx, e->gw, 0, (size_t)(e->V * e->D * 2)), TK_OK);
    tk_assert_status(tk_mem_set(ctx, e->go, 0, (size_t)(q_max * e->D * 2)), TK_OK);
    tk_assert_status(tk_mem_set(ctx, e->idx, 0, (size_t)q_max * 4), TK_OK);
}

static void emb_free(tk_context *ctx, emb *e)
{
    tk_mem_free(ctx, e->gw);
    tk_mem_free(ctx, e->go);
    tk_mem_free(ctx, e->idx);
}

static tk_status emb_bwd(tk_context *ctx, const emb *e, int64_t Q, void *stream)
{
    return tk_embedding_f16_bwd(ctx, e->V, e->D, e->gw, Q, e->idx, e->go, 0, NULL, stream);
}

START_TEST(test_fresh_context_holds_none)
{
    tk_context *ctx = make_ctx();
    tk_context_stats s = stats(ctx);
    ck_assert_uint_eq(s.workspace_bytes, 0);
    ck_assert_uint_eq(s.workspace_peak, 0);
    ck_assert_uint_eq(s.workspace_allocs, 0);
    tk_context_destroy(ctx);
}
END_TEST

START_TEST(test_repeated_calls_allocate_nothing)
{
    tk_context *ctx = make_ctx();
    emb e;
    tk_context_stats s0 = TK_STRUCT_INIT(tk_context_stats);
    tk_context_stats s1 = TK_STRUCT_INIT(tk_context_stats);
    emb_make(ctx, &e, 300000);

    tk_assert_status(emb_bwd(ctx, &e, 1000, NULL), TK_OK);
    s0 = stats(ctx);
    ck_assert_uint_eq(s0.workspace_allocs, 1);
    ck_assert_uint_eq(s0.workspace_bytes, MIB); /* the smallest buffer */
    ck_assert_uint_eq(s0.workspace_peak, MIB);
    for (int i = 0; i < 200; i++)
        tk_assert_status(emb_bwd(ctx, &e, 1000, NULL), TK_OK);
    /* smaller needs fit too */
    for (int64_t q = 1; q <= 1000; q *= 3)
        tk_assert_status(emb_bwd(ctx, &e, q, NULL), TK_OK);
    s1 = stats(ctx);
    ck_assert_uint_eq(s1.workspace_allocs, s0.workspace_allocs);
    ck_assert_uint_eq(s1.workspace_bytes, s0.workspace_bytes);

    /* 300000 lookups: 8 x 2^19 = 4 MiB, one growth; then steady again */
    tk_assert_status(emb_bwd(ctx, &e, 300000, NULL), TK_OK);
    s1 = stats(ctx);
    ck_assert_uint_eq(s1.workspace_allocs, 2);
    ck_assert_uint_eq(s1.workspace_bytes, 4 * MIB); /* the old buffer was freed */
    ck_assert_uint_eq(s1.workspace_peak, 4 * MIB);
    for (int i = 0; i < 20; i++) {
        tk_assert_status(emb_bwd(ctx, &e, 300000, NULL), TK_OK);
        tk_assert_status(emb_bwd(ctx, &e, 1000, NULL), TK_OK);
    }
    s0 = stats(ctx);
    ck_assert_uint_eq(s0.workspace_allocs, 2);
    ck_assert_uint_eq(s0.workspace_bytes, 4 * MIB);
    emb_free(ctx, &e);
    tk_context_destroy(ctx);
}
END_TEST

START_TEST(test_creeping_needs_grow_by_powers_of_two)
{
    /* A need that creeps upwards (token counts of a MoE step) grows the
     * buffer a logarithmic number of times, not once per new maximum. */
    tk_context *ctx = make_ctx();
    emb e;
    tk_context_stats s = TK_STRUCT_INIT(tk_context_stats);
    emb_make(ctx, &e, 1 << 20);
    for (int64_t q = 1000; q <= (1 << 20); q += 1000)
        tk_assert_status(emb_bwd(ctx, &e, q, NULL), TK_OK);
    s = stats(ctx);
    /* 1 MiB (q <= 131072), then 2, 4, 8 MiB */
    ck_assert_uint_eq(s.workspace_allocs, 4);
    ck_assert_uint_eq(s.workspace_bytes, 8 * MIB);
    ck_assert_uint_eq(s.workspace_peak, 8 * MIB);
    emb_free(ctx, &e);
    tk_context_destroy(ctx);
}
END_TEST

START_TEST(test_one_buffer_per_stream)
{
    tk_context *ctx = make_ctx();
    emb e;
    tk_context_stats s = TK_STRUCT_INIT(tk_context_stats);
    int a, b; /* the stub takes any pointer as a stream */
    emb_make(ctx, &e, 1000);
    for (int i = 0; i < 10; i++) {
        tk_assert_status(emb_bwd(ctx, &e, 1000, &a), TK_OK);
        tk_assert_status(emb_bwd(ctx, &e, 1000, &b), TK_OK);
        tk_assert_status(emb_bwd(ctx, &e, 1000, NULL), TK_OK);
    }
    s = stats(ctx);
    ck_assert_uint_eq(s.workspace_allocs, 3);
    ck_assert_uint_eq(s.workspace_bytes, 3 * MIB);
    emb_free(ctx, &e);
    tk_context_destroy(ctx);
}
END_TEST

START_TEST(test_reset_keeps_what_is_held)
{
    tk_context *ctx = make_ctx();
    emb e;
    tk_context_stats s = TK_STRUCT_INIT(tk_context_stats);
    emb_make(ctx, &e, 300000);
    tk_assert_status(emb_bwd(ctx, &e, 300000, NULL), TK_OK);
    tk_context_reset_stats(ctx);
    s = stats(ctx);
    ck_assert_uint_eq(s.workspace_allocs, 0);
    ck_assert_uint_eq(s.workspace_bytes, 4 * MIB);
    ck_assert_uint_eq(s.workspace_peak, 4 * MIB);
    tk_assert_status(emb_bwd(ctx, &e, 300000, NULL), TK_OK);
    ck_assert_uint_eq(stats(ctx).workspace_allocs, 0);
    emb_free(ctx, &e);
    tk_context_destroy(ctx);
}
END_TEST

START_TEST(test_gemm_loop_allocates_at_most_once_per_shape_class)
{
    /* The GEMMs of a MoE step, repeated: whatever the plan splits, a second
     * pass over the same shapes allocates nothing. */
    static const int64_t shapes[][3] = {
        {16, 4096, 1024}, {128, 1024, 8192}, {1000, 2816, 1024}, {37, 1024, 2816}, {512, 512, 64},
    };
    tk_context *ctx = make_ctx();
    void *a, *b, *c;
    tk_context_stats s0 = TK_STRUCT_INIT(tk_context_stats);
    tk_context_stats s1 = TK_STRUCT_INIT(tk_context_stats);
    tk_assert_status(tk_mem_alloc(ctx, 128 * 8192 * 2, &a), TK_OK);
    tk_assert_status(tk_mem_alloc(ctx, 8192 * 4096 * 2, &b), TK_OK);
    tk_assert_status(tk_mem_alloc(ctx, 1000 * 4096 * 4, &c), TK_OK);
    for (int pass = 0; pass < 3; pass++) {
        s0 = stats(ctx);
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            const int64_t M = shapes[i][0], N = shapes[i][1], K = shapes[i][2];
            tk_assert_status(tk_gemm_f16_fwd(ctx, M, N, K, a, 0, b, 0, c, 0, NULL), TK_OK);
            tk_assert_status(tk_gemm_f16_grad_a(ctx, M, N, K, a, 0, b, 0, c, 0, NULL), TK_OK);
            tk_assert_status(tk_gemm_f16_grad_b(ctx, M, N, K, a, 0, b, 0, c, 0, NULL), TK_OK);
        }
        s1 = stats(ctx);
        if (pass > 0)
            ck_assert_uint_eq(s1.workspace_allocs, s0.workspace_allocs);
        ck_assert_uint_le(s1.workspace_bytes, 64 * MIB);
    }
    tk_mem_free(ctx, a);
    tk_mem_free(ctx, b);
    tk_mem_free(ctx, c);
    tk_context_destroy(ctx);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("ops_workspace");
    TCase *tc = tcase_create("workspace");
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_add_test(tc, test_fresh_context_holds_none);
    tcase_add_test(tc, test_repeated_calls_allocate_nothing);
    tcase_add_test(tc, test_creeping_needs_grow_by_powers_of_two);
    tcase_add_test(tc, test_one_buffer_per_stream);
    tcase_add_test(tc, test_reset_keeps_what_is_held);
    tcase_add_test(tc, test_gemm_loop_allocates_at_most_once_per_shape_class);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tk_test_main(suite());
}
