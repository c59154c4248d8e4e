/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * The module registers the remapring component, memory domain and
 * transport with UCT, and its settings are readable, printable and checked,
 * all through UCT's public API (as ucx_info and UCP see them).
 */

#include <gtest/gtest.h>

extern "C" {
#include <uct/api/uct.h>
#include <ucs/async/async_fwd.h>
#include <ucs/config/parser.h>
#include <ucs/config/types.h>
}

#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

/* Sets (or, with nullptr, unsets) an environment variable for its scope. */
class scoped_env {
public:
    scoped_env(const char *name, const char *value) : m_name(name)
    {
        const char *old = getenv(name);
        m_had           = (old != nullptr);
        if (m_had) {
            m_old = old;
        }
        if (value != nullptr) {
            setenv(name, value, 1);
        } else {
            unsetenv(name);
        }
    }

    ~scoped_env()
    {
        if (m_had) {
            setenv(m_name.c_str(), m_old.c_str(), 1);
        } else {
            unsetenv(m_name.c_str());
        }
    }

private:
    std::string m_name;
    std::string m_old;
    bool        m_had;
};

class component : public testing::Test {
protected:
    void SetUp() override
    {
        uct_component_h *components;
        unsigned count;

        ASSERT_EQ(UCS_OK, uct_query_components(&components, &count));
        for (unsigned i = 0; i < count; ++i) {
            uct_component_attr_t attr = {};
            attr.field_mask           = UCT_COMPONENT_ATTR_FIELD_NAME;
            ASSERT_EQ(UCS_OK, uct_component_query(components[i], &attr));
            if (std::string(attr.name) == "remapring") {
                m_component = components[i];
            }
        }
        uct_release_component_list(components);
        ASSERT_NE(nullptr, m_component) << "remapring component not listed";
    }

    void TearDown() override
    {
        if (m_md != nullptr) {
            uct_md_close(m_md);
        }
        if (m_md_config != nullptr) {
            uct_config_release(m_md_config);
        }
    }

    /* Open the memory domain the component lists */
    void open_md()
    {
        uct_component_attr_t attr = {};
        attr.field_mask           = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT;
        ASSERT_EQ(UCS_OK, uct_component_query(m_component, &attr));
        if (attr.md_resource_count == 0) {
            GTEST_SKIP() << "remapring lists no memory domain on this host "
                            "(process_vm_writev or memfd_create denied)";
        }

        uct_md_resource_desc_t md_resources[attr.md_resource_count];
        attr.field_mask   = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
        attr.md_resources = md_resources;
        ASSERT_EQ(UCS_OK, uct_component_query(m_component, &attr));
        ASSERT_EQ(1u, attr.md_resource_count);
        EXPECT_STREQ("remapring", md_resources[0].md_name);

        ASSERT_EQ(UCS_OK,
                  uct_md_config_read(m_component, NULL, NULL, &m_md_config));
        ASSERT_EQ(UCS_OK, uct_md_open(m_component, md_resources[0].md_name,
                                      m_md_config, &m_md));
    }

    /* What 'ucx_info -c -f' prints: every registered table, documented */
    static std::string print_all_config()
    {
        char *buf    = nullptr;
        size_t size  = 0;
        FILE *stream = open_memstream(&buf, &size);

        ucs_config_parser_print_all_opts(
                stream, "UCX_",
                (ucs_config_print_flags_t)(UCS_CONFIG_PRINT_CONFIG |
                                           UCS_CONFIG_PRINT_DOC),
                &ucs_config_global_list);
        fclose(stream);
        std::string text(buf, size);
        free(buf);
        return text;
    }

    uct_component_h m_component  = nullptr;
    uct_md_config_t *m_md_config = nullptr;
    uct_md_h m_md                = nullptr;
};

TEST_F(component, md_open_query)
{
    open_md();
    if (IsSkipped()) {
        return;
    }

    uct_md_attr_t md_attr;
    ASSERT_EQ(UCS_OK, uct_md_query(m_md, &md_attr));
    EXPECT_TRUE(md_attr.cap.access_mem_types & UCS_BIT(UCS_MEMORY_TYPE_HOST));
}

TEST_F(component, md_config_readable)
{
    uct_md_config_t *config;
    char value[64];

    ASSERT_EQ(UCS_OK, uct_md_config_read(m_component, NULL, NULL, &config));
    EXPECT_NE(UCS_OK,
              uct_config_get(config, "NO_SUCH_SETTING", value, sizeof(value)));
    uct_config_release(config);
}

TEST_F(component, settings_documented)
{
    /* as 'ucx_info -c -f' shows them, each with its help text */
    std::string text = print_all_config();
    for (const char *name :
         {"UCX_REMAPRING_BLOCK_SIZE", "UCX_REMAPRING_RING_SLOTS",
          "UCX_REMAPRING_POOL_MAX", "UCX_REMAPRING_CREDIT_BATCH"}) {
        size_t pos = text.find(std::string(name) + "=");
        ASSERT_NE(std::string::npos, pos) << name;
        /* the help text is printed in the comment lines just before */
        size_t doc = text.rfind("# ", pos);
        EXPECT_LT(pos - doc, 2000u) << name;
    }
}

TEST_F(component, transport_listed)
{
    open_md();
    if (IsSkipped()) {
        return;
    }

    scoped_env tls("UCX_TLS", "remapring,self");
    uct_tl_resource_desc_t *resources;
    unsigned count;
    ASSERT_EQ(UCS_OK, uct_md_query_tl_resources(m_md, &resources, &count));
    ASSERT_EQ(1u, count);
    EXPECT_STREQ("remapring", resources[0].tl_name);
    EXPECT_STREQ("memory", resources[0].dev_name);
    uct_release_tl_resource_list(resources);

    /* the transport's configuration is found by its name */
    uct_iface_config_t *config;
    char value[64];
    ASSERT_EQ(UCS_OK,
              uct_md_iface_config_read(m_md, "remapring", NULL, NULL, &config));
    for (const char *name :
         {"BLOCK_SIZE", "RING_SLOTS", "POOL_MAX", "CREDIT_BATCH"}) {
        EXPECT_EQ(UCS_OK, uct_config_get(config, name, value, sizeof(value)))
                << name;
    }
    EXPECT_EQ(UCS_OK,
              uct_config_get(config, "BLOCK_SIZE", value, sizeof(value)));
    EXPECT_STREQ("auto", value); /* 256 KiB here: test_uct_am */
    uct_config_release(config);
}

/* The transport never reads UCX_TLS: it offers its device to every
 * process, and the upper layer selects it like any other. */
TEST_F(component, offered_whatever_the_tls_list)
{
    open_md();
    if (IsSkipped()) {
        return;
    }

    static const char *values[] = {nullptr, "all", "posix,self", "^remapring",
                                   "remapring"};

    for (const char *value : values) {
        scoped_env tls("UCX_TLS", value);
        uct_tl_resource_desc_t *resources;
        unsigned count;

        ASSERT_EQ(UCS_OK, uct_md_query_tl_resources(m_md, &resources, &count));
        ASSERT_EQ(1u, count) << "UCX_TLS=" << (value ? value : "(unset)");
        EXPECT_STREQ("remapring", resources[0].tl_name);
        EXPECT_STREQ("memory", resources[0].dev_name);
        uct_release_tl_resource_list(resources);
    }
}

TEST_F(component, bad_setting_value_rejected)
{
    open_md();
    if (IsSkipped()) {
        return;
    }

    uct_iface_config_t *config;
    ASSERT_EQ(UCS_OK,
              uct_md_iface_config_read(m_md, "remapring", NULL, NULL, &config));
    /* not a size, not a number: the parser refuses them */
    EXPECT_NE(UCS_OK, uct_config_modify(config, "BLOCK_SIZE", "lots"));
    EXPECT_NE(UCS_OK, uct_config_modify(config, "RING_SLOTS", "-x"));
    uct_config_release(config);
}

/* Values that parse but are invalid are refused when an interface opens */
class component_bad_config :
    public component,
    public testing::WithParamInterface<std::pair<const char *, const char *>> {
};

TEST_P(component_bad_config, iface_open_rejects)
{
    open_md();
    if (IsSkipped()) {
        return;
    }

    uct_worker_h worker;
    ucs_async_context_t *async;
    ASSERT_EQ(UCS_OK,
              ucs_async_context_create(UCS_ASYNC_MODE_THREAD_SPINLOCK, &async));
    ASSERT_EQ(UCS_OK,
              uct_worker_create(async, UCS_THREAD_MODE_SINGLE, &worker));

    uct_iface_config_t *config;
    ASSERT_EQ(UCS_OK,
              uct_md_iface_config_read(m_md, "remapring", NULL, NULL, &config));
    ASSERT_EQ(UCS_OK,
              uct_config_modify(config, GetParam().first, GetParam().second));

    uct_iface_params_t params = {};
    params.field_mask         = UCT_IFACE_PARAM_FIELD_OPEN_MODE |
                        UCT_IFACE_PARAM_FIELD_DEVICE;
    params.open_mode            = UCT_IFACE_OPEN_MODE_DEVICE;
    params.mode.device.tl_name  = "remapring";
    params.mode.device.dev_name = "memory";

    uct_iface_h iface;
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_iface_open(m_md, worker, &params, config, &iface));

    uct_config_release(config);
    uct_worker_destroy(worker);
    ucs_async_context_destroy(async);
}

INSTANTIATE_TEST_SUITE_P(settings, component_bad_config,
                         testing::Values(std::make_pair("BLOCK_SIZE", "3000"),
                                         std::make_pair("BLOCK_SIZE", "1k"),
                                         std::make_pair("RING_SLOTS", "1"),
                                         std::make_pair("RING_SLOTS", "12"),
                                         std::make_pair("POOL_MAX", "64k"),
                                         std::make_pair("CREDIT_BATCH", "0"),
                                         std::make_pair("CREDIT_BATCH", "9")));

} // namespace
