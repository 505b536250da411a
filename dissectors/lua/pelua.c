/*
 * pelua: the project's C core as a Lua C module, so that the Lua dissectors
 * (psp.lua, eesp.lua) can decrypt inside Wireshark, whose Lua has no crypto
 * API before 4.6 (docs/wireshark.md, Platform notes).  One
 * source for the Lua of each Wireshark: 5.2 (4.0) and 5.4 (4.4, 4.6).
 *
 * Build with the headers of that Lua (-I/usr/include/lua5.2 or lua5.4) and do
 * NOT link liblua: the lua_* symbols resolve from the liblua5.x.so.0 that
 * libwireshark already loaded; a second Lua in the process would corrupt it.
 *
 *   local pelua = require "pelua"
 *   pelua.version                               -> "0.2.0"
 *   pelua.load_keyfile(path)                    -> keys | nil, message, status
 *   keys:psp_open(udp_payload)                  -> status, inner | nil, info
 *   keys:eesp_open(eesp, ip_version, dst | nil) -> status, inner | nil, info
 *   keys:summary()                              -> {psp_master0=, psp_master1=, psp_keys=, eesp_sas=,
 *                                                   reference_config=}
 *   keys:close()                                   frees and wipes now (also done by __gc)
 *
 * load_keyfile reads what the plugin's key-file preference reads: the
 * project's key file (docs/keys.md), or a google/psp reference config
 * (psp_encrypt/psp_decrypt -c), told apart by the core's rule
 * (pe_psp_refcfg_detect) so that every reader decides alike.  A key file
 * gives a PSP receiver with the psp-master pair and every psp-key
 * (pe_keyfile_psp_rx_new) and an EESP receiver with one SA per eesp-sa line
 * (ip_protocol from the first line, default 49); a reference config gives a
 * PSP receiver with its two master keys (whatever SA follows them, as
 * psp_decrypt reads it) and no EESP SA.  The text is wiped right away; the
 * receivers keep their own copies until close/__gc.  On failure message names
 * the file, line and field, never a value ("path, line N: ..." or
 * "path: ..."), and status is the core's status name of the problem
 * ("keyfile-bad-value", "capture-io", ...), whose category says what kind of
 * problem it is.
 *
 * status is pe_status_name() ("ok", "authentication-failed", "no-key", ...).
 * inner is the decrypted part (pe_psp_open / pe_eesp_open): the L4 segment in
 * transport mode, the inner IP packet in tunnel mode; nil unless status is "ok".
 *
 * psp info: next_header, hdr_ext_len, crypt_offset, version, version_name,
 *   virt, spi, iv (number: exact below 2^53 in Lua 5.2, an integer below 2^63
 *   in 5.4), iv_hex (16 hex digits), tunnel,
 *   icv_valid (status == "ok"), status, category (the status's category,
 *   pe_category_name(pe_status_category())), message (pe_status_message), and with
 *   status "ok" ext (the extension area as sent, VC decrypted when the crypt
 *   offset left it encrypted).
 * eesp info: spi, session_id, opt_len, seq (number), seq_hex, seq_present,
 *   iv_len, icv_len, payload_offset (0 until the SA and options are known),
 *   full_format, format ("full" / "optimized"; "" until the layout is known), next_header,
 *   pad_len, sa_found, icv_valid, status, category, message; with sa_found also suite
 *   (pe_ipsec_suite_name, e.g. "ENCR_AES_GCM_16"), key_bits and mode
 *   ("tunnel" / "transport").  eesp_open uses PE_EESP_OPEN_NO_REPLAY: a
 *   dissector revisits packets.  ip_version is 4 or 6; dst is the outer
 *   destination as 4 / 16 raw octets (network order), or nil to match only
 *   SAs without dst.
 *
 * Wrong argument types raise the usual Lua argument errors; any octets of any
 * length are fine as packet input (output buffers are sized from the input).
 * Nothing here ever returns or prints key material.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>

#if LUA_VERSION_NUM < 502 || LUA_VERSION_NUM > 504
#error "pelua is written for Lua 5.2 to 5.4 (luaL_setfuncs, luaL_setmetatable, lua_newuserdata)"
#endif

#include "pe/eesp.h"
#include "pe/kdf.h"
#include "pe/keyfile.h"
#include "pe/psp.h"
#include "pe/status.h"
#include "pe/wipe.h"

#define PELUA_VERSION "0.2.0"
#define KEYS_MT "pelua.keys"

typedef struct pelua_keys {
    pe_psp_rx *psp;
    pe_eesp_rx *eesp;
    int psp_master0, psp_master1;
    int reference_config; /* the keys came from a google/psp reference config */
    size_t n_psp_keys, n_eesp_sas;
} pelua_keys;

static void keys_release(pelua_keys *k)
{
    pe_psp_rx_free(k->psp);
    k->psp = NULL;
    pe_eesp_rx_free(k->eesp);
    k->eesp = NULL;
}

static pelua_keys *check_keys(lua_State *L)
{
    pelua_keys *k = luaL_checkudata(L, 1, KEYS_MT);
    if (!k->psp || !k->eesp)
        luaL_argerror(L, 1, "the keys were closed");
    return k;
}

static int keys_gc(lua_State *L)
{
    pelua_keys *k = luaL_checkudata(L, 1, KEYS_MT);
    keys_release(k);
    return 0;
}

static int keys_close(lua_State *L)
{
    pelua_keys *k = luaL_checkudata(L, 1, KEYS_MT);
    keys_release(k);
    return 0;
}

static int keys_tostring(lua_State *L)
{
    pelua_keys *k = luaL_checkudata(L, 1, KEYS_MT);
    if (!k->psp)
        lua_pushstring(L, "pelua.keys (closed)");
    else if (k->reference_config)
        lua_pushstring(L, "pelua.keys (google/psp reference config: PSP master keys 0+1)");
    else
        lua_pushfstring(L, "pelua.keys (PSP master keys: %s%s, PSP derived keys: %d, EESP SAs: %d)",
                        k->psp_master0 ? "0" : "", k->psp_master1 ? (k->psp_master0 ? "+1" : "1") : "",
                        (int)k->n_psp_keys, (int)k->n_eesp_sas);
    return 1;
}

/*
 * A count or header field as a Lua number.  Lua 5.3+ has an integer subtype:
 * without it a value would be a float there (tostring gives "4.0", and
 * string.format("%x") refuses floats above 2^53).  64-bit values also get a
 * _hex twin, exact in every Lua.
 */
static void push_uint(lua_State *L, uint64_t v)
{
#if LUA_VERSION_NUM >= 503
    if (v <= (uint64_t)LUA_MAXINTEGER) {
        lua_pushinteger(L, (lua_Integer)v);
        return;
    }
#endif
    lua_pushnumber(L, (lua_Number)v);
}

static void set_int(lua_State *L, const char *name, uint64_t v)
{
    push_uint(L, v);
    lua_setfield(L, -2, name);
}

static int keys_summary(lua_State *L)
{
    pelua_keys *k = check_keys(L);
    lua_createtable(L, 0, 5);
    lua_pushboolean(L, k->psp_master0);
    lua_setfield(L, -2, "psp_master0");
    lua_pushboolean(L, k->psp_master1);
    lua_setfield(L, -2, "psp_master1");
    set_int(L, "psp_keys", k->n_psp_keys);
    set_int(L, "eesp_sas", k->n_eesp_sas);
    lua_pushboolean(L, k->reference_config);
    lua_setfield(L, -2, "reference_config");
    return 1;
}

/* Scratch memory owned by Lua: freed by the collector even when a later API call raises. */
static uint8_t *scratch(lua_State *L, size_t len)
{
    return lua_newuserdata(L, len ? len : 1);
}

static void set_bool(lua_State *L, const char *name, int v)
{
    lua_pushboolean(L, v != 0);
    lua_setfield(L, -2, name);
}

static void set_str(lua_State *L, const char *name, const char *v)
{
    lua_pushstring(L, v);
    lua_setfield(L, -2, name);
}

static void set_hex64(lua_State *L, const char *name, uint64_t v)
{
    char hex[17];
    snprintf(hex, sizeof hex, "%016" PRIx64, v);
    set_str(L, name, hex);
}


/* nil, "path, line N: message" or "path: message", status name: a key file pelua could not use. */
static int load_failed(lua_State *L, const char *path, pe_status st, size_t line, const char *kind, const char *message)
{
    lua_pushnil(L);
    if (line)
        lua_pushfstring(L, "%s, line %d: %s%s", path, (int)line, kind, message);
    else
        lua_pushfstring(L, "%s: %s%s", path, kind, message);
    lua_pushstring(L, pe_status_name(st));
    return 3;
}

/* A reference config's two master keys (psp_decrypt reads nothing else from it). */
static pe_status load_refcfg(pelua_keys *k, const pe_psp_refcfg *ref)
{
    pe_psp_rx_config cfg;
    pe_psp_rx_config_init(&cfg);
    cfg.master_key0 = ref->key0;
    cfg.master_key1 = ref->key1;
    pe_status st = pe_psp_rx_new(&cfg, &k->psp);
    if (st == PE_OK) {
        pe_eesp_rx_config rc;
        pe_eesp_rx_config_init(&rc);
        st = pe_eesp_rx_new(&rc, &k->eesp);
    }
    k->psp_master0 = k->psp_master1 = st == PE_OK;
    k->reference_config = 1;
    return st;
}

/* pelua.load_keyfile(path) -> keys | nil, message, status */
static int l_load_keyfile(lua_State *L)
{
    size_t path_len;
    const char *path = luaL_checklstring(L, 1, &path_len);
    if (path_len == 0 || strlen(path) != path_len)
        return luaL_argerror(L, 1, "a file name, without NUL octets");
    pelua_keys *k = lua_newuserdata(L, sizeof *k);
    memset(k, 0, sizeof *k);
    luaL_setmetatable(L, KEYS_MT);

    pe_keyfile_error err;
    memset(&err, 0, sizeof err);
    char *text;
    size_t len;
    pe_status st = pe_keyfile_read_text(path, &text, &len, &err); /* the core's reader: its cap and messages */
    if (st != PE_OK)
        return load_failed(L, path, st, 0, "", err.message[0] ? err.message : pe_status_message(st));

    /* The core's rule decides which reader, as in the plugin: every reader of a key-file setting decides alike. */
    pe_keyfile kf;
    memset(&kf, 0, sizeof kf);
    pe_psp_refcfg ref;
    int refcfg = pe_psp_refcfg_detect(text, len);
    if (refcfg)
        st = pe_psp_refcfg_parse(text, len, &ref, &err);
    else
        st = pe_keyfile_parse(text, len, &kf, &err);
    pe_keyfile_text_free(text, len);
    if (st != PE_OK)
        return load_failed(L, path, st, err.line, refcfg ? "google/psp reference config: " : "",
                           err.message[0] ? err.message : pe_status_message(st));
    if (refcfg) {
        st = load_refcfg(k, &ref);
        pe_wipe(&ref, sizeof ref);
        if (st != PE_OK) {
            keys_release(k);
            return load_failed(L, path, st, 0, "google/psp reference config: ", pe_status_message(st));
        }
        return 1;
    }

    /* Everything from here may fail with a message naming a line, never a value. */
    char msg[256];
    size_t line = 0;
    msg[0] = 0;
    st = pe_keyfile_psp_rx_new(&kf, &k->psp);
    if (st != PE_OK)
        snprintf(msg, sizeof msg, "PSP keys: %s", pe_status_message(st));
    if (st == PE_OK) {
        pe_eesp_rx_config rc;
        pe_eesp_rx_config_init(&rc);
        if (kf.n_eesp_sas)
            rc.ip_protocol = kf.eesp_sas[0].ip_protocol;
        st = pe_eesp_rx_new(&rc, &k->eesp);
        if (st != PE_OK)
            snprintf(msg, sizeof msg, "EESP receiver: %s", pe_status_message(st));
    }
    for (size_t i = 0; st == PE_OK && i < kf.n_eesp_sas; i++) {
        pe_eesp_sa_config cfg;
        pe_keyfile_eesp_sa_config(&kf.eesp_sas[i], 1, &cfg);
        st = pe_eesp_rx_add_sa(k->eesp, &cfg);
        if (st != PE_OK) {
            line = kf.eesp_sas[i].line;
            /* The plugin's words for the one refusal a parsed file can still meet. */
            if (st == PE_ERR_INVALID_ARGUMENT)
                snprintf(msg, sizeof msg, "an EESP SA with SPI 0x%08" PRIx32 " and this destination is already "
                         "configured", kf.eesp_sas[i].spi);
            else
                snprintf(msg, sizeof msg, "eesp-sa: %s", pe_status_message(st));
        }
    }
    k->psp_master0 = kf.n_psp_master && kf.psp_master.has_key0;
    k->psp_master1 = kf.n_psp_master && kf.psp_master.has_key1;
    k->n_psp_keys = kf.n_psp_keys;
    k->n_eesp_sas = kf.n_eesp_sas;
    pe_keyfile_free(&kf); /* the receivers hold their own copies: wipe the file's now */
    if (st != PE_OK) {
        keys_release(k);
        return load_failed(L, path, st, line, "", msg);
    }
    return 1;
}

/* keys:psp_open(payload) -> status, inner | nil, info */
static int l_psp_open(lua_State *L)
{
    pelua_keys *k = check_keys(L);
    size_t len;
    const char *in = luaL_checklstring(L, 2, &len);
    uint8_t *out = scratch(L, len);
    size_t out_len = 0;
    pe_psp_hdr hdr;
    memset(&hdr, 0, sizeof hdr);
    pe_status st = pe_psp_open(k->psp, (const uint8_t *)in, len, out, len, &out_len, &hdr);

    lua_pushstring(L, pe_status_name(st));
    if (st == PE_OK && out_len <= len)
        lua_pushlstring(L, (const char *)out, out_len);
    else
        lua_pushnil(L);
    lua_createtable(L, 0, 16);
    set_int(L, "next_header", hdr.next_header);
    set_int(L, "hdr_ext_len", hdr.hdr_ext_len);
    set_int(L, "crypt_offset", hdr.crypt_offset);
    set_int(L, "version", hdr.version);
    set_str(L, "version_name", pe_psp_version_name(hdr.version));
    set_bool(L, "virt", hdr.virt);
    set_int(L, "spi", hdr.spi);
    set_int(L, "iv", hdr.iv);
    set_hex64(L, "iv_hex", hdr.iv);
    set_bool(L, "tunnel", hdr.next_header == 4 || hdr.next_header == 41);
    set_bool(L, "icv_valid", st == PE_OK);
    set_str(L, "status", pe_status_name(st));
    set_str(L, "category", pe_category_name(pe_status_category(st)));
    set_str(L, "message", pe_status_message(st));
    /* The extension area as sent; decrypted when the crypt offset left part of the VC encrypted. */
    if (st == PE_OK && hdr.ext && hdr.ext_len <= len) {
        lua_pushlstring(L, (const char *)hdr.ext, hdr.ext_len);
        lua_setfield(L, -2, "ext");
    }
    return 3;
}

static const uint8_t *check_dst(lua_State *L, int arg, int ip_version)
{
    if (lua_isnoneornil(L, arg))
        return NULL;
    size_t len;
    const char *dst = luaL_checklstring(L, arg, &len);
    if (len != (ip_version == 4 ? 4u : 16u))
        luaL_argerror(L, arg, ip_version == 4 ? "an IPv4 destination is 4 octets (network order)"
                                              : "an IPv6 destination is 16 octets (network order)");
    return (const uint8_t *)dst;
}

/* keys:eesp_open(eesp, ip_version, dst | nil) -> status, inner | nil, info */
static int l_eesp_open(lua_State *L)
{
    pelua_keys *k = check_keys(L);
    size_t len;
    const char *in = luaL_checklstring(L, 2, &len);
    lua_Integer ipv = luaL_checkinteger(L, 3);
    if (ipv != 4 && ipv != 6)
        return luaL_argerror(L, 3, "IP version must be 4 or 6");
    const uint8_t *dst = check_dst(L, 4, (int)ipv);
    uint8_t *out = scratch(L, len);
    pe_eesp_info *info = (pe_eesp_info *)scratch(L, sizeof *info);
    memset(info, 0, sizeof *info);
    size_t out_len = 0;
    pe_status st = pe_eesp_open(k->eesp, (const uint8_t *)in, len, (int)ipv, dst, PE_EESP_OPEN_NO_REPLAY, out, len,
                                &out_len, info);

    lua_pushstring(L, pe_status_name(st));
    if (st == PE_OK && out_len <= len)
        lua_pushlstring(L, (const char *)out, out_len);
    else
        lua_pushnil(L);
    lua_createtable(L, 0, 24);
    set_int(L, "spi", info->hdr.spi);
    set_int(L, "session_id", info->hdr.session_id);
    set_int(L, "opt_len", info->hdr.opt_len);
    set_int(L, "seq", info->seq);
    set_hex64(L, "seq_hex", info->seq);
    set_bool(L, "seq_present", info->seq_present);
    set_int(L, "iv_len", info->iv_len);
    set_int(L, "icv_len", info->icv_len);
    set_int(L, "payload_offset", info->payload_offset);
    set_bool(L, "full_format", info->full_format);
    set_str(L, "format", info->payload_offset ? (info->full_format ? "full" : "optimized") : "");
    set_int(L, "next_header", info->next_header);
    set_int(L, "pad_len", info->pad_len);
    if (info->sa_found) {
        set_str(L, "suite", pe_ipsec_suite_name(&info->suite));
        set_int(L, "key_bits", info->suite.key_len * 8);
        set_str(L, "mode", info->mode == PE_EESP_TUNNEL ? "tunnel" : "transport");
    }
    set_bool(L, "sa_found", info->sa_found);
    set_bool(L, "icv_valid", info->icv_valid);
    set_str(L, "status", pe_status_name(st));
    set_str(L, "category", pe_category_name(pe_status_category(st)));
    set_str(L, "message", pe_status_message(st));
    return 3;
}

static const luaL_Reg keys_methods[] = {
    {"psp_open", l_psp_open},
    {"eesp_open", l_eesp_open},
    {"summary", keys_summary},
    {"close", keys_close},
    {NULL, NULL},
};

static const luaL_Reg module_functions[] = {
    {"load_keyfile", l_load_keyfile},
    {NULL, NULL},
};

#ifndef PELUA_API
#define PELUA_API
#endif
PELUA_API int luaopen_pelua(lua_State *L);
PELUA_API int luaopen_pelua(lua_State *L)
{
    if (luaL_newmetatable(L, KEYS_MT)) {
        luaL_newlib(L, keys_methods);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, keys_gc);
        lua_setfield(L, -2, "__gc");
        lua_pushcfunction(L, keys_tostring);
        lua_setfield(L, -2, "__tostring");
        lua_pushliteral(L, "pelua.keys");
        lua_setfield(L, -2, "__metatable"); /* getmetatable() cannot reach or replace it */
    }
    lua_pop(L, 1);
    luaL_newlib(L, module_functions);
    lua_pushliteral(L, PELUA_VERSION);
    lua_setfield(L, -2, "version");
    return 1;
}
