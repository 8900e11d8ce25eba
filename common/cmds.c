/*
 * cmds.c — shared behaviour of subcommands that are not implemented yet.
 */
#include "common/cmds.h"

#include <stdio.h>
#include <string.h>

int sr_cmd_not_built(int argc, char **argv, const char *usage)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage, stdout);
            return 0;
        }
    }
    fprintf(stderr, "selroll %s: not built yet\n", argv[0]);
    return 2;
}
