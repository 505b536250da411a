/*
 * Capture tests: link-layer framing: where the IP packet starts in a
 * frame, locating it, and the Ethernet FCS.
 */
#include "capture_tests.h"

/* ---- pe_frame_ip_offset ------------------------------------------------------------------ */

/* pe/link.h's two other calls: the Ethertype that announced IP, and the FCS (CRC-32's check value). */
static void test_frame_locate_and_fcs(void)
{
    uint8_t ip4[64], f[128];
    size_t n4 = make_ipv4(ip4, 'x', 8, 0), off = 99, type_off = 99, n;

    n = make_eth(f, ip4, n4, 2, 0);
    CHECK_ST(pe_frame_locate(PE_LINKTYPE_ETHERNET, f, n, &off, &type_off), PE_OK);
    CHECK(off == 22 && type_off == 20);
    CHECK_ST(pe_frame_locate(PE_LINKTYPE_RAW, ip4, n4, &off, &type_off), PE_OK);
    CHECK(off == 0 && type_off == PE_FRAME_NO_ETHERTYPE);
    CHECK(pe_eth_fcs((const uint8_t *)"1234", 4, (const uint8_t *)"56789", 5) == 0xCBF43926u);
    CHECK(pe_eth_fcs((const uint8_t *)"123456789", 9, NULL, 0) == 0xCBF43926u);
}


static void test_frame_ip_offset(void)
{
    uint8_t ip4[64], ip6[64], f[128];
    size_t n4 = make_ipv4(ip4, 'x', 8, 0), n6 = make_ipv6(ip6, 'x', 8), off = 99, n;

    n = make_eth(f, ip4, n4, 0, 60);
    CHECK_ST(pe_frame_ip_offset(PE_LINKTYPE_ETHERNET, f, n, &off), PE_OK);
    CHECK(off == 14);
    n = make_eth(f, ip6, n6, 2, 0);
    CHECK_ST(pe_frame_ip_offset(PE_LINKTYPE_ETHERNET, f, n, &off), PE_OK);
    CHECK(off == 22);
    n = make_eth(f, ip4, n4, 4, 0);
    CHECK_ST(pe_frame_ip_offset(PE_LINKTYPE_ETHERNET, f, n, &off), PE_OK);
    CHECK(off == 30);
    n = make_eth(f, ip4, n4, 5, 0); /* past the tag bound */
    CHECK_ST(pe_frame_ip_offset(PE_LINKTYPE_ETHERNET, f, n, &off), PE_ERR_CAP_NOT_IP);
    n = make_eth(f, ip4, n4, 0, 0);
    put_u16(f + 12, 0x0806, 1); /* ARP */
    CHECK_ST(pe_frame_ip_offset(PE_LINKTYPE_ETHERNET, f, n, &off), PE_ERR_CAP_NOT_IP);
    CHECK_ST(pe_frame_ip_offset(PE_LINKTYPE_ETHERNET, f, 13, &off), PE_ERR_CAP_NOT_IP);
    put_u16(f + 12, 0x0800, 1);
    CHECK_ST(pe_frame_ip_offset(PE_LINKTYPE_ETHERNET, f, 14, &off), PE_OK); /* IP layer reports the rest */
    CHECK(off == 14);
    put_u16(f + 12, 0x8100, 1); /* tag cut short */
    CHECK_ST(pe_frame_ip_offset(PE_LINKTYPE_ETHERNET, f, 17, &off), PE_ERR_CAP_NOT_IP);
    put_u16(f + 12, 0x9100, 1);
    put_u16(f + 16, 0x86DD, 1);
    CHECK_ST(pe_frame_ip_offset(PE_LINKTYPE_ETHERNET, f, 18, &off), PE_OK);
    CHECK(off == 18);

    CHECK_ST(pe_frame_ip_offset(PE_LINKTYPE_RAW, ip4, n4, &off), PE_OK);
    CHECK(off == 0);
    CHECK_ST(pe_frame_ip_offset(PE_LINKTYPE_RAW, ip6, n6, &off), PE_OK);
    CHECK_ST(pe_frame_ip_offset(PE_LINKTYPE_RAW, f, 0, &off), PE_ERR_CAP_NOT_IP);
    f[0] = 0x55;
    CHECK_ST(pe_frame_ip_offset(PE_LINKTYPE_RAW, f, 1, &off), PE_ERR_CAP_NOT_IP);
    CHECK_ST(pe_frame_ip_offset(PE_LINKTYPE_IPV4, ip4, n4, &off), PE_OK);
    CHECK_ST(pe_frame_ip_offset(PE_LINKTYPE_IPV6, ip6, 0, &off), PE_OK);
    CHECK(off == 0);

    /* Linux cooked captures */
    memset(f, 0, sizeof f);
    put_u16(f + 2, 1, 1); /* ARPHRD_ETHER */
    put_u16(f + 14, 0x0800, 1);
    memcpy(f + 16, ip4, n4);
    CHECK_ST(pe_frame_ip_offset(PE_LINKTYPE_LINUX_SLL, f, 16 + n4, &off), PE_OK);
    CHECK(off == 16);
    CHECK_ST(pe_frame_ip_offset(PE_LINKTYPE_LINUX_SLL, f, 15, &off), PE_ERR_CAP_NOT_IP);
    put_u16(f + 2, 824, 1); /* netlink: the protocol field is no Ethertype */
    CHECK_ST(pe_frame_ip_offset(PE_LINKTYPE_LINUX_SLL, f, 16 + n4, &off), PE_ERR_CAP_NOT_IP);
    memset(f, 0, sizeof f);
    put_u16(f + 0, 0x8100, 1);
    put_u16(f + 22, 0x86DD, 1);
    put_u16(f + 8, 1, 1);
    memcpy(f + 24, ip6, n6);
    CHECK_ST(pe_frame_ip_offset(PE_LINKTYPE_LINUX_SLL2, f, 24 + n6, &off), PE_OK);
    CHECK(off == 24);
    CHECK_ST(pe_frame_ip_offset(PE_LINKTYPE_LINUX_SLL2, f, 19, &off), PE_ERR_CAP_NOT_IP);

    CHECK_ST(pe_frame_ip_offset(147, f, 40, &off), PE_ERR_CAP_LINKTYPE);
    CHECK_ST(pe_frame_ip_offset(PE_LINKTYPE_ETHERNET, NULL, 40, &off), PE_ERR_INVALID_ARGUMENT);
}

int main(void)
{
    test_frame_ip_offset();
    test_frame_locate_and_fcs();
    printf("test_capture_frame: %ld checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
