//! Mixed clusters: several groups of identical nodes (each group a [`ClusterSpec`]: a
//! preset or a cluster TOML) joined by one link between groups, e.g. 8 DGX H100 nodes and
//! 8 DGX A100 nodes on a shared fabric.
//!
//! The TOML format (units in the key names; GB = 1e9 bytes):
//!
//! ```toml
//! name = "h100+a100"            # optional
//! [[group]]
//! name = "h100"                 # optional; default: the cluster's name
//! cluster = "dgx-h100"          # a preset, or a cluster TOML path (the caller reads it)
//! nodes = 8
//! [[group]]
//! cluster = "dgx-a100-80g"
//! nodes = 8
//! [link]                        # optional; default: the slower group's network
//! bandwidth_gb_per_s = 25       # per GPU, per direction
//! latency_us = 14
//! collective_efficiency = 0.9   # optional
//! ```
//!
//! No I/O here: a group's `cluster` that names a file is resolved by the caller's closure.

use serde::{Deserialize, Serialize};

use crate::cluster::{cluster_preset, ClusterSpec, LinkSpec, CLUSTER_PRESETS};
use crate::error::{Result, SpecError};

/// Most groups a mixed cluster may have (the planner tries every order of the groups along
/// the pipeline: 4! = 24).
pub const MAX_GROUPS: usize = 4;

/// One group of identical nodes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeGroup {
    /// Unique within the mixed cluster (names stages in reports).
    pub name: String,
    pub cluster: ClusterSpec,
    pub nodes: u64,
}

impl NodeGroup {
    pub fn gpus(&self) -> u64 {
        self.nodes * self.cluster.gpus_per_node
    }
}

/// Several groups of nodes and the link between any two of them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MixedCluster {
    pub name: String,
    pub groups: Vec<NodeGroup>,
    /// Between GPUs of different groups: bandwidth per GPU per direction, latency per
    /// transfer.
    pub link: LinkSpec,
    /// Whether `link` is the default (the slower group's inter-node network).
    pub link_is_default: bool,
}

impl MixedCluster {
    /// Checks the groups (2 to [`MAX_GROUPS`], unique names, at least one node each) and
    /// fills the default link; `source` names the input in errors.
    pub fn new(
        name: impl Into<String>,
        groups: Vec<NodeGroup>,
        link: Option<LinkSpec>,
        source: &str,
    ) -> Result<MixedCluster> {
        if !(2..=MAX_GROUPS).contains(&groups.len()) {
            return Err(SpecError::new(
                source,
                "group",
                format!(
                    "a mixed cluster has 2 to {MAX_GROUPS} groups, got {}",
                    groups.len()
                ),
                format!("2 to {MAX_GROUPS} [[group]] tables (one group is a single cluster)"),
            ));
        }
        for (i, g) in groups.iter().enumerate() {
            if g.nodes == 0 {
                return Err(SpecError::new(
                    source,
                    format!("group[{i}].nodes"),
                    "must be ≥ 1, got 0",
                    "integers ≥ 1",
                ));
            }
            if groups[..i].iter().any(|o| o.name == g.name) {
                return Err(SpecError::new(
                    source,
                    format!("group[{i}].name"),
                    format!("`{}` names two groups", g.name),
                    "a unique name per group (set `name` on one of them)",
                ));
            }
        }
        let link_is_default = link.is_none();
        let link = link.unwrap_or_else(|| default_link(&groups));
        Ok(MixedCluster {
            name: name.into(),
            groups,
            link,
            link_is_default,
        })
    }

    pub fn gpus(&self) -> u64 {
        self.groups.iter().map(NodeGroup::gpus).sum()
    }

    /// One line: `8 × dgx-h100 (64 H100-SXM5-80GB) + 8 × dgx-a100-80g (64 …)`.
    pub fn describe(&self) -> String {
        self.groups
            .iter()
            .map(|g| {
                format!(
                    "{}: {} × {} ({} × {})",
                    g.name,
                    g.nodes,
                    g.cluster.name,
                    g.gpus(),
                    g.cluster.gpu.name
                )
            })
            .collect::<Vec<_>>()
            .join(" + ")
    }

    /// The group named `name`, if any.
    pub fn group_index(&self, name: &str) -> Option<usize> {
        self.groups.iter().position(|g| g.name == name)
    }
}

/// The slower group's inter-node network (least bandwidth per GPU; the larger latency):
/// traffic between groups crosses the fabric at the rate of its slower end.
pub fn default_link(groups: &[NodeGroup]) -> LinkSpec {
    let slow = groups
        .iter()
        .map(|g| g.cluster.inter_node)
        .min_by(|a, b| a.bandwidth_bytes_per_s.total_cmp(&b.bandwidth_bytes_per_s))
        .expect("at least one group");
    let latency = groups
        .iter()
        .map(|g| g.cluster.inter_node.latency_s)
        .fold(0.0, f64::max);
    LinkSpec {
        latency_s: latency,
        ..slow
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MixedToml {
    name: Option<String>,
    #[serde(default)]
    group: Vec<GroupToml>,
    link: Option<LinkToml>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GroupToml {
    name: Option<String>,
    cluster: Option<String>,
    nodes: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LinkToml {
    bandwidth_gb_per_s: Option<f64>,
    latency_us: Option<f64>,
    collective_efficiency: Option<f64>,
}

const MIXED_TOML_KEYS: &str = "name, [[group]] name, cluster, nodes, [link] bandwidth_gb_per_s, \
latency_us, collective_efficiency";

/// Parses a mixed-cluster TOML document; `source` names it in errors, `resolve` turns a
/// group's `cluster` value into a [`ClusterSpec`] (a preset, or a file the caller reads).
pub fn mixed_from_toml(
    text: &str,
    source: &str,
    resolve: &dyn Fn(&str) -> Result<ClusterSpec>,
) -> Result<MixedCluster> {
    let doc: MixedToml = toml::from_str(text).map_err(|e| {
        let msg = e.message().replace('\n', " ");
        let field = msg.split('`').nth(1).unwrap_or("(document)").to_string();
        SpecError::new(source, field, msg, MIXED_TOML_KEYS)
    })?;
    let mut groups = Vec::with_capacity(doc.group.len());
    for (i, g) in doc.group.iter().enumerate() {
        let cluster_name = g.cluster.as_deref().ok_or_else(|| {
            SpecError::new(
                source,
                format!("group[{i}].cluster"),
                "is required",
                format!(
                    "{}, or a path to a cluster TOML file",
                    CLUSTER_PRESETS.join(", ")
                ),
            )
        })?;
        let cluster = resolve(cluster_name).map_err(|e| SpecError {
            source: source.into(),
            field: format!("group[{i}].cluster"),
            problem: format!("{}: {}", e.field, e.problem),
            ..e
        })?;
        let nodes = g.nodes.ok_or_else(|| {
            SpecError::new(
                source,
                format!("group[{i}].nodes"),
                "is required",
                "integers ≥ 1",
            )
        })?;
        let nodes = crate::error::positive(source, &format!("group[{i}].nodes"), nodes)?;
        groups.push(NodeGroup {
            name: g.name.clone().unwrap_or_else(|| cluster.name.clone()),
            cluster,
            nodes,
        });
    }
    let link = match &doc.link {
        None => None,
        Some(l) => {
            let base = if groups.is_empty() {
                None
            } else {
                Some(default_link(&groups))
            };
            let positive = |field: &str, v: f64| {
                if v.is_finite() && v > 0.0 {
                    Ok(v)
                } else {
                    Err(SpecError::new(
                        source,
                        format!("link.{field}"),
                        format!("must be a positive number, got {v}"),
                        "numbers > 0",
                    ))
                }
            };
            let bw = l
                .bandwidth_gb_per_s
                .map(|v| positive("bandwidth_gb_per_s", v))
                .transpose()?;
            let lat = l
                .latency_us
                .map(|v| positive("latency_us", v))
                .transpose()?;
            let eff = match l.collective_efficiency {
                Some(e) if !(e > 0.0 && e <= 1.0) => {
                    return Err(SpecError::new(
                        source,
                        "link.collective_efficiency",
                        format!("must be in (0, 1], got {e}"),
                        "numbers in (0, 1]",
                    ))
                }
                e => e,
            };
            base.map(|b| LinkSpec {
                bandwidth_bytes_per_s: bw.map_or(b.bandwidth_bytes_per_s, |v| v * 1e9),
                latency_s: lat.map_or(b.latency_s, |v| v * 1e-6),
                collective_efficiency: eff.unwrap_or(b.collective_efficiency),
            })
        }
    };
    let name = doc.name.unwrap_or_else(|| {
        groups
            .iter()
            .map(|g| g.name.as_str())
            .collect::<Vec<_>>()
            .join("+")
    });
    MixedCluster::new(name, groups, link, source)
}

/// A mixed cluster of presets written inline: `dgx-h100:8,dgx-a100-80g:8` (preset:nodes,
/// comma-separated), with the default link.
pub fn mixed_from_inline(text: &str, source: &str) -> Result<MixedCluster> {
    let mut groups = Vec::new();
    for (i, item) in text.split(',').enumerate() {
        let item = item.trim();
        let Some((preset, nodes)) = item.split_once(':') else {
            return Err(SpecError::new(
                source,
                format!("group[{i}]"),
                format!("`{item}` is not PRESET:NODES"),
                "e.g. dgx-h100:8,dgx-a100-80g:8, or a mixed-cluster TOML file",
            ));
        };
        let cluster = cluster_preset(preset.trim()).map_err(|e| SpecError {
            source: source.into(),
            field: format!("group[{i}].cluster"),
            ..e
        })?;
        let nodes: i64 = nodes.trim().parse().map_err(|_| {
            SpecError::new(
                source,
                format!("group[{i}].nodes"),
                format!("`{}` is not a node count", nodes.trim()),
                "integers ≥ 1",
            )
        })?;
        let nodes = crate::error::positive(source, &format!("group[{i}].nodes"), nodes)?;
        let name = if groups.iter().any(|g: &NodeGroup| g.name == cluster.name) {
            format!("{}-{i}", cluster.name)
        } else {
            cluster.name.clone()
        };
        groups.push(NodeGroup {
            name,
            cluster,
            nodes,
        });
    }
    let name = groups
        .iter()
        .map(|g| g.name.as_str())
        .collect::<Vec<_>>()
        .join("+");
    MixedCluster::new(name, groups, None, source)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn presets(name: &str) -> Result<ClusterSpec> {
        cluster_preset(name)
    }

    #[test]
    fn toml_groups_and_default_link() {
        let m = mixed_from_toml(
            "[[group]]\ncluster = \"dgx-h100\"\nnodes = 8\n[[group]]\nname = \"a\"\ncluster = \"dgx-a100-80g\"\nnodes = 4\n",
            "m.toml",
            &presets,
        )
        .unwrap();
        assert_eq!(m.gpus(), 96);
        assert_eq!(m.groups[1].name, "a");
        assert!(m.link_is_default);
        // DGX A100's 8 × 200 Gb/s is the slower network: 25 GB/s per GPU.
        assert!((m.link.bandwidth_bytes_per_s - 25e9).abs() < 1.0);
    }

    #[test]
    fn toml_link_overrides() {
        let m = mixed_from_toml(
            "[[group]]\ncluster = \"h100\"\nnodes = 1\n[[group]]\ncluster = \"a100\"\nnodes = 1\n[link]\nbandwidth_gb_per_s = 5\nlatency_us = 50\n",
            "m.toml",
            &presets,
        )
        .unwrap();
        assert_eq!(m.link.bandwidth_bytes_per_s, 5e9);
        assert!((m.link.latency_s - 50e-6).abs() < 1e-12);
        assert!(!m.link_is_default);
    }

    #[test]
    fn errors_name_file_field_and_allowed() {
        let e = mixed_from_toml(
            "[[group]]\ncluster = \"h100\"\nnodes = 1\n",
            "m.toml",
            &presets,
        )
        .unwrap_err();
        assert_eq!((e.source.as_str(), e.field.as_str()), ("m.toml", "group"));
        let e = mixed_from_toml(
            "[[group]]\ncluster = \"h100\"\nnodes = 0\n[[group]]\ncluster = \"a100\"\nnodes = 1\n",
            "m.toml",
            &presets,
        )
        .unwrap_err();
        assert_eq!(e.field, "group[0].nodes");
        let e = mixed_from_toml(
            "[[group]]\ncluster = \"tpu\"\nnodes = 1\n[[group]]\ncluster = \"a100\"\nnodes = 1\n",
            "m.toml",
            &presets,
        )
        .unwrap_err();
        assert_eq!(e.field, "group[0].cluster");
        assert!(e.allowed.contains("dgx-h100"), "{e}");
        let e = mixed_from_toml("[[group]]\nnodez = 1\n", "m.toml", &presets).unwrap_err();
        assert!(e.to_string().contains("nodez"), "{e}");
        assert!(e.allowed.contains("nodes"), "{e}");
        let e = mixed_from_toml(
            "[[group]]\ncluster = \"h100\"\nnodes = 1\n[[group]]\ncluster = \"h100\"\nnodes = 1\n",
            "m.toml",
            &presets,
        )
        .unwrap_err();
        assert_eq!(e.field, "group[1].name");
    }

    #[test]
    fn inline_form() {
        let m = mixed_from_inline("dgx-h100:8,dgx-a100-80g:8", "--mixed").unwrap();
        assert_eq!(m.gpus(), 128);
        assert_eq!(m.groups[0].name, "dgx-h100");
        let e = mixed_from_inline("dgx-h100", "--mixed").unwrap_err();
        assert_eq!(e.field, "group[0]");
    }
}
