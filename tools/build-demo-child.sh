#!/usr/bin/env bash
# Rebuild src/pysframe/data/demo-child (the child process of `sframe demo`) from
# demo-child.c with gas --gsframe, so that it carries its own .sframe section (SFrame V3).
# Needs the GNU toolchain of ../shared/toolchain (install.sh 2.47.50) and gcc; the result
# is committed, so neither the tests nor `sframe demo` need them.
set -euo pipefail
cd "$(dirname "$0")/../src/pysframe/data"
TOOLCHAIN_DIR=${TOOLCHAIN_DIR:-/opt/sframe-tc}
gcc -O2 -fomit-frame-pointer -fasynchronous-unwind-tables \
    -B"$TOOLCHAIN_DIR/gcc-B/2.47.50/x86_64/" -Wa,--gsframe \
    -Wl,--build-id -o demo-child demo-child.c
"$TOOLCHAIN_DIR/bin/objdump-2.47.50" --sframe demo-child | head -12
