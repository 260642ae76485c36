/*
 * NVIDIA backend: the CUDA driver API (libcuda.so.1, present only where a
 * driver is installed) and NVRTC, both loaded with dlopen. NVRTC compiles
 * straight to a cubin for any sm_XY with no GPU; cuModuleLoadData loads it
 * into the device's primary context, so that pointers and streams of the
 * runtime API (cudaMalloc, PyTorch) interoperate.
 *
 * Loading: the compiler (NVRTC) is required for a context, the driver only
 * for devices; an offline context works where libcuda.so.1 is absent.
 * Test hooks: TK__CUDA_DRIVER_LIB and TK__NVRTC_LIB replace the library
 * names searched.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "jit/backend/dl.h"
#include "jit/jit_internal.h"

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUmodule;
typedef void *CUfunction;
typedef void *CUstream;
typedef void *CUevent;
typedef unsigned long long CUdeviceptr;
typedef void *nvrtcProgram;

#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR 75
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR 76
#define CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT 16

/* The driver API, written once. */
#define TK__CU_FUNCS(X)                                                                            \
    X(cuInit, CUresult, (unsigned))                                                                \
    X(cuDriverGetVersion, CUresult, (int *))                                                       \
    X(cuDeviceGetCount, CUresult, (int *))                                                         \
    X(cuDeviceGet, CUresult, (CUdevice *, int))                                                    \
    X(cuDeviceGetAttribute, CUresult, (int *, int, CUdevice))                                      \
    X(cuDeviceGetName, CUresult, (char *, int, CUdevice))                                          \
    X(cuDevicePrimaryCtxRetain, CUresult, (CUcontext *, CUdevice))                                 \
    X(cuDevicePrimaryCtxRelease_v2, CUresult, (CUdevice))                                          \
    X(cuCtxSetCurrent, CUresult, (CUcontext))                                                      \
    X(cuCtxGetCurrent, CUresult, (CUcontext *))                                                    \
    X(cuModuleLoadData, CUresult, (CUmodule *, const void *))                                      \
    X(cuModuleUnload, CUresult, (CUmodule))                                                        \
    X(cuModuleGetFunction, CUresult, (CUfunction *, CUmodule, const char *))                       \
    X(cuLaunchKernel, CUresult,                                                                    \
      (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, \
       void **, void **))                                                                          \
    X(cuMemAlloc_v2, CUresult, (CUdeviceptr *, size_t))                                            \
    X(cuMemFree_v2, CUresult, (CUdeviceptr))                                                       \
    X(cuMemcpyHtoD_v2, CUresult, (CUdeviceptr, const void *, size_t))                              \
    X(cuMemcpyDtoH_v2, CUresult, (void *, CUdeviceptr, size_t))                                    \
    X(cuMemsetD8_v2, CUresult, (CUdeviceptr, unsigned char, size_t))                               \
    X(cuStreamSynchronize, CUresult, (CUstream))                                                   \
    X(cuStreamCreate, CUresult, (CUstream *, unsigned))                                            \
    X(cuStreamDestroy_v2, CUresult, (CUstream))                                                    \
    X(cuEventCreate, CUresult, (CUevent *, unsigned))                                              \
    X(cuEventRecord, CUresult, (CUevent, CUstream))                                                \
    X(cuEventSynchronize, CUresult, (CUevent))                                                     \
    X(cuEventElapsedTime, CUresult, (float *, CUevent, CUevent))                                   \
    X(cuEventDestroy_v2, CUresult, (CUevent))                                                      \
    X(cuGetErrorName, CUresult, (CUresult, const char **))                                         \
    X(cuFuncGetAttribute, CUresult, (int *, int, CUfunction))                                      \
    X(cuFuncSetAttribute, CUresult, (CUfunction, int, int))

/* NVRTC, written once. */
#define TK__NVRTC_FUNCS(X)                                                                         \
    X(nvrtcGetErrorString, const char *, (int))                                                    \
    X(nvrtcVersion, int, (int *, int *))                                                           \
    X(nvrtcGetNumSupportedArchs, int, (int *))                                                     \
    X(nvrtcGetSupportedArchs, int, (int *))                                                        \
    X(nvrtcCreateProgram, int,                                                                     \
      (nvrtcProgram *, const char *, const char *, int, const char *const *, const char *const *)) \
    X(nvrtcDestroyProgram, int, (nvrtcProgram *))                                                  \
    X(nvrtcCompileProgram, int, (nvrtcProgram, int, const char *const *))                          \
    X(nvrtcGetProgramLogSize, int, (nvrtcProgram, size_t *))                                       \
    X(nvrtcGetProgramLog, int, (nvrtcProgram, char *))                                             \
    X(nvrtcGetCUBINSize, int, (nvrtcProgram, size_t *))                                            \
    X(nvrtcGetCUBIN, int, (nvrtcProgram, char *))                                                  \
    X(nvrtcAddNameExpression, int, (nvrtcProgram, const char *))                                   \
    X(nvrtcGetLoweredName, int, (nvrtcProgram, const char *, const char **))

TK__DL_TABLE(cu_table, TK__CU_FUNCS)
TK__DL_TABLE(nvrtc_table, TK__NVRTC_FUNCS)
#define CU_SYM(n, r, p) TK__DL_SYM(cu_table, n)
#define NVRTC_SYM(n, r, p) TK__DL_SYM(nvrtc_table, n)
static const tk__dl_sym cu_syms[] = {TK__CU_FUNCS(CU_SYM)};
static const tk__dl_sym nvrtc_syms[] = {TK__NVRTC_FUNCS(NVRTC_SYM)};

static struct {
    pthread_once_t once;
    /* compiler */
    tk_status nvrtc_status;
    char nvrtc_err[1200];
    char nvrtc_path[1024];
    struct nvrtc_table rtc;
    int rtc_major, rtc_minor;
    int archs[128];
    int n_archs;
    char identity[256];
    char include_opt[1100];
    char cccl_opt[1100]; /* CUDA 13: libcu++, CUB, Thrust under include/cccl; "" before */
    const char *default_opts[5];
    /* driver */
    tk_status drv_status;
    char drv_err[1200];
    char drv_path[1024];
    void *tmap_encode; /* cuTensorMapEncodeTiled or NULL */
    void *launch_ex;   /* cuLaunchKernelEx or NULL */
    struct cu_table cu;
    int driver_version;
} g = {.once = PTHREAD_ONCE_INIT};

static const char *cu_err_name(CUresult r)
{
    const char *name = NULL;
    if (g.cu.cuGetErrorName && g.cu.cuGetErrorName(r, &name) == 0 && name)
        return name;
    return "CUDA_ERROR_UNKNOWN";
}

static int file_exists(const char *path)
{
    return access(path, R_OK) == 0;
}

/* -I for cuda_fp16.h: CUDA_PATH, CUDA_HOME, next to libnvrtc, /usr/local/cuda. */
static void find_include(void)
{
    char cand[4][1100];
    size_t n = 0;
    const char *envs[2] = {getenv("CUDA_PATH"), getenv("CUDA_HOME")};
    for (int i = 0; i < 2; i++)
        if (envs[i] && envs[i][0])
            snprintf(cand[n++], sizeof cand[0], "%s/include", envs[i]);
    if (g.nvrtc_path[0]) {
        char dir[1024];
        snprintf(dir, sizeof dir, "%s", g.nvrtc_path);
        char *slash = strrchr(dir, '/');
        if (slash) {
            *slash = '\0';
            snprintf(cand[n++], sizeof cand[0], "%s/../include", dir);
        }
    }
    snprintf(cand[n++], sizeof cand[0], "/usr/local/cuda/include");
    for (size_t i = 0; i < n; i++) {
        char probe[1200];
        int n_probe = snprintf(probe, sizeof probe, "%s/cuda_fp16.h", cand[i]);
        if (n_probe > 0 && (size_t)n_probe < sizeof probe && file_exists(probe)) {
            char *real = realpath(cand[i], NULL);
            const char *dir = real && strlen(real) < sizeof g.include_opt - 3 ? real : cand[i];
            int n_opt = snprintf(g.include_opt, sizeof g.include_opt, "-I%s", dir);
            free(real);
            if (n_opt > 0 && (size_t)n_opt < sizeof g.include_opt)
                return;
        }
    }
    snprintf(g.include_opt, sizeof g.include_opt, "-I/usr/local/cuda/include");
}

/* CUDA 13 moved libcu++ (<cuda/std/...>, <cuda/barrier>, which
 * cooperative_groups.h needs), CUB and Thrust to include/cccl; nvcc adds it
 * after include (nvcc.profile: -isystem .../include/cccl), and so does this. */
static void find_cccl(void)
{
    char probe[1200];
    const char *inc = g.include_opt + 2;
    g.cccl_opt[0] = '\0';
    int n = snprintf(probe, sizeof probe, "%s/cccl/cuda/std/version", inc);
    if (n > 0 && (size_t)n < sizeof probe && file_exists(probe)) {
        n = snprintf(g.cccl_opt, sizeof g.cccl_opt, "-I%s/cccl", inc);
        if (n < 0 || (size_t)n >= sizeof g.cccl_opt)
            g.cccl_opt[0] = '\0';
    }
}

/* The include folder enters cache keys by the content of the headers the
 * prelude pulls in, the entry header of each family user kernels include,
 * and the version headers of libcu++, CUB and Thrust (CCCL ships as its own
 * package, so it can move without NVRTC), not by its path: the same toolkit
 * sits at different paths on different machines (/usr/local/cuda-13.0/include,
 * .../targets/x86_64-linux/include), and a cache filled on a build machine
 * must hit. The rest of the tree is covered by NVRTC's build id: a walk of
 * its 2000 files cost 2 to 30 ms per process here, more than it buys. */
static uint64_t headers_hash(const char *dir)
{
    static const char *const names[] = {"cuda_fp16.h",
                                        "cuda_fp16.hpp",
                                        "cuda_bf16.h",
                                        "cuda_bf16.hpp",
                                        "vector_types.h",
                                        "cuda_fp8.h",
                                        "cuda_fp8.hpp",
                                        "mma.h",
                                        "crt/mma.h",
                                        "cooperative_groups.h",
                                        "cuda_pipeline.h",
                                        "cuda_awbarrier.h",
                                        "cuda/std/__cccl/version.h",
                                        "cuda/std/version",
                                        "cub/version.cuh",
                                        "thrust/version.h",
                                        "cccl/cuda/std/__cccl/version.h",
                                        "cccl/cuda/std/version",
                                        "cccl/cub/version.cuh",
                                        "cccl/thrust/version.h"};
    uint64_t h = 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char path[1300];
        int n = snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        FILE *f = (n > 0 && (size_t)n < sizeof path) ? fopen(path, "rb") : NULL;
        if (!f) {
            h = XXH3_64bits_withSeed(names[i], strlen(names[i]), h); /* absent: still a fact */
            continue;
        }
        char buf[65536];
        size_t r;
        while ((r = fread(buf, 1, sizeof buf, f)) > 0)
            h = XXH3_64bits_withSeed(buf, r, h);
        fclose(f);
    }
    return h;
}

static void load_nvrtc(void)
{
    tk__err e = {.msg = "", .log = NULL};
    char c[3][1100];
    const char *list[8];
    size_t n = 0;
    list[n++] = "libnvrtc.so.13";
    list[n++] = "libnvrtc.so.12";
    list[n++] = "libnvrtc.so";
    const char *envs[2] = {getenv("CUDA_PATH"), getenv("CUDA_HOME")};
    size_t k = 0;
    for (int i = 0; i < 2; i++)
        if (envs[i] && envs[i][0]) {
            snprintf(c[k], sizeof c[k], "%s/lib64/libnvrtc.so", envs[i]);
            list[n++] = c[k++];
        }
    snprintf(c[k], sizeof c[k], "/usr/local/cuda/lib64/libnvrtc.so");
    list[n++] = c[k++];
    list[n] = NULL;

    char opened[1024] = "";
    void *lib = tk__dl_open_first("TK__NVRTC_LIB", list, opened, sizeof opened, &e);
    if (!lib) {
        g.nvrtc_status = TK_BACKEND_UNAVAILABLE;
        snprintf(g.nvrtc_err, sizeof g.nvrtc_err, "NVRTC: %s", e.msg);
        return;
    }
    g.nvrtc_status = tk__dl_resolve(lib, opened, nvrtc_syms,
                                    sizeof nvrtc_syms / sizeof nvrtc_syms[0], &g.rtc, &e);
    if (g.nvrtc_status != TK_OK) {
        snprintf(g.nvrtc_err, sizeof g.nvrtc_err, "NVRTC: %s", e.msg);
        return; /* the library stays open: dlclose of a half-used library gains nothing */
    }
    void *sym = dlsym(lib, "nvrtcVersion");
    tk__dl_path_of(sym, g.nvrtc_path, sizeof g.nvrtc_path);
    if (!g.nvrtc_path[0])
        snprintf(g.nvrtc_path, sizeof g.nvrtc_path, "%s", opened);
    g.rtc.nvrtcVersion(&g.rtc_major, &g.rtc_minor);
    int na = 0;
    if (g.rtc.nvrtcGetNumSupportedArchs(&na) == 0 && na > 0 && na <= 128) {
        if (g.rtc.nvrtcGetSupportedArchs(g.archs) == 0)
            g.n_archs = na;
    }
    char id[128] = "unknown";
    if (tk__dl_library_id(sym, id, sizeof id) != TK_OK)
        snprintf(id, sizeof id, "unknown");
    find_include();
    find_cccl();
    snprintf(g.identity, sizeof g.identity, "nvrtc-%d.%d+%s;headers-%016llx%s", g.rtc_major,
             g.rtc_minor, id, (unsigned long long)headers_hash(g.include_opt + 2),
             g.cccl_opt[0] ? "+cccl" : "");
    size_t nd = 0;
    g.default_opts[nd++] = g.include_opt;
    if (g.cccl_opt[0])
        g.default_opts[nd++] = g.cccl_opt;
    g.default_opts[nd++] = "--std=c++17";
    g.default_opts[nd++] = "-default-device";
    g.default_opts[nd] = NULL;
}

static void load_driver(void)
{
    tk__err e = {.msg = "", .log = NULL};
    static const char *const list[] = {"libcuda.so.1", NULL};
    char opened[1024] = "";
    void *lib = tk__dl_open_first("TK__CUDA_DRIVER_LIB", list, opened, sizeof opened, &e);
    if (!lib) {
        g.drv_status = TK_BACKEND_UNAVAILABLE;
        snprintf(g.drv_err, sizeof g.drv_err, "CUDA driver: %s", e.msg);
        return;
    }
    g.drv_status =
        tk__dl_resolve(lib, opened, cu_syms, sizeof cu_syms / sizeof cu_syms[0], &g.cu, &e);
    if (g.drv_status != TK_OK) {
        snprintf(g.drv_err, sizeof g.drv_err, "CUDA driver: %s", e.msg);
        memset(&g.cu, 0, sizeof g.cu);
        return;
    }
    tk__dl_path_of(dlsym(lib, "cuInit"), g.drv_path, sizeof g.drv_path);
    g.tmap_encode = dlsym(lib, "cuTensorMapEncodeTiled");
    g.launch_ex = dlsym(lib, "cuLaunchKernelEx");
    CUresult r = g.cu.cuInit(0);
    if (r != 0) {
        g.drv_status = TK_NO_DEVICE;
        snprintf(g.drv_err, sizeof g.drv_err, "CUDA driver: cuInit failed: %s", cu_err_name(r));
        return;
    }
    g.cu.cuDriverGetVersion(&g.driver_version);
}

static void load_once(void)
{
    load_nvrtc();
    load_driver();
}

static tk_status cuda_load(tk__err *err)
{
    pthread_once(&g.once, load_once);
    if (g.nvrtc_status != TK_OK)
        return tk__err_set(err, g.nvrtc_status, "%s", g.nvrtc_err);
    return TK_OK;
}

static tk_status need_driver(tk__err *err)
{
    pthread_once(&g.once, load_once);
    if (g.drv_status != TK_OK)
        return tk__err_set(err, g.drv_status, "%s", g.drv_err);
    return TK_OK;
}

static tk_status cuda_describe(char *buf, size_t size)
{
    pthread_once(&g.once, load_once);
    snprintf(buf, size, "cuda:\n");
    if (g.nvrtc_status == TK_OK)
        tk__strcat_fmt(buf, size, "  nvrtc: %s (version %d.%d, include %s%s%s)\n", g.nvrtc_path,
                       g.rtc_major, g.rtc_minor, g.include_opt + 2, g.cccl_opt[0] ? " " : "",
                       g.cccl_opt[0] ? g.cccl_opt + 2 : "");
    else
        tk__strcat_fmt(buf, size, "  nvrtc: unavailable: %s\n", g.nvrtc_err);
    if (g.drv_status == TK_OK)
        tk__strcat_fmt(buf, size, "  driver: %s (CUDA %d.%d)\n", g.drv_path,
                       g.driver_version / 1000, (g.driver_version % 1000) / 10);
    else
        tk__strcat_fmt(buf, size, "  driver: unavailable: %s\n", g.drv_err);
    return g.nvrtc_status != TK_OK ? g.nvrtc_status : g.drv_status;
}

static tk_status cuda_compiler_identity(char *buf, size_t size, tk__err *err)
{
    tk_status st = cuda_load(err);
    if (st != TK_OK)
        return st;
    snprintf(buf, size, "%s", g.identity);
    return TK_OK;
}

static tk_status cuda_check_target(const char *target, char *canon, size_t size, tk__err *err)
{
    tk_status st = cuda_load(err);
    if (st != TK_OK)
        return st;
    const char *p = target;
    if (strncmp(p, "sm_", 3) != 0)
        return tk__err_set(err, TK_UNSUPPORTED, "'%s' is not an NVIDIA target (expected sm_XY)",
                           target);
    p += 3;
    int num = 0, digits = 0;
    while (*p >= '0' && *p <= '9' && digits < 4) {
        num = num * 10 + (*p - '0');
        p++;
        digits++;
    }
    if (digits < 2 || (*p && !((*p == 'a' || *p == 'f') && p[1] == '\0')))
        return tk__err_set(err, TK_UNSUPPORTED, "'%s' is not an NVIDIA target (expected sm_XY)",
                           target);
    if (g.n_archs > 0) {
        int known = 0;
        char list[512] = "";
        for (int i = 0; i < g.n_archs; i++) {
            known |= g.archs[i] == num;
            tk__strcat_fmt(list, sizeof list, "%ssm_%d", i ? " " : "", g.archs[i]);
        }
        if (!known)
            return tk__err_set(err, TK_UNSUPPORTED,
                               "NVRTC %d.%d does not support %s (it supports %s)", g.rtc_major,
                               g.rtc_minor, target, list);
    }
    snprintf(canon, size, "%s", target);
    return TK_OK;
}

typedef struct cuda_dev {
    CUdevice dev;
    CUcontext ctx;
} cuda_dev;

static tk_status cuda_device_count(int *count, tk__err *err)
{
    tk_status st = need_driver(err);
    if (st != TK_OK)
        return st;
    int n = 0;
    CUresult r = g.cu.cuDeviceGetCount(&n);
    if (r != 0)
        return tk__err_set(err, TK_NO_DEVICE, "cuDeviceGetCount: %s", cu_err_name(r));
    *count = n;
    return TK_OK;
}

static tk_status cuda_device_open(int ordinal, void **dev_handle, char *target, size_t size,
                                  tk__err *err)
{
    tk_status st = need_driver(err);
    if (st != TK_OK)
        return st;
    CUdevice dev;
    int major = 0, minor = 0;
    CUresult r = g.cu.cuDeviceGet(&dev, ordinal);
    if (r != 0)
        return tk__err_set(err, TK_NO_DEVICE, "cuDeviceGet(%d): %s", ordinal, cu_err_name(r));
    if ((r = g.cu.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                       dev)) ||
        (r = g.cu.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)))
        return tk__err_set(err, TK_DEVICE_ERROR, "cuDeviceGetAttribute: %s", cu_err_name(r));
    cuda_dev *d = calloc(1, sizeof *d);
    if (!d)
        return tk__err_set(err, TK_OUT_OF_MEMORY, "out of memory");
    d->dev = dev;
    r = g.cu.cuDevicePrimaryCtxRetain(&d->ctx, dev);
    if (r != 0) {
        free(d);
        return tk__err_set(err, TK_DEVICE_ERROR, "cuDevicePrimaryCtxRetain: %s", cu_err_name(r));
    }
    r = g.cu.cuCtxSetCurrent(d->ctx);
    if (r != 0) {
        g.cu.cuDevicePrimaryCtxRelease_v2(dev);
        free(d);
        return tk__err_set(err, TK_DEVICE_ERROR, "cuCtxSetCurrent: %s", cu_err_name(r));
    }
    snprintf(target, size, "sm_%d%d", major, minor);
    *dev_handle = d;
    return TK_OK;
}

static int cuda_sm_count(void *dev_handle)
{
    const cuda_dev *d = dev_handle;
    int n = 0;
    if (d == NULL || g.cu.cuDeviceGetAttribute(&n, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d->dev))
        return 0;
    return n;
}

static void cuda_device_close(void *dev_handle)
{
    cuda_dev *d = dev_handle;
    if (!d)
        return;
    g.cu.cuDevicePrimaryCtxRelease_v2(d->dev);
    free(d);
}

static tk_status cuda_device_bind(void *dev_handle, tk__err *err)
{
    const cuda_dev *d = dev_handle;
    CUcontext cur = NULL;
    /* Cheap check first: the caller (PyTorch...) usually has it current already. */
    if (g.cu.cuCtxGetCurrent(&cur) == 0 && cur == d->ctx)
        return TK_OK;
    CUresult r = g.cu.cuCtxSetCurrent(d->ctx);
    if (r != 0)
        return tk__err_set(err, TK_DEVICE_ERROR, "cuCtxSetCurrent: %s", cu_err_name(r));
    return TK_OK;
}

static tk_status cuda_compile_one(const char *target, const char *name, const char *source,
                                  const char *const *options, size_t n_options,
                                  const tk__compile_extra *extra, const char *name_expr,
                                  tk__code *out, tk__err *err)
{
    tk_status st = cuda_load(err);
    if (st != TK_OK)
        return st;
    if (n_options > 1000)
        return tk__err_set(err, TK_INVALID_ARGUMENT, "too many options");
    const char **opts = malloc((n_options + 1) * sizeof *opts);
    char arch[64];
    nvrtcProgram prog = NULL;
    char *log = NULL;
    char *cubin = NULL;
    if (!opts)
        return tk__err_set(err, TK_OUT_OF_MEMORY, "out of memory");
    /* A caller that names the architecture itself (sm_90a for Hopper-only
     * instructions on an sm_90 device) gets exactly that one; the options are
     * part of the cache key, so that kernel has its own entry. */
    int n = 0;
    int explicit_arch = 0;
    for (size_t i = 0; i < n_options; i++)
        explicit_arch |=
            options[i] != NULL && (strncmp(options[i], "--gpu-architecture", 18) == 0 ||
                                   strncmp(options[i], "-arch", 5) == 0);
    if (!explicit_arch) {
        snprintf(arch, sizeof arch, "--gpu-architecture=%s", target);
        opts[n++] = arch;
    }
    for (size_t i = 0; i < n_options; i++)
        opts[n++] = options[i];

    int n_headers = extra && extra->n_headers <= 100000 ? (int)extra->n_headers : 0;
    int r = g.rtc.nvrtcCreateProgram(&prog, source, name, n_headers,
                                     n_headers ? extra->header_texts : NULL,
                                     n_headers ? extra->header_names : NULL);
    if (r != 0) {
        st = tk__err_set(err, TK_COMPILE_FAILED, "nvrtcCreateProgram: %s",
                         g.rtc.nvrtcGetErrorString(r));
        goto done;
    }
    if (name_expr) {
        r = g.rtc.nvrtcAddNameExpression(prog, name_expr);
        if (r != 0) {
            st = tk__err_set(err, TK_COMPILE_FAILED, "nvrtcAddNameExpression(%s): %s",
                             name_expr, g.rtc.nvrtcGetErrorString(r));
            goto done;
        }
    }
    int cr = g.rtc.nvrtcCompileProgram(prog, n, opts);
    /* The log first, whatever happened: it explains the failure. */
    size_t log_size = 0;
    if (g.rtc.nvrtcGetProgramLogSize(prog, &log_size) == 0 && log_size > 1) {
        log = malloc(log_size + 1);
        if (log && g.rtc.nvrtcGetProgramLog(prog, log) == 0)
            log[log_size] = '\0';
        else if (log)
            log[0] = '\0';
    }
    if (cr != 0) {
        st = tk__err_set(err, TK_COMPILE_FAILED, "NVRTC %d.%d: %s compiling %s for %s", g.rtc_major,
                         g.rtc_minor, g.rtc.nvrtcGetErrorString(cr), name, target);
        goto done;
    }
    size_t size = 0;
    r = g.rtc.nvrtcGetCUBINSize(prog, &size);
    if (r != 0 || size == 0) {
        st = tk__err_set(err, TK_COMPILE_FAILED, "nvrtcGetCUBINSize: %s",
                         g.rtc.nvrtcGetErrorString(r));
        goto done;
    }
    cubin = malloc(size);
    if (!cubin) {
        st = tk__err_set(err, TK_OUT_OF_MEMORY, "out of memory");
        goto done;
    }
    r = g.rtc.nvrtcGetCUBIN(prog, cubin);
    if (r != 0) {
        st = tk__err_set(err, TK_COMPILE_FAILED, "nvrtcGetCUBIN: %s", g.rtc.nvrtcGetErrorString(r));
        goto done;
    }
    if (name_expr) {
        const char *lowered = NULL;
        r = g.rtc.nvrtcGetLoweredName(prog, name_expr, &lowered);
        if (r != 0 || !lowered) {
            st = tk__err_set(err, TK_NOT_FOUND, "no __global__ function %s in %s: %s",
                             name_expr, name, g.rtc.nvrtcGetErrorString(r));
            goto done;
        }
        out->lowered = strdup(lowered);
        if (!out->lowered) {
            st = tk__err_set(err, TK_OUT_OF_MEMORY, "out of memory");
            goto done;
        }
    }
    out->data = cubin;
    out->size = size;
    cubin = NULL;
    st = TK_OK;
done:
    out->log = log;
    if (prog)
        g.rtc.nvrtcDestroyProgram(&prog);
    free(cubin);
    free(opts);
    return st;
}

/* 1 when every error of an NVRTC log is about the name expression (NVRTC
 * compiles it as a pragma in a file of its own, "__nv_name_map"). */
static int only_name_map_errors(const char *log)
{
    int errors = 0;
    for (const char *p = log; p && *p;) {
        const char *eol = strchr(p, '\n');
        size_t n = eol ? (size_t)(eol - p) : strlen(p);
        const char *hit = strstr(p, ": error");
        if (hit && (size_t)(hit - p) < n) {
            if (strncmp(p, "__nv_name_map", 13) != 0)
                return 0;
            errors++;
        }
        p = eol ? eol + 1 : NULL;
    }
    return errors > 0;
}

static tk_status cuda_compile(const char *target, const char *name, const char *source,
                              const char *const *options, size_t n_options,
                              const tk__compile_extra *extra, tk__code *out, tk__err *err)
{
    const char *expr = extra ? extra->name_expr : NULL;
    tk_status st = cuda_compile_one(target, name, source, options, n_options, extra, expr, out, err);
    if (st != TK_COMPILE_FAILED || !expr || !extra->name_probe || !only_name_map_errors(out->log))
        return st;
    /* A plain name that names no single function: the source itself is
     * fine; compile it without the name and let the caller look the name up
     * in the code object (and list what it holds). */
    int overloaded = out->log && strstr(out->log, "overloaded function") != NULL;
    free(out->log);
    out->log = NULL;
    tk__err_clear(err);
    st = cuda_compile_one(target, name, source, options, n_options, extra, NULL, out, err);
    if (st == TK_OK) {
        out->name_unresolved = 1;
        out->name_overloaded = overloaded;
    }
    return st;
}

static const char *const *cuda_default_options(void)
{
    pthread_once(&g.once, load_once);
    static const char *const none[] = {NULL};
    return g.nvrtc_status == TK_OK ? g.default_opts : none;
}

static const char *cuda_prelude(void)
{
    return "#define TK_BACKEND_CUDA 1\n"
           "#include <cuda_fp16.h>\n";
}

/* ---------------------------------------------------------------- cubin */

/* .nv.info attribute formats and the attributes read here. */
#define EIFMT_NVAL 0x01
#define EIFMT_BVAL 0x02
#define EIFMT_HVAL 0x03
#define EIFMT_SVAL 0x04
#define EIATTR_MAX_THREADS 0x05
#define EIATTR_PARAM_CBANK 0x0a
#define EIATTR_FRAME_SIZE 0x11
#define EIATTR_CBANK_PARAM_SIZE 0x19
#define EIATTR_REGCOUNT 0x2f

typedef struct elf_view {
    const unsigned char *d;
    size_t size;
    uint64_t shoff;
    unsigned shnum, shentsize, shstrndx;
} elf_view;

static int rd16(const unsigned char *p, unsigned *v)
{
    *v = (unsigned)p[0] | (unsigned)p[1] << 8;
    return 1;
}

static uint32_t u32at(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t u64at(const unsigned char *p)
{
    return (uint64_t)u32at(p) | (uint64_t)u32at(p + 4) << 32;
}

typedef struct shdr {
    uint32_t name, type;
    uint64_t offset, size;
    uint32_t link, info;
} shdr;

static int sec(const elf_view *v, unsigned i, shdr *s)
{
    if (i >= v->shnum)
        return 0;
    uint64_t o = v->shoff + (uint64_t)i * v->shentsize;
    if (o + 64 > v->size)
        return 0;
    const unsigned char *p = v->d + o;
    s->name = u32at(p);
    s->type = u32at(p + 4);
    s->offset = u64at(p + 24);
    s->size = u64at(p + 32);
    s->link = u32at(p + 40);
    s->info = u32at(p + 44);
    if (s->type != 8 /* SHT_NOBITS */ && (s->offset > v->size || s->size > v->size - s->offset))
        return 0;
    return 1;
}

/* NUL-terminated string at off of a string section, or NULL. */
static const char *str_at(const elf_view *v, const shdr *strsec, uint32_t off)
{
    /* A SHT_NOBITS section has no bytes in the file (sec() leaves its
     * offset and size unchecked). */
    if (strsec->type == 8 || off >= strsec->size)
        return NULL;
    const char *s = (const char *)v->d + strsec->offset + off;
    if (!memchr(s, '\0', strsec->size - off))
        return NULL;
    return s;
}

static int sec_named(const elf_view *v, const char *name, shdr *out)
{
    shdr strs;
    if (!sec(v, v->shstrndx, &strs))
        return 0;
    for (unsigned i = 0; i < v->shnum; i++) {
        shdr s;
        if (!sec(v, i, &s))
            continue;
        const char *n = str_at(v, &strs, s.name);
        if (n && strcmp(n, name) == 0) {
            *out = s;
            return 1;
        }
    }
    return 0;
}

/* Symbol index of name in .symtab (and whether a reserved-shared-memory symbol exists). */
static long symbol_index(const elf_view *v, const char *name, int *reserved_smem)
{
    shdr symtab, strtab;
    long found = -1;
    *reserved_smem = 0;
    if (!sec_named(v, ".symtab", &symtab) || !sec(v, symtab.link, &strtab) || symtab.type == 8)
        return -1;
    for (uint64_t i = 0; i < symtab.size / 24; i++) {
        const unsigned char *p = v->d + symtab.offset + i * 24;
        const char *n = str_at(v, &strtab, u32at(p));
        if (!n)
            continue;
        if (strcmp(n, name) == 0)
            found = (long)i;
        if (strncmp(n, "__nv_reservedSMEM", 17) == 0)
            *reserved_smem = 1;
    }
    return found;
}

typedef void (*attr_fn)(void *user, unsigned attr, const unsigned char *val, unsigned len,
                        unsigned hval);

static void walk_attrs(const elf_view *v, const shdr *s, attr_fn fn, void *user)
{
    if (s->type == 8) /* SHT_NOBITS: nothing in the file to read */
        return;
    const unsigned char *p = v->d + s->offset, *end = p + s->size;
    while (p + 4 <= end) {
        unsigned fmt = p[0], attr = p[1], h;
        rd16(p + 2, &h);
        p += 4;
        if (fmt == EIFMT_SVAL) {
            if (p + h > end)
                return;
            fn(user, attr, p, h, 0);
            p += h;
        } else if (fmt == EIFMT_HVAL || fmt == EIFMT_BVAL || fmt == EIFMT_NVAL) {
            fn(user, attr, NULL, 0, h);
        } else {
            return; /* unknown format: stop rather than misread */
        }
    }
}

typedef struct attr_state {
    long sym;
    tk_resource_usage *r;
} attr_state;

static void global_attr(void *user, unsigned attr, const unsigned char *val, unsigned len,
                        unsigned hval)
{
    attr_state *s = user;
    if (!val || len < 8 || (long)u32at(val) != s->sym)
        return;
    if (attr == EIATTR_REGCOUNT)
        s->r->registers = (int32_t)u32at(val + 4);
    else if (attr == EIATTR_FRAME_SIZE)
        s->r->local_bytes = (int32_t)u32at(val + 4);
}

static void entry_attr(void *user, unsigned attr, const unsigned char *val, unsigned len,
                       unsigned hval)
{
    attr_state *s = user;
    if (attr == EIATTR_MAX_THREADS && val && len >= 12)
        s->r->max_threads = (int32_t)(u32at(val) * u32at(val + 4) * u32at(val + 8));
    else if (attr == EIATTR_CBANK_PARAM_SIZE && !val)
        s->r->kernarg_bytes = (int32_t)hval;
    else if (attr == EIATTR_PARAM_CBANK && val && len >= 8 && s->r->kernarg_bytes < 0)
        s->r->kernarg_bytes = (int32_t)(u32at(val + 4) >> 16);
}

static tk_status elf_open(const void *code, size_t size, elf_view *v, tk__err *err)
{
    const unsigned char *d = code;
    if (size < 64 || memcmp(d, "\177ELF", 4) != 0 || d[4] != 2 /* 64-bit */ || d[5] != 1)
        return tk__err_set(err, TK_CORRUPT, "not a 64-bit little-endian cubin");
    elf_view e = {d, size, u64at(d + 0x28), 0, 0, 0};
    rd16(d + 0x3a, &e.shentsize);
    rd16(d + 0x3c, &e.shnum);
    rd16(d + 0x3e, &e.shstrndx);
    if (e.shentsize < 64 || e.shoff > size)
        return tk__err_set(err, TK_CORRUPT, "cubin: bad section table");
    *v = e;
    return TK_OK;
}

static tk_status cuda_inspect(const void *code, size_t size, const char *entry,
                              tk_resource_usage *out, tk__err *err)
{
    elf_view v;
    tk_status est = elf_open(code, size, &v, err);
    if (est != TK_OK)
        return est;

    tk_resource_usage r = {-1, -1, -1, 0, -1, -1, 32, -1, -1};
    int reserved = 0;
    long sym = symbol_index(&v, entry, &reserved);
    if (sym < 0)
        return tk__err_set(err, TK_NOT_FOUND, "cubin: no symbol %s", entry);
    attr_state st = {sym, &r};
    char name[512];
    shdr s;
    if (sec_named(&v, ".nv.info", &s))
        walk_attrs(&v, &s, global_attr, &st);
    snprintf(name, sizeof name, ".nv.info.%s", entry);
    if (sec_named(&v, name, &s))
        walk_attrs(&v, &s, entry_attr, &st);
    snprintf(name, sizeof name, ".nv.shared.%s", entry);
    if (sec_named(&v, name, &s)) {
        uint64_t bytes = s.size;
        /* sm_90 and later reserve 1 KiB of shared memory inside the section. */
        if (reserved && bytes >= 1024)
            bytes -= 1024;
        r.shared_bytes = (int32_t)bytes;
    }
    if (r.registers < 0) {
        /* Older cubins keep the count in the top byte of .text.<entry>'s sh_info. */
        snprintf(name, sizeof name, ".text.%s", entry);
        if (sec_named(&v, name, &s) && (s.info >> 24))
            r.registers = (int32_t)(s.info >> 24);
    }
    *out = r;
    return TK_OK;
}

/* EIATTR_KPARAM_INFO: u32 index, u16 ordinal, u16 offset, u32 flags whose
 * top 14 bits are the size in bytes (checked against cuobjdump's reading
 * of NVRTC 13 cubins: char 1, short 2, pointer 8, a 12-byte struct 12). */
#define EIATTR_KPARAM_INFO 0x17
#define MAX_KPARAMS 4096

typedef struct kparam_state {
    tk__param *p;
    size_t n; /* highest ordinal + 1 */
    int bad;
} kparam_state;

static void kparam_attr(void *user, unsigned attr, const unsigned char *val, unsigned len,
                        unsigned hval)
{
    kparam_state *s = user;
    if (attr != EIATTR_KPARAM_INFO || !val || len < 12 || s->bad)
        return;
    unsigned ordinal, offset;
    rd16(val + 4, &ordinal);
    rd16(val + 6, &offset);
    uint32_t bytes = u32at(val + 8) >> 18;
    if (ordinal >= MAX_KPARAMS || !s->p) {
        s->bad = 1;
        return;
    }
    s->p[ordinal].offset = offset;
    s->p[ordinal].size = bytes;
    s->p[ordinal].kind = TK_PARAM_UNKNOWN;
    if (ordinal + 1 > s->n)
        s->n = ordinal + 1;
}

static tk_status cuda_kernel_params(const void *code, size_t size, const char *symbol,
                                    tk__param **out, size_t *n, tk__err *err)
{
    elf_view v;
    tk_status st = elf_open(code, size, &v, err);
    if (st != TK_OK)
        return st;
    char name[1100];
    shdr s;
    snprintf(name, sizeof name, ".nv.info.%s", symbol);
    if (!sec_named(&v, name, &s))
        return tk__err_set(err, TK_NOT_FOUND, "cubin: no parameter info for %s", symbol);
    kparam_state ks = {calloc(MAX_KPARAMS, sizeof(tk__param)), 0, 0};
    if (!ks.p)
        return tk__err_set(err, TK_OUT_OF_MEMORY, "out of memory");
    for (size_t i = 0; i < MAX_KPARAMS; i++)
        ks.p[i].size = UINT32_MAX; /* marks an ordinal never seen */
    walk_attrs(&v, &s, kparam_attr, &ks);
    for (size_t i = 0; i < ks.n && !ks.bad; i++)
        ks.bad = ks.p[i].size == UINT32_MAX;
    if (ks.bad) {
        free(ks.p);
        return tk__err_set(err, TK_CORRUPT, "cubin: parameter info of %s has gaps", symbol);
    }
    *n = ks.n;
    *out = ks.p;
    return TK_OK;
}

/* Every kernel has a .nv.info.<symbol> section (a kernel without
 * parameters too); device functions have none. */
static tk_status cuda_list_kernels(const void *code, size_t size, char **out, tk__err *err)
{
    elf_view v;
    tk_status st = elf_open(code, size, &v, err);
    if (st != TK_OK)
        return st;
    shdr strs;
    if (!sec(&v, v.shstrndx, &strs))
        return tk__err_set(err, TK_CORRUPT, "cubin: no section names");
    size_t cap = 256, len = 0;
    char *list = malloc(cap);
    if (!list)
        return tk__err_set(err, TK_OUT_OF_MEMORY, "out of memory");
    list[0] = '\0';
    for (unsigned i = 0; i < v.shnum; i++) {
        shdr sh;
        const char *n = sec(&v, i, &sh) ? str_at(&v, &strs, sh.name) : NULL;
        if (!n || strncmp(n, ".nv.info.", 9) != 0)
            continue;
        size_t k = strlen(n + 9);
        if (len + k + 2 > cap) {
            while (len + k + 2 > cap)
                cap *= 2;
            char *grown = realloc(list, cap);
            if (!grown) {
                free(list);
                return tk__err_set(err, TK_OUT_OF_MEMORY, "out of memory");
            }
            list = grown;
        }
        memcpy(list + len, n + 9, k);
        len += k;
        list[len++] = '\n';
        list[len] = '\0';
    }
    *out = list;
    return TK_OK;
}

/* ---------------------------------------------------------------- module */

static tk_status cuda_module_load(void *dev_handle, const void *code, size_t size, void **module,
                                  tk__err *err)
{
    CUmodule m = NULL;
    CUresult r = g.cu.cuModuleLoadData(&m, code);
    if (r != 0)
        return tk__err_set(err, TK_LOAD_FAILED, "cuModuleLoadData: %s", cu_err_name(r));
    *module = m;
    return TK_OK;
}

static void cuda_module_unload(void *dev_handle, void *module)
{
    if (module)
        g.cu.cuModuleUnload(module);
}

/* CUfunction_attribute values (cuda.h) */
#define TK__CU_FUNC_REQUIRED_CLUSTER_WIDTH 11
#define TK__CU_FUNC_REQUIRED_CLUSTER_HEIGHT 12
#define TK__CU_FUNC_REQUIRED_CLUSTER_DEPTH 13
#define TK__CU_FUNC_NON_PORTABLE_CLUSTER_SIZE_ALLOWED 14

static tk_status cuda_module_function(void *module, const char *entry, void **fn, tk__err *err)
{
    CUfunction f = NULL;
    CUresult r = g.cu.cuModuleGetFunction(&f, module, entry);
    if (r != 0)
        return tk__err_set(err, TK_NOT_FOUND, "cuModuleGetFunction(%s): %s", entry, cu_err_name(r));
    /* A kernel compiled for clusters of more than 8 blocks (__cluster_dims__:
     * 16 on sm_90) launches only with the non-portable size allowed. */
    int cw = 0, ch = 0, cd = 0;
    if (g.cu.cuFuncGetAttribute(&cw, TK__CU_FUNC_REQUIRED_CLUSTER_WIDTH, f) == 0 &&
        g.cu.cuFuncGetAttribute(&ch, TK__CU_FUNC_REQUIRED_CLUSTER_HEIGHT, f) == 0 &&
        g.cu.cuFuncGetAttribute(&cd, TK__CU_FUNC_REQUIRED_CLUSTER_DEPTH, f) == 0 &&
        (long long)cw * (ch > 0 ? ch : 1) * (cd > 0 ? cd : 1) > 8) {
        r = g.cu.cuFuncSetAttribute(f, TK__CU_FUNC_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1);
        if (r != 0)
            return tk__err_set(err, TK_UNSUPPORTED,
                               "%s: clusters of %d x %d x %d blocks, more than 8: "
                               "cuFuncSetAttribute(NON_PORTABLE_CLUSTER_SIZE_ALLOWED): %s",
                               entry, cw, ch, cd, cu_err_name(r));
    }
    *fn = f;
    return TK_OK;
}

static tk_status cuda_launch(void *fn, const unsigned grid[3], const unsigned block[3],
                             unsigned shared_bytes, void *stream, void **args, tk__err *err)
{
    CUresult r = g.cu.cuLaunchKernel(fn, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                                     shared_bytes, stream, args, NULL);
    if (r != 0)
        return tk__err_set(err, TK_LAUNCH_FAILED, "cuLaunchKernel: %s", cu_err_name(r));
    return TK_OK;
}

/* cuLaunchKernelEx (CUDA 12+ drivers; looked up apart from the table). The
 * structures as cuda.h lays them out: an attribute is an id padded to 8
 * bytes and a 64-byte value union. */
typedef struct tk__cu_launch_attr {
    int id;
    char pad[4];
    union {
        char bytes[64];
        int programmatic_stream_serialization_allowed;
    } value;
} tk__cu_launch_attr;
typedef struct tk__cu_launch_config {
    unsigned grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes;
    void *stream;
    tk__cu_launch_attr *attrs;
    unsigned n_attrs;
} tk__cu_launch_config;
typedef CUresult (*tk__cu_launch_ex)(const tk__cu_launch_config *config, void *fn, void **args,
                                     void **extra);
#define TK__CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION 6
_Static_assert(sizeof(tk__cu_launch_attr) == 72, "CUlaunchAttribute is 72 bytes");
_Static_assert(offsetof(tk__cu_launch_config, stream) == 32 &&
                   offsetof(tk__cu_launch_config, attrs) == 40 &&
                   offsetof(tk__cu_launch_config, n_attrs) == 48,
               "CUlaunchConfig layout");

static tk_status cuda_launch_pdl(void *fn, const unsigned grid[3], const unsigned block[3],
                                 unsigned shared_bytes, void *stream, void **args, tk__err *err)
{
    tk__cu_launch_ex launch_ex = (tk__cu_launch_ex)g.launch_ex;
    if (launch_ex == NULL)
        return tk__err_set(err, TK_UNSUPPORTED, "the CUDA driver has no cuLaunchKernelEx");
    tk__cu_launch_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.id = TK__CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmatic_stream_serialization_allowed = 1;
    const tk__cu_launch_config config = {grid[0],  grid[1],      grid[2], block[0], block[1],
                                         block[2], shared_bytes, stream,  &attr,    1};
    CUresult r = launch_ex(&config, fn, args, NULL);
    if (r != 0)
        return tk__err_set(err, TK_LAUNCH_FAILED, "cuLaunchKernelEx: %s", cu_err_name(r));
    return TK_OK;
}

/* cuTensorMapEncodeTiled (CUDA 12+ drivers; looked up apart from the table
 * so that older drivers still load). Enum values from cuda.h. */
typedef CUresult (*tk__cu_tmap_encode)(void *map, int dtype, unsigned rank, void *base,
                                       const uint64_t *dims, const uint64_t *strides,
                                       const unsigned *box, const unsigned *elem_strides,
                                       int interleave, int swizzle, int l2_promotion, int oob_fill);
#define TK__TMAP_FLOAT16 6
#define TK__TMAP_FLOAT32 7
#define TK__TMAP_INTERLEAVE_NONE 0
#define TK__TMAP_SWIZZLE_128B 3
#define TK__TMAP_L2_256B 3
#define TK__TMAP_OOB_ZERO 0

static tk_status cuda_tensor_map_f16(void *out, const void *base, uint64_t rows, uint64_t cols,
                                     uint64_t row_bytes, unsigned box_cols, unsigned box_rows,
                                     unsigned elem_bytes, tk__err *err)
{
    tk__cu_tmap_encode encode = (tk__cu_tmap_encode)g.tmap_encode;
    if (encode == NULL)
        return tk__err_set(err, TK_UNSUPPORTED,
                           "the CUDA driver has no cuTensorMapEncodeTiled (needs CUDA 12)");
    const uint64_t dims[2] = {cols, rows};
    const uint64_t strides[1] = {row_bytes};
    const unsigned box[2] = {box_cols, box_rows};
    const unsigned elem_strides[2] = {1, 1};
    CUresult r = encode(out, elem_bytes == 4 ? TK__TMAP_FLOAT32 : TK__TMAP_FLOAT16, 2, (void *)base,
                        dims, strides, box, elem_strides,
                        TK__TMAP_INTERLEAVE_NONE, TK__TMAP_SWIZZLE_128B, TK__TMAP_L2_256B,
                        TK__TMAP_OOB_ZERO);
    if (r != 0)
        return tk__err_set(err, TK_LAUNCH_FAILED,
                           "cuTensorMapEncodeTiled(%llu x %llu, row %llu bytes, box %u x %u): %s",
                           (unsigned long long)rows, (unsigned long long)cols,
                           (unsigned long long)row_bytes, box_cols, box_rows, cu_err_name(r));
    return TK_OK;
}

/* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES */
#define TK__CU_FUNC_MAX_DYN_SHARED 8

static tk_status cuda_raise_shared(void *fn, unsigned bytes, tk__err *err)
{
    CUresult r = g.cu.cuFuncSetAttribute(fn, TK__CU_FUNC_MAX_DYN_SHARED, (int)bytes);
    if (r != 0)
        return tk__err_set(err, TK_LAUNCH_FAILED,
                           "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES, %u): %s", bytes,
                           cu_err_name(r));
    return TK_OK;
}

static tk_status cuda_mem_alloc(size_t bytes, void **out, tk__err *err)
{
    CUdeviceptr p = 0;
    CUresult r = g.cu.cuMemAlloc_v2(&p, bytes ? bytes : 1);
    if (r != 0)
        return tk__err_set(err, r == 2 ? TK_OUT_OF_MEMORY : TK_DEVICE_ERROR, "cuMemAlloc: %s",
                           cu_err_name(r));
    *out = (void *)(uintptr_t)p;
    return TK_OK;
}

static tk_status cuda_mem_free(void *ptr, tk__err *err)
{
    CUresult r = g.cu.cuMemFree_v2((CUdeviceptr)(uintptr_t)ptr);
    return r ? tk__err_set(err, TK_DEVICE_ERROR, "cuMemFree: %s", cu_err_name(r)) : TK_OK;
}

/* Uploads and memsets go through the legacy default stream and may still be
 * in flight when the call returns (pageable staging, async memset); waiting
 * for that stream makes them complete, so that a kernel launched next on any
 * stream, a non-blocking one included, sees the data. */
static tk_status settle(const char *what, CUresult r, tk__err *err)
{
    if (r == 0)
        r = g.cu.cuStreamSynchronize(NULL);
    return r ? tk__err_set(err, TK_DEVICE_ERROR, "%s: %s", what, cu_err_name(r)) : TK_OK;
}

static tk_status cuda_mem_upload(void *dst, const void *src, size_t bytes, tk__err *err)
{
    return settle("cuMemcpyHtoD", g.cu.cuMemcpyHtoD_v2((CUdeviceptr)(uintptr_t)dst, src, bytes),
                  err);
}

static tk_status cuda_mem_download(void *dst, const void *src, size_t bytes, tk__err *err)
{
    CUresult r = g.cu.cuMemcpyDtoH_v2(dst, (CUdeviceptr)(uintptr_t)src, bytes);
    return r ? tk__err_set(err, TK_DEVICE_ERROR, "cuMemcpyDtoH: %s", cu_err_name(r)) : TK_OK;
}

static tk_status cuda_mem_set(void *dst, unsigned char byte, size_t bytes, tk__err *err)
{
    return settle("cuMemsetD8", g.cu.cuMemsetD8_v2((CUdeviceptr)(uintptr_t)dst, byte, bytes), err);
}

static tk_status cuda_stream_sync(void *stream, tk__err *err)
{
    CUresult r = g.cu.cuStreamSynchronize(stream);
    return r ? tk__err_set(err, TK_DEVICE_ERROR, "cuStreamSynchronize: %s", cu_err_name(r)) : TK_OK;
}

static tk_status cuda_event_create(void **ev, tk__err *err)
{
    CUevent e = NULL;
    CUresult r = g.cu.cuEventCreate(&e, 0);
    if (r != 0)
        return tk__err_set(err, TK_DEVICE_ERROR, "cuEventCreate: %s", cu_err_name(r));
    *ev = e;
    return TK_OK;
}

static void cuda_event_destroy(void *ev)
{
    if (ev)
        g.cu.cuEventDestroy_v2(ev);
}

static tk_status cuda_event_record(void *ev, void *stream, tk__err *err)
{
    CUresult r = g.cu.cuEventRecord(ev, stream);
    return r ? tk__err_set(err, TK_DEVICE_ERROR, "cuEventRecord: %s", cu_err_name(r)) : TK_OK;
}

static tk_status cuda_event_elapsed(void *start, void *stop, float *ms, tk__err *err)
{
    CUresult r = g.cu.cuEventSynchronize(stop);
    if (r != 0)
        return tk__err_set(err, TK_DEVICE_ERROR, "cuEventSynchronize: %s", cu_err_name(r));
    r = g.cu.cuEventElapsedTime(ms, start, stop);
    return r ? tk__err_set(err, TK_DEVICE_ERROR, "cuEventElapsedTime: %s", cu_err_name(r)) : TK_OK;
}

tk_status tk__cuda_stream_create(void **stream, tk__err *err)
{
    tk_status st = need_driver(err);
    if (st != TK_OK)
        return st;
    CUstream s = NULL;
    CUresult r = g.cu.cuStreamCreate(&s, 1 /* CU_STREAM_NON_BLOCKING */);
    if (r != 0)
        return tk__err_set(err, TK_DEVICE_ERROR, "cuStreamCreate: %s", cu_err_name(r));
    *stream = s;
    return TK_OK;
}

void tk__cuda_stream_destroy(void *stream)
{
    if (stream && g.cu.cuStreamDestroy_v2)
        g.cu.cuStreamDestroy_v2(stream);
}

static const tk__backend g_cuda = {
    .name = "cuda",
    .kind = TK_BACKEND_CUDA,
    .load = cuda_load,
    .describe = cuda_describe,
    .compiler_identity = cuda_compiler_identity,
    .check_target = cuda_check_target,
    .device_count = cuda_device_count,
    .device_open = cuda_device_open,
    .device_close = cuda_device_close,
    .device_bind = cuda_device_bind,
    .compile = cuda_compile,
    .default_options = cuda_default_options,
    .prelude = cuda_prelude,
    .inspect = cuda_inspect,
    .kernel_params = cuda_kernel_params,
    .list_kernels = cuda_list_kernels,
    .module_load = cuda_module_load,
    .module_unload = cuda_module_unload,
    .module_function = cuda_module_function,
    .launch = cuda_launch,
    .raise_shared = cuda_raise_shared,
    .tensor_map_f16 = cuda_tensor_map_f16,
    .launch_pdl = cuda_launch_pdl,
    .sm_count = cuda_sm_count,
    .mem_alloc = cuda_mem_alloc,
    .mem_free = cuda_mem_free,
    .mem_upload = cuda_mem_upload,
    .mem_download = cuda_mem_download,
    .mem_set = cuda_mem_set,
    .stream_sync = cuda_stream_sync,
    .event_create = cuda_event_create,
    .event_destroy = cuda_event_destroy,
    .event_record = cuda_event_record,
    .event_elapsed = cuda_event_elapsed,
};

const tk__backend *tk__backend_cuda(void)
{
    return &g_cuda;
}
