/*
 * test_dashboard.c — the coordinator's dashboard in-process, over a real redis-server, real
 * ZeroMQ bus and real HTTP (libcurl): the snapshot follows the scheduler and the bus, /metrics
 * carries the autoscaling gauges, the token guards everything but /health, and /health turns 503
 * when Redis goes away while the coordinator keeps serving. The gate's figures written to Redis
 * (gate:stats) reach the snapshot and the coordinator's own audit-precision gauge; a damaged
 * hash is read as "unknown", never as a crash.
 */
#include "tests/harness.h"
#include "common/proto.h"
#include "common/sr.h"
#include "common/sr_buf.h"
#include "common/store.h"
#include "common/transport.h"
#include "coordinator/coordinator.h"
#include "coordinator/dashboard.h"
#include "coordinator/dashboard_gate.h"
#include "common/store_group.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    char *data;
    size_t len;
} s_body_t;

static size_t s_collect(char *p, size_t size, size_t n, void *arg)
{
    s_body_t *b = arg;
    b->data = realloc(b->data, b->len + size * n + 1);
    memcpy(b->data + b->len, p, size * n);
    b->len += size * n;
    b->data[b->len] = '\0';
    return size * n;
}

/* s_get fetches http://127.0.0.1:port/path (with the bearer token when token is not NULL) into a
 * new string *out (may be NULL to discard); returns the status code, -1 without an answer. */
static long s_get(int port, const char *path, const char *token, char **out)
{
    char url[256], auth[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
    s_body_t b = {0};
    CURL *h = curl_easy_init();
    struct curl_slist *hl = NULL;
    if (token) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
        hl = curl_slist_append(NULL, auth);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
    }
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, s_collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 5000L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    long code = -1;
    if (curl_easy_perform(h) == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    curl_slist_free_all(hl);
    curl_easy_cleanup(h);
    if (out)
        *out = b.data;
    else
        free(b.data);
    return code;
}

static void *s_run_main(void *arg)
{
    coord_run(arg);
    return NULL;
}

/* s_state fetches and parses the snapshot (NULL when not there yet). */
static cJSON *s_state(int port)
{
    char *body = NULL;
    cJSON *o = NULL;
    if (s_get(port, "/api/state", "tok", &body) == 200)
        o = cJSON_Parse(body);
    free(body);
    return o;
}

static void s_publish_action(transport_sock_t *pub, int traj, int step)
{
    proto_msg_t m;
    proto_msg_init(&m, PROTO_ACTION);
    m.u.action.run = "dash";
    m.u.action.group = "r0000-g0000";
    m.u.action.traj = traj;
    m.u.action.step = step;
    m.u.action.action = "go to countertop 1";
    sr_buf_t b;
    sr_buf_init(&b);
    assert_int_equal(proto_encode(&m, &b), SR_OK);
    assert_int_equal(transport_send_topic(pub, "act/dash/r0000-g0000", b.data, b.len), SR_OK);
    sr_buf_free(&b);
}

/* An event stream read for a while on its own thread: the "event: state" lines it got. */
typedef struct {
    int port;
    long ms;
    int events;
    s_body_t b;
} s_stream_t;

static size_t s_stream_collect(char *p, size_t size, size_t n, void *arg)
{
    s_stream_t *st = arg;
    return s_collect(p, size, n, &st->b);
}

static void *s_stream_main(void *arg)
{
    s_stream_t *st = arg;
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/api/events", st->port);
    CURL *h = curl_easy_init();
    struct curl_slist *hl = curl_slist_append(NULL, "Authorization: Bearer tok");
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, s_stream_collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, st);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, st->ms);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_perform(h); /* ends by its timeout */
    curl_slist_free_all(hl);
    curl_easy_cleanup(h);
    for (const char *q = st->b.data; q && (q = strstr(q, "event: state")); q++)
        st->events++;
    free(st->b.data);
    return NULL;
}

/* s_snapshot_ms is the snapshot's now_ms (when it was built), -1 without one. */
static double s_snapshot_ms(int port)
{
    cJSON *st = s_state(port);
    double v = st ? cJSON_GetNumberValue(cJSON_GetObjectItem(st, "now_ms")) : -1;
    cJSON_Delete(st);
    return v;
}

/* s_redis_cli runs redis-cli against port with args and returns its first output line. */
static void s_redis_cli(int port, const char *args, char *line, size_t len)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "redis-cli -p %d %s", port, args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    line[0] = '\0';
    if (!fgets(line, (int)len, p))
        line[0] = '\0';
    pclose(p);
}

/* s_gate_state waits until the snapshot's "gate" object has audit_groups == want (-1: until it
 * says recorded false) and returns it (caller deletes the snapshot *root). */
static cJSON *s_gate_state(int port, int want, cJSON **root)
{
    int64_t deadline = harness_now_ms() + 10000;
    while (harness_now_ms() < deadline) {
        cJSON *st = s_state(port);
        cJSON *g = st ? cJSON_GetObjectItem(st, "gate") : NULL;
        cJSON *ag = g ? cJSON_GetObjectItem(g, "audit_groups") : NULL;
        if (g && ((want < 0 && cJSON_IsFalse(cJSON_GetObjectItem(g, "recorded"))) ||
                  (want >= 0 && cJSON_IsNumber(ag) && ag->valueint == want))) {
            *root = st;
            return g;
        }
        cJSON_Delete(st);
        usleep(50 * 1000);
    }
    *root = NULL;
    return NULL;
}

static void the_gate_figures_in_redis_reach_the_snapshot_and_the_gauge(void **state)
{
    (void)state;
    harness_redis_t redis;
    assert_int_equal(harness_redis_start(&redis), 0);
    coord_cfg_t cfg;
    coord_cfg_init(&cfg);
    cfg.run = "dashg";
    cfg.redis_url = redis.url;
    cfg.work_bind = "tcp://127.0.0.1:*";
    cfg.bus_pub_bind = "tcp://127.0.0.1:*";
    cfg.bus_sub_bind = "tcp://127.0.0.1:*";
    cfg.groups = 1;
    cfg.group_size = 4;
    char err[512] = "";
    coord_t *c = coord_new(&cfg, err, sizeof err);
    assert_non_null(c);
    dashboard_cfg_t dc;
    dashboard_cfg_init(&dc);
    dc.http = "127.0.0.1:0";
    dc.period_ms = 50;
    dc.redis_every_ms = 100;
    dashboard_t *d = dashboard_new(c, &dc, err, sizeof err);
    assert_non_null(d);
    int port = dashboard_port(d);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, s_run_main, c), 0);

    /* No gate yet: "recorded": false and the gauge at -1. */
    cJSON *root = NULL;
    cJSON *g = s_gate_state(port, -1, &root);
    assert_non_null(g);
    cJSON_Delete(root);
    char *text = NULL;
    assert_int_equal(s_get(port, "/metrics", NULL, &text), 200);
    assert_non_null(strstr(text, "# TYPE selroll_coordinator_gate_audit_precision gauge\n"));
    assert_non_null(strstr(text, "\nselroll_coordinator_gate_audit_precision -1\n"));
    free(text);

    /* A gate (audit over paper, the learned model learning) has written its figures. */
    char line[128];
    s_redis_cli(redis.port,
                "HSET selroll:dashg:gate:stats rule audit mode shadow audit_base paper outcomes 40 "
                "audit_groups 12 audit_zero_variance 10 audit_precision 0.833333 "
                "keep_two_labels 3 keep_two_wrong 1 learned_labels 40 learned_min_groups 200",
                line, sizeof line);
    assert_string_equal(line, "11\n"); /* fields written */
    g = s_gate_state(port, 12, &root);
    assert_non_null(g);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(g, "recorded")));
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(g, "rule")), "audit");
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(g, "mode")), "shadow");
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(g, "audit_base")), "paper");
    assert_int_equal(cJSON_GetObjectItem(g, "audit_zero_variance")->valueint, 10);
    assert_true(cJSON_GetObjectItem(g, "audit_precision")->valuedouble == 0.833);
    assert_int_equal(cJSON_GetObjectItem(g, "keep_two_wrong")->valueint, 1);
    assert_int_equal(cJSON_GetObjectItem(g, "learned_labels")->valueint, 40);
    assert_int_equal(cJSON_GetObjectItem(g, "learned_min_groups")->valueint, 200);
    assert_true(cJSON_IsFalse(cJSON_GetObjectItem(g, "learned_ready")));
    cJSON_Delete(root);
    text = NULL;
    assert_int_equal(s_get(port, "/metrics", NULL, &text), 200);
    assert_non_null(strstr(text, "\nselroll_coordinator_gate_audit_precision 0.833333\n"));
    free(text);

    /* A damaged hash (words for numbers, a precision out of range) reads as unknown. */
    s_redis_cli(redis.port,
                "HSET selroll:dashg:gate:stats audit_groups 13 audit_precision 7 outcomes x "
                "rule 'no such rule!'",
                line, sizeof line);
    g = s_gate_state(port, 13, &root);
    assert_non_null(g);
    assert_true(cJSON_GetObjectItem(g, "audit_precision")->valuedouble == -1.0);
    assert_null(cJSON_GetObjectItem(g, "outcomes"));
    assert_null(cJSON_GetObjectItem(g, "rule")); /* not a rule name: unknown */
    cJSON_Delete(root);
    text = NULL;
    assert_int_equal(s_get(port, "/metrics", NULL, &text), 200);
    assert_non_null(strstr(text, "\nselroll_coordinator_gate_audit_precision -1\n"));
    free(text);

    coord_stop(c);
    pthread_join(th, NULL);
    dashboard_destroy(&d);
    coord_destroy(&c);
    harness_redis_stop(&redis);
}

static void the_gate_summary_lines_say_what_is_known(void **state)
{
    (void)state;
    dashboard_gate_t g;
    char buf[256];
    dashboard_gate_parse(NULL, 0, &g);
    assert_false(g.recorded);
    dashboard_gate_text(&g, buf, sizeof buf);
    assert_string_equal(buf, "gate: no statistics in Redis");
    dashboard_gate_audit_text(&g, buf, sizeof buf);
    assert_string_equal(buf, "no audit");

    store_field_t f[] = {{"rule", "paper"},       {"mode", "enforce"},
                         {"audit_groups", "12"},  {"audit_precision", "0.8333"},
                         {"learned_labels", "250"}, {"learned_min_groups", "200"},
                         {"unknown_field", "1"},  {"keep_two_wrong", "-4"}};
    dashboard_gate_parse(f, SR_ARRAY_LEN(f), &g);
    assert_true(g.recorded);
    assert_int_equal(g.keep_two_wrong, -1); /* negative: not a count */
    dashboard_gate_audit_text(&g, buf, sizeof buf);
    assert_string_equal(buf, "audit precision 0.83 (12 audited groups)");
    dashboard_gate_text(&g, buf, sizeof buf);
    assert_string_equal(buf, "gate: rule paper (enforce), audit precision 0.83 (12 audited "
                             "groups), learned model 250/200 labels (may cut)");
    cJSON *o = dashboard_gate_json(&g);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(o, "learned_ready")));
    assert_null(cJSON_GetObjectItem(o, "keep_two_wrong"));
    cJSON_Delete(o);

    /* A precision without an audited group behind it is not an estimate. */
    store_field_t z[] = {{"audit_groups", "0"}, {"audit_precision", "1"}};
    dashboard_gate_parse(z, SR_ARRAY_LEN(z), &g);
    assert_true(g.audit_precision == -1.0);
    dashboard_gate_audit_text(&g, buf, sizeof buf);
    assert_string_equal(buf, "no audit");
}

static void the_dashboard_follows_the_run_and_reports_redis_health(void **state)
{
    (void)state;
    harness_redis_t redis;
    assert_int_equal(harness_redis_start(&redis), 0);
    coord_cfg_t cfg;
    coord_cfg_init(&cfg);
    cfg.run = "dash";
    cfg.redis_url = redis.url;
    cfg.redis_timeout_ms = 300;
    cfg.work_bind = "tcp://127.0.0.1:*";
    cfg.bus_pub_bind = "tcp://127.0.0.1:*";
    cfg.bus_sub_bind = "tcp://127.0.0.1:*";
    cfg.groups = 1;
    cfg.group_size = 8;
    char err[512] = "";
    coord_t *c = coord_new(&cfg, err, sizeof err);
    assert_non_null(c);

    dashboard_cfg_t dc;
    dashboard_cfg_init(&dc);
    dc.http = "127.0.0.1:0";
    dc.token = "tok";
    dc.period_ms = 50;
    dc.redis_every_ms = 100;
    dashboard_t *d = dashboard_new(c, &dc, err, sizeof err);
    assert_non_null(d);
    int port = dashboard_port(d);
    assert_true(port > 0);

    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, s_run_main, c), 0);

    /* the first snapshot with the round open (it opens once the store thread read the run
     * record; a snapshot before shows no group): one group of 8 queued jobs, no actor */
    cJSON *st = NULL;
    int64_t deadline = harness_now_ms() + 10000;
    while (harness_now_ms() < deadline) {
        st = s_state(port);
        if (st && cJSON_GetArraySize(cJSON_GetObjectItem(st, "groups")) > 0)
            break;
        cJSON_Delete(st);
        st = NULL;
        usleep(20 * 1000);
    }
    assert_non_null(st);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(st, "run")), "dash");
    cJSON *groups = cJSON_GetObjectItem(st, "groups");
    assert_int_equal(cJSON_GetArraySize(groups), 1);
    cJSON *g0 = cJSON_GetArrayItem(groups, 0);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(g0, "lanes")), "qqqqqqqq");
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(g0, "st")), "running");
    cJSON *sc = cJSON_GetObjectItem(st, "scheduler");
    assert_int_equal(cJSON_GetObjectItem(sc, "queued_jobs")->valueint, 8);
    assert_int_equal(cJSON_GetObjectItem(sc, "actors")->valueint, 0);
    cJSON_Delete(st);

    /* /metrics: the gauges the autoscaler reads; the token is required */
    char *text = NULL;
    assert_int_equal(s_get(port, "/metrics", NULL, NULL), 401);
    assert_int_equal(s_get(port, "/metrics", "tok", &text), 200);
    assert_non_null(strstr(text, "\nselroll_coordinator_actors 0\n"));
    assert_non_null(strstr(text, "\nselroll_coordinator_free_slots 0\n"));
    assert_non_null(strstr(text, "\nselroll_coordinator_queued_jobs 8\n"));
    assert_non_null(strstr(text, "\nselroll_coordinator_queued_jobs_per_free_slot 8\n"));
    assert_non_null(strstr(text, "# TYPE selroll_coordinator_gate_divergence histogram\n"));
    free(text);
    text = NULL;
    assert_int_equal(s_get(port, "/", "tok", &text), 200);
    assert_non_null(strstr(text, "<title>selroll dashboard</title>"));
    free(text);
    assert_int_equal(s_get(port, "/api/nope", "tok", NULL), 404);

    /* the bus: an ACTION moves its trajectory's lane (publish until the subscription is up) */
    coord_endpoints_t ep;
    coord_endpoints(c, &ep);
    transport_sock_t *pub = transport_sock_new(coord_zctx(c), ZMQ_PUB, NULL, err, sizeof err);
    assert_non_null(pub);
    assert_int_equal(transport_connect(pub, ep.bus_pub), SR_OK);
    int step3 = 0;
    deadline = harness_now_ms() + 10000;
    while (step3 != 7 && harness_now_ms() < deadline) {
        s_publish_action(pub, 3, 7);
        usleep(50 * 1000);
        st = s_state(port);
        if (st) {
            cJSON *steps = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(st, "groups"), 0), "steps");
            step3 = cJSON_GetArrayItem(steps, 3)->valueint;
            assert_int_equal(cJSON_GetArrayItem(steps, 2)->valueint, 0);
            cJSON_Delete(st);
        }
    }
    assert_int_equal(step3, 7);

    /* the snapshot is in Redis for `selroll status` */
    char cmd[256];
    snprintf(cmd, sizeof cmd, "redis-cli -p %d exists selroll:dash:dashboard", redis.port);
    FILE *p = popen(cmd, "r");
    char line[32] = "";
    assert_non_null(fgets(line, sizeof line, p));
    pclose(p);
    assert_string_equal(line, "1\n");

    /* a decision the gate recorded in Redis reaches the group's row (a pass on the store thread) */
    st = s_state(port);
    assert_non_null(st);
    char gid[STORE_GID_MAX];
    snprintf(gid, sizeof gid, "%s",
             cJSON_GetStringValue(cJSON_GetObjectItem(
                 cJSON_GetArrayItem(cJSON_GetObjectItem(st, "groups"), 0), "id")));
    cJSON_Delete(st);
    store_t *gst = store_new(redis.url, "dash", 2000);
    assert_non_null(gst);
    assert_int_equal(store_group_decide(gst, gid, 3, 0.05, "cancel"), SR_OK);
    store_destroy(&gst);
    int k = -1;
    deadline = harness_now_ms() + 10000;
    while (k != 3 && harness_now_ms() < deadline) {
        usleep(50 * 1000);
        st = s_state(port);
        cJSON *row = st ? cJSON_GetArrayItem(cJSON_GetObjectItem(st, "groups"), 0) : NULL;
        cJSON *kk = row ? cJSON_GetObjectItem(row, "k") : NULL;
        if (cJSON_IsNumber(kk)) {
            k = kk->valueint;
            assert_true(fabs(cJSON_GetObjectItem(row, "d")->valuedouble - 0.05) < 1e-9);
            assert_true(cJSON_IsTrue(cJSON_GetObjectItem(row, "cut")));
        }
        cJSON_Delete(st);
    }
    assert_int_equal(k, 3);

    /* Snapshots (period 50 ms here): while no event stream is open, one a second (the one that
     * goes to Redis); with a stream open, one every period, each sent on the stream. */
    double seen[16];
    int nseen = 0;
    for (int i = 0; i < 15; i++) {
        double v = s_snapshot_ms(port);
        bool known = false;
        for (int j = 0; j < nseen; j++)
            known = known || seen[j] == v;
        if (!known)
            seen[nseen++] = v;
        usleep(100 * 1000);
    }
    assert_true(nseen >= 1 && nseen <= 3); /* 1.5 s without a stream */
    s_stream_t sst = {.port = port, .ms = 1500};
    pthread_t sth;
    assert_int_equal(pthread_create(&sth, NULL, s_stream_main, &sst), 0);
    pthread_join(sth, NULL);
    assert_true(sst.events >= 6); /* 1.5 s with one: ~30 at 50 ms, a loaded machine fewer */

    /* /health: 200 while Redis answers, 503 once it is gone; the server keeps answering */
    assert_int_equal(s_get(port, "/health", NULL, NULL), 200);
    harness_redis_stop(&redis);
    long code = 200;
    deadline = harness_now_ms() + 15000;
    while ((code = s_get(port, "/health", NULL, NULL)) == 200 && harness_now_ms() < deadline)
        usleep(100 * 1000);
    assert_int_equal(code, 503);
    assert_int_equal(s_get(port, "/api/state", "tok", NULL), 200);

    coord_stop(c);
    pthread_join(th, NULL);
    transport_sock_destroy(&pub);
    dashboard_destroy(&d);
    assert_null(d);
    coord_destroy(&c);
}

static void a_busy_address_is_refused_with_a_reason(void **state)
{
    (void)state;
    harness_redis_t redis;
    assert_int_equal(harness_redis_start(&redis), 0);
    coord_cfg_t cfg;
    coord_cfg_init(&cfg);
    cfg.run = "dash2";
    cfg.redis_url = redis.url;
    cfg.work_bind = "tcp://127.0.0.1:*";
    cfg.bus_pub_bind = "tcp://127.0.0.1:*";
    cfg.bus_sub_bind = "tcp://127.0.0.1:*";
    char err[512] = "";
    coord_t *c = coord_new(&cfg, err, sizeof err);
    assert_non_null(c);
    dashboard_cfg_t dc;
    dashboard_cfg_init(&dc);
    dc.http = "127.0.0.1:0";
    dashboard_t *a = dashboard_new(c, &dc, err, sizeof err);
    assert_non_null(a);
    char bind[64];
    snprintf(bind, sizeof bind, "127.0.0.1:%d", dashboard_port(a));
    dc.http = bind;
    assert_null(dashboard_new(c, &dc, err, sizeof err));
    assert_non_null(strstr(err, "cannot listen"));
    dc.http = "not-an-address";
    assert_null(dashboard_new(c, &dc, err, sizeof err));
    assert_non_null(strstr(err, "bad HTTP address"));
    dashboard_destroy(&a);
    coord_destroy(&c);
    harness_redis_stop(&redis);
}

int main(int argc, char **argv)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_dashboard_follows_the_run_and_reports_redis_health),
        cmocka_unit_test(a_busy_address_is_refused_with_a_reason),
        cmocka_unit_test(the_gate_figures_in_redis_reach_the_snapshot_and_the_gauge),
        cmocka_unit_test(the_gate_summary_lines_say_what_is_known),
    };
    int rc = harness_run_("dashboard", tests, sizeof tests / sizeof tests[0], argc, argv);
    curl_global_cleanup();
    return rc;
}
