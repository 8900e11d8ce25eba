/*
 * store_int.h — what store.c shares with store_resp.c and nothing else includes.
 */
#ifndef SR_STORE_INT_H
#define SR_STORE_INT_H

#include <stddef.h>

/* store_format_argv formats argc binary-safe arguments (lens NULL: C strings) as one RESP command
 * into a new buffer (*cmd, freed by the caller) and returns its length, or -1 when out of memory
 * (store_resp.c). */
long store_format_argv(char **cmd, int argc, const char **argv, const size_t *lens);

/* store_resp_len writes "<c>N\r\n" (c '*' or '$') at p, at most 24 bytes, and returns its length
 * (store_resp.c). */
size_t store_resp_len(char *p, char c, size_t n);

#endif
