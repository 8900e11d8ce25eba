/*
 * test_sr_arena.c — the bump allocator of a slot's episode: aligned allocations that do not move
 * or overlap, large ones in chunks of their own, cut copies as sr_xstrdup_max cuts, and a reset
 * that keeps one chunk (memcheck: nothing leaks, nothing is read past its end).
 */
#include "tests/harness.h"
#include "common/sr.h"
#include "common/sr_arena.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void allocations_are_aligned_stable_and_apart(void **state)
{
    (void)state;
    sr_arena_t a;
    sr_arena_init(&a, 256); /* small chunks: many of them, and large requests of their own */
    enum { N = 300 };
    unsigned char *p[N];
    size_t len[N];
    for (size_t i = 0; i < N; i++) {
        len[i] = (i * 37) % 200 + (i % 7 == 0 ? 500 : 0); /* 0..199, some past a quarter chunk */
        p[i] = sr_arena_alloc(&a, len[i]);
        assert_non_null(p[i]);
        assert_int_equal((uintptr_t)p[i] % 8, 0);
        memset(p[i], (int)(i & 0xff), len[i]);
    }
    for (size_t i = 0; i < N; i++) /* no later allocation wrote over an earlier one */
        for (size_t k = 0; k < len[i]; k++)
            assert_int_equal(p[i][k], (unsigned char)(i & 0xff));
    sr_arena_reset(&a);
    void *q = sr_arena_alloc(&a, 16); /* from the chunk kept */
    assert_non_null(q);
    memset(q, 1, 16);
    sr_arena_free(&a);
    assert_null(a.head);
    sr_arena_free(&a); /* twice is harmless */
    assert_non_null(sr_arena_alloc(&a, 8)); /* usable after a free */
    sr_arena_free(&a);
}

static void copies_are_what_the_heap_copies_are(void **state)
{
    (void)state;
    sr_arena_t a;
    sr_arena_init(&a, 0);
    /* cuts below max at a character's start, as sr_xstrdup_max */
    const char *texts[] = {"", "plain", "\xc3\xa9t\xc3\xa9 \xe2\x82\xac\xe2\x82\xac", NULL};
    size_t maxes[] = {1, 2, 3, 4, 5, 6, 8, 12, 100};
    for (size_t i = 0; i < 4; i++) {
        for (size_t k = 0; k < sizeof maxes / sizeof *maxes; k++) {
            char *want = sr_xstrdup_max(texts[i], maxes[k]);
            char *got = sr_arena_strdup_max(&a, texts[i], maxes[k]);
            assert_string_equal(got, want);
            free(want);
        }
    }
    assert_string_equal(sr_arena_strdup_max(&a, "abc", 0), ""); /* no room: empty, not a wrap */
    char *s = sr_arena_strndup(&a, "abcdef", 3);
    assert_string_equal(s, "abc");
    int32_t ids[5] = {1, 2, 3, 2147483647, 0};
    int32_t *d = sr_arena_memdup(&a, ids, sizeof ids);
    assert_memory_equal(d, ids, sizeof ids);
    assert_null(sr_arena_memdup(&a, ids, 0));
    /* a text longer than a chunk */
    size_t big = 200 * 1024;
    char *t = malloc(big + 1);
    memset(t, 'x', big);
    t[big] = '\0';
    char *c = sr_arena_strdup_max(&a, t, big + 1);
    assert_int_equal(strlen(c), big);
    free(t);
    /* a reset keeps one ordinary chunk: the next episode's copies need no new one */
    sr_arena_reset(&a);
    assert_non_null(a.head);
    char *again = sr_arena_strndup(&a, "next", 4);
    assert_string_equal(again, "next");
    sr_arena_free(&a);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(allocations_are_aligned_stable_and_apart),
        cmocka_unit_test(copies_are_what_the_heap_copies_are),
    };
    return harness_run_("sr_arena", tests, SR_ARRAY_LEN(tests), argc, argv);
}
