/* A file as a stat saw it. Device and inode alone do not name one file over
 * time: a file system hands a freed inode number to the next file made
 * (ext4 does at once), so a store that follows a removal can get the number
 * of the file it replaced. Size and modification time tell them apart.
 * Header only: the cache's removals and the precompile's count of stored
 * entries compare files alike. */
#ifndef TK_COMMON_FILE_ID_H
#define TK_COMMON_FILE_ID_H

#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

typedef struct tk__file_id {
    dev_t dev;
    ino_t ino;
    uint64_t size;
    int64_t mtime_ns;
} tk__file_id;

static inline tk__file_id tk__file_id_of(const struct stat *st)
{
    tk__file_id id;
    id.dev = st->st_dev;
    id.ino = st->st_ino;
    id.size = (uint64_t)st->st_size;
    id.mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000LL + st->st_mtim.tv_nsec;
    return id;
}

/* 1 when a and b are the same file, unchanged. */
static inline int tk__file_id_eq(const tk__file_id *a, const tk__file_id *b)
{
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           a->mtime_ns == b->mtime_ns;
}

#endif
