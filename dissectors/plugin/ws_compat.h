/*
 * One plugin source for Wireshark 4.0, 4.2, 4.4 and 4.6: the few API breaks
 * between them, keyed on the version of the headers the plugin is compiled
 * against (ws_version.h, pulled in by wireshark.h).  The dissectors are
 * written against the newest names; this header maps them back.
 *
 * Built and tested: 4.0.17 (Debian 12, GCC 12), 4.4.19 (Debian 13, GCC 14),
 * 4.6.9 (Debian sid, GCC 16); scripts/wireshark-chroot.sh.
 *
 * 4.2 (Ubuntu 24.04) could not be built here: what follows for it is read,
 * not tested.  It still has GLib's gboolean in the UAT update callback and
 * in prefs_register_bool_preference(): the conversion to C99 bool came with
 * the bulk conversion of the dissectors to C99 types for 4.4 (the in-tree
 * dissectors, built with -Werror, passed gboolean variables in 4.2).  It has
 * pntoh32/pntoh64 and the three-argument val_to_str() beside
 * val_to_str_wmem() (renamed in 4.6), and no plugin_describe() (4.4 added it
 * with wsutil/plugins.h).  The static assertions below check the bool choice
 * against the real prototypes, so a wrong reading of 4.2 is a compile error
 * that names it, never a silent mismatch.
 */
#ifndef PE_WS_COMPAT_H
#define PE_WS_COMPAT_H

#include <wireshark.h>

#include <epan/packet.h>
#include <epan/prefs.h>
#include <epan/uat.h>

#define PE_WS_AT_LEAST(major, minor)                                                                              \
    (WIRESHARK_VERSION_MAJOR > (major) || (WIRESHARK_VERSION_MAJOR == (major) && WIRESHARK_VERSION_MINOR >= (minor)))

/*
 * The boolean of the UAT update callback and of boolean preference variables.
 * The two are pointers' targets, so int (gboolean) against _Bool is a type
 * error (GCC 14 makes incompatible pointer types an error), not a conversion.
 */
#if PE_WS_AT_LEAST(4, 4)
typedef bool pe_ws_bool;
#else
typedef gboolean pe_ws_bool;
#endif

_Static_assert(_Generic(&prefs_register_bool_preference,
                        void (*)(module_t *, const char *, const char *, const char *, pe_ws_bool *): 1,
                        default: 0),
               "ws_compat.h: prefs_register_bool_preference() of this Wireshark takes another boolean type");
_Static_assert(_Generic((uat_update_cb_t)0, pe_ws_bool (*)(void *, char **): 1, default: 0),
               "ws_compat.h: uat_update_cb_t of this Wireshark returns another boolean type");

/* 4.6 renamed the unaligned big-endian readers (wsutil/pint.h). */
#if !PE_WS_AT_LEAST(4, 6)
#define pntohu32(p) pntoh32(p)
#define pntohu64(p) pntoh64(p)
#endif

/* 4.6 gave val_to_str() the allocation scope that val_to_str_wmem() took before. */
#if PE_WS_AT_LEAST(4, 6)
#define pe_val_to_str(scope, val, vs, fmt) val_to_str((scope), (val), (vs), (fmt))
#else
#define pe_val_to_str(scope, val, vs, fmt) val_to_str_wmem((scope), (val), (vs), (fmt))
#endif

/* plugin_describe() (4.4+): without it tshark -G plugins lists the plugin as "unknown". */
#if PE_WS_AT_LEAST(4, 4)
#include <wsutil/plugins.h>
#define PE_WS_HAVE_PLUGIN_DESCRIBE 1
#endif

#endif
