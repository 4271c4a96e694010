/*
 * str.c - small string measures shared by the modules that suggest a name for a
 * mistyped one (the hub's aliases, the CLI's config keys).
 */
#include "base.h"

#include <ctype.h>
#include <string.h>

int rp_str_distance(const char *a, const char *b)
{
    int la = (int)strnlen(a, 63), lb = (int)strnlen(b, 63);
    int d[64][64];
    for (int i = 0; i <= la; i++)
        d[i][0] = i;
    for (int j = 0; j <= lb; j++)
        d[0][j] = j;
    for (int i = 1; i <= la; i++)
        for (int j = 1; j <= lb; j++) {
            int x = tolower((unsigned char)a[i - 1]), y = tolower((unsigned char)b[j - 1]);
            int best = d[i - 1][j - 1] + (x != y);
            if (d[i - 1][j] + 1 < best)
                best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best)
                best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && x == tolower((unsigned char)b[j - 2]) && tolower((unsigned char)a[i - 2]) == y &&
                d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[la][lb];
}
