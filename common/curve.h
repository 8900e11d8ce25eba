/*
 * curve.h — ZeroMQ CURVE encryption and authentication for every selroll socket.
 *
 * A cluster has one server key pair, presented by every socket that binds (the coordinator's
 * work ROUTER and bus proxy, the env worker's ROUTER, the trainer's PULL, the coordinator's
 * WEIGHTS_READY PULL), and one client key pair per role, used by every socket that connects.
 * `selroll keygen DIR` writes them as Z85 text files:
 *
 *   DIR/server.pub, DIR/server.key          the servers' pair (.key is the secret, mode 0600)
 *   DIR/<role>.pub, DIR/<role>.key          one pair per role (coordinator, actor, gate, ...)
 *   DIR/authorized/<role>.pub               the client public keys the servers accept
 *
 * A process loads its keys once at start (curve_new) and makes them the default of every socket
 * it creates (curve_set_default; transport_opts_init picks the default up). A server socket
 * authenticates its peers through a ZAP handler: one thread per ZeroMQ context, bound to
 * inproc://zeromq.zap.01, which accepts a client only when its public key is one of the files in
 * the authorised-keys folder read at start. Refused peers are counted and logged; rotating keys
 * means restarting with a new authorised-keys folder.
 *
 * Key file format: lines starting with '#' are comments; the first other line is the 40-character
 * Z85 key (public in .pub, secret in .key). The public key of a .key file is derived from its
 * secret.
 */
#ifndef SR_CURVE_H
#define SR_CURVE_H

#include <stddef.h>
#include <stdint.h>

#define CURVE_KEY_Z85_LEN 40
#define CURVE_MAX_AUTHORIZED 4096

typedef struct curve curve_t;

/* curve_keypair writes a fresh key pair as NUL-terminated Z85 text into public_z85 and secret_z85
 * (each CURVE_KEY_Z85_LEN + 1 bytes). Returns 0, or SR_EUNSUPPORTED when libzmq was built
 * without CURVE. */
int curve_keypair(char *public_z85, char *secret_z85);

/* curve_write_pair writes DIR/NAME.pub (mode 0644) and DIR/NAME.key (mode 0600) for a fresh key
 * pair, creating DIR (mode 0700) when missing. When authorized_dir is not NULL, the public key is
 * also written there as NAME.pub. Returns 0 or an SR_E* code with one line in err. */
int curve_write_pair(const char *dir, const char *name, const char *authorized_dir, char *err,
                     size_t errlen);

/* curve_write_cluster writes what one cluster needs into dir: the servers' pair and one pair per
 * role (coordinator, actor, gate, env-worker, policy-server, trainer), whose public keys also go
 * into authorized_dir (NULL = dir/authorized). Returns 0 or an SR_E* code with one line in err. */
int curve_write_cluster(const char *dir, const char *authorized_dir, char *err, size_t errlen);

/* curve_read_key reads the Z85 key of a key file (see the format above) into out
 * (CURVE_KEY_Z85_LEN + 1 bytes). Returns 0, SR_EIO when the file cannot be read, or SR_EINVAL
 * when it holds no valid key; err gets one line. */
int curve_read_key(const char *path, char *out, char *err, size_t errlen);

/* curve_new loads this process's keys from keys_dir: the client pair NAME.key (falling back to
 * client.key when there is none), the servers' public key server.pub and, when present, the
 * servers' secret server.key (needed to bind). authorized_dir (NULL = keys_dir/authorized) holds
 * the client public keys (*.pub) that this process's server sockets accept; it may be missing
 * only when the process binds nothing. Returns NULL with one line in err on failure. The caller
 * owns the result (curve_destroy, or hand it to curve_set_default). */
curve_t *curve_new(const char *keys_dir, const char *name, const char *authorized_dir, char *err,
                   size_t errlen);

/* curve_destroy frees c. Its sockets keep working, but its ZAP domain refuses new peers from then
 * on. Accepts NULL and *self_p == NULL; sets *self_p to NULL. */
void curve_destroy(curve_t **self_p);

/* curve_set_default makes *self_p the process-wide default (taking ownership and setting *self_p
 * to NULL); NULL or *self_p == NULL clears it (no encryption). The previous default is freed. Call
 * before sockets are created, from the main thread. */
void curve_set_default(curve_t **self_p);

/* curve_default returns the process-wide default, or NULL when sockets are not encrypted. */
const curve_t *curve_default(void);

/* curve_apply prepares the libzmq socket zsock of context ctx for a bind (as_server = 1) or a
 * connect (as_server = 0) under c: as a server it sets the server secret and a ZAP domain of c,
 * and starts ctx's ZAP handler when it has none; as a client it sets the client pair and the
 * servers' public key. Returns 0 or an SR_E* code with one line in err. */
int curve_apply(const curve_t *c, void *ctx, void *zsock, int as_server, char *err, size_t errlen);

/* curve_refused returns how many peers c's servers refused; curve_accepted how many they let in.
 * Both 0 for NULL. */
uint64_t curve_refused(const curve_t *c);
uint64_t curve_accepted(const curve_t *c);

/* curve_authorized_count returns how many client keys c accepts. */
size_t curve_authorized_count(const curve_t *c);

/* curve_role_key reads the public key of role (e.g. "gate") from c's authorised-keys folder,
 * <folder>/<role>.pub, into out (CURVE_KEY_Z85_LEN + 1 bytes). SR_OK, SR_ENOTFOUND (no folder
 * or no such file) or SR_EINVAL (not a key). A server's ZAP handler gives every client it lets
 * in its public key in Z85 as the ZAP User-Id. */
int curve_role_key(const curve_t *c, const char *role, char *out);

/* curve_public returns c's client public key in Z85 ("" for NULL). Owned by c. */
const char *curve_public(const curve_t *c);

#endif
