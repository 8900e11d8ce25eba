/*
 * cfg.c — the option table parser: flags, environment, INI file, defaults and --help.
 *
 * Every source goes through one setter, s_set, which parses the text by the option's kind,
 * checks bounds and choices, and stores the value only when the source ranks at least as high as
 * the one that set it before. The sources are applied lowest first (defaults, INI, environment,
 * flags), so later and higher sources win and a repeated flag keeps its last value. Error messages
 * name the place the bad text came from: "--slots", "SELROLL_SLOTS" or "config FILE:12".
 */
#include "common/cfg.h"
#include "common/afile.h"
#include "common/curve.h"
#include "common/sr.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define CFG_INI_MAX (1 << 20) /* an INI file larger than this is refused */

static void s_err(cfg_t *cfg, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Options every command gets after its own: the CURVE keys (docs/security.md). Their values are
 * applied by cfg_parse_command, which makes them the default of every socket of the process. */
static struct {
    char *curve_keys, *curve_authorized;
} s_sec;
static cfg_option_t s_shared[] = {
    {.name = "curve-keys", .kind = CFG_STRING, .dst = &s_sec.curve_keys, .metavar = "DIR",
     .help = "CURVE-encrypt every socket with the keys in DIR (selroll keygen); unset = "
             "unencrypted, bound to loopback by default"},
    {.name = "curve-authorized", .kind = CFG_STRING, .dst = &s_sec.curve_authorized,
     .metavar = "DIR", .help = "client public keys (*.pub) the servers accept (default "
                               "<curve-keys>/authorized)"},
    {0},
};

/* s_shared_applies tells whether cfg's command gets the shared options (keygen makes keys, it
 * does not use them). */
static bool s_shared_applies(const cfg_t *cfg)
{
    return !cfg->command || strcmp(cfg->command, "keygen") != 0;
}

/* s_first and s_next walk the command's options, then the shared ones. */
static cfg_option_t *s_first(const cfg_t *cfg)
{
    if (cfg->options && cfg->options->name)
        return cfg->options;
    return s_shared_applies(cfg) ? s_shared : NULL;
}

static cfg_option_t *s_next(const cfg_t *cfg, cfg_option_t *o)
{
    o++;
    if (o->name)
        return o;
    if (o >= s_shared && o < s_shared + SR_ARRAY_LEN(s_shared))
        return NULL;
    return s_shared_applies(cfg) ? s_shared : NULL;
}

static void s_err(cfg_t *cfg, const char *fmt, ...)
{
    int n = snprintf(cfg->err, sizeof cfg->err, "selroll %s: ", cfg->command ? cfg->command : "");
    if (n < 0 || (size_t)n >= sizeof cfg->err)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cfg->err + n, sizeof cfg->err - (size_t)n, fmt, ap);
    va_end(ap);
}

int cfg_env_name(const char *name, char *buf, size_t cap)
{
    static const char prefix[] = "SELROLL_";
    if (!name || !buf || strlen(prefix) + strlen(name) + 1 > cap)
        return SR_ETOOBIG;
    size_t n = 0;
    for (const char *p = prefix; *p; p++)
        buf[n++] = *p;
    for (const char *p = name; *p; p++)
        buf[n++] = *p == '-' ? '_' : (char)toupper((unsigned char)*p);
    buf[n] = '\0';
    return SR_OK;
}

int cfg_parse_bool(const char *s, bool *out)
{
    static const char *yes[] = {"1", "true", "yes", "on"};
    static const char *no[] = {"0", "false", "no", "off"};
    if (!s || !out)
        return SR_EINVAL;
    for (size_t i = 0; i < SR_ARRAY_LEN(yes); i++) {
        if (!strcasecmp(s, yes[i])) {
            *out = true;
            return SR_OK;
        }
        if (!strcasecmp(s, no[i])) {
            *out = false;
            return SR_OK;
        }
    }
    return SR_EINVAL;
}

/* s_same_name compares an option name with a key where '_' in the key stands for '-'. */
static bool s_same_name(const char *name, const char *key, size_t keylen)
{
    size_t i = 0;
    for (; i < keylen && name[i]; i++) {
        char k = key[i] == '_' ? '-' : key[i];
        if (k != name[i])
            return false;
    }
    return i == keylen && name[i] == '\0';
}

static cfg_option_t *s_find(const cfg_t *cfg, const char *key, size_t keylen)
{
    for (cfg_option_t *o = s_first(cfg); o; o = s_next(cfg, o)) {
        if (s_same_name(o->name, key, keylen))
            return o;
    }
    return NULL;
}

/* s_enum_index returns the index of word in the '|'-separated choices, or -1. */
static int s_enum_index(const char *choices, const char *word)
{
    size_t wl = strlen(word);
    int idx = 0;
    for (const char *p = choices; p && *p; idx++) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == wl && !strncasecmp(p, word, len) && wl > 0)
            return idx;
        if (!bar)
            break;
        p = bar + 1;
    }
    return -1;
}

/* s_choices_list writes "a, b, c" for choices "a|b|c". */
static void s_choices_list(const char *choices, char *buf, size_t cap)
{
    size_t n = 0;
    for (const char *p = choices ? choices : ""; *p && n + 3 < cap; p++) {
        if (*p == '|') {
            buf[n++] = ',';
            buf[n++] = ' ';
        } else {
            buf[n++] = *p;
        }
    }
    buf[n] = '\0';
}

static bool s_has_bounds(const cfg_option_t *o)
{
    return o->min != 0 || o->max != 0;
}

static int s_check_bounds(cfg_t *cfg, const cfg_option_t *o, const char *where, double v)
{
    if (!s_has_bounds(o))
        return SR_OK;
    if (v < o->min) {
        s_err(cfg, "%s: %.15g is below the minimum %.15g", where, v, o->min);
        return SR_EINVAL;
    }
    if (o->max >= o->min && v > o->max) {
        s_err(cfg, "%s: %.15g is above the maximum %.15g", where, v, o->max);
        return SR_EINVAL;
    }
    return SR_OK;
}

/* s_set parses text for option o and stores it when src ranks at least as high as the value's
 * current source. `where` names the place in error messages. */
static int s_set(cfg_t *cfg, cfg_option_t *o, const char *text, int src, const char *where)
{
    if (src < o->source_)
        return SR_OK;
    if (!text)
        text = "";
    switch (o->kind) {
    case CFG_STRING: {
        char **dst = o->dst;
        free(*dst);
        *dst = sr_xstrdup(text);
        break;
    }
    case CFG_INT:
    case CFG_I64: {
        char *end = NULL;
        errno = 0;
        long long v = strtoll(text, &end, 10);
        if (end == text || *end != '\0' || isspace((unsigned char)*text)) {
            s_err(cfg, "%s: '%s' is not an integer", where, text);
            return SR_EINVAL;
        }
        if (errno == ERANGE || (o->kind == CFG_INT && (v < INT_MIN || v > INT_MAX))) {
            s_err(cfg, "%s: '%s' is out of range", where, text);
            return SR_EINVAL;
        }
        if (s_check_bounds(cfg, o, where, (double)v) < 0)
            return SR_EINVAL;
        if (o->kind == CFG_INT)
            *(int *)o->dst = (int)v;
        else
            *(int64_t *)o->dst = (int64_t)v;
        break;
    }
    case CFG_DOUBLE: {
        char *end = NULL;
        errno = 0;
        double v = strtod(text, &end);
        if (end == text || *end != '\0' || isspace((unsigned char)*text) || !isfinite(v) ||
            errno == ERANGE) {
            s_err(cfg, "%s: '%s' is not a number", where, text);
            return SR_EINVAL;
        }
        if (s_check_bounds(cfg, o, where, v) < 0)
            return SR_EINVAL;
        *(double *)o->dst = v;
        break;
    }
    case CFG_BOOL: {
        bool v;
        if (cfg_parse_bool(text, &v) < 0) {
            s_err(cfg, "%s: '%s' is not a boolean (use true/false, yes/no, on/off or 1/0)", where,
                  text);
            return SR_EINVAL;
        }
        *(bool *)o->dst = v;
        break;
    }
    case CFG_ENUM: {
        int idx = s_enum_index(o->choices, text);
        if (idx < 0) {
            char list[256];
            s_choices_list(o->choices, list, sizeof list);
            s_err(cfg, "%s: '%s' is not one of %s", where, text, list);
            return SR_EINVAL;
        }
        *(int *)o->dst = idx;
        break;
    }
    default:
        s_err(cfg, "%s: option has no valid kind", where);
        return SR_EINVAL;
    }
    o->source_ = src;
    return SR_OK;
}

/* s_reset gives every destination its zero value so cfg_free can run whatever happens next. */
static void s_reset(cfg_t *cfg)
{
    for (cfg_option_t *o = s_first(cfg); o; o = s_next(cfg, o)) {
        o->source_ = CFG_SRC_NONE;
        switch (o->kind) {
        case CFG_STRING:
            if (o >= s_shared && o < s_shared + SR_ARRAY_LEN(s_shared))
                free(*(char **)o->dst); /* left by a parse that was not freed */
            *(char **)o->dst = NULL;
            break;
        case CFG_INT: *(int *)o->dst = 0; break;
        case CFG_I64: *(int64_t *)o->dst = 0; break;
        case CFG_DOUBLE: *(double *)o->dst = 0.0; break;
        case CFG_BOOL: *(bool *)o->dst = false; break;
        case CFG_ENUM: *(int *)o->dst = 0; break;
        }
    }
}

static int s_apply_defaults(cfg_t *cfg)
{
    for (cfg_option_t *o = s_first(cfg); o; o = s_next(cfg, o)) {
        if (!o->def)
            continue;
        char where[128];
        snprintf(where, sizeof where, "default of --%s", o->name);
        if (s_set(cfg, o, o->def, CFG_SRC_DEFAULT, where) < 0)
            return SR_EINVAL;
    }
    return SR_OK;
}

/* s_trim returns s without leading and trailing whitespace (modifies s in place). */
static char *s_trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    return s;
}

/* s_ini_value extracts the value: a "quoted string" is taken as it is; otherwise an inline
 * comment starting with whitespace then '#' or ';' is cut. Returns NULL for a bad quote. */
static char *s_ini_value(char *v)
{
    v = s_trim(v);
    if (*v == '"') {
        char *close = strchr(v + 1, '"');
        if (!close)
            return NULL;
        *close = '\0';
        char *rest = s_trim(close + 1);
        if (*rest && *rest != '#' && *rest != ';')
            return NULL;
        return v + 1;
    }
    for (char *p = v; *p; p++) {
        if ((*p == '#' || *p == ';') && p > v && isspace((unsigned char)p[-1])) {
            *p = '\0';
            break;
        }
    }
    return s_trim(v);
}

static int s_read_file(cfg_t *cfg, const char *path, char **out)
{
    size_t n = 0;
    char why[256];
    int rc = afile_read(path, CFG_INI_MAX, out, &n, why, sizeof why);
    if (rc != SR_OK) {
        s_err(cfg, "config %s: %s", path, why);
        return rc == SR_ETOOBIG ? SR_EINVAL : SR_EIO;
    }
    if (memchr(*out, '\0', n)) {
        s_err(cfg, "config %s: not a text file", path);
        free(*out);
        *out = NULL;
        return SR_EINVAL;
    }
    return SR_OK;
}

static int s_apply_ini(cfg_t *cfg, const char *path)
{
    char *text = NULL;
    int rc = s_read_file(cfg, path, &text);
    if (rc < 0)
        return rc;
    int section = -1; /* -1 none yet, 0 another command's, CFG_SRC_COMMON or CFG_SRC_SECTION */
    int lineno = 0;
    char *line = text;
    while (line) {
        char *next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        lineno++;
        char *s = s_trim(line);
        line = next;
        if (*s == '\0' || *s == '#' || *s == ';')
            continue;
        char where[PATH_MAX + 64];
        snprintf(where, sizeof where, "config %s:%d", path, lineno);
        if (*s == '[') {
            char *close = strchr(s, ']');
            char *rest = close ? s_trim(close + 1) : NULL;
            if (!close || (*rest && *rest != '#' && *rest != ';')) {
                s_err(cfg, "%s: expected [section]", where);
                rc = SR_EINVAL;
                goto cleanup;
            }
            *close = '\0';
            char *name = s_trim(s + 1);
            if (!strcmp(name, "common"))
                section = CFG_SRC_COMMON;
            else if (cfg->command && !strcmp(name, cfg->command))
                section = CFG_SRC_SECTION;
            else
                section = 0;
            continue;
        }
        char *eq = strchr(s, '=');
        if (!eq) {
            s_err(cfg, "%s: expected key = value", where);
            rc = SR_EINVAL;
            goto cleanup;
        }
        *eq = '\0';
        char *key = s_trim(s);
        char *value = s_ini_value(eq + 1);
        if (!*key) {
            s_err(cfg, "%s: expected key = value", where);
            rc = SR_EINVAL;
            goto cleanup;
        }
        if (!value) {
            s_err(cfg, "%s: unterminated or misplaced quote", where);
            rc = SR_EINVAL;
            goto cleanup;
        }
        if (section < 0) {
            s_err(cfg, "%s: '%s' before any [section]", where, key);
            rc = SR_EINVAL;
            goto cleanup;
        }
        if (section == 0)
            continue; /* another command's section */
        cfg_option_t *o = s_find(cfg, key, strlen(key));
        if (!o) {
            if (section == CFG_SRC_COMMON)
                continue; /* a common key for other commands */
            s_err(cfg, "%s: unknown option '%s' in [%s]", where, key, cfg->command);
            rc = SR_EINVAL;
            goto cleanup;
        }
        char at[PATH_MAX + 160];
        snprintf(at, sizeof at, "%s: %s", where, o->name);
        if ((rc = s_set(cfg, o, value, section, at)) < 0)
            goto cleanup;
    }
cleanup:
    free(text);
    return rc;
}

static int s_apply_env(cfg_t *cfg)
{
    for (cfg_option_t *o = s_first(cfg); o; o = s_next(cfg, o)) {
        if (o->no_env)
            continue;
        char var[128];
        if (cfg_env_name(o->name, var, sizeof var) < 0)
            continue;
        const char *v = getenv(var);
        if (!v || !*v)
            continue; /* an empty variable counts as unset */
        if (s_set(cfg, o, v, CFG_SRC_ENV, var) < 0)
            return SR_EINVAL;
    }
    return SR_OK;
}

static bool s_is_help(const char *a)
{
    return !strcmp(a, "-h") || !strcmp(a, "--help");
}

/* s_find_config returns the value of the last --config flag (before "--"), or NULL. Sets
 * *missing when --config is the last argument without a value. */
static const char *s_find_config(int argc, char **argv, bool *missing)
{
    const char *path = NULL;
    *missing = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--"))
            break;
        if (!strcmp(argv[i], "--config")) {
            if (i + 1 >= argc) {
                *missing = true;
                return NULL;
            }
            path = argv[++i];
        } else if (!strncmp(argv[i], "--config=", 9)) {
            path = argv[i] + 9;
        }
    }
    return path;
}

static int s_apply_flags(cfg_t *cfg, int argc, char **argv)
{
    bool only_pos = false;
    for (int i = 1; i < argc; i++) {
        char *a = argv[i];
        if (only_pos || a[0] != '-' || a[1] == '\0') {
            cfg->pos[cfg->npos++] = a;
            continue;
        }
        if (!strcmp(a, "--")) {
            only_pos = true;
            continue;
        }
        if (a[1] != '-') {
            s_err(cfg, "unknown option %s", a);
            return SR_EINVAL;
        }
        const char *name = a + 2;
        const char *eq = strchr(name, '=');
        size_t nlen = eq ? (size_t)(eq - name) : strlen(name);
        if (nlen == 6 && !strncmp(name, "config", 6)) {
            if (!eq)
                i++; /* its value was read before */
            continue;
        }
        char flag[160];
        snprintf(flag, sizeof flag, "--%.*s", (int)SR_MIN(nlen, 150), name);
        cfg_option_t *o = s_find(cfg, name, nlen);
        if (o && o->kind == CFG_BOOL && !eq) {
            if (s_set(cfg, o, "true", CFG_SRC_FLAG, flag) < 0)
                return SR_EINVAL;
            continue;
        }
        if (!o && nlen > 3 && !strncmp(name, "no-", 3)) {
            cfg_option_t *neg = s_find(cfg, name + 3, nlen - 3);
            if (neg && neg->kind == CFG_BOOL) {
                if (eq) {
                    s_err(cfg, "%s takes no value", flag);
                    return SR_EINVAL;
                }
                if (s_set(cfg, neg, "false", CFG_SRC_FLAG, flag) < 0)
                    return SR_EINVAL;
                continue;
            }
        }
        if (!o) {
            s_err(cfg, "unknown option %s", flag);
            return SR_EINVAL;
        }
        const char *value = NULL;
        if (eq) {
            value = eq + 1;
        } else if (i + 1 < argc) {
            value = argv[++i];
        } else {
            s_err(cfg, "%s: missing value", flag);
            return SR_EINVAL;
        }
        if (s_set(cfg, o, value, CFG_SRC_FLAG, flag) < 0)
            return SR_EINVAL;
    }
    return SR_OK;
}

int cfg_parse(cfg_t *cfg, int argc, char **argv)
{
    int rc = SR_OK;
    if (!cfg)
        return SR_EINVAL;
    cfg_free(cfg);
    cfg->err[0] = '\0';
    s_reset(cfg);
    cfg->parsed_ = true;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--"))
            break;
        if (s_is_help(argv[i]))
            return CFG_HELP;
    }
    cfg->pos = sr_xcalloc((size_t)(argc > 0 ? argc : 1), sizeof *cfg->pos);
    if ((rc = s_apply_defaults(cfg)) < 0)
        goto cleanup;
    bool missing = false;
    const char *path = s_find_config(argc, argv, &missing);
    if (missing) {
        s_err(cfg, "--config: missing value");
        rc = SR_EINVAL;
        goto cleanup;
    }
    if (!path) {
        const char *env = getenv("SELROLL_CONFIG");
        path = env && *env ? env : NULL;
    }
    if (path) {
        cfg->config_path = sr_xstrdup(path);
        if ((rc = s_apply_ini(cfg, path)) < 0)
            goto cleanup;
    }
    if ((rc = s_apply_env(cfg)) < 0)
        goto cleanup;
    if ((rc = s_apply_flags(cfg, argc, argv)) < 0)
        goto cleanup;
    for (cfg_option_t *o = s_first(cfg); o; o = s_next(cfg, o)) {
        if (o->required && o->source_ <= CFG_SRC_DEFAULT) {
            char var[128] = "";
            if (!o->no_env)
                cfg_env_name(o->name, var, sizeof var);
            s_err(cfg, "--%s is required%s%s%s", o->name, var[0] ? " (or set " : "", var,
                  var[0] ? ")" : "");
            rc = SR_EINVAL;
            goto cleanup;
        }
    }
    if (cfg->npos > 0 && !cfg->positional) {
        s_err(cfg, "unexpected argument '%s'", cfg->pos[0]);
        rc = SR_EINVAL;
        goto cleanup;
    }
cleanup:
    return rc;
}

/* s_apply_curve loads the CURVE keys named by the shared options and makes them the process's
 * default (or clears the default when none are named). `run` only hands them to its children
 * through the environment. */
static int s_apply_curve(cfg_t *cfg)
{
    if (!s_shared_applies(cfg))
        return SR_OK;
    if (cfg->command && !strcmp(cfg->command, "run")) {
        /* The launcher opens no socket itself; its children inherit the keys. */
        if (s_sec.curve_keys && *s_sec.curve_keys)
            setenv("SELROLL_CURVE_KEYS", s_sec.curve_keys, 1);
        if (s_sec.curve_authorized && *s_sec.curve_authorized)
            setenv("SELROLL_CURVE_AUTHORIZED", s_sec.curve_authorized, 1);
        return SR_OK;
    }
    if (!s_sec.curve_keys || !*s_sec.curve_keys) {
        curve_set_default(NULL);
        return SR_OK;
    }
    char why[400];
    curve_t *c = curve_new(s_sec.curve_keys, cfg->command, s_sec.curve_authorized, why, sizeof why);
    if (!c) {
        s_err(cfg, "--curve-keys: %s", why);
        return SR_EINVAL;
    }
    curve_set_default(&c);
    return SR_OK;
}

int cfg_parse_command(cfg_t *cfg, int argc, char **argv)
{
    int rc = cfg_parse(cfg, argc, argv);
    if (rc == CFG_HELP) {
        cfg_help(cfg, stdout);
        cfg_free(cfg);
        return 0;
    }
    if (rc < 0 || s_apply_curve(cfg) < 0) {
        fprintf(stderr, "%s\n", cfg->err);
        cfg_free(cfg);
        return 2;
    }
    return CFG_GO_ON;
}

int cfg_source(const cfg_t *cfg, const char *name)
{
    if (!cfg || !name)
        return SR_ENOTFOUND;
    cfg_option_t *o = s_find(cfg, name, strlen(name));
    return o ? o->source_ : SR_ENOTFOUND;
}

static const char *s_metavar(const cfg_option_t *o, char *buf, size_t cap)
{
    if (o->metavar)
        return o->metavar;
    switch (o->kind) {
    case CFG_STRING: return "STR";
    case CFG_INT:
    case CFG_I64: return "N";
    case CFG_DOUBLE: return "X";
    case CFG_ENUM: snprintf(buf, cap, "%s", o->choices ? o->choices : "WORD"); return buf;
    default: return "";
    }
}

void cfg_help(const cfg_t *cfg, FILE *out)
{
    const char *cmd = cfg->command ? cfg->command : "";
    fprintf(out, "usage: selroll %s [options]%s%s\n", cmd, cfg->positional ? " " : "",
            cfg->positional ? cfg->positional : "");
    if (cfg->summary)
        fprintf(out, "%s\n", cfg->summary);
    fprintf(out, "\noptions:\n");
    for (const cfg_option_t *o = s_first(cfg); o; o = s_next(cfg, (cfg_option_t *)o)) {
        char left[300], mv[256], notes[512], var[128];
        if (o->kind == CFG_BOOL)
            snprintf(left, sizeof left, "--[no-]%s", o->name);
        else
            snprintf(left, sizeof left, "--%s %s", o->name, s_metavar(o, mv, sizeof mv));
        size_t n = 0;
        notes[0] = '\0';
        if (o->required) {
            n += (size_t)snprintf(notes + n, sizeof notes - n, "required");
        } else if (o->kind == CFG_ENUM && !o->def && o->choices) {
            const char *bar = strchr(o->choices, '|');
            int len = bar ? (int)(bar - o->choices) : (int)strlen(o->choices);
            n += (size_t)snprintf(notes + n, sizeof notes - n, "default %.*s", len, o->choices);
        } else if (o->def) {
            n += (size_t)snprintf(notes + n, sizeof notes - n, "default %s", o->def);
        } else if (o->kind == CFG_BOOL) {
            n += (size_t)snprintf(notes + n, sizeof notes - n, "default false");
        }
        if (s_has_bounds(o) && (o->kind == CFG_INT || o->kind == CFG_I64 || o->kind == CFG_DOUBLE) &&
            n < sizeof notes) {
            if (o->max >= o->min)
                n += (size_t)snprintf(notes + n, sizeof notes - n, "%s%.15g..%.15g", n ? "; " : "",
                                      o->min, o->max);
            else
                n += (size_t)snprintf(notes + n, sizeof notes - n, "%s>= %.15g", n ? "; " : "",
                                      o->min);
        }
        if (!o->no_env && cfg_env_name(o->name, var, sizeof var) == 0 && n < sizeof notes)
            snprintf(notes + n, sizeof notes - n, "%senv %s", n ? "; " : "", var);
        if (strlen(left) <= 26)
            fprintf(out, "  %-26s %s (%s)\n", left, o->help ? o->help : "", notes);
        else
            fprintf(out, "  %s\n  %-26s %s (%s)\n", left, "", o->help ? o->help : "", notes);
    }
    fprintf(out, "  %-26s %s (env SELROLL_CONFIG)\n", "--config FILE",
            "read options from an INI file, sections [common] and [command]");
    fprintf(out, "  %-26s %s\n", "-h, --help", "print this help and exit");
    fprintf(out, "\nPrecedence: flags > SELROLL_* environment > --config file > defaults.\n");
}

void cfg_free(cfg_t *cfg)
{
    if (!cfg)
        return;
    if (cfg->parsed_) {
        for (cfg_option_t *o = s_first(cfg); o; o = s_next(cfg, o)) {
            if (o->kind == CFG_STRING && o->dst) {
                free(*(char **)o->dst);
                *(char **)o->dst = NULL;
            }
        }
        cfg->parsed_ = false;
    }
    free(cfg->pos);
    cfg->pos = NULL;
    cfg->npos = 0;
    free(cfg->config_path);
    cfg->config_path = NULL;
}
