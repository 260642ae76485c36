/*
 * The real compilers, offline (no GPU): NVRTC for sm_80 / sm_90 and hipRTC
 * for gfx90a / gfx1030, resource metadata from the cubin and from comgr,
 * the cache round trip, target checks and compile logs. A test whose
 * compiler is not installed prints "skipped: ..." and returns; when neither
 * is installed the whole program exits 77.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "jit/jit_internal.h"
#include "tk_test.h"

static const char *const k_source =
    "extern \"C\" __global__ void __launch_bounds__(256)\n"
    "scale_half(__half *x, float a, int n)\n"
    "{\n"
    "    __shared__ float s[100];\n"
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    s[threadIdx.x % 100] = a * SCALE;\n"
    "    __syncthreads();\n"
    "    if (i < n) x[i] = __float2half(__half2float(x[i]) * s[(threadIdx.x + 1) % 100]);\n"
    "}\n";

static const tk_define k_defines[] = {{"SCALE", "2.0f"}};

static char *g_dir;

static void setup(void)
{
    g_dir = tk_test_tmpdir("backend");
}

static void teardown(void)
{
    tk_test_rmtree(g_dir);
    free(g_dir);
}

/* Offline context for target, or NULL (and a "skipped" line) when the
 * compiler is not installed. */
static tk_context *offline(tk_backend_kind kind, const char *target, tk_status *st_out, char *err,
                           size_t err_size)
{
    tk_config *cfg = NULL;
    tk_context *ctx = NULL;
    tk_assert_status(tk_config_create(&cfg), TK_OK);
    tk_assert_status(tk_config_set_backend(cfg, kind), TK_OK);
    tk_assert_status(tk_config_set_cache_dir(cfg, g_dir), TK_OK);
    tk_assert_status(tk_config_set_target(cfg, target), TK_OK);
    tk_status st = tk_context_create(cfg, &ctx, err, err_size);
    tk_config_destroy(cfg);
    if (st_out)
        *st_out = st;
    if (st == TK_BACKEND_UNAVAILABLE) {
        printf("skipped: %s compiler unavailable: %s\n",
               kind == TK_BACKEND_CUDA ? "NVRTC" : "hipRTC", err);
        return NULL;
    }
    return ctx;
}

static tk_context_stats stats_of(const tk_context *ctx)
{
    tk_context_stats s = TK_STRUCT_INIT(tk_context_stats);
    tk_assert_status(tk_context_get_stats(ctx, &s), TK_OK);
    return s;
}

static tk_kernel *get_ok(tk_context *ctx)
{
    tk_kernel_desc d = {
        .source = k_source, .entry = "scale_half", .defines = k_defines, .n_defines = 1};
    tk_kernel *k = NULL;
    tk_status st = tk_kernel_get(ctx, &d, &k);
    ck_assert_msg(st == TK_OK, "tk_kernel_get: %s: %s", tk_status_str(st),
                  tk_context_last_error(ctx));
    return k;
}

typedef struct listing {
    int n;
    char backend[16], arch[64];
    tk_resource_usage res;
} listing;

static int visit(void *user, const tk_cache_entry_info *info)
{
    listing *l = user;
    l->n++;
    snprintf(l->backend, sizeof l->backend, "%s", info->backend);
    snprintf(l->arch, sizeof l->arch, "%s", info->arch);
    l->res = info->resources;
    return 0;
}

static listing list_cache(void)
{
    tk_config *cfg = NULL;
    tk_cache *cache = NULL;
    listing l;
    memset(&l, 0, sizeof l);
    tk_assert_status(tk_config_create(&cfg), TK_OK);
    tk_assert_status(tk_config_set_cache_dir(cfg, g_dir), TK_OK);
    tk_assert_status(tk_cache_open(cfg, &cache), TK_OK);
    tk_assert_status(tk_cache_list(cache, visit, &l), TK_OK);
    tk_cache_close(cache);
    tk_config_destroy(cfg);
    return l;
}

static void nvrtc_for(const char *target)
{
    char err[1024];
    tk_context *ctx = offline(TK_BACKEND_CUDA, target, NULL, err, sizeof err);
    if (!ctx)
        return;
    ck_assert_str_eq(tk_context_backend_name(ctx), "cuda");
    ck_assert_str_eq(tk_context_target(ctx), target);
    ck_assert_msg(strncmp(tk_context_compiler(ctx), "nvrtc-", 6) == 0, "compiler %s",
                  tk_context_compiler(ctx));
    tk_kernel *k = get_ok(ctx);
    tk_kernel_info info = TK_STRUCT_INIT(tk_kernel_info);
    tk_assert_status(tk_kernel_get_info(k, &info), TK_OK);
    ck_assert_int_eq(info.origin, TK_ORIGIN_COMPILED);
    ck_assert_msg(info.compile_seconds > 0.0, "compile time %f", info.compile_seconds);
    ck_assert_int_gt(info.resources.registers, 0);
    ck_assert_int_lt(info.resources.registers, 256);
    ck_assert_int_eq(info.resources.shared_bytes, 400);
    ck_assert_int_eq(info.resources.local_bytes, 0);
    ck_assert_int_eq(info.resources.kernarg_bytes, 16);
    ck_assert_int_eq(info.resources.max_threads, 256);
    ck_assert_int_eq(info.resources.wavefront_size, 32);
    const tk_kernel *kk = k;
    ck_assert_uint_gt(kk->code_size, 64);
    ck_assert_int_eq(memcmp(kk->code, "\177ELF", 4), 0);
    ck_assert_uint_eq(stats_of(ctx).compiles, 1);
    tk_context_destroy(ctx);

    listing l = list_cache();
    ck_assert_int_eq(l.n, 1);
    ck_assert_str_eq(l.backend, "cuda");
    ck_assert_str_eq(l.arch, target);
    ck_assert_int_eq(l.res.registers, info.resources.registers);

    ctx = offline(TK_BACKEND_CUDA, target, NULL, err, sizeof err);
    ck_assert_ptr_nonnull(ctx);
    k = get_ok(ctx);
    tk_assert_status(tk_kernel_get_info(k, &info), TK_OK);
    ck_assert_int_eq(info.origin, TK_ORIGIN_DISK);
    ck_assert_uint_eq(stats_of(ctx).compiles, 0);
    ck_assert_int_eq(info.resources.shared_bytes, 400);
    tk_context_destroy(ctx);
}

START_TEST(test_nvrtc_sm80)
{
    nvrtc_for("sm_80");
}
END_TEST

START_TEST(test_nvrtc_sm90)
{
    nvrtc_for("sm_90");
}
END_TEST

START_TEST(test_nvrtc_sm90a)
{
    nvrtc_for("sm_90a");
}
END_TEST

START_TEST(test_nvrtc_unknown_target_and_log)
{
    char err[1024] = "";
    tk_status st;
    tk_context *ctx = offline(TK_BACKEND_CUDA, "sm_20", &st, err, sizeof err);
    if (!ctx && st == TK_BACKEND_UNAVAILABLE)
        return;
    tk_assert_status(st, TK_UNSUPPORTED);
    ck_assert_msg(strstr(err, "NVRTC") && strstr(err, "sm_20"), "message: %s", err);
    ck_assert_ptr_null(ctx);

    ctx = offline(TK_BACKEND_CUDA, "sm_80", &st, err, sizeof err);
    ck_assert_ptr_nonnull(ctx);
    tk_kernel_desc d = {
        .source = "extern \"C\" __global__ void broken(int *x) { x[0] = undeclared_thing; }\n",
        .entry = "broken"};
    tk_kernel *k = NULL;
    tk_assert_status(tk_kernel_get(ctx, &d, &k), TK_COMPILE_FAILED);
    const char *msg = tk_context_last_error(ctx);
    ck_assert_msg(strstr(msg, "undeclared_thing") != NULL, "log missing: %s", msg);
    tk_context_destroy(ctx);
}
END_TEST

static void hip_for(const char *target, int wavefront)
{
    char err[1024];
    tk_context *ctx = offline(TK_BACKEND_HIP, target, NULL, err, sizeof err);
    if (!ctx)
        return;
    ck_assert_str_eq(tk_context_backend_name(ctx), "hip");
    ck_assert_msg(strncmp(tk_context_compiler(ctx), "hiprtc-", 7) == 0, "compiler %s",
                  tk_context_compiler(ctx));
    ck_assert_ptr_nonnull(strstr(tk_context_compiler(ctx), "comgr-"));
    tk_kernel *k = get_ok(ctx);
    tk_kernel_info info = TK_STRUCT_INIT(tk_kernel_info);
    tk_assert_status(tk_kernel_get_info(k, &info), TK_OK);
    ck_assert_int_eq(info.origin, TK_ORIGIN_COMPILED);
    ck_assert_int_gt(info.resources.registers, 0); /* VGPRs */
    ck_assert_int_gt(info.resources.sgprs, 0);
    ck_assert_int_eq(info.resources.shared_bytes, 400);
    ck_assert_int_eq(info.resources.wavefront_size, wavefront);
    ck_assert_int_ge(info.resources.kernarg_bytes, 16);
    ck_assert_int_eq(info.resources.max_threads, 256);
    ck_assert_int_eq(info.resources.spill_count, 0);

    char isa[256] = "";
    tk__err e = {.msg = "", .log = NULL};
    const tk_kernel *kk = k;
    tk_status st = tk__hip_code_isa(kk->code, kk->code_size, isa, sizeof isa, &e);
    ck_assert_msg(st == TK_OK, "isa: %s", e.msg);
    char want[128];
    snprintf(want, sizeof want, "amdgcn-amd-amdhsa--%s", target);
    ck_assert_msg(strncmp(isa, want, strlen(want)) == 0, "isa %s, want %s", isa, want);
    ck_assert_uint_eq(stats_of(ctx).compiles, 1);
    tk_context_destroy(ctx);

    listing l = list_cache();
    ck_assert_int_eq(l.n, 1);
    ck_assert_str_eq(l.backend, "hip");
    ck_assert_str_eq(l.arch, target);
    ck_assert_int_eq(l.res.wavefront_size, wavefront);

    ctx = offline(TK_BACKEND_HIP, target, NULL, err, sizeof err);
    ck_assert_ptr_nonnull(ctx);
    k = get_ok(ctx);
    tk_assert_status(tk_kernel_get_info(k, &info), TK_OK);
    ck_assert_int_eq(info.origin, TK_ORIGIN_DISK);
    ck_assert_uint_eq(stats_of(ctx).compiles, 0);
    tk_context_destroy(ctx);
}

START_TEST(test_hiprtc_gfx90a)
{
    hip_for("gfx90a", 64);
}
END_TEST

START_TEST(test_hiprtc_gfx1030)
{
    hip_for("gfx1030", 32);
}
END_TEST

START_TEST(test_hiprtc_gfx90a_features)
{
    hip_for("gfx90a:sramecc+:xnack-", 64);
}
END_TEST

/* Appends a u64, little-endian. */
static size_t put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
    return 8;
}

START_TEST(test_hip_offload_bundle_is_unbundled)
{
    /* Some hipRTC releases return a clang offload bundle: comgr must be
     * handed the amdgcn ELF inside it. */
    char err[1024];
    tk_context *ctx = offline(TK_BACKEND_HIP, "gfx90a", NULL, err, sizeof err);
    if (!ctx)
        return;
    const tk_kernel *k = get_ok(ctx);
    static const char host_id[] = "host-x86_64-unknown-linux";
    static const char dev_id[] = "hipv4-amdgcn-amd-amdhsa--gfx90a";
    size_t header = 24 + 8 + 2 * 24 + (sizeof host_id - 1) + (sizeof dev_id - 1);
    size_t size = header + k->code_size;
    unsigned char *b = calloc(1, size);
    size_t p = 0;
    memcpy(b, "__CLANG_OFFLOAD_BUNDLE__", 24);
    p = 24;
    p += put_u64(b + p, 2);
    p += put_u64(b + p, header); /* host entry: empty */
    p += put_u64(b + p, 0);
    p += put_u64(b + p, sizeof host_id - 1);
    memcpy(b + p, host_id, sizeof host_id - 1);
    p += sizeof host_id - 1;
    p += put_u64(b + p, header);
    p += put_u64(b + p, k->code_size);
    p += put_u64(b + p, sizeof dev_id - 1);
    memcpy(b + p, dev_id, sizeof dev_id - 1);
    p += sizeof dev_id - 1;
    ck_assert_uint_eq(p, header);
    memcpy(b + header, k->code, k->code_size);

    tk__err e = {.msg = "", .log = NULL};
    tk_resource_usage from_bundle, from_elf;
    const tk__backend *hip = tk__backend_hip();
    tk_assert_status(hip->inspect(k->code, k->code_size, "scale_half", &from_elf, &e), TK_OK);
    tk_status st = hip->inspect(b, size, "scale_half", &from_bundle, &e);
    ck_assert_msg(st == TK_OK, "inspect bundle: %s", e.msg);
    ck_assert_int_eq(from_bundle.registers, from_elf.registers);
    ck_assert_int_eq(from_bundle.wavefront_size, 64);
    char isa[256];
    tk_assert_status(tk__hip_code_isa(b, size, isa, sizeof isa, &e), TK_OK);
    ck_assert_ptr_nonnull(strstr(isa, "gfx90a"));
    /* A bundle with no amdgcn entry is refused, not misread. */
    memcpy(b + header - (sizeof dev_id - 1), "hipv4-xxxxxx", 12);
    tk_assert_status(hip->inspect(b, size, "scale_half", &from_bundle, &e), TK_CORRUPT);
    free(b);
    tk_context_destroy(ctx);
}
END_TEST

START_TEST(test_hiprtc_gfx1101_unsupported)
{
    char err[1024] = "";
    tk_status st;
    tk_context *ctx = offline(TK_BACKEND_HIP, "gfx1101", &st, err, sizeof err);
    if (!ctx && st == TK_BACKEND_UNAVAILABLE)
        return;
    if (st == TK_OK) {
        /* A newer ROCm (the GPU machines carry 5.7) knows gfx11xx: check the
         * same path with a processor no ROCm knows. */
        printf("note: this hipRTC knows gfx1101 (newer than ROCm 5.2); testing gfx9999\n");
        tk_context_destroy(ctx);
        ctx = offline(TK_BACKEND_HIP, "gfx9999", &st, err, sizeof err);
        tk_assert_status(st, TK_UNSUPPORTED);
        ck_assert_ptr_null(ctx);
        ck_assert_msg(strstr(err, "gfx9999") && strstr(err, "unknown to the installed hipRTC"),
                      "message: %s", err);
        return;
    }
    tk_assert_status(st, TK_UNSUPPORTED);
    ck_assert_ptr_null(ctx);
    ck_assert_msg(strstr(err, "gfx1101") && strstr(err, "ROCm 5.2") &&
                      strstr(err, "does not know gfx942 or gfx11xx"),
                  "message: %s", err);
    ctx = offline(TK_BACKEND_HIP, "gfx942", &st, err, sizeof err);
    tk_assert_status(st, TK_UNSUPPORTED);
    ctx = offline(TK_BACKEND_HIP, "gfx90a:bogus+", &st, err, sizeof err);
    tk_assert_status(st, TK_UNSUPPORTED);
    ck_assert_ptr_null(ctx);
}
END_TEST

START_TEST(test_hiprtc_compile_log)
{
    char err[1024] = "";
    tk_context *ctx = offline(TK_BACKEND_HIP, "gfx90a", NULL, err, sizeof err);
    if (!ctx)
        return;
    tk_kernel_desc d = {
        .source = "extern \"C\" __global__ void broken(int *x) { x[0] = undeclared_thing; }\n",
        .entry = "broken"};
    tk_kernel *k = NULL;
    tk_assert_status(tk_kernel_get(ctx, &d, &k), TK_COMPILE_FAILED);
    const char *msg = tk_context_last_error(ctx);
    ck_assert_msg(strstr(msg, "undeclared_thing") != NULL, "log missing: %s", msg);
    ck_assert_uint_eq(stats_of(ctx).compile_failures, 1);
    tk_context_destroy(ctx);
}
END_TEST

START_TEST(test_describe)
{
    char buf[4096];
    tk_status st = tk_backend_describe(TK_BACKEND_HIP, buf, sizeof buf);
    ck_assert_msg(st == TK_OK || st == TK_NO_DEVICE || st == TK_BACKEND_UNAVAILABLE, "%s",
                  tk_status_str(st));
    ck_assert_ptr_nonnull(strstr(buf, "hip"));
    st = tk_backend_describe(TK_BACKEND_CUDA, buf, sizeof buf);
    ck_assert_msg(st == TK_OK || st == TK_NO_DEVICE || st == TK_BACKEND_UNAVAILABLE, "%s",
                  tk_status_str(st));
    ck_assert_ptr_nonnull(strstr(buf, "cuda"));
    if (st != TK_OK)
        ck_assert_ptr_nonnull(strstr(buf, "unavailable"));
}
END_TEST

/* Entry points of an embedded source: the names after "__global__ void"
 * (and an optional __launch_bounds__(...)). Returns how many were found. */
static int scan_entries(const char *text, char names[][128], int max)
{
    int n = 0;
    const char *p = text;
    while (n < max && (p = strstr(p, "__global__")) != NULL) {
        const char *q = p + 10;
        p = q;
        while (*q == ' ' || *q == '\n' || *q == '\t')
            q++;
        if (strncmp(q, "void", 4) != 0)
            continue;
        q += 4;
        while (*q == ' ' || *q == '\n' || *q == '\t')
            q++;
        if (strncmp(q, "__launch_bounds__", 17) == 0) {
            q = strchr(q, ')');
            if (!q)
                break;
            q++;
            while (*q == ' ' || *q == '\n' || *q == '\t')
                q++;
        }
        int i = 0;
        while (i < 127 && ((q[i] >= 'a' && q[i] <= 'z') || (q[i] >= 'A' && q[i] <= 'Z') ||
                           (q[i] >= '0' && q[i] <= '9') || q[i] == '_')) {
            names[n][i] = q[i];
            i++;
        }
        names[n][i] = '\0';
        if (i)
            n++;
    }
    return n;
}

/* Every embedded kernel, with its default specialisation, compiles for
 * target, lands in the cache, and comes back from it without a compile. */
static void embedded_for(tk_backend_kind kind, const char *target)
{
    char err[1024];
    tk_context *ctx = offline(kind, target, NULL, err, sizeof err);
    if (!ctx)
        return;
    enum { MAX_GOOD = 64 };
    static const char *good_src[MAX_GOOD];
    static char good_entry[MAX_GOOD][128];
    int total = 0, tried = 0;
    for (const char *const *name = tk_embedded_sources(); *name; name++) {
        const size_t nl = strlen(*name);
        if (nl > 4 && strcmp(*name + nl - 4, ".cuh") == 0)
            continue; /* a header, included by kernels: no entry of its own */
        const char *text = tk__embedded_source(*name, NULL);
        char entries[16][128];
        int n = scan_entries(text, entries, 16), found = 0;
        for (int i = 0; i < n; i++) {
            tk_kernel_desc d = {.source_name = *name, .entry = entries[i]};
            tk_kernel *k = NULL;
            tried++;
            tk_status st = tk_kernel_get(ctx, &d, &k);
            if (st == TK_NOT_FOUND) {
                /* Compiled, but this entry exists only under some define. */
                ck_assert_ptr_nonnull(strstr(tk_context_last_error(ctx), "is not in the code"));
                continue;
            }
            ck_assert_msg(st == TK_OK, "%s/%s for %s: %s: %s", *name, entries[i], target,
                          tk_status_str(st), tk_context_last_error(ctx));
            tk_kernel_info info = TK_STRUCT_INIT(tk_kernel_info);
            tk_assert_status(tk_kernel_get_info(k, &info), TK_OK);
            ck_assert_msg(info.resources.registers > 0, "%s/%s: no register count", *name,
                          entries[i]);
            found++;
            if (total < MAX_GOOD) {
                good_src[total] = *name;
                memcpy(good_entry[total], entries[i], sizeof good_entry[0]);
                total++;
            }
        }
        if (n > 0)
            ck_assert_msg(found > 0, "no entry of %s compiles with its defaults", *name);
    }
    tk_context_stats s = TK_STRUCT_INIT(tk_context_stats);
    tk_assert_status(tk_context_get_stats(ctx, &s), TK_OK);
    ck_assert_uint_le(s.compiles, (uint64_t)tried); /* an entry may appear twice */
    tk_context_destroy(ctx);
    if (total == 0) {
        printf("skipped: no embedded kernels in this build\n");
        return;
    }
    ctx = offline(kind, target, NULL, err, sizeof err);
    ck_assert_ptr_nonnull(ctx);
    for (int i = 0; i < total; i++) {
        tk_origin origin = TK_ORIGIN_COMPILED;
        tk_kernel_desc d = {.source_name = good_src[i], .entry = good_entry[i]};
        tk_assert_status(tk_kernel_precompile(ctx, &d, &origin), TK_OK);
        ck_assert_int_eq(origin, TK_ORIGIN_DISK);
    }
    tk_assert_status(tk_context_get_stats(ctx, &s), TK_OK);
    ck_assert_uint_eq(s.compiles, 0);
    tk_context_destroy(ctx);
}

START_TEST(test_embedded_kernels_sm80)
{
    embedded_for(TK_BACKEND_CUDA, "sm_80");
}
END_TEST

START_TEST(test_embedded_kernels_gfx90a)
{
    embedded_for(TK_BACKEND_HIP, "gfx90a");
}
END_TEST

START_TEST(test_embedded_kernels_gfx1030)
{
    embedded_for(TK_BACKEND_HIP, "gfx1030");
}
END_TEST

/* In a child process (the backend loads once per process): the key of the
 * test kernel for sm_80, written into key[33]; "" when NVRTC is absent. */
static void key_in_child(const char *cuda_path, char key[33])
{
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(fds[0]);
        if (cuda_path)
            setenv("CUDA_PATH", cuda_path, 1);
        else
            unsetenv("CUDA_PATH");
        unsetenv("CUDA_HOME");
        char err[512], out[64] = "";
        tk_config *cfg = NULL;
        tk_context *ctx = NULL;
        tk_kernel *k = NULL;
        tk_kernel_info info = TK_STRUCT_INIT(tk_kernel_info);
        tk_config_create(&cfg);
        tk_config_set_backend(cfg, TK_BACKEND_CUDA);
        tk_config_set_target(cfg, "sm_80");
        tk_config_set_cache_dir(cfg, g_dir);
        tk_kernel_desc d = {
            .source = k_source, .entry = "scale_half", .defines = k_defines, .n_defines = 1};
        if (tk_context_create(cfg, &ctx, err, sizeof err) == TK_OK &&
            tk_kernel_get(ctx, &d, &k) == TK_OK && tk_kernel_get_info(k, &info) == TK_OK)
            snprintf(out, sizeof out, "%s", info.key_hex);
        if (write(fds[1], out, 33) != 33)
            _exit(1);
        _exit(0);
    }
    close(fds[1]);
    memset(key, 0, 33);
    ck_assert_int_eq(read(fds[0], key, 33), 33);
    key[32] = '\0';
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
}

START_TEST(test_include_path_not_in_key)
{
    /* The same headers behind another folder give the same key. */
    char key_default[33], key_moved[33];
    key_in_child(NULL, key_default);
    if (!key_default[0]) {
        printf("skipped: NVRTC unavailable\n");
        return;
    }
    char moved[4096], inc[4200];
    snprintf(moved, sizeof moved, "%s/cuda-elsewhere", g_dir);
    snprintf(inc, sizeof inc, "%s/include", moved);
    ck_assert_int_eq(mkdir(moved, 0700), 0);
    ck_assert_int_eq(mkdir(inc, 0700), 0);
    const char *real_inc = "/usr/local/cuda/include";
    DIR *dir = opendir(real_inc);
    if (!dir) {
        printf("skipped: no %s to mirror\n", real_inc);
        return;
    }
    struct dirent *de;
    while ((de = readdir(dir)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        char from[4600], to[4600];
        snprintf(from, sizeof from, "%s/%s", real_inc, de->d_name);
        snprintf(to, sizeof to, "%s/%s", inc, de->d_name);
        ck_assert_int_eq(symlink(from, to), 0);
    }
    closedir(dir);
    key_in_child(moved, key_moved);
    ck_assert_str_eq(key_default, key_moved);
}
END_TEST

static int compiler_present(tk_backend_kind kind, const char *target)
{
    tk_config *cfg = NULL;
    tk_context *ctx = NULL;
    char err[512];
    tk_config_create(&cfg);
    tk_config_set_backend(cfg, kind);
    tk_config_set_cache_disabled(cfg, 1);
    tk_config_set_target(cfg, target);
    tk_status st = tk_context_create(cfg, &ctx, err, sizeof err);
    tk_context_destroy(ctx);
    tk_config_destroy(cfg);
    return st == TK_OK;
}

int main(void)
{
    if (!compiler_present(TK_BACKEND_CUDA, "sm_80") &&
        !compiler_present(TK_BACKEND_HIP, "gfx90a")) {
        printf("skipped: neither NVRTC nor hipRTC is installed\n");
        return 77;
    }
    Suite *s = suite_create("backend");
    TCase *tc = tcase_create("offline");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_nvrtc_sm80);
    tcase_add_test(tc, test_nvrtc_sm90);
    tcase_add_test(tc, test_nvrtc_sm90a);
    tcase_add_test(tc, test_nvrtc_unknown_target_and_log);
    tcase_add_test(tc, test_hiprtc_gfx90a);
    tcase_add_test(tc, test_hiprtc_gfx1030);
    tcase_add_test(tc, test_hiprtc_gfx90a_features);
    tcase_add_test(tc, test_hiprtc_gfx1101_unsupported);
    tcase_add_test(tc, test_hip_offload_bundle_is_unbundled);
    tcase_add_test(tc, test_hiprtc_compile_log);
    tcase_add_test(tc, test_describe);
    tcase_add_test(tc, test_embedded_kernels_sm80);
    tcase_add_test(tc, test_include_path_not_in_key);
    tcase_add_test(tc, test_embedded_kernels_gfx90a);
    tcase_add_test(tc, test_embedded_kernels_gfx1030);
    suite_add_tcase(s, tc);
    return tk_test_main(s);
}
