/*
 * test_replay_gguf.c - replays tests/fuzz/corpus/gguf through the fuzz driver.
 */
#include "../../fuzz/fuzz_gguf.c"

#include "replay.h"

static void test_replay(void **state)
{
    assert_true(replay_corpus("tests/fuzz/corpus/gguf") > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replay),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
