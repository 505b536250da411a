#!/usr/bin/env bash
# Run every test: C unit tests (plain and under ASan/UBSan), the Python suite
# (plain and against a sanitizer build of the core), the tshark tests against
# Wireshark 4.4 and 4.6 in Debian chroots, packaging checks and a benchmark
# smoke run.  Fails loudly at the first failing step.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
JOBS=$(nproc)

step() { CURRENT="$*"; printf '\n===== %s =====\n' "$*"; }
trap 'rc=$?; printf "\n***** FAILED (exit %s) in step: %s *****\n" "$rc" "${CURRENT:-setup}" >&2; exit $rc' ERR

step "install"
bash scripts/install.sh

step "C core: build and unit tests"
cmake -S core -B build/core -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build/core -j "$JOBS" >/dev/null
ctest --test-dir build/core --output-on-failure

step "C core: unit tests with OpenSSL as the only backend (forced at run time, and built without intel-ipsec-mb)"
PE_CRYPTO_BACKEND=openssl ctest --test-dir build/core --output-on-failure
cmake -S core -B build/core-openssl -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPE_IPSEC_MB=OFF >/dev/null
cmake --build build/core-openssl -j "$JOBS" >/dev/null
ctest --test-dir build/core-openssl --output-on-failure

step "C core: unit tests under AddressSanitizer + UndefinedBehaviorSanitizer"
cmake -S core -B build/core-asan -DCMAKE_BUILD_TYPE=Debug -DPE_SANITIZE=ON >/dev/null
cmake --build build/core-asan -j "$JOBS" >/dev/null
ctest --test-dir build/core-asan --output-on-failure

step "fuzz: corpus replay (gcc + ASan/UBSan)"
fuzz/run --replay

step "fuzz: bounded libFuzzer run (clang-14, about 2 minutes)"
fuzz/run --ci

step "fuzz: atheris corpora replay (Python entry points)"
.venv/bin/python fuzz/atheris/run.py --replay

step "Wireshark plugin: build with ASan + UBSan for the robustness tests"
# (install.sh built and installed the plain one; the tests load both from build/, see tests/wireshark.py)
cmake -S dissectors/plugin -B build/plugin-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPE_SANITIZE=ON >/dev/null
cmake --build build/plugin-asan -j "$JOBS" >/dev/null

# Derandomized property tests with thousands of examples (tests/conftest.py).
export HYPOTHESIS_PROFILE=ci PE_HYPOTHESIS_EXAMPLES=${PE_HYPOTHESIS_EXAMPLES:-2000}
step "Python tests"
.venv/bin/pytest -q tests

step "Python tests against the core built with ASan + UBSan"
# A private copy of the Python packages whose extension is compiled with the
# sanitizers; PYTHONPATH puts it ahead of the normal build.
ASAN_DIR=build/py-asan
rm -rf "$ASAN_DIR" && mkdir -p "$ASAN_DIR"
cp -r pecore pypsp pyeesp pyesp "$ASAN_DIR"/
rm -f "$ASAN_DIR"/pecore/_native*.so
ln -s "$ROOT/core" "$ASAN_DIR/core"
(cd "$ASAN_DIR" && PE_LTO=0 PE_EXTRA_CFLAGS="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -O1 -g" \
    PE_EXTRA_LDFLAGS="-fsanitize=address,undefined" "$ROOT/.venv/bin/python" pecore/_build.py >/dev/null)
SAN_PRELOAD="$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libubsan.so)"
# pytest captures fd 2, so sanitizer reports go to files that are printed on failure.
SAN_LOGS="$ROOT/build/sanitizer-logs"
rm -rf "$SAN_LOGS" && mkdir -p "$SAN_LOGS"
PE_EXPECT_SANITIZED=1 PE_HYPOTHESIS_EXAMPLES=300 PYTHONPATH="$ROOT/$ASAN_DIR" LD_PRELOAD="$SAN_PRELOAD" \
    ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:log_path=$SAN_LOGS/asan" \
    UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$SAN_LOGS/ubsan" \
    .venv/bin/pytest -q -p no:cacheprovider -m "not tshark" tests || { cat "$SAN_LOGS"/* 2>/dev/null; false; }

# The tshark tests again against newer Wireshark releases, each in a Debian chroot kept in
# /var/tmp/pe-chroots (made on the first run, about a minute; refreshed daily).
step "Wireshark 4.4 (Debian 13 chroot)"
bash scripts/wireshark-chroot.sh trixie

step "Wireshark 4.6 (Debian sid chroot)"
bash scripts/wireshark-chroot.sh sid

step "packaging: the sdist carries the C sources and headers and builds"
rm -rf build/sdist && mkdir -p build/sdist
.venv/bin/python -m build --sdist --no-isolation --outdir build/sdist . >/dev/null
# (a listing file, not a pipe: grep -q closing early would make tar die of SIGPIPE under pipefail)
tar tzf build/sdist/*.tar.gz > build/sdist/contents.txt
for f in core/include/pe/psp.h core/include/pe/eesp.h core/include/pe/ipsec.h core/src/proto/psp.c core/src/proto/eesp.c \
         core/src/proto/keytable.h core/src/proto/ipsec_internal.h pecore/_cdef.py; do
    grep -q "/$f\$" build/sdist/contents.txt || { echo "sdist lacks $f" >&2; false; }
done
grep -q "/LICENSE\$" build/sdist/contents.txt || { echo "sdist lacks LICENSE" >&2; false; }
.venv/bin/python -m pip wheel -q --no-deps --no-build-isolation -w build/sdist build/sdist/*.tar.gz
# One wheel for every CPython >= 3.9 (the extension uses the limited API), with the license pip shows.
WHEEL=$(ls build/sdist/*.whl)
[[ "$WHEEL" == *-cp39-abi3-*.whl ]] || { echo "wheel is not tagged abi3: $WHEEL" >&2; false; }
.venv/bin/python - "$WHEEL" <<'PY'
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
assert "License-Expression: Apache-2.0" in z.read(meta).decode(), "no License-Expression in the wheel"
assert any(n.endswith(".dist-info/licenses/LICENSE") for n in z.namelist()), "no LICENSE in the wheel"
PY

step "benchmark smoke run"
if [[ -x bench/run ]]; then bench/run --quick; else echo "bench/run missing" >&2; false; fi

step "demo"
bash scripts/demo.sh >/dev/null

step "the machine is left as found"
# Nothing here may replace a device node (a rename of a capture output over /dev/null once did).
[[ -c /dev/null ]] || { echo "/dev/null is no longer a character device" >&2; false; }

printf '\n===== all steps passed =====\n'
