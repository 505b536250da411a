/*
 * Link-layer framing: where a captured frame's IP packet starts, behind its
 * link-layer header (Ethernet with 802.1Q/802.1ad tags, Linux cooked
 * capture v1 and v2, or none), and the Ethernet FCS a rewritten frame needs.
 * The capture files (pe/capture.h) carry such frames; the framing is the
 * protocols', not the file formats'.
 */
#ifndef PE_LINK_H
#define PE_LINK_H

#include <stddef.h>
#include <stdint.h>

#include "pe/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Link types (LINKTYPE_* of the tcpdump registry) the core understands. */
#define PE_LINKTYPE_ETHERNET 1u
#define PE_LINKTYPE_RAW 101u
#define PE_LINKTYPE_IPV4 228u
#define PE_LINKTYPE_IPV6 229u
#define PE_LINKTYPE_LINUX_SLL 113u  /* Linux "cooked" capture (tcpdump -i any) */
#define PE_LINKTYPE_LINUX_SLL2 276u /* its successor, with the interface index */

#define PE_ETHERTYPE_IPV4 0x0800u
#define PE_ETHERTYPE_IPV6 0x86DDu
#define PE_ETH_FCS_LEN 4u /* the CRC-32 of IEEE 802.3 */
/* Largest link-layer header pe_frame_locate accepts: SLL2 header plus the tag stack. */
#define PE_FRAME_L2_MAX (20u + 4u * 4u)
/* *type_off of a frame whose link-layer header has no Ethertype field. */
#define PE_FRAME_NO_ETHERTYPE SIZE_MAX

/*
 * Frame helpers shared by every protocol.
 * pe_frame_ip_offset: where the IP packet starts in a frame of `linktype`
 * (skipping Ethernet and VLAN tags), PE_ERR_CAP_NOT_IP when it carries no IP.
 */
pe_status pe_frame_ip_offset(uint32_t linktype, const uint8_t *frame, size_t len, size_t *ip_off);
/*
 * The same, and *type_off: the Ethertype field that announced IP (the one a
 * transform rewrites when the IP version changes), or PE_FRAME_NO_ETHERTYPE.
 */
pe_status pe_frame_locate(uint32_t linktype, const uint8_t *frame, size_t len, size_t *ip_off, size_t *type_off);
/* The Ethernet FCS of a frame given in two parts (a, then b): the CRC-32 to be sent least significant octet first. */
uint32_t pe_eth_fcs(const uint8_t *a, size_t a_len, const uint8_t *b, size_t b_len);

#ifdef __cplusplus
}
#endif

#endif
