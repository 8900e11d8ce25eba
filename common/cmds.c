/*
 * cmds.c — what the subcommands share: reading a number given to a flag, serving --metrics-port,
 * catching SIGINT and SIGTERM.
 */
#include "common/cmds.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

bool sr_cmd_metrics(const char *cmd, const char *port, metrics_registry_t *reg, http_srv_t **out)
{
    if (!port)
        return true;
    char err[512] = "";
    *out = http_srv_serve_metrics(port, reg, err, sizeof err);
    if (*out)
        return true;
    fprintf(stderr, "selroll %s: --metrics-port: %s\n", cmd, err);
    return false;
}

void sr_cmd_catch_stop(sr_cmd_stop_t *saved, void (*handler)(int))
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &saved->old_int);
    sigaction(SIGTERM, &sa, &saved->old_term);
    saved->caught = true;
}

void sr_cmd_release_stop(sr_cmd_stop_t *saved)
{
    if (!saved->caught)
        return;
    sigaction(SIGINT, &saved->old_int, NULL);
    sigaction(SIGTERM, &saved->old_term, NULL);
    saved->caught = false;
}
