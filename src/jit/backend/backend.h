/*
 * One table of functions per vendor runtime. Each backend file loads its
 * vendor libraries with dlopen, once, thread-safely, and resolves every
 * symbol from a list written once; a missing library or symbol is a
 * TK_BACKEND_UNAVAILABLE status whose message names it.
 *
 * Errors: every function that fails writes a one-line message (with the
 * vendor's error name) into err (size errlen) and returns a status.
 */
#ifndef TK_JIT_BACKEND_H
#define TK_JIT_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "tokitai/tokitai.h"

typedef struct tk__err {
    char msg[1024];
    char *log; /* compiler log (malloc'd) or NULL; owned by whoever holds the tk__err */
} tk__err;

/* Formats msg (printf-style) and returns status. */
tk_status tk__err_set(tk__err *err, tk_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void tk__err_clear(tk__err *err);

typedef struct tk__backend tk__backend;

/* Result of a compile: code object and, when the compiler gives one, its log.
 * Both malloc'd, owned by the caller. */
typedef struct tk__code {
    void *data;
    size_t size;
    char *log;
    char *lowered; /* mangled name of extra->name_expr, malloc'd; NULL without one */
    /* With name_probe: the plain name did not resolve as a name expression
     * (found nowhere, or overloaded: then name_overloaded is set); the code
     * object was compiled without it and lowered is NULL. */
    int name_unresolved;
    int name_overloaded;
} tk__code;

/* One kernel parameter as the code object records it. */
typedef struct tk__param {
    uint32_t offset, size;
    int kind; /* tk_param_kind */
} tk__param;

/* What a user source brings besides its text (see src/jit/sources.h). */
typedef struct tk__compile_extra {
    const char *const *header_names; /* in-memory headers for the compiler */
    const char *const *header_texts;
    size_t n_headers;
    const char *name_expr; /* C++ name expression of the entry, or NULL */
    /* name_expr is a plain identifier registered up front, so that one
     * compile serves an extern "C" function (lowered = the name) and a C++
     * one (lowered = its mangled name): a failure of the name expression
     * alone is no compile error (see tk__code.name_unresolved). */
    int name_probe;
} tk__compile_extra;

struct tk__backend {
    const char *name; /* "cuda", "hip", "stub" */
    tk_backend_kind kind;

    /* dlopen + resolve. Idempotent and thread-safe; the result is remembered. */
    tk_status (*load)(tk__err *err);
    /* Library paths and versions, for tokitai-jit --info; writes a line per
     * library into buf. */
    tk_status (*describe)(char *buf, size_t size);
    /* Compiler identity: RTC version plus the build id / content hash of the
     * compiler library (and comgr's version for HIP). Stable for a process. */
    tk_status (*compiler_identity)(char *buf, size_t size, tk__err *err);
    /* Canonicalises an offline target name ("gfx90a" -> "gfx90a", "sm_90");
     * TK_UNSUPPORTED with a clear message when the compiler does not know it. */
    tk_status (*check_target)(const char *target, char *canon, size_t size, tk__err *err);

    /* Devices. */
    tk_status (*device_count)(int *count, tk__err *err);
    /* Initialises the device (primary context on CUDA) and writes its full
     * target id. *dev_handle is backend-owned state for the device. */
    tk_status (*device_open)(int ordinal, void **dev_handle, char *target, size_t size, tk__err *err);
    void (*device_close)(void *dev_handle);
    /* Makes the device current on the calling thread (cuCtxSetCurrent). */
    tk_status (*device_bind)(void *dev_handle, tk__err *err);

    /* Compile source (already including the prelude) for target with options.
     * name is the program name (the file compiler messages name). extra may
     * be NULL; with a name expression, out->lowered gets its mangled name.
     * Never spawns a process. */
    tk_status (*compile)(const char *target, const char *name, const char *source,
                         const char *const *options, size_t n_options,
                         const tk__compile_extra *extra, tk__code *out, tk__err *err);
    /* Extra options the backend always adds (include folder for NVRTC...),
     * NULL-terminated, static. These are part of the key. */
    const char *const *(*default_options)(void);
    /* Per-backend prelude prepended to every source. */
    const char *(*prelude)(void);
    /* Reads resource usage of entry from a code object; no device needed. */
    tk_status (*inspect)(const void *code, size_t size, const char *entry, tk_resource_usage *out,
                         tk__err *err);

    /* Parameters of kernel symbol in a code object (no device needed):
     * *out (malloc'd, *n entries; NULL when n is 0) in order. TK_NOT_FOUND
     * when the object records no parameters for it. Kinds the object does not
     * say are TK_PARAM_UNKNOWN. */
    tk_status (*kernel_params)(const void *code, size_t size, const char *symbol, tk__param **out,
                               size_t *n, tk__err *err);
    /* Symbols of every kernel in a code object, one per line (malloc'd). */
    tk_status (*list_kernels)(const void *code, size_t size, char **out, tk__err *err);

    /* Module API. */
    tk_status (*module_load)(void *dev_handle, const void *code, size_t size, void **module,
                             tk__err *err);
    void (*module_unload)(void *dev_handle, void *module);
    tk_status (*module_function)(void *module, const char *entry, void **fn, tk__err *err);
    tk_status (*launch)(void *fn, const unsigned grid[3], const unsigned block[3],
                        unsigned shared_bytes, void *stream, void **args, tk__err *err);

    /* Memory and streams (device must be bound on the calling thread). */
    tk_status (*mem_alloc)(size_t bytes, void **out, tk__err *err);
    tk_status (*mem_free)(void *ptr, tk__err *err);
    tk_status (*mem_upload)(void *dst, const void *src, size_t bytes, tk__err *err);
    tk_status (*mem_download)(void *dst, const void *src, size_t bytes, tk__err *err);
    tk_status (*mem_set)(void *dst, unsigned char byte, size_t bytes, tk__err *err);
    tk_status (*stream_sync)(void *stream, tk__err *err);
    /* Event pair: record start on stream, run, record stop, sync, elapsed. */
    tk_status (*event_create)(void **ev, tk__err *err);
    void (*event_destroy)(void *ev);
    tk_status (*event_record)(void *ev, void *stream, tk__err *err);
    tk_status (*event_elapsed)(void *start, void *stop, float *ms, tk__err *err);
    /* Raises fn's dynamic shared-memory limit to bytes (CUDA: a launch above
     * 48 KiB fails until this is done). NULL where the backend needs none. */
    tk_status (*raise_shared)(void *fn, unsigned bytes, tk__err *err);
    /* Tensor map (CUDA 12+ driver, cuTensorMapEncodeTiled) of a row-major
     * fp16 matrix of rows x cols with rows row_bytes apart, for 2D bulk
     * tensor copies of box_cols x box_rows with the 128-byte swizzle and zero
     * fill outside the matrix; out: 128 bytes, 64-byte aligned. NULL where
     * the backend has none; TK_UNSUPPORTED when the driver lacks it. */
    /* elem_bytes: 2 (fp16) or 4 (fp32). */
    tk_status (*tensor_map_f16)(void *out, const void *base, uint64_t rows, uint64_t cols,
                                uint64_t row_bytes, unsigned box_cols, unsigned box_rows,
                                unsigned elem_bytes, tk__err *err);
    /* Launch allowing programmatic dependent launch (CUDA 12+ driver,
     * cuLaunchKernelEx with programmatic stream serialisation): the kernel may
     * start before the previous kernel in the stream has finished, and must
     * execute griddepcontrol.wait before it touches global memory. NULL where
     * the backend has none; TK_UNSUPPORTED when the driver lacks it. */
    tk_status (*launch_pdl)(void *fn, const unsigned grid[3], const unsigned block[3],
                            unsigned shared_bytes, void *stream, void **args, tk__err *err);
    /* Multiprocessors (compute units) of the device; 0 when unknown. NULL
     * where the backend does not say. */
    int (*sm_count)(void *dev_handle);
};

const tk__backend *tk__backend_cuda(void);
const tk__backend *tk__backend_hip(void);
/* The stub backend: "compiles" by copying the source into a code object with
 * a small header, loads only what it produced, launches nothing. Counts every
 * call, for the engine's tests. */
const tk__backend *tk__backend_stub(void);

typedef struct tk__stub_counters {
    uint64_t compiles;
    uint64_t loads;
    uint64_t launches;
    int fail_next_loads; /* > 0: that many module_load calls fail */
    int compile_delay_ms;
} tk__stub_counters;

/* The stub's process-wide counters (atomic increments). */
tk__stub_counters *tk__stub_counters_get(void);

#endif /* TK_JIT_BACKEND_H */
