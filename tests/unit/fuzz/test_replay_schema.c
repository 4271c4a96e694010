/*
 * test_replay_schema.c - replays tests/fuzz/corpus/schema through the fuzz driver.
 */
#include "../../fuzz/fuzz_schema.c"

#include "replay.h"

static void test_replay(void **state)
{
    assert_true(replay_corpus("tests/fuzz/corpus/schema") > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replay),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
