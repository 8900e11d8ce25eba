/*
 * fail_tally.c — counting failed trajectories by error text, and the stop verdict (fail_tally.h).
 *
 * Texts are compared after the same cut (first line, FAIL_TALLY_TEXT_MAX - 1 bytes, never inside
 * a UTF-8 sequence), so two failures whose messages differ only past the cut count as one.
 */
#include "coordinator/fail_tally.h"

#include <stdio.h>
#include <string.h>

void fail_tally_reset(fail_tally_t *t)
{
    if (t)
        memset(t, 0, sizeof *t);
}

/* s_cut copies the first line of s, at most cap - 1 bytes and no partial UTF-8 sequence. */
static void s_cut(const char *s, char *out, size_t cap)
{
    size_t n = strcspn(s, "\r\n");
    if (n > cap - 1) {
        n = cap - 1;
        while (n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80)
            n--; /* s[n] continues a sequence: cut before the sequence starts */
    }
    memcpy(out, s, n);
    out[n] = '\0';
}

static void s_add_n(fail_tally_t *t, const char *error, int64_t n)
{
    char text[FAIL_TALLY_TEXT_MAX];
    s_cut(error && *error ? error : "no reason given", text, sizeof text);
    t->failed += n;
    for (size_t i = 0; i < t->n; i++)
        if (strcmp(t->text[i], text) == 0) {
            t->count[i] += n;
            return;
        }
    if (t->n == FAIL_TALLY_TEXTS)
        return;
    memcpy(t->text[t->n], text, sizeof text);
    t->count[t->n++] = n;
}

void fail_tally_add(fail_tally_t *t, const char *error)
{
    if (t)
        s_add_n(t, error, 1);
}

void fail_tally_merge(fail_tally_t *dst, const fail_tally_t *src)
{
    if (!dst || !src)
        return;
    int64_t kept = 0;
    for (size_t i = 0; i < src->n; i++) {
        s_add_n(dst, src->text[i], src->count[i]);
        kept += src->count[i];
    }
    dst->failed += src->failed - kept; /* failures whose text src could not keep */
}

const char *fail_tally_top(const fail_tally_t *t, int64_t *count)
{
    size_t best = 0;
    for (size_t i = 1; t && i < t->n; i++)
        if (t->count[i] > t->count[best])
            best = i;
    if (!t || t->n == 0) {
        if (count)
            *count = 0;
        return NULL;
    }
    if (count)
        *count = t->count[best];
    return t->text[best];
}

bool fail_tally_trips(int64_t failed, int64_t total, double max_share)
{
    if (failed <= 0 || total <= 0)
        return false;
    return failed >= total || (double)failed / (double)total > max_share;
}

bool fail_tally_verdict(const fail_tally_t *t, int64_t total, double max_share, const char *what,
                        char *buf, size_t len)
{
    if (!t || !fail_tally_trips(t->failed, total, max_share))
        return false;
    int64_t k = 0;
    const char *top = fail_tally_top(t, &k);
    if (buf && len > 0)
        snprintf(buf, len, "%s: %lld of %lld trajectories failed; most frequent error (%lldx): %s",
                 what ? what : "run", (long long)t->failed, (long long)total, (long long)k,
                 top ? top : "no reason given");
    return true;
}
