//! Megatron-Core's pipeline layouts (`--pipeline-model-parallel-layout`, Megatron-LM
//! d98e8a6 `megatron/core/transformer/pipeline_parallel_layer_layout.py`): which layers each
//! virtual pipeline stage builds, written as a string — `E` the embedding, `t` a decoder
//! layer, `m` a multi-token-prediction layer, `L` the loss; `|` between virtual stages in
//! model order (stage `c·pp + r` is chunk `c` of pipeline rank `r`); `(…)*n` and `x*n`
//! repeat, commas are cosmetic. DeepSeek-V3's recipes write, e.g., `Et|(tt|)*30mL`.
//!
//! This module reads a layout into a [`StageMap`]'s blocks per chunk, for the layouts plait
//! can cost: the embedding in the first stage, the MTP layers and the loss in the last
//! (where plait runs the head). It knows nothing of costs.

use crate::error::{Result, SpecError};
use crate::{ModelSpec, ParallelConfig, StageMap};

/// Longest layout accepted once its repetitions are written out: a stage per chunk of the
/// largest pipeline (`MAX_DEGREE`² chunks is far beyond any) with a few layers each.
const MAX_UNROLLED: usize = 1 << 20;

/// What one virtual stage of a layout builds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct LayoutStage {
    blocks: u64,
    embedding: u64,
    mtp: u64,
    loss: u64,
    /// A decoder layer after an MTP layer in this stage.
    block_after_mtp: bool,
}

fn bad(problem: String) -> SpecError {
    SpecError::for_field(
        "pipeline_layout",
        problem,
        "Megatron-Core's layout syntax: E, t, m, L per virtual stage, stages separated by |, \
         (…)*n and x*n to repeat, e.g. Et|(tt|)*30mL",
    )
}

/// The repetition count in `text` from `i` (just past a `*`): its value and where it ends.
fn count(text: &[char], i: usize) -> Result<(usize, usize)> {
    let end = (i..text.len())
        .find(|&j| !text[j].is_ascii_digit())
        .unwrap_or(text.len());
    let digits: String = text[i..end].iter().collect();
    let n = digits
        .parse::<usize>()
        .ok()
        .filter(|&n| n <= MAX_UNROLLED)
        .ok_or_else(|| {
            bad(format!(
                "`*{digits}` is not a repetition count up to {MAX_UNROLLED}"
            ))
        })?;
    Ok((n, end))
}

/// `text` with `(…)*n` unrolled, then `x*n`, as Megatron-Core's `parse_str_to_list` does
/// (one pass each, parentheses not nested), bounded by [`MAX_UNROLLED`].
fn unroll(text: &str) -> Result<String> {
    let text: Vec<char> = text.chars().filter(|&c| c != ',').collect();
    let groups: Vec<char> = unroll_pass(&text, true)?.chars().collect();
    unroll_pass(&groups, false)
}

/// One pass of [`unroll`]: each parenthesised group (`groups`) or each character (not
/// `groups`) followed by `*n` written n times, everything else copied.
fn unroll_pass(text: &[char], groups: bool) -> Result<String> {
    let mut out = String::new();
    let mut i = 0;
    while i < text.len() {
        let group = groups && text[i] == '(';
        let (piece, end) = if group {
            let close = (i + 1..text.len())
                .find(|&j| text[j] == ')')
                .ok_or_else(|| bad("a `(` without its `)`".into()))?;
            let inner: String = text[i + 1..close].iter().collect();
            if inner.is_empty() || inner.contains('(') {
                return Err(bad(format!("`({inner})`: empty or nested parentheses")));
            }
            if text.get(close + 1) != Some(&'*') {
                return Err(bad(format!("`({inner})` without `*n` after it")));
            }
            (inner, close + 1)
        } else {
            (text[i].to_string(), i + 1)
        };
        let repeats = (group || !groups) && text.get(end) == Some(&'*');
        let (n, next) = if repeats {
            count(text, end + 1)?
        } else {
            (1, end)
        };
        if out.len() + piece.len().saturating_mul(n) > MAX_UNROLLED {
            return Err(bad(format!(
                "longer than {MAX_UNROLLED} layers once unrolled"
            )));
        }
        out.push_str(&piece.repeat(n));
        i = next;
    }
    Ok(out)
}

/// The virtual stages of `layout`, in model order.
fn stages(layout: &str) -> Result<Vec<LayoutStage>> {
    unroll(layout)?
        .split('|')
        .map(|stage| {
            let mut s = LayoutStage::default();
            for c in stage.chars() {
                match c {
                    'E' => s.embedding += 1,
                    't' => {
                        s.blocks += 1;
                        s.block_after_mtp |= s.mtp > 0;
                    }
                    'm' => s.mtp += 1,
                    'L' => s.loss += 1,
                    other => return Err(bad(format!("`{other}` is not a layer (E, t, m or L)"))),
                }
            }
            Ok(s)
        })
        .collect()
}

impl StageMap {
    /// The layout Megatron-Core builds from `layout` for `m` under `c` (recompute as
    /// [`StageMap::uniform`] gives it), where plait can cost it: one stage per chunk, the
    /// embedding in the first, the model's MTP layers and the loss in the last after its
    /// decoder layers, and every decoder layer of the model once.
    pub fn from_megatron_layout(
        layout: &str,
        m: &ModelSpec,
        c: &ParallelConfig,
    ) -> Result<StageMap> {
        let stages = stages(layout)?;
        let chunks = c.pp * c.vp;
        if stages.len() as u64 != chunks {
            return Err(bad(format!(
                "{} stages for pp {} × vp {} = {chunks} chunks",
                stages.len(),
                c.pp,
                c.vp
            )));
        }
        let last = stages.len() - 1;
        let misplaced = |what: &str, count: fn(&LayoutStage) -> u64, at: usize, want: u64| {
            let total: u64 = stages.iter().map(count).sum();
            (total != want || count(&stages[at]) != want).then(|| {
                bad(format!(
                    "{total} × {what} where plait needs {want}, all in stage {at} (the {})",
                    if at == 0 { "first" } else { "last" }
                ))
            })
        };
        if let Some(e) = misplaced("E", |s| s.embedding, 0, 1)
            .or_else(|| misplaced("L", |s| s.loss, last, 1))
            .or_else(|| misplaced("m", |s| s.mtp, last, m.mtp_layers))
        {
            return Err(e);
        }
        if stages[last].block_after_mtp {
            return Err(bad("a decoder layer after the MTP layers".into()));
        }
        let blocks: Vec<u64> = stages.iter().map(|s| s.blocks).collect();
        let total: u64 = blocks.iter().sum();
        if total != m.layers {
            return Err(bad(format!(
                "{total} decoder layers (t) for a model of {}",
                m.layers
            )));
        }
        Ok(StageMap::with_chunk_blocks(blocks, c))
    }
}

impl StageMap {
    /// The layout string Megatron-Core reads for this map of a model with `mtp_layers`
    /// multi-token-prediction layers: the embedding before the first stage's blocks, the MTP
    /// layers and the loss after the last's ([`StageMap::from_megatron_layout`] reads it
    /// back).
    pub fn to_megatron_layout(&self, mtp_layers: u64) -> String {
        let repeated = |layer: char, n: u64| match n {
            0 => String::new(),
            1 => layer.to_string(),
            n => format!("{layer}*{n}"),
        };
        let last = self.chunk_blocks.len().saturating_sub(1);
        self.chunk_blocks
            .iter()
            .enumerate()
            .map(|(j, &blocks)| {
                let mut stage = if j == 0 {
                    "E".to_string()
                } else {
                    String::new()
                };
                stage += &repeated('t', blocks);
                if j == last {
                    stage += &repeated('m', mtp_layers);
                    stage.push('L');
                }
                stage
            })
            .collect::<Vec<_>>()
            .join("|")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{model_preset, Schedule};

    fn dsv3(pp: u64, vp: u64) -> (ModelSpec, ParallelConfig) {
        let c = ParallelConfig {
            pp,
            vp,
            schedule: Schedule::megatron_for_chunks(vp),
            ..ParallelConfig::default()
        };
        (model_preset("deepseek-v3").unwrap(), c)
    }

    #[test]
    fn deepseek_v3_recipe_layouts_read_as_megatron_builds_them() {
        // NVIDIA's DeepSeek-V3 recipe on 1,024 H100 (pp 8 × vp 4): the embedding and one
        // layer, thirty stages of two, then the MTP layer and the loss alone.
        let (m, c) = dsv3(8, 4);
        let map = StageMap::from_megatron_layout("Et|(tt|)*30mL", &m, &c).unwrap();
        let mut want = vec![1];
        want.extend([2; 30]);
        want.push(0);
        assert_eq!(map.chunk_blocks, want);
        map.validate(m.layers, &c).unwrap();
        // pp 16 (B200): four layers per stage, the last holding one beside MTP and loss.
        let (m, c) = dsv3(16, 1);
        let map = StageMap::from_megatron_layout("Et*4|(t*4|)*14tmL", &m, &c).unwrap();
        assert_eq!(map.chunk_blocks[0], 4);
        assert_eq!(map.chunk_blocks[15], 1);
        assert!(map.chunk_blocks[1..15].iter().all(|&b| b == 4));
        // Commas are cosmetic, as in Megatron-Core's own example.
        let same = StageMap::from_megatron_layout("Et*4,|(tttt|)*14,tmL", &m, &c).unwrap();
        assert_eq!(same, map);
    }

    #[test]
    fn a_map_written_as_a_layout_reads_back_the_same() {
        // The export writes what the reader reads: DeepSeek-V3's recipe map, with its MTP
        // layer, and uneven maps with empty stages at either end.
        let (m, c) = dsv3(8, 4);
        let map = StageMap::from_megatron_layout("Et|(tt|)*30mL", &m, &c).unwrap();
        let text = map.to_megatron_layout(m.mtp_layers);
        assert!(
            text.starts_with("Et|t*2|") && text.ends_with("|t*2|mL"),
            "{text}"
        );
        assert_eq!(StageMap::from_megatron_layout(&text, &m, &c).unwrap(), map);
        let (m, c) = dsv3(4, 1);
        for blocks in [
            vec![0, 21, 20, 20],
            vec![16, 16, 16, 13],
            vec![20, 21, 20, 0],
        ] {
            let map = StageMap::with_chunk_blocks(blocks, &c);
            let text = map.to_megatron_layout(m.mtp_layers);
            assert_eq!(
                StageMap::from_megatron_layout(&text, &m, &c).unwrap(),
                map,
                "{text}"
            );
        }
    }

    #[test]
    fn layouts_plait_cannot_cost_are_refused_with_the_reason() {
        let (m, c) = dsv3(16, 1);
        let check = |layout: &str, needle: &str| {
            let e = StageMap::from_megatron_layout(layout, &m, &c).unwrap_err();
            assert_eq!(e.field, "pipeline_layout", "{e}");
            assert!(e.to_string().contains(needle), "{layout}: {e}");
        };
        check("Et*4|(t*4|)*13tmL", "15 stages for pp 16");
        check("Et*4|(t*4|)*14tL", "0 × m where plait needs 1");
        check(
            "t*4|E(t*4|)*14tmL",
            "× E where plait needs 1, all in stage 0",
        );
        check("Et*4|(t*4|)*14mtL", "after the MTP layers");
        check("Et*4|(t*4|)*14ttmL", "62 decoder layers");
        check("Et*4|(t*4|)*14txmL", "`x` is not a layer");
        check("Et*4|((t*4|)*2)*7tmL", "nested parentheses");
        check("Et*4|(t*4|*14tmL", "without its `)`");
        check("Et*99999999999|tmL", "repetition count");
        check("Et*4|(t*4|)*900000tmL", "once unrolled");
    }
}
