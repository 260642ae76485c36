/*
 * Precompile manifests: a plain-text list of what to compile
 * (docs/manifests.md). The parser checks everything (operators, dimension
 * names, values, ranges, target names, user kernel files) before anything
 * compiles and names the line and field of the first error.
 */
#ifndef TK_CLI_MANIFEST_H
#define TK_CLI_MANIFEST_H

#include <stddef.h>
#include <stdint.h>

#include "tokitai/ops.h"
#include "tokitai/tokitai.h"

#define TK__MF_MAX_DIMS 4
#define TK__MF_MAX_JOBS 100000

/* A user kernel: `kernel FILE ENTRY [-DNAME[=VALUE]]... [OPTION]...`.
 * FILE and the -I folders are kept as the manifest names them, relative to
 * its folder (or absolute): compiled from the manifest's folder
 * (tk__manifest.base_dir), they name the same files from wherever the tool
 * runs and wherever the tree has moved, and so give the same cache keys. */
typedef struct tk__mf_kernel {
    char *path;   /* FILE as the tool reaches it from the working folder, for messages */
    char *file;   /* FILE as written: its source label */
    char *source; /* the file's text */
    char *entry;
    tk_define *defines;
    char **define_text; /* backing store of defines' strings */
    size_t n_defines;
    char **options; /* -I<FILE's folder> first, then the line's; -I folders as written */
    size_t n_options;
    int line;
} tk__mf_kernel;

/* One (operator, shape), an operator's fallback kernels, or one user
 * kernel. */
typedef struct tk__mf_job {
    int kernel; /* index into kernels, or -1 for an operator */
    int fallbacks; /* 1: op's fallback kernels (tk_op_precompile_fallbacks); no dims */
    tk_op op;
    int n_dims;
    int64_t dims[TK__MF_MAX_DIMS];
    unsigned policies; /* bit (1 << tk_policy) from "policy=" on the line; 0: the manifest's */
    int line;
} tk__mf_job;

typedef struct tk__manifest {
    char *name;     /* file name, or "<built-in>" */
    char *base_dir; /* the manifest's folder as reached from the working folder; NULL: that */
    char **archs;
    int *arch_lines;
    size_t n_archs;
    unsigned policies; /* bit (1 << tk_policy); 0: none given */
    int policy_line;
    tk__mf_job *jobs;
    size_t n_jobs, cap_jobs;
    tk__mf_kernel *kernels;
    size_t n_kernels;
} tk__manifest;

/* Parses text. name is used in messages; base_dir (may be NULL: the working
 * folder) resolves relative kernel paths. On error returns -1 with
 * "<name>:<line>: <field>: <what>" in err and *out left empty. */
int tk__manifest_parse(const char *text, const char *name, const char *base_dir, tk__manifest *out,
                       char *err, size_t err_size);
/* The manifest of --precompile --fallbacks: every operator's fallbacks. */
extern const char tk__fallbacks_manifest[];

/* Reads and parses a file. */
int tk__manifest_load(const char *path, tk__manifest *out, char *err, size_t err_size);
void tk__manifest_free(tk__manifest *m);

/* Keeps only the jobs whose operator (or user kernel entry) is in the
 * comma/space-separated list; -1 with a message naming an unknown item. */
int tk__manifest_filter(tk__manifest *m, const char *list, char *err, size_t err_size);

/* Drops the per-line policies (--policy overrides them) and the jobs that
 * then repeat. */
void tk__manifest_clear_line_policies(tk__manifest *m);

/* "gemm_f16_fwd M=512 N=1024 K=4096", "gemm_f16_fwd fallbacks" or
 * "kernel my_entry (file.cu)". */
void tk__mf_job_describe(const tk__manifest *m, const tk__mf_job *job, char *buf, size_t size);

#endif /* TK_CLI_MANIFEST_H */
