/*
 * http_srv_int.h — the insides the HTTP server's files share (http_srv.c, its acceptor
 * http_srv_accept.c) and nothing else includes: the routes and the server struct.
 */
#ifndef SR_HTTP_SRV_INT_H
#define SR_HTTP_SRV_INT_H

#include "common/http_srv.h"

#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define HTTP_SRV_MAX_ROUTES 24
#define HTTP_SRV_PATH_MAX 128

typedef enum {
    HTTP_SRV_ROUTE_FN = 1,
    HTTP_SRV_ROUTE_STATIC,
    HTTP_SRV_ROUTE_METRICS,
    HTTP_SRV_ROUTE_SSE
} http_srv_route_kind_t;

typedef struct {
    char path[HTTP_SRV_PATH_MAX];
    http_srv_route_kind_t kind;
    bool public_;
    http_srv_handler_fn fn;
    void *arg;
    const char *ctype;
    const void *data;
    size_t len;
    metrics_registry_t *reg;
} http_srv_route_t;

/* http_srv_uds_listen makes a listening Unix stream socket (non-blocking) at path: a socket file
 * already there (a server that died) is removed first, any other file there is refused. Returns
 * the socket and the file's identity in *dev, *ino (for http_srv_uds_unlink), or -1 with a
 * one-line reason in *why. http_srv_uds_unlink removes the file at path if it is still that one
 * (another server may have taken the path since). Shared by both kinds of server. */
int http_srv_uds_listen(const char *path, int backlog, dev_t *dev, ino_t *ino, const char **why);
void http_srv_uds_unlink(const char *path, dev_t dev, ino_t ino);

struct http_srv {
    http_srv_cfg_t cfg;
    char *token;
    struct sockaddr_in addr;
    char *uds; /* the Unix socket path listened on instead of addr, or NULL */
    dev_t uds_dev;
    ino_t uds_ino;
    http_srv_route_t routes[HTTP_SRV_MAX_ROUTES];
    int nroutes;
    struct MHD_Daemon *d;
    int port;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stopping;
    uint64_t seq; /* of the latest event, 0 = none yet */
    char *event;  /* "event: <name>\ndata: <data>\n\n" */
    size_t event_len;
    atomic_uint_fast64_t sse_bytes;
    atomic_int sse_clients;

    /* The acceptor (see http_srv.h): the listening socket, connections that sent no complete
     * first request yet, and the thread that watches them. */
    int lfd, efd;
    pthread_t acc;
    bool acc_started;
    struct {
        int fd;           /* -1 = free */
        uint64_t key;     /* whose: an IPv4 address (network order), or a Unix peer's uid | 1<<32 */
        int64_t since_ms; /* accepted */
        struct sockaddr_storage peer;
        socklen_t peer_len;
    } pend[HTTP_SRV_PENDING_MAX];
    int npend;
    atomic_uint_fast64_t refused, health_early;
};

/* http_srv_acceptor_main is the acceptor thread's body (http_srv_accept.c), started by
 * http_srv_start with the server as arg. */
void *http_srv_acceptor_main(void *arg);

#endif
