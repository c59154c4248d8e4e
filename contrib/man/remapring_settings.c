/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * Prints the UCX_REMAPRING_* and UCX_REMAPRDMA_* settings as the entries of
 * a manual page (roff), from the configuration tables themselves, as
 * `ucx_info -c -f` finds them: every table on UCS's global list whose
 * prefix is REMAPRING_ or REMAPRDMA_ (the transports', the memory domains'
 * and the notifier's, which register themselves as the modules load), so
 * the page made from it
 * at build time cannot drift from what ucx_info prints. UCX's own rows that
 * every transport or memory domain inherits (uct_iface_config_table,
 * uct_md_config_table) are left out: ucx_info documents them. A setting
 * several tables share is printed once. A table inside another is read, as
 * UCS reads it, under its own name where it has one (the RDMA transport's
 * REMAPRING_ table: the ring's settings, shared with the shared-memory
 * transport), else under the prefix of the table around it.
 *
 * usage: remapring_settings
 */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <uct/base/uct_iface.h>
#include <uct/base/uct_md.h>
#include <ucs/config/parser.h>

#include <stdio.h>
#include <string.h>


#define SETTINGS_MAX 256

static char printed[SETTINGS_MAX][128];
static unsigned nprinted;


/* Text as roff takes it: a backslash escaped, a line that starts with a
 * control character protected */
static void print_roff(const char *text)
{
    int bol = 1;

    for (; *text != '\0'; ++text) {
        if (bol && ((*text == '.') || (*text == '\''))) {
            fputs("\\&", stdout);
        }

        if (*text == '\\') {
            fputs("\\e", stdout);
        } else if (*text == '-') {
            fputs("\\-", stdout);
        } else {
            putchar(*text);
        }
        bol = (*text == '\n');
    }
}

static int already_printed(const char *name)
{
    unsigned i;

    for (i = 0; i < nprinted; ++i) {
        if (!strcmp(printed[i], name)) {
            return 1;
        }
    }

    if (nprinted < SETTINGS_MAX) {
        snprintf(printed[nprinted++], sizeof(printed[0]), "%s", name);
    }
    return 0;
}

static void print_table(const char *prefix, const ucs_config_field_t *fields)
{
    const ucs_config_field_t *field;
    char name[128], syntax[256];


    for (field = fields; field->name != NULL; ++field) {
        if (field->parser.read == ucs_config_sscanf_table) {
            if ((field->parser.arg != uct_iface_config_table) &&
                (field->parser.arg != uct_md_config_table)) {
                print_table((field->name[0] != '\0') ? field->name : prefix,
                            field->parser.arg);
            }
            continue;
        }

        if ((field->offset == UCS_CONFIG_DEPRECATED_FIELD_OFFSET) ||
            (field->doc == NULL) || (field->doc[0] == '\0')) {
            continue;
        }

        snprintf(name, sizeof(name), "UCX_%s%s", prefix, field->name);
        if (already_printed(name)) {
            continue;
        }

        field->parser.help(syntax, sizeof(syntax) - 1, field->parser.arg);
        printf(".TP\n.B %s\n", name);
        print_roff(field->doc);
        printf("\n.br\nDefault: \\fB");
        print_roff(field->dfl_value);
        printf("\\fR. Syntax: ");
        print_roff(syntax);
        printf(".\n");
    }
}

int main(int argc, char **argv)
{
    ucs_config_global_list_entry_t *entry;

    ucs_list_for_each(entry, &ucs_config_global_list, list) {
        if ((entry->prefix != NULL) && (entry->table != NULL) &&
            (!strncmp(entry->prefix, "REMAPRING_", strlen("REMAPRING_")) ||
             !strncmp(entry->prefix, "REMAPRDMA_", strlen("REMAPRDMA_")))) {
            print_table(entry->prefix, entry->table);
        }
    }

    if (nprinted == 0) {
        fprintf(stderr, "remapring_settings: no REMAPRING_ table registered:"
                        " is the transport linked in?\n");
        return 1;
    }

    return 0;
}
