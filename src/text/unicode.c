/* unicode.c — character classes from utf8proc, regex compilation with PCRE2 (see unicode.h).
 *
 * Owns: the mapping from Rust's char predicates (what Hugging Face tokenizers calls) to Unicode
 * general categories, and the Oniguruma -> PCRE2 regex rewrite.
 * Does not own: normalization forms (normalize.c calls utf8proc_map itself).
 *
 * White_Space is exactly Zs, Zl, Zp plus U+0009..U+000D and U+0085, so it is derived from
 * utf8proc's categories; the regex rewrite spells the same set out for PCRE2, whose \s (with
 * PCRE2_UCP) also matches U+180E, which Oniguruma's \s and Rust's is_whitespace do not.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <pthread.h>
#include <unicode/uchar.h>
#include <utf8proc.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/pretok.h"
#include "text/unicode.h"

int ob_strbuf_reserve(ob_strbuf *b, size_t extra) {
    if (b->cap - b->n >= extra) return 0;
    if (extra > SIZE_MAX / 4 - b->n) return -1;
    size_t cap = b->cap ? b->cap : 64;
    while (cap - b->n < extra) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

int ob_strbuf_put(ob_strbuf *b, const void *s, size_t n) {
    if (n == 0) return 0;
    if (ob_strbuf_reserve(b, n) != 0) return -1;
    memcpy(b->p + b->n, s, n);
    b->n += n;
    return 0;
}

int ob_strbuf_put_cp(ob_strbuf *b, int32_t cp) {
    char tmp[4];
    return ob_strbuf_put(b, tmp, ob_utf8_put(cp, tmp));
}

void ob_strbuf_free(ob_strbuf *b) {
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

size_t ob_utf8_next(const unsigned char *s, size_t n, int32_t *cp) {
    size_t l = ob_utf8_len(s, n);
    unsigned c = s[0];
    if (l == 1) { *cp = c < 0x80 ? (int32_t)c : -1 - (int32_t)c; return 1; }
    if (l == 2) *cp = (int32_t)(((c & 0x1Fu) << 6) | (s[1] & 0x3Fu));
    else if (l == 3) *cp = (int32_t)(((c & 0x0Fu) << 12) | ((s[1] & 0x3Fu) << 6) | (s[2] & 0x3Fu));
    else *cp = (int32_t)(((c & 0x07u) << 18) | ((s[1] & 0x3Fu) << 12) | ((s[2] & 0x3Fu) << 6) | (s[3] & 0x3Fu));
    return l;
}

size_t ob_utf8_put(int32_t cp, char *dst) {
    unsigned c = (unsigned)cp;
    if (c < 0x80) { dst[0] = (char)c; return 1; }
    if (c < 0x800) { dst[0] = (char)(0xC0 | (c >> 6)); dst[1] = (char)(0x80 | (c & 0x3F)); return 2; }
    if (c < 0x10000) {
        dst[0] = (char)(0xE0 | (c >> 12)); dst[1] = (char)(0x80 | ((c >> 6) & 0x3F));
        dst[2] = (char)(0x80 | (c & 0x3F));
        return 3;
    }
    dst[0] = (char)(0xF0 | (c >> 18)); dst[1] = (char)(0x80 | ((c >> 12) & 0x3F));
    dst[2] = (char)(0x80 | ((c >> 6) & 0x3F)); dst[3] = (char)(0x80 | (c & 0x3F));
    return 4;
}

static int cat(int32_t cp) {
    return cp < 0 || cp > 0x10FFFF ? -1 : (int)utf8proc_category(cp);
}

int ob_uni_is_whitespace(int32_t cp) {
    if (cp < 0) return 0;
    if ((cp >= 9 && cp <= 13) || cp == 0x85) return 1;
    int c = cat(cp);
    return c == UTF8PROC_CATEGORY_ZS || c == UTF8PROC_CATEGORY_ZL || c == UTF8PROC_CATEGORY_ZP;
}

int ob_uni_is_numeric(int32_t cp) {
    int c = cat(cp);
    return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}

static int is_letter(int c) { return c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO; }

/* Alphabetic is letters, Nl and Other_Alphabetic (mostly combining marks of scripts); utf8proc
 * has no Other_Alphabetic, so Mn/Mc stand in for it (only single_word added tokens look). */
int ob_uni_is_alnum(int32_t cp) {
    int c = cat(cp);
    return is_letter(c) || c == UTF8PROC_CATEGORY_MN || c == UTF8PROC_CATEGORY_MC || ob_uni_is_numeric(cp);
}

int ob_uni_is_word(int32_t cp) {
    int c = cat(cp);
    return is_letter(c) || (c >= UTF8PROC_CATEGORY_MN && c <= UTF8PROC_CATEGORY_ND) || c == UTF8PROC_CATEGORY_NL ||
           c == UTF8PROC_CATEGORY_PC || cp == 0x200C || cp == 0x200D;
}

int ob_uni_is_punct(int32_t cp) {
    if (cp >= 0 && cp < 0x80)
        return (cp >= 0x21 && cp <= 0x2F) || (cp >= 0x3A && cp <= 0x40) || (cp >= 0x5B && cp <= 0x60) ||
               (cp >= 0x7B && cp <= 0x7E);
    int c = cat(cp);
    return c >= UTF8PROC_CATEGORY_PC && c <= UTF8PROC_CATEGORY_PO;
}

/* unicode_categories' is_other, which Hugging Face's BertNormalizer calls, is Cc, Cf and Co:
 * unassigned code points (Cn) and surrogates are not in it. */
int ob_uni_is_other(int32_t cp) {
    int c = cat(cp);
    return c == UTF8PROC_CATEGORY_CC || c == UTF8PROC_CATEGORY_CF || c == UTF8PROC_CATEGORY_CO;
}

int ob_uni_is_mn(int32_t cp) { return cat(cp) == UTF8PROC_CATEGORY_MN; }

int ob_uni_assigned_by(int32_t cp, int major) {
    UVersionInfo v;
    if (cp < 0 || cp > 0x10FFFF) return 0;
    u_charAge(cp, v);
    return v[0] != 0 && v[0] <= major;
}

static int assigned_by_8(int32_t cp) { return ob_uni_assigned_by(cp, 8); }

int ob_uni8_is_punct(int32_t cp) {
    if (cp >= 0 && cp < 0x80) return ob_uni_is_punct(cp);
    return ob_uni_is_punct(cp) && assigned_by_8(cp);
}

int ob_uni8_is_other(int32_t cp) { return ob_uni_is_other(cp) && assigned_by_8(cp); }
int ob_uni8_is_mn(int32_t cp) { return ob_uni_is_mn(cp) && assigned_by_8(cp); }

int ob_uni_is_mark(int32_t cp) {
    int c = cat(cp);
    return c >= UTF8PROC_CATEGORY_MN && c <= UTF8PROC_CATEGORY_ME;
}

int ob_uni_lower(int32_t cp, int32_t out[2]) {
    /* The one unconditional multi-character lowercase mapping (SpecialCasing.txt). */
    if (cp == 0x130) { out[0] = 'i'; out[1] = 0x307; return 2; }
    out[0] = cp >= 0 ? utf8proc_tolower(cp) : cp;
    return 1;
}

/* ---- regexes ------------------------------------------------------------------------------ */

/* Characters utf8proc assigns and PCRE2 does not know: [n_newer] (code point, category). */
static struct { int32_t cp; uint8_t cat; } *newer;
static size_t n_newer;
static pthread_once_t newer_once = PTHREAD_ONCE_INIT;

static void newer_init(void) {
    /* All code points utf8proc assigns, back to back in one UTF-8 buffer; PCRE2's \p{Cn} then
     * finds the ones it does not know in a few thousand matches rather than one per code point. */
    int ec;
    PCRE2_SIZE eo;
    size_t n = 0, cap = 1 << 20, ncp = 0;
    char *buf = malloc(cap);
    int32_t *cps = malloc(sizeof *cps * 0x40000);
    uint32_t *offs = malloc(sizeof *offs * 0x40000);
    pcre2_code *cn = pcre2_compile((PCRE2_SPTR) "\\p{Cn}", PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
    pcre2_match_data *md = cn ? pcre2_match_data_create(1, NULL) : NULL;
    if (!buf || !cps || !offs || !md) goto done;
    (void)pcre2_jit_compile(cn, PCRE2_JIT_COMPLETE);
    for (int32_t cp = 0; cp <= 0x10FFFF && ncp < 0x40000; cp++) {
        if (cp == 0xD800) cp = 0xE000;
        int c = utf8proc_category(cp);
        if (c == UTF8PROC_CATEGORY_CN || c == UTF8PROC_CATEGORY_CO) continue;
        if (n + 4 > cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) goto done;
            buf = nb;
        }
        offs[ncp] = (uint32_t)n;
        cps[ncp++] = cp;
        n += ob_utf8_put(cp, buf + n);
    }
    size_t cap_new = 0;
    for (size_t pos = 0; pos < n;) {
        /* the buffer is valid UTF-8: no per-call check of all of it */
        if (pcre2_match(cn, (PCRE2_SPTR)buf, n, pos, PCRE2_NO_UTF_CHECK, md, NULL) < 0) break;
        size_t o = pcre2_get_ovector_pointer(md)[0];
        size_t lo = 0, hi = ncp;   /* the code point starting at o */
        while (hi - lo > 1) { size_t mid = (lo + hi) / 2; if (offs[mid] <= o) lo = mid; else hi = mid; }
        if (n_newer == cap_new) {
            cap_new = cap_new ? cap_new * 2 : 1024;
            void *nn = realloc(newer, cap_new * sizeof *newer);
            if (!nn) break;
            newer = nn;
        }
        newer[n_newer].cp = cps[lo];
        newer[n_newer].cat = (uint8_t)utf8proc_category(cps[lo]);
        n_newer++;
        pos = lo + 1 < ncp ? offs[lo + 1] : n;
    }
done:
    free(buf);
    free(cps);
    free(offs);
    pcre2_match_data_free(md);
    pcre2_code_free(cn);
}

/* Categories a \p{NAME} covers, as a bit set of utf8proc categories; 0 if NAME is not a general
 * category (a script name: left to PCRE2 alone). */
static uint32_t prop_cats(const char *name, size_t n) {
    static const char *const two[] = {"Cn", "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd",
                                      "Ps", "Pe", "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf"};
    if (n == 2) {
        for (uint32_t i = 1; i < sizeof two / sizeof *two; i++) if (memcmp(name, two[i], 2) == 0) return 1u << i;
        return 0;
    }
    if (n != 1) return 0;
    switch (name[0]) {
    case 'L': return 0x3Eu;          /* Lu..Lo */
    case 'M': return 0x1C0u;         /* Mn, Mc, Me */
    case 'N': return 0xE00u;         /* Nd, Nl, No */
    case 'P': return 0x7F000u;       /* Pc..Po */
    case 'S': return 0x780000u;      /* Sm..So */
    case 'Z': return 0x3800000u;     /* Zs, Zl, Zp */
    }
    return 0;
}

/* Appends the newer characters of the categories as class members (\x{..}-\x{..} ranges). */
static int put_newer(ob_strbuf *o, uint32_t cats) {
    pthread_once(&newer_once, newer_init);
    for (size_t i = 0; i < n_newer;) {
        if (!(cats & (1u << newer[i].cat))) { i++; continue; }
        size_t j = i;
        while (j + 1 < n_newer && newer[j + 1].cp == newer[j].cp + 1 && (cats & (1u << newer[j + 1].cat))) j++;
        char r[40];
        int k = snprintf(r, sizeof r, j > i ? "\\x{%X}-\\x{%X}" : "\\x{%X}", (unsigned)newer[i].cp, (unsigned)newer[j].cp);
        if (ob_strbuf_put(o, r, (size_t)k)) return -1;
        i = j + 1;
    }
    return 0;
}

#define WS_CLASS "\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

static int rewrite(const char *p, size_t n, ob_strbuf *o) {
    int in_class = 0;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c == '\\' && i + 1 < n) {
            char d = p[i + 1];
            int r = 0;
            if ((d == 'p' || d == 'P') && i + 2 < n) {
                /* \pX or \p{NAME}: widened with the characters PCRE2's tables lack */
                size_t nb = 1, ne = i + 3;
                const char *nm = p + i + 2;
                if (p[i + 2] == '{') {
                    nm++;
                    size_t e = i + 3;
                    while (e < n && p[e] != '}') e++;
                    nb = e - (i + 3);
                    ne = e + 1;
                }
                uint32_t cats = ne <= n && nm[0] != '^' ? prop_cats(nm, nb) : 0;
                if (cats && (d == 'p' || !in_class)) {
                    int neg = d == 'P';
                    r = (!in_class && ob_strbuf_put(o, neg ? "[^" : "[", neg ? 2 : 1)) || ob_strbuf_put(o, "\\p{", 3) ||
                        ob_strbuf_put(o, nm, nb) || ob_strbuf_put(o, "}", 1) || put_newer(o, cats) ||
                        (!in_class && ob_strbuf_put(o, "]", 1));
                    if (r) return -1;
                    i = ne - 1;
                    continue;
                }
            }
            if (d == 's') r = in_class ? ob_strbuf_put(o, WS_CLASS, strlen(WS_CLASS)) : ob_strbuf_put(o, "[" WS_CLASS "]", strlen(WS_CLASS) + 2);
            else if (d == 'S' && !in_class) r = ob_strbuf_put(o, "[^" WS_CLASS "]", strlen(WS_CLASS) + 3);
            else r = ob_strbuf_put(o, p + i, 2);
            if (r) return -1;
            i++;
            continue;
        }
        if (c == '[' && !in_class) {
            in_class = 1;
            if (ob_strbuf_put(o, p + i, 1)) return -1;
            /* a ']' right after '[' or '[^' is a literal member */
            if (i + 1 < n && p[i + 1] == '^') { if (ob_strbuf_put(o, "^", 1)) return -1; i++; }
            if (i + 1 < n && p[i + 1] == ']') { if (ob_strbuf_put(o, "\\]", 2)) return -1; i++; }
            continue;
        }
        if (c == ']' && in_class) in_class = 0;
        if (ob_strbuf_put(o, &c, 1)) return -1;
    }
    return 0;
}

void *ob_regex_compile(const char *pattern, size_t len, int literal, char *err, size_t errlen) {
    ob_strbuf b = {0};
    int ec = 0;
    PCRE2_SIZE eo = 0;
    uint32_t opt = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF;
    if (literal) {
        /* PCRE2_LITERAL does not combine with PCRE2_MATCH_INVALID_UTF: escape instead */
        for (size_t i = 0; i < len; i++) {
            unsigned char ch = (unsigned char)pattern[i];
            int plain = ch >= 0x80 || (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
            char esc[8];
            int k = plain ? (esc[0] = (char)ch, 1) : ch < 0x20 || ch == 0x7F ? snprintf(esc, sizeof esc, "\\x{%x}", ch)
                                                                              : (esc[0] = '\\', esc[1] = (char)ch, 2);
            if (ob_strbuf_put(&b, esc, (size_t)k)) { ob_strbuf_free(&b); snprintf(err, errlen, "regex: out of memory"); return NULL; }
        }
    } else if (rewrite(pattern, len, &b) != 0) {
        ob_strbuf_free(&b);
        snprintf(err, errlen, "regex: out of memory");
        return NULL;
    }
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)(b.p ? b.p : ""), b.n, opt, &ec, &eo, NULL);
    ob_strbuf_free(&b);
    if (!re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(ec, msg, sizeof msg);
        snprintf(err, errlen, "regex '%.80s': %s (offset %zu)", pattern, (const char *)msg, (size_t)eo);
        return NULL;
    }
    /* JIT is an optimisation only: where it is unavailable the interpreter runs. */
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    return re;
}

void ob_regex_free(void *re) { pcre2_code_free(re); }
void *ob_regex_md_new(void) { return pcre2_match_data_create(1, NULL); }
void ob_regex_md_free(void *md) { pcre2_match_data_free(md); }

int ob_regex_find(const void *re, void *md, const char *s, size_t n, size_t pos, size_t *ms, size_t *me) {
    int rc = pcre2_match(re, (PCRE2_SPTR)s, n, pos, 0, md, NULL);
    /* The JIT's default stack is small; the interpreter keeps its frames on the heap. */
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) rc = pcre2_match(re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_JIT, md, NULL);
    if (rc == PCRE2_ERROR_NOMATCH) return 0;
    if (rc < 0) return -1;
    const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    if (ov[0] < pos || ov[1] < ov[0] || ov[1] > n) return -1;
    *ms = ov[0];
    *me = ov[1];
    return 1;
}
