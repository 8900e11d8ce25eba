/*
 * extract.h — turns a model's answer into the action the environment is stepped with.
 *
 * The model is asked to answer "<think>...</think><action>...</action>". Extraction takes the
 * text of the last complete <action>...</action> pair, else the rest of the last line that starts
 * with "Action:", else the whole answer; normalises it (trim, lower-case, collapse inner
 * whitespace); then matches it to the admissible list: exactly, else to the closest admissible
 * action by character-level Levenshtein distance divided by the longer length, when that is at
 * most the threshold (EXTRACT_DEFAULT_MAX_DIST unless told otherwise). An answer that matches
 * nothing is passed on as is (normalised) and flagged as a format error; so is an answer without
 * an <action> tag, even when its action matched. docs/prompt.md has the rules with examples.
 */
#ifndef SR_EXTRACT_H
#define SR_EXTRACT_H

#include <stdbool.h>
#include <stddef.h>

/* The default fuzzy-match threshold: a normalised edit distance of at most 0.15 (about one typo
 * in seven characters) counts as the same action. */
#define EXTRACT_DEFAULT_MAX_DIST 0.15

/* Where the action text was found. */
typedef enum {
    EXTRACT_SRC_TAG = 0,      /* the last complete <action>...</action> pair */
    EXTRACT_SRC_UNCLOSED_TAG, /* an <action> tag without its closing tag (truncated answer) */
    EXTRACT_SRC_ACTION_LINE,  /* a line starting with "Action:" */
    EXTRACT_SRC_WHOLE_TEXT,   /* neither: the whole answer */
} extract_source_t;

/* How the action text was matched to the admissible list. */
typedef enum {
    EXTRACT_MATCH_EXACT = 0, /* equal after normalisation */
    EXTRACT_MATCH_FUZZY,     /* closest admissible action within the threshold */
    EXTRACT_MATCH_NONE,      /* passed on as is */
} extract_match_t;

typedef struct {
    char *action;            /* owned (or in the caller's room: extract_action_in): the
                              * admissible action (as listed) or the normalised text */
    int index;               /* index in the admissible list, -1 when unmatched */
    double distance;         /* normalised edit distance to the chosen action (0 when exact) */
    extract_source_t source;
    extract_match_t match;
    bool format_error;       /* no <action> tag, or no admissible action matched */
    bool in_room;            /* action is in the room given to extract_action_in */
} extract_result_t;

/* extract_action parses `text` (NULL is read as "") against `admissible` (n entries, NULL
 * entries are skipped) with threshold `max_dist` (a negative value selects
 * EXTRACT_DEFAULT_MAX_DIST) and fills *out, which the caller releases with
 * extract_result_clear(). Never fails on any text; returns 0, or SR_EINVAL when out is NULL. */
int extract_action(const char *text, const char *const *admissible, size_t n, double max_dist,
                   extract_result_t *out);

/* extract_action_in is extract_action with room (room_len bytes) for the action when it fits:
 * then out->action is there and out->in_room is set (valid as long as room; no allocation). */
int extract_action_in(const char *text, const char *const *admissible, size_t n, double max_dist,
                      extract_result_t *out, char *room, size_t room_len);

/* extract_result_clear frees the result's strings and zeroes it. Accepts NULL. */
void extract_result_clear(extract_result_t *r);

/* extract_normalise returns a new string: `s` trimmed, lower-cased (ASCII), with every run of
 * inner whitespace collapsed to one space. The caller frees it. NULL is read as "". */
char *extract_normalise(const char *s);

/* extract_distance returns the character-level Levenshtein distance between a and b divided by
 * the longer length (0 for two empty strings, 1 at most). */
double extract_distance(const char *a, const char *b);

#endif
