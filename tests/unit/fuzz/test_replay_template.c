/*
 * test_replay_template.c - replays tests/fuzz/corpus/template through the fuzz driver.
 */
#include "../../fuzz/fuzz_template.c"

#include "replay.h"

static void test_replay(void **state)
{
    assert_true(replay_corpus("tests/fuzz/corpus/template") > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replay),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
