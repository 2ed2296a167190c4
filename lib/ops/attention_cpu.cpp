// The CPU attention kernel: for one query head and one block of query rows, the logits
// against the keys each row sees, an fp32 softmax per row, and the product with the values,
// in one pass over a block-sized scratch and with no GEMM packing.
//
// The keys of a KV head are transposed once per call into K^T [d_head, keys], stored in
// panels of one logits tile's keys (kt_index; shared by the group's query heads and every
// block), so a tile of logits is kScoreRows query rows times
// kScorePackets vectors of keys, accumulated over d_head with one broadcast and one FMA per
// element. The value product reads V rows as they are stored: kValueRows rows of
// probabilities times up to kValuePackets vectors of an output row. Written on Eigen's packet
// primitives (the widest vector of the build: 16 floats with AVX-512, 4 with SSE).
//
// Arithmetic fixed by position alone, so results do not depend on the block size, the thread
// count or the address of a buffer: a logit is the FMA chain over d_head in order, times the
// scale; a row's softmax takes the max, exp(x - max) with Eigen's vectorised exp, and the sum
// in kLanes interleaved lanes, then the lanes in order; an output element is the FMA
// chain of unnormalised probabilities times values over the keys in order, divided by the row's
// sum. Entries after a row's last visible key are exact zeros, so a tile that spans longer
// rows adds only +0 to a shorter row's sums.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "core/thread_pool.h"
#include "ops/attention.h"
#include "ops/packet.h"

namespace ckv::detail {

namespace {

constexpr int kScoreRows = 8;       // query rows per logits tile
constexpr int kScorePackets = 2;    // key vectors per logits tile
constexpr int kValueRows = 4;       // probability rows per value tile
constexpr int kValuePackets = 4;    // output vectors per value tile
constexpr int64_t kValueKeys = 64;  // keys per value chunk (their V rows stay in L1)
constexpr int64_t kKeyTile = kScorePackets * kLanes;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

// The lanes of a vector summed in lane order (Eigen's predux trips GCC 12's bug 105593).
float sum_lanes(const Packet& p) {
  float lanes[kLanes];
  ei::pstoreu(lanes, p);
  float total = 0.0f;
  for (float x : lanes) total += x;
  return total;
}

float max_lanes(const Packet& p) {
  float lanes[kLanes];
  ei::pstoreu(lanes, p);
  float max = lanes[0];
  for (float x : lanes) max = std::max(max, x);
  return max;
}

// K^T is stored in panels of kKeyTile keys, each [d, kKeyTile] contiguous: a logits tile
// reads its keys' d x kKeyTile values one after the other. (Row-major [d, keys] had every
// column of a tile one K^T row, keys * 4 bytes, after the last: at 1024 and more keys those
// rows fall in the same L1 set and the tile's panel did not stay in L1; the panels made
// Gemma 3's and Llama's attention faster, docs/PERF.md "Attention kernel".)
// Where element (c, j) of K^T [d, keys] lives.
inline int64_t kt_index(int64_t d, int64_t c, int64_t j) {
  return j / kKeyTile * d * kKeyTile + c * kKeyTile + j % kKeyTile;
}

// Keys [j0, j1) of k: [keys, d] row-major -> those columns of kt (panels), zeros for the
// columns at or after `keys`. Square blocks of kLanes x kLanes in registers, the ragged
// edges one element at a time. j0 is a multiple of kLanes.
void transpose_keys(const float* k, int64_t keys, int64_t d, int64_t j0, int64_t j1, float* kt) {
  const int64_t full_keys = std::min(j1, keys) / kLanes * kLanes, full_d = d / kLanes * kLanes;
  LaneBlock block;
  for (int64_t j = j0; j < full_keys; j += kLanes)
    for (int64_t c = 0; c < full_d; c += kLanes) {
      for (int64_t i = 0; i < kLanes; ++i) block.packet[i] = ei::ploadu<Packet>(k + (j + i) * d + c);
      ei::ptranspose(block);
      for (int64_t i = 0; i < kLanes; ++i) ei::pstoreu(kt + kt_index(d, c + i, j), block.packet[i]);
    }
  for (int64_t c = 0; c < d; ++c) {
    for (int64_t j = c < full_d ? std::max(j0, full_keys) : j0; j < std::min(j1, keys); ++j)
      kt[kt_index(d, c, j)] = k[j * d + c];
    for (int64_t j = std::max(j0, keys); j < j1; ++j) kt[kt_index(d, c, j)] = 0.0f;
  }
}

// s[r, j0 + ...] = scale * sum_c q[r, c] kt[c, j0 + ...] for R query rows and the kKeyTile
// keys from j0 (a multiple of kKeyTile).
template <int R>
void score_tile(const float* q, int64_t d, const float* kt, int64_t j0, float scale, float* s, int64_t s_stride) {
  Packet acc[R][kScorePackets];
  for (int r = 0; r < R; ++r)
    for (int p = 0; p < kScorePackets; ++p) acc[r][p] = ei::pset1<Packet>(0.0f);
  const float* b = kt + kt_index(d, 0, j0);
  for (int64_t c = 0; c < d; ++c, b += kKeyTile) {
    Packet bp[kScorePackets];
    for (int p = 0; p < kScorePackets; ++p) bp[p] = ei::ploadu<Packet>(b + p * kLanes);
    for (int r = 0; r < R; ++r) {
      const Packet a = ei::pset1<Packet>(q[r * d + c]);
      for (int p = 0; p < kScorePackets; ++p) acc[r][p] = ei::pmadd(a, bp[p], acc[r][p]);
    }
  }
  const Packet vscale = ei::pset1<Packet>(scale);
  for (int r = 0; r < R; ++r)
    for (int p = 0; p < kScorePackets; ++p)
      ei::pstoreu(s + r * s_stride + j0 + p * kLanes, ei::pmul(acc[r][p], vscale));
}

// Softmax numerators of row s[0, n) in place (exp(x - max)), zeros in [n, zero_to); returns
// their sum, 0 when every key is masked (-inf), and then the row is all zeros. The row must
// have room up to round_up(n, kLanes).
float softmax_numerators(float* s, int64_t n, int64_t zero_to) {
  const int64_t full = n / kLanes * kLanes, end = round_up(n, kLanes);
  Packet vmax = ei::pset1<Packet>(kNegInf);
  for (int64_t j = 0; j < full; j += kLanes) vmax = ei::pmax(vmax, ei::ploadu<Packet>(s + j));
  float max = max_lanes(vmax);
  for (int64_t j = full; j < n; ++j) max = std::max(max, s[j]);
  if (max == kNegInf) {
    std::fill(s, s + std::max(zero_to, end), 0.0f);
    return 0.0f;
  }
  std::fill(s + n, s + end, kNegInf);  // exact zeros in the last vector's tail (below)
  const Packet shift = ei::pset1<Packet>(max), neg_inf = ei::pset1<Packet>(kNegInf);
  Packet sum = ei::pset1<Packet>(0.0f);
  for (int64_t j = 0; j < end; j += kLanes) {
    const Packet x = ei::ploadu<Packet>(s + j);
    // A -inf logit (masked, outside the window, past the row) has the numerator 0 exactly:
    // Eigen's generic pexp clamps its argument and gives 2.9e-39 for -inf (its AVX-512 one
    // gives 0), which would make the result depend on the host's vector width.
    const Packet e = ei::pandnot(ei::pexp(ei::psub(x, shift)), ei::pcmp_eq(x, neg_inf));
    ei::pstoreu(s + j, e);
    sum = ei::padd(sum, e);
  }
  if (zero_to > end) std::fill(s + end, s + zero_to, 0.0f);
  return sum_lanes(sum);
}

// out[r, c0 + ...] += sum_{j0 <= j < j1} p[r, j] v[j, c0 + ...] for R rows and P vectors of
// columns, the running sums kept in out (set to 0 first when j0 is 0).
template <int R, int P>
void value_tile(const float* p, int64_t p_stride, int64_t j0, int64_t j1, const float* v, int64_t d, int64_t c0,
                float* out, int64_t out_stride) {
  Packet acc[R][P];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < P; ++c)
      acc[r][c] = j0 == 0 ? ei::pset1<Packet>(0.0f) : ei::ploadu<Packet>(out + r * out_stride + c0 + c * kLanes);
  const float* vj = v + j0 * d + c0;
  for (int64_t j = j0; j < j1; ++j, vj += d) {
    Packet b[P];
    for (int c = 0; c < P; ++c) b[c] = ei::ploadu<Packet>(vj + c * kLanes);
    for (int r = 0; r < R; ++r) {
      const Packet a = ei::pset1<Packet>(p[r * p_stride + j]);
      for (int c = 0; c < P; ++c) acc[r][c] = ei::pmadd(a, b[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < P; ++c) ei::pstoreu(out + r * out_stride + c0 + c * kLanes, acc[r][c]);
}

// The columns of d that are not a whole vector: the same FMA chain, one element at a time.
template <int R>
void value_tail(const float* p, int64_t p_stride, int64_t j0, int64_t j1, const float* v, int64_t d, int64_t c0,
                float* out, int64_t out_stride) {
  for (int r = 0; r < R; ++r)
    for (int64_t c = c0; c < d; ++c) {
      float acc = j0 == 0 ? 0.0f : out[r * out_stride + c];
      for (int64_t j = j0; j < j1; ++j) acc = std::fma(p[r * p_stride + j], v[j * d + c], acc);
      out[r * out_stride + c] = acc;
    }
}

template <int R>
void value_rows(const float* p, int64_t p_stride, int64_t j0, int64_t j1, const float* v, int64_t d, float* out,
                int64_t out_stride) {
  constexpr int64_t kWide = kValuePackets * kLanes;
  int64_t c0 = 0;
  for (; c0 + kWide <= d; c0 += kWide)
    value_tile<R, kValuePackets>(p, p_stride, j0, j1, v, d, c0, out, out_stride);
  for (; c0 + kLanes <= d; c0 += kLanes) value_tile<R, 1>(p, p_stride, j0, j1, v, d, c0, out, out_stride);
  if (c0 < d) value_tail<R>(p, p_stride, j0, j1, v, d, c0, out, out_stride);
}

// Logits s[0, n) of one query row against k: [keys, d] row-major, d a multiple of kLanes,
// without K^T (decoding, where transposing the whole cache for one row would cost more than
// the row): each key's products summed in kLanes lanes over d, then kLanes keys' lanes at
// once (transposed in registers and added). A different order of summation than the tiles'.
// Writes up to round_up(n, kLanes).
void logits_direct(const float* q, int64_t d, const float* k, int64_t n, float scale, float* s) {
  const Packet vscale = ei::pset1<Packet>(scale);
  LaneBlock lanes;
  for (int64_t j0 = 0; j0 < n; j0 += kLanes) {
    for (int64_t i = 0; i < kLanes; ++i) {
      Packet acc = ei::pset1<Packet>(0.0f);
      if (j0 + i < n)
        for (int64_t c = 0; c < d; c += kLanes)
          acc = ei::pmadd(ei::ploadu<Packet>(q + c), ei::ploadu<Packet>(k + (j0 + i) * d + c), acc);
      lanes.packet[i] = acc;
    }
    ei::ptranspose(lanes);
    Packet sum = lanes.packet[0];
    for (int64_t i = 1; i < kLanes; ++i) sum = ei::padd(sum, lanes.packet[i]);
    ei::pstoreu(s + j0, ei::pmul(sum, vscale));
  }
}

// What one block of query rows of one head attends to.
struct Block {
  const float* q;        // [rows, d]
  int64_t rows, d;
  const float* kt;       // K^T of the KV head in panels (kt_index); null: logits_direct from k
  const float* k;        // [keys, d], read when kt is null
  const float* v;        // [keys, d]
  const int64_t* visible;  // [rows], nondecreasing: row i attends to keys [0, visible[i])
  const int64_t* first;    // [rows], nondecreasing, or null: row i attends from key first[i]
                           // on (a sliding window), the earlier logits set to -inf
  float scale;
  float* out;            // [rows, out_stride], d columns written
  int64_t out_stride;
};

// The first key a windowed block is run from: its first row's first key rounded down to a
// whole logits tile. A multiple of kKeyTile (so of kLanes), so every key keeps its lane and
// its place in every sum.
int64_t key_base(int64_t first_key) { return first_key / kKeyTile * kKeyTile; }

// A windowed block (Block::first set) over its keys from key_base on: the same block over
// fewer keys, so the cost is O(rows * (window + rows)) however long the sequence. The logits
// before a row's first key are -inf, their numerators exact zeros, and the results those of
// the unshifted block bit for bit.
Block shift_keys(const Block& b) {
  if (b.first == nullptr) return b;
  const int64_t base = key_base(b.first[0]);
  thread_local std::vector<int64_t> bounds;  // [2 * rows]: visible, then first, from base
  bounds.resize(static_cast<size_t>(2 * b.rows));
  for (int64_t r = 0; r < b.rows; ++r) {
    bounds[static_cast<size_t>(r)] = b.visible[r] - base;
    bounds[static_cast<size_t>(b.rows + r)] = b.first[r] - base;
  }
  Block s = b;
  s.kt = b.kt == nullptr ? nullptr : b.kt + kt_index(b.d, 0, base);
  s.k = b.k == nullptr ? nullptr : b.k + base * b.d;
  s.v = b.v + base * b.d;
  s.visible = bounds.data();
  s.first = bounds.data() + b.rows;
  return s;
}

// Logits -> (edit, e.g. a mask) -> softmax numerators -> (each row with its sum) -> output.
// A windowed block (Block::first) is run from its base key (shift_keys): edit_logits and
// on_row then see key j at column j - base.
template <typename EditLogits, typename OnRow>
void attend_block(const Block& unshifted, EditLogits&& edit_logits, OnRow&& on_row) {
  const Block b = shift_keys(unshifted);
  const int64_t width = round_up(b.visible[b.rows - 1], kKeyTile);
  thread_local RowMatrix scratch;  // [rows, width] logits, then numerators
  thread_local std::vector<float> sums;
  if (scratch.rows() < b.rows || scratch.cols() < width)
    scratch.resize(std::max(scratch.rows(), b.rows), std::max(scratch.cols(), width));
  sums.resize(static_cast<size_t>(b.rows));
  float* s = scratch.data();
  const int64_t stride = scratch.cols();

  if (b.kt == nullptr)
    for (int64_t r = 0; r < b.rows; ++r) logits_direct(b.q + r * b.d, b.d, b.k, b.visible[r], b.scale, s + r * stride);
  // Logits one panel of kKeyTile keys at a time (its K^T columns stay in L1 for every row
  // tile), each row tile up to the last key its last row sees.
  for (int64_t j0 = 0; b.kt != nullptr && j0 < width; j0 += kKeyTile) {
    int64_t i = 0;
    for (; i + kScoreRows <= b.rows; i += kScoreRows)
      if (j0 < b.visible[i + kScoreRows - 1])
        score_tile<kScoreRows>(b.q + i * b.d, b.d, b.kt, j0, b.scale, s + i * stride, stride);
    for (; i < b.rows; ++i)
      if (j0 < b.visible[i]) score_tile<1>(b.q + i * b.d, b.d, b.kt, j0, b.scale, s + i * stride, stride);
  }
  if (b.first != nullptr)  // keys before a row's window
    for (int64_t r = 0; r < b.rows; ++r) std::fill(s + r * stride, s + r * stride + b.first[r], kNegInf);
  edit_logits(s, stride);
  const int64_t zero_to = round_up(b.visible[b.rows - 1], kLanes);
  for (int64_t r = 0; r < b.rows; ++r) {
    sums[static_cast<size_t>(r)] = softmax_numerators(s + r * stride, b.visible[r], zero_to);
    on_row(r, s + r * stride, sums[static_cast<size_t>(r)]);
  }
  // The value product one chunk of kValueKeys keys at a time (its V rows stay in L1), the
  // running sums in the output rows, each row tile up to the last key its last row sees.
  for (int64_t j0 = 0; j0 < b.visible[b.rows - 1]; j0 += kValueKeys) {
    int64_t i = 0;
    for (; i + kValueRows <= b.rows; i += kValueRows) {
      const int64_t j1 = std::min(j0 + kValueKeys, b.visible[i + kValueRows - 1]);
      if (j0 < j1) value_rows<kValueRows>(s + i * stride, stride, j0, j1, b.v, b.d, b.out + i * b.out_stride, b.out_stride);
    }
    for (; i < b.rows; ++i) {
      const int64_t j1 = std::min(j0 + kValueKeys, b.visible[i]);
      if (j0 < j1) value_rows<1>(s + i * stride, stride, j0, j1, b.v, b.d, b.out + i * b.out_stride, b.out_stride);
    }
  }
  for (int64_t r = 0; r < b.rows; ++r) {
    float* o = b.out + r * b.out_stride;
    const float sum = sums[static_cast<size_t>(r)];
    for (int64_t c = 0; c < b.d; ++c) o[c] = sum == 0.0f ? 0.0f : o[c] / sum;
  }
}

// K^T of every KV head, [n_kv_head][d * stride] in panels (kt_index; stride, the keys, a
// multiple of kKeyTile), one task
// per head and block of keys, into the calling thread's buffer (kept between calls, so a
// forward pass does not fault in fresh pages for it at every layer).
const float* transpose_heads(int64_t n_kv_head, int64_t d, int64_t stride, ThreadPool& pool,
                             const std::function<std::pair<const float*, int64_t>(int64_t)>& keys_of) {
  constexpr int64_t kKeys = 256;  // keys per task
  const int64_t blocks = (stride + kKeys - 1) / kKeys;
  thread_local std::vector<float> buffer;
  buffer.resize(static_cast<size_t>(n_kv_head * d * stride));
  float* kt = buffer.data();
  pool.parallel_for(n_kv_head * blocks, [&](int64_t task) {
    const int64_t g = task / blocks, j0 = task % blocks * kKeys;
    const auto [k, count] = keys_of(g);
    transpose_keys(k, count, d, j0, std::min(stride, j0 + kKeys), kt + g * d * stride);
  });
  return kt;
}

// Adds the mask spans of KV head `kv_head` to logits s [rows, stride] of query rows [r0, r1),
// whose column 0 is key `base` (earlier keys are outside every row's window).
void add_mask(float* s, int64_t stride, int64_t kv_head, int64_t r0, int64_t r1, int64_t base,
              std::span<const AttentionMaskSpan> mask) {
  for (const AttentionMaskSpan& span : mask) {
    if (span.kv_head != kv_head) continue;
    const int64_t begin = std::max(span.q_begin, r0), end = std::min(span.q_end, r1);
    for (int64_t row = begin; row < end; ++row)
      for (int64_t key : span.keys)  // later keys are causal -inf
        if (key <= row && key >= base) s[(row - r0) * stride + key - base] += span.value;
  }
}

}  // namespace

void causal_attention_cpu(const float* q, const float* k, const float* v, float* out,
                          const AttentionShape& shape, const AttentionParams& params,
                          std::span<const int64_t> prob_slot, ThreadPool& pool) {
  // Plain copies, not structured bindings: lambdas below capture them (clang 14).
  const int64_t n_head = shape.n_head, seq = shape.seq, d = shape.d_head;
  const int64_t group = n_head / shape.n_kv_head;
  const int64_t block = params.query_block;
  const int64_t n_blocks = (seq + block - 1) / block;
  const int64_t kt_stride = round_up(seq, kKeyTile);
  const int64_t r_probs = static_cast<int64_t>(params.prob_rows.size());
  const float* kt = transpose_heads(shape.n_kv_head, d, kt_stride, pool, [&](int64_t g) {
    return std::pair{k + g * seq * d, seq};
  });
  std::vector<int64_t> positions(static_cast<size_t>(seq));  // row i sees keys [0, i]
  for (int64_t i = 0; i < seq; ++i) positions[static_cast<size_t>(i)] = i + 1;
  std::vector<int64_t> first;  // with a window, row i sees keys [i - window + 1, i]
  if (params.window > 0) {
    first.resize(static_cast<size_t>(seq));
    for (int64_t i = 0; i < seq; ++i) first[static_cast<size_t>(i)] = std::max<int64_t>(0, i - params.window + 1);
  }
  const float scale = params.scale > 0 ? params.scale : 1.0f / std::sqrt(static_cast<float>(d));

  // Later blocks see more keys and cost more, so they are handed out first.
  pool.parallel_for(n_head * n_blocks, [&](int64_t task) {
    const int64_t b = n_blocks - 1 - task / n_head, h = task % n_head, g = h / group;
    const int64_t r0 = b * block, r1 = std::min(seq, r0 + block);
    const Block blk{.q = q + (h * seq + r0) * d,
                    .rows = r1 - r0,
                    .d = d,
                    .kt = kt + g * d * kt_stride,
                    .k = nullptr,
                    .v = v + g * seq * d,
                    .visible = positions.data() + r0,
                    .first = first.empty() ? nullptr : first.data() + r0,
                    .scale = scale,
                    .out = out + r0 * n_head * d + h * d,
                    .out_stride = n_head * d};
    const int64_t base = first.empty() ? 0 : key_base(first[static_cast<size_t>(r0)]);  // column 0's key
    attend_block(
        blk,
        [&](float* s, int64_t stride) {
          if (!params.mask.empty()) add_mask(s, stride, g, r0, r1, base, params.mask);
        },
        [&](int64_t r, const float* numerators, float sum) {
          const int64_t pos = r0 + r;
          if (r_probs == 0 || prob_slot[static_cast<size_t>(pos)] < 0) return;
          float* dst = params.probs->data() + (h * r_probs + prob_slot[static_cast<size_t>(pos)]) * seq;
          for (int64_t j = 0; j < seq; ++j)
            dst[j] = j <= pos && j >= base && sum != 0.0f ? numerators[j - base] / sum : 0.0f;
        });
  });
}

// One task per (query head, block of rows), as causal_attention_cpu, each row over the prefix
// of its KV head's cached entries that it sees. Decoding (one row) is one task per head.
void cached_attention_cpu(const float* q, int64_t n_head, int64_t rows, int64_t d,
                          std::span<const KvHeadView> heads, std::span<const int64_t> visible,
                          std::span<const int64_t> first, float scale, float* out, int64_t query_block,
                          ThreadPool& pool) {
  const auto n_kv_head = static_cast<int64_t>(heads.size());
  const int64_t group = n_head / n_kv_head;
  const int64_t n_blocks = (rows + query_block - 1) / query_block;
  int64_t longest = 0;
  for (const KvHeadView& h : heads) longest = std::max(longest, h.count);
  const int64_t kt_stride = round_up(longest, kKeyTile);
  // Few rows (decoding) read the keys in place; K^T pays off once a logits tile is full.
  const bool direct = rows < kScoreRows && d % kLanes == 0;
  const float* kt = direct ? nullptr : transpose_heads(n_kv_head, d, kt_stride, pool, [&](int64_t g) {
    return std::pair{heads[static_cast<size_t>(g)].k, heads[static_cast<size_t>(g)].count};
  });
  // visible is [rows, n_kv_head]; each KV head's column, contiguous.
  std::vector<int64_t> seen(static_cast<size_t>(n_kv_head * rows)), from;
  if (!first.empty()) from.resize(seen.size());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t g = 0; g < n_kv_head; ++g) {
      seen[static_cast<size_t>(g * rows + i)] = visible[static_cast<size_t>(i * n_kv_head + g)];
      if (!first.empty()) from[static_cast<size_t>(g * rows + i)] = first[static_cast<size_t>(i * n_kv_head + g)];
    }

  pool.parallel_for(n_head * n_blocks, [&](int64_t task) {
    const int64_t b = n_blocks - 1 - task / n_head, h = task % n_head, g = h / group;
    const int64_t r0 = b * query_block, r1 = std::min(rows, r0 + query_block);
    const Block blk{.q = q + (h * rows + r0) * d,
                    .rows = r1 - r0,
                    .d = d,
                    .kt = direct ? nullptr : kt + g * d * kt_stride,
                    .k = heads[static_cast<size_t>(g)].k,
                    .v = heads[static_cast<size_t>(g)].v,
                    .visible = seen.data() + g * rows + r0,
                    .first = from.empty() ? nullptr : from.data() + g * rows + r0,
                    .scale = scale,
                    .out = out + r0 * n_head * d + h * d,
                    .out_stride = n_head * d};
    attend_block(blk, [](float*, int64_t) {}, [](int64_t, const float*, float) {});
  });
}

}  // namespace ckv::detail
