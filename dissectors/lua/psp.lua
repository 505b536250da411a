-- PSP Security Protocol dissector for Wireshark 4.0 (Lua 5.2).
--
-- Header dissection is pure Lua.  Decryption needs the project's C module
-- "pelua" (dissectors/lua/pelua.c; LUA_CPATH_5_2 or the Lua 5.2 cpath) and a
-- key file (docs/keys.md) named by the preference psp.keyfile:
--
--   tshark -X lua_script:psp.lua -o psp.keyfile:keys.txt -r capture.pcapng
--
-- Field names follow google/psp's psp.lua and the project's C plugin, which
-- registers the same names: load one or the other.  When a "psp" protocol is
-- already registered this script says so on stderr and registers nothing.

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

local have_pelua, pelua = pcall(require, "pelua")
if not have_pelua or type(pelua) ~= "table" or type(pelua.load_keyfile) ~= "function" then
    pelua = nil
end

local band, rshift = bit32.band, bit32.rshift

local ICV_LEN = 16
local BASE_LEN = 16
local VC_LEN = 8

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

local e = {
    no_key = ProtoExpert.new("psp.expert.no_key", "No key to decrypt this packet",
        expert.group.UNDECODED, expert.severity.NOTE),
    icv_bad = ProtoExpert.new("psp.expert.icv_bad", "ICV verification failed",
        expert.group.CHECKSUM, expert.severity.ERROR),
    malformed = ProtoExpert.new("psp.expert.malformed", "Malformed PSP packet",
        expert.group.MALFORMED, expert.severity.ERROR),
    version_unknown = ProtoExpert.new("psp.expert.version_unknown", "Unknown PSP version",
        expert.group.PROTOCOL, expert.severity.WARN),
    no_module = ProtoExpert.new("psp.expert.no_module", "decryption needs the pelua module (see docs/wireshark.md)",
        expert.group.UNDECODED, expert.severity.NOTE),
}
psp.experts = { e.no_key, e.icv_bad, e.malformed, e.version_unknown, e.no_module }

psp.prefs.keyfile = Pref.string("Key file", "",
    "Key file (docs/keys.md) with psp-master / psp-key lines; decryption needs the pelua module")
psp.prefs.udp_port = Pref.uint("UDP port", 1000, "UDP destination port of PSP")

-- Key file, (re)loaded when the preference changes ----------------------------------------------

local keys, keys_err, keys_path = nil, nil, nil

local function current_keys()
    local path = psp.prefs.keyfile or ""
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

local status_is_header_error = {
    ["psp-truncated"] = true, ["psp-always-one-bit-clear"] = true, ["psp-bad-hdr-ext-len"] = true,
    ["psp-vc-without-room"] = true, ["psp-crypt-offset-past-payload"] = true,
    ["psp-unsupported-version"] = true,
}

local function hex(s)
    return (s:gsub(".", function(c) return string.format("%02x", c:byte()) end))
end

local function dissect_inner(inner, nh, pinfo, tree, ptree)
    local tvb = ByteArray.new(inner, true):tvb("Decrypted PSP")
    local ok, err = pcall(function() ip_proto_table:try(nh, tvb, pinfo, tree) end)
    if not ok then
        ptree:add_proto_expert_info(e.malformed, "decrypted packet could not be dissected: " .. tostring(err))
    end
end

function psp.dissector(tvb, pinfo, tree)
    local len = tvb:len()
    local reported = tvb:reported_len()
    if len == 0 then
        return 0
    end
    pinfo.cols.protocol:set("PSP")
    local t = tree:add(psp, tvb(0, math.min(len, reported)))
    local function have(off, n)
        return off + n <= len
    end

    -- Fixed header, as far as the octets go.
    local problems = 0
    local function malformed(text)
        problems = problems + 1
        t:add_proto_expert_info(e.malformed, text)
    end
    if have(0, 1) then t:add(f.nexthdr, tvb(0, 1)) end
    if have(1, 1) then t:add(f.hdrextlen, tvb(1, 1)) end
    if have(2, 1) then
        t:add(f.reserved0, tvb(2, 1))
        t:add(f.cryptoffset, tvb(2, 1))
    end
    if have(3, 1) then
        t:add(f.reserved1, tvb(3, 1))
        t:add(f.sample, tvb(3, 1))
        t:add(f.drop, tvb(3, 1))
        t:add(f.version, tvb(3, 1))
        t:add(f.is_virt, tvb(3, 1))
        t:add(f.one_bit, tvb(3, 1))
    end
    if have(4, 4) then
        local si = t:add(f.spi, tvb(4, 4))
        si:add(f.master_key, tvb(4, 4))
    end
    if have(8, 8) then t:add(f.iv, tvb(8, 8)) end
    if reported < BASE_LEN or not have(0, BASE_LEN) then
        pinfo.cols.info:set("PSP (truncated)")
        malformed(string.format("PSP packet of %d octets is shorter than its 16-octet header", reported))
        return len
    end

    local nh = tvb(0, 1):uint()
    local hdrextlen = tvb(1, 1):uint()
    local co = band(tvb(2, 1):uint(), 0x3f)
    local octet3 = tvb(3, 1):uint()
    local version = rshift(band(octet3, 0x3c), 2)
    local virt = band(octet3, 0x02) ~= 0
    local spi = tvb(4, 4):uint()
    local iv = tvb(8, 8):uint64()
    local hlen = (hdrextlen + 1) * 8

    pinfo.cols.info:set(string.format("PSP SPI=0x%08x IV=%s v%d %s", spi, tostring(iv), version,
        versions[version] or "reserved"))

    -- Receiver checks, in the decoder's order (psp.md §7).
    if reported < BASE_LEN + ICV_LEN then
        malformed(string.format("PSP packet of %d octets is shorter than header and ICV (32 octets)", reported))
    end
    if band(octet3, 0x01) == 0 then
        malformed("the always-one bit is clear")
    end
    if version > 3 then
        t:add_proto_expert_info(e.version_unknown, string.format("PSP version %d is reserved (only 0-3 are defined)", version))
    end
    local header_ok = true
    if hdrextlen < 1 then
        malformed("Hdr Ext Len 0: the header is at least 16 octets (Hdr Ext Len 1)")
        header_ok = false
    elseif virt and hdrextlen < 2 then
        malformed("V bit set but Hdr Ext Len leaves no room for the Virtualization Cookie")
        header_ok = false
    elseif hlen + ICV_LEN > reported then
        malformed(string.format("Hdr Ext Len %d (header %d octets) runs past the packet", hdrextlen, hlen))
        header_ok = false
    elseif reported >= BASE_LEN + ICV_LEN and co * 4 > reported - BASE_LEN - ICV_LEN then
        malformed(string.format("Crypt Offset %d words points past the end of the payload", co))
    end

    -- Decryption (its result also shapes how the VC is shown).
    local status, inner, info, why_not
    local path = psp.prefs.keyfile or ""
    if path == "" then
        why_not = function() t:add_proto_expert_info(e.no_key, "no key file set (preference psp.keyfile)") end
    elseif not pelua then
        why_not = function() t:add_proto_expert_info(e.no_module) end
    else
        local k, kerr = current_keys()
        if not k then
            why_not = function() t:add_proto_expert_info(e.no_key, "key file not loaded: " .. tostring(kerr)) end
        elseif len < reported then
            why_not = function() t:add_proto_expert_info(e.no_key, "packet cut short by the capture: not decrypted") end
        else
            status, inner, info = k:psp_open(tvb:raw(0, len))
        end
    end
    local vc_decrypted = status == "ok" and info.ext and #info.ext >= VC_LEN and co * 4 < VC_LEN

    -- Extension area: VC first when V is set, then opaque octets.
    local ext_end = header_ok and hlen or BASE_LEN
    local vc_item
    if header_ok and virt and have(BASE_LEN, VC_LEN) then
        if vc_decrypted then
            -- The crypt offset left (part of) the VC encrypted: show the decrypted value on its octets.
            local vc = info.ext:sub(1, VC_LEN)
            vc_item = t:add(f.vc, tvb(BASE_LEN, VC_LEN), UInt64.fromhex(hex(vc)))
            vc_item:append_text(" (decrypted)")
            vc_item:add(f.sectoken, tvb(BASE_LEN, 4), tonumber(hex(vc:sub(1, 4)), 16))
            vc_item:add(f.virtkey, tvb(BASE_LEN + 4, 4), tonumber(hex(vc:sub(5, 8)), 16))
        else
            vc_item = t:add(f.vc, tvb(BASE_LEN, VC_LEN))
            vc_item:add(f.sectoken, tvb(BASE_LEN, 4))
            vc_item:add(f.virtkey, tvb(BASE_LEN + 4, 4))
            if co * 4 < VC_LEN then
                vc_item:append_text(" (encrypted)")
            end
        end
    end
    local ext_start = (header_ok and virt) and BASE_LEN + VC_LEN or BASE_LEN
    if header_ok and ext_end > ext_start and have(ext_start, ext_end - ext_start) then
        t:add(f.ext, tvb(ext_start, ext_end - ext_start))
    end

    -- Payload and ICV (from the reported length: the ICV closes the packet).
    local icv_off = reported - ICV_LEN
    if header_ok and icv_off > ext_end and have(ext_end, icv_off - ext_end) then
        t:add(f.payload, tvb(ext_end, icv_off - ext_end))
    end
    if reported >= BASE_LEN + ICV_LEN and have(icv_off, ICV_LEN) then
        t:add(f.icv, tvb(icv_off, ICV_LEN))
    end

    if why_not then
        why_not()
        return len
    end

    local si = t:add(f.status, status)
    si:set_generated()
    if status ~= "ok" then
        si:append_text(" (" .. info.message .. ")")
    end
    t:add(f.icv_good, status == "ok"):set_generated()
    t:add(f.icv_bad, status == "authentication-failed"):set_generated()

    if status == "ok" then
        pinfo.cols.info:append(" [decrypted]")
        if inner then
            dissect_inner(inner, nh, pinfo, tree, t)
        end
    elseif status == "authentication-failed" then
        pinfo.cols.info:append(" [ICV bad]")
        t:add_proto_expert_info(e.icv_bad, "ICV verification failed: wrong key, or the packet was changed")
    elseif status == "no-key" then
        t:add_proto_expert_info(e.no_key, string.format("no key for SPI 0x%08x, version %d in the key file", spi, version))
    elseif status == "psp-unsupported-version" or status == "psp-version-disabled" then
        if version <= 3 then
            t:add_proto_expert_info(e.version_unknown, info.message)
        end
    elseif not (status_is_header_error[status] and problems > 0) then
        t:add_proto_expert_info(e.malformed, info.message)
    end
    return len
end

register_port()
