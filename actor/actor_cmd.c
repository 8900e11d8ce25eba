/*
 * actor_cmd.c — entry point of `selroll actor`. Not built yet: only its usage is here.
 */
#include "common/cmds.h"

int actor_main(int argc, char **argv)
{
    return sr_cmd_not_built(argc, argv,
        "usage: selroll actor --coordinator tcp://HOST:PORT --slots N --policy http://HOST:PORT [--env-workers LIST]\n"
        "Rollout actor: runs up to N episodes at once; asks the policy, steps the environment, publishes actions.\n");
}
