/*
 * bench_cmd.c — entry point of `selroll bench`. Not built yet: only its usage is here.
 */
#include "common/cmds.h"

int bench_main(int argc, char **argv)
{
    return sr_cmd_not_built(argc, argv,
        "usage: selroll bench all|proto|editdist|env|policy [options]\n"
        "System microbenchmarks; each prints medians and rates.\n");
}
