/*
 * proto.h — the selroll wire protocol: every message type as a C struct, and a codec that turns
 * a message into one msgpack map and back. docs/protocol.md is the reference for other languages.
 *
 * Every message is one msgpack map with string keys that always carries "t" (the type name, e.g.
 * "JOB") and "v" (the protocol version, SELROLL_PROTO_VERSION). Unknown keys are ignored, so a
 * newer peer may add fields. The codec is a set of pure functions over buffers; it never touches
 * a socket, so it is tested byte by byte and fuzzed.
 *
 * Decoding is defensive: the input is first scanned without allocating (every declared length is
 * checked against the bytes that are really there and against the limits below), then decoded
 * field by field. Any problem gives SR_EPROTO, or SR_ETOOBIG for a limit, and a proto_err_t that
 * names the field ("steps[3].action") and the reason ("not a string").
 *
 * Ownership. A message has two lives:
 *  - built by a caller to be sent: fill a proto_msg_t (proto_msg_init sets the defaults) with
 *    borrowed pointers (string literals, your own buffers, stack arrays) and call proto_encode.
 *    Encode never frees or keeps anything. Do not call proto_msg_clear on such a message (it
 *    would do nothing: clear only frees what decode allocated).
 *  - decoded: proto_decode copies every string and array into memory the message owns as a whole
 *    (one chunk in the usual case, reused from a per-thread cache: no malloc per message once a
 *    receiver runs); proto_msg_clear frees it all. A single string or array of a decoded message
 *    is not heap memory of its own: never free one, copy what must outlive proto_msg_clear. A
 *    decoded message may be moved (copied by value, the old copy forgotten) and cleared once, in
 *    any thread. Strings are NUL-terminated valid UTF-8 without NUL bytes.
 * Optional fields: an optional string or array is NULL / length 0 when absent; an optional number
 * without a natural default has a has_<name> flag; an optional field with a default (top_p = 1.0)
 * is set to that default by proto_msg_init and by decode when the key is absent (or nil).
 */
#ifndef SR_PROTO_H
#define SR_PROTO_H

#include "common/sr.h"
#include "common/sr_buf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Limits. Text fields (observations, raw model responses, chat contents, error texts) are limited
 * to proto_limits_t.max_text, PROTO_MAX_TEXT by default. */
#define PROTO_MAX_ID (256)              /* ids and names: actor_id, run, group, task, session, ... */
#define PROTO_MAX_ACTION (1024)         /* actions, endpoints and URLs, short reasons */
#define PROTO_MAX_TEXT (64 * 1024)      /* default text limit */
#define PROTO_MAX_STEPS (1024)          /* RESULT.steps */
#define PROTO_MAX_ADMISSIBLE (4096)     /* OBS.admissible */
#define PROTO_MAX_GROUPS (4096)         /* BATCH.groups */
#define PROTO_MAX_MESSAGES (256)        /* RESULT.steps[i].messages */
#define PROTO_MAX_LIST (4096)           /* any other array and any map (entries) */
#define PROTO_MAX_SLOTS (4096)          /* HELLO.slots, CREDIT.credits */
#define PROTO_MAX_GROUP_SIZE (1024)     /* JOB.group_size; BATCH rewards/advantages/trajectories */
#define PROTO_MAX_MSG_BYTES (64u << 20) /* a whole encoded message */
#define PROTO_MAX_DEPTH (16)            /* nesting of maps and arrays; the outer map is level 1 */
#define PROTO_MAX_TASK_DATA (1u << 20)  /* JOB.task_data and RESET.task_data, encoded */
#define PROTO_MAX_TOKENS (131072)       /* a step's token_ids, token_logprobs, prompt_token_ids */

typedef enum {
    PROTO_NONE = 0, /* not a message type: a zeroed proto_msg_t, or an unreadable buffer */
    PROTO_HELLO,
    PROTO_WELCOME,
    PROTO_CREDIT,
    PROTO_JOB,
    PROTO_RESULT,
    PROTO_HEARTBEAT,
    PROTO_BYE,
    PROTO_ACTION,
    PROTO_CANCEL,
    PROTO_POLICY_VERSION,
    PROTO_RESET,
    PROTO_STEP,
    PROTO_CLOSE,
    PROTO_OBS,
    PROTO_ERROR,
    PROTO_BATCH,
    PROTO_WEIGHTS_READY,
    PROTO_RESULT_ACK,
    PROTO_TYPE_COUNT
} proto_type_t;

/* HELLO, actor -> coordinator (work channel): an actor or a gate registers. */
typedef struct {
    const char *actor_id;
    const char *role; /* "actor" | "gate" */
    int64_t slots;    /* 0..PROTO_MAX_SLOTS */
    const char *host;
    int64_t pid;
    const char *policy;  /* optional: the policy endpoint URL */
    const char *version; /* optional: the software version */
} proto_hello_t;

/* WELCOME, coordinator -> actor: the run's parameters. */
typedef struct {
    const char *run;
    const char *actor_id;
    int64_t lease_ms;
    int64_t heartbeat_ms;
    const char *bus_pub; /* endpoint to connect the PUB socket to */
    const char *bus_sub; /* endpoint to connect the SUB socket to */
    int64_t policy_version;
    const char **env_workers; /* optional: env-worker endpoints */
    size_t env_workers_len;
    /* optional: the kind of each env worker, parallel to env_workers ("" = unknown, serves any
     * task); absent (NULL / 0) = every kind unknown. When present it has env_workers_len
     * entries: encode refuses another length (SR_EINVAL), decode too (SR_EPROTO). */
    const char **env_kinds;
    size_t env_kinds_len;
} proto_welcome_t;

/* CREDIT, actor -> coordinator: free slots granted for new jobs. */
typedef struct {
    int64_t credits; /* 0..PROTO_MAX_SLOTS */
} proto_credit_t;

/* JOB, coordinator -> actor: roll out one trajectory of one group. */
typedef struct {
    const char *job_id;
    int64_t epoch; /* fencing token */
    const char *run;
    const char *group;
    int64_t traj;       /* 0..group_size-1 */
    int64_t group_size; /* 1..PROTO_MAX_GROUP_SIZE */
    const char *task;   /* e.g. "household/train/17" */
    /* optional: the task's own description, the raw msgpack bytes of one map (a task file's line,
     * docs/protocol.md "JOB"); NULL / 0 when absent. Decode allocates a copy, clear frees it. */
    const uint8_t *task_data;
    size_t task_data_len;
    const char *env; /* optional: the env-worker kind that serves the task (the task set's env) */
    int64_t iteration;
    int64_t policy_version;
    uint64_t seed;
    double temperature;
    double top_p; /* optional, default 1.0 */
    int64_t max_steps;
    int64_t max_tokens; /* optional, default 0 = server default */
    bool eval;          /* optional, default false */
    int64_t lease_ms;
} proto_job_t;

/* One chat message sent to the policy. */
typedef struct {
    const char *role;
    const char *content;
} proto_chat_msg_t;

/* One environment step of a trajectory, inside RESULT.steps. */
typedef struct {
    int64_t i;          /* step index */
    const char *action; /* parsed, normalised */
    const char *raw;    /* raw model text */
    const char *obs;    /* observation after the action */
    double reward;
    bool done;
    int64_t prompt_tokens;
    int64_t completion_tokens;
    bool has_logprob;
    double logprob; /* optional */
    bool format_error;
    double latency_ms;
    bool has_t;
    double t_ms; /* optional: wall time the step ended, ms since the Unix epoch (µs precision) */
    proto_chat_msg_t *messages; /* optional: the chat messages sent */
    size_t messages_len;
    const char *reasoning; /* optional: reasoning the server returned beside the content */
    bool has_reasoning_tokens;
    int64_t reasoning_tokens; /* optional: the server's count of reasoning tokens */
    const char *model;     /* optional: the model the server says answered */
    bool has_served_version;
    int64_t served_version; /* optional: the policy version that answered, when known */
    bool usage_unknown;     /* optional, default false: the server sent no usage (tokens are 0) */
    bool text_truncated;    /* optional, default false: raw or reasoning cut to the text limit */
    /* Tokens (optional, --tokens): on the wire msgpack bin of little-endian int32 / float32. */
    const int32_t *token_ids; /* the completion's ids, reasoning included */
    size_t token_ids_len;
    const float *token_logprobs; /* the sampled tokens' logprobs, as many as token_ids */
    size_t token_logprobs_len;
    const int32_t *prompt_token_ids; /* the prompt's ids after prompt_prefix (--tokens full) */
    size_t prompt_token_ids_len;
    bool has_prompt_prefix;
    int64_t prompt_prefix; /* optional: the prompt starts with this many tokens of the previous
                              step's prompt followed by its token_ids */
    bool tokens_mismatch; /* optional, default false: token_ids disagree with completion_tokens */
} proto_result_step_t;

/* RESULT, actor -> coordinator: one finished (or stopped) trajectory. Also the element type of
 * BATCH.groups[i].trajectories. */
typedef struct {
    const char *job_id;
    int64_t epoch;
    const char *run;
    const char *group;
    int64_t traj;
    const char *task;
    const char *status; /* "done" | "cancelled" | "failed" | "truncated" */
    double reward;
    bool won;
    int64_t n_steps;
    int64_t llm_calls;
    int64_t prompt_tokens;
    int64_t completion_tokens;
    int64_t aborted_tokens; /* optional, default 0 */
    int64_t wall_ms;
    const char *error; /* optional */
    int64_t usage_unknown_steps; /* optional, default 0: steps whose usage the server did not say */
    proto_result_step_t *steps;
    size_t steps_len;
} proto_result_t;

/* A lease to renew, inside HEARTBEAT.leases. */
typedef struct {
    const char *job_id;
    int64_t epoch;
} proto_lease_t;

/* HEARTBEAT, actor -> coordinator. */
typedef struct {
    const char *actor_id;
    int64_t running;
    int64_t free;
    proto_lease_t *leases;
    size_t leases_len;
} proto_heartbeat_t;

/* BYE, actor -> coordinator. */
typedef struct {
    const char *actor_id;
    const char *reason; /* optional */
    bool drain;         /* optional, default false */
} proto_bye_t;

/* RESULT_ACK, coordinator -> actor: the RESULT of (job_id, epoch) is durably stored (ok) or was
 * refused (ok false: a stale epoch, an unknown job; reason says which). The actor keeps a RESULT
 * and sends it again until it is acknowledged either way. */
typedef struct {
    const char *job_id;
    int64_t epoch;
    bool ok;
    const char *reason; /* optional */
} proto_result_ack_t;

/* ACTION, bus topic "act/<run>/<group>": one step of one trajectory. */
typedef struct {
    const char *run;
    const char *group;
    int64_t traj;
    int64_t step;       /* 1-based step number */
    const char *action; /* normalised */
    bool ended;
    double reward;
    bool has_won;
    bool won;             /* optional */
    const char *actor_id; /* optional */
    int64_t group_size;   /* optional, 0 = not given: G of the group, so a gate needs no lookup */
    const char *task;     /* optional: the group's task id (for history-aware gates) */
} proto_action_t;

/* CANCEL, bus topic "ctl/<run>/cancel": the gate stops a group. */
typedef struct {
    const char *run;
    const char *group;
    int64_t step; /* the checkpoint K */
    double d;     /* divergence */
    const char *reason;
    int64_t *keep; /* optional: trajectories that may finish (keep-two) */
    size_t keep_len;
} proto_cancel_t;

/* POLICY_VERSION, bus topic "ctl/<run>/policy". */
typedef struct {
    const char *run;
    int64_t version;
    int64_t iteration;
} proto_policy_version_t;

/* RESET, actor -> env worker: start an episode in a (new or reused) session. */
typedef struct {
    uint64_t rid; /* request id, echoed in the reply */
    const char *session;
    const char *task;
    const uint8_t *task_data; /* optional: as JOB.task_data (raw msgpack of one map) */
    size_t task_data_len;
    bool has_seed;
    uint64_t seed;     /* optional */
    int64_t max_steps; /* optional, default 50 */
} proto_reset_t;

/* STEP, actor -> env worker. */
typedef struct {
    uint64_t rid;
    const char *session;
    const char *action;
} proto_step_t;

/* CLOSE, actor -> env worker. */
typedef struct {
    uint64_t rid;
    const char *session;
} proto_close_t;

/* OBS, env worker -> actor: the reply to RESET and STEP. */
typedef struct {
    uint64_t rid;
    const char *session;
    const char *obs;
    const char **admissible;
    size_t admissible_len;
    /* optional, to encode: the admissible list already encoded by proto_encode_admissible, sent
     * as it is instead of admissible (which is then not read) */
    const uint8_t *admissible_enc;
    size_t admissible_enc_len;
    double reward;
    bool done;
    bool won;
    int64_t step;
    const char *goal; /* optional: on reset, the task sentence */
} proto_obs_t;

/* ERROR, any reply. */
typedef struct {
    bool has_rid;
    uint64_t rid;        /* optional */
    const char *code;    /* "bad_message", "unknown_session", "full", "unknown_type", "version" */
    const char *msg;     /* human text */
    const char *session; /* optional */
} proto_error_t;

/* One group inside BATCH.groups. */
typedef struct {
    const char *group;
    const char *task;
    double weight; /* optional, default 1.0 */
    double *rewards;
    size_t rewards_len;
    double *advantages; /* what the loss uses: advantages_raw[i] x audit_weight */
    size_t advantages_len;
    double *advantages_raw; /* optional (NULL, 0 = absent): the estimator's values, before the
                               audit weight; as many as rewards when present */
    size_t advantages_raw_len;
    double audit_weight; /* optional, default 1.0: the gate audit's 1/q, > 0 */
    proto_result_t *trajectories;
    size_t trajectories_len;
} proto_group_t;

/* One entry of BATCH.stats. */
typedef struct {
    const char *name;
    double value;
} proto_stat_t;

/* BATCH, coordinator -> trainer. */
typedef struct {
    const char *run;
    int64_t iteration;
    int64_t policy_version;
    proto_group_t *groups;
    size_t groups_len;
    proto_stat_t *stats;
    size_t stats_len;
    const char *estimator; /* optional: the advantage estimator, "grpo" | "rloo" | "dr-grpo" */
} proto_batch_t;

/* WEIGHTS_READY, trainer -> coordinator. */
typedef struct {
    const char *run;
    int64_t version;
    int64_t iteration;
    bool has_loss;
    double loss;        /* optional */
    const char *info;   /* optional */
    bool ok;            /* optional, default true: false = the batch was refused */
    const char *reason; /* optional: why, when ok is false */
    const char *path;   /* optional: where the trainer saved the adapter or weights of version,
                           for --weights-sync (<= PROTO_MAX_ACTION bytes) */
} proto_weights_ready_t;

typedef struct {
    proto_type_t type;
    union {
        proto_hello_t hello;
        proto_welcome_t welcome;
        proto_credit_t credit;
        proto_job_t job;
        proto_result_t result;
        proto_heartbeat_t heartbeat;
        proto_bye_t bye;
        proto_action_t action;
        proto_cancel_t cancel;
        proto_policy_version_t policy_version;
        proto_reset_t reset;
        proto_step_t step;
        proto_close_t close;
        proto_obs_t obs;
        proto_error_t error;
        proto_batch_t batch;
        proto_weights_ready_t weights_ready;
        proto_result_ack_t result_ack;
    } u;
    bool owned_; /* set by proto_decode: the pointers inside point into mem_, which clear frees */
    void *mem_;  /* set by proto_decode: the memory of the decoded strings and arrays */
} proto_msg_t;

/* The reason of a failed decode. field is the path of the offending field ("steps[3].action",
 * "t", or "" for the message as a whole); reason is a short sentence ("not a string"). */
#define PROTO_ERR_FIELD_MAX 128
#define PROTO_ERR_REASON_MAX 160
typedef struct {
    int rc; /* the SR_E* code decode returned, SR_OK if none */
    char field[PROTO_ERR_FIELD_MAX];
    char reason[PROTO_ERR_REASON_MAX];
} proto_err_t;

/* Limits a decoder may change; proto_limits_default() gives the documented ones. */
typedef struct {
    size_t max_text;      /* text fields; PROTO_MAX_TEXT */
    size_t max_msg_bytes; /* a whole message; PROTO_MAX_MSG_BYTES */
} proto_limits_t;

/* proto_limits_default returns the default limits. */
proto_limits_t proto_limits_default(void);

/* proto_type_name returns the wire name of a type ("JOB"), or "?" for PROTO_NONE and values out
 * of range. The string is static. */
const char *proto_type_name(proto_type_t type);

/* proto_type_from_name maps a wire name ("JOB") to its type; PROTO_NONE if unknown or NULL. */
proto_type_t proto_type_from_name(const char *name);

/* proto_msg_init zeroes m and sets its type and the defaults of its optional fields
 * (JOB.top_p = 1.0, RESET.max_steps = 50, WEIGHTS_READY.ok = true). Use it before filling a message to encode. */
void proto_msg_init(proto_msg_t *m, proto_type_t type);

/* proto_group_init zeroes g and sets weight = 1.0 and audit_weight = 1.0. */
void proto_group_init(proto_group_t *g);

/* proto_encode appends the msgpack encoding of m to out. It reads m and never frees or keeps any
 * of its pointers. Returns 0; SR_EINVAL if m or out is NULL, the type is unknown, a required
 * string is NULL or an array pointer is NULL with a non-zero length; SR_ETOOBIG if a string or
 * array exceeds its default limit; SR_ENOMEM. On failure out may hold a partial message after its
 * old length: the caller truncates it (out->len) or resets it. */
int proto_encode(const proto_msg_t *m, sr_buf_t *out);

/* proto_encode_admissible appends the encoding of an OBS's admissible list of n strings (the
 * value of "admissible", not its key), for proto_obs_t.admissible_enc: a sender that sends the
 * same list again keeps it and skips encoding it. The same checks and errors as proto_encode's
 * for that field (an OBS that proto_encode refuses for its list is refused here). lens, when not
 * NULL, holds each string's length (strlen's, which is then not taken). */
int proto_encode_admissible(const char *const *a, const uint32_t *lens, size_t n, sr_buf_t *out);

/* proto_decode decodes one message of exactly len bytes into out with the default limits.
 * out is overwritten (not cleared first): clear a previously decoded message before reuse.
 * On success returns 0 and out owns all its strings and arrays (free them with
 * proto_msg_clear). On failure returns SR_EPROTO (malformed), SR_ETOOBIG (a limit), SR_EINVAL
 * (NULL out) or SR_ENOMEM, leaves out zeroed (nothing to free), and fills err when err is not
 * NULL. buf may be NULL only when len is 0. */
int proto_decode(const void *buf, size_t len, proto_msg_t *out, proto_err_t *err);

/* proto_decode_limits is proto_decode with caller-chosen limits (NULL = defaults). */
int proto_decode_limits(const void *buf, size_t len, const proto_limits_t *lim, proto_msg_t *out,
                        proto_err_t *err);

/* proto_msg_clear frees everything a decoded message owns and zeroes it. On a message that was
 * built by hand (not by proto_decode), a zeroed one or NULL it frees nothing. */
void proto_msg_clear(proto_msg_t *m);

/* proto_peek_type reads only the "t" key of an encoded message, without decoding or allocating:
 * a quick way to route. Returns PROTO_NONE if the buffer is not a map, has no readable "t", or
 * names an unknown type. It does not validate the rest of the message. */
proto_type_t proto_peek_type(const void *buf, size_t len);

/* proto_err_text writes "field: reason" (or just the reason for message-level errors) into
 * out (size n, always NUL-terminated when n > 0) and returns out. err may be NULL. */
const char *proto_err_text(const proto_err_t *err, char *out, size_t n);

#endif
