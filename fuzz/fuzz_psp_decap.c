/*
 * pe_psp_decap on hostile IP packets, against the four receivers of
 * fuzz_psp_open (fresh per input).
 *
 * Input: ctl(1) | IP packet.
 *   ctl bit 0: re-seal the PSP part (found with pe_ip_parse: UDP after the IP
 *              headers) with the model, so the fuzzer reaches past authentication;
 *   ctl bit 1: re-seal with a derived-key entry when one exists;
 *   ctl bit 2: receivers verify non-zero UDP checksums;
 *   ctl bits 4-7: versions the limited receiver accepts.
 *
 * Checks: a keyless receiver never decapsulates; a decapsulated packet is
 * self-consistent (tunnel: an IP packet of the version Next Header names;
 * transport: the kept IP header with the protocol, length and IPv4
 * checksum put back); a re-sealed packet decapsulates to the model's plaintext.
 */
#include <string.h>

#include "fuzz.h"

/* Successes per receiver, printed at exit when FZ_STATS is set (to check the seeds get through). */
static unsigned long n_ok[4], n_runs;
__attribute__((destructor)) static void print_stats(void)
{
    if (getenv("FZ_STATS"))
        fprintf(stderr, "opened: master-key %lu, derived-key %lu, keyless %lu, limited %lu of %lu inputs\n", n_ok[0],
                n_ok[1], n_ok[2], n_ok[3], n_runs);
}
#include "pe/ip.h"
#include "pe/transforms.h"

static void check_out(const char *name, const uint8_t *pkt, const pe_ip_info *ip, const pe_psp_hdr *h,
                      const uint8_t *out, size_t out_len, const uint8_t *plain, size_t psp_off, size_t psp_len)
{
    size_t hlen = pe_psp_hdr_len(h);
    FUZZ_CHECK(psp_len >= hlen + 16, "%s: opened a packet shorter than its header and ICV", name);
    size_t inner = psp_len - hlen - 16;
    int tunnel = h->next_header == 4 || h->next_header == 41;
    if (tunnel) {
        FUZZ_CHECK(out_len == inner, "%s: tunnel output %zu, inner %zu", name, out_len, inner);
        FUZZ_CHECK(out_len > 0 && (out[0] >> 4) == (h->next_header == 4 ? 4 : 6), "%s: inner version", name);
    } else {
        size_t keep = ip->l4_offset;
        FUZZ_CHECK(out_len == keep + inner, "%s: transport output %zu, kept %zu + inner %zu", name, out_len, keep, inner);
        FUZZ_CHECK(out[ip->proto_field] == h->next_header, "%s: protocol not restored", name);
        if (ip->version == 4) {
            FUZZ_CHECK(pe_get16(out + 2) == out_len, "%s: IPv4 Total Length %u for %zu", name, pe_get16(out + 2), out_len);
            FUZZ_CHECK(pe_csum_fold(pe_csum_add(0, out, ip->hdr_len)) == 0xffff, "%s: IPv4 header checksum", name);
        } else {
            FUZZ_CHECK(pe_get16(out + 4) + 40u == out_len, "%s: IPv6 Payload Length", name);
        }
        /* Everything of the kept header other than protocol, length and checksum is the packet's own. */
        for (size_t i = 0; i < keep; i++) {
            int changed = i == ip->proto_field ||
                          (ip->version == 4 ? (i == 2 || i == 3 || i == 10 || i == 11) : (i == 4 || i == 5));
            FUZZ_CHECK(changed || out[i] == pkt[i], "%s: kept header octet %zu changed", name, i);
        }
    }
    if (plain && memcmp(out + (tunnel ? 0 : ip->l4_offset), plain + psp_off + hlen, inner) != 0) {
        fz_dump("expected", plain + psp_off + hlen, inner);
        fz_dump("got", out + (tunnel ? 0 : ip->l4_offset), inner);
        FUZZ_CHECK(0, "%s: decapsulated payload differs from the model's plaintext", name);
    }
}

static void run(pe_psp_rx *rx, const char *name, const uint8_t *pkt, size_t len, const uint8_t *plain,
                size_t psp_off, int has_keys, uint8_t *out, size_t cap)
{
    size_t out_len = 0;
    pe_psp_hdr h;
    pe_status st = pe_psp_decap(rx, pkt, len, out, cap, &out_len, &h);
    if (st == PE_OK)
        n_ok[name[0] == 'm' ? 0 : name[0] == 'd' ? 1 : name[0] == 'k' ? 2 : 3]++;
    (void)pe_status_message(st);
    if (!has_keys)
        FUZZ_CHECK(st != PE_OK, "%s: a receiver without keys decapsulated", name);
    if (st != PE_OK)
        return;
    pe_ip_info ip;
    FUZZ_CHECK(pe_ip_parse(pkt, len, &ip) == PE_OK && ip.protocol == PE_IPPROTO_UDP, "%s: not an IP/UDP packet", name);
    size_t psp_len = ip.len - ip.l4_offset - 8;
    check_out(name, pkt, &ip, &h, out, out_len, plain, psp_off, psp_len);
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    if (n < 1 || n - 1 > PE_IP_MAX_LEN)
        return 0;
    uint8_t ctl = d[0];
    size_t len = n - 1;
    uint8_t *pkt = malloc(len + 1), *plain = NULL;
    memcpy(pkt, d + 1, len);
    fz_psp_rxs rxs;
    fz_psp_rxs_new(&rxs, ctl >> 4, (ctl >> 2) & 1);

    size_t psp_off = 0;
    pe_ip_info ip;
    if ((ctl & 1) && pe_ip_parse(pkt, len, &ip) == PE_OK && ip.protocol == PE_IPPROTO_UDP && !ip.is_fragment &&
        ip.l4_offset + 8 + 16 <= ip.len) {
        psp_off = ip.l4_offset + 8;
        uint8_t *psp = pkt + psp_off;
        size_t psp_len = ip.len - psp_off;
        uint8_t key[32];
        size_t key_len;
        int is_user;
        if (fz_psp_key_for(pe_get32(psp + 4), (psp[3] >> 2) & 0xf, ctl & 2, key, &key_len, &is_user) == 0) {
            plain = malloc(len);
            memcpy(plain, pkt, len);
            if (fz_psp_seal(key, key_len, psp, psp_len) != 0) {
                free(plain);
                plain = NULL;
            }
        }
    }

    size_t cap = len + 64;
    uint8_t *out = malloc(cap);
    n_runs++;
    run(rxs.mk, "master-key rx", pkt, len, plain, psp_off, 1, out, cap);
    run(rxs.user, "derived-key rx", pkt, len, plain, psp_off, 1, out, cap);
    run(rxs.none, "keyless rx", pkt, len, plain, psp_off, 0, out, cap);
    run(rxs.limited, "limited rx", pkt, len, plain, psp_off, 1, out, cap);

    /* The capture and batch adapters over the same packet. */
    size_t out_len;
    pe_status why;
    pe_verdict v = pe_psp_capture_decap(rxs.mk, pkt, len, out, cap, &out_len, &why);
    FUZZ_CHECK((v == PE_VERDICT_TRANSFORMED) == (why == PE_OK), "capture verdict %d with %s", v, pe_status_name(why));
    pe_psp_hdr hdrs[1];
    pe_psp_batch_ctx bc = {.rx = rxs.user, .hdrs = hdrs};
    (void)pe_psp_batch_decap(&bc, pkt, len, out, cap, &out_len, &why);
    FUZZ_CHECK(bc.next == 1, "batch index");
    /* Short output buffers are refused, never overrun. */
    uint8_t small[24];
    (void)pe_psp_decap(rxs.mk, pkt, len, small, sizeof small, &out_len, NULL);

    free(out);
    free(plain);
    free(pkt);
    fz_psp_rxs_free(&rxs);
    return 0;
}
