/*
 * harness.h — what every cmocka test binary shares: a main that accepts a test-name filter
 * (argv[1] or SR_TEST_FILTER, glob as cmocka understands it), and a throwaway redis-server on a
 * free loopback port in a mktemp -d folder.
 */
#ifndef SR_TEST_HARNESS_H
#define SR_TEST_HARNESS_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <sys/types.h>

/* harness_run runs a cmocka group after applying the optional filter from argv[1]/SR_TEST_FILTER. */
int harness_run_(const char *name, const struct CMUnitTest *tests, size_t n, int argc, char **argv);
#define HARNESS_MAIN(name, tests) \
    int main(int argc, char **argv) { return harness_run_(name, tests, sizeof(tests) / sizeof((tests)[0]), argc, argv); }

typedef struct {
    pid_t pid;
    int port;
    char dir[256];
    char url[64]; /* redis://127.0.0.1:PORT */
} harness_redis_t;

/* harness_fixture reads tests/fixtures/<name> whole (heap, NUL-terminated, the caller frees it)
 * and its length into *len; the test fails when it cannot. */
char *harness_fixture(const char *name, size_t *len);

/* harness_free_port returns a TCP port on 127.0.0.1 that was free a moment ago (0 on failure). */
int harness_free_port(void);

/* harness_redis_start starts redis-server on a free loopback port in a new temporary folder and
 * waits until it answers PING (up to 10 s). Returns 0 on success. */
int harness_redis_start(harness_redis_t *r);

/* harness_redis_stop stops the server, waits for it and removes its folder. Safe to call twice. */
void harness_redis_stop(harness_redis_t *r);

/* harness_now_ms: monotonic milliseconds, for test timeouts. */
int64_t harness_now_ms(void);

/* HARNESS_SLOWDOWN multiplies a wall-time bound: 10 in a sanitizer build (make SANITIZE=...),
 * where instrumented code runs several times slower, else 1. */
#ifdef SELROLL_SANITIZE
#define HARNESS_SLOWDOWN 10.0
#else
#define HARNESS_SLOWDOWN 1.0
#endif

/* harness_reply_int returns the value of an integer reply of the store, INT64_MIN for anything
 * else (NULL included). */
#include "common/store.h"
static inline int64_t harness_reply_int(const store_reply_t *r)
{
    int64_t v = INT64_MIN;
    return store_reply_int(r, &v) ? v : INT64_MIN;
}

#endif
