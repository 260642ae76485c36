/*
 * Kernels: the in-memory table, the path memory -> disk -> compile -> store
 * -> load, single flight for concurrent first use, launch, precompile.
 *
 * Memory table. Keyed by a 64-bit hash of the descriptor: (source name,
 * entry, defines, options) for an embedded source; for a user source, first
 * the address of its text instead of the name, then, on a miss, the text
 * itself (XXH3-64). A kernel found by its text gets its caller's address as
 * an alias (a few per kernel at most, one kernel per address), so a caller
 * that keeps its source in one buffer hashes no source text on a hit. A hit always compares the
 * stored descriptor in full (for a user source, strcmp of the whole text:
 * about 0.03 us per 256 bytes), so neither an address reused for other text
 * nor a hash collision can return the wrong kernel. Open addressing read without a lock
 * (acquire loads; see tk__ktable); a hit allocates nothing and touches no file.
 *
 * Disk key (XXH3-128 by the cache layer) over, in this order: cache format,
 * library version, backend, compiler identity, full target id, entry point,
 * the whole source (prelude + embedded includes expanded), every option
 * (backend default options first, then the caller's, in the caller's order),
 * then every define as -DNAME[=VALUE] sorted by name. The backend's own -I
 * options are left out: they are machine paths, and the headers behind them
 * are part of the compiler identity instead, so that a cache filled on one
 * machine hits on another with the same toolkit at another path. A user
 * source's in-memory headers (name and text) follow the defines.
 *
 * User sources (sources.c): before the key is built, the library resolves
 * the source's includes itself and rewrites them to names it hands to the
 * compiler with the headers' text, so the compiler reads no user file
 * behind the cache's back. Files read from disk are not in the key; the
 * entry stores the record of every lookup (file and content hash, or "not
 * found"), and a stored entry is used only when today's record is the same
 * (entry_current); otherwise the kernel is compiled and its entry replaced.
 * A C++ name expression as entry is compiled through the name-expression
 * API and its lowered name stored in the entry for the next disk hit. A
 * user source's plain name goes through the same API up front (the
 * backend compiles once more without it only when the name alone fails),
 * so a C++ function resolves like an extern "C" one; a name that resolves
 * to nothing fails with the kernels the code object lists. A kernel's
 * parameter layout is read from its code object on first request
 * (tk_kernel_get_params).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
/* Inlined: the memory-hit path hashes short strings, where a call costs as much as the hash. */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "common/out_struct.h"
#include "jit/decl.h"
#include "jit/jit_internal.h"
#include "jit/sources.h"
#include "jit/symbols.h"

/* ------------------------------------------------------------- hashing */

static int desc_pointers_ok(const tk_kernel_desc *d)
{
    if (!d || !d->entry || !d->entry[0] || (!d->source_name == !d->source))
        return 0;
    if (d->n_defines && !d->defines)
        return 0;
    if (d->n_options && !d->options)
        return 0;
    for (size_t i = 0; i < d->n_defines; i++)
        if (!d->defines[i].name)
            return 0;
    for (size_t i = 0; i < d->n_options; i++)
        if (!d->options[i])
            return 0;
    /* Headers and labels belong to user sources. */
    if (d->n_headers && (!d->headers || d->source_name))
        return 0;
    if (d->source_label && d->source_name)
        return 0;
    for (size_t i = 0; i < d->n_headers; i++)
        if (!d->headers[i].name || !d->headers[i].text)
            return 0;
    return 1;
}

/* by_content: hash a user source's text, else its address. */
static uint64_t desc_hash(const tk_kernel_desc *d, int by_content)
{
    uint64_t h;
    if (d->source_name) {
        h = XXH3_64bits_withSeed(d->source_name, strlen(d->source_name), 1);
    } else if (by_content) {
        h = XXH3_64bits_withSeed(d->source, strlen(d->source), 2);
    } else {
        uintptr_t addr = (uintptr_t)d->source;
        h = XXH3_64bits_withSeed(&addr, sizeof addr, 3);
    }
    h = XXH3_64bits_withSeed(d->entry, strlen(d->entry), h);
    /* Defines: order does not matter (the disk key sorts them), so combine
     * their hashes with a commutative sum. */
    uint64_t acc = 0;
    for (size_t i = 0; i < d->n_defines; i++) {
        uint64_t x = XXH3_64bits_withSeed(d->defines[i].name, strlen(d->defines[i].name), 3);
        const char *v = d->defines[i].value;
        acc += v ? XXH3_64bits_withSeed(v, strlen(v), x) : x ^ 0x9e3779b97f4a7c15ULL;
    }
    uint64_t mix[2] = {acc, (uint64_t)d->n_defines};
    h = XXH3_64bits_withSeed(mix, sizeof mix, h);
    for (size_t i = 0; i < d->n_options; i++)
        h = XXH3_64bits_withSeed(d->options[i], strlen(d->options[i]), h + 1);
    if (d->source_label)
        h = XXH3_64bits_withSeed(d->source_label, strlen(d->source_label), h + 2);
    /* Headers like the source: by address on the fast path, else by text. */
    for (size_t i = 0; i < d->n_headers; i++) {
        if (by_content) {
            h = XXH3_64bits_withSeed(d->headers[i].name, strlen(d->headers[i].name), h + 3);
            h = XXH3_64bits_withSeed(d->headers[i].text, strlen(d->headers[i].text), h + 4);
        } else {
            uintptr_t addr[2] = {(uintptr_t)d->headers[i].name, (uintptr_t)d->headers[i].text};
            h = XXH3_64bits_withSeed(addr, sizeof addr, h + 5);
        }
    }
    return h;
}

static int str_eq(const char *a, const char *b)
{
    return (a == NULL && b == NULL) || (a && b && strcmp(a, b) == 0);
}

static int define_in(const tk_define *set, size_t n, const tk_define *d)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(set[i].name, d->name) == 0 && str_eq(set[i].value, d->value))
            return 1;
    return 0;
}

/* Both define sets hold the same name = value pairs (order free; a set may
 * repeat a pair). */
static int defines_same(const tk_define *a, size_t na, const tk_define *b, size_t nb)
{
    if (na != nb)
        return 0;
    for (size_t i = 0; i < na; i++)
        if (!define_in(b, nb, &a[i]) || !define_in(a, na, &b[i]))
            return 0;
    return 1;
}

int tk__desc_same(const tk_kernel_desc *a, const tk_kernel_desc *b)
{
    if (!str_eq(a->source_name, b->source_name) || !str_eq(a->source, b->source) ||
        strcmp(a->entry, b->entry) != 0 || a->n_options != b->n_options ||
        !str_eq(a->source_label, b->source_label) || a->n_headers != b->n_headers)
        return 0;
    for (size_t i = 0; i < a->n_options; i++)
        if (strcmp(a->options[i], b->options[i]) != 0)
            return 0;
    for (size_t i = 0; i < a->n_headers; i++)
        if (strcmp(a->headers[i].name, b->headers[i].name) != 0 ||
            strcmp(a->headers[i].text, b->headers[i].text) != 0)
            return 0;
    return defines_same(a->defines, a->n_defines, b->defines, b->n_defines);
}

static int kernel_matches(const tk_kernel *k, const tk_kernel_desc *d)
{
    if (d->source_name) {
        if (!k->source_name || strcmp(k->source_name, d->source_name) != 0)
            return 0;
    } else if (!k->source || strcmp(k->source, d->source) != 0) {
        return 0;
    }
    if (strcmp(k->entry, d->entry) != 0 || k->n_defines != d->n_defines ||
        k->n_options != d->n_options)
        return 0;
    for (size_t i = 0; i < d->n_options; i++)
        if (strcmp(k->options[i], d->options[i]) != 0)
            return 0;
    if (!str_eq(k->source_label, d->source_label) || k->n_headers != d->n_headers)
        return 0;
    for (size_t i = 0; i < d->n_headers; i++)
        if (strcmp(k->headers[i].name, d->headers[i].name) != 0 ||
            strcmp(k->headers[i].text, d->headers[i].text) != 0)
            return 0;
    /* Both directions: the stored set has no duplicates, the caller's may. */
    for (size_t i = 0; i < d->n_defines; i++)
        if (!define_in(k->defines, k->n_defines, &d->defines[i]) ||
            !define_in(d->defines, d->n_defines, &k->defines[i]))
            return 0;
    return 1;
}

/* ------------------------------------------------------- the memory table */

static tk_kernel *table_find(tk_context *ctx, uint64_t h, const tk_kernel_desc *d)
{
    const tk__ktable *t = __atomic_load_n(&ctx->table, __ATOMIC_ACQUIRE);
    if (!t)
        return NULL;
    size_t mask = t->n_slots - 1;
    for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
        tk_kernel *k = __atomic_load_n(&t->slots[i].k, __ATOMIC_ACQUIRE);
        if (!k)
            return NULL;
        if (t->slots[i].h == h && kernel_matches(k, d))
            return k;
    }
}

static void slots_put(tk__ktable *t, uint64_t h, tk_kernel *k)
{
    size_t mask = t->n_slots - 1;
    size_t i = (size_t)h & mask;
    while (t->slots[i].k)
        i = (i + 1) & mask;
    t->slots[i].h = h;
    __atomic_store_n(&t->slots[i].k, k, __ATOMIC_RELEASE);
}

/* 1 when some slot carries hash h (table_mu held). */
static int table_has_hash(const tk__ktable *t, uint64_t h)
{
    if (!t)
        return 0;
    size_t mask = t->n_slots - 1;
    for (size_t i = (size_t)h & mask; t->slots[i].k; i = (i + 1) & mask)
        if (t->slots[i].h == h)
            return 1;
    return 0;
}

/* Makes room for one more slot (table_mu held). */
static tk_status table_reserve(tk_context *ctx)
{
    tk__ktable *t = ctx->table;
    if (t && (ctx->n_used + 1) * 2 <= t->n_slots)
        return TK_OK;
    size_t n = t ? t->n_slots * 2 : 64;
    tk__ktable *bigger = calloc(1, sizeof *bigger + n * sizeof bigger->slots[0]);
    if (!bigger)
        return TK_OUT_OF_MEMORY;
    bigger->n_slots = n;
    bigger->older = t;
    for (size_t i = 0; t && i < t->n_slots; i++)
        if (t->slots[i].k)
            slots_put(bigger, t->slots[i].h, t->slots[i].k);
    /* Readers still walking the old table see a consistent, older view. */
    __atomic_store_n(&ctx->table, bigger, __ATOMIC_RELEASE);
    return TK_OK;
}

/* Adds k (under k->mhash, plus alias when it differs) to the table and to
 * the owned list; TK_OUT_OF_MEMORY leaves both unchanged. */
static tk_status table_insert(tk_context *ctx, tk_kernel *k, uint64_t alias)
{
    pthread_mutex_lock(&ctx->table_mu);
    tk_status st = table_reserve(ctx);
    if (st == TK_OK) {
        k->next_owned = ctx->owned;
        ctx->owned = k;
        slots_put(ctx->table, k->mhash, k);
        ctx->n_used++;
        /* One kernel per address alias: a buffer reused for many sources
         * must not grow a probe chain; later ones are found by their text. */
        if (alias != k->mhash && !table_has_hash(ctx->table, alias) &&
            table_reserve(ctx) == TK_OK) {
            slots_put(ctx->table, alias, k);
            ctx->n_used++;
            k->n_aliases++;
        }
    }
    pthread_mutex_unlock(&ctx->table_mu);
    return st;
}

#define MAX_ALIASES 4

/* Lets a user source's address find k without hashing its text. Best effort. */
static void table_alias(tk_context *ctx, uint64_t alias, tk_kernel *k)
{
    pthread_mutex_lock(&ctx->table_mu);
    if (k->n_aliases < MAX_ALIASES && !table_has_hash(ctx->table, alias) &&
        table_reserve(ctx) == TK_OK) {
        slots_put(ctx->table, alias, k);
        ctx->n_used++;
        k->n_aliases++;
    }
    pthread_mutex_unlock(&ctx->table_mu);
}

static void kernel_free(tk_context *ctx, tk_kernel *k)
{
    if (!k)
        return;
    if (k->module && ctx->be && ctx->has_device)
        ctx->be->module_unload(ctx->dev, k->module);
    free(k->source_name);
    free(k->source);
    free(k->entry);
    for (size_t i = 0; i < k->n_defines; i++) {
        free((char *)k->defines[i].name);
        free((char *)k->defines[i].value);
    }
    free(k->defines);
    for (size_t i = 0; i < k->n_options; i++)
        free(k->options[i]);
    free(k->options);
    free(k->source_label);
    for (size_t i = 0; i < k->n_headers; i++) {
        free((char *)k->headers[i].name);
        free((char *)k->headers[i].text);
    }
    free(k->headers);
    free(k->code);
    free(k->symbol);
    free(k->params);
    free(k);
}

void tk__kernels_destroy(tk_context *ctx)
{
    if (ctx->has_device && ctx->be) {
        tk__err e;
        ctx->be->device_bind(ctx->dev, &e);
    }
    tk_kernel *k = ctx->owned;
    while (k) {
        tk_kernel *next = k->next_owned;
        kernel_free(ctx, k);
        k = next;
    }
    ctx->owned = NULL;
    tk__ktable *t = ctx->table;
    while (t) {
        tk__ktable *older = t->older;
        free(t);
        t = older;
    }
    ctx->table = NULL;
}

/* ---------------------------------------------------------- single flight */

/* Waits until no other thread of this context is obtaining a kernel with
 * hash h, then registers node for it. When check is set and the kernel
 * appeared in the table meanwhile, returns it instead (nothing registered). */
static tk_kernel *flight_enter(tk_context *ctx, uint64_t h, const tk_kernel_desc *d, int check,
                               tk__flight *node, int *waited)
{
    pthread_mutex_lock(&ctx->flight_mu);
    for (;;) {
        if (check) {
            tk_kernel *k = table_find(ctx, h, d);
            if (k) {
                pthread_mutex_unlock(&ctx->flight_mu);
                return k;
            }
        }
        const tk__flight *f = ctx->flights;
        while (f && f->mhash != h)
            f = f->next;
        if (!f)
            break;
        if (waited)
            *waited = 1;
        pthread_cond_wait(&ctx->flight_cv, &ctx->flight_mu);
    }
    node->mhash = h;
    node->next = ctx->flights;
    ctx->flights = node;
    pthread_mutex_unlock(&ctx->flight_mu);
    return NULL;
}

static void flight_leave(tk_context *ctx, tk__flight *node)
{
    pthread_mutex_lock(&ctx->flight_mu);
    tk__flight **p = &ctx->flights;
    while (*p && *p != node)
        p = &(*p)->next;
    if (*p)
        *p = node->next;
    pthread_cond_broadcast(&ctx->flight_cv);
    pthread_mutex_unlock(&ctx->flight_mu);
}

/* ------------------------------------------------------------ preparation */

static void sb_line_directive(tk__sbuf *b, unsigned line, const char *file)
{
    char tmp[320];
    int n = snprintf(tmp, sizeof tmp, "#line %u \"%s\"\n", line, file);
    tk__sb_add(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

#define MAX_INCLUDES 64

typedef struct include_state {
    const char *seen[MAX_INCLUDES];
    size_t n_seen;
} include_state;

/* If line is `#include "name"` naming an embedded source, returns it. */
static const tk__embedded *embedded_include(const char *s, const char *e)
{
    while (s < e && (*s == ' ' || *s == '\t'))
        s++;
    if (s >= e || *s != '#')
        return NULL;
    s++;
    while (s < e && (*s == ' ' || *s == '\t'))
        s++;
    if ((size_t)(e - s) < 8 || strncmp(s, "include", 7) != 0)
        return NULL;
    s += 7;
    while (s < e && (*s == ' ' || *s == '\t'))
        s++;
    if (s >= e || *s != '"')
        return NULL;
    const char *name = ++s;
    while (s < e && *s != '"')
        s++;
    if (s >= e)
        return NULL;
    size_t n = (size_t)(s - name);
    /* Headers are named with their extension ("common.cuh"), kernels without
     * ("gemm_f16" for gemm_f16.cu): accept "gemm_f16.cu" too. */
    size_t bare = (n > 3 && strncmp(name + n - 3, ".cu", 3) == 0) ? n - 3 : n;
    for (const tk__embedded *t = tk__embedded_table; t->name; t++) {
        size_t tl = strlen(t->name);
        if ((tl == n && strncmp(t->name, name, n) == 0) ||
            (tl == bare && strncmp(t->name, name, bare) == 0))
            return t;
    }
    return NULL;
}

/* Copies text into out, replacing includes of embedded headers by their
 * text (each once, as if guarded), so that the key covers every byte the
 * compiler sees and the compilers need no header callbacks. */
static void expand_source(tk__sbuf *out, const char *text, size_t len, const char *file,
                          include_state *inc, int depth)
{
    const char *p = text, *end = text + len;
    unsigned line = 1;
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        const char *next = eol ? eol + 1 : end;
        const tk__embedded *t = depth < 16 ? embedded_include(p, eol ? eol : end) : NULL;
        if (t) {
            size_t i = 0;
            while (i < inc->n_seen && strcmp(inc->seen[i], t->name) != 0)
                i++;
            if (i == inc->n_seen && inc->n_seen < MAX_INCLUDES) {
                inc->seen[inc->n_seen++] = t->name;
                sb_line_directive(out, 1, t->name);
                expand_source(out, t->text, t->len, t->name, inc, depth + 1);
                tk__sb_str(out, "\n");
            }
            sb_line_directive(out, line + 1, file);
        } else {
            tk__sb_add(out, p, (size_t)(next - p));
        }
        line++;
        p = next;
    }
    if (len && text[len - 1] != '\n')
        tk__sb_str(out, "\n");
}

typedef struct prep {
    const char *text;  /* caller's source text (embedded or user) */
    char label[512];   /* "gemm_f16", the source_label, or "user:<16 hex>" for the metadata */
    char file[512];    /* name given to the compiler */
    int name_expr;     /* the entry is a C++ name expression */
    int name_probe;    /* a user source's plain name, resolved as a name expression too */
    tk__srcset set;    /* a user source with its includes resolved (sources.h) */
    const char **dirs; /* -I folders of the caller's options */
    tk__search search;
    unsigned char *pre_skip; /* caller's options that are pre-includes (NULL: none) */
    const char **cc_opts;    /* p->opts less pre-includes, for the compiler (NULL: opts) */
    size_t n_cc_opts;
    tk__sbuf full;      /* prelude + expanded source */
    tk_define *sorted;  /* shallow copy of the defines, sorted by name */
    char **define_opts; /* "-DNAME=VALUE" */
    const char **opts;  /* default + caller's + define options */
    size_t n_opts;
    tk__sbuf opt_text; /* the same, space-separated, for the metadata */
    tk__key key;
    int key_ready;
} prep;

static void prep_free(prep *p)
{
    free(p->full.p);
    free(p->sorted);
    if (p->define_opts)
        for (size_t i = 0; p->define_opts[i]; i++)
            free(p->define_opts[i]);
    free(p->define_opts);
    free(p->opts);
    free(p->opt_text.p);
    if (p->key_ready)
        tk__key_free(&p->key);
    tk__srcset_free(&p->set);
    free(p->dirs);
    free(p->pre_skip);
    free(p->cc_opts);
}

static int define_cmp(const void *a, const void *b)
{
    return strcmp(((const tk_define *)a)->name, ((const tk_define *)b)->name);
}

/* The user-source half of prep_build (sources.h): label, includes. */
static tk_status prep_user(tk_context *ctx, const tk_kernel_desc *d, prep *p)
{
    if (d->source_label) {
        if (!d->source_label[0] || strlen(d->source_label) >= sizeof p->file ||
            strpbrk(d->source_label, "\"\\\r\n"))
            return tk__fail(ctx, TK_INVALID_ARGUMENT,
                            "source_label '%.100s' must be 1 to 511 characters with no quote, "
                            "backslash or line break",
                            d->source_label);
        snprintf(p->label, sizeof p->label, "%s", d->source_label);
        snprintf(p->file, sizeof p->file, "%s", d->source_label);
    }
    if (tk__search_dirs(d->options, d->n_options, &p->dirs, &p->search.n_dirs) != TK_OK)
        return tk__fail(ctx, TK_OUT_OF_MEMORY, "out of memory preparing kernel '%s'", d->entry);
    p->search.dirs = p->dirs;
    p->search.mem = d->headers;
    p->search.n_mem = d->n_headers;
    /* Pre-includes become #include lines the library resolves and tracks;
     * a #line puts the user's first line back at 1. */
    char *prefix = NULL;
    if (tk__pre_includes(d->options, d->n_options, &prefix, &p->pre_skip) != TK_OK)
        return tk__fail(ctx, TK_OUT_OF_MEMORY, "out of memory preparing kernel '%s'", d->entry);
    char *text = (char *)d->source;
    if (prefix) {
        size_t n = strlen(prefix) + strlen(p->file) + strlen(d->source) + 16;
        text = malloc(n);
        if (text)
            snprintf(text, n, "%s#line 1 \"%s\"\n%s", prefix, p->file, d->source);
        free(prefix);
        if (!text)
            return tk__fail(ctx, TK_OUT_OF_MEMORY, "out of memory preparing kernel '%s'", d->entry);
    }
    char msg[512];
    tk_status st = tk__sources_resolve(text, &p->search, &p->set, msg, sizeof msg);
    if (text != d->source)
        free(text);
    if (st != TK_OK)
        return tk__fail(ctx, st, "kernel %s of %s: %s", d->entry, p->label, msg);
    p->text = p->set.main;
    return TK_OK;
}

static tk_status prep_build(tk_context *ctx, const tk_kernel_desc *d, prep *p)
{
    memset(p, 0, sizeof *p);
    size_t len = 0;
    if (d->source_name) {
        p->text = tk__embedded_source(d->source_name, &len);
        if (!p->text)
            return tk__fail(ctx, TK_NOT_FOUND, "no embedded kernel source named '%s'",
                            d->source_name);
        snprintf(p->label, sizeof p->label, "%s", d->source_name);
        snprintf(p->file, sizeof p->file, "%s.cu", d->source_name);
    } else {
        p->text = d->source;
        len = strlen(d->source);
        unsigned long long h = (unsigned long long)XXH3_64bits(d->source, len);
        snprintf(p->label, sizeof p->label, "user:%016llx", h);
        snprintf(p->file, sizeof p->file, "user_%016llx.cu", h);
        tk_status st = prep_user(ctx, d, p);
        if (st != TK_OK)
            return st;
        len = strlen(p->text);
    }
    if (!tk__is_identifier(d->entry)) {
        if (d->source_name || !tk__is_name_expression(d->entry))
            return tk__fail(ctx, TK_INVALID_ARGUMENT,
                            "entry point '%.200s' is neither an identifier nor (for a user "
                            "source) a C++ name expression",
                            d->entry);
        p->name_expr = 1;
    } else if (!d->source_name) {
        p->name_probe = 1;
    }

    /* Defines: identifiers, single-line values, no name twice; sorted. */
    if (d->n_defines) {
        p->sorted = malloc(d->n_defines * sizeof *p->sorted);
        if (!p->sorted)
            goto oom;
        memcpy(p->sorted, d->defines, d->n_defines * sizeof *p->sorted);
        qsort(p->sorted, d->n_defines, sizeof *p->sorted, define_cmp);
    }
    for (size_t i = 0; i < d->n_defines; i++) {
        const tk_define *df = &p->sorted[i];
        if (!tk__is_identifier(df->name))
            return tk__fail(ctx, TK_INVALID_ARGUMENT, "define name '%s' is not an identifier",
                            df->name);
        if (df->value && strpbrk(df->value, "\r\n"))
            return tk__fail(ctx, TK_INVALID_ARGUMENT, "define %s: value spans lines", df->name);
        if (i && strcmp(df->name, p->sorted[i - 1].name) == 0)
            return tk__fail(ctx, TK_INVALID_ARGUMENT, "define %s given twice", df->name);
    }

    /* Options: backend defaults, the caller's, then the defines. */
    const char *const *defaults = ctx->be->default_options();
    size_t n_def = 0;
    while (defaults && defaults[n_def])
        n_def++;
    p->n_opts = n_def + d->n_options + d->n_defines;
    p->opts = calloc(p->n_opts + 1, sizeof *p->opts);
    p->define_opts = calloc(d->n_defines + 1, sizeof *p->define_opts);
    if (!p->opts || !p->define_opts)
        goto oom;
    size_t k = 0;
    for (size_t i = 0; i < n_def; i++)
        p->opts[k++] = defaults[i];
    for (size_t i = 0; i < d->n_options; i++)
        p->opts[k++] = d->options[i];
    for (size_t i = 0; i < d->n_defines; i++) {
        const tk_define *df = &p->sorted[i];
        size_t n = strlen(df->name) + (df->value ? strlen(df->value) : 0) + 4;
        char *o = malloc(n);
        if (!o)
            goto oom;
        snprintf(o, n, df->value ? "-D%s=%s" : "-D%s", df->name, df->value);
        p->define_opts[i] = o;
        p->opts[k++] = o;
    }
    for (size_t i = 0; i < p->n_opts; i++) {
        if (i)
            tk__sb_str(&p->opt_text, " ");
        tk__sb_str(&p->opt_text, p->opts[i]);
    }
    if (!p->n_opts)
        tk__sb_str(&p->opt_text, "");

    /* Source as the compiler sees it. */
    include_state inc = {.n_seen = 0};
    tk__sb_str(&p->full, ctx->be->prelude());
    sb_line_directive(&p->full, 1, p->file);
    expand_source(&p->full, p->text, len, p->file, &inc, 0);
    if (p->full.failed || p->opt_text.failed)
        goto oom;

    tk__key_init(&p->key);
    p->key_ready = 1;
    tk__key_add_u64(&p->key, "format", TK__CACHE_FORMAT);
    tk__key_add_str(&p->key, "library", TK_VERSION_STRING);
    tk__key_add_str(&p->key, "backend", ctx->be->name);
    tk__key_add_str(&p->key, "compiler", ctx->compiler);
    tk__key_add_str(&p->key, "target", ctx->target);
    tk__key_add_str(&p->key, "entry", d->entry);
    tk__key_add_bytes(&p->key, TK__KEY_SOURCE_TAG, p->full.p, p->full.len);
    for (size_t i = 0; i < n_def + d->n_options; i++) {
        /* A backend's include folders are machine paths; their headers enter
         * the key through the compiler identity (see cuda.c, headers_hash). */
        if (i < n_def && strncmp(p->opts[i], "-I", 2) == 0)
            continue;
        tk__key_add_str(&p->key, "option", p->opts[i]);
    }
    for (size_t i = 0; i < d->n_defines; i++)
        tk__key_add_str(&p->key, "define", p->define_opts[i]);
    /* In-memory headers by name and text; files on disk are checked through
     * the entry's deps instead (obtain_code). */
    for (size_t i = 0; i < d->n_headers; i++) {
        tk__key_add_str(&p->key, "header", d->headers[i].name);
        tk__key_add_str(&p->key, "header_text", d->headers[i].text);
    }
    if (tk__key_finish(&p->key) != TK_OK)
        goto oom;
    if (p->pre_skip) {
        p->cc_opts = calloc(p->n_opts + 1, sizeof *p->cc_opts);
        if (!p->cc_opts)
            goto oom;
        for (size_t i = 0; i < p->n_opts; i++)
            if (i < n_def || i >= n_def + d->n_options || !p->pre_skip[i - n_def])
                p->cc_opts[p->n_cc_opts++] = p->opts[i];
    }
    return TK_OK;
oom:
    return tk__fail(ctx, TK_OUT_OF_MEMORY, "out of memory preparing kernel '%s'", d->entry);
}

/* ----------------------------------------------------------- code objects */

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void count(uint64_t *field, uint64_t n)
{
    __atomic_fetch_add(field, n, __ATOMIC_RELAXED);
}

static void resources_unknown(tk_resource_usage *r)
{
    r->registers = r->sgprs = r->agprs = r->shared_bytes = r->local_bytes = r->spill_count =
        r->wavefront_size = r->kernarg_bytes = r->max_threads = -1;
}

typedef struct obtained {
    void *code;
    size_t size;
    tk_resource_usage res;
    tk_origin origin;
    double seconds;
    char *lowered; /* mangled name of a name-expression entry (owned), else NULL */
} obtained;

/* 1 when a stored entry fits what p resolved today: the same include
 * lookups with the same results and file hashes (sources.h), and a lowered
 * name where the entry point is a name expression. */
static int entry_current(tk_context *ctx, const prep *p, const tk__entry *entry)
{
    const char *want = p->set.deps && p->set.deps[0] ? p->set.deps : NULL;
    const char *have = entry->meta.deps && entry->meta.deps[0] ? entry->meta.deps : NULL;
    if ((want || have) && (!want || !have || strcmp(want, have) != 0)) {
        tk__log(ctx, TK_LOG_INFO, "%s (%s): included files changed since it was cached; compiling",
                p->key.hex, p->label);
        tk__log(ctx, TK_LOG_DEBUG, "lookups then:\n%s\nlookups now:\n%s", have ? have : "(none)",
                want ? want : "(none)");
        return 0;
    }
    if (p->name_expr && (!entry->meta.lowered || !entry->meta.lowered[0]))
        return 0;
    return 1;
}

/* The first line of a compiler log that reports an error ("file(12): error:
 * ..." from NVRTC, "file:12:3: error: ..." from hipRTC), for the one-line
 * message; "" when there is none. */
static void first_error_line(const char *log, char *buf, size_t size)
{
    buf[0] = '\0';
    for (const char *p = log; p && *p;) {
        const char *eol = strchr(p, '\n');
        size_t n = eol ? (size_t)(eol - p) : strlen(p);
        const char *hit = strstr(p, "error");
        if (hit && (size_t)(hit - p) < n) {
            snprintf(buf, size, "%.*s", (int)(n < size ? n : size - 1), p);
            return;
        }
        p = eol ? eol + 1 : NULL;
    }
}

/* A disk hit moves the payload into *o; misses and cache trouble return 0. */
static int disk_lookup(tk_context *ctx, const prep *p, obtained *o)
{
    tk__entry entry;
    memset(&entry, 0, sizeof entry);
    tk_status st = tk__cache_get(ctx->cache, &p->key, &entry);
    if (st != TK_OK) {
        if (st != TK_NOT_FOUND) {
            count(&ctx->n_cache_errors, 1);
            tk__log(ctx, TK_LOG_WARN, "cache lookup of %s failed: %s", p->key.hex,
                    tk_status_str(st));
        }
        return 0;
    }
    if (!entry_current(ctx, p, &entry)) {
        tk__entry_free(&entry);
        return 0;
    }
    if (entry.meta.lowered && entry.meta.lowered[0]) {
        o->lowered = strdup(entry.meta.lowered);
        if (!o->lowered) {
            tk__entry_free(&entry);
            return 0;
        }
    }
    o->code = entry.payload;
    o->size = entry.payload_size;
    o->res = entry.meta.resources;
    o->origin = TK_ORIGIN_DISK;
    o->seconds = 0;
    entry.payload = NULL;
    entry.payload_size = 0;
    tk__entry_free(&entry);
    count(&ctx->n_disk_hits, 1);
    return 1;
}

/* Compiles run on this thread (wait accounting in tk_kernel_get). */
static _Thread_local uint64_t thread_compiles;

/* Callers' compiles in progress in the process. Background builds do not
 * start a compile while one runs: a caller waiting for a kernel goes first
 * (the runtime compilers serialise much of their work, so a background
 * compile next to it would lengthen the caller's wait). */
static int foreground_compiles;

void tk__foreground_wait(void)
{
    const struct timespec ms = {0, 1000000L};
    for (int i = 0; i < 60000 && __atomic_load_n(&foreground_compiles, __ATOMIC_ACQUIRE) > 0; i++)
        nanosleep(&ms, NULL);
}

/* Edit distance of two short names (case-insensitive), capped at 99. */
static unsigned name_distance(const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b);
    if (na > 120 || nb > 120)
        return 99;
    unsigned row[121];
    for (size_t j = 0; j <= nb; j++)
        row[j] = (unsigned)j;
    for (size_t i = 1; i <= na; i++) {
        unsigned diag = row[0];
        row[0] = (unsigned)i;
        for (size_t j = 1; j <= nb; j++) {
            unsigned up = row[j];
            int same = (a[i - 1] | 0x20) == (b[j - 1] | 0x20);
            unsigned best = diag + (same ? 0u : 1u);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[nb] < 99 ? row[nb] : 99;
}

/* Why entry is not a kernel of a code object, listing the kernels it has
 * (demangled), the likely one first ("did you mean"), and for an
 * overloaded name how to pick one. malloc'd; NULL when nothing can be
 * said. */
static char *missing_kernel_message(tk_context *ctx, const char *entry, const void *code,
                                    size_t size, int overloaded)
{
    tk__err e = {.msg = "", .log = NULL};
    char *list = NULL;
    if (!ctx->be->list_kernels || ctx->be->list_kernels(code, size, &list, &e) != TK_OK) {
        free(e.log);
        return NULL;
    }
    tk__sbuf out = {0};
    tk__sbuf all = {0};
    char shown[600], base[256], best[600] = "", first_overload[600] = "";
    unsigned best_d = 99;
    size_t n = 0, n_same = 0;
    for (char *line = list, *eol; line && *line; line = eol ? eol + 1 : NULL) {
        eol = strchr(line, '\n');
        if (eol)
            *eol = '\0';
        if (!*line)
            continue;
        tk__demangle(line, shown, sizeof shown);
        tk__symbol_base(line, base, sizeof base);
        if (n < 24) {
            tk__sb_str(&all, n ? ", " : "");
            tk__sb_str(&all, shown);
        }
        n++;
        if (strcmp(base, entry) == 0) {
            if (!n_same++)
                snprintf(first_overload, sizeof first_overload, "%s", shown);
        }
        unsigned dist = base[0] ? name_distance(base, entry) : 99;
        size_t len = strlen(entry);
        if (dist < best_d && (dist <= 2 || dist <= len / 3 || strstr(base, entry) || strstr(entry, base))) {
            best_d = dist;
            snprintf(best, sizeof best, "%s", shown);
        }
    }
    free(list);
    if (n > 24) {
        char more[64];
        snprintf(more, sizeof more, " and %zu more", n - 24);
        tk__sb_str(&all, more);
    }
    if (overloaded || n_same > 1) {
        /* "k(float*, int)" -> static_cast<void (*)(float*, int)>(k) */
        const char *paren = strchr(first_overload, '(');
        tk__sb_str(&out, "the name is overloaded (");
        tk__sb_str(&out, all.p ? all.p : "");
        tk__sb_str(&out, "); name one overload with a name expression such as \"static_cast<void (*)");
        tk__sb_str(&out, paren ? paren : "(...)");
        tk__sb_str(&out, ">(");
        tk__sb_str(&out, entry);
        tk__sb_str(&out, ")\"");
    } else if (n == 0) {
        tk__sb_str(&out, "it contains no kernel (is the function __global__, and defined under the "
                         "defines given?)");
    } else {
        if (best[0]) {
            tk__sb_str(&out, "did you mean ");
            tk__sb_str(&out, best);
            tk__sb_str(&out, "? ");
        }
        tk__sb_str(&out, "its kernels: ");
        tk__sb_str(&out, all.p);
        tk__sb_str(&out, " (an entry is a kernel's name, or for a template or a namespace a name "
                         "expression such as \"ns::k<4, float>\")");
    }
    free(all.p);
    if (out.failed) {
        free(out.p);
        return NULL;
    }
    return out.p;
}

/* Disk cache, else (under the cross-process key lock, looking again) compile
 * and store. force_compile skips the lookups (after a refused load);
 * no_compile stops after the first lookup with TK_NOT_FOUND, recording
 * nothing. */
/* This message and "compiled ..., key K" below end with the key:
 * tokitai-jit --precompile counts the distinct kernels of a run by them. */
static void log_found(tk_context *ctx, const tk_kernel_desc *d, const prep *p)
{
    tk__log(ctx, TK_LOG_DEBUG, "found %s (%s) for %s in the cache, key %s", d->entry, p->label,
            ctx->target, p->key.hex);
}

static tk_status obtain_code(tk_context *ctx, const tk_kernel_desc *d, const prep *p,
                             int force_compile, int no_compile, obtained *o)
{
    /* A computed include cannot be checked on a later lookup: never cached. */
    int cacheable = !p->set.uncacheable;
    if (!cacheable)
        tk__log(ctx, TK_LOG_WARN,
                "kernel %s of %s: '%s' is a computed include the library cannot follow; "
                "compiled every time, never cached",
                d->entry, p->label, p->set.why);
    if (cacheable && !force_compile && disk_lookup(ctx, p, o)) {
        log_found(ctx, d, p);
        return TK_OK;
    }
    if (no_compile)
        return TK_NOT_FOUND;

    tk__cache_lock *lock = NULL;
    if (!cacheable || tk__cache_lock_key(ctx->cache, &p->key, &lock) != TK_OK)
        lock = NULL; /* no lock: at worst two processes compile the same kernel */
    if (cacheable && !force_compile && disk_lookup(ctx, p, o)) {
        tk__cache_unlock(lock);
        log_found(ctx, d, p);
        return TK_OK;
    }

    tk__err e = {.msg = "", .log = NULL};
    tk__code code = {NULL, 0, NULL, NULL, 0, 0};
    tk__compile_extra extra = {(const char *const *)p->set.names, (const char *const *)p->set.texts,
                               p->set.n_files, (p->name_expr || p->name_probe) ? d->entry : NULL,
                               p->name_probe};
    if (tk__in_builder)
        tk__foreground_wait();
    else
        __atomic_fetch_add(&foreground_compiles, 1, __ATOMIC_ACQ_REL);
    double t0 = now_seconds();
    tk_status st =
        ctx->be->compile(ctx->target, p->file, p->full.p, p->cc_opts ? p->cc_opts : p->opts,
                         p->cc_opts ? p->n_cc_opts : p->n_opts, &extra, &code, &e);
    double secs = now_seconds() - t0;
    if (!tk__in_builder)
        __atomic_fetch_sub(&foreground_compiles, 1, __ATOMIC_ACQ_REL);
    count(&ctx->n_compiles, 1);
    thread_compiles++;
    if (!tk__in_builder)
        count(&ctx->n_sync_compiles, 1);
    count(&ctx->compile_ns, (uint64_t)(secs * 1e9));
    if (st != TK_OK) {
        tk__cache_unlock(lock);
        if (st == TK_COMPILE_FAILED)
            count(&ctx->n_compile_failures, 1);
        const char *log = code.log ? code.log : e.log;
        char first[512];
        first_error_line(log, first, sizeof first);
        st = tk__fail_with_log(ctx, st, log, "%s (kernel %s of %s for %s)%s%s", e.msg, d->entry,
                               p->label, ctx->target, first[0] ? ": " : "", first);
        free(code.data);
        free(code.log);
        free(code.lowered);
        free(e.log);
        return st;
    }
    if (code.log && code.log[0])
        tk__log(ctx, TK_LOG_DEBUG, "compiler log for %s:\n%s", d->entry, code.log);
    free(code.log);
    tk__log(ctx, TK_LOG_INFO, "compiled %s (%s) for %s in %.1f ms, key %s", d->entry, p->label,
            ctx->target, secs * 1e3, p->key.hex);

    tk_resource_usage res;
    if (code.lowered && strcmp(code.lowered, d->entry) == 0) {
        /* An extern "C" function: its symbol is the name itself. */
        free(code.lowered);
        code.lowered = NULL;
    }
    const char *symbol = code.lowered ? code.lowered : d->entry;
    st = code.name_overloaded ? TK_NOT_FOUND : ctx->be->inspect(code.data, code.size, symbol, &res, &e);
    if (st == TK_NOT_FOUND) {
        /* The code object has no such kernel (a typo, an overloaded name, or
         * an entry that only exists under some define): nothing worth
         * storing or loading. The message lists what it has. */
        tk__cache_unlock(lock);
        char *why = missing_kernel_message(ctx, d->entry, code.data, code.size,
                                           code.name_overloaded);
        st = tk__fail(ctx, TK_NOT_FOUND, "kernel %s is not in the code compiled from %s for %s%s%s",
                      d->entry, p->label, ctx->target, why ? ": " : "", why ? why : "");
        free(why);
        free(code.data);
        free(code.lowered);
        free(e.log);
        return st;
    }
    if (st != TK_OK) {
        tk__log(ctx, TK_LOG_DEBUG, "no resource usage for %s: %s", d->entry, e.msg);
        resources_unknown(&res);
    }
    if (cacheable && ctx->cache_writable && tk__cache_usable(ctx->cache)) {
        tk__entry_meta meta = {.kernel = d->entry,
                               .source = p->label,
                               .backend = ctx->be->name,
                               .arch = ctx->target,
                               .compiler = ctx->compiler,
                               .options = p->opt_text.p ? p->opt_text.p : "",
                               .lowered = code.lowered,
                               .deps = p->set.deps && p->set.deps[0] ? p->set.deps : NULL,
                               .created = 0,
                               .last_used = 0,
                               .resources = res};
        tk_status ps = tk__cache_put(ctx->cache, &p->key, &meta, code.data, code.size);
        if (ps != TK_OK) {
            /* Counted; the cache itself warns once per handle (a full disk
             * must not log a warning per kernel). */
            count(&ctx->n_cache_errors, 1);
            tk__log(ctx, TK_LOG_DEBUG, "could not store %s in the cache: %s", p->key.hex,
                    tk_status_str(ps));
        }
    }
    tk__cache_unlock(lock);
    free(e.log);
    o->code = code.data;
    o->size = code.size;
    o->res = res;
    o->origin = TK_ORIGIN_COMPILED;
    o->seconds = secs;
    o->lowered = code.lowered;
    return TK_OK;
}

static char *dup_or_null(const char *s, int *failed)
{
    if (!s)
        return NULL;
    char *c = strdup(s);
    if (!c)
        *failed = 1;
    return c;
}

/* Copies the descriptor into a new kernel (defines sorted). */
static tk_kernel *kernel_new(const tk_kernel_desc *d, const prep *p, uint64_t h)
{
    int failed = 0;
    tk_kernel *k = calloc(1, sizeof *k);
    if (!k)
        return NULL;
    k->mhash = h;
    k->source_name = dup_or_null(d->source_name, &failed);
    k->source = dup_or_null(d->source, &failed);
    k->entry = dup_or_null(d->entry, &failed);
    if (d->n_defines) {
        k->defines = calloc(d->n_defines, sizeof *k->defines);
        if (k->defines) {
            k->n_defines = d->n_defines;
            for (size_t i = 0; i < d->n_defines; i++) {
                k->defines[i].name = dup_or_null(p->sorted[i].name, &failed);
                k->defines[i].value = dup_or_null(p->sorted[i].value, &failed);
            }
        } else {
            failed = 1;
        }
    }
    if (d->n_options) {
        k->options = calloc(d->n_options, sizeof *k->options);
        if (k->options) {
            k->n_options = d->n_options;
            for (size_t i = 0; i < d->n_options; i++)
                k->options[i] = dup_or_null(d->options[i], &failed);
        } else {
            failed = 1;
        }
    }
    k->source_label = dup_or_null(d->source_label, &failed);
    if (d->n_headers) {
        k->headers = calloc(d->n_headers, sizeof *k->headers);
        if (k->headers) {
            k->n_headers = d->n_headers;
            for (size_t i = 0; i < d->n_headers; i++) {
                k->headers[i].name = dup_or_null(d->headers[i].name, &failed);
                k->headers[i].text = dup_or_null(d->headers[i].text, &failed);
            }
        } else {
            failed = 1;
        }
    }
    memcpy(k->key_hex, p->key.hex, sizeof k->key_hex);
    if (failed) {
        free(k->source_label);
        for (size_t i = 0; i < k->n_headers; i++) {
            free((char *)k->headers[i].name);
            free((char *)k->headers[i].text);
        }
        free(k->headers);
        free(k->source_name);
        free(k->source);
        free(k->entry);
        for (size_t i = 0; i < k->n_defines; i++) {
            free((char *)k->defines[i].name);
            free((char *)k->defines[i].value);
        }
        free(k->defines);
        for (size_t i = 0; i < k->n_options; i++)
            free(k->options[i]);
        free(k->options);
        free(k);
        return NULL;
    }
    return k;
}

/* The whole slow path for one kernel; *out on success. no_compile: disk
 * only, TK_NOT_FOUND (not recorded) on a miss. */
static tk_status obtain_kernel(tk_context *ctx, const tk_kernel_desc *d, uint64_t h, uint64_t alias,
                               int no_compile, tk_kernel **out)
{
    prep p;
    obtained o = {NULL, 0, {0}, TK_ORIGIN_COMPILED, 0, NULL};
    tk_kernel *k = NULL;
    void *module = NULL, *fn = NULL;
    tk__err e = {.msg = "", .log = NULL};
    tk_status st = prep_build(ctx, d, &p);
    if (st != TK_OK)
        goto fail;

    for (int attempt = 0;; attempt++) {
        st = obtain_code(ctx, d, &p, attempt > 0, no_compile && attempt == 0, &o);
        if (st != TK_OK)
            goto fail;
        if (!ctx->has_device)
            break;
        st = ctx->be->device_bind(ctx->dev, &e);
        if (st != TK_OK) {
            st = tk__fail(ctx, st, "%s", e.msg);
            goto fail;
        }
        st = ctx->be->module_load(ctx->dev, o.code, o.size, &module, &e);
        if (st == TK_OK)
            break;
        count(&ctx->n_load_failures, 1);
        if (attempt > 0) {
            st = tk__fail(ctx, TK_LOAD_FAILED,
                          "the driver refused kernel %s (%s) for %s twice, the second time "
                          "freshly compiled: %s",
                          d->entry, p.label, ctx->target, e.msg);
            goto fail;
        }
        tk__log(ctx, TK_LOG_WARN, "the driver refused code object %s (%s); recompiling once",
                p.key.hex, e.msg);
        if (ctx->cache_writable)
            tk__cache_remove(ctx->cache, &p.key);
        free(o.code);
        o.code = NULL;
        free(o.lowered);
        o.lowered = NULL;
    }
    if (module) {
        count(&ctx->n_loads, 1);
        st = ctx->be->module_function(module, o.lowered ? o.lowered : d->entry, &fn, &e);
        if (st != TK_OK) {
            /* not found, or found but not launchable here (a cluster size
             * the driver refuses) */
            st = st == TK_NOT_FOUND
                     ? tk__fail(ctx, st, "kernel %s not found in %s: %s", d->entry, p.label, e.msg)
                     : tk__fail(ctx, st, "kernel %s in %s: %s", d->entry, p.label, e.msg);
            goto fail;
        }
    }

    k = kernel_new(d, &p, h);
    if (!k) {
        st = tk__fail(ctx, TK_OUT_OF_MEMORY, "out of memory keeping kernel %s", d->entry);
        goto fail;
    }
    k->origin = o.origin;
    k->compile_seconds = o.origin == TK_ORIGIN_COMPILED ? o.seconds : 0.0;
    k->resources = o.res;
    k->code = o.code;
    k->code_size = o.size;
    k->module = module;
    k->fn = fn;
    k->symbol = o.lowered;
    k->be = ctx->be;
    o.lowered = NULL;
    o.code = NULL;
    module = NULL;
    st = table_insert(ctx, k, alias);
    if (st != TK_OK) {
        st = tk__fail(ctx, st, "out of memory keeping kernel %s", d->entry);
        goto fail;
    }
    prep_free(&p);
    free(e.log);
    free(o.lowered);
    *out = k;
    return TK_OK;

fail:
    if (k) {
        kernel_free(ctx, k); /* unloads k->module */
    } else if (module) {
        ctx->be->module_unload(ctx->dev, module);
    }
    free(o.code);
    free(o.lowered);
    free(e.log);
    prep_free(&p);
    return st;
}

/* ------------------------------------------------------------ public API */

/* Memory table (by address, then by text for a user source); *hc gets the
 * content hash. */
static tk_kernel *memory_find(tk_context *ctx, const tk_kernel_desc *desc, uint64_t h, uint64_t *hc)
{
    tk_kernel *k = table_find(ctx, h, desc);
    *hc = h;
    if (k || !desc->source)
        return k;
    /* Not known by this address: look it up by its text. */
    *hc = desc_hash(desc, 1);
    k = table_find(ctx, *hc, desc);
    if (k)
        table_alias(ctx, h, k);
    return k;
}

/* The slow path: single flight, then disk (and, unless no_compile, compile).
 * Callers' threads account the time as a wait when a compile happened on
 * this thread or they waited for another thread's compile. */
static tk_status get_slow(tk_context *ctx, const tk_kernel_desc *desc, uint64_t h, uint64_t hc,
                          int no_compile, tk_kernel **out)
{
    tk__flight node;
    int waited = 0;
    const uint64_t compiles_before = thread_compiles;
    const double t0 = now_seconds();
    tk_status st = TK_OK;
    tk_kernel *k = flight_enter(ctx, hc, desc, 1, &node, &waited);
    if (k) {
        /* Another thread obtained it while this one waited. */
        if (hc != h)
            table_alias(ctx, h, k);
        count(&ctx->n_memory_hits, 1);
    } else {
        st = obtain_kernel(ctx, desc, hc, h, no_compile, &k);
        flight_leave(ctx, &node);
    }
    if (!tk__in_builder &&
        (thread_compiles != compiles_before || (waited && k && k->origin == TK_ORIGIN_COMPILED))) {
        count(&ctx->n_waits, 1);
        count(&ctx->wait_ns, (uint64_t)((now_seconds() - t0) * 1e9));
    }
    if (st == TK_OK)
        *out = k;
    return st;
}

tk_status tk_kernel_get(tk_context *ctx, const tk_kernel_desc *desc, tk_kernel **out)
{
    if (!ctx || !out)
        return ctx ? tk__fail(ctx, TK_INVALID_ARGUMENT, "tk_kernel_get: out is NULL")
                   : TK_INVALID_ARGUMENT;
    if (!desc_pointers_ok(desc))
        return tk__fail(ctx, TK_INVALID_ARGUMENT,
                        "tk_kernel_get: the descriptor needs an entry point and exactly one of "
                        "source_name and source, and no NULL define names or options");
    uint64_t h = desc_hash(desc, 0), hc;
    tk_kernel *k = memory_find(ctx, desc, h, &hc);
    if (k) {
        count(&ctx->n_memory_hits, 1);
        *out = k;
        return TK_OK;
    }
    return get_slow(ctx, desc, h, hc, 0, out);
}

tk_status tk__kernel_find(tk_context *ctx, const tk_kernel_desc *desc, tk_kernel **out)
{
    if (!ctx || !out || !desc_pointers_ok(desc))
        return ctx ? tk__fail(ctx, TK_INVALID_ARGUMENT, "tk__kernel_find: bad descriptor")
                   : TK_INVALID_ARGUMENT;
    uint64_t h = desc_hash(desc, 0), hc;
    tk_kernel *k = memory_find(ctx, desc, h, &hc);
    if (k) {
        count(&ctx->n_memory_hits, 1);
        *out = k;
        return TK_OK;
    }
    return get_slow(ctx, desc, h, hc, 1, out);
}

tk_status tk__kernel_get_or_queue(tk_context *ctx, const tk_kernel_desc *desc, int queue,
                                  tk_kernel **out)
{
    if (!ctx || !out || !desc_pointers_ok(desc) || !desc->source_name)
        return ctx ? tk__fail(ctx, TK_INVALID_ARGUMENT,
                              "tk__kernel_get_or_queue: needs an embedded source")
                   : TK_INVALID_ARGUMENT;
    uint64_t h = desc_hash(desc, 0);
    tk_kernel *k = table_find(ctx, h, desc);
    if (k) {
        count(&ctx->n_memory_hits, 1);
        *out = k;
        return TK_OK;
    }
    /* Being built (or known not to build): no disk probe, no flight wait. */
    if (tk__builder_known(ctx, h, desc))
        return TK_NOT_FOUND;
    tk_status st = get_slow(ctx, desc, h, h, 1, out);
    if (st != TK_NOT_FOUND)
        return st;
    if (queue)
        tk__builder_request(ctx, h, desc);
    return TK_NOT_FOUND;
}

void tk__kernel_queue(tk_context *ctx, const tk_kernel_desc *desc)
{
    if (ctx && desc_pointers_ok(desc) && desc->source_name)
        tk__builder_request(ctx, desc_hash(desc, 0), desc);
}

void tk__ctx_count_fallback(tk_context *ctx)
{
    count(&ctx->n_fallback_calls, 1);
}

tk_build_mode tk__ctx_build_mode(const tk_context *ctx)
{
    return ctx ? ctx->build_mode : TK_BUILD_SYNC;
}

tk_status tk_kernel_get_info(const tk_kernel *kernel, tk_kernel_info *out)
{
    if (!kernel || tk__out_bad(out))
        return TK_INVALID_ARGUMENT;
    tk_kernel_info info = {.struct_size = sizeof(tk_kernel_info),
                           .key_hex = kernel->key_hex,
                           .entry = kernel->entry,
                           .origin = kernel->origin,
                           .compile_seconds = kernel->compile_seconds,
                           .resources = kernel->resources};
    tk__out_copy(out, &info, sizeof info);
    return TK_OK;
}

/* The macros k's compiler is given: its defines, then -D options
 * ("-DN=V", "-D N=V", "--define-macro=N=V"). Strings point into k or into
 * *copies (one malloc'd block per option, freed by the caller); NULL when out
 * of memory. */
static tk__decl_macro *params_macros(const tk_kernel *k, size_t *n, char ***copies)
{
    tk__decl_macro *m = calloc(k->n_defines + k->n_options + 1, sizeof *m);
    char **c = calloc(k->n_options + 1, sizeof *c);
    if (!m || !c) {
        free(m);
        free(c);
        return NULL;
    }
    size_t count = 0;
    for (size_t i = 0; i < k->n_defines; i++)
        m[count++] = (tk__decl_macro){k->defines[i].name, k->defines[i].value};
    for (size_t i = 0; i < k->n_options; i++) {
        const char *o = k->options[i], *def = NULL;
        if (strncmp(o, "--define-macro=", 15) == 0)
            def = o + 15;
        else if (strncmp(o, "-D", 2) == 0 && o[2])
            def = o + 2;
        else if ((strcmp(o, "-D") == 0 || strcmp(o, "--define-macro") == 0) && i + 1 < k->n_options)
            def = k->options[++i];
        if (!def || !(c[i] = strdup(def)))
            continue; /* out of memory: that macro stays unknown */
        char *eq = strchr(c[i], '=');
        if (eq)
            *eq = '\0';
        m[count++] = (tk__decl_macro){c[i], eq ? eq + 1 : NULL};
    }
    *n = count;
    *copies = c;
    return m;
}

/* Kinds of k's parameters from its declaration in the user source and its
 * in-memory headers, where the code object leaves them unknown. A reading
 * that contradicts a kind the object records is not used at all. */
static void params_from_source(const tk_kernel *k, tk_kernel_param *params, size_t n)
{
    size_t unknown = 0;
    for (size_t i = 0; i < n; i++)
        unknown += params[i].kind == TK_PARAM_UNKNOWN;
    if (!k->source || !unknown)
        return;
    const char **texts = calloc(k->n_headers + 1, sizeof *texts);
    uint32_t *sizes = calloc(n, sizeof *sizes);
    int *kinds = calloc(n, sizeof *kinds);
    char **copies = NULL;
    size_t n_macros = 0;
    tk__decl_macro *macros = params_macros(k, &n_macros, &copies);
    if (!texts || !sizes || !kinds || !macros)
        goto done;
    texts[0] = k->source;
    for (size_t i = 0; i < k->n_headers; i++)
        texts[i + 1] = k->headers[i].text;
    for (size_t i = 0; i < n; i++)
        sizes[i] = params[i].size;
    if (!tk__decl_kinds(texts, k->n_headers + 1, macros, n_macros, k->entry, sizes, n, kinds))
        goto done;
    for (size_t i = 0; i < n; i++)
        if (params[i].kind != TK_PARAM_UNKNOWN && kinds[i] != TK_PARAM_UNKNOWN &&
            params[i].kind != kinds[i])
            goto done;
    for (size_t i = 0; i < n; i++)
        if (params[i].kind == TK_PARAM_UNKNOWN)
            params[i].kind = kinds[i];
done:
    if (copies)
        for (size_t i = 0; i < k->n_options; i++)
            free(copies[i]);
    free(copies);
    free(macros);
    free(kinds);
    free(sizes);
    free(texts);
}

/* Reads the parameter layout of k from its code object (params_mu held). */
static void params_read(tk_kernel *k)
{
    tk__err e = {.msg = "", .log = NULL};
    tk__param *raw = NULL;
    size_t n = 0;
    const char *symbol = k->symbol ? k->symbol : k->entry;
    if (!k->be || !k->be->kernel_params || !k->code ||
        k->be->kernel_params(k->code, k->code_size, symbol, &raw, &n, &e) != TK_OK) {
        free(e.log);
        __atomic_store_n(&k->params_state, -1, __ATOMIC_RELEASE);
        return;
    }
    tk_kernel_param *params = n ? calloc(n, sizeof *params) : NULL;
    int *kinds = n ? calloc(n, sizeof *kinds) : NULL;
    if (n && (!params || !kinds)) {
        free(params);
        free(kinds);
        free(raw);
        return; /* out of memory: state stays 0, a later call tries again */
    }
    /* A C++ function's mangled name says what the object may not: pointer
     * or integer, float or struct. */
    size_t n_named = 0;
    int named = n && k->symbol && tk__demangle_kinds(k->symbol, kinds, n, &n_named) && n_named == n;
    for (size_t i = 0; i < n; i++) {
        params[i].offset = raw[i].offset;
        params[i].size = raw[i].size;
        params[i].kind = raw[i].kind;
        if (params[i].kind == TK_PARAM_UNKNOWN && named)
            params[i].kind = kinds[i];
    }
    /* An extern "C" function has no mangled name: its declaration says. */
    params_from_source(k, params, n);
    free(kinds);
    free(raw);
    k->params = params;
    k->n_params = n;
    __atomic_store_n(&k->params_state, 1, __ATOMIC_RELEASE);
}

static pthread_mutex_t params_mu = PTHREAD_MUTEX_INITIALIZER;

tk_status tk_kernel_get_params(const tk_kernel *kernel, tk_kernel_params *out)
{
    if (!kernel || tk__out_bad(out))
        return TK_INVALID_ARGUMENT;
    /* The handle is the context's own allocation; reading the layout once
     * and keeping it is the only write, under params_mu. */
    tk_kernel *k = (tk_kernel *)kernel;
    if (__atomic_load_n(&k->params_state, __ATOMIC_ACQUIRE) == 0) {
        pthread_mutex_lock(&params_mu);
        if (__atomic_load_n(&k->params_state, __ATOMIC_ACQUIRE) == 0)
            params_read(k);
        pthread_mutex_unlock(&params_mu);
    }
    int state = __atomic_load_n(&k->params_state, __ATOMIC_ACQUIRE);
    if (state == 0)
        return TK_OUT_OF_MEMORY;
    if (state < 0)
        return TK_NOT_FOUND;
    tk_kernel_params r = {.struct_size = sizeof r, .n_params = k->n_params, .params = k->params};
    tk__out_copy(out, &r, sizeof r);
    return TK_OK;
}

tk_status tk__tensor_map_f16(tk_context *ctx, void *out, const void *base, uint64_t rows,
                             uint64_t cols, uint64_t row_bytes, unsigned box_cols,
                             unsigned box_rows, unsigned elem_bytes)
{
    tk__err e = {.msg = "", .log = NULL};
    if (!ctx->has_device || ctx->be->tensor_map_f16 == NULL)
        return tk__fail(ctx, TK_UNSUPPORTED, "tensor maps: not available on the %s backend",
                        ctx->be->name);
    tk_status st =
        ctx->be->tensor_map_f16(out, base, rows, cols, row_bytes, box_cols, box_rows, elem_bytes, &e);
    if (st != TK_OK)
        return tk__fail(ctx, st, "tensor map: %s", e.msg);
    return TK_OK;
}

int tk__ctx_sm_count(tk_context *ctx)
{
    int n = __atomic_load_n(&ctx->sm_count, __ATOMIC_RELAXED);
    if (n == 0) {
        n = ctx->has_device && ctx->be->sm_count != NULL ? ctx->be->sm_count(ctx->dev) : 0;
        if (n <= 0)
            n = -1;
        __atomic_store_n(&ctx->sm_count, n, __ATOMIC_RELAXED);
    }
    return n > 0 ? n : 0;
}

/* Dynamic shared memory a launch gets without raising the limit. */
#define TK__DEFAULT_SHARED (48u * 1024u)

static tk_status launch(tk_context *ctx, const tk_kernel *kernel, const unsigned grid[3],
                        const unsigned block[3], unsigned shared_bytes, void *stream, void **args,
                        int pdl)
{
    tk__err e;
    if (!ctx)
        return TK_INVALID_ARGUMENT;
    if (!kernel || !grid || !block)
        return tk__fail(ctx, TK_INVALID_ARGUMENT, "tk_kernel_launch: NULL kernel, grid or block");
    if (!ctx->has_device || !kernel->fn)
        return tk__fail(ctx, TK_NO_DEVICE, "tk_kernel_launch: the context targets %s offline",
                        ctx->target);
    tk_status st = ctx->be->device_bind(ctx->dev, &e);
    /* The 48 KiB default covers static and dynamic shared memory together: a
     * kernel with static shared memory needs the raise earlier (48 KiB
     * dynamic + 272 bytes static failed on an H100 without it). */
    const unsigned static_bytes =
        kernel->resources.shared_bytes > 0 ? (unsigned)kernel->resources.shared_bytes : 0u;
    if (st == TK_OK && shared_bytes > 0 && shared_bytes + static_bytes > TK__DEFAULT_SHARED &&
        ctx->be->raise_shared != NULL) {
        /* Once per kernel and size: the kernel is shared by threads, so the
         * cached limit is atomic (a race only raises it twice). The handle is
         * the context's own allocation, the const is the API's promise to
         * the caller. */
        unsigned *limit = &((tk_kernel *)kernel)->shared_limit;
        if (__atomic_load_n(limit, __ATOMIC_RELAXED) < shared_bytes) {
            st = ctx->be->raise_shared(kernel->fn, shared_bytes, &e);
            if (st == TK_OK)
                __atomic_store_n(limit, shared_bytes, __ATOMIC_RELAXED);
        }
    }
    if (st == TK_OK && pdl && ctx->be->launch_pdl != NULL) {
        st = ctx->be->launch_pdl(kernel->fn, grid, block, shared_bytes, stream, args, &e);
        if (st == TK_UNSUPPORTED) /* an older driver: a plain launch is as correct */
            st = ctx->be->launch(kernel->fn, grid, block, shared_bytes, stream, args, &e);
    } else if (st == TK_OK) {
        st = ctx->be->launch(kernel->fn, grid, block, shared_bytes, stream, args, &e);
    }
    if (st != TK_OK)
        return tk__fail(ctx, st, "launching %s (grid %u,%u,%u block %u,%u,%u shared %u): %s",
                        kernel->entry, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                        shared_bytes, e.msg);
    return TK_OK;
}

tk_status tk_kernel_launch(tk_context *ctx, const tk_kernel *kernel, const unsigned grid[3],
                           const unsigned block[3], unsigned shared_bytes, void *stream,
                           void **args)
{
    return launch(ctx, kernel, grid, block, shared_bytes, stream, args, 0);
}

tk_status tk__kernel_launch_pdl(tk_context *ctx, const tk_kernel *kernel, const unsigned grid[3],
                                const unsigned block[3], unsigned shared_bytes, void *stream,
                                void **args)
{
    return launch(ctx, kernel, grid, block, shared_bytes, stream, args, 1);
}

tk_status tk_kernel_precompile(tk_context *ctx, const tk_kernel_desc *desc, tk_origin *origin)
{
    if (!ctx)
        return TK_INVALID_ARGUMENT;
    if (!desc_pointers_ok(desc))
        return tk__fail(ctx, TK_INVALID_ARGUMENT,
                        "tk_kernel_precompile: the descriptor needs an entry point and exactly "
                        "one of source_name and source");
    uint64_t h = desc_hash(desc, 1);
    tk__flight node;
    flight_enter(ctx, h, desc, 0, &node, NULL);
    prep p;
    obtained o = {NULL, 0, {0}, TK_ORIGIN_COMPILED, 0, NULL};
    tk_status st = prep_build(ctx, desc, &p);
    if (st == TK_OK)
        st = obtain_code(ctx, desc, &p, 0, 0, &o);
    prep_free(&p);
    flight_leave(ctx, &node);
    free(o.code);
    free(o.lowered);
    if (st != TK_OK)
        return st;
    if (origin)
        *origin = o.origin;
    return TK_OK;
}
