/*
 * Every TOKITAI_JIT_* variable the library reads, with the parser of its
 * value: one table, so that a bad value is handled the same way for every
 * variable (a warning on the log of each context and in `tokitai-jit
 * --info`, the default used), except where a default would be dangerous
 * (the backend: running on another device than the one asked for), which
 * is an error. docs/environment.md is this table in prose.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "jit/jit_internal.h"

extern char **environ;

typedef enum parser { P_WORDS, P_BOOL, P_SIZE, P_MS, P_PATH, P_PATHS, P_URL, P_TEXT } parser;

typedef struct env_var {
    const char *name;
    parser kind;
    const char *words; /* P_WORDS: the accepted values, space-separated */
    int fatal;         /* a bad value is an error, not a warning */
    int own_warning;   /* the layer that reads it logs its own warning: the
                        * context does not add a second one */
} env_var;

static const env_var vars[] = {
    {"TOKITAI_JIT_BACKEND", P_WORDS, "auto cuda hip stub", 1, 0},
    {"TOKITAI_JIT_POLICY", P_WORDS, "stable exact generic", 0, 0},
    {"TOKITAI_JIT_BUILD", P_WORDS, "async sync", 0, 0},
    {"TOKITAI_JIT_TUNE", P_WORDS, "records off auto", 0, 0},
    {"TOKITAI_JIT_LOG", P_WORDS, "0 1 debug info warn error", 0, 0},
    {"TOKITAI_JIT_GEMM_PDL", P_WORDS, "0 1", 0, 0},
    {"TOKITAI_JIT_CACHE_DIR", P_PATH, NULL, 0, 1},
    {"TOKITAI_JIT_CACHE_PATH", P_PATHS, NULL, 0, 1},
    {"TOKITAI_JIT_CACHE_MAX_SIZE", P_SIZE, NULL, 0, 1},
    {"TOKITAI_JIT_CACHE_DISABLE", P_BOOL, NULL, 0, 0},
    {"TOKITAI_JIT_REMOTE", P_URL, NULL, 0, 0},
    {"TOKITAI_JIT_REMOTE_KEY", P_TEXT, NULL, 0, 0},
    {"TOKITAI_JIT_REMOTE_CONNECT_TIMEOUT_MS", P_MS, NULL, 0, 0},
    {"TOKITAI_JIT_REMOTE_IO_TIMEOUT_MS", P_MS, NULL, 0, 0},
    {"TOKITAI_JIT_REMOTE_LEASE_MS", P_MS, NULL, 0, 0},
    {"TOKITAI_JIT_REMOTE_WAIT_MS", P_MS, NULL, 0, 0},
    /* Read by the Python package, not the library: known, not checked. */
    {"TOKITAI_JIT_LIBRARY", P_TEXT, NULL, 0, 0},
};

static int word_in(const char *v, const char *words)
{
    size_t n = strlen(v);
    for (const char *p = words; *p;) {
        size_t w = strcspn(p, " ");
        if (w == n && strncmp(p, v, n) == 0)
            return 1;
        p += w;
        while (*p == ' ')
            p++;
    }
    return 0;
}

static int is_bool(const char *v)
{
    static const char *const ok[] = {"0", "1", "true", "false", "yes", "no", "on", "off"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        if (strcasecmp(v, ok[i]) == 0)
            return 1;
    return 0;
}

/* NULL when value is acceptable, else why not (static or in buf). */
static const char *check(const env_var *e, const char *v, char *buf, size_t size)
{
    switch (e->kind) {
    case P_WORDS:
        if (word_in(v, e->words))
            return NULL;
        snprintf(buf, size, "expected one of: %s", e->words);
        return buf;
    case P_BOOL:
        return is_bool(v) ? NULL : "expected 0 or 1 (or true/false, yes/no, on/off)";
    case P_SIZE: {
        uint64_t x;
        return tk_parse_size(v, &x) == TK_OK ? NULL
                                             : "expected a size such as 500M, 5G or 1048576";
    }
    case P_MS: {
        char *end = NULL;
        unsigned long long x = strtoull(v, &end, 10);
        return isdigit((unsigned char)v[0]) && end && !*end && x >= 1 && x <= 3600000
                   ? NULL
                   : "expected milliseconds, 1 to 3600000";
    }
    case P_PATH:
        return strlen(v) < 4096 ? NULL : "longer than a path can be (4095 bytes)";
    case P_PATHS:
        return NULL; /* each folder is checked, and refused with a reason, by the cache */
    case P_URL: {
        tk_config *cfg = NULL;
        tk_status st = tk_config_create(&cfg);
        if (st == TK_OK)
            st = tk_config_set_remote(cfg, v);
        tk_config_destroy(cfg);
        return st == TK_OK || st == TK_OUT_OF_MEMORY
                   ? NULL
                   : "expected redis://host[:port][/db] or unix:///path";
    }
    case P_TEXT:
        return NULL;
    }
    return NULL;
}

unsigned tk_env_check(tk_env_problem_fn fn, void *user)
{
    unsigned n = 0;
    char buf[256];
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i].name);
        if (!v || !*v)
            continue; /* unset and empty alike: the default */
        const char *why = check(&vars[i], v, buf, sizeof buf);
        if (why) {
            n++;
            if (fn)
                fn(user, vars[i].name, v, why, vars[i].fatal);
        }
    }
    /* A name the library does not read is most likely a typo of one it does. */
    for (char **e = environ; e && *e; e++) {
        if (strncmp(*e, "TOKITAI_JIT_", 12) != 0)
            continue;
        size_t len = strcspn(*e, "=");
        int known = 0;
        for (size_t i = 0; i < sizeof vars / sizeof vars[0] && !known; i++)
            known = strlen(vars[i].name) == len && strncmp(vars[i].name, *e, len) == 0;
        if (!known) {
            char name[128];
            snprintf(name, sizeof name, "%.*s", (int)(len < 127 ? len : 127), *e);
            n++;
            if (fn)
                fn(user, name, (*e)[len] ? *e + len + 1 : "",
                   "not a variable tokitai-jit reads (misspelt?)", 0);
        }
    }
    return n;
}

static int own_warning(const char *name)
{
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (strcmp(vars[i].name, name) == 0)
            return vars[i].own_warning;
    return 0;
}

static void log_problem(void *user, const char *name, const char *value, const char *why,
                        int fatal)
{
    /* Fatal ones fail the context creation with their own message; some
     * are warned about by the layer that reads them (the cache). */
    if (!fatal && !own_warning(name))
        tk__log(user, TK_LOG_WARN, "environment: %s=%.200s ignored: %s; using the default", name,
                value, why);
}

void tk__env_log_problems(tk_context *ctx)
{
    tk_env_check(log_problem, ctx);
}
