/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#include <ucs/memory/range_table.h>

#include <ucs/debug/log_def.h>
#include <ucs/sys/math.h>

#include <stdlib.h>
#include <string.h>


void ucs_range_table_init(ucs_range_table_t *table)
{
    memset(table, 0, sizeof(*table));
}

void ucs_range_table_cleanup(ucs_range_table_t *table)
{
    free(table->ranges);
    ucs_range_table_init(table);
}

ucs_status_t ucs_range_table_reserve(ucs_range_table_t *table,
                                     ucs_range_table_lock_func_t lock,
                                     ucs_range_table_lock_func_t unlock,
                                     void *lock_arg, void **old_p)
{
    ucs_range_t **ranges;
    size_t capacity;

    *old_p = NULL;
    lock(lock_arg);
    while (table->count == table->capacity) {
        capacity = (table->capacity == 0) ? 64 : (table->capacity * 2);
        unlock(lock_arg);

        free(*old_p);
        *old_p = NULL;
        ranges = malloc(capacity * sizeof(*ranges));
        if (ranges == NULL) {
            ucs_error("failed to allocate a range table of %zu entries",
                      capacity);
            return UCS_ERR_NO_MEMORY;
        }

        /* another thread may have grown it meanwhile */
        lock(lock_arg);
        if (table->capacity < capacity) {
            if (table->count != 0) {
                memcpy(ranges, table->ranges, table->count * sizeof(*ranges));
            }
            *old_p          = table->ranges;
            table->ranges   = ranges;
            table->capacity = capacity;
        } else {
            *old_p = ranges;
        }
    }

    return UCS_OK;
}

size_t
ucs_range_table_lower_bound(const ucs_range_table_t *table, uintptr_t addr)
{
    size_t lo = 0, hi = table->count, mid;

    while (lo < hi) {
        mid = (lo + hi) / 2;
        if (table->ranges[mid]->start < addr) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }

    return lo;
}

size_t
ucs_range_table_first_overlap(const ucs_range_table_t *table, uintptr_t start)
{
    return ucs_range_table_lower_bound(table, (start > table->max_len) ?
                                                      (start - table->max_len) :
                                                      0);
}

ucs_range_t *ucs_range_table_find_cover(const ucs_range_table_t *table,
                                        uintptr_t start, uintptr_t end)
{
    ucs_range_t *range;
    size_t idx;

    /* candidates start in [start - max_len, start] */
    idx = ucs_range_table_lower_bound(table, start + 1);
    while (idx-- > 0) {
        range = table->ranges[idx];
        if ((start - range->start) >= table->max_len) {
            break;
        }

        if (range->end >= end) {
            return range;
        }
    }

    return NULL;
}

void ucs_range_table_insert(ucs_range_table_t *table, ucs_range_t *range)
{
    size_t idx = ucs_range_table_lower_bound(table, range->start);

    memmove(&table->ranges[idx + 1], &table->ranges[idx],
            (table->count - idx) * sizeof(*table->ranges));
    table->ranges[idx] = range;
    ++table->count;
    table->max_len = ucs_max(table->max_len, range->end - range->start);
}

static void ucs_range_table_removed(ucs_range_table_t *table, size_t nremoved)
{
    table->count -= nremoved;
    if (table->count == 0) {
        table->max_len = 0;
    }
}

void ucs_range_table_remove(ucs_range_table_t *table, ucs_range_t *range)
{
    size_t idx;

    for (idx = ucs_range_table_lower_bound(table, range->start);
         (idx < table->count) && (table->ranges[idx]->start == range->start);
         ++idx) {
        if (table->ranges[idx] == range) {
            memmove(&table->ranges[idx], &table->ranges[idx + 1],
                    (table->count - idx - 1) * sizeof(*table->ranges));
            ucs_range_table_removed(table, 1);
            return;
        }
    }
}

size_t
ucs_range_table_remove_overlapping(ucs_range_table_t *table, uintptr_t start,
                                   uintptr_t end,
                                   void (*cb)(ucs_range_t *range, void *arg),
                                   void *arg)
{
    size_t first, idx, out;
    ucs_range_t *range;

    if (end <= start) {
        return 0;
    }

    first = ucs_range_table_first_overlap(table, start);
    out   = first;
    for (idx = first; (idx < table->count) && (table->ranges[idx]->start < end);
         ++idx) {
        range = table->ranges[idx];
        if (range->end <= start) {
            table->ranges[out++] = range; /* ends before: keep */
        } else {
            cb(range, arg);
        }
    }

    if (out != idx) {
        memmove(&table->ranges[out], &table->ranges[idx],
                (table->count - idx) * sizeof(*table->ranges));
        ucs_range_table_removed(table, idx - out);
    }

    return idx - out;
}

void ucs_range_table_clear(ucs_range_table_t *table)
{
    ucs_range_table_removed(table, table->count);
}
