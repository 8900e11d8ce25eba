/*
 * fuzz_household_cmd.c — libFuzzer target for the household environment's command parser: the
 * input is split at newlines into actions that are stepped, in order, through a fresh episode
 * (household_step), and the first line is also tried as a task id. Whatever an actor sends, the
 * environment answers with an observation or an error.
 */
#include "common/sr.h"
#include "env_worker/household/household.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256];
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    household_split_t split;
    uint32_t index;
    char *nl = strchr(text, '\n');
    if (nl)
        *nl = '\0';
    (void)household_parse_task_id(text, &split, &index, err, sizeof err);
    if (nl)
        *nl = '\n';

    household_t *h = household_new("household/train/7", 64, err, sizeof err);
    env_obs_t obs;
    if (h && household_reset(h, &obs) == SR_OK) {
        char *save = NULL;
        for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
            if (household_step(h, line, &obs) != SR_OK)
                break;
        }
    }
    household_destroy(&h);
    free(text);
    return 0;
}
