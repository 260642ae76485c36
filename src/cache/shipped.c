/* The read-only tier shipped with the library: the operators' fallback
 * kernels, precompiled by the build (CMake's TK_SHIP_FALLBACKS) and
 * installed under <datadir>/tokitai-jit/cache. It is found from where the
 * library's own code was loaded, so that a build tree and an installed tree
 * (any prefix, moved or not) each find theirs without a setting. */
#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/cache_internal.h"

/* Below the folder of the library (build tree: the library and share/ side
 * by side), then below its parent (install tree: lib/ and share/). */
static const char *const shipped_below[] = {"share/tokitai-jit/cache",
                                            "../share/tokitai-jit/cache"};

tk_status tk__cache_shipped_from(const char *file, char *buf, size_t size)
{
    if (!file || !buf || size == 0)
        return TK_INVALID_ARGUMENT;
    buf[0] = 0;
    const char *slash = strrchr(file, '/');
    if (!slash)
        return TK_OK; /* no folder to look in */
    size_t len = 0, dir_len = (size_t)(slash - file);
    for (size_t i = 0; i < sizeof shipped_below / sizeof shipped_below[0]; i++) {
        char cand[PATH_MAX], real[PATH_MAX];
        struct stat st;
        int n = snprintf(cand, sizeof cand, "%.*s/%s", (int)dir_len, file, shipped_below[i]);
        if (n <= 0 || (size_t)n >= sizeof cand || stat(cand, &st) != 0 || !S_ISDIR(st.st_mode) ||
            !realpath(cand, real))
            continue;
        /* the same folder reached twice (a lib/ that is a link to .) counts once */
        const size_t rl = strlen(real);
        int seen = 0;
        for (const char *p = buf; *p && !seen;) {
            const size_t m = strcspn(p, ":");
            seen = m == rl && strncmp(p, real, m) == 0;
            p += m + (p[m] == ':');
        }
        if (seen || strchr(real, ':')) /* ':' separates tiers: such a path cannot be listed */
            continue;
        if (len + (len ? 1 : 0) + rl + 1 > size)
            return TK_OVERFLOW;
        len += (size_t)snprintf(buf + len, size - len, "%s%s", len ? ":" : "", real);
    }
    return TK_OK;
}

static char g_shipped[2 * PATH_MAX + 2];
static pthread_once_t g_shipped_once = PTHREAD_ONCE_INIT;

/* The file holding this code: the shared library, or the program (or other
 * shared object) the static library was linked into. For the main program
 * glibc's dladdr names argv[0], which may be relative or a bare name found
 * on PATH: /proc/self/exe is the file itself. */
static void find_shipped(void)
{
    Dl_info info;
    struct link_map *map = NULL;
    char exe[PATH_MAX];
    const char *file = NULL;
    if (dladdr1((void *)&tk__cache_shipped_from, &info, (void **)&map, RTLD_DL_LINKMAP) != 0 &&
        info.dli_fname != NULL) {
        if (map != NULL && map->l_name != NULL && map->l_name[0] != 0 && info.dli_fname[0] == '/')
            file = info.dli_fname;
        else if (map != NULL && map->l_name != NULL && map->l_name[0] != 0)
            file = realpath(info.dli_fname, exe) ? exe : NULL;
    }
    if (file == NULL) {
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (n > 0) {
            exe[n] = 0;
            file = exe;
        }
    }
    if (file == NULL || tk__cache_shipped_from(file, g_shipped, sizeof g_shipped) != TK_OK)
        g_shipped[0] = 0;
}

const char *tk_cache_shipped_tier(void)
{
    pthread_once(&g_shipped_once, find_shipped);
    return g_shipped;
}
