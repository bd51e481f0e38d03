//! Architecture invariant: only the CLI knows its flag names. The libraries name the
//! request's fields (`tp`, `cp_comm`, `gen_len`) and leave the source of an error in one to
//! the caller (`SpecError::for_field`); the CLI spells the flag (`flag_for`), the Python
//! bindings get it through the CLI. A `"--flag"` in a library's string is a CLI name leaking
//! into a library, except in the Megatron export, whose output is Megatron-LM's own command
//! line.

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

/// Where a library writes another program's flags.
const OTHER_PROGRAMS_FLAGS: &str = "export/megatron";

/// The string literals of one line of code (comments dropped) that hold `--` and a letter.
fn flags_in_line(line: &str) -> Vec<String> {
    let code = line.split("//").next().unwrap_or("");
    code.split('"')
        .skip(1)
        .step_by(2)
        .filter(|lit| {
            lit.match_indices("--")
                .any(|(i, _)| lit[i + 2..].starts_with(|c: char| c.is_ascii_lowercase()))
        })
        .map(String::from)
        .collect()
}

fn check_file(path: &Path, found: &mut Vec<String>) {
    let text = std::fs::read_to_string(path).unwrap();
    // A module's own unit tests may drive it the way the CLI does.
    let code = text.split("#[cfg(test)]").next().unwrap_or("");
    for (i, line) in code.lines().enumerate() {
        for lit in flags_in_line(line) {
            found.push(format!("{}:{}: \"{lit}\"", path.display(), i + 1));
        }
    }
}

fn walk(dir: &Path, found: &mut Vec<String>) -> usize {
    let mut files = 0;
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files += walk(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs")
            && !path.to_string_lossy().contains(OTHER_PROGRAMS_FLAGS)
        {
            files += 1;
            check_file(&path, found);
        }
    }
    files
}

#[test]
fn the_check_finds_a_flag_in_a_string_and_not_in_a_comment() {
    assert_eq!(
        flags_in_line(r#"format!("vp = 1, or --schedule interleaved") // --tp"#),
        ["vp = 1, or --schedule interleaved"]
    );
    assert!(flags_in_line(r#"err("schedule = interleaved", "a -- b", "--1")"#).is_empty());
    assert!(flags_in_line("// see --tp").is_empty());
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
