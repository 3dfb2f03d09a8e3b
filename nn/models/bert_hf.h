// Hugging Face BERT checkpoints into mixgrad's BERT: transformers' BertModel, BertForMaskedLM and
// BertForSequenceClassification name their tensors differently from nn::models' BERT (whose
// encoder is TransformerEncoderLayer, PyTorch's names), and keep query, key and value as three
// Linears where MultiheadAttention has one in_proj. This maps a state dict from their names to
// ours, so a pretrained checkpoint (e.g. bert-base-uncased's model.safetensors) loads with the
// strict load_state_dict and computes what transformers computes (tests/nn/test_bert_hf.cpp).
//
//   // a BertForMaskedLM checkpoint (bert.-prefixed encoder, MLM head):
//   mg::io::SafetensorsFile f = mg::io::load_safetensors("my-mlm/model.safetensors");
//   nn::models::BertForMaskedLM mlm(nn::models::BertConfig::base());
//   mlm.load_state_dict(nn::models::bert_state_dict_from_hf(f.tensors));
//   // bert-base-uncased (BertForPreTraining: it also has a pooler, which BertForMaskedLM has not):
//   // io::load_hf_bert, then drop "bert.pooler.*" (io/hf_bert.h shows it).
#pragma once
#include "mixgrad/nn/module.h"

namespace mg::nn::models {

// Renames (and, for attention, concatenates q, k, v along dim 0) every tensor of a Hugging Face
// BERT state dict; names already in mixgrad's form pass unchanged, and any "bert." prefix is kept
// (BertForMaskedLM and BertForSequenceClassification have it on both sides). Dropped: the
// position_ids/token_type_ids buffers, the MLM decoder's weight and bias (tied to the word
// embeddings and cls.predictions.bias, as here) and the next-sentence head (cls.seq_relationship,
// which mixgrad's BERT has no use for). Old checkpoints' LayerNorm gamma/beta are read as
// weight/bias. A layer missing one of query, key and value is an Error naming it.
NamedTensors bert_state_dict_from_hf(const NamedTensors& hf);

}  // namespace mg::nn::models
