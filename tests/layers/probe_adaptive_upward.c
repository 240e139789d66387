/* A file of adaptive's pure part that includes the scheduler's header: only the MoE glue
 * (adapt_moe.h, its own layer) may. */
#include "adaptive/adapt.h"
#include "scheduler/sched.h"

int layer_probe_adaptive_upward(void);
int layer_probe_adaptive_upward(void)
{
    return 0;
}
