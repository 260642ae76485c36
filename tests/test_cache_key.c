/* Cache keys, size parsing, the entry format and a fuzz-style robustness
 * check of the entry parser (no GPU). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "test_cache_common.h"

/* The inputs the engine puts in a key, in its order. */
typedef struct key_inputs {
    const char *backend, *compiler, *arch, *entry, *source, *opt1, *opt2;
    uint64_t lib_version;
    const char *code; /* bytes field */
} key_inputs;

static void build(tk__key *key, const key_inputs *in)
{
    tk__key_init(key);
    tk__key_add_u64(key, "lib_version", in->lib_version);
    tk__key_add_str(key, "backend", in->backend);
    tk__key_add_str(key, "compiler", in->compiler);
    tk__key_add_str(key, "arch", in->arch);
    tk__key_add_str(key, "entry", in->entry);
    tk__key_add_bytes(key, "source", in->source, strlen(in->source));
    tk__key_add_str(key, "opt", in->opt1);
    tk__key_add_str(key, "opt", in->opt2);
    tk__key_add_bytes(key, "code", in->code, in->code ? strlen(in->code) : 0);
    tk_assert_status(tk__key_finish(key), TK_OK);
}

static const key_inputs base = {"cuda", "nvrtc 13.0", "sm_90", "gemm", "__global__ void gemm(){}",
                                "-DTILE=64", "-O3", 100, "xyz"};

START_TEST(key_same_inputs_same_fingerprint)
{
    tk__key a, b;
    build(&a, &base);
    build(&b, &base);
    ck_assert_uint_eq(a.len, b.len);
    ck_assert_mem_eq(a.bytes, b.bytes, a.len);
    ck_assert_str_eq(a.hex, b.hex);
    ck_assert_uint_eq(strlen(a.hex), 32);
    ck_assert_uint_eq(strspn(a.hex, "0123456789abcdef"), 32);
    /* The fingerprint is XXH3-128 of the material. */
    XXH128_hash_t h = XXH3_128bits(a.bytes, a.len);
    ck_assert_uint_eq(h.high64, a.fp_hi);
    ck_assert_uint_eq(h.low64, a.fp_lo);
    tk__key_free(&a);
    tk__key_free(&b);
}
END_TEST

START_TEST(key_changes_with_each_input)
{
    key_inputs v[16];
    int n = 0;
    v[n++] = base;
    for (int i = 0; i < 13; i++)
        v[n + i] = base;
    v[n++].backend = "hip";
    v[n++].compiler = "nvrtc 13.1";
    v[n++].arch = "sm_89";
    v[n++].entry = "gemm2";
    v[n++].source = "__global__ void gemm(){ }";
    v[n++].opt1 = "-DTILE=32";
    v[n++].opt2 = NULL;          /* NULL differs from any string */
    v[n++].opt2 = "";            /* and "" from NULL */
    v[n++].lib_version = 101;
    v[n++].code = NULL;          /* empty bytes */
    /* Content moved across a field boundary must change the key. */
    v[n].opt1 = "-DTILE=64-O3";
    v[n++].opt2 = "";
    v[n].opt1 = "-DTILE=6";
    v[n++].opt2 = "4-O3";
    v[n].opt1 = "-O3"; /* order of options is significant: the engine sorts */
    v[n++].opt2 = "-DTILE=64";

    tk__key keys[16];
    for (int i = 0; i < n; i++)
        build(&keys[i], &v[i]);
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            ck_assert_msg(strcmp(keys[i].hex, keys[j].hex) != 0, "variants %d and %d collide", i,
                          j);
    /* ...and only then: rebuilding any variant gives its own key again. */
    for (int i = 0; i < n; i++) {
        tk__key again;
        build(&again, &v[i]);
        ck_assert_str_eq(again.hex, keys[i].hex);
        tk__key_free(&again);
    }
    for (int i = 0; i < n; i++)
        tk__key_free(&keys[i]);
}
END_TEST

START_TEST(key_tag_and_kind_matter)
{
    tk__key a, b, c;
    tk__key_init(&a);
    tk__key_add_str(&a, "arch", "x");
    tk__key_init(&b);
    tk__key_add_str(&b, "entry", "x");
    tk__key_init(&c);
    tk__key_add_bytes(&c, "arch", "x", 1);
    tk_assert_status(tk__key_finish(&a), TK_OK);
    tk_assert_status(tk__key_finish(&b), TK_OK);
    tk_assert_status(tk__key_finish(&c), TK_OK);
    ck_assert_str_ne(a.hex, b.hex);
    ck_assert_str_ne(a.hex, c.hex);
    tk__key_free(&a);
    tk__key_free(&b);
    tk__key_free(&c);
}
END_TEST

START_TEST(key_includes_format_version)
{
    tk__key a;
    tk__key_init(&a);
    tk_assert_status(tk__key_finish(&a), TK_OK);
    /* An empty builder still holds the format version field. */
    ck_assert_uint_gt(a.len, 0);
    ck_assert_ptr_nonnull(memmem(a.bytes, a.len, "tk.cache_format", 15));
    tk__key_free(&a);
}
END_TEST

START_TEST(key_failed_builder_refused)
{
    tk__key a;
    tk__key_init(&a);
    a.failed = 1;
    tk__key_add_str(&a, "x", "y");
    tk_assert_status(tk__key_finish(&a), TK_OUT_OF_MEMORY);
    tk__key_free(&a);
    tk_assert_status(tk__key_finish(NULL), TK_INVALID_ARGUMENT);
}
END_TEST

START_TEST(key_growth_any_sizes)
{
    /* Fields of every size across the buffer's growth points: a value must
     * never be copied past the reserved space (ASan build catches it). */
    static char big[70000];
    for (size_t i = 0; i < sizeof(big); i++)
        big[i] = (char)('a' + i % 26);
    for (size_t first = 0; first < 300; first += 7) {
        tk__key key;
        tk__key_init(&key);
        size_t start = key.len;
        tk__key_add_bytes(&key, "pad", big, first);
        tk__key_add_bytes(&key, "source", big, sizeof(big));
        tk_assert_status(tk__key_finish(&key), TK_OK);
        /* The long value enters as kind, length and XXH3-128; the value
         * itself is kept once in the key's blobs. */
        size_t pad = first <= TK__KEY_INLINE_MAX ? 13 + 3 + first : 13 + 3 + 25;
        ck_assert_uint_eq(key.len, start + pad + (13 + 6 + 25));
        XXH128_hash_t h = XXH3_128bits(big, sizeof(big));
        const tk__key_blob *b = &key.blobs[key.n_blobs - 1];
        ck_assert_uint_eq(b->len, sizeof(big));
        ck_assert_uint_eq(b->hi, h.high64);
        ck_assert_uint_eq(b->lo, h.low64);
        ck_assert_mem_eq(b->data, big, sizeof(big));
        ck_assert_uint_eq(key.bytes[key.len - 25], 'B');
        tk__key_free(&key);
    }
}
END_TEST

START_TEST(parse_size_cases)
{
    static const struct {
        const char *text;
        uint64_t value;
    } good[] = {
        {"0", 0},
        {"123", 123},
        {"123B", 123},
        {"500K", 500ull << 10},
        {"500k", 500ull << 10},
        {"500KB", 500ull << 10},
        {"500KiB", 500ull << 10},
        {"500M", 500ull << 20},
        {"2G", 2ull << 30},
        {"2gib", 2ull << 30},
        {"1T", 1ull << 40},
        {"18446744073709551615", UINT64_MAX},
        {"16777215T", 16777215ull << 40},
    };
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        uint64_t v = 7;
        tk_assert_status(tk_parse_size(good[i].text, &v), TK_OK);
        ck_assert_msg(v == good[i].value, "%s: got %llu", good[i].text, (unsigned long long)v);
    }
    static const char *const bad[] = {"",    "-1",    "+1",  " 1",  "1 ", "G",   "1X",
                                      "1GG", "1.5G",  "1iB", "0x10", "1KiBx",
                                      "18446744073709551616", "16777216T", "99999999999999999999G"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint64_t v = 7;
        tk_assert_status(tk_parse_size(bad[i], &v), TK_INVALID_ARGUMENT);
        ck_assert_msg(v == 7, "%s: out written on failure", bad[i]);
    }
    uint64_t v;
    tk_assert_status(tk_parse_size(NULL, &v), TK_INVALID_ARGUMENT);
    tk_assert_status(tk_parse_size("1", NULL), TK_INVALID_ARGUMENT);
}
END_TEST

static uint8_t *encode_sample(const tk__key *key, const tk__entry_meta *meta, size_t payload_size,
                              size_t *len)
{
    unsigned char *payload = malloc(payload_size + 1);
    fill_payload(payload, payload_size, "sample");
    uint8_t *bytes = NULL;
    tk_assert_status(tk__entry_encode(key->bytes, key->len, key->fp_hi, key->fp_lo, meta, payload,
                                      payload_size, &bytes, len),
                     TK_OK);
    free(payload);
    return bytes;
}

START_TEST(entry_encode_parse_roundtrip)
{
    tk__key key;
    make_key(&key, "k");
    tk__entry_meta meta = make_meta("kern");
    meta.options = NULL;
    meta.created = 1700000000;
    size_t len;
    uint8_t *bytes = encode_sample(&key, &meta, 1000, &len);
    tk__entry_view v;
    const char *why = NULL;
    tk_assert_status(tk__entry_parse(bytes, len, 1, &v, &why), TK_OK);
    /* Five present strings as tagged fields, options (NULL) absent. */
    ck_assert_uint_eq(len, TK__ENTRY_HEADER_SIZE + 36 + 12 + 5 * 5 + strlen("kern") +
                               strlen("user:1234") + strlen("stub") + strlen("sm_90") +
                               strlen("stubcc 1.0") + key.len + v.stored_size +
                               TK__ENTRY_TRAILER_SIZE);
    unsigned char *code = malloc(1000);
    tk_assert_status(tk__entry_payload(&v, code), TK_OK);
    unsigned char want[1001];
    fill_payload(want, 1000, "sample");
    ck_assert_mem_eq(code, want, 1000);
    free(code);
    ck_assert_uint_eq(v.version, TK__CACHE_FORMAT);
    ck_assert_uint_eq(v.fp_hi, key.fp_hi);
    ck_assert_uint_eq(v.fp_lo, key.fp_lo);
    ck_assert_int_eq(v.created, 1700000000);
    ck_assert_uint_eq(v.key_size, key.len);
    ck_assert_mem_eq(v.key, key.bytes, key.len);
    ck_assert_uint_eq(v.payload_size, 1000);
    ck_assert_uint_eq(v.strings[0].len, 4);
    ck_assert_mem_eq(v.strings[0].ptr, "kern", 4);
    ck_assert_ptr_null(v.strings[5].ptr); /* NULL stays NULL */
    ck_assert_mem_eq(&v.resources, &meta.resources, sizeof(meta.resources));
    /* A header-only parse needs no more than header + metadata. */
    tk__entry_view h;
    tk_assert_status(tk__entry_parse_header(bytes, len, &h, &why), TK_OK);
    tk_assert_status(tk__entry_parse_meta(bytes, &h, &why), TK_OK);
    ck_assert_uint_eq(h.payload_size, 1000);
    free(bytes);
    tk__key_free(&key);
}
END_TEST

static uint64_t xorshift(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Random and mutated bytes never crash the parser or the cache, and nothing
 * but the exact stored payload is ever returned. */
START_TEST(entry_fuzz_mutations)
{
    tk__key key;
    make_key(&key, "fuzz");
    tk__entry_meta meta = make_meta("fuzz");
    size_t len;
    uint8_t *good = encode_sample(&key, &meta, 300, &len);
    uint8_t *buf = malloc(len + 64);
    uint64_t rng = 0x9e3779b97f4a7c15ull;
#define NEXT() xorshift(&rng)
    int accepted = 0;
    for (int iter = 0; iter < 4000; iter++) {
        size_t n = len;
        memcpy(buf, good, len);
        int mode = (int)(NEXT() % 4);
        if (mode == 0) { /* flip 1-4 bits */
            int flips = 1 + (int)(NEXT() % 4);
            for (int f = 0; f < flips; f++) {
                size_t at = (size_t)(NEXT() % len);
                buf[at] ^= (uint8_t)(1u << (NEXT() % 8));
            }
        } else if (mode == 1) { /* truncate or extend */
            n = (size_t)(NEXT() % (len + 64));
            for (size_t i = len; i < n; i++)
                buf[i] = (uint8_t)NEXT();
        } else if (mode == 2) { /* random bytes after a valid magic */
            n = 8 + (size_t)(NEXT() % (len + 56));
            for (size_t i = 8; i < n; i++)
                buf[i] = (uint8_t)NEXT();
        } else { /* overwrite a length field with junk */
            size_t fields[] = {12, 16, 20, 24};
            size_t at = fields[NEXT() % 4];
            uint64_t junk = NEXT();
            memcpy(buf + at, &junk, 4);
        }
        tk__entry_view v;
        const char *why = NULL;
        tk_status st = tk__entry_parse(buf, n, 1, &v, &why);
        if (st == TK_OK) {
            accepted++;
            /* Only an unchanged file may parse. */
            ck_assert_uint_eq(n, len);
            ck_assert_mem_eq(buf, good, len);
        } else {
            ck_assert_ptr_nonnull(why);
        }
        tk__entry_view h;
        if (n >= TK__ENTRY_HEADER_SIZE && tk__entry_parse_header(buf, n, &h, &why) == TK_OK &&
            TK__ENTRY_HEADER_SIZE + (size_t)h.meta_size <= n)
            (void)tk__entry_parse_meta(buf, &h, &why);
    }
    /* The same through files: get, list and verify on a cache holding them. */
    char *root = tk_test_tmpdir("cache-fuzz");
    tk_cache *cache = open_cache(root, NULL);
    char path[PATH_MAX];
    entry_path_of(root, "fuzz", path, sizeof(path));
    put_named(cache, "fuzz", 300); /* creates the shard folder */
    for (int iter = 0; iter < 300; iter++) {
        memcpy(buf, good, len);
        size_t n = len;
        if (iter % 3 == 0)
            n = (size_t)(NEXT() % len);
        else
        {
            size_t at = (size_t)(NEXT() % len);
            buf[at] ^= (uint8_t)(1u << (NEXT() % 8));
        }
        ck_assert_int_eq(tk_test_write_file(path, buf, n), 0);
        tk__entry e;
        tk_status st = tk__cache_get(cache, &key, &e);
        if (st == TK_OK) {
            ck_assert_uint_eq(e.payload_size, 300);
            tk__entry_free(&e);
        }
        uint64_t n_bad = 0;
        tk_assert_status(tk_cache_verify(cache, NULL, NULL, &n_bad), TK_OK);
        ck_assert_uint_le(n_bad, 1);
    }
#undef NEXT
    /* Only the few draws that left the file intact may be accepted. */
    ck_assert_int_lt(accepted, 40);
    tk_cache_close(cache);
    tk_test_rmtree(root);
    free(root);
    free(buf);
    free(good);
    tk__key_free(&key);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("cache_key");
    TCase *tc = tcase_create("key");
    tcase_add_test(tc, key_same_inputs_same_fingerprint);
    tcase_add_test(tc, key_changes_with_each_input);
    tcase_add_test(tc, key_tag_and_kind_matter);
    tcase_add_test(tc, key_includes_format_version);
    tcase_add_test(tc, key_failed_builder_refused);
    tcase_add_test(tc, key_growth_any_sizes);
    tcase_add_test(tc, parse_size_cases);
    tcase_add_test(tc, entry_encode_parse_roundtrip);
    tcase_add_test(tc, entry_fuzz_mutations);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tk_test_main(suite());
}
