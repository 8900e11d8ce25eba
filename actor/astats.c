/*
 * astats.c — the actor's counters (see astats.h): a table maps each actor_stats_t field to its
 * Prometheus name; counters and gauges live in one metrics registry.
 */
#include "actor/astats.h"

#include "common/sr.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define AST_N (sizeof(actor_stats_t) / sizeof(uint64_t))

struct astats {
    metrics_registry_t *reg;
    metrics_counter_t *ctr[AST_N];
    metrics_gauge_t *gauge[AST_N];
};

static const struct {
    size_t idx;
    const char *name;
    const char *help;
    bool gauge;
} s_defs[] = {
    {AST_IDX(welcomes), "selroll_actor_welcomes_total", "WELCOMEs taken.", false},
    {AST_IDX(hellos), "selroll_actor_hellos_total", "HELLOs sent.", false},
    {AST_IDX(credits), "selroll_actor_credits_total", "Credits granted.", false},
    {AST_IDX(jobs), "selroll_actor_jobs_total", "JOBs received.", false},
    {AST_IDX(jobs_backlogged), "selroll_actor_jobs_backlogged_total", "JOBs that waited for a slot.", false},
    {AST_IDX(episodes_done), "selroll_actor_episodes_done_total", "Episodes done.", false},
    {AST_IDX(episodes_truncated), "selroll_actor_episodes_truncated_total", "Episodes truncated.", false},
    {AST_IDX(episodes_cancelled), "selroll_actor_episodes_cancelled_total", "Episodes cancelled.", false},
    {AST_IDX(episodes_failed), "selroll_actor_episodes_failed_total", "Episodes failed.", false},
    {AST_IDX(steps), "selroll_actor_steps_total", "Environment steps.", false},
    {AST_IDX(llm_calls), "selroll_actor_llm_calls_total", "Policy requests started.", false},
    {AST_IDX(llm_aborted), "selroll_actor_llm_aborted_total", "Policy requests aborted.", false},
    {AST_IDX(llm_failed), "selroll_actor_llm_failed_total", "Policy requests failed.", false},
    {AST_IDX(format_errors), "selroll_actor_format_errors_total", "Answers without a well-formed action.", false},
    {AST_IDX(prompt_tokens), "selroll_actor_prompt_tokens_total", "Prompt tokens.", false},
    {AST_IDX(completion_tokens), "selroll_actor_completion_tokens_total", "Completion tokens.", false},
    {AST_IDX(actions_published), "selroll_actor_actions_published_total", "ACTIONs published.", false},
    {AST_IDX(cancels), "selroll_actor_cancels_total", "CANCELs for a group run here.", false},
    {AST_IDX(results_sent), "selroll_actor_results_sent_total", "RESULTs sent.", false},
    {AST_IDX(results_resent), "selroll_actor_results_resent_total", "RESULTs sent again.", false},
    {AST_IDX(results_acked), "selroll_actor_results_acked_total", "RESULT_ACKs matched.", false},
    {AST_IDX(acks_refused), "selroll_actor_acks_refused_total", "RESULT_ACKs with ok false.", false},
    {AST_IDX(heartbeats), "selroll_actor_heartbeats_total", "HEARTBEATs sent.", false},
    {AST_IDX(unknown_actor), "selroll_actor_unknown_actor_total", "ERROR unknown_actor received.", false},
    {AST_IDX(bad_work), "selroll_actor_bad_work_total", "Bad messages on the work socket.", false},
    {AST_IDX(bad_bus), "selroll_actor_bad_bus_total", "Bad messages on the bus.", false},
    {AST_IDX(bad_env), "selroll_actor_bad_env_total", "Bad or unmatched env replies.", false},
    {AST_IDX(env_timeouts), "selroll_actor_env_timeouts_total", "Env requests timed out.", false},
    {AST_IDX(jobs_no_env_kind), "selroll_actor_jobs_no_env_kind_total", "JOBs failed at once: no env worker of their env's kind.", false},
    {AST_IDX(running), "selroll_actor_running", "Episodes running.", true},
    {AST_IDX(max_running), "selroll_actor_max_running", "Most episodes running at once.", true},
    {AST_IDX(unacked), "selroll_actor_unacked_results", "RESULTs waiting for an ack.", true},
    {AST_IDX(llm_throttled), "selroll_actor_llm_throttled_total", "Policy answers 429 or 503 (retried).", false},
    {AST_IDX(usage_unknown), "selroll_actor_usage_unknown_total", "Policy answers without usage.", false},
    {AST_IDX(model_mismatch), "selroll_actor_model_mismatch_total", "Policy answers from another model than requested.", false},
    {AST_IDX(tokens_mismatch), "selroll_actor_tokens_mismatch_total", "Policy answers whose token ids disagree with usage.completion_tokens.", false},
    {AST_IDX(credits_delayed), "selroll_actor_credits_delayed_total", "Slots held back after a job failed at once (backoff).", false},
    {AST_IDX(bus_waits_expired), "selroll_actor_bus_waits_expired_total", "Bus connections whose wait for a subscriber of the run's ACTIONs ran out.", false},
    {AST_IDX(actions_unsubscribed), "selroll_actor_actions_unsubscribed_total", "ACTIONs published with no subscriber known (after such a wait).", false},
};

astats_t *astats_new(void)
{
    astats_t *st = sr_xcalloc(1, sizeof *st);
    st->reg = metrics_registry_new();
    if (!st->reg) {
        free(st);
        return NULL;
    }
    for (size_t i = 0; i < SR_ARRAY_LEN(s_defs); i++) {
        if (s_defs[i].gauge)
            st->gauge[s_defs[i].idx] = metrics_gauge(st->reg, s_defs[i].name, s_defs[i].help, NULL);
        else
            st->ctr[s_defs[i].idx] = metrics_counter(st->reg, s_defs[i].name, s_defs[i].help, NULL);
    }
    return st;
}

void astats_destroy(astats_t **st)
{
    if (!st || !*st)
        return;
    metrics_registry_destroy(&(*st)->reg);
    free(*st);
    *st = NULL;
}

void astats_add(astats_t *st, size_t idx, double n)
{
    if (st && idx < AST_N && st->ctr[idx])
        metrics_counter_add(st->ctr[idx], n);
}

metrics_counter_t *astats_counter(astats_t *st, size_t idx)
{
    return st && idx < AST_N ? st->ctr[idx] : NULL;
}

void astats_set(astats_t *st, size_t idx, double v)
{
    if (!st || idx >= AST_N || !st->gauge[idx])
        return;
    metrics_gauge_set(st->gauge[idx], v);
    if (idx == AST_IDX(running) && v > metrics_gauge_value(st->gauge[AST_IDX(max_running)]))
        metrics_gauge_set(st->gauge[AST_IDX(max_running)], v);
}

void astats_read(const astats_t *st, actor_stats_t *out)
{
    if (!out)
        return;
    memset(out, 0, sizeof *out);
    if (!st)
        return;
    uint64_t *v = (uint64_t *)out;
    for (size_t i = 0; i < SR_ARRAY_LEN(s_defs); i++) {
        size_t k = s_defs[i].idx;
        double x = s_defs[i].gauge ? metrics_gauge_value(st->gauge[k])
                                   : metrics_counter_value(st->ctr[k]);
        v[k] = x > 0 ? (uint64_t)x : 0;
    }
}

metrics_registry_t *astats_registry(astats_t *st)
{
    return st ? st->reg : NULL;
}
