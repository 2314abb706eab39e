/* assigned.c — prints the code point ranges utf8proc (the Unicode version the C side knows)
 * assigns, as JSON [[first, last], ...], for random_compare.js: its arbitrary code points are
 * drawn among these, because characters newer than the system's Unicode tables are a known
 * difference (docs/tokenizers.md). Built by random_compare.js with cc ... -lutf8proc. */
#include <stdio.h>
#include <utf8proc.h>

int main(void) {
    int first = -1, n = 0;
    printf("[");
    for (int cp = 0; cp <= 0x110000; cp++) {
        int ok = cp <= 0x10FFFF && (cp < 0xD800 || cp > 0xDFFF) && utf8proc_category(cp) != UTF8PROC_CATEGORY_CN;
        if (ok && first < 0) first = cp;
        if (!ok && first >= 0) { printf("%s[%d,%d]", n++ ? "," : "", first, cp - 1); first = -1; }
    }
    printf("]\n");
    return 0;
}
