#include "mixgrad/nn/models/bert_hf.h"

#include <array>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "mixgrad/core/error.h"
#include "mixgrad/ops/ops.h"

namespace mg::nn::models {
namespace {

// A tensor name from a file, as error messages show it: at most 200 bytes, control characters as
// '?' (a name may be megabytes long, or hold a newline that would fake a line of the message).
std::string shown(const std::string& name) {
  std::string out = name.substr(0, 200);
  for (char& ch : out) {
    if (static_cast<unsigned char>(ch) < 0x20) ch = '?';
  }
  return name.size() > 200 ? out + str_cat("... (", name.size(), " bytes)") : out;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Replaces the first occurrence of `from` in s by `to`; false when there is none.
bool replace_part(std::string& s, const std::string& from, const std::string& to) {
  const std::size_t at = s.find(from);
  if (at == std::string::npos) return false;
  s.replace(at, from.size(), to);
  return true;
}

// One tensor's name in mixgrad's form (its q/k/v handled by the caller).
std::string renamed(std::string name) {
  if (ends_with(name, ".gamma")) name.replace(name.size() - 6, 6, ".weight");  // old TF-converted files
  if (ends_with(name, ".beta")) name.replace(name.size() - 5, 5, ".bias");
  replace_part(name, "encoder.layer.", "encoder.");
  // Longest first: "attention.output.dense" before "output.dense".
  static const std::pair<const char*, const char*> kParts[] = {
      {".attention.output.dense.", ".self_attn.out_proj."},
      {".attention.output.LayerNorm.", ".norm1."},
      {".intermediate.dense.", ".linear1."},
      {".output.dense.", ".linear2."},
      {".output.LayerNorm.", ".norm2."},
      {"pooler.dense.", "pooler."},
      {"cls.predictions.transform.dense.", "transform."},
      {"cls.predictions.transform.LayerNorm.", "transform_norm."},
  };
  for (const auto& [from, to] : kParts) {
    if (replace_part(name, from, to)) break;
  }
  if (name == "cls.predictions.bias") name = "decoder_bias";
  return name;
}

bool dropped(const std::string& name) {
  return ends_with(name, "embeddings.position_ids") || ends_with(name, "embeddings.token_type_ids") ||
         name.rfind("cls.predictions.decoder.", 0) == 0 || name.rfind("cls.seq_relationship.", 0) == 0;
}

}  // namespace

namespace {

// Whether a and b hold the same values (shape, dtype and bits).
bool same_tensor_values(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), std::size_t(x.numel()) * x.element_size()) == 0;
}

// The MLM decoder is dropped because mixgrad's is tied to the word embeddings (its bias is
// cls.predictions.bias). A file that stores it (an untied model, tie_word_embeddings = false) must
// hold the same values there, else the loaded model would compute something else: refused.
void check_tied_decoder(const NamedTensors& hf) {
  const Tensor* decoder = nullptr;
  const Tensor* decoder_bias = nullptr;
  const Tensor* words = nullptr;
  const Tensor* bias = nullptr;
  for (const auto& [name, t] : hf) {
    if (name == "cls.predictions.decoder.weight") decoder = &t;
    if (name == "cls.predictions.decoder.bias") decoder_bias = &t;
    if (ends_with(name, "embeddings.word_embeddings.weight")) words = &t;
    if (name == "cls.predictions.bias") bias = &t;
  }
  MG_CHECK(!decoder || (words && same_tensor_values(*decoder, *words)), Error,
           "bert_state_dict_from_hf: cls.predictions.decoder.weight differs from the word embeddings (an untied MLM "
           "decoder, tie_word_embeddings = false); mixgrad's BertForMaskedLM ties them",
           "\n  hint: tie them before saving, or load the encoder only (drop the cls.* tensors)");
  MG_CHECK(!decoder_bias || (bias && same_tensor_values(*decoder_bias, *bias)), Error,
           "bert_state_dict_from_hf: cls.predictions.decoder.bias differs from cls.predictions.bias; mixgrad's "
           "BertForMaskedLM has one decoder bias");
}

}  // namespace

NamedTensors bert_state_dict_from_hf(const NamedTensors& hf) {
  check_tied_decoder(hf);
  NamedTensors out;
  // "<layer prefix>|weight" -> {q, k, v}, filled as they come; written at the query's position.
  std::map<std::string, std::array<Tensor, 3>> qkv;
  std::vector<std::pair<std::size_t, std::string>> qkv_slots;  // position in `out`, key of qkv
  static const char* kRoles[] = {"query", "key", "value"};
  // Each mixgrad name comes from one file name: two spellings of one tensor in a file
  // (LayerNorm.gamma and LayerNorm.weight, say) would otherwise leave it to the loader to pick one.
  std::map<std::string, std::string> source;
  const auto claim = [&](const std::string& ours, const std::string& theirs) {
    const auto [it, fresh] = source.emplace(ours, theirs);
    MG_CHECK(fresh, Error, "bert_state_dict_from_hf: ", shown(theirs), " and ", shown(it->second), " are both mixgrad's ", shown(ours),
             "\n  hint: the file holds one tensor under two names; keep one of them");
  };
  for (const auto& [name, t] : hf) {
    if (dropped(name)) continue;
    const std::size_t at = name.find(".attention.self.");
    if (at == std::string::npos) {
      claim(renamed(name), name);
      out.emplace_back(renamed(name), t);
      continue;
    }
    // ...layer.i.attention.self.{query,key,value}.{weight,bias}
    const std::string rest = name.substr(at + 16);
    const std::size_t dot = rest.find('.');
    const std::string role = rest.substr(0, dot), kind = dot == std::string::npos ? "" : rest.substr(dot + 1);
    int r = -1;
    for (int i = 0; i < 3; ++i) {
      if (role == kRoles[i]) r = i;
    }
    MG_CHECK(r >= 0 && (kind == "weight" || kind == "bias"), Error, "bert_state_dict_from_hf: unexpected tensor ",
             shown(name), " (expected attention.self.{query,key,value}.{weight,bias})");
    const std::string key = renamed(name.substr(0, at)) + "|" + kind;
    auto [it, fresh] = qkv.try_emplace(key);
    MG_CHECK(!it->second[std::size_t(r)].defined(), Error, "bert_state_dict_from_hf: ", shown(name), " appears twice");
    it->second[std::size_t(r)] = t;
    if (fresh) {
      claim(renamed(name.substr(0, at)) + ".self_attn.in_proj_" + kind, name);
      qkv_slots.emplace_back(out.size(), key);
      out.emplace_back(std::string(), Tensor());  // filled below
    }
  }
  for (const auto& [slot, key] : qkv_slots) {
    const std::array<Tensor, 3>& parts = qkv.at(key);
    const std::string layer = key.substr(0, key.find('|')), kind = key.substr(key.find('|') + 1);
    for (int i = 0; i < 3; ++i) {
      MG_CHECK(parts[std::size_t(i)].defined(), Error, "bert_state_dict_from_hf: ", shown(layer), " has no attention.self.",
               kRoles[i], ".", kind, " (query, key and value are concatenated into one in_proj_", kind, ")");
    }
    out[slot] = {layer + ".self_attn.in_proj_" + kind, cat({parts[0], parts[1], parts[2]}, 0)};
  }
  return out;
}

}  // namespace mg::nn::models
