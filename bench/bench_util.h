/*
 * Shared by the benchmark programs: the one context a program measures with,
 * a CHECK that names the failing call and the library's message and exits,
 * and device allocation through the library.
 */
#ifndef TK_BENCH_UTIL_H
#define TK_BENCH_UTIL_H

#include <stdio.h>
#include <stdlib.h>

#include "tokitai/tokitai.h"

static tk_context *g_ctx;

#define CHECK(expr)                                                                                \
    do {                                                                                           \
        tk_status st_ = (expr);                                                                    \
        if (st_ != TK_OK) {                                                                        \
            fprintf(stderr, "%s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #expr, tk_status_str(st_), \
                    tk_context_last_error(g_ctx));                                                 \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static void *dalloc(size_t bytes)
{
    void *p = NULL;
    CHECK(tk_mem_alloc(g_ctx, bytes, &p));
    return p;
}

#endif
