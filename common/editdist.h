/*
 * editdist.h — the prefix-divergence measure of the gate (DESIGN §4).
 *
 * A token is one whole environment action, normalised (trimmed, lower-case, inner whitespace
 * collapsed to one space). Two actions are the same token when their normalised strings are
 * equal. An interner maps normalised strings to small integer ids so the distance runs over
 * uint32 arrays; id 0 (EDITDIST_END) is reserved for <END>, the padding of ended episodes.
 *
 * d_K = mean over all C(G,2) pairs of Levenshtein(a[:K], b[:K]) / K, every sequence cut to K
 * tokens or padded with <END> up to K. The result lies in [0, 1]. For K <= EDITDIST_FAST_K the
 * computation allocates nothing.
 */
#ifndef SR_EDITDIST_H
#define SR_EDITDIST_H

#include <stddef.h>
#include <stdint.h>

/* EDITDIST_END is the token id of <END>; the interner never hands it out for a real action. */
#define EDITDIST_END 0u
#define EDITDIST_END_TEXT "<END>"
/* EDITDIST_FAST_K is the largest K for which no heap memory is used. */
#define EDITDIST_FAST_K 64

/* editdist_normalize writes the normalised form of `action` (trimmed, ASCII lower-case, runs of
 * whitespace inside collapsed to one space) into out, NUL-terminated. Returns its length, or
 * SR_ETOOBIG when out cannot hold it (out then holds a truncated prefix), SR_EINVAL when action
 * or out is NULL or cap is 0. */
int editdist_normalize(const char *action, char *out, size_t cap);

/* editdist_normalize_dup returns the normalised form of action as a new string the caller
 * frees, or NULL when action is NULL. */
char *editdist_normalize_dup(const char *action);

typedef struct editdist_interner editdist_interner_t;

/* editdist_interner_new returns an empty interner, or NULL when out of memory. */
editdist_interner_t *editdist_interner_new(void);

/* editdist_interner_destroy frees the interner and its copies of the strings; accepts NULL and
 * a pointer to NULL, and sets *self_p to NULL. */
void editdist_interner_destroy(editdist_interner_t **self_p);

/* editdist_intern returns the id of the string s taken as it is (already normalised), adding it
 * when new. Ids start at 1 and are dense. The interner keeps its own copy of s. Returns
 * EDITDIST_END when s is NULL or equals "<END>". */
uint32_t editdist_intern(editdist_interner_t *it, const char *s);

/* editdist_intern_action normalises action and interns the result (see editdist_intern). */
uint32_t editdist_intern_action(editdist_interner_t *it, const char *action);

/* editdist_interner_string returns the string of id (EDITDIST_END gives "<END>"), or NULL for an
 * unknown id. The pointer stays valid until the interner is destroyed. */
const char *editdist_interner_string(const editdist_interner_t *it, uint32_t id);

/* editdist_interner_count returns the number of distinct strings interned. */
size_t editdist_interner_count(const editdist_interner_t *it);

/* editdist_levenshtein returns the edit distance (unit insert, delete, substitute) between the
 * token arrays a[0..na) and b[0..nb). NULL arrays are allowed when their length is 0. */
size_t editdist_levenshtein(const uint32_t *a, size_t na, const uint32_t *b, size_t nb);

/* editdist_prefix_divergence returns d_K over G sequences: seqs[i] has lens[i] tokens (it may
 * be longer than K: only the first K count; shorter ones are padded with EDITDIST_END).
 * Returns 0.0 when G < 2 or K == 0, and a negative SR_E* code (as a double) when seqs or lens
 * is NULL or a sequence pointer is NULL with a non-zero length. */
double editdist_prefix_divergence(const uint32_t *const *seqs, const size_t *lens, size_t G,
                                  size_t K);

/* editdist_prefix_divergence_strs is editdist_prefix_divergence over raw action strings:
 * actions[i] is an array of lens[i] strings, each normalised before comparison. Same returns. */
double editdist_prefix_divergence_strs(const char *const *const *actions, const size_t *lens,
                                       size_t G, size_t K);

#endif
