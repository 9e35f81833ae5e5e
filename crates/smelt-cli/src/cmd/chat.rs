//! `smelt chat`: a terminal chat that streams replies, or, with stdin piped,
//! one reply line per input line for scripts (newlines and backslashes in a
//! piped reply are written `\n` and `\\`, so each reply is one line).
//!
//! The conversation is re-rendered through the chat template each turn;
//! the scheduler's slot keeps the KV cache of what it already read, so only
//! the new turn is computed. When the history no longer fits the context,
//! the oldest turns are dropped, with a notice on stderr.

use std::io::{BufRead, IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Sender, channel};

use anyhow::Context;
use smelt::chat::Message;
use smelt::server::{Event, FinishReason, GenRequest, Scheduler, Sink};

use super::sampling::SamplingArgs;
use crate::engine::{self, EngineArgs};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    engine: EngineArgs,
    /// A system message that starts the conversation
    #[arg(long, value_name = "TEXT")]
    system: Option<String>,
    /// Use this built-in chat template instead of the model's: chatml, llama3,
    /// gemma, qwen3, phi3, phi4, mistral-v1, mistral-v3, mistral-v3-tekken,
    /// mistral-v7, mistral-v7-tekken or gpt-oss
    #[arg(long = "chat-template", value_name = "NAME")]
    chat_template: Option<String>,
    /// Most tokens per reply (default: until the model ends its turn or
    /// the context is full)
    #[arg(short = 'n', long = "max-tokens")]
    max_tokens: Option<usize>,
    #[command(flatten)]
    sampling: SamplingArgs,
}

/// Tokens kept free for the reply when fitting the history.
const REPLY_RESERVE: usize = 256;

/// Set by Ctrl-C while a reply streams: the reply stops, the chat goes on.
static STOP: AtomicBool = AtomicBool::new(false);
/// Whether a reply is streaming; Ctrl-C at the prompt quits instead.
static GENERATING: AtomicBool = AtomicBool::new(false);

pub fn run(args: Args) -> anyhow::Result<()> {
    let mut loaded = engine::load(&args.engine, 1, 1, args.chat_template.as_deref())?;
    let replica = loaded.replicas.remove(0);
    let template = loaded.template;
    let encode = loaded.encode;
    let scheduler = Scheduler::spawn(replica.engine, replica.vocab, 0);
    let n_ctx = scheduler.n_ctx();
    let interactive = std::io::stdin().is_terminal();
    if interactive {
        install_ctrl_c();
        eprintln!("smelt chat: /reset clears the history, /exit quits; Ctrl-C stops a reply.");
    }
    let sampler = args.sampling.params()?;
    let reserve = args
        .max_tokens
        .unwrap_or(REPLY_RESERVE)
        .min(n_ctx / 2)
        .max(1);

    let system: Vec<Message> = args
        .system
        .iter()
        .map(|s| Message::new("system", s))
        .collect();
    let mut history = system.clone();
    let mut stdout = std::io::stdout().lock();
    let mut lines = std::io::stdin().lock().lines();
    loop {
        if interactive {
            write!(stdout, "> ")?;
            stdout.flush()?;
        }
        let Some(line) = lines.next() else { break };
        let line = line.context("reading stdin")?;
        let line = line.trim_end_matches('\r');
        match line.trim() {
            "" => continue,
            "/exit" | "/quit" => break,
            "/reset" => {
                history.clone_from(&system);
                eprintln!("[history cleared]");
                continue;
            }
            _ => {}
        }
        history.push(Message::new("user", line));

        // Drop the oldest turns until the prompt and a reply fit.
        let prompt = loop {
            let text = template.render(&history, true)?;
            let tokens = encode(&text);
            if tokens.len() + reserve <= n_ctx {
                break Some(tokens);
            }
            let first = system.len();
            // Keep the system message and the new user message.
            if history.len() - first <= 1 {
                break None;
            }
            let end = history[first + 1..]
                .iter()
                .position(|m| m.role == "user")
                .map_or(history.len() - 1, |i| first + 1 + i);
            history.drain(first..end);
            eprintln!("[the oldest turn was dropped to fit the context of {n_ctx} tokens]");
        };
        let Some(prompt) = prompt else {
            history.pop();
            eprintln!("[that message is too long for the context of {n_ctx} tokens]");
            continue;
        };

        let (tx, rx) = channel();
        let req = GenRequest {
            prompt,
            max_tokens: args.max_tokens,
            sampler: sampler.clone(),
            stop: Vec::new(),
            logprobs: None,
            constraint: None,
        };
        STOP.store(false, Ordering::SeqCst);
        GENERATING.store(true, Ordering::SeqCst);
        scheduler.submit(req, Box::new(StdoutSink(tx)))?;
        let mut reply = String::new();
        let mut failed = None;
        for event in rx {
            match event {
                Event::Text(t) => {
                    if interactive {
                        stdout.write_all(t.as_bytes())?;
                    } else {
                        let escaped = t.replace('\\', "\\\\").replace('\n', "\\n");
                        stdout.write_all(escaped.as_bytes())?;
                    }
                    stdout.flush()?;
                    reply.push_str(&t);
                }
                Event::Logprob(_) => {}
                Event::Done(u) => {
                    if u.finish == FinishReason::Cancelled {
                        eprint!("\n[stopped]");
                    }
                    break;
                }
                Event::Error(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        GENERATING.store(false, Ordering::SeqCst);
        writeln!(stdout)?;
        if let Some(e) = failed {
            history.pop();
            eprintln!("[error: {e}]");
            continue;
        }
        history.push(Message::new("assistant", reply));
    }
    Ok(())
}

/// Hands events to the terminal loop; a Ctrl-C closes it.
struct StdoutSink(Sender<Event>);

impl Sink for StdoutSink {
    fn send(&mut self, event: Event) -> bool {
        self.0.send(event).is_ok()
    }
    fn is_closed(&self) -> bool {
        STOP.load(Ordering::SeqCst)
    }
}

#[cfg(unix)]
fn install_ctrl_c() {
    extern "C" fn on_sigint(_: libc::c_int) {
        if GENERATING.load(Ordering::SeqCst) {
            STOP.store(true, Ordering::SeqCst);
        } else {
            // At the prompt Ctrl-C quits, as in a shell.
            // SAFETY: write and _exit are async-signal-safe; the buffer is
            // a static byte string.
            unsafe {
                libc::write(2, b"\n".as_ptr().cast(), 1);
                libc::_exit(130);
            }
        }
    }
    // SAFETY: the handler only touches atomics and async-signal-safe
    // calls; installing it while other threads run is what signal() is for.
    unsafe {
        libc::signal(
            libc::SIGINT,
            on_sigint as extern "C" fn(libc::c_int) as libc::sighandler_t,
        );
    }
}

#[cfg(not(unix))]
fn install_ctrl_c() {}
