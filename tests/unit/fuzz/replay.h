/*
 * replay.h - runs a libFuzzer driver's seed corpus through the driver in the
 * normal test build (so CI replays every corpus file, including any crash
 * reproducer added to it, under ASan+UBSan without needing clang's libFuzzer).
 * Include after the driver's .c file; call replay_corpus("tests/fuzz/corpus/<name>").
 */
#ifndef RP_REPLAY_H
#define RP_REPLAY_H

#include "test_util.h"

#include <dirent.h>

static inline int replay_corpus(const char *rel)
{
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", rp_test_source(rel));
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char file[8192];
        snprintf(file, sizeof(file), "%s/%s", dir, e->d_name);
        FILE *f = fopen(file, "rb");
        assert_non_null(f);
        static uint8_t buf[1 << 20];
        size_t len = fread(buf, 1, sizeof(buf), f);
        fclose(f);
        LLVMFuzzerTestOneInput(buf, len);
        n++;
    }
    closedir(d);
    return n;
}

#endif
