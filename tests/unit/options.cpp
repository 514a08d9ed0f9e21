// The value options' declared list (flashattn/options.hpp): its names, that it covers every field
// of each group, and that what is derived from it (copy_value_options) carries every option.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "flashattn/args.hpp"
#include "flashattn/options.hpp"

namespace {

using flashattn::AttentionArgs;

std::vector<std::string> names_of(const AttentionArgs& a) {
  std::vector<std::string> names;
  flashattn::for_each_value_option(a, [&](const char* name, const auto&) { names.push_back(name); });
  return names;
}

// Returns the byte ranges [offset, offset + size) of the listed fields of `group`, sorted.
template <class Group>
std::vector<std::pair<size_t, size_t>> listed_bytes(Group& group, size_t& max_align) {
  std::vector<std::pair<size_t, size_t>> ranges;
  const auto* base = reinterpret_cast<const unsigned char*>(&group);
  Group::each(group, [&](const char*, auto& field) {
    const size_t at = static_cast<size_t>(reinterpret_cast<const unsigned char*>(&field) - base);
    ranges.emplace_back(at, at + sizeof(field));
    max_align = std::max(max_align, alignof(std::decay_t<decltype(field)>));
  });
  std::sort(ranges.begin(), ranges.end());
  return ranges;
}

// Checks that the listed fields of Group leave no unlisted field: every gap between them (and
// after the last) is padding, narrower than the widest alignment of the group. (An unlisted field
// small enough to hide in padding is not seen.)
template <class Group>
void check_list_covers() {
  Group group;
  size_t align = 1;
  const auto ranges = listed_bytes(group, align);
  REQUIRE(!ranges.empty());
  CHECK(ranges.front().first == 0);
  for (size_t i = 1; i < ranges.size(); ++i) {
    CHECK(ranges[i].first >= ranges[i - 1].second);  // no field listed twice
    CHECK(ranges[i].first - ranges[i - 1].second < align);
  }
  CHECK(sizeof(Group) - ranges.back().second < align);
}

// Sets every value option of `o` to a value other than its default (distinct per option).
template <class T>
void set_all(T& o) {
  int n = 0;
  flashattn::for_each_value_option(o, [&n](const char*, auto& field) {
    ++n;
    using F = std::decay_t<decltype(field)>;
    if constexpr (std::is_same_v<F, bool>)
      field = !field;
    else if constexpr (std::is_same_v<F, std::optional<float>>)
      field = 0.5f * static_cast<float>(n);
    else
      field = static_cast<F>(field + static_cast<F>(n));
  });
}

// Returns "name=value" of every value option of `o`.
template <class T>
std::vector<std::string> values_of(const T& o) {
  std::vector<std::string> out;
  flashattn::for_each_value_option(o, [&out](const char* name, const auto& field) {
    using F = std::decay_t<decltype(field)>;
    std::string v;
    if constexpr (std::is_same_v<F, std::optional<float>>)
      v = field ? std::to_string(*field) : "none";
    else
      v = std::to_string(field);
    out.push_back(std::string(name) + "=" + v);
  });
  return out;
}

}  // namespace

TEST_CASE("options: the declared list names every value option of a call, group by group") {
  CHECK(names_of(AttentionArgs{}) ==
        std::vector<std::string>{"causal", "window_left", "window_right", "diagonal_offset", "scale", "softcap",
                                 "dropout_p", "dropout_seed", "dropout_offset"});
  // Each name is the field's own: the list reaches a.causal through "causal", and so on.
  AttentionArgs a;
  a.window_right = 7;
  a.dropout_seed = 11;
  int seen = 0;
  flashattn::for_each_value_option(a, [&seen](const char* name, const auto& field) {
    using F = std::decay_t<decltype(field)>;
    if constexpr (std::is_integral_v<F> && !std::is_same_v<F, bool>) {
      if (std::string(name) == "window_right") seen += field == 7;
      if (std::string(name) == "dropout_seed") seen += field == 11;
    }
  });
  CHECK(seen == 2);
}

TEST_CASE("options: each group's list covers all of its fields") {
  check_list_covers<flashattn::MaskOptions>();
  check_list_covers<flashattn::ScoreOptions>();
  check_list_covers<flashattn::DropoutOptions>();
}

TEST_CASE("options: copy_value_options carries every option of the groups both types hold") {
  AttentionArgs from;
  set_all(from);
  CHECK(values_of(from) != values_of(AttentionArgs{}));
  AttentionArgs to;
  flashattn::copy_value_options(to, from);
  CHECK(values_of(to) == values_of(from));

  // A type holding only some groups gets those and leaves the others alone.
  struct MaskOnly : flashattn::MaskOptions {};
  MaskOnly m;
  flashattn::copy_value_options(m, from);
  CHECK(m.causal == from.causal);
  CHECK(m.window_left == from.window_left);
  CHECK(m.window_right == from.window_right);
  CHECK(m.diagonal_offset == from.diagonal_offset);
  AttentionArgs back;
  flashattn::copy_value_options(back, m);
  CHECK(back.causal == from.causal);
  CHECK(back.diagonal_offset == from.diagonal_offset);
  CHECK(!back.scale);
  CHECK(back.dropout_p == 0);
}
