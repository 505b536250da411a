#include "pe/status.h"

static const char *const status_names[PE_STATUS_COUNT] = {
#define PE_STATUS_NAME(code, name, category, msg) [code] = name,
    PE_STATUS_LIST(PE_STATUS_NAME)
#undef PE_STATUS_NAME
};

static const char *const status_messages[PE_STATUS_COUNT] = {
#define PE_STATUS_MSG(code, name, category, msg) [code] = msg,
    PE_STATUS_LIST(PE_STATUS_MSG)
#undef PE_STATUS_MSG
};

static const pe_category status_categories[PE_STATUS_COUNT] = {
#define PE_STATUS_CATEGORY(code, name, category, msg) [code] = category,
    PE_STATUS_LIST(PE_STATUS_CATEGORY)
#undef PE_STATUS_CATEGORY
};

static const char *const category_names[PE_CATEGORY_COUNT] = {
#define PE_CATEGORY_NAME(id, name, description) [id] = name,
    PE_CATEGORY_LIST(PE_CATEGORY_NAME)
#undef PE_CATEGORY_NAME
};

static const char *const category_descriptions[PE_CATEGORY_COUNT] = {
#define PE_CATEGORY_DESCRIPTION(id, name, description) [id] = description,
    PE_CATEGORY_LIST(PE_CATEGORY_DESCRIPTION)
#undef PE_CATEGORY_DESCRIPTION
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

pe_category pe_status_category(pe_status s)
{
    if ((unsigned)s >= PE_STATUS_COUNT)
        return PE_CAT_INTERNAL;
    return status_categories[s];
}

const char *pe_category_name(pe_category c)
{
    if ((unsigned)c >= PE_CATEGORY_COUNT)
        return "unknown-category";
    return category_names[c];
}

const char *pe_category_description(pe_category c)
{
    if ((unsigned)c >= PE_CATEGORY_COUNT)
        return "unknown category";
    return category_descriptions[c];
}
