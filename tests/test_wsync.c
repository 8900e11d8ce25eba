/*
 * test_wsync.c — the weight-sync requests of each mode (route and body), the adapter names, and
 * the configurations wsync_new refuses.
 */
#include "tests/harness.h"
#include "common/reactor.h"
#include "common/sr.h"
#include "coordinator/wsync.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void each_mode_renders_its_documented_request(void **state)
{
    (void)state;
    const char *route = NULL;
    char *b = wsync_request(WSYNC_VLLM_LORA, "lora-v{version}", 7, "/ckpt/v7", false, &route);
    assert_string_equal(route, "/v1/load_lora_adapter");
    assert_string_equal(b, "{\"lora_name\":\"lora-v7\",\"lora_path\":\"/ckpt/v7\"}");
    free(b);
    b = wsync_request(WSYNC_VLLM_LORA, "lora-v{version}", 5, NULL, true, &route);
    assert_string_equal(route, "/v1/unload_lora_adapter");
    assert_string_equal(b, "{\"lora_name\":\"lora-v5\"}");
    free(b);
    b = wsync_request(WSYNC_SGLANG_LORA, NULL, 2, "/a \"b\"", false, &route);
    assert_string_equal(route, "/load_lora_adapter");
    assert_string_equal(b, "{\"lora_name\":\"selroll-policy-v2\",\"lora_path\":\"/a \\\"b\\\"\"}");
    free(b);
    b = wsync_request(WSYNC_SGLANG_LORA, NULL, 1, NULL, true, &route);
    assert_string_equal(route, "/unload_lora_adapter");
    free(b);
    b = wsync_request(WSYNC_SGLANG_DISK, NULL, 3, "/ckpt/full-3", false, &route);
    assert_string_equal(route, "/update_weights_from_disk");
    assert_string_equal(b, "{\"model_path\":\"/ckpt/full-3\"}");
    free(b);
    assert_null(wsync_request(WSYNC_SGLANG_DISK, NULL, 3, NULL, true, &route));
    assert_null(wsync_request(WSYNC_NONE, NULL, 3, "/x", false, &route));
    char name[64];
    wsync_name("Qwen3-8B-rl-v{version}-lora", 12, name, sizeof name);
    assert_string_equal(name, "Qwen3-8B-rl-v12-lora");
}

static void bad_configurations_are_refused_with_a_line(void **state)
{
    (void)state;
    reactor_t *r = reactor_new();
    assert_non_null(r);
    char err[256];
    const char *servers[] = {"http://127.0.0.1:1", "ftp://x"};
    wsync_cfg_t c = {.mode = WSYNC_VLLM_LORA, .servers = servers, .n_servers = 0};
    assert_null(wsync_new(&c, r, err, sizeof err));
    assert_non_null(strstr(err, "--policy-servers"));
    c.n_servers = 1;
    c.lora_name = "fixed";
    assert_null(wsync_new(&c, r, err, sizeof err));
    assert_non_null(strstr(err, "{version}"));
    c.lora_name = NULL;
    c.n_servers = 2;
    assert_null(wsync_new(&c, r, err, sizeof err));
    assert_non_null(strstr(err, "ftp://x"));
    c.n_servers = 1;
    wsync_t *w = wsync_new(&c, r, err, sizeof err);
    assert_non_null(w);
    assert_int_equal(wsync_load(w, 1, "", NULL, NULL), SR_EINVAL);
    wsync_destroy(&w);
    assert_null(w);
    wsync_destroy(NULL);
    reactor_destroy(&r);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(each_mode_renders_its_documented_request),
        cmocka_unit_test(bad_configurations_are_refused_with_a_line),
    };
    return harness_run_("wsync", tests, SR_ARRAY_LEN(tests), argc, argv);
}
