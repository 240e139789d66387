/* A scheduler file that includes what the scheduler may: both tiers, util and the public
 * API. It must build, so that the refusals of the other probes are the rule's doing. */
#include <strata/strata.h>
#include "inter/engine.h"
#include "intra/intra.h"
#include "scheduler/sched.h"
#include "util/util.h"

int layer_probe_scheduler_allowed(void);
int layer_probe_scheduler_allowed(void)
{
    return 0;
}
