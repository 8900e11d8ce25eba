/*
 * store.h — selroll's state in Redis: one connection object (store_t) and the few operations the
 * coordinator, gate, actors, env workers and trainer share through it.
 *
 * Every key lives under `selroll:<run>:` (docs/redis.md lists them all). A store_t is one blocking
 * hiredis connection with a connect timeout and a command timeout; it is not thread-safe, so each
 * thread opens its own. When a command fails because the connection broke (server restarted,
 * connection killed, timeout), the store reconnects once; idempotent operations are then retried
 * once, the others return the error and the next call runs on the new connection. Each function's
 * comment says which kind it is. Group status changes go through one Lua script, so they are
 * atomic across all connections.
 *
 * All functions return SR_OK or a negative SR_E* code; on failure store_errstr() holds a one-line
 * reason ("redis 127.0.0.1:6399 unreachable: Connection refused", "redis: NOAUTH Authentication
 * required."). SR_EREDIS means Redis refused the command or cannot be reached, SR_ETIMEDOUT that
 * it did not answer within the command timeout.
 */
#ifndef SR_STORE_H
#define SR_STORE_H

#include <hiredis.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct store store_t;

/* ---- URLs ------------------------------------------------------------------------------- */

#define STORE_URL_FIELD_MAX 256

/* A parsed Redis address: redis://[[user]:password@]host[:port][/db] or unix:///path[?db=N]. */
typedef struct {
    bool is_unix;
    char host[STORE_URL_FIELD_MAX];     /* TCP host name or address ("::1" without brackets) */
    int port;                           /* 6379 when the URL names none */
    char path[STORE_URL_FIELD_MAX];     /* unix socket path */
    char user[STORE_URL_FIELD_MAX];     /* ACL user name, "" for the default user */
    char password[STORE_URL_FIELD_MAX]; /* percent-decoded; "" means no AUTH */
    int db;                             /* SELECT index, 0 by default */
} store_url_t;

/* store_parse_url parses `url` into *out (fully overwritten). Returns SR_OK, or SR_EINVAL with a
 * one-line reason in err (when err is not NULL) for a NULL, empty or malformed URL, an unknown
 * scheme, a port outside 1..65535, a bad db number or a field longer than STORE_URL_FIELD_MAX-1. */
int store_parse_url(const char *url, store_url_t *out, char *err, size_t errlen);

/* ---- connection ------------------------------------------------------------------------- */

#define STORE_RUN_MAX 64

/* An error text that starts with STORE_ERR_AUTH is Redis's refusal of the credentials (NOAUTH,
 * WRONGPASS, NOPERM...): a configuration error, unlike an unreachable server. */
#define STORE_ERR_AUTH "redis refused the connection:"

/* store_connect opens a connection to `url` for run `run` (1..STORE_RUN_MAX-1 characters out of
 * [A-Za-z0-9_.-]), with `timeout_ms` (> 0; <= 0 means 2000) as both the connect and the command
 * timeout. It sends AUTH when the URL has a password, SELECT when it names a db, PING, and loads
 * the group script. On success *out owns the new store (free with store_destroy) and SR_OK is
 * returned. On failure *out is NULL, err (if not NULL) holds a one-line reason, and the result
 * is SR_EINVAL (bad URL or run name) or SR_EREDIS (unreachable, AUTH or SELECT refused, no
 * answer in time). */
int store_connect(store_t **out, const char *url, const char *run, int timeout_ms, char *err,
                  size_t errlen);

/* store_run_name_ok says whether run is a valid run name: 1..STORE_RUN_MAX-1 characters of
 * A-Z a-z 0-9 _ . - (NULL is not). */
bool store_run_name_ok(const char *run);

/* store_new is store_connect without the reason: it returns the new store or NULL. */
store_t *store_new(const char *url, const char *run, int timeout_ms);

/* store_destroy closes the connection, frees the store and sets *self_p to NULL. Accepts NULL
 * and a pointer to NULL. */
void store_destroy(store_t **self_p);

/* store_errstr returns the reason of the last failure on this store ("" if none yet). The text
 * belongs to the store and stays valid until its next call. */
const char *store_errstr(const store_t *s);

/* store_run returns the run name the store was opened for. */
const char *store_run(const store_t *s);

/* store_key writes "selroll:<run>:" followed by the printf-formatted rest into buf. Returns
 * SR_OK, or SR_ETOOBIG when the key does not fit in len bytes (buf then holds a truncated,
 * terminated string). */
int store_key(const store_t *s, char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* store_ping sends PING (idempotent: retried once after a reconnect). */
int store_ping(store_t *s);

/* Flags for store_command. */
#define STORE_IDEMPOTENT 1 /* the command may be sent a second time after a reconnect */

/* store_command runs one command in hiredis printf format (%s, %b with pointer and length,
 * %lld ...). Keys are not prefixed: build them with store_key. With STORE_IDEMPOTENT in flags the
 * command is retried once after a broken connection. On SR_OK, *out (if out is not NULL) owns
 * the reply (free it with freeReplyObject); an error reply is turned into SR_EREDIS with its text
 * in store_errstr, and *out is then NULL. */
int store_command(store_t *s, int flags, redisReply **out, const char *fmt, ...);

/* ---- pipelining ------------------------------------------------------------------------- */

/* store_pipe_append queues one command (hiredis printf format) without waiting for its reply.
 * Returns SR_OK, SR_ENOMEM, or SR_EREDIS if the store has no connection and cannot get one. */
int store_pipe_append(store_t *s, const char *fmt, ...);

/* store_pipe_appendv queues one command given as argc binary-safe arguments. */
int store_pipe_appendv(store_t *s, int argc, const char **argv, const size_t *argvlen);

/* store_reply_fn receives the index-th reply of a pipeline; the reply belongs to the store.
 * A non-zero return is remembered (the first one is store_pipe_exec's result), but the
 * remaining replies are still read so that the connection stays in step. */
typedef int (*store_reply_fn)(size_t index, const redisReply *reply, void *arg);

/* store_pipe_exec sends every queued command and reads one reply for each, in order, passing
 * each to fn (may be NULL). Returns SR_OK; the first non-zero result of fn; SR_EREDIS when fn is
 * NULL and some reply was an error (its text in store_errstr); or SR_EREDIS/SR_ETIMEDOUT when the
 * connection broke. A pipeline is never retried: after a broken connection the store reconnects
 * and the queue is empty, but which commands ran is unknown. */
int store_pipe_exec(store_t *s, store_reply_fn fn, void *arg);

/* store_pipe_pending returns the number of queued commands whose replies were not read yet. */
size_t store_pipe_pending(const store_t *s);

/* ---- run record: hash selroll:<run>:run ------------------------------------------------- */

/* store_run_set sets one field (iteration, policy_version, status, config, ...) of the run
 * record. Idempotent. */
int store_run_set(store_t *s, const char *field, const char *value);
int store_run_set_int(store_t *s, const char *field, int64_t value);

/* store_run_get reads one field into a new string (*out, caller frees). SR_ENOTFOUND when the
 * field is not set (*out is then NULL). Idempotent. */
int store_run_get(store_t *s, const char *field, char **out);

/* store_run_get_int reads one integer field. SR_ENOTFOUND when unset, SR_EPROTO when it is not
 * an integer. Idempotent. */
int store_run_get_int(store_t *s, const char *field, int64_t *out);

/* ---- groups: hash selroll:<run>:group:<gid> --------------------------------------------- */

#define STORE_G_MAX 64
#define STORE_GID_MAX 128
#define STORE_TASK_MAX 256
#define STORE_DECISION_MAX 256

typedef enum {
    STORE_GROUP_RUNNING = 0,
    STORE_GROUP_CANCELLED,
    STORE_GROUP_DONE,
    STORE_GROUP_FILTERED,
} store_group_status_t;

/* store_group_status_name returns "running", "cancelled", "done", "filtered" (or "unknown"). */
const char *store_group_status_name(store_group_status_t st);

typedef struct {
    char gid[STORE_GID_MAX];
    char task[STORE_TASK_MAX];
    int64_t iteration;
    int G;
    int finished; /* trajectories that reported an end, cancelled group included */
    store_group_status_t status;
    int64_t created_ms; /* Redis server time at creation */
    int64_t ended_ms;   /* server time of the transition to done/cancelled, else 0 */
    int gate_step;      /* step of the gate's decision (cancel or recorded), else -1 */
    double divergence;  /* the gate's d at that step, else -1 */
    char decision[STORE_DECISION_MAX];
    uint64_t reward_mask; /* bit i set when rewards[i] was recorded */
    double rewards[STORE_G_MAX];
} store_group_t;

/* store_group_create creates group gid (status running, finished 0, created_ms now) for `task`
 * at `iteration` with G trajectories (1..STORE_G_MAX) and adds gid to the iteration's group set.
 * SR_ECONFLICT if the group exists already; SR_EINVAL for bad arguments. Not retried after a
 * reconnect (a retry could report its own first attempt as a conflict). */
int store_group_create(store_t *s, const char *gid, const char *task, int64_t iteration, int G);

/* store_group_finish_traj records reward[traj] and counts trajectory traj as finished; the group
 * becomes done atomically when the last of its G trajectories finishes. A trajectory reported
 * twice is counted once (the first reward stays), which makes the call idempotent: it is
 * retried after a reconnect. out_finished / out_status (either may be NULL) receive the group's
 * state afterwards. Returns SR_OK, SR_ENOTFOUND (unknown group), SR_EINVAL (traj out of range)
 * or SR_ECONFLICT when the group was cancelled: the reward is still recorded, *out_status is
 * then STORE_GROUP_CANCELLED. */
int store_group_finish_traj(store_t *s, const char *gid, int traj, double reward, int *out_finished,
                            store_group_status_t *out_status);

/* store_group_cancel moves a running group to cancelled and records the gate's step, divergence
 * d and decision text (may be NULL). SR_ECONFLICT if the group is not running (done, filtered or
 * already cancelled), SR_ENOTFOUND if unknown. Retried after a reconnect; a retry that finds the
 * group already cancelled counts as success. */
int store_group_cancel(store_t *s, const char *gid, int step, double d, const char *decision);

/* store_group_decide records the gate's step, d and decision text without changing the status
 * (shadow mode, audited groups); a later decision overwrites an earlier one. SR_ENOTFOUND if the
 * group is unknown. Idempotent. */
int store_group_decide(store_t *s, const char *gid, int step, double d, const char *decision);

/* store_group_filter moves a done group to filtered (zero-variance post-filter). SR_ECONFLICT
 * unless the group is done, SR_ENOTFOUND if unknown. Retried like store_group_cancel. */
int store_group_filter(store_t *s, const char *gid);

/* store_group_get reads the whole group into *out (fully overwritten). SR_ENOTFOUND if unknown,
 * SR_EPROTO if the hash holds values this code cannot read. Idempotent. */
int store_group_get(store_t *s, const char *gid, store_group_t *out);

/* store_group_fn receives one group id; non-zero stops the walk and becomes the result. */
typedef int (*store_group_fn)(const char *gid, void *arg);

/* store_groups_of calls fn for every group created at `iteration` (order unspecified).
 * Idempotent. */
int store_groups_of(store_t *s, int64_t iteration, store_group_fn fn, void *arg);

/* ---- registry: hash selroll:<run>:<kind>:<id> with a TTL ------------------------------- */

typedef struct {
    const char *name;
    const char *value;
} store_field_t;

/* store_register writes fields (n may be 0) into the registry entry of `id` of `kind` ("actor"
 * or "envw") and sets its time to live to ttl_ms (> 0). Calling it again refreshes the entry.
 * Idempotent. */
int store_register(store_t *s, const char *kind, const char *id, const store_field_t *fields,
                   size_t n, int64_t ttl_ms);

/* store_heartbeat renews the TTL of an existing entry. SR_ENOTFOUND when the entry expired (the
 * caller registers again). Idempotent. */
int store_heartbeat(store_t *s, const char *kind, const char *id, int64_t ttl_ms);

/* store_unregister deletes an entry (no error if it is gone already). Idempotent. */
int store_unregister(store_t *s, const char *kind, const char *id);

/* store_entry_fn receives one live entry: its id and its n fields (valid during the call). A
 * non-zero return stops the walk and becomes store_list's result. */
typedef int (*store_entry_fn)(const char *id, const store_field_t *fields, size_t n, void *arg);

/* store_list calls fn for every live entry of `kind` (order unspecified). Idempotent. */
int store_list(store_t *s, const char *kind, store_entry_fn fn, void *arg);

/* ---- durable results: list selroll:<run>:results:<iteration> ---------------------------- */

/* store_result_append appends one completed result (msgpack bytes, len > 0) to the iteration's
 * list. Contract: the coordinator calls it, and waits for SR_OK, BEFORE it acknowledges the
 * RESULT to the actor; an unacknowledged result is sent again, so a result is never lost, and a
 * duplicate can occur only when an append succeeded but the acknowledgement was lost: readers
 * drop duplicates by job id and epoch. Not retried after a reconnect (it is not idempotent). */
int store_result_append(store_t *s, int64_t iteration, const void *msgpack, size_t len);

/* store_result_put stores the result of job `job_id` (msgpack bytes, len > 0) leased under
 * `epoch` (> 0) as the job's final one, exactly once: one script records the job's final epoch
 * in hash final:<iteration> and appends the bytes to results:<iteration>, unless the job is
 * final already, and then changes nothing. It is idempotent, hence retried after a reconnect,
 * and a caller that saw a timeout learns the outcome by calling it again. *final_epoch (may be
 * NULL) receives the epoch the job is final under. Returns SR_OK when that is `epoch`,
 * SR_ECONFLICT when the job is final under another epoch (that copy stays the only one), or an
 * error. */
int store_result_put(store_t *s, int64_t iteration, const char *job_id, int64_t epoch,
                     const void *msgpack, size_t len, int64_t *final_epoch);

/* store_result_fn receives one stored result (bytes valid during the call); non-zero stops the
 * walk and becomes the result of store_results_read. */
typedef int (*store_result_fn)(const void *data, size_t len, void *arg);

/* store_results_read calls fn for each result of the iteration in append order. Idempotent. */
int store_results_read(store_t *s, int64_t iteration, store_result_fn fn, void *arg);

/* store_results_count stores the number of results of the iteration in *out. Idempotent. */
int store_results_count(store_t *s, int64_t iteration, size_t *out);

/* ---- prompt history (GRESO): sorted set selroll:<run>:prompt:<task>, hash greso --------- */

#define STORE_PROMPT_HISTORY_MAX 64 /* entries kept per prompt */

typedef struct {
    int64_t iteration;
    double mean_reward;
} store_prompt_entry_t;

/* store_prompt_push records the mean reward of a group of `task` at `iteration`, keeping the
 * latest STORE_PROMPT_HISTORY_MAX entries. An identical (iteration, mean) pair is stored once,
 * which makes the call idempotent. */
int store_prompt_push(store_t *s, const char *task, int64_t iteration, double mean_reward);

/* store_prompt_history fills out[0..*n) with the latest (at most max) entries of `task`, oldest
 * first; *n = 0 for a prompt without history. Idempotent. */
int store_prompt_history(store_t *s, const char *task, store_prompt_entry_t *out, size_t max,
                         size_t *n);

/* store_greso_get reads p_easy, p_hard and the last iteration's zero-variance share (zv may be
 * NULL). SR_ENOTFOUND when p_easy and p_hard were never set; they are then 0.5, the starting
 * value, and *zv 0. A state written before the share was kept reads as zv 0. Idempotent. */
int store_greso_get(store_t *s, double *p_easy, double *p_hard, double *zv);

/* store_greso_set writes p_easy, p_hard and the zero-variance share together. Idempotent. */
int store_greso_set(store_t *s, double p_easy, double p_hard, double zv);

/* ---- policy weights: string selroll:<run>:weights:<version> ----------------------------- */

/* store_weights_put stores the weight blob of `version` (overwriting). Idempotent. */
int store_weights_put(store_t *s, int64_t version, const void *blob, size_t len);

/* store_weights_get reads the blob of `version` into a new buffer (*blob, caller frees; *len is
 * its length). SR_ENOTFOUND when there is none (*blob NULL, *len 0). Idempotent. */
int store_weights_get(store_t *s, int64_t version, void **blob, size_t *len);

#endif
