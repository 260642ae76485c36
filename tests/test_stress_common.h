/* Helpers shared by the reliability (stress) suites: running the CLI with a
 * time limit, the TK_STRESS_SCALE knob, a seeded random generator, and
 * building / mutating real cache entries. Header only: tests/ globs test_*.c. */
#ifndef TK_TEST_STRESS_COMMON_H
#define TK_TEST_STRESS_COMMON_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#include "cache/cache_internal.h"
#include "tk_test.h"

/* ------------------------------------------------------------------ knobs */

/* Trial counts are sized for CI (2 cores, the sanitizer build included);
 * TK_STRESS_SCALE=N multiplies them by hand. */
static inline int stress_scale(void)
{
    const char *s = getenv("TK_STRESS_SCALE");
    int n = s && *s ? atoi(s) : 1;
    return n < 1 ? 1 : n;
}

/* splitmix64: seeded, so a failure can be replayed (TK_STRESS_SEED). */
typedef struct rng {
    uint64_t s;
} rng;

static inline uint64_t rng_next(rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline uint64_t rng_below(rng *r, uint64_t n)
{
    return n ? rng_next(r) % n : 0;
}

static inline uint64_t stress_seed(void)
{
    const char *s = getenv("TK_STRESS_SEED");
    return s && *s ? strtoull(s, NULL, 0) : 0x13c0ffeeull;
}

static inline double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* --------------------------------------------------- running with a limit */

typedef struct run_result {
    int code;      /* exit code, -1 if none */
    int sig;       /* terminating signal, 0 if none */
    int timed_out; /* killed by the time limit */
    char *out;     /* malloc'd, NUL-terminated */
    char *err;
} run_result;

static inline void run_result_free(run_result *r)
{
    free(r->out);
    free(r->err);
    r->out = r->err = NULL;
}

static inline char *slurp_fd(int fd)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return strdup("");
    char *buf = malloc((size_t)st.st_size + 1);
    ck_assert_ptr_nonnull(buf);
    ssize_t n = pread(fd, buf, (size_t)st.st_size, 0);
    buf[n > 0 ? n : 0] = 0;
    return buf;
}

/* posix_spawn (a vfork underneath): thousands of runs from a sanitizer
 * build's large test process stay cheap. The child leads its own process
 * group, so that a time limit or a kill reaches its workers too. */
static inline pid_t spawn_argv(char *const argv[], int out_fd, int err_fd)
{
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    ck_assert_int_eq(posix_spawn_file_actions_init(&fa), 0);
    ck_assert_int_eq(posix_spawnattr_init(&attr), 0);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    if (out_fd >= 0)
        posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
    if (err_fd >= 0)
        posix_spawn_file_actions_adddup2(&fa, err_fd, 2);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attr, 0);
    pid_t pid = -1;
    extern char **environ;
    int rc = posix_spawn(&pid, argv[0], &fa, &attr, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    ck_assert_msg(rc == 0, "cannot run %s: %s", argv[0], strerror(rc));
    return pid;
}

/* Waits up to timeout_s for pid; kills its process group past it. */
static inline int wait_limit(pid_t pid, double timeout_s, int *timed_out)
{
    int status = 0;
    double t_end = now_s() + timeout_s;
    long sleep_ns = 100000;
    *timed_out = 0;
    for (;;) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid)
            return status;
        if (w < 0 && errno != EINTR)
            return -1;
        if (now_s() > t_end) {
            *timed_out = 1;
            kill(-pid, SIGKILL);
            kill(pid, SIGKILL);
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
            }
            return status;
        }
        struct timespec ts = {0, sleep_ns};
        nanosleep(&ts, NULL);
        if (sleep_ns < 5000000)
            sleep_ns *= 2;
    }
}

/* Runs argv (argv[0] a path) with stdout/stderr captured and a time limit. */
static inline void run_limit(char *const argv[], double timeout_s, run_result *r)
{
    char o[] = "/tmp/tk-stress-out-XXXXXX", e[] = "/tmp/tk-stress-err-XXXXXX";
    int ofd = mkstemp(o), efd = mkstemp(e);
    ck_assert_int_ge(ofd, 0);
    ck_assert_int_ge(efd, 0);
    unlink(o);
    unlink(e);
    pid_t pid = spawn_argv(argv, ofd, efd);
    int status = wait_limit(pid, timeout_s, &r->timed_out);
    r->code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r->sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    r->out = slurp_fd(ofd);
    r->err = slurp_fd(efd);
    close(ofd);
    close(efd);
}

/* Runs tokitai-jit with the arguments that follow (NULL-terminated). */
static inline void cli_limit(double timeout_s, run_result *r, ...)
{
    char *argv[64];
    int n = 0;
    argv[n++] = (char *)tk_test_cli();
    va_list ap;
    va_start(ap, r);
    for (const char *a = va_arg(ap, const char *); a && n < 63; a = va_arg(ap, const char *))
        argv[n++] = (char *)a;
    va_end(ap);
    argv[n] = NULL;
    run_limit(argv, timeout_s, r);
}

/* The tool's contract on every run: a defined exit code (0-4), no signal, no
 * hang, and every stderr line a whole line ("tokitai-jit: ...", "bad: ...",
 * "rejected: ...", "failed: ..." plus a compiler log). Returns 0 when kept,
 * else fills why. */
static inline int cli_contract(const run_result *r, char *why, size_t size)
{
    if (r->timed_out) {
        snprintf(why, size, "hang (killed by the time limit)");
        return -1;
    }
    if (r->sig) {
        snprintf(why, size, "crash (signal %d)", r->sig);
        return -1;
    }
    if (r->code < 0 || r->code > 5) {
        snprintf(why, size, "exit code %d", r->code);
        return -1;
    }
    if (strstr(r->err, "Sanitizer") || strstr(r->err, "runtime error:")) {
        snprintf(why, size, "sanitizer report: %.300s", r->err);
        return -1;
    }
    size_t n = strlen(r->err);
    if (n && r->err[n - 1] != '\n') {
        snprintf(why, size, "stderr does not end with a newline: %.300s", r->err);
        return -1;
    }
    if (r->code != 0 && n == 0 && strstr(r->out, "bad ") == NULL) {
        snprintf(why, size, "exit %d without a message", r->code);
        return -1;
    }
    return 0;
}

/* ----------------------------------------------------------- cache files */

typedef struct blob {
    char hex[33];
    uint8_t *bytes;
    size_t len;
} blob;

typedef struct blob_set {
    blob *v;
    size_t n, cap;
} blob_set;

static inline void blob_set_add(blob_set *s, const char *hex, const uint8_t *bytes, size_t len)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 64;
        s->v = realloc(s->v, s->cap * sizeof(*s->v));
        ck_assert_ptr_nonnull(s->v);
    }
    blob *b = &s->v[s->n++];
    snprintf(b->hex, sizeof(b->hex), "%s", hex ? hex : "");
    b->bytes = malloc(len ? len : 1);
    ck_assert_ptr_nonnull(b->bytes);
    memcpy(b->bytes, bytes, len);
    b->len = len;
}

static inline void blob_set_free(blob_set *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->v[i].bytes);
    free(s->v);
    memset(s, 0, sizeof(*s));
}

/* Every regular *.tkc file of <root>/1 (hex from its path) appended to s;
 * returns the number of other things found (temporaries, links, folders...). */
static inline int read_cache_files(const char *root, blob_set *s, int *n_temps)
{
    char fmt[PATH_MAX + 16];
    snprintf(fmt, sizeof(fmt), "%s/%d", root, TK__CACHE_FORMAT);
    int others = 0;
    if (n_temps)
        *n_temps = 0;
    DIR *top = opendir(fmt);
    if (!top)
        return 0;
    struct dirent *d;
    while ((d = readdir(top)) != NULL) {
        /* Not entries: locks, kept sources, the statistics file. */
        if (d->d_name[0] == '.' || strcmp(d->d_name, TK__LOCK_DIR) == 0 ||
            strcmp(d->d_name, TK__SRC_DIR) == 0 || strcmp(d->d_name, "stats") == 0)
            continue;
        char sub[PATH_MAX * 2];
        snprintf(sub, sizeof(sub), "%s/%s", fmt, d->d_name);
        DIR *dir = opendir(sub);
        if (!dir) {
            others++;
            continue;
        }
        struct dirent *e;
        while ((e = readdir(dir)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            char path[PATH_MAX * 3];
            snprintf(path, sizeof(path), "%s/%s", sub, e->d_name);
            struct stat st;
            if (strncmp(e->d_name, TK__TEMP_PREFIX, strlen(TK__TEMP_PREFIX)) == 0) {
                if (n_temps)
                    (*n_temps)++;
                others++;
                continue;
            }
            if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode) ||
                strlen(e->d_name) != 30 + strlen(TK__ENTRY_EXT)) {
                others++;
                continue;
            }
            size_t len = 0;
            char *bytes = tk_test_read_file(path, &len);
            ck_assert_ptr_nonnull(bytes);
            char hex[33];
            snprintf(hex, sizeof(hex), "%.2s%.30s", d->d_name, e->d_name);
            blob_set_add(s, hex, (const uint8_t *)bytes, len);
            free(bytes);
        }
        closedir(dir);
    }
    closedir(top);
    return others;
}

static inline void entry_file_path(const char *root, const char *hex, char *buf, size_t size)
{
    snprintf(buf, size, "%s/%d/%.2s/%s%s", root, TK__CACHE_FORMAT, hex, hex + 2, TK__ENTRY_EXT);
}

static inline void mkdir_for(const char *path)
{
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof(tmp), "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        mkdir(tmp, 0700);
        *p = '/';
    }
}

static inline void write_at(const char *path, const void *bytes, size_t len)
{
    mkdir_for(path);
    ck_assert_msg(tk_test_write_file(path, bytes, len) == 0, "cannot write %s", path);
}

/* A key whose material is exactly the given bytes (so that its fingerprint is
 * the one an entry holding that material claims). */
static inline void key_from_material(tk__key *key, const uint8_t *material, size_t len)
{
    tk__key_init(key);
    key->bytes = malloc(len ? len : 1);
    ck_assert_ptr_nonnull(key->bytes);
    memcpy(key->bytes, material, len);
    key->len = key->cap = len;
    tk_assert_status(tk__key_finish(key), TK_OK);
}

/* A valid entry of a new key derived from a real entry (its metadata and
 * payload, its key material plus a variant number): many distinct valid
 * entries with real code objects. *material gets the new key material. */
static inline void derive_entry(const blob *base, uint64_t variant, tk__key *key, uint8_t **out,
                                size_t *out_len)
{
    tk__entry_view v;
    const char *why = NULL;
    tk_status st = tk__entry_parse(base->bytes, base->len, 1, &v, &why);
    ck_assert_msg(st == TK_OK, "seed entry does not parse: %s", why);
    tk__key_init(key);
    tk__key_add_bytes(key, "base", v.key, v.key_size);
    tk__key_add_u64(key, "stress-variant", variant);
    tk_assert_status(tk__key_finish(key), TK_OK);
    char *strs[TK__ENTRY_N_STRINGS];
    for (int i = 0; i < TK__ENTRY_N_STRINGS; i++)
        strs[i] = v.strings[i].ptr ? strndup(v.strings[i].ptr, v.strings[i].len) : NULL;
    tk__entry_meta meta;
    memset(&meta, 0, sizeof(meta));
    meta.kernel = strs[0];
    meta.source = strs[1];
    meta.backend = strs[2];
    meta.arch = strs[3];
    meta.compiler = strs[4];
    meta.options = strs[5];
    meta.created = v.created;
    meta.resources = v.resources;
    void *code = malloc(v.payload_size ? (size_t)v.payload_size : 1);
    ck_assert_ptr_nonnull(code);
    tk_assert_status(tk__entry_payload(&v, code), TK_OK);
    tk_assert_status(tk__entry_encode(key->bytes, key->len, key->fp_hi, key->fp_lo, &meta, code,
                                      (size_t)v.payload_size, out, out_len),
                     TK_OK);
    free(code);
    for (int i = 0; i < TK__ENTRY_N_STRINGS; i++)
        free(strs[i]);
}

static inline void put_le_n(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint64_t get_le_n(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* Recomputes the header hash (when the claimed metadata fits) and the trailer
 * checksum, so that a structural mutation reaches the checks behind them. */
static inline void refix_hashes(uint8_t *b, size_t len)
{
    if (len < TK__ENTRY_HEADER_SIZE + TK__ENTRY_TRAILER_SIZE)
        return;
    uint64_t meta_size = get_le_n(b + 16, 4);
    if (TK__ENTRY_HEADER_SIZE + meta_size <= len)
        put_le_n(
            b + 56,
            XXH3_64bits_withSeed(b + TK__ENTRY_HEADER_SIZE, (size_t)meta_size, XXH3_64bits(b, 56)),
            8);
    put_le_n(b + len - 8, XXH3_64bits(b, len - 8), 8);
}

#endif
