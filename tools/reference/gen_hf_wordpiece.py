"""Writes tests/data/reference/hf_wordpiece_{uncased,cased}_vocab.txt and hf_wordpiece.json: two
BERT vocabularies in Hugging Face's layout ([PAD] 0, [unused0..98], [UNK] 100, [CLS] 101, [SEP] 102,
[MASK] 103, then WordPiece tokens trained by the `tokenizers` library on the texts below), and for
each text the words and ids transformers' BertTokenizer produces, uncased and cased, plus one padded
[CLS] ... [SEP] sequence and 60 sentence pairs ([CLS] a [SEP] b [SEP], token types, longest-first
truncation), for tests/text/test_wordpiece_hf.cpp. Run once by hand; the tests need no
Python:
    python -m venv v && v/bin/pip install transformers tokenizers
    v/bin/python tools/reference/gen_hf_wordpiece.py tests/data/reference
"""
import json
import os
import random
import shutil
import sys
import tempfile

import tokenizers
import transformers
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
from transformers import BertTokenizer

out_dir = sys.argv[1]
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]

texts = [
    "In the beginning God created the heaven and the earth.",
    "And God said, Let there be light: and there was light.",
    "Don't stop-believing!! (really) #1 @home $5.00 50% a+b=c [x] {y} <z> ~w`v^u_t|s\\r/q",
    "The quick brown fox jumps over the lazy dog; THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG.",
    "Café au lait, déjà vu, naïve façade, Ångström, Øresund, Łódź, İstanbul, ŞIŞLI, straße, STRASSE.",
    "Über Mädchen und Jungen: Größe zählt nicht. Ça va? Niño, señor, ¿qué tal? ¡Olé!",
    "Tiếng Việt có dấu: Hà Nội, Thành phố Hồ Chí Minh, người Việt.",
    "Ελληνικά: ΟΔΟΣ, οδός, Σωκράτης, ἀρχὴ, ᾏ, ῾Ομηρος; ερώτηση;",
    "Русский язык: Москва, ЁЛКА, ёлка, Й й; Українська: Їжак, Ґанок.",
    "中文分词：我爱北京天安门。日本語のテキスト、カタカナとひらがな。",
    "한국어 텍스트: 안녕하세요, 세계! 가각갂",
    "العربية: مرحبا بالعالم، كيف حالك؟ עברית: שלום עולם.",
    "हिन्दी: नमस्ते दुनिया। தமிழ்: வணக்கம் கொ கோ கௌ",
    "Emoji: 😀 🎉👍🏽 ❤️ 🇫🇷 family 👨‍👩‍👧 in text",
    "Zero\u200bwidth\u200cjoin\u200dand\u2060joiner, soft\u00adhyphen, bidi\u202eoverride\u202c, BOM\ufeffhere.",
    "Tabs\tand\nnewlines\r\nand\u00a0nbsp\u2003em-space\u3000ideographic\u2028line\u2029para\u0085nel.",
    "Controls \x01\x02\x07\x1b\x7f\x9f and replacement \ufffd char and NUL \x00 gone.",
    "Fullwidth ＡＢＣ ａｂｃ １２３ ！？ and ligatures ﬁ ﬂ ﬀ and Ⅻ ⅻ ① ½ ² ™ ℃.",
    "Combining: e\u0301 a\u0300 o\u0308 n\u0303 c\u0327 (decomposed) vs é à ö ñ ç (composed).",
    "Greek varia \u1fef and oxia \u1ffd and question mark \u037e; CJK compatibility \uf900\uf901.",
    "Math: ∀x∈ℝ, x² ≥ 0; ∑ᵢ aᵢ = ∞? α→β ⇒ γ. Currency: € £ ¥ ₹ ₩ ¢.",
    "Special tokens in text: the [MASK] sat on the [UNK] mat [SEP] [CLS][PAD] and [mask] [Mask] [MASK",
    "a" * 99 + " " + "b" * 100 + " " + "c" * 101 + " " + "é" * 101,
    "Numbers 3.14159, 1,000,000, 2024-12-05, 10:30pm, v2.0.1, 0x1F, 1e-5.",
    "Quotes “curly” ‘single’ «guillemets» „low“ — em — en – dash … ellipsis • bullet.",
    "Old Hangul jamo 각 and halfwidth ﾊﾝｶｸ and Mongolian ᠮᠣᠩᠭᠣᠯ\u180e.",
    "Private use \ue000\uf8ff and unassigned \u0378\u0380 and tags \U000e0041\U000e0001 and plane 2 𠀀𪜀.",
    "Dotted İ, dotless ı, final sigma ΌΣΟΣ, title case ǅ ǈ ǋ, German ẞ, Turkish ŞĞÜ.",
    # NFD's canonical reordering of kept non-starters (uncased): swapped, across a stripped mark of
    # another class and a removed control, stopped by a stripped mark of class 0, from a decomposition.
    "Reordered x\u08d5\u08d4y \U0001d16d\U0001d165 a\u1b44\u0301\U0001d16d b\U0001d16d\x01\u1b44 "
    "c\U0001d16d\u0941\u1b44 \U0001d15e\U0001d16d\U0001d165 \u0628\u08e1\u0651\u08d4 \u302f\u302e\u1b44.",
    "",
    "   ",
    "!!!",
]
rng = random.Random(0)
pool = [cp for cp in range(0x20, 0x30000) if not 0xD800 <= cp <= 0xDFFF]
letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ      .,"
for _ in range(80):  # random mixtures: the code-point tables on text, not one character at a time
    texts.append("".join(rng.choice(letters) if rng.random() < 0.6 else chr(rng.choice(pool)) for _ in range(40)))


def hf_vocab(lowercase):
    name = "uncased" if lowercase else "cased"
    path = f"{out_dir}/hf_wordpiece_{name}_vocab.txt"
    if os.path.exists(path):  # kept: the trainer's order of equal pairs varies run to run
        return path
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=1500, min_frequency=1, special_tokens=SPECIALS,
                                        limit_alphabet=100000)
    tok.train_from_iterator(texts * 3, trainer)
    learned = sorted(tok.get_vocab().items(), key=lambda kv: kv[1])
    body = [t for t, _ in learned if t not in SPECIALS]
    vocab = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + SPECIALS[1:] + body
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(vocab) + "\n")
    return path


result = {"generator": f"transformers {transformers.__version__}, tokenizers {tokenizers.__version__}",
          "texts": texts}
for lowercase in (True, False):
    name = "uncased" if lowercase else "cased"
    path = hf_vocab(lowercase)
    with open(path, encoding="utf-8") as f:
        vocab = {t: i for i, t in enumerate(f.read().split("\n")[:-1])}
    tok = BertTokenizer(vocab=vocab, do_lower_case=lowercase)
    with tempfile.TemporaryDirectory() as d:  # the user's path: a directory with a vocab.txt
        shutil.copy(path, os.path.join(d, "vocab.txt"))
        again = BertTokenizer.from_pretrained(d, do_lower_case=lowercase)
        assert all(again(t)["input_ids"] == tok(t)["input_ids"] for t in texts)
        assert tok.convert_tokens_to_ids(SPECIALS) == [0, 100, 101, 102, 103]
    backend = tok.backend_tokenizer
    words = [[w for w, _ in backend.pre_tokenizer.pre_tokenize_str(backend.normalizer.normalize_str(t))]
             for t in texts]
    ids = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    padded = tok(texts, max_length=24, truncation=True, padding="max_length")
    result[name] = {"words": words, "ids": ids, "padded_ids": padded["input_ids"],
                    "padded_mask": padded["attention_mask"], "decoded": [tok.decode(i) for i in ids]}
    # Sentence pairs, [CLS] a [SEP] b [SEP] with token types, truncated longest-first.
    pairs = []
    for k in range(60):
        i, j = (7 * k) % len(texts), (11 * k + 3) % len(texts)
        max_length = [8, 12, 16, 24, 40][k % 5]
        e = tok(texts[i], texts[j], max_length=max_length, truncation=True, padding="max_length")
        pairs.append({"a": i, "b": j, "max_length": max_length, "ids": e["input_ids"],
                      "token_types": e["token_type_ids"], "mask": e["attention_mask"]})
    result[name]["pairs"] = pairs
with open(f"{out_dir}/hf_wordpiece.json", "w", encoding="utf-8") as f:
    json.dump(result, f, ensure_ascii=False, indent=None)
print(len(texts), "texts;", sum(i.count(100) for i in result["uncased"]["ids"]), "[UNK] uncased")
