/* hf.c — `-hf REPO[:QUANT]`: fetch a GGUF from the Hugging Face Hub with libcurl.
 *
 * Owns: picking the file (GET {endpoint}/api/models/REPO/tree/main lists the repository's
 * files with their LFS sha256; the one whose name contains QUANT, else Q4_K_M, else the only
 * GGUF), the cache folder ($XDG_CACHE_HOME/1bit or ~/.cache/1bit, or --hf-cache), resuming
 * a partial download (Range), and checking the whole file's sha256 against the Hub's
 * (the tree's lfs.oid, else the X-Linked-Etag header of HEAD /REPO/resolve/main/FILE).
 * The endpoint is $HF_ENDPOINT (default https://huggingface.co); $HF_TOKEN is sent as a
 * bearer token. A verified file is not fetched again (FILE.sha256 beside it records it).
 * Does not own: loading the model (the engine).
 */
#include <curl/curl.h>
#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "server/server.h"
#include "util/err.h"

/* ---- sha256 (FIPS 180-4) ------------------------------------------------------------------ */
typedef struct {
    uint32_t h[8];
    uint64_t n;
    unsigned char buf[64];
    size_t fill;
} sha256_t;

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01,
    0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc,
    0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
    0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08,
    0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
    0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

#define ROR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void sha_block(sha256_t *s, const unsigned char *p) {
    uint32_t w[64], a[8];
    for (int i = 0; i < 16; i++) w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = ROR(w[i - 15], 7) ^ ROR(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ROR(w[i - 2], 17) ^ ROR(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    memcpy(a, s->h, sizeof a);
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = a[7] + (ROR(a[4], 6) ^ ROR(a[4], 11) ^ ROR(a[4], 25)) + ((a[4] & a[5]) ^ (~a[4] & a[6])) + K[i] + w[i];
        uint32_t t2 = (ROR(a[0], 2) ^ ROR(a[0], 13) ^ ROR(a[0], 22)) + ((a[0] & a[1]) ^ (a[0] & a[2]) ^ (a[1] & a[2]));
        memmove(a + 1, a, 7 * sizeof a[0]);
        a[4] += t1;
        a[0] = t1 + t2;
    }
    for (int i = 0; i < 8; i++) s->h[i] += a[i];
}

static void sha_init(sha256_t *s) {
    static const uint32_t h0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(s->h, h0, sizeof h0);
    s->n = 0;
    s->fill = 0;
}

static void sha_update(sha256_t *s, const unsigned char *p, size_t n) {
    s->n += n;
    while (n) {
        size_t take = 64 - s->fill < n ? 64 - s->fill : n;
        memcpy(s->buf + s->fill, p, take);
        s->fill += take;
        p += take;
        n -= take;
        if (s->fill == 64) { sha_block(s, s->buf); s->fill = 0; }
    }
}

static void sha_hex(sha256_t *s, char out[65]) {
    uint64_t bits = s->n * 8;
    unsigned char pad = 0x80, zero = 0, len[8];
    sha_update(s, &pad, 1);
    while (s->fill != 56) sha_update(s, &zero, 1);
    for (int i = 0; i < 8; i++) len[i] = (unsigned char)(bits >> (56 - 8 * i));
    sha_update(s, len, 8);
    for (int i = 0; i < 8; i++) snprintf(out + 8 * i, 9, "%08x", s->h[i]);
}

static int sha256_file(const char *path, char out[65]) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    sha256_t s;
    sha_init(&s);
    static unsigned char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) sha_update(&s, buf, n);
    fclose(f);
    sha_hex(&s, out);
    return 0;
}

/* ---- HTTP -------------------------------------------------------------------------------- */
typedef struct {
    ob_sbuf body;
    char etag[80];
    long status;
} fetch_t;

static size_t on_body(char *p, size_t sz, size_t n, void *u) {
    fetch_t *f = u;
    if (f->body.len + sz * n > (64u << 20)) return 0; /* a listing, never this big */
    ob_sbuf_put(&f->body, p, sz * n);
    return sz * n;
}

/* Remembers X-Linked-Etag (LFS files) or ETag: the Hub puts the sha256 there. */
static size_t on_header(char *p, size_t sz, size_t n, void *u) {
    fetch_t *f = u;
    size_t len = sz * n;
    const char *names[] = {"x-linked-etag:", "etag:"};
    for (int k = 0; k < 2; k++) {
        size_t nl = strlen(names[k]);
        if (len > nl && !strncasecmp(p, names[k], nl) && (k == 0 || !f->etag[0])) {
            size_t i = nl, o = 0;
            while (i < len && (p[i] == ' ' || p[i] == '"' || p[i] == 'W' || p[i] == '/')) i++;
            while (i < len && o + 1 < sizeof f->etag && isxdigit((unsigned char)p[i])) f->etag[o++] = (char)tolower((unsigned char)p[i++]);
            f->etag[o] = 0;
        }
    }
    return len;
}

static CURL *easy(const char *url, struct curl_slist **hdrs) {
    CURL *c = curl_easy_init();
    if (!c) return NULL;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "1bit/" OB_VERSION_STRING);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);
    const char *tok = getenv("HF_TOKEN");
    *hdrs = NULL;
    if (tok && *tok) {
        char h[1024];
        snprintf(h, sizeof h, "Authorization: Bearer %s", tok);
        *hdrs = curl_slist_append(NULL, h);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, *hdrs);
    }
    return c;
}

static int get(const char *url, int head, fetch_t *f, char *err, size_t errlen) {
    struct curl_slist *h;
    CURL *c = easy(url, &h);
    if (!c) return ERR("-hf: libcurl init failed");
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, f);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, f);
    curl_easy_setopt(c, CURLOPT_NOBODY, (long)head);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, head ? 0L : 1L);
    CURLcode rc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &f->status);
    curl_easy_cleanup(c);
    curl_slist_free_all(h);
    if (rc != CURLE_OK) return ERR("-hf: %s: %s", url, curl_easy_strerror(rc));
    return 0;
}

static size_t on_file(char *p, size_t sz, size_t n, void *u) { return fwrite(p, sz, n, (FILE *)u) * sz; }

/* Appends to part from its current size; restarts when the server ignores the Range. */
static int download(const char *url, const char *part, char *err, size_t errlen) {
    struct stat st;
    long long have = stat(part, &st) == 0 ? (long long)st.st_size : 0;
    FILE *f = fopen(part, have ? "ab" : "wb");
    if (!f) return ERR("-hf: cannot write '%s': %s", part, strerror(errno));
    struct curl_slist *h;
    CURL *c = easy(url, &h);
    if (!c) { fclose(f); return ERR("-hf: libcurl init failed"); }
    char range[64];
    if (have) {
        snprintf(range, sizeof range, "%lld-", have);
        curl_easy_setopt(c, CURLOPT_RANGE, range);
        fprintf(stderr, "serve: -hf: resuming at %lld bytes\n", have);
    }
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_FAILONERROR, 1L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_file);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, f);
    CURLcode rc = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(c);
    curl_slist_free_all(h);
    fclose(f);
    if (rc == CURLE_OK && have && status == 200) {
        /* The server sent the whole file after our partial one: start over. */
        remove(part);
        return ERR("-hf: the server ignored the resume range; starting over");
    }
    if (rc == CURLE_HTTP_RETURNED_ERROR && status == 416) return 0; /* already complete */
    if (rc != CURLE_OK) return ERR("-hf: %s: %s (HTTP %ld)", url, curl_easy_strerror(rc), status);
    return 0;
}

static int mkdirs(const char *path) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(tmp, 0755) && errno != EEXIST) return -1;
        *p = '/';
    }
    return mkdir(tmp, 0755) && errno != EEXIST ? -1 : 0;
}

static int contains_ci(const char *s, const char *sub) {
    size_t n = strlen(sub);
    for (; *s; s++) if (!strncasecmp(s, sub, n)) return 1;
    return 0;
}

int ob_hf_download(const char *spec, const char *cache_dir, char **path_out, char *err, size_t errlen) {
    *path_out = NULL;
    char repo[512], quant[64] = "";
    snprintf(repo, sizeof repo, "%s", spec);
    char *colon = strchr(repo, ':');
    if (colon) { snprintf(quant, sizeof quant, "%s", colon + 1); *colon = 0; }
    const char *slash = strchr(repo, '/');
    if (!slash || slash == repo || !slash[1] || strchr(slash + 1, '/') || strstr(repo, ".."))
        return ERR("-hf '%s': expected OWNER/NAME[:QUANT]", spec);
    const char *ep = getenv("HF_ENDPOINT");
    if (!ep || !*ep) ep = "https://huggingface.co";
    curl_global_init(CURL_GLOBAL_DEFAULT);
    char url[2048];
    snprintf(url, sizeof url, "%s/api/models/%s/tree/main?recursive=true", ep, repo);
    fetch_t ls = {0};
    int rc = -1;
    json_t *tree = NULL;
    char *dest = NULL, *part = NULL;
    if (get(url, 0, &ls, err, errlen)) goto out;
    if (ls.status != 200) { ERR("-hf: %s: HTTP %ld (no such repository, or it needs HF_TOKEN)", url, ls.status); goto out; }
    tree = json_loadb(ls.body.p ? ls.body.p : "", ls.body.len, 0, NULL);
    if (!json_is_array(tree)) { ERR("-hf: %s: not a file listing", url); goto out; }
    /* Pick the GGUF: QUANT if given, else Q4_K_M, else the only one. */
    json_t *pick = NULL, *it;
    size_t i;
    int n_gguf = 0;
    const char *want = quant[0] ? quant : "Q4_K_M";
    json_array_foreach(tree, i, it) {
        const char *p = json_string_value(json_object_get(it, "path"));
        size_t l = p ? strlen(p) : 0;
        if (!p || l < 5 || strcasecmp(p + l - 5, ".gguf") || contains_ci(p, "mmproj")) continue;
        n_gguf++;
        if (contains_ci(p, want) && !pick) pick = it;
    }
    if (!pick && !quant[0] && n_gguf == 1)
        json_array_foreach(tree, i, it) {
            const char *p = json_string_value(json_object_get(it, "path"));
            size_t l = p ? strlen(p) : 0;
            if (p && l >= 5 && !strcasecmp(p + l - 5, ".gguf") && !contains_ci(p, "mmproj")) pick = it;
        }
    if (!pick) {
        ERR("-hf '%s': %s", spec, n_gguf ? "no GGUF file matches the quantization (give REPO:QUANT, e.g. :Q4_K_M)" : "the repository has no GGUF file");
        goto out;
    }
    const char *file = json_string_value(json_object_get(pick, "path"));
    const char *oid = json_string_value(json_object_get(json_object_get(pick, "lfs"), "oid"));
    char want_sha[80] = "";
    if (oid && strlen(oid) == 64) snprintf(want_sha, sizeof want_sha, "%s", oid);
    snprintf(url, sizeof url, "%s/%s/resolve/main/%s", ep, repo, file);
    if (!want_sha[0]) {
        fetch_t hd = {0};
        if (get(url, 1, &hd, err, errlen) == 0 && strlen(hd.etag) == 64) snprintf(want_sha, sizeof want_sha, "%s", hd.etag);
        ob_sbuf_free(&hd.body);
    }
    if (!want_sha[0]) { ERR("-hf: the Hub gave no sha256 for %s, so it cannot be verified", file); goto out; }
    /* Cache path: DIR/OWNER_NAME_FILE (sub-folders of the repo flattened too). */
    char dir[2048];
    if (cache_dir) snprintf(dir, sizeof dir, "%s", cache_dir);
    else if (getenv("XDG_CACHE_HOME") && *getenv("XDG_CACHE_HOME")) snprintf(dir, sizeof dir, "%s/1bit", getenv("XDG_CACHE_HOME"));
    else snprintf(dir, sizeof dir, "%s/.cache/1bit", getenv("HOME") ? getenv("HOME") : ".");
    if (mkdirs(dir)) { ERR("-hf: cannot create the cache folder '%s': %s", dir, strerror(errno)); goto out; }
    ob_sbuf name = {0};
    ob_sbuf_printf(&name, "%s/%s_%s", dir, repo, file);
    for (char *p = name.p + strlen(dir) + 1; *p; p++) if (*p == '/') *p = '_';
    dest = name.p;
    size_t dl = strlen(dest);
    part = malloc(dl + 16);
    char *side = malloc(dl + 16);
    snprintf(part, dl + 16, "%s.part", dest);
    snprintf(side, dl + 16, "%s.sha256", dest);
    char have[80] = "";
    FILE *sf = fopen(side, "r");
    if (sf) { if (!fgets(have, sizeof have, sf)) have[0] = 0; fclose(sf); }
    have[strcspn(have, "\r\n")] = 0;
    struct stat st;
    if (!strcmp(have, want_sha) && stat(dest, &st) == 0) {
        fprintf(stderr, "serve: -hf: %s is in the cache\n", dest);
    } else {
        fprintf(stderr, "serve: -hf: downloading %s/%s -> %s\n", repo, file, dest);
        int ok = 0;
        for (int attempt = 0; attempt < 4 && !ok; attempt++) {
            if (download(url, part, err, errlen) == 0) ok = 1;
            else fprintf(stderr, "serve: %s\n", err);
        }
        if (!ok) { free(side); goto out; }
        char got[65];
        if (sha256_file(part, got)) { ERR("-hf: cannot read '%s'", part); free(side); goto out; }
        if (strcmp(got, want_sha)) {
            remove(part);
            ERR("-hf: %s: sha256 %s does not match the Hub's %s (the partial file was removed)", file, got, want_sha);
            free(side);
            goto out;
        }
        if (rename(part, dest)) { ERR("-hf: cannot rename '%s': %s", part, strerror(errno)); free(side); goto out; }
        sf = fopen(side, "w");
        if (sf) { fprintf(sf, "%s\n", want_sha); fclose(sf); }
        fprintf(stderr, "serve: -hf: verified sha256 %s\n", want_sha);
    }
    free(side);
    *path_out = dest;
    dest = NULL;
    rc = 0;
out:
    json_decref(tree);
    ob_sbuf_free(&ls.body);
    free(dest);
    free(part);
    return rc;
}
