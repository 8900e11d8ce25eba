/*
 * test_store_group.c — groups (common/store_group.h) against a real redis-server: creation and
 * reads, the transition table of the group script, a script flush, pipelined finishes, a corrupt
 * hash, and the cancel-versus-finish race across two connections.
 *
 * Each test gets its own throwaway redis-server (setup/teardown) and a store for run "t".
 */
#include "tests/harness.h"
#include "common/sr.h"
#include "common/store.h"
#include "common/store_group.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    harness_redis_t redis;
    store_t *s;
} fixture_t;

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof *f);
    if (!f || harness_redis_start(&f->redis) != 0) {
        free(f);
        return -1;
    }
    char err[256];
    if (store_connect(&f->s, f->redis.url, "t", 2000, err, sizeof err) != SR_OK) {
        fprintf(stderr, "setup: %s\n", err);
        harness_redis_stop(&f->redis);
        free(f);
        return -1;
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    store_destroy(&f->s);
    harness_redis_stop(&f->redis);
    free(f);
    return 0;
}

/* ---- groups --------------------------------------------------------------------------- */

static int collect_gid(const char *gid, void *arg)
{
    char *buf = arg;
    strcat(buf, gid);
    strcat(buf, ";");
    return 0;
}

static void group_is_created_running_and_read_back(void **state)
{
    fixture_t *f = *state;
    store_group_t g;
    assert_int_equal(store_group_create(f->s, "g1", "train/pick_and_place/17", 4, 8), SR_OK);
    assert_int_equal(store_group_get(f->s, "g1", &g), SR_OK);
    assert_string_equal(g.gid, "g1");
    assert_string_equal(g.task, "train/pick_and_place/17");
    assert_int_equal(g.iteration, 4);
    assert_int_equal(g.G, 8);
    assert_int_equal(g.finished, 0);
    assert_int_equal(g.status, STORE_GROUP_RUNNING);
    assert_true(g.created_ms > 1600000000000LL);
    assert_int_equal(g.ended_ms, 0);
    assert_int_equal(g.gate_step, -1);
    assert_true(g.divergence < 0);
    assert_int_equal(g.reward_mask, 0);

    assert_int_equal(store_group_create(f->s, "g1", "other", 4, 8), SR_ECONFLICT);
    assert_int_equal(store_group_get(f->s, "g1", &g), SR_OK);
    assert_string_equal(g.task, "train/pick_and_place/17");

    assert_int_equal(store_group_create(f->s, "g2", "t2", 4, 2), SR_OK);
    char seen[64] = "";
    assert_int_equal(store_groups_of(f->s, 4, collect_gid, seen), SR_OK);
    assert_true(strcmp(seen, "g1;g2;") == 0 || strcmp(seen, "g2;g1;") == 0);
    seen[0] = '\0';
    assert_int_equal(store_groups_of(f->s, 5, collect_gid, seen), SR_OK);
    assert_string_equal(seen, "");

    assert_int_equal(store_group_create(f->s, "g3", "t", 1, 0), SR_EINVAL);
    assert_int_equal(store_group_create(f->s, "g3", "t", 1, STORE_G_MAX + 1), SR_EINVAL);
    assert_int_equal(store_group_create(f->s, "", "t", 1, 2), SR_EINVAL);
    assert_int_equal(store_group_create(f->s, "a b", "t", 1, 2), SR_EINVAL);
    assert_int_equal(store_group_create(f->s, "g3", "", 1, 2), SR_EINVAL);
    assert_int_equal(store_group_get(f->s, "nope", &g), SR_ENOTFOUND);
    assert_non_null(strstr(store_errstr(f->s), "no group nope"));
}

static void last_trajectory_makes_the_group_done(void **state)
{
    fixture_t *f = *state;
    int fin = -1;
    store_group_status_t st = STORE_GROUP_FILTERED;
    assert_int_equal(store_group_create(f->s, "g", "t", 0, 3), SR_OK);
    assert_int_equal(store_group_finish_traj(f->s, "g", 2, 1.0, &fin, &st), SR_OK);
    assert_int_equal(fin, 1);
    assert_int_equal(st, STORE_GROUP_RUNNING);
    assert_int_equal(store_group_finish_traj(f->s, "g", 0, 0.25, &fin, &st), SR_OK);
    assert_int_equal(fin, 2);
    assert_int_equal(st, STORE_GROUP_RUNNING);
    /* The same trajectory again is counted once and keeps its first reward. */
    assert_int_equal(store_group_finish_traj(f->s, "g", 0, 0.75, &fin, &st), SR_OK);
    assert_int_equal(fin, 2);
    assert_int_equal(st, STORE_GROUP_RUNNING);
    assert_int_equal(store_group_finish_traj(f->s, "g", 1, 0.0, &fin, &st), SR_OK);
    assert_int_equal(fin, 3);
    assert_int_equal(st, STORE_GROUP_DONE);

    store_group_t g;
    assert_int_equal(store_group_get(f->s, "g", &g), SR_OK);
    assert_int_equal(g.status, STORE_GROUP_DONE);
    assert_int_equal(g.finished, 3);
    assert_int_equal(g.reward_mask, 7);
    assert_true(g.rewards[0] == 0.25);
    assert_true(g.rewards[1] == 0.0);
    assert_true(g.rewards[2] == 1.0);
    assert_true(g.ended_ms >= g.created_ms);

    assert_int_equal(store_group_finish_traj(f->s, "g", 3, 1.0, NULL, NULL), SR_EINVAL);
    assert_int_equal(store_group_finish_traj(f->s, "g", -1, 1.0, NULL, NULL), SR_EINVAL);
    assert_int_equal(store_group_finish_traj(f->s, "nope", 0, 1.0, NULL, NULL), SR_ENOTFOUND);
}

static void transition_table_allows_and_refuses_exactly_as_documented(void **state)
{
    fixture_t *f = *state;
    store_group_t g;
    int fin = 0;
    store_group_status_t st;

    /* running -> cancelled, with the gate's decision recorded. */
    assert_int_equal(store_group_create(f->s, "c", "t", 0, 2), SR_OK);
    assert_int_equal(store_group_cancel(f->s, "c", 10, 0.0833, "d_10=0.083<0.12"), SR_OK);
    assert_int_equal(store_group_get(f->s, "c", &g), SR_OK);
    assert_int_equal(g.status, STORE_GROUP_CANCELLED);
    assert_int_equal(g.gate_step, 10);
    assert_true(g.divergence == 0.0833);
    assert_string_equal(g.decision, "d_10=0.083<0.12");
    assert_true(g.ended_ms > 0);
    /* cancelled -> cancelled, cancelled -> filtered: refused. */
    assert_int_equal(store_group_cancel(f->s, "c", 11, 0.0, NULL), SR_ECONFLICT);
    assert_non_null(strstr(store_errstr(f->s), "cancelled"));
    assert_int_equal(store_group_filter(f->s, "c"), SR_ECONFLICT);
    /* cancelled -> done never: finishing trajectories are recorded but refused. */
    assert_int_equal(store_group_finish_traj(f->s, "c", 0, 1.0, &fin, &st), SR_ECONFLICT);
    assert_int_equal(st, STORE_GROUP_CANCELLED);
    assert_int_equal(fin, 1);
    assert_int_equal(store_group_finish_traj(f->s, "c", 1, 0.0, &fin, &st), SR_ECONFLICT);
    assert_int_equal(fin, 2);
    assert_int_equal(store_group_get(f->s, "c", &g), SR_OK);
    assert_int_equal(g.status, STORE_GROUP_CANCELLED);
    assert_int_equal(g.finished, 2);
    assert_int_equal(g.reward_mask, 3);
    assert_int_equal(g.gate_step, 10);

    /* running -> filtered: refused (only done groups are filtered). */
    assert_int_equal(store_group_create(f->s, "d", "t", 0, 1), SR_OK);
    assert_int_equal(store_group_filter(f->s, "d"), SR_ECONFLICT);
    /* running -> done; done -> cancelled refused; done -> filtered. */
    assert_int_equal(store_group_finish_traj(f->s, "d", 0, 1.0, &fin, &st), SR_OK);
    assert_int_equal(st, STORE_GROUP_DONE);
    assert_int_equal(store_group_cancel(f->s, "d", 10, 0.0, "late"), SR_ECONFLICT);
    assert_int_equal(store_group_get(f->s, "d", &g), SR_OK);
    assert_int_equal(g.status, STORE_GROUP_DONE);
    assert_string_equal(g.decision, "");
    assert_int_equal(store_group_filter(f->s, "d"), SR_OK);
    assert_int_equal(store_group_get(f->s, "d", &g), SR_OK);
    assert_int_equal(g.status, STORE_GROUP_FILTERED);
    /* filtered -> cancelled, filtered -> filtered: refused; a late duplicate is harmless. */
    assert_int_equal(store_group_cancel(f->s, "d", 10, 0.0, NULL), SR_ECONFLICT);
    assert_int_equal(store_group_filter(f->s, "d"), SR_ECONFLICT);
    assert_int_equal(store_group_finish_traj(f->s, "d", 0, 0.0, &fin, &st), SR_OK);
    assert_int_equal(st, STORE_GROUP_FILTERED);
    assert_int_equal(fin, 1);

    /* Unknown groups. */
    assert_int_equal(store_group_cancel(f->s, "nope", 1, 0.0, NULL), SR_ENOTFOUND);
    assert_int_equal(store_group_filter(f->s, "nope"), SR_ENOTFOUND);
    char longtext[STORE_DECISION_MAX + 10];
    memset(longtext, 'x', sizeof longtext);
    longtext[sizeof longtext - 1] = '\0';
    assert_int_equal(store_group_cancel(f->s, "c", 1, 0.0, longtext), SR_EINVAL);
    assert_string_equal(store_group_status_name(STORE_GROUP_FILTERED), "filtered");
    assert_string_equal(store_group_status_name((store_group_status_t)42), "unknown");
}

static void shadow_decision_is_recorded_without_changing_status(void **state)
{
    fixture_t *f = *state;
    store_group_t g;
    assert_int_equal(store_group_create(f->s, "g", "t", 0, 1), SR_OK);
    assert_int_equal(store_group_decide(f->s, "g", 10, 0.04, "shadow: would cancel"), SR_OK);
    assert_int_equal(store_group_get(f->s, "g", &g), SR_OK);
    assert_int_equal(g.status, STORE_GROUP_RUNNING);
    assert_int_equal(g.gate_step, 10);
    assert_true(g.divergence == 0.04);
    assert_string_equal(g.decision, "shadow: would cancel");
    /* The group still finishes normally, and a decision may be noted on a finished group. */
    assert_int_equal(store_group_finish_traj(f->s, "g", 0, 1.0, NULL, NULL), SR_OK);
    assert_int_equal(store_group_decide(f->s, "g", 20, 0.5, "keep"), SR_OK);
    assert_int_equal(store_group_get(f->s, "g", &g), SR_OK);
    assert_int_equal(g.status, STORE_GROUP_DONE);
    assert_int_equal(g.gate_step, 20);
    assert_string_equal(g.decision, "keep");
    assert_int_equal(store_group_decide(f->s, "nope", 1, 0.0, NULL), SR_ENOTFOUND);
}

static void group_script_survives_a_script_flush(void **state)
{
    fixture_t *f = *state;
    assert_int_equal(store_command(f->s, 0, NULL, "SCRIPT FLUSH"), SR_OK);
    assert_int_equal(store_group_create(f->s, "g", "t", 0, 1), SR_OK);
    assert_int_equal(store_command(f->s, 0, NULL, "SCRIPT FLUSH"), SR_OK);
    assert_int_equal(store_group_finish_traj(f->s, "g", 0, 1.0, NULL, NULL), SR_OK);
    store_group_t g;
    assert_int_equal(store_group_get(f->s, "g", &g), SR_OK);
    assert_int_equal(g.status, STORE_GROUP_DONE);
}

/* s_pipe_finish_reply collects the pipelined finishes' answers (store_group_finish_traj_reply). */
typedef struct {
    store_t *s;
    const char *gid[4];
    int rc[4];
    store_group_status_t st[4];
    bool noscript[4];
} pipe_answers_t;

static int s_pipe_finish_reply(size_t i, const store_reply_t *r, void *arg)
{
    pipe_answers_t *a = arg;
    a->noscript[i] = store_reply_noscript(r);
    a->rc[i] = store_group_finish_traj_reply(a->s, r, a->gid[i], &a->st[i]);
    return 0;
}

/* Pipelined finishes answer as store_group_finish_traj does, in one round trip; a script the
 * server lost shows as NOSCRIPT (the caller runs that finish alone). */
static void pipelined_finishes_answer_like_single_ones(void **state)
{
    fixture_t *f = *state;
    assert_int_equal(store_group_create(f->s, "g", "t", 0, 2), SR_OK);
    assert_int_equal(store_group_create(f->s, "c", "t", 0, 2), SR_OK);
    assert_int_equal(store_group_cancel(f->s, "c", 1, 0.0, "cancel"), SR_OK);
    assert_int_equal(store_group_pipe_prepare(f->s), SR_OK);
    pipe_answers_t a = {.s = f->s, .gid = {"g", "g", "c", "nope"}};
    assert_int_equal(store_group_finish_traj_pipe(f->s, "g", 0, 1.0), SR_OK);
    assert_int_equal(store_group_finish_traj_pipe(f->s, "g", 1, 0.5), SR_OK);
    assert_int_equal(store_group_finish_traj_pipe(f->s, "c", 0, 1.0), SR_OK);
    assert_int_equal(store_group_finish_traj_pipe(f->s, "nope", 0, 1.0), SR_OK);
    assert_int_equal(store_group_finish_traj_pipe(f->s, "g", -1, 1.0), SR_EINVAL); /* not queued */
    assert_int_equal(store_pipe_pending(f->s), 4);
    assert_int_equal(store_pipe_exec(f->s, s_pipe_finish_reply, &a), SR_OK);
    assert_int_equal(a.rc[0], SR_OK);
    assert_int_equal(a.st[0], STORE_GROUP_RUNNING);
    assert_int_equal(a.rc[1], SR_OK);
    assert_int_equal(a.st[1], STORE_GROUP_DONE);
    assert_int_equal(a.rc[2], SR_ECONFLICT);
    assert_int_equal(a.st[2], STORE_GROUP_CANCELLED);
    assert_int_equal(a.rc[3], SR_ENOTFOUND);
    for (int i = 0; i < 4; i++)
        assert_false(a.noscript[i]);
    store_group_t g;
    assert_int_equal(store_group_get(f->s, "g", &g), SR_OK);
    assert_int_equal(g.finished, 2);
    assert_true(g.rewards[1] == 0.5);
    /* the server loses the script: NOSCRIPT, and the single finish still works */
    assert_int_equal(store_command(f->s, 0, NULL, "SCRIPT FLUSH"), SR_OK);
    assert_int_equal(store_group_create(f->s, "h", "t", 0, 1), SR_OK); /* loads it again */
    assert_int_equal(store_command(f->s, 0, NULL, "SCRIPT FLUSH"), SR_OK);
    memset(&a, 0, sizeof a);
    a.s = f->s;
    a.gid[0] = "h";
    assert_int_equal(store_group_finish_traj_pipe(f->s, "h", 0, 1.0), SR_OK);
    assert_int_equal(store_pipe_exec(f->s, s_pipe_finish_reply, &a), SR_OK);
    assert_true(a.noscript[0]);
    assert_int_equal(a.rc[0], SR_EREDIS);
    assert_int_equal(store_group_finish_traj(f->s, "h", 0, 1.0, NULL, NULL), SR_OK);
}

static void corrupt_group_hash_is_an_error_not_a_crash(void **state)
{
    fixture_t *f = *state;
    store_group_t g;
    assert_int_equal(store_group_create(f->s, "g", "t", 0, 2), SR_OK);
    assert_int_equal(store_command(f->s, 0, NULL, "HSET selroll:t:group:g status weird"), SR_OK);
    assert_int_equal(store_group_get(f->s, "g", &g), SR_EPROTO);
    assert_int_equal(store_group_cancel(f->s, "g", 1, 0.1, NULL), SR_EPROTO);
    assert_non_null(strstr(store_errstr(f->s), "unknown status 'weird'"));
    assert_int_equal(store_command(f->s, 0, NULL, "HSET selroll:t:group:g status running r:x 1"),
                     SR_OK);
    assert_int_equal(store_group_get(f->s, "g", &g), SR_EPROTO);
    assert_non_null(strstr(store_errstr(f->s), "r:x"));
}

/* The race: one connection finishes the last trajectory while another cancels. */
typedef struct {
    pthread_barrier_t start, end;
    const char *url;
    char gid[32];
    int rc_finish, rc_cancel;
    store_group_status_t st_finish;
    int rounds;
} race_t;

static void *race_finisher(void *arg)
{
    race_t *r = arg;
    store_t *s = store_new(r->url, "t", 2000);
    for (int i = 0; i < r->rounds; i++) {
        pthread_barrier_wait(&r->start);
        r->rc_finish = s ? store_group_finish_traj(s, r->gid, 1, 1.0, NULL, &r->st_finish) : -100;
        pthread_barrier_wait(&r->end);
    }
    store_destroy(&s);
    return NULL;
}

static void *race_canceller(void *arg)
{
    race_t *r = arg;
    store_t *s = store_new(r->url, "t", 2000);
    for (int i = 0; i < r->rounds; i++) {
        pthread_barrier_wait(&r->start);
        r->rc_cancel = s ? store_group_cancel(s, r->gid, 10, 0.05, "race") : -100;
        pthread_barrier_wait(&r->end);
    }
    store_destroy(&s);
    return NULL;
}

static void cancel_and_last_finish_never_both_win(void **state)
{
    fixture_t *f = *state;
    race_t r = {.url = f->redis.url, .rounds = 500};
    pthread_barrier_init(&r.start, NULL, 3);
    pthread_barrier_init(&r.end, NULL, 3);
    pthread_t a, b;
    assert_int_equal(pthread_create(&a, NULL, race_finisher, &r), 0);
    assert_int_equal(pthread_create(&b, NULL, race_canceller, &r), 0);
    int cancel_won = 0, finish_won = 0, bad = 0;
    for (int i = 0; i < r.rounds; i++) {
        snprintf(r.gid, sizeof r.gid, "race-%d", i);
        int rc = store_group_create(f->s, r.gid, "t", 0, 2);
        if (rc == SR_OK)
            rc = store_group_finish_traj(f->s, r.gid, 0, 0.0, NULL, NULL);
        if (rc != SR_OK)
            bad++;
        pthread_barrier_wait(&r.start);
        pthread_barrier_wait(&r.end);
        store_group_t g;
        if (store_group_get(f->s, r.gid, &g) != SR_OK || g.finished != 2) {
            bad++;
            continue;
        }
        if (r.rc_finish == SR_OK && r.st_finish == STORE_GROUP_DONE &&
            r.rc_cancel == SR_ECONFLICT && g.status == STORE_GROUP_DONE && g.gate_step == -1)
            finish_won++;
        else if (r.rc_cancel == SR_OK && r.rc_finish == SR_ECONFLICT &&
                 r.st_finish == STORE_GROUP_CANCELLED && g.status == STORE_GROUP_CANCELLED &&
                 g.gate_step == 10)
            cancel_won++;
        else
            bad++;
    }
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    pthread_barrier_destroy(&r.start);
    pthread_barrier_destroy(&r.end);
    print_message("race: finish won %d, cancel won %d, inconsistent %d\n", finish_won, cancel_won,
                  bad);
    assert_int_equal(bad, 0);
    assert_int_equal(finish_won + cancel_won, r.rounds);
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_DFL); /* the store must not depend on SIGPIPE being ignored */
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(group_is_created_running_and_read_back),
        T(last_trajectory_makes_the_group_done),
        T(transition_table_allows_and_refuses_exactly_as_documented),
        T(shadow_decision_is_recorded_without_changing_status),
        T(group_script_survives_a_script_flush),
        T(pipelined_finishes_answer_like_single_ones),
        T(corrupt_group_hash_is_an_error_not_a_crash),
        T(cancel_and_last_finish_never_both_win),
    };
#undef T
    return harness_run_("store_group", tests, SR_ARRAY_LEN(tests), argc, argv);
}
