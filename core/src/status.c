#include "pe/status.h"

static const char *const status_names[PE_STATUS_COUNT] = {
#define PE_STATUS_NAME(code, name, msg) [code] = name,
    PE_STATUS_LIST(PE_STATUS_NAME)
#undef PE_STATUS_NAME
};

static const char *const status_messages[PE_STATUS_COUNT] = {
#define PE_STATUS_MSG(code, name, msg) [code] = msg,
    PE_STATUS_LIST(PE_STATUS_MSG)
#undef PE_STATUS_MSG
};

const char *pe_status_name(pe_status s)
{
    if ((unsigned)s >= PE_STATUS_COUNT)
        return "unknown-status";
    return status_names[s];
}

const char *pe_status_message(pe_status s)
{
    if ((unsigned)s >= PE_STATUS_COUNT)
        return "unknown status code";
    return status_messages[s];
}
