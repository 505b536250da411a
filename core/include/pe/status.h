/*
 * One error enum for the whole core, with a message table (status.c).
 *
 * Every rejection has its own code so that callers (the Python faces, the CLI
 * summaries, the Wireshark plugin's expert info) can tell the user exactly why
 * a packet or an input was refused.  Codes are grouped by layer; the numeric
 * values are not stable across releases, the names from pe_status_name() are.
 */
#ifndef PE_STATUS_H
#define PE_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Every status has exactly one category, the meaning every face shows for it:
 * the Python exception classes, the plugin's and the Lua scripts' expert
 * items.  Names are stable like the status names.
 */
#define PE_CATEGORY_LIST(X) \
    X(PE_CAT_OK, "ok", "success") \
    X(PE_CAT_MALFORMED, "malformed", "the packet breaks its format (IP, UDP, PSP or EESP), also when its ICV verified") \
    X(PE_CAT_AUTHENTICATION, "authentication", "the ICV did not verify: wrong key, or altered in transit") \
    X(PE_CAT_REPLAY, "replay", "a sequence number already received, or left of the replay window") \
    X(PE_CAT_POLICY, "policy", "well-formed, and dropped by the receiver's settings or by design (a dummy packet)") \
    X(PE_CAT_NO_KEY, "no-key", "no key or SA for the packet's SPI") \
    X(PE_CAT_NOT_THIS_PROTOCOL, "not-this-protocol", "not a packet of this protocol for this receiver (another protocol or port, ESP/IKE on 4500)") \
    X(PE_CAT_CUT_BY_CAPTURE, "cut-by-capture", "the capture's snap length cut the packet: nothing can be said of the rest") \
    X(PE_CAT_CONFIGURATION, "configuration", "the caller's settings, keys or key file are wrong") \
    X(PE_CAT_IO, "io", "a capture file, device or socket could not be read or written, or a file is not a capture") \
    X(PE_CAT_LIMIT, "limit", "a size or counter limit was reached (output room, IV or sequence space)") \
    X(PE_CAT_INTERNAL, "internal", "out of memory, or OpenSSL failed")

typedef enum pe_category {
#define PE_CATEGORY_ENUM(id, name, description) id,
    PE_CATEGORY_LIST(PE_CATEGORY_ENUM)
#undef PE_CATEGORY_ENUM
    PE_CATEGORY_COUNT
} pe_category;

#define PE_STATUS_LIST(X) \
    X(PE_OK, "ok", PE_CAT_OK, "success") \
    /* generic */ \
    X(PE_ERR_NOMEM, "out-of-memory", PE_CAT_INTERNAL, "out of memory") \
    X(PE_ERR_INVALID_ARGUMENT, "invalid-argument", PE_CAT_CONFIGURATION, "invalid argument") \
    X(PE_ERR_BUFFER_TOO_SMALL, "buffer-too-small", PE_CAT_LIMIT, "output buffer too small") \
    X(PE_ERR_CRYPTO_BACKEND, "crypto-backend", PE_CAT_INTERNAL, "OpenSSL reported an internal failure") \
    X(PE_ERR_KEY_LENGTH, "bad-key-length", PE_CAT_CONFIGURATION, "key length does not match the algorithm") \
    X(PE_ERR_AUTH, "authentication-failed", PE_CAT_AUTHENTICATION, "ICV verification failed") \
    X(PE_ERR_NO_KEY, "no-key", PE_CAT_NO_KEY, "no key configured for this SPI") \
    X(PE_ERR_IV_EXHAUSTED, "iv-exhausted", PE_CAT_LIMIT, "IV counter exhausted: refusing to wrap and reuse an IV") \
    X(PE_ERR_UNSUPPORTED, "unsupported", PE_CAT_CONFIGURATION, "operation not supported") \
    X(PE_ERR_BATCH_STOPPED, "batch-stopped", PE_CAT_LIMIT, "not processed: the batch stopped at an earlier packet that failed") \
    /* IP / UDP framing */ \
    X(PE_ERR_IP_TRUNCATED, "ip-truncated", PE_CAT_MALFORMED, "IP packet truncated") \
    X(PE_ERR_IP_VERSION, "ip-bad-version", PE_CAT_NOT_THIS_PROTOCOL, "not an IPv4 or IPv6 packet") \
    X(PE_ERR_IP_HEADER_LENGTH, "ip-bad-header-length", PE_CAT_MALFORMED, "bad IPv4 header length (IHL)") \
    X(PE_ERR_IP_LENGTH, "ip-bad-length", PE_CAT_MALFORMED, "IP length field disagrees with the packet length") \
    X(PE_ERR_IP_FRAGMENT, "ip-fragment", PE_CAT_MALFORMED, "IP fragment: reassemble before processing") \
    X(PE_ERR_IP_EXT_HEADER, "ip-bad-extension-header", PE_CAT_MALFORMED, "malformed or truncated IPv6 extension header") \
    X(PE_ERR_IP_TOO_LONG, "ip-too-long", PE_CAT_LIMIT, "result would exceed the maximum IP packet length") \
    X(PE_ERR_NOT_UDP, "not-udp", PE_CAT_NOT_THIS_PROTOCOL, "not a UDP packet") \
    X(PE_ERR_UDP_PORT, "udp-wrong-port", PE_CAT_NOT_THIS_PROTOCOL, "UDP destination port is not the configured port") \
    X(PE_ERR_UDP_TRUNCATED, "udp-truncated", PE_CAT_MALFORMED, "UDP header truncated") \
    X(PE_ERR_UDP_LENGTH, "udp-bad-length", PE_CAT_MALFORMED, "UDP length disagrees with the IP length") \
    X(PE_ERR_UDP_CHECKSUM, "udp-bad-checksum", PE_CAT_MALFORMED, "UDP checksum is wrong") \
    X(PE_ERR_UDP_ZERO_CHECKSUM, "udp-zero-checksum", PE_CAT_MALFORMED, "UDP checksum 0 over IPv6, outside RFC 6936 zero-checksum mode") \
    /* PSP */ \
    X(PE_ERR_PSP_TRUNCATED, "psp-truncated", PE_CAT_MALFORMED, "PSP packet shorter than its header and ICV") \
    X(PE_ERR_PSP_ALWAYS_ONE, "psp-always-one-bit-clear", PE_CAT_MALFORMED, "PSP always-1 bit is clear") \
    X(PE_ERR_PSP_VERSION, "psp-unsupported-version", PE_CAT_MALFORMED, "PSP version is not supported (only 0-3)") \
    X(PE_ERR_PSP_VERSION_DISABLED, "psp-version-disabled", PE_CAT_POLICY, "PSP version is disabled on this receiver") \
    X(PE_ERR_PSP_HDR_EXT_LEN, "psp-bad-hdr-ext-len", PE_CAT_MALFORMED, "PSP Hdr Ext Len is 0 or runs past the packet") \
    X(PE_ERR_PSP_VC_LENGTH, "psp-vc-without-room", PE_CAT_MALFORMED, "PSP V bit set but Hdr Ext Len leaves no room for the VC") \
    X(PE_ERR_PSP_CRYPT_OFFSET, "psp-crypt-offset-past-payload", PE_CAT_MALFORMED, "PSP crypt offset points past the end of the payload") \
    X(PE_ERR_PSP_CRYPT_OFFSET_RANGE, "psp-crypt-offset-out-of-range", PE_CAT_CONFIGURATION, "PSP crypt offset must be 0..63 words") \
    X(PE_ERR_PSP_GMAC_CRYPT_OFFSET, "psp-gmac-crypt-offset", PE_CAT_CONFIGURATION, "PSP GMAC versions (2, 3) send crypt offset 0") \
    X(PE_ERR_PSP_TOO_LONG, "psp-too-long", PE_CAT_MALFORMED, "PSP packet longer than any UDP payload can be") \
    X(PE_ERR_PSP_MODE, "psp-bad-mode", PE_CAT_MALFORMED, "packet does not fit the PSP mode (tunnel needs IPv4/IPv6 inside)") \
    X(PE_ERR_PSP_INNER, "psp-bad-inner-packet", PE_CAT_MALFORMED, "PSP tunnel payload is not one whole IPv4/IPv6 packet (header or length fields)") \
    /* EESP */ \
    X(PE_ERR_NOT_EESP, "not-eesp", PE_CAT_NOT_THIS_PROTOCOL, "not an EESP packet (other IP protocol or UDP port)") \
    X(PE_ERR_NAT_KEEPALIVE, "nat-keepalive", PE_CAT_NOT_THIS_PROTOCOL, "UDP 4500 NAT keepalive, not EESP") \
    X(PE_ERR_IKE_MARKER, "ike-non-esp-marker", PE_CAT_NOT_THIS_PROTOCOL, "UDP 4500 IKE message (non-ESP marker), not EESP") \
    X(PE_ERR_ESP_IN_UDP, "esp-in-udp", PE_CAT_NOT_THIS_PROTOCOL, "UDP 4500 ESP packet (an ESP SA's SPI, or octet 0 not 0x80), not EESP") \
    X(PE_ERR_EESP_TRUNCATED, "eesp-truncated", PE_CAT_MALFORMED, "EESP packet shorter than its headers and ICV") \
    X(PE_ERR_EESP_COMPAT_BIT, "eesp-compat-bit-clear", PE_CAT_NOT_THIS_PROTOCOL, "EESP ESP-compatibility bit is clear (ESP, not EESP)") \
    X(PE_ERR_EESP_VERSION, "eesp-unsupported-version", PE_CAT_MALFORMED, "EESP version is not the negotiated version 0") \
    X(PE_ERR_EESP_RESERVED, "eesp-reserved-bits-set", PE_CAT_MALFORMED, "EESP Base Header reserved bits are not zero") \
    X(PE_ERR_EESP_OPTIONS, "eesp-options-overrun", PE_CAT_MALFORMED, "EESP options run past Opt Len, or would not fit in it") \
    X(PE_ERR_EESP_CRYPT_OFFSET_OPTION, "eesp-bad-crypt-offset-option", PE_CAT_MALFORMED, "EESP Crypt Offset option has a bad length or appears twice") \
    X(PE_ERR_EESP_PAYLOAD_OFFSET, "eesp-bad-payload-offset", PE_CAT_MALFORMED, "EESP PayloadOffset disagrees with the header lengths") \
    X(PE_ERR_EESP_CRYPT_OFFSET, "eesp-crypt-offset-past-payload", PE_CAT_MALFORMED, "EESP crypt offset reaches past the payload") \
    X(PE_ERR_EESP_CRYPT_OFFSET_NOT_ALLOWED, "eesp-crypt-offset-not-allowed", PE_CAT_POLICY, "EESP Crypt Offset option not allowed or above the announced maximum") \
    X(PE_ERR_EESP_UNKNOWN_OPTION, "eesp-unknown-option", PE_CAT_POLICY, "EESP packet carries an unknown option (strict receiver)") \
    X(PE_ERR_EESP_NO_SA, "eesp-no-sa", PE_CAT_NO_KEY, "no EESP SA for this SPI") \
    X(PE_ERR_EESP_SUB_SA, "eesp-sub-sa-out-of-range", PE_CAT_POLICY, "EESP Session ID is above the maximum Sub SA ID") \
    X(PE_ERR_EESP_SEQ_ZERO, "eesp-sequence-zero", PE_CAT_MALFORMED, "EESP sequence number 0 is never valid") \
    X(PE_ERR_REPLAY_DUPLICATE, "replay-duplicate", PE_CAT_REPLAY, "sequence number already received (replay)") \
    X(PE_ERR_REPLAY_TOO_OLD, "replay-too-old", PE_CAT_REPLAY, "sequence number is left of the replay window") \
    X(PE_ERR_SEQ_EXHAUSTED, "sequence-exhausted", PE_CAT_LIMIT, "sequence number would wrap: rekey the SA") \
    X(PE_ERR_EESP_PAD_LENGTH, "eesp-bad-pad-length", PE_CAT_MALFORMED, "EESP Pad Length does not fit the packet") \
    X(PE_ERR_EESP_INNER, "eesp-bad-inner-packet", PE_CAT_MALFORMED, "EESP inner packet is not the IPv4/IPv6 packet the mode and format call for (version, length)") \
    X(PE_ERR_EESP_DUMMY, "eesp-dummy-packet", PE_CAT_POLICY, "EESP dummy packet (Next Header 59): authenticated and discarded") \
    X(PE_ERR_EESP_SSKDF_UNDEFINED, "sskdf-undefined", PE_CAT_CONFIGURATION, "SSKDF_AES256_CMAC is not defined by draft-ietf-ipsecme-eesp-ikev2-02") \
    X(PE_ERR_EESP_SUITE, "eesp-bad-suite", PE_CAT_CONFIGURATION, "unknown EESP AEAD suite or key size") \
    X(PE_ERR_EESP_CONFIG, "eesp-bad-config", PE_CAT_CONFIGURATION, "EESP SA settings contradict each other") \
    X(PE_ERR_EESP_IIV_NEEDS_SEQ, "eesp-iiv-needs-seq", PE_CAT_CONFIGURATION, "implicit-IV suites need the Sequence Number (SN = None is refused)") \
    X(PE_ERR_EESP_GMAC_LINUX_XFRM, "eesp-gmac-linux-xfrm", PE_CAT_CONFIGURATION, "AES-GMAC with aad linux-xfrm (the Linux XFRM AAD) is undefined (D12)") \
    X(PE_ERR_EESP_OPTIMIZED_PAYLOAD, "eesp-optimized-needs-ip", PE_CAT_CONFIGURATION, "the optimized format can only carry an IPv4/IPv6 packet") \
    X(PE_ERR_EESP_IMPLICIT_IV, "eesp-explicit-iv-with-implicit-iv-suite", PE_CAT_CONFIGURATION, "an explicit IV was given for a suite whose IV is the Sequence Number (RFC 8750)") \
    X(PE_ERR_EESP_PAD_LENGTH_RANGE, "eesp-pad-length-out-of-range", PE_CAT_CONFIGURATION, "the requested EESP Pad Length does not fit (0..255, and within the IP length)") \
    /* ESP (RFC 4303) */ \
    X(PE_ERR_NOT_ESP, "not-esp", PE_CAT_NOT_THIS_PROTOCOL, "not an ESP packet (other IP protocol or UDP port)") \
    X(PE_ERR_EESP_IN_UDP, "eesp-in-udp", PE_CAT_NOT_THIS_PROTOCOL, "UDP 4500 EESP packet (octet 0 0x80, no ESP SA's SPI), not ESP") \
    X(PE_ERR_ESP_TRUNCATED, "esp-truncated", PE_CAT_MALFORMED, "ESP packet shorter than its header, IV, trailer and ICV") \
    X(PE_ERR_ESP_NO_SA, "esp-no-sa", PE_CAT_NO_KEY, "no ESP SA for this SPI") \
    X(PE_ERR_ESP_SEQ_ZERO, "esp-sequence-zero", PE_CAT_MALFORMED, "ESP sequence number 0 is never sent") \
    X(PE_ERR_ESP_PAD_LENGTH, "esp-bad-pad-length", PE_CAT_MALFORMED, "ESP Pad Length runs past the payload") \
    X(PE_ERR_ESP_PADDING, "esp-bad-padding", PE_CAT_MALFORMED, "ESP padding octets are not 1, 2, 3, ...") \
    X(PE_ERR_ESP_NEXT_HEADER, "esp-bad-next-header", PE_CAT_MALFORMED, "ESP Next Header does not fit the SA's mode (tunnel: 4 or 41)") \
    X(PE_ERR_ESP_INNER, "esp-bad-inner-packet", PE_CAT_MALFORMED, "ESP tunnel payload is not one whole IPv4/IPv6 packet of the announced version") \
    X(PE_ERR_ESP_DUMMY, "esp-dummy-packet", PE_CAT_POLICY, "ESP dummy packet (Next Header 59): authenticated and discarded") \
    X(PE_ERR_ESP_SUITE, "esp-bad-suite", PE_CAT_CONFIGURATION, "unknown ESP suite (encryption and integrity) or key size") \
    X(PE_ERR_ESP_CONFIG, "esp-bad-config", PE_CAT_CONFIGURATION, "ESP SA settings contradict each other") \
    X(PE_ERR_ESP_BLOCK, "esp-bad-block-length", PE_CAT_MALFORMED, "ESP ciphertext is not a whole number of the cipher's blocks (AES-CBC: 16 octets)") \
    /* captures */ \
    X(PE_ERR_CAP_IO, "capture-io", PE_CAT_IO, "capture file could not be read") \
    X(PE_ERR_CAP_WRITE, "capture-write-failed", PE_CAT_IO, "output capture could not be written (errno tells why)") \
    X(PE_ERR_CAP_FORMAT, "capture-bad-format", PE_CAT_IO, "not a pcap or pcapng file, or a corrupt block") \
    X(PE_ERR_CAP_TRUNCATED, "capture-truncated", PE_CAT_IO, "capture file ends in the middle of a record") \
    X(PE_ERR_CAP_LINKTYPE, "capture-unsupported-linktype", PE_CAT_IO, "capture link type is not Ethernet or raw IP") \
    X(PE_ERR_CAP_SNAPLEN, "capture-packet-cut", PE_CAT_CUT_BY_CAPTURE, "packet was cut by the capture snap length") \
    X(PE_ERR_CAP_NOT_IP, "not-ip", PE_CAT_NOT_THIS_PROTOCOL, "frame does not carry IPv4 or IPv6") \
    X(PE_ERR_CAP_ABORTED, "capture-aborted", PE_CAT_IO, "capture processing was aborted by the caller") \
    X(PE_ERR_CAP_RECORD_TOO_LARGE, "capture-record-too-large", PE_CAT_IO, "capture record longer than the reader's limit (16 MiB)") \
    X(PE_ERR_CAP_CONVERT, "capture-cannot-convert", PE_CAT_IO, "pcap cannot hold this pcapng input (interfaces of several link types or FCS lengths, or a time past 2106)") \
    /* key files */ \
    X(PE_ERR_KEYFILE_SYNTAX, "keyfile-syntax", PE_CAT_CONFIGURATION, "key file syntax error") \
    X(PE_ERR_KEYFILE_VALUE, "keyfile-bad-value", PE_CAT_CONFIGURATION, "key file value is invalid") \
    X(PE_ERR_KEYFILE_DUPLICATE, "keyfile-duplicate", PE_CAT_CONFIGURATION, "key file defines the same SA twice") \
    /* the live endpoint (tunnel.h) */ \
    X(PE_ERR_TUNNEL_CONFIG, "tunnel-bad-config", PE_CAT_CONFIGURATION, "tunnel settings contradict each other or the key file") \
    X(PE_ERR_TUNNEL_DEVICE, "tunnel-device", PE_CAT_IO, "the TUN device could not be made, set up, read or written (errno tells why)") \
    X(PE_ERR_TUNNEL_SOCKET, "tunnel-socket", PE_CAT_IO, "a tunnel socket could not be made, bound, read or written (errno tells why)") \
    X(PE_ERR_TUNNEL_STATS, "tunnel-stats-write", PE_CAT_IO, "the tunnel's counters file could not be written (errno tells why)") \
    X(PE_ERR_TUNNEL_TRANSPORT_HEADER, "tunnel-transport-header", PE_CAT_POLICY, "transport mode: the packet's IP header cannot be the outer one (not local to peer, a fragment, IPv4 options or IPv6 extension headers)")

typedef enum pe_status {
#define PE_STATUS_ENUM(code, name, category, msg) code,
    PE_STATUS_LIST(PE_STATUS_ENUM)
#undef PE_STATUS_ENUM
    PE_STATUS_COUNT
} pe_status;

/* Stable, kebab-case identifier ("authentication-failed"); "unknown-status" if out of range. */
const char *pe_status_name(pe_status s);
/* One-line human message; never contains key material. */
const char *pe_status_message(pe_status s);
/* The status's category; PE_CAT_INTERNAL for an out-of-range value. */
pe_category pe_status_category(pe_status s);
/* Stable kebab-case category name ("malformed"); "unknown-category" if out of range. */
const char *pe_category_name(pe_category c);
/* What the category means, one line. */
const char *pe_category_description(pe_category c);

#ifdef __cplusplus
}
#endif
#endif
