// Casting a forward call's inputs and outputs (O2/O3: inputs to the model's dtype, outputs back to
// f32). Floating tensors are cast wherever they sit: alone, in std::vector, std::map,
// std::unordered_map, std::pair, std::tuple, std::optional, or inside a user type with a
// `to(DType)` method returning that type (a batch struct); integer and bool tensors (token ids,
// masks) and every other value pass unchanged, as Apex's input caster does.
//
//   MyBatch b2 = mg::amp::cast_floating(batch, mg::DType::BF16);   // MyBatch::to(DType) called
#pragma once
#include <map>
#include <optional>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "mixgrad/core/tensor.h"
#include "mixgrad/ops/ops.h"

namespace mg::amp {

template <typename T>
T cast_floating(const T& value, DType dtype);

namespace detail {
template <typename T>
concept HasTo = requires(const T& v, DType d) {
  { v.to(d) } -> std::convertible_to<T>;
};
template <typename T> struct IsVector : std::false_type {};
template <typename T, typename A> struct IsVector<std::vector<T, A>> : std::true_type {};
template <typename T> struct IsMap : std::false_type {};
template <typename K, typename V, typename C, typename A> struct IsMap<std::map<K, V, C, A>> : std::true_type {};
template <typename K, typename V, typename H, typename E, typename A>
struct IsMap<std::unordered_map<K, V, H, E, A>> : std::true_type {};
template <typename T> struct IsPair : std::false_type {};
template <typename A, typename B> struct IsPair<std::pair<A, B>> : std::true_type {};
template <typename T> struct IsTuple : std::false_type {};
template <typename... A> struct IsTuple<std::tuple<A...>> : std::true_type {};
template <typename T> struct IsOptional : std::false_type {};
template <typename T> struct IsOptional<std::optional<T>> : std::true_type {};
}  // namespace detail

template <typename T>
T cast_floating(const T& value, DType dtype) {
  if constexpr (std::is_same_v<T, Tensor>) {
    return value.defined() && is_floating(value.dtype()) && value.dtype() != dtype ? to(value, dtype) : value;
  } else if constexpr (detail::IsVector<T>::value) {
    T out;
    out.reserve(value.size());
    for (const auto& v : value) out.push_back(cast_floating(v, dtype));
    return out;
  } else if constexpr (detail::IsMap<T>::value) {
    T out;
    for (const auto& [k, v] : value) out.emplace(k, cast_floating(v, dtype));
    return out;
  } else if constexpr (detail::IsPair<T>::value) {
    return T{cast_floating(value.first, dtype), cast_floating(value.second, dtype)};
  } else if constexpr (detail::IsTuple<T>::value) {
    return std::apply([&](const auto&... v) { return T{cast_floating(v, dtype)...}; }, value);
  } else if constexpr (detail::IsOptional<T>::value) {
    return value ? T{cast_floating(*value, dtype)} : T{};
  } else if constexpr (detail::HasTo<T>) {
    return value.to(dtype);
  } else {
    return value;  // not a tensor container: passes unchanged
  }
}

}  // namespace mg::amp
