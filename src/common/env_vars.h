/*
 * Every TOKITAI_JIT_* variable read anywhere in tokitai-jit, with the parser
 * of its value, and the one reader of each: a bad value is then taken the
 * same way for every variable. The library's and the tool's variables:
 * refused, the default is used and said (a warning on the log of each
 * context created while it is set, in `tokitai-jit --info`, by
 * tk_env_check); where the default would be dangerous the value is an error
 * instead. The Python package's and the bindings' build scripts' variables
 * are listed so that setting one is not taken for a misspelling; their own
 * readers parse them.
 *
 * Header only, so that every layer (cache, jit, ops, cli) reads through it
 * without an include running up the layers. It calls nothing but the C
 * library and src/common/size.h.
 * docs/environment.md is this table in prose; tests/test_env.c holds the
 * table to the docs and to every getenv in src/.
 */
#ifndef TK_COMMON_ENV_VARS_H
#define TK_COMMON_ENV_VARS_H

#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/size.h"
#include "tokitai/tokitai.h"

/* How a value is parsed. */
typedef enum tk__env_parser {
    TK__ENV_P_WORD,   /* one of the row's words */
    TK__ENV_P_BOOL,   /* 0/1, true/false, yes/no, on/off (any case) */
    TK__ENV_P_SIZE,   /* common/size.h: 500M, 5G, 1048576 */
    TK__ENV_P_MS,     /* milliseconds, 1 to 3600000 */
    TK__ENV_P_DIR,    /* an absolute path under 4096 bytes */
    TK__ENV_P_TIERS,  /* "none", or ':'-separated absolute paths (each under 4096 bytes)
                       * and the word "shipped" */
    TK__ENV_P_URL,    /* the remote tier's URL: its own parser decides (remote.c) */
    TK__ENV_P_SECRET, /* bytes, at most 4096 (tk_config_set_remote_key's limit) */
    TK__ENV_P_OUTSIDE /* read outside the library and the tool: not checked here */
} tk__env_parser;

/* What a refused value does. */
typedef enum tk__env_on_bad {
    TK__ENV_WARN,  /* a warning, the default used */
    TK__ENV_ERROR, /* an error of what reads it: the default would be dangerous */
    TK__ENV_THEIRS /* up to the reader outside the library (the "reader" column) */
} tk__env_on_bad;

/* When the library reads a variable: the context's (and its operators')
 * variables are reported on a context's log, the cache's also on the log of
 * a tk_cache_open handle. */
typedef enum tk__env_when {
    TK__ENV_AT_CONTEXT,
    TK__ENV_AT_CACHE,
    TK__ENV_AT_OUTSIDE /* the Python package, the bindings' build scripts */
} tk__env_when;

/* X(ID, parser, words, on_bad, when, default, reader): the variable is
 * TOKITAI_JIT_<ID>. default says what an unset, empty or refused value means
 * (shown in warnings and docs); reader, the code that reads it. */
#define TK__ENV_VARS(X)                                                                            \
    X(BACKEND, WORD, "auto cuda hip stub", ERROR, CONTEXT,                                         \
      "auto: the first backend with a device",                                                     \
      "tk_context_create (src/jit/context.c); --info (src/cli/cmd_run.c)")                         \
    X(POLICY, WORD, "stable exact generic", WARN, CONTEXT, "stable, or the program's policy",      \
      "tk_context_create (src/jit/context.c)")                                                     \
    X(BUILD, WORD, "async sync", WARN, CONTEXT, "async, or the program's build mode",              \
      "tk_context_create (src/jit/context.c)")                                                     \
    X(LOG, WORD, "0 1 debug info warn error", WARN, CONTEXT, "0: no log on standard error",        \
      "tk_context_create (src/jit/diag.c)")                                                        \
    X(TUNE, WORD, "records off auto", WARN, CONTEXT, "records: tuning records where they exist",   \
      "the GEMM operators, once per process (src/ops/gemm/config.c)")                              \
    X(GEMM_PDL, WORD, "0 1", WARN, CONTEXT,                                                        \
      "1: programmatic dependent launch of the TMA, skinny and small-K kernels",                   \
      "the GEMM operators, once per process (src/ops/gemm/launch.c)")                              \
    X(GEMM_FALLBACK, WORD, "auto universal fast", WARN, CONTEXT,                                   \
      "auto: the fast fallback where it applies, else the universal kernel",                       \
      "the GEMM operators, once per process (src/ops/gemm/gemm.c)")                                \
    X(CACHE_DIR, DIR, NULL, WARN, CACHE, "$XDG_CACHE_HOME/tokitai-jit, else ~/.cache/tokitai-jit", \
      "opening a cache (src/cache/cache.c)")                                                       \
    X(CACHE_PATH, TIERS, NULL, WARN, CACHE,                                                        \
      "shipped: the read-only tier shipped with the library, where it is found",                   \
      "opening a cache (src/cache/cache.c); --info (src/cli/cmd_run.c)")                           \
    X(CACHE_MAX_SIZE, SIZE, NULL, WARN, CACHE, "the cache's own limit (tokitai-jit -M), else 5G",  \
      "opening a cache (src/cache/cache.c); -M (src/cli/cmd_cache.c)")                             \
    X(CACHE_DISABLE, BOOL, NULL, WARN, CACHE, "0: the cache is used",                              \
      "opening a cache (src/cache/cache.c)")                                                       \
    X(REMOTE, URL, NULL, WARN, CACHE, "none: no remote tier",                                      \
      "opening a cache (src/cache/remote.c); --push, --precompile (src/cli)")                      \
    X(REMOTE_KEY, SECRET, NULL, ERROR, CACHE, "none: values are not signed",                       \
      "opening a cache with a remote tier (src/cache/remote.c)")                                   \
    X(REMOTE_CONNECT_TIMEOUT_MS, MS, NULL, WARN, CACHE, "50 (the tool's remote commands: 2000)",   \
      "opening a cache with a remote tier (src/cache/remote.c); src/cli/cmd_remote.c")             \
    X(REMOTE_IO_TIMEOUT_MS, MS, NULL, WARN, CACHE, "50 (the tool's remote commands: 10000)",       \
      "opening a cache with a remote tier (src/cache/remote.c); src/cli/cmd_remote.c")             \
    X(REMOTE_LEASE_MS, MS, NULL, WARN, CACHE, "60000",                                             \
      "opening a cache with a remote tier (src/cache/remote.c)")                                   \
    X(REMOTE_WAIT_MS, MS, NULL, WARN, CACHE, "20000",                                              \
      "opening a cache with a remote tier (src/cache/remote.c)")                                   \
    X(LIBRARY, OUTSIDE, NULL, THEIRS, OUTSIDE, "the installed or built library",                   \
      "the Python package's loader (python/tokitai_jit/_capi.py)")                                 \
    X(LIBRARY_DIR, OUTSIDE, NULL, THEIRS, OUTSIDE, "build the library with CMake",                 \
      "the Python package's build, python/setup.py")                                               \
    X(CMAKE_ARGS, OUTSIDE, NULL, THEIRS, OUTSIDE, "none",                                          \
      "the Python package's build, python/setup.py")                                               \
    X(NO_EXTENSION, OUTSIDE, NULL, THEIRS, OUTSIDE, "unset: build the C extension",                \
      "the Python package's build, python/setup.py")                                               \
    X(LIB_DIR, OUTSIDE, NULL, THEIRS, OUTSIDE, "pkg-config tokitai_jit",                           \
      "the Rust crate's build, bindings/rust/build.rs")                                            \
    X(INCLUDE_DIR, OUTSIDE, NULL, THEIRS, OUTSIDE,                                                 \
      "the source tree's, pkg-config's, LIB_DIR/../include",                                       \
      "the Rust crate's build, bindings/rust/build.rs")                                            \
    X(NO_RPATH, OUTSIDE, NULL, THEIRS, OUTSIDE, "unset: an rpath to the library's folder",         \
      "the Rust crate's build, bindings/rust/build.rs")                                            \
    X(FOUND_BY, OUTSIDE, NULL, THEIRS, OUTSIDE, "set by the build script itself",                  \
      "written by bindings/rust/build.rs for the crate's compilation")                             \
    X(CLI, OUTSIDE, NULL, THEIRS, OUTSIDE, "tokitai-jit on PATH",                                  \
      "the Rust example bindings/rust/examples/gemm_pilot.rs")

typedef enum tk__env_id {
#define TK__ENV_ENUM(id, p, w, b, a, d, r) TK__ENV_##id,
    TK__ENV_VARS(TK__ENV_ENUM)
#undef TK__ENV_ENUM
        TK__ENV_COUNT
} tk__env_id;

typedef struct tk__env_var {
    const char *name;
    tk__env_parser parser;
    const char *words; /* TK__ENV_P_WORD: the accepted values, space-separated */
    tk__env_on_bad on_bad;
    tk__env_when when;
    const char *fallback;
    const char *reader;
} tk__env_var;

/* The table, in the order of tk__env_id. A function, not an object, so that
 * a file that includes this header and reads nothing has nothing unused. */
static inline const tk__env_var *tk__env_table(void)
{
#define TK__ENV_ROW(id, p, w, b, a, d, r)                                                          \
    {"TOKITAI_JIT_" #id, TK__ENV_P_##p, w, TK__ENV_##b, TK__ENV_AT_##a, d, r},
    static const tk__env_var table[TK__ENV_COUNT] = {TK__ENV_VARS(TK__ENV_ROW)};
#undef TK__ENV_ROW
    return table;
}

/* The row of the name of len bytes, or NULL: not a variable tokitai-jit reads. */
static inline const tk__env_var *tk__env_find(const char *name, size_t len)
{
    const tk__env_var *t = tk__env_table();
    for (int i = 0; i < TK__ENV_COUNT; i++)
        if (strlen(t[i].name) == len && strncmp(t[i].name, name, len) == 0)
            return &t[i];
    return NULL;
}

/* Index of v among the space-separated words, or -1. */
static inline int tk__env_word_index(const char *words, const char *v)
{
    size_t n = strlen(v);
    int i = 0;
    for (const char *p = words; *p; i++) {
        size_t w = strcspn(p, " ");
        if (w == n && strncmp(p, v, n) == 0)
            return i;
        p += w;
        while (*p == ' ')
            p++;
    }
    return -1;
}

/* 1 or 0 for a boolean word, -1 for anything else. */
static inline int tk__env_bool_of(const char *v)
{
    static const char *const yes[] = {"1", "true", "yes", "on"};
    static const char *const no[] = {"0", "false", "no", "off"};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        if (strcasecmp(v, yes[i]) == 0)
            return 1;
        if (strcasecmp(v, no[i]) == 0)
            return 0;
    }
    return -1;
}

/* Milliseconds in 1..3600000, or 0. */
static inline unsigned tk__env_ms_of(const char *v)
{
    if (!isdigit((unsigned char)v[0]))
        return 0;
    char *end = NULL;
    unsigned long long x = strtoull(v, &end, 10);
    return end && !*end && x >= 1 && x <= 3600000 ? (unsigned)x : 0;
}

/* Why an absolute path of len bytes is refused, or NULL. */
static inline const char *tk__env_dir_refuse(const char *p, size_t len)
{
    if (p[0] != '/')
        return "expected an absolute path (a '~' is not expanded here)";
    return len < 4096 ? NULL : "longer than a path can be (4095 bytes)";
}

/* Why the value v of row e is refused (a static string, or buf), or NULL
 * when accepted. A URL is accepted here: the remote tier's parser is its
 * judge (tk_env_check asks it; the remote takes only what it parses). */
static inline const char *tk__env_refuse(const tk__env_var *e, const char *v, char *buf,
                                         size_t size)
{
    switch (e->parser) {
    case TK__ENV_P_WORD:
        if (tk__env_word_index(e->words, v) >= 0)
            return NULL;
        snprintf(buf, size, "expected one of: %s", e->words);
        return buf;
    case TK__ENV_P_BOOL:
        return tk__env_bool_of(v) >= 0 ? NULL : "expected 0 or 1 (or true/false, yes/no, on/off)";
    case TK__ENV_P_SIZE: {
        uint64_t x;
        return tk__size_parse(v, &x) == 0 ? NULL : "expected a size such as 500M, 5G or 1048576";
    }
    case TK__ENV_P_MS:
        return tk__env_ms_of(v) ? NULL : "expected milliseconds, 1 to 3600000";
    case TK__ENV_P_DIR:
        return tk__env_dir_refuse(v, strlen(v));
    case TK__ENV_P_TIERS:
        if (strcmp(v, "none") == 0)
            return NULL;
        for (const char *p = v; *p;) {
            size_t n = strcspn(p, ":");
            const char *why =
                n && !(n == 7 && strncmp(p, "shipped", 7) == 0) ? tk__env_dir_refuse(p, n) : NULL;
            if (why && n == 4 && strncmp(p, "none", 4) == 0)
                why = "'none' stands alone (no read-only tier at all)";
            if (why) {
                snprintf(buf, size, "'%.*s': %s", (int)(n < 200 ? n : 200), p, why);
                return buf;
            }
            p += n;
            if (*p == ':')
                p++;
        }
        return NULL;
    case TK__ENV_P_SECRET:
        return strlen(v) <= 4096 ? NULL : "a key is at most 4096 bytes";
    case TK__ENV_P_URL:
    case TK__ENV_P_OUTSIDE:
        return NULL;
    }
    return NULL;
}

/* The value of id as set: NULL when unset or empty (both mean the default). */
static inline const char *tk__env_raw(tk__env_id id)
{
    const char *v = getenv(tk__env_table()[id].name);
    return v && *v ? v : NULL;
}

/* The value of id when set and accepted; NULL when the default applies. */
static inline const char *tk__env_get(tk__env_id id)
{
    const char *v = tk__env_raw(id);
    char buf[256];
    return v && !tk__env_refuse(&tk__env_table()[id], v, buf, sizeof buf) ? v : NULL;
}

/* A word variable: the index of its value among the row's words; fallback
 * (the default's index, or -1) when unset, empty or refused. */
static inline int tk__env_word(tk__env_id id, int fallback)
{
    const char *v = tk__env_raw(id);
    int i = v ? tk__env_word_index(tk__env_table()[id].words, v) : -1;
    return i >= 0 ? i : fallback;
}

/* tk__env_word read once per process into *cache (which starts at -1): for
 * the switches a hot path asks at every call. */
static inline int tk__env_word_once(tk__env_id id, int fallback, int *cache)
{
    int v = __atomic_load_n(cache, __ATOMIC_RELAXED);
    if (v < 0) {
        v = tk__env_word(id, fallback);
        __atomic_store_n(cache, v, __ATOMIC_RELAXED);
    }
    return v;
}

static inline int tk__env_bool(tk__env_id id, int fallback)
{
    const char *v = tk__env_raw(id);
    int b = v ? tk__env_bool_of(v) : -1;
    return b >= 0 ? b : fallback;
}

static inline unsigned tk__env_ms(tk__env_id id, unsigned fallback)
{
    const char *v = tk__env_raw(id);
    unsigned ms = v ? tk__env_ms_of(v) : 0;
    return ms ? ms : fallback;
}

/* A size variable: 1 and *out when set and accepted, else 0 (*out kept). */
static inline int tk__env_size(tk__env_id id, uint64_t *out)
{
    const char *v = tk__env_raw(id);
    uint64_t x;
    if (!v || tk__size_parse(v, &x) != 0)
        return 0;
    *out = x;
    return 1;
}

#endif
