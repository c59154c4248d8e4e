#!/bin/sh
#
# Copyright (c) remapring contributors. See file LICENSE for terms.
#
set -e
cd "$(dirname "$0")"
mkdir -p config/aux config/m4
autoreconf -fi
