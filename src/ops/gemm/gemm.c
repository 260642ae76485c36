/*
 * fp16 GEMM operators (forward, grad_a, grad_b) and their CPU references.
 *
 * Every op is mapped onto one formulation, C[m,n] = sum_k A(m,k) B(k,n), of
 * the kernel in kernel_src/gemm_f16.cu, which reads each operand either
 * K-contiguous or transposed (see that file). The specialiser picks a block
 * tile from the shape (tile table below, measured on an H100: see
 * bench/gemm-measurements.md) and bakes it, the layout, the alignment facts and,
 * under the exact policy, the shape itself as defines.
 *
 * Policies: exact bakes M, N, K (one compile per shape, the compiler folds
 * the bounds); stable (the default) bakes the two weight dimensions, N and K
 * of the op, and passes the token count M at run time (in kernel terms: the
 * kernel's M for forward and grad_a, the reduction length for grad_b);
 * generic passes all three at run time. Under stable and generic the set of
 * kernels for given N and K is fixed: the variant (tile, wgmma or mma.sync,
 * split-K or not, 64 to 256 columns) is a function of the shape, so the
 * token counts fall into a few classes, one kernel each (tk_op_precompile
 * compiles every class). The variant choice is the same under all policies.
 *
 * Fallback (TK_BUILD_ASYNC): while a call's kernel is being built, the call
 * runs on the "universal" kernel of its layout: mma.sync with 64x64 tiles,
 * nothing baked, no split, the call's alignment variant (the scalar AMD /
 * portable kernel on those targets), which serves any shape. One per layout
 * and alignment class, compiled once (a wait, the first time ever) and
 * shared by every N and K.
 *
 * Split-K (NVIDIA, sm_80 and up): shapes with too few output tiles for the
 * chip and a long reduction run gridDim.y = splits block rows, each summing
 * its share of the K tiles into an fp32 workspace [splits][M][N] (the
 * context's operator workspace, src/ops/embedding.c); a second kernel
 * (TK_GEMM_REDUCE) sums the splits in a fixed order and converts to the
 * output type, so results are the same on every run. On sm_90 those shapes
 * take the TMA wgmma kernel with 128x128 tiles (M, N >= 128), else the mma.sync
 * tile. plan_split holds the model.
 *
 * Alignment: fp16 operands need 2-byte aligned pointers and the fp32 output
 * 4-byte ones (TK_MISALIGNED otherwise). The fast variant's 16-byte cp.async
 * loads need both inputs 16-byte aligned with leading dimensions multiple of
 * 8; a large call stages a misaligned operand into the workspace with padded
 * rows (plan.c tk__gemm_plan_stage; launch.c tk__gemm_exec_staged); anything
 * else gets the scalar-load variant of the same kernel (slower, never an
 * error).
 *
 * Files: gemm.c (this: the entry points, validation, the kernel choice of
 * a call and its fallback, precompile), plan.c (the heuristics and their
 * fitted constants), config.c (configurations, their text, tuning records),
 * launch.c (kernel descriptions, launch dimensions, tensor maps, launches),
 * tune.c (the tuner), reference.c (CPU references). The kernels:
 * kernel_src/gemm_f16.cu and kernel_src/gemm/.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/env_vars.h"
#include "ops/gemm/gemm_internal.h"

/* What serves p's call while its kernel is built ($TOKITAI_JIT_GEMM_FALLBACK,
 * read once per process): "universal" only the mma.sync universal kernel;
 * "fast" the fast fallback (tk__gemm_plan_fast) serves every call it can,
 * its own kernel never used (for measuring it); "auto" (the default) the
 * fast fallback where it applies, the universal kernel elsewhere. */
int tk__gemm_plan_fallback(const gemm_plan *p, gemm_plan *f)
{
    enum { AUTO = 0, UNIVERSAL = 1, FAST = 2 }; /* the order of the variable's words */
    static int cached = -1;
    int mode = tk__env_word_once(TK__ENV_GEMM_FALLBACK, AUTO, &cached);
    if (mode == UNIVERSAL || !tk__gemm_plan_fast(p, f))
        return TK__GEMM_FB_UNIVERSAL;
    return mode == FAST ? TK__GEMM_FB_FAST_ONLY : TK__GEMM_FB_FAST;
}

/* The universal kernels of the other two GEMM operators of a training step
 * (the same M, N, K; operands aligned as an allocator returns them), queued
 * when a call must get its own universal kernel on the caller's thread (a
 * compile, the first time on a machine, or a read from disk): the forward's
 * first call is soon followed by grad_a's and grad_b's, which then find
 * theirs built or building instead of compiling each in turn. bench/dynamic,
 * fully cold cache, H100: step 1 took 1.18 s, three universal compiles in a
 * row on the caller's thread. A program that never calls the other two
 * builds two kernels it does not use, once per cache. */
typedef struct gemm_also_user {
    tk_op op;
    int64_t M, N, K;
} gemm_also_user;

static void gemm_queue_siblings(tk_context *ctx, const void *user)
{
    static const tk_op ops[] = {TK_OP_GEMM_F16_FWD, TK_OP_GEMM_F16_GRAD_A, TK_OP_GEMM_F16_GRAD_B};
    const gemm_also_user *c = user;
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        if (ops[i] == c->op)
            continue;
        gemm_plan q, u;
        gemm_desc d;
        tk__gemm_plan_packed_heuristic(ctx, ops[i], c->M, c->N, c->K, &q);
        tk__gemm_plan_universal(&q, &u);
        tk__gemm_build_desc(&u, TK_POLICY_GENERIC, &d);
        tk__op_kernel_request(ctx, &d.desc);
    }
}

/* Validates, plans and launches. The operand names are the op's own. */
static tk_status gemm_run(tk_context *ctx, tk_op op, int64_t M, int64_t N, int64_t K,
                          const void *d_a, int64_t lda, const char *a_name, const char *lda_name,
                          const void *d_b, int64_t ldb, const char *b_name, const char *ldb_name,
                          void *d_c, int64_t ldc, const char *c_name, const char *ldc_name,
                          void *stream, int stage_ok)
{
    gemm_plan p, u, f;
    gemm_desc d, ud, fd, rd;
    tk_kernel *kernel = NULL, *reduce = NULL;
    int64_t blocks;
    unsigned threads, smem;
    tk_status st;

    tk__gemm_plan_op(op, M, N, K, &p);
    st = tk__op_need_device(ctx, p.op);
    if (st != TK_OK)
        return st;
    if ((st = tk__op_check_size(ctx, p.op, "M", M)) != TK_OK ||
        (st = tk__op_check_size(ctx, p.op, "N", N)) != TK_OK ||
        (st = tk__op_check_size(ctx, p.op, "K", K)) != TK_OK)
        return st;
    if ((st = tk__op_check_ptr(ctx, p.op, a_name, d_a, 2)) != TK_OK ||
        (st = tk__op_check_ptr(ctx, p.op, b_name, d_b, 2)) != TK_OK ||
        (st = tk__op_check_ptr(ctx, p.op, c_name, d_c, p.out_f16 ? 2 : 4)) != TK_OK)
        return st;

    /* Kernel operand A is [M,K] (K-major) or [K,M]; B is [N,K] or [K,N];
     * C is [M,N]. Each stored row count x ld must be addressable. */
    p.lda = lda, p.ldb = ldb, p.ldc = ldc;
    {
        const int64_t a_rows = p.a_kmajor ? p.M : p.K, a_cols = p.a_kmajor ? p.K : p.M;
        const int64_t b_rows = p.b_kmajor ? p.N : p.K, b_cols = p.b_kmajor ? p.K : p.N;
        if ((st = tk__op_check_product(ctx, p.op, a_name, a_rows, a_cols, 2)) != TK_OK ||
            (st = tk__op_check_product(ctx, p.op, b_name, b_rows, b_cols, 2)) != TK_OK ||
            (st = tk__op_check_product(ctx, p.op, c_name, p.M, p.N, p.out_f16 ? 2 : 4)) != TK_OK)
            return st;
        if ((st = tk__op_resolve_ld(ctx, p.op, lda_name, &p.lda, a_cols)) != TK_OK ||
            (st = tk__op_resolve_ld(ctx, p.op, ldb_name, &p.ldb, b_cols)) != TK_OK ||
            (st = tk__op_resolve_ld(ctx, p.op, ldc_name, &p.ldc, p.N)) != TK_OK)
            return st;
        if ((st = tk__op_check_product(ctx, p.op, lda_name, a_rows, p.lda, 2)) != TK_OK ||
            (st = tk__op_check_product(ctx, p.op, ldb_name, b_rows, p.ldb, 2)) != TK_OK ||
            (st = tk__op_check_product(ctx, p.op, ldc_name, p.M, p.ldc, p.out_f16 ? 2 : 4)) !=
                TK_OK)
            return st;
    }
    tk__gemm_plan_target(ctx, &p);
    /* operands whose rows are not 16-byte aligned: staged into the
     * workspace when the call is large enough (tk__gemm_plan_stage) */
    const int staged = stage_ok && tk__gemm_plan_stage(&p, d_a, d_b);
    tk__gemm_plan_alignment(&p, p.stage_a ? TK__GEMM_STAGED_PTR : d_a,
                            p.stage_b ? TK__GEMM_STAGED_PTR : d_b, d_c);
    tk__gemm_plan_choose(&p);
    if (!tk__gemm_plan_tuned(ctx, &p) && tk__gemm_tune_mode() == TUNE_AUTO && p.aligned && !p.amd &&
        !p.simple && !staged) {
        /* first use of the class under TOKITAI_JIT_TUNE=auto: tune it on the
         * caller's buffers and stream, then plan again with the record */
        tk__gemm_tune_call(ctx, &p, d_a, d_b, d_c, stream);
    }
    tk__gemm_launch_dims(&p, &blocks, &threads, &smem);
    if ((st = tk__op_check_grid(ctx, p.op, blocks, threads, p.splits)) != TK_OK)
        return st;
    if (p.K / 16 > INT32_MAX) /* the kernels count K tiles in 32-bit */
        return tk__fail(ctx, TK_UNSUPPORTED,
                        "%s: reduction length %lld is beyond the kernel's range", p.op,
                        (long long)p.K);

    tk__gemm_build_desc(&p, tk_context_policy(ctx), &d);
    tk__gemm_plan_universal(&p, &u);
    tk__gemm_build_desc(&u, TK_POLICY_GENERIC, &ud);
    const int fb = tk__gemm_plan_fallback(&p, &f);
    int fast = fb != TK__GEMM_FB_UNIVERSAL;
    if (fast) {
        tk__gemm_build_desc(&f, TK_POLICY_GENERIC, &fd);
        fast = !tk__gemm_desc_same(&d, &fd);
    }
    if (fast && fb == TK__GEMM_FB_FAST_ONLY) {
        /* measuring the fast fallback: it serves the call as its kernel */
        p = f;
        d = fd;
        fast = 0;
        tk__gemm_launch_dims(&p, &blocks, &threads, &smem);
        if ((st = tk__op_check_grid(ctx, p.op, blocks, threads, 1)) != TK_OK)
            return st;
    }
    {
        /* 0: the call's own kernel; 1: the fast fallback; 2: the universal */
        int which = 0;
        const gemm_also_user au = {op, M, N, K};
        const tk__op_also also = {gemm_queue_siblings, &au};
        if (tk__gemm_desc_same(&d, &ud)) {
            st = tk__op_kernel_pick(ctx, &d.desc, NULL, 1, NULL, &kernel, &which);
        } else if (fast) {
            st = tk__op_kernel_pick_fast(ctx, &d.desc, &fd.desc, &ud.desc, &also, &kernel, &which);
        } else {
            st = tk__op_kernel_pick(ctx, &d.desc, &ud.desc, 1, &also, &kernel, &which);
            which *= 2;
        }
        if (st != TK_OK)
            return st;
        if (which != 0 && tk__gemm_plan_reduces(&p)) {
            /* Split-K needs its reduce kernel too: requested with the split
             * kernel, so that both are built when the builds are waited for
             * (else the first call after the wait would find the reduce
             * missing and every call until its build ends would fall back). */
            tk__gemm_build_reduce_desc(&p, &rd);
            tk__op_kernel_request(ctx, &rd.desc);
        } else if (tk__gemm_plan_reduces(&p)) {
            /* ready, or a fallback serves this call while it is built */
            tk__gemm_build_reduce_desc(&p, &rd);
            st = tk__op_kernel_ready(ctx, &rd.desc, &reduce);
            if (st == TK_NOT_FOUND && fast) {
                st = tk__op_kernel_fast(ctx, &fd.desc, &kernel);
                which = 1;
            }
            if (st == TK_NOT_FOUND) {
                st = tk__op_kernel_fallback(ctx, &ud.desc, 1, NULL, &kernel);
                which = 2;
            }
            if (st != TK_OK)
                return st;
        }
        if (which != 0) {
            p = which == 1 ? f : u;
            tk__gemm_launch_dims(&p, &blocks, &threads, &smem);
            if ((st = tk__op_check_grid(ctx, p.op, blocks, threads, 1)) != TK_OK)
                return st;
        }
    }
    if (staged) {
        /* the staging copy's kernel, got after the call's own (which the
         * checked run reports); not ready yet (its build queued): this call
         * runs on the caller's operands as they are */
        tk_kernel *pad = NULL;
        gemm_desc pd;
        tk__gemm_build_pad_desc(&pd);
        st = tk__op_kernel_ready(ctx, &pd.desc, &pad);
        if (st == TK_NOT_FOUND)
            return gemm_run(ctx, op, M, N, K, d_a, lda, a_name, lda_name, d_b, ldb, b_name,
                            ldb_name, d_c, ldc, c_name, ldc_name, stream, 0);
        if (st != TK_OK)
            return st;
        st = tk__gemm_exec_staged(ctx, &p, kernel, reduce, pad, d_a, d_b, d_c, stream);
        if (st != TK__GEMM_STAGE_NO_ROOM)
            return st;
        /* no device memory for the copies: speed lost, not the call */
        return gemm_run(ctx, op, M, N, K, d_a, lda, a_name, lda_name, d_b, ldb, b_name, ldb_name,
                        d_c, ldc, c_name, ldc_name, stream, 0);
    }
    return tk__gemm_exec(ctx, &p, kernel, reduce, d_a, d_b, d_c, stream);
}

tk_status tk_gemm_f16_fwd(tk_context *ctx, int64_t M, int64_t N, int64_t K, const void *d_A,
                          int64_t lda, const void *d_B, int64_t ldb, float *d_C, int64_t ldc,
                          void *stream)
{
    return gemm_run(ctx, TK_OP_GEMM_F16_FWD, M, N, K, d_A, lda, "d_A", "lda", d_B, ldb, "d_B",
                    "ldb", d_C, ldc, "d_C", "ldc", stream, 1);
}

tk_status tk_gemm_f16_grad_a(tk_context *ctx, int64_t M, int64_t N, int64_t K, const void *d_grad_C,
                             int64_t ldgc, const void *d_B, int64_t ldb, void *d_grad_A,
                             int64_t ldga, void *stream)
{
    return gemm_run(ctx, TK_OP_GEMM_F16_GRAD_A, M, N, K, d_grad_C, ldgc, "d_grad_C", "ldgc", d_B,
                    ldb, "d_B", "ldb", d_grad_A, ldga, "d_grad_A", "ldga", stream, 1);
}

tk_status tk_gemm_f16_grad_b(tk_context *ctx, int64_t M, int64_t N, int64_t K, const void *d_A,
                             int64_t lda, const void *d_grad_C, int64_t ldgc, void *d_grad_B,
                             int64_t ldgb, void *stream)
{
    return gemm_run(ctx, TK_OP_GEMM_F16_GRAD_B, M, N, K, d_A, lda, "d_A", "lda", d_grad_C, ldgc,
                    "d_grad_C", "ldgc", d_grad_B, ldgb, "d_grad_B", "ldgb", stream, 1);
}

/* Distinct kernels of a precompile (descriptions compared in full). */
typedef struct desc_set {
    gemm_desc d[128];
    int n, overflow;
} desc_set;

static int desc_set_add(desc_set *set, const gemm_desc *d)
{
    for (int i = 0; i < set->n; i++)
        if (strcmp(set->d[i].desc.entry, d->desc.entry) == 0 && tk__gemm_desc_same(&set->d[i], d))
            return 0;
    if (set->n == (int)(sizeof set->d / sizeof set->d[0])) {
        set->overflow = 1;
        return -1;
    }
    set->d[set->n] = *d;
    /* the copy's defines must point into the copy */
    set->d[set->n].desc.defines = set->d[set->n].defs;
    for (size_t i = 0; i < d->desc.n_defines; i++)
        set->d[set->n].defs[i].value = set->d[set->n].text[i];
    set->n++;
    return 1;
}

static void add_plan(desc_set *set, const gemm_plan *p, tk_policy policy)
{
    gemm_desc d;
    tk__gemm_build_desc(p, policy, &d);
    desc_set_add(set, &d);
    if (tk__gemm_plan_reduces(p)) {
        tk__gemm_build_reduce_desc(p, &d);
        desc_set_add(set, &d);
    }
}

/* Under the exact policy, the kernels of exactly this shape. Under stable and
 * generic, M (the token count) is not part of any kernel, only of the variant
 * choice, so every kernel any M can use with these N and K is compiled: the
 * variant of each M up to M_CLASS_LIMIT and beyond, plus the universal
 * fallback of the layout. A warm cache then serves every token count a
 * training run produces without a compile or a wait. */
tk_status tk__gemm_precompile(tk_context *ctx, tk_op op, const int64_t *dims, unsigned *n_compiled,
                              unsigned *n_cached)
{
    const tk_policy policy = tk_context_policy(ctx);
    gemm_plan p, u;
    desc_set *set;
    tk_status st = TK_OK;

    tk__gemm_plan_op(op, dims[0], dims[1], dims[2], &p);
    if (tk__op_check_product(ctx, p.op, "M x K", dims[0], dims[2], 4) != TK_OK ||
        tk__op_check_product(ctx, p.op, "K x N", dims[2], dims[1], 4) != TK_OK ||
        tk__op_check_product(ctx, p.op, "M x N", dims[0], dims[1], 4) != TK_OK)
        return TK_OVERFLOW;
    set = calloc(1, sizeof *set);
    if (set == NULL)
        return tk__fail(ctx, TK_OUT_OF_MEMORY, "%s: out of memory", p.op);
    if (policy == TK_POLICY_EXACT) {
        tk__gemm_plan_packed(ctx, op, dims[0], dims[1], dims[2], &p);
        add_plan(set, &p, policy);
    } else {
        static const int64_t beyond[] = {M_CLASS_LIMIT * 2, (int64_t)1 << 20, (int64_t)1 << 24};
        for (int64_t m = 1; m <= M_CLASS_LIMIT; m++) {
            tk__gemm_plan_packed(ctx, op, m, dims[1], dims[2], &p);
            add_plan(set, &p, policy);
            if (tk__gemm_plan_fast(&p, &u)) /* the fast fallback of the class */
                add_plan(set, &u, TK_POLICY_GENERIC);
        }
        for (size_t i = 0; i < sizeof beyond / sizeof beyond[0]; i++) {
            if (tk__op_check_product(ctx, p.op, "M x K", beyond[i], dims[2], 4) != TK_OK ||
                tk__op_check_product(ctx, p.op, "M x N", beyond[i], dims[1], 4) != TK_OK)
                break;
            tk__gemm_plan_packed(ctx, op, beyond[i], dims[1], dims[2], &p);
            add_plan(set, &p, policy);
        }
        tk__gemm_plan_packed(ctx, op, dims[0], dims[1], dims[2], &p);
        tk__gemm_plan_universal(&p, &u);
        add_plan(set, &u, TK_POLICY_GENERIC);
    }
    for (int i = 0; st == TK_OK && i < set->n; i++)
        st = tk__op_kernel(ctx, &set->d[i].desc, NULL, n_compiled, n_cached);
    if (st == TK_OK && set->overflow)
        st = tk__fail(ctx, TK_INTERNAL, "%s: more kernel variants than the precompile tracks (%d)",
                      p.op, set->n);
    free(set);
    return st;
}

/* Every kernel that can serve a call of op while its own kernel is built:
 * the universal kernel (tk__gemm_plan_universal) and the fast fallback
 * (tk__gemm_plan_fast) of every alignment class and output shape. Both take
 * M, N and K at run time; the universal kernel depends on the class only,
 * the fast one also on the output's shape through its tile width, so the
 * kernel output sizes M x N are swept from 1 to 2^24 (powers of two and
 * three times them): whatever shapes a width is chosen for, some of them
 * are there, and no width is written down here. Classes: operands
 * 16-byte aligned or not, output pairs aligned or not, and (with pairs) the
 * output fit for the bulk tensor store or not (c16). */
tk_status tk__gemm_precompile_fallbacks(tk_context *ctx, tk_op op, unsigned *n_compiled,
                                        unsigned *n_cached)
{
    static const struct {
        int aligned, vec_out, c16;
    } classes[] = {{0, 0, 0}, {0, 1, 0}, {0, 1, 1}, {1, 0, 0}, {1, 1, 0}, {1, 1, 1}};
    desc_set *set = calloc(1, sizeof *set);
    tk_status st = TK_OK;
    gemm_plan base, p, f;

    if (set == NULL)
        return tk__fail(ctx, TK_OUT_OF_MEMORY, "%s: out of memory", tk_op_name(op));
    tk__gemm_plan_op(op, 1, 1, 1, &base);
    for (size_t c = 0; c < sizeof classes / sizeof classes[0]; c++) {
        for (int64_t m = 1; m <= ((int64_t)1 << 24); m *= 2) {
            for (int64_t n = 1; n <= ((int64_t)1 << 24); n *= 2) {
                for (int k = 0; k < 4; k++) {
                    p = base;
                    p.M = k & 1 ? 3 * m : m; /* the kernel's own M and N */
                    p.N = k & 2 ? 3 * n : n;
                    p.K = 1024;
                    tk__gemm_plan_target(ctx, &p);
                    p.aligned = classes[c].aligned;
                    p.vec_out = classes[c].vec_out;
                    p.c16 = classes[c].c16;
                    tk__gemm_plan_universal(&p, &f);
                    add_plan(set, &f, TK_POLICY_GENERIC);
                    if (tk__gemm_plan_fast(&p, &f))
                        add_plan(set, &f, TK_POLICY_GENERIC);
                }
            }
        }
    }
    /* the staging copy of unaligned operands (tk__gemm_plan_stage), which
     * has no fallback of its own: shared by the three operators, listed
     * with the forward's */
    if (op == TK_OP_GEMM_F16_FWD && !p.amd && !p.simple) {
        gemm_desc pd;
        tk__gemm_build_pad_desc(&pd);
        desc_set_add(set, &pd);
    }
    for (int i = 0; st == TK_OK && i < set->n; i++)
        st = tk__op_kernel(ctx, &set->d[i].desc, NULL, n_compiled, n_cached);
    if (st == TK_OK && set->overflow)
        st = tk__fail(ctx, TK_INTERNAL, "%s: more fallback kernels than the precompile tracks (%d)",
                      tk_op_name(op), set->n);
    free(set);
    return st;
}
