/*
 * store_url.c — Redis URLs for common/store (store_parse_url, store.h):
 * redis://[[user]:password@]host[:port][/db] and unix:///path[?db=N], with percent-decoded user
 * and password. A pure function over a string: no connection, no hiredis.
 */
#include "common/store.h"
#include "common/sr.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

/* ---- URL parsing -------------------------------------------------------------------------- */

static int s_hexval(int ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

/* s_decode copies src[0..n) into dst (cap bytes) resolving %XX escapes. */
static int s_decode(char *dst, size_t cap, const char *src, size_t n)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int ch = (unsigned char)src[i];
        if (ch == '%') {
            if (i + 2 >= n)
                return SR_EINVAL;
            int hi = s_hexval((unsigned char)src[i + 1]), lo = s_hexval((unsigned char)src[i + 2]);
            if (hi < 0 || lo < 0)
                return SR_EINVAL;
            ch = hi * 16 + lo;
            i += 2;
        }
        if (ch == 0 || o + 1 >= cap)
            return SR_EINVAL;
        dst[o++] = (char)ch;
    }
    dst[o] = '\0';
    return SR_OK;
}

static int s_parse_uint(const char *p, size_t n, long max, long *out)
{
    if (n == 0 || n > 10)
        return SR_EINVAL;
    long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isdigit((unsigned char)p[i]))
            return SR_EINVAL;
        v = v * 10 + (p[i] - '0');
    }
    if (v > max)
        return SR_EINVAL;
    *out = v;
    return SR_OK;
}

int store_parse_url(const char *url, store_url_t *out, char *err, size_t errlen)
{
    char why[160] = "";
    int rc = SR_EINVAL;
    long v = 0;
    if (!out) {
        snprintf(why, sizeof why, "no output");
        goto cleanup;
    }
    memset(out, 0, sizeof *out);
    out->port = 6379;
    if (!url || !*url) {
        snprintf(why, sizeof why, "empty URL");
        goto cleanup;
    }
    if (strncmp(url, "unix://", 7) == 0) {
        const char *path = url + 7;
        const char *q = strchr(path, '?');
        size_t plen = q ? (size_t)(q - path) : strlen(path);
        out->is_unix = true;
        if (plen == 0 || path[0] != '/') {
            snprintf(why, sizeof why, "unix URL needs an absolute path (unix:///path)");
            goto cleanup;
        }
        if (plen >= sizeof out->path) {
            snprintf(why, sizeof why, "socket path too long");
            goto cleanup;
        }
        memcpy(out->path, path, plen);
        out->path[plen] = '\0';
        if (q) {
            if (strncmp(q, "?db=", 4) != 0 || s_parse_uint(q + 4, strlen(q + 4), 1L << 30, &v)) {
                snprintf(why, sizeof why, "bad query '%s' (only ?db=N is understood)", q);
                goto cleanup;
            }
            out->db = (int)v;
        }
        rc = SR_OK;
        goto cleanup;
    }
    if (strncmp(url, "rediss://", 9) == 0) {
        snprintf(why, sizeof why, "TLS (rediss://) is not supported");
        goto cleanup;
    }
    if (strncmp(url, "redis://", 8) != 0) {
        snprintf(why, sizeof why, "unknown scheme (expected redis:// or unix://)");
        goto cleanup;
    }
    const char *p = url + 8;
    const char *slash = strchr(p, '/');
    const char *auth_end = slash ? slash : p + strlen(p);
    const char *at = NULL;
    for (const char *x = p; x < auth_end; x++)
        if (*x == '@')
            at = x;
    if (at) {
        const char *colon = memchr(p, ':', (size_t)(at - p));
        if (!colon) {
            snprintf(why, sizeof why, "user name without password (use :password@)");
            goto cleanup;
        }
        if (s_decode(out->user, sizeof out->user, p, (size_t)(colon - p)) ||
            s_decode(out->password, sizeof out->password, colon + 1, (size_t)(at - colon - 1))) {
            snprintf(why, sizeof why, "bad user or password encoding");
            goto cleanup;
        }
        if (!out->password[0]) {
            snprintf(why, sizeof why, "empty password");
            goto cleanup;
        }
        p = at + 1;
    }
    const char *host = p, *host_end, *port = NULL;
    if (*p == '[') {
        host = p + 1;
        host_end = memchr(host, ']', (size_t)(auth_end - host));
        if (!host_end) {
            snprintf(why, sizeof why, "unclosed '[' in host");
            goto cleanup;
        }
        if (host_end + 1 < auth_end) {
            if (host_end[1] != ':') {
                snprintf(why, sizeof why, "junk after ']'");
                goto cleanup;
            }
            port = host_end + 2;
        }
    } else {
        host_end = memchr(host, ':', (size_t)(auth_end - host));
        if (host_end)
            port = host_end + 1;
        else
            host_end = auth_end;
    }
    if (host_end == host) {
        snprintf(why, sizeof why, "empty host");
        goto cleanup;
    }
    if ((size_t)(host_end - host) >= sizeof out->host) {
        snprintf(why, sizeof why, "host too long");
        goto cleanup;
    }
    memcpy(out->host, host, (size_t)(host_end - host));
    out->host[host_end - host] = '\0';
    if (port) {
        if (s_parse_uint(port, (size_t)(auth_end - port), 65535, &v) || v == 0) {
            snprintf(why, sizeof why, "bad port '%.*s'", (int)SR_MIN(auth_end - port, 32), port);
            goto cleanup;
        }
        out->port = (int)v;
    }
    if (slash && slash[1]) {
        if (s_parse_uint(slash + 1, strlen(slash + 1), 1L << 30, &v)) {
            snprintf(why, sizeof why, "bad db number '%.32s'", slash + 1);
            goto cleanup;
        }
        out->db = (int)v;
    }
    rc = SR_OK;

cleanup:
    if (rc != SR_OK && err && errlen)
        snprintf(err, errlen, "bad redis URL '%.200s': %s", url ? url : "(null)", why);
    return rc;
}
