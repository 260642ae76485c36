/*
 * The environment's report: every TOKITAI_JIT_* variable set with a value
 * its parser (common/env_vars.h) refuses, and every TOKITAI_JIT_* name that
 * nothing reads. The readers themselves take a refused value as unset;
 * this file says so, on a context's or a cache handle's log and to
 * tk_env_check (tokitai-jit --info), and decides which refused values stop
 * a context.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/remote.h"
#include "common/env_vars.h"
#include "jit/jit_internal.h"

extern char **environ;

/* Why v is refused by e's parser, or NULL. A URL is judged by the remote
 * tier's own parser, the one that reads it. */
static const char *refuse(const tk__env_var *e, const char *v, char *buf, size_t size)
{
    if (e->parser == TK__ENV_P_URL)
        return tk__remote_url_check(v, buf, size) == TK_OK ? NULL : buf;
    return tk__env_refuse(e, v, buf, size);
}

/* Calls fn for each problem; names nothing reads only with unknown set. */
static unsigned walk(tk_env_problem_fn fn, void *user, int unknown)
{
    unsigned n = 0;
    char buf[256];
    const tk__env_var *t = tk__env_table();
    for (int i = 0; i < TK__ENV_COUNT; i++) {
        if (t[i].when == TK__ENV_AT_OUTSIDE)
            continue; /* their readers' business */
        const char *v = tk__env_raw((tk__env_id)i);
        const char *why = v ? refuse(&t[i], v, buf, sizeof buf) : NULL;
        if (why) {
            n++;
            if (fn)
                fn(user, t[i].name, v, why, t[i].on_bad == TK__ENV_ERROR);
        }
    }
    if (!unknown)
        return n;
    /* A name nothing reads is most likely a typo of one that is read. */
    for (char **e = environ; e && *e; e++) {
        if (strncmp(*e, "TOKITAI_JIT_", 12) != 0)
            continue;
        size_t len = strcspn(*e, "=");
        if (tk__env_find(*e, len))
            continue;
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)(len < 127 ? len : 127), *e);
        n++;
        if (fn)
            fn(user, name, (*e)[len] ? *e + len + 1 : "",
               "not a variable tokitai-jit reads (misspelt?)", 0);
    }
    return n;
}

unsigned tk_env_check(tk_env_problem_fn fn, void *user)
{
    return walk(fn, user, 1);
}

typedef struct log_to {
    tk_context *ctx; /* a context's log, else fn */
    tk_log_fn fn;
    void *user;
    tk_log_level level;
} log_to;

static void log_problem(void *user, const char *name, const char *value, const char *why, int fatal)
{
    log_to *l = user;
    const tk__env_var *e = tk__env_find(name, strlen(name));
    /* A fatal value has already stopped what read it, with its own message. */
    if (fatal)
        return;
    if (l->ctx == NULL && e && e->when != TK__ENV_AT_CACHE)
        return; /* a cache handle reads only the cache's variables */
    char msg[700];
    snprintf(msg, sizeof msg, "environment: %s=%.200s ignored: %s; using the default%s%s%s", name,
             value, why, e ? " (" : "", e ? e->fallback : "", e ? ")" : "");
    if (l->ctx)
        tk__log(l->ctx, TK_LOG_WARN, "%s", msg);
    else if (TK_LOG_WARN >= l->level)
        l->fn(l->user, TK_LOG_WARN, msg);
}

void tk__env_log_problems(tk_context *ctx)
{
    log_to l = {ctx, NULL, NULL, TK_LOG_WARN};
    walk(log_problem, &l, 1);
}

void tk__env_log_cache_problems(tk_log_fn fn, void *user, tk_log_level level)
{
    if (!fn)
        return;
    log_to l = {NULL, fn, user, level};
    walk(log_problem, &l, 0);
}

/* TOKITAI_JIT_REMOTE_KEY refused where a remote tier will be opened: the
 * default (no key) would trust every value the server returns. */
tk_status tk__env_remote_key_problem(const tk_config *cfg, char *why, size_t size)
{
    if (cfg && cfg->remote_key_set)
        return TK_OK;
    const char *url = cfg && cfg->remote_url ? cfg->remote_url : tk__env_raw(TK__ENV_REMOTE);
    const char *key = tk__env_raw(TK__ENV_REMOTE_KEY);
    char buf[256];
    const char *bad;
    if (!url || !*url || !key || !tk__remote_built() ||
        !(bad = tk__env_refuse(&tk__env_table()[TK__ENV_REMOTE_KEY], key, buf, sizeof buf)))
        return TK_OK;
    snprintf(why, size,
             "TOKITAI_JIT_REMOTE_KEY (%zu bytes) refused: %s; without the key the remote tier's "
             "values would be trusted unsigned",
             strlen(key), bad);
    return TK_INVALID_ARGUMENT;
}
