/*
 * The engine against raw driver calls, on one kernel source (NVIDIA):
 *   cold compile: tk_kernel_get on a miss vs raw NVRTC + cuModuleLoadData
 *                 with the same source (prelude included) and options;
 *   disk hit:     tk_kernel_get in a fresh process, after context creation
 *                 (driver start excluded), to a launchable handle;
 *   memory hit:   tk_kernel_get on a loaded kernel;
 *   launch:       tk_kernel_launch vs cuLaunchKernel on the same function,
 *                 host-side cost per launch.
 *   disk hit with 20 user headers: a kernel including a chain of 20 headers
 *                 from an -I folder, in a fresh process: the lookup checks
 *                 every header's hash before accepting the entry. Runs
 *                 without a GPU too (offline sm_90 context with NVRTC, else
 *                 the stub backend: the lookup part only, no module load).
 * Without a CUDA device the rest prints why and exits 77.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench_stats.h"
#include "jit/jit_internal.h"

static const char *const k_source =
    "extern \"C\" __global__ void axpy_half(__half *y, const __half *x, float a, int n)\n"
    "{\n"
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i < n) y[i] = __float2half(a * __half2float(x[i]) + __half2float(y[i]) + BIAS);\n"
    "}\n";

static const char *const k_empty =
    "extern \"C\" __global__ void empty_kernel(int *p) { if (p) p[0] = 1; }\n";

typedef int (*nvrtcCreateProgram_t)(void **, const char *, const char *, int, const char *const *,
                                    const char *const *);
typedef int (*nvrtcCompileProgram_t)(void *, int, const char *const *);
typedef int (*nvrtcGetCUBINSize_t)(void *, size_t *);
typedef int (*nvrtcGetCUBIN_t)(void *, char *);
typedef int (*nvrtcDestroyProgram_t)(void **);
typedef int (*cuModuleLoadData_t)(void **, const void *);
typedef int (*cuModuleGetFunction_t)(void **, void *, const char *);
typedef int (*cuModuleUnload_t)(void *);
typedef int (*cuLaunchKernel_t)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                unsigned, void *, void **, void **);
typedef int (*cuCtxSynchronize_t)(void);

static struct {
    nvrtcCreateProgram_t create;
    nvrtcCompileProgram_t compile;
    nvrtcGetCUBINSize_t cubin_size;
    nvrtcGetCUBIN_t cubin;
    nvrtcDestroyProgram_t destroy;
    cuModuleLoadData_t load;
    cuModuleGetFunction_t get_function;
    cuModuleUnload_t unload;
    cuLaunchKernel_t launch;
    cuCtxSynchronize_t sync;
} raw;

static int load_raw(void)
{
    void *rtc = dlopen("libnvrtc.so.13", RTLD_NOW);
    if (!rtc)
        rtc = dlopen("libnvrtc.so", RTLD_NOW);
    void *cu = dlopen("libcuda.so.1", RTLD_NOW);
    if (!rtc || !cu)
        return 0;
    *(void **)&raw.create = dlsym(rtc, "nvrtcCreateProgram");
    *(void **)&raw.compile = dlsym(rtc, "nvrtcCompileProgram");
    *(void **)&raw.cubin_size = dlsym(rtc, "nvrtcGetCUBINSize");
    *(void **)&raw.cubin = dlsym(rtc, "nvrtcGetCUBIN");
    *(void **)&raw.destroy = dlsym(rtc, "nvrtcDestroyProgram");
    *(void **)&raw.load = dlsym(cu, "cuModuleLoadData");
    *(void **)&raw.get_function = dlsym(cu, "cuModuleGetFunction");
    *(void **)&raw.unload = dlsym(cu, "cuModuleUnload");
    *(void **)&raw.launch = dlsym(cu, "cuLaunchKernel");
    *(void **)&raw.sync = dlsym(cu, "cuCtxSynchronize");
    return raw.create && raw.compile && raw.cubin_size && raw.cubin && raw.destroy && raw.load &&
           raw.get_function && raw.unload && raw.launch && raw.sync;
}

static tk_context *make_context(const char *dir, int quiet)
{
    tk_config *cfg = NULL;
    tk_context *ctx = NULL;
    char err[1024];
    tk_config_create(&cfg);
    tk_config_set_backend(cfg, TK_BACKEND_CUDA);
    tk_config_set_cache_dir(cfg, dir);
    tk_status st = tk_context_create(cfg, &ctx, err, sizeof err);
    tk_config_destroy(cfg);
    if (st != TK_OK) {
        if (!quiet)
            printf("skipped: no CUDA device (%s: %s)\n", tk_status_str(st), err);
        return NULL;
    }
    return ctx;
}

/* Raw NVRTC to a loaded function, with the engine's exact source and options. */
static double raw_compile_once(tk_context *ctx, int iter)
{
    char full[4096], arch[64], define[64];
    snprintf(full, sizeof full, "%s#line 1 \"raw.cu\"\n%s", ctx->be->prelude(), k_source);
    snprintf(arch, sizeof arch, "--gpu-architecture=%s", tk_context_target(ctx));
    snprintf(define, sizeof define, "-DBIAS=%d.0f", iter);
    const char *opts[16];
    int n = 0;
    opts[n++] = arch;
    for (const char *const *o = ctx->be->default_options(); *o && n < 14; o++)
        opts[n++] = *o;
    opts[n++] = define;

    double t0 = bench_wall_s();
    void *prog = NULL, *mod = NULL, *fn = NULL;
    size_t size = 0;
    if (raw.create(&prog, full, "raw.cu", 0, NULL, NULL) || raw.compile(prog, n, opts) ||
        raw.cubin_size(prog, &size)) {
        fprintf(stderr, "raw NVRTC failed\n");
        exit(1);
    }
    char *cubin = malloc(size);
    raw.cubin(prog, cubin);
    raw.destroy(&prog);
    if (raw.load(&mod, cubin) || raw.get_function(&fn, mod, "axpy_half")) {
        fprintf(stderr, "raw load failed\n");
        exit(1);
    }
    double t = bench_wall_s() - t0;
    free(cubin);
    raw.unload(mod);
    return t;
}

static double engine_compile_once(tk_context *ctx, int iter)
{
    char value[32];
    snprintf(value, sizeof value, "%d.0f", iter);
    tk_define def = {"BIAS", value};
    tk_kernel_desc d = {.source = k_source, .entry = "axpy_half", .defines = &def, .n_defines = 1};
    tk_kernel *k = NULL;
    double t0 = bench_wall_s();
    tk_status st = tk_kernel_get(ctx, &d, &k);
    double t = bench_wall_s() - t0;
    tk_kernel_info info = TK_STRUCT_INIT(tk_kernel_info);
    if (st != TK_OK || tk_kernel_get_info(k, &info) != TK_OK || info.origin != TK_ORIGIN_COMPILED) {
        fprintf(stderr, "engine compile failed: %s\n", tk_context_last_error(ctx));
        exit(1);
    }
    return t;
}

static tk_kernel_desc bench_desc(tk_define *def)
{
    def->name = "BIAS";
    def->value = "0.0f";
    tk_kernel_desc d = {.source = k_source, .entry = "axpy_half", .defines = def, .n_defines = 1};
    return d;
}

/* A child's timed lookup: tk_kernel_get of d on ctx, which must come from
 * the disk cache; prints the seconds, destroys ctx. 0, or 3 when the get
 * failed or did not hit on disk. */
static int time_disk_get(tk_context *ctx, const tk_kernel_desc *d)
{
    tk_kernel *k = NULL;
    double t0 = bench_wall_s();
    tk_status st = tk_kernel_get(ctx, d, &k);
    double t = bench_wall_s() - t0;
    tk_kernel_info info = TK_STRUCT_INIT(tk_kernel_info);
    if (st != TK_OK || tk_kernel_get_info(k, &info) != TK_OK || info.origin != TK_ORIGIN_DISK)
        return 3;
    printf("%.9f\n", t);
    tk_context_destroy(ctx);
    return 0;
}

/* Child: context created (driver start excluded), then one disk hit timed. */
static int disk_child(const char *dir)
{
    tk_context *ctx = make_context(dir, 1);
    if (!ctx)
        return 2;
    tk_define def;
    tk_kernel_desc d = bench_desc(&def);
    return time_disk_get(ctx, &d);
}

static double run_disk_child(const char *self, const char *dir)
{
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "'%s' --disk-child '%s'", self, dir);
    FILE *p = popen(cmd, "r");
    double t = -1;
    if (!p)
        return -1;
    if (fscanf(p, "%lf", &t) != 1)
        t = -1;
    if (pclose(p) != 0)
        return -1;
    return t;
}

/* ------------------------------------------- disk hit with user headers */

enum { N_HEADERS = 20 };

static const char *const k_header_kernel =
    "#include \"h00.h\"\n"
    "extern \"C\" __global__ void chained(float *x) { x[threadIdx.x] += V19; }\n";

/* kind: "device" (CUDA device), "sm_90" (offline NVRTC) or "stub". */
static tk_context *headers_context(const char *dir, const char *kind)
{
    tk_config *cfg = NULL;
    tk_context *ctx = NULL;
    char err[1024];
    tk_config_create(&cfg);
    tk_config_set_backend(cfg, strcmp(kind, "stub") == 0 ? TK_BACKEND_STUB : TK_BACKEND_CUDA);
    if (strcmp(kind, "sm_90") == 0)
        tk_config_set_target(cfg, "sm_90");
    tk_config_set_cache_dir(cfg, dir);
    if (tk_context_create(cfg, &ctx, err, sizeof err) != TK_OK)
        ctx = NULL;
    tk_config_destroy(cfg);
    return ctx;
}

static tk_kernel_desc headers_desc(const char *dir, char *opt, size_t size, const char **opts)
{
    snprintf(opt, size, "-I%s/inc", dir);
    opts[0] = opt;
    tk_kernel_desc d = {
        .source = k_header_kernel, .entry = "chained", .options = opts, .n_options = 1};
    return d;
}

static int headers_child(const char *dir, const char *kind)
{
    tk_context *ctx = headers_context(dir, kind);
    if (!ctx)
        return 2;
    char opt[4200];
    const char *opts[1];
    tk_kernel_desc d = headers_desc(dir, opt, sizeof opt, opts);
    return time_disk_get(ctx, &d);
}

/* Prints one table row; returns 0 when it ran. */
static int headers_case(const char *self, int have_device)
{
    char dir[] = "/tmp/tk-bench-hdr-XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    char path[4200];
    snprintf(path, sizeof path, "%s/inc", dir);
    mkdir(path, 0700);
    for (int i = 0; i < N_HEADERS; i++) {
        snprintf(path, sizeof path, "%s/inc/h%02d.h", dir, i);
        FILE *f = fopen(path, "w");
        if (!f)
            return 1;
        fprintf(f, "#pragma once\n");
        if (i + 1 < N_HEADERS)
            fprintf(f, "#include \"h%02d.h\"\n", i + 1);
        /* A few hundred bytes each, like a small real header. */
        for (int l = 0; l < 8; l++)
            fprintf(
                f,
                "static __device__ __forceinline__ float f%02d_%d(float x) { return x * %d.0f; }\n",
                i, l, l + 1);
        fprintf(f, "#define V%02d %d\n", i, i);
        fclose(f);
    }
    const char *kind = have_device ? "device" : "sm_90";
    tk_context *ctx = headers_context(dir, kind);
    if (!ctx) {
        kind = "stub";
        ctx = headers_context(dir, kind);
    }
    char opt[4200];
    const char *opts[1];
    tk_kernel_desc d = headers_desc(dir, opt, sizeof opt, opts);
    tk_kernel *k = NULL;
    if (!ctx || tk_kernel_get(ctx, &d, &k) != TK_OK) {
        fprintf(stderr, "headers case: %s\n", ctx ? tk_context_last_error(ctx) : "no context");
        return 1;
    }
    tk_context_destroy(ctx);
    enum { N_RUNS = 9 };
    double t[N_RUNS];
    char cmd[8400];
    snprintf(cmd, sizeof cmd, "'%s' --headers-child '%s' %s", self, dir, kind);
    for (int i = 0; i < N_RUNS; i++) {
        FILE *p = popen(cmd, "r");
        t[i] = -1;
        if (p && fscanf(p, "%lf", &t[i]) != 1)
            t[i] = -1;
        if (!p || pclose(p) != 0 || t[i] < 0) {
            fprintf(stderr, "headers child failed\n");
            return 1;
        }
    }
    double med = bench_median(t, N_RUNS);
    printf("| disk hit, kernel with %d user headers, fresh process (median of %d; %s) | %.3f ms | "
           "- | <= 0.3 ms | %s |\n",
           N_HEADERS, N_RUNS,
           strcmp(kind, "device") == 0  ? "to launchable"
           : strcmp(kind, "sm_90") == 0 ? "offline sm_90: lookup, no module load"
                                        : "stub backend: lookup, no module load",
           med * 1e3, med <= 0.3e-3 ? "yes" : "NO");
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--disk-child") == 0)
        return disk_child(argv[2]);
    if (argc == 4 && strcmp(argv[1], "--headers-child") == 0)
        return headers_child(argv[2], argv[3]);

    char dir[] = "/tmp/tk-bench-jit-XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    char self[4096];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sl <= 0)
        return 1;
    self[sl] = '\0';

    tk_context *ctx = make_context(dir, 1);
    if (!ctx) {
        /* No device: the user-header lookup still has a figure to give. */
        printf(
            "\n| measure | tokitai-jit | raw | target | met |\n| --- | --- | --- | --- | --- |\n");
        headers_case(self, 0);
        make_context(dir, 0); /* prints why the rest is skipped */
        rmdir(dir);
        return 77;
    }
    if (!load_raw()) {
        printf("skipped: cannot load libnvrtc / libcuda directly\n");
        return 77;
    }
    printf("device target %s, compiler %s\n", tk_context_target(ctx), tk_context_compiler(ctx));

    /* 1. Cold compile, alternating, after one untimed warm-up of each. */
    enum { N_COMPILE = 9 };
    double eng[N_COMPILE], rawc[N_COMPILE];
    raw_compile_once(ctx, 1000);
    engine_compile_once(ctx, 1001);
    for (int i = 0; i < N_COMPILE; i++) {
        rawc[i] = raw_compile_once(ctx, 2000 + i);
        eng[i] = engine_compile_once(ctx, 3000 + i);
    }
    double cold_engine = bench_median(eng, N_COMPILE), cold_raw = bench_median(rawc, N_COMPILE);

    /* 2. Disk hit in fresh processes: store the bench kernel first. */
    tk_define def;
    tk_kernel_desc d = bench_desc(&def);
    tk_kernel *k = NULL;
    if (tk_kernel_get(ctx, &d, &k) != TK_OK) {
        fprintf(stderr, "get: %s\n", tk_context_last_error(ctx));
        return 1;
    }
    enum { N_DISK = 7 };
    double disk[N_DISK];
    for (int i = 0; i < N_DISK; i++) {
        disk[i] = run_disk_child(self, dir);
        if (disk[i] < 0) {
            fprintf(stderr, "disk child failed\n");
            return 1;
        }
    }
    double disk_hit = bench_median(disk, N_DISK);

    /* 3. Memory hit: 1e5 calls in batches of 100. */
    enum { N_BATCH = 1000, PER_BATCH = 100 };
    static double mem[N_BATCH];
    for (int i = 0; i < 1000; i++)
        tk_kernel_get(ctx, &d, &k);
    for (int b = 0; b < N_BATCH; b++) {
        double t0 = bench_wall_s();
        for (int i = 0; i < PER_BATCH; i++)
            tk_kernel_get(ctx, &d, &k);
        mem[b] = (bench_wall_s() - t0) / PER_BATCH;
    }
    double memory_hit = bench_median(mem, N_BATCH);

    /* 3b. Memory hit on an embedded source (no source text compared). */
    double memory_hit_embedded = -1;
    char emb_entry[128] = "";
    const char *emb_name = NULL;
    for (const char *const *name = tk_embedded_sources(); *name && !emb_name; name++) {
        const char *t = strstr(tk__embedded_source(*name, NULL), "__global__ void");
        if (!t)
            continue;
        t += 15;
        while (*t == ' ' || *t == '\n')
            t++;
        if (strncmp(t, "__launch_bounds__", 17) == 0) {
            t = strchr(t, ')') + 1;
            while (*t == ' ' || *t == '\n')
                t++;
        }
        size_t n = 0;
        while (n < sizeof emb_entry - 1 &&
               (t[n] == '_' || (t[n] >= 'a' && t[n] <= 'z') || (t[n] >= 'A' && t[n] <= 'Z') ||
                (t[n] >= '0' && t[n] <= '9')))
            n++;
        memcpy(emb_entry, t, n);
        emb_entry[n] = '\0';
        emb_name = *name;
    }
    if (emb_name) {
        tk_kernel_desc dm = {.source_name = emb_name, .entry = emb_entry};
        tk_kernel *km = NULL;
        if (tk_kernel_get(ctx, &dm, &km) == TK_OK) {
            for (int b = 0; b < N_BATCH; b++) {
                double t0 = bench_wall_s();
                for (int i = 0; i < PER_BATCH; i++)
                    tk_kernel_get(ctx, &dm, &km);
                mem[b] = (bench_wall_s() - t0) / PER_BATCH;
            }
            memory_hit_embedded = bench_median(mem, N_BATCH);
        }
    }

    /* 4. Launch cost: the same function, engine vs raw, alternating batches. */
    tk_kernel_desc de = {.source = k_empty, .entry = "empty_kernel"};
    tk_kernel *ke = NULL;
    if (tk_kernel_get(ctx, &de, &ke) != TK_OK) {
        fprintf(stderr, "get empty: %s\n", tk_context_last_error(ctx));
        return 1;
    }
    void *fn = ke->fn;
    int *nullp = NULL;
    void *args[] = {&nullp};
    unsigned grid[3] = {1, 1, 1}, block[3] = {32, 1, 1};
    enum { N_LB = 200, PER_LB = 200 };
    static double le[N_LB], lr[N_LB];
    for (int b = 0; b < N_LB; b++) {
        double t0 = bench_wall_s();
        for (int i = 0; i < PER_LB; i++)
            tk_kernel_launch(ctx, ke, grid, block, 0, NULL, args);
        le[b] = (bench_wall_s() - t0) / PER_LB;
        raw.sync();
        t0 = bench_wall_s();
        for (int i = 0; i < PER_LB; i++)
            raw.launch(fn, 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL);
        lr[b] = (bench_wall_s() - t0) / PER_LB;
        raw.sync();
    }
    double launch_engine = bench_median(le, N_LB), launch_raw = bench_median(lr, N_LB);

    printf("\n| measure | tokitai-jit | raw | target | met |\n");
    printf("| --- | --- | --- | --- | --- |\n");
    printf("| cold compile to launchable (median of %d) | %.2f ms | %.2f ms (NVRTC + "
           "cuModuleLoadData) | <= 1.05x raw | %s (%.3fx) |\n",
           N_COMPILE, cold_engine * 1e3, cold_raw * 1e3,
           cold_engine <= 1.05 * cold_raw ? "yes" : "NO", cold_engine / cold_raw);
    printf(
        "| disk hit to launchable, fresh process (median of %d) | %.3f ms | - | <= 0.3 ms | %s |\n",
        N_DISK, disk_hit * 1e3, disk_hit <= 0.3e-3 ? "yes" : "NO");
    printf("| memory hit, user source, tk_kernel_get (median of %d x %d) | %.1f ns | - | <= 200 ns "
           "| %s |\n",
           N_BATCH, PER_BATCH, memory_hit * 1e9, memory_hit <= 200e-9 ? "yes" : "NO");
    if (memory_hit_embedded >= 0)
        printf("| memory hit, embedded source %s/%s | %.1f ns | - | <= 200 ns | %s |\n", emb_name,
               emb_entry, memory_hit_embedded * 1e9, memory_hit_embedded <= 200e-9 ? "yes" : "NO");
    headers_case(self, 1);
    printf("| launch, host cost (median of %d x %d) | %.3f us | %.3f us (cuLaunchKernel) | <= raw "
           "+ 0.3 us | %s |\n",
           N_LB, PER_LB, launch_engine * 1e6, launch_raw * 1e6,
           launch_engine <= launch_raw + 0.3e-6 ? "yes" : "NO");

    tk_context_destroy(ctx);
    char rm[256];
    snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
    if (system(rm) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return 0;
}
