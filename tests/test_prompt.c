/*
 * test_prompt.c — the step prompt: golden texts of the default template at step 1 and step 5,
 * history length, custom templates from files, and template errors.
 */
#include "tests/harness.h"

#include "actor/prompt.h"
#include "common/jsonw.h"
#include "common/sr.h"
#include "common/sr_buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char OPENING[] =
    "-= Welcome to TextWorld, ALFRED! =-\n\n"
    "You are in the middle of a room. Looking quickly around you, you see a cabinet 1, a "
    "countertop 1, a diningtable 1, a fridge 1, and a sinkbasin 1.\n\n"
    "Your task is to: put a clean lettuce in diningtable.";

static const char *const ADM1[] = {"go to cabinet 1", "go to countertop 1", "go to diningtable 1",
                                   "go to fridge 1", "go to sinkbasin 1", "help", "inventory", "look"};

/* s_escaped returns text escaped as jsonw_strn escapes a string, without its quotes (new). */
static char *s_escaped(const char *text, size_t n)
{
    sr_buf_t b = SR_BUF_INIT;
    jsonw_t w;
    jsonw_init(&w, &b);
    jsonw_strn(&w, text, n);
    char *out = jsonw_finish(&w);
    assert_non_null(out);
    size_t len = strlen(out);
    assert_true(len >= 2 && out[0] == '"' && out[len - 1] == '"');
    memmove(out, out + 1, len - 2);
    out[len - 2] = '\0';
    return out;
}

/* s_json_same checks that prompt_render_json_into gives prompt_render_into's texts escaped. */
static void s_json_same(const prompt_t *p, const prompt_state_t *st)
{
    sr_buf_t sys = SR_BUF_INIT, user = SR_BUF_INIT, jsys = SR_BUF_INIT, juser = SR_BUF_INIT;
    assert_int_equal(prompt_render_into(p, st, &sys, &user), 0);
    assert_int_equal(prompt_render_json_into(p, st, &jsys, &juser), 0);
    char *want_sys = s_escaped(sys.len ? (char *)sys.data : "", sys.len);
    char *want_user = s_escaped((char *)user.data, user.len);
    assert_int_equal(jsys.len, strlen(want_sys));
    if (jsys.len)
        assert_string_equal((char *)jsys.data, want_sys);
    assert_int_equal(juser.len, strlen(want_user));
    assert_string_equal((char *)juser.data, want_user);
    free(want_sys);
    free(want_user);
    sr_buf_free(&sys);
    sr_buf_free(&user);
    sr_buf_free(&jsys);
    sr_buf_free(&juser);
}

static const char GOLDEN_STEP1[] =
    "Your task is to: put a clean lettuce in diningtable.\n"
    "This is the first step.\n"
    "You are now at step 1 and your current observation is: -= Welcome to TextWorld, ALFRED! =-\n\n"
    "You are in the middle of a room. Looking quickly around you, you see a cabinet 1, a "
    "countertop 1, a diningtable 1, a fridge 1, and a sinkbasin 1.\n\n"
    "Your task is to: put a clean lettuce in diningtable.\n"
    "Your admissible actions of the current situation are: ['go to cabinet 1', 'go to countertop 1', "
    "'go to diningtable 1', 'go to fridge 1', 'go to sinkbasin 1', 'inventory', 'look'].\n"
    "\n"
    "Now it's your turn to take an action.\n"
    "You should first reason step-by-step about the current situation. This reasoning process MUST "
    "be enclosed within <think> </think> tags.\n"
    "Once you've finished your reasoning, you should choose an admissible action for current step "
    "and present it within <action> </action> tags.";

static const prompt_turn_t HIST4[] = {
    {OPENING, "go to countertop 1"},
    {"You arrive at countertop 1. On the countertop 1, you see a lettuce 1, and a mug 2.",
     "take lettuce 1 from countertop 1"},
    {"You pick up the lettuce 1 from the countertop 1.", "go to cabinet 1"},
    {"You arrive at cabinet 1. The cabinet 1 is closed.", "go to sinkbasin 1"},
};

static const char *const ADM5[] = {"clean lettuce 1 with sinkbasin 1", "go to cabinet 1",
                                   "go to diningtable 1", "inventory", "look",
                                   "move lettuce 1 to sinkbasin 1"};

static const char GOLDEN_STEP5[] =
    "Your task is to: put a clean lettuce in diningtable.\n"
    "Prior to this step, you have already taken 4 step(s). Below are the most recent 2 observations "
    "and the corresponding actions you took:\n"
    "[Observation 3: 'You pick up the lettuce 1 from the countertop 1.', Action 3: 'go to cabinet 1']\n"
    "[Observation 4: 'You arrive at cabinet 1. The cabinet 1 is closed.', Action 4: 'go to sinkbasin 1']\n"
    "You are now at step 5 and your current observation is: You arrive at sinkbasin 1. On the "
    "sinkbasin 1, you see nothing. There's nothing special about it.\n"
    "Your admissible actions of the current situation are: ['clean lettuce 1 with sinkbasin 1', "
    "'go to cabinet 1', 'go to diningtable 1', 'inventory', 'look', 'move lettuce 1 to sinkbasin 1'].\n"
    "\n"
    "Now it's your turn to take an action.\n"
    "You should first reason step-by-step about the current situation. This reasoning process MUST "
    "be enclosed within <think> </think> tags.\n"
    "Once you've finished your reasoning, you should choose an admissible action for current step "
    "and present it within <action> </action> tags.";

static const char OBS5[] =
    "You arrive at sinkbasin 1. On the sinkbasin 1, you see nothing. There's nothing special about it.";

static void s_state5(prompt_state_t *s)
{
    *s = (prompt_state_t){.goal = "put a clean lettuce in diningtable.",
                          .history = HIST4,
                          .n_history = 4,
                          .current_obs = OBS5,
                          .admissible = ADM5,
                          .n_admissible = sizeof ADM5 / sizeof ADM5[0]};
}

static void default_step1_matches_golden_text(void **state)
{
    (void)state;
    prompt_t *p = prompt_new(NULL, NULL, -1, NULL, 0);
    assert_non_null(p);
    assert_int_equal(prompt_history_len(p), 2);
    prompt_state_t s = {.goal = "put a clean lettuce in diningtable.",
                        .current_obs = OPENING,
                        .admissible = ADM1,
                        .n_admissible = sizeof ADM1 / sizeof ADM1[0]};
    prompt_messages_t m;
    assert_int_equal(prompt_render(p, &s, &m), 0);
    assert_string_equal(m.system,
                        "You are an expert agent operating in the ALFRED embodied household environment.");
    assert_string_equal(m.user, GOLDEN_STEP1);
    assert_null(strstr(m.user, "'help'")); /* help is left out */
    prompt_messages_clear(&m);
    assert_null(m.user);
    prompt_destroy(&p);
    assert_null(p);
    prompt_destroy(&p);
    prompt_destroy(NULL);
}

static void default_step5_shows_last_two_pairs(void **state)
{
    (void)state;
    prompt_t *p = prompt_new(NULL, NULL, -1, NULL, 0);
    prompt_state_t s;
    s_state5(&s);
    prompt_messages_t m;
    assert_int_equal(prompt_render(p, &s, &m), 0);
    assert_string_equal(m.user, GOLDEN_STEP5);
    prompt_messages_clear(&m);
    prompt_destroy(&p);
}

static void history_length_is_configurable(void **state)
{
    (void)state;
    prompt_t *p = prompt_new(NULL, NULL, 3, NULL, 0);
    prompt_state_t s;
    s_state5(&s);
    prompt_messages_t m;
    assert_int_equal(prompt_render(p, &s, &m), 0);
    assert_non_null(strstr(m.user, "Below are the most recent 3 observations"));
    assert_non_null(strstr(m.user, "[Observation 2: 'You arrive at countertop 1. On the countertop 1, "
                                   "you see a lettuce 1, and a mug 2.', Action 2: 'take lettuce 1 from "
                                   "countertop 1']\n[Observation 3:"));
    assert_null(strstr(m.user, "Observation 1:"));
    prompt_messages_clear(&m);
    prompt_destroy(&p);

    /* H larger than the episode so far: all pairs, numbered from 1, the opening text kept whole. */
    p = prompt_new(NULL, NULL, 10, NULL, 0);
    assert_int_equal(prompt_render(p, &s, &m), 0);
    assert_non_null(strstr(m.user, "Below are the most recent 4 observations"));
    assert_non_null(strstr(m.user, "[Observation 1: '-= Welcome to TextWorld, ALFRED! =-\n\nYou are in"));
    prompt_messages_clear(&m);
    prompt_destroy(&p);
}

static void custom_template_placeholders_render(void **state)
{
    (void)state;
    char err[200] = "";
    prompt_t *p = prompt_new("", "G={goal} S={step} P={n_prev} H={n_hist} {{literal}\n"
                                 "{#history}HIST:\n{history}\n{/history}{^history}none\n{/history}"
                                 "OBS={current_obs}\nA={admissible}",
                             1, err, sizeof err);
    assert_non_null(p);
    prompt_state_t s;
    s_state5(&s);
    prompt_messages_t m;
    assert_int_equal(prompt_render(p, &s, &m), 0);
    assert_null(m.system); /* empty system text: no system message */
    assert_string_equal(m.user,
                        "G=put a clean lettuce in diningtable. S=5 P=4 H=1 {literal}\n"
                        "HIST:\n[Observation 4: 'You arrive at cabinet 1. The cabinet 1 is closed.', "
                        "Action 4: 'go to sinkbasin 1']\n"
                        "OBS=You arrive at sinkbasin 1. On the sinkbasin 1, you see nothing. There's "
                        "nothing special about it.\n"
                        "A=['clean lettuce 1 with sinkbasin 1', 'go to cabinet 1', 'go to diningtable 1', "
                        "'inventory', 'look', 'move lettuce 1 to sinkbasin 1']");
    prompt_messages_clear(&m);

    prompt_state_t empty = {0};
    assert_int_equal(prompt_render(p, &empty, &m), 0);
    assert_string_equal(m.user, "G= S=1 P=0 H=0 {literal}\nnone\nOBS=\nA=[]");
    prompt_messages_clear(&m);
    assert_int_equal(prompt_render(p, NULL, &m), -1);
    prompt_destroy(&p);
}

static void malformed_templates_are_refused_with_reason(void **state)
{
    (void)state;
    char err[200];
    assert_null(prompt_new(NULL, "Task: {gaol}", -1, err, sizeof err));
    assert_non_null(strstr(err, "unknown placeholder {gaol}"));
    assert_null(prompt_new(NULL, "{#history}x", -1, err, sizeof err));
    assert_non_null(strstr(err, "not closed"));
    assert_null(prompt_new(NULL, "x{/history}", -1, err, sizeof err));
    assert_non_null(strstr(err, "without an opening"));
    assert_null(prompt_new(NULL, "{#history}{^history}{/history}", -1, err, sizeof err));
    assert_non_null(strstr(err, "nested"));
    assert_null(prompt_new("sys {", NULL, -1, err, sizeof err));
    assert_non_null(strstr(err, "system template: unclosed"));
    assert_null(prompt_new(NULL, "{#foo}{/foo}", -1, NULL, 0)); /* no err buffer: still refused */
}

static char *s_write_tmp(const char *text)
{
    char *path = strdup("/tmp/selroll-prompt-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    return path;
}

/* The escaped render is the plain one escaped for a JSON string, byte for byte: the default
 * template and one whose literal text needs escapes, at every history length, with texts holding
 * quotes, backslashes, line breaks, control bytes and UTF-8, and admissible actions with and
 * without escapes ("help" left out). */
static void json_render_is_the_plain_render_escaped(void **state)
{
    (void)state;
    static const char odd_user[] =
        "Goal:\t\"{goal}\"\\ {{x}}\n{#history}H{n_hist}/{n_prev}:\n{history}\x01\n{/history}"
        "{^history}none\r\n{/history}Step {step}: {current_obs}\nActions: {admissible}\x1f";
    prompt_t *ps[3];
    char err[256];
    ps[0] = prompt_new(NULL, NULL, -1, err, sizeof err);
    ps[1] = prompt_new("Sys \"quoted\"\n\\ {goal}", odd_user, 3, err, sizeof err);
    ps[2] = prompt_new("", odd_user, 0, err, sizeof err);
    static const char *const texts[] = {
        "plain text of some length, longer than sixteen bytes for the wide scan",
        "", "a \"quote\" and a \\ backslash", "line\nbreaks\r\nand\ttabs\b\f",
        "ctl \x01\x02\x1f bytes", "caf\xc3\xa9 \xe2\x82\xac UTF-8 / slash"};
    const char *adm[] = {"go to \"cabinet\" 1", "help", "look", "take a\\b", "line\nbreak",
                         "open drawer 1"};
    prompt_turn_t hist[6];
    size_t nt = SR_ARRAY_LEN(texts);
    for (size_t k = 0; k < 3; k++) {
        assert_non_null(ps[k]);
        for (size_t n = 0; n <= 6; n++) {
            for (size_t i = 0; i < n; i++)
                hist[i] = (prompt_turn_t){texts[(i + n) % nt], texts[(i + 2 * n + 1) % nt]};
            prompt_state_t st = {.goal = texts[(n + k) % nt], .history = hist, .n_history = n,
                                 .current_obs = texts[(n + 3) % nt], .admissible = adm,
                                 .n_admissible = n % 2 ? SR_ARRAY_LEN(adm) : 3};
            s_json_same(ps[k], &st);
            st.goal = NULL;
            st.current_obs = NULL;
            s_json_same(ps[k], &st);
        }
        prompt_destroy(&ps[k]);
    }
}

static void template_file_loads_system_and_user_parts(void **state)
{
    (void)state;
    char err[200] = "";
    char *path = s_write_tmp("\n[system]\nYou play a household game.\n[user]\nGoal: {goal}\n"
                             "Actions: {admissible}\n");
    prompt_t *p = prompt_load(path, -1, err, sizeof err);
    assert_non_null(p);
    prompt_state_t s;
    s_state5(&s);
    s.n_admissible = 2;
    prompt_messages_t m;
    assert_int_equal(prompt_render(p, &s, &m), 0);
    assert_string_equal(m.system, "You play a household game.");
    assert_string_equal(m.user, "Goal: put a clean lettuce in diningtable.\n"
                                "Actions: ['clean lettuce 1 with sinkbasin 1', 'go to cabinet 1']");
    prompt_messages_clear(&m);
    prompt_destroy(&p);
    unlink(path);
    free(path);

    /* Without [system], the default system text. */
    path = s_write_tmp("[user]\nStep {step}.");
    p = prompt_load(path, 0, err, sizeof err);
    assert_non_null(p);
    assert_int_equal(prompt_render(p, &s, &m), 0);
    assert_string_equal(m.system, PROMPT_DEFAULT_SYSTEM);
    assert_string_equal(m.user, "Step 5.");
    prompt_messages_clear(&m);
    prompt_destroy(&p);
    unlink(path);
    free(path);
}

static void bad_template_files_are_refused_with_reason(void **state)
{
    (void)state;
    char err[200] = "";
    assert_null(prompt_load("/nonexistent/selroll.tmpl", -1, err, sizeof err));
    assert_non_null(strstr(err, "cannot open template"));

    char *path = s_write_tmp("[system]\nonly a system part\n");
    assert_null(prompt_load(path, -1, err, sizeof err));
    assert_non_null(strstr(err, "no [user] section"));
    unlink(path);
    free(path);

    path = s_write_tmp("stray text\n[user]\nx\n");
    assert_null(prompt_load(path, -1, err, sizeof err));
    assert_non_null(strstr(err, "before its first section"));
    unlink(path);
    free(path);

    path = s_write_tmp("[user]\na\n[user]\nb\n");
    assert_null(prompt_load(path, -1, err, sizeof err));
    assert_non_null(strstr(err, "two [user] sections"));
    unlink(path);
    free(path);

    path = s_write_tmp("[user]\n{oops}\n");
    assert_null(prompt_load(path, -1, err, sizeof err));
    assert_non_null(strstr(err, "unknown placeholder {oops}"));
    unlink(path);
    free(path);
}

static void default_template_file_in_docs_equals_builtin(void **state)
{
    (void)state;
    char err[200] = "";
    prompt_t *p = prompt_load("docs/prompt_default.tmpl", -1, err, sizeof err);
    if (!p)
        fail_msg("docs/prompt_default.tmpl: %s", err);
    prompt_state_t s;
    s_state5(&s);
    prompt_messages_t m;
    assert_int_equal(prompt_render(p, &s, &m), 0);
    assert_string_equal(m.system, PROMPT_DEFAULT_SYSTEM);
    assert_string_equal(m.user, GOLDEN_STEP5);
    prompt_messages_clear(&m);
    prompt_destroy(&p);
}

/* The admissible list: "help" left out wherever it stands, NULL entries skipped, other words
 * starting with h kept, an empty list as [], and a list long enough to grow the buffer. */
static void admissible_list_leaves_out_help_and_nothing_else(void **state)
{
    (void)state;
    char err[200] = "";
    prompt_t *p = prompt_new("", "{admissible}", -1, err, sizeof err);
    assert_non_null(p);
    const char *adm[] = {"help", "helpful", NULL, "h", "go to 'a'", "help", "", "hELP"};
    prompt_state_t s = {.goal = "g", .admissible = adm, .n_admissible = sizeof adm / sizeof adm[0]};
    prompt_messages_t m;
    assert_int_equal(prompt_render(p, &s, &m), 0);
    assert_string_equal(m.user, "['helpful', 'h', 'go to 'a'', '', 'hELP']");
    prompt_messages_clear(&m);
    s.n_admissible = 1;
    assert_int_equal(prompt_render(p, &s, &m), 0);
    assert_string_equal(m.user, "[]");
    prompt_messages_clear(&m);

    static char names[300][16];
    const char *many[300];
    char want[300 * 20] = "[";
    for (int i = 0; i < 300; i++) {
        snprintf(names[i], sizeof names[i], "take thing %d", i);
        many[i] = names[i];
        strcat(want, i ? ", '" : "'");
        strcat(want, names[i]);
        strcat(want, "'");
    }
    strcat(want, "]");
    s.admissible = many;
    s.n_admissible = 300;
    sr_buf_t sys = SR_BUF_INIT, user = SR_BUF_INIT;
    assert_int_equal(prompt_render_into(p, &s, &sys, &user), 0);
    assert_string_equal((const char *)user.data, want);
    sr_buf_free(&sys);
    sr_buf_free(&user);
    prompt_destroy(&p);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(admissible_list_leaves_out_help_and_nothing_else),
    cmocka_unit_test(default_step1_matches_golden_text),
    cmocka_unit_test(default_step5_shows_last_two_pairs),
    cmocka_unit_test(history_length_is_configurable),
    cmocka_unit_test(custom_template_placeholders_render),
    cmocka_unit_test(malformed_templates_are_refused_with_reason),
    cmocka_unit_test(json_render_is_the_plain_render_escaped),
    cmocka_unit_test(template_file_loads_system_and_user_parts),
    cmocka_unit_test(bad_template_files_are_refused_with_reason),
    cmocka_unit_test(default_template_file_in_docs_equals_builtin),
};

HARNESS_MAIN("prompt", tests)
