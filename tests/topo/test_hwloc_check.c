/*
 * hwloc XML that libhwloc's importer would crash or leak on is refused before hwloc reads
 * it, naming the file, the line and the broken rule: one small file per rule in
 * fixtures/hostile (line 2 says what to expect), and the reproducers of real crashes in
 * $STRATA_TEST_BAD_INPUTS_DIR/hwloc-xml (skipped when the folder is absent).
 */
#include "topo/topo.h"

#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#define EXPECT_MARK "<!-- expect: "

/* Line 2 of a hostile fixture: "<!-- expect: OK -->" or "<!-- expect: LINE: reason -->". */
static void read_expectation(const char *path, char *expect, size_t size)
{
    char line[512] = "";
    FILE *file = fopen(path, "r");
    char *end;

    assert_non_null(file);
    for (int i = 0; i < 2; ++i) {
        if (fgets(line, sizeof(line), file) == NULL) {
            line[0] = '\0';
        }
    }
    fclose(file);
    if (strncmp(line, EXPECT_MARK, strlen(EXPECT_MARK)) != 0 ||
        (end = strstr(line, " -->")) == NULL) {
        fail_msg("%s: line 2 is not '" EXPECT_MARK "... -->'", path);
    }
    *end = '\0';
    snprintf(expect, size, "%s", line + strlen(EXPECT_MARK));
}

static void check_hostile(const char *path)
{
    char expect[512], needle[1200], err[UTIL_REASON_LEN] = "";
    const char *reason;
    topo_t *topo = NULL;
    strata_status_t status;

    read_expectation(path, expect, sizeof(expect));
    status = topo_load_file(path, &topo, err);
    if (strcmp(expect, "OK") == 0) {
        if (status != STRATA_OK) {
            fail_msg("%s should load: %s", path, err);
        }
        assert_true(topo_num_numa(topo) == 1 && topo_num_gpus(topo) == 1);
        topo_destroy(topo);
        return;
    }
    reason = strstr(expect, ": ");
    assert_non_null(reason);
    snprintf(needle, sizeof(needle), "%s:%.*s: invalid hwloc XML: %s", path,
             (int)(reason - expect), expect, reason + 2);
    if (status != STRATA_ERR_PARSE || strstr(err, needle) == NULL || strchr(err, '\n')) {
        fail_msg("%s: status %d, error '%s'\n  wanted '%s'", path, status, err, needle);
    }
    assert_null(topo);
}

static int for_each_xml(const char *dir, void (*check)(const char *path))
{
    char path[1024];
    struct dirent *entry;
    int count = 0;
    DIR *d = opendir(dir);

    if (d == NULL) {
        return -1;
    }
    while ((entry = readdir(d)) != NULL) {
        size_t n = strlen(entry->d_name);

        if (n < 4 || strcmp(entry->d_name + n - 4, ".xml") != 0) {
            continue;
        }
        if (snprintf(path, sizeof(path), "%s/%s", dir, entry->d_name) >= (int)sizeof(path)) {
            fail_msg("%s/%s: path too long", dir, entry->d_name);
        }
        check(path);
        ++count;
    }
    closedir(d);
    return count;
}

static void test_hostile_fixtures(void **state)
{
    int count;

    (void)state;
    count = for_each_xml(STRATA_TEST_FIXTURES "/hostile", check_hostile);
    print_message("%d hostile hwloc XML files checked\n", count);
    assert_true(count >= 30);
}

/* A reproducer of a crash or leak inside hwloc: refused, with the file and a line. */
static void check_bad_input(const char *path)
{
    char err[UTIL_REASON_LEN] = "", needle[1100];
    topo_t *topo = NULL;
    strata_status_t status = topo_load_file(path, &topo, err);

    snprintf(needle, sizeof(needle), "%s:", path);
    if (status != STRATA_ERR_PARSE || strncmp(err, needle, strlen(needle)) != 0 ||
        strstr(err, "invalid hwloc XML: ") == NULL) {
        fail_msg("%s: status %d, error '%s'", path, status, err);
    }
    print_message("%s\n", err);
    assert_null(topo);
}

static void test_bad_inputs(void **state)
{
    const char *dir = getenv("STRATA_TEST_BAD_INPUTS_DIR");
    char sub[1024];
    int count;

    (void)state;
    snprintf(sub, sizeof(sub), "%s/hwloc-xml", dir ? dir : "");
    if (dir == NULL || (count = for_each_xml(sub, check_bad_input)) < 0) {
        print_message("bad inputs not found (STRATA_TEST_BAD_INPUTS_DIR=%s)\n",
                      dir ? dir : "unset");
        skip();
        return;
    }
    assert_true(count > 0);
}

/* "bad-inputs" runs only the reproducers, a test of its own that CTest may see skipped. */
int main(int argc, char **argv)
{
    const struct CMUnitTest fixtures[] = {cmocka_unit_test(test_hostile_fixtures)};
    const struct CMUnitTest bad_inputs[] = {cmocka_unit_test(test_bad_inputs)};

    if (argc > 1 && strcmp(argv[1], "bad-inputs") == 0) {
        return cmocka_run_group_tests(bad_inputs, NULL, NULL);
    }
    return cmocka_run_group_tests(fixtures, NULL, NULL);
}
