/*
 * What a C compiler makes of the public structs and enums the Python package mirrors: one
 * line per struct ("struct NAME SIZE"), per field ("field NAME FIELD OFFSET SIZE") and per
 * constant ("const NAME VALUE"), for test_abi.py to compare with the ctypes ones.
 */
#include <strata/strata.h>

#include <stddef.h>
#include <stdio.h>

#define STRUCT(type) printf("struct %s %zu\n", #type, sizeof(type))
#define FIELD(type, field) \
    printf("field %s %s %zu %zu\n", #type, #field, offsetof(type, field), \
           sizeof(((type *)0)->field))
#define CONST(name) printf("const %s %lld\n", #name, (long long)(name))

static void print_structs(void)
{
    STRUCT(strata_config_t);
    FIELD(strata_config_t, field_mask);
    FIELD(strata_config_t, log_level);
    FIELD(strata_config_t, topo_file);
    FIELD(strata_config_t, node_name);
    FIELD(strata_config_t, gpu);

    STRUCT(strata_moe_params_t);
    FIELD(strata_moe_params_t, num_experts);
    FIELD(strata_moe_params_t, topk);
    FIELD(strata_moe_params_t, hidden);
    FIELD(strata_moe_params_t, dtype);
    FIELD(strata_moe_params_t, combine_dtype);
    FIELD(strata_moe_params_t, max_tokens);
    FIELD(strata_moe_params_t, capacity);
    FIELD(strata_moe_params_t, expert_alignment);
    FIELD(strata_moe_params_t, route);
    FIELD(strata_moe_params_t, mode);
    FIELD(strata_moe_params_t, mode_file);
    FIELD(strata_moe_params_t, combine);
    FIELD(strata_moe_params_t, exchange);
    FIELD(strata_moe_params_t, receive);

    STRUCT(strata_moe_source_t);
    FIELD(strata_moe_source_t, rank);
    FIELD(strata_moe_source_t, token);
    FIELD(strata_moe_source_t, slot);

    STRUCT(strata_moe_recv_t);
    FIELD(strata_moe_recv_t, num_local_experts);
    FIELD(strata_moe_recv_t, first_expert);
    FIELD(strata_moe_recv_t, capacity);
    FIELD(strata_moe_recv_t, row_bytes);
    FIELD(strata_moe_recv_t, y_row_bytes);
    FIELD(strata_moe_recv_t, count);
    FIELD(strata_moe_recv_t, x);
    FIELD(strata_moe_recv_t, x_scales);
    FIELD(strata_moe_recv_t, scale_stride);
    FIELD(strata_moe_recv_t, src);
    FIELD(strata_moe_recv_t, expert_y);

    STRUCT(strata_moe_stats_t);
    FIELD(strata_moe_stats_t, steps);
    FIELD(strata_moe_stats_t, route);
    FIELD(strata_moe_stats_t, num_local_experts);
    FIELD(strata_moe_stats_t, tokens_per_expert);
    FIELD(strata_moe_stats_t, pull_mask);
    FIELD(strata_moe_stats_t, tokens_to_nodes);
    FIELD(strata_moe_stats_t, tokens_round_two);
    FIELD(strata_moe_stats_t, bytes_to_nodes);
    FIELD(strata_moe_stats_t, dispatch_ns);
    FIELD(strata_moe_stats_t, combine_ns);
    FIELD(strata_moe_stats_t, phase_ns);
    FIELD(strata_moe_stats_t, host_copied_bytes);
    FIELD(strata_moe_stats_t, net_bounce);
    FIELD(strata_moe_stats_t, commands_posted);
    FIELD(strata_moe_stats_t, post_delay_ns);
    FIELD(strata_moe_stats_t, memory);
    FIELD(strata_moe_stats_t, exchange);
    FIELD(strata_moe_stats_t, exchange_rounds);

    STRUCT(strata_moe_memory_t);
    FIELD(strata_moe_memory_t, expert_rows);
    FIELD(strata_moe_memory_t, node_rows);
    FIELD(strata_moe_memory_t, net_headers);
    FIELD(strata_moe_memory_t, net_round_one);
    FIELD(strata_moe_memory_t, net_round_two);
    FIELD(strata_moe_memory_t, net_staging);
    FIELD(strata_moe_memory_t, net_returns);
    FIELD(strata_moe_memory_t, work_ring);
    FIELD(strata_moe_memory_t, tables);
    FIELD(strata_moe_memory_t, total);
}

static void print_statuses(void)
{
    CONST(STRATA_OK);
    CONST(STRATA_INPROGRESS);
    CONST(STRATA_ERR_INVALID);
    CONST(STRATA_ERR_NO_MEMORY);
    CONST(STRATA_ERR_UNSUPPORTED);
    CONST(STRATA_ERR_TIMEOUT);
    CONST(STRATA_ERR_CANCELLED);
    CONST(STRATA_ERR_NOT_FOUND);
    CONST(STRATA_ERR_IO);
    CONST(STRATA_ERR_INTERNAL);
    CONST(STRATA_ERR_BUSY);
    CONST(STRATA_ERR_PEER_FAILED);
    CONST(STRATA_ERR_TRANSPORT);
    CONST(STRATA_ERR_BOOTSTRAP);
    CONST(STRATA_ERR_PARSE);
    CONST(STRATA_ERR_TOPOLOGY);
    CONST(STRATA_ERR_CONFIG);
    CONST(STRATA_ERR_CAPACITY);
    CONST(STRATA_ERR_LAST);
}

static void print_enums(void)
{
    CONST(STRATA_DTYPE_BF16);
    CONST(STRATA_DTYPE_FP16);
    CONST(STRATA_DTYPE_FP32);
    CONST(STRATA_DTYPE_FP8_E4M3);
    CONST(STRATA_LOG_LEVEL_ERROR);
    CONST(STRATA_LOG_LEVEL_WARN);
    CONST(STRATA_LOG_LEVEL_INFO);
    CONST(STRATA_LOG_LEVEL_DEBUG);
    CONST(STRATA_LOG_LEVEL_TRACE);
    CONST(STRATA_CONFIG_FIELD_LOG_LEVEL);
    CONST(STRATA_CONFIG_FIELD_TOPO_FILE);
    CONST(STRATA_CONFIG_FIELD_NODE_NAME);
    CONST(STRATA_CONFIG_FIELD_GPU);
    CONST(STRATA_MOE_ROUTE_DEFAULT);
    CONST(STRATA_MOE_ROUTE_FLAT);
    CONST(STRATA_MOE_ROUTE_HIERARCHICAL);
    CONST(STRATA_MOE_MODE_DEFAULT);
    CONST(STRATA_MOE_MODE_PUSH);
    CONST(STRATA_MOE_MODE_PULL);
    CONST(STRATA_MOE_MODE_ADAPTIVE);
    CONST(STRATA_MOE_MODE_FIXED);
    CONST(STRATA_MOE_COMBINE_DEFAULT);
    CONST(STRATA_MOE_COMBINE_EXACT);
    CONST(STRATA_MOE_COMBINE_NODE_REDUCE);
    CONST(STRATA_MOE_EXCHANGE_DEFAULT);
    CONST(STRATA_MOE_EXCHANGE_WORST_CASE);
    CONST(STRATA_MOE_EXCHANGE_STREAMED);
    CONST(STRATA_MOE_PHASE_PACK);
    CONST(STRATA_MOE_PHASE_DISPATCH_WAIT);
    CONST(STRATA_MOE_PHASE_INTRA_DISPATCH);
    CONST(STRATA_MOE_PHASE_COMBINE_KERNEL);
    CONST(STRATA_MOE_PHASE_COMBINE_WAIT);
    CONST(STRATA_MOE_PHASE_REDUCE);
    CONST(STRATA_MOE_PHASES);
    CONST(STRATA_VERSION_MAJOR);
    CONST(STRATA_VERSION_MINOR);
}

int main(void)
{
    print_structs();
    print_statuses();
    print_enums();
    return 0;
}
