/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifndef UCS_MEMORY_RANGE_TABLE_H_
#define UCS_MEMORY_RANGE_TABLE_H_

/*
 * A table of address ranges [start, end), kept in an array sorted by start.
 * Ranges may overlap (the notifier watches overlapping registrations of
 * several clients, the memory cache keeps overlapping regions), which is
 * why ucs_pgtable, which refuses overlapping regions, does not serve here.
 *
 * Every range that overlaps [s, e) starts in [s - max_len, e), where
 * max_len is the longest range inserted since the table was last empty:
 * that bounds every scan.
 *
 * Nothing here locks: the owner serialises every call with its own lock.
 * The array never grows under that lock (an allocation there could wait for
 * the notifier's monitor, which may be waiting for the lock):
 * ucs_range_table_reserve() grows it with the lock dropped.
 */

#include <ucs/sys/compiler_def.h>
#include <ucs/type/status.h>

#include <stddef.h>
#include <stdint.h>

BEGIN_C_DECLS


/**
 * A range; embedded in the owner's element, which the table points to.
 */
typedef struct ucs_range {
    uintptr_t start; /**< first address */
    uintptr_t end; /**< past the last address */
} ucs_range_t;


/**
 * The table. Fields may be read under the owner's lock.
 */
typedef struct ucs_range_table {
    ucs_range_t **ranges; /**< sorted by start */
    size_t count;
    size_t capacity;
    size_t max_len; /**< longest range since the table was empty */
} ucs_range_table_t;


/** Lock or unlock the owner's lock, for ucs_range_table_reserve() */
typedef void (*ucs_range_table_lock_func_t)(void *lock);


/**
 * Make an empty table.
 */
void ucs_range_table_init(ucs_range_table_t *table);


/**
 * Free the array; the ranges belong to the owner.
 */
void ucs_range_table_cleanup(ucs_range_table_t *table);


/**
 * Take the owner's lock with room for one more range. The array grows with
 * the lock dropped; the array it replaced is returned in @a old_p, to be
 * freed after unlocking.
 *
 * @return UCS_OK with the lock held, or UCS_ERR_NO_MEMORY (logged) without.
 */
ucs_status_t ucs_range_table_reserve(ucs_range_table_t *table,
                                     ucs_range_table_lock_func_t lock,
                                     ucs_range_table_lock_func_t unlock,
                                     void *lock_arg, void **old_p);


/**
 * Index of the first range with start >= @a addr.
 */
size_t
ucs_range_table_lower_bound(const ucs_range_table_t *table, uintptr_t addr);


/**
 * Index of the first range that may overlap a range starting at @a start;
 * ranges from there on with start below the other end are the candidates.
 */
size_t
ucs_range_table_first_overlap(const ucs_range_table_t *table, uintptr_t start);


/**
 * A range that contains all of [@a start, @a end), or NULL. Of several, the
 * one starting last.
 */
ucs_range_t *ucs_range_table_find_cover(const ucs_range_table_t *table,
                                        uintptr_t start, uintptr_t end);


/**
 * Insert a range; there must be room (ucs_range_table_reserve()).
 */
void ucs_range_table_insert(ucs_range_table_t *table, ucs_range_t *range);


/**
 * Remove a range that is in the table; nothing if it is not.
 */
void ucs_range_table_remove(ucs_range_table_t *table, ucs_range_t *range);


/**
 * Remove every range that overlaps [@a start, @a end), calling @a cb on each
 * after it left the table (the table is compacted after the last call).
 *
 * @return How many were removed.
 */
size_t
ucs_range_table_remove_overlapping(ucs_range_table_t *table, uintptr_t start,
                                   uintptr_t end,
                                   void (*cb)(ucs_range_t *range, void *arg),
                                   void *arg);


/**
 * Remove every range, without calls.
 */
void ucs_range_table_clear(ucs_range_table_t *table);

END_C_DECLS

#endif
