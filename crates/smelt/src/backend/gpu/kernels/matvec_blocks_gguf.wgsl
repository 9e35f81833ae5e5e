// matvec_blocks.wgsl's weights read in their GGUF layout (not repacked):
// Q4_1, Q5_0, Q5_1 and the K-quants Q2_K to Q6_K, on Q8-rounded activations, as
// the repacked Q4_0 and Q8_0 are:
//
//   out[t, r] = Σ_s  d_s · d_x · Σ q_w · q_x  +  m_s · d_x · Σ q_x
//
// over the weight's 32-value scale groups s (Q2_K, Q3_K and Q6_K: 16-value
// halves of one activation block, two scales, one d_x), with Σ q_w · q_x the exact
// integer dot product (`dot4I8Packed`), and m_s the group's offset: Q4_1
// and Q5_1's m, Q4_K and Q5_K's −dmin · min (ACT_SUMS: these need the
// activation block's Σ q_x, found by a dot against bytes of 1, once per
// block for the 4 rows; Q2_K's −dmin · min per half block takes its
// half's Σ q_x the same way). Q5_0's −16, Q3_K's −4 and Q6_K's −32 are
// taken from the quant bytes before the dot (signed bytes, no sums).
//
// A unit is what an invocation takes of a row per step (the driver's
// "block", `P.row_blocks` per row): a block of 32 (Q4_1, Q5_0, Q5_1), or
// UNIT64, 64 values of a superblock of 256: a Q4_K/Q5_K chunk (the low
// and high nibbles of 32 quant bytes, two scale groups), Q2_K/Q3_K's two
// groups of 32 that share their quant bytes (bit pairs 2j and 2j + 2), or
// Q6_K's two groups that share their quant and high-bit bytes (g and g + 2
// of a half). Units of a weight are numbered across its rows (rows are whole
// superblocks), so unit u's bytes are found from u alone.
//
// A K-quant's unit function is unit_dot_<type>, under UNIT_<type>; the
// host names the weight's ({{DOT}}) and, in MULTI with DOT2, the third
// weight's, which may be another K-quant (Q4_K_M's V in Q6_K beside Q and
// K in Q4_K): the same units per row, one branch on `which` a unit.
//
// Q5_0 (22 bytes), Q3_K (110) and Q6_K (210) blocks start at 2-byte steps: their
// words are put together from two aligned ones (`w1`, `w4`).

const LO4: u32 = 0x0f0f0f0fu;
const ONES: u32 = 0x01010101u;

// Word i of weight `which` (0 unless MULTI or W1).
fn wd(which: u32, i: u32) -> u32 {
#ifdef W1
    if (which == 1u) {
        return wq1[i];
    }
#endif
#ifdef MULTI
    if (which == 2u) {
        return wq2[i];
    }
#endif
    return wq[i];
}

// Words i..i + 4 of weight `which`: one branch on `which` for the four
// (a branch per load made the MULTI kernels too large for lavapipe to
// compile in minutes).
fn w4a(which: u32, i: u32) -> vec4<u32> {
#ifdef W1
    if (which == 1u) {
        return vec4<u32>(wq1[i], wq1[i + 1u], wq1[i + 2u], wq1[i + 3u]);
    }
#endif
#ifdef MULTI
    if (which == 2u) {
        return vec4<u32>(wq2[i], wq2[i + 1u], wq2[i + 2u], wq2[i + 3u]);
    }
#endif
    return vec4<u32>(wq[i], wq[i + 1u], wq[i + 2u], wq[i + 3u]);
}

// The word at even byte b.
fn w1(which: u32, b: u32) -> u32 {
    let lo = wd(which, b >> 2u);
    let hi = wd(which, (b >> 2u) + 1u);
    return select(lo, (lo >> 16u) | (hi << 16u), (b & 2u) != 0u);
}

// Words v put together from byte 2 of each (`odd`) or as they are; n:
// the words after each.
fn funnel(v: vec4<u32>, n: vec4<u32>, odd: bool) -> vec4<u32> {
    return select(v, (v >> vec4<u32>(16u)) | (n << vec4<u32>(16u)), vec4<bool>(odd));
}

// The 4 words from even byte b.
fn w4(which: u32, b: u32) -> vec4<u32> {
    let v = w4a(which, b >> 2u);
    return funnel(v, vec4<u32>(v.yzw, wd(which, (b >> 2u) + 4u)), (b & 2u) != 0u);
}

// The 8 words from even byte b (of 9 read).
struct W8 {
    a: vec4<u32>,
    b: vec4<u32>,
}

fn w8(which: u32, b: u32) -> W8 {
    let i = b >> 2u;
    let v0 = w4a(which, i);
    let v1 = w4a(which, i + 4u);
    let odd = (b & 2u) != 0u;
    return W8(
        funnel(v0, vec4<u32>(v0.yzw, v1.x), odd),
        funnel(v1, vec4<u32>(v1.yzw, wd(which, i + 8u)), odd),
    );
}

// Σ w · a over 4 words of packed signed bytes.
fn dot4w(w: vec4<u32>, a: vec4<u32>) -> i32 {
    return dot4I8Packed(w.x, a.x) + dot4I8Packed(w.y, a.y) + dot4I8Packed(w.z, a.z)
        + dot4I8Packed(w.w, a.w);
}

// Bytes of unsigned quants less `off` (per byte, no borrow across
// bytes), as signed bytes: Q5_0's q − 16, Q6_K's q − 32.
fn less(q: vec4<u32>, off: u32) -> vec4<u32> {
    let top = vec4<u32>(0x80808080u);
    return ((q | top) - vec4<u32>(off)) ^ top;
}

// The low and high nibbles of quant words.
fn lo4(q: vec4<u32>) -> vec4<u32> {
    return q & vec4<u32>(LO4);
}

fn hi4(q: vec4<u32>) -> vec4<u32> {
    return (q >> vec4<u32>(4u)) & vec4<u32>(LO4);
}

// The signed byte k of word w.
fn sbyte(w: u32, k: u32) -> i32 {
    return bitcast<i32>(w << (24u - 8u * k)) >> 24u;
}

// Bit pair s of each byte of quant words.
fn pair2(q: vec4<u32>, s: u32) -> vec4<u32> {
    return (q >> vec4<u32>(s)) & vec4<u32>(0x03030303u);
}

// d_x · Σ q_x of an activation block.
fn act_sum(a: Act) -> f32 {
    let ones = vec4<u32>(ONES);
    return a.d * f32(dot4w(a.lo, ones) + dot4w(a.hi, ones));
}

// Q5_0/Q5_1: the fifth bits of values first + 4i .. first + 4i + 4 (the
// same bits of qh) as bit 4 of each byte of word i.
fn fifth_bits(qh: u32, first: u32) -> vec4<u32> {
    let nib = (vec4<u32>(qh) >> (vec4<u32>(0u, 4u, 8u, 12u) + vec4<u32>(first))) & vec4<u32>(0xfu);
    // x · 0x00204081 puts bit j of x at bit 8j (no carries: 4 bits apart by 7).
    return ((nib * vec4<u32>(0x00204081u)) & vec4<u32>(ONES)) << vec4<u32>(4u);
}

#ifdef TYPE_Q4_1
// { d: f16, m: f16, qs: [u8; 16] } (5 words); value = q · d + m.
fn unit_dot(which: u32, u: u32, a: Act) -> f32 {
    let base = 5u * u;
    let dm = unpack2x16float(wd(which, base));
    let q = w4a(which, base + 1u);
    return dm.x * a.d * f32(dot4w(lo4(q), a.lo) + dot4w(hi4(q), a.hi)) + dm.y * a.s;
}
#endif

#ifdef TYPE_Q5_1
// { d: f16, m: f16, qh: u32, qs: [u8; 16] } (6 words); bit t of qh is the
// fifth bit of value t; value = q · d + m.
fn unit_dot(which: u32, u: u32, a: Act) -> f32 {
    let base = 6u * u;
    let dm = unpack2x16float(wd(which, base));
    let qh = wd(which, base + 1u);
    let q = w4a(which, base + 2u);
    let lo = lo4(q) | fifth_bits(qh, 0u);
    let hi = hi4(q) | fifth_bits(qh, 16u);
    return dm.x * a.d * f32(dot4w(lo, a.lo) + dot4w(hi, a.hi)) + dm.y * a.s;
}
#endif

#ifdef TYPE_Q5_0
// { d: f16, qh: u32, qs: [u8; 16] } (22 bytes); value = (q − 16) · d.
fn unit_dot(which: u32, u: u32, a: Act) -> f32 {
    let b = 22u * u;
    let d = unpack2x16float(w1(which, b)).x;
    let qh = w1(which, b + 2u);
    let q = w4(which, b + 6u);
    let lo = less(lo4(q) | fifth_bits(qh, 0u), 0x10101010u);
    let hi = less(hi4(q) | fifth_bits(qh, 16u), 0x10101010u);
    return d * a.d * f32(dot4w(lo, a.lo) + dot4w(hi, a.hi));
}
#endif

#ifdef K_SCALES
// Q4_K/Q5_K's 6-bit (scale, min) of sub-blocks 2c and 2c + 1 from the 12
// scale bytes s (3 words): sub-blocks 0..4 hold 6 bits in bytes 0..4
// (scales) and 4..8 (mins); 4..8 their low 4 bits in bytes 8..12 and the
// top 2 in the top bits of bytes 0..8 (ggml's get_scale_min_k4).
fn k_scales(s: vec3<u32>, c: u32) -> vec4<i32> {
    let first = c < 2u;
    let sc = select((s.z & LO4) | ((s.x >> 2u) & 0x30303030u), s.x & 0x3f3f3f3fu, first);
    let mn = select(((s.z >> 4u) & LO4) | ((s.y >> 2u) & 0x30303030u), s.y & 0x3f3f3f3fu, first);
    let sh = 16u * (c % 2u);
    return vec4<i32>(vec4<u32>(sc >> sh, sc >> (sh + 8u), mn >> sh, mn >> (sh + 8u)) & vec4<u32>(0xffu));
}

// Chunk c's sums given its quant bytes lo (sub-block 2c) and hi (2c + 1),
// words 0..4 and 4..8 each, and its superblock's first word `base`.
fn k_chunk(which: u32, base: u32, c: u32, q: array<vec4<u32>, 4>, a0: Act, a1: Act) -> f32 {
    let dm = unpack2x16float(wd(which, base));
    let sm = k_scales(vec3<u32>(wd(which, base + 1u), wd(which, base + 2u), wd(which, base + 3u)), c);
    let lo = dot4w(q[0], a0.lo) + dot4w(q[1], a0.hi);
    let hi = dot4w(q[2], a1.lo) + dot4w(q[3], a1.hi);
    return dm.x * (a0.d * f32(sm.x * lo) + a1.d * f32(sm.y * hi))
        - dm.y * (f32(sm.z) * a0.s + f32(sm.w) * a1.s);
}
#endif

#ifdef UNIT_Q4_K
// { d, dmin: f16, scales: [u8; 12], qs: [u8; 128] } (36 words), 4 chunks
// of 64 values: a chunk's 32 quant bytes hold sub-block 2c in their low
// nibbles, 2c + 1 in their high; value = d · sc · q − dmin · min.
fn unit_dot_q4_k(which: u32, u: u32, a0: Act, a1: Act) -> f32 {
    let base = 36u * (u / 4u);
    let c = u % 4u;
    let q0 = w4a(which, base + 4u + 8u * c);
    let q1 = w4a(which, base + 8u + 8u * c);
    return k_chunk(which, base, c, array(lo4(q0), lo4(q1), hi4(q0), hi4(q1)), a0, a1);
}
#endif

#ifdef UNIT_Q5_K
// { d, dmin: f16, scales: [u8; 12], qh: [u8; 32], qs: [u8; 128] } (44
// words): as Q4_K, with bit 2c (2c + 1) of qh byte l the fifth bit of
// value l of sub-block 2c (2c + 1).
fn unit_dot_q5_k(which: u32, u: u32, a0: Act, a1: Act) -> f32 {
    let base = 44u * (u / 4u);
    let c = u % 4u;
    let h0 = w4a(which, base + 4u);
    let h1 = w4a(which, base + 8u);
    let q0 = w4a(which, base + 12u + 8u * c);
    let q1 = w4a(which, base + 16u + 8u * c);
    let bit = vec4<u32>(ONES);
    let s0 = vec4<u32>(2u * c);
    let s1 = vec4<u32>(2u * c + 1u);
    let f = vec4<u32>(4u);
    let q = array(
        lo4(q0) | (((h0 >> s0) & bit) << f),
        lo4(q1) | (((h1 >> s0) & bit) << f),
        hi4(q0) | (((h0 >> s1) & bit) << f),
        hi4(q1) | (((h1 >> s1) & bit) << f),
    );
    return k_chunk(which, base, c, q, a0, a1);
}
#endif

#ifdef UNIT_Q2_K
// { scales: [u8; 16], qs: [u8; 64], d: f16, dmin: f16 } (21 words), 2
// halves n of 128 values, each 4 groups j of 32: bits 2j of qs byte
// 32n + l are value l of group j; the 16-value sub-block s = 8n + 2j +
// l / 16 has scale byte s (low nibble: scale, high: min); value =
// d · sc · q − dmin · m. Unit u: groups 2p and 2p + 1 of half n (u % 4 =
// 2n + p), whose 4 scale bytes are word u % 4.
fn unit_dot_q2_k(which: u32, u: u32, a0: Act, a1: Act) -> f32 {
    let base = 21u * (u / 4u);
    let c = u % 4u;
    let n = c / 2u;
    let shift = 4u * (c % 2u);
    let q0 = w4a(which, base + 4u + 8u * n);
    let q1 = w4a(which, base + 8u + 8u * n);
    let sc = wd(which, base + c);
    let dm = unpack2x16float(wd(which, base + 20u));
    let ones = vec4<u32>(ONES);
    // Σ sc · Σ q_w q_x and Σ min · Σ q_x per 16-value half.
    let dots = vec4<i32>(
        dot4w(pair2(q0, shift), a0.lo),
        dot4w(pair2(q1, shift), a0.hi),
        dot4w(pair2(q0, shift + 2u), a1.lo),
        dot4w(pair2(q1, shift + 2u), a1.hi),
    );
    let sums = vec4<i32>(dot4w(a0.lo, ones), dot4w(a0.hi, ones), dot4w(a1.lo, ones), dot4w(a1.hi, ones));
    let scales = vec4<i32>((vec4<u32>(sc) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(0xfu));
    let mins = vec4<i32>((vec4<u32>(sc) >> vec4<u32>(4u, 12u, 20u, 28u)) & vec4<u32>(0xfu));
    let d0 = scales.x * dots.x + scales.y * dots.y;
    let d1 = scales.z * dots.z + scales.w * dots.w;
    let m0 = mins.x * sums.x + mins.y * sums.y;
    let m1 = mins.z * sums.z + mins.w * sums.w;
    return dm.x * (a0.d * f32(d0) + a1.d * f32(d1)) - dm.y * (a0.d * f32(m0) + a1.d * f32(m1));
}
#endif

#ifdef UNIT_Q3_K
// { hmask: [u8; 32], qs: [u8; 64], scales: [u8; 12], d: f16 } (110
// bytes): as Q2_K's groups, with bit 4n + j of hmask byte l the third bit
// of value l of group j of half n (clear: minus 4), and 16 six-bit scales
// less 32: the low 4 bits of scale s in byte s % 8 (high nibble for
// s ≥ 8), the top 2 in bits 2 (s / 4) of byte 8 + s % 4; value =
// d · (sc − 32) · q. Unit u (u % 4 = 2n + p): scales 8n + 4p .. + 4.
fn unit_dot_q3_k(which: u32, u: u32, a0: Act, a1: Act) -> f32 {
    let b = 110u * (u / 4u);
    let c = u % 4u;
    let n = c / 2u;
    let p = c % 2u;
    let hm = w8(which, b);
    let qs = w8(which, b + 32u + 32u * n);
    // Scale bytes 96..108 and d (108..110).
    let t = w4(which, b + 96u);
    let lo = (select(t.x, t.y, p == 1u) >> (4u * n)) & LO4;
    let hi = (t.z >> (2u * (2u * n + p))) & 0x03030303u;
    let sc = less(vec4<u32>(lo | (hi << 4u)), 0x20202020u).x;
    let d = unpack2x16float(t.w).x;
    let j = 2u * p;
    let h = 4u * n + j;
    let bit = vec4<u32>(ONES);
    let m4 = 0x04040404u;
    let g0 = dot4w(less(pair2(qs.a, 2u * j) | (((hm.a >> vec4<u32>(h)) & bit) << vec4<u32>(2u)), m4), a0.lo);
    let g1 = dot4w(less(pair2(qs.b, 2u * j) | (((hm.b >> vec4<u32>(h)) & bit) << vec4<u32>(2u)), m4), a0.hi);
    let g2 = dot4w(less(pair2(qs.a, 2u * j + 2u) | (((hm.a >> vec4<u32>(h + 1u)) & bit) << vec4<u32>(2u)), m4), a1.lo);
    let g3 = dot4w(less(pair2(qs.b, 2u * j + 2u) | (((hm.b >> vec4<u32>(h + 1u)) & bit) << vec4<u32>(2u)), m4), a1.hi);
    return d * (a0.d * f32(sbyte(sc, 0u) * g0 + sbyte(sc, 1u) * g1)
        + a1.d * f32(sbyte(sc, 2u) * g2 + sbyte(sc, 3u) * g3));
}
#endif

#ifdef UNIT_Q6_K
// { ql: [u8; 128], qh: [u8; 64], scales: [i8; 16], d: f16 } (210 bytes),
// 2 halves n of 128 values, each 4 groups g of 32: the low 4 bits from ql
// byte 64n + 32(g % 2) + l (low nibbles for g < 2), the high 2 from bits
// 2g of qh byte 32n + l; value = d · scales[8n + 2g + l / 16] · (q − 32).
// Unit u: groups gp = u % 2 and gp + 2 of half (u % 4) / 2, which read
// the same ql and qh bytes.
fn unit_dot_q6_k(which: u32, u: u32, a0: Act, a1: Act) -> f32 {
    let b = 210u * (u / 4u);
    let n = (u % 4u) / 2u;
    let gp = u % 2u;
    let ql = w8(which, b + 64u * n + 32u * gp);
    let qh = w8(which, b + 128u + 32u * n);
    let l0 = ql.a;
    let l1 = ql.b;
    let h0 = qh.a;
    let h1 = qh.b;
    // The scales (bytes 192..208) and d (208..210): 6 words from byte 192
    // (all within the block's and the buffer's padding), put together.
    let i = (b + 192u) >> 2u;
    let t0 = w4a(which, i);
    let t1 = vec2<u32>(wd(which, i + 4u), wd(which, i + 5u));
    let tail = funnel(t0, vec4<u32>(t0.yzw, t1.x), (b & 2u) != 0u);
    let dw = funnel(vec4<u32>(t1.x), vec4<u32>(t1.y), (b & 2u) != 0u).x;
    // Scales of group gp (bytes 2gp, 2gp + 1 of sw0) and gp + 2 (of sw1).
    let sw0 = tail[2u * n];
    let sw1 = tail[2u * n + 1u];
    let d = unpack2x16float(dw).x;
    let two = vec4<u32>(0x03030303u);
    let f = vec4<u32>(4u);
    let sg = vec4<u32>(2u * gp);
    let sg2 = vec4<u32>(2u * gp + 4u);
    let off = 0x20202020u;
    let g0 = dot4w(less(lo4(l0) | (((h0 >> sg) & two) << f), off), a0.lo);
    let g1 = dot4w(less(lo4(l1) | (((h1 >> sg) & two) << f), off), a0.hi);
    let g2 = dot4w(less(hi4(l0) | (((h0 >> sg2) & two) << f), off), a1.lo);
    let g3 = dot4w(less(hi4(l1) | (((h1 >> sg2) & two) << f), off), a1.hi);
    let k = 2u * gp;
    return d * (a0.d * f32(sbyte(sw0, k) * g0 + sbyte(sw0, k + 1u) * g1)
        + a1.d * f32(sbyte(sw1, k) * g2 + sbyte(sw1, k + 1u) * g3));
}
#endif

#ifdef UNIT64
// Unit u of weight `which` against activation blocks a0, a1: the weight's
// type ({{DOT}}), or with DOT2 the third weight's own type (a K-quant
// model's V of another type than Q and K, in one MULTI dispatch).
fn unit_dot(which: u32, u: u32, a0: Act, a1: Act) -> f32 {
#ifdef DOT2
    if (which == 2u) {
        return {{DOT2}}(which, u, a0, a1);
    }
#endif
    return {{DOT}}(which, u, a0, a1);
}

// The activation blocks of a row's unit b (its superblock's 8 blocks
// start at block 8 (b / 4)): Q6_K's unit takes groups g and g + 2 of a
// half, the others two neighbouring groups.
fn unit_acts(q6: bool, b: u32) -> vec2<u32> {
    if (q6) {
        let first = 8u * (b / 4u) + 4u * ((b % 4u) / 2u) + b % 2u;
        return vec2<u32>(first, first + 2u);
    }
    return vec2<u32>(2u * b, 2u * b + 1u);
}

// Whether weight `which` is Q6_K.
fn is_q6(which: u32) -> bool {
#ifdef DOT2
    if (which == 2u) {
        return {{Q6_2}};
    }
#endif
    return {{Q6}};
}

// Unit b's contribution to 4 rows (first units rb) of weight `which`,
// from the token's activation blocks starting at block xb.
fn rows4(which: u32, rb: vec4<u32>, b: u32, xb: u32) -> vec4<f32> {
    let ab = unit_acts(is_q6(which), b);
    var a0 = act_block(xb, ab.x);
    var a1 = act_block(xb, ab.y);
#ifdef ACT_SUMS
    a0.s = act_sum(a0);
    a1.s = act_sum(a1);
#endif
    return vec4<f32>(
        unit_dot(which, rb.x + b, a0, a1),
        unit_dot(which, rb.y + b, a0, a1),
        unit_dot(which, rb.z + b, a0, a1),
        unit_dot(which, rb.w + b, a0, a1),
    );
}
#else
fn rows4(which: u32, rb: vec4<u32>, b: u32, xb: u32) -> vec4<f32> {
    var a = act_block(xb, b);
#ifdef ACT_SUMS
    a.s = act_sum(a);
#endif
    return vec4<f32>(
        unit_dot(which, rb.x + b, a),
        unit_dot(which, rb.y + b, a),
        unit_dot(which, rb.z + b, a),
        unit_dot(which, rb.w + b, a),
    );
}
#endif
