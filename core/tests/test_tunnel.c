/*
 * The live endpoint's refusals, which need no device, socket or root: every
 * setting and key file it cannot use stops pe_tunnel_run before any packet
 * moves, with a status and one message naming the problem.  (Traffic is
 * tested between network namespaces: tests/tunnel/.)
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "pe/status.h"
#include "pe/tunnel.h"

static char key_path[] = "/tmp/pe_test_tunnel_XXXXXX";

static void write_keys(const char *text)
{
    FILE *f = fopen(key_path, "w");
    fputs(text, f);
    fclose(f);
}

/* Run with cfg; the status, and its message in msg (none of it on the log descriptor). */
static pe_status run(pe_tunnel_config *cfg, char *msg, size_t n)
{
    int p[2];
    if (pipe2(p, O_NONBLOCK) != 0)
        abort();
    cfg->log_fd = p[1];
    pe_tunnel_result res;
    memset(&res, 0xee, sizeof res);
    pe_status st = pe_tunnel_run(cfg, &res);
    CHECK(res.stop_signal == 0 && res.packets_sent == 0 && res.packets_received == 0);
    char logged[64];
    CHECK(read(p[0], logged, sizeof logged) < 0); /* the caller reports a refusal, not the log */
    snprintf(msg, n, "%s\n", res.message);
    close(p[0]);
    close(p[1]);
    return st;
}

static void base(pe_tunnel_config *cfg, pe_tunnel_protocol proto, uint32_t spi)
{
    pe_tunnel_config_init(cfg);
    cfg->protocol = proto;
    cfg->key_file = key_path;
    cfg->dev = "pe-test-tun";
    cfg->spis[0] = spi;
    cfg->n_spis = 1;
    cfg->family = 4;
    memcpy(cfg->local, "\xc6\x33\x64\x01", 4);
    memcpy(cfg->peer, "\xc6\x33\x64\x02", 4);
}

#define REFUSED(cfg, want, text)                                                                   \
    do {                                                                                           \
        char msg_[512];                                                                            \
        pe_status st_ = run(&(cfg), msg_, sizeof msg_);                                            \
        CHECK(st_ == (want));                                                                      \
        CHECK(strstr(msg_, (text)) != NULL);                                                       \
        CHECK(strchr(msg_, '\n') == strrchr(msg_, '\n')); /* one line */                            \
        if (st_ != (want) || !strstr(msg_, (text)))                                                \
            fprintf(stderr, "  got %s: %s", pe_status_name(st_), msg_);                            \
    } while (0)

static const char ESP_KEYS[] = "esp-sa spi=0x100 suite=aes-gcm-16 key=000102030405060708090a0b0c0d0e0f10111213 "
                               "mode=tunnel\n"
                               "esp-sa spi=0x200 suite=aes-gcm-16 key=101112131415161718191a1b1c1d1e1f20212223 "
                               "mode=transport\n";

static void test_settings(void)
{
    pe_tunnel_config c;
    pe_tunnel_config_init(&c);
    CHECK(c.workers == 1 && c.log_fd == 2 && c.family == 4 && c.outer == PE_TUNNEL_OUTER_UDP && !c.n_spis);

    write_keys(ESP_KEYS);
    base(&c, PE_TUNNEL_ESP, 0x100);
    c.n_spis = 0;
    REFUSED(c, PE_ERR_TUNNEL_CONFIG, "sending SPIs");
    base(&c, PE_TUNNEL_ESP, 0x100);
    c.workers = 0;
    REFUSED(c, PE_ERR_TUNNEL_CONFIG, "workers must be");
    c.workers = PE_TUNNEL_MAX_WORKERS + 1;
    REFUSED(c, PE_ERR_TUNNEL_CONFIG, "workers must be");
    base(&c, PE_TUNNEL_ESP, 0x100);
    c.family = 5;
    REFUSED(c, PE_ERR_TUNNEL_CONFIG, "family");
    base(&c, PE_TUNNEL_PSP, 0x100);
    c.outer = PE_TUNNEL_OUTER_IP;
    REFUSED(c, PE_ERR_TUNNEL_CONFIG, "UDP only");
    base(&c, PE_TUNNEL_ESP, 0x100);
    c.transport_mode = 1; /* 198.51.100.1 is on no device here: the outer packets would have no way out */
    REFUSED(c, PE_ERR_TUNNEL_CONFIG, "no device holds the local address");
    base(&c, PE_TUNNEL_ESP, 0x100);
    c.transport_mode = 1;
    memcpy(c.local, "\x7f\x00\x00\x01", 4); /* on lo */
    REFUSED(c, PE_ERR_TUNNEL_CONFIG, "not in the endpoint's mode");
    base(&c, PE_TUNNEL_ESP, 0x100);
    c.mtu = 100;
    REFUSED(c, PE_ERR_TUNNEL_CONFIG, "MTU");
    base(&c, PE_TUNNEL_ESP, 0x100);
    c.dev = "";
    REFUSED(c, PE_ERR_TUNNEL_CONFIG, "device name");
    base(&c, (pe_tunnel_protocol)7, 0x100);
    REFUSED(c, PE_ERR_TUNNEL_CONFIG, "unknown protocol");
}

static void test_key_files(void)
{
    pe_tunnel_config c;
    base(&c, PE_TUNNEL_ESP, 0x100);
    c.key_file = "/nonexistent/pe-keys";
    {
        char msg[512];
        pe_status st = run(&c, msg, sizeof msg);
        CHECK(st != PE_OK && strstr(msg, "/nonexistent/pe-keys") != NULL);
    }
    write_keys("esp-sa spi=0x100 suite=aes-gcm-16 key=00\n");
    base(&c, PE_TUNNEL_ESP, 0x100);
    REFUSED(c, PE_ERR_KEYFILE_VALUE, "line 1");

    write_keys(ESP_KEYS);
    base(&c, PE_TUNNEL_ESP, 0x300);
    REFUSED(c, PE_ERR_TUNNEL_CONFIG, "no esp-sa line with spi=00000300");
    base(&c, PE_TUNNEL_ESP, 0x200); /* a transport-mode line for a tunnel-mode endpoint */
    REFUSED(c, PE_ERR_TUNNEL_CONFIG, "not in the endpoint's mode");
    base(&c, PE_TUNNEL_EESP, 0x100); /* an ESP key file for EESP */
    REFUSED(c, PE_ERR_TUNNEL_CONFIG, "no eesp-sa line with spi=00000100");

    write_keys("psp-sa spi=0x100 version=0 mode=tunnel\n");
    base(&c, PE_TUNNEL_PSP, 0x100);
    REFUSED(c, PE_ERR_TUNNEL_CONFIG, "no psp-master key");
    base(&c, PE_TUNNEL_PSP, 0x9);
    REFUSED(c, PE_ERR_TUNNEL_CONFIG, "no psp-sa line with spi=00000009");
    /* the top bit of the SPI picks master key 1, which this file lacks */
    write_keys("psp-master key0=000102030405060708090a0b0c0d0e0f000102030405060708090a0b0c0d0e0f\n"
               "psp-sa spi=0x80000100 version=0 mode=tunnel\n");
    base(&c, PE_TUNNEL_PSP, 0x80000100u);
    REFUSED(c, PE_ERR_TUNNEL_CONFIG, "no psp-master key");
}

int main(void)
{
    int fd = mkstemp(key_path);
    if (fd < 0)
        return 2;
    close(fd);
    test_settings();
    test_key_files();
    unlink(key_path);
    printf("test_tunnel: %ld checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
