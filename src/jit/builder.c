/*
 * Background builds: the operators' "never stall the caller for a better
 * kernel" (tk_build_mode, TK_BUILD_ASYNC).
 *
 * An operator call whose preferred kernel is neither in memory nor on disk
 * asks for it here (tk__kernel_get_or_queue in kernel.c) and runs on a more
 * generic kernel meanwhile. A request becomes a job: a deep copy of the
 * descriptor, queued (bounded: max_queue, beyond which requests are dropped,
 * not waited for) and remembered in a small hash set while queued, running or
 * failed, so that the same kernel is asked for once. Worker threads (at most
 * max_workers, started on demand, 1 on HIP: hipRTC serialises a process's
 * compiles anyway) take jobs in order and run the normal tk_kernel_get path:
 * in-process single flight, the disk cache's per-key lock (one compile per
 * key across processes), store, load into the memory table, where the next
 * call finds it. A finished job leaves the set; a failed one stays, so a
 * kernel that does not compile is not retried on every call (its failure is
 * logged once and counted).
 *
 * Teardown (tk_context_destroy): stopping is set, queued jobs are cancelled
 * (freed, counted), and the workers are joined; a worker in the middle of a
 * compile finishes that one compile first, so destroy returns after at most
 * one compile per worker. Workers touch the context only through its
 * thread-safe calls, and the context is freed after they are joined.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "jit/jit_internal.h"



#define N_BUCKETS 256u
#define DEFAULT_WORKERS 2
#define DEFAULT_QUEUE 64u

enum { JOB_QUEUED, JOB_RUNNING, JOB_FAILED };

struct tk__job {
    tk__job *next_queued; /* queue order */
    tk__job *next_known;  /* bucket chain */
    uint64_t h;
    int state;
    tk_kernel_desc desc; /* points into the copies below */
    char *source_name;
    char *entry;
    tk_define *defines;
    char **options;
};

static void job_free(tk__job *j)
{
    if (!j)
        return;
    free(j->source_name);
    free(j->entry);
    for (size_t i = 0; i < j->desc.n_defines; i++) {
        free((char *)j->defines[i].name);
        free((char *)j->defines[i].value);
    }
    free(j->defines);
    for (size_t i = 0; i < j->desc.n_options; i++)
        free(j->options[i]);
    free(j->options);
    free(j);
}

static char *dup_opt(const char *s, int *failed)
{
    char *c;
    if (!s)
        return NULL;
    c = strdup(s);
    if (!c)
        *failed = 1;
    return c;
}

static tk__job *job_new(const tk_kernel_desc *d, uint64_t h)
{
    int failed = 0;
    tk__job *j = calloc(1, sizeof *j);
    if (!j)
        return NULL;
    j->h = h;
    j->source_name = dup_opt(d->source_name, &failed);
    j->entry = dup_opt(d->entry, &failed);
    if (d->n_defines) {
        j->defines = calloc(d->n_defines, sizeof *j->defines);
        if (!j->defines)
            failed = 1;
        for (size_t i = 0; j->defines && i < d->n_defines; i++) {
            j->defines[i].name = dup_opt(d->defines[i].name, &failed);
            j->defines[i].value = dup_opt(d->defines[i].value, &failed);
        }
        j->desc.n_defines = j->defines ? d->n_defines : 0;
    }
    if (d->n_options) {
        j->options = calloc(d->n_options, sizeof *j->options);
        if (!j->options)
            failed = 1;
        for (size_t i = 0; j->options && i < d->n_options; i++)
            j->options[i] = dup_opt(d->options[i], &failed);
        j->desc.n_options = j->options ? d->n_options : 0;
    }
    j->desc.source_name = j->source_name;
    j->desc.entry = j->entry;
    j->desc.defines = j->defines;
    j->desc.options = (const char *const *)j->options;
    if (failed) {
        job_free(j);
        return NULL;
    }
    return j;
}

/* mu held */
static tk__job *known_find(tk__builder *b, uint64_t h, const tk_kernel_desc *d)
{
    if (!b->known)
        return NULL;
    for (tk__job *j = b->known[h % N_BUCKETS]; j; j = j->next_known)
        if (j->h == h && b->same(&j->desc, d))
            return j;
    return NULL;
}

/* mu held */
static void known_remove(tk__builder *b, tk__job *job)
{
    tk__job **p = &b->known[job->h % N_BUCKETS];
    while (*p && *p != job)
        p = &(*p)->next_known;
    if (*p)
        *p = job->next_known;
}

static void count(uint64_t *field, uint64_t n)
{
    __atomic_fetch_add(field, n, __ATOMIC_RELAXED);
}

tk_status tk__builder_init(tk_context *ctx, const tk_config *cfg,
                           tk_status (*build)(tk_context *, const tk_kernel_desc *, tk_kernel **),
                           int (*same)(const tk_kernel_desc *, const tk_kernel_desc *))
{
    tk__builder *b = &ctx->builder;
    memset(b, 0, sizeof *b);
    b->build = build;
    b->same = same;
    if (pthread_mutex_init(&b->mu, NULL) != 0)
        return TK_INTERNAL;
    if (pthread_cond_init(&b->work_cv, NULL) != 0) {
        pthread_mutex_destroy(&b->mu);
        return TK_INTERNAL;
    }
    if (pthread_cond_init(&b->idle_cv, NULL) != 0) {
        pthread_cond_destroy(&b->work_cv);
        pthread_mutex_destroy(&b->mu);
        return TK_INTERNAL;
    }
    b->max_workers = cfg->build_workers ? (int)cfg->build_workers : DEFAULT_WORKERS;
    b->max_queue = cfg->build_queue ? cfg->build_queue : DEFAULT_QUEUE;
    return TK_OK;
}

/* The backend is known only after the context opened it. */
static int workers_allowed(const tk_context *ctx)
{
    if (ctx->be && ctx->be->kind == TK_BACKEND_HIP)
        return 1;
    return ctx->builder.max_workers;
}

static void *worker_main(void *arg)
{
    tk_context *ctx = arg;
    tk__builder *b = &ctx->builder;
    tk__in_builder = 1;
    pthread_mutex_lock(&b->mu);
    for (;;) {
        while (!b->stopping && !b->head)
            pthread_cond_wait(&b->work_cv, &b->mu);
        if (b->stopping)
            break;
        tk__job *job = b->head;
        b->head = job->next_queued;
        if (!b->head)
            b->tail = NULL;
        b->n_queued--;
        b->n_running++;
        job->state = JOB_RUNNING;
        pthread_mutex_unlock(&b->mu);

        tk_kernel *k = NULL;
        tk_status st = b->build(ctx, &job->desc, &k);
        if (st != TK_OK)
            tk__log(ctx, TK_LOG_INFO,
                    "background build of %s (%s) failed: %s; calls keep using the generic "
                    "kernel",
                    job->desc.entry, job->desc.source_name ? job->desc.source_name : "user source",
                    tk_status_str(st));

        pthread_mutex_lock(&b->mu);
        b->n_running--;
        count(&ctx->n_builds_done, 1);
        if (st == TK_OK) {
            known_remove(b, job);
            job_free(job);
        } else {
            job->state = JOB_FAILED; /* stays known: not asked for again */
            count(&ctx->n_builds_failed, 1);
        }
        if (b->n_queued == 0 && b->n_running == 0)
            pthread_cond_broadcast(&b->idle_cv);
    }
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

/* 1 when desc is queued, running or has failed (the caller uses a fallback). */
int tk__builder_known(tk_context *ctx, uint64_t h, const tk_kernel_desc *desc)
{
    tk__builder *b = &ctx->builder;
    pthread_mutex_lock(&b->mu);
    int known = known_find(b, h, desc) != NULL;
    pthread_mutex_unlock(&b->mu);
    return known;
}

/* Queues a build of desc unless it is known, the queue is full or the
 * context is stopping. Starts a worker when all are busy. Never blocks on
 * a build. */
void tk__builder_request(tk_context *ctx, uint64_t h, const tk_kernel_desc *desc)
{
    tk__builder *b = &ctx->builder;
    pthread_mutex_lock(&b->mu);
    if (b->stopping || known_find(b, h, desc)) {
        pthread_mutex_unlock(&b->mu);
        return;
    }
    if (b->n_queued >= b->max_queue) {
        pthread_mutex_unlock(&b->mu);
        count(&ctx->n_builds_dropped, 1);
        return;
    }
    if (!b->known) {
        b->known = calloc(N_BUCKETS, sizeof *b->known);
        if (!b->known) {
            pthread_mutex_unlock(&b->mu);
            count(&ctx->n_builds_dropped, 1);
            return;
        }
    }
    tk__job *job = job_new(desc, h);
    if (!job) {
        pthread_mutex_unlock(&b->mu);
        count(&ctx->n_builds_dropped, 1);
        return;
    }
    job->state = JOB_QUEUED;
    job->next_known = b->known[h % N_BUCKETS];
    b->known[h % N_BUCKETS] = job;
    if (b->tail)
        b->tail->next_queued = job;
    else
        b->head = job;
    b->tail = job;
    b->n_queued++;
    count(&ctx->n_builds_queued, 1);
    if (b->n_workers < workers_allowed(ctx) && (size_t)b->n_workers < b->n_running + b->n_queued) {
        if (pthread_create(&b->workers[b->n_workers], NULL, worker_main, ctx) == 0)
            b->n_workers++;
        else
            tk__log(ctx, TK_LOG_WARN, "cannot start a background build thread (%s)",
                    strerror(errno));
    }
    if (b->n_workers == 0) {
        /* No thread at all: nothing would ever run the job. Forget it; the
         * caller keeps its fallback and a later call asks again. */
        b->head = b->tail = NULL;
        b->n_queued = 0;
        known_remove(b, job);
        job_free(job);
        count(&ctx->n_builds_dropped, 1);
    } else {
        pthread_cond_signal(&b->work_cv);
    }
    pthread_mutex_unlock(&b->mu);
}

uint64_t tk__builder_pending(tk_context *ctx)
{
    tk__builder *b = &ctx->builder;
    pthread_mutex_lock(&b->mu);
    uint64_t n = b->n_queued + b->n_running;
    pthread_mutex_unlock(&b->mu);
    return n;
}

void tk__builder_stop(tk_context *ctx)
{
    tk__builder *b = &ctx->builder;
    pthread_mutex_lock(&b->mu);
    b->stopping = 1;
    uint64_t cancelled = 0;
    while (b->head) {
        tk__job *job = b->head;
        b->head = job->next_queued;
        known_remove(b, job);
        job_free(job);
        cancelled++;
    }
    b->tail = NULL;
    b->n_queued = 0;
    pthread_cond_broadcast(&b->work_cv);
    pthread_cond_broadcast(&b->idle_cv);
    int n = b->n_workers;
    pthread_mutex_unlock(&b->mu);
    if (cancelled)
        tk__log(ctx, TK_LOG_INFO, "context destroyed with %llu background builds queued: cancelled",
                (unsigned long long)cancelled);
    for (int i = 0; i < n; i++)
        pthread_join(b->workers[i], NULL);
    pthread_mutex_lock(&b->mu);
    b->n_workers = 0;
    pthread_mutex_unlock(&b->mu);
}

void tk__builder_destroy(tk_context *ctx)
{
    tk__builder *b = &ctx->builder;
    if (b->known) {
        for (size_t i = 0; i < N_BUCKETS; i++) {
            tk__job *j = b->known[i];
            while (j) {
                tk__job *next = j->next_known;
                job_free(j);
                j = next;
            }
        }
        free(b->known);
        b->known = NULL;
    }
    pthread_cond_destroy(&b->idle_cv);
    pthread_cond_destroy(&b->work_cv);
    pthread_mutex_destroy(&b->mu);
}

tk_status tk_context_wait_builds(tk_context *ctx, int timeout_ms)
{
    if (!ctx)
        return TK_INVALID_ARGUMENT;
    tk__builder *b = &ctx->builder;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    if (timeout_ms >= 0) {
        until.tv_sec += timeout_ms / 1000;
        until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
    }
    tk_status st = TK_OK;
    pthread_mutex_lock(&b->mu);
    while (!b->stopping && b->n_queued + b->n_running > 0) {
        if (timeout_ms < 0) {
            pthread_cond_wait(&b->idle_cv, &b->mu);
        } else if (pthread_cond_timedwait(&b->idle_cv, &b->mu, &until) == ETIMEDOUT) {
            if (b->n_queued + b->n_running > 0)
                st = TK_TIMEOUT;
            break;
        }
    }
    pthread_mutex_unlock(&b->mu);
    return st;
}
