/*
 * coord_writer.c — the coordinator's file writers. The round writer: a worker-thread queue
 * (common/wq) whose thread, with its own Redis connection, writes each ended round's
 * <out>/rounds/round-N.jsonl and only then records rounds_done, while the loop runs the next
 * round; each round's completion comes back on the loop. A round's results come from its open
 * round, which kept what the sink stored (ci_hold_result), or are read back from Redis where this
 * process does not hold them. The file queue (a storeq without Redis): coord_file_write's files,
 * written off the loop with retries.
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
}

/* ---- the round writer ---------------------------------------------------------------------- */

/* How long the writer waits, in real time, for the gate's rule records of a round's last groups
 * (coord_results_await_gate): a record lands within milliseconds of the group's last ACTION; a
 * gate that died or restarted may never write one. */
#define COORD_GATE_RECORD_WAIT_MS 2000

/* s_write_round writes round `round`'s JSONL file when the run has an output folder, then records
 * rounds_done, on the writer's own Redis connection (*st, made on first use). Its results are
 * `held` (the loop's, kept by the sink; the writer owns them) or, when NULL, read back from Redis
 * here: a round this process did not see whole (begun by a previous coordinator before a resume,
 * or whose storage order became unknown). The gate's per-group fields are read from Redis either
 * way, waiting a little for those of the round's last groups (COORD_GATE_RECORD_WAIT_MS).
 * Returns SR_OK, or the Redis or file error that makes the writer try again (held stays intact
 * for that): a round whose file could not be written is never recorded as done. */
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
        size_t missing = 0;
        if (coord_results_await_gate(res, *st, COORD_GATE_RECORD_WAIT_MS, &missing) != SR_OK)
            log_warn("round %lld: cannot read the gate's rule records: %s", (long long)round,
                     store_errstr(*st));
        else if (missing > 0)
            log_warn("round %lld: %zu of %zu lines written without the gate's rule record (none "
                     "within %d ms of the round's end)",
                     (long long)round, missing, coord_results_count(res),
                     COORD_GATE_RECORD_WAIT_MS);
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

/* One round for the writer's queue: its number and, when the loop held them, its results
 * (owned; NULL: read back from Redis). */
typedef struct {
    coord_t *c;
    int64_t round;
    coord_results_t *held;
} s_wr_job_t;

/* s_wr_drop_held frees a job's held results and counts them out of c->wr_held. */
static void s_wr_drop_held(s_wr_job_t *j)
{
    if (!j->held)
        return;
    coord_results_destroy(&j->held);
    __atomic_sub_fetch(&j->c->wr_held, 1, __ATOMIC_RELAXED);
}

/* s_wr_work writes one round on the writer's thread, trying again every 250 ms until it is
 * written, or until the queue stops (coord_destroy): the round is then left for a resume, and so
 * is every later one (rounds_done is recorded in order). */
static int s_wr_work(void *arg, char *err)
{
    s_wr_job_t *j = arg;
    coord_t *c = j->c;
    if (c->wr_gave_up) {
        snprintf(err, WQ_ERR_MAX, "an earlier round was not written");
        return SR_ECLOSED;
    }
    for (;;) {
        int rc = s_write_round(c, &c->wr_st, j->round, j->held);
        if (rc == SR_OK) {
            s_wr_drop_held(j); /* written: released at once */
            return SR_OK;
        }
        store_destroy(&c->wr_st); /* a fresh connection for the next attempt */
        if (wq_stopping(c->wr)) {
            log_error("round %lld: its results file was not written (stopping); resume "
                      "the run to write it",
                      (long long)j->round);
            c->wr_gave_up = true;
            snprintf(err, WQ_ERR_MAX, "not written (stopping)");
            return rc;
        }
        wq_pause(c->wr, 250); /* then the same round again */
    }
}

/* s_wr_done runs on the loop (or in coord_destroy's drain) once a round was written or left. */
static void s_wr_done(int rc, const char *err, void *arg)
{
    (void)rc;
    (void)err;
    s_wr_job_t *j = arg;
    coord_t *c = j->c;
    s_wr_drop_held(j);
    free(j);
    ci_round_written(c);
}

/* ci_writer_push hands an ended round and its held results to the writer (started on first use).
 * At most one round's held results wait in the writer: when an earlier round's are still there
 * (the writer is behind), this round's are released and read back from Redis when its turn comes,
 * so the writer never keeps more results in memory than one round's. */
int ci_writer_push(coord_t *c, int64_t round, coord_results_t **held)
{
    coord_results_t *h = *held;
    *held = NULL;
    if (!c->wr) {
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
        char err[256];
        if (!(c->wr = wq_new(c->r, "coord-writer", err, sizeof err))) {
            log_error("round writer: %s", err);
            coord_results_destroy(&h);
            return SR_ENOMEM;
        }
    }
    if (h && __atomic_load_n(&c->wr_held, __ATOMIC_RELAXED) > 0)
        coord_results_destroy(&h);
    s_wr_job_t *j = sr_xcalloc(1, sizeof *j);
    j->c = c;
    j->round = round;
    j->held = h;
    if (h)
        __atomic_add_fetch(&c->wr_held, 1, __ATOMIC_RELAXED);
    int rc = wq_push(c->wr, s_wr_work, s_wr_done, j);
    if (rc != SR_OK) {
        s_wr_drop_held(j);
        free(j);
    }
    return rc;
}

bool ci_writer_idle(coord_t *c)
{
    return wq_pending(c->wr) == 0;
}

/* ci_writer_drain writes the rounds that ended (the loop stopped: blocking is fine here; a round
 * that fails is not retried once stopping) and stops the writer. */
void ci_writer_drain(coord_t *c)
{
    if (!c->wr)
        return;
    c->draining = true;
    wq_close(c->wr);
    wq_flush(c->wr, -1);
    wq_destroy(&c->wr);
    store_destroy(&c->wr_st);
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
            clock_sleep_ms(pause_ms);
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
