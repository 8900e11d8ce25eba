/*
 * wsync.h — weight sync: after the trainer's WEIGHTS_READY {version, path}, tell every inference
 * server to load the new weights and wait for all of them before the version is published.
 *
 * Modes: vLLM's LoRA hot swap (POST /v1/load_lora_adapter {lora_name, lora_path}, and
 * /v1/unload_lora_adapter {lora_name} for versions older than keep_versions), SGLang's
 * (POST /load_lora_adapter, /unload_lora_adapter, same bodies) and SGLang's full reload
 * (POST /update_weights_from_disk {model_path}). Each server has its own non-blocking HTTP client
 * (common/llm_client.h) on the coordinator's reactor: connection errors, 5xx and 429 are retried
 * with back-off, any other answer but 2xx (or a 2xx body with "success": false) is a refusal.
 * One load is in flight at a time; its callback runs once, from the reactor.
 */
#ifndef SR_WSYNC_H
#define SR_WSYNC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct reactor;

typedef enum { WSYNC_NONE = 0, WSYNC_VLLM_LORA, WSYNC_SGLANG_LORA, WSYNC_SGLANG_DISK } wsync_mode_t;
#define WSYNC_MODE_CHOICES "none|vllm-lora|sglang-lora|sglang-disk"
#define WSYNC_DEFAULT_LORA_NAME "selroll-policy-v{version}"

typedef struct {
    wsync_mode_t mode;
    const char *const *servers; /* base URLs ("http://host:port"), borrowed */
    size_t n_servers;
    int keep_versions;     /* LoRA modes: unload version v - keep_versions once v is loaded (0 =
                              never unload) */
    const char *lora_name; /* the adapter's name, "{version}" replaced: the actors' --model */
    long timeout_ms;       /* one attempt: 60000 */
    int retries;           /* attempts after the first on connection errors, 5xx, 429: 3 */
} wsync_cfg_t;

typedef struct wsync wsync_t;

/* The end of one load: ok, or the one line that names the server that refused and why. */
typedef void (*wsync_done_cb)(bool ok, const char *why, void *arg);

/* wsync_new makes the clients of cfg's servers on reactor r. Returns NULL with err set when the
 * mode is none, there is no server, a URL is not http(s) or the name has no "{version}". */
wsync_t *wsync_new(const wsync_cfg_t *cfg, struct reactor *r, char *err, size_t errlen);

/* wsync_destroy aborts a load in flight (its callback is not called) and frees w; accepts NULL. */
void wsync_destroy(wsync_t **w);

/* wsync_load asks every server to load version `version` from path and calls done once all have
 * confirmed (then the unloads of older versions are sent; their failures are only logged) or
 * the first one refused (the others are aborted). Returns SR_OK, SR_ECONFLICT while another load is
 * in flight, SR_EINVAL for a NULL or empty path. */
int wsync_load(wsync_t *w, int64_t version, const char *path, wsync_done_cb done, void *arg);

/* wsync_request renders the route and the JSON body (a new string) of a load (unload false) or an
 * unload of `version` in mode; path is ignored for an unload. Returns NULL when the mode has no
 * such request (an unload with sglang-disk or none). */
/* wsync_busy: a load, or an unload of an old version, is still unanswered (each ends by its
 * answer, an error or the client's timeout). */
bool wsync_busy(const wsync_t *w);

char *wsync_request(wsync_mode_t mode, const char *lora_name, int64_t version, const char *path,
                    bool unload, const char **route);

/* wsync_name writes lora_name with "{version}" replaced by version into buf. */
void wsync_name(const char *lora_name, int64_t version, char *buf, size_t n);

#endif
