/*
 * test_http_srv.c — the operational HTTP server over real loopback sockets, with libcurl as the
 * client: routes, Prometheus text, HTTP errors for bad requests, the bearer token, and event
 * streams that deliver the latest published event.
 */
#include "tests/harness.h"
#include "common/http_srv.h"
#include "common/reactor.h"
#include "common/sr.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

typedef struct {
    char *data;
    size_t len;
    const char *stop_at; /* abort the transfer once this text arrived (streams) */
} s_body_t;

static size_t s_collect(char *p, size_t size, size_t n, void *arg)
{
    s_body_t *b = arg;
    b->data = realloc(b->data, b->len + size * n + 1);
    memcpy(b->data + b->len, p, size * n);
    b->len += size * n;
    b->data[b->len] = '\0';
    if (b->stop_at && strstr(b->data, b->stop_at))
        return 0;
    return size * n;
}

/* s_get requests url with an optional extra header and method; returns the status code. */
static long s_get(const char *url, const char *header, const char *method, s_body_t *body)
{
    CURL *h = curl_easy_init();
    assert_non_null(h);
    struct curl_slist *hl = header ? curl_slist_append(NULL, header) : NULL;
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, s_collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, body);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 5000L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    if (hl)
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
    if (method && strcmp(method, "POST") == 0)
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, "x=1");
    CURLcode rc = curl_easy_perform(h);
    long code = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    if (rc != CURLE_OK && rc != CURLE_WRITE_ERROR)
        code = -1;
    curl_slist_free_all(hl);
    curl_easy_cleanup(h);
    return code;
}

static void s_hello(void *arg, http_srv_reply_t *out)
{
    (void)arg;
    out->body = strdup("hello\n");
    out->len = 6;
}

static void s_unavailable(void *arg, http_srv_reply_t *out)
{
    (void)arg;
    out->status = 503;
    out->body = strdup("redis unreachable\n");
    out->len = strlen(out->body);
}

static http_srv_t *s_start(const char *token, metrics_registry_t *reg)
{
    http_srv_cfg_t cfg;
    http_srv_cfg_init(&cfg);
    cfg.bind = "127.0.0.1:0";
    cfg.token = token;
    cfg.keepalive_ms = 200;
    char err[256];
    http_srv_t *s = http_srv_new(&cfg, err, sizeof err);
    assert_non_null(s);
    assert_int_equal(http_srv_route(s, "/hello", s_hello, NULL), SR_OK);
    assert_int_equal(http_srv_route(s, "/health", s_unavailable, NULL), SR_OK);
    assert_int_equal(http_srv_route_public(s, "/health"), SR_OK);
    assert_int_equal(http_srv_route_static(s, "/", "text/html; charset=utf-8", "<p>x</p>", 8),
                     SR_OK);
    if (reg)
        assert_int_equal(http_srv_route_metrics(s, "/metrics", reg), SR_OK);
    assert_int_equal(http_srv_route_sse(s, "/events"), SR_OK);
    assert_int_equal(http_srv_route_sse(s, "/events2"), SR_ECONFLICT);
    assert_int_equal(http_srv_route(s, "/hello", s_hello, NULL), SR_EINVAL);
    assert_int_equal(http_srv_start(s, err, sizeof err), SR_OK);
    assert_true(http_srv_port(s) > 0);
    return s;
}

static void s_url(http_srv_t *s, const char *path, char *buf, size_t len)
{
    snprintf(buf, len, "http://127.0.0.1:%d%s", http_srv_port(s), path);
}

static void routes_answer_and_unknown_paths_are_404(void **state)
{
    (void)state;
    metrics_registry_t *reg = metrics_registry_new();
    metrics_gauge_set(metrics_gauge(reg, "selroll_test_gauge", "A gauge.", NULL), 7);
    http_srv_t *s = s_start(NULL, reg);
    char url[128];
    s_body_t b = {0};
    s_url(s, "/hello", url, sizeof url);
    assert_int_equal(s_get(url, NULL, NULL, &b), 200);
    assert_string_equal(b.data, "hello\n");
    free(b.data);
    memset(&b, 0, sizeof b);
    s_url(s, "/metrics", url, sizeof url);
    assert_int_equal(s_get(url, NULL, NULL, &b), 200);
    assert_non_null(strstr(b.data, "# TYPE selroll_test_gauge gauge\nselroll_test_gauge 7\n"));
    free(b.data);
    memset(&b, 0, sizeof b);
    s_url(s, "/health", url, sizeof url);
    assert_int_equal(s_get(url, NULL, NULL, &b), 503);
    free(b.data);
    memset(&b, 0, sizeof b);
    s_url(s, "/nope", url, sizeof url);
    assert_int_equal(s_get(url, NULL, NULL, &b), 404);
    free(b.data);
    memset(&b, 0, sizeof b);
    s_url(s, "/hello", url, sizeof url);
    assert_int_equal(s_get(url, NULL, "POST", &b), 405);
    free(b.data);
    http_srv_destroy(&s);
    assert_null(s);
    metrics_registry_destroy(&reg);
}

static void oversize_headers_are_refused_and_the_server_goes_on(void **state)
{
    (void)state;
    http_srv_t *s = s_start(NULL, NULL);
    char url[128];
    s_url(s, "/hello", url, sizeof url);
    size_t n = 64 * 1024;
    char *big = malloc(n + 16);
    memcpy(big, "X-Big: ", 7);
    memset(big + 7, 'a', n);
    big[n + 7] = '\0';
    s_body_t b = {0};
    assert_int_equal(s_get(url, big, NULL, &b), 431);
    free(b.data);
    free(big);
    memset(&b, 0, sizeof b);
    assert_int_equal(s_get(url, NULL, NULL, &b), 200);
    free(b.data);
    http_srv_destroy(&s);
}

static void a_set_token_is_required_except_on_public_paths(void **state)
{
    (void)state;
    http_srv_t *s = s_start("s3cret", NULL);
    char url[160];
    s_body_t b = {0};
    s_url(s, "/hello", url, sizeof url);
    assert_int_equal(s_get(url, NULL, NULL, &b), 401);
    free(b.data);
    memset(&b, 0, sizeof b);
    assert_int_equal(s_get(url, "Authorization: Bearer wrong", NULL, &b), 401);
    free(b.data);
    memset(&b, 0, sizeof b);
    assert_int_equal(s_get(url, "Authorization: Bearer s3cret", NULL, &b), 200);
    free(b.data);
    memset(&b, 0, sizeof b);
    s_url(s, "/hello?token=s3cret", url, sizeof url);
    assert_int_equal(s_get(url, NULL, NULL, &b), 200);
    free(b.data);
    memset(&b, 0, sizeof b);
    s_url(s, "/hello?token=s3cre", url, sizeof url);
    assert_int_equal(s_get(url, NULL, NULL, &b), 401);
    free(b.data);
    memset(&b, 0, sizeof b);
    s_url(s, "/health", url, sizeof url);
    assert_int_equal(s_get(url, NULL, NULL, &b), 503); /* public: the handler answers */
    free(b.data);
    http_srv_destroy(&s);
}

/* The decision before any route runs, without a socket: path, method and token, in that order. */
static void the_decision_is_a_pure_function_of_path_method_and_token(void **state)
{
    (void)state;
    http_srv_t *s = s_start("s3cret", NULL);
    assert_int_equal(http_srv_decide(s, "GET", "/hello", "Bearer s3cret", NULL), 200);
    assert_int_equal(http_srv_decide(s, "HEAD", "/hello", "bearer    s3cret", NULL), 200);
    assert_int_equal(http_srv_decide(s, "GET", "/hello", NULL, "s3cret"), 200);
    assert_int_equal(http_srv_decide(s, "GET", "/hello", "Bearer wrong", "s3cret"), 200);
    assert_int_equal(http_srv_decide(s, "GET", "/hello", NULL, NULL), 401);
    assert_int_equal(http_srv_decide(s, "GET", "/hello", "Bearer s3cre", "s3cretx"), 401);
    assert_int_equal(http_srv_decide(s, "GET", "/hello", "Basic s3cret", ""), 401);
    assert_int_equal(http_srv_decide(s, "GET", "/hello", "Bearer", NULL), 401);
    assert_int_equal(http_srv_decide(s, "GET", "/health", NULL, NULL), 200); /* public */
    assert_int_equal(http_srv_decide(s, "POST", "/hello", "Bearer s3cret", NULL), 405);
    assert_int_equal(http_srv_decide(s, "get", "/hello", "Bearer s3cret", NULL), 405);
    assert_int_equal(http_srv_decide(s, "POST", "/nope", NULL, NULL), 404);
    assert_int_equal(http_srv_decide(s, "GET", "/hello/", "Bearer s3cret", NULL), 404);
    assert_int_equal(http_srv_decide(s, "GET", "", NULL, NULL), 404);
    assert_int_equal(http_srv_decide(s, NULL, "/hello", NULL, NULL), 400);
    assert_int_equal(http_srv_decide(s, "GET", NULL, NULL, NULL), 400);
    assert_int_equal(http_srv_decide(NULL, "GET", "/hello", NULL, NULL), 400);
    http_srv_destroy(&s);
    s = s_start(NULL, NULL);
    assert_int_equal(http_srv_decide(s, "GET", "/hello", NULL, NULL), 200);
    assert_int_equal(http_srv_decide(s, "GET", "/hello", "Bearer anything", "x"), 200);
    http_srv_destroy(&s);
}

/* A token followed by an escaped NUL (%00) and more is not the token. */
static void a_token_with_an_escaped_nul_is_refused(void **state)
{
    (void)state;
    http_srv_t *s = s_start("s3cret", NULL);
    char url[160];
    s_body_t b = {0};
    s_url(s, "/hello?token=s3cret%00junk", url, sizeof url);
    assert_int_equal(s_get(url, NULL, NULL, &b), 401);
    free(b.data);
    memset(&b, 0, sizeof b);
    s_url(s, "/hello?token=s3cret%00", url, sizeof url);
    assert_int_equal(s_get(url, NULL, NULL, &b), 401);
    free(b.data);
    memset(&b, 0, sizeof b);
    s_url(s, "/hello?token=%73%33cret", url, sizeof url); /* escapes of ordinary characters */
    assert_int_equal(s_get(url, NULL, NULL, &b), 200);
    free(b.data);
    http_srv_destroy(&s);
}

typedef struct {
    char url[160];
    s_body_t body;
    long code;
} s_reader_t;

static void *s_reader_main(void *arg)
{
    s_reader_t *r = arg;
    r->code = s_get(r->url, NULL, NULL, &r->body);
    return NULL;
}

static void streams_deliver_the_latest_event(void **state)
{
    (void)state;
    http_srv_t *s = s_start(NULL, NULL);
    assert_int_equal(http_srv_sse_publish(s, "state", "{\"n\":1}", 7), SR_OK);
    assert_int_equal(http_srv_sse_publish(s, "state", "a\nb", 3), SR_EINVAL);
    s_reader_t r;
    memset(&r, 0, sizeof r);
    s_url(s, "/events", r.url, sizeof r.url);
    r.body.stop_at = "{\"n\":3}";
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, s_reader_main, &r), 0);
    int64_t deadline = harness_now_ms() + 10000;
    while (http_srv_sse_clients(s) < 1 && harness_now_ms() < deadline)
        usleep(5000);
    assert_int_equal(http_srv_sse_clients(s), 1);
    usleep(1000 * 1000); /* five keep-alive periods: comment lines go out */
    assert_int_equal(http_srv_sse_publish(s, "state", "{\"n\":2}", 7), SR_OK);
    usleep(50 * 1000);
    assert_int_equal(http_srv_sse_publish(s, "state", "{\"n\":3}", 7), SR_OK);
    pthread_join(th, NULL);
    assert_int_equal(r.code, 200);
    assert_non_null(r.body.data);
    assert_non_null(strstr(r.body.data, "retry: 2000\n"));
    assert_non_null(strstr(r.body.data, "event: state\ndata: {\"n\":1}\n\n"));
    assert_non_null(strstr(r.body.data, ": keep-alive\n\n"));
    assert_non_null(strstr(r.body.data, "data: {\"n\":3}\n\n"));
    assert_true(http_srv_sse_bytes(s) >= 3 * 20);
    free(r.body.data);
    deadline = harness_now_ms() + 3000;
    while (http_srv_sse_clients(s) > 0 && harness_now_ms() < deadline)
        usleep(5000);
    assert_int_equal(http_srv_sse_clients(s), 0);
    http_srv_destroy(&s);
}

static void an_open_stream_does_not_hold_up_shutdown(void **state)
{
    (void)state;
    http_srv_t *s = s_start(NULL, NULL);
    s_reader_t r;
    memset(&r, 0, sizeof r);
    s_url(s, "/events", r.url, sizeof r.url);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, s_reader_main, &r), 0);
    int64_t deadline = harness_now_ms() + 10000;
    while (http_srv_sse_clients(s) < 1 && harness_now_ms() < deadline)
        usleep(5000);
    assert_int_equal(http_srv_sse_clients(s), 1);
    int64_t t0 = harness_now_ms();
    http_srv_destroy(&s);
    int64_t took = harness_now_ms() - t0;
    pthread_join(th, NULL); /* the stream ended: the client returned */
    free(r.body.data);
    assert_true(took < 5000); /* not the 60 s connection timeout, nor a hang */
}

static void bad_addresses_are_refused_with_a_reason(void **state)
{
    (void)state;
    const char *bad[] = {"8600", "127.0.0.1", "127.0.0.1:x", "300.1.1.1:80", "h:70000", ":80", NULL};
    http_srv_cfg_t cfg;
    http_srv_cfg_init(&cfg);
    for (int i = 0; i < 7; i++) {
        char err[256] = "";
        cfg.bind = bad[i];
        assert_null(http_srv_new(&cfg, err, sizeof err));
        assert_non_null(strstr(err, "bad HTTP address"));
    }
    /* a port in use: start fails with a reason, nothing leaks */
    http_srv_t *a = s_start(NULL, NULL);
    char bind[64], err[256] = "";
    snprintf(bind, sizeof bind, "127.0.0.1:%d", http_srv_port(a));
    cfg.bind = bind;
    http_srv_t *b = http_srv_new(&cfg, err, sizeof err);
    assert_non_null(b);
    assert_int_equal(http_srv_start(b, err, sizeof err), SR_EIO);
    assert_non_null(strstr(err, "cannot listen"));
    http_srv_destroy(&b);
    http_srv_destroy(&a);
}

static void a_role_serves_its_registry_and_health(void **state)
{
    (void)state;
    metrics_registry_t *reg = metrics_registry_new();
    metrics_counter_inc(metrics_counter(reg, "selroll_role_things_total", "Things.", NULL));
    char err[256] = "";
    assert_null(http_srv_serve_metrics("127.0.0.1:x", reg, err, sizeof err));
    assert_non_null(strstr(err, "bad HTTP address"));
    http_srv_t *s = http_srv_serve_metrics("0", reg, err, sizeof err); /* a free loopback port */
    assert_non_null(s);
    char url[128];
    s_body_t b = {0};
    s_url(s, "/metrics", url, sizeof url);
    assert_int_equal(s_get(url, NULL, NULL, &b), 200);
    assert_non_null(strstr(b.data, "selroll_role_things_total 1\n"));
    free(b.data);
    memset(&b, 0, sizeof b);
    s_url(s, "/health", url, sizeof url);
    assert_int_equal(s_get(url, NULL, NULL, &b), 200);
    assert_string_equal(b.data, "ok\n");
    free(b.data);
    http_srv_destroy(&s);
    metrics_registry_destroy(&reg);
}

/* Idle connections (300 from one address, over the 256 that may wait) take none of
 * libmicrohttpd's threads: /health is answered by the acceptor, other paths by libmicrohttpd, and
 * the connections over the limit are closed at once, counted. */
static void idle_connections_leave_health_and_routes_reachable(void **state)
{
    (void)state;
    http_srv_t *s = s_start(NULL, NULL);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)http_srv_port(s))};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    enum { N = 300 };
    int fds[N];
    for (int i = 0; i < N; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM, 0);
        assert_true(fds[i] >= 0);
        assert_int_equal(connect(fds[i], (struct sockaddr *)&sa, sizeof sa), 0);
    }
    int64_t t0 = harness_now_ms();
    while (http_srv_refused(s) < N - HTTP_SRV_PENDING_PER_IP && harness_now_ms() - t0 < 5000)
        usleep(10000);
    assert_true(http_srv_refused(s) >= N - HTTP_SRV_PENDING_PER_IP);
    /* the refused ones make room: /health from the same address waits at most for that */
    char url[128];
    s_body_t b = {0};
    s_url(s, "/health", url, sizeof url);
    assert_int_equal(s_get(url, NULL, NULL, &b), 503);
    assert_string_equal(b.data, "redis unreachable\n");
    free(b.data);
    assert_true(http_srv_health_early(s) >= 1);
    b = (s_body_t){0};
    s_url(s, "/hello", url, sizeof url);
    assert_int_equal(s_get(url, NULL, NULL, &b), 200);
    assert_string_equal(b.data, "hello\n");
    free(b.data);
    /* 100 heads sent slowly (never finished; on the newest connections, which no eviction
     * closed) wait in the acceptor: libmicrohttpd's 64 threads stay free for a request that
     * comes whole */
    for (int i = 0; i < 100; i++) {
        static const char part[] = "GET /hello HTTP/1.1\r\nHost: x\r\n";
        assert_int_equal(send(fds[N - 1 - i], part, sizeof part - 1, MSG_NOSIGNAL),
                         (ssize_t)sizeof part - 1);
    }
    usleep(100000);
    b = (s_body_t){0};
    assert_int_equal(s_get(url, NULL, NULL, &b), 200);
    assert_string_equal(b.data, "hello\n");
    free(b.data);
    for (int i = 0; i < N; i++)
        close(fds[i]);
    http_srv_destroy(&s);
}

/* s_get_uds requests http://localhost<path> over the Unix socket uds; returns the status. */
static long s_get_uds(const char *uds, const char *path, s_body_t *body)
{
    char url[128];
    snprintf(url, sizeof url, "http://localhost%s", path);
    CURL *h = curl_easy_init();
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, uds);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, s_collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, body);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 5000L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    CURLcode rc = curl_easy_perform(h);
    long code = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(h);
    return rc == CURLE_OK ? code : -1;
}

/* On a Unix socket: a route (handed to libmicrohttpd with the peer's Unix address) and /health
 * (answered by the acceptor) answer; idle peers are limited per user as TCP peers per address
 * (every connection here is this test's uid: the oldest are closed beyond the limit, counted);
 * the socket file is removed at the end; an empty or too long path is refused. */
static void a_unix_socket_serves_routes_and_limits_idle_peers_per_user(void **state)
{
    (void)state;
    char dir[] = "/tmp/sr-uds-XXXXXX", path[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/ops.sock", dir);
    http_srv_cfg_t cfg;
    http_srv_cfg_init(&cfg);
    cfg.uds = path;
    char err[256];
    http_srv_t *s = http_srv_new(&cfg, err, sizeof err);
    assert_non_null(s);
    assert_int_equal(http_srv_route(s, "/hello", s_hello, NULL), SR_OK);
    assert_int_equal(http_srv_route(s, "/health", s_unavailable, NULL), SR_OK);
    assert_int_equal(http_srv_start(s, err, sizeof err), SR_OK);
    assert_int_equal(http_srv_port(s), 0);
    s_body_t b = {0};
    assert_int_equal(s_get_uds(path, "/hello", &b), 200);
    assert_string_equal(b.data, "hello\n");
    free(b.data);
    b = (s_body_t){0};
    assert_int_equal(s_get_uds(path, "/health", &b), 503);
    free(b.data);
    assert_int_equal(http_srv_health_early(s), 1);
    enum { N = 300 };
    int fds[N];
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    snprintf(sun.sun_path, sizeof sun.sun_path, "%s", path);
    for (int i = 0; i < N; i++) {
        fds[i] = socket(AF_UNIX, SOCK_STREAM, 0);
        assert_int_equal(connect(fds[i], (struct sockaddr *)&sun, sizeof sun), 0);
    }
    int64_t t0 = harness_now_ms();
    while (http_srv_refused(s) < N - HTTP_SRV_PENDING_PER_IP && harness_now_ms() - t0 < 5000)
        usleep(10000);
    assert_int_equal(http_srv_refused(s), N - HTTP_SRV_PENDING_PER_IP);
    b = (s_body_t){0};
    assert_int_equal(s_get_uds(path, "/hello", &b), 200); /* the oldest idle one made room */
    free(b.data);
    for (int i = 0; i < N; i++)
        close(fds[i]);
    http_srv_destroy(&s);
    struct stat st;
    assert_int_equal(lstat(path, &st), -1);
    cfg.uds = "";
    assert_null(http_srv_new(&cfg, err, sizeof err));
    assert_non_null(strstr(err, "empty or too long"));
    char longp[200];
    memset(longp, 'a', sizeof longp - 1);
    longp[0] = '/';
    longp[sizeof longp - 1] = '\0';
    cfg.uds = longp;
    assert_null(http_srv_new(&cfg, err, sizeof err));
    rmdir(dir);
}

/* ---- request servers (http_srv_async) ---- */

typedef struct {
    reactor_t *r;
    pthread_t loop;
    http_srv_async_t *a;
    atomic_int requests, hangups, frees;
    int threads;
    const char *uds; /* served on this Unix socket instead of a loopback port */
} s_async_t;

static void *s_async_loop(void *arg)
{
    s_async_t *t = arg;
    reactor_run(t->r);
    return NULL;
}

/* s_late answers a request 30 ms later, from a thread of its own. */
static void *s_late(void *arg)
{
    http_srv_req_t *rq = arg;
    nanosleep(&(struct timespec){0, 30 * 1000 * 1000}, NULL);
    size_t len = 0;
    const char *body = http_srv_req_body(rq, &len);
    char *out = malloc(len + 6);
    memcpy(out, "late:", 5);
    memcpy(out + 5, body, len + 1);
    assert_int_equal(http_srv_req_reply(rq, 202, "text/plain", out, len + 5), SR_OK);
    return NULL;
}

static void s_async_request(void *arg, http_srv_req_t *rq)
{
    s_async_t *t = arg;
    atomic_fetch_add(&t->requests, 1);
    http_srv_req_set_ctx(rq, t);
    const char *path = http_srv_req_path(rq);
    size_t len = 0;
    const char *body = http_srv_req_body(rq, &len);
    if (http_srv_req_too_big(rq)) {
        assert_int_equal(len, 0);
        http_srv_req_reply(rq, 413, "text/plain", strdup("too big"), 7);
    } else if (strcmp(path, "/now") == 0) {
        char *out = strndup(body, len);
        assert_int_equal(http_srv_req_reply(rq, 200, "text/plain", out, len), SR_OK);
        /* a second answer is refused and its body freed */
        assert_int_equal(http_srv_req_reply(rq, 200, "text/plain", strdup("x"), 1),
                         SR_ECONFLICT);
    } else if (strcmp(path, "/later") == 0) {
        pthread_t th;
        assert_int_equal(pthread_create(&th, NULL, s_late, rq), 0);
        pthread_detach(th);
    } /* "/hold": never answered, until the client hangs up or the server stops */
}

static void s_async_hangup(void *arg, http_srv_req_t *rq)
{
    s_async_t *t = arg;
    assert_ptr_equal(http_srv_req_ctx(rq), t);
    atomic_fetch_add(&t->hangups, 1);
    assert_int_equal(http_srv_req_close(rq), SR_OK);
}

static void s_async_free(void *arg, void *ctx)
{
    s_async_t *t = arg;
    assert_ptr_equal(ctx, t);
    atomic_fetch_add(&t->frees, 1);
}

static void s_async_start_at(s_async_t *t, int threads, const char *uds)
{
    memset(t, 0, sizeof *t);
    t->threads = threads;
    t->uds = uds;
    t->r = reactor_new();
    assert_non_null(t->r);
    http_srv_async_cfg_t cfg;
    http_srv_async_cfg_init(&cfg);
    cfg.bind = "127.0.0.1:0";
    cfg.uds = uds;
    cfg.reactor = t->r;
    cfg.threads = threads;
    cfg.max_body = 16;
    cfg.on_request = s_async_request;
    cfg.on_hangup = s_async_hangup;
    cfg.on_free = s_async_free;
    cfg.arg = t;
    char err[128];
    t->a = http_srv_async_new(&cfg, err, sizeof err);
    assert_non_null(t->a);
    assert_true(uds ? http_srv_async_port(t->a) == 0 : http_srv_async_port(t->a) > 0);
    assert_int_equal(pthread_create(&t->loop, NULL, s_async_loop, t), 0);
}

static void s_async_start(s_async_t *t, int threads)
{
    s_async_start_at(t, threads, NULL);
}

static void s_async_stop(s_async_t *t)
{
    reactor_stop(t->r);
    pthread_join(t->loop, NULL);
    http_srv_async_destroy(&t->a);
    assert_null(t->a);
    reactor_destroy(&t->r);
}

/* s_post posts body to path; returns the status, the answer in *out. */
static long s_post(s_async_t *t, const char *path, const char *body, s_body_t *out)
{
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", http_srv_async_port(t->a), path);
    CURL *h = curl_easy_init();
    if (t->uds)
        snprintf(url, sizeof url, "http://localhost%s", path);
    curl_easy_setopt(h, CURLOPT_URL, url);
    if (t->uds)
        curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, t->uds);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, s_collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, out);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 5000L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    CURLcode rc = curl_easy_perform(h);
    long code = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(h);
    return rc == CURLE_OK ? code : -1;
}

static void s_wait_for(atomic_int *v, int want)
{
    for (int i = 0; i < 300 && atomic_load(v) < want; i++)
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    assert_int_equal(atomic_load(v), want);
}

static void s_async_answers_at(int threads, const char *uds)
{
    s_async_t t;
    s_async_start_at(&t, threads, uds);
    s_body_t b = {0};
    assert_int_equal(s_post(&t, "/now", "abc", &b), 200);
    assert_string_equal(b.data, "abc");
    free(b.data);
    memset(&b, 0, sizeof b);
    assert_int_equal(s_post(&t, "/later", "xyz", &b), 202);
    assert_string_equal(b.data, "late:xyz");
    free(b.data);
    memset(&b, 0, sizeof b);
    assert_int_equal(s_post(&t, "/now", "0123456789abcdefXYZ", &b), 413);
    free(b.data);
    assert_int_equal(atomic_load(&t.requests), 3);
    s_wait_for(&t.frees, 3);
    assert_int_equal(atomic_load(&t.hangups), 0);
    s_async_stop(&t);
}

static void s_async_answers(int threads)
{
    s_async_answers_at(threads, NULL);
}

/* A request answered at once, one answered 30 ms later from another thread, a body over the
 * limit: on the reactor (threads 1) and on two libmicrohttpd threads. */
static void async_requests_are_answered_now_or_later_from_any_thread(void **state)
{
    (void)state;
    s_async_answers(1);
    s_async_answers(2);
}

static void s_async_hangups(int threads)
{
    s_async_t t;
    s_async_start(&t, threads);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)http_srv_async_port(t.a))};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    const char req[] = "POST /hold HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc";
    assert_int_equal(write(fd, req, sizeof req - 1), (ssize_t)(sizeof req - 1));
    s_wait_for(&t.requests, 1);
    nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
    assert_int_equal(atomic_load(&t.hangups), 0); /* it waits, unanswered */
    close(fd);
    s_wait_for(&t.hangups, 1); /* the hang-up is told; the request closed in the callback */
    s_wait_for(&t.frees, 1);
    /* A request that waits when the server stops is closed and freed. */
    fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(write(fd, req, sizeof req - 1), (ssize_t)(sizeof req - 1));
    s_wait_for(&t.requests, 2);
    s_async_stop(&t);
    assert_int_equal(atomic_load(&t.frees), 2);
    assert_int_equal(atomic_load(&t.hangups), 1);
    close(fd);
}

/* A client that hangs up while its request waits is told to on_hangup, on both kinds of server;
 * stopping the server closes a waiting request. */
static void async_a_hang_up_of_a_waiting_request_is_told(void **state)
{
    (void)state;
    s_async_hangups(1);
    s_async_hangups(2);
}

/* On a Unix socket (--uds): requests answered now and later, on the reactor and on two threads;
 * a hang-up told; a dead server's socket file replaced, any other file at the path refused; the
 * file removed when the server ends. */
static void async_a_unix_socket_serves_and_is_removed_at_the_end(void **state)
{
    (void)state;
    char dir[] = "/tmp/sr-uds-XXXXXX", path[64], file[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/http.sock", dir);
    /* a socket file left behind by a server that died */
    int stale = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    snprintf(sun.sun_path, sizeof sun.sun_path, "%s", path);
    assert_int_equal(bind(stale, (struct sockaddr *)&sun, sizeof sun), 0);
    close(stale);
    s_async_answers_at(1, path);
    struct stat st;
    assert_int_equal(lstat(path, &st), -1); /* removed at the end */
    s_async_answers_at(2, path);
    assert_int_equal(lstat(path, &st), -1);

    s_async_t t;
    s_async_start_at(&t, 1, path);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&sun, sizeof sun), 0);
    const char req[] = "POST /hold HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc";
    assert_int_equal(write(fd, req, sizeof req - 1), (ssize_t)(sizeof req - 1));
    s_wait_for(&t.requests, 1);
    close(fd);
    s_wait_for(&t.hangups, 1);
    s_wait_for(&t.frees, 1);
    s_async_stop(&t);

    /* a regular file at the path is not taken over */
    snprintf(file, sizeof file, "%s", path);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fclose(f);
    reactor_t *r = reactor_new();
    http_srv_async_cfg_t cfg;
    http_srv_async_cfg_init(&cfg);
    cfg.uds = path;
    cfg.reactor = r;
    cfg.on_request = s_async_request;
    char err[128] = "";
    assert_null(http_srv_async_new(&cfg, err, sizeof err));
    assert_non_null(strstr(err, "not a socket"));
    assert_int_equal(lstat(path, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    unlink(path);
    snprintf(file, sizeof file, "%s/no/such/dir.sock", dir); /* cannot be bound */
    cfg.uds = file;
    assert_null(http_srv_async_new(&cfg, err, sizeof err));
    assert_true(err[0] != '\0');
    reactor_destroy(&r);
    rmdir(dir);
}

/* Bad configurations are refused with a reason. */
static void async_bad_configurations_are_refused(void **state)
{
    (void)state;
    reactor_t *r = reactor_new();
    http_srv_async_cfg_t cfg;
    http_srv_async_cfg_init(&cfg);
    char err[128] = "";
    cfg.bind = "127.0.0.1:0";
    assert_null(http_srv_async_new(&cfg, err, sizeof err)); /* no reactor, no on_request */
    assert_true(err[0] != '\0');
    cfg.reactor = r;
    cfg.on_request = s_async_request;
    cfg.bind = "nowhere:80";
    assert_null(http_srv_async_new(&cfg, err, sizeof err));
    http_srv_async_destroy(NULL);
    reactor_destroy(&r);
}

int main(int argc, char **argv)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(routes_answer_and_unknown_paths_are_404),
        cmocka_unit_test(oversize_headers_are_refused_and_the_server_goes_on),
        cmocka_unit_test(a_set_token_is_required_except_on_public_paths),
        cmocka_unit_test(the_decision_is_a_pure_function_of_path_method_and_token),
        cmocka_unit_test(a_token_with_an_escaped_nul_is_refused),
        cmocka_unit_test(streams_deliver_the_latest_event),
        cmocka_unit_test(an_open_stream_does_not_hold_up_shutdown),
        cmocka_unit_test(bad_addresses_are_refused_with_a_reason),
        cmocka_unit_test(a_role_serves_its_registry_and_health),
        cmocka_unit_test(idle_connections_leave_health_and_routes_reachable),
        cmocka_unit_test(a_unix_socket_serves_routes_and_limits_idle_peers_per_user),
        cmocka_unit_test(async_requests_are_answered_now_or_later_from_any_thread),
        cmocka_unit_test(async_a_hang_up_of_a_waiting_request_is_told),
        cmocka_unit_test(async_bad_configurations_are_refused),
        cmocka_unit_test(async_a_unix_socket_serves_and_is_removed_at_the_end),
    };
    int rc = harness_run_("http_srv", tests, sizeof tests / sizeof tests[0], argc, argv);
    curl_global_cleanup();
    return rc;
}
