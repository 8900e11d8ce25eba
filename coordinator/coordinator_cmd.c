/*
 * coordinator_cmd.c — entry point of `selroll coordinator`. Not built yet: only its usage is here.
 */
#include "common/cmds.h"

int coordinator_main(int argc, char **argv)
{
    return sr_cmd_not_built(argc, argv,
        "usage: selroll coordinator --run ID [--redis URL] [--work tcp://*:PORT] [--bus-pub tcp://*:PORT] [--bus-sub tcp://*:PORT] [--resume] [--http ADDR:PORT]\n"
        "Owns a run: iterations, prompt selection (pre-filter), dispatch of jobs with leases, collection,\n"
        "post-filter and backfill, advantages, batches to the trainer, the message bus proxy, the dashboard.\n");
}
