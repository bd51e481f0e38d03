//! Checkpoints: one safetensors file per rank (its parameter shards and its part of Adam's
//! moments) plus a JSON manifest (step, model, plan, data position, seed, files with sizes
//! and checksums), in a directory per step:
//!
//! ```text
//! DIR/step-00000010/manifest.json
//! DIR/step-00000010/rank-00000.safetensors …
//! DIR/latest                      ← "step-00000010"
//! ```
//!
//! Written atomically: every rank writes into `DIR/.tmp-step-…` and syncs its file; rank 0
//! then writes the manifest, syncs, renames the directory to a name no other directory has
//! (`step-00000010`, or `step-00000010.1`, `.2`, … when a directory of that step is
//! already there: a run resumed from an earlier step writes it again), syncs `DIR`, and
//! finally replaces `latest` by a synced temporary file renamed over it (and syncs `DIR`
//! again). Nothing
//! that `latest` names is moved or deleted before `latest` names something else, so a
//! crash at any point leaves `latest` naming a complete checkpoint. Should `latest` still
//! name a missing directory (deleted by hand), [`latest`] falls back to the newest
//! complete `step-*` directory.
//!
//! One directory holds one run: a fresh run refuses a directory that already holds
//! checkpoints ([`refuse_existing`]) rather than mixing its steps with an earlier run's
//! ([`resume_point`] decides where a run starts),
//! and after each commit only this run's older steps beyond [`CheckpointConfig::keep`] are
//! deleted, never the step just written.
//!
//! All randomness is counter-based (the seed and names, see `rng`), so the seed, the step
//! and the data position are the whole random state: a resumed run repeats the
//! uninterrupted run exactly.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use candle_core::Tensor;
use plait_spec::{ModelSpec, ParallelConfig, StageMap};
use safetensors::tensor::{Dtype, SafeTensors, View};
use serde::{Deserialize, Serialize};

pub use crate::config::CheckpointConfig;
use crate::config::TrainConfig;
use crate::error::{CheckpointError, ResumeError, RuntimeError};
use crate::groups::Groups;
use crate::model::{ParamDef, StageModel};
use crate::optim::{OptimConfig, Optimizer};
use crate::rng::fnv1a;

type Result<T> = std::result::Result<T, RuntimeError>;

pub const FORMAT: &str = "plait-checkpoint/1";

/// One rank's file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    pub name: String,
    pub bytes: u64,
    /// FNV-1a 64 of the file's bytes, hexadecimal.
    pub fnv1a: String,
}

/// The random state: everything random is a function of these.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RngState {
    pub seed: u64,
    pub scheme: String,
}

/// What a checkpoint holds, besides the tensors.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: String,
    /// Steps completed.
    pub step: u64,
    /// Steps of the whole run (the learning-rate schedule's length).
    pub steps: u64,
    pub model: ModelSpec,
    pub parallel: ParallelConfig,
    pub stage_map: StageMap,
    pub seq: usize,
    pub gbs: usize,
    pub optim: OptimConfig,
    /// Training sequences consumed (the next step starts at this index of the data order).
    pub data_position: u64,
    pub rng: RngState,
    pub world: usize,
    pub files: Vec<FileEntry>,
    /// FNV-1a 64 of this manifest as written without this field (pretty JSON), so that a
    /// changed `step` or data position is caught like a changed shard.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest_fnv1a: Option<String>,
}

impl Manifest {
    /// The checksum of the manifest's own fields (everything but `manifest_fnv1a`).
    fn own_checksum(&self) -> Result<String> {
        let bare = Manifest {
            manifest_fnv1a: None,
            ..self.clone()
        };
        let text =
            serde_json::to_string_pretty(&bare).map_err(CheckpointError::SerializeManifest)?;
        Ok(format!("{:016x}", fnv1a(text.as_bytes())))
    }
}

impl Manifest {
    /// Refuses to resume `cfg` from this checkpoint when anything that shapes the tensors
    /// or the sequence of updates differs.
    pub fn check_compatible(&self, cfg: &TrainConfig) -> Result<()> {
        let mut diffs = Vec::new();
        if self.model != cfg.model {
            diffs.push(format!("model {} vs {}", self.model.name, cfg.model.name));
        }
        if self.parallel != cfg.parallel {
            diffs.push(format!("plan {:?} vs {:?}", self.parallel, cfg.parallel));
        }
        if self.stage_map != cfg.stage_map() {
            diffs.push("stage map".into());
        }
        if self.seq != cfg.seq || self.gbs != cfg.gbs {
            diffs.push(format!(
                "batch {}×{} vs {}×{}",
                self.gbs, self.seq, cfg.gbs, cfg.seq
            ));
        }
        if self.rng.seed != cfg.seed {
            diffs.push(format!("seed {} vs {}", self.rng.seed, cfg.seed));
        }
        if self.optim != cfg.optim || self.steps != cfg.steps {
            diffs.push(format!(
                "optimizer or run length ({} vs {} steps)",
                self.steps, cfg.steps
            ));
        }
        if diffs.is_empty() {
            Ok(())
        } else {
            Err(RuntimeError::Resume(ResumeError::DifferentRun {
                step: self.step,
                differences: diffs,
            }))
        }
    }
}

/// An f32 tensor to serialize.
struct F32View<'a> {
    shape: Vec<usize>,
    data: &'a [f32],
}

impl View for F32View<'_> {
    fn dtype(&self) -> Dtype {
        Dtype::F32
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Owned(self.data.iter().flat_map(|x| x.to_le_bytes()).collect())
    }
    fn data_len(&self) -> usize {
        self.data.len() * 4
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RuntimeError + '_ {
    move |e| RuntimeError::io(path, e)
}

fn rank_file(rank: usize) -> String {
    format!("rank-{rank:05}.safetensors")
}

fn step_name(step: u64) -> String {
    format!("step-{step:08}")
}

/// A checkpoint directory's step and copy number: `step-00000010` → (10, 0),
/// `step-00000010.2` → (10, 2); `None` for any other name.
fn parse_step_dir(name: &str) -> Option<(u64, u32)> {
    let rest = name.strip_prefix("step-")?;
    let (step, copy) = match rest.split_once('.') {
        Some((s, c)) => (s, c.parse().ok()?),
        None => (rest, 0),
    };
    if step.is_empty() || !step.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((step.parse().ok()?, copy))
}

/// The checkpoint directories in `dir` as (step, copy, name), oldest first; none when
/// `dir` does not exist.
fn step_dirs(dir: &Path) -> Result<Vec<(u64, u32, String)>> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(RuntimeError::io(dir, e)),
    };
    let mut out: Vec<(u64, u32, String)> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().into_string().ok())
        .filter_map(|n| parse_step_dir(&n).map(|(s, c)| (s, c, n)))
        .collect();
    out.sort();
    Ok(out)
}

/// A name for a new checkpoint of `step` that no directory in `dir` has.
fn free_name(dir: &Path, step: u64) -> String {
    let base = step_name(step);
    if !dir.join(&base).exists() {
        return base;
    }
    (1u32..)
        .map(|k| format!("{base}.{k}"))
        .find(|n| !dir.join(n).exists())
        .unwrap_or(base)
}

/// Refuses to start a fresh run in `dir` when it already holds checkpoints (or a
/// `latest`): their steps would mix with the new run's, and `latest` could end up naming
/// the other run's. A run continues with `resume`; a new one needs another directory.
pub fn refuse_existing(dir: &Path) -> Result<()> {
    let steps = step_dirs(dir)?;
    if steps.is_empty() && !dir.join("latest").exists() {
        return Ok(());
    }
    Err(RuntimeError::Resume(ResumeError::DirectoryInUse {
        dir: dir.to_path_buf(),
        found: steps.into_iter().map(|(_, _, n)| n).collect(),
    }))
}

/// The checkpoint a run continues.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ResumePoint {
    /// Its directory (`DIR/step-00000010`).
    pub path: PathBuf,
    pub manifest: Manifest,
    /// Steps it completed: the run continues with the next.
    pub step: u64,
}

/// Where a run writing its checkpoints to `dir` starts. A fresh run (`resume` false)
/// starts at step 0 in a directory without checkpoints ([`refuse_existing`]); a resumed
/// one continues the newest complete checkpoint ([`latest`]), or starts at step 0 when
/// there is none (`None` in both cases).
///
/// `workers`: `Some(n)` when the run keeps the checkpoint's plan instead of bringing its
/// own, so its `n` workers must be the checkpoint's ([`ResumeError::Workers`]); with
/// `None`, [`Manifest::check_compatible`] compares the run's plan when it starts.
pub fn resume_point(
    dir: &Path,
    resume: bool,
    workers: Option<usize>,
) -> Result<Option<ResumePoint>> {
    if !resume {
        refuse_existing(dir)?;
        return Ok(None);
    }
    let Some((path, manifest)) = latest(dir)? else {
        return Ok(None);
    };
    if let Some(workers) = workers.filter(|&w| w != manifest.world) {
        return Err(RuntimeError::Resume(ResumeError::Workers {
            checkpoint: path,
            written: manifest.world,
            workers,
        }));
    }
    Ok(Some(ResumePoint {
        step: manifest.step,
        path,
        manifest,
    }))
}

/// Writes `bytes` to `path` and syncs it to disk.
fn write_synced(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut f = File::create(path).map_err(io(path))?;
    f.write_all(bytes).map_err(io(path))?;
    f.sync_all().map_err(io(path))
}

/// Syncs a directory's entries (renames, new files) to disk.
fn sync_dir(path: &Path) -> Result<()> {
    File::open(path)
        .and_then(|d| d.sync_all())
        .map_err(io(path))
}

/// Every rank calls this at the end of `step`: writes its shard, and rank 0 commits.
/// Returns the checkpoint's directory on rank 0 (`None` on the others).
pub fn save(
    ck: &CheckpointConfig,
    cfg: &TrainConfig,
    step: u64,
    g: &Groups,
    params: &[(ParamDef, Vec<f32>)],
    optimizer: &Optimizer,
) -> Result<Option<PathBuf>> {
    let name = step_name(step);
    let dir = &ck.dir;
    let tmp = dir.join(format!(".tmp-{name}"));
    let mut committed = None;
    g.world.barrier()?;
    if g.rank == 0 {
        fs::create_dir_all(dir).map_err(io(dir))?;
        if tmp.exists() {
            fs::remove_dir_all(&tmp).map_err(io(&tmp))?;
        }
        fs::create_dir(&tmp).map_err(io(&tmp))?;
    }
    g.world.barrier()?;

    let mut tensors: Vec<(String, F32View)> = Vec::new();
    let mut saved = std::collections::HashSet::new();
    for (def, values) in params {
        // A V holds both copies of a tied embedding on rank 0, equal by construction (one
        // initialisation, summed gradients): one is written, and loading sets both.
        if !saved.insert(def.name.as_str()) {
            continue;
        }
        tensors.push((
            format!("param/{}", def.name),
            F32View {
                shape: def.local_shape(g.topology.tp),
                data: values,
            },
        ));
    }
    for (i, (m, v)) in optimizer.moments().into_iter().enumerate() {
        tensors.push((
            format!("adam_m/{i:05}"),
            F32View {
                shape: vec![m.len()],
                data: m,
            },
        ));
        tensors.push((
            format!("adam_v/{i:05}"),
            F32View {
                shape: vec![v.len()],
                data: v,
            },
        ));
    }
    let mut info = HashMap::new();
    info.insert("format".to_string(), FORMAT.to_string());
    info.insert("step".to_string(), step.to_string());
    info.insert("rank".to_string(), g.rank.to_string());
    info.insert("adam_steps".to_string(), optimizer.steps.to_string());
    let bytes = safetensors::serialize(tensors, Some(info)).map_err(|error| {
        CheckpointError::SerializeShard {
            rank: g.rank,
            error,
        }
    })?;
    write_synced(&tmp.join(rank_file(g.rank)), &bytes)?;
    g.world.barrier()?;

    if g.rank == 0 {
        let mut files = Vec::new();
        for r in 0..g.topology.world() {
            let path = tmp.join(rank_file(r));
            let data = fs::read(&path).map_err(io(&path))?;
            files.push(FileEntry {
                name: rank_file(r),
                bytes: data.len() as u64,
                fnv1a: format!("{:016x}", fnv1a(&data)),
            });
        }
        let manifest = Manifest {
            format: FORMAT.into(),
            step,
            steps: cfg.steps,
            model: cfg.model.clone(),
            parallel: cfg.parallel,
            stage_map: cfg.stage_map(),
            seq: cfg.seq,
            gbs: cfg.gbs,
            optim: cfg.optim,
            data_position: step * cfg.gbs as u64,
            rng: RngState {
                seed: cfg.seed,
                scheme: "counter-based: SplitMix64 seeded by FNV-1a(seed, stream name)".into(),
            },
            world: g.topology.world(),
            files,
            manifest_fnv1a: None,
        };
        let manifest = Manifest {
            manifest_fnv1a: Some(manifest.own_checksum()?),
            ..manifest
        };
        let text =
            serde_json::to_string_pretty(&manifest).map_err(CheckpointError::SerializeManifest)?;
        write_synced(&tmp.join("manifest.json"), text.as_bytes())?;
        sync_dir(&tmp)?;
        // Committed under a name no directory has: whatever `latest` names stays in place
        // until `latest` names the new checkpoint.
        let final_name = free_name(dir, step);
        let target = dir.join(&final_name);
        fs::rename(&tmp, &target).map_err(io(&tmp))?;
        sync_dir(dir)?;
        set_latest(dir, &final_name)?;
        prune(dir, ck.keep.max(1), step, &final_name)?;
        committed = Some(target);
    }
    g.world.barrier()?;
    Ok(committed)
}

/// Points `latest` at `name` atomically: a synced temporary file renamed over it, then the
/// directory synced so that the rename is durable.
fn set_latest(dir: &Path, name: &str) -> Result<()> {
    let latest_tmp = dir.join(".latest.tmp");
    write_synced(&latest_tmp, name.as_bytes())?;
    let latest = dir.join("latest");
    fs::rename(&latest_tmp, &latest).map_err(io(&latest))?;
    sync_dir(dir)
}

/// After committing `current` (a checkpoint of `step`): deletes other copies of `step`
/// (superseded by `current`) and the steps older than `step` beyond the newest `keep − 1`.
/// Never deletes `current`, nor steps newer than `step` (a fresh run never meets them:
/// [`refuse_existing`]).
fn prune(dir: &Path, keep: usize, step: u64, current: &str) -> Result<()> {
    let mut older = Vec::new();
    for (s, _, name) in step_dirs(dir)? {
        if name == current || s > step {
            continue;
        }
        if s == step {
            let p = dir.join(&name);
            fs::remove_dir_all(&p).map_err(io(&p))?;
        } else {
            older.push(name);
        }
    }
    // `older` is oldest first.
    let drop = older.len().saturating_sub(keep.saturating_sub(1));
    for name in &older[..drop] {
        let p = dir.join(name);
        fs::remove_dir_all(&p).map_err(io(&p))?;
    }
    Ok(())
}

/// The newest complete checkpoint in `dir`, verified: the one `latest` names or, when
/// `latest` is missing or names a directory that is gone, the newest `step-*` directory
/// that verifies. `None` when the directory holds none. A checkpoint that `latest` names
/// but that fails verification is an error, not skipped.
pub fn latest(dir: &Path) -> Result<Option<(PathBuf, Manifest)>> {
    let pointer = dir.join("latest");
    let named = if pointer.exists() {
        let text = fs::read_to_string(&pointer).map_err(io(&pointer))?;
        let name = text.trim().to_string();
        let path = dir.join(&name);
        if parse_step_dir(&name).is_some() && path.is_dir() {
            return match verify(&path) {
                Ok(manifest) => Ok(Some((path, manifest))),
                Err(e) => Err(with_fallback(dir, &name, e)?),
            };
        }
        Some(name)
    } else {
        None
    };
    for (_, _, name) in step_dirs(dir)?.into_iter().rev() {
        let path = dir.join(&name);
        if let Ok(manifest) = verify(&path) {
            return Ok(Some((path, manifest)));
        }
    }
    match named {
        Some(name) => Err(CheckpointError::MissingLatest {
            pointer,
            name,
            dir: dir.to_path_buf(),
        }
        .into()),
        None => Ok(None),
    }
}

/// `e`, the failure of the checkpoint `name` that `latest` names, with the newest older
/// checkpoint that verifies and how to resume from it (or that none is intact).
fn with_fallback(dir: &Path, name: &str, e: RuntimeError) -> Result<RuntimeError> {
    let newer_than = parse_step_dir(name);
    let intact = step_dirs(dir)?
        .into_iter()
        .rev()
        .filter(|(s, c, n)| n != name && newer_than.is_none_or(|at| (*s, *c) < at))
        .find_map(|(_, _, n)| verify(&dir.join(&n)).ok().map(|m| (n, m)));
    Ok(CheckpointError::Broken {
        dir: dir.to_path_buf(),
        name: name.to_string(),
        error: Box::new(e),
        intact: intact.map(|(n, m)| (n, m.step)),
    }
    .into())
}

/// Reads a checkpoint's manifest and checks it: its own checksum, its step against the
/// directory's name and every shard's metadata, and every file's size and checksum.
pub fn verify(path: &Path) -> Result<Manifest> {
    let mpath = path.join("manifest.json");
    let text = fs::read_to_string(&mpath).map_err(io(&mpath))?;
    let invalid = |path: &Path, problem: String| -> RuntimeError {
        CheckpointError::Invalid {
            path: path.to_path_buf(),
            problem,
        }
        .into()
    };
    let bad = |problem: String| invalid(&mpath, problem);
    let manifest: Manifest = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    if manifest.format != FORMAT {
        return Err(bad(format!(
            "format `{}` (expected {FORMAT})",
            manifest.format
        )));
    }
    match &manifest.manifest_fnv1a {
        None => {
            return Err(bad(
                "no `manifest_fnv1a` (the manifest's own checksum)".into()
            ))
        }
        Some(sum) => {
            let own = manifest.own_checksum()?;
            if *sum != own {
                return Err(bad(format!(
                    "the manifest's fields have checksum {own}, it says {sum}: the manifest \
                     was changed after it was written"
                )));
            }
        }
    }
    let dir_step = path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(parse_step_dir)
        .map(|(s, _)| s);
    if dir_step.is_some_and(|s| s != manifest.step) {
        return Err(bad(format!(
            "step {} but the directory is `{}`",
            manifest.step,
            path.file_name().unwrap_or_default().to_string_lossy()
        )));
    }
    if manifest.data_position != manifest.step.saturating_mul(manifest.gbs as u64)
        || manifest.step > manifest.steps
    {
        return Err(bad(format!(
            "step {} of {} with data position {} does not match a batch of {}",
            manifest.step, manifest.steps, manifest.data_position, manifest.gbs
        )));
    }
    if manifest.files.len() != manifest.world {
        return Err(bad(format!(
            "{} files for {} ranks",
            manifest.files.len(),
            manifest.world
        )));
    }
    for f in &manifest.files {
        let p = path.join(&f.name);
        let data = fs::read(&p).map_err(io(&p))?;
        let sum = format!("{:016x}", fnv1a(&data));
        if data.len() as u64 != f.bytes || sum != f.fnv1a {
            return Err(invalid(
                &p,
                format!(
                    "{} bytes with checksum {sum}, the manifest says {} bytes, {}",
                    data.len(),
                    f.bytes,
                    f.fnv1a
                ),
            ));
        }
        // Each shard records its step and rank: they must be the manifest's.
        let (_, meta) =
            SafeTensors::read_metadata(&data).map_err(|e| invalid(&p, e.to_string()))?;
        let info = meta.metadata().clone().unwrap_or_default();
        let shard_step = info.get("step").and_then(|v| v.parse::<u64>().ok());
        if shard_step != Some(manifest.step) {
            return Err(invalid(
                &p,
                format!(
                    "the shard records step {}, the manifest step {}",
                    info.get("step").map_or("none", String::as_str),
                    manifest.step
                ),
            ));
        }
    }
    Ok(manifest)
}

/// Loads `rank`'s shard from the checkpoint at `path` into `models` and `optimizer`.
pub fn load_rank(
    path: &Path,
    rank: usize,
    models: &[StageModel],
    optimizer: &mut Optimizer,
    step: u64,
) -> Result<()> {
    let file = path.join(rank_file(rank));
    let bytes = fs::read(&file).map_err(io(&file))?;
    let invalid = |problem: String| -> RuntimeError {
        CheckpointError::Invalid {
            path: file.clone(),
            problem,
        }
        .into()
    };
    let st = SafeTensors::deserialize(&bytes).map_err(|e| invalid(e.to_string()))?;
    let read = |name: &str| -> Result<(Vec<usize>, Vec<f32>)> {
        let t = st
            .tensor(name)
            .map_err(|e| invalid(format!("`{name}`: {e}")))?;
        if t.dtype() != Dtype::F32 {
            return Err(invalid(format!(
                "`{name}` is {:?}, expected F32",
                t.dtype()
            )));
        }
        let values = t
            .data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        Ok((t.shape().to_vec(), values))
    };
    for m in models {
        for p in &m.params {
            let (shape, values) = read(&format!("param/{}", p.def.name))?;
            if shape != p.var.dims() {
                return Err(invalid(format!(
                    "`{}` has shape {shape:?}, this run needs {:?}",
                    p.def.name,
                    p.var.dims()
                )));
            }
            p.var
                .set(&Tensor::from_vec(values, shape, p.var.device())?)?;
        }
    }
    let mut moments = Vec::new();
    for i in 0..optimizer.buckets.len() {
        let (_, m) = read(&format!("adam_m/{i:05}"))?;
        let (_, v) = read(&format!("adam_v/{i:05}"))?;
        moments.push((m, v));
    }
    optimizer.restore(moments, step)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{parse_plan, train, Dataset};

    #[test]
    fn resume_point_of_a_fresh_and_a_used_directory() {
        let dir = std::env::temp_dir().join(format!("plait-resume-point-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        // No directory yet: a fresh run and a resumed one both start at step 0.
        assert_eq!(resume_point(&dir, false, None).unwrap(), None);
        assert_eq!(resume_point(&dir, true, Some(1)).unwrap(), None);

        let mut cfg = TrainConfig::new(
            plait_spec::model_preset("tiny-gpt").unwrap(),
            parse_plan("dp1", 1).unwrap(),
            16,
            2,
            3,
        );
        cfg.checkpoint = Some(CheckpointConfig {
            dir: dir.clone(),
            every: 2,
            keep: 2,
        });
        train(&cfg, &Dataset::builtin(), |_| {}).unwrap();

        // A resumed run continues the newest checkpoint, with its plan (as many workers)
        // or its own.
        let p = resume_point(&dir, true, Some(1)).unwrap().unwrap();
        assert_eq!((p.step, p.manifest.step), (3, 3));
        assert_eq!(p.path, dir.join("step-00000003"));
        assert_eq!(resume_point(&dir, true, None).unwrap(), Some(p.clone()));

        // A fresh run refuses the used directory.
        match resume_point(&dir, false, None).unwrap_err() {
            RuntimeError::Resume(ResumeError::DirectoryInUse { dir: d, found }) => {
                assert_eq!(d, dir);
                assert_eq!(found, ["step-00000002", "step-00000003"]);
            }
            other => panic!("unexpected error {other}"),
        }

        // Keeping the checkpoint's plan needs its worker count.
        let e = resume_point(&dir, true, Some(2)).unwrap_err();
        match &e {
            RuntimeError::Resume(ResumeError::Workers {
                checkpoint,
                written: 1,
                workers: 2,
            }) => assert_eq!(checkpoint, &p.path),
            other => panic!("unexpected error {other}"),
        }
        assert_eq!(
            e.to_string(),
            format!(
                "`resume`: {} was written by 1 workers, this run has `workers` 2",
                p.path.display()
            )
        );
        let _ = fs::remove_dir_all(&dir);
    }
}
