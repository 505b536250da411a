#!/usr/bin/env bash
# Re-take the screenshots in docs/img/ from a real Wireshark window under Xvfb.
# Needs the demo's captures (bash scripts/demo.sh) and, once:
#   apt-get install wireshark-qt xvfb imagemagick xdotool x11-utils
set -euo pipefail
cd "$(dirname "$0")/.."
KEYS="$PWD/demo/keys.txt"
OUT=docs/img
mkdir -p "$OUT"
export DISPLAY=:77
Xvfb "$DISPLAY" -screen 0 1400x1000x24 >/dev/null 2>&1 &
XVFB=$!
trap 'kill $XVFB 2>/dev/null || true' EXIT
sleep 2
PROFILE=$(mktemp -d)
export WIRESHARK_CONFIG_DIR="$PROFILE"

# shot <png> <capture> <packet> <display filter>
shot() {
    local png=$1 cap=$2 pkt=$3 filter=$4
    wireshark -n -r "$cap" -o "psp.keyfile:$KEYS" -o "eesp.keyfile:$KEYS" -o gui.ask_unsaved:FALSE \
        -o gui.update.enabled:FALSE -Y "$filter" -g "$pkt" >/dev/null 2>&1 &
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
    # The details pane lists Frame, Ethernet, IP, UDP, then our protocol (5th line): open its subtrees.
    xdotool mousemove 120 $((544 + 4 * 18)) click 1
    sleep 0.5
    xdotool key shift+Right
    sleep 2
    import -window root "$png"
    convert "$png" -strip -colors 256 "$png"   # a palette keeps the PNGs small for the repository
    kill $ws
    wait $ws 2>/dev/null || true
}

shot "$OUT/wireshark-psp.png" out/demo/psp_1a345678.pcapng 2 'psp'
shot "$OUT/wireshark-eesp.png" out/demo/eesp_2000.pcapng 2 'eesp'
echo "screenshots in $OUT/"
