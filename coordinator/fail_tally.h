/*
 * fail_tally.h — the failed trajectories of a round or an iteration, and the verdict that stops a
 * run in which too many of them failed ("runs that fail loudly", docs/operations.md).
 *
 * A tally counts the final failures (RESULT status "failed", after every attempt) and keeps the
 * error texts with their counts, so that the stop line can name the most frequent one:
 *
 *     iteration 0: 64 of 64 trajectories failed; most frequent error (64x): policy: HTTP 400: ...
 *
 * It is a plain value (no allocation): at most FAIL_TALLY_TEXTS distinct texts are kept, each cut
 * to its first line and FAIL_TALLY_TEXT_MAX - 1 bytes; failures whose text does not fit any more
 * still count in `failed`.
 */
#ifndef SR_FAILTALLY_H
#define SR_FAILTALLY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FAIL_TALLY_TEXTS 16
#define FAIL_TALLY_TEXT_MAX 240

typedef struct {
    int64_t failed; /* final failures counted */
    size_t n;       /* distinct texts kept */
    int64_t count[FAIL_TALLY_TEXTS];
    char text[FAIL_TALLY_TEXTS][FAIL_TALLY_TEXT_MAX];
} fail_tally_t;

/* fail_tally_reset empties t. */
void fail_tally_reset(fail_tally_t *t);

/* fail_tally_add counts one failure with its error text (NULL or empty = "no reason given"). */
void fail_tally_add(fail_tally_t *t, const char *error);

/* fail_tally_merge adds every failure and text of src to dst. */
void fail_tally_merge(fail_tally_t *dst, const fail_tally_t *src);

/* fail_tally_top returns the most frequent text (the first seen among equals) and its count in
 * *count (may be NULL), or NULL (count 0) when nothing failed. Valid while t is unchanged. */
const char *fail_tally_top(const fail_tally_t *t, int64_t *count);

/* fail_tally_trips tells whether `failed` of `total` trajectories stop the run: every one of them
 * failed, or more than max_share (0..1) of them did. Nothing trips when none failed. */
bool fail_tally_trips(int64_t failed, int64_t total, double max_share);

/* fail_tally_verdict writes the stop line "<what>: F of N trajectories failed; most frequent
 * error (Kx): TEXT" into buf (always NUL-terminated when len > 0) and returns true when
 * fail_tally_trips(t->failed, total, max_share); otherwise it writes nothing and returns false. */
bool fail_tally_verdict(const fail_tally_t *t, int64_t total, double max_share, const char *what,
                        char *buf, size_t len);

#endif
