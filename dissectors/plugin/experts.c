/* The status expert items (experts.h): one per category, group and severity from one table. */
#define WS_BUILD_DLL
#include <wireshark.h>

#include "experts.h"

/*
 * What a category's item looks like.  The Lua dissectors register the same
 * names with the same group and severity: change both together.
 */
static const struct {
    int group;
    int severity;
    const char *title; /* before the status's own message */
} CATEGORY_EXPERT[] = {
    [PE_CAT_OK] = {0, 0, NULL},
    [PE_CAT_MALFORMED] = {PI_MALFORMED, PI_ERROR, "Malformed"},
    [PE_CAT_AUTHENTICATION] = {PI_CHECKSUM, PI_ERROR, "Authentication failed"},
    [PE_CAT_REPLAY] = {PI_SEQUENCE, PI_WARN, "Replay"},
    /* well-formed and authenticated: a receiver's choice (or a dummy packet), nothing wrong on the wire */
    [PE_CAT_POLICY] = {PI_SECURITY, PI_NOTE, "Dropped by policy"},
    [PE_CAT_NO_KEY] = {PI_DECRYPTION, PI_NOTE, "No key"},
    [PE_CAT_NOT_THIS_PROTOCOL] = {PI_PROTOCOL, PI_NOTE, "Not this protocol"},
    [PE_CAT_CUT_BY_CAPTURE] = {PI_UNDECODED, PI_NOTE, "Cut by the capture"},
    /* the user's keys are wrong or unreadable: every packet they should have opened says so, visibly */
    [PE_CAT_CONFIGURATION] = {PI_DECRYPTION, PI_WARN, "Configuration"},
    [PE_CAT_IO] = {PI_DECRYPTION, PI_WARN, "I/O error"},
    [PE_CAT_LIMIT] = {PI_UNDECODED, PI_WARN, "Limit reached"},
    [PE_CAT_INTERNAL] = {PI_UNDECODED, PI_ERROR, "Internal error"},
};
_Static_assert(sizeof CATEGORY_EXPERT / sizeof CATEGORY_EXPERT[0] == PE_CATEGORY_COUNT,
               "experts.c: every category of core/include/pe/status.h needs its row");

void pe_ws_status_experts_register(expert_module_t *module, const char *proto, pe_ws_status_experts *ex)
{
    /* Wireshark keeps pointers into the array and its strings for the program's lifetime. */
    static const ei_register_info blank = {NULL, {NULL, 0, 0, NULL, EXPFILL}};
    ei_register_info *ri = g_new(ei_register_info, PE_CATEGORY_COUNT);
    int n = 0;
    for (int c = 0; c < PE_CATEGORY_COUNT; c++) {
        static const expert_field init = EI_INIT;
        ex->ei[c] = init;
        if (c == PE_CAT_OK)
            continue;
        char *cat = g_strdup(pe_category_name((pe_category)c));
        g_strdelimit(cat, "-", '_');
        ri[n] = blank;
        ri[n].ids = &ex->ei[c];
        ri[n].eiinfo.name = g_strdup_printf("%s.expert.%s", proto, cat);
        ri[n].eiinfo.group = CATEGORY_EXPERT[c].group;
        ri[n].eiinfo.severity = CATEGORY_EXPERT[c].severity;
        ri[n].eiinfo.summary = g_strdup_printf("%s: %s", CATEGORY_EXPERT[c].title,
                                               pe_category_description((pe_category)c));
        g_free(cat);
        n++;
    }
    expert_register_field_array(module, ri, n);
}

void pe_ws_status_expert_text(packet_info *pinfo, proto_item *item, pe_ws_status_experts *ex, pe_status st,
                              const char *text)
{
    pe_category c = pe_status_category(st);
    if (c == PE_CAT_OK)
        return;
    expert_add_info_format(pinfo, item, &ex->ei[c], "%s: %s (%s)", CATEGORY_EXPERT[c].title, text,
                           pe_status_name(st));
}

void pe_ws_status_expert(packet_info *pinfo, proto_item *item, pe_ws_status_experts *ex, pe_status st)
{
    pe_ws_status_expert_text(pinfo, item, ex, st, pe_status_message(st));
}
