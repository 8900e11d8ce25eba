/*
 * status_cmd.c — entry point of `selroll status`: a terminal view of a run, read from Redis, for
 * machines without a browser.
 *
 * The coordinator's dashboard writes its latest snapshot to selroll:<run>:dashboard every second
 * (60 s expiry); status prints it as text: the run record, the groups in flight with one
 * character per trajectory, the d_K histogram, compute saved, the gate's figures (its rule, the
 * audit's precision estimate, the learned model's labels: read from gate:stats directly), actors,
 * env workers and the last iterations. A run without a fresh snapshot (its coordinator stopped, or runs without --http)
 * still gets what Redis itself holds: the run record, the current iteration's groups, the env
 * worker registry and the iteration records. --watch redraws every --interval-ms until Ctrl-C.
 */
#include "common/cfg.h"
#include "common/clock.h"
#include "common/cmds.h"
#include "common/sr.h"
#include "common/store.h"
#include "common/store_group.h"
#include "common/store_keys.h"
#include "common/store_reg.h"
#include "common/store_run.h"
#include "coordinator/coord_store.h"
#include "coordinator/dashboard_gate.h"
#include "coordinator/dashboard_store.h"

#include <cjson/cJSON.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t s_stop;

static void s_on_signal(int sig)
{
    (void)sig;
    s_stop = 1;
}

static double s_num(const cJSON *o, const char *k, double def)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(x) ? x->valuedouble : def;
}

static const char *s_str(const cJSON *o, const char *k, const char *def)
{
    const char *v = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, k));
    return v ? v : def;
}

/* s_run_field prints one field of the run record into buf ("-" when unset). */
static void s_run_field(store_t *st, const char *field, char *buf, size_t len)
{
    char *v = NULL;
    if (store_run_get(st, field, &v) == SR_OK && v)
        snprintf(buf, len, "%s", v);
    else
        snprintf(buf, len, "-");
    free(v);
}

static void s_print_groups(FILE *out, const cJSON *snap, int max_groups)
{
    const cJSON *c = cJSON_GetObjectItem(snap, "counts");
    const cJSON *sc = cJSON_GetObjectItem(snap, "scheduler");
    fprintf(out,
            "groups: %.0f running, %.0f cancelled, %.0f done, %.0f filtered (this round); run: "
            "%.0f skipped, %.0f cancelled, %.0f filtered\n",
            s_num(c, "running", 0), s_num(c, "cancelled", 0), s_num(c, "done", 0),
            s_num(c, "filtered", 0), s_num(c, "skipped_total", 0), s_num(c, "cancelled_total", 0),
            s_num(c, "filtered_total", 0));
    fprintf(out,
            "trajectories running %.0f, queued jobs %.0f, free slots %.0f, queued per free slot "
            "%.2f\n",
            s_num(c, "running_trajectories", 0), s_num(sc, "queued_jobs", 0),
            s_num(sc, "free_slots", 0), s_num(sc, "queued_jobs_per_free_slot", 0));
    const cJSON *groups = cJSON_GetObjectItem(snap, "groups");
    int n = cJSON_GetArraySize(groups), shown = 0;
    const cJSON *g;
    cJSON_ArrayForEach(g, groups)
    {
        if (shown >= max_groups)
            break;
        shown++;
        const cJSON *steps = cJSON_GetObjectItem(g, "steps");
        int maxs = 0;
        const cJSON *x;
        cJSON_ArrayForEach(x, steps) if (x->valueint > maxs) maxs = x->valueint;
        char mark[96] = "";
        const char *st = s_str(g, "st", "?");
        if (strcmp(st, "cancelled") == 0)
            snprintf(mark, sizeof mark, "CANCELLED K=%.0f d=%.3f", s_num(g, "k", -1),
                     s_num(g, "d", -1));
        else if (cJSON_GetObjectItem(g, "d"))
            snprintf(mark, sizeof mark, "%s K=%.0f d=%.3f",
                     cJSON_IsTrue(cJSON_GetObjectItem(g, "cut")) ? "would cut" : "kept",
                     s_num(g, "k", -1), s_num(g, "d", -1));
        fprintf(out, "  %-14s %-28.28s [%s] max step %3d  %-9s %s\n", s_str(g, "id", "?"),
                s_str(g, "task", ""), s_str(g, "lanes", ""), maxs, st, mark);
    }
    if (n > shown)
        fprintf(out, "  ... %d more groups\n", n - shown);
    fprintf(out, "  lanes: q queued, r running, d done, c cancelled, f failed\n");
}

static void s_print_hist(FILE *out, const cJSON *snap)
{
    const cJSON *h = cJSON_GetObjectItem(snap, "hist");
    const cJSON *bins = cJSON_GetObjectItem(h, "bins"), *cut = cJSON_GetObjectItem(h, "cut");
    int nb = cJSON_GetArraySize(bins);
    fprintf(out, "d_K histogram of this iteration: %.0f decisions, threshold d_L %.3f\n",
            s_num(h, "n", 0), s_num(h, "threshold", 0));
    int maxv = 1;
    for (int i = 0; i < nb; i++)
        if (cJSON_GetArrayItem(bins, i)->valueint > maxv)
            maxv = cJSON_GetArrayItem(bins, i)->valueint;
    double thr = s_num(h, "threshold", 0);
    for (int i = 0; i < nb; i++) {
        int v = cJSON_GetArrayItem(bins, i)->valueint;
        if (!v)
            continue;
        int cv = cut ? cJSON_GetArrayItem(cut, i)->valueint : 0;
        char bar[41];
        int w = v * 40 / maxv;
        memset(bar, '#', (size_t)w);
        bar[w] = '\0';
        double lo = (double)i / nb, hi = (double)(i + 1) / nb;
        fprintf(out, "  %.2f-%.2f%s %-40s %d (cut %d)\n", lo, hi, lo < thr ? "*" : " ", bar, v,
                cv);
    }
}

static void s_print_saved(FILE *out, const cJSON *snap)
{
    const cJSON *s = cJSON_GetObjectItem(snap, "saved");
    fprintf(out,
            "compute saved: ~%.0f LLM calls, ~%.0f tokens (estimate, %.0f cut groups, %.0f calls "
            "spent in them); shadow: %.0f calls after K in %.0f groups\n",
            s_num(s, "llm_calls_saved_est", 0), s_num(s, "tokens_saved_est", 0),
            s_num(s, "cancelled_groups", 0), s_num(s, "llm_calls_spent", 0),
            s_num(s, "llm_calls_saved_shadow", 0), s_num(s, "shadow_groups", 0));
}

static void s_print_pool(FILE *out, const cJSON *snap)
{
    const cJSON *a;
    fprintf(out, "actors:\n");
    cJSON_ArrayForEach(a, cJSON_GetObjectItem(snap, "actors"))
    fprintf(out, "  %-24s %-5s load %3.0f/%-3.0f free %3.0f  last heard %.1f s%s\n",
            s_str(a, "name", "?"), s_str(a, "role", "?"), s_num(a, "held", 0),
            s_num(a, "slots", 0), s_num(a, "credit", 0), s_num(a, "idle_ms", 0) / 1000.0,
            cJSON_IsTrue(cJSON_GetObjectItem(a, "draining")) ? " (draining)" : "");
    cJSON_ArrayForEach(a, cJSON_GetObjectItem(snap, "actors_lost"))
    fprintf(out, "  %-24s LOST %.0f s ago\n", s_str(a, "name", "?"), s_num(a, "ago_ms", 0) / 1000);
}

static void s_print_envw(FILE *out, const cJSON *list, const cJSON *lost)
{
    const cJSON *e;
    fprintf(out, "env workers:\n");
    cJSON_ArrayForEach(e, list)
    fprintf(out, "  %-24s %-28s sessions %.0f/%.0f%s%s\n", s_str(e, "id", "?"),
            s_str(e, "endpoint", ""), s_num(e, "load", 0), s_num(e, "capacity", 0),
            *s_str(e, "kind", "") ? "  kind " : "", s_str(e, "kind", ""));
    cJSON_ArrayForEach(e, lost)
    fprintf(out, "  %-24s LOST %.0f s ago\n", s_str(e, "name", "?"), s_num(e, "ago_ms", 0) / 1000);
}

static void s_print_iters(FILE *out, const cJSON *iters, int last)
{
    int n = cJSON_GetArraySize(iters);
    if (!n)
        return;
    fprintf(out, "iterations: %5s %7s %8s %7s %8s %7s\n", "it", "train", "held-out", "zv", "dilution",
            "wall s");
    for (int i = SR_MAX(0, n - last); i < n; i++) {
        const cJSON *r = cJSON_GetArrayItem(iters, i);
        char ho[16] = "-";
        if (cJSON_GetObjectItem(r, "heldout_success"))
            snprintf(ho, sizeof ho, "%.3f", s_num(r, "heldout_success", 0));
        fprintf(out, "            %5.0f %7.3f %8s %7.3f %8.3f %7.1f\n", s_num(r, "iteration", 0),
                s_num(r, "train_success", 0), ho, s_num(r, "zv_share", 0),
                s_num(r, "zero_adv_dilution", 0), s_num(r, "wall_ms", 0) / 1000.0);
    }
}

/* s_fallback_envw reads the env worker registry into a JSON array. */
static int s_envw_entry(const char *id, const store_field_t *f, size_t n, void *arg)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id);
    for (size_t i = 0; i < n; i++) {
        if (!strcmp(f[i].name, "endpoint") || !strcmp(f[i].name, "kind"))
            cJSON_AddStringToObject(o, f[i].name, f[i].value);
        else if (!strcmp(f[i].name, "capacity") || !strcmp(f[i].name, "load"))
            cJSON_AddNumberToObject(o, f[i].name, atof(f[i].value));
    }
    cJSON_AddItemToArray(arg, o);
    return 0;
}

typedef struct {
    FILE *out;
    store_t *st;
    int n;
    int counts[4];
} s_fb_t;

static int s_group_entry(const char *gid, void *arg)
{
    s_fb_t *fb = arg;
    store_group_t g;
    if (store_group_get(fb->st, gid, &g) != SR_OK)
        return 0;
    fb->counts[g.status < 4 ? g.status : 0]++;
    if (fb->n++ < 40)
        fprintf(fb->out, "  %-14s %-28.28s G=%-2d finished %2d  %-9s%s", gid, g.task, g.G,
                g.finished, store_group_status_name(g.status), g.gate_step >= 0 ? "" : "\n");
    if (fb->n <= 40 && g.gate_step >= 0)
        fprintf(fb->out, " %s K=%d d=%.3f\n", g.decision, g.gate_step, g.divergence);
    return 0;
}

static cJSON *s_iters_from_redis(store_t *st)
{
    cJSON *arr = cJSON_CreateArray();
    int64_t done = 0;
    if (store_run_get_int(st, "iterations_done", &done) != SR_OK)
        return arr;
    for (int64_t i = SR_MAX(0, done - 10); i < done; i++) {
        char *json = NULL;
        if (coord_store_record_get(st, COORD_RECORD_ITER, i, &json) != SR_OK)
            break;
        cJSON *o = json ? cJSON_Parse(json) : NULL;
        free(json);
        if (o)
            cJSON_AddItemToArray(arr, o);
    }
    return arr;
}

/* s_print_gate prints the gate's figures from gate:stats on one line (nothing on a Redis error:
 * the rest of the screen reports those). */
static void s_print_gate(FILE *out, store_t *st)
{
    dashboard_gate_t g;
    char line[320];
    if (dashboard_gate_read(st, &g) != SR_OK)
        return;
    dashboard_gate_text(&g, line, sizeof line);
    fprintf(out, "%s\n", line);
}

/* s_show prints one screen. Returns 0, or 1 when Redis failed or the run is unknown. */
static int s_show(FILE *out, store_t *st, const char *run, int max_groups)
{
    char status[64], iteration[32], policy[32], rounds[32], iters[32];
    char *probe = NULL;
    int rc = store_run_get(st, "status", &probe);
    free(probe);
    if (rc == SR_ENOTFOUND) {
        fprintf(out, "selroll status: no run '%s' in Redis\n", run);
        return 1;
    }
    if (rc != SR_OK) {
        fprintf(out, "selroll status: Redis: %s\n", store_errstr(st));
        return 1;
    }
    s_run_field(st, "status", status, sizeof status);
    s_run_field(st, "iteration", iteration, sizeof iteration);
    s_run_field(st, "policy_version", policy, sizeof policy);
    s_run_field(st, "rounds_done", rounds, sizeof rounds);
    s_run_field(st, "iterations_done", iters, sizeof iters);
    time_t now = (time_t)clock_wall_sec();
    char ts[32];
    strftime(ts, sizeof ts, "%Y-%m-%d %H:%M:%S", gmtime(&now));
    fprintf(out, "selroll status: run %s (%s), round %s, rounds done %s, iterations done %s, "
                 "policy v%s  [%s UTC]\n",
            run, status, iteration, rounds, iters, policy, ts);
    char *why = NULL;
    if (store_run_get(st, "error", &why) == SR_OK && why && why[0])
        fprintf(out, "the run failed: %s\n", why);
    free(why);

    char *snap_json = NULL;
    cJSON *snap = NULL;
    if (dashboard_store_snapshot_get(st, &snap_json) == SR_OK && snap_json)
        snap = cJSON_Parse(snap_json);
    free(snap_json);
    if (snap) {
        double age = ((double)now * 1000.0 - s_num(snap, "now_ms", 0)) / 1000.0;
        fprintf(out, "snapshot of the coordinator's dashboard, %.0f s old; iteration %.0f%s, "
                     "%.0f steps seen\n",
                age < 0 ? 0 : age, s_num(snap, "iteration", 0),
                cJSON_IsTrue(cJSON_GetObjectItem(snap, "eval")) ? " (held-out evaluation)" : "",
                s_num(snap, "actions_total", 0));
        s_print_groups(out, snap, max_groups);
        s_print_hist(out, snap);
        s_print_saved(out, snap);
        s_print_gate(out, st);
        s_print_pool(out, snap);
        s_print_envw(out, cJSON_GetObjectItem(snap, "env_workers"),
                     cJSON_GetObjectItem(snap, "env_workers_lost"));
        s_print_iters(out, cJSON_GetObjectItem(snap, "iterations"), 10);
        cJSON_Delete(snap);
        return 0;
    }
    fprintf(out, "no dashboard snapshot (the coordinator is gone, or runs with --http off): "
                 "what Redis holds\n");
    int64_t it = 0;
    store_run_get_int(st, "iteration", &it);
    s_fb_t fb = {.out = out, .st = st};
    fprintf(out, "groups of round %lld:\n", (long long)it);
    if (store_groups_of(st, it, s_group_entry, &fb) != SR_OK) {
        fprintf(out, "selroll status: Redis: %s\n", store_errstr(st));
        return 1;
    }
    fprintf(out, "groups: %d running, %d cancelled, %d done, %d filtered\n", fb.counts[0],
            fb.counts[1], fb.counts[2], fb.counts[3]);
    s_print_gate(out, st);
    cJSON *envw = cJSON_CreateArray();
    store_list(st, STORE_KIND_ENVW, s_envw_entry, envw);
    s_print_envw(out, envw, NULL);
    cJSON_Delete(envw);
    cJSON *iters_arr = s_iters_from_redis(st);
    s_print_iters(out, iters_arr, 10);
    cJSON_Delete(iters_arr);
    return 0;
}

int status_main(int argc, char **argv)
{
    static struct {
        char *redis, *run;
        bool watch;
        int64_t interval_ms;
        int groups;
    } o;
    memset(&o, 0, sizeof o);
    cfg_option_t opts[] = {
        {.name = "redis", .kind = CFG_STRING, .dst = &o.redis, .required = true, .metavar = "URL",
         .help = "Redis URL of the run"},
        {.name = "run", .kind = CFG_STRING, .dst = &o.run, .def = "default", .metavar = "ID",
         .help = "run id"},
        {.name = "watch", .kind = CFG_BOOL, .dst = &o.watch, .def = "false",
         .help = "redraw every --interval-ms until Ctrl-C"},
        {.name = "interval-ms", .kind = CFG_I64, .dst = &o.interval_ms, .def = "1000", .min = 100,
         .max = 3600000, .help = "--watch: redraw period"},
        {.name = "groups", .kind = CFG_INT, .dst = &o.groups, .def = "40", .min = 0,
         .max = 100000, .help = "groups listed at most"},
        {0},
    };
    cfg_t cfg = {.command = "status",
                 .summary = "Terminal view of a run from Redis: groups in flight with their lanes, "
                            "the d_K histogram, compute saved, actors, env workers, iterations.",
                 .options = opts};
    int rc = cfg_parse_command(&cfg, argc, argv);
    if (rc != CFG_GO_ON)
        return rc;
    int exit_code = 0;
    store_t *st = NULL;
    char err[512];
    if (store_connect(&st, o.redis, o.run, 2000, err, sizeof err) != SR_OK) {
        fprintf(stderr, "selroll status: %s\n", err);
        exit_code = 1;
        goto cleanup;
    }
    if (!o.watch) {
        exit_code = s_show(stdout, st, o.run, o.groups);
        goto cleanup;
    }
    sr_cmd_stop_t stop = {0};
    sr_cmd_catch_stop(&stop, s_on_signal);
    while (!s_stop) {
        char *text = NULL;
        size_t len = 0;
        FILE *mem = open_memstream(&text, &len);
        if (!mem) {
            exit_code = 1;
            break;
        }
        s_show(mem, st, o.run, o.groups);
        fclose(mem);
        fputs("\033[H\033[2J", stdout); /* home, clear: the screen is redrawn whole */
        fwrite(text, 1, len, stdout);
        fflush(stdout);
        free(text);
        for (int64_t waited = 0; waited < o.interval_ms && !s_stop; waited += 50)
            clock_sleep_ms(50);
    }
    sr_cmd_release_stop(&stop);

cleanup:
    store_destroy(&st);
    cfg_free(&cfg);
    return exit_code;
}
