/*
 * keygen_cmd.c — entry point of `selroll keygen`. Not built yet: only its usage is here.
 */
#include "common/cmds.h"

int keygen_main(int argc, char **argv)
{
    return sr_cmd_not_built(argc, argv,
        "usage: selroll keygen DIR\n"
        "Writes CURVE key pairs for every role into DIR.\n");
}
