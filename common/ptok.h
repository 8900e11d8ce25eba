/*
 * ptok.h — the built-in policy server's tokenizer: a fixed, documented vocabulary whose ids
 * decode back to the exact text (docs/policy.md, "Tokenizer").
 *
 * A token is an optional one-character prefix (none, a space or a newline) followed by a core:
 * either one byte (any of 256: punctuation, other whitespace, each byte of a non-ASCII character)
 * or a piece of 1..4 ASCII letters and digits. Text is cut greedily from the left: a space or a
 * newline directly before a non-whitespace character becomes that token's prefix, an alphanumeric
 * run is cut into pieces of 4 (the last shorter), anything else is a byte. Every text has exactly
 * one encoding and every id below PTOK_VOCAB exactly one decoding, so encode(decode(ids)) == ids
 * and decode(encode(text)) == text.
 *
 * Ids: id = prefix * PTOK_CORES + core, prefix 0 (none), 1 (space), 2 (newline); core 0..255 is
 * the byte, core 256 + k the k-th piece in the order of length then base-62 value over
 * "0-9A-Za-z" (k = offset(len) + value, offset(1) = 0, offset(2) = 62, offset(3) = 3906,
 * offset(4) = 242234).
 */
#ifndef SR_PTOK_H
#define SR_PTOK_H

#include <stddef.h>
#include <stdint.h>

#define PTOK_PIECES (62 + 62 * 62 + 62 * 62 * 62 + 62 * 62 * 62 * 62) /* 15018570 */
#define PTOK_CORES (256 + PTOK_PIECES)
#define PTOK_VOCAB (3 * PTOK_CORES) /* 45056478: every id is below it */

/* ptok_encode tokenises len bytes of text. With ids NULL it only counts; otherwise it writes at
 * most cap ids. Returns the number of tokens of the whole text (which may exceed cap). */
size_t ptok_encode(const char *text, size_t len, int32_t *ids, size_t cap);

/* ptok_count returns the number of tokens of the NUL-terminated text (0 for NULL). */
size_t ptok_count(const char *text);

/* ptok_turn_count returns how many tokens the turn "<|role|>\ntext\n" adds to a rendered chat
 * prompt in which the next thing is another turn or "<|assistant|>\n" (both start with '<', so
 * the turn's last newline is that token's prefix): ptok_encode of the whole prompt equals the sum
 * over its turns plus ptok_count("<|assistant|>\n"). Text need not be rendered for it. */
size_t ptok_turn_count(const char *role, const char *text, size_t text_len);

/* ptok_count_words returns ptok_count(text) and, in one pass, sets *words to
 * policy_server_tokens(text) (policy/policy_server.h: runs of letters and digits by 4, other bytes
 * but whitespace one each) and *len to strlen(text). NULL text: 0 of each. */
size_t ptok_count_words(const char *text, int *words, size_t *len);

/* ptok_turn_tokens is ptok_turn_count for a text whose ptok_count is text_tokens and whose first
 * byte is first ('\0' for an empty text). */
size_t ptok_turn_tokens(const char *role, char first, size_t text_tokens);

/* ptok_piece writes the text of one id into buf (at least 8 bytes) and returns its length, or -1
 * for an id outside 0..PTOK_VOCAB-1. The text is not NUL-terminated when it is a NUL byte. */
int ptok_piece(int32_t id, char *buf);

/* ptok_decode decodes n ids into a new NUL-terminated string (*len bytes, which may hold NULs)
 * the caller frees. Returns NULL when an id is out of range. */
char *ptok_decode(const int32_t *ids, size_t n, size_t *len);

#endif
