/*
 * bench_env_int.h — the insides of `selroll bench env` shared by its files, private to bench/: a
 * session, the client, and the client's requests and session handling that the loops use.
 *
 * bench_env.c: the worker (a child process or a thread), the options, the levels run in turn and
 * the printed tables; bench_env_client.c: the client (its DEALER, RESET, STEP and CLOSE, sessions
 * opened and closed); bench_env_loops.c: the closed and the open loop and their latencies.
 */
#ifndef SR_BENCH_ENV_INT_H
#define SR_BENCH_ENV_INT_H

#include "bench/bench_env.h"
#include "common/prng.h"
#include "common/proto.h"
#include "common/sr_buf.h"
#include "common/transport.h"

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#define BE_MAX_SESSIONS 65536
#define BE_WAIT_MS 5000
#define BE_WAIT_NS ((int64_t)BE_WAIT_MS * 1000000)

typedef struct {
    char name[48];
    uint64_t rid;
    int64_t sent_ns;
    bool stepping;  /* the request in flight is a STEP (else a RESET or CLOSE) */
    bool in_flight; /* open loop: a request of this session awaits its reply */
    int64_t due_ns; /* open loop: when the next STEP is due */
    char action[PROTO_MAX_ACTION + 1]; /* open loop: the next STEP's action */
    prng_t rng;
} be_sess_t;

struct bench_env_client {
    void *ctx;
    transport_sock_t *sock;
    sr_buf_t buf;
    uint64_t task_counter;
    int level_counter; /* makes the session names of each level distinct */
    bool watch;          /* worker_clock is the worker's CPU-time clock */
    clockid_t worker_clock;
    char err[256];
};

/* bench_env_client.c */
/* be_send_reset and be_send_step send a session's RESET or STEP; 0 or an SR_E* code. */
int be_send_reset(bench_env_client_t *c, be_sess_t *s);
int be_send_step(bench_env_client_t *c, be_sess_t *s, const char *action);
/* be_recv receives one reply, waiting at most wait_ms (0: not at all), checks that it is an OBS
 * for a request in flight and returns its session in *out. SR_EAGAIN when nothing came. */
int be_recv(bench_env_client_t *c, proto_msg_t *m, be_sess_t *sess, int n, int wait_ms,
            be_sess_t **out);
/* be_next_action picks the session's next action from the OBS m into s->action and returns true,
 * or returns false when the episode is over (the session must be RESET). Clears m. */
bool be_next_action(be_sess_t *s, proto_msg_t *m);
/* be_sessions_new allocates n sessions named for this level, with their rid bases and streams. */
be_sess_t *be_sessions_new(bench_env_client_t *c, int n, uint64_t seed);
/* be_sessions_close sends CLOSE for every session (none may be in flight) and waits for the
 * replies. */
int be_sessions_close(bench_env_client_t *c, be_sess_t *sess, int n);
/* be_open_sessions RESETs every session and waits for all the replies, untimed; each session's
 * first action is then in s->action. */
int be_open_sessions(bench_env_client_t *c, be_sess_t *sess, int n);
/* be_worker_cpu_ns reads the worker's CPU-time clock (0 when the client watches none). */
int64_t be_worker_cpu_ns(const bench_env_client_t *c);
/* be_args_ok checks a loop's arguments: false, with "bad arguments" in the client's err, when
 * they are out of range. */
bool be_args_ok(bench_env_client_t *c, int sessions, double seconds, bench_env_level_t *out);

#endif
