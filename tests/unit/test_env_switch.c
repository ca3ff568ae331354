/* test_env_switch.c - lz_env_int and lz_env_int_in: the default when unset or empty, whole numbers in
 * range (or in the list), and an error naming the variable for anything else. */
#include <stdlib.h> // setenv, unsetenv

#include "env_switch.h" // the code under test
#include "test_util.h"  // CHECK, CHECK_FAILS_WITH, lz_test_finish

static int read_as(const char *value, int lo, int hi, int def, lz_status *status) {
    if (value)
        setenv("LIZARD_TEST_SWITCH", value, 1);
    else
        unsetenv("LIZARD_TEST_SWITCH");
    int v = -12345;
    *status = lz_env_int("LIZARD_TEST_SWITCH", lo, hi, def, &v);
    return v;
}

int main(void) {
    lz_status s;
    CHECK(read_as(NULL, 1, 8, 4, &s) == 4 && s == LZ_OK);
    CHECK(read_as("", 1, 8, 4, &s) == 4 && s == LZ_OK);
    CHECK(read_as("1", 1, 8, 4, &s) == 1 && s == LZ_OK);
    CHECK(read_as("8", 1, 8, 4, &s) == 8 && s == LZ_OK);
    CHECK(read_as("-3", -5, 8, 4, &s) == -3 && s == LZ_OK);
    static const char *const bad[] = {"0", "9", "x", "2x", "1.5", " ", "99999999999999999999", "-"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        setenv("LIZARD_TEST_SWITCH", bad[i], 1);
        int v = 0;
        CHECK_FAILS_WITH(lz_env_int("LIZARD_TEST_SWITCH", 1, 8, 4, &v), LZ_ERR_INPUT, "LIZARD_TEST_SWITCH=");
        CHECK_MSG(v == 4, "%s gave %d, not the default", bad[i], v);
    }
    setenv("LIZARD_TEST_SWITCH", "12", 1);
    int v = 0;
    CHECK_FAILS_WITH(lz_env_int("LIZARD_TEST_SWITCH", 1, 8, 4, &v), LZ_ERR_INPUT, "from 1 to 8");
    // lz_env_int_in: only the listed values
    static const int allowed[] = {1, 2, 4};
    unsetenv("LIZARD_TEST_SWITCH");
    CHECK(lz_env_int_in("LIZARD_TEST_SWITCH", allowed, 3, 4, &v) == LZ_OK && v == 4);
    setenv("LIZARD_TEST_SWITCH", "2", 1);
    CHECK(lz_env_int_in("LIZARD_TEST_SWITCH", allowed, 3, 4, &v) == LZ_OK && v == 2);
    static const char *const not_listed[] = {"3", "0", "x", "2x", "99999999999999999999"};
    for (size_t i = 0; i < sizeof not_listed / sizeof *not_listed; i++) {
        setenv("LIZARD_TEST_SWITCH", not_listed[i], 1);
        v = 0;
        CHECK_FAILS_WITH(lz_env_int_in("LIZARD_TEST_SWITCH", allowed, 3, 4, &v), LZ_ERR_INPUT, "expected one of 1, 2, 4");
        CHECK_MSG(v == 4, "%s gave %d, not the default", not_listed[i], v);
    }
    return lz_test_finish("test_env_switch");
}
