//! The one way plait reads an input file: whole, but never more than a limit per kind of
//! file, so that a wrong path (`/dev/zero`, a named pipe, a multi-gigabyte file given as a
//! config) is refused at once with its size and the limit, instead of reading until the
//! kernel stops the process. The CLI reads every input through [`read_capped`]; the data
//! loader here does too.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

/// A model `config.json`, cluster / device-set / mixed-cluster TOML, calibration profile, CPU
/// profile: hand-written or generated text of kilobytes (a measured GEMM profile of every
/// shape plait knows is under 1 MB).
pub const MAX_CONFIG_BYTES: u64 = 64 << 20;
/// A placement-graph or chain JSON (the largest graph of Tarnawski et al.'s artifact is
/// 2 MB; a 10⁶-node graph is about 300 MB).
pub const MAX_GRAPH_BYTES: u64 = 512 << 20;
/// An ONNX model: protobuf's own limit on one message.
pub const MAX_ONNX_BYTES: u64 = 2 << 30;
/// Training data for `plait train` (byte-level tokens, 4 bytes each once read: 1 GiB).
pub const MAX_DATA_BYTES: u64 = 256 << 20;

fn mib(bytes: u64) -> String {
    format!("{} MiB", bytes >> 20)
}

/// The bytes of `path`, or an error saying how large it is (or that it does not end) and the
/// limit, when it holds more than `limit` bytes. Regular files are judged by their size
/// before any byte is read; devices and pipes by reading at most `limit + 1` bytes.
pub fn read_capped(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    let file = File::open(path)?;
    let meta = file.metadata()?;
    if meta.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::IsADirectory,
            "is a directory, not a file",
        ));
    }
    if meta.is_file() && meta.len() > limit {
        return Err(io::Error::new(
            io::ErrorKind::FileTooLarge,
            format!(
                "the file is {} bytes, more than the {} ({limit} bytes) such an input may have",
                meta.len(),
                mib(limit)
            ),
        ));
    }
    let mut bytes = Vec::with_capacity(if meta.is_file() {
        meta.len() as usize
    } else {
        0
    });
    file.take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(io::Error::new(
            io::ErrorKind::FileTooLarge,
            format!(
                "more than {limit} bytes ({}, the limit for such an input) and still not at its end (a device or a pipe?)",
                mib(limit)
            ),
        ));
    }
    Ok(bytes)
}

/// [`read_capped`] as UTF-8 text.
pub fn read_text_capped(path: &Path, limit: u64) -> io::Result<String> {
    String::from_utf8(read_capped(path, limit)?).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("not UTF-8 text (byte {})", e.utf8_error().valid_up_to()),
        )
    })
}
