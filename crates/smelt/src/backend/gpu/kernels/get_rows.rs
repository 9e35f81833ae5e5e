//! get_rows (`get_rows.wgsl`): `out[i] = table[ids[i]]` dequantized, the
//! embedding lookup; one variant per table type.

use crate::backend::Tensor;
use crate::quant::GgmlType;

use super::{Binding, Dispatch, Family, ShaderFeatures, Source, WEIGHT_TYPES, r, rw, shared};

const SOURCE: &str = include_str!("get_rows.wgsl");

kernel_params! {
    /// get_rows.wgsl's parameters.
    pub struct Params {
        /// Ids (output rows).
        pub n: u32,
        /// Values per row.
        pub cols: u32,
        /// The table's row stride (`GpuBackend::row_param`).
        pub row_bytes: u32,
        /// Rows of the table, or of the part bound.
        pub table_rows: u32,
        /// The part's first row in the whole table.
        pub row0: u32,
        /// 1 when the table bound is one part of a split weight.
        pub split: u32,
    }
}

/// The table's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GetRows(pub GgmlType);

impl Family for GetRows {
    type Params = Params;

    fn all() -> Vec<Self> {
        WEIGHT_TYPES.into_iter().map(GetRows).collect()
    }

    fn bindings(self) -> &'static [Binding] {
        &const { [r("wq"), rw("ids"), rw("out")] }
    }

    fn source(self, f: ShaderFeatures, s: &mut Source) {
        let t = self.0;
        s.weights(t, f.repacks(t), f.shader_f16 && t == GgmlType::F16, false);
        s.include(&[shared::QUANT, SOURCE]);
    }
}

/// `out[i] = table[ids[i]]` (`row_bytes`: the table's row stride); with
/// `part` (a part of a split table and its first row), only the ids that
/// fall in it. One invocation per 8 values of a row (floats: per value).
pub fn dispatch(
    (table, ids, out): (Tensor, Tensor, Tensor),
    row_bytes: usize,
    part: Option<(Tensor, usize)>,
) -> Dispatch {
    let n = ids.n_elements();
    let per_row = if table.dtype.is_quantized() {
        table.cols / 8
    } else {
        table.cols
    };
    let (wq, row0) = part.unwrap_or((table, 0));
    let params = Params {
        n: n as u32,
        cols: table.cols as u32,
        row_bytes: row_bytes as u32,
        table_rows: wq.rows as u32,
        row0: row0 as u32,
        split: u32::from(part.is_some()),
    };
    let groups = (n * per_row).div_ceil(64) as u64;
    Dispatch::new(
        GetRows(table.dtype),
        params,
        &[("wq", wq), ("ids", ids), ("out", out)],
        groups,
    )
}
