/*
 * bench_proto.c — how fast the wire codec is: encode, decode and the round trip of the messages
 * that dominate traffic (JOB and RESULT on the work channel, STEP and OBS on the env channel).
 *
 * Each repetition runs a batch of operations sized (once, by a calibration run) to last about
 * --ms milliseconds; the figure reported is the median over --reps repetitions, which is robust
 * against a noisy neighbour. Messages are realistic in size: the RESULT carries 30 steps with
 * observations, raw model responses and the two chat messages sent at each step. The same RESULT
 * is measured with the token fields of --tokens completion (50 completion ids and logprobs a
 * step) and full (also 600 prompt ids a step, stored whole), and as the trajectories of a BATCH
 * group of 8; and the ACTION of a step on the bus.
 */
#include "bench/bench_proto.h"

#include "common/clock.h"
#include "common/cmds.h"
#include "common/proto.h"
#include "common/sr.h"
#include "common/sr_buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define S_RESULT_STEPS 30
#define S_COMPLETION_IDS 50
#define S_PROMPT_IDS 600
#define S_BATCH_G 8
#define S_NCASES 10

typedef enum { S_ENCODE, S_DECODE, S_ROUNDTRIP } s_mode_t;

typedef struct {
    const char *name;
    proto_msg_t msg;
} s_case_t;

static proto_result_step_t s_steps[S_RESULT_STEPS];
static proto_result_step_t s_steps_tok[2][S_RESULT_STEPS]; /* completion, full */
static int32_t s_ids[S_RESULT_STEPS][S_COMPLETION_IDS], s_pids[S_RESULT_STEPS][S_PROMPT_IDS];
static float s_lps[S_RESULT_STEPS][S_COMPLETION_IDS];
static proto_result_t s_trajs[3][S_BATCH_G];
static proto_group_t s_group[3];
static double s_rewards[S_BATCH_G], s_adv[S_BATCH_G];
static proto_chat_msg_t s_chat[S_RESULT_STEPS][2];
static const char *s_admissible[24];
static char s_adm_text[24][40];

static const char s_system[] =
    "You are an expert agent operating in a household. You are given a goal and the "
    "observation of the room. At each step think briefly inside <think></think>, then give "
    "exactly one admissible command inside <action></action>. Available commands: go to X, "
    "open X, close X, take X from Y, move X to Y, use X, heat X with Y, cool X with Y, "
    "clean X with Y, examine X, inventory, look.";
static const char s_user[] =
    "Your task is to: put a clean apple in fridge. You arrive at countertop 1. On the "
    "countertop 1, you see a apple 1, a bread 1, a butterknife 2, a dishsponge 1, a fork 1, "
    "a knife 1, a lettuce 1, a peppershaker 2, a saltshaker 1, and a spatula 1. Your admissible "
    "commands are: go to cabinet 1, go to cabinet 2, go to fridge 1, take apple 1 from "
    "countertop 1, take bread 1 from countertop 1, examine countertop 1, inventory, look.";
static const char s_raw[] =
    "<think>The apple is on the countertop. I should take it, then clean it at the sink "
    "before putting it in the fridge.</think><action>take apple 1 from countertop 1</action>";
static const char s_obs[] =
    "You pick up the apple 1 from the countertop 1. On the countertop 1, you see a bread 1, "
    "a butterknife 2, a dishsponge 1, a fork 1, a knife 1, a lettuce 1, and a spatula 1.";

static void s_cases(s_case_t c[S_NCASES])
{
    c[0].name = "JOB";
    proto_msg_init(&c[0].msg, PROTO_JOB);
    c[0].msg.u.job = (proto_job_t){.job_id = "r1:12:g-0007:5:3", .epoch = 3, .run = "r1",
                                   .group = "g-0007", .traj = 5, .group_size = 8,
                                   .task = "household/train/17", .iteration = 12,
                                   .policy_version = 12, .seed = 0x9e3779b97f4a7c15ull,
                                   .temperature = 0.7, .top_p = 1.0, .max_steps = 30,
                                   .max_tokens = 512, .eval = false, .lease_ms = 60000};

    c[1].name = "STEP";
    proto_msg_init(&c[1].msg, PROTO_STEP);
    c[1].msg.u.step = (proto_step_t){.rid = 123456, .session = "actor-3/17",
                                     .action = "take apple 1 from countertop 1"};

    c[2].name = "OBS";
    for (size_t i = 0; i < SR_ARRAY_LEN(s_admissible); i++) {
        snprintf(s_adm_text[i], sizeof s_adm_text[i], "go to cabinet %zu", i + 1);
        s_admissible[i] = s_adm_text[i];
    }
    proto_msg_init(&c[2].msg, PROTO_OBS);
    c[2].msg.u.obs = (proto_obs_t){.rid = 123456, .session = "actor-3/17", .obs = s_obs,
                                   .admissible = s_admissible,
                                   .admissible_len = SR_ARRAY_LEN(s_admissible), .reward = 0.0,
                                   .done = false, .won = false, .step = 4};

    c[3].name = "RESULT(30 steps)";
    for (int i = 0; i < S_RESULT_STEPS; i++) {
        s_chat[i][0] = (proto_chat_msg_t){.role = "system", .content = s_system};
        s_chat[i][1] = (proto_chat_msg_t){.role = "user", .content = s_user};
        s_steps[i] = (proto_result_step_t){
            .i = i, .action = "take apple 1 from countertop 1", .raw = s_raw, .obs = s_obs,
            .reward = i == S_RESULT_STEPS - 1 ? 1.0 : 0.0, .done = i == S_RESULT_STEPS - 1,
            .prompt_tokens = 380 + 40 * i, .completion_tokens = 46, .has_logprob = true,
            .logprob = -12.5, .format_error = false, .latency_ms = 180.25,
            .messages = s_chat[i], .messages_len = 2};
    }
    proto_msg_init(&c[3].msg, PROTO_RESULT);
    c[3].msg.u.result = (proto_result_t){
        .job_id = "r1:12:g-0007:5:3", .epoch = 3, .run = "r1", .group = "g-0007", .traj = 5,
        .task = "household/train/17", .status = "done", .reward = 1.0, .won = true,
        .n_steps = S_RESULT_STEPS, .llm_calls = S_RESULT_STEPS, .prompt_tokens = 28800,
        .completion_tokens = 1380, .wall_ms = 5400, .steps = s_steps,
        .steps_len = S_RESULT_STEPS};

    /* token ids below 151000 (a Qwen-sized vocabulary), logprobs in (-3, 0] */
    uint32_t x = 2463534242u;
    for (int i = 0; i < S_RESULT_STEPS; i++) {
        for (int k = 0; k < S_COMPLETION_IDS; k++) {
            x ^= x << 13, x ^= x >> 17, x ^= x << 5;
            s_ids[i][k] = (int32_t)(x % 151000);
            s_lps[i][k] = -(float)(x % 3000) / 1000.0f;
        }
        for (int k = 0; k < S_PROMPT_IDS; k++) {
            x ^= x << 13, x ^= x >> 17, x ^= x << 5;
            s_pids[i][k] = (int32_t)(x % 151000);
        }
        for (int f = 0; f < 2; f++) {
            s_steps_tok[f][i] = s_steps[i];
            s_steps_tok[f][i].token_ids = s_ids[i];
            s_steps_tok[f][i].token_ids_len = S_COMPLETION_IDS;
            s_steps_tok[f][i].token_logprobs = s_lps[i];
            s_steps_tok[f][i].token_logprobs_len = S_COMPLETION_IDS;
            if (f == 1) {
                s_steps_tok[f][i].prompt_token_ids = s_pids[i];
                s_steps_tok[f][i].prompt_token_ids_len = S_PROMPT_IDS;
            }
        }
    }
    static const char *const names[] = {"RESULT tokens comp", "RESULT tokens full",
                                        "BATCH(8) tok off", "BATCH(8) tok comp",
                                        "BATCH(8) tok full"};
    for (int f = 0; f < 2; f++) {
        c[4 + f].name = names[f];
        c[4 + f].msg = c[3].msg;
        c[4 + f].msg.u.result.steps = s_steps_tok[f];
    }
    for (int k = 0; k < S_BATCH_G; k++) {
        s_rewards[k] = k % 2;
        s_adv[k] = k % 2 ? 1.0 : -1.0;
    }
    for (int f = 0; f < 3; f++) {
        for (int k = 0; k < S_BATCH_G; k++) {
            s_trajs[f][k] = c[3].msg.u.result;
            s_trajs[f][k].traj = k;
            s_trajs[f][k].steps = f == 0 ? s_steps : s_steps_tok[f - 1];
        }
        proto_group_init(&s_group[f]);
        s_group[f].group = "g-0007";
        s_group[f].task = "household/train/17";
        s_group[f].rewards = s_rewards;
        s_group[f].rewards_len = S_BATCH_G;
        s_group[f].advantages = s_adv;
        s_group[f].advantages_len = S_BATCH_G;
        s_group[f].trajectories = s_trajs[f];
        s_group[f].trajectories_len = S_BATCH_G;
        c[6 + f].name = names[2 + f];
        proto_msg_init(&c[6 + f].msg, PROTO_BATCH);
        c[6 + f].msg.u.batch = (proto_batch_t){.run = "r1", .iteration = 12, .policy_version = 12,
                                               .groups = &s_group[f], .groups_len = 1,
                                               .estimator = "grpo"};
    }

    c[9].name = "ACTION";
    proto_msg_init(&c[9].msg, PROTO_ACTION);
    c[9].msg.u.action = (proto_action_t){.run = "r1", .group = "g-0007", .traj = 5, .step = 4,
                                         .action = "take apple 1 from countertop 1",
                                         .ended = false, .reward = 0.0, .actor_id = "actor-3",
                                         .group_size = 8, .task = "household/train/17"};
}

/* s_batch runs n operations of the given mode and returns ns per operation, or -1 on failure. */
static double s_batch(const proto_msg_t *m, const sr_buf_t *enc, s_mode_t mode, long n,
                      sr_buf_t *scratch)
{
    double t0 = (double)clock_mono_ns();
    for (long i = 0; i < n; i++) {
        proto_msg_t out;
        if (mode != S_DECODE) {
            sr_buf_reset(scratch);
            if (proto_encode(m, scratch) != SR_OK)
                return -1;
        }
        if (mode != S_ENCODE) {
            const sr_buf_t *src = mode == S_DECODE ? enc : scratch;
            if (proto_decode(src->data, src->len, &out, NULL) != SR_OK)
                return -1;
            proto_msg_clear(&out);
        }
    }
    return ((double)clock_mono_ns() - t0) / (double)n;
}

/* s_median_ns calibrates a batch to about ms milliseconds and returns the median ns/op over
 * reps batches (-1 on failure). */
static double s_median_ns(const proto_msg_t *m, const sr_buf_t *enc, s_mode_t mode, int reps,
                          int ms, sr_buf_t *scratch)
{
    double probe = s_batch(m, enc, mode, 50, scratch);
    if (probe <= 0)
        return -1;
    long n = (long)((double)ms * 1e6 / probe);
    if (n < 10)
        n = 10;
    double t[64];
    for (int r = 0; r < reps; r++)
        if ((t[r] = s_batch(m, enc, mode, n, scratch)) < 0)
            return -1;
    return sr_median(t, (size_t)reps);
}

/* s_counted runs exactly n operations of each mode on every case whose name starts with only
 * (all with NULL), for counting tools: `valgrind --tool=callgrind` (instructions) or memcheck
 * (allocations) over two values of n, the difference divided by the difference of n. */
static int s_counted(s_case_t *cases, size_t ncases, const char *only, long n)
{
    sr_buf_t enc = SR_BUF_INIT, scratch = SR_BUF_INIT;
    int rc = 0, matched = 0;
    for (size_t c = 0; c < ncases && rc == 0; c++) {
        if (only && strncasecmp(cases[c].name, only, strlen(only)) != 0)
            continue;
        matched++;
        sr_buf_reset(&enc);
        if (proto_encode(&cases[c].msg, &enc) != SR_OK ||
            s_batch(&cases[c].msg, &enc, S_ENCODE, n, &scratch) < 0 ||
            s_batch(&cases[c].msg, &enc, S_DECODE, n, &scratch) < 0) {
            fprintf(stderr, "bench proto: %s failed to round-trip\n", cases[c].name);
            rc = 1;
        } else {
            printf("%-18s %8zu bytes: %ld encodes, %ld decodes\n", cases[c].name, enc.len, n, n);
        }
    }
    if (matched == 0) {
        fprintf(stderr, "bench proto: no message named %s (try --help)\n", only);
        rc = 2;
    }
    sr_buf_free(&enc);
    sr_buf_free(&scratch);
    return rc;
}

int bench_proto_run(int argc, char **argv)
{
    int reps = 7, ms = 200, count = 0;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
            if (!sr_cmd_int("bench proto", "--reps", argv[++i], &reps))
                return 2;
        } else if (!strcmp(argv[i], "--ms") && i + 1 < argc) {
            if (!sr_cmd_int("bench proto", "--ms", argv[++i], &ms))
                return 2;
        } else if (!strcmp(argv[i], "--count") && i + 1 < argc) {
            if (!sr_cmd_int("bench proto", "--count", argv[++i], &count))
                return 2;
        } else if (!strcmp(argv[i], "--only") && i + 1 < argc) {
            only = argv[++i];
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: selroll bench proto [--reps N] [--ms N] [--only NAME] [--count N]\n"
                   "Median ns/msg and messages/s of encode, decode and encode+decode of JOB,\n"
                   "STEP, OBS and RESULT with 30 steps (also with the token fields of --tokens\n"
                   "completion and full: 50 completion, 600 prompt ids a step), and BATCH of 8\n"
                   "such trajectories, and the bus's ACTION, over N repetitions of about N ms\n"
                   "each.\n"
                   "--only NAME keeps the messages whose name starts with NAME (e.g. OBS).\n"
                   "--count N runs exactly N encodes and N decodes of each message, untimed: for\n"
                   "counting instructions (valgrind --tool=callgrind) or allocations (memcheck's\n"
                   "heap summary) per message from two runs with different N.\n");
            return 0;
        } else {
            fprintf(stderr, "bench proto: unknown option %s (try --help)\n", argv[i]);
            return 2;
        }
    }
    if (reps < 1 || reps > 64 || ms < 1 || count < 0) {
        fprintf(stderr, "bench proto: --reps must be 1..64, --ms positive and --count >= 0\n");
        return 2;
    }

    s_case_t cases[S_NCASES];
    s_cases(cases);
    if (count > 0)
        return s_counted(cases, SR_ARRAY_LEN(cases), only, count);
    sr_buf_t enc = SR_BUF_INIT, scratch = SR_BUF_INIT;
    int rc = 0;
    printf("proto codec: median of %d repetitions of ~%d ms\n", reps, ms);
    printf("%-18s %8s %12s %12s %12s %14s %10s\n", "message", "bytes", "encode ns", "decode ns",
           "both ns", "both msg/s", "MB/s");
    for (size_t c = 0; c < SR_ARRAY_LEN(cases); c++) {
        if (only && strncasecmp(cases[c].name, only, strlen(only)) != 0)
            continue;
        sr_buf_reset(&enc);
        if (proto_encode(&cases[c].msg, &enc) != SR_OK) {
            fprintf(stderr, "bench proto: cannot encode %s\n", cases[c].name);
            rc = 1;
            goto cleanup;
        }
        double e = s_median_ns(&cases[c].msg, &enc, S_ENCODE, reps, ms, &scratch);
        double d = s_median_ns(&cases[c].msg, &enc, S_DECODE, reps, ms, &scratch);
        double b = s_median_ns(&cases[c].msg, &enc, S_ROUNDTRIP, reps, ms, &scratch);
        if (e < 0 || d < 0 || b < 0) {
            fprintf(stderr, "bench proto: %s failed to round-trip\n", cases[c].name);
            rc = 1;
            goto cleanup;
        }
        printf("%-18s %8zu %12.0f %12.0f %12.0f %14.0f %10.1f\n", cases[c].name, enc.len, e, d,
               b, 1e9 / b, (double)enc.len * 1e3 / b);
    }

cleanup:
    sr_buf_free(&enc);
    sr_buf_free(&scratch);
    return rc;
}
