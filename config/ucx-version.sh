#!/bin/sh
#
# Copyright (c) remapring contributors. See file LICENSE for terms.
#
# usage: ucx-version.sh
# Prints the version (major.minor.patch) of the installed UCX, from
# 'ucx_info -v': "# Version X" up to UCX 1.13, "# Library version: X" from
# 1.14 on. Prints nothing if ucx_info is missing or says neither.
#
ucx_info -v 2>/dev/null |
    sed -n -e 's/^# Version //p' -e 's/^# Library version: //p' | head -n 1
