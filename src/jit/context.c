/*
 * Contexts: backend choice, device or offline target, logging, last error,
 * counters, memory API; plus tk_cache_open (config -> cache options),
 * tk_backend_describe and the embedded source table.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/remote.h"
#include "common/env_vars.h"
#include "common/out_struct.h"
#include "jit/backend/dl.h"
#include "jit/jit_internal.h"

/* -------------------------------------------------------------- backends */

const tk__backend *tk__backend_for(tk_backend_kind kind)
{
    switch (kind) {
    case TK_BACKEND_CUDA:
        return tk__backend_cuda();
    case TK_BACKEND_HIP:
        return tk__backend_hip();
    case TK_BACKEND_STUB:
        return tk__backend_stub();
    case TK_BACKEND_AUTO:
        break;
    }
    return NULL;
}

/* $TOKITAI_JIT_BACKEND, when the program leaves the choice to it. A
 * refused value is an error, not the default: the default would run on
 * another device than the one asked for. */
static tk_status env_backend(tk_backend_kind *kind, char *why, size_t why_size)
{
    static const tk_backend_kind kinds[] = {TK_BACKEND_AUTO, TK_BACKEND_CUDA, TK_BACKEND_HIP,
                                            TK_BACKEND_STUB};
    const char *v = tk__env_raw(TK__ENV_BACKEND);
    int i = tk__env_word(TK__ENV_BACKEND, -1);
    if (v && i < 0) {
        snprintf(why, why_size, "TOKITAI_JIT_BACKEND=%.200s: expected one of: %s", v,
                 tk__env_table()[TK__ENV_BACKEND].words);
        return TK_INVALID_ARGUMENT;
    }
    if (i > 0)
        *kind = kinds[i];
    return TK_OK;
}

/* Opens be for cfg on ctx: device (or offline target) and compiler identity. */
static tk_status open_backend(tk_context *ctx, const tk__backend *be, const tk_config *cfg,
                              tk__err *err)
{
    tk_status st = be->load(err);
    if (st != TK_OK)
        return st;
    if (cfg->target) {
        st = be->check_target(cfg->target, ctx->target, sizeof ctx->target, err);
        if (st != TK_OK)
            return st;
        ctx->has_device = 0;
    } else {
        int count = 0;
        st = be->device_count(&count, err);
        if (st != TK_OK)
            return st;
        if (count <= 0)
            return tk__err_set(err, TK_NO_DEVICE, "%s: no device found", be->name);
        if (cfg->device >= count)
            return tk__err_set(err, TK_NO_DEVICE, "%s: no device %d (%d found)", be->name,
                               cfg->device, count);
        st = be->device_open(cfg->device, &ctx->dev, ctx->target, sizeof ctx->target, err);
        if (st != TK_OK)
            return st;
        ctx->has_device = 1;
    }
    st = be->compiler_identity(ctx->compiler, sizeof ctx->compiler, err);
    if (st != TK_OK) {
        if (ctx->has_device)
            be->device_close(ctx->dev);
        ctx->dev = NULL;
        ctx->has_device = 0;
        return st;
    }
    ctx->be = be;
    return TK_OK;
}

static void fill_cache_opts(const tk_config *cfg, tk__cache_opts *o, tk__remote_opts *ro)
{
    memset(ro, 0, sizeof *ro);
    ro->url = cfg->remote_url;
    ro->secret = cfg->remote_key;
    ro->secret_len = cfg->remote_key_len;
    ro->secret_set = cfg->remote_key_set;
    ro->connect_ms = cfg->remote_connect_ms;
    ro->io_ms = cfg->remote_io_ms;
    ro->lease_ms = cfg->remote_lease_ms;
    ro->wait_ms = cfg->remote_wait_ms;
    memset(o, 0, sizeof *o);
    o->remote = ro;
    o->root = cfg->cache_dir;
    o->lower = cfg->cache_lower;
    o->max_size = cfg->cache_max_size;
    o->read_only = cfg->cache_read_only;
    o->disabled = cfg->cache_disabled;
}

/* $TOKITAI_JIT_POLICY and $TOKITAI_JIT_BUILD replace defaults, never what
 * the program set through the API. A refused value is the default (and
 * logged once the context can log). */
static void env_modes(tk_context *ctx, const tk_config *cfg)
{
    static const tk_policy policies[] = {TK_POLICY_STABLE, TK_POLICY_EXACT, TK_POLICY_GENERIC};
    static const tk_build_mode modes[] = {TK_BUILD_ASYNC, TK_BUILD_SYNC};
    int i = tk__env_word(TK__ENV_POLICY, -1);
    if (i >= 0 && !cfg->policy_set)
        ctx->policy = policies[i];
    i = tk__env_word(TK__ENV_BUILD, -1);
    if (i >= 0 && !cfg->build_mode_set)
        ctx->build_mode = modes[i];
}

static tk_status context_init(tk_context *ctx, const tk_config *cfg)
{
    if (pthread_mutex_init(&ctx->err_mu, NULL) != 0)
        return TK_INTERNAL;
    if (pthread_mutex_init(&ctx->table_mu, NULL) != 0) {
        pthread_mutex_destroy(&ctx->err_mu);
        return TK_INTERNAL;
    }
    if (pthread_mutex_init(&ctx->flight_mu, NULL) != 0) {
        pthread_mutex_destroy(&ctx->table_mu);
        pthread_mutex_destroy(&ctx->err_mu);
        return TK_INTERNAL;
    }
    if (pthread_cond_init(&ctx->flight_cv, NULL) != 0) {
        pthread_mutex_destroy(&ctx->flight_mu);
        pthread_mutex_destroy(&ctx->table_mu);
        pthread_mutex_destroy(&ctx->err_mu);
        return TK_INTERNAL;
    }
    if (pthread_mutex_init(&ctx->attach_mu, NULL) != 0) {
        pthread_cond_destroy(&ctx->flight_cv);
        pthread_mutex_destroy(&ctx->flight_mu);
        pthread_mutex_destroy(&ctx->table_mu);
        pthread_mutex_destroy(&ctx->err_mu);
        return TK_INTERNAL;
    }
    if (tk__builder_init(ctx, cfg, tk_kernel_get, tk__desc_same) != TK_OK) {
        pthread_mutex_destroy(&ctx->attach_mu);
        pthread_cond_destroy(&ctx->flight_cv);
        pthread_mutex_destroy(&ctx->flight_mu);
        pthread_mutex_destroy(&ctx->table_mu);
        pthread_mutex_destroy(&ctx->err_mu);
        return TK_INTERNAL;
    }
    ctx->policy = cfg->policy;
    ctx->build_mode = cfg->build_mode;
    env_modes(ctx, cfg);
    ctx->log = cfg->log;
    ctx->log_user = cfg->log_user;
    ctx->log_level = cfg->log_level;
    ctx->env_log_level = tk__log_env_level();
    tk__env_log_problems(ctx);
    return TK_OK;
}

tk_status tk_context_create(const tk_config *cfg, tk_context **out, char *err, size_t err_size)
{
    tk_config defaults;
    char why[2048] = "";
    tk__err e = {.msg = "", .log = NULL};
    tk_status st;

    if (err && err_size)
        err[0] = '\0';
    if (!out) {
        snprintf(why, sizeof why, "out is NULL");
        st = TK_INVALID_ARGUMENT;
        goto report;
    }
    if (!cfg) {
        memset(&defaults, 0, sizeof defaults);
        defaults.backend = TK_BACKEND_AUTO;
        defaults.policy = TK_POLICY_STABLE;
        defaults.build_mode = TK_BUILD_ASYNC;
        defaults.log_level = TK_LOG_WARN;
        cfg = &defaults;
    }

    tk_backend_kind kind = cfg->backend;
    if (kind == TK_BACKEND_AUTO) {
        st = env_backend(&kind, why, sizeof why);
        if (st != TK_OK)
            goto report;
    }
    if (kind == TK_BACKEND_AUTO && cfg->target) {
        /* An offline target names its vendor. */
        if (strncmp(cfg->target, "sm_", 3) == 0)
            kind = TK_BACKEND_CUDA;
        else if (strncmp(cfg->target, "gfx", 3) == 0)
            kind = TK_BACKEND_HIP;
        else if (strncmp(cfg->target, "stub", 4) == 0)
            kind = TK_BACKEND_STUB;
    }

    tk_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx) {
        snprintf(why, sizeof why, "out of memory");
        st = TK_OUT_OF_MEMORY;
        goto report;
    }
    st = context_init(ctx, cfg);
    if (st != TK_OK) {
        free(ctx);
        snprintf(why, sizeof why, "cannot initialise locks");
        goto report;
    }

    const tk__backend *order[2];
    size_t n_order = 0;
    if (kind == TK_BACKEND_AUTO) {
        order[n_order++] = tk__backend_cuda();
        order[n_order++] = tk__backend_hip();
    } else {
        order[n_order++] = tk__backend_for(kind);
    }
    st = TK_BACKEND_UNAVAILABLE;
    int saw_no_device = 0;
    for (size_t i = 0; i < n_order; i++) {
        e.msg[0] = '\0';
        tk_status s = open_backend(ctx, order[i], cfg, &e);
        if (s == TK_OK) {
            st = TK_OK;
            break;
        }
        if (s == TK_NO_DEVICE)
            saw_no_device = 1;
        st = s;
        tk__strcat_fmt(why, sizeof why, "%s%s: %s", why[0] ? "; " : "", order[i]->name, e.msg);
    }
    if (st != TK_OK) {
        if (n_order > 1 && (saw_no_device || st == TK_BACKEND_UNAVAILABLE))
            st = saw_no_device ? TK_NO_DEVICE : TK_BACKEND_UNAVAILABLE;
        tk_context_destroy(ctx);
        goto report;
    }

    st = tk__env_remote_key_problem(cfg, why, sizeof why);
    if (st != TK_OK) {
        tk_context_destroy(ctx);
        goto report;
    }
    tk__cache_opts co;
    tk__remote_opts ro;
    fill_cache_opts(cfg, &co, &ro);
    co.log = tk__cache_log_adapter;
    co.log_user = ctx;
    st = tk__cache_open(&co, &ctx->cache);
    if (st != TK_OK) {
        snprintf(why, sizeof why, "cannot open the cache: %s", tk_status_str(st));
        tk_context_destroy(ctx);
        goto report;
    }
    ctx->cache_writable = !cfg->cache_read_only && !cfg->cache_disabled;
    tk__log(ctx, TK_LOG_INFO, "context: backend %s, target %s%s, compiler %s", ctx->be->name,
            ctx->target, ctx->has_device ? "" : " (offline)", ctx->compiler);
    *out = ctx;
    return TK_OK;

report:
    if (err && err_size)
        snprintf(err, err_size, "%s", why[0] ? why : tk_status_str(st));
    free(e.log);
    return st;
}

/* The cache's persistent statistics get this context's counts (before a
 * reset, and at destroy): the handle writes them once when it closes. */
static void hand_counts(tk_context *ctx)
{
#define TAKE(field) __atomic_load_n(&ctx->field, __ATOMIC_RELAXED)
    uint64_t v[TK__PSTAT_COUNT];
    v[TK__PSTAT_HITS] = TAKE(n_disk_hits);
    v[TK__PSTAT_MISSES] = TAKE(n_compiles) + TAKE(n_compile_failures);
    v[TK__PSTAT_COMPILES] = TAKE(n_compiles);
    v[TK__PSTAT_COMPILE_NS] = TAKE(compile_ns);
    v[TK__PSTAT_FALLBACKS] = TAKE(n_fallback_calls);
    v[TK__PSTAT_ERRORS] = TAKE(n_compile_failures) + TAKE(n_load_failures) + TAKE(n_cache_errors);
#undef TAKE
    tk__cache_stats_add(ctx->cache, v);
}

void tk_context_destroy(tk_context *ctx)
{
    if (!ctx)
        return;
    /* Background builds first (queued ones cancelled, running ones finished),
     * then the upper layers' state, while the device can still free memory. */
    tk__builder_stop(ctx);
    for (;;) {
        pthread_mutex_lock(&ctx->attach_mu);
        tk__attachment *a = ctx->attachments;
        if (a)
            ctx->attachments = a->next;
        pthread_mutex_unlock(&ctx->attach_mu);
        if (!a)
            break;
        if (a->destroy)
            a->destroy(ctx, a->data);
        free(a);
    }
    tk__kernels_destroy(ctx);
    if (ctx->be && ctx->has_device)
        ctx->be->device_close(ctx->dev);
    hand_counts(ctx);
    tk_cache_close(ctx->cache);
    free(ctx->last_error);
    tk__builder_destroy(ctx);
    pthread_mutex_destroy(&ctx->attach_mu);
    pthread_cond_destroy(&ctx->flight_cv);
    pthread_mutex_destroy(&ctx->flight_mu);
    pthread_mutex_destroy(&ctx->table_mu);
    pthread_mutex_destroy(&ctx->err_mu);
    free(ctx);
}

const char *tk_context_backend_name(const tk_context *ctx)
{
    return ctx && ctx->be ? ctx->be->name : "";
}

const char *tk_context_target(const tk_context *ctx)
{
    return ctx ? ctx->target : "";
}

const char *tk_context_compiler(const tk_context *ctx)
{
    return ctx ? ctx->compiler : "";
}

tk_policy tk_context_policy(const tk_context *ctx)
{
    return ctx ? ctx->policy : TK_POLICY_STABLE;
}

tk_status tk__ctx_attach(tk_context *ctx, const void *tag, void *data,
                         void (*destroy)(tk_context *ctx, void *data))
{
    if (!ctx || !tag)
        return TK_INVALID_ARGUMENT;
    tk__attachment *a = calloc(1, sizeof *a);
    if (!a)
        return TK_OUT_OF_MEMORY;
    a->tag = tag;
    a->data = data;
    a->destroy = destroy;
    pthread_mutex_lock(&ctx->attach_mu);
    for (const tk__attachment *x = ctx->attachments; x; x = x->next) {
        if (x->tag == tag) {
            pthread_mutex_unlock(&ctx->attach_mu);
            free(a);
            return TK_INVALID_ARGUMENT;
        }
    }
    a->next = ctx->attachments;
    ctx->attachments = a;
    pthread_mutex_unlock(&ctx->attach_mu);
    return TK_OK;
}

void *tk__ctx_attached(tk_context *ctx, const void *tag)
{
    void *data = NULL;
    if (!ctx)
        return NULL;
    pthread_mutex_lock(&ctx->attach_mu);
    for (const tk__attachment *x = ctx->attachments; x; x = x->next)
        if (x->tag == tag)
            data = x->data;
    pthread_mutex_unlock(&ctx->attach_mu);
    return data;
}

int tk__ctx_has_device(const tk_context *ctx)
{
    return ctx && ctx->has_device;
}

#define LOAD(field) __atomic_load_n(&ctx->field, __ATOMIC_RELAXED)
tk_status tk_context_get_stats(const tk_context *ctx, tk_context_stats *out)
{
    if (!ctx || tk__out_bad(out))
        return TK_INVALID_ARGUMENT;
    tk_context_stats s = {
        .struct_size = sizeof(tk_context_stats),
        .memory_hits = LOAD(n_memory_hits),
        .disk_hits = LOAD(n_disk_hits),
        .compiles = LOAD(n_compiles),
        .compile_failures = LOAD(n_compile_failures),
        .loads = LOAD(n_loads),
        .load_failures = LOAD(n_load_failures),
        .cache_errors = LOAD(n_cache_errors),
        .compile_seconds = (double)LOAD(compile_ns) / 1e9,
        .fallback_calls = LOAD(n_fallback_calls),
        .builds_queued = LOAD(n_builds_queued),
        .builds_done = LOAD(n_builds_done),
        .builds_pending = tk__builder_pending((tk_context *)ctx),
        .waits = LOAD(n_waits),
        .wait_seconds = (double)LOAD(wait_ns) / 1e9,
        .sync_compiles = LOAD(n_sync_compiles),
        .builds_failed = LOAD(n_builds_failed),
        .builds_dropped = LOAD(n_builds_dropped),
    };
    /* The remote tier's counters are kept by the cache handle. */
    tk__remote_counters rc;
    tk__cache_remote_counters(ctx->cache, &rc);
    s.remote_hits = rc.hits;
    s.remote_misses = rc.misses;
    s.remote_errors = rc.errors;
    s.remote_rejected = rc.rejected;
    s.remote_publishes = rc.publishes;
    s.workspace_bytes = LOAD(ws_bytes);
    s.workspace_peak = LOAD(ws_peak);
    s.workspace_allocs = LOAD(n_ws_allocs);
    tk__out_copy(out, &s, sizeof s);
    return TK_OK;
}
#undef LOAD

void tk__ctx_note_workspace(tk_context *ctx, size_t freed, size_t allocated)
{
    uint64_t now, peak;
    if (freed)
        __atomic_fetch_sub(&ctx->ws_bytes, (uint64_t)freed, __ATOMIC_RELAXED);
    if (!allocated)
        return;
    __atomic_fetch_add(&ctx->n_ws_allocs, 1, __ATOMIC_RELAXED);
    now = __atomic_add_fetch(&ctx->ws_bytes, (uint64_t)allocated, __ATOMIC_RELAXED);
    peak = __atomic_load_n(&ctx->ws_peak, __ATOMIC_RELAXED);
    while (now > peak && !__atomic_compare_exchange_n(&ctx->ws_peak, &peak, now, 1,
                                                      __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
}

void tk_context_reset_stats(tk_context *ctx)
{
    if (!ctx)
        return;
    hand_counts(ctx);
    uint64_t *fields[] = {&ctx->n_memory_hits,    &ctx->n_disk_hits,
                          &ctx->n_compiles,       &ctx->n_compile_failures,
                          &ctx->n_loads,          &ctx->n_load_failures,
                          &ctx->n_cache_errors,   &ctx->compile_ns,
                          &ctx->n_fallback_calls, &ctx->n_builds_queued,
                          &ctx->n_builds_done,    &ctx->n_waits,
                          &ctx->wait_ns,          &ctx->n_sync_compiles,
                          &ctx->n_builds_failed,  &ctx->n_builds_dropped};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        __atomic_store_n(fields[i], 0, __ATOMIC_RELAXED);
    __atomic_store_n(&ctx->n_ws_allocs, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&ctx->ws_peak, __atomic_load_n(&ctx->ws_bytes, __ATOMIC_RELAXED),
                     __ATOMIC_RELAXED);
    tk__cache_remote_reset_counters(ctx->cache);
}

/* ------------------------------------------------------------ tk_cache_open */

tk_status tk_cache_open(const tk_config *cfg, tk_cache **out)
{
    if (!out)
        return TK_INVALID_ARGUMENT;
    tk__cache_opts o;
    tk__remote_opts ro;
    char why[512];
    if (tk__env_remote_key_problem(cfg, why, sizeof why) != TK_OK) {
        if (cfg && cfg->log && TK_LOG_ERROR >= cfg->log_level)
            cfg->log(cfg->log_user, TK_LOG_ERROR, why);
        return TK_INVALID_ARGUMENT;
    }
    if (cfg) {
        fill_cache_opts(cfg, &o, &ro);
        o.log = cfg->log;
        o.log_user = cfg->log_user;
        tk__env_log_cache_problems(cfg->log, cfg->log_user, cfg->log_level);
    } else {
        memset(&o, 0, sizeof o);
    }
    return tk__cache_open(&o, out);
}

/* ---------------------------------------------------------- tk_backend_describe */

tk_status tk_backend_describe(tk_backend_kind kind, char *buf, size_t size)
{
    if (!buf || size == 0)
        return TK_INVALID_ARGUMENT;
    buf[0] = '\0';
    const tk__backend *be = tk__backend_for(kind);
    if (!be) {
        snprintf(buf, size, "no such backend (AUTO is not a backend)\n");
        return TK_INVALID_ARGUMENT;
    }
    tk__err e = {.msg = "", .log = NULL};
    tk_status st = be->describe(buf, size);
    tk_status ls = be->load(&e);
    if (ls != TK_OK) {
        tk__strcat_fmt(buf, size, "  unavailable: %s\n", e.msg);
        free(e.log);
        return ls;
    }
    char ident[256] = "";
    if (be->compiler_identity(ident, sizeof ident, &e) == TK_OK)
        tk__strcat_fmt(buf, size, "  compiler identity: %s\n", ident);
    else
        tk__strcat_fmt(buf, size, "  compiler: unavailable: %s\n", e.msg);
    int count = 0;
    st = be->device_count(&count, &e);
    if (st != TK_OK) {
        if (st == TK_BACKEND_UNAVAILABLE) /* the driver line above says why */
            tk__strcat_fmt(buf, size, "  devices: none (no driver)\n");
        else
            tk__strcat_fmt(buf, size, "  devices: unavailable: %s\n", e.msg);
        free(e.log);
        return st;
    }
    if (count == 0) {
        tk__strcat_fmt(buf, size, "  devices: none\n");
        free(e.log);
        return TK_NO_DEVICE;
    }
    for (int i = 0; i < count; i++) {
        void *dev = NULL;
        char target[256] = "";
        if (be->device_open(i, &dev, target, sizeof target, &e) == TK_OK) {
            tk__strcat_fmt(buf, size, "  device %d: %s\n", i, target);
            be->device_close(dev);
        } else {
            tk__strcat_fmt(buf, size, "  device %d: cannot open: %s\n", i, e.msg);
        }
    }
    free(e.log);
    return TK_OK;
}

/* ----------------------------------------------------------------- memory */

static tk_status need_device(tk_context *ctx, const char *what)
{
    if (!ctx)
        return TK_INVALID_ARGUMENT;
    if (!ctx->has_device)
        return tk__fail(ctx, TK_NO_DEVICE, "%s: the context has an offline target (%s), no device",
                        what, ctx->target);
    return TK_OK;
}

/* Binds the device on this thread; on failure records and returns the status. */
static tk_status bind(tk_context *ctx, tk__err *e)
{
    tk_status st = ctx->be->device_bind(ctx->dev, e);
    if (st != TK_OK)
        return tk__fail(ctx, st, "%s", e->msg);
    return TK_OK;
}

tk_status tk_mem_alloc(tk_context *ctx, size_t bytes, void **out)
{
    tk__err e;
    tk_status st = need_device(ctx, "tk_mem_alloc");
    if (st != TK_OK)
        return st;
    if (!out)
        return tk__fail(ctx, TK_INVALID_ARGUMENT, "tk_mem_alloc: out is NULL");
    if ((st = bind(ctx, &e)) != TK_OK)
        return st;
    void *p = NULL;
    st = ctx->be->mem_alloc(bytes, &p, &e);
    if (st != TK_OK)
        return tk__fail(ctx, st, "tk_mem_alloc(%zu): %s", bytes, e.msg);
    *out = p;
    return TK_OK;
}

tk_status tk_mem_free(tk_context *ctx, void *ptr)
{
    tk__err e;
    tk_status st = need_device(ctx, "tk_mem_free");
    if (st != TK_OK)
        return st;
    if (!ptr)
        return TK_OK;
    if ((st = bind(ctx, &e)) != TK_OK)
        return st;
    st = ctx->be->mem_free(ptr, &e);
    return st == TK_OK ? TK_OK : tk__fail(ctx, st, "tk_mem_free: %s", e.msg);
}

tk_status tk_mem_upload(tk_context *ctx, void *dst, const void *src, size_t bytes)
{
    tk__err e;
    tk_status st = need_device(ctx, "tk_mem_upload");
    if (st != TK_OK)
        return st;
    if (bytes == 0)
        return TK_OK;
    if (!dst || !src)
        return tk__fail(ctx, TK_INVALID_ARGUMENT, "tk_mem_upload: NULL pointer");
    if ((st = bind(ctx, &e)) != TK_OK)
        return st;
    st = ctx->be->mem_upload(dst, src, bytes, &e);
    return st == TK_OK ? TK_OK : tk__fail(ctx, st, "tk_mem_upload(%zu): %s", bytes, e.msg);
}

tk_status tk_mem_download(tk_context *ctx, void *dst, const void *src, size_t bytes)
{
    tk__err e;
    tk_status st = need_device(ctx, "tk_mem_download");
    if (st != TK_OK)
        return st;
    if (bytes == 0)
        return TK_OK;
    if (!dst || !src)
        return tk__fail(ctx, TK_INVALID_ARGUMENT, "tk_mem_download: NULL pointer");
    if ((st = bind(ctx, &e)) != TK_OK)
        return st;
    st = ctx->be->mem_download(dst, src, bytes, &e);
    return st == TK_OK ? TK_OK : tk__fail(ctx, st, "tk_mem_download(%zu): %s", bytes, e.msg);
}

tk_status tk_mem_set(tk_context *ctx, void *dst, unsigned char byte, size_t bytes)
{
    tk__err e;
    tk_status st = need_device(ctx, "tk_mem_set");
    if (st != TK_OK)
        return st;
    if (bytes == 0)
        return TK_OK;
    if (!dst)
        return tk__fail(ctx, TK_INVALID_ARGUMENT, "tk_mem_set: NULL pointer");
    if ((st = bind(ctx, &e)) != TK_OK)
        return st;
    st = ctx->be->mem_set(dst, byte, bytes, &e);
    return st == TK_OK ? TK_OK : tk__fail(ctx, st, "tk_mem_set(%zu): %s", bytes, e.msg);
}

tk_status tk_stream_sync(tk_context *ctx, void *stream)
{
    tk__err e;
    tk_status st = need_device(ctx, "tk_stream_sync");
    if (st != TK_OK)
        return st;
    if ((st = bind(ctx, &e)) != TK_OK)
        return st;
    st = ctx->be->stream_sync(stream, &e);
    return st == TK_OK ? TK_OK : tk__fail(ctx, st, "tk_stream_sync: %s", e.msg);
}

tk_status tk_time_on_stream(tk_context *ctx, void *stream, tk_timed_fn run, void *user,
                            float *out_ms)
{
    tk__err e;
    void *start = NULL, *stop = NULL;
    float ms = 0.0f;
    tk_status st = need_device(ctx, "tk_time_on_stream");
    if (st != TK_OK)
        return st;
    if (!run || !out_ms)
        return tk__fail(ctx, TK_INVALID_ARGUMENT, "tk_time_on_stream: NULL run or out_ms");
    if ((st = bind(ctx, &e)) != TK_OK)
        return st;
    if ((st = ctx->be->event_create(&start, &e)) != TK_OK ||
        (st = ctx->be->event_create(&stop, &e)) != TK_OK ||
        (st = ctx->be->event_record(start, stream, &e)) != TK_OK) {
        st = tk__fail(ctx, st, "tk_time_on_stream: %s", e.msg);
        goto done;
    }
    st = run(user);
    if (st != TK_OK)
        goto done; /* run recorded its own failure */
    if ((st = ctx->be->event_record(stop, stream, &e)) != TK_OK ||
        (st = ctx->be->event_elapsed(start, stop, &ms, &e)) != TK_OK) {
        st = tk__fail(ctx, st, "tk_time_on_stream: %s", e.msg);
        goto done;
    }
    *out_ms = ms;
done:
    if (start)
        ctx->be->event_destroy(start);
    if (stop)
        ctx->be->event_destroy(stop);
    return st;
}

/* ------------------------------------------------------------ test hooks */

tk_status tk__ctx_stream_create(tk_context *ctx, void **stream)
{
    tk__err e;
    tk_status st = need_device(ctx, "stream_create");
    if (st != TK_OK)
        return st;
    if ((st = bind(ctx, &e)) != TK_OK)
        return st;
    switch (ctx->be->kind) {
    case TK_BACKEND_CUDA:
        st = tk__cuda_stream_create(stream, &e);
        break;
    case TK_BACKEND_HIP:
        st = tk__hip_stream_create(stream, &e);
        break;
    default:
        *stream = (void *)(uintptr_t)0x5157;
        st = TK_OK;
        break;
    }
    return st == TK_OK ? TK_OK : tk__fail(ctx, st, "stream_create: %s", e.msg);
}

void tk__ctx_stream_destroy(tk_context *ctx, void *stream)
{
    tk__err e;
    if (!ctx || !ctx->has_device || !stream || bind(ctx, &e) != TK_OK)
        return;
    if (ctx->be->kind == TK_BACKEND_CUDA)
        tk__cuda_stream_destroy(stream);
    else if (ctx->be->kind == TK_BACKEND_HIP)
        tk__hip_stream_destroy(stream);
}
