/*
 * model_int.h — the insides the model's files share (model.c, model_feat.c, model_belief.c) and
 * nothing else includes: the model struct, the feature emitter, and the belief and parsing
 * helpers the features read.
 */
#ifndef SR_MODEL_INT_H
#define SR_MODEL_INT_H

#include "common/model.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>

struct model {
    uint32_t version;
    float *w;
};

/* model_emit_t collects the features of one candidate into out (at most max). */
typedef struct {
    model_feat_t *out;
    int n;
    int max;
} model_emit_t;

/* model_emit_ap emits the feature named by fmt and ap with value v (model_feat.c). */
void model_emit_ap(model_emit_t *e, float v, const char *fmt, va_list ap0);

/* What the features of one state's candidates share, kept from one candidate to the next by
 * model_logits (the admissible list is sorted, so candidates of one verb and of one receptacle
 * type come together): the verb feature's index for the last verb, and for the last go-to
 * receptacle type the indices of the go features that name only it and the state, and the
 * lowest and highest instance numbers of its go-to targets; and the held object's standing
 * and the location's type and number. Every entry is what the feature's
 * own computation gives, so the features are the same with or without it. Zero it per state. */
enum { MODEL_MEMO_GO_OBJ, MODEL_MEMO_GO_START, MODEL_MEMO_GO_RT, MODEL_MEMO_GO_LAMP,
       MODEL_MEMO_GO_ROOM, MODEL_MEMO_GO_N };
typedef struct {
    bool st_ok; /* hold, loc_type, loc_num: the state's, as each candidate computes them */
    const char *hold;
    char loc_type[PPARSE_NAME_MAX];
    int loc_num;
    bool verb_ok;
    char verb[16];
    uint32_t verb_idx;
    bool yt_ok;
    char yt[PPARSE_NAME_MAX];
    size_t yt_len; /* strlen(yt) */
    bool have[MODEL_MEMO_GO_N];
    uint32_t idx[MODEL_MEMO_GO_N];
    bool nums_ok, nums_any; /* lo and hi: over the go-to targets of type yt with a number */
    long lo, hi;
} model_fmemo_t;

/* model_features_memo is model_features_ctx with memo (NULL: none) for a run over one state's
 * candidates (model_feat.c). */
int model_features_memo(const pparse_state_t *st, const model_ctx_t *ctx, int action,
                        model_feat_t *out, int max, model_fmemo_t *memo);

/* model_split2 splits "VERB A SEP B" (e.g. "take apple 1 from countertop 1" with SEP " from ")
 * into a and b. Returns 1 when SEP is found (model_feat.c). */
int model_split2(const char *rest, const char *sep, char a[PPARSE_NAME_MAX],
                 char b[PPARSE_NAME_MAX]);

/* model_belief.c: whether t is a task with a processing step (clean, heat, cool); whether the
 * agent walked to where it stands (model_arrived); whether type is the goal object's look-alike
 * in the task's beliefs. */
bool model_processing_task(pparse_task_t t);
bool model_arrived(const pparse_state_t *st);
bool model_is_alike(const model_ctx_t *tb, const char *type);

/* model_belief_of fills *out from the context tb, as model_belief does from its own (model_belief.c). */
void model_belief_of(const model_ctx_t *tb, model_belief_t *out);

#endif
