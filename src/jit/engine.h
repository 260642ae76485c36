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

/* Tensor map of a row-major fp16 matrix for the bulk tensor copy engine
 * (backend.h, tensor_map_f16): 128 bytes into out (64-byte aligned).
 * TK_UNSUPPORTED (recorded on ctx) where the backend or driver has none. */
tk_status tk__tensor_map_f16(tk_context *ctx, void *out, const void *base, uint64_t rows,
                             uint64_t cols, uint64_t row_bytes, unsigned box_cols,
                             unsigned box_rows);

/* Embedded kernel source by name, or NULL. Static storage. */
const char *tk__embedded_source(const char *name, size_t *len);

/* Implemented by the operator layer (src/ops/embedding.c): frees the device
 * workspaces the operators keep for ctx. tk_context_destroy must call it
 * first, while the context can still free memory. Safe for any context. */
void tk__ops_context_release(tk_context *ctx);

#endif
