/*
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifndef REMAPRING_RING_API_H_
#define REMAPRING_RING_API_H_

/*
 * What a module of ours makes visible to other objects.
 *
 * Everything is built with -fvisibility=hidden. Two modules are built from
 * the tree: libuct_remapring.so (the ring engine, the base of the transports
 * on it, the notifier and the shared-memory transport) and
 * libuct_remaprdma.so (the RDMA transport), which links the first and
 * calls its base. The headers of that base declare their functions between
 * REMAPRING_API_BEGIN and REMAPRING_API_END, with default visibility; what
 * libuct_remapring.so exports of them is what its version script
 * (libuct_remapring.map) lists, nothing else.
 */
#define REMAPRING_API_BEGIN _Pragma("GCC visibility push(default)")
#define REMAPRING_API_END   _Pragma("GCC visibility pop")

/* One declaration with default visibility, for a program to find (also in
 * the version script) */
#define REMAPRING_EXPORT __attribute__((visibility("default")))

#endif
