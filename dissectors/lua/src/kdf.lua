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

