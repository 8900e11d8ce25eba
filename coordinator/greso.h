/*
 * greso.h — the pre-rollout prompt filter (GRESO, DESIGN §5): skip a prompt before rolling it out
 * when its recent history says its group will again have zero reward variance.
 *
 * Per prompt the caller keeps a history of (iteration, group mean reward), oldest first (Redis
 * holds it: greso_store.h). The most recent run of consecutive groups of one kind is a streak:
 * easy when the group means were >= easy_min (0.98), hard when they were <= hard_max (0.11). The
 * kind is that of the LAST group: a prompt whose last group was informative has no streak, and a
 * prompt is hard only if its last group was hard. With z the streak length and p = p_easy or
 * p_hard, the prompt is skipped with probability p_skip = 1 - max(p^z, skip_floor); z = 0 never
 * skips, and skip_floor (0.01) keeps every prompt a 1% chance of being explored again.
 *
 * Once per iteration greso_end_iteration moves p_easy and p_hard by `step` (0.01) toward their
 * targets: if the observed share of all-correct groups is at or above target_easy (0.25/3), too
 * many easy groups got through and p_easy falls (skip more), otherwise it rises; the same for
 * all-wrong groups and p_hard (target 0.25*2/3). Both stay in [p_min, p_max] = [0.05, 0.95] and
 * start at p_init = 0.5.
 *
 * Over-selection: to get `remaining` informative groups the coordinator starts
 * greso_oversize(remaining, zv) = ceil(remaining * overselect / (1 - min(zv, zv_max))) groups,
 * zv being the zero-variance share of the last iteration's groups (those that passed the
 * pre-filter). With overselect 1.25 and zv_max 0.8 it starts between 1.25x and 6.25x the groups
 * it needs. greso_select then walks the candidate prompts in order, rolls one seeded draw per
 * candidate it looks at, and keeps the ones not skipped until it has enough.
 *
 * Everything here is pure: no I/O. A greso_t is the adaptive state (p_easy, p_hard, the last zero-
 * variance share); the caller loads and saves it (greso_store.h). Skipped prompts get no history
 * entry: the caller records a group mean only for groups that actually ran.
 */
#ifndef SR_GRESO_H
#define SR_GRESO_H

#include "common/prng.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    double easy_min;    /* a group mean >= this is an easy (all-correct) group: 0.98 */
    double hard_max;    /* a group mean <= this is a hard (all-wrong) group: 0.11 */
    double p_init;      /* starting p_easy and p_hard: 0.5 */
    double p_min;       /* clamp: 0.05 */
    double p_max;       /* clamp: 0.95 */
    double step;        /* move per iteration: 0.01 */
    double target_easy; /* target share of all-correct groups: 0.25 / 3 */
    double target_hard; /* target share of all-wrong groups: 0.25 * 2 / 3 */
    double skip_floor;  /* p_skip = 1 - max(p^z, skip_floor): 0.01 */
    double overselect;  /* over-selection factor: 1.25 */
    double zv_max;      /* the zero-variance share used for sizing is capped here: 0.8 */
} greso_cfg_t;

/* One history entry of a prompt. */
typedef struct {
    int64_t iteration;
    double mean_reward;
} greso_entry_t;

typedef enum {
    GRESO_STREAK_NONE = 0, /* no history, or the last group was informative */
    GRESO_STREAK_EASY,
    GRESO_STREAK_HARD,
} greso_streak_t;

/* A candidate prompt for greso_select: its task id and its history (oldest first, borrowed). */
typedef struct {
    const char *task;
    const greso_entry_t *history;
    size_t history_len;
} greso_candidate_t;

typedef struct greso greso_t;

/* greso_cfg_default fills *cfg with the values named in the field comments. */
void greso_cfg_default(greso_cfg_t *cfg);

/* greso_cfg_check returns SR_OK when every field is usable (thresholds in [0, 1] with hard_max <
 * easy_min, 0 < p_min <= p_init <= p_max < 1, step, targets and skip_floor in [0, 1], overselect
 * >= 1, zv_max in [0, 1)), else SR_EINVAL. NULL is SR_EINVAL. */
int greso_cfg_check(const greso_cfg_t *cfg);

/* greso_new returns a filter with p_easy = p_hard = cfg->p_init and a last zero-variance share of
 * 0. cfg NULL means the defaults; the config is copied. Returns NULL when cfg fails
 * greso_cfg_check or memory runs out. Free with greso_destroy. */
greso_t *greso_new(const greso_cfg_t *cfg);

/* greso_destroy frees the filter and sets *self_p to NULL. Accepts NULL and a pointer to NULL. */
void greso_destroy(greso_t **self_p);

/* greso_cfg returns the filter's config (owned by g). */
const greso_cfg_t *greso_cfg(const greso_t *g);

/* greso_streak returns the streak length z of a history (oldest first; NULL is fine when n is 0)
 * and stores its kind in *kind (may be NULL). Entries with a NaN mean end the streak. */
size_t greso_streak(const greso_cfg_t *cfg, const greso_entry_t *history, size_t n,
                    greso_streak_t *kind);

/* greso_skip_prob returns p_skip = 1 - max(p^z, skip_floor) for a history, p being the current
 * p_easy or p_hard by the streak's kind; 0 for z = 0. Always in [0, 1 - skip_floor]. */
double greso_skip_prob(const greso_t *g, const greso_entry_t *history, size_t n);

/* greso_select walks cands[0..n) in order until `want` candidates are selected or the list ends.
 * For each candidate it looks at, it draws one prng_double from prng (even when p_skip is 0, so
 * candidate i always uses the i-th draw of the walk) and skips it when the draw < p_skip. Indices
 * of selected candidates go to out_selected (room for `want`), of skipped ones to out_skipped
 * (room for n; may be NULL when the caller does not need them), in walk order; *n_selected and
 * *n_skipped receive the counts. Candidates after the stop are neither. Returns SR_OK, or
 * SR_EINVAL for a NULL g, prng, out_selected, n_selected or n_skipped, or NULL cands with n > 0.
 * The same state, candidates and prng state always give the same selection. */
int greso_select(const greso_t *g, const greso_candidate_t *cands, size_t n, size_t want,
                 prng_t *prng, size_t *out_selected, size_t *n_selected, size_t *out_skipped,
                 size_t *n_skipped);

/* greso_end_iteration adapts p_easy and p_hard once, from the iteration's groups whose rewards
 * are known (groups that ran to the end, backfill included; not skipped or cancelled ones):
 * n_all_correct of them had a mean >= easy_min, n_all_wrong a mean <= hard_max, out of n_groups.
 * It also remembers (n_all_correct + n_all_wrong) / n_groups as the zero-variance share used by
 * greso_oversize_next. With n_groups = 0 nothing was observed and nothing changes (SR_OK).
 * Returns SR_EINVAL for NULL g or n_all_correct + n_all_wrong > n_groups (nothing changes). */
int greso_end_iteration(greso_t *g, size_t n_all_correct, size_t n_all_wrong, size_t n_groups);

/* greso_p_easy / greso_p_hard return the current values; greso_zv_ratio the last observed
 * zero-variance share (0 until the first iteration ended). */
double greso_p_easy(const greso_t *g);
double greso_p_hard(const greso_t *g);
double greso_zv_ratio(const greso_t *g);

/* greso_set_p sets p_easy and p_hard (for a resumed run), clamped to [p_min, p_max]; NaN keeps
 * the current value. greso_set_zv_ratio sets the remembered share, clamped to [0, 1]. */
void greso_set_p(greso_t *g, double p_easy, double p_hard);
void greso_set_zv_ratio(greso_t *g, double zv);

/* greso_oversize returns how many groups to start to obtain `remaining` informative ones when a
 * share zv of them is expected to be zero-variance: ceil(remaining * overselect / (1 - zv')) with
 * zv' = zv clamped to [0, zv_max] (NaN counts as 0). 0 when remaining is 0. The result is at least
 * remaining; overselect < 1 counts as 1 and zv_max is capped at 0.95. */
size_t greso_oversize(size_t remaining, double zv, double overselect, double zv_max);

/* greso_oversize_next is greso_oversize with g's config and its last observed share. */
size_t greso_oversize_next(const greso_t *g, size_t remaining);

#endif
