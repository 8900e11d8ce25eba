/*
 * model.h — the built-in policy: a log-linear model over the admissible actions of a parsed prompt.
 *
 *     pi(a | s) = exp(w . phi(s, a) / T) / sum_b exp(w . phi(s, b) / T)
 *
 * phi(s, a) is a sparse vector of hashed features. Named features (relational facts about the
 * candidate and the state, e.g. "the candidate takes an object of the goal's type, in a clean
 * task, with empty hands") hash into the first MODEL_NAMED_DIM weights; the candidate's action
 * string itself hashes into the next MODEL_STRING_DIM weights, which carry the model's
 * idiosyncratic preferences between look-alike actions. The weights are one flat float vector of
 * MODEL_DIM entries, versioned, serialised to a little-endian binary blob, and differentiable:
 * model_grad_logprob gives d log pi(a|s) / d w for a GRPO trainer.
 *
 * Beliefs: what the model takes for true about one task (where the goal object is kept, whether a
 * look-alike object is the one meant, a step of the task it forgets) is a pure function of the
 * task as the prompt shows it (pparse_state_t.task_key) and of a salt stored in the weights
 * (MODEL_META_SALT, set from the policy seed by the prior and never moved by a gradient). All the
 * samples of a group therefore share their beliefs, and two policy seeds hold different ones. How
 * much the model acts on a belief is a learned weight per (task type, room, object class), so
 * correcting a belief on one task carries over in part to the tasks that share those features.
 *
 * Temperature 0 means greedy (argmax, ties to the first action in the admissible list).
 */
#ifndef SR_POLICY_MODEL_H
#define SR_POLICY_MODEL_H

#include "common/pparse.h"

#include <stddef.h>
#include <stdint.h>

#define MODEL_NAMED_DIM 262144u
#define MODEL_STRING_DIM 16384u
#define MODEL_META_DIM 8u /* entries no feature maps to: the policy's identity (below) */
#define MODEL_DIM (MODEL_NAMED_DIM + MODEL_STRING_DIM + MODEL_META_DIM)
#define MODEL_META_SALT (MODEL_NAMED_DIM + MODEL_STRING_DIM) /* belief salt, an integer < 2^24 */
#define MODEL_MAX_FEATS 32 /* features per candidate action, at most */
/* The value of a belief feature (model.c): its weights are in units of 1 / MODEL_BELIEF_VALUE of a
 * logit, so a gradient step moves what the model acts on as fast as it moves a feature that
 * fires on every step (see docs/policy.md, "Learning moves beliefs"). */
#define MODEL_BELIEF_VALUE 3.0f

typedef struct model model_t;

/* One non-zero entry of phi(s, a). */
typedef struct {
    uint32_t idx;
    float val;
} model_feat_t;

/* A small seeded generator for sampling (splitmix64); the same seed gives the same draws. */
typedef struct {
    uint64_t s;
} model_rng_t;

/* What model_choose picked. */
typedef struct {
    int index;      /* into st->actions; -1 when there was nothing to choose from */
    double logprob; /* log pi_T(a|s) of the chosen action (T = 1 when sampling was greedy) */
    double prob;    /* exp(logprob) */
} model_choice_t;

/* model_new returns a model with all weights zero (a uniform policy), tagged with version, or NULL
 * when memory is exhausted. The caller owns it. */
model_t *model_new(uint32_t version);

/* model_destroy frees *mp and sets it to NULL; NULL or *mp == NULL is a no-op. */
void model_destroy(model_t **mp);

/* model_clone returns a deep copy of m (NULL when m is NULL or memory is exhausted). */
model_t *model_clone(const model_t *m);

/* model_version / model_set_version read and set the version tag. */
uint32_t model_version(const model_t *m);
void model_set_version(model_t *m, uint32_t version);

/* model_weights returns the MODEL_DIM weights, owned by m (writable, for the prior and trainers).
 */
float *model_weights(model_t *m);
const float *model_weights_const(const model_t *m);

/* model_feature_index maps a named feature ("verb=take|task=clean|hold=empty|proc=0") to its weight
 * index in the named region. The prior uses it to set weights by name. */
uint32_t model_feature_index(const char *name);

/* model_feature_cache turns the calling thread's cache of feature-name indices on (the default) or
 * off. The features are the same either way (a cached index is the one of the same name); the
 * tests compare the two. */
void model_feature_cache(bool on);

/* model_string_index maps an action string to its weight index in the string region. */
uint32_t model_string_index(const char *action);

/* model_features writes phi(st, st->actions[action]) into out (at most max entries, max >= 1) and
 * returns the number written, or SR_EINVAL for a bad action index or NULL arguments. The belief
 * features depend on m's salt, so phi is the features of m's beliefs. */
int model_features(const model_t *m, const pparse_state_t *st, int action, model_feat_t *out,
                   int max);

#define MODEL_CTX_TYPES 32 /* receptacle types a state's context keeps (model_ctx_t) */

/* What a model takes for true about the task of one state, computed once per state: the task's
 * beliefs and the next receptacle of its search plan. Filled by model_ctx_init. */
typedef struct {
    uint64_t key;      /* task key x salt */
    const char *oc;    /* the goal object's class ("food", "dish", ...; "other") */
    const char *alike; /* the look-alike type it takes for the goal object, NULL if none */
    bool alike_here;   /* a take of it is admissible */
    const char *ralike; /* a receptacle type it takes for the goal receptacle's, NULL if none */
    bool forget;       /* it skips a step of the task (processing, the second object) */
    bool misverb;      /* it writes "put O in R" for "move O to R" (ALFWorld's older wording) */
    double sure;       /* how sure of its plan it is on this task (the plan feature's value) */
    bool plan_lamp;    /* the plan searches for the lamp (look tasks, goal object in hand) */
    char plan_next[PPARSE_NAME_MAX]; /* the plan's next receptacle while searching, "" if none */
    /* The receptacle types the plan weighed (its go-to targets' and the location's, at most
     * MODEL_CTX_TYPES), each with the feature indices it read of the weights: with plan_lamp
     * "go|lamp=GOALRECEP|rt=TYPE|hold=goal" in a, else "go|obj=GOALOBJ|rt=TYPE|hold=empty" in a
     * and "go|room=ROOM|oc=OC|rt=TYPE" in b. model_logits takes the go features' indices from
     * here. n_types 0 when the state made no plan. */
    int n_types;
    struct {
        char type[PPARSE_NAME_MAX];
        uint32_t a, b;
    } types[MODEL_CTX_TYPES];
} model_ctx_t;

/* model_ctx_init fills *c for m and st (neither NULL). */
void model_ctx_init(const model_t *m, const pparse_state_t *st, model_ctx_t *c);

/* model_features_ctx is model_features with the state's context computed once by the caller:
 * what model_logits and the gradients use for every candidate of a state. */
int model_features_ctx(const pparse_state_t *st, const model_ctx_t *ctx, int action,
                       model_feat_t *out, int max);

/* model_salt returns the belief salt held in m's weights (0 for NULL). */
uint32_t model_salt(const model_t *m);

/* What a model believes about one task (the features of model_features are built from it). */
typedef struct {
    char where[PPARSE_NAME_MAX]; /* the next receptacle of its search plan, "" if not searching */
    char alike[PPARSE_NAME_MAX]; /* a look-alike type it takes for the goal object, "" if none */
    bool forget;                 /* it tends to skip a step (processing; the second object) */
} model_belief_t;

/* model_belief fills *out with m's beliefs about the task of st (never NULL arguments). */
void model_belief(const model_t *m, const pparse_state_t *st, model_belief_t *out);

/* model_token_count_fn counts the tokens of a text (the server's tokenizer rule). */
typedef int (*model_token_count_fn)(const char *text);

/* model_reason writes the reasoning of a step, "<think>...</think>", into a new string (caller
 * frees): the situation, what the model believes, then the options weighed, the favoured one
 * first, while the text fits about target tokens (counted with count), and the decision. The
 * favoured option is st->actions[chosen], the action the answer then takes: the reasoning is what
 * picks it. p holds pi over the actions (st->n_actions entries); chosen may be -1 (no actions).
 * Returns NULL for NULL st, p or count. */
char *model_reason(const model_t *m, const pparse_state_t *st, const double *p, int chosen,
                   int target, model_token_count_fn count);

/* model_logits writes w . phi(s, a) for every admissible action into logits (st->n_actions
 * entries). Returns the number of actions, or SR_EINVAL for NULL arguments. */
int model_logits(const model_t *m, const pparse_state_t *st, double *logits);

/* model_probs writes pi_T(a|s) into probs (st->n_actions entries); T = 0 gives a one-hot
 * argmax. Returns the number of actions (0 when the list is empty) or SR_EINVAL. */
int model_probs(const model_t *m, const pparse_state_t *st, double temperature, double *probs);

/* model_choose samples an action at temperature T (0 = greedy) with nucleus top_p in (0, 1],
 * drawing from rng. The reported logprob is log pi_T before the nucleus cut. Returns 0 (with
 * out->index = -1 when st has no actions) or SR_EINVAL for NULL arguments or a bad T or top_p. */
int model_choose(const model_t *m, const pparse_state_t *st, double temperature, double top_p,
                 model_rng_t *rng, model_choice_t *out);

/* model_choose_probs is model_choose that also writes, when probs is not NULL, what
 * model_probs(m, st, T > 0 ? T : 1, probs) would (st->n_actions entries), from the same single
 * scoring of the candidates. Same results and return values as model_choose. */
int model_choose_probs(const model_t *m, const pparse_state_t *st, double temperature,
                       double top_p, model_rng_t *rng, model_choice_t *out, double *probs);

/* model_choose_probs_ctx and model_reason_ctx are model_choose_probs and model_reason with c, the
 * context of m and st made once by the caller (model_ctx_init): what one answer of the policy
 * server computes, with one context for both. Same results as the plain calls. */
int model_choose_probs_ctx(const model_t *m, const pparse_state_t *st, const model_ctx_t *c,
                           double temperature, double top_p, model_rng_t *rng,
                           model_choice_t *out, double *probs);
char *model_reason_ctx(const model_t *m, const pparse_state_t *st, const model_ctx_t *c,
                       const double *p, int chosen, int target, model_token_count_fn count);

/* model_grad_logprob ADDS scale * d log pi_T(a|s) / d w to grad (MODEL_DIM floats), that is
 * scale * (phi(s, a) - E_pi[phi(s, .)]) / T. T must be > 0. Returns 0, or SR_EINVAL for a bad
 * action index, T <= 0 or NULL arguments. */
int model_grad_logprob(const model_t *m, const pparse_state_t *st, int action, double temperature,
                       double scale, float *grad);

/* model_to_blob serialises m into a new buffer (*blob, *len), owned by the caller (free()).
 * Layout: "SRPW", u32 format 1, u32 version, u32 dim, dim x f32, u64 FNV-1a of what precedes,
 * all little-endian. Returns 0 or SR_EINVAL. */
int model_to_blob(const model_t *m, uint8_t **blob, size_t *len);

/* model_from_blob parses a blob made by model_to_blob. Returns a new model owned by the caller,
 * or NULL with a reason in err (errlen bytes, may be 0) when the blob is malformed. */
model_t *model_from_blob(const uint8_t *blob, size_t len, char *err, size_t errlen);

/* model_rng_seed / model_rng_next / model_rng_uniform: the sampling generator. uniform is in
 * [0, 1). */
void model_rng_seed(model_rng_t *r, uint64_t seed);
uint64_t model_rng_next(model_rng_t *r);
double model_rng_uniform(model_rng_t *r);

/* model_hash64 is the FNV-1a hash used for feature names, seeded by an offset (0 = standard). */
uint64_t model_hash64(const char *s, uint64_t seed);

#endif
