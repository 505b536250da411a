/*
 * IP and frame walking on hostile octets: pe_frame_ip_offset for every link
 * type the core knows, then pe_ip_parse, pe_ip_wire_length, pe_ip_udp,
 * pe_ip_first_fragment and pe_udp_checksum_ok on what it finds, and the
 * front ends' entry points pe_psp_locate, pe_eesp_locate (every flag),
 * pe_udp_checksum and pe_ip_checksum, with the invariants the callers rely
 * on (every offset within what was given, agreement between the calls).
 *
 * Input: linktype selector(1) | frame.
 */
#include <string.h>

#include "fuzz.h"
#include "pe/capture.h"
#include "pe/eesp.h"
#include "pe/ip.h"
#include "pe/psp.h"

static const uint32_t LINKTYPES[] = {PE_LINKTYPE_RAW,       PE_LINKTYPE_ETHERNET, PE_LINKTYPE_IPV4, PE_LINKTYPE_IPV6,
                                     PE_LINKTYPE_LINUX_SLL, PE_LINKTYPE_LINUX_SLL2, 0, 147};

/* Where PSP/EESP is, as the CLIs, diagnose and the plugin ask: within the IP packet, and agreeing with pe_ip_udp. */
static void check_locate(const uint8_t *pkt, size_t avail)
{
    pe_ip_info ip;
    pe_status ipst = pe_ip_parse(pkt, avail, &ip);
    pe_udp_view u;
    pe_status ust = pe_ip_udp(pkt, avail, &u);
    uint16_t port = avail >= 1 ? (uint16_t)(pkt[avail - 1] * 17u) : 1000u; /* some port the input picks */
    const uint16_t ports[] = {PE_PSP_UDP_PORT, PE_EESP_UDP_PORT, port};
    for (size_t i = 0; i < sizeof ports / sizeof ports[0]; i++) {
        pe_psp_location pl;
        pe_status st = pe_psp_locate(pkt, avail, ports[i], &pl);
        if (st == PE_OK) {
            FUZZ_CHECK(ipst == PE_OK && ust == PE_OK && u.dport == ports[i], "PSP located where pe_ip_udp says %s",
                       pe_status_name(ust));
            FUZZ_CHECK(pl.udp_offset == u.udp_offset && pl.offset == u.payload_offset && pl.len == u.payload_len &&
                           pl.udp_sport == u.sport && pl.ip_version == ip.version,
                       "PSP location %zu+%zu", pl.offset, pl.len);
        }
        for (unsigned flags = 0; flags < 4; flags++) {
            pe_eesp_location el;
            uint8_t proto = (uint8_t)(i == 2 ? port : PE_EESP_DEFAULT_IPPROTO);
            st = pe_eesp_locate(pkt, avail, proto, ports[i], flags, &el);
            if (st != PE_OK)
                continue;
            FUZZ_CHECK(ipst == PE_OK && !ip.is_fragment, "EESP located in a packet that does not parse");
            FUZZ_CHECK(el.offset + el.len == ip.len && el.offset >= ip.l4_offset && el.l4_offset == ip.l4_offset,
                       "EESP location %zu+%zu in %zu", el.offset, el.len, ip.len);
            if (el.udp_encap) {
                FUZZ_CHECK(ust == PE_OK && el.offset == u.payload_offset && el.len == u.payload_len, "EESP in UDP");
                FUZZ_CHECK(pe_ipsec_udp_classify(pkt + el.offset, el.len, NULL, NULL) == PE_UDP4500_EESP, "EESP demux");
                FUZZ_CHECK(u.dport == ports[i] || ((flags & PE_EESP_LOCATE_EITHER_PORT) && u.sport == ports[i]),
                           "EESP port");
            } else {
                FUZZ_CHECK(ip.protocol == proto && el.offset == ip.l4_offset, "EESP by protocol");
            }
        }
    }
    if (ust == PE_OK) {
        uint16_t c;
        FUZZ_CHECK(pe_udp_checksum(pkt, avail, &c) == PE_OK && c != 0, "UDP checksum %s", "of a UDP datagram");
    }
    (void)pe_ip_checksum(pkt, avail);
}

static void check_ip(const uint8_t *pkt, size_t avail)
{
    check_locate(pkt, avail);
    pe_ip_info ip;
    pe_status st = pe_ip_parse(pkt, avail, &ip);
    size_t wire;
    pe_status wst = pe_ip_wire_length(pkt, avail, &wire);
    if (st != PE_OK)
        return;
    FUZZ_CHECK(ip.version == 4 || ip.version == 6, "version %u", ip.version);
    FUZZ_CHECK((pkt[0] >> 4) == ip.version, "version nibble");
    FUZZ_CHECK(ip.len <= avail, "length %zu past %zu given", ip.len, avail);
    FUZZ_CHECK(ip.hdr_len <= ip.l4_offset && ip.l4_offset <= ip.len, "hdr %zu, l4 %zu, len %zu", ip.hdr_len,
               ip.l4_offset, ip.len);
    FUZZ_CHECK(ip.proto_field < ip.l4_offset && pkt[ip.proto_field] == ip.protocol, "protocol field");
    FUZZ_CHECK(ip.n_ext <= PE_IPV6_MAX_EXT, "%u extension headers", ip.n_ext);
    size_t prev_end = ip.hdr_len;
    for (unsigned i = 0; i < ip.n_ext; i++) {
        FUZZ_CHECK(ip.ext[i].offset == prev_end && ip.ext[i].offset + (size_t)ip.ext[i].len <= ip.l4_offset,
                   "extension header %u at %u+%u", i, ip.ext[i].offset, ip.ext[i].len);
        prev_end = ip.ext[i].offset + (size_t)ip.ext[i].len;
    }
    FUZZ_CHECK(ip.n_ext == 0 || prev_end == ip.l4_offset, "extension chain ends at %zu, l4 at %zu", prev_end,
               ip.l4_offset);
    if (ip.version == 4) {
        FUZZ_CHECK(ip.hdr_len == (pkt[0] & 0xfu) * 4 && ip.hdr_len >= 20 && ip.len == pe_get16(pkt + 2), "IPv4 header");
        FUZZ_CHECK(ip.is_fragment == ((pe_get16(pkt + 6) & 0x3fff) != 0), "IPv4 fragment flag");
    } else {
        FUZZ_CHECK(ip.hdr_len == 40 && ip.len == 40u + pe_get16(pkt + 4), "IPv6 header");
    }
    FUZZ_CHECK(wst == PE_OK && wire == ip.len, "wire length %s %zu, parse says %zu", pe_status_name(wst), wire, ip.len);
    if (ip.is_fragment)
        (void)pe_ip_first_fragment(pkt, &ip);

    pe_udp_view u;
    st = pe_ip_udp(pkt, avail, &u);
    if (st == PE_OK) {
        FUZZ_CHECK(ip.protocol == PE_IPPROTO_UDP && u.udp_offset == ip.l4_offset, "UDP view offset");
        FUZZ_CHECK(u.payload_offset == u.udp_offset + 8 && u.payload_offset + u.payload_len <= ip.len,
                   "UDP payload %zu+%zu in %zu", u.payload_offset, u.payload_len, ip.len);
        FUZZ_CHECK(u.sport == pe_get16(pkt + u.udp_offset) && u.dport == pe_get16(pkt + u.udp_offset + 2), "ports");
        (void)pe_udp_checksum_ok(pkt, &ip, pkt + u.udp_offset, u.payload_len + 8);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    if (n < 1)
        return 0;
    const uint8_t *f = d + 1;
    size_t len = n - 1;
    /* The selected link type first, then every other one on the same octets. */
    uint32_t first = LINKTYPES[d[0] % (sizeof LINKTYPES / sizeof LINKTYPES[0])];
    for (size_t i = 0; i <= sizeof LINKTYPES / sizeof LINKTYPES[0]; i++) {
        uint32_t lt = i == 0 ? first : LINKTYPES[i - 1];
        size_t off = 0;
        pe_status st = pe_frame_ip_offset(lt, f, len, &off);
        if (st != PE_OK)
            continue;
        FUZZ_CHECK(off <= len, "linktype %u: IP at %zu of %zu", lt, off, len);
        check_ip(f + off, len - off);
    }
    check_ip(f, len);
    return 0;
}
