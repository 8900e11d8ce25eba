/*
 * exp_arms.h — the arms of `selroll experiment`: a table from an arm's name to the extra
 * `selroll run` flags that make it, so a new arm is one line of exp_arms.c.
 *
 * Every arm runs on the same seeds, task order and initial weights; only these flags differ.
 * `baseline` runs the gate in shadow mode, so its groups all finish and give the outcome and
 * d_K on which every gate rule's precision and recall are measured.
 */
#ifndef SR_EXPERIMENT_ARMS_H
#define SR_EXPERIMENT_ARMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char *name;  /* "baseline", "gate", ... */
    const char *flags; /* extra space-separated `selroll run` arguments */
    const char *rule;  /* the gate rule whose precision/recall belong to the arm: "paper", "multi",
                        * ...; NULL for arms that cut nothing mid-rollout */
    bool needs_gate_rule; /* needs `selroll run --gate-rule` */
    const char *what;     /* one line for the report */
} exp_arm_t;

/* exp_arms_find returns the arm called name, or NULL. */
const exp_arm_t *exp_arms_find(const char *name);

/* exp_arms_all returns the table; *n gets its length. */
const exp_arm_t *exp_arms_all(size_t *n);

/* exp_arms_names writes the arm names, separated by ", ", into buf (cut to cap). */
void exp_arms_names(char *buf, size_t cap);

/* exp_arms_run_name writes the `selroll run --run` name of arm a on seed into buf:
 * "exp-<arm>-<seed>" with every character a run name does not allow (outside A-Z a-z 0-9 _ . -,
 * such as the '+' of gate+greso) turned into '_'. */
void exp_arms_run_name(const exp_arm_t *a, int64_t seed, char *buf, size_t cap);

/* exp_arms_split splits text in place into at most cap words separated by spaces, where a part
 * in double quotes keeps its spaces and loses the quotes (`--gate-rule-args "--a 1"` is two
 * words, the second `--a 1`). argv[i] point into text. Returns the number of words; 0 for NULL
 * arguments. */
int exp_arms_split(char *text, char **argv, int cap);

#endif
