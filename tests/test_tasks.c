/*
 * test_tasks.c — task sets: the household source's ids and types, the file source's parsing
 * (ids, types, env, task_data as msgpack, prefixes of a pool), every bad file refused with a
 * message naming file and line, and task_data travelling through JOB and RESET unchanged.
 */
#include "tests/harness.h"
#include "common/envkind.h"
#include "common/proto.h"
#include "common/sr.h"
#include "common/tasks.h"

#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char s_dir[64];

static int s_setup(void **state)
{
    snprintf(s_dir, sizeof s_dir, "/tmp/test_tasks-XXXXXX");
    return mkdtemp(s_dir) ? 0 : -1;
}

static int s_teardown(void **state)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* s_file writes text to <dir>/name and returns the path (static buffer per call site: copy). */
static const char *s_file(const char *name, const char *text, char *path, size_t len)
{
    snprintf(path, len, "%s/%s", s_dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return path;
}

/* s_refused loads "train=<file with text>" and checks the error is "<path><where>", an '@' in
 * where standing for the path again and a final '*' for any rest (cJSON's column). */
static void s_refused(const char *text, const char *where)
{
    char path[128], spec[160], want[512], err[512];
    s_file("bad.jsonl", text, path, sizeof path);
    snprintf(spec, sizeof spec, "train=%s", path);
    tasks_t *ts = tasks_load_files(spec, err, sizeof err);
    assert_null(ts);
    size_t off = (size_t)snprintf(want, sizeof want, "%s", path);
    for (const char *c = where; *c && off < sizeof want - 1; c++) {
        if (*c == '@')
            off += (size_t)snprintf(want + off, sizeof want - off, "%s", path);
        else
            want[off++] = *c;
    }
    want[SR_MIN(off, sizeof want - 1)] = '\0';
    size_t wl = strlen(want);
    bool prefix = wl > 0 && want[wl - 1] == '*';
    if (prefix ? strncmp(err, want, wl - 1) != 0 : strcmp(err, want) != 0)
        fail_msg("got '%s', want '%s'", err, want);
    assert_null(strchr(err, '\n'));
}

/* A kind's source is chosen by its name (the default kind for NULL or ""); an unknown kind is a
 * one-line error. */
static void sources_are_chosen_by_kind(void **state)
{
    (void)state;
    const char *kinds[] = {NULL, "", "household"};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        tasks_t *ts = tasks_new_kind(kinds[i], NULL, 0);
        assert_non_null(ts);
        assert_string_equal(tasks_source_name(ts), "household");
        tasks_destroy(&ts);
    }
    assert_string_equal(envkind_builtin(NULL)->name, "household");
    assert_null(envkind_builtin("games"));
    assert_true(envkind_builtin(NULL)->task_ok("household/valid_unseen/17"));
    assert_false(envkind_builtin(NULL)->task_ok("household/nosuch/17"));
    assert_false(envkind_builtin(NULL)->task_ok("games/train/3"));
    char err[128];
    assert_null(tasks_new_kind("games", err, sizeof err));
    assert_string_equal(err, "no task source of env kind 'games'");
}

static void household_source_makes_generated_ids_and_types(void **state)
{
    tasks_t *ts = tasks_new_kind(NULL, NULL, 0);
    assert_string_equal(tasks_source_name(ts), "household");
    assert_true(tasks_has_split(ts, "train"));
    assert_true(tasks_has_split(ts, "valid_unseen"));
    assert_false(tasks_has_split(ts, "nosuch"));
    assert_true(tasks_count(ts, "train") == TASKS_UNBOUNDED);
    assert_int_equal(tasks_count(ts, "nosuch"), 0);
    assert_int_equal(tasks_pool_size(ts, "train", 100), 100);
    char id[TASKS_ID_MAX + 1];
    assert_true(tasks_id(ts, "valid_unseen", 17, id, sizeof id));
    assert_string_equal(id, "household/valid_unseen/17");
    assert_false(tasks_id(ts, "nosuch", 1, id, sizeof id));
    const char *type = tasks_type(ts, "household/train/3");
    assert_non_null(type);
    assert_string_not_equal(type, "unknown");
    assert_null(tasks_type(ts, "guess/7"));
    assert_string_equal(tasks_env(ts, "household/train/3"), "household");
    const uint8_t *p;
    size_t n;
    assert_false(tasks_data(ts, "household/train/3", &p, &n));
    assert_null(p);
    tasks_destroy(&ts);
    assert_null(ts);
    tasks_destroy(&ts);
}

static void file_source_reads_ids_types_env_and_objects(void **state)
{
    char tp[128], hp[128], spec[300], err[512];
    s_file("train.jsonl",
           "{\"id\":\"guess-1\",\"type\":\"small\",\"env\":\"guess\",\"lo\":1,\"hi\":8}\n"
           "\n"
           "  {\"id\": \"guess-2\", \"hi\": 2.5, \"tags\": [\"a\", null, true], \"deep\": {\"x\": "
           "{\"y\": false}}}  \n"
           "{\"id\":\"guess-3\",\"type\":\"large\"}",
           tp, sizeof tp);
    s_file("held.jsonl", "{\"id\":\"held-1\",\"type\":\"small\"}\n", hp, sizeof hp);
    snprintf(spec, sizeof spec, "train=%s,valid_unseen=%s", tp, hp);
    tasks_t *ts = tasks_load_files(spec, err, sizeof err);
    if (!ts)
        fail_msg("%s", err);
    assert_string_equal(tasks_source_name(ts), "file");
    assert_int_equal(tasks_count(ts, "train"), 3);
    assert_int_equal(tasks_count(ts, "valid_unseen"), 1);
    assert_false(tasks_has_split(ts, "valid_seen"));
    assert_int_equal(tasks_pool_size(ts, "train", 2), 2);   /* a prefix */
    assert_int_equal(tasks_pool_size(ts, "train", 100), 3); /* capped at the file */
    char id[TASKS_ID_MAX + 1];
    assert_true(tasks_id(ts, "train", 1, id, sizeof id));
    assert_string_equal(id, "guess-2");
    assert_false(tasks_id(ts, "train", 3, id, sizeof id));
    assert_true(tasks_id(ts, "valid_unseen", 0, id, sizeof id));
    assert_string_equal(id, "held-1");
    assert_string_equal(tasks_type(ts, "guess-1"), "small");
    assert_null(tasks_type(ts, "guess-2"));
    assert_string_equal(tasks_type(ts, "held-1"), "small");
    assert_string_equal(tasks_env(ts, "guess-1"), "guess");
    assert_null(tasks_env(ts, "guess-3"));
    assert_null(tasks_type(ts, "nosuch"));

    /* task_data is the whole object, as a msgpack map; integral numbers are integers. */
    const uint8_t *p;
    size_t n;
    assert_true(tasks_data(ts, "guess-1", &p, &n));
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    assert_int_equal(msgpack_unpack_next(&up, (const char *)p, n, NULL), MSGPACK_UNPACK_SUCCESS);
    assert_int_equal(up.data.type, MSGPACK_OBJECT_MAP);
    assert_int_equal(up.data.via.map.size, 5);
    const msgpack_object_kv *kv = up.data.via.map.ptr;
    assert_memory_equal(kv[0].key.via.str.ptr, "id", 2);
    assert_memory_equal(kv[0].val.via.str.ptr, "guess-1", 7);
    assert_memory_equal(kv[3].key.via.str.ptr, "lo", 2);
    assert_int_equal(kv[3].val.type, MSGPACK_OBJECT_POSITIVE_INTEGER);
    assert_int_equal(kv[3].val.via.u64, 1);
    msgpack_unpacked_destroy(&up);
    assert_true(tasks_data(ts, "guess-2", &p, &n));
    msgpack_unpacked_init(&up);
    assert_int_equal(msgpack_unpack_next(&up, (const char *)p, n, NULL), MSGPACK_UNPACK_SUCCESS);
    kv = up.data.via.map.ptr;
    assert_int_equal(kv[1].val.type, MSGPACK_OBJECT_FLOAT64);
    assert_true(kv[1].val.via.f64 == 2.5);
    assert_int_equal(kv[2].val.type, MSGPACK_OBJECT_ARRAY);
    assert_int_equal(kv[2].val.via.array.ptr[1].type, MSGPACK_OBJECT_NIL);
    assert_int_equal(kv[2].val.via.array.ptr[2].type, MSGPACK_OBJECT_BOOLEAN);
    msgpack_unpacked_destroy(&up);
    assert_false(tasks_data(ts, "nosuch", &p, &n));
    tasks_destroy(&ts);
}

static void bad_files_name_file_and_line(void **state)
{
    s_refused("{\"id\":\"a\"}\n{\"type\":\"x\"}\n", ":2: no \"id\"");
    s_refused("{\"id\":\"a\"}\n\n{\"id\":\"b\"}\n{\"id\":\"a\"}\n",
              ":4: id \"a\" is already the id of @:1");
    s_refused("{\"id\":\"a\"}\n{\"id\": \"b\",}\n", ":2: not JSON (at column *");
    s_refused("[1, 2]\n", ":1: not a JSON object");
    s_refused("\"just a string\"\n", ":1: not a JSON object");
    s_refused("{\"id\":7}\n", ":1: \"id\" is not a non-empty string");
    s_refused("{\"id\":\"\"}\n", ":1: \"id\" is not a non-empty string");
    s_refused("{\"id\":\"a\tb\"}\n", ":1: \"id\" contains a control character");
    s_refused("{\"id\":\"a\",\"type\":3}\n", ":1: \"type\" is not a non-empty string");
    s_refused("{\"id\":\"a\",\"env\":[]}\n", ":1: \"env\" is not a non-empty string");
    s_refused("{\"id\":\"a\"} {\"id\":\"b\"}\n", ":1: not JSON (at column *");
    s_refused("", ": no tasks (the file is empty)");
    s_refused("\n  \n", ": no tasks (the file is empty)");
    s_refused("{\"id\":\"a\",\"d\":[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]}\n",
              ":1: nested deeper than 15 levels");

    char big[300];
    memset(big, 'x', sizeof big);
    big[sizeof big - 1] = 0;
    char line[400];
    snprintf(line, sizeof line, "{\"id\":\"%s\"}\n", big);
    s_refused(line, ":1: \"id\" is longer than 255 bytes");
}

/* The duplicate message names both places, the later one first. */
static void duplicate_ids_across_files_name_both(void **state)
{
    char a[128], b[128], spec[300], err[512], want[512];
    s_file("a.jsonl", "{\"id\":\"x\"}\n{\"id\":\"y\"}\n", a, sizeof a);
    s_file("b.jsonl", "{\"id\":\"z\"}\n{\"id\":\"y\"}\n", b, sizeof b);
    snprintf(spec, sizeof spec, "train=%s,valid_unseen=%s", a, b);
    assert_null(tasks_load_files(spec, err, sizeof err));
    snprintf(want, sizeof want, "%s:2: id \"y\" is already the id of %s:2", b, a);
    assert_string_equal(err, want);
}

static void bad_specs_and_unreadable_files_are_one_line(void **state)
{
    char err[512], want[512];
    assert_null(tasks_load_files("", err, sizeof err));
    assert_string_equal(err, "no SPLIT=PATH given");
    assert_null(tasks_load_files("train", err, sizeof err));
    assert_string_equal(err, "'train' is not SPLIT=PATH (a split is 1..64 characters of A-Z a-z "
                             "0-9 _ . -)");
    assert_null(tasks_load_files("=x.jsonl", err, sizeof err));
    assert_non_null(strstr(err, "is not SPLIT=PATH"));
    assert_null(tasks_load_files("tr/ain=x.jsonl", err, sizeof err));
    assert_non_null(strstr(err, "is not SPLIT=PATH"));
    snprintf(want, sizeof want, "%s/nosuch.jsonl: cannot read: No such file or directory", s_dir);
    char spec[300];
    snprintf(spec, sizeof spec, "train=%s/nosuch.jsonl", s_dir);
    assert_null(tasks_load_files(spec, err, sizeof err));
    assert_string_equal(err, want);
    char p[128];
    s_file("ok.jsonl", "{\"id\":\"a\"}\n", p, sizeof p);
    snprintf(spec, sizeof spec, "train=%s,train=%s", p, p);
    assert_null(tasks_load_files(spec, err, sizeof err));
    assert_string_equal(err, "split 'train' is given twice");
}

/* A task's data goes from the file to a JOB, back out of it, into a RESET and out again,
 * byte for byte. */
static void task_data_passes_through_job_and_reset(void **state)
{
    char p[128], spec[200], err[512];
    s_file("t.jsonl", "{\"id\":\"copy-1\",\"type\":\"copy\",\"word\":\"amber\",\"n\":[1,2,3]}\n", p,
           sizeof p);
    snprintf(spec, sizeof spec, "train=%s", p);
    tasks_t *ts = tasks_load_files(spec, err, sizeof err);
    assert_non_null(ts);
    const uint8_t *td;
    size_t tdlen;
    assert_true(tasks_data(ts, "copy-1", &td, &tdlen));

    proto_msg_t job;
    proto_msg_init(&job, PROTO_JOB);
    job.u.job.job_id = "j1";
    job.u.job.run = "r";
    job.u.job.group = "g";
    job.u.job.group_size = 2;
    job.u.job.task = "copy-1";
    job.u.job.task_data = td;
    job.u.job.task_data_len = tdlen;
    sr_buf_t b = SR_BUF_INIT;
    assert_int_equal(proto_encode(&job, &b), SR_OK);
    proto_msg_t got;
    proto_err_t perr;
    assert_int_equal(proto_decode(b.data, b.len, &got, &perr), SR_OK);
    assert_int_equal(got.u.job.task_data_len, tdlen);
    assert_memory_equal(got.u.job.task_data, td, tdlen);

    proto_msg_t reset;
    proto_msg_init(&reset, PROTO_RESET);
    reset.u.reset.session = "s";
    reset.u.reset.task = got.u.job.task;
    reset.u.reset.task_data = got.u.job.task_data;
    reset.u.reset.task_data_len = got.u.job.task_data_len;
    b.len = 0;
    assert_int_equal(proto_encode(&reset, &b), SR_OK);
    proto_msg_t got2;
    assert_int_equal(proto_decode(b.data, b.len, &got2, &perr), SR_OK);
    assert_string_equal(got2.u.reset.task, "copy-1");
    assert_int_equal(got2.u.reset.task_data_len, tdlen);
    assert_memory_equal(got2.u.reset.task_data, td, tdlen);
    proto_msg_clear(&got2);
    proto_msg_clear(&got);
    sr_buf_free(&b);
    tasks_destroy(&ts);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sources_are_chosen_by_kind),
        cmocka_unit_test(household_source_makes_generated_ids_and_types),
        cmocka_unit_test(file_source_reads_ids_types_env_and_objects),
        cmocka_unit_test(bad_files_name_file_and_line),
        cmocka_unit_test(duplicate_ids_across_files_name_both),
        cmocka_unit_test(bad_specs_and_unreadable_files_are_one_line),
        cmocka_unit_test(task_data_passes_through_job_and_reset),
    };
    int rc = s_setup(NULL);
    if (rc != 0)
        return 1;
    rc = harness_run_("tasks", tests, SR_ARRAY_LEN(tests), argc, argv);
    s_teardown(NULL);
    return rc;
}
