/* An intra file that includes the inter tier's header: siblings meet in the scheduler only. */
#include "intra/intra.h"
#include "inter/engine.h"

int layer_probe_intra_sibling(void);
int layer_probe_intra_sibling(void)
{
    return 0;
}
