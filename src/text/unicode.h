/* unicode.h — the Unicode facts the tokenizer pipeline needs, from utf8proc and PCRE2.
 *
 * Owns: UTF-8 stepping, the character classes Hugging Face tokenizers asks Rust for
 * (char::is_whitespace, is_numeric, is_alphanumeric, unicode_categories' is_punctuation, ...),
 * expressed through utf8proc's general categories (no hand-made tables), full lowercase mapping,
 * a growable byte buffer, and compiling a tokenizer.json regex (written for Oniguruma) with PCRE2.
 * Does not own: what a pipeline step does with them (normalize.c, prechain.c).
 */
#ifndef OB_UNICODE_H
#define OB_UNICODE_H

#include <stddef.h>
#include <stdint.h>

/* A growable byte buffer; {0} is empty. */
typedef struct {
    char *p;
    size_t n, cap;
} ob_strbuf;

int ob_strbuf_reserve(ob_strbuf *b, size_t extra);            /* 0 or -1 (out of memory) */
int ob_strbuf_put(ob_strbuf *b, const void *s, size_t n);     /* appends; 0 or -1 */
int ob_strbuf_put_cp(ob_strbuf *b, int32_t cp);               /* appends the UTF-8 of cp; 0 or -1 */
void ob_strbuf_free(ob_strbuf *b);

/* Decodes the character at s (n >= 1 bytes). Returns its length (1..4) and sets *cp; an invalid
 * byte is returned as length 1 with *cp = -1 - byte (so callers can pass it through). */
size_t ob_utf8_next(const unsigned char *s, size_t n, int32_t *cp);
/* UTF-8 of cp into dst (4 bytes room). Returns the length. */
size_t ob_utf8_put(int32_t cp, char *dst);

/* Character classes, for valid code points (a negative cp, an invalid byte, is in none). */
int ob_uni_is_whitespace(int32_t cp);   /* White_Space (Rust char::is_whitespace) */
int ob_uni_is_numeric(int32_t cp);      /* Nd, Nl, No (char::is_numeric) */
int ob_uni_is_alnum(int32_t cp);        /* letters, marks of letters, numbers (char::is_alphanumeric) */
int ob_uni_is_word(int32_t cp);         /* regex \w: letters, marks, Nd, Pc, joiners */
int ob_uni_is_punct(int32_t cp);        /* P* or ASCII punctuation (BERT's is_punctuation) */
int ob_uni_is_other(int32_t cp);        /* Cc, Cf, Co (unicode_categories is_other) */
int ob_uni_is_mn(int32_t cp);           /* Mn */
int ob_uni_is_mark(int32_t cp);         /* Mn, Mc, Me */
/* Nonzero if cp was assigned in Unicode major.x or earlier (ICU's u_charAge). */
int ob_uni_assigned_by(int32_t cp, int major);
/* The same tests as of Unicode 8.0 (the unicode_categories crate Hugging Face's BERT pieces use). */
int ob_uni8_is_punct(int32_t cp);
int ob_uni8_is_other(int32_t cp);
int ob_uni8_is_mn(int32_t cp);
/* Full lowercase mapping of one character (Rust char::to_lowercase): writes 1 or 2 code points. */
int ob_uni_lower(int32_t cp, int32_t out[2]);

/* Compiles a regex written for Oniguruma (as tokenizer.json carries it) with PCRE2 (UTF, UCP,
 * invalid UTF-8 unmatchable), rewriting \s and \S to Unicode White_Space (PCRE2's \s also takes
 * U+180E). literal: the pattern is a plain string to find. Returns the pcre2_code (as void *: the
 * header stays free of pcre2.h) or NULL with err naming the problem. */
void *ob_regex_compile(const char *pattern, size_t len, int literal, char *err, size_t errlen);
void ob_regex_free(void *re);

/* Finds matches of re in s[0, n) from pos: returns 1 and sets [*ms, *me), 0 when none, -1 on
 * error. md: a pcre2_match_data from ob_regex_md_new (one per thread). */
void *ob_regex_md_new(void);
void ob_regex_md_free(void *md);
int ob_regex_find(const void *re, void *md, const char *s, size_t n, size_t pos, size_t *ms, size_t *me);

#endif
