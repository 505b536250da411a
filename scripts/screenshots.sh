#!/usr/bin/env bash
# Re-take the screenshots in docs/img/ from a real Wireshark window under Xvfb.
#
#   scripts/screenshots.sh                 Wireshark of this machine (Debian 12: 4.0) with the C plugin
#   scripts/screenshots.sh --chroot DIR    Wireshark 4.6 in the Debian sid root DIR with psp.lua/eesp.lua
#                                          decrypting in pure Lua: no plugin, no pelua (docs/wireshark.md)
#
# Needs the demo's captures (bash scripts/demo.sh) and, in the Wireshark's system, once:
#   apt-get install wireshark xvfb imagemagick xdotool x11-utils      (Debian 12: wireshark-qt)
# For --chroot, DIR is a Debian sid root (e.g. made by debootstrap as scripts/wireshark-chroot.sh does)
# with those packages installed; the script runs there as nobody, since Wireshark refuses Lua as root.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
KEYS="$ROOT/demo/keys.txt"
OUT=docs/img
mkdir -p "$OUT"

if [[ "${1:-}" == "--chroot" ]]; then
    C=${2:?usage: scripts/screenshots.sh --chroot DIR}
    W=/tmp/pe-shots
    rm -rf "$C$W" && mkdir -p "$C$W/img"
    cp scripts/screenshots.sh demo/keys.txt dissectors/lua/psp.lua dissectors/lua/eesp.lua "$C$W/"
    cp out/demo/psp_1a345678.pcapng out/demo/eesp_1000.pcapng "$C$W/"
    chmod -R a+rwX "$C$W"
    mount -t proc proc "$C/proc"
    # A private /dev (not a bind of the host's, which anything inside could alter) with what Xvfb needs.
    mount -t tmpfs -o mode=755,size=1m pe-dev "$C/dev"
    trap 'for m in "$C/dev" "$C/proc"; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done' EXIT
    for node in "null 1 3" "zero 1 5" "random 1 8" "urandom 1 9" "tty 5 0"; do
        set -- $node
        mknod -m 666 "$C/dev/$1" c "$2" "$3"
    done
    mkdir -p "$C/dev/shm" && chmod 1777 "$C/dev/shm"
    ln -s /proc/self/fd "$C/dev/fd"
    chroot "$C" /usr/sbin/runuser -u nobody -- env -i PATH=/usr/bin:/bin HOME=$W/home LC_ALL=C.UTF-8 \
        bash $W/screenshots.sh --inside $W
    cp "$C$W/img/"*.png "$OUT/"
    echo "screenshots in $OUT/"
    exit 0
fi

export DISPLAY=:77
Xvfb "$DISPLAY" -screen 0 1400x1000x24 >/dev/null 2>&1 &
XVFB=$!
trap 'kill $XVFB 2>/dev/null || true' EXIT
sleep 2
PROFILE=$(mktemp -d)
export WIRESHARK_CONFIG_DIR="$PROFILE"
EXTRA=()

if [[ "${1:-}" == "--inside" ]]; then  # the --chroot run, inside the root it named
    W=$2
    KEYS=$W/keys.txt
    OUT=$W/img
    mkdir -p "$W/home" "$W/empty"
    export WIRESHARK_PLUGIN_DIR=$W/empty LUA_CPATH_5_4="$W/empty/?.so" LUA_CPATH="$W/empty/?.so"
    EXTRA=(-X "lua_script:$W/psp.lua" -X "lua_script:$W/eesp.lua")
fi

ROW=18  # the details pane's row height in Wireshark 4.0's Qt (4.6's rows are 14 pixels)
# shot <png> <capture> <packet> <display filter> [the protocol's line in the details pane, default 5]
shot() {
    local png=$1 cap=$2 pkt=$3 filter=$4 line=${5:-5}
    wireshark -n -r "$cap" ${EXTRA[@]+"${EXTRA[@]}"} -o "psp.keyfile:$KEYS" -o "eesp.keyfile:$KEYS" \
        -o gui.ask_unsaved:FALSE -o gui.update.enabled:FALSE -Y "$filter" -g "$pkt" >/dev/null 2>&1 &
    local ws=$!
    local win=""
    for _ in $(seq 60); do
        win=$(xdotool search --onlyvisible --name "Wireshark" 2>/dev/null | head -1 || true)
        [[ -n "$win" ]] && break
        sleep 0.5
    done
    [[ -n "$win" ]] || { echo "no Wireshark window" >&2; kill $ws; return 1; }
    sleep 3
    xdotool windowsize "$win" 1400 1000 windowmove "$win" 0 0
    xdotool windowactivate --sync "$win" 2>/dev/null || xdotool windowfocus "$win"
    sleep 1
    # The details pane lists Frame, Ethernet, IP, (UDP,) then our protocol: open its subtrees.
    xdotool mousemove 120 $((544 + (line - 1) * ROW)) click 1
    sleep 0.5
    xdotool key shift+Right
    sleep 2
    import -window root "$png"
    convert "$png" -strip -colors 256 "$png"   # a palette keeps the PNGs small for the repository
    kill $ws
    wait $ws 2>/dev/null || true
}

if [[ "${1:-}" == "--inside" ]]; then
    ROW=14
    shot "$OUT/wireshark46-lua-psp.png" "$W/psp_1a345678.pcapng" 2 'psp'
    # EESP in IP protocol 49 (no outer UDP): the details pane's 4th line is EESP.
    shot "$OUT/wireshark46-lua-eesp.png" "$W/eesp_1000.pcapng" 2 'eesp' 4
    exit 0
fi
shot "$OUT/wireshark-psp.png" out/demo/psp_1a345678.pcapng 2 'psp'
shot "$OUT/wireshark-eesp.png" out/demo/eesp_2000.pcapng 2 'eesp'
echo "screenshots in $OUT/"
