/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * Fuzz target: remote keys, as a peer packs them.
 *
 * A packed rkey comes from the peer (UCP carries it in its own packed
 * key); uct_rkey_unpack() hands it to the component, which tells a verbs
 * key from a shm one by its magic and checks it, and every RMA operation
 * checks its range against the unpacked key (uct_remapring_rkey_check).
 * Each input is one packed key, in a buffer of exactly the size the memory
 * domain declares (rkey_packed_size), so that a read past it is caught:
 * raw bytes, or the key of a real registration with bytes flipped, or that
 * key whole; then the pid, address and length of an RMA checked against
 * what was unpacked.
 *
 * What must hold: nothing is read past the packed key; an unpacked key of
 * a real registration accepts exactly the ranges inside the registration
 * and the pid that made it.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "fuzz_uct.h"

#include <uct/ib/remapring/sm/remapring_sm_md.h>

#include <string.h>
#include <unistd.h>

static uct_component_h component;
static fuzz_uct_t e;
static uint8_t *packed;
static size_t packed_size;
static char region[8192];
static uct_mem_h memh; /* kept for the whole run */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    char md_name[64];
    uct_md_config_t *md_config;

    component = fuzz_uct_component(0, md_name, sizeof(md_name));
    FUZZ_CHECK(component != NULL);
    FUZZ_CHECK(uct_md_config_read(component, NULL, NULL, &md_config) == UCS_OK);
    FUZZ_CHECK(uct_md_open(component, md_name, md_config, &e.md) == UCS_OK);
    uct_config_release(md_config);
    FUZZ_CHECK(uct_md_query(e.md, &e.md_attr) == UCS_OK);

    /* the key of a real registration: region[1024, 5120) */
    packed_size = e.md_attr.rkey_packed_size;
    packed      = malloc(packed_size);
    fprintf(stderr, "DEBUG packed %zu\n", packed_size);
    FUZZ_CHECK(packed != NULL);
    FUZZ_CHECK(uct_md_mem_reg(e.md, region + 1024, 4096, UCT_MD_MEM_ACCESS_ALL,
                              &memh) == UCS_OK);
    FUZZ_CHECK(uct_md_mkey_pack(e.md, memh, packed) == UCS_OK);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_input_t in = {data, size};
    uint8_t *buffer = malloc(packed_size); /* exactly: ASan sees past it */
    uct_rkey_bundle_t bundle;
    ucs_status_t status;
    uint64_t address, start, end;
    size_t length;
    uint8_t mode;
    pid_t pid;
    unsigned i, n;

    FUZZ_CHECK(buffer != NULL);
    mode = fuzz_u8(&in);
    switch (mode % 3) {
    case 0: /* raw */
        fuzz_bytes(&in, buffer, packed_size);
        break;
    case 1: /* a real key, bytes changed */
        memcpy(buffer, packed, packed_size);
        for (i = 0, n = fuzz_u8(&in) % 4 + 1; i < n; ++i) {
            buffer[fuzz_u8(&in) % packed_size] ^= fuzz_u8(&in) | 1;
        }
        break;
    default: /* a real key */
        memcpy(buffer, packed, packed_size);
        break;
    }

    status = uct_rkey_unpack(component, buffer, &bundle);
    if ((mode % 3) == 2) {
        FUZZ_CHECK(status == UCS_OK);
    }
    free(buffer);
    if (status != UCS_OK) {
        return 0;
    }

    /* an RMA of the peer's choice against it */
    start   = (uintptr_t)(region + 1024);
    end     = start + 4096;
    pid     = (mode & 0x80) ? (pid_t)fuzz_u32(&in) : getpid();
    address = (mode & 0x40) ? fuzz_u64(&in) :
                              start - 64 + fuzz_u16(&in) % (4096 + 128);
    length  = (mode & 0x20) ? fuzz_u64(&in) : fuzz_u16(&in) % (4096 + 64);
    status  = uct_remapring_rkey_check(bundle.rkey, pid, address, length);
    if ((mode % 3) == 2) {
        FUZZ_CHECK((status == UCS_OK) ==
                   ((pid == getpid()) && (address >= start) &&
                    (length <= end - start) &&
                    (address - start <= end - start - length)));
    }

    uct_rkey_release(component, &bundle);
    return 0;
}
