/*
 * coord_sched.h — the coordinator's scheduler for one round: the groups and their jobs, the
 * actors with their credit, the queue of jobs waiting for a slot, placement and leases.
 *
 * It is plain data with no sockets, no Redis and no clock of its own (times are passed in), so
 * every rule of the work channel is decided here and the coordinator only carries the messages.
 *
 * A job is one trajectory of one group; its id is "<group>/t<traj>". Its life:
 *
 *     QUEUED --lease--> LEASED --final RESULT--> FINAL
 *       ^                 |  (expiry, BYE, a failed attempt, a send that failed)
 *       +-----------------+
 *     QUEUED --its group cancelled--> DROPPED (a queued job never dispatched; one that ran
 *                                       before and was queued again runs to its RESULT)
 *
 * Every lease carries an epoch (the fencing token) that the caller allocates; a RESULT counts
 * only when its (job, epoch) is the job's current lease. A re-queued job gets a new epoch when it
 * is leased again, so the old epoch is dead from the moment the job leaves LEASED.
 *
 * Credit: an actor's credit is what it granted minus the jobs it was sent; the scheduler never
 * leases a job to an actor without credit. Placement "spread" gives each job of a group to the
 * actor with credit that holds the fewest jobs of that group (ties: round-robin), and, while the
 * scheduler is strict, to none that holds ceil(G/2) of them already: a group then always runs on
 * two actors at least, even when the first actor's credit arrives before the others connect. The
 * coordinator relaxes the cap when jobs were held back by it for a while (one actor alone must
 * still get all the work) and makes it strict again when an actor joins. "pack" fills the
 * earliest-joined actor first. Re-queued jobs are leased before fresh ones, so a round is not held
 * up by its stragglers.
 *
 * Rounds: every group carries the round it belongs to, and groups are added round by round. The
 * scheduler may hold two rounds at once (the coordinator starts the next round's groups while the
 * stragglers of the current one run: docs/architecture.md, "Rounds"); coord_sched_round_done
 * tells one round's end and coord_sched_retire removes the oldest round once it is over.
 */
#ifndef SR_COORD_SCHED_H
#define SR_COORD_SCHED_H

#include "common/store.h"
#include "common/store_group.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define COORD_ID_MAX 256     /* a routing identity: 1..255 bytes */
#define COORD_STATUS_MAX 16  /* "done", "cancelled", "failed", "truncated" */
#define COORD_JOB_ID_MAX (STORE_GID_MAX + 16)

typedef enum { COORD_PLACE_SPREAD = 0, COORD_PLACE_PACK = 1 } coord_placement_t;

typedef enum {
    COORD_JOB_QUEUED = 0,
    COORD_JOB_LEASED,
    COORD_JOB_FINAL,
    COORD_JOB_DROPPED,
} coord_job_state_t;

/* A job, a group and an actor are the scheduler's (their structs: coord_sched_int.h, private to
 * coord_sched.c and coord_sched_get.c): read through the const accessors below (coord_job_*,
 * coord_group_*, coord_actor_*); changed only through coord_sched's operations. */
typedef struct coord_job coord_job_t;
typedef struct coord_group coord_group_t;
typedef struct coord_actor coord_actor_t;

typedef struct coord_sched coord_sched_t;

/* coord_sched_new returns an empty scheduler, or NULL when out of memory. */
coord_sched_t *coord_sched_new(coord_placement_t placement);

/* coord_sched_destroy frees the scheduler. Accepts NULL and *self_p == NULL; sets it to NULL. */
void coord_sched_destroy(coord_sched_t **self_p);

/* coord_sched_reset forgets every group and job (a new round) and keeps the actors, whose
 * held counts drop to zero. */
void coord_sched_reset(coord_sched_t *s);

/* coord_sched_add_group adds a group of G (1..STORE_G_MAX) jobs, all QUEUED. Returns the group's
 * index (>= 0), SR_EINVAL for bad arguments or SR_ECONFLICT when gid is already there. */
int coord_sched_add_group(coord_sched_t *s, const char *gid, const char *task, int G);

/* coord_sched_groups / coord_sched_jobs return the counts; coord_sched_group / coord_sched_job
 * the entry at an index (NULL when out of range). The pointers stay valid until the next
 * coord_sched_add_group or coord_sched_reset. */
int coord_sched_groups(const coord_sched_t *s);
int coord_sched_jobs(const coord_sched_t *s);
coord_group_t *coord_sched_group(coord_sched_t *s, int index);
coord_job_t *coord_sched_job(coord_sched_t *s, int index);

/* coord_sched_find_group returns the index of gid, or -1. Ids of coord_group_id's form
 * ("r<round>-g<index>") of groups whose round is set are found without a walk. */
int coord_sched_find_group(const coord_sched_t *s, const char *gid);

/* coord_sched_find_job returns the index of the job with id job_id ("<gid>/t<traj>"), or -1
 * when the id is malformed or names no job of this round. */
int coord_sched_find_job(const coord_sched_t *s, const char *job_id);

/* coord_sched_job_id writes the id of job `index` into buf (COORD_JOB_ID_MAX bytes). */
void coord_sched_job_id(const coord_sched_t *s, int index, char *buf, size_t len);

/* ---- actors ---- */

/* coord_sched_actor_hello registers the actor with identity id (1..255 bytes), or refreshes it
 * when it is known: its credit drops to 0 either way (it sends CREDIT again), draining ends.
 * Returns the actor (owned by the scheduler), or NULL for a bad identity. */
coord_actor_t *coord_sched_actor_hello(coord_sched_t *s, const void *id, size_t idlen, bool gate,
                                       int slots, int64_t now_ms);

/* coord_sched_actor_find returns the actor with that identity, or NULL. */
coord_actor_t *coord_sched_actor_find(coord_sched_t *s, const void *id, size_t idlen);

/* coord_sched_actor_credit adds n credits to a (not to gates nor draining actors), capped at its
 * slots. */
void coord_sched_actor_credit(coord_sched_t *s, coord_actor_t *a, int n);

/* coord_sched_actor_release re-queues every job leased to the actor with identity id (their
 * epochs are dead from now on). Jobs of cancelled groups are dropped instead. Returns how many
 * jobs were re-queued. */
int coord_sched_actor_release(coord_sched_t *s, const void *id, size_t idlen);

/* coord_sched_actor_remove forgets the actor (its leases stay: release them first if they must
 * go). a becomes invalid. */
void coord_sched_actor_remove(coord_sched_t *s, coord_actor_t *a);

/* coord_sched_actors / coord_sched_actor_at walk the actors (NULL when out of range). */
int coord_sched_actors(const coord_sched_t *s);
coord_actor_t *coord_sched_actor_at(coord_sched_t *s, int index);

/* ---- dispatch and leases ---- */

/* coord_sched_pick chooses the next job to dispatch and the actor to send it to, without
 * changing anything: the first queued job (re-queued ones first) that some actor with credit may
 * take. Returns true and sets *job and *actor, or false when there is none. */
bool coord_sched_pick(coord_sched_t *s, int *job, coord_actor_t **actor);

/* coord_sched_set_strict turns the spread cap of ceil(G/2) jobs of a group per actor on (the
 * default) or off. */
void coord_sched_set_strict(coord_sched_t *s, bool strict);

/* coord_sched_capped returns true when the last coord_sched_pick found a queued job that an actor
 * with credit could have taken but for the spread cap. */
bool coord_sched_capped(const coord_sched_t *s);

/* coord_sched_lease leases QUEUED job `job` to actor a under `epoch` until deadline_ms, taking one
 * credit. Returns SR_OK, or SR_ECONFLICT when the job is not queued or a has no credit. */
int coord_sched_lease(coord_sched_t *s, int job, coord_actor_t *a, int64_t epoch,
                      int64_t deadline_ms);

/* coord_sched_adopt leases a job that is not final to the actor with identity id under an epoch
 * the caller read back from a previous life of the coordinator (resume), until deadline_ms. No
 * credit is taken: the actor did not count the job among its free slots. Returns SR_OK or
 * SR_ECONFLICT (the job is final or dropped). */
int coord_sched_adopt(coord_sched_t *s, int job, const void *id, size_t idlen, int64_t epoch,
                      int64_t deadline_ms);

/* coord_sched_renew extends the lease (job, epoch) held by the actor with identity id to
 * deadline_ms. Returns SR_OK, SR_ENOTFOUND (no such job) or SR_ECONFLICT (not the current lease
 * of that actor). */
int coord_sched_renew(coord_sched_t *s, int job, int64_t epoch, const void *id, size_t idlen,
                      int64_t deadline_ms);

/* coord_sched_requeue puts a LEASED job back in the queue (ahead of fresh jobs), or drops it when
 * its group is cancelled. Returns SR_OK or SR_ECONFLICT when the job is not leased. */
int coord_sched_requeue(coord_sched_t *s, int job);

/* coord_sched_store marks a LEASED job's RESULT as being stored (SR_ECONFLICT unless LEASED);
 * coord_sched_unstore clears the mark (the store gave up: the lease may expire again). */
int coord_sched_store(coord_sched_t *s, int job);
void coord_sched_unstore(coord_sched_t *s, int job);

/* coord_sched_expire re-queues (or drops, in a cancelled group) every LEASED job whose deadline is
 * before now_ms, and returns how many leases expired. A job whose RESULT is being stored
 * (storing) keeps its lease: it is neither expired, released nor re-queued until
 * coord_sched_finish or coord_sched_unstore. */
int coord_sched_expire(coord_sched_t *s, int64_t now_ms);

/* coord_sched_finish marks the job FINAL with the RESULT status (copied, cut to fit), from any
 * state but FINAL. Returns SR_OK or SR_ECONFLICT when it is final already. */
int coord_sched_finish(coord_sched_t *s, int job, const char *status);

/* coord_sched_cancel_group marks the group cancelled and drops its QUEUED jobs except the
 * trajectories in keep_mask. Returns how many jobs were dropped, or SR_ENOTFOUND. */
int coord_sched_cancel_group(coord_sched_t *s, int group, uint64_t keep_mask);

/* coord_sched_cancel is the one function that changes a group's cancel state in a running
 * coordinator. keep_known: the gate's CANCEL came with its keep list `keep` (keep-two); the
 * group's queued jobs outside it are dropped. Otherwise the cancel was learnt another way (a
 * RESULT with status cancelled, Redis saying so) and the keep list is not known yet: the group
 * is cancelled, but no queued job is dropped, since any may be one the gate keeps; a CANCEL that
 * comes later narrows it to its keep list. Once a keep list is known it is final: a repeated
 * CANCEL or a later RESULT changes nothing. Returns the number of jobs dropped (0 or more), -1
 * when nothing changed, or SR_ENOTFOUND. */
int coord_sched_cancel(coord_sched_t *s, int group, bool keep_known, uint64_t keep);

/* coord_sched_queued returns how many jobs are QUEUED. */
int coord_sched_queued(const coord_sched_t *s);

/* coord_sched_queue_empty returns true when no job is QUEUED (amortised O(1): it drops the
 * queue's dead entries on the way). */
bool coord_sched_queue_empty(coord_sched_t *s);

/* coord_sched_round_done returns true when every job of the groups of `round` is FINAL or
 * DROPPED (also when the round has no group here). */
bool coord_sched_round_done(const coord_sched_t *s, int64_t round);

/* coord_sched_retire removes the first n groups and their jobs (the oldest round, once it is
 * done); the other groups and jobs move down, so indices held before the call are stale after
 * it (job ids and group ids are not). Returns SR_OK, SR_EINVAL when n is out of range, or
 * SR_ECONFLICT (nothing removed) when one of those jobs is still QUEUED or LEASED. */
int coord_sched_retire(coord_sched_t *s, int n);

/* ---- reading a job, a group, an actor --------------------------------------------------------
 * One const accessor per field read outside the scheduler (coord_sched_get.c; the fields'
 * meanings are at their structs in coord_sched_int.h). */

bool coord_job_storing(const coord_job_t *x);
const char *coord_job_status(const coord_job_t *x);
const uint8_t *coord_job_actor(const coord_job_t *x);
coord_job_state_t coord_job_state(const coord_job_t *x);
int coord_job_failures(const coord_job_t *x);
int coord_job_group(const coord_job_t *x);
int coord_job_traj(const coord_job_t *x);
int64_t coord_job_deadline_ms(const coord_job_t *x);
int64_t coord_job_epoch(const coord_job_t *x);
size_t coord_job_actor_len(const coord_job_t *x);

bool coord_group_cancelled(const coord_group_t *x);
bool coord_group_keep_known(const coord_group_t *x);
const char *coord_group_cancel_reason(const coord_group_t *x);
const char *coord_group_gid(const coord_group_t *x);
const char *coord_group_task(const coord_group_t *x);
double coord_group_cancel_d(const coord_group_t *x);
int coord_group_G(const coord_group_t *x);
int coord_group_announces(const coord_group_t *x);
int coord_group_first_job(const coord_group_t *x);
int64_t coord_group_cancel_step(const coord_group_t *x);
int64_t coord_group_next_announce_ms(const coord_group_t *x);
int64_t coord_group_round(const coord_group_t *x);
uint64_t coord_group_keep_mask(const coord_group_t *x);
uint64_t coord_group_told_seq(const coord_group_t *x);
void *coord_group_confirming(const coord_group_t *x);

bool coord_actor_draining(const coord_actor_t *x);
bool coord_actor_gate(const coord_actor_t *x);
const char *coord_actor_name(const coord_actor_t *x);
const uint8_t *coord_actor_id(const coord_actor_t *x);
int coord_actor_credit(const coord_actor_t *x);
int coord_actor_held(const coord_actor_t *x);
int coord_actor_slots(const coord_actor_t *x);
int64_t coord_actor_last_seen_ms(const coord_actor_t *x);
size_t coord_actor_idlen(const coord_actor_t *x);

/* ---- changes made by the coordinator --------------------------------------------------------
 * The job, group and actor structs are coord_sched's, read through the accessors above (the
 * coordinator, the dashboard): every change goes through coord_sched, with the operations above
 * or these. Each accepts an index out of range or a NULL actor and then does nothing. */

/* coord_sched_group_set_round records the round group gi belongs to. */
void coord_sched_group_set_round(coord_sched_t *s, int gi, int64_t round);

/* coord_sched_group_set_cancelled marks group gi cancelled as Redis shows it (a resumed round);
 * its queued jobs are dropped by coord_sched_cancel_group. */
void coord_sched_group_set_cancelled(coord_sched_t *s, int gi);

/* coord_sched_group_keep_cancel keeps the gate's CANCEL of group gi (step, d, reason) to tell it
 * again, its first re-announcement due at next_ms. */
void coord_sched_group_keep_cancel(coord_sched_t *s, int gi, int64_t step, double d,
                                   const char *reason, int64_t next_ms);

/* coord_sched_group_announced counts one re-announcement of group gi's CANCEL, the next due at
 * next_ms. */
void coord_sched_group_announced(coord_sched_t *s, int gi, int64_t next_ms);

/* coord_sched_group_told records the heartbeat (seq) whose actor was told group gi's CANCEL. */
void coord_sched_group_told(coord_sched_t *s, int gi, uint64_t seq);

/* coord_sched_group_set_confirming sets the coordinator's look-up of a CANCEL of group gi on its
 * way (not owned by the scheduler), or NULL. */
void coord_sched_group_set_confirming(coord_sched_t *s, int gi, void *look_up);

/* coord_sched_job_set_epoch sets the epoch of job ji (a job final in Redis under that epoch). */
void coord_sched_job_set_epoch(coord_sched_t *s, int ji, int64_t epoch);

/* coord_sched_job_set_deadline sets the lease expiry of job ji (its JOB leaves now). */
void coord_sched_job_set_deadline(coord_sched_t *s, int ji, int64_t deadline_ms);

/* coord_sched_job_failed counts one failed attempt of job ji and returns the count (0 for a bad
 * index). */
int coord_sched_job_failed(coord_sched_t *s, int ji);

/* coord_sched_actor_refund gives actor a back the credit of a job that did not go out. */
void coord_sched_actor_refund(coord_sched_t *s, coord_actor_t *a);

/* coord_sched_actor_no_credit takes actor a's credit away (its queue is full: it asks again). */
void coord_sched_actor_no_credit(coord_sched_t *s, coord_actor_t *a);

/* coord_sched_actor_drain marks actor a draining: no credit, no job from now on. */
void coord_sched_actor_drain(coord_sched_t *s, coord_actor_t *a);

/* coord_sched_actor_seen records when actor a was last heard from. */
void coord_sched_actor_seen(coord_sched_t *s, coord_actor_t *a, int64_t now_ms);

#endif
