/*
 * test_replay_safetensors.c - replays tests/fuzz/corpus/safetensors through the fuzz driver.
 */
#include "../../fuzz/fuzz_safetensors.c"

#include "replay.h"

static void test_replay(void **state)
{
    assert_true(replay_corpus("tests/fuzz/corpus/safetensors") > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replay),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
