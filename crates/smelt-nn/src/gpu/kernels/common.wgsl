// Shared by every kernel: the flat invocation index of a 1-D dispatch
// (dispatch::groups_1d spreads more than 65535 workgroups over y).

fn flat(gid: vec3<u32>, nwg: vec3<u32>, wg: u32) -> u32 {
    return gid.x + gid.y * nwg.x * wg;
}
