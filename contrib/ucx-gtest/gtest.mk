#
# Copyright (c) remapring contributors. See file LICENSE for terms.
#
# Builds the part of UCX's own gtest program that runs the UCT suites,
# against the *installed* UCX libraries. Driven by contrib/ucx-gtest.sh:
#
#   make -f gtest.mk UCX_SRC=DIR UCX_BUILD=DIR TREE=DIR [LIBDIR=DIR]
#
#   UCX_SRC    the matching UCX source tree (contrib/ucx-src.sh)
#   UCX_BUILD  its configured build directory: config.h, and the compiler
#              flags UCX's own test/gtest/Makefile was configured with
#   TREE       a copy of the source's test/gtest with the instantiation
#              patch applied; objects and the program `gtest` go there
#   LIBDIR     where libucs/libuct/libucp/libucm are installed
#
# The program holds what UCX's test/gtest/Makefile.am puts in its own for
# the UCT suites: the test base (common/), UCX's copy of googletest, the
# UCT fixtures and suites, and tools/perf/lib for test_uct_perf. Left out:
# the ucs/ucp/ucm suites, the harness's self tests (test_gtest_cmn,
# test_watchdog, test_obj_size), and the UCT suites that instantiate for no
# shared-memory transport or cannot run against these libraries (test_tag:
# rc/dc only; test_stats: UCX built without ENABLE_STATS, the file is
# empty; test_mm: posix/sysv/xpmem internals; uct/ib, uct/tcp).
#

UCX_SRC   ?= $(error UCX_SRC is not set)
UCX_BUILD ?= $(error UCX_BUILD is not set)
TREE      ?= $(error TREE is not set)
LIBDIR    ?= /usr/lib/x86_64-linux-gnu

gtest_mk  := $(UCX_BUILD)/test/gtest/Makefile
perf_mk   := $(UCX_BUILD)/src/tools/perf/lib/Makefile
configured = $(shell sed -n 's/^$(1) = //p' $(2))

# UCX's own warning set, without -Werror: g++ 12 warns on the test code
BASE_CFLAGS    := $(call configured,BASE_CFLAGS,$(gtest_mk)) -Wno-error
BASE_CXXFLAGS  := $(call configured,BASE_CXXFLAGS,$(gtest_mk)) -Wno-error
GTEST_CXXFLAGS := $(call configured,GTEST_CXXFLAGS,$(gtest_mk))
OPENMP_CFLAGS  := $(call configured,OPENMP_CFLAGS,$(gtest_mk))
PERF_CXXFLAGS  := $(call configured,PERF_LIB_CXXFLAGS,$(perf_mk))
DYNLIST        := $(call configured,LDFLAGS_DYNAMIC_LIST_DATA,$(gtest_mk))

gtest_dir := $(TREE)/test/gtest
CPPFLAGS  := -DHAVE_CONFIG_H -DCPU_FLAGS="" \
             -I$(UCX_SRC)/src -I$(UCX_BUILD) -I$(UCX_BUILD)/src
TEST_CPPFLAGS := $(CPPFLAGS) -DTOP_SRCDIR=\"$(UCX_SRC)\" \
                 -I$(TREE)/test -I$(gtest_dir) $(OPENMP_CFLAGS)

# test/gtest/common/googletest/Makefile.am
googletest := gtest.cc gtest-death-test.cc gtest-filepath.cc gtest-port.cc \
              gtest-printers.cc gtest-test-part.cc gtest-typed-test.cc
common     := main.cc test.cc test_helpers.cc mem_buffer.cc test_perf.cc
uct        := uct_test.cc uct_p2p_test.cc \
              test_p2p_am.cc test_p2p_rma.cc test_p2p_err.cc test_p2p_mix.cc \
              test_pending.cc test_flush.cc test_many2one_am.cc \
              test_uct_ep.cc test_md.cc test_peer_failure.cc \
              test_zcopy_comp.cc test_uct_perf.cc test_progress.cc \
              test_event.cc test_fence.cc test_mem.cc \
              test_amo.cc test_amo_add_xor.cc test_amo_and_or.cc \
              test_amo_cswap.cc test_amo_fadd_fxor.cc test_amo_fand_for.cc \
              test_amo_swap.cc v2/test_uct_query.cc
# src/tools/perf/lib/Makefile.am
perf_c     := libperf.c libperf_memory.c libperf_thread.c
perf_cxx   := uct_tests.cc ucp_tests.cc

obj := $(TREE)/obj
test_objs := $(googletest:%.cc=$(obj)/googletest/%.o) \
             $(common:%.cc=$(obj)/common/%.o) \
             $(uct:%.cc=$(obj)/uct/%.o)
perf_objs := $(perf_c:%.c=$(obj)/perf/%.o) $(perf_cxx:%.cc=$(obj)/perf/%.o)

all: $(TREE)/gtest

$(TREE)/gtest: $(test_objs) $(perf_objs)
	$(CXX) -o $@ $^ $(OPENMP_CFLAGS) $(DYNLIST) -L$(LIBDIR) \
	    -Wl,-rpath-link,$(LIBDIR) -lucp -luct -lucs -lucm -lpthread -ldl -lm

$(obj)/googletest/%.o: $(gtest_dir)/common/googletest/%.cc
	@mkdir -p $(@D)
	$(CXX) $(TEST_CPPFLAGS) $(BASE_CXXFLAGS) $(GTEST_CXXFLAGS) -std=c++11 \
	    -MMD -MP -c -o $@ $<

$(obj)/common/%.o: $(gtest_dir)/common/%.cc
	@mkdir -p $(@D)
	$(CXX) $(TEST_CPPFLAGS) $(BASE_CXXFLAGS) $(GTEST_CXXFLAGS) -std=c++11 \
	    -MMD -MP -c -o $@ $<

$(obj)/uct/%.o: $(gtest_dir)/uct/%.cc
	@mkdir -p $(@D)
	$(CXX) $(TEST_CPPFLAGS) $(BASE_CXXFLAGS) $(GTEST_CXXFLAGS) -std=c++11 \
	    -MMD -MP -c -o $@ $<

# libucxperf: C-linkable C++ code, as its Makefile.am builds it
$(obj)/perf/%.o: $(UCX_SRC)/src/tools/perf/lib/%.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(BASE_CFLAGS) $(OPENMP_CFLAGS) -MMD -MP -c -o $@ $<

$(obj)/perf/%.o: $(UCX_SRC)/src/tools/perf/lib/%.cc
	@mkdir -p $(@D)
	$(CXX) $(CPPFLAGS) $(BASE_CXXFLAGS) $(OPENMP_CFLAGS) $(PERF_CXXFLAGS) \
	    -std=c++11 -MMD -MP -c -o $@ $<

-include $(test_objs:.o=.d) $(perf_objs:.o=.d)

.PHONY: all
