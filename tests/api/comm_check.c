/*
 * Run under strata-run: every rank bootstraps from the launcher's environment, creates a
 * communicator and checks the node and local-rank layout against what the launcher set.
 * With --die RANK, that rank exits after creation and the others must see the bootstrap
 * fail (not hang) and exit 0. Prints one line per rank; exit 0 on success.
 */
#include <strata/strata.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK(cond, ...) \
    do { \
        if (!(cond)) { \
            fprintf(stderr, "comm_check: " __VA_ARGS__); \
            fprintf(stderr, "\n"); \
            exit(1); \
        } \
    } while (0)

static int env_int(const char *name)
{
    const char *value = getenv(name);

    CHECK(value != NULL, "%s is not set", name);
    return atoi(value);
}

int main(int argc, char **argv)
{
    int die = (argc == 3 && strcmp(argv[1], "--die") == 0) ? atoi(argv[2]) : -1;
    strata_bootstrap_t *bs;
    strata_comm_t *comm;
    strata_status_t status;
    int rank, size, local_size, expect_nodes, *all;

    status = strata_bootstrap_from_env(&bs);
    CHECK(status == STRATA_OK, "bootstrap: %s", strata_status_string(status));
    status = strata_comm_create(NULL, bs, &comm);
    CHECK(status == STRATA_OK, "comm_create: %s", strata_status_string(status));

    rank       = strata_comm_rank(comm);
    size       = strata_comm_size(comm);
    local_size = env_int("LOCAL_WORLD_SIZE");
    expect_nodes = getenv("STRATA_NODE_NAME") ? size / local_size : 1;
    CHECK(rank == env_int("RANK") && size == env_int("WORLD_SIZE"), "rank %d of %d", rank, size);
    CHECK(strata_comm_num_nodes(comm) == expect_nodes, "%d nodes, expected %d",
          strata_comm_num_nodes(comm), expect_nodes);
    if (expect_nodes > 1) {
        CHECK(strata_comm_local_rank(comm) == env_int("LOCAL_RANK"), "local rank %d",
              strata_comm_local_rank(comm));
        CHECK(strata_comm_local_size(comm) == local_size, "local size %d",
              strata_comm_local_size(comm));
        CHECK(strata_comm_node(comm) == rank / local_size, "node %d", strata_comm_node(comm));
    }
    CHECK(strata_comm_node_rank(comm, strata_comm_node(comm), strata_comm_local_rank(comm)) ==
              rank, "node_rank does not map back");

    if (rank == die) {
        _exit(3); /* gone without a word, as a crashed rank is */
    }
    all = calloc((size_t)size, sizeof(int));
    status = bs->allgather(bs->ctx, &rank, all, sizeof(int));
    if (die >= 0) {
        CHECK(status != STRATA_OK, "allgather succeeded although rank %d died", die);
        printf("rank %d saw rank %d's death: %s\n", rank, die, strata_status_string(status));
    } else {
        CHECK(status == STRATA_OK, "allgather: %s", strata_status_string(status));
        for (int r = 0; r < size; ++r) {
            CHECK(all[r] == r, "allgather slot %d holds %d", r, all[r]);
        }
        printf("rank %d of %d: node %d of %d, local rank %d of %d, device %s\n", rank, size,
               strata_comm_node(comm), strata_comm_num_nodes(comm), strata_comm_local_rank(comm),
               strata_comm_local_size(comm), strata_comm_device_backend(comm));
    }
    free(all);
    strata_comm_destroy(comm);
    strata_bootstrap_destroy(bs);
    return 0;
}
