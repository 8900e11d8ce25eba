/*
 * test_proto.c — the wire codec: round trips of every message type field by field, defaults of
 * optional fields, and malformed inputs, each checked for its specific error (field and reason),
 * plus a seeded random-mutation loop.
 *
 * Malformed messages are made from valid ones by s_edit: it unpacks a valid encoding and packs it
 * again with one field (named by a path such as "steps.1.action") dropped or replaced by another
 * value, possibly raw bytes. So every case differs from a valid message in exactly one place.
 */
#include "tests/harness.h"
#include "common/proto.h"

#include <math.h>
#include <pthread.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------
 * Sample messages
 * ------------------------------------------------------------------------------------------- */

static void s_sample(proto_msg_t *m, proto_type_t type);

static proto_chat_msg_t s_chat[2] = {
    {.role = "system", .content = "You are in a house. Goal: put a clean apple in the fridge."},
    {.role = "user", .content = "You arrive at countertop 1. On the countertop 1, you see an apple 1."},
};

static proto_result_step_t s_steps[3] = {
    {.i = 0, .action = "go to countertop 1", .raw = "<think>look</think><action>go to countertop 1</action>",
     .obs = "You arrive at countertop 1.", .reward = 0.0, .done = false, .prompt_tokens = 120,
     .completion_tokens = 14, .has_logprob = true, .logprob = -3.25, .format_error = false,
     .latency_ms = 12.5, .has_t = true, .t_ms = 1796083200123.456, .messages = s_chat,
     .messages_len = 2},
    {.i = 1, .action = "take apple 1 from countertop 1", .raw = "take apple 1 from countertop 1",
     .obs = "You pick up the apple 1 from the countertop 1.", .reward = 0.0, .prompt_tokens = 150,
     .completion_tokens = 9, .format_error = true, .latency_ms = 8.0,
     .reasoning = "The apple is on the countertop; take it first.", .has_reasoning_tokens = true,
     .reasoning_tokens = 11, .model = "selroll-policy-v4", .has_served_version = true,
     .served_version = 4, .text_truncated = true},
    {.i = 2, .action = "move apple 1 to fridge 1", .raw = "<action>move apple 1 to fridge 1</action>",
     .obs = "You move the apple 1 to the fridge 1.", .reward = 1.0, .done = true,
     .prompt_tokens = 170, .completion_tokens = 11, .has_logprob = true, .logprob = -0.5,
     .latency_ms = 9.75, .usage_unknown = true, .model = "Qwen/Qwen3-8B"},
};

static proto_result_t s_result(void)
{
    proto_result_t r = {
        .job_id = "j-42", .epoch = 3, .run = "run-1", .group = "g-7", .traj = 5,
        .task = "household/train/17", .status = "done", .reward = 1.0, .won = true, .n_steps = 3,
        .llm_calls = 3, .prompt_tokens = 440, .completion_tokens = 34, .aborted_tokens = 7,
        .wall_ms = 1234, .error = NULL, .usage_unknown_steps = 1, .steps = s_steps, .steps_len = 3};
    return r;
}

static const char *s_admissible[3] = {"go to cabinet 1", "go to fridge 1", "look"};
static const char *s_envw[2] = {"tcp://10.0.0.1:5560", "tcp://10.0.0.2:5560"};
static proto_lease_t s_leases[2] = {{.job_id = "j-1", .epoch = 0}, {.job_id = "j-2", .epoch = 9}};
static int64_t s_keep[2] = {2, 6};
static double s_rewards[2] = {1.0, 0.0};
static double s_advs[2] = {0.999999, -0.999999};
static double s_advs_raw[2] = {0.4999995, -0.4999995};
static proto_result_t s_trajs[2];
static proto_group_t s_groups[1];
static proto_stat_t s_stats[2] = {{.name = "zv_ratio", .value = 0.4}, {.name = "wall_s", .value = 61.5}};

static void s_sample(proto_msg_t *m, proto_type_t type)
{
    proto_msg_init(m, type);
    switch (type) {
    case PROTO_HELLO:
        m->u.hello = (proto_hello_t){.actor_id = "actor-1", .role = "actor", .slots = 16,
                                     .host = "node-3", .pid = 4242,
                                     .policy = "http://127.0.0.1:8000/v1", .version = "0.1.0"};
        break;
    case PROTO_WELCOME:
        m->u.welcome = (proto_welcome_t){.run = "run-1", .actor_id = "actor-1", .lease_ms = 30000,
                                         .heartbeat_ms = 1000, .bus_pub = "tcp://coord:5556",
                                         .bus_sub = "tcp://coord:5557", .policy_version = 4,
                                         .env_workers = s_envw, .env_workers_len = 2};
        break;
    case PROTO_CREDIT: m->u.credit.credits = 8; break;
    case PROTO_JOB:
        m->u.job = (proto_job_t){.job_id = "j-42", .epoch = 3, .run = "run-1", .group = "g-7",
                                 .traj = 5, .group_size = 8, .task = "household/train/17",
                                 .iteration = 12, .policy_version = 4,
                                 .seed = 18446744073709551615ull, .temperature = 0.7,
                                 .top_p = 0.95, .max_steps = 30, .max_tokens = 512, .eval = true,
                                 .lease_ms = 60000};
        break;
    case PROTO_RESULT: m->u.result = s_result(); break;
    case PROTO_HEARTBEAT:
        m->u.heartbeat = (proto_heartbeat_t){.actor_id = "actor-1", .running = 2, .free = 14,
                                             .leases = s_leases, .leases_len = 2};
        break;
    case PROTO_BYE:
        m->u.bye = (proto_bye_t){.actor_id = "actor-1", .reason = "shutdown", .drain = true};
        break;
    case PROTO_RESULT_ACK:
        m->u.result_ack = (proto_result_ack_t){.job_id = "j-42", .epoch = 3, .ok = false,
                                               .reason = "stale epoch 3 (current 4)"};
        break;
    case PROTO_ACTION:
        m->u.action = (proto_action_t){.run = "run-1", .group = "g-7", .traj = 3, .step = 10,
                                       .action = "open fridge 1", .ended = false, .reward = 0.0,
                                       .has_won = true, .won = false, .actor_id = "actor-1",
                                       .group_size = 8, .task = "household/train/17"};
        break;
    case PROTO_CANCEL:
        m->u.cancel = (proto_cancel_t){.run = "run-1", .group = "g-7", .step = 10, .d = 0.0625,
                                       .reason = "converged", .keep = s_keep, .keep_len = 2};
        break;
    case PROTO_POLICY_VERSION:
        m->u.policy_version = (proto_policy_version_t){.run = "run-1", .version = 5, .iteration = 13};
        break;
    case PROTO_RESET:
        m->u.reset = (proto_reset_t){.rid = 77, .session = "actor-1/3", .task = "household/train/17",
                                     .has_seed = true, .seed = 99, .max_steps = 30};
        break;
    case PROTO_STEP:
        m->u.step = (proto_step_t){.rid = 78, .session = "actor-1/3", .action = "go to fridge 1"};
        break;
    case PROTO_CLOSE: m->u.close = (proto_close_t){.rid = 79, .session = "actor-1/3"}; break;
    case PROTO_OBS:
        m->u.obs = (proto_obs_t){.rid = 78, .session = "actor-1/3",
                                 .obs = "You arrive at fridge 1. The fridge 1 is closed.",
                                 .admissible = s_admissible, .admissible_len = 3, .reward = 0.0,
                                 .done = false, .won = false, .step = 4,
                                 .goal = "Your task is to: put a cool apple in fridge."};
        break;
    case PROTO_ERROR:
        m->u.error = (proto_error_t){.has_rid = true, .rid = 80, .code = "unknown_session",
                                     .msg = "no session actor-1/9", .session = "actor-1/9"};
        break;
    case PROTO_BATCH:
        s_trajs[0] = s_result();
        s_trajs[1] = s_result();
        s_trajs[1].traj = 6;
        s_trajs[1].status = "cancelled";
        s_trajs[1].reward = 0.0;
        s_trajs[1].won = false;
        s_trajs[1].steps_len = 1;
        s_trajs[1].error = "cancelled by gate";
        proto_group_init(&s_groups[0]);
        s_groups[0].group = "g-7";
        s_groups[0].task = "household/train/17";
        s_groups[0].weight = 2.5;
        s_groups[0].rewards = s_rewards;
        s_groups[0].rewards_len = 2;
        s_groups[0].advantages = s_advs;
        s_groups[0].advantages_len = 2;
        s_groups[0].advantages_raw = s_advs_raw;
        s_groups[0].advantages_raw_len = 2;
        s_groups[0].audit_weight = 2.0;
        s_groups[0].trajectories = s_trajs;
        s_groups[0].trajectories_len = 2;
        m->u.batch = (proto_batch_t){.run = "run-1", .iteration = 12, .policy_version = 4,
                                     .groups = s_groups, .groups_len = 1, .stats = s_stats,
                                     .stats_len = 2, .estimator = "grpo"};
        break;
    case PROTO_WEIGHTS_READY:
        m->u.weights_ready = (proto_weights_ready_t){.run = "run-1", .version = 5, .iteration = 12,
                                                     .has_loss = true, .loss = 0.125,
                                                     .info = "grad_norm=1.2", .ok = true};
        break;
    default: fail();
    }
}

/* s_encoded returns a fresh buffer holding the sample of type. */
static sr_buf_t s_encoded(proto_type_t type)
{
    proto_msg_t m;
    sr_buf_t b = SR_BUF_INIT;
    s_sample(&m, type);
    assert_int_equal(proto_encode(&m, &b), SR_OK);
    return b;
}

static void s_roundtrip(proto_type_t type, proto_msg_t *in, proto_msg_t *out)
{
    sr_buf_t b = SR_BUF_INIT;
    proto_err_t err;
    s_sample(in, type);
    assert_int_equal(proto_encode(in, &b), SR_OK);
    assert_int_equal(proto_peek_type(b.data, b.len), type);
    int rc = proto_decode(b.data, b.len, out, &err);
    if (rc != SR_OK)
        fail_msg("decode %s: %s: %s", proto_type_name(type), err.field, err.reason);
    assert_int_equal(out->type, type);
    sr_buf_free(&b);
}

/* ---------------------------------------------------------------------------------------------
 * s_edit: re-pack a valid message with one change
 * ------------------------------------------------------------------------------------------- */

typedef enum { E_DROP, E_INT, E_UINT, E_STR, E_RAW, E_BOOL, E_NIL, E_MAP, E_ARRAY, E_FLOAT } s_op_kind_t;

typedef struct {
    s_op_kind_t kind;
    int64_t i;
    double f;
    const char *s; /* E_STR body or E_RAW bytes */
    size_t n;      /* their length */
} s_op_t;

static s_op_t s_drop(void) { return (s_op_t){.kind = E_DROP}; }
static s_op_t s_int(int64_t v) { return (s_op_t){.kind = E_INT, .i = v}; }
static s_op_t s_uint(uint64_t v) { return (s_op_t){.kind = E_UINT, .i = (int64_t)v}; }
static s_op_t s_float(double v) { return (s_op_t){.kind = E_FLOAT, .f = v}; }
static s_op_t s_strv(const char *s) { return (s_op_t){.kind = E_STR, .s = s, .n = strlen(s)}; }
static s_op_t s_strn(const char *s, size_t n) { return (s_op_t){.kind = E_STR, .s = s, .n = n}; }
static s_op_t s_raw(const char *s, size_t n) { return (s_op_t){.kind = E_RAW, .s = s, .n = n}; }
static s_op_t s_boolv(bool b) { return (s_op_t){.kind = E_BOOL, .i = b}; }
static s_op_t s_nil(void) { return (s_op_t){.kind = E_NIL}; }
static s_op_t s_emptymap(void) { return (s_op_t){.kind = E_MAP}; }
static s_op_t s_emptyarr(void) { return (s_op_t){.kind = E_ARRAY}; }

static void s_put_op(msgpack_packer *pk, const s_op_t *op)
{
    switch (op->kind) {
    case E_INT: msgpack_pack_int64(pk, op->i); break;
    case E_UINT: msgpack_pack_uint64(pk, (uint64_t)op->i); break;
    case E_FLOAT: msgpack_pack_double(pk, op->f); break;
    case E_STR:
        msgpack_pack_str(pk, op->n);
        msgpack_pack_str_body(pk, op->s, op->n);
        break;
    case E_RAW: pk->callback(pk->data, op->s, op->n); break;
    case E_BOOL: op->i ? msgpack_pack_true(pk) : msgpack_pack_false(pk); break;
    case E_NIL: msgpack_pack_nil(pk); break;
    case E_MAP: msgpack_pack_map(pk, 0); break;
    case E_ARRAY: msgpack_pack_array(pk, 0); break;
    default: break;
    }
}

/* s_repack packs o, applying op at the dotted path (map keys, or array indexes as numbers).
 * A path naming an absent map key adds the key with the op's value. */
static void s_repack(msgpack_packer *pk, const msgpack_object *o, const char *path,
                     const s_op_t *op)
{
    if (!path) {
        msgpack_pack_object(pk, *o);
        return;
    }
    const char *dot = strchr(path, '.');
    size_t seg = dot ? (size_t)(dot - path) : strlen(path);
    const char *rest = dot ? dot + 1 : NULL;
    if (o->type == MSGPACK_OBJECT_ARRAY) {
        size_t idx = (size_t)atol(path);
        msgpack_pack_array(pk, o->via.array.size);
        for (uint32_t i = 0; i < o->via.array.size; i++) {
            if (i == idx && !rest)
                s_put_op(pk, op);
            else
                s_repack(pk, &o->via.array.ptr[i], i == idx ? rest : NULL, op);
        }
        return;
    }
    assert_int_equal(o->type, MSGPACK_OBJECT_MAP);
    int found = -1;
    for (uint32_t i = 0; i < o->via.map.size; i++) {
        const msgpack_object *k = &o->via.map.ptr[i].key;
        if (k->via.str.size == seg && memcmp(k->via.str.ptr, path, seg) == 0)
            found = (int)i;
    }
    uint32_t n = o->via.map.size;
    if (found >= 0 && !rest && op->kind == E_DROP)
        n--;
    if (found < 0)
        n++;
    msgpack_pack_map(pk, n);
    for (uint32_t i = 0; i < o->via.map.size; i++) {
        if ((int)i == found && !rest && op->kind == E_DROP)
            continue;
        msgpack_pack_object(pk, o->via.map.ptr[i].key);
        if ((int)i == found && !rest)
            s_put_op(pk, op);
        else
            s_repack(pk, &o->via.map.ptr[i].val, (int)i == found ? rest : NULL, op);
    }
    if (found < 0) {
        msgpack_pack_str(pk, seg);
        msgpack_pack_str_body(pk, path, seg);
        s_put_op(pk, op);
    }
}

/* s_edit returns the sample of type with op applied at path (a heap buffer the caller frees). */
static msgpack_sbuffer s_edit(proto_type_t type, const char *path, s_op_t op)
{
    sr_buf_t b = s_encoded(type);
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    size_t off = 0;
    assert_int_equal(msgpack_unpack_next(&up, (const char *)b.data, b.len, &off),
                     MSGPACK_UNPACK_SUCCESS);
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    s_repack(&pk, &up.data, path, &op);
    msgpack_unpacked_destroy(&up);
    sr_buf_free(&b);
    return sb;
}

/* s_expect decodes buf and checks the error code, the field and the start of the reason; a
 * failed decode must also leave the message zeroed. */
static void s_expect(const void *buf, size_t len, int rc, const char *field, const char *reason)
{
    proto_msg_t m;
    proto_err_t err;
    int got = proto_decode(buf, len, &m, &err);
    if (got == SR_OK)
        proto_msg_clear(&m);
    if (got != rc || strcmp(err.field, field) != 0 || strncmp(err.reason, reason, strlen(reason)) != 0)
        fail_msg("want rc %d field '%s' reason '%s...'; got rc %d field '%s' reason '%s'", rc, field,
                 reason, got, err.field, err.reason);
    assert_int_equal(err.rc, rc);
    proto_msg_t zero;
    memset(&zero, 0, sizeof zero);
    assert_memory_equal(&m, &zero, sizeof m);
}

/* s_expect_edit: the sample of type with op at path fails with rc, field and reason. */
static void s_expect_edit(proto_type_t type, const char *path, s_op_t op, int rc,
                          const char *field, const char *reason)
{
    msgpack_sbuffer sb = s_edit(type, path, op);
    s_expect(sb.data, sb.size, rc, field, reason);
    msgpack_sbuffer_destroy(&sb);
}

/* s_decode_edit: the sample of type with op at path decodes; the caller clears out. */
static void s_decode_edit(proto_type_t type, const char *path, s_op_t op, proto_msg_t *out)
{
    msgpack_sbuffer sb = s_edit(type, path, op);
    proto_err_t err;
    int rc = proto_decode(sb.data, sb.size, out, &err);
    if (rc != SR_OK)
        fail_msg("decode: %s: %s", err.field, err.reason);
    msgpack_sbuffer_destroy(&sb);
}

/* ---------------------------------------------------------------------------------------------
 * Round trips
 * ------------------------------------------------------------------------------------------- */

static void hello_round_trips(void **state)
{
    proto_msg_t in, out;
    s_roundtrip(PROTO_HELLO, &in, &out);
    assert_string_equal(out.u.hello.actor_id, "actor-1");
    assert_string_equal(out.u.hello.role, "actor");
    assert_int_equal(out.u.hello.slots, 16);
    assert_string_equal(out.u.hello.host, "node-3");
    assert_int_equal(out.u.hello.pid, 4242);
    assert_string_equal(out.u.hello.policy, "http://127.0.0.1:8000/v1");
    assert_string_equal(out.u.hello.version, "0.1.0");
    proto_msg_clear(&out);
    assert_int_equal(out.type, PROTO_NONE);
    assert_null(out.u.hello.actor_id);
}

static void hello_optional_fields_absent_are_null(void **state)
{
    proto_msg_t m;
    sr_buf_t b = SR_BUF_INIT;
    s_sample(&m, PROTO_HELLO);
    m.u.hello.policy = NULL;
    m.u.hello.version = NULL;
    assert_int_equal(proto_encode(&m, &b), SR_OK);
    proto_msg_t out;
    assert_int_equal(proto_decode(b.data, b.len, &out, NULL), SR_OK);
    assert_null(out.u.hello.policy);
    assert_null(out.u.hello.version);
    assert_string_equal(out.u.hello.host, "node-3");
    proto_msg_clear(&out);
    sr_buf_free(&b);
}

static void welcome_round_trips_with_and_without_env_workers(void **state)
{
    proto_msg_t in, out;
    s_roundtrip(PROTO_WELCOME, &in, &out);
    proto_welcome_t *w = &out.u.welcome;
    assert_string_equal(w->run, "run-1");
    assert_string_equal(w->actor_id, "actor-1");
    assert_int_equal(w->lease_ms, 30000);
    assert_int_equal(w->heartbeat_ms, 1000);
    assert_string_equal(w->bus_pub, "tcp://coord:5556");
    assert_string_equal(w->bus_sub, "tcp://coord:5557");
    assert_int_equal(w->policy_version, 4);
    assert_int_equal(w->env_workers_len, 2);
    assert_string_equal(w->env_workers[0], "tcp://10.0.0.1:5560");
    assert_string_equal(w->env_workers[1], "tcp://10.0.0.2:5560");
    proto_msg_clear(&out);

    s_decode_edit(PROTO_WELCOME, "env_workers", s_drop(), &out);
    assert_int_equal(out.u.welcome.env_workers_len, 0);
    assert_null(out.u.welcome.env_workers);
    proto_msg_clear(&out);
}

/* env_kinds rides beside env_workers, entry for entry; "" is an env worker of unknown kind. */
static void welcome_carries_env_kinds_parallel_to_env_workers(void **state)
{
    static const char *kinds[2] = {"household", ""};
    proto_msg_t in, out;
    s_sample(&in, PROTO_WELCOME);
    in.u.welcome.env_kinds = kinds;
    in.u.welcome.env_kinds_len = 2;
    sr_buf_t b = SR_BUF_INIT;
    assert_int_equal(proto_encode(&in, &b), SR_OK);
    assert_int_equal(proto_decode(b.data, b.len, &out, NULL), SR_OK);
    assert_int_equal(out.u.welcome.env_kinds_len, 2);
    assert_string_equal(out.u.welcome.env_kinds[0], "household");
    assert_string_equal(out.u.welcome.env_kinds[1], "");
    assert_string_equal(out.u.welcome.env_workers[1], "tcp://10.0.0.2:5560");
    proto_msg_clear(&out);

    /* A list of another length than env_workers is refused both ways. */
    in.u.welcome.env_kinds_len = 1;
    b.len = 0;
    assert_int_equal(proto_encode(&in, &b), SR_EINVAL);
    sr_buf_free(&b);
    s_expect_edit(PROTO_WELCOME, "env_kinds", s_emptyarr(), SR_EPROTO, "env_kinds",
                  "0 entries, but env_workers has 2");
    s_expect_edit(PROTO_WELCOME, "env_kinds", s_strv("household"), SR_EPROTO, "env_kinds",
                  "not an array");

    /* Absent (or nil): every kind unknown. */
    s_roundtrip(PROTO_WELCOME, &in, &out);
    assert_null(out.u.welcome.env_kinds);
    assert_int_equal(out.u.welcome.env_kinds_len, 0);
    proto_msg_clear(&out);
    s_decode_edit(PROTO_WELCOME, "env_kinds", s_nil(), &out);
    assert_int_equal(out.u.welcome.env_kinds_len, 0);
    proto_msg_clear(&out);
}

/* JOB.env names the env-worker kind of the task; absent when the task set says none. */
static void job_carries_the_tasks_env(void **state)
{
    proto_msg_t in, out;
    s_sample(&in, PROTO_JOB);
    in.u.job.env = "games";
    sr_buf_t b = SR_BUF_INIT;
    assert_int_equal(proto_encode(&in, &b), SR_OK);
    assert_int_equal(proto_decode(b.data, b.len, &out, NULL), SR_OK);
    assert_string_equal(out.u.job.env, "games");
    assert_string_equal(out.u.job.task, "household/train/17");
    proto_msg_clear(&out);
    sr_buf_free(&b);

    s_roundtrip(PROTO_JOB, &in, &out);
    assert_null(out.u.job.env);
    proto_msg_clear(&out);
    s_expect_edit(PROTO_JOB, "env", s_int(3), SR_EPROTO, "env", "not a string");
    char big[PROTO_MAX_ID + 2];
    memset(big, 'k', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    s_expect_edit(PROTO_JOB, "env", s_strv(big), SR_ETOOBIG, "env", "string of 257 bytes");
}

static void credit_round_trips(void **state)
{
    proto_msg_t in, out;
    s_roundtrip(PROTO_CREDIT, &in, &out);
    assert_int_equal(out.u.credit.credits, 8);
    proto_msg_clear(&out);
}

static void job_round_trips(void **state)
{
    proto_msg_t in, out;
    s_roundtrip(PROTO_JOB, &in, &out);
    proto_job_t *j = &out.u.job;
    assert_string_equal(j->job_id, "j-42");
    assert_int_equal(j->epoch, 3);
    assert_string_equal(j->run, "run-1");
    assert_string_equal(j->group, "g-7");
    assert_int_equal(j->traj, 5);
    assert_int_equal(j->group_size, 8);
    assert_string_equal(j->task, "household/train/17");
    assert_int_equal(j->iteration, 12);
    assert_int_equal(j->policy_version, 4);
    assert_true(j->seed == UINT64_MAX);
    assert_true(j->temperature == 0.7);
    assert_true(j->top_p == 0.95);
    assert_int_equal(j->max_steps, 30);
    assert_int_equal(j->max_tokens, 512);
    assert_true(j->eval);
    assert_int_equal(j->lease_ms, 60000);
    proto_msg_clear(&out);
}

static void job_optional_fields_absent_take_defaults(void **state)
{
    proto_msg_t out;
    msgpack_sbuffer a = s_edit(PROTO_JOB, "top_p", s_drop());
    /* Drop the other two optional fields from the already edited message. */
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    size_t off = 0;
    assert_int_equal(msgpack_unpack_next(&up, a.data, a.size, &off), MSGPACK_UNPACK_SUCCESS);
    msgpack_sbuffer b, c;
    msgpack_sbuffer_init(&b);
    msgpack_sbuffer_init(&c);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &b, msgpack_sbuffer_write);
    s_op_t drop = s_drop();
    s_repack(&pk, &up.data, "max_tokens", &drop);
    msgpack_unpacked_destroy(&up);
    msgpack_unpacked_init(&up);
    off = 0;
    assert_int_equal(msgpack_unpack_next(&up, b.data, b.size, &off), MSGPACK_UNPACK_SUCCESS);
    msgpack_packer_init(&pk, &c, msgpack_sbuffer_write);
    s_op_t nil = s_nil(); /* nil counts as absent */
    s_repack(&pk, &up.data, "eval", &nil);
    msgpack_unpacked_destroy(&up);

    assert_int_equal(proto_decode(c.data, c.size, &out, NULL), SR_OK);
    assert_true(out.u.job.top_p == 1.0);
    assert_int_equal(out.u.job.max_tokens, 0);
    assert_false(out.u.job.eval);
    assert_int_equal(out.u.job.max_steps, 30);
    proto_msg_clear(&out);
    msgpack_sbuffer_destroy(&a);
    msgpack_sbuffer_destroy(&b);
    msgpack_sbuffer_destroy(&c);
}

static void s_assert_result(const proto_result_t *r, size_t nsteps)
{
    assert_string_equal(r->job_id, "j-42");
    assert_int_equal(r->epoch, 3);
    assert_string_equal(r->run, "run-1");
    assert_string_equal(r->group, "g-7");
    assert_string_equal(r->task, "household/train/17");
    assert_int_equal(r->n_steps, 3);
    assert_int_equal(r->llm_calls, 3);
    assert_int_equal(r->prompt_tokens, 440);
    assert_int_equal(r->completion_tokens, 34);
    assert_int_equal(r->aborted_tokens, 7);
    assert_int_equal(r->wall_ms, 1234);
    assert_int_equal(r->steps_len, nsteps);
    for (size_t i = 0; i < nsteps; i++) {
        const proto_result_step_t *a = &r->steps[i], *e = &s_steps[i];
        assert_int_equal(a->i, e->i);
        assert_string_equal(a->action, e->action);
        assert_string_equal(a->raw, e->raw);
        assert_string_equal(a->obs, e->obs);
        assert_true(a->reward == e->reward);
        assert_int_equal(a->done, e->done);
        assert_int_equal(a->prompt_tokens, e->prompt_tokens);
        assert_int_equal(a->completion_tokens, e->completion_tokens);
        assert_int_equal(a->has_logprob, e->has_logprob);
        if (e->has_logprob)
            assert_true(a->logprob == e->logprob);
        assert_int_equal(a->format_error, e->format_error);
        assert_true(a->latency_ms == e->latency_ms);
        assert_int_equal(a->has_t, e->has_t);
        if (e->has_t)
            assert_true(a->t_ms == e->t_ms);
        assert_int_equal(a->messages_len, e->messages_len);
        for (size_t k = 0; k < e->messages_len; k++) {
            assert_string_equal(a->messages[k].role, e->messages[k].role);
            assert_string_equal(a->messages[k].content, e->messages[k].content);
        }
        if (e->messages_len == 0)
            assert_null(a->messages);
        if (e->reasoning)
            assert_string_equal(a->reasoning, e->reasoning);
        else
            assert_null(a->reasoning);
        assert_int_equal(a->has_reasoning_tokens, e->has_reasoning_tokens);
        assert_int_equal(a->reasoning_tokens, e->reasoning_tokens);
        if (e->model)
            assert_string_equal(a->model, e->model);
        else
            assert_null(a->model);
        assert_int_equal(a->has_served_version, e->has_served_version);
        assert_int_equal(a->served_version, e->served_version);
        assert_int_equal(a->usage_unknown, e->usage_unknown);
        assert_int_equal(a->text_truncated, e->text_truncated);
    }
}

static void result_round_trips_with_nested_steps_and_messages(void **state)
{
    proto_msg_t in, out;
    s_roundtrip(PROTO_RESULT, &in, &out);
    proto_result_t *r = &out.u.result;
    s_assert_result(r, 3);
    assert_int_equal(r->traj, 5);
    assert_string_equal(r->status, "done");
    assert_true(r->reward == 1.0);
    assert_true(r->won);
    assert_null(r->error);
    assert_int_equal(r->usage_unknown_steps, 1);
    proto_msg_clear(&out);
}

static void result_optional_fields_absent_vs_present(void **state)
{
    proto_msg_t out;
    s_decode_edit(PROTO_RESULT, "aborted_tokens", s_drop(), &out);
    assert_int_equal(out.u.result.aborted_tokens, 0);
    assert_null(out.u.result.error);
    proto_msg_clear(&out);

    s_decode_edit(PROTO_RESULT, "error", s_strv("policy timed out"), &out);
    assert_string_equal(out.u.result.error, "policy timed out");
    proto_msg_clear(&out);

    s_decode_edit(PROTO_RESULT, "steps.0.logprob", s_drop(), &out);
    assert_false(out.u.result.steps[0].has_logprob);
    assert_true(out.u.result.steps[2].has_logprob);
    proto_msg_clear(&out);

    s_decode_edit(PROTO_RESULT, "steps.0.t_ms", s_drop(), &out);
    assert_false(out.u.result.steps[0].has_t);
    assert_false(out.u.result.steps[1].has_t);
    proto_msg_clear(&out);

    s_decode_edit(PROTO_RESULT, "steps.0.messages", s_drop(), &out);
    assert_int_equal(out.u.result.steps[0].messages_len, 0);
    assert_null(out.u.result.steps[0].messages);
    proto_msg_clear(&out);

    s_decode_edit(PROTO_RESULT, "steps", s_emptyarr(), &out);
    assert_int_equal(out.u.result.steps_len, 0);
    proto_msg_clear(&out);

    /* The backend fields of a step: absent ones read as unknown / false. */
    s_decode_edit(PROTO_RESULT, "usage_unknown_steps", s_drop(), &out);
    assert_int_equal(out.u.result.usage_unknown_steps, 0);
    const proto_result_step_t *st0 = &out.u.result.steps[0];
    assert_null(st0->reasoning);
    assert_null(st0->model);
    assert_false(st0->has_reasoning_tokens);
    assert_false(st0->has_served_version);
    assert_false(st0->usage_unknown);
    assert_false(st0->text_truncated);
    proto_msg_clear(&out);

    s_decode_edit(PROTO_RESULT, "steps.1.served_version", s_drop(), &out);
    assert_false(out.u.result.steps[1].has_served_version);
    assert_string_equal(out.u.result.steps[1].model, "selroll-policy-v4");
    proto_msg_clear(&out);

    s_decode_edit(PROTO_RESULT, "steps.1.served_version", s_int(0), &out);
    assert_true(out.u.result.steps[1].has_served_version);
    assert_int_equal(out.u.result.steps[1].served_version, 0);
    proto_msg_clear(&out);

    s_expect_edit(PROTO_RESULT, "steps.1.served_version", s_int(-1), SR_EPROTO,
                  "steps[1].served_version", "negative");
    s_expect_edit(PROTO_RESULT, "steps.1.reasoning", s_int(3), SR_EPROTO, "steps[1].reasoning",
                  "not a string");
    s_expect_edit(PROTO_RESULT, "usage_unknown_steps", s_int(5000), SR_EPROTO,
                  "usage_unknown_steps", "out of range");
}

/* A step's tokens travel as msgpack bin of little-endian int32 / float32 and come back exact. */
static void result_step_tokens_round_trip_as_little_endian_bins(void **state)
{
    (void)state;
    static const int32_t ids[] = {0, 1, 151645, INT32_MAX, 70000};
    static const float lps[] = {-0.25f, 0.0f, -1e-7f, -12.5f, -0.693147182f};
    static const int32_t pids[] = {9, 8, 7};
    proto_result_step_t st = s_steps[2];
    st.token_ids = ids;
    st.token_ids_len = 5;
    st.token_logprobs = lps;
    st.token_logprobs_len = 5;
    st.prompt_token_ids = pids;
    st.prompt_token_ids_len = 3;
    st.has_prompt_prefix = true;
    st.prompt_prefix = 40;
    st.tokens_mismatch = true;
    proto_msg_t in, out;
    proto_msg_init(&in, PROTO_RESULT);
    in.u.result = s_result();
    in.u.result.steps = &st;
    in.u.result.steps_len = 1;
    in.u.result.n_steps = 1;
    sr_buf_t b = SR_BUF_INIT;
    assert_int_equal(proto_encode(&in, &b), SR_OK);
    /* the ids' bin: 0xc4, 20 bytes, then 151645 = 0x0002505d as 5d 50 02 00 */
    static const uint8_t want[] = {0xc4, 20, 0, 0, 0, 0, 1, 0, 0, 0, 0x5d, 0x50, 0x02, 0x00};
    bool found = false;
    for (size_t i = 0; i + sizeof want <= b.len && !found; i++)
        found = memcmp(b.data + i, want, sizeof want) == 0;
    assert_true(found);
    proto_err_t err;
    assert_int_equal(proto_decode(b.data, b.len, &out, &err), SR_OK);
    const proto_result_step_t *d = &out.u.result.steps[0];
    assert_int_equal(d->token_ids_len, 5);
    assert_memory_equal(d->token_ids, ids, sizeof ids);
    assert_int_equal(d->token_logprobs_len, 5);
    assert_memory_equal(d->token_logprobs, lps, sizeof lps);
    assert_int_equal(d->prompt_token_ids_len, 3);
    assert_memory_equal(d->prompt_token_ids, pids, sizeof pids);
    assert_true(d->has_prompt_prefix);
    assert_int_equal(d->prompt_prefix, 40);
    assert_true(d->tokens_mismatch);
    proto_msg_clear(&out);
    sr_buf_free(&b);

    /* absent: all empty, no flags */
    st = s_steps[2];
    in.u.result.steps = &st;
    assert_int_equal(proto_encode(&in, &b), SR_OK);
    assert_int_equal(proto_decode(b.data, b.len, &out, &err), SR_OK);
    d = &out.u.result.steps[0];
    assert_null(d->token_ids);
    assert_int_equal(d->token_ids_len + d->token_logprobs_len + d->prompt_token_ids_len, 0);
    assert_false(d->has_prompt_prefix);
    assert_false(d->tokens_mismatch);
    proto_msg_clear(&out);
    sr_buf_free(&b);

    /* logprobs that are not one per id, and a ragged bin, are refused by name */
    st.token_ids = ids;
    st.token_ids_len = 5;
    st.token_logprobs = lps;
    st.token_logprobs_len = 4;
    assert_int_equal(proto_encode(&in, &b), SR_OK);
    assert_int_equal(proto_decode(b.data, b.len, &out, &err), SR_EPROTO);
    assert_string_equal(err.field, "steps[0].token_logprobs");
    sr_buf_free(&b);
    st.token_logprobs_len = 0;
    assert_int_equal(proto_encode(&in, &b), SR_OK);
    for (size_t i = 0; i + 2 <= b.len; i++)
        if (b.data[i] == 0xc4 && b.data[i + 1] == 20) {
            b.data[i + 1] = 19; /* 19 bytes of ids, and one byte more for the next key */
            break;
        }
    assert_int_not_equal(proto_decode(b.data, b.len, &out, &err), SR_OK);
    sr_buf_free(&b);
}

/* A logprob that is not finite (NaN, either infinity), wherever it is in the bin (first, last, at
 * an odd or even place, after a run of finite ones), is refused with its index. */
static void a_logprob_that_is_not_finite_is_refused_with_its_index(void **state)
{
    (void)state;
    enum { N = 9 };
    static const int32_t ids[N] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    static const float lps[N] = {-0.5f, 0.0f, -1.5f, -2.5f, 0.0f, -3.5f, -4.5f, -5.5f, -6.5f};
    const uint32_t bad[] = {0x7fc00000u, 0x7f800000u, 0xff800000u, 0x7f800001u, 0xffffffffu};
    proto_result_step_t st = s_steps[2];
    st.token_ids = ids;
    st.token_ids_len = N;
    st.token_logprobs = lps;
    st.token_logprobs_len = N;
    proto_msg_t in, out;
    proto_msg_init(&in, PROTO_RESULT);
    in.u.result = s_result();
    in.u.result.steps = &st;
    in.u.result.steps_len = 1;
    in.u.result.n_steps = 1;
    sr_buf_t b = SR_BUF_INIT;
    assert_int_equal(proto_encode(&in, &b), SR_OK);
    /* the logprobs' bin: 0xc4, 36, then the floats little-endian */
    uint8_t want[2 + 4 * N] = {0xc4, 4 * N};
    for (size_t i = 0; i < N; i++) {
        uint32_t w;
        memcpy(&w, &lps[i], 4);
        for (int k = 0; k < 4; k++)
            want[2 + 4 * i + (size_t)k] = (uint8_t)(w >> (8 * k));
    }
    size_t at = 0;
    for (size_t i = 0; i + sizeof want <= b.len && !at; i++)
        if (memcmp(b.data + i, want, sizeof want) == 0)
            at = i + 2;
    assert_true(at > 0);
    proto_err_t err;
    assert_int_equal(proto_decode(b.data, b.len, &out, &err), SR_OK);
    proto_msg_clear(&out);
    for (size_t e = 0; e < N; e++) {
        for (size_t v = 0; v < SR_ARRAY_LEN(bad); v++) {
            uint8_t keep[4];
            memcpy(keep, b.data + at + 4 * e, 4);
            for (int k = 0; k < 4; k++)
                b.data[at + 4 * e + (size_t)k] = (uint8_t)(bad[v] >> (8 * k));
            assert_int_equal(proto_decode(b.data, b.len, &out, &err), SR_EPROTO);
            assert_string_equal(err.field, "steps[0].token_logprobs");
            char reason[64];
            snprintf(reason, sizeof reason, "element %zu is not a number", e);
            assert_string_equal(err.reason, reason);
            memcpy(b.data + at + 4 * e, keep, 4);
        }
    }
    /* two bad ones: the first is named */
    for (int k = 0; k < 4; k++) {
        b.data[at + 4 * 3 + (size_t)k] = (uint8_t)(bad[0] >> (8 * k));
        b.data[at + 4 * 6 + (size_t)k] = (uint8_t)(bad[1] >> (8 * k));
    }
    assert_int_equal(proto_decode(b.data, b.len, &out, &err), SR_EPROTO);
    assert_string_equal(err.reason, "element 3 is not a number");
    sr_buf_free(&b);
}

static void heartbeat_round_trips(void **state)
{
    proto_msg_t in, out;
    s_roundtrip(PROTO_HEARTBEAT, &in, &out);
    proto_heartbeat_t *h = &out.u.heartbeat;
    assert_string_equal(h->actor_id, "actor-1");
    assert_int_equal(h->running, 2);
    assert_int_equal(h->free, 14);
    assert_int_equal(h->leases_len, 2);
    assert_string_equal(h->leases[0].job_id, "j-1");
    assert_int_equal(h->leases[0].epoch, 0);
    assert_string_equal(h->leases[1].job_id, "j-2");
    assert_int_equal(h->leases[1].epoch, 9);
    proto_msg_clear(&out);
}

static void bye_round_trips_and_defaults(void **state)
{
    proto_msg_t in, out;
    s_roundtrip(PROTO_BYE, &in, &out);
    assert_string_equal(out.u.bye.actor_id, "actor-1");
    assert_string_equal(out.u.bye.reason, "shutdown");
    assert_true(out.u.bye.drain);
    proto_msg_clear(&out);
    s_decode_edit(PROTO_BYE, "drain", s_drop(), &out);
    assert_false(out.u.bye.drain);
    proto_msg_clear(&out);
    s_decode_edit(PROTO_BYE, "reason", s_drop(), &out);
    assert_null(out.u.bye.reason);
    proto_msg_clear(&out);
}

static void result_ack_round_trips_and_reason_is_optional(void **state)
{
    proto_msg_t in, out;
    s_roundtrip(PROTO_RESULT_ACK, &in, &out);
    assert_string_equal(out.u.result_ack.job_id, "j-42");
    assert_int_equal(out.u.result_ack.epoch, 3);
    assert_false(out.u.result_ack.ok);
    assert_string_equal(out.u.result_ack.reason, "stale epoch 3 (current 4)");
    proto_msg_clear(&out);
    s_decode_edit(PROTO_RESULT_ACK, "reason", s_drop(), &out);
    assert_null(out.u.result_ack.reason);
    proto_msg_clear(&out);
}

static void action_round_trips_and_won_is_optional(void **state)
{
    proto_msg_t in, out;
    s_roundtrip(PROTO_ACTION, &in, &out);
    proto_action_t *a = &out.u.action;
    assert_string_equal(a->run, "run-1");
    assert_string_equal(a->group, "g-7");
    assert_int_equal(a->traj, 3);
    assert_int_equal(a->step, 10);
    assert_string_equal(a->action, "open fridge 1");
    assert_false(a->ended);
    assert_true(a->reward == 0.0);
    assert_true(a->has_won);
    assert_false(a->won);
    assert_string_equal(a->actor_id, "actor-1");
    assert_int_equal(a->group_size, 8);
    assert_string_equal(a->task, "household/train/17");
    proto_msg_clear(&out);
    s_decode_edit(PROTO_ACTION, "won", s_drop(), &out);
    assert_false(out.u.action.has_won);
    proto_msg_clear(&out);
    s_decode_edit(PROTO_ACTION, "group_size", s_drop(), &out);
    assert_int_equal(out.u.action.group_size, 0);
    proto_msg_clear(&out);
    s_decode_edit(PROTO_ACTION, "task", s_drop(), &out);
    assert_null(out.u.action.task);
    proto_msg_clear(&out);
    s_decode_edit(PROTO_ACTION, "actor_id", s_drop(), &out);
    assert_null(out.u.action.actor_id);
    proto_msg_clear(&out);
}

static void cancel_round_trips_with_keep(void **state)
{
    proto_msg_t in, out;
    s_roundtrip(PROTO_CANCEL, &in, &out);
    proto_cancel_t *c = &out.u.cancel;
    assert_string_equal(c->run, "run-1");
    assert_string_equal(c->group, "g-7");
    assert_int_equal(c->step, 10);
    assert_true(c->d == 0.0625);
    assert_string_equal(c->reason, "converged");
    assert_int_equal(c->keep_len, 2);
    assert_int_equal(c->keep[0], 2);
    assert_int_equal(c->keep[1], 6);
    proto_msg_clear(&out);
    s_decode_edit(PROTO_CANCEL, "keep", s_drop(), &out);
    assert_int_equal(out.u.cancel.keep_len, 0);
    assert_null(out.u.cancel.keep);
    proto_msg_clear(&out);
}

static void policy_version_round_trips(void **state)
{
    proto_msg_t in, out;
    s_roundtrip(PROTO_POLICY_VERSION, &in, &out);
    assert_string_equal(out.u.policy_version.run, "run-1");
    assert_int_equal(out.u.policy_version.version, 5);
    assert_int_equal(out.u.policy_version.iteration, 13);
    proto_msg_clear(&out);
}

static void reset_round_trips_and_defaults(void **state)
{
    proto_msg_t in, out;
    s_roundtrip(PROTO_RESET, &in, &out);
    assert_int_equal(out.u.reset.rid, 77);
    assert_string_equal(out.u.reset.session, "actor-1/3");
    assert_string_equal(out.u.reset.task, "household/train/17");
    assert_true(out.u.reset.has_seed);
    assert_int_equal(out.u.reset.seed, 99);
    assert_int_equal(out.u.reset.max_steps, 30);
    proto_msg_clear(&out);
    s_decode_edit(PROTO_RESET, "max_steps", s_drop(), &out);
    assert_int_equal(out.u.reset.max_steps, 50);
    proto_msg_clear(&out);
    s_decode_edit(PROTO_RESET, "seed", s_drop(), &out);
    assert_false(out.u.reset.has_seed);
    proto_msg_clear(&out);
}

/* s_task_data packs {"id":"guess-3","type":"guess","n":[1,-2,2.5,"x"],"m":{"ok":true,"z":nil}}. */
static msgpack_sbuffer s_task_data(void)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 4);
    msgpack_pack_str_with_body(&pk, "id", 2);
    msgpack_pack_str_with_body(&pk, "guess-3", 7);
    msgpack_pack_str_with_body(&pk, "type", 4);
    msgpack_pack_str_with_body(&pk, "guess", 5);
    msgpack_pack_str_with_body(&pk, "n", 1);
    msgpack_pack_array(&pk, 4);
    msgpack_pack_int64(&pk, 1);
    msgpack_pack_int64(&pk, -2);
    msgpack_pack_double(&pk, 2.5);
    msgpack_pack_str_with_body(&pk, "x", 1);
    msgpack_pack_str_with_body(&pk, "m", 1);
    msgpack_pack_map(&pk, 2);
    msgpack_pack_str_with_body(&pk, "ok", 2);
    msgpack_pack_true(&pk);
    msgpack_pack_str_with_body(&pk, "z", 1);
    msgpack_pack_nil(&pk);
    return sb;
}

static void job_and_reset_carry_task_data_byte_for_byte(void **state)
{
    msgpack_sbuffer td = s_task_data();
    proto_type_t types[] = {PROTO_JOB, PROTO_RESET};
    for (size_t k = 0; k < 2; k++) {
        proto_msg_t in, out;
        s_sample(&in, types[k]);
        if (types[k] == PROTO_JOB) {
            in.u.job.task_data = (const uint8_t *)td.data;
            in.u.job.task_data_len = td.size;
        } else {
            in.u.reset.task_data = (const uint8_t *)td.data;
            in.u.reset.task_data_len = td.size;
        }
        sr_buf_t b = SR_BUF_INIT;
        assert_int_equal(proto_encode(&in, &b), SR_OK);
        proto_err_t err;
        assert_int_equal(proto_decode(b.data, b.len, &out, &err), SR_OK);
        const uint8_t *p = types[k] == PROTO_JOB ? out.u.job.task_data : out.u.reset.task_data;
        size_t n = types[k] == PROTO_JOB ? out.u.job.task_data_len : out.u.reset.task_data_len;
        assert_int_equal(n, td.size);
        assert_memory_equal(p, td.data, td.size);
        assert_string_equal(types[k] == PROTO_JOB ? out.u.job.task : out.u.reset.task,
                            "household/train/17");
        proto_msg_clear(&out);
        sr_buf_free(&b);
    }
    /* Without task_data the field is absent on the wire and NULL after decode. */
    proto_msg_t in, out;
    s_roundtrip(PROTO_JOB, &in, &out);
    assert_null(out.u.job.task_data);
    assert_int_equal(out.u.job.task_data_len, 0);
    proto_msg_clear(&out);
    msgpack_sbuffer_destroy(&td);
}

static void task_data_must_be_a_map(void **state)
{
    proto_msg_t out;
    proto_err_t err;
    msgpack_sbuffer sb = s_edit(PROTO_JOB, "task_data", s_strv("guess-3"));
    assert_int_equal(proto_decode(sb.data, sb.size, &out, &err), SR_EPROTO);
    assert_string_equal(err.field, "task_data");
    assert_string_equal(err.reason, "not a map");
    msgpack_sbuffer_destroy(&sb);
    sb = s_edit(PROTO_RESET, "task_data", s_emptyarr());
    assert_int_equal(proto_decode(sb.data, sb.size, &out, &err), SR_EPROTO);
    assert_string_equal(err.field, "task_data");
    msgpack_sbuffer_destroy(&sb);
    s_decode_edit(PROTO_RESET, "task_data", s_nil(), &out); /* nil counts as absent */
    assert_null(out.u.reset.task_data);
    proto_msg_clear(&out);
    s_decode_edit(PROTO_JOB, "task_data", s_emptymap(), &out);
    assert_int_equal(out.u.job.task_data_len, 1);
    assert_int_equal(out.u.job.task_data[0], 0x80);
    proto_msg_clear(&out);

    /* The encoder refuses bytes that do not start a map. */
    proto_msg_t in;
    s_sample(&in, PROTO_JOB);
    const uint8_t notmap[] = {0xa1, 'x'};
    in.u.job.task_data = notmap;
    in.u.job.task_data_len = sizeof notmap;
    sr_buf_t b = SR_BUF_INIT;
    assert_int_equal(proto_encode(&in, &b), SR_EINVAL);
    sr_buf_free(&b);
}

static void step_and_close_round_trip(void **state)
{
    proto_msg_t in, out;
    s_roundtrip(PROTO_STEP, &in, &out);
    assert_int_equal(out.u.step.rid, 78);
    assert_string_equal(out.u.step.session, "actor-1/3");
    assert_string_equal(out.u.step.action, "go to fridge 1");
    proto_msg_clear(&out);
    s_roundtrip(PROTO_CLOSE, &in, &out);
    assert_int_equal(out.u.close.rid, 79);
    assert_string_equal(out.u.close.session, "actor-1/3");
    proto_msg_clear(&out);
}

static void obs_round_trips(void **state)
{
    proto_msg_t in, out;
    s_roundtrip(PROTO_OBS, &in, &out);
    proto_obs_t *o = &out.u.obs;
    assert_int_equal(o->rid, 78);
    assert_string_equal(o->session, "actor-1/3");
    assert_string_equal(o->obs, "You arrive at fridge 1. The fridge 1 is closed.");
    assert_int_equal(o->admissible_len, 3);
    for (size_t i = 0; i < 3; i++)
        assert_string_equal(o->admissible[i], s_admissible[i]);
    assert_true(o->reward == 0.0);
    assert_false(o->done);
    assert_false(o->won);
    assert_int_equal(o->step, 4);
    assert_string_equal(o->goal, "Your task is to: put a cool apple in fridge.");
    proto_msg_clear(&out);
    s_decode_edit(PROTO_OBS, "goal", s_drop(), &out);
    assert_null(out.u.obs.goal);
    proto_msg_clear(&out);
}

/* The strings of the OBS below, when set (NULL: the sample's); s_obs_goal_off drops the goal. */
static const char *s_obs_session, *s_obs_text;
static bool s_obs_goal_off;

/* s_obs_with_list encodes the sample OBS with admissible list a (n strings), plainly (enc NULL)
 * or with the list pre-encoded by proto_encode_admissible; returns proto_encode's code. */
static int s_obs_with_list(const char **a, size_t n, bool pre, sr_buf_t *out)
{
    proto_msg_t m;
    s_sample(&m, PROTO_OBS);
    if (s_obs_session)
        m.u.obs.session = s_obs_session;
    if (s_obs_text)
        m.u.obs.obs = s_obs_text;
    if (s_obs_goal_off)
        m.u.obs.goal = NULL;
    m.u.obs.rid = UINT64_MAX - (n & 1);
    m.u.obs.step = 1000 + (int64_t)n;
    m.u.obs.done = n & 1;
    m.u.obs.reward = (double)n / 7;
    m.u.obs.admissible = a;
    m.u.obs.admissible_len = n;
    sr_buf_t enc = SR_BUF_INIT;
    if (pre) {
        int rc = proto_encode_admissible(a, NULL, n, &enc);
        if (rc != SR_OK) {
            sr_buf_free(&enc);
            return rc;
        }
        m.u.obs.admissible_enc = enc.data;
        m.u.obs.admissible_enc_len = enc.len;
        m.u.obs.admissible = NULL; /* not read */
        m.u.obs.admissible_len = 99;
    }
    int rc = proto_encode(&m, out);
    sr_buf_free(&enc);
    return rc;
}

/* An OBS whose admissible list was encoded beforehand is the same bytes as one encoded whole,
 * for lists of every header size; the list's encoder refuses what proto_encode refuses. */
static void obs_with_a_pre_encoded_list_is_the_same_bytes(void **state)
{
    static char pool[4096 * 302];
    static const char *a[PROTO_MAX_ADMISSIBLE + 1];
    size_t sizes[] = {0, 1, 3, 15, 16, 40, 255, 4096};
    char *p = pool;
    for (size_t i = 0; i < 4096; i++) {
        /* strings of 1 to 300 bytes: fixstr, str8 and str16 headers */
        size_t len = 1 + (i * 37) % 300;
        a[i] = p;
        for (size_t k = 0; k < len; k++)
            p[k] = (char)('a' + (i + k) % 26);
        p[len] = '\0';
        p += len + 1;
    }
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        sr_buf_t plain = SR_BUF_INIT, pre = SR_BUF_INIT;
        assert_int_equal(s_obs_with_list(a, sizes[s], false, &plain), SR_OK);
        assert_int_equal(s_obs_with_list(a, sizes[s], true, &pre), SR_OK);
        assert_int_equal(plain.len, pre.len);
        assert_memory_equal(plain.data, pre.data, plain.len);
        proto_msg_t out;
        proto_err_t err;
        assert_int_equal(proto_decode(pre.data, pre.len, &out, &err), SR_OK);
        assert_int_equal(out.u.obs.admissible_len, sizes[s]);
        proto_msg_clear(&out);
        /* the strings' lengths given: the same bytes */
        static uint32_t lens[PROTO_MAX_ADMISSIBLE];
        for (size_t i = 0; i < sizes[s]; i++)
            lens[i] = (uint32_t)strlen(a[i]);
        sr_buf_t counted = SR_BUF_INIT, given = SR_BUF_INIT;
        assert_int_equal(proto_encode_admissible(a, NULL, sizes[s], &counted), SR_OK);
        assert_int_equal(proto_encode_admissible(a, lens, sizes[s], &given), SR_OK);
        assert_int_equal(counted.len, given.len);
        assert_memory_equal(counted.data, given.data, counted.len);
        sr_buf_free(&counted);
        sr_buf_free(&given);
        sr_buf_free(&plain);
        sr_buf_free(&pre);
    }
    /* the OBS's own strings of every header size, the goal left out; and the errors of a NULL
     * session and of a text beyond the limit, the same with the list encoded beforehand */
    static char text[PROTO_MAX_TEXT + 2];
    memset(text, 'o', sizeof text - 1);
    static char sess[PROTO_MAX_ID + 2];
    memset(sess, 's', sizeof sess - 1);
    size_t text_lens[] = {0, 31, 32, 255, 256, 65535, PROTO_MAX_TEXT};
    size_t sess_lens[] = {1, 31, 200, PROTO_MAX_ID};
    for (size_t t = 0; t < sizeof text_lens / sizeof text_lens[0]; t++) {
        char *tx = strndup(text, text_lens[t]);
        char *se = strndup(sess, sess_lens[t % 4]);
        assert_non_null(tx);
        assert_non_null(se);
        s_obs_text = tx;
        s_obs_session = se;
        s_obs_goal_off = t & 1;
        sr_buf_t plain = SR_BUF_INIT, pre = SR_BUF_INIT;
        assert_int_equal(s_obs_with_list(a, 5 + t, false, &plain), SR_OK);
        assert_int_equal(s_obs_with_list(a, 5 + t, true, &pre), SR_OK);
        assert_int_equal(plain.len, pre.len);
        assert_memory_equal(plain.data, pre.data, plain.len);
        sr_buf_free(&plain);
        sr_buf_free(&pre);
        free(tx);
        free(se);
    }
    s_obs_goal_off = false;
    s_obs_session = NULL;
    s_obs_text = text; /* one byte beyond PROTO_MAX_TEXT */
    sr_buf_t b = SR_BUF_INIT;
    assert_int_equal(s_obs_with_list(a, 3, false, &b), SR_ETOOBIG);
    sr_buf_reset(&b);
    assert_int_equal(s_obs_with_list(a, 3, true, &b), SR_ETOOBIG);
    s_obs_text = NULL;
    s_obs_session = sess; /* one byte beyond PROTO_MAX_ID */
    sr_buf_reset(&b);
    assert_int_equal(s_obs_with_list(a, 3, false, &b), SR_ETOOBIG);
    sr_buf_reset(&b);
    assert_int_equal(s_obs_with_list(a, 3, true, &b), SR_ETOOBIG);
    s_obs_session = NULL;
    proto_msg_t m;
    s_sample(&m, PROTO_OBS);
    sr_buf_t enc = SR_BUF_INIT;
    assert_int_equal(proto_encode_admissible(a, NULL, 3, &enc), SR_OK);
    m.u.obs.admissible_enc = enc.data;
    m.u.obs.admissible_enc_len = enc.len;
    m.u.obs.session = NULL;
    sr_buf_reset(&b);
    assert_int_equal(proto_encode(&m, &b), SR_EINVAL);
    sr_buf_free(&enc);

    /* too many, NULL with items, a NULL string, a string beyond the limit: the same errors */
    assert_int_equal(proto_encode_admissible(a, NULL, PROTO_MAX_ADMISSIBLE + 1, &b), SR_ETOOBIG);
    sr_buf_reset(&b);
    assert_int_equal(s_obs_with_list(a, PROTO_MAX_ADMISSIBLE + 1, false, &b), SR_ETOOBIG);
    sr_buf_reset(&b);
    assert_int_equal(proto_encode_admissible(NULL, NULL, 2, &b), SR_EINVAL);
    sr_buf_reset(&b);
    assert_int_equal(s_obs_with_list(NULL, 2, false, &b), SR_EINVAL);
    const char *with_null[2] = {"look", NULL};
    sr_buf_reset(&b);
    assert_int_equal(proto_encode_admissible(with_null, NULL, 2, &b), SR_EINVAL);
    sr_buf_reset(&b);
    assert_int_equal(s_obs_with_list(with_null, 2, false, &b), SR_EINVAL);
    char *long_one = malloc(PROTO_MAX_ACTION + 2);
    assert_non_null(long_one);
    memset(long_one, 'x', PROTO_MAX_ACTION + 1);
    long_one[PROTO_MAX_ACTION + 1] = '\0';
    const char *too_long[1] = {long_one};
    sr_buf_reset(&b);
    assert_int_equal(proto_encode_admissible(too_long, NULL, 1, &b), SR_ETOOBIG);
    sr_buf_reset(&b);
    assert_int_equal(s_obs_with_list(too_long, 1, false, &b), SR_ETOOBIG);
    assert_int_equal(proto_encode_admissible(a, NULL, 1, NULL), SR_EINVAL);
    free(long_one);
    sr_buf_free(&b);
}

static void error_round_trips_and_rid_is_optional(void **state)
{
    proto_msg_t in, out;
    s_roundtrip(PROTO_ERROR, &in, &out);
    assert_true(out.u.error.has_rid);
    assert_int_equal(out.u.error.rid, 80);
    assert_string_equal(out.u.error.code, "unknown_session");
    assert_string_equal(out.u.error.msg, "no session actor-1/9");
    assert_string_equal(out.u.error.session, "actor-1/9");
    proto_msg_clear(&out);
    s_decode_edit(PROTO_ERROR, "rid", s_drop(), &out);
    assert_false(out.u.error.has_rid);
    proto_msg_clear(&out);
}

static void batch_round_trips_with_groups_trajectories_and_stats(void **state)
{
    proto_msg_t in, out;
    s_roundtrip(PROTO_BATCH, &in, &out);
    proto_batch_t *b = &out.u.batch;
    assert_string_equal(b->run, "run-1");
    assert_int_equal(b->iteration, 12);
    assert_int_equal(b->policy_version, 4);
    assert_int_equal(b->groups_len, 1);
    proto_group_t *g = &b->groups[0];
    assert_string_equal(g->group, "g-7");
    assert_string_equal(g->task, "household/train/17");
    assert_true(g->weight == 2.5);
    assert_int_equal(g->rewards_len, 2);
    assert_true(g->rewards[0] == 1.0 && g->rewards[1] == 0.0);
    assert_int_equal(g->advantages_len, 2);
    assert_true(g->advantages[0] == 0.999999 && g->advantages[1] == -0.999999);
    assert_int_equal(g->trajectories_len, 2);
    s_assert_result(&g->trajectories[0], 3);
    s_assert_result(&g->trajectories[1], 1);
    assert_int_equal(g->trajectories[1].traj, 6);
    assert_string_equal(g->trajectories[1].status, "cancelled");
    assert_string_equal(g->trajectories[1].error, "cancelled by gate");
    assert_int_equal(b->stats_len, 2);
    assert_string_equal(b->stats[0].name, "zv_ratio");
    assert_true(b->stats[0].value == 0.4);
    assert_string_equal(b->stats[1].name, "wall_s");
    assert_true(b->stats[1].value == 61.5);
    proto_msg_clear(&out);
    s_decode_edit(PROTO_BATCH, "groups.0.weight", s_drop(), &out);
    assert_true(out.u.batch.groups[0].weight == 1.0);
    proto_msg_clear(&out);
}

static void batch_carries_the_audit_weight_raw_advantages_and_the_estimator(void **state)
{
    (void)state;
    proto_msg_t in, out;
    s_roundtrip(PROTO_BATCH, &in, &out);
    const proto_group_t *g = &out.u.batch.groups[0];
    assert_string_equal(out.u.batch.estimator, "grpo");
    assert_true(g->audit_weight == 2.0);
    assert_int_equal(g->advantages_raw_len, 2);
    assert_true(g->advantages_raw[0] == 0.4999995 && g->advantages_raw[1] == -0.4999995);
    /* advantages = advantages_raw x audit_weight, to the bit */
    for (size_t i = 0; i < 2; i++)
        assert_true(g->advantages[i] == g->advantages_raw[i] * g->audit_weight);
    proto_msg_clear(&out);
    /* An older sender's BATCH: audit weight 1, no raw advantages, no estimator. */
    s_decode_edit(PROTO_BATCH, "groups.0.audit_weight", s_drop(), &out);
    assert_true(out.u.batch.groups[0].audit_weight == 1.0);
    proto_msg_clear(&out);
    s_decode_edit(PROTO_BATCH, "groups.0.advantages_raw", s_drop(), &out);
    assert_null(out.u.batch.groups[0].advantages_raw);
    assert_int_equal(out.u.batch.groups[0].advantages_raw_len, 0);
    proto_msg_clear(&out);
    s_decode_edit(PROTO_BATCH, "estimator", s_nil(), &out);
    assert_null(out.u.batch.estimator);
    proto_msg_clear(&out);
    /* Refused: a weight that is not > 0, raw advantages of another length, a number estimator. */
    s_expect_edit(PROTO_BATCH, "groups.0.audit_weight", s_float(0.0), SR_EPROTO,
                  "groups[0].audit_weight", "must be > 0");
    s_expect_edit(PROTO_BATCH, "groups.0.audit_weight", s_float(-1.0), SR_EPROTO,
                  "groups[0].audit_weight", "");
    s_expect_edit(PROTO_BATCH, "groups.0.advantages_raw", s_emptyarr(), SR_EPROTO,
                  "groups[0].advantages_raw", "has 0 entries but rewards has 2");
    s_expect_edit(PROTO_BATCH, "estimator", s_int(3), SR_EPROTO, "estimator", "not a string");
    /* Left out of the encoding when absent. */
    s_sample(&in, PROTO_BATCH);
    in.u.batch.estimator = NULL;
    in.u.batch.groups[0].advantages_raw = NULL;
    in.u.batch.groups[0].advantages_raw_len = 0;
    sr_buf_t b = SR_BUF_INIT;
    assert_int_equal(proto_encode(&in, &b), SR_OK);
    proto_err_t e;
    assert_int_equal(proto_decode(b.data, b.len, &out, &e), SR_OK);
    assert_null(out.u.batch.estimator);
    assert_null(out.u.batch.groups[0].advantages_raw);
    assert_true(out.u.batch.groups[0].audit_weight == 2.0);
    proto_msg_clear(&out);
    sr_buf_free(&b);
    s_groups[0].advantages_raw = s_advs_raw; /* the sample's arrays are shared */
    s_groups[0].advantages_raw_len = 2;
}

static void weights_ready_round_trips_and_defaults(void **state)
{
    proto_msg_t in, out;
    s_roundtrip(PROTO_WEIGHTS_READY, &in, &out);
    assert_string_equal(out.u.weights_ready.run, "run-1");
    assert_int_equal(out.u.weights_ready.version, 5);
    assert_int_equal(out.u.weights_ready.iteration, 12);
    assert_true(out.u.weights_ready.has_loss);
    assert_true(out.u.weights_ready.loss == 0.125);
    assert_string_equal(out.u.weights_ready.info, "grad_norm=1.2");
    assert_true(out.u.weights_ready.ok);
    assert_null(out.u.weights_ready.reason);
    proto_msg_clear(&out);
    s_decode_edit(PROTO_WEIGHTS_READY, "loss", s_drop(), &out);
    assert_false(out.u.weights_ready.has_loss);
    proto_msg_clear(&out);
    /* ok absent (an older trainer): true */
    s_decode_edit(PROTO_WEIGHTS_READY, "ok", s_drop(), &out);
    assert_true(out.u.weights_ready.ok);
    proto_msg_clear(&out);
}

/* WEIGHTS_READY.path: where the trainer saved the version, for --weights-sync; optional. */
static void weights_ready_path_round_trips_and_is_optional(void **state)
{
    (void)state;
    proto_msg_t in, out;
    proto_msg_init(&in, PROTO_WEIGHTS_READY);
    in.u.weights_ready.run = "run-1";
    in.u.weights_ready.version = 3;
    in.u.weights_ready.iteration = 2;
    in.u.weights_ready.path = "/ckpt/run-1/v3";
    sr_buf_t b = SR_BUF_INIT;
    proto_err_t err;
    assert_int_equal(proto_encode(&in, &b), SR_OK);
    assert_int_equal(proto_decode(b.data, b.len, &out, &err), SR_OK);
    assert_string_equal(out.u.weights_ready.path, "/ckpt/run-1/v3");
    proto_msg_clear(&out);
    sr_buf_free(&b);
    in.u.weights_ready.path = NULL;
    assert_int_equal(proto_encode(&in, &b), SR_OK);
    assert_int_equal(proto_decode(b.data, b.len, &out, &err), SR_OK);
    assert_null(out.u.weights_ready.path);
    proto_msg_clear(&out);
    sr_buf_free(&b);
}

static void weights_ready_refusal_carries_ok_false_and_a_reason(void **state)
{
    (void)state;
    proto_msg_t in, out;
    proto_msg_init(&in, PROTO_WEIGHTS_READY);
    assert_true(in.u.weights_ready.ok); /* the default */
    in.u.weights_ready.run = "run-1";
    in.u.weights_ready.version = 3;
    in.u.weights_ready.iteration = 3;
    in.u.weights_ready.ok = false;
    in.u.weights_ready.reason = "groups[2]: advantages do not follow from the rewards";
    sr_buf_t b = SR_BUF_INIT;
    assert_int_equal(proto_encode(&in, &b), SR_OK);
    proto_err_t e;
    assert_int_equal(proto_decode(b.data, b.len, &out, &e), SR_OK);
    assert_false(out.u.weights_ready.ok);
    assert_string_equal(out.u.weights_ready.reason,
                        "groups[2]: advantages do not follow from the rewards");
    assert_null(out.u.weights_ready.info);
    assert_false(out.u.weights_ready.has_loss);
    proto_msg_clear(&out);
    sr_buf_free(&b);
    s_expect_edit(PROTO_WEIGHTS_READY, "ok", s_int(0), SR_EPROTO, "ok", "not a boolean");
    s_expect_edit(PROTO_WEIGHTS_READY, "ok", s_strv("false"), SR_EPROTO, "ok", "not a boolean");
    /* reason is a short text: 1 KiB at most */
    static char longer[1026];
    memset(longer, 'r', 1025);
    in.u.weights_ready.reason = longer;
    sr_buf_reset(&b);
    assert_int_equal(proto_encode(&in, &b), SR_ETOOBIG);
    longer[1024] = '\0';
    sr_buf_reset(&b);
    assert_int_equal(proto_encode(&in, &b), SR_OK);
    assert_int_equal(proto_decode(b.data, b.len, &out, &e), SR_OK);
    assert_int_equal(strlen(out.u.weights_ready.reason), 1024);
    proto_msg_clear(&out);
    sr_buf_free(&b);
}

/* ---------------------------------------------------------------------------------------------
 * Accepted variations
 * ------------------------------------------------------------------------------------------- */

static void unknown_keys_are_ignored(void **state)
{
    proto_msg_t out;
    s_decode_edit(PROTO_STEP, "future_field", s_emptymap(), &out);
    assert_string_equal(out.u.step.action, "go to fridge 1");
    proto_msg_clear(&out);
    s_decode_edit(PROTO_RESULT, "steps.1.extra", s_strv("x"), &out);
    assert_int_equal(out.u.result.steps_len, 3);
    proto_msg_clear(&out);
}

static void integers_in_any_msgpack_width_and_numbers_as_ints_are_accepted(void **state)
{
    proto_msg_t out;
    /* 5 as signed int8 and as uint64: both are the integer 5. */
    s_decode_edit(PROTO_JOB, "epoch", s_raw("\xd0\x05", 2), &out);
    assert_int_equal(out.u.job.epoch, 5);
    proto_msg_clear(&out);
    s_decode_edit(PROTO_JOB, "epoch", s_raw("\xcf\0\0\0\0\0\0\0\x05", 9), &out);
    assert_int_equal(out.u.job.epoch, 5);
    proto_msg_clear(&out);
    /* A float32 and a negative integer where a float is expected. */
    s_decode_edit(PROTO_OBS, "reward", s_raw("\xca\x3f\x00\x00\x00", 5), &out); /* 0.5f */
    assert_true(out.u.obs.reward == 0.5);
    proto_msg_clear(&out);
    s_decode_edit(PROTO_OBS, "reward", s_int(-2), &out);
    assert_true(out.u.obs.reward == -2.0);
    proto_msg_clear(&out);
    /* Valid multi-byte UTF-8 passes. */
    s_decode_edit(PROTO_STEP, "action", s_strv("put the cr\xc3\xa8me br\xc3\xbbl\xc3\xa9\xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x8d\x8e"), &out);
    assert_string_equal(out.u.step.action, "put the cr\xc3\xa8me br\xc3\xbbl\xc3\xa9\xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x8d\x8e");
    proto_msg_clear(&out);
}

static void strings_exactly_at_their_limit_are_accepted(void **state)
{
    char *s = malloc(PROTO_MAX_TEXT + 1);
    memset(s, 'a', PROTO_MAX_TEXT);
    proto_msg_t out;
    s_decode_edit(PROTO_JOB, "job_id", s_strn(s, PROTO_MAX_ID), &out);
    assert_int_equal(strlen(out.u.job.job_id), PROTO_MAX_ID);
    proto_msg_clear(&out);
    s_decode_edit(PROTO_STEP, "action", s_strn(s, PROTO_MAX_ACTION), &out);
    proto_msg_clear(&out);
    s_decode_edit(PROTO_OBS, "obs", s_strn(s, PROTO_MAX_TEXT), &out);
    assert_int_equal(strlen(out.u.obs.obs), PROTO_MAX_TEXT);
    proto_msg_clear(&out);
    free(s);
}

static void nesting_at_the_depth_limit_is_accepted(void **state)
{
    /* The outer map is level 1; an unknown key holding 15 nested arrays reaches level 16. */
    char raw[16];
    memset(raw, 0x91, 14);
    raw[14] = (char)0x90;
    proto_msg_t out;
    s_decode_edit(PROTO_CLOSE, "deep", s_raw(raw, 15), &out);
    assert_int_equal(out.u.close.rid, 79);
    proto_msg_clear(&out);
}

/* ---------------------------------------------------------------------------------------------
 * Malformed messages, each with its specific error
 * ------------------------------------------------------------------------------------------- */

static void empty_and_non_map_buffers_are_refused(void **state)
{
    s_expect("", 0, SR_EPROTO, "", "empty message");
    s_expect("\x93\x01\x02\x03", 4, SR_EPROTO, "", "not a map");
    s_expect("\x05", 1, SR_EPROTO, "", "not a map");
    s_expect("\xa3JOB", 4, SR_EPROTO, "", "not a map");
    s_expect("\xc0", 1, SR_EPROTO, "", "not a map");
    proto_msg_t m;
    assert_int_equal(proto_decode(NULL, 3, &m, NULL), SR_EINVAL);
    assert_int_equal(proto_decode("\x80", 1, NULL, NULL), SR_EINVAL);
}

static void trailing_bytes_after_the_map_are_refused(void **state)
{
    sr_buf_t b = s_encoded(PROTO_STEP);
    assert_int_equal(sr_buf_append(&b, "\x00", 1), SR_OK);
    s_expect(b.data, b.len, SR_EPROTO, "", "trailing bytes after the map (1)");
    assert_int_equal(sr_buf_append(&b, "\x81\xa1t\xa3JOB", 7), SR_OK);
    s_expect(b.data, b.len, SR_EPROTO, "", "trailing bytes after the map (8)");
    sr_buf_free(&b);
}

static void every_truncation_of_a_valid_message_is_refused(void **state)
{
    proto_type_t types[] = {PROTO_JOB, PROTO_RESULT, PROTO_OBS, PROTO_BATCH};
    for (size_t t = 0; t < SR_ARRAY_LEN(types); t++) {
        sr_buf_t b = s_encoded(types[t]);
        for (size_t len = 1; len < b.len; len++) {
            proto_msg_t m;
            proto_err_t err;
            assert_int_equal(proto_decode(b.data, len, &m, &err), SR_EPROTO);
            assert_string_equal(err.reason, "truncated message");
        }
        sr_buf_free(&b);
    }
}

static void type_and_version_errors_are_specific(void **state)
{
    s_expect_edit(PROTO_JOB, "t", s_drop(), SR_EPROTO, "t", "missing");
    s_expect_edit(PROTO_JOB, "t", s_int(4), SR_EPROTO, "t", "not a string");
    s_expect_edit(PROTO_JOB, "t", s_strv("NOPE"), SR_EPROTO, "t", "unknown type \"NOPE\"");
    s_expect_edit(PROTO_JOB, "t", s_strv("job"), SR_EPROTO, "t", "unknown type \"job\"");
    s_expect_edit(PROTO_JOB, "t", s_nil(), SR_EPROTO, "t", "missing");
    s_expect_edit(PROTO_JOB, "v", s_drop(), SR_EPROTO, "v", "missing");
    s_expect_edit(PROTO_JOB, "v", s_int(2), SR_EPROTO, "v", "unsupported version 2 (this side speaks 1)");
    s_expect_edit(PROTO_JOB, "v", s_int(0), SR_EPROTO, "v", "out of range");
    s_expect_edit(PROTO_JOB, "v", s_strv("1"), SR_EPROTO, "v", "not an integer");
}

static void each_required_field_missing_is_named(void **state)
{
    static const struct {
        proto_type_t type;
        const char *path;
        const char *field;
    } cases[] = {
        {PROTO_HELLO, "actor_id", "actor_id"}, {PROTO_HELLO, "role", "role"},
        {PROTO_HELLO, "slots", "slots"}, {PROTO_HELLO, "host", "host"}, {PROTO_HELLO, "pid", "pid"},
        {PROTO_WELCOME, "bus_pub", "bus_pub"}, {PROTO_WELCOME, "heartbeat_ms", "heartbeat_ms"},
        {PROTO_CREDIT, "credits", "credits"},
        {PROTO_JOB, "job_id", "job_id"}, {PROTO_JOB, "epoch", "epoch"}, {PROTO_JOB, "run", "run"},
        {PROTO_JOB, "group", "group"}, {PROTO_JOB, "traj", "traj"},
        {PROTO_JOB, "group_size", "group_size"}, {PROTO_JOB, "task", "task"},
        {PROTO_JOB, "iteration", "iteration"}, {PROTO_JOB, "policy_version", "policy_version"},
        {PROTO_JOB, "seed", "seed"}, {PROTO_JOB, "temperature", "temperature"},
        {PROTO_JOB, "max_steps", "max_steps"}, {PROTO_JOB, "lease_ms", "lease_ms"},
        {PROTO_RESULT, "status", "status"}, {PROTO_RESULT, "won", "won"},
        {PROTO_RESULT, "wall_ms", "wall_ms"}, {PROTO_RESULT, "steps", "steps"},
        {PROTO_RESULT, "steps.1.action", "steps[1].action"},
        {PROTO_RESULT, "steps.2.format_error", "steps[2].format_error"},
        {PROTO_RESULT, "steps.0.messages.1.content", "steps[0].messages[1].content"},
        {PROTO_HEARTBEAT, "leases", "leases"}, {PROTO_HEARTBEAT, "leases.1.epoch", "leases[1].epoch"},
        {PROTO_BYE, "actor_id", "actor_id"},
        {PROTO_ACTION, "step", "step"}, {PROTO_ACTION, "ended", "ended"},
        {PROTO_CANCEL, "d", "d"}, {PROTO_CANCEL, "reason", "reason"},
        {PROTO_POLICY_VERSION, "version", "version"},
        {PROTO_RESET, "rid", "rid"}, {PROTO_RESET, "session", "session"}, {PROTO_RESET, "task", "task"},
        {PROTO_STEP, "action", "action"}, {PROTO_CLOSE, "session", "session"},
        {PROTO_OBS, "rid", "rid"}, {PROTO_OBS, "obs", "obs"}, {PROTO_OBS, "admissible", "admissible"},
        {PROTO_OBS, "done", "done"}, {PROTO_OBS, "won", "won"}, {PROTO_OBS, "step", "step"},
        {PROTO_ERROR, "code", "code"}, {PROTO_ERROR, "msg", "msg"},
        {PROTO_BATCH, "stats", "stats"}, {PROTO_BATCH, "groups.0.rewards", "groups[0].rewards"},
        {PROTO_BATCH, "groups.0.trajectories.1.steps.0.obs", "groups[0].trajectories[1].steps[0].obs"},
        {PROTO_WEIGHTS_READY, "version", "version"},
    };
    for (size_t i = 0; i < SR_ARRAY_LEN(cases); i++)
        s_expect_edit(cases[i].type, cases[i].path, s_drop(), SR_EPROTO, cases[i].field, "missing");
}

static void wrong_types_are_named(void **state)
{
    s_expect_edit(PROTO_JOB, "job_id", s_int(42), SR_EPROTO, "job_id", "not a string");
    s_expect_edit(PROTO_JOB, "job_id", s_raw("\xc4\x02hi", 4), SR_EPROTO, "job_id", "not a string");
    s_expect_edit(PROTO_JOB, "epoch", s_strv("3"), SR_EPROTO, "epoch", "not an integer");
    s_expect_edit(PROTO_JOB, "epoch", s_float(3.0), SR_EPROTO, "epoch", "not an integer");
    s_expect_edit(PROTO_JOB, "seed", s_strv("9"), SR_EPROTO, "seed", "not an integer");
    s_expect_edit(PROTO_JOB, "temperature", s_strv("hot"), SR_EPROTO, "temperature", "not a number");
    s_expect_edit(PROTO_JOB, "eval", s_int(1), SR_EPROTO, "eval", "not a boolean");
    s_expect_edit(PROTO_RESULT, "steps", s_emptymap(), SR_EPROTO, "steps", "not an array");
    s_expect_edit(PROTO_RESULT, "steps.1", s_int(7), SR_EPROTO, "steps[1]", "not a map");
    s_expect_edit(PROTO_RESULT, "steps.1.action", s_int(7), SR_EPROTO, "steps[1].action", "not a string");
    s_expect_edit(PROTO_RESULT, "steps.0.messages", s_strv("hi"), SR_EPROTO, "steps[0].messages", "not an array");
    s_expect_edit(PROTO_RESULT, "steps.0.messages.0.role", s_boolv(true), SR_EPROTO,
                  "steps[0].messages[0].role", "not a string");
    s_expect_edit(PROTO_OBS, "admissible.2", s_int(1), SR_EPROTO, "admissible[2]", "not a string");
    s_expect_edit(PROTO_OBS, "admissible", s_strv("look"), SR_EPROTO, "admissible", "not an array");
    s_expect_edit(PROTO_BATCH, "stats", s_emptyarr(), SR_EPROTO, "stats", "not a map");
    s_expect_edit(PROTO_BATCH, "stats.wall_s", s_strv("x"), SR_EPROTO, "stats.wall_s", "not a number");
    s_expect_edit(PROTO_BATCH, "groups.0.rewards.1", s_strv("x"), SR_EPROTO, "groups[0].rewards[1]", "not a number");
    s_expect_edit(PROTO_BATCH, "groups.0.trajectories.1.steps.0.raw", s_boolv(false), SR_EPROTO,
                  "groups[0].trajectories[1].steps[0].raw", "not a string");
    s_expect_edit(PROTO_CANCEL, "keep.1", s_strv("a"), SR_EPROTO, "keep[1]", "not an integer");
    s_expect_edit(PROTO_ACTION, "won", s_int(0), SR_EPROTO, "won", "not a boolean");
}

static void out_of_range_and_negative_values_are_refused(void **state)
{
    s_expect_edit(PROTO_JOB, "epoch", s_int(-1), SR_EPROTO, "epoch", "negative");
    s_expect_edit(PROTO_RESET, "rid", s_int(-5), SR_EPROTO, "rid", "negative");
    s_expect_edit(PROTO_JOB, "seed", s_int(-1), SR_EPROTO, "seed", "negative");
    s_expect_edit(PROTO_CREDIT, "credits", s_int(-1), SR_EPROTO, "credits", "negative");
    s_expect_edit(PROTO_CREDIT, "credits", s_int(4097), SR_EPROTO, "credits", "out of range (0..4096)");
    s_expect_edit(PROTO_HELLO, "slots", s_int(5000), SR_EPROTO, "slots", "out of range (0..4096)");
    s_expect_edit(PROTO_JOB, "group_size", s_int(0), SR_EPROTO, "group_size", "out of range (1..1024)");
    s_expect_edit(PROTO_JOB, "traj", s_int(8), SR_EPROTO, "traj", "out of range (0..7)");
    s_expect_edit(PROTO_JOB, "iteration", s_uint(UINT64_MAX), SR_EPROTO, "iteration", "out of range");
    s_expect_edit(PROTO_JOB, "top_p", s_float(1.5), SR_EPROTO, "top_p", "out of range");
    s_expect_edit(PROTO_ACTION, "step", s_int(0), SR_EPROTO, "step", "out of range");
    s_expect_edit(PROTO_RESULT, "reward", s_float(NAN), SR_EPROTO, "reward", "not a finite number");
    s_expect_edit(PROTO_RESULT, "steps.2.latency_ms", s_float(-1.0), SR_EPROTO, "steps[2].latency_ms", "out of range");
    s_expect_edit(PROTO_HELLO, "role", s_strv("robot"), SR_EPROTO, "role", "not one of actor|gate");
    s_expect_edit(PROTO_RESULT, "status", s_strv("maybe"), SR_EPROTO, "status",
                  "not one of done|cancelled|failed|truncated");
    s_expect_edit(PROTO_BATCH, "groups.0.advantages", s_emptyarr(), SR_EPROTO, "groups[0].advantages",
                  "has 0 entries but rewards has 2");
}

static void huge_declared_lengths_are_refused_without_allocating(void **state)
{
    /* str32, bin32, array32 and map32 headers claiming 4 GiB - 1 with no payload behind them. */
    s_expect_edit(PROTO_STEP, "action", s_raw("\xdb\xff\xff\xff\xff", 5), SR_ETOOBIG, "action",
                  "string of 4294967295 bytes exceeds the limit of 65536");
    s_expect_edit(PROTO_STEP, "extra", s_raw("\xc6\xff\xff\xff\xff", 5), SR_ETOOBIG, "extra",
                  "binary of 4294967295 bytes");
    s_expect_edit(PROTO_OBS, "admissible", s_raw("\xdd\xff\xff\xff\xff", 5), SR_ETOOBIG,
                  "admissible", "array of 4294967295 elements exceeds the limit of 4096");
    s_expect_edit(PROTO_STEP, "extra", s_raw("\xdf\xff\xff\xff\xff", 5), SR_ETOOBIG, "extra",
                  "map of 4294967295 entries");
    s_expect_edit(PROTO_STEP, "extra", s_raw("\xc9\xff\xff\xff\xf0\x01", 6), SR_ETOOBIG, "extra",
                  "extension of");
    /* Claims within the limits but beyond the bytes present. */
    s_expect_edit(PROTO_STEP, "action", s_raw("\xda\x10\x00", 3), SR_EPROTO, "action", "truncated message");
    s_expect_edit(PROTO_OBS, "admissible", s_raw("\xdc\x0f\xa0", 3), SR_EPROTO, "admissible", "truncated message");
    /* The outer map itself. */
    s_expect("\xdf\xff\xff\xff\xff", 5, SR_ETOOBIG, "", "map of 4294967295 entries");
    s_expect("\xdf\x00\x00\x0f\xff\xa1t", 7, SR_EPROTO, "", "truncated message");
}

static void nesting_deeper_than_the_limit_is_refused(void **state)
{
    char raw[40];
    memset(raw, 0x91, 30);
    raw[30] = (char)0x90;
    msgpack_sbuffer sb = s_edit(PROTO_CLOSE, "deep", s_raw(raw, 31));
    proto_msg_t m;
    proto_err_t err;
    assert_int_equal(proto_decode(sb.data, sb.size, &m, &err), SR_ETOOBIG);
    assert_string_equal(err.reason, "nesting deeper than 16 levels");
    assert_string_equal(err.field, "deep[0][0][0][0][0][0][0][0][0][0][0][0][0][0][0]");
    msgpack_sbuffer_destroy(&sb);
}

/* The path of an error names the element by its index, with every digit of it. */
static void error_paths_name_multi_digit_array_indices(void **state)
{
    (void)state;
    char raw[200];
    size_t n = 0;
    raw[n++] = (char)0x9c; /* an array of 12: eleven nils, then the never-used byte 0xc1 */
    for (int i = 0; i < 11; i++)
        raw[n++] = (char)0xc0;
    raw[n++] = (char)0xc1;
    s_expect_edit(PROTO_STEP, "extra", s_raw(raw, n), SR_EPROTO, "extra[11]",
                  "invalid msgpack byte 0xc1");
    n = 0;
    raw[n++] = (char)0xdc; /* an array of 105 (array 16): 104 nils, then 0xc1 */
    raw[n++] = 0x00;
    raw[n++] = 0x69;
    for (int i = 0; i < 104; i++)
        raw[n++] = (char)0xc0;
    raw[n++] = (char)0xc1;
    s_expect_edit(PROTO_STEP, "extra", s_raw(raw, n), SR_EPROTO, "extra[104]",
                  "invalid msgpack byte 0xc1");
}

static void bad_utf8_and_nul_bytes_are_refused_in_text(void **state)
{
    s_expect_edit(PROTO_JOB, "job_id", s_strv("j\xff\xfe"), SR_EPROTO, "job_id", "not valid UTF-8");
    s_expect_edit(PROTO_STEP, "action", s_strv("\xc0\xaf"), SR_EPROTO, "action", "not valid UTF-8");
    s_expect_edit(PROTO_STEP, "action", s_strv("\xed\xa0\x80"), SR_EPROTO, "action", "not valid UTF-8");
    s_expect_edit(PROTO_STEP, "action", s_strv("go \xe2\x82"), SR_EPROTO, "action", "not valid UTF-8");
    s_expect_edit(PROTO_STEP, "action", s_strv("\xf4\x90\x80\x80"), SR_EPROTO, "action", "not valid UTF-8");
    s_expect_edit(PROTO_OBS, "admissible.1", s_strv("\x80"), SR_EPROTO, "admissible[1]", "not valid UTF-8");
    s_expect_edit(PROTO_RESULT, "steps.2.obs", s_strv("ok\xa0"), SR_EPROTO, "steps[2].obs", "not valid UTF-8");
    s_expect_edit(PROTO_STEP, "action", s_strn("go\0to", 5), SR_EPROTO, "action", "contains a NUL byte");
}

static void oversize_strings_and_arrays_are_refused(void **state)
{
    char *s = malloc(PROTO_MAX_TEXT + 2);
    memset(s, 'a', PROTO_MAX_TEXT + 1);
    s_expect_edit(PROTO_JOB, "job_id", s_strn(s, PROTO_MAX_ID + 1), SR_ETOOBIG, "job_id",
                  "string of 257 bytes exceeds the limit of 256");
    s_expect_edit(PROTO_STEP, "action", s_strn(s, PROTO_MAX_ACTION + 1), SR_ETOOBIG, "action",
                  "string of 1025 bytes exceeds the limit of 1024");
    s_expect_edit(PROTO_OBS, "obs", s_strn(s, PROTO_MAX_TEXT + 1), SR_ETOOBIG, "obs",
                  "string of 65537 bytes exceeds the limit of 65536");
    s_expect_edit(PROTO_STEP, "unknown", s_strn(s, PROTO_MAX_TEXT + 1), SR_ETOOBIG, "unknown",
                  "string of 65537 bytes");
    free(s);

    /* 1025 steps, 257 chat messages, 4097 admissible actions: each one over its array limit. */
    char *raw = malloc(8 + 4097);
    memcpy(raw, "\xdc\x04\x01", 3);
    memset(raw + 3, 0x80, 1025); /* empty maps: the count is checked before the elements */
    s_expect_edit(PROTO_RESULT, "steps", s_raw(raw, 3 + 1025), SR_ETOOBIG, "steps",
                  "array of 1025 elements exceeds the limit of 1024");
    memcpy(raw, "\xdc\x01\x01", 3);
    s_expect_edit(PROTO_RESULT, "steps.0.messages", s_raw(raw, 3 + 257), SR_ETOOBIG,
                  "steps[0].messages", "array of 257 elements exceeds the limit of 256");
    memcpy(raw, "\xdc\x10\x01", 3);
    memset(raw + 3, 0xa0, 4097);
    s_expect_edit(PROTO_OBS, "admissible", s_raw(raw, 3 + 4097), SR_ETOOBIG, "admissible",
                  "array of 4097 elements exceeds the limit of 4096");
    free(raw);
}

static void limits_can_be_tightened_by_the_caller(void **state)
{
    sr_buf_t b = s_encoded(PROTO_OBS);
    proto_limits_t lim = proto_limits_default();
    proto_msg_t m;
    proto_err_t err;
    lim.max_msg_bytes = b.len - 1;
    assert_int_equal(proto_decode_limits(b.data, b.len, &lim, &m, &err), SR_ETOOBIG);
    assert_string_equal(err.field, "");
    assert_true(strncmp(err.reason, "message of", 10) == 0);
    lim = proto_limits_default();
    lim.max_text = 10;
    assert_int_equal(proto_decode_limits(b.data, b.len, &lim, &m, &err), SR_ETOOBIG);
    assert_string_equal(err.field, "obs");
    assert_string_equal(err.reason, "string of 47 bytes exceeds the limit of 10");
    sr_buf_free(&b);
}

static void invalid_bytes_and_non_string_keys_are_refused(void **state)
{
    s_expect_edit(PROTO_STEP, "action", s_raw("\xc1", 1), SR_EPROTO, "action", "invalid msgpack byte 0xc1");
    s_expect_edit(PROTO_STEP, "extra", s_raw("\x81\x01\x02", 3), SR_EPROTO, "extra", "map key is not a string");
    s_expect("\x81\x01\x02", 3, SR_EPROTO, "", "map key is not a string");
    /* A map key of 257 bytes (str16 header) with a nil value. */
    char msg[300];
    memcpy(msg, "\x81\xda\x01\x01", 4);
    memset(msg + 4, 'k', 257);
    msg[261] = (char)0xc0;
    s_expect(msg, 262, SR_ETOOBIG, "", "map key of 257 bytes exceeds the limit of 256");
}

/* ---------------------------------------------------------------------------------------------
 * API behaviour
 * ------------------------------------------------------------------------------------------- */

static void peek_reads_the_type_without_decoding(void **state)
{
    for (int t = PROTO_HELLO; t < PROTO_TYPE_COUNT; t++) {
        sr_buf_t b = s_encoded((proto_type_t)t);
        assert_int_equal(proto_peek_type(b.data, b.len), t);
        assert_int_equal(proto_type_from_name(proto_type_name((proto_type_t)t)), t);
        sr_buf_free(&b);
    }
    /* "t" after another key is found too. */
    assert_int_equal(proto_peek_type("\x82\xa1x\x91\x01\xa1t\xa4STEP", 12), PROTO_STEP);
    assert_int_equal(proto_peek_type("\x81\xa1t\xa4NOPE", 7), PROTO_NONE);
    assert_int_equal(proto_peek_type("\x81\xa1t\x01", 4), PROTO_NONE);
    assert_int_equal(proto_peek_type("\x91\x01", 2), PROTO_NONE);
    assert_int_equal(proto_peek_type("\x81\xa1t\xa4ST", 6), PROTO_NONE);
    assert_int_equal(proto_peek_type(NULL, 0), PROTO_NONE);
    assert_string_equal(proto_type_name(PROTO_NONE), "?");
    assert_string_equal(proto_type_name((proto_type_t)99), "?");
    assert_int_equal(proto_type_from_name("job"), PROTO_NONE);
    assert_int_equal(proto_type_from_name(NULL), PROTO_NONE);
}

static void encode_refuses_null_required_strings_and_oversize_values(void **state)
{
    proto_msg_t m;
    sr_buf_t b = SR_BUF_INIT;
    s_sample(&m, PROTO_JOB);
    m.u.job.task = NULL;
    assert_int_equal(proto_encode(&m, &b), SR_EINVAL);
    s_sample(&m, PROTO_OBS);
    m.u.obs.admissible = NULL;
    assert_int_equal(proto_encode(&m, &b), SR_EINVAL);
    char big[PROTO_MAX_ACTION + 2];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    s_sample(&m, PROTO_STEP);
    m.u.step.action = big;
    assert_int_equal(proto_encode(&m, &b), SR_ETOOBIG);
    proto_msg_init(&m, PROTO_NONE);
    assert_int_equal(proto_encode(&m, &b), SR_EINVAL);
    assert_int_equal(proto_encode(NULL, &b), SR_EINVAL);
    sr_buf_free(&b);
}

static void encode_appends_and_clear_ignores_built_messages(void **state)
{
    proto_msg_t m;
    s_sample(&m, PROTO_CREDIT);
    sr_buf_t b = SR_BUF_INIT;
    assert_int_equal(proto_encode(&m, &b), SR_OK);
    size_t one = b.len;
    assert_int_equal(proto_encode(&m, &b), SR_OK);
    assert_int_equal(b.len, 2 * one);
    assert_memory_equal(b.data, b.data + one, one);
    /* A built message points at literals: clear must not free them, nor touch it. */
    s_sample(&m, PROTO_STEP);
    proto_msg_clear(&m);
    assert_string_equal(m.u.step.action, "go to fridge 1");
    proto_msg_clear(NULL);
    char text[160];
    proto_err_t err = {.field = "steps[3].action", .reason = "not a string"};
    assert_string_equal(proto_err_text(&err, text, sizeof text), "steps[3].action: not a string");
    sr_buf_free(&b);
    sr_buf_free(&b);
}

static void encoding_matches_what_other_msgpack_writers_produce(void **state)
{
    /* CREDIT {t: "CREDIT", v: 1, credits: 8}, as Python's msgpack.packb would write it. */
    static const unsigned char want[] = {0x83, 0xa1, 't', 0xa6, 'C', 'R', 'E', 'D', 'I', 'T',
                                         0xa1, 'v', 0x01, 0xa7, 'c', 'r', 'e', 'd', 'i', 't',
                                         's', 0x08};
    sr_buf_t b = s_encoded(PROTO_CREDIT);
    assert_int_equal(b.len, sizeof want);
    assert_memory_equal(b.data, want, sizeof want);
    sr_buf_free(&b);
}

/* ---------------------------------------------------------------------------------------------
 * Reading in place: big and repeated maps, encodings of every width, the message's memory
 * ------------------------------------------------------------------------------------------- */

/* s_pk_str packs a string key or value. */
static void s_pk_str(msgpack_packer *pk, const char *s)
{
    msgpack_pack_str(pk, strlen(s));
    msgpack_pack_str_body(pk, s, strlen(s));
}

/* s_action_with packs an ACTION with `extra` unknown keys before its fields (each an array with a
 * map inside, to be skipped whole) and, when dup_key is set, that key again first with dup_nil's
 * value (nil) or a wrong one. */
static msgpack_sbuffer s_action_with(int extra, const char *dup_key, bool dup_nil)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, (size_t)extra + 9 + (dup_key != NULL));
    if (dup_key) {
        s_pk_str(&pk, dup_key);
        if (dup_nil)
            msgpack_pack_nil(&pk);
        else
            msgpack_pack_int(&pk, 7);
    }
    for (int i = 0; i < extra; i++) {
        char k[16];
        snprintf(k, sizeof k, "zz%d", i);
        s_pk_str(&pk, k);
        msgpack_pack_array(&pk, 2);
        msgpack_pack_int(&pk, i);
        msgpack_pack_map(&pk, 1);
        s_pk_str(&pk, "q");
        s_pk_str(&pk, "skipped");
    }
    s_pk_str(&pk, "t"), s_pk_str(&pk, "ACTION");
    s_pk_str(&pk, "v"), msgpack_pack_int(&pk, 1);
    s_pk_str(&pk, "run"), s_pk_str(&pk, "r1");
    s_pk_str(&pk, "group"), s_pk_str(&pk, "g-7");
    s_pk_str(&pk, "traj"), msgpack_pack_int(&pk, 3);
    s_pk_str(&pk, "step"), msgpack_pack_int(&pk, 4);
    s_pk_str(&pk, "action"), s_pk_str(&pk, "go to fridge 1");
    s_pk_str(&pk, "ended"), msgpack_pack_false(&pk);
    s_pk_str(&pk, "reward"), msgpack_pack_double(&pk, 0.5);
    return sb;
}

static void maps_of_many_keys_and_repeated_keys_are_read_in_place(void **state)
{
    /* A map of more keys than the decoder indexes (a peer with many new fields): read by walking
     * its bytes, with the same result. */
    int extras[] = {0, 31, 32, 100, 3000};
    for (size_t k = 0; k < SR_ARRAY_LEN(extras); k++) {
        msgpack_sbuffer sb = s_action_with(extras[k], NULL, false);
        proto_msg_t out;
        proto_err_t err;
        assert_int_equal(proto_decode(sb.data, sb.size, &out, &err), SR_OK);
        assert_int_equal(out.type, PROTO_ACTION);
        assert_string_equal(out.u.action.group, "g-7");
        assert_string_equal(out.u.action.action, "go to fridge 1");
        assert_int_equal(out.u.action.traj, 3);
        assert_true(out.u.action.reward == 0.5);
        assert_false(out.u.action.has_won);
        proto_msg_clear(&out);
        /* The first of two equal keys counts: a nil first is absent, a wrong value is refused. */
        msgpack_sbuffer_destroy(&sb);
        sb = s_action_with(extras[k], "action", true);
        s_expect(sb.data, sb.size, SR_EPROTO, "action", "missing");
        msgpack_sbuffer_destroy(&sb);
        sb = s_action_with(extras[k], "group", false);
        s_expect(sb.data, sb.size, SR_EPROTO, "group", "not a string");
        msgpack_sbuffer_destroy(&sb);
    }
}

static void task_data_is_kept_in_msgpacks_shortest_form(void **state)
{
    /* {"n": 5 as int64, "s": "ab" as str8} is kept as {"n": 5, "s": "ab"} in the shortest
     * encodings, as msgpack-c packs it (what the codec always kept). */
    static const char wide[] = "\x82\xa1n\xd3\0\0\0\0\0\0\0\x05\xa1s\xd9\x02" "ab";
    static const unsigned char want[] = {0x82, 0xa1, 'n', 0x05, 0xa1, 's', 0xa2, 'a', 'b'};
    proto_msg_t out;
    s_decode_edit(PROTO_RESET, "task_data", s_raw(wide, sizeof wide - 1), &out);
    assert_int_equal(out.u.reset.task_data_len, sizeof want);
    assert_memory_equal(out.u.reset.task_data, want, sizeof want);
    proto_msg_clear(&out);
}

static void *s_clear_in_thread(void *arg)
{
    proto_msg_t *m = arg;
    /* the message's memory goes to this thread's cache, freed when the thread ends */
    proto_msg_clear(m);
    proto_msg_t again;
    sr_buf_t b = s_encoded(PROTO_OBS);
    if (proto_decode(b.data, b.len, &again, NULL) == SR_OK)
        proto_msg_clear(&again);
    sr_buf_free(&b);
    return NULL;
}

static void decoded_memory_is_one_block_reused_moved_and_freed_in_any_thread(void **state)
{
    sr_buf_t b = s_encoded(PROTO_OBS);
    /* Decoded one after another, a receiver's messages reuse the same memory. */
    proto_msg_t m;
    assert_int_equal(proto_decode(b.data, b.len, &m, NULL), SR_OK);
    const void *first = m.u.obs.obs;
    proto_msg_clear(&m);
    for (int i = 0; i < 50; i++) {
        assert_int_equal(proto_decode(b.data, b.len, &m, NULL), SR_OK);
        assert_ptr_equal(m.u.obs.obs, first);
        assert_string_equal(m.u.obs.admissible[2], "look");
        proto_msg_clear(&m);
    }
    /* Two alive at once do not share it. */
    proto_msg_t m2;
    assert_int_equal(proto_decode(b.data, b.len, &m, NULL), SR_OK);
    assert_int_equal(proto_decode(b.data, b.len, &m2, NULL), SR_OK);
    assert_ptr_not_equal(m.u.obs.obs, m2.u.obs.obs);
    assert_string_equal(m.u.obs.obs, m2.u.obs.obs);
    proto_msg_clear(&m2);
    /* A message moved by value is cleared once, in another thread. */
    proto_msg_t *moved = malloc(sizeof *moved);
    assert_non_null(moved);
    *moved = m;
    memset(&m, 0, sizeof m);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, s_clear_in_thread, moved), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    free(moved);
    sr_buf_free(&b);

    /* More memory than the first chunk holds (1024 one-byte integers become 8 KiB): a chain. */
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 8);
    s_pk_str(&pk, "t"), s_pk_str(&pk, "CANCEL");
    s_pk_str(&pk, "v"), msgpack_pack_int(&pk, 1);
    s_pk_str(&pk, "run"), s_pk_str(&pk, "r1");
    s_pk_str(&pk, "group"), s_pk_str(&pk, "g-7");
    s_pk_str(&pk, "step"), msgpack_pack_int(&pk, 2);
    s_pk_str(&pk, "d"), msgpack_pack_double(&pk, 0.5);
    s_pk_str(&pk, "reason"), s_pk_str(&pk, "diverged");
    s_pk_str(&pk, "keep"), msgpack_pack_array(&pk, PROTO_MAX_GROUP_SIZE);
    for (int i = 0; i < PROTO_MAX_GROUP_SIZE; i++)
        msgpack_pack_int(&pk, i % 128);
    assert_int_equal(proto_decode(sb.data, sb.size, &m, NULL), SR_OK);
    assert_int_equal(m.u.cancel.keep_len, PROTO_MAX_GROUP_SIZE);
    for (int i = 0; i < PROTO_MAX_GROUP_SIZE; i++)
        assert_int_equal(m.u.cancel.keep[i], i % 128);
    assert_string_equal(m.u.cancel.reason, "diverged");
    proto_msg_clear(&m);
    msgpack_sbuffer_destroy(&sb);

    /* A message beyond the cached sizes (a RESULT of 128 steps with 20,000 token ids each, about
     * 10 MB) has memory of its own size, freed whole. */
    static int32_t ids[20000];
    for (size_t i = 0; i < SR_ARRAY_LEN(ids); i++)
        ids[i] = (int32_t)i;
    proto_result_step_t *steps = calloc(128, sizeof *steps);
    assert_non_null(steps);
    for (int i = 0; i < 128; i++)
        steps[i] = (proto_result_step_t){.i = i, .action = "look", .raw = "r", .obs = "o",
                                         .token_ids = ids, .token_ids_len = SR_ARRAY_LEN(ids)};
    proto_msg_t big;
    s_sample(&big, PROTO_RESULT);
    big.u.result.steps = steps;
    big.u.result.steps_len = 128;
    sr_buf_t bb = SR_BUF_INIT;
    assert_int_equal(proto_encode(&big, &bb), SR_OK);
    assert_int_equal(proto_decode(bb.data, bb.len, &m, NULL), SR_OK);
    assert_int_equal(m.u.result.steps_len, 128);
    assert_int_equal(m.u.result.steps[127].token_ids_len, SR_ARRAY_LEN(ids));
    assert_int_equal(m.u.result.steps[127].token_ids[19999], 19999);
    proto_msg_clear(&m);
    sr_buf_free(&bb);
    free(steps);
}

/* ---------------------------------------------------------------------------------------------
 * String arrays and strings in every form (the decoder copies an array's strings at once and
 * checks ASCII a word at a time)
 * ------------------------------------------------------------------------------------------- */

typedef struct {
    uint8_t b[8192];
    size_t n;
} s_w_t;

static void s_w_byte(s_w_t *w, uint8_t c)
{
    assert_true(w->n < sizeof w->b);
    w->b[w->n++] = c;
}

/* s_w_str writes the n bytes at s as a string in form 0 (shortest), 8, 16 or 32. */
static void s_w_str(s_w_t *w, const char *s, size_t n, int form)
{
    if (form == 0 && n < 32) {
        s_w_byte(w, (uint8_t)(0xa0 | n));
    } else if (form <= 8 && n < 256) {
        s_w_byte(w, 0xd9);
        s_w_byte(w, (uint8_t)n);
    } else if (form <= 16) {
        s_w_byte(w, 0xda);
        s_w_byte(w, (uint8_t)(n >> 8));
        s_w_byte(w, (uint8_t)n);
    } else {
        s_w_byte(w, 0xdb);
        for (int i = 3; i >= 0; i--)
            s_w_byte(w, (uint8_t)(n >> (8 * i)));
    }
    assert_true(w->n + n <= sizeof w->b);
    memcpy(w->b + w->n, s, n);
    w->n += n;
}

static void s_w_cstr(s_w_t *w, const char *s)
{
    s_w_str(w, s, strlen(s), 0);
}

/* s_w_obs writes an OBS whose admissible list is the n strings elems (lengths lens, forms forms)
 * and whose session is session (length session_n); a length of SIZE_MAX writes the integer 5. */
static void s_w_obs(s_w_t *w, const char *const *elems, const size_t *lens, const int *forms,
                    size_t n, const char *session, size_t session_n)
{
    w->n = 0;
    s_w_byte(w, 0x8a);
    s_w_cstr(w, "t");
    s_w_cstr(w, "OBS");
    s_w_cstr(w, "v");
    s_w_byte(w, 1);
    s_w_cstr(w, "rid");
    s_w_byte(w, 7);
    s_w_cstr(w, "session");
    s_w_str(w, session, session_n, 0);
    s_w_cstr(w, "obs");
    s_w_cstr(w, "You see a fridge 1.");
    s_w_cstr(w, "admissible");
    assert_true(n < 65536);
    s_w_byte(w, 0xdc);
    s_w_byte(w, (uint8_t)(n >> 8));
    s_w_byte(w, (uint8_t)n);
    for (size_t i = 0; i < n; i++) {
        if (lens[i] == SIZE_MAX)
            s_w_byte(w, 5); /* the integer 5 */
        else
            s_w_str(w, elems[i], lens[i], forms[i]);
    }
    s_w_cstr(w, "reward");
    s_w_byte(w, 0);
    s_w_cstr(w, "done");
    s_w_byte(w, 0xc2);
    s_w_cstr(w, "won");
    s_w_byte(w, 0xc2);
    s_w_cstr(w, "step");
    s_w_byte(w, 3);
}

static void string_arrays_in_every_string_form_decode_to_the_same_strings(void **state)
{
    static char longer[300], text16[1100];
    memset(longer, 'q', sizeof longer - 1);
    memset(text16, 'r', 1024); /* exactly PROTO_MAX_ACTION */
    const char *elems[] = {"go to cabinet 1", "", "look", "caf\xc3\xa9 1", "x",
                           "exactly eight", "12345678", "1234567", "123456789",
                           "thirty-one bytes of a command..", "thirty-two bytes of a command...",
                           longer, text16, "\xe2\x82\xac\xf0\x9f\x8d\x8e", "inventory"};
    size_t n = SR_ARRAY_LEN(elems);
    size_t lens[SR_ARRAY_LEN(elems)];
    int forms[SR_ARRAY_LEN(elems)];
    for (int variant = 0; variant < 4; variant++) {
        for (size_t i = 0; i < n; i++) {
            lens[i] = strlen(elems[i]);
            forms[i] = variant == 0 ? 0 : variant == 1 ? 8 : variant == 2 ? 16 : (int)(i % 4) * 8;
        }
        s_w_t w;
        s_w_obs(&w, elems, lens, forms, n, "actor-1/3", 9);
        proto_msg_t m;
        proto_err_t err;
        int rc = proto_decode(w.b, w.n, &m, &err);
        if (rc != SR_OK)
            fail_msg("variant %d: %s: %s", variant, err.field, err.reason);
        assert_int_equal(m.u.obs.admissible_len, n);
        for (size_t i = 0; i < n; i++) {
            assert_string_equal(m.u.obs.admissible[i], elems[i]);
            assert_int_equal(strlen(m.u.obs.admissible[i]), lens[i]);
        }
        assert_string_equal(m.u.obs.obs, "You see a fridge 1.");
        assert_string_equal(m.u.obs.session, "actor-1/3");
        proto_msg_clear(&m);
    }
    /* an empty list */
    s_w_t w;
    s_w_obs(&w, elems, lens, forms, 0, "s", 1);
    proto_msg_t m;
    proto_err_t err;
    assert_int_equal(proto_decode(w.b, w.n, &m, &err), SR_OK);
    assert_int_equal(m.u.obs.admissible_len, 0);
    proto_msg_clear(&m);
}

static void a_bad_element_anywhere_in_a_string_array_is_named(void **state)
{
    const char *good = "go to fridge 1";
    static const struct {
        const char *s;
        size_t n;
        int form;
        int rc;
        const char *reason;
    } bad[] = {
        {"a\0b", 3, 0, SR_EPROTO, "contains a NUL byte"},
        {"a long command with a NUL \0 in it", 34, 8, SR_EPROTO, "contains a NUL byte"},
        {"bad \xc3", 5, 0, SR_EPROTO, "not valid UTF-8"},
        {"\xed\xa0\x80 surrogate", 13, 16, SR_EPROTO, "not valid UTF-8"},
        {"12345678\x80", 9, 0, SR_EPROTO, "not valid UTF-8"},
    };
    for (size_t b = 0; b < SR_ARRAY_LEN(bad); b++) {
        for (size_t at = 0; at < 5; at++) {
            const char *elems[5];
            size_t lens[5];
            int forms[5];
            for (size_t i = 0; i < 5; i++) {
                elems[i] = i == at ? bad[b].s : good;
                lens[i] = i == at ? bad[b].n : strlen(good);
                forms[i] = i == at ? bad[b].form : 0;
            }
            s_w_t w;
            s_w_obs(&w, elems, lens, forms, 5, "s", 1);
            proto_msg_t m;
            proto_err_t err;
            assert_int_equal(proto_decode(w.b, w.n, &m, &err), bad[b].rc);
            char field[32];
            snprintf(field, sizeof field, "admissible[%zu]", at);
            assert_string_equal(err.field, field);
            assert_string_equal(err.reason, bad[b].reason);
            assert_int_equal(m.type, PROTO_NONE);
        }
    }
    /* one over the limit of an action, and an element that is not a string */
    static char over[1026];
    memset(over, 'o', 1025);
    const char *elems[3] = {good, over, good};
    size_t lens[3] = {strlen(good), 1025, strlen(good)};
    int forms[3] = {0, 16, 0};
    s_w_t w;
    s_w_obs(&w, elems, lens, forms, 3, "s", 1);
    proto_msg_t m;
    proto_err_t err;
    assert_int_equal(proto_decode(w.b, w.n, &m, &err), SR_ETOOBIG);
    assert_string_equal(err.field, "admissible[1]");
    assert_string_equal(err.reason, "string of 1025 bytes exceeds the limit of 1024");
    lens[1] = SIZE_MAX; /* an integer in place of a string */
    s_w_obs(&w, elems, lens, forms, 3, "s", 1);
    assert_int_equal(proto_decode(w.b, w.n, &m, &err), SR_EPROTO);
    assert_string_equal(err.field, "admissible[1]");
    assert_string_equal(err.reason, "not a string");
}

/* Every string length 0..40 with a NUL or a high byte at every position: the word-wise ASCII check
 * must find it wherever it is (first word, last overlapping word, the tail of a short one). */
static void ascii_checks_find_a_nul_or_a_high_byte_at_every_position(void **state)
{
    for (size_t n = 0; n <= 40; n++) {
        char s[48];
        for (size_t i = 0; i < n; i++)
            s[i] = (char)('a' + i % 26);
        for (int what = 0; what < 3; what++) {
            for (size_t at = 0; at < (what == 0 ? 1 : n); at++) {
                char t[48];
                memcpy(t, s, n);
                if (what == 1)
                    t[at] = '\0';
                else if (what == 2)
                    t[at] = (char)0x80;
                const char *elems[1] = {t};
                size_t lens[1] = {n};
                int forms[1] = {0};
                s_w_t w;
                s_w_obs(&w, elems, lens, forms, 1, t, n); /* the session too (an ID) */
                proto_msg_t m;
                proto_err_t err;
                int rc = proto_decode(w.b, w.n, &m, &err);
                if (what == 0) {
                    assert_int_equal(rc, SR_OK);
                    assert_int_equal(strlen(m.u.obs.session), n);
                    assert_memory_equal(m.u.obs.session, t, n);
                    assert_int_equal(strlen(m.u.obs.admissible[0]), n);
                    assert_memory_equal(m.u.obs.admissible[0], t, n);
                    proto_msg_clear(&m);
                } else {
                    assert_int_equal(rc, SR_EPROTO);
                    assert_string_equal(err.field, "session");
                    assert_string_equal(err.reason,
                                        what == 1 ? "contains a NUL byte" : "not valid UTF-8");
                }
            }
        }
    }
}

/* Keys are compared a word at a time (the first eight bytes, then the rest): decoys that share a
 * prefix with a field's name, differ only in its eighth or a later byte, or are longer or shorter,
 * must not be taken for it, in either order, and a key in the message's last eight bytes (read
 * byte by byte) is still found. */
static void keys_that_share_a_prefix_or_differ_late_are_told_apart(void **state)
{
    static const char *decoys[][2] = {
        {"group_sizf", "group_size"}, {"group_siz", "group_size"}, {"group_sizee", "group_size"},
        {"actor_ie", "actor_id"},     {"actor_i", "actor_id"},     {"bctor_id", "actor_id"},
        {"runx", "run"},              {"ru", "run"},               {"acti0n", "action"},
        {"rewarc", "reward"},         {"taskk", "task"},           {"", "task"},
    };
    for (size_t dcy = 0; dcy < SR_ARRAY_LEN(decoys); dcy++) {
        for (int decoy_first = 0; decoy_first < 2; decoy_first++) {
            const char *real = decoys[dcy][1];
            s_w_t w = {.n = 0};
            s_w_byte(&w, 0x8e); /* 14 entries */
            s_w_cstr(&w, "t");
            s_w_cstr(&w, "ACTION");
            s_w_cstr(&w, "v");
            s_w_byte(&w, 1);
            const char *names[] = {"run", "group", "traj", "step", "action", "ended",
                                   "reward", "actor_id", "group_size", "task"};
            for (size_t f = 0; f < SR_ARRAY_LEN(names); f++) {
                bool is_real = strcmp(names[f], real) == 0;
                for (int pass = 0; pass < (is_real ? 2 : 1); pass++) {
                    bool write_decoy = is_real && (pass == 0) == (decoy_first == 1);
                    const char *k = write_decoy ? decoys[dcy][0] : names[f];
                    s_w_cstr(&w, k);
                    const char *name = names[f];
                    if (!strcmp(name, "traj"))
                        s_w_byte(&w, write_decoy ? 9 : 5);
                    else if (!strcmp(name, "step"))
                        s_w_byte(&w, write_decoy ? 99 : 4);
                    else if (!strcmp(name, "group_size"))
                        s_w_byte(&w, write_decoy ? 2 : 8);
                    else if (!strcmp(name, "ended"))
                        s_w_byte(&w, write_decoy ? 0xc3 : 0xc2);
                    else if (!strcmp(name, "reward"))
                        s_w_byte(&w, write_decoy ? 7 : 1);
                    else
                        s_w_cstr(&w, write_decoy ? "decoy" : name);
                }
            }
            s_w_cstr(&w, "won"); /* the last key, within the last eight bytes */
            s_w_byte(&w, 0xc3);
            proto_msg_t m;
            proto_err_t err;
            int rc = proto_decode(w.b, w.n, &m, &err);
            if (rc != SR_OK)
                fail_msg("decoy %s: %s: %s", decoys[dcy][0], err.field, err.reason);
            const proto_action_t *a = &m.u.action;
            assert_string_equal(a->run, "run");
            assert_string_equal(a->group, "group");
            assert_int_equal(a->traj, 5);
            assert_int_equal(a->step, 4);
            assert_string_equal(a->action, "action");
            assert_false(a->ended);
            assert_true(a->reward == 1.0);
            assert_string_equal(a->actor_id, "actor_id");
            assert_int_equal(a->group_size, 8);
            assert_string_equal(a->task, "task");
            assert_true(a->has_won && a->won);
            proto_msg_clear(&m);
        }
    }
}

/* ---------------------------------------------------------------------------------------------
 * Random mutations
 * ------------------------------------------------------------------------------------------- */

static uint64_t s_rng(uint64_t *s)
{
    /* splitmix64 */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void random_mutations_never_crash_and_always_explain(void **state)
{
    proto_type_t types[] = {PROTO_JOB, PROTO_RESULT, PROTO_OBS, PROTO_HEARTBEAT, PROTO_CANCEL,
                            PROTO_BATCH, PROTO_HELLO, PROTO_ERROR};
    sr_buf_t base[SR_ARRAY_LEN(types)];
    for (size_t i = 0; i < SR_ARRAY_LEN(types); i++)
        base[i] = s_encoded(types[i]);
    uint64_t seed = 20240601;
    uint8_t *w = malloc(16384);
    int ok = 0, failed = 0;
    for (int it = 0; it < 20000; it++) {
        const sr_buf_t *b = &base[s_rng(&seed) % SR_ARRAY_LEN(types)];
        size_t len = b->len;
        memcpy(w, b->data, len);
        int nmut = 1 + (int)(s_rng(&seed) % 4);
        for (int k = 0; k < nmut && len > 0; k++) {
            size_t pos = s_rng(&seed) % len;
            switch (s_rng(&seed) % 6) {
            case 0: w[pos] ^= (uint8_t)(1u << (s_rng(&seed) % 8)); break;
            case 1: w[pos] = (uint8_t)s_rng(&seed); break;
            case 2: len = pos; break;
            case 3: /* insert a byte */
                memmove(w + pos + 1, w + pos, len - pos);
                w[pos] = (uint8_t)s_rng(&seed);
                len++;
                break;
            case 4: /* delete a byte */
                memmove(w + pos, w + pos + 1, len - pos - 1);
                len--;
                break;
            default: /* an interesting header byte */
                w[pos] = (uint8_t)"\xdb\xdd\xdf\xc6\xcf\xd3\xc1\xc0\xff\x7f"[s_rng(&seed) % 10];
                break;
            }
        }
        proto_msg_t m;
        proto_err_t err;
        int rc = proto_decode(w, len, &m, &err);
        if (rc == SR_OK) {
            ok++;
            /* Whatever decodes must encode again, and decode to the same bytes. */
            sr_buf_t again = SR_BUF_INIT, twice = SR_BUF_INIT;
            assert_int_equal(proto_encode(&m, &again), SR_OK);
            proto_msg_t m2;
            assert_int_equal(proto_decode(again.data, again.len, &m2, &err), SR_OK);
            assert_int_equal(proto_encode(&m2, &twice), SR_OK);
            assert_int_equal(again.len, twice.len);
            assert_memory_equal(again.data, twice.data, again.len);
            proto_msg_clear(&m2);
            proto_msg_clear(&m);
            sr_buf_free(&again);
            sr_buf_free(&twice);
        } else {
            failed++;
            assert_true(rc == SR_EPROTO || rc == SR_ETOOBIG);
            assert_int_equal(err.rc, rc);
            assert_true(err.reason[0] != '\0');
        }
    }
    /* The loop must exercise both paths. */
    assert_true(ok > 100);
    assert_true(failed > 10000);
    free(w);
    for (size_t i = 0; i < SR_ARRAY_LEN(types); i++)
        sr_buf_free(&base[i]);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(result_step_tokens_round_trip_as_little_endian_bins),
    cmocka_unit_test(a_logprob_that_is_not_finite_is_refused_with_its_index),
        cmocka_unit_test(weights_ready_path_round_trips_and_is_optional),
        cmocka_unit_test(hello_round_trips),
        cmocka_unit_test(hello_optional_fields_absent_are_null),
        cmocka_unit_test(welcome_round_trips_with_and_without_env_workers),
        cmocka_unit_test(welcome_carries_env_kinds_parallel_to_env_workers),
        cmocka_unit_test(job_carries_the_tasks_env),
        cmocka_unit_test(credit_round_trips),
        cmocka_unit_test(job_round_trips),
        cmocka_unit_test(job_optional_fields_absent_take_defaults),
        cmocka_unit_test(result_round_trips_with_nested_steps_and_messages),
        cmocka_unit_test(result_optional_fields_absent_vs_present),
        cmocka_unit_test(heartbeat_round_trips),
        cmocka_unit_test(bye_round_trips_and_defaults),
        cmocka_unit_test(result_ack_round_trips_and_reason_is_optional),
        cmocka_unit_test(action_round_trips_and_won_is_optional),
        cmocka_unit_test(cancel_round_trips_with_keep),
        cmocka_unit_test(policy_version_round_trips),
        cmocka_unit_test(reset_round_trips_and_defaults),
        cmocka_unit_test(job_and_reset_carry_task_data_byte_for_byte),
        cmocka_unit_test(task_data_must_be_a_map),
        cmocka_unit_test(step_and_close_round_trip),
        cmocka_unit_test(obs_round_trips),
        cmocka_unit_test(obs_with_a_pre_encoded_list_is_the_same_bytes),
        cmocka_unit_test(error_round_trips_and_rid_is_optional),
        cmocka_unit_test(batch_round_trips_with_groups_trajectories_and_stats),
        cmocka_unit_test(weights_ready_round_trips_and_defaults),
    cmocka_unit_test(weights_ready_refusal_carries_ok_false_and_a_reason),
    cmocka_unit_test(batch_carries_the_audit_weight_raw_advantages_and_the_estimator),
        cmocka_unit_test(unknown_keys_are_ignored),
        cmocka_unit_test(integers_in_any_msgpack_width_and_numbers_as_ints_are_accepted),
        cmocka_unit_test(strings_exactly_at_their_limit_are_accepted),
        cmocka_unit_test(nesting_at_the_depth_limit_is_accepted),
        cmocka_unit_test(empty_and_non_map_buffers_are_refused),
        cmocka_unit_test(trailing_bytes_after_the_map_are_refused),
        cmocka_unit_test(every_truncation_of_a_valid_message_is_refused),
        cmocka_unit_test(type_and_version_errors_are_specific),
        cmocka_unit_test(each_required_field_missing_is_named),
        cmocka_unit_test(wrong_types_are_named),
        cmocka_unit_test(out_of_range_and_negative_values_are_refused),
        cmocka_unit_test(huge_declared_lengths_are_refused_without_allocating),
        cmocka_unit_test(nesting_deeper_than_the_limit_is_refused),
        cmocka_unit_test(error_paths_name_multi_digit_array_indices),
        cmocka_unit_test(bad_utf8_and_nul_bytes_are_refused_in_text),
        cmocka_unit_test(oversize_strings_and_arrays_are_refused),
        cmocka_unit_test(limits_can_be_tightened_by_the_caller),
        cmocka_unit_test(invalid_bytes_and_non_string_keys_are_refused),
        cmocka_unit_test(peek_reads_the_type_without_decoding),
        cmocka_unit_test(encode_refuses_null_required_strings_and_oversize_values),
        cmocka_unit_test(encode_appends_and_clear_ignores_built_messages),
        cmocka_unit_test(encoding_matches_what_other_msgpack_writers_produce),
        cmocka_unit_test(maps_of_many_keys_and_repeated_keys_are_read_in_place),
        cmocka_unit_test(task_data_is_kept_in_msgpacks_shortest_form),
        cmocka_unit_test(decoded_memory_is_one_block_reused_moved_and_freed_in_any_thread),
        cmocka_unit_test(string_arrays_in_every_string_form_decode_to_the_same_strings),
        cmocka_unit_test(a_bad_element_anywhere_in_a_string_array_is_named),
        cmocka_unit_test(ascii_checks_find_a_nul_or_a_high_byte_at_every_position),
        cmocka_unit_test(keys_that_share_a_prefix_or_differ_late_are_told_apart),
        cmocka_unit_test(random_mutations_never_crash_and_always_explain),
    };
    return harness_run_("proto", tests, SR_ARRAY_LEN(tests), argc, argv);
}
