/*
 * dashboard_gate.c — the gate's running figures (selroll:<run>:gate:stats) read for the
 * dashboard's snapshot, its /metrics gauge and `selroll status`.
 *
 * The gate writes the hash from its own writer thread: its configuration (rule, mode, audit base,
 * the learned rule's label threshold) when it starts, and its counters after every group outcome
 * it sees. The reader takes whatever fields are there; the audit's precision estimate stays -1
 * (unknown) until an audited group has ended.
 */
#include "coordinator/dashboard_gate.h"

#include "common/sr.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dashboard_gate_init(dashboard_gate_t *g)
{
    SR_ASSERT(g);
    memset(g, 0, sizeof *g);
    g->outcomes = g->audit_groups = g->audit_zero_variance = -1;
    g->keep_two_labels = g->keep_two_wrong = g->learned_labels = g->learned_min_groups = -1;
    g->audit_precision = -1.0;
}

/* s_int reads a non-negative integer; *out is unchanged when text is not one. */
static void s_int(const char *text, int64_t *out)
{
    char *end = NULL;
    long long v = strtoll(text, &end, 10);
    if (end != text && *end == '\0' && v >= 0)
        *out = v;
}

static void s_name(const char *text, char *out)
{
    size_t n = strlen(text);
    bool ok = n > 0 && n < DASHBOARD_GATE_NAME_MAX;
    for (size_t i = 0; ok && i < n; i++)
        ok = (text[i] >= 'a' && text[i] <= 'z') || text[i] == '-';
    if (ok)
        memcpy(out, text, n + 1);
}

void dashboard_gate_parse(const store_field_t *f, size_t n, dashboard_gate_t *g)
{
    dashboard_gate_init(g);
    g->recorded = n > 0;
    for (size_t i = 0; f && i < n; i++) {
        const char *k = f[i].name, *v = f[i].value ? f[i].value : "";
        if (!k)
            continue;
        if (!strcmp(k, "rule"))
            s_name(v, g->rule);
        else if (!strcmp(k, "mode"))
            s_name(v, g->mode);
        else if (!strcmp(k, "audit_base"))
            s_name(v, g->audit_base);
        else if (!strcmp(k, "outcomes"))
            s_int(v, &g->outcomes);
        else if (!strcmp(k, "audit_groups"))
            s_int(v, &g->audit_groups);
        else if (!strcmp(k, "audit_zero_variance"))
            s_int(v, &g->audit_zero_variance);
        else if (!strcmp(k, "keep_two_labels"))
            s_int(v, &g->keep_two_labels);
        else if (!strcmp(k, "keep_two_wrong"))
            s_int(v, &g->keep_two_wrong);
        else if (!strcmp(k, "learned_labels"))
            s_int(v, &g->learned_labels);
        else if (!strcmp(k, "learned_min_groups"))
            s_int(v, &g->learned_min_groups);
        else if (!strcmp(k, "audit_precision")) {
            char *end = NULL;
            double p = strtod(v, &end);
            if (end != v && *end == '\0' && p >= 0.0 && p <= 1.0)
                g->audit_precision = p;
        }
    }
    /* An estimate without an audited group behind it is not one. */
    if (g->audit_groups <= 0)
        g->audit_precision = -1.0;
}

static void s_add_count(cJSON *o, const char *k, int64_t v)
{
    if (v >= 0)
        cJSON_AddNumberToObject(o, k, (double)v);
}

cJSON *dashboard_gate_json(const dashboard_gate_t *g)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddBoolToObject(o, "recorded", g->recorded);
    if (!g->recorded)
        return o;
    if (g->rule[0])
        cJSON_AddStringToObject(o, "rule", g->rule);
    if (g->mode[0])
        cJSON_AddStringToObject(o, "mode", g->mode);
    if (g->audit_base[0])
        cJSON_AddStringToObject(o, "audit_base", g->audit_base);
    s_add_count(o, "outcomes", g->outcomes);
    s_add_count(o, "audit_groups", g->audit_groups);
    s_add_count(o, "audit_zero_variance", g->audit_zero_variance);
    cJSON_AddNumberToObject(o, "audit_precision",
                            g->audit_precision >= 0
                                ? (double)(int64_t)(g->audit_precision * 1000 + 0.5) / 1000.0
                                : -1.0);
    s_add_count(o, "keep_two_labels", g->keep_two_labels);
    s_add_count(o, "keep_two_wrong", g->keep_two_wrong);
    s_add_count(o, "learned_labels", g->learned_labels);
    if (g->learned_min_groups >= 0) {
        s_add_count(o, "learned_min_groups", g->learned_min_groups);
        cJSON_AddBoolToObject(o, "learned_ready",
                              g->learned_labels >= 0 && g->learned_labels >= g->learned_min_groups);
    }
    return o;
}

void dashboard_gate_audit_text(const dashboard_gate_t *g, char *buf, size_t len)
{
    if (!buf || len == 0)
        return;
    if (g->audit_precision >= 0 && g->audit_groups > 0)
        snprintf(buf, len, "audit precision %.2f (%lld audited group%s)", g->audit_precision,
                 (long long)g->audit_groups, g->audit_groups == 1 ? "" : "s");
    else
        snprintf(buf, len, "no audit");
}

void dashboard_gate_text(const dashboard_gate_t *g, char *buf, size_t len)
{
    if (!buf || len == 0)
        return;
    if (!g->recorded) {
        snprintf(buf, len, "gate: no statistics in Redis");
        return;
    }
    char audit[96], learned[96] = "";
    dashboard_gate_audit_text(g, audit, sizeof audit);
    if (g->learned_min_groups >= 0)
        snprintf(learned, sizeof learned, ", learned model %lld/%lld labels (%s)",
                 (long long)SR_MAX(g->learned_labels, 0), (long long)g->learned_min_groups,
                 g->learned_labels >= g->learned_min_groups ? "may cut" : "learning");
    snprintf(buf, len, "gate: rule %s (%s), %s%s", g->rule[0] ? g->rule : "?",
             g->mode[0] ? g->mode : "?", audit, learned);
}
