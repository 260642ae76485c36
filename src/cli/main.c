/* tokitai-jit: command line parsing, usage and dispatch. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char usage_text[] =
    "Usage: tokitai-jit COMMAND [OPTIONS]\n"
    "\n"
    "Compile GPU kernels ahead of time and manage the tokitai-jit kernel cache.\n"
    "\n"
    "Commands (exactly one):\n"
    "  --list             the cache's entries: a summary per operator, arch and\n"
    "                     policy when there are many (--all: one row each: key\n"
    "                     prefix, label (operator, baked dimensions, variant),\n"
    "                     arch, size, dates)\n"
    "  --stats, -s, --show-stats\n"
    "                     entries, bytes, size limit, leftovers, bad files, and the\n"
    "                     hits, misses, compiles, compile time, fallback calls and\n"
    "                     errors of every process since the last --zero-stats\n"
    "  --zero-stats, -z   set those counts to zero\n"
    "  --verify           read every entry in full (structure, key, checksum); names\n"
    "                     each bad file; exit 1 if any\n"
    "  --prune            evict least-recently-used entries down to the size limit\n"
    "                     and remove leftovers of interrupted writes\n"
    "  --clear, -C        remove every entry of the user cache\n"
    "  --max-size SIZE, -M SIZE\n"
    "                     alone: keep SIZE as this cache's limit (in its config\n"
    "                     file; 0: back to the default); with --prune: prune to it\n"
    "  --info             backends found (library paths, versions) or why not,\n"
    "                     devices with their target ids, the cache folder in use,\n"
    "                     TOKITAI_JIT_* values refused and what is used instead\n"
    "  --run OP           checked run of one operator on the GPU: random inputs,\n"
    "                     compared with the CPU reference (needs --shape)\n"
    "  --precompile       compile every specialisation a manifest names into the\n"
    "                     cache (manifest format: docs/manifests.md); with\n"
    "                     --fallbacks, the operators' fallback kernels instead\n"
    "  --export FILE      pack cache entries into one bundle file\n"
    "  --import FILE      verify a bundle's entries and add the good ones to the\n"
    "                     cache\n"
    "  --source KEY       the kernel source of the entry KEY (its key, or a prefix\n"
    "                     of it naming one entry) as the compiler saw it, under a\n"
    "                     header with its kernel, target and options\n"
    "  --tune             on the GPU present, time the candidate configurations of\n"
    "                     every GEMM shape class the manifest reaches and keep the\n"
    "                     fastest of each as a tuning record in the cache\n"
    "  --push             upload the cache's entries (or --bundle FILE's) to the\n"
    "                     remote cache (--remote URL or TOKITAI_JIT_REMOTE)\n"
    "  --help, -h         this text\n"
    "  --version, -V      the tool's and the library's versions\n"
    "\n"
    "Options:\n"
    "  --cache-dir DIR    use the cache at DIR (every command)\n"
    "  --json             machine-readable output (--list, --stats, --info, --run)\n"
    "  --verbose, -v      --list: options and resource usage (registers/VGPRs, SGPRs,\n"
    "                     AGPRs, shared/LDS, local/scratch, spills, wavefront);\n"
    "                     --precompile: one line per job even on a terminal;\n"
    "                     --tune: every candidate's time\n"
    "  --kernel GLOB      --list: entries whose kernel name matches (tk_gemm*)\n"
    "  --older-than AGE   --list: entries last used before AGE ago (30m, 12h, 7d)\n"
    "  --sort FIELD       --list: key, kernel, arch, size, created or used (newest\n"
    "                     first); default arch then kernel\n"
    "  --limit N          --list: at most N rows\n"
    "  --all              --list: one row per entry however many there are\n"
    "  --shape DIMS       --run: sizes as 512x1024x4096 or 512,1024,4096, in the op's\n"
    "                     order (gemm: M,N,K; softmax: rows,cols; embedding: V,D,Q)\n"
    "  --seed N           --run: random seed (default 1)\n"
    "  --policy P         --run, --precompile, --tune: specialisation policy: stable\n"
    "                     (default: weights baked, token counts at run time),\n"
    "                     exact (everything baked) or generic (nothing baked)\n"
    "  --build-mode M     --run: async (default: a generic kernel serves while the\n"
    "                     specialised one builds in the background) or sync\n"
    "  --classes C        --tune: all (default: every class of M up to the largest\n"
    "                     M of each GEMM line, at least 8192) or manifest (only\n"
    "                     the classes of the M values the lines name)\n"
    "  --manifest FILE    --precompile, --tune: manifest to use (default: the built-in\n"
    "                     manifest for the 0.7B MoE training workload)\n"
    "  --arch LIST        --precompile, --export, --list: targets such as sm_80,sm_90,gfx90a\n"
    "  --ops LIST         --precompile, --export, --tune, --list: operators such as gemm_f16_fwd,\n"
    "                     softmax_f16_fwd\n"
    "  -j N, --jobs N     --precompile: worker processes (default: number of CPUs)\n"
    "  --dry-run          --precompile: list the jobs, compile nothing\n"
    "  --fallbacks        --precompile: instead of a manifest, the kernels that serve\n"
    "                     operator calls while their own kernels are built (GEMM:\n"
    "                     the universal and, on sm_90, the fast fallbacks of every\n"
    "                     layout and alignment class; embedding: every variant's\n"
    "                     generic kernel and the sort kernels), the set the build\n"
    "                     ships in the library's read-only tier (--ops narrows it)\n"
    "  --prune-others     --precompile: when every job succeeded, remove the cache's\n"
    "                     entries the run neither compiled nor found, so that it\n"
    "                     holds exactly the run's kernels (how the build makes the\n"
    "                     shipped tier)\n"
    "  --remote URL       redis://host[:port][/db] or unix:///path: --stats and\n"
    "                     --list show that server's entries for this version;\n"
    "                     --precompile publishes what it compiles; --push's target\n"
    "  --bundle FILE      --push: upload this bundle instead of the cache\n"
    "\n"
    "Operators: gemm_f16_fwd gemm_f16_grad_a gemm_f16_grad_b softmax_f16_fwd\n"
    "           softmax_xent_f16_bwd embedding_f16_fwd embedding_f16_bwd\n"
    "\n"
    "Manifest (plain text, one directive a line, '#' starts a comment):\n"
    "  arch sm_90 gfx90a                  targets (--arch overrides)\n"
    "  policy stable                      stable (default), exact, generic, or several\n"
    "  gemm_f16_fwd M=512..16384:x2 N=1024,3072 K=1024\n"
    "                                     an operator and every dimension: lists,\n"
    "                                     ranges A..B:xF (geometric) or A..B:+S;\n"
    "                                     optional policy=stable|exact|generic\n"
    "  kernel FILE ENTRY [-DNAME[=VALUE]]... [OPTION]...\n"
    "                                     a user kernel (FILE relative to the\n"
    "                                     manifest)\n"
    "  fallbacks [OP]...                  the fallback kernels of the operators\n"
    "                                     named (none named: of every operator)\n"
    "\n"
    "Precompile targets: --arch, else the manifest's 'arch' line, else the GPU\n"
    "present, else sm_80 sm_90 gfx90a gfx1030 (those whose compiler is installed).\n"
    "\n"
    "Environment:\n"
    "  TOKITAI_JIT_CACHE_DIR       cache root (default $XDG_CACHE_HOME/tokitai-jit,\n"
    "                              else ~/.cache/tokitai-jit)\n"
    "  TOKITAI_JIT_CACHE_PATH      ':'-separated read-only caches searched after it\n"
    "                              ('shipped': the library's own; 'none': none;\n"
    "                              default: shipped, see --info)\n"
    "  TOKITAI_JIT_CACHE_MAX_SIZE  size limit (default 5G)\n"
    "  TOKITAI_JIT_CACHE_DISABLE   1: no disk cache\n"
    "  TOKITAI_JIT_BACKEND         cuda, hip or stub: force a backend\n"
    "  TOKITAI_JIT_POLICY          stable, exact or generic: default policy\n"
    "  TOKITAI_JIT_BUILD           async or sync: default operator build mode\n"
    "  TOKITAI_JIT_TUNE            off: ignore tuning records; auto: tune a GEMM\n"
    "                              class at its first call (costs compiles and a\n"
    "                              stream sync once per class); default: use records\n"
    "  TOKITAI_JIT_LOG             1, info, debug or warn: library log on stderr\n"
    "  TOKITAI_JIT_REMOTE          remote cache URL (library and --push)\n"
    "  TOKITAI_JIT_REMOTE_KEY      shared secret: sign values, refuse unsigned ones\n"
    "\n"
    "Exit codes:\n"
    "  0  success\n"
    "  1  failure: bad cache entries, result out of tolerance, failed compiles,\n"
    "     rejected bundle entries, I/O errors\n"
    "  2  usage: unknown option, bad value, invalid manifest (nothing was done)\n"
    "  3  no device: --run found no usable GPU\n"
    "  4  unavailable: a requested target's compiler library is missing or does not\n"
    "     know the target; --remote on a build without the remote tier\n"
    "  5  not kept: --precompile compiled kernels that the cache did not store or\n"
    "     (with --remote) the remote cache did not take\n";

/* Which commands accept an option. */
#define C(x) (1u << (x))
#define ALL_COMMANDS 0xffffffffu

typedef struct opt_spec {
    const char *name;  /* long form */
    const char *alias; /* short form or NULL */
    int takes_value;
    tk__cli_command command; /* TK__CMD_NONE: not a command */
    unsigned allowed;        /* commands that accept it */
} opt_spec;

static const opt_spec specs[] = {
    {"--help", "-h", 0, TK__CMD_HELP, ALL_COMMANDS},
    {"--version", "-V", 0, TK__CMD_VERSION, ALL_COMMANDS},
    {"--list", NULL, 0, TK__CMD_LIST, ALL_COMMANDS},
    {"--stats", "-s", 0, TK__CMD_STATS, ALL_COMMANDS},
    {"--show-stats", NULL, 0, TK__CMD_STATS, ALL_COMMANDS},
    {"--zero-stats", "-z", 0, TK__CMD_ZERO_STATS, ALL_COMMANDS},
    {"--verify", NULL, 0, TK__CMD_VERIFY, ALL_COMMANDS},
    {"--prune", NULL, 0, TK__CMD_PRUNE, ALL_COMMANDS},
    {"--clear", "-C", 0, TK__CMD_CLEAR, ALL_COMMANDS},
    {"--info", NULL, 0, TK__CMD_INFO, ALL_COMMANDS},
    {"--run", NULL, 1, TK__CMD_RUN, ALL_COMMANDS},
    {"--precompile", NULL, 0, TK__CMD_PRECOMPILE, ALL_COMMANDS},
    {"--tune", NULL, 0, TK__CMD_TUNE, ALL_COMMANDS},
    {"--classes", NULL, 1, TK__CMD_NONE, C(TK__CMD_TUNE)},
    {"--export", NULL, 1, TK__CMD_EXPORT, ALL_COMMANDS},
    {"--import", NULL, 1, TK__CMD_IMPORT, ALL_COMMANDS},
    {"--source", NULL, 1, TK__CMD_SOURCE, ALL_COMMANDS},
    {"--cache-dir", NULL, 1, TK__CMD_NONE, ALL_COMMANDS},
    {"--json", NULL, 0, TK__CMD_NONE,
     C(TK__CMD_LIST) | C(TK__CMD_STATS) | C(TK__CMD_INFO) | C(TK__CMD_RUN)},
    {"--verbose", "-v", 0, TK__CMD_NONE, C(TK__CMD_LIST) | C(TK__CMD_PRECOMPILE) | C(TK__CMD_TUNE)},
    {"--max-size", "-M", 1, TK__CMD_NONE, C(TK__CMD_PRUNE) | C(TK__CMD_SET_MAX_SIZE)},
    {"--kernel", NULL, 1, TK__CMD_NONE, C(TK__CMD_LIST)},
    {"--older-than", NULL, 1, TK__CMD_NONE, C(TK__CMD_LIST)},
    {"--sort", NULL, 1, TK__CMD_NONE, C(TK__CMD_LIST)},
    {"--limit", NULL, 1, TK__CMD_NONE, C(TK__CMD_LIST)},
    {"--all", NULL, 0, TK__CMD_NONE, C(TK__CMD_LIST)},
    {"--shape", NULL, 1, TK__CMD_NONE, C(TK__CMD_RUN)},
    {"--seed", NULL, 1, TK__CMD_NONE, C(TK__CMD_RUN)},
    {"--policy", NULL, 1, TK__CMD_NONE, C(TK__CMD_RUN) | C(TK__CMD_PRECOMPILE) | C(TK__CMD_TUNE)},
    {"--build-mode", NULL, 1, TK__CMD_NONE, C(TK__CMD_RUN)},
    {"--manifest", NULL, 1, TK__CMD_NONE, C(TK__CMD_PRECOMPILE) | C(TK__CMD_TUNE)},
    {"--arch", NULL, 1, TK__CMD_NONE, C(TK__CMD_PRECOMPILE) | C(TK__CMD_EXPORT) | C(TK__CMD_LIST)},
    {"--ops", NULL, 1, TK__CMD_NONE,
     C(TK__CMD_PRECOMPILE) | C(TK__CMD_EXPORT) | C(TK__CMD_TUNE) | C(TK__CMD_LIST)},
    {"--jobs", "-j", 1, TK__CMD_NONE, C(TK__CMD_PRECOMPILE)},
    {"--dry-run", NULL, 0, TK__CMD_NONE, C(TK__CMD_PRECOMPILE)},
    {"--fallbacks", NULL, 0, TK__CMD_NONE, C(TK__CMD_PRECOMPILE)},
    {"--prune-others", NULL, 0, TK__CMD_NONE, C(TK__CMD_PRECOMPILE)},
    /* the remote tier */
    {"--push", NULL, 0, TK__CMD_PUSH, ALL_COMMANDS},
    {"--remote", NULL, 1, TK__CMD_NONE,
     C(TK__CMD_LIST) | C(TK__CMD_STATS) | C(TK__CMD_PRECOMPILE) | C(TK__CMD_PUSH)},
    {"--bundle", NULL, 1, TK__CMD_NONE, C(TK__CMD_PUSH)},
};

static const char *command_name(tk__cli_command cmd)
{
    if (cmd == TK__CMD_SET_MAX_SIZE)
        return "--max-size";
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++)
        if (specs[i].command == cmd)
            return specs[i].name;
    return "?";
}

/* Finds the spec for arg; *value is set for "--name=value" and "-jN". */
static const opt_spec *find_spec(const char *arg, const char **value)
{
    *value = NULL;
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        const opt_spec *s = &specs[i];
        size_t n = strlen(s->name);
        if (strcmp(arg, s->name) == 0 || (s->alias && strcmp(arg, s->alias) == 0))
            return s;
        if (s->takes_value && strncmp(arg, s->name, n) == 0 && arg[n] == '=') {
            *value = arg + n + 1;
            return s;
        }
        if (s->takes_value && s->alias && strlen(s->alias) == 2 && strncmp(arg, s->alias, 2) == 0 &&
            arg[2]) {
            *value = arg + 2;
            return s;
        }
    }
    return NULL;
}

static int apply_value(tk__cli_opts *o, const opt_spec *s, const char *v)
{
    const char *n = s->name;
    if (*v == 0) {
        tk__cli_error("%s: empty value", n);
        return -1;
    }
    if (s->command != TK__CMD_NONE) {
        if (s->command == TK__CMD_RUN)
            o->run_op = v;
        else
            o->file = v;
        return 0;
    }
    if (strcmp(n, "--cache-dir") == 0) {
        o->cache_dir = v;
    } else if (strcmp(n, "--max-size") == 0) {
        if (tk_parse_size(v, &o->max_size) != TK_OK) {
            tk__cli_error("--max-size: bad size '%s' (examples: 500M, 2G, 1048576)", v);
            return -1;
        }
        o->have_max_size = 1;
    } else if (strcmp(n, "--kernel") == 0) {
        o->kernel_glob = v;
    } else if (strcmp(n, "--older-than") == 0) {
        char *end = NULL;
        double x = strtod(v, &end);
        double unit = 0;
        if (end && end != v && x >= 0) {
            if (*end == 0 || strcmp(end, "s") == 0)
                unit = 1;
            else if (strcmp(end, "m") == 0)
                unit = 60;
            else if (strcmp(end, "h") == 0)
                unit = 3600;
            else if (strcmp(end, "d") == 0)
                unit = 86400;
        }
        if (unit == 0 || x * unit > 1e12) {
            tk__cli_error("--older-than: bad age '%s' (examples: 90s, 30m, 12h, 7d)", v);
            return -1;
        }
        o->older_than = (int64_t)(x * unit);
    } else if (strcmp(n, "--sort") == 0) {
        static const char *const fields[] = {"key", "kernel", "arch", "size", "created", "used"};
        int ok = 0;
        for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
            ok |= strcmp(v, fields[i]) == 0;
        if (!ok) {
            tk__cli_error("--sort: bad field '%s' (key, kernel, arch, size, created or used)", v);
            return -1;
        }
        o->sort = v;
    } else if (strcmp(n, "--limit") == 0) {
        int64_t lim;
        if (tk__parse_i64(v, 1, INT64_MAX, &lim) != 0) {
            tk__cli_error("--limit: bad value '%s' (a positive number of rows)", v);
            return -1;
        }
        o->limit = (uint64_t)lim;
    } else if (strcmp(n, "--shape") == 0) {
        o->shape = v;
    } else if (strcmp(n, "--seed") == 0) {
        int64_t seed;
        if (tk__parse_i64(v, 0, INT64_MAX, &seed) != 0) {
            tk__cli_error("--seed: bad value '%s' (a non-negative integer)", v);
            return -1;
        }
        o->seed = (uint64_t)seed;
    } else if (strcmp(n, "--policy") == 0) {
        if (strcmp(v, "exact") == 0) {
            o->policy = TK_POLICY_EXACT;
        } else if (strcmp(v, "generic") == 0) {
            o->policy = TK_POLICY_GENERIC;
        } else if (strcmp(v, "stable") == 0) {
            o->policy = TK_POLICY_STABLE;
        } else {
            tk__cli_error("--policy: bad value '%s' (stable, exact or generic)", v);
            return -1;
        }
        o->have_policy = 1;
    } else if (strcmp(n, "--build-mode") == 0) {
        if (strcmp(v, "async") == 0) {
            o->build_mode = TK_BUILD_ASYNC;
        } else if (strcmp(v, "sync") == 0) {
            o->build_mode = TK_BUILD_SYNC;
        } else {
            tk__cli_error("--build-mode: bad value '%s' (async or sync)", v);
            return -1;
        }
        o->have_build_mode = 1;
    } else if (strcmp(n, "--classes") == 0) {
        if (strcmp(v, "all") != 0 && strcmp(v, "manifest") != 0) {
            tk__cli_error("--classes: bad value '%s' (all or manifest)", v);
            return -1;
        }
        o->classes = v;
    } else if (strcmp(n, "--manifest") == 0) {
        o->manifest = v;
    } else if (strcmp(n, "--arch") == 0) {
        o->arch_list = v;
    } else if (strcmp(n, "--ops") == 0) {
        o->ops_list = v;
    } else if (strcmp(n, "--remote") == 0) {
        tk_config *cfg = NULL;
        tk_status st = tk_config_create(&cfg);
        if (st == TK_OK)
            st = tk_config_set_remote(cfg, v);
        tk_config_destroy(cfg);
        if (st != TK_OK) {
            tk__cli_error("--remote: bad URL '%s' (redis://host[:port][/db] or unix:///path)", v);
            return -1;
        }
        o->remote = v;
    } else if (strcmp(n, "--bundle") == 0) {
        o->bundle = v;
    } else if (strcmp(n, "--jobs") == 0) {
        int64_t j;
        if (tk__parse_i64(v, 1, 1024, &j) != 0) {
            tk__cli_error("-j: bad value '%s' (a number of processes, 1 to 1024)", v);
            return -1;
        }
        o->jobs = (int)j;
    }
    return 0;
}

static int parse_args(int argc, char **argv, tk__cli_opts *o)
{
    const opt_spec *seen[64];
    size_t n_seen = 0;
    memset(o, 0, sizeof *o);
    o->seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        const char *value = NULL;
        const opt_spec *s = find_spec(arg, &value);
        if (!s) {
            if (arg[0] == '-')
                tk__cli_error("unknown option '%s' (try --help)", arg);
            else
                tk__cli_error("unexpected argument '%s' (try --help)", arg);
            return -1;
        }
        if (!s->takes_value && value) {
            tk__cli_error("%s takes no value", s->name);
            return -1;
        }
        if (s->takes_value && !value) {
            if (i + 1 >= argc) {
                tk__cli_error("%s needs a value", s->name);
                return -1;
            }
            value = argv[++i];
        }
        for (size_t k = 0; k < n_seen; k++) {
            if (seen[k] == s) {
                tk__cli_error("%s given twice", s->name);
                return -1;
            }
        }
        if (n_seen < sizeof seen / sizeof seen[0])
            seen[n_seen++] = s;
        if (s->command != TK__CMD_NONE) {
            if (o->command != TK__CMD_NONE) {
                /* --help wins over anything: "tokitai-jit --list --help" helps. */
                if (s->command == TK__CMD_HELP || o->command == TK__CMD_HELP) {
                    o->command = TK__CMD_HELP;
                    continue;
                }
                tk__cli_error("%s and %s cannot be combined: one command at a time",
                              command_name(o->command), s->name);
                return -1;
            }
            o->command = s->command;
        }
        if (value && apply_value(o, s, value) != 0)
            return -1;
        if (!s->takes_value) {
            if (strcmp(s->name, "--json") == 0)
                o->json = 1;
            else if (strcmp(s->name, "--verbose") == 0)
                o->verbose = 1;
            else if (strcmp(s->name, "--dry-run") == 0)
                o->dry_run = 1;
            else if (strcmp(s->name, "--all") == 0)
                o->all_rows = 1;
            else if (strcmp(s->name, "--fallbacks") == 0)
                o->fallbacks = 1;
            else if (strcmp(s->name, "--prune-others") == 0)
                o->prune_others = 1;
        }
    }
    if (o->command == TK__CMD_NONE && o->have_max_size)
        o->command = TK__CMD_SET_MAX_SIZE; /* ccache's -M SIZE: set the limit */
    if (o->command == TK__CMD_NONE) {
        tk__cli_error("no command given (try --help)");
        return -1;
    }
    if (o->command == TK__CMD_HELP || o->command == TK__CMD_VERSION)
        return 0;
    for (size_t k = 0; k < n_seen; k++) {
        if (!(seen[k]->allowed & C(o->command))) {
            tk__cli_error("%s does not apply to %s", seen[k]->name, command_name(o->command));
            return -1;
        }
    }
    if (o->command == TK__CMD_PRUNE && o->have_max_size && o->max_size == 0) {
        tk__cli_error("--prune --max-size: the size must be above 0 (500M, 2G)");
        return -1;
    }
    if (o->fallbacks && o->manifest) {
        tk__cli_error("--fallbacks and --manifest cannot be combined (a manifest line "
                      "'fallbacks' adds them to its jobs)");
        return -1;
    }
    if (o->command == TK__CMD_RUN && !o->shape) {
        tk__cli_error("--run needs --shape DIMS (for example --shape 512x1024x4096)");
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    tk__cli_opts opts;
    if (parse_args(argc, argv, &opts) != 0)
        return TK__EXIT_USAGE;
    if (tk_version_number() != TK_VERSION_NUMBER) {
        tk__cli_error("library version %s does not match the tool's %s", tk_version_string(),
                      TK_VERSION_STRING);
        return TK__EXIT_FAIL;
    }
    switch (opts.command) {
    case TK__CMD_HELP:
        fputs(usage_text, stdout);
        return TK__EXIT_OK;
    case TK__CMD_VERSION:
        printf("tokitai-jit %s (library %s)\n", TK_VERSION_STRING, tk_version_string());
        return TK__EXIT_OK;
    case TK__CMD_LIST:
        return opts.remote ? tk__cmd_remote_list(&opts) : tk__cmd_list(&opts);
    case TK__CMD_STATS:
        return opts.remote ? tk__cmd_remote_stats(&opts) : tk__cmd_stats(&opts);
    case TK__CMD_VERIFY:
        return tk__cmd_verify(&opts);
    case TK__CMD_PRUNE:
        return tk__cmd_prune(&opts);
    case TK__CMD_CLEAR:
        return tk__cmd_clear(&opts);
    case TK__CMD_INFO:
        return tk__cmd_info(&opts);
    case TK__CMD_RUN:
        return tk__cmd_run(&opts);
    case TK__CMD_PRECOMPILE:
        if (opts.remote && tk__cmd_remote_check(&opts) != 0)
            return TK__EXIT_UNAVAILABLE;
        return tk__cmd_precompile(&opts);
    case TK__CMD_EXPORT:
        return tk__cmd_export(&opts);
    case TK__CMD_IMPORT:
        return tk__cmd_import(&opts);
    case TK__CMD_PUSH:
        return tk__cmd_push(&opts);
    case TK__CMD_TUNE:
        return tk__cmd_tune(&opts);
    case TK__CMD_ZERO_STATS:
        return tk__cmd_zero_stats(&opts);
    case TK__CMD_SET_MAX_SIZE:
        return tk__cmd_set_max_size(&opts);
    case TK__CMD_SOURCE:
        return tk__cmd_source(&opts);
    case TK__CMD_NONE:
        break;
    }
    return TK__EXIT_USAGE;
}
