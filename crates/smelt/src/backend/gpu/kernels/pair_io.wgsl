// Loads from x and stores to out, or with PAIR (`second`) from x2 and to
// out2: the two tensors of a kernel that works on a second one after the
// first (rope.wgsl's and norm_rope.wgsl's PAIR). The includer declares
// the bindings (WGSL cannot pass a storage buffer to a function).

fn ld(second: bool, i: u32) -> f32 {
#ifdef PAIR
    if (second) {
        return x2[i];
    }
#endif
    return x[i];
}

fn st(second: bool, i: u32, v: f32) {
#ifdef PAIR
    if (second) {
        out2[i] = v;
        return;
    }
#endif
    out[i] = v;
}
