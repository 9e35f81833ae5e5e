//! Fetching GGUF files from a Hugging Face-style hub, for `smelt pull` and
//! `-m hf://org/repo/file.gguf`.
//!
//! ```text
//! GET {endpoint}/api/models/{org}/{repo}?blobs=true   siblings: rfilename, size, lfs.sha256
//! GET {endpoint}/{org}/{repo}/resolve/main/{file}     (redirects followed; Range to resume)
//! ```
//!
//! Files land in `$SMELT_CACHE/models/hub/{org}/{repo}/{file}`, written to
//! `{file}.partial` first and renamed once their SHA-256 matches the
//! hub's. An interrupted download resumes from the partial file's end (a
//! `Range` request), within one run (a few retries) or the next. A cached
//! file whose hash no longer matches is fetched again. `HF_ENDPOINT` sets
//! the hub (default `https://huggingface.co`), `HF_TOKEN` its bearer token.

use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Attempts at one file before giving up: each resumes where the last
/// stopped.
const ATTEMPTS: usize = 4;

/// Quantizations picked, in this order, when a repository has several
/// GGUF files and none was named: llama.cpp's and Ollama's usual default
/// first.
const PREFERRED: &[&str] = &["Q4_K_M", "Q4_K_S", "Q4_0", "Q5_K_M", "Q8_0"];

/// `org/repo`, and the file wanted in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wanted {
    pub repo: String,
    pub file: Choice,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Choice {
    /// This file.
    File(String),
    /// The GGUF file whose name has this quantization (`:q4_k_m`), or the
    /// preferred one.
    Quant(Option<String>),
}

impl Wanted {
    /// `org/repo[:quant]`, as `smelt pull` takes it.
    pub fn from_repo(spec: &str) -> anyhow::Result<Self> {
        let (repo, quant) = match spec.split_once(':') {
            Some((r, q)) if !q.is_empty() => (r, Some(q.to_string())),
            Some((r, _)) => (r, None),
            None => (spec, None),
        };
        check_repo(repo)?;
        Ok(Self {
            repo: repo.to_string(),
            file: Choice::Quant(quant),
        })
    }

    /// `hf://org/repo/path/to/file.gguf`.
    pub fn from_url(url: &str) -> anyhow::Result<Self> {
        let rest = url
            .strip_prefix("hf://")
            .with_context(|| format!("{url:?} is not an hf:// address"))?;
        let mut parts = rest.splitn(3, '/');
        let (Some(org), Some(name), Some(file)) = (parts.next(), parts.next(), parts.next()) else {
            bail!("{url:?}: expected hf://org/repo/file.gguf");
        };
        let repo = format!("{org}/{name}");
        check_repo(&repo)?;
        if file.is_empty()
            || file
                .split('/')
                .any(|p| p.is_empty() || p == ".." || p == ".")
        {
            bail!("{url:?}: the file path {file:?} is not a plain relative path");
        }
        Ok(Self {
            repo,
            file: Choice::File(file.to_string()),
        })
    }
}

fn check_repo(repo: &str) -> anyhow::Result<()> {
    let ok_part = |p: &str| {
        !p.is_empty()
            && p != "."
            && p != ".."
            && p.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    };
    match repo.split_once('/') {
        Some((org, name)) if ok_part(org) && ok_part(name) => Ok(()),
        _ => bail!("{repo:?} is not a repository name: expected org/repo"),
    }
}

/// The hub's address and token, from `HF_ENDPOINT` and `HF_TOKEN`.
pub struct Hub {
    endpoint: String,
    token: Option<String>,
    agent: ureq::Agent,
    cache: PathBuf,
}

/// A file the hub lists.
#[derive(Clone, Debug)]
struct Sibling {
    name: String,
    size: Option<u64>,
    sha256: Option<String>,
}

impl Hub {
    pub fn from_env(cache: PathBuf) -> Self {
        let endpoint = std::env::var("HF_ENDPOINT")
            .ok()
            .filter(|e| !e.is_empty())
            .unwrap_or_else(|| "https://huggingface.co".into());
        let token = std::env::var("HF_TOKEN").ok().filter(|t| !t.is_empty());
        let agent = ureq::Agent::config_builder()
            .timeout_connect(Some(Duration::from_secs(30)))
            .timeout_recv_response(Some(Duration::from_secs(60)))
            // A stalled body fails and resumes rather than hang.
            .timeout_recv_body(Some(Duration::from_secs(60)))
            .build()
            .into();
        Self {
            endpoint: endpoint.trim_end_matches('/').to_string(),
            token,
            agent,
            cache,
        }
    }

    /// The file's path in the cache, fetched (or checked) first.
    pub fn fetch(&self, wanted: &Wanted) -> anyhow::Result<PathBuf> {
        let siblings = self.siblings(&wanted.repo)?;
        let sibling = pick(&wanted.repo, &siblings, &wanted.file)?;
        let dest = self
            .cache
            .join("hub")
            .join(&wanted.repo)
            .join(&sibling.name);
        if dest.is_file() {
            match verify(&dest, sibling)? {
                Ok(()) => return Ok(dest),
                Err(why) => {
                    eprintln!(
                        "smelt: the cached {} {why}; fetching it again",
                        dest.display()
                    );
                    std::fs::remove_file(&dest)
                        .with_context(|| format!("cannot remove {}", dest.display()))?;
                }
            }
        }
        let dir = dest.parent().context("a cache path has a folder")?;
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let partial = partial_path(&dest);
        let mut last = None;
        for attempt in 1..=ATTEMPTS {
            match self.download(&wanted.repo, sibling, &partial) {
                Ok(()) => {
                    last = None;
                    break;
                }
                Err(e) => {
                    eprintln!("smelt: attempt {attempt} of {ATTEMPTS} stopped: {e:#}");
                    last = Some(e);
                }
            }
        }
        if let Some(e) = last {
            return Err(e.context(format!(
                "cannot fetch {} from {}/{}; run the command again to resume",
                sibling.name, self.endpoint, wanted.repo
            )));
        }
        if let Err(why) = verify(&partial, sibling)? {
            std::fs::remove_file(&partial).ok();
            bail!(
                "{} from {}/{} {why}; the download was removed, try again",
                sibling.name,
                self.endpoint,
                wanted.repo
            );
        }
        std::fs::rename(&partial, &dest)
            .with_context(|| format!("cannot move the download to {}", dest.display()))?;
        Ok(dest)
    }

    fn get(&self, url: &str) -> ureq::RequestBuilder<ureq::typestate::WithoutBody> {
        let req = self.agent.get(url);
        match &self.token {
            Some(t) => req.header("Authorization", &format!("Bearer {t}")),
            None => req,
        }
    }

    /// The repository's files, with the sizes and hashes the hub gives.
    fn siblings(&self, repo: &str) -> anyhow::Result<Vec<Sibling>> {
        let url = format!("{}/api/models/{repo}?blobs=true", self.endpoint);
        let mut resp = self.get(&url).call().map_err(|e| http_error(e, &url))?;
        let body = resp
            .body_mut()
            .read_to_string()
            .with_context(|| format!("cannot read {url}'s answer"))?;
        let info: Value = serde_json::from_str(&body)
            .with_context(|| format!("{url} did not answer with JSON"))?;
        let list = info
            .get("siblings")
            .and_then(Value::as_array)
            .with_context(|| format!("{url} lists no files (no \"siblings\")"))?;
        Ok(list
            .iter()
            .filter_map(|s| {
                Some(Sibling {
                    name: s.get("rfilename")?.as_str()?.to_string(),
                    size: s
                        .pointer("/lfs/size")
                        .or_else(|| s.get("size"))
                        .and_then(Value::as_u64),
                    sha256: s
                        .pointer("/lfs/sha256")
                        .and_then(Value::as_str)
                        .map(str::to_ascii_lowercase),
                })
            })
            .collect())
    }

    /// Appends the rest of the file to `partial`, from its current length.
    fn download(&self, repo: &str, file: &Sibling, partial: &Path) -> anyhow::Result<()> {
        let have = std::fs::metadata(partial).map_or(0, |m| m.len());
        if file.size.is_some_and(|size| have >= size) {
            return Ok(());
        }
        let url = format!("{}/{repo}/resolve/main/{}", self.endpoint, file.name);
        let mut req = self.get(&url);
        if have > 0 {
            req = req.header("Range", &format!("bytes={have}-"));
        }
        let mut resp = req.call().map_err(|e| http_error(e, &url))?;
        // 206: the rest; 200: the whole file (the server ignored Range).
        let start = if resp.status() == 206 { have } else { 0 };
        let total = file.size.or_else(|| {
            resp.headers()
                .get("content-length")
                .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
                .map(|n| n + start)
        });
        let mut out = std::fs::OpenOptions::new()
            .create(true)
            .append(start > 0)
            .write(true)
            .truncate(start == 0)
            .open(partial)
            .with_context(|| format!("cannot write {}", partial.display()))?;
        let mut progress = Progress::new(&file.name, total, start);
        let mut reader = resp.body_mut().as_reader();
        let mut buf = vec![0u8; 1 << 16];
        let mut done = start;
        loop {
            let n = reader
                .read(&mut buf)
                .with_context(|| format!("reading {url} after {done} bytes"))?;
            if n == 0 {
                break;
            }
            out.write_all(&buf[..n])
                .with_context(|| format!("cannot write {}", partial.display()))?;
            done += n as u64;
            progress.set(done);
        }
        out.sync_all().ok();
        progress.finish();
        if let Some(size) = total
            && done < size
        {
            bail!("the connection closed after {done} of {size} bytes");
        }
        Ok(())
    }
}

/// `{file}.partial` beside the file.
fn partial_path(dest: &Path) -> PathBuf {
    let mut p = dest.as_os_str().to_owned();
    p.push(".partial");
    PathBuf::from(p)
}

/// The file asked for among the repository's.
fn pick<'a>(repo: &str, siblings: &'a [Sibling], choice: &Choice) -> anyhow::Result<&'a Sibling> {
    let ggufs: Vec<&Sibling> = siblings
        .iter()
        .filter(|s| s.name.to_ascii_lowercase().ends_with(".gguf"))
        .collect();
    let names = || {
        ggufs
            .iter()
            .map(|s| s.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match choice {
        Choice::File(name) => siblings
            .iter()
            .find(|s| &s.name == name)
            .with_context(|| format!("{repo} has no file {name:?} (its GGUF files: {})", names())),
        Choice::Quant(quant) => {
            if ggufs.is_empty() {
                bail!("{repo} has no GGUF file");
            }
            let has = |q: &str| {
                let q = q.to_ascii_lowercase();
                ggufs
                    .iter()
                    .copied()
                    .filter(|s| s.name.to_ascii_lowercase().contains(&q))
                    .min_by_key(|s| s.name.len())
            };
            match quant {
                Some(q) => has(q).with_context(|| {
                    format!("{repo} has no GGUF file for {q:?} (it has: {})", names())
                }),
                None if ggufs.len() == 1 => Ok(ggufs[0]),
                None => PREFERRED.iter().find_map(|q| has(q)).with_context(|| {
                    format!(
                        "{repo} has several GGUF files; name one as {repo}:QUANT (it has: {})",
                        names()
                    )
                }),
            }
        }
    }
}

/// `Ok(Ok(()))` when the file's size and SHA-256 are the hub's;
/// `Ok(Err(why))` when not.
fn verify(path: &Path, file: &Sibling) -> anyhow::Result<Result<(), String>> {
    let len = std::fs::metadata(path)
        .with_context(|| format!("cannot read {}", path.display()))?
        .len();
    if let Some(size) = file.size
        && len != size
    {
        return Ok(Err(format!("has {len} bytes, not the hub's {size}")));
    }
    let Some(want) = &file.sha256 else {
        return Ok(Ok(()));
    };
    let mut f =
        std::fs::File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f
            .read(&mut buf)
            .with_context(|| format!("cannot read {}", path.display()))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    let got: String = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    if &got == want {
        Ok(Ok(()))
    } else {
        Ok(Err(format!("has SHA-256 {got}, not the hub's {want}")))
    }
}

fn http_error(e: ureq::Error, url: &str) -> anyhow::Error {
    match e {
        ureq::Error::StatusCode(401 | 403) => anyhow::anyhow!(
            "{url}: access denied (HTTP 401/403); set HF_TOKEN for gated or private repositories"
        ),
        ureq::Error::StatusCode(404) => anyhow::anyhow!("{url}: not found (HTTP 404)"),
        ureq::Error::StatusCode(code) => anyhow::anyhow!("{url}: HTTP {code}"),
        other => anyhow::anyhow!("{url}: {other}"),
    }
}

/// A bar on a terminal; otherwise a line every tenth of the file.
struct Progress {
    bar: Option<indicatif::ProgressBar>,
    name: String,
    total: Option<u64>,
    next_tenth: u64,
}

impl Progress {
    fn new(name: &str, total: Option<u64>, start: u64) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = indicatif::ProgressBar::new(total.unwrap_or(0));
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{msg} {bar:30} {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} eta {eta}",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            bar.set_message(name.to_string());
            bar.set_position(start);
            bar
        });
        if start > 0 {
            eprintln!("smelt: resuming {name} at {start} bytes");
        }
        let next_tenth = total.map_or(u64::MAX, |t| (start * 10 / t.max(1)) + 1);
        Self {
            bar,
            name: name.to_string(),
            total,
            next_tenth,
        }
    }

    fn set(&mut self, done: u64) {
        if let Some(bar) = &self.bar {
            bar.set_position(done);
            return;
        }
        if let Some(total) = self.total
            && done * 10 >= self.next_tenth * total
        {
            eprintln!(
                "smelt: {} {}% ({done} of {total} bytes)",
                self.name,
                done * 100 / total.max(1)
            );
            self.next_tenth = done * 10 / total.max(1) + 1;
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_parsed_and_checked() {
        let w = Wanted::from_repo("org/repo:q4_k_m").unwrap();
        assert_eq!(w.file, Choice::Quant(Some("q4_k_m".into())));
        let w = Wanted::from_url("hf://org/repo/sub/x.gguf").unwrap();
        assert_eq!(
            (w.repo.as_str(), w.file),
            ("org/repo", Choice::File("sub/x.gguf".into()))
        );
        for bad in ["repo", "org/", "../x", "org/re po"] {
            assert!(Wanted::from_repo(bad).is_err(), "{bad}");
        }
        for bad in [
            "hf://org/repo",
            "hf://org/repo/../x.gguf",
            "http://org/repo/x",
        ] {
            assert!(Wanted::from_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_quant_picks_its_file() {
        let s = |n: &str| Sibling {
            name: n.into(),
            size: None,
            sha256: None,
        };
        let files = [
            s("README.md"),
            s("m-Q8_0.gguf"),
            s("m-Q4_K_M.gguf"),
            s("m-Q4_K_S.gguf"),
        ];
        let pick_name = |c: Choice| pick("o/r", &files, &c).map(|s| s.name.clone());
        assert_eq!(
            pick_name(Choice::Quant(Some("q8_0".into()))).unwrap(),
            "m-Q8_0.gguf"
        );
        assert_eq!(pick_name(Choice::Quant(None)).unwrap(), "m-Q4_K_M.gguf");
        let e = pick_name(Choice::Quant(Some("q2_k".into()))).unwrap_err();
        assert!(e.to_string().contains("m-Q8_0.gguf"), "{e}");
    }
}
