/*
 * ps_models.c — the policy server's models by version (ps_models.h): a list of referenced
 * models under a mutex, evicting the oldest unreferenced versions beyond PS_MAX_CACHED, and a
 * small ring of versions the source lacks or holds malformed.
 */
#include "policy/ps_models.h"

#include "common/clock.h"
#include "common/sr.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define S_NEG_CACHE 64    /* versions remembered as missing or malformed */
#define S_NEG_TTL_MS 1000 /* for this long: a request for them is answered without a fetch */

struct ps_mref {
    model_t *m;
    uint32_t version;
    int refs;
    struct ps_mref *next;
};

struct ps_models {
    pthread_mutex_t mu;
    wsource_t *source;
    ps_mref_t *models; /* newest first */
    ps_mref_t *current;
    struct {
        uint32_t version;
        int rc;
        int64_t until_ms;
    } neg[S_NEG_CACHE];
    int neg_next;
};

ps_models_t *ps_models_new(model_t *m0, wsource_t *source)
{
    ps_models_t *ms = sr_xcalloc(1, sizeof *ms);
    pthread_mutex_init(&ms->mu, NULL);
    ms->source = source;
    ms->models = sr_xcalloc(1, sizeof(*ms->models));
    ms->models->m = m0;
    ms->current = ms->models;
    return ms;
}

void ps_models_destroy(ps_models_t **mp)
{
    if (!mp || !*mp)
        return;
    ps_models_t *ms = *mp;
    while (ms->models) {
        ps_mref_t *n = ms->models->next;
        model_destroy(&ms->models->m);
        free(ms->models);
        ms->models = n;
    }
    pthread_mutex_destroy(&ms->mu);
    free(ms);
    *mp = NULL;
}

/* s_lookup_locked: ps_models_lookup with the mutex held. */
static int s_lookup_locked(ps_models_t *ms, bool use_current, uint32_t version, ps_mref_t **out)
{
    if (use_current) {
        ms->current->refs++;
        *out = ms->current;
        return SR_OK;
    }
    for (ps_mref_t *r = ms->models; r; r = r->next) {
        if (r->version == version) {
            r->refs++;
            *out = r;
            return SR_OK;
        }
    }
    if (!ms->source)
        return SR_ENOTFOUND;
    int64_t now = clock_mono_ms();
    for (int i = 0; i < S_NEG_CACHE; i++)
        if (ms->neg[i].until_ms > now && ms->neg[i].version == version)
            return ms->neg[i].rc;
    return SR_EAGAIN;
}

int ps_models_lookup(ps_models_t *ms, bool use_current, uint32_t version, ps_mref_t **out)
{
    pthread_mutex_lock(&ms->mu);
    int rc = s_lookup_locked(ms, use_current, version, out);
    pthread_mutex_unlock(&ms->mu);
    return rc;
}

/* s_insert_locked caches model m of version (or, when another load cached the version
 * meanwhile, frees m and takes that one) and returns it referenced. Mutex held. */
static void s_insert_locked(ps_models_t *ms, uint32_t version, model_t *m, ps_mref_t **out)
{
    for (ps_mref_t *x = ms->models; x; x = x->next) {
        if (x->version == version) {
            model_destroy(&m);
            x->refs++;
            *out = x;
            return;
        }
    }
    ps_mref_t *r = sr_xcalloc(1, sizeof(*r));
    r->m = m;
    r->version = version;
    r->next = ms->models;
    ms->models = r;
    /* Evict the oldest unreferenced versions beyond the cache size. */
    int n = 0;
    for (ps_mref_t **pp = &ms->models; *pp;) {
        ps_mref_t *x = *pp;
        if (++n > PS_MAX_CACHED && x->refs == 0 && x != ms->current && x->version != 0) {
            *pp = x->next;
            model_destroy(&x->m);
            free(x);
            continue;
        }
        pp = &x->next;
    }
    r->refs++;
    *out = r;
}

/* s_fetch fetches and decodes version from the source, without the mutex: a new model in *out,
 * or SR_ENOTFOUND, SR_EPROTO (malformed) or the source's error. */
static int s_fetch(ps_models_t *ms, uint32_t version, model_t **out)
{
    uint8_t *blob = NULL;
    size_t len = 0;
    model_t *m = NULL;
    int rc = wsource_fetch(ms->source, version, &blob, &len);
    if (rc == SR_OK) {
        char err[128];
        m = model_from_blob(blob, len, err, sizeof err);
        if (!m) {
            fprintf(stderr, "policy-server: weights of version %u refused: %s\n", version, err);
            rc = SR_EPROTO;
        } else {
            model_set_version(m, version);
        }
    }
    free(blob);
    *out = m;
    return rc;
}

/* s_settle_locked takes the outcome of a fetch: m cached and returned referenced, or a missing
 * or malformed version remembered for S_NEG_TTL_MS. Mutex held. */
static void s_settle_locked(ps_models_t *ms, uint32_t version, int rc, model_t *m,
                            ps_mref_t **out)
{
    if (rc == SR_OK) {
        s_insert_locked(ms, version, m, out);
    } else if (rc == SR_ENOTFOUND || rc == SR_EPROTO) {
        ms->neg[ms->neg_next].version = version;
        ms->neg[ms->neg_next].rc = rc;
        ms->neg[ms->neg_next].until_ms = clock_mono_ms() + S_NEG_TTL_MS;
        ms->neg_next = (ms->neg_next + 1) % S_NEG_CACHE;
    }
}

int ps_models_acquire(ps_models_t *ms, uint32_t version, ps_mref_t **out)
{
    int rc = ps_models_lookup(ms, false, version, out);
    if (rc != SR_EAGAIN)
        return rc;
    model_t *m = NULL;
    rc = s_fetch(ms, version, &m);
    pthread_mutex_lock(&ms->mu);
    s_settle_locked(ms, version, rc, m, out);
    pthread_mutex_unlock(&ms->mu);
    return rc;
}

void ps_models_put(ps_models_t *ms, ps_mref_t *r)
{
    pthread_mutex_lock(&ms->mu);
    r->refs--;
    pthread_mutex_unlock(&ms->mu);
}

void ps_models_serve(ps_models_t *ms, ps_mref_t *r)
{
    pthread_mutex_lock(&ms->mu);
    ms->current = r;
    r->refs--;
    pthread_mutex_unlock(&ms->mu);
}

uint32_t ps_models_current(ps_models_t *ms)
{
    pthread_mutex_lock(&ms->mu);
    uint32_t v = ms->current->version;
    pthread_mutex_unlock(&ms->mu);
    return v;
}

size_t ps_models_versions(ps_models_t *ms, uint32_t *out, size_t cap)
{
    size_t nv = 0;
    pthread_mutex_lock(&ms->mu);
    if (cap > 0)
        out[nv++] = ms->current->version;
    for (ps_mref_t *r = ms->models; r && nv < cap; r = r->next)
        if (r->version != ms->current->version)
            out[nv++] = r->version;
    pthread_mutex_unlock(&ms->mu);
    return nv;
}

const model_t *ps_mref_model(const ps_mref_t *r)
{
    return r->m;
}
