/*
 * fuzz_dashboard_http.c — libFuzzer target for the HTTP request handling of the coordinator's
 * dashboard and of the roles' /metrics ports (common/http_srv.c over libmicrohttpd).
 *
 * One server for the whole fuzz process, started in LLVMFuzzerInitialize on a free loopback port
 * with the dashboard's routes and a bearer token: "/" (static page), "/api/state" (a handler),
 * "/api/events" (the event stream), "/metrics" (a registry) and the public "/health". Each input
 * is a raw request (method, path with query and percent-escapes, headers, body): it goes over a
 * fresh TCP connection, and the target reads the answer's head with a short receive timeout. An
 * answer must be an HTTP status line and never a 500; the server must still accept connections.
 *
 * The same input also drives http_srv_decide, the pure decision on method, path, token header
 * and token parameter, read from the request line and headers by a tolerant splitter here. Its
 * invariants: the right token never gets 401, /health never needs one, and a path not routed is
 * 404 whatever the rest.
 */
#include "common/http_srv.h"
#include "common/metrics.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define FUZZ_TOKEN "fuzz-token-7f3a"
#define FUZZ_FIELD_MAX 4096

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static http_srv_t *s_srv;
static metrics_registry_t *s_reg;
static int s_port;

static const char s_page[] = "<!doctype html><title>selroll</title><p>dashboard</p>\n";

static void s_state(void *arg, http_srv_reply_t *out)
{
    (void)arg;
    static const char json[] = "{\"v\":1,\"run\":\"fuzz\",\"round\":0}";
    out->content_type = "application/json";
    out->body = strdup(json);
    out->len = out->body ? sizeof json - 1 : 0;
}

static void s_health(void *arg, http_srv_reply_t *out)
{
    (void)arg;
    out->body = strdup("ok\n");
    out->len = out->body ? 3 : 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    signal(SIGPIPE, SIG_IGN);
    s_reg = metrics_registry_new();
    metrics_counter_inc(metrics_counter(s_reg, "selroll_fuzz_requests_total", "requests", NULL));
    http_srv_cfg_t cfg;
    http_srv_cfg_init(&cfg);
    cfg.bind = "127.0.0.1:0";
    cfg.token = FUZZ_TOKEN;
    cfg.keepalive_ms = 20; /* a stream whose client left ends at its next keep-alive */
    cfg.timeout_s = 2;
    char err[256] = "";
    s_srv = http_srv_new(&cfg, err, sizeof err);
    if (!s_srv || http_srv_route_static(s_srv, "/", "text/html; charset=utf-8", s_page,
                                        sizeof s_page - 1) != 0 ||
        http_srv_route(s_srv, "/api/state", s_state, NULL) != 0 ||
        http_srv_route_sse(s_srv, "/api/events") != 0 ||
        http_srv_route_metrics(s_srv, "/metrics", s_reg) != 0 ||
        http_srv_route(s_srv, "/health", s_health, NULL) != 0 ||
        http_srv_route_public(s_srv, "/health") != 0 || http_srv_start(s_srv, err, sizeof err) != 0) {
        fprintf(stderr, "fuzz_dashboard_http: cannot start the server: %s\n", err);
        abort();
    }
    static const char ev[] = "{\"v\":1}";
    http_srv_sse_publish(s_srv, "state", ev, sizeof ev - 1);
    s_port = http_srv_port(s_srv);
    return 0;
}

/* s_copy copies data[0..n) into out (size FUZZ_FIELD_MAX) as a string, cut at a NUL. */
static void s_copy(char *out, const uint8_t *data, size_t n)
{
    if (n >= FUZZ_FIELD_MAX)
        n = FUZZ_FIELD_MAX - 1;
    memcpy(out, data, n);
    out[n] = '\0';
}

/* s_decide splits the request line and headers leniently and checks http_srv_decide. */
static void s_decide(const uint8_t *data, size_t size)
{
    static char method[FUZZ_FIELD_MAX], path[FUZZ_FIELD_MAX], auth[FUZZ_FIELD_MAX],
        tok[FUZZ_FIELD_MAX];
    const uint8_t *end = data + size;
    const uint8_t *eol = memchr(data, '\n', size);
    const uint8_t *line_end = eol ? eol : end;
    const uint8_t *sp = memchr(data, ' ', (size_t)(line_end - data));
    const uint8_t *m_end = sp ? sp : line_end;
    s_copy(method, data, (size_t)(m_end - data));
    const uint8_t *t = sp ? sp + 1 : line_end;
    const uint8_t *t_end = memchr(t, ' ', (size_t)(line_end - t));
    if (!t_end)
        t_end = line_end;
    const uint8_t *q = memchr(t, '?', (size_t)(t_end - t));
    s_copy(path, t, (size_t)((q ? q : t_end) - t));
    bool have_tok = false;
    if (q) {
        const uint8_t *v = q + 1;
        while (v < t_end) {
            const uint8_t *amp = memchr(v, '&', (size_t)(t_end - v));
            const uint8_t *p_end = amp ? amp : t_end;
            if (p_end - v >= 6 && memcmp(v, "token=", 6) == 0) {
                s_copy(tok, v + 6, (size_t)(p_end - v - 6));
                have_tok = true;
                break;
            }
            v = amp ? amp + 1 : t_end;
        }
    }
    bool have_auth = false;
    for (const uint8_t *l = eol ? eol + 1 : end; l < end;) {
        const uint8_t *nl = memchr(l, '\n', (size_t)(end - l));
        const uint8_t *l_end = nl ? nl : end;
        if (l_end - l >= 14 && strncasecmp((const char *)l, "Authorization:", 14) == 0) {
            const uint8_t *v = l + 14;
            while (v < l_end && *v == ' ')
                v++;
            size_t n = (size_t)(l_end - v);
            if (n && v[n - 1] == '\r')
                n--;
            s_copy(auth, v, n);
            have_auth = true;
            break;
        }
        l = nl ? nl + 1 : end;
    }
    const char *a = have_auth ? auth : NULL, *k = have_tok ? tok : NULL;
    int st = http_srv_decide(s_srv, method, path, a, k);
    if (st != 200 && st != 401 && st != 404 && st != 405)
        abort();
    int right = http_srv_decide(s_srv, method, path, "Bearer " FUZZ_TOKEN, NULL);
    if (right == 401 || (right == 404) != (st == 404))
        abort();
    if (http_srv_decide(s_srv, method, path, NULL, FUZZ_TOKEN) != right)
        abort();
    if (strcmp(path, "/health") == 0 && st == 401)
        abort();
    if (http_srv_decide(s_srv, "GET", path, a, k) == 405)
        abort();
}

/* s_exchange sends the request over a fresh connection and reads the answer's head. */
static void s_exchange(const uint8_t *data, size_t size)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return;
    struct timeval tv = {.tv_sec = 0, .tv_usec = 50000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s_port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        fprintf(stderr, "fuzz_dashboard_http: the server does not accept connections: %s\n",
                strerror(errno));
        abort();
    }
    size_t off = 0;
    while (off < size) {
        ssize_t n = send(fd, data + off, size - off, MSG_NOSIGNAL);
        if (n <= 0)
            break;
        off += (size_t)n;
    }
    /* An input without the blank line that ends the headers gets one, so it is answered now. */
    if (off == size && !memmem(data, size, "\r\n\r\n", 4) && !memmem(data, size, "\n\n", 2))
        (void)send(fd, "\r\n\r\n", 4, MSG_NOSIGNAL);
    char buf[2048];
    size_t got = 0;
    while (got < sizeof buf - 1) {
        ssize_t n = recv(fd, buf + got, sizeof buf - 1 - got, 0);
        if (n <= 0)
            break;
        got += (size_t)n;
        buf[got] = '\0';
        if (strstr(buf, "\r\n\r\n"))
            break;
    }
    buf[got] = '\0';
    if (got >= 12) {
        if (strncmp(buf, "HTTP/1.", 7) != 0 || strncmp(buf + 8, " 500", 4) == 0) {
            fprintf(stderr, "fuzz_dashboard_http: bad answer: %.80s\n", buf);
            abort();
        }
    }
    close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    s_decide(data, size);
    s_exchange(data, size);
    return 0;
}
