/*
 * test_llm_client.c — the OpenAI-compatible client: the body parser on the documented response
 * and error shapes of vLLM, SGLang, llama.cpp's server and Ollama (tests/fixtures/), and real
 * HTTP round trips against a small libmicrohttpd server in this process on a free loopback port:
 * status codes, retries, timeouts, wrong content types, oversized bodies and aborts that the
 * server sees as disconnects. Round trips run through the reactor hooks (a small poll loop here)
 * and through the blocking driver.
 */
#include "tests/harness.h"

#include "common/jsonw.h"
#include "common/llm_client.h"
#include "common/llm_client_int.h" /* which path a request took (c->h1) */
#include "common/sr_buf.h"
#include "common/sr.h"

#include <arpa/inet.h>
#include <cJSON.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <unistd.h>


/* ---- the test server ----------------------------------------------------------------------- */

typedef struct {
    struct MHD_Daemon *d;
    int port;
    char uds[64]; /* served on this Unix socket instead (s_srv_start_uds) */
    pthread_mutex_t mu;
    int hits;
    int flaky_left;          /* /flaky answers 503 while this is positive */
    int throttle_left;       /* /throttle/<code>/<retry-after> answers <code> while positive */
    int slow_disconnects;    /* /slow requests that ended because the client went away */
    char *last_body;
    char last_auth[256];
    char last_ctype[128];
    volatile int stopping;
} tsrv_t;

typedef struct {
    char *body;
    size_t len;
    bool slow;
} tconn_t;

typedef struct {
    tsrv_t *srv;
    int64_t until_ms;
    const char *json;
    size_t json_len;
    uint64_t spaces;
} tslow_t;

static const char OK_JSON[] =
    "{\"id\":\"chatcmpl-t\",\"object\":\"chat.completion\",\"created\":1,\"model\":\"selroll-v0\","
    "\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"<action>look</action>\"},"
    "\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":3,\"total_tokens\":8}}";

static enum MHD_Result s_queue(struct MHD_Connection *conn, unsigned status, const char *ctype,
                               const char *body, size_t len)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (ctype)
        MHD_add_response_header(r, "Content-Type", ctype);
    enum MHD_Result ret = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return ret;
}

static ssize_t s_slow_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    tslow_t *s = cls;
    if (s->srv->stopping)
        return MHD_CONTENT_READER_END_WITH_ERROR;
    if (harness_now_ms() < s->until_ms) {
        usleep(10000);
        buf[0] = ' '; /* whitespace before a JSON value keeps the body valid */
        s->spaces++;
        return 1;
    }
    uint64_t off = pos - s->spaces;
    if (off >= s->json_len)
        return MHD_CONTENT_READER_END_OF_STREAM;
    size_t n = SR_MIN(max, (size_t)(s->json_len - off));
    memcpy(buf, s->json + off, n);
    return (ssize_t)n;
}

static enum MHD_Result s_handler(void *cls, struct MHD_Connection *conn, const char *url,
                                 const char *method, const char *version, const char *upload,
                                 size_t *upload_size, void **con_cls)
{
    tsrv_t *srv = cls;
    tconn_t *tc = *con_cls;
    if (!tc) {
        tc = calloc(1, sizeof *tc);
        *con_cls = tc;
        return MHD_YES;
    }
    if (*upload_size) {
        tc->body = realloc(tc->body, tc->len + *upload_size + 1);
        memcpy(tc->body + tc->len, upload, *upload_size);
        tc->len += *upload_size;
        tc->body[tc->len] = '\0';
        *upload_size = 0;
        return MHD_YES;
    }
    /* The whole request is in: record it, then route on the path before /v1/chat/completions. */
    const char *auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
    const char *ctype = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Type");
    pthread_mutex_lock(&srv->mu);
    srv->hits++;
    free(srv->last_body);
    srv->last_body = tc->body ? strdup(tc->body) : strdup("");
    snprintf(srv->last_auth, sizeof srv->last_auth, "%s", auth ? auth : "");
    snprintf(srv->last_ctype, sizeof srv->last_ctype, "%s", ctype ? ctype : "");
    bool flaky_fail = false;
    if (strncmp(url, "/flaky/", 7) == 0 && srv->flaky_left > 0) {
        srv->flaky_left--;
        flaky_fail = true;
    }
    bool throttle = false;
    if (strncmp(url, "/throttle/", 10) == 0 && srv->throttle_left > 0) {
        srv->throttle_left--;
        throttle = true;
    }
    pthread_mutex_unlock(&srv->mu);

    if (strcmp(method, "GET") == 0 && strstr(url, "/v1/models")) {
        const char *m = "{\"object\":\"list\",\"data\":[{\"id\":\"Qwen/Qwen3-8B\",\"object\":\"model\"},"
                        "{\"id\":\"selroll-policy-v0\",\"object\":\"model\"},{\"object\":\"model\"}]}";
        return s_queue(conn, 200, "application/json", m, strlen(m));
    }
    if (throttle) {
        /* /throttle/<status>/<Retry-After value>/v1/chat/completions */
        unsigned code = 429;
        char after[64] = "";
        sscanf(url + 10, "%u/%63[^/]", &code, after);
        for (char *p = after; *p; p++)
            if (*p == '_')
                *p = ' ';
        const char *e = "{\"error\": {\"message\": \"rate limited\", \"type\": \"rate_limit\"}}";
        struct MHD_Response *r = MHD_create_response_from_buffer(strlen(e), (void *)e, MHD_RESPMEM_MUST_COPY);
        MHD_add_response_header(r, "Content-Type", "application/json");
        if (after[0] && strcmp(after, "none") != 0)
            MHD_add_response_header(r, "Retry-After", after);
        enum MHD_Result ret = MHD_queue_response(conn, code, r);
        MHD_destroy_response(r);
        return ret;
    }

    const char *suffix = "/v1/chat/completions";
    size_t ul = strlen(url), sl = strlen(suffix);
    if (strcmp(method, "POST") != 0 || ul < sl || strcmp(url + ul - sl, suffix) != 0)
        return s_queue(conn, 404, "application/json", "{\"error\":{\"message\":\"no route\"}}", 31);
    char route[256];
    snprintf(route, sizeof route, "%.*s", (int)(ul - sl), url);

    unsigned status;
    char file[128];
    if (sscanf(route, "/fix/%u/%127s", &status, file) == 2) {
        size_t len;
        char *body = harness_fixture(file, &len);
        const char *ct = strstr(file, ".html") ? "text/html; charset=utf-8"
                         : strstr(file, ".txt") ? "text/event-stream"
                                                : "application/json";
        enum MHD_Result ret = s_queue(conn, status, ct, body, len);
        free(body);
        return ret;
    }
    if (strncmp(route, "/flaky/", 7) == 0) {
        if (flaky_fail) {
            const char *e = "{\"error\": {\"message\": \"queue full\", \"type\": \"server_error\", \"code\": 503}}";
            return s_queue(conn, 503, "application/json", e, strlen(e));
        }
        return s_queue(conn, 200, "application/json", OK_JSON, strlen(OK_JSON));
    }
    if (strncmp(route, "/slow/", 6) == 0) {
        tslow_t *s = calloc(1, sizeof *s);
        s->srv = srv;
        s->until_ms = harness_now_ms() + atoi(route + 6);
        s->json = OK_JSON;
        s->json_len = strlen(OK_JSON);
        tc->slow = true;
        struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 1024, s_slow_reader, s, free);
        MHD_add_response_header(r, "Content-Type", "application/json");
        enum MHD_Result ret = MHD_queue_response(conn, 200, r);
        MHD_destroy_response(r);
        return ret;
    }
    if (strcmp(route, "/big") == 0) {
        size_t n = 2 * 1024 * 1024;
        char *big = malloc(n);
        memset(big, ' ', n);
        memcpy(big, "{\"pad\":\"", 8);
        memset(big + 8, 'x', n - 10);
        memcpy(big + n - 2, "\"}", 2);
        enum MHD_Result ret = s_queue(conn, 200, "application/json", big, n);
        free(big);
        return ret;
    }
    if (strcmp(route, "/drop") == 0)
        return MHD_NO; /* closes the connection without an answer */
    if (strcmp(route, "/long") == 0) {
        /* a 12000-token answer of 60000 bytes with logprobs and one top logprob per token */
        size_t cap = 4u << 20, n = 0;
        char *b = malloc(cap);
        n += (size_t)snprintf(b + n, cap - n, "{\"id\":\"x\",\"object\":\"chat.completion\",\"model\":"
                              "\"selroll-v0\",\"choices\":[{\"index\":0,\"message\":{\"role\":"
                              "\"assistant\",\"content\":\"");
        for (int i = 0; i < 12000; i++)
            n += (size_t)snprintf(b + n, cap - n, "word ");
        n += (size_t)snprintf(b + n, cap - n, "\"},\"logprobs\":{\"content\":[");
        for (int i = 0; i < 12000; i++)
            n += (size_t)snprintf(b + n, cap - n, "%s{\"token\":\"word \",\"logprob\":-0.5,\"bytes\":"
                                  "[119,111,114,100,32],\"top_logprobs\":[{\"token\":\"word \","
                                  "\"logprob\":-0.5,\"bytes\":[119,111,114,100,32]}]}", i ? "," : "");
        n += (size_t)snprintf(b + n, cap - n, "]},\"finish_reason\":\"length\"}],\"usage\":"
                              "{\"prompt_tokens\":400,\"completion_tokens\":12000}}");
        enum MHD_Result ret = s_queue(conn, 200, "application/json", b, n);
        free(b);
        return ret;
    }
    return s_queue(conn, 200, "application/json", OK_JSON, strlen(OK_JSON));
}

static void s_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                        enum MHD_RequestTerminationCode toe)
{
    tsrv_t *srv = cls;
    tconn_t *tc = *con_cls;
    if (!tc)
        return;
    if (tc->slow && toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && !srv->stopping) {
        pthread_mutex_lock(&srv->mu);
        srv->slow_disconnects++;
        pthread_mutex_unlock(&srv->mu);
    }
    free(tc->body);
    free(tc);
    *con_cls = NULL;
}

static void s_srv_start(tsrv_t *srv)
{
    static bool cleanup_registered;
    if (!cleanup_registered) {
        atexit(llm_global_cleanup);
        cleanup_registered = true;
    }
    memset(srv, 0, sizeof *srv);
    pthread_mutex_init(&srv->mu, NULL);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    srv->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION, 0, NULL,
                              NULL, s_handler, srv, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&a,
                              MHD_OPTION_NOTIFY_COMPLETED, s_completed, srv, MHD_OPTION_END);
    assert_non_null(srv->d);
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(srv->d, MHD_DAEMON_INFO_BIND_PORT);
    assert_non_null(info);
    srv->port = info->port;
    assert_true(srv->port > 0);
}

/* s_srv_start_uds starts the test server on a Unix socket at path (its base URL unix:path). */
static void s_srv_start_uds(tsrv_t *srv, const char *path)
{
    memset(srv, 0, sizeof *srv);
    pthread_mutex_init(&srv->mu, NULL);
    snprintf(srv->uds, sizeof srv->uds, "%s", path);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(fd, 64), 0);
    srv->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION, 0, NULL,
                              NULL, s_handler, srv, MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd,
                              MHD_OPTION_NOTIFY_COMPLETED, s_completed, srv, MHD_OPTION_END);
    assert_non_null(srv->d);
}

static void s_srv_stop(tsrv_t *srv)
{
    srv->stopping = 1;
    MHD_stop_daemon(srv->d);
    if (srv->uds[0])
        unlink(srv->uds);
    free(srv->last_body);
    pthread_mutex_destroy(&srv->mu);
}

static int s_srv_get(tsrv_t *srv, int *field)
{
    pthread_mutex_lock(&srv->mu);
    int v = *field;
    pthread_mutex_unlock(&srv->mu);
    return v;
}

/* ---- a small reactor: poll() over the watched descriptors plus one timer ------------------- */

typedef struct {
    struct pollfd fds[32];
    int n;
    int64_t timer_due; /* -1 = none */
    llm_client_t *c;
    int watch_calls, unwatch_calls, timer_calls;
} rx_t;

static void rx_watch(int fd, bool rd, bool wr, void *arg)
{
    rx_t *rx = arg;
    rx->watch_calls++;
    short ev = (short)((rd ? POLLIN : 0) | (wr ? POLLOUT : 0));
    for (int i = 0; i < rx->n; i++)
        if (rx->fds[i].fd == fd) {
            rx->fds[i].events = ev;
            return;
        }
    assert_true(rx->n < 32);
    rx->fds[rx->n++] = (struct pollfd){.fd = fd, .events = ev};
}

static void rx_unwatch(int fd, void *arg)
{
    rx_t *rx = arg;
    rx->unwatch_calls++;
    for (int i = 0; i < rx->n; i++)
        if (rx->fds[i].fd == fd) {
            rx->fds[i] = rx->fds[--rx->n];
            return;
        }
}

static void rx_timer(long ms, void *arg)
{
    rx_t *rx = arg;
    rx->timer_calls++;
    rx->timer_due = ms < 0 ? -1 : harness_now_ms() + ms;
}

static const llm_io_hooks_t RX_HOOKS = {.watch_fd = rx_watch, .unwatch_fd = rx_unwatch, .set_timer = rx_timer};

/* rx_run turns the loop until *done is true or ms pass. */
static void rx_run(rx_t *rx, const int *done, long ms)
{
    int64_t end = harness_now_ms() + ms;
    while ((!done || !*done) && harness_now_ms() < end) {
        int64_t now = harness_now_ms();
        long wait = (long)(end - now);
        if (rx->timer_due >= 0)
            wait = (long)SR_MAX(0, SR_MIN((int64_t)wait, rx->timer_due - now));
        struct pollfd fds[32];
        int n = rx->n;
        memcpy(fds, rx->fds, sizeof fds[0] * (size_t)n);
        int k = poll(fds, (nfds_t)n, (int)wait);
        for (int i = 0; k > 0 && i < n; i++) {
            if (!fds[i].revents)
                continue;
            bool rd = fds[i].revents & (POLLIN | POLLHUP | POLLERR);
            bool wr = fds[i].revents & (POLLOUT | POLLERR);
            llm_client_on_fd(rx->c, fds[i].fd, rd, wr);
        }
        if (rx->timer_due >= 0 && harness_now_ms() >= rx->timer_due) {
            rx->timer_due = -1;
            llm_client_on_timer(rx->c);
        }
    }
}

/* ---- what a done callback saw -------------------------------------------------------------- */

typedef struct {
    int calls;
    int rc;
    long http;
    char error[256];
    char content[512];
    char finish[32];
    long pt, ct;
    bool has_lp;
    double lp;
    int attempts;
    int throttled;
    double latency;
    size_t content_len;
    char models[256];
} seen_t;

static void s_done(const llm_response_t *r, void *arg)
{
    seen_t *s = arg;
    s->calls++;
    s->rc = r->rc;
    s->http = r->http_status;
    snprintf(s->error, sizeof s->error, "%s", r->error);
    snprintf(s->content, sizeof s->content, "%s", r->content ? r->content : "(null)");
    snprintf(s->finish, sizeof s->finish, "%s", r->finish_reason ? r->finish_reason : "(null)");
    s->pt = r->prompt_tokens;
    s->ct = r->completion_tokens;
    s->has_lp = r->has_logprob;
    s->lp = r->logprob_sum;
    s->attempts = r->attempts;
    s->throttled = r->throttled;
    s->latency = r->latency_ms;
    s->content_len = r->content ? strlen(r->content) : 0;
    s->models[0] = '\0';
    for (size_t i = 0; i < r->n_models; i++)
        snprintf(s->models + strlen(s->models), sizeof s->models - strlen(s->models), "%s%s",
                 i ? "," : "", r->models[i]);
}

static const llm_message_t MSGS[] = {
    {"system", "You are an expert agent operating in the ALFRED embodied household environment."},
    {"user", "Your task is to: put a clean lettuce in diningtable.\nThis is the first step."},
};

static llm_chat_t s_chat(void)
{
    return (llm_chat_t){.model = "selroll-v0", .messages = MSGS, .n_messages = 2, .temperature = 0.7,
                        .top_p = -1, .max_tokens = 256};
}

static llm_client_t *s_client(rx_t *rx, tsrv_t *srv, const char *route, int retries, long timeout_ms)
{
    char base[256];
    snprintf(base, sizeof base, "http://127.0.0.1:%d%s/v1", srv ? srv->port : harness_free_port(), route);
    llm_client_cfg_t cfg = {.base_url = base, .max_retries = retries, .backoff_base_ms = 10,
                            .backoff_max_ms = 40, .timeout_ms = timeout_ms, .jitter_seed = 7,
                            .api_key = "sk-selroll-test"};
    llm_client_t *c = llm_client_new(&cfg, rx ? &RX_HOOKS : NULL, rx);
    assert_non_null(c);
    if (rx) {
        memset(rx, 0, sizeof *rx);
        rx->timer_due = -1;
        rx->c = c;
    }
    return c;
}

/* s_one runs a single request through the reactor against route and fills *seen. */
static void s_one(tsrv_t *srv, const char *route, int retries, long timeout_ms, seen_t *seen)
{
    rx_t rx;
    llm_client_t *c = s_client(&rx, srv, route, retries, timeout_ms);
    llm_chat_t chat = s_chat();
    memset(seen, 0, sizeof *seen);
    assert_non_null(llm_client_chat(c, &chat, s_done, seen));
    rx_run(&rx, &seen->calls, 5000);
    assert_int_equal(seen->calls, 1);
    assert_int_equal(llm_client_pending(c), 0);
    llm_client_destroy(&c);
    assert_null(c);
    assert_int_equal(rx.n, 0); /* every descriptor was unwatched */
}

/* ---- pure tests ---------------------------------------------------------------------------- */

static void base_urls_are_normalised(void **state)
{
    (void)state;
    const char *cases[][2] = {
        {"http://127.0.0.1:8000", "http://127.0.0.1:8000/v1/chat/completions"},
        {"http://127.0.0.1:8000/", "http://127.0.0.1:8000/v1/chat/completions"},
        {"http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1/chat/completions"},
        {"http://localhost:11434/v1/", "http://localhost:11434/v1/chat/completions"},
        {"https://gpu7:30000/v1/chat/completions", "https://gpu7:30000/v1/chat/completions"},
        {"http://host/prefix/v1", "http://host/prefix/v1/chat/completions"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *u = llm_chat_url(cases[i][0]);
        assert_non_null(u);
        assert_string_equal(u, cases[i][1]);
        free(u);
    }
    assert_null(llm_chat_url(NULL));
    assert_null(llm_chat_url(""));
    assert_null(llm_chat_url("ftp://x/v1"));
    assert_null(llm_chat_url("127.0.0.1:8000"));
    assert_null(llm_chat_url("http://"));
    llm_client_cfg_t cfg = {.base_url = "redis://127.0.0.1:6379"};
    assert_null(llm_client_new(&cfg, NULL, NULL));
    assert_null(llm_client_new(NULL, NULL, NULL));
}

/* Messages whose contents come escaped already (contents_json) make the same body byte for byte
 * as the plain ones, for texts with every kind of escape. */
static void escaped_contents_make_the_same_body(void **state)
{
    (void)state;
    static const char *const texts[] = {
        "You are an expert agent.", "", "a \"quote\", a \\ and /", "line\nbreak\r\n\ttab\b\f",
        "ctl \x01\x1f and caf\xc3\xa9 \xe2\x82\xac",
        "Your task is to: put a clean lettuce in diningtable.\nThis is the first step."};
    size_t nt = SR_ARRAY_LEN(texts);
    for (size_t i = 0; i < nt; i++) {
        llm_message_t plain[2] = {{"system", texts[i]}, {"user", texts[(i + 1) % nt]}};
        llm_message_t esc[2] = {{"system", NULL}, {"user", NULL}};
        char *own[2];
        for (int k = 0; k < 2; k++) {
            sr_buf_t b = SR_BUF_INIT;
            jsonw_t w;
            jsonw_init(&w, &b);
            jsonw_str(&w, plain[k].content);
            own[k] = jsonw_finish(&w);
            size_t len = strlen(own[k]);
            memmove(own[k], own[k] + 1, len - 2); /* the quotes off */
            own[k][len - 2] = '\0';
            esc[k].content = own[k];
        }
        for (size_t n = 1; n <= 2; n++) {
            llm_chat_t chat = s_chat();
            chat.messages = plain + 2 - n;
            chat.n_messages = n;
            char *want = llm_chat_body(&chat);
            chat.messages = esc + 2 - n;
            chat.contents_json = true;
            char *got = llm_chat_body(&chat);
            assert_non_null(want);
            assert_non_null(got);
            assert_string_equal(got, want);
            free(got);
            /* the contents' lengths given by the caller (the actor's rendered prompt) instead of
             * measured: the same body, escaped and plain */
            size_t lens[2];
            for (size_t k = 0; k < n; k++)
                lens[k] = strlen(chat.messages[k].content);
            chat.content_lens = lens;
            got = llm_chat_body(&chat);
            assert_non_null(got);
            assert_string_equal(got, want);
            free(got);
            chat.messages = plain + 2 - n;
            chat.contents_json = false;
            for (size_t k = 0; k < n; k++)
                lens[k] = strlen(chat.messages[k].content);
            got = llm_chat_body(&chat);
            assert_non_null(got);
            assert_string_equal(got, want);
            free(got);
            free(want);
            /* a message without content is "" whatever length the caller gave for it */
            llm_message_t none[2] = {plain[2 - n], {.role = "user", .content = NULL}};
            chat.messages = none;
            chat.n_messages = 2;
            chat.content_lens = NULL;
            want = llm_chat_body(&chat);
            size_t lies[2] = {0, 4096};
            chat.content_lens = lies;
            got = llm_chat_body(&chat);
            assert_non_null(want);
            assert_non_null(got);
            assert_string_equal(got, want);
            assert_non_null(strstr(got, "\"content\":\"\"}"));
            free(got);
            free(want);
        }
        free(own[0]);
        free(own[1]);
    }
}

static void request_body_carries_the_openai_fields(void **state)
{
    (void)state;
    const char *stop[] = {"</action>"};
    llm_chat_t chat = s_chat();
    chat.top_p = 0.95;
    chat.stop = stop;
    chat.n_stop = 1;
    chat.has_seed = true;
    chat.seed = 1234;
    chat.logprobs = true;
    char *body = llm_chat_body(&chat);
    assert_non_null(body);
    cJSON *j = cJSON_Parse(body);
    assert_non_null(j);
    assert_string_equal(cJSON_GetObjectItem(j, "model")->valuestring, "selroll-v0");
    cJSON *msgs = cJSON_GetObjectItem(j, "messages");
    assert_int_equal(cJSON_GetArraySize(msgs), 2);
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(msgs, 1), "role")->valuestring, "user");
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(msgs, 1), "content")->valuestring, MSGS[1].content);
    assert_true(cJSON_GetObjectItem(j, "temperature")->valuedouble == 0.7);
    assert_true(cJSON_GetObjectItem(j, "top_p")->valuedouble == 0.95);
    assert_int_equal(cJSON_GetObjectItem(j, "max_tokens")->valueint, 256);
    assert_string_equal(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "stop"), 0)->valuestring, "</action>");
    assert_int_equal(cJSON_GetObjectItem(j, "seed")->valueint, 1234);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(j, "logprobs")));
    assert_true(cJSON_IsFalse(cJSON_GetObjectItem(j, "stream")));
    assert_int_equal(cJSON_GetObjectItem(j, "n")->valueint, 1);
    cJSON_Delete(j);
    free(body);

    /* A seed is an exact integer, a negative one masked to 63 bits. */
    const struct {
        int64_t seed;
        const char *text;
    } seeds[] = {{0, ",\"seed\":0,"},
                 {9007199254740993, ",\"seed\":9007199254740993,"},
                 {INT64_MAX, ",\"seed\":9223372036854775807,"},
                 {-1, ",\"seed\":9223372036854775807,"},
                 {INT64_MIN, ",\"seed\":0,"}};
    for (size_t i = 0; i < SR_ARRAY_LEN(seeds); i++) {
        chat = s_chat();
        chat.has_seed = true;
        chat.seed = seeds[i].seed;
        body = llm_chat_body(&chat);
        assert_non_null(strstr(body, seeds[i].text));
        free(body);
    }

    /* Left-out fields stay out. */
    chat = s_chat();
    chat.temperature = -1;
    chat.max_tokens = 0;
    body = llm_chat_body(&chat);
    j = cJSON_Parse(body);
    assert_null(cJSON_GetObjectItem(j, "temperature"));
    assert_null(cJSON_GetObjectItem(j, "top_p"));
    assert_null(cJSON_GetObjectItem(j, "max_tokens"));
    assert_null(cJSON_GetObjectItem(j, "seed"));
    assert_null(cJSON_GetObjectItem(j, "logprobs"));
    cJSON_Delete(j);
    free(body);
    chat.n_messages = 0;
    assert_null(llm_chat_body(&chat));
    assert_null(llm_chat_body(NULL));
}

/* s_ref_body is the request body as a cJSON tree of the same fields prints it: the reference the
 * hand-written llm_chat_body must match byte for byte. */
static char *s_ref_body(const llm_chat_t *req)
{
    cJSON *root = cJSON_CreateObject();
    if (req->model)
        cJSON_AddStringToObject(root, "model", req->model);
    cJSON *msgs = cJSON_AddArrayToObject(root, "messages");
    for (size_t i = 0; i < req->n_messages; i++) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddItemToArray(msgs, m);
        const llm_message_t *lm = &req->messages[i];
        cJSON_AddStringToObject(m, "role", lm->role ? lm->role : "user");
        cJSON_AddStringToObject(m, "content", lm->content ? lm->content : "");
    }
    if (req->temperature >= 0)
        cJSON_AddNumberToObject(root, "temperature", req->temperature);
    if (req->top_p >= 0)
        cJSON_AddNumberToObject(root, "top_p", req->top_p);
    if (req->max_tokens > 0)
        cJSON_AddNumberToObject(root, "max_tokens", req->max_tokens);
    if (req->n_stop > 0 && req->stop) {
        cJSON *stop = cJSON_AddArrayToObject(root, "stop");
        for (size_t i = 0; i < req->n_stop; i++)
            if (req->stop[i])
                cJSON_AddItemToArray(stop, cJSON_CreateString(req->stop[i]));
    }
    if (req->has_seed) {
        /* an exact integer, which cJSON's number printer (a double) cannot give */
        char num[24];
        snprintf(num, sizeof num, "%lld", (long long)(req->seed & LLM_SEED_MAX));
        cJSON_AddRawToObject(root, "seed", num);
    }
    if (req->logprobs)
        cJSON_AddTrueToObject(root, "logprobs");
    cJSON_AddNumberToObject(root, "n", 1);
    cJSON_AddFalseToObject(root, "stream");
    char *out = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return out;
}

static void s_same_body(const llm_chat_t *req)
{
    char *mine = llm_chat_body(req);
    char *ref = s_ref_body(req);
    assert_non_null(mine);
    assert_string_equal(mine, ref);
    free(mine);
    cJSON_free(ref);
}

static void request_body_is_byte_for_byte_what_cjson_prints(void **state)
{
    (void)state;
    llm_chat_t chat = s_chat();
    s_same_body(&chat);
    const llm_message_t odd[] = {
        {.role = "system", .content = "Quotes \"x\", backslash \\, tab\t, cr\r, nl\n, bell \a, "
                                      "esc \x1b, DEL \x7f, slash /"},
        {.role = NULL, .content = "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x8d\x8e, stray \x80\xff"},
        {.role = "assistant", .content = NULL},
        {.role = "user", .content = ""},
    };
    const char *stop[] = {"</action>", NULL, "\n\n", "\xe2\x80\x94"};
    chat.messages = odd;
    chat.n_messages = 4;
    chat.stop = stop;
    chat.n_stop = 4;
    chat.logprobs = true;
    /* changing and repeated values (the writer keeps the text of the last one) */
    const double temps[] = {0, 0.7, 1, 1.3333333333333333, -1, -0.0, 0.30000000000000004, 1e-7, 0, 0.7};
    const int64_t seeds[] = {0, 1, 2147483647, 2147483648, 1234567890123456789, INT64_MAX};
    for (size_t t = 0; t < SR_ARRAY_LEN(temps); t++) {
        for (size_t k = 0; k < SR_ARRAY_LEN(seeds); k++) {
            chat.temperature = temps[t];
            chat.top_p = t % 2 ? 0.95 : -1;
            chat.max_tokens = (int)(t * 100);
            chat.has_seed = k % 3 != 2;
            chat.seed = seeds[k];
            chat.model = k == 1 ? NULL : "selroll-policy-v12";
            s_same_body(&chat);
        }
    }
}

static int s_parse_fixture(const char *name, llm_response_t *r, llm_parsed_t **st)
{
    size_t len;
    char *body = harness_fixture(name, &len);
    memset(r, 0, sizeof *r);
    int rc = llm_parse_chat_response(body, len, r, st);
    free(body);
    return rc;
}

static void each_server_success_shape_parses(void **state)
{
    (void)state;
    const struct {
        const char *file, *content, *finish, *model;
        long pt, ct;
    } cases[] = {
        {"vllm_chat_ok.json", "<think>The lettuce is probably on the countertop.</think><action>go to countertop 1</action>",
         "stop", "Qwen/Qwen2.5-7B-Instruct", 412, 19},
        {"sglang_chat_ok.json", "<think>I hold the lettuce; it must be cleaned.</think><action>go to sinkbasin 1</action>",
         "stop", "Qwen/Qwen2.5-7B-Instruct", 455, 23},
        {"llamacpp_chat_ok.json", "<think>The fridge is closed.</think><action>open fridge 1</action>", "stop",
         "gpt-3.5-turbo", 398, 17},
        {"ollama_chat_ok.json", "<think>The apple should be heated.</think>\n<action>heat apple 1 with microwave 1</action>",
         "stop", "qwen2.5:7b", 420, 21},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        llm_response_t r;
        llm_parsed_t *st = NULL;
        assert_int_equal(s_parse_fixture(cases[i].file, &r, &st), 0);
        assert_string_equal(r.content, cases[i].content);
        assert_string_equal(r.finish_reason, cases[i].finish);
        assert_string_equal(r.model, cases[i].model);
        assert_int_equal(r.prompt_tokens, cases[i].pt);
        assert_int_equal(r.completion_tokens, cases[i].ct);
        assert_false(r.has_logprob);
        llm_parsed_free(&st);
        assert_null(st);
    }
}

static void logprobs_present_are_summed(void **state)
{
    (void)state;
    llm_response_t r;
    llm_parsed_t *st = NULL;
    assert_int_equal(s_parse_fixture("vllm_chat_logprobs.json", &r, &st), 0);
    assert_string_equal(r.content, "<action>look</action>");
    assert_true(r.has_logprob);
    assert_true(r.logprob_sum == -1.875);
    llm_parsed_free(&st);
}

static void missing_usage_and_null_content_are_not_errors(void **state)
{
    (void)state;
    llm_response_t r;
    llm_parsed_t *st = NULL;
    assert_int_equal(s_parse_fixture("no_usage.json", &r, &st), 0);
    assert_int_equal(r.prompt_tokens, -1);
    assert_int_equal(r.completion_tokens, -1);
    assert_string_equal(r.finish_reason, "length");
    llm_parsed_free(&st);

    /* A reasoning model cut off by max_tokens: content null, the answer is simply empty. */
    assert_int_equal(s_parse_fixture("null_content.json", &r, &st), 0);
    assert_string_equal(r.content, "");
    assert_string_equal(r.finish_reason, "length");
    assert_int_equal(r.completion_tokens, 256);
    llm_parsed_free(&st);
}

static void malformed_bodies_give_clear_errors(void **state)
{
    (void)state;
    const struct {
        const char *file, *error;
    } cases[] = {
        {"truncated.json", "invalid JSON at byte "},
        {"empty_choices.json", "no choices in response"},
        {"chunk_object.json", "streaming chunk where a full response was expected"},
        {"stream_chunk.txt", "invalid JSON at byte 0"},
        {"proxy_502.html", "invalid JSON at byte 0"},
        {"vllm_error_404.json", "server error: The model `selroll-v9` does not exist."},
        {"openai_error_503.json", "server error: queue full"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        llm_response_t r;
        llm_parsed_t *st = NULL;
        int rc = s_parse_fixture(cases[i].file, &r, &st);
        assert_int_equal(rc, SR_EPROTO);
        assert_null(st);
        if (strncmp(r.error, cases[i].error, strlen(cases[i].error)) != 0)
            fail_msg("%s: got \"%s\", want \"%s\"", cases[i].file, r.error, cases[i].error);
    }
    const struct {
        const char *body, *error;
    } inline_cases[] = {
        {"", "empty response body"},
        {"[1,2,3]", "response is not a JSON object"},
        {"{\"choices\": 7}", "no choices in response"},
        {"{\"choices\": [{\"index\": 0}]}", "first choice has no message"},
        {"{\"choices\": [{\"message\": {\"content\": 42}}]}", "message content is not a string"},
        {"{\"choices\": [{\"message\": {\"content\": \"x\"}}]", "invalid JSON at byte"},
        {"{\"detail\": \"Not Found\"}", "no choices in response"},
    };
    for (size_t i = 0; i < sizeof inline_cases / sizeof inline_cases[0]; i++) {
        llm_response_t r;
        llm_parsed_t *st = NULL;
        assert_int_equal(llm_parse_chat_response(inline_cases[i].body, strlen(inline_cases[i].body), &r, &st),
                         SR_EPROTO);
        if (strncmp(r.error, inline_cases[i].error, strlen(inline_cases[i].error)) != 0)
            fail_msg("body %s: got \"%s\"", inline_cases[i].body, r.error);
    }
    /* The truncated fixture ends inside a string: the error names the first byte of that
     * unterminated string. */
    size_t len;
    char *t = harness_fixture("truncated.json", &len);
    llm_response_t r;
    llm_parsed_t *st = NULL;
    assert_int_equal(llm_parse_chat_response(t, len, &r, &st), SR_EPROTO);
    char want[64];
    snprintf(want, sizeof want, "invalid JSON at byte %zu", (size_t)(strrchr(t, '"') - t) + 1);
    assert_string_equal(r.error, want);
    free(t);
}

static void random_and_cut_bodies_never_crash(void **state)
{
    (void)state;
    size_t len;
    char *good = harness_fixture("vllm_chat_logprobs.json", &len);
    uint64_t x = 88172645463325252ull;
    for (size_t cut = 0; cut <= len; cut++) {
        llm_response_t r;
        llm_parsed_t *st = NULL;
        int rc = llm_parse_chat_response(good, cut, &r, &st);
        assert_true(rc == SR_OK || rc == SR_EPROTO);
        assert_true(rc != SR_OK || st != NULL);
        llm_parsed_free(&st);
    }
    char *buf = malloc(len);
    for (int round = 0; round < 2000; round++) {
        memcpy(buf, good, len);
        for (int k = 0; k < 4; k++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            buf[x % len] = (char)(x >> 32);
        }
        llm_response_t r;
        llm_parsed_t *st = NULL;
        int rc = llm_parse_chat_response(buf, len, &r, &st);
        assert_true(rc == SR_OK || rc == SR_EPROTO);
        assert_true(rc == SR_OK || r.error[0] != '\0');
        llm_parsed_free(&st);
    }
    free(buf);
    free(good);
}

static void error_bodies_of_each_server_yield_their_message(void **state)
{
    (void)state;
    const struct {
        const char *file, *msg;
    } cases[] = {
        {"vllm_error_404.json", "The model `selroll-v9` does not exist."},
        {"vllm_error_nested.json", "The model `selroll-v9` does not exist."},
        {"sglang_error_400.json", "Requested token count exceeds the model's maximum context length of 32768 tokens."},
        {"llamacpp_error_503.json", "Loading model"},
        {"llamacpp_error_400.json", "the request exceeds the available context size, try increasing it"},
        {"ollama_error_404.json", "model \"qwen2.5:7b\" not found, try pulling it first"},
        {"openai_error_503.json", "queue full"},
        {"proxy_502.html", "<html>"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t len;
        char *body = harness_fixture(cases[i].file, &len);
        char msg[200];
        llm_error_message(body, len, msg, sizeof msg);
        if (strcmp(msg, cases[i].msg) != 0)
            fail_msg("%s: got \"%s\"", cases[i].file, msg);
        free(body);
    }
    char msg[200];
    llm_error_message("{\"detail\":[{\"loc\":[\"body\",\"messages\"],\"msg\":\"field required\"}]}", 62, msg, sizeof msg);
    assert_non_null(strstr(msg, "field required"));
    llm_error_message("", 0, msg, sizeof msg);
    assert_string_equal(msg, "");
    llm_error_message("line one\nline two", 17, msg, sizeof msg);
    assert_string_equal(msg, "line one");
}

/* ---- round trips --------------------------------------------------------------------------- */

static void each_server_shape_round_trips_through_reactor_hooks(void **state)
{
    (void)state;
    tsrv_t srv;
    s_srv_start(&srv);
    const char *files[] = {"vllm_chat_ok.json", "sglang_chat_ok.json", "llamacpp_chat_ok.json",
                           "ollama_chat_ok.json", "vllm_chat_logprobs.json"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char route[128];
        snprintf(route, sizeof route, "/fix/200/%s", files[i]);
        seen_t seen;
        s_one(&srv, route, 0, 5000, &seen);
        if (seen.rc != 0)
            fail_msg("%s: %s", files[i], seen.error);
        assert_int_equal(seen.http, 200);
        assert_int_equal(seen.attempts, 1);
        assert_non_null(strstr(seen.content, "<action>"));
        assert_true(seen.pt > 0 && seen.ct > 0);
        assert_true(seen.latency > 0);
        assert_int_equal(seen.has_lp, i == 4);
    }
    s_srv_stop(&srv);
}

static void request_body_and_headers_reach_the_server(void **state)
{
    (void)state;
    tsrv_t srv;
    s_srv_start(&srv);
    rx_t rx;
    llm_client_t *c = s_client(&rx, &srv, "/echo", 0, 5000);
    llm_chat_t chat = s_chat();
    chat.has_seed = true;
    chat.seed = 42;
    chat.logprobs = true;
    seen_t seen = {0};
    assert_non_null(llm_client_chat(c, &chat, s_done, &seen));
    rx_run(&rx, &seen.calls, 5000);
    assert_int_equal(seen.rc, 0);
    assert_string_equal(seen.content, "<action>look</action>");
    assert_true(rx.watch_calls > 0 && rx.timer_calls > 0); /* the hooks were the path */
    llm_client_destroy(&c);

    assert_string_equal(srv.last_auth, "Bearer sk-selroll-test");
    assert_string_equal(srv.last_ctype, "application/json");
    cJSON *j = cJSON_Parse(srv.last_body);
    assert_non_null(j);
    assert_string_equal(cJSON_GetObjectItem(j, "model")->valuestring, "selroll-v0");
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "messages")), 2);
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "messages"), 0), "content")->valuestring,
                        MSGS[0].content);
    assert_true(cJSON_GetObjectItem(j, "temperature")->valuedouble == 0.7);
    assert_int_equal(cJSON_GetObjectItem(j, "seed")->valueint, 42);
    assert_int_equal(cJSON_GetObjectItem(j, "max_tokens")->valueint, 256);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(j, "logprobs")));
    assert_true(cJSON_IsFalse(cJSON_GetObjectItem(j, "stream")));
    cJSON_Delete(j);
    s_srv_stop(&srv);
}

/* A kept-alive connection stays watched between requests (no unwatch and watch again for each);
 * one the server closes while idle is unwatched when it reports it, and none is left watched at
 * the end. */
static void an_idle_connection_stays_watched_until_it_closes(void **state)
{
    (void)state;
    tsrv_t srv;
    s_srv_start(&srv);
    rx_t rx;
    llm_client_t *c = s_client(&rx, &srv, "/echo", 0, 5000);
    llm_chat_t chat = s_chat();
    int fd = -1;
    for (int i = 0; i < 4; i++) {
        seen_t seen = {0};
        assert_non_null(llm_client_chat(c, &chat, s_done, &seen));
        rx_run(&rx, &seen.calls, 5000);
        assert_int_equal(seen.rc, 0);
        assert_int_equal(rx.n, 1); /* the connection, idle and still watched */
        if (i == 0)
            fd = rx.fds[0].fd;
        assert_int_equal(rx.fds[0].fd, fd); /* the same connection each time */
    }
    assert_int_equal(rx.unwatch_calls, 0);
    /* the server goes away: the idle connection reports its end and is unwatched */
    s_srv_stop(&srv);
    rx_run(&rx, NULL, 300);
    assert_int_equal(rx.n, 0);
    assert_int_equal(rx.unwatch_calls, 1);
    llm_client_destroy(&c);
    assert_int_equal(rx.n, 0);
    assert_int_equal(rx.unwatch_calls, 1);
}

static void http_4xx_is_reported_with_the_server_message_and_not_retried(void **state)
{
    (void)state;
    tsrv_t srv;
    s_srv_start(&srv);
    const struct {
        const char *route, *error;
    } cases[] = {
        {"/fix/404/vllm_error_404.json", "HTTP 404: The model `selroll-v9` does not exist."},
        {"/fix/400/sglang_error_400.json",
         "HTTP 400: Requested token count exceeds the model's maximum context length of 32768 tokens."},
        {"/fix/400/llamacpp_error_400.json", "HTTP 400: the request exceeds the available context size, try increasing it"},
        {"/fix/404/ollama_error_404.json", "HTTP 404: model \"qwen2.5:7b\" not found, try pulling it first"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int before = s_srv_get(&srv, &srv.hits);
        seen_t seen;
        s_one(&srv, cases[i].route, 3, 5000, &seen);
        assert_int_equal(seen.rc, SR_EHTTP);
        assert_string_equal(seen.error, cases[i].error);
        assert_int_equal(seen.attempts, 1);
        assert_int_equal(s_srv_get(&srv, &srv.hits) - before, 1);
    }
    s_srv_stop(&srv);
}

static void wrong_content_type_is_rejected(void **state)
{
    (void)state;
    tsrv_t srv;
    s_srv_start(&srv);
    seen_t seen;
    s_one(&srv, "/fix/200/proxy_502.html", 0, 5000, &seen);
    assert_int_equal(seen.rc, SR_EPROTO);
    assert_string_equal(seen.error, "unexpected content type text/html");
    s_one(&srv, "/fix/200/stream_chunk.txt", 0, 5000, &seen);
    assert_int_equal(seen.rc, SR_EPROTO);
    assert_string_equal(seen.error, "unexpected content type text/event-stream");
    /* Right type, bad body. */
    s_one(&srv, "/fix/200/truncated.json", 0, 5000, &seen);
    assert_int_equal(seen.rc, SR_EPROTO);
    assert_non_null(strstr(seen.error, "invalid JSON at byte"));
    s_one(&srv, "/fix/200/empty_choices.json", 0, 5000, &seen);
    assert_string_equal(seen.error, "no choices in response");
    /* A proxy's HTML 502 is retried, then reported with its first line. */
    s_one(&srv, "/fix/502/proxy_502.html", 1, 5000, &seen);
    assert_int_equal(seen.rc, SR_EHTTP);
    assert_int_equal(seen.attempts, 2);
    assert_string_equal(seen.error, "HTTP 502: <html>");
    s_srv_stop(&srv);
}

static void http_503_is_retried_with_backoff_then_succeeds(void **state)
{
    (void)state;
    tsrv_t srv;
    s_srv_start(&srv);
    srv.flaky_left = 2;
    seen_t seen;
    int64_t t0 = harness_now_ms();
    s_one(&srv, "/flaky/x", 3, 5000, &seen);
    int64_t took = harness_now_ms() - t0;
    assert_int_equal(seen.rc, 0);
    assert_int_equal(seen.attempts, 3);
    assert_int_equal(s_srv_get(&srv, &srv.hits), 3);
    assert_string_equal(seen.content, "<action>look</action>");
    assert_true(took >= 5 + 10); /* two back-offs of at least 5 and 10 ms (half of 10, 20) */

    /* Retries run out: the last error is reported. */
    srv.flaky_left = 100;
    s_one(&srv, "/flaky/x", 2, 5000, &seen);
    assert_int_equal(seen.rc, SR_EHTTP);
    assert_int_equal(seen.http, 503);
    assert_int_equal(seen.attempts, 3);
    assert_string_equal(seen.error, "HTTP 503: queue full");

    /* The llama.cpp "Loading model" 503 is retried the same way. */
    s_one(&srv, "/fix/503/llamacpp_error_503.json", 1, 5000, &seen);
    assert_int_equal(seen.attempts, 2);
    assert_string_equal(seen.error, "HTTP 503: Loading model");
    s_srv_stop(&srv);
}

static void connection_errors_are_retried_and_reported(void **state)
{
    (void)state;
    seen_t seen;
    /* Nobody listens on a fresh free port. */
    s_one(NULL, "", 2, 5000, &seen);
    assert_int_equal(seen.rc, SR_EIO);
    assert_int_equal(seen.attempts, 3);
    assert_int_equal(seen.http, 0);
    assert_true(strncmp(seen.error, "connection error: ", 18) == 0);

    /* A server that closes without answering. */
    tsrv_t srv;
    s_srv_start(&srv);
    s_one(&srv, "/drop", 1, 5000, &seen);
    assert_int_equal(seen.rc, SR_EIO);
    assert_int_equal(seen.attempts, 2);
    assert_int_equal(s_srv_get(&srv, &srv.hits), 2);
    s_srv_stop(&srv);
}

static void slow_response_times_out_without_retry(void **state)
{
    (void)state;
    tsrv_t srv;
    s_srv_start(&srv);
    seen_t seen;
    int64_t t0 = harness_now_ms();
    s_one(&srv, "/slow/3000", 3, 300, &seen);
    int64_t took = harness_now_ms() - t0;
    assert_int_equal(seen.rc, SR_ETIMEDOUT);
    assert_string_equal(seen.error, "timeout after 300 ms");
    assert_int_equal(seen.attempts, 1);
    assert_true(took >= 290 && took < 2500);

    /* Within the timeout, the dribbled answer arrives whole. */
    s_one(&srv, "/slow/100", 0, 5000, &seen);
    assert_int_equal(seen.rc, 0);
    assert_string_equal(seen.content, "<action>look</action>");
    s_srv_stop(&srv);
}

static void abort_closes_the_connection_and_no_callback_follows(void **state)
{
    (void)state;
    tsrv_t srv;
    s_srv_start(&srv);
    rx_t rx;
    llm_client_t *c = s_client(&rx, &srv, "/slow/3000", 0, 10000);
    llm_chat_t chat = s_chat();
    seen_t seen = {0};
    llm_request_t *req = llm_client_chat(c, &chat, s_done, &seen);
    assert_non_null(req);
    /* the server is now generating (a loaded or sanitized build may take a while to get there) */
    int64_t up = harness_now_ms() + 3000;
    while (s_srv_get(&srv, &srv.hits) == 0 && harness_now_ms() < up)
        rx_run(&rx, NULL, 10);
    rx_run(&rx, NULL, 20);
    assert_int_equal(s_srv_get(&srv, &srv.hits), 1);
    assert_int_equal(s_srv_get(&srv, &srv.slow_disconnects), 0);
    llm_request_abort(req);
    assert_int_equal(llm_client_pending(c), 0);
    assert_int_equal(rx.n, 0); /* the socket was handed back */

    int64_t end = harness_now_ms() + 2000;
    while (s_srv_get(&srv, &srv.slow_disconnects) == 0 && harness_now_ms() < end)
        rx_run(&rx, NULL, 10);
    assert_int_equal(s_srv_get(&srv, &srv.slow_disconnects), 1);
    rx_run(&rx, NULL, 50);
    assert_int_equal(seen.calls, 0);
    llm_client_stats_t st;
    llm_client_stats(c, &st);
    assert_int_equal(st.aborted, 1);
    assert_int_equal(st.started, 1);
    assert_int_equal(st.succeeded + st.failed, 0);

    /* The client still works after an abort. */
    llm_request_abort(NULL);
    llm_client_destroy(&c);
    s_one(&srv, "/echo", 0, 5000, &seen);
    assert_int_equal(seen.rc, 0);
    s_srv_stop(&srv);
}

static void abort_during_backoff_drops_the_retry(void **state)
{
    (void)state;
    tsrv_t srv;
    s_srv_start(&srv);
    srv.flaky_left = 100;
    char base[128];
    snprintf(base, sizeof base, "http://127.0.0.1:%d/flaky/y", srv.port);
    llm_client_cfg_t cfg = {.base_url = base, .max_retries = 5, .backoff_base_ms = 400, .jitter_seed = 1};
    rx_t rx = {.timer_due = -1};
    llm_client_t *c = llm_client_new(&cfg, &RX_HOOKS, &rx);
    rx.c = c;
    llm_chat_t chat = s_chat();
    seen_t seen = {0};
    llm_request_t *req = llm_client_chat(c, &chat, s_done, &seen);
    int64_t end = harness_now_ms() + 2000;
    while (s_srv_get(&srv, &srv.hits) < 1 && harness_now_ms() < end)
        rx_run(&rx, NULL, 5);
    /* the 503 arrived when it is counted; the retry waits >= 200 ms after it */
    llm_client_stats_t st;
    llm_client_stats(c, &st);
    while (st.throttled == 0 && harness_now_ms() < end) {
        rx_run(&rx, NULL, 1);
        llm_client_stats(c, &st);
    }
    assert_int_equal(st.throttled, 1);
    assert_int_equal(s_srv_get(&srv, &srv.hits), 1);
    assert_int_equal(llm_client_pending(c), 1);
    assert_true(rx.timer_due >= 0);
    llm_request_abort(req);
    assert_int_equal(llm_client_pending(c), 0);
    rx_run(&rx, NULL, 600);
    assert_int_equal(s_srv_get(&srv, &srv.hits), 1); /* no retry went out */
    assert_int_equal(seen.calls, 0);
    llm_client_destroy(&c);
    s_srv_stop(&srv);
}

static void oversized_response_is_refused(void **state)
{
    (void)state;
    tsrv_t srv;
    s_srv_start(&srv);
    char base[128];
    snprintf(base, sizeof base, "http://127.0.0.1:%d/big", srv.port);
    llm_client_cfg_t cfg = {.base_url = base, .max_response_bytes = 64 * 1024, .max_retries = -1};
    llm_client_t *c = llm_client_new(&cfg, NULL, NULL);
    llm_chat_t chat = s_chat();
    seen_t seen = {0};
    assert_non_null(llm_client_chat(c, &chat, s_done, &seen));
    assert_int_equal(llm_client_run_until_idle(c, 5000), 0);
    assert_int_equal(seen.calls, 1);
    assert_int_equal(seen.rc, SR_ETOOBIG);
    assert_string_equal(seen.error, "response larger than 65536 bytes");
    llm_client_destroy(&c);
    s_srv_stop(&srv);
}

static void seed_is_an_exact_integer_and_steps_differ_in_the_low_bits(void **state)
{
    (void)state;
    llm_chat_t chat = s_chat();
    chat.has_seed = true;
    /* 2^53 + 1 and 2^53 + 2: the same double, two different integers */
    const int64_t seeds[] = {9007199254740993LL, 9007199254740994LL, 1227844342346046700LL, INT64_MAX};
    char *prev = NULL;
    for (size_t i = 0; i < SR_ARRAY_LEN(seeds); i++) {
        chat.seed = seeds[i];
        char *body = llm_chat_body(&chat);
        char want[64];
        snprintf(want, sizeof want, "\"seed\":%lld,", (long long)seeds[i]);
        if (!strstr(body, want))
            fail_msg("%s not in %s", want, body);
        const char *num = strstr(body, "\"seed\":") + 7;
        assert_int_equal(strspn(num, "0123456789"), strcspn(num, ",")); /* digits only */
        if (prev)
            assert_string_not_equal(prev, body);
        free(prev);
        prev = body;
    }
    free(prev);
    /* A negative seed is sent within 0..LLM_SEED_MAX, never above INT64_MAX. */
    chat.seed = -1;
    char *body = llm_chat_body(&chat);
    assert_non_null(strstr(body, "\"seed\":9223372036854775807,"));
    free(body);
}

static void reasoning_beside_content_is_parsed_with_its_token_count(void **state)
{
    (void)state;
    const struct {
        const char *body, *reasoning, *content;
        long reasoning_tokens;
    } cases[] = {
        /* vLLM (older) / SGLang / llama.cpp: reasoning_content */
        {"{\"model\":\"m\",\"choices\":[{\"message\":{\"role\":\"assistant\",\"reasoning_content\":"
         "\"The mug is in the cabinet.\",\"content\":\"<action>open cabinet 1</action>\"},"
         "\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":20,"
         "\"completion_tokens_details\":{\"reasoning_tokens\":12}}}",
         "The mug is in the cabinet.", "<action>open cabinet 1</action>", 12},
        /* Ollama / newer vLLM: reasoning; no details */
        {"{\"model\":\"qwen3:8b\",\"system_fingerprint\":\"fp_ollama\",\"choices\":[{\"message\":"
         "{\"role\":\"assistant\",\"content\":\"<action>look</action>\",\"reasoning\":\"Look first.\"},"
         "\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":8}}",
         "Look first.", "<action>look</action>", -1},
        /* reasoning_content null (SGLang without a parser): no reasoning */
        {"{\"choices\":[{\"message\":{\"content\":\"x\",\"reasoning_content\":null}}]}", NULL, "x", -1},
    };
    for (size_t i = 0; i < SR_ARRAY_LEN(cases); i++) {
        llm_response_t r;
        llm_parsed_t *st = NULL;
        assert_int_equal(llm_parse_chat_response(cases[i].body, strlen(cases[i].body), &r, &st), 0);
        assert_string_equal(r.content, cases[i].content);
        if (cases[i].reasoning)
            assert_string_equal(r.reasoning, cases[i].reasoning);
        else
            assert_null(r.reasoning);
        assert_int_equal(r.reasoning_tokens, cases[i].reasoning_tokens);
        llm_parsed_free(&st);
    }
    /* Only reasoning, content null (cut by max_tokens): the content is empty, the reasoning kept. */
    llm_response_t r;
    llm_parsed_t *st = NULL;
    assert_int_equal(s_parse_fixture("null_content.json", &r, &st), 0);
    assert_string_equal(r.content, "");
    assert_string_equal(r.reasoning, "Let me think about where the mug could be");
    llm_parsed_free(&st);
    /* The built-in server's fingerprint names the version that answered. */
    const char *own = "{\"model\":\"selroll-policy\",\"system_fingerprint\":\"selroll-policy-v3\","
                      "\"choices\":[{\"message\":{\"content\":\"a\"}}]}";
    assert_int_equal(llm_parse_chat_response(own, strlen(own), &r, &st), 0);
    assert_string_equal(r.system_fingerprint, "selroll-policy-v3");
    assert_string_equal(r.model, "selroll-policy");
    llm_parsed_free(&st);
}

static void missing_usage_leaves_every_count_unknown(void **state)
{
    (void)state;
    const char *body = "{\"choices\":[{\"message\":{\"content\":\"a\",\"reasoning\":\"b\"}}]}";
    llm_response_t r;
    llm_parsed_t *st = NULL;
    assert_int_equal(llm_parse_chat_response(body, strlen(body), &r, &st), 0);
    assert_int_equal(r.prompt_tokens, -1);
    assert_int_equal(r.completion_tokens, -1);
    assert_int_equal(r.reasoning_tokens, -1);
    llm_parsed_free(&st);
    /* usage present but without completion_tokens: that one is unknown, not 0 */
    body = "{\"choices\":[{\"message\":{\"content\":\"a\"}}],\"usage\":{\"prompt_tokens\":4}}";
    assert_int_equal(llm_parse_chat_response(body, strlen(body), &r, &st), 0);
    assert_int_equal(r.prompt_tokens, 4);
    assert_int_equal(r.completion_tokens, -1);
    llm_parsed_free(&st);
}

static void http_429_waits_for_retry_after_then_succeeds(void **state)
{
    (void)state;
    tsrv_t srv;
    s_srv_start(&srv);
    seen_t seen;
    srv.throttle_left = 1;
    int64_t t0 = harness_now_ms();
    s_one(&srv, "/throttle/429/1", 3, 5000, &seen);
    int64_t took = harness_now_ms() - t0;
    assert_int_equal(seen.rc, 0);
    assert_int_equal(seen.attempts, 2);
    assert_int_equal(seen.throttled, 1);
    assert_true(took >= 950); /* Retry-After: 1, where the back-off alone is 5..10 ms */

    /* 503 with an HTTP date in the past: retried after the usual back-off. */
    srv.throttle_left = 2;
    t0 = harness_now_ms();
    s_one(&srv, "/throttle/503/Wed,_21_Oct_2015_07:28:00_GMT", 3, 5000, &seen);
    assert_int_equal(seen.rc, 0);
    assert_int_equal(seen.attempts, 3);
    assert_int_equal(seen.throttled, 2);
    assert_true(harness_now_ms() - t0 < 900);

    /* 429 without Retry-After: the back-off; retries run out with the server's message. */
    srv.throttle_left = 100;
    s_one(&srv, "/throttle/429/none", 2, 5000, &seen);
    assert_int_equal(seen.rc, SR_EHTTP);
    assert_int_equal(seen.http, 429);
    assert_int_equal(seen.attempts, 3);
    assert_string_equal(seen.error, "HTTP 429: rate limited");

    /* Retry-After is capped by retry_after_max_ms. */
    char base[128];
    snprintf(base, sizeof base, "http://127.0.0.1:%d/throttle/429/3600/v1", srv.port);
    llm_client_cfg_t cfg = {.base_url = base, .max_retries = 1, .backoff_base_ms = 10,
                            .retry_after_max_ms = 200};
    llm_client_t *c = llm_client_new(&cfg, NULL, NULL);
    srv.throttle_left = 1;
    llm_chat_t chat = s_chat();
    memset(&seen, 0, sizeof seen);
    t0 = harness_now_ms();
    assert_non_null(llm_client_chat(c, &chat, s_done, &seen));
    assert_int_equal(llm_client_run_until_idle(c, 5000), 0);
    took = harness_now_ms() - t0;
    assert_int_equal(seen.rc, 0);
    assert_true(took >= 190 && took < 3000);
    llm_client_stats_t st;
    llm_client_stats(c, &st);
    assert_int_equal(st.throttled, 1);
    assert_int_equal(st.retries, 1);
    llm_client_destroy(&c);

    /* Other 4xx are not retried. */
    srv.throttle_left = 100;
    s_one(&srv, "/throttle/400/1", 3, 5000, &seen);
    assert_int_equal(seen.http, 400);
    assert_int_equal(seen.attempts, 1);
    assert_int_equal(seen.throttled, 0);
    s_srv_stop(&srv);
}

static void a_12k_token_answer_with_logprobs_fits_the_default_limit(void **state)
{
    (void)state;
    tsrv_t srv;
    s_srv_start(&srv);
    char base[128];
    snprintf(base, sizeof base, "http://127.0.0.1:%d/long", srv.port);
    llm_client_cfg_t cfg = {.base_url = base, .max_retries = -1};
    llm_client_t *c = llm_client_new(&cfg, NULL, NULL);
    llm_chat_t chat = s_chat();
    seen_t seen = {0};
    assert_non_null(llm_client_chat(c, &chat, s_done, &seen));
    assert_int_equal(llm_client_run_until_idle(c, 10000), 0);
    assert_int_equal(seen.rc, 0);
    assert_int_equal(seen.content_len, 60000);
    assert_int_equal(seen.ct, 12000);
    assert_true(seen.has_lp && seen.lp == -6000.0);
    llm_client_destroy(&c);
    /* The same body beyond a 1 MiB limit is refused. */
    cfg.max_response_bytes = 1024 * 1024;
    c = llm_client_new(&cfg, NULL, NULL);
    memset(&seen, 0, sizeof seen);
    assert_non_null(llm_client_chat(c, &chat, s_done, &seen));
    assert_int_equal(llm_client_run_until_idle(c, 10000), 0);
    assert_int_equal(seen.rc, SR_ETOOBIG);
    llm_client_destroy(&c);
    s_srv_stop(&srv);
}

static void model_list_is_fetched_and_parsed(void **state)
{
    (void)state;
    char *u = llm_models_url("http://127.0.0.1:8000");
    assert_string_equal(u, "http://127.0.0.1:8000/v1/models");
    free(u);
    u = llm_models_url("https://gpu7:30000/v1/chat/completions");
    assert_string_equal(u, "https://gpu7:30000/v1/models");
    free(u);
    assert_null(llm_models_url("ftp://x"));

    tsrv_t srv;
    s_srv_start(&srv);
    rx_t rx;
    llm_client_t *c = s_client(&rx, &srv, "", 0, 5000);
    seen_t seen = {0};
    assert_non_null(llm_client_models(c, s_done, &seen));
    rx_run(&rx, &seen.calls, 5000);
    assert_int_equal(seen.rc, 0);
    assert_string_equal(seen.models, "Qwen/Qwen3-8B,selroll-policy-v0"); /* an entry without id is skipped */
    /* a chat request after it still posts (the GET's handle is not reused) */
    llm_chat_t chat = s_chat();
    memset(&seen, 0, sizeof seen);
    assert_non_null(llm_client_chat(c, &chat, s_done, &seen));
    rx_run(&rx, &seen.calls, 5000);
    assert_int_equal(seen.rc, 0);
    assert_string_equal(seen.content, "<action>look</action>");
    llm_client_destroy(&c);
    s_srv_stop(&srv);

    llm_response_t r;
    llm_parsed_t *st = NULL;
    assert_int_equal(llm_parse_models_response("{\"data\":5}", 11, &r, &st), SR_EPROTO);
    assert_string_equal(r.error, "model list has no data array");
    assert_null(st);
    assert_int_equal(llm_parse_models_response("<html>", 6, &r, &st), SR_EPROTO);
    assert_string_equal(r.error, "model list is not JSON");
}

/* A unix: base URL: chat requests over the client's own connections (hooks) and over curl (the
 * blocking driver), the model list and an admin POST over curl, all through the socket. */
static void a_unix_socket_url_carries_chat_models_and_admin_posts(void **state)
{
    (void)state;
    char dir[] = "/tmp/sr-llmuds-XXXXXX", path[64], base[80];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/policy.sock", dir);
    snprintf(base, sizeof base, "unix:%s", path);
    char *u = llm_chat_url(base);
    assert_string_equal(u, "http://localhost/v1/chat/completions");
    free(u);
    u = llm_models_url(base);
    assert_string_equal(u, "http://localhost/v1/models");
    free(u);
    tsrv_t srv;
    s_srv_start_uds(&srv, path);
    llm_client_cfg_t cfg = {.base_url = base, .max_retries = -1, .timeout_ms = 5000,
                            .api_key = "sk-selroll-test"};
    rx_t rx;
    memset(&rx, 0, sizeof rx);
    rx.timer_due = -1;
    llm_client_t *c = llm_client_new(&cfg, &RX_HOOKS, &rx);
    assert_non_null(c);
    rx.c = c;
    assert_true(c->h1); /* chat requests on the client's own connections */
    llm_chat_t chat = s_chat();
    for (int i = 0; i < 2; i++) { /* the second on the kept connection */
        seen_t seen = {0};
        assert_non_null(llm_client_chat(c, &chat, s_done, &seen));
        rx_run(&rx, &seen.calls, 5000);
        assert_int_equal(seen.rc, 0);
        assert_string_equal(seen.content, "<action>look</action>");
    }
    assert_string_equal(srv.last_auth, "Bearer sk-selroll-test");
    seen_t seen = {0};
    assert_non_null(llm_client_models(c, s_done, &seen)); /* curl */
    rx_run(&rx, &seen.calls, 5000);
    assert_int_equal(seen.rc, 0);
    assert_string_equal(seen.models, "Qwen/Qwen3-8B,selroll-policy-v0");
    memset(&seen, 0, sizeof seen);
    assert_non_null(llm_client_post(c, "/v1/load_lora_adapter", "{\"lora_name\":\"a\"}", s_done,
                                    &seen)); /* curl */
    rx_run(&rx, &seen.calls, 5000);
    assert_int_equal(seen.calls, 1);
    assert_int_equal(s_srv_get(&srv, &srv.hits), 4);
    assert_string_equal(srv.last_body, "{\"lora_name\":\"a\"}");
    llm_client_destroy(&c);
    assert_int_equal(rx.n, 0);

    c = llm_client_new(&cfg, NULL, NULL); /* the blocking driver: curl for chat too */
    assert_non_null(c);
    assert_false(c->h1);
    memset(&seen, 0, sizeof seen);
    assert_non_null(llm_client_chat(c, &chat, s_done, &seen));
    assert_int_equal(llm_client_run_until_idle(c, 5000), 0);
    assert_int_equal(seen.rc, 0);
    assert_string_equal(seen.content, "<action>look</action>");
    assert_int_equal(s_srv_get(&srv, &srv.hits), 5);
    llm_client_destroy(&c);
    s_srv_stop(&srv);
    rmdir(dir);
}

/* A unix: URL whose socket file is missing, or has no server, is a connection error, retried as
 * a refused TCP connection is, on both paths. */
static void a_missing_unix_socket_is_a_connection_error_and_retried(void **state)
{
    (void)state;
    char dir[] = "/tmp/sr-llmuds-XXXXXX", path[64], base[80];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/policy.sock", dir);
    snprintf(base, sizeof base, "unix:%s", path);
    llm_client_cfg_t cfg = {.base_url = base, .max_retries = 2, .backoff_base_ms = 10,
                            .backoff_max_ms = 40, .timeout_ms = 5000, .jitter_seed = 7};
    llm_chat_t chat = s_chat();
    for (int dead = 0; dead < 2; dead++) {
        if (dead) { /* a socket file nobody listens on: refused */
            int fd = socket(AF_UNIX, SOCK_STREAM, 0);
            struct sockaddr_un a = {.sun_family = AF_UNIX};
            snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
            assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
            close(fd);
        }
        rx_t rx;
        memset(&rx, 0, sizeof rx);
        rx.timer_due = -1;
        llm_client_t *c = llm_client_new(&cfg, &RX_HOOKS, &rx);
        assert_non_null(c);
        rx.c = c;
        seen_t seen = {0};
        assert_non_null(llm_client_chat(c, &chat, s_done, &seen));
        assert_int_equal(seen.calls, 0); /* never from inside llm_client_chat */
        rx_run(&rx, &seen.calls, 5000);
        assert_int_equal(seen.rc, SR_EIO);
        assert_int_equal(seen.attempts, 3);
        assert_int_equal(seen.http, 0);
        assert_true(strncmp(seen.error, "connection error: ", 18) == 0);
        assert_non_null(strstr(seen.error, path));
        llm_client_destroy(&c);
        assert_int_equal(rx.n, 0);

        c = llm_client_new(&cfg, NULL, NULL); /* curl */
        memset(&seen, 0, sizeof seen);
        assert_non_null(llm_client_chat(c, &chat, s_done, &seen));
        assert_int_equal(llm_client_run_until_idle(c, 5000), 0);
        assert_int_equal(seen.rc, SR_EIO);
        assert_int_equal(seen.attempts, 3);
        assert_true(strncmp(seen.error, "connection error: ", 18) == 0);
        llm_client_destroy(&c);
    }
    unlink(path);
    rmdir(dir);
}

/* Bad base URLs are refused with one line saying what is wrong; good ones pass. */
static void bad_unix_urls_are_refused_with_one_line(void **state)
{
    (void)state;
    char long_url[160] = "unix:/";
    memset(long_url + 6, 'a', 120);
    long_url[126] = '\0';
    const char *bad[][2] = {
        {"unix:", "absolute"},
        {"unix:policy.sock", "absolute"},
        {long_url, "longer than 107"},
        {"unix:/tmp/a\nb.sock", "control character"},
        {"ftp://x", "not an http://, https:// or unix: URL"},
        {"http://", "no host"},
        {"Unix:/tmp/p.sock", "not an http://"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[300] = "";
        assert_int_equal(llm_url_check(bad[i][0], err, sizeof err), SR_EINVAL);
        assert_non_null(strstr(err, bad[i][1]));
        assert_null(strchr(err, '\n')); /* one line */
        assert_null(llm_chat_url(bad[i][0]));
        llm_client_cfg_t cfg = {.base_url = bad[i][0]};
        assert_null(llm_client_new(&cfg, NULL, NULL));
    }
    assert_int_equal(llm_url_check("unix:/run/selroll/policy.sock", NULL, 0), SR_OK);
    assert_int_equal(llm_url_check("http://127.0.0.1:8000/v1", NULL, 0), SR_OK);
    assert_string_equal(llm_url_unix("unix:/x.sock"), "/x.sock");
    assert_string_equal(llm_url_unix("unix:///run/x.sock"), "/run/x.sock"); /* Redis's form */
    assert_int_equal(llm_url_check("unix:///run/x.sock", NULL, 0), SR_OK);
    assert_null(llm_url_unix("http://x"));
    assert_null(llm_url_unix(NULL));
}

static void blocking_driver_runs_concurrent_requests(void **state)
{
    (void)state;
    tsrv_t srv;
    s_srv_start(&srv);
    llm_client_t *c = s_client(NULL, &srv, "/fix/200/ollama_chat_ok.json", 0, 5000);
    assert_int_equal(llm_client_run_until_idle(c, 10), 0); /* nothing pending: idle at once */
    llm_chat_t chat = s_chat();
    seen_t seen[8];
    memset(seen, 0, sizeof seen);
    for (int i = 0; i < 8; i++)
        assert_non_null(llm_client_chat(c, &chat, s_done, &seen[i]));
    assert_int_equal(llm_client_pending(c), 8);
    assert_int_equal(llm_client_run_until_idle(c, 5000), 0);
    for (int i = 0; i < 8; i++) {
        assert_int_equal(seen[i].calls, 1);
        assert_int_equal(seen[i].rc, 0);
        assert_string_equal(seen[i].content,
                            "<think>The apple should be heated.</think>\n<action>heat apple 1 with microwave 1</action>");
    }
    llm_client_stats_t st;
    llm_client_stats(c, &st);
    assert_int_equal(st.succeeded, 8);
    llm_client_destroy(&c);

    /* The blocking driver is refused for a client on hooks; its deadline is kept. */
    rx_t rx;
    c = s_client(&rx, &srv, "/slow/2000", 0, 5000);
    assert_int_equal(llm_client_run_until_idle(c, 10), SR_EUNSUPPORTED);
    llm_client_destroy(&c);
    c = s_client(NULL, &srv, "/slow/2000", 0, 5000);
    assert_non_null(llm_client_chat(c, &chat, s_done, &seen[0]));
    assert_int_equal(llm_client_run_until_idle(c, 50), SR_ETIMEDOUT);
    llm_client_destroy(&c); /* destroy with a request in flight: no callback */
    s_srv_stop(&srv);
}

typedef struct {
    llm_client_t *c;
    int left;
    int done;
    int ok;
} chain_t;

static void s_chain_done(const llm_response_t *r, void *arg)
{
    chain_t *ch = arg;
    ch->ok += r->rc == 0;
    if (--ch->left > 0) {
        llm_chat_t chat = s_chat();
        assert_non_null(llm_client_chat(ch->c, &chat, s_chain_done, ch));
    } else {
        ch->done = 1;
    }
}

static void done_callback_may_start_the_next_request(void **state)
{
    (void)state;
    tsrv_t srv;
    s_srv_start(&srv);
    rx_t rx;
    llm_client_t *c = s_client(&rx, &srv, "/echo", 0, 5000);
    chain_t ch = {.c = c, .left = 5};
    llm_chat_t chat = s_chat();
    assert_non_null(llm_client_chat(c, &chat, s_chain_done, &ch));
    rx_run(&rx, &ch.done, 5000);
    assert_int_equal(ch.done, 1);
    assert_int_equal(ch.ok, 5);
    assert_int_equal(s_srv_get(&srv, &srv.hits), 5);
    llm_client_destroy(&c);
    s_srv_stop(&srv);
    assert_null(llm_client_chat(NULL, &chat, s_chain_done, &ch));
}

/* Token ids in vLLM's shape (prompt_token_ids on the response, token_ids on the choice), SGLang's
 * (both on the choice), SGLang's sglext, and vLLM's "token_id:N" strings; logprobs one per token. */
/* The scanner reads token_ids and logprob numbers without the JSON parser: every form must give
 * what the parser gives (ids: the JSON array; logprobs: (float)strtod of the text), including the
 * forms it leaves to the parser (fractions, exponents, leading zeros, 16+ digits, 1e22+). */
static void scanned_ids_and_logprobs_equal_what_the_parser_reads(void **state)
{
    (void)state;
    const char *nums[] = {"0",     "-0",        "-0.5",   "-1",   "-12.75",  "-0.000123456789",
                          "-1e-3", "-1.5E+2",   "-00.5",  "-3.0", "-0.1",    "-9999.0",
                          "-0.693147180559945",   "-0.6931471805599453", "-1234567890123456789",
                          "-0.0000000000000000000000123", "-1.00000000000000000000"};
    for (size_t i = 0; i < SR_ARRAY_LEN(nums); i++) {
        char body[512];
        snprintf(body, sizeof body,
                 "{\"choices\":[{\"message\":{\"content\":\"x\"},\"logprobs\":{\"content\":"
                 "[{\"token\":\"a\",\"logprob\":%s},{\"token\":\"b\",\"logprob\":-2}]},"
                 "\"token_ids\":[ 0 , 2147483647,12 ]}]}",
                 nums[i]);
        llm_response_t r;
        llm_parsed_t *st = NULL;
        assert_int_equal(llm_parse_chat_response(body, strlen(body), &r, &st), 0);
        double x = strtod(nums[i], NULL);
        float want = (float)(x < -1e30 ? -1e30 : x > 0 ? 0 : x);
        assert_int_equal(r.n_token_logprobs, 2);
        if (memcmp(&r.token_logprobs[0], &want, 4) != 0)
            fail_msg("logprob %s: read %.9g, strtod %.9g", nums[i], (double)r.token_logprobs[0],
                     (double)want);
        assert_true(r.logprob_sum == x + -2.0);
        assert_int_equal(r.n_token_ids, 3);
        assert_int_equal(r.token_ids[0], 0);
        assert_int_equal(r.token_ids[1], 2147483647);
        assert_int_equal(r.token_ids[2], 12);
        llm_parsed_free(&st);
    }
    /* ids the scanner leaves to the parser, and what the parser makes of them */
    struct {
        const char *ids;
        size_t n;
        int32_t last;
    } forms[] = {{"[01,2]", 2, 2},      {"[1e1,2]", 2, 2},       {"[3.0]", 1, 3},
                 {"[2147483648]", 0, 0}, {"[99999999999]", 0, 0}, {"[]", 0, 0},
                 {"[1,]", 0, 0},         {"[ 5 ]", 1, 5},         {"[7, -1]", 0, 0},
                 {"[0]", 1, 0},          {"[42]", 1, 42}};
    for (size_t i = 0; i < SR_ARRAY_LEN(forms); i++) {
        char body[512];
        snprintf(body, sizeof body,
                 "{\"choices\":[{\"message\":{\"content\":\"x\"},\"token_ids\":%s}]}",
                 forms[i].ids);
        llm_response_t r;
        llm_parsed_t *st = NULL;
        int rc = llm_parse_chat_response(body, strlen(body), &r, &st);
        if (!strcmp(forms[i].ids, "[1,]")) { /* not JSON */
            assert_int_not_equal(rc, 0);
            continue;
        }
        assert_int_equal(rc, 0);
        if (r.n_token_ids != forms[i].n)
            fail_msg("token_ids %s: %zu ids, want %zu", forms[i].ids, r.n_token_ids, forms[i].n);
        if (forms[i].n)
            assert_int_equal(r.token_ids[forms[i].n - 1], forms[i].last);
        llm_parsed_free(&st);
    }
}

static void token_ids_are_parsed_from_each_servers_shape(void **state)
{
    (void)state;
    const char *lp = "\"logprobs\":{\"content\":[{\"token\":\"token_id:7\",\"logprob\":-0.5},"
                     "{\"token\":\"token_id:151645\",\"logprob\":-0.25}]}";
    char bodies[4][512];
    snprintf(bodies[0], sizeof bodies[0],
             "{\"prompt_token_ids\":[1,2,3],\"choices\":[{\"message\":{\"content\":\"x\"},"
             "\"token_ids\":[7,151645],%s}],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}",
             lp);
    snprintf(bodies[1], sizeof bodies[1],
             "{\"choices\":[{\"message\":{\"content\":\"x\"},\"prompt_token_ids\":[1,2,3],"
             "\"token_ids\":[7,151645],%s}]}", lp);
    snprintf(bodies[2], sizeof bodies[2],
             "{\"choices\":[{\"message\":{\"content\":\"x\"},%s}],\"sglext\":{"
             "\"prompt_token_ids\":[1,2,3],\"completion_token_ids\":[7,151645]}}", lp);
    snprintf(bodies[3], sizeof bodies[3],
             "{\"prompt_token_ids\":[1,2,3],\"choices\":[{\"message\":{\"content\":\"x\"},%s}]}", lp);
    for (int i = 0; i < 4; i++) {
        llm_response_t r;
        llm_parsed_t *st = NULL;
        assert_int_equal(llm_parse_chat_response(bodies[i], strlen(bodies[i]), &r, &st), 0);
        assert_int_equal(r.n_token_ids, 2);
        assert_int_equal(r.token_ids[0], 7);
        assert_int_equal(r.token_ids[1], 151645);
        assert_int_equal(r.n_prompt_token_ids, 3);
        assert_int_equal(r.prompt_token_ids[2], 3);
        assert_int_equal(r.n_token_logprobs, 2);
        assert_true(r.token_logprobs[0] == -0.5f && r.token_logprobs[1] == -0.25f);
        assert_true(r.has_logprob && r.logprob_sum == -0.75);
        llm_parsed_free(&st);
    }
    /* the scanner of logprobs.content: nested top_logprobs, escaped strings, a "logprobs" inside
     * the content text and a key order with logprobs before message */
    const char *nested =
        "{\"choices\":[{\"index\":0,\"logprobs\":{\"content\":[{\"token\":\"a\\\"}\",\"bytes\":[97],"
        "\"logprob\":-1.5e-1,\"top_logprobs\":[{\"token\":\"b\",\"logprob\":-9}]},"
        "{\"top_logprobs\":[],\"logprob\":-0.25,\"token\":\"]\"}]},\"message\":{\"content\":"
        "\"\\\"logprobs\\\":{\"},\"token_ids\":[4,5]}]}";
    {
        llm_response_t r;
        llm_parsed_t *st = NULL;
        assert_int_equal(llm_parse_chat_response(nested, strlen(nested), &r, &st), 0);
        assert_string_equal(r.content, "\"logprobs\":{");
        assert_int_equal(r.n_token_ids, 2);
        assert_int_equal(r.token_ids[1], 5);
        assert_int_equal(r.n_token_logprobs, 2);
        assert_true(r.token_logprobs[0] == -0.15f && r.token_logprobs[1] == -0.25f);
        assert_true(r.has_logprob && fabs(r.logprob_sum + 0.4) < 1e-12);
        llm_parsed_free(&st);
    }
    /* no ids: none; plain token strings are no ids; a bad id keeps none */
    const char *none[] = {
        "{\"choices\":[{\"message\":{\"content\":\"x\"},\"logprobs\":{\"content\":"
        "[{\"token\":\"x\",\"logprob\":-1}]}}]}",
        "{\"choices\":[{\"message\":{\"content\":\"x\"},\"token_ids\":[1,-2]}]}",
        "{\"choices\":[{\"message\":{\"content\":\"x\"},\"token_ids\":[1.5]}]}",
        "{\"choices\":[{\"message\":{\"content\":\"x\"},\"token_ids\":\"1 2\"}]}",
    };
    for (size_t i = 0; i < SR_ARRAY_LEN(none); i++) {
        llm_response_t r;
        llm_parsed_t *st = NULL;
        assert_int_equal(llm_parse_chat_response(none[i], strlen(none[i]), &r, &st), 0);
        assert_int_equal(r.n_token_ids, 0);
        assert_null(r.token_ids);
        llm_parsed_free(&st);
    }
    /* the request asks with vLLM's and SGLang's field name */
    llm_message_t m = {.role = "user", .content = "hi"};
    llm_chat_t req = {.model = "m", .messages = &m, .n_messages = 1, .temperature = -1,
                      .top_p = -1, .logprobs = true, .token_ids = true};
    char *body = llm_chat_body(&req);
    assert_non_null(strstr(body, "\"logprobs\":true,\"return_token_ids\":true"));
    free(body);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(token_ids_are_parsed_from_each_servers_shape),
    cmocka_unit_test(scanned_ids_and_logprobs_equal_what_the_parser_reads),
    cmocka_unit_test(base_urls_are_normalised),
    cmocka_unit_test(request_body_carries_the_openai_fields),
    cmocka_unit_test(escaped_contents_make_the_same_body),
    cmocka_unit_test(request_body_is_byte_for_byte_what_cjson_prints),
    cmocka_unit_test(each_server_success_shape_parses),
    cmocka_unit_test(logprobs_present_are_summed),
    cmocka_unit_test(missing_usage_and_null_content_are_not_errors),
    cmocka_unit_test(malformed_bodies_give_clear_errors),
    cmocka_unit_test(random_and_cut_bodies_never_crash),
    cmocka_unit_test(error_bodies_of_each_server_yield_their_message),
    cmocka_unit_test(each_server_shape_round_trips_through_reactor_hooks),
    cmocka_unit_test(an_idle_connection_stays_watched_until_it_closes),
    cmocka_unit_test(request_body_and_headers_reach_the_server),
    cmocka_unit_test(http_4xx_is_reported_with_the_server_message_and_not_retried),
    cmocka_unit_test(wrong_content_type_is_rejected),
    cmocka_unit_test(http_503_is_retried_with_backoff_then_succeeds),
    cmocka_unit_test(connection_errors_are_retried_and_reported),
    cmocka_unit_test(slow_response_times_out_without_retry),
    cmocka_unit_test(abort_closes_the_connection_and_no_callback_follows),
    cmocka_unit_test(abort_during_backoff_drops_the_retry),
    cmocka_unit_test(oversized_response_is_refused),
    cmocka_unit_test(blocking_driver_runs_concurrent_requests),
    cmocka_unit_test(done_callback_may_start_the_next_request),
    cmocka_unit_test(seed_is_an_exact_integer_and_steps_differ_in_the_low_bits),
    cmocka_unit_test(reasoning_beside_content_is_parsed_with_its_token_count),
    cmocka_unit_test(missing_usage_leaves_every_count_unknown),
    cmocka_unit_test(http_429_waits_for_retry_after_then_succeeds),
    cmocka_unit_test(a_12k_token_answer_with_logprobs_fits_the_default_limit),
    cmocka_unit_test(model_list_is_fetched_and_parsed),
    cmocka_unit_test(a_unix_socket_url_carries_chat_models_and_admin_posts),
    cmocka_unit_test(a_missing_unix_socket_is_a_connection_error_and_retried),
    cmocka_unit_test(bad_unix_urls_are_refused_with_one_line),
};

HARNESS_MAIN("llm_client", tests)
