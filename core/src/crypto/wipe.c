#include "pe/wipe.h"

#include <openssl/crypto.h>

void pe_wipe(void *p, size_t n)
{
    OPENSSL_cleanse(p, n);
}
