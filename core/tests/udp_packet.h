/*
 * The inner packet of the tests that count what receivers keep (test_forged.c, test_sub_sa_lru.c,
 * test_psp_key_cache.c): IPv4/UDP from 192.0.2.1 to 192.0.2.2 (RFC 5737), `size` octets, a payload
 * that is not all zeros and a valid header checksum (transport-mode decap recomputes it).
 */
#ifndef PE_TEST_UDP_PACKET_H
#define PE_TEST_UDP_PACKET_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "pe/ip.h"

static void make_udp4_packet(uint8_t *p, size_t size)
{
    memset(p, 0, size);
    p[0] = 0x45;
    pe_put16(p + 2, (uint16_t)size);
    p[8] = 64;
    p[9] = PE_IPPROTO_UDP;
    p[12] = 192, p[15] = 1, p[16] = 192, p[19] = 2;
    pe_put16(p + 20, 40000);
    pe_put16(p + 22, 5001);
    pe_put16(p + 24, (uint16_t)(size - 20));
    for (size_t i = 28; i < size; i++)
        p[i] = (uint8_t)(i * 7 + 3);
    pe_ipv4_set_checksum(p);
}

#endif
