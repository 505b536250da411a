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

