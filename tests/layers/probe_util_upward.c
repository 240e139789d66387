/* A util file that includes the scheduler's header: the layer rule must refuse it. */
#include "util/util.h"
#include "scheduler/sched.h"

int layer_probe_util_upward(void);
int layer_probe_util_upward(void)
{
    return 0;
}
