/*
 * cfg.h — command options from one table: command-line flags, SELROLL_* environment
 * variables, an INI file and defaults, and the --help text, all driven by the same entries.
 *
 * Precedence, highest first: command-line flags > environment (SELROLL_<NAME>, NAME = the flag
 * upper-cased with '-' turned into '_', e.g. --batch-groups -> SELROLL_BATCH_GROUPS) > the INI file
 * given by --config FILE (or SELROLL_CONFIG), its [<command>] section over its [common] section >
 * the entry's default. docs/configuration.md describes the mechanism for users.
 *
 * A command declares its options with designated initialisers and typed destinations:
 *
 *     static struct { int slots; char *redis; bool backfill; int mode; } o;
 *     cfg_option_t opts[] = {
 *         {.name = "slots", .kind = CFG_INT, .dst = &o.slots, .def = "4", .min = 1, .max = 4096,
 *          .help = "episodes run at once"},
 *         {.name = "redis", .kind = CFG_STRING, .dst = &o.redis, .required = true, ...},
 *         {.name = "mode", .kind = CFG_ENUM, .dst = &o.mode, .choices = "enforce|shadow|off",
 *          .def = "enforce"},
 *         {0},
 *     };
 *     cfg_t cfg = {.command = "actor", .summary = "...", .options = opts};
 *     int rc = cfg_parse(&cfg, argc, argv);
 *     if (rc == CFG_HELP) { cfg_help(&cfg, stdout); cfg_free(&cfg); return 0; }
 *     if (rc < 0) { fprintf(stderr, "%s\n", cfg.err); cfg_free(&cfg); return 2; }
 *     ...
 *     cfg_free(&cfg);
 *
 * Destination types: CFG_STRING char * (allocated by the parser, freed by cfg_free; NULL when
 * unset with no default), CFG_INT int, CFG_I64 int64_t, CFG_DOUBLE double, CFG_BOOL bool,
 * CFG_ENUM int (the index of the word in .choices).
 */
#ifndef SR_CONFIG_H
#define SR_CONFIG_H

#include <stdbool.h>
#include <stdio.h>

typedef enum {
    CFG_STRING = 1,
    CFG_INT,
    CFG_I64,
    CFG_DOUBLE,
    CFG_BOOL,
    CFG_ENUM,
} cfg_kind_t;

typedef struct {
    const char *name;    /* long flag without dashes: "batch-groups"; NULL ends the table */
    cfg_kind_t kind;
    void *dst;           /* typed destination, see above */
    const char *def;     /* default as text, parsed like any other source; NULL = none */
    double min, max;     /* numeric bounds, active unless both are 0; max < min = no upper bound */
    const char *choices; /* CFG_ENUM: allowed words separated by '|', e.g. "enforce|shadow|off" */
    const char *metavar; /* shown in --help; defaults by kind (STR, N, X, or the choices) */
    const char *help;    /* one line */
    bool required;       /* error when no source sets it (a default does not count) */
    bool no_env;         /* not read from the environment */
    /* Filled by cfg_parse: where the value came from (0 none, then default, ini, env, flag). */
    int source_;
} cfg_option_t;

/* Value sources, in increasing precedence, as stored in cfg_option_t.source_. */
enum { CFG_SRC_NONE = 0, CFG_SRC_DEFAULT, CFG_SRC_COMMON, CFG_SRC_SECTION, CFG_SRC_ENV, CFG_SRC_FLAG };

/* cfg_parse returns CFG_HELP when -h/--help was given. */
enum { CFG_HELP = 1 };

typedef struct {
    /* Set by the caller. */
    const char *command;     /* subcommand name: messages, INI section, "selroll <command>" */
    const char *summary;     /* one line under the usage in --help */
    const char *positional;  /* usage text for positional arguments, e.g. "FILE..."; NULL = none */
    cfg_option_t *options;   /* ends with an entry whose name is NULL */
    /* Filled by cfg_parse. */
    int npos;                /* positional arguments, in order */
    char **pos;              /* points into argv (not copied); the array is freed by cfg_free */
    char *config_path;       /* the INI file read, or NULL */
    char err[512];           /* one-line message when cfg_parse fails */
    bool parsed_;            /* set once destinations belong to the parser */
} cfg_t;

/* cfg_parse fills every option's destination from its sources (see the precedence above) and
 * collects positional arguments. argv[0] is the command name and is skipped; "--" ends the
 * options. Returns 0; CFG_HELP when -h or --help is present (destinations are then unspecified);
 * or SR_EINVAL / SR_EIO with a one-line message in cfg->err, such as
 * "selroll actor: --slots: 'abc' is not an integer" — the caller prints it and exits 2.
 * Strings already stored are freed by cfg_free in every case. */
int cfg_parse(cfg_t *cfg, int argc, char **argv);

/* cfg_parse_command is cfg_parse for the main of a subcommand: after --help it writes the help to
 * stdout, after an error the one-line message to stderr. Returns CFG_GO_ON when the command should
 * go on; otherwise the process exit code (0 after --help, 2 after an error), which the caller
 * returns: cfg is then freed already (cfg_free, which is safe a second time). */
enum { CFG_GO_ON = -1 };
int cfg_parse_command(cfg_t *cfg, int argc, char **argv);

/* CFG_OPT_METRICS_PORT is the --metrics-port entry of a role's option table (sr_cmd_metrics,
 * common/cmds.h, serves it). */
#define CFG_OPT_METRICS_PORT(dst_)                                                                 \
    {                                                                                              \
        .name = "metrics-port", .kind = CFG_STRING, .dst = (dst_), .metavar = "PORT|HOST:PORT",    \
        .help = "serve /metrics and /health here (a bare port listens on 127.0.0.1)"               \
    }

/* cfg_help writes the usage and one entry per option (flag, metavar, help, default, bounds,
 * environment variable) to out. */
void cfg_help(const cfg_t *cfg, FILE *out);

/* cfg_free frees the strings the parser stored in CFG_STRING destinations (and sets them to NULL),
 * the positional array and config_path. Safe on a cfg that was never parsed, and safe twice. */
void cfg_free(cfg_t *cfg);

/* cfg_env_name writes the environment variable name of option `name` (SELROLL_ + upper-case,
 * '-' -> '_') into buf. Returns 0, or SR_ETOOBIG when buf is too small. */
int cfg_env_name(const char *name, char *buf, size_t cap);

/* cfg_parse_bool reads 1/0, true/false, yes/no, on/off (any case) into *out. Returns 0 or
 * SR_EINVAL. */
int cfg_parse_bool(const char *s, bool *out);

/* cfg_source returns the CFG_SRC_* source of the option named `name` after cfg_parse, or
 * SR_ENOTFOUND when the table has no such option. */
int cfg_source(const cfg_t *cfg, const char *name);

#endif
