/*
 * household_data.h — the vocabulary of the household environment: receptacle types, object types
 * with their properties, which receptacle types can hold which object types, and which furniture
 * each room type has. These tables are common knowledge about houses (an agent may learn them);
 * they say nothing about any one generated task.
 */
#ifndef SR_HOUSEHOLD_DATA_H
#define SR_HOUSEHOLD_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Receptacle types, in alphabetical order of their names. */
enum {
    HOUSEHOLD_R_ARMCHAIR,
    HOUSEHOLD_R_BATHTUBBASIN,
    HOUSEHOLD_R_BED,
    HOUSEHOLD_R_CABINET,
    HOUSEHOLD_R_CART,
    HOUSEHOLD_R_COFFEEMACHINE,
    HOUSEHOLD_R_COFFEETABLE,
    HOUSEHOLD_R_COUNTERTOP,
    HOUSEHOLD_R_DESK,
    HOUSEHOLD_R_DININGTABLE,
    HOUSEHOLD_R_DRAWER,
    HOUSEHOLD_R_DRESSER,
    HOUSEHOLD_R_FRIDGE,
    HOUSEHOLD_R_GARBAGECAN,
    HOUSEHOLD_R_HANDTOWELHOLDER,
    HOUSEHOLD_R_LAUNDRYHAMPER,
    HOUSEHOLD_R_MICROWAVE,
    HOUSEHOLD_R_OTTOMAN,
    HOUSEHOLD_R_SAFE,
    HOUSEHOLD_R_SHELF,
    HOUSEHOLD_R_SIDETABLE,
    HOUSEHOLD_R_SINKBASIN,
    HOUSEHOLD_R_SOFA,
    HOUSEHOLD_R_STOVEBURNER,
    HOUSEHOLD_R_TOASTER,
    HOUSEHOLD_R_TOILET,
    HOUSEHOLD_R_TOILETPAPERHANGER,
    HOUSEHOLD_R_TOWELHOLDER,
    HOUSEHOLD_R_TVSTAND,
    HOUSEHOLD_R_COUNT
};

/* Room types. */
enum { HOUSEHOLD_KITCHEN, HOUSEHOLD_LIVINGROOM, HOUSEHOLD_BEDROOM, HOUSEHOLD_BATHROOM, HOUSEHOLD_ROOM_COUNT };

/* Object properties (bits of household_object_info_t.props). */
enum {
    HOUSEHOLD_HEATABLE = 1 << 0,
    HOUSEHOLD_COOLABLE = 1 << 1,
    HOUSEHOLD_CLEANABLE = 1 << 2,
    HOUSEHOLD_FIXED = 1 << 3, /* sits in a receptacle but cannot be picked up (lamps, houseplants) */
    HOUSEHOLD_LAMP = 1 << 4,  /* can be turned on with "use" */
};

typedef struct household_object_info {
    const char *name; /* lower-case type name, e.g. "apple" */
    uint8_t props;    /* HOUSEHOLD_HEATABLE | ... */
    uint8_t rooms;    /* bit per room type in which this object appears */
    uint32_t holders; /* bit per receptacle type that can hold it */
} household_object_info_t;

/* How many receptacles of one type a room type has (min..max, drawn per floor plan). */
typedef struct household_furniture {
    uint8_t type;
    uint8_t min;
    uint8_t max;
} household_furniture_t;

typedef struct household_room_info {
    const char *name;
    const household_furniture_t *furniture;
    int n_furniture;
    int cabinet_open_pct; /* per cent of cabinets that are open shelves rather than doors */
} household_room_info_t;

extern const char *const household_recep_names[HOUSEHOLD_R_COUNT];
extern const household_object_info_t household_objects[];
extern const int household_n_objects;
extern const household_room_info_t household_rooms[HOUSEHOLD_ROOM_COUNT];

/* household_recep_type returns the receptacle type whose name is the first len bytes of name,
 * or -1 when there is none. */
int household_recep_type(const char *name, size_t len);

/* household_object_type returns the object type whose name is the first len bytes of name, or -1. */
int household_object_type(const char *name, size_t len);

/* household_recep_openable tells whether receptacles of this type have doors or lids at all
 * (cabinets may still be open shelves in a given floor plan). */
bool household_recep_openable(int rtype);

/* household_can_hold tells whether receptacle type rtype can hold object type otype (inline: the
 * generator asks it for every receptacle, some 700 times a world). */
static inline bool household_can_hold(int rtype, int otype)
{
    if (rtype < 0 || rtype >= HOUSEHOLD_R_COUNT || otype < 0 || otype >= household_n_objects)
        return false;
    return (household_objects[otype].holders >> rtype) & 1u;
}

#endif
