#!/usr/bin/env bash
# install-oracles.sh - install the outside tools the tests compare pysframe with, so that no
# oracle test skips (CI runs this; with CI=true a missing oracle fails the test run):
#
#   perf 6.1             Debian 12's linux-perf: the reference for `perf script` text
#   perf 7.x             ../shared/toolchain/install-perf.sh -> /opt/perf-new (deferred callchains)
#   binutils 2.40, 2.44, 2.47.50 (.debs) and 2.46 (built, ~5 min once)
#                        ../shared/toolchain/install.sh -> /opt/sframe-tc
#   go tool pprof        golang-go
#   profile.proto        golang-github-google-pprof-dev (pprof's own schema), protobuf-compiler
#   Chromium             chromium (driven by Playwright from the test extras)
#   speedscope           the npm package's app -> /opt/speedscope (opened in Chromium)
#   gcc, g++, gdb, libc6-dbg, dwz, elfutils, dpkg-dev, binutils: what tests build and look at
#   qemu-user, gdb-multiarch, gcc/g++ and libc for aarch64 and s390x: the cross-architecture
#                        core corpus (tests/test_cross_cores.py)
#
# Needs root (apt-get). Re-running is quick: what is there is kept. Prints every oracle's
# version at the end, one line each.
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED=${SHARED:-../shared}
PACKAGES=(linux-perf golang-go golang-github-google-pprof-dev protobuf-compiler chromium
          gcc g++ gdb elfutils binutils dpkg-dev xz-utils zstd libc6-dbg dwz debuginfod
          qemu-user gdb-multiarch gcc-aarch64-linux-gnu g++-aarch64-linux-gnu
          gcc-s390x-linux-gnu g++-s390x-linux-gnu libc6-dev-arm64-cross libc6-dev-s390x-cross)

missing=()
for package in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "ok installed" || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "==> apt-get install ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

echo "==> perf 7.x into /opt/perf-new"
PERF7=$(bash "$SHARED/toolchain/install-perf.sh" /opt/perf-new | tail -n 1)
echo "==> binutils 2.40 2.44 2.47.50 2.46 into /opt/sframe-tc"
bash "$SHARED/toolchain/install.sh" --prefix /opt/sframe-tc 2.40 2.44 2.47.50 2.46 \
  > /tmp/pysframe-install-binutils.log 2>&1 || { tail -n 30 /tmp/pysframe-install-binutils.log; exit 1; }

SPEEDSCOPE=1.25.0  # tests/support/oracles.py SPEEDSCOPE
if ! grep -qs "\"version\": \"$SPEEDSCOPE\"" /opt/speedscope/node_modules/speedscope/package.json; then
  echo "==> speedscope $SPEEDSCOPE into /opt/speedscope"
  if ! command -v npm >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends npm >/dev/null
  fi
  npm install --prefix /opt/speedscope --no-audit --no-fund --silent "speedscope@$SPEEDSCOPE"
fi

echo "==> oracles"
echo "perf (6.1 reference): $(perf --version)"
echo "perf 7: $($PERF7 --version)"
for version in 2.40 2.44 2.46 2.47.50; do
  echo "ld $version: $(/opt/sframe-tc/bin/ld-$version --version | head -n 1)"
  echo "objdump $version: $(/opt/sframe-tc/bin/objdump-$version --version | head -n 1)"
done
echo "go: $(go version)"
echo "protoc: $(protoc --version)"
echo "chromium: $(chromium --version 2>/dev/null | head -n 1)"
echo "speedscope: $(node -p 'require("/opt/speedscope/node_modules/speedscope/package.json").version')"
echo "gdb: $(gdb --version | head -n 1)"
echo "gdb-multiarch: $(gdb-multiarch --version | head -n 1)"
echo "qemu-user: $(qemu-aarch64 --version | head -n 1)"
echo "gcc: $(gcc --version | head -n 1)"
