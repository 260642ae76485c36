/* User sources: include resolution, dependency records, name expressions
 * (see sources.h). */
#include "jit/sources.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#define MAX_FILES 4096
#define MAX_HEADER_BYTES ((size_t)64 << 20)

/* ------------------------------------------------------------ buffers */

void tk__sb_add(tk__sbuf *b, const char *s, size_t n)
{
    if (b->failed)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (b->len + n + 1 > cap)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->failed = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void tk__sb_str(tk__sbuf *b, const char *s)
{
    tk__sb_add(b, s, strlen(s));
}

/* ------------------------------------------------------------- names */

int tk__is_identifier(const char *s)
{
    if (!s || !s[0] ||
        !((s[0] >= 'A' && s[0] <= 'Z') || (s[0] >= 'a' && s[0] <= 'z') || s[0] == '_'))
        return 0;
    for (const char *c = s; *c; c++)
        if (!((*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') ||
              *c == '_'))
            return 0;
    return 1;
}

int tk__is_name_expression(const char *s)
{
    /* A qualified name ("ns::k", "::k"), then optionally template arguments:
     * outside <...> and (...) only identifier characters and "::"; inside,
     * anything printable but quotes, braces, ';', '#' and '\\'. */
    if (!s || !s[0] || strlen(s) > 1000 ||
        !(s[0] == ':' || s[0] == '_' || (s[0] >= 'A' && s[0] <= 'Z') ||
          (s[0] >= 'a' && s[0] <= 'z')))
        return 0;
    int depth = 0, letters = 0;
    for (const char *c = s; *c; c++) {
        unsigned char u = (unsigned char)*c;
        if (u < 0x20 || u >= 0x7f || strchr("\"'{};#\\`@$?", u))
            return 0;
        int ident =
            u == '_' || (u >= 'A' && u <= 'Z') || (u >= 'a' && u <= 'z') || (u >= '0' && u <= '9');
        if (u == '<' || u == '(') {
            depth++;
        } else if (u == '>' || u == ')') {
            if (--depth < 0)
                return 0;
        } else if (depth == 0 && !ident && u != ':') {
            return 0;
        }
        if (depth == 0 && ident)
            letters = 1;
    }
    return depth == 0 && letters;
}

/* ------------------------------------------------------ search options */

tk_status tk__search_dirs(const char *const *opts, size_t n_opts, const char ***dirs,
                          size_t *n_dirs)
{
    *dirs = NULL;
    *n_dirs = 0;
    size_t n = 0;
    const char **out = NULL;
    for (int pass = 0; pass < 2; pass++) {
        n = 0;
        for (size_t i = 0; i < n_opts; i++) {
            const char *o = opts[i], *d = NULL;
            if (strncmp(o, "-I", 2) == 0)
                d = o[2] ? o + 2 : (i + 1 < n_opts ? opts[++i] : NULL);
            else if (strncmp(o, "--include-path=", 15) == 0)
                d = o + 15;
            else if (strcmp(o, "--include-path") == 0)
                d = i + 1 < n_opts ? opts[++i] : NULL;
            if (!d)
                continue;
            if (out)
                out[n] = d;
            n++;
        }
        if (pass == 0) {
            if (n == 0)
                return TK_OK;
            out = malloc(n * sizeof *out);
            if (!out)
                return TK_OUT_OF_MEMORY;
        }
    }
    *dirs = out;
    *n_dirs = n;
    return TK_OK;
}

tk_status tk__pre_includes(const char *const *opts, size_t n_opts, char **prefix,
                           unsigned char **skip)
{
    *prefix = NULL;
    *skip = NULL;
    tk__sbuf b = {NULL, 0, 0, 0};
    unsigned char *mask = NULL;
    for (size_t i = 0; i < n_opts; i++) {
        const char *o = opts[i], *name = NULL;
        size_t first = i;
        if (strncmp(o, "--pre-include=", 14) == 0)
            name = o + 14;
        else if ((strcmp(o, "-include") == 0 || strcmp(o, "--pre-include") == 0) && i + 1 < n_opts)
            name = opts[++i];
        if (!name || !name[0] || strpbrk(name, "\"\n\r"))
            continue;
        if (!mask && !(mask = calloc(n_opts, 1)))
            goto oom;
        for (size_t j = first; j <= i; j++)
            mask[j] = 1;
        tk__sb_str(&b, "#include \"");
        tk__sb_str(&b, name);
        tk__sb_str(&b, "\"\n");
    }
    if (b.failed)
        goto oom;
    *prefix = b.p;
    *skip = mask;
    return TK_OK;
oom:
    free(b.p);
    free(mask);
    return TK_OUT_OF_MEMORY;
}

/* ------------------------------------------------------------ lookups */

/* An open descriptor on path when it is a regular file (a folder of the
 * same name is not a match), else -1; *size gets its size. One open and one
 * fstat: on a disk hit these calls are most of the cost. */
static int open_regular(const char *path, size_t *size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size > MAX_HEADER_BYTES) {
        close(fd);
        return -1;
    }
    *size = (size_t)st.st_size;
    return fd;
}

/* Reads size bytes of fd (fewer if it shrank) and closes it; NULL when out
 * of memory or on a read error. */
static char *read_fd(int fd, size_t size, size_t *len)
{
    size_t got = 0;
    char *text = malloc(size + 1);
    while (text && got < size) {
        ssize_t r = read(fd, text + got, size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            free(text);
            text = NULL;
        }
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    if (text) {
        text[got] = '\0';
        *len = got;
    }
    return text;
}

static void hash_hex(const void *data, size_t len, char hex[33])
{
    XXH128_hash_t h = XXH3_128bits(data, len);
    snprintf(hex, 33, "%016llx%016llx", (unsigned long long)h.high64, (unsigned long long)h.low64);
}

typedef struct found {
    int kind;        /* 0 not found, 'm' memory, 'f' file */
    size_t mem;      /* index for 'm' */
    char path[4096]; /* for 'f' */
    int fd;          /* for 'f': open on path (the caller closes it) */
    size_t size;
} found;

/* Runs one lookup (sources.h, resolution order). 0, or -1 when a path does
 * not fit. */
static int lookup(int quoted, const char *includer_dir, const char *spelling, const tk__search *s,
                  found *out)
{
    out->kind = 0;
    out->fd = -1;
    if (spelling[0] == '/') {
        if (strlen(spelling) >= sizeof out->path)
            return -1;
        if ((out->fd = open_regular(spelling, &out->size)) >= 0) {
            out->kind = 'f';
            snprintf(out->path, sizeof out->path, "%s", spelling);
        }
        return 0;
    }
    if (quoted && includer_dir && includer_dir[0]) {
        int n = snprintf(out->path, sizeof out->path, "%s/%s", includer_dir, spelling);
        if (n < 0 || (size_t)n >= sizeof out->path)
            return -1;
        if ((out->fd = open_regular(out->path, &out->size)) >= 0) {
            out->kind = 'f';
            return 0;
        }
    }
    for (size_t i = 0; i < s->n_mem; i++)
        if (strcmp(s->mem[i].name, spelling) == 0) {
            out->kind = 'm';
            out->mem = i;
            return 0;
        }
    for (size_t i = 0; i < s->n_dirs; i++) {
        const char *d = s->dirs[i];
        int n = d[0] ? snprintf(out->path, sizeof out->path, "%s/%s", d, spelling)
                     : snprintf(out->path, sizeof out->path, "%s", spelling);
        if (n < 0 || (size_t)n >= sizeof out->path)
            return -1;
        if ((out->fd = open_regular(out->path, &out->size)) >= 0) {
            out->kind = 'f';
            return 0;
        }
    }
    return 0;
}

/* ------------------------------------------------------- directives */

typedef struct directive {
    int is_include; /* 0: not an include line */
    int computed;   /* #include MACRO, #include_next: cannot be followed */
    int quoted;
    const char *name; /* spelling (not NUL-terminated) */
    size_t name_len;
} directive;

static directive parse_line(const char *s, const char *e)
{
    directive d = {0, 0, 0, NULL, 0};
    while (s < e && (*s == ' ' || *s == '\t'))
        s++;
    if (s >= e || *s != '#')
        return d;
    s++;
    while (s < e && (*s == ' ' || *s == '\t'))
        s++;
    if ((size_t)(e - s) < 7 || strncmp(s, "include", 7) != 0)
        return d;
    s += 7;
    if (s < e && (*s == '_' || (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
                  (*s >= '0' && *s <= '9'))) {
        /* include_next and the like: the search order is the compiler's. */
        d.is_include = d.computed = (size_t)(e - s) >= 5 && strncmp(s, "_next", 5) == 0;
        return d;
    }
    d.is_include = 1;
    while (s < e && (*s == ' ' || *s == '\t'))
        s++;
    if (s < e && (*s == '"' || *s == '<')) {
        char close = *s == '"' ? '"' : '>';
        const char *n = ++s;
        while (s < e && *s != close)
            s++;
        if (s < e && s > n) {
            d.quoted = close == '"';
            d.name = n;
            d.name_len = (size_t)(s - n);
            return d;
        }
    }
    d.computed = 1;
    return d;
}

/* ---------------------------------------------------------- resolving */

typedef struct sfile {
    int kind; /* 'm' or 'f' */
    size_t mem;
    char *path; /* 'f': as found; 'm': NULL */
    char *dir;  /* 'f': folder of path, for quoted includes */
    char *text; /* raw ('f': owned; 'm': borrowed) */
    size_t len;
} sfile;

typedef struct seen_lookup {
    char *key; /* "<q|a>\t<includer folder>\t<spelling>" */
    long file; /* index into files, -1: not found */
} seen_lookup;

typedef struct resolver {
    const tk__search *s;
    sfile *files;
    size_t n_files;
    tk__sbuf deps;
    seen_lookup *seen; /* lookups already made, with their results */
    size_t n_seen, cap_seen;
    tk__srcset *out;
    char *msg;
    size_t msg_size;
} resolver;

static tk_status r_fail(resolver *r, tk_status st, const char *what, const char *path)
{
    snprintf(r->msg, r->msg_size, "%s %s", what, path);
    return st;
}

/* Index of the file for f, added (and read) when new; -1 on failure
 * (message set). Closes f->fd in every case. */
static long file_index(resolver *r, found *f, tk_status *st)
{
    int fd = f->fd;
    f->fd = -1;
    for (size_t i = 0; i < r->n_files; i++) {
        const sfile *x = &r->files[i];
        if (x->kind == f->kind &&
            (f->kind == 'm' ? x->mem == f->mem : strcmp(x->path, f->path) == 0)) {
            if (fd >= 0)
                close(fd);
            return (long)i;
        }
    }
    sfile x = {f->kind, f->mem, NULL, NULL, NULL, 0};
    if (r->n_files == MAX_FILES) {
        *st = r_fail(r, TK_INVALID_ARGUMENT, "more than 4096 headers; the last:", f->path);
        goto fail;
    }
    if (r->n_files % 16 == 0) {
        sfile *g = realloc(r->files, (r->n_files + 16) * sizeof *g);
        if (!g) {
            *st = TK_OUT_OF_MEMORY;
            goto fail;
        }
        r->files = g;
    }
    if (f->kind == 'm') {
        x.text = (char *)r->s->mem[f->mem].text;
        x.len = strlen(x.text);
    } else {
        x.path = strdup(f->path);
        x.dir = strdup(f->path);
        if (!x.path || !x.dir) {
            *st = TK_OUT_OF_MEMORY;
            goto fail;
        }
        char *slash = strrchr(x.dir, '/');
        if (slash)
            *slash = '\0';
        else
            x.dir[0] = '\0'; /* relative to the working folder */
        x.text = read_fd(fd, f->size, &x.len);
        fd = -1;
        if (!x.text) {
            *st = r_fail(r, TK_IO_ERROR, "cannot read header", f->path);
            goto fail;
        }
        if (memchr(x.text, '\0', x.len)) {
            *st = r_fail(r, TK_INVALID_ARGUMENT, "a NUL byte in header", f->path);
            goto fail;
        }
    }
    r->files[r->n_files] = x;
    return (long)r->n_files++;
fail:
    if (fd >= 0)
        close(fd);
    if (x.kind == 'f')
        free(x.text);
    free(x.path);
    free(x.dir);
    return -1;
}

/* Records a new lookup (key owned by the caller) and its result in the deps. */
static tk_status record(resolver *r, const char *key, long file)
{
    if (r->n_seen == r->cap_seen) {
        size_t cap = r->cap_seen ? r->cap_seen * 2 : 32;
        seen_lookup *g = realloc(r->seen, cap * sizeof *g);
        if (!g)
            return TK_OUT_OF_MEMORY;
        r->seen = g;
        r->cap_seen = cap;
    }
    char *copy = strdup(key);
    if (!copy)
        return TK_OUT_OF_MEMORY;
    r->seen[r->n_seen].key = copy;
    r->seen[r->n_seen].file = file;
    r->n_seen++;
    tk__sb_str(&r->deps, key);
    tk__sb_str(&r->deps, "\t");
    const sfile *f = file >= 0 ? &r->files[file] : NULL;
    if (f && f->kind == 'm') {
        tk__sb_str(&r->deps, "m:");
        tk__sb_str(&r->deps, r->s->mem[f->mem].name);
        tk__sb_str(&r->deps, "\t-\n");
    } else if (f) {
        char hex[33];
        hash_hex(f->text, f->len, hex);
        tk__sb_str(&r->deps, "f:");
        tk__sb_str(&r->deps, f->path);
        tk__sb_str(&r->deps, "\t");
        tk__sb_str(&r->deps, hex);
        tk__sb_str(&r->deps, "\n");
    } else {
        tk__sb_str(&r->deps, "\t-\n");
    }
    return r->deps.failed ? TK_OUT_OF_MEMORY : TK_OK;
}

static int fits_in_deps(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] == '\t' || s[i] == '\n' || s[i] == '\r' || s[i] == '\0')
            return 0;
    return 1;
}

/* The file (index) one include finds, or -1; looked up once per distinct
 * (kind, includer folder, spelling). -2 with *st on failure, -3 when the
 * path cannot be recorded (too long, or a tab in it). */
static long resolve_include(resolver *r, int quoted, const char *dir, const char *spelling,
                            tk_status *st)
{
    char key[8400];
    int n = snprintf(key, sizeof key, "%c\t%s\t%s", quoted ? 'q' : 'a', dir ? dir : "", spelling);
    if (n < 0 || (size_t)n >= sizeof key || (dir && !fits_in_deps(dir, strlen(dir))))
        return -3;
    for (size_t i = 0; i < r->n_seen; i++)
        if (strcmp(r->seen[i].key, key) == 0)
            return r->seen[i].file;
    found f;
    if (lookup(quoted, dir, spelling, r->s, &f) != 0)
        return -3;
    if (f.kind == 'f' && !fits_in_deps(f.path, strlen(f.path))) {
        close(f.fd);
        return -3;
    }
    long idx = -1;
    if (f.kind) {
        idx = file_index(r, &f, st);
        if (idx < 0)
            return -2;
    }
    *st = record(r, key, idx);
    return *st == TK_OK ? idx : -2;
}

/* Rewrites text (of a file in folder dir, NULL for the main source or an
 * in-memory header) into out. */
static tk_status rewrite(resolver *r, const char *text, size_t len, const char *dir, tk__sbuf *out)
{
    const char *p = text, *end = text + len;
    char spelling[4096];
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        const char *next = eol ? eol + 1 : end;
        const char *line_end = eol ? eol : end;
        directive d = parse_line(p, line_end);
        if (d.is_include && !d.computed &&
            (d.name_len >= sizeof spelling || !fits_in_deps(d.name, d.name_len)))
            d.computed = 1;
        long idx = -1;
        if (d.is_include && !d.computed) {
            memcpy(spelling, d.name, d.name_len);
            spelling[d.name_len] = '\0';
            tk_status st = TK_OK;
            idx = resolve_include(r, d.quoted, dir, spelling, &st);
            if (idx == -2)
                return st;
            if (idx == -3) {
                /* Cannot be recorded: followed by the compiler, not cached. */
                d.computed = 1;
                idx = -1;
            }
        }
        if (d.computed) {
            if (!r->out->uncacheable) {
                int n = (int)(line_end - p);
                snprintf(r->out->why, sizeof r->out->why, "%.*s", n > 200 ? 200 : n, p);
            }
            r->out->uncacheable = 1;
        }
        if (idx < 0) {
            tk__sb_add(out, p, (size_t)(next - p));
        } else {
            char line[4200];
            const char *base = strrchr(spelling, '/');
            snprintf(line, sizeof line, "#include \"tk_inc/%ld/%s\"%s", idx,
                     base ? base + 1 : spelling, eol ? "\n" : "");
            tk__sb_str(out, line);
        }
        p = next;
    }
    return out->failed ? TK_OUT_OF_MEMORY : TK_OK;
}

static int safe_for_line(const char *s)
{
    return !strpbrk(s, "\"\\\n\r");
}

tk_status tk__sources_resolve(const char *text, const tk__search *s, tk__srcset *out, char *msg,
                              size_t msg_size)
{
    memset(out, 0, sizeof *out);
    msg[0] = '\0';
    resolver r = {s, NULL, 0, {NULL, 0, 0, 0}, NULL, 0, 0, out, msg, msg_size};
    tk__sbuf main_text = {NULL, 0, 0, 0};
    tk_status st = rewrite(&r, text, strlen(text), NULL, &main_text);
    /* Breadth first: every file found is scanned once, in order. */
    char **names = NULL, **texts = NULL;
    for (size_t i = 0; st == TK_OK && i < r.n_files; i++) {
        tk__sbuf t = {NULL, 0, 0, 0};
        const sfile *f = &r.files[i];
        const char *shown = f->kind == 'm' ? s->mem[f->mem].name : f->path;
        if (safe_for_line(shown)) {
            tk__sb_str(&t, "#line 1 \"");
            tk__sb_str(&t, shown);
            tk__sb_str(&t, "\"\n");
        }
        st = rewrite(&r, f->text, f->len, f->kind == 'f' ? f->dir : NULL, &t);
        f = &r.files[i]; /* rewrite may have grown the array */
        if (st == TK_OK && t.failed)
            st = TK_OUT_OF_MEMORY;
        if (st == TK_OK && i % 16 == 0) {
            char **n2 = realloc(names, (i + 16) * sizeof *n2);
            if (n2)
                names = n2;
            char **t2 = n2 ? realloc(texts, (i + 16) * sizeof *t2) : NULL;
            if (t2)
                texts = t2;
            if (!n2 || !t2)
                st = TK_OUT_OF_MEMORY;
        }
        if (st != TK_OK) {
            free(t.p);
            break;
        }
        char name[4200];
        const char *base = f->kind == 'm' ? s->mem[f->mem].name : f->path;
        const char *slash = strrchr(base, '/');
        snprintf(name, sizeof name, "tk_inc/%zu/%s", i, slash ? slash + 1 : base);
        names[i] = strdup(name);
        texts[i] = t.p ? t.p : strdup("");
        out->n_files = i + 1;
        out->names = names;
        out->texts = texts;
        if (!names[i] || !texts[i]) {
            st = TK_OUT_OF_MEMORY;
            break;
        }
    }
    out->names = names;
    out->texts = texts;
    if (st == TK_OK && (main_text.failed || r.deps.failed))
        st = TK_OUT_OF_MEMORY;
    out->main = main_text.p ? main_text.p : strdup("");
    out->deps = r.deps.p ? r.deps.p : strdup("");
    if (st == TK_OK && (!out->main || !out->deps))
        st = TK_OUT_OF_MEMORY;
    for (size_t i = 0; i < r.n_files; i++) {
        if (r.files[i].kind == 'f')
            free(r.files[i].text);
        free(r.files[i].path);
        free(r.files[i].dir);
    }
    free(r.files);
    for (size_t i = 0; i < r.n_seen; i++)
        free(r.seen[i].key);
    free(r.seen);
    if (st != TK_OK) {
        if (st == TK_OUT_OF_MEMORY && !msg[0])
            snprintf(msg, msg_size, "out of memory resolving includes");
        tk__srcset_free(out);
    }
    return st;
}

void tk__srcset_free(tk__srcset *set)
{
    if (!set)
        return;
    free(set->main);
    for (size_t i = 0; i < set->n_files; i++) {
        if (set->names)
            free(set->names[i]);
        if (set->texts)
            free(set->texts[i]);
    }
    free(set->names);
    free(set->texts);
    free(set->deps);
    memset(set, 0, sizeof *set);
}
