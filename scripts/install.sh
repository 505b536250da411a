#!/usr/bin/env bash
# Install everything the project needs on Debian 12 (as root): Debian packages,
# a virtualenv in .venv, and the project itself (which compiles the C core).
# Idempotent: a second run only re-checks.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(build-essential pkg-config libssl-dev python3-dev python3-venv cmake
              # the Wireshark plugin and Lua module (wireshark-dev does not pull libgcrypt20-dev: docs/wireshark.md)
              tshark wireshark-dev libgcrypt20-dev liblua5.2-dev
              # fuzzing (without libclang-rt-14-dev, -fsanitize=fuzzer does not link: docs/wireshark.md)
              clang-14 libclang-rt-14-dev llvm-14
              # scripts/valgrind.sh (docs/security.md)
              valgrind
              # tests/wireshark/test_lua_pure.py: the Lua dissectors' shared crypto under a plain Lua 5.4, and the scripts'
              # syntax under Lua 5.2 (Wireshark 4.0's)
              lua5.4 lua5.2
              # scripts/wireshark-chroot.sh: the tshark tests against Wireshark 4.4 and 4.6 in Debian chroots
              debootstrap rsync
              # tests/indep_readers.py: libpcap (through ctypes) as one of the readers that check our captures
              libpcap0.8
              # tests/tunnel: ping and TCP through the live endpoint between network namespaces; bench/ figures
              iputils-ping iperf3)
# The fast crypto backend (pe/backend.h); Debian builds intel-ipsec-mb for amd64 only, elsewhere OpenSSL does it all.
[[ "$(dpkg --print-architecture)" == amd64 ]] && APT_PACKAGES+=(libipsec-mb-dev)

missing=()
for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "==> apt-get install ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive # wireshark-common asks about non-root capture: keep the default
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}"
fi

# Debian's python3 (not whatever else is on PATH): the supported platform.
PY=/usr/bin/python3
if [[ ! -x .venv/bin/python ]]; then
    echo "==> creating .venv"
    "$PY" -m venv .venv
fi
echo "==> pip install -e .[test,bench,fuzz]"
.venv/bin/python -m pip install -q --upgrade pip setuptools wheel cffi build
# --no-build-isolation: build with the venv's cffi/setuptools just installed, no second download.
.venv/bin/python -m pip install -q --no-build-isolation -e ".[test,bench,fuzz]"
# An editable install compiles no bytecode, and with PYTHONDONTWRITEBYTECODE set Python never caches it:
# every CLI start would compile the packages again (docs/performance.md, "Figures from the code").
.venv/bin/python -m compileall -q pecore pypsp pyeesp pyesp >/dev/null
.venv/bin/python -c "import pypsp, pecore._native; print('==> pypsp', pypsp.__version__, 'core at', pecore._native.__file__)"

# The Wireshark plugin, built against the installed wireshark-dev and put into the
# global plugin folder (tshark run as root reads no other); docs/wireshark.md.
echo "==> Wireshark plugin"
cmake -S dissectors/plugin -B build/plugin -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build/plugin -j "$(nproc)" >/dev/null
cmake --install build/plugin >/dev/null
tshark -G plugins 2>/dev/null | grep -q '^psp_eesp.so' || { echo "tshark does not list psp_eesp.so" >&2; exit 1; }

# The Lua dissectors' decryption module (docs/wireshark.md#lua-dissectors), for the Lua the installed
# Wireshark links (5.2 for 4.0) and into that Lua's cpath (dissectors/lua/CMakeLists.txt).
echo "==> Lua module pelua"
cmake -S dissectors/lua -B build/lua -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build/lua -j "$(nproc)" >/dev/null
cmake --install build/lua >/dev/null
