/*
 * coord_store.h — the coordinator's own Redis schema, in one place: every key only the
 * coordinator reads or writes, every command it sends on them. The coordinator calls these on its
 * store thread (common/storeq.h), never on its loop; its other files hold no key name and no
 * command text. Keys shared with other roles go through common/store_run.h, store_group.h,
 * store_reg.h, store_prompt.h and store_policy.h; the dashboard's are in dashboard_store.h, the
 * GRESO state's in greso_store.h.
 *
 * Keys, under selroll:<run>: (docs/redis.md):
 *  - results:<iteration>  list of the stored RESULTs (msgpack bytes), one per job;
 *  - final:<iteration>    hash job_id -> the epoch its stored result was leased under;
 *  - epoch                the fencing-token counter (INCRBY in blocks);
 *  - lease:<iteration>    hash job_id -> "<epoch> <actor id>" of every job leased in the round;
 *  - failed:<iteration>   set of the gids that could not complete;
 *  - iter:<n>, eval:<n>   JSON records of training iteration n and its held-out evaluation
 *                         (read by the dashboard and `selroll status` too);
 *  - group:<gid>          read only: the gate's fields rules and audit_weight (key named in
 *                         common/store_keys.h);
 *  - the gate's stats hash read only: its field mode (key named in common/store_keys.h).
 *
 * Every function takes a connected store and returns SR_OK or the store's error (its reason in
 * store_errstr); each says whether it is idempotent. The result functions keep the names they had
 * in common/store.h (store_result_put, store_results_read ...), so their callers did not change.
 */
#ifndef SR_COORD_STORE_H
#define SR_COORD_STORE_H

#include "common/store.h"

#include <stddef.h>
#include <stdint.h>

/* ---- durable results: list results:<iteration>, hash final:<iteration> ------------------- */

/* store_result_append appends one completed result (msgpack bytes, len > 0) to the iteration's
 * list. Contract: the coordinator calls it, and waits for SR_OK, BEFORE it acknowledges the
 * RESULT to the actor; an unacknowledged result is sent again, so a result is never lost, and a
 * duplicate can occur only when an append succeeded but the acknowledgement was lost: readers
 * drop duplicates by job id and epoch. Not retried after a reconnect (it is not idempotent). */
int store_result_append(store_t *s, int64_t iteration, const void *msgpack, size_t len);

/* store_result_put stores the result of job `job_id` (msgpack bytes, len > 0) leased under
 * `epoch` (> 0) as the job's final one, exactly once: one MULTI/EXEC transaction appends the
 * bytes to results:<iteration> and records the job's final epoch in hash final:<iteration>,
 * unless the job is final already, and then takes its copy off again: nothing changes. It is idempotent, hence retried after a reconnect,
 * and a caller that saw a timeout learns the outcome by calling it again. *final_epoch (may be
 * NULL) receives the epoch the job is final under. Returns SR_OK when that is `epoch`,
 * SR_ECONFLICT when the job is final under another epoch (that copy stays the only one), or an
 * error. */
int store_result_put(store_t *s, int64_t iteration, const char *job_id, int64_t epoch,
                     const void *msgpack, size_t len, int64_t *final_epoch);

/* store_result_put_pipe queues what store_result_put runs, without waiting (store_pipe_exec
 * sends it); its reply goes to store_result_put_reply, which returns what store_result_put would
 * have (SR_OK, SR_ECONFLICT with *final_epoch, SR_EREDIS for an error reply, SR_EPROTO). */
int store_result_put_pipe(store_t *s, int64_t iteration, const char *job_id, int64_t epoch,
                          const void *msgpack, size_t len);
int store_result_put_reply(store_t *s, const store_reply_t *r, const char *job_id, int64_t epoch,
                           int64_t *final_epoch);

/* store_result_fn receives one stored result (bytes valid during the call); non-zero stops the
 * walk and becomes the result of store_results_read. */
typedef int (*store_result_fn)(const void *data, size_t len, void *arg);

/* store_results_read calls fn for each result of the iteration in append order. Idempotent. */
int store_results_read(store_t *s, int64_t iteration, store_result_fn fn, void *arg);

/* store_results_count stores the number of results of the iteration in *out. Idempotent. */
int store_results_count(store_t *s, int64_t iteration, size_t *out);

/* ---- epochs, leases, failed groups ------------------------------------------------------ */

/* coord_store_epochs adds `block` to the epoch counter and stores the new value in *top. Not
 * idempotent, and not retried: a lost block only leaves a gap in the epochs. */
int coord_store_epochs(store_t *s, int64_t block, int64_t *top);

/* One lease as lease:<round> keeps it. */
typedef struct {
    int64_t round;
    const char *job_id;
    int64_t epoch;
    const uint8_t *actor; /* the actor's id bytes */
    size_t actor_len;
} coord_store_lease_t;

/* coord_store_leases_put writes v[0..n) into their rounds' lease hashes in one pipelined round
 * trip. Idempotent (a lease written twice is the same field). */
int coord_store_leases_put(store_t *s, const coord_store_lease_t *v, size_t n);

/* coord_store_leases_queue queues the n HSETs of coord_store_leases_put on s's pipeline without
 * sending them (one reply each reaches store_pipe_exec's fn, in order). On an error the caller
 * runs store_pipe_exec to keep the connection in step. */
int coord_store_leases_queue(store_t *s, const coord_store_lease_t *v, size_t n);

/* coord_store_lease_fn receives one persisted lease (valid during the call); non-zero stops the
 * walk and becomes the result. */
typedef int (*coord_store_lease_fn)(const char *job_id, size_t job_len, int64_t epoch,
                                    const uint8_t *actor, size_t actor_len, void *arg);

/* coord_store_leases_read calls fn for every well-formed lease of `round` (a value without an
 * actor id is skipped). Idempotent. */
int coord_store_leases_read(store_t *s, int64_t round, coord_store_lease_fn fn, void *arg);

/* coord_store_failed_add adds gid to failed:<round>. Idempotent. */
int coord_store_failed_add(store_t *s, int64_t round, const char *gid);

/* ---- records of training iterations: strings iter:<n>, eval:<n> -------------------------- */

/* The records of a training iteration. */
typedef enum {
    COORD_RECORD_ITER = 0, /* iter:<n>, the iteration's statistics */
    COORD_RECORD_EVAL,     /* eval:<n>, the held-out evaluation after it */
} coord_record_t;

/* coord_store_record_put stores the JSON text of record `kind` of iteration `it`. Idempotent. */
int coord_store_record_put(store_t *s, coord_record_t kind, int64_t it, const char *json);

/* coord_store_record_get reads record `kind` of iteration `it` into a new string (*json, caller
 * frees); *json is NULL when there is none. Idempotent. */
int coord_store_record_get(store_t *s, coord_record_t kind, int64_t it, char **json);

/* ---- the gate's fields of a group hash --------------------------------------------------- */

/* coord_store_gate_fields reads the gate's fields `rules` (a new string in *rules_json, NULL when
 * absent) and `audit_weight` (*audit_weight, 1 when absent or not a positive number) of group
 * gid. Idempotent. */
int coord_store_gate_fields(store_t *s, const char *gid, char **rules_json, double *audit_weight);

/* coord_store_gate_fields_many reads the same of the n groups gids[0..n) in one round trip (a
 * pipeline of HMGETs, sent once more after a broken connection): rules_json[i] (a new string or
 * NULL) and audit_weight[i] as coord_store_gate_fields gives them; a group whose read failed
 * keeps NULL and 1. Returns SR_OK or the error that broke the pipeline. */
int coord_store_gate_fields_many(store_t *s, size_t n, const char *const *gids, char **rules_json,
                                 double *audit_weight);

/* coord_store_gate_records tells whether a gate of the run records a per-rule verdict of every
 * group it sees: *records is true when the mode in the gate's stats hash (written when the gate
 * starts) is shadow or enforce, false when it is off or no gate wrote one. Returns SR_OK or the
 * store's error (*records false then). */
int coord_store_gate_records(store_t *s, bool *records);

#endif
