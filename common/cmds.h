/*
 * cmds.h — the subcommands of the one selroll binary. Each role folder defines its entry points;
 * selroll.c dispatches on argv[1]. Every entry point gets argv with argv[0] = the subcommand name
 * and returns the process exit code (0 success, 1 runtime failure, 2 usage error).
 */
#ifndef SR_CMDS_H
#define SR_CMDS_H

#include "common/http_srv.h"
#include "common/metrics.h"

#include <signal.h>
#include <stdbool.h>

/* The exit status of every selroll command for a usage error (a bad flag or configuration): a
 * supervised child that exits with it is not restarted, since the same arguments would fail the
 * same way. */
#define SR_EXIT_USAGE 2

/* The exit status of the coordinator when the run itself failed (too many failed trajectories,
 * docs/operations.md "Runs that fail loudly"): `selroll run` reports the run record's error and
 * does not start the coordinator again. */
#define SR_EXIT_RUN_FAILED 3

int coordinator_main(int argc, char **argv);
int actor_main(int argc, char **argv);
int gate_main(int argc, char **argv);
int env_worker_main(int argc, char **argv);
int env_main(int argc, char **argv);
int policy_server_main(int argc, char **argv);
int trainer_main(int argc, char **argv);
int run_main(int argc, char **argv);
int status_main(int argc, char **argv);
int bench_main(int argc, char **argv);
int experiment_main(int argc, char **argv);
int keygen_main(int argc, char **argv);

/* sr_cmd_int and sr_cmd_double read the text given to a subcommand's flag as a whole number /
 * a finite number (all of it); on anything else they print "selroll CMD: FLAG wants ..., got
 * 'TEXT'" on stderr and return false (the caller exits 2). The flag's range is the caller's. */
bool sr_cmd_int(const char *cmd, const char *flag, const char *text, int *out);
bool sr_cmd_double(const char *cmd, const char *flag, const char *text, double *out);

/* sr_cmd_metrics serves reg's /metrics and /health at port (a role's --metrics-port; NULL = not
 * asked, *out stays NULL). Returns true, or prints "selroll CMD: --metrics-port: WHY" on stderr
 * and returns false (the caller exits 2). *out is the caller's to http_srv_destroy. */
/* sr_cmd_stop_t keeps the SIGINT and SIGTERM handlers sr_cmd_catch_stop replaced; zero it
 * before use. */
typedef struct {
    struct sigaction old_int, old_term;
    bool caught;
} sr_cmd_stop_t;

/* sr_cmd_catch_stop makes handler the SIGINT and SIGTERM handler of the process, keeping the
 * handlers it replaces in *saved. */
void sr_cmd_catch_stop(sr_cmd_stop_t *saved, void (*handler)(int));

/* sr_cmd_release_stop puts the handlers kept in *saved back; nothing when none were caught. */
void sr_cmd_release_stop(sr_cmd_stop_t *saved);

bool sr_cmd_metrics(const char *cmd, const char *port, metrics_registry_t *reg, http_srv_t **out);

#endif
