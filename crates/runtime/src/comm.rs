//! Communication between workers: the [`Communicator`] trait (one group of ranks, as an
//! NCCL communicator is) and its in-process implementation for worker threads.
//!
//! Semantics (shared with the schedule validator and simulator): `send` is buffered and
//! never blocks; `recv` blocks until the matching message arrived; each (sender, receiver,
//! tag) link delivers in order. Collectives are called by every member of the group in the
//! same order. Every blocking call is bounded by the communicator's timeout and returns at
//! once (with [`CommError::Aborted`]) when any rank of the world has failed, so a failure
//! never leaves another rank waiting.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use thiserror::Error;

/// How long a blocked call sleeps between checks of the world's abort flag. Bounds the
/// time a rank takes to notice another rank's failure (the failure test requires < 10 s).
const ABORT_POLL: Duration = Duration::from_millis(20);

/// Why a communication call failed.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum CommError {
    #[error("{op} on group {group} timed out after {after_s:.1} s waiting for {waiting_for}")]
    Timeout {
        op: &'static str,
        group: String,
        after_s: f64,
        waiting_for: String,
    },
    #[error("aborted: {0}")]
    Aborted(String),
    #[error("{op} on group {group}: {problem}")]
    Invalid {
        op: &'static str,
        group: String,
        problem: String,
    },
}

/// Element-wise reduction of a collective.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    Sum,
    Max,
}

/// Message kinds of point-to-point links: each (sender, receiver, tag) delivers in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tag {
    /// A forward activation to the next virtual stage.
    Activation,
    /// An input gradient to the previous virtual stage.
    Gradient,
}

/// One group of ranks (a data-, tensor- or pipeline-parallel group, or the world).
/// Ranks are positions in the group, `0..size()`. Buffers are `f32`; the reduction order is
/// fixed (rank 0 first), so every member gets bit-identical results.
pub trait Communicator: Send + Sync {
    /// This rank's position in the group.
    fn rank(&self) -> usize;
    /// Ranks in the group.
    fn size(&self) -> usize;
    /// A short name for error messages (`tp[0,1]`).
    fn name(&self) -> &str;
    /// Buffered, non-blocking send of `data` to group rank `to`.
    fn send(&self, to: usize, tag: Tag, data: Vec<f32>) -> Result<(), CommError>;
    /// Blocks until the next message from group rank `from` on `tag` arrives.
    fn recv(&self, from: usize, tag: Tag) -> Result<Vec<f32>, CommError>;
    /// Every member ends with the element-wise reduction of all members' `buf`.
    fn all_reduce(&self, buf: &mut [f32], op: ReduceOp) -> Result<(), CommError>;
    /// The members' equal-length buffers concatenated in rank order.
    fn all_gather(&self, local: &[f32]) -> Result<Vec<f32>, CommError>;
    /// Sums the members' `full` buffers and returns this rank's `1/size` part of the sum
    /// (`full.len()` must divide by the group size).
    fn reduce_scatter(&self, full: &[f32]) -> Result<Vec<f32>, CommError>;
    /// Every member ends with `root`'s `buf`.
    fn broadcast(&self, buf: &mut [f32], root: usize) -> Result<(), CommError>;
    /// Returns once every member has called it.
    fn barrier(&self) -> Result<(), CommError>;
}

/// What a collective round computes.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    AllReduce(ReduceOp),
    AllGather,
    ReduceScatter,
    Broadcast(usize),
    Barrier,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::AllReduce(_) => "all_reduce",
            Kind::AllGather => "all_gather",
            Kind::ReduceScatter => "reduce_scatter",
            Kind::Broadcast(_) => "broadcast",
            Kind::Barrier => "barrier",
        }
    }
}

/// The rendezvous of one collective round.
struct Round {
    /// Counts completed rounds; a rank waits for the round it joined.
    number: u64,
    kind: Option<Kind>,
    inputs: Vec<Option<Vec<f32>>>,
    arrived: usize,
    outputs: Option<Vec<Option<Vec<f32>>>>,
    taken: usize,
}

/// A group by label and members.
type GroupKey = (String, Vec<usize>);

type Mailbox = HashMap<(usize, usize, Tag), VecDeque<Vec<f32>>>;

/// State shared by the members of one group.
struct GroupShared {
    name: String,
    size: usize,
    round: Mutex<Round>,
    round_cv: Condvar,
    mail: Mutex<Mailbox>,
    mail_cv: Condvar,
}

/// State shared by every rank of the world: the abort flag and the groups by membership.
struct WorldShared {
    size: usize,
    timeout: Duration,
    aborted: AtomicBool,
    reason: Mutex<Option<String>>,
    groups: Mutex<HashMap<GroupKey, Arc<GroupShared>>>,
}

/// The in-process world: worker threads of one process. Cloning shares it.
#[derive(Clone)]
pub struct World {
    shared: Arc<WorldShared>,
}

impl fmt::Debug for World {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("World")
            .field("size", &self.shared.size)
            .field("aborted", &self.is_aborted())
            .finish()
    }
}

impl World {
    /// A world of `size` ranks whose blocking calls give up after `timeout`.
    pub fn new(size: usize, timeout: Duration) -> World {
        World {
            shared: Arc::new(WorldShared {
                size,
                timeout,
                aborted: AtomicBool::new(false),
                reason: Mutex::new(None),
                groups: Mutex::new(HashMap::new()),
            }),
        }
    }

    pub fn size(&self) -> usize {
        self.shared.size
    }

    /// The communicator of `rank` (a world rank, which must be in `members`) in the group
    /// of `members` (world ranks, in group-rank order) labelled `label`. Every member must
    /// ask for the same label and members.
    pub fn group(
        &self,
        label: &str,
        members: &[usize],
        rank: usize,
    ) -> Result<InProcessComm, CommError> {
        let position =
            members
                .iter()
                .position(|&m| m == rank)
                .ok_or_else(|| CommError::Invalid {
                    op: "group",
                    group: label.into(),
                    problem: format!("rank {rank} is not a member of {members:?}"),
                })?;
        if let Some(&bad) = members.iter().find(|&&m| m >= self.shared.size) {
            return Err(CommError::Invalid {
                op: "group",
                group: label.into(),
                problem: format!("rank {bad} is outside the world of {}", self.shared.size),
            });
        }
        let key = (label.to_string(), members.to_vec());
        let shared = lock(&self.shared.groups)
            .entry(key)
            .or_insert_with(|| {
                let list: Vec<String> = members.iter().map(|m| m.to_string()).collect();
                Arc::new(GroupShared {
                    name: format!("{label}[{}]", list.join(",")),
                    size: members.len(),
                    round: Mutex::new(Round {
                        number: 0,
                        kind: None,
                        inputs: vec![None; members.len()],
                        arrived: 0,
                        outputs: None,
                        taken: 0,
                    }),
                    round_cv: Condvar::new(),
                    mail: Mutex::new(HashMap::new()),
                    mail_cv: Condvar::new(),
                })
            })
            .clone();
        Ok(InProcessComm {
            group: shared,
            world: self.shared.clone(),
            rank: position,
        })
    }

    /// Stops every rank: blocked and future calls return [`CommError::Aborted`] with
    /// `reason`. The first reason is kept.
    pub fn abort(&self, reason: impl Into<String>) {
        let mut r = lock(&self.shared.reason);
        if r.is_none() {
            *r = Some(reason.into());
        }
        self.shared.aborted.store(true, Ordering::SeqCst);
    }

    pub fn is_aborted(&self) -> bool {
        self.shared.aborted.load(Ordering::SeqCst)
    }

    /// The first reason given to [`World::abort`].
    pub fn abort_reason(&self) -> Option<String> {
        lock(&self.shared.reason).clone()
    }
}

/// Locks a mutex, ignoring poisoning: a panicking rank aborts the world, and the state
/// behind these locks stays consistent (every update is a single assignment or push).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One rank's handle on an in-process group.
pub struct InProcessComm {
    group: Arc<GroupShared>,
    world: Arc<WorldShared>,
    rank: usize,
}

impl fmt::Debug for InProcessComm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} rank {}", self.group.name, self.rank)
    }
}

impl InProcessComm {
    fn aborted(&self) -> Option<CommError> {
        if self.world.aborted.load(Ordering::SeqCst) {
            let reason = lock(&self.world.reason)
                .clone()
                .unwrap_or_else(|| "another rank failed".into());
            Some(CommError::Aborted(reason))
        } else {
            None
        }
    }

    /// Waits on `cv` until `ready` holds, the world aborts or the timeout passes.
    fn wait<'a, T>(
        &self,
        cv: &Condvar,
        mut guard: MutexGuard<'a, T>,
        op: &'static str,
        waiting_for: impl Fn(&T) -> String,
        ready: impl Fn(&T) -> bool,
    ) -> Result<MutexGuard<'a, T>, CommError> {
        let deadline = Instant::now() + self.world.timeout;
        while !ready(&guard) {
            if let Some(e) = self.aborted() {
                return Err(e);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(CommError::Timeout {
                    op,
                    group: self.group.name.clone(),
                    after_s: self.world.timeout.as_secs_f64(),
                    waiting_for: waiting_for(&guard),
                });
            }
            let slice = ABORT_POLL.min(deadline - now);
            guard = cv
                .wait_timeout(guard, slice)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        Ok(guard)
    }

    fn invalid(&self, op: &'static str, problem: String) -> CommError {
        CommError::Invalid {
            op,
            group: self.group.name.clone(),
            problem,
        }
    }

    /// One collective round: deposit `input`, wait for every member, take this rank's
    /// output. The last member to arrive computes every output.
    fn collective(&self, kind: Kind, input: Vec<f32>) -> Result<Vec<f32>, CommError> {
        if let Some(e) = self.aborted() {
            return Err(e);
        }
        let n = self.group.size;
        if n == 1 {
            return compute(kind, vec![Some(input)])
                .map(|mut o| o[0].take().unwrap_or_default())
                .map_err(|p| self.invalid(kind.name(), p));
        }
        let g = &self.group;
        // Wait until the previous round has been fully collected.
        let mut round = self.wait(
            &g.round_cv,
            lock(&g.round),
            kind.name(),
            |r| format!("{} ranks to collect the previous round", n - r.taken),
            |r| r.outputs.is_none(),
        )?;
        if let Some(k) = round.kind {
            if k != kind {
                let problem = format!(
                    "rank {} called {:?} while the others called {:?}",
                    self.rank, kind, k
                );
                drop(round);
                return Err(self.invalid(kind.name(), problem));
            }
        }
        round.kind = Some(kind);
        round.inputs[self.rank] = Some(input);
        round.arrived += 1;
        let number = round.number;
        if round.arrived == n {
            let inputs = std::mem::replace(&mut round.inputs, vec![None; n]);
            match compute(kind, inputs) {
                Ok(out) => round.outputs = Some(out),
                Err(problem) => {
                    drop(round);
                    return Err(self.invalid(kind.name(), problem));
                }
            }
            g.round_cv.notify_all();
        }
        let mut round = self.wait(
            &g.round_cv,
            round,
            kind.name(),
            |r| {
                let missing: Vec<String> = r
                    .inputs
                    .iter()
                    .enumerate()
                    .filter(|(_, x)| x.is_none())
                    .map(|(i, _)| i.to_string())
                    .collect();
                format!("group ranks {}", missing.join(","))
            },
            |r| r.number == number && r.outputs.is_some(),
        )?;
        let out = round
            .outputs
            .as_mut()
            .and_then(|o| o[self.rank].take())
            .unwrap_or_default();
        round.taken += 1;
        if round.taken == n {
            round.outputs = None;
            round.kind = None;
            round.arrived = 0;
            round.taken = 0;
            round.number += 1;
            g.round_cv.notify_all();
        }
        Ok(out)
    }
}

/// Every member's output of one round, from every member's input (all present).
fn compute(kind: Kind, inputs: Vec<Option<Vec<f32>>>) -> Result<Vec<Option<Vec<f32>>>, String> {
    let n = inputs.len();
    let inputs: Vec<Vec<f32>> = inputs.into_iter().map(Option::unwrap_or_default).collect();
    let same_len = |what: &str| -> Result<usize, String> {
        let len = inputs[0].len();
        match inputs.iter().position(|x| x.len() != len) {
            Some(i) => Err(format!(
                "{what}: group rank {i} gave {} elements, rank 0 gave {len}",
                inputs[i].len()
            )),
            None => Ok(len),
        }
    };
    let reduce = |op: ReduceOp| -> Vec<f32> {
        let mut acc = inputs[0].clone();
        for other in &inputs[1..] {
            for (a, b) in acc.iter_mut().zip(other) {
                match op {
                    ReduceOp::Sum => *a += *b,
                    ReduceOp::Max => *a = a.max(*b),
                }
            }
        }
        acc
    };
    Ok(match kind {
        Kind::AllReduce(op) => {
            same_len("all_reduce")?;
            let r = reduce(op);
            vec![Some(r); n]
        }
        Kind::AllGather => {
            same_len("all_gather")?;
            let all: Vec<f32> = inputs.concat();
            vec![Some(all); n]
        }
        Kind::ReduceScatter => {
            let len = same_len("reduce_scatter")?;
            if len % n != 0 {
                return Err(format!(
                    "reduce_scatter of {len} elements over {n} ranks (must divide)"
                ));
            }
            let sum = reduce(ReduceOp::Sum);
            sum.chunks(len / n.max(1))
                .map(|c| Some(c.to_vec()))
                .chain(std::iter::repeat_with(|| Some(Vec::new())))
                .take(n)
                .collect()
        }
        Kind::Broadcast(root) => {
            if root >= n {
                return Err(format!("broadcast root {root} outside a group of {n}"));
            }
            let r = inputs[root].clone();
            vec![Some(r); n]
        }
        Kind::Barrier => vec![Some(Vec::new()); n],
    })
}

impl Communicator for InProcessComm {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.group.size
    }

    fn name(&self) -> &str {
        &self.group.name
    }

    fn send(&self, to: usize, tag: Tag, data: Vec<f32>) -> Result<(), CommError> {
        if let Some(e) = self.aborted() {
            return Err(e);
        }
        if to >= self.group.size {
            return Err(self.invalid(
                "send",
                format!("destination {to} outside a group of {}", self.group.size),
            ));
        }
        lock(&self.group.mail)
            .entry((self.rank, to, tag))
            .or_default()
            .push_back(data);
        self.group.mail_cv.notify_all();
        Ok(())
    }

    fn recv(&self, from: usize, tag: Tag) -> Result<Vec<f32>, CommError> {
        if from >= self.group.size {
            return Err(self.invalid(
                "recv",
                format!("source {from} outside a group of {}", self.group.size),
            ));
        }
        let key = (from, self.rank, tag);
        let mut mail = self.wait(
            &self.group.mail_cv,
            lock(&self.group.mail),
            "recv",
            |_| format!("{tag:?} from group rank {from}"),
            |m| m.get(&key).is_some_and(|q| !q.is_empty()),
        )?;
        Ok(mail
            .get_mut(&key)
            .and_then(VecDeque::pop_front)
            .unwrap_or_default())
    }

    fn all_reduce(&self, buf: &mut [f32], op: ReduceOp) -> Result<(), CommError> {
        let out = self.collective(Kind::AllReduce(op), buf.to_vec())?;
        buf.copy_from_slice(&out);
        Ok(())
    }

    fn all_gather(&self, local: &[f32]) -> Result<Vec<f32>, CommError> {
        self.collective(Kind::AllGather, local.to_vec())
    }

    fn reduce_scatter(&self, full: &[f32]) -> Result<Vec<f32>, CommError> {
        self.collective(Kind::ReduceScatter, full.to_vec())
    }

    fn broadcast(&self, buf: &mut [f32], root: usize) -> Result<(), CommError> {
        let out = self.collective(Kind::Broadcast(root), buf.to_vec())?;
        if out.len() != buf.len() {
            return Err(self.invalid(
                "broadcast",
                format!(
                    "group rank {} has a buffer of {} elements, root {root} sent {}",
                    self.rank,
                    buf.len(),
                    out.len()
                ),
            ));
        }
        buf.copy_from_slice(&out);
        Ok(())
    }

    fn barrier(&self) -> Result<(), CommError> {
        self.collective(Kind::Barrier, Vec::new()).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::thread;

    fn run<T: Send + 'static>(
        n: usize,
        timeout: Duration,
        f: impl Fn(InProcessComm, World) -> T + Send + Sync + 'static,
    ) -> Vec<T> {
        let world = World::new(n, timeout);
        let f = Arc::new(f);
        let members: Vec<usize> = (0..n).collect();
        let handles: Vec<_> = (0..n)
            .map(|r| {
                let (world, f, members) = (world.clone(), f.clone(), members.clone());
                thread::spawn(move || {
                    let c = world.group("w", &members, r).unwrap();
                    f(c, world)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    }

    #[test]
    fn collectives_agree_on_every_rank() {
        let out = run(3, Duration::from_secs(10), |c, _| {
            let r = c.rank() as f32;
            let mut s = vec![r, 1.0];
            c.all_reduce(&mut s, ReduceOp::Sum).unwrap();
            let mut m = vec![r];
            c.all_reduce(&mut m, ReduceOp::Max).unwrap();
            let g = c.all_gather(&[r]).unwrap();
            let rs = c.reduce_scatter(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
            let mut b = vec![r + 10.0];
            c.broadcast(&mut b, 2).unwrap();
            c.barrier().unwrap();
            (s, m, g, rs, b)
        });
        for (i, (s, m, g, rs, b)) in out.into_iter().enumerate() {
            assert_eq!(s, vec![3.0, 3.0]);
            assert_eq!(m, vec![2.0]);
            assert_eq!(g, vec![0.0, 1.0, 2.0]);
            assert_eq!(rs, vec![3.0 * (2 * i + 1) as f32, 3.0 * (2 * i + 2) as f32]);
            assert_eq!(b, vec![12.0]);
        }
    }

    #[test]
    fn links_deliver_in_order_and_sends_do_not_block() {
        let out = run(2, Duration::from_secs(10), |c, _| {
            if c.rank() == 0 {
                for k in 0..5 {
                    c.send(1, Tag::Activation, vec![k as f32]).unwrap();
                }
                c.send(1, Tag::Gradient, vec![99.0]).unwrap();
                vec![]
            } else {
                let g = c.recv(0, Tag::Gradient).unwrap();
                let mut got: Vec<f32> = (0..5)
                    .map(|_| c.recv(0, Tag::Activation).unwrap()[0])
                    .collect();
                got.extend(g);
                got
            }
        });
        assert_eq!(out[1], vec![0.0, 1.0, 2.0, 3.0, 4.0, 99.0]);
    }

    #[test]
    fn a_missing_rank_times_out_and_abort_wakes_waiters() {
        let out = run(2, Duration::from_millis(300), |c, _| {
            if c.rank() == 0 {
                c.barrier().unwrap_err().to_string()
            } else {
                String::new()
            }
        });
        assert!(out[0].contains("timed out"), "{}", out[0]);
        let start = Instant::now();
        let out = run(2, Duration::from_secs(60), |c, world| {
            if c.rank() == 0 {
                c.recv(1, Tag::Activation).unwrap_err().to_string()
            } else {
                world.abort("rank 1 failed");
                String::new()
            }
        });
        assert!(out[0].contains("rank 1 failed"), "{}", out[0]);
        assert!(start.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn a_broadcast_into_a_buffer_of_another_length_is_an_error() {
        let out = run(2, Duration::from_secs(10), |c, _| {
            let mut buf = vec![1.0; 2 + c.rank()];
            c.broadcast(&mut buf, 0).err().map(|e| e.to_string())
        });
        assert_eq!(out[0], None);
        let e = out[1].as_deref().unwrap_or("");
        assert!(e.contains("3 elements, root 0 sent 2"), "{e}");
    }

    #[test]
    fn mismatched_collectives_are_reported() {
        let out = run(2, Duration::from_secs(2), |c, _| {
            if c.rank() == 0 {
                let mut x = vec![1.0];
                c.all_reduce(&mut x, ReduceOp::Sum)
                    .err()
                    .map(|e| e.to_string())
            } else {
                c.all_gather(&[1.0]).err().map(|e| e.to_string())
            }
        });
        assert!(out
            .iter()
            .any(|e| e.as_deref().is_some_and(|e| e.contains("called"))));
    }
}
