/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifndef UCT_REMAPRING_SM_MD_H_
#define UCT_REMAPRING_SM_MD_H_

/*
 * The memory domain of this host's memory ("remapring"): a registration is
 * bookkeeping only (through the memory cache, once in use), as the kernel
 * resolves addresses at each process_vm_readv/writev, as a NIC with ODP
 * does; a remote key names a range of its owner's address space.
 */

#include <uct/ib/remapring/base/remapring_md.h>

#include <sys/types.h>


/**
 * Remote key: a registered range of the owner's address space. Packed as is;
 * @a check (uct_remapring_rkey_check_word()) guards against truncated or
 * foreign keys.
 */
typedef struct uct_remapring_rkey {
    uint64_t magic;
    uint64_t address;
    uint64_t length;
    int32_t pid;
    uint32_t check;
} UCS_S_PACKED uct_remapring_rkey_t;

#define UCT_REMAPRING_RKEY_MAGIC 0x79656b72616d6572ull /* "remarkey" */


/** The component of this host's memory domain and of the shared-memory
 *  transport */
extern uct_component_t uct_remapring_sm_component;


/**
 * Open the memory domain of this host's memory.
 */
ucs_status_t uct_remapring_sm_md_open(uct_component_t *component,
                                      const uct_md_config_t *config,
                                      uct_md_h *md_p);


/**
 * Whether this host lets the transport work: process_vm_writev into our own
 * address space succeeds and memfd_create is available. Cached after the
 * first call.
 */
int uct_remapring_md_host_supported(void);


/**
 * Unpack a remote key of this memory domain; logs and returns
 * UCS_ERR_INVALID_PARAM if it is not a valid one.
 */
ucs_status_t
uct_remapring_sm_rkey_unpack(const void *rkey_buffer, uct_rkey_t *rkey_p);


/**
 * Check that an unpacked remote key covers [@a address, + @a length) of
 * process @a pid; logs and returns UCS_ERR_INVALID_PARAM otherwise (also for
 * a null or UCT_INVALID_RKEY key).
 */
ucs_status_t uct_remapring_rkey_check(uct_rkey_t rkey, pid_t pid,
                                      uint64_t address, size_t length);

#endif
