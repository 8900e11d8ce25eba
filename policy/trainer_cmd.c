/*
 * trainer_cmd.c — entry point of `selroll trainer`. Not built yet: only its usage is here.
 */
#include "common/cmds.h"

int trainer_main(int argc, char **argv)
{
    return sr_cmd_not_built(argc, argv,
        "usage: selroll trainer --pull tcp://HOST:PORT --redis URL\n"
        "The built-in GRPO learner for the built-in policy (speaks the trainer protocol).\n");
}
