/*
 * gate_svc.h — the gate as a service: the decision core (gate/gate.h) on a reactor, fed by the
 * bus and writing to Redis.
 *
 * The service learns the bus endpoints either directly (bus_sub / bus_pub) or from the
 * coordinator: it sends HELLO as role "gate" (0 slots) on a DEALER socket and takes bus_sub and
 * bus_pub from WELCOME; it then heartbeats at the WELCOME's interval and says HELLO again when
 * the coordinator answers ERROR unknown_actor (a restarted coordinator). With both, the bus is
 * joined at once from the given endpoints and the coordinator only sees the gate's liveness. It subscribes to
 * `act/<run>/`, decodes each ACTION and hands it to the core.
 *
 * Redis calls block, so they run on the process's store thread (common/storeq.h), each through
 * the gate's schema module (gate/gate_store.h, the only place that names its keys): the
 * reactor queues each decision (one per group, so the queue stays short), the writer records it
 * (enforce: store_group_cancel for a cancel, store_group_decide otherwise; shadow:
 * store_group_decide only; off: nothing) plus the fields gate_wall_ms, gate_mode and gate_reason
 * of the group hash, and hands the outcome back. The reactor publishes CANCEL on
 * `ctl/<run>/cancel` only for a cancel whose Redis transition succeeded — a group that finished
 * first is not cancelled, its decision is still recorded.
 *
 * Rules beyond the paper's (docs/gate.md): the writer also stores every rule's verdict (field
 * `rules` of the group hash), reads the prompt's history for the prior and learned rules when a
 * group is first seen (handed back to the core through the done queue), appends the learned
 * model's labelled examples to `gate:learned:examples` (loaded at start) and keeps the audit's
 * running figures in `gate:stats`; a keep-two CANCEL carries its `keep` list.
 *
 * Bad input from the bus or the coordinator (undecodable bytes, oversize fields, invalid
 * ACTIONs) is counted and logged at a limited rate; it never stops the service.
 */
#ifndef SR_GATE_SVC_H
#define SR_GATE_SVC_H

#include "common/metrics.h"
#include "gate/gate.h"

#include <stdint.h>

typedef struct {
    gate_cfg_t gate;          /* the decision core's configuration; gate.run is set from run */
    const char *run;          /* run id ("default") */
    const char *id;           /* identity on the work channel ("<host>-<pid>" when NULL) */
    const char *coordinator;  /* work endpoint (HELLO, heartbeats); NULL = none */
    const char *bus_sub;      /* SUB connects here (the proxy's XPUB side); NULL = from WELCOME */
    const char *bus_pub;      /* PUB connects here (the proxy's XSUB side); NULL = from WELCOME */
    const char *redis;        /* Redis URL; required unless the mode is off */
    int redis_timeout_ms;     /* per command (2000) */
    int heartbeat_ms;         /* until WELCOME says otherwise (1000) */
    int welcome_timeout_ms;   /* gate_svc_run fails when no WELCOME came in time; 0 = wait */
    int evict_every_ms;       /* how often idle groups are evicted (1000) */
} gate_svc_cfg_t;

/* Counters of the service; all of them are also in its metrics registry. */
typedef struct {
    uint64_t actions;          /* ACTIONs decoded from the bus */
    uint64_t bad_messages;     /* undecodable bus or work messages */
    uint64_t refused;          /* ACTIONs the core refused */
    uint64_t decisions;        /* decisions made */
    uint64_t recorded;         /* decisions written to Redis */
    uint64_t cancels_sent;     /* CANCELs published */
    uint64_t cancel_too_late;  /* cancel decisions for groups no longer running */
    uint64_t redis_errors;     /* writes that failed (unknown group included) */
    uint64_t welcomes;         /* WELCOMEs received */
    double cancel_latency_max_ms; /* deciding ACTION received -> CANCEL sent, the worst one */
} gate_svc_stats_t;

typedef struct gate_svc gate_svc_t;

/* gate_svc_cfg_init fills c with the defaults (the core's defaults, run "default", no endpoints).
 * c must not be NULL. */
void gate_svc_cfg_init(gate_svc_cfg_t *c);

/* gate_svc_new validates c (strings are copied), checks Redis unless the mode is off, creates
 * the sockets and connects them (the bus at once when bus_sub and bus_pub are given, else the
 * work DEALER to the coordinator). Nothing runs until gate_svc_run. Returns NULL with a one-line
 * reason in err (when err is not NULL) for a bad configuration (a malformed Redis URL included),
 * credentials Redis refuses or a socket failure. A Redis that does not answer yet is said once in
 * the log and does not stop the start: the gate joins the bus and decides, and its start-up
 * request and records reach Redis once it answers (gate_svc_run stops with SR_EREDIS if Redis
 * then refuses the credentials). The caller owns the service. */
gate_svc_t *gate_svc_new(const gate_svc_cfg_t *c, char *err, size_t errlen);

/* gate_svc_destroy stops the writer thread, closes the sockets and the Redis connection and
 * frees the service. Must not be called while gate_svc_run runs. Accepts NULL and a pointer to
 * NULL; sets *self_p to NULL. */
void gate_svc_destroy(gate_svc_t **self_p);

/* gate_svc_catch_signals makes SIGINT/SIGTERM stop gate_svc_run (for the command). */
int gate_svc_catch_signals(gate_svc_t *s);

/* gate_svc_run runs the reactor until gate_svc_stop or a caught signal. Returns SR_OK;
 * SR_ETIMEDOUT when welcome_timeout_ms passed without a WELCOME; SR_EREDIS when Redis, answering
 * for the first time, refused the credentials; another SR_E* when the reactor fails. The reason is in gate_svc_errstr. */
int gate_svc_run(gate_svc_t *s);

/* gate_svc_stop asks gate_svc_run to return. Thread-safe; s may be NULL. */
void gate_svc_stop(gate_svc_t *s);

/* gate_svc_errstr returns the last failure's text ("" if none). Owned by s. */
const char *gate_svc_errstr(const gate_svc_t *s);

/* gate_svc_stats copies the counters into *out; safe from any thread while the service runs. */
void gate_svc_stats(const gate_svc_t *s, gate_svc_stats_t *out);

/* gate_svc_metrics returns the service's metrics registry (owned by s). */
metrics_registry_t *gate_svc_metrics(gate_svc_t *s);

/* gate_svc_log_summary writes one log line with the counters (at shutdown); s may be NULL. */
void gate_svc_log_summary(const gate_svc_t *s);

#endif
