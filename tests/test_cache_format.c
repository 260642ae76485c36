/*
 * The entry format (compressed code objects, compact keys, kept sources),
 * older formats on disk, and bundles a hostile writer made: a record length
 * that would ask for gigabytes, a count the file cannot hold, bytes after
 * the last declared record.
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <xxhash.h>
#include <zstd.h>

#include "test_cache_common.h"

static void put_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static int mkdir_p(const char *path)
{
    char buf[PATH_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        mkdir(buf, 0700);
        *p = '/';
    }
    return mkdir(buf, 0700) == 0 || errno == EEXIST ? 0 : -1;
}

static size_t file_size_of(const char *path)
{
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    return (size_t)st.st_size;
}

static void write_file(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(p, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
}

/* A code object that compresses like a real one (repeated instruction
 * patterns with varying operands). */
static void fill_code(unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)((i % 16 < 8) ? 0x4c + (i % 16) : (i / 64) & 0x1f);
}

/* A long source: its text must not be inside the entry, but kept once. */
static char *long_source(size_t n)
{
    char *s = malloc(n + 1);
    static const char line[] = "__global__ void k(float *x) { x[threadIdx.x] += 1.0f; }\n";
    for (size_t i = 0; i < n; i++)
        s[i] = line[i % (sizeof line - 1)];
    s[n] = 0;
    return s;
}

START_TEST(entry_is_compressed_and_without_source)
{
    char *root = tk_test_tmpdir("fmt3");
    test_log log = {0};
    tk_cache *cache = open_cache(root, &log);
    char *src = long_source(95000);
    tk__key key;
    tk__key_init(&key);
    tk__key_add_str(&key, "entry", "k");
    tk__key_add_bytes(&key, "source", src, strlen(src));
    tk__key_add_str(&key, "option", "-DTILE=64");
    tk_assert_status(tk__key_finish(&key), TK_OK);
    ck_assert_uint_lt(key.len, 300); /* the source went in as its hash */
    static unsigned char code[40000];
    fill_code(code, sizeof code);
    tk__entry_meta meta = make_meta("k");
    tk_assert_status(tk__cache_put(cache, &key, &meta, code, sizeof code), TK_OK);

    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%d/%.2s/%s.tkc", root, TK__CACHE_FORMAT, key.hex, key.hex + 2);
    size_t fsize = file_size_of(path);
    printf("  entry of a %zu-byte code object + %zu-byte source: %zu bytes\n", sizeof code,
           strlen(src), fsize);
    ck_assert_uint_lt(fsize, sizeof code / 2);
    size_t flen = 0;
    char *bytes = tk_test_read_file(path, &flen);
    ck_assert_ptr_null(memmem(bytes, flen, src, 200)); /* no source text inside */
    free(bytes);

    tk__entry e;
    tk_assert_status(tk__cache_get(cache, &key, &e), TK_OK);
    ck_assert_uint_eq(e.payload_size, sizeof code);
    ck_assert_mem_eq(e.payload, code, sizeof code);
    tk__entry_free(&e);

    /* The source is kept once, by content. */
    XXH128_hash_t h = XXH3_128bits(src, strlen(src));
    char hex[33], spath[PATH_MAX];
    tk__fp_hex(h.high64, h.low64, hex);
    snprintf(spath, sizeof spath, "%s/%d/src/%s.zst", root, TK__CACHE_FORMAT, hex);
    size_t zlen = 0;
    char *z = tk_test_read_file(spath, &zlen);
    ck_assert_ptr_nonnull(z);
    char *back = malloc(strlen(src) + 1);
    ck_assert_uint_eq(ZSTD_decompress(back, strlen(src) + 1, z, zlen), strlen(src));
    ck_assert_mem_eq(back, src, strlen(src));
    free(back);
    free(z);
    ck_assert_int_eq(log.warnings, 0);

    /* --clear takes the kept sources too. */
    uint64_t n = 0;
    tk_assert_status(tk_cache_clear(cache, &n), TK_OK);
    ck_assert_uint_eq(n, 1);
    ck_assert_int_ne(access(spath, F_OK), 0);
    tk__key_free(&key);
    free(src);
    tk_cache_close(cache);
    tk_test_rmtree(root);
    free(root);
}
END_TEST

/* Rewrites the trailer checksum after an edit, so only the content is wrong. */
static void reseal(uint8_t *b, size_t len)
{
    put_le(b + len - 8, XXH3_64bits(b, len - 8), 8);
}

START_TEST(payload_that_decodes_wrong_is_a_miss)
{
    char *root = tk_test_tmpdir("fmt3-bad");
    test_log log = {0};
    tk_cache *cache = open_cache(root, &log);
    tk__key key;
    make_key(&key, "zk");
    static unsigned char code[20000];
    fill_code(code, sizeof code);
    tk__entry_meta meta = make_meta("zk");
    uint8_t *b = NULL;
    size_t len = 0;
    tk_assert_status(tk__entry_encode(key.bytes, key.len, key.fp_hi, key.fp_lo, &meta, code,
                                      sizeof code, &b, &len),
                     TK_OK);
    tk__entry_view v;
    const char *why = NULL;
    tk_assert_status(tk__entry_parse(b, len, 1, &v, &why), TK_OK);
    ck_assert_uint_eq(v.codec, TK__CODEC_ZSTD);
    /* A byte in the middle of the compressed frame, checksum resealed. */
    size_t at = (size_t)(v.payload - b) + (size_t)v.stored_size / 2;
    b[at] ^= 0x5a;
    reseal(b, len);
    char path[PATH_MAX + 64], dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/%d/%.2s", root, TK__CACHE_FORMAT, key.hex);
    ck_assert_int_eq(mkdir_p(dir), 0);
    snprintf(path, sizeof path, "%s/%.30s.tkc", dir, key.hex + 2);
    write_file(path, b, len);
    free(b);
    tk__entry e;
    tk_assert_status(tk__cache_get(cache, &key, &e), TK_NOT_FOUND);
    ck_assert_int_eq(log.warnings, 1);
    ck_assert_int_ne(access(path, F_OK), 0); /* removed: it costs one recompile */
    tk__key_free(&key);
    tk_cache_close(cache);
    tk_test_rmtree(root);
    free(root);
}
END_TEST

/* A format-2 entry as the earlier code wrote it: the same 64-byte header
 * with version 2, 9 resources + 8 length-prefixed strings, the whole key,
 * the raw payload, the trailer. */
static uint8_t *format2_entry(const tk__key *key, const void *code, size_t n, size_t *out_len)
{
    const char *strs[8] = {"k", "user:1", "stub", "sm_90", "stubcc", "-O3", NULL, NULL};
    size_t meta = 36;
    for (int i = 0; i < 8; i++)
        meta += 4 + (strs[i] ? strlen(strs[i]) : 0);
    size_t len = 64 + meta + key->len + n + 8;
    uint8_t *b = calloc(1, len);
    memcpy(b, TK__ENTRY_MAGIC, 8);
    put_le(b + 8, 2, 4);
    put_le(b + 12, 64, 4);
    put_le(b + 16, meta, 4);
    put_le(b + 20, key->len, 4);
    put_le(b + 24, n, 8);
    put_le(b + 32, key->fp_hi, 8);
    put_le(b + 40, key->fp_lo, 8);
    put_le(b + 48, 1700000000, 8);
    uint8_t *p = b + 64 + 36;
    for (int i = 0; i < 8; i++) {
        size_t sl = strs[i] ? strlen(strs[i]) : 0;
        put_le(p, strs[i] ? sl : 0xffffffffu, 4);
        memcpy(p + 4, strs[i] ? strs[i] : "", sl);
        p += 4 + sl;
    }
    put_le(b + 56, XXH3_64bits_withSeed(b + 64, meta, XXH3_64bits(b, 56)), 8);
    memcpy(p, key->bytes, key->len);
    memcpy(p + key->len, code, n);
    reseal(b, len);
    *out_len = len;
    return b;
}

START_TEST(format2_entries_never_read_and_pruned)
{
    char *root = tk_test_tmpdir("fmt2");
    test_log log = {0};
    tk_cache *cache = open_cache(root, &log);
    tk__key key;
    make_key(&key, "old");
    unsigned char code[3000];
    fill_code(code, sizeof code);
    size_t len = 0;
    uint8_t *old = format2_entry(&key, code, sizeof code, &len);

    /* In its own folder <root>/2: never looked at by a lookup. */
    char dir[PATH_MAX], path[PATH_MAX + 64];
    snprintf(dir, sizeof dir, "%s/2/%.2s", root, key.hex);
    ck_assert_int_eq(mkdir_p(dir), 0);
    snprintf(path, sizeof path, "%s/%.30s.tkc", dir, key.hex + 2);
    write_file(path, old, len);
    /* And the same bytes where a format-3 entry of that key would be. */
    char dir3[PATH_MAX], path3[PATH_MAX + 64];
    snprintf(dir3, sizeof dir3, "%s/%d/%.2s", root, TK__CACHE_FORMAT, key.hex);
    ck_assert_int_eq(mkdir_p(dir3), 0);
    snprintf(path3, sizeof path3, "%s/%.30s.tkc", dir3, key.hex + 2);
    write_file(path3, old, len);
    free(old);

    tk__entry e;
    tk_assert_status(tk__cache_get(cache, &key, &e), TK_NOT_FOUND);
    ck_assert_int_eq(log.warnings, 1);
    ck_assert_ptr_nonnull(strstr(log.last, "wrong format version"));
    ck_assert_int_ne(access(path3, F_OK), 0); /* removed from this format's folder */
    ck_assert_int_eq(access(path, F_OK), 0);  /* the old folder is only the tools' */

    uint64_t n = 0;
    tk_assert_status(tk_cache_prune(cache, 0, &n), TK_OK);
    ck_assert_uint_eq(n, 1);
    ck_assert_int_ne(access(path, F_OK), 0);
    char top[PATH_MAX];
    snprintf(top, sizeof top, "%s/2", root);
    ck_assert_int_ne(access(top, F_OK), 0);
    /* A foreign file in an old format folder is not ours to remove. */
    ck_assert_int_eq(mkdir_p(top), 0);
    char other[PATH_MAX + 16];
    snprintf(other, sizeof other, "%s/notes.txt", top);
    write_file(other, "x", 1);
    tk_assert_status(tk_cache_prune(cache, 0, &n), TK_OK);
    ck_assert_int_eq(access(other, F_OK), 0);
    tk__key_free(&key);
    tk_cache_close(cache);
    tk_test_rmtree(root);
    free(root);
}
END_TEST

/* ----------------------------------------------------------- bundles */

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

static void bundle_head(uint8_t head[24], uint64_t count)
{
    memset(head, 0, 24);
    memcpy(head, TK__BUNDLE_MAGIC, 8);
    put_le(head + 8, TK__CACHE_FORMAT, 4);
    put_le(head + 16, count, 8);
}

START_TEST(bundle_sparse_record_is_not_allocated)
{
#if defined(__SANITIZE_ADDRESS__)
    /* The address-space limit this case runs under leaves ASan no room for
     * its shadow memory; the normal build runs it. */
    fprintf(stderr, "skipped under AddressSanitizer: needs an address-space limit\n");
    return;
#endif
    /* 4 KiB of data in a file of 2 GiB apparent size, whose one record says
     * it is 2^31 - 1 bytes long: rejected from its header, no allocation.
     * Run under a 1 GiB address-space limit, so an allocation of the record
     * fails the import. */
    char *root = tk_test_tmpdir("bdl-sparse");
    char bpath[PATH_MAX];
    snprintf(bpath, sizeof bpath, "%s/sparse.tkb", root);
    uint8_t buf[4096];
    memset(buf, 0, sizeof buf);
    bundle_head(buf, 1);
    put_le(buf + 24, ((uint64_t)1 << 31) - 1, 8);
    int fd = open(bpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, buf, sizeof buf), (ssize_t)sizeof buf);
    ck_assert_int_eq(ftruncate(fd, ((off_t)1 << 31) + 64), 0);
    close(fd);
    char croot[PATH_MAX];
    snprintf(croot, sizeof croot, "%s/c", root);
    fflush(stdout);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        struct rlimit rl = {(rlim_t)1 << 30, (rlim_t)1 << 30};
        if (setrlimit(RLIMIT_AS, &rl) != 0)
            _exit(10);
        tk_cache *cache = open_cache(croot, NULL);
        bad_log bl = {0};
        uint64_t ok = 9, rej = 9;
        tk_status st = tk_cache_import(cache, bpath, bad_cb, &bl, &ok, &rej);
        if (st != TK_OK) {
            printf("  import: %s: %s\n", tk_status_str(st), tk_cache_last_error(cache));
            _exit(11);
        }
        if (ok != 0 || rej != 1 || bl.n < 1)
            _exit(12);
        tk_cache_close(cache);
        _exit(0);
    }
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d",
                  WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status));
    tk_test_rmtree(root);
    free(root);
}
END_TEST

START_TEST(bundle_count_beyond_its_size_is_refused_at_once)
{
    /* 100,000 declared records of length 0: each would be one rejection
     * message; the file cannot hold that many entries at all. */
    char *root = tk_test_tmpdir("bdl-count");
    char bpath[PATH_MAX];
    snprintf(bpath, sizeof bpath, "%s/many.tkb", root);
    size_t n = 100000, len = 24 + 8 * n;
    uint8_t *b = calloc(1, len);
    bundle_head(b, n);
    write_file(bpath, b, len);
    free(b);
    char croot[PATH_MAX];
    snprintf(croot, sizeof croot, "%s/c", root);
    tk_cache *cache = open_cache(croot, NULL);
    bad_log bl = {0};
    uint64_t ok = 0, rej = 0;
    tk_assert_status(tk_cache_import(cache, bpath, bad_cb, &bl, &ok, &rej), TK_CORRUPT);
    ck_assert_int_eq(bl.n, 1);
    ck_assert_ptr_nonnull(strstr(tk_cache_last_error(cache), "declares 100000 records"));
    tk_cache_close(cache);
    tk_test_rmtree(root);
    free(root);
}
END_TEST

/* Exports one good entry and returns the bundle's bytes. */
static uint8_t *one_entry_bundle(const char *root, size_t *len)
{
    char croot[PATH_MAX], bpath[PATH_MAX];
    snprintf(croot, sizeof croot, "%s/src-cache", root);
    snprintf(bpath, sizeof bpath, "%s/one.tkb", root);
    tk_cache *cache = open_cache(croot, NULL);
    put_named(cache, "one", 2000);
    uint64_t n = 0;
    tk_assert_status(tk_cache_export(cache, bpath, NULL, NULL, &n), TK_OK);
    ck_assert_uint_eq(n, 1);
    tk_cache_close(cache);
    return (uint8_t *)tk_test_read_file(bpath, len);
}

START_TEST(bundle_trailing_bytes_are_reported)
{
    char *root = tk_test_tmpdir("bdl-trail");
    size_t len = 0;
    uint8_t *b = one_entry_bundle(root, &len);
    /* The same record twice, the count left at one: an undeclared record. */
    size_t rec = len - 24;
    uint8_t *two = malloc(len + rec);
    memcpy(two, b, len);
    memcpy(two + len, b + 24, rec);
    char bpath[PATH_MAX], croot[PATH_MAX];
    snprintf(bpath, sizeof bpath, "%s/two.tkb", root);
    write_file(bpath, two, len + rec);
    snprintf(croot, sizeof croot, "%s/dst", root);
    tk_cache *cache = open_cache(croot, NULL);
    bad_log bl = {0};
    uint64_t ok = 0, rej = 0;
    tk_assert_status(tk_cache_import(cache, bpath, bad_cb, &bl, &ok, &rej), TK_OK);
    ck_assert_uint_eq(ok, 1);
    ck_assert_uint_eq(rej, 0);
    ck_assert_int_eq(bl.n, 1);
    ck_assert_ptr_nonnull(strstr(bl.last, "after the 1 declared records"));
    /* A clean bundle says nothing. */
    snprintf(bpath, sizeof bpath, "%s/one.tkb", root);
    bl.n = 0;
    tk_assert_status(tk_cache_import(cache, bpath, bad_cb, &bl, &ok, &rej), TK_OK);
    ck_assert_int_eq(bl.n, 0);
    tk_cache_close(cache);
    free(two);
    free(b);
    tk_test_rmtree(root);
    free(root);
}
END_TEST

START_TEST(bundle_record_without_entry_magic_is_skipped_unread)
{
    /* A record whose bytes are no entry: rejected by its header, the next
     * record still imported. */
    char *root = tk_test_tmpdir("bdl-magic");
    size_t len = 0;
    uint8_t *b = one_entry_bundle(root, &len);
    size_t junk = 5000;
    size_t out_len = 24 + 8 + junk + (len - 24);
    uint8_t *o = calloc(1, out_len);
    bundle_head(o, 2);
    put_le(o + 24, junk, 8);
    memset(o + 32, 'J', junk);
    memcpy(o + 32 + junk, b + 24, len - 24);
    char bpath[PATH_MAX], croot[PATH_MAX];
    snprintf(bpath, sizeof bpath, "%s/junk.tkb", root);
    write_file(bpath, o, out_len);
    snprintf(croot, sizeof croot, "%s/dst", root);
    tk_cache *cache = open_cache(croot, NULL);
    bad_log bl = {0};
    uint64_t ok = 0, rej = 0;
    tk_assert_status(tk_cache_import(cache, bpath, bad_cb, &bl, &ok, &rej), TK_OK);
    ck_assert_uint_eq(ok, 1);
    ck_assert_uint_eq(rej, 1);
    ck_assert_ptr_nonnull(strstr(bl.last, "bad magic"));
    ck_assert(get_named(cache, "one", 2000));
    tk_cache_close(cache);
    free(o);
    free(b);
    tk_test_rmtree(root);
    free(root);
}
END_TEST

/* The library's own import refuses what is not a regular file, opened
 * without blocking: a FIFO with no writer must not hang a program that
 * calls tk_cache_import, nor /dev/zero feed it forever. */
START_TEST(bundle_import_refuses_special_files)
{
    char *root = tk_test_tmpdir("bdl-fifo");
    char fifo[PATH_MAX], croot[PATH_MAX];
    snprintf(fifo, sizeof fifo, "%s/fifo", root);
    snprintf(croot, sizeof croot, "%s/c", root);
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    const char *const paths[] = {fifo, "/dev/zero"};
    for (size_t i = 0; i < 2; i++) {
        fflush(stdout);
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
            alarm(10); /* a hang ends the child with SIGALRM */
            tk_cache *cache = open_cache(croot, NULL);
            uint64_t ok = 9, rej = 9;
            tk_status st = tk_cache_import(cache, paths[i], NULL, NULL, &ok, &rej);
            int good = st == TK_IO_ERROR && strstr(tk_cache_last_error(cache), "not a regular file");
            if (!good)
                printf("  %s: %s: %s\n", paths[i], tk_status_str(st), tk_cache_last_error(cache));
            tk_cache_close(cache);
            _exit(good ? 0 : 1);
        }
        int status = 0;
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s: child %s %d", paths[i],
                      WIFEXITED(status) ? "exit" : "signal",
                      WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    }
    tk_test_rmtree(root);
    free(root);
}
END_TEST

static double now_s_test(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A record shorter than any record can be (a length of zero, read from a
 * hole of a sparse file) ends the walk as corrupt: the rest of the file has
 * no framing to trust, and walking a million empty records of an 8 GiB
 * file that holds 4 KiB took 21 s. */
START_TEST(bundle_short_record_ends_the_walk)
{
    char *root = tk_test_tmpdir("bdl-short");
    char bpath[PATH_MAX], croot[PATH_MAX];
    snprintf(bpath, sizeof bpath, "%s/sparse.tkb", root);
    snprintf(croot, sizeof croot, "%s/c", root);
    uint8_t buf[4096];
    memset(buf, 0, sizeof buf);
    const uint64_t count = 1000000;
    bundle_head(buf, count);
    int fd = open(bpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, buf, sizeof buf), (ssize_t)sizeof buf);
    ck_assert_int_eq(ftruncate(fd, (off_t)8 << 30), 0);
    close(fd);
    tk_cache *cache = open_cache(croot, NULL);
    bad_log bl = {0};
    uint64_t ok = 9, rej = 9;
    double t0 = now_s_test();
    tk_assert_status(tk_cache_import(cache, bpath, bad_cb, &bl, &ok, &rej), TK_CORRUPT);
    double took = now_s_test() - t0;
    ck_assert_int_eq(bl.n, 1);
    ck_assert_msg(strstr(bl.last, "#0: ") && strstr(bl.last, "shorter than"), "%s", bl.last);
    ck_assert_msg(strstr(tk_cache_last_error(cache), "shorter than"), "%s",
                  tk_cache_last_error(cache));
    printf("FIGURE bundle-short-record: 8 GiB sparse bundle of %llu empty records: refused at its "
           "first record in %.3f s\n",
           (unsigned long long)count, took);
    ck_assert_msg(took < 2.0, "took %.1f s", took);
    tk_cache_close(cache);
    tk_test_rmtree(root);
    free(root);
}
END_TEST

START_TEST(cli_caps_repeated_rejections)
{
    /* 50 records that are no entries, then stray bytes: 20 lines, one
     * "... and 30 more", one warning about the trailing bytes. */
    char *root = tk_test_tmpdir("bdl-cli");
    char bpath[PATH_MAX], croot[PATH_MAX];
    snprintf(bpath, sizeof bpath, "%s/junk.tkb", root);
    snprintf(croot, sizeof croot, "%s/c", root);
    size_t n = 50, rec = 8 + 100, len = 24 + n * rec + 7;
    uint8_t *b = calloc(1, len);
    bundle_head(b, n);
    for (size_t i = 0; i < n; i++) {
        put_le(b + 24 + i * rec, 100, 8);
        memset(b + 24 + i * rec + 8, 'J', 100);
    }
    memcpy(b + 24 + n * rec, "garbage", 7);
    write_file(bpath, b, len);
    free(b);
    char *argv[] = {(char *)tk_test_cli(), "--import", bpath, "--cache-dir", croot, NULL};
    char *out = NULL, *err = NULL;
    int rc = tk_test_run(argv, &out, &err);
    ck_assert_int_eq(rc, 1);
    ck_assert_ptr_nonnull(strstr(out, "50 rejected"));
    int lines = 0;
    for (const char *p = err; (p = strstr(p, "rejected: ")) != NULL; p++)
        lines++;
    ck_assert_int_eq(lines, 21);
    ck_assert_ptr_nonnull(strstr(err, "rejected: ... and 30 more"));
    ck_assert_ptr_nonnull(strstr(err, "warning: "));
    ck_assert_ptr_nonnull(strstr(err, "7 bytes after the 50 declared records"));
    free(out);
    free(err);
    tk_test_rmtree(root);
    free(root);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cache_format");
    TCase *tc = tcase_create("format");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, entry_is_compressed_and_without_source);
    tcase_add_test(tc, payload_that_decodes_wrong_is_a_miss);
    tcase_add_test(tc, format2_entries_never_read_and_pruned);
    tcase_add_test(tc, bundle_sparse_record_is_not_allocated);
    tcase_add_test(tc, bundle_count_beyond_its_size_is_refused_at_once);
    tcase_add_test(tc, bundle_trailing_bytes_are_reported);
    tcase_add_test(tc, bundle_record_without_entry_magic_is_skipped_unread);
    tcase_add_test(tc, cli_caps_repeated_rejections);
    tcase_add_test(tc, bundle_import_refuses_special_files);
    tcase_add_test(tc, bundle_short_record_ends_the_walk);
    suite_add_tcase(s, tc);
    return tk_test_main(s);
}
