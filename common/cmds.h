/*
 * cmds.h — the subcommands of the one selroll binary. Each role folder defines its entry points;
 * selroll.c dispatches on argv[1]. Every entry point gets argv with argv[0] = the subcommand name
 * and returns the process exit code (0 success, 1 runtime failure, 2 usage error).
 */
#ifndef SR_CMDS_H
#define SR_CMDS_H

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

/* sr_cmd_not_built serves a subcommand whose implementation has not landed yet: it prints
 * `usage` for --help/-h (exit 0), otherwise a one-line "not built yet" message (exit 2). */
int sr_cmd_not_built(int argc, char **argv, const char *usage);

#endif
