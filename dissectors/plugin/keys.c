/* Key tables and key files for the PSP and EESP dissectors (keys.h). */
#define WS_BUILD_DLL
#include <wireshark.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <epan/packet.h>
#include <epan/prefs.h>
#include <epan/uat.h>
#include <wsutil/wslog.h>

#include "keys.h"
#include "pe/keyfile.h"
#include "pe/wipe.h"
#include "ws_compat.h"

/* Wipe a string holding key material before it is freed. */
static void free_secret(char *s)
{
    if (s) {
        pe_wipe(s, strlen(s));
        g_free(s);
    }
}

static gboolean is_any(const char *s)
{
    return !s || !*s || strcmp(s, "*") == 0;
}

/*
 * Every row becomes one key-file line, so a field must not reach past its own
 * value: a line break would add lines of its own (a second key, another SA),
 * a space further settings, a '#' would comment out the settings after it.
 * NULL when the value is fine, else the complaint (the value itself is never
 * quoted: it may be a key).
 */
static char *field_problem(const char *title, const char *value, gboolean single_value)
{
    if (!value)
        return NULL;
    for (const char *c = value; *c; c++) {
        if (*c == '\n' || *c == '\r')
            return g_strdup_printf("%s must be one line (it holds a line break)", title);
        if (single_value && (*c == ' ' || *c == '\t' || *c == '#'))
            return g_strdup_printf("%s must be a single value (no spaces or '#')", title);
    }
    return NULL;
}

/* ", line N" for an error tied to a line (the message itself never holds key material). */
static const char *line_note(const pe_keyfile_error *ke)
{
    static char note[32];
    if (ke->line == 0)
        return "";
    snprintf(note, sizeof note, ", line %zu", ke->line);
    return note;
}

static void problems_clear(pe_ws_key_problems *p)
{
    for (size_t i = 0; i < p->n; i++)
        g_free(p->v[i].text);
    g_free(p->v);
    p->v = NULL;
    p->n = 0;
}

/*
 * Record a key problem for the packets and say it on the console: a dialog
 * in the middle of dissection would be seen once and then only "no key".
 */
static void G_GNUC_PRINTF(3, 4) problem(pe_ws_key_problems *p, pe_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *text = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    ws_log("psp_eesp", LOG_LEVEL_WARNING, "%s", text);
    p->v = g_realloc(p->v, (p->n + 1) * sizeof *p->v);
    p->v[p->n].status = st;
    p->v[p->n].text = text;
    p->n++;
}

/* ------------------------------------------------------------ key files */


/* What the key-file preference named: a key file, or a reference config's master keys. */
typedef struct key_source {
    pe_keyfile kf; /* empty for a reference config */
    gboolean refcfg;
    pe_psp_refcfg ref;
} key_source;

/* Load the file; on failure a problem naming it (and the line) is recorded. */
static gboolean key_source_load(key_source *ks, const char *what, const char *path, pe_ws_key_problems *problems)
{
    memset(ks, 0, sizeof *ks);
    char *text;
    size_t len;
    pe_keyfile_error ke;
    pe_status st = pe_keyfile_read_text(path, &text, &len, &ke); /* the core's reader: its cap and messages */
    const char *kind = "";
    if (st == PE_OK) {
        ks->refcfg = pe_psp_refcfg_detect(text, len); /* the core's rule: every reader decides alike */
        if (ks->refcfg) {
            kind = "google/psp reference config: ";
            st = pe_psp_refcfg_parse(text, len, &ks->ref, &ke);
        } else {
            st = pe_keyfile_parse(text, len, &ks->kf, &ke);
        }
        pe_keyfile_text_free(text, len);
    }
    if (st != PE_OK)
        problem(problems, st, "%s key file %s%s: %s%s", what, path, line_note(&ke), kind,
                ke.message[0] ? ke.message : pe_status_message(st));
    return st == PE_OK;
}

static void key_source_free(key_source *ks)
{
    pe_keyfile_free(&ks->kf);
    pe_wipe(&ks->ref, sizeof ks->ref);
}

/* Parse one generated key-file line; on failure *err gets a message naming the column values' problem. */
static gboolean parse_line(const GString *text, pe_keyfile *kf, char **err)
{
    pe_keyfile_error ke;
    pe_status st = pe_keyfile_parse(text->str, text->len, kf, &ke);
    if (st != PE_OK) {
        if (err)
            *err = g_strdup(ke.message[0] ? ke.message : pe_status_message(st));
        return FALSE;
    }
    /* field_problem() keeps a row to one line; this holds whatever the parser makes of it. */
    if (kf->n_psp_master + kf->n_psp_keys + kf->n_psp_sas + kf->n_eesp_sas != 1) {
        pe_keyfile_free(kf);
        if (err)
            *err = g_strdup("a row must make exactly one key-file entry");
        return FALSE;
    }
    return TRUE;
}

/* ------------------------------------------------------------------ PSP */

enum { PSP_MASTER_PAIR = 0, PSP_DERIVED = 1 };
static const value_string psp_key_types[] = {
    {PSP_MASTER_PAIR, "master-pair"},
    {PSP_DERIVED, "derived"},
    {0, NULL},
};

typedef struct psp_key_rec {
    char *spi;      /* "*" for a master pair */
    char *version;  /* "*" or 0..3 */
    guint key_type;
    char *key0;     /* master key 0 (SPI MSB 0), or the derived key */
    char *key1;     /* master key 1 (SPI MSB 1) */
} psp_key_rec;

static psp_key_rec *psp_recs;
static guint n_psp_recs;
static const char *psp_keyfile_path = "";

typedef struct psp_keys {
    pe_psp_rx **rx; /* tried in order */
    size_t n;
} psp_keys;
static psp_keys psp_live;
static pe_ws_key_problems psp_problems;
static gboolean psp_dirty = TRUE;

UAT_CSTRING_CB_DEF(psp_keys, spi, psp_key_rec)
UAT_CSTRING_CB_DEF(psp_keys, version, psp_key_rec)
UAT_VS_DEF(psp_keys, key_type, psp_key_rec, guint, PSP_MASTER_PAIR, "master-pair")
UAT_CSTRING_CB_DEF(psp_keys, key0, psp_key_rec)
UAT_CSTRING_CB_DEF(psp_keys, key1, psp_key_rec)

/* Versions bitmask of a row, or -1. */
static int psp_row_versions(const psp_key_rec *r)
{
    if (is_any(r->version))
        return 0xf;
    if (strlen(r->version) == 1 && r->version[0] >= '0' && r->version[0] <= '3')
        return 1 << (r->version[0] - '0');
    return -1;
}

static gboolean psp_row_text(const psp_key_rec *r, GString *t, char **err)
{
    if ((*err = field_problem("SPI", r->spi, TRUE)) || (*err = field_problem("Version", r->version, TRUE)) ||
        (*err = field_problem("Key 0", r->key0, TRUE)) || (*err = field_problem("Key 1", r->key1, TRUE)))
        return FALSE;
    if (psp_row_versions(r) < 0) {
        *err = g_strdup("Version must be *, 0, 1, 2 or 3");
        return FALSE;
    }
    if (r->key_type == PSP_MASTER_PAIR) {
        if (!is_any(r->spi)) {
            *err = g_strdup("a master pair serves every SPI: leave SPI as *");
            return FALSE;
        }
        if ((!r->key0 || !*r->key0) && (!r->key1 || !*r->key1)) {
            *err = g_strdup("a master pair needs Key 0, Key 1 or both");
            return FALSE;
        }
        g_string_append(t, "psp-master");
        if (r->key0 && *r->key0)
            g_string_append_printf(t, " key0=%s", r->key0);
        if (r->key1 && *r->key1)
            g_string_append_printf(t, " key1=%s", r->key1);
    } else {
        if (is_any(r->spi) || !r->key0 || !*r->key0 || (r->key1 && *r->key1)) {
            *err = g_strdup("a derived key needs an SPI and Key 0, and no Key 1");
            return FALSE;
        }
        g_string_append_printf(t, "psp-key spi=%s key=%s", r->spi, r->key0);
        if (!is_any(r->version))
            g_string_append_printf(t, " version=%s", r->version);
    }
    g_string_append_c(t, '\n');
    return TRUE;
}

static pe_ws_bool psp_rec_update(void *rec, char **err)
{
    GString *t = g_string_new(NULL);
    pe_keyfile kf;
    gboolean ok = psp_row_text(rec, t, err) && parse_line(t, &kf, err);
    if (ok)
        pe_keyfile_free(&kf);
    pe_wipe(t->str, t->len);
    g_string_free(t, TRUE);
    return ok;
}

static void *psp_rec_copy(void *dst, const void *src, size_t len)
{
    const psp_key_rec *s = src;
    psp_key_rec *d = dst;
    d->spi = g_strdup(s->spi);
    d->version = g_strdup(s->version);
    d->key_type = s->key_type;
    d->key0 = g_strdup(s->key0);
    d->key1 = g_strdup(s->key1);
    return d;
}

static void psp_rec_free(void *rec)
{
    psp_key_rec *r = rec;
    g_free(r->spi);
    g_free(r->version);
    free_secret(r->key0);
    free_secret(r->key1);
}

static void psp_keys_clear(void)
{
    for (size_t i = 0; i < psp_live.n; i++)
        pe_psp_rx_free(psp_live.rx[i]);
    g_free(psp_live.rx);
    psp_live.rx = NULL;
    psp_live.n = 0;
    problems_clear(&psp_problems);
}

void pe_ws_psp_keys_changed(void)
{
    psp_dirty = TRUE;
}

static void psp_keys_add(pe_psp_rx *rx)
{
    psp_live.rx = g_realloc(psp_live.rx, (psp_live.n + 1) * sizeof *psp_live.rx);
    psp_live.rx[psp_live.n++] = rx;
}

static void psp_keys_build(void)
{
    psp_keys_clear();
    psp_dirty = FALSE;

    /* Per-SPI derived keys from the table, in one receiver without master keys. */
    pe_psp_rx_config cfg;
    pe_psp_rx_config_init(&cfg);
    pe_psp_rx *derived = NULL;
    pe_status st = pe_psp_rx_new(&cfg, &derived);
    if (st != PE_OK) {
        problem(&psp_problems, st, "PSP keys: %s", pe_status_message(st));
        return;
    }
    psp_keys_add(derived);

    GString *t = g_string_new(NULL);
    for (guint pass = 0; pass < 2; pass++) {
        for (guint i = 0; i < n_psp_recs; i++) {
            const psp_key_rec *r = &psp_recs[i];
            if ((pass == 0) != (r->key_type == PSP_DERIVED))
                continue;
            char *err = NULL;
            pe_keyfile kf;
            g_string_truncate(t, 0);
            if (!psp_row_text(r, t, &err) || !parse_line(t, &kf, &err)) {
                /* The table refused the row when it was entered; a row can still reach here from a UAT file. */
                problem(&psp_problems, PE_ERR_KEYFILE_VALUE, "PSP keys table, row %u: %s", i + 1, err);
                g_free(err);
                continue;
            }
            if (pass == 0) {
                const pe_psp_key_entry *k = &kf.psp_keys[0];
                st = pe_psp_rx_add_key(derived, k->spi, k->version, k->key, k->key_len);
                if (st != PE_OK)
                    problem(&psp_problems, st, "PSP keys table, row %u: %s", i + 1, pe_status_message(st));
            } else {
                pe_psp_rx_config_init(&cfg);
                cfg.master_key0 = kf.psp_master.has_key0 ? kf.psp_master.key0 : NULL;
                cfg.master_key1 = kf.psp_master.has_key1 ? kf.psp_master.key1 : NULL;
                cfg.versions = (unsigned)psp_row_versions(r);
                pe_psp_rx *rx = NULL;
                if ((st = pe_psp_rx_new(&cfg, &rx)) == PE_OK)
                    psp_keys_add(rx);
                else
                    problem(&psp_problems, st, "PSP keys table, row %u: %s", i + 1, pe_status_message(st));
            }
            pe_keyfile_free(&kf);
        }
        if (pass == 0 && psp_keyfile_path && *psp_keyfile_path) {
            /* The key file comes after the table's derived keys and before its master pairs. */
            key_source ks;
            if (key_source_load(&ks, "PSP", psp_keyfile_path, &psp_problems)) {
                pe_psp_rx *rx = NULL;
                if (ks.refcfg) {
                    /* psp_decrypt reads a reference config's master keys only, whatever SA follows them. */
                    pe_psp_rx_config_init(&cfg);
                    cfg.master_key0 = ks.ref.key0;
                    cfg.master_key1 = ks.ref.key1;
                    st = pe_psp_rx_new(&cfg, &rx);
                } else {
                    st = pe_keyfile_psp_rx_new(&ks.kf, &rx);
                }
                if (st == PE_OK)
                    psp_keys_add(rx);
                else
                    problem(&psp_problems, st, "PSP key file %s: %s", psp_keyfile_path, pe_status_message(st));
            }
            key_source_free(&ks);
        }
    }
    pe_wipe(t->str, t->len);
    g_string_free(t, TRUE);
}

pe_status pe_ws_psp_open(const uint8_t *psp, size_t len, uint8_t *out, size_t cap, size_t *out_len,
                         pe_psp_hdr *hdr)
{
    if (psp_dirty)
        psp_keys_build();
    pe_status best = PE_ERR_NO_KEY;
    for (size_t i = 0; i < psp_live.n; i++) {
        pe_status st = pe_psp_open(psp_live.rx[i], psp, len, out, cap, out_len, hdr);
        switch (st) {
        case PE_OK:
            return st;
        case PE_ERR_NO_KEY:
        case PE_ERR_PSP_VERSION_DISABLED:
            break; /* this receiver has no key for it: ask the next */
        case PE_ERR_AUTH:
            best = st; /* another master pair may still be the right one */
            break;
        default:
            return st; /* the packet itself is at fault: every receiver would say so */
        }
    }
    return best;
}

const pe_ws_key_problems *pe_ws_psp_key_problems(void)
{
    return &psp_problems;
}

void pe_ws_psp_keys_register(module_t *module)
{
    static uat_field_t fields[] = {
        UAT_FLD_CSTRING(psp_keys, spi, "SPI", "SPI in hex (0x...), or * for a master pair"),
        UAT_FLD_CSTRING(psp_keys, version, "Version", "0-3, or * for every version"),
        UAT_FLD_VS(psp_keys, key_type, "Key type", psp_key_types,
                   "master-pair: Key 0 / Key 1 are the master keys (the SPI's MSB picks one); "
                   "derived: Key 0 is the SA's derived key"),
        UAT_FLD_CSTRING(psp_keys, key0, "Key 0", "Master key 0 (32 octets, hex), or the derived key (16/32)"),
        UAT_FLD_CSTRING(psp_keys, key1, "Key 1", "Master key 1 (32 octets, hex)"),
        UAT_END_FIELDS,
    };
    uat_t *uat = uat_new("PSP Keys", sizeof(psp_key_rec), "psp_keys", TRUE, &psp_recs, &n_psp_recs,
                         UAT_AFFECTS_DISSECTION, NULL, psp_rec_copy, psp_rec_update, psp_rec_free,
                         pe_ws_psp_keys_changed, NULL, fields);
    prefs_register_uat_preference(module, "keys", "PSP keys",
                                  "Master key pairs and per-SPI derived keys used to decrypt PSP", uat);
    prefs_register_filename_preference(module, "keyfile", "Key file",
                                       "A key file as the pypsp/pyeesp CLIs read it (docs/keys.md): "
                                       "psp-master and psp-key lines are used; or a google/psp reference "
                                       "config (psp_decrypt -c), whose master keys are used",
                                       &psp_keyfile_path, FALSE);
}

/* ------------------------------------------------------------------ EESP */

/* The suite column's choices: the core's suite table, filled in at registration (the UAT wants an array). */
#define MAX_EESP_SUITES 32
static value_string eesp_suites[MAX_EESP_SUITES + 1];

static void eesp_suites_fill(void)
{
    size_t n = pe_ipsec_suite_count();
    for (size_t i = 0; i < n && i < MAX_EESP_SUITES; i++) {
        const pe_ipsec_suite_info *s = pe_ipsec_suite_at(i);
        eesp_suites[i].value = (guint32)s->encr;
        eesp_suites[i].strptr = s->name;
    }
}
static const value_string eesp_key_bits[] = {{128, "128"}, {192, "192"}, {256, "256"}, {0, NULL}};
static const value_string eesp_sskdfs[] = {
    {PE_SSKDF_NONE, "none"},
    {PE_SSKDF_HKDF_SHA2_256, "hkdf-sha256"},
    {PE_SSKDF_HKDF_SHA2_384, "hkdf-sha384"},
    {PE_SSKDF_HKDF_SHA2_512, "hkdf-sha512"},
    {0, NULL},
};
static const value_string eesp_modes[] = {{PE_EESP_TUNNEL, "tunnel"}, {PE_EESP_TRANSPORT, "transport"}, {0, NULL}};

typedef struct eesp_sa_rec {
    char *src, *dst, *spi;
    guint suite, key_bits;
    char *key;       /* key || salt, or the root key with an SSKDF */
    guint sskdf, mode;
    char *options;   /* any further eesp-sa settings: "format=full seq=0 ..." */
} eesp_sa_rec;

static eesp_sa_rec *eesp_recs;
static guint n_eesp_recs;
static const char *eesp_keyfile_path = "";
static pe_eesp_rx *eesp_live;
static pe_ws_key_problems eesp_problems;
static gboolean eesp_dirty = TRUE;

UAT_CSTRING_CB_DEF(eesp_sa, src, eesp_sa_rec)
UAT_CSTRING_CB_DEF(eesp_sa, dst, eesp_sa_rec)
UAT_CSTRING_CB_DEF(eesp_sa, spi, eesp_sa_rec)
UAT_VS_DEF(eesp_sa, suite, eesp_sa_rec, guint, PE_ENCR_AES_GCM_16, "aes-gcm-16")
UAT_VS_DEF(eesp_sa, key_bits, eesp_sa_rec, guint, 128, "128")
UAT_CSTRING_CB_DEF(eesp_sa, key, eesp_sa_rec)
UAT_VS_DEF(eesp_sa, sskdf, eesp_sa_rec, guint, PE_SSKDF_NONE, "none")
UAT_VS_DEF(eesp_sa, mode, eesp_sa_rec, guint, PE_EESP_TUNNEL, "tunnel")
UAT_CSTRING_CB_DEF(eesp_sa, options, eesp_sa_rec)

static gboolean eesp_row_text(const eesp_sa_rec *r, GString *t, char **err)
{
    if (!r->spi || !*r->spi || !r->key || !*r->key) {
        *err = g_strdup("an EESP SA needs an SPI and a key");
        return FALSE;
    }
    if ((*err = field_problem("Src IP", r->src, TRUE)) || (*err = field_problem("Dest IP", r->dst, TRUE)) ||
        (*err = field_problem("SPI", r->spi, TRUE)) || (*err = field_problem("Key", r->key, TRUE)))
        return FALSE;
    if (r->options && strpbrk(r->options, "\r\n")) {
        *err = g_strdup("Options must be one line of name=value settings");
        return FALSE;
    }
    g_string_append_printf(t, "eesp-sa spi=%s suite=%s", r->spi, val_to_str_const(r->suite, eesp_suites, "?"));
    const pe_ipsec_suite_info *suite = pe_ipsec_suite_by_id(r->suite);
    if (!suite || suite->n_key_lens > 1) /* one key size (ChaCha20-Poly1305): no choice to write */
        g_string_append_printf(t, " key-bits=%u", r->key_bits);
    if (r->sskdf == PE_SSKDF_NONE)
        g_string_append_printf(t, " key=%s", r->key);
    else
        g_string_append_printf(t, " root-key=%s sskdf=%s", r->key, val_to_str_const(r->sskdf, eesp_sskdfs, "?"));
    g_string_append_printf(t, " mode=%s", val_to_str_const(r->mode, eesp_modes, "?"));
    if (!is_any(r->src))
        g_string_append_printf(t, " src=%s", r->src);
    if (!is_any(r->dst))
        g_string_append_printf(t, " dst=%s", r->dst);
    if (r->options && *r->options)
        g_string_append_printf(t, " %s", r->options);
    g_string_append_c(t, '\n');
    return TRUE;
}

static pe_ws_bool eesp_rec_update(void *rec, char **err)
{
    GString *t = g_string_new(NULL);
    pe_keyfile kf;
    gboolean ok = eesp_row_text(rec, t, err) && parse_line(t, &kf, err);
    if (ok) {
        if (kf.n_eesp_sas != 1) {
            *err = g_strdup("Options must hold eesp-sa settings only");
            ok = FALSE;
        }
        pe_keyfile_free(&kf);
    }
    pe_wipe(t->str, t->len);
    g_string_free(t, TRUE);
    return ok;
}

static void *eesp_rec_copy(void *dst, const void *src, size_t len)
{
    const eesp_sa_rec *s = src;
    eesp_sa_rec *d = dst;
    *d = *s;
    d->src = g_strdup(s->src);
    d->dst = g_strdup(s->dst);
    d->spi = g_strdup(s->spi);
    d->key = g_strdup(s->key);
    d->options = g_strdup(s->options);
    return d;
}

static void eesp_rec_free(void *rec)
{
    eesp_sa_rec *r = rec;
    g_free(r->src);
    g_free(r->dst);
    g_free(r->spi);
    free_secret(r->key);
    g_free(r->options);
}

void pe_ws_eesp_keys_changed(void)
{
    eesp_dirty = TRUE;
}

static void eesp_add_entries(const pe_keyfile *kf, const char *where, guint row)
{
    for (size_t i = 0; i < kf->n_eesp_sas; i++) {
        pe_eesp_sa_config cfg;
        pe_keyfile_eesp_sa_config(&kf->eesp_sas[i], 1, &cfg);
        pe_status st = pe_eesp_rx_add_sa(eesp_live, &cfg);
        if (st == PE_ERR_INVALID_ARGUMENT)
            problem(&eesp_problems, st, "%s %u: an EESP SA with SPI 0x%08x and this destination is already configured",
                    where, row ? row : (guint)kf->eesp_sas[i].line, kf->eesp_sas[i].spi);
        else if (st != PE_OK)
            problem(&eesp_problems, st, "%s %u: %s", where, row ? row : (guint)kf->eesp_sas[i].line,
                    pe_status_message(st));
    }
}

static void eesp_keys_build(void)
{
    pe_eesp_rx_free(eesp_live);
    eesp_live = NULL;
    eesp_dirty = FALSE;
    problems_clear(&eesp_problems);
    pe_eesp_rx_config cfg;
    pe_eesp_rx_config_init(&cfg);
    pe_status st = pe_eesp_rx_new(&cfg, &eesp_live);
    if (st != PE_OK) {
        problem(&eesp_problems, st, "EESP keys: %s", pe_status_message(st));
        return;
    }
    GString *t = g_string_new(NULL);
    for (guint i = 0; i < n_eesp_recs; i++) {
        char *err = NULL;
        pe_keyfile kf;
        g_string_truncate(t, 0);
        if (!eesp_row_text(&eesp_recs[i], t, &err) || !parse_line(t, &kf, &err)) {
            problem(&eesp_problems, PE_ERR_KEYFILE_VALUE, "EESP SA table, row %u: %s", i + 1, err);
            g_free(err);
            continue;
        }
        eesp_add_entries(&kf, "EESP SA table, row", i + 1);
        pe_keyfile_free(&kf);
    }
    pe_wipe(t->str, t->len);
    g_string_free(t, TRUE);
    if (eesp_keyfile_path && *eesp_keyfile_path) {
        /* A reference config holds PSP keys only: it loads, and gives no SA. */
        key_source ks;
        if (key_source_load(&ks, "EESP", eesp_keyfile_path, &eesp_problems)) {
            char *where = g_strdup_printf("EESP key file %s, line", eesp_keyfile_path);
            eesp_add_entries(&ks.kf, where, 0);
            g_free(where);
        }
        key_source_free(&ks);
    }
}

pe_status pe_ws_eesp_open(const uint8_t *eesp, size_t len, int ip_version, const uint8_t *dst, uint8_t *out,
                          size_t cap, size_t *out_len, pe_eesp_info *info)
{
    if (eesp_dirty)
        eesp_keys_build();
    if (!eesp_live) {
        memset(info, 0, sizeof *info);
        pe_status st = pe_eesp_hdr_parse(eesp, len, &info->hdr);
        return st == PE_OK ? PE_ERR_EESP_NO_SA : st;
    }
    return pe_eesp_open(eesp_live, eesp, len, ip_version, dst, PE_EESP_OPEN_NO_REPLAY, out, cap, out_len, info);
}

const pe_ws_key_problems *pe_ws_eesp_key_problems(void)
{
    return &eesp_problems;
}

void pe_ws_eesp_keys_register(module_t *module)
{
    eesp_suites_fill();
    static uat_field_t fields[] = {
        UAT_FLD_CSTRING(eesp_sa, src, "Src IP", "Source address (informational), or *"),
        UAT_FLD_CSTRING(eesp_sa, dst, "Dest IP", "Destination address the SA is bound to, or * for any"),
        UAT_FLD_CSTRING(eesp_sa, spi, "SPI", "SPI in hex (0x...)"),
        UAT_FLD_VS(eesp_sa, suite, "Suite", eesp_suites, "AEAD transform (IKEv2 ENCR)"),
        UAT_FLD_VS(eesp_sa, key_bits, "Key bits", eesp_key_bits, "AES key size (ChaCha20-Poly1305: 256)"),
        UAT_FLD_CSTRING(eesp_sa, key, "Key", "key || salt in hex, or the root key when an SSKDF is set"),
        UAT_FLD_VS(eesp_sa, sskdf, "SSKDF", eesp_sskdfs, "Sub SA key derivation; none: one key, Session ID 0"),
        UAT_FLD_VS(eesp_sa, mode, "Mode", eesp_modes, "tunnel or transport"),
        UAT_FLD_CSTRING(eesp_sa, options, "Options",
                        "Further eesp-sa settings as in the key file, e.g. format=full seq=0 aad=linux-xfrm "
                        "max-crypt-offset=4 (docs/keys.md)"),
        UAT_END_FIELDS,
    };
    uat_t *uat = uat_new("EESP SAs", sizeof(eesp_sa_rec), "eesp_sa", TRUE, &eesp_recs, &n_eesp_recs,
                         UAT_AFFECTS_DISSECTION, NULL, eesp_rec_copy, eesp_rec_update, eesp_rec_free,
                         pe_ws_eesp_keys_changed, NULL, fields);
    prefs_register_uat_preference(module, "sa_table", "EESP SAs",
                                  "EESP Security Associations used to decrypt (one row per direction)", uat);
    prefs_register_filename_preference(module, "keyfile", "Key file",
                                       "A key file as the pypsp/pyeesp CLIs read it (docs/keys.md): "
                                       "eesp-sa lines are used",
                                       &eesp_keyfile_path, FALSE);
}
