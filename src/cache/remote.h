/*
 * The remote tier: a Redis server shared by a fleet, below the local tiers.
 *
 * Internal to src/cache (and the engine's config/stats plumbing). Built only
 * with hiredis and OpenSSL's libcrypto (TK_HAVE_REMOTE); without them every
 * call here is a cheap no-op and tk_cache_remote_describe says why.
 *
 * Server layout, for library version V and cache format F:
 *
 *   tkjit:V:F:e:<32 hex>      one value per key: an envelope + a whole entry file
 *   tkjit:V:F:lease:<32 hex>  "host:pid:random" (with a secret, then "." and the
 *                             64 hex of its HMAC), with an expiry: who compiles
 *                             the key. One without an expiry, with one beyond
 *                             the lease time, of another type or (with a
 *                             secret) not signed is replaced, never waited for.
 *
 * Value (little-endian): magic "TKJITRMT", u32 envelope version (1), u32 MAC
 * length (0 or 32), the MAC, then the entry file exactly as on disk. The MAC
 * is HMAC-SHA256 under the shared secret over "tokitai-jit remote v1\0", the
 * 32 hex digits of the key and the entry file. A value is used only after the
 * same checks as a disk entry (structure, checksum, full key material) and,
 * with a secret configured, a good MAC. A value is sized (STRLEN) before it
 * is read.
 */
#ifndef TK_CACHE_REMOTE_H
#define TK_CACHE_REMOTE_H

#include <stddef.h>
#include <stdint.h>

#include "cache/cache.h"

#define TK__REMOTE_MAGIC "TKJITRMT"
#define TK__REMOTE_ENVELOPE_VERSION 1
#define TK__REMOTE_HEADER_SIZE 16
#define TK__REMOTE_MAC_SIZE 32

/* Defaults, each overridden by the config API or the environment. */
#define TK__REMOTE_CONNECT_MS 50
#define TK__REMOTE_IO_MS 50
#define TK__REMOTE_LEASE_MS 60000
#define TK__REMOTE_WAIT_MS 20000
/* Largest value read: a bigger one is refused without being transferred. */
#define TK__REMOTE_MAX_VALUE ((uint64_t)256 << 20)
/* Circuit breaker: after a transport failure the server is left alone for
 * BASE ms, doubling with each consecutive failure up to MAX ms. */
#define TK__REMOTE_BREAKER_BASE_MS 1000
#define TK__REMOTE_BREAKER_MAX_MS 60000

typedef struct tk__remote_opts {
    const char *url;    /* NULL: $TOKITAI_JIT_REMOTE; "": no remote */
    const void *secret; /* used when secret_set, else $TOKITAI_JIT_REMOTE_KEY */
    size_t secret_len;  /* 0 with secret_set: no signing */
    int secret_set;
    unsigned connect_ms; /* 0: $TOKITAI_JIT_REMOTE_CONNECT_TIMEOUT_MS, else default */
    unsigned io_ms;      /* 0: $TOKITAI_JIT_REMOTE_IO_TIMEOUT_MS, else default */
    unsigned lease_ms;   /* 0: $TOKITAI_JIT_REMOTE_LEASE_MS, else default */
    unsigned wait_ms;    /* 0: $TOKITAI_JIT_REMOTE_WAIT_MS, else default */
} tk__remote_opts;

typedef struct tk__remote_counters {
    uint64_t hits, misses, errors, rejected, publishes;
} tk__remote_counters;

/* 1 when the library was built with the remote tier. */
int tk__remote_built(void);

/* Checks the syntax of redis://[[user]:password@]host[:port][/db] or
 * unix:///path[?db=N]; TK_INVALID_ARGUMENT with a reason in why. */
tk_status tk__remote_url_check(const char *url, char *why, size_t size);

/* ------------------------------------------------- hooks of the cache layer */

/* Sets up cache->remote from opts (no connection yet: the first lookup
 * connects). Trouble (a bad URL, a build without hiredis) is logged once and
 * leaves no remote; only TK_OUT_OF_MEMORY fails. */
tk_status tk__cache_remote_open(tk_cache *cache, const tk__remote_opts *opts);
void tk__cache_remote_close(tk_cache *cache);

/* After every local tier missed: fetch, verify (as a disk entry, and the
 * signature), fill *out. On TK_OK *entry is a malloc'd copy of the entry
 * file (*len bytes; NULL when the copy failed) for the handle to keep in
 * the user tier. TK_NOT_FOUND on a miss, a refused value or any server
 * trouble. */
tk_status tk__cache_remote_get(tk_cache *cache, const tk__key *key, tk__entry *out,
                               uint8_t **entry, size_t *len);

/* Under the local key lock, after the second local look missed: takes the
 * fleet-wide lease on key, or waits (bounded) until its holder publishes the
 * value or gives the lease up. Returns the lease to release, or NULL (no
 * remote, server trouble, value published meanwhile, wait expired). */
void *tk__cache_remote_lease(tk_cache *cache, const tk__key *key);
void tk__cache_remote_release(void *lease);

/* Publishes a local compile (entry file bytes). Best effort. */
void tk__cache_remote_publish(tk_cache *cache, const tk__key *key, const uint8_t *entry,
                              size_t len);

/* ------------------------------------------------------ for the tools */

/* Before a tool's calls: TK_NOT_FOUND without a remote, TK_UNSUPPORTED in
 * a build without one (the message in tk_cache_last_error); else resets
 * the circuit breaker, since a tool wants an answer now. */
tk_status tk__cache_remote_tool_begin(tk_cache *cache);

/* One entry of a push: entry (len bytes) is a whole entry file and v its
 * view, checked with its fingerprint (tk__entry_parse). Sent unless the
 * server's value at its key verifies as a lookup would check it; counted
 * in n->pushed, present or replaced. TK_OVERFLOW with *why for an entry
 * over the remote size limit (not sent); any other failure is the
 * server's (the message in tk_cache_last_error) and ends the push. */
struct tk__entry_view;
tk_status tk__cache_remote_push_entry(tk_cache *cache, const uint8_t *entry, size_t len,
                                      const struct tk__entry_view *v, tk_cache_push_counts *n,
                                      const char **why);

/* Counters of the handle's remote tier (zeros without one). */
void tk__cache_remote_counters(const tk_cache *cache, tk__remote_counters *out);
void tk__cache_remote_reset_counters(tk_cache *cache);

#endif /* TK_CACHE_REMOTE_H */
