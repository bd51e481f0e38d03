//! ONNX import on two small models built here with the prost types: a multi-branch CNN and
//! a one-block transformer. Node count, parameter bytes and FLOPs are checked against hand
//! computations (FLOP conventions in `onnx/ops.rs`: 2 per multiply-accumulate, +1 per output
//! for a bias, 1 per element for elementwise ops, 3 for Softmax, 5 for LayerNormalization,
//! kernel size per output for pooling, 1 per input element for global pooling), and both
//! graphs partition into k stages. Bad files give one-line errors.

use prost::Message;

use plait_cost::{device_for, DeviceModel};
use plait_partition::onnx::proto::{
    tensor_proto::DataType, tensor_shape_proto, type_proto, AttributeProto, GraphProto, ModelProto,
    NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto, ValueInfoProto,
};
use plait_partition::onnx::{import, Costs};
use plait_partition::{partition, Graph, Limits};
use plait_spec::{cluster_preset, Dtype};

fn value(name: &str, dims: &[i64]) -> ValueInfoProto {
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(DataType::Float as i32),
                shape: Some(TensorShapeProto {
                    dim: dims
                        .iter()
                        .map(|&d| tensor_shape_proto::Dimension {
                            denotation: None,
                            value: Some(tensor_shape_proto::dimension::Value::DimValue(d)),
                        })
                        .collect(),
                }),
            })),
        }),
    }
}

fn weight(name: &str, dims: &[i64]) -> TensorProto {
    let n: i64 = dims.iter().product();
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(DataType::Float as i32),
        raw_data: Some(vec![0u8; 4 * n as usize]),
        ..Default::default()
    }
}

fn ints(name: &str, values: &[i64]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: vec![values.len() as i64],
        data_type: Some(DataType::Int64 as i32),
        int64_data: values.to_vec(),
        ..Default::default()
    }
}

fn int_attr(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        i: Some(v),
        r#type: Some(2),
        ..Default::default()
    }
}

fn ints_attr(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        ints: v.to_vec(),
        r#type: Some(7),
        ..Default::default()
    }
}

fn node(
    op: &str,
    name: &str,
    inputs: &[&str],
    outputs: &[&str],
    attrs: Vec<AttributeProto>,
) -> NodeProto {
    NodeProto {
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        name: Some(name.into()),
        op_type: Some(op.into()),
        domain: None,
        attribute: attrs,
    }
}

fn model(graph: GraphProto) -> Vec<u8> {
    ModelProto {
        ir_version: Some(9),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(20),
        }],
        producer_name: Some("plait-test".into()),
        graph: Some(graph),
        ..Default::default()
    }
    .encode_to_vec()
}

/// Conv 3→16 (3×3) → ReLU → two branches (Conv 3×3 and Conv 1×1, 16→16, each + ReLU) →
/// Concat → MaxPool 2×2 → GlobalAveragePool → Flatten → Gemm 32→10 → Softmax, on 1×3×32×32.
fn cnn() -> Vec<u8> {
    let pad1 = || vec![ints_attr("pads", &[1, 1, 1, 1])];
    model(GraphProto {
        name: Some("cnn".into()),
        node: vec![
            node("Conv", "conv1", &["x", "w1", "b1"], &["c1"], pad1()),
            node("Relu", "relu1", &["c1"], &["r1"], vec![]),
            node("Conv", "conv_a", &["r1", "wa", "ba"], &["ca"], pad1()),
            node("Relu", "relu_a", &["ca"], &["ra"], vec![]),
            node("Conv", "conv_b", &["r1", "wb", "bb"], &["cb"], vec![]),
            node("Relu", "relu_b", &["cb"], &["rb"], vec![]),
            node(
                "Concat",
                "cat",
                &["ra", "rb"],
                &["cat"],
                vec![int_attr("axis", 1)],
            ),
            node(
                "MaxPool",
                "pool",
                &["cat"],
                &["mp"],
                vec![
                    ints_attr("kernel_shape", &[2, 2]),
                    ints_attr("strides", &[2, 2]),
                ],
            ),
            node("GlobalAveragePool", "gap", &["mp"], &["gap"], vec![]),
            node("Flatten", "flat", &["gap"], &["fl"], vec![]),
            node(
                "Gemm",
                "fc",
                &["fl", "wf", "bf"],
                &["logits"],
                vec![int_attr("transB", 1)],
            ),
            node(
                "Softmax",
                "softmax",
                &["logits"],
                &["probs"],
                vec![int_attr("axis", 1)],
            ),
        ],
        initializer: vec![
            weight("w1", &[16, 3, 3, 3]),
            weight("b1", &[16]),
            weight("wa", &[16, 16, 3, 3]),
            weight("ba", &[16]),
            weight("wb", &[16, 16, 1, 1]),
            weight("bb", &[16]),
            weight("wf", &[10, 32]),
            weight("bf", &[10]),
        ],
        input: vec![value("x", &[1, 3, 32, 32])],
        output: vec![value("probs", &[1, 10])],
        value_info: vec![],
    })
}

/// One pre-norm transformer block on x: 1×8×16 (2 heads of 8), MLP 16→64→16 with GELU.
fn transformer() -> Vec<u8> {
    let perm = |p: &[i64]| vec![ints_attr("perm", p)];
    model(GraphProto {
        name: Some("block".into()),
        node: vec![
            node(
                "LayerNormalization",
                "ln1",
                &["x", "g1", "be1"],
                &["h"],
                vec![],
            ),
            node("MatMul", "q", &["h", "wq"], &["q"], vec![]),
            node("MatMul", "k", &["h", "wk"], &["k"], vec![]),
            node("MatMul", "v", &["h", "wv"], &["v"], vec![]),
            node("Reshape", "q_heads", &["q", "heads"], &["qh"], vec![]),
            node("Reshape", "k_heads", &["k", "heads"], &["kh"], vec![]),
            node("Reshape", "v_heads", &["v", "heads"], &["vh"], vec![]),
            node("Transpose", "q_t", &["qh"], &["qt"], perm(&[0, 2, 1, 3])),
            node("Transpose", "k_t", &["kh"], &["kt"], perm(&[0, 2, 3, 1])),
            node("Transpose", "v_t", &["vh"], &["vt"], perm(&[0, 2, 1, 3])),
            node("MatMul", "scores", &["qt", "kt"], &["s"], vec![]),
            node("Mul", "scale", &["s", "inv_sqrt_d"], &["s2"], vec![]),
            node(
                "Softmax",
                "attn",
                &["s2"],
                &["p"],
                vec![int_attr("axis", -1)],
            ),
            node("MatMul", "context", &["p", "vt"], &["o"], vec![]),
            node("Transpose", "o_t", &["o"], &["ot"], perm(&[0, 2, 1, 3])),
            node("Reshape", "merge", &["ot", "merged"], &["om"], vec![]),
            node("MatMul", "proj", &["om", "wo"], &["pr"], vec![]),
            node("Add", "res1", &["x", "pr"], &["r1"], vec![]),
            node(
                "LayerNormalization",
                "ln2",
                &["r1", "g2", "be2"],
                &["h2"],
                vec![],
            ),
            node("MatMul", "fc1", &["h2", "w1"], &["f1"], vec![]),
            node("Add", "fc1_bias", &["f1", "b1"], &["f1b"], vec![]),
            node("Gelu", "gelu", &["f1b"], &["gl"], vec![]),
            node("MatMul", "fc2", &["gl", "w2"], &["f2"], vec![]),
            node("Add", "res2", &["r1", "f2"], &["y"], vec![]),
        ],
        initializer: vec![
            weight("g1", &[16]),
            weight("be1", &[16]),
            weight("wq", &[16, 16]),
            weight("wk", &[16, 16]),
            weight("wv", &[16, 16]),
            ints("heads", &[1, 8, 2, 8]),
            weight("inv_sqrt_d", &[]),
            ints("merged", &[1, 8, 16]),
            weight("wo", &[16, 16]),
            weight("g2", &[16]),
            weight("be2", &[16]),
            weight("w1", &[16, 64]),
            weight("b1", &[64]),
            weight("w2", &[64, 16]),
        ],
        input: vec![value("x", &[1, 8, 16])],
        output: vec![value("y", &[1, 8, 16])],
        value_info: vec![],
    })
}

fn h100() -> (plait_spec::ClusterSpec, DeviceModel) {
    let cluster = cluster_preset("dgx-h100").unwrap();
    let device = device_for(&cluster, Dtype::Bf16).unwrap();
    (cluster, device)
}

fn load(bytes: &[u8], name: &str) -> plait_partition::Result<Graph> {
    let (cluster, device) = h100();
    import(bytes, name, &Costs::new(&device, &cluster))
}

fn sum(g: &Graph, f: impl Fn(&plait_partition::Node) -> f64) -> f64 {
    g.nodes.iter().map(f).sum()
}

#[test]
fn cnn_imports_with_hand_computed_numbers() {
    let g = load(&cnn(), "cnn.onnx").unwrap();
    assert_eq!(g.nodes.len(), 12);
    // Parameters: conv1 16·3·3·3 + 16 = 448; conv_a 16·16·3·3 + 16 = 2320;
    // conv_b 16·16·1·1 + 16 = 272; fc 10·32 + 10 = 330; 3370 floats × 4 bytes.
    assert_eq!(sum(&g, |n| n.param_bytes), 3370.0 * 4.0);
    let flops = |name: &str| g.nodes.iter().find(|n| n.name == name).unwrap().flops;
    // conv1: 16·32·32 = 16384 outputs × 27 MACs × 2 + 16384 bias = 901,120.
    assert_eq!(flops("conv1"), 901_120.0);
    // conv_a: 16384 × (16·9 = 144) × 2 + 16384 = 4,734,976.
    assert_eq!(flops("conv_a"), 4_734_976.0);
    // conv_b: 16384 × 16 × 2 + 16384 = 540,672.
    assert_eq!(flops("conv_b"), 540_672.0);
    // pool: 32·16·16 = 8192 outputs × 4; gap: 8192 inputs; fc: 2·10·32 + 10; softmax 3·10.
    assert_eq!(flops("pool"), 32_768.0);
    assert_eq!(flops("gap"), 8_192.0);
    assert_eq!(flops("fc"), 650.0);
    assert_eq!(flops("softmax"), 30.0);
    // Total with the three ReLUs (16384 each) and the free Concat/Flatten:
    // 901,120 + 4,734,976 + 540,672 + 3·16,384 + 32,768 + 8,192 + 650 + 30 = 6,267,560.
    assert_eq!(sum(&g, |n| n.flops), 6_267_560.0);
    // Edges: conv1→relu1, relu1→conv_a, relu1→conv_b, conv_a→relu_a, conv_b→relu_b,
    // relu_a→cat, relu_b→cat, cat→pool, pool→gap, gap→flat, flat→fc, fc→softmax.
    assert_eq!(g.edges.len(), 12);
    let relu1 = g
        .edges
        .iter()
        .find(|e| e.source == 1 && e.dest == 2)
        .unwrap();
    assert_eq!(relu1.bytes, 16.0 * 32.0 * 32.0 * 4.0);
    // Latency: conv_a is an implicit GEMM of m = 32·32 output pixels, n = 16 channels,
    // k = 16·3·3 = 144; relu_a streams 16·32·32 floats in and out; Flatten is a view; every
    // kernel costs at least one kernel issue.
    let (_, device) = h100();
    let issue = plait_cost::device::KERNEL_DISPATCH_S;
    let lat = |name: &str| {
        g.nodes
            .iter()
            .find(|n| n.name == name)
            .unwrap()
            .accelerator_latency
    };
    assert_eq!(lat("conv_a"), device.gemm_s(1024, 16, 144, 1).max(issue));
    assert_eq!(
        lat("relu_a"),
        device.memory_s(2.0 * 16384.0 * 4.0).max(issue)
    );
    assert_eq!(lat("flat"), 0.0);

    for k in [2, 3] {
        let p = partition(&g, &Limits::new(k, 0, 80e9)).unwrap();
        assert!(p.feasible && p.optimal);
        assert!(p.stages.len() <= k);
        assert_eq!(p.stages.iter().map(|s| s.ids.len()).sum::<usize>(), 12);
        let total = sum(&g, |n| n.accelerator_latency);
        assert!(p.max_load >= total / k as f64 && p.max_load <= total + 1.0);
    }
}

#[test]
fn transformer_imports_with_hand_computed_numbers() {
    let g = load(&transformer(), "block.onnx").unwrap();
    assert_eq!(g.nodes.len(), 24);
    // Parameters: LayerNorm 2·(16 + 16) = 64; Wq, Wk, Wv, Wo 4·16·16 = 1024; the scale 1;
    // W1 16·64 = 1024, b1 64, W2 64·16 = 1024: 3201 floats × 4 bytes (the int64 shapes of the
    // Reshapes are not parameters).
    assert_eq!(sum(&g, |n| n.param_bytes), 3201.0 * 4.0);
    let flops = |name: &str| g.nodes.iter().find(|n| n.name == name).unwrap().flops;
    // q: 2 · 8 rows · 16 · 16 = 4096.
    assert_eq!(flops("q"), 4096.0);
    // scores: 2 heads of [8×8]·[8×8]: 2 · 2 · 8 · 8 · 8 = 2048.
    assert_eq!(flops("scores"), 2048.0);
    assert_eq!(flops("attn"), 3.0 * 128.0);
    assert_eq!(flops("ln1"), 5.0 * 128.0);
    // fc1: 2 · 8 · 64 · 16 = 16384.
    assert_eq!(flops("fc1"), 16_384.0);
    // 640 (ln1) + 3·4096 (q, k, v) + 2048 (scores) + 128 (scale) + 384 (softmax)
    // + 2048 (context) + 4096 (proj) + 128 (res1) + 640 (ln2) + 16384 (fc1) + 512 (bias)
    // + 512 (gelu) + 16384 (fc2) + 128 (res2) = 56,320.
    assert_eq!(sum(&g, |n| n.flops), 56_320.0);
    // Shapes flow through Reshape/Transpose: the merged context is 1×8×16 floats.
    let merge = g.nodes.iter().find(|n| n.name == "merge").unwrap();
    assert_eq!(merge.output_bytes, 8.0 * 16.0 * 4.0);
    assert_eq!(merge.accelerator_latency, 0.0);

    for k in [2, 4] {
        let p = partition(&g, &Limits::new(k, 0, 80e9)).unwrap();
        assert!(p.feasible && p.optimal, "{p:?}");
        assert!(p.stages.len() <= k);
        assert_eq!(p.stages.iter().map(|s| s.ids.len()).sum::<usize>(), 24);
    }
}

#[test]
fn bad_models_are_one_line_errors() {
    let bytes = cnn();
    let e = load(&bytes[..bytes.len() / 2], "cut.onnx")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("cut.onnx: `ModelProto`: not a valid ONNX model"),
        "{e}"
    );
    assert_eq!(e.lines().count(), 1);

    let mut m = ModelProto::decode(bytes.as_slice()).unwrap();
    m.graph.as_mut().unwrap().node[1].op_type = Some("LSTM".into());
    let e = load(&m.encode_to_vec(), "lstm.onnx")
        .unwrap_err()
        .to_string();
    assert!(e.contains("node `relu1` (LSTM)"), "{e}");
    assert!(e.contains("operator `LSTM` is not supported"), "{e}");
    assert!(e.contains("Conv|"), "{e}");

    let mut m = ModelProto::decode(transformer().as_slice()).unwrap();
    m.graph
        .as_mut()
        .unwrap()
        .initializer
        .retain(|t| t.name.as_deref() != Some("heads"));
    m.graph.as_mut().unwrap().input.push(value("heads", &[4]));
    let e = load(&m.encode_to_vec(), "dyn.onnx")
        .unwrap_err()
        .to_string();
    assert!(e.contains("node `q_heads` (Reshape)"), "{e}");
    assert!(e.contains("not a constant"), "{e}");

    let mut m = ModelProto::decode(bytes.as_slice()).unwrap();
    m.graph = None;
    let e = load(&m.encode_to_vec(), "empty.onnx")
        .unwrap_err()
        .to_string();
    assert!(e.contains("`ModelProto.graph`"), "{e}");
}

/// tests/data/cnn.onnx, used by the CLI tests, is this file's CNN byte for byte
/// (regenerate with PLAIT_WRITE_FIXTURES=1).
#[test]
fn cnn_fixture_is_current() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/cnn.onnx");
    if std::env::var_os("PLAIT_WRITE_FIXTURES").is_some() {
        std::fs::write(path, cnn()).unwrap();
    }
    assert_eq!(std::fs::read(path).unwrap(), cnn());
}

/// Sizes that overflow or contents that do not match their shape are one clear error or
/// a correct import, never a panic or a wrapped size (issue 15 item 6).
#[test]
fn sizes_are_multiplied_with_checks() {
    let graph = |inputs: Vec<ValueInfoProto>, init: Vec<TensorProto>, nodes: Vec<NodeProto>| {
        model(GraphProto {
            node: nodes,
            name: Some("g".into()),
            initializer: init,
            input: inputs,
            output: vec![],
            ..Default::default()
        })
    };
    let big = 1i64 << 40;
    let cases: Vec<(&str, Vec<u8>, Option<&str>)> = vec![
        // A [3] and a [3, 1] constant broadcast to [3, 3]; their three values are not its
        // nine, so Reshape → Slice must not index them (it panicked).
        (
            "broadcast values",
            graph(
                vec![],
                vec![
                    ints("a", &[1, 2, 3]),
                    {
                        let mut b = ints("b", &[4, 5, 6]);
                        b.dims = vec![3, 1];
                        b
                    },
                    ints("nine", &[9]),
                    ints("s0", &[0]),
                    ints("s9", &[9]),
                    ints("ax", &[0]),
                ],
                vec![
                    node("Add", "add", &["a", "b"], &["c"], vec![]),
                    node("Reshape", "flat", &["c", "nine"], &["d"], vec![]),
                    node("Slice", "slice", &["d", "s0", "s9", "ax"], &["e"], vec![]),
                    node("Reshape", "again", &["d", "e"], &["f"], vec![]),
                ],
            ),
            Some("input 1 (shape) is not a constant"),
        ),
        (
            "broadcast then slice",
            graph(
                vec![],
                vec![
                    ints("a", &[1, 2, 3]),
                    {
                        let mut b = ints("b", &[4, 5, 6]);
                        b.dims = vec![3, 1];
                        b
                    },
                    ints("nine", &[9]),
                    ints("s0", &[0]),
                    ints("s9", &[9]),
                    ints("ax", &[0]),
                ],
                vec![
                    node("Add", "add", &["a", "b"], &["c"], vec![]),
                    node("Reshape", "flat", &["c", "nine"], &["d"], vec![]),
                    node("Slice", "slice", &["d", "s0", "s9", "ax"], &["e"], vec![]),
                ],
            ),
            None,
        ),
        // [2^62, 4] wrapped to 0 elements and 0 bytes.
        (
            "huge input",
            graph(
                vec![value("x", &[1 << 62, 4])],
                vec![],
                vec![node("Relu", "relu", &["x"], &["y"], vec![])],
            ),
            Some("a tensor of shape [4611686018427387904, 4] has more than 2^50 elements"),
        ),
        (
            "gemm output",
            graph(
                vec![value("a", &[big, 8]), value("b", &[8, big])],
                vec![],
                vec![node("MatMul", "mm", &["a", "b"], &["y"], vec![])],
            ),
            Some("the output (1099511627776 × 1099511627776) overflows"),
        ),
        (
            "reshape target",
            graph(
                vec![value("x", &[4])],
                vec![ints("shape", &[big, big, -1])],
                vec![node("Reshape", "r", &["x", "shape"], &["y"], vec![])],
            ),
            Some("a tensor of shape [1099511627776, 1099511627776, 1] has more than 2^50"),
        ),
        (
            "slice step i64::MIN",
            graph(
                vec![value("x", &[8])],
                vec![
                    ints("s", &[7]),
                    ints("e", &[0]),
                    ints("ax", &[0]),
                    ints("st", &[i64::MIN]),
                ],
                vec![node(
                    "Slice",
                    "s",
                    &["x", "s", "e", "ax", "st"],
                    &["y"],
                    vec![],
                )],
            ),
            None,
        ),
        (
            "split sizes",
            graph(
                vec![value("x", &[8])],
                vec![],
                vec![node(
                    "Split",
                    "sp",
                    &["x"],
                    &["y", "z"],
                    vec![ints_attr("split", &[i64::MAX, i64::MAX])],
                )],
            ),
            Some("split"),
        ),
        (
            "conv dilation",
            graph(
                vec![value("x", &[1, 3, 8, 8])],
                vec![weight("w", &[4, 3, 3, 3])],
                vec![node(
                    "Conv",
                    "c",
                    &["x", "w"],
                    &["y"],
                    vec![ints_attr("dilations", &[i64::MAX, 1])],
                )],
            ),
            Some("kernel 3 (dilation 9223372036854775807) is larger than the padded input 8"),
        ),
        (
            "conv pads",
            graph(
                vec![value("x", &[1, 3, 8, 8])],
                vec![weight("w", &[4, 3, 3, 3])],
                vec![node(
                    "Conv",
                    "c",
                    &["x", "w"],
                    &["y"],
                    vec![ints_attr("pads", &[i64::MAX, 0, i64::MAX, 0])],
                )],
            ),
            Some("pads overflow"),
        ),
        (
            "conv group",
            graph(
                vec![value("x", &[1, 4, 8, 8])],
                vec![weight("w", &[4, 2, 3, 3])],
                vec![node(
                    "Conv",
                    "c",
                    &["x", "w"],
                    &["y"],
                    vec![int_attr("group", i64::MAX)],
                )],
            ),
            Some("4 input and 4 output channels do not match"),
        ),
    ];
    for (what, bytes, expected) in cases {
        let r = std::panic::catch_unwind(|| load(&bytes, "m.onnx"));
        let r = r.unwrap_or_else(|_| panic!("{what}: panicked"));
        match (r, expected) {
            (Ok(g), None) => {
                for n in &g.nodes {
                    assert!(n.output_bytes.is_finite(), "{what}: {n:?}");
                }
            }
            (Err(e), Some(x)) => {
                let e = e.to_string();
                assert!(e.contains(x), "{what}: {e}");
                assert_eq!(e.lines().count(), 1, "{what}: {e}");
            }
            (r, x) => panic!("{what}: {:?} but expected {x:?}", r.map(|g| g.nodes.len())),
        }
    }
}
