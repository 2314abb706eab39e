/* tokenizer_spec.h — building a tokenizer from a plain description of its vocabulary.
 *
 * Owns: ob_tokenizer_spec, the source-neutral description every loader fills (the GGUF loader
 * in tokenizer.c today; a tokenizer.json loader later), and ob_tokenizer_build, which turns it
 * into an ob_tokenizer_t. The builder copies everything it keeps, so the spec's arrays may be
 * freed (or the GGUF file closed) right after it returns.
 * Does not own: reading any file format, or naming file keys in errors about values a loader
 * checked (the loader validates what it reads and names its keys; the builder reports what
 * only it can see, such as a regex that does not compile).
 */
#ifndef OB_TOKENIZER_SPEC_H
#define OB_TOKENIZER_SPEC_H

#include <stddef.h>
#include <stdint.h>

#include "onebit.h"

typedef enum {
    OB_TOK_MODEL_BPE = 1,   /* byte-level BPE (GPT-2 bytes_to_unicode alphabet, ranked merges) */
    OB_TOK_MODEL_SPM = 2,   /* SentencePiece BPE: U+2581 for spaces, merge by score, <0xXX> bytes */
    OB_TOK_MODEL_HF_BPE = 3, /* Hugging Face BPE over characters: ranked merges, byte fallback, unk */
    OB_TOK_MODEL_WORDPIECE = 4, /* greedy longest-match-first with a continuation prefix ("##") */
} ob_tok_model;

/* GGUF token types (gguf-py TokenType). */
enum {
    OB_TOKTYPE_UNDEFINED = 0,
    OB_TOKTYPE_NORMAL = 1,
    OB_TOKTYPE_UNKNOWN = 2,
    OB_TOKTYPE_CONTROL = 3,
    OB_TOKTYPE_USER_DEFINED = 4,
    OB_TOKTYPE_UNUSED = 5,
    OB_TOKTYPE_BYTE = 6,
};

#define OB_TOK_MAX_EXTRA_EOG 8
#define OB_TOK_MAX_POST 8

/* Flags of tokenizer.json added tokens (AddedToken fields). */
enum {
    OB_ADDED = 1,            /* an added token: matched in the text before the model runs */
    OB_ADDED_SPECIAL = 2,    /* skipped by decode(skip_special); not matched when parse_special is off */
    OB_ADDED_NORMALIZED = 4, /* matched in the normalized text (by its normalized form) */
    OB_ADDED_LSTRIP = 8,     /* takes the whitespace before it */
    OB_ADDED_RSTRIP = 16,    /* takes the whitespace after it */
    OB_ADDED_SINGLE_WORD = 32, /* only matches with no word character on either side */
    OB_ADDED_MODEL = 64,     /* also an entry of the model's own vocabulary */
};

struct ob_norm;
struct ob_prechain;
struct ob_decoder;

typedef struct {
    int model;                      /* ob_tok_model */
    int32_t n_tokens;               /* > 0 */
    const char *const *text;        /* [n_tokens] as the vocabulary stores it (BPE: byte-level alphabet;
                                       control / user-defined tokens: raw text) */
    const size_t *text_len;         /* [n_tokens] bytes of each text (may contain NUL) */
    const uint8_t *type;            /* [n_tokens] OB_TOKTYPE_*; NULL: all normal */
    const float *score;             /* [n_tokens] SPM merge priority (higher first); NULL: all 0 */
    int64_t n_merges;               /* BPE: ranked merges, rank = index */
    const char *const *merge;       /* [n_merges] "left right" */
    const size_t *merge_len;        /* [n_merges] */
    const char *const *pre_regex;   /* BPE: split regexes, applied in order (see pretok.h) */
    int n_pre_regex;
    int ignore_merges;              /* BPE: a pre-tokenized word that is a token is emitted whole */
    int32_t bos, eos, unk, pad, eot, eom;   /* -1: none; otherwise < n_tokens */
    int32_t extra_eog[OB_TOK_MAX_EXTRA_EOG]; /* more end-of-generation ids (FIM pad/repo/sep); -1: none */
    int add_bos, add_eos;           /* what encode's add_bos asks for */
    int add_space_prefix;           /* SPM: prepend U+2581 to each text fragment */
    const size_t *merge_split;      /* [n_merges] byte offset of the separating space; NULL: the first
                                       space after the first byte */
    /* tokenizer.json semantics (hf != 0). The builder takes ownership of norm, prechain and
     * decoder, also when it fails. */
    int hf;
    struct ob_norm *norm;           /* NULL: none */
    struct ob_prechain *prechain;   /* NULL: each text piece is one word */
    struct ob_decoder *decoder;     /* NULL: token bytes concatenated */
    const uint8_t *added;           /* [n_tokens] OB_ADDED_*; NULL: none */
    int byte_fallback, fuse_unk;    /* HF_BPE */
    const char *cont_prefix;        /* HF_BPE / WORDPIECE continuing_subword_prefix; NULL: none */
    const char *eow_suffix;         /* HF_BPE end_of_word_suffix; NULL: none */
    int wp_max_chars;               /* WORDPIECE max_input_chars_per_word */
    int32_t post_pre[OB_TOK_MAX_POST], post_suf[OB_TOK_MAX_POST];   /* post-processor ids */
    int n_post_pre, n_post_suf;     /* hf: used instead of add_bos / add_eos */
} ob_tokenizer_spec;

/* Builds the tokenizer. Returns 0, or -1 with err saying what is wrong. Merges whose parts or
 * result are not tokens are skipped (llama.cpp does the same); ob_tokenizer_n_merges_skipped
 * says how many. */
int ob_tokenizer_build(const ob_tokenizer_spec *s, ob_tokenizer_t **out, char *err, size_t errlen);

/* Merges of the vocabulary that could not be used (parts or result missing, no separator). */
int64_t ob_tokenizer_n_merges_skipped(const ob_tokenizer_t *t);

#endif
