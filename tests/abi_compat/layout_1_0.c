/* The sizes of the size-prefixed structs as the ABI 1.0 headers
 * (include-1.0, as released) lay them out, one "type size" line each, for
 * check_sizes_1_0.sh to compare with the frozen ILAB_*_SIZE_1_0 values of
 * today's inferlab/struct_size.h. Built against include-1.0 only.
 *
 * ilab_sampling_t and ilab_generate_request_t are not listed: the commit
 * that recorded the first layout (README.md) changed them before the record
 * froze them, so the 1.0 headers disagree with the record there. */
#include <stdio.h>

#include "inferlab/inferlab.h"

#define SIZE(type) printf("%s %zu\n", #type, sizeof(type))

int main(void)
{
    SIZE(ilab_plugin_entry_t);
    SIZE(ilab_host_t);
    SIZE(ilab_model_info_t);
    SIZE(ilab_batch_item_t);
    SIZE(ilab_backend_api_t);
    SIZE(ilab_event_t);
    return 0;
}
