/*
 * Engine internals shared with the operator layer (src/ops). The operators
 * otherwise use the public kernel and memory API only.
 */
#ifndef TK_JIT_ENGINE_H
#define TK_JIT_ENGINE_H

#include "tokitai/tokitai.h"

/* Records a failure on the context (printf-style message) and returns status.
 * Thread-safe. */
tk_status tk__fail(tk_context *ctx, tk_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Logs through the context's callback / TOKITAI_JIT_LOG. */
void tk__log(tk_context *ctx, tk_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* 1 when the context has a device (can allocate and launch), 0 for an
 * offline-target context. */
int tk__ctx_has_device(const tk_context *ctx);

/* Tensor map of a row-major fp16 (elem_bytes 2) or fp32 (4) matrix for the
 * bulk tensor copy engine (backend.h, tensor_map_f16): 128 bytes into out
 * (64-byte aligned), 128-byte swizzle, box_cols x box_rows boxes.
 * TK_UNSUPPORTED (recorded on ctx) where the backend or driver has none. */
tk_status tk__tensor_map_f16(tk_context *ctx, void *out, const void *base, uint64_t rows,
                             uint64_t cols, uint64_t row_bytes, unsigned box_cols,
                             unsigned box_rows, unsigned elem_bytes);

/* tk_kernel_launch allowing programmatic dependent launch where the backend
 * has it (CUDA 12+ drivers): the kernel may start while the stream's previous
 * kernel finishes, so it must execute griddepcontrol.wait before it reads or
 * writes global memory. Elsewhere a plain launch. */
tk_status tk__kernel_launch_pdl(tk_context *ctx, const tk_kernel *kernel, const unsigned grid[3],
                                const unsigned block[3], unsigned shared_bytes, void *stream,
                                void **args);

/* Multiprocessors of the context's device (asked once, then remembered); 0
 * without a device or when the backend does not say. */
int tk__ctx_sm_count(tk_context *ctx);

/* Tuning records (src/jit/records.c): a text value (< TK__RECORD_MAX bytes)
 * per (kind, name) for the context's backend, compiler and target, kept in
 * the cache (source "tune:<kind>", kernel = name) and remembered per context.
 * get: TK_OK and value filled (size: TK__RECORD_MAX suffices), or
 * TK_NOT_FOUND. put: stores it (and uses it in this process from now on);
 * TK_UNSUPPORTED when the cache cannot take it (disabled, read-only: kept
 * for the process only). */
#define TK__RECORD_MAX 16384
tk_status tk__record_get(tk_context *ctx, const char *kind, const char *name, char *value,
                         size_t size);
tk_status tk__record_put(tk_context *ctx, const char *kind, const char *name, const char *value);
/* Process-wide counter that changes with every put and every context's end:
 * a cache of parsed records is valid while it is unchanged. */
unsigned tk__record_generation(void);

/* Embedded kernel source by name, or NULL. Static storage. */
const char *tk__embedded_source(const char *name, size_t *len);

/* ------------------------------------------------ state of upper layers */

/* Attaches data to ctx under tag (any address the caller owns, compared by
 * identity). tk_context_destroy calls destroy(ctx, data) for each attachment,
 * newest first, before anything else is torn down: the device can still free
 * memory then. TK_INVALID_ARGUMENT when tag is already attached. Thread-safe. */
tk_status tk__ctx_attach(tk_context *ctx, const void *tag, void *data,
                         void (*destroy)(tk_context *ctx, void *data));
/* The data attached under tag, or NULL. Thread-safe. */
void *tk__ctx_attached(tk_context *ctx, const void *tag);

/* Accounts an operator workspace change for tk_context_stats: `freed` bytes
 * given back, then `allocated` bytes taken in one device allocation (0: none).
 * Thread-safe. */
void tk__ctx_note_workspace(tk_context *ctx, size_t freed, size_t allocated);

/* --------------------------------------------------- background builds */

/* Build mode of the context (tk_config_set_build_mode). */
tk_build_mode tk__ctx_build_mode(const tk_context *ctx);

/* The kernel for desc (an embedded source) when it is ready: in memory, or
 * on disk (loaded now; no compile). Otherwise returns TK_NOT_FOUND without
 * recording an error (and without a disk probe when a build of it is queued,
 * running or failed), so that the caller serves the call with a more generic
 * kernel; with queue set it first queues a background build of desc (once:
 * a build already known is not asked for again). Other statuses are real
 * failures (recorded). */
tk_status tk__kernel_get_or_queue(tk_context *ctx, const tk_kernel_desc *desc, int queue,
                                  tk_kernel **out);
/* Queues a background build of desc unless it is known (see above). */
void tk__kernel_queue(tk_context *ctx, const tk_kernel_desc *desc);

/* The kernel for desc when it is in memory or on disk; TK_NOT_FOUND (not
 * recorded) otherwise. Never compiles. */
tk_status tk__kernel_find(tk_context *ctx, const tk_kernel_desc *desc, tk_kernel **out);

/* Counts one operator call served by a fallback kernel. */
void tk__ctx_count_fallback(tk_context *ctx);

#endif
