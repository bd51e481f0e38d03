//! The parsed `config.json` and its source (`Config`), with the typed accessors every
//! family parser uses (integers, flags, numbers, head dimension, RoPE θ), each failing with
//! a one-line `SpecError` that names the key, and the wording helpers (`show`, `quote`, the
//! typo hint by edit distance).
//!
//! It knows no family: which keys a model type reads and what they build belong to the
//! family modules.

use serde_json::{Map, Value};

use super::{MAX_DIM, READ_KEYS};
use crate::error::{Result, SpecError};
use crate::model::RopeScaling;
/// The parsed document and its source, with typed accessors that fail naming the key.
pub(super) struct Config<'a> {
    pub(super) source: &'a str,
    pub(super) map: &'a Map<String, Value>,
}

impl Config<'_> {
    pub(super) fn err(
        &self,
        field: &str,
        problem: impl Into<String>,
        allowed: impl Into<String>,
    ) -> SpecError {
        SpecError::new(self.source, field, problem, allowed)
    }

    /// The value of `key`; an explicit `null` counts as absent.
    pub(super) fn get(&self, key: &str) -> Option<&Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    /// "missing", with the closest unknown key within edit distance 2 when there is one.
    pub(super) fn missing_problem(&self, key: &str) -> String {
        let hint = self
            .map
            .keys()
            .filter(|k| !READ_KEYS.contains(&k.as_str()))
            .filter_map(|k| edit_distance_at_most(k, key, 2).map(|d| (d, k)))
            .min_by_key(|&(d, _)| d);
        match hint {
            Some((_, k)) => format!("missing (found `{}` — a typo?)", quote(k)),
            None => "missing".to_string(),
        }
    }

    /// A required integer in `1..=max`.
    pub(super) fn int(&self, key: &str, max: u64) -> Result<u64> {
        match self.get(key) {
            Some(v) => self.check_int(key, v, max),
            None => Err(self.err(key, self.missing_problem(key), int_allowed(max))),
        }
    }

    /// `num_experts_per_tok`: the experts routed per token, at most the `experts` that
    /// `experts_key` gave.
    pub(super) fn routed_top_k(&self, experts_key: &str, experts: u64) -> Result<u64> {
        let top_k = self.int("num_experts_per_tok", MAX_DIM)?;
        if top_k > experts {
            return Err(self.err(
                "num_experts_per_tok",
                format!("{top_k} exceeds {experts_key} = {experts}"),
                format!("an integer from 1 to {experts_key} ({experts})"),
            ));
        }
        Ok(top_k)
    }

    /// An optional integer in `1..=max` (absent or `null` → `None`).
    pub(super) fn opt_int(&self, key: &str, max: u64) -> Result<Option<u64>> {
        self.get(key)
            .map(|v| self.check_int(key, v, max))
            .transpose()
    }

    /// An optional count that may be 0 (absent: 0), such as `num_nextn_predict_layers`.
    pub(super) fn count(&self, key: &str, max: u64) -> Result<u64> {
        match self.get(key) {
            None => Ok(0),
            Some(Value::Number(n)) if n.as_u64() == Some(0) => Ok(0),
            Some(v) => self.check_int(key, v, max),
        }
    }

    pub(super) fn check_int(&self, key: &str, v: &Value, max: u64) -> Result<u64> {
        let problem = match v {
            Value::Number(n) => match (n.as_u64(), n.as_i64()) {
                (Some(0), _) => "must be a positive integer, got 0".to_string(),
                (Some(u), _) if u > max => format!("is too large: {u}"),
                (Some(u), _) => return Ok(u),
                (None, Some(i)) => format!("must be a positive integer, got {i}"),
                (None, None) => format!("must be an integer, got {n}"),
            },
            other => format!("must be a positive integer, got {}", show(other)),
        };
        Err(self.err(key, problem, int_allowed(max)))
    }

    /// An optional boolean with its default.
    pub(super) fn flag(&self, key: &str, default: bool) -> Result<bool> {
        match self.get(key) {
            None => Ok(default),
            Some(Value::Bool(b)) => Ok(*b),
            Some(v) => Err(self.err(
                key,
                format!("must be a boolean, got {}", show(v)),
                "true, false",
            )),
        }
    }

    /// Cross-attention blocks (encoder–decoder use) have no place in `ModelSpec`.
    pub(super) fn no_cross_attention(&self) -> Result<()> {
        if self.flag("add_cross_attention", false)? {
            return Err(self.err(
                "add_cross_attention",
                "cross-attention layers are not supported",
                "false",
            ));
        }
        Ok(())
    }

    /// `head_dim` for `heads` heads: `explicit`, or `hidden / heads`, which must divide.
    /// `reads_head_dim`: whether the family accepts a `head_dim` key (for the hint).
    pub(super) fn head_dim(
        &self,
        (heads_key, heads): (&str, u64),
        (hidden_key, hidden): (&str, u64),
        explicit: Option<u64>,
        reads_head_dim: bool,
    ) -> Result<u64> {
        if let Some(d) = explicit {
            return Ok(d);
        }
        let d = hidden / heads;
        if d * heads != hidden {
            let or = if reads_head_dim {
                ", or an explicit head_dim"
            } else {
                ""
            };
            return Err(self.err(
                heads_key,
                format!("{heads} heads do not divide {hidden_key} = {hidden}"),
                format!("a divisor of {hidden_key} ({hidden}){or}"),
            ));
        }
        Ok(d)
    }

    /// `(kv_key, kv_heads)` key/value heads must divide `(heads_key, heads)` query heads.
    pub(super) fn kv_heads_divide(
        &self,
        (kv_key, kv_heads): (&str, u64),
        (heads_key, heads): (&str, u64),
    ) -> Result<()> {
        if heads.is_multiple_of(kv_heads) {
            return Ok(());
        }
        Err(self.err(
            kv_key,
            format!("{kv_heads} does not divide {heads_key} = {heads}"),
            format!("a divisor of {heads_key} ({heads})"),
        ))
    }

    /// An optional positive finite number with its default.
    pub(super) fn float(&self, key: &str, default: f64) -> Result<f64> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => self.check_float(key, v),
        }
    }

    fn check_float(&self, key: &str, v: &Value) -> Result<f64> {
        match v.as_f64() {
            Some(x) if x.is_finite() && x > 0.0 => Ok(x),
            _ => Err(self.err(
                key,
                format!("must be a positive number, got {}", show(v)),
                "a number > 0",
            )),
        }
    }

    /// RoPE θ: `key` at the top level, else `rope_parameters.rope_theta` (the layout of
    /// transformers 5), else `default`.
    pub(super) fn rope_theta(&self, key: &str, default: f64) -> Result<f64> {
        if self.get(key).is_some() {
            return self.float(key, default);
        }
        match self.get("rope_parameters") {
            Some(Value::Object(m)) => match m.get("rope_theta").filter(|v| !v.is_null()) {
                Some(v) => self.check_float("rope_parameters.rope_theta", v),
                None => Ok(default),
            },
            _ => Ok(default),
        }
    }
}

impl Config<'_> {
    /// The layers `key` lists by index (`None` where absent), as a flag per layer.
    pub(super) fn listed_layers(&self, key: &str, layers: u64) -> Result<Option<Vec<bool>>> {
        let list = match self.get(key) {
            None => return Ok(None),
            Some(Value::Array(a)) => a,
            Some(v) => {
                return Err(self.err(
                    key,
                    format!("must be a list, got {}", show(v)),
                    "a list of layer indices",
                ))
            }
        };
        let mut listed = vec![false; layers as usize];
        for v in list {
            match v.as_u64() {
                Some(i) if i < layers => listed[i as usize] = true,
                _ => {
                    return Err(self.err(
                        key,
                        format!("{} is not a layer index", show(v)),
                        format!("integers from 0 to {}", layers.saturating_sub(1)),
                    ))
                }
            }
        }
        Ok(Some(listed))
    }

    /// A per-layer list under `key` (`None` where absent or empty), each entry read by
    /// `entry` as one of two kinds; `allowed` names the entries.
    pub(super) fn per_layer(
        &self,
        key: &str,
        layers: u64,
        allowed: &str,
        entry: impl Fn(&Value) -> Option<bool>,
    ) -> Result<Option<Vec<bool>>> {
        let list = match self.get(key) {
            None => return Ok(None),
            Some(Value::Array(a)) if a.is_empty() => return Ok(None),
            Some(Value::Array(a)) => a,
            Some(v) => {
                return Err(self.err(
                    key,
                    format!("must be a list, got {}", show(v)),
                    format!("a list of {allowed}, one per layer"),
                ))
            }
        };
        if list.len() as u64 != layers {
            return Err(self.err(
                key,
                format!("lists {} layers, num_hidden_layers is {layers}", list.len()),
                "one entry per layer",
            ));
        }
        list.iter()
            .map(|v| {
                entry(v).ok_or_else(|| {
                    self.err(
                        key,
                        format!("{} is not {allowed}", show(v)),
                        allowed.to_string(),
                    )
                })
            })
            .collect::<Result<_>>()
            .map(Some)
    }
}

impl Config<'_> {
    /// The RoPE rescaling: `rope_scaling`, else `rope_parameters` (transformers 5), by its
    /// `rope_type` (older configs: `type`); `default` or absent → none. Numbers are checked
    /// as `rope_scaling.<key>`.
    pub(super) fn rope_scaling(&self, max_positions: u64) -> Result<Option<RopeScaling>> {
        let (key, m) = match (self.get("rope_scaling"), self.get("rope_parameters")) {
            (Some(Value::Object(m)), _) => ("rope_scaling", m),
            (Some(v), _) => {
                return Err(self.err(
                    "rope_scaling",
                    format!("must be an object, got {}", show(v)),
                    "an object with `rope_type` and its parameters, or null",
                ))
            }
            (None, Some(Value::Object(m))) => ("rope_parameters", m),
            _ => return Ok(None),
        };
        let kind = match m.get("rope_type").or_else(|| m.get("type")) {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::String(s)) => s.as_str(),
            Some(v) => {
                return Err(self.err(
                    &format!("{key}.rope_type"),
                    format!("must be a string, got {}", show(v)),
                    "llama3, yarn, linear, default, …",
                ))
            }
        };
        let number = |name: &str, default: Option<f64>| -> Result<f64> {
            let field = format!("{key}.{name}");
            match m.get(name).filter(|v| !v.is_null()) {
                Some(v) => match v.as_f64() {
                    Some(x) if x.is_finite() && x > 0.0 && x <= MAX_ROPE_FACTOR => Ok(x),
                    _ => Err(self.err(
                        &field,
                        format!(
                            "must be a positive number ≤ {MAX_ROPE_FACTOR}, got {}",
                            show(v)
                        ),
                        format!("a number in (0, {MAX_ROPE_FACTOR}]"),
                    )),
                },
                None => default.ok_or_else(|| {
                    self.err(
                        &field,
                        "missing",
                        format!("a number in (0, {MAX_ROPE_FACTOR}]"),
                    )
                }),
            }
        };
        let original = || -> Result<u64> {
            let name = "original_max_position_embeddings";
            match m.get(name).filter(|v| !v.is_null()) {
                Some(v) => self.check_int(&format!("{key}.{name}"), v, MAX_ROPE_POSITIONS),
                None => Ok(max_positions),
            }
        };
        Ok(Some(match kind {
            "default" => return Ok(None),
            "llama3" => RopeScaling::Llama3 {
                factor: number("factor", None)?,
                low_freq_factor: number("low_freq_factor", None)?,
                high_freq_factor: number("high_freq_factor", None)?,
                original_max_positions: original()?,
            },
            "yarn" => RopeScaling::Yarn {
                factor: number("factor", None)?,
                original_max_positions: original()?,
                beta_fast: number("beta_fast", Some(crate::model::DEFAULT_YARN_BETA_FAST))?,
                beta_slow: number("beta_slow", Some(crate::model::DEFAULT_YARN_BETA_SLOW))?,
                mscale: m
                    .get("mscale")
                    .filter(|v| !v.is_null())
                    .map(|_| number("mscale", None))
                    .transpose()?,
                mscale_all_dim: m
                    .get("mscale_all_dim")
                    .filter(|v| !v.is_null())
                    .map(|_| number("mscale_all_dim", None))
                    .transpose()?,
                attention_factor: m
                    .get("attention_factor")
                    .filter(|v| !v.is_null())
                    .map(|_| number("attention_factor", None))
                    .transpose()?,
                truncate: match m.get("truncate").filter(|v| !v.is_null()) {
                    None => None,
                    Some(Value::Bool(b)) => Some(*b),
                    Some(v) => {
                        return Err(self.err(
                            &format!("{key}.truncate"),
                            format!("must be true or false, got {}", show(v)),
                            "true, false",
                        ))
                    }
                },
            },
            "linear" => RopeScaling::Linear {
                factor: number("factor", None)?,
            },
            other => RopeScaling::Other { name: quote(other) },
        }))
    }
}

/// Bounds of a RoPE rescaling's numbers (far above any published model's: Llama 3.1's
/// factor is 8, DeepSeek-V3's 40).
const MAX_ROPE_FACTOR: f64 = 1e6;
const MAX_ROPE_POSITIONS: u64 = 1 << 40;

pub(super) fn int_allowed(max: u64) -> String {
    format!("a positive integer ≤ {max}")
}

/// A JSON value for an error message: short, on one line.
pub(super) fn show(v: &Value) -> String {
    match v {
        Value::Null => "null".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("the string \"{}\"", quote(s)),
        Value::Array(_) => "an array".to_string(),
        Value::Object(_) => "an object".to_string(),
    }
}

/// `s` with control characters escaped, cut to 40 characters.
pub(super) fn quote(s: &str) -> String {
    const MAX: usize = 40;
    let mut out: String = s.chars().take(MAX).flat_map(char::escape_debug).collect();
    if s.chars().nth(MAX).is_some() {
        out.push('…');
    }
    out
}

/// Levenshtein distance between `a` and `b` if it is at most `max` (in characters).
fn edit_distance_at_most(a: &str, b: &str, max: usize) -> Option<usize> {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    if a.len().abs_diff(b.len()) > max {
        return None;
    }
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.iter().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    let d = prev[b.len()];
    (d <= max).then_some(d)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn edit_distance() {
        assert_eq!(
            edit_distance_at_most("num_hidden_layer", "num_hidden_layers", 2),
            Some(1)
        );
        assert_eq!(edit_distance_at_most("n_heads", "n_head", 2), Some(1));
        assert_eq!(edit_distance_at_most("hiden_szie", "hidden_size", 2), None);
        assert_eq!(
            edit_distance_at_most("hidden_szie", "hidden_size", 2),
            Some(2)
        );
        assert_eq!(edit_distance_at_most("", "abc", 2), None);
        assert_eq!(edit_distance_at_most("abc", "abc", 2), Some(0));
    }

    #[test]
    fn quote_escapes_and_truncates() {
        assert_eq!(quote("a\nb"), "a\\nb");
        assert_eq!(quote(&"x".repeat(50)), format!("{}…", "x".repeat(40)));
    }
}
