/*
 * keygen_cmd.c — entry point of `selroll keygen DIR [--name NAME]`: CURVE key pairs as Z85 files.
 *
 * Without --name it writes everything a cluster needs (common/curve.h): the servers' pair, one
 * pair per role, and the roles' public keys in DIR/authorized, so `--curve-keys DIR` works at
 * once on one machine. With --name it writes one more client pair (a new machine, or a rotation)
 * and, unless --no-authorize, adds its public key to the authorised-keys folder.
 */
#include "common/cfg.h"
#include "common/cmds.h"
#include "common/curve.h"
#include "common/sr.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

int keygen_main(int argc, char **argv)
{
    static struct {
        char *name, *authorized;
        bool authorize;
    } o;
    memset(&o, 0, sizeof o);
    cfg_option_t opts[] = {
        {.name = "name", .kind = CFG_STRING, .dst = &o.name, .metavar = "NAME",
         .no_env = true,
         .help = "write one key pair NAME.key/NAME.pub only (default: server and every role)"},
        {.name = "authorized", .kind = CFG_STRING, .dst = &o.authorized, .metavar = "DIR",
         .no_env = true,
         .help = "authorised-keys folder that receives the client public keys "
                 "(default DIR/authorized)"},
        {.name = "authorize", .kind = CFG_BOOL, .dst = &o.authorize, .def = "true", .no_env = true,
         .help = "with --name: copy the public key into the authorised-keys folder"},
        {0},
    };
    cfg_t cfg = {.command = "keygen",
                 .summary = "Writes CURVE key pairs (Z85 text; secrets mode 0600) into DIR: "
                            "server.key/.pub for every binding socket, <role>.key/.pub for every "
                            "role, and the roles' public keys in DIR/authorized.",
                 .positional = "DIR",
                 .options = opts};
    int rc = cfg_parse_command(&cfg, argc, argv);
    if (rc != CFG_GO_ON)
        return rc;
    int exit_code = 0;
    char err[512] = "", adir[PATH_MAX];
    if (cfg.npos != 1) {
        fprintf(stderr, "selroll keygen: expected one folder, got %d arguments\n", cfg.npos);
        exit_code = 2;
        goto cleanup;
    }
    const char *dir = cfg.pos[0];
    int n = o.authorized ? snprintf(adir, sizeof adir, "%s", o.authorized)
                         : snprintf(adir, sizeof adir, "%s/authorized", dir);
    if (n < 0 || (size_t)n >= sizeof adir) {
        fprintf(stderr, "selroll keygen: folder name too long\n");
        exit_code = 2;
        goto cleanup;
    }
    if (o.name) {
        int is_server = strcmp(o.name, "server") == 0;
        if (curve_write_pair(dir, o.name, o.authorize && !is_server ? adir : NULL, err,
                             sizeof err) != SR_OK) {
            fprintf(stderr, "selroll keygen: %s\n", err);
            exit_code = 1;
            goto cleanup;
        }
        printf("wrote %s/%s.key and %s/%s.pub\n", dir, o.name, dir, o.name);
        goto cleanup;
    }
    if (curve_write_cluster(dir, adir, err, sizeof err) != SR_OK) {
        fprintf(stderr, "selroll keygen: %s\n", err);
        exit_code = 1;
        goto cleanup;
    }
    printf("wrote the server's and every role's key pairs into %s; authorised client keys in "
           "%s\n", dir, adir);

cleanup:
    cfg_free(&cfg);
    return exit_code;
}
