//! Measures this machine for the planner: a worker (one CPU core running candle in f32) is
//! the "GPU". `plait profile` writes a calibration profile in the planning core's format
//! (`plait-profile/1`: GEMM times by shape, memory bandwidth, whole-block times) plus a
//! `cpu` section (cores, memory, the in-process communicator's latency and bandwidth);
//! [`CpuProfile::cluster`] turns it into the `ClusterSpec` that `--plan auto` plans for and
//! the CLI's `auto_plan::predict` simulates a run with.

use std::sync::Arc;
use std::time::{Duration, Instant};

use candle_core::{Device, Tensor, Var};
use plait_cost::profile::{GemmSample, LayerSample};
use plait_cost::{DeviceModel, Profile};
use plait_spec::{
    ClusterSpec, Dtype, Family, GpuSpec, HostCpu, LinkSpec, ModelSpec, ParallelConfig, Shard,
};
use serde::{Deserialize, Serialize};

use crate::comm::{Communicator, ReduceOp, World};
use crate::error::{DoesNotFit, RuntimeError};
use crate::memory::available_memory_bytes;
use crate::model::StageModel;
use crate::rng::SplitMix64;
use crate::tp::TpGroup;

type Result<T> = std::result::Result<T, RuntimeError>;

/// Each timing repeats its operation for at least this long and keeps the median (a
/// quarter of it with `quick`).
const MIN_TIMING: Duration = Duration::from_millis(40);
/// Bytes of the buffer copied to measure memory bandwidth: 64 MiB, well beyond the
/// last-level caches of current CPUs (≤ 32 MiB per socket on desktop parts).
const COPY_BYTES: usize = 64 << 20;
/// Fastest multiply rate a CPU core may show in a profile: 10 TFLOP/s, beyond any core's
/// matrix units (an AMX core peaks near 2 TFLOP/s in bf16).
pub const MAX_CORE_FLOPS_PER_S: f64 = 1e13;
/// Square GEMM sizes of the shape grid (every m, n, k combination).
const GRID: [u64; 3] = [64, 256, 1024];
/// Blocks stacked when timing one (see `time_block`).
const MAX_STACK: usize = 8;

/// The in-process communicator as a link: alpha–beta numbers of a 2-rank all-reduce.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CpuLink {
    /// Latency of one step (half the 2-rank all-reduce of one element).
    pub latency_s: f64,
    /// Bytes per second of a large 2-rank all-reduce (its bytes over its time, less latency).
    pub bandwidth_bytes_per_s: f64,
}

/// Machine facts recorded beside the calibration profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CpuInfo {
    /// Cores available to the process (workers beyond this share cores).
    pub cores: usize,
    /// Memory of the machine (MemTotal), bytes.
    pub memory_bytes: f64,
    pub link: CpuLink,
}

/// A calibration profile of this machine's CPU workers.
#[derive(Debug, Clone, PartialEq)]
pub struct CpuProfile {
    pub profile: Profile,
    pub cpu: CpuInfo,
}

/// What to measure besides the shape grid: whole blocks and GEMM shapes of these models.
#[derive(Debug, Clone)]
pub struct MeasureOptions {
    /// Models with the sequence length they will train with.
    pub models: Vec<(ModelSpec, usize)>,
    /// Micro-batch sizes to measure the models' blocks and GEMMs at (the planner picks
    /// among them; it scales the nearest for others).
    pub mbs: Vec<usize>,
    /// Skip the 1024³ grid shapes and time each operation for 10 ms instead of 40 ms.
    pub quick: bool,
}

impl CpuProfile {
    /// The profile JSON with the `cpu` section.
    pub fn to_json(&self) -> Result<String> {
        let mut v = serde_json::to_value(&self.profile).map_err(RuntimeError::Json)?;
        let cpu = serde_json::to_value(&self.cpu).map_err(RuntimeError::Json)?;
        if let Some(o) = v.as_object_mut() {
            o.insert("cpu".into(), cpu);
        }
        serde_json::to_string_pretty(&v).map_err(RuntimeError::Json)
    }

    /// Reads a profile written by [`CpuProfile::to_json`].
    pub fn parse(text: &str, source: &str) -> Result<CpuProfile> {
        let invalid = |field: Option<&str>, problem: String| RuntimeError::InvalidProfile {
            file: source.to_string(),
            field: field.map(str::to_string),
            problem,
        };
        let profile = Profile::parse(text, source).map_err(RuntimeError::Profile)?;
        let v: serde_json::Value =
            serde_json::from_str(text).map_err(|e| invalid(None, e.to_string()))?;
        let cpu = v.get("cpu").ok_or_else(|| {
            invalid(
                None,
                "no `cpu` section; CPU profiles are written by `plait profile`".into(),
            )
        })?;
        let cpu: CpuInfo =
            serde_json::from_value(cpu.clone()).map_err(|e| invalid(Some("cpu"), e.to_string()))?;
        let p = CpuProfile { profile, cpu };
        p.check(source)?;
        Ok(p)
    }

    /// The physical limits of a CPU profile: no core multiplies faster than
    /// [`MAX_CORE_FLOPS_PER_S`], core counts and memory are those of a machine, and the
    /// link's numbers are finite and positive (they size every estimate from this profile).
    fn check(&self, source: &str) -> Result<()> {
        let bad = |field: &str, problem: String| {
            Err(RuntimeError::InvalidProfile {
                file: source.to_string(),
                field: Some(field.to_string()),
                problem,
            })
        };
        let c = &self.cpu;
        if !(1..=1 << 20).contains(&c.cores) {
            return bad(
                "cpu.cores",
                format!("{} cores (allowed: 1 to 1048576)", c.cores),
            );
        }
        if !(c.memory_bytes.is_finite() && c.memory_bytes > 0.0 && c.memory_bytes <= 1e15) {
            return bad(
                "cpu.memory_bytes",
                format!("{:e} (allowed: 0 < bytes ≤ 1e15)", c.memory_bytes),
            );
        }
        let l = &c.link;
        if !(l.latency_s.is_finite() && l.latency_s > 0.0 && l.latency_s <= 1.0) {
            return bad(
                "cpu.link.latency_s",
                format!("{:e} (allowed: 0 < s ≤ 1)", l.latency_s),
            );
        }
        if !(l.bandwidth_bytes_per_s.is_finite()
            && l.bandwidth_bytes_per_s > 0.0
            && l.bandwidth_bytes_per_s <= 1e15)
        {
            return bad(
                "cpu.link.bandwidth_bytes_per_s",
                format!("{:e} (allowed: 0 < B/s ≤ 1e15)", l.bandwidth_bytes_per_s),
            );
        }
        let peak = MAX_CORE_FLOPS_PER_S * c.cores as f64;
        for (i, g) in self.profile.gemm.iter().enumerate() {
            let flops = 2.0 * g.m as f64 * g.n as f64 * g.k as f64;
            if g.time_s < flops / peak {
                return bad(
                    &format!("gemm[{i}].time_s"),
                    format!(
                        "{:e} s for {}×{}×{} beats {} cores at {:e} FLOP/s each (allowed: time_s ≥ {:e} s)",
                        g.time_s,
                        g.m,
                        g.n,
                        g.k,
                        c.cores,
                        MAX_CORE_FLOPS_PER_S,
                        flops / peak
                    ),
                );
            }
        }
        Ok(())
    }

    /// The profile as one of `workers` workers sees it: workers beyond the cores share
    /// them, so each one's times stretch by `workers / cores` (at least 1).
    pub fn shared_by(&self, workers: usize) -> CpuProfile {
        let f = (workers as f64 / self.cpu.cores.max(1) as f64).max(1.0);
        let mut p = self.clone();
        for g in &mut p.profile.gemm {
            g.time_s *= f;
        }
        for l in &mut p.profile.layers {
            l.forward_s *= f;
            l.backward_s *= f;
        }
        p.profile.memory_bandwidth_bytes_per_s /= f;
        p.cpu.link.latency_s *= f;
        p.cpu.link.bandwidth_bytes_per_s /= f;
        p
    }

    /// `workers` CPU workers on this machine as a cluster and its device model: one node,
    /// a "GPU" per worker with the measured GEMM rate and bandwidth (shared when workers
    /// outnumber cores), the in-process communicator as the link.
    pub fn cluster(&self, workers: usize) -> Result<(ClusterSpec, DeviceModel)> {
        let shared = self.shared_by(workers);
        let rate = shared.profile.max_gemm_flops_per_s();
        let link = LinkSpec {
            bandwidth_bytes_per_s: shared.cpu.link.bandwidth_bytes_per_s,
            latency_s: shared.cpu.link.latency_s,
            // Measured as achieved: nothing to discount.
            collective_efficiency: 1.0,
        };
        let cluster = ClusterSpec {
            name: format!("{workers} CPU workers on {} cores", self.cpu.cores),
            gpu: GpuSpec {
                name: shared.profile.gpu.clone(),
                peak_bf16_flops_per_s: rate,
                peak_fp16_flops_per_s: rate,
                peak_fp8_flops_per_s: None,
                peak_fp4_flops_per_s: None,
                // The peak is the measured best rate: efficiency and clock are in it.
                matmul_efficiency: 1.0,
                fp8_matmul_efficiency: None,
                sustained_clock_ratio: 1.0,
                memory_bytes: self.cpu.memory_bytes / workers.max(1) as f64,
                memory_bandwidth_bytes_per_s: shared.profile.memory_bandwidth_bytes_per_s,
                // One core: no wave quantisation over parallel units.
                sms: 1,
            },
            gpus_per_node: workers.max(1) as u64,
            intra_node: link,
            inter_node: link,
            nics_per_node: 0,
            memory_reserve_bytes: 0.0,
            host_link_bytes_per_s: None,
            host_memory: None,
            // The default issue cost per operation, as before host CPUs were told apart.
            host_cpu: HostCpu::default(),
        };
        let device = plait_cost::device_for(&cluster, Dtype::Bf16)
            .map_err(RuntimeError::Spec)?
            .with_profile(&shared.profile, Dtype::Bf16);
        Ok((cluster, device))
    }
}

/// Median of `f`'s run times, repeating for at least `min` (3 to 200 runs) after
/// one warm-up run.
fn time<F: FnMut() -> Result<()>>(min: Duration, mut f: F) -> Result<f64> {
    f()?;
    let mut times = Vec::new();
    let begin = Instant::now();
    while times.len() < 3 || (begin.elapsed() < min && times.len() < 200) {
        let t = Instant::now();
        f()?;
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// Median of exactly `runs` timed calls after one warm-up. Collectives need this: every
/// rank must make the same number of calls, which a wall-clock budget per rank does not
/// guarantee (the ranks then wait on each other until the communicator times out).
fn time_n<F: FnMut() -> Result<()>>(runs: usize, mut f: F) -> Result<f64> {
    f()?;
    let mut times = (0..runs.max(1))
        .map(|_| {
            let t = Instant::now();
            f()?;
            Ok(t.elapsed().as_secs_f64())
        })
        .collect::<Result<Vec<_>>>()?;
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

fn random(shape: &[usize], seed: u64) -> Result<Tensor> {
    let n: usize = shape.iter().product();
    let v = SplitMix64::new(seed).normals(n, 1.0);
    Ok(Tensor::from_vec(v, shape, &Device::Cpu)?)
}

/// Time of `[m×k]·[k×n]` as the runtime runs it (`x · Wᵀ`, W stored `[n, k]`).
fn time_gemm(min: Duration, m: u64, n: u64, k: u64) -> Result<f64> {
    let x = random(&[m as usize, k as usize], 1)?;
    let w = random(&[n as usize, k as usize], 2)?;
    let wt = w.t()?;
    time(min, || {
        x.matmul(&wt)?;
        Ok(())
    })
}

/// GEMM shapes a model's training runs per block and head on one worker of tp = `tp`, as
/// the cost model names them (forward, input gradient, weight gradient; attention scores).
fn model_shapes(m: &ModelSpec, seq: u64, mbs: u64, tp: u64) -> Vec<(u64, u64, u64)> {
    let tokens = seq * mbs;
    let mut out = Vec::new();
    let mut add = |mm: u64, n: u64, k: u64| {
        for s in [(mm, n, k), (mm, k, n), (k, n, mm)] {
            if !out.contains(&s) {
                out.push(s);
            }
        }
    };
    for g in m.block_gemms(tokens, Shard::new(tp, 1)).iter() {
        add(g.m, g.n, g.k);
    }
    add(tokens, m.vocab.div_ceil(tp), m.hidden);
    add(seq, seq, m.head_dim);
    add(seq, m.head_dim, seq);
    out
}

/// Forward and backward time of one block of `m` on one worker of tp = `tp`, measured as
/// in training: through a stack of the model's distinct blocks (at most [`MAX_STACK`]), so
/// the weights come from memory as they do in a step rather than from a warm cache.
fn time_block(
    min: Duration,
    m: &ModelSpec,
    seq: usize,
    mbs: usize,
    tp: usize,
) -> Result<LayerSample> {
    let group = TpGroup {
        comm: None,
        rank: 0,
        size: tp,
        sp: false,
    };
    let n = (m.layers as usize).clamp(1, MAX_STACK);
    // A middle stage: blocks only, no embedding or head.
    let model = StageModel::new(m, 1, 3, 0..n, group, seq, mbs, 0, &Device::Cpu)?;
    let h = m.hidden as usize;
    let x = Var::from_tensor(&(random(&[mbs, seq, h], 3)? * 0.1)?)?;
    let g = random(&[mbs, seq, h], 4)?;
    let forward = || -> Result<Tensor> {
        let mut y = x.as_tensor().clone();
        for b in 0..n {
            y = model.block(&y, b)?;
        }
        Ok(y)
    };
    let forward_s = time(min, || forward().map(|_| ()))? / n as f64;
    let total_s = time(min, || {
        forward()?.mul(&g)?.sum_all()?.backward()?;
        Ok(())
    })? / n as f64;
    Ok(LayerSample {
        family: match m.family {
            Family::Llama => "llama".into(),
            _ => "gpt".into(),
        },
        hidden: m.hidden,
        heads: m.heads,
        seq: seq as u64,
        mbs: mbs as u64,
        tp: tp as u64,
        forward_s,
        backward_s: (total_s - forward_s).max(f64::MIN_POSITIVE),
        activation_bytes: None,
    })
}

/// Read + write bandwidth of a large copy.
fn memory_bandwidth(min: Duration) -> Result<f64> {
    let t = Tensor::zeros(COPY_BYTES / 4, candle_core::DType::F32, &Device::Cpu)?;
    let s = time(min, || {
        t.copy()?;
        Ok(())
    })?;
    Ok(2.0 * COPY_BYTES as f64 / s)
}

/// Alpha–beta numbers of the in-process communicator: 2-rank all-reduces of 1 element and
/// of 1 Mi elements.
fn measure_link(min: Duration) -> Result<CpuLink> {
    // The same call count on both ranks: more for a longer measurement budget.
    let runs = (min.as_secs_f64() * 200.0).clamp(5.0, 200.0) as usize;
    let world = World::new(2, Duration::from_secs(60));
    const BIG: usize = 1 << 20;
    let times = std::thread::scope(|s| {
        let hs: Vec<_> = (0..2)
            .map(|r| {
                let world = world.clone();
                s.spawn(move || -> Result<(f64, f64)> {
                    let c: Arc<dyn Communicator> = Arc::new(world.group("link", &[0, 1], r)?);
                    let mut one = [1.0f32];
                    let small = time_n(runs, || Ok(c.all_reduce(&mut one, ReduceOp::Sum)?))?;
                    let mut big = vec![1.0f32; BIG];
                    let large = time_n(runs, || Ok(c.all_reduce(&mut big, ReduceOp::Sum)?))?;
                    Ok((small, large))
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap_or(Err(RuntimeError::MeasurementPanicked)))
            .collect::<Result<Vec<_>>>()
    })?;
    let (small, large) = times[0];
    let latency_s = small / 2.0;
    // Ring all-reduce over 2 ranks moves the buffer once: time = 2·latency + bytes / bw.
    let bytes = (BIG * 4) as f64;
    let bandwidth_bytes_per_s = bytes / (large - small).max(small);
    Ok(CpuLink {
        latency_s,
        bandwidth_bytes_per_s,
    })
}

/// Bytes the largest measurement needs at least: the stacked blocks' f32 weights and
/// gradients with their attention activations, or the largest GEMM's three operands.
fn measure_bytes(
    shapes: &[(u64, u64, u64)],
    blocks: &[(ModelSpec, usize, usize, usize)],
) -> (f64, String) {
    let mut worst = (0.0, String::new());
    for &(m, n, k) in shapes {
        let b = 4.0 * (m as f64 * k as f64 + k as f64 * n as f64 + m as f64 * n as f64);
        if b > worst.0 {
            worst = (b, format!("a {m}×{n}×{k} GEMM"));
        }
    }
    for (spec, seq, mbs, tp) in blocks {
        let n = (spec.layers as usize).clamp(1, MAX_STACK) as f64;
        let block = spec.blocks_params() as f64 / spec.layers.max(1) as f64 / *tp as f64;
        let attention =
            crate::memory::attention_bytes(spec, *seq, *mbs as u64, n as u64) / *tp as f64;
        let b = n * block * 8.0 + attention;
        if b > worst.0 {
            worst = (
                b,
                format!(
                    "{n} blocks of {} at seq {seq}, mbs {mbs}, tp {tp}",
                    spec.name
                ),
            );
        }
    }
    worst
}

/// Refuses to measure what would not fit in this machine's memory (the same share of
/// `MemAvailable` a run may plan on), before anything is allocated: llama3-405b's blocks
/// measured for 27 s, then aborted.
fn check_measure_memory(
    shapes: &[(u64, u64, u64)],
    blocks: &[(ModelSpec, usize, usize, usize)],
) -> Result<()> {
    let Some(avail) = available_memory_bytes() else {
        return Ok(());
    };
    let (need, what) = measure_bytes(shapes, blocks);
    let budget = crate::memory::MEMORY_HEADROOM * avail;
    if need > budget {
        return Err(RuntimeError::DoesNotFit(DoesNotFit::Measurement {
            what: what.to_string(),
            need_bytes: need,
            available_bytes: avail,
            headroom: crate::memory::MEMORY_HEADROOM,
        }));
    }
    Ok(())
}

/// Cores this process may run on.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn total_memory_bytes() -> f64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            let line = t.lines().find(|l| l.starts_with("MemTotal:"))?.to_string();
            line.split_whitespace().nth(1)?.parse::<f64>().ok()
        })
        .map(|kib| kib * 1024.0)
        .or_else(available_memory_bytes)
        .unwrap_or(8.0 * f64::from(1u32 << 30))
}

/// Measures this machine on one core (single-threaded candle, as one worker runs), calling
/// `progress(done, total)` as it goes. Everything runs in a one-thread rayon pool; for
/// candle to compute on that one thread as a worker does (its GEMM split and element-wise
/// pool follow the environment), the program calls
/// [`crate::engine::init_compute_threads`]`(1)` at its start: this function does not change
/// the environment.
pub fn measure(
    opts: &MeasureOptions,
    progress: &mut (dyn FnMut(usize, usize) + Send),
) -> Result<CpuProfile> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .stack_size(crate::engine::RANK_STACK_BYTES)
        .build()
        .map_err(|error| RuntimeError::PoolStart {
            what: "a measuring thread",
            error,
        })?;
    let mut shapes: Vec<(u64, u64, u64)> = Vec::new();
    for &m in &GRID {
        for &n in &GRID {
            for &k in &GRID {
                if !(opts.quick && m.max(n).max(k) > 256) {
                    shapes.push((m, n, k));
                }
            }
        }
    }
    let mut blocks = Vec::new();
    for (spec, seq) in &opts.models {
        for tp in [1u64, 2, 4, 8] {
            if spec.heads % tp != 0 || spec.kv_heads % tp != 0 || spec.ffn_hidden % tp != 0 {
                continue;
            }
            for &mbs in &opts.mbs {
                for s in model_shapes(spec, *seq as u64, mbs as u64, tp) {
                    if !shapes.contains(&s) {
                        shapes.push(s);
                    }
                }
                blocks.push((spec.clone(), *seq, mbs, tp as usize));
            }
        }
    }
    check_measure_memory(&shapes, &blocks)?;
    let min = if opts.quick {
        MIN_TIMING / 4
    } else {
        MIN_TIMING
    };
    let total = shapes.len() + blocks.len() + 2;
    let mut done = 0;
    pool.install(|| -> Result<CpuProfile> {
        let mut gemm = Vec::new();
        for &(m, n, k) in &shapes {
            gemm.push(GemmSample {
                m,
                n,
                k,
                time_s: time_gemm(min, m, n, k)?,
            });
            done += 1;
            progress(done, total);
        }
        let mut layers = Vec::new();
        for (spec, seq, mbs, tp) in &blocks {
            layers.push(time_block(min, spec, *seq, *mbs, *tp)?);
            done += 1;
            progress(done, total);
        }
        let bandwidth = memory_bandwidth(min)?;
        done += 1;
        progress(done, total);
        let link = measure_link(min)?;
        progress(total, total);
        Ok(CpuProfile {
            profile: Profile {
                format: "plait-profile/1".into(),
                gpu: "CPU core (candle f32, 1 thread)".into(),
                // The planner's dtype names 16-bit formats only; leaving it unset applies the
                // measurements to whatever dtype it plans with.
                dtype: None,
                source: Some(format!(
                    "plait profile: candle {} f32 on one core, median of repeated runs",
                    "0.11"
                )),
                memory_bandwidth_bytes_per_s: bandwidth,
                gemm,
                layers,
            },
            cpu: CpuInfo {
                cores: cores(),
                memory_bytes: total_memory_bytes(),
                link,
            },
        })
    })
}

/// Whether the runtime can execute a configuration the planner proposes.
pub fn runtime_supports(model: &ModelSpec, c: &ParallelConfig, seq: u64) -> bool {
    crate::config::unsupported_knob(c).is_none()
        && model.heads.is_multiple_of(c.tp)
        && model.kv_heads.is_multiple_of(c.tp)
        && model.ffn_hidden.is_multiple_of(c.tp)
        && (!c.sp || seq.is_multiple_of(c.tp))
}
