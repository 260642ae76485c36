/*
 * Helpers shared by the backend files: loading vendor libraries with dlopen,
 * resolving a list of symbols written once as an X-macro, and identifying a
 * compiler library by its ELF build id. Internal to src/jit/backend.
 *
 * Each backend writes its vendor function list once:
 *
 *     #define MY_FUNCS(X) X(cuInit, int, (unsigned flags)) ...
 *     TK__DL_TABLE(my_table, MY_FUNCS)      -> struct my_table { int (*cuInit)(unsigned); ... }
 *     #define MY_SYM(n, r, p) TK__DL_SYM(my_table, n)
 *     static const tk__dl_sym my_syms[] = {MY_FUNCS(MY_SYM)};
 *
 * and tk__dl_resolve fills the struct, naming the first missing symbol.
 */
#ifndef TK_JIT_BACKEND_DL_H
#define TK_JIT_BACKEND_DL_H

#include <stddef.h>
#include <stdint.h>

#include "jit/backend/backend.h"

typedef struct tk__dl_sym {
    const char *name;
    size_t offset; /* of the function pointer inside the table struct */
} tk__dl_sym;

#define TK__DL_MEMBER(name, ret, params) ret(*name) params;
#define TK__DL_TABLE(tag, LIST)                                                                    \
    struct tag {                                                                                   \
        LIST(TK__DL_MEMBER)                                                                        \
    };
/* Entry of a symbol list: pass as X with the table's struct tag bound by a
 * one-line wrapper, e.g. #define CU_SYM(n, r, p) TK__DL_SYM(cu_table, n) */
#define TK__DL_SYM(tag, name) {#name, offsetof(struct tag, name)},

/* Opens the first library of candidates (NULL-terminated) that dlopen
 * accepts; env_override, when set in the environment, replaces the list
 * (used by the tests to point a backend at a library that does not exist).
 * On failure returns NULL and writes every name tried with dlerror's reason
 * into err. The path actually opened goes into opened. */
void *tk__dl_open_first(const char *env_override, const char *const *candidates, char *opened,
                        size_t opened_size, tk__err *err);

/* Resolves every symbol of syms into table; TK_BACKEND_UNAVAILABLE naming
 * the first missing symbol and its library. */
tk_status tk__dl_resolve(void *lib, const char *lib_name, const tk__dl_sym *syms, size_t n_syms,
                         void *table, tk__err *err);

/* Absolute path of the loaded object that defines addr (dladdr), or "". */
void tk__dl_path_of(const void *addr, char *buf, size_t size);

/* Identity of a loaded library: its ELF build id in hex (read from the
 * mapped notes, no file I/O), else an XXH3-64 of the file's contents.
 * TK_NOT_FOUND when neither can be had. */
tk_status tk__dl_library_id(const void *addr_in_lib, char *buf, size_t size);

/* Appends printf-style text to buf (size bytes, always NUL-terminated). */
void tk__strcat_fmt(char *buf, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
