/*
 * CPU lists in list form: the forms sysfs and the topology files give, and what is refused.
 */
#include "util/util_cpus.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

static void test_lists(void **state)
{
    cpu_set_t set;

    (void)state;
    assert_int_equal(util_cpus_parse("0-3,8,10-11\n", &set), STRATA_OK);
    assert_int_equal(CPU_COUNT(&set), 7);
    assert_true(CPU_ISSET(0, &set) && CPU_ISSET(3, &set) && CPU_ISSET(8, &set));
    assert_true(CPU_ISSET(10, &set) && CPU_ISSET(11, &set));
    assert_false(CPU_ISSET(4, &set) || CPU_ISSET(9, &set) || CPU_ISSET(12, &set));
    assert_int_equal(util_cpus_parse("5", &set), STRATA_OK);
    assert_int_equal(CPU_COUNT(&set), 1);
    assert_true(CPU_ISSET(5, &set));
    assert_int_equal(util_cpus_parse("0-1, 4", &set), STRATA_OK);
    assert_int_equal(CPU_COUNT(&set), 3);
}

static void test_refused(void **state)
{
    static const char *const bad[] = {"", ",", "3-1", "1-", "-1", "a", "1,,2", "1-2x",
                                      "99999999", "0-99999999", "1 2"};
    cpu_set_t set;

    (void)state;
    CPU_ZERO(&set);
    CPU_SET(7, &set);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
        assert_int_equal(util_cpus_parse(bad[i], &set), STRATA_ERR_INVALID);
    }
    assert_int_equal(util_cpus_parse(NULL, &set), STRATA_ERR_INVALID);
    assert_int_equal(CPU_COUNT(&set), 1); /* untouched on failure */
    assert_true(CPU_ISSET(7, &set));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lists),
        cmocka_unit_test(test_refused),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
