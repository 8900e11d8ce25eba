/*
 * cmds.c — what the subcommands share: reading a number given to a flag.
 */
#include "common/cmds.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

bool sr_cmd_int(const char *cmd, const char *flag, const char *text, int *out)
{
    char *end = NULL;
    errno = 0;
    long v = text ? strtol(text, &end, 10) : 0;
    if (!text || end == text || *end != '\0' || errno == ERANGE || v < INT_MIN || v > INT_MAX) {
        fprintf(stderr, "selroll %s: %s wants a whole number, got '%s'\n", cmd, flag,
                text ? text : "");
        return false;
    }
    *out = (int)v;
    return true;
}

bool sr_cmd_double(const char *cmd, const char *flag, const char *text, double *out)
{
    char *end = NULL;
    errno = 0;
    double v = text ? strtod(text, &end) : 0;
    if (!text || end == text || *end != '\0' || errno == ERANGE || !isfinite(v)) {
        fprintf(stderr, "selroll %s: %s wants a number, got '%s'\n", cmd, flag, text ? text : "");
        return false;
    }
    *out = v;
    return true;
}
