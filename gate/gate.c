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
 *
 * This file: configuration, life cycle, the group table, the paper's step-K rule and
 * gate_observe; the rules beyond the paper's are gate_ext.c's (their shared state in
 * gate_int.h).
 */
#include "gate/gate.h"
#include "gate/gate_int.h"

#include "common/editdist.h"
#include "common/sr.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t gi_fnv1a(const void *p, size_t n)
{
    return sr_fnv1a(p, n, SR_FNV1A_BASIS);
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
    if (g->extended && gi_plan(g) != SR_OK)
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

void gi_group_free_arrays(gi_group_t *grp)
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

static void s_group_free(gi_group_t *grp)
{
    if (!grp)
        return;
    gi_group_free_arrays(grp);
    free(grp->task);
    free(grp);
}

void gate_destroy(gate_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    gate_t *g = *self_p;
    for (size_t i = 0; i < g->nbuckets; i++) {
        gi_group_t *grp = g->buckets[i];
        while (grp) {
            gi_group_t *next = grp->next;
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
    return (int)(gi_fnv1a(gid, strlen(gid)) % (uint64_t)n);
}

bool gate_owns(const gate_t *g, const char *gid)
{
    return gate_shard_of(gid, g->cfg.shard_count) == g->cfg.shard_index;
}

gi_group_t *gi_find(gate_t *g, const char *gid, uint64_t h)
{
    for (gi_group_t *grp = g->buckets[h & (g->nbuckets - 1)]; grp; grp = grp->next) {
        if (grp->hash == h && !strcmp(grp->gid, gid))
            return grp;
    }
    return NULL;
}

/* s_remove removes grp from its chain (it must be there) and frees it. */
static void s_remove(gate_t *g, gi_group_t *grp)
{
    gi_group_t **pp = &g->buckets[grp->hash & (g->nbuckets - 1)];
    while (*pp && *pp != grp)
        pp = &(*pp)->next;
    SR_ASSERT(*pp == grp);
    *pp = grp->next;
    if (g->last == grp)
        g->last = NULL;
    s_group_free(grp);
    g->st.groups--;
}

/* s_evict_oldest removes the least recently seen group; called only when the table is full. */
static void s_evict_oldest(gate_t *g)
{
    gi_group_t *oldest = NULL;
    for (size_t i = 0; i < g->nbuckets; i++) {
        for (gi_group_t *grp = g->buckets[i]; grp; grp = grp->next) {
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

static gi_group_t *s_create(gate_t *g, const char *gid, uint64_t h, int G)
{
    while (g->st.groups >= g->cfg.max_groups)
        s_evict_oldest(g);
    gi_group_t *grp = calloc(1, sizeof *grp);
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

/* gi_action_hash: the FNV-1a hash of the text editdist_normalize writes into a buffer of
 * PROTO_MAX_ACTION + 1 bytes (a longer text cut there: the cut prefix stands for it), computed
 * as the text is made, in one pass without the buffer. */
uint64_t gi_action_hash(const char *action)
{
    const uint64_t prime = 1099511628211ULL;
    const size_t cap = PROTO_MAX_ACTION + 1;
    uint64_t h = SR_FNV1A_BASIS;
    size_t n = 0;
    bool pending_space = false;
    for (const unsigned char *p = (const unsigned char *)(action ? action : ""); *p; p++) {
        if (isspace(*p)) {
            pending_space = n > 0; /* leading whitespace is dropped */
            continue;
        }
        if (n + (pending_space ? 2 : 1) >= cap)
            break;
        if (pending_space) {
            h = (h ^ (unsigned char)' ') * prime;
            n++;
            pending_space = false;
        }
        h = (h ^ (unsigned char)tolower(*p)) * prime;
        n++;
    }
    return h;
}

/* s_ready tells whether every trajectory reported step K or ended, with no gap in 1..K. */
static bool s_ready(const gate_t *g, const gi_group_t *grp)
{
    for (int t = 0; t < grp->G; t++) {
        if (grp->gap[t])
            return false;
        if (!grp->ended[t] && grp->seen[t] < g->cfg.k)
            return false;
    }
    return true;
}

/* s_decide computes d_K for a ready group and fills out. Returns SR_OK or SR_ENOMEM. */
static int s_decide(gate_t *g, gi_group_t *grp, gate_decision_t *out)
{
    size_t K = (size_t)g->cfg.k, G = (size_t)grp->G;
    double d = 0.0;
    int rc = gi_divergence(g, grp, g->cfg.k, &d); /* this path keeps K actions a trajectory: H = K */
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
    gi_group_free_arrays(grp);
    return SR_OK;
}

/* Up to S_DIV_STACK actions (G x c) the divergence numbers them in stack memory. */
#define S_DIV_STACK 512

/* s_slot_of returns the slot of hash h in the open-addressing table keys/used of mask + 1 slots:
 * its own, or the empty one where it goes. */
static size_t s_slot_of(const uint64_t *keys, const uint32_t *used, size_t mask, uint64_t h)
{
    size_t i = (size_t)(h ^ (h >> 29)) & mask;
    while (used[i] && keys[i] != h)
        i = (i + 1) & mask;
    return i;
}

/* gi_divergence: see gate_int.h. The action hashes are numbered 1.. in the order they first
 * appear (0 is <END>): the distances look at nothing but which actions are equal. */
int gi_divergence(const gate_t *g, const gi_group_t *grp, int c, double *out)
{
    size_t H = (size_t)g->H, G = (size_t)grp->G, C = (size_t)c, n = G * C;
    size_t nslots = 16;
    while (nslots < 2 * n)
        nslots <<= 1;
    uint32_t ids_st[S_DIV_STACK], used_st[2 * S_DIV_STACK];
    uint64_t keys_st[2 * S_DIV_STACK];
    uint32_t *ids = ids_st, *used = used_st;
    uint64_t *keys = keys_st;
    if (n > S_DIV_STACK) {
        ids = malloc(n * sizeof *ids);
        used = calloc(nslots, sizeof *used);
        keys = malloc(nslots * sizeof *keys);
        if (!ids || !used || !keys) {
            free(ids);
            free(used);
            free(keys);
            return SR_ENOMEM;
        }
    } else {
        memset(used, 0, nslots * sizeof *used);
    }
    const uint32_t *seqs[GATE_MAX_G];
    size_t lens[GATE_MAX_G];
    uint32_t next = 1;
    for (size_t t = 0; t < G; t++) {
        lens[t] = grp->seen[t] < (int64_t)C ? (size_t)grp->seen[t] : C;
        for (size_t i = 0; i < lens[t]; i++) {
            uint64_t h = grp->acts[t * H + i];
            size_t k = s_slot_of(keys, used, nslots - 1, h);
            if (!used[k]) {
                keys[k] = h;
                used[k] = next++;
            }
            ids[t * C + i] = used[k];
        }
        seqs[t] = ids + t * C;
    }
    *out = editdist_prefix_divergence(seqs, lens, G, C);
    SR_ASSERT(*out >= 0.0);
    if (ids != ids_st) {
        free(ids);
        free(used);
        free(keys);
    }
    return SR_OK;
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
    uint64_t h = gi_fnv1a(a->group, gl);
    if (g->cfg.shard_count > 1 && (int)(h % (uint64_t)g->cfg.shard_count) != g->cfg.shard_index) {
        g->st.other_shard++;
        return 0;
    }
    int64_t G = a->group_size > 0 ? a->group_size : g->cfg.default_group_size;
    if (G < 1 || G > GATE_MAX_G || a->traj >= G) {
        g->st.refused++;
        return SR_EINVAL;
    }
    gi_group_t *grp = gi_find(g, a->group, h);
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
    g->last = grp;
    if (grp->decided) {
        g->st.ignored++;
        return 0;
    }
    if (!grp->task && a->task && a->task[0])
        grp->task = strdup(a->task); /* best effort: a missing task only blanks the decision's */
    if (g->extended) {
        return gi_observe_ext(g, grp, a, out);
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
        grp->acts[t * K + (size_t)a->step - 1] = gi_action_hash(a->action);
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
        gi_group_t **pp = &g->buckets[i];
        while (*pp) {
            gi_group_t *grp = *pp;
            if (now_ms - grp->last_seen_ms > g->cfg.idle_ttl_ms) {
                *pp = grp->next;
                if (!grp->decided && !grp->primary_done)
                    g->st.evicted++;
                if (g->last == grp)
                    g->last = NULL;
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
