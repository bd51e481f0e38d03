//! The fuzz harness of plait: mutated inputs for every parser and CLI surface, run in
//! process, each case on its own thread with a time limit, a panic caught and reported with
//! its input. The surfaces and their checks are in `tests/surfaces.rs`; inputs that once
//! failed are kept under `corpus/<surface>/` and replayed by `tests/corpus.rs`.
//!
//! Mutations (a `proptest` strategy, so a run is reproducible from its seed): bit flips,
//! insertions of random bytes or of tokens (`-`, `"`, `[`, `1e308`, …), deletions,
//! duplications, truncations, and the substitution of a number of the input by one of
//! [`SPECIAL_NUMBERS`] (huge, negative, NaN, 1e308, 5e-324, 2^63 − 1, 2^32, …).
//!
//! Budget, per surface, from the environment:
//! * `PLAIT_FUZZ_CASES` — cases to run (default [`DEFAULT_CASES`], small enough that the
//!   whole harness adds well under a minute to `cargo test --workspace`);
//! * `PLAIT_FUZZ_SECONDS` — run for this long instead (no case limit), e.g. `600` for ten
//!   minutes a surface: `PLAIT_FUZZ_SECONDS=600 cargo test --release -p plait-fuzz`;
//! * `PLAIT_FUZZ_SEED` — the generator's seed (default 0; a run is deterministic in it);
//! * `PLAIT_FUZZ_CASE_TIMEOUT_S` — how long one case may run before it counts as a hang
//!   (default 10 s in release builds, 60 s in debug builds).
//!
//! Before each case its input is written to `<target tmp>/fuzz-current-<surface>` so that an
//! abort the harness cannot catch (out of memory, stack overflow) leaves the input behind;
//! every failing input is written to `<target tmp>/fuzz-findings/<surface>/`, ready to be
//! copied into the corpus.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

/// Cases per surface when neither `PLAIT_FUZZ_CASES` nor `PLAIT_FUZZ_SECONDS` is set.
pub const DEFAULT_CASES: u64 = 24;

/// Numbers substituted for the numbers of an input: the extremes of every integer width
/// the code converts to, non-finite and subnormal floats, zero, negatives.
pub const SPECIAL_NUMBERS: &[&str] = &[
    "9223372036854775807",
    "9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",
    "-9223372036854775808",
    "-1",
    "0",
    "-0",
    "0.0",
    "NaN",
    "nan",
    "inf",
    "-inf",
    "1e308",
    "1.8e308",
    "-1e308",
    "5e-324",
    "1e-300",
    "4294967295",
    "4294967296",
    "2147483648",
    "65536",
    "1000000",
    "1e30",
    "3",
    "7",
];

/// Tokens inserted whole: the structure characters of JSON, TOML and flags.
const TOKENS: &[&str] = &[
    "-", "--", "\"", "'", "[", "]", "{", "}", ",", ":", "=", "\n", " ", "\0", "null", "true", "[[",
    "]]", "\\u0000", "e", ".", "1e308", "-1", "NaN",
];

/// One edit of an input. Positions are taken modulo the input's length.
#[derive(Debug, Clone)]
pub enum Mutation {
    FlipBit {
        at: usize,
        bit: u8,
    },
    SetByte {
        at: usize,
        byte: u8,
    },
    Insert {
        at: usize,
        bytes: Vec<u8>,
    },
    InsertToken {
        at: usize,
        token: usize,
    },
    Delete {
        at: usize,
        len: usize,
    },
    Duplicate {
        at: usize,
        len: usize,
        to: usize,
    },
    Truncate {
        at: usize,
    },
    /// Replace the `which`-th number of the input by [`SPECIAL_NUMBERS`]`[value]`.
    Number {
        which: usize,
        value: usize,
    },
}

/// A strategy for one [`Mutation`]; numeric substitutions are the most frequent, since
/// they reach the furthest into the code (the input still parses).
pub fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        2 => (any::<usize>(), 0u8..8).prop_map(|(at, bit)| Mutation::FlipBit { at, bit }),
        1 => (any::<usize>(), any::<u8>()).prop_map(|(at, byte)| Mutation::SetByte { at, byte }),
        1 => (any::<usize>(), prop::collection::vec(any::<u8>(), 1..8))
            .prop_map(|(at, bytes)| Mutation::Insert { at, bytes }),
        2 => (any::<usize>(), 0..TOKENS.len())
            .prop_map(|(at, token)| Mutation::InsertToken { at, token }),
        1 => (any::<usize>(), 1usize..16).prop_map(|(at, len)| Mutation::Delete { at, len }),
        1 => (any::<usize>(), 1usize..64, any::<usize>())
            .prop_map(|(at, len, to)| Mutation::Duplicate { at, len, to }),
        1 => any::<usize>().prop_map(|at| Mutation::Truncate { at }),
        8 => (any::<usize>(), 0..SPECIAL_NUMBERS.len())
            .prop_map(|(which, value)| Mutation::Number { which, value }),
    ]
}

/// Byte ranges of the numbers in `input` (an optional sign, digits, `.`, an exponent),
/// also where digits follow letters.
pub fn numbers(input: &[u8]) -> Vec<(usize, usize)> {
    let mut out = vec![];
    let mut i = 0;
    while i < input.len() {
        let starts = input[i].is_ascii_digit()
            || (input[i] == b'-' && input.get(i + 1).is_some_and(u8::is_ascii_digit));
        // Digits glued to a name count too (`pp4`, `mbs16`, `fp8`): plan strings are made of
        // them, and a changed name is as good a mutation as any.
        if starts {
            let mut j = i + 1;
            while j < input.len()
                && (input[j].is_ascii_digit()
                    || input[j] == b'.'
                    || ((input[j] == b'e' || input[j] == b'E')
                        && input
                            .get(j + 1)
                            .is_some_and(|c| c.is_ascii_digit() || *c == b'-' || *c == b'+'))
                    || ((input[j] == b'-' || input[j] == b'+')
                        && (input[j - 1] == b'e' || input[j - 1] == b'E')))
            {
                j += 1;
            }
            out.push((i, j));
            i = j;
        } else {
            i += 1;
        }
    }
    out
}

/// `seed` with `mutations` applied in order.
pub fn apply(seed: &[u8], mutations: &[Mutation]) -> Vec<u8> {
    let mut v = seed.to_vec();
    for m in mutations {
        let len = v.len();
        let pos = |at: usize| if len == 0 { 0 } else { at % (len + 1) };
        match m {
            Mutation::FlipBit { at, bit } if len > 0 => v[at % len] ^= 1 << bit,
            Mutation::SetByte { at, byte } if len > 0 => v[at % len] = *byte,
            Mutation::Insert { at, bytes } => {
                let p = pos(*at);
                v.splice(p..p, bytes.iter().copied());
            }
            Mutation::InsertToken { at, token } => {
                let p = pos(*at);
                v.splice(p..p, TOKENS[*token].bytes());
            }
            Mutation::Delete { at, len: n } if len > 0 => {
                let p = at % len;
                v.drain(p..(p + n).min(len));
            }
            Mutation::Duplicate { at, len: n, to } if len > 0 => {
                let p = at % len;
                let chunk: Vec<u8> = v[p..(p + n).min(len)].to_vec();
                let q = to % (len + 1);
                v.splice(q..q, chunk);
            }
            Mutation::Truncate { at } if len > 0 => v.truncate(at % len),
            Mutation::Number { which, value } => {
                let spans = numbers(&v);
                if !spans.is_empty() {
                    let (a, b) = spans[which % spans.len()];
                    v.splice(a..b, SPECIAL_NUMBERS[*value].bytes());
                }
            }
            _ => {}
        }
    }
    v
}

/// Whether `text` shows a non-finite number: a token `NaN`, `inf`, `-inf`, `Infinity`
/// (as Rust and JavaScript print them), or `∞`.
pub fn non_finite(text: &str) -> Option<String> {
    if text.contains('∞') {
        return Some("∞".into());
    }
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '.'))
        .map(|t| t.trim_matches('.'))
        .find(|t| {
            let t = t.trim_start_matches('-');
            t.eq_ignore_ascii_case("nan") || t == "inf" || t == "Infinity" || t == "infinity"
        })
        .map(String::from)
}

/// The input as the report shows it: text (escaped) when it is UTF-8, else hexadecimal,
/// cut to about 2,000 characters.
pub fn show(input: &[u8]) -> String {
    let s = match std::str::from_utf8(input) {
        Ok(t) => format!("{t:?}"),
        Err(_) => input.iter().map(|b| format!("{b:02x}")).collect(),
    };
    if s.len() > 2000 {
        let cut = (0..=2000)
            .rev()
            .find(|&i| s.is_char_boundary(i))
            .unwrap_or(0);
        format!("{}… ({} bytes)", &s[..cut], input.len())
    } else {
        s
    }
}

/// What one surface's run did.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub surface: String,
    pub cases: u64,
    pub seconds: f64,
    /// (input, what went wrong).
    pub findings: Vec<(Vec<u8>, String)>,
    /// Slowest case, seconds.
    pub slowest_s: f64,
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// The case time limit (see the crate docs).
pub fn case_timeout() -> Duration {
    let default = if cfg!(debug_assertions) { 60 } else { 10 };
    Duration::from_secs(env_u64("PLAIT_FUZZ_CASE_TIMEOUT_S").unwrap_or(default))
}

/// A check of one input: `Err` is a finding (a wrong output); a panic is caught as one.
pub type Check = Arc<dyn Fn(&[u8]) -> Result<(), String> + Send + Sync>;

/// Runs `check` on `input` on a thread of its own with a 256 MiB stack (the CLI's own
/// threads are given large stacks too), within `timeout`. `Err` describes a panic, a
/// finding or a hang (the thread is then left behind: a surface stops at its first hang).
///
/// A thread that answered is joined, never detached. glibc's `pthread_detach` (2.34 and
/// later, `nptl/pthread_detach.c`) marks the thread detached and only then reads its
/// descriptor, which lives at the top of the thread's stack; a thread that exits in between
/// frees that stack itself, and a stack this large is unmapped rather than cached. Dropping
/// the `JoinHandle` of a case that had just answered therefore crashed the harness now and
/// then with SIGSEGV (twice in about 10^6 cases; the kernel log's faulting address is
/// `pthread_detach+28` in Debian's glibc 2.36, the read of `cancelhandling` just after the
/// `joinid` exchange).
pub fn run_case(check: &Check, input: &[u8], timeout: Duration) -> Result<Duration, String> {
    let (tx, rx) = mpsc::channel();
    let check = Arc::clone(check);
    let owned = input.to_vec();
    let start = Instant::now();
    let thread = std::thread::Builder::new()
        .name("fuzz-case".into())
        .stack_size(256 << 20)
        .spawn(move || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&owned)));
            let r = match r {
                Ok(r) => r,
                Err(p) => Err(format!(
                    "panic: {}",
                    p.downcast_ref::<String>()
                        .cloned()
                        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_else(|| "(no message)".into())
                )),
            };
            tx.send(r).ok();
        })
        .map_err(|e| format!("cannot start a case thread: {e}"))?;
    let answer = rx.recv_timeout(timeout);
    let elapsed = start.elapsed();
    match answer {
        Ok(r) => {
            // It has sent its answer and is about to return; its panic, if any, is caught.
            thread.join().ok();
            r.map(|()| elapsed)
        }
        Err(_) => {
            // Still running: neither joined (that would wait out the hang) nor detached
            // (see above); its stack stays mapped until the process ends.
            std::mem::forget(thread);
            Err(format!("hang: no answer within {} s", timeout.as_secs()))
        }
    }
}

fn scratch() -> PathBuf {
    std::env::var_os("PLAIT_FUZZ_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir)
}

fn save(path: &Path, bytes: &[u8]) {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d).ok();
    }
    if let Ok(mut f) = std::fs::File::create(path) {
        f.write_all(bytes).ok();
    }
}

/// Fuzzes one surface: mutated `seeds` through `check`, for the budget of the environment
/// (see the crate docs). Returns what it found; the caller asserts.
pub fn fuzz(surface: &str, seeds: &[Vec<u8>], check: Check) -> Report {
    assert!(!seeds.is_empty(), "{surface}: no seed inputs");
    let seconds = env_u64("PLAIT_FUZZ_SECONDS");
    let cases = env_u64("PLAIT_FUZZ_CASES").unwrap_or(DEFAULT_CASES);
    let seed = env_u64("PLAIT_FUZZ_SEED").unwrap_or(0);
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    for (i, b) in surface.bytes().enumerate() {
        key[8 + i % 24] ^= b;
    }
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &key),
    );
    let strategy = (0..seeds.len(), prop::collection::vec(mutation(), 1..5));
    let timeout = case_timeout();
    let dir = scratch();
    let current = dir.join(format!("fuzz-current-{surface}"));
    let start = Instant::now();
    let mut report = Report {
        surface: surface.into(),
        ..Report::default()
    };
    loop {
        match seconds {
            Some(s) if start.elapsed().as_secs() >= s => break,
            None if report.cases >= cases => break,
            _ => {}
        }
        let (which, mutations) = strategy
            .new_tree(&mut runner)
            .expect("the strategy always generates")
            .current();
        // The first case of each seed is the seed itself.
        let input = if (report.cases as usize) < seeds.len() {
            seeds[report.cases as usize].clone()
        } else {
            apply(&seeds[which], &mutations)
        };
        save(&current, &input);
        report.cases += 1;
        match run_case(&check, &input, timeout) {
            Ok(t) => report.slowest_s = report.slowest_s.max(t.as_secs_f64()),
            Err(e) => {
                let n = report.findings.len();
                save(&dir.join(format!("fuzz-findings/{surface}/{n:04}")), &input);
                let hang = e.starts_with("hang");
                report.findings.push((input, e));
                if hang || report.findings.len() >= 20 {
                    break;
                }
            }
        }
    }
    report.seconds = start.elapsed().as_secs_f64();
    std::fs::remove_file(&current).ok();
    eprintln!(
        "fuzz {surface}: {} cases in {:.1} s (slowest {:.2} s), {} finding(s)",
        report.cases,
        report.seconds,
        report.slowest_s,
        report.findings.len()
    );
    report
}

/// Panics listing `report`'s findings, if any.
pub fn assert_clean(report: &Report) {
    if report.findings.is_empty() {
        return;
    }
    let mut msg = format!(
        "{}: {} finding(s) in {} cases (inputs saved under fuzz-findings/{}/):\n",
        report.surface,
        report.findings.len(),
        report.cases,
        report.surface
    );
    for (input, e) in &report.findings {
        msg += &format!("  {e}\n    input: {}\n", show(input));
    }
    panic!("{msg}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_found_and_replaced() {
        let s = b"tp8 --gbs 1536 x=-2.5e-3 a1 [3,4]";
        let spans: Vec<&[u8]> = numbers(s).into_iter().map(|(a, b)| &s[a..b]).collect();
        assert_eq!(spans, [&b"8"[..], b"1536", b"-2.5e-3", b"1", b"3", b"4"]);
        let out = apply(s, &[Mutation::Number { which: 2, value: 9 }]);
        assert_eq!(out, b"tp8 --gbs 1536 x=NaN a1 [3,4]");
        let out = apply(
            b"pp4 mbs1 1f1b",
            &[Mutation::Number {
                which: 0,
                value: 19,
            }],
        );
        assert_eq!(out, b"pp4294967296 mbs1 1f1b");
    }

    #[test]
    fn non_finite_tokens_are_found_and_words_are_not() {
        assert_eq!(non_finite("time NaN s").as_deref(), Some("NaN"));
        assert_eq!(non_finite("load -inf,").as_deref(), Some("-inf"));
        assert!(non_finite("infeasible: info").is_none());
        assert!(non_finite("1e308 bytes").is_none());
    }

    #[test]
    fn a_panic_and_a_hang_are_reported() {
        let panics: Check = Arc::new(|_| panic!("boom"));
        let e = run_case(&panics, b"x", Duration::from_secs(5)).unwrap_err();
        assert_eq!(e, "panic: boom");
        let hangs: Check = Arc::new(|_| {
            std::thread::sleep(Duration::from_secs(3));
            Ok(())
        });
        let e = run_case(&hangs, b"x", Duration::from_millis(100)).unwrap_err();
        assert!(e.starts_with("hang"), "{e}");
    }

    #[test]
    fn a_case_that_answered_has_finished_when_its_result_is_back() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static FINISHED: AtomicUsize = AtomicUsize::new(0);
        struct OnExit;
        impl Drop for OnExit {
            fn drop(&mut self) {
                // Runs as the case's thread exits, after its answer was sent.
                std::thread::sleep(Duration::from_millis(20));
                FINISHED.fetch_add(1, Ordering::SeqCst);
            }
        }
        thread_local!(static GUARD: OnExit = const { OnExit });
        let check: Check = Arc::new(|_| {
            GUARD.with(|_| ());
            Ok(())
        });
        for n in 1..=3 {
            run_case(&check, b"x", Duration::from_secs(5)).unwrap();
            // Joined, not detached (see `run_case`): nothing of the thread outlives the call.
            assert_eq!(FINISHED.load(Ordering::SeqCst), n);
        }
    }
}
