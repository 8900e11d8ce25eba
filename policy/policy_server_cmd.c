/*
 * policy_server_cmd.c — entry point of `selroll policy-server`. Not built yet: only its usage is here.
 */
#include "common/cmds.h"

int policy_server_main(int argc, char **argv)
{
    return sr_cmd_not_built(argc, argv,
        "usage: selroll policy-server [--listen 127.0.0.1:8000] [--seed N] [--redis URL] [--time-scale X]\n"
        "The built-in policy behind an OpenAI-compatible HTTP API, with an inference-engine cost model.\n");
}
