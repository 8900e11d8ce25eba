/*
 * gate.c — the decision core of the prefix-divergence gate: per-group prefixes, the step-K
 * checkpoint, the cancel rule, and bounded memory through tombstones and eviction.
 *
 * Groups live in a chained hash table keyed by group id (FNV-1a 64). A group record holds G x K
 * action hashes plus, per trajectory, how many steps it reported, whether it ended and whether
 * a step in 1..K was missed. When the last trajectory becomes ready the group is decided, its
 * arrays are freed and the record stays as a tombstone until it has been idle for the TTL.
 *
 * With other rules in play (cfg.shadow, or a deciding rule other than paper) the arrays span the
 * horizon H — the latest checkpoint of any rule in play — instead of K. The group walks through
 * the sorted checkpoints of all rules in play; at each one that is ready it computes the
 * features once and lets each interested rule update its verdict. The deciding rule's final
 * verdict is the decision gate_observe returns; the verdicts of all rules go out as one RULES
 * event; the group is kept (without its action arrays) until its outcome is known when a rule in
 * play learns from outcomes (learned, audit, keep-two).
 */
#include "gate/gate.h"

#include "common/editdist.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct s_group {
    struct s_group *next; /* hash chain */
    uint64_t hash;        /* FNV-1a 64 of gid */
    char gid[GATE_GID_MAX];
    char *task; /* NULL when none was seen */
    int G;
    bool decided;
    int64_t last_seen_ms;
    uint64_t *acts; /* G x K action hashes, row t = trajectory t; NULL once decided */
    int64_t *seen;  /* steps reported per trajectory */
    uint8_t *ended; /* the trajectory ended at step seen[t] */
    uint8_t *gap;   /* a step within 1..K was missed */
    /* Rules beyond the paper (all NULL / 0 when only the paper's rule is in play). */
    int64_t *gap_at;  /* first missing step per trajectory, 0 = none */
    double *reward;   /* reward of each ended trajectory */
    int cp;           /* next checkpoint index */
    bool primary_done, record_done, outcome_done, hist_set, hist_asked, has_x;
    bool audited;
    uint64_t keep_mask;
    gate_history_t hist;
    gate_rule_verdict_t v[GATE_RULE_COUNT];
    double x[GATE_LEARNED_NF];
} s_group_t;

#define S_MAX_CPS 32
#define S_MAX_EVENTS 65536

struct gate {
    gate_cfg_t cfg;
    char *run;
    s_group_t **buckets;
    size_t nbuckets; /* a power of two */
    gate_stats_t st;
    bool extended;   /* rules beyond the paper's gate are in play */
    unsigned play;   /* rules evaluated: the deciding one and the shadow ones */
    bool outcomes;   /* groups are followed until their outcome */
    int H;           /* steps kept per trajectory: K, or the latest checkpoint in play */
    int cps[S_MAX_CPS];
    int ncps;
    uint32_t wants[GATE_RULE_COUNT]; /* bit i: the rule looks at cps[i] */
    gate_learned_t *model;
    gate_event_t *ev; /* ring of queued events */
    size_t ev_cap, ev_head, ev_n;
};

static uint64_t s_fnv1a(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 14695981039346656037ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 1099511628211ULL;
    }
    return h;
}

void gate_cfg_init(gate_cfg_t *c)
{
    SR_ASSERT(c);
    memset(c, 0, sizeof *c);
    c->mode = GATE_MODE_ENFORCE;
    c->k = 10;
    c->threshold = 0.12;
    c->t_high = 0.0;
    c->shard_index = 0;
    c->shard_count = 1;
    c->default_group_size = 0;
    c->run = NULL;
    c->idle_ttl_ms = 60000;
    c->max_groups = 65536;
    c->rule = GATE_RULE_PAPER;
    c->shadow = 0;
    gate_rules_cfg_init(&c->rules);
    c->learned_capacity = 2048;
}

int gate_cfg_check(const gate_cfg_t *c, char *err, size_t errlen)
{
    const char *why = NULL;
    if (!c)
        why = "no configuration";
    else if (c->mode < GATE_MODE_ENFORCE || c->mode > GATE_MODE_OFF)
        why = "mode must be enforce, shadow or off";
    else if (c->k < 1 || c->k > GATE_MAX_K)
        why = "k must be in 1..1024";
    else if (!(c->threshold >= 0.0 && c->threshold <= 1.0))
        why = "threshold must be in [0, 1]";
    else if (!(c->t_high <= 1.0))
        why = "t-high must be at most 1 (0 or less turns the rule off)";
    else if (c->shard_count < 1 || c->shard_index < 0 || c->shard_index >= c->shard_count)
        why = "shard must be i/n with 0 <= i < n";
    else if (c->default_group_size < 0 || c->default_group_size > GATE_MAX_G)
        why = "group size must be in 0..64";
    else if (c->idle_ttl_ms <= 0)
        why = "idle TTL must be positive";
    else if (c->max_groups < 1)
        why = "max groups must be at least 1";
    else if (c->rule < 0 || c->rule >= GATE_RULE_COUNT)
        why = "unknown rule";
    else if (c->shadow & ~GATE_RULES_ALL)
        why = "unknown shadow rule";
    else if (c->learned_capacity < 1)
        why = "learned capacity must be at least 1";
    else if (gate_rules_cfg_check(&c->rules, err, errlen) != SR_OK)
        return SR_EINVAL;
    if (!why)
        return SR_OK;
    if (err && errlen)
        snprintf(err, errlen, "gate: %s", why);
    return SR_EINVAL;
}

/* s_plan works out the checkpoints and the horizon of the rules in play and creates the learned
 * model when a rule in play needs it. Returns SR_OK or SR_ENOMEM. */
static int s_plan(gate_t *g)
{
    const gate_rules_cfg_t *rc = &g->cfg.rules;
    bool need_model = false;
    for (int r = 0; r < GATE_RULE_COUNT; r++) {
        if (!(g->play & (1u << r)))
            continue;
        int steps[GATE_MAX_CHECKPOINTS];
        int n = gate_rule_steps((gate_rule_t)r, rc, g->cfg.k, steps);
        for (int i = 0; i < n; i++) {
            int j = 0;
            while (j < g->ncps && g->cps[j] < steps[i])
                j++;
            if (j < g->ncps && g->cps[j] == steps[i])
                continue;
            SR_ASSERT(g->ncps < S_MAX_CPS);
            memmove(g->cps + j + 1, g->cps + j, (size_t)(g->ncps - j) * sizeof *g->cps);
            g->cps[j] = steps[i];
            g->ncps++;
        }
        if (r == GATE_RULE_LEARNED || (r == GATE_RULE_AUDIT && rc->audit_base == GATE_RULE_LEARNED))
            need_model = true;
        if (r == GATE_RULE_LEARNED || r == GATE_RULE_AUDIT || r == GATE_RULE_KEEP_TWO)
            g->outcomes = true;
    }
    for (int r = 0; r < GATE_RULE_COUNT; r++) {
        if (!(g->play & (1u << r)))
            continue;
        int steps[GATE_MAX_CHECKPOINTS];
        int n = gate_rule_steps((gate_rule_t)r, rc, g->cfg.k, steps);
        for (int i = 0; i < n; i++) {
            for (int j = 0; j < g->ncps; j++) {
                if (g->cps[j] == steps[i])
                    g->wants[r] |= 1u << j;
            }
        }
    }
    g->H = g->cps[g->ncps - 1] > g->cfg.k ? g->cps[g->ncps - 1] : g->cfg.k;
    if (need_model) {
        g->model = gate_learned_new(g->cfg.learned_capacity);
        if (!g->model)
            return SR_ENOMEM;
    }
    g->ev_cap = 64;
    g->ev = calloc(g->ev_cap, sizeof *g->ev);
    return g->ev ? SR_OK : SR_ENOMEM;
}

gate_t *gate_new(const gate_cfg_t *c)
{
    if (gate_cfg_check(c, NULL, 0) != SR_OK)
        return NULL;
    gate_t *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->cfg = *c;
    if (c->run) {
        g->run = strdup(c->run);
        if (!g->run)
            goto fail;
    }
    g->cfg.run = g->run;
    size_t nb = 64;
    while (nb < c->max_groups && nb < ((size_t)1 << 20))
        nb <<= 1;
    g->buckets = calloc(nb, sizeof *g->buckets);
    if (!g->buckets)
        goto fail;
    g->nbuckets = nb;
    g->H = c->k;
    g->play = c->shadow | (1u << c->rule);
    g->extended = g->play != (1u << GATE_RULE_PAPER);
    if (g->extended && s_plan(g) != SR_OK)
        goto fail;
    return g;
fail:
    gate_learned_destroy(&g->model);
    free(g->ev);
    free(g->buckets);
    free(g->run);
    free(g);
    return NULL;
}

static void s_group_free_arrays(s_group_t *grp)
{
    free(grp->acts);
    free(grp->seen);
    free(grp->ended);
    free(grp->gap);
    free(grp->gap_at);
    free(grp->reward);
    grp->acts = NULL;
    grp->seen = NULL;
    grp->ended = NULL;
    grp->gap = NULL;
    grp->gap_at = NULL;
    grp->reward = NULL;
}

static void s_group_free(s_group_t *grp)
{
    if (!grp)
        return;
    s_group_free_arrays(grp);
    free(grp->task);
    free(grp);
}

void gate_destroy(gate_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    gate_t *g = *self_p;
    for (size_t i = 0; i < g->nbuckets; i++) {
        s_group_t *grp = g->buckets[i];
        while (grp) {
            s_group_t *next = grp->next;
            s_group_free(grp);
            grp = next;
        }
    }
    free(g->buckets);
    free(g->run);
    gate_learned_destroy(&g->model);
    free(g->ev);
    free(g);
    *self_p = NULL;
}

int gate_shard_of(const char *gid, int n)
{
    if (!gid || n <= 1)
        return 0;
    return (int)(s_fnv1a(gid, strlen(gid)) % (uint64_t)n);
}

bool gate_owns(const gate_t *g, const char *gid)
{
    return gate_shard_of(gid, g->cfg.shard_count) == g->cfg.shard_index;
}

static s_group_t *s_find(gate_t *g, const char *gid, uint64_t h)
{
    for (s_group_t *grp = g->buckets[h & (g->nbuckets - 1)]; grp; grp = grp->next) {
        if (grp->hash == h && !strcmp(grp->gid, gid))
            return grp;
    }
    return NULL;
}

/* s_remove removes grp from its chain (it must be there) and frees it. */
static void s_remove(gate_t *g, s_group_t *grp)
{
    s_group_t **pp = &g->buckets[grp->hash & (g->nbuckets - 1)];
    while (*pp && *pp != grp)
        pp = &(*pp)->next;
    SR_ASSERT(*pp == grp);
    *pp = grp->next;
    s_group_free(grp);
    g->st.groups--;
}

/* s_evict_oldest removes the least recently seen group; called only when the table is full. */
static void s_evict_oldest(gate_t *g)
{
    s_group_t *oldest = NULL;
    for (size_t i = 0; i < g->nbuckets; i++) {
        for (s_group_t *grp = g->buckets[i]; grp; grp = grp->next) {
            if (!oldest || grp->last_seen_ms < oldest->last_seen_ms)
                oldest = grp;
        }
    }
    if (oldest) {
        if (!oldest->decided && !oldest->primary_done)
            g->st.evicted++;
        s_remove(g, oldest);
    }
}

static s_group_t *s_create(gate_t *g, const char *gid, uint64_t h, int G)
{
    while (g->st.groups >= g->cfg.max_groups)
        s_evict_oldest(g);
    s_group_t *grp = calloc(1, sizeof *grp);
    if (!grp)
        return NULL;
    size_t H = (size_t)g->H;
    grp->acts = calloc((size_t)G * H, sizeof *grp->acts);
    grp->seen = calloc((size_t)G, sizeof *grp->seen);
    grp->ended = calloc((size_t)G, 1);
    grp->gap = calloc((size_t)G, 1);
    if (g->extended) {
        grp->gap_at = calloc((size_t)G, sizeof *grp->gap_at);
        grp->reward = calloc((size_t)G, sizeof *grp->reward);
    }
    if (!grp->acts || !grp->seen || !grp->ended || !grp->gap ||
        (g->extended && (!grp->gap_at || !grp->reward))) {
        s_group_free(grp);
        return NULL;
    }
    grp->hash = h;
    snprintf(grp->gid, sizeof grp->gid, "%s", gid);
    grp->G = G;
    if (g->play & (1u << GATE_RULE_AUDIT))
        grp->audited = gate_audit_coin(gid, g->cfg.rules.audit_seed, g->cfg.rules.audit_q);
    size_t b = h & (g->nbuckets - 1);
    grp->next = g->buckets[b];
    g->buckets[b] = grp;
    g->st.groups++;
    return grp;
}

static uint64_t s_action_hash(const char *action)
{
    char norm[PROTO_MAX_ACTION + 1];
    int n = editdist_normalize(action ? action : "", norm, sizeof norm);
    size_t len = n >= 0 ? (size_t)n : strlen(norm); /* too long: the cut prefix stands for it */
    return s_fnv1a(norm, len);
}

static int s_cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* s_ready tells whether every trajectory reported step K or ended, with no gap in 1..K. */
static bool s_ready(const gate_t *g, const s_group_t *grp)
{
    for (int t = 0; t < grp->G; t++) {
        if (grp->gap[t])
            return false;
        if (!grp->ended[t] && grp->seen[t] < g->cfg.k)
            return false;
    }
    return true;
}

static int s_divergence(const gate_t *g, const s_group_t *grp, int c, double *out);

/* s_decide computes d_K for a ready group and fills out. Returns SR_OK or SR_ENOMEM. */
static int s_decide(gate_t *g, s_group_t *grp, gate_decision_t *out)
{
    size_t K = (size_t)g->cfg.k, G = (size_t)grp->G;
    double d = 0.0;
    int rc = s_divergence(g, grp, g->cfg.k, &d); /* this path keeps K actions a trajectory: H = K */
    if (rc != SR_OK)
        return rc;
    size_t ended_by_k = 0;
    for (size_t t = 0; t < G; t++) {
        if (grp->ended[t] && grp->seen[t] <= (int64_t)K)
            ended_by_k++;
    }

    memset(out, 0, sizeof *out);
    snprintf(out->group, sizeof out->group, "%s", grp->gid);
    snprintf(out->task, sizeof out->task, "%s", grp->task ? grp->task : "");
    out->G = grp->G;
    out->step = g->cfg.k;
    out->d = d;
    out->ended_share = (double)ended_by_k / (double)G;
    if (ended_by_k == G) {
        out->verdict = GATE_ENDED_BEFORE_K;
        out->reason = "ended_before_k";
        g->st.ended_before_k++;
    } else if (G < 2) {
        /* A group of one (a held-out evaluation episode) has nothing to compare: never cut. */
        out->verdict = GATE_KEEP;
        out->reason = "single";
        g->st.keeps++;
    } else if (d < g->cfg.threshold) {
        out->verdict = GATE_CANCEL;
        out->reason = "divergence";
        g->st.cancels++;
    } else if (g->cfg.t_high > 0.0 && out->ended_share >= g->cfg.t_high) {
        out->verdict = GATE_CANCEL;
        out->reason = "t_high";
        g->st.cancels++;
    } else {
        out->verdict = GATE_KEEP;
        out->reason = "diverse";
        g->st.keeps++;
    }
    out->record = g->cfg.mode != GATE_MODE_OFF;
    out->cancel = g->cfg.mode == GATE_MODE_ENFORCE && out->verdict == GATE_CANCEL;
    g->st.decisions++;
    grp->decided = true;
    s_group_free_arrays(grp);
    return SR_OK;
}

/* ---- rules beyond the paper's ---------------------------------------------------------------- */

static void s_push_event(gate_t *g, const gate_event_t *e)
{
    if (g->ev_n == g->ev_cap) {
        size_t cap = g->ev_cap * 2;
        gate_event_t *nv = cap <= S_MAX_EVENTS ? malloc(cap * sizeof *nv) : NULL;
        if (!nv) {
            /* Full (or no memory): the oldest event goes. */
            g->ev_head = (g->ev_head + 1) % g->ev_cap;
            g->ev_n--;
            g->st.events_dropped++;
        } else {
            for (size_t i = 0; i < g->ev_n; i++)
                nv[i] = g->ev[(g->ev_head + i) % g->ev_cap];
            free(g->ev);
            g->ev = nv;
            g->ev_cap = cap;
            g->ev_head = 0;
        }
    }
    g->ev[(g->ev_head + g->ev_n) % g->ev_cap] = *e;
    g->ev_n++;
}

int gate_next_event(gate_t *g, gate_event_t *out)
{
    if (!g || !out || g->ev_n == 0)
        return 0;
    *out = g->ev[g->ev_head];
    g->ev_head = (g->ev_head + 1) % g->ev_cap;
    g->ev_n--;
    return 1;
}

/* s_ready_at tells whether every trajectory reported step c or ended, with no step in 1..c
 * missed. */
static bool s_ready_at(const s_group_t *grp, int c)
{
    for (int t = 0; t < grp->G; t++) {
        if (grp->gap_at[t] && grp->gap_at[t] <= c)
            return false;
        if (!grp->ended[t] && grp->seen[t] < c)
            return false;
    }
    return true;
}

/* s_divergence computes d over the first c actions (stride H) of a group ready at c. Returns
 * SR_OK or SR_ENOMEM. */
static int s_divergence(const gate_t *g, const s_group_t *grp, int c, double *out)
{
    int rc = SR_ENOMEM;
    size_t H = (size_t)g->H, G = (size_t)grp->G, C = (size_t)c;
    uint64_t *uniq = malloc(G * C * sizeof *uniq);
    uint32_t *ids = calloc(G * C, sizeof *ids);
    const uint32_t **seqs = malloc(G * sizeof *seqs);
    size_t *lens = malloc(G * sizeof *lens);
    if (!uniq || !ids || !seqs || !lens)
        goto cleanup;
    size_t n = 0;
    for (size_t t = 0; t < G; t++) {
        lens[t] = grp->seen[t] < (int64_t)C ? (size_t)grp->seen[t] : C;
        for (size_t i = 0; i < lens[t]; i++)
            uniq[n++] = grp->acts[t * H + i];
    }
    qsort(uniq, n, sizeof *uniq, s_cmp_u64);
    size_t u = 0;
    for (size_t i = 0; i < n; i++) {
        if (u == 0 || uniq[u - 1] != uniq[i])
            uniq[u++] = uniq[i];
    }
    for (size_t t = 0; t < G; t++) {
        for (size_t i = 0; i < lens[t]; i++) {
            const uint64_t *hit = bsearch(&grp->acts[t * H + i], uniq, u, sizeof *uniq, s_cmp_u64);
            SR_ASSERT(hit);
            ids[t * C + i] = (uint32_t)(hit - uniq) + 1; /* 0 is <END> */
        }
        seqs[t] = ids + t * C;
    }
    *out = editdist_prefix_divergence(seqs, lens, G, C);
    SR_ASSERT(*out >= 0.0);
    rc = SR_OK;
cleanup:
    free(uniq);
    free(ids);
    free(seqs);
    free(lens);
    return rc;
}

/* s_features fills f for a group ready at checkpoint c. Returns SR_OK or SR_ENOMEM. */
static int s_features(const gate_t *g, const s_group_t *grp, int c, gate_features_t *f)
{
    memset(f, 0, sizeof *f);
    f->step = c;
    f->G = grp->G;
    int rc = s_divergence(g, grp, c, &f->d);
    if (rc == SR_OK)
        rc = s_divergence(g, grp, (c + 1) / 2, &f->d_half);
    if (rc != SR_OK)
        return rc;
    size_t H = (size_t)g->H;
    int ended = 0, won = 0;
    double rsum = 0;
    int64_t reps = 0, pairs = 0;
    for (int t = 0; t < grp->G; t++) {
        if (grp->ended[t] && grp->seen[t] <= c) {
            ended++;
            rsum += grp->reward[t];
            won += grp->reward[t] > 0;
        }
        int64_t len = grp->seen[t] < c ? grp->seen[t] : c;
        for (int64_t i = 1; i < len; i++) {
            pairs++;
            reps += grp->acts[(size_t)t * H + (size_t)i] == grp->acts[(size_t)t * H + (size_t)i - 1];
        }
    }
    f->ended_share = (double)ended / grp->G;
    f->all_ended = ended == grp->G;
    f->reward_mean = ended ? rsum / ended : 0.0;
    f->won_share = ended ? (double)won / ended : 0.0;
    f->repeat_rate = pairs ? (double)reps / (double)pairs : 0.0;
    if (grp->hist_set)
        f->hist = grp->hist;
    return SR_OK;
}

static bool s_learned_ready(const gate_t *g)
{
    return g->model && gate_learned_count(g->model) >= (uint64_t)g->cfg.rules.learned_min_groups;
}

/* s_keep_two picks the two running trajectories (not ended by step c) whose prefixes differ
 * most (the first such pair in index order on ties), or fewer when fewer run. */
static uint64_t s_keep_two(const gate_t *g, const s_group_t *grp, int c)
{
    size_t H = (size_t)g->H;
    int best_a = -1, best_b = -1;
    size_t best = 0;
    for (int a = 0; a < grp->G; a++) {
        if (grp->ended[a] && grp->seen[a] <= c)
            continue;
        if (best_a < 0)
            best_a = a;
        for (int b = a + 1; b < grp->G; b++) {
            if (grp->ended[b] && grp->seen[b] <= c)
                continue;
            size_t diff = 0;
            for (int i = 0; i < c; i++)
                diff += grp->acts[(size_t)a * H + (size_t)i] != grp->acts[(size_t)b * H + (size_t)i];
            if (best_b < 0 || diff > best) {
                best = diff;
                best_a = a;
                best_b = b;
            }
        }
    }
    uint64_t m = 0;
    if (best_a >= 0)
        m |= 1ull << best_a;
    if (best_b >= 0)
        m |= 1ull << best_b;
    return m;
}

/* s_primary turns the deciding rule's final verdict at features f into the decision *out. */
static void s_primary(gate_t *g, s_group_t *grp, const gate_features_t *f, gate_decision_t *out)
{
    const gate_rule_verdict_t *v = &grp->v[g->cfg.rule];
    memset(out, 0, sizeof *out);
    snprintf(out->group, sizeof out->group, "%s", grp->gid);
    snprintf(out->task, sizeof out->task, "%s", grp->task ? grp->task : "");
    out->G = grp->G;
    out->step = v->step;
    out->d = f->d;
    out->ended_share = f->ended_share;
    out->rule = g->cfg.rule;
    out->score = v->score;
    out->audit_weight = 1.0;
    if (f->all_ended) {
        out->verdict = GATE_ENDED_BEFORE_K;
        out->reason = "ended_before_k";
        g->st.ended_before_k++;
    } else if (grp->G < 2) {
        out->verdict = GATE_KEEP;
        out->reason = "single";
        g->st.keeps++;
    } else if (v->cut && g->cfg.rule == GATE_RULE_AUDIT && grp->audited) {
        out->verdict = GATE_KEEP;
        out->reason = "audit";
        out->audited = true;
        if (g->cfg.mode == GATE_MODE_ENFORCE)
            out->audit_weight = 1.0 / g->cfg.rules.audit_q;
        g->st.keeps++;
    } else if (v->cut) {
        out->verdict = GATE_CANCEL;
        out->reason = v->reason;
        if (g->cfg.rule == GATE_RULE_KEEP_TWO)
            out->keep_mask = s_keep_two(g, grp, f->step);
        g->st.cancels++;
    } else {
        out->verdict = GATE_KEEP;
        out->reason = v->reason;
        g->st.keeps++;
    }
    out->record = g->cfg.mode != GATE_MODE_OFF;
    out->cancel = g->cfg.mode == GATE_MODE_ENFORCE && out->verdict == GATE_CANCEL;
    g->st.decisions++;
}

static void s_emit_record(gate_t *g, s_group_t *grp)
{
    gate_event_t e;
    memset(&e, 0, sizeof e);
    e.kind = GATE_EVENT_RULES;
    snprintf(e.group, sizeof e.group, "%s", grp->gid);
    snprintf(e.task, sizeof e.task, "%s", grp->task ? grp->task : "");
    e.rules = g->play;
    memcpy(e.verdicts, grp->v, sizeof e.verdicts);
    e.audited = grp->audited && grp->v[GATE_RULE_AUDIT].cut;
    s_push_event(g, &e);
    g->st.records++;
    grp->record_done = true;
}

/* s_outcome checks whether the group's outcome is known now and, when it is, queues it, feeds
 * the learned model and the audit's estimate. */
static void s_outcome(gate_t *g, s_group_t *grp)
{
    gate_event_t e;
    memset(&e, 0, sizeof e);
    e.kind = GATE_EVENT_OUTCOME;
    snprintf(e.group, sizeof e.group, "%s", grp->gid);
    snprintf(e.task, sizeof e.task, "%s", grp->task ? grp->task : "");
    int ended = 0;
    double lo = 0, hi = 0, sum = 0;
    for (int t = 0; t < grp->G; t++) {
        if (!grp->ended[t])
            continue;
        double r = grp->reward[t];
        lo = ended == 0 || r < lo ? r : lo;
        hi = ended == 0 || r > hi ? r : hi;
        sum += r;
        ended++;
    }
    if (grp->keep_mask) {
        /* Cut by keep-two: only the kept trajectories finish. Once they have, the rewards of
         * every ended trajectory (the kept ones and those that ended before the cut) are what
         * the group shows of its outcome: differing rewards prove the cut wrong. */
        for (int t = 0; t < grp->G; t++) {
            if ((grp->keep_mask & (1ull << t)) && !grp->ended[t])
                return;
        }
        e.keep_two = true;
        e.keep_two_wrong = hi != lo;
        g->st.keep_two_labels++;
        g->st.keep_two_wrong += e.keep_two_wrong;
    } else {
        if (ended < grp->G)
            return;
        e.known = true;
        e.zero_variance = hi == lo;
        e.reward_mean = sum / grp->G;
        g->st.outcomes++;
        /* A group of one (a held-out evaluation episode) is zero-variance by definition and is
         * never cut: it says nothing about groups, so it is no example for the model. */
        if (grp->has_x && g->model && grp->G >= 2) {
            gate_learned_add(g->model, grp->x, e.zero_variance, true);
            e.has_example = true;
            memcpy(e.x, grp->x, sizeof e.x);
        }
        if (grp->audited && grp->v[GATE_RULE_AUDIT].cut) {
            e.audited = true;
            g->st.audit_groups++;
            g->st.audit_zero_variance += e.zero_variance;
        }
    }
    grp->outcome_done = true;
    s_push_event(g, &e);
}

/* s_finish_if_done turns the group into a tombstone once nothing more is expected of it. */
static void s_finish_if_done(s_group_t *grp)
{
    if (grp->record_done && grp->primary_done && grp->outcome_done) {
        grp->decided = true;
        s_group_free_arrays(grp);
    }
}

/* s_step_ext walks the group through every checkpoint that is ready. Returns 1 when the deciding
 * rule decided (out filled), 0 when not, SR_ENOMEM. */
static int s_step_ext(gate_t *g, s_group_t *grp, gate_decision_t *out)
{
    int ret = 0;
    while (!grp->record_done && grp->cp < g->ncps && s_ready_at(grp, g->cps[grp->cp])) {
        int i = grp->cp++;
        gate_features_t f;
        int rc = s_features(g, grp, g->cps[i], &f);
        if (rc != SR_OK)
            return rc;
        double p_zero = 0.5;
        if (g->model) {
            double x[GATE_LEARNED_NF];
            gate_learned_features(&f, x);
            p_zero = gate_learned_predict(g->model, x);
            int lk = g->cfg.rules.learned_k > 0 ? g->cfg.rules.learned_k : g->cfg.k;
            if (f.step == lk) {
                memcpy(grp->x, x, sizeof x);
                grp->has_x = true;
            }
        }
        bool all_final = true;
        for (int r = 0; r < GATE_RULE_COUNT; r++) {
            if (!(g->play & (1u << r)))
                continue;
            if (!grp->v[r].final && (g->wants[r] & (1u << i)))
                gate_rule_eval((gate_rule_t)r, &g->cfg.rules, g->cfg.k, g->cfg.threshold,
                               g->cfg.t_high, &f, p_zero, s_learned_ready(g), &grp->v[r]);
            all_final = all_final && grp->v[r].final;
        }
        if (!grp->primary_done && grp->v[g->cfg.rule].final) {
            grp->primary_done = true;
            s_primary(g, grp, &f, out);
            ret = 1;
            if (out->cancel) {
                /* The group stops here: the other rules will see no later step. */
                grp->keep_mask = out->keep_mask;
                if (!grp->keep_mask)
                    grp->outcome_done = true;
                all_final = true;
            }
        }
        if (all_final)
            s_emit_record(g, grp);
    }
    if (grp->record_done && !grp->outcome_done) {
        if (!g->outcomes)
            grp->outcome_done = true;
        else
            s_outcome(g, grp);
    }
    s_finish_if_done(grp);
    return ret;
}

static int s_observe_ext(gate_t *g, s_group_t *grp, const proto_action_t *a, gate_decision_t *out)
{
    size_t t = (size_t)a->traj, H = (size_t)g->H;
    if (a->step == 1 && grp->seen[t] >= 1) {
        grp->seen[t] = 0;
        grp->ended[t] = 0;
        grp->gap_at[t] = 0;
        grp->reward[t] = 0;
        g->st.restarts++;
    }
    if (grp->ended[t] || a->step <= grp->seen[t]) {
        g->st.ignored++;
        return 0;
    }
    if (a->step > grp->seen[t] + 1 && grp->seen[t] < (int64_t)H && !grp->gap_at[t]) {
        grp->gap_at[t] = grp->seen[t] + 1;
        g->st.gaps++;
    }
    if (a->step <= (int64_t)H && !grp->gap_at[t])
        grp->acts[t * H + (size_t)a->step - 1] = s_action_hash(a->action);
    grp->seen[t] = a->step;
    grp->ended[t] = a->ended ? 1 : 0;
    grp->reward[t] = isfinite(a->reward) ? a->reward : 0.0;
    g->st.actions++;
    return s_step_ext(g, grp, out);
}

bool gate_wants_history(gate_t *g, const char *gid)
{
    if (!g || !gid || !g->extended)
        return false;
    s_group_t *grp = s_find(g, gid, s_fnv1a(gid, strlen(gid)));
    if (!grp || grp->decided || grp->hist_asked || !grp->task)
        return false;
    grp->hist_asked = true;
    return true;
}

int gate_set_history(gate_t *g, const char *gid, const gate_history_t *h)
{
    if (!g || !gid || !h)
        return SR_EINVAL;
    s_group_t *grp = s_find(g, gid, s_fnv1a(gid, strlen(gid)));
    if (!grp)
        return SR_ENOTFOUND;
    grp->hist = *h;
    grp->hist_set = true;
    return SR_OK;
}

int gate_learn(gate_t *g, const double *x, bool zero_variance, bool refit)
{
    if (!g || !g->model)
        return SR_ENOTFOUND;
    return gate_learned_add(g->model, x, zero_variance, refit);
}

void gate_refit(gate_t *g)
{
    if (g && g->model)
        gate_learned_refit(g->model);
}

const gate_learned_t *gate_model(const gate_t *g)
{
    return g ? g->model : NULL;
}

double gate_audit_precision(const gate_t *g)
{
    if (!g || g->st.audit_groups == 0)
        return -1.0;
    return (double)g->st.audit_zero_variance / (double)g->st.audit_groups;
}

int gate_observe(gate_t *g, const proto_action_t *a, int64_t now_ms, gate_decision_t *out)
{
    if (!g || !a || !out)
        return SR_EINVAL;
    if (g->cfg.mode == GATE_MODE_OFF)
        return 0;
    size_t gl = a->group ? strlen(a->group) : 0;
    if (gl == 0 || gl >= GATE_GID_MAX || a->step < 1 || a->traj < 0 ||
        (g->run && (!a->run || strcmp(a->run, g->run)))) {
        g->st.refused++;
        return SR_EINVAL;
    }
    uint64_t h = s_fnv1a(a->group, gl);
    if (g->cfg.shard_count > 1 && (int)(h % (uint64_t)g->cfg.shard_count) != g->cfg.shard_index) {
        g->st.other_shard++;
        return 0;
    }
    int64_t G = a->group_size > 0 ? a->group_size : g->cfg.default_group_size;
    if (G < 1 || G > GATE_MAX_G || a->traj >= G) {
        g->st.refused++;
        return SR_EINVAL;
    }
    s_group_t *grp = s_find(g, a->group, h);
    if (grp && grp->G != G) {
        g->st.refused++;
        return SR_EINVAL;
    }
    if (!grp) {
        grp = s_create(g, a->group, h, (int)G);
        if (!grp)
            return SR_ENOMEM;
    }
    grp->last_seen_ms = now_ms;
    if (grp->decided) {
        g->st.ignored++;
        return 0;
    }
    if (!grp->task && a->task && a->task[0])
        grp->task = strdup(a->task); /* best effort: a missing task only blanks the decision's */
    if (g->extended) {
        return s_observe_ext(g, grp, a, out);
    }

    size_t t = (size_t)a->traj, K = (size_t)g->cfg.k;
    if (a->step == 1 && grp->seen[t] >= 1) {
        grp->seen[t] = 0;
        grp->ended[t] = 0;
        grp->gap[t] = 0;
        g->st.restarts++;
    }
    if (grp->ended[t] || a->step <= grp->seen[t]) {
        g->st.ignored++;
        return 0;
    }
    if (a->step > grp->seen[t] + 1 && grp->seen[t] < (int64_t)K) {
        grp->gap[t] = 1;
        g->st.gaps++;
    }
    if (a->step <= (int64_t)K && !grp->gap[t])
        grp->acts[t * K + (size_t)a->step - 1] = s_action_hash(a->action);
    grp->seen[t] = a->step;
    grp->ended[t] = a->ended ? 1 : 0;
    g->st.actions++;
    if (!s_ready(g, grp))
        return 0;
    int rc = s_decide(g, grp, out);
    return rc == SR_OK ? 1 : rc;
}

size_t gate_evict(gate_t *g, int64_t now_ms)
{
    if (!g)
        return 0;
    size_t n = 0;
    for (size_t i = 0; i < g->nbuckets; i++) {
        s_group_t **pp = &g->buckets[i];
        while (*pp) {
            s_group_t *grp = *pp;
            if (now_ms - grp->last_seen_ms > g->cfg.idle_ttl_ms) {
                *pp = grp->next;
                if (!grp->decided && !grp->primary_done)
                    g->st.evicted++;
                s_group_free(grp);
                g->st.groups--;
                n++;
            } else {
                pp = &grp->next;
            }
        }
    }
    return n;
}

void gate_stats(const gate_t *g, gate_stats_t *out)
{
    if (!out)
        return;
    if (!g) {
        memset(out, 0, sizeof *out);
        return;
    }
    *out = g->st;
}

const char *gate_verdict_name(gate_verdict_t v)
{
    switch (v) {
    case GATE_KEEP:
        return "keep";
    case GATE_CANCEL:
        return "cancel";
    case GATE_ENDED_BEFORE_K:
        return "ended_before_k";
    }
    return "?";
}

const char *gate_mode_name(gate_mode_t m)
{
    switch (m) {
    case GATE_MODE_ENFORCE:
        return "enforce";
    case GATE_MODE_SHADOW:
        return "shadow";
    case GATE_MODE_OFF:
        return "off";
    }
    return "?";
}
