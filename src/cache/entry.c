/* Entry files: encoding and checked decoding (see cache_internal.h). Every
 * length read from disk is checked against the file size before it is used. */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>
#include <zstd.h>

#include "cache/cache_internal.h"

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

static const char *meta_string(const tk__entry_meta *meta, int i)
{
    switch (i) {
    case 0: return meta->kernel;
    case 1: return meta->source;
    case 2: return meta->backend;
    case 3: return meta->arch;
    case 4: return meta->compiler;
    case 5: return meta->options;
    case 6: return meta->lowered;
    default: return meta->deps;
    }
}

static void resources_to_array(const tk_resource_usage *r, int32_t a[TK__ENTRY_RESOURCE_FIELDS])
{
    a[0] = r->registers;
    a[1] = r->sgprs;
    a[2] = r->agprs;
    a[3] = r->shared_bytes;
    a[4] = r->local_bytes;
    a[5] = r->spill_count;
    a[6] = r->wavefront_size;
    a[7] = r->kernarg_bytes;
    a[8] = r->max_threads;
}

static void resources_from_array(const int32_t a[TK__ENTRY_RESOURCE_FIELDS], tk_resource_usage *r)
{
    r->registers = a[0];
    r->sgprs = a[1];
    r->agprs = a[2];
    r->shared_bytes = a[3];
    r->local_bytes = a[4];
    r->spill_count = a[5];
    r->wavefront_size = a[6];
    r->kernarg_bytes = a[7];
    r->max_threads = a[8];
}

static uint64_t head_hash(const uint8_t *header, const uint8_t *meta, size_t meta_size)
{
    return XXH3_64bits_withSeed(meta, meta_size, XXH3_64bits(header, 56));
}

/* Fixed part of the metadata: resources, codec, raw payload size. */
#define META_FIXED (4 * TK__ENTRY_RESOURCE_FIELDS + 4 + 8)

/* Code objects compress 3-6x; level 6 costs about a millisecond on a
 * 100 KiB cubin, next to a compile of hundreds. */
#define ZSTD_LEVEL 6

tk_status tk__entry_encode(const void *key, size_t key_len, uint64_t fp_hi, uint64_t fp_lo,
                           const tk__entry_meta *meta, const void *payload, size_t payload_size,
                           uint8_t **out, size_t *out_len)
{
    if (!key || !meta || (!payload && payload_size) || !out || !out_len)
        return TK_INVALID_ARGUMENT;
    size_t meta_size = META_FIXED;
    for (int i = 0; i < TK__ENTRY_N_STRINGS; i++) {
        const char *s = meta_string(meta, i);
        size_t n = s ? strlen(s) : 0;
        if (n >= UINT32_MAX || n > TK__ENTRY_MAX_META)
            return TK_INVALID_ARGUMENT;
        if (s)
            meta_size += 5 + n;
    }
    if (meta_size > TK__ENTRY_MAX_META || key_len > UINT32_MAX)
        return TK_INVALID_ARGUMENT;
    if (payload_size > TK__ENTRY_MAX_FILE)
        return TK_OVERFLOW;
    size_t bound = payload_size ? ZSTD_compressBound(payload_size) : 0;
    uint64_t total = (uint64_t)TK__ENTRY_HEADER_SIZE + meta_size + key_len;
    if (bound > TK__ENTRY_MAX_FILE || total + bound + TK__ENTRY_TRAILER_SIZE > TK__ENTRY_MAX_FILE)
        return TK_OVERFLOW;

    uint8_t *buf = malloc((size_t)(total + bound + TK__ENTRY_TRAILER_SIZE));
    if (!buf)
        return TK_OUT_OF_MEMORY;
    uint8_t *stored = buf + total;
    uint32_t codec = TK__CODEC_RAW;
    size_t stored_size = payload_size;
    if (payload_size) {
        /* The frame carries its content checksum: a payload that decodes to
         * other bytes of the right size is refused, not loaded. */
        size_t z = (size_t)-1;
        ZSTD_CCtx *cctx = ZSTD_createCCtx();
        if (cctx && !ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel,
                                                         ZSTD_LEVEL)) &&
            !ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1)))
            z = ZSTD_compress2(cctx, stored, bound, payload, payload_size);
        ZSTD_freeCCtx(cctx);
        if (!ZSTD_isError(z) && z < payload_size) {
            codec = TK__CODEC_ZSTD;
            stored_size = z;
        } else {
            memcpy(stored, payload, payload_size);
        }
    }
    total += stored_size + TK__ENTRY_TRAILER_SIZE;

    uint8_t *h = buf;
    memcpy(h, TK__ENTRY_MAGIC, 8);
    put_le(h + 8, TK__CACHE_FORMAT, 4);
    put_le(h + 12, TK__ENTRY_HEADER_SIZE, 4);
    put_le(h + 16, meta_size, 4);
    put_le(h + 20, key_len, 4);
    put_le(h + 24, stored_size, 8);
    put_le(h + 32, fp_hi, 8);
    put_le(h + 40, fp_lo, 8);
    int64_t created = meta->created ? meta->created : (int64_t)time(NULL);
    put_le(h + 48, (uint64_t)created, 8);

    uint8_t *p = buf + TK__ENTRY_HEADER_SIZE;
    int32_t res[TK__ENTRY_RESOURCE_FIELDS];
    resources_to_array(&meta->resources, res);
    for (int i = 0; i < TK__ENTRY_RESOURCE_FIELDS; i++, p += 4)
        put_le(p, (uint32_t)res[i], 4);
    put_le(p, codec, 4);
    put_le(p + 4, payload_size, 8);
    p += 12;
    for (int i = 0; i < TK__ENTRY_N_STRINGS; i++) {
        const char *s = meta_string(meta, i);
        if (!s)
            continue; /* absent: NULL */
        size_t n = strlen(s);
        p[0] = (uint8_t)(i + 1);
        put_le(p + 1, n, 4);
        memcpy(p + 5, s, n);
        p += 5 + n;
    }
    put_le(h + 56, head_hash(h, buf + TK__ENTRY_HEADER_SIZE, meta_size), 8);
    memcpy(p, key, key_len);
    p += key_len;
    /* The payload is already in place (compressed or copied above). */
    p += stored_size;
    put_le(p, XXH3_64bits(buf, (size_t)total - TK__ENTRY_TRAILER_SIZE), 8);

    *out = buf;
    *out_len = (size_t)total;
    return TK_OK;
}

tk_status tk__entry_parse_header(const uint8_t *buf, uint64_t file_size, tk__entry_view *out,
                                 const char **why)
{
    tk__entry_view v;
    memset(&v, 0, sizeof(v));
    *why = NULL;
    if (file_size < TK__ENTRY_HEADER_SIZE + TK__ENTRY_TRAILER_SIZE) {
        *why = "truncated header";
        return TK_CORRUPT;
    }
    if (memcmp(buf, TK__ENTRY_MAGIC, 8) != 0) {
        *why = "bad magic";
        return TK_CORRUPT;
    }
    v.version = (uint32_t)get_le(buf + 8, 4);
    if (v.version != TK__CACHE_FORMAT) {
        *why = "wrong format version";
        return TK_CORRUPT;
    }
    if (get_le(buf + 12, 4) != TK__ENTRY_HEADER_SIZE) {
        *why = "bad header size";
        return TK_CORRUPT;
    }
    v.meta_size = (uint32_t)get_le(buf + 16, 4);
    v.key_size = (uint32_t)get_le(buf + 20, 4);
    v.stored_size = get_le(buf + 24, 8);
    v.fp_hi = get_le(buf + 32, 8);
    v.fp_lo = get_le(buf + 40, 8);
    v.created = (int64_t)get_le(buf + 48, 8);
    if (v.meta_size > TK__ENTRY_MAX_META || v.meta_size < META_FIXED ||
        v.stored_size > TK__ENTRY_MAX_FILE) {
        *why = "bad section sizes";
        return TK_CORRUPT;
    }
    /* No overflow: every term is below 2^32 except stored_size <= 2^31. */
    v.file_size = (uint64_t)TK__ENTRY_HEADER_SIZE + v.meta_size + v.key_size + v.stored_size +
                  TK__ENTRY_TRAILER_SIZE;
    if (v.file_size != file_size) {
        *why = v.file_size > file_size ? "truncated" : "trailing bytes";
        return TK_CORRUPT;
    }
    *out = v;
    return TK_OK;
}

tk_status tk__entry_parse_meta(const uint8_t *buf, tk__entry_view *view, const char **why)
{
    const uint8_t *meta = buf + TK__ENTRY_HEADER_SIZE;
    const uint8_t *end = meta + view->meta_size;
    *why = NULL;
    if (head_hash(buf, meta, view->meta_size) != get_le(buf + 56, 8)) {
        *why = "header or metadata checksum mismatch";
        return TK_CORRUPT;
    }
    int32_t res[TK__ENTRY_RESOURCE_FIELDS];
    const uint8_t *p = meta;
    for (int i = 0; i < TK__ENTRY_RESOURCE_FIELDS; i++, p += 4)
        res[i] = (int32_t)(uint32_t)get_le(p, 4);
    uint32_t codec = (uint32_t)get_le(p, 4);
    uint64_t raw = get_le(p + 4, 8);
    p += 12;
    if (codec != TK__CODEC_RAW && codec != TK__CODEC_ZSTD) {
        *why = "unknown payload codec";
        return TK_CORRUPT;
    }
    if (raw > TK__ENTRY_MAX_FILE || (codec == TK__CODEC_RAW && raw != view->stored_size) ||
        (codec == TK__CODEC_ZSTD && (!view->stored_size || !raw))) {
        *why = "bad payload sizes";
        return TK_CORRUPT;
    }
    /* Tagged strings: tag u8 (string index + 1), u32 length, bytes. An
     * absent tag is a NULL string; a tag this version does not know is a
     * later field and skipped, so a field can be added without a new format. */
    tk__slice strings[TK__ENTRY_N_STRINGS];
    memset(strings, 0, sizeof(strings));
    int seen[256] = {0};
    while (p < end) {
        if (end - p < 5) {
            *why = "metadata truncated";
            return TK_CORRUPT;
        }
        unsigned tag = p[0];
        uint32_t n = (uint32_t)get_le(p + 1, 4);
        p += 5;
        if ((uint64_t)(end - p) < n) {
            *why = "metadata truncated";
            return TK_CORRUPT;
        }
        if (tag == 0 || seen[tag]++) {
            *why = "bad or repeated metadata field";
            return TK_CORRUPT;
        }
        if (tag <= TK__ENTRY_N_STRINGS) {
            if (memchr(p, 0, n)) {
                *why = "NUL inside a metadata string";
                return TK_CORRUPT;
            }
            strings[tag - 1].ptr = (const char *)p;
            strings[tag - 1].len = n;
        }
        p += n;
    }
    resources_from_array(res, &view->resources);
    memcpy(view->strings, strings, sizeof(strings));
    view->codec = codec;
    view->payload_size = raw;
    return TK_OK;
}

tk_status tk__entry_parse(const uint8_t *buf, size_t len, int check_fp, tk__entry_view *out,
                          const char **why)
{
    tk__entry_view v;
    tk_status st = tk__entry_parse_header(buf, len, &v, why);
    if (st != TK_OK)
        return st;
    size_t body = len - TK__ENTRY_TRAILER_SIZE;
    if (XXH3_64bits(buf, body) != get_le(buf + body, 8)) {
        *why = "checksum mismatch";
        return TK_CORRUPT;
    }
    st = tk__entry_parse_meta(buf, &v, why);
    if (st != TK_OK)
        return st;
    v.key = buf + TK__ENTRY_HEADER_SIZE + v.meta_size;
    v.payload = v.key + v.key_size;
    if (v.codec == TK__CODEC_ZSTD &&
        ZSTD_getFrameContentSize(v.payload, (size_t)v.stored_size) != v.payload_size) {
        *why = "compressed payload does not declare its size";
        return TK_CORRUPT;
    }
    if (check_fp) {
        XXH128_hash_t h = XXH3_128bits(v.key, v.key_size);
        if (h.high64 != v.fp_hi || h.low64 != v.fp_lo) {
            *why = "key material does not match its fingerprint";
            return TK_CORRUPT;
        }
    }
    *out = v;
    return TK_OK;
}

/* Decompression contexts for reuse: ZSTD_decompress makes and frees one
 * (~96 KB, its tables set up) on every call, which cost more than the
 * decompression itself for a small code object (on the build machine,
 * after a process's first call: a 3 KB frame 17-22 us, on a kept context
 * 5 us; a 69 KB GEMM code object 49-55 us against 36-40). A few slots that
 * threads take and give back with atomic exchanges: no lock (nothing a
 * fork could leave held), a context in use by one thread only; a thread
 * finding every slot empty makes its own, one giving back into full slots
 * frees it. Kept contexts stay reachable from here until the process
 * ends. */
#define DCTX_SLOTS 4
static _Atomic(ZSTD_DCtx *) dctx_slots[DCTX_SLOTS];

static ZSTD_DCtx *dctx_take(void)
{
    for (int i = 0; i < DCTX_SLOTS; i++) {
        ZSTD_DCtx *d = atomic_exchange(&dctx_slots[i], NULL);
        if (d)
            return d;
    }
    return ZSTD_createDCtx();
}

static void dctx_give(ZSTD_DCtx *d)
{
    for (int i = 0; i < DCTX_SLOTS; i++) {
        ZSTD_DCtx *none = NULL;
        if (atomic_compare_exchange_strong(&dctx_slots[i], &none, d))
            return;
    }
    ZSTD_freeDCtx(d);
}

size_t tk__zstd_decompress(void *dst, size_t cap, const void *src, size_t len)
{
    ZSTD_DCtx *d = dctx_take();
    if (!d)
        return ZSTD_decompress(dst, cap, src, len); /* no memory for one: its own try */
    size_t n = ZSTD_decompressDCtx(d, dst, cap, src, len);
    dctx_give(d);
    return n;
}

tk_status tk__entry_payload(const tk__entry_view *v, void *dst)
{
    if (v->codec == TK__CODEC_RAW) {
        if (v->payload_size)
            memcpy(dst, v->payload, (size_t)v->payload_size);
        return TK_OK;
    }
    size_t n = tk__zstd_decompress(dst, (size_t)v->payload_size, v->payload, (size_t)v->stored_size);
    if (ZSTD_isError(n) || n != v->payload_size)
        return TK_CORRUPT;
    return TK_OK;
}

tk_status tk__entry_fill(const tk__entry_view *v, int64_t last_used, tk__entry *out)
{
    size_t total = 0;
    for (int i = 0; i < TK__ENTRY_N_STRINGS; i++)
        total += (size_t)v->strings[i].len + 1;
    char *strings = malloc(total);
    void *payload = malloc(v->payload_size ? (size_t)v->payload_size : 1);
    if (!strings || !payload) {
        free(strings);
        free(payload);
        return TK_OUT_OF_MEMORY;
    }
    const char *ptrs[TK__ENTRY_N_STRINGS];
    char *p = strings;
    for (int i = 0; i < TK__ENTRY_N_STRINGS; i++) {
        memcpy(p, v->strings[i].ptr ? v->strings[i].ptr : "", v->strings[i].len);
        p[v->strings[i].len] = 0;
        ptrs[i] = v->strings[i].ptr ? p : NULL;
        p += v->strings[i].len + 1;
    }
    if (tk__entry_payload(v, payload) != TK_OK) {
        free(strings);
        free(payload);
        return TK_CORRUPT;
    }
    memset(out, 0, sizeof(*out));
    out->meta.kernel = ptrs[0];
    out->meta.source = ptrs[1];
    out->meta.backend = ptrs[2];
    out->meta.arch = ptrs[3];
    out->meta.compiler = ptrs[4];
    out->meta.options = ptrs[5];
    out->meta.lowered = ptrs[6];
    out->meta.deps = ptrs[7];
    out->meta.created = v->created;
    out->meta.last_used = last_used;
    out->meta.resources = v->resources;
    out->payload = payload;
    out->payload_size = (size_t)v->payload_size;
    out->strings = strings;
    return TK_OK;
}

void tk__entry_free(tk__entry *entry)
{
    if (!entry)
        return;
    free(entry->payload);
    free(entry->strings);
    memset(entry, 0, sizeof(*entry));
}

tk_status tk__read_fd(int fd, uint64_t size, uint8_t **out)
{
    if (size > TK__ENTRY_MAX_FILE)
        return TK_CORRUPT;
    uint8_t *buf = malloc(size ? (size_t)size : 1);
    if (!buf)
        return TK_OUT_OF_MEMORY;
    size_t done = 0;
    while (done < size) {
        ssize_t r = pread(fd, buf + done, (size_t)size - done, (off_t)done);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            free(buf);
            return r == 0 ? TK_CORRUPT : TK_IO_ERROR; /* shrank under us: truncated */
        }
        done += (size_t)r;
    }
    *out = buf;
    return TK_OK;
}
