"""Writes tests/data/reference/hf_bert_dir/ (a Hugging Face BERT directory as save_pretrained writes
it: config.json, model.safetensors, vocab.txt, tokenizer_config.json) with a tiny random
BertForMaskedLM over hf_wordpiece_uncased_vocab.txt, and tests/data/reference/hf_bert_dir_expected.safetensors:
the ids transformers' tokenizer gives for two sentences (padded) and the MLM logits the model
computes for them (the first 256 vocabulary columns: a misplaced tensor changes them all), for tests/io/test_hf_bert.cpp and the train_bert --hf smoke test. Run once by
hand after gen_hf_wordpiece.py; the tests need no Python:
    python -m venv v && v/bin/pip install torch transformers safetensors
    v/bin/python tools/reference/gen_hf_bert_dir.py tests/data/reference
"""
import os
import shutil
import sys

import torch
from safetensors.torch import save_file
from transformers import BertConfig, BertForMaskedLM, BertTokenizer

ref = sys.argv[1]
out = os.path.join(ref, "hf_bert_dir")
os.makedirs(out, exist_ok=True)
with open(os.path.join(ref, "hf_wordpiece_uncased_vocab.txt"), encoding="utf-8") as f:
    vocab = {t: i for i, t in enumerate(f.read().split("\n")[:-1])}
tok = BertTokenizer(vocab=vocab, do_lower_case=True)
torch.manual_seed(0)
cfg = BertConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                 intermediate_size=32, max_position_embeddings=64, type_vocab_size=2, attn_implementation="eager")
model = BertForMaskedLM(cfg).eval()
with torch.no_grad():  # LayerNorm weights and biases away from 1 and 0, so a swap shows
    for name, p in model.named_parameters():
        if "LayerNorm.weight" in name:
            p.uniform_(0.5, 1.5)
        elif name.endswith("bias"):
            p.uniform_(-0.1, 0.1)
model.save_pretrained(out, safe_serialization=True)
shutil.copy(os.path.join(ref, "hf_wordpiece_uncased_vocab.txt"), os.path.join(out, "vocab.txt"))
with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
    f.write('{"do_lower_case": true, "tokenizer_class": "BertTokenizer", "model_max_length": 64}\n')
for extra in os.listdir(out):  # keep the four files the loader reads
    if extra not in ("config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json"):
        os.remove(os.path.join(out, extra))

texts = ["In the beginning God created the heaven and the earth.", "Café [MASK] déjà vu!"]
enc = tok(texts, max_length=16, truncation=True, padding="max_length", return_tensors="pt")
with torch.no_grad():
    logits = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).logits
expected = {"input_ids": enc["input_ids"].contiguous(), "attention_mask": enc["attention_mask"].contiguous(),
            "expected.logits": logits[:, :, :256].contiguous()}  # the first 256 vocabulary columns
save_file(expected, os.path.join(ref, "hf_bert_dir_expected.safetensors"), metadata={"texts": "\n".join(texts)})
print(sorted(os.listdir(out)), enc["input_ids"].tolist())
