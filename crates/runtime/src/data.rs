//! Training data: bytes through a byte-level tokenizer (every byte is one token of a
//! 256-token vocabulary), cut into windows of `seq + 1` tokens, visited in a seeded
//! shuffled order epoch by epoch. The position in that order is one number (sequences
//! consumed), so a resumed run sees exactly the batches the uninterrupted run saw.
//!
//! Inputs: a plain file of any bytes (UTF-8 or not), or JSON lines whose objects carry a
//! `text` string (documents are joined by a blank line). Without a file, a built-in corpus
//! is generated (see [`builtin_corpus`]).

use std::path::Path;

use crate::error::{DataError, RuntimeError};
use crate::rng::{derive_seed, SplitMix64};

/// Tokens of the byte-level tokenizer.
pub const BYTE_VOCAB: usize = 256;

/// A tokenized corpus.
#[derive(Debug, Clone)]
pub struct Dataset {
    /// Where it came from (for messages and the checkpoint manifest).
    pub source: String,
    pub tokens: Vec<u32>,
}

/// One training sequence: inputs and next-token targets, `seq` each.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub inputs: Vec<u32>,
    pub targets: Vec<u32>,
}

/// Byte-level tokenization.
pub fn tokenize(text: &str) -> Vec<u32> {
    tokenize_bytes(text.as_bytes())
}

/// Byte-level tokenization of any bytes.
pub fn tokenize_bytes(bytes: &[u8]) -> Vec<u32> {
    bytes.iter().map(|&b| u32::from(b)).collect()
}

/// Byte-level detokenization (lossy for sequences cut inside a UTF-8 character).
pub fn detokenize(tokens: &[u32]) -> String {
    let bytes: Vec<u8> = tokens.iter().map(|&t| t.min(255) as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

impl Dataset {
    /// Reads a file: JSON lines taking each object's `text` field when the name ends in
    /// `.jsonl` or `.json` (a line that is not such an object is an error naming it), or
    /// when every non-empty line is a JSON object with a string `text` field; otherwise its
    /// bytes as they are (any encoding: the tokenizer is byte-level).
    pub fn from_path(path: &Path) -> Result<Dataset, RuntimeError> {
        let bytes =
            crate::files::read_capped(path, crate::files::MAX_DATA_BYTES).map_err(|error| {
                DataError::Unreadable {
                    path: path.to_path_buf(),
                    error,
                }
            })?;
        let name = path.display().to_string();
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .unwrap_or("")
            .to_ascii_lowercase();
        if matches!(ext.as_str(), "jsonl" | "json") {
            let text = std::str::from_utf8(&bytes).map_err(|error| DataError::NotUtf8 {
                file: name.clone(),
                error,
            })?;
            return Dataset::from_text(&jsonl_text(text, &name)?, &name);
        }
        if let Ok(text) = std::str::from_utf8(&bytes) {
            if looks_like_jsonl(text) {
                return Dataset::from_text(&jsonl_text(text, &name)?, &name);
            }
        }
        Dataset::from_bytes(&bytes, &name)
    }

    pub fn from_text(text: &str, source: &str) -> Result<Dataset, RuntimeError> {
        Dataset::from_bytes(text.as_bytes(), source)
    }

    /// Any bytes, one token each; refused when there are none besides whitespace.
    pub fn from_bytes(bytes: &[u8], source: &str) -> Result<Dataset, RuntimeError> {
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Err(DataError::NoText {
                file: source.to_string(),
            }
            .into());
        }
        Ok(Dataset {
            source: source.into(),
            tokens: tokenize_bytes(bytes),
        })
    }

    /// The built-in corpus (see [`builtin_corpus`]).
    pub fn builtin() -> Dataset {
        Dataset {
            source: "built-in corpus".into(),
            tokens: tokenize(&builtin_corpus()),
        }
    }

    /// Windows of `seq + 1` tokens that do not overlap.
    pub fn windows(&self, seq: usize) -> usize {
        self.tokens.len().saturating_sub(1) / seq.max(1)
    }

    /// Checks that at least one training sequence of `seq` tokens fits.
    pub fn check(&self, seq: usize) -> Result<(), RuntimeError> {
        if self.windows(seq) == 0 {
            return Err(DataError::TooShort {
                file: self.source.clone(),
                tokens: self.tokens.len(),
                seq,
            }
            .into());
        }
        Ok(())
    }

    /// The `index`-th sequence of the run's order under `seed`: epoch `index / windows`
    /// visits the windows in a seeded Fisher–Yates permutation.
    pub fn sample(&self, seed: u64, seq: usize, index: u64) -> Sample {
        Sampler::new(self, seed, seq).sample(index)
    }
}

/// Draws samples of one run, keeping the current epoch's permutation.
pub struct Sampler<'a> {
    data: &'a Dataset,
    seed: u64,
    seq: usize,
    epoch: Option<(u64, Vec<u32>)>,
}

impl<'a> Sampler<'a> {
    pub fn new(data: &'a Dataset, seed: u64, seq: usize) -> Self {
        Sampler {
            data,
            seed,
            seq,
            epoch: None,
        }
    }

    /// The `index`-th sequence of the run.
    pub fn sample(&mut self, index: u64) -> Sample {
        let seq = self.seq;
        let w = self.data.windows(seq) as u64;
        let epoch = index / w;
        if self.epoch.as_ref().is_none_or(|(e, _)| *e != epoch) {
            let seed = derive_seed(self.seed, &format!("data.epoch.{epoch}"));
            self.epoch = Some((epoch, permutation(seed, w)));
        }
        let order = &self
            .epoch
            .as_ref()
            .map(|(_, o)| o.as_slice())
            .unwrap_or(&[]);
        let start = order[(index % w) as usize] as usize * seq;
        let t = &self.data.tokens;
        Sample {
            inputs: t[start..start + seq].to_vec(),
            targets: t[start + 1..start + seq + 1].to_vec(),
        }
    }
}

/// A seeded random permutation of `0..n` (Fisher–Yates).
fn permutation(seed: u64, n: u64) -> Vec<u32> {
    let mut order: Vec<u32> = (0..n as u32).collect();
    let mut rng = SplitMix64::new(seed);
    for i in (1..n as usize).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        order.swap(i, j);
    }
    order
}

/// Whether every non-empty line is a JSON object with a string `text` field (and there is
/// one): a plain-text file whose first line happens to be JSON is not taken for JSON lines.
fn looks_like_jsonl(text: &str) -> bool {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty()).peekable();
    lines.peek().is_some()
        && lines.all(|l| {
            serde_json::from_str::<serde_json::Value>(l)
                .is_ok_and(|v| v.get("text").is_some_and(|t| t.is_string()))
        })
}

fn jsonl_text(text: &str, source: &str) -> Result<String, RuntimeError> {
    let mut docs = Vec::new();
    for (no, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|error| DataError::BadLine {
                file: source.to_string(),
                line: no + 1,
                error,
            })?;
        match v.get("text").and_then(|t| t.as_str()) {
            Some(t) => docs.push(t.to_string()),
            None => {
                return Err(DataError::NoTextField {
                    file: source.to_string(),
                    line: no + 1,
                }
                .into())
            }
        }
    }
    Ok(docs.join("\n\n"))
}

/// The built-in corpus: about 200 kB of English sentences about weaving and training,
/// drawn from a small grammar by a fixed-seed generator. Generated by plait's own code, so
/// it carries the project's licence (MIT OR Apache-2.0); it has enough structure (spelling,
/// word order, agreement) for a small model's loss to fall quickly.
pub fn builtin_corpus() -> String {
    const SUBJECTS: &[&str] = &[
        "the weaver",
        "a young spinner",
        "the old loom",
        "my grandmother",
        "the apprentice",
        "a patient teacher",
        "the river",
        "the miller",
        "a quiet student",
        "the baker",
        "the captain",
        "a tired traveller",
        "the gardener",
        "our neighbour",
        "the scribe",
    ];
    const VERBS: &[&str] = &[
        "braids",
        "weaves",
        "follows",
        "counts",
        "mends",
        "carries",
        "watches",
        "folds",
        "gathers",
        "remembers",
        "studies",
        "ties",
        "paints",
        "measures",
        "finds",
    ];
    const OBJECTS: &[&str] = &[
        "three strands of wool",
        "the long red thread",
        "a basket of linen",
        "the morning light",
        "every pattern",
        "a map of the valley",
        "the silver needle",
        "two coloured ribbons",
        "the heavy rope",
        "a bundle of reeds",
        "the evening bread",
        "a letter from home",
        "the tangled yarn",
        "a cup of warm milk",
        "the wooden shuttle",
    ];
    const PLACES: &[&str] = &[
        "by the window",
        "in the market",
        "under the bridge",
        "near the mill",
        "at the edge of the forest",
        "in the small kitchen",
        "on the hill",
        "beside the fire",
        "in the workshop",
        "along the river bank",
    ];
    const TIMES: &[&str] = &[
        "every morning",
        "before dawn",
        "after the rain",
        "on quiet evenings",
        "in winter",
        "all summer long",
        "when the bell rings",
        "at noon",
        "once a week",
        "late at night",
    ];
    const ADVERBS: &[&str] = &[
        "slowly",
        "carefully",
        "with great patience",
        "without a word",
        "quickly",
        "gently",
        "with both hands",
        "again and again",
    ];
    const LINKS: &[&str] = &["and then", "because", "while", "so that", "but"];
    let mut rng = SplitMix64::new(0x0070_6c61_6974); // "plait"
    let mut pick = |list: &[&'static str]| list[rng.below(list.len() as u64) as usize];
    let mut out = String::with_capacity(210_000);
    let mut paragraph = 0;
    while out.len() < 200_000 {
        let sentences = 3 + (paragraph % 4);
        for _ in 0..sentences {
            let s = pick(SUBJECTS);
            let mut sentence = format!("{s} {} {} {}", pick(VERBS), pick(OBJECTS), pick(PLACES));
            match paragraph % 3 {
                0 => sentence = format!("{} {sentence}", capital(pick(TIMES))),
                1 => sentence.push_str(&format!(" {}", pick(ADVERBS))),
                _ => sentence.push_str(&format!(
                    ", {} {} {} {}",
                    pick(LINKS),
                    pick(SUBJECTS),
                    pick(VERBS),
                    pick(OBJECTS)
                )),
            }
            out.push_str(&capital(&sentence));
            out.push_str(". ");
        }
        out.pop();
        out.push_str("\n\n");
        paragraph += 1;
    }
    out
}

fn capital(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().collect::<String>() + c.as_str(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_seeded_windows_with_shifted_targets() {
        let d = Dataset::from_text("abcdefghijklmnopqrstuvwxyz", "t").unwrap();
        assert_eq!(d.windows(5), 5);
        let a = d.sample(1, 5, 3);
        assert_eq!(a, d.sample(1, 5, 3));
        assert_eq!(&a.inputs[1..], &a.targets[..4]);
        // One epoch visits every window once.
        let mut starts: Vec<u32> = (0..5).map(|i| d.sample(1, 5, i).inputs[0]).collect();
        starts.sort();
        assert_eq!(starts, vec![97, 102, 107, 112, 117]);
        assert!(d
            .check(30)
            .unwrap_err()
            .to_string()
            .contains("needs at least 31"));
    }

    #[test]
    fn builtin_corpus_is_fixed_and_large_enough() {
        let c = builtin_corpus();
        assert!(c.len() >= 200_000);
        assert_eq!(c, builtin_corpus());
        assert!(c.is_ascii());
    }

    #[test]
    fn jsonl_takes_text_fields_and_names_bad_lines() {
        let t = jsonl_text("{\"text\": \"a\"}\n{\"text\": \"b\"}\n", "x").unwrap();
        assert_eq!(t, "a\n\nb");
        let e = jsonl_text("{\"text\": \"a\"}\n{\"body\": 1}\n", "x").unwrap_err();
        assert!(e.to_string().contains("line 2"), "{e}");
    }

    #[test]
    fn files_are_bytes_unless_they_are_json_lines() {
        let dir = std::env::temp_dir().join(format!("plait-data-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // Not UTF-8: read as bytes, one token each.
        let latin1 = dir.join("latin1.txt");
        std::fs::write(&latin1, b"caf\xe9 cr\xe8me\n").unwrap();
        let d = Dataset::from_path(&latin1).unwrap();
        assert_eq!(d.tokens.len(), 11);
        assert_eq!(d.tokens[3], 0xe9);
        // Plain text whose first line is a JSON object: still plain text.
        let notes = dir.join("notes.txt");
        let text = "{\"text\": \"a\"}\nand then some prose\n";
        std::fs::write(&notes, text).unwrap();
        assert_eq!(Dataset::from_path(&notes).unwrap().tokens, tokenize(text));
        // Every line an object with `text`: JSON lines, whatever the name.
        let lines = dir.join("corpus.txt");
        std::fs::write(&lines, "{\"text\": \"ab\"}\n\n{\"text\": \"cd\"}\n").unwrap();
        assert_eq!(
            Dataset::from_path(&lines).unwrap().tokens,
            tokenize("ab\n\ncd")
        );
        // `.jsonl`: JSON lines, and a bad line is an error naming it.
        let bad = dir.join("bad.jsonl");
        std::fs::write(&bad, "{\"text\": \"ab\"}\nprose\n").unwrap();
        let e = Dataset::from_path(&bad).unwrap_err().to_string();
        assert!(e.contains("line 2"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
