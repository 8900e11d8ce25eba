/*
 * policy_server.c — the policy server: HTTP routes, answers, the cost-model hold and disconnect watching.
 *
 * A request's life: libmicrohttpd calls s_handler with the body in pieces; on the last call the
 * request is answered at once (the answer is computed in microseconds) and, with the cost model
 * on, the finished response is parked while the engine "generates" its tokens. Parking means
 * suspending the connection and registering its socket with the watcher thread. Whoever moves the
 * request out of S_WAITING under the server mutex resumes the connection: the engine's completion
 * callback (the response goes out), the watcher on a hang-up (the request is aborted in the engine
 * and the connection closed), or shutdown. A request's context is reference-counted: one reference
 * for libmicrohttpd (dropped when the request completes), one while the engine holds it.
 *
 * A version not cached is loaded through the store queue (common/storeq.h, one store thread, as in
 * every role): the request is suspended, the store thread fetches and decodes the weights off the
 * server mutex, and the completion, dispatched by the loop (or the watcher) from the queue's
 * eventfd in the same epoll set, caches the model and resumes the request. /health and requests
 * for cached versions never wait for the weights source.
 */
#include "policy/policy_server.h"

#include "common/jsonw.h"
#include "common/model.h"
#include "common/pparse.h"
#include "common/ptok.h"
#include "common/sr.h"
#include "common/storeq.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define S_MAX_CACHED 8
#define S_MAX_STOP 4
#define S_MAX_TOP_LOGPROBS 20

static const double S_BUCKETS[] = {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                   0.5,   1,     2.5,  5,     10,   30,  60};
#define S_NBUCKETS (sizeof(S_BUCKETS) / sizeof(S_BUCKETS[0]))

/* S_LOADING: suspended while the store thread fetches its policy version; S_LOADED: resumed, the
 * request is answered again from the start, now with the version cached (or known missing). */
typedef enum {
    S_NEW = 0,
    S_SUBMITTING,
    S_EARLY,
    S_WAITING,
    S_DONE,
    S_ABORTED,
    S_LOADING,
    S_LOADED
} s_state_t;

#define S_NEG_CACHE 64       /* versions remembered as missing or malformed */
#define S_NEG_TTL_MS 1000    /* for this long: a request for them is answered without a fetch */
#define S_MAX_LOADS 64       /* weight loads queued at most; more are answered 503 */

typedef struct s_mref {
    model_t *m;
    uint32_t version;
    int refs;
    struct s_mref *next;
} s_mref_t;

struct s_sock;

typedef struct {
    struct policy_server *srv;
    struct MHD_Connection *conn;
    struct s_sock *sock; /* its connection's watch entry while held, else NULL */
    int refs;
    s_state_t state;
    char *body;
    size_t len, cap;
    bool too_big;
    /* The response, ready before the hold. */
    unsigned status;
    char *resp;
    size_t resp_len;
    const char *ctype;
    int completion_tokens;
    int cost_tokens; /* what the cost model decodes: the word count, whether ids were asked for */
    uint64_t engine_id;
    int64_t t0_ns;
    bool completion; /* a POST /v1/chat/completions: counted in the metrics */
    /* A version not cached: the store thread fetches it while the connection is suspended. */
    uint32_t load_version;
    bool loaded;    /* the load answered: load_rc, and pinned when it is SR_OK */
    int load_rc;
    struct s_mref *pinned;   /* the loaded model, referenced until the request is answered */
} s_conn_t;

/* A client connection (libmicrohttpd's socket context): its socket is in the server's epoll set
 * for as long as the connection lives, edge-triggered on EPOLLRDHUP, so that it reports nothing
 * until the client hangs up and holding or resuming a request costs no system call. */
typedef struct s_sock {
    int fd;
    uint64_t id;     /* its epoll key: never reused */
    int watch_idx;   /* its entry in the server's watch array, or -1 when not watched */
    s_conn_t *held;  /* the request held in the engine on it, or NULL */
    bool hup;        /* the client hung up (seen while no request was held) */
} s_sock_t;

typedef struct {
    s_sock_t *sock;
    uint64_t id;
} s_watch_t;

struct policy_server {
    policy_server_opts_t o;
    char host[64];
    char name[128];
    struct MHD_Daemon *d;
    int port;
    engine_t *engine;

    pthread_mutex_t mu;
    s_mref_t *models; /* version cache; models->... */
    struct {
        uint32_t version;
        int rc;
        int64_t until_ms;
    } neg[S_NEG_CACHE]; /* under mu: versions the source lacks (or holds malformed) */
    int neg_next;
    /* Weight loads: fetched and decoded on the store thread, off mu and off the HTTP threads;
     * completions dispatched by the thread that waits on epfd. */
    storeq_t *sq;
    int ld_n; /* loads queued, under mu */
    s_mref_t *current;
    s_watch_t *watch; /* the client connections' sockets in epfd */
    int n_watch, cap_watch;
    uint64_t next_watch_id;
    int wake_fd;
    int epfd; /* the connections' sockets (EPOLLRDHUP, keyed by watch id), wake_fd (key 0) and
               * the store queue's eventfd (S_KEY_STOREQ) */
    pthread_t watcher; /* with one thread (o.threads == 1): the event loop, s_loop */
    bool watcher_started;
    bool loop; /* one thread: libmicrohttpd's epoll set, the engine and the watch list */
    bool stopping;

    /* Metrics (atomics). */
    uint64_t req_ok, req_bad, req_notfound, req_full, req_aborted, req_other;
    uint64_t tokens_completion, tokens_prompt;
    uint64_t lat_buckets[S_NBUCKETS];
    uint64_t lat_count;
    uint64_t lat_sum_ns;
    uint64_t seq;
    int64_t started;
};

/* ---------------------------------------------------------------- tokens */

int policy_server_tokens(const char *text)
{
    if (!text)
        return 0;
    int n = 0;
    const unsigned char *p = (const unsigned char *)text;
    while (*p) {
        if (isalnum(*p) && *p < 128) {
            int run = 0;
            while (*p && *p < 128 && isalnum(*p)) {
                run++;
                p++;
            }
            n += (run + 3) / 4;
        } else {
            if (!isspace(*p))
                n++;
            p++;
        }
    }
    return n;
}

/* s_prefix_of_tokens returns the byte length of the longest prefix of text with at most max
 * tokens (never cutting inside a run's 4-character piece). */
static size_t s_prefix_of_tokens(const char *text, int max)
{
    int n = 0;
    const unsigned char *s = (const unsigned char *)text, *p = s;
    while (*p) {
        if (isalnum(*p) && *p < 128) {
            int run = 0;
            while (p[run] && p[run] < 128 && isalnum(p[run]))
                run++;
            int pieces = (run + 3) / 4;
            if (n + pieces > max) {
                p += (size_t)(max - n) * 4;
                return (size_t)(p - s);
            }
            n += pieces;
            p += run;
        } else {
            if (!isspace(*p)) {
                if (n + 1 > max)
                    return (size_t)(p - s);
                n++;
            }
            p++;
        }
    }
    return (size_t)(p - s);
}

/* ---------------------------------------------------------------- small helpers */

static int64_t s_now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void s_add64(uint64_t *p, uint64_t v)
{
    __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}

static uint64_t s_get64(const uint64_t *p)
{
    return __atomic_load_n(p, __ATOMIC_RELAXED);
}

typedef struct {
    char *p;
    size_t len, cap;
} s_buf_t;

static void s_buf_printf(s_buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void s_buf_printf(s_buf_t *b, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = b->cap - b->len;
        int n = vsnprintf(b->p ? b->p + b->len : NULL, room, fmt, ap);
        va_end(ap);
        if (n < 0)
            return;
        if ((size_t)n < room) {
            b->len += (size_t)n;
            return;
        }
        b->cap = (b->cap + (size_t)n + 1) * 2;
        b->p = sr_xrealloc(b->p, b->cap);
    }
}

static void s_buf_add(s_buf_t *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        b->cap = (b->len + n + 1) * 2;
        b->p = sr_xrealloc(b->p, b->cap);
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

/* ---------------------------------------------------------------- models by version */

static int64_t s_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* s_model_lookup_locked returns a referenced model for version (current when use_current) when
 * it is cached, SR_ENOTFOUND without a source, the remembered answer of a recent failed load,
 * or SR_EAGAIN when the version has to be loaded. Mutex held. */
static int s_model_lookup_locked(struct policy_server *s, bool use_current, uint32_t version,
                                 s_mref_t **out)
{
    if (use_current) {
        s->current->refs++;
        *out = s->current;
        return SR_OK;
    }
    for (s_mref_t *r = s->models; r; r = r->next) {
        if (r->version == version) {
            r->refs++;
            *out = r;
            return SR_OK;
        }
    }
    if (!s->o.source)
        return SR_ENOTFOUND;
    int64_t now = s_mono_ms();
    for (int i = 0; i < S_NEG_CACHE; i++)
        if (s->neg[i].until_ms > now && s->neg[i].version == version)
            return s->neg[i].rc;
    return SR_EAGAIN;
}

/* s_model_insert_locked caches model m of version (or, when another load cached the version
 * meanwhile, frees m and takes that one) and returns it referenced. Mutex held. */
static void s_model_insert_locked(struct policy_server *s, uint32_t version, model_t *m,
                                  s_mref_t **out)
{
    for (s_mref_t *x = s->models; x; x = x->next) {
        if (x->version == version) {
            model_destroy(&m);
            x->refs++;
            *out = x;
            return;
        }
    }
    s_mref_t *r = sr_xcalloc(1, sizeof(*r));
    r->m = m;
    r->version = version;
    r->next = s->models;
    s->models = r;
    /* Evict the oldest unreferenced versions beyond the cache size. */
    int n = 0;
    for (s_mref_t **pp = &s->models; *pp;) {
        s_mref_t *x = *pp;
        if (++n > S_MAX_CACHED && x->refs == 0 && x != s->current && x->version != 0) {
            *pp = x->next;
            model_destroy(&x->m);
            free(x);
            continue;
        }
        pp = &x->next;
    }
    r->refs++;
    *out = r;
}

/* s_model_fetch fetches and decodes version from the source, without the mutex: a new model in
 * *out, or SR_ENOTFOUND, SR_EPROTO (malformed) or the source's error. */
static int s_model_fetch(struct policy_server *s, uint32_t version, model_t **out)
{
    uint8_t *blob = NULL;
    size_t len = 0;
    model_t *m = NULL;
    int rc = wsource_fetch(s->o.source, version, &blob, &len);
    if (rc == SR_OK) {
        char err[128];
        m = model_from_blob(blob, len, err, sizeof err);
        if (!m) {
            fprintf(stderr, "policy-server: weights of version %u refused: %s\n", version, err);
            rc = SR_EPROTO;
        } else {
            model_set_version(m, version);
        }
    }
    free(blob);
    *out = m;
    return rc;
}

/* s_model_settle_locked takes the outcome of a fetch: m cached and returned referenced, or a
 * missing or malformed version remembered for S_NEG_TTL_MS. Mutex held. */
static void s_model_settle_locked(struct policy_server *s, uint32_t version, int rc, model_t *m,
                                  s_mref_t **out)
{
    if (rc == SR_OK) {
        s_model_insert_locked(s, version, m, out);
    } else if (rc == SR_ENOTFOUND || rc == SR_EPROTO) {
        s->neg[s->neg_next].version = version;
        s->neg[s->neg_next].rc = rc;
        s->neg[s->neg_next].until_ms = s_mono_ms() + S_NEG_TTL_MS;
        s->neg_next = (s->neg_next + 1) % S_NEG_CACHE;
    }
}

/* s_model_acquire returns a referenced model for version, fetching and decoding it when it is
 * not cached: without the mutex, so that requests for cached versions and /health never wait
 * for the weights source. A version the source lacks, or holds malformed, is remembered for
 * S_NEG_TTL_MS. Blocks on the source: the store thread calls it (a request's load, a version
 * switch), and a caller without a source (the cache only). */
static int s_model_acquire(struct policy_server *s, uint32_t version, s_mref_t **out)
{
    pthread_mutex_lock(&s->mu);
    int rc = s_model_lookup_locked(s, false, version, out);
    pthread_mutex_unlock(&s->mu);
    if (rc != SR_EAGAIN)
        return rc;
    model_t *m = NULL;
    rc = s_model_fetch(s, version, &m);
    pthread_mutex_lock(&s->mu);
    s_model_settle_locked(s, version, rc, m, out);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

static void s_model_put(struct policy_server *s, s_mref_t *r)
{
    pthread_mutex_lock(&s->mu);
    r->refs--;
    pthread_mutex_unlock(&s->mu);
}

/* A version switch: its load runs on the store thread like a request's (the weights source's
 * connection is used by that thread only). policy_server_set_version_async's completion, on the
 * thread that dispatches the store queue, makes it current and tells the caller;
 * policy_server_set_version waits for that completion. Switches complete in the order they were
 * asked for, so the last one asked for is the one served. */
typedef struct {
    struct policy_server *s;
    uint32_t version;
    s_mref_t *mr;
    policy_server_version_fn *fn;
    void *arg;
} s_setv_t;

static int s_setv_work(store_t *st, void *arg, char *err)
{
    (void)st;
    (void)err;
    s_setv_t *w = arg;
    return s_model_acquire(w->s, w->version, &w->mr);
}

/* s_setv_apply makes r (referenced by its acquire) the served model. */
static void s_setv_apply(struct policy_server *s, s_mref_t *r)
{
    pthread_mutex_lock(&s->mu);
    s->current = r;
    r->refs--;
    pthread_mutex_unlock(&s->mu);
}

static void s_setv_done(int rc, const char *err, void *arg)
{
    (void)err;
    s_setv_t *w = arg;
    if (rc == SR_OK)
        s_setv_apply(w->s, w->mr);
    if (w->fn)
        w->fn(rc, w->version, w->arg);
    free(w);
}

int policy_server_set_version_async(policy_server_t *s, uint32_t version,
                                    policy_server_version_fn *fn, void *arg)
{
    if (!s)
        return SR_EINVAL;
    if (!s->o.source || !s->sq) {
        /* no source: the cache only, nothing to wait for */
        s_mref_t *r = NULL;
        int rc = s_model_acquire(s, version, &r);
        if (rc == SR_OK)
            s_setv_apply(s, r);
        rc = rc == SR_ENOTFOUND && !s->o.source ? SR_EINVAL : rc;
        if (fn)
            fn(rc, version, arg);
        return SR_OK;
    }
    s_setv_t *w = sr_xcalloc(1, sizeof *w);
    w->s = s;
    w->version = version;
    w->fn = fn;
    w->arg = arg;
    int rc = storeq_submit(s->sq, s_setv_work, s_setv_done, w);
    if (rc != SR_OK)
        free(w);
    return rc;
}

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    int rc;
} s_setv_wait_t;

static void s_setv_woken(int rc, uint32_t version, void *arg)
{
    (void)version;
    s_setv_wait_t *w = arg;
    pthread_mutex_lock(&w->mu);
    w->rc = rc;
    w->done = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

int policy_server_set_version(policy_server_t *s, uint32_t version)
{
    if (!s)
        return SR_EINVAL;
    s_setv_wait_t w = {.done = false};
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    int rc = policy_server_set_version_async(s, version, s_setv_woken, &w);
    if (rc == SR_OK) {
        pthread_mutex_lock(&w.mu);
        while (!w.done)
            pthread_cond_wait(&w.cv, &w.mu);
        pthread_mutex_unlock(&w.mu);
        rc = w.rc;
    }
    pthread_cond_destroy(&w.cv);
    pthread_mutex_destroy(&w.mu);
    return rc;
}

int policy_server_submit(policy_server_t *s, storeq_work_fn *work, storeq_done_fn *done,
                         void *arg)
{
    if (!s)
        return SR_EINVAL;
    pthread_mutex_lock(&s->mu);
    bool closed = s->stopping || !s->sq;
    pthread_mutex_unlock(&s->mu);
    return closed ? SR_ECLOSED : storeq_submit(s->sq, work, done, arg);
}

uint32_t policy_server_version(const policy_server_t *s)
{
    pthread_mutex_lock((pthread_mutex_t *)&s->mu);
    uint32_t v = s->current->version;
    pthread_mutex_unlock((pthread_mutex_t *)&s->mu);
    return v;
}

/* ---------------------------------------------------------------- responses */

static void s_set_resp(s_conn_t *c, unsigned status, const char *ctype, char *body)
{
    free(c->resp);
    c->status = status;
    c->ctype = ctype;
    c->resp = body;
    c->resp_len = body ? strlen(body) : 0;
}

static void s_error(s_conn_t *c, unsigned status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void s_error(s_conn_t *c, unsigned status, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *type = status == 404   ? "not_found_error"
                       : status == 503 ? "service_unavailable"
                       : status >= 500 ? "internal_server_error"
                                       : "invalid_request_error";
    cJSON *root = cJSON_CreateObject();
    cJSON *e = cJSON_AddObjectToObject(root, "error");
    cJSON_AddStringToObject(e, "message", msg);
    cJSON_AddStringToObject(e, "type", type);
    cJSON_AddNullToObject(e, "param");
    cJSON_AddNumberToObject(e, "code", status);
    s_set_resp(c, status, "application/json", cJSON_PrintUnformatted(root));
    cJSON_Delete(root);
}

static enum MHD_Result s_queue(struct MHD_Connection *conn, s_conn_t *c)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(c->resp_len, c->resp, MHD_RESPMEM_MUST_COPY);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                            c->ctype ? c->ctype : "application/json");
    if (c->ctype && strncmp(c->ctype, "text/event-stream", 17) == 0)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    enum MHD_Result ret = MHD_queue_response(conn, c->status, r);
    MHD_destroy_response(r);

    struct policy_server *s = c->srv;
    if (!c->completion)
        return ret;
    int64_t lat_ns = s_now_ns() - c->t0_ns;
    double lat = (double)lat_ns * 1e-9;
    for (size_t i = 0; i < S_NBUCKETS; i++)
        if (lat <= S_BUCKETS[i])
            s_add64(&s->lat_buckets[i], 1);
    s_add64(&s->lat_count, 1);
    s_add64(&s->lat_sum_ns, (uint64_t)(lat_ns > 0 ? lat_ns : 0));
    switch (c->status) {
    case 200:
        s_add64(&s->req_ok, 1);
        break;
    case 400:
        s_add64(&s->req_bad, 1);
        break;
    case 404:
        s_add64(&s->req_notfound, 1);
        break;
    case 503:
        s_add64(&s->req_full, 1);
        break;
    default:
        s_add64(&s->req_other, 1);
        break;
    }
    return ret;
}

/* ---------------------------------------------------------------- the answer */

/* A parsed, validated completion request. */
typedef struct {
    bool use_current;
    uint32_t version;
    const char *model_name;
    double temperature, top_p;
    int max_tokens; /* 0 = unlimited */
    const char *stop[S_MAX_STOP];
    int n_stop;
    bool has_seed;
    int64_t seed;
    bool logprobs;
    int top_logprobs;
    bool stream, include_usage;
    char *user; /* the last user message text (owned) */
    int prompt_tokens;
    int cost_prompt_tokens; /* the word count the cost model prefills (ids or not) */
    bool token_ids;  /* return_token_ids: ids beside the text, usage counts the ids */
    bool prompt_ids; /* and prompt_token_ids too (return_prompt_token_ids, default true) */
    s_buf_t prompt;  /* with token_ids: the rendered prompt the ids are of (owned) */
} s_req_t;

static char *s_content_text(const cJSON *content)
{
    if (cJSON_IsString(content))
        return sr_xstrdup(content->valuestring);
    if (!cJSON_IsArray(content))
        return NULL;
    s_buf_t b = {0};
    s_buf_add(&b, "", 0);
    const cJSON *part;
    cJSON_ArrayForEach(part, content)
    {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (cJSON_IsString(t))
            s_buf_add(&b, t->valuestring, strlen(t->valuestring));
    }
    return b.p;
}

/* s_parse_request validates the JSON body into rq; on failure it writes the error response. */
static int s_parse_request(struct policy_server *s, s_conn_t *c, const cJSON *root, s_req_t *rq)
{
    memset(rq, 0, sizeof(*rq));
    rq->temperature = 1.0;
    rq->top_p = 1.0;
    rq->use_current = true;
    if (!cJSON_IsObject(root)) {
        s_error(c, 400, "request body must be a JSON object");
        return SR_EINVAL;
    }
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (model && !cJSON_IsNull(model)) {
        if (!cJSON_IsString(model)) {
            s_error(c, 400, "'model' must be a string");
            return SR_EINVAL;
        }
        const char *n = model->valuestring;
        size_t nl = strlen(s->name);
        if (strcmp(n, s->name) == 0) {
            rq->use_current = true;
        } else if (strncmp(n, s->name, nl) == 0 && strncmp(n + nl, "-v", 2) == 0 &&
                   isdigit((unsigned char)n[nl + 2])) {
            char *end;
            unsigned long v = strtoul(n + nl + 2, &end, 10);
            if (*end || v > UINT32_MAX) {
                s_error(c, 404, "The model `%s` does not exist.", n);
                return SR_ENOTFOUND;
            }
            rq->use_current = false;
            rq->version = (uint32_t)v;
        } else {
            s_error(c, 404, "The model `%s` does not exist.", n);
            return SR_ENOTFOUND;
        }
    }
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(root, "messages");
    if (!cJSON_IsArray(msgs) || cJSON_GetArraySize(msgs) == 0) {
        s_error(c, 400, "'messages' must be a non-empty array");
        return SR_EINVAL;
    }
    const cJSON *rti = cJSON_GetObjectItemCaseSensitive(root, "return_token_ids");
    if (rti && !cJSON_IsNull(rti)) {
        if (!cJSON_IsBool(rti)) {
            s_error(c, 400, "'return_token_ids' must be a boolean");
            return SR_EINVAL;
        }
        rq->token_ids = cJSON_IsTrue(rti);
    }
    rq->prompt_ids = rq->token_ids;
    const cJSON *rpi = cJSON_GetObjectItemCaseSensitive(root, "return_prompt_token_ids");
    if (rpi && !cJSON_IsNull(rpi)) {
        if (!cJSON_IsBool(rpi)) {
            s_error(c, 400, "'return_prompt_token_ids' must be a boolean");
            return SR_EINVAL;
        }
        rq->prompt_ids = rq->token_ids && cJSON_IsTrue(rpi);
    }
    const cJSON *m;
    int idx = 0;
    size_t ptok_n = 0; /* with ids but no prompt ids: the prompt's tokens, turn by turn */
    cJSON_ArrayForEach(m, msgs)
    {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        char *text = cJSON_IsString(role) ? s_content_text(content) : NULL;
        if (!text) {
            s_error(c, 400,
                    "messages[%d] needs a string 'role' and a string or text-part 'content'", idx);
            return SR_EINVAL;
        }
        if (rq->token_ids && !rq->prompt_ids) { /* counted, not rendered: one pass */
            int words;
            size_t tl;
            size_t tt = ptok_count_words(text, &words, &tl);
            rq->prompt_tokens += words + 4; /* role and framing */
            ptok_n += ptok_turn_tokens(role->valuestring, text[0], tt);
        } else {
            rq->prompt_tokens += policy_server_tokens(text) + 4;
        }
        if (rq->token_ids && rq->prompt_ids) { /* "<|role|>\ntext\n" without printf: the text is long */
            s_buf_add(&rq->prompt, "<|", 2);
            s_buf_add(&rq->prompt, role->valuestring, strlen(role->valuestring));
            s_buf_add(&rq->prompt, "|>\n", 3);
            s_buf_add(&rq->prompt, text, strlen(text));
            s_buf_add(&rq->prompt, "\n", 1);
        }
        if (strcmp(role->valuestring, "user") == 0) {
            free(rq->user);
            rq->user = text;
        } else {
            free(text);
        }
        idx++;
    }
    rq->prompt_tokens += 2; /* the assistant's turn header */
    rq->cost_prompt_tokens = rq->prompt_tokens;
    if (rq->token_ids && !rq->prompt_ids) {
        rq->prompt_tokens = (int)(ptok_n + ptok_count("<|assistant|>\n"));
    } else if (rq->token_ids) {
        s_buf_add(&rq->prompt, "<|assistant|>\n", 14);
        rq->prompt_tokens = (int)ptok_encode(rq->prompt.p, rq->prompt.len, NULL, 0);
    }
    if (!rq->user) {
        s_error(c, 400, "'messages' holds no user message");
        return SR_EINVAL;
    }
    const cJSON *x;
    if ((x = cJSON_GetObjectItemCaseSensitive(root, "temperature")) && !cJSON_IsNull(x)) {
        if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble > 2) {
            s_error(c, 400, "'temperature' must be a number in [0, 2]");
            return SR_EINVAL;
        }
        rq->temperature = x->valuedouble;
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(root, "top_p")) && !cJSON_IsNull(x)) {
        if (!cJSON_IsNumber(x) || !(x->valuedouble > 0) || x->valuedouble > 1) {
            s_error(c, 400, "'top_p' must be a number in (0, 1]");
            return SR_EINVAL;
        }
        rq->top_p = x->valuedouble;
    }
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "max_tokens");
    if (!mt || cJSON_IsNull(mt))
        mt = cJSON_GetObjectItemCaseSensitive(root, "max_completion_tokens");
    if (mt && !cJSON_IsNull(mt)) {
        if (!cJSON_IsNumber(mt) || mt->valuedouble < 1 || mt->valuedouble > 1e6 ||
            mt->valuedouble != floor(mt->valuedouble)) {
            s_error(c, 400, "'max_tokens' must be a positive integer");
            return SR_EINVAL;
        }
        rq->max_tokens = (int)mt->valuedouble;
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(root, "stop")) && !cJSON_IsNull(x)) {
        if (cJSON_IsString(x)) {
            if (x->valuestring[0])
                rq->stop[rq->n_stop++] = x->valuestring;
        } else if (cJSON_IsArray(x) && cJSON_GetArraySize(x) <= S_MAX_STOP) {
            const cJSON *e;
            cJSON_ArrayForEach(e, x)
            {
                if (!cJSON_IsString(e)) {
                    s_error(c, 400, "'stop' must be a string or an array of up to 4 strings");
                    return SR_EINVAL;
                }
                if (e->valuestring[0])
                    rq->stop[rq->n_stop++] = e->valuestring;
            }
        } else {
            s_error(c, 400, "'stop' must be a string or an array of up to 4 strings");
            return SR_EINVAL;
        }
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(root, "seed")) && !cJSON_IsNull(x)) {
        if (!cJSON_IsNumber(x) || x->valuedouble != floor(x->valuedouble)) {
            s_error(c, 400, "'seed' must be an integer");
            return SR_EINVAL;
        }
        rq->has_seed = true;
        rq->seed = (int64_t)x->valuedouble;
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(root, "n")) && !cJSON_IsNull(x)) {
        if (!cJSON_IsNumber(x) || x->valuedouble != 1) {
            s_error(c, 400, "only n = 1 is supported");
            return SR_EINVAL;
        }
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(root, "logprobs")) && !cJSON_IsNull(x)) {
        if (!cJSON_IsBool(x)) {
            s_error(c, 400, "'logprobs' must be a boolean");
            return SR_EINVAL;
        }
        rq->logprobs = cJSON_IsTrue(x);
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(root, "top_logprobs")) && !cJSON_IsNull(x)) {
        if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble > S_MAX_TOP_LOGPROBS ||
            x->valuedouble != floor(x->valuedouble)) {
            s_error(c, 400, "'top_logprobs' must be an integer in [0, 20]");
            return SR_EINVAL;
        }
        rq->top_logprobs = (int)x->valuedouble;
        if (rq->top_logprobs > 0 && !rq->logprobs) {
            s_error(c, 400, "'top_logprobs' requires 'logprobs': true");
            return SR_EINVAL;
        }
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(root, "stream")) && !cJSON_IsNull(x)) {
        if (!cJSON_IsBool(x)) {
            s_error(c, 400, "'stream' must be a boolean");
            return SR_EINVAL;
        }
        rq->stream = cJSON_IsTrue(x);
    }
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(root, "stream_options");
    if (cJSON_IsObject(so) && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(so, "include_usage")))
        rq->include_usage = true;
    return SR_OK;
}

static double s_gauss(model_rng_t *r)
{
    double u = model_rng_uniform(r), v = model_rng_uniform(r);
    if (u < 1e-300)
        u = 1e-300;
    return sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * v);
}

/* s_cut applies stop strings and max_tokens to the content; returns the finish reason. */
static const char *s_cut(s_buf_t *content, const s_req_t *rq)
{
    const char *reason = "stop";
    size_t cut = content->len;
    for (int i = 0; i < rq->n_stop; i++) {
        const char *hit = strstr(content->p, rq->stop[i]);
        if (hit && (size_t)(hit - content->p) < cut)
            cut = (size_t)(hit - content->p);
    }
    content->p[cut] = '\0';
    content->len = cut;
    if (rq->max_tokens > 0 && policy_server_tokens(content->p) > rq->max_tokens) {
        content->len = s_prefix_of_tokens(content->p, rq->max_tokens);
        content->p[content->len] = '\0';
        reason = "length";
    }
    return reason;
}

/* s_top_order writes into order the indices of the (at most top) most probable candidates, most
 * probable first (ties: the earlier candidate), and returns how many. */
static int s_top_order(const pparse_state_t *st, const double *p_unit, int top, int *order)
{
    bool used[PPARSE_MAX_ACTIONS] = {false};
    int k = 0;
    for (; k < top && k < st->n_actions; k++) {
        int best = -1;
        for (int i = 0; i < st->n_actions; i++)
            if (!used[i] && (best < 0 || p_unit[i] > p_unit[best]))
                best = i;
        used[best] = true;
        order[k] = best;
    }
    return k;
}

static cJSON *s_logprobs_json(const pparse_state_t *st, const double *p_unit, int chosen, double lp,
                              int top)
{
    cJSON *lps = cJSON_CreateObject();
    cJSON *arr = cJSON_AddArrayToObject(lps, "content");
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "token", chosen >= 0 ? st->actions[chosen] : "look");
    cJSON_AddNumberToObject(e, "logprob", lp);
    cJSON_AddNullToObject(e, "bytes");
    cJSON *tops = cJSON_AddArrayToObject(e, "top_logprobs");
    int order[PPARSE_MAX_ACTIONS];
    int n = s_top_order(st, p_unit, top, order);
    for (int k = 0; k < n; k++) {
        int best = order[k];
        cJSON *t = cJSON_CreateObject();
        cJSON_AddStringToObject(t, "token", st->actions[best]);
        cJSON_AddNumberToObject(t, "logprob", p_unit[best] > 0 ? log(p_unit[best]) : -9999.0);
        cJSON_AddNullToObject(t, "bytes");
        cJSON_AddItemToArray(tops, t);
    }
    cJSON_AddItemToArray(arr, e);
    return lps;
}

/* s_top_logprobs_write writes the top_logprobs array: the `top` most likely admissible actions
 * (s_top_order) with their log probabilities. */
static void s_top_logprobs_write(jsonw_t *w, const pparse_state_t *st, const double *p_unit,
                                 int top)
{
    int order[PPARSE_MAX_ACTIONS];
    int n = s_top_order(st, p_unit, top, order);
    jsonw_lit(w, "[");
    for (int k = 0; k < n; k++) {
        int best = order[k];
        if (k)
            jsonw_lit(w, ",");
        jsonw_lit(w, "{\"token\":");
        jsonw_str(w, st->actions[best]);
        jsonw_lit(w, ",\"logprob\":");
        jsonw_num(w, p_unit[best] > 0 ? log(p_unit[best]) : -9999.0);
        jsonw_lit(w, ",\"bytes\":null}");
    }
    jsonw_lit(w, "]");
}

/* s_logprobs_write writes what s_logprobs_json builds, as cJSON would print it. */
static void s_logprobs_write(jsonw_t *w, const pparse_state_t *st, const double *p_unit,
                             int chosen, double lp, int top)
{
    jsonw_lit(w, "{\"content\":[{\"token\":");
    jsonw_str(w, chosen >= 0 ? st->actions[chosen] : "look");
    jsonw_lit(w, ",\"logprob\":");
    jsonw_num(w, lp);
    jsonw_lit(w, ",\"bytes\":null,\"top_logprobs\":");
    s_top_logprobs_write(w, st, p_unit, top);
    jsonw_lit(w, "}]}");
}

/* s_ids_write writes ids as a JSON array of integers, into one piece of scratch memory. */
static void s_ids_write(jsonw_t *w, const int32_t *ids, size_t n)
{
    char *t = sr_xmalloc(12 * n + 2), *q = t;
    *q++ = '[';
    for (size_t i = 0; i < n; i++) {
        if (i)
            *q++ = ',';
        char dig[12];
        int k = 0;
        uint32_t u = ids[i] < 0 ? 0u - (uint32_t)ids[i] : (uint32_t)ids[i];
        do {
            dig[k++] = (char)('0' + u % 10);
            u /= 10;
        } while (u);
        if (ids[i] < 0)
            *q++ = '-';
        while (k > 0)
            *q++ = dig[--k];
    }
    *q++ = ']';
    jsonw_raw(w, t, (size_t)(q - t));
    free(t);
}

/* s_piece_json writes id's piece at q as a quoted JSON string, escaped as jsonw_strn escapes it
 * (a piece is at most 5 bytes: 32 bytes of room), and returns the byte after it. */
static char *s_piece_json(int32_t id, char *q)
{
    static const char hex[] = "0123456789abcdef";
    char piece[8];
    int k = ptok_piece(id, piece);
    *q++ = '"';
    for (int i = 0; i < k; i++) {
        unsigned char c = (unsigned char)piece[i];
        char e = c == '"' ? '"' : c == '\\' ? '\\' : c == '\b' ? 'b' : c == '\f' ? 'f'
               : c == '\n' ? 'n' : c == '\r' ? 'r' : c == '\t' ? 't' : c < 0x20 ? 'u' : 0;
        if (!e) {
            *q++ = (char)c;
        } else if (e == 'u') {
            memcpy(q, "\\u00", 4);
            q[4] = hex[c >> 4];
            q[5] = hex[c & 15];
            q += 6;
        } else {
            *q++ = '\\';
            *q++ = e;
        }
    }
    *q++ = '"';
    return q;
}

/* s_token_logprobs_write writes logprobs.content with one entry per token of ids (return_token_ids):
 * the choice's logprob on token `at` (the first of the action), with the top alternatives there,
 * and 0 on every other token (they follow from the choice; those entries are {token, logprob}
 * only), so the entries sum to the choice's logprob exactly. The lean entries are written into
 * scratch memory and appended in runs. */
static void s_token_logprobs_write(jsonw_t *w, const pparse_state_t *st, const double *p_unit,
                                   double lp, int top, const int32_t *ids, size_t n, size_t at)
{
    static const char open[] = "{\"token\":", lean[] = ",\"logprob\":0}";
    char *t = sr_xmalloc(64 * n + 16), *q = t;
    memcpy(q, "{\"content\":[", 12);
    q += 12;
    for (size_t i = 0; i < n; i++) {
        if (i)
            *q++ = ',';
        memcpy(q, open, sizeof open - 1);
        q = s_piece_json(ids[i], q + sizeof open - 1);
        if (i != at) {
            memcpy(q, lean, sizeof lean - 1); /* lean: no alternatives off the action */
            q += sizeof lean - 1;
            continue;
        }
        jsonw_raw(w, t, (size_t)(q - t));
        q = t;
        jsonw_lit(w, ",\"logprob\":");
        jsonw_num(w, lp);
        jsonw_lit(w, ",\"top_logprobs\":");
        s_top_logprobs_write(w, st, p_unit, top);
        jsonw_lit(w, "}");
    }
    memcpy(q, "]}", 2);
    q += 2;
    jsonw_raw(w, t, (size_t)(q - t));
    free(t);
}

static cJSON *s_usage_json(int prompt, int completion)
{
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", completion);
    cJSON_AddNumberToObject(u, "total_tokens", prompt + completion);
    return u;
}

static cJSON *s_chunk(const char *id, long created, const char *model)
{
    cJSON *ch = cJSON_CreateObject();
    cJSON_AddStringToObject(ch, "id", id);
    cJSON_AddStringToObject(ch, "object", "chat.completion.chunk");
    cJSON_AddNumberToObject(ch, "created", (double)created);
    cJSON_AddStringToObject(ch, "model", model);
    return ch;
}

static void s_sse(s_buf_t *b, cJSON *obj)
{
    char *t = cJSON_PrintUnformatted(obj);
    s_buf_printf(b, "data: %s\n\n", t);
    free(t);
    cJSON_Delete(obj);
}

/* s_answer computes the whole response of a valid request into c. */
static void s_answer(struct policy_server *s, s_conn_t *c, const s_req_t *rq, const model_t *m)
{
    pparse_state_t st;
    pparse_user_text(rq->user, &st);
    model_rng_t rng;
    if (rq->has_seed)
        model_rng_seed(&rng, model_hash64(rq->user, (uint64_t)rq->seed));
    else
        model_rng_seed(&rng, s->o.prior.seed * 0x9E3779B97F4A7C15ULL +
                                 __atomic_fetch_add(&s->seq, 1, __ATOMIC_RELAXED));

    double *p = sr_xcalloc((size_t)(st.n_actions ? st.n_actions : 1), sizeof(double));
    model_choice_t ch = {.index = -1, .logprob = 0, .prob = 1};
    /* One scoring of the candidates gives both the choice and the probabilities the reasoning
     * and the logprobs show (at T, or at 1 when greedy). */
    model_choose_probs(m, &st, rq->temperature, rq->top_p, &rng, &ch, p);
    const char *action = ch.index >= 0 ? st.actions[ch.index] : "look";

    double want = s->o.think_mean + s->o.think_sd * s_gauss(&rng);
    int target = (int)lround(fmax(s->o.think_min, fmin(s->o.think_max, want)));
    s_buf_t content = {0};
    /* The reasoning favours the option the choice drew and is written before the action. */
    char *think = model_reason(m, &st, p, ch.index, target, policy_server_tokens);
    s_buf_add(&content, think, strlen(think));
    free(think);
    s_buf_printf(&content, "<action>%s</action>", action);
    const char *finish = s_cut(&content, rq);
    int completion = policy_server_tokens(content.p);
    int32_t *ids = NULL, *pids = NULL;
    size_t n_ids = 0, n_pids = 0, lp_at = 0;
    if (rq->token_ids && !rq->stream) {
        /* usage counts the ids; the choice's logprob sits on the action's first token */
        n_ids = ptok_encode(content.p, content.len, NULL, 0);
        ids = sr_xcalloc(n_ids ? n_ids : 1, sizeof *ids);
        ptok_encode(content.p, content.len, ids, n_ids);
        n_pids = (size_t)rq->prompt_tokens; /* the prompt's id count, from the parse */
        if (rq->prompt_ids) {
            pids = sr_xcalloc(n_pids ? n_pids : 1, sizeof *pids);
            ptok_encode(rq->prompt.p, rq->prompt.len, pids, n_pids);
        }
        const char *a = content.p ? strstr(content.p, "<action>") : NULL;
        lp_at = a ? ptok_encode(content.p, (size_t)(a - content.p) + 8, NULL, 0) : 0;
        if (n_ids > 0 && lp_at >= n_ids)
            lp_at = n_ids - 1;
        completion = (int)n_ids;
    }
    c->completion_tokens = completion;
    c->cost_tokens = policy_server_tokens(content.p);
    s_add64(&s->tokens_prompt, (uint64_t)rq->prompt_tokens);

    char id[40];
    snprintf(id, sizeof id, "chatcmpl-%016llx", (unsigned long long)model_rng_next(&rng));
    long created = (long)time(NULL);
    char model_name[160];
    if (rq->use_current)
        snprintf(model_name, sizeof model_name, "%s", s->name);
    else
        snprintf(model_name, sizeof model_name, "%s-v%u", s->name, rq->version);
    if (!rq->stream) {
        /* Written directly, in the order and the format of a cJSON tree of the same fields
         * (tests/test_policy_server.c checks that cJSON prints a parsed answer back unchanged). */
        char fp[48];
        snprintf(fp, sizeof fp, "selroll-policy-v%u", model_version(m));
        sr_buf_t out = SR_BUF_INIT;
        jsonw_t w;
        jsonw_init(&w, &out);
        if (sr_buf_reserve(&out, 512 + 2 * content.len) != SR_OK)
            w.rc = SR_ENOMEM;
        jsonw_lit(&w, "{\"id\":");
        jsonw_str(&w, id);
        jsonw_lit(&w, ",\"object\":\"chat.completion\",\"created\":");
        jsonw_num(&w, (double)created);
        jsonw_lit(&w, ",\"model\":");
        jsonw_str(&w, model_name);
        jsonw_lit(&w, ",\"system_fingerprint\":");
        jsonw_str(&w, fp);
        jsonw_lit(&w, ",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\","
                      "\"content\":");
        jsonw_strn(&w, content.p, content.len);
        jsonw_lit(&w, "},\"logprobs\":");
        if (rq->logprobs && ids)
            s_token_logprobs_write(&w, &st, p, ch.logprob, rq->top_logprobs, ids, n_ids,
                                   lp_at);
        else if (rq->logprobs)
            s_logprobs_write(&w, &st, p, ch.index, ch.logprob, rq->top_logprobs);
        else
            jsonw_lit(&w, "null");
        jsonw_lit(&w, ",\"finish_reason\":");
        jsonw_str(&w, finish);
        if (ids) {
            jsonw_lit(&w, ",\"token_ids\":");
            s_ids_write(&w, ids, n_ids);
        }
        jsonw_lit(&w, "}],");
        if (pids) {
            jsonw_lit(&w, "\"prompt_token_ids\":");
            s_ids_write(&w, pids, n_pids);
            jsonw_lit(&w, ",");
        }
        jsonw_lit(&w, "\"usage\":{\"prompt_tokens\":");
        jsonw_num(&w, rq->prompt_tokens);
        jsonw_lit(&w, ",\"completion_tokens\":");
        jsonw_num(&w, completion);
        jsonw_lit(&w, ",\"total_tokens\":");
        jsonw_num(&w, rq->prompt_tokens + completion);
        jsonw_lit(&w, "}}");
        char *body = jsonw_finish(&w);
        if (!body)
            sr_buf_free(&out);
        s_set_resp(c, 200, "application/json", body);
    } else {
        /* SSE: the role, the reasoning, the action (with its logprobs), the finish, usage, [DONE].
         */
        cJSON *lps =
            rq->logprobs ? s_logprobs_json(&st, p, ch.index, ch.logprob, rq->top_logprobs) : NULL;
        s_buf_t b = {0};
        cJSON *ch0 = s_chunk(id, created, model_name), *choices, *c0, *delta;
        choices = cJSON_AddArrayToObject(ch0, "choices");
        c0 = cJSON_CreateObject();
        cJSON_AddNumberToObject(c0, "index", 0);
        delta = cJSON_AddObjectToObject(c0, "delta");
        cJSON_AddStringToObject(delta, "role", "assistant");
        cJSON_AddStringToObject(delta, "content", "");
        cJSON_AddNullToObject(c0, "logprobs");
        cJSON_AddNullToObject(c0, "finish_reason");
        cJSON_AddItemToArray(choices, c0);
        s_sse(&b, ch0);
        const char *split = strstr(content.p, "<action>");
        size_t first = split ? (size_t)(split - content.p) : content.len;
        const char *pieces[2] = {content.p, content.p + first};
        size_t lens[2] = {first, content.len - first};
        for (int i = 0; i < 2; i++) {
            if (!lens[i])
                continue;
            cJSON *chk = s_chunk(id, created, model_name);
            choices = cJSON_AddArrayToObject(chk, "choices");
            c0 = cJSON_CreateObject();
            cJSON_AddNumberToObject(c0, "index", 0);
            delta = cJSON_AddObjectToObject(c0, "delta");
            char *piece = sr_xstrndup(pieces[i], lens[i]);
            cJSON_AddStringToObject(delta, "content", piece);
            free(piece);
            if (i == 1 && lps) {
                cJSON_AddItemToObject(c0, "logprobs", lps);
                lps = NULL;
            } else {
                cJSON_AddNullToObject(c0, "logprobs");
            }
            cJSON_AddNullToObject(c0, "finish_reason");
            cJSON_AddItemToArray(choices, c0);
            s_sse(&b, chk);
        }
        cJSON *fin = s_chunk(id, created, model_name);
        choices = cJSON_AddArrayToObject(fin, "choices");
        c0 = cJSON_CreateObject();
        cJSON_AddNumberToObject(c0, "index", 0);
        cJSON_AddObjectToObject(c0, "delta");
        cJSON_AddNullToObject(c0, "logprobs");
        cJSON_AddStringToObject(c0, "finish_reason", finish);
        cJSON_AddItemToArray(choices, c0);
        s_sse(&b, fin);
        if (rq->include_usage) {
            cJSON *u = s_chunk(id, created, model_name);
            cJSON_AddArrayToObject(u, "choices");
            cJSON_AddItemToObject(u, "usage", s_usage_json(rq->prompt_tokens, completion));
            s_sse(&b, u);
        }
        s_buf_printf(&b, "data: [DONE]\n\n");
        cJSON_Delete(lps);
        s_set_resp(c, 200, "text/event-stream", b.p);
    }
    free(content.p);
    free(p);
    free(ids);
    free(pids);
    pparse_state_clear(&st);
}

/* ---------------------------------------------------------------- the hold and the watcher */

static void s_conn_unref(s_conn_t *c)
{
    if (__atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    free(c->body);
    free(c->resp);
    free(c);
}

static void s_wake(struct policy_server *s)
{
    uint64_t one = 1;
    ssize_t n = write(s->wake_fd, &one, sizeof one);
    (void)n;
}

/* s_unwatch_locked detaches c from its connection's watch entry: a hang-up no longer aborts it. */
static void s_unwatch_locked(struct policy_server *s, s_conn_t *c)
{
    (void)s;
    if (c->sock && c->sock->held == c)
        c->sock->held = NULL;
    c->sock = NULL;
}

/* s_notify follows libmicrohttpd's connections: a new one's socket joins the epoll set (one
 * epoll_ctl for the connection's whole life, whatever number of requests it carries), a closed
 * one leaves it. */
static void s_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                     enum MHD_ConnectionNotificationCode toe)
{
    struct policy_server *s = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        s_sock_t *k = sr_xcalloc(1, sizeof *k);
        k->fd = ci ? ci->connect_fd : -1;
        k->watch_idx = -1;
        pthread_mutex_lock(&s->mu);
        k->id = ++s->next_watch_id;
        struct epoll_event ev = {.events = EPOLLRDHUP | EPOLLET, .data.u64 = k->id};
        if (k->fd >= 0 && epoll_ctl(s->epfd, EPOLL_CTL_ADD, k->fd, &ev) == 0) {
            if (s->n_watch == s->cap_watch) {
                s->cap_watch = s->cap_watch ? s->cap_watch * 2 : 64;
                s->watch = sr_xrealloc(s->watch, sizeof(*s->watch) * (size_t)s->cap_watch);
            }
            k->watch_idx = s->n_watch;
            s->watch[s->n_watch++] = (s_watch_t){.sock = k, .id = k->id};
        }
        pthread_mutex_unlock(&s->mu);
        *socket_context = k;
        return;
    }
    s_sock_t *k = *socket_context;
    if (toe != MHD_CONNECTION_NOTIFY_CLOSED || !k)
        return;
    pthread_mutex_lock(&s->mu);
    int i = k->watch_idx;
    if (i >= 0 && i < s->n_watch && s->watch[i].sock == k) {
        epoll_ctl(s->epfd, EPOLL_CTL_DEL, k->fd, NULL);
        s->watch[i] = s->watch[--s->n_watch];
        if (i < s->n_watch)
            s->watch[i].sock->watch_idx = i;
    }
    if (k->held) /* libmicrohttpd closes no suspended connection: not expected */
        k->held->sock = NULL;
    pthread_mutex_unlock(&s->mu);
    free(k);
    *socket_context = NULL;
}

static void s_engine_done(void *arg, const engine_done_t *d)
{
    (void)d;
    s_conn_t *c = arg;
    struct policy_server *s = c->srv;
    pthread_mutex_lock(&s->mu);
    if (c->state == S_SUBMITTING) {
        c->state = S_EARLY;
    } else if (c->state == S_WAITING) {
        c->state = S_DONE;
        s_unwatch_locked(s, c);
        MHD_resume_connection(c->conn);
    }
    pthread_mutex_unlock(&s->mu);
    s_conn_unref(c);
}

/* s_abort_locked aborts a held request (client gone or shutdown); mutex held. */
static void s_abort_locked(struct policy_server *s, s_conn_t *c)
{
    if (c->state != S_WAITING)
        return;
    s_unwatch_locked(s, c);
    if (engine_abort(s->engine, c->engine_id) != SR_OK)
        return; /* completing right now: the engine callback resumes it */
    c->state = S_ABORTED;
    s_add64(&s->req_aborted, 1);
    MHD_resume_connection(c->conn);
    __atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL); /* the engine's; MHD still holds one */
}

/* The epoll keys of libmicrohttpd's own epoll set in the single event loop and of the store
 * queue's eventfd (watch ids count up from 1, the wake fd is 0). */
#define S_KEY_MHD UINT64_MAX
#define S_KEY_STOREQ (UINT64_MAX - 1)

/* s_epoll_wait waits on the server's epoll set at most wait_ns (< 0: no limit). */
static int s_epoll_wait(struct policy_server *s, struct epoll_event *evs, int n, int64_t wait_ns)
{
    if (wait_ns < 0)
        return epoll_wait(s->epfd, evs, n, -1);
#ifdef SYS_epoll_pwait2
    static atomic_bool no_pwait2; /* kernels before 5.11 (and valgrind) do not know it */
    if (!atomic_load(&no_pwait2)) {
        struct timespec ts = {(time_t)(wait_ns / 1000000000), (long)(wait_ns % 1000000000)};
        int r = (int)syscall(SYS_epoll_pwait2, s->epfd, evs, n, &ts, NULL, (size_t)8);
        if (r >= 0 || errno != ENOSYS)
            return r;
        atomic_store(&no_pwait2, true);
    }
#endif
    return epoll_wait(s->epfd, evs, n, (int)((wait_ns + 999999) / 1000000)); /* rounded up */
}

/* s_events handles what the epoll set reported: a hang-up of a held request's socket aborts it in
 * the engine; the wake fd is drained (libmicrohttpd's set needs nothing here: the event loop runs
 * it after every wait). Returns true when the server is stopping. */
static bool s_events(struct policy_server *s, const struct epoll_event *evs, int r)
{
    bool loads = false;
    pthread_mutex_lock(&s->mu);
    bool stop = s->stopping;
    for (int i = 0; i < r && !stop; i++) {
        uint64_t id = evs[i].data.u64;
        if (id == S_KEY_MHD) {
            continue;
        } else if (id == S_KEY_STOREQ) {
            loads = true;
        } else if (id == 0) {
            uint64_t v;
            ssize_t got = read(s->wake_fd, &v, sizeof v);
            (void)got;
        } else {
            for (int k = 0; k < s->n_watch; k++) {
                if (s->watch[k].id == id) {
                    s_sock_t *sock = s->watch[k].sock;
                    sock->hup = true;
                    if (sock->held)
                        s_abort_locked(s, sock->held);
                    break;
                }
            }
        }
    }
    pthread_mutex_unlock(&s->mu);
    if (loads && !stop)
        storeq_dispatch(s->sq); /* the completions take the mutex themselves */
    return stop;
}

static void s_wait_failed(const char *who)
{
    /* Never give up watching: a dead watcher would leave hung-up requests decoding. */
    fprintf(stderr, "policy-server: %s: epoll_wait: %s\n", who, strerror(errno));
    struct timespec pause = {0, 10 * 1000 * 1000};
    nanosleep(&pause, NULL);
}

/* s_watcher waits on the epoll set: a hang-up of a held request's socket aborts it in the engine.
 * Adding and removing a socket is an epoll_ctl by the thread that holds or resumes the request,
 * so the watcher wakes only for hang-ups and the stop. */
static void *s_watcher(void *arg)
{
    struct policy_server *s = arg;
    struct epoll_event evs[64];
    for (;;) {
        int r = epoll_wait(s->epfd, evs, (int)(sizeof evs / sizeof evs[0]), -1);
        if (r < 0 && errno != EINTR) {
            s_wait_failed("disconnect watcher");
            continue;
        }
        if (s_events(s, evs, r))
            break;
    }
    return NULL;
}

/* s_loop is the whole server on one thread (--threads 1): libmicrohttpd's epoll set, the held
 * requests' sockets and the wake fd in one epoll set, and a manual engine advanced to the wall
 * clock after every wait, which lasts at most until the engine's next event. A request costs no
 * hand-off between threads: it is read, parsed and submitted where it arrives, and its answer is
 * resumed and written where the engine completes it. */
static void *s_loop(void *arg)
{
    struct policy_server *s = arg;
    struct epoll_event evs[64];
    for (;;) {
        int64_t wait_ns = -1;
        MHD_UNSIGNED_LONG_LONG to = 0;
        if (MHD_get_timeout(s->d, &to) == MHD_YES)
            wait_ns = (int64_t)SR_MIN(to, (MHD_UNSIGNED_LONG_LONG)INT32_MAX) * 1000000;
        if (s->engine) {
            double next = engine_next_event(s->engine);
            if (next >= 0) {
                double dt = (next - engine_wall_now(s->engine)) / engine_time_scale(s->engine);
                int64_t ns = dt > 0 ? (int64_t)(dt * 1e9) + 1 : 0;
                wait_ns = wait_ns < 0 ? ns : SR_MIN(wait_ns, ns);
            }
        }
        int r = s_epoll_wait(s, evs, (int)(sizeof evs / sizeof evs[0]), wait_ns);
        if (r < 0 && errno != EINTR) {
            s_wait_failed("event loop");
            continue;
        }
        /* The engine first (completions resume their connections), so that an abort below
         * counts the tokens decoded until now. */
        if (s->engine)
            engine_advance(s->engine, engine_wall_now(s->engine));
        if (s_events(s, evs, r))
            break;
        MHD_run(s->d);
    }
    return NULL;
}

/* s_hold parks a ready response in the engine; returns MHD_YES (suspended or queued). */
static enum MHD_Result s_hold(struct policy_server *s, struct MHD_Connection *conn, s_conn_t *c,
                              int prompt_tokens)
{
    pthread_mutex_lock(&s->mu);
    c->state = S_SUBMITTING;
    __atomic_add_fetch(&c->refs, 1, __ATOMIC_ACQ_REL);
    pthread_mutex_unlock(&s->mu);

    uint64_t id = 0;
    if (s->loop) /* the request arrives now, not at the engine's last event */
        engine_advance(s->engine, engine_wall_now(s->engine));
    int rc = engine_submit(s->engine, prompt_tokens, c->cost_tokens, s_engine_done, c, &id);

    pthread_mutex_lock(&s->mu);
    if (rc != SR_OK) {
        pthread_mutex_unlock(&s->mu);
        s_conn_unref(c);
        c->state = S_DONE;
        s_error(c, 503, "the engine queue is full; try again later");
        return s_queue(conn, c);
    }
    c->engine_id = id;
    if (c->state == S_EARLY || s->stopping) {
        if (c->state != S_EARLY && engine_abort(s->engine, id) == SR_OK)
            __atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL);
        bool aborted = c->state != S_EARLY;
        c->state = aborted ? S_ABORTED : S_DONE;
        pthread_mutex_unlock(&s->mu);
        return aborted ? MHD_NO : s_queue(conn, c);
    }
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    s_sock_t *sock = ci ? ci->socket_context : NULL;
    c->state = S_WAITING;
    MHD_suspend_connection(conn);
    if (sock && sock->watch_idx >= 0) {
        sock->held = c;
        c->sock = sock;
        if (sock->hup) /* the client hung up before: its edge will not come again */
            s_abort_locked(s, c);
    }
    pthread_mutex_unlock(&s->mu);
    return MHD_YES;
}

/* ---------------------------------------------------------------- routes */

/* s_models lists the plain name and each version the server holds now (version 0, the served
 * one and the cached ones), newest first. Versions still only in the weights source are not
 * listed: they are loaded on their first request. */
static void s_models(struct policy_server *s, s_conn_t *c)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(root, "data");
    uint32_t versions[S_MAX_CACHED + 8];
    size_t nv = 0;
    pthread_mutex_lock(&s->mu);
    versions[nv++] = s->current->version;
    for (s_mref_t *r = s->models; r && nv < SR_ARRAY_LEN(versions); r = r->next)
        if (r->version != s->current->version)
            versions[nv++] = r->version;
    pthread_mutex_unlock(&s->mu);
    for (size_t i = 0; i <= nv; i++) {
        char id[160];
        if (i == 0)
            snprintf(id, sizeof id, "%s", s->name);
        else
            snprintf(id, sizeof id, "%s-v%u", s->name, versions[i - 1]);
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "id", id);
        cJSON_AddStringToObject(m, "object", "model");
        cJSON_AddNumberToObject(m, "created", (double)s->started);
        cJSON_AddStringToObject(m, "owned_by", "selroll");
        cJSON_AddNumberToObject(m, "max_model_len", 32768);
        cJSON_AddItemToArray(data, m);
    }
    s_set_resp(c, 200, "application/json", cJSON_PrintUnformatted(root));
    cJSON_Delete(root);
}

static void s_metrics(struct policy_server *s, s_conn_t *c)
{
    engine_stats_t es;
    policy_server_engine_stats(s, &es);
    s_buf_t b = {0};
    s_buf_printf(
        &b, "# HELP selroll_policy_requests_total Chat completion requests answered, by outcome.\n"
            "# TYPE selroll_policy_requests_total counter\n");
    static const char *names[] = {"ok",         "bad_request", "not_found",
                                  "queue_full", "aborted",     "other"};
    uint64_t *vals[] = {&s->req_ok,   &s->req_bad,     &s->req_notfound,
                        &s->req_full, &s->req_aborted, &s->req_other};
    for (size_t i = 0; i < SR_ARRAY_LEN(names); i++)
        s_buf_printf(&b, "selroll_policy_requests_total{outcome=\"%s\"} %llu\n", names[i],
                     (unsigned long long)s_get64(vals[i]));
    s_buf_printf(
        &b,
        "# HELP selroll_policy_running Requests in the engine's running batch.\n"
        "# TYPE selroll_policy_running gauge\nselroll_policy_running %d\n"
        "# HELP selroll_policy_queued Requests waiting for the running batch.\n"
        "# TYPE selroll_policy_queued gauge\nselroll_policy_queued %d\n"
        "# HELP selroll_policy_generated_tokens_total Tokens of completed responses.\n"
        "# TYPE selroll_policy_generated_tokens_total "
        "counter\nselroll_policy_generated_tokens_total %llu\n"
        "# HELP selroll_policy_aborted_tokens_total Tokens decoded for requests aborted before the "
        "end.\n"
        "# TYPE selroll_policy_aborted_tokens_total counter\nselroll_policy_aborted_tokens_total "
        "%llu\n"
        "# HELP selroll_policy_prompt_tokens_total Prompt tokens of answered requests.\n"
        "# TYPE selroll_policy_prompt_tokens_total counter\nselroll_policy_prompt_tokens_total "
        "%llu\n"
        "# HELP selroll_policy_weights_version Version served under the plain model name.\n"
        "# TYPE selroll_policy_weights_version gauge\nselroll_policy_weights_version %u\n",
        es.running, es.queued,
        (unsigned long long)(s->o.cost_model ? es.tokens_generated
                                             : s_get64(&s->tokens_completion)),
        (unsigned long long)es.tokens_aborted, (unsigned long long)s_get64(&s->tokens_prompt),
        policy_server_version(s));
    s_buf_printf(
        &b, "# HELP selroll_policy_latency_seconds Chat completion time from request to response.\n"
            "# TYPE selroll_policy_latency_seconds histogram\n");
    for (size_t i = 0; i < S_NBUCKETS; i++)
        s_buf_printf(&b, "selroll_policy_latency_seconds_bucket{le=\"%g\"} %llu\n", S_BUCKETS[i],
                     (unsigned long long)s_get64(&s->lat_buckets[i]));
    double sum = (double)s_get64(&s->lat_sum_ns) * 1e-9;
    s_buf_printf(&b,
                 "selroll_policy_latency_seconds_bucket{le=\"+Inf\"} "
                 "%llu\nselroll_policy_latency_seconds_sum %.6f\n"
                 "selroll_policy_latency_seconds_count %llu\n",
                 (unsigned long long)s_get64(&s->lat_count), sum,
                 (unsigned long long)s_get64(&s->lat_count));
    s_set_resp(c, 200, "text/plain; version=0.0.4", b.p);
}

/* ---------------------------------------------------------------- weight loads */

typedef struct {
    struct policy_server *s;
    s_conn_t *c;
    uint32_t version;
    s_mref_t *mr; /* the model, referenced, when the load succeeded */
} s_load_t;

/* s_load_work fetches and decodes the version off the mutex, then caches it (or remembers it
 * missing) under the mutex, all on the store thread: the next load of the same version, right
 * behind it in the queue, finds it settled. */
static int s_load_work(store_t *st, void *arg, char *err)
{
    (void)st;
    (void)err;
    s_load_t *l = arg;
    return s_model_acquire(l->s, l->version, &l->mr);
}

/* s_load_done resumes the request: its handler runs again (S_LOADED) and finds the version
 * cached, or its failure remembered. */
static void s_load_done(int rc, const char *err, void *arg)
{
    (void)err;
    s_load_t *l = arg;
    struct policy_server *s = l->s;
    s_conn_t *c = l->c;
    pthread_mutex_lock(&s->mu);
    s->ld_n--;
    c->loaded = true;
    c->load_rc = rc;
    c->pinned = rc == SR_OK ? l->mr : NULL;
    c->state = S_LOADED;
    MHD_resume_connection(c->conn);
    pthread_mutex_unlock(&s->mu);
    s_wake(s);
    s_conn_unref(c);
    free(l);
}

/* s_load_later suspends request c until the store thread has fetched `version`. SR_EFULL when
 * too many loads are queued. */
static int s_load_later(struct policy_server *s, struct MHD_Connection *conn, s_conn_t *c,
                        uint32_t version)
{
    pthread_mutex_lock(&s->mu);
    if (s->ld_n >= S_MAX_LOADS || s->stopping || !s->sq || !s->o.source) {
        pthread_mutex_unlock(&s->mu);
        return SR_EFULL;
    }
    s->ld_n++;
    __atomic_add_fetch(&c->refs, 1, __ATOMIC_ACQ_REL); /* the load's */
    c->load_version = version;
    c->state = S_LOADING;
    MHD_suspend_connection(conn);
    pthread_mutex_unlock(&s->mu);
    s_load_t *l = sr_xcalloc(1, sizeof *l);
    l->s = s;
    l->c = c;
    l->version = version;
    if (storeq_submit(s->sq, s_load_work, s_load_done, l) != SR_OK)
        s_load_done(SR_ECLOSED, "the store queue was closed", l);
    return SR_OK;
}

static enum MHD_Result s_completions(struct policy_server *s, struct MHD_Connection *conn,
                                     s_conn_t *c)
{
    if (c->too_big) {
        s_error(c, 400, "request body larger than %zu bytes", s->o.max_body);
        return s_queue(conn, c);
    }
    cJSON *root = cJSON_ParseWithLength(c->body ? c->body : "", c->len);
    if (!root) {
        s_error(c, 400, "invalid JSON in request body");
        return s_queue(conn, c);
    }
    s_req_t rq;
    int rc = s_parse_request(s, c, root, &rq);
    if (rc == SR_OK) {
        pthread_mutex_lock(&s->mu);
        s_mref_t *mr = NULL;
        rc = s_model_lookup_locked(s, rq.use_current, rq.version, &mr);
        if (c->pinned) { /* the load's reference: the lookup took its own */
            c->pinned->refs--;
            c->pinned = NULL;
        }
        pthread_mutex_unlock(&s->mu);
        if (rc == SR_EAGAIN && c->loaded)
            rc = c->load_rc; /* loaded once already: its answer, not a second load */
        if (rc == SR_EAGAIN) {
            rc = s_load_later(s, conn, c, rq.version);
            if (rc == SR_OK) {
                free(rq.user);
                cJSON_Delete(root);
                return MHD_YES; /* answered when its load resumes it */
            }
            s_error(c, 503, "too many policy versions are being loaded; try again later");
        } else if (rc == SR_ENOTFOUND) {
            s_error(c, 404, "The model `%s-v%u` does not exist: policy version %u has no weights%s.",
                    s->name, rq.version, rq.version,
                    s->o.source ? " in the weights source" : " (the server has no weights source)");
        } else if (rc == SR_EPROTO) {
            s_error(c, 404, "The model `%s-v%u` does not exist: the weights of policy version %u "
                            "are malformed.", s->name, rq.version, rq.version);
        } else if (rc != SR_OK) {
            s_error(c, 500, "The weights of policy version %u could not be read: %s", rq.version,
                    sr_strerror(rc));
        } else {
            s_answer(s, c, &rq, mr->m);
            s_model_put(s, mr);
        }
    }
    int prompt_tokens = rq.cost_prompt_tokens;
    free(rq.user);
    free(rq.prompt.p);
    cJSON_Delete(root);
    if (rc != SR_OK || !s->o.cost_model) {
        if (rc == SR_OK)
            s_add64(&s->tokens_completion, (uint64_t)c->completion_tokens);
        return s_queue(conn, c);
    }
    return s_hold(s, conn, c, prompt_tokens);
}

static enum MHD_Result s_handler(void *cls, struct MHD_Connection *conn, const char *url,
                                 const char *method, const char *version, const char *upload,
                                 size_t *upload_size, void **con_cls)
{
    struct policy_server *s = cls;
    s_conn_t *c = *con_cls;
    if (!c) {
        c = sr_xcalloc(1, sizeof(*c));
        c->srv = s;
        c->conn = conn;
        c->refs = 1;
        c->t0_ns = s_now_ns();
        *con_cls = c;
        return MHD_YES;
    }
    pthread_mutex_lock(&s->mu);
    s_state_t st = c->state;
    pthread_mutex_unlock(&s->mu);
    if (st == S_DONE)
        return s_queue(conn, c);
    if (st == S_ABORTED)
        return MHD_NO;
    if (st == S_LOADED) {
        c->state = S_DONE;
        return s_completions(s, conn, c);
    }
    if (*upload_size) {
        if (c->len + *upload_size > s->o.max_body) {
            c->too_big = true;
        } else {
            if (c->len + *upload_size + 1 > c->cap) {
                c->cap = (c->len + *upload_size + 1) * 2;
                if (c->cap > s->o.max_body + 1)
                    c->cap = s->o.max_body + 1;
                c->body = sr_xrealloc(c->body, c->cap);
            }
            memcpy(c->body + c->len, upload, *upload_size);
            c->len += *upload_size;
            c->body[c->len] = '\0';
        }
        *upload_size = 0;
        return MHD_YES;
    }
    c->state = S_DONE;
    bool get = strcmp(method, "GET") == 0, post = strcmp(method, "POST") == 0;
    if (strcmp(url, "/v1/chat/completions") == 0) {
        c->completion = post;
        if (post)
            return s_completions(s, conn, c);
        s_error(c, 405, "use POST for %s", url);
    } else if (strcmp(url, "/v1/models") == 0 && get) {
        s_models(s, c);
    } else if (strcmp(url, "/health") == 0 && get) {
        s_set_resp(c, 200, "application/json", sr_xstrdup("{\"status\":\"ok\"}"));
    } else if (strcmp(url, "/metrics") == 0 && get) {
        s_metrics(s, c);
    } else if (strcmp(url, "/v1/models") == 0 || strcmp(url, "/health") == 0 ||
               strcmp(url, "/metrics") == 0) {
        s_error(c, 405, "use GET for %s", url);
    } else {
        s_error(c, 404, "no route for %s %s", method, url);
    }
    return s_queue(conn, c);
}

static void s_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                        enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)conn;
    (void)toe;
    s_conn_t *c = *con_cls;
    if (c)
        s_conn_unref(c);
    *con_cls = NULL;
}

/* ---------------------------------------------------------------- lifecycle */

void policy_server_opts_default(policy_server_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->host = "127.0.0.1";
    o->port = 8000;
    o->model_name = "selroll-policy";
    prior_opts_default(&o->prior);
    o->cost_model = true;
    o->conn_timeout_s = 600;
    engine_opts_default(&o->engine);
    o->think_mean = 120;
    o->think_sd = 40;
    o->think_min = 16;
    o->think_max = 512;
    o->threads = 1;
    o->max_body = 4u << 20;
}

policy_server_t *policy_server_new(const policy_server_opts_t *o, char *err, size_t errlen)
{
    struct policy_server *s = NULL;
    const char *why = NULL;
    if (!o || !o->model_name || !o->model_name[0] || strlen(o->model_name) >= 100 || o->port < 0 ||
        o->port > 65535 || o->think_min < 0 || o->think_max < o->think_min || o->think_sd < 0 ||
        o->threads < 1 || o->max_body < 64) {
        why = "bad policy server options";
        goto fail;
    }
    s = sr_xcalloc(1, sizeof(*s));
    s->o = *o;
    s->wake_fd = -1;
    s->epfd = -1;
    snprintf(s->host, sizeof s->host, "%s", o->host ? o->host : "127.0.0.1");
    snprintf(s->name, sizeof s->name, "%s", o->model_name);
    s->o.host = s->host;
    s->o.model_name = s->name;
    s->started = (int64_t)time(NULL);
    pthread_mutex_init(&s->mu, NULL);

    model_t *m0 = prior_build(&o->prior);
    if (!m0) {
        why = "out of memory building version 0";
        goto fail;
    }
    s->models = sr_xcalloc(1, sizeof(*s->models));
    s->models->m = m0;
    s->current = s->models;

    s->loop = o->threads == 1;
    if (o->cost_model) {
        s->engine = s->loop ? engine_new_manual(&o->engine) : engine_new(&o->engine);
        if (!s->engine) {
            why = "bad cost-model options";
            goto fail;
        }
    }
    s->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    s->epfd = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event wev = {.events = EPOLLIN, .data.u64 = 0};
    if (s->wake_fd < 0 || s->epfd < 0 || epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->wake_fd, &wev) != 0) {
        why = "cannot create the watcher's epoll set";
        goto fail;
    }
    if (o->source || o->redis_url) {
        /* The weights source keeps its own connection, used on this thread only; redis_url is
         * the thread's connection for policy_server_submit. */
        char qerr[STOREQ_ERR_MAX];
        s->sq = storeq_new_fd(o->redis_url, o->run ? o->run : "default", 1000, qerr, sizeof qerr);
        struct epoll_event qev = {.events = EPOLLIN, .data.u64 = S_KEY_STOREQ};
        if (!s->sq || epoll_ctl(s->epfd, EPOLL_CTL_ADD, storeq_fd(s->sq), &qev) != 0) {
            why = "cannot start the weights loader";
            goto fail;
        }
    }
    if (!s->loop && pthread_create(&s->watcher, NULL, s_watcher, s) != 0) {
        why = "cannot start the watcher thread";
        goto fail;
    }
    s->watcher_started = !s->loop;

    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)o->port)};
    if (inet_pton(AF_INET, s->host, &sa.sin_addr) != 1) {
        why = "the listen host must be an IPv4 address";
        goto fail;
    }
    unsigned flags = MHD_ALLOW_SUSPEND_RESUME | MHD_USE_TURBO |
                     (s->loop ? MHD_USE_EPOLL : MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO);
    s->d = MHD_start_daemon(
        flags, (uint16_t)o->port, NULL, NULL, s_handler, s, MHD_OPTION_SOCK_ADDR, &sa,
        MHD_OPTION_NOTIFY_COMPLETED, s_completed, s, MHD_OPTION_NOTIFY_CONNECTION, s_notify, s,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)(o->threads > 1 ? o->threads : 0),
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)(o->conn_timeout_s > 0 ? o->conn_timeout_s : 600),
        MHD_OPTION_CONNECTION_LIMIT, 10000u, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
        (unsigned)(o->max_conns_per_ip > 0 ? o->max_conns_per_ip : 0),
        MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u, MHD_OPTION_END);
    if (!s->d) {
        why = "cannot listen on the address (in use?)";
        goto fail;
    }
    if (s->loop) {
        const union MHD_DaemonInfo *ei = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_EPOLL_FD);
        struct epoll_event mev = {.events = EPOLLIN, .data.u64 = S_KEY_MHD};
        if (!ei || ei->epoll_fd < 0 || epoll_ctl(s->epfd, EPOLL_CTL_ADD, ei->epoll_fd, &mev) != 0 ||
            pthread_create(&s->watcher, NULL, s_loop, s) != 0) {
            why = "cannot start the event loop";
            goto fail;
        }
        s->watcher_started = true;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : o->port;
    return s;

fail:
    if (err && errlen)
        snprintf(err, errlen, "%s", why);
    policy_server_destroy(&s);
    return NULL;
}

int policy_server_port(const policy_server_t *s)
{
    return s ? s->port : 0;
}

void policy_server_engine_stats(policy_server_t *s, engine_stats_t *out)
{
    memset(out, 0, sizeof(*out));
    if (s && s->engine)
        engine_stats(s->engine, out);
}

void policy_server_destroy(policy_server_t **sp)
{
    if (!sp || !*sp)
        return;
    struct policy_server *s = *sp;
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    for (int i = 0; i < s->n_watch; i++) {
        s_conn_t *c = s->watch[i].sock->held;
        if (c) {
            s_abort_locked(s, c);
            s_unwatch_locked(s, c);
        }
    }
    if (s->wake_fd >= 0)
        s_wake(s);
    pthread_mutex_unlock(&s->mu);
    if (s->loop) {
        /* The loop thread is the only one that drives the engine and the daemon: stop it first,
         * then let the daemon take the resumed connections once more before it closes them. */
        if (s->watcher_started)
            pthread_join(s->watcher, NULL);
        s->watcher_started = false;
        /* Loads still queued: their requests resumed with SR_ECLOSED (answered 500). */
        storeq_destroy(&s->sq);
        if (s->d)
            MHD_run(s->d);
    }
    engine_destroy(
        &s->engine); /* delivers completions still pending: they resume their connections */
    if (s->watcher_started)
        pthread_join(s->watcher, NULL);
    storeq_destroy(&s->sq); /* resumes the loads' requests before the daemon stops */
    if (s->d)
        MHD_stop_daemon(s->d);
    if (s->wake_fd >= 0)
        close(s->wake_fd);
    if (s->epfd >= 0)
        close(s->epfd);
    while (s->models) {
        s_mref_t *n = s->models->next;
        model_destroy(&s->models->m);
        free(s->models);
        s->models = n;
    }
    free(s->watch);
    pthread_mutex_destroy(&s->mu);
    free(s);
    *sp = NULL;
}
