/*
 * What the endpoint's files share: the per-protocol ops (one record per
 * protocol over the same data plane, as xfrm_type is over net/xfrm), the
 * devices and sockets, and the counters.
 */
#ifndef PE_NET_INTERNAL_H
#define PE_NET_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "pe/keyfile.h"
#include "pe/status.h"
#include "pe/tunnel.h"

/* Room in front of a received datagram for the outer IPv6 and UDP headers rebuilt there. */
#define NET_HEADROOM 48u
#define NET_BATCH 32u
#define PE_NET_TXQUEUELEN 10000 /* the TUN device's queue, in packets */

/* ---- the protocols ---- */

/* What the ops need from the endpoint's configuration. */
typedef struct net_setup {
    const pe_tunnel_config *cfg;
    uint8_t outer_header[40]; /* the sending SAs' outer IP header: local to peer */
    size_t outer_header_len;
    uint16_t port;            /* UDP port (both ends) */
    int udp;                  /* the outer is UDP */
} net_setup;

typedef struct net_proto {
    const char *name;
    uint16_t udp_port;   /* the protocol's UDP port */
    size_t spi_offset;   /* where the SPI is in the UDP (or IP) payload */
    int sub_sa_offset;   /* EESP: where the Session ID (Sub SA) is, for steering; -1 */
    /* Workers sending on one SPI each seal on a Sub SA of their own (EESP), rather than spending the SA's one
     * counter in turn under its sender's lock (ESP, PSP). */
    int own_sub_sas;
    /* The IP protocol of the outer packet straight in IP (0: none, PSP), from the sending SA line. */
    pe_status (*ip_protocol)(const pe_keyfile *kf, uint32_t spi, uint8_t *proto);
    /* A sender for one SPI of the key file, refused when its line's mode is not the endpoint's. */
    pe_status (*tx_new)(const pe_keyfile *kf, const net_setup *su, uint32_t spi, void **tx, char *why, size_t n);
    pe_status (*tx_clone)(const void *tx, void **out);
    void (*tx_free)(void *tx);
    /* Spend the next IV or sequence number of (tx, sub) for a packet (the checks of encap), then build it on
     * any clone of the same sender.  encap is the two at once. */
    pe_status (*reserve)(void *tx, uint16_t sub, const uint8_t *in, size_t len, size_t cap, uint64_t *n);
    pe_status (*encap_with)(void *tx, uint16_t sub, uint64_t n, const uint8_t *in, size_t len, uint8_t *out,
                            size_t cap, size_t *out_len);
    pe_status (*encap)(void *tx, uint16_t sub, const uint8_t *in, size_t len, uint8_t *out, size_t cap,
                       size_t *out_len);
    /* A receiver holding every SA of the key file but the sending ones (never our own packets reflected). */
    pe_status (*rx_new)(const pe_keyfile *kf, const net_setup *su, void **rx, char *why, size_t n);
    void (*rx_free)(void *rx);
    pe_status (*decap)(void *rx, const uint8_t *pkt, size_t len, uint8_t *out, size_t cap, size_t *out_len);
    /* The receiving SPIs the key file names (for per-SA counters), written to spis (at most max); the count. */
    size_t (*rx_spis)(const pe_keyfile *kf, const net_setup *su, uint32_t *spis, size_t max);
    /* A reload's carry-over: the next IV or sequence number of (tx, sub) (*exhausted when none is left), and
     * setting a new sender's forward to it. */
    uint64_t (*next)(const void *tx, uint16_t sub, int *exhausted);
    pe_status (*set_next)(void *tx, uint16_t sub, uint64_t next);
    /* The replay state of spi's SAs from the old receiver into the new (NULL: PSP keeps none). */
    pe_status (*adopt)(void *to, void *from, uint32_t spi);
    /* The key file line of a receiving SA, for comparing two files' (NULL when the file has none). */
    size_t (*line_of)(const pe_keyfile *kf, uint32_t spi);
} net_proto;

extern const net_proto pe_net_psp, pe_net_eesp, pe_net_esp;

/* ---- devices and sockets (net_io.c) ---- */

/* One queue of the TUN device `name` (made when missing), non-blocking; multi_queue for more than one; vnet:
 * with virtio-net headers (IFF_VNET_HDR). */
pe_status pe_net_tun_open(const char *name, int multi_queue, int vnet, int *fd, char *why, size_t n);
/* Ask a queue with virtio-net headers for checksums left undone and TCP super-packets: 1 when the kernel
 * takes it (then every packet comes with a header, and goes with one). */
int pe_net_tun_offload(int fd);
/* Up, with this MTU (0: left alone). */
pe_status pe_net_link_up(const char *name, unsigned mtu, char *why, size_t n);
/*
 * A worker's socket: UDP bound to local:port in a SO_REUSEPORT group whose
 * members the kernel picks by (SPI [+ Sub SA]) % workers; or raw IP of the
 * protocol, filtered to the packets of this worker.  *gro: the UDP socket
 * hands trains of datagrams (UDP_GRO).  bind_dev (or NULL): the socket sends
 * and receives on that device only, whatever the routes say (SO_BINDTODEVICE).
 */
pe_status pe_net_socket(const pe_tunnel_config *cfg, const net_proto *p, uint16_t port, uint8_t ip_protocol,
                        const char *bind_dev, unsigned worker, int *fd, int *gro, char *why, size_t n);
/* The device that holds the address `local` (family 4 or 6), into name (IFNAMSIZ octets). */
pe_status pe_net_outer_device(int family, const uint8_t *local, char *name, char *why, size_t n);
/* A socket address (not connected: a reuseport group passes connected sockets by). */
#include <sys/socket.h>
socklen_t pe_net_sockaddr(int family, const uint8_t *addr, uint16_t port, struct sockaddr_storage *ss);
/* Rebuild the outer header of a received datagram at data - hdr: returns the packet's start and *len. */
uint8_t *pe_net_outer_header(uint8_t *data, size_t *len, int family, int udp, uint8_t ip_protocol,
                             const uint8_t *src, uint16_t sport, const uint8_t *dst, uint16_t dport);

/* ---- TUN offloads (net_gso.c) ---- */

/* virtio-net's header in front of each packet of a TUN device with IFF_VNET_HDR (host byte order). */
typedef struct net_vnet_hdr {
    uint8_t flags;
    uint8_t gso_type;
    uint16_t hdr_len, gso_size, csum_start, csum_offset;
} net_vnet_hdr;
#define NET_VNET_HDR_LEN 10u
#define NET_VNET_F_NEEDS_CSUM 1u
#define NET_VNET_GSO_NONE 0u
#define NET_VNET_GSO_TCPV4 1u
#define NET_VNET_GSO_TCPV6 4u
#define NET_VNET_GSO_ECN 0x80u

/* Complete a checksum the kernel left (NEEDS_CSUM): over [start, len) into start + offset.  -1: out of range. */
int pe_net_csum_complete(uint8_t *pkt, size_t len, size_t start, size_t offset);

/* Cutting a TCP super-packet into the segments the kernel would have sent. */
typedef struct net_tso {
    const uint8_t *pkt;
    size_t len, l4, hlen, mss, off;
    unsigned i;
    int v6;
} net_tso;
/* 0, or -1 when the packet is not a TCP super-packet this can cut (then it is dropped). */
int pe_net_tso_begin(net_tso *t, const net_vnet_hdr *h, const uint8_t *pkt, size_t len);
/* The next segment into seg (room: hlen + mss); its length, 0 after the last. */
size_t pe_net_tso_next(net_tso *t, uint8_t *seg);

/* ---- counters (net_stats.c) ---- */

typedef struct net_counts {
    _Atomic uint64_t packets, octets;
    _Atomic uint64_t drops[PE_STATUS_COUNT];
} net_counts;

typedef struct net_sa_counts {
    uint32_t spi;
    int out; /* a sending SA */
    net_counts c;
} net_sa_counts;

typedef struct net_stats {
    unsigned workers;
    net_counts *sent, *received;   /* per worker */
    size_t n_sas;
    net_sa_counts *sas;            /* per worker: n_sas each, worker w's at sas + w * n_sas */
    net_counts *unknown;           /* per worker: received packets of an SPI no SA of the file has */
} net_stats;

pe_status pe_net_stats_init(net_stats *s, unsigned workers, const uint32_t *out_spis, size_t n_out,
                            const uint32_t *in_spis, size_t n_in);
void pe_net_stats_free(net_stats *s);
/* Worker w's counters for (spi, out), or its unknown-SPI counters for an SPI the file lacks. */
net_counts *pe_net_stats_sa(net_stats *s, unsigned w, uint32_t spi, int out);
static inline void pe_net_count(net_counts *c, size_t octets)
{
    atomic_fetch_add_explicit(&c->packets, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&c->octets, octets, memory_order_relaxed);
}
static inline void pe_net_drop(net_counts *c, pe_status why)
{
    atomic_fetch_add_explicit(&c->drops[(unsigned)why < PE_STATUS_COUNT ? why : PE_ERR_INVALID_ARGUMENT], 1,
                              memory_order_relaxed);
}
/* The counters as JSON, to path by a temporary file renamed into place. */
pe_status pe_net_stats_write(const net_stats *s, const char *path, const pe_tunnel_config *cfg, double seconds,
                             const char *proto);

/* A line on the log descriptor. */
void pe_net_log(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
