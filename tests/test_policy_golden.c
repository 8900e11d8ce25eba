/*
 * test_policy_golden.c — the policy server's answers byte for byte: recorded actor request bodies
 * (tests/fixtures/policy_bodies.jsonl: every sixth request of two `selroll run`s, --tokens off
 * then completion, 12 tasks) and variants of four of them (streaming, logprobs, token ids, stop
 * strings, max tokens, temperature 0, top_p, no seed, versions, refusals) are sent over real HTTP
 * to a policy server started in-process on a free loopback port, and each answer's status, content
 * type and body (its "created" seconds masked) is hashed and compared with
 * tests/fixtures/policy_answers.txt, written by fb04c00's server. A change of the answers' speed
 * must not change a byte of them: text, logprobs, token ids and the sampling of every seed.
 *
 * SELROLL_GOLDEN_WRITE=PATH writes the hashes to PATH instead (to record them again on purpose).
 */
#include "tests/harness.h"

#include "common/sr.h"
#include "policy/policy_server.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *p;
    size_t n;
} s_buf_t;

static size_t s_write(char *d, size_t sz, size_t nm, void *arg)
{
    s_buf_t *b = arg;
    b->p = realloc(b->p, b->n + sz * nm + 1);
    assert_non_null(b->p);
    memcpy(b->p + b->n, d, sz * nm);
    b->n += sz * nm;
    b->p[b->n] = '\0';
    return sz * nm;
}

/* Members put first into a body (the first occurrence of a key is the one read). */
static const char *const S_VARIANTS[] = {
    "\"stream\":true",
    "\"stream\":true,\"stream_options\":{\"include_usage\":true}",
    "\"stream\":true,\"top_logprobs\":3",
    "\"top_logprobs\":5",
    "\"top_logprobs\":3,\"return_token_ids\":true",
    "\"return_token_ids\":true,\"return_prompt_token_ids\":true",
    "\"return_token_ids\":true,\"return_prompt_token_ids\":true,\"logprobs\":false",
    "\"max_tokens\":7",
    "\"max_tokens\":30,\"return_token_ids\":true",
    "\"stop\":[\"<action>\"]",
    "\"stop\":[\"go\",\"the\"],\"return_token_ids\":true",
    "\"stop\":\"go\"",
    "\"temperature\":0",
    "\"temperature\":1.3,\"top_p\":0.5",
    "\"seed\":null",
    "\"seed\":null,\"return_token_ids\":true",
    "\"logprobs\":false",
    "\"model\":\"selroll-policy-v0\"",
    "\"model\":\"other\"",
    "\"messages\":[]",
    "\"temperature\":3",
    "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Your task is to: "
    "put a clean lettuce in diningtable.\\nYour admissible actions of the current situation "
    "are: [\"},{\"text\":\"'go to fridge 1', 'go to sinkbasin 1', 'look'].\"}]}]",
    "\"messages\":[{\"role\":\"user\",\"content\":\"caf\\u00e9 \\ud83d\\ude00 \\u0001 tab\\t"
    "\"}],\"return_token_ids\":true",
};

/* s_mask_created overwrites the digits after each "created": with zeros (in place). */
static void s_mask_created(char *body)
{
    for (char *p = body; (p = strstr(p, "\"created\":")) != NULL;) {
        p += 10;
        while (*p >= '0' && *p <= '9')
            *p++ = '0';
    }
}

static void answers_are_byte_for_byte_those_of_fb04c00(void **state)
{
    (void)state;
    size_t len = 0;
    char *bodies = harness_fixture("policy_bodies.jsonl", &len);
    const char *out_path = getenv("SELROLL_GOLDEN_WRITE");
    char *golden = NULL;
    FILE *out = NULL;
    if (out_path && out_path[0]) {
        out = fopen(out_path, "w");
        assert_non_null(out);
    } else {
        size_t gl;
        golden = harness_fixture("policy_answers.txt", &gl);
    }

    policy_server_opts_t o;
    policy_server_opts_default(&o);
    o.port = 0;
    o.cost_model = false;
    char err[128];
    policy_server_t *s = policy_server_new(&o, err, sizeof err);
    assert_non_null(s);
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/chat/completions", policy_server_port(s));

    /* the requests: every recorded body, then the variants of four of them */
    char *lines[256];
    int nl = 0;
    for (char *p = bodies, *e; *p && nl < 256; p = e + 1) {
        e = strchr(p, '\n');
        assert_non_null(e);
        *e = '\0';
        lines[nl++] = p;
    }
    assert_true(nl >= 100);
    const int bases[4] = {0, 7, nl / 2, nl / 2 + 7};
    int total = nl + 4 * (int)SR_ARRAY_LEN(S_VARIANTS) + 1;

    CURL *h = curl_easy_init();
    assert_non_null(h);
    struct curl_slist *hd = curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, s_write);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 10000L);
    const char *g = golden;
    int checked = 0, ok200 = 0;
    for (int i = 0; i < total; i++) {
        char *body;
        if (i < nl) {
            body = strdup(lines[i]);
        } else if (i < total - 1) {
            int v = (i - nl) % (int)SR_ARRAY_LEN(S_VARIANTS), b = (i - nl) / (int)SR_ARRAY_LEN(S_VARIANTS);
            const char *base = lines[bases[b]];
            size_t bl = strlen(base), vl = strlen(S_VARIANTS[v]);
            body = malloc(bl + vl + 2);
            assert_non_null(body);
            body[0] = '{';
            memcpy(body + 1, S_VARIANTS[v], vl);
            body[1 + vl] = ',';
            memcpy(body + 2 + vl, base + 1, bl); /* with its NUL */
        } else {
            body = strdup("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}"); /* cut */
        }
        assert_non_null(body);
        s_buf_t b = {0};
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
        assert_int_equal(curl_easy_perform(h), CURLE_OK);
        long status = 0;
        char *ct = NULL;
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
        curl_easy_getinfo(h, CURLINFO_CONTENT_TYPE, &ct);
        assert_non_null(b.p);
        s_mask_created(b.p);
        uint64_t x = sr_fnv1a(ct ? ct : "", ct ? strlen(ct) : 0, SR_FNV1A_BASIS);
        x = sr_fnv1a("\n", 1, x);
        x = sr_fnv1a(b.p, b.n, x);
        ok200 += status == 200;
        if (out) {
            fprintf(out, "%d %ld %016llx\n", i, status, (unsigned long long)x);
        } else {
            int gi = -1;
            long gs = 0;
            unsigned long long gx = 0;
            assert_int_equal(sscanf(g, "%d %ld %llx", &gi, &gs, &gx), 3);
            if (gi != i || gs != status || gx != x)
                fail_msg("request %d: status %ld, hash %016llx; recorded %d %ld %016llx\n"
                         "request: %s\nanswer: %s",
                         i, status, (unsigned long long)x, gi, gs, gx, body, b.p);
            g = strchr(g, '\n');
            assert_non_null(g);
            g++;
            checked++;
        }
        free(b.p);
        free(body);
    }
    if (!out) {
        assert_int_equal(checked, total);
        assert_int_equal(*g, '\0'); /* no recorded answer left over */
    }
    assert_true(ok200 >= nl); /* the actor bodies all answered 200, and most variants */
    curl_slist_free_all(hd);
    curl_easy_cleanup(h);
    policy_server_destroy(&s);
    if (out)
        fclose(out);
    free(golden);
    free(bodies);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_ALL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(answers_are_byte_for_byte_those_of_fb04c00),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
