/*
 * Diagnostics of a context: the log (callback, or standard error when
 * TOKITAI_JIT_LOG opts in) and the last error. Every file of the engine
 * reports through here; this file calls none of them, so the engine's
 * includes point one way: context.c -> kernel.c -> builder.c, each -> diag.c.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/env_vars.h"
#include "jit/jit_internal.h"

/* Set by the background builder's worker threads (builder.c) around each
 * build, so that a failure there logs instead of replacing the caller's
 * last error. */
_Thread_local int tk__in_builder;

/* ---------------------------------------------------------------- logging */

int tk__log_env_level(void)
{
    /* The words of TOKITAI_JIT_LOG in order: 0 1 debug info warn error. */
    static const int levels[] = {-1,          TK_LOG_INFO, TK_LOG_DEBUG,
                                 TK_LOG_INFO, TK_LOG_WARN, TK_LOG_ERROR};
    return levels[tk__env_word(TK__ENV_LOG, 0)];
}

static const char *level_name(tk_log_level level)
{
    switch (level) {
    case TK_LOG_DEBUG:
        return "debug";
    case TK_LOG_INFO:
        return "info";
    case TK_LOG_WARN:
        return "warn";
    case TK_LOG_ERROR:
        return "error";
    }
    return "?";
}

static void log_emit(const tk_context *ctx, tk_log_level level, const char *msg)
{
    if (ctx->log) {
        if (level >= ctx->log_level)
            ctx->log(ctx->log_user, level, msg);
    } else if (ctx->env_log_level >= 0 && (int)level >= ctx->env_log_level) {
        /* The one place the library writes to stderr: opted in by TOKITAI_JIT_LOG. */
        fprintf(stderr, "tokitai-jit: %s: %s\n", level_name(level), msg);
    }
}

static int log_wanted(const tk_context *ctx, tk_log_level level)
{
    if (ctx->log)
        return level >= ctx->log_level;
    return ctx->env_log_level >= 0 && (int)level >= ctx->env_log_level;
}

void tk__log(tk_context *ctx, tk_log_level level, const char *fmt, ...)
{
    if (!ctx || !log_wanted(ctx, level))
        return;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    log_emit(ctx, level, msg);
}

void tk__cache_log_adapter(void *user, tk_log_level level, const char *msg)
{
    const tk_context *ctx = user;
    if (log_wanted(ctx, level))
        log_emit(ctx, level, msg);
}

/* ------------------------------------------------------------ last error */

static void set_last_error(tk_context *ctx, char *msg)
{
    pthread_mutex_lock(&ctx->err_mu);
    char *old = ctx->last_error;
    ctx->last_error = msg;
    pthread_mutex_unlock(&ctx->err_mu);
    free(old);
}

static tk_status fail_v(tk_context *ctx, tk_status status, const char *log, const char *fmt,
                        va_list ap)
{
    if (!ctx)
        return status;
    char head[2048];
    vsnprintf(head, sizeof head, fmt, ap);
    if (tk__in_builder) {
        /* A background build belongs to no call: its failure must not
         * replace the message of whatever the caller did last. */
        tk__log(ctx, TK_LOG_WARN, "background build: %s: %s%s%s", tk_status_str(status), head,
                log ? "\n" : "", log ? log : "");
        return status;
    }
    size_t hl = strlen(head), ll = log ? strlen(log) : 0;
    char *msg = malloc(hl + ll + 2);
    if (msg) {
        memcpy(msg, head, hl);
        if (log) {
            msg[hl] = '\n';
            memcpy(msg + hl + 1, log, ll + 1);
        } else {
            msg[hl] = '\0';
        }
        set_last_error(ctx, msg);
    }
    tk__log(ctx, TK_LOG_DEBUG, "%s: %s", tk_status_str(status), head);
    return status;
}

tk_status tk__fail(tk_context *ctx, tk_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tk_status st = fail_v(ctx, status, NULL, fmt, ap);
    va_end(ap);
    return st;
}

tk_status tk__fail_with_log(tk_context *ctx, tk_status status, const char *log, const char *fmt,
                            ...)
{
    va_list ap;
    va_start(ap, fmt);
    tk_status st = fail_v(ctx, status, log, fmt, ap);
    va_end(ap);
    return st;
}

const char *tk_context_last_error(const tk_context *ctx)
{
    if (!ctx)
        return "no context";
    tk_context *c = (tk_context *)ctx; /* the mutex is not part of the value */
    pthread_mutex_lock(&c->err_mu);
    const char *msg = c->last_error;
    pthread_mutex_unlock(&c->err_mu);
    return msg ? msg : "";
}
