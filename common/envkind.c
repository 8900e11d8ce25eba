/*
 * envkind.c — env-worker kind names and KIND=ENDPOINT lists (see envkind.h).
 */
#include "common/envkind.h"

#include "common/sr.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool s_kind_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == '-';
}

static bool s_kind_ok(const char *p, size_t n)
{
    if (n == 0 || n > ENVKIND_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!s_kind_char(p[i]))
            return false;
    return true;
}

bool envkind_valid(const char *kind)
{
    return kind && s_kind_ok(kind, strlen(kind));
}

int envkind_split(const char *item, char *kind, size_t kindlen, const char **endpoint, char *err,
                  size_t errlen)
{
    kind[0] = '\0';
    const char *eq = strchr(item, '=');
    const char *scheme = strstr(item, "://");
    const char *ep = item;
    if (eq && (!scheme || eq < scheme)) {
        size_t n = (size_t)(eq - item);
        if (!s_kind_ok(item, n) || n >= kindlen) {
            if (err)
                snprintf(err, errlen, "'%s': the kind before '=' must be 1..%d bytes of %s", item,
                         ENVKIND_MAX, ENVKIND_CHARS);
            return SR_EINVAL;
        }
        memcpy(kind, item, n);
        kind[n] = '\0';
        ep = eq + 1;
    }
    if (!*ep) {
        if (err)
            snprintf(err, errlen, "'%s': no endpoint", item);
        return SR_EINVAL;
    }
    *endpoint = ep;
    return SR_OK;
}

int envkind_list_parse(const char *list, envkind_list_t *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    for (const char *p = list; p && *p;) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        while (n && *p == ' ') {
            p++;
            n--;
        }
        while (n && p[n - 1] == ' ')
            n--;
        if (n) {
            char *item = sr_xstrndup(p, n), kind[ENVKIND_MAX + 1];
            const char *ep;
            int rc = envkind_split(item, kind, sizeof kind, &ep, err, errlen);
            if (rc != SR_OK) {
                free(item);
                envkind_list_free(out);
                return rc;
            }
            out->endpoints = sr_xrealloc(out->endpoints, (out->n + 1) * sizeof *out->endpoints);
            out->kinds = sr_xrealloc(out->kinds, (out->n + 1) * sizeof *out->kinds);
            out->endpoints[out->n] = sr_xstrdup(ep);
            out->kinds[out->n] = sr_xstrdup(kind);
            out->n++;
            free(item);
        }
        if (!e)
            break;
        p = e + 1;
    }
    return SR_OK;
}

bool envkind_list_any_kind(const envkind_list_t *l)
{
    for (size_t i = 0; l && i < l->n; i++)
        if (l->kinds[i][0])
            return true;
    return false;
}

void envkind_list_free(envkind_list_t *l)
{
    if (!l)
        return;
    for (size_t i = 0; i < l->n; i++) {
        free(l->endpoints[i]);
        free(l->kinds[i]);
    }
    free(l->endpoints);
    free(l->kinds);
    memset(l, 0, sizeof *l);
}

const envkind_builtin_t *envkind_builtin(const char *kind)
{
    if (!kind || !*kind)
        return env_kinds[0];
    for (size_t i = 0; env_kinds[i]; i++)
        if (!strcmp(env_kinds[i]->name, kind))
            return env_kinds[i];
    return NULL;
}
