/*
 * Link-layer framing (pe/link.h): the link-layer header in front of a
 * captured IP packet, and the Ethernet FCS behind it.
 *
 * A frame is untrusted (it comes from a capture file); every offset is
 * checked against the frame's length before the octets there are read.
 */
#include "pe/link.h"

#include <pthread.h>

#include "pe/bytes.h"

#define ETHERTYPE_8021Q 0x8100u
#define ETHERTYPE_8021AD 0x88A8u
#define ETHERTYPE_QINQ_OLD 0x9100u /* pre-802.1ad outer tag some switches still send */
#define ETH_HDR_LEN 14u
#define ETH_TYPE_OFF 12u
#define VLAN_TAG_LEN 4u
/* Deeper stacks do not occur in practice; the bound keeps garbage from looping. */
#define MAX_VLAN_TAGS 4u
#define SLL_HDR_LEN 16u
#define SLL_HATYPE_OFF 2u
#define SLL_PROTOCOL_OFF 14u
#define SLL2_HDR_LEN 20u
#define SLL2_PROTOCOL_OFF 0u
#define SLL2_HATYPE_OFF 8u
/* On netlink captures the protocol field is a netlink family, not an Ethertype. */
#define ARPHRD_NETLINK 824u

_Static_assert(PE_FRAME_L2_MAX == SLL2_HDR_LEN + MAX_VLAN_TAGS * VLAN_TAG_LEN, "pe/link.h's bound is this walk's");

/* The Ethernet FCS: CRC-32 (reflected, polynomial 0xEDB88320), sent least significant octet first. */
static uint32_t crc32_table[256];
static pthread_once_t crc32_once = PTHREAD_ONCE_INIT;

static void crc32_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1u ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc32_table[i] = c;
    }
}

/* crc starts as 0xFFFFFFFF; the FCS is its complement once every part is in. */
static uint32_t crc32_update(uint32_t crc, const uint8_t *p, size_t n)
{
    while (n--)
        crc = crc32_table[(crc ^ *p++) & 0xFFu] ^ (crc >> 8);
    return crc;
}

uint32_t pe_eth_fcs(const uint8_t *a, size_t a_len, const uint8_t *b, size_t b_len)
{
    pthread_once(&crc32_once, crc32_init);
    return ~crc32_update(crc32_update(0xFFFFFFFFu, a, a_len), b, b_len);
}

static int is_vlan_tpid(uint16_t t)
{
    return t == ETHERTYPE_8021Q || t == ETHERTYPE_8021AD || t == ETHERTYPE_QINQ_OLD;
}

/*
 * Follow an Ethertype field through stacked VLAN tags.  `type_off` is the
 * first Ethertype, `next` where the payload it announces starts.  On success
 * *type_off_out is the Ethertype that announced IP (the one a transform
 * rewrites when the IP version changes).
 */
static pe_status ethertype_walk(const uint8_t *f, size_t len, size_t type_off, size_t next, size_t *ip_off,
                                size_t *type_off_out)
{
    for (unsigned tags = 0;; tags++) {
        if (next > len)
            return PE_ERR_CAP_NOT_IP;
        uint16_t et = pe_get16(f + type_off);
        if (et == PE_ETHERTYPE_IPV4 || et == PE_ETHERTYPE_IPV6) {
            *ip_off = next;
            *type_off_out = type_off;
            return PE_OK;
        }
        if (!is_vlan_tpid(et) || tags == MAX_VLAN_TAGS)
            return PE_ERR_CAP_NOT_IP;
        type_off = next + 2; /* after the tag's TCI */
        next += VLAN_TAG_LEN;
    }
}

/*
 * A frame too short for its link-layer header is PE_ERR_CAP_NOT_IP: nothing
 * says it is IP.  A frame whose header announces IP but holds no (or too few)
 * IP octets is located anyway (*ip_off may equal len); the IP layer then
 * reports the truncation, which is the more useful diagnosis.
 */
pe_status pe_frame_locate(uint32_t linktype, const uint8_t *f, size_t len, size_t *ip_off, size_t *type_off)
{
    *type_off = PE_FRAME_NO_ETHERTYPE;
    switch (linktype) {
    case PE_LINKTYPE_ETHERNET:
        if (len < ETH_HDR_LEN)
            return PE_ERR_CAP_NOT_IP;
        return ethertype_walk(f, len, ETH_TYPE_OFF, ETH_HDR_LEN, ip_off, type_off);
    case PE_LINKTYPE_LINUX_SLL:
        if (len < SLL_HDR_LEN || pe_get16(f + SLL_HATYPE_OFF) == ARPHRD_NETLINK)
            return PE_ERR_CAP_NOT_IP;
        return ethertype_walk(f, len, SLL_PROTOCOL_OFF, SLL_HDR_LEN, ip_off, type_off);
    case PE_LINKTYPE_LINUX_SLL2:
        if (len < SLL2_HDR_LEN || pe_get16(f + SLL2_HATYPE_OFF) == ARPHRD_NETLINK)
            return PE_ERR_CAP_NOT_IP;
        return ethertype_walk(f, len, SLL2_PROTOCOL_OFF, SLL2_HDR_LEN, ip_off, type_off);
    case PE_LINKTYPE_RAW:
        /* LINKTYPE_RAW is either version; the first nibble says which, or that it is neither */
        if (len < 1 || ((f[0] >> 4) != 4 && (f[0] >> 4) != 6))
            return PE_ERR_CAP_NOT_IP;
        *ip_off = 0;
        return PE_OK;
    case PE_LINKTYPE_IPV4:
    case PE_LINKTYPE_IPV6:
        *ip_off = 0;
        return PE_OK;
    default:
        return PE_ERR_CAP_LINKTYPE;
    }
}

pe_status pe_frame_ip_offset(uint32_t linktype, const uint8_t *frame, size_t len, size_t *ip_off)
{
    size_t type_off;
    if (!ip_off || (!frame && len))
        return PE_ERR_INVALID_ARGUMENT;
    return pe_frame_locate(linktype, frame, len, ip_off, &type_off);
}

