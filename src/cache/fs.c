/* The files and folders the cache touches, under the hostile-file-system
 * rules: folders must be real folders (not links) of the user (or root's,
 * for a shipped read-only tier) that nobody else may write to, and nothing
 * is ever followed through a link planted inside the cache. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/cache_internal.h"

/* Folders holding entries must be ours (or root's, for shipped lower tiers)
 * and writable by nobody else: another user could plant code otherwise. */
const char *tk__cache_stat_unsafe(const struct stat *st, int allow_root_owner)
{
    if (!S_ISDIR(st->st_mode))
        return "not a folder";
    if (st->st_uid != geteuid() && !(allow_root_owner && st->st_uid == 0))
        return "owned by another user";
    if (st->st_mode & (S_IWGRP | S_IWOTH))
        return "group- or world-writable";
    return NULL;
}

/* A folder inside the cache (format or shard folder) is used only when it is
 * a real folder, not a symbolic link, and passes tk__cache_stat_unsafe: a link planted
 * there must never make a store, a prune or a clear reach outside. NULL when
 * safe, else why not (ENOENT is "missing"). */
const char *tk__cache_dir_unsafe(const char *path, int allow_root_owner)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? "missing" : "cannot be read";
    if (S_ISLNK(st.st_mode))
        return "a symbolic link";
    return tk__cache_stat_unsafe(&st, allow_root_owner);
}

/* Opens a folder inside the cache for *at() calls, refusing a symbolic link
 * at its last component; -1 otherwise. */
int tk__cache_open_dir(const char *path)
{
    return open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

/* The parent folder of path opened without following a link at its end
 * (tk__cache_open_dir), and in *leaf path's last component; -1 with errno
 * set otherwise. */
static int open_parent(const char *path, const char **leaf)
{
    const char *slash = strrchr(path, '/');
    if (!slash || !slash[1]) {
        errno = EINVAL;
        return -1;
    }
    char dir[PATH_MAX];
    size_t n = (size_t)(slash - path);
    if (n >= sizeof(dir)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(dir, path, n);
    dir[n] = 0;
    *leaf = slash + 1;
    return tk__cache_open_dir(n ? dir : "/");
}

/* Unlinks path through its parent folder opened without following a link,
 * so that a shard folder swapped for a link makes this fail, not reach
 * outside the cache. */
int tk__cache_unlink(const char *path)
{
    if (!strchr(path, '/'))
        return unlink(path);
    const char *leaf;
    int dfd = open_parent(path, &leaf);
    if (dfd < 0)
        return -1;
    int r = unlinkat(dfd, leaf, 0);
    int saved = errno;
    close(dfd);
    errno = saved;
    return r;
}

static int same_file(const struct stat *st, const tk__file_id *id)
{
    const tk__file_id now = tk__file_id_of(st);
    return tk__file_id_eq(&now, id);
}

/* Unlinks path only while it is the file seen, through its parent folder
 * as tk__cache_unlink: a store may have renamed a fresh entry onto the name
 * since that stat (a scan's, a read's), and that entry may even carry the
 * inode number of the file seen (freed by a removal just before the store).
 * The file at the name is opened and checked against what was seen (device,
 * inode, size, modification time); while it is held open its inode number
 * cannot pass to another file, and it is locked (TK__GONE_PREFIX). Then it
 * is moved aside to a unique temporary name (rename is atomic) and what
 * moved is checked against the file held: that one is unlinked; another
 * goes back under its name, unless a newer file took the name meanwhile
 * (link does not replace), in which case the newer one stays. A file that
 * cannot be opened (no read permission) is checked by its stat alone. 0
 * when the file seen was removed; -1 with errno otherwise (ESTALE: the name
 * held another file; EBUSY: another removal holds it). */
int tk__cache_unlink_same(const char *path, const tk__file_id *seen)
{
    static _Atomic unsigned long serial;
    const char *leaf;
    int dfd = open_parent(path, &leaf);
    if (dfd < 0)
        return -1;
    int r = -1, saved = 0;
    struct stat held;
    int fd = openat(dfd, leaf, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0 ? fstat(fd, &held) != 0 : fstatat(dfd, leaf, &held, AT_SYMLINK_NOFOLLOW) != 0) {
        saved = errno;
        goto out;
    }
    if (!same_file(&held, seen)) {
        saved = ESTALE;
        goto out;
    }
    /* Held while it is aside, so a prune tells a live removal's file from
     * one a killed remover left; another removal of the same file gives
     * way. */
    if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) != 0) {
        saved = errno == EWOULDBLOCK ? EBUSY : errno;
        goto out;
    }
    char aside[64];
    snprintf(aside, sizeof aside, TK__GONE_PREFIX "%ld.%lu", (long)getpid(), ++serial);
    struct stat moved;
    if (renameat(dfd, leaf, dfd, aside) != 0) {
        saved = errno;
    } else if (fstatat(dfd, aside, &moved, AT_SYMLINK_NOFOLLOW) == 0 &&
               (fd >= 0 ? moved.st_dev == held.st_dev && moved.st_ino == held.st_ino
                        : same_file(&moved, seen))) {
        r = unlinkat(dfd, aside, 0);
        saved = errno;
    } else {
        /* not the file seen: back where it was, or gone if a newer one is
         * (unlocked while aside: a prune in this instant costs a miss) */
        if (linkat(dfd, aside, dfd, leaf, 0) != 0 && errno != EEXIST)
            renameat(dfd, aside, dfd, leaf); /* no hard links here: replace */
        unlinkat(dfd, aside, 0);
        saved = ESTALE;
    }
out:
    if (fd >= 0)
        close(fd);
    close(dfd);
    errno = saved;
    return r;
}

/* Opens the folder name/below[0]/.../below[n-1] under dfd, one component
 * at a time with O_NOFOLLOW: a link met on the way is never entered. */
static int open_below(int dfd, const char *name, char *const *below, size_t n)
{
    int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    for (size_t i = 0; fd >= 0 && i < n; i++) {
        int next = openat(fd, below[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int saved = errno;
        close(fd);
        fd = next;
        errno = saved;
    }
    return fd;
}

/* Deepest folder remove_at empties: far beyond what PATH_MAX lets a path
 * name, so only a tree built with *at() calls can be deeper. */
#define REMOVE_MAX_DEPTH 4096

/* Removes name under dfd and, for a folder, everything in it at any depth,
 * never following a link. The folder being emptied is reached again from
 * dfd through the list of names below it rather than through one open
 * descriptor per level, so a deep tree costs no more than two descriptors. */
static int remove_at(int dfd, const char *name)
{
    if (unlinkat(dfd, name, 0) == 0)
        return 0;
    if (errno != EISDIR && errno != EPERM)
        return -1;
    char **below = NULL; /* the path from name down to the folder being emptied */
    size_t depth = 0, cap = 0;
    int rc = -1, saved = 0;
    for (;;) {
        int fd = open_below(dfd, name, below, depth);
        DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
        if (!d) {
            saved = errno;
            if (fd >= 0)
                close(fd);
            break;
        }
        char *sub = NULL;
        int failed = 0;
        struct dirent *e;
        while (!sub && !failed && (e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            if (unlinkat(dirfd(d), e->d_name, 0) == 0)
                continue;
            if ((errno == EISDIR || errno == EPERM) &&
                unlinkat(dirfd(d), e->d_name, AT_REMOVEDIR) == 0)
                continue;
            if (errno == ENOTEMPTY || errno == EEXIST) {
                if (!(sub = strdup(e->d_name)))
                    errno = ENOMEM;
            }
            if (!sub) {
                failed = 1;
                saved = errno;
            }
        }
        closedir(d);
        if (failed)
            break;
        if (sub) { /* a folder with something in it: empty it first */
            if (depth == REMOVE_MAX_DEPTH) {
                free(sub);
                saved = ENAMETOOLONG;
                break;
            }
            if (depth == cap) {
                size_t ncap = cap ? 2 * cap : 16;
                char **nb = realloc(below, ncap * sizeof *below);
                if (!nb) {
                    free(sub);
                    saved = ENOMEM;
                    break;
                }
                below = nb;
                cap = ncap;
            }
            below[depth++] = sub;
            continue;
        }
        /* This folder is empty now: remove it from its parent. */
        if (depth == 0) {
            rc = unlinkat(dfd, name, AT_REMOVEDIR);
            saved = errno;
            break;
        }
        int parent = open_below(dfd, name, below, depth - 1);
        int r = parent >= 0 ? unlinkat(parent, below[depth - 1], AT_REMOVEDIR) : -1;
        saved = errno;
        if (parent >= 0)
            close(parent);
        if (r != 0)
            break;
        free(below[--depth]);
    }
    for (size_t i = 0; i < depth; i++)
        free(below[i]);
    free(below);
    errno = saved;
    return rc;
}

int tk__cache_remove_any(const char *path)
{
    const char *leaf;
    int dfd = open_parent(path, &leaf);
    if (dfd < 0)
        return -1;
    int r = remove_at(dfd, leaf);
    int saved = errno;
    close(dfd);
    errno = saved;
    return r;
}

int tk__cache_write_all(int fd, const void *data, size_t n)
{
    const uint8_t *p = data;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            if (w == 0)
                errno = EIO;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}
