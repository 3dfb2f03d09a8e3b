// Checkpoints on top of safetensors. The non-tensor part is one JSON document stored as the
// metadata string "mixgrad.checkpoint" (safetensors metadata values must be strings):
//   {"model": [names...], "states": [{"name": "optimizer", "tensors": [keys...],
//     "ints": {"step": 10}, "floats": {"lr": "0.1"}, "strings": {"kind": "adam"}}, ...]}
// Integers are JSON integers (exact in 64 bits); floats are strings: the shortest text that reads
// back to the same double for finite values, "inf"/"-inf", and "nan:0x<16 hex digits>" (the full
// bit pattern) for NaNs, so every double round-trips bit for bit. From format version 2 on,
// "mixgrad.crc32" holds a CRC-32 per tensor, written with the data and checked on load.
#include "mixgrad/io/checkpoint.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "mixgrad/core/error.h"
#include "mixgrad/io/checksum.h"
#include "mixgrad/io/json_parse.h"
#include "mixgrad/io/json_text.h"
#include "mixgrad/io/safetensors.h"

namespace mg::io {

namespace {

using detail::json;                 // the contents written
using pjson = detail::parsed_json;  // the contents read

constexpr const char* kKindKey = "mixgrad.kind";
constexpr const char* kKind = "checkpoint";
constexpr const char* kVersionKey = "mixgrad.checkpoint_version";
constexpr const char* kContentsKey = "mixgrad.checkpoint";
// Version 2 on: eight hex digits of CRC-32 per tensor, in the header's order.
constexpr const char* kChecksumKey = "mixgrad.crc32";
constexpr const char* kModelPrefix = "model.";

using detail::quoted;
using detail::valid_utf8;
using detail::excerpt;
using detail::quoted_excerpt;

std::string encode_float(double v) {
  if (std::isnan(v)) {
    uint64_t bits;
    std::memcpy(&bits, &v, 8);
    char buf[32];
    std::snprintf(buf, sizeof buf, "nan:0x%016llx", static_cast<unsigned long long>(bits));
    return buf;
  }
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);  // shortest round-trip form
  return std::string(buf, r.ptr);
}

std::optional<double> decode_float(const std::string& s) {
  if (s.rfind("nan:0x", 0) == 0 && s.size() == 22) {
    uint64_t bits = 0;
    const auto r = std::from_chars(s.data() + 6, s.data() + s.size(), bits, 16);
    if (r.ec != std::errc() || r.ptr != s.data() + s.size()) return std::nullopt;
    double v;
    std::memcpy(&v, &bits, 8);
    if (!std::isnan(v)) return std::nullopt;
    return v;
  }
  if (s == "inf") return HUGE_VAL;
  if (s == "-inf") return -HUGE_VAL;
  double v = 0;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || r.ec != std::errc() || r.ptr != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

// Compares each tensor's bytes with the CRC-32 written beside it (format version 2 on). The
// structure was validated already, so a mismatch means bytes changed after the save: a bad disk,
// a partial copy, an edit.
template <class Fail>
void verify_checksums(const SafetensorsFile& file, Fail fail) {
  auto it = file.metadata.find(kChecksumKey);
  if (it == file.metadata.end()) fail("the metadata has no \"", kChecksumKey, "\" (format version 2 stores one)");
  const std::string& hex = it->second;
  const bool digits = std::all_of(hex.begin(), hex.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
  if (!digits || hex.size() != 8 * file.tensors.size()) {
    fail("the \"", kChecksumKey, "\" metadata is ", quoted_excerpt(hex), "; expected 8 lowercase hex digits for each of the ",
         file.tensors.size(), " tensors");
  }
  for (std::size_t i = 0; i < file.tensors.size(); ++i) {
    const auto& [name, t] = file.tensors[i];
    const std::string saved = hex.substr(8 * i, 8);
    const std::string read = detail::crc32_hex(detail::crc32(t.data_ptr(), std::size_t(t.numel()) * t.element_size()));
    if (read != saved) {
      fail("tensor ", quoted_excerpt(name), " (", describe(t), "): its data does not match the CRC-32 saved with it (saved ",
           saved, ", read ", read, "); the file was damaged after it was written",
           "\n  hint: resume from a copy or an earlier checkpoint");
    }
  }
}

}  // namespace

void save_checkpoint(const std::string& path, const nn::Module& model, const NamedStates& states) {
  const char* who = "save_checkpoint";
  nn::NamedTensors tensors;
  json contents = json::object();
  json model_names = json::array();
  for (const auto& [name, t] : model.state_dict()) {
    // Module names may hold any bytes; the contents are JSON text (the library would throw its own
    // exception type at dump()).
    MG_CHECK(valid_utf8(name), Error, who, ": ", quoted(path), ": the model's state name ", quoted(name),
             " is not valid UTF-8 (checkpoint names are text)\n  hint: register parameters, buffers and modules under "
             "UTF-8 names");
    tensors.emplace_back(kModelPrefix + name, t);
    model_names.push_back(name);
  }
  contents["model"] = std::move(model_names);

  json state_list = json::array();
  std::set<std::string> state_names;
  for (const auto& named_state : states) {
    // Named references, not structured bindings: clang before 16 cannot capture those.
    const std::string& sname = named_state.first;
    const StateDict& sd = named_state.second;
    auto bad = [&](const auto&... what) {
      MG_THROW(Error, who, ": ", quoted(path), ": state ", quoted(sname), ": ", what...);
    };
    if (sname.empty()) MG_THROW(Error, who, ": ", quoted(path), ": a state has an empty name");
    if (!valid_utf8(sname)) bad("the name is not valid UTF-8");
    if (sname.find('.') != std::string::npos) bad("state names cannot contain '.'");
    if (sname == "model") bad("\"model\" is reserved for the model's state dict");
    if (!state_names.insert(sname).second) bad("the name appears twice");
    json s = json::object();
    s["name"] = sname;
    json keys = json::array();
    std::set<std::string> seen;
    for (const auto& [key, t] : sd.tensors) {
      if (key.empty()) bad("a tensor has an empty key");
      if (!valid_utf8(key)) bad("tensor key ", quoted(key), " is not valid UTF-8");
      if (!seen.insert(key).second) bad("tensor key ", quoted(key), " appears twice");
      if (!t.defined()) bad("tensor ", quoted(key), " is undefined");
      tensors.emplace_back(sname + "." + key, t);
      keys.push_back(key);
    }
    s["tensors"] = std::move(keys);
    json ints = json::object();
    for (const auto& [k, v] : sd.ints) {
      if (!valid_utf8(k)) bad("integer key ", quoted(k), " is not valid UTF-8");
      ints[k] = v;
    }
    s["ints"] = std::move(ints);
    json floats = json::object();
    for (const auto& [k, v] : sd.floats) {
      if (!valid_utf8(k)) bad("float key ", quoted(k), " is not valid UTF-8");
      floats[k] = encode_float(v);
    }
    s["floats"] = std::move(floats);
    json strings = json::object();
    for (const auto& [k, v] : sd.strings) {
      if (!valid_utf8(k) || !valid_utf8(v)) bad("string ", quoted(k), " is not valid UTF-8 (checkpoint strings are text)");
      strings[k] = v;
    }
    s["strings"] = std::move(strings);
    state_list.push_back(std::move(s));
  }
  contents["states"] = std::move(state_list);

  const std::map<std::string, std::string> metadata = {
      {kKindKey, kKind},
      {kVersionKey, std::to_string(kCheckpointVersion)},
      {kContentsKey, contents.dump()},
  };
  detail::save_safetensors_as(who, path, tensors, metadata, kChecksumKey);
}

// A function-try-block: every exception of the JSON library is an mg::Error too, should one
// escape the checks in the body.
Checkpoint load_checkpoint(const std::string& path) try {
  const char* who = "load_checkpoint";
  auto fail = [&](const auto&... what) { MG_THROW(Error, who, ": ", quoted(path), ": ", what...); };
  // Kind and version come first: a newer format must be refused before anything else is parsed,
  // its tensor entries included (a new dtype would otherwise be named instead).
  int64_t version = 0;
  const auto check_kind_and_version = [&](const std::map<std::string, std::string>& metadata) {
    auto kind = metadata.find(kKindKey);
    if (kind == metadata.end() || kind->second != kKind) {
      fail("not a mixgrad checkpoint (its metadata has no \"", kKindKey, "\": \"", kKind, "\")",
           "\n  hint: a plain safetensors file is read with io::load_safetensors");
    }
    auto ver = metadata.find(kVersionKey);
    if (ver == metadata.end()) fail("the metadata has no \"", kVersionKey, "\"");
    const std::string& v = ver->second;
    const auto r = std::from_chars(v.data(), v.data() + v.size(), version);
    if (v.empty() || r.ec != std::errc() || r.ptr != v.data() + v.size() || version < 1) {
      fail("invalid checkpoint format version ", quoted_excerpt(v), " (expected a positive integer)");
    }
    if (version > kCheckpointVersion) {
      fail("written by a newer mixgrad (checkpoint format version ", version, "; this build reads version ",
           kCheckpointVersion, ")\n  hint: load it with a newer mixgrad");
    }
  };
  SafetensorsFile file = detail::load_safetensors_as(who, path, check_kind_and_version);

  auto cit = file.metadata.find(kContentsKey);
  if (cit == file.metadata.end()) fail("the metadata has no \"", kContentsKey, "\"");
  const pjson contents = detail::parse_json(who, path, str_cat("the \"", kContentsKey, "\" metadata"), cit->second);
  if (!contents.is_object() || !contents.contains("model") || !contents["model"].is_array() ||
      !contents.contains("states") || !contents["states"].is_array()) {
    fail("the \"", kContentsKey, "\" metadata must be an object with arrays \"model\" and \"states\"");
  }
  // Nothing unknown: a misspelt section ("int" for "ints") would otherwise vanish silently.
  for (const auto& [k, unused] : contents.items()) {
    if (k != "model" && k != "states") fail("the \"", kContentsKey, "\" metadata has an unknown entry ", quoted_excerpt(k));
  }

  // Every tensor of the file is claimed exactly once, by the model or by one state.
  std::unordered_map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < file.tensors.size(); ++i) index.emplace(file.tensors[i].first, i);
  std::vector<bool> claimed(file.tensors.size(), false);
  auto take = [&](const std::string& full, const std::string& owner) -> Tensor {
    auto it = index.find(full);
    if (it == index.end()) fail(owner, " lists tensor ", quoted_excerpt(full), " but the file has no such tensor");
    if (claimed[it->second]) fail("tensor ", quoted_excerpt(full), " is listed twice");
    claimed[it->second] = true;
    return file.tensors[it->second].second;
  };

  Checkpoint ck;
  ck.path_ = path;
  ck.version_ = version;
  for (const pjson& name : contents["model"]) {
    if (!name.is_string()) fail("the model's tensor list has a non-string entry ", excerpt(name));
    const std::string n = name.get<std::string>();
    ck.model_.emplace_back(n, take(kModelPrefix + n, "the model"));
  }
  std::set<std::string> seen_states;
  for (const pjson& s : contents["states"]) {
    if (!s.is_object() || !s.contains("name") || !s["name"].is_string()) {
      fail("a state entry has no string \"name\": ", excerpt(s));
    }
    const std::string sname = s["name"].get<std::string>();
    for (const auto& [k, unused] : s.items()) {
      if (k != "name" && k != "tensors" && k != "ints" && k != "floats" && k != "strings") {
        fail("state ", quoted_excerpt(sname), " has an unknown entry ", quoted_excerpt(k),
             " (a state has name, tensors, ints, floats and strings)");
      }
    }
    if (sname.empty() || sname.find('.') != std::string::npos || sname == "model" ||
        !seen_states.insert(sname).second) {
      fail("invalid or repeated state name ", quoted_excerpt(sname));
    }
    // The object s[key] (empty when absent), every value checked by is_ok.
    auto section = [&](const char* key, auto is_ok, const char* what) -> const pjson& {
      static const pjson kEmpty = pjson::object();
      if (!s.contains(key)) return kEmpty;
      const pjson& sec = s[key];
      if (!sec.is_object()) fail("state ", quoted_excerpt(sname), ": \"", key, "\" is a JSON ", sec.type_name(), ", expected an object");
      for (const auto& [k, v] : sec.items()) {
        if (!is_ok(v)) fail("state ", quoted_excerpt(sname), ": ", what, " ", quoted_excerpt(k), " is ", excerpt(v));
      }
      return sec;
    };
    StateDict sd;
    if (s.contains("tensors")) {
      if (!s["tensors"].is_array()) fail("state ", quoted_excerpt(sname), ": \"tensors\" must be an array of keys");
      for (const pjson& key : s["tensors"]) {
        if (!key.is_string()) fail("state ", quoted_excerpt(sname), ": a tensor key is ", excerpt(key));
        const std::string k = key.get<std::string>();
        sd.tensors.emplace_back(k, take(sname + "." + k, str_cat("state ", quoted_excerpt(sname))));
      }
    }
    const pjson& ints = section(
        "ints",
        [](const pjson& v) {
          return v.is_number_integer() && (!v.is_number_unsigned() || v.get<uint64_t>() <= uint64_t(INT64_MAX));
        },
        "integer");
    for (const auto& [k, v] : ints.items()) sd.ints[k] = v.get<int64_t>();
    const pjson& floats = section(
        "floats", [](const pjson& v) { return v.is_string() && decode_float(v.get<std::string>()).has_value(); },
        "float");
    for (const auto& [k, v] : floats.items()) sd.floats[k] = *decode_float(v.get<std::string>());
    const pjson& strings = section("strings", [](const pjson& v) { return v.is_string(); }, "string");
    for (const auto& [k, v] : strings.items()) sd.strings[k] = v.get<std::string>();
    ck.states_.emplace_back(sname, std::move(sd));
  }
  for (std::size_t i = 0; i < claimed.size(); ++i) {
    if (!claimed[i]) fail("tensor ", quoted_excerpt(file.tensors[i].first), " belongs to neither the model nor a state");
  }
  if (version >= 2) verify_checksums(file, fail);
  return ck;
} catch (const json::exception& e) {
  MG_THROW(Error, "load_checkpoint: ", quoted(path), ": the checkpoint contents cannot be read: ",
           detail::bounded(e.what()));
}

nn::Module::LoadResult Checkpoint::restore_model(nn::Module& model, bool strict) const {
  const nn::NamedTensors own = model.state_dict();
  std::vector<std::string> missing, unexpected, dtypes, shapes;
  // By hash: a linear search per key was quadratic in the number of tensors.
  std::unordered_map<std::string, const Tensor*> saved;
  for (const auto& [name, t] : model_) saved.emplace(name, &t);
  std::unordered_set<std::string> own_names;
  for (const auto& [name, dst] : own) {
    own_names.insert(name);
    const auto it = saved.find(name);
    if (it == saved.end()) {
      missing.push_back(name);
      continue;
    }
    const Tensor& src = *it->second;
    const std::string both = str_cat(name, ": checkpoint ", describe(src), ", model ", describe(dst));
    if (src.dtype() != dst.dtype()) dtypes.push_back(both);
    if (src.shape() != dst.shape()) shapes.push_back(both);
  }
  for (const auto& [name, t] : model_) {
    // A name from the file is printed as is when short and plain, else quoted and cut (it may be
    // megabytes long, or hold a newline that would fake a line of the message).
    if (own_names.contains(name)) continue;
    const bool plain = name.size() <= detail::kExcerptChars &&
                       std::none_of(name.begin(), name.end(), [](char ch) { return static_cast<unsigned char>(ch) < 0x20; });
    unexpected.push_back(plain ? name : quoted_excerpt(name));
  }
  const bool key_problem = strict && (!missing.empty() || !unexpected.empty());
  if (key_problem || !dtypes.empty() || !shapes.empty()) {
    std::ostringstream os;
    os << "Checkpoint.restore_model: " << quoted(path_) << " does not match the " << model.type_name()
       << " model; nothing was changed";
    auto list = [&](const char* what, const std::vector<std::string>& names) {
      if (names.empty()) return;
      os << "\n  " << what << " (" << names.size() << "):";
      for (const auto& n : names) os << "\n    " << n;
    };
    if (strict) {
      list("missing keys", missing);
      list("unexpected keys", unexpected);
    }
    list("dtype mismatches", dtypes);
    list("shape mismatches", shapes);
    if (!dtypes.empty()) {
      os << "\n  hint: cast the model to the dtypes it had when it was saved (model.to(...)) before restoring";
    } else if (key_problem && shapes.empty()) {
      os << "\n  hint: pass strict=false to restore the matching keys only";
    } else {
      os << "\n  hint: the checkpoint was saved from a different architecture or configuration";
    }
    throw Error(os.str());
  }
  return model.load_state_dict(model_, strict);
}

bool Checkpoint::has_state(const std::string& name) const {
  return std::any_of(states_.begin(), states_.end(), [&](const auto& p) { return p.first == name; });
}

const StateDict& Checkpoint::state(const std::string& name) const {
  for (const auto& [n, s] : states_) {
    if (n == name) return s;
  }
  std::string names;
  for (const auto& [n, s] : states_) names += (names.empty() ? "" : ", ") + quoted_excerpt(n);
  MG_THROW(Error, "Checkpoint: ", quoted(path_), " has no state ", quoted(name), "; it has ",
           names.empty() ? std::string("no states") : names);
}

std::vector<std::string> Checkpoint::state_names() const {
  std::vector<std::string> out;
  for (const auto& [n, s] : states_) out.push_back(n);
  return out;
}

}  // namespace mg::io
