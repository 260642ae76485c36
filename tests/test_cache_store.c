/* The on-disk cache within one process: store/load, bad entries, collisions,
 * tiers, eviction, tools, bundles and folder trouble (no GPU). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#include "test_cache_common.h"

static void set_mtime(const char *path, time_t t)
{
    struct timespec ts[2] = {{t, 0}, {t, 0}};
    ck_assert_int_eq(utimensat(AT_FDCWD, path, ts, 0), 0);
}

static time_t mtime_of(const char *path)
{
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    return st.st_mtim.tv_sec;
}

static void put_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Re-seals header hash and checksum after a deliberate edit, so that only
 * the edited field is wrong. */
static void reseal(uint8_t *buf, size_t len)
{
    uint32_t meta = (uint32_t)buf[16] | (uint32_t)buf[17] << 8 | (uint32_t)buf[18] << 16 |
                    (uint32_t)buf[19] << 24;
    put_le(buf + 56, XXH3_64bits_withSeed(buf + 64, meta, XXH3_64bits(buf, 56)), 8);
    put_le(buf + len - 8, XXH3_64bits(buf, len - 8), 8);
}

/* ----------------------------------------------------------- store / load */

START_TEST(store_then_load_same_bytes_and_metadata)
{
    char *root = tk_test_tmpdir("cache-rt");
    test_log log = {0};
    tk_cache *cache = open_cache(root, &log);
    ck_assert_int_eq(tk__cache_usable(cache), 1);
    ck_assert_int_eq(tk__cache_writable(cache), 1);
    ck_assert_str_eq(tk_cache_root(cache), root);

    tk__key key;
    make_key(&key, "roundtrip");
    tk__entry entry;
    tk_assert_status(tk__cache_get(cache, &key, &entry), TK_NOT_FOUND);

    unsigned char payload[5000];
    fill_payload(payload, sizeof(payload), "roundtrip");
    tk__entry_meta meta = make_meta("roundtrip_kernel");
    time_t before = time(NULL);
    tk_assert_status(tk__cache_put(cache, &key, &meta, payload, sizeof(payload)), TK_OK);

    memset(&entry, 0, sizeof(entry));
    tk_assert_status(tk__cache_get(cache, &key, &entry), TK_OK);
    ck_assert_uint_eq(entry.payload_size, sizeof(payload));
    ck_assert_mem_eq(entry.payload, payload, sizeof(payload));
    ck_assert_str_eq(entry.meta.kernel, "roundtrip_kernel");
    ck_assert_str_eq(entry.meta.source, meta.source);
    ck_assert_str_eq(entry.meta.backend, meta.backend);
    ck_assert_str_eq(entry.meta.arch, meta.arch);
    ck_assert_str_eq(entry.meta.compiler, meta.compiler);
    ck_assert_str_eq(entry.meta.options, meta.options);
    ck_assert_mem_eq(&entry.meta.resources, &meta.resources, sizeof(meta.resources));
    ck_assert_int_ge(entry.meta.created, before); /* 0 on store means now */
    ck_assert_int_le(entry.meta.created, time(NULL));
    ck_assert_int_gt(entry.meta.last_used, 0);
    tk__entry_free(&entry);

    /* Layout <root>/<format>/<2 hex>/<30 hex>.tkc, private modes. */
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/%d/%.2s/%s.tkc", root, TK__CACHE_FORMAT, key.hex, key.hex + 2);
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_int_eq(st.st_mode & 0777, 0600);
    snprintf(path, sizeof(path), "%s/%d/%.2s", root, TK__CACHE_FORMAT, key.hex);
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_int_eq(st.st_mode & 0777, 0700);

    /* A given created time and NULL strings survive. */
    meta.created = 1234567;
    meta.options = NULL;
    tk_assert_status(tk__cache_put(cache, &key, &meta, payload, 10), TK_OK);
    tk_assert_status(tk__cache_get(cache, &key, &entry), TK_OK);
    ck_assert_int_eq(entry.meta.created, 1234567);
    ck_assert_ptr_null(entry.meta.options);
    ck_assert_uint_eq(entry.payload_size, 10);
    tk__entry_free(&entry);

    /* Removal (an entry the driver refused). */
    tk_assert_status(tk__cache_remove(cache, &key), TK_OK);
    tk_assert_status(tk__cache_get(cache, &key, &entry), TK_NOT_FOUND);
    tk_assert_status(tk__cache_remove(cache, &key), TK_NOT_FOUND);
    ck_assert_int_eq(log.warnings, 0);

    tk__key_free(&key);
    tk_cache_close(cache);
    tk_test_rmtree(root);
    free(root);
}
END_TEST

START_TEST(hit_refreshes_old_mtime_only)
{
    char *root = tk_test_tmpdir("cache-mt");
    tk_cache *cache = open_cache(root, NULL);
    put_named(cache, "a", 100);
    char path[PATH_MAX];
    entry_path_of(root, "a", path, sizeof(path));
    time_t old = time(NULL) - 3600;
    set_mtime(path, old);
    ck_assert(get_named(cache, "a", 100));
    ck_assert_int_ge(mtime_of(path), time(NULL) - 5);
    /* A fresh entry is not rewritten on every hit. */
    time_t recent = time(NULL) - 10;
    set_mtime(path, recent);
    ck_assert(get_named(cache, "a", 100));
    ck_assert_int_eq(mtime_of(path), recent);
    tk_cache_close(cache);
    tk_test_rmtree(root);
    free(root);
}
END_TEST

/* ------------------------------------------------------------ bad entries */

enum damage {
    GARBAGE,
    EMPTY,
    TRUNCATED,
    BITFLIP_PAYLOAD,
    BITFLIP_HEADER,
    BITFLIP_KEY,
    WRONG_VERSION,
    FOREIGN_KEY,
    N_DAMAGE
};
static const char *const damage_name[] = {"garbage",         "empty",          "truncated",
                                          "bitflip payload", "bitflip header", "bitflip key",
                                          "wrong version",   "foreign key"};

START_TEST(bad_entries_are_misses_and_replaced)
{
    char *root = tk_test_tmpdir("cache-bad");
    test_log log = {0};
    tk_cache *cache = open_cache(root, &log);
    const size_t size = 777;
    char path[PATH_MAX], other[PATH_MAX];
    entry_path_of(root, "victim", path, sizeof(path));
    entry_path_of(root, "other", other, sizeof(other));
    put_named(cache, "other", size);
    for (int d = 0; d < N_DAMAGE; d++) {
        put_named(cache, "victim", size);
        ck_assert(get_named(cache, "victim", size));
        size_t len;
        uint8_t *bytes = (uint8_t *)tk_test_read_file(path, &len);
        ck_assert_ptr_nonnull(bytes);
        switch (d) {
        case GARBAGE:
            memset(bytes, 'x', len);
            break;
        case EMPTY:
            len = 0;
            break;
        case TRUNCATED:
            len -= 100;
            break;
        case BITFLIP_PAYLOAD:
            bytes[len - 8 - size / 2] ^= 0x10;
            break;
        case BITFLIP_HEADER:
            bytes[30] ^= 0x01;
            break;
        case BITFLIP_KEY:
            bytes[64 + 80] ^= 0x04; /* inside metadata/key, past the header */
            break;
        case WRONG_VERSION:
            bytes[8] = TK__CACHE_FORMAT + 1;
            reseal(bytes, len);
            break;
        case FOREIGN_KEY: {
            free(bytes);
            bytes = (uint8_t *)tk_test_read_file(other, &len);
            break;
        }
        }
        ck_assert_int_eq(tk_test_write_file(path, bytes, len), 0);
        free(bytes);
        ck_assert_msg(!get_named(cache, "victim", size), "%s entry was a hit", damage_name[d]);
        ck_assert_msg(!path_exists(path), "%s entry not removed", damage_name[d]);
        /* The next store replaces it. */
        put_named(cache, "victim", size);
        ck_assert_msg(get_named(cache, "victim", size), "%s: not replaced", damage_name[d]);
    }
    ck_assert(get_named(cache, "other", size)); /* untouched */
    ck_assert_int_eq(log.warnings, 1);          /* once per handle */
    ck_assert_ptr_nonnull(strstr(log.last, "ignored"));
    tk_cache_close(cache);
    tk_test_rmtree(root);
    free(root);
}
END_TEST

START_TEST(fingerprint_collision_never_returned)
{
    char *root = tk_test_tmpdir("cache-coll");
    test_log log = {0};
    tk_cache *cache = open_cache(root, &log);
    tk__key a, b;
    make_key(&a, "a");
    make_key(&b, "b");
    /* An entry holding a's key material and code under b's fingerprint: what a
     * real XXH3-128 collision would look like on disk, checksums all valid. */
    unsigned char code_a[64];
    fill_payload(code_a, sizeof(code_a), "a");
    tk__entry_meta meta = make_meta("a");
    uint8_t *bytes;
    size_t len;
    tk_assert_status(tk__entry_encode(a.bytes, a.len, b.fp_hi, b.fp_lo, &meta, code_a,
                                      sizeof(code_a), &bytes, &len),
                     TK_OK);
    put_named(cache, "x", 10); /* creates the folders */
    char path[PATH_MAX], dir[PATH_MAX];
    entry_path_of(root, "b", path, sizeof(path));
    snprintf(dir, sizeof(dir), "%s", path);
    *strrchr(dir, '/') = 0;
    mkdir(dir, 0700);
    ck_assert_int_eq(tk_test_write_file(path, bytes, len), 0);
    free(bytes);
    tk__entry e;
    tk_assert_status(tk__cache_get(cache, &b, &e), TK_NOT_FOUND);
    ck_assert_int_eq(log.warnings, 1);
    ck_assert_ptr_nonnull(strstr(log.last, "collision"));
    put_named(cache, "b", 64);
    ck_assert(get_named(cache, "b", 64));
    tk__key_free(&a);
    tk__key_free(&b);
    tk_cache_close(cache);
    tk_test_rmtree(root);
    free(root);
}
END_TEST

/* ------------------------------------------------------------------ tiers */

START_TEST(lower_tier_read_only)
{
    char *user = tk_test_tmpdir("cache-user");
    char *lower = tk_test_tmpdir("cache-lower");
    tk_cache *shipped = open_cache(lower, NULL);
    put_named(shipped, "shipped", 300);
    put_named(shipped, "both", 300);
    put_named(shipped, "broken", 300);
    tk_cache_close(shipped);
    char broken[PATH_MAX];
    entry_path_of(lower, "broken", broken, sizeof(broken));
    ck_assert_int_eq(truncate(broken, 100), 0);

    tk__cache_opts opts;
    memset(&opts, 0, sizeof(opts));
    opts.root = user;
    opts.lower = lower;
    test_log log = {0};
    opts.log = test_log_fn;
    opts.log_user = &log;
    tk_cache *cache;
    tk_assert_status(tk__cache_open(&opts, &cache), TK_OK);
    put_named(cache, "both", 300);
    ck_assert(get_named(cache, "shipped", 300));
    ck_assert(get_named(cache, "both", 300));
    ck_assert(!get_named(cache, "broken", 300));
    ck_assert(path_exists(broken)); /* a lower tier is never written */
    ck_assert_int_eq(log.warnings, 1);
    char lower_entry[PATH_MAX];
    entry_path_of(lower, "shipped", lower_entry, sizeof(lower_entry));
    set_mtime(lower_entry, 1000000);
    ck_assert(get_named(cache, "shipped", 300));
    ck_assert_int_eq(mtime_of(lower_entry), 1000000); /* no recency writes there */

    /* Clear touches the user tier only. */
    uint64_t removed = 0;
    tk_assert_status(tk_cache_clear(cache, &removed), TK_OK);
    ck_assert_uint_eq(removed, 1);
    ck_assert(get_named(cache, "both", 300)); /* now from the lower tier */
    tk_cache_close(cache);

    /* The environment names lower tiers when the options do not. */
    setenv("TOKITAI_JIT_CACHE_PATH", lower, 1);
    memset(&opts, 0, sizeof(opts));
    opts.root = user;
    tk_assert_status(tk__cache_open(&opts, &cache), TK_OK);
    ck_assert(get_named(cache, "shipped", 300));
    tk_cache_close(cache);
    setenv("TOKITAI_JIT_CACHE_PATH", "none", 1); /* as CTest runs the suites */

    tk_test_rmtree(user);
    tk_test_rmtree(lower);
    free(user);
    free(lower);
}
END_TEST

/* --------------------------------------------------------------- eviction */

/* Stores one entry of name (2000-byte code) through a cache of its own;
 * the entry file's path in path and its size returned. */
static uint64_t probe_entry(const char *root, const char *name, char *path, size_t size)
{
    tk_cache *probe = open_cache(root, NULL);
    put_named(probe, name, 2000);
    entry_path_of(root, name, path, size);
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    tk_cache_close(probe);
    return (uint64_t)st.st_size;
}

/* The user tier at root alone, held to max_size bytes. */
static tk_cache *open_limited(const char *root, uint64_t max_size)
{
    tk__cache_opts opts;
    memset(&opts, 0, sizeof(opts));
    opts.root = root;
    opts.lower = "";
    opts.max_size = max_size;
    tk_cache *cache;
    tk_assert_status(tk__cache_open(&opts, &cache), TK_OK);
    return cache;
}

START_TEST(eviction_keeps_limit_and_recent_entries)
{
    char *root = tk_test_tmpdir("cache-evict");
    char path[PATH_MAX];
    const uint64_t s = probe_entry(root, "k00", path, sizeof(path));
    const uint64_t max_size = 6 * s + s / 2;
    tk_cache *cache = open_limited(root, max_size);
    char name[16];
    for (int i = 0; i < 6; i++) {
        snprintf(name, sizeof(name), "k%02d", i);
        put_named(cache, name, 2000);
    }
    time_t now = time(NULL);
    for (int i = 0; i < 6; i++) {
        snprintf(name, sizeof(name), "k%02d", i);
        entry_path_of(root, name, path, sizeof(path));
        set_mtime(path, now - 1000 + i);
    }
    /* k00 and k01 are the oldest, but used now. */
    ck_assert(get_named(cache, "k00", 2000));
    ck_assert(get_named(cache, "k01", 2000));
    for (int i = 6; i < 9; i++) {
        snprintf(name, sizeof(name), "k%02d", i);
        put_named(cache, name, 2000);
        tk_cache_stats stats = TK_STRUCT_INIT(tk_cache_stats);
        tk_assert_status(tk_cache_get_stats(cache, &stats), TK_OK);
        ck_assert_uint_le(stats.bytes, max_size);
        ck_assert_uint_eq(stats.max_bytes, max_size);
    }
    static const int kept[] = {0, 1, 6, 7, 8}, gone[] = {2, 3, 4, 5};
    for (size_t i = 0; i < 5; i++) {
        snprintf(name, sizeof(name), "k%02d", kept[i]);
        ck_assert_msg(get_named(cache, name, 2000), "%s evicted", name);
    }
    for (size_t i = 0; i < 4; i++) {
        snprintf(name, sizeof(name), "k%02d", gone[i]);
        ck_assert_msg(!get_named(cache, name, 2000), "%s kept", name);
    }

    /* Prune to two entries keeps the two most recently used, and clears
     * stale temporary files and those no writer holds, but not one a live
     * writer holds its lock on. */
    char dir[PATH_MAX], stale[PATH_MAX + 32], fresh[PATH_MAX + 32];
    snprintf(dir, sizeof(dir), "%s", path);
    *strrchr(dir, '/') = 0;
    snprintf(stale, sizeof(stale), "%s/.tmp.stale.AAAAAA", dir);
    snprintf(fresh, sizeof(fresh), "%s/.tmp.fresh.BBBBBB", dir);
    ck_assert_int_eq(tk_test_write_file(stale, "x", 1), 0);
    ck_assert_int_eq(tk_test_write_file(fresh, "x", 1), 0);
    set_mtime(stale, now - 3600);
    int writer_fd = open(fresh, O_RDONLY | O_CLOEXEC);
    ck_assert_int_ge(writer_fd, 0);
    ck_assert_int_eq(flock(writer_fd, LOCK_EX), 0);
    ck_assert(get_named(cache, "k06", 2000)); /* fresh mtimes: no refresh needed */
    /* Explicit times: stores within one clock tick share an mtime. */
    static const char *const order[] = {"k00", "k01", "k06", "k07", "k08"};
    for (int i = 0; i < 5; i++) {
        entry_path_of(root, order[i], path, sizeof(path));
        set_mtime(path, now - 500 + 100 * i);
    }
    uint64_t removed = 0;
    tk_assert_status(tk_cache_prune(cache, 2 * s + 10, &removed), TK_OK);
    ck_assert_uint_eq(removed, 4); /* k00, k01, k06 and the stale temp file */
    ck_assert(!path_exists(stale));
    ck_assert(path_exists(fresh));
    ck_assert(get_named(cache, "k07", 2000));
    ck_assert(get_named(cache, "k08", 2000));
    ck_assert(!get_named(cache, "k06", 2000));
    tk_cache_stats stats = TK_STRUCT_INIT(tk_cache_stats);
    tk_assert_status(tk_cache_get_stats(cache, &stats), TK_OK);
    ck_assert_uint_eq(stats.entries, 2);
    ck_assert_uint_eq(stats.temp_files, 1);
    close(writer_fd); /* the writer died: its file goes at the next prune */
    tk_assert_status(tk_cache_prune(cache, 2 * s + 10, &removed), TK_OK);
    ck_assert_uint_eq(removed, 1);
    ck_assert(!path_exists(fresh));
    tk_cache_close(cache);
    tk_test_rmtree(root);
    free(root);
}
END_TEST

START_TEST(max_size_from_environment)
{
    char *root = tk_test_tmpdir("cache-env");
    setenv("TOKITAI_JIT_CACHE_MAX_SIZE", "3M", 1);
    tk_cache *cache = open_cache(root, NULL);
    tk_cache_stats stats = TK_STRUCT_INIT(tk_cache_stats);
    tk_assert_status(tk_cache_get_stats(cache, &stats), TK_OK);
    ck_assert_uint_eq(stats.max_bytes, 3u << 20);
    tk_cache_close(cache);
    test_log log = {0};
    setenv("TOKITAI_JIT_CACHE_MAX_SIZE", "lots", 1);
    cache = open_cache(root, &log);
    tk_assert_status(tk_cache_get_stats(cache, &stats), TK_OK);
    ck_assert_uint_eq(stats.max_bytes, (uint64_t)5 << 30);
    /* the default, silently here: the environment's report says it once,
     * on the context's or the tk_cache_open handle's log (test_env) */
    ck_assert_int_eq(log.warnings, 0);
    tk_cache_close(cache);
    unsetenv("TOKITAI_JIT_CACHE_MAX_SIZE");
    tk_test_rmtree(root);
    free(root);
}
END_TEST

START_TEST(default_root_from_environment)
{
    char buf[PATH_MAX], saved_home[PATH_MAX];
    snprintf(saved_home, sizeof(saved_home), "%s", getenv("HOME") ? getenv("HOME") : "/");
    setenv("TOKITAI_JIT_CACHE_DIR", "/x/explicit", 1);
    setenv("XDG_CACHE_HOME", "/x/xdg", 1);
    setenv("HOME", "/x/home", 1);
    tk_assert_status(tk__cache_default_root(buf, sizeof(buf)), TK_OK);
    ck_assert_str_eq(buf, "/x/explicit");
    unsetenv("TOKITAI_JIT_CACHE_DIR");
    tk_assert_status(tk__cache_default_root(buf, sizeof(buf)), TK_OK);
    ck_assert_str_eq(buf, "/x/xdg/tokitai-jit");
    setenv("XDG_CACHE_HOME", "relative", 1); /* ignored, as the XDG spec says */
    tk_assert_status(tk__cache_default_root(buf, sizeof(buf)), TK_OK);
    ck_assert_str_eq(buf, "/x/home/.cache/tokitai-jit");
    unsetenv("XDG_CACHE_HOME");
    tk_assert_status(tk__cache_default_root(buf, sizeof(buf)), TK_OK);
    ck_assert_str_eq(buf, "/x/home/.cache/tokitai-jit");
    tk_assert_status(tk__cache_default_root(buf, 5), TK_OVERFLOW);

    /* Opening with no root uses it. */
    char *home = tk_test_tmpdir("cache-home");
    setenv("HOME", home, 1);
    tk_cache *cache = open_cache(NULL, NULL);
    snprintf(buf, sizeof(buf), "%s/.cache/tokitai-jit", home);
    ck_assert_str_eq(tk_cache_root(cache), buf);
    put_named(cache, "d", 10);
    ck_assert(get_named(cache, "d", 10));
    tk_cache_close(cache);
    setenv("HOME", saved_home, 1);
    tk_test_rmtree(home);
    free(home);
}
END_TEST

/* ------------------------------------------------------------------ tools */

typedef struct seen {
    int n;
    char kernels[16][32];
    int read_only[16];
    int stop_after;
} seen;

static int visit(void *user, const tk_cache_entry_info *info)
{
    seen *s = user;
    ck_assert_uint_eq(strlen(info->key_hex), 32);
    ck_assert_ptr_nonnull(strstr(info->path, info->key_hex + 2));
    struct stat st;
    ck_assert_int_eq(stat(info->path, &st), 0);
    ck_assert_uint_eq(info->file_size, (uint64_t)st.st_size);
    ck_assert_int_eq(info->last_used, st.st_mtim.tv_sec);
    ck_assert_str_eq(info->backend, "stub");
    ck_assert_str_eq(info->arch, "sm_90");
    ck_assert_str_eq(info->compiler, "stubcc 1.0");
    ck_assert_str_eq(info->options, "-DN=4 -O3");
    ck_assert_str_eq(info->source, "user:1234");
    ck_assert_int_eq(info->resources.registers, 32);
    ck_assert_int_eq(info->resources.max_threads, 1024);
    ck_assert_uint_gt(info->payload_size, 0);
    ck_assert_uint_gt(info->file_size, info->payload_size);
    ck_assert_int_gt(info->created, 0);
    snprintf(s->kernels[s->n], sizeof(s->kernels[0]), "%s", info->kernel);
    s->read_only[s->n] = info->read_only_tier;
    s->n++;
    return s->stop_after && s->n >= s->stop_after;
}

typedef struct bad_seen {
    int n;
    char why[8][128];
    char path[8][512];
} bad_seen;

static void on_bad(void *user, const char *path, const char *why)
{
    bad_seen *b = user;
    ck_assert_ptr_nonnull(why);
    ck_assert_uint_gt(strlen(why), 0);
    if (b->n < 8) {
        snprintf(b->why[b->n], sizeof(b->why[0]), "%s", why);
        snprintf(b->path[b->n], sizeof(b->path[0]), "%s", path);
    }
    b->n++;
}

START_TEST(list_stats_verify_clear)
{
    char *root = tk_test_tmpdir("cache-tools");
    tk_cache *cache = open_cache(root, NULL);
    put_named(cache, "t1", 100);
    put_named(cache, "t2", 100);
    put_named(cache, "t3", 100);
    seen s;
    memset(&s, 0, sizeof(s));
    tk_assert_status(tk_cache_list(cache, visit, &s), TK_OK);
    ck_assert_int_eq(s.n, 3);
    int found = 0;
    for (int i = 0; i < 3; i++) {
        found += strcmp(s.kernels[i], "t1") == 0 || strcmp(s.kernels[i], "t2") == 0 ||
                 strcmp(s.kernels[i], "t3") == 0;
        ck_assert_int_eq(s.read_only[i], 0);
    }
    ck_assert_int_eq(found, 3);
    memset(&s, 0, sizeof(s));
    s.stop_after = 1;
    tk_assert_status(tk_cache_list(cache, visit, &s), TK_OK);
    ck_assert_int_eq(s.n, 1);

    /* Plant: a bad entry with a valid name, a leftover temp file, a stray file. */
    char good[PATH_MAX], dir[PATH_MAX], bad[PATH_MAX + 64], temp[PATH_MAX + 64],
        stray[PATH_MAX + 64];
    entry_path_of(root, "t1", good, sizeof(good));
    snprintf(dir, sizeof(dir), "%s", good);
    *strrchr(dir, '/') = 0;
    snprintf(bad, sizeof(bad), "%s/%s.tkc", dir, "000000000000000000000000000000");
    snprintf(temp, sizeof(temp), "%s/.tmp.000000000000000000000000000000.Q1w2e3", dir);
    snprintf(stray, sizeof(stray), "%s/notes.txt", dir);
    static const char junk[] = "TKJITENT but not really an entry at all, no no no "
                               "padding padding padding padding padding";
    ck_assert_int_eq(tk_test_write_file(bad, junk, sizeof(junk) - 1), 0);
    ck_assert_int_eq(tk_test_write_file(temp, "partial", 7), 0);
    ck_assert_int_eq(tk_test_write_file(stray, "hello", 5), 0);

    tk_cache_stats stats = TK_STRUCT_INIT(tk_cache_stats);
    tk_assert_status(tk_cache_get_stats(cache, &stats), TK_OK);
    ck_assert_uint_eq(stats.entries, 3);
    ck_assert_uint_eq(stats.temp_files, 1);
    ck_assert_uint_eq(stats.bad_files, 2);
    struct stat st;
    ck_assert_int_eq(stat(good, &st), 0);
    ck_assert_uint_eq(stats.bytes, 3 * (uint64_t)st.st_size);

    memset(&s, 0, sizeof(s));
    tk_assert_status(tk_cache_list(cache, visit, &s), TK_OK);
    ck_assert_int_eq(s.n, 3); /* bad files are not listed */

    /* Verify names the bad files and removes nothing; a payload bit flip
     * that a listing cannot see is found too. */
    size_t len;
    uint8_t *bytes = (uint8_t *)tk_test_read_file(good, &len);
    bytes[len - 20] ^= 1;
    ck_assert_int_eq(tk_test_write_file(good, bytes, len), 0);
    free(bytes);
    bad_seen b;
    memset(&b, 0, sizeof(b));
    uint64_t n_bad = 99;
    tk_assert_status(tk_cache_verify(cache, on_bad, &b, &n_bad), TK_OK);
    ck_assert_uint_eq(n_bad, 3);
    ck_assert_int_eq(b.n, 3);
    int saw_checksum = 0;
    for (int i = 0; i < 3; i++)
        saw_checksum += strcmp(b.path[i], good) == 0 && strstr(b.why[i], "checksum") != NULL;
    ck_assert_int_eq(saw_checksum, 1);
    ck_assert(path_exists(bad) && path_exists(stray) && path_exists(good));

    uint64_t removed = 0;
    tk_assert_status(tk_cache_clear(cache, &removed), TK_OK);
    ck_assert_uint_eq(removed, 4); /* three entries and the bad .tkc */
    ck_assert(!path_exists(temp) && !path_exists(stray));
    memset(&s, 0, sizeof(s));
    tk_assert_status(tk_cache_list(cache, visit, &s), TK_OK);
    ck_assert_int_eq(s.n, 0);
    tk_assert_status(tk_cache_get_stats(cache, &stats), TK_OK);
    ck_assert_uint_eq(stats.entries + stats.temp_files + stats.bad_files + stats.bytes, 0);
    /* The cache still works after a clear. */
    put_named(cache, "t4", 100);
    ck_assert(get_named(cache, "t4", 100));
    tk_cache_close(cache);
    tk_test_rmtree(root);
    free(root);
}
END_TEST

START_TEST(lock_files_pruned_when_unused)
{
    char *root = tk_test_tmpdir("cache-locks");
    tk_cache *cache = open_cache(root, NULL);
    tk__key key;
    make_key(&key, "l");
    char lockpath[PATH_MAX];
    snprintf(lockpath, sizeof(lockpath), "%s/%d/locks/%s.lock", root, TK__CACHE_FORMAT, key.hex);
    tk__cache_lock *lock = NULL;
    tk_assert_status(tk__cache_lock_key(cache, &key, &lock), TK_OK);
    ck_assert_ptr_nonnull(lock);
    ck_assert(path_exists(lockpath));
    tk__cache_unlock(lock);
    ck_assert(!path_exists(lockpath)); /* the holder removes it: nothing left behind */
    /* One left by a holder killed with it held goes at the next prune. */
    ck_assert_int_eq(tk_test_write_file(lockpath, "", 0), 0);
    uint64_t removed = 9;
    tk_assert_status(tk_cache_prune(cache, 0, &removed), TK_OK);
    ck_assert(!path_exists(lockpath));
    /* A held lock survives even when old. */
    tk_assert_status(tk__cache_lock_key(cache, &key, &lock), TK_OK);
    ck_assert_ptr_nonnull(lock);
    set_mtime(lockpath, time(NULL) - 3600);
    tk_assert_status(tk_cache_prune(cache, 0, &removed), TK_OK);
    tk_assert_status(tk_cache_clear(cache, &removed), TK_OK);
    ck_assert(path_exists(lockpath));
    tk__cache_unlock(lock);
    tk_assert_status(tk_cache_clear(cache, &removed), TK_OK);
    ck_assert(!path_exists(lockpath));
    /* Locking still works after the folder was cleaned. */
    tk_assert_status(tk__cache_lock_key(cache, &key, &lock), TK_OK);
    ck_assert_ptr_nonnull(lock);
    tk__cache_unlock(lock);
    tk__key_free(&key);
    tk_cache_close(cache);
    tk_test_rmtree(root);
    free(root);
}
END_TEST

START_TEST(missing_root_is_empty_listing)
{
    char *base = tk_test_tmpdir("cache-missing");
    char root[PATH_MAX];
    snprintf(root, sizeof(root), "%s/not/there", base);
    tk__cache_opts opts;
    memset(&opts, 0, sizeof(opts));
    opts.root = root;
    opts.lower = "";
    opts.read_only = 1; /* a tool that only reads creates nothing */
    tk_cache *cache;
    tk_assert_status(tk__cache_open(&opts, &cache), TK_OK);
    seen s;
    memset(&s, 0, sizeof(s));
    tk_assert_status(tk_cache_list(cache, visit, &s), TK_OK);
    ck_assert_int_eq(s.n, 0);
    tk_cache_stats stats = TK_STRUCT_INIT(tk_cache_stats);
    tk_assert_status(tk_cache_get_stats(cache, &stats), TK_OK);
    ck_assert_uint_eq(stats.entries, 0);
    uint64_t n = 9;
    tk_assert_status(tk_cache_verify(cache, NULL, NULL, &n), TK_OK);
    ck_assert_uint_eq(n, 0);
    tk_assert_status(tk_cache_prune(cache, 0, &n), TK_OK);
    ck_assert_uint_eq(n, 0);
    tk_assert_status(tk_cache_clear(cache, &n), TK_OK);
    ck_assert_uint_eq(n, 0);
    /* Read-only: stores are dropped without trouble. */
    tk__key key;
    make_key(&key, "ro");
    tk__entry_meta meta = make_meta("ro");
    tk_assert_status(tk__cache_put(cache, &key, &meta, "abc", 3), TK_OK);
    tk__entry e;
    tk_assert_status(tk__cache_get(cache, &key, &e), TK_NOT_FOUND);
    tk__key_free(&key);
    ck_assert(!path_exists(root));
    tk_cache_close(cache);
    tk_test_rmtree(base);
    free(base);
}
END_TEST

/* ---------------------------------------------------------------- bundles */

static int select_k1(void *user, const tk_cache_entry_info *info)
{
    (void)user;
    return strcmp(info->kernel, "b1") == 0;
}

START_TEST(bundle_roundtrip)
{
    char *src = tk_test_tmpdir("cache-bsrc");
    char *dst = tk_test_tmpdir("cache-bdst");
    char *work = tk_test_tmpdir("cache-bwork");
    tk_cache *a = open_cache(src, NULL);
    char name[16];
    for (int i = 0; i < 5; i++) {
        snprintf(name, sizeof(name), "b%d", i);
        put_named(a, name, 1000 + (size_t)i * 10);
    }
    char bundle[PATH_MAX];
    snprintf(bundle, sizeof(bundle), "%s/warm.tkb", work);
    uint64_t n = 0;
    tk_assert_status(tk_cache_export(a, bundle, NULL, NULL, &n), TK_OK);
    ck_assert_uint_eq(n, 5);

    tk_cache *b = open_cache(dst, NULL);
    uint64_t imported = 0, rejected = 9;
    tk_assert_status(tk_cache_import(b, bundle, NULL, NULL, &imported, &rejected), TK_OK);
    ck_assert_uint_eq(imported, 5);
    ck_assert_uint_eq(rejected, 0);
    for (int i = 0; i < 5; i++) {
        snprintf(name, sizeof(name), "b%d", i);
        ck_assert(get_named(b, name, 1000 + (size_t)i * 10));
        /* Byte-identical entry files. */
        char pa[PATH_MAX], pb[PATH_MAX];
        entry_path_of(src, name, pa, sizeof(pa));
        entry_path_of(dst, name, pb, sizeof(pb));
        size_t la, lb;
        char *fa = tk_test_read_file(pa, &la), *fb = tk_test_read_file(pb, &lb);
        ck_assert_uint_eq(la, lb);
        ck_assert_mem_eq(fa, fb, la);
        free(fa);
        free(fb);
    }
    /* No temporary file left next to the bundle. */
    DIR *d = opendir(work);
    struct dirent *e;
    int files = 0;
    while ((e = readdir(d)) != NULL)
        files += e->d_name[0] != '.';
    closedir(d);
    ck_assert_int_eq(files, 1);

    /* Selection. */
    tk_assert_status(tk_cache_export(a, bundle, select_k1, NULL, &n), TK_OK);
    ck_assert_uint_eq(n, 1);
    tk_cache_close(a);
    tk_cache_close(b);
    tk_test_rmtree(src);
    tk_test_rmtree(dst);
    tk_test_rmtree(work);
    free(src);
    free(dst);
    free(work);
}
END_TEST

START_TEST(bundle_with_bad_entry_and_non_bundle)
{
    char *src = tk_test_tmpdir("cache-bsrc");
    char *dst = tk_test_tmpdir("cache-bdst");
    tk_cache *a = open_cache(src, NULL);
    put_named(a, "c0", 500);
    put_named(a, "c1", 500);
    put_named(a, "c2", 500);
    char bundle[PATH_MAX];
    snprintf(bundle, sizeof(bundle), "%s/b.tkb", src);
    uint64_t n = 0;
    tk_assert_status(tk_cache_export(a, bundle, NULL, NULL, &n), TK_OK);
    ck_assert_uint_eq(n, 3);
    size_t len;
    uint8_t *bytes = (uint8_t *)tk_test_read_file(bundle, &len);
    /* Flip a byte in the middle of the second entry. */
    uint64_t l0 = 0;
    for (int i = 7; i >= 0; i--)
        l0 = (l0 << 8) | bytes[24 + i];
    size_t second = 24 + 8 + (size_t)l0 + 8;
    ck_assert_uint_lt(second + 300, len);
    bytes[second + 300] ^= 0x40;
    ck_assert_int_eq(tk_test_write_file(bundle, bytes, len), 0);

    tk_cache *b = open_cache(dst, NULL);
    bad_seen bs;
    memset(&bs, 0, sizeof(bs));
    uint64_t imported = 0, rejected = 0;
    tk_assert_status(tk_cache_import(b, bundle, on_bad, &bs, &imported, &rejected), TK_OK);
    ck_assert_uint_eq(imported, 2);
    ck_assert_uint_eq(rejected, 1);
    ck_assert_int_eq(bs.n, 1);
    int got = get_named(b, "c0", 500) + get_named(b, "c1", 500) + get_named(b, "c2", 500);
    ck_assert_int_eq(got, 2);
    uint64_t n_bad = 9;
    tk_assert_status(tk_cache_verify(b, NULL, NULL, &n_bad), TK_OK);
    ck_assert_uint_eq(n_bad, 0);

    /* A truncated bundle: what came before the cut is kept, the rest is
     * rejected, and the call says the bundle is corrupt. */
    ck_assert_int_eq(tk_test_write_file(bundle, bytes, len - 100), 0);
    tk_assert_status(tk_cache_import(b, bundle, NULL, NULL, NULL, NULL), TK_CORRUPT);
    free(bytes);

    /* A record larger than any entry is skipped, not allocated (a sparse
     * file keeps this cheap). */
    {
        uint8_t head[24 + 8];
        memcpy(head, "TKJITBDL", 8);
        put_le(head + 8, TK__CACHE_FORMAT, 4);
        put_le(head + 12, 0, 4);
        put_le(head + 16, 1, 8);
        put_le(head + 24, ((uint64_t)1 << 31) + 1, 8);
        ck_assert_int_eq(tk_test_write_file(bundle, head, sizeof(head)), 0);
        ck_assert_int_eq(truncate(bundle, (off_t)sizeof(head) + ((off_t)1 << 31) + 1), 0);
        memset(&bs, 0, sizeof(bs));
        tk_assert_status(tk_cache_import(b, bundle, on_bad, &bs, &imported, &rejected), TK_OK);
        ck_assert_uint_eq(imported, 0);
        ck_assert_uint_eq(rejected, 1);
        /* Refused from its first 64 bytes (no entry header there). */
        ck_assert_str_eq(bs.why[0], "bad magic");
    }

    /* Not a bundle at all. */
    ck_assert_int_eq(tk_test_write_file(bundle, "hello, world, not a bundle", 26), 0);
    tk_assert_status(tk_cache_import(b, bundle, NULL, NULL, &imported, &rejected), TK_CORRUPT);
    ck_assert_ptr_nonnull(strstr(tk_cache_last_error(b), "not a tokitai-jit cache bundle"));
    ck_assert_int_eq(tk_test_write_file(bundle, "", 0), 0);
    tk_assert_status(tk_cache_import(b, bundle, NULL, NULL, NULL, NULL), TK_CORRUPT);
    char missing[PATH_MAX];
    snprintf(missing, sizeof(missing), "%s/none.tkb", src);
    tk_assert_status(tk_cache_import(b, missing, NULL, NULL, NULL, NULL), TK_NOT_FOUND);
    /* An entry file is not a bundle either. */
    char entry[PATH_MAX];
    entry_path_of(src, "c0", entry, sizeof(entry));
    tk_assert_status(tk_cache_import(b, entry, NULL, NULL, NULL, NULL), TK_CORRUPT);
    tk_cache_close(a);
    tk_cache_close(b);
    tk_test_rmtree(src);
    tk_test_rmtree(dst);
    free(src);
    free(dst);
}
END_TEST

/* --------------------------------------------------------- folder trouble */

/* Everything a caller does on a cache in trouble: no crash, misses, failed
 * stores, no lock, and one warning in all. */
static void exercise_unusable(tk_cache *cache, const test_log *log)
{
    ck_assert_int_eq(tk__cache_writable(cache), 0);
    for (int i = 0; i < 3; i++) {
        tk__key key;
        make_key(&key, "t");
        tk__entry e;
        tk_assert_status(tk__cache_get(cache, &key, &e), TK_NOT_FOUND);
        tk__cache_lock *lock = (tk__cache_lock *)&e;
        tk_assert_status(tk__cache_lock_key(cache, &key, &lock), TK_OK);
        ck_assert_ptr_null(lock);
        tk__entry_meta meta = make_meta("t");
        tk_status st = tk__cache_put(cache, &key, &meta, "abcdef", 6);
        ck_assert_int_ne(st, TK_OK);
        tk__cache_unlock(lock);
        tk__key_free(&key);
    }
    ck_assert_int_eq(log->warnings, 1);
    ck_assert_uint_gt(strlen(tk_cache_last_error(cache)), 0);
}

START_TEST(group_or_world_writable_root_refused)
{
    char *root = tk_test_tmpdir("cache-perm");
    tk_cache *good = open_cache(root, NULL);
    put_named(good, "planted", 50);
    tk_cache_close(good);
    for (int mode = 0; mode < 2; mode++) {
        ck_assert_int_eq(chmod(root, mode ? 0777 : 0770), 0);
        test_log log = {0};
        tk_cache *cache = open_cache(root, &log);
        ck_assert_int_eq(tk__cache_usable(cache), 0);
        ck_assert(!get_named(cache, "planted", 50)); /* refused even though valid */
        ck_assert_ptr_nonnull(strstr(log.last, "writable"));
        exercise_unusable(cache, &log);
        seen s;
        memset(&s, 0, sizeof(s));
        tk_assert_status(tk_cache_list(cache, visit, &s), TK_IO_ERROR);
        ck_assert_ptr_nonnull(strstr(tk_cache_last_error(cache), "writable"));
        tk_cache_close(cache);
    }
    /* The format folder is checked too. */
    ck_assert_int_eq(chmod(root, 0700), 0);
    char fmt[PATH_MAX];
    snprintf(fmt, sizeof(fmt), "%s/%d", root, TK__CACHE_FORMAT);
    ck_assert_int_eq(chmod(fmt, 0722), 0);
    test_log log = {0};
    tk_cache *cache = open_cache(root, &log);
    ck_assert(!get_named(cache, "planted", 50));
    exercise_unusable(cache, &log);
    tk_cache_close(cache);
    /* A lower tier writable by others is ignored. */
    ck_assert_int_eq(chmod(fmt, 0700), 0);
    ck_assert_int_eq(chmod(root, 0757), 0);
    char *user = tk_test_tmpdir("cache-perm-user");
    tk__cache_opts opts;
    memset(&opts, 0, sizeof(opts));
    opts.root = user;
    opts.lower = root;
    memset(&log, 0, sizeof(log));
    opts.log = test_log_fn;
    opts.log_user = &log;
    tk_assert_status(tk__cache_open(&opts, &cache), TK_OK);
    ck_assert(!get_named(cache, "planted", 50));
    ck_assert_int_eq(log.warnings, 1);
    tk_cache_close(cache);
    chmod(root, 0700);
    tk_test_rmtree(root);
    tk_test_rmtree(user);
    free(root);
    free(user);
}
END_TEST

START_TEST(missing_folder_created_private)
{
    char *base = tk_test_tmpdir("cache-mk");
    char root[PATH_MAX];
    snprintf(root, sizeof(root), "%s/a/b/c", base);
    test_log log = {0};
    tk_cache *cache = open_cache(root, &log);
    const char *levels[] = {"/a", "/a/b", "/a/b/c", "/a/b/c/"};
    for (size_t i = 0; i < 4; i++) {
        char p[PATH_MAX];
        snprintf(p, sizeof(p), "%s%s", base, levels[i]);
        if (i == 3) /* the format folder */
            snprintf(p, sizeof(p), "%s%s%d", base, levels[i], TK__CACHE_FORMAT);
        struct stat st;
        ck_assert_int_eq(stat(p, &st), 0);
        ck_assert_msg((st.st_mode & 0777) == 0700, "%s has mode %o", p, st.st_mode & 0777);
    }
    put_named(cache, "m", 10);
    ck_assert(get_named(cache, "m", 10));
    ck_assert_int_eq(log.warnings, 0);
    tk_cache_close(cache);
    tk_test_rmtree(base);
    free(base);
}
END_TEST

START_TEST(uncreatable_folder_works_uncached)
{
    /* A plain file where a folder should be stops root as well as users. */
    char *base = tk_test_tmpdir("cache-unc");
    char file[PATH_MAX], root[PATH_MAX + 16];
    snprintf(file, sizeof(file), "%s/file", base);
    ck_assert_int_eq(tk_test_write_file(file, "x", 1), 0);
    snprintf(root, sizeof(root), "%s/cache", file);
    test_log log = {0};
    tk_cache *cache = open_cache(root, &log);
    ck_assert_int_eq(tk__cache_usable(cache), 0);
    exercise_unusable(cache, &log);
    tk_cache_close(cache);
    /* The root itself a file. */
    memset(&log, 0, sizeof(log));
    cache = open_cache(file, &log);
    exercise_unusable(cache, &log);
    tk_cache_close(cache);
    tk_test_rmtree(base);
    free(base);
}
END_TEST

START_TEST(read_only_folder_reads_only)
{
    char *root = tk_test_tmpdir("cache-ro");
    tk_cache *w = open_cache(root, NULL);
    put_named(w, "ro", 40);
    tk_cache_close(w);
    test_log log = {0};
    tk_cache *cache;
    if (geteuid() != 0) {
        char fmt[PATH_MAX], path[PATH_MAX], shard[PATH_MAX];
        snprintf(fmt, sizeof(fmt), "%s/%d", root, TK__CACHE_FORMAT);
        entry_path_of(root, "ro", path, sizeof(path));
        snprintf(shard, sizeof(shard), "%s", path);
        *strrchr(shard, '/') = 0;
        ck_assert_int_eq(chmod(shard, 0500), 0);
        ck_assert_int_eq(chmod(fmt, 0500), 0);
        ck_assert_int_eq(chmod(root, 0500), 0);
        cache = open_cache(root, &log);
        ck_assert(get_named(cache, "ro", 40)); /* reads still work */
        ck_assert_int_eq(log.warnings, 1);     /* said once, at open */
        tk__key key;
        make_key(&key, "new");
        tk__entry_meta meta = make_meta("new");
        for (int i = 0; i < 3; i++)
            ck_assert_int_ne(tk__cache_put(cache, &key, &meta, "zz", 2), TK_OK);
        tk__entry e;
        tk_assert_status(tk__cache_get(cache, &key, &e), TK_NOT_FOUND);
        tk__key_free(&key);
        ck_assert_int_eq(log.warnings, 1);
        tk_cache_close(cache);
        chmod(root, 0700);
        chmod(fmt, 0700);
        chmod(shard, 0700);
    } else {
        /* Permission bits do not stop root: /proc/self is a folder nobody can
         * create anything in. */
        cache = open_cache("/proc/self", &log);
        exercise_unusable(cache, &log);
        tk_cache_close(cache);
    }
    tk_test_rmtree(root);
    free(root);
}
END_TEST

START_TEST(full_disk_stores_fail_quietly)
{
    /* RLIMIT_FSIZE makes writes fail like a full disk, even for root. Done in
     * a child so the limit dies with it. */
    char *root = tk_test_tmpdir("cache-full");
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN);
        test_log log = {0};
        tk_cache *cache = open_cache(root, &log);
        struct rlimit rl = {1000, 1000};
        if (setrlimit(RLIMIT_FSIZE, &rl) != 0)
            _exit(10);
        tk__key key;
        make_key(&key, "big");
        tk__entry_meta meta = make_meta("big");
        static unsigned char big[8192];
        uint32_t x = 2463534242u; /* incompressible: zstd cannot shrink it below the limit */
        for (size_t i = 0; i < sizeof(big); i++) {
            x ^= x << 13, x ^= x >> 17, x ^= x << 5;
            big[i] = (unsigned char)x;
        }
        for (int i = 0; i < 3; i++)
            if (tk__cache_put(cache, &key, &meta, big, sizeof(big)) != TK_IO_ERROR)
                _exit(11);
        tk__entry e;
        if (tk__cache_get(cache, &key, &e) != TK_NOT_FOUND)
            _exit(12);
        put_named(cache, "small", 10); /* small ones still fit */
        if (!get_named(cache, "small", 10))
            _exit(13);
        tk_cache_stats stats = TK_STRUCT_INIT(tk_cache_stats);
        if (tk_cache_get_stats(cache, &stats) != TK_OK || stats.temp_files != 0)
            _exit(14);
        if (log.warnings != 1)
            _exit(15);
        tk__key_free(&key);
        tk_cache_close(cache);
        _exit(0);
    }
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
    tk_test_rmtree(root);
    free(root);
}
END_TEST

START_TEST(foreign_owner_refused)
{
    /* Only root can give a file away. */
    char *root = tk_test_tmpdir("cache-own");
    tk_cache *w = open_cache(root, NULL);
    put_named(w, "owned", 40);
    tk_cache_close(w);
    char path[PATH_MAX];
    entry_path_of(root, "owned", path, sizeof(path));
    ck_assert_int_eq(chown(path, 4242, 4242), 0);
    test_log log = {0};
    tk_cache *cache = open_cache(root, &log);
    ck_assert(!get_named(cache, "owned", 40));
    ck_assert(!get_named(cache, "owned", 40));
    ck_assert_int_eq(log.warnings, 1);
    ck_assert_ptr_nonnull(strstr(log.last, "another user"));
    seen s;
    memset(&s, 0, sizeof(s));
    tk_assert_status(tk_cache_list(cache, visit, &s), TK_OK);
    ck_assert_int_eq(s.n, 0);
    tk_cache_close(cache);
    /* A root folder owned by another user is refused as a whole. */
    ck_assert_int_eq(chown(root, 4242, 4242), 0);
    memset(&log, 0, sizeof(log));
    cache = open_cache(root, &log);
    ck_assert_int_eq(tk__cache_usable(cache), 0);
    ck_assert_int_eq(log.warnings, 1);
    tk_cache_close(cache);
    tk_test_rmtree(root);
    free(root);
}
END_TEST

START_TEST(disabled_cache_does_nothing)
{
    char *root = tk_test_tmpdir("cache-off");
    tk_cache *w = open_cache(root, NULL);
    put_named(w, "there", 40);
    tk_cache_close(w);
    setenv("TOKITAI_JIT_CACHE_DISABLE", "1", 1);
    test_log log = {0};
    tk_cache *cache = open_cache(root, &log);
    ck_assert_int_eq(tk__cache_usable(cache), 0);
    ck_assert(!get_named(cache, "there", 40));
    put_named(cache, "new", 40);
    unsetenv("TOKITAI_JIT_CACHE_DISABLE");
    char path[PATH_MAX];
    entry_path_of(root, "new", path, sizeof(path));
    ck_assert(!path_exists(path));
    ck_assert_int_eq(log.warnings, 0);
    /* The tools still see the folder. */
    seen s;
    memset(&s, 0, sizeof(s));
    tk_assert_status(tk_cache_list(cache, visit, &s), TK_OK);
    ck_assert_int_eq(s.n, 1);
    tk_cache_close(cache);
    tk_test_rmtree(root);
    free(root);
}
END_TEST

static void assert_holds(const char *path, const char *text)
{
    size_t len = 0;
    char *bytes = tk_test_read_file(path, &len);
    ck_assert_ptr_nonnull(bytes);
    ck_assert_uint_eq(len, strlen(text));
    ck_assert_int_eq(memcmp(bytes, text, len), 0);
    free(bytes);
}

/* A new folder (returned) with the paths of an entry and of a fresh file
 * beside it (both PATH_MAX long), neither made yet. */
static char *entry_and_fresh(const char *tag, char *path, char *fresh)
{
    char *root = tk_test_tmpdir(tag);
    snprintf(path, PATH_MAX, "%s/e.tkc", root);
    snprintf(fresh, PATH_MAX, "%s/fresh", root);
    return root;
}

/* path holds `old` and is seen (*seen_st); then a store renames a fresh entry
 * holding "fresh" onto it, after a removal of the old file where
 * unlink_first (the fresh file may then get its inode number). */
static void seen_then_replaced(const char *path, const char *fresh, const char *old,
                               int unlink_first, struct stat *seen_st)
{
    ck_assert_int_eq(tk_test_write_file(path, old, strlen(old)), 0);
    ck_assert_int_eq(lstat(path, seen_st), 0);
    if (unlink_first)
        ck_assert_int_eq(unlink(path), 0);
    ck_assert_int_eq(tk_test_write_file(fresh, "fresh", 5), 0);
    ck_assert_int_eq(rename(fresh, path), 0);
}

/* A removal decided from an earlier stat (an eviction scan, a bad read)
 * removes only the file it saw: an entry renamed onto the name since, as a
 * concurrent store does, stays with its bytes. */
START_TEST(unlink_same_keeps_a_replacement)
{
    char path[PATH_MAX], fresh[PATH_MAX];
    char *root = entry_and_fresh("unlink-same", path, fresh);
    struct stat read_before, now;
    seen_then_replaced(path, fresh, "old", 0, &read_before);
    errno = 0;
    tk__file_id was = tk__file_id_of(&read_before);
    ck_assert_int_eq(tk__cache_unlink_same(path, &was), -1);
    ck_assert_int_eq(errno, ESTALE);
    assert_holds(path, "fresh");
    /* nothing left aside in the folder: only the entry */
    DIR *d = opendir(root);
    ck_assert_ptr_nonnull(d);
    int others = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        others += strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, "e.tkc");
    closedir(d);
    ck_assert_int_eq(others, 0);
    /* the file it is now: removed */
    ck_assert_int_eq(lstat(path, &now), 0);
    was = tk__file_id_of(&now);
    ck_assert_int_eq(tk__cache_unlink_same(path, &was), 0);
    ck_assert_int_ne(lstat(path, &now), 0);
    errno = 0;
    ck_assert_int_eq(tk__cache_unlink_same(path, &was), -1);
    ck_assert_int_eq(errno, ENOENT);
    tk_test_rmtree(root);
    free(root);
}
END_TEST

/* The same with the inode number reused: a scan saw a bad file, a reader
 * removed it, and a store made the fresh entry, which the file system gave
 * the freed number (ext4 does at once). Device and inode are those of the
 * fresh file here, whatever this file system does; only its size or its
 * modification time differs from what the scan saw. */
START_TEST(unlink_same_keeps_a_replacement_with_a_reused_inode)
{
    char path[PATH_MAX], fresh[PATH_MAX];
    char *root = entry_and_fresh("unlink-same-reuse", path, fresh);
    struct stat old, now;
    seen_then_replaced(path, fresh, "old!!", 1, &old);
    /* a time apart from the old file's, whatever the clock's grain */
    struct timespec t[2] = {old.st_atim, old.st_mtim};
    t[1].tv_sec += 1;
    ck_assert_int_eq(utimensat(AT_FDCWD, path, t, 0), 0);
    ck_assert_int_eq(lstat(path, &now), 0);
    tk__file_id was = tk__file_id_of(&old);
    was.dev = now.st_dev;
    was.ino = now.st_ino; /* the number passed on */
    errno = 0;
    ck_assert_int_eq(tk__cache_unlink_same(path, &was), -1);
    ck_assert_int_eq(errno, ESTALE);
    /* same time, another size */
    was = tk__file_id_of(&now);
    was.size = 3;
    errno = 0;
    ck_assert_int_eq(tk__cache_unlink_same(path, &was), -1);
    ck_assert_int_eq(errno, ESTALE);
    assert_holds(path, "fresh");
    /* what the scan would see now: removed */
    was = tk__file_id_of(&now);
    ck_assert_int_eq(tk__cache_unlink_same(path, &was), 0);
    ck_assert_int_ne(lstat(path, &now), 0);
    /* a file without read permission: checked by its stat alone */
    ck_assert_int_eq(tk_test_write_file(path, "locked", 6), 0);
    ck_assert_int_eq(chmod(path, 0), 0);
    ck_assert_int_eq(lstat(path, &now), 0);
    was = tk__file_id_of(&now);
    was.mtime_ns += 1;
    ck_assert_int_eq(tk__cache_unlink_same(path, &was), -1);
    ck_assert_int_eq(lstat(path, &now), 0);
    was = tk__file_id_of(&now);
    ck_assert_int_eq(tk__cache_unlink_same(path, &was), 0);
    ck_assert_int_ne(lstat(path, &now), 0);
    tk_test_rmtree(root);
    free(root);
}
END_TEST

/* A file a removal moved aside (a 3 GiB bad file, say) is not counted
 * toward the size limit while its remover holds it: a store's eviction
 * beside it keeps every good entry. A prune removes it once nobody holds
 * it (a remover killed mid-way), not before. */
START_TEST(moved_aside_file_is_not_counted_and_pruned_when_unheld)
{
    char *root = tk_test_tmpdir("cache-gone");
    char path[PATH_MAX];
    const uint64_t s = probe_entry(root, "g00", path, sizeof(path));

    char gone[PATH_MAX + 64];
    snprintf(gone, sizeof(gone), "%s", path);
    *strrchr(gone, '/') = 0;
    strcat(gone, "/" TK__GONE_PREFIX "4242.1");
    int gfd = open(gone, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    ck_assert_int_ge(gfd, 0);
    ck_assert_int_eq(ftruncate(gfd, (off_t)(100 * s)), 0); /* far over the limit */
    ck_assert_int_eq(flock(gfd, LOCK_EX), 0);              /* its remover, alive */

    tk_cache *cache = open_limited(root, 4 * s + s / 2);
    char name[16];
    for (int i = 1; i < 4; i++) {
        snprintf(name, sizeof(name), "g%02d", i);
        put_named(cache, name, 2000);
    }
    for (int i = 0; i < 4; i++) {
        snprintf(name, sizeof(name), "g%02d", i);
        ck_assert_msg(get_named(cache, name, 2000), "%s evicted for a file being removed", name);
    }
    uint64_t removed = 0;
    tk_assert_status(tk_cache_prune(cache, 0, &removed), TK_OK);
    ck_assert_int_eq(access(gone, F_OK), 0); /* held: a live removal's */
    close(gfd);                              /* the remover dies */
    tk_assert_status(tk_cache_prune(cache, 0, &removed), TK_OK);
    ck_assert_int_ne(access(gone, F_OK), 0);
    for (int i = 0; i < 4; i++) {
        snprintf(name, sizeof(name), "g%02d", i);
        ck_assert_msg(get_named(cache, name, 2000), "%s pruned", name);
    }
    tk_cache_close(cache);
    tk_test_rmtree(root);
    free(root);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("cache_store");
    TCase *tc = tcase_create("store");
    tcase_add_test(tc, store_then_load_same_bytes_and_metadata);
    tcase_add_test(tc, hit_refreshes_old_mtime_only);
    tcase_add_test(tc, bad_entries_are_misses_and_replaced);
    tcase_add_test(tc, fingerprint_collision_never_returned);
    tcase_add_test(tc, lower_tier_read_only);
    tcase_add_test(tc, eviction_keeps_limit_and_recent_entries);
    tcase_add_test(tc, max_size_from_environment);
    tcase_add_test(tc, default_root_from_environment);
    tcase_add_test(tc, list_stats_verify_clear);
    tcase_add_test(tc, lock_files_pruned_when_unused);
    tcase_add_test(tc, missing_root_is_empty_listing);
    tcase_add_test(tc, bundle_roundtrip);
    tcase_add_test(tc, bundle_with_bad_entry_and_non_bundle);
    tcase_add_test(tc, group_or_world_writable_root_refused);
    tcase_add_test(tc, missing_folder_created_private);
    tcase_add_test(tc, uncreatable_folder_works_uncached);
    tcase_add_test(tc, read_only_folder_reads_only);
    tcase_add_test(tc, full_disk_stores_fail_quietly);
    if (geteuid() == 0)
        tcase_add_test(tc, foreign_owner_refused);
    tcase_add_test(tc, disabled_cache_does_nothing);
    tcase_add_test(tc, unlink_same_keeps_a_replacement);
    tcase_add_test(tc, unlink_same_keeps_a_replacement_with_a_reused_inode);
    tcase_add_test(tc, moved_aside_file_is_not_counted_and_pruned_when_unheld);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tk_test_main(suite());
}
