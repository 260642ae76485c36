/*
 * Tuning records: text values (up to 16 KiB) the operator layer keeps per
 * (kind, name) for the context's backend, target and compiler, stored in the kernel
 * cache as entries of their own (source "tune:<kind>", kernel = name, payload
 * = the value). Being cache entries, they travel with everything the cache
 * does: read-only tiers, bundles (--export / --import), the remote tier,
 * --list, --verify, pruning.
 *
 * Key: the cache format, the library version, "record", backend, compiler,
 * target, kind and name. A new compiler or library version therefore starts
 * without records (the heuristics choose again until --tune is run), the
 * same rule as for compiled kernels.
 *
 * Lookups run on operator calls, so each context remembers what it found
 * (or that nothing was there) per (kind, name) in a table under a mutex
 * (it grows with the names looked up): one cache lookup per name and
 * context, then a memory hit. The GEMM keeps one record per (op, N, K), a
 * line per class of M, so that lookup comes with the first call of a GEMM
 * family (when its kernel is fetched too), not with each new token count.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jit/engine.h"
#include "jit/jit_internal.h"

#define REC_FIRST 256u /* slots of a new table; it doubles at half full */
#define REC_NAME 112u /* kind '\n' name, NUL included, at most */

typedef struct rec_slot {
    uint64_t h;          /* 0: empty */
    char name[REC_NAME]; /* kind '\n' name, to tell hash collisions apart */
    char *value;         /* malloc'd; NULL: no record */
} rec_slot;

typedef struct rec_table {
    pthread_mutex_t mu;
    unsigned used, cap;
    rec_slot *slot;
} rec_table;

static const char rec_tag = 0; /* attachment tag: its address */

/* Changes whenever a record may change meaning: a put, a table destroyed
 * with its context (callers' own caches of parsed records compare it). */
static unsigned rec_generation = 1;

unsigned tk__record_generation(void)
{
    return __atomic_load_n(&rec_generation, __ATOMIC_ACQUIRE);
}

static void rec_bump(void)
{
    __atomic_add_fetch(&rec_generation, 1u, __ATOMIC_RELEASE);
}

static void rec_destroy(tk_context *ctx, void *data)
{
    rec_table *t = data;
    (void)ctx;
    rec_bump();
    pthread_mutex_destroy(&t->mu);
    for (unsigned i = 0; i < t->cap; i++)
        free(t->slot[i].value);
    free(t->slot);
    free(t);
}

static rec_table *rec_table_of(tk_context *ctx)
{
    rec_table *t = tk__ctx_attached(ctx, &rec_tag);
    if (t != NULL)
        return t;
    t = calloc(1, sizeof *t);
    if (t == NULL)
        return NULL;
    t->slot = calloc(REC_FIRST, sizeof *t->slot);
    if (t->slot == NULL) {
        free(t);
        return NULL;
    }
    t->cap = REC_FIRST;
    pthread_mutex_init(&t->mu, NULL);
    if (tk__ctx_attach(ctx, &rec_tag, t, rec_destroy) != TK_OK) {
        /* another thread attached first */
        rec_destroy(ctx, t);
        t = tk__ctx_attached(ctx, &rec_tag);
    }
    return t;
}

/* full = kind '\n' name; returns its hash (never 0), or 0 when too long. */
static uint64_t rec_full(const char *kind, const char *name, char full[REC_NAME])
{
    const size_t k = strlen(kind), n = strlen(name);
    uint64_t h = 1469598103934665603ull;
    if (k + n + 2 > REC_NAME)
        return 0;
    memcpy(full, kind, k);
    full[k] = '\n';
    memcpy(full + k + 1, name, n + 1);
    for (const char *c = full; *c; c++)
        h = (h ^ (unsigned char)*c) * 1099511628211ull;
    return h ? h : 1;
}

/* The slot of (kind, name): found (1), or the empty slot to fill (0).
 * Under t->mu; the table is never full (it doubles at half full). */
static rec_slot *rec_find(rec_table *t, uint64_t h, const char *full, int *found)
{
    for (unsigned i = 0;; i++) {
        rec_slot *s = &t->slot[(h + i) & (t->cap - 1)];
        if (s->h == 0) {
            *found = 0;
            return s;
        }
        if (s->h == h && strcmp(s->name, full) == 0) {
            *found = 1;
            return s;
        }
    }
}

/* Doubles the table (under t->mu); 0 when out of memory (it stays as is:
 * lookups beyond it go to the cache each time). */
static int rec_grow(rec_table *t)
{
    const unsigned cap = t->cap * 2;
    rec_slot *n = calloc(cap, sizeof *n);
    if (n == NULL)
        return 0;
    for (unsigned i = 0; i < t->cap; i++) {
        const rec_slot *o = &t->slot[i];
        if (o->h == 0)
            continue;
        for (unsigned j = 0;; j++) {
            rec_slot *s = &n[(o->h + j) & (cap - 1)];
            if (s->h == 0) {
                *s = *o;
                break;
            }
        }
    }
    free(t->slot);
    t->slot = n;
    t->cap = cap;
    return 1;
}

/* Remembers value (NULL: no record) for (kind, name) in ctx's table. */
static void rec_remember(tk_context *ctx, const char *kind, const char *name, const char *value)
{
    char full[REC_NAME];
    int found;
    rec_table *t = rec_table_of(ctx);
    const uint64_t h = rec_full(kind, name, full);
    char *copy = value != NULL ? strdup(value) : NULL;
    if (t == NULL || h == 0 || (value != NULL && copy == NULL)) {
        free(copy);
        return;
    }
    pthread_mutex_lock(&t->mu);
    rec_slot *s = rec_find(t, h, full, &found);
    if (!found && (t->used + 1) * 2 > t->cap) {
        s = rec_grow(t) ? rec_find(t, h, full, &found) : NULL;
    }
    if (s != NULL) {
        if (!found) {
            s->h = h;
            strcpy(s->name, full);
            t->used++;
        }
        free(s->value);
        s->value = copy;
        copy = NULL;
    }
    pthread_mutex_unlock(&t->mu);
    free(copy);
}

static tk_status rec_key(tk_context *ctx, const char *kind, const char *name, tk__key *key)
{
    tk__key_init(key);
    tk__key_add_u64(key, "format", TK__CACHE_FORMAT);
    tk__key_add_str(key, "library", TK_VERSION_STRING);
    tk__key_add_str(key, "record", kind);
    tk__key_add_str(key, "backend", ctx->be->name);
    tk__key_add_str(key, "compiler", ctx->compiler);
    tk__key_add_str(key, "target", ctx->target);
    tk__key_add_str(key, "name", name);
    return tk__key_finish(key);
}

static void rec_source(const char *kind, char *buf, size_t size)
{
    snprintf(buf, size, "tune:%s", kind);
}

tk_status tk__record_get(tk_context *ctx, const char *kind, const char *name, char *value,
                         size_t size)
{
    char full[REC_NAME], src[96];
    int found = 0, present = 0;
    rec_table *t;
    const uint64_t h = rec_full(kind, name, full);
    if (value == NULL || size == 0 || h == 0)
        return TK_INVALID_ARGUMENT;
    value[0] = '\0';
    t = rec_table_of(ctx);
    if (t != NULL) {
        pthread_mutex_lock(&t->mu);
        rec_slot *s = rec_find(t, h, full, &found);
        if (found) {
            present = s->value != NULL;
            if (present)
                snprintf(value, size, "%s", s->value);
        }
        pthread_mutex_unlock(&t->mu);
        if (found)
            return present ? TK_OK : TK_NOT_FOUND;
    }
    if (ctx->cache == NULL || !tk__cache_usable(ctx->cache))
        return TK_NOT_FOUND;

    tk__key key;
    tk__entry entry;
    tk_status st = rec_key(ctx, kind, name, &key);
    if (st != TK_OK) {
        tk__key_free(&key);
        return st;
    }
    memset(&entry, 0, sizeof entry);
    st = tk__cache_get(ctx->cache, &key, &entry);
    tk__key_free(&key);
    rec_source(kind, src, sizeof src);
    if (st == TK_OK) {
        /* A record is text: its meta names it, the payload is the value. */
        if (entry.meta.kernel != NULL && strcmp(entry.meta.kernel, name) == 0 &&
            entry.meta.source != NULL && strcmp(entry.meta.source, src) == 0 &&
            entry.payload_size > 0 && entry.payload_size < TK__RECORD_MAX &&
            memchr(entry.payload, '\0', entry.payload_size) == NULL) {
            snprintf(value, size, "%.*s", (int)entry.payload_size, (const char *)entry.payload);
            present = 1;
        } else {
            tk__log(ctx, TK_LOG_WARN, "tuning record %s/%s in the cache is malformed: ignored",
                    kind, name);
        }
        tk__entry_free(&entry);
    } else if (st != TK_NOT_FOUND) {
        tk__log(ctx, TK_LOG_DEBUG, "tuning record %s/%s: cache lookup failed: %s", kind, name,
                tk_status_str(st));
    }
    rec_remember(ctx, kind, name, present ? value : NULL);
    return present ? TK_OK : TK_NOT_FOUND;
}

tk_status tk__record_put(tk_context *ctx, const char *kind, const char *name, const char *value)
{
    char src[96];
    tk__key key;
    const size_t n = value != NULL ? strlen(value) : 0;
    char full[REC_NAME];
    if (n == 0 || n >= TK__RECORD_MAX || rec_full(kind, name, full) == 0)
        return tk__fail(ctx, TK_INVALID_ARGUMENT, "tuning record %s/%s: bad value", kind, name);
    /* This process uses it from now on, stored or not. */
    rec_remember(ctx, kind, name, value);
    rec_bump();
    if (ctx->cache == NULL || !ctx->cache_writable || !tk__cache_usable(ctx->cache))
        return tk__fail(ctx, TK_UNSUPPORTED,
                        "tuning record %s/%s: the cache is disabled or read-only, kept for this "
                        "process only",
                        kind, name);
    tk_status st = rec_key(ctx, kind, name, &key);
    if (st == TK_OK) {
        rec_source(kind, src, sizeof src);
        tk_resource_usage res;
        memset(&res, 0xff, sizeof res); /* -1: nothing to report */
        tk__entry_meta meta = {.kernel = name,
                               .source = src,
                               .backend = ctx->be->name,
                               .arch = ctx->target,
                               .compiler = ctx->compiler,
                               .options = value, /* shown by --list */
                               .lowered = NULL,
                               .deps = NULL,
                               .created = 0,
                               .last_used = 0,
                               .resources = res};
        st = tk__cache_put(ctx->cache, &key, &meta, value, n);
        if (st != TK_OK)
            st = tk__fail(ctx, st, "tuning record %s/%s: could not store it in the cache: %s",
                          kind, name, tk_status_str(st));
    }
    tk__key_free(&key);
    return st;
}
