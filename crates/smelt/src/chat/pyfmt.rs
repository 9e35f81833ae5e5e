//! Python's ways of printing values, which chat templates were written
//! against: `json.dumps` (behind Hugging Face's `tojson`) and `str()` (behind
//! `{{ value }}` and `|string`).
//!
//! minijinja prints `none`, `true` and `{"a": 1}` where jinja2 prints `None`,
//! `True` and `{'a': 1}`; minijinja's `tojson` is compact and HTML-escapes,
//! where `json.dumps` puts a space after `,` and `:` and keeps text as is.
//! Templates paste these strings into prompts, so the bytes must match.
//!
//! Values are walked as `serde_json::Value`s, serialized from minijinja's
//! values: that keeps map order (both crates preserve it) and tells floats
//! from integers.

use serde_json::Value as Json;

/// Options of `json.dumps` that templates pass to `tojson`.
#[derive(Clone, Debug, Default)]
pub struct DumpOptions {
    /// Spaces per nesting level; `None` prints everything on one line.
    pub indent: Option<usize>,
    pub sort_keys: bool,
    /// Escape non-ASCII as `\uXXXX`. Hugging Face's `tojson` defaults to
    /// `false`.
    pub ensure_ascii: bool,
    /// (item separator, key separator). `json.dumps` defaults to `", "` and
    /// `": "`, or `","` and `": "` with an indent.
    pub separators: Option<(String, String)>,
}

/// `json.dumps(value, ...)`.
pub fn json_dumps(value: &Json, opts: &DumpOptions) -> String {
    let (item_sep, key_sep) = match (&opts.separators, opts.indent) {
        (Some((i, k)), _) => (i.clone(), k.clone()),
        (None, Some(_)) => (",".to_string(), ": ".to_string()),
        (None, None) => (", ".to_string(), ": ".to_string()),
    };
    let mut out = String::new();
    Dumper {
        opts,
        item_sep: &item_sep,
        key_sep: &key_sep,
    }
    .value(value, 0, &mut out);
    out
}

struct Dumper<'a> {
    opts: &'a DumpOptions,
    item_sep: &'a str,
    key_sep: &'a str,
}

impl Dumper<'_> {
    fn value(&self, v: &Json, depth: usize, out: &mut String) {
        match v {
            Json::Null => out.push_str("null"),
            Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Json::Number(n) => out.push_str(&json_number(n)),
            Json::String(s) => json_string(s, self.opts.ensure_ascii, out),
            Json::Array(items) => {
                if items.is_empty() {
                    out.push_str("[]");
                    return;
                }
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(self.item_sep);
                    }
                    self.newline(depth + 1, out);
                    self.value(item, depth + 1, out);
                }
                self.newline(depth, out);
                out.push(']');
            }
            Json::Object(map) => {
                if map.is_empty() {
                    out.push_str("{}");
                    return;
                }
                let mut entries: Vec<(&String, &Json)> = map.iter().collect();
                if self.opts.sort_keys {
                    entries.sort_by(|a, b| a.0.cmp(b.0));
                }
                out.push('{');
                for (i, (k, item)) in entries.into_iter().enumerate() {
                    if i > 0 {
                        out.push_str(self.item_sep);
                    }
                    self.newline(depth + 1, out);
                    json_string(k, self.opts.ensure_ascii, out);
                    out.push_str(self.key_sep);
                    self.value(item, depth + 1, out);
                }
                self.newline(depth, out);
                out.push('}');
            }
        }
    }

    fn newline(&self, depth: usize, out: &mut String) {
        if let Some(indent) = self.opts.indent {
            out.push('\n');
            out.extend(std::iter::repeat_n(' ', indent * depth));
        }
    }
}

fn json_number(n: &serde_json::Number) -> String {
    if let Some(i) = n.as_i64() {
        i.to_string()
    } else if let Some(u) = n.as_u64() {
        u.to_string()
    } else {
        let f = n.as_f64().unwrap_or(f64::NAN);
        if f.is_nan() {
            "NaN".into()
        } else if f.is_infinite() {
            if f > 0.0 { "Infinity" } else { "-Infinity" }.into()
        } else {
            float_repr(f)
        }
    }
}

/// A JSON string literal the way `json.dumps` escapes it.
fn json_string(s: &str, ensure_ascii: bool, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c if ensure_ascii && !c.is_ascii() => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Python's `repr(float)`: the shortest round-trip digits, with an exponent
/// below 1e-4 and from 1e16 on, and always a `.0` or an exponent.
pub fn float_repr(f: f64) -> String {
    if f.is_nan() {
        return "nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf" } else { "-inf" }.into();
    }
    let a = f.abs();
    if a != 0.0 && !(1e-4..1e16).contains(&a) {
        // Rust writes `1.5e-7`; Python writes `1.5e-07`.
        let s = format!("{f:e}");
        let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
        let exp: i32 = exp.parse().unwrap_or(0);
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.abs())
    } else {
        let s = format!("{f}");
        if s.contains('.') { s } else { s + ".0" }
    }
}

/// Python's `str(value)`: strings as they are, everything else as `repr`.
pub fn py_str(v: &Json) -> String {
    match v {
        Json::String(s) => s.clone(),
        other => py_repr(other),
    }
}

/// Python's `repr(value)` for the types JSON can hold.
pub fn py_repr(v: &Json) -> String {
    let mut out = String::new();
    repr_into(v, &mut out);
    out
}

fn repr_into(v: &Json, out: &mut String) {
    match v {
        Json::Null => out.push_str("None"),
        Json::Bool(b) => out.push_str(if *b { "True" } else { "False" }),
        Json::Number(n) => out.push_str(&match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => i.to_string(),
            (None, Some(u), _) => u.to_string(),
            (None, None, f) => float_repr(f.unwrap_or(f64::NAN)),
        }),
        Json::String(s) => str_repr(s, out),
        Json::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                repr_into(item, out);
            }
            out.push(']');
        }
        Json::Object(map) => {
            out.push('{');
            for (i, (k, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                str_repr(k, out);
                out.push_str(": ");
                repr_into(item, out);
            }
            out.push('}');
        }
    }
}

/// Python's `repr(str)`: single quotes unless the text holds a single quote
/// and no double quote.
fn str_repr(s: &str, out: &mut String) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    // Expected strings are what CPython 3 prints for the same values.
    #[test]
    fn dumps_like_python() {
        let v = json!({"a": [1, 2.0, null, true], "é": "x\"\n\u{1}", "n": 1.5e-7});
        assert_eq!(
            json_dumps(&v, &DumpOptions::default()),
            r#"{"a": [1, 2.0, null, true], "é": "x\"\n\u0001", "n": 1.5e-07}"#
        );
        let opts = DumpOptions {
            indent: Some(2),
            ensure_ascii: true,
            sort_keys: true,
            ..Default::default()
        };
        assert_eq!(
            json_dumps(&json!({"b": [], "a": {"x": "日"}}), &opts),
            "{\n  \"a\": {\n    \"x\": \"\\u65e5\"\n  },\n  \"b\": []\n}"
        );
    }

    #[test]
    fn str_like_python() {
        assert_eq!(py_str(&json!(null)), "None");
        assert_eq!(py_str(&json!(1e16)), "1e+16");
        assert_eq!(py_str(&json!(0.0001)), "0.0001");
        assert_eq!(py_str(&json!(3.0)), "3.0");
        assert_eq!(
            py_str(&json!({"k": ["it's", "a\"b", false]})),
            r#"{'k': ["it's", 'a"b', False]}"#
        );
    }
}
