//! The output projection, in pieces that each fit the backend's largest
//! tensor:
//!
//! ```text
//! logits[r] = h[r] · Woutputᵀ        for the O output rows r of a step
//! ```
//!
//! A large vocabulary over many output rows is more than some GPUs bind at
//! once (a storage binding of 128 MiB on lavapipe and on some Apple GPUs):
//! Gemma 3's 262144 logits for the 256 scored rows of a perplexity chunk
//! take 256 MiB. So the logits live in pieces of at most `P` rows
//! ([`Caps::max_tensor_bytes`](crate::backend::Caps) over a row's bytes),
//! `P` chosen so that the pieces are as even as they can be.
//!
//! With one piece the projection reads `h` itself, as before. With more,
//! piece `i` gathers its rows `i·P ..` of `h` (`get_rows` with ids written
//! once) and projects them: every piece is recorded in the same forward
//! pass, with no sync between them, and [`Backend::read_all`] reads them
//! back with one.
//!
//! Legend: `O` output rows, `P` rows per piece, `E` `n_embd`, `V`
//! `n_vocab`.

use crate::backend::{Backend, BackendExt, Tensor};
use crate::quant::GgmlType;

use super::ModelError;

/// The logits of a step's output rows, in pieces.
pub struct Logits {
    /// `P × V` each, F32: piece `i` holds output rows `i·P ..`.
    pieces: Vec<Tensor>,
    /// `1 × P` each, I32: the rows of `h` piece `i` projects
    /// (`i·P + j`); empty when there is one piece.
    ids: Vec<Tensor>,
    /// `P × E`: the piece being projected's rows of `h`; `None` when there
    /// is one piece.
    h: Option<Tensor>,
    /// `P`.
    rows: usize,
}

impl Logits {
    /// Pieces for `n_outputs` rows of `n_vocab` logits on `b`.
    pub fn new(
        b: &mut dyn Backend,
        n_outputs: usize,
        n_embd: usize,
        n_vocab: usize,
    ) -> Result<Self, ModelError> {
        let row_bytes = GgmlType::F32.type_size() as u64 * n_vocab as u64;
        // At least one row a piece: a row over the limit is refused by
        // `alloc`, which names it.
        let fit = (b.caps().max_tensor_bytes / row_bytes.max(1)).max(1) as usize;
        let n_pieces = n_outputs.div_ceil(fit).max(1);
        let rows = n_outputs.div_ceil(n_pieces);
        let pieces = (0..n_pieces)
            .map(|_| b.alloc(GgmlType::F32, rows, n_vocab))
            .collect::<Result<Vec<_>, _>>()?;
        if n_pieces == 1 {
            return Ok(Self {
                pieces,
                ids: Vec::new(),
                h: None,
                rows,
            });
        }
        let mut ids = Vec::with_capacity(n_pieces);
        for i in 0..n_pieces {
            let t = b.alloc(GgmlType::I32, 1, rows)?;
            let rows_of_h: Vec<i32> = (i * rows..(i + 1) * rows).map(|r| r as i32).collect();
            b.write_i32(t, &rows_of_h)?;
            ids.push(t);
        }
        let h = Some(b.alloc(GgmlType::F32, rows, n_embd)?);
        Ok(Self {
            pieces,
            ids,
            h,
            rows,
        })
    }

    /// How many pieces the logits are kept in.
    pub fn n_pieces(&self) -> usize {
        self.pieces.len()
    }

    /// Records `logits = h · wᵀ` for the rows of `h` (`n_out × E`, the
    /// normed output rows; `w` is `V × E`).
    pub fn project(&self, b: &mut dyn Backend, w: Tensor, h: Tensor) -> Result<(), ModelError> {
        let Some(piece_h) = self.h else {
            b.matmul(w, h, self.pieces[0].with_rows(h.rows))?;
            return Ok(());
        };
        for (i, piece) in self.views(h.rows).enumerate() {
            let piece_h = piece_h.with_rows(piece.rows);
            b.get_rows(h, self.ids[i].reshape(1, piece.rows), piece_h)?;
            b.matmul(w, piece_h, piece)?;
        }
        Ok(())
    }

    /// The pieces holding `n_out` rows of logits, narrowed to the rows
    /// they hold, in row order: what [`Backend::read_all`] takes.
    pub fn views(&self, n_out: usize) -> impl Iterator<Item = Tensor> + '_ {
        self.pieces
            .iter()
            .enumerate()
            .map(move |(i, p)| p.with_rows(n_out.saturating_sub(i * self.rows).min(self.rows)))
            .filter(|p| p.rows > 0)
    }
}
