/*
 * store.h — selroll's Redis connection (store_t): URL, connect, AUTH and SELECT, timeouts,
 * reconnection and retry, key prefixing, commands, pipelining and Lua scripts. Nothing here knows a
 * key family: each family's keys and commands live in one schema module (docs/redis.md, "Who owns
 * which keys"): common/store_keys.h names the keys several roles share, common/store_run.h,
 * store_group.h, store_reg.h, store_prompt.h and store_policy.h are the shared typed modules, and
 * a role's own keys sit in that role's folder (coordinator/coord_store.h, gate/gate_store.h, ...).
 * hiredis stays inside store.c: a reply is an opaque store_reply_t read through accessors.
 *
 * Every key lives under `selroll:<run>:`. A store_t is one blocking connection with a connect
 * timeout and a command timeout; it is not thread-safe, so each thread opens its own. When a
 * command fails because the connection broke (server restarted, connection killed, timeout), the
 * store reconnects once; idempotent commands are then retried once, the others return the error
 * and the next call runs on the new connection.
 *
 * All functions return SR_OK or a negative SR_E* code; on failure store_errstr() holds a one-line
 * reason ("redis 127.0.0.1:6399 unreachable: Connection refused", "redis: NOAUTH Authentication
 * required."). SR_EREDIS means Redis refused the command or cannot be reached, SR_ETIMEDOUT that
 * it did not answer within the command timeout.
 */
#ifndef SR_STORE_H
#define SR_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct store store_t;

/* A reply of Redis, owned by whoever received it (store_reply_free), read through the accessors
 * below. */
typedef struct store_reply store_reply_t;

/* One name and value of a hash (a registry entry, gate:stats). */
typedef struct {
    const char *name;
    const char *value;
} store_field_t;

/* ---- URLs ------------------------------------------------------------------------------- */

#define STORE_URL_FIELD_MAX 256

/* A parsed Redis address: redis://[[user]:password@]host[:port][/db] or unix:///path[?db=N]. */
typedef struct {
    bool is_unix;
    char host[STORE_URL_FIELD_MAX];     /* TCP host name or address ("::1" without brackets) */
    int port;                           /* 6379 when the URL names none */
    char path[STORE_URL_FIELD_MAX];     /* unix socket path */
    char user[STORE_URL_FIELD_MAX];     /* ACL user name, "" for the default user */
    char password[STORE_URL_FIELD_MAX]; /* percent-decoded; "" means no AUTH */
    int db;                             /* SELECT index, 0 by default */
} store_url_t;

/* store_parse_url parses `url` into *out (fully overwritten). Returns SR_OK, or SR_EINVAL with a
 * one-line reason in err (when err is not NULL) for a NULL, empty or malformed URL, an unknown
 * scheme, a port outside 1..65535, a bad db number or a field longer than STORE_URL_FIELD_MAX-1. */
int store_parse_url(const char *url, store_url_t *out, char *err, size_t errlen);

/* ---- connection ------------------------------------------------------------------------- */

#define STORE_RUN_MAX 64

/* An error text that starts with STORE_ERR_AUTH is Redis's refusal of the credentials (NOAUTH,
 * WRONGPASS, NOPERM...): a configuration error, unlike an unreachable server. */
#define STORE_ERR_AUTH "redis refused the connection:"

/* store_connect opens a connection to `url` for run `run` (1..STORE_RUN_MAX-1 characters out of
 * [A-Za-z0-9_.-]), with `timeout_ms` (> 0; <= 0 means 2000) as both the connect and the command
 * timeout. It sends AUTH when the URL has a password, SELECT when it names a db, and PING. On success *out owns the new store (free with store_destroy) and SR_OK is
 * returned. On failure *out is NULL, err (if not NULL) holds a one-line reason, and the result
 * is SR_EINVAL (bad URL or run name) or SR_EREDIS (unreachable, AUTH or SELECT refused, no
 * answer in time). */
int store_connect(store_t **out, const char *url, const char *run, int timeout_ms, char *err,
                  size_t errlen);

/* store_run_name_ok says whether run is a valid run name: 1..STORE_RUN_MAX-1 characters of
 * A-Z a-z 0-9 _ . - (NULL is not). */
bool store_run_name_ok(const char *run);

/* store_new is store_connect without the reason: it returns the new store or NULL. */
store_t *store_new(const char *url, const char *run, int timeout_ms);

/* store_destroy closes the connection, frees the store and sets *self_p to NULL. Accepts NULL
 * and a pointer to NULL. */
void store_destroy(store_t **self_p);

/* store_errstr returns the reason of the last failure on this store ("" if none yet). The text
 * belongs to the store and stays valid until its next call. */
const char *store_errstr(const store_t *s);

/* store_run returns the run name the store was opened for. */
const char *store_run(const store_t *s);

#define STORE_KEY_MAX 512 /* a key buffer that fits every key selroll builds */

/* store_key writes "selroll:<run>:" followed by the printf-formatted rest into buf. Returns
 * SR_OK, or SR_ETOOBIG when the key does not fit in len bytes (buf then holds a truncated,
 * terminated string, and store_errstr says "store: key too long"). Schema modules call it, each
 * for its own key families only. */
int store_key(store_t *s, char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* store_ping sends PING (idempotent: retried once after a reconnect). */
int store_ping(store_t *s);

/* ---- commands (for schema modules) ------------------------------------------------------ */

/* Flags for store_command and store_script. */
#define STORE_IDEMPOTENT 1 /* the command may be sent a second time after a reconnect */
#define STORE_EVAL_BODY 2  /* store_script: send the script's text every time (EVAL) */

/* store_command runs one command in hiredis printf format (%s, %b with pointer and length,
 * %lld ...). Keys are not prefixed: build them with store_key. With STORE_IDEMPOTENT in flags the
 * command is retried once after a broken connection. On SR_OK, *out (if out is not NULL) owns
 * the reply (free it with store_reply_free); an error reply is turned into SR_EREDIS with its
 * text in store_errstr, and *out is then NULL. */
int store_command(store_t *s, int flags, store_reply_t **out, const char *fmt, ...);

/* store_commandv runs one command given as argc binary-safe arguments (lens NULL: C strings),
 * as store_command does. */
int store_commandv(store_t *s, int flags, store_reply_t **out, int argc, const char **argv,
                   const size_t *lens);

/* store_get_str runs GET key (idempotent) and sets *out to a copy of the string (the caller
 * frees it), or NULL when the key holds none. Returns what store_command returns. */
int store_get_str(store_t *s, const char *key, char **out);

/* store_script runs Lua script `lua` (a string that lives as long as the program: it is cached by
 * its address) with nkeys keys followed by the other arguments in argv[0..argc), binary-safe when
 * lens gives their lengths (lens NULL: C strings). By default it sends EVALSHA with the script's
 * SHA1, loading the script (SCRIPT LOAD) on its first use on this store, and EVAL when the server
 * answers NOSCRIPT (restarted or flushed); STORE_EVAL_BODY sends EVAL with the text every time.
 * STORE_IDEMPOTENT and *out as in store_command. At most 8 scripts use EVALSHA per store. */
int store_script(store_t *s, int flags, const char *lua, int nkeys, int argc, const char **argv,
                 const size_t *lens, store_reply_t **out);

/* store_retried says whether the last command (store_command, store_script) was sent a second
 * time after a reconnect, so that an earlier attempt may have run. */
bool store_retried(const store_t *s);

/* store_thread_block_sigpipe blocks SIGPIPE on the calling thread for good, so that its
 * exchanges with Redis skip blocking and restoring it around each round trip (two system calls);
 * a SIGPIPE a broken connection raised is still consumed. For a thread that talks to Redis only
 * (common/storeq's store thread), never for one that writes to pipes or sockets of its own. */
void store_thread_block_sigpipe(void);

/* store_set_err sets the text store_errstr returns (schema modules' own failures). */
void store_set_err(store_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- replies ---------------------------------------------------------------------------- */

typedef enum {
    STORE_REPLY_NIL = 0,
    STORE_REPLY_STRING, /* a bulk string */
    STORE_REPLY_INTEGER,
    STORE_REPLY_ARRAY,
    STORE_REPLY_STATUS, /* "OK", "PONG" ... */
    STORE_REPLY_ERROR,  /* in a pipeline or an array; a single command's is SR_EREDIS */
    STORE_REPLY_OTHER,
} store_reply_type_t;

/* store_reply_type returns r's type (STORE_REPLY_NIL for NULL). */
store_reply_type_t store_reply_type(const store_reply_t *r);

/* store_reply_str returns the bytes of a bulk string (terminated by a NUL after *len bytes; len
 * may be NULL), or NULL when r is NULL or no bulk string. */
const char *store_reply_str(const store_reply_t *r, size_t *len);

/* store_reply_text returns the text of a status or error reply, NULL for anything else. */
const char *store_reply_text(const store_reply_t *r);

/* store_reply_int stores an integer reply in *out and returns true; false (and *out unchanged)
 * for anything else. */
bool store_reply_int(const store_reply_t *r, int64_t *out);

/* store_reply_count returns the number of elements of an array reply, 0 for anything else. */
size_t store_reply_count(const store_reply_t *r);

/* store_reply_at returns element i of an array reply (owned by r), NULL when r is no array or i
 * is out of range. */
const store_reply_t *store_reply_at(const store_reply_t *r, size_t i);

/* store_reply_at_str is store_reply_str(store_reply_at(r, i), len). */
const char *store_reply_at_str(const store_reply_t *r, size_t i, size_t *len);

/* store_reply_free frees a reply received from store_command or store_script. Accepts NULL. */
void store_reply_free(store_reply_t *r);

/* ---- values and names (for schema modules) ---------------------------------------------- */

/* store_parse_i64 / store_parse_double read a whole decimal string: SR_OK, or SR_EPROTO for
 * NULL, "" or trailing junk. */
int store_parse_i64(const char *str, int64_t *out);
int store_parse_double(const char *str, double *out);

/* store_id_ok accepts an id that goes into a key: non-empty, shorter than max, no spaces or
 * control characters. store_name_ok accepts 1..max-1 characters of [A-Za-z0-9_.-]. */
bool store_id_ok(const char *id, size_t max);
bool store_name_ok(const char *name, size_t max);

/* ---- pipelining ------------------------------------------------------------------------- */

/* store_pipe_append queues one command (hiredis printf format) without waiting for its reply.
 * Returns SR_OK, SR_ENOMEM, or SR_EREDIS if the store has no connection and cannot get one. */
int store_pipe_append(store_t *s, const char *fmt, ...);

/* store_pipe_appendv queues one command given as argc binary-safe arguments. */
int store_pipe_appendv(store_t *s, int argc, const char **argv, const size_t *argvlen);

/* store_pipe_multi and store_pipe_multi_exec queue MULTI and EXEC around the commands queued
 * between them: one transaction, run together with nothing of another connection in between.
 * Only EXEC's reply reaches store_pipe_exec's fn, as one reply (an array of the commands'
 * replies, or an error when the transaction was refused: EXECABORT); MULTI's and the QUEUED
 * answers are read and dropped. A transaction still open at store_pipe_exec is discarded. Return
 * SR_OK, SR_EINVAL (MULTI twice, EXEC without MULTI) or store_pipe_appendv's error. */
int store_pipe_multi(store_t *s);
int store_pipe_multi_exec(store_t *s);

/* store_reply_fn receives the index-th reply of a pipeline (an error reply included; a
 * transaction counts as one reply, its EXEC's); the reply
 * belongs to the store.
 * A non-zero return is remembered (the first one is store_pipe_exec's result), but the
 * remaining replies are still read so that the connection stays in step. */
typedef int (*store_reply_fn)(size_t index, const store_reply_t *reply, void *arg);

/* store_pipe_exec sends every queued command and reads one reply for each, in order, passing
 * each to fn (may be NULL). Returns SR_OK; the first non-zero result of fn; SR_EREDIS when fn is
 * NULL and some reply was an error (its text in store_errstr); or SR_EREDIS/SR_ETIMEDOUT when the
 * connection broke. A pipeline is never retried: after a broken connection the store reconnects
 * and the queue is empty, but which commands ran is unknown. */
int store_pipe_exec(store_t *s, store_reply_fn fn, void *arg);

/* store_script_load loads Lua script lua (SCRIPT LOAD, as store_script does on its first use) so
 * that store_pipe_script can queue it. No pipelined reply may be pending. Returns SR_OK or the
 * error of SCRIPT LOAD. */
int store_script_load(store_t *s, const char *lua);
/* store_pipe_script queues script lua (loaded before with store_script_load or store_script) as
 * EVALSHA with nkeys keys and the argc (at most 16) binary-safe arguments (lens NULL: C
 * strings). Its reply is a NOSCRIPT error (store_reply_noscript) when the server lost the script
 * meanwhile: the caller runs that one again with store_script. Returns SR_OK, SR_EINVAL (not
 * loaded, bad arguments) or store_pipe_appendv's error. */
int store_pipe_script(store_t *s, const char *lua, int nkeys, int argc, const char **argv,
                      const size_t *lens);
/* store_reply_noscript says whether r is Redis's NOSCRIPT error. */
bool store_reply_noscript(const store_reply_t *r);
/* store_pipe_pending returns the number of queued commands whose replies were not read yet. */
size_t store_pipe_pending(const store_t *s);

#endif
