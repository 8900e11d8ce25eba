/*
 * supervise.h — child processes for the one-machine launcher (`selroll run`): spawn a program
 * with its argv, send its stdout and stderr to a log file of its own, restart it with
 * exponential back-off when it crashes, stop everything gracefully.
 *
 * Each child is known by a unique name ("actor-1", "gate"); its output goes to
 * <log_dir>/<name>.log, appended across restarts. A child "crashes" when it is killed by a
 * signal or exits with a non-zero status; a child that exits 0 has finished and stays down.
 * After a crash a restartable child comes back after the current back-off, which starts at
 * backoff_min_ms and doubles up to backoff_max_ms; a child that ran for stable_ms before it
 * crashed starts again from the minimum. Every crash and restart is logged.
 *
 * Children are put in their own process group (a terminal's Ctrl-C reaches only the launcher,
 * which stops them in order) and get SIGTERM if the launcher dies (PR_SET_PDEATHSIG), so no
 * orphan outlives a killed launcher.
 *
 * The supervisor does not install signal handlers and never blocks except in supervise_stop*:
 * the caller calls supervise_poll regularly (every 50-200 ms) to reap and restart.
 */
#ifndef SR_SUPERVISE_H
#define SR_SUPERVISE_H

#include "common/cmds.h"
#include "common/sr.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

typedef struct {
    int64_t backoff_min_ms; /* first restart delay (200) */
    int64_t backoff_max_ms; /* ceiling of the doubling (5000) */
    int64_t stable_ms;      /* a run this long resets the back-off (10000) */
    int max_restarts;       /* per child; < 0 = unlimited (-1) */
} supervise_opts_t;

typedef struct supervise supervise_t;

/* supervise_opts_init fills o with the defaults above. */
void supervise_opts_init(supervise_opts_t *o);

/* supervise_new returns a supervisor whose children log under log_dir (created with its
 * parents when missing), or NULL when log_dir is NULL or cannot be created, or memory is short.
 * opts NULL = defaults. The caller owns it; supervise_destroy stops the children. */
supervise_t *supervise_new(const char *log_dir, const supervise_opts_t *opts);

/* supervise_destroy stops every child (supervise_stop_all with a 2 s grace) and frees the
 * supervisor. Accepts NULL and a pointer to NULL; sets *self_p to NULL. */
void supervise_destroy(supervise_t **self_p);

/* supervise_add starts `name` running argv[0] (looked up in PATH when it has no '/') with the
 * NULL-terminated argv (copied). restart says whether a crash brings it back. Returns SR_OK;
 * SR_EINVAL for an empty name or argv, a name with '/' or a name already used; SR_EIO when
 * fork or the log file fails. A program that cannot be executed exits 127 in the child, which
 * counts as a crash. */
int supervise_add(supervise_t *s, const char *name, char *const argv[], bool restart);

/* supervise_poll reaps children that exited and starts the ones whose restart is due. Returns
 * how many children exited since the previous call. Never blocks. */
int supervise_poll(supervise_t *s);

/* supervise_cpu_report writes one tab-separated line per child (after a header line "child
 * user_us sys_us restarts csw"): the user and system CPU time of its incarnations reaped so far,
 * so after supervise_stop_all the whole life of every child, its restarts, and its context
 * switches (voluntary and involuntary, all its threads). Returns SR_OK, SR_EINVAL or SR_EIO. */
int supervise_cpu_report(const supervise_t *s, FILE *out);

/* supervise_pid returns the current pid of `name`, or 0 when it is not running (or unknown). */
pid_t supervise_pid(const supervise_t *s, const char *name);

/* supervise_restarts returns how many times `name` was restarted (-1 when unknown). */
int supervise_restarts(const supervise_t *s, const char *name);

/* supervise_last_status returns the last wait status of `name` (as from waitpid), or -1 when it
 * never exited or is unknown. */
int supervise_last_status(const supervise_t *s, const char *name);

/* The exit statuses a supervised child's end is read by (common/cmds.h): a usage error (not
 * restarted) and a failed run. */
#define SUPERVISE_EXIT_USAGE SR_EXIT_USAGE
#define SUPERVISE_EXIT_RUN_FAILED SR_EXIT_RUN_FAILED

/* supervise_usage_error returns true when `name` is down after exiting SUPERVISE_EXIT_USAGE (it
 * stays down). */
bool supervise_usage_error(const supervise_t *s, const char *name);

/* supervise_finished returns true when `name` exited 0 (it stays down). */
bool supervise_finished(const supervise_t *s, const char *name);

/* supervise_signal sends sig to the running child `name` (for tests and for the launcher's own
 * scenarios). Returns SR_OK, SR_ENOTFOUND when not running, or SR_EIO. */
int supervise_signal(supervise_t *s, const char *name, int sig);

/* supervise_stop stops one child for good: SIGTERM, up to grace_ms, then SIGKILL, and reaps it.
 * It is not restarted afterwards. Returns SR_OK or SR_ENOTFOUND. */
int supervise_stop(supervise_t *s, const char *name, int64_t grace_ms);

/* supervise_stop_all sends SIGTERM to every running child, waits up to grace_ms for all of them,
 * then SIGKILLs the rest and reaps them. No child is restarted afterwards. Returns how many had
 * to be killed. */
int supervise_stop_all(supervise_t *s, int64_t grace_ms);

/* supervise_log_path writes the log file path of `name` into buf. Returns SR_OK or SR_ETOOBIG. */
int supervise_log_path(const supervise_t *s, const char *name, char *buf, size_t len);

/* supervise_free_port returns a loopback TCP port that was free a moment ago (for a child to
 * bind), or 0. */
int supervise_free_port(void);

#endif
