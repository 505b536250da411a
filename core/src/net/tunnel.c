/*
 * The live endpoint's data plane (pe/tunnel.h has the pipeline).  The
 * calling thread sets everything up, starts one thread per worker and then
 * only waits: for a signal (a signalfd), for the counters' interval and for
 * max_ms.  Stopping is one eventfd that every worker polls beside its TUN
 * queue and socket; a reload (SIGHUP) another, on which the workers pause
 * between two batches while the new keys are swapped in.
 *
 * Sending SAs: one sender per SPI.  Workers sharing an ESP or PSP SA spend
 * its counter in turn under the sender's lock and seal on a clone of their
 * own; workers sharing an EESP SA each have a sender of their own on a Sub
 * SA of their own (their counters never meet).  An SA whose counter runs
 * out stops sending, with one message; the others go on.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "pe/tunnel.h"

void pe_tunnel_config_init(pe_tunnel_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->workers = 1;
    cfg->log_fd = 2;
    cfg->family = 4;
}

#if defined(__linux__)
#include <errno.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "net_internal.h"
#include "pe/bytes.h"
#include "pe/ip.h"
#include "pe/wipe.h"

typedef struct net_sender {
    uint32_t spi;
    void *tx;
    unsigned users;
    pthread_mutex_t lock; /* users > 1 (ESP, PSP): the counter is spent under it */
    atomic_int exhausted;
} net_sender;

struct endpoint;

typedef struct worker {
    struct endpoint *ep;
    unsigned index;
    int tun, sock;
    net_sender *sender;
    void *tx;       /* the sender's own, a clone (shared), or a sender of its own (EESP) */
    int own_tx;     /* tx is this worker's to free */
    uint16_t sub;   /* EESP Sub SA */
    void *rx;
    size_t slot;    /* octets per packet buffer */
    size_t rslot;   /* per received message: a whole UDP GRO train (64 KiB) when the socket takes them */
    size_t buf_len, in_len;
    int gro;        /* its UDP socket hands trains of datagrams (UDP_GRO) */
    int vnet;       /* its TUN queue has virtio-net headers, and hands TCP super-packets (TSO) */
    uint8_t *seg;   /* a segment being cut from a super-packet */
    uint8_t *in, *out, *rbuf, *dec; /* NET_BATCH slots each (dec: one) */
    pthread_t thread;
    int started;
} worker;

typedef struct endpoint {
    const pe_tunnel_config *cfg;
    const net_proto *p;
    net_setup su;
    uint8_t ip_protocol;
    struct sockaddr_storage peer;
    socklen_t peer_len;
    char outer_dev[16];     /* transport mode: the device the sockets are bound to, the one holding local */
    net_sender senders[PE_TUNNEL_MAX_SPIS];
    size_t n_senders;
    worker w[PE_TUNNEL_MAX_WORKERS];
    net_stats stats;
    int stop_fd;
    atomic_int failed;
    pe_keyfile kf;          /* the keys in use: a reload compares its lines with the new file's */
    atomic_int gso;         /* UDP: datagrams of one size go to the kernel as one (UDP_SEGMENT) */
    int ctl_fd;             /* a reload asks the workers to pause through it */
    atomic_int pause_req;
    unsigned paused;
    pthread_mutex_t pause_lock;
    pthread_cond_t pause_cond;
} endpoint;

/* What the key file gives the workers: made whole before any of it is used, so a reload that fails changes
 * nothing. */
typedef struct net_keys {
    void *sender_tx[PE_TUNNEL_MAX_SPIS];
    void *tx[PE_TUNNEL_MAX_WORKERS];
    int own_tx[PE_TUNNEL_MAX_WORKERS];
    void *rx[PE_TUNNEL_MAX_WORKERS];
} net_keys;

static const net_proto *proto_of(pe_tunnel_protocol p)
{
    switch (p) {
    case PE_TUNNEL_PSP: return &pe_net_psp;
    case PE_TUNNEL_EESP: return &pe_net_eesp;
    case PE_TUNNEL_ESP: return &pe_net_esp;
    }
    return NULL;
}

static int is_sending_spi(const endpoint *ep, uint32_t spi)
{
    for (size_t i = 0; i < ep->n_senders; i++)
        if (ep->senders[i].spi == spi)
            return 1;
    return 0;
}

static double seconds_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* ---------------------------------------------------------------- sending */

static pe_status seal(worker *w, const uint8_t *in, size_t len, uint8_t *out, size_t *out_len)
{
    const net_proto *p = w->ep->p;
    net_sender *s = w->sender;
    if (s->users < 2 || p->own_sub_sas)
        return p->encap(w->tx, w->sub, in, len, out, w->slot, out_len);
    uint64_t n;
    pthread_mutex_lock(&s->lock);
    pe_status st = p->reserve(s->tx, w->sub, in, len, w->slot, &n);
    pthread_mutex_unlock(&s->lock);
    return st != PE_OK ? st : p->encap_with(w->tx, w->sub, n, in, len, out, w->slot, out_len);
}

#define GSO_MAX_SEGMENTS 64u /* the kernel's UDP_MAX_SEGMENTS */

/*
 * The sealed packets out.  Over UDP with GSO, runs of datagrams of one size
 * (the last of a run may be shorter) go as one message with UDP_SEGMENT:
 * one trip through the kernel's stack for the run instead of one each.
 * Packet i carries inner[i] octets of the device's: counted as sent once
 * the kernel took it, as dropped (tunnel-socket) when it refused it.
 */
static void send_out(worker *w, struct mmsghdr *msgs, struct iovec *iov, const size_t *inner, unsigned n,
                     net_counts *mine, net_counts *sa)
{
    endpoint *ep = w->ep;
    union {
        char buf[CMSG_SPACE(sizeof(uint16_t))];
        struct cmsghdr align;
    } ctl[NET_BATCH];
    struct mmsghdr grouped[NET_BATCH];
    unsigned m = n, *counts = NULL, count[NET_BATCH];
    if (ep->su.udp && atomic_load_explicit(&ep->gso, memory_order_relaxed) && n > 1) {
        m = 0;
        for (unsigned i = 0; i < n;) {
            size_t seg = iov[i].iov_len, total = seg;
            unsigned j = i + 1;
            while (j < n && j - i < GSO_MAX_SEGMENTS && iov[j].iov_len <= seg && total + iov[j].iov_len <= 65000) {
                total += iov[j].iov_len;
                if (iov[j++].iov_len < seg)
                    break; /* a shorter one ends the run */
            }
            grouped[m] = msgs[i];
            grouped[m].msg_hdr.msg_iov = &iov[i];
            grouped[m].msg_hdr.msg_iovlen = j - i;
            if (j - i > 1) {
                struct msghdr *h = &grouped[m].msg_hdr;
                h->msg_control = ctl[m].buf;
                h->msg_controllen = sizeof ctl[m].buf;
                struct cmsghdr *c = CMSG_FIRSTHDR(h);
                c->cmsg_level = SOL_UDP;
                c->cmsg_type = UDP_SEGMENT;
                c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
                uint16_t gso = (uint16_t)seg;
                memcpy(CMSG_DATA(c), &gso, sizeof gso);
            }
            count[m++] = j - i;
            i = j;
        }
        msgs = grouped;
        counts = count;
    }
    unsigned sent = 0; /* packets of the messages done */
    for (unsigned done = 0; done < m;) {
        int k = sendmmsg(w->sock, msgs + done, m - done, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 && counts && (errno == EIO || errno == EINVAL || errno == EOPNOTSUPP)) {
            /* the route's device cannot segment: every packet goes one by one from now on */
            atomic_store(&ep->gso, 0);
            pe_net_log(ep->cfg->log_fd, "tunnel: UDP segmentation offload refused (%s): sending datagrams one by one",
                       strerror(errno));
            struct mmsghdr one[NET_BATCH];
            for (unsigned i = sent; i < n; i++)
                one[i - sent] = (struct mmsghdr){.msg_hdr = {.msg_name = &ep->peer, .msg_namelen = ep->peer_len,
                                                             .msg_iov = &iov[i], .msg_iovlen = 1}};
            send_out(w, one, iov + sent, inner + sent, n - sent, mine, sa);
            return;
        }
        if (k < 0) {
            /* the peer unreachable for now (ICMP), no route, a full queue: these packets are lost, not the endpoint */
            for (; sent < n; sent++) {
                pe_net_drop(mine, PE_ERR_TUNNEL_SOCKET);
                pe_net_drop(sa, PE_ERR_TUNNEL_SOCKET);
            }
            break;
        }
        for (unsigned g = done; g < done + (unsigned)k; g++)
            for (unsigned c = 0; c < (counts ? counts[g] : 1); c++, sent++) {
                pe_net_count(mine, inner[sent]);
                pe_net_count(sa, inner[sent]);
            }
        done += (unsigned)k;
    }
}

/* Up to NET_BATCH packets from the TUN queue, sealed, out in one sendmmsg.  0, or -1 when the device failed. */
/* What a batch is building: the sealed packets so far, and where they go. */
typedef struct send_ctx {
    struct mmsghdr msgs[NET_BATCH];
    struct iovec iov[NET_BATCH];
    size_t inner[NET_BATCH]; /* the octets each came from the device with */
    unsigned n;
    size_t strip; /* the outer IP (and UDP) header the kernel writes itself */
    net_counts *mine, *sa;
} send_ctx;

/*
 * Transport mode: the packet's IP header is sealed as the outer one, which the
 * kernel writes from the socket's addresses.  So it must go from the local
 * address to the peer's, whole (a fragment's offset and flags would be lost),
 * and with nothing the kernel would not write (IPv4 options, IPv6 extension
 * headers).
 */
static int transport_fits(const pe_tunnel_config *cfg, const uint8_t *in, size_t len)
{
    pe_ip_info ip;
    size_t alen = cfg->family == 4 ? 4 : 16, at = cfg->family == 4 ? 12 : 8;
    return pe_ip_parse(in, len, &ip) == PE_OK && ip.version == (unsigned)cfg->family && !ip.is_fragment &&
           ip.l4_offset == (cfg->family == 4 ? PE_IPV4_HDR_LEN : PE_IPV6_HDR_LEN) &&
           memcmp(in + at, cfg->local, alen) == 0 && memcmp(in + at + alen, cfg->peer, alen) == 0;
}

/* One inner packet sealed into the batch (sent when the batch is full). */
static void emit(worker *w, send_ctx *b, const uint8_t *in, size_t len)
{
    endpoint *ep = w->ep;
    uint8_t *out = w->out + (size_t)b->n * w->slot;
    size_t out_len;
    pe_status st = atomic_load(&w->sender->exhausted)                      ? PE_ERR_SEQ_EXHAUSTED
                   : ep->cfg->transport_mode && !transport_fits(ep->cfg, in, len) ? PE_ERR_TUNNEL_TRANSPORT_HEADER
                                                                                  : seal(w, in, len, out, &out_len);
    if (st != PE_OK) {
        pe_net_drop(b->mine, st);
        pe_net_drop(b->sa, st);
        if ((st == PE_ERR_SEQ_EXHAUSTED || st == PE_ERR_IV_EXHAUSTED) && !atomic_exchange(&w->sender->exhausted, 1))
            pe_net_log(ep->cfg->log_fd, "tunnel: SA %08x has used its last %s: it sends no more (rekey it)",
                       (unsigned)w->sender->spi, st == PE_ERR_IV_EXHAUSTED ? "IV" : "sequence number");
        return;
    }
    b->inner[b->n] = len;
    b->iov[b->n] = (struct iovec){out + b->strip, out_len - b->strip};
    b->msgs[b->n].msg_hdr = (struct msghdr){.msg_name = &ep->peer, .msg_namelen = ep->peer_len,
                                            .msg_iov = &b->iov[b->n], .msg_iovlen = 1};
    if (++b->n == NET_BATCH) {
        send_out(w, b->msgs, b->iov, b->inner, b->n, b->mine, b->sa);
        b->n = 0;
    }
}

/*
 * One read from the TUN queue into the batch.  With the virtio-net header,
 * a TCP super-packet is cut into its segments and a packet whose checksum
 * the kernel left is completed; a header that says something else drops the
 * packet (counted as malformed IP).
 */
static void take(worker *w, send_ctx *b, uint8_t *pkt, size_t len)
{
    if (!w->vnet) {
        emit(w, b, pkt, len);
        return;
    }
    net_vnet_hdr h;
    if (len < NET_VNET_HDR_LEN) {
        pe_net_drop(b->mine, PE_ERR_IP_TRUNCATED);
        return;
    }
    h.flags = pkt[0];
    h.gso_type = pkt[1];
    memcpy(&h.hdr_len, pkt + 2, 2); /* the device's byte order, the host's */
    memcpy(&h.gso_size, pkt + 4, 2);
    memcpy(&h.csum_start, pkt + 6, 2);
    memcpy(&h.csum_offset, pkt + 8, 2);
    pkt += NET_VNET_HDR_LEN;
    len -= NET_VNET_HDR_LEN;
    if (h.gso_type == NET_VNET_GSO_NONE) {
        if ((h.flags & NET_VNET_F_NEEDS_CSUM) && pe_net_csum_complete(pkt, len, h.csum_start, h.csum_offset) != 0) {
            pe_net_drop(b->mine, PE_ERR_IP_LENGTH);
            return;
        }
        emit(w, b, pkt, len);
        return;
    }
    net_tso t;
    if (pe_net_tso_begin(&t, &h, pkt, len) != 0) {
        pe_net_drop(b->mine, PE_ERR_IP_LENGTH);
        return;
    }
    size_t n;
    while ((n = pe_net_tso_next(&t, w->seg)) > 0)
        emit(w, b, w->seg, n);
}

/* Up to NET_BATCH reads from the TUN queue, sealed, out in sendmmsg batches.  0, or -1 when the device failed. */
static int send_batch(worker *w)
{
    endpoint *ep = w->ep;
    send_ctx b;
    b.n = 0;
    b.mine = &ep->stats.sent[w->index];
    b.sa = pe_net_stats_sa(&ep->stats, w->index, w->sender->spi, 1);
    b.strip = (ep->cfg->family == 4 ? PE_IPV4_HDR_LEN : PE_IPV6_HDR_LEN) + (ep->su.udp ? PE_UDP_HDR_LEN : 0);
    for (unsigned k = 0; k < NET_BATCH; k++) {
        ssize_t r = read(w->tun, w->in, w->in_len);
        if (r < 0) {
            if (errno == EAGAIN || errno == EINTR)
                break;
            pe_net_log(ep->cfg->log_fd, "tunnel: reading %s: %s", ep->cfg->dev, strerror(errno));
            return -1;
        }
        take(w, &b, w->in, (size_t)r);
    }
    if (b.n)
        send_out(w, b.msgs, b.iov, b.inner, b.n, b.mine, b.sa);
    return 0;
}

/* ---------------------------------------------------------------- receiving */

/* The SPI a received payload names, for the counters (0 when it is too short to hold one). */
static uint32_t spi_of(const net_proto *p, const uint8_t *payload, size_t len)
{
    return len >= p->spi_offset + 4 ? pe_get32(payload + p->spi_offset) : 0;
}

/* One datagram (or raw IP packet) from the peer: opened and written to the TUN queue, or counted as dropped. */
static void open_one(worker *w, uint8_t *data, size_t len, const struct sockaddr_storage *from)
{
    endpoint *ep = w->ep;
    const pe_tunnel_config *cfg = ep->cfg;
    net_counts *mine = &ep->stats.received[w->index];
    uint8_t *pkt = data;
    const uint8_t *payload = data;
    size_t plen = len;
    if (!ep->su.udp && cfg->family == 4) { /* an IPv4 raw socket hands the IP header too */
        size_t ihl = len ? (size_t)(data[0] & 0x0f) * 4 : 0;
        payload = data + (ihl <= len ? ihl : len);
        plen = ihl <= len ? len - ihl : 0;
    } else {
        const uint8_t *src;
        uint16_t sport = 0;
        if (cfg->family == 4) {
            const struct sockaddr_in *a = (const struct sockaddr_in *)from;
            src = (const uint8_t *)&a->sin_addr;
            sport = ntohs(a->sin_port);
        } else {
            const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)from;
            src = (const uint8_t *)&a->sin6_addr;
            sport = ntohs(a->sin6_port);
        }
        pkt = pe_net_outer_header(data, &len, cfg->family, ep->su.udp, ep->ip_protocol, src, ep->su.udp ? sport : 0,
                                  cfg->local, ep->su.port);
    }
    uint32_t spi = spi_of(ep->p, payload, plen);
    net_counts *sa = pe_net_stats_sa(&ep->stats, w->index, spi, 0);
    size_t out_len;
    /* our own SPIs never receive: a packet of ours reflected back is not the peer's */
    size_t lead = w->vnet ? NET_VNET_HDR_LEN : 0; /* a zero header: one whole packet, its checksums done */
    pe_status st = is_sending_spi(ep, spi) ? PE_ERR_NO_KEY
                                           : ep->p->decap(w->rx, pkt, len, w->dec + lead, w->slot, &out_len);
    if (st == PE_OK && write(w->tun, w->dec, lead + out_len) < 0)
        st = PE_ERR_TUNNEL_DEVICE; /* the device refused it (down, full): this packet is lost */
    if (st != PE_OK) {
        pe_net_drop(mine, st);
        pe_net_drop(sa, st);
        return;
    }
    pe_net_count(mine, out_len);
    pe_net_count(sa, out_len);
}

/*
 * Up to NET_BATCH messages in one recvmmsg.  With UDP GRO a message is a
 * train of datagrams of one size (the last may be shorter), its size in a
 * control message; each datagram's outer header is rebuilt in front of it,
 * over the tail of the one before, which was opened already.
 */
static int recv_batch(worker *w)
{
    endpoint *ep = w->ep;
    struct mmsghdr msgs[NET_BATCH];
    struct iovec iov[NET_BATCH];
    struct sockaddr_storage from[NET_BATCH];
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl[NET_BATCH];
    for (unsigned k = 0; k < NET_BATCH; k++) {
        iov[k] = (struct iovec){w->rbuf + (size_t)k * w->rslot + NET_HEADROOM, w->rslot - NET_HEADROOM};
        msgs[k].msg_hdr = (struct msghdr){.msg_name = &from[k], .msg_namelen = sizeof from[k], .msg_iov = &iov[k],
                                          .msg_iovlen = 1, .msg_control = w->gro ? ctl[k].buf : NULL,
                                          .msg_controllen = w->gro ? sizeof ctl[k].buf : 0};
    }
    int m = recvmmsg(w->sock, msgs, NET_BATCH, MSG_DONTWAIT, NULL);
    if (m < 0)
        return errno == EAGAIN || errno == EINTR ? 0 : -1;
    for (int k = 0; k < m; k++) {
        uint8_t *data = iov[k].iov_base;
        size_t len = msgs[k].msg_len, seg = len;
        if (msgs[k].msg_hdr.msg_flags & MSG_TRUNC) {
            pe_net_drop(&ep->stats.received[w->index], PE_ERR_BUFFER_TOO_SMALL);
            pe_net_drop(&ep->stats.unknown[w->index], PE_ERR_BUFFER_TOO_SMALL);
            continue;
        }
        for (struct cmsghdr *c = w->gro ? CMSG_FIRSTHDR(&msgs[k].msg_hdr) : NULL; c;
             c = CMSG_NXTHDR(&msgs[k].msg_hdr, c))
            if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
                int g;
                memcpy(&g, CMSG_DATA(c), sizeof g);
                seg = g > 0 ? (size_t)g : len;
            }
        for (size_t off = 0; off < len; off += seg)
            open_one(w, data + off, len - off < seg ? len - off : seg, &from[k]);
    }
    return 0;
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    endpoint *ep = w->ep;
    struct pollfd fds[4] = {{w->tun, POLLIN, 0}, {w->sock, POLLIN, 0}, {ep->stop_fd, POLLIN, 0},
                            {ep->ctl_fd, POLLIN, 0}};
    while (!atomic_load(&ep->failed)) {
        if (poll(fds, 4, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (fds[2].revents)
            break;
        if (fds[3].revents && atomic_load(&ep->pause_req)) { /* a reload: wait, holding nothing, until it is done */
            pthread_mutex_lock(&ep->pause_lock);
            ep->paused++;
            pthread_cond_broadcast(&ep->pause_cond);
            while (atomic_load(&ep->pause_req))
                pthread_cond_wait(&ep->pause_cond, &ep->pause_lock);
            ep->paused--;
            pthread_mutex_unlock(&ep->pause_lock);
            continue;
        }
        if (((fds[0].revents & POLLIN) && send_batch(w) < 0) || (fds[0].revents & (POLLERR | POLLHUP))) {
            atomic_store(&ep->failed, PE_ERR_TUNNEL_DEVICE);
            break;
        }
        if ((fds[1].revents & (POLLIN | POLLERR)) && recv_batch(w) < 0) {
            pe_net_log(ep->cfg->log_fd, "tunnel: worker %u: receiving: %s", w->index, strerror(errno));
            atomic_store(&ep->failed, PE_ERR_TUNNEL_SOCKET);
            break;
        }
    }
    uint64_t one = 1;
    ssize_t r = write(ep->stop_fd, &one, sizeof one); /* a failing worker stops the others */
    (void)r;
    pthread_mutex_lock(&ep->pause_lock); /* and a reload waiting for it to pause */
    pthread_cond_broadcast(&ep->pause_cond);
    pthread_mutex_unlock(&ep->pause_lock);
    return NULL;
}

/* ---------------------------------------------------------------- set-up */

static pe_status bad(char *why, size_t n, pe_status st, const char *msg)
{
    snprintf(why, n, "%s", msg);
    return st;
}

static pe_status check_config(const pe_tunnel_config *cfg, const net_proto *p, char *why, size_t n)
{
    if (!p)
        return bad(why, n, PE_ERR_TUNNEL_CONFIG, "unknown protocol");
    if (!cfg->key_file || !cfg->dev || !*cfg->dev)
        return bad(why, n, PE_ERR_TUNNEL_CONFIG, "a key file and a device name are needed");
    if (cfg->workers < 1 || cfg->workers > PE_TUNNEL_MAX_WORKERS)
        return bad(why, n, PE_ERR_TUNNEL_CONFIG, "workers must be 1..64");
    if (cfg->n_spis < 1 || cfg->n_spis > PE_TUNNEL_MAX_SPIS)
        return bad(why, n, PE_ERR_TUNNEL_CONFIG, "give 1..64 sending SPIs");
    if (cfg->family != 4 && cfg->family != 6)
        return bad(why, n, PE_ERR_TUNNEL_CONFIG, "the outer family must be 4 or 6");
    if (cfg->outer != PE_TUNNEL_OUTER_UDP && cfg->outer != PE_TUNNEL_OUTER_IP)
        return bad(why, n, PE_ERR_TUNNEL_CONFIG, "unknown outer encapsulation");
    if (cfg->outer == PE_TUNNEL_OUTER_IP && cfg->protocol == PE_TUNNEL_PSP)
        return bad(why, n, PE_ERR_TUNNEL_CONFIG, "PSP is carried in UDP only (psp.md section 8): no outer ip");
    if (cfg->mtu && (cfg->mtu < 576 || cfg->mtu > 65000))
        return bad(why, n, PE_ERR_TUNNEL_CONFIG, "the MTU must be 576..65000");
    return PE_OK;
}

static void outer_template(net_setup *su, const pe_tunnel_config *cfg)
{
    uint8_t *h = su->outer_header;
    memset(h, 0, sizeof su->outer_header);
    if (cfg->family == 4) {
        h[0] = 0x45;
        pe_put16(h + 6, 0x4000); /* DF: the endpoint sets its MTU so that nothing needs fragments */
        h[8] = 64;
        memcpy(h + 12, cfg->local, 4);
        memcpy(h + 16, cfg->peer, 4);
        su->outer_header_len = PE_IPV4_HDR_LEN;
    } else {
        h[0] = 0x60;
        h[7] = 64;
        memcpy(h + 8, cfg->local, 16);
        memcpy(h + 24, cfg->peer, 16);
        su->outer_header_len = PE_IPV6_HDR_LEN;
    }
}

/* What sealing adds to a packet on this SA, found by sealing one on a sender made for it and dropped. */
static pe_status growth_of(endpoint *ep, const pe_keyfile *kf, size_t *growth, char *why, size_t n)
{
    void *tx;
    pe_status st = ep->p->tx_new(kf, &ep->su, ep->senders[0].spi, &tx, why, n);
    if (st != PE_OK)
        return st;
    uint8_t in[1000], out[1000 + 1024];
    memset(in, 0, sizeof in);
    in[0] = 0x45;
    pe_put16(in + 2, sizeof in);
    in[8] = 64;
    in[9] = 17;
    size_t out_len = 0;
    st = ep->p->encap(tx, 0, in, sizeof in, out, sizeof out, &out_len);
    pe_wipe(out, sizeof out);
    ep->p->tx_free(tx);
    *growth = out_len > sizeof in ? out_len - sizeof in : 0;
    return st;
}

static void keys_free(const endpoint *ep, net_keys *k)
{
    for (unsigned i = 0; i < PE_TUNNEL_MAX_WORKERS; i++) {
        if (k->own_tx[i] && k->tx[i])
            ep->p->tx_free(k->tx[i]);
        if (k->rx[i])
            ep->p->rx_free(k->rx[i]);
    }
    for (size_t i = 0; i < PE_TUNNEL_MAX_SPIS; i++)
        if (k->sender_tx[i])
            ep->p->tx_free(k->sender_tx[i]);
    memset(k, 0, sizeof *k);
}

static size_t sender_index(const endpoint *ep, const worker *w) { return (size_t)(w->sender - ep->senders); }

/*
 * A sender per sending SPI; per worker its sending state (the sender itself;
 * a clone, when ESP or PSP workers share it; for EESP workers past the
 * first on an SPI, a sender of its own on its own Sub SA) and a receiver.
 */
static pe_status keys_make(const endpoint *ep, const pe_keyfile *kf, net_keys *k, char *why, size_t n)
{
    memset(k, 0, sizeof *k);
    pe_status st = PE_OK;
    for (size_t i = 0; st == PE_OK && i < ep->n_senders; i++)
        st = ep->p->tx_new(kf, &ep->su, ep->senders[i].spi, &k->sender_tx[i], why, n);
    for (unsigned i = 0; st == PE_OK && i < ep->cfg->workers; i++) {
        const worker *w = &ep->w[i];
        void *stx = k->sender_tx[sender_index(ep, w)];
        if (w->sub) {
            st = ep->p->tx_new(kf, &ep->su, w->sender->spi, &k->tx[i], why, n);
            k->own_tx[i] = 1;
        } else if (w->sender->users > 1 && !ep->p->own_sub_sas) {
            st = ep->p->tx_clone(stx, &k->tx[i]);
            k->own_tx[i] = 1;
        } else {
            k->tx[i] = stx;
        }
        if (st == PE_OK)
            st = ep->p->rx_new(kf, &ep->su, &k->rx[i], why, n);
    }
    if (st != PE_OK)
        keys_free(ep, k);
    return st;
}

/* k's state into the endpoint, the endpoint's into k (to be freed). */
static void keys_swap(endpoint *ep, net_keys *k)
{
    for (size_t i = 0; i < ep->n_senders; i++) {
        void *t = ep->senders[i].tx;
        ep->senders[i].tx = k->sender_tx[i];
        k->sender_tx[i] = t;
    }
    for (unsigned i = 0; i < PE_TUNNEL_MAX_WORKERS; i++) { /* all: teardown also runs for a refused count */
        worker *w = &ep->w[i];
        void *t = w->tx, *r = w->rx;
        int own = w->own_tx;
        w->tx = k->tx[i];
        w->own_tx = k->own_tx[i];
        w->rx = k->rx[i];
        k->tx[i] = t;
        k->own_tx[i] = own;
        k->rx[i] = r;
    }
}

static void teardown(endpoint *ep)
{
    for (unsigned i = 0; i < PE_TUNNEL_MAX_WORKERS; i++) { /* those never set up hold -1 and NULL */
        worker *w = &ep->w[i];
        if (w->tun >= 0)
            close(w->tun);
        if (w->sock >= 0)
            close(w->sock);
        if (w->in) {
            pe_wipe(w->in, w->buf_len);
            free(w->in);
        }
    }
    net_keys none;
    memset(&none, 0, sizeof none);
    keys_swap(ep, &none);
    keys_free(ep, &none);
    for (size_t i = 0; i < ep->n_senders; i++)
        pthread_mutex_destroy(&ep->senders[i].lock);
    pe_net_stats_free(&ep->stats);
    pe_keyfile_free(&ep->kf);
    if (ep->stop_fd >= 0)
        close(ep->stop_fd);
    if (ep->ctl_fd >= 0)
        close(ep->ctl_fd);
    pthread_mutex_destroy(&ep->pause_lock);
    pthread_cond_destroy(&ep->pause_cond);
}

/* Each worker's TUN queue, socket and buffers. */
static pe_status setup_workers(endpoint *ep, unsigned mtu, char *why, size_t n)
{
    const pe_tunnel_config *cfg = ep->cfg;
    pe_status st = PE_OK;
    for (unsigned i = 0; i < cfg->workers && st == PE_OK; i++) {
        worker *w = &ep->w[i];
        w->vnet = !cfg->no_tun_offloads;
        st = pe_net_tun_open(cfg->dev, 1, w->vnet, &w->tun, why, n);
        if (st != PE_OK && cfg->workers == 1) /* a device made without multi_queue takes one queue */
            st = pe_net_tun_open(cfg->dev, 0, w->vnet, &w->tun, why, n);
        if (st == PE_OK && w->vnet && !pe_net_tun_offload(w->tun) && i == 0) /* headers still come, flags 0 */
            pe_net_log(cfg->log_fd, "tunnel: %s takes no offloads: a read per packet", cfg->dev);
        if (st == PE_OK)
            st = pe_net_socket(cfg, ep->p, ep->su.port, ep->ip_protocol, ep->outer_dev[0] ? ep->outer_dev : NULL, i,
                               &w->sock, &w->gro, why, n);
        if (st != PE_OK)
            return st;
        w->slot = (size_t)mtu + 1024 + NET_HEADROOM;
        w->rslot = w->gro ? 65536 + NET_HEADROOM : w->slot;
        w->in_len = w->vnet ? NET_VNET_HDR_LEN + 65536 : w->slot;
        size_t seg_len = w->vnet ? 65536 : 0;
        w->buf_len = w->in_len + seg_len + NET_BATCH * w->slot + NET_BATCH * w->rslot + w->slot + NET_VNET_HDR_LEN;
        if (!(w->in = calloc(1, w->buf_len)))
            return PE_ERR_NOMEM;
        w->seg = w->in + w->in_len;
        w->out = w->seg + seg_len;
        w->rbuf = w->out + NET_BATCH * w->slot;
        w->dec = w->rbuf + NET_BATCH * w->rslot;
    }
    return st;
}

static pe_status load_keys(const char *path, pe_keyfile *kf, char *why, size_t n)
{
    pe_keyfile_error kerr;
    pe_status st = pe_keyfile_load(path, kf, &kerr);
    if (st != PE_OK && kerr.line)
        snprintf(why, n, "key file %s, line %zu: %s", path, kerr.line, kerr.message);
    else if (st != PE_OK)
        snprintf(why, n, "key file %s: %s", path, kerr.message);
    return st;
}

static pe_status setup(endpoint *ep, char *why, size_t n)
{
    const pe_tunnel_config *cfg = ep->cfg;
    pe_status st = load_keys(cfg->key_file, &ep->kf, why, n);
    if (st != PE_OK)
        return st;
    const pe_keyfile *kf = &ep->kf;
    ep->su.cfg = cfg;
    ep->su.udp = cfg->outer == PE_TUNNEL_OUTER_UDP;
    ep->su.port = cfg->port ? cfg->port : ep->p->udp_port;
    atomic_store(&ep->gso, ep->su.udp && !cfg->no_udp_offloads);
    outer_template(&ep->su, cfg);
    /* transport mode: the peer's address is routed into the TUN device, which its own packets must not be */
    if (cfg->transport_mode && (st = pe_net_outer_device(cfg->family, cfg->local, ep->outer_dev, why, n)) != PE_OK)
        return st;
    ep->peer_len = pe_net_sockaddr(cfg->family, cfg->peer, ep->su.udp ? ep->su.port : 0, &ep->peer);
    if (!ep->su.udp && (st = ep->p->ip_protocol(kf, cfg->spis[0], &ep->ip_protocol)) != PE_OK) {
        snprintf(why, n, "%s cannot go straight in IP", ep->p->name);
        return st;
    }
    for (size_t i = 0; i < cfg->n_spis; i++) {
        net_sender *s = NULL;
        for (size_t k = 0; k < ep->n_senders && !s; k++)
            if (ep->senders[k].spi == cfg->spis[i])
                s = &ep->senders[k];
        if (!s) {
            s = &ep->senders[ep->n_senders++];
            s->spi = cfg->spis[i];
            pthread_mutex_init(&s->lock, NULL);
        }
    }
    for (unsigned i = 0; i < cfg->workers; i++) {
        worker *w = &ep->w[i];
        for (size_t k = 0; k < ep->n_senders; k++)
            if (ep->senders[k].spi == cfg->spis[i % cfg->n_spis])
                w->sender = &ep->senders[k];
        /* EESP: the how-manyth worker on this SPI is its Sub SA, so that no two workers share one's counter */
        unsigned k = w->sender->users++;
        w->sub = ep->p->own_sub_sas ? (uint16_t)k : 0;
    }
    size_t growth = 0;
    net_keys k;
    if ((st = growth_of(ep, kf, &growth, why, n)) != PE_OK || (st = keys_make(ep, kf, &k, why, n)) != PE_OK)
        return st;
    keys_swap(ep, &k); /* k is empty: nothing to free */
    /* 1500 octets on the wire: what the veth or NIC of a test or a data centre takes; padding may add 15 */
    unsigned mtu = cfg->mtu ? cfg->mtu : (unsigned)(1500 - growth - 15);
    uint32_t out_spis[PE_TUNNEL_MAX_SPIS], in_spis[256];
    for (size_t i = 0; i < ep->n_senders; i++)
        out_spis[i] = ep->senders[i].spi;
    size_t n_in = ep->p->rx_spis(kf, &ep->su, in_spis, 256);
    if ((st = pe_net_stats_init(&ep->stats, cfg->workers, out_spis, ep->n_senders, in_spis, n_in)) != PE_OK ||
        (st = setup_workers(ep, mtu, why, n)) != PE_OK || (st = pe_net_link_up(cfg->dev, mtu, why, n)) != PE_OK)
        return st;
    pe_net_log(cfg->log_fd, "tunnel: %s over %s, %s mode, device %s (MTU %u), %u worker%s, sending on %zu SA%s",
               ep->p->name, ep->su.udp ? "UDP" : "IP", cfg->transport_mode ? "transport" : "tunnel", cfg->dev, mtu,
               cfg->workers, cfg->workers == 1 ? "" : "s", ep->n_senders, ep->n_senders == 1 ? "" : "s");
    return PE_OK;
}

/* ---------------------------------------------------------------- reloading (SIGHUP) */

/* Whether line la of a and line lb of b say the same (kind, names and values in order). */
static int same_line(const pe_keyfile *a, size_t la, const pe_keyfile *b, size_t lb)
{
    const pe_keyfile_line *x = NULL, *y = NULL;
    for (size_t i = 0; i < a->n_lines && !x; i++)
        x = a->lines[i].line == la ? &a->lines[i] : NULL;
    for (size_t i = 0; i < b->n_lines && !y; i++)
        y = b->lines[i].line == lb ? &b->lines[i] : NULL;
    if (!x || !y || x->n_pairs != y->n_pairs || strcmp(x->kind, y->kind) != 0)
        return 0;
    for (size_t i = 0; i < x->n_pairs; i++)
        if (strcmp(x->names[i], y->names[i]) != 0 || strcmp(x->values[i], y->values[i]) != 0)
            return 0;
    return 1;
}

/* With every worker paused: the counters and replay windows the new keys take over from the old. */
static void carry_over(endpoint *ep, const pe_keyfile *kf, net_keys *old)
{
    const net_proto *p = ep->p;
    int exhausted;
    for (size_t i = 0; i < ep->n_senders; i++) {
        uint64_t next = p->next(old->sender_tx[i], 0, &exhausted);
        if (!exhausted && p->set_next(ep->senders[i].tx, 0, next) != PE_OK)
            atomic_store(&ep->senders[i].exhausted, 1); /* it cannot go on without repeating a number */
    }
    for (unsigned i = 0; i < ep->cfg->workers; i++) {
        worker *w = &ep->w[i];
        if (w->sub) { /* its own counter, on its own Sub SA */
            uint64_t next = p->next(old->tx[i], w->sub, &exhausted);
            if (!exhausted && p->set_next(w->tx, w->sub, next) != PE_OK)
                atomic_store(&w->sender->exhausted, 1);
        }
        if (!p->adopt)
            continue;
        uint32_t spis[256];
        size_t n = p->rx_spis(kf, &ep->su, spis, 256);
        for (size_t k = 0; k < n; k++) {
            size_t la = p->line_of(&ep->kf, spis[k]), lb = p->line_of(kf, spis[k]);
            if (la && lb && same_line(&ep->kf, la, kf, lb) && p->adopt(w->rx, old->rx[i], spis[k]) != PE_OK)
                pe_net_log(ep->cfg->log_fd, "tunnel: SA %08x: its replay window could not be kept", (unsigned)spis[k]);
        }
    }
}

/*
 * SIGHUP: the key file read again, every sender and receiver made anew from
 * it, and then, with the workers paused between two batches, swapped in.
 * Sending SAs go on from the numbers they had reached; a receiving SA whose
 * line is unchanged keeps its replay window.  A file that cannot be used
 * changes nothing.  Returns 1 when the keys were replaced.
 */
static int reload(endpoint *ep)
{
    const pe_tunnel_config *cfg = ep->cfg;
    char why[320] = "";
    pe_keyfile kf;
    net_keys k;
    pe_status st = load_keys(cfg->key_file, &kf, why, sizeof why);
    if (st == PE_OK && (st = keys_make(ep, &kf, &k, why, sizeof why)) != PE_OK)
        pe_keyfile_free(&kf);
    if (st != PE_OK) {
        pe_net_log(cfg->log_fd, "tunnel: SIGHUP: %s; the keys stay as they were", *why ? why : pe_status_message(st));
        return 0;
    }
    pthread_mutex_lock(&ep->pause_lock);
    atomic_store(&ep->pause_req, 1);
    uint64_t one = 1;
    ssize_t r = write(ep->ctl_fd, &one, sizeof one);
    (void)r;
    while (ep->paused < cfg->workers && !atomic_load(&ep->failed))
        pthread_cond_wait(&ep->pause_cond, &ep->pause_lock);
    int swapped = !atomic_load(&ep->failed);
    if (swapped) {
        keys_swap(ep, &k); /* k holds the old state now */
        carry_over(ep, &kf, &k);
        pe_keyfile_free(&ep->kf);
        ep->kf = kf;
        memset(&kf, 0, sizeof kf);
    }
    uint64_t drained;
    r = read(ep->ctl_fd, &drained, sizeof drained);
    atomic_store(&ep->pause_req, 0);
    pthread_cond_broadcast(&ep->pause_cond);
    pthread_mutex_unlock(&ep->pause_lock);
    keys_free(ep, &k);
    pe_keyfile_free(&kf);
    if (swapped)
        pe_net_log(cfg->log_fd, "tunnel: SIGHUP: keys reloaded from %s", cfg->key_file);
    return swapped;
}

static void write_stats(endpoint *ep, double t0)
{
    if (!ep->cfg->stats_path)
        return;
    pe_status st = pe_net_stats_write(&ep->stats, ep->cfg->stats_path, ep->cfg, seconds_now() - t0, ep->p->name);
    if (st != PE_OK)
        pe_net_log(ep->cfg->log_fd, "tunnel: cannot write the counters to %s: %s", ep->cfg->stats_path,
                   strerror(errno));
}

static uint64_t sum(const net_counts *c, unsigned n, int drops)
{
    uint64_t t = 0;
    for (unsigned w = 0; w < n; w++) {
        if (!drops)
            t += atomic_load(&c[w].packets);
        else
            for (unsigned s = 0; s < PE_STATUS_COUNT; s++)
                t += atomic_load(&c[w].drops[s]);
    }
    return t;
}

pe_status pe_tunnel_run(const pe_tunnel_config *cfg, pe_tunnel_result *res)
{
    pe_tunnel_result local;
    res = res ? res : &local;
    memset(res, 0, sizeof *res);
    endpoint *ep = calloc(1, sizeof *ep);
    if (!ep)
        return PE_ERR_NOMEM;
    ep->cfg = cfg;
    ep->p = proto_of(cfg->protocol);
    ep->stop_fd = ep->ctl_fd = -1;
    pthread_mutex_init(&ep->pause_lock, NULL);
    pthread_cond_init(&ep->pause_cond, NULL);
    for (unsigned i = 0; i < PE_TUNNEL_MAX_WORKERS; i++) {
        ep->w[i].tun = ep->w[i].sock = -1;
        ep->w[i].ep = ep;
        ep->w[i].index = i;
    }
    /* Blocked from the start: a signal that comes during set-up waits for the loop below (or, when set-up
     * fails, for the caller's handler once the mask is back), and the workers start with it blocked too. */
    sigset_t sigs, old;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGHUP);
    int sfd = -1;
    if (cfg->handle_signals) {
        pthread_sigmask(SIG_BLOCK, &sigs, &old);
        sfd = signalfd(-1, &sigs, SFD_CLOEXEC | SFD_NONBLOCK);
    }
    char why[320] = "";
    pe_status st = check_config(cfg, ep->p, why, sizeof why);
    if (st == PE_OK && ((ep->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0 ||
                        (ep->ctl_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0 || (cfg->handle_signals && sfd < 0)))
        st = PE_ERR_TUNNEL_DEVICE;
    if (st == PE_OK)
        st = setup(ep, why, sizeof why);
    if (st != PE_OK) {
        snprintf(res->message, sizeof res->message, "%s", *why ? why : pe_status_message(st));
        teardown(ep);
        free(ep);
        if (sfd >= 0)
            close(sfd);
        if (cfg->handle_signals)
            pthread_sigmask(SIG_SETMASK, &old, NULL);
        return st;
    }
    for (unsigned i = 0; i < cfg->workers && st == PE_OK; i++)
        if (pthread_create(&ep->w[i].thread, NULL, worker_main, &ep->w[i]) != 0)
            st = PE_ERR_NOMEM;
        else
            ep->w[i].started = 1;

    double t0 = seconds_now(), next_stats = cfg->stats_interval_ms ? t0 + cfg->stats_interval_ms / 1e3 : 0;
    while (st == PE_OK && !atomic_load(&ep->failed)) {
        double now = seconds_now(), wait = 1.0;
        if (cfg->max_ms && now - t0 >= cfg->max_ms / 1e3)
            break;
        if (cfg->max_ms)
            wait = t0 + cfg->max_ms / 1e3 - now;
        if (next_stats && next_stats - now < wait)
            wait = next_stats - now;
        struct pollfd fds[2] = {{sfd, POLLIN, 0}, {ep->stop_fd, POLLIN, 0}};
        int ms = wait > 0 ? (int)(wait * 1e3) + 1 : 0;
        if (poll(fds, 2, ms) < 0 && errno != EINTR)
            break;
        if (fds[1].revents) /* a worker stopped: the device or a socket failed */
            break;
        if (fds[0].revents & POLLIN) {
            struct signalfd_siginfo si;
            if (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
                if (si.ssi_signo == SIGHUP) {
                    res->reloads += (unsigned)reload(ep);
                } else {
                    res->stop_signal = (int)si.ssi_signo;
                    break;
                }
            }
        }
        if (next_stats && seconds_now() >= next_stats) {
            write_stats(ep, t0);
            next_stats += cfg->stats_interval_ms / 1e3;
        }
    }
    uint64_t one = 1;
    ssize_t r = write(ep->stop_fd, &one, sizeof one);
    (void)r;
    for (unsigned i = 0; i < cfg->workers; i++)
        if (ep->w[i].started)
            pthread_join(ep->w[i].thread, NULL);
    if (st == PE_OK && atomic_load(&ep->failed))
        st = (pe_status)atomic_load(&ep->failed);
    if (st != PE_OK)
        snprintf(res->message, sizeof res->message, "%s (the messages above say where)", pe_status_message(st));
    write_stats(ep, t0);
    res->packets_sent = sum(ep->stats.sent, cfg->workers, 0);
    res->packets_received = sum(ep->stats.received, cfg->workers, 0);
    res->packets_dropped = sum(ep->stats.sent, cfg->workers, 1) + sum(ep->stats.received, cfg->workers, 1);
    pe_net_log(cfg->log_fd, "tunnel: stopped%s: sent %llu, received %llu, dropped %llu",
               res->stop_signal == SIGINT ? " (SIGINT)" : res->stop_signal == SIGTERM ? " (SIGTERM)" : "",
               (unsigned long long)res->packets_sent, (unsigned long long)res->packets_received,
               (unsigned long long)res->packets_dropped);
    if (sfd >= 0)
        close(sfd);
    if (cfg->handle_signals)
        pthread_sigmask(SIG_SETMASK, &old, NULL); /* what arrived was read: nothing is delivered late */
    teardown(ep);
    free(ep);
    return st;
}

#else /* TUN devices, signalfd and recvmmsg are Linux's */

pe_status pe_tunnel_run(const pe_tunnel_config *cfg, pe_tunnel_result *res)
{
    (void)cfg;
    if (res)
        memset(res, 0, sizeof *res);
    return PE_ERR_UNSUPPORTED;
}
#endif
