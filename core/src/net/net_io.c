/*
 * The endpoint's devices and sockets: TUN queues, the link's state, UDP
 * sockets in a SO_REUSEPORT group steered by SPI, raw IP sockets filtered to
 * their worker's packets, and the outer header a received datagram had.
 */
#define _GNU_SOURCE
#if defined(__linux__)
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <linux/filter.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "net_internal.h"
#include "pe/bytes.h"
#include "pe/ip.h"

void pe_net_log(int fd, const char *fmt, ...)
{
    if (fd < 0)
        return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    if (k < 0)
        return;
    size_t len = (size_t)k < sizeof line - 2 ? (size_t)k : sizeof line - 2;
    line[len++] = '\n';
    ssize_t w = write(fd, line, len); /* one write: lines of several threads do not interleave */
    (void)w;
}

static pe_status fail(pe_status st, char *why, size_t n, const char *what, const char *name)
{
    snprintf(why, n, "%s %s: %s", what, name, strerror(errno));
    return st;
}

pe_status pe_net_tun_open(const char *name, int multi_queue, int vnet, int *fd, char *why, size_t n)
{
    *fd = -1;
    if (strlen(name) >= IFNAMSIZ) {
        snprintf(why, n, "device name %s is longer than %d characters", name, IFNAMSIZ - 1);
        return PE_ERR_TUNNEL_CONFIG;
    }
    int f = open("/dev/net/tun", O_RDWR | O_CLOEXEC | O_NONBLOCK);
    if (f < 0)
        return fail(PE_ERR_TUNNEL_DEVICE, why, n, "cannot open /dev/net/tun for", name);
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    strcpy(ifr.ifr_name, name);
    ifr.ifr_flags = IFF_TUN | IFF_NO_PI | (multi_queue ? IFF_MULTI_QUEUE : 0) | (vnet ? IFF_VNET_HDR : 0);
    if (ioctl(f, TUNSETIFF, &ifr) < 0) {
        pe_status st = fail(PE_ERR_TUNNEL_DEVICE, why, n, multi_queue ? "cannot attach a queue of the "
                                                                        "multi-queue TUN device" : "cannot attach TUN device", name);
        close(f);
        return st;
    }
    *fd = f;
    return PE_OK;
}

int pe_net_tun_offload(int fd)
{
    int size = 10; /* struct virtio_net_hdr */
    return ioctl(fd, TUNSETVNETHDRSZ, &size) == 0 &&
           ioctl(fd, TUNSETOFFLOAD, (unsigned long)(TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 | TUN_F_TSO_ECN)) == 0;
}

pe_status pe_net_link_up(const char *name, unsigned mtu, char *why, size_t n)
{
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return fail(PE_ERR_TUNNEL_DEVICE, why, n, "cannot bring up", name);
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    strcpy(ifr.ifr_name, name);
    pe_status st = PE_OK;
    if (mtu) {
        ifr.ifr_mtu = (int)mtu;
        if (ioctl(s, SIOCSIFMTU, &ifr) < 0)
            st = fail(PE_ERR_TUNNEL_DEVICE, why, n, "cannot set the MTU of", name);
    }
    /* A TUN device's queue is 500 packets: a stream's burst overflows it while a worker seals, and TCP
     * takes the drops for congestion (docs/tunnel.md).  A longer one, unless it was set longer already. */
    if (st == PE_OK && ioctl(s, SIOCGIFTXQLEN, &ifr) == 0 && ifr.ifr_qlen < PE_NET_TXQUEUELEN) {
        ifr.ifr_qlen = PE_NET_TXQUEUELEN;
        if (ioctl(s, SIOCSIFTXQLEN, &ifr) < 0)
            st = fail(PE_ERR_TUNNEL_DEVICE, why, n, "cannot set the queue length of", name);
    }
    if (st == PE_OK && ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
        st = fail(PE_ERR_TUNNEL_DEVICE, why, n, "cannot read the flags of", name);
    if (st == PE_OK && !(ifr.ifr_flags & IFF_UP)) {
        ifr.ifr_flags |= IFF_UP;
        if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
            st = fail(PE_ERR_TUNNEL_DEVICE, why, n, "cannot bring up", name);
    }
    close(s);
    return st;
}

/*
 * Classic BPF giving (SPI [+ Sub SA]) % workers for the packet's payload at
 * offset `base` (0 for a reuseport group, which sees the UDP payload; X, the
 * IPv4 header length, for an IPv4 raw socket).  As a reuseport program it
 * returns the socket's index; as a raw socket's filter it keeps the packet
 * (0xffff octets) only when that is `worker`.  A packet too short to hold
 * the fields ends the program with 0: worker 0 takes it, and drops it.
 */
static size_t steer_prog(struct sock_filter *f, const net_proto *p, unsigned workers, int ipv4_raw, int filter,
                         unsigned worker)
{
    size_t k = 0;
    uint16_t ld = ipv4_raw ? BPF_IND : BPF_ABS;
    if (ipv4_raw)
        f[k++] = (struct sock_filter)BPF_STMT(BPF_LDX | BPF_B | BPF_MSH, 0);
    f[k++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | ld, (uint32_t)p->spi_offset);
    if (p->sub_sa_offset >= 0) {
        f[k++] = (struct sock_filter)BPF_STMT(BPF_ST, 0);
        f[k++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_H | ld, (uint32_t)p->sub_sa_offset);
        f[k++] = (struct sock_filter)BPF_STMT(BPF_MISC | BPF_TAX, 0);
        f[k++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_MEM, 0);
        f[k++] = (struct sock_filter)BPF_STMT(BPF_ALU | BPF_ADD | BPF_X, 0);
    }
    f[k++] = (struct sock_filter)BPF_STMT(BPF_ALU | BPF_MOD | BPF_K, workers);
    if (!filter) {
        f[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_A, 0);
        return k;
    }
    f[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, worker, 0, 1);
    f[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, 0xffff);
    f[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, 0);
    return k;
}

socklen_t pe_net_sockaddr(int family, const uint8_t *addr, uint16_t port, struct sockaddr_storage *ss)
{
    memset(ss, 0, sizeof *ss);
    if (family == 4) {
        struct sockaddr_in *a = (struct sockaddr_in *)ss;
        a->sin_family = AF_INET;
        a->sin_port = htons(port);
        memcpy(&a->sin_addr, addr, 4);
        return sizeof *a;
    }
    struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(port);
    memcpy(&a->sin6_addr, addr, 16);
    return sizeof *a;
}

pe_status pe_net_outer_device(int family, const uint8_t *local, char *name, char *why, size_t n)
{
    struct ifaddrs *ifs;
    if (getifaddrs(&ifs) < 0)
        return fail(PE_ERR_TUNNEL_SOCKET, why, n, "cannot list the addresses of", "the devices");
    name[0] = 0;
    for (const struct ifaddrs *i = ifs; i && !name[0]; i = i->ifa_next) {
        const struct sockaddr *a = i->ifa_addr;
        if (!a || a->sa_family != (family == 4 ? AF_INET : AF_INET6))
            continue;
        const void *at = family == 4 ? (const void *)&((const struct sockaddr_in *)a)->sin_addr
                                     : (const void *)&((const struct sockaddr_in6 *)a)->sin6_addr;
        if (memcmp(at, local, family == 4 ? 4 : 16) == 0 && strlen(i->ifa_name) < IFNAMSIZ)
            memcpy(name, i->ifa_name, strlen(i->ifa_name) + 1);
    }
    freeifaddrs(ifs);
    if (!name[0]) {
        snprintf(why, n, "transport mode: no device holds the local address (the outer packets leave by it)");
        return PE_ERR_TUNNEL_CONFIG;
    }
    return PE_OK;
}

pe_status pe_net_socket(const pe_tunnel_config *cfg, const net_proto *p, uint16_t port, uint8_t ip_protocol,
                        const char *bind_dev, unsigned worker, int *fd, int *gro, char *why, size_t n)
{
    *gro = 0;
    int af = cfg->family == 4 ? AF_INET : AF_INET6, udp = cfg->outer == PE_TUNNEL_OUTER_UDP, one = 1;
    int s = socket(af, (udp ? SOCK_DGRAM : SOCK_RAW) | SOCK_CLOEXEC | SOCK_NONBLOCK, udp ? IPPROTO_UDP : ip_protocol);
    *fd = -1;
    if (s < 0)
        return fail(PE_ERR_TUNNEL_SOCKET, why, n, "cannot open a socket for", udp ? "UDP" : "raw IP");
    struct sock_filter prog[16];
    struct sock_fprog fp = {0, prog};
    struct sockaddr_storage ss;
    socklen_t sl = pe_net_sockaddr(cfg->family, cfg->local, udp ? port : 0, &ss);
    pe_status st = PE_OK;
    int buf = 4 << 20; /* bursts of a fast peer wait here while a worker seals */
    setsockopt(s, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
    setsockopt(s, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
    if (af == AF_INET6)
        setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    if (bind_dev && setsockopt(s, SOL_SOCKET, SO_BINDTODEVICE, bind_dev, (socklen_t)strlen(bind_dev)) < 0)
        st = fail(PE_ERR_TUNNEL_SOCKET, why, n, "cannot bind the socket to the device of", "the local address");
    if (udp) {
        *gro = !cfg->no_udp_offloads && setsockopt(s, SOL_UDP, UDP_GRO, &one, sizeof one) == 0; /* Linux 5.0+ */
        if (st == PE_OK && cfg->workers > 1 && setsockopt(s, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) < 0)
            st = fail(PE_ERR_TUNNEL_SOCKET, why, n, "cannot share the port among workers:", "SO_REUSEPORT");
        if (st == PE_OK && bind(s, (struct sockaddr *)&ss, sl) < 0)
            st = fail(PE_ERR_TUNNEL_SOCKET, why, n, "cannot bind the", "UDP port");
        if (st == PE_OK && cfg->workers > 1 && worker == 0) { /* one program for the group */
            fp.len = (unsigned short)steer_prog(prog, p, cfg->workers, 0, 0, 0);
            if (setsockopt(s, SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &fp, sizeof fp) < 0)
                st = fail(PE_ERR_TUNNEL_SOCKET, why, n, "cannot steer packets to workers:", "SO_ATTACH_REUSEPORT_CBPF");
        }
    } else {
        if (st == PE_OK && bind(s, (struct sockaddr *)&ss, sl) < 0)
            st = fail(PE_ERR_TUNNEL_SOCKET, why, n, "cannot bind the", "raw socket");
        if (st == PE_OK && cfg->workers > 1) { /* every raw socket of the protocol sees every packet */
            fp.len = (unsigned short)steer_prog(prog, p, cfg->workers, cfg->family == 4, 1, worker);
            if (setsockopt(s, SOL_SOCKET, SO_ATTACH_FILTER, &fp, sizeof fp) < 0)
                st = fail(PE_ERR_TUNNEL_SOCKET, why, n, "cannot filter packets to workers:", "SO_ATTACH_FILTER");
        }
    }
    if (st != PE_OK) {
        close(s);
        return st;
    }
    *fd = s;
    return PE_OK;
}

static void put_ipv4_header(uint8_t *h, size_t total, uint8_t proto, const uint8_t *src, const uint8_t *dst)
{
    memset(h, 0, PE_IPV4_HDR_LEN);
    h[0] = 0x45;
    pe_put16(h + 2, (uint16_t)total);
    h[8] = 64;
    h[9] = proto;
    memcpy(h + 12, src, 4);
    memcpy(h + 16, dst, 4);
    pe_ipv4_set_checksum(h);
}

uint8_t *pe_net_outer_header(uint8_t *data, size_t *len, int family, int udp, uint8_t ip_protocol,
                             const uint8_t *src, uint16_t sport, const uint8_t *dst, uint16_t dport)
{
    size_t ip_len = family == 4 ? PE_IPV4_HDR_LEN : PE_IPV6_HDR_LEN, l4 = *len + (udp ? PE_UDP_HDR_LEN : 0);
    uint8_t *p = data - (udp ? PE_UDP_HDR_LEN : 0) - ip_len;
    if (udp) { /* its checksum 0: the kernel verified the one it had */
        uint8_t *u = p + ip_len;
        pe_put16(u, sport);
        pe_put16(u + 2, dport);
        pe_put16(u + 4, (uint16_t)l4);
        pe_put16(u + 6, 0);
    }
    uint8_t proto = udp ? PE_IPPROTO_UDP : ip_protocol;
    if (family == 4) {
        put_ipv4_header(p, ip_len + l4, proto, src, dst);
    } else {
        memset(p, 0, PE_IPV6_HDR_LEN);
        p[0] = 0x60;
        pe_put16(p + 4, (uint16_t)l4);
        p[6] = proto;
        p[7] = 64;
        memcpy(p + 8, src, 16);
        memcpy(p + 24, dst, 16);
    }
    *len = ip_len + l4;
    return p;
}
#endif
