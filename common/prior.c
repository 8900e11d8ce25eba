/*
 * prior.c — the version-0 weights of the built-in policy (see prior.h).
 *
 * The prior writes weights by feature name through model_feature_index, so it depends only on the
 * feature vocabulary of model.c, never on the environment's code. The object-in-receptacle table
 * is common sense written down once: for each object type, the receptacle types where a person
 * would look for it first, most likely first.
 */
#include "common/prior.h"

#include "common/sr.h"

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Where things are: receptacle types in decreasing plausibility. */
static const struct {
    const char *obj;
    const char *receps;
} S_WHERE[] = {
    {"apple", "countertop fridge diningtable garbagecan microwave"},
    {"bread", "countertop diningtable fridge cabinet"},
    {"egg", "fridge countertop diningtable garbagecan microwave sinkbasin"},
    {"lettuce", "fridge countertop diningtable sinkbasin garbagecan"},
    {"potato", "fridge countertop diningtable garbagecan microwave sinkbasin"},
    {"tomato", "fridge countertop diningtable sinkbasin garbagecan microwave"},
    {"mug", "coffeemachine countertop cabinet diningtable sinkbasin microwave shelf desk"},
    {"cup", "cabinet countertop diningtable fridge sinkbasin microwave"},
    {"bowl", "cabinet countertop diningtable fridge sinkbasin microwave shelf"},
    {"plate", "cabinet countertop diningtable fridge sinkbasin microwave"},
    {"pan", "stoveburner countertop cabinet sinkbasin diningtable"},
    {"pot", "stoveburner countertop cabinet sinkbasin diningtable"},
    {"kettle", "stoveburner countertop cabinet diningtable"},
    {"knife", "countertop drawer diningtable sinkbasin cabinet"},
    {"butterknife", "drawer countertop diningtable sinkbasin cabinet"},
    {"fork", "drawer countertop diningtable sinkbasin cabinet"},
    {"spoon", "drawer countertop diningtable sinkbasin cabinet"},
    {"spatula", "drawer countertop diningtable sinkbasin cabinet"},
    {"ladle", "drawer countertop diningtable sinkbasin cabinet"},
    {"winebottle", "countertop diningtable fridge cabinet"},
    {"peppershaker", "countertop cabinet diningtable drawer shelf"},
    {"saltshaker", "countertop cabinet diningtable drawer shelf"},
    {"dishsponge", "sinkbasin countertop cabinet drawer bathtubbasin"},
    {"soapbar", "bathtubbasin sinkbasin countertop toilet cabinet"},
    {"soapbottle", "countertop cabinet toilet sinkbasin bathtubbasin shelf"},
    {"spraybottle", "cabinet toilet countertop garbagecan shelf"},
    {"toiletpaper", "toiletpaperhanger toilet cabinet countertop drawer garbagecan"},
    {"cloth", "countertop cabinet bathtubbasin sinkbasin drawer toilet"},
    {"towel", "towelholder bathtubbasin countertop cabinet"},
    {"handtowel", "handtowelholder countertop cabinet"},
    {"candle", "countertop cabinet toilet shelf bathtubbasin"},
    {"plunger", "cabinet toilet"},
    {"tissuebox", "sidetable coffeetable dresser desk shelf toilet countertop"},
    {"book", "desk bed sidetable shelf coffeetable sofa diningtable dresser drawer"},
    {"cellphone", "bed desk sidetable dresser drawer sofa armchair coffeetable diningtable"},
    {"laptop", "desk bed sofa coffeetable diningtable armchair sidetable"},
    {"alarmclock", "desk sidetable dresser shelf"},
    {"pen", "desk drawer sidetable shelf dresser diningtable"},
    {"pencil", "desk drawer sidetable shelf dresser diningtable"},
    {"cd", "desk drawer shelf sidetable safe dresser"},
    {"creditcard",
     "desk drawer sidetable dresser coffeetable diningtable armchair sofa countertop shelf"},
    {"keychain", "sidetable drawer dresser desk coffeetable safe shelf sofa armchair"},
    {"remotecontrol", "sofa coffeetable armchair sidetable tvstand dresser drawer"},
    {"watch", "dresser sidetable drawer desk safe coffeetable shelf"},
    {"pillow", "bed sofa armchair"},
    {"newspaper", "coffeetable sofa sidetable diningtable armchair ottoman"},
    {"statue", "shelf sidetable coffeetable dresser desk diningtable"},
    {"vase", "shelf sidetable coffeetable diningtable dresser"},
    {"box", "coffeetable sidetable sofa dresser shelf desk"},
    {"baseballbat", "bed desk"},
    {"basketball", "bed desk"},
    {"houseplant", "sidetable coffeetable diningtable shelf"},
    {"desklamp", "desk sidetable dresser shelf"},
    {"floorlamp", "sidetable dresser desk coffeetable"},
};

/* The plausibility of the k-th listed receptacle type. */
static const double S_RANK[] = {1.0, 0.75, 0.55, 0.4, 0.3, 0.22, 0.16, 0.12, 0.1, 0.08};

static const char *S_RECEPS[] = {
    "armchair",      "bathtubbasin",      "bed",         "cabinet",     "cart",
    "coffeemachine", "coffeetable",       "countertop",  "desk",        "diningtable",
    "drawer",        "dresser",           "fridge",      "garbagecan",  "handtowelholder",
    "laundryhamper", "microwave",         "ottoman",     "safe",        "shelf",
    "sidetable",     "sinkbasin",         "sofa",        "stoveburner", "toaster",
    "toilet",        "toiletpaperhanger", "towelholder", "tvstand",
};

static const char *S_TASKS[] = {"unk", "pick", "look", "clean", "heat", "cool", "two"};
static const char *S_HOLDS[] = {"empty", "goal", "other"};
static const char *S_VERBS[] = {"go",    "open", "close",   "take",      "move", "heat", "cool",
                                "clean", "use",  "examine", "inventory", "look", "help"};

void prior_opts_default(prior_opts_t *o)
{
    o->seed = 0;
    o->strength = 1.0;
    o->search = 2.0;
    o->noise = 0.3;
    o->idio = 1.3;
    o->first = 20.0;
    o->belief = 8.0;
    o->forget = 10.0;
    o->ralike_go = 9.0;
    o->ralike_move = 11.0;
    o->misverb = 8.0;
}

double prior_likelihood(const char *obj, const char *recep)
{
    if (!obj || !recep || !recep[0])
        return 0;
    size_t rl = strlen(recep);
    for (size_t i = 0; i < SR_ARRAY_LEN(S_WHERE); i++) {
        if (strcmp(S_WHERE[i].obj, obj) != 0)
            continue;
        const char *p = S_WHERE[i].receps;
        for (size_t k = 0; *p; k++) {
            size_t wl = strcspn(p, " ");
            if (wl == rl && strncmp(p, recep, rl) == 0)
                return k < SR_ARRAY_LEN(S_RANK) ? S_RANK[k] : 0.05;
            p += wl;
            while (*p == ' ')
                p++;
        }
        return 0;
    }
    return 0;
}

/* The weights being written and, when asked, a log of which names went to which index. */
typedef struct {
    float *w;
    bool log;
    uint32_t *idx;
    uint64_t *hash;
    size_t n, cap;
    uint32_t *belief; /* the indices s_add_belief wrote, when not NULL (room for S_BELIEF_MAX) */
    size_t nbelief;
} s_sink_t;

/* The belief weights the prior sets: 5 kinds x 6 task types x (4 rooms x 8 + 1) at most. */
#define S_BELIEF_MAX 1024

/* s_add adds v to the weight of a named feature. */
static void s_add(s_sink_t *k, double v, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void s_add(s_sink_t *k, double v, const char *fmt, ...)
{
    char name[192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    uint32_t i = model_feature_index(name);
    k->w[i] += (float)v;
    if (!k->log || v == 0)
        return;
    if (k->n == k->cap) {
        k->cap = k->cap ? 2 * k->cap : 4096;
        k->idx = sr_xrealloc(k->idx, k->cap * sizeof(uint32_t));
        k->hash = sr_xrealloc(k->hash, k->cap * sizeof(uint64_t));
    }
    k->idx[k->n] = i;
    k->hash[k->n] = model_hash64(name, 7);
    k->n++;
}

/* s_add_belief adds v, a logit, to a belief weight: v / MODEL_BELIEF_VALUE, as the feature has
 * that value (model.h). */
static void s_add_belief(s_sink_t *k, double v, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void s_add_belief(s_sink_t *k, double v, const char *fmt, ...)
{
    char name[192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    s_add(k, v / MODEL_BELIEF_VALUE, "%s", name);
    if (k->belief && k->nbelief < S_BELIEF_MAX)
        k->belief[k->nbelief++] = model_feature_index(name);
}

static bool s_processing(const char *task)
{
    return strcmp(task, "clean") == 0 || strcmp(task, "heat") == 0 || strcmp(task, "cool") == 0;
}

static const char *s_appliance(const char *task)
{
    if (strcmp(task, "clean") == 0)
        return "sinkbasin";
    if (strcmp(task, "heat") == 0)
        return "microwave";
    if (strcmp(task, "cool") == 0)
        return "fridge";
    return NULL;
}

static double s_verb_weight(const char *verb, const char *task, const char *hold)
{
    if (strcmp(verb, "go") == 0 || strcmp(verb, "move") == 0 || strcmp(verb, "heat") == 0 ||
        strcmp(verb, "cool") == 0 || strcmp(verb, "clean") == 0)
        return 0;
    if (strcmp(verb, "open") == 0)
        return -1.0;
    if (strcmp(verb, "close") == 0)
        return -3.0;
    if (strcmp(verb, "take") == 0)
        return strcmp(hold, "empty") == 0 ? -1.0 : -3.0;
    if (strcmp(verb, "use") == 0)
        return strcmp(task, "look") == 0 ? 0 : -2.0;
    if (strcmp(verb, "examine") == 0 || strcmp(verb, "look") == 0)
        return -2.5;
    return -3.0;
}

/* s_gauss draws a standard normal value (Box-Muller). */
static double s_gauss(model_rng_t *r)
{
    double u = model_rng_uniform(r), v = model_rng_uniform(r);
    if (u < 1e-300)
        u = 1e-300;
    return sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * v);
}

/* s_hand_set writes the common-sense weights (before strength) into w. */
static void s_hand_set(s_sink_t *w, const prior_opts_t *o)
{
    for (size_t t = 0; t < SR_ARRAY_LEN(S_TASKS); t++) {
        const char *task = S_TASKS[t];
        bool procd = s_processing(task);
        for (size_t h = 0; h < SR_ARRAY_LEN(S_HOLDS); h++) {
            const char *hold = S_HOLDS[h];
            for (size_t v = 0; v < SR_ARRAY_LEN(S_VERBS); v++)
                s_add(w, s_verb_weight(S_VERBS[v], task, hold), "verb=%s|task=%s|hold=%s",
                      S_VERBS[v], task, hold);
            /* "put O in R" reads to the model as the "move O to R" it stands for. */
            s_add(w, s_verb_weight("move", task, hold), "verb=put|task=%s|hold=%s", task, hold);
            for (int proc = 0; proc < 2; proc++) {
                /* Where to bring the goal object once held. */
                double gr = 0;
                if (strcmp(hold, "goal") == 0)
                    gr = procd ? (proc ? 7.0 : -1.0) : (strcmp(task, "look") == 0 ? 0 : 7.0);
                s_add(w, gr, "go|goalrecep|task=%s|hold=%s|proc=%d", task, hold, proc);
                const char *app = s_appliance(task);
                if (app && strcmp(hold, "goal") == 0 && !proc)
                    s_add(w, 5.0, "go|rt=%s|task=%s|hold=%s|proc=%d", app, task, hold, proc);
            }
            bool look = strcmp(task, "look") == 0;
            s_add(w, look ? (strcmp(hold, "goal") == 0 ? 7.0 : 0.5) : -3.0,
                  "use|lampmatch=1|task=%s|hold=%s", task, hold);
            s_add(w, -2.0, "use|lampmatch=0|task=%s|hold=%s", task, hold);
        }
        for (int proc = 0; proc < 2; proc++) {
            /* Put the goal object in the goal receptacle (processed first when asked). */
            double mv = strcmp(task, "look") == 0 ? -3.0 : procd && !proc ? -0.5 : 8.0;
            s_add(w, mv, "move|goalobj=1|goalrecep=1|task=%s|proc=%d", task, proc);
            s_add(w, -3.0, "move|goalobj=1|goalrecep=0|task=%s|proc=%d", task, proc);
            s_add(w, -1.0, "move|goalobj=0|goalrecep=0|task=%s|proc=%d", task, proc);
            s_add(w, -1.0, "move|goalobj=0|goalrecep=1|task=%s|proc=%d", task, proc);
            /* Clean, heat or cool: the verb the task asks for, on the goal object, once. */
            static const char *pverbs[] = {"clean", "heat", "cool"};
            for (size_t pv = 0; pv < 3; pv++) {
                bool match = strcmp(pverbs[pv], task) == 0;
                s_add(w, match ? (proc ? -2.0 : 8.0) : -3.0,
                      "proc|verb=%s|task=%s|goalobj=1|proc=%d", pverbs[pv], task, proc);
                s_add(w, -3.0, "proc|verb=%s|task=%s|goalobj=0|proc=%d", pverbs[pv], task, proc);
            }
        }
        s_add(w, strcmp(task, "look") == 0 ? 0 : 6.0, "move|arrived|task=%s", task);
        s_add(w, 11.0, "take|goalobj=1|task=%s", task);
        s_add(w, -1.5, "take|goalobj=0|task=%s", task);
        s_add(w, -7.0, "take|goalobj|fromgoalrecep|task=%s", task);
    }

    /* Searching: the object-in-receptacle table, with empty hands. */
    for (size_t i = 0; i < SR_ARRAY_LEN(S_WHERE); i++)
        for (size_t r = 0; r < SR_ARRAY_LEN(S_RECEPS); r++) {
            double l = prior_likelihood(S_WHERE[i].obj, S_RECEPS[r]);
            if (l > 0) {
                s_add(w, o->search * l, "go|obj=%s|rt=%s|hold=empty", S_WHERE[i].obj, S_RECEPS[r]);
                s_add(w, o->first * l * l, "go|obj=%s|rt=%s|start", S_WHERE[i].obj, S_RECEPS[r]);
            }
        }
    /* Looking for a lamp with the object in hand. */
    static const char *lamps[] = {"desklamp", "floorlamp"};
    for (size_t i = 0; i < 2; i++)
        for (size_t r = 0; r < SR_ARRAY_LEN(S_RECEPS); r++) {
            double l = prior_likelihood(lamps[i], S_RECEPS[r]);
            if (l > 0)
                s_add(w, 1.5 * o->search * l, "go|lamp=%s|rt=%s|hold=goal", lamps[i], S_RECEPS[r]);
        }

    for (size_t h = 0; h < SR_ARRAY_LEN(S_HOLDS); h++) {
        s_add(w, 16.0, "open|here_closed|hold=%s", S_HOLDS[h]);
        s_add(w, strcmp(S_HOLDS[h], "goal") == 0 ? 5.0 : 0, "go|lampseen|hold=%s", S_HOLDS[h]);
        s_add(w, strcmp(S_HOLDS[h], "empty") == 0 ? 4.0 : 0, "go|goalseen|hold=%s", S_HOLDS[h]);
    }
    s_add(w, 0.6, "go|sametype");
    for (size_t h = 0; h < SR_ARRAY_LEN(S_HOLDS); h++)
        s_add(w, strcmp(S_HOLDS[h], "empty") == 0 ? 7.0 : 1.0,
              "go|nextnum|hold=%s", S_HOLDS[h]);
    s_add(w, -2.0, "go|sametype|lower");
    s_add(w, 3.0, "go|first");
    s_add(w, 4.0, "go|lowest");
    s_add(w, 4.0, "go|lowest|start");
    s_add(w, 4.0, "take|goalobj|first");
    s_add(w, -6.0, "go|goalhere");
    s_add(w, -3.0, "go|prev");
    s_add(w, -2.0, "go|recent");
    s_add(w, -2.0, "examine|held=1");
    s_add(w, -0.5, "examine|held=0");
    s_add(w, -2.5, "repeat|last");
    /* An LLM that finds itself in the same situation as one or two steps ago tends to answer as it
     * did then: loops, once entered, hold (the classic failure of LLM agents in ALFWorld). */
    s_add(w, 12.0, "loop|again|back=1");
    s_add(w, 12.0, "loop|again|back=2");
    s_add(w, -1.0, "repeat|window");
    /* The misused verb (model.h): unlisted, it is rarely written unless the task's belief says
     * so; read back as "Nothing happens.", it is tried again about half the time (repeat|last
     * fires too), and a second failure is a loop (above). */
    s_add(w, -7.0, "put|misverb");
    s_add(w, -0.5, "put|failed");

    /* Beliefs (model.h): acted on alike in every room and object class at version 0; training
     * moves each (task type, room, object class) apart. Only the rooms where ALFWorld sets each
     * task type (alfworld-facts.md) get a name, which keeps hashing collisions rare. */
    static const struct {
        const char *task;
        const char *rooms;
    } where[] = {{"pick", "kitchen bathroom bedroom livingroom"},
                 {"look", "bedroom livingroom"},
                 {"clean", "kitchen bathroom"},
                 {"heat", "kitchen"},
                 {"cool", "kitchen"},
                 {"two", "kitchen bathroom bedroom livingroom"}};
    static const char *classes[] = {"food", "dish", "utensil", "bath", "small", "decor", "other"};
    static const char *kinds[] = {"where", "forget", "ralike|go", "ralike|move", "alike",
                                  "misverb"};
    for (size_t t = 0; t < SR_ARRAY_LEN(where); t++) {
        bool forget = strcmp(where[t].task, "pick") != 0 && strcmp(where[t].task, "look") != 0;
        /* The coarser levels start at 0 (learned), with a logit's noise as the finest. */
        for (size_t k = 0; k < SR_ARRAY_LEN(kinds); k++)
            s_add_belief(w, 0, "belief|%s|task=%s", kinds[k], where[t].task);
        char rooms[64];
        snprintf(rooms, sizeof rooms, "%s", where[t].rooms);
        for (char *save = NULL, *room = strtok_r(rooms, " ", &save); room;
             room = strtok_r(NULL, " ", &save))
        {
            for (size_t k = 0; k < SR_ARRAY_LEN(kinds); k++)
                s_add_belief(w, 0, "belief|%s|task=%s|room=%s", kinds[k], where[t].task, room);
            for (size_t c = 0; c < SR_ARRAY_LEN(classes); c++) {
                s_add_belief(w, o->belief, "belief|where|task=%s|room=%s|oc=%s", where[t].task, room,
                      classes[c]);
                if (strcmp(where[t].task, "look") != 0) {
                    s_add_belief(w, o->ralike_go, "belief|ralike|go|task=%s|room=%s|oc=%s",
                          where[t].task, room, classes[c]);
                    s_add_belief(w, o->ralike_move, "belief|ralike|move|task=%s|room=%s|oc=%s",
                          where[t].task, room, classes[c]);
                    s_add_belief(w, o->misverb, "belief|misverb|task=%s|room=%s|oc=%s",
                          where[t].task, room, classes[c]);
                }
                /* Placing before processing is a slip some samples make (half the weight);
                 * leaving the second object is a plan most of the group keeps (0.9 of it: some
                 * groups stay mixed, so training sees the belief fail and corrects it). */
                if (forget)
                    s_add_belief(w, strcmp(where[t].task, "two") == 0 ? 0.9 * o->forget
                                                                     : 0.5 * o->forget,
                          "belief|forget|task=%s|room=%s|oc=%s", where[t].task, room, classes[c]);
            }
        }
    }
}

model_t *prior_build(const prior_opts_t *opts)
{
    prior_opts_t o;
    if (opts)
        o = *opts;
    else
        prior_opts_default(&o);
    model_t *m = model_new(0);
    if (!m)
        return NULL;
    float *w = model_weights(m);
    uint32_t bidx[S_BELIEF_MAX];
    float bval[S_BELIEF_MAX];
    s_sink_t sink = {.w = w, .belief = bidx};
    s_hand_set(&sink, &o);
    for (uint32_t i = 0; i < MODEL_NAMED_DIM; i++)
        w[i] *= (float)o.strength;
    for (size_t i = 0; i < sink.nbelief; i++)
        bval[i] = w[bidx[i]];
    model_rng_t r;
    model_rng_seed(&r, o.seed * 0x2545F4914F6CDD1DULL + 17);
    for (uint32_t i = 0; i < MODEL_NAMED_DIM + MODEL_STRING_DIM; i++) {
        double sd = i < MODEL_NAMED_DIM ? o.noise : o.idio;
        w[i] += (float)(sd * s_gauss(&r));
    }
    /* A belief's noise is that of a logit, like every other weight's (its feature value scales
     * what its weight adds). */
    for (size_t i = 0; i < sink.nbelief; i++)
        w[bidx[i]] = bval[i] + (w[bidx[i]] - bval[i]) / MODEL_BELIEF_VALUE;
    /* The belief salt: which beliefs about each task this "model" holds (model.h). */
    w[MODEL_META_SALT] = (float)(model_hash64("belief-salt", o.seed) & 0xFFFFFFu);
    return m;
}

static int s_cmp_u32(const void *a, const void *b, void *arg)
{
    const s_sink_t *k = arg;
    uint32_t x = k->idx[*(const size_t *)a], y = k->idx[*(const size_t *)b];
    return x < y ? -1 : x > y;
}

int prior_collisions(void)
{
    prior_opts_t o;
    prior_opts_default(&o);
    float *w = sr_xcalloc(MODEL_DIM, sizeof(float));
    s_sink_t k = {.w = w, .log = true};
    s_hand_set(&k, &o);
    size_t *order = sr_xmalloc((k.n ? k.n : 1) * sizeof(size_t));
    for (size_t i = 0; i < k.n; i++)
        order[i] = i;
    qsort_r(order, k.n, sizeof(size_t), s_cmp_u32, &k);
    int clashes = 0;
    for (size_t i = 1; i < k.n; i++) {
        size_t a = order[i - 1], b = order[i];
        if (k.idx[a] == k.idx[b] && k.hash[a] != k.hash[b])
            clashes++;
    }
    free(order);
    free(k.idx);
    free(k.hash);
    free(w);
    return clashes;
}
