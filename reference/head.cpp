// The fp64 one-head oracle entry points (see flashattn/reference.hpp).
#include "head_impl.hpp"

namespace flashattn::reference {

void head_forward(const Head& h, const double* q, const double* k, const double* v, double* out, double* lse) {
  detail::forward_head<double>(h, q, k, v, {}, out, lse);
}

void head_backward(const Head& h, const double* q, const double* k, const double* v, const double* dout,
                   double* dq, double* dk, double* dv, double* dsink, double* dbias) {
  detail::backward_head<double>(h, q, k, v, dout, {}, dq, dk, dv, nullptr, nullptr, dsink, dbias);
}

}  // namespace flashattn::reference
