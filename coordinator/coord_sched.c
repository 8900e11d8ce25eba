/*
 * coord_sched.c — the scheduler of the open rounds: groups, jobs, actors, queue, placement, leases.
 *
 * Jobs sit in one array (group k's jobs are contiguous). The queue is two FIFOs of job indices,
 * re-queued jobs first, with lazy deletion: an entry counts only while its job is QUEUED and the
 * entry's sequence number is the job's current one, so dropping or leasing a job never searches
 * the queue. Actors are separately allocated, so pointers to them stay valid until removal.
 */
#include "coordinator/coord_sched.h"
#include "coordinator/coord_sched_int.h"

#include "common/sr.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int job;
    uint32_t seq;
} s_qentry_t;

typedef struct {
    s_qentry_t *v;
    size_t head, len, cap;
} s_fifo_t;

struct coord_sched {
    coord_placement_t placement;
    coord_group_t *groups;
    int ngroups, capgroups;
    coord_job_t *jobs;
    int njobs, capjobs;
    s_fifo_t retry, fresh;
    uint32_t qseq;
    coord_actor_t **actors;
    int nactors, capactors;
    uint64_t actor_seq;
    uint64_t rr; /* round-robin cursor over join order */
    bool strict; /* spread cap on */
    bool capped; /* the last pick was held back by the cap */
    /* Every identity an actor or a lease had, numbered 1.. in order of first sight: a job's
     * holder is compared with an actor by number (the spread cap counts per pick), not by bytes. */
    struct s_ident {
        uint8_t id[COORD_ID_MAX];
        size_t len;
    } *idents;
    int nidents, capidents;
};

#define SCAN_MAX 4096 /* queued jobs a pick looks at */

/* s_uid returns the number of identity id (1..), numbering it when it is new. */
static int s_uid(coord_sched_t *s, const void *id, size_t idlen)
{
    for (int i = s->nidents - 1; i >= 0; i--)
        if (s->idents[i].len == idlen && memcmp(s->idents[i].id, id, idlen) == 0)
            return i + 1;
    if (s->nidents == s->capidents) {
        s->capidents = s->capidents ? s->capidents * 2 : 16;
        s->idents = sr_xrealloc(s->idents, (size_t)s->capidents * sizeof *s->idents);
    }
    struct s_ident *e = &s->idents[s->nidents++];
    memcpy(e->id, id, idlen);
    e->len = idlen;
    return s->nidents;
}

static void s_fifo_push(s_fifo_t *f, int job, uint32_t seq)
{
    if (f->head > 0 && f->head == f->len) {
        f->head = f->len = 0;
    }
    if (f->len == f->cap) {
        if (f->head > 0) {
            memmove(f->v, f->v + f->head, (f->len - f->head) * sizeof *f->v);
            f->len -= f->head;
            f->head = 0;
        }
        if (f->len == f->cap) {
            f->cap = f->cap ? f->cap * 2 : 64;
            f->v = sr_xrealloc(f->v, f->cap * sizeof *f->v);
        }
    }
    f->v[f->len++] = (s_qentry_t){job, seq};
}

static void s_enqueue(coord_sched_t *s, int job, bool retry)
{
    coord_job_t *j = &s->jobs[job];
    j->state = COORD_JOB_QUEUED;
    j->qseq_ = ++s->qseq;
    j->actor_len = 0;
    j->actor_uid = 0;
    s_fifo_push(retry ? &s->retry : &s->fresh, job, j->qseq_);
}

/* s_fifo_front returns the first live entry's job (dropping dead ones on the way), or -1. */
static int s_fifo_front(coord_sched_t *s, s_fifo_t *f)
{
    while (f->head < f->len) {
        s_qentry_t e = f->v[f->head];
        const coord_job_t *j = &s->jobs[e.job];
        if (j->state == COORD_JOB_QUEUED && j->qseq_ == e.seq)
            return e.job;
        f->head++;
    }
    return -1;
}

coord_sched_t *coord_sched_new(coord_placement_t placement)
{
    coord_sched_t *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->placement = placement;
    s->strict = true;
    return s;
}

void coord_sched_destroy(coord_sched_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    coord_sched_t *s = *self_p;
    for (int i = 0; i < s->nactors; i++)
        free(s->actors[i]);
    free(s->actors);
    free(s->groups);
    free(s->jobs);
    free(s->retry.v);
    free(s->fresh.v);
    free(s->idents);
    free(s);
    *self_p = NULL;
}

void coord_sched_reset(coord_sched_t *s)
{
    s->ngroups = 0;
    s->njobs = 0;
    s->retry.head = s->retry.len = 0;
    s->fresh.head = s->fresh.len = 0;
    for (int i = 0; i < s->nactors; i++)
        s->actors[i]->held = 0;
}

int coord_sched_add_group(coord_sched_t *s, const char *gid, const char *task, int G)
{
    if (!gid || !task || G < 1 || G > STORE_G_MAX || strlen(gid) >= STORE_GID_MAX ||
        strlen(task) >= STORE_TASK_MAX || !*gid)
        return SR_EINVAL;
    if (coord_sched_find_group(s, gid) >= 0)
        return SR_ECONFLICT;
    if (s->ngroups == s->capgroups) {
        s->capgroups = s->capgroups ? s->capgroups * 2 : 16;
        s->groups = sr_xrealloc(s->groups, (size_t)s->capgroups * sizeof *s->groups);
    }
    if (s->njobs + G > s->capjobs) {
        while (s->njobs + G > s->capjobs)
            s->capjobs = s->capjobs ? s->capjobs * 2 : 128;
        s->jobs = sr_xrealloc(s->jobs, (size_t)s->capjobs * sizeof *s->jobs);
    }
    int gi = s->ngroups++;
    coord_group_t *g = &s->groups[gi];
    memset(g, 0, sizeof *g);
    snprintf(g->gid, sizeof g->gid, "%s", gid);
    snprintf(g->task, sizeof g->task, "%s", task);
    g->G = G;
    g->open = G;
    g->first_job = s->njobs;
    for (int t = 0; t < G; t++) {
        int ji = s->njobs++;
        coord_job_t *j = &s->jobs[ji];
        memset(j, 0, sizeof *j);
        j->group = gi;
        j->traj = t;
        s_enqueue(s, ji, false);
    }
    return gi;
}

int coord_sched_groups(const coord_sched_t *s) { return s->ngroups; }
int coord_sched_jobs(const coord_sched_t *s) { return s->njobs; }

coord_group_t *coord_sched_group(coord_sched_t *s, int index)
{
    return index >= 0 && index < s->ngroups ? &s->groups[index] : NULL;
}

coord_job_t *coord_sched_job(coord_sched_t *s, int index)
{
    return index >= 0 && index < s->njobs ? &s->jobs[index] : NULL;
}

/* s_parse_gid reads an id made by coord_group_id, "r<round>-g<index>": true and *round, *index
 * when gid has that form. */
static bool s_parse_gid(const char *gid, int64_t *round, int *index)
{
    const char *p = gid;
    if (*p++ != 'r')
        return false;
    int64_t r = 0;
    int digits = 0;
    for (; *p >= '0' && *p <= '9' && digits < 18; p++, digits++)
        r = r * 10 + (*p - '0');
    if (!digits || *p++ != '-' || *p++ != 'g')
        return false;
    int k = 0;
    digits = 0;
    for (; *p >= '0' && *p <= '9' && digits < 9; p++, digits++)
        k = k * 10 + (*p - '0');
    if (!digits || *p)
        return false;
    *round = r;
    *index = k;
    return true;
}

int coord_sched_find_group(const coord_sched_t *s, const char *gid)
{
    /* Ids made by coord_group_id name their place: the round's first group (groups are added round
     * by round, so a binary search finds it) plus the index. Anything else: a walk. */
    int64_t round;
    int k;
    if (s_parse_gid(gid, &round, &k)) {
        int lo = 0, hi = s->ngroups;
        while (lo < hi) {
            int mid = lo + (hi - lo) / 2;
            if (s->groups[mid].round < round)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (k < s->ngroups - lo && strcmp(s->groups[lo + k].gid, gid) == 0)
            return lo + k;
    }
    for (int i = 0; i < s->ngroups; i++)
        if (strcmp(s->groups[i].gid, gid) == 0)
            return i;
    return -1;
}

int coord_sched_find_job(const coord_sched_t *s, const char *job_id)
{
    if (!job_id)
        return -1;
    const char *slash = strrchr(job_id, '/');
    if (!slash || slash == job_id || slash[1] != 't' || (size_t)(slash - job_id) >= STORE_GID_MAX)
        return -1;
    char gid[STORE_GID_MAX];
    memcpy(gid, job_id, (size_t)(slash - job_id));
    gid[slash - job_id] = '\0';
    const char *p = slash + 2;
    if (*p < '0' || *p > '9' || (*p == '0' && p[1] != '\0'))
        return -1;
    long traj = 0;
    for (; *p; p++) {
        if (*p < '0' || *p > '9' || traj > STORE_G_MAX)
            return -1;
        traj = traj * 10 + (*p - '0');
    }
    int gi = coord_sched_find_group(s, gid);
    if (gi < 0 || traj >= s->groups[gi].G)
        return -1;
    return s->groups[gi].first_job + (int)traj;
}

void coord_sched_job_id(const coord_sched_t *s, int index, char *buf, size_t len)
{
    const coord_job_t *j = &s->jobs[index];
    snprintf(buf, len, "%s/t%d", s->groups[j->group].gid, j->traj);
}

/* ---- actors ---------------------------------------------------------------------------- */

coord_actor_t *coord_sched_actor_find(coord_sched_t *s, const void *id, size_t idlen)
{
    for (int i = 0; i < s->nactors; i++) {
        coord_actor_t *a = s->actors[i];
        if (a->idlen == idlen && memcmp(a->id, id, idlen) == 0)
            return a;
    }
    return NULL;
}

static void s_printable(const uint8_t *id, size_t len, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < len && o + 5 < cap; i++) {
        uint8_t c = id[i];
        if (c >= 0x20 && c < 0x7f)
            out[o++] = (char)c;
        else
            o += (size_t)snprintf(out + o, cap - o, "\\x%02x", c);
    }
    out[o] = '\0';
}

coord_actor_t *coord_sched_actor_hello(coord_sched_t *s, const void *id, size_t idlen, bool gate,
                                       int slots, int64_t now_ms)
{
    if (!id || idlen == 0 || idlen >= COORD_ID_MAX)
        return NULL;
    coord_actor_t *a = coord_sched_actor_find(s, id, idlen);
    if (!a) {
        if (s->nactors == s->capactors) {
            s->capactors = s->capactors ? s->capactors * 2 : 8;
            s->actors = sr_xrealloc(s->actors, (size_t)s->capactors * sizeof *s->actors);
        }
        a = sr_xcalloc(1, sizeof *a);
        memcpy(a->id, id, idlen);
        a->idlen = idlen;
        s_printable(a->id, idlen, a->name, sizeof a->name);
        a->seq = s->actor_seq++;
        a->uid = s_uid(s, id, idlen);
        s->actors[s->nactors++] = a;
    }
    a->gate = gate;
    a->slots = gate ? 0 : (slots < 0 ? 0 : slots);
    a->credit = 0;
    a->draining = false;
    a->last_seen_ms = now_ms;
    return a;
}

void coord_sched_actor_credit(coord_sched_t *s, coord_actor_t *a, int n)
{
    (void)s;
    if (!a || a->gate || a->draining || n <= 0)
        return;
    a->credit = SR_MIN(a->credit + n, a->slots);
}

int coord_sched_actor_release(coord_sched_t *s, const void *id, size_t idlen)
{
    int n = 0;
    for (int i = 0; i < s->njobs; i++) {
        coord_job_t *j = &s->jobs[i];
        if (j->state == COORD_JOB_LEASED && !j->storing && j->actor_len == idlen &&
            memcmp(j->actor, id, idlen) == 0) {
            coord_sched_requeue(s, i);
            n++;
        }
    }
    return n;
}

void coord_sched_actor_remove(coord_sched_t *s, coord_actor_t *a)
{
    for (int i = 0; i < s->nactors; i++) {
        if (s->actors[i] == a) {
            free(a);
            memmove(&s->actors[i], &s->actors[i + 1],
                    (size_t)(s->nactors - i - 1) * sizeof *s->actors);
            s->nactors--;
            return;
        }
    }
}

int coord_sched_actors(const coord_sched_t *s) { return s->nactors; }

coord_actor_t *coord_sched_actor_at(coord_sched_t *s, int index)
{
    return index >= 0 && index < s->nactors ? s->actors[index] : NULL;
}

static coord_actor_t *s_actor_of(coord_sched_t *s, const coord_job_t *j)
{
    return j->actor_len ? coord_sched_actor_find(s, j->actor, j->actor_len) : NULL;
}

/* ---- dispatch and leases --------------------------------------------------------------- */

/* s_group_count_on counts the jobs of group gi that actor a holds or has finished: the spread cap
 * limits an actor's share of the whole group, not only of what runs at the moment, so a fast
 * actor that finishes its share early does not take the rest of the group too. */
static int s_group_count_on(const coord_sched_t *s, int gi, const coord_actor_t *a)
{
    const coord_group_t *g = &s->groups[gi];
    int n = 0;
    for (int t = 0; t < g->G; t++) {
        const coord_job_t *j = &s->jobs[g->first_job + t];
        if ((j->state == COORD_JOB_LEASED || j->state == COORD_JOB_FINAL) &&
            j->actor_uid == a->uid)
            n++;
    }
    return n;
}

static coord_actor_t *s_place(coord_sched_t *s, int job)
{
    coord_actor_t *best = NULL;
    int best_n = 0;
    uint64_t best_rank = 0;
    const coord_group_t *g = &s->groups[s->jobs[job].group];
    int cap = g->G > 1 ? (g->G + 1) / 2 : 1;
    for (int i = 0; i < s->nactors; i++) {
        coord_actor_t *a = s->actors[i];
        if (a->gate || a->draining || a->credit <= 0)
            continue;
        if (s->placement == COORD_PLACE_PACK) {
            if (!best || a->seq < best->seq)
                best = a;
            continue;
        }
        int n = s_group_count_on(s, s->jobs[job].group, a);
        if (s->strict && n >= cap) {
            s->capped = true;
            continue;
        }
        /* rank in round-robin order: actors joined after the cursor come first */
        uint64_t rank = a->seq >= s->rr ? a->seq - s->rr : a->seq + (UINT64_MAX - s->rr);
        if (!best || n < best_n || (n == best_n && rank < best_rank)) {
            best = a;
            best_n = n;
            best_rank = rank;
        }
    }
    return best;
}

/* s_pick_from scans one FIFO for the first live job that an actor may take. */
static bool s_pick_from(coord_sched_t *s, s_fifo_t *f, int *scanned, int *job, coord_actor_t **actor)
{
    if (s_fifo_front(s, f) < 0)
        return false;
    /* Placement depends on the job's group and the actors only, neither of which changes during
     * the scan: once a group's job found no actor, its other queued jobs (next to it in the
     * queue, as groups are queued whole) are passed over without a second look. */
    int no_place = -1;
    for (size_t i = f->head; i < f->len && *scanned < SCAN_MAX; i++) {
        s_qentry_t e = f->v[i];
        const coord_job_t *j = &s->jobs[e.job];
        if (j->state != COORD_JOB_QUEUED || j->qseq_ != e.seq)
            continue;
        (*scanned)++;
        if (j->group == no_place)
            continue;
        coord_actor_t *a = s_place(s, e.job);
        no_place = j->group;
        if (a) {
            *job = e.job;
            *actor = a;
            return true;
        }
        if (s->placement == COORD_PLACE_PACK || !s->capped)
            return false; /* no actor has credit at all */
    }
    return false;
}

bool coord_sched_pick(coord_sched_t *s, int *job, coord_actor_t **actor)
{
    int scanned = 0;
    s->capped = false;
    return s_pick_from(s, &s->retry, &scanned, job, actor) ||
           s_pick_from(s, &s->fresh, &scanned, job, actor);
}

void coord_sched_set_strict(coord_sched_t *s, bool strict) { s->strict = strict; }

bool coord_sched_capped(const coord_sched_t *s) { return s->capped; }

int coord_sched_lease(coord_sched_t *s, int job, coord_actor_t *a, int64_t epoch,
                      int64_t deadline_ms)
{
    coord_job_t *j = coord_sched_job(s, job);
    if (!j || !a || j->state != COORD_JOB_QUEUED || a->credit <= 0)
        return SR_ECONFLICT;
    j->state = COORD_JOB_LEASED;
    j->epoch = epoch;
    memcpy(j->actor, a->id, a->idlen);
    j->actor_len = a->idlen;
    j->actor_uid = a->uid;
    j->deadline_ms = deadline_ms;
    a->credit--;
    a->held++;
    s->rr = a->seq + 1;
    return SR_OK;
}

int coord_sched_adopt(coord_sched_t *s, int job, const void *id, size_t idlen, int64_t epoch,
                      int64_t deadline_ms)
{
    coord_job_t *j = coord_sched_job(s, job);
    if (!j || !id || idlen == 0 || idlen >= COORD_ID_MAX || j->state == COORD_JOB_FINAL ||
        j->state == COORD_JOB_DROPPED)
        return SR_ECONFLICT;
    coord_actor_t *old = j->state == COORD_JOB_LEASED ? s_actor_of(s, j) : NULL;
    if (old && old->held > 0)
        old->held--;
    j->state = COORD_JOB_LEASED;
    j->qseq_++; /* any queue entry is dead now */
    j->epoch = epoch;
    memcpy(j->actor, id, idlen);
    j->actor_len = idlen;
    j->actor_uid = s_uid(s, id, idlen);
    j->deadline_ms = deadline_ms;
    coord_actor_t *a = coord_sched_actor_find(s, id, idlen);
    if (a)
        a->held++;
    return SR_OK;
}

int coord_sched_renew(coord_sched_t *s, int job, int64_t epoch, const void *id, size_t idlen,
                      int64_t deadline_ms)
{
    coord_job_t *j = coord_sched_job(s, job);
    if (!j)
        return SR_ENOTFOUND;
    if (j->state != COORD_JOB_LEASED || j->epoch != epoch || j->actor_len != idlen ||
        memcmp(j->actor, id, idlen) != 0)
        return SR_ECONFLICT;
    if (deadline_ms > j->deadline_ms)
        j->deadline_ms = deadline_ms;
    return SR_OK;
}

int coord_sched_requeue(coord_sched_t *s, int job)
{
    coord_job_t *j = coord_sched_job(s, job);
    if (!j || j->state != COORD_JOB_LEASED || j->storing)
        return SR_ECONFLICT;
    coord_actor_t *a = s_actor_of(s, j);
    if (a && a->held > 0)
        a->held--;
    /* Even in a cancelled group: the trajectory started (its ACTIONs are on the bus and may be
     * in the gate's decision), so it ends in a RESULT like the others that ran at the cancel;
     * the actor it goes to is told of the cancel on its first heartbeat. */
    s_enqueue(s, job, true);
    return SR_OK;
}

int coord_sched_expire(coord_sched_t *s, int64_t now_ms)
{
    int n = 0;
    for (int i = 0; i < s->njobs; i++) {
        coord_job_t *j = &s->jobs[i];
        if (j->state == COORD_JOB_LEASED && !j->storing && j->deadline_ms < now_ms) {
            coord_sched_requeue(s, i);
            n++;
        }
    }
    return n;
}

int coord_sched_store(coord_sched_t *s, int job)
{
    coord_job_t *j = coord_sched_job(s, job);
    if (!j || j->state != COORD_JOB_LEASED)
        return SR_ECONFLICT;
    j->storing = true;
    return SR_OK;
}

void coord_sched_unstore(coord_sched_t *s, int job)
{
    coord_job_t *j = coord_sched_job(s, job);
    if (j)
        j->storing = false;
}

int coord_sched_finish(coord_sched_t *s, int job, const char *status)
{
    coord_job_t *j = coord_sched_job(s, job);
    if (!j || j->state == COORD_JOB_FINAL)
        return SR_ECONFLICT;
    if (j->state == COORD_JOB_LEASED) {
        coord_actor_t *a = s_actor_of(s, j);
        if (a && a->held > 0)
            a->held--;
    }
    if (j->state != COORD_JOB_DROPPED)
        s->groups[j->group].open--;
    j->state = COORD_JOB_FINAL;
    j->storing = false;
    j->qseq_++;
    snprintf(j->status, sizeof j->status, "%s", status ? status : "done");
    return SR_OK;
}

int coord_sched_cancel_group(coord_sched_t *s, int group, uint64_t keep_mask)
{
    coord_group_t *g = coord_sched_group(s, group);
    if (!g)
        return SR_ENOTFOUND;
    g->cancelled = true;
    g->keep_mask = keep_mask;
    int n = 0;
    for (int t = 0; t < g->G; t++) {
        coord_job_t *j = &s->jobs[g->first_job + t];
        /* a job queued again after it ran (its actor left, its lease ran out) is not dropped:
         * its trajectory started, and ends in a RESULT */
        if (j->state == COORD_JOB_QUEUED && j->epoch == 0 && !(keep_mask & (1ull << t))) {
            j->state = COORD_JOB_DROPPED;
            j->qseq_++;
            g->open--;
            n++;
        }
    }
    return n;
}

int coord_sched_cancel(coord_sched_t *s, int group, bool keep_known, uint64_t keep)
{
    coord_group_t *g = coord_sched_group(s, group);
    if (!g)
        return SR_ENOTFOUND;
    if (g->cancelled && (g->keep_known || !keep_known))
        return -1;
    int n = coord_sched_cancel_group(s, group, keep_known ? keep : ~0ull);
    g->keep_known = keep_known;
    return n;
}

int coord_sched_queued(const coord_sched_t *s)
{
    int n = 0;
    for (int i = 0; i < s->njobs; i++)
        n += s->jobs[i].state == COORD_JOB_QUEUED;
    return n;
}

bool coord_sched_queue_empty(coord_sched_t *s)
{
    return s_fifo_front(s, &s->retry) < 0 && s_fifo_front(s, &s->fresh) < 0;
}

bool coord_sched_round_done(const coord_sched_t *s, int64_t round)
{
    for (int gi = 0; gi < s->ngroups; gi++) {
        const coord_group_t *g = &s->groups[gi];
        if (g->round == round && g->open > 0)
            return false;
    }
    return true;
}

/* s_fifo_shift keeps the live entries of jobs at or after `cut`, renumbered down by cut. */
static void s_fifo_shift(coord_sched_t *s, s_fifo_t *f, int cut)
{
    size_t o = 0;
    for (size_t i = f->head; i < f->len; i++) {
        s_qentry_t e = f->v[i];
        if (e.job < cut)
            continue;
        const coord_job_t *j = &s->jobs[e.job];
        if (j->state != COORD_JOB_QUEUED || j->qseq_ != e.seq)
            continue;
        f->v[o++] = (s_qentry_t){e.job - cut, e.seq};
    }
    f->head = 0;
    f->len = o;
}

int coord_sched_retire(coord_sched_t *s, int n)
{
    if (n < 0 || n > s->ngroups)
        return SR_EINVAL;
    if (n == 0)
        return SR_OK;
    int cut = n < s->ngroups ? s->groups[n].first_job : s->njobs;
    for (int i = 0; i < cut; i++)
        if (s->jobs[i].state == COORD_JOB_QUEUED || s->jobs[i].state == COORD_JOB_LEASED)
            return SR_ECONFLICT;
    /* the queues first: they read the jobs' states at their old places */
    s_fifo_shift(s, &s->retry, cut);
    s_fifo_shift(s, &s->fresh, cut);
    memmove(s->groups, s->groups + n, (size_t)(s->ngroups - n) * sizeof *s->groups);
    s->ngroups -= n;
    for (int gi = 0; gi < s->ngroups; gi++)
        s->groups[gi].first_job -= cut;
    memmove(s->jobs, s->jobs + cut, (size_t)(s->njobs - cut) * sizeof *s->jobs);
    s->njobs -= cut;
    for (int i = 0; i < s->njobs; i++)
        s->jobs[i].group -= n;
    return SR_OK;
}

/* ---- changes made by the coordinator -------------------------------------------------------- */

void coord_sched_group_set_round(coord_sched_t *s, int gi, int64_t round)
{
    coord_group_t *g = coord_sched_group(s, gi);
    if (g)
        g->round = round;
}

void coord_sched_group_set_cancelled(coord_sched_t *s, int gi)
{
    coord_group_t *g = coord_sched_group(s, gi);
    if (g)
        g->cancelled = true;
}

void coord_sched_group_keep_cancel(coord_sched_t *s, int gi, int64_t step, double d,
                                   const char *reason, int64_t next_ms)
{
    coord_group_t *g = coord_sched_group(s, gi);
    if (!g)
        return;
    g->cancel_step = step;
    g->cancel_d = d;
    snprintf(g->cancel_reason, sizeof g->cancel_reason, "%s", reason ? reason : "");
    g->announces = 0;
    g->next_announce_ms = next_ms;
}

void coord_sched_group_announced(coord_sched_t *s, int gi, int64_t next_ms)
{
    coord_group_t *g = coord_sched_group(s, gi);
    if (!g)
        return;
    g->announces++;
    g->next_announce_ms = next_ms;
}

void coord_sched_group_told(coord_sched_t *s, int gi, uint64_t seq)
{
    coord_group_t *g = coord_sched_group(s, gi);
    if (g)
        g->told_seq = seq;
}

void coord_sched_group_set_confirming(coord_sched_t *s, int gi, void *look_up)
{
    coord_group_t *g = coord_sched_group(s, gi);
    if (g)
        g->confirming = look_up;
}

void coord_sched_job_set_epoch(coord_sched_t *s, int ji, int64_t epoch)
{
    coord_job_t *j = coord_sched_job(s, ji);
    if (j)
        j->epoch = epoch;
}

void coord_sched_job_set_deadline(coord_sched_t *s, int ji, int64_t deadline_ms)
{
    coord_job_t *j = coord_sched_job(s, ji);
    if (j)
        j->deadline_ms = deadline_ms;
}

int coord_sched_job_failed(coord_sched_t *s, int ji)
{
    coord_job_t *j = coord_sched_job(s, ji);
    return j ? ++j->failures : 0;
}

void coord_sched_actor_refund(coord_sched_t *s, coord_actor_t *a)
{
    (void)s;
    if (a)
        a->credit++;
}

void coord_sched_actor_no_credit(coord_sched_t *s, coord_actor_t *a)
{
    (void)s;
    if (a)
        a->credit = 0;
}

void coord_sched_actor_drain(coord_sched_t *s, coord_actor_t *a)
{
    (void)s;
    if (!a)
        return;
    a->draining = true;
    a->credit = 0;
}

void coord_sched_actor_seen(coord_sched_t *s, coord_actor_t *a, int64_t now_ms)
{
    (void)s;
    if (a)
        a->last_seen_ms = now_ms;
}
