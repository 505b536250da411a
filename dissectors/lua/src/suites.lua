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

