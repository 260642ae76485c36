/*
 * Statistics that outlive a process, per cache (like ccache's): hits,
 * misses, compiles, compile time, fallback calls and errors, summed over
 * every process that used the cache since the last zeroing.
 *
 * Nothing happens on the lookup path: the engine counts in memory (as it
 * does for tk_context_stats) and hands its counts to the cache handle when
 * the context is destroyed or its counters reset; the handle appends them
 * as one 64-byte record to <root>/<format>/stats when it closes (one
 * O_APPEND write, under a shared lock). Readers sum the records; zeroing
 * (and compaction, when the file has grown) replaces the file with a
 * rename under the exclusive lock, and a writer that finds the file
 * replaced under it writes to the new one.
 *
 * Record: "TKST", u32 kind (1: counts, 2: zeroed at values[0] seconds),
 * 6 x u64 values (hits, misses, compiles, compile ns, fallback calls,
 * errors), u64 XXH3-64 of the 56 bytes before it. A torn or damaged record
 * is skipped.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#include "cache/cache_internal.h"
#include "common/size.h"

#define STATS_FILE "stats"
#define REC_SIZE 64
#define KIND_COUNTS 1
#define KIND_ZEROED 2
/* Records past this are summed into one by the next reader. */
#define COMPACT_AT 4096

static void put_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static void encode(uint8_t r[REC_SIZE], uint32_t kind, const uint64_t v[TK__PSTAT_COUNT])
{
    memcpy(r, "TKST", 4);
    put_le(r + 4, kind, 4);
    for (int i = 0; i < TK__PSTAT_COUNT; i++)
        put_le(r + 8 + 8 * i, v[i], 8);
    put_le(r + 56, XXH3_64bits(r, 56), 8);
}

static int stats_path(const tk_cache *cache, char *buf, size_t size)
{
    if (!cache->fmt_dir)
        return -1;
    int n = snprintf(buf, size, "%s/" STATS_FILE, cache->fmt_dir);
    return n < 0 || (size_t)n >= size ? -1 : 0;
}

void tk__cache_stats_add(tk_cache *cache, const uint64_t v[TK__PSTAT_COUNT])
{
    if (!cache)
        return;
    for (int i = 0; i < TK__PSTAT_COUNT; i++)
        if (v[i])
            __atomic_fetch_add(&cache->pstat[i], v[i], __ATOMIC_RELAXED);
}

/* Opens the stats file under the lock kind, reopening when a zeroing or a
 * compaction renamed a new file over the one opened. -1 when none. */
static int open_locked(const char *path, int flags, int lock)
{
    for (int attempt = 0; attempt < 8; attempt++) {
        int fd = open(path, flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
        if (fd < 0)
            return -1;
        struct stat held, named;
        if (flock(fd, lock) == 0 && fstat(fd, &held) == 0 && S_ISREG(held.st_mode) &&
            held.st_uid == geteuid() && lstat(path, &named) == 0 && held.st_ino == named.st_ino &&
            held.st_dev == named.st_dev)
            return fd;
        close(fd);
        if (errno == EACCES || errno == EPERM)
            return -1;
    }
    return -1;
}

void tk__cache_stats_flush(tk_cache *cache)
{
    if (!cache)
        return;
    uint64_t v[TK__PSTAT_COUNT];
    int any = 0;
    for (int i = 0; i < TK__PSTAT_COUNT; i++) {
        v[i] = __atomic_exchange_n(&cache->pstat[i], 0, __ATOMIC_RELAXED);
        any |= v[i] != 0;
    }
    char path[PATH_MAX];
    if (!any || !cache->writable || cache->read_only || cache->disabled ||
        stats_path(cache, path, sizeof path) != 0)
        return;
    int fd = open_locked(path, O_WRONLY | O_APPEND | O_CREAT, LOCK_SH);
    if (fd < 0)
        return; /* statistics are best effort: never a failure */
    uint8_t r[REC_SIZE];
    encode(r, KIND_COUNTS, v);
    if (write(fd, r, sizeof r) != (ssize_t)sizeof r) {
        /* A short write leaves a torn record readers skip. */
    }
    close(fd);
}

/* Replaces the file with one holding records r (n of them), under the
 * exclusive lock held on fd. */
static int replace_file(const char *path, const uint8_t *r, size_t n)
{
    char tmp[PATH_MAX + 32];
    snprintf(tmp, sizeof tmp, "%s." TK__TEMP_PREFIX "XXXXXX", path);
    int t = mkostemp(tmp, O_CLOEXEC);
    if (t < 0)
        return -1;
    int bad = n && write(t, r, n * REC_SIZE) != (ssize_t)(n * REC_SIZE);
    bad = close(t) != 0 || bad;
    if (bad || rename(tmp, path) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

tk_status tk__cache_stats_read(tk_cache *cache, uint64_t v[TK__PSTAT_COUNT], int64_t *since)
{
    memset(v, 0, TK__PSTAT_COUNT * sizeof *v);
    *since = 0;
    char path[PATH_MAX];
    if (stats_path(cache, path, sizeof path) != 0)
        return TK_OK;
    int writable = cache->writable && !cache->read_only && !cache->disabled;
    int fd = open_locked(path, writable ? O_RDWR : O_RDONLY, writable ? LOCK_EX : LOCK_SH);
    if (fd < 0)
        return TK_OK; /* none yet */
    struct stat st;
    uint8_t *buf = NULL;
    size_t n = 0;
    if (fstat(fd, &st) == 0 && st.st_size > 0 && (uint64_t)st.st_size < ((uint64_t)1 << 30) &&
        (buf = malloc((size_t)st.st_size)) != NULL) {
        ssize_t got = pread(fd, buf, (size_t)st.st_size, 0);
        n = got > 0 ? (size_t)got / REC_SIZE : 0;
    }
    size_t good = 0;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *r = buf + i * REC_SIZE;
        if (memcmp(r, "TKST", 4) != 0 || get_le(r + 56, 8) != XXH3_64bits(r, 56))
            continue;
        uint32_t kind = (uint32_t)get_le(r + 4, 4);
        if (kind == KIND_COUNTS) {
            for (int k = 0; k < TK__PSTAT_COUNT; k++)
                v[k] += get_le(r + 8 + 8 * k, 8);
            good++;
        } else if (kind == KIND_ZEROED) {
            *since = (int64_t)get_le(r + 8, 8);
        }
    }
    if (writable && good > COMPACT_AT) {
        uint8_t rec[2 * REC_SIZE];
        uint64_t z[TK__PSTAT_COUNT] = {(uint64_t)*since};
        encode(rec, KIND_ZEROED, z);
        encode(rec + REC_SIZE, KIND_COUNTS, v);
        replace_file(path, rec, 2);
    }
    free(buf);
    close(fd);
    return TK_OK;
}

tk_status tk_cache_zero_stats(tk_cache *cache)
{
    if (!cache)
        return TK_INVALID_ARGUMENT;
    if (cache->root_state == TK__ROOT_BAD)
        return tk__cache_fail(cache, TK_IO_ERROR, "%s", cache->root_problem);
    if (!cache->writable || cache->read_only || cache->disabled)
        return tk__cache_fail(cache, TK_IO_ERROR, "the cache under %s is not writable",
                              cache->root);
    char path[PATH_MAX];
    if (stats_path(cache, path, sizeof path) != 0)
        return TK_INVALID_ARGUMENT;
    int fd = open_locked(path, O_RDWR | O_CREAT, LOCK_EX);
    if (fd < 0)
        return tk__cache_fail(cache, TK_IO_ERROR, "cannot open %s: %s", path, strerror(errno));
    uint8_t rec[REC_SIZE];
    uint64_t z[TK__PSTAT_COUNT] = {(uint64_t)time(NULL)};
    encode(rec, KIND_ZEROED, z);
    int r = replace_file(path, rec, 1);
    int saved = errno;
    close(fd);
    if (r != 0)
        return tk__cache_fail(cache, TK_IO_ERROR, "cannot rewrite %s: %s", path, strerror(saved));
    return TK_OK;
}

/* ------------------------------------------------------- the config file */

/* <root>/config: "max_size = SIZE" lines (ccache's habit: -M sets it once).
 * Read at open when neither the caller nor the environment set a limit. */
static int config_path(const char *root, char *buf, size_t size)
{
    int n = snprintf(buf, size, "%s/config", root);
    return n < 0 || (size_t)n >= size ? -1 : 0;
}

tk_status tk__cache_config_max_size(const char *root, uint64_t *out, char *why, size_t why_size)
{
    char path[PATH_MAX];
    *out = 0;
    why[0] = 0;
    if (!root || !*root || config_path(root, path, sizeof path) != 0)
        return TK_NOT_FOUND;
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return TK_NOT_FOUND;
    char text[4096];
    struct stat st;
    ssize_t n = -1;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid())
        n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n < 0) {
        snprintf(why, why_size, "%s is not a regular file of this user", path);
        return TK_CORRUPT;
    }
    text[n] = 0;
    tk_status st_out = TK_NOT_FOUND;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        while (*line == ' ' || *line == '\t')
            line++;
        if (!*line || *line == '#')
            continue;
        char key[64], value[128];
        if (sscanf(line, " %63[a-z_] = %127s", key, value) != 2) {
            snprintf(why, why_size, "%s: cannot read line '%.60s'", path, line);
            return TK_CORRUPT;
        }
        if (strcmp(key, "max_size") != 0) {
            snprintf(why, why_size, "%s: unknown setting '%s'", path, key);
            return TK_CORRUPT;
        }
        if (tk_parse_size(value, out) != TK_OK) {
            snprintf(why, why_size, "%s: max_size = %s is not a size", path, value);
            *out = 0;
            return TK_CORRUPT;
        }
        st_out = TK_OK;
    }
    return st_out;
}

tk_status tk_cache_set_max_size(tk_cache *cache, uint64_t max_bytes)
{
    if (!cache)
        return TK_INVALID_ARGUMENT;
    if (cache->root_state == TK__ROOT_BAD)
        return tk__cache_fail(cache, TK_IO_ERROR, "%s", cache->root_problem);
    if (!cache->writable || cache->read_only || cache->disabled)
        return tk__cache_fail(cache, TK_IO_ERROR, "the cache under %s is not writable",
                              cache->root);
    char path[PATH_MAX], tmp[PATH_MAX + 32];
    if (config_path(cache->root, path, sizeof path) != 0)
        return TK_INVALID_ARGUMENT;
    snprintf(tmp, sizeof tmp, "%s/" TK__TEMP_PREFIX "config.XXXXXX", cache->root);
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0)
        return tk__cache_fail(cache, TK_IO_ERROR, "cannot write %s: %s", path, strerror(errno));
    char text[128];
    int len = max_bytes
                  ? snprintf(text, sizeof text,
                             "# written by tokitai-jit --max-size\nmax_size = %llu\n",
                             (unsigned long long)max_bytes)
                  : snprintf(text, sizeof text, "# written by tokitai-jit --max-size 0\n");
    int bad = write(fd, text, (size_t)len) != len;
    bad = close(fd) != 0 || bad;
    if (bad || rename(tmp, path) != 0) {
        int saved = errno;
        unlink(tmp);
        return tk__cache_fail(cache, TK_IO_ERROR, "cannot write %s: %s", path, strerror(saved));
    }
    cache->max_size = max_bytes ? max_bytes : TK__CACHE_DEFAULT_MAX_SIZE;
    return TK_OK;
}

/* ------------------------------------------------------------------ sizes */

/* The sizes of the config file, of TOKITAI_JIT_CACHE_MAX_SIZE and of -M. */
tk_status tk_parse_size(const char *text, uint64_t *out)
{
    if (!text || !out)
        return TK_INVALID_ARGUMENT;
    return tk__size_parse(text, out) == 0 ? TK_OK : TK_INVALID_ARGUMENT;
}
