/* The cache handle: opening (root resolution and safety checks), lookups,
 * per-key locks, atomic stores and least-recently-used eviction. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cache/cache_internal.h"
#include "cache/remote.h"
#include "common/env_vars.h"

#define DEFAULT_MAX_SIZE ((uint64_t)5 << 30) /* like ccache's default */

struct tk__cache_lock {
    int fd;
    int dfd;       /* the lock folder, for the unlink at unlock */
    char name[64]; /* <hex>.lock */
    void *lease;   /* the remote tier's fleet-wide lease, or NULL */
};

/* ------------------------------------------------------------------ paths */

static char *join(const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b);
    while (na > 1 && a[na - 1] == '/')
        na--;
    char *s = malloc(na + 1 + nb + 1);
    if (!s)
        return NULL;
    memcpy(s, a, na);
    s[na] = '/';
    memcpy(s + na + 1, b, nb + 1);
    return s;
}

static char *fmt_dir_of(const char *root)
{
    char fmt[16];
    snprintf(fmt, sizeof(fmt), "%d", TK__CACHE_FORMAT);
    return join(root, fmt);
}

tk_status tk__cache_entry_path(const char *fmt_dir, const char *hex, char *buf, size_t size)
{
    if (!fmt_dir || strlen(hex) != 32)
        return TK_INVALID_ARGUMENT;
    int n = snprintf(buf, size, "%s/%.2s/%s%s", fmt_dir, hex, hex + 2, TK__ENTRY_EXT);
    return (n > 0 && (size_t)n < size) ? TK_OK : TK_OVERFLOW;
}

tk_status tk__cache_default_root(char *buf, size_t size)
{
    const char *dir = tk__env_get(TK__ENV_CACHE_DIR);
    const char *leaf = "";
    if (!dir) {
        dir = getenv("XDG_CACHE_HOME");
        leaf = "/tokitai-jit";
        /* The XDG spec says a relative value is to be ignored. */
        if (!dir || dir[0] != '/') {
            dir = getenv("HOME");
            leaf = "/.cache/tokitai-jit";
            if (!dir || !*dir) {
                struct passwd pw, *res = NULL;
                char pwbuf[4096];
                if (getpwuid_r(geteuid(), &pw, pwbuf, sizeof(pwbuf), &res) != 0 || !res ||
                    !pw.pw_dir || !*pw.pw_dir)
                    return TK_NOT_FOUND;
                int n = snprintf(buf, size, "%s%s", pw.pw_dir, leaf);
                return (n > 0 && (size_t)n < size) ? TK_OK : TK_OVERFLOW;
            }
        }
    }
    int n = snprintf(buf, size, "%s%s", dir, leaf);
    return (n > 0 && (size_t)n < size) ? TK_OK : TK_OVERFLOW;
}

/* mkdir -p with mode 0700 for every folder it creates. */
static int mkdir_p(const char *path)
{
    char tmp[PATH_MAX];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof(tmp)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(tmp, path, n + 1);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        if (mkdir(tmp, 0700) != 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    if (mkdir(tmp, 0700) != 0 && errno != EEXIST)
        return -1;
    return 0;
}

/* ------------------------------------------------------------------- open */

static tk_status set_problem(tk_cache *cache, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static tk_status set_problem(tk_cache *cache, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    free(cache->root_problem);
    cache->root_problem = strdup(msg);
    cache->root_state = TK__ROOT_BAD;
    cache->writable = 0;
    if (!cache->root_problem)
        return TK_OUT_OF_MEMORY;
    if (!cache->disabled)
        tk__cache_warn_once(cache, TK__WARN_SETUP, "%s; continuing without it", msg);
    /* Stores are impossible: say it once, not again at every store. */
    cache->warned[TK__WARN_WRITE] = 1;
    tk__cache_fail(cache, TK_IO_ERROR, "%s", msg);
    return TK_OK;
}

/* Drops trailing "/" and "/." from a root, so that its last component is
 * the name itself: lstat("RL/") and lstat("RL/.") follow a link RL, which
 * would hide it from the link checks of open_user_tier. "/" stays "/". */
static void trim_root(char *root)
{
    size_t n = strlen(root);
    for (;;) {
        if (n > 1 && root[n - 1] == '/')
            n--;
        else if (n > 2 && root[n - 1] == '.' && root[n - 2] == '/')
            n -= 2;
        else
            break;
    }
    root[n] = 0;
}

static tk_status open_user_tier(tk_cache *cache)
{
    struct stat st;
    if (!cache->root[0])
        return set_problem(cache, "no cache folder: HOME is not set");
    int create = !cache->disabled && !cache->read_only;
    /* A root that is a symbolic link: the link must be the user's (its
     * target then gets a real folder's checks below), else whoever owns it
     * chooses where stores, --prune and --clear act. The link and an
     * existing target are checked before anything is created through them. */
    if (lstat(cache->root, &st) == 0 && S_ISLNK(st.st_mode) && st.st_uid != geteuid())
        return set_problem(cache, "cache folder %s refused: a symbolic link owned by another user",
                           cache->root);
    const char *why = NULL;
    if (stat(cache->root, &st) == 0 && (why = tk__cache_stat_unsafe(&st, 0)) != NULL)
        return set_problem(cache, "cache folder %s refused: %s", cache->root, why);
    if (create && mkdir_p(cache->fmt_dir) != 0 && errno != EACCES && errno != EROFS &&
        errno != EPERM && errno != ENOENT)
        return set_problem(cache, "cannot create cache folder %s: %s", cache->fmt_dir,
                           strerror(errno));
    if (stat(cache->root, &st) != 0) {
        if (errno == ENOENT && !create) {
            cache->root_state = TK__ROOT_MISSING;
            return TK_OK;
        }
        return set_problem(cache, "cannot use cache folder %s: %s", cache->root, strerror(errno));
    }
    why = tk__cache_stat_unsafe(&st, 0);
    if (why)
        return set_problem(cache, "cache folder %s refused: %s", cache->root, why);
    if (stat(cache->fmt_dir, &st) != 0) {
        if (errno != ENOENT)
            return set_problem(cache, "cannot use cache folder %s: %s", cache->fmt_dir,
                               strerror(errno));
        cache->root_state = TK__ROOT_MISSING;
        if (create) {
            tk__cache_warn_once(cache, TK__WARN_WRITE,
                                "cache folder %s cannot be created; continuing uncached",
                                cache->fmt_dir);
            tk__cache_fail(cache, TK_IO_ERROR, "cache folder %s cannot be created",
                           cache->fmt_dir);
        }
        return TK_OK;
    }
    why = tk__cache_dir_unsafe(cache->fmt_dir, 0);
    if (why)
        return set_problem(cache, "cache folder %s refused: %s", cache->fmt_dir, why);
    cache->root_state = TK__ROOT_OK;
    if (cache->disabled || cache->read_only)
        return TK_OK;
    char *locks = join(cache->fmt_dir, TK__LOCK_DIR);
    if (!locks)
        return TK_OUT_OF_MEMORY;
    if (mkdir(locks, 0700) != 0 && errno != EEXIST) {
        /* Only the one-compile-per-key optimisation is lost. */
    }
    free(locks);
    if (access(cache->fmt_dir, W_OK) != 0) {
        tk__cache_warn_once(cache, TK__WARN_WRITE,
                            "cache folder %s is not writable (%s); reading it only",
                            cache->fmt_dir, strerror(errno));
        tk__cache_fail(cache, TK_IO_ERROR, "cache folder %s is not writable", cache->fmt_dir);
        return TK_OK;
    }
    cache->writable = 1;
    return TK_OK;
}

/* Adds the read-only tier whose root is the len bytes at path, unless it is
 * refused; a missing tier is simply empty. */
static tk_status add_lower_tier(tk_cache *cache, const char *path, size_t len)
{
    char *root = strndup(path, len);
    if (!root)
        return TK_OUT_OF_MEMORY;
    trim_root(root); /* "tier/" must not hide a link from the check below */
    char *fmt = fmt_dir_of(root);
    struct stat st;
    const char *why = NULL;
    if (!fmt) {
        free(root);
        return TK_OUT_OF_MEMORY;
    }
    /* A writable-by-others tier is refused, and so is a link to it that
     * another user owns. */
    if (lstat(root, &st) == 0 && S_ISLNK(st.st_mode) && st.st_uid != geteuid() && st.st_uid != 0)
        why = "a symbolic link owned by another user";
    else if (stat(root, &st) == 0 && !(why = tk__cache_stat_unsafe(&st, 1)) && lstat(fmt, &st) == 0)
        why = tk__cache_dir_unsafe(fmt, 1);
    if (why && !cache->disabled)
        tk__cache_warn_once(cache, TK__WARN_SETUP,
                            "read-only cache tier %s refused: %s; ignoring it", root, why);
    if (why) {
        free(root);
        free(fmt);
        return TK_OK;
    }
    const size_t have = cache->lower_roots ? strlen(cache->lower_roots) : 0;
    char *roots = realloc(cache->lower_roots, have + 1 + strlen(root) + 1);
    if (!roots) {
        free(root);
        free(fmt);
        return TK_OUT_OF_MEMORY;
    }
    snprintf(roots + have, 1 + strlen(root) + 1, "%s%s", have ? ":" : "", root);
    cache->lower_roots = roots;
    cache->lower[cache->n_lower++] = fmt;
    free(root);
    return TK_OK;
}

static size_t count_elements(const char *list)
{
    size_t n = 1;
    for (const char *p = list; *p; p++)
        n += *p == ':';
    return n;
}

/* A tier list: ':'-separated roots; "" and "none" alone mean no tier, and
 * the element "shipped" stands for the tier shipped with the library
 * (tk_cache_shipped_tier: none, one or two roots). */
static tk_status open_lower_tiers(tk_cache *cache, const char *list)
{
    if (!list || !*list || strcmp(list, "none") == 0)
        return TK_OK;
    const char *shipped = tk_cache_shipped_tier();
    cache->lower = calloc(count_elements(list) * count_elements(shipped), sizeof(char *));
    if (!cache->lower)
        return TK_OUT_OF_MEMORY;
    for (const char *p = list; *p;) {
        const size_t len = strcspn(p, ":");
        tk_status st = TK_OK;
        if (len == 7 && strncmp(p, "shipped", 7) == 0) {
            for (const char *q = shipped; *q && st == TK_OK;) {
                const size_t m = strcspn(q, ":");
                st = add_lower_tier(cache, q, m);
                q += m + (q[m] == ':');
            }
        } else if (len > 0) {
            st = add_lower_tier(cache, p, len);
        }
        if (st != TK_OK)
            return st;
        p += len + (p[len] == ':');
    }
    return TK_OK;
}

tk_status tk__cache_open(const tk__cache_opts *opts, tk_cache **out)
{
    if (!opts || !out)
        return TK_INVALID_ARGUMENT;
    tk_status st = TK_OUT_OF_MEMORY;
    tk_cache *cache = calloc(1, sizeof(*cache));
    if (!cache)
        return TK_OUT_OF_MEMORY;
    if (pthread_mutex_init(&cache->mu, NULL) != 0) {
        free(cache);
        return TK_OUT_OF_MEMORY;
    }
    if (pthread_mutex_init(&cache->evict_mu, NULL) != 0) {
        pthread_mutex_destroy(&cache->mu);
        free(cache);
        return TK_OUT_OF_MEMORY;
    }
    cache->log = opts->log;
    cache->log_user = opts->log_user;
    cache->read_only = opts->read_only != 0;
    cache->disabled = opts->disabled || tk__env_bool(TK__ENV_CACHE_DISABLE, 0);
    snprintf(cache->last_error, sizeof(cache->last_error), "no error");

    char rootbuf[PATH_MAX];
    tk_status rs = TK_OK;
    if (opts->root && *opts->root) {
        cache->root = strdup(opts->root);
    } else if ((rs = tk__cache_default_root(rootbuf, sizeof(rootbuf))) == TK_OK) {
        cache->root = strdup(rootbuf);
    } else {
        cache->root = strdup("");
    }
    if (!cache->root)
        goto fail;
    trim_root(cache->root);
    if (cache->root[0] && !(cache->fmt_dir = fmt_dir_of(cache->root)))
        goto fail;

    cache->max_size = opts->max_size;
    if (!cache->max_size) {
        /* A refused value is the default, said by the environment's report. */
        uint64_t v = 0;
        tk__env_size(TK__ENV_CACHE_MAX_SIZE, &v);
        if (!v) {
            /* The cache's own setting (tokitai-jit -M) under the caller's and
             * the environment's. */
            char why[512];
            tk_status cs = tk__cache_config_max_size(cache->root, &v, why, sizeof why);
            if (cs == TK_CORRUPT)
                tk__cache_warn_once(cache, TK__WARN_SETUP, "%s; using 5G", why);
        }
        cache->max_size = v ? v : DEFAULT_MAX_SIZE; /* "0", like the API, is the default */
    }
    const char *delay = getenv("TK__CACHE_TEST_WRITE_DELAY_MS");
    if (delay && *delay)
        cache->test_write_delay_ms = (unsigned)strtoul(delay, NULL, 10);

    if (rs == TK_OVERFLOW)
        st = set_problem(cache, "no cache folder: the path from TOKITAI_JIT_CACHE_DIR, "
                                "XDG_CACHE_HOME or HOME is longer than %d bytes",
                         PATH_MAX - 1);
    else
        st = open_user_tier(cache);
    if (st != TK_OK)
        goto fail;
    /* The program's list, else the environment's, else the shipped tier. */
    {
        const char *lower = opts->lower ? opts->lower : tk__env_get(TK__ENV_CACHE_PATH);
        st = open_lower_tiers(cache, lower ? lower : "shipped");
    }
    if (st != TK_OK)
        goto fail;
    st = tk__cache_remote_open(cache, opts->remote);
    if (st != TK_OK)
        goto fail;
    *out = cache;
    return TK_OK;
fail:
    tk_cache_close(cache);
    return st;
}

void tk_cache_close(tk_cache *cache)
{
    if (!cache)
        return;
    tk__cache_stats_flush(cache);
    tk__cache_remote_close(cache);
    free(cache->root);
    free(cache->fmt_dir);
    for (size_t i = 0; i < cache->n_lower; i++)
        free(cache->lower[i]);
    free(cache->lower);
    free(cache->lower_roots);
    free(cache->root_problem);
    pthread_mutex_destroy(&cache->evict_mu);
    pthread_mutex_destroy(&cache->mu);
    free(cache);
}

const char *tk_cache_root(const tk_cache *cache)
{
    return cache && cache->root ? cache->root : "";
}

const char *tk_cache_lower_tiers(const tk_cache *cache)
{
    return cache && cache->lower_roots ? cache->lower_roots : "";
}

const char *tk_cache_last_error(const tk_cache *cache)
{
    return cache ? cache->last_error : "no cache";
}

int tk__cache_usable(const tk_cache *cache)
{
    return cache && !cache->disabled && (cache->root_state == TK__ROOT_OK || cache->n_lower > 0);
}

int tk__cache_writable(const tk_cache *cache)
{
    return cache && !cache->disabled && !cache->read_only && cache->writable;
}

/* ----------------------------------------------------------------- lookup */

enum { LOAD_HIT, LOAD_MISS, LOAD_BAD };

static int load_one(tk_cache *cache, const char *path, int user_tier, const tk__key *key,
                    tk__entry *out, tk_status *err)
{
    /* O_NONBLOCK: a FIFO planted where an entry should be must not hang the
     * open (it is then refused as not a regular file). */
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return LOAD_MISS;
    int result = LOAD_BAD;
    uint8_t *buf = NULL;
    const char *why = NULL;
    struct stat st;
    tk__entry_view v;
    if (fstat(fd, &st) != 0) {
        result = LOAD_MISS;
        goto done;
    }
    if (!S_ISREG(st.st_mode)) {
        why = "not a regular file";
        goto bad;
    }
    if (st.st_uid != geteuid() && !(!user_tier && st.st_uid == 0)) {
        tk__cache_warn_once(cache, TK__WARN_OWNER,
                            "cache entry %s refused: owned by another user (uid %u)", path,
                            (unsigned)st.st_uid);
        result = LOAD_MISS;
        goto done;
    }
    {
        /* Its folder too: a link, another user's folder or one others can
         * write to could have had the file swapped. */
        char dir[PATH_MAX];
        const char *slash = strrchr(path, '/');
        size_t n = slash ? (size_t)(slash - path) : 0;
        const char *dwhy = NULL;
        if (n > 0 && n < sizeof(dir)) {
            memcpy(dir, path, n);
            dir[n] = 0;
            dwhy = tk__cache_dir_unsafe(dir, !user_tier);
        }
        if (dwhy) {
            tk__cache_warn_once(cache, TK__WARN_OWNER, "cache entry %s refused: its folder is %s",
                                path, dwhy);
            result = LOAD_MISS;
            goto done;
        }
    }
    if ((uint64_t)st.st_size > TK__ENTRY_MAX_FILE) {
        why = "file too large";
        goto bad;
    }
    tk_status rs = tk__read_fd(fd, (uint64_t)st.st_size, &buf);
    if (rs == TK_OUT_OF_MEMORY) {
        *err = rs;
        result = LOAD_MISS;
        goto done;
    }
    if (rs != TK_OK) {
        why = "unreadable";
        goto bad;
    }
    /* The fingerprint is not recomputed: comparing the whole key material
     * below is stronger, and is what makes a collision harmless. */
    if (tk__entry_parse(buf, (size_t)st.st_size, 0, &v, &why) != TK_OK)
        goto bad;
    if (v.fp_hi != key->fp_hi || v.fp_lo != key->fp_lo) {
        why = "entry belongs to another key";
        goto bad;
    }
    if (v.key_size != key->len || memcmp(v.key, key->bytes, key->len) != 0) {
        why = "key material differs (fingerprint collision)";
        goto bad;
    }
    tk_status fs = tk__entry_fill(&v, (int64_t)st.st_mtim.tv_sec, out);
    if (fs == TK_CORRUPT) {
        why = "compressed code object does not decode";
        goto bad;
    }
    if (fs != TK_OK) {
        *err = fs;
        result = LOAD_MISS;
        goto done;
    }
    if (user_tier && time(NULL) - st.st_mtim.tv_sec >= TK__REFRESH_SECONDS)
        futimens(fd, NULL); /* recency for eviction; failure only costs accuracy */
    result = LOAD_HIT;
    goto done;
bad:
    tk__cache_warn_once(cache, TK__WARN_BAD, "cache entry %s ignored: %s", path, why);
    if (user_tier && cache->writable) {
        /* the very file read: a good entry renamed over it stays */
        tk__file_id seen = tk__file_id_of(&st);
        tk__cache_unlink_same(path, &seen);
    }
    result = LOAD_BAD;
done:
    free(buf);
    close(fd);
    return result;
}

static tk_status check_key(const tk__key *key)
{
    if (!key || key->failed || !key->bytes || strlen(key->hex) != 32)
        return TK_INVALID_ARGUMENT;
    return TK_OK;
}

tk_status tk__cache_get(tk_cache *cache, const tk__key *key, tk__entry *out)
{
    if (!cache || !out || check_key(key) != TK_OK)
        return TK_INVALID_ARGUMENT;
    if (cache->disabled)
        return TK_NOT_FOUND;
    char path[PATH_MAX];
    tk_status err = TK_OK;
    size_t n_tiers = 1 + cache->n_lower;
    for (size_t t = 0; t < n_tiers; t++) {
        const char *dir = t == 0 ? cache->fmt_dir : cache->lower[t - 1];
        if (t == 0 && cache->root_state != TK__ROOT_OK)
            continue;
        if (tk__cache_entry_path(dir, key->hex, path, sizeof(path)) != TK_OK)
            continue;
        if (load_one(cache, path, t == 0, key, out, &err) == LOAD_HIT)
            return TK_OK;
        if (err == TK_OUT_OF_MEMORY)
            return err;
    }
    /* The remote tier checks and decodes a value as a lookup here would; the
     * entry file it took is kept in the user tier, so the next process hits
     * on disk. */
    uint8_t *bytes = NULL;
    size_t len = 0;
    tk_status st = tk__cache_remote_get(cache, key, out, &bytes, &len);
    if (st == TK_OK && bytes && tk__cache_writable(cache))
        tk__cache_store_bytes(cache, key->hex, bytes, len); /* trouble is logged there */
    free(bytes);
    return st; /* TK_NOT_FOUND without a remote */
}

tk_status tk__cache_remove(tk_cache *cache, const tk__key *key)
{
    if (!cache || check_key(key) != TK_OK)
        return TK_INVALID_ARGUMENT;
    if (cache->disabled || !cache->writable)
        return TK_NOT_FOUND;
    char path[PATH_MAX];
    tk_status st = tk__cache_entry_path(cache->fmt_dir, key->hex, path, sizeof(path));
    if (st != TK_OK)
        return st;
    if (tk__cache_unlink(path) != 0)
        return errno == ENOENT ? TK_NOT_FOUND
                               : tk__cache_fail(cache, TK_IO_ERROR, "cannot remove %s: %s", path,
                                                strerror(errno));
    return TK_OK;
}

/* ------------------------------------------------------------------ locks */

tk_status tk__cache_lock_key(tk_cache *cache, const tk__key *key, tk__cache_lock **out)
{
    if (!cache || !out || check_key(key) != TK_OK)
        return TK_INVALID_ARGUMENT;
    *out = NULL;
    if (cache->disabled || !cache->writable)
        return TK_OK;
    char name[64];
    snprintf(name, sizeof(name), "%s.lock", key->hex);
    char *locks = join(cache->fmt_dir, TK__LOCK_DIR);
    if (!locks)
        return TK_OUT_OF_MEMORY;
    /* The lock folder is opened without following a link (a planted link
     * would have lock files created elsewhere), the lock file likewise. */
    int dfd = tk__cache_open_dir(locks);
    if (dfd < 0 && errno == ENOENT && mkdir(locks, 0700) == 0)
        dfd = tk__cache_open_dir(locks);
    free(locks);
    struct stat dst;
    if (dfd < 0)
        return TK_OK; /* no lock: at worst two processes compile the same key */
    if (fstat(dfd, &dst) != 0 || tk__cache_stat_unsafe(&dst, 0)) {
        close(dfd);
        return TK_OK;
    }
    tk__cache_lock *lock = malloc(sizeof(*lock));
    if (!lock) {
        close(dfd);
        return TK_OUT_OF_MEMORY;
    }
    /* The holder unlinks the lock file at unlock, so none are left behind. A
     * waiter that then gets the lock on the unlinked file sees it is no
     * longer the file at that name, and starts over on the new one. */
    for (int attempt = 0; attempt < 64; attempt++) {
        int fd = openat(dfd, name, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0)
            break;
        int r;
        do
            r = flock(fd, LOCK_EX);
        while (r != 0 && errno == EINTR);
        struct stat held, named;
        if (r != 0) {
            close(fd);
            break;
        }
        if (fstat(fd, &held) == 0 &&
            fstatat(dfd, name, &named, AT_SYMLINK_NOFOLLOW) == 0 && held.st_nlink > 0 &&
            held.st_ino == named.st_ino && held.st_dev == named.st_dev) {
            lock->fd = fd;
            lock->dfd = dfd;
            snprintf(lock->name, sizeof(lock->name), "%s", name);
            /* Other machines (other cache folders) asking for the same key. */
            lock->lease = tk__cache_remote_lease(cache, key);
            *out = lock;
            return TK_OK;
        }
        close(fd); /* unlinked by its last holder: try the current file */
    }
    close(dfd);
    free(lock);
    return TK_OK; /* no lock: at worst two processes compile the same key */
}

void tk__cache_unlock(tk__cache_lock *lock)
{
    if (!lock)
        return;
    tk__cache_remote_release(lock->lease);
    /* Unlinked while still held: a process waiting on this file notices and
     * moves to a fresh one (see tk__cache_lock_key). */
    unlinkat(lock->dfd, lock->name, 0);
    flock(lock->fd, LOCK_UN);
    close(lock->fd);
    close(lock->dfd);
    free(lock);
}

/* ------------------------------------------------------------------ store */

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

tk_status tk__cache_publish(tk_cache *cache, const char *hex, const uint8_t *bytes, size_t len)
{
    char path[PATH_MAX], dir[PATH_MAX], tmp[PATH_MAX];
    tk_status st = tk__cache_entry_path(cache->fmt_dir, hex, path, sizeof(path));
    if (st != TK_OK)
        return st;
    snprintf(dir, sizeof(dir), "%s/%.2s", cache->fmt_dir, hex);
    int n = snprintf(tmp, sizeof(tmp), "%s/" TK__TEMP_PREFIX "%s.XXXXXX", dir, hex + 2);
    if (n < 0 || (size_t)n >= sizeof(tmp))
        return TK_OVERFLOW;
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        goto fail_io;
    const char *dwhy = tk__cache_dir_unsafe(dir, 0);
    if (dwhy) {
        /* The same category as a lookup's refusal of that folder: one warning. */
        tk__cache_warn_once(cache, TK__WARN_OWNER, "cache folder %s refused: %s; not storing there",
                            dir, dwhy);
        return tk__cache_fail(cache, TK_IO_ERROR, "cannot store %s: folder %s is %s", path, dir,
                              dwhy);
    }
    /* The writer holds a lock on its temporary file until the rename, so a
     * prune can tell a live writer's file from one a killed writer left. A
     * prune that removed the file between its creation and the lock is
     * noticed (the name no longer leads to it) and a new one is made. */
    int fd = -1;
    for (int attempt = 0; attempt < 8 && fd < 0; attempt++) {
        memcpy(tmp + n - 6, "XXXXXX", 6);
        fd = mkostemp(tmp, O_CLOEXEC);
        if (fd < 0)
            goto fail_io;
        struct stat held, named;
        if (flock(fd, LOCK_EX) == 0 && fstat(fd, &held) == 0 && lstat(tmp, &named) == 0 &&
            held.st_ino == named.st_ino && held.st_dev == named.st_dev)
            break;
        close(fd);
        fd = -1;
    }
    if (fd < 0) {
        errno = EAGAIN;
        goto fail_io;
    }
    int bad = 0;
    if (cache->test_write_delay_ms) {
        /* Test hook: a visible half-written temporary file for kill tests. */
        size_t half = len / 2;
        bad = tk__cache_write_all(fd, bytes, half) != 0;
        sleep_ms(cache->test_write_delay_ms);
        bad = bad || tk__cache_write_all(fd, bytes + half, len - half) != 0;
    } else {
        bad = tk__cache_write_all(fd, bytes, len) != 0;
    }
    int saved = errno;
    if (close(fd) != 0 && !bad) {
        bad = 1;
        saved = errno;
    }
    int renamed = !bad && rename(tmp, path) == 0;
    if (!bad && !renamed && (errno == EISDIR || errno == ENOTEMPTY || errno == EEXIST)) {
        /* A folder where the entry belongs (the folder is ours, checked
         * above): it would make this kernel recompile forever. */
        int in_way = errno;
        if (tk__cache_remove_any(path) == 0) {
            tk__cache_warn_once(cache, TK__WARN_BAD,
                                "cache entry %s was a folder, not a file: removed it", path);
            renamed = rename(tmp, path) == 0;
        } else {
            int why = errno;
            tk__cache_warn_once(cache, TK__WARN_WRITE,
                                "cannot store %s: a folder is in the way and cannot be removed "
                                "(%s); remove it or run tokitai-jit --clear",
                                path, strerror(why));
            errno = in_way;
        }
    }
    if (bad || !renamed) {
        if (!bad)
            saved = errno;
        tk__cache_unlink(tmp);
        errno = saved;
        goto fail_io;
    }
    return TK_OK;
fail_io:
    tk__cache_warn_once(cache, TK__WARN_WRITE, "cannot store in cache folder %s: %s; continuing",
                        dir, strerror(errno));
    return tk__cache_fail(cache, TK_IO_ERROR, "cannot store %s: %s", path, strerror(errno));
}

tk_status tk__cache_put(tk_cache *cache, const tk__key *key, const tk__entry_meta *meta,
                        const void *payload, size_t payload_size)
{
    if (!cache || !meta || (!payload && payload_size) || check_key(key) != TK_OK)
        return TK_INVALID_ARGUMENT;
    if (cache->disabled || cache->read_only)
        return TK_OK; /* asked for: nothing to store */
    if (!cache->writable)
        return TK_IO_ERROR;
    uint8_t *buf = NULL;
    size_t len = 0;
    tk_status st = tk__entry_encode(key->bytes, key->len, key->fp_hi, key->fp_lo, meta, payload,
                                    payload_size, &buf, &len);
    if (st != TK_OK)
        return tk__cache_fail(cache, st, "cannot encode cache entry %s", key->hex);
    st = tk__cache_store_bytes(cache, key->hex, buf, len);
    tk__cache_remote_publish(cache, key, buf, len); /* a local compile, for the fleet */
    free(buf);
    /* After the entry: a sweep that misses the entry then sees the source
     * kept or refreshed just now (source.c). */
    if (st == TK_OK)
        for (size_t i = 0; i < key->n_blobs; i++)
            tk__source_keep(cache, &key->blobs[i]);
    return st;
}

tk_status tk__cache_store_bytes(tk_cache *cache, const char *hex, const uint8_t *buf, size_t len)
{
    tk_status st = tk__cache_publish(cache, hex, buf, len);
    if (st != TK_OK)
        return st;

    pthread_mutex_lock(&cache->mu);
    int known = cache->size_known;
    cache->size_tally += len;
    cache->added_total += len;
    int over = known && cache->size_tally > cache->max_size;
    pthread_mutex_unlock(&cache->mu);
    if (known && !over)
        return TK_OK;
    char path[PATH_MAX];
    tk__cache_entry_path(cache->fmt_dir, hex, path, sizeof(path));
    uint64_t limit = cache->max_size;
    if (!known) {
        /* First store of this handle: one scan learns the size (and evicts
         * only if already over the limit). */
        return tk__cache_evict(cache, limit, path, 0, NULL);
    }
    return tk__cache_evict(cache, limit / 100 * TK__EVICT_LOW_WATER_PERCENT +
                                      limit % 100 * TK__EVICT_LOW_WATER_PERCENT / 100,
                           path, 0, NULL);
}

/* --------------------------------------------------------------- eviction */

typedef struct victim {
    char *path;
    tk__file_id id; /* the file the scan saw: a store may replace it before the unlink */
} victim;

static int victim_cmp(const void *a, const void *b)
{
    const victim *x = a, *y = b;
    if (x->id.mtime_ns != y->id.mtime_ns)
        return x->id.mtime_ns < y->id.mtime_ns ? -1 : 1;
    return strcmp(x->path, y->path);
}

static int is_hex2(const char *s)
{
    return strlen(s) == 2 && strspn(s, "0123456789abcdef") == 2;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* Removes lock files nobody holds: left by holders killed with the lock
 * held (a holder removes its own at unlock). */
static void prune_locks(const char *fmt_dir, int all, time_t now)
{
    char *locks = join(fmt_dir, TK__LOCK_DIR);
    int dfd = locks ? tk__cache_open_dir(locks) : -1;
    DIR *dir = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!dir && dfd >= 0)
        close(dfd);
    struct dirent *e;
    while (dir && (e = readdir(dir)) != NULL) {
        if (!ends_with(e->d_name, ".lock"))
            continue;
        struct stat st;
        int fd = openat(dirfd(dir), e->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        /* Safe whatever its age: a process that locks a file unlinked
         * meanwhile notices and takes the current one (tk__cache_lock_key). */
        (void)all;
        (void)now;
        if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
            flock(fd, LOCK_EX | LOCK_NB) == 0)
            unlinkat(dirfd(dir), e->d_name, 0);
        if (fd >= 0)
            close(fd);
    }
    if (dir)
        closedir(dir);
    free(locks);
}

/* Unlinks a temporary file whose writer no longer holds its lock (killed
 * mid-store); 1 when removed. */
static int temp_unheld_unlink(int dfd, const char *name)
{
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return 0;
    int removed = flock(fd, LOCK_EX | LOCK_NB) == 0 && unlinkat(dfd, name, 0) == 0;
    close(fd);
    return removed;
}

tk_status tk__cache_evict(tk_cache *cache, uint64_t limit, const char *keep_path, int all_temps,
                          uint64_t *n_removed)
{
    tk_status st = TK_OK;
    victim *v = NULL;
    size_t n = 0, cap = 0;
    uint64_t total = 0, removed = 0;
    time_t now = time(NULL);
    /* One eviction at a time per handle; stores made while it scans are
     * added to its result, so the tally never underestimates. */
    pthread_mutex_lock(&cache->evict_mu);
    pthread_mutex_lock(&cache->mu);
    uint64_t added_before = cache->added_total;
    pthread_mutex_unlock(&cache->mu);
    DIR *top = opendir(cache->fmt_dir);
    if (!top) {
        if (errno != ENOENT)
            st = tk__cache_fail(cache, TK_IO_ERROR, "cannot read %s: %s", cache->fmt_dir,
                                strerror(errno));
        goto done;
    }
    struct dirent *d;
    while ((d = readdir(top)) != NULL) {
        if (!is_hex2(d->d_name))
            continue;
        char *sub = join(cache->fmt_dir, d->d_name);
        if (!sub) {
            st = TK_OUT_OF_MEMORY;
            break;
        }
        /* A shard folder that is a link is never followed. */
        int sfd = tk__cache_open_dir(sub);
        DIR *dir = sfd >= 0 ? fdopendir(sfd) : NULL;
        if (!dir && sfd >= 0)
            close(sfd);
        struct dirent *e;
        while (dir && (e = readdir(dir)) != NULL) {
            int temp = strncmp(e->d_name, TK__TEMP_PREFIX, strlen(TK__TEMP_PREFIX)) == 0;
            if (!temp && !ends_with(e->d_name, TK__ENTRY_EXT))
                continue;
            char *path = join(sub, e->d_name);
            struct stat fst;
            if (!path) {
                st = TK_OUT_OF_MEMORY;
                break;
            }
            if (fstatat(dirfd(dir), e->d_name, &fst, AT_SYMLINK_NOFOLLOW) != 0) {
                free(path);
                continue;
            }
            if (!S_ISREG(fst.st_mode)) {
                /* A folder, link or special file at an entry's name: never
                 * loadable; a tool's prune removes it (not followed). */
                if (n_removed && !temp && tk__cache_remove_any(path) == 0)
                    removed++;
                free(path);
                continue;
            }
            if (!temp && (uint64_t)fst.st_size > TK__ENTRY_MAX_FILE) {
                /* Larger than any entry can be: never loadable, and its size
                 * must not push good entries out. Only that file: a store
                 * may have renamed a fresh entry onto the name since. */
                tk__file_id seen = tk__file_id_of(&fst);
                if (tk__cache_unlink_same(path, &seen) == 0)
                    removed++;
                free(path);
                continue;
            }
            if (temp && strncmp(e->d_name, TK__GONE_PREFIX, strlen(TK__GONE_PREFIX)) == 0) {
                /* Moved aside by a removal in progress: its size is about
                 * to leave (it must not push good entries out), and it may
                 * be a fresh entry going back. Its rename set its change
                 * time (a moved file keeps its modification time); its
                 * remover holds a lock on it while alive. */
                if ((all_temps || now - fst.st_ctim.tv_sec > TK__STALE_TEMP_SECONDS) &&
                    unlinkat(dirfd(dir), e->d_name, 0) == 0)
                    removed++;
                else if (n_removed && temp_unheld_unlink(dirfd(dir), e->d_name))
                    removed++; /* a tool's prune: its remover is gone */
                free(path);
                continue;
            }
            if (temp) {
                if (all_temps || now - fst.st_mtim.tv_sec > TK__STALE_TEMP_SECONDS) {
                    if (unlinkat(dirfd(dir), e->d_name, 0) == 0)
                        removed++;
                } else if (n_removed && temp_unheld_unlink(dirfd(dir), e->d_name)) {
                    removed++; /* a tool's prune: its writer is gone */
                } else {
                    total += (uint64_t)fst.st_size;
                }
                free(path);
                continue;
            }
            if (n == cap) {
                size_t ncap = cap ? cap * 2 : 64;
                victim *nv = realloc(v, ncap * sizeof(*v));
                if (!nv) {
                    free(path);
                    st = TK_OUT_OF_MEMORY;
                    break;
                }
                v = nv;
                cap = ncap;
            }
            v[n].path = path;
            v[n].id = tk__file_id_of(&fst);
            total += v[n].id.size;
            n++;
        }
        if (dir)
            closedir(dir);
        free(sub);
        if (st != TK_OK)
            break;
    }
    closedir(top);
    if (st != TK_OK)
        goto done;
    if (n_removed)
        prune_locks(cache->fmt_dir, all_temps, now); /* tools only, not after each store */
    /* Kept sources count toward the limit; the entries go first (a source
     * is shared by many), then the sources none of the rest names. */
    total += tk__source_bytes(cache);
    if (n > 1)
        qsort(v, n, sizeof(*v), victim_cmp);
    uint64_t evicted = 0;
    for (size_t i = 0; i < n && total > limit; i++) {
        if (keep_path && strcmp(v[i].path, keep_path) == 0)
            continue;
        /* gone either way when replaced (ESTALE: the fresh entry is in
         * the tally as an addition) or being removed by another (EBUSY) */
        if (tk__cache_unlink_same(v[i].path, &v[i].id) == 0 || errno == ENOENT || errno == ESTALE ||
            errno == EBUSY) {
            total -= v[i].id.size;
            evicted++;
        }
    }
    removed += evicted;
    if (evicted || n_removed) {
        uint64_t swept = 0, freed = 0;
        tk__source_sweep(cache, &swept, &freed);
        total -= freed < total ? freed : total;
        removed += swept;
    }
    pthread_mutex_lock(&cache->mu);
    cache->size_known = 1;
    cache->size_tally = total + (cache->added_total - added_before);
    pthread_mutex_unlock(&cache->mu);
done:
    pthread_mutex_unlock(&cache->evict_mu);
    for (size_t i = 0; i < n; i++)
        free(v[i].path);
    free(v);
    if (st == TK_OK && n_removed)
        *n_removed = removed;
    return st;
}
