/* Helpers shared by the tokitai-jit command-line suites. */
#ifndef TK_TEST_CLI_COMMON_H
#define TK_TEST_CLI_COMMON_H

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tk_test.h"
#include "tokitai/ops.h"
#include "tokitai/tokitai.h"

/* Exit codes documented in --help and README.md. */
enum {
    CLI_OK = 0,
    CLI_FAIL = 1,
    CLI_USAGE = 2,
    CLI_NO_DEVICE = 3,
    CLI_UNAVAILABLE = 4,
    CLI_NOT_KEPT = 5
};

/* Runs tokitai-jit with the arguments that follow (NULL-terminated); captures
 * stdout and stderr (malloc'd, freed by the caller) and returns the exit code. */
static inline int cli_run(char **out, char **err, ...)
{
    char *argv[64];
    int n = 0;
    argv[n++] = (char *)tk_test_cli();
    va_list ap;
    va_start(ap, err);
    for (const char *a = va_arg(ap, const char *); a && n < 63; a = va_arg(ap, const char *))
        argv[n++] = (char *)a;
    va_end(ap);
    argv[n] = NULL;
    char *o = NULL, *e = NULL;
    int rc = tk_test_run(argv, &o, &e);
    ck_assert_msg(rc >= 0, "could not run %s", argv[0]);
    if (out)
        *out = o;
    else
        free(o);
    if (err)
        *err = e;
    else
        free(e);
    return rc;
}

static inline int count_lines(const char *s)
{
    int n = 0;
    for (; s && *s; s++)
        n += *s == '\n';
    return n;
}

/* The number written just before `what` in out ("12 compiled" -> 12), or
 * -1 when what is absent. */
static inline long count_before(const char *out, const char *what)
{
    const char *p = strstr(out, what);
    if (!p)
        return -1;
    while (p > out && p[-1] == ' ')
        p--;
    while (p > out && p[-1] >= '0' && p[-1] <= '9')
        p--;
    return strtol(p, NULL, 10);
}

/* The distinct kernels a --precompile summary says it compiled ("12 kernels
 * compiled,"; "nothing to compile": 0), or -1 without a summary. */
static inline long kernels_compiled(const char *out)
{
    long n = count_before(out, " kernels compiled,");
    if (n < 0)
        n = count_before(out, " kernel compiled,");
    if (n < 0 && strstr(out, "nothing to compile"))
        n = 0;
    return n;
}

/* The distinct kernels it found already cached, or -1 without a summary. */
static inline long kernels_cached(const char *out)
{
    long n = count_before(out, " already cached,");
    if (n < 0) /* nothing to compile: "N kernels, all already cached in" */
        n = count_before(out, " kernels, all already cached");
    if (n < 0)
        n = count_before(out, " kernel, all already cached");
    return n;
}

static inline int count_substr(const char *s, const char *needle)
{
    int n = 0;
    size_t len = strlen(needle);
    for (const char *p = s; p && (p = strstr(p, needle)) != NULL; p += len)
        n++;
    return n;
}

/* --------------------------------------------------- a strict JSON checker */

typedef struct json_cur {
    const char *p;
    int depth;
} json_cur;

static inline void json_ws(json_cur *c)
{
    while (*c->p == ' ' || *c->p == '\n' || *c->p == '\t' || *c->p == '\r')
        c->p++;
}

static inline int json_value(json_cur *c);

static inline int json_string(json_cur *c)
{
    if (*c->p != '"')
        return 0;
    c->p++;
    while (*c->p != '"') {
        unsigned char ch = (unsigned char)*c->p;
        if (ch == 0 || ch < 0x20)
            return 0;
        if (ch == '\\') {
            c->p++;
            if (*c->p == 'u') {
                for (int i = 1; i <= 4; i++)
                    if (!isxdigit((unsigned char)c->p[i]))
                        return 0;
                c->p += 5;
                continue;
            }
            if (!strchr("\"\\/bfnrt", *c->p) || !*c->p)
                return 0;
        }
        c->p++;
    }
    c->p++;
    return 1;
}

static inline int json_number(json_cur *c)
{
    const char *s = c->p;
    if (*c->p == '-')
        c->p++;
    if (!isdigit((unsigned char)*c->p))
        return 0;
    if (*c->p == '0' && isdigit((unsigned char)c->p[1]))
        return 0;
    while (isdigit((unsigned char)*c->p))
        c->p++;
    if (*c->p == '.') {
        c->p++;
        if (!isdigit((unsigned char)*c->p))
            return 0;
        while (isdigit((unsigned char)*c->p))
            c->p++;
    }
    if (*c->p == 'e' || *c->p == 'E') {
        c->p++;
        if (*c->p == '+' || *c->p == '-')
            c->p++;
        if (!isdigit((unsigned char)*c->p))
            return 0;
        while (isdigit((unsigned char)*c->p))
            c->p++;
    }
    return c->p > s;
}

static inline int json_value(json_cur *c)
{
    if (++c->depth > 64)
        return 0;
    json_ws(c);
    int ok = 0;
    if (*c->p == '{') {
        c->p++;
        json_ws(c);
        if (*c->p == '}') {
            c->p++;
            ok = 1;
        } else {
            for (;;) {
                json_ws(c);
                if (!json_string(c))
                    break;
                json_ws(c);
                if (*c->p++ != ':')
                    break;
                if (!json_value(c))
                    break;
                json_ws(c);
                if (*c->p == ',') {
                    c->p++;
                    continue;
                }
                if (*c->p == '}') {
                    c->p++;
                    ok = 1;
                }
                break;
            }
        }
    } else if (*c->p == '[') {
        c->p++;
        json_ws(c);
        if (*c->p == ']') {
            c->p++;
            ok = 1;
        } else {
            for (;;) {
                if (!json_value(c))
                    break;
                json_ws(c);
                if (*c->p == ',') {
                    c->p++;
                    continue;
                }
                if (*c->p == ']') {
                    c->p++;
                    ok = 1;
                }
                break;
            }
        }
    } else if (*c->p == '"') {
        ok = json_string(c);
    } else if (strncmp(c->p, "true", 4) == 0 || strncmp(c->p, "null", 4) == 0) {
        c->p += 4;
        ok = 1;
    } else if (strncmp(c->p, "false", 5) == 0) {
        c->p += 5;
        ok = 1;
    } else {
        ok = json_number(c);
    }
    c->depth--;
    return ok;
}

/* 1 when text is exactly one valid JSON document (plus white space). */
static inline int json_valid(const char *text)
{
    json_cur c = {text, 0};
    if (!json_value(&c))
        return 0;
    json_ws(&c);
    return *c.p == 0;
}

/* ------------------------------------------------------ cache inspection */

typedef struct key_set {
    char keys[512][33];
    char desc[512][256]; /* kernel|arch|backend|compiler|options|payload size */
    int n;
} key_set;

static inline int key_set_visit(void *user, const tk_cache_entry_info *info)
{
    key_set *s = user;
    if (s->n < 512) {
        snprintf(s->keys[s->n], 33, "%s", info->key_hex);
        snprintf(s->desc[s->n], 256, "%s|%s|%s|%s|%s|%llu", info->kernel, info->arch, info->backend,
                 info->compiler, info->options, (unsigned long long)info->payload_size);
        s->n++;
    }
    return 0;
}

static inline int key_set_cmp(const void *a, const void *b)
{
    return strcmp((const char *)a, (const char *)b);
}

/* Every entry of the cache at root, through the public API, sorted by key. */
static inline key_set *cache_keys(const char *root)
{
    key_set *s = calloc(1, sizeof *s);
    ck_assert_ptr_nonnull(s);
    tk_config *cfg = NULL;
    tk_assert_status(tk_config_create(&cfg), TK_OK);
    tk_assert_status(tk_config_set_cache_dir(cfg, root), TK_OK);
    tk_cache *cache = NULL;
    tk_assert_status(tk_cache_open(cfg, &cache), TK_OK);
    tk_assert_status(tk_cache_list(cache, key_set_visit, s), TK_OK);
    tk_cache_close(cache);
    tk_config_destroy(cfg);
    /* Sort keys and descriptions together: sort an index. */
    for (int i = 1; i < s->n; i++) {
        for (int j = i; j > 0 && strcmp(s->keys[j - 1], s->keys[j]) > 0; j--) {
            char k[33], d[256];
            memcpy(k, s->keys[j], 33), memcpy(d, s->desc[j], 256);
            memcpy(s->keys[j], s->keys[j - 1], 33), memcpy(s->desc[j], s->desc[j - 1], 256);
            memcpy(s->keys[j - 1], k, 33), memcpy(s->desc[j - 1], d, 256);
        }
    }
    return s;
}

/* 1 when an offline context for target can be made here (its compiler is
 * installed and knows the target); else prints why and returns 0. */
static inline int target_available(const char *target, tk_backend_kind kind)
{
    tk_config *cfg = NULL;
    tk_assert_status(tk_config_create(&cfg), TK_OK);
    tk_assert_status(tk_config_set_backend(cfg, kind), TK_OK);
    tk_assert_status(tk_config_set_target(cfg, target), TK_OK);
    tk_assert_status(tk_config_set_cache_disabled(cfg, 1), TK_OK);
    tk_context *ctx = NULL;
    char why[512] = "";
    tk_status st = tk_context_create(cfg, &ctx, why, sizeof why);
    tk_context_destroy(ctx);
    tk_config_destroy(cfg);
    if (st != TK_OK) {
        printf("skipped: target %s unavailable here (%s: %s)\n", target, tk_status_str(st), why);
        fflush(stdout);
        return 0;
    }
    return 1;
}

#endif
