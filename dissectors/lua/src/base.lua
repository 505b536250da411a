-- pecrypto: PSP and EESP decryption in pure Lua, for psp.lua and eesp.lua when the pelua C module is absent.
--
-- This is Lua 5.3+ source (native 64-bit integers and bit operators), in modules of one concern each: this file
-- (statuses, octets) and the others src/pecrypto.lua lists, one chunk joined in that order.  It is not loaded as
-- files: dissectors/lua/build_scripts.py inlines the joined chunk into psp.lua and eesp.lua as a string, which the
-- scripts compile only when the Lua is 5.3+ and Wireshark has GcryptCipher (4.6 and later).  Lua 5.2 (Wireshark
-- 4.0) never parses it, so the operators cost the 5.2 scripts nothing.  Edit the modules, then run build_scripts.py.
--
-- It mirrors the project's C core (core/src/proto/psp.c, eesp.c, eesp_hdr.c, kdf.c, keyfile.c) step by step, with the
-- same status names (pe_status_name) and messages, so that a dissector shows the same thing whether pelua or this
-- module decrypted.  The hashes, HMAC, HKDF and CMAC are written here; the AEADs and the AES block come from a
-- "backend" (gcrypt_backend() inside Wireshark; the tests inject their own), so no second AES lives in Lua.
--
--   local pecrypto = load(source, "=pecrypto.lua")()
--   local keys, err = pecrypto.load_keyfile(path, pecrypto.gcrypt_backend())
--   keys:psp_open(udp_payload)             -> status, inner | nil, info     (as pelua's keys:psp_open)
--   keys:eesp_open(eesp, ip_version, dst)  -> status, inner | nil, info     (as pelua's keys:eesp_open)
--
-- A backend is a table with
--   block(key) -> function(block16) -> block16                 AES-ECB encryption of one block
--   aead(alg, key, tag_len) -> function(nonce, aad, ct, tag) -> plaintext | nil (ICV mismatch)
-- with alg "aes-gcm", "aes-ccm" or "chacha20-poly1305".  A backend may raise errors: the open functions catch
-- them and report "crypto-backend", never a Lua error.

local M = {}

local byte, char, sub, rep, fmt = string.byte, string.char, string.sub, string.rep, string.format
local pack, unpack = string.pack, string.unpack
local concat = table.concat

-- Statuses -----------------------------------------------------------------------------------------------------

-- The core's categories (pe_category_name, pe_category_description) and statuses (pe_status_name, its category,
-- pe_status_message), in core/include/pe/status.h's order; test_lua_pure.py checks this copy.  The block is
-- Lua 5.2 on purpose: build_scripts.py also copies it into psp.lua and eesp.lua as plain code, so that every path
-- of theirs (pelua, this module, headers only on Lua 5.2) picks a status's expert item from its category; their
-- inlined copy of this module has, between the markers, a line that takes those two tables as its arguments.
-- BEGIN STATUS TABLE
local CATEGORY_LIST = {
    { "ok", "success" },
    { "malformed", "the packet breaks its format (IP, UDP, PSP or EESP), also when its ICV verified" },
    { "authentication", "the ICV did not verify: wrong key, or altered in transit" },
    { "replay", "a sequence number already received, or left of the replay window" },
    { "policy", "well-formed, and dropped by the receiver's settings or by design (a dummy packet)" },
    { "no-key", "no key or SA for the packet's SPI" },
    { "not-this-protocol",
        "not a packet of this protocol for this receiver (another protocol or port, ESP/IKE on 4500)" },
    { "cut-by-capture", "the capture's snap length cut the packet: nothing can be said of the rest" },
    { "configuration", "the caller's settings, keys or key file are wrong" },
    { "io", "a capture file, device or socket could not be read or written, or a file is not a capture" },
    { "limit", "a size or counter limit was reached (output room, IV or sequence space)" },
    { "internal", "out of memory, or OpenSSL failed" },
}
local STATUS_LIST = {
    { "ok", "ok", "success" },
    { "out-of-memory", "internal", "out of memory" },
    { "invalid-argument", "configuration", "invalid argument" },
    { "buffer-too-small", "limit", "output buffer too small" },
    { "crypto-backend", "internal", "OpenSSL reported an internal failure" },
    { "bad-key-length", "configuration", "key length does not match the algorithm" },
    { "authentication-failed", "authentication", "ICV verification failed" },
    { "no-key", "no-key", "no key configured for this SPI" },
    { "iv-exhausted", "limit", "IV counter exhausted: refusing to wrap and reuse an IV" },
    { "unsupported", "configuration", "operation not supported" },
    { "batch-stopped", "limit", "not processed: the batch stopped at an earlier packet that failed" },
    { "ip-truncated", "malformed", "IP packet truncated" },
    { "ip-bad-version", "not-this-protocol", "not an IPv4 or IPv6 packet" },
    { "ip-bad-header-length", "malformed", "bad IPv4 header length (IHL)" },
    { "ip-bad-length", "malformed", "IP length field disagrees with the packet length" },
    { "ip-fragment", "malformed", "IP fragment: reassemble before processing" },
    { "ip-bad-extension-header", "malformed", "malformed or truncated IPv6 extension header" },
    { "ip-too-long", "limit", "result would exceed the maximum IP packet length" },
    { "not-udp", "not-this-protocol", "not a UDP packet" },
    { "udp-wrong-port", "not-this-protocol", "UDP destination port is not the configured port" },
    { "udp-truncated", "malformed", "UDP header truncated" },
    { "udp-bad-length", "malformed", "UDP length disagrees with the IP length" },
    { "udp-bad-checksum", "malformed", "UDP checksum is wrong" },
    { "udp-zero-checksum", "malformed", "UDP checksum 0 over IPv6, outside RFC 6936 zero-checksum mode" },
    { "psp-truncated", "malformed", "PSP packet shorter than its header and ICV" },
    { "psp-always-one-bit-clear", "malformed", "PSP always-1 bit is clear" },
    { "psp-unsupported-version", "malformed", "PSP version is not supported (only 0-3)" },
    { "psp-version-disabled", "policy", "PSP version is disabled on this receiver" },
    { "psp-bad-hdr-ext-len", "malformed", "PSP Hdr Ext Len is 0 or runs past the packet" },
    { "psp-vc-without-room", "malformed", "PSP V bit set but Hdr Ext Len leaves no room for the VC" },
    { "psp-crypt-offset-past-payload", "malformed", "PSP crypt offset points past the end of the payload" },
    { "psp-crypt-offset-out-of-range", "configuration", "PSP crypt offset must be 0..63 words" },
    { "psp-gmac-crypt-offset", "configuration", "PSP GMAC versions (2, 3) send crypt offset 0" },
    { "psp-too-long", "malformed", "PSP packet longer than any UDP payload can be" },
    { "psp-bad-mode", "malformed", "packet does not fit the PSP mode (tunnel needs IPv4/IPv6 inside)" },
    { "psp-bad-inner-packet", "malformed",
        "PSP tunnel payload is not one whole IPv4/IPv6 packet (header or length fields)" },
    { "not-eesp", "not-this-protocol", "not an EESP packet (other IP protocol or UDP port)" },
    { "nat-keepalive", "not-this-protocol", "UDP 4500 NAT keepalive, not EESP" },
    { "ike-non-esp-marker", "not-this-protocol", "UDP 4500 IKE message (non-ESP marker), not EESP" },
    { "esp-in-udp", "not-this-protocol", "UDP 4500 ESP packet (an ESP SA's SPI, or octet 0 not 0x80), not EESP" },
    { "eesp-truncated", "malformed", "EESP packet shorter than its headers and ICV" },
    { "eesp-compat-bit-clear", "not-this-protocol", "EESP ESP-compatibility bit is clear (ESP, not EESP)" },
    { "eesp-unsupported-version", "malformed", "EESP version is not the negotiated version 0" },
    { "eesp-reserved-bits-set", "malformed", "EESP Base Header reserved bits are not zero" },
    { "eesp-options-overrun", "malformed", "EESP options run past Opt Len, or would not fit in it" },
    { "eesp-bad-crypt-offset-option", "malformed", "EESP Crypt Offset option has a bad length or appears twice" },
    { "eesp-bad-payload-offset", "malformed", "EESP PayloadOffset disagrees with the header lengths" },
    { "eesp-crypt-offset-past-payload", "malformed", "EESP crypt offset reaches past the payload" },
    { "eesp-crypt-offset-not-allowed", "policy",
        "EESP Crypt Offset option not allowed or above the announced maximum" },
    { "eesp-unknown-option", "policy", "EESP packet carries an unknown option (strict receiver)" },
    { "eesp-no-sa", "no-key", "no EESP SA for this SPI" },
    { "eesp-sub-sa-out-of-range", "policy", "EESP Session ID is above the maximum Sub SA ID" },
    { "eesp-sequence-zero", "malformed", "EESP sequence number 0 is never valid" },
    { "replay-duplicate", "replay", "sequence number already received (replay)" },
    { "replay-too-old", "replay", "sequence number is left of the replay window" },
    { "sequence-exhausted", "limit", "sequence number would wrap: rekey the SA" },
    { "eesp-bad-pad-length", "malformed", "EESP Pad Length does not fit the packet" },
    { "eesp-bad-inner-packet", "malformed",
        "EESP inner packet is not the IPv4/IPv6 packet the mode and format call for (version, length)" },
    { "eesp-dummy-packet", "policy", "EESP dummy packet (Next Header 59): authenticated and discarded" },
    { "sskdf-undefined", "configuration", "SSKDF_AES256_CMAC is not defined by draft-ietf-ipsecme-eesp-ikev2-02" },
    { "eesp-bad-suite", "configuration", "unknown EESP AEAD suite or key size" },
    { "eesp-bad-config", "configuration", "EESP SA settings contradict each other" },
    { "eesp-iiv-needs-seq", "configuration", "implicit-IV suites need the Sequence Number (SN = None is refused)" },
    { "eesp-gmac-linux-xfrm", "configuration",
        "AES-GMAC with aad linux-xfrm (the Linux XFRM AAD) is undefined (D12)" },
    { "eesp-optimized-needs-ip", "configuration", "the optimized format can only carry an IPv4/IPv6 packet" },
    { "eesp-explicit-iv-with-implicit-iv-suite", "configuration",
        "an explicit IV was given for a suite whose IV is the Sequence Number (RFC 8750)" },
    { "eesp-pad-length-out-of-range", "configuration",
        "the requested EESP Pad Length does not fit (0..255, and within the IP length)" },
    { "not-esp", "not-this-protocol", "not an ESP packet (other IP protocol or UDP port)" },
    { "eesp-in-udp", "not-this-protocol", "UDP 4500 EESP packet (octet 0 0x80, no ESP SA's SPI), not ESP" },
    { "esp-truncated", "malformed", "ESP packet shorter than its header, IV, trailer and ICV" },
    { "esp-no-sa", "no-key", "no ESP SA for this SPI" },
    { "esp-sequence-zero", "malformed", "ESP sequence number 0 is never sent" },
    { "esp-bad-pad-length", "malformed", "ESP Pad Length runs past the payload" },
    { "esp-bad-padding", "malformed", "ESP padding octets are not 1, 2, 3, ..." },
    { "esp-bad-next-header", "malformed", "ESP Next Header does not fit the SA's mode (tunnel: 4 or 41)" },
    { "esp-bad-inner-packet", "malformed",
        "ESP tunnel payload is not one whole IPv4/IPv6 packet of the announced version" },
    { "esp-dummy-packet", "policy", "ESP dummy packet (Next Header 59): authenticated and discarded" },
    { "esp-bad-suite", "configuration", "unknown ESP suite (encryption and integrity) or key size" },
    { "esp-bad-config", "configuration", "ESP SA settings contradict each other" },
    { "esp-bad-block-length", "malformed",
        "ESP ciphertext is not a whole number of the cipher's blocks (AES-CBC: 16 octets)" },
    { "capture-io", "io", "capture file could not be read" },
    { "capture-write-failed", "io", "output capture could not be written (errno tells why)" },
    { "capture-bad-format", "io", "not a pcap or pcapng file, or a corrupt block" },
    { "capture-truncated", "io", "capture file ends in the middle of a record" },
    { "capture-unsupported-linktype", "io", "capture link type is not Ethernet or raw IP" },
    { "capture-packet-cut", "cut-by-capture", "packet was cut by the capture snap length" },
    { "not-ip", "not-this-protocol", "frame does not carry IPv4 or IPv6" },
    { "capture-aborted", "io", "capture processing was aborted by the caller" },
    { "capture-record-too-large", "io", "capture record longer than the reader's limit (16 MiB)" },
    { "capture-cannot-convert", "io",
        "pcap cannot hold this pcapng input (interfaces of several link types or FCS lengths, or a time past 2106)" },
    { "keyfile-syntax", "configuration", "key file syntax error" },
    { "keyfile-bad-value", "configuration", "key file value is invalid" },
    { "keyfile-duplicate", "configuration", "key file defines the same SA twice" },
    { "tunnel-bad-config", "configuration", "tunnel settings contradict each other or the key file" },
    { "tunnel-device", "io", "the TUN device could not be made, set up, read or written (errno tells why)" },
    { "tunnel-socket", "io", "a tunnel socket could not be made, bound, read or written (errno tells why)" },
    { "tunnel-stats-write", "io", "the tunnel's counters file could not be written (errno tells why)" },
    { "tunnel-transport-header", "policy",
        "transport mode: the packet's IP header cannot be the outer one (not local to peer, a fragment, IPv4 options or IPv6 extension headers)" },
}
-- END STATUS TABLE
local STATUS_MESSAGE, STATUS_CATEGORY = {}, {}
for _, row in ipairs(STATUS_LIST) do
    STATUS_CATEGORY[row[1]], STATUS_MESSAGE[row[1]] = row[2], row[3]
end
M.STATUS_LIST, M.CATEGORY_LIST = STATUS_LIST, CATEGORY_LIST

function M.status_message(name)
    return STATUS_MESSAGE[name] or "unknown status code"
end

-- As pe_status_category: a name the table lacks counts as internal.
function M.status_category(name)
    return STATUS_CATEGORY[name] or "internal"
end

-- Octets -------------------------------------------------------------------------------------------------------

local function tohex(s)
    return (s:gsub(".", function(c) return fmt("%02x", byte(c)) end))
end
M.tohex = tohex

local function fromhex(h)
    return (h:gsub("..", function(x) return char(tonumber(x, 16)) end))
end
M.fromhex = fromhex

-- Two 64-bit halves at a time: CMAC works on 16-octet blocks.
local function xor16(a, b)
    local a1, a2 = unpack(">i8i8", a)
    local b1, b2 = unpack(">i8i8", b)
    return pack(">i8i8", a1 ~ b1, a2 ~ b2)
end

local function xor_with(s, octet)
    local t = { byte(s, 1, -1) }
    for i = 1, #t do
        t[i] = t[i] ~ octet
    end
    return char(table.unpack(t))
end

