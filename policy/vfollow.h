/*
 * vfollow.h — the policy server follows the run's POLICY_VERSION messages on the bus.
 *
 * A SUB socket on the bus (the coordinator's subscriber endpoint, DESIGN §2) subscribed to
 * "ctl/<run>/policy". Every POLICY_VERSION of that run asks for its version to become the one
 * the server serves under the plain model name (policy_server_set_version_async: the weights are
 * loaded on the server's store thread, and the follower never waits for them). Bad messages are
 * counted and skipped; a version the source does not have is counted when its load ends and the
 * served version stays as it was. The owner polls it from its loop (the process's reactor).
 */
#ifndef SR_POLICY_VFOLLOW_H
#define SR_POLICY_VFOLLOW_H

#include "policy/policy_server.h"

#include <stdint.h>

typedef struct vfollow vfollow_t;

typedef struct {
    uint64_t applied; /* versions switched to */
    uint64_t refused; /* POLICY_VERSION messages whose version could not be loaded */
    uint64_t bad;     /* undecodable messages, other types, other runs */
} vfollow_stats_t;

/* vfollow_new connects a SUB socket in zmq_ctx to endpoint and subscribes to run's policy topic.
 * srv is borrowed and must outlive the follower. Returns NULL with a reason in err (errlen bytes)
 * for a bad endpoint or run, or when the socket cannot be made. */
vfollow_t *vfollow_new(policy_server_t *srv, void *zmq_ctx, const char *endpoint, const char *run,
                       char *err, size_t errlen);

/* vfollow_poll waits up to wait_ms (0 = not at all, -1 = forever) for one message and asks for
 * its version, without waiting for the load. Returns 1 when a switch of the served version
 * completed since the last call, 0 otherwise, or a negative SR_E* code when the socket failed. */
int vfollow_poll(vfollow_t *f, int wait_ms);

/* vfollow_zsock returns the SUB socket, for a reactor to watch (REACTOR_READ; its handler calls
 * vfollow_poll(f, 0), one message a call). */
void *vfollow_zsock(const vfollow_t *f);

/* vfollow_stats copies the counters. */
void vfollow_stats(const vfollow_t *f, vfollow_stats_t *out);

/* vfollow_destroy closes the socket, frees *fp and sets it to NULL; NULL is a no-op. Switches
 * still in flight complete on the server as asked (their counters are freed with the last). */
void vfollow_destroy(vfollow_t **fp);

#endif
