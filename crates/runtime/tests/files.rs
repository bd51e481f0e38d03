//! The capped reader behind every input file: whole files under the limit, the size and the
//! limit named over it (before reading a regular file), devices cut off after the limit.

use std::path::Path;

use plait_runtime::files::{read_capped, read_text_capped};

#[test]
fn files_are_read_whole_up_to_the_limit_and_refused_over_it() {
    let dir = std::env::temp_dir().join(format!("plait-files-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let small = dir.join("small.txt");
    std::fs::write(&small, "hello").unwrap();
    assert_eq!(read_capped(&small, 5).unwrap(), b"hello");
    assert_eq!(read_text_capped(&small, 1 << 20).unwrap(), "hello");
    let e = read_capped(&small, 4).unwrap_err().to_string();
    assert!(e.contains("5 bytes") && e.contains("(4 bytes)"), "{e}");

    // A sparse terabyte: refused by its size, nothing read.
    let huge = dir.join("huge.bin");
    std::fs::File::create(&huge)
        .unwrap()
        .set_len(1 << 40)
        .unwrap();
    let e = read_capped(&huge, 1 << 20).unwrap_err().to_string();
    assert!(
        e.contains("1099511627776 bytes") && e.contains("1 MiB"),
        "{e}"
    );

    let binary = dir.join("binary");
    std::fs::write(&binary, [0xff, 0xfe]).unwrap();
    assert!(read_text_capped(&binary, 10)
        .unwrap_err()
        .to_string()
        .contains("UTF-8"));
    assert!(read_capped(&dir, 10).is_err());
    std::fs::remove_dir_all(&dir).unwrap();

    // A device that never ends: at most limit + 1 bytes are read.
    let e = read_capped(Path::new("/dev/zero"), 1 << 20)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("1048576 bytes") && e.contains("not at its end"),
        "{e}"
    );
}
