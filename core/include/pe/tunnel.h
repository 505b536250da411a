/*
 * A live endpoint (docs/tunnel.md): IP packets from a TUN device sealed with
 * PSP, EESP or ESP and sent to one peer over UDP or straight in IP; what
 * arrives from the peer opened and written to the TUN device.
 *
 * Each worker owns one queue of a multi-queue TUN device, one socket and its
 * own sending SA (or a share of one), and runs until the endpoint stops:
 *
 *   send:    TUN queue --read--> inner IP packet (a TCP super-packet cut
 *            into its segments, a checksum the kernel left completed)
 *            --encap (sending SA)--> outer packet, its IP (and UDP) header
 *            left to the kernel --batch--> sendmmsg, runs of one size as one
 *            UDP_SEGMENT message --> peer
 *   receive: socket --recvmmsg--> datagrams (UDP_GRO trains split) --outer
 *            IP (and UDP) header rebuilt from each one's addresses--> decap
 *            (every SA of the key file) --write--> TUN queue
 *
 * The kernel hands a received packet to the worker its SPI (and, for EESP,
 * its Sub SA) names: a replay window is only ever touched by one worker,
 * whichever source port or queue a replayed copy comes in by.  Drops are
 * counted under their status names, per worker and per SA; the counters go
 * out as JSON (written to a temporary file and renamed into place).
 *
 * Linux only: TUN devices, signalfd, recvmmsg/sendmmsg.  Elsewhere
 * pe_tunnel_run returns PE_ERR_UNSUPPORTED.
 */
#ifndef PE_TUNNEL_H
#define PE_TUNNEL_H

#include <stddef.h>
#include <stdint.h>

#include "pe/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pe_tunnel_protocol { PE_TUNNEL_PSP = 0, PE_TUNNEL_EESP = 1, PE_TUNNEL_ESP = 2 } pe_tunnel_protocol;
/* UDP (PSP 1000, EESP and ESP 4500 with RFC 3948's rules), or straight in IP (ESP 50, EESP's ip-protocol). */
typedef enum pe_tunnel_outer { PE_TUNNEL_OUTER_UDP = 0, PE_TUNNEL_OUTER_IP = 1 } pe_tunnel_outer;

#define PE_TUNNEL_MAX_WORKERS 64u
#define PE_TUNNEL_MAX_SPIS PE_TUNNEL_MAX_WORKERS

typedef struct pe_tunnel_config {
    pe_tunnel_protocol protocol;
    const char *key_file;
    /*
     * The SAs that send: worker i sends on spis[i % n_spis].  Workers that
     * share an SA share its counter (in turn); EESP workers that share one
     * send on Sub SAs of their own (the k-th worker on an SPI on Sub SA k), the
     * draft's use of Session IDs for CPUs.
     */
    uint32_t spis[PE_TUNNEL_MAX_SPIS];
    size_t n_spis;
    const char *dev;        /* the TUN device: made, or taken over when it exists; brought up, its queue at
                               10,000 packets at least */
    unsigned mtu;           /* the device's MTU; 0: 1500 less the protocol's largest growth */
    int family;             /* 4 or 6: the outer addresses' */
    uint8_t local[16];      /* outer addresses, network order (IPv4 in the first 4 octets) */
    uint8_t peer[16];
    pe_tunnel_outer outer;
    uint16_t port;          /* UDP port on both sides; 0: the protocol's */
    int transport_mode;     /* 0: tunnel mode (the SA lines' mode must agree) */
    unsigned workers;       /* 1..PE_TUNNEL_MAX_WORKERS; one TUN queue and one socket each */
    const char *stats_path; /* NULL: no counters written */
    unsigned stats_interval_ms; /* also every this often; 0: only when the endpoint stops */
    int log_fd;             /* where messages go, a line each (2: standard error); -1: nowhere */
    unsigned max_ms;        /* stop after this long; 0: only on a signal */
    /* 1: SIGINT and SIGTERM stop the endpoint, SIGHUP reloads the key file.  The three are blocked in
     * the calling thread while it runs (and in its workers) and read through a signalfd. */
    int handle_signals;
    /* 1: no UDP segmentation (UDP_SEGMENT) or receive coalescing (UDP_GRO) on the sockets: a datagram per
     * system call each way, for comparing, or for a path that mangles them.  0: used where the kernel has them. */
    int no_udp_offloads;
    /* 1: no virtio-net header on the TUN device, so no TCP super-packets (TSO) to cut: a read per packet.
     * 0: used where the kernel has them. */
    int no_tun_offloads;
} pe_tunnel_config;

void pe_tunnel_config_init(pe_tunnel_config *cfg);

typedef struct pe_tunnel_result {
    int stop_signal;        /* SIGINT or SIGTERM when one stopped the endpoint; 0 otherwise */
    unsigned reloads;       /* SIGHUPs that replaced the keys */
    uint64_t packets_sent, packets_received, packets_dropped;
    char message[320];      /* why it refused to start or stopped on a failure (no key material); "" otherwise */
} pe_tunnel_result;

/*
 * Run the endpoint until a signal (handle_signals), max_ms, or a failure of
 * the device or a socket.  PE_OK when it stopped as asked; a configuration
 * problem (the key file, an SPI it lacks, a mode that disagrees) before any
 * packet moves, with res->message naming it (for the caller to report: it is
 * not written to log_fd).
 */
pe_status pe_tunnel_run(const pe_tunnel_config *cfg, pe_tunnel_result *res);

#ifdef __cplusplus
}
#endif
#endif
