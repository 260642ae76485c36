/*
 * The remote tier on Redis (see remote.h for the server layout and the value
 * format): connection with timeouts, circuit breaker, fleet-wide compile
 * lease, HMAC-SHA256 signing, and the tools' list / stats and the sending
 * of one entry for a push (tools.c walks the cache or the bundle).
 *
 * Never worse than no remote: every failure is a miss, counted and logged,
 * never a status the engine returns. A transport failure (refused, timed out,
 * reset) closes the connection and opens the breaker, so a dead or hung
 * server costs one timeout per breaker period, not one per lookup.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#include "cache/cache_internal.h"
#include "cache/remote.h"
#include "common/env_vars.h"
#include "common/out_struct.h"

/* ------------------------------------------------------------- URL syntax */

typedef struct remote_url {
    int is_unix;
    char host[256];
    int port;
    char path[512];
    long db;
    char user[128];
    char password[256];
    int has_password;
    char shown[600]; /* the URL without its password, for messages */
} remote_url;

static tk_status url_fail(char *why, size_t size, const char *msg)
{
    if (why && size)
        snprintf(why, size, "%s", msg);
    return TK_INVALID_ARGUMENT;
}

static int parse_db(const char *s, long *out)
{
    if (!*s)
        return 0;
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < 0 || v > 65535 || s[0] == '-' || s[0] == '+')
        return -1;
    *out = v;
    return 0;
}

static tk_status url_parse(const char *url, remote_url *u, char *why, size_t size)
{
    memset(u, 0, sizeof(*u));
    if (!url || !*url)
        return url_fail(why, size, "empty URL");
    if (strlen(url) >= 500)
        return url_fail(why, size, "URL too long");
    if (strncmp(url, "unix://", 7) == 0) {
        const char *p = url + 7;
        if (p[0] != '/')
            return url_fail(why, size, "unix:// needs an absolute path (unix:///path/to/socket)");
        const char *q = strchr(p, '?');
        size_t n = q ? (size_t)(q - p) : strlen(p);
        if (n >= sizeof(u->path) || n < 2)
            return url_fail(why, size, "bad socket path");
        memcpy(u->path, p, n);
        u->path[n] = 0;
        if (q) {
            if (strncmp(q, "?db=", 4) != 0 || parse_db(q + 4, &u->db) != 0)
                return url_fail(why, size, "unix:// accepts only ?db=N (0-65535)");
        }
        u->is_unix = 1;
        snprintf(u->shown, sizeof(u->shown), "%s", url);
        return TK_OK;
    }
    if (strncmp(url, "rediss://", 9) == 0)
        return url_fail(why, size, "rediss:// (TLS) is not supported; use redis:// or unix://");
    if (strncmp(url, "redis://", 8) != 0)
        return url_fail(why, size, "expected redis://host[:port][/db] or unix:///path");
    const char *p = url + 8;
    const char *at = strrchr(p, '@');
    if (at) {
        const char *colon = memchr(p, ':', (size_t)(at - p));
        size_t un = colon ? (size_t)(colon - p) : (size_t)(at - p);
        if (un >= sizeof(u->user))
            return url_fail(why, size, "user name too long");
        if (!colon && un == 0)
            return url_fail(why, size, "empty credentials before '@'");
        memcpy(u->user, p, un);
        u->user[un] = 0;
        if (colon) {
            size_t pn = (size_t)(at - colon - 1);
            if (pn >= sizeof(u->password))
                return url_fail(why, size, "password too long");
            memcpy(u->password, colon + 1, pn);
            u->password[pn] = 0;
            u->has_password = 1;
        } else {
            /* redis://password@host, as redis-cli -u reads it */
            memcpy(u->password, u->user, un + 1);
            u->user[0] = 0;
            u->has_password = 1;
        }
        p = at + 1;
    }
    const char *host_end;
    if (*p == '[') {
        host_end = strchr(p, ']');
        if (!host_end)
            return url_fail(why, size, "unterminated [IPv6 address]");
        size_t n = (size_t)(host_end - p - 1);
        if (n == 0 || n >= sizeof(u->host))
            return url_fail(why, size, "bad host");
        memcpy(u->host, p + 1, n);
        u->host[n] = 0;
        host_end++;
    } else {
        host_end = p + strcspn(p, ":/");
        size_t n = (size_t)(host_end - p);
        if (n == 0 || n >= sizeof(u->host))
            return url_fail(why, size, "missing host (redis://host:port)");
        memcpy(u->host, p, n);
        u->host[n] = 0;
    }
    u->port = 6379;
    p = host_end;
    if (*p == ':') {
        char *end = NULL;
        errno = 0;
        long port = strtol(p + 1, &end, 10);
        if (errno || end == p + 1 || port < 1 || port > 65535 || (*end && *end != '/'))
            return url_fail(why, size, "bad port (1-65535)");
        u->port = (int)port;
        p = end;
    }
    if (*p == '/') {
        if (parse_db(p + 1, &u->db) != 0)
            return url_fail(why, size, "bad database number after '/' (0-65535)");
    } else if (*p) {
        return url_fail(why, size, "unexpected text after the host");
    }
    snprintf(u->shown, sizeof(u->shown), "redis://%s%s%s%s:%d/%ld", u->user,
             u->has_password ? ":***" : "", u->has_password || u->user[0] ? "@" : "", u->host,
             u->port, u->db);
    return TK_OK;
}

tk_status tk__remote_url_check(const char *url, char *why, size_t size)
{
    remote_url u;
    return url_parse(url, &u, why, size);
}

__attribute__((unused)) static void put_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

__attribute__((unused)) static uint64_t get_le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

#ifndef TK_HAVE_REMOTE

/* ----------------------------------------------- built without the remote */

int tk__remote_built(void)
{
    return 0;
}

tk_status tk__cache_remote_open(tk_cache *cache, const tk__remote_opts *opts)
{
    const char *url = opts && opts->url ? opts->url : tk__env_get(TK__ENV_REMOTE);
    if (url && *url && cache->log) {
        char msg[700];
        snprintf(msg, sizeof(msg),
                 "remote cache %.500s unavailable: this build of tokitai-jit has no remote tier "
                 "(built without hiredis or libcrypto); continuing without it",
                 url);
        cache->log(cache->log_user, TK_LOG_WARN, msg);
    }
    return TK_OK;
}

void tk__cache_remote_close(tk_cache *cache)
{
}

tk_status tk__cache_remote_get(tk_cache *cache, const tk__key *key, tk__entry *out,
                               uint8_t **entry, size_t *len)
{
    return TK_NOT_FOUND;
}

void *tk__cache_remote_lease(tk_cache *cache, const tk__key *key)
{
    return NULL;
}

void tk__cache_remote_release(void *lease)
{
}

void tk__cache_remote_publish(tk_cache *cache, const tk__key *key, const uint8_t *entry, size_t len)
{
}

void tk__cache_remote_counters(const tk_cache *cache, tk__remote_counters *out)
{
    memset(out, 0, sizeof(*out));
}

void tk__cache_remote_reset_counters(tk_cache *cache)
{
}

static tk_status unavailable(tk_cache *cache)
{
    return tk__cache_fail(cache, TK_UNSUPPORTED,
                          "remote tier unavailable: tokitai-jit was built without hiredis "
                          "(libhiredis-dev) or libcrypto (libssl-dev)");
}

tk_status tk_cache_remote_describe(tk_cache *cache, char *buf, size_t size)
{
    if (!cache || !buf || !size)
        return TK_INVALID_ARGUMENT;
    snprintf(buf, size, "remote: unavailable (built without hiredis or libcrypto)\n");
    return unavailable(cache);
}

tk_status tk_cache_remote_list(tk_cache *cache, tk_cache_visit_fn visit, void *user)
{
    if (!cache || !visit)
        return TK_INVALID_ARGUMENT;
    return unavailable(cache);
}

tk_status tk_cache_remote_get_stats(tk_cache *cache, tk_cache_stats *out)
{
    if (!cache || tk__out_bad(out))
        return TK_INVALID_ARGUMENT;
    return unavailable(cache);
}

tk_status tk__cache_remote_tool_begin(tk_cache *cache)
{
    return unavailable(cache);
}

tk_status tk__cache_remote_push_entry(tk_cache *cache, const uint8_t *entry, size_t len,
                                      const struct tk__entry_view *v, tk_cache_push_counts *n,
                                      const char **why)
{
    return unavailable(cache);
}

tk_status tk_cache_remote_list_counted(tk_cache *cache, tk_cache_visit_fn visit, void *user,
                                       uint64_t *n_skipped)
{
    if (!cache || !visit)
        return TK_INVALID_ARGUMENT;
    return unavailable(cache);
}

#else /* TK_HAVE_REMOTE */

#include <pthread.h>
#include <signal.h>

#include <hiredis/hiredis.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/sha.h>

int tk__remote_built(void)
{
    return 1;
}

struct tk__remote {
    tk_cache *cache; /* for its log */
    remote_url url;
    uint8_t *secret;
    size_t secret_len;
    unsigned connect_ms, io_ms, lease_ms, wait_ms;
    uint64_t max_value;
    char prefix[64];

    pthread_mutex_t mu; /* guards the connection and the breaker */
    redisContext *c;
    pid_t pid; /* process that opened c: a forked child reconnects */
    unsigned failures;
    int64_t open_until_ns;
    int warned_down, warned_bad;
    char problem[256];     /* what the server or the transport said last (r->mu) */
    struct lease *orphans; /* leases whose release failed, retried later (r->mu) */

    uint64_t hits, misses, errors, rejected, publishes; /* __atomic */
};

typedef struct tk__remote remote;

static void release_orphans(remote *r, int reset_breaker);

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static void bump(uint64_t *field)
{
    __atomic_fetch_add(field, 1, __ATOMIC_RELAXED);
}

static void rlog(remote *r, tk_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void rlog(remote *r, tk_log_level level, const char *fmt, ...)
{
    if (!r->cache->log)
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    r->cache->log(r->cache->log_user, level, msg);
}

/* First time at WARN, later at INFO: a flapping server must not flood. */
static tk_log_level once(int *flag)
{
    int first = !__atomic_exchange_n(flag, 1, __ATOMIC_RELAXED);
    return first ? TK_LOG_WARN : TK_LOG_INFO;
}

static void name_of(const remote *r, const char *kind, const char *hex, char *buf, size_t size)
{
    snprintf(buf, size, "%s%s:%s", r->prefix, kind, hex);
}

/* ------------------------------------------------------- SIGPIPE guard */

/* hiredis writes with write(2): a peer that closed the socket would raise
 * SIGPIPE and kill the caller. Block it around each exchange and swallow one
 * raised meanwhile (the approach of libcurl and OpenSSL's s_client). */
typedef struct pipe_guard {
    sigset_t old;
    int was_pending;
} pipe_guard;

static void pipe_block(pipe_guard *g)
{
    sigset_t set, pending;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    sigemptyset(&pending);
    sigpending(&pending);
    g->was_pending = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &set, &g->old);
}

static void pipe_unblock(pipe_guard *g)
{
    if (!g->was_pending) {
        sigset_t set, pending;
        sigemptyset(&set);
        sigaddset(&set, SIGPIPE);
        sigemptyset(&pending);
        if (sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1) {
            struct timespec zero = {0, 0};
            sigtimedwait(&set, NULL, &zero);
        }
    }
    pthread_sigmask(SIG_SETMASK, &g->old, NULL);
}

/* ----------------------------------------------------- connection, breaker */

static struct timeval tv_of(unsigned ms)
{
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    return tv;
}

/* Closes the connection and opens the breaker (r->mu held). */
static void transport_failure(remote *r, const char *what, const char *why)
{
    if (r->c) {
        redisFree(r->c);
        r->c = NULL;
    }
    r->failures++;
    unsigned shift = r->failures - 1 < 6 ? r->failures - 1 : 6;
    unsigned ms = TK__REMOTE_BREAKER_BASE_MS << shift;
    if (ms > TK__REMOTE_BREAKER_MAX_MS)
        ms = TK__REMOTE_BREAKER_MAX_MS;
    r->open_until_ns = now_ns() + (int64_t)ms * 1000000LL;
    snprintf(r->problem, sizeof(r->problem), "%s failed: %s", what, why);
    bump(&r->errors);
    rlog(r, once(&r->warned_down), "remote cache %s: %s failed (%s); not asking it for %u ms",
         r->url.shown, what, why, ms);
}

static redisReply *exchange(remote *r, int argc, const char **argv, const size_t *lens)
{
    pipe_guard g;
    pipe_block(&g);
    redisReply *rep = redisCommandArgv(r->c, argc, argv, lens);
    pipe_unblock(&g);
    return rep;
}

/* 1 when connected (r->mu held). */
static int ensure_connected(remote *r)
{
    if (r->c && r->pid != getpid()) {
        /* Inherited across fork: the parent owns that stream. Closing our
         * copy of the descriptor sends nothing. */
        redisFree(r->c);
        r->c = NULL;
    }
    if (r->c)
        return 1;
    if (r->open_until_ns && now_ns() < r->open_until_ns)
        return 0;
    struct timeval tv = tv_of(r->connect_ms);
    redisContext *c = r->url.is_unix ? redisConnectUnixWithTimeout(r->url.path, tv)
                                     : redisConnectWithTimeout(r->url.host, r->url.port, tv);
    if (!c || c->err) {
        char why[160];
        snprintf(why, sizeof(why), "%s", c ? c->errstr : "out of memory");
        if (c)
            redisFree(c);
        transport_failure(r, "connect", why);
        return 0;
    }
    if (redisSetTimeout(c, tv_of(r->io_ms)) != REDIS_OK) {
        redisFree(c);
        transport_failure(r, "connect", "cannot set the I/O timeout");
        return 0;
    }
    r->c = c;
    r->pid = getpid();
    const char *argv[3];
    size_t lens[3];
    if (r->url.has_password) {
        int n = 0;
        argv[n] = "AUTH";
        lens[n++] = 4;
        if (r->url.user[0]) {
            argv[n] = r->url.user;
            lens[n++] = strlen(r->url.user);
        }
        argv[n] = r->url.password;
        lens[n++] = strlen(r->url.password);
        redisReply *rep = exchange(r, n, argv, lens);
        if (!rep || rep->type == REDIS_REPLY_ERROR) {
            char why[160];
            snprintf(why, sizeof(why), "%s", rep ? rep->str : r->c->errstr);
            if (rep)
                freeReplyObject(rep);
            transport_failure(r, "AUTH", why);
            return 0;
        }
        freeReplyObject(rep);
    }
    if (r->url.db) {
        char db[16];
        snprintf(db, sizeof(db), "%ld", r->url.db);
        argv[0] = "SELECT";
        lens[0] = 6;
        argv[1] = db;
        lens[1] = strlen(db);
        redisReply *rep = exchange(r, 2, argv, lens);
        if (!rep || rep->type == REDIS_REPLY_ERROR) {
            char why[160];
            snprintf(why, sizeof(why), "%s", rep ? rep->str : r->c->errstr);
            if (rep)
                freeReplyObject(rep);
            transport_failure(r, "SELECT", why);
            return 0;
        }
        freeReplyObject(rep);
    }
    return 1;
}

/* One command (r->mu held). NULL on a transport failure (counted, logged,
 * the breaker opened); else the reply, an error reply included, to free.
 * *sent (may be NULL): 1 once the command was handed to the connection, so
 * that the server may have run it even when no reply came back. */
static redisReply *run_sent_locked(remote *r, int argc, const char **argv, const size_t *lens,
                                   int *sent)
{
    if (sent)
        *sent = 0;
    if (!ensure_connected(r))
        return NULL;
    if (sent)
        *sent = 1;
    redisReply *rep = exchange(r, argc, argv, lens);
    if (!rep) {
        char why[160];
        snprintf(why, sizeof(why), "%s", r->c->errstr[0] ? r->c->errstr : "no reply");
        transport_failure(r, argv[0], why);
        return NULL;
    }
    r->failures = 0;
    r->open_until_ns = 0;
    return rep;
}

static redisReply *run_any_locked(remote *r, int argc, const char **argv, const size_t *lens)
{
    return run_sent_locked(r, argc, argv, lens, NULL);
}

/* An error reply: the server answered (a full server (OOM), a read-only
 * replica, a refused command). Costs this call only. Frees rep. */
static void server_refused(remote *r, const char *cmd, redisReply *rep)
{
    bump(&r->errors);
    snprintf(r->problem, sizeof(r->problem), "%s: %s", cmd, rep->str);
    rlog(r, TK_LOG_INFO, "remote cache %s: %s: %s", r->url.shown, cmd, rep->str);
    freeReplyObject(rep);
}

/* One command (r->mu held). NULL on any failure (counted and logged; a
 * transport failure also opens the breaker); else the reply, to free.
 * *unanswered (may be NULL): 1 when the command was sent and no reply came
 * (a stall, a timeout, a dropped connection), so that the server may have
 * run it or may still run it. */
static redisReply *run_locked(remote *r, int argc, const char **argv, const size_t *lens,
                              int *unanswered)
{
    int sent = 0;
    redisReply *rep = run_sent_locked(r, argc, argv, lens, &sent);
    if (unanswered)
        *unanswered = sent && rep == NULL;
    if (rep && rep->type == REDIS_REPLY_ERROR) {
        server_refused(r, argv[0], rep);
        return NULL;
    }
    return rep;
}

/* run_locked under r->mu. */
static redisReply *run_unanswered(remote *r, int argc, const char **argv, const size_t *lens,
                                  int *unanswered)
{
    pthread_mutex_lock(&r->mu);
    redisReply *rep = run_locked(r, argc, argv, lens, unanswered);
    pthread_mutex_unlock(&r->mu);
    return rep;
}

static redisReply *run(remote *r, int argc, const char **argv, const size_t *lens)
{
    return run_unanswered(r, argc, argv, lens, NULL);
}

/* ---------------------------------------------------------------- values */

static const char k_mac_domain[] = "tokitai-jit remote v1";         /* with its NUL */
static const char k_lease_domain[] = "tokitai-jit remote lease v1"; /* with its NUL */

/* HMAC-SHA256 under the shared secret over domain (NUL included), the 32
 * hex digits of the key and data. */
static int hmac_of(const remote *r, const char *domain, size_t domain_size, const char *hex,
                   const uint8_t *data, size_t len, uint8_t out[TK__REMOTE_MAC_SIZE])
{
    int ok = 0;
    EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    EVP_MAC_CTX *ctx = mac ? EVP_MAC_CTX_new(mac) : NULL;
    char digest[] = "SHA256";
    OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                           OSSL_PARAM_construct_end()};
    size_t n = 0;
    if (ctx && EVP_MAC_init(ctx, r->secret, r->secret_len, params) == 1 &&
        EVP_MAC_update(ctx, (const unsigned char *)domain, domain_size) == 1 &&
        EVP_MAC_update(ctx, (const unsigned char *)hex, 32) == 1 &&
        EVP_MAC_update(ctx, data, len) == 1 &&
        EVP_MAC_final(ctx, out, &n, TK__REMOTE_MAC_SIZE) == 1 && n == TK__REMOTE_MAC_SIZE)
        ok = 1;
    EVP_MAC_CTX_free(ctx);
    EVP_MAC_free(mac);
    return ok;
}

static int mac_of(const remote *r, const char *hex, const uint8_t *entry, size_t len,
                  uint8_t out[TK__REMOTE_MAC_SIZE])
{
    return hmac_of(r, k_mac_domain, sizeof(k_mac_domain), hex, entry, len, out);
}

/* Wraps an entry file into a value (signed when a secret is set). */
static tk_status value_build(const remote *r, const char *hex, const uint8_t *entry, size_t len,
                             uint8_t **out, size_t *out_len)
{
    size_t mac_len = r->secret ? TK__REMOTE_MAC_SIZE : 0;
    size_t total = TK__REMOTE_HEADER_SIZE + mac_len + len;
    uint8_t *v = malloc(total);
    if (!v)
        return TK_OUT_OF_MEMORY;
    memcpy(v, TK__REMOTE_MAGIC, 8);
    put_le(v + 8, TK__REMOTE_ENVELOPE_VERSION, 4);
    put_le(v + 12, mac_len, 4);
    if (mac_len && !mac_of(r, hex, entry, len, v + TK__REMOTE_HEADER_SIZE)) {
        free(v);
        return TK_INTERNAL;
    }
    memcpy(v + TK__REMOTE_HEADER_SIZE + mac_len, entry, len);
    *out = v;
    *out_len = total;
    return TK_OK;
}

/* Checks the envelope (and the MAC when a secret is set); points *entry at
 * the entry file inside value. 0 and a reason when refused. */
static int value_open(const remote *r, const char *hex, const uint8_t *value, size_t len,
                      const uint8_t **entry, size_t *entry_len, const char **why)
{
    if (len < TK__REMOTE_HEADER_SIZE || memcmp(value, TK__REMOTE_MAGIC, 8) != 0) {
        *why = "not a tokitai-jit remote value";
        return 0;
    }
    if (get_le(value + 8, 4) != TK__REMOTE_ENVELOPE_VERSION) {
        *why = "unknown envelope version";
        return 0;
    }
    uint64_t mac_len = get_le(value + 12, 4);
    if (mac_len != 0 && mac_len != TK__REMOTE_MAC_SIZE) {
        *why = "bad signature length";
        return 0;
    }
    if (len - TK__REMOTE_HEADER_SIZE < mac_len) {
        *why = "truncated";
        return 0;
    }
    const uint8_t *e = value + TK__REMOTE_HEADER_SIZE + mac_len;
    size_t elen = len - TK__REMOTE_HEADER_SIZE - (size_t)mac_len;
    if (r->secret) {
        uint8_t want[TK__REMOTE_MAC_SIZE];
        if (mac_len == 0) {
            *why = "unsigned, and a remote key is configured";
            return 0;
        }
        if (!mac_of(r, hex, e, elen, want)) {
            *why = "cannot compute the signature";
            return 0;
        }
        if (CRYPTO_memcmp(want, value + TK__REMOTE_HEADER_SIZE, TK__REMOTE_MAC_SIZE) != 0) {
            *why = "signature mismatch";
            return 0;
        }
    }
    *entry = e;
    *entry_len = elen;
    return 1;
}

/* The disk tier's checks: structure, checksum, and the full key material. */
static int entry_check(const tk__key *key, const uint8_t *e, size_t len, tk__entry_view *v,
                       const char **why)
{
    if (tk__entry_parse(e, len, 0, v, why) != TK_OK)
        return 0;
    if (v->fp_hi != key->fp_hi || v->fp_lo != key->fp_lo) {
        *why = "entry belongs to another key";
        return 0;
    }
    if (v->key_size != key->len || memcmp(v->key, key->bytes, key->len) != 0) {
        *why = "key material differs";
        return 0;
    }
    return 1;
}

static uint64_t value_limit(const remote *r)
{
    return r->max_value + TK__REMOTE_HEADER_SIZE + TK__REMOTE_MAC_SIZE;
}

static int too_big(const remote *r, uint64_t len)
{
    return len > value_limit(r);
}

/* What a value key holds. */
enum fetched { GOT_VALUE, GOT_NONE, GOT_TOO_BIG, GOT_WRONG_TYPE, GOT_FAIL };

/* STRLEN, then GETRANGE 0..limit: a value over the limit is refused
 * without being transferred, a key of another type is told apart from
 * server trouble. *out (GOT_VALUE only) is the reply to free; *size the
 * value's length where known. */
static enum fetched fetch(remote *r, const char *name, redisReply **out, uint64_t *size)
{
    *out = NULL;
    *size = 0;
    char end[32];
    snprintf(end, sizeof(end), "%llu", (unsigned long long)value_limit(r));
    const char *argv[4] = {"STRLEN", name, "0", end};
    size_t lens[4] = {6, strlen(name), 1, strlen(end)};
    enum fetched got = GOT_FAIL;
    pthread_mutex_lock(&r->mu);
    redisReply *rep = run_any_locked(r, 2, argv, lens);
    if (!rep)
        goto done;
    if (rep->type == REDIS_REPLY_ERROR) {
        if (strncmp(rep->str, "WRONGTYPE", 9) == 0) {
            freeReplyObject(rep);
            got = GOT_WRONG_TYPE;
        } else {
            server_refused(r, "STRLEN", rep);
        }
        goto done;
    }
    if (rep->type != REDIS_REPLY_INTEGER || rep->integer < 0) {
        freeReplyObject(rep);
        bump(&r->errors);
        goto done;
    }
    *size = (uint64_t)rep->integer;
    freeReplyObject(rep);
    if (*size == 0) {
        got = GOT_NONE;
        goto done;
    }
    if (too_big(r, *size)) {
        got = GOT_TOO_BIG;
        goto done;
    }
    argv[0] = "GETRANGE";
    lens[0] = 8;
    rep = run_any_locked(r, 4, argv, lens);
    if (!rep)
        goto done;
    if (rep->type == REDIS_REPLY_ERROR) {
        if (strncmp(rep->str, "WRONGTYPE", 9) == 0) { /* replaced meanwhile */
            freeReplyObject(rep);
            got = GOT_WRONG_TYPE;
        } else {
            server_refused(r, "GETRANGE", rep);
        }
        goto done;
    }
    if (rep->type != REDIS_REPLY_STRING) {
        freeReplyObject(rep);
        bump(&r->errors);
        goto done;
    }
    *size = rep->len;
    if (rep->len == 0) {
        freeReplyObject(rep);
        got = GOT_NONE;
    } else if (too_big(r, rep->len)) { /* grown since the STRLEN */
        freeReplyObject(rep);
        got = GOT_TOO_BIG;
    } else {
        *out = rep;
        got = GOT_VALUE;
    }
done:
    pthread_mutex_unlock(&r->mu);
    return got;
}

/* ------------------------------------------------------- the cache hooks */

tk_status tk__cache_remote_open(tk_cache *cache, const tk__remote_opts *opts)
{
    tk__remote_opts none;
    if (!opts) {
        memset(&none, 0, sizeof(none));
        opts = &none;
    }
    const char *url = opts->url ? opts->url : tk__env_get(TK__ENV_REMOTE);
    if (!url || !*url)
        return TK_OK;
    remote *r = calloc(1, sizeof(*r));
    if (!r)
        return TK_OUT_OF_MEMORY;
    r->cache = cache;
    char why[160];
    if (url_parse(url, &r->url, why, sizeof(why)) != TK_OK) {
        /* tk_config_set_remote refuses a bad URL: this one is the
         * environment's, and the environment's report names it. */
        if (cache->log && opts->url) {
            char msg[800];
            snprintf(msg, sizeof(msg),
                     "remote cache URL '%.500s' refused: %s; continuing without it", url, why);
            cache->log(cache->log_user, TK_LOG_WARN, msg);
        }
        free(r);
        return TK_OK;
    }
    const void *secret = opts->secret;
    size_t secret_len = opts->secret_len;
    if (!opts->secret_set) {
        /* A refused key must not mean "no key": every value would then be
         * trusted unsigned. The context refuses to start before this. */
        secret = tk__env_raw(TK__ENV_REMOTE_KEY);
        if (secret && !tk__env_get(TK__ENV_REMOTE_KEY)) {
            free(r);
            return TK_INVALID_ARGUMENT;
        }
        secret_len = secret ? strlen(secret) : 0;
    }
    if (secret && secret_len) {
        r->secret = malloc(secret_len);
        if (!r->secret) {
            free(r);
            return TK_OUT_OF_MEMORY;
        }
        memcpy(r->secret, secret, secret_len);
        r->secret_len = secret_len;
    }
    r->connect_ms = opts->connect_ms
                        ? opts->connect_ms
                        : tk__env_ms(TK__ENV_REMOTE_CONNECT_TIMEOUT_MS, TK__REMOTE_CONNECT_MS);
    r->io_ms =
        opts->io_ms ? opts->io_ms : tk__env_ms(TK__ENV_REMOTE_IO_TIMEOUT_MS, TK__REMOTE_IO_MS);
    r->lease_ms =
        opts->lease_ms ? opts->lease_ms : tk__env_ms(TK__ENV_REMOTE_LEASE_MS, TK__REMOTE_LEASE_MS);
    r->wait_ms =
        opts->wait_ms ? opts->wait_ms : tk__env_ms(TK__ENV_REMOTE_WAIT_MS, TK__REMOTE_WAIT_MS);
    r->max_value = TK__REMOTE_MAX_VALUE;
    /* Test hook: a small limit, so a test can store an oversized value
     * without moving hundreds of megabytes. */
    const char *test_max = getenv("TK__REMOTE_TEST_MAX_VALUE");
    if (test_max && *test_max)
        r->max_value = strtoull(test_max, NULL, 10);
    snprintf(r->prefix, sizeof(r->prefix), "tkjit:%s:%d:", TK_VERSION_STRING, TK__CACHE_FORMAT);
    if (pthread_mutex_init(&r->mu, NULL) != 0) {
        free(r->secret);
        free(r);
        return TK_OUT_OF_MEMORY;
    }
    cache->remote = r;
    return TK_OK;
}

void tk__cache_remote_close(tk_cache *cache)
{
    remote *r = cache ? cache->remote : NULL;
    if (!r)
        return;
    if (r->orphans)
        release_orphans(r, 1); /* last chance, the breaker reset: one try each */
    if (r->c)
        redisFree(r->c); /* a child's copy sends nothing either */
    if (r->secret) {
        OPENSSL_cleanse(r->secret, r->secret_len);
        free(r->secret);
    }
    pthread_mutex_destroy(&r->mu);
    free(r);
    cache->remote = NULL;
}

static void refused(remote *r, const char *name, const char *why)
{
    bump(&r->rejected);
    rlog(r, once(&r->warned_bad), "remote cache %s: value %s refused: %s", r->url.shown, name, why);
}

tk_status tk__cache_remote_get(tk_cache *cache, const tk__key *key, tk__entry *out,
                               uint8_t **entry_out, size_t *len_out)
{
    remote *r = cache->remote;
    *entry_out = NULL;
    *len_out = 0;
    if (!r)
        return TK_NOT_FOUND;
    char name[128];
    name_of(r, "e", key->hex, name, sizeof(name));
    redisReply *rep = NULL;
    uint64_t size = 0;
    switch (fetch(r, name, &rep, &size)) {
    case GOT_NONE:
        bump(&r->misses);
        return TK_NOT_FOUND;
    case GOT_TOO_BIG:
        refused(r, name, "larger than the size limit (not read)");
        return TK_NOT_FOUND;
    case GOT_WRONG_TYPE:
        refused(r, name, "not a string (a key of another type)");
        return TK_NOT_FOUND;
    case GOT_FAIL:
        return TK_NOT_FOUND;
    case GOT_VALUE:
        break;
    }
    tk_status st = TK_NOT_FOUND;
    const uint8_t *entry = NULL;
    size_t elen = 0;
    const char *why = NULL;
    tk__entry_view v;
    if (!value_open(r, key->hex, (const uint8_t *)rep->str, rep->len, &entry, &elen, &why) ||
        !entry_check(key, entry, elen, &v, &why)) {
        refused(r, name, why);
        goto done;
    }
    st = tk__entry_fill(&v, (int64_t)time(NULL), out);
    if (st != TK_OK)
        goto done; /* out of memory: the engine compiles instead */
    /* The entry file for the handle to keep (a failed copy only costs the
     * next process a remote lookup). */
    if ((*entry_out = malloc(elen ? elen : 1)) != NULL) {
        memcpy(*entry_out, entry, elen);
        *len_out = elen;
    }
    bump(&r->hits);
done:
    freeReplyObject(rep);
    return st;
}

typedef struct lease {
    remote *r;
    struct lease *next; /* in r->orphans */
    char name[128];
    char token[256]; /* "host:pid:nonce", with a secret followed by ".<64 hex MAC>" */
} lease;

static unsigned ms_left(int64_t deadline)
{
    int64_t left = deadline - now_ns();
    return left <= 0 ? 0 : (unsigned)(left / 1000000 + 1);
}

static void hex_of(const uint8_t *p, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 15];
    }
    out[2 * n] = 0;
}

/* SHA-1 of data in hex, as Redis's redis.sha1hex computes it. */
static int sha1_hex(const char *data, size_t len, char out[2 * SHA_DIGEST_LENGTH + 1])
{
    uint8_t md[SHA_DIGEST_LENGTH];
    unsigned n = 0;
    if (EVP_Digest(data, len, md, &n, EVP_sha1(), NULL) != 1 || n != SHA_DIGEST_LENGTH)
        return 0;
    hex_of(md, sizeof md, out);
    return 1;
}

/* With a secret, a lease is "<token>.<HMAC of the token, 64 hex>": one
 * written by a process without the secret is not a lease to wait for. */
static int lease_sign(const remote *r, const char *hex, char *token, size_t size)
{
    if (!r->secret)
        return 1;
    uint8_t mac[TK__REMOTE_MAC_SIZE];
    size_t n = strlen(token);
    if (n + 1 + 2 * TK__REMOTE_MAC_SIZE + 1 > size ||
        !hmac_of(r, k_lease_domain, sizeof(k_lease_domain), hex, (const uint8_t *)token, n, mac))
        return 0;
    token[n] = '.';
    hex_of(mac, sizeof(mac), token + n + 1);
    return 1;
}

static int lease_genuine(const remote *r, const char *hex, const char *value, size_t len)
{
    if (!r->secret)
        return 1;
    if (len < 2 * TK__REMOTE_MAC_SIZE + 2 || value[len - 2 * TK__REMOTE_MAC_SIZE - 1] != '.')
        return 0;
    size_t n = len - 2 * TK__REMOTE_MAC_SIZE - 1;
    uint8_t mac[TK__REMOTE_MAC_SIZE];
    char want[2 * TK__REMOTE_MAC_SIZE + 1];
    if (!hmac_of(r, k_lease_domain, sizeof(k_lease_domain), hex, (const uint8_t *)value, n, mac))
        return 0;
    hex_of(mac, sizeof(mac), want);
    return CRYPTO_memcmp(want, value + n + 1, 2 * TK__REMOTE_MAC_SIZE) == 0;
}

/* Takes the lease (reply {1}) unless a live one is there ({0, holder,
 * value published?}). A lease no process of the fleet would have written is
 * replaced: another type, no expiry or one beyond the lease time (planted
 * to stall the fleet), or the value the caller found unsigned or forged
 * (ARGV[3], its SHA-1 in hex: compared here, so a genuine lease taken
 * meanwhile stays; a hash, so a planted value of any length is caught). */
static const char k_lease_script[] =
    "local t = redis.call('TYPE', KEYS[1])['ok'] "
    "if t ~= 'none' then "
    "  local bad = t ~= 'string' "
    "  local v = false "
    "  if not bad then "
    "    v = redis.call('GET', KEYS[1]) "
    "    local ttl = redis.call('PTTL', KEYS[1]) "
    "    bad = ttl < 0 or ttl > tonumber(ARGV[2]) or "
    "          (ARGV[3] ~= '' and redis.sha1hex(v) == ARGV[3]) "
    "  end "
    "  if not bad then return {0, v, redis.call('EXISTS', KEYS[2])} end "
    "  redis.call('DEL', KEYS[1]) "
    "end "
    "redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) "
    "return {1}";

/* Only our own lease: after an expiry another process may hold it. */
static const char k_release_script[] =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end "
    "return 0";

void *tk__cache_remote_lease(tk_cache *cache, const tk__key *key)
{
    remote *r = cache->remote;
    if (!r)
        return NULL;
    lease *l = calloc(1, sizeof(*l));
    if (!l)
        return NULL;
    l->r = r;
    name_of(r, "lease", key->hex, l->name, sizeof(l->name));
    char host[64] = "";
    gethostname(host, sizeof(host) - 1);
    host[sizeof(host) - 1] = 0;
    uint64_t nonce = (uint64_t)now_ns() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)l;
    snprintf(l->token, sizeof(l->token), "%s:%ld:%016llx", host, (long)getpid(),
             (unsigned long long)XXH3_64bits(&nonce, sizeof(nonce)));
    if (!lease_sign(r, key->hex, l->token, sizeof(l->token))) {
        free(l);
        return NULL;
    }
    char value_name[128], px[16];
    name_of(r, "e", key->hex, value_name, sizeof(value_name));
    snprintf(px, sizeof(px), "%u", r->lease_ms);
    int64_t deadline = now_ns() + (int64_t)r->wait_ms * 1000000LL;
    unsigned pause = 2;
    char forged[2 * SHA_DIGEST_LENGTH + 1] = ""; /* SHA-1 of a lease found not genuine */
    int warned_forged = 0;
    for (;;) {
        const char *argv[8] = {"EVAL",     k_lease_script, "2", l->name,
                               value_name, l->token,       px,  forged};
        size_t lens[8] = {4,
                          sizeof(k_lease_script) - 1,
                          1,
                          strlen(l->name),
                          strlen(value_name),
                          strlen(l->token),
                          strlen(px),
                          strlen(forged)};
        int unanswered = 0;
        redisReply *rep = run_unanswered(r, 8, argv, lens, &unanswered);
        if (unanswered) {
            /* No answer to a request the server got or may get (a stall, a
             * timeout): once it runs, the lease is held with no one to
             * release it, and other processes would wait lease_ms for it.
             * Compile without it, and keep it among the orphans: released,
             * if it is ours, with the next release or at close. */
            pthread_mutex_lock(&r->mu);
            l->next = r->orphans;
            r->orphans = l;
            pthread_mutex_unlock(&r->mu);
            return NULL;
        }
        if (!rep)
            break; /* trouble (a miss): compile without a lease */
        int ok = rep->type == REDIS_REPLY_ARRAY && rep->elements >= 1 &&
                 rep->element[0]->type == REDIS_REPLY_INTEGER;
        if (ok && rep->element[0]->integer == 1) {
            freeReplyObject(rep);
            return l;
        }
        ok = ok && rep->elements == 3 && rep->element[1]->type == REDIS_REPLY_STRING &&
             rep->element[2]->type == REDIS_REPLY_INTEGER;
        if (!ok) {
            freeReplyObject(rep);
            bump(&r->errors);
            break;
        }
        const redisReply *holder = rep->element[1];
        int published = rep->element[2]->integer > 0;
        int genuine = lease_genuine(r, key->hex, holder->str, holder->len);
        int replaceable = !genuine && sha1_hex(holder->str, holder->len, forged);
        if (!genuine && !warned_forged) {
            warned_forged = 1;
            bump(&r->rejected);
            rlog(r, once(&r->warned_bad), "remote cache %s: lease %s refused: %s", r->url.shown,
                 l->name, "unsigned or forged (a remote key is configured)");
        }
        freeReplyObject(rep);
        if (published)
            break; /* the holder published: look again */
        unsigned left = ms_left(deadline);
        if (replaceable && left > 0)
            continue; /* replaced on the next round, without sleeping */
        if (left == 0) {
            rlog(r, TK_LOG_INFO,
                 "remote cache %s: waited %u ms for another process to publish %s; compiling "
                 "here",
                 r->url.shown, r->wait_ms, key->hex);
            break;
        }
        sleep_ms(pause < left ? pause : left);
        if (pause < 50)
            pause *= 2;
    }
    free(l);
    return NULL;
}

/* One try; 1 when the server answered (the lease is gone or not ours). */
static int release_try(remote *r, const lease *l)
{
    const char *argv[5] = {"EVAL", k_release_script, "1", l->name, l->token};
    size_t lens[5] = {4, sizeof(k_release_script) - 1, 1, strlen(l->name), strlen(l->token)};
    pthread_mutex_lock(&r->mu);
    redisReply *rep = run_any_locked(r, 5, argv, lens);
    if (rep && rep->type == REDIS_REPLY_ERROR)
        server_refused(r, "EVAL", rep);
    else if (rep)
        freeReplyObject(rep);
    pthread_mutex_unlock(&r->mu);
    return rep != NULL;
}

/* Retries the releases a stalled or dead server missed (a holder that
 * lived must not leave its lease to expire: others would wait for it). */
static void release_orphans(remote *r, int reset_breaker)
{
    pthread_mutex_lock(&r->mu);
    lease *list = r->orphans;
    r->orphans = NULL;
    if (reset_breaker)
        r->open_until_ns = 0;
    pthread_mutex_unlock(&r->mu);
    while (list) {
        lease *next = list->next;
        if (release_try(r, list) || reset_breaker) {
            free(list); /* at close: one try only */
        } else {
            pthread_mutex_lock(&r->mu);
            list->next = r->orphans;
            r->orphans = list;
            pthread_mutex_unlock(&r->mu);
        }
        list = next;
    }
}

void tk__cache_remote_release(void *p)
{
    lease *l = p;
    if (!l)
        return;
    remote *r = l->r;
    if (!release_try(r, l)) {
        pthread_mutex_lock(&r->mu);
        l->next = r->orphans;
        r->orphans = l;
        pthread_mutex_unlock(&r->mu);
        return;
    }
    free(l);
    pthread_mutex_lock(&r->mu);
    int retry = r->orphans != NULL;
    pthread_mutex_unlock(&r->mu);
    if (retry)
        release_orphans(r, 0);
}

static int publish_value(remote *r, const char *hex, const uint8_t *entry, size_t len, int only_new,
                         int *present)
{
    uint8_t *value = NULL;
    size_t vlen = 0;
    if (value_build(r, hex, entry, len, &value, &vlen) != TK_OK)
        return 0;
    char name[128];
    name_of(r, "e", hex, name, sizeof(name));
    const char *argv[4] = {"SET", name, (const char *)value, "NX"};
    size_t lens[4] = {3, strlen(name), vlen, 2};
    redisReply *rep = run(r, only_new ? 4 : 3, argv, lens);
    free(value);
    if (!rep)
        return 0;
    if (present)
        *present = rep->type == REDIS_REPLY_NIL;
    freeReplyObject(rep);
    return 1;
}

void tk__cache_remote_publish(tk_cache *cache, const tk__key *key, const uint8_t *entry, size_t len)
{
    remote *r = cache->remote;
    if (!r || (uint64_t)len > r->max_value)
        return;
    /* A plain SET: a bad value someone planted is replaced by a good one. */
    if (publish_value(r, key->hex, entry, len, 0, NULL))
        bump(&r->publishes);
}

#define LOAD(f) __atomic_load_n(&r->f, __ATOMIC_RELAXED)
void tk__cache_remote_counters(const tk_cache *cache, tk__remote_counters *out)
{
    memset(out, 0, sizeof(*out));
    const remote *r = cache ? cache->remote : NULL;
    if (!r)
        return;
    out->hits = LOAD(hits);
    out->misses = LOAD(misses);
    out->errors = LOAD(errors);
    out->rejected = LOAD(rejected);
    out->publishes = LOAD(publishes);
}
#undef LOAD

void tk__cache_remote_reset_counters(tk_cache *cache)
{
    remote *r = cache ? cache->remote : NULL;
    if (!r)
        return;
    uint64_t *f[] = {&r->hits, &r->misses, &r->errors, &r->rejected, &r->publishes};
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
        __atomic_store_n(f[i], 0, __ATOMIC_RELAXED);
}

/* ------------------------------------------------------------ the tools */

static tk_status need_remote(tk_cache *cache)
{
    if (!cache->remote)
        return tk__cache_fail(cache, TK_NOT_FOUND,
                              "no remote cache configured (TOKITAI_JIT_REMOTE or --remote URL)");
    return TK_OK;
}

/* Tools want an answer now, not the breaker's silence. */
static void breaker_reset(remote *r)
{
    pthread_mutex_lock(&r->mu);
    r->open_until_ns = 0;
    pthread_mutex_unlock(&r->mu);
}

static tk_status unreachable(tk_cache *cache)
{
    remote *r = cache->remote;
    char problem[sizeof(r->problem)];
    pthread_mutex_lock(&r->mu);
    memcpy(problem, r->problem, sizeof(problem));
    pthread_mutex_unlock(&r->mu);
    if (problem[0]) /* what the server said (AUTH, a refused command) or the transport */
        return tk__cache_fail(cache, TK_IO_ERROR,
                              "remote cache %s unreachable or refusing commands: %s (timeouts "
                              "%u/%u ms)",
                              r->url.shown, problem, r->connect_ms, r->io_ms);
    return tk__cache_fail(cache, TK_IO_ERROR,
                          "remote cache %s unreachable or refusing commands (timeouts %u/%u ms)",
                          r->url.shown, r->connect_ms, r->io_ms);
}

tk_status tk_cache_remote_describe(tk_cache *cache, char *buf, size_t size)
{
    if (!cache || !buf || !size)
        return TK_INVALID_ARGUMENT;
    tk_status st = need_remote(cache);
    if (st != TK_OK) {
        snprintf(buf, size, "remote: none configured\n");
        return st;
    }
    remote *r = cache->remote;
    breaker_reset(r);
    const char *argv[3] = {"INFO", "server", NULL};
    size_t lens[2] = {4, 6};
    redisReply *rep = run(r, 2, argv, lens);
    char version[64] = "?";
    if (rep && rep->type == REDIS_REPLY_STRING) {
        const char *v = strstr(rep->str, "redis_version:");
        if (v) {
            v += 14;
            size_t n = strcspn(v, "\r\n");
            snprintf(version, sizeof(version), "%.*s", (int)(n < 60 ? n : 60), v);
        }
    }
    snprintf(buf, size,
             "remote: %s\n  signing: %s\n  timeouts: connect %u ms, I/O %u ms; lease %u ms, "
             "wait %u ms\n  server: %s%s\n",
             r->url.shown, r->secret ? "HMAC-SHA256 with a shared key" : "none (no key set)",
             r->connect_ms, r->io_ms, r->lease_ms, r->wait_ms,
             rep ? "reachable, Redis " : "unreachable", rep ? version : "");
    if (rep)
        freeReplyObject(rep);
    return rep ? TK_OK : unreachable(cache);
}

/* Calls fn for every value key of this version: SCAN in batches. */
typedef int (*scan_fn)(void *ctx, const char *name, const char *hex);

static tk_status scan_values(tk_cache *cache, const char *kind, scan_fn fn, void *ctx)
{
    remote *r = cache->remote;
    char pattern[128], cursor[32] = "0";
    snprintf(pattern, sizeof(pattern), "%s%s:*", r->prefix, kind);
    size_t prefix_len = strlen(pattern) - 1;
    for (;;) {
        const char *argv[6] = {"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"};
        size_t lens[6] = {4, strlen(cursor), 5, strlen(pattern), 5, 4};
        redisReply *rep = run(r, 6, argv, lens);
        if (!rep)
            return unreachable(cache);
        if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 ||
            rep->element[0]->type != REDIS_REPLY_STRING ||
            rep->element[1]->type != REDIS_REPLY_ARRAY) {
            freeReplyObject(rep);
            return tk__cache_fail(cache, TK_CORRUPT, "remote cache: unexpected SCAN reply");
        }
        snprintf(cursor, sizeof(cursor), "%s", rep->element[0]->str);
        redisReply *keys = rep->element[1];
        int stop = 0;
        for (size_t i = 0; i < keys->elements && !stop; i++) {
            const redisReply *k = keys->element[i];
            if (k->type != REDIS_REPLY_STRING || k->len != prefix_len + 32 ||
                strspn(k->str + prefix_len, "0123456789abcdef") != 32)
                continue;
            stop = fn(ctx, k->str, k->str + prefix_len);
        }
        freeReplyObject(rep);
        if (stop || strcmp(cursor, "0") == 0)
            return TK_OK;
    }
}

typedef struct walk_ctx {
    tk_cache *cache;
    tk_cache_visit_fn visit;
    void *user;
    tk_cache_stats *stats;
    tk_status st;
    uint64_t skipped; /* keys of another type, oversized or bad values */
} walk_ctx;

static void info_of(const tk__entry_view *v, const char *hex, const char *name, size_t value_len,
                    char *strings, tk_cache_entry_info *info, char hash[33])
{
    const char *ptrs[TK__ENTRY_N_STRINGS];
    char *p = strings;
    for (int i = 0; i < TK__ENTRY_N_STRINGS; i++) {
        memcpy(p, v->strings[i].ptr ? v->strings[i].ptr : "", v->strings[i].len);
        p[v->strings[i].len] = 0;
        ptrs[i] = p;
        p += v->strings[i].len + 1;
    }
    memset(info, 0, sizeof(*info));
    info->struct_size = sizeof(*info);
    info->key_hex = hex;
    info->path = name;
    info->kernel = ptrs[0];
    info->source = ptrs[1];
    info->backend = ptrs[2];
    info->arch = ptrs[3];
    info->compiler = ptrs[4];
    info->options = ptrs[5];
    info->payload_size = v->payload_size;
    info->file_size = value_len;
    info->created = v->created;
    info->last_used = 0;
    info->resources = v->resources;
    tk__key_field f;
    if (tk__key_find(v->key, v->key_size, TK__KEY_SOURCE_TAG, &f) && f.hashed) {
        tk__fp_hex(f.hi, f.lo, hash);
        info->source_hash = hash;
    }
}

/* Reads one value in full and checks it as a lookup would (the key material
 * against its own fingerprint: the tool has no key to compare with). A key
 * of another type, an oversized value (not read) or one that does not
 * verify is skipped and counted. */
static int walk_one(void *p, const char *name, const char *hex)
{
    walk_ctx *w = p;
    remote *r = w->cache->remote;
    redisReply *rep = NULL;
    uint64_t size = 0;
    enum fetched got = fetch(r, name, &rep, &size);
    if (got == GOT_FAIL) {
        w->st = unreachable(w->cache);
        return 1;
    }
    if (got == GOT_NONE) /* gone since the SCAN */
        return 0;
    const uint8_t *entry = NULL;
    size_t elen = 0;
    const char *why = NULL;
    tk__entry_view v;
    char fp[33];
    int good = got == GOT_VALUE &&
               value_open(r, hex, (const uint8_t *)rep->str, rep->len, &entry, &elen, &why) &&
               tk__entry_parse(entry, elen, 1, &v, &why) == TK_OK;
    if (good) {
        tk__fp_hex(v.fp_hi, v.fp_lo, fp);
        good = strcmp(fp, hex) == 0;
    }
    int stop = 0;
    if (!good)
        w->skipped++;
    if (w->stats) {
        w->stats->bytes += size;
        if (good)
            w->stats->entries++;
        else
            w->stats->bad_files++;
    } else if (good) {
        size_t total = 0;
        for (int i = 0; i < TK__ENTRY_N_STRINGS; i++)
            total += (size_t)v.strings[i].len + 1;
        char *strings = malloc(total);
        if (!strings) {
            w->st = TK_OUT_OF_MEMORY;
            stop = 1;
        } else {
            tk_cache_entry_info info;
            char hash[33];
            info_of(&v, hex, name, rep->len, strings, &info, hash);
            stop = w->visit(w->user, &info);
            free(strings);
        }
    }
    if (rep)
        freeReplyObject(rep);
    return stop;
}

tk_status tk_cache_remote_list_counted(tk_cache *cache, tk_cache_visit_fn visit, void *user,
                                       uint64_t *n_skipped)
{
    if (!cache || !visit)
        return TK_INVALID_ARGUMENT;
    tk_status st = need_remote(cache);
    if (st != TK_OK)
        return st;
    breaker_reset(cache->remote);
    walk_ctx w = {cache, visit, user, NULL, TK_OK, 0};
    st = scan_values(cache, "e", walk_one, &w);
    if (st == TK_OK)
        st = w.st;
    if (st == TK_OK && n_skipped)
        *n_skipped = w.skipped;
    return st;
}

tk_status tk_cache_remote_list(tk_cache *cache, tk_cache_visit_fn visit, void *user)
{
    return tk_cache_remote_list_counted(cache, visit, user, NULL);
}

static int count_one(void *p, const char *name, const char *hex)
{
    (*(uint64_t *)p)++;
    return 0;
}

tk_status tk_cache_remote_get_stats(tk_cache *cache, tk_cache_stats *out)
{
    if (!cache || tk__out_bad(out))
        return TK_INVALID_ARGUMENT;
    tk_status st = need_remote(cache);
    if (st != TK_OK)
        return st;
    breaker_reset(cache->remote);
    tk_cache_stats s = TK_STRUCT_INIT(tk_cache_stats);
    memset(&s, 0, sizeof(s));
    s.struct_size = sizeof s;
    walk_ctx w = {cache, NULL, NULL, &s, TK_OK, 0};
    st = scan_values(cache, "e", walk_one, &w);
    if (st == TK_OK)
        st = w.st;
    if (st == TK_OK)
        st = scan_values(cache, "lease", count_one, &s.temp_files);
    if (st != TK_OK)
        return st;
    /* The server's memory limit, when it lets us read it (0: none known). */
    const char *argv[3] = {"CONFIG", "GET", "maxmemory"};
    size_t lens[3] = {6, 3, 9};
    redisReply *rep = run(cache->remote, 3, argv, lens);
    if (rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 &&
        rep->element[1]->type == REDIS_REPLY_STRING)
        s.max_bytes = strtoull(rep->element[1]->str, NULL, 10);
    if (rep)
        freeReplyObject(rep);
    tk__out_copy(out, &s, sizeof s);
    return TK_OK;
}

/* 1 when the server's value at name is one a lookup of the entry's key
 * would take: envelope (and signature under this handle's secret),
 * structure, checksum and the same key material. */
static int remote_verifies(remote *r, const char *hex, const redisReply *rep,
                           const tk__entry_view *mine)
{
    const uint8_t *entry = NULL;
    size_t elen = 0;
    const char *why = NULL;
    tk__entry_view v;
    return value_open(r, hex, (const uint8_t *)rep->str, rep->len, &entry, &elen, &why) &&
           tk__entry_parse(entry, elen, 1, &v, &why) == TK_OK && v.fp_hi == mine->fp_hi &&
           v.fp_lo == mine->fp_lo && v.key_size == mine->key_size &&
           memcmp(v.key, mine->key, mine->key_size) == 0;
}

tk_status tk__cache_remote_tool_begin(tk_cache *cache)
{
    tk_status st = need_remote(cache);
    if (st == TK_OK)
        breaker_reset(cache->remote);
    return st;
}

/* Sends the entry unless the server holds a value that verifies: one that
 * does not (garbage, another type, another key's entry, a signature under
 * another secret) is overwritten and counted apart. */
tk_status tk__cache_remote_push_entry(tk_cache *cache, const uint8_t *entry, size_t len,
                                      const tk__entry_view *v, tk_cache_push_counts *n,
                                      const char **why)
{
    remote *r = cache->remote;
    if ((uint64_t)len > r->max_value) {
        *why = "larger than the remote size limit";
        return TK_OVERFLOW;
    }
    char hex[33], name[128];
    tk__fp_hex(v->fp_hi, v->fp_lo, hex);
    name_of(r, "e", hex, name, sizeof(name));
    redisReply *rep = NULL;
    uint64_t size = 0;
    enum fetched got = fetch(r, name, &rep, &size);
    if (got == GOT_FAIL)
        return unreachable(cache);
    int good = got == GOT_VALUE && remote_verifies(r, hex, rep, v);
    if (rep)
        freeReplyObject(rep);
    if (good) {
        n->present++;
        return TK_OK;
    }
    int present = 0;
    if (!publish_value(r, hex, entry, len, got == GOT_NONE, &present))
        return unreachable(cache);
    if (present)
        n->present++; /* another process published it meanwhile */
    else if (got == GOT_NONE)
        n->pushed++;
    else
        n->replaced++;
    return TK_OK;
}

#endif /* TK_HAVE_REMOTE */
