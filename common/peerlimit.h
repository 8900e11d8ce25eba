/*
 * peerlimit.h — a per-peer limit on malformed messages for ROUTER sockets.
 *
 * A peer (a routing identity) that sends more than max_errors malformed messages within window_ms
 * is ignored for ban_ms: its messages are dropped unread and counted, with no reply. ZeroMQ offers
 * no way to close one peer's connection on a ROUTER socket, so ignoring it is how a process stops
 * spending work (decoding, logging, ERROR replies) on a peer that keeps sending garbage.
 *
 * The table is bounded: capacity entries in a hash table with a short probe; when every probed
 * slot is taken, the slot seen least recently is reused. Not thread-safe: one per reactor.
 */
#ifndef SR_PEERLIMIT_H
#define SR_PEERLIMIT_H

#include "common/metrics.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PEERLIMIT_DEFAULT_ERRORS 100
#define PEERLIMIT_DEFAULT_WINDOW_MS 10000
#define PEERLIMIT_DEFAULT_BAN_MS 30000
#define PEERLIMIT_DEFAULT_CAPACITY 4096

typedef struct peerlimit peerlimit_t;

/* peerlimit_new returns a limiter (max_errors >= 1 per window_ms, ban_ms, capacity peers tracked;
 * values <= 0 take the defaults above), or NULL when out of memory. */
peerlimit_t *peerlimit_new(int max_errors, int64_t window_ms, int64_t ban_ms, int capacity);

/* peerlimit_destroy frees p. Accepts NULL and *self_p == NULL; sets *self_p to NULL. */
void peerlimit_destroy(peerlimit_t **self_p);

/* peerlimit_blocked tells whether the peer id (idlen bytes) is ignored at now_ms; a blocked call
 * counts one dropped message. p NULL = never blocked. */
bool peerlimit_blocked(peerlimit_t *p, const void *id, size_t idlen, int64_t now_ms);

/* peerlimit_error records one malformed message from the peer at now_ms. Returns true when this
 * error crossed the limit and the peer is now ignored for ban_ms (counted as a ban). */
bool peerlimit_error(peerlimit_t *p, const void *id, size_t idlen, int64_t now_ms);

/* peerlimit_error_logged is peerlimit_error at now_ms for a receiver with the default limits:
 * when the peer is banned it also counts the ban in bans (may be NULL) and logs
 * "<prefix>ignoring a <peer> for 30 s after more than 100 malformed <what> in 10 s". */
bool peerlimit_error_logged(peerlimit_t *p, const void *id, size_t idlen, int64_t now_ms,
                            metrics_counter_t *bans, const char *prefix, const char *peer,
                            const char *what);

/* peerlimit_bans returns how many times a peer was banned; peerlimit_dropped how many messages
 * were dropped because their peer was banned. 0 for NULL. */
uint64_t peerlimit_bans(const peerlimit_t *p);
uint64_t peerlimit_dropped(const peerlimit_t *p);

#endif
