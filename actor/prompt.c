/*
 * prompt.c — the step prompt template: checking, loading and rendering; see prompt.h.
 *
 * One scanner walks a template for both jobs: when a template is made it only checks (unknown
 * placeholders, unbalanced sections), and when a step is rendered it appends to a growing buffer.
 * Sections are one level deep and only about the history, which is all a step prompt needs.
 */
#include "actor/prompt.h"

#include "common/afile.h"
#include "common/envkind.h"
#include "common/jsonscan.h"
#include "common/jsonw.h"
#include "common/sr.h"
#include "common/sr_buf.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The largest template file read; a prompt template is a few kilobytes. */
#define S_MAX_FILE (256 * 1024)

const char *prompt_default_system(void)
{
    const envkind_builtin_t *k = envkind_builtin(NULL);
    return k && k->prompt_system ? k->prompt_system : "";
}

const char PROMPT_DEFAULT_USER[] =
    "Your task is to: {goal}\n"
    "{^history}This is the first step.\n{/history}"
    "{#history}Prior to this step, you have already taken {n_prev} step(s). Below are the most "
    "recent {n_hist} observations and the corresponding actions you took:\n{history}\n{/history}"
    "You are now at step {step} and your current observation is: {current_obs}\n"
    "Your admissible actions of the current situation are: {admissible}.\n"
    "\n"
    "Now it's your turn to take an action.\n"
    "You should first reason step-by-step about the current situation. This reasoning process "
    "MUST be enclosed within <think> </think> tags.\n"
    "Once you've finished your reasoning, you should choose an admissible action for current step "
    "and present it within <action> </action> tags.";

/* A template is kept compiled: a list of segments (literal text, a placeholder, a section's
 * opening or end) walked at each render, so a render is a few copies into a reused buffer. */
typedef enum { S_SEG_LIT, S_SEG_PH, S_SEG_OPEN_IF, S_SEG_OPEN_IFNOT, S_SEG_CLOSE } s_seg_kind_t;

typedef struct {
    uint8_t kind; /* s_seg_kind_t */
    uint8_t ph;   /* S_SEG_PH: s_ph_t */
    uint32_t len; /* S_SEG_LIT */
    const char *lit;
    const char *elit; /* S_SEG_LIT: the text escaped for a JSON string: lit itself when it needs no
                       * escape, else a copy of the template's own (s_escape_lits) */
    uint32_t elen;
} s_seg_t;

typedef struct {
    s_seg_t *seg;
    size_t n, cap;
} s_segs_t;

struct prompt {
    char *system;
    char *user;
    int history_len;
    s_segs_t sys_segs, user_segs;
};

typedef sr_buf_t s_buf_t;

static void s_put(s_buf_t *b, const char *s, size_t n)
{
    if (sr_buf_append(b, s, n) != SR_OK) { /* as the sr_x allocators do */
        fputs("selroll: out of memory rendering a prompt\n", stderr);
        abort();
    }
}

/* s_put_esc appends the n bytes at s escaped as the inside of a JSON string: the bytes jsonw_strn
 * writes between its quotes. Escaping goes byte by byte, so the pieces of a text escaped one by
 * one are the whole text escaped. */
static void s_put_esc(s_buf_t *b, const char *s, size_t n)
{
    size_t run = 0;
    for (size_t i = 0; (i = (size_t)(jsonscan_str_stop(s + i, s + n) - s)) < n; i++) {
        char esc[6];
        s_put(b, s + run, i - run);
        s_put(b, esc, jsonw_escape_seq((unsigned char)s[i], esc));
        run = i + 1;
    }
    s_put(b, s + run, n - run);
}

/* s_reserve makes room for n more bytes. */
static void s_reserve(s_buf_t *b, size_t n)
{
    if (n > b->cap - b->len && sr_buf_reserve(b, n) != SR_OK) {
        fputs("selroll: out of memory rendering a prompt\n", stderr);
        abort();
    }
}

/* s_putu writes u in decimal. */
static void s_putu(s_buf_t *b, size_t u)
{
    char d[24];
    int k = (int)sizeof d;
    do {
        d[--k] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    s_put(b, d + k, sizeof d - (size_t)k);
}

static void s_seg_add(s_segs_t *g, s_seg_t seg)
{
    if (seg.kind == S_SEG_LIT && g->n > 0 && g->seg[g->n - 1].kind == S_SEG_LIT &&
        g->seg[g->n - 1].lit + g->seg[g->n - 1].len == seg.lit) {
        g->seg[g->n - 1].len += seg.len; /* adjacent literal text */
        return;
    }
    if (g->n == g->cap) {
        g->cap = g->cap ? g->cap * 2 : 16;
        g->seg = sr_xrealloc(g->seg, g->cap * sizeof *g->seg);
    }
    g->seg[g->n++] = seg;
}

static void s_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

typedef enum { S_PH_GOAL, S_PH_STEP, S_PH_NPREV, S_PH_NHIST, S_PH_HISTORY, S_PH_OBS, S_PH_ADM } s_ph_t;

static const struct {
    const char *name;
    s_ph_t ph;
} S_PLACEHOLDERS[] = {
    {"goal", S_PH_GOAL},       {"step", S_PH_STEP},       {"n_prev", S_PH_NPREV},
    {"n_hist", S_PH_NHIST},    {"history", S_PH_HISTORY}, {"current_obs", S_PH_OBS},
    {"admissible", S_PH_ADM},
};

/* What a render needs besides the template; NULL when only checking. */
typedef struct {
    const prompt_state_t *s;
    size_t n_prev, n_hist;
    bool json; /* every text escaped for a JSON string (prompt_render_json_into) */
} s_ctx_t;

#define S_PUTL(b, lit) s_put((b), (lit), sizeof(lit) - 1)

/* s_text appends the text t (NULL: none), escaped when c says so. */
static void s_text(s_buf_t *b, const char *t, const s_ctx_t *c)
{
    if (!t)
        return;
    if (c->json)
        s_put_esc(b, t, strlen(t));
    else
        s_put(b, t, strlen(t));
}

static void s_render_ph(s_buf_t *b, s_ph_t ph, const s_ctx_t *c)
{
    const prompt_state_t *s = c->s;
    switch (ph) {
    case S_PH_GOAL: s_text(b, s->goal, c); break;
    case S_PH_STEP: s_putu(b, c->n_prev + 1); break;
    case S_PH_NPREV: s_putu(b, c->n_prev); break;
    case S_PH_NHIST: s_putu(b, c->n_hist); break;
    case S_PH_OBS: s_text(b, s->current_obs, c); break;
    case S_PH_HISTORY:
        for (size_t i = c->n_prev - c->n_hist; i < c->n_prev; i++) {
            size_t k = i + 1;
            if (i > c->n_prev - c->n_hist) {
                if (c->json)
                    S_PUTL(b, "\\n");
                else
                    S_PUTL(b, "\n");
            }
            S_PUTL(b, "[Observation ");
            s_putu(b, k);
            S_PUTL(b, ": '");
            s_text(b, s->history[i].obs, c);
            S_PUTL(b, "', Action ");
            s_putu(b, k);
            S_PUTL(b, ": '");
            s_text(b, s->history[i].action, c);
            S_PUTL(b, "']");
        }
        break;
    case S_PH_ADM: {
        size_t start = b->len;
        S_PUTL(b, "[");
        bool first = true;
        for (size_t i = 0; i < s->n_admissible; i++) {
            const char *a = s->admissible ? s->admissible[i] : NULL;
            if (!a || (a[0] == 'h' && strcmp(a, "help") == 0))
                continue;
            size_t n = strlen(a);
            /* ", '" a "'" written in place: one copy an action, not three */
            s_reserve(b, n + 4);
            char *o = (char *)b->data + b->len;
            if (!first) {
                *o++ = ',';
                *o++ = ' ';
            }
            *o++ = '\'';
            memcpy(o, a, n);
            o[n] = '\'';
            b->len = (size_t)(o + n + 1 - (char *)b->data);
            first = false;
        }
        S_PUTL(b, "]");
        /* escaped: the list as written, checked in one pass; written again escaped when some
         * action needs it (escaping goes byte by byte: the same as each piece escaped) */
        const char *r0 = (const char *)b->data + start, *r1 = (const char *)b->data + b->len;
        if (c->json && jsonscan_str_stop(r0, r1) != r1) {
            size_t n = b->len - start;
            char *plain = sr_xmalloc(n);
            memcpy(plain, r0, n);
            b->len = start;
            s_put_esc(b, plain, n);
            free(plain);
        }
        break;
    }
    }
}

/* s_walk checks tmpl and, when g is not NULL, compiles it into g (segments pointing into tmpl).
 * Returns 0 or SR_EINVAL with a reason in err. */
static int s_walk(const char *tmpl, s_segs_t *g, char *err, size_t errlen)
{
    int section = 0; /* 0 none, 1 inside {#history}, -1 inside {^history} */
    const char *p = tmpl;
    while (*p) {
        if (p[0] == '{' && p[1] == '{') {
            if (g)
                s_seg_add(g, (s_seg_t){.kind = S_SEG_LIT, .len = 1, .lit = p});
            p += 2;
            continue;
        }
        if (*p != '{') {
            const char *q = strchrnul(p, '{');
            if (g)
                s_seg_add(g, (s_seg_t){.kind = S_SEG_LIT, .len = (uint32_t)(q - p), .lit = p});
            p = q;
            continue;
        }
        const char *close = strchr(p + 1, '}');
        if (!close) {
            s_err(err, errlen, "unclosed '{' at byte %zu", (size_t)(p - tmpl));
            return SR_EINVAL;
        }
        size_t n = (size_t)(close - (p + 1));
        const char *name = p + 1;
        if (n == 8 && (name[0] == '#' || name[0] == '^') && strncmp(name + 1, "history", 7) == 0) {
            if (section != 0) {
                s_err(err, errlen, "nested section at byte %zu", (size_t)(p - tmpl));
                return SR_EINVAL;
            }
            section = name[0] == '#' ? 1 : -1;
            if (g)
                s_seg_add(g, (s_seg_t){.kind = section == 1 ? S_SEG_OPEN_IF : S_SEG_OPEN_IFNOT});
        } else if (n == 8 && name[0] == '/' && strncmp(name + 1, "history", 7) == 0) {
            if (section == 0) {
                s_err(err, errlen, "{/history} without an opening section at byte %zu",
                      (size_t)(p - tmpl));
                return SR_EINVAL;
            }
            section = 0;
            if (g)
                s_seg_add(g, (s_seg_t){.kind = S_SEG_CLOSE});
        } else {
            size_t i;
            for (i = 0; i < SR_ARRAY_LEN(S_PLACEHOLDERS); i++)
                if (strlen(S_PLACEHOLDERS[i].name) == n && strncmp(S_PLACEHOLDERS[i].name, name, n) == 0)
                    break;
            if (i == SR_ARRAY_LEN(S_PLACEHOLDERS)) {
                s_err(err, errlen, "unknown placeholder {%.*s} at byte %zu", (int)SR_MIN(n, 40), name,
                      (size_t)(p - tmpl));
                return SR_EINVAL;
            }
            if (g)
                s_seg_add(g, (s_seg_t){.kind = S_SEG_PH, .ph = (uint8_t)S_PLACEHOLDERS[i].ph});
        }
        p = close + 1;
    }
    if (section != 0) {
        s_err(err, errlen, "section {%chistory} is not closed", section == 1 ? '#' : '^');
        return SR_EINVAL;
    }
    return SR_OK;
}

/* s_escape_lits gives each literal segment of g its text escaped for a JSON string. */
static void s_escape_lits(s_segs_t *g)
{
    for (size_t i = 0; i < g->n; i++) {
        s_seg_t *sg = &g->seg[i];
        if (sg->kind != S_SEG_LIT)
            continue;
        sg->elit = sg->lit;
        sg->elen = sg->len;
        if (jsonscan_str_stop(sg->lit, sg->lit + sg->len) == sg->lit + sg->len)
            continue;
        s_buf_t e = SR_BUF_INIT;
        s_put_esc(&e, sg->lit, sg->len);
        sg->elit = (const char *)e.data;
        sg->elen = (uint32_t)e.len;
    }
}

static void s_segs_free(s_segs_t *g)
{
    for (size_t i = 0; i < g->n; i++)
        if (g->seg[i].kind == S_SEG_LIT && g->seg[i].elit != g->seg[i].lit)
            free((char *)g->seg[i].elit);
    free(g->seg);
}

prompt_t *prompt_new(const char *system_tmpl, const char *user_tmpl, int history_len, char *err,
                     size_t errlen)
{
    if (!system_tmpl)
        system_tmpl = PROMPT_DEFAULT_SYSTEM;
    if (!user_tmpl)
        user_tmpl = PROMPT_DEFAULT_USER;
    char why[160] = "";
    if (s_walk(system_tmpl, NULL, why, sizeof why) != SR_OK) {
        s_err(err, errlen, "system template: %s", why);
        return NULL;
    }
    if (s_walk(user_tmpl, NULL, why, sizeof why) != SR_OK) {
        s_err(err, errlen, "user template: %s", why);
        return NULL;
    }
    prompt_t *p = sr_xcalloc(1, sizeof *p);
    p->system = sr_xstrdup(system_tmpl);
    p->user = sr_xstrdup(user_tmpl);
    p->history_len = history_len < 0 ? PROMPT_DEFAULT_HISTORY : history_len;
    s_walk(p->system, &p->sys_segs, NULL, 0); /* checked above: cannot fail */
    s_walk(p->user, &p->user_segs, NULL, 0);
    s_escape_lits(&p->sys_segs);
    s_escape_lits(&p->user_segs);
    return p;
}

/* s_is_marker tells whether the line at p (up to eol) is exactly `marker`, allowing a '\r'. */
static bool s_is_marker(const char *p, const char *eol, const char *marker)
{
    size_t n = (size_t)(eol - p);
    if (n > 0 && p[n - 1] == '\r')
        n--;
    return n == strlen(marker) && strncmp(p, marker, n) == 0;
}

/* s_part copies the text [start, stop) without the one line break that ends it. */
static char *s_part(const char *start, const char *stop)
{
    if (stop > start && stop[-1] == '\n')
        stop--;
    if (stop > start && stop[-1] == '\r')
        stop--;
    return sr_xstrndup(start, (size_t)(stop > start ? stop - start : 0));
}

prompt_t *prompt_load(const char *path, int history_len, char *err, size_t errlen)
{
    prompt_t *result = NULL;
    char *text = NULL, *sys = NULL, *user = NULL;
    char why[256] = "no path";
    size_t n = 0;
    int rc = path ? afile_read(path, S_MAX_FILE, &text, &n, why, sizeof why) : SR_EINVAL;
    if (rc == SR_ETOOBIG) {
        s_err(err, errlen, "template %s is larger than %d bytes", path, S_MAX_FILE);
        goto cleanup;
    }
    if (rc != SR_OK) {
        s_err(err, errlen, "cannot open template %s: %s", path ? path : "(null)", why);
        goto cleanup;
    }
    if (strlen(text) != n) {
        s_err(err, errlen, "template %s contains a NUL byte", path);
        goto cleanup;
    }

    /* Split into parts at the marker lines. */
    char **target = NULL;
    const char *part_start = NULL;
    const char *line = text;
    while (*line) {
        const char *eol = strchr(line, '\n');
        const char *end = eol ? eol : line + strlen(line);
        bool is_sys = s_is_marker(line, end, "[system]");
        bool is_user = !is_sys && s_is_marker(line, end, "[user]");
        if (is_sys || is_user) {
            if (target) {
                *target = s_part(part_start, line);
            } else {
                for (const char *q = text; q < line; q++)
                    if (*q != ' ' && *q != '\t' && *q != '\n' && *q != '\r') {
                        s_err(err, errlen, "template %s has text before its first section marker", path);
                        goto cleanup;
                    }
            }
            target = is_sys ? &sys : &user;
            if (*target) {
                s_err(err, errlen, "template %s has two %s sections", path, is_sys ? "[system]" : "[user]");
                goto cleanup;
            }
            part_start = eol ? eol + 1 : end;
        }
        if (!eol)
            break;
        line = eol + 1;
    }
    if (target)
        *target = s_part(part_start, text + n);
    if (!user) {
        s_err(err, errlen, "template %s has no [user] section", path);
        goto cleanup;
    }
    result = prompt_new(sys ? sys : PROMPT_DEFAULT_SYSTEM, user, history_len, err, errlen);

cleanup:
    free(text);
    free(sys);
    free(user);
    return result;
}

void prompt_destroy(prompt_t **pp)
{
    if (!pp || !*pp)
        return;
    prompt_t *p = *pp;
    free(p->system);
    free(p->user);
    s_segs_free(&p->sys_segs);
    s_segs_free(&p->user_segs);
    free(p);
    *pp = NULL;
}

int prompt_history_len(const prompt_t *p)
{
    return p ? p->history_len : PROMPT_DEFAULT_HISTORY;
}

/* s_render appends the compiled template g to b (NUL-terminated, the NUL not counted). */
static void s_render(const s_segs_t *g, const s_ctx_t *c, s_buf_t *b)
{
    bool emit = true;
    for (size_t i = 0; i < g->n; i++) {
        const s_seg_t *sg = &g->seg[i];
        switch ((s_seg_kind_t)sg->kind) {
        case S_SEG_LIT:
            if (emit && c->json)
                s_put(b, sg->elit, sg->elen);
            else if (emit)
                s_put(b, sg->lit, sg->len);
            break;
        case S_SEG_PH:
            if (emit)
                s_render_ph(b, (s_ph_t)sg->ph, c);
            break;
        case S_SEG_OPEN_IF: emit = c->n_hist > 0; break;
        case S_SEG_OPEN_IFNOT: emit = c->n_hist == 0; break;
        case S_SEG_CLOSE: emit = true; break;
        }
    }
    s_put(b, "", 1);
    b->len--;
}

static int s_render_both(const prompt_t *p, const prompt_state_t *s, sr_buf_t *system,
                         sr_buf_t *user, bool json)
{
    if (!p || !s || !system || !user)
        return SR_EINVAL;
    s_ctx_t ctx = {.s = s, .n_prev = s->history ? s->n_history : 0, .json = json};
    ctx.n_hist = SR_MIN(ctx.n_prev, (size_t)p->history_len);
    system->len = 0;
    user->len = 0;
    if (p->system[0])
        s_render(&p->sys_segs, &ctx, system);
    s_render(&p->user_segs, &ctx, user);
    return SR_OK;
}

int prompt_render_into(const prompt_t *p, const prompt_state_t *s, sr_buf_t *system, sr_buf_t *user)
{
    return s_render_both(p, s, system, user, false);
}

int prompt_render_json_into(const prompt_t *p, const prompt_state_t *s, sr_buf_t *system,
                            sr_buf_t *user)
{
    return s_render_both(p, s, system, user, true);
}

int prompt_render(const prompt_t *p, const prompt_state_t *s, prompt_messages_t *out)
{
    if (!p || !s || !out)
        return SR_EINVAL;
    memset(out, 0, sizeof *out);
    sr_buf_t sys = SR_BUF_INIT, user = SR_BUF_INIT;
    prompt_render_into(p, s, &sys, &user);
    out->system = p->system[0] ? (char *)sys.data : NULL;
    out->user = (char *)user.data;
    if (!p->system[0])
        sr_buf_free(&sys);
    return SR_OK;
}

void prompt_messages_clear(prompt_messages_t *m)
{
    if (!m)
        return;
    free(m->system);
    free(m->user);
    m->system = NULL;
    m->user = NULL;
}
