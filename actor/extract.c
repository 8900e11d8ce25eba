/*
 * extract.c — action extraction from a model's answer; see extract.h for the rules.
 *
 * Everything here is a pure function over strings, so each rule is tested on literal answers.
 * The edit distance is a small two-row Levenshtein over bytes; candidates whose length alone
 * puts them past the threshold are skipped without computing it.
 */
#include "actor/extract.h"

#include "common/sr.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Answers longer than this are cut before normalisation: no admissible action is that long. */
#define S_MAX_CANDIDATE 4096

static const char S_OPEN[] = "<action>";
static const char S_CLOSE[] = "</action>";

/* s_find_lt returns the first case-insensitive occurrence of needle (which starts with '<') in
 * s, or NULL: strcasestr, with strchr doing the scanning. */
static const char *s_find_lt(const char *s, const char *needle)
{
    size_t n = strlen(needle);
    for (const char *q = strchr(s, '<'); q; q = strchr(q + 1, '<'))
        if (strncasecmp(q, needle, n) == 0)
            return q;
    return NULL;
}

/* s_find_tag finds the last complete <action>...</action> pair in text (tags in any case). When
 * there is none but an opening tag exists, it returns the text after the last opening tag and
 * sets *unclosed. Returns false when there is no opening tag at all. */
static bool s_find_tag(const char *text, const char **start, size_t *len, bool *unclosed)
{
    const char *best = NULL, *best_end = NULL, *last_open = NULL;
    const char *p = text;
    const char *open;
    while ((open = s_find_lt(p, S_OPEN)) != NULL) {
        const char *body = open + sizeof S_OPEN - 1;
        const char *close = s_find_lt(body, S_CLOSE);
        last_open = body;
        if (close) {
            best = body;
            best_end = close;
            p = close + sizeof S_CLOSE - 1;
        } else {
            break;
        }
    }
    *unclosed = false;
    if (best) {
        *start = best;
        *len = (size_t)(best_end - best);
        return true;
    }
    if (last_open) {
        *start = last_open;
        *len = strlen(last_open);
        *unclosed = true;
        return true;
    }
    return false;
}

/* s_find_action_line finds the last line whose first non-blank characters are "Action:" (any
 * case) and returns the rest of that line. */
static bool s_find_action_line(const char *text, const char **start, size_t *len)
{
    bool found = false;
    const char *line = text;
    while (*line) {
        const char *eol = strchr(line, '\n');
        const char *end = eol ? eol : line + strlen(line);
        const char *q = line;
        while (q < end && (*q == ' ' || *q == '\t'))
            q++;
        if ((size_t)(end - q) >= 7 && strncasecmp(q, "action:", 7) == 0) {
            *start = q + 7;
            *len = (size_t)(end - (q + 7));
            found = true;
        }
        if (!eol)
            break;
        line = eol + 1;
    }
    return found;
}

/* s_normalise walks the first n bytes of s (at most S_MAX_CANDIDATE) lower-cased, with runs of
 * white space made one space and none at either end. With out, it writes them there (n + 1 bytes
 * at least, NUL-terminated); with cmp, it compares them with cmp as it goes and says whether they
 * equal it whole. */
/* isspace and tolower of the C locale (selroll never changes it), without a call a byte. */
static inline bool s_space(unsigned char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r');
}

static inline char s_lower(unsigned char c)
{
    return (char)(c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c);
}

static bool s_normalise(const char *s, size_t n, char *out, const char *cmp)
{
    if (n > S_MAX_CANDIDATE)
        n = S_MAX_CANDIDATE;
    size_t o = 0;
    bool pending_space = false;
    for (size_t i = 0; i < n && s[i]; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (s_space(ch)) {
            pending_space = o > 0;
            continue;
        }
        if (pending_space) {
            if (cmp && cmp[o] != ' ')
                return false;
            if (out)
                out[o] = ' ';
            o++;
            pending_space = false;
        }
        char c = s_lower(ch);
        if (cmp && cmp[o] != c)
            return false;
        if (out)
            out[o] = c;
        o++;
    }
    if (out)
        out[o] = '\0';
    return !cmp || cmp[o] == '\0';
}

/* s_norm_equal tells whether a, normalised, equals cand (a normalised text, as s_normalise with
 * cmp tells it). The bytes a shares with cand as they stand are compared first; when the first
 * byte that differs is no space and no capital (nor past S_MAX_CANDIDATE), that settles it:
 * normalising the shared bytes gives them back, and the byte after them as it is. Else
 * s_normalise decides. */
static bool s_norm_equal(const char *a, const char *cand)
{
    size_t k = 0;
    while (a[k] == cand[k] && a[k])
        k++;
    unsigned char c = (unsigned char)a[k];
    if (c == cand[k])
        return true; /* a is cand: normalised already */
    if (k < S_MAX_CANDIDATE && !s_space(c) && !(c >= 'A' && c <= 'Z'))
        return false;
    return s_normalise(a, SIZE_MAX, NULL, cand);
}

static char *s_normalise_n(const char *s, size_t n)
{
    char *out = sr_xmalloc((n > S_MAX_CANDIDATE ? S_MAX_CANDIDATE : n) + 1);
    s_normalise(s, n, out, NULL);
    return out;
}

char *extract_normalise(const char *s)
{
    if (!s)
        s = "";
    return s_normalise_n(s, strlen(s));
}

/* Rows of up to this many columns (+1) are kept on the stack. */
#define S_LEV_STACK 256

/* s_lev64: the edit distance between a (1..64 bytes) and b, bit-parallel (Myers 1999, in
 * Hyyro's form for the global distance): a column of the table is kept as its vertical steps
 * (+1 in pv, -1 in mv, one bit a row of a), updated a byte of b at a time in a few word
 * operations; the score follows the last row. The same number the table gives. */
static size_t s_lev64(const char *a, size_t la, const char *b, size_t lb)
{
    uint64_t peq[256];
    memset(peq, 0, sizeof peq);
    for (size_t i = 0; i < la; i++)
        peq[(unsigned char)a[i]] |= (uint64_t)1 << i;
    uint64_t pv = ~(uint64_t)0, mv = 0, last = (uint64_t)1 << (la - 1);
    size_t score = la;
    for (size_t j = 0; j < lb; j++) {
        uint64_t eq = peq[(unsigned char)b[j]];
        uint64_t xv = eq | mv;
        uint64_t xh = (((eq & pv) + pv) ^ pv) | eq;
        uint64_t ph = mv | ~(xh | pv);
        uint64_t mh = pv & xh;
        if (ph & last)
            score++;
        else if (mh & last)
            score--;
        ph = (ph << 1) | 1; /* the first row grows by one a column */
        mh <<= 1;
        pv = mh | ~(xv | ph);
        mv = ph & xv;
    }
    return score;
}

/* s_levenshtein: edit distance between a (la bytes) and b (lb bytes): bit-parallel when either
 * is at most 64 bytes long, else the table in two rows. */
static size_t s_levenshtein(const char *a, size_t la, const char *b, size_t lb)
{
    if (la == 0)
        return lb;
    if (lb == 0)
        return la;
    if (la <= 64)
        return s_lev64(a, la, b, lb);
    if (lb <= 64)
        return s_lev64(b, lb, a, la);
    size_t room[2 * (S_LEV_STACK + 1)]; /* the rows of a short b, on the stack */
    size_t *prev = lb <= S_LEV_STACK ? room : sr_xmalloc((lb + 1) * sizeof *prev);
    size_t *cur = lb <= S_LEV_STACK ? room + S_LEV_STACK + 1 : sr_xmalloc((lb + 1) * sizeof *cur);
    for (size_t j = 0; j <= lb; j++)
        prev[j] = j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
            size_t del = prev[j] + 1;
            size_t ins = cur[j - 1] + 1;
            size_t m = sub < del ? sub : del;
            cur[j] = m < ins ? m : ins;
        }
        size_t *t = prev;
        prev = cur;
        cur = t;
    }
    size_t d = prev[lb];
    if (lb > S_LEV_STACK) {
        free(prev);
        free(cur);
    }
    return d;
}

double extract_distance(const char *a, const char *b)
{
    if (!a)
        a = "";
    if (!b)
        b = "";
    size_t la = strlen(a), lb = strlen(b);
    size_t longer = la > lb ? la : lb;
    if (longer == 0)
        return 0.0;
    return (double)s_levenshtein(a, la, b, lb) / (double)longer;
}

int extract_action(const char *text, const char *const *admissible, size_t n, double max_dist,
                   extract_result_t *out)
{
    return extract_action_in(text, admissible, n, max_dist, out, NULL, 0);
}

int extract_action_in(const char *text, const char *const *admissible, size_t n, double max_dist,
                      extract_result_t *out, char *room, size_t room_len)
{
    if (!out)
        return SR_EINVAL;
    memset(out, 0, sizeof *out);
    out->index = -1;
    if (!text)
        text = "";
    if (max_dist < 0)
        max_dist = EXTRACT_DEFAULT_MAX_DIST;

    const char *start = text;
    size_t len = strlen(text);
    bool unclosed = false;
    if (s_find_tag(text, &start, &len, &unclosed)) {
        out->source = unclosed ? EXTRACT_SRC_UNCLOSED_TAG : EXTRACT_SRC_TAG;
    } else if (s_find_action_line(text, &start, &len)) {
        out->source = EXTRACT_SRC_ACTION_LINE;
    } else {
        start = text;
        len = strlen(text);
        out->source = EXTRACT_SRC_WHOLE_TEXT;
    }
    char *cand;
    size_t cap = len > S_MAX_CANDIDATE ? S_MAX_CANDIDATE : len; /* the candidate's bytes */
    if (room && room_len > cap) { /* the caller's memory: no allocation */
        cand = room;
        s_normalise(start, len, cand, NULL);
        out->in_room = true;
    } else {
        cand = s_normalise_n(start, len);
    }
    size_t lc = strlen(cand);

    int best = -1;
    double best_d = 2.0;
    /* The usual case, an exact match, first: no copy of each admissible action. */
    bool exact = false;
    for (size_t i = 0; i < n && admissible && !exact; i++) {
        if (admissible[i] && s_norm_equal(admissible[i], cand)) {
            best = (int)i;
            best_d = 0.0;
            exact = true;
        }
    }
    char a[S_MAX_CANDIDATE + 1]; /* each admissible action normalised, in turn */
    for (size_t i = 0; !exact && i < n && admissible; i++) {
        if (!admissible[i])
            continue;
        s_normalise(admissible[i], strlen(admissible[i]), a, NULL);
        size_t la = strlen(a);
        if (strcmp(a, cand) == 0) {
            best = (int)i;
            best_d = 0.0;
            break;
        }
        size_t longer = la > lc ? la : lc;
        size_t gap = la > lc ? la - lc : lc - la;
        /* The distance is at least the length gap: skip what cannot come within the threshold. */
        if (longer > 0 && (double)gap / (double)longer <= max_dist) {
            double d = (double)s_levenshtein(a, la, cand, lc) / (double)longer;
            if (d < best_d) {
                best_d = d;
                best = (int)i;
            }
        }
    }

    if (best >= 0 && best_d == 0.0) {
        out->match = EXTRACT_MATCH_EXACT;
    } else if (best >= 0 && best_d <= max_dist) {
        out->match = EXTRACT_MATCH_FUZZY;
    } else {
        best = -1;
        out->match = EXTRACT_MATCH_NONE;
    }
    if (best >= 0) {
        /* the action as listed, in the candidate's memory when it fits (the usual exact match) */
        size_t la = strlen(admissible[best]);
        if (la <= cap) {
            memcpy(cand, admissible[best], la + 1);
            out->action = cand;
        } else {
            out->action = sr_xstrdup(admissible[best]);
            if (!out->in_room)
                free(cand);
            out->in_room = false;
        }
        out->index = best;
        out->distance = best_d;
    } else {
        out->action = cand;
        out->distance = best_d > 1.0 ? 1.0 : best_d;
    }
    out->format_error = out->source != EXTRACT_SRC_TAG || out->match == EXTRACT_MATCH_NONE;
    return SR_OK;
}

void extract_result_clear(extract_result_t *r)
{
    if (!r)
        return;
    if (!r->in_room)
        free(r->action);
    memset(r, 0, sizeof *r);
    r->index = -1;
}
