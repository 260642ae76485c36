/*
 * Private to src/cache: the entry file format and the handle. Tests include it
 * to craft entries (collisions, wrong versions) the public path never writes.
 *
 * Entry file, all integers little-endian:
 *
 *   header (64 bytes)
 *     0  magic "TKJITENT"
 *     8  u32 format version (TK__CACHE_FORMAT)
 *    12  u32 header size (64)
 *    16  u32 metadata size
 *    20  u32 key material size
 *    24  u64 stored payload size (bytes in the file, compressed or not)
 *    32  u64 fingerprint, high half   (XXH3-128 of the key material)
 *    40  u64 fingerprint, low half
 *    48  i64 created (seconds since the epoch)
 *    56  u64 XXH3-64 of the metadata seeded with XXH3-64 of bytes 0..55, so
 *        that a listing can trust header + metadata without the payload
 *   metadata
 *     9 x i32 tk_resource_usage, in declaration order
 *     u32 payload codec (0 stored as is, 1 one zstd frame declaring its size)
 *     u64 code object size (after decompression)
 *     tagged fields until the end: u8 tag, u32 length, bytes (no NUL).
 *       Tags 1-8: kernel, source, backend, arch, compiler, options, lowered,
 *       deps; an absent tag is a NULL string; an unknown tag is a field
 *       added later and skipped, so adding one needs no new format.
 *   key material (the canonical key, compared on read; values longer than
 *     TK__KEY_INLINE_MAX appear as their XXH3-128, see key.c)
 *   payload (the code object, zstd-compressed unless that saved nothing)
 *   trailer: u64 XXH3-64 of every byte before it
 *
 * Format 2 (the whole source inside each entry, no compression) lives in
 * <root>/2 and is never read: the folder name and the version field both
 * differ. The tools report and remove it (tk_cache_prune, tk_cache_clear).
 *
 * Sources (source.c): a hashed key value (a kernel's whole source, up to
 * TK__SOURCE_MAX bytes) is kept once under
 * <root>/<format>/src/<32 hex of its XXH3-128>.zst, one zstd frame declaring
 * its size, so the source of any key can be shown (tk_cache_entry_source).
 * Kept sources count toward the size limit; one that no user-tier entry
 * names any more is removed by the eviction that follows a removal and by
 * every prune (not one used within TK__SOURCE_GRACE_SECONDS).
 *
 * Path: <root>/<TK__CACHE_FORMAT>/<2 hex>/<30 hex>.tkc.
 *
 * Bundle file: magic "TKJITBDL", u32 format version, u32 zero, u64 count,
 * then count records, each a u64 length and that many bytes:
 *   - an entry: one whole entry file (it starts with "TKJITENT");
 *   - a kept source: a 64-byte header, magic "TKJITSRC", u32 format
 *     version, u32 header size (64), u64 source length, u64 XXH3-128 high
 *     half, u64 low half, 24 zero bytes; then the kept file's zstd frame.
 * A record shorter than 64 bytes ends a reader's walk. tk_cache_export
 * writes the entries, then the kept sources they name; an importer checks
 * each source against its fingerprint before keeping it.
 */
#ifndef TK_CACHE_CACHE_INTERNAL_H
#define TK_CACHE_CACHE_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cache/cache.h"
#include "common/file_id.h"

#define TK__ENTRY_MAGIC "TKJITENT"
#define TK__BUNDLE_MAGIC "TKJITBDL"
#define TK__SOURCE_MAGIC "TKJITSRC"
#define TK__ENTRY_EXT ".tkc"
#define TK__TEMP_PREFIX ".tmp."
/* A file a removal moved aside to check it (tk__cache_unlink_same): being
 * removed, or an entry about to go back under its name. Not counted toward
 * the size limit; removed by another process only when its rename is older
 * than TK__STALE_TEMP_SECONDS, or by a prune when no remover holds its lock
 * (its remover was killed). */
#define TK__GONE_PREFIX TK__TEMP_PREFIX "gone."
#define TK__LOCK_DIR "locks"
#define TK__SRC_DIR "src"

enum { TK__CODEC_RAW = 0, TK__CODEC_ZSTD = 1 };

enum {
    TK__ENTRY_HEADER_SIZE = 64,
    TK__ENTRY_TRAILER_SIZE = 8,
    TK__ENTRY_N_STRINGS = 8,
    TK__ENTRY_RESOURCE_FIELDS = 9,
    TK__ENTRY_MAX_META = 1u << 20,
    TK__BUNDLE_HEADER_SIZE = 24,
    TK__SOURCE_RECORD_HEADER = 64
};

/* Largest source kept (a kernel source is at most a few hundred KiB). */
#define TK__SOURCE_MAX ((uint64_t)64 << 20)
/* A kept source used (written, or named again by a store) this recently is
 * never swept: a store running meanwhile may just have named it. */
#define TK__SOURCE_GRACE_SECONDS 60

/* Largest entry file read into memory: keeps a hostile file from asking for
 * an absurd allocation. */
#define TK__ENTRY_MAX_FILE ((uint64_t)1 << 31)

/* Seconds a hit may be old before it refreshes the entry's mtime (recency is
 * only needed at eviction granularity; skipping fresh hits saves a write). */
#define TK__REFRESH_SECONDS 60
/* Temporary files older than this are leftovers of killed writers. */
#define TK__STALE_TEMP_SECONDS 600
/* Automatic eviction after a store goes down to this share of the limit, so a
 * cache sitting at its limit is not scanned on every store. */
#define TK__EVICT_LOW_WATER_PERCENT 90

typedef struct tk__slice {
    const char *ptr; /* NULL when the string was stored as NULL */
    uint32_t len;
} tk__slice;

/* A parsed entry: pointers into the caller's buffer. */
typedef struct tk__entry_view {
    uint32_t version;
    uint32_t meta_size;
    uint32_t key_size;
    uint64_t payload_size; /* code object size (decompressed) */
    uint64_t stored_size;  /* payload bytes in the file */
    uint32_t codec;        /* TK__CODEC_* */
    uint64_t file_size;    /* size the header implies */
    uint64_t fp_hi;
    uint64_t fp_lo;
    int64_t created;
    tk_resource_usage resources;
    tk__slice strings[TK__ENTRY_N_STRINGS];
    const uint8_t *key;
    const uint8_t *payload;
} tk__entry_view;

/* Builds a whole entry file in one malloc'd buffer. The fingerprint is taken
 * as given so that tests can forge collisions. */
tk_status tk__entry_encode(const void *key, size_t key_len, uint64_t fp_hi, uint64_t fp_lo,
                           const tk__entry_meta *meta, const void *payload, size_t payload_size,
                           uint8_t **out, size_t *out_len);

/* Checks the header (magic, version, sizes against file_size). buf holds at
 * least TK__ENTRY_HEADER_SIZE bytes. *why gets a static reason on failure. */
tk_status tk__entry_parse_header(const uint8_t *buf, uint64_t file_size, tk__entry_view *out,
                                 const char **why);
/* Checks and decodes the metadata; buf holds header + metadata and view came
 * from tk__entry_parse_header. */
tk_status tk__entry_parse_meta(const uint8_t *buf, tk__entry_view *view, const char **why);
/* Checks a whole entry file: header, metadata, checksum, and when check_fp
 * the fingerprint against the key material. */
tk_status tk__entry_parse(const uint8_t *buf, size_t len, int check_fp, tk__entry_view *out,
                          const char **why);

/* Writes the decoded payload (v->payload_size bytes) to dst; TK_CORRUPT
 * when a compressed payload does not decode to exactly that size. */
tk_status tk__entry_payload(const tk__entry_view *v, void *dst);
/* ZSTD_decompress on a reused decompression context (entry.c): a zstd
 * result (ZSTD_isError for failure). */
size_t tk__zstd_decompress(void *dst, size_t cap, const void *src, size_t len);

/* Fills *out (owned copies, the payload decoded) from a checked view;
 * last_used as given. TK_CORRUPT when the payload does not decode. */
tk_status tk__entry_fill(const tk__entry_view *v, int64_t last_used, tk__entry *out);

/* 32 lowercase hex digits of a fingerprint + NUL. */
void tk__fp_hex(uint64_t hi, uint64_t lo, char hex[33]);

/* -------------------------------------------------------------- the handle */

enum tk__warn {
    TK__WARN_SETUP, /* root or tier refused / not creatable */
    TK__WARN_WRITE, /* stores failing */
    TK__WARN_BAD,   /* corrupt or mismatched entries */
    TK__WARN_OWNER, /* entries owned by someone else */
    TK__WARN_COUNT
};

enum tk__root_state {
    TK__ROOT_OK = 0,
    TK__ROOT_MISSING = 1, /* nothing there (and not created): an empty cache */
    TK__ROOT_BAD = 2      /* unusable or refused: see root_problem */
};

struct tk_cache {
    char *root;     /* "" when none could be resolved */
    char *fmt_dir;  /* <root>/<format>, NULL when root is "" */
    char **lower;   /* <lower root>/<format> of each usable lower tier */
    size_t n_lower;
    char *lower_roots; /* their roots, ':'-separated (NULL: none) */
    uint64_t max_size;
    int disabled;
    int read_only;
    int root_state;
    int writable;   /* stores are possible */
    unsigned test_write_delay_ms;
    tk__log_fn log;
    void *log_user;
    char *root_problem; /* why root_state is TK__ROOT_BAD */

    pthread_mutex_t evict_mu; /* one eviction scan at a time */
    pthread_mutex_t mu;       /* guards everything below */
    int warned[TK__WARN_COUNT];
    int size_known;
    uint64_t size_tally;  /* this handle's estimate of the user tier's bytes */
    uint64_t added_total; /* bytes this handle has stored, ever */
    char last_error[512];
    struct tk__remote *remote; /* the remote tier (remote.c), NULL when off */
    uint64_t pstat[TK__PSTAT_COUNT]; /* counts not yet in the stats file (stats.c) */
};

/* Logs msg at WARN once per category per handle. */
void tk__cache_warn_once(tk_cache *cache, enum tk__warn which, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Records a message for tk_cache_last_error and returns status. */
tk_status tk__cache_fail(tk_cache *cache, tk_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Entry path of hex under fmt_dir. */
tk_status tk__cache_entry_path(const char *fmt_dir, const char *hex, char *buf, size_t size);

/* Writes a whole entry file for hex into the user tier atomically. */
tk_status tk__cache_publish(tk_cache *cache, const char *hex, const uint8_t *bytes, size_t len);

/* Removes least-recently-used user-tier entries until at most limit bytes
 * remain (keep_path, if set, is never removed), plus temporary files older
 * than TK__STALE_TEMP_SECONDS (all of them when all_temps). With n_removed
 * (the tools, not the store path) it also removes unheld lock files unused
 * for as long (all unheld ones when all_temps). */
tk_status tk__cache_evict(tk_cache *cache, uint64_t limit, const char *keep_path, int all_temps,
                          uint64_t *n_removed);

/* Test hook: TK__CACHE_TEST_WRITE_DELAY_MS, read once at open, makes every
 * store write half its file, sleep that long, then write the rest, so a test
 * can kill a writer mid-store. Unset, it costs nothing. */

/* Publishes a whole, already checked entry file for hex in the user tier
 * (tk__cache_publish), then keeps the size limit as tk__cache_put does. */
tk_status tk__cache_store_bytes(tk_cache *cache, const char *hex, const uint8_t *bytes, size_t len);

/* Hostile-file-system guards (fs.c). tk__cache_stat_unsafe: NULL when a
 * stat result is a folder owned by us (or root when allow_root_owner) and
 * writable by nobody else, else why not. tk__cache_dir_unsafe: NULL when path
 * is a real folder (not a link) owned by us (or root when allow_root_owner)
 * and writable by nobody else, else why not. tk__cache_open_dir: a folder fd
 * for *at() calls, -1 for a link. tk__cache_unlink: unlink through the parent
 * folder opened without following a link. */
struct stat;
const char *tk__cache_stat_unsafe(const struct stat *st, int allow_root_owner);
const char *tk__cache_dir_unsafe(const char *path, int allow_root_owner);
int tk__cache_open_dir(const char *path);
int tk__cache_unlink(const char *path);
/* tk__cache_unlink of path only while it is the file seen: a fresh entry
 * renamed onto the name meanwhile stays, even one that got the inode number
 * of the file seen. 0 when removed; -1 with errno (ESTALE: the name held
 * another file, left in place; EBUSY: another removal holds it). */
int tk__cache_unlink_same(const char *path, const tk__file_id *seen);
/* Removes whatever is at path, never following a link: a file, a link, a
 * FIFO, or a folder with what it holds (at any depth). For a
 * folder or special file found where an entry belongs. 0 on success. */
int tk__cache_remove_any(const char *path);
/* Writes all n bytes to fd (retrying short writes); 0, or -1 with errno. */
int tk__cache_write_all(int fd, const void *data, size_t n);

/* Kept sources (source.c). tk__source_keep: compresses and keeps a hashed
 * key value in the user tier, or refreshes the time of the file already
 * there; best effort. tk__source_keep_frame: keeps a frame already checked
 * (tk__source_check), or with frame NULL only refreshes an existing file's
 * time (TK_NOT_FOUND when there is none). tk__source_check: frame is one
 * zstd frame declaring a size of at most TK__SOURCE_MAX that decodes to a
 * value whose XXH3-128 is hi/lo; *text (malloc'd, NUL-terminated) when text
 * is not NULL, else *why. tk__source_read: the kept source hi/lo of the user
 * tier, else of a lower tier, checked: its frame and/or text (each may be
 * NULL), TK_NOT_FOUND with *why when none checks. tk__source_bytes: what the
 * user tier's kept sources take. tk__source_sweep: removes the user tier's
 * kept sources no entry of it names (see above). */
void tk__source_keep(tk_cache *cache, const tk__key_blob *blob);
tk_status tk__source_keep_frame(tk_cache *cache, uint64_t hi, uint64_t lo, const uint8_t *frame,
                                size_t len);
tk_status tk__source_check(const uint8_t *frame, size_t len, uint64_t hi, uint64_t lo, char **text,
                           size_t *text_len, const char **why);
tk_status tk__source_read(tk_cache *cache, uint64_t hi, uint64_t lo, uint8_t **frame,
                          size_t *frame_len, char **text, size_t *text_len, const char **why);
uint64_t tk__source_bytes(const tk_cache *cache);
void tk__source_sweep(tk_cache *cache, uint64_t *n_removed, uint64_t *freed);

/* Persistent statistics (stats.c): the sum of the stats file's records;
 * *since: when they were last zeroed (0: never). */
tk_status tk__cache_stats_read(tk_cache *cache, uint64_t v[TK__PSTAT_COUNT], int64_t *since);
/* Appends the handle's pending counts to the stats file (at close). */
void tk__cache_stats_flush(tk_cache *cache);
/* The limit set in <root>/config (tk_cache_set_max_size): TK_OK and *out,
 * TK_NOT_FOUND when none, TK_CORRUPT with why when the file is bad. */
tk_status tk__cache_config_max_size(const char *root, uint64_t *out, char *why, size_t why_size);

#define TK__CACHE_DEFAULT_MAX_SIZE ((uint64_t)5 << 30) /* like ccache's default */

/* Reads a whole file (regular, at most TK__ENTRY_MAX_FILE bytes) from fd. */
tk_status tk__read_fd(int fd, uint64_t size, uint8_t **out);

#endif /* TK_CACHE_CACHE_INTERNAL_H */
