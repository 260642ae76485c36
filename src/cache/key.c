/* Cache keys: a canonical byte encoding of every input and its XXH3-128. */
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "cache/cache_internal.h"

/* Field kinds: a NULL string and "" must not encode alike, nor a string and
 * bytes that happen to match. */
enum { KIND_NULL = 'N', KIND_STR = 'S', KIND_BYTES = 'B', KIND_U64 = 'U', KIND_HASHED = 'H' };

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

static int reserve(tk__key *key, size_t extra)
{
    if (key->failed)
        return 0;
    if (extra > SIZE_MAX - key->len) {
        key->failed = 1;
        return 0;
    }
    size_t need = key->len + extra;
    if (need <= key->cap)
        return 1;
    size_t cap = key->cap ? key->cap : 256;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    uint8_t *bytes = realloc(key->bytes, cap);
    if (!bytes) {
        key->failed = 1;
        return 0;
    }
    key->bytes = bytes;
    key->cap = cap;
    return 1;
}

static void add_raw(tk__key *key, int kind, const char *tag, const void *data, size_t len);

/* kind u8, tag length u32, tag, value length u64, value. A long value is
 * replaced by kind 'H' + the original kind u8 + its length u64 + XXH3-128
 * (16 bytes, high half first): the material stays small and comparable. */
static void add_field(tk__key *key, int kind, const char *tag, const void *data, size_t len)
{
    if (len <= TK__KEY_INLINE_MAX || key->failed) {
        add_raw(key, kind, tag, data, len);
        return;
    }
    XXH128_hash_t h = XXH3_128bits(data, len);
    uint8_t v[25];
    v[0] = (uint8_t)kind;
    put_le(v + 1, (uint64_t)len, 8);
    put_le(v + 9, h.high64, 8);
    put_le(v + 17, h.low64, 8);
    add_raw(key, KIND_HASHED, tag, v, sizeof(v));
    if (key->n_blobs < TK__KEY_MAX_BLOBS) {
        char *copy = malloc(len);
        if (!copy) {
            key->failed = 1;
            return;
        }
        memcpy(copy, data, len);
        tk__key_blob *b = &key->blobs[key->n_blobs++];
        b->hi = h.high64;
        b->lo = h.low64;
        b->data = copy;
        b->len = len;
    }
}

static void add_raw(tk__key *key, int kind, const char *tag, const void *data, size_t len)
{
    size_t tag_len = tag ? strlen(tag) : 0;
    if (tag_len > UINT32_MAX) {
        key->failed = 1;
        return;
    }
    /* One reservation for header and value: two separate ones each check
     * only their own part against the free space. */
    if (len > SIZE_MAX - (13 + tag_len)) {
        key->failed = 1;
        return;
    }
    if (!reserve(key, 13 + tag_len + len))
        return;
    uint8_t *p = key->bytes + key->len;
    p[0] = (uint8_t)kind;
    put_le(p + 1, tag_len, 4);
    if (tag_len)
        memcpy(p + 5, tag, tag_len);
    put_le(p + 5 + tag_len, (uint64_t)len, 8);
    if (len)
        memcpy(p + 13 + tag_len, data, len);
    key->len += 13 + tag_len + len;
    key->hex[0] = 0; /* any earlier fingerprint is stale now */
}

void tk__key_init(tk__key *key)
{
    memset(key, 0, sizeof(*key));
    /* The format version is part of every key: a format change can never
     * match an entry written by an older layout. */
    tk__key_add_u64(key, "tk.cache_format", TK__CACHE_FORMAT);
}

void tk__key_free(tk__key *key)
{
    if (!key)
        return;
    free(key->bytes);
    for (size_t i = 0; i < key->n_blobs; i++)
        free(key->blobs[i].data);
    memset(key, 0, sizeof(*key));
}

void tk__key_add_str(tk__key *key, const char *tag, const char *value)
{
    if (!value)
        add_field(key, KIND_NULL, tag, NULL, 0);
    else
        add_field(key, KIND_STR, tag, value, strlen(value));
}

void tk__key_add_bytes(tk__key *key, const char *tag, const void *data, size_t len)
{
    if (!data && len) {
        key->failed = 1;
        return;
    }
    add_field(key, KIND_BYTES, tag, data, len);
}

void tk__key_add_u64(tk__key *key, const char *tag, uint64_t value)
{
    uint8_t v[8];
    put_le(v, value, 8);
    add_field(key, KIND_U64, tag, v, sizeof(v));
}

void tk__fp_hex(uint64_t hi, uint64_t lo, char hex[33])
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < 16; i++) {
        hex[i] = digits[(hi >> (60 - 4 * i)) & 15];
        hex[16 + i] = digits[(lo >> (60 - 4 * i)) & 15];
    }
    hex[32] = 0;
}

tk_status tk__key_finish(tk__key *key)
{
    if (!key)
        return TK_INVALID_ARGUMENT;
    if (key->failed || !key->bytes)
        return TK_OUT_OF_MEMORY;
    XXH128_hash_t h = XXH3_128bits(key->bytes, key->len);
    key->fp_hi = h.high64;
    key->fp_lo = h.low64;
    tk__fp_hex(key->fp_hi, key->fp_lo, key->hex);
    return TK_OK;
}

int tk__key_next(const uint8_t *material, size_t len, size_t *pos, tk__key_field *f)
{
    size_t p = *pos;
    if (p >= len)
        return 0;
    /* kind u8, tag length u32, tag, value length u64, value (add_raw) */
    if (len - p < 5)
        return -1;
    int kind = material[p];
    uint64_t tag_len = get_le(material + p + 1, 4);
    if (tag_len > len - p - 5 || len - p - 5 - tag_len < 8)
        return -1;
    const uint8_t *tag = material + p + 5;
    uint64_t vlen = get_le(tag + tag_len, 8);
    const uint8_t *value = tag + tag_len + 8;
    if (vlen > len - p - 13 - tag_len)
        return -1;
    memset(f, 0, sizeof *f);
    f->tag = (const char *)tag;
    f->tag_len = (size_t)tag_len;
    if (kind == KIND_HASHED) {
        if (vlen != 25)
            return -1;
        f->hashed = 1;
        f->len = get_le(value + 1, 8);
        f->hi = get_le(value + 9, 8);
        f->lo = get_le(value + 17, 8);
    } else {
        f->value = value;
        f->len = vlen;
    }
    *pos = p + 13 + (size_t)tag_len + (size_t)vlen;
    return 1;
}

int tk__key_find(const uint8_t *material, size_t len, const char *tag, tk__key_field *f)
{
    size_t pos = 0, n = strlen(tag);
    while (tk__key_next(material, len, &pos, f) == 1)
        if (f->tag_len == n && memcmp(f->tag, tag, n) == 0)
            return 1;
    return 0;
}
