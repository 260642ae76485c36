/*
 * --precompile: compile every specialisation a manifest names, for every
 * target, into the cache.
 *
 * The parent process never loads a vendor runtime: a vendor runtime that has
 * started threads does not survive fork(), and hipRTC serialises compiles of
 * threads within one process anyway. Targets are checked in a short-lived
 * probe process, then N worker processes take jobs one at a time from the
 * parent over pipes and report back (counts, time, the compiler log of a
 * failure).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "common/env_vars.h"
#include "common/file_id.h"
#include "manifest.h"

/* Offline targets used when neither --arch, the manifest nor a device says. */
static const char *const default_targets[] = {"sm_80", "sm_90", "gfx90a", "gfx1030"};

typedef struct target {
    char *name;  /* as requested */
    char *canon; /* full target id from the library */
    tk_backend_kind backend;
    int line; /* manifest line, 0 if not from the manifest */
    int usable;
} target;

/* One unit of work: a manifest job for one target under one policy. */
typedef struct item {
    uint32_t job;
    uint16_t target;
    uint8_t policy;
} item;

/* A job's result; then log_len bytes of log, then the keys (32 hex digits
 * each) of the kernels it compiled, then of those it found in the cache. */
typedef struct result_hdr {
    uint32_t item;
    int32_t status;
    uint32_t compiled; /* lookups of the job, as the library counts them */
    uint32_t cached;
    double seconds;
    uint32_t log_len;
    uint32_t published; /* values the job's compiles sent to the remote */
    uint32_t remote_errors;
    uint32_t n_compiled_keys;
    uint32_t n_found_keys;
} result_hdr;

typedef struct run_state {
    const tk__cli_opts *opts;
    tk__manifest m;
    target *targets;
    size_t n_targets;
    unsigned policies;  /* default for jobs without their own */
    int mixed_policies; /* items under both policies: name the policy */
    item *items;
    size_t n_items;
    /* Workers compile user kernels in the manifest's folder (manifest.h);
     * the cache's folders, made absolute, stay where they were. NULL: the
     * library's own choice. */
    char *cache_dir;
    char *cache_lower;
} run_state;

/* ----------------------------------------------------------- low-level io */

static int write_all(int fd, const void *data, size_t len)
{
    const char *p = data;
    while (len) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

/* 1: read len bytes, 0: end of file before any byte, -1: error or short. */
static int read_all(int fd, void *data, size_t len)
{
    char *p = data;
    size_t got = 0;
    while (got < len) {
        ssize_t r = read(fd, p + got, len - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            return got == 0 ? 0 : -1;
        got += (size_t)r;
    }
    return 1;
}

static void sanitize(char *s)
{
    for (; *s; s++)
        if (*s == '\n' || *s == '\t' || *s == '\r')
            *s = ' ';
}

static tk_backend_kind backend_from_name(const char *name)
{
    if (strcmp(name, "cuda") == 0)
        return TK_BACKEND_CUDA;
    if (strcmp(name, "hip") == 0)
        return TK_BACKEND_HIP;
    if (strcmp(name, "stub") == 0)
        return TK_BACKEND_STUB;
    return TK_BACKEND_AUTO;
}

static const char *policy_name(int policy)
{
    return policy == TK_POLICY_GENERIC  ? "generic"
           : policy == TK_POLICY_STABLE ? "stable"
                                        : "exact";
}

/* A config for an offline-target context (target NULL: the device). */
static tk_config *target_config(const tk__cli_opts *opts, const target *t, int policy)
{
    tk_config *cfg = tk__cli_config(opts);
    if (!cfg)
        return NULL;
    if (t) {
        if (tk_config_set_backend(cfg, t->backend) != TK_OK ||
            tk_config_set_target(cfg, t->canon ? t->canon : t->name) != TK_OK) {
            tk_config_destroy(cfg);
            return NULL;
        }
    }
    if (tk_config_set_policy(cfg, (tk_policy)policy) != TK_OK) {
        tk_config_destroy(cfg);
        return NULL;
    }
    return cfg;
}

/* A worker's config: target_config with the cache's folders absolute. */
static tk_config *worker_config(const run_state *s, const target *t, int policy)
{
    tk_config *cfg = target_config(s->opts, t, policy);
    if (cfg && ((s->cache_dir && tk_config_set_cache_dir(cfg, s->cache_dir) != TK_OK) ||
                (s->cache_lower && tk_config_set_cache_lower(cfg, s->cache_lower) != TK_OK))) {
        tk_config_destroy(cfg);
        return NULL;
    }
    return cfg;
}

/* path made absolute against the working folder (malloc'd; NULL when out
 * of memory or the working folder is unknown). */
static char *absolute(const char *path)
{
    if (path[0] == '/')
        return strdup(path);
    char *cwd = getcwd(NULL, 0);
    if (!cwd)
        return NULL;
    size_t n = strlen(cwd) + strlen(path) + 2;
    char *out = malloc(n);
    if (out)
        snprintf(out, n, "%s/%s", cwd, path);
    free(cwd);
    return out;
}

/* Before the workers go into the manifest's folder: the cache root and
 * the read-only tiers of TOKITAI_JIT_CACHE_PATH as absolute paths. -1
 * (errno set) when the working folder is unknown or memory short. */
static int pin_cache_folders(run_state *s, const char *root)
{
    if (!s->m.base_dir || !s->m.n_kernels)
        return 0; /* nothing leaves the working folder */
    if (root[0] && !(s->cache_dir = absolute(root)))
        return -1;
    const char *lower = tk__env_get(TK__ENV_CACHE_PATH);
    if (!lower)
        return 0;
    size_t cap = strlen(lower) + 1, len = 0;
    char *cwd = getcwd(NULL, 0);
    if (!cwd)
        return -1;
    cap += (strlen(cwd) + 1) * (size_t)(1 + (int)strlen(lower));
    char *out = malloc(cap);
    if (!out) {
        free(cwd);
        return -1;
    }
    out[0] = 0;
    for (const char *p = lower; *p;) {
        size_t n = strcspn(p, ":");
        /* the words "none" and "shipped" stay words */
        const int word =
            (n == 4 && strncmp(p, "none", 4) == 0) || (n == 7 && strncmp(p, "shipped", 7) == 0);
        const int as_is = p[0] == '/' || word;
        if (n)
            len += (size_t)snprintf(out + len, cap - len, "%s%s%s%.*s", len ? ":" : "",
                                    as_is ? "" : cwd, as_is ? "" : "/", (int)n, p);
        p += n;
        if (*p == ':')
            p++;
    }
    free(cwd);
    s->cache_lower = out;
    return 0;
}

/* ------------------------------------------------------------------ probe */

/* Child: one line per target, "OK <i> <canon>" or "ERR <i> <status> <why>";
 * with no target, "DEV <target> <backend>" or "NODEV <status> <why>". */
static void probe_child(const run_state *s, int fd)
{
    char line[4096];
    if (s->n_targets == 0) {
        /* Every device of the first backend that has one. */
        for (int ordinal = 0; ordinal < 64; ordinal++) {
            tk_config *cfg = target_config(s->opts, NULL, TK_POLICY_EXACT);
            tk_context *ctx = NULL;
            char why[1024] = "";
            tk_status st = TK_OUT_OF_MEMORY;
            if (cfg && tk_config_set_device(cfg, ordinal) == TK_OK)
                st = tk_context_create(cfg, &ctx, why, sizeof why);
            if (st == TK_OK) {
                char tgt[512];
                snprintf(tgt, sizeof tgt, "%s", tk_context_target(ctx));
                sanitize(tgt);
                snprintf(line, sizeof line, "DEV\t%s\t%s\n", tgt, tk_context_backend_name(ctx));
            } else if (ordinal == 0) {
                sanitize(why);
                snprintf(line, sizeof line, "NODEV\t%d\t%s\n", (int)st, why);
            }
            tk_context_destroy(ctx);
            tk_config_destroy(cfg);
            if (st != TK_OK && ordinal > 0)
                break;
            write_all(fd, line, strlen(line));
            if (st != TK_OK)
                break;
        }
        return;
    }
    for (size_t i = 0; i < s->n_targets; i++) {
        const target *t = &s->targets[i];
        tk_config *cfg = target_config(s->opts, t, TK_POLICY_EXACT);
        tk_context *ctx = NULL;
        char why[1024] = "";
        tk_status st = cfg ? tk_context_create(cfg, &ctx, why, sizeof why) : TK_OUT_OF_MEMORY;
        if (st == TK_OK) {
            char canon[512];
            snprintf(canon, sizeof canon, "%s", tk_context_target(ctx));
            sanitize(canon);
            snprintf(line, sizeof line, "OK\t%zu\t%s\n", i, canon);
        } else {
            if (!why[0])
                snprintf(why, sizeof why, "%s", tk_status_str(st));
            sanitize(why);
            snprintf(line, sizeof line, "ERR\t%zu\t%d\t%s\n", i, (int)st, why);
        }
        tk_context_destroy(ctx);
        tk_config_destroy(cfg);
        write_all(fd, line, strlen(line));
    }
}

/* Runs probe_child in a child process; returns its output (malloc'd) or NULL. */
static char *probe(const run_state *s)
{
    int fds[2];
    if (pipe(fds) != 0)
        return NULL;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]), close(fds[1]);
        return NULL;
    }
    if (pid == 0) {
        close(fds[0]);
        probe_child(s, fds[1]);
        close(fds[1]);
        _exit(0);
    }
    close(fds[1]);
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (len + 1 == cap) {
            char *g = realloc(buf, cap * 2);
            if (!g) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = g, cap *= 2;
        }
        ssize_t r = read(fds[0], buf + len, cap - len - 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        len += (size_t)r;
    }
    close(fds[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (buf)
        buf[len] = 0;
    if (buf && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
        tk__cli_error("the target probe process died (%s %d)",
                      WIFSIGNALED(status) ? "signal" : "status",
                      WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
        free(buf);
        return NULL;
    }
    return buf;
}

static int add_target(run_state *s, const char *name, int line)
{
    for (size_t i = 0; i < s->n_targets; i++)
        if (strcmp(s->targets[i].name, name) == 0)
            return 0;
    target *t = realloc(s->targets, (s->n_targets + 1) * sizeof *t);
    if (!t)
        return -1;
    s->targets = t;
    t = &s->targets[s->n_targets];
    memset(t, 0, sizeof *t);
    if (!(t->name = strdup(name)))
        return -1;
    t->backend = tk__target_backend(name);
    t->line = line;
    s->n_targets++;
    return 0;
}

static const char *target_where(const run_state *s, const target *t, char *buf, size_t size)
{
    if (t->line)
        snprintf(buf, size, " (%s:%d)", s->m.name, t->line);
    else
        buf[0] = 0;
    return buf;
}

/* Decides the targets and checks each with the installed compilers.
 * Returns an exit code (TK__EXIT_OK to go on). */
static int resolve_targets(run_state *s)
{
    const tk__cli_opts *o = s->opts;
    int defaults = 0;
    if (o->arch_list) {
        char *copy = strdup(o->arch_list);
        if (!copy)
            return TK__EXIT_FAIL;
        char *save = NULL;
        for (char *a = strtok_r(copy, ", ", &save); a; a = strtok_r(NULL, ", ", &save)) {
            if (!tk__target_name_valid(a)) {
                tk__cli_error("--arch: unknown target architecture '%s' (examples: sm_80, sm_90, "
                              "gfx90a, gfx1030)",
                              a);
                free(copy);
                return TK__EXIT_USAGE;
            }
            if (add_target(s, a, 0)) {
                free(copy);
                return TK__EXIT_FAIL;
            }
        }
        free(copy);
        if (s->n_targets == 0) {
            tk__cli_error("--arch: empty list");
            return TK__EXIT_USAGE;
        }
    } else if (s->m.n_archs) {
        for (size_t i = 0; i < s->m.n_archs; i++)
            if (add_target(s, s->m.archs[i], s->m.arch_lines[i]))
                return TK__EXIT_FAIL;
    } else {
        /* No target named: the device if there is one. */
        char *out = probe(s);
        if (!out)
            return TK__EXIT_FAIL;
        if (strncmp(out, "DEV\t", 4) == 0) {
            for (char *line = out; strncmp(line, "DEV\t", 4) == 0;) {
                char *tgt = line + 4;
                char *tab = strchr(tgt, '\t');
                char *nl = tab ? strchr(tab + 1, '\n') : NULL;
                if (!tab || !nl) {
                    free(out);
                    tk__cli_error("the target probe said something unexpected");
                    return TK__EXIT_FAIL;
                }
                *tab = 0, *nl = 0;
                size_t before = s->n_targets;
                if (add_target(s, tgt, 0)) {
                    free(out);
                    return TK__EXIT_FAIL;
                }
                if (s->n_targets > before) {
                    s->targets[before].backend = backend_from_name(tab + 1);
                    printf("targeting the device present: %s (%s)\n", tgt, tab + 1);
                }
                line = nl + 1;
            }
        } else {
            defaults = 1;
            for (size_t i = 0; i < sizeof default_targets / sizeof default_targets[0]; i++)
                if (add_target(s, default_targets[i], 0)) {
                    free(out);
                    return TK__EXIT_FAIL;
                }
        }
        free(out);
    }

    char *out = probe(s);
    if (!out)
        return TK__EXIT_FAIL;
    int rc = TK__EXIT_OK;
    size_t usable = 0;
    for (char *line = out; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = 0;
        /* Up to 4 tab-separated fields; the last one keeps any tabs. */
        char *f[4] = {line, NULL, NULL, NULL};
        for (int i = 1; i < 4; i++) {
            char *tab = f[i - 1] ? strchr(f[i - 1], '\t') : NULL;
            if (!tab)
                break;
            *tab = 0;
            f[i] = tab + 1;
        }
        size_t idx = f[1] ? strtoul(f[1], NULL, 10) : s->n_targets;
        if (idx < s->n_targets) {
            target *t = &s->targets[idx];
            char where[256];
            if (strcmp(f[0], "OK") == 0 && f[2]) {
                t->canon = strdup(f[2]);
                t->usable = t->canon != NULL;
                usable += t->usable;
            } else if (strcmp(f[0], "ERR") == 0) {
                tk_status st = f[2] ? (tk_status)atoi(f[2]) : TK_INTERNAL;
                const char *why = f[3] ? f[3] : tk_status_str(st);
                if (defaults) {
                    printf("skipping %s: %s\n", t->name, why);
                } else {
                    tk__cli_error("target %s%s: %s", t->name,
                                  target_where(s, t, where, sizeof where), why);
                    if (rc == TK__EXIT_OK)
                        rc = st == TK_INVALID_ARGUMENT ? TK__EXIT_USAGE : TK__EXIT_UNAVAILABLE;
                }
            }
        }
        line = nl ? nl + 1 : NULL;
    }
    free(out);
    if (rc != TK__EXIT_OK)
        return rc;
    if (usable == 0) {
        tk__cli_error("no target can be compiled for here (no GPU, and no compiler for %s)",
                      defaults ? "sm_80, sm_90, gfx90a or gfx1030" : "the targets named");
        return TK__EXIT_UNAVAILABLE;
    }
    /* Keep the usable ones. */
    size_t k = 0;
    for (size_t i = 0; i < s->n_targets; i++) {
        if (s->targets[i].usable) {
            s->targets[k++] = s->targets[i];
        } else {
            free(s->targets[i].name);
            free(s->targets[i].canon);
        }
    }
    s->n_targets = k;
    return TK__EXIT_OK;
}

/* ----------------------------------------------------------------- worker */

/* Keys of one job's kernels, from the library's log: it ends the messages
 * on a compile ("compiled ...", info) and on a cache hit ("found ...",
 * debug) with ", key <32 hex digits>". Jobs share kernels (every token
 * count of a GEMM line, the fallbacks), so the parent counts distinct
 * keys, not lookups. */
typedef struct key_list {
    char (*v)[32];
    size_t n, cap;
} key_list;

typedef struct worker_log {
    key_list compiled, found;
    int failed;     /* out of memory: the keys are incomplete */
    int echo_level; /* messages at or above it go to stderr; -1: none */
} worker_log;

static void key_add(worker_log *w, key_list *l, const char *hex)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        char(*v)[32] = realloc(l->v, cap * sizeof *v);
        if (!v) {
            w->failed = 1;
            return;
        }
        l->v = v, l->cap = cap;
    }
    memcpy(l->v[l->n++], hex, 32);
}

static const char *log_level_name(tk_log_level level)
{
    return level == TK_LOG_DEBUG  ? "debug"
           : level == TK_LOG_INFO ? "info"
           : level == TK_LOG_WARN ? "warn"
                                  : "error";
}

static void worker_log_fn(void *user, tk_log_level level, const char *msg)
{
    worker_log *w = user;
    size_t len = strlen(msg);
    const char *k = len > 38 ? msg + len - 38 : NULL; /* ", key " and 32 digits end it */
    if (k && strncmp(k, ", key ", 6) == 0 && strspn(k + 6, "0123456789abcdef") == 32) {
        if (strncmp(msg, "compiled ", 9) == 0)
            key_add(w, &w->compiled, k + 6);
        else if (strncmp(msg, "found ", 6) == 0)
            key_add(w, &w->found, k + 6);
    }
    /* What the library would have written itself without this callback. */
    if (w->echo_level >= 0 && (int)level >= w->echo_level)
        fprintf(stderr, "tokitai-jit: %s: %s\n", log_level_name(level), msg);
}

/* The level TOKITAI_JIT_LOG asks the library to write to stderr, read as
 * the library reads it (src/common/env_vars.h); -1: none. */
static int env_log_level(void)
{
    /* The row's words in order: 0 1 debug info warn error. */
    static const int levels[] = {-1,          TK_LOG_INFO, TK_LOG_DEBUG,
                                 TK_LOG_INFO, TK_LOG_WARN, TK_LOG_ERROR};
    return levels[tk__env_word(TK__ENV_LOG, 0)];
}

/* Values of tk_policy (EXACT, GENERIC, STABLE). */
#define N_POLICIES 3

static void worker_main(const run_state *s, int cmd_fd, int res_fd)
{
    /* one context per target and policy (tk_policy: 3 values) */
    size_t n_ctx = s->n_targets * N_POLICIES;
    tk_context **ctxs = calloc(n_ctx, sizeof *ctxs);
    worker_log wl;
    memset(&wl, 0, sizeof wl);
    wl.echo_level = env_log_level();
    /* user kernels are compiled in the manifest's folder; jobs start here */
    int home = s->m.base_dir ? open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1, lost_home = 0;
    if (!ctxs || (s->m.base_dir && home < 0))
        _exit(1);
    for (;;) {
        uint32_t idx;
        if (read_all(cmd_fd, &idx, sizeof idx) != 1 || idx >= s->n_items)
            break;
        const item *it = &s->items[idx];
        const tk__mf_job *job = &s->m.jobs[it->job];
        const target *t = &s->targets[it->target];
        result_hdr r;
        memset(&r, 0, sizeof r);
        r.item = idx;
        char *log = NULL;
        char why[1024] = "";
        double t0 = tk__now();
        tk_context **slot = &ctxs[(size_t)it->target * N_POLICIES + it->policy];
        tk_context_stats before = TK_STRUCT_INIT(tk_context_stats);
        if (*slot)
            tk_context_get_stats(*slot, &before);
        tk_status st = TK_OK;
        wl.compiled.n = wl.found.n = 0;
        wl.failed = 0;
        if (!*slot) {
            tk_config *cfg = worker_config(s, t, it->policy);
            if (cfg && (tk_config_set_log(cfg, worker_log_fn, &wl) != TK_OK ||
                        tk_config_set_log_level(cfg, TK_LOG_DEBUG) != TK_OK)) {
                tk_config_destroy(cfg);
                cfg = NULL;
            }
            st = cfg ? tk_context_create(cfg, slot, why, sizeof why) : TK_OUT_OF_MEMORY;
            tk_config_destroy(cfg);
            if (st != TK_OK) {
                *slot = NULL;
                log = strdup(why[0] ? why : tk_status_str(st));
            }
        }
        if (st == TK_OK) {
            if (job->kernel < 0) {
                unsigned nc = 0, nh = 0;
                st = job->fallbacks
                         ? tk_op_precompile_fallbacks(*slot, job->op, &nc, &nh)
                         : tk_op_precompile(*slot, job->op, job->dims, job->n_dims, &nc, &nh);
                r.compiled = nc, r.cached = nh;
            } else {
                const tk__mf_kernel *k = &s->m.kernels[job->kernel];
                tk_kernel_desc d;
                memset(&d, 0, sizeof d);
                d.source = k->source;
                d.entry = k->entry;
                d.defines = k->defines;
                d.n_defines = k->n_defines;
                d.options = (const char *const *)k->options;
                d.n_options = k->n_options;
                /* Compiler messages name the file as the manifest does (a
                 * path with a quote or a backslash keeps the default name). */
                if (!strpbrk(k->file, "\"\\\r\n"))
                    d.source_label = k->file;
                tk_origin origin = TK_ORIGIN_COMPILED;
                if (s->m.base_dir && chdir(s->m.base_dir) != 0) {
                    st = TK_IO_ERROR;
                    snprintf(why, sizeof why, "cannot enter the manifest's folder %s: %s",
                             s->m.base_dir, strerror(errno));
                    log = strdup(why);
                } else {
                    st = tk_kernel_precompile(*slot, &d, &origin);
                    if (st != TK_OK)
                        log = strdup(tk_context_last_error(*slot));
                    if (s->m.base_dir && fchdir(home) != 0)
                        lost_home = 1; /* the next job would run in the wrong folder */
                }
                if (st == TK_OK) {
                    r.compiled = origin == TK_ORIGIN_COMPILED;
                    r.cached = origin != TK_ORIGIN_COMPILED;
                }
            }
            if (st != TK_OK && !log)
                log = strdup(tk_context_last_error(*slot));
            tk_context_stats after = TK_STRUCT_INIT(tk_context_stats);
            if (tk_context_get_stats(*slot, &after) == TK_OK) {
                r.published = (uint32_t)(after.remote_publishes - before.remote_publishes);
                r.remote_errors = (uint32_t)(after.remote_errors - before.remote_errors);
            }
        }
        if (st == TK_OK && wl.failed) {
            st = TK_OUT_OF_MEMORY;
            free(log);
            log = strdup("out of memory recording the kernels' keys");
        }
        r.status = (int32_t)st;
        r.seconds = tk__now() - t0;
        r.log_len = log ? (uint32_t)strlen(log) : 0;
        r.n_compiled_keys = (uint32_t)wl.compiled.n;
        r.n_found_keys = (uint32_t)wl.found.n;
        if (write_all(res_fd, &r, sizeof r) != 0 ||
            (r.log_len && write_all(res_fd, log, r.log_len)) ||
            (wl.compiled.n && write_all(res_fd, wl.compiled.v, wl.compiled.n * 32)) ||
            (wl.found.n && write_all(res_fd, wl.found.v, wl.found.n * 32)))
            break;
        free(log);
        if (lost_home)
            break; /* cannot go back: the parent reports the job it hands next */
    }
    if (home >= 0)
        close(home);
    for (size_t i = 0; i < n_ctx; i++)
        tk_context_destroy(ctxs[i]);
    free(ctxs);
    free(wl.compiled.v);
    free(wl.found.v);
}

/* ----------------------------------------------------------------- parent */

typedef struct worker {
    pid_t pid;
    int cmd_fd;   /* parent writes item indices */
    int res_fd;   /* parent reads results */
    int64_t busy; /* item index, -1 when idle */
    int alive;
} worker;

typedef struct failure {
    size_t item;
    tk_status status;
    char *log;
} failure;

/* The distinct kernels of the run, by key: compiled by it, or found in
 * the cache and never compiled by it. */
typedef struct kslot {
    char hex[32];
    unsigned char used, compiled;
} kslot;

typedef struct kernel_set {
    kslot *v;
    size_t n, cap; /* cap: a power of two */
    uint64_t compiled, cached;
    int failed; /* out of memory: the counts are low */
} kernel_set;

static int kernel_set_grow(kernel_set *ks)
{
    size_t cap = ks->cap ? ks->cap * 2 : 1024;
    kslot *v = calloc(cap, sizeof *v);
    if (!v)
        return -1;
    for (size_t i = 0; i < ks->cap; i++) {
        if (!ks->v[i].used)
            continue;
        uint64_t h = 1469598103934665603ull;
        for (int c = 0; c < 32; c++)
            h = (h ^ (unsigned char)ks->v[i].hex[c]) * 1099511628211ull;
        size_t j = (size_t)h & (cap - 1);
        while (v[j].used)
            j = (j + 1) & (cap - 1);
        v[j] = ks->v[i];
    }
    free(ks->v);
    ks->v = v, ks->cap = cap;
    return 0;
}

static void kernel_set_add(kernel_set *ks, const char *hex, int compiled)
{
    if ((ks->n + 1) * 2 > ks->cap && kernel_set_grow(ks) != 0) {
        ks->failed = 1;
        return;
    }
    uint64_t h = 1469598103934665603ull;
    for (int c = 0; c < 32; c++)
        h = (h ^ (unsigned char)hex[c]) * 1099511628211ull;
    size_t j = (size_t)h & (ks->cap - 1);
    while (ks->v[j].used && memcmp(ks->v[j].hex, hex, 32) != 0)
        j = (j + 1) & (ks->cap - 1);
    kslot *k = &ks->v[j];
    if (!k->used) {
        memcpy(k->hex, hex, 32);
        k->used = 1;
        k->compiled = (unsigned char)compiled;
        ks->n++;
        if (compiled)
            ks->compiled++;
        else
            ks->cached++;
    } else if (compiled && !k->compiled) {
        /* found by one job, then compiled by another (its entry was
         * replaced meanwhile): a compile of this run */
        k->compiled = 1;
        ks->cached--;
        ks->compiled++;
    }
}

static int kernel_set_has(const kernel_set *ks, const char *hex)
{
    if (!ks->cap)
        return 0;
    uint64_t h = 1469598103934665603ull;
    for (int c = 0; c < 32; c++)
        h = (h ^ (unsigned char)hex[c]) * 1099511628211ull;
    for (size_t j = (size_t)h & (ks->cap - 1); ks->v[j].used; j = (j + 1) & (ks->cap - 1))
        if (memcmp(ks->v[j].hex, hex, 32) == 0)
            return 1;
    return 0;
}

/* --prune-others: the user tier's entries the run did not compile or find. */
static int not_in_run(void *user, const tk_cache_entry_info *info)
{
    return !info->read_only_tier && info->key_hex && strlen(info->key_hex) == 32 &&
           !kernel_set_has(user, info->key_hex);
}

typedef struct progress {
    int tty;
    int verbose;
    size_t done, total;
    uint64_t failed; /* jobs */
    kernel_set kernels;
    double t_start; /* for the elapsed time and the estimate */
} progress;

/* "1h02m", "3m07s", "12s". */
static const char *fmt_secs(double t, char *buf, size_t size)
{
    long s = t < 0 ? 0 : (long)(t + 0.5);
    if (s >= 3600)
        snprintf(buf, size, "%ldh%02ldm", s / 3600, s / 60 % 60);
    else if (s >= 60)
        snprintf(buf, size, "%ldm%02lds", s / 60, s % 60);
    else
        snprintf(buf, size, "%lds", s);
    return buf;
}

static void describe_item(const run_state *s, const item *it, char *buf, size_t size)
{
    char job[256];
    tk__mf_job_describe(&s->m, &s->m.jobs[it->job], job, sizeof job);
    const target *t = &s->targets[it->target];
    if (!s->mixed_policies)
        snprintf(buf, size, "%s %s", t->canon, job);
    else
        snprintf(buf, size, "%s %s [%s]", t->canon, job, policy_name(it->policy));
}

static void show_progress(const run_state *s, progress *p, const item *it, const result_hdr *r)
{
    char what[512];
    describe_item(s, it, what, sizeof what);
    if (p->tty && !p->verbose) {
        struct winsize ws;
        int cols = 80;
        if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 20)
            cols = ws.ws_col;
        const int bar = 20;
        int filled = p->total ? (int)((double)bar * (double)p->done / (double)p->total) : bar;
        char line[1024], el[32], left[48], failed[48];
        double elapsed = tk__now() - p->t_start;
        /* The estimate: the mean time of a job so far, for the jobs left. */
        if (p->done && p->done < p->total) {
            char l[32];
            snprintf(
                left, sizeof left, " ~%s left",
                fmt_secs(elapsed / (double)p->done * (double)(p->total - p->done), l, sizeof l));
        } else {
            left[0] = 0;
        }
        if (p->failed)
            snprintf(failed, sizeof failed, ", %llu failed", (unsigned long long)p->failed);
        else
            failed[0] = 0;
        /* the counts first: a narrow terminal cuts the job's name */
        int n = snprintf(
            line, sizeof line, "[%.*s%.*s] %zu/%zu jobs%s  %s%s  %llu new, %llu cached kernels  %s",
            filled, "####################", bar - filled, "....................", p->done, p->total,
            failed, fmt_secs(elapsed, el, sizeof el), left, (unsigned long long)p->kernels.compiled,
            (unsigned long long)p->kernels.cached, what);
        if (n >= cols)
            line[cols - 1] = 0;
        printf("\r\033[K%s", line);
        fflush(stdout);
        return;
    }
    int width = snprintf(NULL, 0, "%zu", p->total);
    if (r->status != TK_OK)
        printf("[%*zu/%zu] %s: FAILED (%s)\n", width, p->done, p->total, what,
               tk_status_str((tk_status)r->status));
    else if (r->compiled)
        printf("[%*zu/%zu] %s: compiled %u, found %u in the cache (%.2f s)\n", width, p->done,
               p->total, what, r->compiled, r->cached, r->seconds);
    else if (!r->cached)
        printf("[%*zu/%zu] %s: no kernels\n", width, p->done, p->total, what);
    else
        printf("[%*zu/%zu] %s: already cached\n", width, p->done, p->total, what);
    fflush(stdout);
}

static int spawn_worker(const run_state *s, worker *ws, size_t k)
{
    int cmd[2], res[2];
    if (pipe(cmd) != 0)
        return -1;
    if (pipe(res) != 0) {
        close(cmd[0]), close(cmd[1]);
        return -1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(cmd[0]), close(cmd[1]), close(res[0]), close(res[1]);
        return -1;
    }
    if (pid == 0) {
        /* Drop the parent's ends of the other workers' pipes, so that each
         * worker sees end-of-file when the parent closes its command pipe. */
        for (size_t i = 0; i < k; i++) {
            if (ws[i].cmd_fd >= 0)
                close(ws[i].cmd_fd);
            if (ws[i].res_fd >= 0)
                close(ws[i].res_fd);
        }
        close(cmd[1]), close(res[0]);
        signal(SIGPIPE, SIG_DFL);
        worker_main(s, cmd[0], res[1]);
        _exit(0);
    }
    close(cmd[0]), close(res[1]);
    ws[k].pid = pid;
    ws[k].cmd_fd = cmd[1];
    ws[k].res_fd = res[0];
    ws[k].busy = -1;
    ws[k].alive = 1;
    return 0;
}

static void retire_worker(worker *w)
{
    if (w->cmd_fd >= 0)
        close(w->cmd_fd);
    if (w->res_fd >= 0)
        close(w->res_fd);
    w->cmd_fd = w->res_fd = -1;
    if (w->pid > 0) {
        int status;
        while (waitpid(w->pid, &status, 0) < 0 && errno == EINTR)
            ;
    }
    w->pid = 0;
    w->alive = 0;
}

static int record_failure(failure **fails, size_t *n_fails, size_t item_idx, tk_status st,
                          char *log)
{
    failure *f = realloc(*fails, (*n_fails + 1) * sizeof *f);
    if (!f) {
        free(log);
        return -1;
    }
    *fails = f;
    f[*n_fails].item = item_idx;
    f[*n_fails].status = st;
    f[*n_fails].log = log;
    (*n_fails)++;
    return 0;
}

/* Runs the items; *kept (when not NULL) gets the run's kernels when every
 * job succeeded and every key was counted (else it stays empty). */
static int execute(run_state *s, int n_workers, double t_start, const char *root,
                   uint64_t *n_compiled, uint64_t *n_published, uint64_t *n_remote_errors,
                   kernel_set *kept)
{
    worker *ws = calloc((size_t)n_workers, sizeof *ws);
    failure *fails = NULL;
    size_t n_fails = 0;
    progress p;
    memset(&p, 0, sizeof p);
    p.tty = isatty(STDOUT_FILENO);
    p.verbose = s->opts->verbose;
    p.total = s->n_items;
    p.t_start = t_start;
    size_t next = 0;
    int alive = 0;
    if (!ws) {
        tk__cli_error("out of memory");
        return TK__EXIT_FAIL;
    }
    for (int k = 0; k < n_workers; k++)
        ws[k].cmd_fd = ws[k].res_fd = -1;
    signal(SIGPIPE, SIG_IGN);
    for (int k = 0; k < n_workers; k++) {
        if (spawn_worker(s, ws, (size_t)k) != 0) {
            if (k == 0) {
                tk__cli_error("cannot start a worker process: %s", strerror(errno));
                free(ws);
                return TK__EXIT_FAIL;
            }
            break; /* fewer workers is fine */
        }
        alive++;
    }
    struct pollfd *pfd = calloc((size_t)n_workers, sizeof *pfd);
    if (!pfd) {
        tk__cli_error("out of memory");
        alive = 0;
    }
    while (alive > 0 && p.done < p.total) {
        /* Hand a job to every idle worker. */
        for (int k = 0; k < n_workers; k++) {
            worker *w = &ws[k];
            if (!w->alive || w->busy >= 0 || next >= s->n_items)
                continue;
            uint32_t idx = (uint32_t)next;
            if (write_all(w->cmd_fd, &idx, sizeof idx) != 0) {
                retire_worker(w);
                alive--;
                continue;
            }
            w->busy = (int64_t)next++;
        }
        int np = 0;
        int map[1024];
        for (int k = 0; k < n_workers && np < 1024; k++) {
            if (ws[k].alive && ws[k].busy >= 0) {
                pfd[np].fd = ws[k].res_fd;
                pfd[np].events = POLLIN;
                pfd[np].revents = 0;
                map[np++] = k;
            }
        }
        if (np == 0)
            break;
        if (poll(pfd, (nfds_t)np, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        for (int i = 0; i < np; i++) {
            if (!(pfd[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            worker *w = &ws[map[i]];
            result_hdr r;
            int got = read_all(w->res_fd, &r, sizeof r);
            char *log = NULL;
            if (got == 1 && r.item == (uint32_t)w->busy && r.log_len) {
                log = malloc((size_t)r.log_len + 1);
                if (!log || read_all(w->res_fd, log, r.log_len) != 1)
                    got = -1;
                else
                    log[r.log_len] = 0;
            }
            for (uint32_t kind = 0; kind < 2 && got == 1 && r.item == (uint32_t)w->busy; kind++) {
                uint32_t nk = kind == 0 ? r.n_compiled_keys : r.n_found_keys;
                for (uint32_t k = 0; k < nk && got == 1; k++) {
                    char hex[32];
                    if (read_all(w->res_fd, hex, sizeof hex) != 1)
                        got = -1;
                    else
                        kernel_set_add(&p.kernels, hex, kind == 0);
                }
            }
            if (got != 1 || r.item != (uint32_t)w->busy) {
                /* The worker died mid-job (a crash in a compiler, a kill). */
                free(log);
                size_t lost = (size_t)w->busy;
                int status = 0;
                pid_t pid = w->pid;
                close(w->cmd_fd), close(w->res_fd);
                w->cmd_fd = w->res_fd = -1;
                while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                    ;
                w->pid = 0, w->alive = 0;
                alive--;
                char msg[128];
                if (WIFSIGNALED(status))
                    snprintf(msg, sizeof msg, "worker process %d died (signal %d)", (int)pid,
                             WTERMSIG(status));
                else
                    snprintf(msg, sizeof msg, "worker process %d exited (status %d)", (int)pid,
                             WIFEXITED(status) ? WEXITSTATUS(status) : -1);
                memset(&r, 0, sizeof r);
                r.item = (uint32_t)lost;
                r.status = TK_INTERNAL;
                log = strdup(msg);
                w->busy = -1;
            } else {
                w->busy = -1;
            }
            p.done++;
            *n_published += r.published;
            *n_remote_errors += r.remote_errors;
            if (r.status != TK_OK) {
                p.failed++;
                record_failure(&fails, &n_fails, r.item, (tk_status)r.status, log);
                log = NULL;
            }
            free(log);
            show_progress(s, &p, &s->items[r.item], &r);
        }
    }
    free(pfd);
    for (int k = 0; k < n_workers; k++)
        if (ws[k].alive || ws[k].pid > 0)
            retire_worker(&ws[k]);
    free(ws);
    if (p.tty && !p.verbose)
        printf("\r\033[K");
    /* Jobs never handed out (every worker died). */
    for (size_t i = next; i < s->n_items; i++) {
        p.failed++;
        record_failure(&fails, &n_fails, i, TK_INTERNAL, strdup("not run: no worker process left"));
    }

    double secs = tk__now() - t_start;
    char targets[1024];
    size_t len = 0;
    targets[0] = 0;
    for (size_t i = 0; i < s->n_targets && len < sizeof targets; i++)
        len += (size_t)snprintf(targets + len, sizeof targets - len, "%s%s", i ? ", " : "",
                                s->targets[i].canon);
    const unsigned long long nc = p.kernels.compiled, nh = p.kernels.cached;
    if (nc == 0 && p.failed == 0)
        printf("nothing to compile: %zu %s for %s, %llu %s, all already cached in %s, %.1f s\n",
               s->n_items, s->n_items == 1 ? "job" : "jobs", targets, nh,
               nh == 1 ? "kernel" : "kernels", root, secs);
    else
        printf("precompiled %zu %s for %s into %s: %llu %s compiled, %llu already cached, "
               "%llu %s failed, %.1f s\n",
               s->n_items, s->n_items == 1 ? "job" : "jobs", targets, root, nc,
               nc == 1 ? "kernel" : "kernels", nh, (unsigned long long)p.failed,
               p.failed == 1 ? "job" : "jobs", secs);
    if (p.kernels.failed)
        tk__cli_error("out of memory counting the kernels: the counts above are low");
    fflush(stdout);
    for (size_t i = 0; i < n_fails; i++) {
        char what[512];
        describe_item(s, &s->items[fails[i].item], what, sizeof what);
        fprintf(stderr, "failed: %s (manifest line %d): %s\n%s\n", what,
                s->m.jobs[s->items[fails[i].item].job].line, tk_status_str(fails[i].status),
                fails[i].log ? fails[i].log : "(no log)");
        free(fails[i].log);
    }
    free(fails);
    if (kept && !p.failed && !p.kernels.failed) {
        *kept = p.kernels;
        p.kernels.v = NULL;
    }
    free(p.kernels.v);
    *n_compiled = nc;
    return p.failed ? TK__EXIT_FAIL : TK__EXIT_OK;
}

/* The user tier's entries by key and file identity: an entry this run
 * stored is one whose key is new or whose file was replaced (an atomic
 * store is a new file; its inode number may be the one a removed bad file
 * had, so size and time are compared too). */
typedef struct entry_id {
    char hex[33];
    tk__file_id file;
} entry_id;

typedef struct entry_ids {
    entry_id *v;
    size_t n, cap;
    int failed;
} entry_ids;

static int entry_id_cmp(const void *a, const void *b)
{
    return strcmp(((const entry_id *)a)->hex, ((const entry_id *)b)->hex);
}

static int collect_id(void *user, const tk_cache_entry_info *info)
{
    entry_ids *ids = user;
    struct stat st;
    if (info->read_only_tier || !info->key_hex || strlen(info->key_hex) != 32 ||
        lstat(info->path, &st) != 0)
        return 0;
    if (ids->n == ids->cap) {
        size_t cap = ids->cap ? ids->cap * 2 : 256;
        entry_id *v = realloc(ids->v, cap * sizeof *v);
        if (!v) {
            ids->failed = 1;
            return 1;
        }
        ids->v = v, ids->cap = cap;
    }
    entry_id *e = &ids->v[ids->n++];
    memcpy(e->hex, info->key_hex, 33);
    e->file = tk__file_id_of(&st);
    return 0;
}

static tk_status entry_ids_of(tk_cache *cache, entry_ids *ids)
{
    memset(ids, 0, sizeof *ids);
    tk_status st = tk_cache_list(cache, collect_id, ids);
    if (st == TK_OK && ids->failed)
        st = TK_OUT_OF_MEMORY;
    if (st == TK_OK && ids->n > 1)
        qsort(ids->v, ids->n, sizeof *ids->v, entry_id_cmp);
    return st;
}

/* Entries of now that were not in before, or not as the same file. */
static uint64_t entries_stored(const entry_ids *before, const entry_ids *now)
{
    uint64_t n = 0;
    for (size_t i = 0; i < now->n; i++) {
        const entry_id *e = &now->v[i];
        const entry_id *old =
            before->n ? bsearch(e, before->v, before->n, sizeof *e, entry_id_cmp) : NULL;
        if (!old || !tk__file_id_eq(&old->file, &e->file))
            n++;
    }
    return n;
}

/* What the manifest's jobs are, for the run's first line. */
static const char *jobs_noun(const tk__manifest *m)
{
    size_t fb = 0;
    for (size_t i = 0; i < m->n_jobs; i++)
        fb += m->jobs[i].fallbacks != 0;
    return fb == m->n_jobs ? "operators' fallbacks" : fb ? "shapes and fallbacks" : "shapes";
}

static int default_workers(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (n > 256 ? 256 : (int)n);
}

int tk__cmd_precompile(const tk__cli_opts *opts)
{
    run_state s;
    memset(&s, 0, sizeof s);
    s.opts = opts;
    char err[2048];
    int rc = TK__EXIT_FAIL;
    double t_start = tk__now();
    tk_cache *cache = NULL;
    char *root = NULL;

    int prc = opts->manifest    ? tk__manifest_load(opts->manifest, &s.m, err, sizeof err)
              : opts->fallbacks ? tk__manifest_parse(tk__fallbacks_manifest, "<--fallbacks>", NULL,
                                                     &s.m, err, sizeof err)
                                : tk__manifest_parse(tk__default_manifest, "<built-in manifest>",
                                                     NULL, &s.m, err, sizeof err);
    if (prc != 0) {
        tk__cli_error("%s", err);
        return TK__EXIT_USAGE;
    }
    if (opts->ops_list && tk__manifest_filter(&s.m, opts->ops_list, err, sizeof err) != 0) {
        tk__cli_error("%s", err);
        rc = TK__EXIT_USAGE;
        goto done;
    }
    if (opts->have_policy) {
        s.policies = 1u << opts->policy;
        tk__manifest_clear_line_policies(&s.m);
    } else
        s.policies = s.m.policies ? s.m.policies : 1u << TK_POLICY_STABLE;

    rc = resolve_targets(&s);
    if (rc != TK__EXIT_OK)
        goto done;
    rc = TK__EXIT_FAIL;

    /* Items: target-major, then policy, then the manifest's order. --policy
     * overrides the manifest, "policy=" on a line overrides its "policy". */
    s.items = calloc(s.n_targets * N_POLICIES * s.m.n_jobs + 1, sizeof *s.items);
    if (!s.items) {
        tk__cli_error("out of memory");
        goto done;
    }
    unsigned used = 0;
    for (size_t t = 0; t < s.n_targets; t++)
        for (int pol = 0; pol < N_POLICIES; pol++) {
            for (size_t j = 0; j < s.m.n_jobs; j++) {
                unsigned want = s.policies;
                if (s.m.jobs[j].policies)
                    want = s.m.jobs[j].policies;
                if (s.m.jobs[j].fallbacks)
                    want &= ~(want - 1u); /* the same kernels under every policy: once */
                if (!(want & (1u << pol)))
                    continue;
                item *it = &s.items[s.n_items++];
                it->job = (uint32_t)j;
                it->target = (uint16_t)t;
                it->policy = (uint8_t)pol;
                used |= 1u << pol;
            }
        }
    s.mixed_policies = (used & (used - 1u)) != 0; /* more than one policy */

    if (opts->dry_run) {
        for (size_t i = 0; i < s.n_items; i++) {
            char what[512];
            describe_item(&s, &s.items[i], what, sizeof what);
            printf("%s\n", what);
        }
        printf("%zu jobs (%zu %s, %zu targets); nothing compiled (--dry-run)\n", s.n_items,
               s.m.n_jobs, jobs_noun(&s.m), s.n_targets);
        rc = TK__EXIT_OK;
        goto done;
    }

    tk_config *cfg = tk__cli_config(opts);
    if (!cfg)
        goto done;
    tk_status st = tk_cache_open(cfg, &cache);
    tk_config_destroy(cfg);
    if (st != TK_OK) {
        tk__cli_error("cannot open the cache: %s", tk_status_str(st));
        goto done;
    }
    root = strdup(tk_cache_root(cache));
    if (!root) {
        tk__cli_error("out of memory");
        goto done;
    }
    if (pin_cache_folders(&s, root) != 0) {
        tk__cli_error("cannot make the cache's folders absolute: %s", strerror(errno));
        goto done;
    }
    /* The library never fails a compile because the cache cannot store it;
     * a precompile that did not store what it compiled has failed all the
     * same. What counts is the entries this run wrote (new keys and replaced
     * files), not how much the cache grew: a compile that repairs a corrupt
     * entry replaces it. */
    entry_ids before;
    tk_status ids_st = entry_ids_of(cache, &before);

    int n_workers = opts->jobs ? opts->jobs : default_workers();
    if ((size_t)n_workers > s.n_items)
        n_workers = (int)s.n_items;
    if (n_workers > 1024)
        n_workers = 1024;
    printf("precompiling %zu jobs (%zu %s x %zu targets) with %d worker process%s into %s\n",
           s.n_items, s.m.n_jobs, jobs_noun(&s.m), s.n_targets, n_workers,
           n_workers == 1 ? "" : "es", root);
    fflush(stdout);
    uint64_t n_compiled = 0, n_published = 0, n_remote_errors = 0;
    kernel_set kept;
    memset(&kept, 0, sizeof kept);
    rc = execute(&s, n_workers, t_start, root, &n_compiled, &n_published, &n_remote_errors,
                 opts->prune_others ? &kept : NULL);
    if (n_compiled) {
        entry_ids now;
        tk_status ls = ids_st == TK_OK ? entry_ids_of(cache, &now) : ids_st;
        uint64_t stored = ls == TK_OK ? entries_stored(&before, &now) : 0;
        if (ls == TK_OK)
            free(now.v);
        if (ls != TK_OK || stored < n_compiled) {
            tk__cli_error("%llu %s compiled but %llu stored in the cache at %s: is it "
                          "writable, full, disabled (TOKITAI_JIT_CACHE_DISABLE) or too small "
                          "(TOKITAI_JIT_CACHE_MAX_SIZE)?%s%s",
                          (unsigned long long)n_compiled, n_compiled == 1 ? "kernel" : "kernels",
                          (unsigned long long)stored, root, ls != TK_OK ? " " : "",
                          ls != TK_OK ? tk_cache_last_error(cache) : "");
            if (rc == TK__EXIT_OK)
                rc = TK__EXIT_NOT_KEPT;
        }
        const char *url = opts->remote ? opts->remote : tk__env_get(TK__ENV_REMOTE);
        if (url && *url && n_published < n_compiled) {
            tk__cli_error("%llu %s compiled but %llu published to the remote cache (%llu remote "
                          "errors: the server refused, is full or did not answer; --stats "
                          "--remote shows it)",
                          (unsigned long long)n_compiled, n_compiled == 1 ? "kernel" : "kernels",
                          (unsigned long long)n_published, (unsigned long long)n_remote_errors);
            if (rc == TK__EXIT_OK)
                rc = TK__EXIT_NOT_KEPT;
        }
    }
    free(before.v);
    if (opts->prune_others) {
        /* Only after a whole run: a failed job's kernels are not in the set,
         * and removing their entries would lose what is still good. */
        uint64_t removed = 0;
        if (!kept.v) {
            printf("--prune-others: jobs failed, nothing removed\n");
        } else if ((st = tk_cache_remove(cache, not_in_run, &kept, &removed)) != TK_OK) {
            tk__cli_error("--prune-others: %s: %s", tk_status_str(st), tk_cache_last_error(cache));
            if (rc == TK__EXIT_OK)
                rc = TK__EXIT_FAIL;
        } else {
            printf("removed %llu %s the run neither compiled nor found from %s\n",
                   (unsigned long long)removed, removed == 1 ? "entry" : "entries", root);
        }
        free(kept.v);
    }

done:
    tk_cache_close(cache);
    free(root);
    for (size_t i = 0; i < s.n_targets; i++) {
        free(s.targets[i].name);
        free(s.targets[i].canon);
    }
    free(s.targets);
    free(s.items);
    free(s.cache_dir);
    free(s.cache_lower);
    tk__manifest_free(&s.m);
    return rc;
}
