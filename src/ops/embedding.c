/*
 * Embedding forward and backward: validation, variant choice, launch, and
 * the device workspace of the backward. Kernels: kernel_src/embedding_f16.cu
 * (forward copy, backward gather) and kernel_src/embedding_sort.cu.
 *
 * Forward: vectorised row copies (TK_VEC the widest of 8/4/2/1 halves
 * dividing D with weight and out aligned to it), TK_TR threads per row.
 *
 * Backward: one algorithm for both modes, deterministic by construction:
 * keys (row << 32 | q) of the valid queries are sorted on the device (bitonic,
 * O(Q log^2 Q) in a few launches), then the head block of each run of equal
 * rows adds grad_out rows in ascending q into fp32 registers starting from the
 * current grad_weight value and rounds once. No fp32 copy of the table and no
 * atomics: only the touched rows are read and written, and the bits do not
 * depend on the schedule, so TK_EMBEDDING_DETERMINISTIC costs nothing extra.
 * A very frequent row is summed by one block per column chunk (serial in q),
 * which is the price of the fixed order.
 *
 * Workspace: the sort needs 8 bytes per query (rounded up to a power of two),
 * from the operators' per-(context, stream) workspace (ops/common.c).
 */
#include <stdio.h>
#include <stdlib.h>

#include "ops/ops_internal.h"

/* ----------------------------------------------------------------- plans */

typedef struct emb_plan {
    unsigned vec, tr, block;
    int64_t blocks, grid_y;
    char d_vec[12], d_tr[12], d_block[12], d_d[24]; /* u32: 10 digits + NUL */
    tk_define defs[5];
    size_t n_defs;
    const char *entry;
} emb_plan;

static unsigned next_pow2(uint64_t v)
{
    unsigned p = 1;
    while (p < v && p < (1u << 30))
        p <<= 1;
    return p;
}

static void plan_make(tk_policy policy, int bwd, int64_t D, int64_t Q, unsigned vec, emb_plan *p)
{
    const int64_t nvec = D / vec;
    p->vec = vec;
    p->n_defs = 0;
    if (!bwd) {
        p->tr = next_pow2((uint64_t)nvec);
        if (p->tr > 256)
            p->tr = 256;
        p->block = 256;
        p->blocks = (Q + (p->block / p->tr) - 1) / (p->block / p->tr);
        p->grid_y = 1;
        p->entry = "tk_embedding_f16_fwd";
    } else {
        p->tr = 0;
        p->block = next_pow2((uint64_t)nvec);
        if (p->block < 32)
            p->block = 32;
        if (p->block > 256)
            p->block = 256;
        p->blocks = Q;
        p->grid_y = (nvec + p->block - 1) / p->block;
        p->entry = "tk_embedding_f16_bwd_gather";
        p->defs[p->n_defs++] = (tk_define){"TK_BWD", NULL};
    }
    tk__op_put_dec(p->d_vec, p->vec);
    tk__op_put_dec(p->d_tr, p->tr);
    tk__op_put_dec(p->d_block, p->block);
    tk__op_put_dec(p->d_d, D);
    p->defs[p->n_defs++] = (tk_define){"TK_VEC", p->d_vec};
    p->defs[p->n_defs++] = (tk_define){"TK_BLOCK", p->d_block};
    if (!bwd)
        p->defs[p->n_defs++] = (tk_define){"TK_TR", p->d_tr};
    if (policy != TK_POLICY_GENERIC)
        p->defs[p->n_defs++] = (tk_define){"TK_D", p->d_d};
}

static tk_kernel_desc plan_desc(const emb_plan *p)
{
    tk_kernel_desc d = {0};
    d.source_name = "embedding_f16";
    d.entry = p->entry;
    d.defines = p->defs;
    d.n_defines = p->n_defs;
    return d;
}

static tk_kernel_desc sort_desc(const char *entry)
{
    tk_kernel_desc d = {0};
    d.source_name = "embedding_sort";
    d.entry = entry;
    return d;
}

static const char *const sort_entries[] = {"tk_embedding_sort_keys", "tk_embedding_sort_local",
                                           "tk_embedding_sort_global", "tk_embedding_sort_merge"};

#define SORT_L 2048 /* TK_SORT_L of embedding_sort.cu */

static tk_status check_shape(tk_context *ctx, const char *op, int64_t V, int64_t D, int64_t Q)
{
    tk_status st = tk__op_check_size(ctx, op, "V", V);
    if (st == TK_OK)
        st = tk__op_check_size(ctx, op, "D", D);
    if (st == TK_OK)
        st = tk__op_check_size(ctx, op, "Q", Q);
    if (st == TK_OK)
        st = tk__op_check_product(ctx, op, "V x D", V, D, 2);
    if (st == TK_OK)
        st = tk__op_check_product(ctx, op, "Q x D", Q, D, 2);
    /* The backward packs q into 32 bits and launches one block per query. */
    if (st == TK_OK && Q > INT32_MAX)
        st = tk__fail(ctx, TK_UNSUPPORTED, "%s: Q must be <= %d (got %lld)", op, INT32_MAX,
                      (long long)Q);
    return st;
}

/* ------------------------------------------------------------------- ops */

tk_status tk_embedding_f16_fwd(tk_context *ctx, int64_t V, int64_t D, const void *d_weight,
                               int64_t Q, const int32_t *d_idx, void *d_out, uint32_t *d_bad_count,
                               void *stream)
{
    static const char op[] = "tk_embedding_f16_fwd";
    emb_plan p, pg;
    tk_kernel *k = NULL;
    tk_kernel_desc d, dg;
    int used_fallback;
    tk_status st = tk__op_need_device(ctx, op);
    if (st == TK_OK)
        st = check_shape(ctx, op, V, D, Q);
    if (st == TK_OK)
        st = tk__op_check_ptr(ctx, op, "d_weight", d_weight, 2);
    if (st == TK_OK)
        st = tk__op_check_ptr(ctx, op, "d_idx", d_idx, 4);
    if (st == TK_OK)
        st = tk__op_check_ptr(ctx, op, "d_out", d_out, 2);
    if (st == TK_OK && d_bad_count != NULL)
        st = tk__op_check_ptr(ctx, op, "d_bad_count", d_bad_count, 4);
    if (st != TK_OK)
        return st;
    {
        const void *ptrs[2] = {d_weight, d_out};
        plan_make(tk_context_policy(ctx), 0, D, Q, tk__op_vec_width(D, ptrs, 2), &p);
        plan_make(TK_POLICY_GENERIC, 0, D, Q, tk__op_vec_width(D, ptrs, 2), &pg);
    }
    st = tk__op_check_grid(ctx, op, p.blocks, p.block, 1);
    if (st != TK_OK)
        return st;
    d = plan_desc(&p);
    dg = plan_desc(&pg);
    st = tk__op_kernel_pick(ctx, &d, tk_context_policy(ctx) != TK_POLICY_GENERIC ? &dg : NULL, 1, NULL,
                            &k, &used_fallback);
    if (st != TK_OK)
        return st;
    {
        unsigned grid[3] = {(unsigned)p.blocks, 1, 1}, block[3] = {p.block, 1, 1};
        void *args[] = {&d_weight, &V, &D, &d_idx, &Q, &d_out, &d_bad_count};
        return tk_kernel_launch(ctx, k, grid, block, 0, stream, args);
    }
}

tk_status tk_embedding_f16_bwd(tk_context *ctx, int64_t V, int64_t D, void *d_grad_weight,
                               int64_t Q, const int32_t *d_idx, const void *d_grad_out,
                               unsigned flags, uint32_t *d_bad_count, void *stream)
{
    static const char op[] = "tk_embedding_f16_bwd";
    emb_plan p, pg;
    tk_kernel *kg = NULL, *ks[4] = {NULL, NULL, NULL, NULL};
    tk_kernel_desc d, dg;
    int used_fallback;
    int64_t P = 1, L;
    void *ws = NULL;
    tk_status st = tk__op_need_device(ctx, op);
    if (st == TK_OK)
        st = check_shape(ctx, op, V, D, Q);
    if (st == TK_OK)
        st = tk__op_check_ptr(ctx, op, "d_grad_weight", d_grad_weight, 2);
    if (st == TK_OK)
        st = tk__op_check_ptr(ctx, op, "d_idx", d_idx, 4);
    if (st == TK_OK)
        st = tk__op_check_ptr(ctx, op, "d_grad_out", d_grad_out, 2);
    if (st == TK_OK && d_bad_count != NULL)
        st = tk__op_check_ptr(ctx, op, "d_bad_count", d_bad_count, 4);
    if (st == TK_OK && (flags & ~TK_EMBEDDING_DETERMINISTIC) != 0)
        st = tk__fail(ctx, TK_INVALID_ARGUMENT, "%s: unknown flags 0x%x", op,
                      flags & ~TK_EMBEDDING_DETERMINISTIC);
    if (st != TK_OK)
        return st;
    while (P < Q)
        P <<= 1;
    L = P < SORT_L ? P : SORT_L;
    {
        const void *ptrs[2] = {d_grad_weight, d_grad_out};
        plan_make(tk_context_policy(ctx), 1, D, Q, tk__op_vec_width(D, ptrs, 2), &p);
        plan_make(TK_POLICY_GENERIC, 1, D, Q, tk__op_vec_width(D, ptrs, 2), &pg);
    }
    st = tk__op_check_grid(ctx, op, p.blocks, p.block, p.grid_y);
    if (st == TK_OK)
        st = tk__op_check_grid(ctx, op, (P + 255) / 256, 256, 1);
    if (st != TK_OK)
        return st;
    /* Every kernel first (the gather first: it is the one reported by the
     * checked run), so a compile failure enqueues nothing. */
    d = plan_desc(&p);
    dg = plan_desc(&pg);
    st = tk__op_kernel_pick(ctx, &d, tk_context_policy(ctx) != TK_POLICY_GENERIC ? &dg : NULL, 1, NULL,
                            &kg, &used_fallback);
    /* The sort kernels have no specialisation: one of each serves every call. */
    for (int i = 0; st == TK_OK && i < 4; i++) {
        d = sort_desc(sort_entries[i]);
        st = tk__op_kernel(ctx, &d, &ks[i], NULL, NULL);
    }
    if (st != TK_OK)
        return st;

    st = tk__op_workspace_acquire(ctx, stream, (size_t)P * 8u, &ws);
    if (st == TK_OK) {
        unsigned b256[3] = {256, 1, 1}, b1024[3] = {1024, 1, 1};
        unsigned grid[3] = {(unsigned)((P + 255) / 256), 1, 1};
        void *a_keys[] = {&d_idx, &Q, &V, &P, &ws, &d_bad_count};
        st = tk_kernel_launch(ctx, ks[0], grid, b256, 0, stream, a_keys);
        if (st == TK_OK) {
            void *a_local[] = {&ws, &L};
            grid[0] = (unsigned)(P / L);
            st = tk_kernel_launch(ctx, ks[1], grid, b1024, 0, stream, a_local);
        }
        for (int64_t k = 2 * L; st == TK_OK && k <= P; k <<= 1) {
            for (int64_t j = k / 2; st == TK_OK && j >= L; j >>= 1) {
                void *a_glob[] = {&ws, &P, &k, &j};
                grid[0] = (unsigned)((P / 2 + 255) / 256);
                st = tk_kernel_launch(ctx, ks[2], grid, b256, 0, stream, a_glob);
            }
            if (st == TK_OK) {
                void *a_merge[] = {&ws, &k};
                grid[0] = (unsigned)(P / SORT_L);
                st = tk_kernel_launch(ctx, ks[3], grid, b1024, 0, stream, a_merge);
            }
        }
        if (st == TK_OK) {
            unsigned g2[3] = {(unsigned)p.blocks, (unsigned)p.grid_y, 1};
            unsigned b2[3] = {p.block, 1, 1};
            void *a_gather[] = {&ws, &Q, &D, &d_grad_out, &d_grad_weight};
            st = tk_kernel_launch(ctx, kg, g2, b2, 0, stream, a_gather);
        }
        tk__op_workspace_release(ctx);
    }
    return st;
}

tk_status tk__embedding_precompile(tk_context *ctx, tk_op op, const int64_t *dims,
                                   unsigned *n_compiled, unsigned *n_cached)
{
    const char *name = tk_op_name(op);
    const int bwd = op == TK_OP_EMBEDDING_F16_BWD;
    emb_plan p;
    tk_kernel_desc d;
    tk_status st = check_shape(ctx, name, dims[0], dims[1], dims[2]);
    if (st != TK_OK)
        return st;
    plan_make(tk_context_policy(ctx), bwd, dims[1], dims[2], tk__op_vec_width(dims[1], NULL, 0),
              &p);
    d = plan_desc(&p);
    st = tk__op_kernel(ctx, &d, NULL, n_compiled, n_cached);
    for (int i = 0; bwd && st == TK_OK && i < 4; i++) {
        d = sort_desc(sort_entries[i]);
        st = tk__op_kernel(ctx, &d, NULL, n_compiled, n_cached);
    }
    return st;
}

/* The GENERIC kernel of every variant: what serves a call under the stable
 * and exact policies while its own kernel is built (and under the generic
 * policy, the call's own kernel); the backward's sort kernels too, which
 * every backward needs and no policy specialises. A variant is a vector
 * width and the threads per row (forward: the power of two at or above D
 * over the width, at most 256) or per block (backward: the same, 32 to
 * 256), so D = width x a power of two from 1 to 256 reaches each one. */
tk_status tk__embedding_precompile_fallbacks(tk_context *ctx, tk_op op, unsigned *n_compiled,
                                             unsigned *n_cached)
{
    static const unsigned widths[] = {8, 4, 2, 1};
    const int bwd = op == TK_OP_EMBEDDING_F16_BWD;
    tk_status st = TK_OK;
    for (size_t w = 0; st == TK_OK && w < sizeof widths / sizeof widths[0]; w++) {
        /* backward: below 32 vectors the block stays at 32 threads */
        for (int64_t nvec = bwd ? 32 : 1; st == TK_OK && nvec <= 256; nvec *= 2) {
            emb_plan p;
            plan_make(TK_POLICY_GENERIC, bwd, nvec * widths[w], 1, widths[w], &p);
            tk_kernel_desc d = plan_desc(&p);
            st = tk__op_kernel(ctx, &d, NULL, n_compiled, n_cached);
        }
    }
    for (int i = 0; bwd && st == TK_OK && i < 4; i++) {
        tk_kernel_desc d = sort_desc(sort_entries[i]);
        st = tk__op_kernel(ctx, &d, NULL, n_compiled, n_cached);
    }
    return st;
}
