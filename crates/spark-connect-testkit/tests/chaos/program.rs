//! The program's contract: a ready line, a clean stop, and a malformed
//! script refused before anything listens.

use std::process::Command;

use crate::{BIN, Running};

#[test]
fn prints_its_address_and_stops_cleanly_on_sigterm() {
    let server = Running::start(&[]);
    let (ip, port) = server.addr.rsplit_once(':').expect("host:port");
    assert_eq!(ip, "127.0.0.1");
    assert_ne!(
        port.parse::<u16>().expect("a port"),
        0,
        "port 0 is resolved"
    );
    let (status, log) = server.stop();
    assert!(status.success(), "{status}: {log}");
    assert!(log.contains("stopping on a signal"), "{log}");
}

#[test]
fn a_malformed_script_names_line_and_field_before_listening() {
    let dir = std::env::temp_dir().join(format!("chaos-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.toml");
    std::fs::write(&path, "[[fault]]\nkind = \"reset\"\nafter_responsse = 3\n").unwrap();
    let out = Command::new(BIN)
        .args(["--listen", "127.0.0.1:0"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty(), "nothing listened");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.toml: line 3: field `after_responsse`: unknown field"),
        "{err}"
    );
    let out = Command::new(BIN)
        .arg("--check")
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn check_accepts_every_shipped_scenario() {
    for path in crate::scenarios() {
        let out = Command::new(BIN)
            .arg("--check")
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
