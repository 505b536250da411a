-- PSP Security Protocol dissector for Wireshark 4.0 (Lua 5.2), 4.4 and 4.6 (Lua 5.4).
--
-- Header dissection is pure Lua.  Decryption takes a key file (docs/keys.md, or a google/psp reference config)
-- named by the preference psp.keyfile:
--
--   tshark -X lua_script:psp.lua -o psp.keyfile:keys.txt -r capture.pcapng
--
-- and decrypts with the first of:
--   1. the project's C module "pelua" (dissectors/lua/pelua.c; LUA_CPATH_5_2 / LUA_CPATH_5_4 or that Lua's
--      cpath), when require finds it;
--   2. Lua: Wireshark 4.6 and later give Lua the GcryptCipher API, and the rest (key file, AES-256-CMAC key
--      derivation) is the code below, generated from src/pecrypto.lua;
--   3. nothing: the headers are dissected, checked as the core checks them before it looks for a key, and a
--      note says what would decrypt.
-- Every path shows the same fields, statuses (the core's pe_status_name) and expert items as the C plugin: one
-- expert item per status category (psp.expert.malformed, psp.expert.no_key, ...), chosen by the category the
-- core gives the status.
--
-- Field names follow google/psp's psp.lua and the project's C plugin, which registers the same names: load one
-- or the other.  When a "psp" protocol is already registered this script says so on stderr and registers nothing.

local SCRIPT = "psp.lua"

local function note(msg)
    -- print() goes to stdout in tshark and would corrupt -T fields output.
    io.stderr:write(SCRIPT .. ": " .. msg .. "\n")
end

local function protocol_exists(name)
    local ok, d = pcall(Dissector.get, name)
    return ok and d ~= nil
end

if protocol_exists("psp") then
    note("a \"psp\" protocol is already registered (the psp_eesp C plugin provides it, or this script was loaded twice): not registering the Lua PSP dissector")
    return
end
local proto_ok, psp = pcall(Proto.new, "psp", "PSP Security Protocol")
if not proto_ok then
    note("a \"psp\" protocol is already registered (" .. tostring(psp) .. "): not registering the Lua PSP dissector")
    return
end

-- BEGIN GENERATED pecrypto (from the modules src/pecrypto.lua lists, by build_scripts.py: edit them, then run it)
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
local PECRYPTO_SOURCE = [=[
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
local CATEGORY_LIST, STATUS_LIST = ...
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

-- pecrypto, SHA-256/384/512, HMAC and HKDF-Expand.
-- One chunk with the modules before it in src/pecrypto.lua's list, whose locals it uses.

-- SHA-2 (FIPS 180-4) ----------------------------------------------------------------------------------------------

local K256 = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
}

-- Values are kept in the low 32 bits of Lua's 64-bit integers: rotations of clean values leave junk above
-- bit 31 that additions carry along harmlessly, so only what is shifted right again (a, e, W) is masked.
local function sha256_compress(H, msg)
    local W = {}
    for pos = 1, #msg, 64 do
        for t = 1, 16 do
            W[t] = unpack(">I4", msg, pos + 4 * (t - 1))
        end
        for t = 17, 64 do
            local x, y = W[t - 15], W[t - 2]
            local s0 = ((x >> 7) | (x << 25)) ~ ((x >> 18) | (x << 14)) ~ (x >> 3)
            local s1 = ((y >> 17) | (y << 15)) ~ ((y >> 19) | (y << 13)) ~ (y >> 10)
            W[t] = (W[t - 16] + s0 + W[t - 7] + s1) & 0xffffffff
        end
        local a, b, c, d, e, f, g, h = H[1], H[2], H[3], H[4], H[5], H[6], H[7], H[8]
        for t = 1, 64 do
            local S1 = ((e >> 6) | (e << 26)) ~ ((e >> 11) | (e << 21)) ~ ((e >> 25) | (e << 7))
            local ch = (e & f) ~ (~e & g)
            local t1 = h + S1 + ch + K256[t] + W[t]
            local S0 = ((a >> 2) | (a << 30)) ~ ((a >> 13) | (a << 19)) ~ ((a >> 22) | (a << 10))
            local maj = (a & b) ~ (a & c) ~ (b & c)
            h, g, f = g, f, e
            e = (d + t1) & 0xffffffff
            d, c, b = c, b, a
            a = (t1 + S0 + maj) & 0xffffffff
        end
        H[1], H[2], H[3], H[4] = (H[1] + a) & 0xffffffff, (H[2] + b) & 0xffffffff, (H[3] + c) & 0xffffffff,
            (H[4] + d) & 0xffffffff
        H[5], H[6], H[7], H[8] = (H[5] + e) & 0xffffffff, (H[6] + f) & 0xffffffff, (H[7] + g) & 0xffffffff,
            (H[8] + h) & 0xffffffff
    end
end

function M.sha256(msg)
    local H = { 0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19 }
    local n = #msg
    local pad = msg .. "\128" .. rep("\0", (55 - n) % 64) .. pack(">I8", n * 8)
    sha256_compress(H, pad)
    return pack(">I4I4I4I4I4I4I4I4", table.unpack(H))
end

-- Hex literals above 2^63 wrap to negative integers in Lua 5.3+: exactly the 64-bit patterns wanted.
local K512 = {
    0x428a2f98d728ae22, 0x7137449123ef65cd, 0xb5c0fbcfec4d3b2f, 0xe9b5dba58189dbbc, 0x3956c25bf348b538,
    0x59f111f1b605d019, 0x923f82a4af194f9b, 0xab1c5ed5da6d8118, 0xd807aa98a3030242, 0x12835b0145706fbe,
    0x243185be4ee4b28c, 0x550c7dc3d5ffb4e2, 0x72be5d74f27b896f, 0x80deb1fe3b1696b1, 0x9bdc06a725c71235,
    0xc19bf174cf692694, 0xe49b69c19ef14ad2, 0xefbe4786384f25e3, 0x0fc19dc68b8cd5b5, 0x240ca1cc77ac9c65,
    0x2de92c6f592b0275, 0x4a7484aa6ea6e483, 0x5cb0a9dcbd41fbd4, 0x76f988da831153b5, 0x983e5152ee66dfab,
    0xa831c66d2db43210, 0xb00327c898fb213f, 0xbf597fc7beef0ee4, 0xc6e00bf33da88fc2, 0xd5a79147930aa725,
    0x06ca6351e003826f, 0x142929670a0e6e70, 0x27b70a8546d22ffc, 0x2e1b21385c26c926, 0x4d2c6dfc5ac42aed,
    0x53380d139d95b3df, 0x650a73548baf63de, 0x766a0abb3c77b2a8, 0x81c2c92e47edaee6, 0x92722c851482353b,
    0xa2bfe8a14cf10364, 0xa81a664bbc423001, 0xc24b8b70d0f89791, 0xc76c51a30654be30, 0xd192e819d6ef5218,
    0xd69906245565a910, 0xf40e35855771202a, 0x106aa07032bbd1b8, 0x19a4c116b8d2d0c8, 0x1e376c085141ab53,
    0x2748774cdf8eeb99, 0x34b0bcb5e19b48a8, 0x391c0cb3c5c95a63, 0x4ed8aa4ae3418acb, 0x5b9cca4f7763e373,
    0x682e6ff3d6b2b8a3, 0x748f82ee5defb2fc, 0x78a5636f43172f60, 0x84c87814a1f0ab72, 0x8cc702081a6439ec,
    0x90befffa23631e28, 0xa4506cebde82bde9, 0xbef9a3f7b2c67915, 0xc67178f2e372532b, 0xca273eceea26619c,
    0xd186b8c721c0c207, 0xeada7dd6cde0eb1e, 0xf57d4f7fee6ed178, 0x06f067aa72176fba, 0x0a637dc5a2c898a6,
    0x113f9804bef90dae, 0x1b710b35131c471b, 0x28db77f523047d84, 0x32caab7b40c72493, 0x3c9ebe0a15c9bebc,
    0x431d67c49c100d4c, 0x4cc5d4becb3e42b6, 0x597f299cfc657e2a, 0x5fcb6fab3ad6faec, 0x6c44198c4a475817,
}

-- Lua integers wrap modulo 2^64 and ">>" is a logical shift: SHA-512 needs no masking at all.
local function sha512_compress(H, msg)
    local W = {}
    for pos = 1, #msg, 128 do
        for t = 1, 16 do
            W[t] = unpack(">i8", msg, pos + 8 * (t - 1))
        end
        for t = 17, 80 do
            local x, y = W[t - 15], W[t - 2]
            local s0 = ((x >> 1) | (x << 63)) ~ ((x >> 8) | (x << 56)) ~ (x >> 7)
            local s1 = ((y >> 19) | (y << 45)) ~ ((y >> 61) | (y << 3)) ~ (y >> 6)
            W[t] = W[t - 16] + s0 + W[t - 7] + s1
        end
        local a, b, c, d, e, f, g, h = H[1], H[2], H[3], H[4], H[5], H[6], H[7], H[8]
        for t = 1, 80 do
            local S1 = ((e >> 14) | (e << 50)) ~ ((e >> 18) | (e << 46)) ~ ((e >> 41) | (e << 23))
            local ch = (e & f) ~ (~e & g)
            local t1 = h + S1 + ch + K512[t] + W[t]
            local S0 = ((a >> 28) | (a << 36)) ~ ((a >> 34) | (a << 30)) ~ ((a >> 39) | (a << 25))
            local maj = (a & b) ~ (a & c) ~ (b & c)
            h, g, f = g, f, e
            e = d + t1
            d, c, b = c, b, a
            a = t1 + S0 + maj
        end
        H[1], H[2], H[3], H[4] = H[1] + a, H[2] + b, H[3] + c, H[4] + d
        H[5], H[6], H[7], H[8] = H[5] + e, H[6] + f, H[7] + g, H[8] + h
    end
end

local function sha512_family(H, out_len, msg)
    local n = #msg
    local pad = msg .. "\128" .. rep("\0", (111 - n) % 128) .. pack(">I8I8", 0, n * 8)
    sha512_compress(H, pad)
    return sub(pack(">i8i8i8i8i8i8i8i8", table.unpack(H)), 1, out_len)
end

function M.sha512(msg)
    return sha512_family({
        0x6a09e667f3bcc908, 0xbb67ae8584caa73b, 0x3c6ef372fe94f82b, 0xa54ff53a5f1d36f1,
        0x510e527fade682d1, 0x9b05688c2b3e6c1f, 0x1f83d9abfb41bd6b, 0x5be0cd19137e2179,
    }, 64, msg)
end

function M.sha384(msg)
    return sha512_family({
        0xcbbb9d5dc1059ed8, 0x629a292a367cd507, 0x9159015a3070dd17, 0x152fecd8f70e5939,
        0x67332667ffc00b31, 0x8eb44a8768581511, 0xdb0c2e0d64f98fa7, 0x47b5481dbefa4fa4,
    }, 48, msg)
end

-- Hash name -> function, block size, output size.
local HASHES = {
    sha256 = { M.sha256, 64, 32 },
    sha384 = { M.sha384, 128, 48 },
    sha512 = { M.sha512, 128, 64 },
}

-- RFC 2104.
function M.hmac(hash_name, key, msg)
    local h = assert(HASHES[hash_name], "unknown hash")
    local hash, block = h[1], h[2]
    if #key > block then
        key = hash(key)
    end
    key = key .. rep("\0", block - #key)
    return hash(xor_with(key, 0x5c) .. hash(xor_with(key, 0x36) .. msg))
end

-- RFC 5869 §2.3: T(i) = HMAC(PRK, T(i-1) || info || i), the first L octets of T(1) || T(2) || ...
function M.hkdf_expand(hash_name, prk, info, length)
    local h = assert(HASHES[hash_name], "unknown hash")
    assert(length >= 1 and length <= 255 * h[3], "HKDF-Expand output length out of range")
    local out, t, i = {}, "", 1
    local got = 0
    while got < length do
        t = M.hmac(hash_name, prk, t .. info .. char(i))
        out[#out + 1] = t
        got = got + #t
        i = i + 1
    end
    return sub(concat(out), 1, length)
end

-- pecrypto, AES-CMAC and PSP's key derivation, with the core's PSP versions.
-- One chunk with the modules before it in src/pecrypto.lua's list, whose locals it uses.

-- CMAC (RFC 4493, SP 800-38B) -------------------------------------------------------------------------------------

-- Doubling in GF(2^128): shift left one bit, reduce by x^128 + x^7 + x^2 + x + 1.
local function dbl(block)
    local hi, lo = unpack(">i8i8", block)
    local carry = (hi >> 63) & 1
    hi = (hi << 1) | ((lo >> 63) & 1)
    lo = lo << 1
    if carry == 1 then
        lo = lo ~ 0x87
    end
    return pack(">i8i8", hi, lo)
end

-- encrypt_block: the AES-ECB encryption of one 16-octet block under the CMAC key.
function M.cmac(encrypt_block, msg)
    local k1 = dbl(encrypt_block(rep("\0", 16)))
    local n = (#msg + 15) // 16
    local last
    if n == 0 then
        n = 1
        last = xor16("\128" .. rep("\0", 15), dbl(k1))
    elseif #msg % 16 == 0 then
        last = xor16(sub(msg, 16 * (n - 1) + 1), k1)
    else
        local tail = sub(msg, 16 * (n - 1) + 1)
        last = xor16(tail .. "\128" .. rep("\0", 15 - #tail), dbl(k1))
    end
    local x = rep("\0", 16)
    for i = 1, n - 1 do
        x = encrypt_block(xor16(x, sub(msg, 16 * (i - 1) + 1, 16 * i)))
    end
    return encrypt_block(xor16(x, last))
end

-- PSP ----------------------------------------------------------------------------------------------------------

local PSP_HDR_LEN, PSP_ICV_LEN, PSP_VC_LEN = 16, 16, 8
-- The core's PSP crypto versions (pe_psp_version_info_get): build_scripts.py writes them, test_lua_pure.py checks.
-- BEGIN PSP VERSION TABLE
local PSP_VERSION_LIST = {
    -- version, name, derived key octets, ICV octets, AES-GMAC
    { 0, "AES-GCM-128", 16, 16, false },
    { 1, "AES-GCM-256", 32, 16, false },
    { 2, "AES-GMAC-128", 16, 16, true },
    { 3, "AES-GMAC-256", 32, 16, true },
}
-- END PSP VERSION TABLE
M.PSP_VERSION_LIST = PSP_VERSION_LIST
local PSP_KEY_LEN, PSP_VERSION_NAME, PSP_GMAC = {}, {}, {}
for _, r in ipairs(PSP_VERSION_LIST) do
    PSP_VERSION_NAME[r[1]], PSP_KEY_LEN[r[1]], PSP_GMAC[r[1]] = r[2], r[3], r[5]
end
-- The largest UDP payload (PE_IP_MAX_LEN - UDP header): the core refuses anything longer before any work.
local PSP_MAX_LEN = 65535 - 8
-- Keys derived from the master keys are cached like the core's (psp.c RX_CACHE_LIMIT): bounded, since SPIs
-- come from the wire; a full cache is emptied and refilled.
local PSP_CACHE_LIMIT = 65536

-- "Pv0".."Pv3": the spec's label with the version OR-ed into octet 6 (psp.md §5; versions 2/3 assumed).
function M.psp_kdf_label(version)
    return 0x50763000 | ((version & 0xf) << 8)
end

-- NIST SP 800-108 counter mode with AES-256-CMAC (psp.md §5); encrypt_block is AES-256 under the master key.
-- label: the default "Pv<version>" when nil (key files cannot set another; the KDF vectors do).
function M.psp_derive_key(encrypt_block, spi, version, label)
    local n = PSP_KEY_LEN[version]
    assert(n, "PSP version has no key length")
    label = label or M.psp_kdf_label(version)
    local out = {}
    for i = 1, n // 16 do
        out[i] = M.cmac(encrypt_block, pack(">I4I4I4I4", i, label, spi, n * 8))
    end
    return concat(out)
end

-- pecrypto, the core's ESP/EESP suites and the Sub SA key derivation.
-- One chunk with the modules before it in src/pecrypto.lua's list, whose locals it uses.

-- ESP and EESP suites (core/src/proto/ipsec.c) ---------------------------------------------------------------------

-- The core's suite table (pe_ipsec_suite_*), in its order: build_scripts.py writes it, test_lua_pure.py checks it.
-- BEGIN SUITE TABLE
local SUITE_LIST = {
    -- encr, project name, IKEv2 name, alg, salt, explicit IV, ICV, implicit IV, integrity only, key octets
    { 14, "aes-ccm-8", "ENCR_AES_CCM_8", "aes-ccm", 3, 8, 8, false, false, { 16, 24, 32 } },
    { 15, "aes-ccm-12", "ENCR_AES_CCM_12", "aes-ccm", 3, 8, 12, false, false, { 16, 24, 32 } },
    { 16, "aes-ccm-16", "ENCR_AES_CCM_16", "aes-ccm", 3, 8, 16, false, false, { 16, 24, 32 } },
    { 18, "aes-gcm-8", "ENCR_AES_GCM_8", "aes-gcm", 4, 8, 8, false, false, { 16, 24, 32 } },
    { 19, "aes-gcm-12", "ENCR_AES_GCM_12", "aes-gcm", 4, 8, 12, false, false, { 16, 24, 32 } },
    { 20, "aes-gcm-16", "ENCR_AES_GCM_16", "aes-gcm", 4, 8, 16, false, false, { 16, 24, 32 } },
    { 21, "aes-gmac", "ENCR_NULL_AUTH_AES_GMAC", "aes-gcm", 4, 8, 16, false, true, { 16, 24, 32 } },
    { 28, "chacha20-poly1305", "ENCR_CHACHA20_POLY1305", "chacha20-poly1305", 4, 8, 16, false, false, { 32 } },
    { 29, "aes-ccm-8-iiv", "ENCR_AES_CCM_8_IIV", "aes-ccm", 3, 0, 8, true, false, { 16, 24, 32 } },
    { 30, "aes-gcm-16-iiv", "ENCR_AES_GCM_16_IIV", "aes-gcm", 4, 0, 16, true, false, { 16, 24, 32 } },
    { 31, "chacha20-poly1305-iiv", "ENCR_CHACHA20_POLY1305_IIV", "chacha20-poly1305", 4, 0, 16, true, false, { 32 } },
}
local ESP_CBC_SUITE_LIST = {
    -- ESP only: encr, project name, IKEv2 names, IV, ICV, key octets, integrity key octets
    { 12, "aes-cbc-hmac-sha1-96", "ENCR_AES_CBC+AUTH_HMAC_SHA1_96", 16, 12, { 16, 32 }, 20 },
    { 12, "aes-cbc-hmac-sha256-128", "ENCR_AES_CBC+AUTH_HMAC_SHA2_256_128", 16, 16, { 16, 32 }, 32 },
}
-- END SUITE TABLE
M.SUITE_LIST = SUITE_LIST
local SUITES = {}
for _, r in ipairs(SUITE_LIST) do
    local key_bits = {}
    for i, n in ipairs(r[10]) do
        key_bits[i] = 8 * n
    end
    SUITES[#SUITES + 1] = { encr = r[1], project = r[2], name = r[3], alg = r[4], salt_len = r[5], iv_len = r[6],
        icv_len = r[7], implicit_iv = r[8], integrity_only = r[9], key_bits = key_bits }
end
local SUITE_BY_ENCR = {}
for _, s in ipairs(SUITES) do
    SUITE_BY_ENCR[s.encr] = s
end
-- ESP's AES-CBC + HMAC suites: key-file lines only (Wireshark's ESP dissector decrypts them, from the esp_sa export).
M.ESP_CBC_SUITE_LIST = ESP_CBC_SUITE_LIST
local ESP_CBC_SUITES = {}
for _, r in ipairs(ESP_CBC_SUITE_LIST) do
    local key_bits = {}
    for i, n in ipairs(r[6]) do
        key_bits[i] = 8 * n
    end
    ESP_CBC_SUITES[#ESP_CBC_SUITES + 1] = { encr = r[1], project = r[2], name = r[3], iv_len = r[4], icv_len = r[5],
        key_bits = key_bits, integ_key_len = r[7], salt_len = 0 }
end

local SSKDF_NAMES = { "hkdf-sha256", "hkdf-sha384", "hkdf-sha512" }
local SSKDF_HASH = { "sha256", "sha384", "sha512" }
local SSKDF_ROOT_LEN = { 32, 48, 64 }

-- KEYMAT_sub = HKDF-Expand(KEY_root, Session ID as 2 octets big-endian, L) (eesp.md §12, D4); sskdf is 1, 2 or 3
-- (SSKDF_HKDF_SHA2_256/384/512).
function M.derive_sub_sa_key(sskdf, root, session_id, length)
    assert(#root == SSKDF_ROOT_LEN[sskdf], "root key length does not fit the SSKDF")
    return M.hkdf_expand(SSKDF_HASH[sskdf], root, pack(">I2", session_id), length)
end

-- pecrypto, the key-file and reference-config readers.
-- One chunk with the modules before it in src/pecrypto.lua's list, whose locals it uses.

-- Key files (docs/keys.md, core/src/io/keyfile.c) ------------------------------------------------------------------
--
-- The same grammar, checks, order of checks and messages as the C reader, so that a file the core refuses is
-- refused here with the same words.  Messages name the line, kind and field, never a value.

local MAX_PAIRS = 32
local REPLAY_MIN_WINDOW, REPLAY_DEFAULT_WINDOW, REPLAY_MAX_WINDOW = 64, 1024, 1 << 20

local KeyfileError = {}

local function kf_fail(status, line, message)
    error(setmetatable({ status = status, line = line, message = message }, KeyfileError), 0)
end

local function is_hex(c)
    return c:match("^[0-9a-fA-F]$") ~= nil
end

local function is_name(s)
    return s:match("^[a-z][a-z0-9%-]*$") ~= nil
end

-- A word made of hex digits alone, or holding a run of 8 of them, may be (part of) a key pasted in the wrong
-- place: such names are shown by position, never quoted.
local function shows_safely(name)
    if #name > 40 then
        return false
    end
    local run, other = 0, false
    for i = 1, #name do
        local c = sub(name, i, i)
        if is_hex(c) then
            run = run + 1
            if run >= 8 then
                return false
            end
        else
            run = 0
            if c ~= "-" then
                other = true
            end
        end
    end
    return other
end

local function field_label(name, index)
    if shows_safely(name) then
        return "'" .. name .. "'"
    end
    return "number " .. index
end

local function kind_label(kind)
    return shows_safely(kind) and kind or "line of unnamed kind"
end

local function skip_0x(v)
    if sub(v, 1, 2) == "0x" or sub(v, 1, 2) == "0X" then
        return sub(v, 3)
    end
    return v
end

-- Octet string: optional 0x, an even non-zero number of hex digits.  Returns the octets, or nil and
-- "bad" / "odd".
local function decode_hex(v)
    v = skip_0x(v)
    if v == "" or v:find("[^0-9a-fA-F]") then
        return nil, "bad"
    end
    if #v % 2 == 1 then
        return nil, "odd"
    end
    return fromhex(v)
end

-- Unsigned decimal digits up to max (at most 2^20 here), or nil.
local function parse_dec(v, max)
    if v == "" or v:find("[^0-9]") then
        return nil
    end
    local digits = v:gsub("^0+", "")
    if #digits > 10 then
        return nil
    end
    local x = tonumber(digits == "" and "0" or digits)
    if x > max then
        return nil
    end
    return x
end

-- Whether digits in base 10 or 16 fit in 64 unsigned bits (the C reader's parse_u64), and are not zero.
local function u64_nonzero(digits, base)
    if digits == "" then
        return false
    end
    local pattern = base == 16 and "[^0-9a-fA-F]" or "[^0-9]"
    if digits:find(pattern) then
        return false
    end
    local d = digits:gsub("^0+", "")
    if d == "" then
        return false
    end
    if base == 16 then
        return #d <= 16
    end
    return #d < 20 or (#d == 20 and d <= "18446744073709551615")
end

local function parse_spi(v)
    v = skip_0x(v)
    if #v == 0 or #v > 8 or v:find("[^0-9a-fA-F]") then
        return nil
    end
    return tonumber(v, 16)
end

local Line = {}
Line.__index = Line

function Line:get(name)
    return self.values[name]
end

function Line:bad_value(name, what)
    kf_fail("keyfile-bad-value", self.line, fmt("%s: field '%s' %s", self.kind, name, what))
end

function Line:need(name)
    local v = self.values[name]
    if not v then
        kf_fail("keyfile-syntax", self.line, fmt("%s: missing field '%s'", self.kind, name))
    end
    return v
end

function Line:check_fields(allowed)
    local ok = {}
    for _, name in ipairs(allowed) do
        ok[name] = true
    end
    for i, name in ipairs(self.names) do
        if not ok[name] then
            kf_fail("keyfile-syntax", self.line, fmt("%s: unknown field %s", self.kind, field_label(name, i)))
        end
    end
end

function Line:hex_value_error(name, why)
    self:bad_value(name, why == "odd" and "has an odd number of hex digits"
        or "is not a hex string (optional 0x, then hex digits)")
end

function Line:hex_field(name, v, want)
    local octets, why = decode_hex(v)
    if not octets then
        self:hex_value_error(name, why)
    end
    if #octets ~= want then
        self:bad_value(name, fmt("must be %d bytes (%d hex digits)", want, 2 * want))
    end
    return octets
end

-- An optional small decimal: nil when the field is absent.
function Line:dec_field(name, max)
    local v = self.values[name]
    if not v then
        return nil
    end
    local x = parse_dec(v, max)
    if not x then
        self:bad_value(name, fmt("must be a decimal number 0..%d", max))
    end
    return x
end

function Line:range_field(name, min, max)
    local v = self.values[name]
    if not v then
        return nil
    end
    local x = parse_dec(v, max)
    if not x or x < min then
        self:bad_value(name, fmt("must be a decimal number %d..%d", min, max))
    end
    return x
end

-- One of a list of lowercase keywords: its 1-based index, or nil when the field is absent.
function Line:keyword_field(name, words)
    local v = self.values[name]
    if not v then
        return nil
    end
    for i, w in ipairs(words) do
        if v == w then
            return i
        end
    end
    local what = "must be"
    for i, w in ipairs(words) do
        what = what .. (i == 1 and " " or i == #words and " or " or ", ") .. "'" .. w .. "'"
    end
    self:bad_value(name, what)
end

function Line:spi_field()
    local spi = parse_spi(self:need("spi"))
    if not spi then
        self:bad_value("spi", "must be 1 to 8 hex digits, optionally prefixed by 0x")
    end
    return spi
end

local function psp_key_serves(e, version)
    return e.version == version or (e.version == nil and #e.key == PSP_KEY_LEN[version])
end

local function parse_psp_master(kf, l)
    l:check_fields({ "key0", "key1" })
    if kf.psp_master then
        kf_fail("keyfile-duplicate", l.line,
            fmt("psp-master: a second master key pair (first on line %d)", kf.psp_master.line))
    end
    local k0, k1 = l:get("key0"), l:get("key1")
    if not k0 and not k1 then
        kf_fail("keyfile-syntax", l.line, "psp-master: needs field 'key0', 'key1' or both")
    end
    local m = { line = l.line }
    if k0 then
        m.key0 = l:hex_field("key0", k0, 32)
    end
    if k1 then
        m.key1 = l:hex_field("key1", k1, 32)
    end
    kf.psp_master = m
end

local function parse_psp_key(kf, l)
    l:check_fields({ "spi", "key", "version" })
    local e = { line = l.line }
    e.spi = l:spi_field()
    local kv = l:need("key")
    e.version = l:dec_field("version", 3)
    local key, why = decode_hex(kv)
    if not key then
        l:hex_value_error("key", why)
    end
    if #key ~= 16 and #key ~= 32 then
        l:bad_value("key", "must be 16 or 32 bytes (32 or 64 hex digits)")
    end
    e.key = key
    if e.version and #key ~= PSP_KEY_LEN[e.version] then
        kf_fail("keyfile-bad-value", l.line, fmt("psp-key: field 'key' is %d bytes but version %d needs %d", #key,
            e.version, PSP_KEY_LEN[e.version]))
    end
    -- The C reader walks its SPI bucket from the latest entry back: the conflict it names is the latest one.
    local same = kf.psp_keys_by_spi[e.spi] or {}
    for i = #same, 1, -1 do
        local o = same[i]
        for v = 0, 3 do
            if psp_key_serves(o, v) and psp_key_serves(e, v) then
                kf_fail("keyfile-duplicate", l.line,
                    fmt("psp-key: SPI %08x already has a key for the same version (line %d)", e.spi, o.line))
            end
        end
    end
    same[#same + 1] = e
    kf.psp_keys_by_spi[e.spi] = same
    kf.psp_keys[#kf.psp_keys + 1] = e
end

local function parse_psp_sa(kf, l)
    l:check_fields({ "spi", "version", "mode", "crypt-offset", "crypt-offset-ipv4", "crypt-offset-ipv6", "vc",
        "sample", "drop", "first-iv" })
    -- Senders only: checked so that the file means the same to every reader, but nothing here uses it.
    local spi = l:spi_field()
    l:need("version")
    l:dec_field("version", 3)
    local mode = l:need("mode")
    if mode ~= "transport" and mode ~= "tunnel" then
        l:bad_value("mode", "must be 'transport' or 'tunnel'")
    end
    for _, name in ipairs({ "crypt-offset", "crypt-offset-ipv4", "crypt-offset-ipv6" }) do
        l:dec_field(name, 63)
    end
    l:dec_field("sample", 1)
    l:dec_field("drop", 1)
    local vc = l:get("vc")
    if vc then
        l:hex_field("vc", vc, 8)
    end
    local fiv = l:get("first-iv")
    if fiv then
        local digits = skip_0x(fiv)
        if not u64_nonzero(digits, digits ~= fiv and 16 or 10) then
            l:bad_value("first-iv", "must be 1..2^64-1, in decimal or 0x-prefixed hex")
        end
    end
    local first = kf.psp_sa_line_by_spi[spi]
    if first then
        kf_fail("keyfile-duplicate", l.line, fmt("psp-sa: SPI %08x already defined on line %d", spi, first))
    end
    kf.psp_sa_line_by_spi[spi] = l.line
end

-- A suite name (lowercase, exactly), an IKEv2 name (any case) or a decimal transform ID.
local function parse_suite(v)
    for _, s in ipairs(SUITES) do
        if v == s.project or v:lower() == s.name:lower() then
            return s
        end
    end
    local id = parse_dec(v, 0xffff)
    return id and SUITE_BY_ENCR[id] or nil
end

-- Dotted quad: four decimals 0..255 without leading zeros (which some readers take as octal).
local function parse_ipv4(s)
    local parts = {}
    local i = 1
    for part = 1, 4 do
        if part > 1 then
            if sub(s, i, i) ~= "." then
                return nil
            end
            i = i + 1
        end
        local digits = s:match("^[0-9]+", i) or ""
        if #digits > 3 then
            return nil -- the C reader reads at most 4 digits and refuses more than 3
        end
        if #digits == 0 or tonumber(digits) > 255 or (#digits > 1 and sub(digits, 1, 1) == "0") then
            return nil
        end
        parts[part] = tonumber(digits)
        i = i + #digits
    end
    if i ~= #s + 1 then
        return nil
    end
    return char(parts[1], parts[2], parts[3], parts[4])
end

-- RFC 4291 §2.2: eight groups of 1-4 hex digits, one "::" standing for one or more zero groups, optionally a
-- dotted quad as the last 32 bits.  No zone, brackets or prefix length.  Follows the C reader's walk.
local function parse_ipv6(s)
    local w = {}
    local gap, has_gap = 0, false
    local i = 1
    if sub(s, 1, 1) == ":" then
        if sub(s, 2, 2) ~= ":" then
            return nil
        end
        has_gap = true
        i = 3
    end
    while i <= #s do
        local stop = s:find(":", i, true) or (#s + 1)
        local tok = sub(s, i, stop - 1)
        if tok:find(".", 1, true) then
            if stop <= #s or #w + 4 > 16 then
                return nil
            end
            local v4 = parse_ipv4(tok)
            if not v4 then
                return nil
            end
            for k = 1, 4 do
                w[#w + 1] = byte(v4, k)
            end
            break
        end
        if #tok == 0 or #tok > 4 or #w + 2 > 16 or tok:find("[^0-9a-fA-F]") then
            return nil
        end
        local v = tonumber(tok, 16)
        w[#w + 1] = v >> 8
        w[#w + 1] = v & 0xff
        i = stop
        if i > #s then
            break
        end
        i = i + 1 -- the ':'
        if sub(s, i, i) == ":" then
            if has_gap then
                return nil
            end
            has_gap = true
            gap = #w
            i = i + 1
        elseif i > #s then
            return nil -- a single trailing ':'
        end
    end
    if not has_gap then
        if #w ~= 16 then
            return nil
        end
        return char(table.unpack(w))
    end
    if #w > 14 then
        return nil -- "::" must stand for at least one group
    end
    local out = {}
    for k = 1, gap do
        out[k] = w[k]
    end
    for k = gap + 1, 16 - (#w - gap) do
        out[k] = 0
    end
    for k = gap + 1, #w do
        out[16 - (#w - k)] = w[k]
    end
    return char(table.unpack(out))
end

-- src= / dst=: family (0 any, 4, 6) and 16 octets (IPv4 in the first 4).
local function addr_field(l, name)
    local v = l:get(name)
    if not v or v == "*" then
        return 0, rep("\0", 16)
    end
    local family, raw
    if v:find(":", 1, true) then
        family, raw = 6, parse_ipv6(v)
    else
        family, raw = 4, parse_ipv4(v)
        if raw then
            raw = raw .. rep("\0", 12)
        end
    end
    if not raw then
        l:bad_value(name, "must be an IPv4 address, an IPv6 address or '*'")
    end
    return family, raw
end

local function eesp_key_fields(l, e, s)
    local kv, rv, sv = l:get("key"), l:get("root-key"), l:get("sskdf")
    if kv and rv then
        kf_fail("keyfile-syntax", l.line, "eesp-sa: fields 'key' and 'root-key' exclude each other")
    end
    if not kv and not rv then
        kf_fail("keyfile-syntax", l.line, "eesp-sa: needs field 'key' or 'root-key'")
    end
    -- The value first, so that the undefined SSKDF is named whatever else is on the line (D8).
    if sv == "aes256-cmac" then
        kf_fail("keyfile-bad-value", l.line,
            "eesp-sa: field 'sskdf': SSKDF_AES256_CMAC is not defined by draft-ietf-ipsecme-eesp-ikev2-02")
    end
    local which = l:keyword_field("sskdf", SSKDF_NAMES)
    if kv then
        if sv then
            kf_fail("keyfile-syntax", l.line, "eesp-sa: field 'sskdf' goes with 'root-key', not with 'key'")
        end
        local want = e.key_bits // 8 + s.salt_len
        local key, why = decode_hex(kv)
        if not key then
            l:hex_value_error("key", why)
        end
        if #key ~= want then
            l:bad_value("key", fmt("must be %d bytes (%d hex digits): a %d-bit key and a %d-byte salt", want, 2 * want,
                e.key_bits, s.salt_len))
        end
        e.sskdf, e.key = 0, key
        return
    end
    if not sv then
        kf_fail("keyfile-syntax", l.line, "eesp-sa: field 'root-key' needs field 'sskdf'")
    end
    e.sskdf = which
    local want = SSKDF_ROOT_LEN[which]
    local root, why = decode_hex(rv)
    if not root then
        l:hex_value_error("root-key", why)
    end
    if #root ~= want then
        l:bad_value("root-key", fmt("must be %d bytes (%d hex digits) for sskdf=%s", want, 2 * want, sv))
    end
    e.root_key = root
end

-- Suite and key size, for eesp-sa and esp-sa alike (the C reader's suite_fields).
local function suite_fields(l, e)
    local s = parse_suite(l:need("suite"))
    if not s then
        l:bad_value("suite", "is not a known AEAD suite (e.g. aes-gcm-16, ENCR_AES_GCM_16 or 20)")
    end
    e.suite = s
    local kb = l:get("key-bits")
    local bits = 128
    if kb then
        bits = parse_dec(kb, 0xffff) or 0
    end
    local sizes = s.key_bits
    if #sizes == 1 then  -- ChaCha20-Poly1305: its one key size, which key-bits may repeat
        if kb and bits ~= sizes[1] then
            l:bad_value("key-bits", fmt("must be %d (or absent) for ChaCha20-Poly1305", sizes[1]))
        end
        bits = sizes[1]
    else
        local ok = false
        for _, b in ipairs(sizes) do
            ok = ok or b == bits
        end
        if not ok then
            l:bad_value("key-bits", "must be " .. concat(sizes, ", ", 1, #sizes - 1) .. " or " .. sizes[#sizes])
        end
    end
    e.key_bits = bits
end

local function eesp_suite_fields(l, e)
    suite_fields(l, e)
    eesp_key_fields(l, e, e.suite)
end

-- The fields an eesp-sa line takes (pe_keyfile_eesp_sa_field_name): build_scripts.py writes them, test_lua_pure.py
-- checks them.
-- BEGIN EESP-SA FIELDS
local EESP_SA_FIELDS = {
    "spi", "suite", "key-bits", "key", "root-key", "sskdf", "mode", "format", "seq", "aad", "anti-replay",
    "replay-window", "max-sub-sa-id", "max-crypt-offset", "crypt-offset", "align", "strict", "ip-protocol",
    "udp-encap", "src", "dst", "sub-sas", "max-live-sub-sas",
}
-- END EESP-SA FIELDS
M.EESP_SA_FIELDS = EESP_SA_FIELDS

local function parse_eesp_sa(kf, l)
    l:check_fields(EESP_SA_FIELDS)
    local e = { line = l.line }
    e.spi = l:spi_field()
    eesp_suite_fields(l, e)
    local s = e.suite
    e.mode = ({ "transport", "tunnel" })[l:keyword_field("mode", { "transport", "tunnel" }) or 2]
    e.format = ({ "auto", "full", "optimized" })[l:keyword_field("format", { "auto", "full", "optimized" }) or 1]
    e.aad = ({ "draft", "linux-xfrm" })[l:keyword_field("aad", { "draft", "linux-xfrm" }) or 1]
    local seq = l:dec_field("seq", 1)
    e.seq_present = seq ~= 0
    if s.iv_len == 0 and not e.seq_present then
        l:bad_value("seq", "must be 1 with an implicit-IV suite: its nonce is the Sequence Number")
    end
    if s.integrity_only and e.aad == "linux-xfrm" then
        kf_fail("keyfile-bad-value", l.line,
            "eesp-sa: field 'aad': linux-xfrm is not defined for aes-gmac (the Linux prototype does AES-GCM only)")
    end
    e.anti_replay = e.seq_present
    local ar = l:range_field("anti-replay", 0, 1)
    if ar then
        if ar == 1 and not e.seq_present then
            l:bad_value("anti-replay", "needs seq=1: without a Sequence Number there is no anti-replay")
        end
        e.anti_replay = ar == 1
    end
    e.replay_window = l:range_field("replay-window", REPLAY_MIN_WINDOW, REPLAY_MAX_WINDOW) or REPLAY_DEFAULT_WINDOW
    e.max_sub_sa_id = l:dec_field("max-sub-sa-id", 0xffff) or -1
    e.max_crypt_offset = l:dec_field("max-crypt-offset", 0xff) or -1
    e.crypt_offset = l:dec_field("crypt-offset", 0x3f) or -1
    e.align = l:dec_field("align", 1) or 1
    e.strict = (l:dec_field("strict", 1) or 0) == 1
    e.udp_encap = l:dec_field("udp-encap", 1) or 0
    e.ip_protocol = l:range_field("ip-protocol", 0, 0xff) or 49
    if e.ip_protocol == 17 then
        l:bad_value("ip-protocol", "is UDP's number (17), which carries EESP's UDP encapsulation")
    end
    e.src_family, e.src = addr_field(l, "src")
    e.dst_family, e.dst = addr_field(l, "dst")
    if e.src_family ~= 0 and e.dst_family ~= 0 and e.src_family ~= e.dst_family then
        l:bad_value("dst", "is not of the same address family as 'src'")
    end
    e.sub_sas = l:range_field("sub-sas", 1, 65536) or 1
    if e.sub_sas > 1 and e.sskdf == 0 then
        l:bad_value("sub-sas", "above 1 needs Sub SAs: 'root-key' and 'sskdf' instead of 'key'")
    end
    if e.max_sub_sa_id ~= -1 and e.sub_sas > e.max_sub_sa_id + 1 then
        l:bad_value("sub-sas", "exceeds max-sub-sa-id + 1")
    end
    -- Read for the grammar's sake: the pure path keeps no derived key contexts to bound.
    e.max_live_sub_sas = l:range_field("max-live-sub-sas", 1, 65536) or 1024
    local same = kf.eesp_by_spi[e.spi] or {}
    for i = #same, 1, -1 do
        local o = same[i]
        if o.dst_family == e.dst_family and o.dst == e.dst then
            kf_fail("keyfile-duplicate", l.line, fmt("eesp-sa: SPI %08x already defined for %s on line %d", e.spi,
                e.dst_family ~= 0 and "this destination" or "any destination", o.line))
        end
    end
    same[#same + 1] = e
    kf.eesp_by_spi[e.spi] = same
    kf.eesp_sas[#kf.eesp_sas + 1] = e
end

-- esp-sa (RFC 4303): checked as the C reader does; the dissectors do not decrypt ESP (Wireshark's own ESP dissector
-- does, with an esp_sa table exported from the file), so a valid line is kept and otherwise unused.
-- ESP's AES-CBC + HMAC suites by name (the C reader's esp_suite_fields): key-bits 128 or 256.
local function esp_cbc_suite_fields(l, e)
    local v = l:need("suite")
    for _, s in ipairs(ESP_CBC_SUITES) do
        if v == s.project or v:lower() == s.name:lower() then
            local kb = l:get("key-bits")
            local bits = kb and (parse_dec(kb, 0xffff) or 0) or 128
            if bits ~= s.key_bits[1] and bits ~= s.key_bits[#s.key_bits] then
                l:bad_value("key-bits", "must be 128 or 256 for AES-CBC")
            end
            e.suite, e.key_bits = s, bits
            return true
        end
    end
    return false
end

local function parse_esp_sa(kf, l)
    l:check_fields({ "spi", "suite", "key-bits", "key", "mode", "esn", "anti-replay", "replay-window", "first-seq",
        "udp-encap", "udp-sport", "udp-dport", "src", "dst", "tfc-pad" })
    local e = { line = l.line }
    e.spi = l:spi_field()
    local cbc = esp_cbc_suite_fields(l, e)
    if not cbc then
        suite_fields(l, e)
    end
    local s = e.suite
    local want = e.key_bits // 8 + s.salt_len + (s.integ_key_len or 0)
    local key, why = decode_hex(l:need("key"))
    if not key then
        l:hex_value_error("key", why)
    end
    if #key ~= want and cbc then
        l:bad_value("key", fmt("must be %d bytes (%d hex digits): a %d-bit AES key and a %d-byte integrity key", want,
            2 * want, e.key_bits, s.integ_key_len))
    end
    if #key ~= want then
        l:bad_value("key", fmt("must be %d bytes (%d hex digits): a %d-bit key and a %d-byte salt", want, 2 * want,
            e.key_bits, s.salt_len))
    end
    e.key = key
    e.mode = ({ "transport", "tunnel" })[l:keyword_field("mode", { "transport", "tunnel" }) or 2]
    e.esn = (l:dec_field("esn", 1) or 0) == 1
    e.anti_replay = (l:dec_field("anti-replay", 1) or 1) == 1
    e.udp_encap = l:dec_field("udp-encap", 1) or 0
    e.replay_window = l:range_field("replay-window", REPLAY_MIN_WINDOW, REPLAY_MAX_WINDOW) or REPLAY_DEFAULT_WINDOW
    local fs = l:get("first-seq")
    if fs then
        local digits = skip_0x(fs)
        local base = digits ~= fs and 16 or 10
        if not u64_nonzero(digits, base) then
            l:bad_value("first-seq", "must be 1..2^64-1, in decimal or 0x-prefixed hex")
        end
        local d = digits:gsub("^0+", "")
        local above32 = base == 16 and #d > 8 or base == 10 and (#d > 10 or (#d == 10 and d > "4294967295"))
        if above32 and not e.esn then
            l:bad_value("first-seq", "above 2^32-1 needs esn=1")
        end
    end
    local sport = l:range_field("udp-sport", 1, 0xffff)
    local dport = l:range_field("udp-dport", 1, 0xffff)
    if (sport or dport) and e.udp_encap ~= 1 then
        l:bad_value(sport and "udp-sport" or "udp-dport", "needs udp-encap=1")
    end
    e.src_family, e.src = addr_field(l, "src")
    e.dst_family, e.dst = addr_field(l, "dst")
    if e.src_family ~= 0 and e.dst_family ~= 0 and e.src_family ~= e.dst_family then
        l:bad_value("dst", "is not of the same address family as 'src'")
    end
    -- RFC 4303 §2.7: TFC padding only where the payload always says its own length
    e.tfc_pad = l:range_field("tfc-pad", 0, 1024) or 0
    if e.tfc_pad ~= 0 and e.mode ~= "tunnel" then
        l:bad_value("tfc-pad", "needs mode=tunnel")
    end
    local same = kf.esp_by_spi[e.spi] or {}
    for i = #same, 1, -1 do
        local o = same[i]
        if o.dst_family == e.dst_family and o.dst == e.dst then
            kf_fail("keyfile-duplicate", l.line, fmt("esp-sa: SPI %08x already defined for %s on line %d", e.spi,
                e.dst_family ~= 0 and "this destination" or "any destination", o.line))
        end
    end
    same[#same + 1] = e
    kf.esp_by_spi[e.spi] = same
    kf.esp_sas[#kf.esp_sas + 1] = e
end

local KNOWN_KINDS = {
    ["psp-master"] = parse_psp_master,
    ["psp-key"] = parse_psp_key,
    ["psp-sa"] = parse_psp_sa,
    ["eesp-sa"] = parse_eesp_sa,
    ["esp-sa"] = parse_esp_sa,
}

local function parse_line(kf, s, lineno)
    local hash = s:find("#", 1, true)
    if hash then
        s = sub(s, 1, hash - 1)
    end
    local bad = s:find("[^\t\32-\126]")
    if bad then
        kf_fail("keyfile-syntax", lineno,
            fmt("control character or non-ASCII byte outside a comment (byte 0x%02x)", byte(s, bad)))
    end
    local tok = {}
    for t in s:gmatch("[^ \t]+") do
        if #tok == 1 + MAX_PAIRS then
            kf_fail("keyfile-syntax", lineno, fmt("more than %d name=value pairs on one line", MAX_PAIRS))
        end
        tok[#tok + 1] = t
    end
    if #tok == 0 then
        return
    end
    if not is_name(tok[1]) then
        kf_fail("keyfile-syntax", lineno,
            "the kind must be a lowercase letter followed by lowercase letters, digits or '-'")
    end
    local l = setmetatable({ line = lineno, kind = tok[1], names = {}, values = {} }, Line)
    -- Also catches a key pasted alone on a line, which would otherwise pass as an unknown kind.
    if #tok == 1 then
        kf_fail("keyfile-syntax", lineno, fmt("%s: a line needs at least one name=value field", kind_label(l.kind)))
    end
    for i = 2, #tok do
        local t, index = tok[i], i - 1
        local eq = t:find("=", 1, true)
        if not eq then
            kf_fail("keyfile-syntax", lineno, fmt("%s: token number %d is not name=value", kind_label(l.kind), index))
        end
        local name, value = sub(t, 1, eq - 1), sub(t, eq + 1)
        if not is_name(name) then
            kf_fail("keyfile-syntax", lineno, fmt(
                "%s: field name number %d must be a lowercase letter followed by lowercase letters, digits or '-'",
                kind_label(l.kind), index))
        end
        if value == "" then
            kf_fail("keyfile-syntax", lineno,
                fmt("%s: field %s has an empty value", kind_label(l.kind), field_label(name, index)))
        end
        if l.values[name] then
            kf_fail("keyfile-syntax", lineno,
                fmt("%s: field %s given twice", kind_label(l.kind), field_label(name, index)))
        end
        l.names[#l.names + 1] = name
        l.values[name] = value
    end
    kf.lines[#kf.lines + 1] = l
    local parse = KNOWN_KINDS[l.kind]
    if parse then
        parse(kf, l)
    end
end

local function parse_text(text)
    local kf = { lines = {}, psp_keys = {}, psp_keys_by_spi = {}, psp_sa_line_by_spi = {}, eesp_sas = {},
        eesp_by_spi = {}, esp_sas = {}, esp_by_spi = {} }
    local nul = text:find("\0", 1, true)
    if nul then
        local _, newlines = sub(text, 1, nul - 1):gsub("\n", "")
        kf_fail("keyfile-syntax", newlines + 1, "NUL byte: not a text file")
    end
    local pos = 1
    -- Editors on some systems start UTF-8 files with a byte-order mark.
    if sub(text, 1, 3) == "\239\187\191" then
        pos = 4
    end
    local lineno = 0
    while pos <= #text do
        local nl = text:find("\n", pos, true)
        local line = sub(text, pos, (nl or (#text + 1)) - 1)
        if sub(line, -1) == "\r" then
            line = sub(line, 1, -2)
        end
        lineno = lineno + 1
        parse_line(kf, line, lineno)
        pos = (nl or #text) + 1
    end
    return kf
end

-- Parse key-file text: the parsed file, or nil, status name, line (0: none) and message.
function M.parse_keyfile(text)
    local ok, res = pcall(parse_text, text)
    if ok then
        return res
    end
    if getmetatable(res) == KeyfileError then
        return nil, res.status, res.line, res.message
    end
    error(res, 0)
end

-- google/psp reference configs (psp.md §10.2, core pe_psp_refcfg_parse) -------------------------------------------

local function cfg_tokens(text)
    local toks, line = {}, 1
    local pos = 1
    while true do
        local s, e = text:find("[^ \t\n\v\f\r]+", pos)
        if not s then
            break
        end
        local _, nl = sub(text, pos, s - 1):gsub("\n", "")
        line = line + nl
        toks[#toks + 1] = { text = sub(text, s, e), line = line }
        pos = e + 1
    end
    return toks
end

-- The keys and, in an encrypt config, the SA: stricter than the tools' fscanf so that no input means something
-- different here.  Returns the config, or nil, status, line, message.
function M.parse_refcfg(text)
    local toks = cfg_tokens(text)
    local i, last_line = 0, 0
    local function next_tok()
        i = i + 1
        local t = toks[i]
        if t then
            last_line = t.line
            return t.text
        end
    end
    local cfg = {}
    for which = 0, 1 do
        local octets = {}
        for n = 1, 32 do
            local t = next_tok()
            if not t then
                return nil, "keyfile-syntax", last_line,
                    fmt("master key %d: expected 32 hex octets, the file ends after %d", which, n - 1)
            end
            if #t > 2 or t:find("[^0-9a-fA-F]") then
                return nil, "keyfile-bad-value", last_line,
                    fmt("master key %d, octet %d: expected 1 or 2 hex digits", which, n)
            end
            octets[n] = tonumber(t, 16)
        end
        cfg["key" .. which] = char(table.unpack(octets))
    end
    local t = next_tok()
    if not t then
        return cfg -- a decrypt config
    end
    if #t > 8 or t:find("[^0-9a-fA-F]") then
        return nil, "keyfile-bad-value", last_line, "SPI: expected 1 to 8 hex digits without 0x"
    end
    cfg.spi = tonumber(t, 16)
    local function choice(what, a, b)
        local v = next_tok()
        if not v then
            return nil, "keyfile-syntax", last_line, what .. ": missing, the file ends early"
        end
        if v == a then
            return 0
        elseif v == b then
            return 1
        end
        return nil, "keyfile-bad-value", last_line, fmt("%s: must be '%s' or '%s'", what, a, b)
    end
    local function offset(what)
        local v = next_tok()
        if not v then
            return nil, "keyfile-syntax", last_line, what .. ": missing, the file ends early"
        end
        local x = 0
        for k = 1, #v do
            local d = byte(v, k) - 48
            if d < 0 or d > 9 then
                return nil, "keyfile-bad-value", last_line, what .. ": not a decimal number"
            end
            x = x * 10 + d
            if x > 63 then
                return nil, "keyfile-bad-value", last_line, what .. ": must be 0..63 words"
            end
        end
        return x
    end
    local steps = {
        { "tunnel", choice, "mode", "transport", "tunnel" },
        { "version", choice, "algorithm", "aes-gcm-128", "aes-gcm-256" },
        { "crypt_offset", offset, "transport crypt offset" },
        { "crypt_offset_ipv4", offset, "IPv4 tunnel crypt offset" },
        { "crypt_offset_ipv6", offset, "IPv6 tunnel crypt offset" },
        { "vc", choice, "VC", "no-vc", "vc" },
    }
    for _, step in ipairs(steps) do
        local v, st, line, msg = step[2](table.unpack(step, 3))
        if v == nil then
            return nil, st, line, msg
        end
        cfg[step[1]] = v
    end
    cfg.has_sa = true
    return cfg
end

-- A file with no '=' whose first token is one or two hex digits can only be a reference config: a key-file
-- line always holds name=value fields.  The core's rule (pe_psp_refcfg_detect), which the plugin and pelua ask:
-- the same whitespace (C's isspace in the C locale) and hex digits; test_lua_pure.py holds them together.
function M.looks_like_refcfg(text)
    local first = text:match("^[ \t\n\v\f\r]*([^ \t\n\v\f\r]+)")
    return first ~= nil and not text:find("=", 1, true) and #first <= 2 and not first:find("[^0-9a-fA-F]")
end

-- pecrypto, the receivers: PSP and EESP open, and keys from a key file.
-- One chunk with the modules before it in src/pecrypto.lua's list, whose locals it uses.

-- Receiving ----------------------------------------------------------------------------------------------------

local Keys = {}
Keys.__index = Keys

-- Runs an open function; a Lua error (a backend failure, or a bug) becomes the core's crypto-backend status.
local function guarded(f, ...)
    local ok, st, inner, info = pcall(f, ...)
    if ok then
        return st, inner, info
    end
    local i = { status = "crypto-backend", category = M.status_category("crypto-backend"), icv_valid = false,
        sa_found = false, payload_offset = 0,
        message = M.status_message("crypto-backend") .. " (" .. tostring(st) .. ")" }
    return "crypto-backend", nil, i
end

local function finish(info, status)
    info.status, info.category = status, M.status_category(status)
    info.message = M.status_message(status)
    info.icv_valid = info.icv_valid or false
    return status, nil, info
end

-- The opener for (spi, version): a psp-key line, else a cached or freshly derived key (the master key the SPI's
-- MSB selects), and whether it is fresh.  nil when neither exists.
function Keys:psp_opener(spi, version)
    local id = spi << 4 | version
    local k = self.psp_user[id] or self.psp_cache[id]
    if k then
        return k, false
    end
    local block = self.psp_master_block[spi >> 31]
    if not block then
        return nil
    end
    return self.backend.aead("aes-gcm", M.psp_derive_key(block, spi, version), PSP_ICV_LEN), true
end

-- As the core does (keytable.h): a derived key is kept once a packet verified under it, so that packets with
-- forged SPIs build no state; the cache is bounded, since SPIs come from the wire.
function Keys:psp_keep(spi, version, k)
    if self.psp_cache_count >= PSP_CACHE_LIMIT then
        self.psp_cache, self.psp_cache_count = {}, 0
    end
    self.psp_cache[spi << 4 | version] = k
    self.psp_cache_count = self.psp_cache_count + 1
end

-- core/src/proto/psp.c pe_psp_open, with pe_psp_hdr_parse's checks, in the same order (psp.md §7).
local function psp_open(self, p)
    local len = #p
    local info = { next_header = 0, hdr_ext_len = 0, crypt_offset = 0, version = 0, virt = false, spi = 0, iv = 0,
        iv_hex = "0000000000000000", tunnel = false, icv_valid = false }
    if len < PSP_HDR_LEN then
        info.version_name = PSP_VERSION_NAME[0]
        return finish(info, "psp-truncated")
    end
    local nh, hel, b2, b3 = byte(p, 1, 4)
    local spi, iv = unpack(">I4i8", p, 5)
    local version = (b3 & 0x3c) >> 2
    info.next_header, info.hdr_ext_len, info.crypt_offset = nh, hel, b2 & 0x3f
    info.version, info.virt, info.spi, info.iv, info.iv_hex = version, b3 & 0x02 ~= 0, spi, iv, fmt("%016x", iv)
    info.version_name = PSP_VERSION_NAME[version] or "reserved"
    info.tunnel = nh == 4 or nh == 41
    local hlen = (hel + 1) * 8
    local hdr_st
    if b3 & 0x01 == 0 then
        hdr_st = "psp-always-one-bit-clear"
    elseif not PSP_KEY_LEN[version] then -- not a version of the table
        hdr_st = "psp-unsupported-version"
    elseif hel < 1 then
        hdr_st = "psp-bad-hdr-ext-len"
    elseif info.virt and hel < 2 then
        hdr_st = "psp-vc-without-room"
    elseif hlen > len then
        hdr_st = "psp-bad-hdr-ext-len"
    end
    if len < PSP_HDR_LEN + PSP_ICV_LEN then
        return finish(info, "psp-truncated")
    end
    if len > PSP_MAX_LEN then
        return finish(info, "psp-too-long")
    end
    if hdr_st then
        return finish(info, hdr_st) -- every version is enabled on this receiver, as in pelua
    end
    if hlen + PSP_ICV_LEN > len then
        return finish(info, "psp-bad-hdr-ext-len")
    end
    local ext_len = hlen - PSP_HDR_LEN
    local p_len = len - PSP_HDR_LEN - PSP_ICV_LEN
    local co = info.crypt_offset * 4
    if co > p_len then
        return finish(info, "psp-crypt-offset-past-payload")
    end
    local open, fresh = self:psp_opener(spi, version)
    if not open then
        return finish(info, "no-key")
    end
    local nonce = sub(p, 5, 16) -- SPI || IV as on the wire
    local tag = sub(p, len - PSP_ICV_LEN + 1)
    local body -- P: extension area and payload, decrypted
    if PSP_GMAC[version] then
        -- GMAC (§4.2): everything before the ICV is authenticated and nothing is encrypted.
        if not open(nonce, sub(p, 1, len - PSP_ICV_LEN), "", tag) then
            return finish(info, "authentication-failed")
        end
        body = sub(p, PSP_HDR_LEN + 1, len - PSP_ICV_LEN)
    else
        local pt = open(nonce, sub(p, 1, PSP_HDR_LEN + co), sub(p, PSP_HDR_LEN + co + 1, len - PSP_ICV_LEN), tag)
        if not pt then
            return finish(info, "authentication-failed")
        end
        body = sub(p, PSP_HDR_LEN + 1, PSP_HDR_LEN + co) .. pt
    end
    info.icv_valid = true
    if fresh then
        self:psp_keep(spi, version, open)
    end
    -- The extension area as sent, with the VC decrypted when the crypt offset left it encrypted.
    info.ext = sub(body, 1, ext_len)
    finish(info, "ok")
    return "ok", sub(body, ext_len + 1), info
end

function Keys:psp_open(p)
    return guarded(psp_open, self, p)
end

-- EESP -------------------------------------------------------------------------------------------------------------

local EESP_BASE_LEN, EESP_SEQ_LEN, EESP_PIH_LEN = 8, 8, 4
local NH_NO_NEXT = 59

-- pe_ip_is_whole_packet (core/src/proto/ip.c): one IPv4/IPv6 packet of that version, its length fields exact.
local function whole_ip_packet(s, version)
    local len = #s
    if len < 1 or byte(s, 1) >> 4 ~= version then
        return false
    end
    if version == 4 then
        local ihl_len = (byte(s, 1) & 0x0f) * 4
        return len >= 20 and ihl_len >= 20 and unpack(">I2", s, 3) == len and len >= ihl_len
    end
    return len >= 40 and 40 + unpack(">I2", s, 5) == len
end

-- §16 step 12: the optimized format recovers Next Header and Pad Length from the inner packet.  Returns the
-- status (nil: fine), Next Header (as soon as the version nibble names one, as in the core) and inner length.
local function recover_pih(region)
    local len = #region
    local v = len >= 1 and byte(region, 1) >> 4
    local nh, n
    if len >= 20 and v == 4 then
        nh, n = 4, unpack(">I2", region, 3)
        local ihl = byte(region, 1) & 0x0f
        if ihl < 5 or n < ihl * 4 then
            return "eesp-bad-inner-packet", nh -- no header could end where the Total Length says
        end
    elseif len >= 40 and v == 6 then
        nh, n = 41, 40 + unpack(">I2", region, 5)
    else
        return "eesp-bad-inner-packet", 0
    end
    if n > len or len - n > 255 then
        return "eesp-bad-pad-length", nh
    end
    return nil, nh, n
end

-- Options within Opt Len (§16 step 4): framing first, then D3 and D13; fills h.
local function parse_options(e, h)
    local base, opt_len = EESP_BASE_LEN, h.opt_len
    local off = 0
    while off < opt_len do
        if byte(e, base + off + 1) == 0 then
            off = off + 1
        else
            if off + 2 > opt_len or off + 2 + byte(e, base + off + 2) > opt_len then
                return "eesp-options-overrun"
            end
            off = off + 2 + byte(e, base + off + 2)
        end
    end
    off = 0
    while off < opt_len do
        local t = byte(e, base + off + 1)
        if t == 0 then
            off = off + 1
        else
            local dlen = byte(e, base + off + 2)
            if t == 2 then
                if dlen ~= 2 or h.has_crypt_offset then
                    return "eesp-bad-crypt-offset-option"
                end
                local v = unpack(">I2", e, base + off + 3)
                h.has_crypt_offset = true
                h.payload_offset = (v >> 10) & 0x3f
                h.crypt_offset = (v >> 4) & 0x3f
            elseif t ~= 1 then
                h.n_unknown = h.n_unknown + 1
            end
            off = off + 2 + dlen
        end
    end
end

-- §16 step 3: by SPI and destination; an SA bound to the packet's destination beats one for any.
function Keys:find_sa(spi, family, dst)
    local any
    for _, sa in ipairs(self.eesp_by_spi[spi] or {}) do
        if sa.dst_family == 0 then
            any = sa
        elseif dst and sa.dst_family == family and sub(sa.dst, 1, family == 4 and 4 or 16) == dst then
            return sa
        end
    end
    return any
end

-- The Sub SA's opener and salt, its KEYMAT derived from the root key on first use (§12), and whether it is
-- fresh: as in the core, a Sub SA is kept once a packet verified under it (forged Session IDs build no state).
function Keys:sub_sa(sa, sid)
    local sub_sa = sa.subs[sid]
    if sub_sa then
        sa.tick = sa.tick + 1
        sub_sa.used = sa.tick
        return sub_sa, false
    end
    local s = sa.suite
    local key_len = sa.key_bits // 8
    local keymat
    if sa.sskdf == 0 then
        keymat = sa.key
    else
        keymat = M.derive_sub_sa_key(sa.sskdf, sa.root_key, sid, key_len + s.salt_len)
    end
    return { open = self.backend.aead(s.alg, sub(keymat, 1, key_len), s.icv_len), salt = sub(keymat, key_len + 1) },
        true
end

-- Keep a Sub SA that verified a packet.  At most max-live-sub-sas are kept per SA, as in the core: the least
-- recently used one goes (its key is derived again if its Session ID comes back), so a capture with many
-- Session IDs cannot make the dissector hold a key for each.
local function keep_sub_sa(sa, sid, sub_sa)
    if sa.n_subs >= sa.max_live then
        local lru, oldest
        for id, x in pairs(sa.subs) do
            if not oldest or x.used < oldest then
                lru, oldest = id, x.used
            end
        end
        sa.subs[lru] = nil
        sa.n_subs = sa.n_subs - 1
    end
    sa.tick = sa.tick + 1
    sub_sa.used = sa.tick
    sa.subs[sid] = sub_sa
    sa.n_subs = sa.n_subs + 1
end

-- core/src/proto/eesp.c open_eesp (§16 steps 2-13) with PE_EESP_OPEN_NO_REPLAY: a dissector revisits packets.
local function eesp_open(self, e, family, daddr)
    local elen = #e
    local info = { spi = 0, session_id = 0, opt_len = 0, seq = 0, seq_hex = "0000000000000000", seq_present = false,
        iv_len = 0, icv_len = 0, payload_offset = 0, full_format = false, format = "", next_header = 0,
        pad_len = 0, sa_found = false, icv_valid = false }
    -- Steps 2-4: Base Header, SA, options.
    if elen < EESP_BASE_LEN then
        return finish(info, "eesp-truncated")
    end
    local b0, opt_len, sid, spi = unpack(">BBI2I4", e)
    info.spi, info.session_id, info.opt_len = spi, sid, opt_len
    if b0 & 0x80 == 0 then
        return finish(info, "eesp-compat-bit-clear")
    end
    if (b0 & 0x78) >> 3 ~= 0 then
        return finish(info, "eesp-unsupported-version")
    end
    if b0 & 0x07 ~= 0 then
        return finish(info, "eesp-reserved-bits-set")
    end
    local sa = self:find_sa(spi, family, daddr)
    if not sa then
        return finish(info, "eesp-no-sa")
    end
    local s = sa.suite
    info.sa_found, info.suite, info.key_bits, info.mode = true, s.name, sa.key_bits, sa.mode
    info.seq_present, info.icv_len = sa.seq_present, s.icv_len
    if EESP_BASE_LEN + opt_len > elen then
        return finish(info, "eesp-truncated") -- the Opt Len octets must be present
    end
    local h = { opt_len = opt_len, n_unknown = 0, has_crypt_offset = false, payload_offset = 0, crypt_offset = 0 }
    local st = parse_options(e, h)
    if st then
        return finish(info, st)
    end
    if sa.strict and h.n_unknown > 0 then
        return finish(info, "eesp-unknown-option")
    end

    local seq_len = sa.seq_present and EESP_SEQ_LEN or 0
    local iv_off = EESP_BASE_LEN + opt_len + seq_len
    local payload_off = iv_off + s.iv_len
    local full
    if sa.format ~= "auto" then
        full = sa.format == "full"
    else
        full = h.has_crypt_offset or sa.mode == "transport"
    end
    local pih_len = full and EESP_PIH_LEN or 0
    info.full_format, info.format = full, full and "full" or "optimized"
    info.iv_len, info.payload_offset = s.iv_len, payload_off

    -- Step 5: a Crypt Offset option.
    local enc_off = payload_off
    local policy_drop = false
    if h.has_crypt_offset then
        policy_drop = sa.max_crypt_offset == -1 or h.crypt_offset > sa.max_crypt_offset
        if h.payload_offset * 4 ~= payload_off then
            return finish(info, "eesp-bad-payload-offset")
        end
        enc_off = payload_off + h.crypt_offset * 4
        if enc_off + s.icv_len > elen then
            return finish(info, "eesp-crypt-offset-past-payload")
        end
    end
    -- Steps 6-7: Sub SA (D6, D9), length.
    if (sa.sskdf == 0 and sid ~= 0) or (sa.sskdf ~= 0 and sa.max_sub_sa_id ~= -1 and sid > sa.max_sub_sa_id) then
        return finish(info, "eesp-sub-sa-out-of-range")
    end
    if payload_off + pih_len + s.icv_len > elen then
        return finish(info, "eesp-truncated")
    end
    local data_end = elen - s.icv_len

    -- Step 8: the sequence number (no replay window: see above).
    local sub_sa, fresh = self:sub_sa(sa, sid)
    local seq_raw = rep("\0", 8)
    if sa.seq_present then
        seq_raw = sub(e, EESP_BASE_LEN + opt_len + 1, EESP_BASE_LEN + opt_len + 8)
        local seq = unpack(">i8", seq_raw)
        info.seq, info.seq_hex = seq, fmt("%016x", seq)
        if seq == 0 then
            return finish(info, "eesp-sequence-zero") -- D10
        end
    end

    -- Step 9: open.  Nonce: salt || explicit IV, or salt || Sequence Number for the implicit-IV suites (RFC 8750).
    local nonce = sub_sa.salt .. (s.iv_len > 0 and sub(e, iv_off + 1, iv_off + 8) or seq_raw)
    local aad_end = s.integrity_only and data_end or enc_off
    local aad
    if sa.aad == "linux-xfrm" and s.iv_len > 0 then
        aad = sub(e, 1, iv_off) .. sub(e, iv_off + s.iv_len + 1, aad_end) -- D1: the explicit IV left out
    else
        aad = sub(e, 1, aad_end)
    end
    local pt = sub_sa.open(nonce, aad, sub(e, aad_end + 1, data_end), sub(e, data_end + 1))
    info.icv_valid = pt ~= nil
    if not pt or policy_drop then
        -- A disallowed Crypt Offset drops the packet either way; icv_valid tells policy whether to delete the SA.
        return finish(info, policy_drop and "eesp-crypt-offset-not-allowed" or "authentication-failed")
    end
    if fresh then
        keep_sub_sa(sa, sid, sub_sa)
    end
    local region = sub(e, payload_off + 1, aad_end) .. pt -- PIH (full format), inner part, padding

    -- Steps 11-12: Payload Info.
    local inner_len
    if full then
        info.next_header, info.pad_len = byte(region, 3), byte(region, 4)
        if EESP_PIH_LEN + info.pad_len > #region then
            return finish(info, "eesp-bad-pad-length")
        end
        inner_len = #region - EESP_PIH_LEN - info.pad_len
    else
        local bad, nh, n = recover_pih(region)
        info.next_header = nh
        if bad then
            return finish(info, bad)
        end
        inner_len = n
        info.pad_len = #region - n
    end
    -- D16: the exposed part never reaches into the padding.
    if h.has_crypt_offset and h.crypt_offset * 4 > pih_len + inner_len then
        return finish(info, "eesp-crypt-offset-past-payload")
    end
    if full and info.next_header == NH_NO_NEXT then
        return finish(info, "eesp-dummy-packet") -- a well-formed dummy: authenticated, then discarded
    end
    local inner = sub(region, pih_len + 1, pih_len + inner_len)
    -- Step 13, the part that needs no outer header: a tunnel carries one whole IP packet.
    if sa.mode == "tunnel" then
        if info.next_header ~= 4 and info.next_header ~= 41 then
            return finish(info, "eesp-bad-inner-packet")
        end
        if not whole_ip_packet(inner, info.next_header == 4 and 4 or 6) then
            return finish(info, "eesp-bad-inner-packet")
        end
    end
    finish(info, "ok")
    return "ok", inner, info
end

function Keys:eesp_open(e, ip_version, dst)
    if ip_version ~= 4 and ip_version ~= 6 then
        error("IP version must be 4 or 6", 2)
    end
    if dst ~= nil and #dst ~= (ip_version == 4 and 4 or 16) then
        error("the destination is 4 (IPv4) or 16 (IPv6) octets, network order", 2)
    end
    return guarded(eesp_open, self, e, ip_version, dst)
end

-- Drops every key reference (Lua strings cannot be wiped; the collector reclaims them).
function Keys:close()
    self.psp_user, self.psp_cache, self.psp_master_block, self.eesp_by_spi = {}, {}, {}, {}
    self.psp_cache_count = 0
end

function Keys:summary()
    local n_eesp = 0
    for _, list in pairs(self.eesp_by_spi) do
        n_eesp = n_eesp + #list
    end
    return { psp_master0 = self.psp_master_block[0] ~= nil, psp_master1 = self.psp_master_block[1] ~= nil,
        psp_keys = self.n_psp_keys, eesp_sas = n_eesp, reference_config = self.reference_config or false }
end

-- Receivers for a parsed key file (the equivalent of pe_keyfile_psp_rx_new and one pe_eesp_rx_add_sa per line).
local function build_keys(backend, master0, master1, psp_keys, eesp_sas)
    local k = setmetatable({ backend = backend, psp_user = {}, psp_cache = {}, psp_cache_count = 0,
        psp_master_block = {}, eesp_by_spi = {}, n_psp_keys = #psp_keys }, Keys)
    if master0 then
        k.psp_master_block[0] = backend.block(master0)
    end
    if master1 then
        k.psp_master_block[1] = backend.block(master1)
    end
    for _, e in ipairs(psp_keys) do
        -- Unversioned: the key serves the GCM and the GMAC version of its length.
        local versions = e.version and { e.version } or (#e.key == 16 and { 0, 2 } or { 1, 3 })
        local open = backend.aead("aes-gcm", e.key, PSP_ICV_LEN)
        for _, v in ipairs(versions) do
            k.psp_user[e.spi << 4 | v] = open
        end
    end
    for _, e in ipairs(eesp_sas) do
        local list = k.eesp_by_spi[e.spi] or {}
        list[#list + 1] = { suite = e.suite, key_bits = e.key_bits, sskdf = e.sskdf, key = e.key,
            root_key = e.root_key, mode = e.mode, format = e.format, seq_present = e.seq_present, aad = e.aad,
            max_sub_sa_id = e.max_sub_sa_id, max_crypt_offset = e.max_crypt_offset, strict = e.strict,
            dst_family = e.dst_family, dst = e.dst, subs = {}, n_subs = 0, max_live = e.max_live_sub_sas,
            tick = 0 }
        k.eesp_by_spi[e.spi] = list
    end
    return k
end

-- Keys from key-file (or reference config) text.  Returns keys, or nil, line (0: none), message and status name.
function M.load_keytext(text, backend)
    if M.looks_like_refcfg(text) then
        local cfg, st, line, msg = M.parse_refcfg(text)
        if not cfg then
            return nil, line, "google/psp reference config: " .. msg, st
        end
        local k = build_keys(backend, cfg.key0, cfg.key1, {}, {})
        k.reference_config = true
        return k
    end
    local kf, st, line, msg = M.parse_keyfile(text)
    if not kf then
        return nil, line, msg, st
    end
    local m = kf.psp_master or {}
    return build_keys(backend, m.key0, m.key1, kf.psp_keys, kf.eesp_sas)
end

-- Above any real key file: a wrong path (a capture, /dev/zero) is refused instead of read into memory.
local KEYFILE_MAX_SIZE = 16 * 1024 * 1024

-- pelua.load_keyfile's contract: keys, or nil, "path, line N: message" / "path: message" and the status name
-- (the core's pe_keyfile_load statuses for the file itself).
function M.load_keyfile(path, backend)
    local f, err = io.open(path, "rb")
    if not f then
        -- io.open says "path: reason"; the core says "cannot open key file: reason".
        local reason = tostring(err)
        if sub(reason, 1, #path + 2) == path .. ": " then
            reason = sub(reason, #path + 3)
        end
        return nil, fmt("%s: cannot open key file: %s", path, reason), "capture-io"
    end
    local text, rerr = f:read(KEYFILE_MAX_SIZE + 1)
    f:close()
    if text == nil and rerr then
        return nil, fmt("%s: cannot read key file: %s", path, tostring(rerr)), "capture-io"
    end
    text = text or ""
    if #text > KEYFILE_MAX_SIZE then
        return nil, fmt("%s: key file is larger than %d MiB", path, KEYFILE_MAX_SIZE >> 20), "invalid-argument"
    end
    local keys, line, msg, st = M.load_keytext(text, backend)
    if not keys then
        if line and line > 0 then
            return nil, fmt("%s, line %d: %s", path, line, msg), st
        end
        return nil, fmt("%s: %s", path, msg), st
    end
    return keys
end

-- pecrypto, the backend over Wireshark 4.6's GcryptCipher.
-- One chunk with the modules before it in src/pecrypto.lua's list, whose locals it uses.

-- Wireshark 4.6's GcryptCipher ----------------------------------------------------------------------------------------

-- Handles are opened once per key and reset per packet: setkey (the key schedule) is the costly step.
function M.gcrypt_backend()
    local Cipher, BA = GcryptCipher, ByteArray
    assert(Cipher and BA, "GcryptCipher needs Wireshark 4.6 or later")
    local RESET = GCRYCTL_RESET or 4
    local SET_CCM_LENGTHS = GCRYCTL_SET_CCM_LENGTHS or 69
    local EMPTY = BA.new()
    local AES = { [16] = GCRY_CIPHER_AES, [24] = GCRY_CIPHER_AES192, [32] = GCRY_CIPHER_AES256 }
    local function bytes(s)
        return BA.new(s, true)
    end
    local backend = {}
    function backend.block(key)
        local h = Cipher.open(assert(AES[#key], "AES key length"), GCRY_CIPHER_MODE_ECB, 0)
        h:setkey(bytes(key))
        return function(block)
            return h:encrypt(nil, bytes(block)):raw()
        end
    end
    function backend.aead(alg, key, tag_len)
        local h
        if alg == "chacha20-poly1305" then
            h = Cipher.open(GCRY_CIPHER_CHACHA20, GCRY_CIPHER_MODE_POLY1305, 0)
        else
            h = Cipher.open(assert(AES[#key], "AES key length"),
                alg == "aes-ccm" and GCRY_CIPHER_MODE_CCM or GCRY_CIPHER_MODE_GCM, 0)
        end
        h:setkey(bytes(key))
        local ccm = alg == "aes-ccm"
        return function(nonce, aad, ct, tag)
            h:ctl(RESET, EMPTY)
            h:setiv(bytes(nonce))
            if ccm then
                h:ctl(SET_CCM_LENGTHS, bytes(pack("=I8I8I8", #ct, #aad, tag_len)))
            end
            h:authenticate(bytes(aad))
            local pt = ""
            if #ct > 0 then
                pt = h:decrypt(nil, bytes(ct)):raw()
            end
            if h:checktag(bytes(tag)) ~= 0 then
                return nil
            end
            return pt
        end
    end
    return backend
end

return M
]=]
-- END GENERATED pecrypto

-- The core's word on each status: its category (which expert item shows it) and its message.
local STATUS_CATEGORY, STATUS_MESSAGE = {}, {}
for _, row in ipairs(STATUS_LIST) do
    STATUS_CATEGORY[row[1]], STATUS_MESSAGE[row[1]] = row[2], row[3]
end

-- Oldest pelua this script can use: 0.2.0 reads reference configs and says each status's category and why a key
-- file failed, as the C plugin does.
local PELUA_NEEDED = { 0, 2, 0 }

local function version_at_least(text, want)
    local got = {}
    for n in tostring(text):gmatch("%d+") do
        got[#got + 1] = tonumber(n)
    end
    for i = 1, #want do
        if (got[i] or 0) ~= want[i] then
            return (got[i] or 0) > want[i]
        end
    end
    return true
end

-- The decryption engine: load_keyfile(path) -> keys | nil, message, status; keys:psp_open (see pelua.c).
local load_keyfile, no_engine_why
do
    local have_pelua, pelua = pcall(require, "pelua")
    if have_pelua and type(pelua) == "table" and type(pelua.load_keyfile) == "function" then
        if version_at_least(pelua.version, PELUA_NEEDED) then
            load_keyfile = pelua.load_keyfile
        else
            note("pelua " .. tostring(pelua.version) .. " is older than this script needs (0.2.0): not using it; "
                .. "rebuild it from dissectors/lua (docs/wireshark.md)")
        end
    end
    if not load_keyfile and GcryptCipher and math.type then
        -- Lua 5.3+ with Wireshark's gcrypt binding: compile the inlined decryption code.
        local ok, res = pcall(function()
            local pecrypto = assert(load(PECRYPTO_SOURCE, "=pecrypto.lua", "t"))(CATEGORY_LIST, STATUS_LIST)
            local backend = pecrypto.gcrypt_backend()
            return function(path)
                return pecrypto.load_keyfile(path, backend)
            end
        end)
        if ok then
            load_keyfile = res
        else
            no_engine_why = "decryption in Lua failed to start: " .. tostring(res)
            note(no_engine_why)
        end
    end
end
local NO_ENGINE = "decryption needs the pelua module (see docs/wireshark.md) or Wireshark 4.6 or later (its Lua has GcryptCipher)"

-- Wireshark's "bit" library exists in 4.0, 4.4 and 4.6; Lua 5.4 has no bit32 (and 5.2 no & or >>).
local bitops = bit or bit32
local band, rshift = bitops.band, bitops.rshift

local ICV_LEN = 16
local BASE_LEN = 16
local VC_LEN = 8
-- The largest UDP payload: the core refuses anything longer before any other check of the rest.
local MAX_LEN = 65535 - 8

local ip_protocols = {
    [0] = "HOPOPT", [1] = "ICMP", [2] = "IGMP", [4] = "IPv4", [6] = "TCP", [17] = "UDP", [33] = "DCCP",
    [41] = "IPv6", [43] = "IPv6-Route", [44] = "IPv6-Frag", [47] = "GRE", [50] = "ESP", [51] = "AH",
    [58] = "IPv6-ICMP", [59] = "IPv6-NoNxt", [60] = "IPv6-Opts", [89] = "OSPF", [103] = "PIM", [112] = "VRRP",
    [132] = "SCTP", [136] = "UDPLite", [137] = "MPLS-in-IP", [143] = "Ethernet", [144] = "AGGFRAG",
}
local versions = { [0] = "AES-GCM-128", [1] = "AES-GCM-256", [2] = "AES-GMAC-128", [3] = "AES-GMAC-256" }
local master_keys = { [0] = "master key 0", [1] = "master key 1" }

local f = psp.fields
f.nexthdr = ProtoField.uint8("psp.nexthdr", "Next Header", base.DEC, ip_protocols)
f.hdrextlen = ProtoField.uint8("psp.hdrextlen", "Hdr Ext Len", base.DEC)
f.reserved0 = ProtoField.uint8("psp.reserved0", "Reserved", base.HEX, nil, 0xc0)
f.cryptoffset = ProtoField.uint8("psp.cryptoffset", "Crypt Offset", base.DEC, nil, 0x3f,
    "Crypt Offset in 4-octet words after the IV")
f.sample = ProtoField.bool("psp.sample", "Sample", 8, nil, 0x80)
f.drop = ProtoField.bool("psp.drop", "Drop", 8, nil, 0x40)
-- google/psp's name for octet 3's top bits (the spec's S and D), kept so its filters still work
f.reserved1 = ProtoField.uint8("psp.reserved1", "S/D bits (google/psp: Reserved)", base.DEC, nil, 0xc0)
f.version = ProtoField.uint8("psp.version", "Version", base.DEC, versions, 0x3c)
f.is_virt = ProtoField.bool("psp.is_virt", "Virtualization Cookie present", 8, nil, 0x02)
f.one_bit = ProtoField.bool("psp.one_bit", "Always One", 8, nil, 0x01)
f.spi = ProtoField.uint32("psp.spi", "SPI", base.HEX_DEC)
f.master_key = ProtoField.uint32("psp.master_key", "Master Key", base.DEC, master_keys, 0x80000000,
    "Which master key the SPI's most significant bit selects")
f.iv = ProtoField.uint64("psp.iv", "IV", base.HEX_DEC)
f.vc = ProtoField.uint64("psp.vc", "Virtualization Cookie", base.HEX_DEC)
f.sectoken = ProtoField.uint32("psp.sectoken", "Security Token", base.HEX_DEC)
f.virtkey = ProtoField.uint32("psp.virtkey", "Virtualization Key", base.HEX_DEC)
f.ext = ProtoField.bytes("psp.ext", "Extension")
f.payload = ProtoField.bytes("psp.payload", "Payload")
f.icv = ProtoField.bytes("psp.icv", "ICV")
f.status = ProtoField.string("psp.status", "Decryption status")
f.icv_good = ProtoField.bool("psp.icv_good", "ICV good")
f.icv_bad = ProtoField.bool("psp.icv_bad", "ICV bad")

-- Expert items ----------------------------------------------------------------------------------
--
-- One per status category, named, grouped and titled as the C plugin's (dissectors/plugin/experts.c: change
-- both together): <proto>.expert.<category, '-' written '_'>, summary "<title>: <what the category means>",
-- message "<title>: <the status's message> (<status name>)".  Which item a status gets comes from its
-- category alone.
local CATEGORY_LOOK = {
    malformed = { expert.group.MALFORMED, expert.severity.ERROR, "Malformed" },
    authentication = { expert.group.CHECKSUM, expert.severity.ERROR, "Authentication failed" },
    replay = { expert.group.SEQUENCE, expert.severity.WARN, "Replay" },
    -- well-formed and authenticated: a receiver's choice (or a dummy packet), nothing wrong on the wire
    policy = { expert.group.SECURITY, expert.severity.NOTE, "Dropped by policy" },
    ["no-key"] = { expert.group.DECRYPTION, expert.severity.NOTE, "No key" },
    ["not-this-protocol"] = { expert.group.PROTOCOL, expert.severity.NOTE, "Not this protocol" },
    ["cut-by-capture"] = { expert.group.UNDECODED, expert.severity.NOTE, "Cut by the capture" },
    -- the user's keys are wrong or unreadable: every packet they should have opened says so, visibly
    configuration = { expert.group.DECRYPTION, expert.severity.WARN, "Configuration" },
    io = { expert.group.DECRYPTION, expert.severity.WARN, "I/O error" },
    limit = { expert.group.UNDECODED, expert.severity.WARN, "Limit reached" },
    internal = { expert.group.UNDECODED, expert.severity.ERROR, "Internal error" },
}

local category_expert = {} -- category -> { ProtoExpert, title }
local experts = {}
for _, row in ipairs(CATEGORY_LIST) do
    local category, meaning = row[1], row[2]
    if category ~= "ok" then
        -- A category this script has no look for yet still gets an item, shown as the plugin shows "internal".
        local look = CATEGORY_LOOK[category] or CATEGORY_LOOK.internal
        local ei = ProtoExpert.new("psp.expert." .. category:gsub("%-", "_"), look[3] .. ": " .. meaning, look[1],
            look[2])
        category_expert[category] = { ei, look[3] }
        experts[#experts + 1] = ei
    end
end
-- Not about a status.
local e = {
    gmac_unverified = ProtoExpert.new("psp.expert.gmac_unverified",
        "GMAC payload shown in clear without verifying its ICV (no key)", expert.group.SECURITY,
        expert.severity.NOTE),
    udp_zero_checksum = ProtoExpert.new("psp.expert.udp_zero_checksum",
        "UDP checksum 0 over IPv6 is allowed for PSP (RFC 6936, the PSP reference sends it); Wireshark's UDP "
            .. "preference udp.ignore_ipv6_zero_checksum stops flagging it", expert.group.CHECKSUM,
        expert.severity.NOTE),
    -- Lua only: the C plugin always has the core.
    no_module = ProtoExpert.new("psp.expert.no_module", NO_ENGINE, expert.group.UNDECODED, expert.severity.NOTE),
}
for _, name in ipairs({ "gmac_unverified", "udp_zero_checksum", "no_module" }) do
    experts[#experts + 1] = e[name]
end
psp.experts = experts

-- The item of status's category on item: "<title>: <text> (<status>)", text the status's message by default;
-- nothing for a success.  category nil: the one the status table gives.
local function status_expert(item, status, category, text)
    category = category or STATUS_CATEGORY[status]
    if category == "ok" then
        return
    end
    local ce = category_expert[category] or category_expert.internal
    item:add_proto_expert_info(ce[1], string.format("%s: %s (%s)", ce[2],
        text or STATUS_MESSAGE[status] or "unknown status code", status))
end

psp.prefs.keyfile = Pref.string("Key file", "",
    "Key file (docs/keys.md) with psp-master / psp-key lines, or a google/psp reference config; decryption needs "
        .. "the pelua module or Wireshark 4.6 or later")
psp.prefs.udp_port = Pref.uint("UDP port", 1000, "UDP destination port of PSP")

-- Key file, (re)loaded when the preference changes ----------------------------------------------
--
-- A file that cannot be used is said once per load on the console and on every packet it may have cost its key,
-- as the C plugin does (a dialog would be seen once, then only "no key"): its problem is the core's status of
-- it (keyfile-bad-value, capture-io, ...), whose category picks the expert item, and a text naming the file and
-- line, never a key.

local keys, keys_problem, keys_path = nil, nil, nil

local function current_keys()
    local path = psp.prefs.keyfile or ""
    if path ~= keys_path then
        if keys then
            keys:close() -- wipes the keys now rather than at the next collection
        end
        keys, keys_problem, keys_path = nil, nil, path
        if path ~= "" and load_keyfile then
            local ok, k, err, st = pcall(load_keyfile, path)
            if ok and k then
                keys = k
            else
                -- A Lua error here is a fault of the decryption code, not of the file: the core's internal status.
                keys_problem = { status = ok and st or "crypto-backend",
                    text = "PSP key file " .. (ok and tostring(err) or (path .. ": " .. tostring(k))) }
                note(keys_problem.text)
            end
        end
    end
    return keys, keys_problem
end

-- Registration ----------------------------------------------------------------------------------

local udp_table = DissectorTable.get("udp.port")
local ip_proto_table = DissectorTable.get("ip.proto")
local registered_port = nil

local function register_port()
    local port = psp.prefs.udp_port
    if port == registered_port then
        return
    end
    if registered_port then
        udp_table:remove(registered_port, psp)
    end
    if port and port > 0 and port <= 65535 then
        udp_table:add(port, psp)
        registered_port = port
    else
        registered_port = nil
    end
end

function psp.prefs_changed()
    register_port()
    keys_path = nil -- re-read the key file even when only its contents changed
end

-- Dissection ------------------------------------------------------------------------------------

-- pe_psp_open's checks before it looks for a key (core/src/proto/psp.c, psp_hdr.c), in its order: with no key at all
-- the core says this status, or no-key.  nil when the header passes.
local function header_status(len, hdrextlen, octet2, octet3)
    if len < BASE_LEN then
        return "psp-truncated"
    end
    local version = rshift(band(octet3, 0x3c), 2)
    local hlen = (hdrextlen + 1) * 8
    local hdr_st
    if band(octet3, 0x01) == 0 then
        hdr_st = "psp-always-one-bit-clear"
    elseif version > 3 then
        hdr_st = "psp-unsupported-version"
    elseif hdrextlen < 1 then
        hdr_st = "psp-bad-hdr-ext-len"
    elseif band(octet3, 0x02) ~= 0 and hdrextlen < 2 then
        hdr_st = "psp-vc-without-room"
    elseif hlen > len then
        hdr_st = "psp-bad-hdr-ext-len"
    end
    if len < BASE_LEN + ICV_LEN then
        return "psp-truncated"
    end
    if len > MAX_LEN then
        return "psp-too-long"
    end
    if hdr_st then
        return hdr_st
    end
    if hlen + ICV_LEN > len then
        return "psp-bad-hdr-ext-len"
    end
    if band(octet2, 0x3f) * 4 > len - BASE_LEN - ICV_LEN then
        return "psp-crypt-offset-past-payload"
    end
end

-- UDP flags checksum 0 over IPv6 as illegal (checksum status 4, PROTO_CHECKSUM_E_ILLEGAL) unless its preference
-- udp.ignore_ipv6_zero_checksum is set; Lua cannot read that preference, but it can see what UDP concluded.  The
-- status item sits on the checksum, the last 2 octets before this payload in the same data source.
local udp_checksum_status_field = Field.new("udp.checksum.status")
local CHECKSUM_ILLEGAL = 4

local function udp_zero_checksum_flagged(tvb)
    local at = tvb:offset() - 2
    local list = { udp_checksum_status_field() }
    for i = #list, 1, -1 do
        local fi = list[i]
        if fi.offset == at then
            return fi.value == CHECKSUM_ILLEGAL
        end
    end
    return false
end

local function hex(s)
    return (s:gsub(".", function(c) return string.format("%02x", c:byte()) end))
end

local function dissect_inner(tvb, nh, pinfo, tree, ptree)
    local ok, err = pcall(function() ip_proto_table:try(nh, tvb, pinfo, tree) end)
    if not ok then
        ptree:add_proto_expert_info(category_expert.malformed[1],
            "decrypted packet could not be dissected: " .. tostring(err))
    end
end

function psp.dissector(tvb, pinfo, tree)
    -- Even no octet at all gets a status, as in the plugin: cut by the capture, or too short for PSP.
    local len = tvb:len()
    local reported = tvb:reported_len()
    pinfo.cols.protocol:set("PSP")
    local t = len > 0 and tree:add(psp, tvb(0, math.min(len, reported))) or tree:add(psp)
    if udp_zero_checksum_flagged(tvb) then
        t:add_proto_expert_info(e.udp_zero_checksum)
    end
    local function have(off, n)
        return off + n <= len
    end

    -- Fixed header, as far as the octets go.  One range object per octet group: every tvb(...) allocates, and
    -- this runs for every packet.
    if have(0, 1) then t:add(f.nexthdr, tvb(0, 1)) end
    if have(1, 1) then t:add(f.hdrextlen, tvb(1, 1)) end
    if have(2, 1) then
        local r = tvb(2, 1)
        t:add(f.reserved0, r)
        t:add(f.cryptoffset, r)
    end
    if have(3, 1) then
        local r = tvb(3, 1)
        -- google/psp's name for the S and D bits: filterable, but hidden so the tree shows them once (as the plugin)
        t:add(f.reserved1, r):set_hidden()
        t:add(f.sample, r)
        t:add(f.drop, r)
        t:add(f.version, r)
        t:add(f.is_virt, r)
        t:add(f.one_bit, r)
    end
    if have(4, 4) then
        local r = tvb(4, 4)
        t:add(f.spi, r):add(f.master_key, r)
    end
    if have(8, 8) then t:add(f.iv, tvb(8, 8)) end

    -- The header octets in one string rather than one range object per field.
    local nh, hdrextlen, octet2, octet3, s1, s2, s3, s4
    if len >= 1 then
        nh, hdrextlen, octet2, octet3, s1, s2, s3, s4 = string.byte(tvb:raw(0, math.min(len, 8)), 1, 8)
    end
    local version = octet3 and rshift(band(octet3, 0x3c), 2)
    local hlen = hdrextlen and (hdrextlen + 1) * 8
    if have(0, BASE_LEN) then
        local spi = ((s1 * 256 + s2) * 256 + s3) * 256 + s4
        pinfo.cols.info:set(string.format("PSP SPI=0x%08x IV=%s v%d %s", spi, tostring(tvb(8, 8):uint64()),
            version, versions[version] or "reserved"))
    else
        pinfo.cols.info:set("PSP (truncated)")
    end

    -- What the packet's status is, as the C plugin finds it (packet-psp.c): a cut packet cannot be checked;
    -- otherwise the engine opens it with the key file's keys, or, with no keys to try, the header checks that come
    -- before the key lookup are all the core would do.  Without an engine and with a key file that might open the
    -- packet, nothing more can be said than what the header checks find.
    local cut = reported > len
    local status, inner, info
    local k, problem = current_keys()
    if cut then
        status = "capture-packet-cut"
    elseif k then
        status, inner, info = k:psp_open(tvb:raw(0, len))
    else
        status = header_status(len, hdrextlen, octet2, octet3)
        if not status and (load_keyfile or (psp.prefs.keyfile or "") == "") then
            status = "no-key"
        end
    end
    local category = status and (info and info.category or STATUS_CATEGORY[status])
    local vc_decrypted = status == "ok" and info.ext and #info.ext >= VC_LEN and band(octet2, 0x3f) * 4 < VC_LEN

    -- Where the header's length is credible (for a cut packet: against the packet as sent), the extension area,
    -- payload and ICV, each as far as it was captured; the ICV closes the packet as sent.
    local layout = have(0, BASE_LEN) and hdrextlen >= 1 and hlen + ICV_LEN <= reported
    local icv_item
    if layout then
        local virt = band(octet3, 0x02) ~= 0
        local ext_start = BASE_LEN
        if virt and hlen >= BASE_LEN + VC_LEN then
            if vc_decrypted then
                -- The crypt offset left (part of) the VC encrypted: show the decrypted value on its octets.
                local vc = info.ext:sub(1, VC_LEN)
                local vc_item = t:add(f.vc, tvb(BASE_LEN, VC_LEN), UInt64.fromhex(hex(vc)))
                vc_item:append_text(" (decrypted)")
                vc_item:add(f.sectoken, tvb(BASE_LEN, 4), tonumber(hex(vc:sub(1, 4)), 16))
                vc_item:add(f.virtkey, tvb(BASE_LEN + 4, 4), tonumber(hex(vc:sub(5, 8)), 16))
            elseif have(BASE_LEN, VC_LEN) then
                local vc_item = t:add(f.vc, tvb(BASE_LEN, VC_LEN))
                vc_item:add(f.sectoken, tvb(BASE_LEN, 4))
                vc_item:add(f.virtkey, tvb(BASE_LEN + 4, 4))
                if band(octet2, 0x3f) * 4 < VC_LEN then
                    vc_item:append_text(" (encrypted)")
                end
            end
            ext_start = BASE_LEN + VC_LEN
        end
        local ext_end = math.min(hlen, len)
        if ext_end > ext_start then
            t:add(f.ext, tvb(ext_start, ext_end - ext_start))
        end
        if not cut then
            if len - ICV_LEN > hlen then
                t:add(f.payload, tvb(hlen, len - ICV_LEN - hlen))
            end
            icv_item = t:add(f.icv, tvb(len - ICV_LEN, ICV_LEN))
        end
    end

    if not status then
        t:add_proto_expert_info(e.no_module, no_engine_why or NO_ENGINE)
        return len
    end

    local si = t:add(f.status, status)
    si:set_generated()
    if status ~= "ok" then
        si:append_text(" (" .. (info and info.message or STATUS_MESSAGE[status] or "unknown status code") .. ")")
    end
    -- The ICV was checked when it verified or failed to.
    if status == "ok" or status == "authentication-failed" then
        t:add(f.icv_good, status == "ok"):set_generated()
        t:add(f.icv_bad, status == "authentication-failed"):set_generated()
    end
    status_expert(status == "authentication-failed" and icv_item or si, status, category, info and info.message)
    if problem and (category == "no-key" or category == "authentication") then
        -- A key lost to a bad key file may be the one this packet needed.
        status_expert(si, problem.status, nil, problem.text)
    end
    if category == "no-key" then
        pinfo.cols.info:append(" [no key]")
    end

    if status == "ok" then
        pinfo.cols.info:append(" [decrypted]")
        if inner then
            dissect_inner(ByteArray.new(inner, true):tvb("Decrypted PSP"), nh, pinfo, tree, t)
        end
    elseif status == "authentication-failed" then
        pinfo.cols.info:append(" [ICV bad]")
    elseif (status == "no-key" or status == "psp-version-disabled") and layout and version >= 2 then
        -- GMAC leaves the payload in clear: show it, marked as not verified, after the "[no key]" it keeps.
        (icv_item or t):add_proto_expert_info(e.gmac_unverified)
        pinfo.cols.info:append(" ")
        pinfo.cols.info:fence()
        if len - ICV_LEN > hlen then
            dissect_inner(tvb(hlen, len - ICV_LEN - hlen):tvb(), nh, pinfo, tree, t)
        end
    end
    return len
end

register_port()
