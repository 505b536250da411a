/* What the plugin's parts offer each other. */
#ifndef PE_WS_DISSECTORS_H
#define PE_WS_DISSECTORS_H

void proto_register_psp(void);
void proto_reg_handoff_psp(void);
void proto_register_eesp(void);
void proto_reg_handoff_eesp(void);

#endif
