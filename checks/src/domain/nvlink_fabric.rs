//! What NVML's GPU fabric info means on multi-node NVLink systems (GB200 /
//! GB300 NVL72 racks): the registration states, the health mask's fields
//! and the health summary, as nvml.h lays them out, and which NCCL first
//! carried traffic between trays over NVLink. Every value names the nvml.h
//! that added it (NVIDIA's headers as go-nvml vendors them:
//! github.com/NVIDIA/go-nvml, pkg/nvml/nvml.h, one commit per CUDA release).

use crate::machine::FabricInfo;

/// nvmlGpuFabricState_t (nvml.h 12.0, with nvmlDeviceGetGpuFabricInfo).
pub const STATE_NOT_STARTED: u8 = 1;
pub const STATE_IN_PROGRESS: u8 = 2;
pub const STATE_COMPLETED: u8 = 3;

/// How long after boot a GPU may still be registering with the fabric
/// before that reads as stuck: bringing up the GPU stack takes 3 to 5
/// minutes after a node boots (NVIDIA/gpu-operator#707), and registration
/// follows the driver; twice the upper end leaves room for a whole rack
/// coming up at once.
pub const REGISTRATION_GRACE_SECS: f64 = 600.0;

/// The healthy health mask NVIDIA/nccl#2186 and #1769 report (every 2-bit
/// field of nvml.h 12.8 "false"): 0xaa. Named here for the README and
/// tests; the judging reads each field.
pub const HEALTHY_MASK_12_8: u32 = 0xaa;

/// One 2-bit field of the health mask (nvml.h: 0 not supported, 1 true,
/// 2 false; NVML_GPU_FABRIC_HEALTH_MASK_WIDTH_* = 0x3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flag {
    NotSupported,
    True,
    False,
    /// 3: no value nvml.h defines.
    Invalid,
}

fn flag(mask: u32, shift: u32) -> Flag {
    match (mask >> shift) & 0x3 {
        0 => Flag::NotSupported,
        1 => Flag::True,
        2 => Flag::False,
        _ => Flag::Invalid,
    }
}

/// NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_* (nvml.h).
const SHIFT_DEGRADED_BW: u32 = 0; // nvml.h 12.4
const SHIFT_ROUTE_RECOVERY: u32 = 2; // nvml.h 12.8
const SHIFT_ROUTE_UNHEALTHY: u32 = 4; // nvml.h 12.8
const SHIFT_ACCESS_TIMEOUT_RECOVERY: u32 = 6; // nvml.h 12.8
const SHIFT_INCORRECT_CONFIGURATION: u32 = 8; // nvml.h 13.0, 4 bits (0xf)
const SHIFT_PARTITION_ASSIGNED: u32 = 12; // nvml.h 13.2

/// NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_NOT_SUPPORTED / _NONE.
pub const CONFIG_NOT_SUPPORTED: u32 = 0;
pub const CONFIG_NONE: u32 = 1;

/// The health mask, field by field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthMask {
    /// The GPU's fabric bandwidth is degraded (links down).
    pub degraded_bandwidth: Flag,
    /// A route recovery is in progress.
    pub route_recovery: Flag,
    /// A route to the fabric is unhealthy.
    pub route_unhealthy: Flag,
    /// Recovering from an access timeout.
    pub access_timeout_recovery: Flag,
    /// NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_* (4 bits).
    pub incorrect_configuration: u32,
    /// The GPU is assigned to an NVLink partition.
    pub partition_assigned: Flag,
}

/// Decode nvmlGpuFabricInfo_v2_t.healthMask.
pub fn decode_health_mask(mask: u32) -> HealthMask {
    HealthMask {
        degraded_bandwidth: flag(mask, SHIFT_DEGRADED_BW),
        route_recovery: flag(mask, SHIFT_ROUTE_RECOVERY),
        route_unhealthy: flag(mask, SHIFT_ROUTE_UNHEALTHY),
        access_timeout_recovery: flag(mask, SHIFT_ACCESS_TIMEOUT_RECOVERY),
        incorrect_configuration: (mask >> SHIFT_INCORRECT_CONFIGURATION) & 0xf,
        partition_assigned: flag(mask, SHIFT_PARTITION_ASSIGNED),
    }
}

/// What an incorrect-configuration code says, for codes other than "not
/// supported" and "none".
pub fn incorrect_configuration_text(code: u32) -> String {
    match code {
        // nvml.h 13.0
        2 => "wrong system GUID".to_string(),
        3 => "wrong chassis serial number".to_string(),
        4 => "no NVLink partition".to_string(),
        5 => "not enough NVLinks".to_string(),
        // nvml.h 13.1
        6 => "GPU firmware incompatible with the fabric".to_string(),
        7 => "invalid location in the rack".to_string(),
        // nvml.h 13.2
        8 => "GPU state invalid".to_string(),
        other => format!("incorrect configuration code {other}"),
    }
}

/// NVML_GPU_FABRIC_HEALTH_SUMMARY_* (nvml.h 13.0, v3's healthSummary).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Summary {
    NotSupported,
    Healthy,
    Unhealthy,
    LimitedCapacity,
    Other(u8),
}

pub fn summary(code: u8) -> Summary {
    match code {
        0 => Summary::NotSupported,
        1 => Summary::Healthy,
        2 => Summary::Unhealthy,
        3 => Summary::LimitedCapacity,
        other => Summary::Other(other),
    }
}

/// An all-zero cluster UUID: the GPU is in no multi-node NVLink fabric (an
/// HGX H100 or B200 reports "completed" with one). NCCL reads it the same
/// way ("a zero UUID means we don't have MNNVL fabric info", src/mnnvl.cc).
pub fn is_zero_uuid(hex: &str) -> bool {
    hex.chars().all(|c| c == '0')
}

/// 32 hex digits as nvidia-smi prints a cluster UUID
/// (dc6e40c4-d722-4357-9ba6-5291dd461278); other text as it is.
pub fn uuid_text(hex: &str) -> String {
    if hex.len() != 32 || !hex.is_ascii() {
        return hex.to_string();
    }
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// Registered, without error, into a multi-node NVLink fabric.
pub fn in_multi_node_fabric(info: &FabricInfo) -> bool {
    info.state == STATE_COMPLETED && info.status == 0 && !is_zero_uuid(&info.cluster_uuid)
}

/// The first NCCL that uses NVLink between nodes (MNNVL): 2.20.3
/// (NVIDIA/nccl commit b6475625, "2.20.3-1", adds ncclTopoCheckMNNVL and
/// NCCL_MNNVL_ENABLE), as (major, minor, patch).
pub const NCCL_MNNVL_MIN: (u32, u32, u32) = (2, 20, 3);

/// NVLink 5 per GPU (GB200 NVL72 datasheet: 1.8 TB/s bidirectional, 900
/// GB/s each way) against one 400 Gb/s NIC per GPU (the NVL72 compute
/// tray's ConnectX-7/8, 50 GB/s each way): what traffic between trays
/// loses when it leaves NVLink.
pub const NVLINK5_GBYTES_PER_S: f64 = 900.0;
pub const NIC_400G_GBYTES_PER_S: f64 = 50.0;

/// The NCCL settings that take NVLink between trays away when 0, with what
/// each costs (NVIDIA/nccl src/mnnvl.cc: MNNVL needs cuMem; src/init.cc:
/// NCCL_MNNVL_ENABLE, default 2 = auto).
pub const NCCL_FABRIC_SETTINGS: &[(&str, &str)] = &[
    (
        "NCCL_MNNVL_ENABLE",
        "turns multi-node NVLink off: traffic between trays goes over the network",
    ),
    (
        "NCCL_CUMEM_ENABLE",
        "turns cuMem off, and MNNVL with it (NCCL's MNNVL needs cuMem fabric memory): traffic \
         between trays goes over the network",
    ),
    (
        "NCCL_NVLS_ENABLE",
        "turns NVLink SHARP off: all-reduce inside the NVLink domain loses the switches' \
         in-network reduction",
    ),
];

/// On a node in a multi-node NVLink domain: `name=value` as a finding's
/// (text, hint) when it turns NVLink between trays (or NVLink SHARP) off.
pub fn nccl_setting_cost(name: &str, value: &str) -> Option<(String, String)> {
    let cost = NCCL_FABRIC_SETTINGS.iter().find(|(n, _)| *n == name)?.1;
    (value.trim() == "0").then(|| {
        (
            format!("{name}=0 on a multi-node NVLink rack"),
            format!(
                "{name}=0 {cost} (about {NIC_400G_GBYTES_PER_S:.0} GB/s per GPU instead of \
                 {NVLINK5_GBYTES_PER_S:.0}): unset it unless a known NCCL issue needs it"
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_healthy_mask_of_nccl_2186_reads_every_field_false() {
        let m = decode_health_mask(HEALTHY_MASK_12_8);
        assert_eq!(m.degraded_bandwidth, Flag::False);
        assert_eq!(m.route_recovery, Flag::False);
        assert_eq!(m.route_unhealthy, Flag::False);
        assert_eq!(m.access_timeout_recovery, Flag::False);
        assert_eq!(m.incorrect_configuration, CONFIG_NOT_SUPPORTED);
        assert_eq!(m.partition_assigned, Flag::NotSupported);
    }

    #[test]
    fn each_field_sits_at_its_nvml_h_shift() {
        assert_eq!(decode_health_mask(0x1).degraded_bandwidth, Flag::True);
        assert_eq!(decode_health_mask(0x4).route_recovery, Flag::True);
        assert_eq!(decode_health_mask(0x10).route_unhealthy, Flag::True);
        assert_eq!(decode_health_mask(0x40).access_timeout_recovery, Flag::True);
        assert_eq!(decode_health_mask(0x500).incorrect_configuration, 5);
        assert_eq!(decode_health_mask(0x1000).partition_assigned, Flag::True);
        assert_eq!(decode_health_mask(0x2000).partition_assigned, Flag::False);
        assert_eq!(decode_health_mask(0x3).degraded_bandwidth, Flag::Invalid);
    }

    #[test]
    fn incorrect_configuration_codes_read_as_nvml_h_names_them() {
        assert_eq!(incorrect_configuration_text(2), "wrong system GUID");
        assert_eq!(incorrect_configuration_text(5), "not enough NVLinks");
        assert_eq!(
            incorrect_configuration_text(6),
            "GPU firmware incompatible with the fabric"
        );
        assert_eq!(incorrect_configuration_text(8), "GPU state invalid");
        assert_eq!(
            incorrect_configuration_text(12),
            "incorrect configuration code 12"
        );
    }

    #[test]
    fn nccl_settings_at_zero_name_their_cost() {
        let (text, hint) = nccl_setting_cost("NCCL_CUMEM_ENABLE", " 0").expect("costly");
        assert_eq!(text, "NCCL_CUMEM_ENABLE=0 on a multi-node NVLink rack");
        assert!(hint.contains("MNNVL with it"), "{hint}");
        assert!(
            hint.contains("about 50 GB/s per GPU instead of 900"),
            "{hint}"
        );
        assert!(nccl_setting_cost("NCCL_NVLS_ENABLE", "1").is_none());
        assert!(nccl_setting_cost("NCCL_DEBUG", "0").is_none());
    }

    #[test]
    fn summaries_and_uuids() {
        assert_eq!(summary(1), Summary::Healthy);
        assert_eq!(summary(3), Summary::LimitedCapacity);
        assert_eq!(summary(9), Summary::Other(9));
        assert!(is_zero_uuid("00000000000000000000000000000000"));
        assert!(!is_zero_uuid("dc6e40c4d72243579ba65291dd461278"));
        assert_eq!(
            uuid_text("dc6e40c4d72243579ba65291dd461278"),
            "dc6e40c4-d722-4357-9ba6-5291dd461278"
        );
    }
}
