/*
 * What ESP and EESP share (pe/ipsec.h): the SPI (+ destination)
 * -> SA table and the locating steps.  The table is checked against a linear
 * scan that states RFC 4301 §4.1's rule plainly, over many SPIs and
 * destinations, and for what it refuses; pe_esp_locate against the statuses
 * pe_esp_decap gives for the same packets.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "pe/bytes.h"
#include "pe/esp.h"
#include "pe/ip.h"
#include "pe/ipsec.h"

/* ------------------------------------------------------------- the table */

typedef struct entry {
    pe_ipsec_sa_key key;
    int freed;
} entry;


static int n_released;

static pe_status init_entry(void *e, const void *cfg)
{
    memcpy(e, cfg, sizeof(entry));
    return ((const entry *)cfg)->key.spi == 0xbad ? PE_ERR_INVALID_ARGUMENT : PE_OK;
}

static pe_status clone_entry(void *dst, const void *src)
{
    memcpy(dst, src, sizeof(entry));
    return PE_OK;
}

static void release_entry(void *e)
{
    ((entry *)e)->freed = 1;
    n_released++;
}

static const pe_ipsec_sa_ops entry_ops = {sizeof(entry), init_entry, clone_entry, release_entry};

static pe_ipsec_sa_key key_of(uint32_t spi, int family, uint8_t last)
{
    pe_ipsec_sa_key k = {.spi = spi, .dst_family = family};
    if (family)
        k.dst[family == 4 ? 3 : 15] = last;
    return k;
}

/* The rule in its plainest form: the SA bound to this destination, else the one for any. */
static entry *scan(entry *all, size_t n, uint32_t spi, int family, const uint8_t *dst)
{
    entry *any = NULL;
    for (size_t i = 0; i < n; i++) {
        if (all[i].key.spi != spi)
            continue;
        if (all[i].key.dst_family == 0)
            any = &all[i];
        else if (dst && all[i].key.dst_family == family &&
                 memcmp(all[i].key.dst, dst, family == 4 ? 4 : 16) == 0)
            return &all[i];
    }
    return any;
}

/* The table holds copies: an SA found is the one scanned for when their keys are the same. */
static int same(const entry *found, const entry *want)
{
    return found == want || (found && want && memcmp(&found->key, &want->key, sizeof found->key) == 0);
}

#define N_SPIS 700u

static void test_table(void)
{
    static entry all[N_SPIS * 4];
    size_t n = 0;
    pe_ipsec_sa_table t;
    memset(&t, 0, sizeof t);
    CHECK(pe_ipsec_sa_table_find(&t, 1, 0, NULL) == NULL);
    CHECK(!pe_ipsec_sa_table_holds_spi(&t, 1));
    /* Per SPI: every third has a wildcard, every SPI an IPv4 and most an IPv6 destination, in mixed orders. */
    for (uint32_t i = 0; i < N_SPIS; i++) {
        uint32_t spi = i * 0x9e3779b1u; /* SPIs that collide in the index's low bits too */
        pe_ipsec_sa_key ks[3] = {key_of(spi, 4, (uint8_t)i), key_of(spi, 0, 0), key_of(spi, 6, (uint8_t)(i + 1))};
        for (size_t j = 0; j < 3; j++) {
            size_t k = (i + j) % 3;
            if ((k == 1 && i % 3) || (k == 2 && i % 5 == 0))
                continue;
            all[n].key = ks[k];
            CHECK_ST(pe_ipsec_sa_table_add(&t, &entry_ops, &ks[k], &all[n]), PE_OK);
            n++;
        }
    }
    CHECK(t.n == n);
    CHECK(t.ix_cap > 2 * t.n); /* bounded: the index stays above twice the SAs, no more than it needs */
    CHECK(t.ix_cap <= 4 * t.n + 16);
    /* Duplicates: the same SPI and destination, or both any, refused with the receivers' status. */
    for (size_t i = 0; i < n; i += 7)
        CHECK_ST(pe_ipsec_sa_table_reserve(&t, &all[i].key), PE_ERR_INVALID_ARGUMENT);
    pe_ipsec_sa_key other = all[0].key;
    other.dst[0] = 0xaa; /* another destination: allowed */
    CHECK_ST(pe_ipsec_sa_table_reserve(&t, &other), PE_OK);
    /* Lookups as the plain scan says, for each SA's own destination, another one, and none. */
    uint8_t elsewhere[16] = {0xfe};
    size_t wrong = 0;
    for (size_t i = 0; i < n; i++) {
        const pe_ipsec_sa_key *k = &all[i].key;
        int fam = k->dst_family ? k->dst_family : 4;
        if (!same(pe_ipsec_sa_table_find(&t, k->spi, fam, k->dst), scan(all, n, k->spi, fam, k->dst)))
            wrong++;
        if (!same(pe_ipsec_sa_table_find(&t, k->spi, fam, elsewhere), scan(all, n, k->spi, fam, elsewhere)))
            wrong++;
        if (!same(pe_ipsec_sa_table_find(&t, k->spi, fam, NULL), scan(all, n, k->spi, fam, NULL)))
            wrong++;
        if (!pe_ipsec_sa_table_holds_spi(&t, k->spi))
            wrong++;
    }
    CHECK(wrong == 0);
    CHECK(pe_ipsec_sa_table_find(&t, 0x12345678u, 4, elsewhere) == NULL);
    CHECK(!pe_ipsec_sa_table_holds_spi(&t, 0x12345678u));
    /* An SA for the destination beats the wildcard whichever was added first. */
    for (uint32_t i = 0; i < 6; i++) {
        uint32_t spi = i * 0x9e3779b1u;
        pe_ipsec_sa_key v4 = key_of(spi, 4, (uint8_t)i);
        entry *e = pe_ipsec_sa_table_find(&t, spi, 4, v4.dst);
        CHECK(e && e->key.dst_family == 4);
        e = pe_ipsec_sa_table_find(&t, spi, 4, elsewhere);
        CHECK(i % 3 ? e == NULL : e && e->key.dst_family == 0);
    }

    pe_ipsec_sa_table c;
    memset(&c, 0, sizeof c);
    CHECK_ST(pe_ipsec_sa_table_clone(&c, &t, &entry_ops), PE_OK);
    CHECK(c.n == t.n);
    wrong = 0;
    for (size_t i = 0; i < n; i++) {
        const pe_ipsec_sa_key *k = &all[i].key;
        int fam = k->dst_family ? k->dst_family : 4;
        const entry *e = pe_ipsec_sa_table_find(&c, k->spi, fam, k->dst);
        if (!same(e, pe_ipsec_sa_table_find(&t, k->spi, fam, k->dst)) || e == pe_ipsec_sa_table_find(&t, k->spi, fam, k->dst))
            wrong++;
    }
    CHECK(wrong == 0);
    n_released = 0;
    pe_ipsec_sa_table_free(&c, &entry_ops);
    CHECK(n_released == (int)n);
    /* What init refuses is refused, after the duplicate check and with nothing added. */
    entry bad = {.key = key_of(0xbad, 4, 1)};
    CHECK_ST(pe_ipsec_sa_table_add(&t, &entry_ops, &bad.key, &bad), PE_ERR_INVALID_ARGUMENT);
    CHECK(t.n == n && !pe_ipsec_sa_table_holds_spi(&t, 0xbad));
    n_released = 0;
    pe_ipsec_sa_table_free(&t, &entry_ops);
    CHECK(n_released == (int)n && t.n == 0 && t.ix == NULL);
    CHECK(pe_ipsec_sa_table_find(&t, all[0].key.spi, 4, all[0].key.dst) == NULL);
}

/* ------------------------------------------------------------ locating */

static size_t udp_packet(uint8_t *p, uint16_t sport, uint16_t dport, const uint8_t *payload, size_t n)
{
    static const uint8_t v4[20] = {0x45, 0, 0, 0, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2};
    memcpy(p, v4, sizeof v4);
    pe_put16(p + 20, sport);
    pe_put16(p + 22, dport);
    pe_put16(p + 24, (uint16_t)(8 + n));
    pe_put16(p + 26, 0);
    memcpy(p + 28, payload, n);
    pe_ip_set_length(p, 28 + n);
    pe_ipv4_set_checksum(p);
    return 28 + n;
}

static void test_locate(void)
{
    uint8_t esp[40] = {0x01, 0x02, 0x03, 0x04, 0, 0, 0, 1}, eesp[40] = {0x80, 0x01, 0x02, 0x03, 0, 0, 0, 1};
    uint8_t p[128], out[128];
    size_t n;
    pe_esp_location loc;

    n = udp_packet(p, 1111, 4500, esp, sizeof esp);
    CHECK_ST(pe_esp_locate(p, n, 4500, 0, NULL, &loc), PE_OK);
    CHECK(loc.udp_encap && loc.offset == 28 && loc.len == sizeof esp && loc.l4_offset == 20 && loc.proto_field == 9);
    n = udp_packet(p, 4500, 1111, esp, sizeof esp);
    CHECK_ST(pe_esp_locate(p, n, 4500, 0, NULL, &loc), PE_ERR_NOT_ESP);
    CHECK_ST(pe_esp_locate(p, n, 4500, PE_ESP_LOCATE_EITHER_PORT, NULL, &loc), PE_OK);

    /* What §14 takes for EESP: passed over, unless the host has no EESP or holds the SPI. */
    n = udp_packet(p, 1111, 4500, eesp, sizeof eesp);
    CHECK_ST(pe_esp_locate(p, n, 4500, 0, NULL, &loc), PE_ERR_EESP_IN_UDP);
    CHECK_ST(pe_esp_locate(p, n, 4500, PE_ESP_LOCATE_NO_EESP, NULL, &loc), PE_OK);
    pe_esp_rx_config rcfg;
    pe_esp_rx_config_init(&rcfg);
    pe_esp_rx *rx;
    CHECK_ST(pe_esp_rx_new(&rcfg, &rx), PE_OK);
    uint8_t key[20] = {0};
    pe_esp_sa_config cfg;
    pe_esp_sa_config_init(&cfg);
    cfg.spi = pe_get32(eesp);
    cfg.key = key;
    cfg.key_len = sizeof key;
    CHECK_ST(pe_esp_rx_add_sa(rx, &cfg), PE_OK);
    CHECK_ST(pe_esp_rx_add_sa(rx, &cfg), PE_ERR_INVALID_ARGUMENT); /* the same SPI and destination twice */
    CHECK(pe_esp_rx_holds_spi(rx, cfg.spi) && !pe_esp_rx_holds_spi(rx, pe_get32(esp)));
    CHECK_ST(pe_esp_locate(p, n, 4500, 0, rx, &loc), PE_OK);
    /* The receiver locates by the same steps: it opens the packet and fails on its ICV, not before. */
    size_t out_len;
    CHECK_ST(pe_esp_decap(rx, p, n, out, sizeof out, &out_len, NULL), PE_ERR_AUTH);

    /* Its statuses are the receiver's, for every packet that is not ESP. */
    static const uint8_t keepalive[1] = {0xff}, ike[8] = {0, 0, 0, 0, 1, 2, 3, 4};
    struct {
        const uint8_t *payload;
        size_t len;
        pe_status want;
    } rows[] = {{keepalive, 1, PE_ERR_NAT_KEEPALIVE}, {ike, sizeof ike, PE_ERR_IKE_MARKER}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        n = udp_packet(p, 1111, 4500, rows[i].payload, rows[i].len);
        CHECK_STN(pe_esp_locate(p, n, 4500, 0, rx, &loc), rows[i].want, i);
        CHECK_STN(pe_esp_decap(rx, p, n, out, sizeof out, &out_len, NULL), rows[i].want, i);
    }
    n = udp_packet(p, 1111, 4500, esp, sizeof esp);
    pe_put16(p + 24, (uint16_t)(8 + sizeof esp + 4));
    CHECK_ST(pe_esp_locate(p, n, 4500, 0, rx, &loc), PE_ERR_UDP_LENGTH);
    CHECK_ST(pe_esp_decap(rx, p, n, out, sizeof out, &out_len, NULL), PE_ERR_UDP_LENGTH);
    /* A TCP non-first fragment is no ESP; a first fragment of UDP to the port is ESP's, and dropped. */
    n = udp_packet(p, 1111, 4500, esp, sizeof esp);
    p[9] = 6;
    pe_put16(p + 6, 100);
    pe_ipv4_set_checksum(p);
    CHECK_ST(pe_esp_locate(p, n, 4500, 0, rx, &loc), PE_ERR_NOT_ESP);
    CHECK_ST(pe_esp_decap(rx, p, n, out, sizeof out, &out_len, NULL), PE_ERR_NOT_ESP);
    n = udp_packet(p, 1111, 4500, esp, sizeof esp);
    pe_put16(p + 6, 0x2000);
    pe_ipv4_set_checksum(p);
    CHECK_ST(pe_esp_locate(p, n, 4500, 0, rx, &loc), PE_ERR_IP_FRAGMENT);
    CHECK_ST(pe_esp_decap(rx, p, n, out, sizeof out, &out_len, NULL), PE_ERR_IP_FRAGMENT);
    /* A wrong non-zero checksum, verified on request only. */
    n = udp_packet(p, 1111, 4500, esp, sizeof esp);
    pe_put16(p + 26, 0x1234);
    CHECK_ST(pe_esp_locate(p, n, 4500, 0, rx, &loc), PE_OK);
    CHECK_ST(pe_esp_locate(p, n, 4500, PE_ESP_LOCATE_UDP_CHECKSUM, rx, &loc), PE_ERR_UDP_CHECKSUM);
    CHECK_ST(pe_esp_decap(rx, p, n, out, sizeof out, &out_len, NULL), PE_ERR_UDP_CHECKSUM);
    pe_esp_rx_free(rx);
}

/* The way a key file would keep its entries: indices into its own array, the table freeing none of them. */
static void test_table_of_indices(void)
{
    pe_ipsec_sa_table t;
    memset(&t, 0, sizeof t);
    pe_ipsec_sa_key keys[3] = {key_of(7, 4, 1), key_of(7, 0, 0), key_of(7, 4, 2)};
    for (size_t i = 0; i < 3; i++) {
        CHECK(pe_ipsec_sa_table_same(&t, &keys[i]) == NULL);
        CHECK_ST(pe_ipsec_sa_table_reserve(&t, &keys[i]), PE_OK);
        pe_ipsec_sa_table_insert(&t, &keys[i], (void *)(uintptr_t)(i + 1));
    }
    for (size_t i = 0; i < 3; i++) {
        CHECK(pe_ipsec_sa_table_same(&t, &keys[i]) == (void *)(uintptr_t)(i + 1));
        CHECK_ST(pe_ipsec_sa_table_reserve(&t, &keys[i]), PE_ERR_INVALID_ARGUMENT);
    }
    pe_ipsec_sa_key v6 = key_of(7, 6, 1);
    CHECK(pe_ipsec_sa_table_same(&t, &v6) == NULL);
    CHECK(pe_ipsec_sa_table_find(&t, 7, 6, v6.dst) == (void *)(uintptr_t)2); /* the wildcard */
    pe_ipsec_sa_table_free(&t, NULL);
    CHECK(t.n == 0 && t.sas == NULL);
}

static void test_keymat_max(void)
{
    size_t longest = 0;
    for (size_t i = 0; i < pe_ipsec_suite_count(); i++) {
        const pe_ipsec_suite_info *r = pe_ipsec_suite_at(i);
        for (size_t k = 0; k < r->n_key_lens; k++)
            if (r->key_lens[k] + r->salt_len > longest)
                longest = r->key_lens[k] + r->salt_len;
    }
    CHECK(longest == PE_IPSEC_KEYMAT_MAX);
}

static void test_tables(void)
{
    test_keymat_max();
    test_table();
    test_table_of_indices();
}

int main(void)
{
    test_tables();
    test_locate();
    printf("test_ipsec: %ld checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
