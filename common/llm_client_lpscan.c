/*
 * llm_client_lpscan.c — the light scanner of a chat response's per-token logprobs: reads them
 * from the raw bytes without a cJSON tree (llm_lp_scan; llm_client_json.c parses the rest).
 */
#include "common/llm_client_int.h"

#include "common/jsonscan.h"
#include "common/jsonw.h"
#include "common/sr.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_SCAN_IDS (1 << 24) /* more ids than this are left to the JSON parser */

/* ---- light scanner of logprobs.content -----------------------------------------------------
 * A response with per-token logprobs holds one small object per completion token; a cJSON tree
 * of them costs the actor more than the rest of the response. llm_lp_scan finds the first choice's
 * "logprobs" value in the raw bytes and reads each content entry's "logprob" and "token" without
 * a tree; the cJSON parse then sees that value as null. Anything the scanner does not understand
 * leaves the body to the cJSON path. */

/* s_key_val returns the value of key (first occurrence, plain ASCII name) in the object at p. */
static const char *s_key_val(const char *p, const char *e, const char *key)
{
    p = jsonscan_ws(p, e);
    if (p >= e || *p != '{')
        return NULL;
    size_t kl = strlen(key);
    p = jsonscan_ws(p + 1, e);
    while (p < e && *p == '"') {
        const char *ke = jsonscan_str_end(p, e);
        if (!ke)
            return NULL;
        bool match = (size_t)(ke - p) == kl + 2 && memcmp(p + 1, key, kl) == 0;
        p = jsonscan_ws(ke, e);
        if (p >= e || *p != ':')
            return NULL;
        p = jsonscan_ws(p + 1, e);
        if (match)
            return p < e ? p : NULL; /* a key with nothing after its colon has no value */
        if (!(p = jsonscan_value_end(p, e)))
            return NULL;
        p = jsonscan_ws(p, e);
        if (p < e && *p == ',')
            p = jsonscan_ws(p + 1, e);
        else
            return NULL;
    }
    return NULL;
}

/* s_fast_num reads the JSON number [p, e) as strtod would when that is exact in a few steps:
 * at most 15 significant digits and a power of ten within 10^22 (both exact doubles, so one
 * multiplication or division rounds correctly, as strtod does). False: use strtod. */
static bool s_fast_num(const char *p, const char *e, double *out)
{
    static const double p10[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                   1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                   1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
    bool neg = p < e && *p == '-';
    p += neg;
    uint64_t mant = 0;
    int digits = 0, scale = 0;
    const char *d0 = p;
    for (; p < e && *p >= '0' && *p <= '9'; p++) {
        if (mant || *p != '0')
            digits++;
        mant = mant * 10 + (uint64_t)(*p - '0');
        if (digits > 15)
            return false;
    }
    if (p == d0 || (p - d0 > 1 && *d0 == '0'))
        return false;
    if (p < e && *p == '.') {
        const char *f0 = ++p;
        for (; p < e && *p >= '0' && *p <= '9'; p++) {
            if (mant || *p != '0')
                digits++;
            mant = mant * 10 + (uint64_t)(*p - '0');
            scale--;
            if (digits > 15)
                return false;
        }
        if (p == f0)
            return false;
    }
    if (p != e || scale < -22) /* exponents and the rest: strtod */
        return false;
    double x = (double)mant / p10[-scale];
    *out = neg ? -x : x;
    return true;
}

/* s_ids_scan reads the JSON array at p ('[') of integers in 0..INT32_MAX written as plain digits
 * into a new array (*ids, *n) and returns the byte after it; NULL (nothing kept) for any other
 * form, left to the JSON parser. */
static const char *s_ids_scan(const char *p, const char *e, int32_t **ids, size_t *n)
{
    size_t cap = 64, k = 0;
    int32_t *v = sr_xmalloc(cap * sizeof *v);
    p = jsonscan_ws(p + 1, e);
    while (p < e && *p >= '0' && *p <= '9') {
        uint64_t x = 0;
        const char *d0 = p;
        for (; p < e && *p >= '0' && *p <= '9' && p - d0 <= 10; p++)
            x = x * 10 + (uint64_t)(*p - '0');
        if (x > INT32_MAX || (p - d0 > 1 && *d0 == '0') || k >= S_MAX_SCAN_IDS)
            break;
        if (k == cap) {
            cap *= 2;
            v = sr_xrealloc(v, cap * sizeof *v);
        }
        v[k++] = (int32_t)x;
        p = jsonscan_ws(p, e);
        if (p < e && *p == ',') {
            p = jsonscan_ws(p + 1, e);
            continue;
        }
        if (p < e && *p == ']') {
            *ids = v;
            *n = k;
            return p + 1;
        }
        break;
    }
    free(v);
    return NULL;
}

/* s_lp_entry reads one content entry {token, logprob, ...} at p; returns the byte after it. */
static const char *s_lp_entry(const char *p, const char *e, llm_lpscan_t *sc, size_t k)
{
    p = jsonscan_ws(p, e);
    if (p >= e || *p != '{')
        return NULL;
    bool got_id = false;
    p = jsonscan_ws(p + 1, e);
    if (p < e && *p == '}')
        goto done;
    for (;;) {
        if (p >= e || *p != '"')
            return NULL;
        const char *ke = jsonscan_str_end(p, e);
        if (!ke)
            return NULL;
        size_t kl = (size_t)(ke - p) - 2;
        const char *key = p + 1;
        p = jsonscan_ws(ke, e);
        if (p >= e || *p != ':')
            return NULL;
        p = jsonscan_ws(p + 1, e);
        const char *ve = jsonscan_value_end(p, e);
        if (!ve)
            return NULL;
        if (kl == 7 && memcmp(key, "logprob", 7) == 0 && (*p == '-' || isdigit((unsigned char)*p))) {
            double x;
            if (!s_fast_num(p, ve, &x)) {
                char num[64];
                size_t nl = (size_t)(ve - p);
                if (nl >= sizeof num)
                    return NULL;
                memcpy(num, p, nl);
                num[nl] = '\0';
                char *ne;
                x = strtod(num, &ne);
                if (*ne)
                    return NULL;
            }
            sc->sum += x;
            sc->any = true;
            sc->lp[k] = (float)(x < -1e30 ? -1e30 : x > 0 ? 0 : x);
        } else if (kl == 5 && memcmp(key, "token", 5) == 0 && *p == '"' && ve - p > 11 &&
                   memcmp(p + 1, "token_id:", 9) == 0) {
            long long v = 0;
            const char *d = p + 10;
            for (; d < ve - 1 && isdigit((unsigned char)*d) && v <= INT32_MAX; d++)
                v = v * 10 + (*d - '0');
            if (d == ve - 1 && d > p + 10 && v <= INT32_MAX) {
                sc->ids[k] = (int32_t)v;
                got_id = true;
            }
        }
        p = jsonscan_ws(ve, e);
        if (p < e && *p == ',') {
            p = jsonscan_ws(p + 1, e);
            continue;
        }
        if (p < e && *p == '}')
            break;
        return NULL;
    }
done:
    if (!got_id)
        sc->all_ids = false;
    return p + 1;
}

/* s_lp_content reads the content array at p ('[') into sc and returns the byte after it, or
 * NULL (sc's arrays then hold nothing usable). */
static const char *s_lp_content(const char *p, const char *e, llm_lpscan_t *sc)
{
    size_t cap = 64;
    sc->all_ids = true;
    sc->lp = sr_xcalloc(cap, sizeof *sc->lp);
    sc->ids = sr_xcalloc(cap, sizeof *sc->ids);
    p = jsonscan_ws(p + 1, e);
    if (p < e && *p == ']')
        return p + 1;
    for (;;) {
        if (sc->n == cap) {
            cap *= 2;
            sc->lp = sr_xrealloc(sc->lp, cap * sizeof *sc->lp);
            sc->ids = sr_xrealloc(sc->ids, cap * sizeof *sc->ids);
            memset(sc->lp + sc->n, 0, (cap - sc->n) * sizeof *sc->lp);
            memset(sc->ids + sc->n, 0, (cap - sc->n) * sizeof *sc->ids);
        }
        if (!(p = s_lp_entry(p, e, sc, sc->n)))
            return NULL;
        sc->n++;
        p = jsonscan_ws(p, e);
        if (p < e && *p == ',') {
            p = jsonscan_ws(p + 1, e);
            continue;
        }
        return p < e && *p == ']' ? p + 1 : NULL;
    }
}

/* s_lp_obj reads the logprobs object at p ('{'): its first "content" array into sc; returns the
 * byte after the object, or NULL when it is not in the shape read here. */
static const char *s_lp_obj(const char *p, const char *e, llm_lpscan_t *sc)
{
    bool seen = false, ok = false;
    p = jsonscan_ws(p + 1, e);
    if (p < e && *p == '}')
        return NULL; /* no content */
    while (p < e && *p == '"') {
        const char *ke = jsonscan_str_end(p, e);
        if (!ke)
            return NULL;
        bool is_content = ke - p == 9 && memcmp(p + 1, "content", 7) == 0;
        p = jsonscan_ws(ke, e);
        if (p >= e || *p != ':')
            return NULL;
        p = jsonscan_ws(p + 1, e);
        const char *ve;
        if (is_content && !seen) {
            seen = true;
            if (p >= e || *p != '[')
                return NULL;
            ve = s_lp_content(p, e, sc);
            ok = ve != NULL;
        } else {
            ve = p < e ? jsonscan_value_end(p, e) : NULL;
        }
        if (!ve)
            return NULL;
        p = jsonscan_ws(ve, e);
        if (p < e && *p == ',') {
            p = jsonscan_ws(p + 1, e);
            continue;
        }
        return ok && p < e && *p == '}' ? p + 1 : NULL;
    }
    return NULL;
}

/* llm_lp_scan fills sc from body in one pass over the first choice: its logprobs.content (sc->at)
 * and its token_ids (sc->ids_at), each when it is in the shape read here; false when neither is. */
bool llm_lp_scan(const char *body, size_t len, llm_lpscan_t *sc)
{
    memset(sc, 0, sizeof *sc);
    const char *e = body + len;
    const char *ch = s_key_val(body, e, "choices");
    if (!ch || *ch != '[')
        return false;
    const char *p = jsonscan_ws(ch + 1, e);
    if (p >= e || *p != '{')
        return false;
    bool seen_lp = false, seen_ti = false;
    p = jsonscan_ws(p + 1, e);
    while (p < e && *p == '"') {
        const char *ke = jsonscan_str_end(p, e);
        if (!ke)
            break;
        size_t kl = (size_t)(ke - p) - 2;
        const char *key = p + 1;
        p = jsonscan_ws(ke, e);
        if (p >= e || *p != ':')
            break;
        p = jsonscan_ws(p + 1, e);
        if (p >= e)
            break;
        const char *ve = NULL;
        if (kl == 8 && memcmp(key, "logprobs", 8) == 0 && !seen_lp) {
            seen_lp = true;
            if (*p == '{' && (ve = s_lp_obj(p, e, sc))) {
                sc->at = p;
                sc->end = ve;
            } else {
                free(sc->lp);
                free(sc->ids);
                sc->lp = NULL;
                sc->ids = NULL;
                sc->n = 0;
                sc->any = sc->all_ids = false;
                sc->sum = 0;
            }
        } else if (kl == 9 && memcmp(key, "token_ids", 9) == 0 && !seen_ti) {
            seen_ti = true;
            if (*p == '[' && (ve = s_ids_scan(p, e, &sc->tids, &sc->n_tids))) {
                if (sc->n_tids > 0) {
                    sc->ids_at = p;
                    sc->ids_end = ve;
                } else { /* [] is the JSON parser's: it then looks for sglext's */
                    free(sc->tids);
                    sc->tids = NULL;
                }
            }
        }
        if (!ve && !(ve = jsonscan_value_end(p, e)))
            break;
        p = jsonscan_ws(ve, e);
        if (p < e && *p == ',')
            p = jsonscan_ws(p + 1, e);
        else
            break;
    }
    return sc->at || sc->ids_at;
}
