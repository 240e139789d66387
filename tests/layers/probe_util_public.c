/* A util file that includes the whole public API: util may have strata/types.h only. */
#include <strata/types.h>
#include <strata/strata.h>

int layer_probe_util_public(void);
int layer_probe_util_public(void)
{
    return 0;
}
