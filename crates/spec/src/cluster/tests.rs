//! The presets' facts and the TOML format's overrides and errors.

use super::*;

#[test]
fn presets_resolve_and_aliases_agree() {
    for name in CLUSTER_PRESETS {
        let c = cluster_preset(name).unwrap();
        assert_eq!(c.name, name);
        assert!(c.inter_node.bandwidth_bytes_per_s < c.intra_node.bandwidth_bytes_per_s);
    }
    assert_eq!(
        cluster_preset("H200").unwrap(),
        cluster_preset("dgx-h200").unwrap()
    );
}

#[test]
fn h800_is_h100_compute_on_a_narrower_nvlink() {
    let (h800, h100) = (
        cluster_preset("hgx-h800").unwrap(),
        cluster_preset("dgx-h100").unwrap(),
    );
    assert_eq!(
        h800.gpu.peak_bf16_flops_per_s,
        h100.gpu.peak_bf16_flops_per_s
    );
    // DeepSeek-V3's report: NVLink 160 GB/s achieved per direction, IB 50 GB/s.
    let nvlink = h800.intra_node.bandwidth_bytes_per_s * h800.intra_node.collective_efficiency;
    assert!((nvlink / 1e9 - 160.0).abs() < 5.0, "{nvlink}");
    assert_eq!(h800.inter_node.bandwidth_bytes_per_s, 50e9);
    let a100_40 = cluster_preset("dgx-a100-40g").unwrap();
    assert_eq!(a100_40.gpu.memory_bytes, 40.0 * GIB);
}

#[test]
fn grand_teton_is_an_h100_between_sxm_and_nvl_on_hbm2e() {
    let gt = cluster_preset("grand-teton-h100").unwrap();
    let sxm = cluster_preset("dgx-h100").unwrap();
    // torchtitan's benchmark documents: "between SXM and NVL" (H100 NVL: 835.5 dense bf16).
    let peak = gt.gpu.peak_bf16_flops_per_s / TERA;
    assert!(835.5 < peak && peak < 989.4, "{peak}");
    assert_eq!(gt.gpu.memory_bandwidth_bytes_per_s, 2400.0 * GB);
    assert_eq!(gt.gpu.memory_bytes, 96.0 * GIB);
    assert_eq!(gt.gpu.sms, sxm.gpu.sms);
    assert_eq!(gt.intra_node, sxm.intra_node);
    assert_eq!(gt.inter_node.bandwidth_bytes_per_s, 50e9);
}

#[test]
fn selene_gives_each_gpu_one_hdr_nic() {
    let c = cluster_preset("dgx-a100-80g").unwrap();
    assert_eq!(c.inter_node.bandwidth_bytes_per_s, 25e9);
    assert_eq!(c.intra_node.bandwidth_bytes_per_s, 300e9);
}

#[test]
fn toml_overrides_a_base_preset() {
    let c = cluster_from_toml(
        "name = \"roce\"\nbase = \"dgx-h100\"\nnic_gbit_per_s = 200\n[gpu]\nmemory_gib = 94\n",
        "roce.toml",
    )
    .unwrap();
    assert_eq!(c.name, "roce");
    assert_eq!(c.inter_node.bandwidth_bytes_per_s, 25e9);
    assert_eq!(c.gpu.memory_bytes, 94.0 * GIB);
    assert_eq!(c.gpu.peak_bf16_flops_per_s, h100().peak_bf16_flops_per_s);
}

#[test]
fn toml_without_base_needs_the_hardware_numbers() {
    let err = cluster_from_toml("gpus_per_node = 4\n", "c.toml").unwrap_err();
    assert_eq!(err.field, "gpu.peak_bf16_tflops");
    let full = "gpus_per_node = 4\nnvlink_bidirectional_gb_per_s = 400\nnics_per_node = 4\n\
                nic_gbit_per_s = 100\n[gpu]\npeak_bf16_tflops = 100\nmemory_gb = 48\nmemory_bandwidth_gb_per_s = 900\n";
    let c = cluster_from_toml(full, "c.toml").unwrap();
    assert_eq!(c.gpus_per_node, 4);
    assert_eq!(c.inter_node.bandwidth_bytes_per_s, 12.5e9);
}

#[test]
fn toml_errors_name_file_and_key() {
    let err = cluster_from_toml("base = \"dgx-h100\"\ngpus_per_nod = 8\n", "x.toml").unwrap_err();
    let line = err.to_string();
    assert!(line.starts_with("x.toml: `gpus_per_nod`"), "{line}");
    assert!(line.contains("gpus_per_node"), "{line}");
    let err = cluster_from_toml("base = \"dgx-h100\"\ngpus_per_node = 0\n", "x.toml").unwrap_err();
    assert_eq!(err.field, "gpus_per_node");
    let err = cluster_from_toml("base = \"tpu\"\n", "x.toml").unwrap_err();
    assert_eq!(err.field, "base");
    let err =
        cluster_from_toml("base = \"dgx-h100\"\n[gpu]\nmemory_gib = -3\n", "x.toml").unwrap_err();
    assert_eq!(err.field, "gpu.memory_gib");
}

#[test]
fn toml_sets_the_fp8_matmul_fraction() {
    let c = cluster_from_toml(
        "base = \"dgx-h100\"\n[gpu]\nfp8_matmul_efficiency = 0.75\n",
        "f.toml",
    )
    .unwrap();
    assert_eq!(c.gpu.matmul_efficiency_for(Dtype::Fp8), 0.75);
    assert_eq!(c.gpu.matmul_efficiency_for(Dtype::Bf16), 0.801);
    let err = cluster_from_toml(
        "base = \"dgx-h100\"\n[gpu]\nfp8_matmul_efficiency = 2\n",
        "f.toml",
    )
    .unwrap_err();
    assert_eq!(err.field, "gpu.fp8_matmul_efficiency");
}

#[test]
fn superchip_racks_are_hosted_by_grace_and_toml_can_say_which_cpu() {
    for (preset, host) in [
        ("gb200-nvl72", HostCpu::Grace),
        ("gb300-nvl72", HostCpu::Grace),
        ("dgx-h100", HostCpu::X86),
        ("dgx-b200", HostCpu::X86),
        ("l40s-8", HostCpu::X86),
    ] {
        assert_eq!(cluster_preset(preset).unwrap().host_cpu, host, "{preset}");
    }
    let c = cluster_from_toml("base = \"dgx-h100\"\nhost_cpu = \"Grace\"\n", "f.toml").unwrap();
    assert_eq!(c.host_cpu, HostCpu::Grace);
    let err =
        cluster_from_toml("base = \"gb200-nvl72\"\nhost_cpu = \"arm\"\n", "f.toml").unwrap_err();
    assert_eq!(err.field, "host_cpu");
    assert!(err.to_string().contains("x86|grace"), "{err}");
}
