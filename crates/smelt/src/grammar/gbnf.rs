//! llama.cpp's GBNF grammars, rewritten in the Lark dialect the matcher
//! reads, so that the server's `grammar` field takes what llama-server
//! takes.
//!
//! GBNF:
//!
//! ```text
//! root   ::= answer ("," answer)*     # rules, `root` first to match
//! answer ::= "yes" | "no" | [0-9]{1,3} | [^\n]+ | .
//! ```
//!
//! A rule runs to the end of its line, but continues after `|` and inside
//! parentheses. Strings take `\n \r \t \\ \" \xHH \uHHHH \UHHHHHHHH`;
//! character classes take ranges, `^` and the same escapes; `.` is any
//! character; repetition is `* + ? {m} {m,} {m,n}`; `#` starts a comment.
//!
//! Each rule becomes a Lark rule on one line, its name made a valid Lark
//! rule name, `root` reached from `start`; strings become JSON-escaped
//! strings and character classes regexes with every special character
//! written as `\x{..}`.

use std::fmt::Write;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("GBNF grammar, line {line}: {message}")]
pub struct GbnfError {
    pub line: usize,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Name(String),
    Define,
    Str(String),
    /// `[...]`: negated, and (first, last) ranges.
    Class(bool, Vec<(char, char)>),
    Any,
    Bar,
    Open,
    Close,
    Star,
    Plus,
    Question,
    /// `{m}`, `{m,}`, `{m,n}`.
    Repeat(u32, Option<u32>),
    Newline,
}

/// Rewrites a GBNF grammar as a Lark grammar.
pub fn to_lark(gbnf: &str) -> Result<String, GbnfError> {
    let toks = lex(gbnf)?;
    let mut out = String::from("start: ");
    out.push_str(&rule_name("root"));
    out.push('\n');
    let mut seen_root = false;
    let mut i = 0;
    while i < toks.len() {
        let (line, tok) = &toks[i];
        match tok {
            Tok::Newline => {
                i += 1;
                continue;
            }
            Tok::Name(name) if matches!(toks.get(i + 1), Some((_, Tok::Define))) => {
                seen_root |= name == "root";
                let _ = write!(out, "{}: ", rule_name(name));
                i += 2;
                let mut depth = 0usize;
                let mut empty = true;
                while i < toks.len() {
                    let (line, tok) = &toks[i];
                    match tok {
                        // A new line ends the rule, unless inside
                        // parentheses or after `|`.
                        Tok::Newline
                            if depth == 0
                                && !matches!(toks.get(i.wrapping_sub(1)), Some((_, Tok::Bar))) =>
                        {
                            break;
                        }
                        Tok::Newline => {}
                        Tok::Name(_)
                            if depth == 0 && matches!(toks.get(i + 1), Some((_, Tok::Define))) =>
                        {
                            return Err(err(*line, "a rule starts before the previous one ended"));
                        }
                        Tok::Open => depth += 1,
                        Tok::Close => {
                            depth = depth
                                .checked_sub(1)
                                .ok_or_else(|| err(*line, "a `)` without its `(`"))?;
                        }
                        _ => {}
                    }
                    if *tok != Tok::Newline {
                        if matches!(tok, Tok::Star | Tok::Plus | Tok::Question | Tok::Repeat(..))
                            && (empty || matches!(toks.get(i - 1), Some((_, Tok::Bar | Tok::Open))))
                        {
                            return Err(err(*line, "a repetition follows nothing"));
                        }
                        write_tok(&mut out, tok);
                        empty = false;
                    }
                    i += 1;
                }
                if depth != 0 {
                    return Err(err(*line, "a `(` is never closed"));
                }
                if empty {
                    // An empty rule matches the empty string.
                    out.push_str("\"\"");
                }
                out.push('\n');
            }
            _ => return Err(err(*line, "expected a rule: `name ::= ...`")),
        }
    }
    if !seen_root {
        return Err(err(1, "the grammar has no `root` rule"));
    }
    Ok(out)
}

fn err(line: usize, message: &str) -> GbnfError {
    GbnfError {
        line,
        message: message.into(),
    }
}

/// A Lark rule name (lower case, digits, `_`) for a GBNF one, kept
/// distinct: `-` becomes `__`, an upper-case letter `_u` and the letter.
fn rule_name(name: &str) -> String {
    let mut out = String::from("r_");
    for c in name.chars() {
        match c {
            'a'..='z' | '0'..='9' => out.push(c),
            '-' => out.push_str("__"),
            '_' => out.push_str("_s"),
            c => {
                out.push_str("_u");
                out.extend(c.to_lowercase());
            }
        }
    }
    out
}

fn write_tok(out: &mut String, tok: &Tok) {
    match tok {
        Tok::Name(n) => out.push_str(&rule_name(n)),
        Tok::Str(s) if s.is_empty() => out.push_str("\"\""),
        Tok::Str(s) => out.push_str(&serde_json::Value::String(s.clone()).to_string()),
        Tok::Class(negated, ranges) => {
            out.push_str("/[");
            if *negated {
                out.push('^');
            }
            for &(a, b) in ranges {
                push_class_char(out, a);
                if a != b {
                    out.push('-');
                    push_class_char(out, b);
                }
            }
            out.push_str("]/");
        }
        Tok::Any => out.push_str("/(?s:.)/"),
        Tok::Bar => out.push_str("| "),
        Tok::Open => out.push_str("( "),
        Tok::Close => out.push_str(") "),
        Tok::Star => out.push('*'),
        Tok::Plus => out.push('+'),
        Tok::Question => out.push('?'),
        Tok::Repeat(m, None) => {
            let _ = write!(out, "{{{m},}}");
        }
        Tok::Repeat(m, Some(n)) if m == n => {
            let _ = write!(out, "{{{m}}}");
        }
        Tok::Repeat(m, Some(n)) => {
            let _ = write!(out, "{{{m},{n}}}");
        }
        Tok::Define | Tok::Newline => {}
    }
    if !matches!(tok, Tok::Bar | Tok::Open | Tok::Close) {
        out.push(' ');
    }
}

/// A character inside a regex class: letters and digits as they are,
/// anything else as `\x{..}`, which needs no further escaping.
fn push_class_char(out: &mut String, c: char) {
    if c.is_ascii_alphanumeric() {
        out.push(c);
    } else {
        let _ = write!(out, "\\x{{{:x}}}", c as u32);
    }
}

fn lex(src: &str) -> Result<Vec<(usize, Tok)>, GbnfError> {
    let mut toks = Vec::new();
    let mut chars = src.chars().peekable();
    let mut line = 1;
    while let Some(c) = chars.next() {
        let tok = match c {
            '\n' => {
                line += 1;
                Tok::Newline
            }
            c if c.is_whitespace() => continue,
            '#' => {
                while chars.peek().is_some_and(|&c| c != '\n') {
                    chars.next();
                }
                continue;
            }
            ':' => {
                if chars.next() != Some(':') || chars.next() != Some('=') {
                    return Err(err(line, "expected `::=`"));
                }
                Tok::Define
            }
            '"' => {
                let mut s = String::new();
                loop {
                    match chars.next() {
                        None | Some('\n') => return Err(err(line, "a string is not closed")),
                        Some('"') => break,
                        Some('\\') => s.push(escape(&mut chars, line)?),
                        Some(c) => s.push(c),
                    }
                }
                Tok::Str(s)
            }
            '[' => {
                let negated = chars.peek() == Some(&'^');
                if negated {
                    chars.next();
                }
                let mut ranges = Vec::new();
                loop {
                    let a = match chars.next() {
                        None | Some('\n') => {
                            return Err(err(line, "a character class is not closed"));
                        }
                        Some(']') => break,
                        Some('\\') => escape(&mut chars, line)?,
                        Some(c) => c,
                    };
                    let b = if chars.peek() == Some(&'-') {
                        chars.next();
                        match chars.next() {
                            // `[a-]`: a range to nothing is the `-` itself.
                            Some(']') => {
                                ranges.push((a, a));
                                ranges.push(('-', '-'));
                                break;
                            }
                            Some('\\') => escape(&mut chars, line)?,
                            Some(c) if c != '\n' => c,
                            _ => return Err(err(line, "a character class is not closed")),
                        }
                    } else {
                        a
                    };
                    if b < a {
                        return Err(err(line, &format!("the range {a:?}-{b:?} is backwards")));
                    }
                    ranges.push((a, b));
                }
                Tok::Class(negated, ranges)
            }
            '.' => Tok::Any,
            '|' => Tok::Bar,
            '(' => Tok::Open,
            ')' => Tok::Close,
            '*' => Tok::Star,
            '+' => Tok::Plus,
            '?' => Tok::Question,
            '{' => {
                let mut body = String::new();
                loop {
                    match chars.next() {
                        Some('}') => break,
                        Some(c) if c.is_ascii_digit() || c == ',' || c == ' ' => body.push(c),
                        _ => return Err(err(line, "a `{m,n}` repetition is malformed")),
                    }
                }
                let num = |s: &str| -> Result<u32, GbnfError> {
                    s.trim()
                        .parse()
                        .map_err(|_| err(line, "a `{m,n}` repetition is malformed"))
                };
                match body.split_once(',') {
                    None => {
                        let m = num(&body)?;
                        Tok::Repeat(m, Some(m))
                    }
                    Some((m, n)) if n.trim().is_empty() => Tok::Repeat(num(m)?, None),
                    Some((m, n)) => {
                        let (m, n) = (num(m)?, num(n)?);
                        if n < m {
                            return Err(err(line, "a `{m,n}` repetition has n < m"));
                        }
                        Tok::Repeat(m, Some(n))
                    }
                }
            }
            c if c.is_ascii_alphanumeric() || c == '-' || c == '_' => {
                let mut name = String::from(c);
                while let Some(&c) = chars.peek() {
                    if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                        name.push(c);
                        chars.next();
                    } else {
                        break;
                    }
                }
                Tok::Name(name)
            }
            c => return Err(err(line, &format!("unexpected {c:?}"))),
        };
        toks.push((line, tok));
    }
    Ok(toks)
}

/// The character after a backslash in a string or class.
fn escape(
    chars: &mut std::iter::Peekable<std::str::Chars<'_>>,
    line: usize,
) -> Result<char, GbnfError> {
    let hex = |chars: &mut std::iter::Peekable<std::str::Chars<'_>>, n: usize| {
        let digits: String = (0..n).filter_map(|_| chars.next()).collect();
        u32::from_str_radix(&digits, 16)
            .ok()
            .filter(|_| digits.len() == n)
            .and_then(char::from_u32)
            .ok_or_else(|| err(line, &format!("bad escape \\{digits}")))
    };
    match chars.next() {
        Some('n') => Ok('\n'),
        Some('r') => Ok('\r'),
        Some('t') => Ok('\t'),
        Some('x') => hex(chars, 2),
        Some('u') => hex(chars, 4),
        Some('U') => hex(chars, 8),
        Some(c @ ('\\' | '"' | '[' | ']' | '-' | '^')) => Ok(c),
        Some(c) => Err(err(line, &format!("unknown escape \\{c}"))),
        None => Err(err(line, "a backslash ends the grammar")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_strings_classes_and_repeats() {
        let g = "root ::= item (\",\" item)* # a list\nitem ::= \"a\\\"b\" | [a-z0-9_]{1,3} | [^\\n]+\n";
        let lark = to_lark(g).unwrap();
        assert_eq!(
            lark,
            "start: r_root\n\
             r_root: r_item ( \",\" r_item ) * \n\
             r_item: \"a\\\"b\" | /[a-z0-9\\x{5f}]/ {1,3} | /[^\\x{a}]/ + \n"
        );
    }

    #[test]
    fn rules_continue_after_a_bar_and_inside_parentheses() {
        let g = "root ::= \"a\" |\n  \"b\" (\n \"c\"\n)\nother-rule ::= root\n";
        let lark = to_lark(g).unwrap();
        assert_eq!(
            lark,
            "start: r_root\nr_root: \"a\" | \"b\" ( \"c\" ) \nr_other__rule: r_root \n"
        );
    }

    #[test]
    fn errors_name_the_line() {
        for (g, line) in [
            ("root ::= \"a\n", 1),
            ("root ::= a\nb ::= [z-a]", 2),
            ("x ::= \"a\"", 1),
            ("root ::= ( \"a\"\n", 1),
            ("root ::= * \"a\"", 1),
            ("root ::= \"a\" \\q", 1),
        ] {
            let e = to_lark(g).unwrap_err();
            assert_eq!(e.line, line, "{g:?}: {e}");
        }
    }
}
