-- IPsec Enhanced ESP (draft-ietf-ipsecme-eesp-04) dissector for Wireshark 4.0 (Lua 5.2).
--
-- Header and option dissection is pure Lua.  Decryption needs the project's
-- C module "pelua" (dissectors/lua/pelua.c; LUA_CPATH_5_2 or the Lua 5.2
-- cpath) and a key file (docs/keys.md) named by the preference eesp.keyfile:
--
--   tshark -X lua_script:eesp.lua -o eesp.keyfile:keys.txt -r capture.pcapng
--
-- EESP is registered on IP protocol eesp.ip_protocol (default 49,
-- provisional) and on UDP port eesp.udp_port (4500) through a dispatcher that
-- claims only EESP (first octet's MSB set) and hands NAT keepalives, IKE
-- (non-ESP marker) and ESP to the dissector that had the port before.
--
-- Field names match the project's C plugin, which registers the same names:
-- load one or the other.  When an "eesp" protocol is already registered this
-- script says so on stderr and registers nothing.

local SCRIPT = "eesp.lua"

local function note(msg)
    -- print() goes to stdout in tshark and would corrupt -T fields output.
    io.stderr:write(SCRIPT .. ": " .. msg .. "\n")
end

local function protocol_exists(name)
    local ok, d = pcall(Dissector.get, name)
    return ok and d ~= nil
end

if protocol_exists("eesp") then
    note("an \"eesp\" protocol is already registered (the psp_eesp C plugin provides it, or this script was loaded twice): not registering the Lua EESP dissector")
    return
end
local proto_ok, eesp = pcall(Proto.new, "eesp", "IPsec Enhanced ESP")
if not proto_ok then
    note("an \"eesp\" protocol is already registered (" .. tostring(eesp) .. "): not registering the Lua EESP dissector")
    return
end

local have_pelua, pelua = pcall(require, "pelua")
if not have_pelua or type(pelua) ~= "table" or type(pelua.load_keyfile) ~= "function" then
    pelua = nil
end

local band, rshift = bit32.band, bit32.rshift

local BASE_LEN = 8
local SEQ_LEN = 8

local ip_protocols = {
    [0] = "HOPOPT", [1] = "ICMP", [2] = "IGMP", [4] = "IPv4", [6] = "TCP", [17] = "UDP", [33] = "DCCP",
    [41] = "IPv6", [43] = "IPv6-Route", [44] = "IPv6-Frag", [47] = "GRE", [50] = "ESP", [51] = "AH",
    [58] = "IPv6-ICMP", [59] = "IPv6-NoNxt (dummy packet)", [60] = "IPv6-Opts", [89] = "OSPF", [103] = "PIM",
    [112] = "VRRP", [132] = "SCTP", [136] = "UDPLite", [137] = "MPLS-in-IP", [143] = "Ethernet", [144] = "AGGFRAG",
}
local option_types = { [0] = "Pad1", [1] = "PadN", [2] = "Crypt Offset" }

local f = eesp.fields
f.compat = ProtoField.bool("eesp.compat", "ESP-compatibility bit", 8, nil, 0x80, "Always 1 in EESP (0: ESP)")
f.version = ProtoField.uint8("eesp.version", "Version", base.DEC, nil, 0x78)
f.reserved = ProtoField.uint8("eesp.reserved", "Reserved", base.HEX, nil, 0x07)
f.opt_len = ProtoField.uint8("eesp.opt_len", "Opt Len", base.DEC, nil, nil, "Length of the options in octets")
f.session_id = ProtoField.uint16("eesp.session_id", "Session ID (Sub SA)", base.DEC)
f.spi = ProtoField.uint32("eesp.spi", "SPI", base.HEX)
f.option = ProtoField.bytes("eesp.option", "Option")
f.option_type = ProtoField.uint8("eesp.option.type", "Option Type", base.DEC, option_types)
f.option_len = ProtoField.uint8("eesp.option.len", "Opt Data Len", base.DEC)
f.option_data = ProtoField.bytes("eesp.option.data", "Option Data")
f.option_payload_offset = ProtoField.uint16("eesp.option.payload_offset", "PayloadOffset", base.DEC, nil, 0xfc00,
    "4-octet units from the Base Header to the PIH or payload")
f.option_crypt_offset = ProtoField.uint16("eesp.option.crypt_offset", "CryptOffset", base.DEC, nil, 0x03f0,
    "4-octet units from the PIH or payload to the first encrypted octet")
f.option_co_reserved = ProtoField.uint16("eesp.option.co_reserved", "Reserved", base.HEX, nil, 0x000f)
f.seq = ProtoField.uint64("eesp.seq", "Sequence Number", base.DEC)
f.iv = ProtoField.bytes("eesp.iv", "IV")
f.payload = ProtoField.bytes("eesp.payload", "Payload", base.NONE, "PIH, payload and padding (encrypted)")
f.icv = ProtoField.bytes("eesp.icv", "ICV")
f.next_header = ProtoField.uint8("eesp.next_header", "Next Header", base.DEC, ip_protocols)
f.pad_len = ProtoField.uint8("eesp.pad_len", "Pad Length", base.DEC)
f.format = ProtoField.string("eesp.format", "Format")
f.suite = ProtoField.string("eesp.suite", "Suite")
f.status = ProtoField.string("eesp.status", "Decryption status")
f.icv_good = ProtoField.bool("eesp.icv_good", "ICV good")
f.icv_bad = ProtoField.bool("eesp.icv_bad", "ICV bad")
f.data = ProtoField.bytes("eesp.data", "Data", base.NONE, "Sequence Number, IV, payload and ICV: their layout needs the SA")

local e = {
    no_sa = ProtoExpert.new("eesp.expert.no_sa", "No SA to decrypt this packet",
        expert.group.UNDECODED, expert.severity.NOTE),
    icv_bad = ProtoExpert.new("eesp.expert.icv_bad", "ICV verification failed",
        expert.group.CHECKSUM, expert.severity.ERROR),
    malformed = ProtoExpert.new("eesp.expert.malformed", "Malformed EESP packet",
        expert.group.MALFORMED, expert.severity.ERROR),
    version_unknown = ProtoExpert.new("eesp.expert.version_unknown", "Unknown EESP version",
        expert.group.PROTOCOL, expert.severity.WARN),
    no_module = ProtoExpert.new("eesp.expert.no_module", "decryption needs the pelua module (see docs/wireshark.md)",
        expert.group.UNDECODED, expert.severity.NOTE),
    dummy = ProtoExpert.new("eesp.expert.dummy", "Dummy packet (Next Header 59): authenticated and discarded",
        expert.group.COMMENTS_GROUP, expert.severity.COMMENT),
    dropped = ProtoExpert.new("eesp.expert.dropped", "A receiver drops this packet by policy",
        expert.group.PROTOCOL, expert.severity.WARN),
}
eesp.experts = { e.no_sa, e.icv_bad, e.malformed, e.version_unknown, e.no_module, e.dummy, e.dropped }

eesp.prefs.keyfile = Pref.string("Key file", "",
    "Key file (docs/keys.md) with eesp-sa lines; decryption needs the pelua module")
eesp.prefs.ip_protocol = Pref.uint("IP protocol number", 49,
    "IP protocol number of EESP (49 is provisional and test-only)")
eesp.prefs.udp_port = Pref.uint("UDP port", 4500,
    "UDP port shared with ESP-in-UDP and IKE; EESP is told apart by the first octet's MSB")

-- Key file, (re)loaded when the preference changes ----------------------------------------------

local keys, keys_err, keys_path = nil, nil, nil

local function current_keys()
    local path = eesp.prefs.keyfile or ""
    if path ~= keys_path then
        if keys then
            keys:close() -- wipes the keys now rather than at the next collection
        end
        keys, keys_err, keys_path = nil, nil, path
        if path ~= "" and pelua then
            local ok, k, err = pcall(pelua.load_keyfile, path)
            if ok and k then
                keys = k
            else
                keys_err = ok and err or tostring(k)
            end
        end
    end
    return keys, keys_err
end

-- Outer destination, for SAs bound to one (docs/keys.md) -----------------------------------------

local ip_dst_field = Field.new("ip.dst")
local ipv6_dst_field = Field.new("ipv6.dst")

-- The IP version and raw destination of the IP header that carries this packet: the last
-- ip.dst / ipv6.dst so far whose value is pinfo.dst (set by that header).
local function outer_destination(pinfo)
    local best_version, best_raw
    for _, pair in ipairs({ { 4, { ip_dst_field() } }, { 6, { ipv6_dst_field() } } }) do
        local version, list = pair[1], pair[2]
        for i = #list, 1, -1 do
            local fi = list[i]
            local ok, same = pcall(function() return fi.value == pinfo.dst end)
            if ok and same then
                local rok, raw = pcall(function() return fi.range:bytes():raw() end)
                if rok and raw and #raw == (version == 4 and 4 or 16) then
                    best_version, best_raw = version, raw
                end
                break
            end
        end
        if best_version then
            break
        end
    end
    if best_version then
        return best_version, best_raw
    end
    -- No match (e.g. a routing header changed pinfo.dst): the family alone, any-destination SAs only.
    if #{ ipv6_dst_field() } > 0 and #{ ip_dst_field() } == 0 then
        return 6, nil
    end
    return 4, nil
end

-- Registration ----------------------------------------------------------------------------------

local udp_table = DissectorTable.get("udp.port")
local ip_proto_table = DissectorTable.get("ip.proto")
local data_dissector = Dissector.get("data")

local eesp_udp = Proto.new("eesp_udp", "EESP/ESP/IKE demultiplexer on UDP 4500")
local registered_proto, registered_port, previous_udp = nil, nil, nil

local function register()
    local proto = eesp.prefs.ip_protocol
    if proto ~= registered_proto then
        if registered_proto then
            ip_proto_table:remove(registered_proto, eesp)
        end
        registered_proto = nil
        if proto and proto <= 255 then
            ip_proto_table:add(proto, eesp)
            registered_proto = proto
        end
    end
    local port = eesp.prefs.udp_port
    if port ~= registered_port then
        if registered_port then
            -- Give the old port back to whoever had it.
            udp_table:remove(registered_port, eesp_udp)
            if previous_udp then
                udp_table:add(registered_port, previous_udp)
            end
        end
        registered_port, previous_udp = nil, nil
        if port and port > 0 and port <= 65535 then
            previous_udp = udp_table:get_dissector(port)
            udp_table:add(port, eesp_udp)
            registered_port = port
        end
    end
end

function eesp.prefs_changed()
    register()
    keys_path = nil -- re-read the key file even when only its contents changed
end

-- Dissection ------------------------------------------------------------------------------------

local policy_status = {
    ["eesp-sub-sa-out-of-range"] = true, ["eesp-crypt-offset-not-allowed"] = true,
    ["eesp-unknown-option"] = true, ["eesp-sequence-zero"] = true,
}
-- Statuses the Lua header checks have reported already.
local header_status = {
    ["eesp-truncated"] = true, ["eesp-compat-bit-clear"] = true, ["eesp-reserved-bits-set"] = true,
    ["eesp-options-overrun"] = true, ["eesp-bad-crypt-offset-option"] = true,
}

local function dissect_inner(inner, nh, pinfo, tree, etree)
    local tvb = ByteArray.new(inner, true):tvb("Decrypted EESP")
    local ok, err = pcall(function() ip_proto_table:try(nh, tvb, pinfo, tree) end)
    if not ok then
        etree:add_proto_expert_info(e.malformed, "decrypted packet could not be dissected: " .. tostring(err))
    end
end

-- Options (§4): TLVs within Opt Len; returns the number of problems found.
local function dissect_options(tvb, t, opt_len, len)
    local problems = 0
    local stop = BASE_LEN + opt_len
    if stop > len then
        stop = len
    end
    local off = BASE_LEN
    local crypt_offsets = 0
    while off < stop do
        local otype = tvb(off, 1):uint()
        if otype == 0 then
            local ot = t:add(f.option, tvb(off, 1))
            ot:set_text("Option: Pad1")
            ot:add(f.option_type, tvb(off, 1))
            off = off + 1
        else
            if off + 2 > BASE_LEN + opt_len then
                t:add_proto_expert_info(e.malformed, "option header runs past Opt Len")
                problems = problems + 1
                break
            end
            if off + 2 > stop then
                break -- cut by the capture
            end
            local dlen = tvb(off + 1, 1):uint()
            if off + 2 + dlen > BASE_LEN + opt_len then
                local ot = t:add(f.option, tvb(off, stop - off))
                ot:set_text(string.format("Option: %s (runs past Opt Len)", option_types[otype] or ("type " .. otype)))
                ot:add(f.option_type, tvb(off, 1))
                ot:add(f.option_len, tvb(off + 1, 1))
                ot:add_proto_expert_info(e.malformed, "option runs past Opt Len")
                problems = problems + 1
                break
            end
            if off + 2 + dlen > stop then
                break -- cut by the capture
            end
            local ot = t:add(f.option, tvb(off, 2 + dlen))
            ot:add(f.option_type, tvb(off, 1))
            ot:add(f.option_len, tvb(off + 1, 1))
            if dlen > 0 then
                ot:add(f.option_data, tvb(off + 2, dlen))
            end
            if otype == 2 then
                crypt_offsets = crypt_offsets + 1
                if dlen == 2 then
                    local v = tvb(off + 2, 2):uint()
                    ot:add(f.option_payload_offset, tvb(off + 2, 2))
                    ot:add(f.option_crypt_offset, tvb(off + 2, 2))
                    ot:add(f.option_co_reserved, tvb(off + 2, 2))
                    ot:set_text(string.format("Option: Crypt Offset (PayloadOffset %d, CryptOffset %d)",
                        rshift(v, 10), band(rshift(v, 4), 0x3f)))
                else
                    ot:set_text(string.format("Option: Crypt Offset (bad Opt Data Len %d)", dlen))
                    ot:add_proto_expert_info(e.malformed, "Crypt Offset option data is 2 octets")
                    problems = problems + 1
                end
                if crypt_offsets == 2 then
                    ot:add_proto_expert_info(e.malformed, "a second Crypt Offset option")
                    problems = problems + 1
                end
            else
                ot:set_text(string.format("Option: %s (%d octets)", option_types[otype] or ("unknown type " .. otype),
                    2 + dlen))
            end
            off = off + 2 + dlen
        end
    end
    return problems
end

local function add_range(t, field, tvb, off, n, len)
    if n > 0 and off >= 0 and off + n <= len then
        return t:add(field, tvb(off, n))
    end
end

local function dissect_eesp(tvb, pinfo, tree)
    local len = tvb:len()
    local reported = tvb:reported_len()
    if len == 0 then
        return 0
    end
    pinfo.cols.protocol:set("EESP")
    local t = tree:add(eesp, tvb())
    local problems = 0
    local function malformed(text)
        problems = problems + 1
        t:add_proto_expert_info(e.malformed, text)
    end

    -- Base Header (§3).
    t:add(f.compat, tvb(0, 1))
    t:add(f.version, tvb(0, 1))
    t:add(f.reserved, tvb(0, 1))
    if len >= 2 then t:add(f.opt_len, tvb(1, 1)) end
    if len >= 4 then t:add(f.session_id, tvb(2, 2)) end
    if len >= 8 then t:add(f.spi, tvb(4, 4)) end
    if reported < BASE_LEN or len < BASE_LEN then
        pinfo.cols.info:set("EESP (truncated)")
        malformed(string.format("EESP packet of %d octets is shorter than its 8-octet Base Header", reported))
        return len
    end
    local octet0 = tvb(0, 1):uint()
    local version = rshift(band(octet0, 0x78), 3)
    local opt_len = tvb(1, 1):uint()
    local session_id = tvb(2, 2):uint()
    local spi = tvb(4, 4):uint()
    pinfo.cols.info:set(string.format("EESP SPI=0x%08x Session=%d", spi, session_id))
    t:append_text(string.format(", SPI: 0x%08x, Session ID: %d", spi, session_id))

    if band(octet0, 0x80) == 0 then
        malformed("ESP-compatibility bit is clear: this is ESP, not EESP")
    end
    if version ~= 0 then
        t:add_proto_expert_info(e.version_unknown, string.format("EESP version %d (only version 0 is defined)", version))
    end
    if band(octet0, 0x07) ~= 0 then
        malformed("Base Header reserved bits are not zero (a receiver drops the packet)")
    end

    -- Options (not for an unknown version: its layout is unknown).
    local after_options = BASE_LEN + opt_len
    if version == 0 then
        if after_options > reported then
            malformed(string.format("Opt Len %d runs past the packet", opt_len))
        end
        problems = problems + dissect_options(tvb, t, opt_len, len)
    else
        after_options = BASE_LEN
    end

    -- Decryption: it also tells the layout after the options (the SA fixes Seq, IV and ICV).
    local status, inner, info, why_not
    local path = eesp.prefs.keyfile or ""
    if path == "" then
        why_not = function() t:add_proto_expert_info(e.no_sa, "no key file set (preference eesp.keyfile)") end
    elseif not pelua then
        why_not = function() t:add_proto_expert_info(e.no_module) end
    else
        local k, kerr = current_keys()
        if not k then
            why_not = function() t:add_proto_expert_info(e.no_sa, "key file not loaded: " .. tostring(kerr)) end
        elseif len < reported then
            why_not = function() t:add_proto_expert_info(e.no_sa, "packet cut short by the capture: not decrypted") end
        else
            local ipv, dst = outer_destination(pinfo)
            status, inner, info = k:eesp_open(tvb:raw(0, len), ipv, dst)
        end
    end

    local shown_to = after_options -- octets dissected so far
    -- The layout after the options is known once the SA matched and the options parsed (payload_offset set).
    if info and info.sa_found and version == 0 and info.payload_offset > 0 then
        local off = after_options
        if info.seq_present then
            local si = add_range(t, f.seq, tvb, off, SEQ_LEN, len)
            off = off + SEQ_LEN
            if si then
                pinfo.cols.info:append(" Seq=" .. tostring(tvb(off - SEQ_LEN, SEQ_LEN):uint64()))
            end
        end
        if info.iv_len > 0 then
            add_range(t, f.iv, tvb, off, info.iv_len, len)
            off = off + info.iv_len
        end
        local icv_off = reported - info.icv_len
        if icv_off > off then
            add_range(t, f.payload, tvb, off, icv_off - off, len)
        end
        if icv_off >= off then
            add_range(t, f.icv, tvb, icv_off, info.icv_len, len)
            shown_to = reported
        else
            shown_to = off
        end
    end
    if shown_to < len then
        t:add(f.data, tvb(shown_to, len - shown_to))
    end

    if why_not then
        why_not()
        return len
    end

    -- What the core found.
    local si = t:add(f.status, status)
    si:set_generated()
    if status ~= "ok" then
        si:append_text(" (" .. info.message .. ")")
    end
    if info.sa_found then
        if info.payload_offset > 0 then
            t:add(f.format, info.format):set_generated()
        end
        local su = t:add(f.suite, info.suite)
        su:set_generated()
        su:append_text(string.format(" (%d-bit key, %s mode)", info.key_bits or 0, info.mode))
    end
    if status == "ok" or status == "eesp-dummy-packet" then
        t:add(f.next_header, info.next_header):set_generated()
        t:add(f.pad_len, info.pad_len):set_generated()
    end
    t:add(f.icv_good, info.icv_valid):set_generated()
    t:add(f.icv_bad, status == "authentication-failed"):set_generated()

    if status == "ok" then
        pinfo.cols.info:append(" [decrypted]")
        if inner then
            dissect_inner(inner, info.next_header, pinfo, tree, t)
        end
    elseif status == "authentication-failed" then
        pinfo.cols.info:append(" [ICV bad]")
        t:add_proto_expert_info(e.icv_bad, "ICV verification failed: wrong key, or the packet was changed")
    elseif status == "eesp-no-sa" then
        t:add_proto_expert_info(e.no_sa, string.format("no SA for SPI 0x%08x in the key file", spi))
    elseif status == "eesp-dummy-packet" then
        pinfo.cols.info:append(" [dummy]")
        t:add_proto_expert_info(e.dummy)
    elseif status == "eesp-unsupported-version" then
        -- reported by the header checks
    elseif policy_status[status] then
        t:add_proto_expert_info(e.dropped, info.message ..
            (info.icv_valid and " (the ICV was valid)" or ""))
    elseif not (header_status[status] and problems > 0) then
        t:add_proto_expert_info(e.malformed, info.message)
    end
    return len
end

eesp.dissector = dissect_eesp

-- UDP 4500 (§14): keepalive, IKE (non-ESP marker), EESP (MSB 1) or ESP, in that order.
local eesp_handle = Dissector.get("eesp")

local function call_previous(tvb, pinfo, tree)
    local d = previous_udp or data_dissector
    if not d then
        return 0
    end
    local ok, res = pcall(function() return d:call(tvb, pinfo, tree) end)
    if not ok then
        tree:add_proto_expert_info(e.malformed, "dissector for UDP port " .. tostring(registered_port) ..
            " failed: " .. tostring(res))
        return tvb:len()
    end
    return res
end

function eesp_udp.dissector(tvb, pinfo, tree)
    local len = tvb:len()
    local reported = tvb:reported_len()
    if len == 0 then
        return call_previous(tvb, pinfo, tree)
    end
    local first = tvb(0, 1):uint()
    if reported == 1 and first == 0xff then
        return call_previous(tvb, pinfo, tree) -- NAT keepalive
    end
    if len >= 4 and tvb(0, 4):uint() == 0 then
        return call_previous(tvb, pinfo, tree) -- IKE after the non-ESP marker
    end
    if band(first, 0x80) == 0 then
        return call_previous(tvb, pinfo, tree) -- ESP
    end
    if eesp_handle then
        return eesp_handle:call(tvb, pinfo, tree)
    end
    return dissect_eesp(tvb, pinfo, tree)
end

register()
