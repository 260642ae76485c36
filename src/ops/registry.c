/*
 * The operator registry: one row per op naming its family's precompile and
 * tune entry points. It is the top of the ops layer: it calls into gemm.c,
 * softmax.c and embedding.c, which call only common.c below them, so the
 * per-op dispatch is this table and not a circle through common.c.
 */
#include <stdlib.h>

#include "common/out_struct.h"
#include "ops/ops_internal.h"

typedef tk_status (*precompile_fn)(tk_context *ctx, tk_op op, const int64_t *dims,
                                   unsigned *n_compiled, unsigned *n_cached);
typedef tk_status (*tune_fn)(tk_context *ctx, tk_op op, const int64_t *dims,
                             tk_tune_report *rep);
typedef tk_status (*fallbacks_fn)(tk_context *ctx, tk_op op, unsigned *n_compiled,
                                  unsigned *n_cached);

typedef struct op_row {
    precompile_fn precompile;
    tune_fn tune;           /* NULL: the op's kernel follows from its shape */
    fallbacks_fn fallbacks; /* NULL: no fallback shared by every shape (softmax: the
                             * GENERIC kernel of the call's row-length bucket) */
} op_row;

static const op_row k_ops[TK_OP_COUNT] = {
    [TK_OP_GEMM_F16_FWD] = {tk__gemm_precompile, tk__gemm_tune, tk__gemm_precompile_fallbacks},
    [TK_OP_GEMM_F16_GRAD_A] = {tk__gemm_precompile, tk__gemm_tune, tk__gemm_precompile_fallbacks},
    [TK_OP_GEMM_F16_GRAD_B] = {tk__gemm_precompile, tk__gemm_tune, tk__gemm_precompile_fallbacks},
    [TK_OP_SOFTMAX_F16_FWD] = {tk__softmax_precompile, NULL, NULL},
    [TK_OP_SOFTMAX_XENT_F16_BWD] = {tk__softmax_precompile, NULL, NULL},
    [TK_OP_EMBEDDING_F16_FWD] = {tk__embedding_precompile, NULL,
                                 tk__embedding_precompile_fallbacks},
    [TK_OP_EMBEDDING_F16_BWD] = {tk__embedding_precompile, NULL,
                                 tk__embedding_precompile_fallbacks},
};

/* The checks tk_op_precompile and tk_op_tune share (ctx not NULL): a known
 * op, its number of dims, each > 0. */
static tk_status check_op_dims(tk_context *ctx, const char *fn, tk_op op, const int64_t *dims,
                               int n_dims)
{
    int want = 0;
    if (tk_op_dims(op, &want) == NULL)
        return tk__fail(ctx, TK_INVALID_ARGUMENT, "%s: unknown op %d", fn, (int)op);
    if (dims == NULL || n_dims != want)
        return tk__fail(ctx, TK_INVALID_ARGUMENT, "%s: %s takes %d dims (%s), got %d", fn,
                        tk_op_name(op), want, tk_op_dims(op, NULL), dims == NULL ? 0 : n_dims);
    for (int i = 0; i < n_dims; i++) {
        tk_status st = tk__op_check_size(ctx, tk_op_name(op), "dims[i]", dims[i]);
        if (st != TK_OK)
            return st;
    }
    return TK_OK;
}

tk_status tk_op_precompile(tk_context *ctx, tk_op op, const int64_t *dims, int n_dims,
                           unsigned *n_compiled, unsigned *n_cached)
{
    unsigned compiled = 0, cached = 0;
    tk_status st;

    if (ctx == NULL)
        return TK_INVALID_ARGUMENT;
    if ((st = check_op_dims(ctx, "tk_op_precompile", op, dims, n_dims)) != TK_OK)
        return st;
    st = k_ops[op].precompile(ctx, op, dims, &compiled, &cached);
    if (st != TK_OK)
        return st;
    if (n_compiled != NULL)
        *n_compiled = compiled;
    if (n_cached != NULL)
        *n_cached = cached;
    return TK_OK;
}

tk_status tk_op_precompile_fallbacks(tk_context *ctx, tk_op op, unsigned *n_compiled,
                                     unsigned *n_cached)
{
    unsigned compiled = 0, cached = 0;
    tk_status st = TK_OK;

    if (ctx == NULL)
        return TK_INVALID_ARGUMENT;
    if (op != TK_OP_COUNT && tk_op_name(op) == NULL)
        return tk__fail(ctx, TK_INVALID_ARGUMENT, "tk_op_precompile_fallbacks: unknown op %d",
                        (int)op);
    for (int i = 0; i < TK_OP_COUNT && st == TK_OK; i++)
        if ((op == TK_OP_COUNT || (int)op == i) && k_ops[i].fallbacks != NULL)
            st = k_ops[i].fallbacks(ctx, (tk_op)i, &compiled, &cached);
    if (st != TK_OK)
        return st;
    if (n_compiled != NULL)
        *n_compiled = compiled;
    if (n_cached != NULL)
        *n_cached = cached;
    return TK_OK;
}

tk_status tk_op_tune(tk_context *ctx, tk_op op, const int64_t *dims, int n_dims,
                     tk_tune_report *out)
{
    tk_status st;
    if (ctx == NULL)
        return TK_INVALID_ARGUMENT;
    if (tk__out_bad(out))
        return tk__fail(ctx, TK_INVALID_ARGUMENT,
                        "tk_op_tune: the report must not be NULL and its struct_size must be set "
                        "(TK_STRUCT_INIT(tk_tune_report))");
    if ((st = check_op_dims(ctx, "tk_op_tune", op, dims, n_dims)) != TK_OK)
        return st;
    if (k_ops[op].tune == NULL)
        return tk__fail(ctx, TK_UNSUPPORTED,
                        "tk_op_tune: %s has nothing to tune (its kernel follows from the shape)",
                        tk_op_name(op));
    /* The tuner fills a whole report of ours; the caller gets what its
     * struct_size covers, and only on success. */
    tk_tune_report *full = calloc(1, sizeof *full);
    if (full == NULL)
        return tk__fail(ctx, TK_OUT_OF_MEMORY, "tk_op_tune: out of host memory");
    full->struct_size = sizeof *full;
    st = k_ops[op].tune(ctx, op, dims, full);
    if (st == TK_OK)
        tk__out_copy(out, full, sizeof *full);
    free(full);
    return st;
}
