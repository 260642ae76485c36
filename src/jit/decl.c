#include "jit/decl.h"

#include <stdlib.h>
#include <string.h>

#include "tokitai/tokitai.h"

/* How deep a type name is followed through aliases: enough for
 * "#define T real" + "typedef float real", bounded so that a cycle ends. */
#define MAX_ALIAS_DEPTH 4
/* Tokens looked at between __global__ and the kernel's name (return type,
 * __launch_bounds__, attributes). */
#define MAX_HEAD_TOKENS 64
/* Alias lookups per call, each a scan of the texts: a source that defines a
 * name many times over, through many levels, costs no more than this. */
#define MAX_LOOKUPS 256

typedef struct tok {
    const char *p;
    size_t n;
} tok;

typedef struct reader {
    char **clean; /* texts with comments and literals blanked */
    size_t n_texts;
    const tk__decl_macro *macros;
    size_t n_macros;
    unsigned lookups; /* alias lookups so far */
} reader;

/* A parameter's type as far as it is known; size 0: any size. */
typedef struct ptype {
    int kind;
    uint32_t size;
} ptype;

static const ptype k_unknown = {TK_PARAM_UNKNOWN, 0};

static int is_ident_start(char c)
{
    return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static int is_ident_char(char c)
{
    return is_ident_start(c) || (c >= '0' && c <= '9');
}

static int tok_is(tok t, const char *s)
{
    return t.n == strlen(s) && memcmp(t.p, s, t.n) == 0;
}

static int tok_ident(tok t)
{
    return t.n && is_ident_start(t.p[0]);
}

/* The next token of text[*pos, end): an identifier, a number, "::", "...",
 * "&&", ">>" or one other character. 0 at the end. */
static int next_tok(const char *text, size_t end, size_t *pos, tok *t)
{
    size_t i = *pos;
    while (i < end && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r' ||
                       text[i] == '\f' || text[i] == '\v'))
        i++;
    if (i >= end)
        return 0;
    size_t j = i + 1;
    if (is_ident_char(text[i])) {
        while (j < end && is_ident_char(text[j]))
            j++;
    } else if (j < end &&
               ((text[i] == ':' && text[j] == ':') || (text[i] == '&' && text[j] == '&') ||
                (text[i] == '>' && text[j] == '>'))) {
        j++;
    } else if (text[i] == '.' && j + 1 < end && text[j] == '.' && text[j + 1] == '.') {
        j += 2;
    }
    t->p = text + i;
    t->n = j - i;
    *pos = j;
    return 1;
}

/* A copy of text with comments, string and character literals and line
 * continuations turned into spaces (newlines kept, so #define lines stay
 * lines). NULL when out of memory. */
static char *clean_copy(const char *text)
{
    size_t n = strlen(text);
    char *c = malloc(n + 1);
    if (!c)
        return NULL;
    memcpy(c, text, n + 1);
    for (size_t i = 0; i < n; i++) {
        if (c[i] == '\\' && i + 1 < n && c[i + 1] == '\n') {
            c[i] = c[i + 1] = ' ';
            i++;
        } else if (c[i] == '/' && i + 1 < n && c[i + 1] == '/') {
            while (i < n && c[i] != '\n')
                c[i++] = ' ';
        } else if (c[i] == '/' && i + 1 < n && c[i + 1] == '*') {
            c[i] = c[i + 1] = ' ';
            for (i += 2; i < n && !(c[i] == '*' && i + 1 < n && c[i + 1] == '/'); i++)
                if (c[i] != '\n')
                    c[i] = ' ';
            if (i < n)
                c[i] = c[i + 1] = ' ';
            i++;
        } else if (c[i] == '"' || c[i] == '\'') {
            char q = c[i];
            c[i] = ' ';
            for (i++; i < n && c[i] != q && c[i] != '\n'; i++) {
                if (c[i] == '\\' && i + 1 < n && c[i + 1] != '\n')
                    c[i++] = ' ';
                c[i] = ' ';
            }
            if (i < n && c[i] == q)
                c[i] = ' ';
        }
    }
    return c;
}

/* Skips a balanced group that opens at the token just read (one of "(<[{"),
 * leaving *pos after its closing token. 0 when the text ends first. */
static int skip_group(const char *text, size_t end, size_t *pos, char open)
{
    char close = open == '(' ? ')' : open == '[' ? ']' : open == '{' ? '}' : '>';
    int depth = 1;
    tok t;
    while (next_tok(text, end, pos, &t)) {
        if (t.n == 1 && t.p[0] == open)
            depth++;
        else if (t.n == 1 && t.p[0] == close)
            depth--;
        else if (open == '<' && tok_is(t, ">>"))
            depth -= 2;
        if (depth <= 0)
            return 1;
    }
    return 0;
}

static ptype classify(reader *r, const char *p, size_t n, int depth);

static int same_type(ptype a, ptype b)
{
    return a.kind == b.kind && a.size == b.size;
}

/* Folds one more reading of a name into *acc: the first sets it, one that
 * disagrees makes it unknown. */
static void agree(ptype *acc, int *count, ptype t)
{
    if (*count == 0)
        *acc = t;
    else if (!same_type(*acc, t))
        *acc = k_unknown;
    (*count)++;
}

/* The type a name stands for through its aliases: the given macros
 * (which the compiler applies over any #define of the source), else every
 * #define, typedef and using of it in the texts; their readings must agree.
 * *found: whether any alias exists. */
static ptype alias_type(reader *r, tok name, int depth, int *found)
{
    ptype acc = k_unknown;
    int count = 0;
    *found = 0;
    if (++r->lookups > MAX_LOOKUPS) {
        *found = 1; /* unknown, and not to be taken for a struct */
        return k_unknown;
    }
    for (size_t i = 0; i < r->n_macros; i++)
        if (r->macros[i].name && tok_is(name, r->macros[i].name)) {
            const char *v = r->macros[i].value ? r->macros[i].value : "1";
            agree(&acc, &count, classify(r, v, strlen(v), depth + 1));
        }
    if (count) {
        *found = 1;
        return acc;
    }
    for (size_t ti = 0; ti < r->n_texts; ti++) {
        const char *text = r->clean[ti];
        size_t end = strlen(text), pos = 0;
        tok t;
        int line_start = 1;
        while (next_tok(text, end, &pos, &t)) {
            /* #define NAME value (object-like: no '(' right after NAME). */
            int at_line_start = line_start;
            line_start = 0;
            if (t.n == 1 && t.p[0] == '#' && at_line_start) {
                size_t q = pos;
                tok d, m;
                if (next_tok(text, end, &q, &d) && tok_is(d, "define") &&
                    next_tok(text, end, &q, &m) && m.n == name.n &&
                    memcmp(m.p, name.p, name.n) == 0 && q < end && text[q] != '(') {
                    const char *v = text + q;
                    const char *stop = strchr(v, '\n');
                    size_t vn = stop ? (size_t)(stop - v) : strlen(v);
                    agree(&acc, &count, classify(r, v, vn, depth + 1));
                }
            } else if (tok_is(t, "typedef")) {
                /* typedef <type> NAME; the name is the last token. */
                size_t start = pos, q = pos, last_start = 0;
                tok u, last = {NULL, 0};
                int braces = 0;
                while (next_tok(text, end, &q, &u)) {
                    if (u.n == 1 && u.p[0] == '{')
                        braces++;
                    else if (u.n == 1 && u.p[0] == '}')
                        braces--;
                    else if (u.n == 1 && u.p[0] == ';' && braces <= 0)
                        break;
                    last = u;
                    last_start = (size_t)(u.p - text);
                }
                if (last.n == name.n && memcmp(last.p, name.p, name.n) == 0 && last_start > start)
                    agree(&acc, &count, classify(r, text + start, last_start - start, depth + 1));
            } else if (tok_is(t, "using")) {
                size_t q = pos;
                tok m, eq;
                if (next_tok(text, end, &q, &m) && m.n == name.n &&
                    memcmp(m.p, name.p, name.n) == 0 && next_tok(text, end, &q, &eq) &&
                    tok_is(eq, "=")) {
                    const char *v = text + q;
                    const char *stop = strchr(v, ';');
                    size_t vn = stop ? (size_t)(stop - v) : strlen(v);
                    agree(&acc, &count, classify(r, v, vn, depth + 1));
                }
            }
            /* The next token starts a line when a newline follows this one. */
            for (size_t k = (size_t)(t.p - text) + t.n; k < end; k++) {
                if (text[k] == '\n') {
                    line_start = 1;
                    break;
                }
                if (text[k] != ' ' && text[k] != '\t' && text[k] != '\r')
                    break;
            }
        }
    }
    *found = count > 0;
    return acc;
}

/* Whether the texts declare name as a struct, class or union (with a body
 * or a base list: "struct S {", "struct __align__(8) S :"). */
static int declared_struct(const reader *r, tok name)
{
    for (size_t ti = 0; ti < r->n_texts; ti++) {
        const char *text = r->clean[ti];
        size_t end = strlen(text), pos = 0;
        tok t;
        while (next_tok(text, end, &pos, &t)) {
            if (!tok_is(t, "struct") && !tok_is(t, "class") && !tok_is(t, "union"))
                continue;
            size_t q = pos;
            tok u;
            while (next_tok(text, end, &q, &u) &&
                   (tok_is(u, "__align__") || tok_is(u, "alignas") || tok_is(u, "__attribute__"))) {
                tok open;
                if (!next_tok(text, end, &q, &open) || !tok_is(open, "(") ||
                    !skip_group(text, end, &q, '('))
                    break;
            }
            if (u.n != name.n || memcmp(u.p, name.p, name.n) != 0)
                continue;
            tok after;
            if (next_tok(text, end, &q, &after) &&
                (tok_is(after, "{") || tok_is(after, ":") || tok_is(after, "final")))
                return 1;
        }
    }
    return 0;
}

static const struct {
    const char *name;
    int kind;
    uint32_t size;
} k_named[] = {
    {"int8_t", TK_PARAM_INT, 1},     {"uint8_t", TK_PARAM_UINT, 1},
    {"int16_t", TK_PARAM_INT, 2},    {"uint16_t", TK_PARAM_UINT, 2},
    {"int32_t", TK_PARAM_INT, 4},    {"uint32_t", TK_PARAM_UINT, 4},
    {"int64_t", TK_PARAM_INT, 8},    {"uint64_t", TK_PARAM_UINT, 8},
    {"size_t", TK_PARAM_UINT, 8},    {"ssize_t", TK_PARAM_INT, 8},
    {"ptrdiff_t", TK_PARAM_INT, 8},  {"intptr_t", TK_PARAM_INT, 8},
    {"uintptr_t", TK_PARAM_UINT, 8}, {"__half", TK_PARAM_FLOAT, 2},
    {"half", TK_PARAM_FLOAT, 2},     {"_Float16", TK_PARAM_FLOAT, 2},
    {"__half2", TK_PARAM_STRUCT, 4}, {"half2", TK_PARAM_STRUCT, 4},
    {"dim3", TK_PARAM_STRUCT, 12},
};

/* float4, int2, ulonglong3, ...: the CUDA/HIP vector types. */
static int vector_type(tok t)
{
    static const char *const bases[] = {"char",     "uchar",     "short", "ushort",
                                        "int",      "uint",      "long",  "ulong",
                                        "longlong", "ulonglong", "float", "double"};
    if (t.n < 2 || t.p[t.n - 1] < '1' || t.p[t.n - 1] > '4')
        return 0;
    for (size_t i = 0; i < sizeof bases / sizeof bases[0]; i++)
        if (strlen(bases[i]) == t.n - 1 && memcmp(bases[i], t.p, t.n - 1) == 0)
            return 1;
    return 0;
}

/* The type of one parameter's (or alias's) text: "const float *__restrict__ x",
 * "unsigned long long n", "Pair p", "float x[]". */
static ptype classify(reader *r, const char *p, size_t n, int depth)
{
    int stars = 0, array = 0, other = 0, tag = 0, is_enum = 0, templated = 0;
    int n_long = 0, is_unsigned = 0, is_signed = 0, has_char = 0, has_short = 0, has_int = 0;
    int has_float = 0, has_double = 0, has_bool = 0, has_void = 0, qualified = 0;
    tok name = {NULL, 0};
    size_t pos = 0;
    tok t;
    if (depth > MAX_ALIAS_DEPTH)
        return k_unknown;
    while (next_tok(p, n, &pos, &t)) {
        char c = t.p[0];
        if (tok_is(t, "=") || tok_is(t, ";"))
            break; /* a default argument, the end of an alias */
        if (tok_is(t, "const") || tok_is(t, "volatile") || tok_is(t, "__restrict__") ||
            tok_is(t, "__restrict") || tok_is(t, "restrict") || tok_is(t, "__grid_constant__") ||
            tok_is(t, "register") || tok_is(t, "typename"))
            continue;
        if (tok_is(t, "__align__") || tok_is(t, "alignas") || tok_is(t, "__attribute__")) {
            tok open;
            if (next_tok(p, n, &pos, &open) && tok_is(open, "(") && skip_group(p, n, &pos, '('))
                continue;
            return k_unknown;
        }
        if (tok_is(t, "struct") || tok_is(t, "class") || tok_is(t, "union")) {
            tag = 1;
        } else if (tok_is(t, "enum")) {
            is_enum = 1;
        } else if (tok_is(t, "unsigned")) {
            is_unsigned = 1;
        } else if (tok_is(t, "signed")) {
            is_signed = 1;
        } else if (tok_is(t, "long")) {
            n_long++;
        } else if (tok_is(t, "char")) {
            has_char = 1;
        } else if (tok_is(t, "short")) {
            has_short = 1;
        } else if (tok_is(t, "int")) {
            has_int = 1;
        } else if (tok_is(t, "float")) {
            has_float = 1;
        } else if (tok_is(t, "double")) {
            has_double = 1;
        } else if (tok_is(t, "bool")) {
            has_bool = 1;
        } else if (tok_is(t, "void")) {
            has_void = 1;
        } else if (tok_is(t, "::")) {
            qualified = 1; /* std::int32_t, ::uint64_t: the last part names the type */
        } else if (tok_ident(t)) {
            int builtin = is_unsigned || is_signed || n_long || has_char || has_short || has_int ||
                          has_float || has_double || has_bool || has_void;
            if (qualified || (!name.n && !builtin))
                name = t;
            /* else: the parameter's own name */
            qualified = 0;
        } else if (c == '*') {
            stars++;
        } else if (c == '[') {
            array = 1;
            if (!skip_group(p, n, &pos, '['))
                return k_unknown;
        } else if (c == '<') {
            templated = 1;
            if (!skip_group(p, n, &pos, '<'))
                return k_unknown;
        } else if (c == '{') {
            /* typedef struct { ... } NAME: the body says what it is. */
            if (!tag)
                return k_unknown;
            break;
        } else if (c >= '0' && c <= '9') {
            return k_unknown; /* a macro whose value is a number */
        } else {
            other = 1; /* '&', '(' (a function pointer), '...': not followed */
            break;
        }
    }
    if (other || is_enum)
        return k_unknown;
    if (stars || array)
        return (ptype){TK_PARAM_POINTER, 8};
    if (tag)
        return (ptype){TK_PARAM_STRUCT, 0};
    int ikind = is_unsigned ? TK_PARAM_UINT : TK_PARAM_INT;
    if (has_float)
        return (ptype){TK_PARAM_FLOAT, 4};
    if (has_double)
        return n_long ? k_unknown : (ptype){TK_PARAM_FLOAT, 8};
    if (has_bool)
        return (ptype){TK_PARAM_UINT, 1};
    if (has_char)
        return (ptype){ikind, 1};
    if (has_short)
        return (ptype){ikind, 2};
    if (n_long)
        return (ptype){ikind, 8};
    if (has_int || is_unsigned || is_signed)
        return (ptype){ikind, 4};
    if (has_void || !name.n || templated)
        return k_unknown; /* "void", nothing, a template instance */
    for (size_t i = 0; i < sizeof k_named / sizeof k_named[0]; i++)
        if (tok_is(name, k_named[i].name))
            return (ptype){k_named[i].kind, k_named[i].size};
    if (vector_type(name))
        return (ptype){TK_PARAM_STRUCT, 0};
    int found;
    ptype a = alias_type(r, name, depth, &found);
    if (found)
        return a;
    return declared_struct(r, name) ? (ptype){TK_PARAM_STRUCT, 0} : k_unknown;
}

/* Whether a parameter list is empty: "" or "void". */
static int no_params(const char *p, size_t n)
{
    size_t pos = 0;
    tok t;
    if (!next_tok(p, n, &pos, &t))
        return 1;
    return tok_is(t, "void") && !next_tok(p, n, &pos, &t);
}

/* Reads one declaration's parameters p[0, n) into types; 0 when their
 * number is not want or one is not a parameter this reading follows. */
static int read_params(reader *r, const char *p, size_t n, size_t want, ptype *types)
{
    if (no_params(p, n))
        return want == 0;
    size_t count = 0, start = 0, pos = 0;
    int depth = 0;
    tok t;
    for (;;) {
        int more = next_tok(p, n, &pos, &t);
        if (more && t.n == 1 && strchr("(<[{", t.p[0]))
            depth++;
        else if (more && t.n == 1 && strchr(")>]}", t.p[0]))
            depth--;
        else if (more && tok_is(t, ">>"))
            depth -= 2;
        else if (more && tok_is(t, "..."))
            return 0; /* variadic */
        if (!more || (depth == 0 && tok_is(t, ","))) {
            size_t stop = more ? (size_t)(t.p - p) : n;
            if (count >= want)
                return 0;
            types[count++] = classify(r, p + start, stop - start, 0);
            start = pos;
            if (!more)
                break;
        }
    }
    return count == want;
}

/* The last identifier of a plain (possibly qualified) name; 0 for anything
 * else (a template or cast expression). */
static int base_name(const char *name, tok *out)
{
    size_t n = strlen(name), pos = 0;
    tok t, last = {NULL, 0};
    while (next_tok(name, n, &pos, &t)) {
        if (tok_ident(t))
            last = t;
        else if (!tok_is(t, "::"))
            return 0;
    }
    *out = last;
    return last.n > 0;
}

size_t tk__decl_kinds(const char *const *texts, size_t n_texts, const tk__decl_macro *macros,
                      size_t n_macros, const char *name, const uint32_t *sizes, size_t n,
                      int *kinds)
{
    for (size_t i = 0; i < n; i++)
        kinds[i] = TK_PARAM_UNKNOWN;
    tok want;
    if (!name || !base_name(name, &want) || (n && !sizes))
        return 0;
    reader r = {calloc(n_texts ? n_texts : 1, sizeof(char *)), n_texts, macros, n_macros, 0};
    ptype *types = malloc((n ? n : 1) * sizeof *types);
    ptype *acc = malloc((n ? n : 1) * sizeof *acc);
    size_t used = 0;
    if (!r.clean || !types || !acc)
        goto done;
    for (size_t i = 0; i < n_texts; i++)
        if (texts[i] && !(r.clean[i] = clean_copy(texts[i])))
            goto done;
    for (size_t ti = 0; ti < n_texts; ti++) {
        const char *text = r.clean[ti];
        if (!text)
            continue;
        size_t end = strlen(text), pos = 0;
        tok t;
        while (next_tok(text, end, &pos, &t)) {
            if (!tok_is(t, "__global__"))
                continue;
            /* Up to the kernel's name and its '(': other parentheses
             * (__launch_bounds__(256), __attribute__((...))) are skipped; a
             * ';', brace or directive first means this is not it. */
            size_t q = pos;
            tok u, prev = {NULL, 0};
            int found = 0;
            for (int k = 0; k < MAX_HEAD_TOKENS && next_tok(text, end, &q, &u); k++) {
                if (tok_is(u, "(")) {
                    if (prev.n == want.n && memcmp(prev.p, want.p, want.n) == 0) {
                        found = 1;
                        break;
                    }
                    if (!skip_group(text, end, &q, '('))
                        break;
                } else if (u.n == 1 && strchr(";{}#=", u.p[0])) {
                    break;
                }
                prev = u;
            }
            if (!found)
                continue;
            size_t open = q;
            if (!skip_group(text, end, &q, '('))
                continue;
            size_t close = q - 1; /* the ')' */
            pos = q;
            if (!read_params(&r, text + open, close - open, n, types))
                continue;
            int fits = 1;
            for (size_t i = 0; i < n && fits; i++)
                fits = types[i].size == 0 || types[i].size == sizes[i];
            if (!fits)
                continue;
            for (size_t i = 0; i < n; i++)
                if (used == 0)
                    acc[i] = types[i];
                else if (acc[i].kind != types[i].kind)
                    acc[i] = k_unknown;
            used++;
        }
    }
    for (size_t i = 0; i < n && used; i++)
        kinds[i] = acc[i].kind;
done:
    if (r.clean)
        for (size_t i = 0; i < n_texts; i++)
            free(r.clean[i]);
    free(r.clean);
    free(types);
    free(acc);
    return used;
}
