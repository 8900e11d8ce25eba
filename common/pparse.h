/*
 * pparse.h — reads the state of a household episode back out of the text of a chat request.
 *
 * The built-in policy sees only what an LLM would see: the messages of the request. This module
 * parses the default prompt format (docs/prompt.md, docs/policy.md) into a pparse_state_t: the
 * goal and what it asks for (task type, goal object type, goal receptacle type), the last actions
 * of the visible history with the observations around them, the current observation and the
 * admissible actions. From those texts it also derives what an attentive reader would know: where
 * the agent stands, what it holds, whether the receptacle in front of it is closed, and whether
 * the goal object has already been cleaned, heated or cooled in the visible window.
 *
 * Parsing never fails on odd input: a prompt in another template still yields a state (possibly
 * without a goal or without admissible actions); the caller decides what to answer then.
 */
#ifndef SR_POLICY_PROMPT_PARSE_H
#define SR_POLICY_PROMPT_PARSE_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

#define PPARSE_MAX_ACTIONS 256 /* admissible actions kept; the rest are dropped */
#define PPARSE_MAX_HIST 8      /* history entries kept (the newest ones) */
#define PPARSE_NAME_MAX 48     /* "cabinet 13", "apple 1", type names */

typedef enum {
    PPARSE_TASK_UNKNOWN = 0,
    PPARSE_TASK_PICK,  /* pick_and_place_simple */
    PPARSE_TASK_LOOK,  /* look_at_obj_in_light */
    PPARSE_TASK_CLEAN, /* pick_clean_then_place_in_recep */
    PPARSE_TASK_HEAT,  /* pick_heat_then_place_in_recep */
    PPARSE_TASK_COOL,  /* pick_cool_then_place_in_recep */
    PPARSE_TASK_TWO,   /* pick_two_obj_and_place */
    PPARSE_TASK_COUNT
} pparse_task_t;

/* One visible history entry: the observation the action was taken at, and the action. */
typedef struct {
    char *obs;
    char *action;
} pparse_hist_t;

typedef struct {
    /* Straight from the text. Strings are owned by the state; NULL when absent. */
    char *goal; /* "put a clean lettuce in diningtable" (no final period) */
    pparse_task_t task;
    char goal_obj[PPARSE_NAME_MAX];   /* object type, e.g. "lettuce"; "" when unknown */
    char goal_recep[PPARSE_NAME_MAX]; /* receptacle type, or the lamp type for look tasks */
    int n_prev;                       /* steps taken before this one (0 at the first step) */
    pparse_hist_t hist[PPARSE_MAX_HIST];
    int n_hist; /* oldest first */
    char *current_obs;
    char *actions[PPARSE_MAX_ACTIONS]; /* the listed ones, then the agent's own phrasings */
    int n_actions;
    int n_listed; /* actions[0 .. n_listed) are the admissible list's; after them, for each listed
                     "move O to R", the "put O in R" of older ALFWorld wording that an LLM trained
                     on it may write instead (the environment answers "Nothing happens.") */
    bool found_admissible; /* the admissible-list marker was present */

    /* Derived from the texts. */
    char location[PPARSE_NAME_MAX]; /* receptacle the agent stands at ("cabinet 3"), "" mid-room */
    char holding[PPARSE_NAME_MAX];  /* object held ("apple 1"), "" when the hands look empty */
    bool at_closed;                 /* the current observation says the location "is closed" */
    bool processed;                 /* the goal object was cleaned/heated/cooled in the window */
    char prev_location[PPARSE_NAME_MAX]; /* the receptacle the agent stood at before, if visible */
    char lamp_seen_at[PPARSE_NAME_MAX];  /* a receptacle where a lamp of the goal type was seen */
    char goal_seen_at[PPARSE_NAME_MAX];  /* a receptacle where a goal-type object was seen */
    const char *room; /* "kitchen", "bathroom", "bedroom", "livingroom" from the receptacles the
                         prompt names (static string); "room" when none gives it away */
    uint64_t task_key; /* hash of the goal sentence and the set of receptacles the prompt names:
                          the same at every step of every episode of one task, whatever the
                          history window shows; 0 without a goal */
    bool goal_take_here; /* a "take O from R" of the goal object type is admissible (R not of
                            the goal receptacle type, but in look tasks) */
    void *mem; /* the memory of the strings above: blocks that pparse_state_clear frees */
} pparse_state_t;

/* pparse_user_text parses one user message in the default format into *st, which it first
 * clears. Unknown formats leave fields empty. Returns 0, or SR_EINVAL when text or st is NULL.
 * The caller owns st's strings afterwards and releases them with pparse_state_clear. */
int pparse_user_text(const char *text, pparse_state_t *st);

/* pparse_state_clear frees the strings a parse stored in st and zeroes it. NULL is a no-op. */
void pparse_state_clear(pparse_state_t *st);

/* pparse_goal reads a goal sentence ("put a clean lettuce in diningtable.", with or without the
 * final period) into its task type, object type and receptacle (or lamp) type. Returns the task
 * type; PPARSE_TASK_UNKNOWN when no goal template matches (obj and recep are then ""). */
pparse_task_t pparse_goal(const char *goal, char obj[PPARSE_NAME_MAX], char recep[PPARSE_NAME_MAX]);

/* pparse_task_name returns the ALFWorld name of a task type ("pick_and_place_simple", ...). */
const char *pparse_task_name(pparse_task_t t);

/* pparse_type_of copies the type part of an object or receptacle name ("cabinet 13" -> "cabinet")
 * into out (at most outlen bytes, terminated) and returns the instance number, or 0 when the name
 * carries none. */
int pparse_type_of(const char *name, char *out, size_t outlen);

/* pparse_hash64 is FNV-1a over the NUL-terminated s with a final mix, its start offset moved by
 * seed (0 = standard FNV-1a): task keys here, feature names in the model (model_hash64). */
uint64_t pparse_hash64(const char *s, uint64_t seed);

/* pparse_cat writes the NUL-terminated strings that follow cap (up to a NULL) one after another
 * into out, as snprintf(out, cap, "%s%s...", ...) writes them: cut to cap - 1 bytes, terminated.
 * Returns the bytes written. The feature and reasoning texts of the model are put together with it
 * on every request, without printf's format parsing. */
size_t pparse_cat(char *out, size_t cap, ...);

/* pparse_strcmp and pparse_strncmp are strcmp and strncmp (the same sign, the same stop at the
 * first difference or NUL), inline: the parse and the model compare short names with them many
 * times a request, where a call costs more than the bytes it reads. */
static inline int pparse_strcmp(const char *a, const char *b)
{
    for (;; a++, b++) {
        unsigned char x = (unsigned char)*a, y = (unsigned char)*b;
        if (x != y)
            return x < y ? -1 : 1;
        if (!x)
            return 0;
    }
}

static inline int pparse_strncmp(const char *a, const char *b, size_t n)
{
    for (; n; n--, a++, b++) {
        unsigned char x = (unsigned char)*a, y = (unsigned char)*b;
        if (x != y)
            return x < y ? -1 : 1;
        if (!x)
            return 0;
    }
    return 0;
}

#endif
