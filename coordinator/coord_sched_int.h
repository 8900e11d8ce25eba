/*
 * coord_sched_int.h — the scheduler's job, group and actor structs, shared by coord_sched.c (which
 * changes them) and coord_sched_get.c (their const accessors) and by nothing else: every other
 * file reads them through the accessors of coord_sched.h.
 */
#ifndef SR_COORD_SCHED_INT_H
#define SR_COORD_SCHED_INT_H

#include "coordinator/coord_sched.h"

struct coord_job {
    int group; /* index of its group */
    int traj;
    coord_job_state_t state;
    int64_t epoch;               /* of the current (LEASED) or last lease; 0 = never leased */
    uint8_t actor[COORD_ID_MAX]; /* lease holder's identity while LEASED */
    size_t actor_len;
    int actor_uid;                 /* that identity's number (coord_sched.c, s_uid); 0 = none */
    int64_t deadline_ms;           /* lease expiry while LEASED */
    int failures;                  /* attempts that ended with status "failed" */
    bool storing;                  /* LEASED, its RESULT being stored: never re-leased */
    uint32_t qseq_;                /* queue entry that is current (lazy deletion) */
    char status[COORD_STATUS_MAX]; /* the final RESULT's status when FINAL */
};

struct coord_group {
    char gid[STORE_GID_MAX];
    char task[STORE_TASK_MAX];
    int G;
    int first_job;      /* its jobs are first_job .. first_job + G - 1 */
    bool cancelled;     /* a CANCEL was seen, or Redis says so */
    uint64_t keep_mask; /* trajectories a cancel lets finish (keep-two) */
    bool keep_known;    /* keep_mask is the gate's (its CANCEL came), not a placeholder */
    /* The gate's CANCEL, kept by the coordinator to tell it again (bus re-announcements and
     * CANCELs to actors whose heartbeat lists a lease of the group); set with keep_known. */
    int64_t cancel_step;
    double cancel_d;
    char cancel_reason[64];
    int announces; /* bus re-announcements made */
    int64_t next_announce_ms;
    uint64_t told_seq; /* the heartbeat that last told an actor (one CANCEL per heartbeat) */
    void *confirming;  /* the coordinator's Redis look-up of a CANCEL on its way, or NULL */
    int64_t round;     /* the round it belongs to (set by the caller; 0 unless set) */
    int open;          /* its jobs neither FINAL nor DROPPED (coord_sched_round_done) */
};

struct coord_actor {
    uint8_t id[COORD_ID_MAX]; /* routing identity */
    size_t idlen;
    char name[COORD_ID_MAX]; /* printable form of the id, for logs */
    bool gate;               /* gates hold no jobs */
    int slots;
    int credit; /* granted minus sent */
    bool draining;
    int64_t last_seen_ms;
    int held;     /* jobs currently leased to it */
    uint64_t seq; /* join order */
    int uid;      /* its identity's number: the same for every actor of that identity */
};

#endif
