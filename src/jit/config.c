/* tk_config: options for a context or a cache, copied on use. */
#include <stdlib.h>
#include <string.h>

#include "cache/remote.h"
#include "jit/jit_internal.h"

tk_status tk_config_create(tk_config **out)
{
    if (!out)
        return TK_INVALID_ARGUMENT;
    tk_config *cfg = calloc(1, sizeof *cfg);
    if (!cfg)
        return TK_OUT_OF_MEMORY;
    cfg->backend = TK_BACKEND_AUTO;
    cfg->policy = TK_POLICY_STABLE;
    cfg->build_mode = TK_BUILD_ASYNC;
    cfg->log_level = TK_LOG_WARN;
    *out = cfg;
    return TK_OK;
}

void tk_config_destroy(tk_config *cfg)
{
    if (!cfg)
        return;
    free(cfg->cache_dir);
    free(cfg->cache_lower);
    free(cfg->target);
    free(cfg->remote_url);
    free(cfg->remote_key);
    free(cfg);
}

/* Replaces *slot by a copy of value (NULL clears it). */
static tk_status set_string(char **slot, const char *value)
{
    char *copy = NULL;
    if (value) {
        copy = strdup(value);
        if (!copy)
            return TK_OUT_OF_MEMORY;
    }
    free(*slot);
    *slot = copy;
    return TK_OK;
}

tk_status tk_config_set_cache_dir(tk_config *cfg, const char *dir)
{
    if (!cfg || (dir && !dir[0]))
        return TK_INVALID_ARGUMENT;
    return set_string(&cfg->cache_dir, dir);
}

tk_status tk_config_set_cache_lower(tk_config *cfg, const char *paths)
{
    if (!cfg)
        return TK_INVALID_ARGUMENT;
    return set_string(&cfg->cache_lower, paths);
}

tk_status tk_config_set_cache_max_size(tk_config *cfg, uint64_t bytes)
{
    if (!cfg)
        return TK_INVALID_ARGUMENT;
    cfg->cache_max_size = bytes;
    return TK_OK;
}

tk_status tk_config_set_cache_read_only(tk_config *cfg, int read_only)
{
    if (!cfg)
        return TK_INVALID_ARGUMENT;
    cfg->cache_read_only = read_only != 0;
    return TK_OK;
}

tk_status tk_config_set_cache_disabled(tk_config *cfg, int disabled)
{
    if (!cfg)
        return TK_INVALID_ARGUMENT;
    cfg->cache_disabled = disabled != 0;
    return TK_OK;
}

tk_status tk_config_set_backend(tk_config *cfg, tk_backend_kind kind)
{
    if (!cfg || (kind != TK_BACKEND_AUTO && kind != TK_BACKEND_CUDA && kind != TK_BACKEND_HIP &&
                 kind != TK_BACKEND_STUB))
        return TK_INVALID_ARGUMENT;
    cfg->backend = kind;
    return TK_OK;
}

tk_status tk_config_set_device(tk_config *cfg, int ordinal)
{
    if (!cfg || ordinal < 0)
        return TK_INVALID_ARGUMENT;
    cfg->device = ordinal;
    return TK_OK;
}

tk_status tk_config_set_target(tk_config *cfg, const char *target)
{
    if (!cfg || (target && (!target[0] || strlen(target) >= 200)))
        return TK_INVALID_ARGUMENT;
    return set_string(&cfg->target, target);
}

tk_status tk_config_set_policy(tk_config *cfg, tk_policy policy)
{
    if (!cfg ||
        (policy != TK_POLICY_EXACT && policy != TK_POLICY_GENERIC && policy != TK_POLICY_STABLE))
        return TK_INVALID_ARGUMENT;
    cfg->policy = policy;
    cfg->policy_set = 1;
    return TK_OK;
}

tk_status tk_config_set_build_mode(tk_config *cfg, tk_build_mode mode)
{
    if (!cfg || (mode != TK_BUILD_ASYNC && mode != TK_BUILD_SYNC))
        return TK_INVALID_ARGUMENT;
    cfg->build_mode = mode;
    cfg->build_mode_set = 1;
    return TK_OK;
}

tk_status tk_config_set_build_limits(tk_config *cfg, unsigned workers, unsigned queue)
{
    if (!cfg || workers > TK__MAX_BUILD_WORKERS || queue > 1u << 20)
        return TK_INVALID_ARGUMENT;
    cfg->build_workers = workers;
    cfg->build_queue = queue;
    return TK_OK;
}

tk_status tk_config_set_log(tk_config *cfg, tk_log_fn fn, void *user)
{
    if (!cfg)
        return TK_INVALID_ARGUMENT;
    cfg->log = fn;
    cfg->log_user = user;
    return TK_OK;
}

tk_status tk_config_set_log_level(tk_config *cfg, tk_log_level level)
{
    if (!cfg || level < TK_LOG_DEBUG || level > TK_LOG_ERROR)
        return TK_INVALID_ARGUMENT;
    cfg->log_level = level;
    return TK_OK;
}

/* ------------------------------------------------------------ remote tier */

tk_status tk_config_set_remote(tk_config *cfg, const char *url)
{
    if (!cfg)
        return TK_INVALID_ARGUMENT;
    if (url && url[0] && tk__remote_url_check(url, NULL, 0) != TK_OK)
        return TK_INVALID_ARGUMENT;
    return set_string(&cfg->remote_url, url);
}

tk_status tk_config_set_remote_key(tk_config *cfg, const void *key, size_t len)
{
    if (!cfg || (!key && len) || len > 4096)
        return TK_INVALID_ARGUMENT;
    unsigned char *copy = NULL;
    if (key && len) {
        copy = malloc(len);
        if (!copy)
            return TK_OUT_OF_MEMORY;
        memcpy(copy, key, len);
    }
    free(cfg->remote_key);
    cfg->remote_key = copy;
    cfg->remote_key_len = copy ? len : 0;
    cfg->remote_key_set = key != NULL;
    return TK_OK;
}

tk_status tk_config_set_remote_timeouts(tk_config *cfg, unsigned connect_ms, unsigned io_ms)
{
    if (!cfg || connect_ms > 3600000 || io_ms > 3600000)
        return TK_INVALID_ARGUMENT;
    cfg->remote_connect_ms = connect_ms;
    cfg->remote_io_ms = io_ms;
    return TK_OK;
}

tk_status tk_config_set_remote_lease(tk_config *cfg, unsigned lease_ms, unsigned wait_ms)
{
    if (!cfg || lease_ms > 3600000 || wait_ms > 3600000)
        return TK_INVALID_ARGUMENT;
    cfg->remote_lease_ms = lease_ms;
    cfg->remote_wait_ms = wait_ms;
    return TK_OK;
}
