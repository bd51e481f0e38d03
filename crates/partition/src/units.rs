//! From a checked [`Graph`] to the problem the solvers see: *units* (groups of nodes that
//! must share a device) forming a DAG, numbered in a topological order, with their
//! accelerator/CPU latency, memory and the boundary-communication structure.
//!
//! Contraction follows the semantics of Tarnawski et al. (NeurIPS'20, throughput-dp): a unit
//! is one colour class — its forward nodes and the backward nodes that must stay with them.
//! Only edges between forward nodes order the units (backward nodes follow their class).
//! A class with backward nodes but no forward node gets an empty forward node whose order
//! mirrors its backward edges. Classes on a common forward cycle are fused, since no
//! contiguous split could separate them.
//!
//! Knows nothing about devices, limits or search.

use std::collections::{BTreeMap, HashMap};

use crate::graph::{topological_order, Graph, Indexed};

/// Nodes sharing a cost and a set of boundary-crossing targets, merged: the node's output
/// crosses the boundary of a segment S iff (owner ∈ S and some target ∉ S) or
/// (owner ∉ S and some target ∈ S).
#[derive(Debug, Clone)]
pub(crate) struct CommGroup {
    pub owner: u32,
    pub targets: Vec<u32>,
    pub cost: f64,
}

#[derive(Debug, Clone)]
pub(crate) struct Units {
    /// Original node indices of each unit (forward and backward).
    pub members: Vec<Vec<usize>>,
    /// Predecessors / successors in the unit DAG; every edge goes from a lower to a higher
    /// unit number.
    pub preds: Vec<Vec<u32>>,
    pub succs: Vec<Vec<u32>>,
    pub acc: Vec<f64>,
    pub cpu: Vec<f64>,
    pub mem: Vec<f64>,
    pub supported: Vec<bool>,
    pub comm: Vec<CommGroup>,
    /// Per unit: the comm groups it owns, and those it is a target of.
    pub owned_by: Vec<Vec<u32>>,
    pub targeted_by: Vec<Vec<u32>>,
}

struct UnionFind(Vec<usize>);

impl UnionFind {
    fn find(&mut self, a: usize) -> usize {
        let mut r = a;
        while self.0[r] != r {
            r = self.0[r];
        }
        let mut x = a;
        while self.0[x] != r {
            let next = self.0[x];
            self.0[x] = r;
            x = next;
        }
        r
    }
    fn union(&mut self, a: usize, b: usize) {
        let (ra, rb) = (self.find(a), self.find(b));
        if ra != rb {
            self.0[ra.max(rb)] = ra.min(rb);
        }
    }
}

impl Units {
    pub fn number(&self) -> usize {
        self.members.len()
    }

    /// Contracts the checked graph `g` (with its index `ix`).
    pub fn build(g: &Graph, ix: &Indexed) -> Units {
        let n = g.nodes.len();
        // Colour class of every node; a node without one is a class of its own.
        let mut class_of_key: BTreeMap<i64, usize> = BTreeMap::new();
        let mut class = vec![0usize; n];
        let mut classes = 0;
        for &i in &ix.topo {
            class[i] = match g.nodes[i].color_class {
                Some(c) => *class_of_key.entry(c).or_insert_with(|| {
                    classes += 1;
                    classes - 1
                }),
                None => {
                    classes += 1;
                    classes - 1
                }
            };
        }
        let mut has_forward = vec![false; classes];
        for (i, node) in g.nodes.iter().enumerate() {
            if !node.backward {
                has_forward[class[i]] = true;
            }
        }
        // Order constraints between classes: forward edges, and mirrored backward edges of
        // classes without a forward node.
        let mut class_succ: Vec<Vec<usize>> = vec![vec![]; classes];
        for (s, ds) in ix.succ.iter().enumerate() {
            for &d in ds {
                let (cs, cd) = (class[s], class[d]);
                if cs == cd {
                    continue;
                }
                if !g.nodes[s].backward && !g.nodes[d].backward {
                    class_succ[cs].push(cd);
                } else if g.nodes[s].backward
                    && g.nodes[d].backward
                    && (!has_forward[cs] || !has_forward[cd])
                {
                    class_succ[cd].push(cs);
                }
            }
        }
        for s in &mut class_succ {
            s.sort_unstable();
            s.dedup();
        }
        // Fuse strongly connected classes.
        let mut uf = UnionFind((0..classes).collect());
        for scc in strongly_connected(&class_succ) {
            for w in scc.windows(2) {
                uf.union(w[0], w[1]);
            }
        }
        let mut root_unit: HashMap<usize, usize> = HashMap::new();
        let mut unit_of_class = vec![0usize; classes];
        for (c, u) in unit_of_class.iter_mut().enumerate() {
            let r = uf.find(c);
            let next = root_unit.len();
            *u = *root_unit.entry(r).or_insert(next);
        }
        let raw_units = root_unit.len();
        let mut raw_succ: Vec<Vec<usize>> = vec![vec![]; raw_units];
        for (c, ds) in class_succ.iter().enumerate() {
            for &d in ds {
                let (a, b) = (unit_of_class[c], unit_of_class[d]);
                if a != b {
                    raw_succ[a].push(b);
                }
            }
        }
        for s in &mut raw_succ {
            s.sort_unstable();
            s.dedup();
        }
        // Number the units topologically, the unit holding the earliest node first.
        let mut first_pos = vec![usize::MAX; raw_units];
        for (pos, &i) in ix.topo.iter().enumerate() {
            let u = unit_of_class[class[i]];
            first_pos[u] = first_pos[u].min(pos);
        }
        let order = topological_order(&raw_succ, |u| first_pos[u] as i64)
            .expect("the condensation of a graph is acyclic");
        let mut number = vec![0u32; raw_units];
        for (k, &u) in order.iter().enumerate() {
            number[u] = k as u32;
        }
        let m = raw_units;
        let mut members = vec![vec![]; m];
        for &i in &ix.topo {
            members[number[unit_of_class[class[i]]] as usize].push(i);
        }
        let mut succs: Vec<Vec<u32>> = vec![vec![]; m];
        let mut preds: Vec<Vec<u32>> = vec![vec![]; m];
        for (u, ds) in raw_succ.iter().enumerate() {
            for &d in ds {
                succs[number[u] as usize].push(number[d]);
                preds[number[d] as usize].push(number[u]);
            }
        }
        for v in succs.iter_mut().chain(preds.iter_mut()) {
            v.sort_unstable();
        }
        let unit_of_node: Vec<u32> = (0..n).map(|i| number[unit_of_class[class[i]]]).collect();
        let sum = |f: &dyn Fn(usize) -> f64| -> Vec<f64> {
            members
                .iter()
                .map(|ms| ms.iter().map(|&i| f(i)).sum())
                .collect()
        };
        let acc = sum(&|i| g.nodes[i].accelerator_latency);
        let cpu = sum(&|i| g.nodes[i].cpu_latency);
        let mem = sum(&|i| g.nodes[i].memory_bytes);
        let supported = members
            .iter()
            .map(|ms| ms.iter().all(|&i| g.nodes[i].supported_on_accelerator))
            .collect();
        // Boundary communication: one group per (owner, targets), costs summed.
        let mut groups: BTreeMap<(u32, Vec<u32>), f64> = BTreeMap::new();
        for &i in &ix.topo {
            let cost = g.nodes[i].output_cost;
            if cost <= 0.0 {
                continue;
            }
            let owner = unit_of_node[i];
            let mut targets: Vec<u32> = ix.succ[i]
                .iter()
                .map(|&d| unit_of_node[d])
                .filter(|&u| u != owner)
                .collect();
            targets.sort_unstable();
            targets.dedup();
            if !targets.is_empty() {
                *groups.entry((owner, targets)).or_insert(0.0) += cost;
            }
        }
        let (comm, owned_by, targeted_by) = comm_groups(groups, m);
        Units {
            members,
            preds,
            succs,
            acc,
            cpu,
            mem,
            supported,
            comm,
            owned_by,
            targeted_by,
        }
    }
}

/// Strongly connected components with more than one member (iterative Tarjan).
fn strongly_connected(succ: &[Vec<usize>]) -> Vec<Vec<usize>> {
    let n = succ.len();
    let mut index = vec![usize::MAX; n];
    let mut low = vec![0usize; n];
    let mut on_stack = vec![false; n];
    let mut stack = vec![];
    let mut out = vec![];
    let mut next = 0;
    for root in 0..n {
        if index[root] != usize::MAX {
            continue;
        }
        let mut call: Vec<(usize, usize)> = vec![(root, 0)];
        index[root] = next;
        low[root] = next;
        next += 1;
        stack.push(root);
        on_stack[root] = true;
        while let Some(&mut (v, ref mut k)) = call.last_mut() {
            if *k < succ[v].len() {
                let w = succ[v][*k];
                *k += 1;
                if index[w] == usize::MAX {
                    index[w] = next;
                    low[w] = next;
                    next += 1;
                    stack.push(w);
                    on_stack[w] = true;
                    call.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
            } else {
                call.pop();
                if let Some(&(p, _)) = call.last() {
                    low[p] = low[p].min(low[v]);
                }
                if low[v] == index[v] {
                    let mut comp = vec![];
                    while let Some(w) = stack.pop() {
                        on_stack[w] = false;
                        comp.push(w);
                        if w == v {
                            break;
                        }
                    }
                    if comp.len() > 1 {
                        comp.sort_unstable();
                        out.push(comp);
                    }
                }
            }
        }
    }
    out
}

/// The communication groups of `m` units, from each (owner, sorted targets) pair's summed
/// cost: the groups in key order, and per unit the groups it owns and those it receives.
pub(crate) fn comm_groups(
    groups: BTreeMap<(u32, Vec<u32>), f64>,
    m: usize,
) -> (Vec<CommGroup>, Vec<Vec<u32>>, Vec<Vec<u32>>) {
    let mut owned_by = vec![vec![]; m];
    let mut targeted_by = vec![vec![]; m];
    let comm = groups
        .into_iter()
        .enumerate()
        .map(|(k, ((owner, targets), cost))| {
            owned_by[owner as usize].push(k as u32);
            for &t in &targets {
                targeted_by[t as usize].push(k as u32);
            }
            CommGroup {
                owner,
                targets,
                cost,
            }
        })
        .collect();
    (comm, owned_by, targeted_by)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{Edge, Node};

    #[test]
    fn tarjan_finds_cycles() {
        let succ = vec![vec![1], vec![2], vec![0, 3], vec![4], vec![3]];
        let mut s = strongly_connected(&succ);
        s.sort();
        assert_eq!(s, vec![vec![0, 1, 2], vec![3, 4]]);
    }

    #[test]
    fn classes_on_a_forward_cycle_are_fused() {
        // a1 → b → a2 with a1, a2 in class 7: b cannot be separated from class 7.
        let mut g = Graph::new("t");
        for (id, cc) in [(1, Some(7)), (2, None), (3, Some(7)), (4, None)] {
            let mut n = Node::new(id, 1.0);
            n.color_class = cc;
            g.nodes.push(n);
        }
        for (s, d) in [(1, 2), (2, 3), (3, 4)] {
            g.edges.push(Edge {
                source: s,
                dest: d,
                bytes: 0.0,
            });
        }
        let ix = g.index().unwrap();
        let u = Units::build(&g, &ix);
        assert_eq!(u.number(), 2);
        assert_eq!(u.acc, vec![3.0, 1.0]);
        assert_eq!(u.succs[0], vec![1]);
    }
}
