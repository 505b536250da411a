/*
 * The expert items a dissector shows for a core status: one per status
 * category (core/include/pe/status.h), named <proto>.expert.<category> with
 * the category's '-' written '_' (psp.expert.no_key, eesp.expert.cut_by_capture),
 * so that every face of the project (the plugin, the Lua scripts, the Python
 * exception classes) gives a status the same meaning.  Which item a status
 * gets comes from pe_status_category() alone; group and severity from the one
 * table in experts.c.
 */
#ifndef PE_WS_EXPERTS_H
#define PE_WS_EXPERTS_H

#include <epan/expert.h>
#include <epan/packet.h>

#include "pe/status.h"

typedef struct pe_ws_status_experts {
    expert_field ei[PE_CATEGORY_COUNT]; /* by category; PE_CAT_OK has none */
} pe_ws_status_experts;

/* Registers <proto>.expert.<category> for every category but ok (proto: the protocol's filter name). */
void pe_ws_status_experts_register(expert_module_t *module, const char *proto, pe_ws_status_experts *ex);

/* The item of st's category on item, saying the status's message and name; nothing for PE_OK. */
void pe_ws_status_expert(packet_info *pinfo, proto_item *item, pe_ws_status_experts *ex, pe_status st);

/* The same for a problem met outside the packet (a key-file line): its own text instead of the status's message. */
void pe_ws_status_expert_text(packet_info *pinfo, proto_item *item, pe_ws_status_experts *ex, pe_status st,
                              const char *text);

#endif
