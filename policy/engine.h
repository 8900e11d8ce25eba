/*
 * engine.h — the policy server's cost model: an LLM inference engine in miniature.
 *
 * Each request first prefills its prompt, then decodes its generated tokens. Admitted ("running")
 * requests, at most max_batch of them, share the capacities of one accelerator: prefilling
 * requests split prefill_tps evenly, decoding requests split decode_tps evenly, and no sequence
 * decodes faster than max_seq_tps (the memory-bound speed of a single stream). Requests beyond the
 * batch wait in a FIFO queue of at most max_queue; beyond that, submission fails with SR_EFULL.
 * Between events all rates are constant, so the engine advances exactly from event to event (a
 * request finishing its prefill or its decode); simulated time runs time_scale times faster than
 * the wall clock. An aborted request leaves at once and frees its share; the tokens it had
 * generated are counted as aborted, apart from the tokens of completed requests.
 *
 * With a thread (engine_new), the engine runs on the wall clock and calls each request's callback
 * from its own thread when it completes. With manual time (engine_new_manual), nothing runs by
 * itself: engine_advance moves simulated time forward and calls the callbacks inline — this is how
 * the unit tests check the model against analytic makespans exactly, and how the policy server's
 * single event loop drives it (engine_wall_now, engine_next_event) with no thread of its own.
 */
#ifndef SR_POLICY_ENGINE_H
#define SR_POLICY_ENGINE_H

#include <stdint.h>

typedef struct engine engine_t;

typedef struct {
    double decode_tps;  /* decode capacity shared by the running batch, tokens/s */
    double max_seq_tps; /* the fastest one sequence decodes, tokens/s */
    double prefill_tps; /* prefill capacity shared by the requests prefilling, prompt tokens/s */
    int max_batch;      /* running requests at most; the rest queue */
    int max_queue;      /* queued requests at most; beyond, engine_submit says SR_EFULL */
    double time_scale;  /* simulated seconds per wall second (> 0); 100 makes tests 100x faster */
} engine_opts_t;

/* What a request's callback learns. Times are simulated seconds since the engine started. */
typedef struct {
    uint64_t id;
    double t_submit;
    double t_start; /* admitted to the running batch */
    double t_end;   /* completed */
    int gen_tokens;
} engine_done_t;

/* engine_done_fn is called once for each request that completes (never for an aborted one), from
 * the engine's thread or from engine_advance. It must not call back into the engine. */
typedef void (*engine_done_fn)(void *arg, const engine_done_t *done);

typedef struct {
    uint64_t submitted, completed, aborted, rejected;
    uint64_t tokens_generated; /* by completed requests */
    uint64_t tokens_aborted;   /* decoded by requests before they were aborted */
    uint64_t prompt_tokens;
    int running, queued;
    double now; /* simulated seconds */
} engine_stats_t;

/* engine_opts_default fills o with the documented defaults (a 7B model on one GPU, docs/policy.md).
 */
void engine_opts_default(engine_opts_t *o);

/* engine_new starts an engine driven by the wall clock on its own thread. Returns NULL for bad
 * options (non-positive rates, batch or scale; negative queue) or when resources are exhausted. */
engine_t *engine_new(const engine_opts_t *o);

/* engine_new_manual returns an engine whose simulated time moves only through engine_advance. */
engine_t *engine_new_manual(const engine_opts_t *o);

/* engine_destroy stops the thread (if any), runs the callbacks of requests that have completed
 * but not been delivered yet, drops queued and running requests without calling their callbacks,
 * frees *ep and sets it to NULL. NULL or *ep == NULL is a no-op. */
void engine_destroy(engine_t **ep);

/* engine_submit enqueues a request of prompt_tokens to prefill and gen_tokens to generate; fn(arg,
 * ...) is called when it completes. *id_out (may be NULL) receives its id (never 0). Returns 0,
 * SR_EFULL when the queue is full, SR_EINVAL for negative token counts or a NULL fn. */
int engine_submit(engine_t *e, int prompt_tokens, int gen_tokens, engine_done_fn fn, void *arg,
                  uint64_t *id_out);

/* engine_abort removes a request, queued or running, at once; its callback will not be called.
 * Returns 0, or SR_ENOTFOUND when the request is unknown or has already completed (its callback
 * has then been called or is being called). */
int engine_abort(engine_t *e, uint64_t id);

/* engine_advance (manual engines only) moves simulated time to t (seconds; never backwards),
 * completing requests on the way. Returns 0, SR_EINVAL on a threaded engine. */
int engine_advance(engine_t *e, double t);

/* engine_next_event returns the simulated time of the next completion or prefill end, or a
 * negative number when nothing is running. */
double engine_next_event(engine_t *e);

/* engine_wall_now returns the simulated time the wall clock has reached since the engine started
 * (seconds at time_scale): what a manual engine driven by the wall clock passes to engine_advance.
 */
double engine_wall_now(engine_t *e);

/* engine_sim_at returns the simulated time of the monotonic instant mono_ns (clock_mono_ns): what
 * engine_wall_now returned, or will return, at that instant. */
double engine_sim_at(const engine_t *e, int64_t mono_ns);

/* engine_time_scale returns the engine's simulated seconds per wall second. */
double engine_time_scale(const engine_t *e);

/* engine_stats copies the counters. */
void engine_stats(engine_t *e, engine_stats_t *out);

#endif
