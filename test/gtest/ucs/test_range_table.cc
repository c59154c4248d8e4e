/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * The sorted range table under the notifier and the memory cache:
 * overlapping ranges, covering lookups, removal of what an event overlaps,
 * and growth of the array with the owner's lock dropped.
 */

#include <gtest/gtest.h>

extern "C" {
#include <ucs/memory/range_table.h>
}

#include <algorithm>
#include <random>
#include <set>
#include <vector>

namespace {

class test_range_table : public testing::Test {
protected:
    void SetUp() override
    {
        ucs_range_table_init(&m_table);
    }

    void TearDown() override
    {
        ucs_range_table_cleanup(&m_table);
    }

    static void lock(void *arg)
    {
        ++*(int*)arg;
    }

    static void unlock(void *arg)
    {
        --*(int*)arg;
    }

    void insert(ucs_range_t *range)
    {
        void *old;

        ASSERT_EQ(UCS_OK, ucs_range_table_reserve(&m_table, lock, unlock,
                                                  &m_locked, &old));
        EXPECT_EQ(1, m_locked);
        ucs_range_table_insert(&m_table, range);
        unlock(&m_locked);
        free(old);
    }

    void check_sorted() const
    {
        for (size_t i = 1; i < m_table.count; ++i) {
            EXPECT_LE(m_table.ranges[i - 1]->start, m_table.ranges[i]->start);
        }
    }

    static void collect(ucs_range_t *range, void *arg)
    {
        ((std::vector<ucs_range_t*>*)arg)->push_back(range);
    }

    ucs_range_table_t m_table;
    int               m_locked = 0;
};

TEST_F(test_range_table, cover_with_overlaps)
{
    ucs_range_t a = {100, 200}, b = {150, 400}, c = {300, 310};

    insert(&b);
    insert(&c);
    insert(&a);
    check_sorted();

    EXPECT_EQ(&a, ucs_range_table_find_cover(&m_table, 100, 200));
    EXPECT_EQ(&b, ucs_range_table_find_cover(&m_table, 150, 201));
    EXPECT_EQ(&c, ucs_range_table_find_cover(&m_table, 300, 310));
    EXPECT_EQ(&b, ucs_range_table_find_cover(&m_table, 300, 311));
    EXPECT_EQ(nullptr, ucs_range_table_find_cover(&m_table, 99, 120));
    EXPECT_EQ(nullptr, ucs_range_table_find_cover(&m_table, 390, 401));

    ucs_range_table_remove(&m_table, &b);
    EXPECT_EQ(2u, m_table.count);
    EXPECT_EQ(nullptr, ucs_range_table_find_cover(&m_table, 150, 201));
    /* removing what is not there changes nothing */
    ucs_range_table_remove(&m_table, &b);
    EXPECT_EQ(2u, m_table.count);
}

TEST_F(test_range_table, same_start)
{
    ucs_range_t a = {100, 200}, b = {100, 300}, c = {100, 150};

    insert(&a);
    insert(&b);
    insert(&c);
    ucs_range_table_remove(&m_table, &b);
    EXPECT_EQ(2u, m_table.count);
    for (size_t i = 0; i < m_table.count; ++i) {
        EXPECT_NE(&b, m_table.ranges[i]);
    }
}

TEST_F(test_range_table, remove_overlapping)
{
    ucs_range_t r[] = {{0, 10}, {5, 50}, {20, 30}, {40, 45}, {60, 70}};
    std::vector<ucs_range_t*> removed;

    for (auto &range : r) {
        insert(&range);
    }

    /* [25, 42) overlaps {5,50} {20,30} {40,45}; {0,10} ends before */
    EXPECT_EQ(3u, ucs_range_table_remove_overlapping(&m_table, 25, 42,
                                                     collect, &removed));
    std::set<ucs_range_t*> got(removed.begin(), removed.end());
    EXPECT_EQ((std::set<ucs_range_t*>{&r[1], &r[2], &r[3]}), got);
    ASSERT_EQ(2u, m_table.count);
    EXPECT_EQ(&r[0], m_table.ranges[0]);
    EXPECT_EQ(&r[4], m_table.ranges[1]);

    removed.clear();
    EXPECT_EQ(0u, ucs_range_table_remove_overlapping(&m_table, 10, 60,
                                                     collect, &removed));
    EXPECT_EQ(0u, ucs_range_table_remove_overlapping(&m_table, 70, 70,
                                                     collect, &removed));
    EXPECT_TRUE(removed.empty());
}

/* Random ranges against a brute-force model, across several growths */
TEST_F(test_range_table, random_against_model)
{
    std::mt19937_64 rng(7);
    std::vector<ucs_range_t> storage(3000);
    std::vector<ucs_range_t*> live;

    for (auto &range : storage) {
        range.start = rng() % 100000;
        range.end   = range.start + 1 + rng() % 2000;
        insert(&range);
        live.push_back(&range);
    }
    check_sorted();
    EXPECT_GE(m_table.capacity, storage.size());

    for (int i = 0; i < 2000; ++i) {
        uintptr_t start = rng() % 100000, end = start + 1 + rng() % 500;
        bool covered    = std::any_of(live.begin(), live.end(),
                                      [&](ucs_range_t *r) {
                                       return (r->start <= start) &&
                                              (r->end >= end);
                                   });
        ucs_range_t *found = ucs_range_table_find_cover(&m_table, start, end);

        EXPECT_EQ(covered, found != nullptr) << start << " " << end;
        if (found != nullptr) {
            EXPECT_LE(found->start, start);
            EXPECT_GE(found->end, end);
        }
    }

    for (int i = 0; i < 200; ++i) {
        uintptr_t start = rng() % 100000, end = start + 1 + rng() % 300;
        std::vector<ucs_range_t*> removed;
        size_t expected = std::count_if(live.begin(), live.end(),
                                        [&](ucs_range_t *r) {
                                         return (r->start < end) &&
                                                (r->end > start);
                                     });

        EXPECT_EQ(expected, ucs_range_table_remove_overlapping(
                                    &m_table, start, end, collect, &removed));
        for (ucs_range_t *r : removed) {
            live.erase(std::find(live.begin(), live.end(), r));
        }
        ASSERT_EQ(live.size(), m_table.count);
    }
    check_sorted();

    ucs_range_table_clear(&m_table);
    EXPECT_EQ(0u, m_table.count);
    EXPECT_EQ(0u, m_table.max_len);
}

} // namespace
