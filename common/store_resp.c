/*
 * store_resp.c — the store's pieces that need no connection (and no hiredis): a command's RESP
 * bytes formatted from binary-safe arguments (store_format_argv, for store.c), and the checks of
 * numbers read from replies and of run names and ids (store.h).
 */
#include "common/store.h"
#include "common/store_int.h"
#include "common/sr.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* s_resp_len writes "<c>N\r\n" at p (c '*' or '$') and returns the bytes written (at most 24). */
static size_t s_resp_len(char *p, char c, size_t n)
{
    char dig[20];
    size_t k = 0, at = 0;
    do {
        dig[k++] = (char)('0' + n % 10);
        n /= 10;
    } while (n);
    p[at++] = c;
    while (k)
        p[at++] = dig[--k];
    p[at++] = '\r';
    p[at++] = '\n';
    return at;
}

/* store_format_argv formats argc binary-safe arguments (lens NULL: C strings) as one RESP command
 * into a new buffer (*cmd, freed by the caller) and returns its length, or -1 when out of memory.
 * It writes what hiredis's redisFormatCommandArgv writes, without a printf call per argument,
 * which took the most of a result's store round trip in the coordinator's profile. */
size_t store_resp_len(char *p, char c, size_t n)
{
    return s_resp_len(p, c, n);
}

long store_format_argv(char **cmd, int argc, const char **argv, const size_t *lens)
{
    size_t total = 24;
    for (int i = 0; i < argc; i++)
        total += 24 + 2 + (lens ? lens[i] : strlen(argv[i]));
    char *b = malloc(total);
    *cmd = b;
    if (!b)
        return -1;
    size_t at = s_resp_len(b, '*', (size_t)argc);
    for (int i = 0; i < argc; i++) {
        size_t l = lens ? lens[i] : strlen(argv[i]);
        at += s_resp_len(b + at, '$', l);
        if (l)
            memcpy(b + at, argv[i], l);
        at += l;
        b[at++] = '\r';
        b[at++] = '\n';
    }
    return (long)at;
}

int store_parse_i64(const char *str, int64_t *out)
{
    if (!str || !*str)
        return SR_EPROTO;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(str, &end, 10);
    if (errno || *end)
        return SR_EPROTO;
    *out = v;
    return SR_OK;
}

int store_parse_double(const char *str, double *out)
{
    if (!str || !*str)
        return SR_EPROTO;
    char *end = NULL;
    errno = 0;
    double v = strtod(str, &end);
    if (errno || *end)
        return SR_EPROTO;
    *out = v;
    return SR_OK;
}

bool store_name_ok(const char *name, size_t max)
{
    if (!name || !*name || strlen(name) >= max)
        return false;
    for (const char *p = name; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '_' && *p != '.' && *p != '-')
            return false;
    return true;
}

bool store_run_name_ok(const char *run)
{
    return store_name_ok(run, STORE_RUN_MAX);
}

bool store_id_ok(const char *id, size_t max)
{
    if (!id || !*id || strlen(id) >= max)
        return false;
    for (const char *p = id; *p; p++)
        if ((unsigned char)*p <= ' ' || *p == 0x7f)
            return false;
    return true;
}
