// The oracle's written results are its unrounded values rounded to the output dtype from fp32 with
// round-to-nearest-even (convert.hpp), and LSE is stored as fp32, for every dtype.
#include <cstdint>
#include <cstring>

#include "fixture.hpp"

TEST_CASE("reference: out, lse and gradients are the unrounded values rounded to nearest even") {
  for (flashattn::DType t : {flashattn::DType::f32, flashattn::DType::f16, flashattn::DType::bf16}) {
    CAPTURE(flashattn::dtype_name(t));
    unit::Fixture fx({2, 4, 5, 4, 2, 8, t});
    auto a = fx.forward();
    a.causal = true;
    const auto values = flashattn::reference::forward_values(a);
    flashattn::reference::forward(a);
    int64_t bad = 0;
    for (size_t i = 0; i < values.out.size(); ++i) {
      float want[1];
      flashattn::store_from_float(want, t, 0, static_cast<float>(values.out[i]));
      bad += std::memcmp(want, reinterpret_cast<const char*>(fx.out.data()) + i * flashattn::dtype_size(t),
                         flashattn::dtype_size(t)) != 0;
    }
    for (size_t i = 0; i < values.lse.size(); ++i) bad += fx.lse[i] != static_cast<float>(values.lse[i]);
    CHECK(bad == 0);

    auto b = fx.bwd;
    b.causal = true;
    const auto grads = flashattn::reference::backward_values(b);
    flashattn::reference::backward(b);
    const std::pair<const std::vector<double>*, const std::vector<float>*> pairs[] = {
        {&grads.dq, &fx.dq}, {&grads.dk, &fx.dk}, {&grads.dv, &fx.dv}};
    for (const auto& [want, got] : pairs)
      for (size_t i = 0; i < want->size(); ++i)
        bad += flashattn::load_as_float(got->data(), t, static_cast<int64_t>(i)) !=
               flashattn::round_to(t, static_cast<float>((*want)[i]));
    CHECK(bad == 0);
  }
}
