/*
 * The cache's cost on disk and the cost of a hit from it.
 *
 *   cache_size [CACHE_DIR [ARCH]]
 *
 * CACHE_DIR (default: the default cache) is a cache filled beforehand, for
 * the figures below by `tokitai-jit --precompile` of the default manifest.
 * ARCH (default sm_90) names the target of the bundle and of the hit.
 *
 *   on disk / code objects: bytes of the cache's files (entries and kept
 *       sources; apparent sizes, and blocks as du counts them) over the sum
 *       of the code objects the entries hold;            target <= 1.3x
 *   bundle of ARCH: the size of `--export --arch ARCH`;   target <= 12 MB
 *   disk hit from a fresh process: the median-size ARCH entry (the
 *       target) and the largest (a GEMM), each looked up in a child process
 *       that only opened the device and the cache: read, check, decompress;
 *       with a CUDA device also cuModuleLoadData of the result (to a loaded
 *       module, as the engine's disk hit).            target <= 0.3 ms
 *       (median of 15 children). The key comes from the entry itself: the
 *       engine would have built it in memory (hashing the source) before.
 *       Beside it, where the time goes: the lookup, the module load, and the
 *       module load alone of the same code object in other fresh children
 *       (taken out of the entry before the clock starts): the driver's
 *       share, which no cache format changes.
 *
 * Runs without a GPU (the hit then stops at the decoded code object, and
 * says so). Exit 0 when every target is measured and met, 1 when one is
 * missed, 2 when one could not be measured (no ARCH entry, a hit child
 * that failed, a bundle that could not be written): a figure that is not
 * there is not a target met.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench_stats.h"
#include "cache/cache_internal.h"

typedef struct sizes {
    uint64_t entries, code, files, blocks;
    uint64_t arch_entries, arch_code;
    const char *arch;
    struct arch_entry {
        uint64_t code;
        char path[4096];
        char kernel[256];
    } *list; /* the entries of arch */
    size_t n_list, cap_list;
} sizes;

static int arch_is(const char *want, const char *arch)
{
    size_t n = strlen(want);
    return arch && strncmp(arch, want, n) == 0 && (arch[n] == 0 || arch[n] == ':');
}

static int visit(void *user, const tk_cache_entry_info *info)
{
    sizes *s = user;
    if (info->read_only_tier)
        return 0;
    struct stat st;
    s->entries++;
    s->code += info->payload_size;
    s->files += info->file_size;
    if (stat(info->path, &st) == 0)
        s->blocks += (uint64_t)st.st_blocks * 512;
    if (arch_is(s->arch, info->arch)) {
        s->arch_entries++;
        s->arch_code += info->payload_size;
        if (s->n_list == s->cap_list) {
            size_t cap = s->cap_list ? 2 * s->cap_list : 64;
            struct arch_entry *l = realloc(s->list, cap * sizeof *l);
            if (!l)
                return 0; /* the hit is then measured on fewer entries */
            s->list = l, s->cap_list = cap;
        }
        struct arch_entry *a = &s->list[s->n_list++];
        a->code = info->payload_size;
        snprintf(a->path, sizeof a->path, "%s", info->path);
        snprintf(a->kernel, sizeof a->kernel, "%s", info->kernel ? info->kernel : "");
    }
    return 0;
}

/* Adds the files of <root>/<format>/src (the kept sources). */
static void add_sources(const char *root, sizes *s, uint64_t *n_src)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/%d/" TK__SRC_DIR, root, TK__CACHE_FORMAT);
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        char p[8600];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (e->d_name[0] != '.' && stat(p, &st) == 0 && S_ISREG(st.st_mode)) {
            s->files += (uint64_t)st.st_size;
            s->blocks += (uint64_t)st.st_blocks * 512;
            (*n_src)++;
        }
    }
    if (d)
        closedir(d);
}

static int select_arch(void *user, const tk_cache_entry_info *info)
{
    return arch_is(user, info->arch);
}

/* ------------------------------------------------------------- the hit */

typedef int (*cuInit_t)(unsigned);
typedef int (*cuDeviceGet_t)(int *, int);
typedef int (*cuPrimaryCtxRetain_t)(void **, int);
typedef int (*cuCtxSetCurrent_t)(void *);
typedef int (*cuModuleLoadData_t)(void **, const void *);
typedef int (*cuModuleUnload_t)(void *);

/* The driver, looked up with dlopen so that the bench runs without one:
 * 1 with a current context and load/unload set, 0 without a device. */
static int cuda_open(cuModuleLoadData_t *load, cuModuleUnload_t *unload)
{
    void *cu = dlopen("libcuda.so.1", RTLD_NOW);
    if (!cu)
        return 0;
    cuInit_t init = (cuInit_t)dlsym(cu, "cuInit");
    cuDeviceGet_t dev_get = (cuDeviceGet_t)dlsym(cu, "cuDeviceGet");
    cuPrimaryCtxRetain_t retain = (cuPrimaryCtxRetain_t)dlsym(cu, "cuDevicePrimaryCtxRetain");
    cuCtxSetCurrent_t set = (cuCtxSetCurrent_t)dlsym(cu, "cuCtxSetCurrent");
    *load = (cuModuleLoadData_t)dlsym(cu, "cuModuleLoadData");
    *unload = (cuModuleUnload_t)dlsym(cu, "cuModuleUnload");
    int dev = 0;
    void *ctx = NULL;
    return init && dev_get && retain && set && *load && *unload && init(0) == 0 &&
           dev_get(&dev, 0) == 0 && retain(&ctx, dev) == 0 && set(ctx) == 0;
}

/* Child: opens the device and the cache, then times one lookup of the
 * entry at path (read, check, decompress) and the module load of what it
 * returned. With raw set it instead takes the code object out of the entry
 * first, untimed, and times only cuModuleLoadData of it: what any cache
 * would pay. Prints "lookup_s load_s gpu|cpu". */
static int hit_child(const char *root, const char *path, int raw)
{
    size_t len = 0;
    uint8_t *file = NULL;
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || tk__read_fd(fd, (uint64_t)st.st_size, &file) != TK_OK)
        return 2;
    close(fd);
    len = (size_t)st.st_size;
    tk__entry_view v;
    const char *why = NULL;
    if (tk__entry_parse(file, len, 1, &v, &why) != TK_OK)
        return 3;
    tk__key key;
    memset(&key, 0, sizeof key);
    key.bytes = malloc(v.key_size);
    memcpy(key.bytes, v.key, v.key_size);
    key.len = key.cap = v.key_size;
    if (tk__key_finish(&key) != TK_OK)
        return 4;
    free(file);

    cuModuleLoadData_t load = NULL;
    cuModuleUnload_t unload = NULL;
    const int gpu = cuda_open(&load, &unload);

    tk__cache_opts opts;
    memset(&opts, 0, sizeof opts);
    opts.root = root;
    opts.lower = "";
    tk_cache *cache = NULL;
    if (tk__cache_open(&opts, &cache) != TK_OK)
        return 5;
    tk__entry e;
    void *mod = NULL;
    double t0 = bench_wall_s();
    tk_status s = tk__cache_get(cache, &key, &e);
    double t_lookup = raw ? 0 : bench_wall_s() - t0, t_load = 0;
    t0 = bench_wall_s();
    if (s != TK_OK)
        return 6;
    if (gpu && load(&mod, e.payload) != 0)
        return 7;
    t_load = gpu ? bench_wall_s() - t0 : 0;
    printf("%.9f %.9f %s\n", t_lookup, t_load, gpu ? "gpu" : "cpu");
    if (gpu)
        unload(mod);
    tk__entry_free(&e);
    tk__key_free(&key);
    tk_cache_close(cache);
    return 0;
}

/* Medians over N_HIT fresh children of one entry: lookup, module load,
 * and (raw) the module load alone of the same code object. 0 when every
 * child answered. */
enum { N_HIT = 15 };
typedef struct hit_fig {
    double lookup, load, total, raw_load;
    int n, gpu;
} hit_fig;

static int measure_hit(const char *self, const char *root, const char *path, hit_fig *f)
{
    double lk[N_HIT], ld[N_HIT], tot[N_HIT], rl[N_HIT];
    int n = 0, n_raw = 0;
    memset(f, 0, sizeof *f);
    for (int i = 0; i < 2 * N_HIT; i++) {
        const int raw = i & 1;
        char cmd[16384];
        snprintf(cmd, sizeof cmd, "'%s' --%s-child '%s' '%s'", self, raw ? "raw" : "hit", root, path);
        FILE *p = popen(cmd, "r");
        double a = -1, b = -1;
        char where[8] = "";
        int ok = p && fscanf(p, "%lf %lf %7s", &a, &b, where) == 3;
        if (p && pclose(p) != 0)
            ok = 0;
        if (!ok)
            return -1;
        f->gpu = strcmp(where, "gpu") == 0;
        if (raw) {
            rl[n_raw++] = b;
        } else {
            lk[n] = a, ld[n] = b, tot[n] = a + b;
            n++;
        }
    }
    qsort(lk, (size_t)n, sizeof *lk, bench_cmp_double);
    qsort(ld, (size_t)n, sizeof *ld, bench_cmp_double);
    qsort(tot, (size_t)n, sizeof *tot, bench_cmp_double);
    qsort(rl, (size_t)n_raw, sizeof *rl, bench_cmp_double);
    f->lookup = lk[n / 2], f->load = ld[n / 2], f->total = tot[n / 2], f->raw_load = rl[n_raw / 2];
    f->n = n;
    return 0;
}

static int cmp_entry(const void *a, const void *b)
{
    const struct arch_entry *x = a, *y = b;
    return (x->code > y->code) - (x->code < y->code);
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--hit-child") == 0)
        return hit_child(argv[2], argv[3], 0);
    if (argc == 4 && strcmp(argv[1], "--raw-child") == 0)
        return hit_child(argv[2], argv[3], 1);
    char def_root[4096];
    const char *root = argc > 1 ? argv[1] : NULL;
    if (!root) {
        if (tk__cache_default_root(def_root, sizeof def_root) != TK_OK)
            return 1;
        root = def_root;
    }
    sizes s;
    memset(&s, 0, sizeof s);
    s.arch = argc > 2 ? argv[2] : "sm_90";

    tk_config *cfg = NULL;
    tk_cache *cache = NULL;
    if (tk_config_create(&cfg) != TK_OK || tk_config_set_cache_dir(cfg, root) != TK_OK ||
        tk_cache_open(cfg, &cache) != TK_OK) {
        fprintf(stderr, "cannot open the cache %s\n", root);
        return 1;
    }
    tk_config_destroy(cfg);
    if (tk_cache_list(cache, visit, &s) != TK_OK || s.entries == 0) {
        fprintf(stderr, "no entries in %s: fill it first (tokitai-jit --precompile --cache-dir %s)\n",
                root, root);
        return 1;
    }
    uint64_t n_src = 0;
    add_sources(root, &s, &n_src);

    char bundle[] = "/tmp/tk-bench-bundle-XXXXXX";
    int bfd = mkstemp(bundle);
    uint64_t n_exp = 0, bundle_size = 0;
    struct stat bst;
    if (bfd >= 0) {
        close(bfd);
        if (tk_cache_export(cache, bundle, select_arch, (void *)s.arch, &n_exp) == TK_OK &&
            stat(bundle, &bst) == 0)
            bundle_size = (uint64_t)bst.st_size;
        unlink(bundle);
    }
    tk_cache_close(cache);

    /* The hit, in fresh processes: the typical (median-size) entry of arch
     * and its largest. */
    char self[4096];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    hit_fig figs[2];
    const struct arch_entry *which[2] = {NULL, NULL};
    int measured = 0;
    if (sl > 0 && s.n_list) {
        self[sl] = 0;
        qsort(s.list, s.n_list, sizeof *s.list, cmp_entry);
        which[0] = &s.list[s.n_list / 2];
        which[1] = &s.list[s.n_list - 1];
        measured = measure_hit(self, root, which[0]->path, &figs[0]) == 0 &&
                   measure_hit(self, root, which[1]->path, &figs[1]) == 0;
    }
    const double hit = measured ? figs[0].total : -1;
    double ratio = s.code ? (double)s.files / (double)s.code : 0;
    double ratio_blocks = s.code ? (double)s.blocks / (double)s.code : 0;
    int ok_ratio = ratio <= 1.3, ok_bundle = n_exp && bundle_size <= 12000000,
        ok_hit = hit >= 0 && hit <= 0.3e-3;
    printf("cache %s: %llu entries (%llu of %s), %llu kept sources, format %d\n", root,
           (unsigned long long)s.entries, (unsigned long long)s.arch_entries, s.arch,
           (unsigned long long)n_src, TK__CACHE_FORMAT);
    printf("\n| measure | value | target | met |\n| --- | --- | --- | --- |\n");
    printf("| code objects in the cache | %.2f MiB | - | - |\n", (double)s.code / 1048576.0);
    printf("| cache files (entries + kept sources), apparent size | %.2f MiB = %.3fx the code "
           "objects | <= 1.3x | %s |\n",
           (double)s.files / 1048576.0, ratio, ok_ratio ? "yes" : "NO");
    printf("| cache files, blocks on disk (du) | %.2f MiB = %.3fx | - | - |\n",
           (double)s.blocks / 1048576.0, ratio_blocks);
    printf("| bundle of %s (%llu entries, %.2f MiB of code objects) | %.2f MB | <= 12 MB | %s |\n",
           s.arch, (unsigned long long)n_exp, (double)s.arch_code / 1048576.0,
           (double)bundle_size / 1e6, ok_bundle ? "yes" : "NO");
    if (measured) {
        static const char *const what[2] = {"median-size", "largest"};
        const int gpu = figs[0].gpu;
        for (int i = 0; i < 2; i++)
            printf("| disk hit, fresh process, %s %s entry (%s, %llu-byte code object): read, check, "
                   "decompress%s (median of %d) | %.3f ms | <= 0.3 ms | %s |\n",
                   what[i], s.arch, which[i]->kernel, (unsigned long long)which[i]->code,
                   gpu ? ", cuModuleLoadData" : " (no CUDA device: no module load)", figs[i].n,
                   figs[i].total * 1e3,
                   i == 0 ? (ok_hit ? "yes" : "NO") : figs[i].total <= 0.3e-3 ? "yes" : "NO");
        printf("\nWhere a hit's time goes (medians of %d fresh processes each):\n\n"
               "| entry | code object | read, check, decompress | cuModuleLoadData | "
               "cuModuleLoadData alone, code object already in memory |\n| --- | ---: | ---: | ---: | ---: |\n",
               figs[0].n);
        for (int i = 0; i < 2; i++) {
            char ld[32] = "- (no device)", rl[32] = "- (no device)";
            if (gpu) {
                snprintf(ld, sizeof ld, "%.3f ms", figs[i].load * 1e3);
                snprintf(rl, sizeof rl, "%.3f ms", figs[i].raw_load * 1e3);
            }
            printf("| %s (%s) | %llu B | %.3f ms | %s | %s |\n", what[i], which[i]->kernel,
                   (unsigned long long)which[i]->code, figs[i].lookup * 1e3, ld, rl);
        }
    } else {
        printf("| disk hit | not measured (no %s entry, or a child failed) | <= 0.3 ms | NO |\n",
               s.arch);
    }
    free(s.list);
    if (hit < 0 || !n_exp) {
        fprintf(stderr, "cache_size: %s of %s not measured\n",
                hit < 0 ? "the disk hit" : "the bundle", s.arch);
        return 2;
    }
    return ok_ratio && ok_bundle && ok_hit ? 0 : 1;
}
