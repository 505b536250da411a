/*
 * The plugin's entry points: Wireshark loads psp_eesp.so, checks the version
 * it was built for and calls plugin_register(), which registers both
 * protocols (packet-psp.c, packet-eesp.c).
 */
#define WS_BUILD_DLL
#include <wireshark.h>

#include <epan/packet.h>
#include <epan/proto.h>

#include "dissectors.h"
#include "ws_compat.h"

#ifndef PE_PLUGIN_VERSION
#define PE_PLUGIN_VERSION "0.1.0"
#endif

WS_DLL_PUBLIC_DEF const gchar plugin_version[] = PE_PLUGIN_VERSION;
WS_DLL_PUBLIC_DEF const int plugin_want_major = WIRESHARK_VERSION_MAJOR;
WS_DLL_PUBLIC_DEF const int plugin_want_minor = WIRESHARK_VERSION_MINOR;

WS_DLL_PUBLIC void plugin_register(void);
#ifdef PE_WS_HAVE_PLUGIN_DESCRIBE
WS_DLL_PUBLIC uint32_t plugin_describe(void);
#endif

static void register_protocols(void)
{
    proto_register_psp();
    proto_register_eesp();
}

static void register_handoffs(void)
{
    proto_reg_handoff_psp();
    proto_reg_handoff_eesp();
}

void plugin_register(void)
{
    static proto_plugin plugin;
    plugin.register_protoinfo = register_protocols;
    plugin.register_handoff = register_handoffs;
    proto_register_plugin(&plugin);
}

#ifdef PE_WS_HAVE_PLUGIN_DESCRIBE
/* What tshark -G plugins and About > Plugins list as the plugin's type. */
uint32_t plugin_describe(void)
{
    return WS_PLUGIN_DESC_DISSECTOR;
}
#endif
