/*
 * test_eval_tally.c — a held-out evaluation counted by task type (coordinator/eval_tally.h): the
 * RESULTs as the coordinator's sink decoded them on arrival and the same RESULTs read back from
 * their stored bytes give the same counts and the same record, byte for byte; types in the order
 * they first appear, "untyped" for a task the set does not know, failures counted.
 */
#include "tests/harness.h"

#include "common/proto.h"
#include "common/sr.h"
#include "common/sr_buf.h"
#include "common/tasks.h"
#include "coordinator/eval_tally.h"

#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *s_tasks[] = {
    "household/train/1", "household/train/0", "household/train/5", "household/train/2", "nope/1",
    "household/train/0"};

static void s_encode(int i, sr_buf_t *b)
{
    char jid[64];
    snprintf(jid, sizeof jid, "r0000-g%04d/t0", i);
    proto_msg_t m;
    proto_msg_init(&m, PROTO_RESULT);
    proto_result_t *r = &m.u.result;
    r->job_id = jid;
    r->epoch = i + 1;
    r->run = "t";
    r->group = "g";
    r->task = s_tasks[i % SR_ARRAY_LEN(s_tasks)];
    r->status = i % 4 == 3 ? "failed" : "done";
    r->won = i % 3 == 0;
    assert_int_equal(proto_encode(&m, b), SR_OK);
}

static char *s_record(const eval_tally_t *e)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", "eval");
    eval_tally_json(e, o);
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return text;
}

static void decoded_and_stored_results_give_the_same_record(void **state)
{
    (void)state;
    tasks_t *ts = tasks_new_kind(NULL, NULL, 0);
    assert_non_null(ts);
    eval_tally_t held, stored;
    eval_tally_init(&held, ts);
    eval_tally_init(&stored, ts);
    for (int i = 0; i < 24; i++) {
        sr_buf_t b = SR_BUF_INIT;
        s_encode(i, &b);
        proto_msg_t m;
        assert_int_equal(proto_decode(b.data, b.len, &m, NULL), SR_OK);
        eval_tally_add(&held, &m.u.result);
        proto_msg_clear(&m);
        assert_int_equal(eval_tally_add_stored(b.data, b.len, &stored), 0);
        sr_buf_free(&b);
    }
    /* what is not a RESULT is skipped */
    assert_int_equal(eval_tally_add_stored("\x93\x01\x02\x03", 4, &stored), 0);
    assert_int_equal(held.total, 24);
    assert_int_equal(held.won, 8);
    assert_int_equal(held.failed, 6);
    assert_int_equal(held.ntypes, 4);
    assert_string_equal(held.types[0].name, "pick_and_place_simple");
    assert_string_equal(held.types[1].name, "pick_heat_then_place_in_recep");
    assert_string_equal(held.types[2].name, "pick_clean_then_place_in_recep");
    assert_string_equal(held.types[3].name, "untyped");
    assert_int_equal(held.types[1].n, 8);
    char *a = s_record(&held), *b = s_record(&stored);
    assert_string_equal(a, b);
    assert_non_null(strstr(a, "\"tasks\":24,\"won\":8,\"failed\":6,\"heldout_success\":"));
    assert_non_null(strstr(a, "\"untyped\":{\"tasks\":4,\"won\":0,\"success\":0}"));
    char la[512], lb[512];
    assert_true(eval_tally_types(&held, la, sizeof la) > 0);
    eval_tally_types(&stored, lb, sizeof lb);
    assert_string_equal(la, lb);
    assert_non_null(strstr(la, " untyped 0/4"));
    assert_true(eval_tally_success(&held) == 8.0 / 24.0);
    free(a);
    free(b);
    eval_tally_free(&held);
    eval_tally_free(&stored);
    /* freed: empty again, over the same task set */
    assert_int_equal(held.total, 0);
    assert_int_equal(held.ntypes, 0);
    assert_true(held.tasks == ts);
    assert_true(eval_tally_success(&held) == 0.0);
    tasks_destroy(&ts);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(decoded_and_stored_results_give_the_same_record),
};

int main(int argc, char **argv)
{
    return harness_run_("eval_tally", tests, SR_ARRAY_LEN(tests), argc, argv);
}
