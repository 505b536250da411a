/*
 * pe_esp_rx_adopt and pe_eesp_rx_adopt: a receiver made again from the same
 * SAs (the live endpoint reloading its key file) takes the old one's replay
 * state, so that no packet received before is accepted again; the old one
 * gets the new one's (empty) state in exchange; twins that differ are
 * refused, and so are clones.
 */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "pe/eesp.h"
#include "pe/esp.h"
#include "udp_packet.h"

#define N 40
#define SIZE 100

static uint8_t wire[N][SIZE + 128];
static size_t wire_len[N];

static const uint8_t KEY[20] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20};
static const uint8_t ROOT[32] = {7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9};

static void esp_cfg(pe_esp_sa_config *c, uint32_t window)
{
    pe_esp_sa_config_init(c);
    c->spi = 0x100;
    c->key = KEY;
    c->key_len = sizeof KEY;
    c->mode = PE_ESP_TUNNEL;
    c->replay_window = window;
}

static pe_esp_rx *esp_rx(uint32_t window)
{
    pe_esp_rx_config rc;
    pe_esp_rx_config_init(&rc);
    pe_esp_rx *rx = NULL;
    pe_esp_sa_config c;
    esp_cfg(&c, window);
    CHECK_ST(pe_esp_rx_new(&rc, &rx), PE_OK);
    CHECK_ST(pe_esp_rx_add_sa(rx, &c), PE_OK);
    return rx;
}

static pe_status esp_open(pe_esp_rx *rx, int i)
{
    uint8_t out[SIZE + 128];
    size_t n;
    return pe_esp_decap(rx, wire[i], wire_len[i], out, sizeof out, &n, NULL);
}

static void test_esp(void)
{
    uint8_t pkt[SIZE];
    make_udp4_packet(pkt, SIZE);
    pe_esp_sa_config c;
    esp_cfg(&c, 0);
    pe_esp_tx *tx = NULL;
    CHECK_ST(pe_esp_tx_new(&c, &tx), PE_OK);
    for (int i = 0; i < N; i++)
        CHECK_ST(pe_esp_encap(tx, pkt, SIZE, wire[i], sizeof wire[i], &wire_len[i]), PE_OK);
    pe_esp_tx_free(tx);

    pe_esp_rx *old = esp_rx(0);
    for (int i = 0; i < 30; i++)
        if (i != 20) /* one left out: the window knows it was never received */
            CHECK_ST(esp_open(old, i), PE_OK);
    pe_esp_rx *fresh = esp_rx(0);
    CHECK_ST(pe_esp_rx_adopt(fresh, old, 0x200), PE_OK); /* no such SA: nothing moves */
    CHECK_ST(pe_esp_rx_adopt(fresh, old, 0x100), PE_OK);
    CHECK_ST(esp_open(fresh, 5), PE_ERR_REPLAY_DUPLICATE);
    CHECK_ST(esp_open(fresh, 29), PE_ERR_REPLAY_DUPLICATE);
    CHECK_ST(esp_open(fresh, 20), PE_OK); /* the one it had not seen */
    CHECK_ST(esp_open(fresh, 30), PE_OK);
    CHECK_ST(esp_open(old, 5), PE_OK); /* the old one has the new one's empty window now */

    pe_esp_rx *other = esp_rx(2048), *clone = NULL;
    CHECK_ST(pe_esp_rx_adopt(other, fresh, 0x100), PE_ERR_INVALID_ARGUMENT);
    CHECK_ST(esp_open(fresh, 5), PE_ERR_REPLAY_DUPLICATE); /* a refusal moves nothing */
    CHECK_ST(pe_esp_rx_clone(fresh, &clone), PE_OK);
    CHECK_ST(pe_esp_rx_adopt(clone, fresh, 0x100), PE_ERR_INVALID_ARGUMENT);
    CHECK_ST(pe_esp_rx_adopt(fresh, clone, 0x100), PE_ERR_INVALID_ARGUMENT);
    pe_esp_rx_free(clone);
    pe_esp_rx_free(other);
    pe_esp_rx_free(fresh);
    pe_esp_rx_free(old);
}

static void eesp_cfg(pe_eesp_sa_config *c, uint32_t window)
{
    pe_eesp_sa_config_init(c);
    c->spi = 0x100;
    c->sskdf = PE_SSKDF_HKDF_SHA2_256;
    c->root_key = ROOT;
    c->root_key_len = sizeof ROOT;
    c->mode = PE_EESP_TUNNEL;
    c->replay_window = window;
}

static pe_eesp_rx *eesp_rx(uint32_t window)
{
    pe_eesp_rx_config rc;
    pe_eesp_rx_config_init(&rc);
    pe_eesp_rx *rx = NULL;
    pe_eesp_sa_config c;
    eesp_cfg(&c, window);
    CHECK_ST(pe_eesp_rx_new(&rc, &rx), PE_OK);
    CHECK_ST(pe_eesp_rx_add_sa(rx, &c), PE_OK);
    return rx;
}

static pe_status eesp_open(pe_eesp_rx *rx, int i)
{
    uint8_t out[SIZE + 128];
    size_t n;
    return pe_eesp_decap(rx, wire[i], wire_len[i], out, sizeof out, &n, NULL);
}

static void test_eesp(void)
{
    uint8_t pkt[SIZE];
    make_udp4_packet(pkt, SIZE);
    pe_eesp_sa_config c;
    eesp_cfg(&c, 0);
    pe_eesp_tx *tx = NULL;
    CHECK_ST(pe_eesp_tx_new(&c, &tx), PE_OK);
    for (int i = 0; i < N; i++) /* two Sub SAs, interleaved */
        CHECK_ST(pe_eesp_encap(tx, pkt, SIZE, (uint16_t)(i & 1), wire[i], sizeof wire[i], &wire_len[i]), PE_OK);
    pe_eesp_tx_free(tx);

    pe_eesp_rx *old = eesp_rx(0);
    for (int i = 0; i < 30; i++)
        CHECK_ST(eesp_open(old, i), PE_OK);
    pe_eesp_rx *fresh = eesp_rx(0);
    CHECK_ST(pe_eesp_rx_adopt(fresh, old, 0x100), PE_OK);
    CHECK_ST(eesp_open(fresh, 4), PE_ERR_REPLAY_DUPLICATE);  /* Sub SA 0 */
    CHECK_ST(eesp_open(fresh, 29), PE_ERR_REPLAY_DUPLICATE); /* Sub SA 1 */
    CHECK_ST(eesp_open(fresh, 30), PE_OK);
    CHECK_ST(eesp_open(fresh, 31), PE_OK);
    CHECK_ST(eesp_open(old, 4), PE_OK);

    pe_eesp_rx *other = eesp_rx(4096), *clone = NULL;
    CHECK_ST(pe_eesp_rx_adopt(other, fresh, 0x100), PE_ERR_INVALID_ARGUMENT);
    CHECK_ST(pe_eesp_rx_clone(fresh, &clone), PE_OK);
    CHECK_ST(pe_eesp_rx_adopt(clone, fresh, 0x100), PE_ERR_INVALID_ARGUMENT);
    pe_eesp_rx_free(clone);
    pe_eesp_rx_free(other);
    pe_eesp_rx_free(fresh);
    pe_eesp_rx_free(old);
}

int main(void)
{
    test_esp();
    test_eesp();
    printf("test_rx_adopt: %ld checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
