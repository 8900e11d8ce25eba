/*
 * household_data.c — the vocabulary tables of the household environment (see household_data.h).
 *
 * The receptacle-holds-object table follows the spirit of ALFWorld's: food goes on counters, tables,
 * in the fridge, the microwave, the sink and the bin; cutlery in drawers; dishes in cabinets and on
 * shelves; small belongings on desks, dressers, side tables and in safes; bathroom items on the
 * counter, the toilet tank, the cart and in cabinets. The coffee machine holds only mugs and the
 * stove burners only kettles, pans and pots.
 */
#include "env_worker/household/household_data.h"

#include <string.h>

#define R(x) (1u << HOUSEHOLD_R_##x)
#define K (1u << HOUSEHOLD_KITCHEN)
#define L (1u << HOUSEHOLD_LIVINGROOM)
#define B (1u << HOUSEHOLD_BEDROOM)
#define T (1u << HOUSEHOLD_BATHROOM)
#define HEAT HOUSEHOLD_HEATABLE
#define COOL HOUSEHOLD_COOLABLE
#define CLEAN HOUSEHOLD_CLEANABLE

const char *const household_recep_names[HOUSEHOLD_R_COUNT] = {
    "armchair", "bathtubbasin", "bed", "cabinet", "cart", "coffeemachine", "coffeetable",
    "countertop", "desk", "diningtable", "drawer", "dresser", "fridge", "garbagecan",
    "handtowelholder", "laundryhamper", "microwave", "ottoman", "safe", "shelf", "sidetable",
    "sinkbasin", "sofa", "stoveburner", "toaster", "toilet", "toiletpaperhanger", "towelholder",
    "tvstand",
};

/* Places for food that may be heated or cooled, and for kitchen tools. */
#define FOOD (R(COUNTERTOP) | R(DININGTABLE) | R(FRIDGE) | R(MICROWAVE) | R(SINKBASIN) | R(GARBAGECAN))
#define TOOL (R(COUNTERTOP) | R(DININGTABLE) | R(DRAWER) | R(SINKBASIN))
#define DISH (R(CABINET) | R(COUNTERTOP) | R(DININGTABLE) | R(SHELF) | R(SINKBASIN))
#define SMALL (R(DESK) | R(DRAWER) | R(DRESSER) | R(SHELF) | R(SIDETABLE))
#define SEAT (R(ARMCHAIR) | R(SOFA) | R(OTTOMAN))
#define BATH (R(CABINET) | R(COUNTERTOP) | R(CART) | R(SHELF) | R(TOILET))

const household_object_info_t household_objects[] = {
    {"alarmclock", 0, B, R(DESK) | R(DRESSER) | R(SHELF) | R(SIDETABLE)},
    {"apple", HEAT | COOL | CLEAN, K, FOOD},
    {"book", 0, L | B, R(BED) | R(COFFEETABLE) | R(DESK) | R(DININGTABLE) | R(DRAWER) | R(DRESSER) | R(SIDETABLE) | R(SOFA) | R(ARMCHAIR)},
    {"bowl", COOL | CLEAN, K | L, DISH | R(FRIDGE) | R(MICROWAVE) | R(COFFEETABLE) | R(SIDETABLE)},
    {"bread", HEAT | COOL, K, R(COUNTERTOP) | R(DININGTABLE) | R(FRIDGE) | R(MICROWAVE) | R(GARBAGECAN)},
    {"butterknife", CLEAN, K, TOOL},
    {"candle", 0, T, BATH | R(BATHTUBBASIN)},
    {"cd", 0, L | B, SMALL | R(SAFE) | R(GARBAGECAN)},
    {"cellphone", 0, L | B, SMALL | SEAT | R(BED) | R(COFFEETABLE) | R(SAFE)},
    {"cloth", CLEAN, T | B, BATH | R(SINKBASIN) | R(BATHTUBBASIN) | R(DRAWER) | R(GARBAGECAN) | R(LAUNDRYHAMPER) | R(DRESSER)},
    {"creditcard", 0, L | B, SMALL | SEAT | R(COFFEETABLE) | R(DININGTABLE) | R(SAFE)},
    {"cup", HEAT | COOL | CLEAN, K, DISH | R(FRIDGE) | R(MICROWAVE)},
    {"dishsponge", CLEAN, K | T, R(COUNTERTOP) | R(DININGTABLE) | R(DRAWER) | R(SINKBASIN) | R(CABINET) | R(CART) | R(TOILET) | R(BATHTUBBASIN)},
    {"egg", HEAT | COOL | CLEAN, K, FOOD},
    {"fork", CLEAN, K, TOOL},
    {"kettle", CLEAN, K, R(CABINET) | R(COUNTERTOP) | R(DININGTABLE) | R(STOVEBURNER) | R(SINKBASIN) | R(SHELF)},
    {"keychain", 0, L | B, SMALL | SEAT | R(COFFEETABLE) | R(SAFE)},
    {"knife", CLEAN, K, TOOL},
    {"ladle", CLEAN, K, TOOL},
    {"laptop", 0, L | B, R(BED) | R(COFFEETABLE) | R(DESK) | R(DININGTABLE) | R(DRESSER) | R(SOFA) | R(ARMCHAIR) | R(SIDETABLE)},
    {"lettuce", COOL | CLEAN, K, R(COUNTERTOP) | R(DININGTABLE) | R(FRIDGE) | R(SINKBASIN) | R(GARBAGECAN)},
    {"mug", HEAT | COOL | CLEAN, K | B, DISH | R(COFFEEMACHINE) | R(FRIDGE) | R(MICROWAVE) | R(DESK) | R(SIDETABLE)},
    {"newspaper", 0, L, SEAT | R(COFFEETABLE) | R(DININGTABLE) | R(DRESSER) | R(SIDETABLE) | R(GARBAGECAN) | R(TVSTAND)},
    {"pan", COOL | CLEAN, K, R(CABINET) | R(COUNTERTOP) | R(DININGTABLE) | R(FRIDGE) | R(SINKBASIN) | R(STOVEBURNER)},
    {"pen", 0, L | B, SMALL | R(GARBAGECAN)},
    {"pencil", 0, L | B, SMALL | R(GARBAGECAN)},
    {"peppershaker", 0, K, R(CABINET) | R(COUNTERTOP) | R(DININGTABLE) | R(DRAWER) | R(SHELF)},
    {"pillow", 0, L | B, SEAT | R(BED)},
    {"plate", HEAT | COOL | CLEAN, K | L, DISH | R(FRIDGE) | R(MICROWAVE) | R(COFFEETABLE) | R(SIDETABLE)},
    {"pot", COOL | CLEAN, K, R(CABINET) | R(COUNTERTOP) | R(DININGTABLE) | R(FRIDGE) | R(SINKBASIN) | R(STOVEBURNER) | R(SHELF)},
    {"potato", HEAT | COOL | CLEAN, K, FOOD},
    {"remotecontrol", 0, L | B, SEAT | R(COFFEETABLE) | R(DININGTABLE) | R(DRESSER) | R(DRAWER) | R(SIDETABLE) | R(TVSTAND)},
    {"saltshaker", 0, K, R(CABINET) | R(COUNTERTOP) | R(DININGTABLE) | R(DRAWER) | R(SHELF)},
    {"soapbar", CLEAN, T, BATH | R(SINKBASIN) | R(BATHTUBBASIN) | R(GARBAGECAN)},
    {"soapbottle", 0, K | T, BATH | R(DININGTABLE) | R(GARBAGECAN)},
    {"spatula", CLEAN, K, TOOL},
    {"spoon", CLEAN, K, TOOL},
    {"spraybottle", 0, T, BATH | R(GARBAGECAN)},
    {"statue", 0, L | B, R(CABINET) | R(COFFEETABLE) | R(DESK) | R(DININGTABLE) | R(DRESSER) | R(SHELF) | R(SIDETABLE) | R(TVSTAND)},
    {"tissuebox", 0, L | B | T, R(COFFEETABLE) | R(COUNTERTOP) | R(DESK) | R(DRESSER) | R(SHELF) | R(SIDETABLE) | R(TOILET) | R(CART)},
    {"toiletpaper", 0, T, BATH | R(DRAWER) | R(GARBAGECAN) | R(TOILETPAPERHANGER)},
    {"tomato", HEAT | COOL | CLEAN, K, FOOD},
    {"towel", 0, T, R(TOWELHOLDER) | R(HANDTOWELHOLDER) | R(BATHTUBBASIN) | R(CART)},
    {"vase", 0, L | B, R(CABINET) | R(COFFEETABLE) | R(DESK) | R(DININGTABLE) | R(DRESSER) | R(SHELF) | R(SIDETABLE) | R(TVSTAND)},
    {"watch", 0, L | B, SMALL | R(COFFEETABLE) | R(SAFE)},
    {"winebottle", COOL, K, R(CABINET) | R(COUNTERTOP) | R(DININGTABLE) | R(FRIDGE) | R(SHELF) | R(GARBAGECAN)},
    /* Fixed objects: they sit on furniture and cannot be picked up. */
    {"desklamp", HOUSEHOLD_FIXED | HOUSEHOLD_LAMP, L | B, R(DESK) | R(DRESSER) | R(SIDETABLE)},
    {"floorlamp", HOUSEHOLD_FIXED | HOUSEHOLD_LAMP, L | B, R(DESK) | R(DRESSER) | R(SIDETABLE)},
    {"houseplant", HOUSEHOLD_FIXED, K | L | B, R(COFFEETABLE) | R(COUNTERTOP) | R(DININGTABLE) | R(DRESSER) | R(SHELF) | R(SIDETABLE)},
};

const int household_n_objects = (int)(sizeof household_objects / sizeof household_objects[0]);

static const household_furniture_t s_kitchen[] = {
    {HOUSEHOLD_R_CABINET, 3, 13},    {HOUSEHOLD_R_COFFEEMACHINE, 1, 1}, {HOUSEHOLD_R_COUNTERTOP, 1, 3},
    {HOUSEHOLD_R_DININGTABLE, 0, 1}, {HOUSEHOLD_R_DRAWER, 1, 6},        {HOUSEHOLD_R_FRIDGE, 1, 1},
    {HOUSEHOLD_R_GARBAGECAN, 1, 1},  {HOUSEHOLD_R_MICROWAVE, 1, 1},     {HOUSEHOLD_R_SHELF, 0, 3},
    {HOUSEHOLD_R_SINKBASIN, 1, 2},   {HOUSEHOLD_R_STOVEBURNER, 2, 4},   {HOUSEHOLD_R_TOASTER, 1, 1},
};

static const household_furniture_t s_livingroom[] = {
    {HOUSEHOLD_R_ARMCHAIR, 0, 2},    {HOUSEHOLD_R_CABINET, 0, 4},  {HOUSEHOLD_R_COFFEETABLE, 1, 2},
    {HOUSEHOLD_R_DININGTABLE, 0, 1}, {HOUSEHOLD_R_DRAWER, 0, 4},   {HOUSEHOLD_R_DRESSER, 0, 1},
    {HOUSEHOLD_R_GARBAGECAN, 1, 1},  {HOUSEHOLD_R_OTTOMAN, 0, 1},  {HOUSEHOLD_R_SHELF, 0, 6},
    {HOUSEHOLD_R_SIDETABLE, 1, 2},   {HOUSEHOLD_R_SOFA, 1, 2},     {HOUSEHOLD_R_TVSTAND, 0, 1},
};

static const household_furniture_t s_bedroom[] = {
    {HOUSEHOLD_R_ARMCHAIR, 0, 1},      {HOUSEHOLD_R_BED, 1, 1},   {HOUSEHOLD_R_DESK, 0, 2},
    {HOUSEHOLD_R_DRAWER, 1, 6},        {HOUSEHOLD_R_DRESSER, 0, 1}, {HOUSEHOLD_R_GARBAGECAN, 1, 1},
    {HOUSEHOLD_R_LAUNDRYHAMPER, 0, 1}, {HOUSEHOLD_R_SAFE, 0, 1},  {HOUSEHOLD_R_SHELF, 0, 6},
    {HOUSEHOLD_R_SIDETABLE, 1, 2},
};

static const household_furniture_t s_bathroom[] = {
    {HOUSEHOLD_R_BATHTUBBASIN, 0, 1},    {HOUSEHOLD_R_CABINET, 1, 4},         {HOUSEHOLD_R_CART, 0, 1},
    {HOUSEHOLD_R_COUNTERTOP, 1, 1},      {HOUSEHOLD_R_DRAWER, 0, 4},          {HOUSEHOLD_R_GARBAGECAN, 1, 1},
    {HOUSEHOLD_R_HANDTOWELHOLDER, 0, 2}, {HOUSEHOLD_R_SHELF, 0, 2},           {HOUSEHOLD_R_SINKBASIN, 1, 2},
    {HOUSEHOLD_R_TOILET, 1, 1},          {HOUSEHOLD_R_TOILETPAPERHANGER, 1, 1}, {HOUSEHOLD_R_TOWELHOLDER, 1, 2},
};

#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))

const household_room_info_t household_rooms[HOUSEHOLD_ROOM_COUNT] = {
    [HOUSEHOLD_KITCHEN] = {"kitchen", s_kitchen, N(s_kitchen), 15},
    [HOUSEHOLD_LIVINGROOM] = {"livingroom", s_livingroom, N(s_livingroom), 40},
    [HOUSEHOLD_BEDROOM] = {"bedroom", s_bedroom, N(s_bedroom), 40},
    [HOUSEHOLD_BATHROOM] = {"bathroom", s_bathroom, N(s_bathroom), 10},
};

int household_recep_type(const char *name, size_t len)
{
    for (int i = 0; i < HOUSEHOLD_R_COUNT; i++)
        if (strlen(household_recep_names[i]) == len && !memcmp(household_recep_names[i], name, len))
            return i;
    return -1;
}

int household_object_type(const char *name, size_t len)
{
    for (int i = 0; i < household_n_objects; i++)
        if (strlen(household_objects[i].name) == len && !memcmp(household_objects[i].name, name, len))
            return i;
    return -1;
}

bool household_recep_openable(int rtype)
{
    return rtype == HOUSEHOLD_R_CABINET || rtype == HOUSEHOLD_R_DRAWER || rtype == HOUSEHOLD_R_FRIDGE ||
           rtype == HOUSEHOLD_R_MICROWAVE || rtype == HOUSEHOLD_R_SAFE;
}

