/*
 * reactor_int.h — the insides the reactor's files share (reactor.c, the loop, and
 * reactor_timer.c, its timers) and nothing else includes: the registration and timer entries and
 * the reactor struct.
 */
#ifndef SR_REACTOR_INT_H
#define SR_REACTOR_INT_H

#include "common/reactor.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/epoll.h>

enum { REACTOR_ZSOCK, REACTOR_FD };

typedef struct reactor_item {
    int kind;
    void *sock;
    int fd;  /* a plain fd, or a ZeroMQ socket's ZMQ_FD */
    int events;
    int pending; /* a ZeroMQ socket to ask ZMQ_EVENTS before the next wait */
    reactor_zsock_fn *zcb;
    reactor_fd_fn *fcb;
    void *arg;
    int removed;
    /* during a call of its handler: it received through transport (rx_seen), its latest
     * receive, with no send after it, found nothing (rx_empty), a receive failed (rx_failed) */
    int rx_seen, rx_empty, rx_failed;
    /* a removed fd's entry, in the list freed at the end of a round */
    struct reactor_item *next_dead;
} reactor_item_t;

typedef struct reactor_tmr {
    int id;
    int64_t deadline;
    uint64_t seq;
    int64_t repeat;
    reactor_timer_fn *cb;
    void *arg;
    size_t heap_idx;
    struct reactor_tmr *hnext;
} reactor_tmr_t;

struct reactor {
    reactor_item_t **items; /* the ZeroMQ sockets */
    size_t nitems, items_cap;
    int dirty; /* some are marked removed: compact at the end of the round */
    int epfd;
    reactor_item_t **byfd; /* fd -> its live registration */
    size_t nbyfd;
    reactor_item_t *dead; /* removed fds' entries, freed at the end of the round */
    struct epoll_event evs[256];

    reactor_tmr_t **heap;
    size_t nheap, heap_cap;
    reactor_tmr_t **buckets;
    size_t nbuckets;
    int next_id;
    uint64_t next_seq;
    reactor_tmr_t *firing;    /* repeating timer whose callback is running */
    reactor_tmr_t *spare;     /* finished timers' memory for the next ones (through hnext) */
    size_t nspare;
    int firing_cancelled; /* ... and it was cancelled meanwhile: free it afterwards */

    reactor_hook_fn *before_sleep;
    void *before_sleep_arg;
    struct reactor_deferred {
        reactor_hook_fn *cb;
        void *arg;
    } *deferred; /* reactor_defer: run before the coming wait, or before reactor_run returns */
    size_t ndeferred, deferred_cap;
    int64_t wait_cap_ns; /* reactor_wait_at_most_ns for the coming wait, or -1 */
    int budget;
    reactor_item_t *cur; /* the ZeroMQ socket whose handler runs now, or NULL */

    int wake_rd, wake_wr;
    atomic_int stop_requested;
    atomic_int signo;
    int running;
    int catching;
    int64_t now;
};

/* reactor_fire_timers runs the timers due now that existed when this round began
 * (reactor_timer.c); the loop calls it once a round. */
void reactor_fire_timers(reactor_t *r);

/* reactor_timers_free_spare frees the memory of finished timers kept for the next ones. */
void reactor_timers_free_spare(reactor_t *r);

#endif
