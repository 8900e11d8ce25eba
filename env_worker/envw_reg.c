/*
 * envw_reg.c — the env worker's registry entry (see envw_int.h): requests to the store queue
 * (common/storeq.h). A timer on the loop builds the entry and submits it when the last one has
 * completed, so requests never pile up behind a stopped Redis; the completion, on the loop,
 * counts a failure, and stops the worker when Redis refuses the credentials before it ever
 * registered. The schema is envw_store.c's.
 */
#include "common/log.h"
#include "common/sr.h"
#include "common/store.h"
#include "common/storeq.h"
#include "env_worker/envw_int.h"
#include "env_worker/envw_store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---------------------------------------------------------------------------------------------
 * Registry: requests to the store thread (the schema is envw_store.c's)
 * ------------------------------------------------------------------------------------------- */

struct envw_reg {
    storeq_t *sq;
    int timer;
    bool inflight;   /* a registration was submitted and has not completed */
    bool failing;    /* the last registration failed (Redis unreachable): log the next success */
    bool registered; /* a registration succeeded once */
    char fatal[512]; /* Redis refused the credentials: why the loop stopped ("" if it did not) */
};

typedef struct {
    envw_t *w;
    envw_store_entry_t e; /* strings point into w, which outlives the request */
} s_reg_t;

/* s_register_work writes the entry on the store thread from the copy the loop made. */
static int s_register_work(store_t *st, void *arg, char *err)
{
    (void)err;
    s_reg_t *g = arg;
    if (!st)
        return SR_EREDIS;
    return envw_store_register(st, g->w->id, &g->e, 3 * g->w->heartbeat_ms);
}

/* s_refused says whether err is Redis's refusal of the credentials (NOAUTH, WRONGPASS...). */
static bool s_refused(const char *err)
{
    return !strncmp(err, STORE_ERR_AUTH, strlen(STORE_ERR_AUTH));
}

static void s_register_done(int rc, const char *err, void *arg)
{
    s_reg_t *g = arg;
    envw_t *w = g->w;
    struct envw_reg *reg = w->reg;
    free(g);
    reg->inflight = false;
    if (rc == SR_ECLOSED)
        return;
    if (rc != SR_OK && !reg->registered && s_refused(err)) {
        /* Credentials Redis refuses are a configuration error: they stop the worker, as a
         * malformed URL does, before it ever registered. */
        snprintf(reg->fatal, sizeof reg->fatal, "%s", err);
        reactor_stop(w->reactor);
        return;
    }
    if (rc != SR_OK) {
        metrics_counter_inc(w->m_registry_failures);
        log_warn_limited(1, "registry refresh failed: %s", err);
        reg->failing = true;
        return;
    }
    if (reg->failing) {
        reg->failing = false;
        log_info("registered in Redis as envw:%s", w->id);
    }
    reg->registered = true;
}

/* s_register submits the entry, unless the last one is still on its way. */
static void s_register(envw_t *w)
{
    struct envw_reg *reg = w->reg;
    if (!reg || !reg->sq || reg->inflight || reg->fatal[0])
        return;
    s_reg_t *g = sr_xcalloc(1, sizeof *g);
    g->w = w;
    g->e = (envw_store_entry_t){
        .endpoint = w->advertise,
        .host = w->host,
        .kind = w->kind,
        .version = SELROLL_VERSION,
        .capacity = w->capacity,
        .load = (int64_t)w->nsessions,
        .pid = (int64_t)getpid(),
        .step_latency_ms = w->step_latency_ms,
    };
    if (storeq_submit(reg->sq, s_register_work, s_register_done, g) != SR_OK) {
        free(g);
        return;
    }
    reg->inflight = true;
}

static void s_on_timer(reactor_t *r, int id, void *arg)
{
    (void)r;
    (void)id;
    s_register(arg);
}

static int s_unregister_work(store_t *st, void *arg, char *err)
{
    (void)err;
    envw_t *w = arg;
    return st ? envw_store_unregister(st, w->id) : SR_EREDIS;
}

static void s_unregister_done(int rc, const char *err, void *arg)
{
    (void)arg;
    if (rc != SR_OK)
        log_warn("could not unregister from Redis: %s", err);
}

/* envw_reg_stop deletes the entry after the loop ended: the last request, waited for (up to a
 * few Redis timeouts) since nothing else runs any more. A worker whose credentials Redis refused
 * has no entry to delete. */
void envw_reg_stop(envw_t *w)
{
    struct envw_reg *reg = w->reg;
    if (!reg || !reg->sq)
        return;
    if (reg->timer > 0) {
        reactor_timer_cancel(w->reactor, reg->timer);
        reg->timer = 0;
    }
    if (reg->fatal[0])
        return;
    if (storeq_submit(reg->sq, s_unregister_work, s_unregister_done, w) == SR_OK &&
        storeq_flush(reg->sq, 5000) != SR_OK)
        log_warn("could not unregister from Redis: it did not answer in 5 s");
}

int envw_reg_new(envw_t *w, const char *url, const char *run, char *err, size_t errlen)
{
    store_url_t u;
    if (store_parse_url(url, &u, err, errlen) != SR_OK)
        return SR_EINVAL;
    w->reg = sr_xcalloc(1, sizeof *w->reg);
    w->reg->sq = storeq_new(w->reactor, url, run, 2000, err, errlen);
    return w->reg->sq ? SR_OK : SR_EREDIS;
}

void envw_reg_start(envw_t *w)
{
    struct envw_reg *reg = w->reg;
    if (!reg)
        return;
    reg->fatal[0] = '\0';
    if (reg->sq) {
        s_register(w);
        reg->timer = reactor_timer_add(w->reactor, w->heartbeat_ms, w->heartbeat_ms, s_on_timer, w);
        if (reg->timer <= 0)
            log_error("cannot add the registry timer; the entry will expire");
    }
}

const char *envw_reg_error(const envw_t *w)
{
    return w && w->reg ? w->reg->fatal : "";
}

void envw_reg_destroy(envw_t *w)
{
    if (!w->reg)
        return;
    storeq_destroy(&w->reg->sq); /* may call s_register_done, which reads w->reg */
    free(w->reg);
    w->reg = NULL;
}
