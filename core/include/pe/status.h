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

#define PE_STATUS_LIST(X)                                                                          \
    X(PE_OK, "ok", "success")                                                                      \
    /* generic */                                                                                  \
    X(PE_ERR_NOMEM, "out-of-memory", "out of memory")                                              \
    X(PE_ERR_INVALID_ARGUMENT, "invalid-argument", "invalid argument")                             \
    X(PE_ERR_BUFFER_TOO_SMALL, "buffer-too-small", "output buffer too small")                      \
    X(PE_ERR_CRYPTO_BACKEND, "crypto-backend", "OpenSSL reported an internal failure")             \
    X(PE_ERR_KEY_LENGTH, "bad-key-length", "key length does not match the algorithm")              \
    X(PE_ERR_AUTH, "authentication-failed", "ICV verification failed")                             \
    X(PE_ERR_NO_KEY, "no-key", "no key configured for this SPI")                                   \
    X(PE_ERR_IV_EXHAUSTED, "iv-exhausted", "IV counter exhausted: refusing to wrap and reuse an IV") \
    X(PE_ERR_UNSUPPORTED, "unsupported", "operation not supported")                                \
    X(PE_ERR_BATCH_STOPPED, "batch-stopped", "not processed: the batch stopped at an earlier packet that failed") \
    /* IP / UDP framing */                                                                         \
    X(PE_ERR_IP_TRUNCATED, "ip-truncated", "IP packet truncated")                                  \
    X(PE_ERR_IP_VERSION, "ip-bad-version", "not an IPv4 or IPv6 packet")                           \
    X(PE_ERR_IP_HEADER_LENGTH, "ip-bad-header-length", "bad IPv4 header length (IHL)")             \
    X(PE_ERR_IP_LENGTH, "ip-bad-length", "IP length field disagrees with the packet length")       \
    X(PE_ERR_IP_FRAGMENT, "ip-fragment", "IP fragment: reassemble before processing")              \
    X(PE_ERR_IP_EXT_HEADER, "ip-bad-extension-header", "malformed or truncated IPv6 extension header") \
    X(PE_ERR_IP_TOO_LONG, "ip-too-long", "result would exceed the maximum IP packet length")       \
    X(PE_ERR_NOT_UDP, "not-udp", "not a UDP packet")                                               \
    X(PE_ERR_UDP_PORT, "udp-wrong-port", "UDP destination port is not the configured port")       \
    X(PE_ERR_UDP_TRUNCATED, "udp-truncated", "UDP header truncated")                               \
    X(PE_ERR_UDP_LENGTH, "udp-bad-length", "UDP length disagrees with the IP length")              \
    X(PE_ERR_UDP_CHECKSUM, "udp-bad-checksum", "UDP checksum is wrong")                            \
    /* PSP */                                                                                      \
    X(PE_ERR_PSP_TRUNCATED, "psp-truncated", "PSP packet shorter than its header and ICV")         \
    X(PE_ERR_PSP_ALWAYS_ONE, "psp-always-one-bit-clear", "PSP always-1 bit is clear")              \
    X(PE_ERR_PSP_VERSION, "psp-unsupported-version", "PSP version is not supported (only 0-3)")    \
    X(PE_ERR_PSP_VERSION_DISABLED, "psp-version-disabled", "PSP version is disabled on this receiver") \
    X(PE_ERR_PSP_HDR_EXT_LEN, "psp-bad-hdr-ext-len", "PSP Hdr Ext Len is 0 or runs past the packet") \
    X(PE_ERR_PSP_VC_LENGTH, "psp-vc-without-room", "PSP V bit set but Hdr Ext Len leaves no room for the VC") \
    X(PE_ERR_PSP_CRYPT_OFFSET, "psp-crypt-offset-past-payload", "PSP crypt offset points past the end of the payload") \
    X(PE_ERR_PSP_CRYPT_OFFSET_RANGE, "psp-crypt-offset-out-of-range", "PSP crypt offset must be 0..63 words") \
    X(PE_ERR_PSP_GMAC_CRYPT_OFFSET, "psp-gmac-crypt-offset", "PSP GMAC versions (2, 3) send crypt offset 0") \
    X(PE_ERR_PSP_TOO_LONG, "psp-too-long", "PSP packet longer than any UDP payload can be")       \
    X(PE_ERR_PSP_MODE, "psp-bad-mode", "packet does not fit the PSP mode (tunnel needs IPv4/IPv6 inside)") \
    X(PE_ERR_PSP_INNER, "psp-bad-inner-packet", "PSP tunnel payload is not one whole IPv4/IPv6 packet (header or length fields)") \
    /* EESP */                                                                                     \
    X(PE_ERR_NOT_EESP, "not-eesp", "not an EESP packet (other IP protocol or UDP port)")          \
    X(PE_ERR_NAT_KEEPALIVE, "nat-keepalive", "UDP 4500 NAT keepalive, not EESP")                     \
    X(PE_ERR_IKE_MARKER, "ike-non-esp-marker", "UDP 4500 IKE message (non-ESP marker), not EESP")    \
    X(PE_ERR_ESP_IN_UDP, "esp-in-udp", "UDP 4500 ESP packet (first bit 0), not EESP")                \
    X(PE_ERR_EESP_TRUNCATED, "eesp-truncated", "EESP packet shorter than its headers and ICV")     \
    X(PE_ERR_EESP_COMPAT_BIT, "eesp-compat-bit-clear", "EESP ESP-compatibility bit is clear (ESP, not EESP)") \
    X(PE_ERR_EESP_VERSION, "eesp-unsupported-version", "EESP version is not the negotiated version 0") \
    X(PE_ERR_EESP_RESERVED, "eesp-reserved-bits-set", "EESP Base Header reserved bits are not zero") \
    X(PE_ERR_EESP_OPTIONS, "eesp-options-overrun", "EESP options run past Opt Len, or would not fit in it") \
    X(PE_ERR_EESP_CRYPT_OFFSET_OPTION, "eesp-bad-crypt-offset-option", "EESP Crypt Offset option has a bad length or appears twice") \
    X(PE_ERR_EESP_PAYLOAD_OFFSET, "eesp-bad-payload-offset", "EESP PayloadOffset disagrees with the header lengths") \
    X(PE_ERR_EESP_CRYPT_OFFSET, "eesp-crypt-offset-past-payload", "EESP crypt offset reaches past the payload") \
    X(PE_ERR_EESP_CRYPT_OFFSET_NOT_ALLOWED, "eesp-crypt-offset-not-allowed", "EESP Crypt Offset option not allowed or above the announced maximum") \
    X(PE_ERR_EESP_UNKNOWN_OPTION, "eesp-unknown-option", "EESP packet carries an unknown option (strict receiver)") \
    X(PE_ERR_EESP_NO_SA, "eesp-no-sa", "no EESP SA for this SPI")                                  \
    X(PE_ERR_EESP_SUB_SA, "eesp-sub-sa-out-of-range", "EESP Session ID is above the maximum Sub SA ID") \
    X(PE_ERR_EESP_SEQ_ZERO, "eesp-sequence-zero", "EESP sequence number 0 is never valid")         \
    X(PE_ERR_REPLAY_DUPLICATE, "replay-duplicate", "sequence number already received (replay)")     \
    X(PE_ERR_REPLAY_TOO_OLD, "replay-too-old", "sequence number is left of the replay window")       \
    X(PE_ERR_SEQ_EXHAUSTED, "sequence-exhausted", "sequence number would wrap: rekey the SA")       \
    X(PE_ERR_EESP_PAD_LENGTH, "eesp-bad-pad-length", "EESP Pad Length does not fit the packet")      \
    X(PE_ERR_EESP_INNER, "eesp-bad-inner-packet", "EESP inner packet is not the IPv4/IPv6 packet the mode and format call for (version, length)") \
    X(PE_ERR_EESP_DUMMY, "eesp-dummy-packet", "EESP dummy packet (Next Header 59): authenticated and discarded") \
    X(PE_ERR_EESP_SSKDF_UNDEFINED, "sskdf-undefined", "SSKDF_AES256_CMAC is not defined by draft-ietf-ipsecme-eesp-ikev2-02") \
    X(PE_ERR_EESP_SUITE, "eesp-bad-suite", "unknown EESP AEAD suite or key size")                  \
    X(PE_ERR_EESP_CONFIG, "eesp-bad-config", "EESP SA settings contradict each other")             \
    X(PE_ERR_EESP_IIV_NEEDS_SEQ, "eesp-iiv-needs-seq", "implicit-IV suites need the Sequence Number (SN = None is refused)") \
    X(PE_ERR_EESP_GMAC_LINUX_XFRM, "eesp-gmac-linux-xfrm", "AES-GMAC with aad linux-xfrm (the Linux XFRM AAD) is undefined (D12)") \
    X(PE_ERR_EESP_OPTIMIZED_PAYLOAD, "eesp-optimized-needs-ip", "the optimized format can only carry an IPv4/IPv6 packet") \
    /* captures */                                                                                 \
    X(PE_ERR_CAP_IO, "capture-io", "capture file could not be read or written")                   \
    X(PE_ERR_CAP_FORMAT, "capture-bad-format", "not a pcap or pcapng file, or a corrupt block")   \
    X(PE_ERR_CAP_TRUNCATED, "capture-truncated", "capture file ends in the middle of a record")   \
    X(PE_ERR_CAP_LINKTYPE, "capture-unsupported-linktype", "capture link type is not Ethernet or raw IP") \
    X(PE_ERR_CAP_SNAPLEN, "capture-packet-cut", "packet was cut by the capture snap length")       \
    X(PE_ERR_CAP_NOT_IP, "not-ip", "frame does not carry IPv4 or IPv6")                            \
    X(PE_ERR_CAP_ABORTED, "capture-aborted", "capture processing was aborted by the caller")      \
    /* key files */                                                                                \
    X(PE_ERR_KEYFILE_SYNTAX, "keyfile-syntax", "key file syntax error")                            \
    X(PE_ERR_KEYFILE_VALUE, "keyfile-bad-value", "key file value is invalid")                      \
    X(PE_ERR_KEYFILE_DUPLICATE, "keyfile-duplicate", "key file defines the same SA twice")

typedef enum pe_status {
#define PE_STATUS_ENUM(code, name, msg) code,
    PE_STATUS_LIST(PE_STATUS_ENUM)
#undef PE_STATUS_ENUM
    PE_STATUS_COUNT
} pe_status;

/* Stable, kebab-case identifier ("authentication-failed"); "unknown-status" if out of range. */
const char *pe_status_name(pe_status s);
/* One-line human message; never contains key material. */
const char *pe_status_message(pe_status s);

#ifdef __cplusplus
}
#endif
#endif
