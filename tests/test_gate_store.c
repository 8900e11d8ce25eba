/*
 * test_gate_store.c — the gate's Redis schema (gate/gate_store.c) against a real redis-server:
 * each typed call writes or reads the keys docs/gate.md names, with the values the dashboard and
 * `selroll status` read back; a cancel that lost the race to the group's end is recorded, not
 * enforced; a retried cancel that had landed counts as ours.
 */
#include "tests/harness.h"

#include "common/log.h"
#include "common/sr.h"
#include "common/store.h"
#include "gate/gate_store.h"
#include "common/store_group.h"
#include "common/store_prompt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RUN "gs"

typedef struct {
    harness_redis_t redis;
    store_t *st;
} fix_t;

static int setup(void **state)
{
    log_set_level(LOG_ERROR);
    fix_t *f = calloc(1, sizeof *f);
    char err[256];
    if (!f || harness_redis_start(&f->redis) != 0 ||
        store_connect(&f->st, f->redis.url, RUN, 2000, err, sizeof err) != SR_OK)
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fix_t *f = *state;
    store_destroy(&f->st);
    harness_redis_stop(&f->redis);
    free(f);
    return 0;
}

/* s_hget returns field of selroll:gs:<key> as a new string, or NULL. */
static char *s_hget(fix_t *f, const char *key, const char *field)
{
    store_reply_t *r = NULL;
    if (store_command(f->st, 0, &r, "HGET selroll:" RUN ":%s %s", key, field) != SR_OK)
        return NULL;
    char *v = store_reply_str(r, NULL) ? strdup(store_reply_str(r, NULL)) : NULL;
    store_reply_free(r);
    return v;
}

static void s_expect(fix_t *f, const char *key, const char *field, const char *want)
{
    char *v = s_hget(f, key, field);
    if (!want) {
        assert_null(v);
        return;
    }
    assert_non_null(v);
    assert_string_equal(v, want);
    free(v);
}

static gate_decision_t s_decision(const char *gid, bool cancel)
{
    gate_decision_t d;
    memset(&d, 0, sizeof d);
    snprintf(d.group, sizeof d.group, "%s", gid);
    d.G = 4;
    d.step = 10;
    d.d = 0.05;
    d.ended_share = 0.25;
    d.verdict = cancel ? GATE_CANCEL : GATE_KEEP;
    d.reason = "divergence";
    d.record = true;
    d.cancel = cancel;
    d.rule = GATE_RULE_PAPER;
    d.audit_weight = 1.0;
    return d;
}

static void decisions_cancel_record_and_annotate_the_group(void **state)
{
    fix_t *f = *state;
    assert_int_equal(store_group_create(f->st, "g1", "t", 0, 4), SR_OK);
    assert_int_equal(store_group_create(f->st, "g2", "t", 0, 4), SR_OK);
    bool publish = true, too_late = true;

    /* An enforced cancel of a running group: the transition is ours. */
    gate_decision_t d = s_decision("g1", true);
    assert_int_equal(gate_store_decision(f->st, &d, false, &publish, &too_late), SR_OK);
    assert_true(publish);
    assert_false(too_late);
    s_expect(f, "group:g1", "status", "cancelled");
    s_expect(f, "group:g1", "decision", "cancel");
    /* The same cancel submitted again after a timeout: it had landed, it is still ours. */
    assert_int_equal(gate_store_decision(f->st, &d, true, &publish, &too_late), SR_OK);
    assert_true(publish);
    /* Not retried: the group is no longer running, so the cancel came too late. */
    assert_int_equal(gate_store_decision(f->st, &d, false, &publish, &too_late), SR_OK);
    assert_false(publish);
    assert_true(too_late);

    /* A keep (shadow or enforce) records the verdict, the status stays. */
    gate_decision_t k = s_decision("g2", false);
    k.rule = GATE_RULE_AUDIT;
    k.audited = true;
    k.audit_weight = 4.0;
    assert_int_equal(gate_store_decision(f->st, &k, false, &publish, &too_late), SR_OK);
    assert_false(publish);
    s_expect(f, "group:g2", "status", "running");
    s_expect(f, "group:g2", "decision", "keep");
    assert_int_equal(gate_store_annotate(f->st, &k, GATE_MODE_SHADOW, 1234), SR_OK);
    s_expect(f, "group:g2", "gate_wall_ms", "1234");
    s_expect(f, "group:g2", "gate_mode", "shadow");
    s_expect(f, "group:g2", "gate_reason", "divergence");
    s_expect(f, "group:g2", "gate_ended_share", "0.25");
    s_expect(f, "group:g2", "gate_rule", "audit");
    s_expect(f, "group:g2", "audit_weight", "4");
    /* The paper's rule and weight 1 add neither field. */
    assert_int_equal(gate_store_annotate(f->st, &d, GATE_MODE_ENFORCE, 5), SR_OK);
    s_expect(f, "group:g1", "gate_mode", "enforce");
    s_expect(f, "group:g1", "gate_rule", NULL);
    s_expect(f, "group:g1", "audit_weight", NULL);

    /* A decision on a group Redis does not know. */
    gate_decision_t u = s_decision("nope", false);
    assert_int_equal(gate_store_decision(f->st, &u, false, &publish, &too_late), SR_ENOTFOUND);
}

static void rules_go_only_to_a_known_group(void **state)
{
    fix_t *f = *state;
    assert_int_equal(store_group_create(f->st, "g3", "t", 0, 4), SR_OK);
    assert_int_equal(gate_store_rules(f->st, "g3", "{\"paper\":{\"cut\":true}}"), SR_OK);
    s_expect(f, "group:g3", "rules", "{\"paper\":{\"cut\":true}}");
    assert_int_equal(gate_store_rules(f->st, "ghost", "{}"), SR_ENOTFOUND);
    store_reply_t *r = NULL;
    assert_int_equal(store_command(f->st, 0, &r, "EXISTS selroll:" RUN ":group:ghost"), SR_OK);
    assert_int_equal(harness_reply_int(r), 0); /* not created */
    store_reply_free(r);
}

static int s_collect(const char *line, void *arg)
{
    char *buf = arg;
    strcat(buf, line);
    strcat(buf, "|");
    return 0;
}

static void examples_are_capped_and_read_back_oldest_first(void **state)
{
    fix_t *f = *state;
    char buf[256] = "";
    size_t bad = 9;
    assert_int_equal(gate_store_examples(f->st, s_collect, buf, &bad), SR_OK);
    assert_string_equal(buf, "");
    assert_int_equal(bad, 0);
    assert_int_equal(gate_store_example_push(f->st, "a", 2), SR_OK);
    assert_int_equal(gate_store_example_push(f->st, "b", 2), SR_OK);
    assert_int_equal(gate_store_example_push(f->st, "c", 2), SR_OK);
    assert_int_equal(gate_store_examples(f->st, s_collect, buf, &bad), SR_OK);
    assert_string_equal(buf, "b|c|");
}

/* An outcome writes its example and the figures together (one pipeline); either may be absent. */
static void an_outcome_writes_example_and_figures_together(void **state)
{
    fix_t *f = *state;
    gate_stats_t g;
    memset(&g, 0, sizeof g);
    g.outcomes = 7;
    g.audit_groups = 2;
    assert_int_equal(gate_store_outcome(f->st, "1 0.5", 2, &g, 0.5, 9), SR_OK);
    assert_int_equal(gate_store_outcome(f->st, "0 0.25", 2, NULL, 0, 0), SR_OK);
    g.outcomes = 8;
    assert_int_equal(gate_store_outcome(f->st, NULL, 2, &g, 0.25, 10), SR_OK);
    assert_int_equal(gate_store_outcome(f->st, "1 1", 2, NULL, 0, 0), SR_OK);
    char buf[256] = "";
    assert_int_equal(gate_store_examples(f->st, s_collect, buf, NULL), SR_OK);
    assert_string_equal(buf, "0 0.25|1 1|");
    s_expect(f, "gate:stats", "outcomes", "8");
    s_expect(f, "gate:stats", "audit_groups", "2");
    s_expect(f, "gate:stats", "audit_precision", "0.25");
    s_expect(f, "gate:stats", "learned_labels", "10");
    assert_int_equal(gate_store_outcome(f->st, NULL, 2, NULL, 0, 0), SR_OK); /* nothing to do */
    /* an error reply (gate:stats of another type) is an error, and the connection stays usable */
    assert_int_equal(store_command(f->st, 0, NULL, "SET selroll:" RUN ":gate:stats x"), SR_OK);
    assert_int_equal(gate_store_outcome(f->st, "1 2", 2, &g, 0.25, 10), SR_EREDIS);
    assert_non_null(strstr(store_errstr(f->st), "WRONGTYPE"));
    assert_int_equal(store_ping(f->st), SR_OK);
}

static void config_and_figures_fill_gate_stats(void **state)
{
    fix_t *f = *state;
    assert_int_equal(gate_store_config(f->st, GATE_RULE_LEARNED, GATE_MODE_ENFORCE,
                                       GATE_RULE_PAPER, 200),
                     SR_OK);
    s_expect(f, "gate:stats", "rule", "learned");
    s_expect(f, "gate:stats", "mode", "enforce");
    s_expect(f, "gate:stats", "audit_base", "paper");
    s_expect(f, "gate:stats", "learned_min_groups", "200");
    assert_int_equal(gate_store_config(f->st, GATE_RULE_PAPER, GATE_MODE_SHADOW, GATE_RULE_PAPER,
                                       -1),
                     SR_OK);
    s_expect(f, "gate:stats", "learned_min_groups", NULL);
    gate_stats_t g;
    memset(&g, 0, sizeof g);
    g.outcomes = 40;
    g.audit_groups = 12;
    g.audit_zero_variance = 9;
    g.keep_two_labels = 3;
    g.keep_two_wrong = 1;
    assert_int_equal(gate_store_figures(f->st, &g, 0.75, 150), SR_OK);
    s_expect(f, "gate:stats", "outcomes", "40");
    s_expect(f, "gate:stats", "audit_groups", "12");
    s_expect(f, "gate:stats", "audit_zero_variance", "9");
    s_expect(f, "gate:stats", "audit_precision", "0.75");
    s_expect(f, "gate:stats", "keep_two_labels", "3");
    s_expect(f, "gate:stats", "keep_two_wrong", "1");
    s_expect(f, "gate:stats", "learned_labels", "150");
    s_expect(f, "gate:stats", "mode", "shadow"); /* the configuration stays */
}

static void history_reads_the_prompt_streaks(void **state)
{
    fix_t *f = *state;
    gate_history_t h;
    assert_int_equal(gate_store_history(f->st, "fresh", &h), SR_OK);
    assert_false(h.known);
    assert_int_equal(store_prompt_push(f->st, "easy", 1, 1.0), SR_OK);
    assert_int_equal(store_prompt_push(f->st, "easy", 2, 1.0), SR_OK);
    assert_int_equal(gate_store_history(f->st, "easy", &h), SR_OK);
    assert_true(h.known);
    assert_int_equal(h.easy_streak, 2);
    assert_int_equal(h.hard_streak, 0);
}

/* s_same_field expects field of group:<a> and group:<b> to be equal (both absent counts). */
static void s_same_field(fix_t *f, const char *a, const char *b, const char *field)
{
    char ka[64], kb[64];
    snprintf(ka, sizeof ka, "group:%s", a);
    snprintf(kb, sizeof kb, "group:%s", b);
    char *va = s_hget(f, ka, field), *vb = s_hget(f, kb, field);
    if (!va || !vb) {
        assert_null(va);
        assert_null(vb);
    } else {
        assert_string_equal(va, vb);
    }
    free(va);
    free(vb);
}

static void a_batch_writes_what_the_single_calls_write_each_with_its_result(void **state)
{
    fix_t *f = *state;
    static const char *const gids[] = {"s1", "s2", "b1", "b2", "b3"};
    for (size_t i = 0; i < SR_ARRAY_LEN(gids); i++)
        assert_int_equal(store_group_create(f->st, gids[i], "t", 0, 4), SR_OK);
    gate_decision_t k = s_decision("s1", false);
    k.rule = GATE_RULE_AUDIT;
    k.audited = true;
    k.audit_weight = 4.0;
    gate_decision_t p = s_decision("s2", true);
    gate_stats_t g;
    memset(&g, 0, sizeof g);
    g.outcomes = 5;
    g.keep_two_labels = 2;
    const char *rules = "{\"paper\":{\"cut\":false,\"step\":10,\"score\":1.5,\"final\":true}}";

    /* One by one. */
    assert_int_equal(gate_store_annotate(f->st, &k, GATE_MODE_SHADOW, 77), SR_OK);
    assert_int_equal(gate_store_annotate(f->st, &p, GATE_MODE_ENFORCE, 78), SR_OK);
    assert_int_equal(gate_store_rules(f->st, "s1", rules), SR_OK);
    assert_int_equal(gate_store_outcome(f->st, "1 0.5", 4, &g, 0.5, 3), SR_OK);

    /* The same as one batch, with a group Redis does not know, an outcome with nothing to write
     * and an annotation that meets a key of another type between them. */
    assert_int_equal(store_command(f->st, 0, NULL, "SET selroll:" RUN ":group:wrong x"), SR_OK);
    gate_decision_t kb = k, pb = p, w = s_decision("wrong", false), b3 = s_decision("b3", false);
    snprintf(kb.group, sizeof kb.group, "b1");
    snprintf(pb.group, sizeof pb.group, "b2");
    gate_stats_t g2 = g;
    g2.outcomes = 6;
    g2.keep_two_wrong = UINT64_MAX;
    gate_store_op_t ops[] = {
        {.kind = GATE_STORE_ANNOTATE, .d = &kb, .mode = GATE_MODE_SHADOW, .wall_ms = 77},
        {.kind = GATE_STORE_ANNOTATE, .d = &pb, .mode = GATE_MODE_ENFORCE, .wall_ms = 78},
        {.kind = GATE_STORE_RULES, .gid = "b1", .text = rules},
        {.kind = GATE_STORE_RULES, .gid = "ghost", .text = "{}"},
        {.kind = GATE_STORE_OUTCOME,
         .text = "0 0.25",
         .capacity = 4,
         .stats = &g2,
         .audit_precision = 0.25,
         .learned_labels = 4},
        {.kind = GATE_STORE_OUTCOME, .capacity = 4},
        {.kind = GATE_STORE_ANNOTATE, .d = &w, .mode = GATE_MODE_SHADOW, .wall_ms = 79},
        {.kind = GATE_STORE_ANNOTATE, .d = &b3, .mode = GATE_MODE_SHADOW, .wall_ms = 80},
    };
    assert_int_equal(gate_store_batch(f->st, ops, SR_ARRAY_LEN(ops)), SR_OK);
    static const int want[] = {SR_OK, SR_OK, SR_OK, SR_ENOTFOUND, SR_OK, SR_OK, SR_EREDIS, SR_OK};
    for (size_t i = 0; i < SR_ARRAY_LEN(ops); i++) {
        assert_int_equal(ops[i].rc, want[i]);
        assert_true((ops[i].rc == SR_OK) == (ops[i].err[0] == '\0'));
    }
    assert_non_null(strstr(ops[6].err, "WRONGTYPE"));
    static const char *const fields[] = {
        "gate_wall_ms", "gate_mode",    "gate_reason", "gate_ended_share",
        "gate_rule",    "audit_weight", "rules",       "status"};
    for (size_t i = 0; i < SR_ARRAY_LEN(fields); i++) {
        s_same_field(f, "s1", "b1", fields[i]);
        s_same_field(f, "s2", "b2", fields[i]);
    }
    s_expect(f, "group:b1", "audit_weight", "4");
    s_expect(f, "group:b3", "gate_wall_ms", "80");
    char buf[256] = "";
    assert_int_equal(gate_store_examples(f->st, s_collect, buf, NULL), SR_OK);
    assert_string_equal(buf, "1 0.5|0 0.25|");
    s_expect(f, "gate:stats", "outcomes", "6");
    s_expect(f, "gate:stats", "keep_two_labels", "2");
    s_expect(f, "gate:stats", "learned_labels", "4");
    s_expect(f, "gate:stats", "keep_two_wrong", "18446744073709551615");
    s_expect(f, "gate:stats", "audit_precision", "0.25");

    /* The server lost the rules script: that record runs again alone, the others stay. */
    assert_int_equal(store_command(f->st, 0, NULL, "SCRIPT FLUSH"), SR_OK);
    gate_store_op_t again[] = {
        {.kind = GATE_STORE_RULES, .gid = "b3", .text = "{\"x\":1}"},
        {.kind = GATE_STORE_ANNOTATE, .d = &b3, .mode = GATE_MODE_ENFORCE, .wall_ms = 81},
    };
    assert_int_equal(gate_store_batch(f->st, again, 2), SR_OK);
    assert_int_equal(again[0].rc, SR_OK);
    assert_int_equal(again[1].rc, SR_OK);
    s_expect(f, "group:b3", "rules", "{\"x\":1}");
    s_expect(f, "group:b3", "gate_wall_ms", "81");
    assert_int_equal(store_ping(f->st), SR_OK);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(decisions_cancel_record_and_annotate_the_group, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(rules_go_only_to_a_known_group, setup, teardown),
        cmocka_unit_test_setup_teardown(examples_are_capped_and_read_back_oldest_first, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(an_outcome_writes_example_and_figures_together, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(config_and_figures_fill_gate_stats, setup, teardown),
        cmocka_unit_test_setup_teardown(history_reads_the_prompt_streaks, setup, teardown),
        cmocka_unit_test_setup_teardown(
            a_batch_writes_what_the_single_calls_write_each_with_its_result, setup, teardown),
    };
    return harness_run_("gate_store", tests, SR_ARRAY_LEN(tests), argc, argv);
}
