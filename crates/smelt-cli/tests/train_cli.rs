//! `smelt train cnn`, `smelt classify` and `smelt sample` end to end on the
//! CPU, short, and their errors on bad input.

use std::process::Command;

fn smelt() -> Command {
    Command::new(env!("CARGO_BIN_EXE_smelt"))
}

fn run(cmd: &mut Command) -> (bool, String) {
    let out = cmd.output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

#[test]
fn train_cnn_writes_a_checkpoint_and_plot_that_classify_reads() {
    let dir = std::env::temp_dir().join(format!("smelt-train-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (ok, text) = run(smelt()
        .args([
            "train",
            "cnn",
            "--steps",
            "150",
            "--threads",
            "2",
            "--verbose",
            "--out",
        ])
        .arg(&dir));
    assert!(ok, "{text}");
    assert!(text.contains("accuracy "), "{text}");
    let ck = dir.join("lenet-digits.safetensors");
    let svg = std::fs::read_to_string(dir.join("lenet-digits-loss.svg")).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.contains("<polyline"),
        "{svg}"
    );
    let (ok, classify) = run(smelt().arg("classify").arg(&ck));
    assert!(ok, "{classify}");
    // The same held-out split and weights give the same accuracy.
    let acc = |t: &str| {
        t.lines()
            .find(|l| l.contains("accuracy"))
            .map(|l| l.split("accuracy").nth(1).unwrap().trim().to_string())
    };
    assert_eq!(acc(&text), acc(&classify));
    // One labelled row from a file.
    let row = dir.join("one.csv");
    std::fs::write(&row, "0,0,5,13,9,1,0,0,0,0,13,15,10,15,5,0,0,3,15,2,0,11,8,0,0,4,12,0,0,8,8,0,0,5,8,0,0,9,8,0,0,4,11,0,1,12,7,0,0,2,14,5,10,12,0,0,0,0,6,13,10,0,0,0,0\n").unwrap();
    let (ok, one) = run(smelt().arg("classify").arg(&ck).arg("--input").arg(&row));
    assert!(ok && one.contains("(label 0)"), "{one}");
    // Bad inputs are errors, not panics.
    std::fs::write(&row, "1,2,3\n").unwrap();
    let (ok, bad) = run(smelt().arg("classify").arg(&ck).arg("--input").arg(&row));
    assert!(
        !ok && bad.contains("64 pixels") && !bad.contains("panicked"),
        "{bad}"
    );
    let (ok, bad) = run(smelt().arg("sample").arg(&ck));
    assert!(
        !ok && bad.contains("char-lstm") && !bad.contains("panicked"),
        "{bad}"
    );
    std::fs::write(&row, "not a checkpoint").unwrap();
    let (ok, bad) = run(smelt().arg("classify").arg(&row));
    assert!(!ok && !bad.contains("panicked"), "{bad}");
    let _ = std::fs::remove_dir_all(&dir);
}
