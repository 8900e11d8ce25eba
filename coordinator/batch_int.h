/*
 * batch_int.h — the batch's insides, shared by batch.c (building it) and batch_out.c (the BATCH
 * message and the JSON Lines copy made of it), and by nothing else.
 */
#ifndef SR_BATCH_INT_H
#define SR_BATCH_INT_H

#include "coordinator/batch.h"

typedef struct {
    char *gid;
    char *task;
    int G;
    double weight;
    batch_group_state_t state;
    const proto_result_t **res; /* G slots, NULL until that trajectory's RESULT arrived */
    size_t n_res;
    double *rewards; /* G */
    double *adv;     /* G, valid once informative or zero-variance: adv_raw x audit_weight */
    double *adv_raw; /* G, the estimator's values before the audit weight */
    double mean;
    double audit_weight; /* 1, or 1/q for a group the gate's audit let run on */
    char *rules;         /* the gate's per-rule verdicts (JSON text), or NULL */
} bi_group_t;

struct batch {
    batch_cfg_t cfg;
    char *run;
    int64_t iteration;
    int64_t policy_version;
    bi_group_t *groups;
    size_t n, cap;
    proto_msg_t **owned; /* RESULTs decoded by batch_add_result_msgpack */
    size_t n_owned, cap_owned;
    /* cost statistics over every RESULT added */
    int64_t trajectories, ended, failed, won, steps, llm_calls, prompt_tokens, completion_tokens,
        aborted_tokens;
    double reward_sum_ended;
};

/* bi_in_batch says whether group g goes into the BATCH: informative, or zero-variance with the
 * post-filter off. */
bool bi_in_batch(const batch_t *b, const bi_group_t *g);

#endif
