// The sm_90a primitives under the emulator (gpu/sm90.cuh, gpu/emu/async.hpp): a TMA + mbarrier +
// wgmma GEMM pipeline gives A·B exactly as a host product does, through K-major and MN-major
// descriptors, and each hazard class of such pipelines is reported when planted: a missing or too
// shallow wgmma wait, a wrong mbarrier parity, a short expect-tx, a missing arrive, a producer that
// does not wait for the consumers' release, a swizzle mismatch between TMA and a descriptor, an
// ordinary store to an in-flight operand, a missing fence.proxy.async, an unwritten operand.
// Compiled like the kernels (FLASHATTN_GPU_EMULATE) into the emulated property runner.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "emu/emu.hpp"
#include "flashattn/convert.hpp"
#include "mma.cuh"
#include "sm90.cuh"
#include "sm90_tensor_map.hpp"

// A named namespace: the reports name kernels from the exported symbol table.
namespace sm90_emu_test {

namespace sm90 = flashattn::gpu::detail::sm90;
using flashattn::gpu::detail::ld;
using flashattn::gpu::detail::smem_raw;
using flashattn::gpu::detail::st;
using T = __nv_bfloat16;

enum class Bug { none, no_wgmma_wait, shallow_wgmma_wait, wrong_parity, short_expect_tx, missing_arrive,
                 no_release_wait, swizzle_mismatch, store_to_operand, bad_maxnreg, a_changed_in_flight };

constexpr int kM = 64, kTileK = 64, kStages = 2;

struct GemmParams {
  CUtensorMap a_map, b_map;   // A [64][K] (K inner); B [N][K] (K-major) or [K][N] (MN-major)
  const uint16_t* a;          // A, read into registers by the wgmma_rs variant
  float* c;                   // [64][N]
  int k_tiles;
  Bug bug;
};

// C = A·Bᵀ (B stored [N][K]: both operands K-major, wgmma_ss) or C = A·B (B stored [K][N]: B
// MN-major, A from registers, wgmma_rs), K in tiles of 64 through a 2-stage ring: a producer thread
// (warpgroup 1) loads each stage by TMA on its `full` barrier after the consumers released it on
// `empty`; the consumer warpgroup 0 runs 4 wgmma per tile.
template <int N, bool kRS>
void gemm(const GemmParams p) {
  constexpr uint32_t kA = kM * kTileK * 2, kB = N * kTileK * 2, kStage = kA + kB;
  const int tid = static_cast<int>(threadIdx.x);
  auto* full = reinterpret_cast<uint64_t*>(smem_raw + kStages * kStage);
  uint64_t* empty = full + kStages;
  if (tid == 0)
    for (int s = 0; s < kStages; ++s) {
      sm90::mbarrier_init(&full[s], 1);
      sm90::mbarrier_init(&empty[s], 128);
    }
  sm90::mbarrier_init_fence();
  __syncthreads();
  if (tid >= 128) {  // producer
    if (p.bug == Bug::bad_maxnreg && tid == 200)
      sm90::setmaxnreg_dec<48>();
    else
      sm90::setmaxnreg_dec<40>();
    if (tid != 128) return;
    for (int kt = 0; kt < p.k_tiles; ++kt) {
      const int s = kt % kStages, round = kt / kStages;
      if (p.bug != Bug::no_release_wait) sm90::mbarrier_wait(&empty[s], (round & 1) ^ 1);
      const uint32_t bytes = (kRS ? kB : kStage) - (p.bug == Bug::short_expect_tx ? 4096 : 0);
      sm90::mbarrier_arrive_expect_tx(&full[s], bytes);
      unsigned char* stage = smem_raw + s * kStage;
      if (kRS) {
        for (int h = 0; h < N / 64; ++h) sm90::tma_load_2d(stage + kA + h * 8192, &p.b_map, &full[s], 64 * h, kTileK * kt);
      } else {
        sm90::tma_load_2d(stage, &p.a_map, &full[s], kTileK * kt, 0);
        sm90::tma_load_2d(stage + kA, &p.b_map, &full[s], kTileK * kt, 0);
      }
    }
    return;
  }
  sm90::setmaxnreg_inc<232>();
  float d[N / 2];
  const int warp = tid / 32, g = tid % 32 / 4, t = tid % 4;
  for (int kt = 0; kt < p.k_tiles; ++kt) {
    const int s = kt % kStages, round = kt / kStages;
    sm90::mbarrier_wait(&full[s], p.bug == Bug::wrong_parity ? (round & 1) ^ 1 : round & 1);
    unsigned char* stage = smem_raw + s * kStage;
    const uint32_t a_at = sm90::smem_addr(stage), b_at = sm90::smem_addr(stage + kA);
    // A from registers: every step's fragment loaded before the first wgmma (they are read in flight).
    uint32_t a[kTileK / 16][4];
    if (kRS)
      for (int j = 0; j < kTileK / 16; ++j)
        for (int i = 0; i < 4; ++i) {
          const int row = 16 * warp + g + 8 * (i % 2), col = kTileK * kt + 16 * j + 2 * t + 8 * (i / 2);
          a[j][i] = ld(reinterpret_cast<const uint32_t*>(p.a + row * kTileK * p.k_tiles + col));
        }
    sm90::wgmma_fence();
    for (int j = 0; j < kTileK / 16; ++j) {
      const bool acc = kt > 0 || j > 0;
      if (kRS) {
        sm90::wgmma_rs<T, N, true>(d, a[j], sm90::mn_major_desc(b_at + 2048 * j, sm90::Swizzle::b128, 8192), acc);
      } else {
        const sm90::Swizzle sa = p.bug == Bug::swizzle_mismatch ? sm90::Swizzle::b64 : sm90::Swizzle::b128;
        sm90::wgmma_ss<T, N, false, false>(d, sm90::k_major_desc(a_at + 32 * j, sa),
                                          sm90::k_major_desc(b_at + 32 * j, sm90::Swizzle::b128), acc);
      }
    }
    if (p.bug == Bug::store_to_operand && kt == 0 && tid == 0) st(reinterpret_cast<uint16_t*>(stage + kA), uint16_t{0});
    if (kRS && p.bug == Bug::a_changed_in_flight && tid == 7) a[0][1] ^= 1u;  // read by the hardware until the wait
    sm90::wgmma_commit();
    if (p.bug == Bug::shallow_wgmma_wait)
      sm90::wgmma_wait<1>();
    else if (p.bug != Bug::no_wgmma_wait)
      sm90::wgmma_wait<0>();
    if (p.bug != Bug::missing_arrive || tid != 5) sm90::mbarrier_arrive(&empty[s]);
  }
  for (int i = 0; i < N / 2; ++i) {
    const int row = 16 * warp + g + 8 * ((i / 2) % 2), col = 8 * (i / 4) + 2 * t + i % 2;
    st(p.c + row * N + col, d[i]);
  }
}

uint16_t bf16(float x) { return flashattn::bf16_bits_from_float(x); }
float value(uint16_t b) { return flashattn::float_from_bf16_bits(b); }

struct Outcome {
  std::string error;
  double max_err = 0;  // against the fp64 product (NaN counts as infinite)
};

// Runs the pipeline with N columns, K = 64 · k_tiles, under schedule seed `seed`.
template <int N, bool kRS>
Outcome run_gemm(Bug bug, int k_tiles, uint64_t seed) {
  const int K = kTileK * k_tiles;
  std::mt19937 rng(static_cast<uint32_t>(seed * 7 + N));
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<uint16_t> a(static_cast<size_t>(kM * K)), b(static_cast<size_t>(N * K));
  for (auto& x : a) x = bf16(u(rng));
  for (auto& x : b) x = bf16(u(rng));
  std::vector<float> c(static_cast<size_t>(kM * N), -1.0f);
  GemmParams p{};
  sm90::TensorMapSpec sa;
  sa.global = a.data();
  sa.rank = 2;
  sa.dims[0] = static_cast<uint64_t>(K), sa.dims[1] = kM;
  sa.strides[1] = static_cast<uint64_t>(2 * K);
  sa.box[0] = kTileK, sa.box[1] = kM;
  sa.swizzle = sm90::Swizzle::b128;
  sm90::encode_tensor_map(&p.a_map, sa);
  sm90::TensorMapSpec sb = sa;
  sb.global = b.data();
  if (kRS) {  // B [K][N]: boxes of 64 columns x 64 rows of K
    sb.dims[0] = N, sb.dims[1] = static_cast<uint64_t>(K);
    sb.strides[1] = 2 * N;
    sb.box[0] = 64, sb.box[1] = kTileK;
  } else {  // B [N][K]: a box of 64 K x N rows
    sb.dims[1] = N;
    sb.box[1] = N;
  }
  sm90::encode_tensor_map(&p.b_map, sb);
  p.a = a.data();
  p.c = c.data();
  p.k_tiles = k_tiles;
  p.bug = bug;
  emu::register_guarded(a.data(), a.data() + a.size(), a.data(), a.size() * 2, "A");
  emu::register_guarded(b.data(), b.data() + b.size(), b.data(), b.size() * 2, "B");
  emu::register_guarded(c.data(), c.data() + c.size(), c.data(), c.size() * 4, "C");
  constexpr int kStage = (kM + N) * kTileK * 2;
  Outcome o;
  emu::set_schedule_seed(seed);
  try {
    emu::launch(gemm<N, kRS>, emu::Dim3{1, 1, 1}, 256, kStages * kStage + 64, p);
  } catch (const std::logic_error& e) {
    o.error = e.what();
  }
  emu::clear_guarded();
  for (int i = 0; i < kM; ++i)
    for (int j = 0; j < N; ++j) {
      double ref = 0;
      for (int k = 0; k < K; ++k)
        ref += static_cast<double>(value(a[static_cast<size_t>(i * K + k)])) *
               value(kRS ? b[static_cast<size_t>(k * N + j)] : b[static_cast<size_t>(j * K + k)]);
      const double e = std::fabs(c[static_cast<size_t>(i * N + j)] - ref);
      o.max_err = std::isnan(e) ? INFINITY : std::max(o.max_err, e);
    }
  return o;
}

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

TEST_CASE("sm90 layouts: descriptor words, swizzle and canonical offsets as the PTX ISA defines them") {
  // start 0x400, LBO 16, SBO 1024, 128-byte swizzle: bits 0-13 = 0x40, 16-29 = 1, 32-45 = 64, 62-63 = 1.
  const sm90::SmemDesc d{0x400, 16, 1024, 0, sm90::Swizzle::b128};
  CHECK(sm90::encode(d) == 0x4000004000010040ull);
  const sm90::SmemDesc back = sm90::decode(sm90::encode(d));
  CHECK(back.start == 0x400);
  CHECK(back.lbo == 16);
  CHECK(back.sbo == 1024);
  CHECK(back.swizzle == sm90::Swizzle::b128);
  CHECK(sm90::decode(uint64_t{5} << 49).base_offset == 5);
  CHECK(sm90::decode(uint64_t{3} << 62).swizzle == sm90::Swizzle::b32);
  // 128 B: 16-byte chunk c of row r (in its 8-row pattern) moves to chunk c ^ r; 64 B: c ^ (r % 4)
  // over 4 chunks; 32 B: c ^ (r % 2) over 2.
  CHECK(sm90::swizzle(0x080, sm90::Swizzle::b128) == 0x090);
  CHECK(sm90::swizzle(0x3F0, sm90::Swizzle::b128) == 0x380);
  CHECK(sm90::swizzle(0x1C4, sm90::Swizzle::b64) == 0x1F4);
  CHECK(sm90::swizzle(0x0A2, sm90::Swizzle::b32) == 0x0B2);
  CHECK(sm90::swizzle(0x3F0, sm90::Swizzle::none) == 0x3F0);
  // K-major, 128 B: (mn 9, k 10) = row 1 of group 1, second 8-element half: 128 + 1024 + 16 + 4.
  CHECK(sm90::canonical_offset(sm90::Major::k, sm90::Swizzle::b128, 16, 1024, 9, 10) == 1172);
  // K-major, no swizzle: core matrices of 8 rows x 16 B; K halves LBO apart, row groups SBO apart.
  CHECK(sm90::canonical_offset(sm90::Major::k, sm90::Swizzle::none, 128, 256, 9, 10) == 16 + 256 + 128 + 4);
  // MN-major, 128 B: (mn 70, k 9) = element 6 of chunk 0 of the second 64-wide run (LBO), K row 1
  // of the second 8-row group (SBO): 12 + 8192 + 128 + 1024.
  CHECK(sm90::canonical_offset(sm90::Major::mn, sm90::Swizzle::b128, 8192, 1024, 70, 9) == 9356);
  // MN-major, no swizzle: 8 MN elements per 16-byte row, K rows 16 B apart, groups SBO / LBO apart.
  CHECK(sm90::canonical_offset(sm90::Major::mn, sm90::Swizzle::none, 2048, 128, 19, 9) == 6 + 2 * 128 + 16 + 2048);
}

TEST_CASE("sm90 tensor maps: cuTensorMapEncodeTiled's rules are checked before anything is encoded") {
  std::vector<uint16_t> x(64 * 64);
  sm90::TensorMapSpec s;
  s.global = x.data();
  s.rank = 2;
  s.dims[0] = 64, s.dims[1] = 64;
  s.strides[1] = 128;
  s.box[0] = 64, s.box[1] = 64;
  s.swizzle = sm90::Swizzle::b128;
  CHECK(sm90::tensor_map_problem(s) == "");
  CHECK(sm90::box_bytes(s) == 8192);
  CUtensorMap map;
  auto problem = [&](sm90::TensorMapSpec bad) { return sm90::tensor_map_problem(bad); };
  sm90::TensorMapSpec bad = s;
  bad.strides[1] = 120;
  CHECK(contains(problem(bad), "strides[1] is not a multiple of 16"));
  CHECK_THROWS_AS(sm90::encode_tensor_map(&map, bad), std::invalid_argument);
  bad = s;
  bad.box[1] = 257;
  CHECK(contains(problem(bad), "box[1] is not in [1, 256]"));
  bad = s;
  bad.box[0] = 32;  // 64 bytes: not the 128-byte swizzle row
  CHECK(contains(problem(bad), "not the swizzle row of 128"));
  bad = s;
  bad.global = reinterpret_cast<const unsigned char*>(x.data()) + 8;
  CHECK(contains(problem(bad), "16-byte aligned"));
  bad = s;
  bad.rank = 6;
  CHECK(contains(problem(bad), "rank 6"));
  bad = s;
  bad.dims[1] = 0;
  CHECK(contains(problem(bad), "dims[1]"));
}

TEST_CASE("sm90 pipeline: TMA + mbarrier + wgmma give the product, K-major and MN-major, every schedule") {
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    CAPTURE(seed);
    const Outcome ss = run_gemm<64, false>(Bug::none, 4, seed);
    CHECK(ss.error == "");
    CHECK(ss.max_err < 1e-4);
    const Outcome rs = run_gemm<128, true>(Bug::none, 3, seed);
    CHECK(rs.error == "");
    CHECK(rs.max_err < 1e-4);
  }
}

TEST_CASE("sm90 pipeline: each planted hazard is reported or corrupts the product") {
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    CAPTURE(seed);
    CHECK(contains(run_gemm<64, false>(Bug::no_wgmma_wait, 4, seed).error, "operand of the in-flight wgmma"));
    CHECK(contains(run_gemm<64, false>(Bug::shallow_wgmma_wait, 4, seed).error, "operand of the in-flight wgmma"));
    // A wrong parity lets the consumers on before the data (or, when the data landed first, makes
    // some of them wait for a phase that can never come).
    const std::string parity = run_gemm<64, false>(Bug::wrong_parity, 4, seed).error;
    CHECK((contains(parity, "has not landed") || contains(parity, "has not waited for that phase") ||
           contains(parity, "deadlock")));
    const std::string short_tx = run_gemm<64, false>(Bug::short_expect_tx, 4, seed).error;
    CHECK((contains(short_tx, "has not landed") || contains(short_tx, "deadlock")));
    const std::string arrive = run_gemm<64, false>(Bug::missing_arrive, 4, seed).error;
    CHECK(contains(arrive, "emu: deadlock: "));
    CHECK(contains(arrive, "thread 128 waits for the phase of parity 0 of the mbarrier"));
    CHECK(contains(arrive, "127 of 128 arrivals"));
    CHECK(contains(run_gemm<64, false>(Bug::store_to_operand, 4, seed).error, "operand of the in-flight wgmma"));
    CHECK(contains(run_gemm<64, false>(Bug::bad_maxnreg, 1, seed).error, "ask for different counts"));
    CHECK(contains(run_gemm<128, true>(Bug::a_changed_in_flight, 1, seed).error,
                   "an A register of thread 7 of its warpgroup changed while the wgmma was in flight"));
    const Outcome swz = run_gemm<64, false>(Bug::swizzle_mismatch, 1, seed);
    CHECK(swz.error == "");
    CHECK(swz.max_err > 0.1);
  }
  // A producer that does not wait for the release overwrites a stage still in use: caught whenever
  // the schedule lets it run ahead, which some of these seeds do.
  int caught = 0;
  for (uint64_t seed = 1; seed <= 8; ++seed) caught += run_gemm<64, false>(Bug::no_release_wait, 6, seed).error != "";
  CHECK(caught > 0);
}

// One tile of every operand layout: A (64 x K) and B (N x K) loaded by TMA with swizzle S, K-major
// (rows along M / N, K = one swizzle row) or MN-major (rows along K, runs of one swizzle row along
// M / N, the runs a box apart: LBO), multiplied by K / 16 wgmma.
struct TileParams {
  CUtensorMap a_map, b_map;
  float* c;  // [64][N]
};

template <int N, sm90::Swizzle S, bool kTransA, bool kTransB>
void one_tile(const TileParams p) {
  constexpr int W = 1 << sm90::swizzle_log2(S), K = 8 * W, kRow = 16 * W;
  constexpr uint32_t kA = 64 * K * 2, kB = N * K * 2, kRunA = K * kRow;  // kRun: one MN-major box
  auto* bar = reinterpret_cast<uint64_t*>(smem_raw + kA + kB);
  const int tid = static_cast<int>(threadIdx.x);
  if (tid == 0) {
    sm90::mbarrier_init(bar, 1);
    sm90::mbarrier_arrive_expect_tx(bar, kA + kB);
    for (int r = 0; r < (kTransA ? 64 / K : 1); ++r) sm90::tma_load_2d(smem_raw + r * kRunA, &p.a_map, bar, r * K, 0);
    for (int r = 0; r < (kTransB ? N / K : 1); ++r) sm90::tma_load_2d(smem_raw + kA + r * kRunA, &p.b_map, bar, r * K, 0);
  }
  __syncthreads();
  sm90::mbarrier_wait(bar, 0);
  float d[N / 2];
  const uint32_t a = sm90::smem_addr(smem_raw), b = sm90::smem_addr(smem_raw + kA);
  sm90::wgmma_fence();
  for (int j = 0; j < K / 16; ++j) {
    const uint64_t da = kTransA ? sm90::mn_major_desc(a + 16 * kRow * j, S, kRunA) : sm90::k_major_desc(a + 32 * j, S);
    const uint64_t db = kTransB ? sm90::mn_major_desc(b + 16 * kRow * j, S, kRunA) : sm90::k_major_desc(b + 32 * j, S);
    sm90::wgmma_ss<T, N, kTransA, kTransB>(d, da, db, j > 0);
  }
  sm90::wgmma_commit();
  sm90::wgmma_wait<0>();
  const int warp = tid / 32, g = tid % 32 / 4, t = tid % 4;
  for (int i = 0; i < N / 2; ++i) st(p.c + (16 * warp + g + 8 * ((i / 2) % 2)) * N + 8 * (i / 4) + 2 * t + i % 2, d[i]);
}

// Returns the largest error of one_tile<N, S, TransA, TransB> against the fp64 product.
template <int N, sm90::Swizzle S, bool kTransA, bool kTransB>
double tile_error(uint64_t seed) {
  constexpr int K = 8 << sm90::swizzle_log2(S);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_real_distribution<float> u(-1, 1);
  // Stored as the layouts ask: A [64][K] or (trans) [K][64]; B [N][K] or (trans) [K][N].
  std::vector<uint16_t> a(64 * K), b(static_cast<size_t>(N * K));
  for (auto& x : a) x = bf16(u(rng));
  for (auto& x : b) x = bf16(u(rng));
  auto spec = [&](const std::vector<uint16_t>& m, int rows_mn, bool trans) {
    sm90::TensorMapSpec s;
    s.global = m.data();
    s.rank = 2;
    s.swizzle = S;
    s.dims[0] = static_cast<uint64_t>(trans ? rows_mn : K), s.dims[1] = static_cast<uint64_t>(trans ? K : rows_mn);
    s.strides[1] = 2 * s.dims[0];
    s.box[0] = K, s.box[1] = static_cast<uint32_t>(trans ? K : rows_mn);
    return s;
  };
  TileParams p{};
  sm90::encode_tensor_map(&p.a_map, spec(a, 64, kTransA));
  sm90::encode_tensor_map(&p.b_map, spec(b, N, kTransB));
  std::vector<float> c(static_cast<size_t>(64 * N), -1.0f);
  p.c = c.data();
  emu::set_schedule_seed(seed);
  emu::launch(one_tile<N, S, kTransA, kTransB>, emu::Dim3{1, 1, 1}, 128, (64 + N) * K * 2 + 64, p);
  double worst = 0;
  for (int i = 0; i < 64; ++i)
    for (int j = 0; j < N; ++j) {
      double ref = 0;
      for (int k = 0; k < K; ++k)
        ref += static_cast<double>(value(kTransA ? a[static_cast<size_t>(k * 64 + i)] : a[static_cast<size_t>(i * K + k)])) *
               value(kTransB ? b[static_cast<size_t>(k * N + j)] : b[static_cast<size_t>(j * K + k)]);
      const double e = std::fabs(c[static_cast<size_t>(i * N + j)] - ref);
      worst = std::isnan(e) ? INFINITY : std::max(worst, e);
    }
  return worst;
}

TEST_CASE("sm90 wgmma: every swizzle mode, K-major and MN-major A and B, N from 16 to 256") {
  using S = sm90::Swizzle;
  for (uint64_t seed = 1; seed <= 2; ++seed) {
    CAPTURE(seed);
    CHECK(tile_error<64, S::b128, false, false>(seed) < 1e-4);
    CHECK(tile_error<256, S::b128, false, true>(seed) < 1e-4);
    CHECK(tile_error<128, S::b128, true, false>(seed) < 1e-4);
    CHECK(tile_error<192, S::b128, true, true>(seed) < 1e-4);
    CHECK(tile_error<16, S::b64, false, false>(seed) < 1e-4);
    CHECK(tile_error<96, S::b64, true, true>(seed) < 1e-4);
    CHECK(tile_error<32, S::b64, false, true>(seed) < 1e-4);
    CHECK(tile_error<32, S::b32, false, false>(seed) < 1e-4);
    CHECK(tile_error<16, S::b32, true, true>(seed) < 1e-4);
    CHECK(tile_error<64, S::b32, true, false>(seed) < 1e-4);
  }
}

// Every thread of a warpgroup stores part of A (64 x 16) and B (64 x 16, K-major, 128-byte swizzle)
// with ordinary stores, then the warpgroup multiplies them: the stores need a fence.proxy.async.
enum class StoreBug { none, no_fence, b_unfenced, b_unwritten, read_before_wait, accumulator_written };
struct StoreParams {
  const uint16_t* a;  // [64][16]
  const uint16_t* b;  // [64][16]
  float* c;           // [64][64]
  StoreBug bug;
};

void stored_operands(const StoreParams p) {
  const int tid = static_cast<int>(threadIdx.x);
  auto put = [&](int base, const uint16_t* src, int row) {  // row `row` of a K-major 128-byte-swizzled tile
    for (int k = 0; k < 16; ++k) {
      const uint32_t at = sm90::swizzle(static_cast<uint32_t>(base + row * 128 + 2 * k), sm90::Swizzle::b128);
      st(reinterpret_cast<uint16_t*>(smem_raw + at), ld(src + row * 16 + k));
    }
  };
  if (tid < 64) put(0, p.a, tid);
  if (tid >= 64 && p.bug != StoreBug::b_unwritten) put(8192, p.b, tid - 64);
  __syncthreads();  // every store is made before any fence: a fence covers only its own thread's
  if (p.bug != StoreBug::no_fence && (p.bug != StoreBug::b_unfenced || tid < 64)) sm90::fence_proxy_async();
  __syncthreads();
  float d[32];
  sm90::wgmma_fence();
  sm90::wgmma_ss<T, 64, false, false>(d, sm90::k_major_desc(sm90::smem_addr(smem_raw), sm90::Swizzle::b128),
                                      sm90::k_major_desc(sm90::smem_addr(smem_raw + 8192), sm90::Swizzle::b128), false);
  if (p.bug == StoreBug::accumulator_written) d[3] = 0.0f;  // while the wgmma still writes it
  sm90::wgmma_commit();
  if (p.bug != StoreBug::read_before_wait) sm90::wgmma_wait<0>();
  const int warp = tid / 32, g = tid % 32 / 4, t = tid % 4;
  for (int i = 0; i < 32; ++i) st(p.c + (16 * warp + g + 8 * ((i / 2) % 2)) * 64 + 8 * (i / 4) + 2 * t + i % 2, d[i]);
  if (p.bug == StoreBug::read_before_wait) sm90::wgmma_wait<0>();
}

Outcome run_stored(StoreBug bug, uint64_t seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<uint16_t> a(64 * 16), b(64 * 16);
  for (auto& x : a) x = bf16(u(rng));
  for (auto& x : b) x = bf16(u(rng));
  std::vector<float> c(64 * 64);
  Outcome o;
  emu::set_schedule_seed(seed);
  try {
    emu::launch(stored_operands, emu::Dim3{1, 1, 1}, 128, 16384, StoreParams{a.data(), b.data(), c.data(), bug});
  } catch (const std::logic_error& e) {
    o.error = e.what();
  }
  for (int i = 0; i < 64; ++i)
    for (int j = 0; j < 64; ++j) {
      double ref = 0;
      for (int k = 0; k < 16; ++k) ref += static_cast<double>(value(a[i * 16 + k])) * value(b[j * 16 + k]);
      const double e = std::fabs(c[static_cast<size_t>(i * 64 + j)] - ref);
      o.max_err = std::isnan(e) ? INFINITY : std::max(o.max_err, e);
    }
  return o;
}

TEST_CASE("sm90 wgmma from ordinary stores: correct after fence.proxy.async, reported without it; NaN before the wait") {
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    CAPTURE(seed);
    const Outcome ok = run_stored(StoreBug::none, seed);
    CHECK(ok.error == "");
    CHECK(ok.max_err < 1e-5);
    CHECK(contains(run_stored(StoreBug::no_fence, seed).error, "with no fence.proxy.async after it"));
    CHECK(contains(run_stored(StoreBug::b_unfenced, seed).error, "with no fence.proxy.async after it"));
    CHECK(contains(run_stored(StoreBug::b_unwritten, seed).error, "was never written in this block"));
    // Accumulators read before their wait_group hold NaN.
    const Outcome early = run_stored(StoreBug::read_before_wait, seed);
    CHECK(early.error == "");
    CHECK(std::isinf(early.max_err));
    CHECK(contains(run_stored(StoreBug::accumulator_written, seed).error,
                   "accumulator register 3 of thread 0 of its warpgroup was written while the wgmma was in flight"));
  }
}

// stmatrix is the inverse of ldmatrix (plain and transposed): a warp's registers go out and come
// back unchanged.
struct StmatrixParams {
  uint32_t* out;  // [32][8]: each lane's registers after the round trip (4 plain, 4 transposed)
};

void stmatrix_round_trip(const StmatrixParams p) {
  const int l = static_cast<int>(threadIdx.x);
  uint32_t r[4], back[4], rt[4], back_t[4];
  for (int i = 0; i < 4; ++i) r[i] = static_cast<uint32_t>(l * 131 + i * 7919) * 2654435761u;
  for (int i = 0; i < 4; ++i) rt[i] = r[i] ^ 0x5A5A5A5Au;
  unsigned char* row = smem_raw + (l / 8) * 128 + (l % 8) * 16;
  sm90::stmatrix_x4(row, r);
  __syncthreads();
  flashattn::gpu::detail::ldmatrix_x4(back, row);
  __syncthreads();
  sm90::stmatrix_x4_trans(row + 512, rt);
  __syncthreads();
  flashattn::gpu::detail::ldmatrix_x4_trans(back_t, row + 512);
  for (int i = 0; i < 4; ++i) {
    st(p.out + l * 8 + i, back[i] ^ r[i]);
    st(p.out + l * 8 + 4 + i, back_t[i] ^ rt[i]);
  }
}

TEST_CASE("sm90 stmatrix: the inverse of ldmatrix, plain and transposed") {
  std::vector<uint32_t> out(32 * 8, 1);
  emu::set_schedule_seed(1);
  emu::launch(stmatrix_round_trip, emu::Dim3{1, 1, 1}, 32, 1024, StmatrixParams{out.data()});
  for (uint32_t x : out) CHECK(x == 0);
}

}  // namespace sm90_emu_test
