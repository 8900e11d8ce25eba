/*
 * household_int.h — the insides of the household environment, shared by its files and private to
 * env_worker/household/: the world's limits, an object's state bits, the receptacle, object,
 * command and text types, the world (struct household), and the functions one file of the
 * household lends another.
 *
 * household.c: task ids, a world's life, the queries, the operations table; household_gen.c: the
 * generator (floor plan, goal, objects) on its private splitmix64; household_step.c: reset, the
 * admissible commands, the step and the goal test; household_text.c: the texts they write.
 */
#ifndef SR_HOUSEHOLD_INT_H
#define SR_HOUSEHOLD_INT_H

#include "env_worker/household/household.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HH_MAX_RECEPS 64
#define HH_MAX_OBJS 64
#define HH_MAX_CMDS 256
#define HH_NAME 24
#define HH_TEXT 8192
#define HH_POOL 12288

/* Object state bits. */
enum { HH_HOT = 1, HH_COLD = 2, HH_CLEAN = 4, HH_ON = 8 };

typedef struct {
    uint8_t type;
    uint8_t num;
    bool openable;
    uint8_t name_len;
    char name[HH_NAME];
} hh_recep_t;

typedef struct {
    uint8_t type;
    uint8_t num;
    int8_t loc; /* receptacle index, or -1 while held */
    uint8_t state;
    uint8_t name_len;
    char name[HH_NAME];
} hh_obj_t;

typedef struct {
    uint8_t op;
    int8_t obj;
    int8_t rec;
} hh_cmd_t;

typedef struct {
    char *buf;
    size_t len;
    size_t cap;
} hh_text_t;

struct household {
    char task_id[64];
    household_split_t split;
    uint32_t index;
    uint32_t floor_plan;
    int room;
    household_task_t task;
    int goal_obj;   /* object type */
    int goal_recep; /* receptacle type, -1 for look */
    int lamp_obj;   /* object type of the room's lamp, -1 when none */
    int max_steps;
    char goal[128];
    char room_sentence[2048];

    hh_recep_t receps[HH_MAX_RECEPS];
    int n_receps;
    hh_obj_t init_objs[HH_MAX_OBJS];
    hh_obj_t objs[HH_MAX_OBJS];
    int n_objs;
    /* the objects by name (strcmp), so that the "take" and "use" commands of a place are written
     * in the order the list keeps them */
    uint8_t obj_order[HH_MAX_OBJS];

    /* Dynamic state. */
    bool open[HH_MAX_RECEPS];
    int cur;  /* receptacle index, -1 in the middle of the room */
    int held; /* object index, -1 when hands are empty */
    int steps;
    bool done;
    bool won;
    double reward;

    /* Output of the last reset or step. */
    char text[HH_TEXT];
    hh_text_t out;
    char pool[HH_POOL];
    size_t pool_len;
    const char *adm[HH_MAX_CMDS];
    uint32_t adm_len[HH_MAX_CMDS]; /* strlen(adm[i]) */
    hh_cmd_t cmds[HH_MAX_CMDS];
    int n_adm;
    uint64_t adm_version; /* env_obs_t.admissible_version of adm; 0 before the first list */
    /* "go to <receptacle>" for every receptacle, sorted: the bulk of every list, the same for the
     * whole episode, so written and sorted once (on the first list) and merged into each. */
    bool goto_ready;
    size_t goto_pool_len;
    char goto_pool[HH_MAX_RECEPS * (HH_NAME + 8)];
    const char *goto_s[HH_MAX_RECEPS];
    uint32_t goto_len[HH_MAX_RECEPS]; /* strlen(goto_s[i]) */
    int8_t goto_r[HH_MAX_RECEPS];
    hh_cmd_t goto_cmd[HH_MAX_RECEPS];  /* the command of goto_s[i] */
    uint8_t goto_at[HH_MAX_RECEPS];    /* receptacle r's place in goto_s */
};

/* household_text.c: the texts. hh_put_n and hh_put append to t, cut at its capacity; hh_put_list
 * writes "a X, a Y, and a Z" / "a X" / "nothing"; hh_put_contents lists what lies in receptacle r;
 * hh_put_recep_desc describes receptacle r as "go to", "open" and "examine" show it;
 * hh_put_examine_obj is what "examine" says of an object. */
void hh_put_n(hh_text_t *t, const char *s, size_t n);
void hh_put(hh_text_t *t, const char *s);
void hh_put_list(hh_text_t *t, const char *const *names, const uint8_t *lens, int n);
void hh_put_contents(const hh_obj_t *objs, int n_objs, hh_text_t *t, int r);
void hh_put_recep_desc(household_t *h, hh_text_t *t, int r);
void hh_put_examine_obj(hh_text_t *t, const hh_obj_t *o);

/* household_gen.c: the generator, called in this order by household_new once split, index and
 * floor plan are set: the room and its furniture from the floor plan, then the task, goal and
 * objects from the placement seed, then the sentence that lists the receptacles. */
void hh_generate_layout(household_t *h);
void hh_generate_task(household_t *h);
void hh_build_room_sentence(household_t *h);

/* household_step.c: hh_goto_prepare writes and sorts the "go to"s of the generated world (once);
 * hh_order_objects sorts the objects by name into obj_order (once). */
void hh_goto_prepare(household_t *h);
void hh_order_objects(household_t *h);

#endif
