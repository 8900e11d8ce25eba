/*
 * env_cmd.c — entry point of `selroll env`. Not built yet: only its usage is here.
 */
#include "common/cmds.h"

int env_main(int argc, char **argv)
{
    return sr_cmd_not_built(argc, argv,
        "usage: selroll env play|show|expert TASK_ID\n"
        "Household environment tools: play a task, show its hidden layout, print the expert's transcript.\n");
}
