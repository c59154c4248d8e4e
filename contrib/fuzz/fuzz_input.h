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

#define FUZZ_CHECK(_cond)                                                      \
    do {                                                                       \
        if (!(_cond)) {                                                        \
            fprintf(stderr, "%s:%d: %s does not hold\n", __FILE__, __LINE__,   \
                    #_cond);                                                   \
            abort();                                                           \
        }                                                                      \
    } while (0)

/**
 * For the loops over payload bytes (pattern fills and checks, reading a
 * delivered payload whole): coverage instrumentation there adds one
 * callback per byte and finds nothing, so it is left out (and the function
 * kept out of line, where the instrumentation would reach it again);
 * AddressSanitizer
 * still checks every access.
 */
#define FUZZ_NO_COVERAGE __attribute__((no_sanitize("coverage"), noinline))

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

/** Read @a length bytes, as an upper layer that uses all of them would */
FUZZ_NO_COVERAGE static inline void
fuzz_read_all(const void *data, size_t length)
{
    volatile uint8_t sum = 0;
    size_t i;

    for (i = 0; i < length; ++i) {
        sum += ((const uint8_t *)data)[i];
    }
    (void)sum;
}

#endif
