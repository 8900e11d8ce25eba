/*
 * household_text.c — the household's texts: appending to a bounded buffer, lists of names
 * ("a X, a Y, and a Z"), what a receptacle shows when one goes to, opens or examines it, and what
 * "examine" says of an object.
 */
#include "env_worker/household/household_int.h"

#include <string.h>

/* ---- texts ---- */

void hh_put_n(hh_text_t *t, const char *s, size_t n)
{
    if (t->len + n >= t->cap)
        n = t->len + 1 < t->cap ? t->cap - 1 - t->len : 0;
    memcpy(t->buf + t->len, s, n);
    t->len += n;
    t->buf[t->len] = '\0';
}

void hh_put(hh_text_t *t, const char *s)
{
    hh_put_n(t, s, strlen(s));
}

/* hh_put_list writes "a X, a Y, and a Z" / "a X" / "nothing" for the names given. */
void hh_put_list(hh_text_t *t, const char *const *names, const uint8_t *lens, int n)
{
    if (n == 0) {
        hh_put(t, "nothing");
        return;
    }
    for (int i = 0; i < n; i++) {
        if (i > 0)
            hh_put(t, i == n - 1 ? ", and " : ", ");
        hh_put_n(t, "a ", 2);
        hh_put_n(t, names[i], lens[i]);
    }
}

void hh_put_contents(const hh_obj_t *objs, int n_objs, hh_text_t *t, int r)
{
    const char *names[HH_MAX_OBJS];
    uint8_t lens[HH_MAX_OBJS];
    int n = 0;
    for (int i = 0; i < n_objs; i++) {
        if (objs[i].loc == r) {
            names[n] = objs[i].name;
            lens[n++] = objs[i].name_len;
        }
    }
    hh_put_list(t, names, lens, n);
}

/* hh_put_recep_desc writes the description of a receptacle as "go to", "open" and "examine" show it. */
void hh_put_recep_desc(household_t *h, hh_text_t *t, int r)
{
    const hh_recep_t *rc = &h->receps[r];
    if (rc->openable && h->open[r]) {
        hh_put(t, "The ");
        hh_put_n(t, rc->name, rc->name_len);
        hh_put(t, " is open. In it, you see ");
        hh_put_contents(h->objs, h->n_objs, t, r);
        hh_put(t, ".");
    } else if (rc->openable) {
        hh_put(t, "The ");
        hh_put_n(t, rc->name, rc->name_len);
        hh_put(t, " is closed.");
    } else {
        hh_put(t, "On the ");
        hh_put_n(t, rc->name, rc->name_len);
        hh_put(t, ", you see ");
        hh_put_contents(h->objs, h->n_objs, t, r);
        hh_put(t, ".");
    }
}

void hh_put_examine_obj(hh_text_t *t, const hh_obj_t *o)
{
    const char *pre;
    switch (o->state & (HH_HOT | HH_COLD | HH_CLEAN)) {
    case HH_HOT: pre = "This is a hot "; break;
    case HH_COLD: pre = "This is a cold "; break;
    case HH_CLEAN: pre = "This is a clean "; break;
    case HH_HOT | HH_CLEAN: pre = "This is a hot and clean "; break;
    case HH_COLD | HH_CLEAN: pre = "This is a cool and clean "; break;
    default: pre = NULL; break;
    }
    if (pre) {
        hh_put(t, pre);
        hh_put_n(t, o->name, o->name_len);
        hh_put(t, ".");
    } else {
        hh_put(t, "There's nothing special about ");
        hh_put_n(t, o->name, o->name_len);
        hh_put(t, ".");
    }
}
