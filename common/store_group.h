/*
 * store_group.h — groups: hash selroll:<run>:group:<gid> and set selroll:<run>:groups:<iteration>
 * (keys named in common/store_keys.h). The status, the finished count, the rewards and the gate's
 * step, d and decision change only through this module's one Lua script, so a transition is
 * atomic across all connections (docs/redis.md, "Group status changes"). The coordinator creates
 * and finishes groups, the gate cancels or records its decisions, the dashboard and
 * `selroll status` read them; the gate's own extra fields of the hash are written by
 * gate/gate_store.c.
 */
#ifndef SR_STORE_GROUP_H
#define SR_STORE_GROUP_H

#include "common/store.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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

/* Pipelined finishes (the coordinator stores a batch of RESULTs in two round trips):
 * store_group_pipe_prepare loads the group script (no pipelined reply may be pending);
 * store_group_finish_traj_pipe queues the finish store_group_finish_traj runs; its reply, read
 * with store_pipe_exec, goes to store_group_finish_traj_reply, which returns what
 * store_group_finish_traj would have (a Redis error reply is SR_EREDIS; a NOSCRIPT one, see
 * store_reply_noscript, means the finish is to be run again with store_group_finish_traj). */
int store_group_pipe_prepare(store_t *s);
int store_group_finish_traj_pipe(store_t *s, const char *gid, int traj, double reward);
int store_group_finish_traj_reply(store_t *s, const store_reply_t *r, const char *gid,
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

#endif
