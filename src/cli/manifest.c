/* Manifest parser: every error is found before anything compiles. */
#include "manifest.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

/* Largest size a manifest may name: far beyond any GPU's memory, small
 * enough that products of two dims cannot overflow int64. */
#define MAX_VALUE (INT64_C(1) << 31)
#define MAX_VALUES_PER_DIM 4096

typedef struct parser {
    const char *name;
    const char *base_dir;
    int line;
    char *err;
    size_t err_size;
    tk__manifest *m;
} parser;

static int fail(parser *p, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(parser *p, const char *field, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (field)
        snprintf(p->err, p->err_size, "%s:%d: field '%s': %s", p->name, p->line, field, what);
    else
        snprintf(p->err, p->err_size, "%s:%d: %s", p->name, p->line, what);
    return -1;
}

static int oom(parser *p)
{
    return fail(p, NULL, "out of memory");
}

/* ---------------------------------------------------------------- values */

typedef struct values {
    int64_t v[MAX_VALUES_PER_DIM];
    int n;
} values;

static int parse_num(const char *s, const char *end, int64_t *out)
{
    if (s == end || !isdigit((unsigned char)*s))
        return -1;
    int64_t v = 0;
    for (const char *q = s; q < end; q++) {
        if (!isdigit((unsigned char)*q))
            return -1;
        v = v * 10 + (*q - '0');
        if (v > MAX_VALUE)
            return -2;
    }
    *out = v;
    return 0;
}

static int add_value(parser *p, const char *field, values *vals, int64_t v)
{
    for (int i = 0; i < vals->n; i++)
        if (vals->v[i] == v)
            return 0;
    if (vals->n == MAX_VALUES_PER_DIM)
        return fail(p, field, "more than %d values", MAX_VALUES_PER_DIM);
    vals->v[vals->n++] = v;
    return 0;
}

static int num_or_fail(parser *p, const char *field, const char *s, const char *end, int64_t *out)
{
    int r = parse_num(s, end, out);
    if (r == -2)
        return fail(p, field, "'%.*s' is too large (at most %lld)", (int)(end - s), s,
                    (long long)MAX_VALUE);
    if (r != 0)
        return fail(p, field, "'%.*s' is not a positive integer", (int)(end - s), s);
    if (*out < 1)
        return fail(p, field, "'%.*s': sizes must be at least 1", (int)(end - s), s);
    return 0;
}

/* "512", "512..4096:x2", "1..8:+1", comma-separated. */
static int parse_values(parser *p, const char *field, const char *list, values *vals)
{
    vals->n = 0;
    if (!*list)
        return fail(p, field, "no value");
    const char *s = list;
    for (;;) {
        const char *end = strchr(s, ',');
        if (!end)
            end = s + strlen(s);
        if (end == s)
            return fail(p, field, "empty item in the list");
        const char *dots = NULL;
        for (const char *q = s; q + 1 < end; q++)
            if (q[0] == '.' && q[1] == '.') {
                dots = q;
                break;
            }
        if (!dots) {
            int64_t v;
            if (num_or_fail(p, field, s, end, &v) || add_value(p, field, vals, v))
                return -1;
        } else {
            const char *colon = memchr(dots, ':', (size_t)(end - dots));
            int64_t a, b, step;
            if (!colon)
                return fail(p, field, "range '%.*s' needs a step: A..B:xF or A..B:+S",
                            (int)(end - s), s);
            if (num_or_fail(p, field, s, dots, &a) || num_or_fail(p, field, dots + 2, colon, &b))
                return -1;
            if (a > b)
                return fail(p, field, "range '%.*s' is empty (start above end)", (int)(end - s), s);
            char kind = colon[1];
            if ((kind != 'x' && kind != '+') || parse_num(colon + 2, end, &step) != 0 ||
                step < (kind == 'x' ? 2 : 1))
                return fail(p, field, "bad step in '%.*s' (:xF with F >= 2, or :+S with S >= 1)",
                            (int)(end - s), s);
            for (int64_t v = a; v <= b; v = kind == 'x' ? v * step : v + step) {
                if (add_value(p, field, vals, v))
                    return -1;
            }
        }
        if (!*end)
            break;
        s = end + 1;
    }
    return 0;
}

/* ------------------------------------------------------------------ jobs */

static int push_job(parser *p, const tk__mf_job *job)
{
    tk__manifest *m = p->m;
    if (m->n_jobs >= TK__MF_MAX_JOBS)
        return fail(p, NULL, "more than %d jobs in the manifest", TK__MF_MAX_JOBS);
    if (m->n_jobs == m->cap_jobs) {
        size_t cap = m->cap_jobs ? m->cap_jobs * 2 : 256;
        tk__mf_job *jobs = realloc(m->jobs, cap * sizeof *jobs);
        if (!jobs)
            return oom(p);
        m->jobs = jobs;
        m->cap_jobs = cap;
    }
    m->jobs[m->n_jobs++] = *job;
    return 0;
}

/* Splits the op's dimension names "M,N,K" into names[]. */
static int op_dim_names(tk_op op, char names[TK__MF_MAX_DIMS][16])
{
    int n = 0;
    const char *dims = tk_op_dims(op, &n);
    if (!dims || n < 1 || n > TK__MF_MAX_DIMS)
        return -1;
    const char *s = dims;
    for (int i = 0; i < n; i++) {
        size_t len = strcspn(s, ",");
        if (len == 0 || len >= 16)
            return -1;
        memcpy(names[i], s, len);
        names[i][len] = 0;
        s += len + (s[len] == ',');
    }
    return n;
}

static int parse_op_line(parser *p, tk_op op, char **tok, int ntok)
{
    char names[TK__MF_MAX_DIMS][16];
    int n = op_dim_names(op, names);
    if (n < 0)
        return fail(p, tok[0], "the library reports no dimensions for this operator");
    /* Static: 4 x 4096 values is too much for the stack; the tool is
     * single-threaded. */
    static values vals[TK__MF_MAX_DIMS];
    int seen[TK__MF_MAX_DIMS] = {0};
    unsigned policies = 0;
    for (int t = 1; t < ntok; t++) {
        if (strncmp(tok[t], "policy=", 7) == 0) {
            if (policies)
                return fail(p, tok[t], "policy given twice");
            char *save = NULL;
            for (char *v = strtok_r(tok[t] + 7, ",", &save); v; v = strtok_r(NULL, ",", &save)) {
                if (strcmp(v, "exact") == 0)
                    policies |= 1u << TK_POLICY_EXACT;
                else if (strcmp(v, "generic") == 0)
                    policies |= 1u << TK_POLICY_GENERIC;
                else if (strcmp(v, "stable") == 0)
                    policies |= 1u << TK_POLICY_STABLE;
                else
                    return fail(p, v, "unknown policy (stable, exact or generic)");
            }
            if (!policies)
                return fail(p, tok[t], "names no policy (stable, exact, generic, or a list)");
            continue;
        }
        char *eq = strchr(tok[t], '=');
        if (!eq)
            return fail(p, tok[t], "expected NAME=VALUES (dimensions of %s: %s)", tok[0],
                        tk_op_dims(op, &n));
        *eq = 0;
        int d = -1;
        for (int i = 0; i < n; i++)
            if (strcmp(tok[t], names[i]) == 0)
                d = i;
        if (d < 0) {
            *eq = '=';
            return fail(p, tok[t], "unknown dimension for %s (its dimensions: %s)", tok[0],
                        tk_op_dims(op, &n));
        }
        *eq = '=';
        if (seen[d])
            return fail(p, tok[t], "dimension %s given twice", names[d]);
        seen[d] = 1;
        if (parse_values(p, tok[t], eq + 1, &vals[d]))
            return -1;
    }
    uint64_t total = 1;
    for (int i = 0; i < n; i++) {
        if (!seen[i])
            return fail(p, tok[0], "missing dimension %s (needs %s)", names[i], tk_op_dims(op, &n));
        total *= (uint64_t)vals[i].n;
        if (total > TK__MF_MAX_JOBS)
            return fail(p, tok[0], "expands to more than %d shapes", TK__MF_MAX_JOBS);
    }
    /* Cartesian product, last dimension fastest. */
    int idx[TK__MF_MAX_DIMS] = {0};
    for (uint64_t k = 0; k < total; k++) {
        tk__mf_job job;
        memset(&job, 0, sizeof job);
        job.kernel = -1;
        job.op = op;
        job.n_dims = n;
        job.policies = policies;
        job.line = p->line;
        for (int i = 0; i < n; i++)
            job.dims[i] = vals[i].v[idx[i]];
        if (push_job(p, &job))
            return -1;
        for (int i = n - 1; i >= 0; i--) {
            if (++idx[i] < vals[i].n)
                break;
            idx[i] = 0;
        }
    }
    return 0;
}

static int parse_arch_line(parser *p, char **tok, int ntok)
{
    tk__manifest *m = p->m;
    if (ntok < 2)
        return fail(p, tok[0], "names no target (for example: arch sm_90 gfx90a)");
    for (int t = 1; t < ntok; t++) {
        /* "arch sm_80,sm_90" works as well as "arch sm_80 sm_90". */
        char *save = NULL;
        for (char *a = strtok_r(tok[t], ",", &save); a; a = strtok_r(NULL, ",", &save)) {
            if (!tk__target_name_valid(a))
                return fail(p, a,
                            "unknown target architecture (examples: sm_80, sm_90, "
                            "gfx90a, gfx1030)");
            int dup = 0;
            for (size_t i = 0; i < m->n_archs; i++)
                dup |= strcmp(m->archs[i], a) == 0;
            if (dup)
                continue;
            char **archs = realloc(m->archs, (m->n_archs + 1) * sizeof *archs);
            if (!archs)
                return oom(p);
            m->archs = archs;
            int *lines = realloc(m->arch_lines, (m->n_archs + 1) * sizeof *lines);
            if (!lines)
                return oom(p);
            m->arch_lines = lines;
            if (!(m->archs[m->n_archs] = strdup(a)))
                return oom(p);
            m->arch_lines[m->n_archs++] = p->line;
        }
    }
    return 0;
}

static int parse_policy_line(parser *p, char **tok, int ntok)
{
    tk__manifest *m = p->m;
    if (m->policies)
        return fail(p, tok[0], "policy already given on line %d", m->policy_line);
    if (ntok < 2)
        return fail(p, tok[0], "names no policy (stable, exact, generic, or several)");
    for (int t = 1; t < ntok; t++) {
        if (strcmp(tok[t], "exact") == 0)
            m->policies |= 1u << TK_POLICY_EXACT;
        else if (strcmp(tok[t], "generic") == 0)
            m->policies |= 1u << TK_POLICY_GENERIC;
        else if (strcmp(tok[t], "stable") == 0)
            m->policies |= 1u << TK_POLICY_STABLE;
        else
            return fail(p, tok[t], "unknown policy (stable, exact or generic)");
    }
    m->policy_line = p->line;
    return 0;
}

/* An extern "C" name or a C++ name expression: identifier characters and
 * "::", then template or call arguments in balanced <> / (); the library
 * checks it again before compiling. */
static int valid_entry(const char *s)
{
    if (!s[0] || !(isalpha((unsigned char)s[0]) || s[0] == '_' || s[0] == ':'))
        return 0;
    int depth = 0;
    for (const char *c = s; *c; c++) {
        unsigned char u = (unsigned char)*c;
        if (u < 0x20 || u >= 0x7f || strchr("\"'{};#\\`@$?", u))
            return 0;
        if (u == '<' || u == '(')
            depth++;
        else if (u == '>' || u == ')')
            depth--;
        else if (depth == 0 && !isalnum(u) && u != '_' && u != ':')
            return 0;
        if (depth < 0)
            return 0;
    }
    return depth == 0;
}

/* -DNAME[=VALUE]: NAME a C identifier, as the library requires. */
static int valid_define_name(const char *d)
{
    if (!(isalpha((unsigned char)*d) || *d == '_'))
        return 0;
    while (isalnum((unsigned char)*d) || *d == '_')
        d++;
    return *d == 0 || *d == '=';
}

static int is_include_option(const char *o)
{
    return strncmp(o, "-I", 2) == 0 || strncmp(o, "--include-path=", 15) == 0;
}

/* path as the tool reaches it: relative ones from the manifest's folder
 * (malloc'd; NULL when out of memory). */
static char *reached(const parser *p, const char *path)
{
    size_t n = strlen(path) + (p->base_dir ? strlen(p->base_dir) : 0) + 2;
    char *out = malloc(n);
    if (!out)
        return NULL;
    if (path[0] != '/' && p->base_dir && *p->base_dir)
        snprintf(out, n, "%s/%s", p->base_dir, path);
    else
        snprintf(out, n, "%s", path);
    return out;
}

/* Appends "-I<dir>", dir as the manifest names it (relative to its folder),
 * after checking it is a folder. */
static int add_include(parser *p, tk__mf_kernel *k, const char *dir)
{
    struct stat st;
    char *full = reached(p, dir);
    if (!full)
        return oom(p);
    int bad = stat(full, &st) != 0 ? errno : !S_ISDIR(st.st_mode) ? -1 : 0;
    free(full);
    if (bad > 0)
        return fail(p, dir, "include folder %s: %s", dir, strerror(bad));
    if (bad < 0)
        return fail(p, dir, "include folder %s: not a folder", dir);
    size_t n = strlen(dir) + 3;
    char *o = malloc(n);
    if (!o)
        return oom(p);
    snprintf(o, n, "-I%s", dir);
    k->options[k->n_options++] = o;
    return 0;
}

static int parse_kernel_line(parser *p, char **tok, int ntok)
{
    tk__manifest *m = p->m;
    if (ntok < 3)
        return fail(p, tok[0], "expected: kernel FILE ENTRY [-DNAME[=VALUE]]... [OPTION]...");
    tk__mf_kernel *ks = realloc(m->kernels, (m->n_kernels + 1) * sizeof *ks);
    if (!ks)
        return oom(p);
    m->kernels = ks;
    tk__mf_kernel *k = &ks[m->n_kernels];
    memset(k, 0, sizeof *k);
    m->n_kernels++;
    k->line = p->line;
    const char *file = tok[1];
    if (!(k->path = reached(p, file)) || !(k->file = strdup(file)))
        return oom(p);
    char why[1024];
    size_t len = 0;
    if (tk__cli_read_regular(k->path, TK__CLI_MAX_TEXT_FILE, &k->source, &len, why, sizeof why) !=
        0)
        return fail(p, file, "cannot read %s", why);
    if (strlen(k->source) != len || len == 0)
        return fail(p, file, "%s is empty or not a text file", k->path);
    if (!(k->entry = strdup(tok[2])))
        return oom(p);
    if (!valid_entry(k->entry))
        return fail(p, tok[2],
                    "not an entry point: a kernel's name (extern \"C\" or not) or a C++ name "
                    "expression such as \"fill<4, float>\" (quoted when it holds blanks)");
    size_t n = (size_t)ntok;
    k->defines = calloc(n, sizeof *k->defines);
    k->define_text = calloc(n, sizeof *k->define_text);
    k->options = calloc(n + 1, sizeof *k->options);
    if (!k->defines || !k->define_text || !k->options)
        return oom(p);
    /* `#include "x"` next to the kernel file: its folder is searched first. */
    char *kdir = strdup(file);
    if (!kdir)
        return oom(p);
    char *kslash = strrchr(kdir, '/');
    if (kslash)
        kslash[kslash == kdir ? 1 : 0] = 0;
    else
        snprintf(kdir, strlen(kdir) + 1, ".");
    int added = add_include(p, k, kdir);
    free(kdir);
    if (added != 0)
        return -1;
    for (int t = 3; t < ntok; t++) {
        if (strncmp(tok[t], "-D", 2) == 0) {
            if (!tok[t][2] || tok[t][2] == '=')
                return fail(p, tok[t], "define without a name");
            if (!valid_define_name(tok[t] + 2))
                return fail(p, tok[t],
                            "not a macro name: a letter or '_', then letters, digits or '_'");
            char *d = strdup(tok[t] + 2);
            if (!d)
                return oom(p);
            k->define_text[k->n_defines] = d;
            char *eq = strchr(d, '=');
            if (eq)
                *eq = 0;
            k->defines[k->n_defines].name = d;
            k->defines[k->n_defines].value = eq ? eq + 1 : NULL;
            k->n_defines++;
        } else if (is_include_option(tok[t])) {
            /* -I folders are relative to the manifest, and must exist. */
            const char *dir = tok[t][2] ? tok[t] + 2 : (t + 1 < ntok ? tok[++t] : NULL);
            if (strncmp(tok[t], "--include-path=", 15) == 0)
                dir = tok[t] + 15;
            if (!dir || !dir[0])
                return fail(p, tok[t], "-I without a folder");
            if (add_include(p, k, dir) != 0)
                return -1;
        } else {
            if (!(k->options[k->n_options++] = strdup(tok[t])))
                return oom(p);
        }
    }
    tk__mf_job job;
    memset(&job, 0, sizeof job);
    job.kernel = (int)(m->n_kernels - 1);
    job.line = p->line;
    return push_job(p, &job);
}

/* Fields are separated by blanks; a field in double quotes may hold blanks
 * and '#' ("fill<4, float>"), has no escapes and ends at the next quote,
 * which must end the field. '#' outside quotes starts a comment. */
static int split_fields(parser *p, char *line, char **tok, int *ntok)
{
    int n = 0;
    char *c = line;
    for (;;) {
        while (*c && strchr(" \t\r\v\f", *c))
            c++;
        if (!*c || *c == '#')
            break;
        if (n == 256)
            return fail(p, NULL, "too many fields on one line");
        if (*c == '"') {
            char *close = strchr(c + 1, '"');
            if (!close)
                return fail(p, NULL, "a quoted field has no closing quote");
            if (close[1] && !strchr(" \t\r\v\f#", close[1]))
                return fail(p, NULL, "a closing quote must end its field");
            tok[n++] = c + 1;
            *close = 0;
            c = close + 1;
            continue;
        }
        tok[n++] = c;
        while (*c && !strchr(" \t\r\v\f#\"", *c))
            c++;
        if (*c == '"')
            return fail(p, NULL, "a quote inside a field (quote the whole field)");
        if (*c == '#') {
            *c = 0;
            break;
        }
        if (*c)
            *c++ = 0;
    }
    *ntok = n;
    return 0;
}

const char tk__fallbacks_manifest[] = "fallbacks\n";

/* `fallbacks [OP]...`: a job per operator named, or per operator. */
static int parse_fallbacks_line(parser *p, char **tok, int ntok)
{
    tk__mf_job job;
    memset(&job, 0, sizeof job);
    job.kernel = -1;
    job.fallbacks = 1;
    job.line = p->line;
    for (int t = 1; t < ntok; t++) {
        if (tk_op_from_name(tok[t], &job.op) != TK_OK)
            return fail(p, tok[t],
                        strncmp(tok[t], "policy=", 7) == 0
                            ? "a fallbacks line takes no policy: the fallback kernels are the "
                              "same under every policy"
                            : "unknown op (operators: gemm_f16_fwd, gemm_f16_grad_a, "
                              "gemm_f16_grad_b, softmax_f16_fwd, softmax_xent_f16_bwd, "
                              "embedding_f16_fwd, embedding_f16_bwd)");
        if (push_job(p, &job) != 0)
            return -1;
    }
    for (int op = 0; ntok == 1 && op < TK_OP_COUNT; op++) {
        job.op = (tk_op)op;
        if (push_job(p, &job) != 0)
            return -1;
    }
    return 0;
}

static int parse_line(parser *p, char *line)
{
    char *tok[256];
    int ntok = 0;
    if (split_fields(p, line, tok, &ntok) != 0)
        return -1;
    if (ntok == 0)
        return 0;
    if (strcmp(tok[0], "arch") == 0)
        return parse_arch_line(p, tok, ntok);
    if (strcmp(tok[0], "policy") == 0)
        return parse_policy_line(p, tok, ntok);
    if (strcmp(tok[0], "kernel") == 0)
        return parse_kernel_line(p, tok, ntok);
    if (strcmp(tok[0], "fallbacks") == 0)
        return parse_fallbacks_line(p, tok, ntok);
    tk_op op;
    if (tk_op_from_name(tok[0], &op) != TK_OK)
        return fail(p, tok[0],
                    "unknown op (operators: gemm_f16_fwd, gemm_f16_grad_a, "
                    "gemm_f16_grad_b, softmax_f16_fwd, softmax_xent_f16_bwd, "
                    "embedding_f16_fwd, embedding_f16_bwd; directives: arch, "
                    "policy, kernel, fallbacks)");
    return parse_op_line(p, op, tok, ntok);
}

/* Removes repeated jobs (same operator and shape, or same user kernel line),
 * keeping the first: the summary then counts each specialisation once. */
static void dedupe(tk__manifest *m)
{
    size_t n = m->n_jobs;
    if (n < 2)
        return;
    size_t cap = 1;
    while (cap < n * 2)
        cap <<= 1;
    size_t *table = malloc(cap * sizeof *table);
    if (!table)
        return; /* duplicates only cost a cache hit each */
    for (size_t i = 0; i < cap; i++)
        table[i] = SIZE_MAX;
    size_t out = 0;
    for (size_t i = 0; i < n; i++) {
        const tk__mf_job *j = &m->jobs[i];
        uint64_t h = 1469598103934665603ull;
        h = (h ^ (uint64_t)(j->kernel + 1)) * 1099511628211ull;
        h = (h ^ (uint64_t)j->op) * 1099511628211ull;
        h = (h ^ (uint64_t)j->fallbacks) * 1099511628211ull;
        for (int d = 0; d < j->n_dims; d++)
            h = (h ^ (uint64_t)j->dims[d]) * 1099511628211ull;
        size_t slot = (size_t)h & (cap - 1);
        int dup = 0;
        while (table[slot] != SIZE_MAX) {
            const tk__mf_job *o = &m->jobs[table[slot]];
            if (o->kernel == j->kernel && o->op == j->op && o->fallbacks == j->fallbacks &&
                o->n_dims == j->n_dims && o->policies == j->policies &&
                memcmp(o->dims, j->dims, sizeof o->dims) == 0 && j->kernel < 0) {
                dup = 1;
                break;
            }
            slot = (slot + 1) & (cap - 1);
        }
        if (dup)
            continue;
        m->jobs[out] = *j;
        table[slot] = out;
        out++;
    }
    m->n_jobs = out;
    free(table);
}

int tk__manifest_parse(const char *text, const char *name, const char *base_dir, tk__manifest *out,
                       char *err, size_t err_size)
{
    tk__manifest m;
    memset(&m, 0, sizeof m);
    parser p = {name, base_dir, 0, err, err_size, &m};
    char *copy = strdup(text);
    if (!copy || !(m.name = strdup(name)) ||
        (base_dir && *base_dir && !(m.base_dir = strdup(base_dir)))) {
        free(copy);
        snprintf(err, err_size, "%s: out of memory", name);
        tk__manifest_free(&m);
        return -1;
    }
    char *line = copy;
    while (line) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = 0;
        p.line++;
        if (parse_line(&p, line)) {
            free(copy);
            tk__manifest_free(&m);
            return -1;
        }
        line = nl ? nl + 1 : NULL;
    }
    free(copy);
    if (m.n_jobs == 0) {
        snprintf(err, err_size, "%s: names nothing to compile (no operator or kernel line)", name);
        tk__manifest_free(&m);
        return -1;
    }
    dedupe(&m);
    *out = m;
    return 0;
}

int tk__manifest_load(const char *path, tk__manifest *out, char *err, size_t err_size)
{
    char *text = NULL;
    size_t len = 0;
    if (tk__cli_read_regular(path, TK__CLI_MAX_TEXT_FILE, &text, &len, err, err_size) != 0)
        return -1;
    if (strlen(text) != len) {
        snprintf(err, err_size, "%s: not a text file", path);
        free(text);
        return -1;
    }
    char *dir = strdup(path);
    if (!dir) {
        free(text);
        snprintf(err, err_size, "%s: out of memory", path);
        return -1;
    }
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = 0;
    int rc = tk__manifest_parse(text, path, slash ? (slash == dir ? "/" : dir) : NULL, out, err,
                                err_size);
    free(dir);
    free(text);
    return rc;
}

void tk__manifest_free(tk__manifest *m)
{
    if (!m)
        return;
    free(m->name);
    free(m->base_dir);
    for (size_t i = 0; i < m->n_archs; i++)
        free(m->archs[i]);
    free(m->archs);
    free(m->arch_lines);
    free(m->jobs);
    for (size_t i = 0; i < m->n_kernels; i++) {
        tk__mf_kernel *k = &m->kernels[i];
        free(k->path);
        free(k->file);
        free(k->source);
        free(k->entry);
        for (size_t d = 0; d < k->n_defines; d++)
            free(k->define_text[d]);
        free(k->define_text);
        free(k->defines);
        for (size_t o = 0; o < k->n_options; o++)
            free(k->options[o]);
        free(k->options);
    }
    free(m->kernels);
    memset(m, 0, sizeof *m);
}

void tk__manifest_clear_line_policies(tk__manifest *m)
{
    for (size_t i = 0; i < m->n_jobs; i++)
        m->jobs[i].policies = 0;
    dedupe(m);
}

static int item_matches(const tk__manifest *m, const tk__mf_job *j, const char *item)
{
    if (j->kernel >= 0)
        return strcmp(m->kernels[j->kernel].entry, item) == 0;
    return strcmp(tk_op_name(j->op), item) == 0;
}

int tk__manifest_filter(tk__manifest *m, const char *list, char *err, size_t err_size)
{
    char *copy = strdup(list);
    if (!copy) {
        snprintf(err, err_size, "out of memory");
        return -1;
    }
    char *items[64];
    int n = 0;
    char *save = NULL;
    for (char *t = strtok_r(copy, ", ", &save); t && n < 64; t = strtok_r(NULL, ", ", &save))
        items[n++] = t;
    if (n == 0) {
        snprintf(err, err_size, "--ops: empty list");
        free(copy);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        tk_op op;
        int known = tk_op_from_name(items[i], &op) == TK_OK;
        for (size_t k = 0; k < m->n_kernels && !known; k++)
            known = strcmp(m->kernels[k].entry, items[i]) == 0;
        if (!known) {
            snprintf(err, err_size, "--ops: unknown operator '%s'", items[i]);
            free(copy);
            return -1;
        }
    }
    size_t out = 0;
    for (size_t j = 0; j < m->n_jobs; j++) {
        int keep = 0;
        for (int i = 0; i < n && !keep; i++)
            keep = item_matches(m, &m->jobs[j], items[i]);
        if (keep)
            m->jobs[out++] = m->jobs[j];
    }
    m->n_jobs = out;
    free(copy);
    if (out == 0) {
        snprintf(err, err_size, "--ops %s: the manifest has no job for %s", list,
                 n == 1 ? "it" : "them");
        return -1;
    }
    return 0;
}

void tk__mf_job_describe(const tk__manifest *m, const tk__mf_job *job, char *buf, size_t size)
{
    if (job->kernel >= 0) {
        const tk__mf_kernel *k = &m->kernels[job->kernel];
        snprintf(buf, size, "kernel %s (%s)", k->entry, k->path);
        return;
    }
    if (job->fallbacks) {
        snprintf(buf, size, "%s fallbacks", tk_op_name(job->op));
        return;
    }
    char names[TK__MF_MAX_DIMS][16];
    int n = op_dim_names(job->op, names);
    size_t len = (size_t)snprintf(buf, size, "%s", tk_op_name(job->op));
    for (int i = 0; i < n && i < job->n_dims && len < size; i++)
        len +=
            (size_t)snprintf(buf + len, size - len, " %s=%lld", names[i], (long long)job->dims[i]);
}
