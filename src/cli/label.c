/*
 * What a cache entry is, for people (--list, --export --ops): the operator
 * it serves, the policy that built it, and a label naming the
 * specialisation, read from the entry's kernel, source and defines.
 *
 * The operators' defines are the planners' (src/ops/gemm/launch.c,
 * softmax.c, embedding.c). Every define an entry carries shows in its label:
 * spelled out, or a word for a flag's unusual value (TK_ALIGNED=0:
 * "unaligned"; the usual 1 shows nothing, and the planners never leave out
 * a flag one kernel of that kind has), or as NAME=VALUE when this file does
 * not know it; so two entries of one target differ in their labels
 * whenever their defines differ.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define MAX_DEFS 64

typedef struct def {
    char name[48];
    char value[48];
    int has_value;
    int used;
} def;

typedef struct defs {
    def d[MAX_DEFS];
    int n;
} defs;

/* The -D options of an option string (space-separated, as the cache records
 * them); "TK_" is kept in the names. */
static void parse_defs(const char *options, defs *out)
{
    out->n = 0;
    for (const char *p = options ? options : ""; *p;) {
        while (*p == ' ')
            p++;
        size_t n = strcspn(p, " ");
        if (n > 2 && p[0] == '-' && p[1] == 'D' && out->n < MAX_DEFS) {
            def *d = &out->d[out->n++];
            memset(d, 0, sizeof *d);
            const char *tok = p + 2, *end = p + n;
            const char *eq = memchr(tok, '=', (size_t)(end - tok));
            size_t nl = (size_t)((eq ? eq : end) - tok);
            if (nl >= sizeof d->name)
                nl = sizeof d->name - 1;
            memcpy(d->name, tok, nl);
            if (eq) {
                size_t vl = (size_t)(end - eq - 1);
                if (vl >= sizeof d->value)
                    vl = sizeof d->value - 1;
                memcpy(d->value, eq + 1, vl);
                d->has_value = 1;
            }
        }
        p += n;
    }
}

/* The define named name (marked as shown), or NULL. */
static def *take(defs *ds, const char *name)
{
    for (int i = 0; i < ds->n; i++)
        if (strcmp(ds->d[i].name, name) == 0) {
            ds->d[i].used = 1;
            return &ds->d[i];
        }
    return NULL;
}

/* The value of define name as a number; fallback when absent or not one. */
static long take_num(defs *ds, const char *name, long fallback)
{
    const def *d = take(ds, name);
    if (!d || !d->has_value || !d->value[0])
        return fallback;
    char *end = NULL;
    long v = strtol(d->value, &end, 10);
    return end && *end == 0 ? v : fallback;
}

typedef struct out_buf {
    char *p;
    size_t size, len;
} out_buf;

static void put(out_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(out_buf *b, const char *fmt, ...)
{
    if (b->len + 1 >= b->size)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->p + b->len, b->size - b->len, fmt, ap);
    va_end(ap);
    if (n > 0)
        b->len += (size_t)n < b->size - b->len ? (size_t)n : b->size - b->len - 1;
}

/* Defines not shown yet, as NAME=VALUE without "TK_". */
static void put_rest(out_buf *b, defs *ds)
{
    for (int i = 0; i < ds->n; i++) {
        def *d = &ds->d[i];
        if (d->used)
            continue;
        d->used = 1;
        const char *name = strncmp(d->name, "TK_", 3) == 0 ? d->name + 3 : d->name;
        if (d->has_value)
            put(b, " %s=%s", name, d->value);
        else
            put(b, " %s", name);
    }
}

/* A flag whose usual value is 1: word when it is 0, NAME=VALUE when it is
 * anything else but 1. */
static void flag(out_buf *b, defs *ds, const char *name, const char *word)
{
    const def *d = take(ds, name);
    if (!d || (d->has_value && strcmp(d->value, "1") == 0))
        return;
    if (d->has_value && strcmp(d->value, "0") == 0)
        put(b, " %s", word);
    else
        put(b, " %s=%s", name + 3, d->has_value ? d->value : "");
}

static unsigned op_bit(tk_op op)
{
    return 1u << (unsigned)op;
}

/* The GEMM family: one source and entry for the three operators; the
 * layout defines tell which operator a kernel serves, and the kernel's
 * M, N, K are the operator's in another order (src/ops/gemm/plan.c,
 * tk__gemm_plan_op and tk__gemm_plan_swap). */
static void describe_gemm(defs *ds, tk__entry_desc *e, out_buf *b)
{
    const long a_k = take_num(ds, "TK_A_KMAJOR", -1), b_k = take_num(ds, "TK_B_KMAJOR", -1);
    const long out16 = take_num(ds, "TK_OUT_F16", -1);
    const int swap = take(ds, "TK_SWAP") != NULL;
    if (take(ds, "TK_GEMM_REDUCE")) {
        /* The split-K sum: one per output type, shared by the gradients. */
        if (out16 == 0) {
            e->ops = op_bit(TK_OP_GEMM_F16_FWD);
            snprintf(e->op, sizeof e->op, "gemm_f16_fwd");
        } else {
            e->ops = op_bit(TK_OP_GEMM_F16_GRAD_A) | op_bit(TK_OP_GEMM_F16_GRAD_B);
            snprintf(e->op, sizeof e->op, "gemm_f16_grad_a/b");
        }
        snprintf(e->policy, sizeof e->policy, "any");
        put(b, "%s split-K reduce", e->op);
        put_rest(b, ds);
        return;
    }
    /* the operator's layout: undo the swap first */
    const long la = swap ? b_k : a_k, lb = swap ? a_k : b_k;
    tk_op op;
    int known = 1;
    if (la == 1 && lb == 0 && out16 == 0)
        op = TK_OP_GEMM_F16_FWD;
    else if (la == 1 && lb == 1 && out16 == 1)
        op = TK_OP_GEMM_F16_GRAD_A;
    else if (la == 0 && lb == 0 && out16 == 1)
        op = TK_OP_GEMM_F16_GRAD_B;
    else
        known = 0, op = TK_OP_GEMM_F16_FWD;
    const def *dm = take(ds, "TK_M"), *dn = take(ds, "TK_N"), *dk = take(ds, "TK_K");
    const char *km = dm ? dm->value : NULL, *kn = dn ? dn->value : NULL,
               *kk = dk ? dk->value : NULL;
    if (swap) {
        const char *t = km;
        km = kn, kn = t;
    }
    const char *m = km, *n = kn, *k = kk; /* forward: as the kernel has them */
    if (op == TK_OP_GEMM_F16_GRAD_A)
        n = kk, k = kn;
    else if (op == TK_OP_GEMM_F16_GRAD_B)
        m = kk, k = km;
    if (known) {
        e->ops = op_bit(op);
        snprintf(e->op, sizeof e->op, "%s", tk_op_name(op));
        put(b, "%s", e->op);
    } else {
        e->ops = op_bit(TK_OP_GEMM_F16_FWD) | op_bit(TK_OP_GEMM_F16_GRAD_A) |
                 op_bit(TK_OP_GEMM_F16_GRAD_B);
        snprintf(e->op, sizeof e->op, "gemm_f16");
        put(b, "gemm_f16 A_KMAJOR=%ld B_KMAJOR=%ld OUT_F16=%ld", a_k, b_k, out16);
    }
    if (m)
        put(b, " M=%s", m);
    if (n)
        put(b, " N=%s", n);
    if (k)
        put(b, " K=%s", k);
    const int baked = !!dm + !!dn + !!dk;
    snprintf(e->policy, sizeof e->policy, "%s",
             baked == 3   ? "exact"
             : baked == 0 ? "generic"
                          : "stable");

    const long wgmma = take_num(ds, "TK_WGMMA", 0);
    if (take(ds, "TK_GEMM_SIMPLE")) {
        put(b, " simple");
    } else if (take(ds, "TK_GEMM_SKINNY")) {
        put(b, " skinny");
    } else if (take(ds, "TK_GEMM_SMALLK")) {
        put(b, " small-K");
    } else if (wgmma) {
        /* an absent TK_BM is 128 (launch.c bakes only the others) */
        put(b, " wgmma%s tile %ldx%ld", wgmma == 2 ? "+tma" : "", take_num(ds, "TK_BM", 128),
            take_num(ds, "TK_BN", 0));
    } else if (take(ds, "TK_BK")) {
        put(b, " mma tile %ldx%ldx%ld warps %ldx%ld", take_num(ds, "TK_BM", 0),
            take_num(ds, "TK_BN", 0), take_num(ds, "TK_BK", 0), take_num(ds, "TK_WM", 0),
            take_num(ds, "TK_WN", 0));
    }
    if (take(ds, "TK_STAGES"))
        put(b, " stages %ld", take_num(ds, "TK_STAGES", 0));
    if (take(ds, "TK_KS_ONE"))
        put(b, " one consumer");
    if (swap)
        put(b, " swap");
    if (take(ds, "TK_CLUSTER"))
        put(b, " cluster %ld", take_num(ds, "TK_CLUSTER", 0));
    if (take(ds, "TK_CLUSTER_ROWS"))
        put(b, " of row tiles");
    if (take(ds, "TK_SPLITK")) {
        /* 2: summed in a cluster of TK_KSPLITS blocks */
        if (take_num(ds, "TK_SPLITK", 1) == 2 && take(ds, "TK_KSPLITS"))
            put(b, " split-K %ld in a cluster", take_num(ds, "TK_KSPLITS", 0));
        else
            put(b, " split-K");
    }
    if (take(ds, "TK_STREAMK"))
        put(b, " stream-K");
    if (take(ds, "TK_EPI_TMA"))
        put(b, " tma-store");
    flag(b, ds, "TK_EPI_SMEM", "direct-store");
    flag(b, ds, "TK_ALIGNED", "unaligned");
    flag(b, ds, "TK_VEC_OUT", "scalar-out");
    if (take(ds, "TK_PDL"))
        put(b, " pdl");
    put_rest(b, ds);
}

/* An embedded source of another family: the operator whose name starts
 * its entry point (tk_softmax_f16_fwd_long -> softmax_f16_fwd); a helper
 * source no operator is named after (embedding_sort) goes with the
 * operator that uses it. */
static void describe_op(const char *kernel, const char *source, defs *ds, tk__entry_desc *e,
                        out_buf *b)
{
    const char *name = strncmp(kernel, "tk_", 3) == 0 ? kernel + 3 : kernel;
    size_t best = 0;
    for (int i = 0; i < TK_OP_COUNT; i++) {
        const char *op = tk_op_name((tk_op)i);
        size_t n = op ? strlen(op) : 0;
        if (n > best && strncmp(name, op, n) == 0 && (name[n] == 0 || name[n] == '_')) {
            best = n;
            e->ops = op_bit((tk_op)i);
            snprintf(e->op, sizeof e->op, "%s", op);
        }
    }
    if (!best && strcmp(source, "embedding_sort") == 0) {
        /* the deterministic backward's sort (src/ops/embedding.c) */
        e->ops = op_bit(TK_OP_EMBEDDING_F16_BWD);
        snprintf(e->op, sizeof e->op, "%s", tk_op_name(TK_OP_EMBEDDING_F16_BWD));
    } else if (!best) {
        snprintf(e->op, sizeof e->op, "%s", source);
    }
    put(b, "%s", name);
    static const char *const dims[] = {"ROWS", "COLS", "V", "D", "Q"};
    int baked = 0;
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        char tk[16];
        snprintf(tk, sizeof tk, "TK_%s", dims[i]);
        const def *d = take(ds, tk);
        if (d) {
            put(b, " %s=%s", dims[i], d->value);
            baked = 1;
        }
    }
    /* Softmax and embedding bake only the width (stable and exact build the
     * same kernel); their helpers bake nothing under any policy. */
    const int has_dims = strncmp(source, "softmax", 7) == 0 || strcmp(source, "embedding_f16") == 0;
    snprintf(e->policy, sizeof e->policy, "%s", baked ? "stable" : has_dims ? "generic" : "any");
    put_rest(b, ds);
}

/* 1 when name is one of the library's own sources (a user source is
 * recorded as "user:<hash>" or under the label its caller gave). */
static int is_embedded(const char *name)
{
    const char *const *all = tk_embedded_sources();
    for (size_t i = 0; all && all[i]; i++)
        if (strcmp(all[i], name) == 0)
            return 1;
    return 0;
}

void tk__entry_describe(const tk_cache_entry_info *info, tk__entry_desc *e)
{
    const char *kernel = info->kernel ? info->kernel : "";
    const char *source = info->source ? info->source : "";
    out_buf b = {e->label, sizeof e->label, 0};
    defs *ds = malloc(sizeof *ds);
    memset(e, 0, sizeof *e);
    if (strncmp(source, "tune:", 5) == 0) {
        /* A tuning record (tk_op_tune) of a GEMM family: a line per class of
         * M (--verbose shows them as the options). */
        unsigned classes = 0;
        for (const char *c = info->options ? info->options : ""; *c; c++)
            classes += *c == '\n';
        tk_op op;
        if (tk_op_from_name(source + 5, &op) == TK_OK)
            e->ops = op_bit(op);
        snprintf(e->op, sizeof e->op, "%s", source + 5);
        snprintf(e->policy, sizeof e->policy, "-");
        put(&b, "tuning %s %s: %u class%s", source + 5, kernel, classes, classes == 1 ? "" : "es");
        e->tuning = 1;
        free(ds);
        return;
    }
    if (!ds) { /* out of memory: the names alone */
        snprintf(e->op, sizeof e->op, "%s", source);
        snprintf(e->policy, sizeof e->policy, "-");
        put(&b, "%s", kernel);
        return;
    }
    parse_defs(info->options, ds);
    if (!is_embedded(source)) {
        /* A user kernel: its source's name (or hash) and its defines. */
        snprintf(e->op, sizeof e->op, "%s", source[0] ? source : kernel);
        snprintf(e->policy, sizeof e->policy, "-");
        put(&b, "%s", kernel);
        put_rest(&b, ds);
        e->user = 1;
    } else if (strcmp(source, "gemm_f16") == 0) {
        describe_gemm(ds, e, &b);
    } else {
        describe_op(kernel, source, ds, e, &b);
    }
    free(ds);
}
