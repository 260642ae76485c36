/*
 * On-disk kernel cache: keys, entries, atomic publish, per-key locks, LRU.
 * Depends on nothing above it (only the public status codes and xxHash).
 * Internal: names are tk__; the public tk_cache_* calls for tools are
 * implemented here too.
 *
 * Inside the layer, calls run one way (the headers are shared by all):
 *
 *   tools.c    list, stats, verify, prune, clear, bundles, push, sources
 *     -> cache.c   the handle: open, lookup, locks, store, eviction
 *          -> remote.c  the remote tier, through its hooks (remote.h)
 *          -> stats.c   persistent statistics, the config file, sizes
 *          -> source.c  kept sources: keep, read, count, sweep
 *     -> entry.c, key.c   entry files and keys
 *     -> fs.c            folder checks and removal that never follow a link
 *     -> diag.c          the handle's warnings and last error, used by all
 *
 * No circle remains. The remote tier hands what it fetched back to the
 * handle, which stores it; a push is a walk of tools.c calling remote.c
 * for each entry; the statistics, the size parser and the kept sources
 * need nothing of the handle but its fields. Keep it so: a part that needs
 * the handle's store or walk gets its result passed down, rather than
 * calling back up.
 */
#ifndef TK_CACHE_CACHE_H
#define TK_CACHE_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "tokitai/tokitai.h"

/* Bumped whenever the entry layout or the key encoding changes. */
#define TK__CACHE_FORMAT 3

/* ------------------------------------------------------------------ keys */

/* Canonical key material: a byte string of tagged, length-prefixed fields in
 * the order they are added. The engine adds fields in a fixed order; two
 * builders with the same fields in the same order give the same bytes. */
/* Key values longer than this enter the key material as their XXH3-128 and
 * length (so an entry does not carry a 95 KB source); the value itself is
 * kept in the key (blobs) for tk__cache_put to store once per content. */
#define TK__KEY_INLINE_MAX 256
#define TK__KEY_MAX_BLOBS 4
/* The tag of the kernel's whole source (prelude included) in the key: the
 * value tk_cache_entry_source shows. */
#define TK__KEY_SOURCE_TAG "source"

typedef struct tk__key_blob {
    uint64_t hi, lo; /* XXH3-128 of data */
    char *data;      /* owned copy */
    size_t len;
} tk__key_blob;

typedef struct tk__key {
    uint8_t *bytes;
    size_t len;
    size_t cap;
    int failed;        /* an allocation failed: the key must not be used */
    uint64_t fp_hi;    /* XXH3-128 of bytes, valid after tk__key_finish */
    uint64_t fp_lo;
    char hex[33];      /* fingerprint, 32 lowercase hex digits + NUL */
    tk__key_blob blobs[TK__KEY_MAX_BLOBS]; /* hashed values (the first few) */
    size_t n_blobs;
} tk__key;

void tk__key_init(tk__key *key);
void tk__key_free(tk__key *key);
void tk__key_add_str(tk__key *key, const char *tag, const char *value); /* NULL value allowed */
void tk__key_add_bytes(tk__key *key, const char *tag, const void *data, size_t len);
void tk__key_add_u64(tk__key *key, const char *tag, uint64_t value);
/* Computes the fingerprint; TK_OUT_OF_MEMORY if any add failed. */
tk_status tk__key_finish(tk__key *key);

/* One field of key material, as tk__key_next reads it back. A value kept
 * as its hash (hashed) has no bytes here: hi/lo and len name it. */
typedef struct tk__key_field {
    const char *tag; /* not NUL-terminated */
    size_t tag_len;
    int hashed;
    const uint8_t *value; /* the value itself (not hashed) */
    uint64_t len;         /* the value's length (hashed: the original's) */
    uint64_t hi, lo;      /* XXH3-128 of the value (hashed only) */
} tk__key_field;

/* Reads the field at *pos of material (len bytes) and moves *pos past it:
 * 1, or 0 at the end, -1 for material that does not parse. */
int tk__key_next(const uint8_t *material, size_t len, size_t *pos, tk__key_field *f);
/* The field tagged tag: 1 and *f, or 0 when absent or unparsable. */
int tk__key_find(const uint8_t *material, size_t len, const char *tag, tk__key_field *f);

/* ---------------------------------------------------------------- entries */

/* Metadata stored with each entry, readable without the payload. Strings are
 * borrowed on store and owned by the tk__entry on load. */
typedef struct tk__entry_meta {
    const char *kernel;   /* entry point */
    const char *source;   /* source name */
    const char *backend;
    const char *arch;
    const char *compiler;
    const char *options;
    const char *lowered;  /* mangled entry of a name expression; NULL: the kernel name */
    const char *deps;     /* include lookups of a user source (src/jit/sources.h); NULL: none */
    int64_t created;      /* 0 on store: now */
    int64_t last_used;
    tk_resource_usage resources;
} tk__entry_meta;

typedef struct tk__entry {
    tk__entry_meta meta;
    void *payload;        /* owned; free with tk__entry_free */
    size_t payload_size;
    char *strings;        /* owned backing store of meta's strings */
} tk__entry;

void tk__entry_free(tk__entry *entry);

/* -------------------------------------------------------------- the cache */

typedef void (*tk__log_fn)(void *user, tk_log_level level, const char *msg);

typedef struct tk__cache_opts {
    const char *root;        /* NULL: default root from the environment */
    const char *lower;       /* ':'-separated read-only roots, NULL: from the environment */
    uint64_t max_size;       /* 0: default */
    int read_only;
    int disabled;
    tk__log_fn log;          /* may be NULL */
    void *log_user;
    /* The remote tier (cache/remote.h); NULL: from the environment. */
    const struct tk__remote_opts *remote;
} tk__cache_opts;

/* Opens the cache. Trouble with the folder (missing and not creatable,
 * read-only, wrong owner, group/world-writable) is logged once and leaves a
 * cache that misses on every lookup and drops every store: never an error.
 * Only TK_OUT_OF_MEMORY / TK_INVALID_ARGUMENT fail. */
tk_status tk__cache_open(const tk__cache_opts *opts, tk_cache **out);

/* Looks up key in the user cache, then the lower tiers. TK_OK and *out filled,
 * or TK_NOT_FOUND. A corrupt, truncated, wrong-version or foreign-key entry
 * is a miss (logged once; removed from the user tier). A hit refreshes the
 * entry's recency cheaply (its mtime), never under a lock. */
tk_status tk__cache_get(tk_cache *cache, const tk__key *key, tk__entry *out);

/* Cross-process lock on one key, taken only after a miss: the caller looks
 * again under the lock before compiling. *out may be set to NULL when no lock
 * can be had (read-only or disabled cache): proceed without one. */
typedef struct tk__cache_lock tk__cache_lock;
tk_status tk__cache_lock_key(tk_cache *cache, const tk__key *key, tk__cache_lock **out);
void tk__cache_unlock(tk__cache_lock *lock);

/* Publishes an entry atomically (temporary file in the same folder, write,
 * fsync-free close, rename), then evicts least-recently-used entries past the
 * size limit. Any trouble is logged and returned as a status the engine
 * ignores for correctness. */
tk_status tk__cache_put(tk_cache *cache, const tk__key *key, const tk__entry_meta *meta,
                        const void *payload, size_t payload_size);

/* Removes the user-tier entry for key (an entry the driver refused to load). */
tk_status tk__cache_remove(tk_cache *cache, const tk__key *key);

/* 1 when lookups and stores are possible at all. */
int tk__cache_usable(const tk_cache *cache);

/* 1 when stores can succeed: not disabled, not read-only, and the user
 * folder was writable at open. When 0, tk__cache_put only drops the entry
 * (the cache has already logged why, once). */
int tk__cache_writable(const tk_cache *cache);

/* Persistent statistics: what a process adds to the cache's counts
 * (stats.c). Kept in the handle (atomic adds, no I/O) and written once when
 * the handle closes. */
enum {
    TK__PSTAT_HITS,
    TK__PSTAT_MISSES,
    TK__PSTAT_COMPILES,
    TK__PSTAT_COMPILE_NS,
    TK__PSTAT_FALLBACKS,
    TK__PSTAT_ERRORS,
    TK__PSTAT_COUNT
};
void tk__cache_stats_add(tk_cache *cache, const uint64_t v[TK__PSTAT_COUNT]);

/* Resolves the default root into buf (no creation). */
tk_status tk__cache_default_root(char *buf, size_t size);

/* The shipped tier's roots (shipped.c) for a library whose code is in the
 * file at path `file`: <its folder>/share/tokitai-jit/cache, then
 * <its folder>/../share/tokitai-jit/cache, each when it is a folder, as a
 * ':'-separated list of real paths in buf ("" when neither is).
 * TK_OVERFLOW when buf cannot hold them. tk_cache_shipped_tier applies it
 * to the library's own file, once. */
tk_status tk__cache_shipped_from(const char *file, char *buf, size_t size);

#endif /* TK_CACHE_CACHE_H */
