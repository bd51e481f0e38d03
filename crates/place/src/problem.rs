//! The placement problem: a chain of layers, devices with a kind and a memory, and the
//! links between devices. Built from the explicit-cost JSON of `plait place --graph` or by
//! [`crate::model`] from a transformer and a device set; checked once, here.

use std::collections::{BTreeMap, HashMap};

use serde::Deserialize;

use plait_spec::SpecError;

/// Most layers a chain may have (the solver's tables are layers × device classes).
pub const MAX_LAYERS: usize = 100_000;
/// Most devices a problem may have.
pub const MAX_DEVICES: usize = 1024;
/// Most links a problem may have.
pub const MAX_LINKS: usize = 1_000_000;
/// Most device kinds (columns of a layer's `time_s`).
pub const MAX_KINDS: usize = 1024;

/// One layer of the chain.
#[derive(Debug, Clone, PartialEq)]
pub struct Layer {
    pub name: String,
    /// Seconds on each device kind (index into [`Problem::kinds`]); `None`: this kind
    /// cannot run the layer.
    pub time_s: Vec<Option<f64>>,
    /// Bytes the layer keeps on its device (weights, caches, workspace).
    pub memory_bytes: f64,
    /// Bytes sent to the next stage when this layer ends a stage.
    pub output_bytes: f64,
    /// Messages that carry those bytes (each pays the link latency once): 1 for one
    /// request; 1 + G for a prefill followed by G decode steps.
    pub output_messages: f64,
}

/// One device.
#[derive(Debug, Clone, PartialEq)]
pub struct Device {
    pub name: String,
    /// Index into [`Problem::kinds`].
    pub kind: usize,
    /// Memory the layers may use.
    pub memory_bytes: f64,
}

/// A direct, bidirectional link between two devices.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Link {
    pub a: usize,
    pub b: usize,
    pub bytes_per_s: f64,
    pub latency_s: f64,
}

impl Link {
    /// Time to move `bytes` in `messages` messages.
    pub fn transfer_s(&self, bytes: f64, messages: f64) -> f64 {
        messages * self.latency_s + bytes / self.bytes_per_s
    }
}

/// A checked placement problem.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    /// Device kind names, in the order of `Layer::time_s`.
    pub kinds: Vec<String>,
    pub layers: Vec<Layer>,
    pub devices: Vec<Device>,
    pub links: Vec<Link>,
}

fn err(
    source: &str,
    field: impl Into<String>,
    problem: impl Into<String>,
    allowed: &str,
) -> SpecError {
    SpecError::new(source, field, problem, allowed)
}

fn number(source: &str, field: &str, v: f64, positive: bool) -> Result<f64, SpecError> {
    let ok = v.is_finite() && if positive { v > 0.0 } else { v >= 0.0 };
    if ok {
        Ok(v)
    } else {
        Err(err(
            source,
            field,
            format!(
                "must be a finite number {}, got {v}",
                if positive { "> 0" } else { "≥ 0" }
            ),
            if positive {
                "numbers > 0"
            } else {
                "numbers ≥ 0"
            },
        ))
    }
}

impl Problem {
    /// Checks every number and name; `source` names the input in errors.
    pub fn new(
        kinds: Vec<String>,
        layers: Vec<Layer>,
        devices: Vec<Device>,
        links: Vec<Link>,
        source: &str,
    ) -> Result<Problem, SpecError> {
        if layers.is_empty() || layers.len() > MAX_LAYERS {
            return Err(err(
                source,
                "layers",
                format!("has {} layers", layers.len()),
                &format!("1 to {MAX_LAYERS} layers"),
            ));
        }
        if devices.is_empty() || devices.len() > MAX_DEVICES {
            return Err(err(
                source,
                "devices",
                format!("has {} devices", devices.len()),
                &format!("1 to {MAX_DEVICES} devices"),
            ));
        }
        if kinds.is_empty() || kinds.len() > MAX_KINDS {
            return Err(err(
                source,
                "kinds",
                format!("has {} device kinds", kinds.len()),
                &format!("1 to {MAX_KINDS} kinds"),
            ));
        }
        if links.len() > MAX_LINKS {
            return Err(err(
                source,
                "links",
                format!("has {} links", links.len()),
                &format!("at most {MAX_LINKS} links"),
            ));
        }
        for (i, l) in layers.iter().enumerate() {
            let f = |name: &str| format!("layers[{i}].{name}");
            if l.time_s.len() != kinds.len() {
                return Err(err(
                    source,
                    f("time_s"),
                    format!("has {} entries for {} kinds", l.time_s.len(), kinds.len()),
                    "one entry per device kind",
                ));
            }
            for (k, t) in l.time_s.iter().enumerate() {
                if let Some(t) = t {
                    number(
                        source,
                        &format!("layers[{i}].time_s.{}", kinds[k]),
                        *t,
                        false,
                    )?;
                }
            }
            number(source, &f("memory_bytes"), l.memory_bytes, false)?;
            number(source, &f("output_bytes"), l.output_bytes, false)?;
            number(source, &f("output_messages"), l.output_messages, false)?;
        }
        let mut names = HashMap::new();
        for (i, d) in devices.iter().enumerate() {
            if d.kind >= kinds.len() {
                return Err(err(
                    source,
                    format!("devices[{i}].kind"),
                    format!("kind index {} out of range", d.kind),
                    &kinds.join(", "),
                ));
            }
            number(
                source,
                &format!("devices[{i}].memory_bytes"),
                d.memory_bytes,
                false,
            )?;
            if names.insert(d.name.as_str(), i).is_some() {
                return Err(err(
                    source,
                    format!("devices[{i}].name"),
                    format!("`{}` names two devices", d.name),
                    "distinct device names",
                ));
            }
        }
        for (i, l) in links.iter().enumerate() {
            if l.a >= devices.len() || l.b >= devices.len() {
                return Err(err(
                    source,
                    format!("links[{i}]"),
                    "device index out of range",
                    &format!("0 to {}", devices.len() - 1),
                ));
            }
            if l.a == l.b {
                return Err(err(
                    source,
                    format!("links[{i}]"),
                    format!("links `{}` to itself", devices[l.a].name),
                    "two different devices",
                ));
            }
            number(
                source,
                &format!("links[{i}].bytes_per_s"),
                l.bytes_per_s,
                true,
            )?;
            number(source, &format!("links[{i}].latency_s"), l.latency_s, false)?;
        }
        Ok(Problem {
            kinds,
            layers,
            devices,
            links,
        })
    }

    /// Parses the explicit-cost JSON of `plait place --graph`:
    /// `{"layers":[{"name","time_s":{KIND: s},"memory_bytes","output_bytes"}],
    ///   "devices":[{"name","kind","memory_bytes"}], "links":[{"a","b","bytes_per_s","latency_s"}]}`.
    pub fn from_json(text: &str, source: &str) -> Result<Problem, SpecError> {
        let raw: RawProblem = serde_json::from_str(text).map_err(|e| {
            err(
                source,
                "JSON",
                e.to_string(),
                "{\"layers\":[{\"name\",\"time_s\":{KIND: s},\"memory_bytes\",\"output_bytes\"}], \"devices\":[{\"name\",\"kind\",\"memory_bytes\"}], \"links\":[{\"a\",\"b\",\"bytes_per_s\",\"latency_s\"}]}",
            )
        })?;
        if raw.devices.len() > MAX_DEVICES {
            return Err(err(
                source,
                "devices",
                format!("has {} devices", raw.devices.len()),
                &format!("1 to {MAX_DEVICES} devices"),
            ));
        }
        // Kinds in the order the devices name them.
        let mut kinds: Vec<String> = Vec::new();
        let mut kind_index: BTreeMap<String, usize> = BTreeMap::new();
        for d in &raw.devices {
            if !kind_index.contains_key(&d.kind) {
                kind_index.insert(d.kind.clone(), kinds.len());
                kinds.push(d.kind.clone());
            }
        }
        let mut layers = Vec::with_capacity(raw.layers.len().min(MAX_LAYERS));
        for (i, l) in raw.layers.into_iter().enumerate() {
            if i >= MAX_LAYERS {
                return Err(err(
                    source,
                    "layers",
                    "too many layers",
                    &format!("1 to {MAX_LAYERS} layers"),
                ));
            }
            let mut time_s = vec![None; kinds.len()];
            for (k, t) in l.time_s {
                // A kind no device has is harmless and ignored.
                if let Some(&ki) = kind_index.get(&k) {
                    time_s[ki] = Some(t);
                }
            }
            layers.push(Layer {
                name: l.name.unwrap_or_else(|| format!("layer{i}")),
                time_s,
                memory_bytes: l.memory_bytes,
                output_bytes: l.output_bytes,
                output_messages: 1.0,
            });
        }
        let names: HashMap<&str, usize> = raw
            .devices
            .iter()
            .enumerate()
            .map(|(i, d)| (d.name.as_str(), i))
            .collect();
        let allowed_names = || {
            let mut v: Vec<&str> = raw.devices.iter().map(|d| d.name.as_str()).collect();
            v.truncate(20);
            v.join(", ")
        };
        let mut links = Vec::with_capacity(raw.links.len().min(MAX_LINKS));
        for (i, l) in raw.links.iter().enumerate() {
            if i >= MAX_LINKS {
                return Err(err(
                    source,
                    "links",
                    "too many links",
                    &format!("at most {MAX_LINKS}"),
                ));
            }
            let end = |field: &str, name: &str| {
                names.get(name).copied().ok_or_else(|| {
                    err(
                        source,
                        format!("links[{i}].{field}"),
                        format!("no device is named `{name}`"),
                        &allowed_names(),
                    )
                })
            };
            links.push(Link {
                a: end("a", &l.a)?,
                b: end("b", &l.b)?,
                bytes_per_s: l.bytes_per_s,
                latency_s: l.latency_s,
            });
        }
        let devices = raw
            .devices
            .iter()
            .map(|d| Device {
                name: d.name.clone(),
                kind: kind_index[&d.kind],
                memory_bytes: d.memory_bytes,
            })
            .collect();
        Problem::new(kinds, layers, devices, links, source)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProblem {
    layers: Vec<RawLayer>,
    devices: Vec<RawDevice>,
    #[serde(default)]
    links: Vec<RawLink>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLayer {
    #[serde(default)]
    name: Option<String>,
    time_s: BTreeMap<String, f64>,
    #[serde(default)]
    memory_bytes: f64,
    #[serde(default)]
    output_bytes: f64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDevice {
    name: String,
    kind: String,
    memory_bytes: f64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLink {
    a: String,
    b: String,
    bytes_per_s: f64,
    #[serde(default)]
    latency_s: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    const OK: &str = r#"{"layers":[{"name":"l0","time_s":{"gpu":1.0,"cpu":4.0},"memory_bytes":5,"output_bytes":10}],
        "devices":[{"name":"g","kind":"gpu","memory_bytes":8},{"name":"c","kind":"cpu","memory_bytes":100}],
        "links":[{"a":"g","b":"c","bytes_per_s":10,"latency_s":0.5}]}"#;

    #[test]
    fn parses_the_issue_format() {
        let p = Problem::from_json(OK, "t.json").unwrap();
        assert_eq!(p.kinds, vec!["gpu", "cpu"]);
        assert_eq!(p.layers[0].time_s, vec![Some(1.0), Some(4.0)]);
        assert_eq!(p.links[0].transfer_s(10.0, 1.0), 1.5);
    }

    #[test]
    fn errors_name_file_field_and_allowed_values() {
        let bad = OK.replace("\"b\":\"c\"", "\"b\":\"x\"");
        let e = Problem::from_json(&bad, "t.json").unwrap_err().to_string();
        assert!(
            e.starts_with("t.json: `links[0].b`: no device is named `x`"),
            "{e}"
        );
        assert!(e.contains("allowed: g, c"), "{e}");
        let bad = OK.replace("\"memory_bytes\":8", "\"memory_bytes\":-8");
        let e = Problem::from_json(&bad, "t.json").unwrap_err().to_string();
        assert!(e.contains("`devices[0].memory_bytes`"), "{e}");
        let bad = OK.replace("\"bytes_per_s\":10", "\"bytes_per_s\":0");
        let e = Problem::from_json(&bad, "t.json").unwrap_err().to_string();
        assert!(
            e.contains("`links[0].bytes_per_s`") && e.contains("> 0"),
            "{e}"
        );
        let bad = OK.replace("\"gpu\":1.0", "\"gpu\":-1.0");
        let e = Problem::from_json(&bad, "t.json").unwrap_err().to_string();
        assert!(e.contains("`layers[0].time_s.gpu`"), "{e}");
        let bad = OK.replace("\"output_bytes\"", "\"outptu_bytes\"");
        let e = Problem::from_json(&bad, "t.json").unwrap_err().to_string();
        assert!(
            e.contains("t.json: `JSON`") && e.contains("outptu_bytes"),
            "{e}"
        );
    }
}
