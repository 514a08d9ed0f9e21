// merge of partial attention results (see flashattn/merge.hpp).
#include "flashattn/merge.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <vector>

#include "flashattn/convert.hpp"
#include "flashattn/error.hpp"
#include "views.hpp"

namespace flashattn {
namespace {

using namespace detail;

void check_view(const ConstTensor& t, const char* name, const ConstTensor& ref) {
  check_tensor(t, name);
  if (t.batch != ref.batch || t.seq != ref.seq || t.heads != ref.heads || t.dim != ref.dim)
    fail(name, " shape [", t.batch, ", ", t.seq, ", ", t.heads, ", ", t.dim, "] must equal o1 shape [", ref.batch, ", ",
         ref.seq, ", ", ref.heads, ", ", ref.dim, "]");
  if (t.dtype != ref.dtype) fail(name, ".dtype (", dtype_name(t.dtype), ") must equal o1.dtype (", dtype_name(ref.dtype), ")");
}

// out may be exactly an operand (in place: each row is read before it is written) or disjoint
// from it; a shifted overlap would read rows already overwritten.
void check_alias(const ConstTensor& out, const ConstTensor& in, const char* in_name) {
  const bool same = out.data == in.data && out.stride_batch == in.stride_batch && out.stride_seq == in.stride_seq &&
                    out.stride_head == in.stride_head;
  if (!same && may_share_elements(out, "out", in, in_name))
    fail("out overlaps ", in_name, " in memory without being the same view");
}

}  // namespace

void merge(const ConstTensor& o1, const float* lse1, const ConstTensor& o2, const float* lse2, const Tensor& out,
           float* lse_out) {
  check_view(o1, "o1", o1);
  check_view(o2, "o2", o1);
  check_view(out, "out", o1);
  check_no_self_overlap(out, "out");
  check_alias(out, o1, "o1");
  check_alias(out, o2, "o2");
  const int64_t rows = o1.batch * o1.seq * o1.heads;
  if (rows > 0) {
    const std::pair<const float*, const char*> lses[] = {{lse1, "lse1"}, {lse2, "lse2"}, {lse_out, "lse_out"}};
    for (const auto& l : lses) {
      if (l.first == nullptr) throw Error(std::string(l.second) + " is null");
      if (reinterpret_cast<uintptr_t>(l.first) % alignof(float) != 0)
        throw Error(std::string(l.second) + " is not 4-byte aligned");
    }
  }
  const float kNegInf = -std::numeric_limits<float>::infinity();
  std::vector<float> row(static_cast<size_t>(o1.dim));
  for (int64_t b = 0; b < o1.batch; ++b)
    for (int64_t h = 0; h < o1.heads; ++h)
      for (int64_t s = 0; s < o1.seq; ++s) {
        const int64_t li = (b * o1.heads + h) * o1.seq + s;
        const float l1 = lse1[li], l2 = lse2[li];
        const float m = std::fmax(l1, l2);
        const int64_t i1 = o1.offset(b, s, h), i2 = o2.offset(b, s, h), io = out.offset(b, s, h);
        if (m == kNegInf) {  // empty in both halves (explicit guard: exp(-inf - -inf) is NaN)
          for (int64_t x = 0; x < o1.dim; ++x) store_from_float(out.data, out.dtype, io + x, 0.0f);
          lse_out[li] = kNegInf;
          continue;
        }
        const float w1 = std::exp(l1 - m), w2 = std::exp(l2 - m);
        const float sum = w1 + w2;
        const float c1 = w1 / sum, c2 = w2 / sum;
        // Read both operands before writing: out may alias either of them.
        for (int64_t x = 0; x < o1.dim; ++x)
          row[x] = c1 * load_as_float(o1.data, o1.dtype, i1 + x) + c2 * load_as_float(o2.data, o2.dtype, i2 + x);
        for (int64_t x = 0; x < o1.dim; ++x) store_from_float(out.data, out.dtype, io + x, row[x]);
        lse_out[li] = m + std::log(sum);
      }
}

}  // namespace flashattn
