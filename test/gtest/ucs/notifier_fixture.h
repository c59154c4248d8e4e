/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifndef TEST_NOTIFIER_FIXTURE_H_
#define TEST_NOTIFIER_FIXTURE_H_

#include <gtest/gtest.h>

extern "C" {
#include <ucs/memory/ummunotify_int.h>
}

#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>


namespace remapring_test {

/* For a test main() that sets its environment (UCM's hooks, the notifier's
 * engine) before UCX reads it: runs this program again from the start,
 * with the same arguments. Returns 1 (it failed) or does not return. The
 * link's target, not the link: under valgrind the link is its launcher. */
static inline int reexec_self(char **argv)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

    if (n < 0) {
        perror("readlink(/proc/self/exe)");
        return 1;
    }
    exe[n] = '\0';
    execv(exe, argv);
    perror("execv");
    return 1;
}

static inline size_t page_size()
{
    return (size_t)sysconf(_SC_PAGESIZE);
}

/* Whether userfaultfd can be opened here, and why not. */
static inline bool uffd_available(std::string *why)
{
    long fd = syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | 1);
    if (fd < 0) {
        fd = syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
    }
    if (fd < 0) {
        *why = std::string("userfaultfd(): ") + strerror(errno);
        return false;
    }
    close(fd);
    return true;
}

/* GCC 12's ASan does not make its allocator fork-safe: a fork() child of
 * a multithreaded process can inherit one of its locks held and hang in the
 * first malloc() of a new thread; ThreadSanitizer does not support a child
 * of a multithreaded fork() that starts threads. Fork tests skip under
 * either. */
static inline bool under_asan()
{
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    return true;
#else
    return false;
#endif
}

/* Valgrind does not know userfaultfd ioctls; tests that need the uffd
 * engine skip under it. */
static inline bool under_valgrind()
{
    const char *p = getenv("LD_PRELOAD");
    return (p != NULL) && (strstr(p, "vgpreload") != NULL);
}

/* Whether the uffd engine can run here; if not, 'why' says why, ready for
 * GTEST_SKIP(). */
static inline bool uffd_usable(std::string *why)
{
    if (under_valgrind()) {
        *why = "valgrind does not support userfaultfd";
        return false;
    }
    if (!uffd_available(why)) {
        *why = "no userfaultfd: " + *why;
        return false;
    }
    return true;
}

static inline void *map_anon(size_t len, void *addr = NULL, int flags = 0)
{
    void *p = mmap(addr, len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | flags, -1, 0);
    return (p == MAP_FAILED) ? NULL : p;
}

/*
 * Address space for tests that munmap and map again at one address: a
 * PROT_NONE reservation far below the other mappings (and clear of ASan's
 * shadow, which ends at 0x10007fff7fff). The kernel hands out the highest
 * free gap that fits, so the hole an munmap leaves in it is not picked by a
 * concurrent small mmap() elsewhere in the process.
 */
static inline char *reserve_low(size_t len, uintptr_t hint = 0x500000000000ul)
{
#if defined(__SANITIZE_THREAD__)
    /* ThreadSanitizer's layout: application memory from 0x7e8000000000
     * (below the libraries and the stack), not at 0x5000... */
    hint = 0x7e8000000000ul + (hint - 0x500000000000ul);
#endif
    void *p = mmap((void*)hint, len, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (p == MAP_FAILED) {
        p = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    }
    return (p == MAP_FAILED) ? NULL : (char*)p;
}

/* Select the engine for the next start (the engine stops when its last
 * client closes, so every test starts it afresh). */
static inline void select_engine(ucs_ummunotify_engine_t engine)
{
    ucs_ummunotify_config.engine = engine;
}

static inline double seconds_from_env(const char *name, double dflt)
{
    const char *v = getenv(name);
    return (v != NULL) ? atof(v) : dflt;
}

} // namespace remapring_test

#endif
