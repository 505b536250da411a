-- pecrypto: PSP and EESP decryption in pure Lua, for psp.lua and eesp.lua when the pelua C module is absent.
--
-- The code is in the modules below, one concern each, and is one chunk: each module uses the locals of those
-- before it, so they are joined in this order.  dissectors/lua/build_scripts.py joins them the same way into the
-- string it inlines into psp.lua and eesp.lua (base.lua says how the scripts load it); this file is only for
-- running the source as it stands, as tests/wireshark/test_lua_pure.py does under lua5.4:
--
--   local pecrypto = dofile("dissectors/lua/src/pecrypto.lua")
local MODULES = {
    "base.lua",     -- the module's contract, the core's statuses, octet helpers
    "sha2.lua",     -- SHA-2, HMAC, HKDF-Expand
    "kdf.lua",      -- AES-CMAC, PSP key derivation, the core's PSP versions
    "suites.lua",   -- the core's ESP/EESP suites, Sub SA key derivation
    "keyfile.lua",  -- key files and google/psp reference configs
    "open.lua",     -- PSP and EESP open, keys from a key file
    "gcrypt.lua",   -- the backend over Wireshark 4.6's GcryptCipher
}

local dir = debug.getinfo(1, "S").source:match("^@(.*[/\\])") or ""
local parts = {}
for i, name in ipairs(MODULES) do
    local f = assert(io.open(dir .. name, "rb"))
    parts[i] = f:read("a")
    f:close()
end
return assert(load(table.concat(parts), "=pecrypto.lua", "t"))(...)
