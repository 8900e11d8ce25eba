/*
 * run_cmd.c — entry point of `selroll run`. Not built yet: only its usage is here.
 */
#include "common/cmds.h"

int run_main(int argc, char **argv)
{
    return sr_cmd_not_built(argc, argv,
        "usage: selroll run [--redis URL] [--out DIR] [--iters N] [--group-size G] [--batch-groups M]\n"
        "One machine: starts a private redis-server (unless --redis), every role, runs the campaign,\n"
        "shows progress and writes the report.\n");
}
