/*
 * fuzz_policy_http.c — libFuzzer target for what the built-in policy server reads from an HTTP
 * request body: the JSON (cJSON, as policy/ps_openai.c parses it) and, in every user message, the
 * prompt text read back by common/pparse.c. Raw input that is not JSON is also parsed as a
 * prompt and as a goal sentence, so the text parser sees arbitrary bytes too.
 *
 * The dashboard's HTTP request handling has a target of its own: fuzz_dashboard_http.c.
 */
#include "common/pparse.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void s_prompt(const char *text)
{
    pparse_state_t st;
    memset(&st, 0, sizeof st);
    char obj[PPARSE_NAME_MAX], recep[PPARSE_NAME_MAX], type[PPARSE_NAME_MAX];
    if (pparse_user_text(text, &st) == 0 && st.goal)
        (void)pparse_goal(st.goal, obj, recep);
    pparse_state_clear(&st);
    (void)pparse_type_of(text, type, sizeof type);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    char obj[PPARSE_NAME_MAX], recep[PPARSE_NAME_MAX];
    (void)pparse_goal(text, obj, recep);
    cJSON *root = cJSON_ParseWithLength((const char *)data, size);
    if (!root) {
        s_prompt(text);
    } else {
        const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(root, "messages");
        const cJSON *m;
        cJSON_ArrayForEach(m, msgs)
        {
            const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
            if (cJSON_IsString(content) && content->valuestring)
                s_prompt(content->valuestring);
        }
        cJSON_Delete(root);
    }
    free(text);
    return 0;
}
