/* The public cache tools: list, stats, verify, prune, clear, bundles (export,
 * import, and the push of a cache or a bundle to the remote tier). */
#include <ctype.h>
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
#include "cache/remote.h"
#include "common/out_struct.h"

/* ------------------------------------------------------------------ walk */

static int ends_with_str(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* FILE_BAD_DIR: a shard folder that is a link, another user's or writable by
 * others; its contents are never visited. */
enum file_kind { FILE_ENTRY, FILE_TEMP, FILE_OTHER, FILE_BAD_DIR };

/* Return non-zero to stop. hex is the key the path names (FILE_ENTRY only). */
typedef int (*walk_fn)(void *ctx, const char *path, enum file_kind kind, const char *hex);

static int hex2_filter(const struct dirent *d)
{
    return strlen(d->d_name) == 2 && strspn(d->d_name, "0123456789abcdef") == 2;
}

static int not_dots(const struct dirent *d)
{
    return strcmp(d->d_name, ".") != 0 && strcmp(d->d_name, "..") != 0;
}

/* Visits the files of one tier in sorted order, so listings are stable. */
static tk_status walk_tier(const char *fmt_dir, int allow_root, walk_fn fn, void *ctx, int *stopped)
{
    struct dirent **subs = NULL;
    int n = scandir(fmt_dir, &subs, hex2_filter, alphasort);
    if (n < 0)
        return errno == ENOENT || errno == ENOTDIR ? TK_OK : TK_IO_ERROR;
    tk_status st = TK_OK;
    for (int i = 0; i < n; i++) {
        char sub[PATH_MAX];
        snprintf(sub, sizeof(sub), "%s/%s", fmt_dir, subs[i]->d_name);
        if (!*stopped && tk__cache_dir_unsafe(sub, allow_root)) {
            *stopped = fn(ctx, sub, FILE_BAD_DIR, "");
            continue;
        }
        struct dirent **files = NULL;
        int m = *stopped ? 0 : scandir(sub, &files, not_dots, alphasort);
        for (int j = 0; j < m; j++) {
            const char *name = files[j]->d_name;
            char path[PATH_MAX], hex[33];
            int len = snprintf(path, sizeof(path), "%s/%s", sub, name);
            enum file_kind kind = FILE_OTHER;
            hex[0] = 0;
            if (strncmp(name, TK__TEMP_PREFIX, strlen(TK__TEMP_PREFIX)) == 0) {
                kind = FILE_TEMP;
            } else if (strlen(name) == 30 + strlen(TK__ENTRY_EXT) &&
                       strspn(name, "0123456789abcdef") == 30 &&
                       strcmp(name + 30, TK__ENTRY_EXT) == 0) {
                kind = FILE_ENTRY;
                memcpy(hex, subs[i]->d_name, 2);
                memcpy(hex + 2, name, 30);
                hex[32] = 0;
            }
            if (len > 0 && (size_t)len < sizeof(path) && !*stopped)
                *stopped = fn(ctx, path, kind, hex);
        }
        for (int j = 0; j < m; j++)
            free(files[j]);
        free(files);
    }
    for (int i = 0; i < n; i++)
        free(subs[i]);
    free(subs);
    return st;
}

/* Tools need a usable user tier; a missing one is an empty cache. */
static tk_status user_tier_check(tk_cache *cache)
{
    if (cache->root_state == TK__ROOT_BAD)
        return tk__cache_fail(cache, TK_IO_ERROR, "%s", cache->root_problem);
    return TK_OK;
}

/* ---------------------------------------------------------- header reads */

/* Key material larger than this is not read by a listing (the engine's
 * keys are a few hundred bytes); such an entry shows no source hash. */
#define LIST_MAX_KEY (1u << 20)

/* Reads header, metadata and (unless oversized) key material of one entry:
 * v->key points into *buf (malloc'd on success), or is NULL. */
static tk_status read_head(const char *path, int user_tier, struct stat *st, tk__entry_view *v,
                           uint8_t **buf, const char **why)
{
    *why = "unreadable";
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return TK_IO_ERROR;
    tk_status s = TK_CORRUPT;
    uint8_t *b = NULL;
    if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) {
        *why = "not a regular file";
        goto done;
    }
    if (st->st_uid != geteuid() && !(!user_tier && st->st_uid == 0)) {
        *why = "owned by another user";
        goto done;
    }
    uint8_t head[TK__ENTRY_HEADER_SIZE];
    if ((uint64_t)st->st_size < sizeof(head) ||
        pread(fd, head, sizeof(head), 0) != (ssize_t)sizeof(head)) {
        *why = "truncated header";
        goto done;
    }
    s = tk__entry_parse_header(head, (uint64_t)st->st_size, v, why);
    if (s != TK_OK)
        goto done;
    s = TK_OUT_OF_MEMORY;
    size_t n = TK__ENTRY_HEADER_SIZE + (size_t)v->meta_size;
    size_t key = v->key_size <= LIST_MAX_KEY ? v->key_size : 0;
    b = malloc(n + key);
    if (!b)
        goto done;
    s = TK_CORRUPT;
    if (pread(fd, b, n + key, 0) != (ssize_t)(n + key)) {
        *why = "truncated metadata";
        goto done;
    }
    s = tk__entry_parse_meta(b, v, why);
    v->key = key || !v->key_size ? b + n : NULL;
done:
    close(fd);
    if (s == TK_OK)
        *buf = b;
    else
        free(b);
    return s;
}

/* The strings of a view, NUL-terminated, in one malloc'd block. */
static char *view_strings(const tk__entry_view *v, const char *ptrs[TK__ENTRY_N_STRINGS])
{
    size_t total = 0;
    for (int i = 0; i < TK__ENTRY_N_STRINGS; i++)
        total += (size_t)v->strings[i].len + 1;
    char *s = malloc(total), *p = s;
    if (!s)
        return NULL;
    for (int i = 0; i < TK__ENTRY_N_STRINGS; i++) {
        memcpy(p, v->strings[i].ptr ? v->strings[i].ptr : "", v->strings[i].len);
        p[v->strings[i].len] = 0;
        ptrs[i] = p;
        p += v->strings[i].len + 1;
    }
    return s;
}

/* The hex of the kernel's source when the key material names it by its
 * hash (a source kept under src/); NULL when it sits in the key itself or
 * there is none. */
static const char *source_hash_of(const tk__entry_view *v, char hex[33])
{
    tk__key_field f;
    if (!v->key || !tk__key_find(v->key, v->key_size, TK__KEY_SOURCE_TAG, &f) || !f.hashed)
        return NULL;
    tk__fp_hex(f.hi, f.lo, hex);
    return hex;
}

/* The public view of one entry; every pointer borrowed from the caller's
 * (hash: 33 bytes for the source hash). */
static void fill_info(tk_cache_entry_info *info, const char *hex, const char *path,
                      const char *const s[TK__ENTRY_N_STRINGS], const tk__entry_view *v,
                      const struct stat *st, int read_only_tier, char hash[33])
{
    memset(info, 0, sizeof(*info));
    info->struct_size = sizeof(*info);
    info->key_hex = hex;
    info->path = path;
    info->kernel = s[0];
    info->source = s[1];
    info->backend = s[2];
    info->arch = s[3];
    info->compiler = s[4];
    info->options = s[5];
    info->payload_size = v->payload_size;
    info->file_size = (uint64_t)st->st_size;
    info->created = v->created;
    info->last_used = (int64_t)st->st_mtim.tv_sec;
    info->resources = v->resources;
    info->read_only_tier = read_only_tier;
    info->source_hash = source_hash_of(v, hash);
}

/* ------------------------------------------------------------------- list */

typedef struct list_ctx {
    tk_cache_visit_fn visit;
    void *user;
    int read_only_tier;
    tk_status status;
} list_ctx;

/* Reads the head of the entry file at path (named hex) and hands its
 * listing to fn (the user tier's files checked as its own: not a read-only
 * tier's). Returns 0 for a file that is no entry this walk can read, else
 * what fn returned; 1, with TK_OUT_OF_MEMORY in *status, when its strings
 * could not be copied. */
typedef int (*entry_info_fn)(void *user, const char *path, const tk_cache_entry_info *info);
static int with_entry_info(const char *path, const char *hex, int read_only_tier, entry_info_fn fn,
                           void *user, tk_status *status)
{
    struct stat st;
    tk__entry_view v;
    uint8_t *buf = NULL;
    const char *why;
    if (read_head(path, !read_only_tier, &st, &v, &buf, &why) != TK_OK)
        return 0;
    char fp[33];
    tk__fp_hex(v.fp_hi, v.fp_lo, fp);
    int stop = 0;
    const char *s[TK__ENTRY_N_STRINGS];
    char *strings = strcmp(fp, hex) == 0 ? view_strings(&v, s) : NULL;
    if (strings) {
        tk_cache_entry_info info;
        char hash[33];
        fill_info(&info, hex, path, s, &v, &st, read_only_tier, hash);
        stop = fn(user, path, &info);
    } else if (strcmp(fp, hex) == 0) {
        *status = TK_OUT_OF_MEMORY;
        stop = 1;
    }
    free(strings);
    free(buf);
    return stop;
}

static int list_visit(void *p, const char *path, const tk_cache_entry_info *info)
{
    (void)path;
    const list_ctx *c = p;
    return c->visit(c->user, info);
}

static int list_one(void *p, const char *path, enum file_kind kind, const char *hex)
{
    list_ctx *c = p;
    if (kind != FILE_ENTRY)
        return 0;
    return with_entry_info(path, hex, c->read_only_tier, list_visit, c, &c->status);
}

/* Walks the user tier, then each lower tier. */
static tk_status walk_all(tk_cache *cache, walk_fn fn, void *ctx, int *read_only_tier)
{
    int stopped = 0;
    tk_status st = TK_OK;
    if (cache->root_state == TK__ROOT_OK) {
        *read_only_tier = 0;
        st = walk_tier(cache->fmt_dir, 0, fn, ctx, &stopped);
    }
    for (size_t i = 0; i < cache->n_lower && st == TK_OK && !stopped; i++) {
        *read_only_tier = 1;
        st = walk_tier(cache->lower[i], 1, fn, ctx, &stopped);
    }
    if (st != TK_OK)
        return tk__cache_fail(cache, st, "cannot read the cache folders under %s", cache->root);
    return TK_OK;
}

tk_status tk_cache_list(tk_cache *cache, tk_cache_visit_fn visit, void *user)
{
    if (!cache || !visit)
        return TK_INVALID_ARGUMENT;
    tk_status st = user_tier_check(cache);
    if (st != TK_OK)
        return st;
    list_ctx c = {visit, user, 0, TK_OK};
    st = walk_all(cache, list_one, &c, &c.read_only_tier);
    return st != TK_OK ? st : c.status;
}

/* ------------------------------------------------------------------ stats */

typedef struct stats_ctx {
    tk_cache_stats s;
} stats_ctx;

static int stats_one(void *p, const char *path, enum file_kind kind, const char *hex)
{
    stats_ctx *c = p;
    if (kind == FILE_TEMP) {
        c->s.temp_files++;
        return 0;
    }
    struct stat st;
    tk__entry_view v;
    uint8_t *buf = NULL;
    const char *why;
    char fp[33] = "";
    if (kind == FILE_ENTRY && read_head(path, 1, &st, &v, &buf, &why) == TK_OK)
        tk__fp_hex(v.fp_hi, v.fp_lo, fp);
    free(buf);
    if (kind == FILE_ENTRY && strcmp(fp, hex) == 0) {
        c->s.entries++;
        c->s.bytes += (uint64_t)st.st_size;
    } else {
        c->s.bad_files++;
    }
    return 0;
}

tk_status tk_cache_get_stats(tk_cache *cache, tk_cache_stats *out)
{
    if (!cache || tk__out_bad(out))
        return TK_INVALID_ARGUMENT;
    tk_status st = user_tier_check(cache);
    if (st != TK_OK)
        return st;
    stats_ctx c;
    memset(&c, 0, sizeof(c));
    c.s.struct_size = sizeof c.s;
    c.s.max_bytes = cache->max_size;
    int stopped = 0;
    if (cache->root_state == TK__ROOT_OK &&
        walk_tier(cache->fmt_dir, 0, stats_one, &c, &stopped) != TK_OK)
        return tk__cache_fail(cache, TK_IO_ERROR, "cannot read %s", cache->fmt_dir);
    uint64_t v[TK__PSTAT_COUNT];
    int64_t since = 0;
    if (cache->root_state == TK__ROOT_OK)
        tk__cache_stats_read(cache, v, &since);
    else
        memset(v, 0, sizeof v);
    if (cache->root_state == TK__ROOT_OK)
        c.s.source_bytes = tk__source_bytes(cache);
    c.s.hits = v[TK__PSTAT_HITS];
    c.s.misses = v[TK__PSTAT_MISSES];
    c.s.compiles = v[TK__PSTAT_COMPILES];
    c.s.compile_seconds = (double)v[TK__PSTAT_COMPILE_NS] / 1e9;
    c.s.fallback_calls = v[TK__PSTAT_FALLBACKS];
    c.s.errors = v[TK__PSTAT_ERRORS];
    c.s.stats_since = since;
    tk__out_copy(out, &c.s, sizeof c.s);
    return TK_OK;
}

/* ---------------------------------------------------------------- sources */

typedef struct find_ctx {
    const char *prefix;
    size_t prefix_len;
    int read_only_tier;
    char hex[33];
    char path[PATH_MAX];
    int tier;         /* read_only_tier of the first match */
    uint64_t matches; /* distinct keys */
} find_ctx;

/* The entries whose key starts with the prefix: the first is kept (the
 * user tier comes first), other keys are counted. */
static int find_one(void *p, const char *path, enum file_kind kind, const char *hex)
{
    find_ctx *c = p;
    if (kind != FILE_ENTRY || strncmp(hex, c->prefix, c->prefix_len) != 0)
        return 0;
    if (c->matches && strcmp(hex, c->hex) == 0)
        return 0; /* the same key in a lower tier */
    if (!c->matches++) {
        memcpy(c->hex, hex, 33);
        snprintf(c->path, sizeof c->path, "%s", path);
        c->tier = c->read_only_tier;
    }
    return 0;
}

tk_status tk_cache_entry_source(tk_cache *cache, const char *key, tk_cache_source_fn fn, void *user)
{
    if (!cache || !key || !fn)
        return TK_INVALID_ARGUMENT;
    char prefix[33];
    size_t n = strlen(key);
    if (n == 0 || n > 32 || strspn(key, "0123456789abcdefABCDEF") != n)
        return tk__cache_fail(cache, TK_INVALID_ARGUMENT,
                              "'%.64s' is not a key: 1 to 32 hex digits (tokitai-jit --list)", key);
    for (size_t i = 0; i <= n; i++)
        prefix[i] = (char)tolower((unsigned char)key[i]);
    tk_status st = user_tier_check(cache);
    if (st != TK_OK)
        return st;
    find_ctx c;
    memset(&c, 0, sizeof c);
    c.prefix = prefix;
    c.prefix_len = n;
    st = walk_all(cache, find_one, &c, &c.read_only_tier);
    if (st != TK_OK)
        return st;
    if (c.matches == 0)
        return tk__cache_fail(cache, TK_NOT_FOUND, "no entry with key %s in %s", prefix,
                              cache->root);
    if (c.matches > 1)
        return tk__cache_fail(cache, TK_INVALID_ARGUMENT,
                              "key %s names %llu entries: give more of its digits", prefix,
                              (unsigned long long)c.matches);
    struct stat fst;
    tk__entry_view v;
    uint8_t *buf = NULL;
    const char *why = NULL;
    st = read_head(c.path, !c.tier, &fst, &v, &buf, &why);
    if (st != TK_OK)
        return tk__cache_fail(cache, st == TK_OUT_OF_MEMORY ? st : TK_CORRUPT, "%s: %s", c.path,
                              why ? why : "unreadable");
    const char *strs[TK__ENTRY_N_STRINGS];
    char *strings = view_strings(&v, strs);
    char *text = NULL;
    size_t text_len = 0;
    if (!strings) {
        st = TK_OUT_OF_MEMORY;
        goto done;
    }
    tk_cache_entry_info info;
    char hash[33];
    fill_info(&info, c.hex, c.path, strs, &v, &fst, c.tier, hash);
    tk__key_field f;
    if (!v.key || !tk__key_find(v.key, v.key_size, TK__KEY_SOURCE_TAG, &f)) {
        fn(user, &info, NULL, 0);
        st = tk__cache_fail(cache, TK_NOT_FOUND, "entry %s has no kernel source in its key", c.hex);
        goto done;
    }
    if (!f.hashed) {
        /* Short enough to sit in the key itself. */
        if (!(text = malloc((size_t)f.len + 1))) {
            st = TK_OUT_OF_MEMORY;
            goto done;
        }
        memcpy(text, f.value, (size_t)f.len);
        text[f.len] = 0;
        text_len = (size_t)f.len;
    } else if ((st = tk__source_read(cache, f.hi, f.lo, NULL, NULL, &text, &text_len, &why)) !=
               TK_OK) {
        fn(user, &info, NULL, 0);
        if (st != TK_OUT_OF_MEMORY)
            st = tk__cache_fail(cache, TK_NOT_FOUND,
                                "the source of %s (%s) is not kept in this cache (%s): it is "
                                "kept when the kernel is compiled or imported here",
                                c.hex, hash, why);
        goto done;
    }
    fn(user, &info, text, text_len);
    st = TK_OK;
done:
    free(text);
    free(strings);
    free(buf);
    return st;
}

/* ----------------------------------------------------------------- verify */

/* Reads and fully checks one entry file; *bytes is malloc'd on success. */
static tk_status read_entry_file(const char *path, int user_tier, const char *hex, uint8_t **bytes,
                                 size_t *len, tk__entry_view *v, const char **why)
{
    *why = "unreadable";
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return TK_IO_ERROR;
    struct stat st;
    uint8_t *buf = NULL;
    tk_status s = TK_CORRUPT;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        *why = "not a regular file";
        goto done;
    }
    if (st.st_uid != geteuid() && !(!user_tier && st.st_uid == 0)) {
        *why = "owned by another user";
        goto done;
    }
    if ((uint64_t)st.st_size > TK__ENTRY_MAX_FILE) {
        *why = "file too large";
        goto done;
    }
    s = tk__read_fd(fd, (uint64_t)st.st_size, &buf);
    if (s != TK_OK) {
        *why = s == TK_OUT_OF_MEMORY ? "out of memory" : "unreadable";
        goto done;
    }
    s = tk__entry_parse(buf, (size_t)st.st_size, 1, v, why);
    if (s != TK_OK)
        goto done;
    char fp[33];
    tk__fp_hex(v->fp_hi, v->fp_lo, fp);
    if (hex && strcmp(fp, hex) != 0) {
        *why = "entry stored under another key's name";
        s = TK_CORRUPT;
    }
done:
    close(fd);
    if (s == TK_OK) {
        *bytes = buf;
        *len = (size_t)st.st_size;
    } else {
        free(buf);
    }
    return s;
}

typedef struct verify_ctx {
    tk_cache_bad_fn bad;
    void *user;
    int read_only_tier;
    uint64_t n_bad;
} verify_ctx;

static int verify_one(void *p, const char *path, enum file_kind kind, const char *hex)
{
    verify_ctx *c = p;
    if (kind == FILE_TEMP)
        return 0;
    const char *why =
        kind == FILE_BAD_DIR ? tk__cache_dir_unsafe(path, c->read_only_tier) : "not a cache entry";
    if (!why)
        why = "folder refused"; /* changed between the walk and now */
    if (kind == FILE_ENTRY) {
        uint8_t *bytes = NULL;
        size_t len;
        tk__entry_view v;
        tk_status s = read_entry_file(path, !c->read_only_tier, hex, &bytes, &len, &v, &why);
        free(bytes);
        if (s == TK_OK)
            return 0;
    }
    c->n_bad++;
    if (c->bad)
        c->bad(c->user, path, why);
    return 0;
}

tk_status tk_cache_verify(tk_cache *cache, tk_cache_bad_fn bad, void *user, uint64_t *n_bad)
{
    if (!cache)
        return TK_INVALID_ARGUMENT;
    tk_status st = user_tier_check(cache);
    if (st != TK_OK)
        return st;
    verify_ctx c = {bad, user, 0, 0};
    st = walk_all(cache, verify_one, &c, &c.read_only_tier);
    if (st != TK_OK)
        return st;
    if (n_bad)
        *n_bad = c.n_bad;
    return TK_OK;
}

/* ---------------------------------------------------------- prune / clear */

/* Files the size limit does not see: the kept sources (stale temporary
 * files; every file when all) and the folders of older formats (format 2
 * entries are never read: a version check would refuse them, and their
 * folder is not this format's). Only files that look like the cache's own
 * are removed, through folders opened without following links. */
static int looks_own(const char *name)
{
    return strncmp(name, TK__TEMP_PREFIX, strlen(TK__TEMP_PREFIX)) == 0 ||
           ends_with_str(name, TK__ENTRY_EXT) || ends_with_str(name, ".lock") ||
           ends_with_str(name, ".zst");
}

static uint64_t remove_own_files(int dfd, int all, time_t now, int *is_empty)
{
    uint64_t removed = 0;
    DIR *dir = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!dir) {
        if (dfd >= 0)
            close(dfd);
        *is_empty = 0;
        return 0;
    }
    int left = 0;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        struct stat st;
        int temp = strncmp(e->d_name, TK__TEMP_PREFIX, strlen(TK__TEMP_PREFIX)) == 0;
        if (fstatat(dirfd(dir), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
            looks_own(e->d_name) && (all || (temp && now - st.st_mtim.tv_sec > 600)) &&
            unlinkat(dirfd(dir), e->d_name, 0) == 0) {
            removed += !temp && ends_with_str(e->d_name, TK__ENTRY_EXT);
            continue;
        }
        left++;
    }
    closedir(dir);
    *is_empty = !left;
    return removed;
}

static uint64_t prune_extras(tk_cache *cache, int all)
{
    if (cache->root_state != TK__ROOT_OK)
        return 0;
    time_t now = time(NULL);
    uint64_t removed = 0;
    int empty = 0;
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/" TK__SRC_DIR, cache->fmt_dir);
    if (!tk__cache_dir_unsafe(path, 0))
        remove_own_files(tk__cache_open_dir(path), all, now, &empty);
    for (int fmt = 1; fmt < TK__CACHE_FORMAT; fmt++) {
        char old[PATH_MAX];
        snprintf(old, sizeof(old), "%s/%d", cache->root, fmt);
        if (tk__cache_dir_unsafe(old, 0))
            continue; /* missing, a link, or not ours: left alone */
        struct dirent **subs = NULL;
        int n = scandir(old, &subs, not_dots, alphasort);
        for (int i = 0; i < n; i++) {
            char sub[PATH_MAX + 256];
            snprintf(sub, sizeof(sub), "%s/%s", old, subs[i]->d_name);
            if ((hex2_filter(subs[i]) || strcmp(subs[i]->d_name, TK__LOCK_DIR) == 0) &&
                !tk__cache_dir_unsafe(sub, 0)) {
                removed += remove_own_files(tk__cache_open_dir(sub), 1, now, &empty);
                if (empty)
                    rmdir(sub);
            }
            free(subs[i]);
        }
        free(subs);
        rmdir(old); /* only when nothing else was in it */
    }
    return removed;
}

tk_status tk_cache_prune(tk_cache *cache, uint64_t max_bytes, uint64_t *n_removed)
{
    if (!cache)
        return TK_INVALID_ARGUMENT;
    tk_status st = user_tier_check(cache);
    if (st != TK_OK)
        return st;
    if (cache->root_state == TK__ROOT_MISSING) {
        if (n_removed)
            *n_removed = 0;
        return TK_OK;
    }
    uint64_t removed = 0; /* given, so the eviction also prunes lock files */
    st = tk__cache_evict(cache, max_bytes ? max_bytes : cache->max_size, NULL, 0, &removed);
    if (st == TK_OK)
        removed += prune_extras(cache, 0);
    if (st == TK_OK && n_removed)
        *n_removed = removed;
    return st;
}

typedef struct clear_ctx {
    uint64_t removed;
    int failed;
    int err;
} clear_ctx;

static int clear_one(void *p, const char *path, enum file_kind kind, const char *hex)
{
    clear_ctx *c = p;
    struct stat st;
    /* A link planted as a shard folder goes (the link, never its target); a
     * real folder refused for its owner or mode is left alone. */
    if (kind == FILE_BAD_DIR && (lstat(path, &st) != 0 || !S_ISLNK(st.st_mode)))
        return 0;
    int r = kind == FILE_BAD_DIR ? unlink(path) : tk__cache_unlink(path);
    if (r != 0 && kind != FILE_BAD_DIR && (errno == EISDIR || errno == EPERM))
        r = tk__cache_remove_any(path); /* a folder at an entry's name: it goes too */
    if (r == 0) {
        c->removed += kind == FILE_ENTRY;
    } else if (errno != ENOENT) {
        c->failed = 1;
        c->err = errno;
    }
    return 0;
}

tk_status tk_cache_clear(tk_cache *cache, uint64_t *n_removed)
{
    if (!cache)
        return TK_INVALID_ARGUMENT;
    tk_status st = user_tier_check(cache);
    if (st != TK_OK)
        return st;
    clear_ctx c = {0, 0, 0};
    int stopped = 0;
    if (cache->root_state == TK__ROOT_OK) {
        if (walk_tier(cache->fmt_dir, 0, clear_one, &c, &stopped) != TK_OK)
            return tk__cache_fail(cache, TK_IO_ERROR, "cannot read %s", cache->fmt_dir);
        /* Empty shard folders go too (best effort: a racing store may refill one). */
        struct dirent **subs = NULL;
        int n = scandir(cache->fmt_dir, &subs, hex2_filter, alphasort);
        for (int i = 0; i < n; i++) {
            char sub[PATH_MAX];
            snprintf(sub, sizeof(sub), "%s/%s", cache->fmt_dir, subs[i]->d_name);
            rmdir(sub);
            free(subs[i]);
        }
        free(subs);
    }
    if (cache->root_state == TK__ROOT_OK) {
        uint64_t ignored;
        tk__cache_evict(cache, UINT64_MAX, NULL, 1, &ignored); /* unheld lock files */
        c.removed += prune_extras(cache, 1);
        char src[PATH_MAX];
        snprintf(src, sizeof(src), "%s/" TK__SRC_DIR, cache->fmt_dir);
        rmdir(src);
    }
    pthread_mutex_lock(&cache->mu);
    cache->size_known = 0;
    pthread_mutex_unlock(&cache->mu);
    if (c.failed)
        return tk__cache_fail(cache, TK_IO_ERROR, "cannot remove entries under %s: %s",
                              cache->fmt_dir, strerror(c.err));
    if (n_removed)
        *n_removed = c.removed;
    return TK_OK;
}

typedef struct remove_ctx {
    tk_cache_select_fn select;
    void *user;
    uint64_t removed;
    int failed;
    int err;
    tk_status status;
} remove_ctx;

static int remove_visit(void *p, const char *path, const tk_cache_entry_info *info)
{
    remove_ctx *c = p;
    if (c->select(c->user, info)) {
        if (tk__cache_unlink(path) == 0)
            c->removed++;
        else if (errno != ENOENT)
            c->failed = 1, c->err = errno;
    }
    return 0;
}

/* (a file that is no entry we can read: --verify and --prune deal with it) */
static int remove_one(void *p, const char *path, enum file_kind kind, const char *hex)
{
    remove_ctx *c = p;
    if (kind != FILE_ENTRY)
        return 0;
    return with_entry_info(path, hex, 0, remove_visit, c, &c->status);
}

tk_status tk_cache_remove(tk_cache *cache, tk_cache_select_fn select, void *user,
                          uint64_t *n_removed)
{
    if (!cache || !select)
        return TK_INVALID_ARGUMENT;
    tk_status st = user_tier_check(cache);
    if (st != TK_OK)
        return st;
    remove_ctx c = {select, user, 0, 0, 0, TK_OK};
    int stopped = 0;
    if (cache->root_state == TK__ROOT_OK) {
        if (!cache->writable)
            return tk__cache_fail(cache, TK_IO_ERROR, "cache folder %s is not writable",
                                  cache->fmt_dir);
        if (walk_tier(cache->fmt_dir, 0, remove_one, &c, &stopped) != TK_OK)
            return tk__cache_fail(cache, TK_IO_ERROR, "cannot read %s", cache->fmt_dir);
        if (c.removed) {
            uint64_t swept, freed;
            tk__source_sweep(cache, &swept, &freed);
        }
        pthread_mutex_lock(&cache->mu);
        cache->size_known = 0;
        pthread_mutex_unlock(&cache->mu);
    }
    if (c.status != TK_OK)
        return tk__cache_fail(cache, c.status, "out of memory reading %s", cache->fmt_dir);
    if (c.failed)
        return tk__cache_fail(cache, TK_IO_ERROR, "cannot remove entries under %s: %s",
                              cache->fmt_dir, strerror(c.err));
    if (n_removed)
        *n_removed = c.removed;
    return TK_OK;
}

/* ---------------------------------------------------------------- bundles */

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

static int write_all(FILE *f, const void *p, size_t n)
{
    return fwrite(p, 1, n, f) == n ? 0 : -1;
}

typedef struct export_ctx {
    tk_cache *cache;
    tk_cache_select_fn select;
    void *user;
    int read_only_tier;
    FILE *f;
    uint64_t count;   /* entries written */
    uint64_t records; /* entries and sources written */
    char (*seen)[33]; /* keys written, so a lower tier's copy is not added twice */
    size_t n_seen, cap_seen;
    uint64_t (*sources)[2]; /* hashed values the written entries name */
    size_t n_sources, cap_sources;
    tk_status status;
} export_ctx;

static int names_add(export_ctx *c, const tk__entry_view *v)
{
    size_t pos = 0;
    tk__key_field f;
    while (tk__key_next(v->key, v->key_size, &pos, &f) == 1) {
        if (!f.hashed)
            continue;
        if (c->n_sources == c->cap_sources) {
            size_t ncap = c->cap_sources ? c->cap_sources * 2 : 16;
            void *ns = realloc(c->sources, ncap * sizeof(*c->sources));
            if (!ns)
                return -1;
            c->sources = ns;
            c->cap_sources = ncap;
        }
        c->sources[c->n_sources][0] = f.hi;
        c->sources[c->n_sources][1] = f.lo;
        c->n_sources++;
    }
    return 0;
}

static int pair_cmp(const void *a, const void *b)
{
    const uint64_t *x = a, *y = b;
    if (x[0] != y[0])
        return x[0] < y[0] ? -1 : 1;
    return (x[1] > y[1]) - (x[1] < y[1]);
}

/* The kept sources the written entries name, one record each (a source
 * not kept here, or one that does not check, is left out: the entries
 * work without it). */
static tk_status export_sources(export_ctx *c)
{
    if (c->n_sources > 1)
        qsort(c->sources, c->n_sources, sizeof(*c->sources), pair_cmp);
    for (size_t i = 0; i < c->n_sources; i++) {
        if (i > 0 && pair_cmp(c->sources[i], c->sources[i - 1]) == 0)
            continue;
        uint64_t hi = c->sources[i][0], lo = c->sources[i][1];
        uint8_t *frame = NULL;
        size_t flen = 0, tlen = 0;
        char *text = NULL;
        const char *why;
        tk_status st = tk__source_read(c->cache, hi, lo, &frame, &flen, &text, &tlen, &why);
        if (st == TK_OUT_OF_MEMORY)
            return st;
        free(text);
        if (st != TK_OK)
            continue;
        uint8_t rec[8 + TK__SOURCE_RECORD_HEADER];
        memset(rec, 0, sizeof rec);
        put_le(rec, TK__SOURCE_RECORD_HEADER + (uint64_t)flen, 8);
        memcpy(rec + 8, TK__SOURCE_MAGIC, 8);
        put_le(rec + 16, TK__CACHE_FORMAT, 4);
        put_le(rec + 20, TK__SOURCE_RECORD_HEADER, 4);
        put_le(rec + 24, tlen, 8);
        put_le(rec + 32, hi, 8);
        put_le(rec + 40, lo, 8);
        int bad = write_all(c->f, rec, sizeof rec) != 0 || write_all(c->f, frame, flen) != 0;
        free(frame);
        if (bad)
            return tk__cache_fail(c->cache, TK_IO_ERROR, "cannot write the bundle: %s",
                                  strerror(errno));
        c->records++;
    }
    return TK_OK;
}

static int select_one(export_ctx *c, const char *path, const char *hex)
{
    if (!c->select)
        return 1;
    struct stat st;
    tk__entry_view v;
    uint8_t *buf = NULL;
    const char *why;
    if (read_head(path, !c->read_only_tier, &st, &v, &buf, &why) != TK_OK)
        return 0;
    const char *s[TK__ENTRY_N_STRINGS];
    char *strings = view_strings(&v, s);
    int take = 0;
    if (strings) {
        tk_cache_entry_info info;
        char hash[33];
        fill_info(&info, hex, path, s, &v, &st, c->read_only_tier, hash);
        take = c->select(c->user, &info) != 0;
    } else {
        c->status = TK_OUT_OF_MEMORY;
    }
    free(strings);
    free(buf);
    return take;
}

static int export_one(void *p, const char *path, enum file_kind kind, const char *hex)
{
    export_ctx *c = p;
    if (kind != FILE_ENTRY)
        return 0;
    for (size_t i = 0; i < c->n_seen; i++)
        if (strcmp(c->seen[i], hex) == 0)
            return 0;
    if (!select_one(c, path, hex))
        return c->status != TK_OK;
    uint8_t *bytes = NULL;
    size_t len = 0;
    tk__entry_view v;
    const char *why;
    /* Only entries that verify are shipped. */
    if (read_entry_file(path, !c->read_only_tier, hex, &bytes, &len, &v, &why) != TK_OK)
        return 0;
    uint8_t lenbuf[8];
    put_le(lenbuf, len, 8);
    if (write_all(c->f, lenbuf, 8) != 0 || write_all(c->f, bytes, len) != 0) {
        c->status =
            tk__cache_fail(c->cache, TK_IO_ERROR, "cannot write the bundle: %s", strerror(errno));
        free(bytes);
        return 1;
    }
    int named = names_add(c, &v);
    free(bytes);
    if (named != 0) {
        c->status = TK_OUT_OF_MEMORY;
        return 1;
    }
    if (c->n_seen == c->cap_seen) {
        size_t ncap = c->cap_seen ? c->cap_seen * 2 : 64;
        void *ns = realloc(c->seen, ncap * sizeof(*c->seen));
        if (!ns) {
            c->status = TK_OUT_OF_MEMORY;
            return 1;
        }
        c->seen = ns;
        c->cap_seen = ncap;
    }
    memcpy(c->seen[c->n_seen++], hex, 33);
    c->count++;
    c->records++;
    return 0;
}

tk_status tk_cache_export(tk_cache *cache, const char *path, tk_cache_select_fn select, void *user,
                          uint64_t *n_exported)
{
    if (!cache || !path || !*path)
        return TK_INVALID_ARGUMENT;
    tk_status st = user_tier_check(cache);
    if (st != TK_OK)
        return st;
    char tmp[PATH_MAX];
    const char *slash = strrchr(path, '/');
    int n = slash ? snprintf(tmp, sizeof(tmp), "%.*s/" TK__TEMP_PREFIX "%s.XXXXXX",
                             (int)(slash - path), path, slash + 1)
                  : snprintf(tmp, sizeof(tmp), TK__TEMP_PREFIX "%s.XXXXXX", path);
    if (n < 0 || (size_t)n >= sizeof(tmp))
        return tk__cache_fail(cache, TK_INVALID_ARGUMENT, "bundle path too long: %s", path);
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0)
        return tk__cache_fail(cache, TK_IO_ERROR, "cannot create %s: %s", tmp, strerror(errno));
    export_ctx c;
    memset(&c, 0, sizeof(c));
    c.cache = cache;
    c.select = select;
    c.user = user;
    c.f = fdopen(fd, "wb");
    if (!c.f) {
        close(fd);
        unlink(tmp);
        return TK_OUT_OF_MEMORY;
    }
    uint8_t head[TK__BUNDLE_HEADER_SIZE];
    memset(head, 0, sizeof(head));
    memcpy(head, TK__BUNDLE_MAGIC, 8);
    put_le(head + 8, TK__CACHE_FORMAT, 4);
    st = TK_IO_ERROR;
    if (write_all(c.f, head, sizeof(head)) != 0)
        goto fail_write;
    st = walk_all(cache, export_one, &c, &c.read_only_tier);
    if (st == TK_OK)
        st = c.status;
    if (st == TK_OK)
        st = export_sources(&c);
    if (st != TK_OK)
        goto fail;
    /* The count goes in last: a bundle cut short says more than it holds
     * and is caught on import. */
    put_le(head + 16, c.records, 8);
    st = TK_IO_ERROR;
    if (fseek(c.f, 16, SEEK_SET) != 0 || write_all(c.f, head + 16, 8) != 0)
        goto fail_write;
    FILE *f = c.f;
    c.f = NULL;
    if (fclose(f) != 0)
        goto fail_write;
    if (rename(tmp, path) != 0)
        goto fail_write;
    free(c.seen);
    free(c.sources);
    if (n_exported)
        *n_exported = c.count;
    return TK_OK;
fail_write:
    st = tk__cache_fail(cache, TK_IO_ERROR, "cannot write bundle %s: %s", path, strerror(errno));
fail:
    if (c.f)
        fclose(c.f);
    unlink(tmp);
    free(c.seen);
    free(c.sources);
    return st;
}

/* ---------------------------------------------------- reading a bundle */

/* Every record is at least this long: an entry's header, or a kept
 * source's (a record shorter than that has no framing left to trust). */
#define MIN_RECORD TK__ENTRY_HEADER_SIZE

/* A record over this size must be backed by data the file really holds:
 * a sparse file must not make the reader allocate gigabytes of holes. */
#define SPARSE_CHECK_FROM ((uint64_t)64 << 20)

typedef struct bundle {
    const char *path;
    int fd;
    uint64_t size;   /* apparent size */
    uint64_t stored; /* bytes the file system holds for it */
    uint64_t count;  /* records declared */
} bundle;

/* Called for each record that holds an entry passing tk__entry_parse with
 * its fingerprint checked (bytes: the whole entry file, v its view). A
 * status other than TK_OK ends the walk with it. */
typedef tk_status (*bundle_entry_fn)(void *ctx, const char *where, const uint8_t *bytes, size_t len,
                                     const tk__entry_view *v);
/* Called for each record holding a kept source that passes
 * tk__source_check (frame: its zstd frame, len bytes). */
typedef tk_status (*bundle_source_fn)(void *ctx, const char *where, uint64_t hi, uint64_t lo,
                                      const uint8_t *frame, size_t len);

static int read_at(int fd, void *p, size_t n, uint64_t off)
{
    size_t done = 0;
    while (done < n) {
        ssize_t r = pread(fd, (uint8_t *)p + done, n - done, (off_t)(off + done));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        done += (size_t)r;
    }
    return 0;
}

/* Opens a bundle for reading: a regular file (opened without blocking, so
 * a FIFO or a device is refused, never waited on), its magic and format
 * checked. */
static tk_status bundle_open(tk_cache *cache, const char *path, bundle *b)
{
    memset(b, 0, sizeof *b);
    b->path = path;
    b->fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (b->fd < 0)
        return tk__cache_fail(cache, errno == ENOENT ? TK_NOT_FOUND : TK_IO_ERROR,
                              "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    uint8_t head[TK__BUNDLE_HEADER_SIZE];
    tk_status s = TK_IO_ERROR;
    if (fstat(b->fd, &st) != 0) {
        s = tk__cache_fail(cache, TK_IO_ERROR, "cannot read %s: %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        s = tk__cache_fail(cache, TK_IO_ERROR, "cannot read %s: not a regular file", path);
        goto fail;
    }
    b->size = (uint64_t)st.st_size;
    b->stored = (uint64_t)st.st_blocks * 512;
    if (b->size < sizeof head || read_at(b->fd, head, sizeof head, 0) != 0 ||
        memcmp(head, TK__BUNDLE_MAGIC, 8) != 0) {
        s = tk__cache_fail(cache, TK_CORRUPT, "%s is not a tokitai-jit cache bundle", path);
        goto fail;
    }
    if (get_le(head + 8, 4) != TK__CACHE_FORMAT) {
        s = tk__cache_fail(cache, TK_CORRUPT, "%s: bundle of cache format %u, expected %d", path,
                           (unsigned)get_le(head + 8, 4), TK__CACHE_FORMAT);
        goto fail;
    }
    b->count = get_le(head + 16, 8);
    return TK_OK;
fail:
    close(b->fd);
    b->fd = -1;
    return s;
}

static void bundle_close(bundle *b)
{
    if (b->fd >= 0)
        close(b->fd);
    b->fd = -1;
}

/* One record holding a kept source (header in head, len bytes at offset
 * at): checked like an entry's (sizes before any allocation, the sparse
 * file rule), then decoded and checked against its fingerprint; a good one
 * goes to fn. *why set for a rejected record; a status other than TK_OK
 * ends the walk. */
static tk_status source_record(tk_cache *cache, bundle *b, const char *where,
                               const uint8_t head[TK__SOURCE_RECORD_HEADER], uint64_t at,
                               uint64_t len, bundle_source_fn fn, void *ctx, uint8_t **buf,
                               const char **why)
{
    (void)cache;
    uint64_t raw = get_le(head + 16, 8), hi = get_le(head + 24, 8), lo = get_le(head + 32, 8);
    uint64_t flen = len - TK__SOURCE_RECORD_HEADER;
    if (get_le(head + 8, 4) != TK__CACHE_FORMAT) {
        *why = "wrong format version";
    } else if (get_le(head + 12, 4) != TK__SOURCE_RECORD_HEADER) {
        *why = "bad header size";
    } else if (raw > TK__SOURCE_MAX) {
        *why = "source larger than the largest kept (64 MiB)";
    } else if (flen == 0 || flen > ZSTD_compressBound((size_t)raw)) {
        *why = "bad source sizes";
    } else if (flen > SPARSE_CHECK_FROM && flen > b->stored) {
        *why = "record larger than the data the file holds (sparse file)";
    }
    if (*why)
        return TK_OK;
    free(*buf);
    *buf = malloc((size_t)flen);
    if (!*buf)
        return TK_OUT_OF_MEMORY;
    if (read_at(b->fd, *buf, (size_t)flen, at + TK__SOURCE_RECORD_HEADER) != 0) {
        *why = "bundle truncated";
        return TK_OK;
    }
    char *text = NULL;
    size_t text_len = 0;
    tk_status st = tk__source_check(*buf, (size_t)flen, hi, lo, &text, &text_len, why);
    free(text);
    if (st == TK_OUT_OF_MEMORY)
        return st;
    if (st != TK_OK)
        return TK_OK;
    if (text_len != raw) {
        *why = "source length differs from the record's";
        return TK_OK;
    }
    return fn(ctx, where, hi, lo, *buf, (size_t)flen);
}

/* Walks the records of an open bundle: each record's entry header is
 * checked against the record's length before the record is read into
 * memory, a record the file cannot really hold (a sparse file) or larger
 * than any entry is skipped unread, and a record shorter than an entry
 * header ends the walk as corrupt. Every rejected record is reported
 * through bad ("<path>#<index>") and counted in *rejected; bytes after the
 * declared records are reported (through bad, with the bundle's path)
 * without being an error. */
static tk_status bundle_walk(tk_cache *cache, bundle *b, bundle_entry_fn fn,
                             bundle_source_fn source_fn, void *ctx, tk_cache_bad_fn bad, void *user,
                             uint64_t *rejected)
{
    const char *path = b->path;
    uint64_t count = b->count, off = TK__BUNDLE_HEADER_SIZE;
    /* A count the file cannot hold is refused before any loop. */
    uint64_t most = (b->size - off) / (8 + MIN_RECORD);
    if (count > most) {
        *rejected += count;
        if (bad)
            bad(user, path, "bundle declares more records than its size can hold");
        return tk__cache_fail(
            cache, TK_CORRUPT, "%s: declares %llu records, but %llu bytes hold at most %llu", path,
            (unsigned long long)count, (unsigned long long)b->size, (unsigned long long)most);
    }
    uint8_t *bytes = NULL;
    tk_status st = TK_OK;
    for (uint64_t i = 0; i < count; i++) {
        char where[PATH_MAX + 32];
        snprintf(where, sizeof where, "%s#%llu", path, (unsigned long long)i);
        uint8_t lenbuf[8];
        uint64_t len;
        if (b->size - off < 8 || read_at(b->fd, lenbuf, 8, off) != 0 ||
            (len = get_le(lenbuf, 8)) > b->size - off - 8) {
            *rejected += count - i;
            if (bad)
                bad(user, where, "bundle truncated");
            st = tk__cache_fail(cache, TK_CORRUPT, "%s: truncated after %llu records", path,
                                (unsigned long long)i);
            goto done;
        }
        off += 8;
        if (len < MIN_RECORD) {
            *rejected += count - i;
            if (bad)
                bad(user, where, "record shorter than an entry header");
            st = tk__cache_fail(cache, TK_CORRUPT,
                                "%s: record %llu is %llu bytes, shorter than an entry header; "
                                "the records after it cannot be found",
                                path, (unsigned long long)i, (unsigned long long)len);
            goto done;
        }
        uint64_t at = off;
        off += len;
        uint8_t ehead[TK__ENTRY_HEADER_SIZE];
        tk__entry_view v;
        const char *why = NULL;
        if (read_at(b->fd, ehead, sizeof ehead, at) != 0) {
            why = "bundle truncated";
        } else if (memcmp(ehead, TK__SOURCE_MAGIC, 8) == 0) {
            if (!source_fn)
                continue; /* a reader that wants entries only */
            st = source_record(cache, b, where, ehead, at, len, source_fn, ctx, &bytes, &why);
            if (st != TK_OK)
                goto done;
        } else if (tk__entry_parse_header(ehead, len, &v, &why) != TK_OK) {
            /* why set: the header does not fit the record */
        } else if (len > TK__ENTRY_MAX_FILE) {
            why = "entry too large";
        } else if (len > SPARSE_CHECK_FROM && len > b->stored) {
            why = "record larger than the data the file holds (sparse file)";
        }
        if (why) {
            ++*rejected;
            if (bad)
                bad(user, where, why);
            continue;
        }
        if (memcmp(ehead, TK__SOURCE_MAGIC, 8) == 0)
            continue; /* handed over by source_record */
        free(bytes);
        bytes = malloc((size_t)len);
        if (!bytes) {
            st = TK_OUT_OF_MEMORY;
            goto done;
        }
        if (read_at(b->fd, bytes, (size_t)len, at) != 0) {
            /* Shrunk while being read. */
            *rejected += count - i;
            if (bad)
                bad(user, where, "bundle truncated");
            st = tk__cache_fail(cache, TK_CORRUPT, "%s: truncated", path);
            goto done;
        }
        if (tk__entry_parse(bytes, (size_t)len, 1, &v, &why) != TK_OK) {
            ++*rejected;
            if (bad)
                bad(user, where, why);
            continue;
        }
        st = fn(ctx, where, bytes, (size_t)len, &v);
        if (st != TK_OK)
            goto done;
    }
    if (off < b->size && bad) {
        /* Not an error (what was declared is read), but not silent. */
        char msg[160];
        snprintf(msg, sizeof(msg),
                 "%llu bytes after the %llu declared records (undeclared records or garbage) "
                 "ignored",
                 (unsigned long long)(b->size - off), (unsigned long long)count);
        bad(user, path, msg);
    }
done:
    free(bytes);
    return st;
}

/* ----------------------------------------------------------------- import */

static int key_cmp(const void *a, const void *b)
{
    return strcmp(a, b);
}

typedef struct import_ctx {
    tk_cache *cache;
    char (*keys)[33]; /* keys published, to count what the eviction left */
    size_t n_keys, cap_keys;
} import_ctx;

static tk_status import_entry(void *p, const char *where, const uint8_t *bytes, size_t len,
                              const tk__entry_view *v)
{
    import_ctx *c = p;
    (void)where;
    if (c->n_keys == c->cap_keys) {
        size_t ncap = c->cap_keys ? c->cap_keys * 2 : 64;
        void *nk = realloc(c->keys, ncap * sizeof(*c->keys));
        if (!nk)
            return TK_OUT_OF_MEMORY;
        c->keys = nk;
        c->cap_keys = ncap;
    }
    char hex[33];
    tk__fp_hex(v->fp_hi, v->fp_lo, hex);
    tk_status st = tk__cache_publish(c->cache, hex, bytes, len);
    if (st == TK_OK)
        memcpy(c->keys[c->n_keys++], hex, 33);
    return st;
}

/* A kept source travels with the entries that name it; keeping it is best
 * effort, as after a compile (the entries work without it). */
static tk_status import_source(void *p, const char *where, uint64_t hi, uint64_t lo,
                               const uint8_t *frame, size_t len)
{
    import_ctx *c = p;
    (void)where;
    tk__source_keep_frame(c->cache, hi, lo, frame, len);
    return TK_OK;
}

tk_status tk_cache_import(tk_cache *cache, const char *path, tk_cache_bad_fn bad, void *user,
                          uint64_t *n_imported, uint64_t *n_rejected)
{
    if (!cache || !path)
        return TK_INVALID_ARGUMENT;
    bundle b;
    tk_status st = bundle_open(cache, path, &b);
    if (st != TK_OK)
        return st;
    import_ctx c = {cache, NULL, 0, 0};
    uint64_t rejected = 0;
    if (cache->disabled || !cache->writable) {
        st = tk__cache_fail(cache, TK_IO_ERROR, "the cache under %s is not writable", cache->root);
        goto done;
    }
    st = bundle_walk(cache, &b, import_entry, import_source, &c, bad, user, &rejected);
    if (st != TK_OK)
        goto done;
    /* One eviction pass for the whole bundle. */
    st = tk__cache_evict(cache, cache->max_size, NULL, 0, NULL);
    if (st != TK_OK)
        goto done;
    /* "Imported" means in the cache now: an entry the size limit evicted
     * straight away (or a duplicate of one already counted) is not. */
    uint64_t kept = 0;
    if (c.n_keys > 1)
        qsort(c.keys, c.n_keys, sizeof(*c.keys), key_cmp);
    for (size_t i = 0; i < c.n_keys; i++) {
        char epath[PATH_MAX];
        struct stat est;
        if ((i == 0 || strcmp(c.keys[i], c.keys[i - 1]) != 0) &&
            tk__cache_entry_path(cache->fmt_dir, c.keys[i], epath, sizeof(epath)) == TK_OK &&
            lstat(epath, &est) == 0 && S_ISREG(est.st_mode))
            kept++;
    }
    if (n_imported)
        *n_imported = kept;
    if (n_rejected)
        *n_rejected = rejected;
done:
    free(c.keys);
    bundle_close(&b);
    return st;
}

/* ------------------------------------------------------------------- push */

typedef struct push_ctx {
    tk_cache *cache;
    tk_cache_bad_fn bad;
    void *user;
    tk_cache_push_counts n;
} push_ctx;

static tk_status push_entry(void *p, const char *where, const uint8_t *bytes, size_t len,
                            const tk__entry_view *v)
{
    push_ctx *c = p;
    const char *why = NULL;
    tk_status st = tk__cache_remote_push_entry(c->cache, bytes, len, v, &c->n, &why);
    if (st == TK_OVERFLOW) {
        c->n.rejected++;
        if (c->bad)
            c->bad(c->user, where, why);
        return TK_OK;
    }
    return st;
}

typedef struct push_walk_ctx {
    push_ctx *push;
    int read_only_tier;
    tk_status status;
} push_walk_ctx;

/* Each entry a listing shows, read in full and checked before it is sent. */
static int push_file(void *p, const char *path, enum file_kind kind, const char *hex)
{
    push_walk_ctx *w = p;
    push_ctx *c = w->push;
    if (kind != FILE_ENTRY)
        return 0;
    struct stat st;
    tk__entry_view v;
    uint8_t *buf = NULL;
    const char *why;
    char fp[33] = "";
    if (read_head(path, !w->read_only_tier, &st, &v, &buf, &why) == TK_OK)
        tk__fp_hex(v.fp_hi, v.fp_lo, fp);
    free(buf);
    if (strcmp(fp, hex) != 0)
        return 0; /* not an entry a listing shows */
    uint8_t *bytes = NULL;
    size_t len = 0;
    if (read_entry_file(path, !w->read_only_tier, NULL, &bytes, &len, &v, &why) != TK_OK) {
        c->n.rejected++;
        if (c->bad)
            c->bad(c->user, path, why);
        return 0;
    }
    w->status = push_entry(c, path, bytes, len, &v);
    free(bytes);
    return w->status != TK_OK;
}

tk_status tk_cache_remote_push_report(tk_cache *cache, const char *bundle_path, tk_cache_bad_fn bad,
                                      void *user, tk_cache_push_counts *out)
{
    if (!cache || (out && tk__out_bad(out)))
        return TK_INVALID_ARGUMENT;
    tk_status st = tk__cache_remote_tool_begin(cache);
    if (st != TK_OK)
        return st;
    push_ctx c;
    memset(&c, 0, sizeof c);
    c.cache = cache;
    c.bad = bad;
    c.user = user;
    c.n.struct_size = sizeof c.n;
    if (bundle_path) {
        bundle b;
        st = bundle_open(cache, bundle_path, &b);
        if (st != TK_OK)
            return st;
        st = bundle_walk(cache, &b, push_entry, NULL, &c, bad, user, &c.n.rejected);
        bundle_close(&b);
    } else {
        st = user_tier_check(cache);
        push_walk_ctx w = {&c, 0, TK_OK};
        if (st == TK_OK)
            st = walk_all(cache, push_file, &w, &w.read_only_tier);
        if (st == TK_OK)
            st = w.status;
    }
    if (st != TK_OK)
        return st;
    if (out)
        tk__out_copy(out, &c.n, sizeof c.n);
    return TK_OK;
}

tk_status tk_cache_remote_push(tk_cache *cache, const char *bundle_path, tk_cache_bad_fn bad,
                               void *user, uint64_t *n_pushed, uint64_t *n_present,
                               uint64_t *n_rejected)
{
    tk_cache_push_counts n = TK_STRUCT_INIT(tk_cache_push_counts);
    tk_status st = tk_cache_remote_push_report(cache, bundle_path, bad, user, &n);
    if (st != TK_OK)
        return st;
    if (n_pushed)
        *n_pushed = n.pushed + n.replaced;
    if (n_present)
        *n_present = n.present;
    if (n_rejected)
        *n_rejected = n.rejected;
    return TK_OK;
}
