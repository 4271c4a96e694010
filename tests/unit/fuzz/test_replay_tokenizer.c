/*
 * test_replay_tokenizer.c - replays tests/fuzz/corpus/tokenizer through the fuzz driver.
 */
#include "../../fuzz/fuzz_tokenizer.c"

#include "replay.h"

static void test_replay(void **state)
{
    assert_true(replay_corpus("tests/fuzz/corpus/tokenizer") > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replay),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
