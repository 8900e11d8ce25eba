/*
 * prompt.h — renders the chat messages of one agent step from a template.
 *
 * A template is a system text and a user text with placeholders in braces: {goal}, {step},
 * {n_prev}, {n_hist}, {history}, {current_obs}, {admissible}; the sections {#history}...{/history}
 * (kept only when the step shows at least one past observation/action pair) and
 * {^history}...{/history} (kept only when it shows none); "{{" stands for a literal "{". The
 * default template is the shared prompt contract with the policy server's parser (docs/prompt.md
 * quotes it). Templates are checked once, when made: an unknown placeholder or an unbalanced
 * section is an error with a message, so rendering never fails on the template.
 */
#ifndef SR_PROMPT_H
#define SR_PROMPT_H

#include "common/sr_buf.h"

#include <stddef.h>

/* The default history length H: how many past observation/action pairs the prompt shows. */
#define PROMPT_DEFAULT_HISTORY 2

/* The default template: its system text is the default env kind's (common/envkind.h: the
 * template is chosen with the kind of environment), its user text PROMPT_DEFAULT_USER. */
#define PROMPT_DEFAULT_SYSTEM (prompt_default_system())
extern const char PROMPT_DEFAULT_USER[];

/* prompt_default_system returns the system text of the default env kind's template (static). */
const char *prompt_default_system(void);

typedef struct prompt prompt_t;

/* One past step: the observation the agent saw and the action it then took. */
typedef struct {
    const char *obs;
    const char *action;
} prompt_turn_t;

/* The state of an episode before its next step. history holds every past step, oldest first
 * (history[0] is step 1); the prompt shows the last H of them. goal is the goal sentence without
 * "Your task is to: " and with its final period. admissible is the environment's list; "help" is
 * left out when rendered. NULL strings render as "". */
typedef struct {
    const char *goal;
    const prompt_turn_t *history;
    size_t n_history;
    const char *current_obs;
    const char *const *admissible;
    size_t n_admissible;
} prompt_state_t;

/* The rendered messages, owned by the caller (prompt_messages_clear). system is NULL when the
 * template's system text is empty: then the request carries the user message only. */
typedef struct {
    char *system;
    char *user;
} prompt_messages_t;

/* prompt_new makes a template from a system and a user text (NULL selects the default text of
 * that part) and a history length (negative selects PROMPT_DEFAULT_HISTORY). Returns NULL when a
 * text is malformed, with a one-line reason in err (when err is not NULL). */
prompt_t *prompt_new(const char *system_tmpl, const char *user_tmpl, int history_len, char *err,
                     size_t errlen);

/* prompt_load reads a template file: a line "[system]" followed by the system text, then a line
 * "[user]" followed by the user text (the line break before a marker or the end of the file is
 * not part of the text; without "[system]" the default system text is used). Returns NULL with a
 * reason in err when the file cannot be read or is malformed. */
prompt_t *prompt_load(const char *path, int history_len, char *err, size_t errlen);

/* prompt_destroy frees the template and nulls *p. Accepts NULL and a pointer to NULL. */
void prompt_destroy(prompt_t **p);

/* prompt_history_len returns the template's H. */
int prompt_history_len(const prompt_t *p);

/* prompt_render renders the step's messages into *out (which the caller clears with
 * prompt_messages_clear). Returns 0, or SR_EINVAL when p, s or out is NULL. */
int prompt_render(const prompt_t *p, const prompt_state_t *s, prompt_messages_t *out);

/* prompt_render_into renders the step's messages into the caller's buffers (emptied first, kept
 * for reuse, each NUL-terminated past its len): the system text into system (left empty when
 * the template's system text is empty), the user text into user. Returns 0, or SR_EINVAL when an
 * argument is NULL. */
int prompt_render_into(const prompt_t *p, const prompt_state_t *s, sr_buf_t *system, sr_buf_t *user);

/* prompt_render_json_into renders as prompt_render_into does, each text written as the inside of
 * a JSON string: the bytes jsonw_strn writes between its quotes for prompt_render_into's texts
 * (a chat body takes them as they are: llm_message_t.content_json). */
int prompt_render_json_into(const prompt_t *p, const prompt_state_t *s, sr_buf_t *system,
                            sr_buf_t *user);

/* prompt_messages_clear frees both texts and nulls them. Accepts NULL. */
void prompt_messages_clear(prompt_messages_t *m);

#endif
