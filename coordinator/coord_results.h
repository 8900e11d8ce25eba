/*
 * coord_results.h — the results of one round: decoded, de-duplicated by job id, summed up into a
 * round summary, and written out as JSON Lines.
 *
 * Redis is the truth: the coordinator appends every final RESULT (the msgpack bytes as received)
 * to `results:<round>` before acknowledging it. A round this coordinator process opened has all
 * its results pass through its result sink, which keeps them (coord_results_add_owned: decoded
 * once on arrival, the bytes moved, in the order Redis appended them) for the round writer; a
 * round it did not see whole (begun by a previous process, or whose storage order is unknown
 * after a store error) is read back from Redis (coord_results_load). A result can be stored twice
 * only when an acknowledgement was lost; the first stored copy of a job id counts, later ones are
 * ignored.
 */
#ifndef SR_COORD_RESULTS_H
#define SR_COORD_RESULTS_H

#include "common/proto.h"
#include "common/sr_buf.h"
#include "common/store.h"
#include "common/store_group.h"
#include "coordinator/coord_store.h"
#include "coordinator/fail_tally.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The summary of one round, handed to the per-round callback and printed by the launcher. */
typedef struct {
    int64_t round;
    int groups;           /* groups in the round */
    int groups_done;      /* every trajectory finished */
    int groups_cancelled; /* cancelled by the gate */
    int groups_failed;    /* some trajectory failed after every attempt */
    int64_t results;      /* distinct final results stored */
    int64_t trajectories_failed; /* of those, status "failed" (after every attempt) */
    fail_tally_t errors;  /* their error texts, counted */
    int64_t stale_results; /* RESULTs refused (old epoch, unknown job) during the round */
    int64_t steps;        /* environment steps, summed over the results */
    int64_t llm_calls;
    int64_t tokens;       /* prompt + completion tokens */
    int64_t won;          /* results that solved their task */
    double success_rate;  /* won / results with status done or truncated (0 when none) */
    int64_t wall_ms;      /* from the round's start (or resume) to its end */
    int64_t steps_other_version; /* steps whose served_version is not the JOB's policy_version */
    int64_t other_version;       /* the served version of the last such step */
    /* every result of the round went through this process's result sink (and so through the
     * driver's stored()) in the order Redis holds them: a driver may count them there instead of
     * reading the round back. False for a round begun before a restart, or after a store error
     * that leaves the order in Redis unknown. */
    bool results_in_order;
} coord_round_summary_t;

/* One result, as far as the coordinator needs to know it. */
typedef struct {
    char job_id[STORE_GID_MAX + 16];
    char group[STORE_GID_MAX];
    int64_t epoch;
    int traj;
    char status[16];
    double reward;
    bool won;
    int64_t n_steps, llm_calls, tokens;
    char error[FAIL_TALLY_TEXT_MAX]; /* RESULT.error (cut), "" when absent */
} coord_result_info_t;

typedef struct coord_results coord_results_t;

/* coord_results_new returns an empty collection, or NULL when out of memory. */
coord_results_t *coord_results_new(void);

/* coord_results_destroy frees it. Accepts NULL and *self_p == NULL; sets it to NULL. */
void coord_results_destroy(coord_results_t **self_p);

/* coord_results_add decodes one stored RESULT (msgpack bytes, copied). Returns SR_OK, SR_ECONFLICT
 * when a result of that job id is there already (the copy is ignored), or the SR_EPROTO /
 * SR_ETOOBIG of a message that is not a readable RESULT (ignored too). */
int coord_results_add(coord_results_t *r, const void *data, size_t len);

/* coord_results_add_owned adds one RESULT decoded already (res, decoded from the msgpack bytes
 * *data/len): no second decode, and the bytes are taken, not copied: *data is set to NULL on
 * every return and the collection frees them (a duplicate's at once). This is how the
 * coordinator keeps the RESULTs its result sink stored, for the round writer. Returns SR_OK,
 * SR_ECONFLICT when a result of that job id is there already (the copy is dropped), or
 * SR_EINVAL when *data is NULL. */
int coord_results_add_owned(coord_results_t *r, const proto_result_t *res, void **data,
                            size_t len);

/* coord_results_load adds every result stored for `round` in Redis. Returns SR_OK or the store's
 * error; unreadable or duplicate entries are skipped and counted in *skipped (may be NULL). */
int coord_results_load(coord_results_t *r, store_t *st, int64_t round, size_t *skipped);

/* coord_results_count returns the number of distinct results; coord_results_info the one at
 * index (NULL when out of range; valid until the next add). */
size_t coord_results_count(const coord_results_t *r);
const coord_result_info_t *coord_results_info(const coord_results_t *r, size_t index);

/* coord_results_sum fills the result-derived fields of *sum (results, steps, llm_calls, tokens,
 * won, success_rate, trajectories_failed, errors) and leaves the others alone. */
void coord_results_sum(const coord_results_t *r, coord_round_summary_t *sum);

/* coord_results_jsonl_text appends to out one JSON object per result and line (every field of
 * the RESULT but "t" and "v"), in storage order. Returns SR_OK or SR_ENOMEM with a reason in err
 * (when err is not NULL). */
int coord_results_jsonl_text(const coord_results_t *r, sr_buf_t *out, char *err, size_t errlen);

/* coord_results_write_jsonl writes coord_results_jsonl_text's lines to path as afile_replace
 * does (a temporary file synced and renamed into place, the folder synced; missing parent folders
 * are created), formatted and written about 256 KiB at a time (afile_tmp_write). It blocks on
 * the disk: the round writer's thread calls it. Returns SR_OK, or SR_EIO / SR_ENOMEM with a one-line reason in err (when
 * err is not NULL); on failure the temporary file is removed and path is left as it was. */
int coord_results_write_jsonl(const coord_results_t *r, const char *path, char *err,
                              size_t errlen);

/* coord_results_json_line appends to b the JSON line (no newline) of one stored RESULT, its
 * msgpack bytes data/len: every field but the envelope's "t" and "v", as cJSON would print them
 * (strings cut at a NUL, non-string map keys left out, nil, binary and nesting deeper than
 * PROTO_MAX_DEPTH as null), then "rules" (rules_json parsed and printed again, when it is valid
 * JSON; may be NULL) and "audit_weight" (when it is not 1). Returns SR_OK, SR_EPROTO when the
 * bytes are not a msgpack map, or SR_ENOMEM. */
int coord_results_json_line(const void *data, size_t len, const char *rules_json,
                            double audit_weight, sr_buf_t *b);

/* coord_results_gate_fields reads what the gate recorded in group gid's hash beyond its
 * decision: *rules_json (a new string the caller frees, or NULL when the gate recorded no
 * per-rule verdicts) and *audit_weight (1.0 unless the gate's audit let the group run on).
 * Returns SR_OK or the store's error (outputs NULL / 1.0 then). */
int coord_results_gate_fields(store_t *st, const char *gid, char **rules_json,
                              double *audit_weight);

/* coord_results_load_gate reads the gate's per-rule verdicts of every group the collection has
 * results of (coord_results_gate_fields), so that coord_results_write_jsonl adds them to each
 * of the group's lines as "rules" (and "audit_weight" when not 1). Returns SR_OK or the store's
 * error. */
int coord_results_load_gate(coord_results_t *r, store_t *st);

/* coord_results_await_gate is coord_results_load_gate for a round that has just ended: the gate
 * records a group's verdicts once it has seen the group's last ACTION, which may reach it after
 * the coordinator stored the group's last RESULT. When a gate of the run records (its mode is
 * shadow or enforce: coord_store_gate_records) and some lines have no record yet, the records are
 * read again every 20 ms for up to wait_ms of real time. Blocks: called on the round writer's
 * thread. *missing gets the number of lines still without a record (0 when no gate records).
 * Returns SR_OK or the store's error. */
int coord_results_await_gate(coord_results_t *r, store_t *st, int64_t wait_ms, size_t *missing);

/* coord_mkdirs creates the folder path and its missing parents (like mkdir -p). Returns SR_OK or
 * an SR_E* code from the failed mkdir. */
int coord_mkdirs(const char *path);

#endif
