/*
 * tokitai-jit, the command-line tool. Internal to src/cli; it uses the public
 * API (tokitai/tokitai.h, tokitai/ops.h) only.
 */
#ifndef TK_CLI_CLI_H
#define TK_CLI_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "tokitai/ops.h"
#include "tokitai/tokitai.h"

/* Exit codes: fixed, documented in --help and docs/tool.md. */
#define TK__EXIT_OK 0          /* success */
#define TK__EXIT_FAIL 1        /* bad entries, out of tolerance, failed compiles, I/O */
#define TK__EXIT_USAGE 2       /* unknown option, bad value, invalid manifest */
#define TK__EXIT_NO_DEVICE 3   /* --run without a usable GPU */
#define TK__EXIT_UNAVAILABLE 4 /* a requested target's compiler is missing or does not know it */
#define TK__EXIT_NOT_KEPT 5    /* compiled, but not stored in the cache or not published to the remote */

typedef enum tk__cli_command {
    TK__CMD_NONE = 0,
    TK__CMD_HELP,
    TK__CMD_VERSION,
    TK__CMD_LIST,
    TK__CMD_STATS,
    TK__CMD_VERIFY,
    TK__CMD_PRUNE,
    TK__CMD_CLEAR,
    TK__CMD_INFO,
    TK__CMD_RUN,
    TK__CMD_PRECOMPILE,
    TK__CMD_EXPORT,
    TK__CMD_IMPORT,
    TK__CMD_PUSH,
    TK__CMD_TUNE,
    TK__CMD_ZERO_STATS,  /* -z, --zero-stats */
    TK__CMD_SET_MAX_SIZE, /* -M SIZE alone: the cache's own limit */
    TK__CMD_SOURCE        /* --source KEY */
} tk__cli_command;

/* Everything the command line said; strings borrowed from argv. */
typedef struct tk__cli_opts {
    tk__cli_command command;
    const char *cache_dir; /* NULL: the library's default */
    int json;
    int verbose;
    int have_max_size;
    uint64_t max_size;
    const char *run_op; /* --run OP */
    const char *shape;  /* --shape DIMS */
    uint64_t seed;
    int have_policy;
    tk_policy policy;
    int have_build_mode;
    tk_build_mode build_mode; /* --build-mode */
    const char *manifest;  /* --manifest FILE; NULL: the embedded default */
    const char *arch_list; /* --arch LIST */
    const char *ops_list;  /* --ops LIST */
    int jobs;              /* -j N; 0: number of CPUs */
    int dry_run;
    int fallbacks;    /* --precompile --fallbacks: the operators' fallback kernels, no manifest */
    int prune_others; /* --precompile --prune-others: then keep only the run's kernels */
    const char *file; /* --export / --import FILE */
    const char *remote; /* --remote URL */
    const char *bundle; /* --push --bundle FILE */
    const char *classes; /* --tune --classes all|manifest */
    /* --list: filters, order, amount */
    const char *kernel_glob; /* --kernel GLOB */
    int64_t older_than;      /* --older-than AGE, seconds; 0: none */
    const char *sort;        /* --sort FIELD */
    uint64_t limit;          /* --limit N; 0: none */
    int all_rows;            /* --all: one row per entry even for a large cache */
} tk__cli_opts;

/* Largest manifest or kernel source file the tool reads. */
#define TK__CLI_MAX_TEXT_FILE ((uint64_t)64 << 20)

/* Opens path for reading, refusing what is not a regular file (a FIFO, a
 * device: opened non-blocking, then checked) or is larger than max bytes
 * (0: any size); the descriptor, or -1 with "path: why" in err. */
int tk__cli_open_regular(const char *path, uint64_t max, uint64_t *size, char *err,
                         size_t err_size);
/* Reads a whole regular file of at most max bytes into *out (malloc'd,
 * NUL-terminated, *len bytes); 0, or -1 with "path: why" in err. */
int tk__cli_read_regular(const char *path, uint64_t max, char **out, size_t *len, char *err,
                         size_t err_size);

/* "tokitai-jit: <message>" on stderr, one line. */
void tk__cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Rejections of a bundle's records (--import, --push), a tk_cache_bad_fn
 * whose user is a tk__cli_capped: "<prefix>: <where>: <why>" for the first
 * TK__CLI_MSG_CAP, then only counted (a hostile bundle can hold millions of
 * bad records); tk__cli_capped_end prints "<prefix>: ... and N more". A
 * message about the bundle as a whole (where is the bundle's own path:
 * bytes after its records, a count it cannot hold) is always shown, as a
 * warning. */
#define TK__CLI_MSG_CAP 20
typedef struct tk__cli_capped {
    const char *prefix;
    const char *bundle; /* the bundle's path */
    uint64_t n;
} tk__cli_capped;
void tk__cli_capped_bad(void *user, const char *where, const char *why);
void tk__cli_capped_end(const tk__cli_capped *c);

/* A config carrying --cache-dir (and nothing else); NULL on allocation failure
 * (message printed). */
tk_config *tk__cli_config(const tk__cli_opts *opts);

/* Writes s as a JSON string literal (quotes included); invalid UTF-8 becomes
 * U+FFFD so the output always parses. NULL writes null. */
void tk__json_str(FILE *f, const char *s);
/* "1.5 MiB" style; buf of at least 32 bytes. */
const char *tk__fmt_size(uint64_t bytes, char *buf, size_t size);
/* Local "YYYY-MM-DD HH:MM", or "-" for 0. */
const char *tk__fmt_time(int64_t t, char *buf, size_t size);
/* UTC "YYYY-MM-DDTHH:MM:SSZ". */
const char *tk__fmt_time_iso(int64_t t, char *buf, size_t size);
/* Seconds from a monotonic clock. */
double tk__now(void);
/* Parses a decimal int64 in [min, max]; 0 on success, -1 otherwise. */
int tk__parse_i64(const char *text, int64_t min, int64_t max, int64_t *out);

/* Backend an offline target belongs to: sm_* / compute_* -> CUDA, gfx* -> HIP,
 * "stub" (the test backend) -> STUB; AUTO when the name says nothing. */
tk_backend_kind tk__target_backend(const char *target);
/* 1 when target is a syntactically valid target name (sm_90, sm_90a, gfx90a,
 * gfx90a:sramecc+:xnack-, and stub: the testing backend's only target). */
int tk__target_name_valid(const char *target);

/* What a cache entry is, for people (label.c). */
typedef struct tk__entry_desc {
    char op[64];     /* the operator it serves ("gemm_f16_grad_a"; "gemm_f16_grad_a/b" for
                      * the gradients' shared split-K reduce), else its source's name */
    unsigned ops;    /* bit (1 << tk_op) of every operator that uses it; 0: none */
    char policy[16]; /* exact, stable, generic (nothing baked: that policy's kernels and
                      * every policy's fallbacks), any (no policy changes it), "-" */
    char label[320]; /* operator, baked dimensions in the operator's terms, variant */
    int user;        /* a user kernel */
    int tuning;      /* a tuning record */
} tk__entry_desc;

void tk__entry_describe(const tk_cache_entry_info *info, tk__entry_desc *out);

/* Commands; each returns an exit code. */
int tk__cmd_list(const tk__cli_opts *opts);
int tk__cmd_stats(const tk__cli_opts *opts);
int tk__cmd_verify(const tk__cli_opts *opts);
int tk__cmd_prune(const tk__cli_opts *opts);
int tk__cmd_clear(const tk__cli_opts *opts);
int tk__cmd_export(const tk__cli_opts *opts);
int tk__cmd_import(const tk__cli_opts *opts);
int tk__cmd_zero_stats(const tk__cli_opts *opts);
int tk__cmd_set_max_size(const tk__cli_opts *opts);
int tk__cmd_source(const tk__cli_opts *opts);
int tk__cmd_info(const tk__cli_opts *opts);
int tk__cmd_run(const tk__cli_opts *opts);
int tk__cmd_precompile(const tk__cli_opts *opts);
int tk__cmd_tune(const tk__cli_opts *opts);
/* The remote tier (cmd_remote.c): --stats / --list with --remote, --push. */
int tk__cmd_remote_stats(const tk__cli_opts *opts);
int tk__cmd_remote_list(const tk__cli_opts *opts);
int tk__cmd_push(const tk__cli_opts *opts);
/* Before --precompile --remote: -1 (message printed) when this build has no
 * remote tier; an unreachable server is only a warning (compiles go on). */
int tk__cmd_remote_check(const tk__cli_opts *opts);

/* The default manifest embedded at build time (manifests/default.tkm). */
extern const char tk__default_manifest[];

#endif /* TK_CLI_CLI_H */
