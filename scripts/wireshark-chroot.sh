#!/usr/bin/env bash
# The tshark tests against a newer Wireshark, in a Debian chroot (docs/wireshark.md, Platform notes):
#
#   scripts/wireshark-chroot.sh trixie            Wireshark 4.4, Lua 5.4 (Debian 13)
#   scripts/wireshark-chroot.sh sid               Wireshark 4.6, Lua 5.4 (Debian unstable)
#   scripts/wireshark-chroot.sh SUITE -- ARGS     pytest ARGS instead of the tshark tests
#   scripts/wireshark-chroot.sh SUITE --shell     a shell in the prepared chroot (/src)
#   scripts/wireshark-chroot.sh SUITE --bench [ARGS]
#       bench/tshark_bench.py --lua-only ARGS: psp.lua in pure Lua / with pelua / headers only against the
#       C plugin, built as for the tests (no ASan build, no pytest); paths in ARGS are inside the chroot
#
# The chroot lives in /var/tmp/pe-chroots/SUITE (PE_CHROOT_BASE overrides the parent) and is kept:
# a second run reuses it, refreshing its packages when they are more than a day old, and rebuilds
# it when the package list below changed.  The working tree (what git would see: .gitignore'd
# files stay out) is copied to /src inside; /src/.venv and /src/build persist between runs so
# that only what changed is rebuilt.  The plugin (plain and ASan) and pelua are built against the
# chroot's Wireshark and installed into its folders, then the tests run as on the host.
# Needs root, debootstrap and rsync (scripts/install.sh installs both), and deb.debian.org and PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

usage() { sed -n '2,19p' "$0"; exit 2; }
(($#)) || usage
SUITE=$1
shift
case "$SUITE" in
    trixie|sid) ;;
    -h|--help) usage ;;
    *) echo "unsupported suite $SUITE: trixie (Wireshark 4.4) or sid (4.6)" >&2; exit 2 ;;
esac
shell=0 bench=0 bench_args=()
# The tshark tests: the plugin and Lua dissectors, and Wireshark's own ESP dissector on the core's ESP through the
# esp_sa UAT that `keys export` writes (what each release decrypts is the table in tests/esp/test_esp_interop.py)
# and on the ESP vector files (test_esp_vectors.py: -m tshark picks its two tshark tests out of the slow rest).
pytest_args=(-q -m tshark tests/wireshark/test_wireshark_plugin.py tests/wireshark/test_wireshark_plugin_eesp.py
             tests/wireshark/test_wireshark_plugin_reference.py tests/wireshark/test_wireshark_plugin_display.py
             tests/wireshark/test_lua_dissectors.py tests/wireshark/test_lua_beside_plugin.py
             tests/wireshark/test_lua_pure.py tests/wireshark/test_lua_pure_open.py tests/wireshark/test_lua_pure_tshark.py
             tests/esp/test_esp_interop.py tests/esp/test_keyimport.py tests/esp/test_esp_vectors.py)
while (($#)); do
    case "$1" in
        --shell) shell=1 ;;
        --bench) bench=1; shift; bench_args=("$@"); break ;;
        --) shift; pytest_args=("$@"); break ;;
        *) usage ;;
    esac
    shift
done
((EUID == 0)) || { echo "debootstrap, chroot and mount need root" >&2; exit 2; }
for tool in debootstrap rsync; do
    command -v "$tool" >/dev/null || { echo "$tool is missing (bash scripts/install.sh installs it)" >&2; exit 2; }
done

MIRROR=http://deb.debian.org/debian
BASE=${PE_CHROOT_BASE:-/var/tmp/pe-chroots}
R=$BASE/$SUITE
PACKAGES=(build-essential cmake pkg-config libssl-dev wireshark-dev tshark libgcrypt20-dev liblua5.4-dev
          python3 python3-venv python3-dev ca-certificates util-linux)
# The chroot is rebuilt when what it is made of changes, not only refreshed.
RECIPE_HASH=$(printf '%s\n' "$SUITE" "$MIRROR" "${PACKAGES[@]}" | sha256sum | cut -c1-16)
STAMP=$R/.pe-chroot-stamp
MAX_AGE=$((24 * 3600))

t_start=$EPOCHREALTIME
t_phase=$t_start
phase() { # phase NAME: closes the previous phase with its elapsed time
    local now=$EPOCHREALTIME
    [[ -n ${PHASE:-} ]] && awk -v s="$SUITE" -v p="$PHASE" -v a="$now" -v b="$t_phase" \
        'BEGIN { printf "[%s] %s: %.1f s\n", s, p, a - b }'
    t_phase=$now
    PHASE=$1
    [[ -n $PHASE ]] && printf '[%s] --- %s\n' "$SUITE" "$PHASE"
    return 0
}

mounted=()
cleanup() {
    local rc=$?
    for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
        umount "${mounted[i]}" 2>/dev/null || umount -l "${mounted[i]}" 2>/dev/null || true
    done
    if [[ ! -c /dev/null ]]; then  # a guard: the chroot is meant to leave the host as it found it
        printf '[%s] the host'"'"'s /dev/null is no longer a character device\n' "$SUITE" >&2
        rc=1
    fi
    ((rc == 0)) || printf '[%s] FAILED in phase: %s (exit %s)\n' "$SUITE" "${PHASE:-setup}" "$rc" >&2
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mount_in() { # mount_in TARGET mount-args...: once, undone on exit
    local target=$R$1
    shift
    mountpoint -q "$target" && return 0
    mount "$@" "$target"
    mounted+=("$target")
}

# Everything inside runs with a clean environment: the host's PIP_*, proxies and paths do not apply.
in_chroot() {
    chroot "$R" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive TERM="${TERM:-dumb}" "$@"
}

mkdir -p "$BASE"
exec 9>"$BASE/.$SUITE.lock"
flock -n 9 || { echo "[$SUITE] waiting for another run on $R"; flock 9; }

# ----------------------------------------------------------------------------------- the chroot
if [[ -f $STAMP && $(cat "$STAMP") != "$RECIPE_HASH" ]]; then
    phase "the package list changed: removing the old chroot"
    for m in "$R/dev/shm" "$R/dev/pts" "$R/dev" "$R/proc"; do mountpoint -q "$m" && umount -l "$m"; done
    rm -rf --one-file-system "$R"
fi

# sid's Release file on this mirror may be past its Valid-Until date (docs/wireshark.md, Platform notes).
APT_OPTS=(-o Acquire::Check-Valid-Until=false -o Acquire::Retries=3)
fresh=0
if [[ ! -f $STAMP ]]; then
    phase "debootstrap $SUITE (minbase)"
    rm -rf --one-file-system "$R"
    debootstrap --variant=minbase "$SUITE" "$R" "$MIRROR" >"$BASE/$SUITE-debootstrap.log" 2>&1 ||
        { tail -20 "$BASE/$SUITE-debootstrap.log" >&2; exit 1; }
    fresh=1
fi

mount_in /proc -t proc proc
# A private /dev with the few nodes builds and tests use, not a bind of the host's: a package script or a
# test that replaces a device node inside (as a capture rename once did to /dev/null) must not reach the host.
mount_in /dev -t tmpfs -o mode=755,size=1m pe-dev
for node in "null 1 3" "zero 1 5" "full 1 7" "random 1 8" "urandom 1 9" "tty 5 0"; do
    set -- $node
    [[ -e $R/dev/$1 ]] || mknod -m 666 "$R/dev/$1" c "$2" "$3"
done
mkdir -p "$R/dev/pts" "$R/dev/shm"
ln -sfn /proc/self/fd "$R/dev/fd"
ln -sfn /proc/self/fd/0 "$R/dev/stdin"; ln -sfn /proc/self/fd/1 "$R/dev/stdout"; ln -sfn /proc/self/fd/2 "$R/dev/stderr"
mount_in /dev/pts -t devpts -o newinstance,ptmxmode=0666,mode=620 pe-devpts
ln -sfn pts/ptmx "$R/dev/ptmx"
mount_in /dev/shm -t tmpfs -o mode=1777,size=64m pe-shm
cp -L /etc/resolv.conf "$R/etc/resolv.conf"
# pip inside must trust what the host trusts (an intercepting egress proxy has its own CA).
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    mkdir -p "$R/usr/local/share/ca-certificates"
    cp /usr/local/share/ca-certificates/*.crt "$R/usr/local/share/ca-certificates/"
fi

if ((fresh)); then
    phase "apt-get install (${#PACKAGES[@]} packages and their dependencies)"
    in_chroot apt-get "${APT_OPTS[@]}" update -qq
    in_chroot apt-get "${APT_OPTS[@]}" install -y -qq --no-install-recommends "${PACKAGES[@]}" \
        >"$BASE/$SUITE-apt.log" 2>&1 || { tail -30 "$BASE/$SUITE-apt.log" >&2; exit 1; }
    in_chroot apt-get clean
    echo "$RECIPE_HASH" >"$STAMP"
elif (($(date +%s) - $(stat -c %Y "$STAMP") > MAX_AGE)); then
    phase "apt-get update/upgrade (packages older than a day)"
    in_chroot apt-get "${APT_OPTS[@]}" update -qq
    in_chroot apt-get "${APT_OPTS[@]}" -y -qq --no-install-recommends dist-upgrade >"$BASE/$SUITE-apt.log" 2>&1 ||
        { tail -30 "$BASE/$SUITE-apt.log" >&2; exit 1; }
    in_chroot apt-get clean
    touch "$STAMP"
fi
in_chroot update-ca-certificates >/dev/null 2>&1 || true

phase "versions"
in_chroot tshark --version 2>/dev/null | head -1  # (stderr: tshark's warning about running as root)
in_chroot sh -c 'gcc --version | head -1; python3 --version; pkg-config --modversion lua5.4 | sed "s/^/Lua /"'

# ----------------------------------------------------------------------------------- the sources
phase "copy the working tree to /src"
# .gitignore'd files (build/, .venv/, *.so, ...) are neither copied nor deleted: the chroot keeps its own.
rsync -a --delete --exclude=/.git --filter=':- .gitignore' "$ROOT/" "$R/src/"
# The reference captures beside the tree (tests/conftest.py: <repo>/../shared, under reference/).
if [[ -d $ROOT/../shared ]]; then
    rsync -a --delete "$ROOT/../shared/" "$R/shared/"
fi

phase "Python venv and pip install -e .[test]"
# (pip's output goes to a log: setuptools warns about editable installs on every run)
if [[ ! -x $R/src/.venv/bin/python ]]; then
    in_chroot python3 -m venv /src/.venv
    in_chroot /src/.venv/bin/python -m pip install -q --upgrade pip setuptools wheel cffi >"$BASE/$SUITE-pip.log" 2>&1 ||
        { tail -30 "$BASE/$SUITE-pip.log" >&2; exit 1; }
fi
# Every run: the core under /src may have changed since the extension was compiled.
in_chroot sh -c 'cd /src && .venv/bin/python -m pip install -q --no-build-isolation -e ".[test]"' \
    >"$BASE/$SUITE-pip.log" 2>&1 || { tail -30 "$BASE/$SUITE-pip.log" >&2; exit 1; }

if ((shell)); then
    phase ""
    echo "[$SUITE] shell in $R (/src); the mounts go away when it exits"
    in_chroot sh -c 'cd /src && exec bash -i' || true
    exit 0
fi

# ----------------------------------------------------------------------------------- build
phase "build: Wireshark plugin (plain, installed) and pelua (installed)"
# -Wall -Wextra must stay quiet on every Wireshark: a warning in the dissectors' own sources fails the
# run (one in the core is shown; the core has its own checks), and so does an error.
build() { # build SRC DIR [cmake args]: configure, compile (logs in DIR), install unless it is the ASan build
    in_chroot sh -ec 'cd /src; src=$1 dir=$2; shift 2; mkdir -p "$dir"
        if ! cmake -S "$src" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >"$dir/configure.log" 2>&1; then
            tail -40 "$dir/configure.log"; exit 1
        fi
        grep -E "^-- (Wireshark [0-9]|pelua for)" "$dir/configure.log" || true
        if ! cmake --build "$dir" -j2 >"$dir/build.log" 2>&1; then tail -40 "$dir/build.log"; exit 1; fi
        grep -E -A3 "warning:" "$dir/build.log" || true
        if grep -q "^/src/$src/[^:]*:[0-9]*:[0-9]*: warning:" "$dir/build.log"; then
            cmake --build "$dir" --target clean >/dev/null # so that the next run compiles them and sees them again
            echo "warnings in $src"; exit 1
        fi
        case " $* " in *PE_SANITIZE=ON*) ;; *) cmake --install "$dir" | grep -v "^-- Up-to-date" || true ;; esac' \
        build "$@"
}
build dissectors/plugin build/plugin
build dissectors/lua build/lua
# The plugin must load from the global folder of this Wireshark (so its major.minor is right).
in_chroot tshark -G plugins 2>/dev/null | grep '^psp_eesp.so' ||
    { echo "[$SUITE] tshark -G plugins does not list psp_eesp.so" >&2; exit 1; }

if ((bench)); then
    phase "bench/tshark_bench.py --lua-only ${bench_args[*]}"
    in_chroot sh -c 'cd /src && exec .venv/bin/python bench/tshark_bench.py --lua-only "$@"' bench \
        ${bench_args[@]+"${bench_args[@]}"}
    phase ""
    printf '[%s] total: %d s\n' "$SUITE" "$((${EPOCHREALTIME%.*} - ${t_start%.*}))"
    exit 0
fi

phase "build: Wireshark plugin with ASan + UBSan"
build dissectors/plugin build/plugin-asan -DPE_SANITIZE=ON

# ----------------------------------------------------------------------------------- test
phase "pytest ${pytest_args[*]}"
in_chroot sh -c 'cd /src && exec .venv/bin/pytest "$@"' pytest "${pytest_args[@]}"

phase ""
printf '[%s] total: %d s; chroot size: %s\n' "$SUITE" "$((${EPOCHREALTIME%.*} - ${t_start%.*}))" \
    "$(du -sh --one-file-system "$R" 2>/dev/null | cut -f1)"
