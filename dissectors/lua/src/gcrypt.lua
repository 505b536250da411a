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
