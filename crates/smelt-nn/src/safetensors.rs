//! Checkpoints in the safetensors format (F32 tensors and string
//! metadata): an 8-byte little-endian header length, a JSON header naming
//! each tensor's dtype, shape and byte range, then the data. Reading checks
//! every length and range against the file.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Map, Value as Json, json};

use crate::error::{NnError, Result};

/// Tensors by name and the metadata strings.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tensors {
    pub tensors: BTreeMap<String, (Vec<usize>, Vec<f32>)>,
    pub metadata: BTreeMap<String, String>,
}

/// The largest header we accept, as the reference implementation does.
const MAX_HEADER: u64 = 100 << 20;

impl Tensors {
    pub fn insert(&mut self, name: &str, shape: &[usize], data: Vec<f32>) {
        self.tensors
            .insert(name.to_string(), (shape.to_vec(), data));
    }

    pub fn get(&self, name: &str) -> Option<&(Vec<usize>, Vec<f32>)> {
        self.tensors.get(name)
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut header = Map::new();
        if !self.metadata.is_empty() {
            header.insert("__metadata__".into(), json!(self.metadata));
        }
        let mut offset = 0usize;
        for (name, (shape, data)) in &self.tensors {
            let end = offset + data.len() * 4;
            header.insert(
                name.clone(),
                json!({"dtype": "F32", "shape": shape, "data_offsets": [offset, end]}),
            );
            offset = end;
        }
        let mut text = Json::Object(header).to_string().into_bytes();
        // Pad the header so the data starts 8-byte aligned.
        while !text.len().is_multiple_of(8) {
            text.push(b' ');
        }
        let mut out = Vec::with_capacity(8 + text.len() + offset);
        out.extend_from_slice(&(text.len() as u64).to_le_bytes());
        out.extend_from_slice(&text);
        for (_, data) in self.tensors.values() {
            out.extend(data.iter().flat_map(|x| x.to_le_bytes()));
        }
        out
    }

    /// Writes to `path` through a temporary file, so a failed write leaves
    /// any earlier checkpoint whole.
    pub fn save(&self, path: &Path) -> Result<()> {
        let tmp = path.with_extension("safetensors.partial");
        std::fs::write(&tmp, self.to_bytes())?;
        std::fs::rename(&tmp, path)?;
        Ok(())
    }

    pub fn load(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path).map_err(|e| NnError::File {
            path: path.display().to_string(),
            msg: e.to_string(),
        })?;
        Self::from_bytes(&bytes).map_err(|msg| NnError::File {
            path: path.display().to_string(),
            msg,
        })
    }

    pub fn from_bytes(bytes: &[u8]) -> std::result::Result<Self, String> {
        let len_bytes: [u8; 8] = bytes
            .get(..8)
            .and_then(|b| b.try_into().ok())
            .ok_or("shorter than the 8-byte header length")?;
        let header_len = u64::from_le_bytes(len_bytes);
        if header_len > MAX_HEADER || header_len > (bytes.len() - 8) as u64 {
            return Err(format!("header length {header_len} does not fit the file"));
        }
        let data = &bytes[8 + header_len as usize..];
        let header: Json = serde_json::from_slice(&bytes[8..8 + header_len as usize])
            .map_err(|e| format!("header is not JSON: {e}"))?;
        let Json::Object(map) = header else {
            return Err("header is not a JSON object".into());
        };
        let mut out = Tensors::default();
        for (name, entry) in map {
            if name == "__metadata__" {
                let Json::Object(meta) = entry else {
                    return Err("__metadata__ is not an object".into());
                };
                for (k, v) in meta {
                    let Json::String(s) = v else {
                        return Err(format!("metadata {k} is not a string"));
                    };
                    out.metadata.insert(k, s);
                }
                continue;
            }
            let (shape, values) = read_tensor(&name, &entry, data)?;
            out.tensors.insert(name, (shape, values));
        }
        Ok(out)
    }
}

fn read_tensor(
    name: &str,
    entry: &Json,
    data: &[u8],
) -> std::result::Result<(Vec<usize>, Vec<f32>), String> {
    let dtype = entry
        .get("dtype")
        .and_then(Json::as_str)
        .ok_or(format!("{name}: no dtype"))?;
    if dtype != "F32" {
        return Err(format!("{name}: dtype {dtype}, only F32 is read"));
    }
    let shape: Vec<usize> = entry
        .get("shape")
        .and_then(Json::as_array)
        .ok_or(format!("{name}: no shape"))?
        .iter()
        .map(|d| d.as_u64().map(|d| d as usize))
        .collect::<Option<_>>()
        .ok_or(format!("{name}: shape is not a list of sizes"))?;
    let offsets: Vec<usize> = entry
        .get("data_offsets")
        .and_then(Json::as_array)
        .ok_or(format!("{name}: no data_offsets"))?
        .iter()
        .map(|d| d.as_u64().map(|d| d as usize))
        .collect::<Option<_>>()
        .ok_or(format!("{name}: data_offsets are not sizes"))?;
    let [begin, end] = offsets[..] else {
        return Err(format!("{name}: data_offsets is not [begin, end]"));
    };
    let n = shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or(format!("{name}: shape {shape:?} overflows"))?;
    if begin > end || end > data.len() || end - begin != n.saturating_mul(4) {
        return Err(format!(
            "{name}: bytes {begin}..{end} do not hold {shape:?} F32 in {} bytes of data",
            data.len()
        ));
    }
    let values = data[begin..end]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    Ok((shape, values))
}
