/*
 * libFuzzer target for what the library reads out of a code object taken
 * from the cache: a cubin's per-kernel parameter records and kernel list
 * (cuda.c: kernel_params, list_kernels; no vendor library involved), the
 * stub's signature parse, the demangler (symbols.c) on the stored
 * lowered names, and the reading of kernel declarations (decl.c) with the
 * object as source text. Input: one byte n, n bytes of symbol, then the object.
 * Oracle: no crash, and whatever comes back is within the object's bounds
 * (a parameter's offset + size fits 32 bits, the list is NUL-terminated).
 * Built by -DTK_BUILD_FUZZ=ON (clang); see tests/fuzz/CMakeLists.txt.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "jit/backend/backend.h"
#include "jit/decl.h"
#include "jit/symbols.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void one(const tk__backend *be, const char *symbol, const uint8_t *code, size_t size)
{
    tk__err e = {.msg = "", .log = NULL};
    tk__param *p = NULL;
    size_t n = 0;
    if (be->kernel_params(code, size, symbol, &p, &n, &e) == TK_OK) {
        for (size_t i = 0; i < n; i++)
            if ((uint64_t)p[i].offset + p[i].size > UINT32_MAX + (uint64_t)UINT32_MAX)
                abort();
        free(p);
    }
    char *list = NULL;
    if (be->list_kernels(code, size, &list, &e) == TK_OK) {
        if (strlen(list) > size + 1)
            abort(); /* the names come out of the object */
        free(list);
    }
    free(e.log);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || (size_t)data[0] + 1 > size)
        return 0;
    char symbol[256];
    memcpy(symbol, data + 1, data[0]);
    symbol[data[0]] = '\0';
    const uint8_t *code = data + 1 + data[0];
    size_t code_size = size - 1 - data[0];
    /* The backends read a private copy, as the engine hands them its own. */
    uint8_t *copy = malloc(code_size + 1);
    if (!copy)
        return 0;
    memcpy(copy, code, code_size);
    copy[code_size] = 0;
    one(tk__backend_cuda(), symbol, copy, code_size);
    one(tk__backend_stub(), symbol, copy, code_size);
    /* Declarations of symbol with 0 to 8 parameters: whatever is read, each
     * kind is a tk_param_kind. */
    static const uint32_t sizes[8] = {8, 4, 2, 1, 8, 12, 0, 4};
    int decl_kinds[8];
    const char *texts[] = {(const char *)copy};
    const tk__decl_macro macros[] = {{"T", "float"}, {"P", NULL}};
    for (size_t want = 0; want <= 8; want++)
        if (tk__decl_kinds(texts, 1, macros, 2, symbol, sizes, want, decl_kinds) > 0)
            for (size_t i = 0; i < want; i++)
                if (decl_kinds[i] < TK_PARAM_UNKNOWN || decl_kinds[i] > TK_PARAM_STRUCT)
                    abort();
    free(copy);

    char shown[600], base[256];
    int kinds[64];
    size_t n = 0;
    tk__demangle(symbol, shown, sizeof shown);
    tk__symbol_base(symbol, base, sizeof base);
    if (tk__demangle_kinds(symbol, kinds, 64, &n) && n > 64)
        abort();
    return 0;
}
