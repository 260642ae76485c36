/*
 * The stub backend, for tests of the engine without a GPU: "compiling"
 * packages the source into a code object (magic, target, source); loading
 * accepts only such objects; launching counts and does nothing. Memory lives
 * in host memory so operator tests can poison and inspect buffers. Every call
 * is counted in tk__stub_counters (atomic increments).
 *
 * Test knobs: a source containing "#error" fails to compile with a log that
 * quotes the line; counters.compile_delay_ms slows each compile down (to
 * widen races); counters.fail_next_loads makes that many loads fail.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jit/backend/backend.h"

#define STUB_MAGIC "TKSTUB01"
#define STUB_MAGIC_LEN 8

static tk__stub_counters g_counters;

tk__stub_counters *tk__stub_counters_get(void)
{
    return &g_counters;
}

typedef struct stub_module {
    char *code; /* copy of the code object, NUL-terminated */
    size_t size;
} stub_module;

static tk_status stub_load(tk__err *err)
{
    return TK_OK;
}

static tk_status stub_describe(char *buf, size_t size)
{
    snprintf(buf, size, "stub: built in (testing backend, no libraries)\n  device 0: stub\n");
    return TK_OK;
}

static tk_status stub_compiler_identity(char *buf, size_t size, tk__err *err)
{
    snprintf(buf, size, "stub-1");
    return TK_OK;
}

static tk_status stub_check_target(const char *target, char *canon, size_t size, tk__err *err)
{
    if (!target || strcmp(target, "stub") != 0) {
        return tk__err_set(err, TK_UNSUPPORTED,
                           "the stub compiler does not know target '%s' (it knows only 'stub')",
                           target ? target : "(null)");
    }
    snprintf(canon, size, "%s", target);
    return TK_OK;
}

static tk_status stub_device_count(int *count, tk__err *err)
{
    *count = 1;
    return TK_OK;
}

static int g_device_token;

static tk_status stub_device_open(int ordinal, void **dev_handle, char *target, size_t size,
                                  tk__err *err)
{
    if (ordinal != 0)
        return tk__err_set(err, TK_NO_DEVICE, "stub: no device %d (only device 0)", ordinal);
    *dev_handle = &g_device_token;
    snprintf(target, size, "stub");
    return TK_OK;
}

static void stub_device_close(void *dev_handle)
{
}

static tk_status stub_device_bind(void *dev_handle, tk__err *err)
{
    return TK_OK;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* File and line of position at in text, following #line directives, in the
 * form compilers print: "file(line)". */
static void where(const char *text, const char *at, const char *file, char *buf, size_t size)
{
    unsigned line = 1;
    char cur[512];
    snprintf(cur, sizeof cur, "%s", file);
    for (const char *p = text; p < at;) {
        const char *eol = strchr(p, '\n');
        if (!eol || eol >= at)
            break;
        unsigned n;
        char name[512];
        if (sscanf(p, "#line %u \"%511[^\"]\"", &n, name) == 2) {
            snprintf(cur, sizeof cur, "%s", name);
            line = n;
        } else {
            line++;
        }
        p = eol + 1;
    }
    snprintf(buf, size, "%s(%u)", cur, line);
}

/* The stub's "mangling": the expression with every other character an
 * underscore, behind a prefix no C identifier in a test uses. */
static char *stub_lower(const char *expr)
{
    size_t n = strlen(expr);
    char *out = malloc(n + 8);
    if (!out)
        return NULL;
    memcpy(out, "_Zstub_", 7);
    for (size_t i = 0; i < n; i++) {
        char c = expr[i];
        out[7 + i] =
            ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) ? c : '_';
    }
    out[7 + n] = '\0';
    return out;
}

/* The function a name expression names: its last identifier before any '<'. */
static void expr_base(const char *expr, char *buf, size_t size)
{
    size_t end = strcspn(expr, "<(");
    while (end > 0 && expr[end - 1] == ' ')
        end--;
    size_t start = end;
    while (start > 0 &&
           (expr[start - 1] == '_' || (expr[start - 1] >= 'a' && expr[start - 1] <= 'z') ||
            (expr[start - 1] >= 'A' && expr[start - 1] <= 'Z') ||
            (expr[start - 1] >= '0' && expr[start - 1] <= '9')))
        start--;
    snprintf(buf, size, "%.*s", (int)(end - start), expr + start);
}

/* ------------------------------------------- kernels of a stub source
 *
 * A kernel is `__global__ <type> name(<params>)`; extern "C" when the same
 * line says so before __global__. A C++ kernel's symbol is an Itanium-style
 * mangled name (no substitutions) built from the parameter types, so the
 * engine's demangler and its name resolution run against the stub too. */

typedef struct stub_def {
    char name[128];
    char symbol[512];
    const char *params; /* after '(' */
    size_t params_len;
    int extern_c;
} stub_def;

static int is_ident(char c)
{
    return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

static const struct {
    const char *type, *code;
    unsigned size;
    int kind;
} k_types[] = {
    {"float", "f", 4, TK_PARAM_FLOAT},         {"double", "d", 8, TK_PARAM_FLOAT},
    {"__half", "6__half", 2, TK_PARAM_FLOAT},  {"char", "c", 1, TK_PARAM_INT},
    {"signed char", "a", 1, TK_PARAM_INT},     {"unsigned char", "h", 1, TK_PARAM_UINT},
    {"int8_t", "a", 1, TK_PARAM_INT},          {"uint8_t", "h", 1, TK_PARAM_UINT},
    {"bool", "b", 1, TK_PARAM_UINT},           {"short", "s", 2, TK_PARAM_INT},
    {"int16_t", "s", 2, TK_PARAM_INT},         {"unsigned short", "t", 2, TK_PARAM_UINT},
    {"uint16_t", "t", 2, TK_PARAM_UINT},       {"int", "i", 4, TK_PARAM_INT},
    {"int32_t", "i", 4, TK_PARAM_INT},         {"unsigned", "j", 4, TK_PARAM_UINT},
    {"unsigned int", "j", 4, TK_PARAM_UINT},   {"uint32_t", "j", 4, TK_PARAM_UINT},
    {"long", "l", 8, TK_PARAM_INT},            {"int64_t", "l", 8, TK_PARAM_INT},
    {"long long", "x", 8, TK_PARAM_INT},       {"unsigned long", "m", 8, TK_PARAM_UINT},
    {"uint64_t", "m", 8, TK_PARAM_UINT},       {"size_t", "m", 8, TK_PARAM_UINT},
    {"unsigned long long", "y", 8, TK_PARAM_UINT},
};

/* One parameter's text ("const float *x"): its mangled code, size, kind. */
static void stub_param(const char *p, size_t n, char *code, size_t code_size, unsigned *size,
                       int *kind)
{
    char t[256];
    size_t k = 0;
    int stars = 0, is_const = 0;
    /* Normalise: drop const, count stars, single spaces. */
    for (size_t i = 0; i < n && k + 2 < sizeof t; i++) {
        if (p[i] == '*') {
            stars++;
            continue;
        }
        if (p[i] == ' ' || p[i] == '\t' || p[i] == '\n') {
            if (k && t[k - 1] != ' ')
                t[k++] = ' ';
            continue;
        }
        t[k++] = p[i];
    }
    while (k && t[k - 1] == ' ')
        k--;
    t[k] = '\0';
    char *c = t;
    if (strncmp(c, "const ", 6) == 0) {
        is_const = 1;
        c += 6;
    }
    /* Drop the parameter's name: the last word when more than one. */
    char *last = strrchr(c, ' ');
    if (last)
        *last = '\0';
    const char *base = NULL;
    *size = 0;
    *kind = TK_PARAM_STRUCT;
    for (size_t i = 0; i < sizeof k_types / sizeof k_types[0]; i++)
        if (strcmp(c, k_types[i].type) == 0) {
            base = k_types[i].code;
            *size = k_types[i].size;
            *kind = k_types[i].kind;
        }
    char cls[200];
    if (!base) {
        snprintf(cls, sizeof cls, "%zu%.180s", strlen(c), c);
        base = cls;
    }
    code[0] = '\0';
    for (int i = 0; i < stars; i++)
        snprintf(code + strlen(code), code_size - strlen(code), "P");
    if (is_const && stars)
        snprintf(code + strlen(code), code_size - strlen(code), "K");
    snprintf(code + strlen(code), code_size - strlen(code), "%s", base);
    if (stars) {
        *size = 8;
        *kind = TK_PARAM_POINTER;
    }
}

/* Calls fn for each parameter of a definition. */
typedef void (*param_fn)(void *user, const char *p, size_t n);

static void each_param(const stub_def *d, param_fn fn, void *user)
{
    const char *p = d->params, *end = d->params + d->params_len;
    while (p < end && (*p == ' ' || *p == '\n'))
        p++;
    if (p == end || (end - p == 4 && strncmp(p, "void", 4) == 0))
        return;
    while (p < end) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *stop = comma ? comma : end;
        fn(user, p, (size_t)(stop - p));
        p = comma ? comma + 1 : end;
    }
}

static void mangle_param(void *user, const char *p, size_t n)
{
    char *sym = user, code[256];
    unsigned size;
    int kind;
    stub_param(p, n, code, sizeof code, &size, &kind);
    size_t used = strlen(sym);
    snprintf(sym + used, 512 - used, "%s", code);
}

/* The next kernel definition in text from *pos; 0 when none is left. */
static int stub_next_def(const char *text, const char **pos, stub_def *d)
{
    for (const char *g = strstr(*pos, "__global__"); g; g = strstr(g + 10, "__global__")) {
        const char *open = strchr(g, '(');
        const char *semi = strpbrk(g, ";{");
        if (!open || (semi && semi < open))
            continue;
        const char *e = open;
        while (e > g && e[-1] == ' ')
            e--;
        const char *b = e;
        while (b > g && is_ident(b[-1]))
            b--;
        const char *close = strchr(open, ')');
        if (b == e || !close || (size_t)(e - b) >= sizeof d->name)
            continue;
        memset(d, 0, sizeof *d);
        snprintf(d->name, sizeof d->name, "%.*s", (int)(e - b), b);
        d->params = open + 1;
        d->params_len = (size_t)(close - open - 1);
        const char *line = g;
        while (line > text && line[-1] != '\n')
            line--;
        const char *ex = strstr(line, "extern \"C\"");
        d->extern_c = ex && ex < g;
        if (d->extern_c) {
            snprintf(d->symbol, sizeof d->symbol, "%s", d->name);
        } else {
            snprintf(d->symbol, sizeof d->symbol, "_Z%zu%s", strlen(d->name), d->name);
            size_t before = strlen(d->symbol);
            each_param(d, mangle_param, d->symbol);
            if (strlen(d->symbol) == before)
                snprintf(d->symbol + before, sizeof d->symbol - before, "v");
        }
        *pos = close;
        return 1;
    }
    return 0;
}

/* Resolves a plain name over the source and headers: *lowered (malloc'd)
 * for one definition, else the flags. */
static tk_status stub_probe(const char *source, const tk__compile_extra *extra, tk__code *out,
                            char **lowered)
{
    int found = 0;
    stub_def d, hit;
    for (size_t i = 0; i <= extra->n_headers; i++) {
        const char *text = i == 0 ? source : extra->header_texts[i - 1];
        for (const char *pos = text; stub_next_def(text, &pos, &d);)
            if (strcmp(d.name, extra->name_expr) == 0) {
                hit = d;
                found++;
            }
    }
    if (found != 1) {
        out->name_unresolved = 1;
        out->name_overloaded = found > 1;
        return TK_OK;
    }
    *lowered = strdup(hit.symbol);
    return *lowered ? TK_OK : TK_OUT_OF_MEMORY;
}

static tk_status stub_compile(const char *target, const char *name, const char *source,
                              const char *const *options, size_t n_options,
                              const tk__compile_extra *extra, tk__code *out, tk__err *err)
{
    __atomic_fetch_add(&g_counters.compiles, 1, __ATOMIC_SEQ_CST);
    int delay = __atomic_load_n(&g_counters.compile_delay_ms, __ATOMIC_SEQ_CST);
    if (delay > 0)
        sleep_ms(delay);
    if (strcmp(target, "stub") != 0)
        return tk__err_set(err, TK_UNSUPPORTED, "the stub compiler does not know target '%s'",
                           target);
    size_t n_headers = extra ? extra->n_headers : 0;
    /* "#error" anywhere (source, then headers) fails with the position. */
    for (size_t i = 0; i <= n_headers; i++) {
        const char *text = i == 0 ? source : extra->header_texts[i - 1];
        const char *file = i == 0 ? name : extra->header_names[i - 1];
        const char *bad = strstr(text, "#error");
        if (!bad)
            continue;
        const char *eol = strchr(bad, '\n');
        int len = eol ? (int)(eol - bad) : (int)strlen(bad);
        char pos[600];
        where(text, bad, file, pos, sizeof pos);
        char *log = malloc((size_t)len + 64 + strlen(pos));
        if (log)
            sprintf(log, "%s: error: %.*s\n1 error detected.\n", pos, len, bad);
        out->log = log;
        return tk__err_set(err, TK_COMPILE_FAILED, "stub: compiling %s failed", name);
    }
    char *lowered = NULL;
    if (extra && extra->name_expr && extra->name_probe) {
        if (stub_probe(source, extra, out, &lowered) != TK_OK)
            return tk__err_set(err, TK_OUT_OF_MEMORY, "stub: out of memory");
    } else if (extra && extra->name_expr) {
        char base[256];
        expr_base(extra->name_expr, base, sizeof base);
        int present = base[0] && strstr(source, base) != NULL;
        for (size_t i = 0; i < n_headers && !present; i++)
            present = strstr(extra->header_texts[i], base) != NULL;
        if (!present)
            return tk__err_set(err, TK_NOT_FOUND, "stub: no function %s for name expression %s",
                               base, extra->name_expr);
        lowered = stub_lower(extra->name_expr);
        if (!lowered)
            return tk__err_set(err, TK_OUT_OF_MEMORY, "stub: out of memory");
    }
    /* Code object: magic, target, source, each header, the lowered name. */
    size_t tlen = strlen(target), size = STUB_MAGIC_LEN + tlen + 1 + strlen(source);
    for (size_t i = 0; i < n_headers; i++)
        size += strlen(extra->header_names[i]) + strlen(extra->header_texts[i]) + 16;
    if (lowered)
        size += strlen(lowered) + 16;
    char *code = malloc(size + 1);
    if (!code) {
        free(lowered);
        return tk__err_set(err, TK_OUT_OF_MEMORY, "stub: out of memory");
    }
    memcpy(code, STUB_MAGIC, STUB_MAGIC_LEN);
    memcpy(code + STUB_MAGIC_LEN, target, tlen + 1);
    char *p = code + STUB_MAGIC_LEN + tlen + 1;
    p += sprintf(p, "%s", source);
    for (size_t i = 0; i < n_headers; i++)
        p += sprintf(p, "\n/* %s */\n%s", extra->header_names[i], extra->header_texts[i]);
    if (lowered)
        p += sprintf(p, "\n/* %s */\n", lowered);
    out->data = code;
    out->size = (size_t)(p - code);
    out->log = NULL;
    out->lowered = lowered;
    return TK_OK;
}

static const char *const *stub_default_options(void)
{
    static const char *const opts[] = {"-stub-default", NULL};
    return opts;
}

static const char *stub_prelude(void)
{
    return "/* stub prelude */\n";
}

static const char *stub_text(const void *code, size_t size);

static tk_status stub_inspect(const void *code, size_t size, const char *entry,
                              tk_resource_usage *out, tk__err *err)
{
    if (size < STUB_MAGIC_LEN || memcmp(code, STUB_MAGIC, STUB_MAGIC_LEN) != 0)
        return tk__err_set(err, TK_CORRUPT, "stub: not a stub code object");
    /* As module_function: the symbol must appear in the packaged text. */
    const char *text = stub_text(code, size);
    size_t tlen = text ? size - (size_t)(text - (const char *)code) : 0;
    char *copy = text ? malloc(tlen + 1) : NULL;
    if (copy) {
        memcpy(copy, text, tlen);
        copy[tlen] = '\0';
        int present = strstr(copy, entry) != NULL;
        free(copy);
        if (!present)
            return tk__err_set(err, TK_NOT_FOUND, "stub: no symbol %s", entry);
    }
    tk_resource_usage r = {.registers = 16,
                           .sgprs = -1,
                           .agprs = -1,
                           .shared_bytes = 0,
                           .local_bytes = 0,
                           .spill_count = 0,
                           .wavefront_size = 32,
                           .kernarg_bytes = -1,
                           .max_threads = 1024};
    *out = r;
    return TK_OK;
}

/* The packaged text of a stub code object (after magic and target). */
static const char *stub_text(const void *code, size_t size)
{
    const char *c = code;
    if (size < STUB_MAGIC_LEN + 1 || memcmp(c, STUB_MAGIC, STUB_MAGIC_LEN) != 0)
        return NULL;
    const char *target = c + STUB_MAGIC_LEN;
    size_t tlen = strnlen(target, size - STUB_MAGIC_LEN);
    if (STUB_MAGIC_LEN + tlen + 1 > size)
        return NULL;
    return target + tlen + 1;
}

typedef struct layout {
    tk__param *p;
    size_t n;
    uint32_t offset;
} layout;

static void layout_param(void *user, const char *p, size_t n)
{
    layout *l = user;
    char code[256];
    unsigned size;
    int kind;
    stub_param(p, n, code, sizeof code, &size, &kind);
    uint32_t align = size >= 8 ? 8 : size ? size : 1;
    l->offset = (l->offset + align - 1) / align * align;
    if (l->p) {
        l->p[l->n].offset = l->offset;
        l->p[l->n].size = size;
        l->p[l->n].kind = kind;
    }
    l->n++;
    l->offset += size;
}

/* Parameters from the definition's signature (a struct by value: size 0,
 * the stub does not lay out types). The code object is NUL-terminated in
 * practice (the engine's copy is); a bounded copy keeps that true here. */
static tk_status stub_kernel_params(const void *code, size_t size, const char *symbol,
                                    tk__param **out, size_t *n, tk__err *err)
{
    const char *text = stub_text(code, size);
    if (!text)
        return tk__err_set(err, TK_CORRUPT, "stub: not a stub code object");
    size_t tlen = size - (size_t)(text - (const char *)code);
    char *copy = malloc(tlen + 1);
    if (!copy)
        return tk__err_set(err, TK_OUT_OF_MEMORY, "stub: out of memory");
    memcpy(copy, text, tlen);
    copy[tlen] = '\0';
    stub_def d;
    tk_status st = tk__err_set(err, TK_NOT_FOUND, "stub: no kernel %s", symbol);
    for (const char *pos = copy; stub_next_def(copy, &pos, &d);) {
        if (strcmp(d.symbol, symbol) != 0)
            continue;
        layout l = {NULL, 0, 0};
        each_param(&d, layout_param, &l);
        size_t count = l.n;
        l.p = count ? calloc(count, sizeof *l.p) : NULL;
        if (count && !l.p) {
            st = tk__err_set(err, TK_OUT_OF_MEMORY, "stub: out of memory");
            break;
        }
        l.n = 0;
        l.offset = 0;
        each_param(&d, layout_param, &l);
        *out = l.p;
        *n = count;
        st = TK_OK;
        break;
    }
    free(copy);
    return st;
}

static tk_status stub_list_kernels(const void *code, size_t size, char **out, tk__err *err)
{
    const char *text = stub_text(code, size);
    if (!text)
        return tk__err_set(err, TK_CORRUPT, "stub: not a stub code object");
    size_t tlen = size - (size_t)(text - (const char *)code);
    char *copy = malloc(tlen + 1);
    char *list = malloc(tlen + 2);
    if (!copy || !list) {
        free(copy);
        free(list);
        return tk__err_set(err, TK_OUT_OF_MEMORY, "stub: out of memory");
    }
    memcpy(copy, text, tlen);
    copy[tlen] = '\0';
    list[0] = '\0';
    size_t used = 0;
    stub_def d;
    for (const char *pos = copy; stub_next_def(copy, &pos, &d);) {
        size_t k = strlen(d.symbol);
        if (used + k + 2 > tlen + 2)
            break;
        memcpy(list + used, d.symbol, k);
        used += k;
        list[used++] = '\n';
        list[used] = '\0';
    }
    free(copy);
    *out = list;
    return TK_OK;
}

static tk_status stub_module_load(void *dev_handle, const void *code, size_t size, void **module,
                                  tk__err *err)
{
    __atomic_fetch_add(&g_counters.loads, 1, __ATOMIC_SEQ_CST);
    int left = __atomic_load_n(&g_counters.fail_next_loads, __ATOMIC_SEQ_CST);
    while (left > 0 && !__atomic_compare_exchange_n(&g_counters.fail_next_loads, &left, left - 1, 0,
                                                    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
    }
    if (left > 0)
        return tk__err_set(err, TK_LOAD_FAILED, "stub: load refused (forced by the test)");
    if (size < STUB_MAGIC_LEN || memcmp(code, STUB_MAGIC, STUB_MAGIC_LEN) != 0)
        return tk__err_set(err, TK_LOAD_FAILED, "stub: not a stub code object");
    stub_module *m = malloc(sizeof *m);
    char *copy = malloc(size + 1);
    if (!m || !copy) {
        free(m);
        free(copy);
        return tk__err_set(err, TK_OUT_OF_MEMORY, "stub: out of memory");
    }
    memcpy(copy, code, size);
    copy[size] = '\0';
    m->code = copy;
    m->size = size;
    *module = m;
    return TK_OK;
}

static void stub_module_unload(void *dev_handle, void *module)
{
    stub_module *m = module;
    if (m) {
        free(m->code);
        free(m);
    }
}

static tk_status stub_module_function(void *module, const char *entry, void **fn, tk__err *err)
{
    const stub_module *m = module;
    /* The "function" exists when its name appears in the packaged source,
     * which follows the magic and the NUL-terminated target. */
    const char *target = m->code + STUB_MAGIC_LEN;
    size_t tlen = strnlen(target, m->size - STUB_MAGIC_LEN);
    if (STUB_MAGIC_LEN + tlen + 1 > m->size || !strstr(target + tlen + 1, entry))
        return tk__err_set(err, TK_NOT_FOUND, "stub: no entry point '%s' in the code object",
                           entry);
    *fn = module;
    return TK_OK;
}

static tk_status stub_launch(void *fn, const unsigned grid[3], const unsigned block[3],
                             unsigned shared_bytes, void *stream, void **args, tk__err *err)
{
    if (!fn)
        return tk__err_set(err, TK_LAUNCH_FAILED, "stub: no function");
    __atomic_fetch_add(&g_counters.launches, 1, __ATOMIC_RELAXED);
    return TK_OK;
}

static tk_status stub_mem_alloc(size_t bytes, void **out, tk__err *err)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p)
        return tk__err_set(err, TK_OUT_OF_MEMORY, "stub: cannot allocate %zu bytes", bytes);
    *out = p;
    return TK_OK;
}

static tk_status stub_mem_free(void *ptr, tk__err *err)
{
    free(ptr);
    return TK_OK;
}

static tk_status stub_mem_copy(void *dst, const void *src, size_t bytes, tk__err *err)
{
    if (bytes)
        memmove(dst, src, bytes);
    return TK_OK;
}

static tk_status stub_mem_set(void *dst, unsigned char byte, size_t bytes, tk__err *err)
{
    if (bytes)
        memset(dst, byte, bytes);
    return TK_OK;
}

static tk_status stub_stream_sync(void *stream, tk__err *err)
{
    return TK_OK;
}

static tk_status stub_event_create(void **ev, tk__err *err)
{
    struct timespec *t = calloc(1, sizeof *t);
    if (!t)
        return tk__err_set(err, TK_OUT_OF_MEMORY, "stub: out of memory");
    *ev = t;
    return TK_OK;
}

static void stub_event_destroy(void *ev)
{
    free(ev);
}

static tk_status stub_event_record(void *ev, void *stream, tk__err *err)
{
    clock_gettime(CLOCK_MONOTONIC, (struct timespec *)ev);
    return TK_OK;
}

static tk_status stub_event_elapsed(void *start, void *stop, float *ms, tk__err *err)
{
    const struct timespec *a = start, *b = stop;
    *ms = (float)((double)(b->tv_sec - a->tv_sec) * 1e3 + (double)(b->tv_nsec - a->tv_nsec) / 1e6);
    return TK_OK;
}

static const tk__backend g_stub = {
    .name = "stub",
    .kind = TK_BACKEND_STUB,
    .load = stub_load,
    .describe = stub_describe,
    .compiler_identity = stub_compiler_identity,
    .check_target = stub_check_target,
    .device_count = stub_device_count,
    .device_open = stub_device_open,
    .device_close = stub_device_close,
    .device_bind = stub_device_bind,
    .compile = stub_compile,
    .default_options = stub_default_options,
    .prelude = stub_prelude,
    .inspect = stub_inspect,
    .kernel_params = stub_kernel_params,
    .list_kernels = stub_list_kernels,
    .module_load = stub_module_load,
    .module_unload = stub_module_unload,
    .module_function = stub_module_function,
    .launch = stub_launch,
    .mem_alloc = stub_mem_alloc,
    .mem_free = stub_mem_free,
    .mem_upload = stub_mem_copy,
    .mem_download = stub_mem_copy,
    .mem_set = stub_mem_set,
    .stream_sync = stub_stream_sync,
    .event_create = stub_event_create,
    .event_destroy = stub_event_destroy,
    .event_record = stub_event_record,
    .event_elapsed = stub_event_elapsed,
};

const tk__backend *tk__backend_stub(void)
{
    return &g_stub;
}
