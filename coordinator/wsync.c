/*
 * wsync.c — weight sync with inference servers (see wsync.h): one llm_client per server on the
 * coordinator's reactor, one load in flight, the version confirmed by all before it is published.
 */
#include "coordinator/wsync.h"

#include "common/jsonw.h"
#include "common/llm_client.h"
#include "common/log.h"
#include "common/reactor.h"
#include "common/sr.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    wsync_t *w;
    char *url;
    llm_client_t *llm;
    llm_request_t *req; /* the load in flight */
    int timer;
} s_server_t;

struct wsync {
    wsync_cfg_t cfg;
    char *lora_name;
    reactor_t *r;
    s_server_t *sv;
    size_t n;
    bool busy;
    size_t left; /* servers still to confirm */
    size_t unloading; /* unloads of old versions not answered yet */
    int64_t version;
    int64_t first; /* the first version loaded: older ones are not this coordinator's to unload */
    wsync_done_cb done;
    void *arg;
};

void wsync_name(const char *lora_name, int64_t version, char *buf, size_t n)
{
    const char *ph = strstr(lora_name, "{version}");
    if (!ph)
        snprintf(buf, n, "%s", lora_name);
    else
        snprintf(buf, n, "%.*s%lld%s", (int)(ph - lora_name), lora_name, (long long)version,
                 ph + strlen("{version}"));
}

char *wsync_request(wsync_mode_t mode, const char *lora_name, int64_t version, const char *path,
                    bool unload, const char **route)
{
    char name[512];
    wsync_name(lora_name ? lora_name : WSYNC_DEFAULT_LORA_NAME, version, name, sizeof name);
    sr_buf_t b = SR_BUF_INIT;
    jsonw_t jw;
    jsonw_init(&jw, &b);
    switch (mode) {
    case WSYNC_VLLM_LORA:
    case WSYNC_SGLANG_LORA:
        *route = mode == WSYNC_VLLM_LORA
                     ? (unload ? "/v1/unload_lora_adapter" : "/v1/load_lora_adapter")
                     : (unload ? "/unload_lora_adapter" : "/load_lora_adapter");
        jsonw_lit(&jw, "{\"lora_name\":");
        jsonw_str(&jw, name);
        if (!unload) {
            jsonw_lit(&jw, ",\"lora_path\":");
            jsonw_str(&jw, path ? path : "");
        }
        jsonw_lit(&jw, "}");
        break;
    case WSYNC_SGLANG_DISK:
        if (unload) {
            sr_buf_free(&b);
            return NULL;
        }
        *route = "/update_weights_from_disk";
        jsonw_lit(&jw, "{\"model_path\":");
        jsonw_str(&jw, path ? path : "");
        jsonw_lit(&jw, "}");
        break;
    default:
        sr_buf_free(&b);
        return NULL;
    }
    char *out = jsonw_finish(&jw);
    if (!out)
        sr_buf_free(&b);
    return out;
}

/* ---- the reactor hooks of one server's client ---------------------------------------------- */

static void s_fd_cb(reactor_t *r, int fd, int revents, void *arg)
{
    (void)r;
    s_server_t *sv = arg;
    llm_client_on_fd(sv->llm, fd, (revents & (REACTOR_READ | REACTOR_ERROR)) != 0,
                     (revents & REACTOR_WRITE) != 0);
}

static void s_watch(int fd, bool rd, bool wr, void *arg)
{
    s_server_t *sv = arg;
    int ev = (rd ? REACTOR_READ : 0) | (wr ? REACTOR_WRITE : 0);
    if (reactor_mod_fd(sv->w->r, fd, ev) == SR_ENOTFOUND)
        reactor_add_fd(sv->w->r, fd, ev, s_fd_cb, sv);
}

static void s_unwatch(int fd, void *arg)
{
    s_server_t *sv = arg;
    reactor_remove_fd(sv->w->r, fd);
}

static void s_timer_cb(reactor_t *r, int id, void *arg)
{
    (void)r;
    (void)id;
    s_server_t *sv = arg;
    sv->timer = 0;
    llm_client_on_timer(sv->llm);
}

static void s_set_timer(long ms, void *arg)
{
    s_server_t *sv = arg;
    if (sv->timer > 0)
        reactor_timer_cancel(sv->w->r, sv->timer);
    sv->timer = 0;
    if (ms >= 0)
        sv->timer = reactor_timer_add(sv->w->r, ms, 0, s_timer_cb, sv);
}

/* ---- loads ---------------------------------------------------------------------------------- */

static void s_abort_all(wsync_t *w)
{
    for (size_t i = 0; i < w->n; i++) {
        llm_request_abort(w->sv[i].req);
        w->sv[i].req = NULL;
    }
}

static void s_unload_done(const llm_response_t *resp, void *arg)
{
    s_server_t *sv = arg;
    if (sv->w->unloading > 0)
        sv->w->unloading--;
    if (resp->rc != SR_OK)
        log_warn("weights sync: %s did not unload an old version: %s", sv->url, resp->error);
}

static void s_finish(wsync_t *w, bool ok, const char *why)
{
    w->busy = false;
    wsync_done_cb done = w->done;
    void *arg = w->arg;
    w->done = NULL;
    if (done)
        done(ok, why, arg);
}

static void s_load_done(const llm_response_t *resp, void *arg)
{
    s_server_t *sv = arg;
    wsync_t *w = sv->w;
    sv->req = NULL;
    bool refused = resp->rc != SR_OK || strstr(resp->error, "\"success\": false") ||
                   strstr(resp->error, "\"success\":false");
    if (refused) {
        char why[768];
        snprintf(why, sizeof why, "weights sync: %s did not load version %lld: %s", sv->url,
                 (long long)w->version, resp->error);
        s_abort_all(w);
        s_finish(w, false, why);
        return;
    }
    log_info("weights sync: %s loaded version %lld (%d attempt%s)", sv->url, (long long)w->version,
             resp->attempts, resp->attempts == 1 ? "" : "s");
    if (--w->left > 0)
        return;
    int64_t old = w->version - w->cfg.keep_versions;
    if (w->first < 0)
        w->first = w->version;
    if (w->cfg.keep_versions > 0 && old >= w->first) {
        const char *route = NULL;
        char *body = wsync_request(w->cfg.mode, w->lora_name, old, NULL, true, &route);
        for (size_t i = 0; body && i < w->n; i++) {
            w->unloading++;
            if (!llm_client_post(w->sv[i].llm, route, body, s_unload_done, &w->sv[i])) {
                w->unloading--;
                log_warn("weights sync: cannot start the unload on %s", w->sv[i].url);
            }
        }
        free(body);
    }
    s_finish(w, true, NULL);
}

int wsync_load(wsync_t *w, int64_t version, const char *path, wsync_done_cb done, void *arg)
{
    if (!w || !path || !*path)
        return SR_EINVAL;
    if (w->busy)
        return SR_ECONFLICT;
    const char *route = NULL;
    char *body = wsync_request(w->cfg.mode, w->lora_name, version, path, false, &route);
    if (!body)
        return SR_EINVAL;
    w->busy = true;
    w->version = version;
    w->done = done;
    w->arg = arg;
    w->left = w->n;
    for (size_t i = 0; i < w->n; i++) {
        w->sv[i].req = llm_client_post(w->sv[i].llm, route, body, s_load_done, &w->sv[i]);
        if (!w->sv[i].req) {
            char why[640];
            snprintf(why, sizeof why, "weights sync: cannot start the request to %s", w->sv[i].url);
            s_abort_all(w);
            free(body);
            w->busy = false;
            w->done = NULL;
            log_error("%s", why);
            return SR_EIO;
        }
    }
    free(body);
    log_info("weights sync: asked %zu server%s to load version %lld from %s", w->n,
             w->n == 1 ? "" : "s", (long long)version, path);
    return SR_OK;
}

bool wsync_busy(const wsync_t *w)
{
    return w && (w->busy || w->unloading > 0);
}

/* ---- lifecycle ------------------------------------------------------------------------------ */

wsync_t *wsync_new(const wsync_cfg_t *cfg, reactor_t *r, char *err, size_t errlen)
{
    if (!cfg || cfg->mode == WSYNC_NONE || !r) {
        snprintf(err, errlen, "weights sync: no mode");
        return NULL;
    }
    if (cfg->n_servers == 0) {
        snprintf(err, errlen, "--weights-sync %s needs --policy-servers URL,...",
                 cfg->mode == WSYNC_VLLM_LORA     ? "vllm-lora"
                 : cfg->mode == WSYNC_SGLANG_LORA ? "sglang-lora"
                                                  : "sglang-disk");
        return NULL;
    }
    const char *name = cfg->lora_name ? cfg->lora_name : WSYNC_DEFAULT_LORA_NAME;
    if (cfg->mode != WSYNC_SGLANG_DISK && !strstr(name, "{version}")) {
        snprintf(err, errlen, "--lora-name '%s' has no {version}", name);
        return NULL;
    }
    wsync_t *w = sr_xcalloc(1, sizeof *w);
    w->cfg = *cfg;
    w->lora_name = sr_xstrdup(name);
    w->first = -1;
    w->r = r;
    w->sv = sr_xcalloc(cfg->n_servers, sizeof *w->sv);
    llm_io_hooks_t hooks = {.watch_fd = s_watch, .unwatch_fd = s_unwatch, .set_timer = s_set_timer};
    for (size_t i = 0; i < cfg->n_servers; i++) {
        s_server_t *sv = &w->sv[i];
        sv->w = w;
        sv->url = sr_xstrdup(cfg->servers[i]);
        llm_client_cfg_t lc = {.base_url = cfg->servers[i],
                               .timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms : 60000,
                               .max_retries = cfg->retries > 0 ? cfg->retries : -1};
        w->n = i + 1;
        char why[300];
        if (llm_url_check(cfg->servers[i], why, sizeof why) != SR_OK) {
            snprintf(err, errlen, "--policy-servers: %s", why);
            wsync_destroy(&w);
            return NULL;
        }
        if (!(sv->llm = llm_client_new(&lc, &hooks, sv))) {
            snprintf(err, errlen, "--policy-servers: '%s': libcurl cannot be set up", cfg->servers[i]);
            wsync_destroy(&w);
            return NULL;
        }
    }
    return w;
}

void wsync_destroy(wsync_t **wp)
{
    if (!wp || !*wp)
        return;
    wsync_t *w = *wp;
    for (size_t i = 0; i < w->n; i++) {
        llm_client_destroy(&w->sv[i].llm);
        if (w->sv[i].timer > 0)
            reactor_timer_cancel(w->r, w->sv[i].timer);
        free(w->sv[i].url);
    }
    free(w->sv);
    free(w->lora_name);
    free(w);
    *wp = NULL;
}
