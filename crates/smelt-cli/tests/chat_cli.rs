//! `smelt chat` on piped stdin: one reply line per message line, /reset and
//! /exit, and the oldest turns dropped (with a notice) when the history
//! outgrows the context.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

fn model() -> PathBuf {
    let dir = match std::env::var_os("SMELT_CACHE") {
        Some(d) => PathBuf::from(d).join("models"),
        None => PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/smelt/models"),
    };
    let path = dir.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        path.is_file(),
        "{} is missing: run `bash scripts/fetch-models.sh`",
        path.display()
    );
    path
}

/// Runs `smelt chat` with `input` piped in; returns (stdout, stderr).
fn chat(args: &[&str], input: &str) -> (String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_smelt"))
        .arg("chat")
        .arg("-m")
        .arg(model())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("smelt chat starts");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    (stdout, stderr)
}

#[test]
fn piped_messages_get_one_reply_line_each() {
    let (stdout, stderr) = chat(
        &["--temp", "0", "-n", "8"],
        "Hello!\n\nWhat is 2+2?\n/reset\nHello!\n/exit\nnever read\n",
    );
    let replies: Vec<&str> = stdout.lines().collect();
    assert_eq!(replies.len(), 3, "{stdout:?}\n{stderr}");
    assert!(replies.iter().all(|r| !r.trim().is_empty()), "{stdout:?}");
    // After /reset the conversation starts over: the same first message
    // gets the same greedy reply.
    assert_eq!(replies[0], replies[2]);
    assert!(stderr.contains("[history cleared]"), "{stderr}");
}

#[test]
fn old_turns_are_dropped_to_fit_the_context() {
    let input: String = (0..6)
        .map(|i| {
            format!("Message {i}: tell me something about the number {i} and why it matters.\n")
        })
        .collect();
    let (stdout, stderr) = chat(&["--temp", "0", "-n", "24", "--ctx", "160"], &input);
    assert_eq!(stdout.lines().count(), 6, "{stdout:?}\n{stderr}");
    assert!(stderr.contains("oldest turn was dropped"), "{stderr}");
    // A message that cannot fit even alone is refused, and the chat goes on.
    let long = "word ".repeat(400);
    let (stdout, stderr) = chat(
        &["--temp", "0", "-n", "4", "--ctx", "160"],
        &format!("{long}\nHi\n"),
    );
    assert!(stderr.contains("too long for the context"), "{stderr}");
    assert_eq!(stdout.lines().count(), 1, "{stdout:?}");
}
