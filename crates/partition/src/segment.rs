//! Incremental boundary communication of one growing (or shrinking) segment of units: adding
//! or removing a unit updates the cost in time proportional to the comm groups it touches.
//!
//! The cost of a segment S is the sum, counted once per node, of the `output_cost` of every
//! node whose output crosses S's boundary (a node inside with a consumer outside, or a node
//! outside with a consumer inside) — the max-load objective of shared/data/placement/FORMAT.md.

use crate::units::Units;

pub(crate) struct Segment<'a> {
    units: &'a Units,
    inside: Vec<bool>,
    /// Per comm group: how many of its targets are inside.
    targets_inside: Vec<u32>,
    /// Boundary cost of the current set.
    pub comm: f64,
    /// Extension steps taken since the owner last collected them (the exact search's work
    /// count).
    pub steps: u64,
}

impl<'a> Segment<'a> {
    pub fn new(units: &'a Units) -> Segment<'a> {
        Segment {
            units,
            inside: vec![false; units.number()],
            targets_inside: vec![0; units.comm.len()],
            comm: 0.0,
            steps: 0,
        }
    }

    fn crossing(&self, g: usize) -> bool {
        let group = &self.units.comm[g];
        let k = self.targets_inside[g] as usize;
        if self.inside[group.owner as usize] {
            k < group.targets.len()
        } else {
            k > 0
        }
    }

    fn change(&mut self, g: usize, before: bool) {
        let after = self.crossing(g);
        if before != after {
            let c = self.units.comm[g].cost;
            self.comm += if after { c } else { -c };
        }
    }

    /// Adds unit `v` (not inside).
    pub fn add(&mut self, v: usize) {
        let units = self.units;
        for &g in &units.owned_by[v] {
            let g = g as usize;
            let before = self.targets_inside[g] > 0;
            self.inside[v] = true;
            self.change(g, before);
            self.inside[v] = false;
        }
        self.inside[v] = true;
        for &g in &units.targeted_by[v] {
            let g = g as usize;
            let before = self.crossing(g);
            self.targets_inside[g] += 1;
            self.change(g, before);
        }
    }

    /// Removes unit `v` (inside).
    pub fn remove(&mut self, v: usize) {
        let units = self.units;
        for &g in &units.targeted_by[v] {
            let g = g as usize;
            let before = self.crossing(g);
            self.targets_inside[g] -= 1;
            self.change(g, before);
        }
        for &g in &units.owned_by[v] {
            let g = g as usize;
            let before = self.crossing(g);
            self.inside[v] = false;
            self.change(g, before);
            self.inside[v] = true;
        }
        self.inside[v] = false;
    }

    /// Empties the segment (exactly: the cost is reset to 0).
    pub fn clear(&mut self, members: impl IntoIterator<Item = usize>) {
        for v in members {
            self.inside[v] = false;
            for &g in &self.units.targeted_by[v] {
                self.targets_inside[g as usize] = 0;
            }
        }
        self.comm = 0.0;
    }
}
