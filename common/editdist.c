/*
 * editdist.c — action normalisation, the string interner and token-level Levenshtein for the
 * prefix-divergence gate.
 *
 * The interner is an open-addressing hash table (FNV-1a, linear probing, load <= 1/2) from
 * string to id, plus an array from id to string. Levenshtein keeps two rows of the dynamic
 * programme and first strips the common prefix and suffix, which is most of the work saved on
 * converging groups, where the interesting pairs share long prefixes. The divergence pads each
 * pair into stack buffers when K <= EDITDIST_FAST_K, so the gate's hot path never allocates.
 */
#include "common/editdist.h"
#include "common/sr.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* ---- normalisation ---- */

int editdist_normalize(const char *action, char *out, size_t cap)
{
    if (!action || !out || cap == 0)
        return SR_EINVAL;
    size_t n = 0;
    bool pending_space = false;
    bool truncated = false;
    for (const unsigned char *p = (const unsigned char *)action; *p; p++) {
        if (isspace(*p)) {
            pending_space = n > 0; /* leading whitespace is dropped */
            continue;
        }
        size_t need = pending_space ? 2 : 1;
        if (n + need >= cap) {
            truncated = true;
            break;
        }
        if (pending_space)
            out[n++] = ' ';
        pending_space = false;
        out[n++] = (char)tolower(*p);
    }
    out[n] = '\0';
    if (truncated)
        return SR_ETOOBIG;
    return n > (size_t)INT32_MAX ? SR_ETOOBIG : (int)n;
}

char *editdist_normalize_dup(const char *action)
{
    if (!action)
        return NULL;
    size_t cap = strlen(action) + 1; /* normalising never makes a string longer */
    char *out = sr_xmalloc(cap);
    editdist_normalize(action, out, cap);
    return out;
}

/* ---- interner ---- */

struct editdist_interner {
    char **strings;  /* strings[id], strings[0] unused (EDITDIST_END) */
    size_t count;    /* ids in use, including the reserved 0 */
    size_t cap;      /* capacity of strings */
    uint32_t *slots; /* hash table of ids, 0 = empty */
    size_t nslots;   /* power of two */
};

static uint64_t s_hash(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ULL;
    }
    return h;
}

editdist_interner_t *editdist_interner_new(void)
{
    editdist_interner_t *it = calloc(1, sizeof *it);
    if (!it)
        return NULL;
    it->cap = 16;
    it->count = 1;
    it->nslots = 32;
    it->strings = calloc(it->cap, sizeof *it->strings);
    it->slots = calloc(it->nslots, sizeof *it->slots);
    if (!it->strings || !it->slots)
        editdist_interner_destroy(&it);
    return it;
}

void editdist_interner_destroy(editdist_interner_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    editdist_interner_t *it = *self_p;
    if (it->strings) {
        for (size_t i = 1; i < it->count; i++)
            free(it->strings[i]);
    }
    free(it->strings);
    free(it->slots);
    free(it);
    *self_p = NULL;
}

static void s_grow_slots(editdist_interner_t *it)
{
    size_t nslots = it->nslots * 2;
    uint32_t *slots = sr_xcalloc(nslots, sizeof *slots);
    for (size_t id = 1; id < it->count; id++) {
        size_t i = s_hash(it->strings[id]) & (nslots - 1);
        while (slots[i])
            i = (i + 1) & (nslots - 1);
        slots[i] = (uint32_t)id;
    }
    free(it->slots);
    it->slots = slots;
    it->nslots = nslots;
}

uint32_t editdist_intern(editdist_interner_t *it, const char *s)
{
    if (!it || !s || !strcmp(s, EDITDIST_END_TEXT))
        return EDITDIST_END;
    size_t mask = it->nslots - 1;
    size_t i = s_hash(s) & mask;
    while (it->slots[i]) {
        uint32_t id = it->slots[i];
        if (!strcmp(it->strings[id], s))
            return id;
        i = (i + 1) & mask;
    }
    SR_ASSERT(it->count < UINT32_MAX);
    if (it->count == it->cap) {
        it->cap *= 2;
        it->strings = sr_xrealloc(it->strings, it->cap * sizeof *it->strings);
    }
    uint32_t id = (uint32_t)it->count++;
    it->strings[id] = sr_xstrdup(s);
    it->slots[i] = id;
    if (it->count * 2 > it->nslots)
        s_grow_slots(it);
    return id;
}

uint32_t editdist_intern_action(editdist_interner_t *it, const char *action)
{
    if (!it || !action)
        return EDITDIST_END;
    char buf[256];
    if (editdist_normalize(action, buf, sizeof buf) >= 0)
        return editdist_intern(it, buf);
    char *norm = editdist_normalize_dup(action);
    uint32_t id = editdist_intern(it, norm);
    free(norm);
    return id;
}

const char *editdist_interner_string(const editdist_interner_t *it, uint32_t id)
{
    if (id == EDITDIST_END)
        return EDITDIST_END_TEXT;
    if (!it || id >= it->count)
        return NULL;
    return it->strings[id];
}

size_t editdist_interner_count(const editdist_interner_t *it)
{
    return it ? it->count - 1 : 0;
}

/* ---- Levenshtein ---- */

/* s_lev computes the distance with two caller-provided rows of at least nb + 1 entries. */
static size_t s_lev(const uint32_t *a, size_t na, const uint32_t *b, size_t nb, uint32_t *prev,
                    uint32_t *cur)
{
    while (na && nb && *a == *b) { /* common prefix */
        a++, b++, na--, nb--;
    }
    while (na && nb && a[na - 1] == b[nb - 1]) { /* common suffix */
        na--, nb--;
    }
    if (na == 0)
        return nb;
    if (nb == 0)
        return na;
    for (size_t j = 0; j <= nb; j++)
        prev[j] = (uint32_t)j;
    for (size_t i = 1; i <= na; i++) {
        cur[0] = (uint32_t)i;
        uint32_t ai = a[i - 1];
        for (size_t j = 1; j <= nb; j++) {
            uint32_t sub = prev[j - 1] + (ai != b[j - 1]);
            uint32_t del = prev[j] + 1;
            uint32_t ins = cur[j - 1] + 1;
            uint32_t m = sub < del ? sub : del;
            cur[j] = m < ins ? m : ins;
        }
        uint32_t *t = prev;
        prev = cur;
        cur = t;
    }
    return prev[nb];
}

size_t editdist_levenshtein(const uint32_t *a, size_t na, const uint32_t *b, size_t nb)
{
    if (na < nb) { /* keep the rows as short as possible */
        const uint32_t *t = a;
        a = b;
        b = t;
        size_t tn = na;
        na = nb;
        nb = tn;
    }
    if (nb <= EDITDIST_FAST_K) {
        uint32_t rows[2][EDITDIST_FAST_K + 1];
        return s_lev(a, na, b, nb, rows[0], rows[1]);
    }
    uint32_t *rows = sr_xmalloc(2 * (nb + 1) * sizeof *rows);
    size_t d = s_lev(a, na, b, nb, rows, rows + nb + 1);
    free(rows);
    return d;
}

/* s_pad copies the first K tokens of seq into out, padding with EDITDIST_END. */
static void s_pad(const uint32_t *seq, size_t len, size_t K, uint32_t *out)
{
    size_t n = SR_MIN(len, K);
    if (n)
        memcpy(out, seq, n * sizeof *out);
    for (size_t i = n; i < K; i++)
        out[i] = EDITDIST_END;
}

/* ---- bit-parallel Levenshtein, K <= 64 ---- */

/* s_peq_t maps each token of a pattern of at most 64 to the bit mask of its positions (an
 * open-addressing table: at most 64 distinct tokens in 128 slots). */
typedef struct {
    uint32_t key[128];
    uint64_t mask[128];
    uint8_t used[128];
    uint32_t shift; /* slot = (token * golden) >> shift */
    size_t nslots;
} s_peq_t;

static size_t s_peq_slot(const s_peq_t *t, uint32_t v)
{
    size_t i = (uint32_t)(v * 2654435769u) >> t->shift;
    while (t->used[i] && t->key[i] != v)
        i = (i + 1) & (t->nslots - 1);
    return i;
}

static void s_peq_build(s_peq_t *t, const uint32_t *a, size_t m)
{
    t->nslots = 16;
    t->shift = 28;
    while (t->nslots < 2 * m) {
        t->nslots <<= 1;
        t->shift--;
    }
    memset(t->used, 0, t->nslots);
    for (size_t i = 0; i < m; i++) {
        size_t k = s_peq_slot(t, a[i]);
        if (!t->used[k]) {
            t->used[k] = 1;
            t->key[k] = a[i];
            t->mask[k] = 0;
        }
        t->mask[k] |= 1ull << i;
    }
}

static uint64_t s_peq_get(const s_peq_t *t, uint32_t v)
{
    size_t k = s_peq_slot(t, v);
    return t->used[k] ? t->mask[k] : 0;
}

/* s_lev_bits is the Levenshtein distance of a and b, both of length K <= 64, peq being a's
 * table: the common prefix and suffix stripped as s_lev does, then the bit-vector algorithm
 * (Myers 1999, in Hyyro's form for the whole distance) over the rest, one step per token of b. */
static size_t s_lev_bits(const uint32_t *a, const uint32_t *b, size_t K, const s_peq_t *peq)
{
    size_t p = 0;
    while (p < K && a[p] == b[p])
        p++;
    if (p == K)
        return 0;
    size_t e = K;
    while (a[e - 1] == b[e - 1]) /* stops at p at the latest: a[p] != b[p] */
        e--;
    size_t m = e - p;
    uint64_t keep = m == 64 ? ~0ull : (1ull << m) - 1, top = 1ull << (m - 1);
    uint64_t pv = ~0ull, mv = 0;
    size_t score = m;
    for (size_t j = p; j < e; j++) {
        uint64_t eq = (s_peq_get(peq, b[j]) >> p) & keep;
        uint64_t xv = eq | mv;
        uint64_t xh = (((eq & pv) + pv) ^ pv) | eq;
        uint64_t ph = mv | ~(xh | pv);
        uint64_t mh = pv & xh;
        if (ph & top)
            score++;
        else if (mh & top)
            score--;
        ph = (ph << 1) | 1;
        mh <<= 1;
        pv = mh | ~(xv | ph);
        mv = ph & xv;
    }
    return score;
}

double editdist_prefix_divergence(const uint32_t *const *seqs, const size_t *lens, size_t G,
                                  size_t K)
{
    if (!seqs || !lens)
        return (double)SR_EINVAL;
    for (size_t g = 0; g < G; g++) {
        if (!seqs[g] && lens[g])
            return (double)SR_EINVAL;
    }
    if (G < 2 || K == 0)
        return 0.0;
    uint32_t stack[4 * (EDITDIST_FAST_K + 1)];
    uint32_t *mem = K <= EDITDIST_FAST_K ? stack : sr_xmalloc(4 * (K + 1) * sizeof *mem);
    uint32_t *pa = mem, *pb = mem + (K + 1), *r0 = mem + 2 * (K + 1), *r1 = mem + 3 * (K + 1);
    uint64_t total = 0;
    for (size_t i = 0; i < G; i++) {
        s_pad(seqs[i], lens[i], K, pa);
        if (K <= 64) {
            s_peq_t peq;
            s_peq_build(&peq, pa, K);
            for (size_t j = i + 1; j < G; j++) {
                s_pad(seqs[j], lens[j], K, pb);
                total += s_lev_bits(pa, pb, K, &peq);
            }
            continue;
        }
        for (size_t j = i + 1; j < G; j++) {
            s_pad(seqs[j], lens[j], K, pb);
            total += s_lev(pa, K, pb, K, r0, r1);
        }
    }
    if (mem != stack)
        free(mem);
    double pairs = (double)G * (double)(G - 1) / 2.0;
    return (double)total / pairs / (double)K;
}

double editdist_prefix_divergence_strs(const char *const *const *actions, const size_t *lens,
                                       size_t G, size_t K)
{
    if (!actions || !lens)
        return (double)SR_EINVAL;
    for (size_t g = 0; g < G; g++) {
        if (!actions[g] && lens[g])
            return (double)SR_EINVAL;
    }
    if (G < 2 || K == 0)
        return 0.0;
    editdist_interner_t *it = editdist_interner_new();
    if (!it)
        return (double)SR_ENOMEM;
    uint32_t **ids = sr_xcalloc(G, sizeof *ids);
    size_t *cut = sr_xcalloc(G, sizeof *cut);
    for (size_t g = 0; g < G; g++) {
        cut[g] = SR_MIN(lens[g], K);
        ids[g] = sr_xmalloc((cut[g] ? cut[g] : 1) * sizeof **ids);
        for (size_t k = 0; k < cut[g]; k++)
            ids[g][k] = editdist_intern_action(it, actions[g][k]);
    }
    double d = editdist_prefix_divergence((const uint32_t *const *)ids, cut, G, K);
    for (size_t g = 0; g < G; g++)
        free(ids[g]);
    free(ids);
    free(cut);
    editdist_interner_destroy(&it);
    return d;
}
