//! Architecture invariant: only the CLI knows its flag names. The libraries name the
//! request's fields (`tp`, `cp_comm`, `gen_len`) and leave the source of an error in one to
//! the caller (`SpecError::for_field`); the CLI spells the flag (`flag_for`), the Python
//! bindings get it through the CLI. A `--flag` in a library's string literal is a CLI name
//! leaking into a library, except where an export writes another program's command line
//! (`OTHER_PROGRAMS_FLAGS`: Megatron-LM's arguments; torchrun's and torchtitan's in the
//! torchtitan module's usage line). Literals are read whole: across lines, after escapes,
//! raw strings included; comments are skipped.

use std::path::Path;

/// Libraries whose sources must not spell a flag.
const LIBRARIES: [&str; 7] = [
    "spec",
    "cost",
    "schedule",
    "planner",
    "runtime",
    "partition",
    "place",
];

/// Where a library writes another program's command line, and the flags it may spell
/// there (an empty list: any): Megatron-LM's arguments, torchrun's and torchtitan's.
const OTHER_PROGRAMS_FLAGS: [(&str, &[&str]); 2] = [
    ("export/megatron", &[]),
    (
        "export/torchtitan_py.rs",
        &["--nproc_per_node", "--module", "--config", "--section.key"],
    ),
];

/// The `--flag` tokens of a literal.
fn flag_tokens(lit: &str) -> Vec<&str> {
    lit.match_indices("--")
        .filter(|(i, _)| lit[i + 2..].starts_with(|c: char| c.is_ascii_lowercase()))
        .map(|(i, _)| {
            let rest = &lit[i..];
            let end = rest[2..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || "_-.".contains(c)))
                .map_or(rest.len(), |e| e + 2);
            rest[..end].trim_end_matches('.')
        })
        .collect()
}

/// The string literals of `code` (comments skipped, escapes and raw strings followed, a
/// literal may span lines) with the line each starts on.
fn string_literals(code: &str) -> Vec<(usize, String)> {
    let chars: Vec<char> = code.chars().collect();
    let (mut out, mut line, mut i) = (Vec::new(), 1, 0);
    while i < chars.len() {
        match chars[i] {
            '\n' => line += 1,
            '/' if chars.get(i + 1) == Some(&'/') => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
                continue;
            }
            // A char literal `'"'` (or `'\''`) is no string.
            '\'' if chars.get(i + 2) == Some(&'\'') => i += 2,
            '\'' if chars.get(i + 1) == Some(&'\\') && chars.get(i + 3) == Some(&'\'') => i += 3,
            c @ ('"' | 'r') => {
                // `r#"…"#` (any number of #) or `"…"`.
                let hashes = if c == 'r' {
                    let n = chars[i + 1..].iter().take_while(|&&h| h == '#').count();
                    if chars.get(i + 1 + n) != Some(&'"')
                        || chars
                            .get(i.wrapping_sub(1))
                            .is_some_and(|p| p.is_alphanumeric() || *p == '_')
                    {
                        i += 1;
                        continue;
                    }
                    i += 1 + n;
                    Some(n)
                } else {
                    None
                };
                let start_line = line;
                let mut text = String::new();
                i += 1;
                while i < chars.len() {
                    let ch = chars[i];
                    if ch == '\n' {
                        line += 1;
                    }
                    if hashes.is_none() && ch == '\\' {
                        text.push(ch);
                        if let Some(&next) = chars.get(i + 1) {
                            text.push(next);
                            if next == '\n' {
                                line += 1;
                            }
                        }
                        i += 2;
                        continue;
                    }
                    if ch == '"' {
                        let n = hashes.unwrap_or(0);
                        if chars[i + 1..].iter().take(n).filter(|&&h| h == '#').count() == n {
                            i += 1 + n;
                            break;
                        }
                    }
                    text.push(ch);
                    i += 1;
                }
                out.push((start_line, text));
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

fn check_file(path: &Path, found: &mut Vec<String>) {
    let shown = path.to_string_lossy().replace('\\', "/");
    let allowed: Option<&[&str]> = OTHER_PROGRAMS_FLAGS
        .iter()
        .find(|(place, _)| shown.contains(place))
        .map(|(_, flags)| *flags);
    let text = std::fs::read_to_string(path).unwrap();
    // A module's own unit tests may drive it the way the CLI does.
    let code = text.split("#[cfg(test)]").next().unwrap_or("");
    for (line, lit) in string_literals(code) {
        let leaked: Vec<&str> = flag_tokens(&lit)
            .into_iter()
            .filter(|f| match allowed {
                Some([]) => false,
                Some(list) => !list.contains(f),
                None => true,
            })
            .collect();
        if !leaked.is_empty() {
            found.push(format!(
                "{}:{line}: {leaked:?} in \"{lit}\"",
                path.display()
            ));
        }
    }
}

fn walk(dir: &Path, found: &mut Vec<String>) -> usize {
    let mut files = 0;
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files += walk(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files += 1;
            check_file(&path, found);
        }
    }
    files
}

#[test]
fn the_check_finds_a_flag_in_a_string_and_not_in_a_comment() {
    let flags = |code: &str| -> Vec<(usize, String)> {
        string_literals(code)
            .into_iter()
            .filter(|(_, l)| !flag_tokens(l).is_empty())
            .collect()
    };
    assert_eq!(
        flags(r#"format!("vp = 1, or --schedule interleaved") // --tp"#),
        [(1, "vp = 1, or --schedule interleaved".to_string())]
    );
    assert!(flags(r#"err("schedule = interleaved", "a -- b", "--1")"#).is_empty());
    assert!(flags("// see \"--tp\"").is_empty());
    assert_eq!(
        flag_tokens("use --cp-comm a2a, or --section.key."),
        ["--cp-comm", "--section.key"]
    );
    // A literal continued over lines, after a char literal holding a quote.
    let code = "let q = '\"';\nlet s = \"a \\\n    --export x\";\nlet r = r#\"--raw\"#;";
    assert_eq!(
        flags(code),
        [
            (2, "a \\\n    --export x".to_string()),
            (4, "--raw".to_string())
        ]
    );
}

#[test]
fn libraries_name_fields_not_flags() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut found = Vec::new();
    let files: usize = LIBRARIES
        .iter()
        .map(|c| walk(&crates.join(c).join("src"), &mut found))
        .sum();
    assert!(files > 100, "read only {files} files");
    assert!(
        found.is_empty(),
        "flag names in libraries (name the field; the CLI names its flag):\n{}",
        found.join("\n")
    );
}
