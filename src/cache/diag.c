/* The handle's messages, shared by every part of the cache layer: a
 * warning logged once per category, and the last error of a failing call.
 * They depend on nothing but the handle, so the parts that report through
 * them (the handle, its remote tier, statistics, tools) need not call each
 * other to do so. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cache/cache_internal.h"

void tk__cache_warn_once(tk_cache *cache, enum tk__warn which, const char *fmt, ...)
{
    pthread_mutex_lock(&cache->mu);
    int first = !cache->warned[which];
    cache->warned[which] = 1;
    pthread_mutex_unlock(&cache->mu);
    if (!first || !cache->log)
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    cache->log(cache->log_user, TK_LOG_WARN, msg);
}

tk_status tk__cache_fail(tk_cache *cache, tk_status status, const char *fmt, ...)
{
    char msg[sizeof(cache->last_error)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&cache->mu);
    memcpy(cache->last_error, msg, sizeof(msg));
    pthread_mutex_unlock(&cache->mu);
    return status;
}
