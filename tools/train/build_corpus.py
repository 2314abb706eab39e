#!/usr/bin/env python3
"""Build the training corpus of the demo model from openly licensed Debian documentation.

Owns: downloading the Debian packages listed in SOURCES (with `apt-get download`, so only
Debian's archive is used), unpacking them, turning their HTML into plain prose, cleaning and
deduplicating it, the held-out split, and a small set of chat-formatted samples made from the
same documents. Does not own: the tokenizer or the training (tools/train/train.py, run on the
GPU machine).

    python3 tools/train/build_corpus.py [--out build/corpus]

Python 3.11 standard library only; needs `apt-get` and `dpkg-deb` (Debian 12). Deterministic:
files are read in sorted order, the split and the chat prompts come from SHA-256 of a
document's path, and nothing depends on the clock or on dict order. Output, in OUT/out/:

    train.jsonl.gz   one {"src", "path", "text"} per line, the training documents
    valid.txt        the held-out documents as one plain text (documents joined by a blank line);
                     the file `1bit perplexity -f` reads
    valid.jsonl.gz   the same held-out documents with their source and path
    chat.jsonl.gz    {"user", "assistant"} pairs made from training documents (title -> opening
                     paragraphs), so the model learns the ChatML turn format and to end a turn
    manifest.json    package versions and SHA-256 of the .deb files, licences, sizes, counts

The package versions this was built from are pinned in SOURCES; if Debian has moved on, the
script says so and takes the current version (the manifest records what was used).
"""
import argparse
import gzip
import hashlib
import html.parser
import json
import multiprocessing
import os
import re
import subprocess
import sys
import unicodedata

# (package, pinned version, licence of the text we take, licence note, folders to read)
SOURCES = [
    ("python3.11-doc", "3.11.2-6+deb12u9", "PSF-2.0",
     "Python Software Foundation License Version 2 (the Python documentation licence)",
     ["usr/share/doc/python3.11/html"]),
    ("postgresql-doc-15", "15.20-0+deb12u1", "PostgreSQL",
     "PostgreSQL Licence (MIT/BSD-like)", ["usr/share/doc/postgresql-doc-15/html"]),
    ("sqlite3-doc", "3.40.1-2+deb12u2", "public-domain",
     "SQLite is in the public domain", ["usr/share/doc/sqlite3"]),
    ("rust-doc", "1.63.0+dfsg1-2", "MIT OR Apache-2.0",
     "Rust project documentation, MIT or Apache-2.0", ["usr/share/doc/rust-doc/html"]),
    ("nodejs-doc", "18.20.4+dfsg-1~deb12u3", "MIT",
     "Node.js documentation, Expat (MIT)", ["usr/share/doc/nodejs/api"]),
    ("python-django-doc", "3:3.2.25-0+deb12u7", "BSD-3-Clause",
     "Django documentation, BSD-3-Clause", ["usr/share/doc/python-django-doc/html"]),
    ("erlang-doc", "1:25.2.3+dfsg-1+deb12u4", "Apache-2.0",
     "Erlang/OTP documentation, Apache-2.0", ["usr/share/doc/erlang-doc"]),
    ("llvm-15-doc", "1:15.0.6-4", "Apache-2.0 WITH LLVM-exception",
     "LLVM documentation, Apache-2.0 with LLVM exception", ["usr/share/doc/llvm-15-doc/html"]),
    ("clang-15-doc", "1:15.0.6-4", "Apache-2.0 WITH LLVM-exception",
     "Clang documentation, Apache-2.0 with LLVM exception", ["usr/share/doc/clang-15/html"]),
    ("apache2-doc", "2.4.71-1~deb12u1", "Apache-2.0",
     "Apache HTTP Server documentation, Apache-2.0 (every language Debian ships: en, fr, ja, tr, de, es, ...)", ["usr/share/doc/apache2-doc/manual"]),
    ("python-scipy-doc", "1.10.1-2", "BSD-3-Clause",
     "SciPy documentation, BSD-3-Clause", ["usr/share/doc/python-scipy-doc/html"]),
    ("libboost1.81-doc", "1.81.0-5+deb12u1", "BSL-1.0",
     "Boost documentation, Boost Software License 1.0", ["usr/share/doc/libboost1.81-doc"]),
    ("ghc-doc", "9.0.2-4", "BSD-3-Clause",
     "GHC User's Guide, BSD-3-Clause (the library API pages are left out: mostly type signatures)",
     ["usr/share/doc/ghc-doc/html/users_guide"]),
    ("python-flask-doc", "2.2.2-3", "BSD-3-Clause",
     "Flask documentation, BSD-3-Clause", ["usr/share/doc/python-flask-doc/html"]),
    ("python-werkzeug-doc", "2.2.2-3+deb12u1", "BSD-3-Clause",
     "Werkzeug documentation, BSD-3-Clause", ["usr/share/doc/python-werkzeug-doc/html"]),
    ("python-sklearn-doc", "1.2.1+dfsg-1", "BSD-3-Clause",
     "scikit-learn documentation, BSD-3-Clause", ["usr/share/doc/python-sklearn-doc/html"]),
    ("python-pandas-doc", "1.5.3+dfsg-2", "BSD-3-Clause",
     "pandas documentation, BSD-3-Clause", ["usr/share/doc/python-pandas-doc/html"]),
    ("python-sqlalchemy-doc", "1.4.46+ds1-1", "MIT",
     "SQLAlchemy documentation, Expat (MIT)", ["usr/share/doc/python-sqlalchemy-doc/html"]),
    ("python-sympy-doc", "1.11.1-1", "BSD-3-Clause",
     "SymPy documentation, BSD-3-Clause", ["usr/share/doc/python-sympy-doc/html"]),
    ("python-pytest-doc", "7.2.1-2", "MIT",
     "pytest documentation, Expat (MIT)", ["usr/share/doc/python-pytest-doc/html"]),
    ("python-astropy-doc", "5.2.1-2+deb12u1", "BSD-3-Clause",
     "Astropy documentation, BSD-3-Clause", ["usr/share/doc/python-astropy-doc/html"]),
    ("python-statsmodels-doc", "0.13.5+dfsg-7", "BSD-3-Clause",
     "statsmodels documentation, BSD-3-Clause", ["usr/share/doc/python-statsmodels-doc/html"]),
]

# Path pieces that mark pages with no prose (indexes, search, generated source listings).
SKIP_PATH = re.compile(r"(/_sources/|/_static/|/_downloads/|/_images/|/_modules/|/src/|/search\.html$|"
                       r"/genindex|/py-modindex|/modindex|/doc-index|/bookindex|/index-[a-z0-9_]*\.html$|"
                       r"/implementors/|/sidebar-items|/all\.html$|/print\.html$|/404\.html$|/toc\.html$)")
SKIP_TAGS = {"script", "style", "nav", "header", "footer", "head", "noscript", "svg", "form", "button",
             "select", "textarea", "pre", "template", "iframe", "object", "math"}
# Class / role / id tokens (whole tokens, so "wy-grid-for-nav" is not "nav") of boilerplate.
SKIP_TOKENS = {"sphinxsidebar", "sidebar", "related", "navigation", "navbar", "nav", "menu", "footer", "header",
               "breadcrumbs", "breadcrumb", "headerlink", "toc", "toctree-wrapper", "search", "out-of-band",
               "rustdoc-toggle", "srclink", "highlight", "codeblock", "literal-block", "doctest", "sig",
               "signature", "copyright", "linenodiv", "prevnext", "nextprev", "api_metadata", "api_stability",
               "permalink", "contentinfo", "wy-side-scroll", "wy-nav-side", "wy-side-nav-search", "wy-menu",
               "rst-footer-buttons", "menu-title", "menu-bar", "bd-sidebar", "bd-sidebar-primary", "bd-sidebar-secondary", "bd-header",
               "bd-footer", "bd-toc", "related-pages", "sphinxsidebarwrapper", "document-nav"}
SKIP_PREFIXES = ("highlight-", "sig-")


def skip_attrs(a):
    for tok in " ".join(a.get(k) or "" for k in ("class", "role", "id")).split():
        t = tok.lower()
        if t in SKIP_TOKENS or t.startswith(SKIP_PREFIXES):
            return True
    return False


BLOCK_TAGS = {"p", "div", "br", "li", "h1", "h2", "h3", "h4", "h5", "h6", "tr", "dt", "dd", "section",
              "table", "blockquote", "article", "ul", "ol", "dl", "hr", "td", "th", "caption", "main",
              "figure", "figcaption", "details", "summary"}
VOID_TAGS = {"br", "img", "hr", "input", "meta", "link", "wbr", "area", "base", "col", "embed", "param",
             "source", "track"}
SPECIALS = ("<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>")
HELD_OUT_PERCENT = 1          # documents whose path hash falls in this percentile are held out
MIN_DOC_CHARS = 400
CHAT_PROMPTS = ["What is {t}?", "Tell me about {t}.", "Explain {t}.", "Can you describe {t}?",
                "Give me an overview of {t}.", "What should I know about {t}?"]


class Extract(html.parser.HTMLParser):
    """HTML -> list of paragraphs of visible prose. Drops navigation, sidebars and code blocks."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.paras, self.cur = [], []
        self.skip_tag, self.skip_depth = None, 0
        self.h1 = None
        self.in_h1 = False
        self.h1_buf = []

    def _flush(self):
        if self.cur:
            t = " ".join("".join(self.cur).split())
            if t:
                self.paras.append(t)
            self.cur = []

    def handle_starttag(self, tag, attrs):
        if self.skip_tag is not None:
            if tag == self.skip_tag and tag not in VOID_TAGS:
                self.skip_depth += 1
            return
        if tag in SKIP_TAGS or (tag not in VOID_TAGS and skip_attrs(dict(attrs))):
            if tag not in VOID_TAGS:
                self.skip_tag, self.skip_depth = tag, 1
            return
        if tag in BLOCK_TAGS:
            self._flush()
        if tag == "h1" and self.h1 is None:
            self.in_h1, self.h1_buf = True, []

    def handle_endtag(self, tag):
        if self.skip_tag is not None:
            if tag == self.skip_tag:
                self.skip_depth -= 1
                if self.skip_depth == 0:
                    self.skip_tag = None
            return
        if tag in BLOCK_TAGS:
            self._flush()
        if tag == "h1" and self.in_h1:
            self.in_h1 = False
            self.h1 = " ".join("".join(self.h1_buf).split())

    def handle_data(self, data):
        if self.skip_tag is None:
            self.cur.append(data)
            if self.in_h1:
                self.h1_buf.append(data)

    def close(self):
        super().close()
        self._flush()


CODE_CHARS = set("{}[]();=<>_/\\|#$*&^%@~`")


def clean_para(p):
    p = unicodedata.normalize("NFC", p).replace("\u00b6", "").replace("\u00a0", " ").replace("\u200b", "")
    for s in SPECIALS:
        p = p.replace(s, "")
    p = " ".join(p.split())
    if len(p) < 2 or not re.search(r"[A-Za-z]", p):
        return None
    n_code = sum(1 for c in p if c in CODE_CHARS)
    if n_code > 0.12 * len(p):
        return None
    letters = sum(1 for c in p if c.isalpha())
    if letters < 0.5 * len(p):
        return None
    return p


def clean_title(t):
    if not t:
        return None
    t = " ".join(t.replace("\u00b6", "").replace("#", " ").split())
    t = re.sub(r"^(Chapter\s+)?[0-9IVX]+(\.[0-9]+)*\.?\s+", "", t)
    t = re.sub(r"\s*[\u2014|-]\s*(Python|Django|Flask|Werkzeug|SciPy|LLVM|Clang).*$", "", t)
    if not (3 <= len(t) <= 80) or not re.search(r"[A-Za-z]", t):
        return None
    return t


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


def fetch(pkg, ver, debs):
    """The .deb of pkg (pinned version if the archive still has it) in debs/; returns (path, version)."""
    os.makedirs(debs, exist_ok=True)
    for name in sorted(os.listdir(debs)):
        if name.startswith(pkg + "_") and name.endswith(".deb"):
            got = subprocess.run(["dpkg-deb", "-f", os.path.join(debs, name), "Version"], check=True,
                                 capture_output=True, text=True).stdout.strip()
            return os.path.join(debs, name), got
    r = subprocess.run(["apt-get", "download", f"{pkg}={ver}"], cwd=debs, capture_output=True, text=True)
    if r.returncode != 0:
        print(f"warning: {pkg}={ver} is not in the archive any more; taking the current version", file=sys.stderr)
        run(["apt-get", "download", pkg], cwd=debs, capture_output=True)
    return fetch(pkg, ver, debs)


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def extract_file(path):
    with open(path, "rb") as f:
        raw = f.read()
    text = raw.decode("utf-8", errors="replace")
    p = Extract()
    try:
        p.feed(text)
        p.close()
    except Exception:  # html.parser is lenient; anything it still refuses is dropped
        return None, []
    paras = []
    for c in (clean_para(x) for x in p.paras):
        if c and (not paras or paras[-1] != c):  # headings often appear twice in a row
            paras.append(c)
    return clean_title(p.h1), paras


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="build/corpus")
    args = ap.parse_args()
    debs, xdir, odir = (os.path.join(args.out, d) for d in ("debs", "x", "out"))
    os.makedirs(odir, exist_ok=True)
    manifest = {"sources": [], "held_out_percent": HELD_OUT_PERCENT}
    docs = []  # (src, relpath, title, paras)
    for pkg, ver, lic, note, roots in SOURCES:
        deb, got = fetch(pkg, ver, debs)
        dest = os.path.join(xdir, pkg)
        if not os.path.isdir(dest):
            os.makedirs(xdir, exist_ok=True)  # dpkg-deb -x makes dest, not its parents
            run(["dpkg-deb", "-x", deb, dest + ".tmp"])
            os.rename(dest + ".tmp", dest)  # a half-unpacked package is never taken as done
        n_files = 0
        for root in roots:
            base = os.path.join(dest, root)
            files = []
            for d, dirs, fs in os.walk(base):
                dirs.sort()
                for f in fs:
                    if f.endswith((".html", ".htm")):
                        files.append(os.path.join(d, f))
            keep = [p for p in sorted(files)
                    if not SKIP_PATH.search("/" + os.path.relpath(p, dest)) and not os.path.islink(p)]
            with multiprocessing.Pool(os.cpu_count()) as pool:
                results = pool.map(extract_file, keep, chunksize=16)  # in input order: deterministic
            for path, (title, paras) in zip(keep, results):
                rel = os.path.relpath(path, dest)
                if paras:
                    docs.append((pkg, rel, title, paras))
                    n_files += 1
        manifest["sources"].append({"package": pkg, "version": got, "pinned": ver, "deb_sha256": sha256_file(deb),
                                    "licence": lic, "note": note, "copyright_file": f"/usr/share/doc/{pkg}/copyright",
                                    "html_files_used": n_files})
        print(f"{pkg} {got}: {n_files} pages", file=sys.stderr)

    # Boilerplate: a paragraph found in more than 3 documents is dropped everywhere after its first use.
    seen_in = {}
    for i, (_, _, _, paras) in enumerate(docs):
        for p in set(paras):
            seen_in[p] = seen_in.get(p, 0) + 1
    first_use = set()
    out_docs, seen_docs = [], set()
    for src, rel, title, paras in docs:
        keep = []
        for p in paras:
            if seen_in[p] > 3:
                if p in first_use:
                    continue
                first_use.add(p)
            keep.append(p)
        text = "\n\n".join(keep)
        if len(text) < MIN_DOC_CHARS:
            continue
        letters = sum(1 for c in text if c.isalpha())
        if letters < 0.6 * len(text):
            continue
        h = hashlib.sha256(text.encode()).digest()
        if h in seen_docs:
            continue
        seen_docs.add(h)
        out_docs.append((src, rel, title, keep, text))

    train, valid, chat = [], [], []
    for src, rel, title, paras, text in out_docs:
        hv = int.from_bytes(hashlib.sha256(f"{src}/{rel}".encode()).digest()[:8], "big")
        if hv % 100 < HELD_OUT_PERCENT:
            valid.append((src, rel, text))
            continue
        train.append((src, rel, text))
        # Chat sample: the page title as a question, the opening prose as the answer.
        if title:
            ans, n = [], 0
            for p in paras[1:] if paras and paras[0] == title else paras:
                if len(p) < 60 or p.endswith(":"):
                    if ans:
                        break
                    continue
                if n + len(p) > 700 and ans:
                    break
                ans.append(p)
                n += len(p)
            if ans and n >= 120:
                q = CHAT_PROMPTS[(hv >> 8) % len(CHAT_PROMPTS)].format(t=title)
                chat.append({"user": q, "assistant": "\n\n".join(ans)})

    def wjsonl(name, rows):
        with gzip.GzipFile(os.path.join(odir, name), "wb", mtime=0) as f:
            for r in rows:
                f.write((json.dumps(r, ensure_ascii=False) + "\n").encode())

    wjsonl("train.jsonl.gz", ({"src": s, "path": r, "text": t} for s, r, t in train))
    wjsonl("valid.jsonl.gz", ({"src": s, "path": r, "text": t} for s, r, t in valid))
    wjsonl("chat.jsonl.gz", chat)
    with open(os.path.join(odir, "valid.txt"), "w", encoding="utf-8") as f:
        f.write("\n\n".join(t for _, _, t in valid) + "\n")
    per_src = {}
    for s, _, t in train:
        e = per_src.setdefault(s, {"train_docs": 0, "train_bytes": 0, "valid_docs": 0, "valid_bytes": 0})
        e["train_docs"] += 1
        e["train_bytes"] += len(t.encode())
    for s, _, t in valid:
        e = per_src.setdefault(s, {"train_docs": 0, "train_bytes": 0, "valid_docs": 0, "valid_bytes": 0})
        e["valid_docs"] += 1
        e["valid_bytes"] += len(t.encode())
    for e in manifest["sources"]:
        e.update(per_src.get(e["package"], {}))
    manifest["train_docs"] = len(train)
    manifest["train_bytes"] = sum(len(t.encode()) for _, _, t in train)
    manifest["valid_docs"] = len(valid)
    manifest["valid_bytes"] = sum(len(t.encode()) for _, _, t in valid)
    manifest["chat_pairs"] = len(chat)
    manifest["chat_bytes"] = sum(len(c["user"].encode()) + len(c["assistant"].encode()) for c in chat)
    for name in ("train.jsonl.gz", "valid.jsonl.gz", "chat.jsonl.gz", "valid.txt"):
        manifest.setdefault("files", {})[name] = sha256_file(os.path.join(odir, name))
    with open(os.path.join(odir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    print(json.dumps({k: v for k, v in manifest.items() if k not in ("sources", "files")}), file=sys.stderr)


if __name__ == "__main__":
    main()
