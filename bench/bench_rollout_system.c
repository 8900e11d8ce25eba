/*
 * bench_rollout_system.c — part two of `selroll bench rollout`: one case run through `selroll run`
 * (a private redis-server, env workers, the policy server, coordinator, gate and actors) in a
 * temporary folder, then measured from its results file (the interval between consecutive steps
 * of a trajectory, with and without the step's LLM call, the step rate over the middle 60% and
 * while rounds still had jobs, drain and gap per round, where the slots' time went over the middle
 * 60%) and its cpu.tsv (CPU and context switches per step by role).
 */
#include "bench/bench_rollout_int.h"

#include "common/clock.h"
#include "common/sr.h"
#include "tools/supervise.h"

#include <cjson/cJSON.h>
#include <ftw.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct {
    uint64_t key; /* hash of group and trajectory */
    int64_t step;
    int64_t t_us;
} s_rec_t;

typedef struct {
    s_rec_t *v;
    size_t n, cap;
} s_recs_t;

/* One round as its results file shows it (µs of wall time): its first trajectory's start (the
 * first step's ACTION less that call's latency), its last trajectory's start (after which no job
 * was left to hand out, and slots go idle one by one) and its last ACTION. */
typedef struct {
    int64_t start, last_start, end;
} s_round_t;

#define S_MAX_ROUNDS 64

/* A span of wall time (µs). */
typedef struct {
    int64_t a, b;
} s_span_t;

typedef struct {
    s_span_t *v;
    size_t n, cap;
} s_spans_t;

/* One trajectory as its results file shows it (µs): its first call's start (first step's t_ms
 * less its latency), its last step's t_ms, its wall_ms, and whether it ran to its end with every
 * call answered (then its slot was held from last - wall to last). */
typedef struct {
    int64_t first, last, wall;
    bool whole;
} s_traj_t;

/* The timeline of a run: every step's call, the spans between consecutive steps, the
 * trajectories. */
typedef struct {
    s_spans_t calls, between;
    s_traj_t *traj;
    size_t ntraj, captraj;
    size_t aborted;
} s_timeline_t;

static void s_span_push(s_spans_t *s, int64_t a, int64_t b)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 4096;
        s->v = sr_xrealloc(s->v, s->cap * sizeof *s->v);
    }
    s->v[s->n++] = (s_span_t){a, b};
}

static void s_timeline_free(s_timeline_t *t)
{
    free(t->calls.v);
    free(t->between.v);
    free(t->traj);
}

static int s_cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static int s_cmp_rec(const void *a, const void *b)
{
    const s_rec_t *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    if (x->step != y->step)
        return x->step < y->step ? -1 : 1;
    return x->t_us < y->t_us ? -1 : x->t_us > y->t_us;
}

static uint64_t s_hash(const char *s, int64_t traj)
{
    uint64_t h = 14695981039346656037ULL;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ULL;
    }
    h ^= (uint64_t)traj;
    h *= 1099511628211ULL;
    return h;
}

/* ---- part two: the system through `selroll run` ------------------------------------------- */

/* s_roles reads DIR/cpu.tsv (what `selroll run` reports of its children) and writes, per role
 * (a child's name less a trailing "-N"), its user + system CPU µs per step into out and its
 * context switches per step into csw_out; *orch gets the sum over every role but the policy
 * server (the orchestration a step costs), -1 without a cpu.tsv. */
static void s_roles(const char *dir, size_t actions, char *out, char *csw_out, size_t n,
                    double *orch)
{
    char path[600];
    snprintf(path, sizeof path, "%s/cpu.tsv", dir);
    FILE *f = fopen(path, "r");
    out[0] = '\0';
    csw_out[0] = '\0';
    *orch = -1;
    if (!f || actions == 0) {
        if (f)
            fclose(f);
        return;
    }
    char names[16][64];
    double us[16], cs[16];
    int k = 0;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        char name[64];
        long long u, sy, sw = 0;
        int restarts;
        int got = sscanf(line, "%63[^\t]\t%lld\t%lld\t%d\t%lld", name, &u, &sy, &restarts, &sw);
        if (got < 3)
            continue; /* the header */
        char *dash = strrchr(name, '-');
        if (dash && dash[1] && strspn(dash + 1, "0123456789") == strlen(dash + 1))
            *dash = '\0';
        int i = 0;
        while (i < k && strcmp(names[i], name) != 0)
            i++;
        if (i == k) {
            if (k == 16)
                continue;
            snprintf(names[k], sizeof names[k], "%s", name);
            us[k] = cs[k] = 0;
            k++;
        }
        us[i] += (double)(u + sy);
        cs[i] += (double)sw;
    }
    fclose(f);
    double sum = 0;
    for (int i = 0; i < k; i++)
        if (strcmp(names[i], "policy-server") != 0)
            sum += us[i];
    if (k > 0)
        *orch = sum / (double)actions;
    size_t len = 0, clen = 0;
    for (int i = 0; i < k && len < n && clen < n; i++) {
        len += (size_t)snprintf(out + len, n - len, "%s%s %.0f", i ? ", " : "", names[i],
                                us[i] / (double)actions);
        clen += (size_t)snprintf(csw_out + clen, n - clen, "%s%s %.2f", i ? ", " : "", names[i],
                                 cs[i] / (double)actions);
    }
}

/* br_cpu_ceiling returns the most steps/s this machine's cores could run at us_per_step of CPU a
 * step: the bound the CPU cost puts on any rate. */
double br_cpu_ceiling(double us_per_step)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    return us_per_step > 0 && cores > 0 ? (double)cores * 1e6 / us_per_step : 0;
}

static int s_rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void s_rec_push(s_recs_t *r, s_rec_t x)
{
    if (r->n == r->cap) {
        r->cap = r->cap ? r->cap * 2 : 4096;
        r->v = sr_xrealloc(r->v, r->cap * sizeof *r->v);
    }
    r->v[r->n++] = x;
}

/* s_results_read reads the steps of every round's results file: into recs the time each step's
 * ACTION was published, into lat its LLM call's latency (both keyed by trajectory hash and the
 * 1-based step number of the ACTION, t_us holding the wall time in µs or the latency in µs).
 * Returns the mean latency in ms, or -1 when there is none. */
static double s_results_read(const char *out_dir, s_recs_t *recs, s_recs_t *lat,
                             double *tokens_mean, s_round_t *rounds, int *n_rounds,
                             s_timeline_t *tl)
{
    *n_rounds = 0;
    double tok_sum = 0;
    size_t tok_n = 0;
    char pattern[600];
    snprintf(pattern, sizeof pattern, "%s/rounds/round-*.jsonl", out_dir);
    glob_t g;
    if (glob(pattern, 0, NULL, &g) != 0)
        return -1;
    double sum = 0;
    size_t n = 0;
    char *line = NULL;
    size_t cap = 0;
    for (size_t fi = 0; fi < g.gl_pathc; fi++) {
        FILE *f = fopen(g.gl_pathv[fi], "r");
        if (!f)
            continue;
        s_round_t rd = {INT64_MAX, INT64_MIN, INT64_MIN};
        while (getline(&line, &cap, f) > 0) {
            cJSON *j = cJSON_Parse(line);
            const cJSON *steps = j ? cJSON_GetObjectItemCaseSensitive(j, "steps") : NULL;
            const cJSON *grp = j ? cJSON_GetObjectItemCaseSensitive(j, "group") : NULL;
            const cJSON *traj = j ? cJSON_GetObjectItemCaseSensitive(j, "traj") : NULL;
            bool keyed = cJSON_IsString(grp) && cJSON_IsNumber(traj);
            const cJSON *status = j ? cJSON_GetObjectItemCaseSensitive(j, "status") : NULL;
            const cJSON *calls = j ? cJSON_GetObjectItemCaseSensitive(j, "llm_calls") : NULL;
            const cJSON *wall = j ? cJSON_GetObjectItemCaseSensitive(j, "wall_ms") : NULL;
            int64_t first = INT64_MIN, last = INT64_MIN, nst = 0;
            const cJSON *st;
            cJSON_ArrayForEach(st, steps)
            {
                const cJSON *l = cJSON_GetObjectItemCaseSensitive(st, "latency_ms");
                const cJSON *i = cJSON_GetObjectItemCaseSensitive(st, "i");
                const cJSON *t = cJSON_GetObjectItemCaseSensitive(st, "t_ms");
                const cJSON *ct = cJSON_GetObjectItemCaseSensitive(st, "completion_tokens");
                if (cJSON_IsNumber(ct)) {
                    tok_sum += ct->valuedouble;
                    tok_n++;
                }
                if (!cJSON_IsNumber(l))
                    continue;
                sum += l->valuedouble;
                n++;
                if (cJSON_IsNumber(t)) {
                    int64_t at = (int64_t)(t->valuedouble * 1000.0);
                    int64_t from = at - (int64_t)(l->valuedouble * 1000.0);
                    s_span_push(&tl->calls, from, at);
                    if (last != INT64_MIN)
                        s_span_push(&tl->between, last, from);
                    else
                        first = from;
                    last = at;
                    nst++;
                    if (st == steps->child) {
                        int64_t begun = at - (int64_t)(l->valuedouble * 1000.0);
                        rd.start = SR_MIN(rd.start, begun);
                        rd.last_start = SR_MAX(rd.last_start, begun);
                    }
                    rd.end = SR_MAX(rd.end, at);
                }
                if (!keyed || !cJSON_IsNumber(i))
                    continue;
                uint64_t key = s_hash(grp->valuestring, (int64_t)traj->valuedouble);
                int64_t step = (int64_t)i->valuedouble + 1;
                s_rec_push(lat, (s_rec_t){key, step, (int64_t)(l->valuedouble * 1000.0)});
                if (cJSON_IsNumber(t))
                    s_rec_push(recs, (s_rec_t){key, step, (int64_t)(t->valuedouble * 1000.0)});
            }
            if (first != INT64_MIN && cJSON_IsNumber(wall)) {
                int64_t aborted = cJSON_IsNumber(calls) ? (int64_t)calls->valuedouble - nst : 0;
                bool ended = cJSON_IsString(status) && (!strcmp(status->valuestring, "done") ||
                                                        !strcmp(status->valuestring, "truncated"));
                if (tl->ntraj == tl->captraj) {
                    tl->captraj = tl->captraj ? tl->captraj * 2 : 1024;
                    tl->traj = sr_xrealloc(tl->traj, tl->captraj * sizeof *tl->traj);
                }
                tl->traj[tl->ntraj++] = (s_traj_t){first, last,
                                                   (int64_t)(wall->valuedouble * 1000.0),
                                                   ended && aborted == 0};
                tl->aborted += aborted > 0 ? (size_t)aborted : 0;
            }
            cJSON_Delete(j);
        }
        fclose(f);
        if (rd.end > rd.start && *n_rounds < S_MAX_ROUNDS)
            rounds[(*n_rounds)++] = rd;
    }
    free(line);
    globfree(&g);
    *tokens_mean = tok_n ? tok_sum / (double)tok_n : 0;
    return n ? sum / (double)n : -1;
}

/* s_lat_of finds the LLM latency (µs) of the call that led to step `step` of trajectory `key` in
 * the sorted lat; -1 when unknown. */
static int64_t s_lat_of(const s_recs_t *lat, uint64_t key, int64_t step)
{
    size_t lo = 0, hi = lat->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const s_rec_t *r = &lat->v[mid];
        if (r->key < key || (r->key == key && r->step < step))
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < lat->n && lat->v[lo].key == key && lat->v[lo].step == step)
        return lat->v[lo].t_us;
    return -1;
}

static int s_cmp_round(const void *a, const void *b)
{
    const s_round_t *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

/* s_steady takes, from the sorted ACTION times ts, the step rate inside the rounds' windows from
 * their first start to their last start (a round's queue still held jobs, so a slot that freed
 * got the next at once), and the mean time per round from its last start to its last ACTION (the
 * drain, when slots go idle one by one) and from there to the next round's first start (the
 * coordinator closing one round and opening the next). */
static void s_steady(const int64_t *ts, size_t n, s_round_t *rounds, int nr, br_sys_t *out)
{
    qsort(rounds, (size_t)nr, sizeof *rounds, s_cmp_round);
    out->rounds = nr;
    double steps = 0, span = 0, drain = 0, gap = 0;
    for (int k = 0; k < nr; k++) {
        const s_round_t *rd = &rounds[k];
        size_t lo = 0, hi = n;
        while (lo < hi) { /* the first ACTION at or after the round's start */
            size_t mid = lo + (hi - lo) / 2;
            if (ts[mid] < rd->start)
                lo = mid + 1;
            else
                hi = mid;
        }
        for (size_t i = lo; i < n && ts[i] <= rd->last_start; i++)
            steps += 1;
        span += (double)(rd->last_start - rd->start);
        drain += (double)(rd->end - rd->last_start);
        if (k + 1 < nr)
            gap += (double)(rounds[k + 1].start - rd->end);
    }
    if (span > 0)
        out->steady_rate = steps / (span / 1e6);
    if (nr > 0)
        out->drain_ms = drain / nr / 1000.0;
    if (nr > 1)
        out->gap_ms = gap / (nr - 1) / 1000.0;
}

static int64_t s_overlap(int64_t a, int64_t b, int64_t w0, int64_t w1)
{
    int64_t lo = SR_MAX(a, w0), hi = SR_MIN(b, w1);
    return hi > lo ? hi - lo : 0;
}

/* s_spans_sum adds to *overlap the time of the spans inside [w0, w1] (µs), and to *whole and
 * *nwhole the length and number of the spans wholly inside it. */
static void s_spans_sum(const s_spans_t *s, int64_t w0, int64_t w1, double *overlap,
                        double *whole, size_t *nwhole)
{
    for (size_t i = 0; i < s->n; i++) {
        const s_span_t *c = &s->v[i];
        *overlap += (double)s_overlap(c->a, c->b, w0, w1);
        if (c->a >= w0 && c->b <= w1) {
            *whole += (double)(c->b - c->a);
            (*nwhole)++;
        }
    }
}

/* s_timeline sums, over the window [w0, w1] (µs), the slot time in calls, between steps and
 * inside trajectories (br_sys_t says how each is read from the results file). */
static void s_timeline(s_timeline_t *tl, int64_t w0, int64_t w1, br_sys_t *out)
{
    double call = 0, between = 0, traj = 0, in_sum = 0, bsum = 0;
    size_t in_n = 0, bn = 0, ends = 0;
    s_spans_sum(&tl->calls, w0, w1, &call, &in_sum, &in_n);
    s_spans_sum(&tl->between, w0, w1, &between, &bsum, &bn);
    /* the head (JOB to first call) of a trajectory that was not whole: the others' median */
    int64_t *heads = sr_xmalloc((tl->ntraj + 1) * sizeof *heads);
    size_t nh = 0;
    for (size_t i = 0; i < tl->ntraj; i++)
        if (tl->traj[i].whole)
            heads[nh++] = tl->traj[i].wall - (tl->traj[i].last - tl->traj[i].first);
    qsort(heads, nh, sizeof *heads, s_cmp_i64);
    int64_t head = nh ? heads[nh / 2] : 0;
    free(heads);
    for (size_t i = 0; i < tl->ntraj; i++) {
        const s_traj_t *t = &tl->traj[i];
        int64_t a = t->whole ? t->last - t->wall : t->first - head;
        int64_t b = a + t->wall;
        traj += (double)s_overlap(a, b, w0, w1);
        ends += b >= w0 && b <= w1;
    }
    out->win_s = (double)(w1 - w0) / 1e6;
    out->call_slot_s = call / 1e6;
    out->between_slot_s = between / 1e6;
    out->traj_slot_s = traj / 1e6;
    out->call_win_ms = in_n ? in_sum / (double)in_n / 1000.0 : 0;
    out->between_mean_ms = bn ? bsum / (double)bn / 1000.0 : 0;
    out->traj_ends = ends;
    out->aborted = tl->aborted;
}

static void s_stats(s_recs_t *r, s_recs_t *lat, s_round_t *rounds, int nr, s_timeline_t *tl,
                    br_sys_t *out)
{
    out->actions = r->n;
    if (r->n < 10)
        return;
    int64_t *ts = sr_xmalloc(r->n * sizeof *ts);
    for (size_t i = 0; i < r->n; i++)
        ts[i] = r->v[i].t_us;
    qsort(ts, r->n, sizeof *ts, s_cmp_i64);
    size_t lo = r->n / 5, hi = r->n * 4 / 5;
    if (ts[hi] > ts[lo]) {
        out->rate = (double)(hi - lo) / ((double)(ts[hi] - ts[lo]) / 1e6);
        s_timeline(tl, ts[lo], ts[hi], out);
    }
    s_steady(ts, r->n, rounds, nr, out);
    qsort(r->v, r->n, sizeof *r->v, s_cmp_rec);
    qsort(lat->v, lat->n, sizeof *lat->v, s_cmp_rec);
    int64_t *own = sr_xmalloc(r->n * sizeof *own);
    size_t ni = 0, no = 0;
    for (size_t i = 1; i < r->n; i++) {
        if (r->v[i].key == r->v[i - 1].key && r->v[i].step == r->v[i - 1].step + 1 &&
            r->v[i].t_us > r->v[i - 1].t_us) {
            int64_t d = r->v[i].t_us - r->v[i - 1].t_us;
            ts[ni++] = d;
            int64_t l = s_lat_of(lat, r->v[i].key, r->v[i].step);
            if (l >= 0)
                own[no++] = d > l ? d - l : 0;
        }
    }
    if (ni) {
        qsort(ts, ni, sizeof *ts, s_cmp_i64);
        out->step_med_ms = (double)ts[ni / 2] / 1000.0;
        out->step_p99_ms = (double)ts[SR_MIN(ni - 1, ni * 99 / 100)] / 1000.0;
    }
    if (no) {
        qsort(own, no, sizeof *own, s_cmp_i64);
        out->own_med_ms = (double)own[no / 2] / 1000.0;
        out->own_p99_ms = (double)own[SR_MIN(no - 1, no * 99 / 100)] / 1000.0;
    }
    free(own);
    free(ts);
}

/* The arguments every system case adds to its own (--local-env-workers N, --overlap off,
 * --action-batch-ms MS: two words each), NULL-terminated. */
const char *br_common[7];
int br_ncommon;

/* br_system runs `selroll run` with the extra arguments (and br_common's) and measures it from its
 * results. */
void br_system(const char *self, const char *label, const char *const *extra, br_sys_t *out)
{
    memset(out, 0, sizeof *out);
    out->orch_us_per_step = -1;
    char dir[] = "/tmp/selroll-bench-rollout-XXXXXX";
    if (!mkdtemp(dir))
        return;
    char logs[128];
    snprintf(logs, sizeof logs, "%s/logs", dir);
    supervise_t *sup = supervise_new(logs, NULL);
    const char *argv[64];
    int n = 0;
    argv[n++] = self;
    argv[n++] = "run";
    argv[n++] = "--out";
    argv[n++] = dir;
    argv[n++] = "--run";
    argv[n++] = label;
    for (int i = 0; extra[i] && n < 62; i++)
        argv[n++] = extra[i];
    for (int i = 0; br_common[i] && n < 62; i++)
        argv[n++] = br_common[i];
    argv[n] = NULL;
    s_recs_t recs = {0}, lat = {0};
    s_timeline_t tl = {0};
    int64_t t0 = clock_mono_ms();
    int64_t cpu0 = br_cpu_us(RUSAGE_CHILDREN);
    if (!sup || supervise_add(sup, "run", (char *const *)argv, false) != SR_OK)
        goto cleanup;
    for (;;) {
        supervise_poll(sup);
        if (supervise_pid(sup, "run") == 0)
            break;
        if (clock_mono_ms() - t0 > 600000) {
            supervise_stop(sup, "run", 5000);
            break;
        }
        clock_sleep_ms(50);
    }
    int st = supervise_last_status(sup, "run");
    out->ok = st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0;
    out->wall_s = (double)(clock_mono_ms() - t0) / 1000.0;
    s_round_t rounds[S_MAX_ROUNDS];
    int nr = 0;
    out->llm_mean_ms = s_results_read(dir, &recs, &lat, &out->tokens_mean, rounds, &nr, &tl);
    s_stats(&recs, &lat, rounds, nr, &tl, out);
    if (recs.n > 0)
        out->cpu_us_per_step = (double)(br_cpu_us(RUSAGE_CHILDREN) - cpu0) / (double)recs.n;
    s_roles(dir, recs.n, out->roles, out->csw, sizeof out->roles, &out->orch_us_per_step);
    if (!out->ok)
        fprintf(stderr, "bench rollout: %s: selroll run failed (logs in %s/logs kept)\n", label,
                dir);
cleanup:
    supervise_destroy(&sup);
    free(recs.v);
    free(lat.v);
    s_timeline_free(&tl);
    if (out->ok)
        nftw(dir, s_rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}
