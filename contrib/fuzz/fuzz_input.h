/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * What every fuzz target shares: reading its input, and checking what must
 * hold. Multi-byte values are read little-endian.
 */

#ifndef REMAPRING_FUZZ_INPUT_H_
#define REMAPRING_FUZZ_INPUT_H_

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_CHECK(_cond)                                                      \
    do {                                                                       \
        if (!(_cond)) {                                                        \
            fprintf(stderr, "%s:%d: %s does not hold\n", __FILE__, __LINE__,   \
                    #_cond);                                                   \
            abort();                                                           \
        }                                                                      \
    } while (0)

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FUZZ_HAVE_ASAN 1
#include <sanitizer/asan_interface.h>
#endif
#endif
/** The input, read from the front; past its end every byte reads 0 */
typedef struct {
    const uint8_t *data;
    size_t size;
} fuzz_input_t;

static inline uint8_t fuzz_u8(fuzz_input_t *in)
{
    uint8_t v = 0;

    if (in->size > 0) {
        v = in->data[0];
        ++in->data;
        --in->size;
    }
    return v;
}

static inline uint16_t fuzz_u16(fuzz_input_t *in)
{
    return fuzz_u8(in) | ((uint16_t)fuzz_u8(in) << 8);
}

static inline uint32_t fuzz_u32(fuzz_input_t *in)
{
    return fuzz_u16(in) | ((uint32_t)fuzz_u16(in) << 16);
}

static inline uint64_t fuzz_u64(fuzz_input_t *in)
{
    return fuzz_u32(in) | ((uint64_t)fuzz_u32(in) << 32);
}

/** Fill @a length bytes from the input */
static inline void fuzz_bytes(fuzz_input_t *in, void *buffer, size_t length)
{
    size_t i;

    for (i = 0; i < length; ++i) {
        ((uint8_t *)buffer)[i] = fuzz_u8(in);
    }
}

/*
 * Honest payloads. Byte i of message seq is
 * fuzz_pattern_table[(seq * FUZZ_PATTERN_STEP + i) % FUZZ_PATTERN_PERIOD]:
 * a replayed or shifted record does not match (the table has no period
 * shorter than FUZZ_PATTERN_PERIOD), and since the table holds its period
 * twice, filling a message is one memcpy() and checking it one memcmp(),
 * which AddressSanitizer checks as ranges (per-byte loops took a quarter
 * of a target's time).
 */
#define FUZZ_PATTERN_PERIOD 8191 /* prime; the longest honest message */
#define FUZZ_PATTERN_STEP   1031

static uint8_t fuzz_pattern_table[2 * FUZZ_PATTERN_PERIOD];

/** The pattern of message @a seq: its first FUZZ_PATTERN_PERIOD bytes */
static inline const uint8_t *fuzz_pattern_of(uint64_t seq)
{
    static int ready;
    uint32_t x = 0x9e3779b9u;
    size_t i;

    if (!ready) {
        for (i = 0; i < FUZZ_PATTERN_PERIOD; ++i) {
            x ^= x << 13; /* xorshift32 */
            x ^= x >> 17;
            x ^= x << 5;
            fuzz_pattern_table[i]                       = (uint8_t)x;
            fuzz_pattern_table[i + FUZZ_PATTERN_PERIOD] = (uint8_t)x;
        }
        ready = 1;
    }
    return fuzz_pattern_table + (seq * FUZZ_PATTERN_STEP) % FUZZ_PATTERN_PERIOD;
}

/** Bytes [@a from, @a to) of message @a seq's pattern into @a buffer */
static inline void
fuzz_pattern_fill(uint8_t *buffer, uint64_t seq, size_t from, size_t to)
{
    FUZZ_CHECK(to <= FUZZ_PATTERN_PERIOD);
    if (to > from) {
        memcpy(buffer + from, fuzz_pattern_of(seq) + from, to - from);
    }
}

/** Whether bytes [@a from, @a to) of @a data are message @a seq's */
static inline int
fuzz_pattern_match(const uint8_t *data, uint64_t seq, size_t from, size_t to)
{
    FUZZ_CHECK(to <= FUZZ_PATTERN_PERIOD);
    return (to <= from) ||
           (memcmp(data + from, fuzz_pattern_of(seq) + from, to - from) == 0);
}

static volatile uint64_t fuzz_sink;

/**
 * Read @a length bytes, as an upper layer that uses all of them would: a
 * byte outside mapped memory faults, and with AddressSanitizer the range
 * is checked first, the report made by an instrumented read of the first
 * poisoned byte. The words themselves are read uninstrumented (one check
 * per byte, at -O1, was an eighth of a target's time).
 */
__attribute__((noinline)) static inline void fuzz_read_poisoned(const void *p)
{
    fuzz_sink += *(const volatile uint8_t *)p;
}

#define FUZZ_UNINSTRUMENTED                                                    \
    __attribute__((no_sanitize("address", "undefined", "coverage"), noinline))

FUZZ_UNINSTRUMENTED static inline void
fuzz_read_all(const void *data, size_t length)
{
    const uint8_t *p = data;
    uint64_t sum     = 0, word;
    size_t i;

#ifdef FUZZ_HAVE_ASAN
    const void *bad = __asan_region_is_poisoned((void *)data, length);

    if (bad != NULL) {
        fuzz_read_poisoned(bad);
    }
#endif
    for (i = 0; i + sizeof(word) <= length; i += sizeof(word)) {
        memcpy(&word, p + i, sizeof(word));
        sum += word;
    }
    for (; i < length; ++i) {
        sum += p[i];
    }
    fuzz_sink = sum;
}

#endif
