/*
 * A small Itanium C++ ABI demangler (symbols.h): function names with
 * namespaces, template arguments (types and integer literals), builtin,
 * pointer, reference, const/volatile and class parameter types, and the
 * substitutions (S_, S0_, T_) those produce. Anything else (function
 * pointers, member pointers, expressions, packs...) makes the parse fail,
 * and the caller shows the symbol as it is.
 */
#include "jit/symbols.h"

#include <stdio.h>
#include <string.h>

#include "tokitai/tokitai.h"

#define MAX_SUBS 64
#define TEXT 160

typedef struct item {
    char text[TEXT];
    int kind;
} item;

typedef struct dm {
    const char *p;
    item subs[MAX_SUBS];
    int n_subs;
    item targs[MAX_SUBS];
    int n_targs;
    int ends_in_targs; /* the last nested name ended with template arguments */
    int failed;
} dm;

static void add_sub(dm *d, const item *it)
{
    if (d->n_subs < MAX_SUBS)
        d->subs[d->n_subs++] = *it;
    else
        d->failed = 1;
}

static void cat(char *dst, const char *src)
{
    size_t n = strlen(dst);
    snprintf(dst + n, TEXT - n, "%s", src);
}

static int number(dm *d, unsigned long *v)
{
    if (*d->p < '0' || *d->p > '9')
        return 0;
    *v = 0;
    while (*d->p >= '0' && *d->p <= '9' && *v < 100000)
        *v = *v * 10 + (unsigned long)(*d->p++ - '0');
    return 1;
}

/* <len><chars> into out. */
static int source_name(dm *d, char *out)
{
    unsigned long n;
    if (!number(d, &n) || n == 0)
        return 0;
    for (unsigned long i = 0; i < n; i++)
        if (!d->p[i])
            return 0;
    if (n >= 11 && strncmp(d->p, "_GLOBAL__N", 10) == 0)
        snprintf(out, TEXT, "(anonymous namespace)");
    else
        snprintf(out, TEXT, "%.*s", (int)n, d->p);
    d->p += n;
    return 1;
}

static int type(dm *d, item *out);

/* <seq-id>: S_ = 0, S0_ = 1, S1_ = 2 ... (base 36). */
static int seq_ref(dm *d, int *idx)
{
    unsigned long v = 0;
    int digits = 0;
    while ((*d->p >= '0' && *d->p <= '9') || (*d->p >= 'A' && *d->p <= 'Z')) {
        v = v * 36 + (unsigned long)(*d->p <= '9' ? *d->p - '0' : *d->p - 'A' + 10);
        d->p++;
        digits = 1;
        if (v > MAX_SUBS)
            return 0; /* beyond any table: also keeps v from overflowing */
    }
    if (*d->p != '_')
        return 0; /* never steps past the terminating NUL */
    d->p++;
    *idx = digits ? (int)v + 1 : 0;
    return 1;
}

/* I <args> E, appended to text as "<a, b>"; record: keep them for T_. */
static int template_args(dm *d, char *text, int record)
{
    if (*d->p != 'I')
        return 0;
    d->p++;
    if (record)
        d->n_targs = 0;
    cat(text, "<");
    int first = 1;
    while (*d->p && *d->p != 'E') {
        item a = {"", TK_PARAM_UNKNOWN};
        if (*d->p == 'L') {
            /* L <type> <value> E: an integer or bool literal. */
            d->p++;
            item t;
            if (!type(d, &t))
                return 0;
            const char *start = d->p;
            while (*d->p && *d->p != 'E')
                d->p++;
            if (*d->p != 'E')
                return 0;
            if (strcmp(t.text, "bool") == 0)
                snprintf(a.text, TEXT, "%s", *start == '1' ? "true" : "false");
            else if (*start == 'n')
                snprintf(a.text, TEXT, "-%.*s", (int)(d->p - start - 1), start + 1);
            else
                snprintf(a.text, TEXT, "%.*s", (int)(d->p - start), start);
            d->p++;
        } else if (!type(d, &a)) {
            return 0;
        }
        if (!first)
            cat(text, ", ");
        cat(text, a.text);
        first = 0;
        if (record && d->n_targs < MAX_SUBS)
            d->targs[d->n_targs++] = a;
    }
    if (*d->p != 'E')
        return 0;
    d->p++;
    cat(text, ">");
    return 1;
}

static const struct {
    const char *code, *text;
    int kind;
} k_builtins[] = {
    {"v", "void", TK_PARAM_UNKNOWN},
    {"b", "bool", TK_PARAM_UINT},
    {"c", "char", TK_PARAM_INT},
    {"a", "signed char", TK_PARAM_INT},
    {"h", "unsigned char", TK_PARAM_UINT},
    {"s", "short", TK_PARAM_INT},
    {"t", "unsigned short", TK_PARAM_UINT},
    {"i", "int", TK_PARAM_INT},
    {"j", "unsigned int", TK_PARAM_UINT},
    {"l", "long", TK_PARAM_INT},
    {"m", "unsigned long", TK_PARAM_UINT},
    {"x", "long long", TK_PARAM_INT},
    {"y", "unsigned long long", TK_PARAM_UINT},
    {"n", "__int128", TK_PARAM_INT},
    {"o", "unsigned __int128", TK_PARAM_UINT},
    {"f", "float", TK_PARAM_FLOAT},
    {"d", "double", TK_PARAM_FLOAT},
    {"e", "long double", TK_PARAM_FLOAT},
    {"w", "wchar_t", TK_PARAM_INT},
    {"Dh", "half", TK_PARAM_FLOAT},
    {"DF16_", "_Float16", TK_PARAM_FLOAT},
    {"Ds", "char16_t", TK_PARAM_UINT},
    {"Di", "char32_t", TK_PARAM_UINT},
};

/* Class kinds by name: the fp16 types are floats by value. */
static int class_kind(const char *name)
{
    if (strcmp(name, "__half") == 0 || strcmp(name, "half") == 0 ||
        strcmp(name, "__hip_bfloat16") == 0)
        return strcmp(name, "__hip_bfloat16") == 0 ? TK_PARAM_STRUCT : TK_PARAM_FLOAT;
    return TK_PARAM_STRUCT;
}

/* N [K|V] <prefix>... E. function: the outermost name of the encoding (its
 * last component is not a substitution candidate; template args are kept
 * for T_). */
static int nested_name(dm *d, item *out, int function)
{
    d->p++; /* N */
    while (*d->p == 'K' || *d->p == 'V' || *d->p == 'r')
        d->p++;
    out->text[0] = '\0';
    out->kind = TK_PARAM_STRUCT;
    int parts = 0;
    char last[TEXT] = "";
    d->ends_in_targs = 0;
    while (*d->p && *d->p != 'E') {
        d->ends_in_targs = *d->p == 'I';
        if (*d->p == 'I') {
            if (!parts || !template_args(d, out->text, function))
                return 0;
        } else if (*d->p == 'S' && parts == 0) {
            d->p++;
            int idx;
            if (*d->p == 't') {
                d->p++;
                snprintf(out->text, TEXT, "std");
            } else if (seq_ref(d, &idx) && idx < d->n_subs) {
                snprintf(out->text, TEXT, "%s", d->subs[idx].text);
            } else {
                return 0;
            }
            parts++;
            continue; /* a substitution is not added again */
        } else {
            if (!source_name(d, last))
                return 0;
            if (parts)
                cat(out->text, "::");
            cat(out->text, last);
        }
        parts++;
        if (*d->p != 'E' || !function) {
            item it = *out;
            add_sub(d, &it);
        }
    }
    if (*d->p != 'E' || !parts)
        return 0;
    d->p++;
    out->kind = class_kind(last);
    return 1;
}

static int type(dm *d, item *out)
{
    out->text[0] = '\0';
    out->kind = TK_PARAM_UNKNOWN;
    if (d->failed || !*d->p)
        return 0;
    for (size_t i = 0; i < sizeof k_builtins / sizeof k_builtins[0]; i++) {
        size_t n = strlen(k_builtins[i].code);
        if (strncmp(d->p, k_builtins[i].code, n) == 0) {
            d->p += n;
            snprintf(out->text, TEXT, "%s", k_builtins[i].text);
            out->kind = k_builtins[i].kind;
            return 1;
        }
    }
    char c = *d->p;
    item inner;
    if (c == 'P' || c == 'R' || c == 'O' || c == 'K' || c == 'V') {
        d->p++;
        if (!type(d, &inner))
            return 0;
        if (c == 'K' || c == 'V') {
            snprintf(out->text, TEXT, "%s ", c == 'K' ? "const" : "volatile");
            cat(out->text, inner.text);
        } else {
            snprintf(out->text, TEXT, "%s", inner.text);
            cat(out->text, c == 'P' ? "*" : c == 'R' ? "&" : "&&");
        }
        out->kind = (c == 'K' || c == 'V') ? inner.kind : TK_PARAM_POINTER;
        add_sub(d, out);
        return 1;
    }
    if (c == 'S') {
        d->p++;
        int idx;
        if (*d->p == 't') {
            d->p++;
            char n[TEXT];
            if (!source_name(d, n))
                return 0;
            snprintf(out->text, TEXT, "std::");
            cat(out->text, n);
            out->kind = TK_PARAM_STRUCT;
            add_sub(d, out);
        } else {
            if (!seq_ref(d, &idx) || idx >= d->n_subs)
                return 0;
            *out = d->subs[idx];
        }
        if (*d->p == 'I') {
            if (!template_args(d, out->text, 0))
                return 0;
            add_sub(d, out);
        }
        return 1;
    }
    if (c == 'T') {
        d->p++;
        int idx;
        if (!seq_ref(d, &idx) || idx >= d->n_targs)
            return 0;
        *out = d->targs[idx];
        add_sub(d, out);
        return 1;
    }
    if (c == 'N')
        return nested_name(d, out, 0);
    if (c >= '1' && c <= '9') {
        if (!source_name(d, out->text))
            return 0;
        out->kind = class_kind(out->text);
        add_sub(d, out);
        if (*d->p == 'I') {
            if (!template_args(d, out->text, 0))
                return 0;
            out->kind = TK_PARAM_STRUCT;
            add_sub(d, out);
        }
        return 1;
    }
    return 0;
}

/* Parses a whole symbol: name into name, parameters into params. */
static int parse(dm *d, const char *mangled, item *name, item *params, size_t max, size_t *n)
{
    memset(d, 0, sizeof *d);
    d->p = mangled;
    *n = 0;
    if (strncmp(d->p, "_Z", 2) != 0)
        return 0;
    d->p += 2;
    int templated = 0;
    if (*d->p == 'N') {
        if (!nested_name(d, name, 1))
            return 0;
        templated = d->ends_in_targs;
    } else if (*d->p == 'L' || (*d->p >= '1' && *d->p <= '9')) {
        if (*d->p == 'L') /* internal linkage */
            d->p++;
        if (!source_name(d, name->text))
            return 0;
        if (*d->p == 'I') {
            add_sub(d, name);
            if (!template_args(d, name->text, 1))
                return 0;
            templated = 1;
        }
    } else {
        return 0;
    }
    if (templated) {
        item ret;
        if (!type(d, &ret))
            return 0;
    }
    if (!*d->p)
        return 0; /* a function always has a parameter list ("v": none) */
    if (strcmp(d->p, "v") == 0)
        return 1; /* no parameters */
    while (*d->p) {
        if (*n >= max)
            return 0;
        if (!type(d, &params[*n]))
            return 0;
        (*n)++;
    }
    return !d->failed;
}

#define MAX_PARAMS 128

int tk__demangle_kinds(const char *mangled, int *kinds, size_t max, size_t *n)
{
    static _Thread_local dm d;
    static _Thread_local item params[MAX_PARAMS];
    item name;
    size_t count = 0;
    if (!mangled || !parse(&d, mangled, &name, params, max < MAX_PARAMS ? max : MAX_PARAMS, &count))
        return 0;
    for (size_t i = 0; i < count; i++)
        kinds[i] = params[i].kind;
    *n = count;
    return 1;
}

void tk__demangle(const char *mangled, char *buf, size_t size)
{
    static _Thread_local dm d;
    static _Thread_local item params[MAX_PARAMS];
    item name;
    size_t count = 0;
    if (!size)
        return;
    if (!mangled || !parse(&d, mangled, &name, params, MAX_PARAMS, &count)) {
        snprintf(buf, size, "%s", mangled ? mangled : "");
        return;
    }
    size_t used = (size_t)snprintf(buf, size, "%s(", name.text);
    for (size_t i = 0; i < count && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%s", i ? ", " : "", params[i].text);
    if (used < size)
        snprintf(buf + used, size - used, ")");
}

void tk__symbol_base(const char *symbol, char *buf, size_t size)
{
    static _Thread_local dm d;
    static _Thread_local item params[MAX_PARAMS];
    item name;
    size_t count = 0;
    if (!size)
        return;
    buf[0] = '\0';
    if (!symbol)
        return;
    if (strncmp(symbol, "_Z", 2) != 0) {
        snprintf(buf, size, "%s", symbol);
        return;
    }
    if (!parse(&d, symbol, &name, params, MAX_PARAMS, &count))
        return;
    /* The last component, without template arguments. */
    char *t = strchr(name.text, '<');
    if (t)
        *t = '\0';
    char *colon = strrchr(name.text, ':');
    snprintf(buf, size, "%s", colon ? colon + 1 : name.text);
}
