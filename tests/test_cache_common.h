/* Helpers shared by the cache suites (header only: tests/ globs test_*.c). */
#ifndef TK_TEST_CACHE_COMMON_H
#define TK_TEST_CACHE_COMMON_H

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cache/cache_internal.h"
#include "tk_test.h"

typedef struct test_log {
    int warnings;
    int messages;
    char last[1024];
} test_log;

static inline void test_log_fn(void *user, tk_log_level level, const char *msg)
{
    test_log *log = user;
    log->messages++;
    if (level >= TK_LOG_WARN)
        log->warnings++;
    snprintf(log->last, sizeof(log->last), "%s", msg);
}

static inline tk_cache *open_cache(const char *root, test_log *log)
{
    tk__cache_opts opts;
    memset(&opts, 0, sizeof(opts));
    opts.root = root;
    opts.lower = "";
    opts.log = log ? test_log_fn : NULL;
    opts.log_user = log;
    tk_cache *cache = NULL;
    tk_assert_status(tk__cache_open(&opts, &cache), TK_OK);
    ck_assert_ptr_nonnull(cache);
    return cache;
}

/* A key like the engine's: a fixed field order with one name varying. */
static inline void make_key(tk__key *key, const char *name)
{
    tk__key_init(key);
    tk__key_add_str(key, "backend", "stub");
    tk__key_add_str(key, "compiler", "stubcc 1.0");
    tk__key_add_str(key, "arch", "sm_90");
    tk__key_add_str(key, "entry", name);
    tk__key_add_str(key, "source", "extern \"C\" __global__ void k() {}");
    tk_assert_status(tk__key_finish(key), TK_OK);
}

static inline tk__entry_meta make_meta(const char *kernel)
{
    tk__entry_meta meta;
    memset(&meta, 0, sizeof(meta));
    meta.kernel = kernel;
    meta.source = "user:1234";
    meta.backend = "stub";
    meta.arch = "sm_90";
    meta.compiler = "stubcc 1.0";
    meta.options = "-DN=4 -O3";
    meta.resources.registers = 32;
    meta.resources.sgprs = -1;
    meta.resources.agprs = -1;
    meta.resources.shared_bytes = 4096;
    meta.resources.local_bytes = 0;
    meta.resources.spill_count = 0;
    meta.resources.wavefront_size = 32;
    meta.resources.kernarg_bytes = 24;
    meta.resources.max_threads = 1024;
    return meta;
}

/* Deterministic synthetic code object for a name. */
static inline void fill_payload(unsigned char *buf, size_t n, const char *name)
{
    unsigned x = 2166136261u;
    for (const char *p = name; *p; p++)
        x = (x ^ (unsigned char)*p) * 16777619u;
    for (size_t i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        buf[i] = (unsigned char)(x >> 16);
    }
}

static inline void put_named(tk_cache *cache, const char *name, size_t size)
{
    tk__key key;
    make_key(&key, name);
    unsigned char *payload = malloc(size);
    fill_payload(payload, size, name);
    tk__entry_meta meta = make_meta(name);
    tk_assert_status(tk__cache_put(cache, &key, &meta, payload, size), TK_OK);
    free(payload);
    tk__key_free(&key);
}

/* 1 when the cache returns exactly the payload put_named stored. */
static inline int get_named(tk_cache *cache, const char *name, size_t size)
{
    tk__key key;
    make_key(&key, name);
    tk__entry entry;
    memset(&entry, 0, sizeof(entry));
    tk_status st = tk__cache_get(cache, &key, &entry);
    tk__key_free(&key);
    if (st != TK_OK)
        return 0;
    unsigned char *want = malloc(size);
    fill_payload(want, size, name);
    int same = entry.payload_size == size && memcmp(entry.payload, want, size) == 0;
    free(want);
    tk__entry_free(&entry);
    ck_assert_msg(same, "cache returned wrong bytes for %s", name);
    return 1;
}

static inline void entry_path_of(const char *root, const char *name, char *buf, size_t size)
{
    tk__key key;
    make_key(&key, name);
    char fmt[PATH_MAX];
    snprintf(fmt, sizeof(fmt), "%s/%d", root, TK__CACHE_FORMAT);
    tk_assert_status(tk__cache_entry_path(fmt, key.hex, buf, size), TK_OK);
    tk__key_free(&key);
}

static inline int path_exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

#endif
