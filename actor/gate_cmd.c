/*
 * gate_cmd.c — entry point of `selroll gate`. Not built yet: only its usage is here.
 */
#include "common/cmds.h"

int gate_main(int argc, char **argv)
{
    return sr_cmd_not_built(argc, argv,
        "usage: selroll gate --bus tcp://HOST:PORT --redis URL [--mode enforce|shadow|off] [--k 10] [--d-low 0.12]\n"
        "Prefix-divergence gate: subscribes to action topics and cancels groups whose prefixes converged.\n");
}
