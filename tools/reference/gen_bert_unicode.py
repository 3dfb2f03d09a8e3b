"""Writes data/text/bert_unicode_tables.cpp: what Hugging Face's BERT normalizer and pre-tokenizer
(the `tokenizers` library behind transformers' BertTokenizer: BertNormalizer + BertPreTokenizer)
do with each Unicode code point, so that mg::data::WordPiece splits text exactly as they do.
The tables are measured from the library itself, one code point at a time, then the C++ rule
(emulated below) is checked against the library on every code point and on random mixed strings.
Run once by hand; the build needs no Python:
    python -m venv v && v/bin/pip install tokenizers
    v/bin/python tools/reference/gen_bert_unicode.py data/text/bert_unicode_tables.cpp
"""
import random
import sys
import unicodedata

import tokenizers
from tokenizers.normalizers import BertNormalizer
from tokenizers.pre_tokenizers import BertPreTokenizer

# MARK: kept cased, removed uncased; MARK_NONSTARTER: the same with a nonzero canonical combining
# class, which NFD's canonical reordering moves past instead of stopping at.
OTHER, WHITESPACE, REMOVED, ISOLATED, MARK, MARK_NONSTARTER = 0, 1, 2, 3, 4, 5
NAMES = ["kOther", "kWhitespace", "kRemoved", "kIsolated", "kMark", "kMarkNonStarter"]
cased = BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=False, lowercase=False)
uncased = BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=True)
pre = BertPreTokenizer()
HANGUL_FIRST, HANGUL_LAST = 0xAC00, 0xD7A3


def chars():
    return (cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF)


def classify(cp):
    """The class of cp as the cased pipeline treats it."""
    c = chr(cp)
    r = cased.normalize_str(c)
    if r == "":
        return REMOVED
    if r == " ":
        return WHITESPACE
    if r == f" {c} ":
        return ISOLATED  # a CJK ideograph: a word of its own
    assert r == c, (hex(cp), r)
    words = [w for w, _ in pre.pre_tokenize_str(f"a{c}a")]
    if words == ["a", c, "a"]:
        return ISOLATED  # punctuation
    if words == ["a", "a"]:
        return WHITESPACE
    assert words == [f"a{c}a"], (hex(cp), words)
    return OTHER


def hangul(cp):
    s = cp - HANGUL_FIRST
    out = chr(0x1100 + s // 588) + chr(0x1161 + s % 588 // 28)
    return out + (chr(0x11A7 + s % 28) if s % 28 else "")


cls = {cp: classify(cp) for cp in chars()}
fold = {}  # uncased form of a word character, where it differs (Hangul syllables computed)
for cp in chars():
    if cls[cp] not in (OTHER, ISOLATED):
        continue
    r = uncased.normalize_str(chr(cp))
    if cls[cp] == ISOLATED:
        r = r.strip(" ")  # CJK ideographs come back between spaces
    if HANGUL_FIRST <= cp <= HANGUL_LAST:
        assert r == hangul(cp), hex(cp)
    elif r == "":
        cls[cp] = MARK
    elif r != chr(cp):
        fold[cp] = r


# Canonical reordering, measured: uncased, NFD sorts each run of code points with a nonzero
# combining class by that class (stably). Marks are removed after it, so only the order of the
# kept non-starters can show. Probe with kept non-starters of known classes: U+1D16D (226) and
# U+1D165 (216) swap when what stands between them does not end the run, and a kept code point of
# class 0 < c < 226 moves before U+1D16D, one of class > 9 after U+1B44 (9). (U+16FF0, class 6 in
# Unicode 13, has class 0 in the library's older tables: the probes find such differences.)
D226, D216, D9 = "\U0001D16D", "\U0001D165", "\u1B44"
assert uncased.normalize_str("a" + D226 + D216) == "a" + D216 + D226
assert uncased.normalize_str("a" + D216 + D9) == "a" + D9 + D216
for cp in chars():
    if cls[cp] in (REMOVED, MARK):
        ends_run = uncased.normalize_str("a" + D226 + chr(cp) + D216) == "a" + D226 + D216
        assert uncased.normalize_str("a" + D226 + chr(cp) + D216) in ("a" + D226 + D216, "a" + D216 + D226), hex(cp)
        assert not (cls[cp] == REMOVED and ends_run), hex(cp)  # removed before NFD: never a boundary
        if cls[cp] == MARK and not ends_run:
            cls[cp] = MARK_NONSTARTER
ccc = {}  # the kept code points with a nonzero class, and that class (Unicode's, where the test agrees)
for cp in chars():
    if cls[cp] == OTHER and cp not in fold and not HANGUL_FIRST <= cp <= HANGUL_LAST:
        c = chr(cp)
        if (c != D226 and uncased.normalize_str("a" + D226 + c) == "a" + c + D226) or \
                (c != D9 and uncased.normalize_str("a" + c + D9) == "a" + D9 + c):
            ccc[cp] = unicodedata.combining(c)
            assert ccc[cp] != 0, f"{cp:X}: a non-starter for the library, class 0 in Python's Unicode data"
for cp, r in fold.items():
    assert all(ord(m) in ccc or uncased.normalize_str("a" + D226 + m) != "a" + m + D226 for m in r), hex(cp)


def emulate(text, lowercase):
    """The C++ rule (data/text/wordpiece.h for_each_pre_token) on a Python string."""
    words, buf, pending = [], "", []

    def settle():  # the run of kept non-starters, canonically ordered, into the word
        nonlocal buf
        buf += "".join(sorted(pending, key=lambda m: ccc[ord(m)]))
        pending.clear()

    for ch in text:
        cp = ord(ch)
        k = cls[cp]
        if lowercase and k in (REMOVED, MARK_NONSTARTER):
            continue
        if lowercase and k == MARK:
            settle()
            continue
        if k == WHITESPACE or k == ISOLATED:
            settle()
            if buf:
                words.append(buf)
            buf = ""
            if k == ISOLATED:
                words.append(fold.get(cp, ch) if lowercase else ch)
        elif k in (MARK, MARK_NONSTARTER):
            buf += ch
        elif k == OTHER:
            if not lowercase:
                buf += ch
            elif HANGUL_FIRST <= cp <= HANGUL_LAST:
                settle()
                buf += hangul(cp)
            else:
                for m in fold.get(cp, ch):
                    km = cls[ord(m)]
                    if km == ISOLATED:  # U+1FEF GREEK VARIA folds to the grave accent, punctuation
                        settle()
                        if buf:
                            words.append(buf)
                        buf = ""
                        words.append(m)
                    elif ord(m) in ccc:
                        pending.append(m)
                    else:
                        assert km == OTHER, hex(cp)
                        settle()
                        buf += m
    settle()
    if buf:
        words.append(buf)
    return words


def reference(text, lowercase):
    n = uncased if lowercase else cased
    return [w for w, _ in pre.pre_tokenize_str(n.normalize_str(text))]


for lowercase in (False, True):
    for cp in chars():
        c = chr(cp)
        assert emulate(f"x{c}y", lowercase) == reference(f"x{c}y", lowercase), (hex(cp), lowercase)
rng = random.Random(0)
pool = list(chars())
ascii_pool = [chr(c) for c in range(32, 127)] * 40
for trial in range(100000):
    s = "".join(rng.choice(ascii_pool) if rng.random() < 0.5 else chr(rng.choice(pool)) for _ in range(12))
    for lowercase in (False, True):
        assert emulate(s, lowercase) == reference(s, lowercase), (s, lowercase)

# Canonical reordering: every pair of kept non-starters, alone, around a removed character, a
# non-starter mark and a mark of class 0, and random strings over them and what decomposes to them.
kept = [chr(cp) for cp in ccc]
between = ["", "\u0000", "\u0301", "\u0316", "\u093A", "\u0941"]
for a in kept:
    for b in kept:
        for m in between:
            for s in (f"x{a}{m}{b}y", f"{a}{b}{m}{a}"):
                for lowercase in (False, True):
                    assert emulate(s, lowercase) == reference(s, lowercase), (s, lowercase)
sources = [chr(cp) for cp, r in fold.items() if any(ord(m) in ccc for m in r)]
marks = [chr(cp) for cp in chars() if cls[cp] in (MARK, MARK_NONSTARTER)]
focus = kept * 6 + sources * 3 + rng.sample(marks, 60) + list("ab ,\u0000\u00e9") + ["\u4e00"]
for trial in range(100000):
    s = "".join(rng.choice(focus) for _ in range(rng.randint(2, 10)))
    for lowercase in (False, True):
        assert emulate(s, lowercase) == reference(s, lowercase), (s, lowercase)

ranges = []
for cp in chars():
    if not ranges or ranges[-1][1] != cls[cp]:
        ranges.append((cp, cls[cp]))
singles = sorted((cp, ord(r)) for cp, r in fold.items() if len(r) == 1)
multis = sorted((cp, r) for cp, r in fold.items() if len(r) != 1)
assert all(1 < len(r) <= 3 for _, r in multis)

with open(sys.argv[1], "w") as f:
    w = f.write
    w("// Generated by tools/reference/gen_bert_unicode.py from the `tokenizers` library "
      f"{tokenizers.__version__}; do not edit.\n")
    w("// Each code point's class under Hugging Face's BertNormalizer + BertPreTokenizer, and its uncased\n")
    w("// form (lowercase, NFD, combining marks removed) where that differs from itself. Hangul syllables\n")
    w("// decompose by formula (bert_unicode.cpp). Then the canonical combining class of each kept code point\n")
    w("// whose class is not 0 (NFD reorders those). Checked against the library on every code point.\n")
    w('#include "mixgrad/data/text/bert_unicode.h"\n\nnamespace mg::data::detail {\n\n')
    w(f"const BertClassRange kBertClassRanges[] = {{\n")
    for i in range(0, len(ranges), 6):
        w("    " + " ".join(f"{{0x{cp:X}, BertCharClass::{NAMES[k]}}}," for cp, k in ranges[i:i + 6]) + "\n")
    w(f"}};\nconst std::size_t kBertClassRangeCount = {len(ranges)};\n\n")
    w("const BertFold1 kBertFold1[] = {\n")
    for i in range(0, len(singles), 8):
        w("    " + " ".join(f"{{0x{a:X}, 0x{b:X}}}," for a, b in singles[i:i + 8]) + "\n")
    w(f"}};\nconst std::size_t kBertFold1Count = {len(singles)};\n\n")
    w("const BertFoldN kBertFoldN[] = {\n")
    for cp, r in multis:
        cps = ", ".join(f"0x{ord(m):X}" for m in r)
        w(f"    {{0x{cp:X}, {{{cps}}}}},\n")
    w(f"}};\nconst std::size_t kBertFoldNCount = {len(multis)};\n\n")
    w("const BertCombiningClass kBertCombiningClasses[] = {\n")
    items = sorted(ccc.items())
    for i in range(0, len(items), 8):
        w("    " + " ".join(f"{{0x{cp:X}, {c}}}," for cp, c in items[i:i + 8]) + "\n")
    w(f"}};\nconst std::size_t kBertCombiningClassCount = {len(items)};\n\n}}  // namespace mg::data::detail\n")
print(f"{len(ranges)} class ranges, {len(singles)} one-to-one folds, {len(multis)} one-to-many, "
      f"{len(ccc)} kept non-starters")
