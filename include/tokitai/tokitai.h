/*
 * tokitai-jit: compile GPU kernels at run time, cache them on disk, launch them.
 *
 * This header is the manual. Conventions that hold for every call unless the
 * call says otherwise:
 *
 *  - Every call that can fail returns a tk_status. Results are written through
 *    the trailing out-parameter(s) only when the call returns TK_OK.
 *  - Details of the most recent failure on a context (including a compiler's
 *    whole log) are read with tk_context_last_error().
 *  - The library never prints and never exits. Diagnostics go to the log
 *    callback set in the config, or, when none is set and the environment
 *    variable TOKITAI_JIT_LOG is set (to "1", "info", "debug", "warn" or
 *    "error"; "0" or a value it refuses: nothing), to standard error.
 *  - Strings passed in are copied unless the call says "borrowed".
 *  - Destructors accept NULL.
 *  - Thread safety is stated per object: a tk_config is not thread-safe; a
 *    tk_context and a tk_cache may be used from several threads at once.
 */
#ifndef TOKITAI_TOKITAI_H
#define TOKITAI_TOKITAI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(TK_STATIC_DEFINE)
#define TK_API
#elif defined(TK_BUILDING_LIBRARY)
#define TK_API __attribute__((visibility("default")))
#else
#define TK_API
#endif

/* ---------------------------------------------------------------- version */

#define TK_VERSION_MAJOR 0
#define TK_VERSION_MINOR 2
#define TK_VERSION_PATCH 0
#define TK_VERSION_NUMBER (TK_VERSION_MAJOR * 10000 + TK_VERSION_MINOR * 100 + TK_VERSION_PATCH)
#define TK_VERSION_STRING "0.2.0"

/* The version of the library actually linked: compare with TK_VERSION_NUMBER
 * to catch a header/library mismatch. */
TK_API unsigned tk_version_number(void);
TK_API const char *tk_version_string(void);

/* The binary interface's number: the shared library's soname is
 * libtokitai_jit.so.<TK_ABI_VERSION>. It changes only when a program built
 * against an older header could misbehave with the newer library (a call
 * removed or changed, a field moved); appending a field to a sized struct
 * (below) or adding a call does not change it. docs/abi.md has the policy. */
#define TK_ABI_VERSION 1
TK_API unsigned tk_abi_version(void);

/* --------------------------------------------------------- sized structs
 *
 * Every struct the library fills for the caller (tk_context_stats,
 * tk_cache_stats, tk_cache_push_counts, tk_kernel_info, tk_kernel_params,
 * tk_check_report, tk_tune_report) begins with struct_size. The caller sets it to sizeof the struct as its header
 * declares it, for example
 *
 *     tk_context_stats s = TK_STRUCT_INIT(tk_context_stats);
 *     tk_context_get_stats(ctx, &s);
 *
 * The library writes no more than struct_size bytes, so a program compiled
 * against an older header (a smaller struct) keeps working with a newer
 * library, and sets struct_size to the bytes it wrote: the smaller of the
 * caller's size and its own, so a newer program running on an older library
 * can tell which fields were filled (offsetof(field) + sizeof field <=
 * struct_size). New fields are only ever appended. A struct_size smaller than
 * sizeof(size_t) (zero: a struct that was not initialised) is
 * TK_INVALID_ARGUMENT. Structs the library hands to a callback
 * (tk_cache_entry_info) carry the library's own size the same way. Input
 * structs (tk_kernel_desc, tk_define, tk_header) keep the zero-initialise
 * rule instead. */
#ifdef __cplusplus
#define TK_STRUCT_INIT(type) ([] { type tk__v{}; tk__v.struct_size = sizeof(type); return tk__v; }())
#else
#define TK_STRUCT_INIT(type) ((type){.struct_size = sizeof(type)})
#endif

/* ----------------------------------------------------------------- status */

/* One list generates the enum and tk_status_str(). Values are fixed forever:
 * new statuses are appended, none is renumbered. */
#define TK_STATUS_LIST(X)                                                                  \
    X(OK, 0, "success")                                                                    \
    X(INVALID_ARGUMENT, 1, "invalid argument")                                             \
    X(OUT_OF_MEMORY, 2, "out of memory")                                                   \
    X(IO_ERROR, 3, "input/output error")                                                   \
    X(NOT_FOUND, 4, "not found")                                                           \
    X(CORRUPT, 5, "corrupt data")                                                          \
    X(BACKEND_UNAVAILABLE, 6, "backend library or symbol unavailable")                     \
    X(NO_DEVICE, 7, "no usable device")                                                    \
    X(UNSUPPORTED, 8, "unsupported")                                                       \
    X(COMPILE_FAILED, 9, "kernel compilation failed")                                      \
    X(LOAD_FAILED, 10, "code object could not be loaded")                                  \
    X(LAUNCH_FAILED, 11, "kernel launch failed")                                           \
    X(DEVICE_ERROR, 12, "device runtime error")                                            \
    X(MISALIGNED, 13, "pointer or leading dimension not aligned")                          \
    X(OVERFLOW, 14, "size arithmetic overflows")                                           \
    X(OUT_OF_TOLERANCE, 15, "result outside tolerance")                                    \
    X(INTERNAL, 16, "internal error")                                                      \
    X(TIMEOUT, 17, "timed out")

typedef enum tk_status {
#define TK__STATUS_ENUM(name, value, text) TK_##name = value,
    TK_STATUS_LIST(TK__STATUS_ENUM)
#undef TK__STATUS_ENUM
} tk_status;

/* A static string describing the status; "unknown status" for values not in
 * the list. Never NULL. */
TK_API const char *tk_status_str(tk_status status);

/* ---------------------------------------------------------------- logging */

typedef enum tk_log_level {
    TK_LOG_DEBUG = 0,
    TK_LOG_INFO = 1,
    TK_LOG_WARN = 2,
    TK_LOG_ERROR = 3
} tk_log_level;

/* Called from whichever thread produced the message; msg is borrowed for the
 * call. Must be thread-safe if the context is used from several threads. */
typedef void (*tk_log_fn)(void *user, tk_log_level level, const char *msg);

/* ----------------------------------------------------------------- config */

typedef enum tk_backend_kind {
    TK_BACKEND_AUTO = 0, /* the first backend with a device: CUDA, then HIP */
    TK_BACKEND_CUDA = 1, /* NVIDIA: driver API + NVRTC, loaded with dlopen */
    TK_BACKEND_HIP = 2,  /* AMD: HIP runtime + hipRTC + comgr, loaded with dlopen */
    TK_BACKEND_STUB = 3  /* testing: compiles nothing real, counts calls */
} tk_backend_kind;

/* Specialisation policy of the operators (what each op bakes, per op, is
 * written down in tokitai/ops.h, "Specialisation policies"). */
typedef enum tk_policy {
    TK_POLICY_EXACT = 0,   /* every dimension baked, the moving ones too: a compile
                            * per distinct shape (per token count in a MoE step) */
    TK_POLICY_GENERIC = 1, /* nothing baked: one compile per variant, any shape */
    TK_POLICY_STABLE = 2   /* the default: the dimensions a model keeps fixed
                            * (weights, vocabulary, hidden size) baked, the ones that
                            * move every step (tokens, rows) at run time */
} tk_policy;

/* How an operator call gets a kernel that is not ready (not in memory, not
 * on disk). */
typedef enum tk_build_mode {
    /* The default: when a more generic kernel that serves the call is
     * available, the call runs with it at once and the specialised one is
     * built by a background worker; later calls use it once it is ready.
     * The caller waits only when no usable kernel exists at all. */
    TK_BUILD_ASYNC = 0,
    /* Every call compiles (and waits for) the kernel it prefers. */
    TK_BUILD_SYNC = 1
} tk_build_mode;

/* Options for a context or a cache. Not thread-safe; may be destroyed as soon
 * as the context or cache using it has been created (everything is copied). */
typedef struct tk_config tk_config;

TK_API tk_status tk_config_create(tk_config **out);
TK_API void tk_config_destroy(tk_config *cfg);

/* Cache root. NULL restores the default: $TOKITAI_JIT_CACHE_DIR, else
 * $XDG_CACHE_HOME/tokitai-jit, else $HOME/.cache/tokitai-jit. */
TK_API tk_status tk_config_set_cache_dir(tk_config *cfg, const char *dir);
/* Read-only lower tiers searched after the user cache: a ':'-separated list of
 * roots, in order; the word "shipped" in it stands for the tier shipped with
 * the library (tk_cache_shipped_tier); "" or "none": no read-only tier at
 * all. NULL restores the default: $TOKITAI_JIT_CACHE_PATH (the same syntax,
 * absolute paths only), else "shipped". A tier that does not exist is
 * empty; one writable by others is refused (logged once). */
TK_API tk_status tk_config_set_cache_lower(tk_config *cfg, const char *paths);
/* Size limit of the user cache in bytes; 0 restores the default:
 * $TOKITAI_JIT_CACHE_MAX_SIZE ("500M", "2G"), else the cache's own limit
 * (tk_cache_set_max_size), else 5 GiB. */
TK_API tk_status tk_config_set_cache_max_size(tk_config *cfg, uint64_t bytes);
/* Never write to the user cache (read it only). */
TK_API tk_status tk_config_set_cache_read_only(tk_config *cfg, int read_only);
/* No disk cache at all: every first use in a process compiles
 * ($TOKITAI_JIT_CACHE_DISABLE=1 does the same). */
TK_API tk_status tk_config_set_cache_disabled(tk_config *cfg, int disabled);
/* Which backend ($TOKITAI_JIT_BACKEND=cuda|hip|stub overrides AUTO only). */
TK_API tk_status tk_config_set_backend(tk_config *cfg, tk_backend_kind kind);
/* Device ordinal within the backend (default 0). */
TK_API tk_status tk_config_set_device(tk_config *cfg, int ordinal);
/* Offline target ("sm_90", "gfx90a", "gfx90a:sramecc+:xnack-"): the context
 * compiles for it with no device present and cannot launch. NULL: the device. */
TK_API tk_status tk_config_set_target(tk_config *cfg, const char *target);
/* Operator specialisation policy (default TK_POLICY_STABLE;
 * $TOKITAI_JIT_POLICY=exact|stable|generic overrides the default only). */
TK_API tk_status tk_config_set_policy(tk_config *cfg, tk_policy policy);
/* Operator build mode (default TK_BUILD_ASYNC; $TOKITAI_JIT_BUILD=sync|async
 * overrides the default only). User kernels (tk_kernel_get) always build
 * synchronously: the library has no fallback for them. */
TK_API tk_status tk_config_set_build_mode(tk_config *cfg, tk_build_mode mode);
/* Background builds: at most `workers` threads (0: the default, 2; always 1
 * on the HIP backend, whose hipRTC serialises compiles in a process) and at
 * most `queue` builds waiting (0: the default, 64). A request beyond the
 * queue is dropped, not waited for: the call runs on its fallback and the
 * kernel is asked for again by a later call. */
TK_API tk_status tk_config_set_build_limits(tk_config *cfg, unsigned workers, unsigned queue);
/* Log callback; user is passed back unchanged and must outlive every context
 * made from this config. NULL disables the callback. */
TK_API tk_status tk_config_set_log(tk_config *cfg, tk_log_fn fn, void *user);
/* Minimum level passed to the callback (default TK_LOG_WARN). */
TK_API tk_status tk_config_set_log_level(tk_config *cfg, tk_log_level level);

/* Remote tier: a Redis server shared by a fleet, asked after the memory
 * table, the user cache and the read-only tiers miss, before compiling. A
 * value from it is checked like a disk entry (structure, checksum, full key
 * material; with a key, its HMAC-SHA256 signature) and written to the user
 * cache; a local compile is published to it. A lease in Redis (SET NX with
 * an expiry) makes processes of the fleet asking for the same new kernel
 * compile it once: the others wait (bounded) for the result. Server trouble
 * (down, slow, full, bad values) costs at most one timeout per breaker
 * period and is never an error: the lookup goes on as a miss. A context
 * whose user cache is disabled or read-only reads the remote but neither
 * publishes nor takes leases. Off by default; needs a build with hiredis and
 * libcrypto (tk_cache_remote_describe says when it is not).
 *
 * url: "redis://[[user]:password@]host[:port][/db]" (port 6379, db 0 by
 * default) or "unix:///path/to/socket[?db=N]"; NULL restores the default
 * ($TOKITAI_JIT_REMOTE, else none); "" turns the remote off. A malformed
 * URL is TK_INVALID_ARGUMENT. */
TK_API tk_status tk_config_set_remote(tk_config *cfg, const char *url);
/* Shared secret (copied, len bytes, at most 4096) for signing published
 * values and refusing unsigned or mismatched ones. NULL restores the default
 * ($TOKITAI_JIT_REMOTE_KEY, else none; a longer one there is an error of
 * tk_context_create and tk_cache_open, never "no key"); a non-NULL key of
 * length 0: none, whatever the environment says. */
TK_API tk_status tk_config_set_remote_key(tk_config *cfg, const void *key, size_t len);
/* Connect and per-read/write timeouts in milliseconds; 0 restores a default
 * ($TOKITAI_JIT_REMOTE_CONNECT_TIMEOUT_MS / $TOKITAI_JIT_REMOTE_IO_TIMEOUT_MS,
 * else 50 ms each). */
TK_API tk_status tk_config_set_remote_timeouts(tk_config *cfg, unsigned connect_ms, unsigned io_ms);
/* Compile lease: its expiry (a crashed holder's lease lapses after it) and
 * how long another process waits for the holder's result before compiling
 * itself; 0 restores a default ($TOKITAI_JIT_REMOTE_LEASE_MS /
 * $TOKITAI_JIT_REMOTE_WAIT_MS, else 60000 / 20000 ms). */
TK_API tk_status tk_config_set_remote_lease(tk_config *cfg, unsigned lease_ms, unsigned wait_ms);

/* ------------------------------------------------------- resource metadata */

/* What the compiler reports for one kernel. -1 where unknown. Embedded in
 * tk_cache_entry_info and tk_kernel_info, so its layout is frozen: new
 * resource figures are appended to those structs instead. */
typedef struct tk_resource_usage {
    int32_t registers;      /* NVIDIA registers per thread; AMD VGPRs */
    int32_t sgprs;          /* AMD scalar registers */
    int32_t agprs;          /* AMD accumulation registers */
    int32_t shared_bytes;   /* static shared memory / LDS per block */
    int32_t local_bytes;    /* local memory / private segment (scratch) per thread */
    int32_t spill_count;    /* spilled registers (AMD: SGPR + VGPR spills; NVIDIA: spill stores) */
    int32_t wavefront_size; /* 32 or 64 */
    int32_t kernarg_bytes;  /* size of the argument block */
    int32_t max_threads;    /* maximum threads per block the code allows */
} tk_resource_usage;

/* ------------------------------------------------------------ environment */

/* Checks every TOKITAI_JIT_* variable that is set against the values the
 * library accepts (docs/environment.md) and calls fn (may be NULL) for each
 * one it refuses and for each TOKITAI_JIT_* name nothing in tokitai-jit
 * reads. name, value and why are borrowed for the call. fatal: what reads
 * that value refuses to start (tk_context_create, and tk_cache_open for the
 * remote key), as a default would be dangerous; the others are ignored, the
 * default used, with a warning on the log of each context created (and,
 * for the cache's variables, of each tk_cache_open handle). Returns the
 * number of problems. Thread-safe as getenv is. */
typedef void (*tk_env_problem_fn)(void *user, const char *name, const char *value,
                                  const char *why, int fatal);
TK_API unsigned tk_env_check(tk_env_problem_fn fn, void *user);

/* ------------------------------------------------------------------ cache */

/* A handle on an on-disk cache, for tools: list, verify, prune, clear.
 * Thread-safe. Opening never fails because of cache trouble unless the call
 * says so: a missing root is reported by tk_cache_list as an empty cache. */
typedef struct tk_cache tk_cache;

/* Opens the cache the config names (NULL: defaults). */
TK_API tk_status tk_cache_open(const tk_config *cfg, tk_cache **out);
TK_API void tk_cache_close(tk_cache *cache);
/* Root folder in use; borrowed, valid until tk_cache_close. */
TK_API const char *tk_cache_root(const tk_cache *cache);
/* The read-only tiers the handle searches after the user cache, in order, as
 * a ':'-separated list of their roots ("" when none); borrowed, valid until
 * tk_cache_close. */
TK_API const char *tk_cache_lower_tiers(const tk_cache *cache);
/* The read-only tier shipped with the library: the fallback kernels of the
 * operators (tk_op_precompile_fallbacks), precompiled by the build for its
 * targets (CMake's TK_SHIPPED_ARCHS) so that a program whose user cache is
 * empty runs its first operator calls without waiting for a compile. Found
 * from the file holding the library's code (libtokitai_jit.so, or the
 * program the static library is linked into), in DIR/share/tokitai-jit/cache
 * (a build tree) and DIR/../share/tokitai-jit/cache (an installed tree) with
 * DIR that file's folder: a ':'-separated list of those that are folders,
 * "" when neither is. Static, found once per process; thread-safe. The
 * default read-only tier of every context and cache handle
 * (tk_config_set_cache_lower). */
TK_API const char *tk_cache_shipped_tier(void);
/* Message of the last failing call on this handle; never NULL. */
TK_API const char *tk_cache_last_error(const tk_cache *cache);

/* Metadata of one entry; every pointer is borrowed for the visit only.
 * struct_size is set by the library (see "sized structs"): a field appended
 * after the ones a program knows is simply not read by it, and a program
 * reads a newer field only when struct_size covers it. */
typedef struct tk_cache_entry_info {
    size_t struct_size;
    const char *key_hex;   /* 32 hex digits: the XXH3-128 fingerprint */
    const char *path;      /* file holding the entry */
    const char *kernel;    /* entry point: extern "C" name or C++ name expression */
    const char *source;    /* source name ("gemm_f16", the source_label, or "user:<hash>") */
    const char *backend;   /* "cuda", "hip", "stub" */
    const char *arch;      /* full target id */
    const char *compiler;  /* compiler identity */
    const char *options;   /* options and defines, canonical order, space-separated */
    uint64_t payload_size; /* bytes of code object */
    uint64_t file_size;    /* bytes on disk */
    int64_t created;       /* seconds since the epoch */
    int64_t last_used;     /* seconds since the epoch */
    tk_resource_usage resources;
    int read_only_tier;    /* 1 when the entry sits in a lower (read-only) tier */
    /* 32 hex digits of the XXH3-128 of the kernel's whole source (prelude
     * included), the name of its kept copy <root>/<format>/src/<hex>.zst;
     * NULL when the source is short enough to sit in the key itself, or the
     * entry has none. tk_cache_entry_source shows the source either way. */
    const char *source_hash;
} tk_cache_entry_info;

/* Return non-zero to stop the walk early. */
typedef int (*tk_cache_visit_fn)(void *user, const tk_cache_entry_info *info);

/* Visits every readable entry (metadata only, payloads are not read). */
TK_API tk_status tk_cache_list(tk_cache *cache, tk_cache_visit_fn visit, void *user);

/* A sized struct: set struct_size first (TK_STRUCT_INIT). */
typedef struct tk_cache_stats {
    size_t struct_size;
    uint64_t entries;
    uint64_t bytes;
    uint64_t max_bytes;
    uint64_t temp_files; /* leftovers of interrupted writes */
    uint64_t bad_files;  /* files that do not parse as entries */
    /* Counted across processes since the last tk_cache_zero_stats, as each
     * context using this cache was destroyed (nothing is written per
     * lookup; a process killed before then adds nothing). */
    uint64_t hits;            /* kernels read from the cache (disk or remote) */
    uint64_t misses;          /* lookups that ended in a compile */
    uint64_t compiles;        /* successful compiles */
    double compile_seconds;   /* time in the compiler */
    uint64_t fallback_calls;  /* operator calls served by a generic kernel meanwhile */
    uint64_t errors;          /* failed compiles, refused loads, cache trouble */
    int64_t stats_since;      /* last tk_cache_zero_stats, seconds since the epoch; 0: never */
    /* Kept sources (tk_cache_entry_source): they count toward max_bytes
     * with the entries' bytes, and go when no entry names them any more. */
    uint64_t source_bytes;
} tk_cache_stats;

TK_API tk_status tk_cache_get_stats(tk_cache *cache, tk_cache_stats *out);
/* Sets the persistent counters of tk_cache_stats to zero (for every
 * process). TK_IO_ERROR when the cache is not writable. */
TK_API tk_status tk_cache_zero_stats(tk_cache *cache);
/* Sets the cache's own size limit, kept in <root>/config (0: back to the
 * default). It applies to every later open that sets no limit itself
 * (tk_config_set_cache_max_size and TOKITAI_JIT_CACHE_MAX_SIZE come first),
 * and to this handle at once. */
TK_API tk_status tk_cache_set_max_size(tk_cache *cache, uint64_t max_bytes);

/* Called for each bad file found by tk_cache_verify; path and why are borrowed. */
typedef void (*tk_cache_bad_fn)(void *user, const char *path, const char *why);

/* Reads every entry in full and checks structure, key and checksum. Writes the
 * number of bad entries to *n_bad. Removes nothing. */
TK_API tk_status tk_cache_verify(tk_cache *cache, tk_cache_bad_fn bad, void *user, uint64_t *n_bad);
/* Removes least-recently-used entries until the cache holds at most max_bytes
 * (0: the configured limit; kept sources count toward it), plus leftovers
 * of interrupted writes and the kept sources no entry names any more. */
TK_API tk_status tk_cache_prune(tk_cache *cache, uint64_t max_bytes, uint64_t *n_removed);
/* Removes every entry of the user cache (lower tiers are never touched). */
TK_API tk_status tk_cache_clear(tk_cache *cache, uint64_t *n_removed);

/* Bundles, to ship a warm cache: tk_cache_export packs the entries that
 * select accepts (NULL: all), and the kept sources they name, into one file
 * at path (written atomically; *n_exported counts the entries);
 * tk_cache_import verifies every entry of a bundle (structure, key,
 * checksum) and every source (against its fingerprint) and adds the good
 * ones to the user cache; each bad one is reported through bad and counted
 * in *n_rejected. A bundle that is not a bundle at all is TK_CORRUPT, and
 * so is one whose records cannot all be found (cut short, or a record
 * shorter than an entry header: the entries before it stay imported). A
 * path that is not a regular file (a FIFO, a device) is TK_IO_ERROR,
 * without waiting on it. Bytes after the declared records are reported
 * through bad with the bundle's own path, not counted. Counts may be NULL. */
typedef int (*tk_cache_select_fn)(void *user, const tk_cache_entry_info *info);
TK_API tk_status tk_cache_export(tk_cache *cache, const char *path, tk_cache_select_fn select,
                                 void *user, uint64_t *n_exported);
TK_API tk_status tk_cache_import(tk_cache *cache, const char *path, tk_cache_bad_fn bad, void *user,
                                 uint64_t *n_imported, uint64_t *n_rejected);
/* Removes the entries of the user cache that select accepts (lower tiers
 * are never touched), then, as tk_cache_prune does, the kept sources no
 * entry names any more; *n_removed (may be NULL) counts the entries. tokitai-jit --precompile
 * --prune-others uses it to keep exactly the kernels of its run. */
TK_API tk_status tk_cache_remove(tk_cache *cache, tk_cache_select_fn select, void *user,
                                 uint64_t *n_removed);

/* The source of one entry as the compiler saw it (prelude included) and
 * its metadata (options and defines in info->options). key is the entry's
 * 32 hex digits, or a prefix of them that names one entry (as --list
 * shows it); the user cache is searched, then the read-only tiers. fn is
 * called once, with every pointer borrowed for the call: source is
 * NUL-terminated, len bytes long, or NULL when the entry is found but its
 * source is not kept. The source of an entry is kept (compressed, once
 * per content) when the entry is compiled into this cache or imported
 * from a bundle; a hit from the remote tier does not bring it.
 * TK_OK: fn saw the source. TK_NOT_FOUND: no such entry, or (after fn saw
 * source NULL) its source is not kept. TK_INVALID_ARGUMENT: key is not 1-32
 * hex digits, or a prefix that names several entries. Messages in
 * tk_cache_last_error. */
typedef void (*tk_cache_source_fn)(void *user, const tk_cache_entry_info *info,
                                   const char *source, size_t len);
TK_API tk_status tk_cache_entry_source(tk_cache *cache, const char *key, tk_cache_source_fn fn,
                                       void *user);

/* Parses "123", "500K", "500M", "2G", "1T" (powers of 1024). */
TK_API tk_status tk_parse_size(const char *text, uint64_t *out);

/* The remote tier of a cache handle (tk_config_set_remote, or
 * $TOKITAI_JIT_REMOTE), for tools. Each call asks the server now (a tripped
 * circuit breaker is reset first). Statuses shared by all four:
 * TK_NOT_FOUND (no remote configured), TK_UNSUPPORTED (built without hiredis
 * or libcrypto), TK_IO_ERROR (server unreachable or refusing commands);
 * details in tk_cache_last_error. */

/* A few lines about the remote (URL without its password, signing,
 * timeouts, whether the server answers and its version) into buf (size
 * bytes, always NUL-terminated). TK_OK when the server answers. */
TK_API tk_status tk_cache_remote_describe(tk_cache *cache, char *buf, size_t size);
/* Visits every good value the server holds for this library version and
 * cache format (read in full and checked). info->path is the Redis key,
 * file_size the value's size, last_used 0, read_only_tier 0. */
TK_API tk_status tk_cache_remote_list(tk_cache *cache, tk_cache_visit_fn visit, void *user);
/* entries: good values; bytes: all values of this version; max_bytes: the
 * server's maxmemory (0: none or not readable); temp_files: compile leases
 * held now; bad_files: values a lookup would refuse, keys of another Redis
 * type and values over the size limit (not read) included. */
TK_API tk_status tk_cache_remote_get_stats(tk_cache *cache, tk_cache_stats *out);
/* Uploads the entries of the cache (user and read-only tiers; bundle NULL)
 * or of a bundle file (tk_cache_export's format), each checked first
 * (structure, checksum, key) and signed when a key is set. A key whose
 * value on the server verifies (as a lookup would check it) is left alone
 * (*n_present); anything else there is overwritten. Bad entries are reported through
 * bad and counted in *n_rejected. Counts may be NULL. */
TK_API tk_status tk_cache_remote_push(tk_cache *cache, const char *bundle, tk_cache_bad_fn bad,
                                      void *user, uint64_t *n_pushed, uint64_t *n_present,
                                      uint64_t *n_rejected);

/* tk_cache_remote_list, and the number of keys it skipped (values a lookup
 * would refuse, keys of another Redis type, oversized values) in
 * *n_skipped (may be NULL). */
TK_API tk_status tk_cache_remote_list_counted(tk_cache *cache, tk_cache_visit_fn visit,
                                              void *user, uint64_t *n_skipped);

/* What a push did. A sized struct: set struct_size first (TK_STRUCT_INIT). */
typedef struct tk_cache_push_counts {
    size_t struct_size;
    uint64_t pushed;   /* sent: the server held nothing at the key */
    uint64_t present;  /* the server held a value that verifies: left alone */
    uint64_t replaced; /* the server held something that does not verify (not a
                        * value, another type, another key's entry, a signature
                        * under another secret, oversized): overwritten */
    uint64_t rejected; /* local entries that do not verify: not sent */
} tk_cache_push_counts;

/* tk_cache_remote_push with the replaced values counted apart (the older
 * call counts them in *n_pushed). out may be NULL. */
TK_API tk_status tk_cache_remote_push_report(tk_cache *cache, const char *bundle,
                                             tk_cache_bad_fn bad, void *user,
                                             tk_cache_push_counts *out);

/* ---------------------------------------------------------------- context */

/* A context owns one backend, one device (or an offline target), an
 * in-memory kernel table, a handle on the disk cache and the last error.
 * Thread-safe: several threads may get and launch kernels on one context.
 * tk_context_last_error() then returns the message of whichever call failed
 * last; use one context per thread when messages must not mix. */
typedef struct tk_context tk_context;

/* cfg may be NULL (defaults) and is copied. Fails with TK_NO_DEVICE or
 * TK_BACKEND_UNAVAILABLE when no device and no offline target is available;
 * the reason (naming a missing library or symbol) is written to err when err
 * is not NULL (err_size bytes, always NUL-terminated). */
TK_API tk_status tk_context_create(const tk_config *cfg, tk_context **out, char *err,
                                   size_t err_size);
TK_API void tk_context_destroy(tk_context *ctx);
/* Message of the last failure, including a compiler log; never NULL; borrowed,
 * valid until the next failing call on the context. */
TK_API const char *tk_context_last_error(const tk_context *ctx);
/* "cuda", "hip" or "stub"; borrowed. */
TK_API const char *tk_context_backend_name(const tk_context *ctx);
/* Full target id of the device or offline target; borrowed. */
TK_API const char *tk_context_target(const tk_context *ctx);
/* Compiler identity used in cache keys; borrowed. */
TK_API const char *tk_context_compiler(const tk_context *ctx);
/* Policy the context was created with. */
TK_API tk_policy tk_context_policy(const tk_context *ctx);

/* Counters since the context was created (or since tk_context_reset_stats).
 * A sized struct: set struct_size first (TK_STRUCT_INIT). */
typedef struct tk_context_stats {
    size_t struct_size;
    uint64_t memory_hits;   /* kernel found in the in-memory table */
    uint64_t disk_hits;     /* code object read from the disk cache */
    uint64_t compiles;      /* compiler invocations */
    uint64_t compile_failures;
    uint64_t loads;         /* module loads */
    uint64_t load_failures; /* entries the driver refused */
    uint64_t cache_errors;  /* corrupt entries, unwritable folders... */
    double compile_seconds; /* total time in the compiler */
    /* Dynamic shapes (tk_build_mode). A training loop asserts "no waits after
     * warm-up" with waits and wait_seconds. */
    uint64_t fallback_calls; /* operator calls served by a more generic kernel
                              * while the preferred one was not ready */
    uint64_t builds_queued;  /* background builds accepted */
    uint64_t builds_done;    /* background builds finished (failed ones included) */
    uint64_t builds_pending; /* queued or running now (not reset) */
    uint64_t waits;          /* calls whose thread compiled, or waited for a compile */
    double wait_seconds;     /* total time those calls spent on it */
    uint64_t sync_compiles;  /* compiles on callers' threads (compiles - background) */
    uint64_t builds_failed;  /* background builds that failed (never retried) */
    uint64_t builds_dropped; /* requests refused because the queue was full */
    /* ---- remote tier; a remote hit also counts in disk_hits,
     * since the value is written to and loaded like a disk entry ---- */
    uint64_t remote_hits;      /* values taken from the remote */
    uint64_t remote_misses;    /* keys the remote did not hold */
    uint64_t remote_errors;    /* server down, timed out, or an error reply */
    uint64_t remote_rejected;  /* values refused: corrupt, foreign, oversized, unsigned, forged */
    uint64_t remote_publishes; /* local compiles sent to the remote */
    /* ---- end remote tier ---- */
    /* Operator workspace (device scratch of GEMM split-K partials and of the
     * embedding backward's sort; tokitai/ops.h, "Workspace"): one buffer per
     * (context, stream), grown to a power of two when a call needs more and
     * kept until the context is destroyed, so a steady loop allocates
     * nothing. workspace_bytes and workspace_peak are state, not counters:
     * tk_context_reset_stats sets the peak to the bytes held now. */
    uint64_t workspace_bytes;  /* device bytes held by workspaces now, all streams */
    uint64_t workspace_peak;   /* the most they held at once */
    uint64_t workspace_allocs; /* device allocations made for them (growths included) */
} tk_context_stats;

TK_API tk_status tk_context_get_stats(const tk_context *ctx, tk_context_stats *out);
TK_API void tk_context_reset_stats(tk_context *ctx);

/* Blocks until no background build is queued or running on ctx (operators in
 * TK_BUILD_ASYNC mode), so that every kernel asked for so far is ready (or
 * has failed to build; failures are logged and counted in builds_failed).
 * timeout_ms < 0: no limit. Returns TK_OK when idle, TK_TIMEOUT when the
 * timeout passed first. Thread-safe. */
TK_API tk_status tk_context_wait_builds(tk_context *ctx, int timeout_ms);

/* ---------------------------------------------------------------- kernels */

/* A specialisation constant, passed to the compiler as -Dname=value. */
typedef struct tk_define {
    const char *name;
    const char *value; /* NULL: -Dname */
} tk_define;

/* A header held in memory: `#include "name"` (or <name>) in a user source
 * finds it before any -I folder. Both strings borrowed for the call. */
typedef struct tk_header {
    const char *name; /* as written in the #include, such as "tiles.cuh" */
    const char *text; /* null-terminated contents; part of the cache key */
} tk_header;

/* What to compile. Every pointer is borrowed for the call. A descriptor
 * zero-initialised before its fields are set keeps working as new fields are
 * appended.
 *
 * entry: the kernel's name as written in the source ("layernorm", whether
 * or not the function is extern "C"), or a C++ name expression naming one
 * __global__ function: a template instance ("fill<4, float>",
 * "ns::gemm<128, true>"), a qualified name ("ns::k"), or one overload
 * ("static_cast<void (*)(float *)>(k)"). A name expression is compiled
 * through the compiler's name-expression API (nvrtcAddNameExpression /
 * hiprtcAddNameExpression). For a user source a plain identifier is
 * registered there too, up front, so that the one compile serves both an
 * extern "C" function (its symbol is the name) and a C++ one (its symbol is
 * the mangled name); this costs nothing measurable when the name resolves.
 * When it does not (no such function, or an overloaded name), the compiler's
 * complaint about the name alone is not an error: the source is compiled a
 * second time without it (the only case that pays two compiles), and the
 * kernel is looked up by its plain name, failing with TK_NOT_FOUND and a
 * message listing the kernels the code object does contain ("did you mean")
 * and, for an overload, how to pick one. The lowered (mangled) name is
 * stored in the cache entry, so a disk hit needs no compiler; listings
 * (tokitai-jit --list, tk_cache_list) show entry as written. Embedded
 * sources take plain extern "C" names only. docs/user-kernels.md has more.
 *
 * User headers (user sources only). The library resolves every
 * `#include "x"` / `#include <x>` of the source and of the headers it finds
 * itself, in this order: for "x" in a header read from disk, that header's
 * folder; the in-memory headers (by exact name); each -I folder of options
 * ("-Idir", "-I dir", "--include-path=dir") in order. A pre-include option
 * ("--pre-include=x", "-include x") is resolved the same way, as an
 * `#include "x"` before the first line. What it finds is handed
 * to the compiler as in-memory headers, so the compiler reads nothing else
 * but its own toolkit headers; an include found nowhere is left to the
 * compiler (toolkit headers: cuda_fp16.h, cooperative_groups.h, <cuda/std/...>,
 * part of the compiler identity). The cache entry records each lookup's result
 * (file and XXH3-128 of its contents, or "not found"); a disk hit re-runs the
 * lookups and accepts the entry only when every result is unchanged: an
 * edited header, a new file shadowing another earlier in the search order, or
 * a reordered -I list gives exactly one fresh compile. A computed include
 * (`#include MACRO`) cannot be followed: such a kernel is compiled, never
 * stored, and the log says so. A kernel already in a context's memory table
 * is reused as is: editing a header on disk affects new contexts (and new
 * processes), not kernels a context already holds. */
typedef struct tk_kernel_desc {
    /* Exactly one of source_name (a source embedded from kernel_src/, such as
     * "gemm_f16") or source (user code, null-terminated) is set. */
    const char *source_name;
    const char *source;
    const char *entry; /* extern "C" name or C++ name expression (see above) */
    const tk_define *defines;
    size_t n_defines;
    const char *const *options; /* extra compiler options */
    size_t n_options;
    const char *source_label; /* name used in compiler messages and --list (NULL: a default) */
    const tk_header *headers; /* in-memory headers, searched before the -I folders */
    size_t n_headers;
} tk_kernel_desc;

/* A loaded, launchable kernel; owned by its context, valid until the context
 * is destroyed. */
typedef struct tk_kernel tk_kernel;

/* Where the last tk_kernel_get found the kernel. */
typedef enum tk_origin {
    TK_ORIGIN_MEMORY = 0,
    TK_ORIGIN_DISK = 1,
    TK_ORIGIN_COMPILED = 2
} tk_origin;

/* Returns the kernel for the context's device: in-memory table, then disk
 * cache, then compile + store + load. Several threads asking for the same new
 * kernel compile it once. A memory hit hashes no source, does no file I/O and
 * no allocation. Statuses: TK_COMPILE_FAILED (log in last_error),
 * TK_UNSUPPORTED (target unknown to the compiler), TK_LOAD_FAILED,
 * TK_NOT_FOUND (no embedded source of that name, or the entry names no
 * kernel in the compiled code object: not found or overloaded; the message
 * lists the kernels the code object contains, the closest first),
 * TK_INVALID_ARGUMENT. */
TK_API tk_status tk_kernel_get(tk_context *ctx, const tk_kernel_desc *desc, tk_kernel **out);

/* Details of a kernel; strings borrowed for the kernel's lifetime. A sized
 * struct: set struct_size first (TK_STRUCT_INIT). */
typedef struct tk_kernel_info {
    size_t struct_size;
    const char *key_hex;
    const char *entry;
    tk_origin origin;       /* where it came from when first obtained */
    double compile_seconds; /* 0 unless origin is TK_ORIGIN_COMPILED */
    tk_resource_usage resources;
} tk_kernel_info;

TK_API tk_status tk_kernel_get_info(const tk_kernel *kernel, tk_kernel_info *out);

/* What a kernel parameter is, as far as the code object, a C++ function's
 * mangled name or the kernel's declaration in the source tells. */
typedef enum tk_param_kind {
    TK_PARAM_UNKNOWN = 0, /* only size and offset are known: an 8-byte parameter
                           * may be a pointer, a 64-bit integer or a double, a
                           * 4-byte one an int or a float. Nothing may be packed
                           * into it by guessing: the Python binding refuses an
                           * untyped number there (docs/user-kernels.md) */
    TK_PARAM_POINTER = 1,
    TK_PARAM_INT = 2,    /* signed integer (char, short, int, long, long long) */
    TK_PARAM_UINT = 3,   /* unsigned integer, bool */
    TK_PARAM_FLOAT = 4,  /* float, double, __half */
    TK_PARAM_STRUCT = 5  /* another type passed by value (struct, vector type) */
} tk_param_kind;

/* One parameter. Its layout is frozen (the array is indexed); new facts
 * would come as another array appended to tk_kernel_params. */
typedef struct tk_kernel_param {
    uint32_t offset; /* bytes from the start of the argument block */
    uint32_t size;   /* bytes */
    int32_t kind;    /* tk_param_kind */
    uint32_t reserved;
} tk_kernel_param;

/* The parameter layout the compiler recorded for a kernel: NVIDIA from the
 * cubin's per-kernel parameter info (EIATTR_KPARAM_INFO), kinds from the
 * mangled name of a C++ function; AMD from comgr's kernel metadata (.args,
 * hidden arguments left out; pointers marked); the stub backend from the
 * source's signature. Read from the code object, so a kernel loaded from
 * the disk cache or obtained on an offline context has it too. Kinds the
 * object leaves unknown (an extern "C" function) are read from the
 * kernel's declaration in the user source and its in-memory headers
 * (`__global__ ... name(...)`: builtin and <stdint.h> scalars, __half,
 * pointers and arrays, structs and vector types, through -D defines,
 * #define, typedef and using), used only when its parameter count and
 * every size it implies match the object's; what the reading cannot
 * settle (a template parameter, a reference, a type from a header on disk,
 * definitions that disagree across #if branches, bfloat16) stays
 * TK_PARAM_UNKNOWN. A sized struct: set struct_size first (TK_STRUCT_INIT). */
typedef struct tk_kernel_params {
    size_t struct_size;
    size_t n_params;
    const tk_kernel_param *params; /* n_params entries in order; borrowed, valid
                                    * for the kernel's lifetime */
} tk_kernel_params;

/* TK_NOT_FOUND when the code object records no parameters for the kernel.
 * Thread-safe; the first call parses the code object (microseconds on
 * NVIDIA, a comgr metadata read on AMD) and, for kinds it leaves unknown,
 * reads the source (under 1 ms per 100 KB, measured), later calls return the
 * same array. */
TK_API tk_status tk_kernel_get_params(const tk_kernel *kernel, tk_kernel_params *out);

/* Enqueues the kernel. stream is the caller's hipStream_t / CUstream /
 * cudaStream_t (NULL: the default stream). args is an array of pointers to
 * the argument values, as for cuLaunchKernel. */
TK_API tk_status tk_kernel_launch(tk_context *ctx, const tk_kernel *kernel, const unsigned grid[3],
                                  const unsigned block[3], unsigned shared_bytes, void *stream,
                                  void **args);

/* Compiles for the context's target (device or offline target) and stores the
 * result in the cache without loading it: the precompile path. *origin tells
 * whether it was already cached (TK_ORIGIN_DISK) or compiled. origin may be NULL. */
TK_API tk_status tk_kernel_precompile(tk_context *ctx, const tk_kernel_desc *desc, tk_origin *origin);

/* Describes one backend for tools (tokitai-jit --info): library paths,
 * runtime and compiler versions, and each device with its target id, or why
 * the backend is unavailable; several lines of text written into buf (size
 * bytes, always NUL-terminated, truncated if needed). Returns TK_OK when the
 * backend is usable, else the status that makes it unusable
 * (TK_BACKEND_UNAVAILABLE, TK_NO_DEVICE), with the reason in buf. Never
 * fails because of a missing library. TK_BACKEND_AUTO is TK_INVALID_ARGUMENT. */
TK_API tk_status tk_backend_describe(tk_backend_kind kind, char *buf, size_t size);

/* Names of the embedded sources, NULL-terminated, static. */
TK_API const char *const *tk_embedded_sources(void);

/* ----------------------------------------------------------- device memory */

/* Thin wrappers over the backend's allocator and copies, so that C programs
 * and the tools need no vendor runtime of their own. Pointers are device
 * pointers of the context's device; they interoperate with hipMalloc /
 * cudaMalloc / PyTorch memory. */
TK_API tk_status tk_mem_alloc(tk_context *ctx, size_t bytes, void **out);
TK_API tk_status tk_mem_free(tk_context *ctx, void *ptr);
TK_API tk_status tk_mem_upload(tk_context *ctx, void *dst, const void *src, size_t bytes);
TK_API tk_status tk_mem_download(tk_context *ctx, void *dst, const void *src, size_t bytes);
TK_API tk_status tk_mem_set(tk_context *ctx, void *dst, unsigned char byte, size_t bytes);
TK_API tk_status tk_stream_sync(tk_context *ctx, void *stream);

/* Event timing: the milliseconds that run(user) enqueues on stream take,
 * measured with device events. */
typedef tk_status (*tk_timed_fn)(void *user);
TK_API tk_status tk_time_on_stream(tk_context *ctx, void *stream, tk_timed_fn run, void *user,
                                   float *out_ms);

#ifdef __cplusplus
}
#endif

#endif /* TOKITAI_TOKITAI_H */
