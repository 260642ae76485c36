/*
 * Kernel declarations read from source text: the parameter kinds of
 * `__global__ ... name(<params>)`, for code objects that record only sizes
 * (an extern "C" function on NVIDIA has no mangled name to read them from;
 * on AMD only pointers are marked). A careful reading, not a compiler: what
 * it cannot follow stays TK_PARAM_UNKNOWN, never guessed. No dependency on
 * the rest of the engine.
 */
#ifndef TK_JIT_DECL_H
#define TK_JIT_DECL_H

#include <stddef.h>
#include <stdint.h>

/* A macro the compiler is given (-Dname=value; value NULL: "1"). */
typedef struct tk__decl_macro {
    const char *name;
    const char *value;
} tk__decl_macro;

/* Reads every declaration or definition of the kernel called name (an
 * identifier, possibly qualified, "k" or "ns::k": the last part is looked
 * for; a template or cast expression is not looked up) in texts. A
 * declaration is used when it has n parameters and every parameter whose
 * size it knows has sizes[i] bytes (the sizes the code object records);
 * kinds[i] gets the kind all the used declarations agree on, else
 * TK_PARAM_UNKNOWN.
 *
 * Types: the builtin scalars, the <stdint.h> names, size_t, ptrdiff_t,
 * __half; pointers and arrays (const, volatile, restrict and
 * __grid_constant__ dropped); vector types (float4, int2, half2, ...) and
 * any name declared as a struct, class or union in texts are structs. A
 * type name is followed through macros (macros first, as -D options
 * override the source, then #define lines), typedef and using aliases,
 * four levels deep; a name with several definitions that disagree (#if
 * branches) stays unknown, as do templates, references, enums, bfloat16
 * and types from headers not in texts. Returns the number of declarations
 * used (0: kinds are all unknown). */
size_t tk__decl_kinds(const char *const *texts, size_t n_texts, const tk__decl_macro *macros,
                      size_t n_macros, const char *name, const uint32_t *sizes, size_t n,
                      int *kinds);

#endif
