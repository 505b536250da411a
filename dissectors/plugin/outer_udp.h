/*
 * What the dissectors do about the UDP they arrive in (PSP on 1000, EESP on
 * 4500).
 *
 * Port precedence.  Wireshark's UDP (packet-udp.c, decode_udp_ports, the
 * same in 4.0 to 4.6) tries the lower of the two ports first, so a PSP
 * packet to 1000 from source port 631 went to CUPS and was never decrypted.
 * Before both ports' registrations it tries an entry that differs from its
 * registration, as a Decode As or a port preference leaves it.  So each
 * dissector keeps its registration (with the port preference and Decode As)
 * and points its entries at a second handle, "promoted", that runs one
 * dispatch for every packet from or to any promoted port:
 *
 *   1. a packet to a promoted port that its protocol claims (PSP: every one;
 *      EESP: what eesp.md §14 calls EESP) goes to that protocol;
 *   2. everything else goes through UDP's own order (changed entries, then
 *      the lower port, then the higher) as if no entry were promoted.
 *
 * Heuristics stay after the ports, as UDP has them by default; with UDP's
 * try_heuristic_first set they come after a promoted port's own packets.
 * Decode As, a preference change or a profile change puts the registrations
 * back; pe_ws_udp_promote() runs again after each (handoff, preference
 * callback, and the init routine run before every dissection of a file).
 */
#ifndef PE_WS_OUTER_UDP_H
#define PE_WS_OUTER_UDP_H

#include <epan/expert.h>
#include <epan/packet.h>

#include "pe/status.h"

/* Whether a packet to one of the protocol's ports is the protocol's. */
typedef gboolean (*pe_ws_udp_claim_fn)(tvbuff_t *tvb, packet_info *pinfo);

/*
 * The promoted handle of `registered` (at most a few per plugin): of
 * protocol `proto` (one in name only, so that it adds no layer of its own),
 * with `registered`'s description, so that Decode As shows and saves the
 * registration's name.
 */
dissector_handle_t pe_ws_udp_precedence_handle(dissector_handle_t registered, int proto, const char *name,
                                               pe_ws_udp_claim_fn claim);

/* Point every udp.port entry currently at `registered` to its promoted handle. */
void pe_ws_udp_promote(dissector_handle_t registered);

/*
 * IPv6 UDP checksum 0, which the PSP reference sends and RFC 6936 allows for
 * tunnel protocols, is an error to Wireshark's UDP unless its preference
 * udp.ignore_ipv6_zero_checksum is set.  Where UDP flagged it on the packet
 * whose payload is tvb, `ei` (a note) on item says so and names the
 * preference.
 */
void pe_ws_udp_zero_checksum_note(tvbuff_t *tvb, packet_info *pinfo, proto_item *item, expert_field *ei);

/*
 * What a receiving endpoint makes of the UDP checksum of the datagram whose
 * payload is tvb (eesp.md D17), whatever Wireshark's UDP preferences: PE_OK,
 * PE_ERR_UDP_ZERO_CHECKSUM (0 over IPv6) or PE_ERR_UDP_CHECKSUM (wrong and
 * non-zero).  PE_OK too where it cannot be told: the UDP header is not the
 * 8 octets before tvb in the frame, or the capture cut the datagram.
 */
pe_status pe_ws_udp_checksum_verdict(tvbuff_t *tvb, packet_info *pinfo);

#endif
