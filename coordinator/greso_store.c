/*
 * greso_store.c — GRESO state and prompt histories in Redis (see greso_store.h): the hash
 * selroll:<run>:greso is built and read here only; the histories go through common/store_prompt.h.
 * Only type conversions live here; the arithmetic is in greso.c.
 */
#include "coordinator/greso_store.h"

#include "common/sr.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* The GRESO state's key, under selroll:<run>: (this module's only own key). */
#define S_KEY "greso"

int greso_store_get(store_t *s, double *p_easy, double *p_hard, double *zv)
{
    char key[STORE_KEY_MAX];
    store_reply_t *r = NULL;
    if (!s || !p_easy || !p_hard)
        return SR_EINVAL;
    *p_easy = 0.5;
    *p_hard = 0.5;
    if (zv)
        *zv = 0.0;
    int rc = store_key(s, key, sizeof key, S_KEY);
    if (rc)
        return rc;
    if ((rc = store_command(s, STORE_IDEMPOTENT, &r, "HMGET %s p_easy p_hard zv", key)) != SR_OK)
        goto cleanup;
    if (store_reply_count(r) != 3) {
        store_set_err(s, "store: unexpected HMGET reply");
        rc = SR_EPROTO;
        goto cleanup;
    }
    const char *es = store_reply_at_str(r, 0, NULL), *hs = store_reply_at_str(r, 1, NULL);
    const char *zs = store_reply_at_str(r, 2, NULL);
    if (!es || !hs) {
        store_set_err(s, "store: greso state not set");
        rc = SR_ENOTFOUND;
        goto cleanup;
    }
    double e = 0, h = 0, z = 0;
    if (store_parse_double(es, &e) || store_parse_double(hs, &h) ||
        (zs && store_parse_double(zs, &z))) {
        store_set_err(s, "store: greso state is not numeric");
        rc = SR_EPROTO;
        goto cleanup;
    }
    *p_easy = e;
    *p_hard = h;
    if (zv)
        *zv = z;

cleanup:
    store_reply_free(r);
    return rc;
}

int greso_store_set(store_t *s, double p_easy, double p_hard, double zv)
{
    char key[STORE_KEY_MAX], e[40], h[40], z[40];
    if (!s)
        return SR_EINVAL;
    int rc = store_key(s, key, sizeof key, S_KEY);
    if (rc)
        return rc;
    snprintf(e, sizeof e, "%.17g", p_easy);
    snprintf(h, sizeof h, "%.17g", p_hard);
    snprintf(z, sizeof z, "%.17g", zv);
    return store_command(s, STORE_IDEMPOTENT, NULL, "HSET %s p_easy %s p_hard %s zv %s", key, e, h,
                         z);
}

int greso_store_load(greso_t *g, store_t *s)
{
    if (!g || !s)
        return SR_EINVAL;
    double pe = 0.0, ph = 0.0, zv = 0.0;
    int rc = greso_store_get(s, &pe, &ph, &zv);
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
    return greso_store_set(s, greso_p_easy(g), greso_p_hard(g), greso_zv_ratio(g));
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
