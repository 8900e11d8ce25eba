/*
 * env_worker_cmd.c — entry point of `selroll env-worker`. Not built yet: only its usage is here.
 */
#include "common/cmds.h"

int env_worker_main(int argc, char **argv)
{
    return sr_cmd_not_built(argc, argv,
        "usage: selroll env-worker --bind tcp://*:PORT --capacity N [--step-latency-ms X] [--redis URL]\n"
        "Hosts household environment sessions (RESET, STEP, CLOSE) for many actors.\n");
}
