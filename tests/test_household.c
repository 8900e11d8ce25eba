/*
 * test_household.c — the household environment: texts to the character, admissible lists, goal
 * tests, step limits, bad input, determinism and the split / floor-plan scheme.
 */
#include "tests/harness.h"
#include "bench/bench_env_local.h"
#include "common/sr.h"
#include "env_worker/env.h"
#include "env_worker/household/expert.h"
#include "env_worker/household/household.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static bool s_valgrind(void)
{
    const char *v = getenv("SELROLL_VALGRIND");
    return v && !strcmp(v, "1");
}

static household_t *s_new(const char *id)
{
    char err[256] = "";
    household_t *h = household_new(id, 0, err, sizeof err);
    if (!h)
        fail_msg("household_new(%s): %s", id, err);
    return h;
}

static bool s_has(const env_obs_t *obs, const char *cmd)
{
    for (size_t i = 0; i < obs->n_admissible; i++)
        if (!strcmp(obs->admissible[i], cmd))
            return true;
    return false;
}

/* s_find_prefix returns the first admissible command starting with prefix, or NULL. */
static const char *s_find_prefix(const env_obs_t *obs, const char *prefix)
{
    for (size_t i = 0; i < obs->n_admissible; i++)
        if (!strncmp(obs->admissible[i], prefix, strlen(prefix)))
            return obs->admissible[i];
    return NULL;
}

static void s_step(household_t *h, const char *action, env_obs_t *obs)
{
    char copy[256]; /* the action may point into the old observation */
    size_t n = strlen(action);
    assert_true(n < sizeof copy);
    memcpy(copy, action, n + 1);
    assert_int_equal(household_step(h, copy, obs), SR_OK);
}

static uint64_t s_fnv(const char *s, uint64_t hash)
{
    for (; *s; s++)
        hash = (hash ^ (uint8_t)*s) * 0x100000001b3ULL;
    return hash;
}

static uint64_t s_rand(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* s_check_list checks "a X, a Y, and a Z." / "a X." / "nothing." starting at p. */
static void s_check_list(const char *p)
{
    if (!strcmp(p, "nothing."))
        return;
    size_t n = strlen(p);
    assert_true(n > 3 && p[n - 1] == '.');
    int items = 0;
    bool last_seen = false;
    while (*p && *p != '.') {
        assert_false(last_seen);
        if (!strncmp(p, "and ", 4)) {
            assert_true(items >= 1);
            last_seen = true;
            p += 4;
        }
        assert_true(!strncmp(p, "a ", 2));
        p += 2;
        const char *end = strpbrk(p, ",.");
        assert_non_null(end);
        const char *sp = memchr(p, ' ', (size_t)(end - p));
        assert_non_null(sp); /* "type N" */
        assert_true(sp[1] >= '1' && sp[1] <= '9');
        items++;
        p = end;
        if (*p == ',') {
            assert_true(p[1] == ' ');
            p += 2;
        }
    }
    assert_true(items == 1 || last_seen);
    assert_string_equal(p, ".");
}

/* s_check_desc checks a receptacle description of recep R. */
static void s_check_desc(const char *t, const char *r)
{
    char a[128], b[128], c[128];
    snprintf(a, sizeof a, "The %s is closed.", r);
    snprintf(b, sizeof b, "The %s is open. In it, you see ", r);
    snprintf(c, sizeof c, "On the %s, you see ", r);
    if (!strcmp(t, a))
        return;
    if (!strncmp(t, b, strlen(b)))
        s_check_list(t + strlen(b));
    else if (!strncmp(t, c, strlen(c)))
        s_check_list(t + strlen(c));
    else
        fail_msg("bad description of %s: %s", r, t);
}

/* s_check_text checks that the observation text is the right form for the admissible action. */
static void s_check_text(const char *action, const char *t, const char *room_sentence, const char *held)
{
    char x[128], want[512];
    if (!strcmp(action, "help")) {
        assert_true(!strncmp(t, "Available commands:\n", 20));
    } else if (!strcmp(action, "inventory")) {
        if (held) {
            snprintf(want, sizeof want, "You are carrying: a %s.", held);
            assert_string_equal(t, want);
        } else {
            assert_string_equal(t, "You are not carrying anything.");
        }
    } else if (!strcmp(action, "look")) {
        if (strcmp(t, room_sentence)) {
            assert_true(!strncmp(t, "You are facing the ", 19));
            assert_non_null(strstr(t, ". Next to it, you see nothing."));
        }
    } else if (sscanf(action, "go to %127[^\n]", x) == 1) {
        snprintf(want, sizeof want, "You arrive at %s. ", x);
        assert_true(!strncmp(t, want, strlen(want)));
        s_check_desc(t + strlen(want), x);
    } else if (sscanf(action, "open %127[^\n]", x) == 1) {
        snprintf(want, sizeof want, "You open the %s. The %s is open. In it, you see ", x, x);
        assert_true(!strncmp(t, want, strlen(want)));
        s_check_list(t + strlen(want));
    } else if (sscanf(action, "close %127[^\n]", x) == 1) {
        snprintf(want, sizeof want, "You close the %s.", x);
        assert_string_equal(t, want);
    } else if (!strncmp(action, "take ", 5)) {
        const char *from = strstr(action, " from ");
        assert_non_null(from);
        snprintf(want, sizeof want, "You pick up the %.*s from the %s.", (int)(from - action - 5), action + 5,
                 from + 6);
        assert_string_equal(t, want);
    } else if (!strncmp(action, "move ", 5)) {
        const char *to = strstr(action, " to ");
        snprintf(want, sizeof want, "You move the %.*s to the %s.", (int)(to - action - 5), action + 5, to + 4);
        assert_string_equal(t, want);
    } else if (!strncmp(action, "heat ", 5) || !strncmp(action, "cool ", 5) || !strncmp(action, "clean ", 6)) {
        const char *sp = strchr(action, ' ');
        const char *with = strstr(action, " with ");
        snprintf(want, sizeof want, "You %.*s the %.*s using the %s.", (int)(sp - action), action,
                 (int)(with - sp - 1), sp + 1, with + 6);
        assert_string_equal(t, want);
    } else if (sscanf(action, "use %127[^\n]", x) == 1) {
        snprintf(want, sizeof want, "You turn on the %s.", x);
        assert_string_equal(t, want);
    } else if (sscanf(action, "examine %127[^\n]", x) == 1) {
        if (held && !strcmp(x, held)) {
            char a[160], b[160], c[160], d[160], e[160], f[160];
            snprintf(a, sizeof a, "There's nothing special about %s.", x);
            snprintf(b, sizeof b, "This is a hot %s.", x);
            snprintf(c, sizeof c, "This is a cold %s.", x);
            snprintf(d, sizeof d, "This is a clean %s.", x);
            snprintf(e, sizeof e, "This is a hot and clean %s.", x);
            snprintf(f, sizeof f, "This is a cool and clean %s.", x);
            assert_true(!strcmp(t, a) || !strcmp(t, b) || !strcmp(t, c) || !strcmp(t, d) || !strcmp(t, e) ||
                        !strcmp(t, f));
        } else {
            s_check_desc(t, x);
        }
    } else {
        fail_msg("unexpected admissible command: %s", action);
    }
}

static void s_room_sentence(const char *opening, char *out, size_t len)
{
    const char *p = strstr(opening, "You are in the middle of a room.");
    assert_non_null(p);
    const char *end = strstr(p, "\n\n");
    assert_non_null(end);
    snprintf(out, len, "%.*s", (int)(end - p), p);
}

/* ---- the opening ---- */

static void opening_welcomes_lists_receptacles_and_states_the_task(void **state)
{
    (void)state;
    for (int i = 0; i < 200; i++) {
        char id[64];
        snprintf(id, sizeof id, "household/train/%d", i);
        household_t *h = s_new(id);
        env_obs_t obs;
        assert_int_equal(household_reset(h, &obs), SR_OK);
        const char *head = "-= Welcome to TextWorld, ALFRED! =-\n\n"
                           "You are in the middle of a room. Looking quickly around you, you see a ";
        assert_true(!strncmp(obs.text, head, strlen(head)));
        char tail[256];
        snprintf(tail, sizeof tail, ".\n\nYour task is to: %s", obs.goal);
        assert_string_equal(obs.text + strlen(obs.text) - strlen(tail), tail);
        assert_string_equal(household_goal(h), obs.goal);
        assert_int_equal(obs.steps, 0);
        assert_false(obs.done);
        assert_int_equal(obs.max_steps, 50);
        /* Receptacle types alphabetical, numbers counting down within a type, ", and " last. */
        char room[2048];
        s_room_sentence(obs.text, room, sizeof room);
        s_check_list(room + strlen("You are in the middle of a room. Looking quickly around you, you see "));
        const char *p = room + strlen("You are in the middle of a room. Looking quickly around you, you see ");
        char prev_type[32] = "";
        int prev_num = 0;
        while (*p && *p != '.') {
            char type[32];
            int num;
            if (!strncmp(p, "and ", 4))
                p += 4;
            assert_int_equal(sscanf(p, "a %31s %d", type, &num), 2);
            int c = strcmp(prev_type, type);
            if (c > 0)
                fail_msg("%s: '%s' listed after '%s'", id, type, prev_type);
            if (c < 0 && prev_type[0])
                assert_int_equal(prev_num, 1);
            if (c == 0)
                assert_int_equal(num, prev_num - 1);
            snprintf(prev_type, sizeof prev_type, "%s", type);
            prev_num = num;
            p = strpbrk(p, ",.");
            if (*p == ',')
                p += 2;
        }
        assert_int_equal(prev_num, 1);
        household_destroy(&h);
    }
}

static void goals_use_the_two_templates_of_each_type_and_room_rules(void **state)
{
    (void)state;
    static const char *const forms[HOUSEHOLD_TASK_COUNT][2] = {
        {"put a %31s in %31[^.].", "put some %31s on %31[^.]."},
        {"look at %31s under the %31[^.].", "examine the %31s with the %31[^.]."},
        {"put a clean %31s in %31[^.].", "clean some %31s and put it in %31[^.]."},
        {"put a hot %31s in %31[^.].", "heat some %31s and put it in %31[^.]."},
        {"put a cool %31s in %31[^.].", "cool some %31s and put it in %31[^.]."},
        {"put two %31s in %31[^.].", "find two %31s and put them in %31[^.]."},
    };
    int seen[HOUSEHOLD_TASK_COUNT][2] = {{0}};
    int n = s_valgrind() ? 300 : 3000;
    for (int i = 0; i < n; i++) {
        char id[64];
        snprintf(id, sizeof id, "household/%s/%d", i % 3 == 0 ? "train" : i % 3 == 1 ? "valid_seen" : "valid_unseen",
                 i);
        household_t *h = s_new(id);
        household_task_t t = household_task_type(h);
        const char *room = household_room_name(h);
        const char *goal = household_goal(h);
        int form = -1;
        for (int f = 0; f < 2; f++) {
            char a[32], b[32];
            /* Rebuild the sentence from the parsed words to be sure the whole of it matched. */
            if (sscanf(goal, forms[t][f], a, b) == 2) {
                char again[128];
                char fmt[64];
                snprintf(fmt, sizeof fmt, "%s", forms[t][f]);
                char *q;
                while ((q = strstr(fmt, "%31[^.]")))
                    memmove(q + 2, q + 7, strlen(q + 7) + 1), q[1] = 's';
                while ((q = strstr(fmt, "%31s")))
                    memmove(q + 1, q + 3, strlen(q + 3) + 1);
                snprintf(again, sizeof again, fmt, a, b);
                if (!strcmp(again, goal))
                    form = f;
            }
        }
        if (form < 0)
            fail_msg("%s: goal '%s' matches no template of %s", id, goal, household_task_name(t));
        seen[t][form]++;
        if (t == HOUSEHOLD_LOOK)
            assert_true(!strcmp(room, "livingroom") || !strcmp(room, "bedroom"));
        if (t == HOUSEHOLD_CLEAN)
            assert_true(!strcmp(room, "kitchen") || !strcmp(room, "bathroom"));
        if (t == HOUSEHOLD_HEAT || t == HOUSEHOLD_COOL)
            assert_string_equal(room, "kitchen");
        household_destroy(&h);
    }
    for (int t = 0; t < HOUSEHOLD_TASK_COUNT; t++)
        for (int f = 0; f < 2; f++)
            if (!seen[t][f])
                fail_msg("template %d of %s never generated", f, household_task_name(t));
    assert_string_equal(household_task_name(HOUSEHOLD_TWO), "pick_two_obj_and_place");
    assert_string_equal(household_task_name(HOUSEHOLD_TASK_COUNT), "unknown");
}

/* ---- every admissible command does what its text says ---- */

static void random_walks_admissible_lists_sorted_and_every_command_answers(void **state)
{
    (void)state;
    uint64_t rng = 42;
    int tasks = s_valgrind() ? 40 : 400;
    int seen_forms[8] = {0};
    for (int i = 0; i < tasks; i++) {
        char id[64];
        snprintf(id, sizeof id, "household/train/%d", i * 7);
        char err[128];
        household_t *h = household_new(id, 200, err, sizeof err);
        assert_non_null(h);
        env_obs_t obs;
        household_reset(h, &obs);
        char room[2048];
        s_room_sentence(obs.text, room, sizeof room);
        char held[64] = "";
        while (!obs.done) {
            /* Sorted by strcmp and free of duplicates; fixed things never offered to take; one
             * object at a time; help, inventory and look always there. */
            for (size_t k = 1; k < obs.n_admissible; k++)
                assert_true(strcmp(obs.admissible[k - 1], obs.admissible[k]) < 0);
            for (size_t k = 0; k < obs.n_admissible; k++)
                assert_int_equal(obs.admissible_lens[k], strlen(obs.admissible[k]));
            assert_true(s_has(&obs, "help") && s_has(&obs, "inventory") && s_has(&obs, "look"));
            for (size_t k = 0; k < obs.n_admissible; k++) {
                const char *a = obs.admissible[k];
                assert_null(strstr(a, "take desklamp"));
                assert_null(strstr(a, "take floorlamp"));
                assert_null(strstr(a, "take houseplant"));
                if (held[0])
                    assert_true(strncmp(a, "take ", 5) != 0);
            }
            char action[256];
            snprintf(action, sizeof action, "%s", obs.admissible[s_rand(&rng) % obs.n_admissible]);
            s_step(h, action, &obs);
            assert_string_not_equal(obs.text, "Nothing happens.");
            s_check_text(action, obs.text, room, held[0] ? held : NULL);
            if (!strncmp(action, "take ", 5)) {
                snprintf(held, sizeof held, "%.*s", (int)(strstr(action, " from ") - action - 5), action + 5);
                seen_forms[0]++;
            } else if (!strncmp(action, "move ", 5)) {
                held[0] = '\0';
                seen_forms[1]++;
            } else if (!strncmp(action, "open ", 5)) {
                seen_forms[2]++;
            } else if (!strncmp(action, "close ", 6)) {
                seen_forms[3]++;
            } else if (!strncmp(action, "use ", 4)) {
                seen_forms[4]++;
            } else if (!strncmp(action, "heat ", 5) || !strncmp(action, "cool ", 5) ||
                       !strncmp(action, "clean ", 6)) {
                seen_forms[5]++;
            } else if (!strncmp(action, "examine ", 8)) {
                seen_forms[6]++;
            } else if (!strcmp(action, "look")) {
                seen_forms[7]++;
            }
        }
        household_destroy(&h);
    }
    for (int f = 0; f < 8; f++)
        if (!seen_forms[f])
            fail_msg("command form %d never exercised by the walks", f);
}

/* s_fetch walks task h until it holds an object whose name starts with one of the types, taking
 * the first one it sees. Returns the object's name in out. */
static bool s_fetch(household_t *h, env_obs_t *obs, const char *const *types, char *out, size_t len)
{
    household_reset(h, obs);
    char gotos[64][64];
    int n = 0;
    for (size_t i = 0; i < obs->n_admissible && n < 64; i++)
        if (!strncmp(obs->admissible[i], "go to ", 6))
            snprintf(gotos[n++], sizeof gotos[0], "%s", obs->admissible[i]);
    for (int g = 0; g < n; g++) {
        s_step(h, gotos[g], obs);
        const char *open = s_find_prefix(obs, "open ");
        if (open)
            s_step(h, open, obs);
        for (const char *const *t = types; *t; t++) {
            char prefix[64];
            snprintf(prefix, sizeof prefix, "take %s ", *t);
            const char *take = s_find_prefix(obs, prefix);
            if (take) {
                snprintf(out, len, "%.*s", (int)(strstr(take, " from ") - take - 5), take + 5);
                s_step(h, take, obs);
                return true;
            }
        }
    }
    return false;
}

/* s_go_to goes to receptacle r unless the agent already stands there. */
static void s_go_to(household_t *h, env_obs_t *obs, const char *r)
{
    char cmd[80];
    snprintf(cmd, sizeof cmd, "go to %s", r);
    if (s_has(obs, cmd))
        s_step(h, cmd, obs);
    else
        assert_non_null(s_find_prefix(obs, "examine ")); /* standing at r */
}

static void examine_texts_follow_heat_cool_clean_state(void **state)
{
    (void)state;
    static const char *const food[] = {"apple", "egg", "potato", "tomato", NULL};
    /* Find a kitchen task (heat tasks are kitchen only) that has one of these foods. */
    household_t *h = NULL;
    env_obs_t obs;
    char name[64] = "";
    for (int i = 0; i < 400 && !h; i++) {
        char id[64];
        snprintf(id, sizeof id, "household/train/%d", i);
        h = s_new(id);
        if (household_task_type(h) != HOUSEHOLD_HEAT || !s_fetch(h, &obs, food, name, sizeof name))
            household_destroy(&h);
    }
    assert_non_null(h);
    char cmd[128], want[128];
    snprintf(cmd, sizeof cmd, "examine %s", name);
    s_step(h, cmd, &obs);
    snprintf(want, sizeof want, "There's nothing special about %s.", name);
    assert_string_equal(obs.text, want);

    s_step(h, "inventory", &obs);
    snprintf(want, sizeof want, "You are carrying: a %s.", name);
    assert_string_equal(obs.text, want);

    s_go_to(h, &obs, "microwave 1");
    snprintf(cmd, sizeof cmd, "heat %s with microwave 1", name);
    assert_true(s_has(&obs, cmd)); /* the microwave need not be open */
    s_step(h, cmd, &obs);
    snprintf(want, sizeof want, "You heat the %s using the microwave 1.", name);
    assert_string_equal(obs.text, want);
    snprintf(cmd, sizeof cmd, "examine %s", name);
    s_step(h, cmd, &obs);
    snprintf(want, sizeof want, "This is a hot %s.", name);
    assert_string_equal(obs.text, want);

    s_go_to(h, &obs, "fridge 1");
    snprintf(cmd, sizeof cmd, "cool %s with fridge 1", name);
    s_step(h, cmd, &obs);
    snprintf(want, sizeof want, "You cool the %s using the fridge 1.", name);
    assert_string_equal(obs.text, want);
    snprintf(cmd, sizeof cmd, "examine %s", name);
    s_step(h, cmd, &obs);
    snprintf(want, sizeof want, "This is a cold %s.", name); /* cooling cleared hot */
    assert_string_equal(obs.text, want);

    s_go_to(h, &obs, "sinkbasin 1");
    snprintf(cmd, sizeof cmd, "clean %s with sinkbasin 1", name);
    s_step(h, cmd, &obs);
    snprintf(want, sizeof want, "You clean the %s using the sinkbasin 1.", name);
    assert_string_equal(obs.text, want);
    snprintf(cmd, sizeof cmd, "examine %s", name);
    s_step(h, cmd, &obs);
    snprintf(want, sizeof want, "This is a cool and clean %s.", name);
    assert_string_equal(obs.text, want);

    s_go_to(h, &obs, "microwave 1");
    snprintf(cmd, sizeof cmd, "heat %s with microwave 1", name);
    s_step(h, cmd, &obs);
    snprintf(cmd, sizeof cmd, "examine %s", name);
    s_step(h, cmd, &obs);
    snprintf(want, sizeof want, "This is a hot and clean %s.", name); /* heating cleared cool, kept clean */
    assert_string_equal(obs.text, want);

    /* Clean alone, on a fresh episode: reset forgets every change. */
    assert_true(s_fetch(h, &obs, food, name, sizeof name));
    s_go_to(h, &obs, "sinkbasin 1");
    snprintf(cmd, sizeof cmd, "clean %s with sinkbasin 1", name);
    s_step(h, cmd, &obs);
    snprintf(want, sizeof want, "You clean the %s using the sinkbasin 1.", name);
    assert_string_equal(obs.text, want);
    snprintf(cmd, sizeof cmd, "examine %s", name);
    s_step(h, cmd, &obs);
    snprintf(want, sizeof want, "This is a clean %s.", name);
    assert_string_equal(obs.text, want);

    /* Moving it out of the hands: inventory empty, take it back is offered where it lies. */
    const char *move = s_find_prefix(&obs, "move ");
    assert_non_null(move);
    s_step(h, move, &obs);
    s_step(h, "inventory", &obs);
    assert_string_equal(obs.text, "You are not carrying anything.");
    household_destroy(&h);
}

static void lists_read_nothing_one_and_two_items_as_alfworld(void **state)
{
    (void)state;
    bool empty = false, one = false, two = false, three = false;
    for (int i = 0; i < 100 && !(empty && one && two && three); i++) {
        char id[64];
        snprintf(id, sizeof id, "household/valid_unseen/%d", i);
        household_t *h = s_new(id);
        env_obs_t obs;
        household_reset(h, &obs);
        char gotos[64][64];
        int n = 0;
        for (size_t k = 0; k < obs.n_admissible && n < 64; k++)
            if (!strncmp(obs.admissible[k], "go to ", 6))
                snprintf(gotos[n++], sizeof gotos[0], "%s", obs.admissible[k]);
        for (int g = 0; g < n && !obs.done; g++) {
            s_step(h, gotos[g], &obs);
            const char *open = s_find_prefix(&obs, "open ");
            if (open && !obs.done)
                s_step(h, open, &obs);
            const char *see = strstr(obs.text, "you see ");
            if (!see)
                continue;
            see += 8;
            int commas = 0;
            for (const char *p = see; *p; p++)
                commas += *p == ',';
            if (!strcmp(see, "nothing.")) {
                empty = true;
            } else if (commas == 0) {
                assert_non_null(strstr(see, "a "));
                assert_null(strstr(see, " and "));
                one = true;
            } else if (commas == 1) {
                assert_non_null(strstr(see, ", and a "));
                two = true;
            } else {
                assert_non_null(strstr(see, ", and a "));
                three = true;
            }
        }
        household_destroy(&h);
    }
    assert_true(empty && one && two && three);
}

static void look_at_a_receptacle_faces_it(void **state)
{
    (void)state;
    household_t *h = s_new("household/train/1");
    env_obs_t obs;
    household_reset(h, &obs);
    char room[2048];
    s_room_sentence(obs.text, room, sizeof room);
    s_step(h, "look", &obs);
    assert_string_equal(obs.text, room);
    const char *go = s_find_prefix(&obs, "go to ");
    char r[64];
    snprintf(r, sizeof r, "%s", go + 6);
    s_step(h, go, &obs);
    s_step(h, "look", &obs);
    char want[128];
    snprintf(want, sizeof want, "You are facing the %s. Next to it, you see nothing.", r);
    assert_string_equal(obs.text, want);
    char go_again[80];
    snprintf(go_again, sizeof go_again, "go to %s", r);
    assert_false(s_has(&obs, go_again)); /* no "go to" the place one stands at */
    s_step(h, "help", &obs);
    assert_true(!strncmp(obs.text, "Available commands:\n  look:", 27));
    household_destroy(&h);
}

/* ---- bad input, step counting and the end of episodes ---- */

static void anything_not_exactly_admissible_is_nothing_happens_and_counts(void **state)
{
    (void)state;
    household_t *h = s_new("household/train/3");
    env_obs_t obs;
    household_reset(h, &obs);
    char first_go[64];
    snprintf(first_go, sizeof first_go, "%s", s_find_prefix(&obs, "go to "));
    size_t n_before = obs.n_admissible;
    char near[5][80];
    snprintf(near[0], sizeof near[0], "%s ", first_go);
    snprintf(near[1], sizeof near[1], " %s", first_go);
    snprintf(near[2], sizeof near[2], "Go%s", first_go + 2);
    snprintf(near[3], sizeof near[3], "go  to%s", first_go + 5);
    snprintf(near[4], sizeof near[4], "dance with the fridge 1");
    for (int i = 0; i < 5; i++) {
        s_step(h, near[i], &obs);
        assert_string_equal(obs.text, "Nothing happens.");
        assert_int_equal(obs.steps, i + 1);
        assert_int_equal(obs.reward, 0);
        assert_int_equal(obs.n_admissible, n_before);
    }
    s_step(h, "", &obs);
    assert_string_equal(obs.text, "Nothing happens.");
    s_step(h, "take apple 1 from countertop 1", &obs); /* in the middle of the room */
    assert_string_equal(obs.text, "Nothing happens.");
    assert_int_equal(obs.steps, 7);
    assert_int_equal(household_step(h, NULL, &obs), SR_EINVAL);
    assert_int_equal(obs.steps, 7);
    household_destroy(&h);
}

static void max_steps_end_the_episode_and_later_steps_are_refused(void **state)
{
    (void)state;
    char err[128];
    household_t *h = household_new("household/valid_seen/9", 3, err, sizeof err);
    assert_non_null(h);
    env_obs_t obs;
    household_reset(h, &obs);
    assert_int_equal(obs.max_steps, 3);
    s_step(h, "look", &obs);
    s_step(h, "no such thing", &obs);
    assert_false(obs.done);
    s_step(h, "inventory", &obs);
    assert_true(obs.done);
    assert_false(obs.won);
    assert_int_equal(obs.reward, 0);
    assert_int_equal(obs.steps, 3);
    assert_string_equal(obs.text, "You are not carrying anything.");
    env_obs_t after = obs;
    assert_int_equal(household_step(h, "look", &after), SR_ECONFLICT);
    assert_ptr_equal(after.text, obs.text);
    /* A reset starts over. */
    household_reset(h, &obs);
    assert_false(obs.done);
    assert_int_equal(obs.steps, 0);
    household_destroy(&h);
    household_destroy(&h); /* NULL is fine */
    household_destroy(NULL);
}

static void bad_task_ids_get_clear_errors(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "household", "household/", "household/train", "household/train/", "household/test/1",
        "household/train/-1", "household/train/01", "household/train/1x", "household/train/4294967296",
        "alfworld/train/1", "HOUSEHOLD/train/1", "household/train/1/2", "household//1",
    };
    for (size_t i = 0; i < SR_ARRAY_LEN(bad); i++) {
        char err[256] = "";
        household_t *h = household_new(bad[i], 0, err, sizeof err);
        if (h)
            fail_msg("accepted %s", bad[i]);
        assert_non_null(strstr(err, "bad task id"));
        assert_non_null(strstr(err, bad[i]));
        assert_int_equal(household_parse_task_id(bad[i], NULL, NULL, NULL, 0), SR_EINVAL);
    }
    char err[64];
    assert_null(household_new(NULL, 0, err, sizeof err));
    assert_null(household_new("household/x/1", 0, NULL, 0)); /* no room for a reason is fine */
    household_split_t split;
    uint32_t index;
    assert_int_equal(household_parse_task_id("household/valid_unseen/4294967295", &split, &index, NULL, 0), SR_OK);
    assert_int_equal(split, HOUSEHOLD_VALID_UNSEEN);
    assert_int_equal(index, 4294967295u);
    assert_int_equal(household_parse_task_id("household/train/0", &split, &index, NULL, 0), SR_OK);
    assert_int_equal(split, HOUSEHOLD_TRAIN);
    assert_int_equal(index, 0);
    household_t *h = s_new("household/valid_unseen/4294967295");
    household_destroy(&h);
}

/* ---- determinism ---- */

/* s_transcript plays a fixed pseudo-random walk on id and hashes every text and admissible list. */
static uint64_t s_transcript_hash(const char *id, uint64_t seed)
{
    household_t *h = s_new(id);
    env_obs_t obs;
    household_reset(h, &obs);
    uint64_t hash = 0xcbf29ce484222325ULL;
    uint64_t rng = seed;
    for (;;) {
        hash = s_fnv(obs.text, hash);
        for (size_t i = 0; i < obs.n_admissible; i++)
            hash = s_fnv(obs.admissible[i], s_fnv("|", hash));
        if (obs.done)
            break;
        char action[256];
        snprintf(action, sizeof action, "%s", obs.admissible[s_rand(&rng) % obs.n_admissible]);
        hash = s_fnv(action, s_fnv(">", hash));
        s_step(h, action, &obs);
    }
    char *layout = household_describe(h);
    hash = s_fnv(layout, hash);
    free(layout);
    household_destroy(&h);
    return hash;
}

static void same_task_id_same_world_texts_and_lists_everywhere(void **state)
{
    (void)state;
    static const struct {
        const char *id;
        uint64_t hash;
    } pinned[] = {
        {"household/train/0", 0x381d7b002863eaa5ULL},
        {"household/train/12345", 0x253616c96da16385ULL},
        {"household/valid_seen/77", 0x6dccf745a60388e0ULL},
        {"household/valid_unseen/4242", 0x5015471f48ac74e3ULL},
    };
    /* SELROLL_PRINT_HASHES=1 prints the current hashes, for a deliberate change of the world. */
    bool regen = getenv("SELROLL_PRINT_HASHES") != NULL;
    for (size_t i = 0; i < SR_ARRAY_LEN(pinned); i++) {
        uint64_t a = s_transcript_hash(pinned[i].id, 7);
        uint64_t b = s_transcript_hash(pinned[i].id, 7);
        assert_true(a == b);
        if (regen)
            printf("        {\"%s\", 0x%016llxULL},\n", pinned[i].id, (unsigned long long)a);
        else if (a != pinned[i].hash)
            fail_msg("%s: transcript hash 0x%016llx, pinned 0x%016llx", pinned[i].id, (unsigned long long)a,
                     (unsigned long long)pinned[i].hash);
    }
    /* Different ids give different tasks. */
    assert_true(s_transcript_hash("household/train/1", 7) != s_transcript_hash("household/train/2", 7));
}

/* s_play_hash plays a fixed pseudo-random walk on h from its reset and hashes every text, list,
 * reward and end. */
static uint64_t s_play_hash(household_t *h, uint64_t seed)
{
    env_obs_t obs;
    assert_int_equal(household_reset(h, &obs), SR_OK);
    uint64_t hash = 0xcbf29ce484222325ULL, rng = seed;
    uint64_t last_version = 0, last_list = 0;
    for (;;) {
        hash = s_fnv(obs.text, hash);
        /* the lengths given with the list are strlen's; an unchanged version, an unchanged list */
        uint64_t list = 0xcbf29ce484222325ULL;
        assert_non_null(obs.admissible_lens);
        assert_true(obs.admissible_version != 0);
        for (size_t i = 0; i < obs.n_admissible; i++) {
            assert_int_equal(obs.admissible_lens[i], strlen(obs.admissible[i]));
            list = s_fnv(obs.admissible[i], s_fnv("|", list));
            hash = s_fnv(obs.admissible[i], s_fnv("|", hash));
        }
        if (obs.admissible_version == last_version)
            assert_true(list == last_list);
        last_version = obs.admissible_version;
        last_list = list;
        hash = (hash ^ (uint64_t)(obs.reward * 10 + obs.done * 2 + obs.won)) * 0x100000001b3ULL;
        hash = (hash ^ (uint64_t)obs.steps ^ ((uint64_t)obs.max_steps << 16)) * 0x100000001b3ULL;
        if (obs.done)
            break;
        char action[256];
        uint64_t r = s_rand(&rng);
        if (r % 11 == 0)
            snprintf(action, sizeof action, "dance");
        else
            snprintf(action, sizeof action, "%s", obs.admissible[(r >> 8) % obs.n_admissible]);
        s_step(h, action, &obs);
    }
    return hash;
}

/* A clone plays exactly as the world generated for its task id, whatever its original did before
 * and after it was cloned (the clone keeps nothing of it), with its own step limit. */
static void clone_plays_as_the_generated_world(void **state)
{
    (void)state;
    static const char *const ids[] = {"household/train/0", "household/train/12345", "household/valid_seen/77",
                                      "household/valid_unseen/4242", "household/train/4294967295"};
    for (size_t i = 0; i < SR_ARRAY_LEN(ids); i++) {
        char err[256] = "";
        household_t *orig = household_new(ids[i], 0, err, sizeof err);
        assert_non_null(orig);
        household_t *fresh_clone = household_clone(orig, 12); /* before any reset */
        assert_non_null(fresh_clone);
        (void)s_play_hash(orig, 99); /* the original plays a while */
        household_t *clone = household_clone(orig, 7);
        assert_non_null(clone);
        household_destroy(&orig);
        household_t *ref7 = household_new(ids[i], 7, err, sizeof err);
        household_t *ref12 = household_new(ids[i], 12, err, sizeof err);
        assert_non_null(ref7);
        assert_non_null(ref12);
        for (uint64_t seed = 1; seed <= 3; seed++) {
            assert_true(s_play_hash(clone, seed) == s_play_hash(ref7, seed));
            assert_true(s_play_hash(fresh_clone, seed) == s_play_hash(ref12, seed));
        }
        char *layout = household_describe(clone);
        char *want_layout = household_describe(ref7); /* the layout, with "max steps: 7" */
        assert_string_equal(layout, want_layout);
        assert_string_equal(household_goal(clone), household_goal(ref7));
        assert_int_equal(household_task_type(clone), household_task_type(ref7));
        free(layout);
        free(want_layout);
        household_destroy(&clone);
        household_destroy(&fresh_clone);
        household_destroy(&ref7);
        household_destroy(&ref12);
    }
    assert_null(household_clone(NULL, 0));
    assert_non_null(household_env_ops.clone);
}

static void reset_restores_the_initial_world(void **state)
{
    (void)state;
    household_t *h = s_new("household/train/21");
    env_obs_t obs;
    household_reset(h, &obs);
    char opening[4096];
    snprintf(opening, sizeof opening, "%s", obs.text);
    char *layout = household_describe(h);
    uint64_t rng = 5;
    for (int i = 0; i < 30 && !obs.done; i++) {
        char action[256];
        snprintf(action, sizeof action, "%s", obs.admissible[s_rand(&rng) % obs.n_admissible]);
        s_step(h, action, &obs);
    }
    household_reset(h, &obs);
    assert_string_equal(obs.text, opening);
    char *again = household_describe(h);
    assert_string_equal(layout, again);
    assert_non_null(strstr(layout, "task: household/train/21\n"));
    assert_non_null(strstr(layout, "receptacles:\n"));
    free(layout);
    free(again);
    household_destroy(&h);
}

/* ---- splits and floor plans ---- */

static void splits_partition_floor_plans(void **state)
{
    (void)state;
    int n = 6000; /* pure arithmetic: cheap even under valgrind */
    /* Floor plans of train tasks 0..n-1 and of valid_unseen tasks never meet. */
    uint8_t *train = calloc(2u * (unsigned)n + 2, 1);
    assert_non_null(train);
    for (int i = 0; i < n; i++) {
        uint32_t fp = household_floor_plan(HOUSEHOLD_TRAIN, (uint32_t)i);
        assert_true(fp < 2u * (unsigned)n + 2);
        train[fp] = 1;
    }
    for (int j = 0; j < n; j++) {
        uint32_t fp = household_floor_plan(HOUSEHOLD_VALID_UNSEEN, (uint32_t)j);
        if (fp < 2u * (unsigned)n + 2)
            assert_false(train[fp]);
        assert_true(fp % 2 == 1);
    }
    /* Far-away indices too: train plans are even, unseen odd. */
    for (uint32_t i = 4000000000u; i < 4000000000u + 1000; i += 7) {
        assert_true(household_floor_plan(HOUSEHOLD_TRAIN, i) % 2 == 0);
        assert_true(household_floor_plan(HOUSEHOLD_VALID_UNSEEN, i) % 2 == 1);
    }
    /* valid_seen uses floor plans of the first 3,000 train tasks, with its own placements. */
    int checked = s_valgrind() ? 40 : 500;
    for (int j = 0; j < 3000; j++) {
        uint32_t fp = household_floor_plan(HOUSEHOLD_VALID_SEEN, (uint32_t)j);
        assert_true(fp < 750);
        assert_true(train[fp]);
        if (j >= checked)
            continue;
        char id[64];
        snprintf(id, sizeof id, "household/valid_seen/%d", j);
        household_t *v = s_new(id);
        assert_int_equal(household_task_floor_plan(v), fp);
        env_obs_t vo;
        household_reset(v, &vo);
        char vroom[2048];
        s_room_sentence(vo.text, vroom, sizeof vroom);
        char *vl = household_describe(v);
        const char *vrec = strstr(vl, "receptacles:");
        for (uint32_t i = fp / 2 * HOUSEHOLD_TASKS_PER_PLAN; i < (fp / 2 + 1) * HOUSEHOLD_TASKS_PER_PLAN; i++) {
            snprintf(id, sizeof id, "household/train/%u", i);
            household_t *t = s_new(id);
            assert_int_equal(household_task_floor_plan(t), fp);
            env_obs_t to;
            household_reset(t, &to);
            char troom[2048];
            s_room_sentence(to.text, troom, sizeof troom);
            assert_string_equal(vroom, troom); /* same furniture */
            assert_string_equal(household_room_name(v), household_room_name(t));
            char *tl = household_describe(t);
            assert_string_not_equal(vrec, strstr(tl, "receptacles:")); /* new placements */
            free(tl);
            household_destroy(&t);
        }
        free(vl);
        household_destroy(&v);
    }
    /* Each split's instances report the plan the scheme says. */
    for (int i = 0; i < 50; i++) {
        char id[64];
        snprintf(id, sizeof id, "household/valid_unseen/%d", i * 13);
        household_t *h = s_new(id);
        assert_int_equal(household_task_floor_plan(h), household_floor_plan(HOUSEHOLD_VALID_UNSEEN, (uint32_t)i * 13));
        household_destroy(&h);
    }
    free(train);
}

/* ---- the operations table and speed ---- */

static void ops_table_drives_the_environment(void **state)
{
    (void)state;
    const env_ops_t *ops = env_ops_for_task("household/train/4");
    assert_ptr_equal(ops, &household_env_ops);
    assert_ptr_equal(env_ops_find("household"), &household_env_ops);
    assert_null(env_ops_find("nope"));
    assert_null(env_ops_for_task("nope/train/1"));
    assert_null(env_ops_for_task("household"));
    assert_string_equal(ops->name, "household");
    char err[128] = "";
    void *env = ops->create("household/train/4", 99, 0, err, sizeof err);
    assert_non_null(env);
    env_obs_t obs;
    assert_int_equal(ops->reset(env, &obs), SR_OK);
    assert_true(!strncmp(obs.text, "-= Welcome to TextWorld, ALFRED! =-", 35));
    assert_int_equal(ops->step(env, "look", &obs), SR_OK);
    assert_int_equal(obs.steps, 1);
    ops->destroy(&env);
    assert_null(env);
    ops->destroy(&env);
    ops->destroy(NULL);
    assert_null(ops->create("household/nope/1", 0, 0, err, sizeof err));
    assert_non_null(strstr(err, "household/nope/1"));
}

/* The optional parts of the ops table (describe, task types, the expert), which `selroll env` and
 * the benches use instead of the household's headers, give what the household's functions give. */
static void ops_table_optional_parts_match_the_household_and_its_expert(void **state)
{
    (void)state;
    const env_ops_t *ops = env_ops_find("household");
    assert_non_null(ops);
    assert_ptr_equal(ops, &household_env_ops);
    assert_string_equal(ENVKIND_HOUSEHOLD, ops->name);
    assert_int_equal(ops->n_task_types, HOUSEHOLD_TASK_COUNT);
    for (int t = -1; t <= HOUSEHOLD_TASK_COUNT; t++)
        assert_string_equal(ops->task_type_name(t), household_task_name((household_task_t)t));
    int seen[HOUSEHOLD_TASK_COUNT] = {0};
    for (int i = 0; i < 40; i++) {
        char id[64], err[256] = "";
        snprintf(id, sizeof id, "household/valid_unseen/%d", i);
        household_t *h = household_new(id, 0, err, sizeof err);
        void *e = ops->create(id, 0, 0, err, sizeof err);
        assert_non_null(h);
        assert_non_null(e);
        int type = ops->task_type(e);
        assert_int_equal(type, (int)household_task_type(h));
        assert_true(type >= 0 && type < ops->n_task_types);
        seen[type]++;
        char *d1 = household_describe(h), *d2 = ops->describe(e);
        assert_non_null(d1);
        assert_non_null(d2);
        assert_string_equal(d1, d2);
        free(d1);
        free(d2);
        /* the expert through the table plays the same episode as expert_run() */
        env_expert_result_t r1, r2;
        char *t1 = NULL, *t2 = NULL;
        assert_int_equal(expert_run(&household_env_ops, id, 0, true, &r1, &t1, err, sizeof err), SR_OK);
        assert_int_equal(ops->expert_run(id, 0, true, &r2, &t2, err, sizeof err), SR_OK);
        assert_string_equal(t1, t2);
        assert_int_equal(r1.won, r2.won);
        assert_int_equal(r1.steps, r2.steps);
        free(t1);
        free(t2);
        /* and stepwise, through expert_new/act/destroy */
        void *ex = ops->expert_new();
        assert_non_null(ex);
        env_obs_t obs;
        assert_int_equal(ops->reset(e, &obs), SR_OK);
        while (!obs.done) {
            const char *a = ops->expert_act(ex, &obs);
            assert_non_null(a);
            assert_int_equal(ops->step(e, a, &obs), SR_OK);
        }
        assert_int_equal(obs.won, r1.won);
        assert_int_equal(obs.steps, r1.steps);
        ops->expert_destroy(&ex);
        assert_null(ex);
        ops->expert_destroy(&ex);
        ops->expert_destroy(NULL);
        ops->destroy(&e);
        household_destroy(&h);
    }
    int kinds = 0;
    for (int t = 0; t < HOUSEHOLD_TASK_COUNT; t++)
        kinds += seen[t] > 0;
    assert_true(kinds >= 4); /* the 40 tasks spread over the types */
    char err[256] = "";
    env_expert_result_t r;
    char *t = NULL;
    assert_int_equal(ops->expert_run("household/nope/1", 0, false, &r, &t, err, sizeof err), SR_EINVAL);
    assert_null(t);
    assert_true(err[0] != '\0');
}

static void a_step_takes_well_under_twenty_microseconds(void **state)
{
    (void)state;
    if (s_valgrind())
        skip();
    household_t *h = s_new("household/train/0"); /* a big kitchen */
    env_obs_t obs;
    household_reset(h, &obs);
    uint64_t rng = 3;
    int steps = 0;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    while (steps < 50000) {
        if (obs.done)
            household_reset(h, &obs);
        household_step(h, obs.admissible[s_rand(&rng) % obs.n_admissible], &obs);
        steps++;
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    double us = ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / 1e3 / steps;
    printf("household: %.2f us per step\n", us);
    assert_true(us < 20.0 * HARNESS_SLOWDOWN);
    household_destroy(&h);
}

static void local_benchmark_times_every_step(void **state)
{
    (void)state;
    bench_env_local_result_t r;
    assert_int_equal(bench_env_local_run(0, &r), SR_EINVAL);
    assert_int_equal(bench_env_local_run(30, &r), SR_OK);
    assert_int_equal(r.episodes, 30);
    assert_true(r.steps >= 30 * 3); /* no task is solved in fewer than three steps */
    assert_true(r.steps_per_s > 0);
    assert_true(r.p50_us > 0 && r.p50_us <= r.p99_us);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(opening_welcomes_lists_receptacles_and_states_the_task),
        cmocka_unit_test(goals_use_the_two_templates_of_each_type_and_room_rules),
        cmocka_unit_test(random_walks_admissible_lists_sorted_and_every_command_answers),
        cmocka_unit_test(examine_texts_follow_heat_cool_clean_state),
        cmocka_unit_test(lists_read_nothing_one_and_two_items_as_alfworld),
        cmocka_unit_test(look_at_a_receptacle_faces_it),
        cmocka_unit_test(anything_not_exactly_admissible_is_nothing_happens_and_counts),
        cmocka_unit_test(max_steps_end_the_episode_and_later_steps_are_refused),
        cmocka_unit_test(bad_task_ids_get_clear_errors),
        cmocka_unit_test(same_task_id_same_world_texts_and_lists_everywhere),
        cmocka_unit_test(reset_restores_the_initial_world),
        cmocka_unit_test(clone_plays_as_the_generated_world),
        cmocka_unit_test(splits_partition_floor_plans),
        cmocka_unit_test(ops_table_drives_the_environment),
        cmocka_unit_test(ops_table_optional_parts_match_the_household_and_its_expert),
        cmocka_unit_test(a_step_takes_well_under_twenty_microseconds),
        cmocka_unit_test(local_benchmark_times_every_step),
    };
    return harness_run_("household", tests, SR_ARRAY_LEN(tests), argc, argv);
}
