/*
 * Shared by the operator files (src/ops). Validation helpers write a message
 * naming the argument on the context (tk__fail) and return its status.
 *
 * Calls inside the layer run one way: check.c -> the families (gemm/,
 * softmax.c, embedding.c) and registry.c -> common.c, f16.c, reference.c.
 * Precompile and tune reach a family through registry.c's table of
 * per-op hooks (a deliberate dispatch table), never through common.c, so
 * no two files call each other. Inside gemm/ the entry points (gemm.c) use
 * tune.c, which uses launch.c, which uses config.c (configurations and
 * tuning records), which uses plan.c (the heuristics); nothing below calls
 * back up.
 */
#ifndef TK_OPS_INTERNAL_H
#define TK_OPS_INTERNAL_H

#include <stdint.h>

#include "jit/engine.h"
#include "tokitai/ops.h"

/* ctx non-NULL and able to launch (TK_NO_DEVICE otherwise). */
tk_status tk__op_need_device(tk_context *ctx, const char *op);
/* value > 0 (TK_INVALID_ARGUMENT naming `name` otherwise). */
tk_status tk__op_check_size(tk_context *ctx, const char *op, const char *name, int64_t value);
/* ptr non-NULL and aligned to `align` bytes. */
tk_status tk__op_check_ptr(tk_context *ctx, const char *op, const char *name, const void *ptr,
                           unsigned align);
/* *ld == 0 -> row; else *ld >= row (TK_INVALID_ARGUMENT naming `name`). */
tk_status tk__op_resolve_ld(tk_context *ctx, const char *op, const char *name, int64_t *ld,
                            int64_t row);
/* a * b (* c when c != 1) fits in int64 and in bytes of `elem` (TK_OVERFLOW). */
tk_status tk__op_check_product(tk_context *ctx, const char *op, const char *what, int64_t a,
                               int64_t b, int64_t elem);

/* Per-family precompile and tune hooks: the rows of the op table behind
 * tk_op_precompile and tk_op_tune (ops/registry.c). */
tk_status tk__gemm_precompile(tk_context *ctx, tk_op op, const int64_t *dims, unsigned *n_compiled,
                              unsigned *n_cached);
tk_status tk__gemm_tune(tk_context *ctx, tk_op op, const int64_t *dims, tk_tune_report *rep);
tk_status tk__softmax_precompile(tk_context *ctx, tk_op op, const int64_t *dims,
                                 unsigned *n_compiled, unsigned *n_cached);
/* For tests: the defines ("TK_VEC=8 TK_G=256 ...") of the kernel a softmax
 * call of op would take with n arrays (2 forward, 3 backward) whose base
 * pointers lie offsets[i] halves past an aligned address, leading
 * dimensions lds[i] (clusters: 0 none, 1 an sm_90 or later target, 2 one
 * whose clusters may hold 16 blocks; n is clamped to 1..3, lds and offsets
 * hold that many). */
void tk__softmax_plan_text(tk_op op, tk_policy policy, int64_t rows, int64_t cols,
                           const int64_t *lds, const unsigned *offsets, int n, int clusters,
                           char *buf, size_t size);
tk_status tk__embedding_precompile(tk_context *ctx, tk_op op, const int64_t *dims,
                                   unsigned *n_compiled, unsigned *n_cached);
/* The fallback hooks behind tk_op_precompile_fallbacks: every kernel that
 * can serve a call of op while its own kernel is built, each compiled or
 * found once. */
tk_status tk__gemm_precompile_fallbacks(tk_context *ctx, tk_op op, unsigned *n_compiled,
                                        unsigned *n_cached);
tk_status tk__embedding_precompile_fallbacks(tk_context *ctx, tk_op op, unsigned *n_compiled,
                                             unsigned *n_cached);

/* Gets (or, on an offline context, precompiles) a kernel and counts where it
 * came from (n_compiled / n_cached may be NULL). With kernel == NULL it only
 * precompiles (tk_kernel_precompile, on any context). */
tk_status tk__op_kernel(tk_context *ctx, const tk_kernel_desc *desc, tk_kernel **kernel,
                        unsigned *n_compiled, unsigned *n_cached);

/* Trace of the kernels one operator call obtained, per thread, for the
 * checked run: tk__op_trace_begin() clears it; tk__op_kernel records the
 * first kernel obtained afterwards (and its embedded source name). */
typedef struct tk__op_trace {
    const tk_kernel *first;
    char source_name[64];
    unsigned n_kernels;
    unsigned n_fallback; /* kernels that stood in for a specialisation not ready */
} tk__op_trace;
void tk__op_trace_begin(void);
const tk__op_trace *tk__op_trace_get(void);

/* Operator kernels and the build mode (tk_build_mode).
 *
 * tk__op_kernel_ready: the kernel for desc when it is ready; in
 * TK_BUILD_ASYNC mode on a device, TK_NOT_FOUND (not recorded) after queuing
 * a background build when it is not; in TK_BUILD_SYNC mode (or offline) it
 * compiles like tk__op_kernel.
 * tk__op_kernel_fallback: a fallback kernel from memory or disk, else
 * (compile set) compiled now, else TK_NOT_FOUND; counted as a fallback call.
 * tk__op_kernel_pick: best when ready; else the fallback (compiled now only
 * when compile_fallback: a kernel serving many shapes, worth one wait); else
 * best compiled now. *used_fallback tells which served.
 * `also` (may be NULL): when a fallback is not in memory and is got on the
 * caller's thread (read from disk, or compiled: the first time on a
 * machine), also->queue runs first and queues the kernels the next calls
 * will want, so that they build meanwhile instead of each in turn. */
typedef struct tk__op_also {
    void (*queue)(tk_context *ctx, const void *user);
    const void *user;
} tk__op_also;
tk_status tk__op_kernel_ready(tk_context *ctx, const tk_kernel_desc *desc, tk_kernel **kernel);
tk_status tk__op_kernel_fallback(tk_context *ctx, const tk_kernel_desc *fallback, int compile,
                                 const tk__op_also *also, tk_kernel **kernel);
/* Queues a background build of desc (unless it is known) on a device
 * context in an asynchronous build mode; nothing otherwise. For a kernel a
 * call will need with the one it requested (GEMM split-K's reduce). */
void tk__op_kernel_request(tk_context *ctx, const tk_kernel_desc *desc);
/* A fallback kernel when it is ready (in memory or on disk), counted as a
 * fallback call; else TK_NOT_FOUND at once (never waiting for its build in
 * flight), its background build requested. */
tk_status tk__op_kernel_fast(tk_context *ctx, const tk_kernel_desc *fast, tk_kernel **kernel);
/* tk__op_kernel_pick with two fallbacks: best when ready; else `fast` when
 * ready (tk__op_kernel_fast; best requested); else `fallback` (compiled now
 * when needed), with fast requested before best. *which: 0 best, 1 fast, 2
 * fallback. */
tk_status tk__op_kernel_pick_fast(tk_context *ctx, const tk_kernel_desc *best,
                                  const tk_kernel_desc *fast, const tk_kernel_desc *fallback,
                                  const tk__op_also *also, tk_kernel **kernel, int *which);
tk_status tk__op_kernel_pick(tk_context *ctx, const tk_kernel_desc *best,
                             const tk_kernel_desc *fallback, int compile_fallback,
                             const tk__op_also *also, tk_kernel **kernel, int *used_fallback);

/* Decimal text of v (negative: 0) at out, NUL-terminated (at most 20
 * digits); returns the end. For the defines every call formats. */
char *tk__op_put_dec(char *out, int64_t v);

/* Largest vector width in halves (8, 4, 2 or 1) such that n % width == 0 and
 * every non-NULL pointer in ptrs is aligned to width * 2 bytes. */
unsigned tk__op_vec_width(int64_t n, const void *const *ptrs, int n_ptrs);

/* Launch-size guard shared by the ops: grid.x * block within what both
 * vendors accept (TK_UNSUPPORTED otherwise). */
tk_status tk__op_check_grid(tk_context *ctx, const char *op, int64_t blocks, unsigned block,
                            int64_t grid_y);

/* Short text of the context's policy: "exact" / "generic". */
const char *tk__op_policy_name(tk_policy policy);

/* The device workspace of (ctx, stream), at least need bytes, shared by the
 * operators (ops/common.c; attached to the context, freed when it is
 * destroyed). On TK_OK the context's workspace lock is held: enqueue the work
 * that uses *out, then call tk__op_workspace_release(ctx). On failure the
 * lock is not held. Growing it syncs the stream before the old buffer is
 * freed. */
tk_status tk__op_workspace_acquire(tk_context *ctx, void *stream, size_t need, void **out);
void tk__op_workspace_release(tk_context *ctx);

#endif
