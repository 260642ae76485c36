/*
 * AMD backend: the HIP runtime (libamdhip64.so.5), hipRTC (inside
 * libamdhip64.so.5 in ROCm 5.2; libhiprtc.so.5 in later releases) and comgr
 * (libamd_comgr.so.2), all loaded with dlopen.
 *
 * What is proven here: loading, target checks, compiling with hipRTC and
 * reading code-object metadata with comgr all run with no GPU (CI). The
 * device path (hipModuleLoadData, hipModuleLaunchKernel, memory, streams,
 * events) is written against the ROCm 5.2 API but has never run: no AMD GPU
 * was available anywhere while it was written.
 *
 * Known ROCm 5.2 traps: hipRTC already provides the device headers and
 * __half (including hip/hip_fp16.h gives redefinitions), so the prelude
 * includes nothing; hipRTC crashes the process when asked for an ISA its
 * LLVM does not know (gfx942, gfx11xx), so targets are checked against
 * comgr's ISA list (same LLVM) before any compile; there is no 16-bit
 * atomicCAS.
 *
 * Test hooks: TK__HIP_LIB, TK__HIPRTC_LIB, TK__COMGR_LIB replace the names searched.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jit/backend/dl.h"
#include "jit/jit_internal.h"

typedef int hipError_t;
typedef void *hipModule_t;
typedef void *hipFunction_t;
typedef void *hipStream_t;
typedef void *hipEvent_t;
typedef void *hiprtcProgram;
typedef struct comgr_data {
    uint64_t handle;
} comgr_data;
typedef struct comgr_md {
    uint64_t handle;
} comgr_md;

#define COMGR_DATA_KIND_EXECUTABLE 0x8
#define COMGR_MD_KIND_STRING 0x1
#define COMGR_MD_KIND_MAP 0x2
#define COMGR_MD_KIND_LIST 0x3

/* ROCm 5.x hipDeviceProp_t: gcnArchName (char[256]) sits at byte 396 of a
 * 792-byte struct (checked against ROCm 5.2's hip_runtime_api.h). The
 * struct is read into a larger buffer so a longer layout cannot overflow. */
#define HIP5_PROP_SIZE 792
#define HIP5_PROP_GCN_ARCH_NAME 396

#define TK__HIP_FUNCS(X)                                                                           \
    X(hipInit, hipError_t, (unsigned))                                                             \
    X(hipGetDeviceCount, hipError_t, (int *))                                                      \
    X(hipSetDevice, hipError_t, (int))                                                             \
    X(hipGetDevice, hipError_t, (int *))                                                           \
    X(hipGetDeviceProperties, hipError_t, (void *, int))                                           \
    X(hipRuntimeGetVersion, hipError_t, (int *))                                                   \
    X(hipDriverGetVersion, hipError_t, (int *))                                                    \
    X(hipModuleLoadData, hipError_t, (hipModule_t *, const void *))                                \
    X(hipModuleUnload, hipError_t, (hipModule_t))                                                  \
    X(hipModuleGetFunction, hipError_t, (hipFunction_t *, hipModule_t, const char *))              \
    X(hipModuleLaunchKernel, hipError_t,                                                           \
      (hipFunction_t, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,        \
       hipStream_t, void **, void **))                                                             \
    X(hipMalloc, hipError_t, (void **, size_t))                                                    \
    X(hipFree, hipError_t, (void *))                                                               \
    X(hipMemcpyHtoD, hipError_t, (void *, void *, size_t))                                         \
    X(hipMemcpyDtoH, hipError_t, (void *, void *, size_t))                                         \
    X(hipMemset, hipError_t, (void *, int, size_t))                                                \
    X(hipStreamSynchronize, hipError_t, (hipStream_t))                                             \
    X(hipStreamCreate, hipError_t, (hipStream_t *))                                                \
    X(hipStreamDestroy, hipError_t, (hipStream_t))                                                 \
    X(hipEventCreate, hipError_t, (hipEvent_t *))                                                  \
    X(hipEventRecord, hipError_t, (hipEvent_t, hipStream_t))                                       \
    X(hipEventSynchronize, hipError_t, (hipEvent_t))                                               \
    X(hipEventElapsedTime, hipError_t, (float *, hipEvent_t, hipEvent_t))                          \
    X(hipEventDestroy, hipError_t, (hipEvent_t))                                                   \
    X(hipGetErrorName, const char *, (hipError_t))

#define TK__HIPRTC_FUNCS(X)                                                                        \
    X(hiprtcGetErrorString, const char *, (int))                                                   \
    X(hiprtcVersion, int, (int *, int *))                                                          \
    X(hiprtcCreateProgram, int,                                                                    \
      (hiprtcProgram *, const char *, const char *, int, const char **, const char **))            \
    X(hiprtcCompileProgram, int, (hiprtcProgram, int, const char **))                              \
    X(hiprtcGetProgramLogSize, int, (hiprtcProgram, size_t *))                                     \
    X(hiprtcGetProgramLog, int, (hiprtcProgram, char *))                                           \
    X(hiprtcGetCodeSize, int, (hiprtcProgram, size_t *))                                           \
    X(hiprtcGetCode, int, (hiprtcProgram, char *))                                                 \
    X(hiprtcDestroyProgram, int, (hiprtcProgram *))                                                \
    X(hiprtcAddNameExpression, int, (hiprtcProgram, const char *))                                 \
    X(hiprtcGetLoweredName, int, (hiprtcProgram, const char *, const char **))

#define TK__COMGR_FUNCS(X)                                                                         \
    X(amd_comgr_get_version, void, (size_t *, size_t *))                                           \
    X(amd_comgr_get_isa_count, int, (size_t *))                                                    \
    X(amd_comgr_get_isa_name, int, (size_t, const char **))                                        \
    X(amd_comgr_create_data, int, (int, comgr_data *))                                             \
    X(amd_comgr_release_data, int, (comgr_data))                                                   \
    X(amd_comgr_set_data, int, (comgr_data, size_t, const char *))                                 \
    X(amd_comgr_get_data_isa_name, int, (comgr_data, size_t *, char *))                            \
    X(amd_comgr_get_data_metadata, int, (comgr_data, comgr_md *))                                  \
    X(amd_comgr_destroy_metadata, int, (comgr_md))                                                 \
    X(amd_comgr_get_metadata_kind, int, (comgr_md, int *))                                         \
    X(amd_comgr_get_metadata_string, int, (comgr_md, size_t *, char *))                            \
    X(amd_comgr_get_metadata_list_size, int, (comgr_md, size_t *))                                 \
    X(amd_comgr_index_list_metadata, int, (comgr_md, size_t, comgr_md *))                          \
    X(amd_comgr_metadata_lookup, int, (comgr_md, const char *, comgr_md *))

TK__DL_TABLE(hip_table, TK__HIP_FUNCS)
TK__DL_TABLE(hiprtc_table, TK__HIPRTC_FUNCS)
TK__DL_TABLE(comgr_table, TK__COMGR_FUNCS)
#define HIP_SYM(n, r, p) TK__DL_SYM(hip_table, n)
#define HIPRTC_SYM(n, r, p) TK__DL_SYM(hiprtc_table, n)
#define COMGR_SYM(n, r, p) TK__DL_SYM(comgr_table, n)
static const tk__dl_sym hip_syms[] = {TK__HIP_FUNCS(HIP_SYM)};
static const tk__dl_sym hiprtc_syms[] = {TK__HIPRTC_FUNCS(HIPRTC_SYM)};
static const tk__dl_sym comgr_syms[] = {TK__COMGR_FUNCS(COMGR_SYM)};

#define MAX_ISAS 128

static struct {
    pthread_once_t once;
    tk_status status; /* runtime + hipRTC + comgr */
    char err[1200];
    char hip_path[1024], rtc_path[1024], comgr_path[1024];
    struct hip_table hip;
    struct hiprtc_table rtc;
    struct comgr_table comgr;
    int rtc_major, rtc_minor, runtime_version;
    size_t comgr_major, comgr_minor;
    char identity[256];
    char isas[MAX_ISAS][32]; /* "gfx90a", from comgr's ISA list */
    size_t n_isas;
    int init_status; /* hipInit result */
} g = {.once = PTHREAD_ONCE_INIT};

static void fail_load(const char *what, const tk__err *e)
{
    g.status = TK_BACKEND_UNAVAILABLE;
    snprintf(g.err, sizeof g.err, "%s: %s", what, e->msg);
}

static void load_once(void)
{
    tk__err e = {.msg = "", .log = NULL};
    char opened[1024] = "";
    static const char *const hip_libs[] = {"libamdhip64.so.5", "libamdhip64.so", NULL};
    void *hip = tk__dl_open_first("TK__HIP_LIB", hip_libs, opened, sizeof opened, &e);
    if (!hip)
        return fail_load("HIP runtime", &e);
    if (tk__dl_resolve(hip, opened, hip_syms, sizeof hip_syms / sizeof hip_syms[0], &g.hip, &e))
        return fail_load("HIP runtime", &e);
    tk__dl_path_of(dlsym(hip, "hipInit"), g.hip_path, sizeof g.hip_path);

    /* hipRTC: inside libamdhip64 in ROCm 5.2, its own library later. */
    void *rtc = getenv("TK__HIPRTC_LIB") ? NULL : hip;
    if (!rtc || tk__dl_resolve(rtc, opened, hiprtc_syms, sizeof hiprtc_syms / sizeof hiprtc_syms[0],
                               &g.rtc, &e) != TK_OK) {
        static const char *const rtc_libs[] = {"libhiprtc.so.5", "libhiprtc.so", NULL};
        char rtc_opened[1024] = "";
        rtc = tk__dl_open_first("TK__HIPRTC_LIB", rtc_libs, rtc_opened, sizeof rtc_opened, &e);
        if (!rtc)
            return fail_load("hipRTC", &e);
        if (tk__dl_resolve(rtc, rtc_opened, hiprtc_syms, sizeof hiprtc_syms / sizeof hiprtc_syms[0],
                           &g.rtc, &e))
            return fail_load("hipRTC", &e);
    }
    void *rtc_sym = dlsym(rtc, "hiprtcCompileProgram");
    tk__dl_path_of(rtc_sym, g.rtc_path, sizeof g.rtc_path);

    static const char *const comgr_libs[] = {"libamd_comgr.so.2", "libamd_comgr.so", NULL};
    void *comgr = tk__dl_open_first("TK__COMGR_LIB", comgr_libs, opened, sizeof opened, &e);
    if (!comgr)
        return fail_load("comgr", &e);
    if (tk__dl_resolve(comgr, opened, comgr_syms, sizeof comgr_syms / sizeof comgr_syms[0],
                       &g.comgr, &e))
        return fail_load("comgr", &e);
    tk__dl_path_of(dlsym(comgr, "amd_comgr_get_version"), g.comgr_path, sizeof g.comgr_path);

    g.rtc.hiprtcVersion(&g.rtc_major, &g.rtc_minor);
    g.hip.hipRuntimeGetVersion(&g.runtime_version); /* 50221153: ROCm 5.2 */
    g.comgr.amd_comgr_get_version(&g.comgr_major, &g.comgr_minor);
    char id[128] = "unknown";
    if (tk__dl_library_id(rtc_sym, id, sizeof id) != TK_OK)
        snprintf(id, sizeof id, "unknown");
    snprintf(g.identity, sizeof g.identity, "hiprtc-%d.%d+%s;comgr-%zu.%zu", g.rtc_major,
             g.rtc_minor, id, g.comgr_major, g.comgr_minor);

    size_t n = 0;
    if (g.comgr.amd_comgr_get_isa_count(&n) == 0) {
        for (size_t i = 0; i < n && g.n_isas < MAX_ISAS; i++) {
            const char *name = NULL;
            if (g.comgr.amd_comgr_get_isa_name(i, &name) != 0 || !name)
                continue;
            const char *gfx = strstr(name, "gfx");
            if (gfx)
                snprintf(g.isas[g.n_isas++], sizeof g.isas[0], "%s", gfx);
        }
    }
    g.status = TK_OK;
    g.init_status = -1; /* hipInit runs on the first device query only */
}

static tk_status hip_load(tk__err *err)
{
    pthread_once(&g.once, load_once);
    if (g.status != TK_OK)
        return tk__err_set(err, g.status, "%s", g.err);
    return TK_OK;
}

static const char *hip_err_name(hipError_t r)
{
    const char *n = g.hip.hipGetErrorName ? g.hip.hipGetErrorName(r) : NULL;
    return n ? n : "hipErrorUnknown";
}

static tk_status hip_describe(char *buf, size_t size)
{
    pthread_once(&g.once, load_once);
    snprintf(buf, size, "hip:\n");
    if (g.status != TK_OK) {
        tk__strcat_fmt(buf, size, "  unavailable: %s\n", g.err);
        return g.status;
    }
    int rv = 0;
    g.hip.hipRuntimeGetVersion(&rv);
    tk__strcat_fmt(buf, size, "  runtime: %s (HIP runtime version %d)\n", g.hip_path, rv);
    tk__strcat_fmt(buf, size, "  hiprtc: %s (version %d.%d)\n", g.rtc_path, g.rtc_major,
                   g.rtc_minor);
    tk__strcat_fmt(buf, size, "  comgr: %s (version %zu.%zu)\n", g.comgr_path, g.comgr_major,
                   g.comgr_minor);
    tk__strcat_fmt(buf, size, "  targets known to the compiler:");
    for (size_t i = 0; i < g.n_isas; i++)
        tk__strcat_fmt(buf, size, " %s", g.isas[i]);
    tk__strcat_fmt(buf, size, "\n");
    return TK_OK;
}

static tk_status hip_compiler_identity(char *buf, size_t size, tk__err *err)
{
    tk_status st = hip_load(err);
    if (st != TK_OK)
        return st;
    snprintf(buf, size, "%s", g.identity);
    return TK_OK;
}

/* "gfx90a", "gfx90a:sramecc+:xnack-": the processor must be in comgr's ISA
 * list (the same LLVM as hipRTC) and features are sramecc/xnack with +/-. */
static tk_status hip_check_target(const char *target, char *canon, size_t size, tk__err *err)
{
    tk_status st = hip_load(err);
    if (st != TK_OK)
        return st;
    char proc[64];
    size_t n = strcspn(target, ":");
    if (strncmp(target, "gfx", 3) != 0 || n >= sizeof proc || n < 4)
        return tk__err_set(err, TK_UNSUPPORTED, "'%s' is not an AMD target (expected gfxNNN)",
                           target);
    memcpy(proc, target, n);
    proc[n] = '\0';
    int known = 0;
    for (size_t i = 0; i < g.n_isas; i++)
        known |= strcmp(g.isas[i], proc) == 0;
    if (!known && g.n_isas > 0) {
        char list[600] = "";
        for (size_t i = 0; i < g.n_isas; i++)
            tk__strcat_fmt(list, sizeof list, "%s%s", i ? " " : "", g.isas[i]);
        int major = g.runtime_version / 10000000, minor = (g.runtime_version / 100000) % 100;
        return tk__err_set(
            err, TK_UNSUPPORTED,
            "%s is unknown to the installed hipRTC (ROCm %d.%d, hipRTC %d.%d)%s; "
            "it knows: %s",
            proc, major, minor, g.rtc_major, g.rtc_minor,
            major == 5 && minor < 7 ? ": ROCm 5.2's compiler does not know gfx942 or gfx11xx" : "",
            list);
    }
    const char *f = target + n;
    while (*f == ':') {
        f++;
        size_t fl = strcspn(f, ":");
        if (!((fl == 8 && strncmp(f, "sramecc", 7) == 0) ||
              (fl == 6 && strncmp(f, "xnack", 5) == 0)) ||
            (f[fl - 1] != '+' && f[fl - 1] != '-'))
            return tk__err_set(err, TK_UNSUPPORTED,
                               "target %s: feature '%.*s' is not sramecc+/- or xnack+/-", target,
                               (int)fl, f);
        f += fl;
    }
    snprintf(canon, size, "%s", target);
    return TK_OK;
}

typedef struct hip_dev {
    int ordinal;
} hip_dev;

static tk_status hip_init(tk__err *err)
{
    /* hipInit is idempotent; calling it per query keeps the once-state simple. */
    hipError_t r = g.hip.hipInit(0);
    if (r != 0)
        return tk__err_set(err, TK_NO_DEVICE, "hipInit: %s", hip_err_name(r));
    return TK_OK;
}

static tk_status hip_device_count(int *count, tk__err *err)
{
    tk_status st = hip_load(err);
    if (st == TK_OK)
        st = hip_init(err);
    if (st != TK_OK)
        return st;
    int n = 0;
    hipError_t r = g.hip.hipGetDeviceCount(&n);
    if (r != 0)
        return tk__err_set(err, TK_NO_DEVICE, "hipGetDeviceCount: %s", hip_err_name(r));
    *count = n;
    return TK_OK;
}

static tk_status hip_device_open(int ordinal, void **dev_handle, char *target, size_t size,
                                 tk__err *err)
{
    tk_status st = hip_load(err);
    if (st == TK_OK)
        st = hip_init(err);
    if (st != TK_OK)
        return st;
    hipError_t r = g.hip.hipSetDevice(ordinal);
    if (r != 0)
        return tk__err_set(err, TK_NO_DEVICE, "hipSetDevice(%d): %s", ordinal, hip_err_name(r));
    unsigned char *prop = calloc(1, 4096);
    if (!prop)
        return tk__err_set(err, TK_OUT_OF_MEMORY, "out of memory");
    r = g.hip.hipGetDeviceProperties(prop, ordinal);
    if (r != 0) {
        free(prop);
        return tk__err_set(err, TK_DEVICE_ERROR, "hipGetDeviceProperties: %s", hip_err_name(r));
    }
    char arch[257];
    memcpy(arch, prop + HIP5_PROP_GCN_ARCH_NAME, 256);
    arch[256] = '\0';
    if (strncmp(arch, "gfx", 3) != 0) {
        /* Another 5.x layout: gcnArchName is the one field that starts with
         * "gfx" (the marketing name does not); find it. */
        arch[0] = '\0';
        for (size_t i = 0; i + 4 < 4096 - 256; i++) {
            if ((i == 0 || prop[i - 1] == '\0') && memcmp(prop + i, "gfx", 3) == 0 &&
                prop[i + 3] >= '0' && prop[i + 3] <= '9') {
                memcpy(arch, prop + i, 256);
                arch[256] = '\0';
                break;
            }
        }
    }
    free(prop);
    if (strncmp(arch, "gfx", 3) != 0)
        return tk__err_set(err, TK_DEVICE_ERROR,
                           "hipGetDeviceProperties: no gcnArchName (unexpected struct layout)");
    hip_dev *d = calloc(1, sizeof *d);
    if (!d)
        return tk__err_set(err, TK_OUT_OF_MEMORY, "out of memory");
    d->ordinal = ordinal;
    snprintf(target, size, "%s", arch);
    *dev_handle = d;
    return TK_OK;
}

static void hip_device_close(void *dev_handle)
{
    free(dev_handle);
}

static tk_status hip_device_bind(void *dev_handle, tk__err *err)
{
    const hip_dev *d = dev_handle;
    int cur = -1;
    if (g.hip.hipGetDevice(&cur) == 0 && cur == d->ordinal)
        return TK_OK;
    hipError_t r = g.hip.hipSetDevice(d->ordinal);
    return r ? tk__err_set(err, TK_DEVICE_ERROR, "hipSetDevice: %s", hip_err_name(r)) : TK_OK;
}

/* A clang offload bundle holds one code object per target: returns the
 * amdgcn entry (an ELF), or the input when it is not a bundle. */
static int unbundle(const unsigned char *d, size_t size, size_t *off, size_t *len)
{
    static const char magic[] = "__CLANG_OFFLOAD_BUNDLE__";
    const size_t ml = sizeof magic - 1;
    if (size < ml + 8 || memcmp(d, magic, ml) != 0) {
        *off = 0;
        *len = size;
        return 1;
    }
    uint64_t n, p = ml;
    memcpy(&n, d + p, 8);
    p += 8;
    for (uint64_t i = 0; i < n && i < 64; i++) {
        uint64_t eo, es, il;
        if (p + 24 > size)
            return 0;
        memcpy(&eo, d + p, 8);
        memcpy(&es, d + p + 8, 8);
        memcpy(&il, d + p + 16, 8);
        p += 24;
        if (il > size - p)
            return 0;
        const char *id = (const char *)d + p;
        p += il;
        if (es && eo <= size && es <= size - eo && memmem(id, il, "amdgcn", 6) &&
            memcmp(d + eo, "\177ELF", 4) == 0) {
            *off = eo;
            *len = es;
            return 1;
        }
    }
    return 0;
}

static tk_status hip_compile_one(const char *target, const char *name, const char *source,
                                 const char *const *options, size_t n_options,
                                 const tk__compile_extra *extra, const char *name_expr,
                                 tk__code *out, tk__err *err)
{
    tk_status st = hip_load(err);
    if (st != TK_OK)
        return st;
    /* Never hand hipRTC an ISA it does not know: it aborts the process. */
    char canon[256];
    st = hip_check_target(target, canon, sizeof canon, err);
    if (st != TK_OK)
        return st;
    if (n_options > 1000)
        return tk__err_set(err, TK_INVALID_ARGUMENT, "too many options");
    const char **opts = malloc((n_options + 1) * sizeof *opts);
    char arch[300];
    hiprtcProgram prog = NULL;
    char *log = NULL, *codebuf = NULL;
    if (!opts)
        return tk__err_set(err, TK_OUT_OF_MEMORY, "out of memory");
    snprintf(arch, sizeof arch, "--offload-arch=%s", target);
    opts[0] = arch;
    for (size_t i = 0; i < n_options; i++)
        opts[i + 1] = options[i];

    /* hipRTC's prototype takes the header arrays without const; it copies them. */
    int n_headers = extra && extra->n_headers <= 100000 ? (int)extra->n_headers : 0;
    int r = g.rtc.hiprtcCreateProgram(&prog, source, name, n_headers,
                                      n_headers ? (const char **)extra->header_texts : NULL,
                                      n_headers ? (const char **)extra->header_names : NULL);
    if (r != 0) {
        st = tk__err_set(err, TK_COMPILE_FAILED, "hiprtcCreateProgram: %s",
                         g.rtc.hiprtcGetErrorString(r));
        goto done;
    }
    if (name_expr) {
        r = g.rtc.hiprtcAddNameExpression(prog, name_expr);
        if (r != 0) {
            st = tk__err_set(err, TK_COMPILE_FAILED, "hiprtcAddNameExpression(%s): %s",
                             name_expr, g.rtc.hiprtcGetErrorString(r));
            goto done;
        }
    }
    int cr = g.rtc.hiprtcCompileProgram(prog, (int)(n_options + 1), opts);
    size_t log_size = 0;
    /* ROCm 5.2 reports size 0 for an empty log and then writes nothing. */
    if (g.rtc.hiprtcGetProgramLogSize(prog, &log_size) == 0 && log_size > 1) {
        log = calloc(1, log_size + 1);
        if (log && g.rtc.hiprtcGetProgramLog(prog, log) != 0)
            log[0] = '\0';
    }
    if (cr != 0) {
        st = tk__err_set(err, TK_COMPILE_FAILED, "hipRTC %d.%d: %s compiling %s for %s",
                         g.rtc_major, g.rtc_minor, g.rtc.hiprtcGetErrorString(cr), name, target);
        goto done;
    }
    size_t size = 0;
    r = g.rtc.hiprtcGetCodeSize(prog, &size);
    if (r != 0 || size == 0) {
        st = tk__err_set(err, TK_COMPILE_FAILED, "hiprtcGetCodeSize: %s",
                         g.rtc.hiprtcGetErrorString(r));
        goto done;
    }
    codebuf = malloc(size);
    if (!codebuf) {
        st = tk__err_set(err, TK_OUT_OF_MEMORY, "out of memory");
        goto done;
    }
    r = g.rtc.hiprtcGetCode(prog, codebuf);
    if (r != 0) {
        st =
            tk__err_set(err, TK_COMPILE_FAILED, "hiprtcGetCode: %s", g.rtc.hiprtcGetErrorString(r));
        goto done;
    }
    size_t off = 0, len = 0;
    if (!unbundle((const unsigned char *)codebuf, size, &off, &len)) {
        st = tk__err_set(err, TK_COMPILE_FAILED,
                         "hipRTC returned an offload bundle with no %s entry", target);
        goto done;
    }
    if (off != 0) {
        memmove(codebuf, codebuf + off, len);
        size = len;
    }
    if (name_expr) {
        const char *lowered = NULL;
        r = g.rtc.hiprtcGetLoweredName(prog, name_expr, &lowered);
        if (r != 0 || !lowered) {
            st = tk__err_set(err, TK_NOT_FOUND, "no __global__ function %s in %s: %s",
                             name_expr, name, g.rtc.hiprtcGetErrorString(r));
            goto done;
        }
        out->lowered = strdup(lowered);
        if (!out->lowered) {
            st = tk__err_set(err, TK_OUT_OF_MEMORY, "out of memory");
            goto done;
        }
    }
    out->data = codebuf;
    out->size = size;
    codebuf = NULL;
    st = TK_OK;
done:
    out->log = log;
    if (prog)
        g.rtc.hiprtcDestroyProgram(&prog);
    free(codebuf);
    free(opts);
    return st;
}

/* 1 when every error of a hipRTC log is about the name expression (hipRTC
 * compiles it as `extern "C" constexpr auto __hiprtc_N = expr;`, the line
 * quoted under the error). */
static int only_name_expr_errors(const char *log)
{
    int errors = 0;
    for (const char *p = log; p && *p;) {
        const char *eol = strchr(p, '\n');
        size_t n = eol ? (size_t)(eol - p) : strlen(p);
        const char *hit = strstr(p, " error: ");
        if (hit && (size_t)(hit - p) < n) {
            const char *next = eol ? eol + 1 : "";
            const char *next_eol = strchr(next, '\n');
            const char *mark = strstr(next, "__hiprtc_");
            if (!mark || (next_eol && mark > next_eol))
                return 0;
            errors++;
        }
        p = eol ? eol + 1 : NULL;
    }
    return errors > 0;
}

static tk_status hip_compile_locked(const char *target, const char *name, const char *source,
                                    const char *const *options, size_t n_options,
                                    const tk__compile_extra *extra, tk__code *out, tk__err *err)
{
    const char *expr = extra ? extra->name_expr : NULL;
    tk_status st = hip_compile_one(target, name, source, options, n_options, extra, expr, out, err);
    if (st != TK_COMPILE_FAILED || !expr || !extra->name_probe || !only_name_expr_errors(out->log))
        return st;
    /* A plain name that names no single function: compile without it and
     * let the caller look it up (see cuda.c). */
    int overloaded = out->log && strstr(out->log, "overloaded function") != NULL;
    free(out->log);
    out->log = NULL;
    tk__err_clear(err);
    st = hip_compile_one(target, name, source, options, n_options, extra, NULL, out, err);
    if (st == TK_OK) {
        out->name_unresolved = 1;
        out->name_overloaded = overloaded;
    }
    return st;
}

/* One hipRTC compile at a time per process (callers' threads and the
 * background builder alike): ROCm 5.2's hipRTC serialises a process's
 * compiles anyway (DESIGN.md), and nothing here relies on it being safe to
 * enter from several threads. The precompile tool compiles in parallel with
 * worker processes. */
static pthread_mutex_t hip_compile_mu = PTHREAD_MUTEX_INITIALIZER;

static tk_status hip_compile(const char *target, const char *name, const char *source,
                             const char *const *options, size_t n_options,
                             const tk__compile_extra *extra, tk__code *out, tk__err *err)
{
    pthread_mutex_lock(&hip_compile_mu);
    tk_status st = hip_compile_locked(target, name, source, options, n_options, extra, out, err);
    pthread_mutex_unlock(&hip_compile_mu);
    return st;
}

static const char *const *hip_default_options(void)
{
    static const char *const opts[] = {"-std=c++17", NULL};
    return opts;
}

static const char *hip_prelude(void)
{
    /* hipRTC provides the HIP device headers and __half itself. */
    return "#define TK_BACKEND_HIP 1\n";
}

/* ------------------------------------------------------------- comgr */

/* Integer value of key in map, or -1. */
static int32_t md_int(comgr_md map, const char *key)
{
    comgr_md v;
    int32_t out = -1;
    if (g.comgr.amd_comgr_metadata_lookup(map, key, &v) != 0)
        return -1;
    int kind = 0;
    char buf[64];
    size_t n = sizeof buf;
    if (g.comgr.amd_comgr_get_metadata_kind(v, &kind) == 0 && kind == COMGR_MD_KIND_STRING &&
        g.comgr.amd_comgr_get_metadata_string(v, &n, NULL) == 0 && n <= sizeof buf &&
        g.comgr.amd_comgr_get_metadata_string(v, &n, buf) == 0) {
        buf[sizeof buf - 1] = '\0';
        out = (int32_t)strtol(buf, NULL, 0);
    }
    g.comgr.amd_comgr_destroy_metadata(v);
    return out;
}

static int md_string_eq(comgr_md map, const char *key, const char *want)
{
    comgr_md v;
    int eq = 0;
    if (g.comgr.amd_comgr_metadata_lookup(map, key, &v) != 0)
        return 0;
    char buf[512];
    size_t n = 0;
    if (g.comgr.amd_comgr_get_metadata_string(v, &n, NULL) == 0 && n <= sizeof buf &&
        g.comgr.amd_comgr_get_metadata_string(v, &n, buf) == 0) {
        buf[n ? n - 1 : 0] = '\0';
        eq = strcmp(buf, want) == 0;
    }
    g.comgr.amd_comgr_destroy_metadata(v);
    return eq;
}

/* ISA name of a code object ("amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-"). */
static tk_status comgr_data_of(const void *code, size_t size, comgr_data *data, tk__err *err)
{
    if (g.comgr.amd_comgr_create_data(COMGR_DATA_KIND_EXECUTABLE, data) != 0)
        return tk__err_set(err, TK_INTERNAL, "amd_comgr_create_data failed");
    if (g.comgr.amd_comgr_set_data(*data, size, code) != 0) {
        g.comgr.amd_comgr_release_data(*data);
        return tk__err_set(err, TK_CORRUPT, "amd_comgr_set_data refused the code object");
    }
    return TK_OK;
}

static tk_status hip_inspect(const void *code, size_t size, const char *entry,
                             tk_resource_usage *out, tk__err *err)
{
    tk_status st = hip_load(err);
    if (st != TK_OK)
        return st;
    size_t off = 0, len = 0;
    if (size < 4 || !unbundle(code, size, &off, &len))
        return tk__err_set(err, TK_CORRUPT, "not an AMD code object");
    comgr_data data;
    comgr_md root, kernels;
    st = comgr_data_of((const char *)code + off, len, &data, err);
    if (st != TK_OK)
        return st;
    if (g.comgr.amd_comgr_get_data_metadata(data, &root) != 0) {
        g.comgr.amd_comgr_release_data(data);
        return tk__err_set(err, TK_CORRUPT, "comgr: no metadata in the code object");
    }
    st = tk__err_set(err, TK_NOT_FOUND, "comgr: no kernel %s in the metadata", entry);
    if (g.comgr.amd_comgr_metadata_lookup(root, "amdhsa.kernels", &kernels) == 0) {
        size_t n = 0;
        g.comgr.amd_comgr_get_metadata_list_size(kernels, &n);
        for (size_t i = 0; i < n; i++) {
            comgr_md k;
            if (g.comgr.amd_comgr_index_list_metadata(kernels, i, &k) != 0)
                continue;
            if (md_string_eq(k, ".name", entry)) {
                int32_t vs = md_int(k, ".vgpr_spill_count"), ss = md_int(k, ".sgpr_spill_count");
                tk_resource_usage r = {
                    .registers = md_int(k, ".vgpr_count"),
                    .sgprs = md_int(k, ".sgpr_count"),
                    .agprs = md_int(k, ".agpr_count"),
                    .shared_bytes = md_int(k, ".group_segment_fixed_size"),
                    .local_bytes = md_int(k, ".private_segment_fixed_size"),
                    .spill_count = (vs < 0 && ss < 0) ? -1 : (vs > 0 ? vs : 0) + (ss > 0 ? ss : 0),
                    .wavefront_size = md_int(k, ".wavefront_size"),
                    .kernarg_bytes = md_int(k, ".kernarg_segment_size"),
                    .max_threads = md_int(k, ".max_flat_workgroup_size"),
                };
                *out = r;
                st = TK_OK;
                i = n;
            }
            g.comgr.amd_comgr_destroy_metadata(k);
        }
        g.comgr.amd_comgr_destroy_metadata(kernels);
    }
    g.comgr.amd_comgr_destroy_metadata(root);
    g.comgr.amd_comgr_release_data(data);
    return st;
}

/* String value of key in map into buf; 0 when absent. */
static int md_str(comgr_md map, const char *key, char *buf, size_t size)
{
    comgr_md v;
    int ok = 0;
    if (g.comgr.amd_comgr_metadata_lookup(map, key, &v) != 0)
        return 0;
    size_t n = 0;
    if (g.comgr.amd_comgr_get_metadata_string(v, &n, NULL) == 0 && n > 0 && n <= size &&
        g.comgr.amd_comgr_get_metadata_string(v, &n, buf) == 0) {
        buf[n - 1] = '\0';
        ok = 1;
    }
    g.comgr.amd_comgr_destroy_metadata(v);
    return ok;
}

/* Calls fn for each kernel map of a code object's metadata; fn returns 1 to
 * stop. */
typedef int (*kernel_md_fn)(void *user, comgr_md kernel);

static tk_status each_kernel(const void *code, size_t size, kernel_md_fn fn, void *user,
                             tk__err *err)
{
    tk_status st = hip_load(err);
    if (st != TK_OK)
        return st;
    size_t off = 0, len = 0;
    if (size < 4 || !unbundle(code, size, &off, &len))
        return tk__err_set(err, TK_CORRUPT, "not an AMD code object");
    comgr_data data;
    comgr_md root, kernels;
    st = comgr_data_of((const char *)code + off, len, &data, err);
    if (st != TK_OK)
        return st;
    if (g.comgr.amd_comgr_get_data_metadata(data, &root) != 0) {
        g.comgr.amd_comgr_release_data(data);
        return tk__err_set(err, TK_CORRUPT, "comgr: no metadata in the code object");
    }
    if (g.comgr.amd_comgr_metadata_lookup(root, "amdhsa.kernels", &kernels) == 0) {
        size_t n = 0;
        g.comgr.amd_comgr_get_metadata_list_size(kernels, &n);
        for (size_t i = 0; i < n; i++) {
            comgr_md k;
            if (g.comgr.amd_comgr_index_list_metadata(kernels, i, &k) != 0)
                continue;
            int stop = fn(user, k);
            g.comgr.amd_comgr_destroy_metadata(k);
            if (stop)
                break;
        }
        g.comgr.amd_comgr_destroy_metadata(kernels);
    }
    g.comgr.amd_comgr_destroy_metadata(root);
    g.comgr.amd_comgr_release_data(data);
    return TK_OK;
}

typedef struct params_walk {
    const char *symbol;
    tk__param *p;
    size_t n;
    int found;
    tk_status st;
} params_walk;

static int params_of(void *user, comgr_md k)
{
    params_walk *w = user;
    if (!md_string_eq(k, ".name", w->symbol))
        return 0;
    w->found = 1;
    comgr_md args;
    if (g.comgr.amd_comgr_metadata_lookup(k, ".args", &args) != 0)
        return 1; /* no .args: no parameters */
    size_t n = 0;
    g.comgr.amd_comgr_get_metadata_list_size(args, &n);
    w->p = n ? calloc(n, sizeof *w->p) : NULL;
    if (n && !w->p) {
        w->st = TK_OUT_OF_MEMORY;
        n = 0;
    }
    for (size_t i = 0; i < n; i++) {
        comgr_md a;
        if (g.comgr.amd_comgr_index_list_metadata(args, i, &a) != 0)
            continue;
        char kind[64] = "";
        md_str(a, ".value_kind", kind, sizeof kind);
        /* hidden_*: arguments the runtime appends (offsets, queue pointers). */
        if (strncmp(kind, "hidden_", 7) != 0) {
            int32_t size = md_int(a, ".size"), offset = md_int(a, ".offset");
            tk__param *p = &w->p[w->n++];
            p->size = size > 0 ? (uint32_t)size : 0;
            p->offset = offset > 0 ? (uint32_t)offset : 0;
            p->kind = strcmp(kind, "global_buffer") == 0 || strcmp(kind, "dynamic_shared_pointer") == 0
                          ? TK_PARAM_POINTER
                          : TK_PARAM_UNKNOWN;
        }
        g.comgr.amd_comgr_destroy_metadata(a);
    }
    g.comgr.amd_comgr_destroy_metadata(args);
    return 1;
}

static tk_status hip_kernel_params(const void *code, size_t size, const char *symbol,
                                   tk__param **out, size_t *n, tk__err *err)
{
    params_walk w = {symbol, NULL, 0, 0, TK_OK};
    tk_status st = each_kernel(code, size, params_of, &w, err);
    if (st == TK_OK && w.st != TK_OK)
        st = tk__err_set(err, w.st, "out of memory");
    else if (st == TK_OK && !w.found)
        st = tk__err_set(err, TK_NOT_FOUND, "comgr: no kernel %s in the metadata", symbol);
    if (st != TK_OK) {
        free(w.p);
        return st;
    }
    *out = w.p;
    *n = w.n;
    return TK_OK;
}

typedef struct names_walk {
    char *list;
    size_t len, cap;
    int oom;
} names_walk;

static int name_of(void *user, comgr_md k)
{
    names_walk *w = user;
    char name[1024];
    if (!md_str(k, ".name", name, sizeof name))
        return 0;
    size_t n = strlen(name);
    if (w->len + n + 2 > w->cap) {
        size_t cap = w->cap ? w->cap : 256;
        while (w->len + n + 2 > cap)
            cap *= 2;
        char *grown = realloc(w->list, cap);
        if (!grown) {
            w->oom = 1;
            return 1;
        }
        w->list = grown;
        w->cap = cap;
    }
    memcpy(w->list + w->len, name, n);
    w->len += n;
    w->list[w->len++] = '\n';
    w->list[w->len] = '\0';
    return 0;
}

static tk_status hip_list_kernels(const void *code, size_t size, char **out, tk__err *err)
{
    names_walk w = {NULL, 0, 0, 0};
    tk_status st = each_kernel(code, size, name_of, &w, err);
    if (st == TK_OK && w.oom)
        st = tk__err_set(err, TK_OUT_OF_MEMORY, "out of memory");
    if (st == TK_OK && !w.list && !(w.list = calloc(1, 1)))
        st = tk__err_set(err, TK_OUT_OF_MEMORY, "out of memory");
    if (st != TK_OK) {
        free(w.list);
        return st;
    }
    *out = w.list;
    return TK_OK;
}

tk_status tk__hip_code_isa(const void *code, size_t size, char *buf, size_t buf_size, tk__err *err)
{
    tk_status st = hip_load(err);
    if (st != TK_OK)
        return st;
    size_t off = 0, len = 0;
    if (size < 4 || !unbundle(code, size, &off, &len))
        return tk__err_set(err, TK_CORRUPT, "not an AMD code object");
    comgr_data data;
    st = comgr_data_of((const char *)code + off, len, &data, err);
    if (st != TK_OK)
        return st;
    size_t n = 0;
    if (g.comgr.amd_comgr_get_data_isa_name(data, &n, NULL) != 0 || n == 0 || n > buf_size ||
        g.comgr.amd_comgr_get_data_isa_name(data, &n, buf) != 0)
        st = tk__err_set(err, TK_CORRUPT, "comgr: no ISA name");
    g.comgr.amd_comgr_release_data(data);
    return st;
}

/* -------------------------------------------- device path (never run) */

static tk_status hip_module_load(void *dev_handle, const void *code, size_t size, void **module,
                                 tk__err *err)
{
    hipModule_t m = NULL;
    /* The engine keeps code alive for the module's lifetime, as HIP may keep
     * referring to the image. */
    hipError_t r = g.hip.hipModuleLoadData(&m, code);
    if (r != 0)
        return tk__err_set(err, TK_LOAD_FAILED, "hipModuleLoadData: %s", hip_err_name(r));
    *module = m;
    return TK_OK;
}

static void hip_module_unload(void *dev_handle, void *module)
{
    if (module)
        g.hip.hipModuleUnload(module);
}

static tk_status hip_module_function(void *module, const char *entry, void **fn, tk__err *err)
{
    hipFunction_t f = NULL;
    hipError_t r = g.hip.hipModuleGetFunction(&f, module, entry);
    if (r != 0)
        return tk__err_set(err, TK_NOT_FOUND, "hipModuleGetFunction(%s): %s", entry,
                           hip_err_name(r));
    *fn = f;
    return TK_OK;
}

static tk_status hip_launch(void *fn, const unsigned grid[3], const unsigned block[3],
                            unsigned shared_bytes, void *stream, void **args, tk__err *err)
{
    /* grid is in blocks, as for cuLaunchKernel (hipModuleLaunchKernel takes
     * blocks too, unlike hipExtModuleLaunchKernel). */
    hipError_t r = g.hip.hipModuleLaunchKernel(fn, grid[0], grid[1], grid[2], block[0], block[1],
                                               block[2], shared_bytes, stream, args, NULL);
    if (r != 0)
        return tk__err_set(err, TK_LAUNCH_FAILED, "hipModuleLaunchKernel: %s", hip_err_name(r));
    return TK_OK;
}

static tk_status hip_mem_alloc(size_t bytes, void **out, tk__err *err)
{
    void *p = NULL;
    hipError_t r = g.hip.hipMalloc(&p, bytes ? bytes : 1);
    if (r != 0)
        return tk__err_set(err, r == 2 ? TK_OUT_OF_MEMORY : TK_DEVICE_ERROR, "hipMalloc: %s",
                           hip_err_name(r));
    *out = p;
    return TK_OK;
}

static tk_status hip_mem_free(void *ptr, tk__err *err)
{
    hipError_t r = g.hip.hipFree(ptr);
    return r ? tk__err_set(err, TK_DEVICE_ERROR, "hipFree: %s", hip_err_name(r)) : TK_OK;
}

static tk_status hip_mem_upload(void *dst, const void *src, size_t bytes, tk__err *err)
{
    /* hipMemcpyHtoD does not write src; its prototype just lacks the const. */
    void *s;
    memcpy(&s, &src, sizeof s);
    hipError_t r = g.hip.hipMemcpyHtoD(dst, s, bytes);
    /* Complete before returning, as on CUDA (see cuda.c, settle). */
    if (r == 0)
        r = g.hip.hipStreamSynchronize(NULL);
    return r ? tk__err_set(err, TK_DEVICE_ERROR, "hipMemcpyHtoD: %s", hip_err_name(r)) : TK_OK;
}

static tk_status hip_mem_download(void *dst, const void *src, size_t bytes, tk__err *err)
{
    void *s;
    memcpy(&s, &src, sizeof s);
    hipError_t r = g.hip.hipMemcpyDtoH(dst, s, bytes);
    return r ? tk__err_set(err, TK_DEVICE_ERROR, "hipMemcpyDtoH: %s", hip_err_name(r)) : TK_OK;
}

static tk_status hip_mem_set(void *dst, unsigned char byte, size_t bytes, tk__err *err)
{
    hipError_t r = g.hip.hipMemset(dst, byte, bytes);
    if (r == 0)
        r = g.hip.hipStreamSynchronize(NULL);
    return r ? tk__err_set(err, TK_DEVICE_ERROR, "hipMemset: %s", hip_err_name(r)) : TK_OK;
}

static tk_status hip_stream_sync(void *stream, tk__err *err)
{
    hipError_t r = g.hip.hipStreamSynchronize(stream);
    return r ? tk__err_set(err, TK_DEVICE_ERROR, "hipStreamSynchronize: %s", hip_err_name(r))
             : TK_OK;
}

static tk_status hip_event_create(void **ev, tk__err *err)
{
    hipEvent_t e = NULL;
    hipError_t r = g.hip.hipEventCreate(&e);
    if (r != 0)
        return tk__err_set(err, TK_DEVICE_ERROR, "hipEventCreate: %s", hip_err_name(r));
    *ev = e;
    return TK_OK;
}

static void hip_event_destroy(void *ev)
{
    if (ev)
        g.hip.hipEventDestroy(ev);
}

static tk_status hip_event_record(void *ev, void *stream, tk__err *err)
{
    hipError_t r = g.hip.hipEventRecord(ev, stream);
    return r ? tk__err_set(err, TK_DEVICE_ERROR, "hipEventRecord: %s", hip_err_name(r)) : TK_OK;
}

static tk_status hip_event_elapsed(void *start, void *stop, float *ms, tk__err *err)
{
    hipError_t r = g.hip.hipEventSynchronize(stop);
    if (r != 0)
        return tk__err_set(err, TK_DEVICE_ERROR, "hipEventSynchronize: %s", hip_err_name(r));
    r = g.hip.hipEventElapsedTime(ms, start, stop);
    return r ? tk__err_set(err, TK_DEVICE_ERROR, "hipEventElapsedTime: %s", hip_err_name(r))
             : TK_OK;
}

tk_status tk__hip_stream_create(void **stream, tk__err *err)
{
    tk_status st = hip_load(err);
    if (st != TK_OK)
        return st;
    hipStream_t s = NULL;
    hipError_t r = g.hip.hipStreamCreate(&s);
    if (r != 0)
        return tk__err_set(err, TK_DEVICE_ERROR, "hipStreamCreate: %s", hip_err_name(r));
    *stream = s;
    return TK_OK;
}

void tk__hip_stream_destroy(void *stream)
{
    if (stream && g.hip.hipStreamDestroy)
        g.hip.hipStreamDestroy(stream);
}

static const tk__backend g_hip = {
    .name = "hip",
    .kind = TK_BACKEND_HIP,
    .load = hip_load,
    .describe = hip_describe,
    .compiler_identity = hip_compiler_identity,
    .check_target = hip_check_target,
    .device_count = hip_device_count,
    .device_open = hip_device_open,
    .device_close = hip_device_close,
    .device_bind = hip_device_bind,
    .compile = hip_compile,
    .default_options = hip_default_options,
    .prelude = hip_prelude,
    .inspect = hip_inspect,
    .kernel_params = hip_kernel_params,
    .list_kernels = hip_list_kernels,
    .module_load = hip_module_load,
    .module_unload = hip_module_unload,
    .module_function = hip_module_function,
    .launch = hip_launch,
    .mem_alloc = hip_mem_alloc,
    .mem_free = hip_mem_free,
    .mem_upload = hip_mem_upload,
    .mem_download = hip_mem_download,
    .mem_set = hip_mem_set,
    .stream_sync = hip_stream_sync,
    .event_create = hip_event_create,
    .event_destroy = hip_event_destroy,
    .event_record = hip_event_record,
    .event_elapsed = hip_event_elapsed,
};

const tk__backend *tk__backend_hip(void)
{
    return &g_hip;
}
