/* A size as the tools and the environment write it: digits, then an optional
 * K, M, G, T or P (powers of 1024), optionally followed by B or iB ("500M",
 * "5GiB", "1048576"). Header only, so that every layer parses sizes alike
 * (tk_parse_size is the public face of it). */
#ifndef TK_COMMON_SIZE_H
#define TK_COMMON_SIZE_H

#include <ctype.h>
#include <stdint.h>

/* 0 and *out set, or -1 (*out untouched) for anything else: empty, a sign,
 * spaces, an unknown suffix, a value beyond 2^64 - 1. */
static inline int tk__size_parse(const char *text, uint64_t *out)
{
    const char *p = text;
    if (!isdigit((unsigned char)*p))
        return -1; /* empty, sign, space or junk */
    uint64_t v = 0;
    for (; isdigit((unsigned char)*p); p++) {
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    int shift = 0;
    switch (toupper((unsigned char)*p)) {
    case 'K':
        shift = 10;
        break;
    case 'M':
        shift = 20;
        break;
    case 'G':
        shift = 30;
        break;
    case 'T':
        shift = 40;
        break;
    case 'P':
        shift = 50;
        break;
    default:
        break;
    }
    if (shift) {
        p++;
        if (toupper((unsigned char)*p) == 'I' && toupper((unsigned char)p[1]) == 'B')
            p += 2;
        else if (toupper((unsigned char)*p) == 'B')
            p++;
    } else if (toupper((unsigned char)*p) == 'B') {
        p++;
    }
    if (*p)
        return -1;
    if (shift && v > (UINT64_MAX >> shift))
        return -1;
    *out = v << shift;
    return 0;
}

#endif
