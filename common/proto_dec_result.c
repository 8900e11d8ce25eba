/*
 * proto_dec_result.c — pass 2 of decoding for the messages that carry trajectories: RESULT (its
 * steps, tokens and log-probabilities), BATCH (its groups) and WEIGHTS_READY. The field readers
 * and the in-place reading of the bytes are proto_dec.c's.
 */
#include "common/proto_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* s_bin32 reads an optional bin of little-endian 32-bit words (int32 ids or float32
 * logprobs) into a new array of *len elements; floats must be finite. */
static int s_bin32(proto_dec_t *d, const proto_map_t *m, const char *key, bool is_float,
                   void *out, size_t *len)
{
    proto_obj_t ob;
    const proto_obj_t *o = &ob;
    if (!proto_dec_get(m, key, &ob))
        return SR_OK;
    if (o->type != PROTO_O_BIN)
        return proto_fail(d->err, &d->path, key, SR_EPROTO, "not a binary");
    size_t nb = o->n;
    if (nb % 4 != 0)
        return proto_fail(d->err, &d->path, key, SR_EPROTO,
                          "binary of %zu bytes is not whole 32-bit words", nb);
    if (nb / 4 > PROTO_MAX_TOKENS)
        return proto_fail(d->err, &d->path, key, SR_ETOOBIG, "%zu tokens exceed the limit of %d",
                          nb / 4, PROTO_MAX_TOKENS);
    uint8_t *a = NULL; /* every byte written below: not zeroed first */
    if (nb > 0 && !(a = proto_arena_alloc(&d->arena, nb)))
        return proto_fail(d->err, &d->path, key, SR_ENOMEM, "out of memory");
    const uint8_t *p = o->p;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (nb > 0)
        memcpy(a, p, nb);
#else
    for (size_t i = 0; i < nb; i += 4) {
        uint32_t w = (uint32_t)p[i] | (uint32_t)p[i + 1] << 8 | (uint32_t)p[i + 2] << 16 |
                     (uint32_t)p[i + 3] << 24;
        memcpy(a + i, &w, 4);
    }
#endif
    if (is_float) {
        /* a float32 is not finite when its exponent bits are all ones: two words at a time,
         * each lane's exponent XORed with all ones is zero there */
        const uint64_t ex = 0x7f8000007f800000ull;
        size_t i = 0;
        for (; i + 8 <= nb; i += 8) {
            uint64_t w;
            memcpy(&w, a + i, 8);
            uint64_t x = (w & ex) ^ ex; /* a lane is 0 where its float is not finite */
            if ((uint32_t)x == 0 || (x >> 32) == 0)
                break;
        }
        for (; i < nb; i += 4) {
            float f;
            memcpy(&f, a + i, 4);
            if (!isfinite(f))
                return proto_fail(d->err, &d->path, key, SR_EPROTO, "element %zu is not a number",
                                  i / 4);
        }
    }
    memcpy(out, &a, sizeof a);
    *len = nb / 4;
    return SR_OK;
}

static int s_dec_result_step(proto_dec_t *d, const proto_map_t *m, proto_result_step_t *s)
{
    PROTO_TRY(proto_dec_int(d, m, "i", PROTO_NONNEG, true, &s->i));
    PROTO_TRY(proto_dec_str(d, m, "action", PROTO_STR_SHORT, true, &s->action));
    PROTO_TRY(proto_dec_str(d, m, "raw", PROTO_STR_TEXT, true, &s->raw));
    PROTO_TRY(proto_dec_str(d, m, "obs", PROTO_STR_TEXT, true, &s->obs));
    PROTO_TRY(proto_dec_num(d, m, "reward", PROTO_ANY, true, NULL, &s->reward));
    PROTO_TRY(proto_dec_bool(d, m, "done", true, NULL, &s->done));
    PROTO_TRY(proto_dec_int(d, m, "prompt_tokens", PROTO_NONNEG, true, &s->prompt_tokens));
    PROTO_TRY(proto_dec_int(d, m, "completion_tokens", PROTO_NONNEG, true, &s->completion_tokens));
    PROTO_TRY(proto_dec_num(d, m, "logprob", PROTO_ANY, false, &s->has_logprob, &s->logprob));
    PROTO_TRY(proto_dec_bool(d, m, "format_error", true, NULL, &s->format_error));
    PROTO_TRY(proto_dec_num(d, m, "latency_ms", 0.0, HUGE_VAL, true, NULL, &s->latency_ms));
    PROTO_TRY(proto_dec_num(d, m, "t_ms", 0.0, HUGE_VAL, false, &s->has_t, &s->t_ms));
    PROTO_TRY(proto_dec_str(d, m, "reasoning", PROTO_STR_TEXT, false, &s->reasoning));
    proto_obj_t o;
    /* a field looked up twice (is it there, then its value): the second lookup starts where the
     * first one did, so it finds the field at once (lookups go on after the last key found) */
    proto_map_t *mm = (proto_map_t *)m; /* maps are the decoder's own, never const */
    uint32_t at = mm->next;
    s->has_reasoning_tokens = proto_dec_get(m, "reasoning_tokens", &o);
    mm->next = at;
    PROTO_TRY(proto_dec_int(d, m, "reasoning_tokens", PROTO_NONNEG, false, &s->reasoning_tokens));
    PROTO_TRY(proto_dec_str(d, m, "model", PROTO_STR_ID, false, &s->model));
    at = mm->next;
    s->has_served_version = proto_dec_get(m, "served_version", &o);
    mm->next = at;
    PROTO_TRY(proto_dec_int(d, m, "served_version", PROTO_NONNEG, false, &s->served_version));
    PROTO_TRY(proto_dec_bool(d, m, "usage_unknown", false, NULL, &s->usage_unknown));
    PROTO_TRY(proto_dec_bool(d, m, "text_truncated", false, NULL, &s->text_truncated));
    PROTO_TRY(s_bin32(d, m, "token_ids", false, &s->token_ids, &s->token_ids_len));
    PROTO_TRY(s_bin32(d, m, "token_logprobs", true, &s->token_logprobs, &s->token_logprobs_len));
    if (s->token_logprobs_len > 0 && s->token_logprobs_len != s->token_ids_len)
        return proto_fail(d->err, &d->path, "token_logprobs", SR_EPROTO,
                          "%zu logprobs for %zu token_ids", s->token_logprobs_len,
                          s->token_ids_len);
    PROTO_TRY(
        s_bin32(d, m, "prompt_token_ids", false, &s->prompt_token_ids, &s->prompt_token_ids_len));
    at = mm->next;
    s->has_prompt_prefix = proto_dec_get(m, "prompt_prefix", &o);
    mm->next = at;
    PROTO_TRY(proto_dec_int(d, m, "prompt_prefix", 0, 2 * (int64_t)PROTO_MAX_TOKENS, false,
                            &s->prompt_prefix));
    PROTO_TRY(proto_dec_bool(d, m, "tokens_mismatch", false, NULL, &s->tokens_mismatch));
    proto_obj_t a;
    bool found;
    PROTO_TRY(proto_dec_arr(d, m, "messages", PROTO_MAX_MESSAGES, false, &a, &found));
    if (!found)
        return SR_OK;
    PROTO_TRY(proto_dec_alloc(d, "messages", a.n, sizeof *s->messages, &s->messages));
    const uint8_t *q = a.p;
    for (uint32_t i = 0; i < a.n; i++) {
        size_t old;
        proto_map_t em;
        PROTO_TRY(proto_dec_enter(d, &q, "messages", i, &em, &old));
        s->messages_len = i + 1;
        PROTO_TRY(proto_dec_str(d, &em, "role", PROTO_STR_ID, true, &s->messages[i].role));
        PROTO_TRY(proto_dec_str(d, &em, "content", PROTO_STR_TEXT, true, &s->messages[i].content));
        proto_path_pop(&d->path, old);
    }
    return SR_OK;
}

int proto_dec_result(proto_dec_t *d, const proto_map_t *m, proto_result_t *r)
{
    static const char *const statuses[] = {"done", "cancelled", "failed", "truncated", NULL};
    PROTO_TRY(proto_dec_str(d, m, "job_id", PROTO_STR_ID, true, &r->job_id));
    PROTO_TRY(proto_dec_int(d, m, "epoch", PROTO_NONNEG, true, &r->epoch));
    PROTO_TRY(proto_dec_str(d, m, "run", PROTO_STR_ID, true, &r->run));
    PROTO_TRY(proto_dec_str(d, m, "group", PROTO_STR_ID, true, &r->group));
    PROTO_TRY(proto_dec_int(d, m, "traj", 0, PROTO_MAX_GROUP_SIZE - 1, true, &r->traj));
    PROTO_TRY(proto_dec_str(d, m, "task", PROTO_STR_ID, true, &r->task));
    PROTO_TRY(proto_dec_str_enum(d, m, "status", statuses, "done|cancelled|failed|truncated",
                                 &r->status));
    PROTO_TRY(proto_dec_num(d, m, "reward", PROTO_ANY, true, NULL, &r->reward));
    PROTO_TRY(proto_dec_bool(d, m, "won", true, NULL, &r->won));
    PROTO_TRY(proto_dec_int(d, m, "n_steps", PROTO_NONNEG, true, &r->n_steps));
    PROTO_TRY(proto_dec_int(d, m, "llm_calls", PROTO_NONNEG, true, &r->llm_calls));
    PROTO_TRY(proto_dec_int(d, m, "prompt_tokens", PROTO_NONNEG, true, &r->prompt_tokens));
    PROTO_TRY(proto_dec_int(d, m, "completion_tokens", PROTO_NONNEG, true, &r->completion_tokens));
    PROTO_TRY(proto_dec_int(d, m, "aborted_tokens", PROTO_NONNEG, false, &r->aborted_tokens));
    PROTO_TRY(proto_dec_int(d, m, "wall_ms", PROTO_NONNEG, true, &r->wall_ms));
    PROTO_TRY(proto_dec_str(d, m, "error", PROTO_STR_TEXT, false, &r->error));
    PROTO_TRY(proto_dec_int(d, m, "usage_unknown_steps", 0, PROTO_MAX_STEPS, false,
                            &r->usage_unknown_steps));
    proto_obj_t a;
    bool found;
    PROTO_TRY(proto_dec_arr(d, m, "steps", PROTO_MAX_STEPS, true, &a, &found));
    PROTO_TRY(proto_dec_alloc(d, "steps", a.n, sizeof *r->steps, &r->steps));
    const uint8_t *q = a.p;
    for (uint32_t i = 0; i < a.n; i++) {
        size_t old;
        proto_map_t em;
        PROTO_TRY(proto_dec_enter(d, &q, "steps", i, &em, &old));
        r->steps_len = i + 1;
        PROTO_TRY(s_dec_result_step(d, &em, &r->steps[i]));
        proto_path_pop(&d->path, old);
    }
    return SR_OK;
}

static int s_dec_group(proto_dec_t *d, const proto_map_t *m, proto_group_t *g)
{
    PROTO_TRY(proto_dec_str(d, m, "group", PROTO_STR_ID, true, &g->group));
    PROTO_TRY(proto_dec_str(d, m, "task", PROTO_STR_ID, true, &g->task));
    PROTO_TRY(proto_dec_num(d, m, "weight", 0.0, HUGE_VAL, false, NULL, &g->weight));
    PROTO_TRY(
        proto_dec_num_array(d, m, "rewards", PROTO_MAX_GROUP_SIZE, &g->rewards, &g->rewards_len));
    PROTO_TRY(proto_dec_num_array(d, m, "advantages", PROTO_MAX_GROUP_SIZE, &g->advantages,
                                  &g->advantages_len));
    if (g->advantages_len != g->rewards_len)
        return proto_fail(d->err, &d->path, "advantages", SR_EPROTO,
                          "has %zu entries but rewards has %zu", g->advantages_len, g->rewards_len);
    PROTO_TRY(proto_dec_num(d, m, "audit_weight", 0.0, HUGE_VAL, false, NULL, &g->audit_weight));
    if (!(g->audit_weight > 0.0))
        return proto_fail(d->err, &d->path, "audit_weight", SR_EPROTO, "must be > 0");
    proto_obj_t raw;
    if (proto_dec_get(m, "advantages_raw", &raw)) {
        PROTO_TRY(proto_dec_num_array(d, m, "advantages_raw", PROTO_MAX_GROUP_SIZE,
                                      &g->advantages_raw, &g->advantages_raw_len));
        if (g->advantages_raw_len != g->rewards_len)
            return proto_fail(d->err, &d->path, "advantages_raw", SR_EPROTO,
                              "has %zu entries but rewards has %zu", g->advantages_raw_len,
                              g->rewards_len);
    }
    proto_obj_t a;
    bool found;
    PROTO_TRY(proto_dec_arr(d, m, "trajectories", PROTO_MAX_GROUP_SIZE, true, &a, &found));
    PROTO_TRY(proto_dec_alloc(d, "trajectories", a.n, sizeof *g->trajectories, &g->trajectories));
    const uint8_t *q = a.p;
    for (uint32_t i = 0; i < a.n; i++) {
        size_t old;
        proto_map_t em;
        PROTO_TRY(proto_dec_enter(d, &q, "trajectories", i, &em, &old));
        g->trajectories_len = i + 1;
        PROTO_TRY(proto_dec_result(d, &em, &g->trajectories[i]));
        proto_path_pop(&d->path, old);
    }
    return SR_OK;
}

int proto_dec_batch(proto_dec_t *d, const proto_map_t *m, proto_batch_t *b)
{
    PROTO_TRY(proto_dec_str(d, m, "run", PROTO_STR_ID, true, &b->run));
    PROTO_TRY(proto_dec_int(d, m, "iteration", PROTO_NONNEG, true, &b->iteration));
    PROTO_TRY(proto_dec_int(d, m, "policy_version", PROTO_NONNEG, true, &b->policy_version));
    PROTO_TRY(proto_dec_str(d, m, "estimator", PROTO_STR_ID, false, &b->estimator));
    proto_obj_t a;
    bool found;
    PROTO_TRY(proto_dec_arr(d, m, "groups", PROTO_MAX_GROUPS, true, &a, &found));
    PROTO_TRY(proto_dec_alloc(d, "groups", a.n, sizeof *b->groups, &b->groups));
    const uint8_t *q = a.p;
    for (uint32_t i = 0; i < a.n; i++) {
        size_t old;
        proto_map_t em;
        PROTO_TRY(proto_dec_enter(d, &q, "groups", i, &em, &old));
        b->groups_len = i + 1;
        proto_group_init(&b->groups[i]);
        PROTO_TRY(s_dec_group(d, &em, &b->groups[i]));
        proto_path_pop(&d->path, old);
    }
    proto_obj_t st;
    if (!proto_dec_get(m, "stats", &st))
        return proto_dec_missing(d, "stats");
    if (st.type != PROTO_O_MAP)
        return proto_fail(d->err, &d->path, "stats", SR_EPROTO, "not a map");
    PROTO_TRY(proto_dec_alloc(d, "stats", st.n, sizeof *b->stats, &b->stats));
    size_t old = proto_path_push(&d->path, "stats", 5, -1);
    q = st.p;
    for (uint32_t i = 0; i < st.n; i++) {
        proto_obj_t key, val;
        PROTO_TRY(proto_dec_next(d, &q, &key));
        PROTO_TRY(proto_dec_next(d, &q, &val));
        char name[PROTO_MAX_ID + 1];
        snprintf(name, sizeof name, "%.*s", (int)key.n, (const char *)key.p);
        b->stats_len = i + 1;
        PROTO_TRY(proto_dec_str_obj(d, &key, name, PROTO_STR_ID, &b->stats[i].name));
        PROTO_TRY(proto_dec_num_obj(d, &val, name, PROTO_ANY, &b->stats[i].value));
    }
    proto_path_pop(&d->path, old);
    return SR_OK;
}

int proto_dec_weights_ready(proto_dec_t *d, const proto_map_t *m, proto_weights_ready_t *w)
{
    PROTO_TRY(proto_dec_str(d, m, "run", PROTO_STR_ID, true, &w->run));
    PROTO_TRY(proto_dec_int(d, m, "version", PROTO_NONNEG, true, &w->version));
    PROTO_TRY(proto_dec_int(d, m, "iteration", PROTO_NONNEG, true, &w->iteration));
    PROTO_TRY(proto_dec_num(d, m, "loss", PROTO_ANY, false, &w->has_loss, &w->loss));
    PROTO_TRY(proto_dec_str(d, m, "info", PROTO_STR_TEXT, false, &w->info));
    PROTO_TRY(proto_dec_bool(d, m, "ok", false, NULL, &w->ok));
    PROTO_TRY(proto_dec_str(d, m, "path", PROTO_STR_SHORT, false, &w->path));
    return proto_dec_str(d, m, "reason", PROTO_STR_SHORT, false, &w->reason);
}
