/*
 * test_llm_h1.c — the client's own HTTP/1.1 path (common/llm_client_h1.c) against a scripted
 * server on a free loopback port: answers framed each way HTTP/1.1 allows (chunked with
 * extensions and trailers, in pieces; close-delimited HTTP/1.0; 100 Continue first), one
 * connection kept for the next request, a kept connection the server closed sent again on a fresh
 * one without an attempt counted, Retry-After as an HTTP date, a reply that is no HTTP, and a
 * timeout on time after an earlier request's answer.
 * tests/test_llm_client.c runs the client's common behaviours (retries, timeouts, aborts,
 * limits) through the same path against libmicrohttpd.
 */
#include "tests/harness.h"

#include "common/llm_client.h"
#include "common/sr.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BODY "{\"choices\":[{\"message\":{\"content\":\"<action>look</action>\"}}]}"

/* One scripted reply: its pieces written with a pause between them, then the connection closed
 * when close_after. */
typedef struct {
    const char *pieces[6];
    bool close_after;
} reply_t;

typedef struct {
    int lfd, port;
    pthread_t th;
    volatile bool stop;
    const reply_t *replies;
    int n_replies, next;
    int accepts, requests;
    char last[8192]; /* the last whole request's bytes */
    size_t last_len;
    pthread_mutex_t mu;
} srv_t;

/* s_request_done tells whether buf holds a whole request (head and Content-Length bytes). */
static bool s_request_done(const char *buf, size_t n, size_t *used)
{
    const char *end = memmem(buf, n, "\r\n\r\n", 4);
    if (!end)
        return false;
    size_t head = (size_t)(end - buf) + 4;
    const char *cl = strcasestr(buf, "content-length:");
    size_t len = cl && cl < end ? (size_t)strtoul(cl + 15, NULL, 10) : 0;
    if (n < head + len)
        return false;
    *used = head + len;
    return true;
}

static void *s_serve(void *arg)
{
    srv_t *s = arg;
    int fds[16];
    char bufs[16][8192];
    size_t lens[16];
    int nf = 0;
    while (!s->stop) {
        struct pollfd p[17];
        p[0] = (struct pollfd){.fd = s->lfd, .events = POLLIN};
        for (int i = 0; i < nf; i++)
            p[i + 1] = (struct pollfd){.fd = fds[i], .events = POLLIN};
        if (poll(p, (nfds_t)nf + 1, 20) <= 0)
            continue;
        for (int i = nf - 1; i >= 0; i--) { /* backwards: a removal swaps in one already seen */
            if (!(p[i + 1].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            ssize_t n = recv(fds[i], bufs[i] + lens[i], sizeof bufs[i] - 1 - lens[i], 0);
            size_t used;
            bool gone = n <= 0;
            if (!gone) {
                lens[i] += (size_t)n;
                bufs[i][lens[i]] = '\0';
            }
            if (!gone && s_request_done(bufs[i], lens[i], &used)) {
                pthread_mutex_lock(&s->mu);
                memcpy(s->last, bufs[i], used);
                s->last_len = used;
                pthread_mutex_unlock(&s->mu);
                memmove(bufs[i], bufs[i] + used, lens[i] - used);
                lens[i] -= used;
                pthread_mutex_lock(&s->mu);
                s->requests++;
                const reply_t *r = s->next < s->n_replies ? &s->replies[s->next++] : NULL;
                pthread_mutex_unlock(&s->mu);
                for (int k = 0; r && k < 6 && r->pieces[k]; k++) {
                    if (k > 0)
                        usleep(20000);
                    if (send(fds[i], r->pieces[k], strlen(r->pieces[k]), MSG_NOSIGNAL) < 0)
                        break;
                }
                gone = !r || r->close_after;
            }
            if (gone) {
                close(fds[i]);
                fds[i] = fds[--nf];
                lens[i] = lens[nf];
                memcpy(bufs[i], bufs[nf], lens[i]);
            }
        }
        if ((p[0].revents & POLLIN) && nf < 16) {
            int fd = accept(s->lfd, NULL, NULL);
            if (fd >= 0) {
                fds[nf] = fd;
                lens[nf++] = 0;
                pthread_mutex_lock(&s->mu);
                s->accepts++;
                pthread_mutex_unlock(&s->mu);
            }
        }
    }
    for (int i = 0; i < nf; i++)
        close(fds[i]);
    return NULL;
}

static void s_start(srv_t *s, const reply_t *replies, int n)
{
    memset(s, 0, sizeof *s);
    pthread_mutex_init(&s->mu, NULL);
    s->replies = replies;
    s->n_replies = n;
    s->lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(s->lfd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(s->lfd, 16), 0);
    socklen_t al = sizeof a;
    getsockname(s->lfd, (struct sockaddr *)&a, &al);
    s->port = ntohs(a.sin_port);
    pthread_create(&s->th, NULL, s_serve, s);
}

static void s_stop(srv_t *s)
{
    s->stop = true;
    pthread_join(s->th, NULL);
    close(s->lfd);
    pthread_mutex_destroy(&s->mu);
}

static int s_get(srv_t *s, const int *v)
{
    pthread_mutex_lock(&s->mu);
    int x = *v;
    pthread_mutex_unlock(&s->mu);
    return x;
}

/* ---- a small poll loop for the client's hooks ---- */

typedef struct {
    struct {
        int fd;
        short ev;
    } fds[32];
    int n;
    int64_t timer_at; /* -1 none */
    int timer_fired;
    llm_client_t *c;
} loop_t;

static void s_watch(int fd, bool rd, bool wr, void *arg)
{
    loop_t *l = arg;
    short ev = (short)((rd ? POLLIN : 0) | (wr ? POLLOUT : 0));
    for (int i = 0; i < l->n; i++)
        if (l->fds[i].fd == fd) {
            l->fds[i].ev = ev;
            return;
        }
    l->fds[l->n].fd = fd;
    l->fds[l->n++].ev = ev;
}

static void s_unwatch(int fd, void *arg)
{
    loop_t *l = arg;
    for (int i = 0; i < l->n; i++)
        if (l->fds[i].fd == fd) {
            l->fds[i] = l->fds[--l->n];
            return;
        }
}

static void s_timer(long ms, void *arg)
{
    loop_t *l = arg;
    l->timer_at = ms < 0 ? -1 : harness_now_ms() + ms;
}

static const llm_io_hooks_t HOOKS = {.watch_fd = s_watch, .unwatch_fd = s_unwatch, .set_timer = s_timer};

static void s_run(loop_t *l, const int *done, long ms)
{
    int64_t end = harness_now_ms() + ms;
    while ((!done || !*done) && harness_now_ms() < end) {
        struct pollfd p[32];
        for (int i = 0; i < l->n; i++)
            p[i] = (struct pollfd){.fd = l->fds[i].fd, .events = l->fds[i].ev};
        int n = l->n;
        int wait = 10;
        if (l->timer_at >= 0) {
            int64_t d = l->timer_at - harness_now_ms();
            wait = d < 0 ? 0 : d < wait ? (int)d : wait;
        }
        poll(p, (nfds_t)n, wait);
        for (int i = 0; i < n; i++)
            if (p[i].revents)
                llm_client_on_fd(l->c, p[i].fd, (p[i].revents & (POLLIN | POLLHUP | POLLERR)) != 0,
                                 (p[i].revents & POLLOUT) != 0);
        if (l->timer_at >= 0 && harness_now_ms() >= l->timer_at) {
            l->timer_at = -1;
            l->timer_fired++;
            llm_client_on_timer(l->c);
        }
    }
}

typedef struct {
    int calls, rc, attempts;
    char content[128], error[256];
    llm_client_t *c; /* set: the callback starts one more request */
    llm_chat_t *again;
    struct seen_s *next;
} seen_t;

static void s_done(const llm_response_t *r, void *arg)
{
    seen_t *s = arg;
    s->calls++;
    s->rc = r->rc;
    s->attempts = r->attempts;
    snprintf(s->content, sizeof s->content, "%s", r->rc == 0 && r->content ? r->content : "");
    snprintf(s->error, sizeof s->error, "%s", r->error);
    if (s->c && s->again) {
        llm_client_t *c = s->c;
        s->c = NULL;
        assert_non_null(llm_client_chat(c, s->again, s_done, (seen_t *)s->next));
    }
}

static llm_client_t *s_client(loop_t *l, srv_t *s, long retry_after_max_ms)
{
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", s->port);
    llm_client_cfg_t cfg = {.base_url = url, .timeout_ms = 3000, .max_retries = 2,
                            .backoff_base_ms = 5, .backoff_max_ms = 10,
                            .retry_after_max_ms = retry_after_max_ms, .jitter_seed = 7};
    memset(l, 0, sizeof *l);
    l->timer_at = -1;
    l->c = llm_client_new(&cfg, &HOOKS, l);
    assert_non_null(l->c);
    return l->c;
}

static llm_chat_t s_chat(void)
{
    static const llm_message_t msgs[] = {{.role = "user", .content = "hi"}};
    return (llm_chat_t){.model = "m", .messages = msgs, .n_messages = 1, .temperature = -1,
                        .top_p = -1};
}

#define OK_HEAD_LEN(len) "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " len "\r\n\r\n"

static void chunked_answers_in_pieces_keep_their_connection(void **state)
{
    (void)state;
    const reply_t replies[] = {
        {{"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
          "5;ext=1\r\n{\"cho\r\n",
          "38\r\nices\":[{\"message\":{\"content\":\"<action>look</action>\"}}]}\r\n",
          "0\r\nX-Trailer: 1\r\n\r\n"}, false},
        {{OK_HEAD_LEN("61"), BODY}, false},
    };
    srv_t s;
    s_start(&s, replies, 2);
    loop_t l;
    llm_client_t *c = s_client(&l, &s, 30000);
    llm_chat_t chat = s_chat();
    for (int i = 0; i < 2; i++) {
        seen_t seen = {0};
        assert_non_null(llm_client_chat(c, &chat, s_done, &seen));
        s_run(&l, &seen.calls, 3000);
        assert_int_equal(seen.calls, 1);
        assert_int_equal(seen.rc, 0);
        assert_string_equal(seen.content, "<action>look</action>");
    }
    assert_int_equal(s_get(&s, &s.accepts), 1); /* one connection for both */
    assert_int_equal(l.n, 1);                    /* idle and watched */
    llm_client_destroy(&c);
    assert_int_equal(l.n, 0);
    s_stop(&s);
}

static void http10_close_delimited_and_100_continue_answers_are_read(void **state)
{
    (void)state;
    const reply_t replies[] = {
        {{"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n", BODY}, true},
        {{"HTTP/1.1 100 Continue\r\n\r\n", OK_HEAD_LEN("61") BODY}, false},
        {{"SSH-2.0-OpenSSH\r\n\r\n"}, true},
    };
    srv_t s;
    s_start(&s, replies, 3);
    loop_t l;
    llm_client_t *c = s_client(&l, &s, 30000);
    llm_chat_t chat = s_chat();
    for (int i = 0; i < 2; i++) {
        seen_t seen = {0};
        assert_non_null(llm_client_chat(c, &chat, s_done, &seen));
        s_run(&l, &seen.calls, 3000);
        assert_int_equal(seen.rc, 0);
        assert_string_equal(seen.content, "<action>look</action>");
    }
    assert_int_equal(s_get(&s, &s.accepts), 2); /* the HTTP/1.0 answer closed its connection */
    seen_t seen = {0};
    assert_non_null(llm_client_chat(c, &chat, s_done, &seen));
    s_run(&l, &seen.calls, 3000);
    assert_int_equal(seen.rc, SR_EIO);
    assert_string_equal(seen.error, "connection error: Unsupported HTTP version in response");
    assert_int_equal(seen.attempts, 1);
    llm_client_destroy(&c);
    s_stop(&s);
}

/* Content-Length in each form: plain digits (read without strtoll), leading zeros, a sign,
 * spaces around it; a value with a stray byte or a negative one is the server's error. */
static void content_lengths_in_every_form(void **state)
{
    (void)state;
    const reply_t replies[] = {
        {{"HTTP/1.1 200 OK\r\nContent-Length: 61\r\n\r\n", BODY}, false},
        {{"HTTP/1.1 200 OK\r\ncontent-length:0000000000000000061\r\n\r\n", BODY}, false},
        {{"HTTP/1.1 200 OK\r\nCONTENT-LENGTH: \t +61 \r\n\r\n", BODY}, false},
        {{"HTTP/1.1 200 OK\r\nContent-Length: 61x\r\n\r\n", BODY}, true},
        {{"HTTP/1.1 200 OK\r\nContent-Length: -61\r\n\r\n", BODY}, true},
    };
    srv_t s;
    s_start(&s, replies, 5);
    loop_t l;
    llm_client_t *c = s_client(&l, &s, 30000);
    llm_chat_t chat = s_chat();
    for (int i = 0; i < 5; i++) {
        seen_t seen = {0};
        assert_non_null(llm_client_chat(c, &chat, s_done, &seen));
        s_run(&l, &seen.calls, 3000);
        assert_int_equal(seen.calls, 1);
        if (i < 3) {
            assert_int_equal(seen.rc, 0);
            assert_string_equal(seen.content, "<action>look</action>");
        } else {
            assert_int_equal(seen.rc, SR_EIO);
            assert_string_equal(seen.error, "connection error: Invalid Content-Length: value");
            assert_int_equal(seen.attempts, 1);
        }
    }
    llm_client_destroy(&c);
    s_stop(&s);
}

static void a_kept_connection_the_server_closed_is_replaced_without_an_attempt(void **state)
{
    (void)state;
    /* the first answer is followed by the server closing; the next request, started from the
     * done callback, goes on the kept connection before the client has seen it close */
    const reply_t replies[] = {
        {{OK_HEAD_LEN("61") BODY}, true},
        {{OK_HEAD_LEN("61") BODY}, false},
    };
    srv_t s;
    s_start(&s, replies, 2);
    loop_t l;
    llm_client_t *c = s_client(&l, &s, 30000);
    llm_chat_t chat = s_chat();
    seen_t second = {0};
    seen_t first = {.c = c, .again = &chat, .next = (struct seen_s *)&second};
    assert_non_null(llm_client_chat(c, &chat, s_done, &first));
    s_run(&l, &second.calls, 3000);
    assert_int_equal(first.rc, 0);
    assert_int_equal(second.calls, 1);
    assert_int_equal(second.rc, 0);
    assert_int_equal(second.attempts, 1);
    assert_int_equal(s_get(&s, &s.accepts), 2);
    assert_int_equal(s_get(&s, &s.requests), 2);
    llm_client_stats_t st;
    llm_client_stats(c, &st);
    assert_int_equal(st.retries, 0);
    llm_client_destroy(&c);
    s_stop(&s);
}

static void retry_after_as_an_http_date_is_waited_for(void **state)
{
    (void)state;
    char date[160], head[320];
    time_t t = time(NULL) + 5;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S GMT", &tm);
    snprintf(head, sizeof head,
             "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
             "Retry-After: %s\r\nContent-Length: 2\r\n\r\n{}",
             date);
    const reply_t replies[] = {{{head}, false}, {{OK_HEAD_LEN("61") BODY}, false}};
    srv_t s;
    s_start(&s, replies, 2);
    loop_t l;
    llm_client_t *c = s_client(&l, &s, 300); /* the date is 5 s away: the cap, 300 ms, applies */
    llm_chat_t chat = s_chat();
    seen_t seen = {0};
    int64_t t0 = harness_now_ms();
    assert_non_null(llm_client_chat(c, &chat, s_done, &seen));
    s_run(&l, &seen.calls, 3000);
    int64_t took = harness_now_ms() - t0;
    assert_int_equal(seen.rc, 0);
    assert_int_equal(seen.attempts, 2);
    assert_true(took >= 280); /* the back-off alone is 5..10 ms */
    llm_client_destroy(&c);
    s_stop(&s);
}

/* The timer follows the earliest deadline of the requests without a scan of them at every start
 * and answer: after the first request's answer its deadline, the earliest, is gone, and the timer
 * fires there once, early, then at the second request's own deadline, which times it out on
 * time. */
/* Requests of bodies 2, 4 and 3 digits long, each written into the buffer the one before used:
 * the server gets every body whole, after its own Content-Length. */
static void bodies_of_every_size_go_out_whole_from_reused_buffers(void **state)
{
    (void)state;
    const reply_t replies[] = {
        {{OK_HEAD_LEN("61"), BODY}, false},
        {{OK_HEAD_LEN("61"), BODY}, false},
        {{OK_HEAD_LEN("61"), BODY}, false},
    };
    srv_t s;
    s_start(&s, replies, 3);
    loop_t l;
    llm_client_t *c = s_client(&l, &s, 30000);
    static char big[6000];
    memset(big, 'x', sizeof big - 1);
    big[100] = '"'; /* escaped: the body is longer than the text */
    const char *texts[] = {"", big, "a \"quoted\" line\n"};
    for (int i = 0; i < 3; i++) {
        llm_message_t msg = {.role = "user", .content = texts[i]};
        llm_chat_t chat = {.messages = &msg, .n_messages = 1, .temperature = -1, .top_p = -1};
        char *want = llm_chat_body(&chat);
        assert_non_null(want);
        seen_t seen = {0};
        assert_non_null(llm_client_chat(c, &chat, s_done, &seen));
        s_run(&l, &seen.calls, 3000);
        assert_int_equal(seen.calls, 1);
        assert_int_equal(seen.rc, 0);
        pthread_mutex_lock(&s.mu);
        s.last[s.last_len] = '\0';
        const char *end = strstr(s.last, "\r\n\r\n");
        assert_non_null(end);
        char cl[64];
        snprintf(cl, sizeof cl, "Content-Length: %zu\r\n\r\n", strlen(want));
        assert_non_null(strstr(s.last, cl));
        assert_true(strncmp(s.last, "POST /v1/chat/completions HTTP/1.1\r\n", 36) == 0);
        assert_string_equal(end + 4, want);
        pthread_mutex_unlock(&s.mu);
        free(want);
    }
    assert_int_equal(s_get(&s, &s.accepts), 1);
    llm_client_destroy(&c);
    s_stop(&s);
}

static void a_deadline_after_an_answered_earlier_one_times_out_on_time(void **state)
{
    (void)state;
    const reply_t replies[] = {{{OK_HEAD_LEN("61") BODY}, false}, {{"HTTP/1.1 200 OK\r\n"}, false}};
    srv_t s;
    s_start(&s, replies, 2);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", s.port);
    llm_client_cfg_t cfg = {.base_url = url, .timeout_ms = 400, .max_retries = 0, .jitter_seed = 7};
    loop_t l;
    memset(&l, 0, sizeof l);
    l.timer_at = -1;
    l.c = llm_client_new(&cfg, &HOOKS, &l);
    assert_non_null(l.c);
    llm_chat_t chat = s_chat();
    seen_t a = {0}, b = {0};
    assert_non_null(llm_client_chat(l.c, &chat, s_done, &a));
    s_run(&l, &a.calls, 3000);
    assert_int_equal(a.rc, 0);
    s_run(&l, NULL, 150);
    int64_t t0 = harness_now_ms();
    assert_non_null(llm_client_chat(l.c, &chat, s_done, &b));
    s_run(&l, &b.calls, 5000);
    int64_t took = harness_now_ms() - t0;
    assert_int_equal(b.calls, 1);
    assert_true(b.rc != 0);
    print_message("b: %s after %lld ms, timer fired %d times\n", b.error, (long long)took, l.timer_fired);
    assert_non_null(strstr(b.error, "timeout"));
    assert_true(took >= 395);
    assert_true(took < 400 + 1500);
    assert_true(l.timer_fired >= 1 && l.timer_fired <= 4);
    llm_client_destroy(&l.c);
    s_stop(&s);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(a_deadline_after_an_answered_earlier_one_times_out_on_time),
    cmocka_unit_test(bodies_of_every_size_go_out_whole_from_reused_buffers),
    cmocka_unit_test(chunked_answers_in_pieces_keep_their_connection),
    cmocka_unit_test(http10_close_delimited_and_100_continue_answers_are_read),
    cmocka_unit_test(a_kept_connection_the_server_closed_is_replaced_without_an_attempt),
    cmocka_unit_test(retry_after_as_an_http_date_is_waited_for),
    cmocka_unit_test(content_lengths_in_every_form),
};

HARNESS_MAIN("llm_h1", tests)
