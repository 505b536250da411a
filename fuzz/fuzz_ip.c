/*
 * IP and frame walking on hostile octets: pe_frame_ip_offset for every link
 * type the core knows, then pe_ip_parse, pe_ip_wire_length, pe_ip_udp,
 * pe_ip_first_fragment and pe_udp_checksum_ok on what it finds, with the
 * invariants the callers rely on (every offset within what was given).
 *
 * Input: linktype selector(1) | frame.
 */
#include <string.h>

#include "fuzz.h"
#include "pe/capture.h"
#include "pe/ip.h"

static const uint32_t LINKTYPES[] = {PE_LINKTYPE_RAW,       PE_LINKTYPE_ETHERNET, PE_LINKTYPE_IPV4, PE_LINKTYPE_IPV6,
                                     PE_LINKTYPE_LINUX_SLL, PE_LINKTYPE_LINUX_SLL2, 0, 147};

static void check_ip(const uint8_t *pkt, size_t avail)
{
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
