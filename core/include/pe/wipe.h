#ifndef PE_WIPE_H
#define PE_WIPE_H
/* Wiping secrets and unauthenticated plaintext: one call every layer uses. */
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Overwrite secrets so the compiler cannot drop it. */
void pe_wipe(void *p, size_t n);

#ifdef __cplusplus
}
#endif
#endif
