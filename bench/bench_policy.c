/*
 * bench_policy.c — `selroll bench policy`: requests per second of the policy server with the cost
 * model off, and the client's overhead per request, on loopback.
 *
 * The server runs in this process (its own event loop, or --server-threads libmicrohttpd threads). Client threads each keep a few
 * requests in flight on a libcurl multi handle with keep-alive connections, as an actor does, and
 * re-issue each request as soon as it completes. A run lasts --seconds; the figures are medians
 * over --repeats runs: requests/s, round-trip latency percentiles, and the client's CPU time per
 * request (RUSAGE_THREAD of the client threads: what issuing and reading a request costs an actor).
 */
#include "bench/bench_policy.h"

#include "common/clock.h"
#include "common/cmds.h"
#include "common/sr.h"
#include "policy/policy_server.h"

#include <curl/curl.h>
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static const char S_BODY[] =
    "{\"model\":\"selroll-policy\",\"temperature\":0.7,\"logprobs\":true,\"messages\":["
    "{\"role\":\"system\",\"content\":\"You are an expert agent operating in the ALFRED embodied "
    "household "
    "environment.\"},"
    "{\"role\":\"user\",\"content\":\"Your task is to: put a clean lettuce in diningtable.\\nThis "
    "is the first "
    "step.\\nYou are now at step 1 and your current observation is: -= Welcome to TextWorld, "
    "ALFRED! =-\\n\\nYou "
    "are in the middle of a room. Looking quickly around you, you see a cabinet 3, a cabinet 2, a "
    "cabinet 1, a "
    "countertop 1, a diningtable 1, a drawer 1, a fridge 1, a microwave 1, a sinkbasin 1, and a "
    "toaster 1.\\n\\n"
    "Your task is to: put a clean lettuce in diningtable.\\nYour admissible actions of the current "
    "situation are: "
    "['go to cabinet 1', 'go to cabinet 2', 'go to cabinet 3', 'go to countertop 1', 'go to "
    "diningtable 1', 'go to "
    "drawer 1', 'go to fridge 1', 'go to microwave 1', 'go to sinkbasin 1', 'go to toaster 1', "
    "'inventory', "
    "'look'].\\n\\nNow it's your turn to take an action.\\nYou should first reason step-by-step "
    "about the current "
    "situation. This reasoning process MUST be enclosed within <think> </think> tags.\\nOnce "
    "you've finished your "
    "reasoning, you should choose an admissible action for current step and present it within "
    "<action> </action> "
    "tags.\"}]}";

typedef struct {
    int port;
    int inflight;
    double seconds;
    /* results */
    uint64_t done, failed;
    double *lat_us;
    size_t n_lat, cap_lat;
    double cpu_us;
} s_client_t;

static size_t s_sink(char *d, size_t sz, size_t nm, void *arg)
{
    (void)d;
    (void)arg;
    return sz * nm;
}

typedef struct {
    CURL *h;
    double t0;
} s_slot_t;

static void *s_client(void *arg)
{
    s_client_t *c = arg;
    CURLM *mh = curl_multi_init();
    s_slot_t *slots = sr_xcalloc((size_t)c->inflight, sizeof(*slots));
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/chat/completions", c->port);
    struct curl_slist *hd = curl_slist_append(NULL, "Content-Type: application/json");
    for (int i = 0; i < c->inflight; i++) {
        CURL *h = curl_easy_init();
        curl_easy_setopt(h, CURLOPT_URL, url);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, S_BODY);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, s_sink);
        curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(h, CURLOPT_PRIVATE, &slots[i]);
        slots[i].h = h;
    }
    struct rusage ru0, ru1;
    getrusage(RUSAGE_THREAD, &ru0);
    double end = clock_mono_sec() + c->seconds;
    for (int i = 0; i < c->inflight; i++) {
        slots[i].t0 = clock_mono_sec();
        curl_multi_add_handle(mh, slots[i].h);
    }
    int running = 1;
    while (running) {
        curl_multi_perform(mh, &running);
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(mh, &left))) {
            if (msg->msg != CURLMSG_DONE)
                continue;
            s_slot_t *sl;
            long status = 0;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&sl);
            curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &status);
            double t = clock_mono_sec();
            if (msg->data.result == CURLE_OK && status == 200) {
                c->done++;
                if (c->n_lat == c->cap_lat) {
                    c->cap_lat = c->cap_lat ? c->cap_lat * 2 : 4096;
                    c->lat_us = sr_xrealloc(c->lat_us, c->cap_lat * sizeof(double));
                }
                c->lat_us[c->n_lat++] = (t - sl->t0) * 1e6;
            } else {
                c->failed++;
            }
            curl_multi_remove_handle(mh, sl->h);
            if (t < end) {
                sl->t0 = t;
                curl_multi_add_handle(mh, sl->h);
                running = 1;
            }
        }
        if (running)
            curl_multi_poll(mh, NULL, 0, 100, NULL);
    }
    getrusage(RUSAGE_THREAD, &ru1);
    c->cpu_us = (double)(ru1.ru_utime.tv_sec - ru0.ru_utime.tv_sec + ru1.ru_stime.tv_sec -
                         ru0.ru_stime.tv_sec) *
                    1e6 +
                (double)(ru1.ru_utime.tv_usec - ru0.ru_utime.tv_usec + ru1.ru_stime.tv_usec -
                         ru0.ru_stime.tv_usec);
    for (int i = 0; i < c->inflight; i++)
        curl_easy_cleanup(slots[i].h);
    curl_slist_free_all(hd);
    curl_multi_cleanup(mh);
    free(slots);
    return NULL;
}

static int s_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double s_pct(double *v, size_t n, double q)
{
    if (!n)
        return 0;
    qsort(v, n, sizeof(double), s_cmp);
    size_t i = (size_t)(q * (double)(n - 1) + 0.5);
    return v[i];
}

int bench_policy_run(int argc, char **argv)
{
    int threads = 2, inflight = 4, repeats = 3, server_threads = 1;
    double seconds = 2;
    static const struct option longopts[] = {
        {"threads", required_argument, NULL, 't'},
        {"inflight", required_argument, NULL, 'c'},
        {"seconds", required_argument, NULL, 's'},
        {"repeats", required_argument, NULL, 'r'},
        {"server-threads", required_argument, NULL, 'w'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (opt) {
        case 't':
            if (!sr_cmd_int("bench policy", "--threads", optarg, &threads))
                return 2;
            break;
        case 'c':
            if (!sr_cmd_int("bench policy", "--inflight", optarg, &inflight))
                return 2;
            break;
        case 's':
            if (!sr_cmd_double("bench policy", "--seconds", optarg, &seconds))
                return 2;
            break;
        case 'r':
            if (!sr_cmd_int("bench policy", "--repeats", optarg, &repeats))
                return 2;
            break;
        case 'w':
            if (!sr_cmd_int("bench policy", "--server-threads", optarg, &server_threads))
                return 2;
            break;
        case 'h':
            printf("usage: selroll bench policy [--threads 2] [--inflight 4] [--seconds 2] "
                   "[--repeats 3] "
                   "[--server-threads 1]\n"
                   "Requests/s of the policy server (cost model off) on loopback, and client "
                   "overhead per request.\n");
            return 0;
        default:
            return 2;
        }
    }
    if (threads < 1 || inflight < 1 || repeats < 1 || !(seconds > 0) || server_threads < 1) {
        fprintf(stderr, "bench policy: bad options\n");
        return 2;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    policy_server_opts_t o;
    policy_server_opts_default(&o);
    o.port = 0;
    o.cost_model = false;
    o.threads = server_threads;
    char err[128];
    policy_server_t *srv = policy_server_new(&o, err, sizeof err);
    if (!srv) {
        fprintf(stderr, "bench policy: %s\n", err);
        curl_global_cleanup();
        return 1;
    }
    double *rps = sr_xcalloc((size_t)repeats, sizeof(double));
    double *p50 = sr_xcalloc((size_t)repeats, sizeof(double));
    double *p99 = sr_xcalloc((size_t)repeats, sizeof(double));
    double *cpu = sr_xcalloc((size_t)repeats, sizeof(double));
    int code = 0;
    printf("bench policy: %d client thread(s) x %d in flight, %d server thread(s), %.1f s x %d "
           "run(s)\n",
           threads, inflight, server_threads, seconds, repeats);
    for (int r = 0; r < repeats; r++) {
        s_client_t *cl = sr_xcalloc((size_t)threads, sizeof(*cl));
        pthread_t *tid = sr_xcalloc((size_t)threads, sizeof(*tid));
        double t0 = clock_mono_sec();
        for (int i = 0; i < threads; i++) {
            cl[i] = (s_client_t){
                .port = policy_server_port(srv), .inflight = inflight, .seconds = seconds};
            pthread_create(&tid[i], NULL, s_client, &cl[i]);
        }
        uint64_t done = 0, failed = 0;
        size_t n = 0;
        double cpu_us = 0;
        for (int i = 0; i < threads; i++) {
            pthread_join(tid[i], NULL);
            done += cl[i].done;
            failed += cl[i].failed;
            n += cl[i].n_lat;
            cpu_us += cl[i].cpu_us;
        }
        double wall = clock_mono_sec() - t0;
        double *all = sr_xmalloc((n ? n : 1) * sizeof(double));
        size_t k = 0;
        for (int i = 0; i < threads; i++) {
            memcpy(all + k, cl[i].lat_us, cl[i].n_lat * sizeof(double));
            k += cl[i].n_lat;
            free(cl[i].lat_us);
        }
        rps[r] = (double)done / wall;
        p50[r] = s_pct(all, n, 0.5);
        p99[r] = s_pct(all, n, 0.99);
        cpu[r] = done ? cpu_us / (double)done : 0;
        printf("  run %d: %llu ok, %llu failed, %.0f requests/s, latency p50 %.0f us p99 %.0f us, "
               "client CPU %.1f "
               "us/request\n",
               r + 1, (unsigned long long)done, (unsigned long long)failed, rps[r], p50[r], p99[r],
               cpu[r]);
        if (failed)
            code = 1;
        free(all);
        free(cl);
        free(tid);
    }
    double m_rps = s_pct(rps, (size_t)repeats, 0.5), m_p50 = s_pct(p50, (size_t)repeats, 0.5),
           m_p99 = s_pct(p99, (size_t)repeats, 0.5), m_cpu = s_pct(cpu, (size_t)repeats, 0.5);
    printf("policy: median %.0f requests/s (target >= 2000), latency p50 %.0f us, p99 %.0f us, "
           "client overhead %.1f "
           "us CPU per request\n",
           m_rps, m_p50, m_p99, m_cpu);
    free(rps);
    free(p50);
    free(p99);
    free(cpu);
    policy_server_destroy(&srv);
    curl_global_cleanup();
    return code;
}
