/* Sized out-structs (tokitai.h, "sized structs"): the library fills a whole
 * struct of its own, then copies no more than the caller's struct_size. Header
 * only, so every layer (cache, jit, ops, cli) can use it without an include
 * running up the layers. */
#ifndef TK_COMMON_OUT_STRUCT_H
#define TK_COMMON_OUT_STRUCT_H

#include <stddef.h>
#include <string.h>

/* The caller's struct_size, read without assuming the struct is ours. */
static inline size_t tk__out_size(const void *out)
{
    size_t n;
    memcpy(&n, out, sizeof n);
    return n;
}

/* Non-zero when out is NULL or its struct_size cannot hold even the size. */
static inline int tk__out_bad(const void *out)
{
    return out == NULL || tk__out_size(out) < sizeof(size_t);
}

/* Whether the caller's struct (struct_size caller_size) holds the field that
 * ends at byte end (offsetof + sizeof). */
static inline int tk__out_covers(size_t caller_size, size_t end)
{
    return end <= caller_size;
}

/* Copies full, the library's struct of full_size bytes (its struct_size
 * ignored), into out up to out's struct_size, and sets out's struct_size to
 * the bytes written. */
static inline void tk__out_copy(void *out, const void *full, size_t full_size)
{
    size_t n = tk__out_size(out);
    if (n > full_size)
        n = full_size;
    memcpy((char *)out + sizeof(size_t), (const char *)full + sizeof(size_t), n - sizeof(size_t));
    memcpy(out, &n, sizeof n);
}

#endif
