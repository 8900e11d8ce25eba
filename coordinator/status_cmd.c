/*
 * status_cmd.c — entry point of `selroll status`. Not built yet: only its usage is here.
 */
#include "common/cmds.h"

int status_main(int argc, char **argv)
{
    return sr_cmd_not_built(argc, argv,
        "usage: selroll status [--redis URL] [--run ID]\n"
        "Cluster view from Redis: runs, groups, actors, env workers.\n");
}
