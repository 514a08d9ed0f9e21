// Printing, parsing and generation of props::Case.
#include "props/case.hpp"

#include <algorithm>
#include <iomanip>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace props {
namespace {

using flashattn::DType;

constexpr int kFloatDigits = std::numeric_limits<float>::max_digits10;  // exact float round trip

const char* layout_name(Layout l) {
  switch (l) {
    case Layout::bshd: return "bshd";
    case Layout::bhsd: return "bhsd";
    case Layout::padded: return "padded";
  }
  return "invalid";
}

const char* values_name(Values v) {
  switch (v) {
    case Values::normal: return "normal";
    case Values::large: return "large";
    case Values::ties: return "ties";
    case Values::zero_v: return "zero_v";
    case Values::heavy: return "heavy";
  }
  return "invalid";
}

const char* bias_name(BiasKind b) {
  switch (b) {
    case BiasKind::off: return "off";
    case BiasKind::full: return "full";
    case BiasKind::rows_keys: return "rows_keys";
    case BiasKind::head_keys: return "head_keys";
    case BiasKind::stride0: return "stride0";
  }
  return "invalid";
}

const char* blocks_name(BlockSparse b) {
  switch (b) {
    case BlockSparse::off: return "off";
    case BlockSparse::lists: return "lists";
    case BlockSparse::bits: return "bits";
    case BlockSparse::shared: return "shared";
    case BlockSparse::rule: return "rule";
  }
  return "invalid";
}

const char* alibi_name(Alibi a) {
  switch (a) {
    case Alibi::off: return "off";
    case Alibi::shared: return "shared";
    case Alibi::per_batch: return "per_batch";
  }
  return "invalid";
}

// Writes a list as "a,b,c", or "-" when empty.
void write_list(std::ostream& os, const std::vector<int32_t>& v) {
  if (v.empty()) {
    os << '-';
    return;
  }
  for (size_t i = 0; i < v.size(); ++i) os << (i ? "," : "") << v[i];
}

[[noreturn]] void bad(const std::string& key, const std::string& value) {
  throw std::invalid_argument("case field " + key + "=" + value + " is not valid");
}

int64_t to_int(const std::string& key, const std::string& s) {
  try {
    size_t used = 0;
    const long long v = std::stoll(s, &used);
    if (used != s.size()) bad(key, s);
    return v;
  } catch (const std::logic_error&) {
    bad(key, s);
  }
}

float to_float(const std::string& key, const std::string& s) {
  try {
    size_t used = 0;
    const float v = std::stof(s, &used);
    if (used != s.size()) bad(key, s);
    return v;
  } catch (const std::logic_error&) {
    bad(key, s);
  }
}

std::vector<int32_t> to_list(const std::string& key, const std::string& s) {
  std::vector<int32_t> r;
  if (s == "-") return r;
  std::istringstream is(s);
  std::string item;
  while (std::getline(is, item, ',')) r.push_back(static_cast<int32_t>(to_int(key, item)));
  return r;
}

// A value option as printed in a case line: bools 0/1, floats exactly, an empty scale "default".
std::string value_text(bool v) { return v ? "1" : "0"; }
std::string value_text(int64_t v) { return std::to_string(v); }
std::string value_text(float v) {
  std::ostringstream s;
  s << std::setprecision(kFloatDigits) << v;
  return s.str();
}
std::string value_text(const std::optional<float>& v) { return v ? value_text(*v) : "default"; }

// Reads a value option printed by value_text.
void read_value(const std::string& key, const std::string& s, bool& v) { v = to_int(key, s) != 0; }
void read_value(const std::string& key, const std::string& s, int64_t& v) { v = to_int(key, s); }
void read_value(const std::string& key, const std::string& s, float& v) { v = to_float(key, s); }
void read_value(const std::string& key, const std::string& s, std::optional<float>& v) {
  if (s == "default")
    v.reset();
  else
    v = to_float(key, s);
}

template <class E>
E to_enum(const std::string& key, const std::string& s, const char* (*name)(E), int count) {
  for (int i = 0; i < count; ++i)
    if (s == name(static_cast<E>(i))) return static_cast<E>(i);
  bad(key, s);
}

// Cost of one score element in fit_work, in units of Case::work() (one multiply-add of a head dim).
constexpr int64_t kScoreCost = 32;

const char* dtype_label(DType t) { return flashattn::dtype_name(t); }

// Lengths of a regular case (>= 2 where max allows): a few rows (one or two tiny tiles), a few tiny
// tiles, a default CPU tile edge (64, 128, 192, 256) +-1, or anything up to max.
rc::Gen<int64_t> gen_seqlen(int64_t max) {
  return rc::gen::map(
      rc::gen::weightedOneOf<int64_t>({
          {1, rc::gen::inRange<int64_t>(2, 9)},
          {2, rc::gen::inRange<int64_t>(9, 41)},
          {3, rc::gen::apply([](int64_t edge, int64_t delta) { return edge + delta; },
                             rc::gen::elementOf(std::vector<int64_t>{64, 128, 192, 256}), rc::gen::inRange<int64_t>(-1, 2))},
          {4, rc::gen::inRange<int64_t>(2, std::max<int64_t>(2, max) + 1)},
      }),
      [max](int64_t n) { return std::max<int64_t>(1, std::min(n, max)); });
}

// Key length of a regular sequence with nq query rows: the same (self-attention), close to it, or
// independent.
rc::Gen<int64_t> gen_seqlen_k(int64_t nq, int64_t max) {
  return rc::gen::map(
      rc::gen::weightedOneOf<int64_t>({
          {2, rc::gen::just(nq)},
          {1, rc::gen::map(rc::gen::inRange<int64_t>(-2, 3), [nq](int64_t d) { return nq + d; })},
          {4, gen_seqlen(max)},
      }),
      [max](int64_t n) { return std::max<int64_t>(1, std::min(n, max)); });
}

// Head dims: the GPU set, small odd dims, or anything up to max.
rc::Gen<int64_t> gen_dim(int64_t max) {
  return rc::gen::weightedOneOf<int64_t>({
      {3, rc::gen::elementOf(std::vector<int64_t>{32, 64, 96, 128, 256})},
      {2, rc::gen::inRange<int64_t>(1, 9)},
      {3, rc::gen::inRange<int64_t>(1, max + 1)},
  });
}

// One side of a window: no key beyond the diagonal, a few keys, or any width up to `reach` (past
// every sequence too).
rc::Gen<int64_t> gen_window_side(int64_t reach) {
  return rc::gen::weightedOneOf<int64_t>({
      {1, rc::gen::just<int64_t>(0)},
      {5, rc::gen::inRange<int64_t>(1, 9)},
      {4, rc::gen::inRange<int64_t>(0, reach)},
  });
}

// Returns half of n rounded up (n >= 1).
int64_t halve(int64_t n) { return (n + 1) / 2; }

// Returns the cost of a case for fitting: Case::work() plus kScoreCost per score element (the
// per-element exp, masking and tile overhead that a small head dim does not amortise). >= work().
int64_t cost(const Case& c) { return c.work() + kScoreCost * (c.work() / c.dim); }

// Returns whether d is one of the GPU's head dims.
bool gpu_dim(int64_t d) { return d == 32 || d == 64 || d == 96 || d == 128 || d == 256; }

// Returns the next smaller GPU head dim (256, 128, 96, 64, 32) for those above 32, else half of d.
int64_t smaller_dim(int64_t d) {
  switch (d) {
    case 256: return 128;
    case 128: return 96;
    case 96: return 64;
    case 64: return 32;
    default: return halve(d);
  }
}

// Halves the longest sequence length (q or k); returns false if every length is <= 1.
bool halve_longest(Case& c) {
  if (c.varlen()) {
    auto longest = [](std::vector<int32_t>& v) { return std::max_element(v.begin(), v.end()); };
    auto iq = longest(c.varlen_q), ik = longest(c.varlen_k);
    if (std::max(*iq, *ik) <= 1) return false;
    if (*iq >= *ik) *iq = static_cast<int32_t>(halve(*iq));
    else *ik = static_cast<int32_t>(halve(*ik));
    return true;
  }
  if (std::max(c.seqlen_q, c.seqlen_k) <= 1) return false;
  if (c.seqlen_q >= c.seqlen_k) c.seqlen_q = halve(c.seqlen_q);
  else c.seqlen_k = halve(c.seqlen_k);
  return true;
}

// Drops one key/value head, else one sequence, else one query head of the group (GQA goes last);
// returns false if there is one of each.
bool drop_width(Case& c, int64_t min_group) {
  if (c.heads_k > 1) --c.heads_k;
  else if (c.batch > 1) {
    --c.batch;
    if (c.varlen()) {
      c.varlen_q.pop_back();
      c.varlen_k.pop_back();
    }
  } else if (c.group > min_group) --c.group;
  else return false;
  return true;
}

// Fits the case's cost (cost()) into `budget`. keep_lengths: drop heads and sequences, then lower
// the head dim (a GPU dim through the GPU dims down to 32, another by halving down to 8), and only
// then halve lengths (long sequences, several tiles); else halve the longest length first (many
// and wide heads). Then sums the varlen lengths and bounds seqlens_k by the keys left.
void fit_work(Case& c, int64_t budget, int64_t min_group, bool keep_lengths) {
  while (cost(c) > budget) {
    if (keep_lengths) {
      if (drop_width(c, min_group)) continue;
      if (c.dim > (gpu_dim(c.dim) ? 32 : 8)) {
        c.dim = smaller_dim(c.dim);
        continue;
      }
      if (halve_longest(c)) continue;
    } else {
      if (halve_longest(c)) continue;
      if (drop_width(c, min_group)) continue;
    }
    break;  // one row, one key, one head: nothing left to shrink
  }
  if (c.varlen()) {
    c.seqlen_q = c.seqlen_k = 0;
    for (int32_t n : c.varlen_q) c.seqlen_q += n;
    for (int32_t n : c.varlen_k) c.seqlen_k += n;
  }
  if (!c.key_lengths.empty()) {
    c.key_lengths.resize(static_cast<size_t>(c.batch));
    for (int64_t s = 0; s < c.batch; ++s) {
      const int32_t rows = c.varlen() ? c.varlen_k[s] : static_cast<int32_t>(c.seqlen_k);
      c.key_lengths[s] = std::min(c.key_lengths[s], rows);
    }
  }
}

// The degenerate shapes a case may be turned into (1 in 10 cases): no row sees two keys.
enum class Degenerate : uint8_t {
  one_key,       // every sequence has one key (seqlen_k = 1): P is one-hot, dS = 0
  one_row,       // one row and one key per sequence
  diagonal,      // window (0, 0): every row sees at most its diagonal key
  no_keys,       // seqlens_k = 0 everywhere: every row is empty, out = 0, LSE = -inf
};

// Draws a mode flag: -1 sometimes (with `weight` in 4), 0 never, 1 always.
bool draw_mode(int mode, int weight) {
  if (mode >= 0) return mode == 1;
  return *rc::gen::weightedElement<bool>({{4 - weight, false}, {weight, true}});
}

}  // namespace

int64_t Case::work() const {
  int64_t pairs = 0;
  if (varlen()) {
    for (size_t s = 0; s < varlen_q.size(); ++s) pairs += int64_t{varlen_q[s]} * varlen_k[s];
  } else {
    pairs = batch * seqlen_q * seqlen_k;
  }
  return pairs * heads_q() * dim;
}

std::vector<int64_t> Case::longest() const {
  if (!varlen()) return {seqlen_q, seqlen_k};
  return {*std::max_element(varlen_q.begin(), varlen_q.end()), *std::max_element(varlen_k.begin(), varlen_k.end())};
}

std::vector<int64_t> Case::bias_sizes() const {
  if (bias == BiasKind::off) return {0, 0, 0, 0};
  int64_t rows = seqlen_q, keys = seqlen_k;
  if (varlen()) {
    rows = std::max<int64_t>(1, *std::max_element(varlen_q.begin(), varlen_q.end()));
    keys = *std::max_element(varlen_k.begin(), varlen_k.end());
  }
  const bool per_seq = bias == BiasKind::full || bias == BiasKind::stride0;
  return {per_seq ? batch : 1, bias == BiasKind::head_keys ? 1 : rows, bias == BiasKind::rows_keys ? 1 : heads_q(), keys};
}

std::ostream& operator<<(std::ostream& os, const Case& c) {
  std::ostringstream s;
  s << std::setprecision(kFloatDigits);
  s << "b=" << c.batch << " hk=" << c.heads_k << " g=" << c.group << " nq=" << c.seqlen_q << " nk=" << c.seqlen_k
    << " d=" << c.dim << " dtype=" << dtype_label(c.dtype);
  flashattn::for_each_value_option(c, [&s](const char* name, const auto& v) { s << ' ' << name << '=' << value_text(v); });
  s << " alibi=" << alibi_name(c.alibi) << " seqlens_k=";
  write_list(s, c.key_lengths);
  s << " varlen_q=";
  write_list(s, c.varlen_q);
  s << " varlen_k=";
  write_list(s, c.varlen_k);
  s << " layout=" << layout_name(c.layout) << " offset=" << (c.offset ? 1 : 0) << " values=" << values_name(c.values)
    << " seed=" << c.seed;
  // Fields of later features are printed only when used, so older lines still parse and print alike.
  if (c.bias != BiasKind::off)
    s << " bias=" << bias_name(c.bias) << " bias_dtype=" << dtype_label(c.bias_dtype) << " bias_inf=" << (c.bias_inf ? 1 : 0);
  if (c.dropout_p != 0) s << " dropout=" << c.dropout_p;
  if (c.blocks != BlockSparse::off)
    s << " blocks=" << blocks_name(c.blocks) << " block_q=" << c.block_q << " block_k=" << c.block_k;
  return os << s.str();
}

std::string to_string(const Case& c) {
  std::ostringstream os;
  os << c;
  return os.str();
}

void showValue(const Case& c, std::ostream& os) { os << c; }

Case parse_case(const std::string& line) {
  std::map<std::string, std::string> f;
  std::istringstream is(line);
  std::string tok;
  while (is >> tok) {
    const size_t eq = tok.find('=');
    if (eq == std::string::npos) throw std::invalid_argument("case token '" + tok + "' is not key=value");
    f[tok.substr(0, eq)] = tok.substr(eq + 1);
  }
  auto take = [&](const char* key) {
    auto it = f.find(key);
    if (it == f.end()) throw std::invalid_argument(std::string("case line lacks field ") + key);
    std::string v = it->second;
    f.erase(it);
    return v;
  };
  Case c;
  c.batch = to_int("b", take("b"));
  c.heads_k = to_int("hk", take("hk"));
  c.group = to_int("g", take("g"));
  c.seqlen_q = to_int("nq", take("nq"));
  c.seqlen_k = to_int("nk", take("nk"));
  c.dim = to_int("d", take("d"));
  c.dtype = to_enum<DType>("dtype", take("dtype"), dtype_label, 3);
  // Lines printed before the options were listed spell three of them short.
  for (const auto& [old_key, key] : {std::pair<std::string, std::string>{"wl", "window_left"}, {"wr", "window_right"},
                                     {"doff", "diagonal_offset"}}) {
    if (auto it = f.find(old_key); it != f.end() && !f.count(key)) {
      f[key] = it->second;
      f.erase(it);
    }
  }
  // An option absent from a line (one older than it) keeps its default.
  flashattn::for_each_value_option(c, [&](const char* name, auto& v) {
    if (f.count(name)) read_value(name, take(name), v);
  });
  c.alibi = to_enum<Alibi>("alibi", take("alibi"), alibi_name, 3);
  c.key_lengths = to_list("seqlens_k", take("seqlens_k"));
  c.varlen_q = to_list("varlen_q", take("varlen_q"));
  c.varlen_k = to_list("varlen_k", take("varlen_k"));
  c.layout = to_enum<Layout>("layout", take("layout"), layout_name, 3);
  c.offset = to_int("offset", take("offset")) != 0;
  c.values = to_enum<Values>("values", take("values"), values_name, 5);
  c.seed = static_cast<uint64_t>(to_int("seed", take("seed")));
  if (f.count("bias")) {
    c.bias = to_enum<BiasKind>("bias", take("bias"), bias_name, 5);
    c.bias_dtype = to_enum<DType>("bias_dtype", take("bias_dtype"), dtype_label, 3);
    c.bias_inf = to_int("bias_inf", take("bias_inf")) != 0;
  }
  if (f.count("dropout")) c.dropout_p = to_float("dropout", take("dropout"));
  if (f.count("blocks")) {
    c.blocks = to_enum<BlockSparse>("blocks", take("blocks"), blocks_name, 5);
    c.block_q = to_int("block_q", take("block_q"));
    c.block_k = to_int("block_k", take("block_k"));
    if (c.block_q < 1 || c.block_k < 1) throw std::invalid_argument("block_q and block_k must be >= 1");
  }
  if (!f.empty()) throw std::invalid_argument("case line has unknown field " + f.begin()->first);
  if (c.varlen_q.size() != c.varlen_k.size())
    throw std::invalid_argument("varlen_q and varlen_k must have the same number of sequences");
  return c;
}

bool operator==(const Case& a, const Case& b) { return to_string(a) == to_string(b); }

rc::Gen<Case> gen_case(const CaseSpace& space) {
  return rc::gen::resize(rc::kNominalSize, rc::gen::exec([space] {
    Case c;
    // Regular cases (9 in 10) aim at what the properties are about: rows that see several keys,
    // several and partial tiles. Degenerate ones (1 in 10) are drawn on purpose, below.
    const bool degenerate = *rc::gen::weightedElement<bool>({{9, false}, {1, true}});
    c.batch = *rc::gen::weightedElement<int64_t>({{2, 1}, {2, 2}, {1, 3}});
    c.heads_k = *rc::gen::weightedElement<int64_t>({{3, 1}, {2, 2}, {1, 3}, {1, 4}});
    c.group = space.min_group + *rc::gen::weightedElement<int64_t>({{3, 0}, {2, 1}, {1, 2}, {1, 3}});
    c.dim = *gen_dim(space.max_dim);
    c.dtype = *rc::gen::elementOf(space.dtypes);
    const int64_t max_len = space.max_seqlen;
    if (draw_mode(space.varlen, 1)) {
      for (int64_t s = 0; s < c.batch; ++s) {
        // Empty sequences (0 rows, 0 keys) are part of the contract too.
        const int64_t nq = *rc::gen::weightedOneOf<int64_t>({{1, rc::gen::just<int64_t>(0)}, {9, gen_seqlen(max_len)}});
        const int64_t nk =
            *rc::gen::weightedOneOf<int64_t>({{1, rc::gen::just<int64_t>(0)}, {9, gen_seqlen_k(std::max<int64_t>(nq, 1), max_len)}});
        c.varlen_q.push_back(static_cast<int32_t>(nq));
        c.varlen_k.push_back(static_cast<int32_t>(nk));
      }
    } else {
      c.seqlen_q = *gen_seqlen(max_len);
      c.seqlen_k = *gen_seqlen_k(c.seqlen_q, max_len);
    }
    if (space.masks) {
      c.causal = *rc::gen::weightedElement<bool>({{3, false}, {1, true}});
      int64_t longest = std::max(c.seqlen_q, c.seqlen_k);  // rows or keys of the longest sequence
      for (size_t s = 0; s < c.varlen_q.size(); ++s) longest = std::max<int64_t>({longest, c.varlen_q[s], c.varlen_k[s]});
      if (*rc::gen::weightedElement<bool>({{3, false}, {2, true}})) {
        const int64_t reach = longest + 2;  // windows wider than every sequence too
        const int sides = *rc::gen::weightedElement<int>({{2, 3}, {1, 1}, {1, 2}});  // bit 0: left, bit 1: right
        if (sides & 1) c.window_left = *gen_window_side(reach);
        if (sides & 2) c.window_right = *gen_window_side(reach);
      }
      // A moved diagonal (a block of a longer sequence, as ring attention computes): 1 in 4.
      if (*rc::gen::weightedElement<bool>({{3, false}, {1, true}}))
        c.diagonal_offset = *rc::gen::inRange<int64_t>(-longest - 1, longest + 2);
      c.alibi = *rc::gen::weightedElement<Alibi>({{3, Alibi::off}, {1, Alibi::shared}, {1, Alibi::per_batch}});
    }
    if (space.softcap && *rc::gen::weightedElement<bool>({{3, false}, {1, true}}))
      c.softcap = *rc::gen::elementOf(std::vector<float>{0.5f, 2.0f, 30.0f, 50.0f});
    if ((space.masks || space.key_lengths == 1) && draw_mode(space.key_lengths, 1)) {
      for (int64_t s = 0; s < c.batch; ++s) {
        const int64_t rows = c.varlen() ? c.varlen_k[s] : c.seqlen_k;
        // All keys, some (at least one), or none.
        c.key_lengths.push_back(static_cast<int32_t>(*rc::gen::weightedOneOf<int64_t>(
            {{2, rc::gen::just(rows)}, {7, rc::gen::inRange<int64_t>(std::min<int64_t>(1, rows), rows + 1)},
             {1, rc::gen::just<int64_t>(0)}})));
      }
    }
    if (degenerate) {
      const Degenerate kind = *rc::gen::elementOf(
          std::vector<Degenerate>{Degenerate::one_key, Degenerate::one_row, Degenerate::diagonal, Degenerate::no_keys});
      auto clamp = [](int64_t& n) { n = std::min<int64_t>(n, 1); };
      auto clamp32 = [](int32_t& n) { n = std::min<int32_t>(n, 1); };
      switch (kind) {
        case Degenerate::one_row:
          clamp(c.seqlen_q);
          for (int32_t& n : c.varlen_q) clamp32(n);
          [[fallthrough]];
        case Degenerate::one_key:
          clamp(c.seqlen_k);
          for (int32_t& n : c.varlen_k) clamp32(n);
          break;
        case Degenerate::diagonal:
          if (space.masks) {
            c.window_left = c.window_right = 0;
          } else {
            clamp(c.seqlen_k);  // one key where windows are not allowed
            for (int32_t& n : c.varlen_k) clamp32(n);
          }
          break;
        case Degenerate::no_keys:
          if (space.masks || space.key_lengths == 1) {
            c.key_lengths.assign(static_cast<size_t>(c.batch), 0);
          } else {
            clamp(c.seqlen_k);  // one key where seqlens_k is not allowed
            for (int32_t& n : c.varlen_k) clamp32(n);
          }
          break;
      }
    }
    c.layout = *rc::gen::elementOf(std::vector<Layout>{Layout::bshd, Layout::bhsd, Layout::padded});
    c.offset = *rc::gen::arbitrary<bool>();
    c.values = *rc::gen::weightedElement<Values>(
        {{4, Values::normal}, {1, Values::large}, {1, Values::ties}, {1, Values::zero_v}, {1, Values::heavy}});
    if (space.custom_scale && *rc::gen::weightedElement<bool>({{3, false}, {1, true}}))
      c.scale = *rc::gen::elementOf(std::vector<float>{0.0625f, 0.5f, 1.5f, -0.25f, 0.0f});
    c.seed = *rc::gen::inRange<uint64_t>(0, uint64_t{1} << 32);
    if (space.bias) {
      c.bias = *rc::gen::weightedElement<BiasKind>({{1, BiasKind::off}, {3, BiasKind::full}, {2, BiasKind::rows_keys},
                                                    {2, BiasKind::head_keys}, {1, BiasKind::stride0}});
      c.bias_dtype = *rc::gen::elementOf(std::vector<DType>{DType::f32, DType::f16, DType::bf16});
      c.bias_inf = *rc::gen::weightedElement<bool>({{2, false}, {1, true}});
      if (c.bias == BiasKind::off) c.bias_dtype = DType::f32, c.bias_inf = false;  // not printed: keep defaults
    }
    if (space.dropout) c.dropout_p = *rc::gen::weightedElement<float>({{1, 0.0f}, {2, 0.1f}, {2, 0.5f}, {1, 0.85f}});
    if (space.blocks) {
      c.blocks = *rc::gen::weightedElement<BlockSparse>({{1, BlockSparse::off}, {3, BlockSparse::lists},
                                                         {3, BlockSparse::bits}, {2, BlockSparse::shared},
                                                         {1, BlockSparse::rule}});
      // Sizes that divide the CPU's tiles, that do not, and sizes beyond them.
      auto size = [] {
        return *rc::gen::weightedOneOf<int64_t>({{1, rc::gen::inRange<int64_t>(1, 8)},
                                                 {3, rc::gen::elementOf(std::vector<int64_t>{8, 16, 32, 64})},
                                                 {2, rc::gen::inRange<int64_t>(9, 81)}});
      };
      if (c.blocks != BlockSparse::off) c.block_q = size(), c.block_k = size();
    }
    // The cost budget of this case (CI time): max_work / 8, / 4 or / 2 (shrinking goes to / 8),
    // spent on lengths (drop heads, lower the head dim) in 3 of 4 cases, else on width (halve the
    // lengths; shrinking goes there).
    const int64_t budget = space.max_work >> (4 - *rc::gen::inRange(1, 4));
    fit_work(c, budget, space.min_group, *rc::gen::weightedElement<bool>({{1, false}, {3, true}}));
    return c;
  }));
}

}  // namespace props
