/*
 * Shared by the operator files (src/ops). Validation helpers write a message
 * naming the argument on the context (tk__fail) and return its status.
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

/* Per-family precompile hooks behind tk_op_precompile (ops/common.c). */
tk_status tk__gemm_precompile(tk_context *ctx, tk_op op, const int64_t *dims,
                              unsigned *n_compiled, unsigned *n_cached);
tk_status tk__softmax_precompile(tk_context *ctx, tk_op op, const int64_t *dims,
                                 unsigned *n_compiled, unsigned *n_cached);
tk_status tk__embedding_precompile(tk_context *ctx, tk_op op, const int64_t *dims,
                                   unsigned *n_compiled, unsigned *n_cached);

/* Gets (or, on an offline context, precompiles) a kernel and counts where it
 * came from. With launch == NULL only precompiles. */
tk_status tk__op_kernel(tk_context *ctx, const tk_kernel_desc *desc, tk_kernel **kernel,
                        unsigned *n_compiled, unsigned *n_cached);

#endif
