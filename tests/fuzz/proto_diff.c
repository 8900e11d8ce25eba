/*
 * proto_diff.c — the codec of another revision (its symbols renamed base_*, linked beside this
 * tree's: tests/fuzz/proto_diff.sh builds both) against this tree's over the same inputs: every
 * file of a corpus directory, seeded mutations of each, and generated OBS maps (admissible lists
 * of strings in every form, some bad) and ACTION maps (fields shuffled, decoy and repeated keys).
 * Each input is decoded by both with the default limits and with tight ones; the return code,
 * the error text, the re-encoded bytes of what decoded and proto_peek_type must be equal. Exits
 * 1 at the first difference (the input saved as proto_diff_fail.bin in the current directory).
 * Usage: proto_diff CORPUS_DIR [ROUNDS]
 */
#include "common/proto.h"
#include "common/sr_buf.h"
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int base_proto_decode_limits(const void *, size_t, const proto_limits_t *, proto_msg_t *, proto_err_t *);
int base_proto_encode(const proto_msg_t *, sr_buf_t *);
void base_proto_msg_clear(proto_msg_t *);
const char *base_proto_err_text(const proto_err_t *, char *, size_t);
proto_type_t base_proto_peek_type(const void *, size_t);

static unsigned long long g_n, g_ok, g_bad;
static uint64_t rs = 88172645463325252ull;
static uint64_t rnd(void) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return rs; }

static void one_lim(const uint8_t *p, size_t n, const proto_limits_t *lim)
{
    proto_msg_t a, b;
    proto_err_t ea, eb;
    int ra = base_proto_decode_limits(p, n, lim, &a, &ea);
    int rb = proto_decode_limits(p, n, lim, &b, &eb);
    g_n++;
    if (ra != rb) { fprintf(stderr, "rc differs %d %d\n", ra, rb); goto dump; }
    if (ra != SR_OK) {
        char ta[512], tb[512];
        base_proto_err_text(&ea, ta, sizeof ta);
        proto_err_text(&eb, tb, sizeof tb);
        if (strcmp(ta, tb)) { fprintf(stderr, "err differs\n  %s\n  %s\n", ta, tb); goto dump; }
        g_bad++;
        return;
    }
    g_ok++;
    if (a.type != b.type) { fprintf(stderr, "type differs\n"); goto dump; }
    sr_buf_t xa, xb;
    sr_buf_init(&xa); sr_buf_init(&xb);
    int ca = base_proto_encode(&a, &xa), cb = proto_encode(&b, &xb);
    if (ca != cb || xa.len != xb.len || memcmp(xa.data, xb.data, xa.len)) {
        fprintf(stderr, "re-encoding differs %d %d %zu %zu\n", ca, cb, xa.len, xb.len); goto dump;
    }
    sr_buf_free(&xa); sr_buf_free(&xb);
    base_proto_msg_clear(&a);
    proto_msg_clear(&b);
    if (base_proto_peek_type(p, n) != proto_peek_type(p, n)) { fprintf(stderr, "peek differs\n"); goto dump; }
    return;
dump: {
        FILE *f = fopen("proto_diff_fail.bin", "wb");
        if (f) {
            fwrite(p, 1, n, f);
            fclose(f);
        }
        fprintf(stderr, "FAIL after %llu inputs (saved proto_diff_fail.bin)\n", g_n);
        exit(1);
    }
}

static void one(const uint8_t *p, size_t n)
{
    one_lim(p, n, NULL);
    proto_limits_t lim = proto_limits_default();
    lim.max_text = 16;
    lim.max_msg_bytes = 4096;
    one_lim(p, n, &lim);
}

static const uint8_t interesting[] = {0x00, 0x7f, 0x80, 0x81, 0x8f, 0x90, 0x9f, 0xa0, 0xa1, 0xa5, 0xbf, 0xc0,
                                      0xc1, 0xc2, 0xc3, 0xc4, 0xca, 0xcb, 0xcc, 0xd0, 0xd9, 0xda, 0xdb,
                                      0xdc, 0xde, 0xe0, 0xff, 'a', 't', 0xc3, 0xa9, 0xed, 0xf4};

static void mutate_run(const uint8_t *seed, size_t n, int rounds)
{
    uint8_t *buf = malloc(n + 64);
    for (int r = 0; r < rounds; r++) {
        memcpy(buf, seed, n);
        size_t m = n;
        int k = 1 + (int)(rnd() % 4);
        for (int j = 0; j < k && m > 0; j++) {
            size_t at = rnd() % m;
            switch (rnd() % 6) {
            case 0: buf[at] ^= (uint8_t)(1u << (rnd() % 8)); break;
            case 1: buf[at] = interesting[rnd() % sizeof interesting]; break;
            case 2: m = at + 1; break;
            case 3: if (m < n + 60) { memmove(buf + at + 1, buf + at, m - at); buf[at] = interesting[rnd() % sizeof interesting]; m++; } break;
            case 4: memmove(buf + at, buf + at + 1, m - at - 1); m--; break;
            case 5: buf[at] = (uint8_t)rnd(); break;
            }
        }
        one(buf, m);
    }
    free(buf);
}

/* a small msgpack writer */
typedef struct { uint8_t b[70000]; size_t n; } w_t;
static void wb(w_t *w, uint8_t c) { w->b[w->n++] = c; }
static void wstr_hdr(w_t *w, size_t n, int form)
{
    if (form == 0 && n < 32) wb(w, 0xa0 | (uint8_t)n);
    else if (form <= 1 && n < 256) { wb(w, 0xd9); wb(w, (uint8_t)n); }
    else if (form <= 2 && n < 65536) { wb(w, 0xda); wb(w, (uint8_t)(n >> 8)); wb(w, (uint8_t)n); }
    else { wb(w, 0xdb); wb(w, 0); wb(w, (uint8_t)(n >> 16)); wb(w, (uint8_t)(n >> 8)); wb(w, (uint8_t)n); }
}
static void wstrf(w_t *w, const char *s, int form) { size_t n = strlen(s); wstr_hdr(w, n, form); memcpy(w->b + w->n, s, n); w->n += n; }
static void wstr(w_t *w, const char *s) { wstrf(w, s, rnd() % 8 == 0 ? 1 + (int)(rnd() % 3) : 0); }
static void wraw(w_t *w, const void *p, size_t n) { memcpy(w->b + w->n, p, n); w->n += n; }
static void wint(w_t *w, long long v)
{
    if (v >= 0 && v < 128) wb(w, (uint8_t)v);
    else if (v < 0 && v >= -32) wb(w, (uint8_t)(int8_t)v);
    else { wb(w, 0xd3); for (int i = 7; i >= 0; i--) wb(w, (uint8_t)((unsigned long long)v >> (8 * i))); }
}
static void wmap(w_t *w, size_t n) { if (n < 16) wb(w, 0x80 | (uint8_t)n); else { wb(w, 0xde); wb(w, (uint8_t)(n >> 8)); wb(w, (uint8_t)n); } }
static void warr(w_t *w, size_t n) { if (n < 16) wb(w, 0x90 | (uint8_t)n); else { wb(w, 0xdc); wb(w, (uint8_t)(n >> 8)); wb(w, (uint8_t)n); } }
static void wdbl(w_t *w, double d) { uint64_t u; memcpy(&u, &d, 8); wb(w, 0xcb); for (int i = 7; i >= 0; i--) wb(w, (uint8_t)(u >> (8 * i))); }

static void w_elem(w_t *w)
{
    char s[1200];
    size_t len;
    switch (rnd() % 16) {
    case 0: wstrf(w, "", (int)(rnd() % 3)); return;
    case 1: wstrf(w, "caf\xc3\xa9 1", (int)(rnd() % 3)); return; /* UTF-8 */
    case 2: if (rnd() % 64 == 0) { wstrf(w, "bad \xc3", 0); return; } break;
    case 3: if (rnd() % 64 == 0) { wstr_hdr(w, 3, 0); wraw(w, "a\0b", 3); return; } break;
    case 4: if (rnd() % 64 == 0) { wint(w, 5); return; } break;
    case 5: if (rnd() % 64 == 0) { wb(w, 0xc0); return; } break;
    case 6: len = 30 + rnd() % 60; memset(s, 'x', len); s[len] = 0; wstrf(w, s, 1); return;
    case 7: if (rnd() % 64 == 0) { len = 1025; memset(s, 'y', len); s[len] = 0; wstrf(w, s, 2); return; } break;
    case 8: wstrf(w, "\xe2\x82\xac euro \xf0\x9f\x8d\x8e", (int)(rnd() % 3)); return;
    }
    len = 1 + rnd() % 40;
    for (size_t i = 0; i < len; i++) s[i] = "abcdefghij klmnop 0123456789"[rnd() % 28];
    s[len] = 0;
    wstr(w, s);
}

static void gen_obs(w_t *w)
{
    w->n = 0;
    int extra = rnd() % 4 == 0;
    wmap(w, 11 + extra);
    wstr(w, "t"); wstr(w, "OBS"); wstr(w, "v"); wint(w, 1);
    wstr(w, "rid"); wint(w, (long long)(rnd() % 100000));
    wstr(w, "session"); wstr(w, "actor-3/17");
    wstr(w, "obs"); w_elem(w);
    wstr(w, "admissible");
    size_t na = rnd() % 5 == 0 ? rnd() % 3 : rnd() % 60;
    warr(w, na);
    for (size_t i = 0; i < na; i++) w_elem(w);
    wstr(w, "reward"); if (rnd() % 2) wdbl(w, 0.5); else wint(w, 1);
    wstr(w, "done"); wb(w, 0xc2);
    wstr(w, "won"); wb(w, 0xc3);
    wstr(w, "step"); wint(w, 4);
    wstr(w, "goal"); w_elem(w);
    if (extra) { wstr(w, "admissible"); warr(w, 1); wstr(w, "dup"); }
}

static const char *akeys[] = {"run", "group", "traj", "step", "action", "ended", "reward", "won", "actor_id", "group_size", "task", "ru", "runx", "actio", "action_", "group_siz", "group_sizes", "", "t", "v", "stepp", "actor_i"};
static void wval(w_t *w, const char *k)
{
    if (!strcmp(k, "traj") || !strcmp(k, "step") || !strcmp(k, "group_size")) wint(w, (long long)(rnd() % 9));
    else if (!strcmp(k, "ended") || !strcmp(k, "won")) wb(w, rnd() % 2 ? 0xc2 : 0xc3);
    else if (!strcmp(k, "reward")) wdbl(w, 1.0);
    else if (!strcmp(k, "v")) wint(w, 1);
    else if (!strcmp(k, "t")) wstr(w, "ACTION");
    else w_elem(w);
}
static void gen_action(w_t *w)
{
    w->n = 0;
    const char *ks[40];
    size_t nk = 0;
    if (rnd() % 3) { /* every field, in an order shuffled a little */
        ks[nk++] = "t"; ks[nk++] = "v";
        for (int i = 0; i < 11; i++) if (rnd() % 16) ks[nk++] = akeys[i];
        for (size_t i = 0; i < nk; i++) if (rnd() % 4 == 0) { size_t j = rnd() % nk; const char *x = ks[i]; ks[i] = ks[j]; ks[j] = x; }
    }
    size_t extra = rnd() % 6;
    for (size_t i = 0; i < extra; i++) {
        size_t at = rnd() % (nk + 1);
        memmove(ks + at + 1, ks + at, (nk - at) * sizeof *ks);
        ks[at] = akeys[rnd() % (sizeof akeys / sizeof *akeys)];
        nk++;
    }
    wmap(w, nk);
    for (size_t i = 0; i < nk; i++) { wstr(w, ks[i]); wval(w, ks[i]); }
}

int main(int argc, char **argv)
{
    int rounds = argc > 2 ? atoi(argv[2]) : 300;
    DIR *dir = opendir(argv[1]);
    struct dirent *de;
    static uint8_t buf[1 << 20];
    size_t files = 0;
    while ((de = readdir(dir))) {
        if (de->d_name[0] == '.') continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", argv[1], de->d_name);
        FILE *f = fopen(path, "rb");
        if (!f) continue;
        size_t n = fread(buf, 1, sizeof buf, f);
        fclose(f);
        one(buf, n);
        mutate_run(buf, n, rounds);
        files++;
    }
    closedir(dir);
    static w_t w;
    unsigned long long ok0 = g_ok, n0 = g_n;
    for (int i = 0; i < rounds * 100; i++) {
        gen_obs(&w); one(w.b, w.n); if (i % 4 == 0) mutate_run(w.b, w.n, 4);
        gen_action(&w); one(w.b, w.n); if (i % 4 == 0) mutate_run(w.b, w.n, 4);
    }
    printf("generated: %llu decodes, %llu ok\n", g_n - n0, g_ok - ok0);
    printf("diff: %zu corpus files, %llu decodes compared (%llu ok, %llu refused), all equal\n", files, g_n, g_ok, g_bad);
    return 0;
}
