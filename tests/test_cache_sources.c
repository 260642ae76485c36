/*
 * Kept sources: the source of any key can be shown (tk_cache_entry_source),
 * sources travel with bundles and are checked against their fingerprint on
 * import, they count toward the size limit and go when no entry names them.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#include "test_cache_common.h"

/* A source too long to sit in the key (so it is kept as a file), with a
 * tag line that makes each one different. */
static char *source_text(const char *tag, size_t n)
{
    char *s = malloc(n + 1);
    static const char line[] = "__global__ void k(float *x) { x[threadIdx.x] += 1.0f; }\n";
    int head = snprintf(s, n + 1, "// %s\n", tag);
    for (size_t i = (size_t)head; i < n; i++)
        s[i] = line[i % (sizeof line - 1)];
    s[n] = 0;
    return s;
}

static void source_key(tk__key *key, const char *name, const char *source)
{
    tk__key_init(key);
    tk__key_add_str(key, "backend", "stub");
    tk__key_add_str(key, "entry", name);
    tk__key_add_bytes(key, TK__KEY_SOURCE_TAG, source, strlen(source));
    tk__key_add_str(key, "option", "-DTILE=64");
    tk_assert_status(tk__key_finish(key), TK_OK);
}

/* Stores an entry whose key names source; its key's hex in hex. */
static void put_source(tk_cache *cache, const char *name, const char *source, char hex[33])
{
    tk__key key;
    source_key(&key, name, source);
    unsigned char code[3000];
    fill_payload(code, sizeof code, name);
    tk__entry_meta meta = make_meta(name);
    tk_assert_status(tk__cache_put(cache, &key, &meta, code, sizeof code), TK_OK);
    memcpy(hex, key.hex, 33);
    tk__key_free(&key);
}

static void hash_hex(const char *text, char hex[33])
{
    XXH128_hash_t h = XXH3_128bits(text, strlen(text));
    tk__fp_hex(h.high64, h.low64, hex);
}

static void kept_path(const char *root, const char *text, char *buf, size_t size)
{
    char hex[33];
    hash_hex(text, hex);
    snprintf(buf, size, "%s/%d/src/%s.zst", root, TK__CACHE_FORMAT, hex);
}

static void entry_file(const char *root, const char *hex, char *buf, size_t size)
{
    snprintf(buf, size, "%s/%d/%.2s/%s.tkc", root, TK__CACHE_FORMAT, hex, hex + 2);
}

static off_t size_of(const char *path)
{
    struct stat st;
    ck_assert_msg(stat(path, &st) == 0, "%s: %s", path, strerror(errno));
    return st.st_size;
}

static void age(const char *path, time_t seconds)
{
    struct timespec ts[2];
    ts[0].tv_sec = ts[1].tv_sec = time(NULL) - seconds;
    ts[0].tv_nsec = ts[1].tv_nsec = 0;
    ck_assert_int_eq(utimensat(AT_FDCWD, path, ts, AT_SYMLINK_NOFOLLOW), 0);
}

typedef struct seen {
    int calls;
    char *text;
    size_t len;
    char hash[33];
    char options[128];
    char key[33];
} seen;

static void on_source(void *user, const tk_cache_entry_info *info, const char *source, size_t len)
{
    seen *s = user;
    s->calls++;
    free(s->text);
    s->text = source ? strndup(source, len) : NULL;
    s->len = len;
    snprintf(s->hash, sizeof s->hash, "%s", info->source_hash ? info->source_hash : "");
    snprintf(s->options, sizeof s->options, "%s", info->options);
    snprintf(s->key, sizeof s->key, "%s", info->key_hex);
}

static int list_hash(void *user, const tk_cache_entry_info *info)
{
    seen *s = user;
    if (strcmp(info->key_hex, s->key) == 0) {
        s->calls++;
        snprintf(s->hash, sizeof s->hash, "%s", info->source_hash ? info->source_hash : "");
    }
    return 0;
}

START_TEST(source_of_a_key_is_shown)
{
    char *root = tk_test_tmpdir("src-show");
    test_log log = {0};
    tk_cache *cache = open_cache(root, &log);
    char *text = source_text("one", 20000);
    char hex[33], want_hash[33];
    put_source(cache, "one", text, hex);
    hash_hex(text, want_hash);

    /* The whole key, and a prefix of it. */
    seen s = {0};
    tk_assert_status(tk_cache_entry_source(cache, hex, on_source, &s), TK_OK);
    ck_assert_int_eq(s.calls, 1);
    ck_assert_uint_eq(s.len, strlen(text));
    ck_assert_str_eq(s.text, text);
    ck_assert_str_eq(s.hash, want_hash);
    ck_assert_str_eq(s.options, "-DN=4 -O3");
    char prefix[9];
    snprintf(prefix, sizeof prefix, "%.8s", hex);
    for (char *p = prefix; *p; p++)
        *p = (char)toupper((unsigned char)*p);
    tk_assert_status(tk_cache_entry_source(cache, prefix, on_source, &s), TK_OK);
    ck_assert_int_eq(s.calls, 2);
    ck_assert_str_eq(s.text, text);

    /* A listing names the kept file. */
    seen l = {0};
    memcpy(l.key, hex, 33);
    tk_assert_status(tk_cache_list(cache, list_hash, &l), TK_OK);
    ck_assert_int_eq(l.calls, 1);
    ck_assert_str_eq(l.hash, want_hash);

    /* A source short enough to sit in the key: shown from the key. */
    tk__key key;
    make_key(&key, "short");
    put_named(cache, "short", 500);
    tk_assert_status(tk_cache_entry_source(cache, key.hex, on_source, &s), TK_OK);
    ck_assert_str_eq(s.text, "extern \"C\" __global__ void k() {}");
    ck_assert_str_eq(s.hash, "");
    tk__key_free(&key);

    /* No such key; not a key; a prefix that names several entries. */
    char none[33];
    snprintf(none, sizeof none, "%s", hex);
    none[31] = none[31] == '0' ? '1' : '0';
    int before = s.calls;
    tk_assert_status(tk_cache_entry_source(cache, none, on_source, &s), TK_NOT_FOUND);
    tk_assert_status(tk_cache_entry_source(cache, "xyz", on_source, &s), TK_INVALID_ARGUMENT);
    tk_assert_status(tk_cache_entry_source(cache, "", on_source, &s), TK_INVALID_ARGUMENT);
    ck_assert_int_eq(s.calls, before);
    char more[33];
    for (int i = 0; i < 40; i++) {
        char name[16];
        snprintf(name, sizeof name, "n%d", i);
        put_source(cache, name, text, more);
    }
    int ambiguous = 0;
    for (const char *d = "0123456789abcdef"; *d && !ambiguous; d++) {
        char one[2] = {*d, 0};
        tk_status st = tk_cache_entry_source(cache, one, on_source, &s);
        if (st == TK_INVALID_ARGUMENT) {
            ck_assert_ptr_nonnull(strstr(tk_cache_last_error(cache), "entries"));
            ambiguous = 1;
        }
    }
    ck_assert(ambiguous); /* 42 keys: some first digit is shared */

    /* A damaged kept source is not shown: the entry is, with source NULL. */
    char spath[PATH_MAX];
    kept_path(root, text, spath, sizeof spath);
    size_t zlen = 0;
    char *z = tk_test_read_file(spath, &zlen);
    z[zlen / 2] ^= 0x5a;
    ck_assert_int_eq(tk_test_write_file(spath, z, zlen), 0);
    free(z);
    before = s.calls;
    tk_assert_status(tk_cache_entry_source(cache, hex, on_source, &s), TK_NOT_FOUND);
    ck_assert_int_eq(s.calls, before + 1);
    ck_assert_ptr_null(s.text);
    ck_assert_ptr_nonnull(strstr(tk_cache_last_error(cache), "not kept"));
    ck_assert_int_eq(log.warnings, 0);

    free(s.text);
    free(text);
    tk_cache_close(cache);
    tk_test_rmtree(root);
    free(root);
}
END_TEST

typedef struct bad_log {
    int n;
    char last[512];
} bad_log;

static void bad_cb(void *user, const char *where, const char *why)
{
    bad_log *b = user;
    b->n++;
    snprintf(b->last, sizeof b->last, "%s: %s", where, why ? why : "");
}

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

START_TEST(sources_travel_with_bundles)
{
    char *root = tk_test_tmpdir("src-bundle");
    char a[PATH_MAX], b[PATH_MAX], c[PATH_MAX], bundle[PATH_MAX];
    snprintf(a, sizeof a, "%s/a", root);
    snprintf(b, sizeof b, "%s/b", root);
    snprintf(c, sizeof c, "%s/c", root);
    snprintf(bundle, sizeof bundle, "%s/x.tkb", root);
    tk_cache *ca = open_cache(a, NULL);
    char *t1 = source_text("first", 30000), *t2 = source_text("second", 12000);
    char h1[33], h2[33], h3[33];
    put_source(ca, "e1", t1, h1);
    put_source(ca, "e2", t2, h2);
    put_source(ca, "e3", t1, h3); /* the same source: shipped once */
    uint64_t n = 0;
    tk_assert_status(tk_cache_export(ca, bundle, NULL, NULL, &n), TK_OK);
    ck_assert_uint_eq(n, 3);
    tk_cache_close(ca);

    /* The bundle holds 3 entries and 2 sources, as 5 records. */
    size_t blen = 0;
    uint8_t *bytes = (uint8_t *)tk_test_read_file(bundle, &blen);
    ck_assert_uint_eq(le64(bytes + 16), 5);
    size_t off = 24, last = 0;
    int sources = 0;
    while (off + 8 <= blen) {
        uint64_t len = le64(bytes + off);
        if (memcmp(bytes + off + 8, TK__SOURCE_MAGIC, 8) == 0) {
            sources++;
            last = off;
        }
        off += 8 + (size_t)len;
    }
    ck_assert_uint_eq(off, blen);
    ck_assert_int_eq(sources, 2);

    /* Imported: the sources are kept and shown. */
    tk_cache *cb = open_cache(b, NULL);
    bad_log bl = {0};
    uint64_t ok = 0, rej = 0;
    tk_assert_status(tk_cache_import(cb, bundle, bad_cb, &bl, &ok, &rej), TK_OK);
    ck_assert_uint_eq(ok, 3);
    ck_assert_uint_eq(rej, 0);
    ck_assert_int_eq(bl.n, 0);
    seen s = {0};
    tk_assert_status(tk_cache_entry_source(cb, h2, on_source, &s), TK_OK);
    ck_assert_str_eq(s.text, t2);
    tk_assert_status(tk_cache_entry_source(cb, h3, on_source, &s), TK_OK);
    ck_assert_str_eq(s.text, t1);
    tk_cache_close(cb);

    /* A source record whose text does not match its fingerprint: rejected
     * and not kept; the entries still come in. */
    uint64_t rlen = le64(bytes + last);
    bytes[last + 8 + 64 + (rlen - 64) / 2] ^= 0x5a;
    ck_assert_int_eq(tk_test_write_file(bundle, bytes, blen), 0);
    tk_cache *cc = open_cache(c, NULL);
    tk_assert_status(tk_cache_import(cc, bundle, bad_cb, &bl, &ok, &rej), TK_OK);
    ck_assert_uint_eq(ok, 3);
    ck_assert_uint_eq(rej, 1);
    ck_assert_int_eq(bl.n, 1);
    ck_assert_msg(strstr(bl.last, "source"), "%s", bl.last);
    int shown = 0;
    shown += tk_cache_entry_source(cc, h1, on_source, &s) == TK_OK;
    shown += tk_cache_entry_source(cc, h2, on_source, &s) == TK_OK;
    ck_assert_int_eq(shown, 1);
    tk_cache_close(cc);

    free(s.text);
    free(bytes);
    free(t1);
    free(t2);
    tk_test_rmtree(root);
    free(root);
}
END_TEST

START_TEST(kept_sources_count_toward_the_limit_and_go_unnamed)
{
    char *root = tk_test_tmpdir("src-limit");
    tk_cache *cache = open_cache(root, NULL);
    char *t1 = source_text("shared", 40000), *t2 = source_text("alone", 40000);
    char h1[33], h2[33], h3[33];
    put_source(cache, "e1", t1, h1);
    put_source(cache, "e2", t2, h2);
    put_source(cache, "e3", t1, h3);
    char e1[PATH_MAX], e2[PATH_MAX], e3[PATH_MAX], s1[PATH_MAX], s2[PATH_MAX];
    entry_file(root, h1, e1, sizeof e1);
    entry_file(root, h2, e2, sizeof e2);
    entry_file(root, h3, e3, sizeof e3);
    kept_path(root, t1, s1, sizeof s1);
    kept_path(root, t2, s2, sizeof s2);
    uint64_t z1 = (uint64_t)size_of(s1), z2 = (uint64_t)size_of(s2);
    tk_cache_stats st = TK_STRUCT_INIT(tk_cache_stats);
    tk_assert_status(tk_cache_get_stats(cache, &st), TK_OK);
    ck_assert_uint_eq(st.entries, 3);
    ck_assert_uint_eq(st.source_bytes, z1 + z2);

    /* The limit holds the entries but not the entries and the sources: the
     * least recently used entry goes, then the source only it named. */
    age(e2, 3000);
    age(e1, 2000);
    age(e3, 1000);
    age(s1, 3000);
    age(s2, 3000);
    uint64_t limit = st.bytes + st.source_bytes - (uint64_t)size_of(e2);
    ck_assert_uint_gt(st.bytes, 0);
    uint64_t removed = 0;
    tk_assert_status(tk_cache_prune(cache, limit, &removed), TK_OK);
    ck_assert_uint_eq(removed, 2); /* e2 and its source */
    ck_assert(!path_exists(e2));
    ck_assert(!path_exists(s2));
    ck_assert(path_exists(e1) && path_exists(e3) && path_exists(s1));
    tk_assert_status(tk_cache_get_stats(cache, &st), TK_OK);
    ck_assert_uint_eq(st.source_bytes, z1);

    /* An entry gone some other way: its source goes at the next prune, but
     * not while it was used within the grace time (a store running
     * meanwhile may have just named it). */
    char *t4 = source_text("fourth", 9000);
    char h4[33], e4[PATH_MAX], s4[PATH_MAX];
    put_source(cache, "e4", t4, h4);
    entry_file(root, h4, e4, sizeof e4);
    kept_path(root, t4, s4, sizeof s4);
    ck_assert_int_eq(unlink(e4), 0);
    tk_assert_status(tk_cache_prune(cache, 0, &removed), TK_OK);
    ck_assert(path_exists(s4));
    age(s4, TK__SOURCE_GRACE_SECONDS + 5);
    tk_assert_status(tk_cache_prune(cache, 0, &removed), TK_OK);
    ck_assert_uint_eq(removed, 1);
    ck_assert(!path_exists(s4));
    ck_assert(path_exists(s1)); /* still named by e1 and e3 */

    /* A store that names a kept source again makes it recent. */
    age(s1, 5000);
    char h5[33];
    put_source(cache, "e5", t1, h5);
    struct stat sst;
    ck_assert_int_eq(stat(s1, &sst), 0);
    ck_assert_int_ge(sst.st_mtime, time(NULL) - 10);

    free(t1);
    free(t2);
    free(t4);
    tk_cache_close(cache);
    tk_test_rmtree(root);
    free(root);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cache_sources");
    TCase *tc = tcase_create("sources");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, source_of_a_key_is_shown);
    tcase_add_test(tc, sources_travel_with_bundles);
    tcase_add_test(tc, kept_sources_count_toward_the_limit_and_go_unnamed);
    suite_add_tcase(s, tc);
    return tk_test_main(s);
}
