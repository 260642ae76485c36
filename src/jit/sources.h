/*
 * User sources as the compiler reads them: include resolution, the record of
 * every lookup (the "deps" of a cache entry) and its check on a disk hit,
 * name expressions. No dependency on the context: sources.c reads files and
 * hashes text, nothing else.
 *
 * Resolution of `#include "x"` / `#include <x>` in the user's source and in
 * every header found (each file scanned once):
 *   1. for "x" in a header read from disk: that header's folder;
 *   2. the in-memory headers (tk_kernel_desc.headers), by exact name;
 *   3. each -I folder of the caller's options, in order.
 * An absolute x names itself. What is found is handed to the compiler as an
 * in-memory header under a generated name (tk_inc/<n>/<base>), its first line
 * a #line naming the real file, so messages name the user's file and line.
 * Not found: the line is left to the compiler (toolkit headers).
 *
 * Deps record: one line per distinct lookup,
 *     <q|a> TAB <includer folder, or empty> TAB <spelling> TAB <result> TAB <hash>
 * result "" (not found), "m:<name>" (in-memory; its text is in the key) or
 * "f:<path>"; hash: 32 hex digits of XXH3-128 of a file's bytes, else "-".
 * A lookup re-runs every lookup (resolving the source again) and compares
 * the record with the stored one: any difference (an edited header, a new
 * file earlier in the search order, a vanished one) is a miss. Resolution
 * is deterministic, so equal records mean equal lookups.
 */
#ifndef TK_JIT_SOURCES_H
#define TK_JIT_SOURCES_H

#include <stddef.h>

#include "tokitai/tokitai.h"

/* A growable NUL-terminated string; failed is set (and the text stops
 * growing) when an allocation fails. Zero-initialise; free(p) when done. */
typedef struct tk__sbuf {
    char *p;
    size_t len, cap;
    int failed;
} tk__sbuf;
void tk__sb_add(tk__sbuf *b, const char *s, size_t n);
void tk__sb_str(tk__sbuf *b, const char *s);

typedef struct tk__search {
    const char *const *dirs; /* -I folders, in order (borrowed) */
    size_t n_dirs;
    const tk_header *mem; /* in-memory headers (borrowed) */
    size_t n_mem;
} tk__search;

typedef struct tk__srcset {
    char *main;      /* the user's source, include lines rewritten */
    size_t n_files;  /* headers for the compiler */
    char **names;    /* their include names */
    char **texts;    /* their rewritten texts */
    char *deps;      /* the lookups, see above ("" when none) */
    int uncacheable; /* a computed include: compile, never store */
    char why[256];   /* the first computed include, for the log */
} tk__srcset;

/* Scans -I options ("-Idir", "-I dir", "--include-path=dir",
 * "--include-path dir"): *dirs gets a malloc'd array of pointers into opts
 * (NULL when none). TK_OUT_OF_MEMORY only. */
tk_status tk__search_dirs(const char *const *opts, size_t n_opts, const char ***dirs,
                          size_t *n_dirs);

/* Pre-includes among the options ("--pre-include=x", "--pre-include x",
 * "-include x"): *prefix gets `#include "x"` lines (malloc'd, NULL when
 * none) for the library to resolve like any include, and *skip a mask
 * (malloc'd, NULL when none) of the options the compiler must then not see.
 * TK_OUT_OF_MEMORY only. */
tk_status tk__pre_includes(const char *const *opts, size_t n_opts, char **prefix,
                           unsigned char **skip);

/* Resolves text's includes. On failure (TK_OUT_OF_MEMORY, TK_IO_ERROR for a
 * found header that cannot be read, TK_INVALID_ARGUMENT for a header with a
 * NUL or too deep a chain) msg names the file. */
tk_status tk__sources_resolve(const char *text, const tk__search *s, tk__srcset *out, char *msg,
                              size_t msg_size);
void tk__srcset_free(tk__srcset *set);

/* 1 for a plain identifier (an extern "C" name), 0 otherwise. */
int tk__is_identifier(const char *s);
/* 1 for a name expression the library passes to the compiler: one line, no
 * quotes, braces, semicolons or preprocessor characters, at most 1000 bytes. */
int tk__is_name_expression(const char *s);

#endif
