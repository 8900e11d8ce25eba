/*
 * greso_store.c — GRESO state and prompt histories in Redis, through common/store.h (see
 * greso_store.h). Only type conversions live here; the arithmetic is in greso.c.
 */
#include "coordinator/greso_store.h"

#include "common/sr.h"

#include <math.h>
#include <stdlib.h>

int greso_store_load(greso_t *g, store_t *s)
{
    if (!g || !s)
        return SR_EINVAL;
    double pe = 0.0, ph = 0.0, zv = 0.0;
    int rc = store_greso_get(s, &pe, &ph, &zv);
    if (rc == SR_ENOTFOUND)
        return SR_OK;
    if (rc != SR_OK)
        return rc;
    greso_set_p(g, pe, ph);
    greso_set_zv_ratio(g, zv);
    return SR_OK;
}

int greso_store_save(const greso_t *g, store_t *s)
{
    if (!g || !s)
        return SR_EINVAL;
    return store_greso_set(s, greso_p_easy(g), greso_p_hard(g), greso_zv_ratio(g));
}

int greso_store_history(store_t *s, const char *task, greso_entry_t *out, size_t max, size_t *n)
{
    if (!s || !task || !n || (!out && max > 0))
        return SR_EINVAL;
    *n = 0;
    if (max == 0)
        return SR_OK;
    int rc = SR_OK;
    size_t got = 0;
    store_prompt_entry_t *tmp = calloc(max, sizeof *tmp);
    if (!tmp)
        return SR_ENOMEM;
    rc = store_prompt_history(s, task, tmp, max, &got);
    if (rc != SR_OK)
        goto cleanup;
    for (size_t i = 0; i < got && i < max; i++) {
        out[i].iteration = tmp[i].iteration;
        out[i].mean_reward = tmp[i].mean_reward;
    }
    *n = got < max ? got : max;
cleanup:
    free(tmp);
    return rc;
}

int greso_store_record(store_t *s, const char *task, int64_t iteration, double mean_reward)
{
    if (!s || !task || !isfinite(mean_reward))
        return SR_EINVAL;
    return store_prompt_push(s, task, iteration, mean_reward);
}
