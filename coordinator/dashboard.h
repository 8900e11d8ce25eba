/*
 * dashboard.h — the coordinator's operational HTTP face: the live dashboard page, its JSON
 * snapshot and event stream, Prometheus /metrics and /health.
 *
 *     dashboard_cfg_t dc;
 *     dashboard_cfg_init(&dc);
 *     dc.http = "127.0.0.1:8600";
 *     dashboard_t *d = dashboard_new(c, &dc, err, sizeof err); // after coord_new
 *     coord_run(c);                     // the dashboard's timer and bus socket run in c's reactor
 *     dashboard_destroy(&d);            // before coord_destroy: it closes a socket of c's context
 *     coord_destroy(&c);
 *
 * Everything the page shows is gathered on the coordinator's thread, from its scheduler (groups,
 * jobs, actors), from the bus (one SUB socket on act/<run>/ and ctl/<run>/cancel: each
 * trajectory's step, cancellations) and from Redis at most once a second, through the
 * coordinator's store thread (coord_storeq: the gate's decisions in the group records, env workers
 * in the registry, the training loop's iteration records), never on the loop itself. A timer
 * turns it into one JSON snapshot every period: that snapshot is published to the event stream,
 * kept for GET /api/state, and written to Redis (selroll:<run>:dashboard, 60 s expiry) for
 * `selroll status`. The HTTP threads only copy the latest snapshot under a mutex. docs/dashboard.md
 * describes the snapshot's fields and the metrics.
 */
#ifndef SR_DASHBOARD_H
#define SR_DASHBOARD_H

#include "coordinator/coord_results.h"
#include "coordinator/coordinator.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct dashboard dashboard_t;

typedef struct {
    const char *http;      /* "HOST:PORT" to serve on: "127.0.0.1:8600" */
    const char *token;     /* bearer token for every path but /health; NULL = none */
    double threshold;      /* the gate threshold drawn on the d_K histogram: 0.12 */
    int64_t period_ms;     /* snapshot period: 500 */
    int64_t redis_every_ms; /* how often Redis is read for decisions, registry, iterations: 1000 */
} dashboard_cfg_t;

/* dashboard_cfg_init fills cfg with the defaults listed beside each field. */
void dashboard_cfg_init(dashboard_cfg_t *cfg);

/* dashboard_new registers the coordinator-level gauges in c's registry, connects a SUB socket to
 * the bus, registers a timer with c's reactor and starts serving HTTP. c is borrowed and must
 * outlive the dashboard. Returns the dashboard, or NULL with a one-line reason in err (when not
 * NULL): a bad address, a port that cannot be bound, a bus that cannot be reached. */
dashboard_t *dashboard_new(coord_t *c, const dashboard_cfg_t *cfg, char *err, size_t errlen);

/* dashboard_on_round records the summary of a round that ended (call it from the coordinator's
 * per-round callback). Accepts NULL d. */
void dashboard_on_round(dashboard_t *d, const coord_round_summary_t *sum);

/* dashboard_port returns the HTTP port served (0 for NULL). */
int dashboard_port(const dashboard_t *d);

/* dashboard_snapshot_json returns a copy of the latest snapshot (caller frees), or NULL when
 * none was built yet. Thread-safe. */
char *dashboard_snapshot_json(dashboard_t *d);

/* dashboard_destroy stops the HTTP server, removes the timer and the socket from the reactor and
 * frees d. Call it while c still exists and coord_run is not running. Accepts NULL and
 * *self_p == NULL; sets *self_p to NULL. */
void dashboard_destroy(dashboard_t **self_p);

#endif
