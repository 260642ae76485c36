/*
 * Kernel symbols: a small Itanium demangler for the names NVRTC and hipRTC
 * give C++ kernels (`_Z<len><name><parameters>`, namespaces, simple
 * templates), enough to show a kernel as "name(float*, int)" in error
 * messages and to tell a pointer from a 64-bit integer or a double among
 * its parameters. Names it cannot read are shown as they are. No
 * dependency on the rest of the engine.
 */
#ifndef TK_JIT_SYMBOLS_H
#define TK_JIT_SYMBOLS_H

#include <stddef.h>

/* Parameter kinds (tk_param_kind) of a mangled function name, in order;
 * *n gets the count. 0 when the name is not mangled or not understood (or
 * has more than max parameters). "_Z3fooPfi" gives POINTER, INT. */
int tk__demangle_kinds(const char *mangled, int *kinds, size_t max, size_t *n);

/* "name(float*, int)" for a mangled name (qualified names keep their
 * namespaces, templates their arguments where they are simple); the
 * symbol itself when it is not mangled or not understood. */
void tk__demangle(const char *mangled, char *buf, size_t size);

/* The unqualified function name of a symbol ("foo" for "_Z3fooPfi" and for
 * "foo"), for matching a plain name against a listing; "" when unknown. */
void tk__symbol_base(const char *symbol, char *buf, size_t size);

#endif
