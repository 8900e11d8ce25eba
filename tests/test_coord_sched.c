/*
 * test_coord_sched.c — the coordinator's scheduler as plain data: job ids, credit, spread and
 * pack placement with the spread cap, lease renewal and expiry, fencing by epoch, cancel with
 * keep, round completion, and two rounds at once (one retiring while the next runs). No
 * sockets, no Redis: times are passed in.
 */
#include "tests/harness.h"

#include "common/sr.h"
#include "coordinator/coord_sched.h"
#include "common/store_group.h"

#include <string.h>

static coord_actor_t *s_actor(coord_sched_t *s, const char *id, int slots, int credit)
{
    coord_actor_t *a = coord_sched_actor_hello(s, id, strlen(id), false, slots, 0);
    assert_non_null(a);
    coord_sched_actor_credit(s, a, credit);
    return a;
}

/* s_dispatch leases everything that can be leased; returns how many, epochs from *epoch. */
static int s_dispatch(coord_sched_t *s, int64_t *epoch, int64_t deadline)
{
    int n = 0, j;
    coord_actor_t *a;
    while (coord_sched_pick(s, &j, &a)) {
        assert_int_equal(coord_sched_lease(s, j, a, ++*epoch, deadline), SR_OK);
        n++;
    }
    return n;
}

static void job_ids_are_parsed_strictly(void **state)
{
    (void)state;
    coord_sched_t *s = coord_sched_new(COORD_PLACE_SPREAD);
    assert_int_equal(coord_sched_add_group(s, "r0000-g0000", "household/train/1", 3), 0);
    assert_int_equal(coord_sched_add_group(s, "r0000-g0001", "household/train/2", 3), 1);
    assert_int_equal(coord_sched_add_group(s, "r0000-g0001", "x", 3), SR_ECONFLICT);
    assert_int_equal(coord_sched_add_group(s, "g", "x", STORE_G_MAX + 1), SR_EINVAL);
    assert_int_equal(coord_sched_find_job(s, "r0000-g0001/t2"), 5);
    assert_int_equal(coord_sched_find_job(s, "r0000-g0000/t0"), 0);
    const char *bad[] = {"r0000-g0000/t3", "r0000-g0000/t", "r0000-g0000/t01", "r0000-g0000/x1",
                         "r0000-g0009/t0", "/t0", "r0000-g0000", "r0000-g0000/t-1", "",
                         "r0000-g0000/t99999999999999999999"};
    for (size_t i = 0; i < SR_ARRAY_LEN(bad); i++)
        assert_int_equal(coord_sched_find_job(s, bad[i]), -1);
    assert_int_equal(coord_sched_find_job(s, NULL), -1);
    char id[COORD_JOB_ID_MAX];
    coord_sched_job_id(s, 4, id, sizeof id);
    assert_string_equal(id, "r0000-g0001/t1");
    coord_sched_destroy(&s);
    assert_null(s);
    coord_sched_destroy(&s);
}

static void credit_is_capped_at_slots_and_ignored_for_gates_and_drainers(void **state)
{
    (void)state;
    coord_sched_t *s = coord_sched_new(COORD_PLACE_PACK);
    coord_sched_add_group(s, "g", "t", 8);
    coord_actor_t *a = s_actor(s, "a", 2, 5);
    assert_int_equal(coord_actor_credit(a), 2);
    coord_actor_t *gate = coord_sched_actor_hello(s, "gate", 4, true, 8, 0);
    coord_sched_actor_credit(s, gate, 4);
    assert_int_equal(coord_actor_credit(gate), 0);
    int64_t epoch = 0;
    assert_int_equal(s_dispatch(s, &epoch, 100), 2);
    assert_int_equal(coord_actor_credit(a), 0);
    coord_sched_actor_drain(s, a);
    coord_sched_actor_credit(s, a, 1);
    assert_int_equal(coord_actor_credit(a), 0);
    /* a re-HELLO resets credit and ends draining */
    assert_ptr_equal(coord_sched_actor_hello(s, "a", 1, false, 2, 0), a);
    assert_false(coord_actor_draining(a));
    assert_int_equal(coord_actor_credit(a), 0);
    assert_null(coord_sched_actor_hello(s, "", 0, false, 1, 0));
    coord_sched_destroy(&s);
}

/* The spread cap counts a group's jobs by the identity that ran them: an actor that left and came
 * back under the same identity (a new actor entry) still holds its finished share, and an adopted
 * lease of an identity not connected counts for it once it connects. */
static void spread_cap_counts_jobs_by_identity_across_a_rejoin(void **state)
{
    (void)state;
    coord_sched_t *s = coord_sched_new(COORD_PLACE_SPREAD);
    coord_sched_add_group(s, "g0", "t", 8);
    coord_actor_t *a = s_actor(s, "a", 8, 8);
    int64_t epoch = 0;
    assert_int_equal(s_dispatch(s, &epoch, 100), 4); /* the cap: 4 of 8 */
    for (int j = 0; j < 4; j++)
        assert_int_equal(coord_sched_finish(s, j, "done"), SR_OK);
    coord_sched_actor_remove(s, a);
    a = s_actor(s, "a", 8, 8); /* the same identity, a new entry */
    assert_int_equal(s_dispatch(s, &epoch, 100), 0);
    assert_true(coord_sched_capped(s));
    /* job 4 adopted by "b" before b connects: b's share is 1 once it does */
    assert_int_equal(coord_sched_adopt(s, 4, "b", 1, ++epoch, 100), SR_OK);
    coord_actor_t *b = s_actor(s, "b", 8, 8);
    assert_int_equal(s_dispatch(s, &epoch, 100), 3);
    assert_int_equal(coord_actor_held(b), 3); /* held counts what it was sent */
    assert_int_equal(coord_sched_queued(s), 0);
    coord_sched_destroy(&s);
}

/* A round is done once every job is final or dropped, whichever way it got there. */
static void round_done_counts_final_and_dropped_jobs(void **state)
{
    (void)state;
    coord_sched_t *s = coord_sched_new(COORD_PLACE_PACK);
    coord_sched_add_group(s, "g0", "t", 4);
    coord_sched_add_group(s, "g1", "t", 4);
    coord_sched_group_set_round(s, 0, 3);
    coord_sched_group_set_round(s, 1, 3);
    coord_actor_t *a = s_actor(s, "a", 2, 2);
    (void)a;
    int64_t epoch = 0;
    assert_int_equal(s_dispatch(s, &epoch, 100), 2); /* g0/t0, g0/t1 */
    assert_false(coord_sched_round_done(s, 3));
    assert_int_equal(coord_sched_cancel_group(s, 0, 0), 2); /* g0/t2, t3 dropped */
    assert_int_equal(coord_sched_finish(s, 0, "done"), SR_OK);
    assert_int_equal(coord_sched_finish(s, 1, "cancelled"), SR_OK);
    assert_int_equal(coord_sched_finish(s, 1, "cancelled"), SR_ECONFLICT);
    assert_false(coord_sched_round_done(s, 3)); /* g1 still queued */
    assert_int_equal(coord_sched_cancel_group(s, 1, 0), 4);
    assert_int_equal(coord_sched_cancel_group(s, 1, 0), 0);
    assert_true(coord_sched_round_done(s, 3));
    assert_int_equal(coord_sched_finish(s, 5, "done"), SR_OK); /* dropped, then final */
    assert_true(coord_sched_round_done(s, 3));
    coord_sched_destroy(&s);
}

static void spread_caps_a_group_per_actor_until_relaxed(void **state)
{
    (void)state;
    coord_sched_t *s = coord_sched_new(COORD_PLACE_SPREAD);
    coord_sched_add_group(s, "g0", "t", 4);
    coord_sched_add_group(s, "g1", "t", 4);
    coord_actor_t *a = s_actor(s, "a", 8, 8);
    int64_t epoch = 0;
    /* alone, a gets half of each group, and the cap is reported */
    assert_int_equal(s_dispatch(s, &epoch, 100), 4);
    assert_true(coord_sched_capped(s));
    assert_int_equal(coord_actor_held(a), 4);
    coord_actor_t *b = s_actor(s, "b", 8, 8);
    assert_int_equal(s_dispatch(s, &epoch, 100), 4);
    assert_int_equal(coord_actor_held(b), 4);
    assert_false(coord_sched_capped(s));
    for (int g = 0; g < 2; g++) {
        int on_a = 0;
        for (int t = 0; t < 4; t++)
            on_a += memcmp(coord_job_actor(coord_sched_job(s, g * 4 + t)), "a", 1) == 0;
        assert_int_equal(on_a, 2);
    }
    coord_sched_destroy(&s);

    s = coord_sched_new(COORD_PLACE_SPREAD);
    coord_sched_add_group(s, "g0", "t", 4);
    a = s_actor(s, "a", 8, 8);
    assert_int_equal(s_dispatch(s, &epoch, 100), 2);
    coord_sched_set_strict(s, false);
    assert_int_equal(s_dispatch(s, &epoch, 100), 2);
    assert_false(coord_sched_round_done(s, 0));
    coord_sched_destroy(&s);
}

static void expired_and_released_jobs_come_back_first_with_new_epochs(void **state)
{
    (void)state;
    coord_sched_t *s = coord_sched_new(COORD_PLACE_PACK);
    coord_sched_add_group(s, "g0", "t", 2);
    coord_sched_add_group(s, "g1", "t", 2);
    coord_actor_t *a = s_actor(s, "a", 4, 1);
    int64_t epoch = 0;
    assert_int_equal(s_dispatch(s, &epoch, 100), 1);
    coord_job_t *j0 = coord_sched_job(s, 0);
    assert_int_equal(coord_job_state(j0), COORD_JOB_LEASED);
    assert_int_equal(coord_job_epoch(j0), 1);
    /* renewal: only by the holder, only for the current epoch */
    assert_int_equal(coord_sched_renew(s, 0, 1, "a", 1, 200), SR_OK);
    assert_int_equal(coord_sched_renew(s, 0, 1, "b", 1, 300), SR_ECONFLICT);
    assert_int_equal(coord_sched_renew(s, 0, 2, "a", 1, 300), SR_ECONFLICT);
    assert_int_equal(coord_sched_renew(s, 99, 1, "a", 1, 300), SR_ENOTFOUND);
    assert_int_equal(coord_sched_expire(s, 150), 0);
    assert_int_equal(coord_sched_expire(s, 201), 1);
    assert_int_equal(coord_job_state(j0), COORD_JOB_QUEUED);
    assert_int_equal(coord_actor_held(a), 0);
    /* the re-queued job is leased before the fresh ones, under a new epoch */
    coord_sched_actor_credit(s, a, 1);
    assert_int_equal(s_dispatch(s, &epoch, 500), 1);
    assert_int_equal(coord_job_state(j0), COORD_JOB_LEASED);
    assert_int_equal(coord_job_epoch(j0), 2);
    coord_sched_actor_credit(s, a, 2);
    assert_int_equal(s_dispatch(s, &epoch, 500), 2);
    assert_int_equal(coord_sched_actor_release(s, "a", 1), 3);
    assert_int_equal(coord_sched_queued(s), 4);
    coord_sched_destroy(&s);
}

static void cancel_drops_queued_jobs_but_keeps_the_kept_and_the_running(void **state)
{
    (void)state;
    coord_sched_t *s = coord_sched_new(COORD_PLACE_PACK);
    coord_sched_add_group(s, "g0", "t", 4);
    coord_actor_t *a = s_actor(s, "a", 4, 1);
    int64_t epoch = 0;
    s_dispatch(s, &epoch, 100);
    assert_int_equal(coord_sched_cancel_group(s, 0, 1ull << 3), 2); /* t1, t2 dropped */
    assert_int_equal(coord_sched_cancel_group(s, 7, 0), SR_ENOTFOUND);
    assert_int_equal(coord_job_state(coord_sched_job(s, 1)), COORD_JOB_DROPPED);
    assert_int_equal(coord_job_state(coord_sched_job(s, 3)), COORD_JOB_QUEUED);
    assert_false(coord_sched_round_done(s, 0));
    /* the running one's lease runs out: it started, so it is queued again (not dropped) and
     * runs to its RESULT */
    assert_int_equal(coord_sched_expire(s, 1000), 1);
    assert_int_equal(coord_job_state(coord_sched_job(s, 0)), COORD_JOB_QUEUED);
    coord_sched_actor_credit(s, a, 2);
    assert_int_equal(s_dispatch(s, &epoch, 2000), 2);
    assert_int_equal(coord_sched_finish(s, 3, "cancelled"), SR_OK);
    assert_int_equal(coord_sched_finish(s, 3, "done"), SR_ECONFLICT);
    assert_false(coord_sched_round_done(s, 0)); /* t0 still runs */
    assert_int_equal(coord_sched_finish(s, 0, "cancelled"), SR_OK);
    assert_true(coord_sched_round_done(s, 0));
    coord_sched_destroy(&s);
}

/* A job whose actor left (BYE drain=false) before or after its group was cancelled was running:
 * its trajectory ends in a RESULT, so the group keeps exactly G of them. */
static void a_released_job_of_a_cancelled_group_runs_again(void **state)
{
    (void)state;
    coord_sched_t *s = coord_sched_new(COORD_PLACE_PACK);
    coord_sched_add_group(s, "g0", "t", 4);
    coord_actor_t *a = s_actor(s, "a", 2, 2);
    coord_actor_t *b = s_actor(s, "b", 2, 2);
    int64_t epoch = 0;
    assert_int_equal(s_dispatch(s, &epoch, 100), 4); /* t0, t1 on a; t2, t3 on b */
    /* b leaves with t2, t3 running; then the group is cancelled keeping t0 only */
    assert_int_equal(coord_sched_actor_release(s, "b", 1), 2);
    assert_int_equal(coord_sched_cancel_group(s, 0, 1ull << 0), 0); /* nothing dropped */
    assert_int_equal(coord_job_state(coord_sched_job(s, 2)), COORD_JOB_QUEUED);
    assert_int_equal(coord_job_state(coord_sched_job(s, 3)), COORD_JOB_QUEUED);
    /* a's t1 (not kept) is released after the cancel: queued too */
    assert_int_equal(coord_sched_actor_release(s, "a", 1), 2);
    assert_int_equal(coord_job_state(coord_sched_job(s, 1)), COORD_JOB_QUEUED);
    coord_sched_actor_credit(s, a, 2);
    coord_sched_actor_credit(s, b, 2);
    assert_int_equal(s_dispatch(s, &epoch, 200), 4);
    for (int t = 0; t < 4; t++)
        assert_int_equal(coord_sched_finish(s, t, t == 0 ? "done" : "cancelled"), SR_OK);
    assert_true(coord_sched_round_done(s, 0));
    coord_sched_destroy(&s);
}

/* One function owns a group's cancel state: a cancel learnt from a RESULT before the gate's
 * CANCEL drops nothing (the keep list is not known yet); the CANCEL then narrows it to its keep
 * list; a repeated CANCEL, or a RESULT after it, changes nothing. A job being stored keeps its
 * lease through expiry, release and re-queue. */
static void a_cancel_learnt_before_the_cancel_keeps_the_keep_list(void **state)
{
    (void)state;
    coord_sched_t *s = coord_sched_new(COORD_PLACE_PACK);
    coord_sched_add_group(s, "g0", "t", 6);
    coord_actor_t *a = s_actor(s, "a", 2, 2);
    int64_t epoch = 0;
    assert_int_equal(s_dispatch(s, &epoch, 100), 2); /* t0, t1 leased; t2..t5 queued */
    /* a RESULT says cancelled: the group is, but no queued job goes */
    assert_int_equal(coord_sched_cancel(s, 0, false, 0), 0);
    assert_true(coord_group_cancelled(coord_sched_group(s, 0)));
    assert_false(coord_group_keep_known(coord_sched_group(s, 0)));
    assert_int_equal(coord_sched_queued(s), 4);
    assert_int_equal(coord_sched_cancel(s, 0, false, 0), -1); /* a second RESULT: nothing */
    /* the CANCEL with keep {t3, t4}: t2 and t5 dropped, t3 and t4 stay queued */
    assert_int_equal(coord_sched_cancel(s, 0, true, (1ull << 3) | (1ull << 4)), 2);
    assert_int_equal(coord_job_state(coord_sched_job(s, 2)), COORD_JOB_DROPPED);
    assert_int_equal(coord_job_state(coord_sched_job(s, 3)), COORD_JOB_QUEUED);
    assert_int_equal(coord_job_state(coord_sched_job(s, 4)), COORD_JOB_QUEUED);
    assert_int_equal(coord_job_state(coord_sched_job(s, 5)), COORD_JOB_DROPPED);
    /* final: a repeated CANCEL (even with another list) and a later RESULT change nothing */
    assert_int_equal(coord_sched_cancel(s, 0, true, 0), -1);
    assert_int_equal(coord_sched_cancel(s, 0, false, 0), -1);
    assert_int_equal(coord_sched_queued(s), 2);
    assert_int_equal(coord_sched_cancel(s, 9, true, 0), SR_ENOTFOUND);
    /* the CANCEL first: its keep list at once */
    coord_sched_add_group(s, "g1", "t", 3);
    assert_int_equal(coord_sched_cancel(s, 1, true, 1ull << 1), 2);
    assert_int_equal(coord_sched_cancel(s, 1, false, 0), -1);
    /* t0 is being stored: its lease survives expiry, its actor's release and a re-queue */
    assert_int_equal(coord_sched_store(s, 0), SR_OK);
    assert_int_equal(coord_sched_expire(s, 1000000), 1); /* t1 only */
    assert_int_equal(coord_job_state(coord_sched_job(s, 0)), COORD_JOB_LEASED);
    assert_int_equal(coord_sched_actor_release(s, "a", 1), 0);
    assert_int_equal(coord_sched_requeue(s, 0), SR_ECONFLICT);
    assert_int_equal(coord_sched_finish(s, 0, "cancelled"), SR_OK);
    assert_false(coord_job_storing(coord_sched_job(s, 0)));
    assert_int_equal(coord_sched_store(s, 0), SR_ECONFLICT); /* final: not leased */
    (void)a;
    coord_sched_destroy(&s);
}

static void adopted_lease_counts_for_its_actor_and_epoch(void **state)
{
    (void)state;
    coord_sched_t *s = coord_sched_new(COORD_PLACE_PACK);
    coord_sched_add_group(s, "g0", "t", 2);
    assert_int_equal(coord_sched_adopt(s, 1, "old", 3, 42, 100), SR_OK);
    assert_int_equal(coord_sched_queued(s), 1);
    coord_actor_t *a = s_actor(s, "old", 2, 2);
    int64_t epoch = 100;
    assert_int_equal(s_dispatch(s, &epoch, 100), 1); /* only the other job */
    assert_int_equal(coord_sched_renew(s, 1, 42, "old", 3, 500), SR_OK);
    assert_int_equal(coord_sched_finish(s, 1, "done"), SR_OK);
    assert_int_equal(coord_sched_adopt(s, 1, "old", 3, 43, 100), SR_ECONFLICT);
    (void)a;
    coord_sched_destroy(&s);
}

/* Two rounds in one scheduler: each round's end is told apart, the oldest leaves only once it is
 * over, and what stays (groups, jobs, queue, leases, ids) moves down intact. */
static void an_ended_round_retires_and_the_next_moves_down_intact(void **state)
{
    (void)state;
    coord_sched_t *s = coord_sched_new(COORD_PLACE_PACK);
    coord_actor_t *a = s_actor(s, "a", 8, 3);
    assert_int_equal(coord_sched_add_group(s, "r0000-g0000", "t/0", 2), 0);
    coord_sched_group_set_round(s, 0, 0);
    int64_t epoch = 0;
    assert_int_equal(s_dispatch(s, &epoch, 100), 2);
    assert_true(coord_sched_queue_empty(s));
    assert_int_equal(coord_sched_add_group(s, "r0001-g0000", "t/1", 3), 1);
    coord_sched_group_set_round(s, 1, 1);
    assert_false(coord_sched_queue_empty(s));
    assert_int_equal(s_dispatch(s, &epoch, 100), 1); /* r1 t0 leased, t1 and t2 queued */
    assert_false(coord_sched_round_done(s, 0));
    assert_false(coord_sched_round_done(s, 1));
    assert_true(coord_sched_round_done(s, 7)); /* no group of round 7 */
    assert_int_equal(coord_sched_find_group(s, "r0001-g0000"), 1);
    assert_int_equal(coord_sched_find_group(s, "r0001-g0001"), -1);
    assert_int_equal(coord_sched_find_job(s, "r0001-g0000/t1"), 3);
    assert_int_equal(coord_sched_find_job(s, "r0000-g0000/t1"), 1);
    assert_int_equal(coord_sched_retire(s, 1), SR_ECONFLICT); /* round 0 still runs */
    assert_int_equal(coord_sched_retire(s, 3), SR_EINVAL);
    assert_int_equal(coord_sched_finish(s, 0, "done"), SR_OK);
    assert_int_equal(coord_sched_finish(s, 1, "cancelled"), SR_OK);
    assert_true(coord_sched_round_done(s, 0));
    assert_false(coord_sched_round_done(s, 1));
    int64_t leased_epoch = coord_job_epoch(coord_sched_job(s, 2));
    assert_int_equal(coord_sched_retire(s, 1), SR_OK);
    assert_int_equal(coord_sched_groups(s), 1);
    assert_int_equal(coord_sched_jobs(s), 3);
    assert_string_equal(coord_group_gid(coord_sched_group(s, 0)), "r0001-g0000");
    assert_int_equal(coord_group_first_job(coord_sched_group(s, 0)), 0);
    assert_int_equal(coord_group_round(coord_sched_group(s, 0)), 1);
    assert_int_equal(coord_sched_find_job(s, "r0001-g0000/t2"), 2);
    assert_int_equal(coord_sched_find_job(s, "r0000-g0000/t0"), -1);
    coord_job_t *j = coord_sched_job(s, 0);
    assert_int_equal(coord_job_state(j), COORD_JOB_LEASED);
    assert_int_equal(coord_job_group(j), 0);
    assert_int_equal(coord_job_epoch(j), leased_epoch);
    assert_int_equal(coord_actor_held(a), 1);
    assert_int_equal(coord_sched_queued(s), 2);
    /* the queue moved down too: the two queued jobs come out, in order, and nothing else */
    coord_sched_actor_credit(s, a, 8);
    int ji;
    coord_actor_t *to;
    assert_true(coord_sched_pick(s, &ji, &to));
    assert_int_equal(ji, 1);
    assert_int_equal(s_dispatch(s, &epoch, 100), 2);
    assert_true(coord_sched_queue_empty(s));
    assert_int_equal(coord_sched_requeue(s, 2), SR_OK); /* a re-queue after the move */
    assert_false(coord_sched_queue_empty(s));
    assert_true(coord_sched_pick(s, &ji, &to));
    assert_int_equal(ji, 2);
    assert_int_equal(s_dispatch(s, &epoch, 100), 1);
    for (int k = 0; k < 3; k++)
        assert_int_equal(coord_sched_finish(s, k, "done"), SR_OK);
    assert_true(coord_sched_round_done(s, 1));
    assert_int_equal(coord_actor_held(a), 0);
    assert_int_equal(coord_sched_retire(s, 1), SR_OK);
    assert_int_equal(coord_sched_jobs(s), 0);
    assert_true(coord_sched_queue_empty(s));
    assert_int_equal(coord_sched_retire(s, 0), SR_OK);
    coord_sched_destroy(&s);
}

static void the_coordinators_changes_go_through_operations(void **state)
{
    (void)state;
    coord_sched_t *s = coord_sched_new(COORD_PLACE_PACK);
    int gi = coord_sched_add_group(s, "g", "t", 2);
    coord_actor_t *a = s_actor(s, "a", 2, 5);
    const coord_group_t *g = coord_sched_group(s, gi);
    coord_sched_group_set_round(s, gi, 7);
    assert_int_equal(coord_group_round(g), 7);
    coord_sched_group_keep_cancel(s, gi, 3, 0.25, "converged", 1000);
    coord_sched_group_announced(s, gi, 1200);
    coord_sched_group_announced(s, gi, 1400);
    assert_int_equal(coord_group_cancel_step(g), 3);
    assert_string_equal(coord_group_cancel_reason(g), "converged");
    assert_int_equal(coord_group_announces(g), 2);
    assert_int_equal(coord_group_next_announce_ms(g), 1400);
    coord_sched_group_keep_cancel(s, gi, 4, 0.5, NULL, 2000); /* a new CANCEL: counted afresh */
    assert_int_equal(coord_group_announces(g), 0);
    assert_string_equal(coord_group_cancel_reason(g), "");
    coord_sched_group_told(s, gi, 9);
    assert_int_equal(coord_group_told_seq(g), 9);
    int look_up;
    coord_sched_group_set_confirming(s, gi, &look_up);
    assert_ptr_equal(coord_group_confirming(g), &look_up);
    coord_sched_group_set_confirming(s, gi, NULL);
    assert_null(coord_group_confirming(g));
    coord_sched_group_set_cancelled(s, gi);
    assert_true(coord_group_cancelled(g));
    const coord_job_t *j = coord_sched_job(s, coord_group_first_job(g));
    coord_sched_job_set_epoch(s, coord_group_first_job(g), 42);
    coord_sched_job_set_deadline(s, coord_group_first_job(g), 5000);
    assert_int_equal(coord_job_epoch(j), 42);
    assert_int_equal(coord_job_deadline_ms(j), 5000);
    assert_int_equal(coord_sched_job_failed(s, coord_group_first_job(g)), 1);
    assert_int_equal(coord_sched_job_failed(s, coord_group_first_job(g)), 2);
    assert_int_equal(coord_job_failures(j), 2);
    coord_sched_actor_no_credit(s, a);
    assert_int_equal(coord_actor_credit(a), 0);
    coord_sched_actor_refund(s, a);
    assert_int_equal(coord_actor_credit(a), 1);
    coord_sched_actor_seen(s, a, 777);
    assert_int_equal(coord_actor_last_seen_ms(a), 777);
    coord_sched_actor_drain(s, a);
    assert_true(coord_actor_draining(a));
    assert_int_equal(coord_actor_credit(a), 0);
    /* out of range and NULL: nothing happens */
    coord_sched_group_set_round(s, 5, 1);
    coord_sched_group_announced(s, -1, 1);
    coord_sched_job_set_epoch(s, 99, 1);
    assert_int_equal(coord_sched_job_failed(s, 99), 0);
    coord_sched_actor_refund(s, NULL);
    coord_sched_actor_drain(s, NULL);
    coord_sched_destroy(&s);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(job_ids_are_parsed_strictly),
    cmocka_unit_test(credit_is_capped_at_slots_and_ignored_for_gates_and_drainers),
    cmocka_unit_test(spread_caps_a_group_per_actor_until_relaxed),
    cmocka_unit_test(spread_cap_counts_jobs_by_identity_across_a_rejoin),
    cmocka_unit_test(round_done_counts_final_and_dropped_jobs),
    cmocka_unit_test(expired_and_released_jobs_come_back_first_with_new_epochs),
    cmocka_unit_test(cancel_drops_queued_jobs_but_keeps_the_kept_and_the_running),
    cmocka_unit_test(a_released_job_of_a_cancelled_group_runs_again),
    cmocka_unit_test(a_cancel_learnt_before_the_cancel_keeps_the_keep_list),
    cmocka_unit_test(adopted_lease_counts_for_its_actor_and_epoch),
    cmocka_unit_test(an_ended_round_retires_and_the_next_moves_down_intact),
    cmocka_unit_test(the_coordinators_changes_go_through_operations),
};

HARNESS_MAIN("coord_sched", tests)
