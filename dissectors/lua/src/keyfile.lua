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

