//! What happened in one run, as text lines stamped with simulated time,
//! and its hash. The server draws random UUIDs (response ids, its
//! server-side session id); each is replaced by its order of first
//! appearance, so that two runs of one seed give the same text. The
//! client's own ids (session, operation) are drawn from the seed.

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::rc::Rc;
use std::time::Duration;

/// The trace of one run. Cheap to clone (shared within the simulation's
/// single thread).
#[derive(Debug, Clone, Default)]
pub struct Trace {
    inner: Rc<RefCell<Lines>>,
}

#[derive(Debug, Default)]
struct Lines {
    lines: Vec<String>,
    ids: HashMap<String, usize>,
}

impl Trace {
    /// Appends one event at simulated time `at`, its UUIDs normalized.
    pub fn event(&self, at: Duration, what: impl AsRef<str>) {
        let mut inner = self.inner.borrow_mut();
        let text = normalize(what.as_ref(), &mut inner.ids);
        inner
            .lines
            .push(format!("{:>10.3}s {text}", at.as_secs_f64()));
    }

    /// Appends one event at the current simulated time (inside a host).
    pub fn now(&self, what: impl AsRef<str>) {
        self.event(turmoil::sim_elapsed().unwrap_or_default(), what);
    }

    /// The lines so far.
    pub fn lines(&self) -> Vec<String> {
        self.inner.borrow().lines.clone()
    }

    /// A hash of every line (the same on every run of the same binary).
    pub fn hash(&self) -> u64 {
        let mut h = DefaultHasher::new();
        self.inner.borrow().lines.hash(&mut h);
        h.finish()
    }
}

/// Replaces every UUID-shaped word by `#n`, its order of first appearance.
fn normalize(text: &str, ids: &mut HashMap<String, usize>) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < bytes.len() {
        if i + 36 <= bytes.len() && is_uuid(&bytes[i..i + 36]) {
            let id = &text[i..i + 36];
            let n = ids.len();
            let n = *ids.entry(id.to_owned()).or_insert(n);
            out.push_str(&format!("#{n}"));
            i += 36;
        } else {
            let c = text[i..].chars().next().expect("in bounds");
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

fn is_uuid(b: &[u8]) -> bool {
    b.iter().enumerate().all(|(i, c)| match i {
        8 | 13 | 18 | 23 => *c == b'-',
        _ => c.is_ascii_hexdigit(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_become_their_order() {
        let mut ids = HashMap::new();
        let a = "00112233-4455-6677-8899-aabbccddeeff";
        let b = "ffffffff-4455-6677-8899-aabbccddeeff";
        assert_eq!(
            normalize(&format!("x {a} y {b} {a}"), &mut ids),
            "x #0 y #1 #0"
        );
    }
}
