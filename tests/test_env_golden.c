/*
 * test_env_golden.c — what an env worker answers, pinned to the byte: a fixed script of RESETs,
 * STEPs (admissible commands picked by a seeded generator, and commands that are not admissible),
 * STEPs after an episode's end, RESETs in the middle of an episode, CLOSEs and bad task ids, played
 * by two clients over eight sessions through a real worker (envw_call, the path of the actor's
 * --local-env-workers), every reply's bytes hashed. The hashes were taken from the worker before
 * any of the step path's work on it; a change that alters one byte of one observation, admissible
 * list, reward, end or error text fails here.
 *
 * SELROLL_PRINT_HASHES=1 prints the current figures instead of comparing (for a deliberate change
 * of what the household says, together with tests/golden/ and test_household's pinned hashes).
 */
#include "tests/harness.h"

#include "common/proto.h"
#include "common/sr.h"
#include "common/sr_buf.h"
#include "env_worker/envw.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_CLIENTS 2
#define S_NAMES 4
#define S_SESSIONS (S_CLIENTS * S_NAMES)

typedef struct {
    uint64_t hash;
    long replies;
    long bytes;
    long obs;
    long errors;
    /* the last reply, decoded */
    proto_msg_t last;
    bool have_last;
} s_tally_t;

static uint64_t s_fnv_bytes(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ULL;
    return h;
}

static uint64_t s_rand(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static void s_take(void *arg, const void *body, size_t len)
{
    s_tally_t *t = arg;
    uint64_t n = len;
    t->hash = s_fnv_bytes(t->hash, &n, sizeof n);
    t->hash = s_fnv_bytes(t->hash, body, len);
    t->replies++;
    t->bytes += (long)len;
    if (t->have_last)
        proto_msg_clear(&t->last);
    proto_err_t perr;
    assert_int_equal(proto_decode(body, len, &t->last, &perr), SR_OK);
    t->have_last = true;
    if (t->last.type == PROTO_OBS)
        t->obs++;
    else
        t->errors++;
}

static void s_call(envw_t *w, int client, const proto_msg_t *m, s_tally_t *t, sr_buf_t *b)
{
    static const char *const who[S_CLIENTS] = {"actor-a", "actor-b"};
    sr_buf_reset(b);
    assert_int_equal(proto_encode(m, b), SR_OK);
    long before = t->replies;
    assert_int_equal(envw_call(w, who[client], strlen(who[client]), b->data, b->len, s_take, t), SR_OK);
    assert_int_equal(t->replies, before + 1);
}

/* One session of the script: its client and name, and what it plays. */
typedef struct {
    int client;
    char name[16];
    bool live;  /* reset and not ended */
    bool ended; /* the episode ended: the next move is a STEP (refused) or a RESET */
    char admissible[64][96];
    int n_admissible;
} s_sess_t;

static void s_keep_admissible(s_sess_t *s, const proto_obs_t *o)
{
    s->n_admissible = 0;
    for (size_t i = 0; i < o->admissible_len && i < 64; i++) {
        snprintf(s->admissible[i], sizeof s->admissible[i], "%s", o->admissible[i]);
        s->n_admissible++;
    }
}

static const char *const s_splits[] = {"train", "valid_seen", "valid_unseen"};

/* s_play runs the script for `episodes` RESETs on a worker of capacity `capacity` and tallies the
 * replies; each task is reset `repeat` times in a row (on different sessions, as a group of
 * trajectories of one task is played). */
static void s_play(int episodes, int capacity, int repeat, uint64_t seed, s_tally_t *t)
{
    envw_cfg_t c;
    envw_cfg_init(&c);
    c.bind = "inproc://test-env-golden";
    c.capacity = capacity;
    char err[256] = "";
    envw_t *w = envw_new(&c, err, sizeof err);
    if (!w)
        fail_msg("envw_new: %s", err);
    memset(t, 0, sizeof *t);
    t->hash = 0xcbf29ce484222325ULL;
    sr_buf_t b;
    sr_buf_init(&b);
    s_sess_t sess[S_SESSIONS];
    memset(sess, 0, sizeof sess);
    for (int i = 0; i < S_SESSIONS; i++) {
        sess[i].client = i % S_CLIENTS;
        snprintf(sess[i].name, sizeof sess[i].name, "s%d", i / S_CLIENTS);
    }
    uint64_t rng = seed, rid = 1;
    int resets = 0;
    char task[64], action[128];
    while (resets < episodes) {
        for (int i = 0; i < S_SESSIONS && resets < episodes; i++) {
            s_sess_t *s = &sess[i];
            uint64_t r = s_rand(&rng);
            proto_msg_t m;
            bool reset = !s->live && (!s->ended || r % 2 == 0);
            if (s->live && r % 97 == 0)
                reset = true; /* a RESET in the middle of an episode */
            if (s->live && r % 89 == 1) {
                proto_msg_init(&m, PROTO_CLOSE);
                m.u.close.rid = rid++;
                m.u.close.session = s->name;
                s_call(w, s->client, &m, t, &b);
                s->live = s->ended = false;
                continue;
            }
            if (reset) {
                uint32_t k = (uint32_t)(resets / repeat);
                if (k % 31 == 30)
                    snprintf(task, sizeof task, "household/bogus/%u", k); /* refused */
                else if (k % 37 == 36)
                    snprintf(task, sizeof task, "household/train/4294967295");
                else
                    snprintf(task, sizeof task, "household/%s/%u", s_splits[k % 3],
                             (k * 7919u + 13u) % 100000u);
                static const uint32_t max_steps[] = {50, 200, 9, 120, 30};
                proto_msg_init(&m, PROTO_RESET);
                m.u.reset.rid = rid++;
                m.u.reset.session = s->name;
                m.u.reset.task = task;
                m.u.reset.max_steps = max_steps[(repeat == 1 ? k : (uint32_t)resets) % 5];
                m.u.reset.has_seed = k % 4 == 0;
                m.u.reset.seed = k;
                s_call(w, s->client, &m, t, &b);
                resets++;
                if (t->last.type == PROTO_OBS) {
                    s->live = !t->last.u.obs.done;
                    s->ended = t->last.u.obs.done;
                    s_keep_admissible(s, &t->last.u.obs);
                } else {
                    /* A refused RESET of a live session leaves the old episode as it was. */
                }
                continue;
            }
            if (!s->live && !s->ended)
                continue;
            /* A STEP: mostly an admissible command, sometimes one that is not. */
            if (s->ended || s->n_admissible == 0)
                snprintf(action, sizeof action, "look");
            else if (r % 23 == 0)
                snprintf(action, sizeof action, "dance with the fridge");
            else if (r % 23 == 1)
                snprintf(action, sizeof action, "%s ", s->admissible[0]);
            else
                snprintf(action, sizeof action, "%s", s->admissible[(r >> 8) % (uint64_t)s->n_admissible]);
            proto_msg_init(&m, PROTO_STEP);
            m.u.step.rid = rid++;
            m.u.step.session = s->name;
            m.u.step.action = action;
            s_call(w, s->client, &m, t, &b);
            if (t->last.type == PROTO_OBS) {
                s->ended = t->last.u.obs.done;
                s->live = !s->ended;
                s_keep_admissible(s, &t->last.u.obs);
            } else {
                s->live = false;
                s->ended = !strcmp(t->last.u.error.code, "episode_done");
            }
        }
    }
    if (t->have_last)
        proto_msg_clear(&t->last);
    t->have_last = false;
    sr_buf_free(&b);
    envw_destroy(&w);
}

static void s_check(const char *what, const s_tally_t *t, uint64_t hash, long replies, long bytes,
                    long obs)
{
    if (getenv("SELROLL_PRINT_HASHES")) {
        printf("%s: {0x%016llxULL, %ld, %ld, %ld}\n", what, (unsigned long long)t->hash, t->replies,
               t->bytes, t->obs);
        return;
    }
    if (t->hash != hash || t->replies != replies || t->bytes != bytes || t->obs != obs)
        fail_msg("%s: hash 0x%016llx, %ld replies, %ld bytes, %ld OBS; pinned 0x%016llx, %ld, %ld, %ld",
                 what, (unsigned long long)t->hash, t->replies, t->bytes, t->obs,
                 (unsigned long long)hash, replies, bytes, obs);
}

/* 600 episodes on a worker with room for every session: texts, lists, rewards, ends, errors. */
static void test_replies_match_the_pinned_hash(void **state)
{
    (void)state;
    s_tally_t t;
    s_play(600, 64, 1, 2026, &t);
    assert_true(t.errors > 0 && t.obs > 10000);
    s_check("capacity 64", &t, 0x61ebb6441b3775deULL, 18909, 10270839, 18673);
}

/* The same with a capacity of 5 sessions: RESETs refused for capacity and sessions given up to
 * the fair share, so sessions (and their environments) come and go. */
static void test_replies_at_capacity_match_the_pinned_hash(void **state)
{
    (void)state;
    s_tally_t t;
    s_play(400, 5, 1, 7, &t);
    assert_true(t.errors > 100 && t.obs > 500);
    s_check("capacity 5", &t, 0x36bdf7f466c93abeULL, 1010, 353764, 632);
}

/* Each task reset eight times in a row on eight sessions, episodes of one task overlapping. */
static void test_replies_of_repeated_tasks_match_the_pinned_hash(void **state)
{
    (void)state;
    s_tally_t t;
    s_play(640, 64, 8, 41, &t);
    assert_true(t.errors > 0 && t.obs > 10000);
    s_check("groups of 8", &t, 0x69fe9dc74c4cf242ULL, 19735, 10442640, 19489);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replies_match_the_pinned_hash),
        cmocka_unit_test(test_replies_at_capacity_match_the_pinned_hash),
        cmocka_unit_test(test_replies_of_repeated_tasks_match_the_pinned_hash),
    };
    return harness_run_("env_golden", tests, SR_ARRAY_LEN(tests), argc, argv);
}
