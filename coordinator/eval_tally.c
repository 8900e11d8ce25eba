/*
 * eval_tally.c — a held-out evaluation's results counted by task type. See eval_tally.h.
 */
#include "coordinator/eval_tally.h"

#include "common/sr.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void eval_tally_init(eval_tally_t *e, const tasks_t *tasks)
{
    memset(e, 0, sizeof *e);
    e->tasks = tasks;
}

void eval_tally_free(eval_tally_t *e)
{
    const tasks_t *tasks = e->tasks;
    free(e->types);
    eval_tally_init(e, tasks);
}

void eval_tally_add(eval_tally_t *e, const proto_result_t *r)
{
    const char *type = r->task ? tasks_type(e->tasks, r->task) : NULL;
    if (!type)
        type = "untyped";
    size_t k = 0;
    while (k < e->ntypes && strcmp(e->types[k].name, type) != 0)
        k++;
    if (k == e->ntypes) {
        e->types = sr_xrealloc(e->types, (e->ntypes + 1) * sizeof *e->types);
        memset(&e->types[k], 0, sizeof e->types[k]);
        snprintf(e->types[k].name, sizeof e->types[k].name, "%s", type);
        e->ntypes++;
    }
    e->types[k].n++;
    e->total++;
    if (r->status && strcmp(r->status, "failed") == 0)
        e->failed++;
    if (r->won) {
        e->types[k].won++;
        e->won++;
    }
}

int eval_tally_add_stored(const void *data, size_t len, void *arg)
{
    eval_tally_t *e = arg;
    proto_msg_t m;
    proto_err_t perr;
    if (proto_decode(data, len, &m, &perr) != SR_OK)
        return 0;
    if (m.type == PROTO_RESULT)
        eval_tally_add(e, &m.u.result);
    proto_msg_clear(&m);
    return 0;
}

double eval_tally_success(const eval_tally_t *e)
{
    return e->total ? (double)e->won / (double)e->total : 0.0;
}

void eval_tally_json(const eval_tally_t *e, cJSON *o)
{
    cJSON_AddNumberToObject(o, "tasks", e->total);
    cJSON_AddNumberToObject(o, "won", e->won);
    cJSON_AddNumberToObject(o, "failed", e->failed);
    cJSON_AddNumberToObject(o, "heldout_success", eval_tally_success(e));
    cJSON *pt = cJSON_AddObjectToObject(o, "per_type");
    for (size_t k = 0; k < e->ntypes; k++) {
        const eval_type_t *x0 = &e->types[k];
        cJSON *x = cJSON_AddObjectToObject(pt, x0->name);
        cJSON_AddNumberToObject(x, "tasks", x0->n);
        cJSON_AddNumberToObject(x, "won", x0->won);
        cJSON_AddNumberToObject(x, "success", (double)x0->won / (double)x0->n);
    }
}

size_t eval_tally_types(const eval_tally_t *e, char *line, size_t cap)
{
    size_t off = 0;
    if (cap)
        line[0] = '\0';
    for (size_t k = 0; k < e->ntypes; k++) {
        const eval_type_t *x = &e->types[k];
        if (off < cap)
            off += (size_t)snprintf(line + off, cap - off, " %s %d/%d", x->name, x->won, x->n);
    }
    return off < cap ? off : (cap ? cap - 1 : 0);
}
