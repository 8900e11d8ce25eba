/*
 * curve.c — CURVE keys, key files and the ZAP handler that lets only authorised clients in.
 *
 * Every loaded curve_t is listed in a registry under a ZAP domain of its own ("selroll-<n>"), so
 * one ZAP thread per context can serve several key sets (a unit test runs a server and clients
 * with different keys in one process). The ZAP thread looks the domain up under the registry's
 * mutex for every request; a curve_t that is destroyed leaves the registry first, and requests for
 * an unknown domain are refused.
 *
 * A ZAP thread ends when its context terminates (zmq_recv fails with ETERM). It leaves the list of
 * contexts before it closes its socket, and zmq_ctx_term waits for that close, so a new context
 * that happens to get the same address never finds a stale entry.
 */
#include "common/curve.h"
#include "common/log.h"
#include "common/sr.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#define CURVE_DOMAIN_LEN 32

struct curve {
    char pub[CURVE_KEY_Z85_LEN + 1];
    char sec[CURVE_KEY_Z85_LEN + 1];
    char server_pub[CURVE_KEY_Z85_LEN + 1];
    char server_sec[CURVE_KEY_Z85_LEN + 1]; /* "" when this process has no server secret */
    char domain[CURVE_DOMAIN_LEN];
    uint8_t (*authorized)[32];
    size_t nauthorized;
    int has_authorized_dir;
    char adir[PATH_MAX]; /* the authorised-keys folder ("" when none) */
    _Atomic uint64_t refused, accepted;
    curve_t *next; /* registry link */
};

typedef struct zap {
    void *ctx;
    void *sock;
    pthread_t thread;
    struct zap *next;
} zap_t;

static pthread_mutex_t s_lock = PTHREAD_MUTEX_INITIALIZER;
static curve_t *s_registry;
static zap_t *s_zaps;
static unsigned s_next_domain;
static curve_t *s_default;


/* s_path joins dir, name and ext into buf; returns 0, or SR_ETOOBIG when it does not fit. */
static int s_path(char *buf, size_t len, const char *dir, const char *name, const char *ext)
{
    int n = snprintf(buf, len, "%s/%s%s", dir, name, ext);
    return n < 0 || (size_t)n >= len ? SR_ETOOBIG : SR_OK;
}

int curve_keypair(char *public_z85, char *secret_z85)
{
    if (!public_z85 || !secret_z85)
        return SR_EINVAL;
    if (!zmq_has("curve") || zmq_curve_keypair(public_z85, secret_z85) != 0)
        return SR_EUNSUPPORTED;
    return SR_OK;
}

/* s_valid_z85 tells whether k is 40 characters that decode to a 32-byte key. */
static int s_valid_z85(const char *k)
{
    uint8_t bin[32];
    return strlen(k) == CURVE_KEY_Z85_LEN && zmq_z85_decode(bin, k) != NULL;
}

int curve_read_key(const char *path, char *out, char *err, size_t errlen)
{
    int rc = SR_EINVAL;
    char line[256];
    FILE *f = fopen(path, "r");
    if (!f) {
        sr_fmt(err, errlen, "key file %s: %s", path, strerror(errno));
        return SR_EIO;
    }
    while (fgets(line, sizeof line, f)) {
        size_t n = strcspn(line, "\r\n");
        line[n] = '\0';
        char *p = line;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == '#' || *p == '\0')
            continue;
        n = strlen(p);
        while (n && (p[n - 1] == ' ' || p[n - 1] == '\t'))
            p[--n] = '\0';
        if (!s_valid_z85(p)) {
            sr_fmt(err, errlen, "key file %s: not a 40-character Z85 key", path);
            goto cleanup;
        }
        memcpy(out, p, CURVE_KEY_Z85_LEN + 1);
        rc = SR_OK;
        goto cleanup;
    }
    sr_fmt(err, errlen, "key file %s: no key in it", path);
cleanup:
    fclose(f);
    return rc;
}

/* s_write_file writes text to path with mode (replacing a file that is there). */
static int s_write_file(const char *path, const char *text, mode_t mode, char *err, size_t errlen)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0) {
        sr_fmt(err, errlen, "write %s: %s", path, strerror(errno));
        return SR_EIO;
    }
    int rc = SR_OK;
    size_t len = strlen(text);
    if (fchmod(fd, mode) != 0 || write(fd, text, len) != (ssize_t)len) {
        sr_fmt(err, errlen, "write %s: %s", path, strerror(errno));
        rc = SR_EIO;
    }
    if (close(fd) != 0 && rc == SR_OK) {
        sr_fmt(err, errlen, "write %s: %s", path, strerror(errno));
        rc = SR_EIO;
    }
    return rc;
}

static int s_mkdir(const char *dir, char *err, size_t errlen)
{
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        sr_fmt(err, errlen, "mkdir %s: %s", dir, strerror(errno));
        return SR_EIO;
    }
    return SR_OK;
}

/* s_valid_name accepts names made of letters, digits, '-', '_' and '.', not starting with '.'. */
static int s_valid_name(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > 64 || name[0] == '.')
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.'))
            return 0;
    }
    return 1;
}

int curve_write_pair(const char *dir, const char *name, const char *authorized_dir, char *err,
                     size_t errlen)
{
    char pub[CURVE_KEY_Z85_LEN + 1], sec[CURVE_KEY_Z85_LEN + 1];
    char path[PATH_MAX], text[256];
    int rc;
    if (!dir || !name || !s_valid_name(name)) {
        sr_fmt(err, errlen, "key name '%s': use letters, digits, '-', '_' or '.'",
              name ? name : "");
        return SR_EINVAL;
    }
    if ((rc = curve_keypair(pub, sec)) != SR_OK) {
        sr_fmt(err, errlen, "this libzmq has no CURVE support");
        return rc;
    }
    if ((rc = s_mkdir(dir, err, errlen)) != SR_OK)
        return rc;
    snprintf(text, sizeof text, "# selroll CURVE public key: %s\n%s\n", name, pub);
    if (s_path(path, sizeof path, dir, name, ".pub") != SR_OK) {
        sr_fmt(err, errlen, "key path too long");
        return SR_ETOOBIG;
    }
    if ((rc = s_write_file(path, text, 0644, err, errlen)) != SR_OK)
        return rc;
    snprintf(text, sizeof text, "# selroll CURVE secret key: %s (keep it private)\n%s\n", name,
             sec);
    if (s_path(path, sizeof path, dir, name, ".key") != SR_OK) {
        sr_fmt(err, errlen, "key path too long");
        return SR_ETOOBIG;
    }
    if ((rc = s_write_file(path, text, 0600, err, errlen)) != SR_OK)
        return rc;
    if (authorized_dir) {
        if ((rc = s_mkdir(authorized_dir, err, errlen)) != SR_OK)
            return rc;
        snprintf(text, sizeof text, "# selroll CURVE public key: %s\n%s\n", name, pub);
        if (s_path(path, sizeof path, authorized_dir, name, ".pub") != SR_OK) {
        sr_fmt(err, errlen, "key path too long");
        return SR_ETOOBIG;
    }
        if ((rc = s_write_file(path, text, 0644, err, errlen)) != SR_OK)
            return rc;
    }
    return SR_OK;
}

int curve_write_cluster(const char *dir, const char *authorized_dir, char *err, size_t errlen)
{
    static const char *const roles[] = {"coordinator", "actor", "gate", "env-worker",
                                        "policy-server", "trainer"};
    char adir[PATH_MAX];
    int rc;
    if (!dir)
        return SR_EINVAL;
    if (s_path(adir, sizeof adir, authorized_dir ? authorized_dir : dir,
               authorized_dir ? "" : "authorized", "") != SR_OK) {
        sr_fmt(err, errlen, "key path too long");
        return SR_ETOOBIG;
    }
    if ((rc = curve_write_pair(dir, "server", NULL, err, errlen)) != SR_OK)
        return rc;
    for (size_t i = 0; i < SR_ARRAY_LEN(roles); i++) {
        if ((rc = curve_write_pair(dir, roles[i], adir, err, errlen)) != SR_OK)
            return rc;
    }
    return SR_OK;
}

static int s_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* s_load_authorized reads every *.pub file of dir into c->authorized. */
static int s_load_authorized(curve_t *c, const char *dir, char *err, size_t errlen)
{
    int rc = SR_OK;
    DIR *d = opendir(dir);
    if (!d) {
        sr_fmt(err, errlen, "authorised-keys folder %s: %s", dir, strerror(errno));
        return SR_EIO;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n < 5 || e->d_name[0] == '.' || strcmp(e->d_name + n - 4, ".pub") != 0)
            continue;
        if (c->nauthorized >= CURVE_MAX_AUTHORIZED) {
            sr_fmt(err, errlen, "authorised-keys folder %s: more than %d keys", dir,
                  CURVE_MAX_AUTHORIZED);
            rc = SR_ETOOBIG;
            goto cleanup;
        }
        char path[PATH_MAX], z85[CURVE_KEY_Z85_LEN + 1];
        if (s_path(path, sizeof path, dir, e->d_name, "") != SR_OK)
            continue;
        if ((rc = curve_read_key(path, z85, err, errlen)) != SR_OK)
            goto cleanup;
        c->authorized = sr_xrealloc(c->authorized, (c->nauthorized + 1) * sizeof *c->authorized);
        zmq_z85_decode(c->authorized[c->nauthorized++], z85);
    }
cleanup:
    closedir(d);
    return rc;
}

curve_t *curve_new(const char *keys_dir, const char *name, const char *authorized_dir, char *err,
                   size_t errlen)
{
    char path[PATH_MAX], adir[PATH_MAX];
    curve_t *c = NULL;
    if (!keys_dir || !*keys_dir) {
        sr_fmt(err, errlen, "curve: no keys folder");
        goto fail;
    }
    if (!zmq_has("curve")) {
        sr_fmt(err, errlen, "curve: this libzmq has no CURVE support");
        goto fail;
    }
    c = sr_xcalloc(1, sizeof *c);
    if (s_path(path, sizeof path, keys_dir, name && *name ? name : "client", ".key") != SR_OK ||
        !s_exists(path))
        (void)s_path(path, sizeof path, keys_dir, "client", ".key");
    if (!s_exists(path)) {
        sr_fmt(err, errlen, "no %s.key or client.key in %s (selroll keygen writes them)",
              name && *name ? name : "client", keys_dir);
        goto fail;
    }
    if (curve_read_key(path, c->sec, err, errlen) != SR_OK)
        goto fail;
    if (zmq_curve_public(c->pub, c->sec) != 0) {
        sr_fmt(err, errlen, "key file %s: cannot derive the public key", path);
        goto fail;
    }
    (void)s_path(path, sizeof path, keys_dir, "server", ".pub");
    if (curve_read_key(path, c->server_pub, err, errlen) != SR_OK)
        goto fail;
    (void)s_path(path, sizeof path, keys_dir, "server", ".key");
    if (s_exists(path) && curve_read_key(path, c->server_sec, err, errlen) != SR_OK)
        goto fail;
    if (authorized_dir && *authorized_dir)
        (void)s_path(adir, sizeof adir, authorized_dir, "", "");
    else
        (void)s_path(adir, sizeof adir, keys_dir, "authorized", "");
    if (s_exists(adir)) {
        if (s_load_authorized(c, adir, err, errlen) != SR_OK)
            goto fail;
        c->has_authorized_dir = 1;
        snprintf(c->adir, sizeof c->adir, "%s", adir);
    } else if (authorized_dir && *authorized_dir) {
        sr_fmt(err, errlen, "authorised-keys folder %s: %s", adir, strerror(ENOENT));
        goto fail;
    }
    pthread_mutex_lock(&s_lock);
    snprintf(c->domain, sizeof c->domain, "selroll-%u", ++s_next_domain);
    c->next = s_registry;
    s_registry = c;
    pthread_mutex_unlock(&s_lock);
    return c;

fail:
    if (c) {
        free(c->authorized);
        free(c);
    }
    return NULL;
}

void curve_destroy(curve_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    curve_t *c = *self_p;
    pthread_mutex_lock(&s_lock);
    for (curve_t **pp = &s_registry; *pp; pp = &(*pp)->next) {
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    }
    if (s_default == c)
        s_default = NULL;
    pthread_mutex_unlock(&s_lock);
    free(c->authorized);
    free(c);
    *self_p = NULL;
}

void curve_set_default(curve_t **self_p)
{
    curve_t *old = s_default;
    s_default = self_p ? *self_p : NULL;
    if (self_p)
        *self_p = NULL;
    if (old && old != s_default)
        curve_destroy(&old);
}

const curve_t *curve_default(void)
{
    return s_default;
}

/* ---- the ZAP handler (ZeroMQ RFC 27) ---- */

#define ZAP_FRAMES 7

/* s_zap_check decides one request: 200 when the domain belongs to a live curve_t whose
 * authorised keys hold the client's key. */
static int s_zap_check(const char *domain, size_t dlen, const char *mech, size_t mlen,
                       const uint8_t *key, size_t klen)
{
    int ok = 0;
    pthread_mutex_lock(&s_lock);
    curve_t *c = s_registry;
    for (; c; c = c->next) {
        if (strlen(c->domain) == dlen && memcmp(c->domain, domain, dlen) == 0)
            break;
    }
    if (c && mlen == 5 && memcmp(mech, "CURVE", 5) == 0 && klen == 32) {
        for (size_t i = 0; i < c->nauthorized && !ok; i++)
            ok = memcmp(c->authorized[i], key, 32) == 0;
    }
    if (c) {
        if (ok)
            atomic_fetch_add(&c->accepted, 1);
        else
            atomic_fetch_add(&c->refused, 1);
    }
    pthread_mutex_unlock(&s_lock);
    return ok;
}

/* s_zap_reply answers a ZAP request; an accepted client's User-Id is its public key in Z85, so
 * the messages it sends carry it (zmq_msg_gets "User-Id"; the bus proxy checks CANCELs by it). */
static void s_zap_reply(void *sock, zmq_msg_t *reqid, int ok, const zmq_msg_t *key)
{
    const char *code = ok ? "200" : "400";
    const char *text = ok ? "OK" : "client key not authorised";
    char user[CURVE_KEY_Z85_LEN + 1] = "";
    if (ok && zmq_msg_size(key) == 32 &&
        !zmq_z85_encode(user, (const uint8_t *)zmq_msg_data((zmq_msg_t *)key), 32))
        user[0] = '\0';
    zmq_send(sock, "1.0", 3, ZMQ_SNDMORE);
    zmq_send(sock, zmq_msg_data(reqid), zmq_msg_size(reqid), ZMQ_SNDMORE);
    zmq_send(sock, code, 3, ZMQ_SNDMORE);
    zmq_send(sock, text, strlen(text), ZMQ_SNDMORE);
    zmq_send(sock, user, strlen(user), ZMQ_SNDMORE);
    zmq_send(sock, "", 0, 0);
}

static void *s_zap_main(void *arg)
{
    zap_t *z = arg;
    for (;;) {
        zmq_msg_t f[ZAP_FRAMES];
        int n = 0, failed = 0, more = 1;
        while (more) {
            zmq_msg_t part;
            zmq_msg_init(&part);
            if (zmq_msg_recv(&part, z->sock, 0) < 0) {
                zmq_msg_close(&part);
                failed = errno;
                break;
            }
            more = zmq_msg_more(&part);
            if (n < ZAP_FRAMES)
                f[n++] = part;
            else
                zmq_msg_close(&part);
        }
        if (failed == ETERM || (failed && failed != EINTR && failed != EAGAIN)) {
            for (int i = 0; i < n; i++)
                zmq_msg_close(&f[i]);
            break;
        }
        if (n >= 2) {
            int ok = 0;
            if (n == ZAP_FRAMES && zmq_msg_size(&f[0]) == 3 &&
                memcmp(zmq_msg_data(&f[0]), "1.0", 3) == 0)
                ok = s_zap_check(zmq_msg_data(&f[2]), zmq_msg_size(&f[2]),
                                 zmq_msg_data(&f[5]), zmq_msg_size(&f[5]),
                                 zmq_msg_data(&f[6]), zmq_msg_size(&f[6]));
            if (!ok) {
                char addr[64] = "?";
                if (n > 3)
                    snprintf(addr, sizeof addr, "%.*s", (int)SR_MIN(zmq_msg_size(&f[3]), 60),
                             (const char *)zmq_msg_data(&f[3]));
                log_warn_limited(5, "curve: refused a peer from %s: client key not authorised",
                                 addr);
            }
            s_zap_reply(z->sock, &f[1], ok, n == ZAP_FRAMES ? &f[6] : &f[1]);
        }
        for (int i = 0; i < n; i++)
            zmq_msg_close(&f[i]);
    }
    pthread_mutex_lock(&s_lock);
    for (zap_t **pp = &s_zaps; *pp; pp = &(*pp)->next) {
        if (*pp == z) {
            *pp = z->next;
            break;
        }
    }
    pthread_mutex_unlock(&s_lock);
    zmq_close(z->sock);
    free(z);
    return NULL;
}

/* s_zap_ensure starts ctx's ZAP handler unless it runs already. */
static int s_zap_ensure(void *ctx, char *err, size_t errlen)
{
    int rc = SR_OK;
    pthread_mutex_lock(&s_lock);
    for (zap_t *z = s_zaps; z; z = z->next) {
        if (z->ctx == ctx)
            goto cleanup;
    }
    zap_t *z = sr_xcalloc(1, sizeof *z);
    int linger = 0;
    z->ctx = ctx;
    z->sock = zmq_socket(ctx, ZMQ_REP);
    if (!z->sock || zmq_setsockopt(z->sock, ZMQ_LINGER, &linger, sizeof linger) != 0 ||
        zmq_bind(z->sock, "inproc://zeromq.zap.01") != 0) {
        sr_fmt(err, errlen, "curve: cannot start the ZAP handler: %s", zmq_strerror(errno));
        if (z->sock)
            zmq_close(z->sock);
        free(z);
        rc = SR_EIO;
        goto cleanup;
    }
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    z->next = s_zaps;
    s_zaps = z;
    if (pthread_create(&z->thread, &attr, s_zap_main, z) != 0) {
        s_zaps = z->next;
        zmq_close(z->sock);
        free(z);
        sr_fmt(err, errlen, "curve: cannot start the ZAP thread");
        rc = SR_EIO;
    }
    pthread_attr_destroy(&attr);
cleanup:
    pthread_mutex_unlock(&s_lock);
    return rc;
}

static int s_set(void *zsock, int opt, const void *v, size_t len, const char *name, char *err,
                 size_t errlen)
{
    if (zmq_setsockopt(zsock, opt, v, len) == 0)
        return SR_OK;
    sr_fmt(err, errlen, "setsockopt %s: %s", name, zmq_strerror(errno));
    return SR_EINVAL;
}

int curve_apply(const curve_t *c, void *ctx, void *zsock, int as_server, char *err, size_t errlen)
{
    int rc;
    if (!c || !zsock)
        return SR_EINVAL;
    if (as_server) {
        int one = 1;
        if (!c->server_sec[0]) {
            sr_fmt(err, errlen, "curve: this process has no server.key, so it cannot bind");
            return SR_EINVAL;
        }
        if ((rc = s_zap_ensure(ctx, err, errlen)) != SR_OK)
            return rc;
        if ((rc = s_set(zsock, ZMQ_CURVE_SERVER, &one, sizeof one, "ZMQ_CURVE_SERVER", err,
                        errlen)) ||
            (rc = s_set(zsock, ZMQ_CURVE_SECRETKEY, c->server_sec, CURVE_KEY_Z85_LEN,
                        "ZMQ_CURVE_SECRETKEY", err, errlen)) ||
            (rc = s_set(zsock, ZMQ_ZAP_DOMAIN, c->domain, strlen(c->domain), "ZMQ_ZAP_DOMAIN",
                        err, errlen)))
            return rc;
#ifdef ZMQ_ZAP_ENFORCE_DOMAIN
        (void)s_set(zsock, ZMQ_ZAP_ENFORCE_DOMAIN, &one, sizeof one, "ZMQ_ZAP_ENFORCE_DOMAIN",
                    err, errlen);
#endif
        return SR_OK;
    }
    if ((rc = s_set(zsock, ZMQ_CURVE_SERVERKEY, c->server_pub, CURVE_KEY_Z85_LEN,
                    "ZMQ_CURVE_SERVERKEY", err, errlen)) ||
        (rc = s_set(zsock, ZMQ_CURVE_PUBLICKEY, c->pub, CURVE_KEY_Z85_LEN, "ZMQ_CURVE_PUBLICKEY",
                    err, errlen)) ||
        (rc = s_set(zsock, ZMQ_CURVE_SECRETKEY, c->sec, CURVE_KEY_Z85_LEN, "ZMQ_CURVE_SECRETKEY",
                    err, errlen)))
        return rc;
    return SR_OK;
}

uint64_t curve_refused(const curve_t *c)
{
    return c ? atomic_load(&((curve_t *)c)->refused) : 0;
}

uint64_t curve_accepted(const curve_t *c)
{
    return c ? atomic_load(&((curve_t *)c)->accepted) : 0;
}

size_t curve_authorized_count(const curve_t *c)
{
    return c ? c->nauthorized : 0;
}

int curve_role_key(const curve_t *c, const char *role, char *out)
{
    char path[PATH_MAX], err[256];
    out[0] = '\0';
    if (!c || !c->adir[0] || !role || s_path(path, sizeof path, c->adir, role, ".pub") != SR_OK ||
        !s_exists(path))
        return SR_ENOTFOUND;
    return curve_read_key(path, out, err, sizeof err) == SR_OK ? SR_OK : SR_EINVAL;
}

const char *curve_public(const curve_t *c)
{
    return c ? c->pub : "";
}
