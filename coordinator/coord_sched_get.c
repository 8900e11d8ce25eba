/*
 * coord_sched_get.c — the const accessors of the scheduler's jobs, groups and actors
 * (coord_sched.h, "reading a job, a group, an actor"): one per field read outside coord_sched.c.
 */
#include "coordinator/coord_sched.h"
#include "coordinator/coord_sched_int.h"

int coord_actor_credit(const coord_actor_t *x)
{
    return x->credit;
}

bool coord_actor_draining(const coord_actor_t *x)
{
    return x->draining;
}

bool coord_actor_gate(const coord_actor_t *x)
{
    return x->gate;
}

int coord_actor_held(const coord_actor_t *x)
{
    return x->held;
}

const uint8_t *coord_actor_id(const coord_actor_t *x)
{
    return x->id;
}

size_t coord_actor_idlen(const coord_actor_t *x)
{
    return x->idlen;
}

int64_t coord_actor_last_seen_ms(const coord_actor_t *x)
{
    return x->last_seen_ms;
}

const char *coord_actor_name(const coord_actor_t *x)
{
    return x->name;
}

int coord_actor_slots(const coord_actor_t *x)
{
    return x->slots;
}

int coord_group_G(const coord_group_t *x)
{
    return x->G;
}

int coord_group_announces(const coord_group_t *x)
{
    return x->announces;
}

double coord_group_cancel_d(const coord_group_t *x)
{
    return x->cancel_d;
}

const char *coord_group_cancel_reason(const coord_group_t *x)
{
    return x->cancel_reason;
}

int64_t coord_group_cancel_step(const coord_group_t *x)
{
    return x->cancel_step;
}

bool coord_group_cancelled(const coord_group_t *x)
{
    return x->cancelled;
}

int coord_group_first_job(const coord_group_t *x)
{
    return x->first_job;
}

const char *coord_group_gid(const coord_group_t *x)
{
    return x->gid;
}

bool coord_group_keep_known(const coord_group_t *x)
{
    return x->keep_known;
}

uint64_t coord_group_keep_mask(const coord_group_t *x)
{
    return x->keep_mask;
}

int64_t coord_group_next_announce_ms(const coord_group_t *x)
{
    return x->next_announce_ms;
}

int64_t coord_group_round(const coord_group_t *x)
{
    return x->round;
}

const char *coord_group_task(const coord_group_t *x)
{
    return x->task;
}

uint64_t coord_group_told_seq(const coord_group_t *x)
{
    return x->told_seq;
}

const uint8_t *coord_job_actor(const coord_job_t *x)
{
    return x->actor;
}

size_t coord_job_actor_len(const coord_job_t *x)
{
    return x->actor_len;
}

int64_t coord_job_deadline_ms(const coord_job_t *x)
{
    return x->deadline_ms;
}

int64_t coord_job_epoch(const coord_job_t *x)
{
    return x->epoch;
}

int coord_job_failures(const coord_job_t *x)
{
    return x->failures;
}

int coord_job_group(const coord_job_t *x)
{
    return x->group;
}

coord_job_state_t coord_job_state(const coord_job_t *x)
{
    return x->state;
}

const char *coord_job_status(const coord_job_t *x)
{
    return x->status;
}

bool coord_job_storing(const coord_job_t *x)
{
    return x->storing;
}

int coord_job_traj(const coord_job_t *x)
{
    return x->traj;
}

void *coord_group_confirming(const coord_group_t *x)
{
    return x->confirming;
}
