// The value options of an attention call (no arrays), in groups, and the one declared list of them.
//
// AttentionArgs (flashattn/args.hpp) inherits every group, so a call sets a.causal, a.softcap, ...
// Code that keeps its own copy of the options holds the groups and assigns them whole (the GPU's
// parameter block, the property cases, the oracle's owned calls); code that names options walks the
// declared list with for_each_value_option (the Python binding's keywords, the property cases'
// printed lines). docs/options.md shows what adding an option touches.
#pragma once

#include <cstdint>
#include <optional>
#include <type_traits>

namespace flashattn {

// Which keys a row sees (docs/semantics.md, "Masks"; the definition: flashattn/mask.hpp).
struct MaskOptions {
  bool causal = false;                          // bottom-right aligned: row i sees keys j <= i + Nk - Nq
  int64_t window_left = -1, window_right = -1;  // sliding window around the diagonal; -1 unbounded
  int64_t diagonal_offset = 0;  // moves the diagonal of the masks and ALiBi: row i is aligned with key
                                // i + Nk - Nq + diagonal_offset (|offset| < 2^31). For a block of a
                                // longer sequence (ring attention, chunked prefill): queries at
                                // positions qp + i, keys at kp + j of sequences of lengths Nq', Nk'
                                // need offset = qp - kp + (Nk' - Nq') - (Nk - Nq).

  // The declared list of the group: f(name, field) for each field, in order. The name is the C++
  // field's and the Python binding's keyword.
  template <class Self, class F>
  static void each(Self& o, F&& f) {
    f("causal", o.causal);
    f("window_left", o.window_left);
    f("window_right", o.window_right);
    f("diagonal_offset", o.diagonal_offset);
  }
};

// Transforms of the scores that take no array (ALiBi slopes, sinks and the bias are arrays of
// AttentionArgs).
struct ScoreOptions {
  std::optional<float> scale;  // multiplies q kᵀ; empty (the default): 1/sqrt(d). Any finite value,
                               // 0 and negative included, is used as given.
  float softcap = 0;           // > 0: S <- softcap * tanh(S / softcap); 0 off

  template <class Self, class F>
  static void each(Self& o, F&& f) {
    f("scale", o.scale);
    f("softcap", o.softcap);
  }
};

// Dropout on P (docs/semantics.md, "Dropout"): P_ij is kept with probability 1 − p by a
// Philox4x32-10 decision keyed by dropout_seed on stream dropout_offset + s·Hq + h
// (flashattn/philox.hpp), and kept values are scaled by 1/(1 − p); LSE is the undropped one.
// p in [0, 1); 0: off (bitwise the call without dropout). A call uses S·Hq streams: the next call
// gets dropout_offset + S·Hq for an independent mask.
struct DropoutOptions {
  float dropout_p = 0;
  uint64_t dropout_seed = 0;
  uint64_t dropout_offset = 0;

  template <class Self, class F>
  static void each(Self& o, F&& f) {
    f("dropout_p", o.dropout_p);
    f("dropout_seed", o.dropout_seed);
    f("dropout_offset", o.dropout_offset);
  }
};

namespace detail {
template <class Group, class T, class F>
void each_of_group(T& o, F& f) {
  if constexpr (std::is_base_of_v<Group, std::remove_const_t<T>>) {
    using Ref = std::conditional_t<std::is_const_v<T>, const Group&, Group&>;
    Group::each(static_cast<Ref>(o), f);
  }
}
template <class Group, class To, class From>
void copy_group(To& to, const From& from) {
  if constexpr (std::is_base_of_v<Group, To> && std::is_base_of_v<Group, From>)
    static_cast<Group&>(to) = static_cast<const Group&>(from);
}
}  // namespace detail

// Calls f(name, field) for every value option of `o` (AttentionArgs, or any type holding some of the
// groups as bases), group by group: mask, score, dropout. Fields are references into `o` (const
// when `o` is).
template <class T, class F>
void for_each_value_option(T& o, F&& f) {
  detail::each_of_group<MaskOptions>(o, f);
  detail::each_of_group<ScoreOptions>(o, f);
  detail::each_of_group<DropoutOptions>(o, f);
}

// Copies every group of value options that `to` and `from` both hold (as bases).
template <class To, class From>
void copy_value_options(To& to, const From& from) {
  detail::copy_group<MaskOptions>(to, from);
  detail::copy_group<ScoreOptions>(to, from);
  detail::copy_group<DropoutOptions>(to, from);
}

}  // namespace flashattn
