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

