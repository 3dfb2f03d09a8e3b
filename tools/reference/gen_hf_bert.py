"""Writes tests/data/reference/hf_bert_{model,mlm}_tiny.safetensors: Hugging Face BERT models (the
transformers library, its own state-dict names) with random non-trivial weights, an input and the
outputs transformers computes for it, for tests/nn/test_bert_hf.cpp (nn/models/bert_hf.h maps the
names). Run once by hand; the tests need no Python:
    python -m venv v && v/bin/pip install torch transformers safetensors
    v/bin/python tools/reference/gen_hf_bert.py tests/data/reference
"""
import sys

import torch
from safetensors.torch import save_file
from transformers import BertConfig, BertForMaskedLM, BertModel

out_dir = sys.argv[1]
torch.manual_seed(0)
cfg = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
                 max_position_embeddings=16, type_vocab_size=2, attn_implementation="eager")
ids = torch.randint(1, 64, (2, 7))
ids[1, 5:] = 0
types = torch.zeros_like(ids)
types[:, 4:] = 1
mask = torch.ones_like(ids)
mask[1, 5:] = 0
inputs = {"input.input_ids": ids, "input.token_type_ids": types, "input.attention_mask": mask}


def perturbed(model):
    with torch.no_grad():  # LayerNorm weights and biases away from 1 and 0, so a swap shows
        for name, p in model.named_parameters():
            if "LayerNorm.weight" in name:
                p.uniform_(0.5, 1.5)
            elif name.endswith("bias"):
                p.uniform_(-0.1, 0.1)
    return model.eval()


def state(model):  # tied tensors cloned: safetensors stores no shared memory
    return {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}


m = perturbed(BertModel(cfg))
with torch.no_grad():
    o = m(input_ids=ids, token_type_ids=types, attention_mask=mask)
save_file({**state(m), **inputs, "expected.sequence": o.last_hidden_state, "expected.pooled": o.pooler_output},
          f"{out_dir}/hf_bert_model_tiny.safetensors")

mlm = perturbed(BertForMaskedLM(cfg))
with torch.no_grad():
    logits = mlm(input_ids=ids, token_type_ids=types, attention_mask=mask).logits
save_file({**state(mlm), **inputs, "expected.logits": logits}, f"{out_dir}/hf_bert_mlm_tiny.safetensors")
print("written", list(state(mlm).keys()))
