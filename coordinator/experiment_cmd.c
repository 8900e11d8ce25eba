/*
 * experiment_cmd.c — entry point of `selroll experiment`. Not built yet: only its usage is here.
 */
#include "common/cmds.h"

int experiment_main(int argc, char **argv)
{
    return sr_cmd_not_built(argc, argv,
        "usage: selroll experiment --arms LIST --seeds LIST --iters N --batch-groups M --group-size G --out DIR [--quick]\n"
        "Runs the A/B protocol (baseline, gate, greso, gate+greso, dapo, ...) and writes report.md, CSV and plots.\n");
}
