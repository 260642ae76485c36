/* Cache commands: --list, --stats, --verify, --prune, --clear, --export, --import. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fnmatch.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "common/env_vars.h"

/* An owned copy of one entry's metadata (the visit's strings are borrowed). */
typedef struct entry {
    char *key_hex, *path, *kernel, *source, *backend, *arch, *compiler, *options;
    char *source_hash; /* "" when the source sits in the key (tk_cache_entry_info) */
    char *label; /* operator, baked dimensions, variant: which specialisation it is */
    char *op;    /* operator (or source) it serves, for the summary */
    char policy[16];
    uint64_t payload_size, file_size;
    int64_t created, last_used;
    tk_resource_usage res;
    int read_only_tier;
} entry;

struct selection;

typedef struct entry_list {
    entry *items;
    size_t n, cap;
    int oom;
    /* filters (NULL / 0: none) */
    const struct selection *sel;
    const char *kernel_glob;
    int64_t used_before;
} entry_list;

static int select_entry(void *user, const tk_cache_entry_info *info);

static char *dup_or_empty(const char *s)
{
    return strdup(s ? s : "");
}

static int collect(void *user, const tk_cache_entry_info *info)
{
    entry_list *l = user;
    if (l->sel && !select_entry((void *)l->sel, info))
        return 0;
    if (l->kernel_glob && fnmatch(l->kernel_glob, info->kernel ? info->kernel : "", 0) != 0)
        return 0;
    if (l->used_before && info->last_used >= l->used_before)
        return 0;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        entry *items = realloc(l->items, cap * sizeof *items);
        if (!items) {
            l->oom = 1;
            return 1;
        }
        l->items = items;
        l->cap = cap;
    }
    entry *e = &l->items[l->n];
    memset(e, 0, sizeof *e);
    e->key_hex = dup_or_empty(info->key_hex);
    e->path = dup_or_empty(info->path);
    tk__entry_desc d;
    tk__entry_describe(info, &d);
    e->kernel = dup_or_empty(info->kernel);
    e->source = dup_or_empty(info->source);
    e->backend = dup_or_empty(info->backend);
    e->arch = dup_or_empty(info->arch);
    e->compiler = dup_or_empty(info->compiler);
    e->options = dup_or_empty(info->options);
    e->source_hash = dup_or_empty(info->source_hash);
    e->label = strdup(d.label);
    e->op = strdup(d.op);
    snprintf(e->policy, sizeof e->policy, "%s", d.policy);
    e->payload_size = info->payload_size;
    e->file_size = info->file_size;
    e->created = info->created;
    e->last_used = info->last_used;
    e->res = info->resources;
    e->read_only_tier = info->read_only_tier;
    l->n++;
    if (!e->key_hex || !e->path || !e->kernel || !e->source || !e->backend || !e->arch ||
        !e->compiler || !e->options || !e->source_hash || !e->label || !e->op) {
        l->oom = 1;
        return 1;
    }
    return 0;
}

static void free_entry(entry *e)
{
    free(e->key_hex), free(e->path), free(e->kernel), free(e->source);
    free(e->backend), free(e->arch), free(e->compiler), free(e->options), free(e->label);
    free(e->op), free(e->source_hash);
}

static void free_entries(entry_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free_entry(&l->items[i]);
    free(l->items);
}

static const char *g_sort; /* --sort field for cmp_entry; NULL: arch, kernel */

static int cmp_u64_desc(uint64_t a, uint64_t b)
{
    return (a < b) - (a > b);
}

static int cmp_entry(const void *a, const void *b)
{
    const entry *x = a, *y = b;
    int c = 0;
    if (g_sort) {
        if (strcmp(g_sort, "key") == 0)
            c = strcmp(x->key_hex, y->key_hex);
        else if (strcmp(g_sort, "kernel") == 0)
            c = strcmp(x->label, y->label);
        else if (strcmp(g_sort, "size") == 0)
            c = cmp_u64_desc(x->file_size, y->file_size);
        else if (strcmp(g_sort, "created") == 0)
            c = cmp_u64_desc((uint64_t)x->created, (uint64_t)y->created);
        else if (strcmp(g_sort, "used") == 0)
            c = cmp_u64_desc((uint64_t)x->last_used, (uint64_t)y->last_used);
        if (c)
            return c;
    }
    c = strcmp(x->arch, y->arch);
    if (!c)
        c = strcmp(x->label, y->label);
    if (!c)
        c = strcmp(x->key_hex, y->key_hex);
    if (!c)
        c = x->read_only_tier - y->read_only_tier;
    return c;
}

/* Opens the cache named by the options; prints why not. */
static tk_cache *open_cache(const tk__cli_opts *opts)
{
    tk_config *cfg = tk__cli_config(opts);
    if (!cfg)
        return NULL;
    tk_cache *cache = NULL;
    tk_status st = tk_cache_open(cfg, &cache);
    tk_config_destroy(cfg);
    if (st != TK_OK) {
        tk__cli_error("cannot open the cache: %s", tk_status_str(st));
        return NULL;
    }
    return cache;
}

static int load_entries(tk_cache *cache, entry_list *l)
{
    tk_status st = tk_cache_list(cache, collect, l);
    if (l->oom) {
        tk__cli_error("out of memory while listing the cache");
        free_entries(l);
        return -1;
    }
    if (st != TK_OK) {
        tk__cli_error("cannot list %s: %s: %s", tk_cache_root(cache), tk_status_str(st),
                      tk_cache_last_error(cache));
        free_entries(l);
        return -1;
    }
    if (l->n > 1)
        qsort(l->items, l->n, sizeof *l->items, cmp_entry);
    return 0;
}

/* A resource count, "-" when unknown. */
static const char *res_str(int32_t v, char *buf, size_t size)
{
    if (v < 0)
        snprintf(buf, size, "-");
    else
        snprintf(buf, size, "%d", (int)v);
    return buf;
}

static void print_res_json(FILE *f, const char *name, int32_t v, int last)
{
    fprintf(f, "\"%s\": ", name);
    if (v < 0)
        fputs("null", f);
    else
        fprintf(f, "%d", (int)v);
    fputs(last ? "" : ", ", f);
}

static void list_json(const tk_cache *cache, const entry_list *l)
{
    uint64_t total = 0;
    char t1[40], t2[40];
    fputs("{\n  \"cache\": ", stdout);
    tk__json_str(stdout, tk_cache_root(cache));
    fputs(",\n  \"entries\": [", stdout);
    for (size_t i = 0; i < l->n; i++) {
        const entry *e = &l->items[i];
        total += e->file_size;
        fputs(i ? ",\n    {" : "\n    {", stdout);
        fputs("\"key\": ", stdout), tk__json_str(stdout, e->key_hex);
        fputs(", \"kernel\": ", stdout), tk__json_str(stdout, e->kernel);
        fputs(", \"label\": ", stdout), tk__json_str(stdout, e->label);
        fputs(", \"op\": ", stdout), tk__json_str(stdout, e->op);
        fputs(", \"policy\": ", stdout), tk__json_str(stdout, e->policy);
        fputs(", \"source\": ", stdout), tk__json_str(stdout, e->source);
        fputs(", \"backend\": ", stdout), tk__json_str(stdout, e->backend);
        fputs(", \"arch\": ", stdout), tk__json_str(stdout, e->arch);
        fputs(", \"compiler\": ", stdout), tk__json_str(stdout, e->compiler);
        fputs(", \"options\": ", stdout), tk__json_str(stdout, e->options);
        fputs(", \"source_hash\": ", stdout);
        if (e->source_hash[0])
            tk__json_str(stdout, e->source_hash);
        else
            fputs("null", stdout);
        fputs(", \"path\": ", stdout), tk__json_str(stdout, e->path);
        printf(", \"payload_size\": %llu, \"file_size\": %llu", (unsigned long long)e->payload_size,
               (unsigned long long)e->file_size);
        printf(", \"created\": \"%s\", \"last_used\": \"%s\"",
               tk__fmt_time_iso(e->created, t1, sizeof t1),
               tk__fmt_time_iso(e->last_used, t2, sizeof t2));
        printf(", \"read_only_tier\": %s, \"resources\": {", e->read_only_tier ? "true" : "false");
        print_res_json(stdout, "registers", e->res.registers, 0);
        print_res_json(stdout, "sgprs", e->res.sgprs, 0);
        print_res_json(stdout, "agprs", e->res.agprs, 0);
        print_res_json(stdout, "shared_bytes", e->res.shared_bytes, 0);
        print_res_json(stdout, "local_bytes", e->res.local_bytes, 0);
        print_res_json(stdout, "spill_count", e->res.spill_count, 0);
        print_res_json(stdout, "wavefront_size", e->res.wavefront_size, 0);
        print_res_json(stdout, "kernarg_bytes", e->res.kernarg_bytes, 0);
        print_res_json(stdout, "max_threads", e->res.max_threads, 1);
        fputs("}}", stdout);
    }
    printf("%s],\n  \"count\": %llu,\n  \"bytes\": %llu\n}\n", l->n ? "\n  " : "",
           (unsigned long long)l->n, (unsigned long long)total);
}

/* Width of the widest value of a column (at least the header's), capped. */
static int col_width(const entry_list *l, size_t offset, const char *header, int cap)
{
    int w = (int)strlen(header);
    for (size_t i = 0; i < l->n; i++) {
        const char *s = *(char *const *)((const char *)&l->items[i] + offset);
        int n = (int)strlen(s);
        if (n > w)
            w = n;
    }
    return w > cap ? cap : w;
}

/* Ends a listing's last line: how many of the entries are read-only, and
 * where those tiers are. */
static void print_read_only(const tk_cache *cache, const entry_list *l)
{
    size_t ro = 0;
    for (size_t i = 0; i < l->n; i++)
        ro += l->items[i].read_only_tier != 0;
    if (ro)
        printf(" (%zu of them read-only, in %s)", ro, tk_cache_lower_tiers(cache));
    putchar('\n');
}

static void list_text(const tk_cache *cache, const entry_list *l, int verbose)
{
    if (l->n == 0) {
        if (l->sel || l->kernel_glob || l->used_before)
            printf("cache %s: no entries match\n", tk_cache_root(cache));
        else
            printf("cache %s is empty\n", tk_cache_root(cache));
        return;
    }
    int wk = col_width(l, offsetof(entry, label), "KERNEL", 100);
    int wa = col_width(l, offsetof(entry, arch), "ARCH", 24);
    uint64_t total = 0;
    printf("%-12s  %-*s  %-*s  %10s  %-16s\n", "KEY", wk, "KERNEL", wa, "ARCH", "SIZE",
           "LAST USE");
    for (size_t i = 0; i < l->n; i++) {
        const entry *e = &l->items[i];
        char sz[32], u[32];
        total += e->file_size;
        printf("%-12.12s  %-*.*s  %-*.*s  %10s  %-16s%s\n", e->key_hex, wk, wk, e->label, wa, wa,
               e->arch, tk__fmt_size(e->file_size, sz, sizeof sz),
               tk__fmt_time(e->last_used, u, sizeof u), e->read_only_tier ? "  (read-only)" : "");
        if (verbose) {
            char r[9][16], c[32];
            printf("    key %s  entry %s  source %s  backend %s  created %s\n", e->key_hex,
                   e->kernel, e->source, e->backend, tk__fmt_time(e->created, c, sizeof c));
            printf("    compiler %s  code object %llu bytes\n", e->compiler,
                   (unsigned long long)e->payload_size);
            printf("    options: %s\n", e->options[0] ? e->options : "(none)");
            printf("    source: %s (tokitai-jit --source %.12s)\n",
                   e->source_hash[0] ? e->source_hash : "in the key", e->key_hex);
            printf("    resources: registers/VGPR %s  SGPR %s  AGPR %s  shared/LDS %s  "
                   "local/scratch %s  spills %s  wavefront %s  kernarg %s  max threads %s\n",
                   res_str(e->res.registers, r[0], 16), res_str(e->res.sgprs, r[1], 16),
                   res_str(e->res.agprs, r[2], 16), res_str(e->res.shared_bytes, r[3], 16),
                   res_str(e->res.local_bytes, r[4], 16), res_str(e->res.spill_count, r[5], 16),
                   res_str(e->res.wavefront_size, r[6], 16),
                   res_str(e->res.kernarg_bytes, r[7], 16), res_str(e->res.max_threads, r[8], 16));
            printf("    file: %s\n", e->path);
        }
    }
    char tot[32];
    printf("%zu %s, %s in %s", l->n, l->n == 1 ? "entry" : "entries",
           tk__fmt_size(total, tot, sizeof tot), tk_cache_root(cache));
    print_read_only(cache, l);
}

/* Above this many entries a plain --list shows a summary (--all: rows). */
enum { LIST_SUMMARY_AT = 40 };

typedef struct group {
    const char *op, *arch, *policy;
    uint64_t count, bytes, code;
    int64_t last_used;
} group;

static int cmp_group(const void *a, const void *b)
{
    const group *x = a, *y = b;
    int c = strcmp(x->arch, y->arch);
    if (!c)
        c = strcmp(x->op, y->op);
    return c ? c : strcmp(x->policy, y->policy);
}

/* A row per operator (or user source), target and policy. */
static void list_summary(const tk_cache *cache, const entry_list *l)
{
    group *g = calloc(l->n, sizeof *g);
    size_t ng = 0;
    uint64_t total = 0, code = 0;
    if (!g) {
        tk__cli_error("out of memory");
        return;
    }
    for (size_t i = 0; i < l->n; i++) {
        const entry *e = &l->items[i];
        size_t k = 0;
        while (k < ng && !(strcmp(g[k].op, e->op) == 0 && strcmp(g[k].arch, e->arch) == 0 &&
                           strcmp(g[k].policy, e->policy) == 0))
            k++;
        if (k == ng) {
            g[ng].op = e->op;
            g[ng].arch = e->arch;
            g[ng].policy = e->policy;
            ng++;
        }
        g[k].count++;
        g[k].bytes += e->file_size;
        g[k].code += e->payload_size;
        if (e->last_used > g[k].last_used)
            g[k].last_used = e->last_used;
        total += e->file_size;
        code += e->payload_size;
    }
    qsort(g, ng, sizeof *g, cmp_group);
    int wo = 2, wa = 4;
    for (size_t k = 0; k < ng; k++) {
        int n = (int)strlen(g[k].op), a = (int)strlen(g[k].arch);
        wo = n > wo ? (n > 40 ? 40 : n) : wo;
        wa = a > wa ? (a > 24 ? 24 : a) : wa;
    }
    printf("%-*s  %-*s  %-7s  %7s  %10s  %12s  %-16s\n", wo, "OP", wa, "ARCH", "POLICY", "ENTRIES",
           "SIZE", "CODE OBJECTS", "LAST USE");
    for (size_t k = 0; k < ng; k++) {
        char b1[32], b2[32], u[32];
        printf("%-*.*s  %-*.*s  %-7s  %7llu  %10s  %12s  %-16s\n", wo, wo, g[k].op, wa, wa,
               g[k].arch, g[k].policy, (unsigned long long)g[k].count,
               tk__fmt_size(g[k].bytes, b1, sizeof b1), tk__fmt_size(g[k].code, b2, sizeof b2),
               tk__fmt_time(g[k].last_used, u, sizeof u));
    }
    char t1[32], t2[32];
    printf("%zu entries in %zu %s, %s on disk for %s of code objects, in %s", l->n, ng,
           ng == 1 ? "group" : "groups", tk__fmt_size(total, t1, sizeof t1),
           tk__fmt_size(code, t2, sizeof t2), tk_cache_root(cache));
    print_read_only(cache, l);
    printf("(one row per entry: --all; narrow with --arch, --ops, --kernel GLOB, --older-than, "
           "--limit)\n");
    free(g);
}

static char **split_list(const char *text);
static void free_list(char **list);

typedef struct selection {
    char **ops;   /* NULL-terminated or NULL: all */
    char **archs; /* NULL-terminated or NULL: all */
} selection;

/* Checks --ops and --arch names; 0, or an exit code (message printed). */
static int make_selection(const tk__cli_opts *opts, selection *sel)
{
    sel->ops = sel->archs = NULL;
    if ((opts->ops_list && !(sel->ops = split_list(opts->ops_list))) ||
        (opts->arch_list && !(sel->archs = split_list(opts->arch_list)))) {
        tk__cli_error("out of memory");
        return TK__EXIT_FAIL;
    }
    for (char **p = sel->ops; p && *p; p++) {
        tk_op op;
        if (tk_op_from_name(*p, &op) != TK_OK) {
            tk__cli_error("--ops: unknown operator '%s'", *p);
            return TK__EXIT_USAGE;
        }
    }
    for (char **p = sel->archs; p && *p; p++) {
        if (!tk__target_name_valid(*p)) {
            tk__cli_error("--arch: unknown target '%s'", *p);
            return TK__EXIT_USAGE;
        }
    }
    return 0;
}

int tk__cmd_list(const tk__cli_opts *opts)
{
    selection sel;
    int rc = make_selection(opts, &sel);
    if (rc) {
        free_list(sel.ops);
        free_list(sel.archs);
        return rc;
    }
    tk_cache *cache = open_cache(opts);
    if (!cache) {
        free_list(sel.ops);
        free_list(sel.archs);
        return TK__EXIT_FAIL;
    }
    entry_list l;
    memset(&l, 0, sizeof l);
    l.sel = sel.ops || sel.archs ? &sel : NULL;
    l.kernel_glob = opts->kernel_glob;
    l.used_before = opts->older_than ? (int64_t)time(NULL) - opts->older_than : 0;
    g_sort = opts->sort;
    rc = TK__EXIT_FAIL;
    if (load_entries(cache, &l) == 0) {
        if (opts->limit && l.n > opts->limit) {
            for (size_t i = (size_t)opts->limit; i < l.n; i++)
                free_entry(&l.items[i]);
            l.n = (size_t)opts->limit;
        }
        if (opts->json)
            list_json(cache, &l);
        else if (l.n > LIST_SUMMARY_AT && !opts->all_rows && !opts->verbose && !opts->limit)
            list_summary(cache, &l);
        else
            list_text(cache, &l, opts->verbose);
        free_entries(&l);
        rc = TK__EXIT_OK;
    }
    tk_cache_close(cache);
    free_list(sel.ops);
    free_list(sel.archs);
    return rc;
}

int tk__cmd_stats(const tk__cli_opts *opts)
{
    tk_cache *cache = open_cache(opts);
    if (!cache)
        return TK__EXIT_FAIL;
    tk_cache_stats s = TK_STRUCT_INIT(tk_cache_stats);
    tk_status st = tk_cache_get_stats(cache, &s);
    if (st != TK_OK) {
        tk__cli_error("cannot read statistics of %s: %s: %s", tk_cache_root(cache),
                      tk_status_str(st), tk_cache_last_error(cache));
        tk_cache_close(cache);
        return TK__EXIT_FAIL;
    }
    uint64_t lookups = s.hits + s.misses;
    double hit_pct = lookups ? 100.0 * (double)s.hits / (double)lookups : 0.0;
    if (opts->json) {
        char since[40];
        fputs("{\"cache\": ", stdout);
        tk__json_str(stdout, tk_cache_root(cache));
        printf(", \"entries\": %llu, \"bytes\": %llu, \"max_bytes\": %llu, \"temp_files\": %llu, "
               "\"bad_files\": %llu, \"hits\": %llu, \"misses\": %llu, \"compiles\": %llu, "
               "\"compile_seconds\": %.3f, \"fallback_calls\": %llu, \"errors\": %llu, "
               "\"source_bytes\": %llu, ",
               (unsigned long long)s.entries, (unsigned long long)s.bytes,
               (unsigned long long)s.max_bytes, (unsigned long long)s.temp_files,
               (unsigned long long)s.bad_files, (unsigned long long)s.hits,
               (unsigned long long)s.misses, (unsigned long long)s.compiles, s.compile_seconds,
               (unsigned long long)s.fallback_calls, (unsigned long long)s.errors,
               (unsigned long long)s.source_bytes);
        fputs("\"read_only_tiers\": ", stdout);
        tk__json_str(stdout, *tk_cache_lower_tiers(cache) ? tk_cache_lower_tiers(cache) : NULL);
        fputs(", \"stats_since\": ", stdout);
        if (s.stats_since)
            printf("\"%s\"}\n", tk__fmt_time_iso(s.stats_since, since, sizeof since));
        else
            fputs("null}\n", stdout);
    } else {
        char b[32], m[32], t[32];
        /* Kept sources count toward the limit with the entries. */
        double pct =
            s.max_bytes ? 100.0 * (double)(s.bytes + s.source_bytes) / (double)s.max_bytes : 0.0;
        printf("cache:          %s\n", tk_cache_root(cache));
        printf("entries:        %llu\n", (unsigned long long)s.entries);
        printf("size:           %s (%llu bytes)\n", tk__fmt_size(s.bytes, b, sizeof b),
               (unsigned long long)s.bytes);
        if (s.source_bytes)
            printf("sources:        %s kept (shown by --source KEY)\n",
                   tk__fmt_size(s.source_bytes, t, sizeof t));
        printf("limit:          %s (%.1f%% used)\n", tk__fmt_size(s.max_bytes, m, sizeof m), pct);
        printf("temp files:     %llu\n", (unsigned long long)s.temp_files);
        printf("bad files:      %llu%s\n", (unsigned long long)s.bad_files,
               s.bad_files ? " (run --verify to name them)" : "");
        printf("counts since:   %s\n", s.stats_since ? tk__fmt_time(s.stats_since, t, sizeof t)
                                                      : "the cache was created (never zeroed)");
        printf("hits:           %llu (%.1f%% of lookups)\n", (unsigned long long)s.hits, hit_pct);
        printf("misses:         %llu\n", (unsigned long long)s.misses);
        printf("compiles:       %llu (%.1f s in the compiler)\n", (unsigned long long)s.compiles,
               s.compile_seconds);
        printf("fallback calls: %llu\n", (unsigned long long)s.fallback_calls);
        printf("errors:         %llu\n", (unsigned long long)s.errors);
        printf("read-only:      %s (searched after it; not counted above)\n",
               *tk_cache_lower_tiers(cache) ? tk_cache_lower_tiers(cache) : "none");
    }
    tk_cache_close(cache);
    return TK__EXIT_OK;
}

/* --verify names every bad file (each is a file the user may want to see):
 * no cap there. */
static void print_bad(void *user, const char *path, const char *why)
{
    (void)user;
    fflush(stdout);
    fprintf(stderr, "bad: %s: %s\n", path, why ? why : "unreadable");
}

int tk__cmd_verify(const tk__cli_opts *opts)
{
    tk_cache *cache = open_cache(opts);
    if (!cache)
        return TK__EXIT_FAIL;
    uint64_t n_bad = 0;
    tk_status st = tk_cache_verify(cache, print_bad, NULL, &n_bad);
    int rc = TK__EXIT_OK;
    if (st != TK_OK) {
        tk__cli_error("cannot verify %s: %s: %s", tk_cache_root(cache), tk_status_str(st),
                      tk_cache_last_error(cache));
        rc = TK__EXIT_FAIL;
    } else if (n_bad) {
        printf("%llu bad %s in %s\n", (unsigned long long)n_bad, n_bad == 1 ? "file" : "files",
               tk_cache_root(cache));
        rc = TK__EXIT_FAIL;
    } else {
        tk_cache_stats s = TK_STRUCT_INIT(tk_cache_stats);
        if (tk_cache_get_stats(cache, &s) == TK_OK)
            printf("%llu %s verified in %s: all good\n", (unsigned long long)s.entries,
                   s.entries == 1 ? "entry" : "entries", tk_cache_root(cache));
        else
            printf("all entries in %s are good\n", tk_cache_root(cache));
    }
    tk_cache_close(cache);
    return rc;
}

int tk__cmd_prune(const tk__cli_opts *opts)
{
    tk_cache *cache = open_cache(opts);
    if (!cache)
        return TK__EXIT_FAIL;
    uint64_t n = 0;
    tk_status st = tk_cache_prune(cache, opts->have_max_size ? opts->max_size : 0, &n);
    int rc = TK__EXIT_OK;
    if (st != TK_OK) {
        tk__cli_error("cannot prune %s: %s: %s", tk_cache_root(cache), tk_status_str(st),
                      tk_cache_last_error(cache));
        rc = TK__EXIT_FAIL;
    } else {
        tk_cache_stats s = TK_STRUCT_INIT(tk_cache_stats);
        char b[32];
        printf("removed %llu %s from %s", (unsigned long long)n, n == 1 ? "file" : "files",
               tk_cache_root(cache));
        if (tk_cache_get_stats(cache, &s) == TK_OK)
            printf("; %llu %s left, %s", (unsigned long long)s.entries,
                   s.entries == 1 ? "entry" : "entries", tk__fmt_size(s.bytes, b, sizeof b));
        putchar('\n');
    }
    tk_cache_close(cache);
    return rc;
}

int tk__cmd_clear(const tk__cli_opts *opts)
{
    tk_cache *cache = open_cache(opts);
    if (!cache)
        return TK__EXIT_FAIL;
    uint64_t n = 0;
    tk_status st = tk_cache_clear(cache, &n);
    int rc = TK__EXIT_OK;
    if (st != TK_OK) {
        tk__cli_error("cannot clear %s: %s: %s", tk_cache_root(cache), tk_status_str(st),
                      tk_cache_last_error(cache));
        rc = TK__EXIT_FAIL;
    } else {
        printf("removed %llu %s from %s\n", (unsigned long long)n, n == 1 ? "entry" : "entries",
               tk_cache_root(cache));
    }
    tk_cache_close(cache);
    return rc;
}

/* ------------------------------------------------------- export / import */

/* Splits a comma/space-separated list into a NULL-terminated array. */
static char **split_list(const char *text)
{
    size_t n = 1;
    for (const char *p = text; *p; p++)
        n += (*p == ',' || *p == ' ');
    char **out = calloc(n + 1, sizeof *out);
    char *copy = strdup(text);
    if (!out || !copy) {
        free(out), free(copy);
        return NULL;
    }
    size_t k = 0;
    char *save = NULL;
    for (char *tok = strtok_r(copy, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save))
        out[k++] = strdup(tok);
    free(copy);
    return out;
}

static void free_list(char **list)
{
    if (!list)
        return;
    for (char **p = list; *p; p++)
        free(*p);
    free(list);
}

/* An arch item matches the full target id or its name before the features
 * ("gfx90a" matches "gfx90a:sramecc+:xnack-"). */
static int arch_matches(const char *item, const char *arch)
{
    size_t n = strlen(item);
    return strncmp(item, arch, n) == 0 && (arch[n] == 0 || arch[n] == ':');
}

/* An entry belongs to operator op when that operator uses it (label.c):
 * the GEMM family's kernels by their layout, the split-K reduce of the
 * gradients with both, a helper source with the operator that calls it, a
 * tuning record with its operator; user kernels with none. */
static int op_matches(const char *op, const tk_cache_entry_info *info)
{
    tk_op o;
    if (tk_op_from_name(op, &o) != TK_OK)
        return 0;
    tk__entry_desc d;
    tk__entry_describe(info, &d);
    return (d.ops >> (unsigned)o) & 1u;
}

static int select_entry(void *user, const tk_cache_entry_info *info)
{
    const selection *sel = user;
    int ok = 1;
    if (sel->archs) {
        ok = 0;
        for (char **p = sel->archs; *p && !ok; p++)
            ok = info->arch && arch_matches(*p, info->arch);
    }
    if (ok && sel->ops) {
        ok = 0;
        for (char **p = sel->ops; *p && !ok; p++)
            ok = op_matches(*p, info);
    }
    return ok;
}

int tk__cmd_export(const tk__cli_opts *opts)
{
    selection sel = {NULL, NULL};
    int rc = TK__EXIT_FAIL;
    tk_cache *cache = NULL;
    if (opts->ops_list && !(sel.ops = split_list(opts->ops_list)))
        goto oom;
    if (opts->arch_list && !(sel.archs = split_list(opts->arch_list)))
        goto oom;
    for (char **p = sel.ops; p && *p; p++) {
        tk_op op;
        if (tk_op_from_name(*p, &op) != TK_OK) {
            tk__cli_error("--ops: unknown operator '%s'", *p);
            rc = TK__EXIT_USAGE;
            goto done;
        }
    }
    for (char **p = sel.archs; p && *p; p++) {
        if (!tk__target_name_valid(*p)) {
            tk__cli_error("--arch: unknown target '%s'", *p);
            rc = TK__EXIT_USAGE;
            goto done;
        }
    }
    cache = open_cache(opts);
    if (!cache)
        goto done;
    uint64_t n = 0;
    int filtered = sel.ops || sel.archs;
    tk_status st = tk_cache_export(cache, opts->file, filtered ? select_entry : NULL, &sel, &n);
    if (st != TK_OK) {
        tk__cli_error("cannot export to %s: %s: %s", opts->file, tk_status_str(st),
                      tk_cache_last_error(cache));
        goto done;
    }
    printf("exported %llu %s from %s to %s\n", (unsigned long long)n, n == 1 ? "entry" : "entries",
           tk_cache_root(cache), opts->file);
    rc = TK__EXIT_OK;
    goto done;
oom:
    tk__cli_error("out of memory");
done:
    free_list(sel.ops);
    free_list(sel.archs);
    tk_cache_close(cache);
    return rc;
}

int tk__cmd_import(const tk__cli_opts *opts)
{
    char why[1200];
    int fd = tk__cli_open_regular(opts->file, 0, NULL, why, sizeof why);
    if (fd < 0) { /* a FIFO or a device would hang or flood the reader */
        tk__cli_error("cannot import %s", why);
        return TK__EXIT_FAIL;
    }
    close(fd);
    tk_cache *cache = open_cache(opts);
    if (!cache)
        return TK__EXIT_FAIL;
    uint64_t n_ok = 0, n_bad = 0;
    int rc = TK__EXIT_OK;
    tk__cli_capped cap = {"rejected", opts->file, 0};
    tk_status st = tk_cache_import(cache, opts->file, tk__cli_capped_bad, &cap, &n_ok, &n_bad);
    tk__cli_capped_end(&cap);
    if (st != TK_OK) {
        tk__cli_error("cannot import %s: %s: %s", opts->file, tk_status_str(st),
                      tk_cache_last_error(cache));
        rc = TK__EXIT_FAIL;
    } else {
        printf("imported %llu %s into %s", (unsigned long long)n_ok,
               n_ok == 1 ? "entry" : "entries", tk_cache_root(cache));
        if (n_bad)
            printf("; %llu rejected", (unsigned long long)n_bad);
        putchar('\n');
        if (n_bad)
            rc = TK__EXIT_FAIL;
    }
    tk_cache_close(cache);
    return rc;
}

int tk__cmd_zero_stats(const tk__cli_opts *opts)
{
    tk_cache *cache = open_cache(opts);
    if (!cache)
        return TK__EXIT_FAIL;
    tk_status st = tk_cache_zero_stats(cache);
    int rc = TK__EXIT_OK;
    if (st != TK_OK) {
        tk__cli_error("cannot zero the statistics of %s: %s: %s", tk_cache_root(cache),
                      tk_status_str(st), tk_cache_last_error(cache));
        rc = TK__EXIT_FAIL;
    } else {
        printf("statistics of %s zeroed\n", tk_cache_root(cache));
    }
    tk_cache_close(cache);
    return rc;
}

int tk__cmd_set_max_size(const tk__cli_opts *opts)
{
    tk_cache *cache = open_cache(opts);
    if (!cache)
        return TK__EXIT_FAIL;
    tk_status st = tk_cache_set_max_size(cache, opts->max_size);
    int rc = TK__EXIT_OK;
    if (st != TK_OK) {
        tk__cli_error("cannot set the size limit of %s: %s: %s", tk_cache_root(cache),
                      tk_status_str(st), tk_cache_last_error(cache));
        rc = TK__EXIT_FAIL;
    } else {
        tk_cache_stats s = TK_STRUCT_INIT(tk_cache_stats);
        char b[32];
        if (tk_cache_get_stats(cache, &s) == TK_OK)
            printf("size limit of %s set to %s%s\n", tk_cache_root(cache),
                   tk__fmt_size(s.max_bytes, b, sizeof b),
                   opts->max_size ? "" : " (the default)");
        if (tk__env_get(TK__ENV_CACHE_MAX_SIZE))
            printf("note: TOKITAI_JIT_CACHE_MAX_SIZE is set and comes first where it is set\n");
    }
    tk_cache_close(cache);
    return rc;
}
