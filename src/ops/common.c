/*
 * Shared pieces of the operator layer: argument validation with messages
 * naming the op and the argument, operator identities and the kernel getter
 * that counts where kernels came from.
 *
 * Includes within the layer point one way: registry.c (the per-op table
 * behind tk_op_precompile / tk_op_tune) -> gemm.c, softmax.c, embedding.c
 * -> common.c. This file calls no op family, so there is no circle.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops_internal.h"

tk_status tk__op_need_device(tk_context *ctx, const char *op)
{
    if (ctx == NULL)
        return TK_INVALID_ARGUMENT; /* no context to write a message on */
    if (!tk__ctx_has_device(ctx))
        return tk__fail(ctx, TK_NO_DEVICE,
                        "%s: the context has no device (offline target %s): it can compile, "
                        "not run",
                        op, tk_context_target(ctx));
    return TK_OK;
}

tk_status tk__op_check_size(tk_context *ctx, const char *op, const char *name, int64_t value)
{
    if (value <= 0)
        return tk__fail(ctx, TK_INVALID_ARGUMENT, "%s: %s must be > 0 (got %lld)", op, name,
                        (long long)value);
    return TK_OK;
}

tk_status tk__op_check_ptr(tk_context *ctx, const char *op, const char *name, const void *ptr,
                           unsigned align)
{
    if (ptr == NULL)
        return tk__fail(ctx, TK_INVALID_ARGUMENT, "%s: %s must not be NULL", op, name);
    if (align > 1 && ((uintptr_t)ptr % align) != 0)
        return tk__fail(ctx, TK_MISALIGNED, "%s: %s (%p) must be aligned to %u bytes", op, name,
                        ptr, align);
    return TK_OK;
}

tk_status tk__op_resolve_ld(tk_context *ctx, const char *op, const char *name, int64_t *ld,
                            int64_t row)
{
    if (*ld == 0) {
        *ld = row;
        return TK_OK;
    }
    if (*ld < row)
        return tk__fail(ctx, TK_INVALID_ARGUMENT, "%s: %s must be 0 (packed) or >= %lld (got %lld)",
                        op, name, (long long)row, (long long)*ld);
    return TK_OK;
}

tk_status tk__op_check_product(tk_context *ctx, const char *op, const char *what, int64_t a,
                               int64_t b, int64_t elem)
{
    /* Sizes were checked > 0 before; the bound keeps every byte offset a
     * kernel computes (and size_t on the host) representable. */
    if (a > 0 && b > 0 && elem > 0 && a <= INT64_MAX / b && a * b <= INT64_MAX / elem &&
        (uint64_t)(a * b * elem) <= (uint64_t)SIZE_MAX)
        return TK_OK;
    return tk__fail(ctx, TK_OVERFLOW, "%s: %s = %lld x %lld elements of %lld bytes overflows", op,
                    what, (long long)a, (long long)b, (long long)elem);
}

unsigned tk__op_vec_width(int64_t n, const void *const *ptrs, int n_ptrs)
{
    static const unsigned widths[] = {8, 4, 2};
    for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++) {
        unsigned v = widths[w];
        int ok = (n % v) == 0;
        for (int i = 0; ok && i < n_ptrs; i++)
            if (ptrs[i] != NULL && ((uintptr_t)ptrs[i] % (v * 2u)) != 0)
                ok = 0;
        if (ok)
            return v;
    }
    return 1;
}

tk_status tk__op_check_grid(tk_context *ctx, const char *op, int64_t blocks, unsigned block,
                            int64_t grid_y)
{
    /* CUDA: grid.x < 2^31, grid.y < 2^16; HIP: grid.x * block.x < 2^32. */
    if (blocks < 1 || blocks > INT32_MAX || (uint64_t)blocks * block > UINT32_MAX || grid_y < 1 ||
        grid_y > 65535)
        return tk__fail(ctx, TK_UNSUPPORTED,
                        "%s: shape needs a launch of %lld x %lld blocks of %u threads, beyond "
                        "what the device accepts",
                        op, (long long)blocks, (long long)grid_y, block);
    return TK_OK;
}

const char *tk__op_policy_name(tk_policy policy)
{
    switch (policy) {
    case TK_POLICY_GENERIC:
        return "generic";
    case TK_POLICY_STABLE:
        return "stable";
    default:
        return "exact";
    }
}

/* ------------------------------------------------------------ identities */

static const char *const op_names[TK_OP_COUNT] = {
    "gemm_f16_fwd",         "gemm_f16_grad_a",   "gemm_f16_grad_b",   "softmax_f16_fwd",
    "softmax_xent_f16_bwd", "embedding_f16_fwd", "embedding_f16_bwd",
};

const char *tk_op_name(tk_op op)
{
    if ((int)op < 0 || op >= TK_OP_COUNT)
        return NULL;
    return op_names[op];
}

tk_status tk_op_from_name(const char *name, tk_op *out)
{
    if (name == NULL || out == NULL)
        return TK_INVALID_ARGUMENT;
    for (int i = 0; i < TK_OP_COUNT; i++) {
        if (strcmp(name, op_names[i]) == 0) {
            *out = (tk_op)i;
            return TK_OK;
        }
    }
    return TK_NOT_FOUND;
}

const char *tk_op_dims(tk_op op, int *n_dims)
{
    const char *dims;
    int n;
    switch (op) {
    case TK_OP_GEMM_F16_FWD:
    case TK_OP_GEMM_F16_GRAD_A:
    case TK_OP_GEMM_F16_GRAD_B:
        dims = "M,N,K";
        n = 3;
        break;
    case TK_OP_SOFTMAX_F16_FWD:
    case TK_OP_SOFTMAX_XENT_F16_BWD:
        dims = "rows,cols";
        n = 2;
        break;
    case TK_OP_EMBEDDING_F16_FWD:
    case TK_OP_EMBEDDING_F16_BWD:
        dims = "V,D,Q";
        n = 3;
        break;
    default:
        return NULL;
    }
    if (n_dims != NULL)
        *n_dims = n;
    return dims;
}

/* --------------------------------------------------------------- kernels */

/* Decimal text of v (negative: 0) at out; returns the end. No printf: every
 * operator call formats its kernel's defines (snprintf cost the softmax
 * call about 1 us of host time for its 16 defines). */
char *tk__op_put_dec(char *out, int64_t v)
{
    char tmp[24];
    int n = 0;
    uint64_t u = v < 0 ? 0 : (uint64_t)v;
    do {
        tmp[n++] = (char)('0' + (int)(u % 10));
        u /= 10;
    } while (u != 0);
    while (n > 0)
        *out++ = tmp[--n];
    *out = '\0';
    return out;
}

static _Thread_local tk__op_trace op_trace;

void tk__op_trace_begin(void)
{
    memset(&op_trace, 0, sizeof op_trace);
}

const tk__op_trace *tk__op_trace_get(void)
{
    return &op_trace;
}

static void trace_record(const tk_kernel_desc *desc, tk_kernel *k, int fallback)
{
    if (op_trace.n_kernels++ == 0) {
        op_trace.first = k;
        snprintf(op_trace.source_name, sizeof op_trace.source_name, "%s",
                 desc->source_name != NULL ? desc->source_name : "user");
    }
    if (fallback)
        op_trace.n_fallback++;
}

tk_status tk__op_kernel(tk_context *ctx, const tk_kernel_desc *desc, tk_kernel **kernel,
                        unsigned *n_compiled, unsigned *n_cached)
{
    tk_origin origin = TK_ORIGIN_MEMORY;
    tk_status st;

    if (kernel == NULL || !tk__ctx_has_device(ctx)) {
        /* Precompile path: compile into the cache, load nothing. */
        st = tk_kernel_precompile(ctx, desc, &origin);
        if (st != TK_OK)
            return st;
        if (kernel != NULL)
            return tk__fail(ctx, TK_NO_DEVICE, "%s: the context has no device to load %s on",
                            desc->entry, desc->entry);
    } else {
        tk_kernel *k = NULL;
        tk_kernel_info info = TK_STRUCT_INIT(tk_kernel_info);
        st = tk_kernel_get(ctx, desc, &k);
        if (st != TK_OK)
            return st;
        if (tk_kernel_get_info(k, &info) == TK_OK)
            origin = info.origin;
        trace_record(desc, k, 0);
        *kernel = k;
    }
    if (origin == TK_ORIGIN_COMPILED) {
        if (n_compiled != NULL)
            (*n_compiled)++;
    } else if (n_cached != NULL) {
        (*n_cached)++;
    }
    return TK_OK;
}

tk_status tk__op_kernel_ready(tk_context *ctx, const tk_kernel_desc *desc, tk_kernel **kernel)
{
    tk_kernel *k = NULL;
    tk_status st;
    if (!tk__ctx_has_device(ctx) || tk__ctx_build_mode(ctx) == TK_BUILD_SYNC)
        return tk__op_kernel(ctx, desc, kernel, NULL, NULL);
    st = tk__kernel_get_or_queue(ctx, desc, 1, &k);
    if (st != TK_OK)
        return st;
    trace_record(desc, k, 0);
    *kernel = k;
    return TK_OK;
}

tk_status tk__op_kernel_fallback(tk_context *ctx, const tk_kernel_desc *fallback, int compile,
                                 const tk__op_also *also, tk_kernel **kernel)
{
    tk_kernel *k = NULL;
    tk_status st = tk__kernel_find(ctx, fallback, &k);
    if (st == TK_NOT_FOUND && compile) {
        if (also != NULL)
            also->queue(ctx, also->user);
        st = tk_kernel_get(ctx, fallback, &k);
    }
    if (st != TK_OK)
        return st;
    trace_record(fallback, k, 1);
    tk__ctx_count_fallback(ctx);
    *kernel = k;
    return TK_OK;
}

void tk__op_kernel_request(tk_context *ctx, const tk_kernel_desc *desc)
{
    if (tk__ctx_has_device(ctx) && tk__ctx_build_mode(ctx) != TK_BUILD_SYNC)
        tk__kernel_queue(ctx, desc);
}

tk_status tk__op_kernel_fast(tk_context *ctx, const tk_kernel_desc *fast, tk_kernel **kernel)
{
    tk_kernel *k = NULL;
    tk_status st = tk__kernel_get_or_queue(ctx, fast, 1, &k);
    if (st != TK_OK)
        return st;
    trace_record(fast, k, 1);
    tk__ctx_count_fallback(ctx);
    *kernel = k;
    return TK_OK;
}

tk_status tk__op_kernel_pick_fast(tk_context *ctx, const tk_kernel_desc *best,
                                  const tk_kernel_desc *fast, const tk_kernel_desc *fallback,
                                  const tk__op_also *also, tk_kernel **kernel, int *which)
{
    tk_status st;
    tk_kernel *k = NULL;
    *which = 0;
    if (!tk__ctx_has_device(ctx) || tk__ctx_build_mode(ctx) == TK_BUILD_SYNC)
        return tk__op_kernel(ctx, best, kernel, NULL, NULL);
    st = tk__kernel_get_or_queue(ctx, best, 0, &k);
    if (st == TK_OK) {
        trace_record(best, k, 0);
        *kernel = k;
        return TK_OK;
    }
    if (st != TK_NOT_FOUND)
        return st;
    /* the fast fallback is requested first: it serves every shape of the
     * layout */
    st = tk__op_kernel_fast(ctx, fast, kernel);
    if (st == TK_OK) {
        tk__kernel_queue(ctx, best);
        *which = 1;
        return TK_OK;
    }
    if (st != TK_NOT_FOUND)
        return st;
    st = tk__op_kernel_fallback(ctx, fallback, 1, also, kernel);
    if (st != TK_OK)
        return st;
    tk__kernel_queue(ctx, best);
    *which = 2;
    return TK_OK;
}

tk_status tk__op_kernel_pick(tk_context *ctx, const tk_kernel_desc *best,
                             const tk_kernel_desc *fallback, int compile_fallback,
                             const tk__op_also *also, tk_kernel **kernel, int *used_fallback)
{
    tk_status st;
    *used_fallback = 0;
    tk_kernel *k = NULL;
    if (fallback == NULL || !tk__ctx_has_device(ctx) || tk__ctx_build_mode(ctx) == TK_BUILD_SYNC)
        return tk__op_kernel(ctx, best, kernel, NULL, NULL);
    st = tk__kernel_get_or_queue(ctx, best, 0, &k);
    if (st == TK_OK) {
        trace_record(best, k, 0);
        *kernel = k;
        return TK_OK;
    }
    if (st != TK_NOT_FOUND)
        return st;
    /* The fallback first (a compile of it runs alone), then the build. */
    st = tk__op_kernel_fallback(ctx, fallback, compile_fallback, also, kernel);
    if (st == TK_OK) {
        tk__kernel_queue(ctx, best);
        *used_fallback = 1;
        return TK_OK;
    }
    if (st != TK_NOT_FOUND)
        return st;
    /* Nothing usable yet (only with compile_fallback unset): this call waits
     * for the kernel it prefers. */
    return tk__op_kernel(ctx, best, kernel, NULL, NULL);
}

/* ------------------------------------------------------------- workspace
 *
 * Device memory some operators need (embedding backward's sort keys, GEMM
 * split-K partials), kept per (context, stream) in a set attached to the
 * context and freed with it. Keying by stream lets calls on different
 * streams run concurrently without sharing a buffer; the set's lock is held
 * from taking the buffer until the last launch is enqueued, so a concurrent
 * call on the same stream cannot free it in between.
 *
 * No allocation per call: a call that fits the stream's buffer uses it as it
 * is. A call that needs more syncs that stream (pending work using the old
 * buffer must finish), frees the buffer and allocates the need rounded up to
 * a power of two (at least 1 MiB), so a run whose needs creep upwards (a MoE
 * step's token counts) allocates O(log) times, not once per new maximum.
 * Never shrunk. Bound per stream, the largest of:
 *   1 MiB                       the smallest buffer;
 *   64 MiB                      GEMM split-K partials (splits x M x N fp32,
 *                               capped by SPLIT_WS_MAX in ops/gemm/plan.c: a shape
 *                               that would need more is not split);
 *   8 x 2^ceil(log2 Q) bytes    embedding backward with Q lookups (its sort
 *                               keys; 128 KiB at Q = 16384, 8 MiB at 2^20).
 * tk_context_stats reports the bytes held, the peak and the allocations.
 */

typedef struct ws_entry {
    void *stream;
    void *ptr;
    size_t size;
} ws_entry;

typedef struct ws_set {
    pthread_mutex_t mu;
    ws_entry *e;
    size_t n, cap;
} ws_set;

static const char ws_tag = 'w';

static void ws_destroy(tk_context *ctx, void *data)
{
    ws_set *set = data;
    /* The caller's streams may be gone by now, so none is synced here: a
     * context is destroyed after the work enqueued through it has finished,
     * and the backend's free waits for the device as cuMemFree does. */
    for (size_t i = 0; i < set->n; i++)
        if (set->e[i].ptr != NULL)
            (void)tk_mem_free(ctx, set->e[i].ptr);
    free(set->e);
    pthread_mutex_destroy(&set->mu);
    free(set);
}

static ws_set *ws_set_get(tk_context *ctx)
{
    ws_set *set = tk__ctx_attached(ctx, &ws_tag);
    if (set != NULL)
        return set;
    set = calloc(1, sizeof *set);
    if (set == NULL)
        return NULL;
    if (pthread_mutex_init(&set->mu, NULL) != 0) {
        free(set);
        return NULL;
    }
    if (tk__ctx_attach(ctx, &ws_tag, set, ws_destroy) != TK_OK) {
        /* Another thread attached one first (or no memory): use that. */
        pthread_mutex_destroy(&set->mu);
        free(set);
        return tk__ctx_attached(ctx, &ws_tag);
    }
    return set;
}

/* set->mu held */
static tk_status ws_get(tk_context *ctx, ws_set *set, void *stream, size_t need, void **out)
{
    ws_entry *e = NULL;
    tk_status st;
    for (size_t i = 0; i < set->n; i++)
        if (set->e[i].stream == stream)
            e = &set->e[i];
    if (e == NULL) {
        if (set->n == set->cap) {
            size_t cap = set->cap ? set->cap * 2 : 4;
            ws_entry *t = realloc(set->e, cap * sizeof *t);
            if (t == NULL)
                return tk__fail(ctx, TK_OUT_OF_MEMORY, "operator workspace: out of host memory");
            set->e = t;
            set->cap = cap;
        }
        e = &set->e[set->n++];
        e->stream = stream;
        e->ptr = NULL;
        e->size = 0;
    }
    if (e->size < need) {
        void *p = NULL;
        size_t size = (size_t)1 << 20;
        while (size < need && size <= SIZE_MAX / 2)
            size <<= 1;
        if (size < need)
            size = need;
        if (e->ptr != NULL) {
            st = tk_stream_sync(ctx, stream);
            if (st != TK_OK)
                return st;
            tk_mem_free(ctx, e->ptr);
            tk__ctx_note_workspace(ctx, e->size, 0);
            e->ptr = NULL;
            e->size = 0;
        }
        st = tk_mem_alloc(ctx, size, &p);
        if (st != TK_OK)
            return st;
        tk__ctx_note_workspace(ctx, 0, size);
        e->ptr = p;
        e->size = size;
    }
    *out = e->ptr;
    return TK_OK;
}

tk_status tk__op_workspace_acquire(tk_context *ctx, void *stream, size_t need, void **out)
{
    tk_status st;
    ws_set *set = ws_set_get(ctx);
    if (set == NULL)
        return tk__fail(ctx, TK_OUT_OF_MEMORY, "operator workspace: out of host memory");
    pthread_mutex_lock(&set->mu);
    st = ws_get(ctx, set, stream, need, out);
    if (st != TK_OK)
        pthread_mutex_unlock(&set->mu);
    return st;
}

void tk__op_workspace_release(tk_context *ctx)
{
    ws_set *set = tk__ctx_attached(ctx, &ws_tag);
    if (set != NULL)
        pthread_mutex_unlock(&set->mu);
}
