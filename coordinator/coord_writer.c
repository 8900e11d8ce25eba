/*
 * coord_writer.c — the coordinator's file writers. The round writer: a thread with its own Redis
 * connection that writes each ended round's <out>/rounds/round-N.jsonl and only then records
 * rounds_done, while the loop runs the next round; an eventfd tells the loop it is idle. A round's
 * results come from its open round, which kept what the sink stored (ci_hold_result), or are read
 * back from Redis where this process does not hold them. The file queue (a storeq without
 * Redis): coord_file_write's files, written off the loop with retries.
 *
 * Part of the coordinator (coordinator/coord_int.h lists its files).
 */
#include "coordinator/coord_int.h"

/* ---- a round's results, held ---------------------------------------------------------------- */

/* ci_hold_result keeps a stored RESULT in its open round R for the writer: its bytes taken from
 * the sink (*o->body, moved), its fields from the message the sink decoded on arrival, so the
 * round is neither read back from Redis nor decoded again. A round whose order in Redis becomes
 * unknown (a failed store attempt, whose append may have landed earlier than this process saw it
 * land) or that has a final copy another process stored (STALE final) stops holding: its results
 * are freed now and the writer reads the round back from Redis. */
void ci_hold_result(coord_t *c, ci_open_t *R, const ci_sink_outcome_t *o)
{
    (void)c;
    if (o->kind != CI_SINK_STORED || o->reordered || !o->msg || !o->body || !*o->body) {
        R->in_order = false;
        coord_results_destroy(&R->held);
        return;
    }
    if (!R->held)
        return; /* not held (no output folder, or read back) */
    if (coord_results_add_owned(R->held, &o->msg->u.result, o->body, o->len) != SR_OK) {
        R->in_order = false; /* a job stored twice: cannot happen, Redis decides */
        coord_results_destroy(&R->held);
    }
}

void ci_held_results_free(coord_t *c)
{
    for (int i = 0; i < c->nopen; i++)
        coord_results_destroy(&c->open[i].held);
    for (size_t i = 0; i < c->wr_n; i++)
        coord_results_destroy(&c->wr_q[i].held);
}

/* ---- the round writer ---------------------------------------------------------------------- */

/* s_write_round writes round `round`'s JSONL file when the run has an output folder, then records
 * rounds_done, on the writer's own Redis connection (*st, made on first use). Its results are
 * `held` (the loop's, kept by the sink; the writer owns them) or, when NULL, read back from Redis
 * here: a round this process did not see whole (begun by a previous coordinator before a resume,
 * or whose storage order became unknown). The gate's per-group fields are read from Redis either
 * way. Returns SR_OK, or the Redis or file error that makes the writer try again (held stays
 * intact for that): a round whose file could not be written is never recorded as done. */
static int s_write_round(coord_t *c, store_t **st, int64_t round, coord_results_t *held)
{
    char err[512];
    int rc = SR_OK;
    if (!*st && (rc = store_connect(st, c->cfg.redis_url, c->cfg.run, c->cfg.redis_timeout_ms, err,
                                    sizeof err)) != SR_OK) {
        log_error_limited(1, "round writer: %s", err);
        return rc;
    }
    if (c->cfg.out_dir) {
        coord_results_t *res = held;
        if (!res) {
            /* not held by this process: Redis has the round's results (stored by us or by the
             * coordinator before a resume) */
            log_info("round %lld: its results are read back from Redis (not all stored in order "
                     "by this process)",
                     (long long)round);
            res = coord_results_new();
            rc = res ? coord_results_load(res, *st, round, NULL) : SR_ENOMEM;
            if (rc != SR_OK) {
                log_error_limited(1, "round %lld: cannot read its results back: %s",
                                  (long long)round, store_errstr(*st));
                coord_results_destroy(&res);
                return rc;
            }
        }
        char path[4096];
        snprintf(path, sizeof path, "%s/rounds/round-%lld.jsonl", c->cfg.out_dir, (long long)round);
        if (coord_results_load_gate(res, *st) != SR_OK)
            log_warn("round %lld: cannot read the gate's rule records: %s", (long long)round,
                     store_errstr(*st));
        rc = coord_results_write_jsonl(res, path, err, sizeof err);
        if (res != held)
            coord_results_destroy(&res);
        if (rc != SR_OK) {
            /* never recorded as done: the writer tries the same round again */
            log_error_limited(1, "round %lld: %s; trying again", (long long)round, err);
            return rc;
        }
    }
    if ((rc = store_run_set_int(*st, "rounds_done", round + 1)) != SR_OK)
        log_error_limited(1, "round %lld: cannot record the end of the round: %s", (long long)round,
                          store_errstr(*st));
    else if (c->cfg.out_dir)
        metrics_counter_inc(held ? c->m_written_held : c->m_written_redis);
    return rc;
}

static void *s_writer(void *arg)
{
    coord_t *c = arg;
    store_t *st = NULL;
    pthread_mutex_lock(&c->wr_mu);
    for (;;) {
        while (!c->wr_stop && c->wr_n == 0)
            pthread_cond_wait(&c->wr_cv, &c->wr_mu);
        if (c->wr_n == 0)
            break; /* stopping with nothing left to write */
        /* wr_q may move while unlocked; the results it holds do not */
        ci_wr_item_t it = c->wr_q[0];
        int64_t round = it.round;
        c->wr_busy = true;
        pthread_mutex_unlock(&c->wr_mu);
        int rc = s_write_round(c, &st, round, it.held);
        if (rc != SR_OK)
            store_destroy(&st); /* a fresh connection for the next attempt */
        pthread_mutex_lock(&c->wr_mu);
        c->wr_busy = false;
        if (rc != SR_OK) {
            if (c->wr_stop) {
                log_error("round %lld: its results file was not written (stopping); resume "
                          "the run to write it",
                          (long long)round);
                break;
            }
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 250 * 1000 * 1000;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&c->wr_cv, &c->wr_mu, &ts);
            continue; /* the same round again */
        }
        c->wr_q[0].held = NULL; /* written: released at once (it.held, below) */
        memmove(c->wr_q, c->wr_q + 1, (c->wr_n - 1) * sizeof *c->wr_q);
        c->wr_n--;
        uint64_t one = 1;
        ssize_t w = write(c->wr_fd, &one, sizeof one);
        (void)w;
        pthread_mutex_unlock(&c->wr_mu);
        coord_results_destroy(&it.held);
        pthread_mutex_lock(&c->wr_mu);
    }
    pthread_mutex_unlock(&c->wr_mu);
    store_destroy(&st);
    return NULL;
}

/* ci_writer_push hands an ended round and its held results to the writer (started on first use).
 * At most one round's held results wait in the writer: when an earlier round's are still there
 * (the writer is behind), this round's are released and read back from Redis when its turn comes,
 * so the writer never keeps more results in memory than one round's. */
int ci_writer_push(coord_t *c, int64_t round, coord_results_t **held)
{
    coord_results_t *h = *held;
    *held = NULL;
    if (!c->wr_started) {
        c->m_written_held = metrics_counter(
            c->metrics, "selroll_coord_rounds_written_total",
            "Round files written, by where their results came from: held (kept as the sink stored "
            "them) or redis (read back: a round begun before a resume, or a store error).",
            "source", "held", NULL);
        c->m_written_redis = metrics_counter(
            c->metrics, "selroll_coord_rounds_written_total",
            "Round files written, by where their results came from: held (kept as the sink stored "
            "them) or redis (read back: a round begun before a resume, or a store error).",
            "source", "redis", NULL);
        if (pthread_create(&c->wr_thread, NULL, s_writer, c) != 0) {
            coord_results_destroy(&h);
            return SR_ENOMEM;
        }
        c->wr_started = true;
    }
    coord_results_t *drop = NULL; /* freed once the lock is released */
    pthread_mutex_lock(&c->wr_mu);
    for (size_t i = 0; i < c->wr_n && h; i++)
        if (c->wr_q[i].held) {
            drop = h;
            h = NULL;
        }
    if (c->wr_n == c->wr_cap) {
        c->wr_cap = c->wr_cap ? c->wr_cap * 2 : 4;
        c->wr_q = sr_xrealloc(c->wr_q, c->wr_cap * sizeof *c->wr_q);
    }
    c->wr_q[c->wr_n++] = (ci_wr_item_t){round, h};
    pthread_cond_signal(&c->wr_cv);
    pthread_mutex_unlock(&c->wr_mu);
    coord_results_destroy(&drop);
    return SR_OK;
}

bool ci_writer_idle(coord_t *c)
{
    pthread_mutex_lock(&c->wr_mu);
    bool idle = c->wr_n == 0 && !c->wr_busy;
    pthread_mutex_unlock(&c->wr_mu);
    return idle;
}

/* ---- the file queue ------------------------------------------------------------------------ */

/* A results file written on the file queue's thread: tried S_FILE_ATTEMPTS times with a doubling
 * pause (a full disk or a folder in the way may clear), then given up with a message and a
 * counter. The loop only formats the bytes. */
#define S_FILE_ATTEMPTS 5
#define S_FILE_PAUSE_MS 100

typedef struct {
    coord_t *c;
    char *path;
    sr_buf_t text;
    bool append;
    int retries; /* attempts after the first, set on the file thread */
} s_file_req_t;

static int s_file_work(store_t *st, void *arg, char *err)
{
    (void)st;
    s_file_req_t *q = arg;
    int rc = SR_EIO;
    long pause_ms = S_FILE_PAUSE_MS;
    for (int a = 0; a < S_FILE_ATTEMPTS; a++) {
        if (a > 0) {
            struct timespec ts = {pause_ms / 1000, (pause_ms % 1000) * 1000000L};
            nanosleep(&ts, NULL);
            pause_ms *= 2;
            q->retries++;
        }
        rc = q->append ? afile_append(q->path, q->text.data, q->text.len, err, STOREQ_ERR_MAX)
                       : afile_replace(q->path, q->text.data, q->text.len, err, STOREQ_ERR_MAX);
        if (rc == SR_OK)
            break;
    }
    return rc;
}

static void s_file_done(int rc, const char *err, void *arg)
{
    s_file_req_t *q = arg;
    coord_t *c = q->c;
    for (int i = 0; i < q->retries; i++)
        metrics_counter_inc(c->m_file_retries);
    if (rc != SR_OK) {
        metrics_counter_inc(c->m_file_failures);
        log_error("%s not written after %d attempts: %s", q->path, S_FILE_ATTEMPTS,
                  err && *err ? err : sr_strerror(rc));
    } else if (q->retries) {
        log_warn("%s written after %d failed attempts", q->path, q->retries);
    }
    sr_buf_free(&q->text);
    free(q->path);
    free(q);
}

int coord_file_write(coord_t *c, const char *path, sr_buf_t *text, bool append)
{
    if (!c || !path || !*path || !text)
        return SR_EINVAL;
    s_file_req_t *q = sr_xcalloc(1, sizeof *q);
    q->c = c;
    q->path = sr_xstrdup(path);
    q->text = *text;
    q->append = append;
    *text = (sr_buf_t)SR_BUF_INIT;
    if (c->fq && !c->sq_closing && storeq_submit(c->fq, s_file_work, s_file_done, q) == SR_OK)
        return SR_OK;
    /* after the loop (the file queue flushed and gone): written here, blocking is fine */
    char err[STOREQ_ERR_MAX] = "";
    int rc = s_file_work(NULL, q, err);
    s_file_done(rc, err, q);
    return rc;
}
