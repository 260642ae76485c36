/* Shared backend helpers: error records, dlopen/dlsym lists, library identity. */
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "jit/backend/dl.h"

tk_status tk__err_set(tk__err *err, tk_status status, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return status;
}

void tk__err_clear(tk__err *err)
{
    if (!err)
        return;
    err->msg[0] = '\0';
    free(err->log);
    err->log = NULL;
}

void tk__strcat_fmt(char *buf, size_t size, const char *fmt, ...)
{
    if (!buf || size == 0)
        return;
    size_t used = strnlen(buf, size);
    if (used >= size - 1)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + used, size - used, fmt, ap);
    va_end(ap);
}

void *tk__dl_open_first(const char *env_override, const char *const *candidates, char *opened,
                        size_t opened_size, tk__err *err)
{
    const char *forced = env_override ? getenv(env_override) : NULL;
    const char *one[2] = {forced, NULL};
    const char *const *list = (forced && forced[0]) ? one : candidates;
    char tried[900] = "";

    for (size_t i = 0; list[i]; i++) {
        void *lib = dlopen(list[i], RTLD_NOW | RTLD_LOCAL);
        if (lib) {
            if (opened && opened_size) {
                snprintf(opened, opened_size, "%s", list[i]);
            }
            return lib;
        }
        const char *why = dlerror();
        tk__strcat_fmt(tried, sizeof tried, "%s%s (%s)", i ? "; " : "", list[i],
                       why ? why : "not found");
    }
    tk__err_set(err, TK_BACKEND_UNAVAILABLE, "cannot load %s: %s", list[0] ? list[0] : "(none)",
                tried);
    return NULL;
}

tk_status tk__dl_resolve(void *lib, const char *lib_name, const tk__dl_sym *syms, size_t n_syms,
                         void *table, tk__err *err)
{
    for (size_t i = 0; i < n_syms; i++) {
        dlerror();
        void *p = dlsym(lib, syms[i].name);
        if (!p) {
            return tk__err_set(err, TK_BACKEND_UNAVAILABLE, "symbol %s missing from %s",
                               syms[i].name, lib_name);
        }
        /* POSIX guarantees object and function pointers convert; memcpy keeps
         * the compiler quiet about it. */
        memcpy((char *)table + syms[i].offset, &p, sizeof p);
    }
    return TK_OK;
}

void tk__dl_path_of(const void *addr, char *buf, size_t size)
{
    Dl_info info;
    if (size == 0)
        return;
    buf[0] = '\0';
    if (addr && dladdr(addr, &info) && info.dli_fname) {
        char *real = realpath(info.dli_fname, NULL);
        snprintf(buf, size, "%s", real ? real : info.dli_fname);
        free(real);
    }
}

struct build_id_search {
    const void *addr;
    char *buf;
    size_t size;
    int found;
};

static int scan_notes(const ElfW(Nhdr) * note, size_t len, struct build_id_search *s)
{
    const unsigned char *p = (const unsigned char *)note;
    const unsigned char *end = p + len;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
        const ElfW(Nhdr) *n = (const ElfW(Nhdr) *)(const void *)p;
        size_t name_sz = (n->n_namesz + 3u) & ~3u;
        size_t desc_sz = (n->n_descsz + 3u) & ~3u;
        const unsigned char *name = p + sizeof(ElfW(Nhdr));
        const unsigned char *desc = name + name_sz;
        if (desc + n->n_descsz > end)
            break;
        if (n->n_type == NT_GNU_BUILD_ID && n->n_namesz == 4 && memcmp(name, "GNU", 4) == 0 &&
            n->n_descsz > 0 && s->size > 2 * (size_t)n->n_descsz) {
            for (size_t i = 0; i < n->n_descsz; i++)
                snprintf(s->buf + 2 * i, 3, "%02x", desc[i]);
            return 1;
        }
        p = desc + desc_sz;
    }
    return 0;
}

static int phdr_visit(struct dl_phdr_info *info, size_t info_size, void *user)
{
    struct build_id_search *s = user;
    uintptr_t a = (uintptr_t)s->addr;
    int contains = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && a >= lo && a < lo + ph->p_memsz)
            contains = 1;
    }
    if (!contains)
        return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_NOTE)
            continue;
        const ElfW(Nhdr) *note = (const ElfW(Nhdr) *)(info->dlpi_addr + ph->p_vaddr);
        if (scan_notes(note, ph->p_memsz, s)) {
            s->found = 1;
            break;
        }
    }
    return 1;
}

tk_status tk__dl_library_id(const void *addr_in_lib, char *buf, size_t size)
{
    struct build_id_search s = {addr_in_lib, buf, size, 0};
    dl_iterate_phdr(phdr_visit, &s);
    if (s.found)
        return TK_OK;

    /* No build id: hash the file contents (mapped, not copied). */
    char path[4096];
    tk__dl_path_of(addr_in_lib, path, sizeof path);
    if (!path[0])
        return TK_NOT_FOUND;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return TK_NOT_FOUND;
    struct stat st;
    tk_status status = TK_NOT_FOUND;
    if (fstat(fd, &st) == 0 && st.st_size > 0) {
        void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map != MAP_FAILED) {
            snprintf(buf, size, "%016llx",
                     (unsigned long long)XXH3_64bits(map, (size_t)st.st_size));
            munmap(map, (size_t)st.st_size);
            status = TK_OK;
        }
    }
    close(fd);
    return status;
}
