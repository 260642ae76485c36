/*
 * The kernel sources embedded from kernel_src/ at build time: lookup by name
 * for the engine and the list for tools (tk_embedded_sources).
 */
#include <pthread.h>
#include <string.h>

#include "jit/jit_internal.h"

const char *tk__embedded_source(const char *name, size_t *len)
{
    if (!name)
        return NULL;
    for (const tk__embedded *e = tk__embedded_table; e->name; e++) {
        if (strcmp(e->name, name) == 0) {
            if (len)
                *len = e->len;
            return e->text;
        }
    }
    return NULL;
}

#define TK__MAX_EMBEDDED 511
static const char *g_embedded_names[TK__MAX_EMBEDDED + 1];

static void embedded_names_fill(void)
{
    size_t n = 0;
    for (const tk__embedded *e = tk__embedded_table; e->name && n < TK__MAX_EMBEDDED; e++)
        g_embedded_names[n++] = e->name;
    g_embedded_names[n] = NULL;
}

const char *const *tk_embedded_sources(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, embedded_names_fill);
    return g_embedded_names;
}
