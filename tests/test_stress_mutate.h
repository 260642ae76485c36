/* Corrupted variants of a valid cache entry, planted at an entry's path
 * (shared by the stress suites; header only: tests/ globs test_*.c). */
#ifndef TK_TEST_STRESS_MUTATE_H
#define TK_TEST_STRESS_MUTATE_H

#include "test_stress_common.h"

enum mutation {
    M_FLIP1,            /* one bit flipped anywhere */
    M_FLIPN,            /* 2-8 bits flipped anywhere */
    M_OVERWRITE4,       /* 4 bytes overwritten (the case) */
    M_TRUNC_BOUNDARY,   /* cut at a structural boundary, +-1 */
    M_TRUNC_RANDOM,     /* cut anywhere */
    M_ZERO_LEN,         /* a length field zeroed */
    M_INFLATE_LEN,      /* a length field inflated */
    M_LEN_REFIXED,      /* a length field changed, checksums recomputed */
    M_VERSION,          /* another format version */
    M_VERSION_REFIXED,  /* the same, checksums recomputed */
    M_MOVED,            /* a valid entry of another key at this key's path */
    M_EMPTY,            /* an empty file */
    M_DIR,              /* a folder where the entry should be */
    M_SYMLINK_GOOD,     /* a link to a valid copy outside the cache */
    M_SYMLINK_DANGLING, /* a link to nothing */
    M_FIFO,             /* a named pipe (would block a plain open) */
    M_TRAILING,         /* bytes appended */
    M_META_STR_REFIXED, /* a metadata string length changed, checksums recomputed */
    M_KEY_BYTE_REFIXED, /* key material changed, checksums recomputed */
    M_FP_REFIXED,       /* fingerprint in the header changed, checksums recomputed */
    M_NUL_META_REFIXED, /* a NUL inside a metadata string, checksums recomputed */
    M_HEADER_SIZE,      /* header size field changed */
    M_MAGIC,            /* magic changed */
    M_SPARSE_HUGE,      /* a 3 GiB sparse file starting with a valid header */
    M_COUNT
};

static const char *const mutation_names[M_COUNT] = {
    "flip1",       "flipN",       "overwrite4",      "trunc-boundary",  "trunc-random",
    "zero-len",    "inflate-len", "len-refixed",     "version",         "version-refixed",
    "moved",       "empty",       "directory",       "symlink-good",    "symlink-dangling",
    "fifo",        "trailing",    "metastr-refixed", "keybyte-refixed", "fp-refixed",
    "nul-refixed", "header-size", "magic",           "sparse-3GiB"};

/* Resources (9 x i32), payload codec (u32), code object size (u64). */
#define META_FIXED_SIZE (4 * TK__ENTRY_RESOURCE_FIELDS + 4 + 8)

/* Offsets where the entry's structure changes. */
static inline size_t boundaries(const uint8_t *b, size_t len, size_t *out, size_t max)
{
    size_t n = 0;
    static const size_t fixed[] = {0, 4, 8, 12, 16, 20, 24, 32, 40, 48, 56, 64, 64 + 36, 64 + 40};
    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]) && n < max; i++)
        out[n++] = fixed[i];
    tk__entry_view v;
    const char *why;
    if (tk__entry_parse(b, len, 0, &v, &why) == TK_OK) {
        /* Tagged metadata fields after resources, codec and code size. */
        size_t p = TK__ENTRY_HEADER_SIZE + META_FIXED_SIZE;
        size_t end = TK__ENTRY_HEADER_SIZE + v.meta_size;
        if (n < max)
            out[n++] = p;
        while (p + 5 <= end && n + 2 < max) {
            uint32_t sl = (uint32_t)get_le_n(b + p + 1, 4);
            out[n++] = p + 5;
            p += 5 + sl;
            out[n++] = p;
        }
        size_t key = TK__ENTRY_HEADER_SIZE + v.meta_size;
        if (n + 5 < max) {
            out[n++] = key;
            out[n++] = key + v.key_size / 2;
            out[n++] = key + v.key_size;
            out[n++] = key + v.key_size + (size_t)v.stored_size / 2;
            out[n++] = len - TK__ENTRY_TRAILER_SIZE;
        }
    }
    if (n < max)
        out[n++] = len - 1;
    return n;
}

/* Plants variant kind of good (an entry for this path) at path. other is a
 * valid entry of another key; outside a folder outside the cache. Returns 1
 * when the variant is a folder (no lookup can remove it). */
static inline int plant_variant(const char *path, int kind, const uint8_t *good, size_t len,
                                const uint8_t *other, size_t other_len, const char *outside, rng *r)
{
    mkdir_for(path);
    uint8_t *b = malloc(len + 64);
    ck_assert_ptr_nonnull(b);
    memcpy(b, good, len);
    size_t n = len;
    static const int len_fields[3][2] = {{16, 4}, {20, 4}, {24, 8}};
    const int *lf = len_fields[rng_below(r, 3)];
    switch (kind) {
    case M_FLIP1:
        b[rng_below(r, n)] ^= (uint8_t)(1u << rng_below(r, 8));
        break;
    case M_FLIPN: {
        int k = 2 + (int)rng_below(r, 7);
        for (int i = 0; i < k; i++)
            b[rng_below(r, n)] ^= (uint8_t)(1u << rng_below(r, 8));
        if (memcmp(b, good, n) == 0) /* flips that cancelled out */
            b[0] ^= 1;
        break;
    }
    case M_OVERWRITE4: {
        size_t at = rng_below(r, n - 4);
        uint32_t x = (uint32_t)rng_next(r);
        if (memcmp(b + at, &x, 4) == 0)
            x = ~x;
        memcpy(b + at, &x, 4);
        break;
    }
    case M_TRUNC_BOUNDARY: {
        size_t bs[64];
        size_t nb = boundaries(good, len, bs, 64);
        size_t at = bs[rng_below(r, nb)];
        int d = (int)rng_below(r, 3) - 1;
        if (d < 0 && at == 0)
            d = 0;
        at = at + (size_t)(long)d;
        n = at >= len ? len - 1 : at;
        break;
    }
    case M_TRUNC_RANDOM:
        n = (size_t)rng_below(r, len);
        break;
    case M_ZERO_LEN:
        put_le_n(b + lf[0], 0, lf[1]);
        if (memcmp(b, good, n) == 0)
            put_le_n(b + lf[0], 1, lf[1]);
        break;
    case M_INFLATE_LEN: {
        static const uint64_t big[] = {1, 4096, 0x7fffffffu, 0xffffffffu, (uint64_t)1 << 40};
        uint64_t cur = get_le_n(b + lf[0], lf[1]);
        uint64_t v =
            lf[1] == 4 ? (cur + big[rng_below(r, 4)]) & 0xffffffffu : cur + big[rng_below(r, 5)];
        put_le_n(b + lf[0], v == cur ? cur + 1 : v, lf[1]);
        break;
    }
    case M_LEN_REFIXED: {
        uint64_t cur = get_le_n(b + lf[0], lf[1]);
        int64_t d = (int64_t)rng_below(r, 17) - 8;
        put_le_n(b + lf[0], cur + (uint64_t)(d ? d : 1), lf[1]);
        refix_hashes(b, n);
        break;
    }
    case M_VERSION:
    case M_VERSION_REFIXED: {
        static const uint32_t vs[] = {0, TK__CACHE_FORMAT + 1, 0xffffffffu, 0x100};
        put_le_n(b + 8, vs[rng_below(r, 4)], 4);
        if (kind == M_VERSION_REFIXED)
            refix_hashes(b, n);
        break;
    }
    case M_MOVED:
        free(b);
        write_at(path, other, other_len);
        return 0;
    case M_EMPTY:
        n = 0;
        break;
    case M_DIR:
        free(b);
        ck_assert_int_eq(mkdir(path, 0700), 0);
        return 1;
    case M_SYMLINK_GOOD:
    case M_SYMLINK_DANGLING: {
        char target[PATH_MAX];
        snprintf(target, sizeof(target), "%s/target-%llx", outside,
                 (unsigned long long)rng_next(r));
        if (kind == M_SYMLINK_GOOD)
            write_at(target, good, len);
        free(b);
        ck_assert_int_eq(symlink(target, path), 0);
        return 0;
    }
    case M_FIFO:
        free(b);
        ck_assert_int_eq(mkfifo(path, 0600), 0);
        return 0;
    case M_TRAILING: {
        size_t k = 1 + (size_t)rng_below(r, 64);
        for (size_t i = 0; i < k; i++)
            b[n + i] = (uint8_t)rng_next(r);
        n += k;
        break;
    }
    case M_META_STR_REFIXED: {
        /* The length of one tagged field (u8 tag, u32 length, bytes). */
        size_t p = TK__ENTRY_HEADER_SIZE + META_FIXED_SIZE;
        size_t end = TK__ENTRY_HEADER_SIZE + (size_t)get_le_n(b + 16, 4);
        int which = (int)rng_below(r, TK__ENTRY_N_STRINGS);
        for (int i = 0; i < which && p + 5 + get_le_n(b + p + 1, 4) + 5 <= end; i++)
            p += 5 + (size_t)get_le_n(b + p + 1, 4);
        uint32_t sl = (uint32_t)get_le_n(b + p + 1, 4);
        static const uint32_t ds[] = {1, 2, 0xffffffffu, 0x10000};
        put_le_n(b + p + 1, sl + ds[rng_below(r, 4)], 4);
        refix_hashes(b, n);
        break;
    }
    case M_KEY_BYTE_REFIXED:
    case M_FP_REFIXED: {
        tk__entry_view v;
        const char *why;
        ck_assert_int_eq(tk__entry_parse(good, len, 0, &v, &why), TK_OK);
        if (kind == M_KEY_BYTE_REFIXED)
            b[TK__ENTRY_HEADER_SIZE + v.meta_size + rng_below(r, v.key_size)] ^=
                (uint8_t)(1u << rng_below(r, 8));
        else
            b[32 + rng_below(r, 16)] ^= (uint8_t)(1u << rng_below(r, 8));
        refix_hashes(b, n);
        break;
    }
    case M_NUL_META_REFIXED: {
        size_t p = TK__ENTRY_HEADER_SIZE + META_FIXED_SIZE;
        uint32_t sl = (uint32_t)get_le_n(b + p + 1, 4); /* the first field: the kernel name */
        if (b[p] == 1 && sl && sl < len)
            b[p + 5 + rng_below(r, sl)] = 0;
        else
            b[8] ^= 1;
        refix_hashes(b, n);
        break;
    }
    case M_HEADER_SIZE:
        put_le_n(b + 12, TK__ENTRY_HEADER_SIZE + 1 + rng_below(r, 100), 4);
        if (rng_below(r, 2))
            refix_hashes(b, n);
        break;
    case M_MAGIC:
        b[rng_below(r, 8)] ^= (uint8_t)(1u + rng_below(r, 255));
        break;
    case M_SPARSE_HUGE: {
        write_at(path, good, len);
        ck_assert_int_eq(truncate(path, (off_t)3 << 30), 0);
        free(b);
        return 0;
    }
    default:
        ck_abort_msg("unknown mutation %d", kind);
    }
    write_at(path, b, n);
    free(b);
    return 0;
}

#endif
