/* Kept sources: a hashed key value (a kernel's whole source) stored once per
 * content next to the entries that name it, so that the source of any key
 * can be shown; counted in the size limit, and removed when no entry names
 * it any more (see cache_internal.h for the layout). An entry never depends
 * on its source: every trouble here is a source not shown, never a miss. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>
#include <zstd.h>

#include "cache/cache_internal.h"

/* Sources compress 5-10x; they are written once per content. */
#define SOURCE_ZSTD_LEVEL 9
/* Key material larger than this is not read by a sweep (the engine's keys
 * are a few hundred bytes); such an entry then names no source. */
#define SWEEP_MAX_KEY (1u << 20)

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static void file_name(uint64_t hi, uint64_t lo, char name[40])
{
    char hex[33];
    tk__fp_hex(hi, lo, hex);
    snprintf(name, 40, "%s.zst", hex);
}

/* <fmt_dir>/src opened without following a link, when it is a folder of
 * ours (or root's, for a read-only tier); -1 otherwise. */
static int open_src_dir(const char *fmt_dir, int allow_root_owner)
{
    char dir[PATH_MAX];
    int n = snprintf(dir, sizeof dir, "%s/" TK__SRC_DIR, fmt_dir);
    if (n < 0 || (size_t)n >= sizeof dir)
        return -1;
    int dfd = tk__cache_open_dir(dir);
    struct stat st;
    if (dfd >= 0 && (fstat(dfd, &st) != 0 || tk__cache_stat_unsafe(&st, allow_root_owner))) {
        close(dfd);
        return -1;
    }
    return dfd;
}

tk_status tk__source_check(const uint8_t *frame, size_t len, uint64_t hi, uint64_t lo, char **text,
                           size_t *text_len, const char **why)
{
    unsigned long long n = ZSTD_getFrameContentSize(frame, len);
    if (n == ZSTD_CONTENTSIZE_ERROR || n == ZSTD_CONTENTSIZE_UNKNOWN ||
        ZSTD_findFrameCompressedSize(frame, len) != len) {
        *why = "not one zstd frame declaring its size";
        return TK_CORRUPT;
    }
    if (n > TK__SOURCE_MAX) {
        *why = "source larger than the largest kept (64 MiB)";
        return TK_CORRUPT;
    }
    char *buf = malloc((size_t)n + 1);
    if (!buf) {
        *why = "out of memory";
        return TK_OUT_OF_MEMORY;
    }
    size_t got = tk__zstd_decompress(buf, (size_t)n, frame, len);
    if (ZSTD_isError(got) || got != n) {
        free(buf);
        *why = "source does not decode";
        return TK_CORRUPT;
    }
    XXH128_hash_t h = XXH3_128bits(buf, (size_t)n);
    if (h.high64 != hi || h.low64 != lo) {
        free(buf);
        *why = "source does not match its fingerprint";
        return TK_CORRUPT;
    }
    buf[n] = 0;
    if (text) {
        *text = buf;
        *text_len = (size_t)n;
    } else {
        free(buf);
    }
    return TK_OK;
}

tk_status tk__source_keep_frame(tk_cache *cache, uint64_t hi, uint64_t lo, const uint8_t *frame,
                                size_t len)
{
    if (!cache->writable || cache->disabled || cache->read_only || !cache->fmt_dir)
        return TK_IO_ERROR;
    char dir[PATH_MAX], tmp[PATH_MAX], name[40];
    file_name(hi, lo, name);
    int n = snprintf(dir, sizeof dir, "%s/" TK__SRC_DIR, cache->fmt_dir);
    int m = snprintf(tmp, sizeof tmp, "%s/" TK__TEMP_PREFIX "%.32s.XXXXXX", dir, name);
    if (n < 0 || (size_t)n >= sizeof dir || m < 0 || (size_t)m >= sizeof tmp)
        return TK_OVERFLOW;
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return TK_IO_ERROR;
    int dfd = open_src_dir(cache->fmt_dir, 0);
    if (dfd < 0)
        return TK_IO_ERROR;
    tk_status st = TK_OK;
    struct stat fst;
    if (fstatat(dfd, name, &fst, AT_SYMLINK_NOFOLLOW) == 0) {
        /* Its name is its hash: the file stays. A newer time tells a sweep
         * running meanwhile that an entry has just named it. */
        if (S_ISREG(fst.st_mode))
            utimensat(dfd, name, NULL, AT_SYMLINK_NOFOLLOW);
        goto done;
    }
    if (!frame) {
        st = TK_NOT_FOUND; /* only a refresh was asked for */
        goto done;
    }
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        st = TK_IO_ERROR;
        goto done;
    }
    int bad = tk__cache_write_all(fd, frame, len) != 0;
    bad = close(fd) != 0 || bad;
    const char *tmp_name = strrchr(tmp, '/') + 1;
    if (bad || renameat(dfd, tmp_name, dfd, name) != 0) {
        unlinkat(dfd, tmp_name, 0);
        st = TK_IO_ERROR;
    }
done:
    close(dfd);
    return st;
}

void tk__source_keep(tk_cache *cache, const tk__key_blob *b)
{
    if (!cache->writable || cache->disabled || cache->read_only || !cache->fmt_dir ||
        b->len > TK__SOURCE_MAX)
        return;
    if (tk__source_keep_frame(cache, b->hi, b->lo, NULL, 0) != TK_NOT_FOUND)
        return; /* kept already (its time refreshed), or no folder for it */
    size_t bound = ZSTD_compressBound(b->len);
    uint8_t *z = malloc(bound);
    if (!z)
        return;
    size_t zn = ZSTD_compress(z, bound, b->data, b->len, SOURCE_ZSTD_LEVEL);
    if (!ZSTD_isError(zn))
        tk__source_keep_frame(cache, b->hi, b->lo, z, zn);
    free(z);
}

/* Reads and checks the kept file of hi/lo in one tier's folder. */
static tk_status read_in(const char *fmt_dir, int user_tier, uint64_t hi, uint64_t lo,
                         uint8_t **frame, size_t *frame_len, char **text, size_t *text_len,
                         const char **why)
{
    char name[40];
    file_name(hi, lo, name);
    int dfd = open_src_dir(fmt_dir, !user_tier);
    if (dfd < 0)
        return TK_NOT_FOUND;
    tk_status s = TK_NOT_FOUND;
    uint8_t *buf = NULL;
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    close(dfd);
    if (fd < 0)
        return TK_NOT_FOUND;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
        (st.st_uid != geteuid() && !(!user_tier && st.st_uid == 0))) {
        *why = "kept source is not a regular file of this user";
        s = TK_CORRUPT;
        goto done;
    }
    if ((uint64_t)st.st_size > ZSTD_compressBound(TK__SOURCE_MAX)) {
        *why = "kept source too large";
        s = TK_CORRUPT;
        goto done;
    }
    s = tk__read_fd(fd, (uint64_t)st.st_size, &buf);
    if (s != TK_OK) {
        *why = "kept source unreadable";
        goto done;
    }
    s = tk__source_check(buf, (size_t)st.st_size, hi, lo, text, text_len, why);
    if (s == TK_OK && frame) {
        *frame = buf;
        *frame_len = (size_t)st.st_size;
        buf = NULL;
    }
done:
    free(buf);
    close(fd);
    return s;
}

tk_status tk__source_read(tk_cache *cache, uint64_t hi, uint64_t lo, uint8_t **frame,
                          size_t *frame_len, char **text, size_t *text_len, const char **why)
{
    *why = "no kept source";
    tk_status s = TK_NOT_FOUND;
    if (cache->root_state == TK__ROOT_OK) {
        s = read_in(cache->fmt_dir, 1, hi, lo, frame, frame_len, text, text_len, why);
        if (s == TK_OK || s == TK_OUT_OF_MEMORY)
            return s;
    }
    for (size_t i = 0; i < cache->n_lower; i++) {
        s = read_in(cache->lower[i], 0, hi, lo, frame, frame_len, text, text_len, why);
        if (s == TK_OK || s == TK_OUT_OF_MEMORY)
            return s;
    }
    return TK_NOT_FOUND;
}

uint64_t tk__source_bytes(const tk_cache *cache)
{
    if (cache->root_state != TK__ROOT_OK)
        return 0;
    int dfd = open_src_dir(cache->fmt_dir, 0);
    DIR *dir = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!dir) {
        if (dfd >= 0)
            close(dfd);
        return 0;
    }
    uint64_t total = 0;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        struct stat st;
        if (ends_with(e->d_name, ".zst") &&
            fstatat(dirfd(dir), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
            total += (uint64_t)st.st_size;
    }
    closedir(dir);
    return total;
}

/* ------------------------------------------------------------------ sweep */

typedef struct hash_set {
    uint64_t (*v)[2];
    size_t n, cap;
    int failed;
} hash_set;

static void set_add(hash_set *s, uint64_t hi, uint64_t lo)
{
    if (s->n == s->cap) {
        size_t ncap = s->cap ? 2 * s->cap : 64;
        void *nv = realloc(s->v, ncap * sizeof *s->v);
        if (!nv) {
            s->failed = 1;
            return;
        }
        s->v = nv;
        s->cap = ncap;
    }
    s->v[s->n][0] = hi;
    s->v[s->n][1] = lo;
    s->n++;
}

static int hash_cmp(const void *a, const void *b)
{
    const uint64_t *x = a, *y = b;
    if (x[0] != y[0])
        return x[0] < y[0] ? -1 : 1;
    return (x[1] > y[1]) - (x[1] < y[1]);
}

/* Adds every hashed value an entry file's key material names. */
static void names_of(int dfd, const char *name, hash_set *s)
{
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return;
    struct stat st;
    uint8_t head[TK__ENTRY_HEADER_SIZE];
    tk__entry_view v;
    const char *why;
    uint8_t *key = NULL;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size >= sizeof head &&
        pread(fd, head, sizeof head, 0) == (ssize_t)sizeof head &&
        tk__entry_parse_header(head, (uint64_t)st.st_size, &v, &why) == TK_OK &&
        v.key_size <= SWEEP_MAX_KEY && (key = malloc(v.key_size ? v.key_size : 1)) != NULL &&
        pread(fd, key, v.key_size, (off_t)(TK__ENTRY_HEADER_SIZE + v.meta_size)) ==
            (ssize_t)v.key_size) {
        size_t pos = 0;
        tk__key_field f;
        while (tk__key_next(key, v.key_size, &pos, &f) == 1)
            if (f.hashed)
                set_add(s, f.hi, f.lo);
    }
    free(key);
    close(fd);
}

static int is_hex2(const char *s)
{
    return strlen(s) == 2 && strspn(s, "0123456789abcdef") == 2;
}

/* The hashed values the user tier's entries name, sorted; 0 when the
 * entries could not all be read (then nothing may be swept). */
static int names_in_tier(const char *fmt_dir, hash_set *s)
{
    int top = tk__cache_open_dir(fmt_dir);
    DIR *d = top >= 0 ? fdopendir(top) : NULL;
    if (!d) {
        if (top >= 0)
            close(top);
        return 0;
    }
    struct dirent *e;
    while (!s->failed && (e = readdir(d)) != NULL) {
        if (!is_hex2(e->d_name))
            continue;
        int sfd = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        DIR *sd = sfd >= 0 ? fdopendir(sfd) : NULL;
        if (!sd) {
            if (sfd >= 0)
                close(sfd);
            continue; /* a link or not a folder: no entry of ours is in it */
        }
        struct dirent *f;
        while ((f = readdir(sd)) != NULL)
            if (ends_with(f->d_name, TK__ENTRY_EXT))
                names_of(dirfd(sd), f->d_name, s);
        closedir(sd);
    }
    closedir(d);
    if (s->failed)
        return 0;
    if (s->n > 1)
        qsort(s->v, s->n, sizeof *s->v, hash_cmp);
    return 1;
}

static int parse_name(const char *name, uint64_t *hi, uint64_t *lo)
{
    if (strlen(name) != 32 + 4 || strspn(name, "0123456789abcdef") != 32 ||
        strcmp(name + 32, ".zst") != 0)
        return 0;
    char part[17];
    memcpy(part, name, 16);
    part[16] = 0;
    *hi = strtoull(part, NULL, 16);
    memcpy(part, name + 16, 16);
    *lo = strtoull(part, NULL, 16);
    return 1;
}

void tk__source_sweep(tk_cache *cache, uint64_t *n_removed, uint64_t *freed)
{
    *n_removed = 0;
    *freed = 0;
    if (cache->root_state != TK__ROOT_OK || !cache->writable || cache->read_only || cache->disabled)
        return;
    int dfd = open_src_dir(cache->fmt_dir, 0);
    DIR *dir = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!dir) {
        if (dfd >= 0)
            close(dfd);
        return;
    }
    /* A store publishes its entry before it keeps (or refreshes the time
     * of) the entry's source, so a store running meanwhile is seen either
     * in the names read below, or as a source used within the grace time
     * (spared), or it writes the source again after this removed it. */
    time_t now = time(NULL);
    hash_set names = {0};
    if (!names_in_tier(cache->fmt_dir, &names)) {
        closedir(dir);
        free(names.v);
        return;
    }
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        uint64_t key[2];
        struct stat st;
        if (!parse_name(e->d_name, &key[0], &key[1]) ||
            fstatat(dirfd(dir), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) ||
            now - st.st_mtim.tv_sec < TK__SOURCE_GRACE_SECONDS)
            continue;
        if (names.n && bsearch(key, names.v, names.n, sizeof *names.v, hash_cmp))
            continue;
        if (unlinkat(dirfd(dir), e->d_name, 0) == 0) {
            ++*n_removed;
            *freed += (uint64_t)st.st_size;
        }
    }
    closedir(dir);
    free(names.v);
}
