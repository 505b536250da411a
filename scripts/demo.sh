#!/usr/bin/env bash
# The main job: install, make sample traffic, encrypt it with PSP (transport,
# tunnel, GMAC) and EESP (tunnel over several Sub SAs, transport in UDP 4500),
# decrypt it with the CLIs, check it comes back byte for byte, and print a
# short report.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh >&2
export PATH="$PWD/.venv/bin:$PATH"
OUT=out/demo
mkdir -p "$OUT"
run() { printf '\n$ %s\n' "$*"; "$@"; }

run python demo/sample_traffic.py "$OUT/sample.pcapng" --packets 2000
for spi in 9a345678 1a345678 1a345679; do
    run pypsp encrypt "$OUT/sample.pcapng" "$OUT/psp_$spi.pcapng" --key-file demo/keys.txt --spi "$spi"
    run pypsp show "$OUT/psp_$spi.pcapng" --key-file demo/keys.txt --limit 2
    run pypsp decrypt "$OUT/psp_$spi.pcapng" "$OUT/psp_${spi}_decrypted.pcapng" --key-file demo/keys.txt
done
run pypsp decrypt "$OUT/psp_9a345678.pcapng" "$OUT/psp_wrong_key.pcapng" --master-key1 "$(printf '11%.0s' {1..32})" || true

for spi in 1000 2000; do
    run pyeesp encrypt "$OUT/sample.pcapng" "$OUT/eesp_$spi.pcapng" --key-file demo/keys.txt --spi "$spi"
    run pyeesp show "$OUT/eesp_$spi.pcapng" --key-file demo/keys.txt --limit 3
    run pyeesp decrypt "$OUT/eesp_$spi.pcapng" "$OUT/eesp_${spi}_decrypted.pcapng" --key-file demo/keys.txt
done

echo
echo "===== report ====="
python demo/compare.py "$OUT/sample.pcapng" "$OUT/psp_9a345678_decrypted.pcapng" "PSP v0 transport"
python demo/compare.py "$OUT/sample.pcapng" "$OUT/psp_1a345678_decrypted.pcapng" "PSP v1 tunnel + VC"
python demo/compare.py "$OUT/sample.pcapng" "$OUT/psp_1a345679_decrypted.pcapng" "PSP v2 GMAC transport"
python demo/compare.py "$OUT/sample.pcapng" "$OUT/eesp_1000_decrypted.pcapng" "EESP tunnel, 8 Sub SAs"
python demo/compare.py "$OUT/sample.pcapng" "$OUT/eesp_2000_decrypted.pcapng" "EESP transport, UDP 4500"

echo
echo "===== the same captures in tshark, decrypted by the psp_eesp plugin ====="
KEYS="$PWD/demo/keys.txt"
TS=(tshark -n -o "psp.keyfile:$KEYS" -o "eesp.keyfile:$KEYS")
run "${TS[@]}" -r "$OUT/psp_1a345678.pcapng" -c 4
run "${TS[@]}" -r "$OUT/psp_1a345678.pcapng" -c 1 -O psp -V
# Filters on the decrypted inner traffic: the HTTP requests and the DNS answers that travelled inside PSP
# (to a file first: head closing a pipe early would make tshark die of SIGPIPE under pipefail).
run "${TS[@]}" -r "$OUT/psp_9a345678.pcapng" -Y 'psp.status == "ok" && http.request' -T fields -e frame.number -e psp.spi -e psp.version -e http.host -e http.request.uri > "$OUT/http.txt"; head -5 "$OUT/http.txt"
run "${TS[@]}" -r "$OUT/psp_1a345678.pcapng" -Y 'psp.status == "ok" && dns.flags.response == 1' -T fields -e frame.number -e psp.spi -e dns.qry.name -e dns.a -e dns.aaaa > "$OUT/dns.txt"; head -3 "$OUT/dns.txt"
run "${TS[@]}" -r "$OUT/eesp_1000.pcapng" -c 4 -T fields -e frame.number -e eesp.spi -e eesp.session_id -e eesp.seq -e eesp.status -e ip.dst -e ipv6.dst -e tcp.dstport -e udp.dstport
run "${TS[@]}" -r "$OUT/eesp_2000.pcapng" -c 1 -O eesp -V
echo
echo "decryption status per capture (count, status; an empty status is a packet that is neither PSP nor EESP):"
for f in psp_9a345678 psp_1a345678 psp_1a345679 eesp_1000 eesp_2000; do
    printf '  %-14s ' "$f"; "${TS[@]}" -r "$OUT/$f.pcapng" -T fields -e psp.status -e eesp.status 2>/dev/null | sort | uniq -c | tr -s ' \t\n' ' '; echo
done
printf 'psp-master key0=%s key1=%s\n' "$(printf '11%.0s' {1..32})" "$(printf '22%.0s' {1..32})" > "$OUT/wrong_keys.txt"
printf '  %-14s ' "wrong keys"; tshark -n -o "psp.keyfile:$PWD/$OUT/wrong_keys.txt" -r "$OUT/psp_9a345678.pcapng" -T fields -e psp.status 2>/dev/null | sort | uniq -c | tr -s ' \t\n' ' '; echo
echo "captures are in $OUT/"
